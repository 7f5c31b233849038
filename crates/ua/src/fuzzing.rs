//! Properties the fuzz targets check (the tests run them too).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sip_core::fuzzing::split;
use sip_core::transaction::TimerConfig;
use sip_core::{Message, Method};

use crate::agent::{Agent, Event, Identity, Setup};
use crate::sdp;

/// A session description from a peer: parsing never panics, and one
/// that parses says the same once written as this phone writes its own
/// (address, port, profile, payload types and every `a=crypto` it took).
pub fn sdp(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(audio) = sdp::parse(text) else {
        return;
    };
    let written = sdp::write(1, 1, &audio);
    assert_eq!(sdp::parse(&written).as_ref(), Ok(&audio), "{written}");
}

/// Where messages come from: the proxy, a peer, a v6 peer, a port-0 one.
const SOURCES: [&str; 4] = [
    "192.0.2.1:5060",
    "198.51.100.7:5060",
    "[2001:db8::5]:5062",
    "203.0.113.9:0",
];

/// The values of our own requests a message may quote, by placeholder:
/// `%B` `%C` `%F` `%N` the last REGISTER's branch, Call-ID, From tag and
/// CSeq number, `%b` `%c` `%f` `%n` the last INVITE's, `%t` the To tag of
/// our last response. The fuzzer cannot guess the random ones, and
/// without them every response would be one to nothing of ours.
#[derive(Default)]
struct Quoted {
    pairs: Vec<(&'static [u8], Vec<u8>)>,
}

impl Quoted {
    fn of_request(&mut self, m: &Message<'_>) {
        let names: [&'static [u8]; 4] = match m.method() {
            Method::Register => [b"%B", b"%C", b"%F", b"%N"],
            Method::Invite => [b"%b", b"%c", b"%f", b"%n"],
            _ => return,
        };
        let values = [
            m.top_via().branch().unwrap_or_default().to_owned(),
            m.call_id().to_owned(),
            m.from().tag().unwrap_or_default().to_owned(),
            m.cseq().seq.to_string(),
        ];
        self.pairs.retain(|(n, _)| !names.contains(n));
        for (name, value) in names.into_iter().zip(values) {
            self.pairs.push((name, value.into_bytes()));
        }
    }

    fn our_tag(&mut self, response: &Message<'_>) {
        if let Some(tag) = response.to().tag() {
            self.pairs.retain(|(n, _)| *n != b"%t");
            self.pairs.push((b"%t", tag.as_bytes().to_vec()));
        }
    }

    fn fill(&self, msg: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(msg.len() + 64);
        let mut i = 0;
        while i < msg.len() {
            let hit = self
                .pairs
                .iter()
                .find(|(name, _)| msg[i..].starts_with(name));
            match hit {
                Some((name, value)) => {
                    out.extend_from_slice(value);
                    i += name.len();
                }
                None => {
                    out.push(msg[i]);
                    i += 1;
                }
            }
        }
        out
    }
}

/// The phone's signalling core under hostile input. The first byte
/// picks the transport (bit 0: TLS, reliable), whether only the proxy's
/// calls ring (bit 1) and, message by message, the source and what the
/// user does with a new call (ring, accept, refuse, nothing). The agent
/// has registered and called someone through the proxy; the rest of the
/// input is messages separated by [`sip_core::fuzzing::SEPARATOR`], a
/// second apart, the timers run between them. A message may quote the
/// core's own values: `%B` `%C` `%F` `%N` stand for the last REGISTER's
/// branch, Call-ID, From tag and CSeq number, `%b` `%c` `%f` `%n` for the
/// last INVITE's, `%t` for the To tag of its last response.
///
/// Never panics; everything it sends parses; a response goes only to an
/// address a message came from, never to one a message names; and each
/// message makes at most a few sends. Returns what the agent reported,
/// so that tests can see a dialogue went where it meant to.
pub fn agent(data: &[u8]) -> Vec<String> {
    let mut reported = Vec::new();
    let Some((&pick, rest)) = data.split_first() else {
        return reported;
    };
    let start = Instant::now();
    let proxy: SocketAddr = SOURCES[0].parse().expect("literal");
    let reliable = pick & 1 == 1;
    let local: SocketAddr = "192.0.2.50:5060".parse().expect("literal");
    let mut a = Agent::new(Setup {
        user: "alice".into(),
        domain: "example.com".into(),
        password: Some("pw".into()),
        local,
        transport: if reliable { "TLS" } else { "UDP" },
        reliable,
        contact: format!("sip:alice@{local}"),
        timers: TimerConfig::RFC3261,
        seed: Some(u64::from(pick)),
    });
    if pick & 2 != 0 {
        a.ring_only_from(Some(vec![proxy.ip()]));
    }
    let me = Identity {
        from: "<sip:alice@example.com>".into(),
        shown: None,
    };
    let mut quoted = Quoted::default();
    a.register(proxy, &me, 3600, Vec::new(), start)
        .expect("a first REGISTER");
    sent(&mut a, &[], &mut quoted, 1, "the REGISTER");
    let sdp = Some(("application/sdp".into(), "v=0\r\n".into()));
    a.invite(proxy, &me, "sip:bob@example.com", sdp, None, start)
        .expect("a first INVITE");
    sent(&mut a, &[], &mut quoted, 1, "the INVITE");
    let mut heard: Vec<SocketAddr> = Vec::new();
    for (i, msg) in split(rest).enumerate() {
        let salt = usize::from(pick >> 2).wrapping_add(i);
        let from: SocketAddr = SOURCES[salt % SOURCES.len()].parse().expect("literal");
        let now = start + Duration::from_secs(i as u64 + 1);
        a.on_timer(now);
        sent(&mut a, &heard, &mut quoted, 16, "a timer");
        let msg = quoted.fill(msg);
        a.handle(&msg, from, now);
        if !heard.contains(&from) {
            heard.push(from);
        }
        sent(&mut a, &heard, &mut quoted, 4, "a message");
        while let Some(e) = a.poll_event() {
            reported.push(match &e {
                Event::Response { method, code, .. } => format!("{code} {method}"),
                Event::Request {
                    method, answered, ..
                } => format!("{method} {}", answered.unwrap_or(0)),
                other => format!("{other:?}")
                    .split([' ', '{'])
                    .next()
                    .unwrap_or("")
                    .into(),
            });
            if let Event::Incoming { call_id, .. } = e {
                let _ = match salt % 4 {
                    0 => a.ring(&call_id, now),
                    1 => a.accept(&call_id, None, now),
                    2 => a.reject(&call_id, 486, now),
                    _ => Ok(()),
                };
                sent(&mut a, &heard, &mut quoted, 2, "an answer");
            }
        }
    }
    reported
}

/// Checks what the agent sends: it parses, responses go to an address
/// heard from, and there are at most `max` of them.
fn sent(a: &mut Agent, heard: &[SocketAddr], quoted: &mut Quoted, max: usize, after: &str) {
    let mut n = 0;
    while let Some(t) = a.poll_transmit() {
        n += 1;
        let m = Message::parse(&t.bytes).unwrap_or_else(|e| {
            panic!(
                "sent after {after} does not parse ({e}):\n{}",
                String::from_utf8_lossy(&t.bytes)
            )
        });
        if m.is_request() {
            quoted.of_request(&m);
        } else {
            assert!(
                heard.contains(&t.to),
                "a response to {} after {after}, which sent nothing:\n{}",
                t.to,
                String::from_utf8_lossy(&t.bytes)
            );
            quoted.our_tag(&m);
        }
    }
    assert!(n <= max, "{n} sends after {after}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_dialogues_and_their_mutations_hold_the_property() {
        let mut rng = sip_core::fuzzing::Mutator::new(0x5eed_a9e7);
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/fuzz-agent");
        let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(dir)
            .expect("the seeds")
            .map(|e| std::fs::read(e.expect("entry").path()).expect("readable"))
            .collect();
        seeds.sort();
        assert_eq!(seeds.len(), 8);
        for seed in seeds {
            let reported = agent(&seed);
            // With only the proxy's calls ringing (bit 1), the second
            // call comes from a stranger: nothing to cancel.
            let wanted: &[&str] = match (seed[1], seed[0] & 2) {
                (b'S', _) => &[
                    "401 REGISTER",
                    "200 REGISTER",
                    "180 INVITE",
                    "200 INVITE",
                    "BYE 200",
                ],
                (_, 0) => &["Incoming", "BYE 200", "CANCEL 200", "OPTIONS 200"],
                _ => &[
                    "Incoming",
                    "BYE 200",
                    "Stranger",
                    "CANCEL 481",
                    "OPTIONS 200",
                ],
            };
            for w in wanted {
                assert!(reported.iter().any(|r| r == w), "{w} in {reported:?}");
            }
            for _ in 0..300 {
                agent(&rng.mutate(&seed));
            }
        }
    }

    #[test]
    fn descriptions_and_their_truncations_hold_the_property() {
        let texts = [
            "v=0\r\no=- 1 2 IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n\
             m=audio 5004 RTP/SAVP 8 101 x 300\r\nc=IN IP4 127.0.0.1\r\n\
             a=crypto:2 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR|2^20|1:4 KDR=1\r\n\
             a=crypto:3 F8_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR\r\n\
             m=video 5006 RTP/AVP 96\r\n",
            "v=0\nc=IN IP6 2001:db8::1\nm=audio 7078/2 RTP/AVP 0\na=crypto:1 AES_CM_128_HMAC_SHA1_32 \
             inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR|1048575 WSH=64 UNENCRYPTED_SRTCP\n",
        ];
        let mut rng = sip_core::fuzzing::Mutator::new(0x5eed_05d9);
        for t in texts {
            assert!(sdp::parse(t).is_ok(), "{t}");
            for n in 0..=t.len() {
                sdp(&t.as_bytes()[..n]);
            }
            for _ in 0..2_000 {
                sdp(&rng.mutate(t.as_bytes()));
            }
        }
    }
}
