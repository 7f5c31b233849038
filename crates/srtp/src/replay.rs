//! The receiver's replay list (RFC 3711 §3.3.2): a sliding window of
//! packet indices below the highest one received.

/// Which of the last `size` indices were received.
#[derive(Debug, Clone)]
pub struct ReplayWindow {
    /// Highest index accepted, if any.
    top: Option<u64>,
    /// Bit k set: index `top - k` was received.
    bits: Vec<u64>,
    size: usize,
}

impl ReplayWindow {
    /// The window libsrtp and RFC 3711 use by default.
    pub const DEFAULT: usize = 64;

    /// A window of `size` packets (rounded up to a multiple of 64).
    pub fn new(size: usize) -> Self {
        let words = size.div_ceil(64).max(1);
        Self {
            top: None,
            bits: vec![0; words],
            size: words * 64,
        }
    }

    /// Whether `index` may be new: `false` when it was already received
    /// or is too old to tell.
    pub fn check(&self, index: u64) -> bool {
        let Some(top) = self.top else {
            return true;
        };
        if index > top {
            return true;
        }
        let age = top - index;
        if age >= self.size as u64 {
            return false;
        }
        let age = age as usize;
        self.bits[age / 64] >> (age % 64) & 1 == 0
    }

    /// Records `index` as received (after it authenticated).
    pub fn accept(&mut self, index: u64) {
        let top = match self.top {
            None => {
                self.top = Some(index);
                self.bits[0] = 1;
                return;
            }
            Some(t) => t,
        };
        if index > top {
            self.shift(index - top);
            self.top = Some(index);
            self.bits[0] |= 1;
        } else {
            let age = (top - index) as usize;
            if age < self.size {
                self.bits[age / 64] |= 1 << (age % 64);
            }
        }
    }

    /// Moves the window up by `n` indices.
    fn shift(&mut self, n: u64) {
        if n >= self.size as u64 {
            self.bits.fill(0);
            return;
        }
        let (words, bits) = ((n / 64) as usize, (n % 64) as u32);
        for i in (0..self.bits.len()).rev() {
            let from = i.checked_sub(words);
            let hi = from.map_or(0, |f| self.bits[f]);
            let lo = from
                .and_then(|f| f.checked_sub(1))
                .map_or(0, |f| self.bits[f]);
            self.bits[i] = if bits == 0 {
                hi
            } else {
                hi << bits | lo >> (64 - bits)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_accepts_new_and_late_rejects_replays_and_old() {
        let mut w = ReplayWindow::new(64);
        for i in [100u64, 102, 101, 99] {
            assert!(w.check(i), "{i}");
            w.accept(i);
        }
        for i in [100u64, 101, 102, 99] {
            assert!(!w.check(i), "{i} replayed");
        }
        assert!(!w.check(102 - 64), "outside the window");
        assert!(w.check(102 - 63), "inside, never seen");
        w.accept(1000);
        assert!(!w.check(102), "fell out of the window");
        assert!(w.check(999));
    }

    #[test]
    fn larger_windows_shift_across_words() {
        let mut w = ReplayWindow::new(256);
        w.accept(10);
        w.accept(80);
        assert!(!w.check(10), "70 back, in a 256 window");
        w.accept(200);
        assert!(!w.check(10), "190 back");
        assert!(!w.check(80));
        assert!(w.check(81));
        w.accept(300);
        assert!(!w.check(10), "too old now");
        assert!(!w.check(80), "220 back: still remembered");
        assert!(w.check(79), "221 back, never seen");
    }
}
