//! Requests this proxy sends on its own rather than forwards — the BYEs
//! of a call the operator ends — kept until answered. Over UDP each is a
//! non-INVITE client transaction (RFC 3261 §17.1.2.2): sent again when
//! Timer E fires, from T1 doubling up to T2, until a final response
//! arrives or Timer F (64·T1) gives it up. Over a reliable transport it
//! is sent once (§17.1.2.2: no retransmission) and not kept.
//!
//! The table is bounded; a request that finds it full is still sent,
//! once, and counted.

use std::time::{Duration, Instant};

use sip_core::transaction::TimerConfig;
use sip_core::Transport;

use crate::proto::effects::{Hop, Sends};
use crate::shards::Shards;

/// The branch prefix of this proxy's own requests (RFC 3261's magic
/// cookie first).
pub const BRANCH_PREFIX: &str = "z9hG4bK-op";

/// Requests waiting for their answers, at most.
const MAX_PENDING: usize = 256;

/// One request waiting for its final response.
#[derive(Debug)]
struct Pending {
    branch: String,
    bytes: Vec<u8>,
    hop: Hop,
    next: Instant,
    interval: Duration,
    give_up: Instant,
}

/// What happened to the requests, for `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Final responses received.
    pub answered: u64,
    /// Retransmissions sent.
    pub retransmitted: u64,
    /// Given up at Timer F.
    pub timed_out: u64,
    /// Sent once because the table was full.
    pub untracked: u64,
}

#[derive(Debug, Default)]
struct State {
    pending: Vec<Pending>,
    counts: Counts,
}

/// This proxy's own requests in flight.
#[derive(Debug)]
pub struct Originated {
    timers: TimerConfig,
    state: Shards<State>,
}

impl Default for Originated {
    fn default() -> Self {
        Self::new(TimerConfig::RFC3261)
    }
}

impl Originated {
    /// With `timers` (T1, T2).
    pub fn new(timers: TimerConfig) -> Self {
        Self {
            timers,
            state: Shards::new(1, State::default),
        }
    }

    fn state(&self) -> impl std::ops::DerefMut<Target = State> + '_ {
        self.state.lock(0)
    }

    /// The request `bytes` with branch `branch` is being sent to `hop`
    /// at `now` (the caller sends it): kept for retransmission when
    /// `hop` is UDP. `false` when the table was full (sent once only).
    pub fn start(&self, branch: &str, bytes: &[u8], hop: Hop, now: Instant) -> bool {
        if hop.1 != Transport::Udp {
            return true;
        }
        let mut s = self.state();
        if s.pending.len() >= MAX_PENDING {
            s.counts.untracked += 1;
            return false;
        }
        s.pending.push(Pending {
            branch: branch.to_owned(),
            bytes: bytes.to_vec(),
            hop,
            next: now + self.timers.t1,
            interval: self.timers.t1,
            give_up: now + self.timers.t1 * 64,
        });
        true
    }

    /// A response with `branch` arrived (`status`): `true` when it
    /// answers one of these requests. A final response ends its
    /// retransmissions; a provisional one moves them to T2 (§17.1.2.2).
    pub fn answered(&self, branch: &str, status: u16, now: Instant) -> bool {
        let mut s = self.state();
        let Some(i) = s.pending.iter().position(|p| p.branch == branch) else {
            return false;
        };
        if status >= 200 {
            s.pending.swap_remove(i);
            s.counts.answered += 1;
        } else {
            let p = &mut s.pending[i];
            p.interval = self.timers.t2;
            p.next = now + self.timers.t2;
        }
        true
    }

    /// Sends again into `sends` what is due at `now`, and gives up what
    /// Timer F ends: the branches given up.
    pub fn tick(&self, now: Instant, sends: &mut Sends) -> Vec<String> {
        let mut s = self.state();
        let mut gone = Vec::new();
        let mut again = 0;
        s.pending.retain_mut(|p| {
            if now >= p.give_up {
                gone.push(std::mem::take(&mut p.branch));
                return false;
            }
            if now >= p.next {
                sends.push(&p.bytes, p.hop);
                again += 1;
                p.interval = (p.interval * 2).min(self.timers.t2);
                p.next = now + p.interval;
            }
            true
        });
        s.counts.retransmitted += again;
        s.counts.timed_out += gone.len() as u64;
        gone
    }

    /// When [`tick`](Self::tick) next has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.state()
            .pending
            .iter()
            .map(|p| p.next.min(p.give_up))
            .min()
    }

    /// Requests waiting for their answers.
    pub fn len(&self) -> usize {
        self.state().pending.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What has happened so far.
    pub fn counts(&self) -> Counts {
        self.state().counts
    }

    /// The Prometheus text of these requests.
    pub fn render(&self, o: &mut String) {
        use std::fmt::Write;
        let (pending, c) = {
            let s = self.state();
            (s.pending.len(), s.counts)
        };
        let _ = writeln!(
            o,
            "# HELP sipsec_own_requests_pending BYEs of the operator's waiting for their answers.\n\
# TYPE sipsec_own_requests_pending gauge\nsipsec_own_requests_pending {pending}\n\
# HELP sipsec_own_requests_total What became of the operator's BYEs.\n\
# TYPE sipsec_own_requests_total counter\n\
sipsec_own_requests_total{{outcome=\"answered\"}} {}\n\
sipsec_own_requests_total{{outcome=\"timeout\"}} {}\n\
sipsec_own_requests_total{{outcome=\"untracked\"}} {}\n\
# HELP sipsec_own_requests_retransmitted_total Retransmissions of the operator's BYEs over UDP.\n\
# TYPE sipsec_own_requests_retransmitted_total counter\n\
sipsec_own_requests_retransmitted_total {}",
            c.answered, c.timed_out, c.untracked, c.retransmitted
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn hop(t: Transport) -> Hop {
        (SocketAddr::from(([127, 0, 0, 1], 5060)), t)
    }

    #[test]
    fn retransmits_doubling_to_t2_until_answered() {
        let o = Originated::default();
        let t0 = Instant::now();
        assert!(o.start("z9hG4bK-op1", b"BYE", hop(Transport::Udp), t0));
        let mut sends = Sends::default();
        let mut at = t0;
        let mut gaps = Vec::new();
        for _ in 0..5 {
            let next = o.next_deadline().unwrap();
            gaps.push(next - at);
            at = next;
            assert!(o.tick(at, &mut sends).is_empty());
        }
        let ms: Vec<u128> = gaps.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [500, 1000, 2000, 4000, 4000]);
        assert_eq!(sends.iter().count(), 5);
        assert!(!o.answered("z9hG4bK-other", 200, at));
        assert!(o.answered("z9hG4bK-op1", 200, at));
        assert!(o.is_empty());
        assert_eq!(o.counts().answered, 1);
        assert_eq!(o.counts().retransmitted, 5);
    }

    #[test]
    fn gives_up_at_timer_f_and_keeps_no_reliable_request() {
        let o = Originated::default();
        let t0 = Instant::now();
        assert!(o.start("b-tcp", b"BYE", hop(Transport::Tcp), t0));
        assert!(o.is_empty());
        o.start("b-udp", b"BYE", hop(Transport::Udp), t0);
        let mut sends = Sends::default();
        assert_eq!(o.tick(t0 + Duration::from_secs(32), &mut sends), ["b-udp"]);
        assert!(o.is_empty());
        assert_eq!(o.counts().timed_out, 1);
    }

    #[test]
    fn a_provisional_answer_slows_retransmission_to_t2() {
        let o = Originated::default();
        let t0 = Instant::now();
        o.start("b", b"BYE", hop(Transport::Udp), t0);
        assert!(o.answered("b", 100, t0));
        assert_eq!(o.next_deadline(), Some(t0 + Duration::from_secs(4)));
    }

    #[test]
    fn the_table_is_bounded() {
        let o = Originated::default();
        let t0 = Instant::now();
        for i in 0..MAX_PENDING {
            assert!(o.start(&format!("b{i}"), b"BYE", hop(Transport::Udp), t0));
        }
        assert!(!o.start("one-more", b"BYE", hop(Transport::Udp), t0));
        assert_eq!(o.len(), MAX_PENDING);
        assert_eq!(o.counts().untracked, 1);
    }
}
