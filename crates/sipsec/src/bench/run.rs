//! `sipsec bench run` (one scenario at a fixed rate) and `sipsec bench null` (a UDP sink).

use std::io::Write;
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

#[derive(clap::Args)]
pub struct NullArgs {
    /// Address to answer on over UDP.
    #[arg(long, default_value = "127.0.0.1:5090")]
    udp: SocketAddr,
    /// Also answer over TCP here.
    #[arg(long, value_name = "ADDR")]
    tcp: Option<SocketAddr>,
    /// Also answer over TLS here (with --cert and --key).
    #[arg(long, value_name = "ADDR", requires_all = ["cert", "key"])]
    tls: Option<SocketAddr>,
    /// Certificate chain (PEM) for --tls.
    #[arg(long, requires = "tls")]
    cert: Option<std::path::PathBuf>,
    /// Its private key (PEM).
    #[arg(long, requires = "tls")]
    key: Option<std::path::PathBuf>,
    /// Responder threads: one UDP socket each, and one reactor each per
    /// stream listener.
    #[arg(long, alias = "threads", default_value_t = 1)]
    workers: usize,
    /// Stop after this many seconds [default: run until killed].
    #[arg(long, alias = "seconds", value_name = "SECONDS")]
    duration: Option<u64>,
}

pub(super) fn null(a: NullArgs) -> Result<ExitCode, String> {
    use sipsec_bench::null_stream::{tls_config, StreamNull};
    for addr in std::iter::once(a.udp).chain(a.tcp).chain(a.tls) {
        loopback_only(addr)?;
    }
    // The stream listeners first: a bench knows the responder is up when
    // its UDP socket answers an OPTIONS, and must then find them too. The
    // banners go out once all are up, UDP's first, as before: a reader
    // that stops at the one it wants must not break a later line.
    let mut streams = Vec::new();
    if let Some(tcp) = a.tcp {
        let s = StreamNull::start(tcp, None, a.workers).map_err(|e| format!("{tcp}: {e}"))?;
        streams.push(("tcp", s));
    }
    if let (Some(tls), Some(cert), Some(key)) = (a.tls, &a.cert, &a.key) {
        let config = tls_config(cert, key).map_err(|e| e.to_string())?;
        let s =
            StreamNull::start(tls, Some(config), a.workers).map_err(|e| format!("{tls}: {e}"))?;
        streams.push(("tls", s));
    }
    let r =
        Responder::start(a.udp, Mode::Null, a.workers).map_err(|e| format!("{}: {e}", a.udp))?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "sipsec bench null: answering on udp {}", r.addr());
    for (name, s) in &streams {
        let _ = writeln!(out, "sipsec bench null: answering on {name} {}", s.addr());
    }
    let _ = out.flush();
    drop(out);
    let end = a.duration.map(|s| Instant::now() + Duration::from_secs(s));
    while end.is_none_or(|e| Instant::now() < e) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let streamed: u64 = streams.iter().map(|(_, s)| s.answered()).sum();
    // Whoever started it may have stopped reading: nothing to say then.
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "answered {} requests", r.answered() + streamed);
    for (name, s) in &streams {
        let (reads, empty) = s.reads();
        let _ = writeln!(out, "{name}: {reads} reads, {empty} of them found nothing");
    }
    r.stop();
    Ok(ExitCode::SUCCESS)
}
