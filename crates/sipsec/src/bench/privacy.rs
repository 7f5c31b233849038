//! `sipsec bench privacy-prepare` and `privacy-route`: PrivaSIP pseudonyms through a proxy.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use sipsec_bench::stats;

use super::common::TableOutputs;

#[derive(Args)]
pub struct PrivacyPrepareArgs {
    /// INVITEs timed per configuration.
    #[arg(long, default_value_t = 1_000)]
    pub(super) iterations: usize,
    /// Untimed INVITEs first.
    #[arg(long, default_value_t = 50)]
    pub(super) warmup: usize,
    /// RSA modulus bits (the published run used 1024).
    #[arg(long, default_value_t = 2048)]
    pub(super) bits: u32,
    /// A smoke run: 20 INVITEs per configuration (what CI runs).
    #[arg(long)]
    pub(super) quick: bool,
    #[command(flatten)]
    pub(super) out: TableOutputs,
}

#[derive(Args)]
pub struct PrivacyRouteArgs {
    /// Calls kept in flight, one run each, comma-separated.
    #[arg(
        long,
        default_value = "100,200,300,400,500,600,700,800,900,1000",
        value_delimiter = ','
    )]
    pub(super) in_flight: Vec<usize>,
    /// Calls per run.
    #[arg(long, default_value_t = 5_000)]
    pub(super) calls: u64,
    /// Untimed calls before each configuration's first run.
    #[arg(long, default_value_t = 500)]
    pub(super) warmup: u64,
    /// Schemes, comma-separated: rsa (all three variants), rsa-standard,
    /// rsa-crt, rsa-multiprime, ecies, aes, hpke, tickets (PrivaSIP-3:
    /// the callers enroll at the home proxy first, then call with its
    /// tickets; level 1 only).
    #[arg(
        long,
        default_value = "rsa,ecies,aes,hpke,tickets",
        value_delimiter = ','
    )]
    pub(super) schemes: Vec<String>,
    /// PrivaSIP levels, comma-separated (1, 2).
    #[arg(long, default_value = "1,2", value_delimiter = ',')]
    pub(super) levels: Vec<u8>,
    /// Proxy modes, comma-separated: stateless, stateful.
    #[arg(long, default_value = "stateless,stateful", value_delimiter = ',')]
    pub(super) modes: Vec<String>,
    /// RSA modulus bits (the published run used 1024).
    #[arg(long, default_value_t = 2048)]
    pub(super) bits: u32,
    /// Callers registered at the home proxy.
    #[arg(long, alias = "users", default_value_t = 100)]
    pub(super) callers: usize,
    /// Worker threads per proxy.
    #[arg(long, default_value_t = 1)]
    pub(super) workers: usize,
    /// Generator threads.
    #[arg(long, default_value_t = super::common::GENERATOR_THREADS)]
    pub(super) threads: usize,
    /// A smoke run (what CI runs): 10 and 50 in flight, 200 calls, plain
    /// SIP, PrivaSIP-1 AES stateless, PrivaSIP-2 RSA 3-prime and HPKE
    /// stateful, PrivaSIP-3 tickets stateless.
    #[arg(long)]
    pub(super) quick: bool,
    /// Also write the rows as CSV here.
    #[arg(long)]
    pub(super) csv: Option<PathBuf>,
    /// Measure every configuration this many times, in turn (the order
    /// reversed every other round); the sustained throughput is the
    /// median of the rounds', each ratio to plain SIP the median of the
    /// rounds' own, so one noisy moment does not decide it.
    #[arg(long, default_value_t = 1)]
    pub(super) rounds: usize,
    #[command(flatten)]
    pub(super) out: TableOutputs,
}

pub(super) fn privacy_route(a: PrivacyRouteArgs) -> Result<ExitCode, String> {
    use sipsec_bench::privacy_route::{self as route, Plan, Scheme, Setup};
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let workdir = std::env::temp_dir().join(format!("sipsec-privacy-route-{}", std::process::id()));
    let mut schemes = Vec::new();
    for s in &a.schemes {
        schemes.extend(Scheme::parse_list(s)?);
    }
    if let Some(l) = a.levels.iter().find(|l| !matches!(l, 1 | 2)) {
        return Err(format!("--levels: {l} is not a PrivaSIP level (1 or 2)"));
    }
    let modes = a
        .modes
        .iter()
        .map(|m| match m.as_str() {
            "stateless" => Ok(false),
            "stateful" => Ok(true),
            other => Err(format!("--modes: {other:?} is stateless or stateful")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if !(1024..=8192).contains(&a.bits) {
        return Err("--bits is 1024 to 8192".into());
    }
    if a.in_flight.is_empty() || a.in_flight.iter().any(|&n| n == 0 || n > 100_000) {
        return Err("--in-flight takes 1 to 100000 calls per run".into());
    }
    if a.calls == 0 || a.calls > 10_000_000 {
        return Err("--calls is 1 to 10000000".into());
    }
    if a.callers == 0 || a.callers > 1_000_000 {
        return Err("--callers is 1 to 1000000".into());
    }
    let mut plan = Plan {
        exe,
        workdir: workdir.clone(),
        setups: route::setups(&schemes, &a.levels, &modes),
        in_flight: a.in_flight,
        calls: a.calls,
        warmup: a.warmup,
        bits: a.bits,
        users: a.callers,
        workers: a.workers.max(1),
        threads: a.threads.max(1),
        weights: stats::DEFAULT_WEIGHTS,
        rounds: a.rounds,
    };
    if a.quick {
        let multiprime = Scheme::Rsa(rsa_variants::Variant::MultiPrime { primes: 3 });
        plan.setups = vec![
            Setup {
                scheme: Scheme::Plain,
                level: 0,
                stateful: false,
            },
            Setup {
                scheme: Scheme::Aes,
                level: 1,
                stateful: false,
            },
            Setup {
                scheme: multiprime,
                level: 2,
                stateful: true,
            },
            Setup {
                scheme: Scheme::Hpke,
                level: 2,
                stateful: true,
            },
            Setup {
                scheme: Scheme::Tickets,
                level: 1,
                stateful: false,
            },
            Setup {
                scheme: Scheme::Tickets,
                level: 2,
                stateful: false,
            },
        ];
        plan.in_flight = vec![10, 50];
        plan.calls = 200;
        plan.warmup = 20;
        plan.users = plan.users.min(10);
    }
    eprintln!(
        "{} configurations × {} runs of {} calls; proxies for {} and {} on loopback",
        plan.setups.len(),
        plan.in_flight.len(),
        plan.calls,
        route::HOME,
        route::INBOUND
    );
    let result = route::measure(&plan, |r| {
        eprintln!(
            "{:52} {:5} in flight  ok {:6}  failed {:4}  mean {:8.2} ms  sd {:8.2}  {:7.0} calls/s  {:.2} decryptions/call",
            r.config,
            r.in_flight,
            r.ok,
            r.failures.values().sum::<u64>(),
            r.mean_ms,
            r.sd_ms,
            r.calls_per_s,
            r.decryptions_per_call
        );
    });
    let _ = std::fs::remove_dir_all(&workdir);
    let rows = result?;
    let table = route::markdown(&rows);
    print!("{table}");
    if let Some(p) = &a.csv {
        std::fs::write(p, route::csv(&rows)).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    a.out
        .write(&rows, &table, "privacy-route", || route::html(&rows))?;
    let failed: u64 = rows.iter().map(|r| r.failures.values().sum::<u64>()).sum();
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!("{failed} calls failed (see the table)");
        ExitCode::FAILURE
    })
}

pub(super) fn privacy_prepare(a: PrivacyPrepareArgs) -> Result<ExitCode, String> {
    let (iterations, warmup) = if a.quick {
        (20, 2)
    } else {
        (a.iterations, a.warmup)
    };
    if iterations == 0 || iterations > 1_000_000 {
        return Err("--iterations is 1 to 1000000".into());
    }
    if !(1024..=8192).contains(&a.bits) {
        return Err("--bits is 1024 to 8192".into());
    }
    let rows = sipsec_bench::privacy::prepare(iterations, warmup, a.bits, |r| {
        eprintln!(
            "{:32} mean {:8.4} ms  sd {:8.4}  min {:8.4}  max {:8.4}",
            r.config, r.mean_ms, r.sd_ms, r.min_ms, r.max_ms
        );
    })?;
    let table = sipsec_bench::privacy::markdown(&rows);
    print!("{table}");
    a.out.write(&rows, &table, "privacy-prepare", || {
        sipsec_bench::privacy::html(&rows)
    })?;
    Ok(ExitCode::SUCCESS)
}
