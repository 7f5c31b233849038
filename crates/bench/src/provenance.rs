//! How a report was made: when, by which sipsec, on which host, with which
//! command and settings. Every JSON, markdown and HTML report carries it, so
//! that a figure can be traced to the run that produced it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::plot;

/// The host a run was made on.
#[derive(Debug, Clone, Serialize)]
pub struct Host {
    /// CPU model (from /proc/cpuinfo).
    pub cpu: String,
    /// Logical CPUs available to this process.
    pub cpus: usize,
    /// Kernel release.
    pub kernel: String,
}

impl Host {
    /// The machine this process runs on.
    pub fn this() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                matches!(k.trim(), "model name" | "Model" | "cpu model")
                    .then(|| v.trim().to_owned())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
        Self {
            cpu,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| "unknown".into()),
        }
    }
}

/// When, with what and how a report was made.
#[derive(Debug, Clone, Serialize)]
pub struct Provenance {
    /// Start of the run, UTC, RFC 3339.
    pub date: String,
    /// sipsec's version.
    pub version: String,
    /// The git commit sipsec was built from ("unknown" outside git).
    pub commit: String,
    /// The host.
    pub host: Host,
    /// The command line, quoted for a POSIX shell.
    pub command: String,
    /// Every option of the command with the value it had (given or default).
    pub settings: BTreeMap<String, String>,
}

impl Provenance {
    /// A provenance dated now, on this host.
    pub fn now(
        version: &str,
        commit: &str,
        args: &[String],
        settings: BTreeMap<String, String>,
    ) -> Self {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Self {
            date: rfc3339(secs),
            version: version.to_owned(),
            commit: commit.to_owned(),
            host: Host::this(),
            command: args
                .iter()
                .map(|a| shell_quote(a))
                .collect::<Vec<_>>()
                .join(" "),
            settings,
        }
    }

    /// One line for a plot standing alone: what it shows, when, by which
    /// build, on which host.
    pub fn caption(&self, what: &str) -> String {
        format!("{what} · {}", self.made())
    }

    fn made(&self) -> String {
        format!(
            "{} by sipsec {} (commit {}) on {} × {}, Linux {}",
            self.date, self.version, self.commit, self.host.cpus, self.host.cpu, self.host.kernel
        )
    }

    /// An HTML block: a table of the above, settings folded.
    pub fn html(&self) -> String {
        let settings: Vec<String> = self
            .settings
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let mut s = String::from("<table class=\"about\">");
        for (k, v) in [
            ("date", self.date.clone()),
            (
                "sipsec",
                format!("{} (commit {})", self.version, self.commit),
            ),
            (
                "host",
                format!(
                    "{} × {}, Linux {}",
                    self.host.cpus, self.host.cpu, self.host.kernel
                ),
            ),
            ("command", self.command.clone()),
        ] {
            let _ = write!(
                s,
                "<tr><th>{k}</th><td><code>{}</code></td></tr>",
                plot::escape(&v)
            );
        }
        let _ = write!(
            s,
            "<tr><th>settings</th><td><details><summary>{} options</summary><code>{}</code></details></td></tr></table>",
            settings.len(),
            plot::escape(&settings.join(" "))
        );
        s
    }

    /// A markdown preamble: made when, by what, with which command.
    pub fn markdown(&self) -> String {
        format!("Made {}.\nCommand: `{}`\n\n", self.made(), self.command)
    }

    /// `value` with this provenance: an object gets a `provenance` member;
    /// anything else becomes `{"provenance": …, "results": value}`.
    pub fn stamp(&self, value: serde_json::Value) -> serde_json::Value {
        let me = serde_json::to_value(self).unwrap_or_default();
        match value {
            serde_json::Value::Object(mut m) => {
                m.insert("provenance".into(), me);
                serde_json::Value::Object(m)
            }
            other => serde_json::json!({ "provenance": me, "results": other }),
        }
    }
}

/// `arg` as a POSIX shell word: bare when it is safe, else single-quoted.
pub fn shell_quote(arg: &str) -> String {
    let safe = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@+%".contains(c));
    if safe {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// Seconds since the epoch as `YYYY-MM-DDThh:mm:ssZ` (proleptic Gregorian).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Days to civil date (H. Hinnant, "chrono-Compatible Low-Level Date
    // Algorithms", days_from_civil's inverse).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_000_000), "2026-11-18T11:06:40Z");
        assert_eq!(rfc3339(4_107_542_399), "2100-02-28T23:59:59Z");
    }

    #[test]
    fn command_lines_are_quoted_for_a_shell() {
        assert_eq!(shell_quote("--rate"), "--rate");
        assert_eq!(shell_quote("127.0.0.1:5060"), "127.0.0.1:5060");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn json_is_stamped_in_place_or_wrapped() {
        let p = Provenance::now("1.0", "abc", &["sipsec".into()], BTreeMap::new());
        let o = p.stamp(serde_json::json!({"ok": 1}));
        assert_eq!(o["ok"], 1);
        assert_eq!(o["provenance"]["commit"], "abc");
        let a = p.stamp(serde_json::json!([1, 2]));
        assert_eq!(a["results"][1], 2);
        assert_eq!(a["provenance"]["command"], "sipsec");
        assert!(p.html().contains("<th>date</th>"));
    }
}
