//! A byte rate shared by every worker: the journal's (`journal_rate`,
//! `journal_burst`), so that a flood of registrations cannot fill the disk
//! or Redis faster than that.
//!
//! A token bucket kept as the one number of the generic cell rate
//! algorithm (ITU-T I.371): the time at which the bucket would be full
//! again. A take moves that time forward by the bytes' worth of the rate,
//! refused when it would lie more than the burst's worth ahead of now.
//! Every worker takes from it with one compare-and-swap: the lock it
//! replaced was one more line every REGISTER of every core wrote under a
//! mutex. A worker takes a lease of up to [`LEASE`] bytes at a time and
//! spends it change by change (see [`ByteBudget::take_leased`]), so the
//! line moves between cores once per lease, not once per REGISTER.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The most a worker takes from the bucket ahead of its changes: what
/// the budget may run ahead of its rate, per worker, is at most this.
pub const LEASE: u64 = 16 << 10;

/// A token bucket of bytes, refilled by the `now` handed in.
#[derive(Debug)]
pub struct ByteBudget {
    /// Times are nanoseconds after this one.
    base: Instant,
    /// When the bucket is full again, in nanoseconds after `base`; at or
    /// before now means full.
    full_at: AtomicU64,
}

/// `bytes` worth of `rate` bytes a second, in nanoseconds.
fn nanos(bytes: u64, rate: u64) -> u64 {
    let n = u128::from(bytes) * 1_000_000_000 / u128::from(rate.max(1));
    u64::try_from(n).unwrap_or(u64::MAX)
}

impl ByteBudget {
    /// A full bucket whose times count from `base` (a `now` before it
    /// counts as `base`).
    pub fn new(base: Instant) -> Self {
        Self {
            base,
            full_at: AtomicU64::new(0),
        }
    }

    /// Takes `bytes` when the bucket (`rate` bytes per second, at most
    /// `burst`, full at first) holds them at `now`. A `now` behind one
    /// another worker already passed counts as that much less refilled.
    pub fn take(&self, bytes: u64, rate: u64, burst: u64, now: Instant) -> bool {
        let now =
            u64::try_from(now.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX);
        let (cost, depth) = (nanos(bytes, rate), nanos(burst, rate));
        let mut full_at = self.full_at.load(Ordering::Relaxed);
        loop {
            let next = full_at.max(now).saturating_add(cost);
            if next - now > depth {
                return false;
            }
            match self.full_at.compare_exchange_weak(
                full_at,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => full_at = seen,
            }
        }
    }

    /// Takes `bytes` as [`take`](Self::take) does, first from `lease`,
    /// what one worker took ahead: when the lease falls short, the rest
    /// and a new lease (at most [`LEASE`], a 64th of `burst`) come from
    /// the bucket together, or the rest alone when the bucket holds no
    /// more. A refused take leaves the lease as it was.
    pub fn take_leased(
        &self,
        lease: &mut u64,
        bytes: u64,
        (rate, burst): (u64, u64),
        now: Instant,
    ) -> bool {
        if let Some(left) = lease.checked_sub(bytes) {
            *lease = left;
            return true;
        }
        let need = bytes - *lease;
        let ahead = (burst / 64).min(LEASE);
        if ahead > 0 && self.take(need + ahead, rate, burst, now) {
            *lease = ahead;
            true
        } else if self.take(need, rate, burst, now) {
            *lease = 0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The bucket as a count of bytes times nanoseconds: what the budget
    /// must decide, take by take.
    struct Reference {
        scaled: u128,
        last: Instant,
    }

    impl Reference {
        fn take(&mut self, bytes: u64, rate: u64, burst: u64, now: Instant) -> bool {
            let elapsed = now.saturating_duration_since(self.last).as_nanos();
            self.last = self.last.max(now);
            let cap = u128::from(burst) * 1_000_000_000;
            self.scaled = (self.scaled + elapsed * u128::from(rate)).min(cap);
            let want = u128::from(bytes) * 1_000_000_000;
            let ok = self.scaled >= want;
            if ok {
                self.scaled -= want;
            }
            ok
        }
    }

    #[test]
    fn takes_are_those_of_a_token_bucket() {
        // 4 µs a byte: the budget's nanoseconds are exact.
        let (rate, burst) = (250_000, 5_000);
        let t0 = Instant::now();
        let budget = ByteBudget::new(t0);
        let mut reference = Reference {
            scaled: u128::from(burst) * 1_000_000_000,
            last: t0,
        };
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut now = t0;
        let (mut granted, mut refused) = (0, 0);
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let bytes = seed % 700;
            // Steps of 0–2 ms, sometimes none.
            if seed >> 61 != 0 {
                now += Duration::from_micros(seed % 2_000);
            }
            let got = budget.take(bytes, rate, burst, now);
            assert_eq!(
                got,
                reference.take(bytes, rate, burst, now),
                "{bytes} at {now:?}"
            );
            if got {
                granted += 1;
            } else {
                refused += 1;
            }
        }
        assert!(granted > 1_000 && refused > 1_000, "{granted} / {refused}");
    }

    #[test]
    fn a_lease_is_spent_before_the_bucket_is_taken_from_again() {
        let now = Instant::now();
        let (rate, burst) = (1_000_000, 64 * 1_000);
        let budget = ByteBudget::new(now);
        let mut lease = 0;
        // 100 bytes, then a lease of a 64th of the burst ahead.
        assert!(budget.take_leased(&mut lease, 100, (rate, burst), now));
        assert_eq!(lease, 1_000);
        let full_at = budget.full_at.load(Ordering::Relaxed);
        for _ in 0..10 {
            assert!(budget.take_leased(&mut lease, 100, (rate, burst), now));
        }
        assert_eq!(
            (lease, budget.full_at.load(Ordering::Relaxed)),
            (0, full_at)
        );
        // The burst is the bound still: 64,000 bytes granted in all at
        // one instant, whoever leased them.
        let mut other = 0;
        let granted = (0..1_000)
            .filter(|i| {
                let l = if i % 2 == 0 { &mut lease } else { &mut other };
                budget.take_leased(l, 100, (rate, burst), now)
            })
            .count();
        assert_eq!(granted, 640 - 11);
        // A burst below 64 bytes leases nothing ahead: exact takes.
        let small = ByteBudget::new(now);
        let mut lease = 0;
        assert!(small.take_leased(&mut lease, 40, (1, 60), now));
        assert_eq!(lease, 0);
        assert!(!small.take_leased(&mut lease, 40, (1, 60), now));
        assert!(small.take_leased(&mut lease, 20, (1, 60), now));
    }

    #[test]
    fn a_burst_is_shared_exactly_among_threads() {
        let now = Instant::now();
        let budget = ByteBudget::new(now);
        let granted = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1_000 {
                        if budget.take(3, 1, 2_400, now) {
                            granted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(granted.load(Ordering::Relaxed), 800);
    }
}
