//! Timer values (RFC 3261 §17.1.1.1, Table 4 of Appendix A).

use std::time::Duration;

/// T1, T2 and T4; every other timer derives from these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerConfig {
    /// RTT estimate, default 500 ms.
    pub t1: Duration,
    /// Maximum retransmit interval for non-INVITE requests and INVITE responses, default 4 s.
    pub t2: Duration,
    /// Maximum time a message stays in the network, default 5 s.
    pub t4: Duration,
}

impl TimerConfig {
    /// RFC 3261 defaults.
    pub const RFC3261: TimerConfig = TimerConfig {
        t1: Duration::from_millis(500),
        t2: Duration::from_secs(4),
        t4: Duration::from_secs(5),
    };

    /// 64·T1: timers B, F, H, J and M/L.
    pub fn timeout(&self) -> Duration {
        self.t1 * 64
    }
}

impl Default for TimerConfig {
    fn default() -> Self {
        Self::RFC3261
    }
}
