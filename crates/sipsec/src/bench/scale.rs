//! `sipsec bench scale`: throughput and CPU per call against workers.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use sipsec_bench::link::Transport;
use sipsec_bench::scale::{self, Load, Plan, Variant};

use super::common::{make_certificate, ramp, targets, KneeArgs, TableOutputs, TransportArg};

#[derive(Args)]
pub struct ScaleArgs {
    /// Servers, comma-separated: sipsec, kamailio, null, sipsec@PATH
    /// (another sipsec build, for an A/B in the same rounds), started here.
    #[arg(long, default_value = "sipsec,kamailio", value_delimiter = ',')]
    pub(super) servers: Vec<String>,
    /// How sipsec's UDP workers share datagrams, comma-separated (a row
    /// each): flow (the kernel's hash of the sender), call (by Call-ID),
    /// spread (any worker per datagram), shared (one socket); over a
    /// connection: flow (each on its reactor), spread (a busy one by
    /// every reactor while its own is behind), handoff (a busy one by
    /// every reactor at any load) [default: call, the server's; spread
    /// over a connection].
    #[arg(long, value_delimiter = ',', value_parser = ["flow", "call", "spread", "shared", "handoff"])]
    pub(super) balance: Vec<String>,
    /// Worker counts, comma-separated [default: 1, 2, 4, … up to the CPUs
    /// the servers may use: all of them, half with --pin].
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=256))]
    pub(super) workers: Vec<u32>,
    /// Loads, comma-separated, as sockets or connections the calls come
    /// from: 1 (a trunk, an SBC, a peer proxy), a few, thousands of
    /// phones. Fewer than generator threads are shared by all the
    /// threads, so one peer's load is not held to what one thread makes
    /// [default: 1,8,10000 over UDP; 1,8 over a connection, at most 1000].
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=15_000))]
    pub(super) flows: Vec<u32>,
    /// The generator's transport: udp, or tcp, tls, ws, wss, where W is
    /// sipsec's connection reactors (and --balance flow keeps each
    /// connection on its reactor, spread lets every reactor decide a busy
    /// one) and Kamailio's children; the built-in callee registers over
    /// UDP. TLS and WSS use an RSA-2048 certificate made here.
    #[arg(long, value_enum, default_value = "udp")]
    pub(super) transport: TransportArg,
    /// Generator threads [default: 2; with --pin the CPUs left to it, at
    /// most 8].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub(super) threads: Option<u32>,
    /// Scenarios, comma-separated: register, invite.
    #[arg(long, default_value = "register", value_delimiter = ',', value_parser = ["register", "invite"])]
    pub(super) scenarios: Vec<String>,
    /// The first offered rate of each row's first cell, calls/s.
    #[arg(long, default_value_t = 20_000.0)]
    pub(super) start: f64,
    /// Each step offers this many times the previous rate.
    #[arg(long, default_value_t = 1.25)]
    pub(super) factor: f64,
    /// Highest rate to offer.
    #[arg(long, default_value_t = 4_000_000.0)]
    pub(super) max: f64,
    /// Length of each step, seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0)]
    pub(super) duration: f64,
    #[command(flatten)]
    pub(super) knee: KneeArgs,
    /// W workers on CPUs 0…W−1, the generator busy-polling on the CPUs
    /// above the largest W.
    #[arg(long)]
    pub(super) pin: bool,
    /// Run every cell this many times (the servers' order reversed every
    /// other round); tables give medians and ranges, and from nine rounds
    /// on each ratio's median with its 95 % confidence interval.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(super) rounds: u32,
    /// Users (CSV with a `username,password` header; a `callee` for invite).
    #[arg(long, value_name = "CSV", default_value = "interop/users.csv")]
    pub(super) credentials: PathBuf,
    /// Kamailio configuration.
    #[arg(long, default_value = "interop/kamailio/kamailio.cfg")]
    pub(super) kamailio_cfg: PathBuf,
    /// The sipsec build measured as the server [default: this
    /// executable] (A/B of two builds with one generator).
    #[arg(long, value_name = "PATH")]
    pub(super) sipsec_exe: Option<PathBuf>,
    #[command(flatten)]
    pub(super) out: TableOutputs,
}

/// CPUs this process may run on.
fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

pub(super) fn scale_bench(a: ScaleArgs) -> Result<ExitCode, String> {
    use sipsec_bench::compare::{Plan as Base, Target};
    let ramp = ramp(a.start, a.factor, a.max, a.duration, &a.knee)?;
    let n = cpus();
    let room = if a.pin { n / 2 } else { n };
    let mut workers: Vec<usize> = if a.workers.is_empty() {
        std::iter::successors(Some(1usize), |w| Some(w * 2))
            .take_while(|w| *w <= room.max(1))
            .collect()
    } else {
        a.workers.iter().map(|w| *w as usize).collect()
    };
    workers.sort_unstable();
    workers.dedup();
    let most = *workers.last().ok_or("--workers: name at least one")?;
    if a.pin && most >= n {
        return Err(format!(
            "--pin: {most} workers leave none of this machine's {n} CPUs to the generator"
        ));
    }
    let threads = a.threads.map_or(
        if a.pin {
            (n - most).min(8)
        } else {
            super::common::GENERATOR_THREADS
        },
        |t| t as usize,
    );
    let servers = targets(&a.servers, &a.kamailio_cfg, a.sipsec_exe.as_deref())?;
    let balance = match (a.balance.is_empty(), a.transport) {
        (false, _) => a.balance.clone(),
        (true, TransportArg::Udp) => vec!["call".to_owned()],
        (true, _) => vec!["spread".to_owned()],
    };
    let variants: Vec<Variant> = servers
        .iter()
        .flat_map(|t| match t {
            Target::Sipsec { .. } => balance
                .iter()
                .map(|b| Variant {
                    target: t.clone(),
                    balance: Some(b.clone()),
                })
                .collect::<Vec<_>>(),
            Target::Kamailio { .. } | Target::Null { .. } => vec![Variant {
                target: t.clone(),
                balance: None,
            }],
        })
        .collect();
    let workdir = std::env::temp_dir().join(format!("sipsec-scale-{}", std::process::id()));
    std::fs::create_dir_all(&workdir).map_err(|e| format!("{}: {e}", workdir.display()))?;
    let transport: Transport = a.transport.into();
    let certificate = if matches!(transport, Transport::Tls | Transport::Wss) {
        let (chain, key, ca) = make_certificate(&workdir)?;
        Some(sipsec_bench::compare::Certificate { chain, key, ca })
    } else {
        None
    };
    let flows = match (a.flows.is_empty(), transport) {
        (false, _) => a.flows.clone(),
        (true, Transport::Udp) => vec![1, 8, 10_000],
        (true, _) => vec![1, 8],
    };
    let plan = Plan {
        base: Base {
            targets: servers,
            scenarios: a.scenarios.clone(),
            auth: vec![false],
            digest: sip_core::digest::Algorithm::Md5,
            rate: a.start,
            calls: 1,
            users: sipsec_bench::load_users(&a.credentials)?,
            pin: false,
            server_cpus: None,
            sipsec_args: Vec::new(),
            workers: 1,
            threads,
            flows: 1,
            workdir: workdir.clone(),
            weights: sipsec_bench::stats::DEFAULT_WEIGHTS,
            transport,
            certificate,
            rounds: a.rounds as usize,
            media_relay: None,
        },
        variants,
        workers,
        loads: flows
            .iter()
            .map(|f| Load::new(*f as usize, threads))
            .collect(),
        scenarios: a.scenarios.clone(),
        ramp,
        pin: a.pin,
        rounds: a.rounds as usize,
    };
    if a.pin {
        let generator: Vec<usize> = (most..n).collect();
        sipsec_bench::pin_to_cores(&generator)
            .map_err(|e| format!("pinning the generator to CPUs {most}–{}: {e}", n - 1))?;
    }
    eprintln!("over {}", transport.as_str());
    eprintln!(
        "server          scenario  load          W  sustained/s  peak/s   µs/call  workers' CPU %"
    );
    let cells = scale::scale(&plan, |c| {
        let why: Vec<String> = c.failures.iter().map(|(w, n)| format!("{n} {w}")).collect();
        eprintln!(
            "{:15} {:9} {:12} {:2}  {:11.0}  {:7.0}  {:>7}  {}{}{}",
            c.server,
            c.scenario,
            c.load,
            c.workers,
            c.sustained,
            c.peak,
            c.cpu_us_per_call.map_or("-".into(), |v| format!("{v:.1}")),
            c.workers_cpu
                .iter()
                .map(|p| format!("{p:.0}"))
                .collect::<Vec<_>>()
                .join("/"),
            if why.is_empty() {
                String::new()
            } else {
                format!("  failed: {}", why.join(", "))
            },
            c.ended()
                .map_or(String::new(), |e| format!("  not held: {e}"))
        );
    });
    let _ = std::fs::remove_dir_all(&workdir);
    let cells = cells?;
    let table = scale::table(&cells);
    print!("{table}");
    a.out
        .write(&cells, &table, "scale", || scale::html(&cells))?;
    Ok(if cells.iter().all(|c| c.sustained > 0.0) {
        ExitCode::SUCCESS
    } else {
        eprintln!("a cell sustained no rate at all (see its row)");
        ExitCode::FAILURE
    })
}
