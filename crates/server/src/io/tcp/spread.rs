//! A busy connection on every reactor: once one connection (a trunk, a
//! peer proxy) carries more than `spread_above` messages a second, the
//! reactor that reads it frames its messages as before but hands each to
//! the reactor its Call-ID hashes to, so its load is decided on every
//! core. One call's messages always go to one reactor, in the order they
//! came, so the order SIP needs (a transaction's responses, a dialog's
//! requests) holds; calls are independent of each other. The messages
//! handed to a reactor and not yet decided are bounded (`spread_queue`):
//! past the bound the busy connection is not read until they are, and
//! TCP's window holds the peer back.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::shared::*;
use crate::proto::metrics::Spread;

/// How busy a connection is.
#[derive(Debug, Default)]
pub(super) struct Busy {
    /// The second being counted, and the messages in it.
    window: Option<(Instant, u32)>,
    /// Busy: every reactor decides its messages from now on.
    pub(super) spread: bool,
    /// Not read until its peer takes the answers waiting for it: read
    /// again on the writable edge that says it did, not on a timer.
    pub(super) waits_for_peer: bool,
    /// Its reactor is behind: a turn's reading budget ran out with more
    /// to read, and no read has drained the socket since. It then hands
    /// the messages of other reactors' calls on. (A read that merely
    /// left bytes behind says little: TLS reads a record run at a time.)
    pub(super) behind: bool,
}

/// Where a framed message of a connection is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// Here, its call's reactor (or not a busy connection).
    Here,
    /// Here, though its call belongs to another reactor: this one keeps
    /// up, and none of the connection's messages wait elsewhere.
    Kept,
    /// At reactor `to`, its call's.
    To(usize),
}

impl Reactor {
    /// Where `bytes` from `conn` is decided. A connection becomes busy
    /// past `spread_above` messages in one second and stays so; a busy
    /// connection's messages go to their calls' reactors only while its
    /// own reactor is behind (a hand-off costs more than a decision on a
    /// reactor that keeps up), and once any went, each call's next
    /// message follows until they are all decided.
    pub(super) fn spread_to(&mut self, conn: &Conn, bytes: &[u8]) -> Route {
        let above = self.hub.limits.spread_above;
        let reactors = self.hub.reactors.get().map_or(1, Vec::len);
        if above == 0 || reactors < 2 {
            return Route::Here;
        }
        let Some(l) = self.locals.get_mut(&conn.token) else {
            return Route::Here;
        };
        if !l.busy.spread {
            let now = l.last_read;
            let (since, n) = match l.busy.window {
                Some((since, n)) if now.duration_since(since) < Duration::from_secs(1) => {
                    (since, n + 1)
                }
                _ => (now, 1),
            };
            l.busy.window = Some((since, n));
            if n <= above {
                return Route::Here;
            }
            l.busy.spread = true;
            conn.spread.store(true, Ordering::Relaxed);
            let metrics = &self.hub.shared.metrics;
            metrics.spread_add(Spread::Connections);
            crate::io::log::connection_trouble(&format!(
                "{} over {:?} carries more than {above} messages a second: every reactor decides its messages now",
                conn.peer, conn.transport
            ));
        }
        let Some(id) = call_id(bytes) else {
            return Route::Here;
        };
        let to = (fnv1a(id) % reactors as u64) as usize;
        if to == self.index {
            Route::Here
        } else if !self.hub.limits.spread_always
            && !l.busy.behind
            && conn.handed.load(Ordering::Acquire) == 0
        {
            Route::Kept
        } else {
            Route::To(to)
        }
    }

    /// `n` messages handed on were decided (and their answers, deferred
    /// ones too, sent or in `conn`'s outbox): once none waits, the
    /// reactor that reads `conn` may decide its calls' messages again.
    /// Counted under the outbox's lock, so an answer taken from the
    /// outbox is one whose message no longer counts as waiting.
    pub(super) fn handed_decided(&self, conn: &Conn, n: u32) {
        let _outbox = lock(&conn.outbox);
        conn.handed.fetch_sub(n, Ordering::Release);
        let metrics = &self.hub.shared.metrics;
        metrics.spread_add_n(Spread::Decided, u64::from(n));
    }

    /// Hands `bytes` from `conn` to reactor `to`; it goes with the others
    /// of this turn ([`Reactor::send_handoffs`]).
    pub(super) fn hand_off(&mut self, to: usize, conn: &Arc<Conn>, bytes: &[u8]) {
        if self.handoffs.len() <= to {
            self.handoffs.resize_with(to + 1, Vec::new);
        }
        conn.handed.fetch_add(1, Ordering::Relaxed);
        self.handoffs[to].push(Order::Decide(conn.clone(), bytes.to_vec()));
        let metrics = &self.hub.shared.metrics;
        metrics.spread_add(Spread::Handoffs);
    }

    /// Sends this turn's handed-off messages: one lock per reactor, not
    /// per message, and a wake-up only for one that waits.
    pub(super) fn send_handoffs(&mut self) {
        for (to, orders) in self.handoffs.iter_mut().enumerate() {
            if orders.is_empty() {
                continue;
            }
            let Some(link) = self.hub.link(to) else {
                orders.clear();
                continue;
            };
            link.handed.fetch_add(orders.len(), Ordering::Relaxed);
            link.give(|queued| queued.append(orders));
        }
    }

    /// Reads the connections listed for another read: those whose budget
    /// ran out and those the hand-off bound held. A connection read this
    /// turn may be listed again by its own event too: each is read once
    /// a turn, however often listed.
    pub(super) fn read_listed(&mut self) {
        for t in once_each(std::mem::take(&mut self.again)) {
            self.readable(t, Cause::Listed);
        }
        for t in once_each(std::mem::take(&mut self.held)) {
            self.readable(t, Cause::Listed);
        }
    }

    /// Whether this turn has gathered messages for other reactors: only
    /// then can a read have brought one to the bound since the turn
    /// began (a check without a lookup on every read).
    pub(super) fn gathered_any(&self) -> bool {
        self.handoffs.iter().any(|h| !h.is_empty())
    }

    /// Whether a busy connection must wait before it is read again: a
    /// reactor holds `spread_queue` messages handed to it, those this
    /// turn gathered for it and has not sent yet included — else a turn
    /// that reads many busy connections would hand a reactor far more
    /// than the bound before its count moved.
    pub(super) fn handed_too_many(&self) -> bool {
        let handed = self.hub.reactors.get().into_iter().flatten();
        over_bound(
            handed.map(|l| l.handed.load(Ordering::Relaxed)),
            |to| self.handoffs.get(to).map_or(0, Vec::len),
            self.hub.limits.spread_queue,
        )
    }

    /// Whether busy connection `t` must wait before it is read (again),
    /// and if so, marks it to be read once what it waits for is done:
    /// - reactors that hold the hand-off bound (checked when `bound`:
    ///   this turn may have brought one to it), or [`IN_FLIGHT`] of its
    ///   messages still decided elsewhere: tried again after [`HELD`];
    /// - its peer, whose socket takes no more: read again on the
    ///   writable edge that says it took them ([`Reactor::peer_caught_up`]).
    ///
    /// Reading on would pile answers past the connection's queue bound
    /// and close it as a slow reader (the other reactors answer in bursts
    /// the peer may not drain at once); not read, TCP's window holds the
    /// peer back. A peer that takes nothing is closed at `send_timeout`.
    pub(super) fn busy_waits(&mut self, t: mio::Token, conn: &Conn, bound: bool) -> bool {
        let metrics = &self.hub.shared.metrics;
        if (bound && self.handed_too_many()) || conn.handed.load(Ordering::Relaxed) >= IN_FLIGHT {
            self.held.push(t);
            metrics.spread_add(Spread::Held);
            self.unread(t);
            return true;
        }
        let waits = lock(&conn.tx).backlogged();
        if let Some(l) = self.locals.get_mut(&t) {
            l.busy.waits_for_peer = waits;
        }
        if waits {
            metrics.spread_add(Spread::PeerWaits);
            self.unread(t);
        }
        waits
    }

    /// `t` is not read for now: a message it had begun waits on this
    /// reactor, not on its peer, so its `message_timeout` counts from
    /// when reading resumes (the sweep restarts it while the hold lasts).
    fn unread(&mut self, t: mio::Token) {
        if let Some(start) = self
            .locals
            .get_mut(&t)
            .and_then(|l| l.message_start.as_mut())
        {
            *start = Instant::now();
        }
    }

    /// The peer of `t` took every byte that waited for it: a connection
    /// held for it is read this turn.
    pub(super) fn peer_caught_up(&mut self, t: mio::Token) {
        if let Some(l) = self.locals.get_mut(&t) {
            if std::mem::take(&mut l.busy.waits_for_peer) {
                self.again.push(t);
            }
        }
    }
}

/// Most messages of one busy connection handed on and undecided: their
/// answers must fit the connection's queue with what its socket holds.
pub(super) const IN_FLIGHT: u32 = 256;

/// How long a reactor's poll may wait: not at all when something is
/// `ready` to go on with (more to read, a connection to accept), at most
/// [`HELD`] while busy connections are `held` by the hand-off bound,
/// else until the next timed work (`idle`).
pub(super) fn turn_wait(ready: bool, held: bool, idle: Duration) -> Duration {
    if ready {
        Duration::ZERO
    } else if held {
        idle.min(HELD)
    } else {
        idle
    }
}

/// Whether a reactor, with `handed` messages waiting for it (in reactor
/// order) and `gathered(i)` more on their way to it, holds `bound`.
fn over_bound(
    handed: impl Iterator<Item = usize>,
    gathered: impl Fn(usize) -> usize,
    bound: usize,
) -> bool {
    handed
        .enumerate()
        .any(|(to, n)| n.saturating_add(gathered(to)) >= bound)
}

/// The Call-ID of a framed SIP message (`Call-ID:` or the compact `i:`),
/// from its header section; `None` when it has none. Runs on the
/// reading reactor for every message of a busy connection, so a line is
/// looked into only when it starts as the name does.
pub(super) fn call_id(msg: &[u8]) -> Option<&[u8]> {
    // Past the start line.
    let mut at = memchr::memchr(b'\n', msg)? + 1;
    while at < msg.len() {
        let end = memchr::memchr(b'\n', &msg[at..]).map_or(msg.len(), |n| at + n);
        let line = &msg[at..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match line.first() {
            None => return None,
            Some(b) if matches!(b | 0x20, b'c' | b'i') => {
                if let Some(colon) = memchr::memchr(b':', line) {
                    let name = line[..colon].trim_ascii_end();
                    if name.eq_ignore_ascii_case(b"call-id") || name.eq_ignore_ascii_case(b"i") {
                        return Some(line[colon + 1..].trim_ascii());
                    }
                }
            }
            Some(_) => {}
        }
        at = end + 1;
    }
    None
}

/// FNV-1a, 64 bits: spreads Call-IDs over reactors. A peer that picks
/// its Call-IDs to land on one reactor gets what it had without
/// spreading: one core.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_call_id_is_found_long_or_compact_and_not_in_the_body() {
        let m = b"INVITE sip:b@x SIP/2.0\r\nVia: SIP/2.0/TCP h;branch=z9hG4bK1\r\nCall-ID:  abc@h \r\nCSeq: 1 INVITE\r\n\r\n";
        assert_eq!(call_id(m), Some(&b"abc@h"[..]));
        let compact = b"BYE sip:b@x SIP/2.0\r\ni:xyz\r\n\r\n";
        assert_eq!(call_id(compact), Some(&b"xyz"[..]));
        let body = b"MESSAGE sip:b@x SIP/2.0\r\nCSeq: 1 MESSAGE\r\n\r\nCall-ID: not-a-header\r\n";
        assert_eq!(call_id(body), None);
        // Another header's continuation line is not a Call-ID; a name
        // in any case, space before the colon, a bare LF, are.
        let folded = b"BYE sip:b@x SIP/2.0\r\nSubject: a\r\n Call-ID: no\r\ncall-ID : yes\r\n\r\n";
        assert_eq!(call_id(folded), Some(&b"yes"[..]));
        assert_eq!(call_id(b"BYE sip:b@x SIP/2.0\nI: lf\n\n"), Some(&b"lf"[..]));
        assert_eq!(
            call_id(b"BYE sip:b@x SIP/2.0\r\nCSeq: 1 BYE\r\nContact: <sip:c>"),
            None
        );
        assert_eq!(call_id(b"no line feed at all"), None);
        assert_ne!(fnv1a(b"a"), fnv1a(b"b"));
    }

    #[test]
    fn a_held_connection_waits_briefly_and_ready_work_not_at_all() {
        let idle = Duration::from_secs(1);
        assert_eq!(turn_wait(true, true, idle), Duration::ZERO);
        assert_eq!(turn_wait(false, true, idle), HELD);
        assert!(HELD > Duration::ZERO, "held connections must not spin");
        assert_eq!(turn_wait(false, true, Duration::ZERO), Duration::ZERO);
        assert_eq!(turn_wait(false, false, idle), idle);
    }

    #[test]
    fn the_bound_counts_what_this_turn_gathered_and_has_not_sent() {
        const MAX: usize = 4096;
        let none = |_| 0;
        assert!(!over_bound([0, MAX - 1].into_iter(), none, MAX));
        assert!(over_bound([0, MAX].into_iter(), none, MAX));
        // Sent counts nothing yet: what this turn gathered reaches it.
        let gathered = |to| if to == 1 { 100 } else { 0 };
        assert!(over_bound([0, MAX - 100].into_iter(), gathered, MAX));
        assert!(!over_bound([0, MAX - 101].into_iter(), gathered, MAX));
        assert!(!over_bound([MAX - 101, 0].into_iter(), gathered, MAX));
        assert!(over_bound([usize::MAX, 0].into_iter(), gathered, MAX));
        assert!(over_bound([0, 0].into_iter(), |_| 1, 1));
    }
}
