//! The process's own resource use, read from Linux's `/proc`, for the
//! standard `process_*` metrics
//! (<https://prometheus.io/docs/instrumenting/writing_clientlibs/#process-metrics>).

/// The git commit this build came from ("unknown" when built outside git).
pub const COMMIT: &str = env!("SIPSEC_COMMIT");

/// The crate's version, with `+pgo` for a profile-guided build and
/// `+instrumented` for one that collects a profile (semver build metadata).
pub const VERSION: &str = env!("SIPSEC_VERSION");

/// One reading; fields the system did not give are absent.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Usage {
    /// User plus system CPU time, seconds.
    pub cpu_seconds: Option<f64>,
    /// Resident memory, bytes.
    pub resident_bytes: Option<u64>,
    /// Virtual memory, bytes.
    pub virtual_bytes: Option<u64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// The soft limit on file descriptors.
    pub max_fds: Option<u64>,
    /// Start time, Unix seconds.
    pub start_time: Option<f64>,
}

/// Reads the usage now.
pub fn usage() -> Usage {
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    // Fields after the command name, which is in parentheses and may
    // itself hold spaces: state is field 3, utime 14, stime 15,
    // starttime 22 (proc(5)), in USER_HZ ticks, which the kernel fixes
    // at 100 a second for user space on every architecture.
    let fields: Vec<&str> = stat
        .as_deref()
        .and_then(|s| s.rsplit_once(')'))
        .map(|(_, rest)| rest.split_ascii_whitespace().collect())
        .unwrap_or_default();
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    let ticks = 100.0;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status.lines().find_map(|l| {
            l.strip_prefix(key)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse::<u64>()
                .ok()
                .map(|v| v * 1024)
        })
    };
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<u64>().ok())
    });
    Usage {
        cpu_seconds: field(14)
            .zip(field(15))
            .map(|(u, s)| (u + s) as f64 / ticks),
        resident_bytes: kib("VmRSS:"),
        virtual_bytes: kib("VmSize:"),
        open_fds: std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as u64),
        max_fds: max_fds(),
        start_time: boot
            .zip(field(22))
            .map(|(b, t)| b as f64 + t as f64 / ticks),
    }
}

fn max_fds() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The `process_*` families in the Prometheus text format.
pub fn render(u: &Usage) -> String {
    let mut o = String::new();
    let rows: [(&str, &str, &str, Option<f64>); 6] = [
        (
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            u.cpu_seconds,
        ),
        (
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            u.resident_bytes.map(|v| v as f64),
        ),
        (
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            u.virtual_bytes.map(|v| v as f64),
        ),
        (
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            u.open_fds.map(|v| v as f64),
        ),
        (
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            u.max_fds.map(|v| v as f64),
        ),
        (
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            u.start_time,
        ),
    ];
    for (name, kind, help, v) in rows {
        if let Some(v) = v {
            o.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n"
            ));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    include!("../../build_metadata.rs");

    #[test]
    fn a_profile_guided_or_instrumented_build_is_named_in_the_version() {
        let flags = |f: &[&str]| f.join("\x1f");
        assert_eq!(build_metadata(""), "");
        assert_eq!(build_metadata(&flags(&["-Ctarget-cpu=native"])), "");
        assert_eq!(
            build_metadata(&flags(&["-Cprofile-use=/p/s.profdata"])),
            "+pgo"
        );
        assert_eq!(build_metadata(&flags(&["-C", "profile-use=/p"])), "+pgo");
        assert_eq!(
            build_metadata(&flags(&["-Copt-level=3", "-Cprofile-generate=/raw"])),
            "+instrumented"
        );
        // A path that merely mentions a profile is not one.
        assert_eq!(build_metadata(&flags(&["-Clink-arg=/profile-use"])), "");
        assert!(VERSION.starts_with(env!("CARGO_PKG_VERSION")), "{VERSION}");
    }

    #[test]
    fn this_process_is_measured() {
        let u = usage();
        assert!(u.resident_bytes.is_some_and(|r| r > 1 << 20), "{u:?}");
        assert!(u.open_fds.is_some_and(|n| n >= 3), "{u:?}");
        assert!(u.max_fds.is_some_and(|n| n >= u.open_fds.unwrap_or(0)));
        let start = u.start_time.expect("start time");
        let now = crate::io::clock::unix_now() as f64;
        assert!(
            start <= now + 1.0 && start > now - 86_400.0 * 365.0,
            "{start}"
        );
        let text = render(&u);
        assert!(text.contains("# TYPE process_cpu_seconds_total counter\n"));
    }
}
