//! The per-step timing hook: a [`Context`](crate::Context) reports how
//! long each internal step of protect and unprotect took. The default,
//! [`NoHook`], compiles to nothing; [`StepTimes`] sums wall-clock time per
//! step.

use std::time::Instant;

/// An internal step of the SRTP transforms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Deriving session keys (at the first packet and at each kdr epoch).
    KeyDerivation,
    /// Parsing the header, locating the stream, estimating the index.
    Header,
    /// Checking the replay list (receive side).
    ReplayCheck,
    /// Encryption (for AES-GCM: encryption and tag together).
    Encryption,
    /// Decryption (for AES-GCM: tag check and decryption together).
    Decryption,
    /// Computing or checking the HMAC-SHA1 tag (AES-CM suites only).
    Authentication,
}

impl Step {
    /// Every step, in table order.
    pub const ALL: [Step; 6] = [
        Step::KeyDerivation,
        Step::Header,
        Step::ReplayCheck,
        Step::Encryption,
        Step::Decryption,
        Step::Authentication,
    ];

    /// A short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Step::KeyDerivation => "key derivation",
            Step::Header => "header",
            Step::ReplayCheck => "replay check",
            Step::Encryption => "encryption",
            Step::Decryption => "decryption",
            Step::Authentication => "authentication",
        }
    }
}

/// Receives the duration of each step.
pub trait Hook {
    /// What `start` hands to `stop`.
    type Mark: Copy;
    /// A step begins.
    fn start(&mut self) -> Self::Mark;
    /// The step begun at `mark` ended.
    fn stop(&mut self, step: Step, mark: Self::Mark);
}

/// No timing: every call is an empty inline function.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHook;

impl Hook for NoHook {
    type Mark = ();
    #[inline(always)]
    fn start(&mut self) {}
    #[inline(always)]
    fn stop(&mut self, _: Step, _: ()) {}
}

/// Total nanoseconds and number of occurrences per step.
#[derive(Debug, Clone, Default)]
pub struct StepTimes {
    nanos: [u64; 6],
    calls: [u64; 6],
}

impl StepTimes {
    /// Total nanoseconds spent in `step`.
    pub fn nanos(&self, step: Step) -> u64 {
        self.nanos[step as usize]
    }

    /// How many times `step` ran.
    pub fn calls(&self, step: Step) -> u64 {
        self.calls[step as usize]
    }

    /// Mean nanoseconds per occurrence of `step` (0 when it never ran).
    pub fn mean(&self, step: Step) -> f64 {
        let calls = self.calls(step);
        if calls == 0 {
            0.0
        } else {
            self.nanos(step) as f64 / calls as f64
        }
    }

    /// Forgets everything measured so far.
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

impl Hook for StepTimes {
    type Mark = Instant;
    #[inline]
    fn start(&mut self) -> Instant {
        Instant::now()
    }
    #[inline]
    fn stop(&mut self, step: Step, mark: Instant) {
        let i = step as usize;
        self.nanos[i] += mark.elapsed().as_nanos() as u64;
        self.calls[i] += 1;
    }
}
