//! The clocks, read here and passed to the core as [`Now`].

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::proto::shared::Now;

/// Current Unix time in seconds.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The time now, as the core takes it.
pub fn now() -> Now {
    Now {
        unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        mono: Instant::now(),
    }
}
