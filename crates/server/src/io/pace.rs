//! Fewer wake-ups under moderate load. A UDP worker that reads one
//! datagram per wake-up pays a wake-up, a receive and a send system call
//! for each: at 8,000 REGISTERs a second, waiting up to 500 µs took 8–30 %
//! off the CPU per REGISTER (`docs/bench.md`).
//! After a read that found only a few messages, a [`Pacer`] may tell the
//! thread to wait a little before it reads again, so that the next read
//! finds several and one wake-up and one pair of system calls serve them
//! all.
//!
//! The wait is bounded by the configured budget (`batch_wait_us`), counted
//! from the read: a message that arrives just after a read waits for the
//! next at most that long (plus the turn's own work, which it would have
//! waited for anyway). A thread with nothing to read sleeps in the kernel
//! as before, so a lone request on an idle server is read at once: the
//! pacer only waits after a read, and only when the arrival rate it has
//! seen makes several messages likely within the budget. A peer that sends
//! its next request only once answered (one in flight) gains nothing from
//! a wait; waits that gathered at most one message twice in a row back
//! off, for twice as many reads each time.
//!
//! The policy is pure: the caller reads the clock and passes it in, so
//! the tests below run on virtual time; [`wait`] does the sleeping.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::proto::shared::Shared;

/// Messages a wait aims to gather: half a receive batch, so that a wait
/// seldom leaves messages queued beyond one read.
const TARGET: f64 = 16.0;
/// Messages a wait must be expected to gather to be worth a wake-up of
/// its own.
const WORTH: f64 = 3.0;
/// Reads without waiting after waits proved futile, at first and at most.
const BACKOFF_MIN: u32 = 16;
const BACKOFF_MAX: u32 = 4096;
/// Smoothing of the arrival rate: each read moves it by this share.
const SMOOTHING: f64 = 1.0 / 8.0;

/// Decides, after each read, whether to wait before the next.
#[derive(Debug)]
pub struct Pacer {
    budget: Duration,
    /// Messages per second, smoothed over reads.
    rate: f64,
    last_read: Option<Instant>,
    /// The read before this one ended in a wait.
    waited: bool,
    /// Futile waits in a row.
    futile: u32,
    /// Reads left before waiting is tried again, and the next such pause.
    paused: u32,
    backoff: u32,
}

impl Pacer {
    /// A pacer that waits at most `budget` after a read; zero never waits.
    pub fn new(budget: Duration) -> Self {
        Self {
            budget,
            rate: 0.0,
            last_read: None,
            waited: false,
            futile: 0,
            paused: 0,
            backoff: BACKOFF_MIN,
        }
    }

    /// A read at `at` took `n` messages; `full`: it took as many as one
    /// read can, so more may be queued. Returns until when to wait before
    /// the next read, or `None` to read again at once.
    pub fn read(&mut self, at: Instant, n: usize, full: bool) -> Option<Instant> {
        if self.budget.is_zero() {
            return None;
        }
        let gap = self.last_read.map(|l| at.saturating_duration_since(l));
        self.last_read = Some(at);
        let gap = gap?;
        let seen = n as f64 / gap.as_secs_f64().max(1e-6);
        if gap > self.budget * 4 {
            // A quiet spell: the load before it says nothing of the next.
            self.rate = seen;
        } else {
            self.rate += (seen - self.rate) * SMOOTHING;
        }
        self.judge_wait(n);
        if full {
            return None;
        }
        if self.paused > 0 {
            self.paused -= 1;
            return None;
        }
        let budget = self.budget.as_secs_f64();
        if self.rate * budget < WORTH {
            return None;
        }
        self.waited = true;
        Some(at + Duration::from_secs_f64((TARGET / self.rate).min(budget)))
    }

    /// Counts a wait that gathered at most one message as futile; two in
    /// a row pause waiting, longer each time until a wait pays again.
    fn judge_wait(&mut self, n: usize) {
        if !std::mem::take(&mut self.waited) {
            return;
        }
        if n > 1 {
            self.futile = 0;
            self.backoff = BACKOFF_MIN;
            return;
        }
        self.futile += 1;
        if self.futile >= 2 {
            self.futile = 0;
            self.paused = self.backoff;
            self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        }
    }
}

/// Sleeps until `until` (a [`Pacer`]'s answer), if any, counting the
/// wait.
pub fn wait(until: Option<Instant>, shared: &Shared) {
    let Some(until) = until else {
        return;
    };
    let left = until.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        shared.metrics.paced_waits.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: Duration = Duration::from_micros(500);

    /// Feeds a steady stream of `rate` messages a second to a thread that
    /// reads whenever the pacer lets it (its turn takes no time), for
    /// `reads` reads; returns each message's delay (arrival to read) and
    /// the messages per read.
    fn steady(p: &mut Pacer, t0: Instant, rate: f64, reads: usize) -> (Vec<Duration>, Vec<usize>) {
        let every = Duration::from_secs_f64(1.0 / rate);
        let (mut delays, mut sizes) = (Vec::new(), Vec::new());
        let mut next_arrival = t0;
        let mut now = t0;
        for _ in 0..reads {
            // Blocked in the kernel until a message comes, if none waits.
            now = now.max(next_arrival);
            let mut n = 0;
            while next_arrival <= now && n < 32 {
                delays.push(now - next_arrival);
                next_arrival += every;
                n += 1;
            }
            sizes.push(n);
            if let Some(until) = p.read(now, n, n == 32) {
                assert!(until <= now + BUDGET, "waits past the budget");
                now = until;
            }
        }
        (delays, sizes)
    }

    #[test]
    fn a_lone_request_on_an_idle_server_is_read_at_once() {
        let t0 = Instant::now();
        let mut p = Pacer::new(BUDGET);
        // A busy second, then silence, then one request: the thread is
        // asleep in the kernel and the request wakes it.
        steady(&mut p, t0, 20_000.0, 2_000);
        let lone = t0 + Duration::from_secs(5);
        assert_eq!(
            p.read(lone, 1, false),
            None,
            "a lone request waits for nothing"
        );
        // And the one after it, a second later, is read at once too.
        assert_eq!(p.read(lone + Duration::from_secs(1), 1, false), None);
    }

    #[test]
    fn moderate_load_gathers_several_messages_per_read_within_the_budget() {
        let t0 = Instant::now();
        let mut p = Pacer::new(BUDGET);
        let (delays, sizes) = steady(&mut p, t0, 8_000.0, 4_000);
        let settled = &sizes[100..];
        let mean = settled.iter().sum::<usize>() as f64 / settled.len() as f64;
        assert!(
            mean >= 3.0,
            "8,000/s over 500 µs gathers about 4 per read, saw {mean}"
        );
        let worst = delays.iter().max().copied().unwrap_or_default();
        assert!(
            worst <= BUDGET,
            "a message waited {worst:?}, over the budget"
        );
    }

    #[test]
    fn light_load_and_saturation_never_wait() {
        let t0 = Instant::now();
        let mut p = Pacer::new(BUDGET);
        // 1,000/s: half a message per budget, not worth a wake-up.
        let (delays, _) = steady(&mut p, t0, 1_000.0, 500);
        assert!(
            delays.iter().all(Duration::is_zero),
            "light load is read at once"
        );
        // A full read means more are queued: read again at once.
        let t = t0 + Duration::from_secs(2);
        for i in 0..100 {
            assert_eq!(p.read(t + Duration::from_micros(100 * i), 32, true), None);
        }
    }

    #[test]
    fn a_peer_with_one_request_in_flight_stops_being_waited_for() {
        let t0 = Instant::now();
        let mut p = Pacer::new(BUDGET);
        let rtt = Duration::from_micros(60);
        // The peer sends its next request one round trip after the read
        // that answered the last one.
        let mut now = t0;
        let mut waits = 0;
        for _ in 0..2_000 {
            match p.read(now, 1, false) {
                Some(until) => {
                    waits += 1;
                    now = until.max(now + rtt);
                }
                None => now += rtt,
            }
        }
        assert!(waits < 40, "{waits} futile waits in 2,000 reads");
    }

    #[test]
    fn a_zero_budget_never_waits() {
        let t0 = Instant::now();
        let mut p = Pacer::new(Duration::ZERO);
        let (delays, _) = steady(&mut p, t0, 50_000.0, 1_000);
        assert!(delays.iter().all(Duration::is_zero));
    }
}
