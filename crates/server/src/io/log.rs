//! Operator log lines on standard error: a UTC timestamp, a level and the
//! event. Events a peer can trigger at will (authentication failures,
//! journal errors under a full disk, oversize answers) are rate limited
//! per kind — at most one line a second, the next one saying how many
//! were suppressed — so an attack cannot flood the log.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// One kind of event's rate limit.
#[derive(Debug)]
pub struct Limiter {
    next_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl Limiter {
    /// A limiter that lets the first line through.
    pub const fn new() -> Self {
        Self {
            next_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }
}

impl Default for Limiter {
    fn default() -> Self {
        Self::new()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `2026-11-23T10:00:00.123Z` for Unix milliseconds (proleptic Gregorian,
/// days-from-civil inverted as in Howard Hinnant's date algorithms).
pub fn timestamp(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ms % 1000
    )
}

/// Writes one line now.
pub fn line(level: &str, msg: &str) {
    eprintln!("{} {level} sipsec: {msg}", timestamp(now_ms()));
}

/// Writes one line unless `limiter` let one through less than a second ago.
pub fn limited(limiter: &Limiter, level: &str, msg: impl FnOnce() -> String) {
    let now = now_ms();
    let next = limiter.next_ms.load(Ordering::Relaxed);
    if now < next
        || limiter
            .next_ms
            .compare_exchange(next, now + 1000, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        limiter.suppressed.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let skipped = limiter.suppressed.swap(0, Ordering::Relaxed);
    let text = msg();
    if skipped > 0 {
        line(
            level,
            &format!("{text} ({skipped} similar line(s) suppressed)"),
        );
    } else {
        line(level, &text);
    }
}

static AUTH_FAILURES: Limiter = Limiter::new();
static JOURNAL_ERRORS: Limiter = Limiter::new();
static OVERSIZE: Limiter = Limiter::new();

/// A wrong answer to one of our challenges.
pub fn auth_failure(src: SocketAddr, user: &str) {
    limited(&AUTH_FAILURES, "warn", || {
        format!("authentication failed for {user:?} from {src}")
    });
}

/// A binding change could not be journaled and was not applied.
pub fn journal_error(aor: &str, err: &str) {
    limited(&JOURNAL_ERRORS, "error", || {
        format!("journal write failed, binding for {aor} refused with 500: {err}")
    });
}

/// A message too large for a datagram was not sent as is.
pub fn oversize(what: &str, dest: SocketAddr, len: usize) {
    limited(&OVERSIZE, "warn", || {
        format!("{what} of {len} bytes for {dest} does not fit a UDP datagram")
    });
}

static CONNECTIONS: Limiter = Limiter::new();
static CLOSED: Limiter = Limiter::new();

/// The connection layer could not do something it should (accept, poll).
pub fn connection_trouble(msg: &str) {
    limited(&CONNECTIONS, "warn", || msg.to_owned());
}

/// A connection was closed by a defence (deadline, slow reader, limit).
pub fn connection_closed(peer: SocketAddr, reason: &str) {
    limited(&CLOSED, "info", || {
        format!("closed the connection from {peer}: {reason}")
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(timestamp(1_795_430_096_789), "2026-11-23T10:34:56.789Z");
    }

    #[test]
    fn a_burst_yields_one_line() {
        let l = Limiter::new();
        let mut printed = 0;
        for _ in 0..100 {
            limited(&l, "info", || {
                printed += 1;
                "x".into()
            });
        }
        assert_eq!(printed, 1);
        assert_eq!(l.suppressed.load(Ordering::Relaxed), 99);
    }
}
