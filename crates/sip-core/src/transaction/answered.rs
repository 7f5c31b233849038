//! A UAS's 2xx to an INVITE, resent by the UA core until the ACK comes
//! (RFC 3261 §13.3.1.4): the INVITE server transaction ends when it passes
//! a 2xx up, so the core, not the transaction, owns these retransmissions.

use std::time::{Duration, Instant};

use super::TimerConfig;

/// What [`Answered::on_timer`] asks of its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// Nothing yet.
    Wait,
    /// Send the 2xx again.
    Again,
    /// 64·T1 passed without an ACK: give up (the UAS should end the
    /// dialog with a BYE, §13.3.1.4).
    GiveUp,
}

/// The retransmission timer of one 2xx: every T1, doubling up to T2, over
/// an unreliable transport; over a reliable one it is sent once and only
/// the 64·T1 wait for the ACK runs.
#[derive(Debug, Clone)]
pub struct Answered {
    given_up_at: Instant,
    next: Option<Instant>,
    interval: Duration,
    t2: Duration,
    acked: bool,
}

impl Answered {
    /// The 2xx was sent (first time) at `now`.
    pub fn new(now: Instant, reliable: bool, cfg: TimerConfig) -> Self {
        Self {
            given_up_at: now + cfg.timeout(),
            next: (!reliable).then(|| now + cfg.t1),
            interval: cfg.t1,
            t2: cfg.t2,
            acked: false,
        }
    }

    /// When [`on_timer`](Self::on_timer) should next run; `None` once
    /// acknowledged or given up.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.acked {
            return None;
        }
        Some(
            self.next
                .map_or(self.given_up_at, |n| n.min(self.given_up_at)),
        )
    }

    /// The time is `now`.
    pub fn on_timer(&mut self, now: Instant) -> Resend {
        if self.acked {
            return Resend::Wait;
        }
        if now >= self.given_up_at {
            self.acked = true; // nothing more to do either way
            return Resend::GiveUp;
        }
        match self.next {
            Some(at) if now >= at => {
                self.interval = (self.interval * 2).min(self.t2);
                self.next = Some(now + self.interval);
                Resend::Again
            }
            _ => Resend::Wait,
        }
    }

    /// The ACK came: no more retransmissions.
    pub fn on_ack(&mut self) {
        self.acked = true;
    }

    /// Whether the ACK came (or the wait for it ended).
    pub fn is_done(&self) -> bool {
        self.acked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resent_at_t1_doubling_to_t2_until_64_t1() {
        let t0 = Instant::now();
        let cfg = TimerConfig::RFC3261;
        let mut a = Answered::new(t0, false, cfg);
        let mut at = Vec::new();
        let mut now = t0;
        while let Some(next) = a.next_deadline() {
            now = next;
            match a.on_timer(now) {
                Resend::Again => at.push(now.duration_since(t0).as_millis()),
                Resend::GiveUp => break,
                Resend::Wait => {}
            }
        }
        assert_eq!(&at[..5], [500, 1500, 3500, 7500, 11500]);
        assert!(at.windows(2).all(|w| w[1] - w[0] <= 4000));
        assert_eq!(now.duration_since(t0), cfg.timeout());
        assert!(a.is_done() && a.next_deadline().is_none());
    }

    #[test]
    fn the_ack_stops_it_and_a_reliable_transport_only_waits() {
        let t0 = Instant::now();
        let mut a = Answered::new(t0, false, TimerConfig::RFC3261);
        a.on_ack();
        assert_eq!(a.on_timer(t0 + Duration::from_secs(1)), Resend::Wait);
        assert_eq!(a.next_deadline(), None);
        let mut r = Answered::new(t0, true, TimerConfig::RFC3261);
        assert_eq!(r.next_deadline(), Some(t0 + Duration::from_secs(32)));
        assert_eq!(r.on_timer(t0 + Duration::from_secs(5)), Resend::Wait);
        assert_eq!(r.on_timer(t0 + Duration::from_secs(32)), Resend::GiveUp);
    }
}
