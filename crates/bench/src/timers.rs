//! The generator's pending timers, earliest first, at a constant cost per
//! timer where a binary heap pays a logarithm of the timers pending (tens
//! of thousands at 100,000 calls/s: each transaction holds one for T1).
//!
//! Timers of one kind are set at a fixed delay from "now", so they arrive
//! in deadline order: each kind fills a lane, a FIFO queue, by itself. A
//! timer goes to the lane whose last deadline is the latest one not after
//! its own (so a stream of equal delays keeps to one lane), or to an
//! empty lane; one that fits nowhere goes to a heap. The earliest timer
//! is at the front of a lane or the top of the heap.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// How many lanes: transactions have at most a few timer delays in flight
/// at once (a request's first retransmission, a provisional's timeout,
/// later doubled intervals).
const LANES: usize = 4;

/// A queue of `(deadline, payload)`, popped earliest first.
#[derive(Debug)]
pub struct Timers<T: Ord + Copy, P: Ord + Copy> {
    lanes: [VecDeque<(T, P)>; LANES],
    heap: BinaryHeap<Reverse<(T, P)>>,
}

impl<T: Ord + Copy, P: Ord + Copy> Default for Timers<T, P> {
    fn default() -> Self {
        Self {
            lanes: Default::default(),
            heap: BinaryHeap::new(),
        }
    }
}

impl<T: Ord + Copy, P: Ord + Copy> Timers<T, P> {
    /// Adds a timer.
    pub fn push(&mut self, at: T, payload: P) {
        let e = (at, payload);
        let mut best: Option<usize> = None;
        let mut empty = None;
        for (i, lane) in self.lanes.iter().enumerate() {
            match lane.back() {
                Some(b) if *b <= e => {
                    if best.is_none_or(|j| self.lanes[j].back() < Some(b)) {
                        best = Some(i);
                    }
                }
                Some(_) => {}
                None => {
                    empty.get_or_insert(i);
                }
            }
        }
        match best.or(empty) {
            Some(i) => self.lanes[i].push_back(e),
            None => self.heap.push(Reverse(e)),
        }
    }

    /// Where the earliest timer is: a lane, or the heap (`LANES`).
    fn earliest(&self) -> Option<(usize, (T, P))> {
        let mut min = self.heap.peek().map(|Reverse(e)| (LANES, *e));
        for (i, lane) in self.lanes.iter().enumerate() {
            if let Some(f) = lane.front() {
                if min.is_none_or(|(_, m)| *f < m) {
                    min = Some((i, *f));
                }
            }
        }
        min
    }

    /// The earliest timer, left in place.
    pub fn peek(&self) -> Option<(T, P)> {
        self.earliest().map(|(_, e)| e)
    }

    /// Takes the earliest timer.
    pub fn pop(&mut self) -> Option<(T, P)> {
        let (i, e) = self.earliest()?;
        if i == LANES {
            self.heap.pop();
        } else {
            self.lanes[i].pop_front();
        }
        Some(e)
    }

    /// Timers pending.
    pub fn len(&self) -> usize {
        self.heap.len() + self.lanes.iter().map(VecDeque::len).sum::<usize>()
    }

    /// Whether none is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pops in the order a binary heap does, whatever the pushes: a
    /// stream of equal delays, two interleaved delays, more kinds than
    /// lanes, and random deadlines, with pops in between.
    #[test]
    fn pops_in_deadline_order_like_a_heap() {
        let mut rng = sip_core::fuzzing::Mutator::new(0x9e37_79b9_7f4a_7c15);
        let mut rand = move || rng.next_u64();
        let delays: [&[u64]; 4] = [
            &[500],
            &[500, 32_000],
            &[500, 1_000, 2_000, 4_000, 32_000, 7],
            &[],
        ];
        for (case, delays) in delays.iter().enumerate() {
            let mut t = Timers::default();
            let mut h = BinaryHeap::new();
            let mut now = 0u64;
            let (mut lanes_used, mut heaped) = (0, 0);
            for n in 0..20_000u32 {
                now += rand() % 3;
                let at = match delays.len() {
                    0 => rand() % 100_000,
                    k => now + delays[(rand() % k as u64) as usize],
                };
                t.push(at, n);
                h.push(Reverse((at, n)));
                if rand() % 3 == 0 {
                    assert_eq!(t.pop(), h.pop().map(|Reverse(e)| e), "case {case}");
                }
                assert_eq!(t.peek(), h.peek().map(|Reverse(e)| *e), "case {case}");
                assert_eq!(t.len(), h.len());
                lanes_used = lanes_used.max(t.lanes.iter().filter(|l| !l.is_empty()).count());
                heaped = heaped.max(t.heap.len());
            }
            while let Some(Reverse(e)) = h.pop() {
                assert_eq!(t.pop(), Some(e), "case {case}");
            }
            assert!(t.is_empty() && t.pop().is_none());
            if delays.len() == 1 || delays.len() == 2 {
                // Each delay keeps to a lane: nothing went to the heap.
                assert!(heaped == 0 && lanes_used == delays.len(), "case {case}");
            }
        }
    }
}
