//! `sipsec bench srtp`: SRTP against libsrtp, and a call's media.

use std::process::ExitCode;

use clap::Args;

use super::common::TableOutputs;

#[derive(Args)]
pub struct SrtpArgs {
    /// Profiles, comma-separated (SDES names; default: all eight).
    #[arg(long, value_delimiter = ',')]
    pub(super) profiles: Vec<String>,
    /// Packets per round.
    #[arg(long, default_value_t = 100_000)]
    pub(super) packets: usize,
    /// Rounds per profile and side (the tables show the median).
    #[arg(long, default_value_t = 7)]
    pub(super) rounds: usize,
    /// Packets each way per call in part two (calls through sipsec serve).
    #[arg(long, default_value_t = 10_000)]
    pub(super) call_packets: u64,
    /// Skip part two (the calls).
    #[arg(long)]
    pub(super) no_calls: bool,
    /// A smoke run: 2,000 packets, 2 rounds, calls of 50 packets (what CI runs).
    #[arg(long)]
    pub(super) quick: bool,
    #[command(flatten)]
    pub(super) out: TableOutputs,
}

pub(super) fn srtp_bench(a: SrtpArgs) -> Result<ExitCode, String> {
    use sipsec_bench::srtp;
    let profiles = if a.profiles.is_empty() {
        ::srtp::Profile::ALL.to_vec()
    } else {
        a.profiles
            .iter()
            .map(|p| {
                ::srtp::Profile::parse(p)
                    .ok_or_else(|| format!("--profiles: unknown SRTP profile {p:?}"))
            })
            .collect::<Result<Vec<_>, _>>()?
    };
    let (packets, rounds) = if a.quick {
        (2_000, 2)
    } else {
        (a.packets, a.rounds)
    };
    if packets == 0 || packets > 1 << 20 || rounds == 0 {
        return Err("--packets is 1 to 1048576 and --rounds at least 1".into());
    }
    let workdir = std::env::temp_dir().join(format!("sipsec-srtp-{}", std::process::id()));
    let rows = srtp::experiment(&profiles, packets, rounds, &workdir, |r| {
        eprintln!(
            "{:24} protect {:6.0} ns (libsrtp {:6.0})  unprotect {:6.0} ns (libsrtp {:6.0})",
            r.profile,
            r.sipsec.protect(),
            r.libsrtp.protect(),
            r.sipsec.unprotect(),
            r.libsrtp.unprotect()
        );
    });
    let rows = match rows {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&workdir);
            return Err(e.into());
        }
    };
    let mut table = srtp::markdown(&rows);
    let call_packets = if a.quick { 50 } else { a.call_packets };
    let calls = if a.no_calls {
        Vec::new()
    } else {
        if call_packets == 0 || call_packets > 1_000_000 {
            return Err("--call-packets is 1 to 1000000".into());
        }
        eprintln!(
            "calls through sipsec serve: {} configurations, {call_packets} packets each way ({:.0} s each)",
            profiles.len() + 1,
            call_packets as f64 * 0.02
        );
        let exe = std::env::current_exe().map_err(|e| format!("finding the sipsec binary: {e}"))?;
        let r = srtp::calls(
            &exe,
            &profiles,
            call_packets,
            &workdir.join("calls"),
            |row| {
                let s = &row.stats;
                eprintln!(
                "{:24} {:16} delta max {:6.2} ms mean {:6.2} ms  jitter max {:6.3} ms mean {:6.3} ms  {:6.2} kbit/s IP  loss {:.2} %",
                row.config, row.direction, s.delta_max_ms, s.delta_mean_ms, s.jitter_max_ms, s.jitter_mean_ms, s.ip_bps / 1000.0, s.loss_percent
            );
            },
            &|config, t, length| {
                eprintln!(
                    "{config:24} call under way: {:.0} of {:.0} s",
                    t.as_secs_f64(),
                    length.as_secs_f64()
                );
            },
        );
        let _ = std::fs::remove_dir_all(&workdir);
        r?
    };
    let _ = std::fs::remove_dir_all(&workdir);
    if !calls.is_empty() {
        table.push_str(&srtp::calls_markdown(&calls, call_packets));
    }
    print!("{table}");
    let value = serde_json::json!({ "per_packet": rows, "calls": calls });
    a.out.write(&value, &table, "srtp", || {
        let section = (!calls.is_empty()).then(|| srtp::calls_html(&calls, call_packets));
        srtp::html(&rows, section)
    })?;
    Ok(ExitCode::SUCCESS)
}
