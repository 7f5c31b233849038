//! Dialogs and call records: the stateful proxy follows each INVITE
//! dialog it forwards (early, confirmed, ended) and, when one ends, makes
//! its call record — start, answer, end, duration, final status,
//! caller and callee (as the request named them: PrivaSIP pseudonyms
//! stay pseudonyms), trunk and gateway, transport, STIR/SHAKEN outcome.
//!
//! A call ends on its INVITE's final failure (a CANCEL's 487 included),
//! on a 2xx to a BYE (a forged BYE the far end refuses ends nothing), or
//! by timeout: a dialog never answered after [`EARLY_TIMEOUT`], or
//! confirmed longer than the configured maximum. Records wait in the
//! core until its driver writes them, before the message that ended the
//! call is sent.
//!
//! The table is bounded, and no call goes through unfollowed (a call
//! without its record would be a free one): past `max` dialogs a new
//! call is refused 503, and one caller — an authenticated user, or an
//! address the guard limits — holds at most its share, past which its
//! own new calls are refused 403. So one account cannot fill the table,
//! neither to shut out everyone else's calls nor to place calls no
//! record follows.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use sip_core::Message;

use crate::proto::guard::SourceKey;
use crate::shards::Shards;

/// Seconds an unanswered dialog is kept (beyond Timer C's 3 minutes).
pub const EARLY_TIMEOUT: u64 = 200;
const SHARDS: usize = 16;

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// Answered, then hung up (BYE).
    Answered,
    /// Not answered: a final failure.
    Failed,
    /// Cancelled by the caller (487).
    Cancelled,
    /// Ended by the proxy's timeout (no BYE, or never answered).
    Timeout,
    /// Ended by the operator (the proxy sent BYE both ways).
    Ended,
}

/// One finished call.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CallRecord {
    /// The INVITE's Call-ID.
    pub call_id: String,
    /// The caller (From's user, as sent).
    pub caller: String,
    /// The callee (the Request-URI's user, as requested).
    pub callee: String,
    /// When the INVITE was forwarded, Unix milliseconds.
    pub start_ms: u64,
    /// When it was answered (2xx).
    pub answer_ms: Option<u64>,
    /// When it ended.
    pub end_ms: u64,
    /// Seconds from answer to end (0 when never answered).
    pub duration_s: f64,
    /// The INVITE's final status.
    pub status: u16,
    /// How it ended.
    pub disposition: Disposition,
    /// The trunk it left through, and the gateway first sent to.
    pub trunk: Option<String>,
    /// The gateway.
    pub gateway: Option<String>,
    /// The caller's transport.
    pub transport: &'static str,
    /// STIR/SHAKEN: `signed`, or the `verstat` it was passed on with.
    pub stir: Option<String>,
}

/// What the proxy needs to end a confirmed call itself (a BYE to each
/// party): the INVITE's From and To (without tag), the caller's contact
/// and where it was reached from, the hop the INVITE went to, its CSeq.
#[derive(Debug, Clone, Default)]
pub struct Legs {
    /// The INVITE's From value (with the caller's tag).
    pub from: String,
    /// The INVITE's To value (no tag yet).
    pub to: String,
    /// The caller's Contact URI.
    pub caller_contact: String,
    /// Where the caller is reached (the INVITE's upstream hop).
    pub up: Option<(SocketAddr, sip_core::Transport)>,
    /// Where the callee is reached (the hop the INVITE went to).
    pub down: Option<(SocketAddr, sip_core::Transport)>,
    /// The INVITE's CSeq number.
    pub cseq: u32,
    /// The callee's Contact URI and tag, from its 2xx.
    pub callee_contact: Option<String>,
    /// The callee's tag.
    pub callee_tag: Option<String>,
    /// The callee's side is a trunk that hides the inside: what goes
    /// there carries the sealed Call-ID.
    pub hidden: bool,
}

/// What a call is known by when it starts.
#[derive(Debug, Clone)]
pub struct Start {
    /// Caller, callee.
    pub caller: String,
    /// Callee.
    pub callee: String,
    /// Trunk name, gateway.
    pub trunk: Option<(String, SocketAddr)>,
    /// The caller's transport.
    pub transport: &'static str,
    /// STIR/SHAKEN outcome.
    pub stir: Option<String>,
    /// How to end it.
    pub legs: Legs,
}

/// Who a call's share of the table is counted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller<'a> {
    /// The user whose credentials this proxy checked.
    User(&'a str),
    /// The source it came from, unauthenticated (one the guard limits:
    /// not loopback while exempt, nor a trusted node or peer proxy; an
    /// IPv6 prefix, as the guard counts it).
    Source(SourceKey),
}

/// Whether an initial INVITE's dialog is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// From now (and [`Dialogs::abandon`] undoes it if the call does not
    /// go out after all).
    Started,
    /// Already: a copy of the INVITE began it.
    Already,
    /// The table is full: refuse the call.
    Full,
    /// Its caller holds its whole share: refuse the call.
    OverShare,
}

#[derive(Debug, Clone)]
struct Dialog {
    /// Whose share it counts against (a keyed hash of the caller).
    owner: Option<u64>,
    start: Start,
    started_ms: u64,
    answered_ms: Option<u64>,
    to_tag: Option<String>,
    status: u16,
    /// What the callee's side adds to the caller's CSeq numbers (a
    /// trunk's challenge was answered with the next number).
    offset: u32,
}

/// Counts of what the table saw.
#[derive(Debug, Default)]
pub struct DialogCounts {
    /// Calls followed.
    pub started: AtomicU64,
    /// Records made, by disposition.
    pub answered: AtomicU64,
    /// Not answered.
    pub failed: AtomicU64,
    /// Cancelled.
    pub cancelled: AtomicU64,
    /// Ended by timeout.
    pub timeout: AtomicU64,
    /// Ended by the operator.
    pub ended: AtomicU64,
    /// Calls refused: the table was full.
    pub refused_full: AtomicU64,
    /// Calls refused: their caller held its whole share.
    pub refused_share: AtomicU64,
}

type DialogKey = (String, String);

/// The dialogs the proxy follows.
#[derive(Debug)]
pub struct Dialogs {
    shards: Shards<HashMap<DialogKey, Dialog>>,
    /// Some dialog has a CSeq offset: requests and responses are looked
    /// up (none: nothing to look up).
    offsets: std::sync::atomic::AtomicBool,
    /// Dialogs followed now (read per INVITE without locking the shards).
    count: std::sync::atomic::AtomicUsize,
    max: usize,
    /// Dialogs each caller holds now, by keyed hash of the caller.
    owners: Shards<HashMap<u64, usize>>,
    per_owner: usize,
    hasher: RandomState,
    max_duration_ms: u64,
    /// What happened, counted.
    pub counts: DialogCounts,
}

fn shard_of(call_id: &str) -> usize {
    call_id.bytes().fold(0usize, |h, b| {
        h.wrapping_mul(31).wrapping_add(usize::from(b))
    }) % SHARDS
}

/// The Call-ID and From tag of `msg`, its To tag, and the user parts.
fn tags<'a>(msg: &'a Message<'_>) -> (&'a str, &'a str, Option<&'a str>) {
    (
        msg.call_id(),
        msg.from().tag().unwrap_or(""),
        msg.to().tag(),
    )
}

impl Dialogs {
    /// At most `max` dialogs, `per_caller` of them one caller's; a
    /// confirmed one ends after `max_duration_s`. `hasher` keys the
    /// callers' hashes.
    pub fn new(max: usize, per_caller: usize, max_duration_s: u64, hasher: RandomState) -> Self {
        Self {
            shards: Shards::new(SHARDS, HashMap::new),
            offsets: std::sync::atomic::AtomicBool::new(false),
            count: std::sync::atomic::AtomicUsize::new(0),
            max,
            owners: Shards::new(SHARDS, HashMap::new),
            per_owner: per_caller,
            hasher,
            max_duration_ms: max_duration_s * 1000,
            counts: DialogCounts::default(),
        }
    }

    /// Dialogs followed now.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Whether none is followed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn owner_of(&self, caller: Caller<'_>) -> u64 {
        match caller {
            Caller::User(u) => self.hasher.hash_one(("user", u)),
            Caller::Source(ip) => self.hasher.hash_one(("source", ip)),
        }
    }

    /// Whether an initial INVITE from `caller` would be followed now,
    /// asked before work is spent on it (its media offer): `Full` or
    /// `OverShare` refuses it here, counted; `Started` or `Already`: go
    /// on to [`Dialogs::begin`], which decides for good.
    pub fn admits(&self, msg: &Message<'_>, caller: Option<Caller<'_>>) -> Follow {
        let (call_id, from_tag, _) = tags(msg);
        let key = (call_id.to_owned(), from_tag.to_owned());
        if self.shards.lock(shard_of(call_id)).contains_key(&key) {
            return Follow::Already;
        }
        if let Some(o) = caller.map(|c| self.owner_of(c)) {
            let held = self.owners.lock(o as usize);
            if held.get(&o).is_some_and(|n| *n >= self.per_owner) {
                self.counts.refused_share.fetch_add(1, Ordering::Relaxed);
                return Follow::OverShare;
            }
        }
        if self.len() >= self.max {
            self.counts.refused_full.fetch_add(1, Ordering::Relaxed);
            return Follow::Full;
        }
        Follow::Started
    }

    /// An initial INVITE from `caller` (`None`: a caller held to no
    /// share) is about to be forwarded at `now_ms`: follow its dialog, or
    /// say why the call is refused.
    pub fn begin(
        &self,
        msg: &Message<'_>,
        start: Start,
        caller: Option<Caller<'_>>,
        now_ms: u64,
    ) -> Follow {
        let (call_id, from_tag, _) = tags(msg);
        let key = (call_id.to_owned(), from_tag.to_owned());
        let mut s = self.shards.lock(shard_of(call_id));
        if s.contains_key(&key) {
            return Follow::Already;
        }
        let owner = caller.map(|c| self.owner_of(c));
        let mut held = owner.map(|o| self.owners.lock(o as usize));
        if let (Some(o), Some(held)) = (owner, &held) {
            if held.get(&o).is_some_and(|n| *n >= self.per_owner) {
                self.counts.refused_share.fetch_add(1, Ordering::Relaxed);
                return Follow::OverShare;
            }
        }
        // A place is taken only while one is free: the count never
        // passes `max`, not even for a moment.
        let reserved = self
            .count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            });
        if reserved.is_err() {
            self.counts.refused_full.fetch_add(1, Ordering::Relaxed);
            return Follow::Full;
        }
        if let (Some(o), Some(held)) = (owner, held.as_mut()) {
            *held.entry(o).or_default() += 1;
        }
        drop(held);
        s.insert(
            key,
            Dialog {
                owner,
                start,
                started_ms: now_ms,
                answered_ms: None,
                to_tag: None,
                status: 0,
                offset: 0,
            },
        );
        self.counts.started.fetch_add(1, Ordering::Relaxed);
        Follow::Started
    }

    /// The INVITE whose dialog [`Dialogs::begin`] started did not go out
    /// (the transaction table was full): forgotten, without a record.
    pub fn abandon(&self, msg: &Message<'_>) {
        let (call_id, from_tag, _) = tags(msg);
        let key = (call_id.to_owned(), from_tag.to_owned());
        let mut s = self.shards.lock(shard_of(call_id));
        if self.take(&mut s, &key).is_some() {
            self.counts.started.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A response `msg` went upstream at `now_ms`: an INVITE's 2xx
    /// confirms its dialog, its final failure ends it; a BYE's 2xx ends
    /// the dialog it names. The record of an ended call, if any.
    pub fn response(&self, msg: &Message<'_>, now_ms: u64) -> Option<CallRecord> {
        let status = msg.status()?.as_u16();
        if status < 200 {
            return None;
        }
        let (call_id, from_tag, to_tag) = tags(msg);
        let method = msg.cseq().method;
        let mut s = self.shards.lock(shard_of(call_id));
        match method {
            sip_core::Method::Invite => {
                let key = (call_id.to_owned(), from_tag.to_owned());
                let d = s.get_mut(&key)?;
                if d.answered_ms.is_some() {
                    return None;
                }
                d.status = status;
                if status < 300 {
                    d.answered_ms = Some(now_ms);
                    d.to_tag = to_tag.map(str::to_owned);
                    d.start.legs.callee_tag = d.to_tag.clone();
                    d.start.legs.callee_contact = msg
                        .contacts()
                        .next()
                        .map(|c| c.addr.uri().as_str().to_owned());
                    return None;
                }
                let d = self.take(&mut s, &key)?;
                let disposition = if status == 487 {
                    Disposition::Cancelled
                } else {
                    Disposition::Failed
                };
                Some(self.record(key.0, d, now_ms, disposition))
            }
            sip_core::Method::Bye if status < 300 => {
                // The BYE came from either side: the caller's tag is its
                // From tag or its To tag.
                let mine = (call_id.to_owned(), from_tag.to_owned());
                let key = if s.contains_key(&mine) {
                    mine
                } else {
                    (call_id.to_owned(), to_tag?.to_owned())
                };
                let d = self.take(&mut s, &key)?;
                Some(self.record(key.0, d, now_ms, Disposition::Answered))
            }
            _ => None,
        }
    }

    /// The caller's request of dialog `call_id`/`from_tag` went to the
    /// callee's side again with its CSeq one higher.
    pub fn renumbered(&self, call_id: &str, from_tag: &str) {
        let key = (call_id.to_owned(), from_tag.to_owned());
        if let Some(d) = self.shards.lock(shard_of(call_id)).get_mut(&key) {
            d.offset += 1;
            self.offsets.store(true, Ordering::Relaxed);
        }
    }

    /// What the callee's side adds to the CSeq of the caller's requests in
    /// the dialog `call_id` whose caller's tag is `tag` (0 for requests of
    /// the callee, or no such dialog).
    pub fn offset(&self, call_id: &str, tag: &str) -> u32 {
        if !self.offsets.load(Ordering::Relaxed) {
            return 0;
        }
        let key = (call_id.to_owned(), tag.to_owned());
        self.shards
            .lock(shard_of(call_id))
            .get(&key)
            .map_or(0, |d| d.offset)
    }

    /// The operator ends the confirmed call `call_id` at `now_ms`: how to
    /// reach both parties, and its record.
    pub fn end(&self, call_id: &str, now_ms: u64) -> Option<(Legs, CallRecord)> {
        let mut s = self.shards.lock(shard_of(call_id));
        let key = s
            .iter()
            .find(|((c, _), d)| c == call_id && d.answered_ms.is_some())
            .map(|(k, _)| k.clone())?;
        let d = self.take(&mut s, &key)?;
        let mut legs = d.start.legs.clone();
        legs.cseq += d.offset;
        Some((legs, self.record(key.0, d, now_ms, Disposition::Ended)))
    }

    /// Removes the dialog `key` from its shard `s`, counted.
    fn take(&self, s: &mut HashMap<DialogKey, Dialog>, key: &DialogKey) -> Option<Dialog> {
        let d = s.remove(key)?;
        self.count.fetch_sub(1, Ordering::Relaxed);
        if let Some(o) = d.owner {
            let mut held = self.owners.lock(o as usize);
            if let std::collections::hash_map::Entry::Occupied(mut e) = held.entry(o) {
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    e.remove();
                }
            }
        }
        Some(d)
    }

    /// Dialogs past their time at `now_ms` end: records of each.
    pub fn sweep(&self, now_ms: u64) -> Vec<CallRecord> {
        let mut out = Vec::new();
        for i in 0..SHARDS {
            let mut s = self.shards.lock(i);
            let late: Vec<DialogKey> = s
                .iter()
                .filter(|(_, d)| match d.answered_ms {
                    Some(a) => now_ms.saturating_sub(a) > self.max_duration_ms,
                    None => now_ms.saturating_sub(d.started_ms) > EARLY_TIMEOUT * 1000,
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in late {
                if let Some(mut d) = self.take(&mut s, &k) {
                    if d.status == 0 {
                        d.status = 408;
                    }
                    out.push(self.record(k.0, d, now_ms, Disposition::Timeout));
                }
            }
        }
        out
    }

    fn record(
        &self,
        call_id: String,
        d: Dialog,
        end_ms: u64,
        disposition: Disposition,
    ) -> CallRecord {
        let counter = match disposition {
            Disposition::Answered => &self.counts.answered,
            Disposition::Failed => &self.counts.failed,
            Disposition::Cancelled => &self.counts.cancelled,
            Disposition::Timeout => &self.counts.timeout,
            Disposition::Ended => &self.counts.ended,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let (trunk, gateway) = match d.start.trunk {
            Some((t, g)) => (Some(t), Some(g.to_string())),
            None => (None, None),
        };
        CallRecord {
            call_id,
            caller: d.start.caller,
            callee: d.start.callee,
            start_ms: d.started_ms,
            answer_ms: d.answered_ms,
            end_ms,
            duration_s: d
                .answered_ms
                .map_or(0.0, |a| end_ms.saturating_sub(a) as f64 / 1000.0),
            status: d.status,
            disposition,
            trunk,
            gateway,
            transport: d.start.transport,
            stir: d.start.stir,
        }
    }

    /// Up to `limit` dialogs, for `/status`.
    pub fn list(&self, limit: usize, now_ms: u64) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        for i in 0..SHARDS {
            for ((call_id, _), d) in self.shards.lock(i).iter() {
                if out.len() >= limit {
                    return out;
                }
                out.push(serde_json::json!({
                    "call_id": call_id,
                    "caller": d.start.caller,
                    "callee": d.start.callee,
                    "state": if d.answered_ms.is_some() { "confirmed" } else { "early" },
                    "seconds": now_ms.saturating_sub(d.answered_ms.unwrap_or(d.started_ms)) / 1000,
                    "trunk": d.start.trunk.as_ref().map(|t| &t.0),
                }));
            }
        }
        out
    }

    /// The Prometheus text of dialogs and records.
    pub fn render(&self, o: &mut String) {
        use std::fmt::Write;
        let c = &self.counts;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let _ = writeln!(
            o,
            "# HELP sipsec_dialogs INVITE dialogs the proxy follows now.\n# TYPE sipsec_dialogs gauge\nsipsec_dialogs {}\n\
# HELP sipsec_call_records_total Call records written, by disposition.\n# TYPE sipsec_call_records_total counter\n\
sipsec_call_records_total{{disposition=\"answered\"}} {}\nsipsec_call_records_total{{disposition=\"failed\"}} {}\n\
sipsec_call_records_total{{disposition=\"cancelled\"}} {}\nsipsec_call_records_total{{disposition=\"timeout\"}} {}\n\
sipsec_call_records_total{{disposition=\"ended\"}} {}\n\
# HELP sipsec_dialogs_refused_total New calls refused because they could not be followed: the table was full (503), or their caller held its whole share (403).\n\
# TYPE sipsec_dialogs_refused_total counter\nsipsec_dialogs_refused_total{{reason=\"full\"}} {}\n\
sipsec_dialogs_refused_total{{reason=\"caller_share\"}} {}",
            self.len(),
            load(&c.answered),
            load(&c.failed),
            load(&c.cancelled),
            load(&c.timeout),
            load(&c.ended),
            load(&c.refused_full),
            load(&c.refused_share),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(text: &str) -> Vec<u8> {
        text.replace('\n', "\r\n").into_bytes()
    }

    fn start() -> Start {
        Start {
            caller: "alice".into(),
            callee: "+12155550100".into(),
            trunk: Some(("carrier".into(), "192.0.2.1:5060".parse().unwrap())),
            transport: "udp",
            stir: Some("signed".into()),
            legs: Legs::default(),
        }
    }

    fn response(status: &str, method: &str, to_tag: &str) -> Vec<u8> {
        msg(&format!(
            "SIP/2.0 {status}\nVia: SIP/2.0/UDP 192.0.2.9;branch=z9hG4bKx\nFrom: <sip:alice@a>;tag=f1\n\
             To: <sip:b@b>{to_tag}\nCall-ID: c1\nCSeq: 1 {method}\nContent-Length: 0\n\n"
        ))
    }

    const INVITE: &str = "INVITE sip:b@b SIP/2.0\nVia: SIP/2.0/UDP 192.0.2.9;branch=z9hG4bKx\n\
        From: <sip:alice@a>;tag=f1\nTo: <sip:b@b>\nCall-ID: c1\nCSeq: 1 INVITE\nContent-Length: 0\n\n";

    #[test]
    fn an_answered_call_ends_on_the_bye_2xx_from_either_side() {
        let d = Dialogs::new(10, 10, 3600, RandomState::new());
        let inv = msg(INVITE);
        d.begin(&Message::parse(&inv).unwrap(), start(), None, 1_000);
        let ok = response("200 OK", "INVITE", ";tag=t2");
        assert_eq!(d.response(&Message::parse(&ok).unwrap(), 3_000), None);
        // The callee hangs up: From is its tag, To the caller's.
        let bye_ok = msg(
            "SIP/2.0 200 OK\nVia: SIP/2.0/UDP x;branch=z9hG4bKy\nFrom: <sip:b@b>;tag=t2\n\
            To: <sip:alice@a>;tag=f1\nCall-ID: c1\nCSeq: 7 BYE\nContent-Length: 0\n\n",
        );
        let r = d
            .response(&Message::parse(&bye_ok).unwrap(), 13_500)
            .unwrap();
        assert_eq!(r.disposition, Disposition::Answered);
        assert_eq!(
            (r.status, r.answer_ms, r.duration_s),
            (200, Some(3_000), 10.5)
        );
        assert_eq!(r.trunk.as_deref(), Some("carrier"));
        assert!(d.is_empty());
        assert_eq!(
            d.response(&Message::parse(&bye_ok).unwrap(), 14_000),
            None,
            "one record"
        );
    }

    #[test]
    fn failures_cancels_and_timeouts_make_records_and_the_table_is_bounded() {
        let d = Dialogs::new(1, 1, 10, RandomState::new());
        let inv = msg(INVITE);
        let follow = |m: &[u8]| d.begin(&Message::parse(m).unwrap(), start(), None, 0);
        assert_eq!(follow(&inv), Follow::Started);
        assert_eq!(follow(&inv), Follow::Already, "a copy of the INVITE");
        let other = msg(&INVITE.replace("c1", "c2"));
        assert_eq!(follow(&other), Follow::Full);
        assert_eq!(d.counts.refused_full.load(Ordering::Relaxed), 1);
        let busy = response("487 Request Terminated", "INVITE", ";tag=t2");
        let r = d.response(&Message::parse(&busy).unwrap(), 500).unwrap();
        assert_eq!(
            (r.disposition, r.status, r.duration_s),
            (Disposition::Cancelled, 487, 0.0)
        );
        d.begin(&Message::parse(&inv).unwrap(), start(), None, 0);
        let ok = response("200 OK", "INVITE", ";tag=t2");
        d.response(&Message::parse(&ok).unwrap(), 1_000);
        assert!(d.sweep(5_000).is_empty());
        let late = d.sweep(11_001);
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].disposition, Disposition::Timeout);
    }

    #[test]
    fn asking_first_says_what_beginning_would_and_takes_no_place() {
        let d = Dialogs::new(2, 1, 3600, RandomState::new());
        let call = |i: u32| msg(&INVITE.replace("c1", &format!("call{i}")));
        let ask = |i: u32, who| d.admits(&Message::parse(&call(i)).unwrap(), who);
        let mallory = Some(Caller::User("mallory"));
        assert_eq!(ask(1, mallory), Follow::Started);
        assert_eq!(ask(1, mallory), Follow::Started, "asking takes nothing");
        assert!(d.is_empty());
        d.begin(&Message::parse(&call(1)).unwrap(), start(), mallory, 0);
        assert_eq!(ask(1, mallory), Follow::Already);
        assert_eq!(ask(2, mallory), Follow::OverShare);
        assert_eq!(ask(2, None), Follow::Started);
        d.begin(&Message::parse(&call(2)).unwrap(), start(), None, 0);
        assert_eq!(ask(3, Some(Caller::User("alice"))), Follow::Full);
        let counted = (&d.counts.refused_share, &d.counts.refused_full);
        assert_eq!(
            (
                counted.0.load(Ordering::Relaxed),
                counted.1.load(Ordering::Relaxed)
            ),
            (1, 1)
        );
    }

    #[test]
    fn one_caller_holds_at_most_its_share_and_gets_it_back_as_calls_end() {
        let d = Dialogs::new(100, 2, 3600, RandomState::new());
        let call = |i: u32| msg(&INVITE.replace("c1", &format!("call{i}")));
        let mallory = Some(Caller::User("mallory"));
        let follow = |i: u32, who: Option<Caller<'_>>| {
            d.begin(&Message::parse(&call(i)).unwrap(), start(), who, 0)
        };
        assert_eq!(follow(1, mallory), Follow::Started);
        assert_eq!(follow(2, mallory), Follow::Started);
        assert_eq!(follow(3, mallory), Follow::OverShare);
        assert_eq!(d.counts.refused_share.load(Ordering::Relaxed), 1);
        // Everyone else still calls: another user, an address, a caller
        // held to no share.
        assert_eq!(follow(4, Some(Caller::User("alice"))), Follow::Started);
        let ip = "192.0.2.7".parse().unwrap();
        let ip = SourceKey::of(ip, 64);
        assert_eq!(follow(5, Some(Caller::Source(ip))), Follow::Started);
        assert_eq!(follow(6, Some(Caller::Source(ip))), Follow::Started);
        assert_eq!(follow(7, Some(Caller::Source(ip))), Follow::OverShare);
        assert_eq!(follow(8, None), Follow::Started);
        // A call that ends, or one that did not go out, gives its place
        // back.
        let failed = String::from_utf8(response("486 Busy Here", "INVITE", ";tag=t2"))
            .unwrap()
            .replace("Call-ID: c1", "Call-ID: call1");
        assert!(d
            .response(&Message::parse(failed.as_bytes()).unwrap(), 10)
            .is_some());
        assert_eq!(follow(9, mallory), Follow::Started);
        d.abandon(&Message::parse(&call(9)).unwrap());
        assert_eq!(follow(10, mallory), Follow::Started);
        assert_eq!(follow(11, mallory), Follow::OverShare);
        assert_eq!(d.len(), 6);
    }

    /// Workers begin and end calls at once: the table never holds more
    /// than its size nor a caller more than its share, and every place
    /// comes back.
    #[test]
    fn shares_and_the_size_hold_under_concurrent_workers() {
        let d = Dialogs::new(20, 8, 3600, RandomState::new());
        let most = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for w in 0..4u32 {
                let (d, most) = (&d, &most);
                scope.spawn(move || {
                    for i in 0..500u32 {
                        let call = msg(&INVITE.replace("c1", &format!("w{w}-{i}")));
                        let user = format!("u{}", i % 3);
                        let m = Message::parse(&call).unwrap();
                        let started = d.begin(&m, start(), Some(Caller::User(&user)), 0);
                        most.fetch_max(d.len(), Ordering::Relaxed);
                        if started == Follow::Started && i % 2 == 0 {
                            d.abandon(&m);
                        }
                    }
                });
            }
        });
        assert!(most.load(Ordering::Relaxed) <= 20);
        for i in 0..3 {
            let held = d
                .owners
                .each()
                .map(|s| {
                    s.get(&d.owner_of(Caller::User(&format!("u{i}"))))
                        .copied()
                        .unwrap_or(0)
                })
                .sum::<usize>();
            assert!(held <= 8, "u{i} holds {held}");
        }
        let held: usize = d.owners.each().map(|s| s.values().sum::<usize>()).sum();
        assert_eq!(
            held,
            d.len(),
            "every dialog counted against its caller once"
        );
        for w in 0..4u32 {
            for i in 0..500u32 {
                let call = msg(&INVITE.replace("c1", &format!("w{w}-{i}")));
                d.abandon(&Message::parse(&call).unwrap());
            }
        }
        assert_eq!(d.len(), 0);
        assert!(
            d.owners.each().all(|s| s.is_empty()),
            "every place given back"
        );
    }
}
