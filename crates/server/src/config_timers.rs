//! `[timers]`: the transaction timers' base values (RFC 3261 §17.1.1.1).
//! T1 "MAY be chosen smaller" where the round trip is known to be short,
//! as on a private network; every timer derives from T1, T2 and T4
//! (Timer B and F: 64·T1).

use std::time::Duration;

use sip_core::transaction::TimerConfig;

/// The shortest T1: the timers thread looks at least every 50 ms, so a
/// transaction's first timer is never due sooner than twice that.
pub const MIN_T1_MS: u64 = 100;

/// The longest T1, T2 or T4 taken.
pub const MAX_MS: u64 = 60_000;

/// `[timers]` as written.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimersSection {
    /// Round-trip estimate, milliseconds (default 500).
    pub t1_ms: Option<u64>,
    /// Longest retransmission interval, milliseconds (default 4000).
    pub t2_ms: Option<u64>,
    /// Longest a message stays in the network, milliseconds (default 5000).
    pub t4_ms: Option<u64>,
}

/// Applies `sec` to `t`; the key and what is wrong on error.
pub fn timer_settings(
    sec: TimersSection,
    t: &mut TimerConfig,
) -> Result<(), (&'static str, String)> {
    let ms = |v: u64| Duration::from_millis(v);
    if let Some(v) = sec.t1_ms {
        if !(MIN_T1_MS..=MAX_MS).contains(&v) {
            return Err(("timers.t1_ms", format!("{v}: {MIN_T1_MS} to {MAX_MS} ms")));
        }
        t.t1 = ms(v);
    }
    if let Some(v) = sec.t2_ms {
        if !(1..=MAX_MS).contains(&v) {
            return Err(("timers.t2_ms", format!("{v}: 1 to {MAX_MS} ms")));
        }
        t.t2 = ms(v);
    }
    if let Some(v) = sec.t4_ms {
        if !(1..=MAX_MS).contains(&v) {
            return Err(("timers.t4_ms", format!("{v}: 1 to {MAX_MS} ms")));
        }
        t.t4 = ms(v);
    }
    if t.t2 < t.t1 {
        return Err((
            "timers.t2_ms",
            format!(
                "{} ms is shorter than T1 ({} ms): retransmissions double from T1 up to T2",
                t.t2.as_millis(),
                t.t1.as_millis()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(text: &str) -> Result<TimerConfig, (&'static str, String)> {
        let sec: TimersSection = toml::from_str(text).expect("parses");
        let mut t = TimerConfig::RFC3261;
        timer_settings(sec, &mut t).map(|()| t)
    }

    #[test]
    fn absent_keys_keep_rfc_3261s_values() {
        assert_eq!(apply(""), Ok(TimerConfig::RFC3261));
        let t = apply("t1_ms = 100\nt4_ms = 2500").expect("valid");
        assert_eq!(t.t1, Duration::from_millis(100));
        assert_eq!(t.t2, Duration::from_secs(4));
        assert_eq!(t.t4, Duration::from_millis(2500));
        assert_eq!(t.timeout(), Duration::from_millis(6400), "Timer B");
    }

    #[test]
    fn values_out_of_range_are_named() {
        for (text, key, says) in [
            ("t1_ms = 99", "timers.t1_ms", "99: 100 to 60000 ms"),
            ("t1_ms = 60001", "timers.t1_ms", "60001"),
            ("t2_ms = 0", "timers.t2_ms", "0: 1 to 60000 ms"),
            ("t4_ms = 70000", "timers.t4_ms", "70000"),
            ("t1_ms = 5000", "timers.t2_ms", "shorter than T1 (5000 ms)"),
        ] {
            let (k, msg) = apply(text).expect_err(text);
            assert_eq!(k, key, "{text}");
            assert!(msg.contains(says), "{text}: {msg}");
        }
    }
}
