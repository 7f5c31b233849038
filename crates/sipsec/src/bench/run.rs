//! `sipsec bench run` (one scenario at a fixed rate) and `sipsec bench null` (a UDP sink).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use sipsec_bench::engine::{Live, Shape};
use sipsec_bench::responder::{Mode, Responder};

use super::common::{loopback_only, options, outputs, positive, progress, CommonArgs};

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub(super) common: CommonArgs,
    /// Open loop: new calls per second.
    #[arg(long, default_value_t = 1000.0, conflicts_with = "in_flight")]
    pub(super) rate: f64,
    /// Closed loop: keep this many calls in flight instead of a rate.
    #[arg(long)]
    pub(super) in_flight: Option<usize>,
    /// Most calls to start.
    #[arg(long, default_value_t = 10_000)]
    pub(super) calls: u64,
    /// Longest time to keep starting calls, seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    pub(super) duration: f64,
    /// Time calls in flight get to finish after the last start, seconds.
    #[arg(long, default_value_t = 35.0)]
    pub(super) drain: f64,
    /// Write the per-second series as CSV here.
    #[arg(long)]
    pub(super) csv: Option<PathBuf>,
}

pub(super) fn run_scenario(a: RunArgs) -> Result<ExitCode, String> {
    let valid = positive(a.rate) && positive(a.duration) && a.drain.is_finite() && a.drain >= 0.0;
    if !valid {
        return Err("--rate and --duration must be positive, --drain not negative".into());
    }
    let mut opts = options(&a.common)?;
    opts.run.shape = match a.in_flight {
        Some(n) => Shape::InFlight(n.max(1)),
        None => Shape::Rate(a.rate),
    };
    opts.run.calls = a.calls;
    opts.run.duration = Duration::from_secs_f64(a.duration);
    opts.run.drain = Duration::from_secs_f64(a.drain);
    let live = Live::default();
    let stop = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let report = std::thread::scope(|s| {
        let (total, live_ref, done_ref) = (opts.run.calls, &live, &done);
        let progress = s.spawn(move || progress(live_ref, done_ref, total));
        let r = sipsec_bench::measure(&opts, &live, &stop);
        done.store(true, Ordering::Relaxed);
        let _ = progress.join();
        r
    })?;
    print!("{}", report.summary());
    if let Some(p) = &a.common.json {
        crate::provenance::write_json(p, &report)?;
    }
    outputs(&a.common.html, &a.common.plots, "run", || report.html())?;
    if let Some(p) = &a.csv {
        std::fs::write(p, report.csv()).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(if report.failed == 0 && report.ok > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub(super) fn null(
    udp: SocketAddr,
    threads: usize,
    seconds: Option<u64>,
) -> Result<ExitCode, String> {
    loopback_only(udp)?;
    let r = Responder::start(udp, Mode::Null, threads).map_err(|e| format!("{udp}: {e}"))?;
    println!("sipsec bench null: answering on udp {}", r.addr());
    let end = seconds.map(|s| Instant::now() + Duration::from_secs(s));
    while end.is_none_or(|e| Instant::now() < e) {
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("answered {} requests", r.answered());
    r.stop();
    Ok(ExitCode::SUCCESS)
}
