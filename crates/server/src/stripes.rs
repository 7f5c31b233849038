//! Counters that every message adds to, kept apart per thread. One
//! counter that every worker adds to is one cache line that every core
//! must own in turn: on eight cores each addition waits for the line to
//! come from another core. Each thread adds to a copy of its own (a
//! stripe, on lines no other stripe shares), allocated the first time
//! that thread counts; a read sums the copies, so it sees every addition
//! made before it, as with one counter.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Copies of each counter; threads past this many share them (a share
/// costs time, never a count).
pub(crate) const STRIPES: usize = 16;

/// Eight counters on a cache line of their own.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Line([AtomicU64; 8]);

/// One counter on a cache line of its own.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct Padded(pub(crate) AtomicU64);

/// `W` counters, a copy per thread (at most [`STRIPES`] copies).
#[derive(Debug)]
pub(crate) struct Striped<const W: usize> {
    stripes: [OnceLock<Box<[Line]>>; STRIPES],
}

impl<const W: usize> Default for Striped<W> {
    fn default() -> Self {
        Self {
            stripes: std::array::from_fn(|_| OnceLock::new()),
        }
    }
}

impl<const W: usize> Striped<W> {
    /// Adds `n` to counter `i` (`i < W`).
    #[inline]
    pub(crate) fn add(&self, i: usize, n: u64) {
        debug_assert!(i < W);
        let lines = self.stripes[stripe()]
            .get_or_init(|| (0..W.div_ceil(8)).map(|_| Line::default()).collect());
        lines[i / 8].0[i % 8].fetch_add(n, Ordering::Relaxed);
    }

    /// Counter `i`: every copy's additions.
    pub(crate) fn get(&self, i: usize) -> u64 {
        self.stripes
            .iter()
            .filter_map(OnceLock::get)
            .map(|lines| lines[i / 8].0[i % 8].load(Ordering::Relaxed))
            .sum()
    }
}

/// This thread's stripe: threads take them in turn as they first count.
#[inline]
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    MINE.with(|mine| match mine.get() {
        usize::MAX => {
            let i = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
            mine.set(i);
            i
        }
        i => i,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn what_every_thread_adds_is_read_as_one_count() {
        let c = Arc::new(Striped::<20>::default());
        let threads: Vec<_> = (0..STRIPES + 3)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.add(t % 20, 1);
                        c.add(19, 2);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        for i in [0, 5, 18] {
            assert_eq!(c.get(i), 1000);
        }
        assert_eq!(c.get(19), 2 * 1000 * (STRIPES as u64 + 3));
        // Each stripe is lines of its own, and only threads that counted
        // made one.
        assert_eq!(std::mem::align_of::<Line>(), 64);
        assert!(c.stripes.iter().filter(|s| s.get().is_some()).count() <= STRIPES);
    }
}
