//! Calls' media through a relay (rtpengine, asked over its NG protocol:
//! [`crate::proto::ng`]): which calls are relayed, the flags each leg's
//! session description gets, and the table of the questions asked of the
//! relays with the messages parked on them (RFC 3264 offers and answers
//! wait for the relay's rewrite, then go on).
//!
//! The table is proto state; the driver's media thread takes the
//! questions ([`MediaTable::take_asked`]), runs them on the NG client and
//! hands each answer back ([`MediaTable::answered`] gives the messages
//! that waited, which the driver hands in again with the [`Outcome`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sip_core::{Message, Transport};

use crate::config_media::{MediaMode, MediaSettings};
use crate::proto::guard::SourceKey;
use crate::proto::ng::{Command, Failure, Media};
use crate::proto::parked::{Bounds, Parked, Waiting};
use crate::shards::Shards;

/// Messages parked on the relays at once, and their bytes.
const PARKED: Bounds = Bounds {
    questions: 2048,
    per_question: 1,
    requests: 2048,
    bytes: 8 << 20,
    questions_per_source: 2048 / 16,
    requests_per_source: 2048 / 16,
};
/// Commands queued for the media thread that nothing waits on (deletes);
/// past it they are dropped and counted (the relay's own timeout ends
/// those sessions).
const MAX_TOLD: usize = 4096;
/// A relayed call with no final answer after this long is deleted (timer
/// C is 3 minutes, RFC 3261 §16.6).
pub const UNANSWERED_FOR: Duration = Duration::from_secs(200);
/// A relayed call whose BYE never came is deleted after this long.
pub const LONGEST_CALL: Duration = Duration::from_secs(6 * 3600);

/// SDES suites never offered to a phone, as the relay is told so: no
/// encryption (NULL) or a mode few stacks implement (F8).
const NO_WEAK_SUITES: &[&str] = &[
    "no-NULL_HMAC_SHA1_80",
    "no-NULL_HMAC_SHA1_32",
    "no-F8_128_HMAC_SHA1_80",
    "no-F8_128_HMAC_SHA1_32",
];
/// What a browser's leg gets: ICE and DTLS-SRTP.
const TO_BROWSER: &[(&str, &str)] = &[
    ("transport-protocol", "UDP/TLS/RTP/SAVPF"),
    ("ICE", "force"),
];
/// What a SIP phone's leg gets: plain RTP, or SDES-SRTP; no ICE, no DTLS.
const TO_PHONE_RTP: &[(&str, &str)] = &[
    ("transport-protocol", "RTP/AVP"),
    ("ICE", "remove"),
    ("DTLS", "off"),
];
const TO_PHONE_SRTP: &[(&str, &str)] = &[
    ("transport-protocol", "RTP/SAVP"),
    ("ICE", "remove"),
    ("DTLS", "off"),
];

/// How the relay answered the question a message waited on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The session description to pass on instead of the message's own.
    Sdp(String),
    /// No usable answer (no relay, a timeout, an answer without SDP): why.
    Failed(String),
    /// The relay refused the session description (its words): the offer
    /// is not acceptable.
    Refused(String),
}

impl Outcome {
    /// The outcome of a relay's failure.
    pub fn failure(why: &Failure) -> Self {
        Self::Failed(
            match why {
                Failure::NoRelay => "no media relay is up",
                Failure::Busy => "too many media relay commands in flight",
                Failure::Timeout => "the media relay did not answer",
            }
            .to_owned(),
        )
    }
}

/// What became of a message that needs the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// It waits for the answer; wake the media thread.
    Parked,
    /// A copy of it waits already: it is a retransmission.
    Duplicate,
    /// No room: treat as a relay failure.
    Full,
}

/// A relayed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The caller's From tag (the relay knows the call by it).
    pub from_tag: String,
    /// A 2xx answered its INVITE.
    pub established: bool,
    /// The caller offered SRTP (its answer keeps it).
    pub caller_srtp: bool,
    /// When its offer was relayed.
    pub since: Instant,
}

/// Where a relayed call stands, as the proxy asks of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallState {
    /// A 2xx answered its INVITE.
    pub established: bool,
    /// The caller offered SRTP (its answer keeps it).
    pub caller_srtp: bool,
}

#[derive(Debug)]
struct State {
    waiting: Waiting<u64>,
    asked: Vec<(u64, Command)>,
    calls: HashMap<String, Call>,
    /// The media thread stopped: nothing is asked any more.
    closed: bool,
    /// Each relay and whether it is up, as the media thread last saw.
    relays: Vec<(SocketAddr, bool)>,
}

/// Counts for the operator.
#[derive(Debug, Default)]
pub struct MediaCounts {
    /// Offers, answers and deletes sent, by command.
    pub offers: AtomicU64,
    /// Answers sent.
    pub answers: AtomicU64,
    /// Deletes sent.
    pub deletes: AtomicU64,
    /// Commands the relays answered with a session description or "ok".
    pub ok: AtomicU64,
    /// Commands that failed (no relay, timeout, error answer).
    pub failed: AtomicU64,
    /// Calls refused for `require_srtp` (488).
    pub refused_unencrypted: AtomicU64,
    /// Calls answered 503 because no relay could take them.
    pub refused_no_relay: AtomicU64,
    /// Calls passed on unrelayed after a relay failure.
    pub passed_unrelayed: AtomicU64,
    /// Deletes dropped: the queue was full.
    pub deletes_dropped: AtomicU64,
    /// Datagrams at the relay sockets refused: not from a relay, an
    /// unknown cookie, not an answer (the NG client's count).
    pub answers_refused: AtomicU64,
    /// Relays up now (kept by the media thread).
    pub relays_up: AtomicUsize,
}

/// The questions asked of the media relays, the messages waiting on them,
/// and the calls relayed; see the module documentation.
#[derive(Debug)]
pub struct MediaTable {
    state: Shards<State>,
    max_calls: usize,
    /// Counts for the operator.
    pub counts: MediaCounts,
}

impl MediaTable {
    /// An empty table for `settings`.
    pub fn new(settings: &MediaSettings) -> Self {
        Self {
            state: Shards::new(1, || State {
                waiting: Waiting::new(PARKED),
                asked: Vec::new(),
                calls: HashMap::new(),
                closed: false,
                relays: Vec::new(),
            }),
            max_calls: settings.max_calls,
            counts: MediaCounts::default(),
        }
    }

    /// Asks `command` for `parked`, known by `question` (a retransmission
    /// of it has the same question), within the share of its `source`
    /// (`None`: one that carries many parties' requests).
    pub fn ask(
        &self,
        question: u64,
        command: Command,
        parked: Parked,
        source: Option<SourceKey>,
    ) -> Asked {
        let mut s = self.state.lock(0);
        if s.closed {
            return Asked::Full;
        }
        if s.waiting.asked(&question) {
            return Asked::Duplicate;
        }
        let new_call = match &command {
            Command::Offer(m) => !s.calls.contains_key(&m.call_id),
            _ => false,
        };
        if (new_call && s.calls.len() >= self.max_calls) || !s.waiting.ask(question, source) {
            return Asked::Full;
        }
        if s.waiting.park(&question, parked, source).is_err() {
            drop(s.waiting.answered(&question));
            return Asked::Full;
        }
        match &command {
            Command::Offer(_) => &self.counts.offers,
            _ => &self.counts.answers,
        }
        .fetch_add(1, Ordering::Relaxed);
        s.asked.push((question, command));
        Asked::Parked
    }

    /// Ends the relayed call `call_id` (BYE, CANCEL, a failure, a timeout):
    /// a delete is queued for the media thread. `false` when the call was
    /// not relayed (nothing to wake).
    pub fn end(&self, call_id: &str) -> bool {
        let mut s = self.state.lock(0);
        let Some((call_id, call)) = s.calls.remove_entry(call_id) else {
            return false;
        };
        Self::tell_delete(&mut s, &self.counts, call_id, call.from_tag)
    }

    /// The INVITE that began the relayed call `call_id` (its caller's
    /// From tag `from_tag`) was refused before it went out: the call ends
    /// at the relay, unless it is another caller's or already answered.
    /// `false` when nothing was ended (nothing to wake).
    pub fn abandon(&self, call_id: &str, from_tag: &str) -> bool {
        let mut s = self.state.lock(0);
        match s.calls.get(call_id) {
            Some(c) if c.from_tag == from_tag && !c.established => {}
            _ => return false,
        }
        let Some((call_id, call)) = s.calls.remove_entry(call_id) else {
            return false;
        };
        Self::tell_delete(&mut s, &self.counts, call_id, call.from_tag)
    }

    fn tell_delete(s: &mut State, counts: &MediaCounts, call_id: String, from_tag: String) -> bool {
        if s.asked.len() >= MAX_TOLD {
            counts.deletes_dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        counts.deletes.fetch_add(1, Ordering::Relaxed);
        let delete = Command::Delete {
            call_id,
            from_tag,
            to_tag: None,
        };
        s.asked.push((0, delete));
        true
    }

    /// The commands asked since the last call, each with its question (0:
    /// nothing waits on its answer).
    pub fn take_asked(&self) -> Vec<(u64, Command)> {
        std::mem::take(&mut self.state.lock(0).asked)
    }

    /// `question` is answered: the message that waited on it.
    pub fn answered(&self, question: u64) -> Vec<Parked> {
        self.state.lock(0).waiting.answered(&question)
    }

    /// The media thread stops: every message still waiting.
    pub fn close(&self) -> Vec<Parked> {
        let mut s = self.state.lock(0);
        s.closed = true;
        s.waiting.drain()
    }

    /// Where the relayed call `call_id` stands, if it is one.
    pub fn call(&self, call_id: &str) -> Option<CallState> {
        self.state.lock(0).calls.get(call_id).map(|c| CallState {
            established: c.established,
            caller_srtp: c.caller_srtp,
        })
    }

    /// The offer of `call_id` (From tag `from_tag`; `srtp`: it offered
    /// SRTP) was relayed at `now`.
    pub fn relaying(&self, call_id: &str, from_tag: &str, srtp: bool, now: Instant) {
        let mut s = self.state.lock(0);
        if s.calls.contains_key(call_id) {
            return;
        }
        let call = Call {
            from_tag: from_tag.to_owned(),
            established: false,
            caller_srtp: srtp,
            since: now,
        };
        s.calls.insert(call_id.to_owned(), call);
    }

    /// A 2xx answered `call_id`'s INVITE.
    pub fn established(&self, call_id: &str) {
        if let Some(c) = self.state.lock(0).calls.get_mut(call_id) {
            c.established = true;
        }
    }

    /// Ends the calls left behind at `now` (no final answer after
    /// [`UNANSWERED_FOR`], or older than [`LONGEST_CALL`]): how many.
    pub fn sweep(&self, now: Instant) -> usize {
        let mut s = self.state.lock(0);
        let old: Vec<(String, String)> = s
            .calls
            .iter()
            .filter(|(_, c)| {
                let age = now.saturating_duration_since(c.since);
                age > LONGEST_CALL || (!c.established && age > UNANSWERED_FOR)
            })
            .map(|(id, c)| (id.clone(), c.from_tag.clone()))
            .collect();
        for (id, tag) in &old {
            s.calls.remove(id);
            Self::tell_delete(&mut s, &self.counts, id.clone(), tag.clone());
        }
        old.len()
    }

    /// The media thread saw `relays` (each with whether it is up).
    pub fn set_relays(&self, relays: Vec<(SocketAddr, bool)>) {
        let up = relays.iter().filter(|(_, up)| *up).count();
        self.counts.relays_up.store(up, Ordering::Relaxed);
        self.state.lock(0).relays = relays;
    }

    /// Each relay and whether it is up.
    pub fn relays(&self) -> Vec<(SocketAddr, bool)> {
        self.state.lock(0).relays.clone()
    }

    /// The Prometheus text of the relayed calls and the relays.
    pub fn render(&self, o: &mut String) {
        use std::fmt::Write;
        let c = &self.counts;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let _ = writeln!(
            o,
            "# HELP sipsec_media_commands_total Commands sent to the media relays (rtpengine NG), by command.\n\
# TYPE sipsec_media_commands_total counter\n\
sipsec_media_commands_total{{command=\"offer\"}} {}\n\
sipsec_media_commands_total{{command=\"answer\"}} {}\n\
sipsec_media_commands_total{{command=\"delete\"}} {}\n\
# HELP sipsec_media_outcomes_total Media relay commands answered usefully (ok) or not (failed: no relay, timeout, error answer).\n\
# TYPE sipsec_media_outcomes_total counter\n\
sipsec_media_outcomes_total{{outcome=\"ok\"}} {}\n\
sipsec_media_outcomes_total{{outcome=\"failed\"}} {}\n\
# HELP sipsec_media_calls_refused_total Calls refused: 503 (no relay took them) or 488 (SRTP required).\n\
# TYPE sipsec_media_calls_refused_total counter\n\
sipsec_media_calls_refused_total{{reason=\"no_relay\"}} {}\n\
sipsec_media_calls_refused_total{{reason=\"unencrypted\"}} {}\n\
# HELP sipsec_media_unrelayed_total Offers and answers passed on unrelayed after a relay failure.\n\
# TYPE sipsec_media_unrelayed_total counter\n\
sipsec_media_unrelayed_total {}\n\
# HELP sipsec_media_answers_refused_total Datagrams at the media relay sockets refused: not from a relay, an unknown cookie, not an answer.\n\
# TYPE sipsec_media_answers_refused_total counter\n\
sipsec_media_answers_refused_total {}\n\
# HELP sipsec_media_relays_up Media relays answering their pings.\n\
# TYPE sipsec_media_relays_up gauge\n\
sipsec_media_relays_up {}\n\
# HELP sipsec_media_calls Calls whose media is relayed now.\n\
# TYPE sipsec_media_calls gauge\n\
sipsec_media_calls {}",
            load(&c.offers),
            load(&c.answers),
            load(&c.deletes),
            load(&c.ok),
            load(&c.failed),
            load(&c.refused_no_relay),
            load(&c.refused_unencrypted),
            load(&c.passed_unrelayed),
            load(&c.answers_refused),
            c.relays_up.load(Ordering::Relaxed),
            self.sizes().0,
        );
    }

    /// Relayed calls, and messages waiting on the relays.
    pub fn sizes(&self) -> (usize, usize) {
        let s = self.state.lock(0);
        (s.calls.len(), s.waiting.totals().0)
    }
}

/// The session description a message carries: its body when the
/// Content-Type is `application/sdp` and the body is text.
pub fn sdp_of<'m>(msg: &Message<'m>) -> Option<&'m str> {
    let ct = msg.content_type()?;
    let media = ct.split(';').next().unwrap_or("").trim();
    if !media.eq_ignore_ascii_case("application/sdp") || msg.body().is_empty() {
        return None;
    }
    std::str::from_utf8(msg.body()).ok()
}

/// Whether a leg is a browser's (WebSocket: ICE, DTLS-SRTP, RTP/SAVPF).
pub fn browser(t: Transport) -> bool {
    matches!(t, Transport::Ws | Transport::Wss)
}

/// Whether `sdp` offers a stream that is not encrypted: an active `m=`
/// line whose profile is not SRTP (`RTP/SAVP`, `RTP/SAVPF`,
/// `UDP/TLS/RTP/SAVP(F)`).
pub fn offers_plain_rtp(sdp: &str) -> bool {
    sdp.lines().filter_map(|l| l.strip_prefix("m=")).any(|m| {
        let mut f = m.split_ascii_whitespace();
        let port = f.nth(1).unwrap_or("0");
        let proto = f.next().unwrap_or("");
        port != "0"
            && !proto
                .as_bytes()
                .windows(4)
                .any(|w| w.eq_ignore_ascii_case(b"SAVP"))
    })
}

/// The addresses `sdp` names for media: every connection line's (session
/// and media level) and every RTCP attribute's (RFC 3605); `None` for
/// one that is not an IP address (a name, a multicast group with its
/// TTL).
fn sdp_addresses(sdp: &str) -> impl Iterator<Item = Option<IpAddr>> + '_ {
    sdp.lines().filter_map(|l| {
        let addr = if let Some(c) = l.strip_prefix("c=IN ") {
            c.split_ascii_whitespace().nth(1)
        } else {
            let mut f = l.strip_prefix("a=rtcp:")?.split_ascii_whitespace();
            if f.nth(1)? != "IN" {
                return None;
            }
            f.nth(1)
        };
        Some(addr.and_then(|a| a.parse().ok()))
    })
}

/// Whether the sender of `msg` (from `src`) is behind NAT: its Via, or
/// any address its session description names for media, is not where
/// its message came from. The relay then sends to where the message came
/// from (`SIP-source-address`), never to an address the description
/// names: a caller cannot point a callee's media at a third party by
/// naming it in a second `m=` section's `c=` line or an `a=rtcp`
/// attribute (before, only the first `c=` line was compared).
pub fn behind_nat(msg: &Message<'_>, src: SocketAddr, sdp: &str) -> bool {
    let via_elsewhere = match msg.top_via().host() {
        sip_core::uri::Host::V4(a) => IpAddr::V4(a) != src.ip(),
        sip_core::uri::Host::V6(a) => IpAddr::V6(a) != src.ip(),
        sip_core::uri::Host::Name(_) => false,
    };
    let from = src.ip().to_canonical();
    let media_elsewhere = sdp_addresses(sdp)
        .any(|a| a.is_none_or(|a| !a.is_unspecified() && a.to_canonical() != from));
    via_elsewhere || media_elsewhere
}

/// Whether the target `ruri` names an address other than `hop`, where
/// the request goes (a registered contact behind NAT, reached at the
/// address its registration came from).
pub fn contact_elsewhere(ruri: Option<&str>, hop: SocketAddr) -> bool {
    let Some(uri) = ruri.and_then(|u| sip_core::Uri::parse(u, sip_core::UriContext::Header).ok())
    else {
        return false;
    };
    match uri.host() {
        Some(sip_core::uri::Host::V4(a)) => IpAddr::V4(a) != hop.ip(),
        Some(sip_core::uri::Host::V6(a)) => IpAddr::V6(a) != hop.ip(),
        _ => false,
    }
}

/// Whether a call from a `from` leg to a `to` leg is relayed under
/// `mode`; `nat`: a party is behind NAT.
pub fn wanted(mode: MediaMode, from: Transport, to: Transport, nat: bool) -> bool {
    match mode {
        MediaMode::Off => false,
        MediaMode::Always => true,
        MediaMode::Nat => nat,
        MediaMode::WebRtc => browser(from) != browser(to),
    }
}

/// One side's session description as the relay is asked to rewrite it for
/// a `to` leg: browsers get ICE and DTLS-SRTP (`UDP/TLS/RTP/SAVPF`, RTCP
/// multiplexed); SIP phones get plain RTP, or SDES-SRTP (`RTP/SAVP`)
/// with `srtp`, no ICE. `received_from` (the sender's address) is taken
/// for its media address when it is behind NAT.
#[allow(clippy::too_many_arguments)]
pub fn media(
    msg: &Message<'_>,
    sdp: &str,
    offer: bool,
    to: Transport,
    srtp: bool,
    nat: bool,
    received_from: IpAddr,
) -> Media {
    let (options, rtcp_mux, sdes): (_, &[&str], &[&str]) = match (browser(to), srtp) {
        (true, _) => (
            TO_BROWSER,
            if offer { &["offer"] } else { &["require"] },
            &["off"],
        ),
        (false, true) => (TO_PHONE_SRTP, &["demux"], NO_WEAK_SUITES),
        (false, false) => (TO_PHONE_RTP, &["demux"], &[]),
    };
    Media {
        call_id: msg.call_id().to_owned(),
        from_tag: msg.from().tag().unwrap_or("").to_owned(),
        to_tag: msg.to().tag().map(str::to_owned),
        sdp: sdp.to_owned(),
        flags: if nat { &["SIP-source-address"] } else { &[] },
        replace: &["origin", "session-connection"],
        options,
        rtcp_mux,
        sdes,
        received_from: Some(received_from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFFER: &str = "v=0\r\no=- 1 1 IN IP4 10.0.0.7\r\ns=-\r\nc=IN IP4 10.0.0.7\r\nt=0 0\r\n\
m=audio 4000 RTP/AVP 0\r\n";

    fn invite(via: &str, body: &str) -> Vec<u8> {
        format!(
            "INVITE sip:bob@example.com SIP/2.0\r\nVia: SIP/2.0/UDP {via};branch=z9hG4bKa\r\n\
From: <sip:alice@example.com>;tag=ft\r\nTo: <sip:bob@example.com>\r\nCall-ID: c1\r\n\
CSeq: 1 INVITE\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    #[test]
    fn what_is_sdp_plain_and_behind_nat() {
        let bytes = invite("10.0.0.7:5060", OFFER);
        let m = Message::parse(&bytes).unwrap();
        assert_eq!(sdp_of(&m), Some(OFFER));
        assert!(offers_plain_rtp(OFFER));
        assert!(!offers_plain_rtp(&OFFER.replace("RTP/AVP", "RTP/SAVP")));
        assert!(!offers_plain_rtp(
            &OFFER.replace("4000 RTP/AVP", "0 RTP/AVP")
        ));
        let from = |ip: &str| SocketAddr::new(ip.parse().unwrap(), 5060);
        assert!(behind_nat(&m, from("203.0.113.9"), OFFER));
        assert!(!behind_nat(&m, from("10.0.0.7"), OFFER));
        // Any address the description names for media counts, not only
        // the first connection line's.
        let second = "m=video 4002 RTP/AVP 96\r\nc=IN IP4 198.51.100.66\r\n";
        let rtcp = "a=rtcp:4001 IN IP4 198.51.100.66\r\n";
        let named = "c=IN IP4 media.example.com\r\n";
        for extra in [second, rtcp, named] {
            assert!(
                behind_nat(&m, from("10.0.0.7"), &format!("{OFFER}{extra}")),
                "{extra}"
            );
        }
        let own = "a=rtcp:4001 IN IP4 10.0.0.7\r\na=rtcp:4001\r\nc=IN IP4 0.0.0.0\r\n";
        assert!(!behind_nat(&m, from("10.0.0.7"), &format!("{OFFER}{own}")));
        let no_sdp = invite("10.0.0.7", "");
        assert_eq!(sdp_of(&Message::parse(&no_sdp).unwrap()), None);
    }

    #[test]
    fn which_calls_each_mode_relays() {
        use Transport::*;
        assert!(!wanted(MediaMode::Off, Udp, Udp, true));
        assert!(wanted(MediaMode::Always, Udp, Udp, false));
        assert!(wanted(MediaMode::Nat, Udp, Udp, true));
        assert!(!wanted(MediaMode::Nat, Udp, Udp, false));
        assert!(wanted(MediaMode::WebRtc, Wss, Udp, false));
        assert!(!wanted(MediaMode::WebRtc, Wss, Ws, false));
        assert!(!wanted(MediaMode::WebRtc, Tls, Udp, false));
    }

    #[test]
    fn flags_per_leg() {
        let bytes = invite("10.0.0.7", OFFER);
        let m = Message::parse(&bytes).unwrap();
        let ip: IpAddr = "203.0.113.9".parse().unwrap();
        let to_browser = media(&m, OFFER, true, Transport::Wss, false, false, ip);
        assert!(to_browser
            .options
            .contains(&("transport-protocol", "UDP/TLS/RTP/SAVPF")));
        assert_eq!(to_browser.rtcp_mux, ["offer"]);
        let to_phone = media(&m, OFFER, true, Transport::Udp, true, true, ip);
        assert!(to_phone
            .options
            .contains(&("transport-protocol", "RTP/SAVP")));
        assert_eq!(to_phone.flags, ["SIP-source-address"]);
        assert!(to_phone.sdes.contains(&"no-NULL_HMAC_SHA1_80"));
        assert_eq!(to_browser.sdes, ["off"]);
        assert_eq!((to_phone.from_tag.as_str(), to_phone.to_tag), ("ft", None));
    }

    fn parked() -> Parked {
        Parked {
            message: b"INVITE".to_vec(),
            src: "127.0.0.1:5060".parse().unwrap(),
            arrived: Transport::Udp,
        }
    }

    #[test]
    fn a_retransmission_waits_once_and_calls_are_bounded_and_swept() {
        let settings = MediaSettings {
            max_calls: 1,
            ..MediaSettings::default()
        };
        let t = MediaTable::new(&settings);
        let offer = |id: &str| {
            Command::Offer(Media {
                call_id: id.into(),
                ..Media::default()
            })
        };
        assert_eq!(t.ask(7, offer("a"), parked(), None), Asked::Parked);
        assert_eq!(t.ask(7, offer("a"), parked(), None), Asked::Duplicate);
        assert_eq!(t.take_asked().len(), 1);
        assert_eq!(t.answered(7).len(), 1);
        let now = Instant::now();
        t.relaying("a", "ft", false, now);
        assert_eq!(
            t.ask(8, offer("b"), parked(), None),
            Asked::Full,
            "one call at most"
        );
        assert_eq!(
            t.ask(9, offer("a"), parked(), None),
            Asked::Parked,
            "a re-offer"
        );
        assert_eq!(t.sweep(now + UNANSWERED_FOR / 2), 0);
        assert_eq!(t.sweep(now + UNANSWERED_FOR * 2), 1);
        assert!(t.call("a").is_none());
        assert!(matches!(
            t.take_asked().last(),
            Some((0, Command::Delete { .. }))
        ));
        assert!(!t.end("a"), "ended once");
    }

    #[test]
    fn a_refused_invite_abandons_only_its_own_unanswered_call() {
        let t = MediaTable::new(&MediaSettings::default());
        let now = Instant::now();
        t.relaying("a", "caller", false, now);
        t.relaying("b", "caller", false, now);
        t.established("b");
        assert!(!t.abandon("a", "someone-else"), "another caller's");
        assert!(!t.abandon("b", "caller"), "answered already");
        assert!(!t.abandon("c", "caller"), "not relayed");
        assert!(t.abandon("a", "caller"));
        assert!(t.call("a").is_none() && t.call("b").is_some());
        assert!(matches!(
            t.take_asked().as_slice(),
            [(0, Command::Delete { call_id, .. })] if call_id == "a"
        ));
    }
}
