//! `sipsec bench`: load generation against any SIP server on loopback.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use sipsec_bench::engine::{Live, Run, Shape, User};
use sipsec_bench::responder::{Mode, Responder};
use sipsec_bench::{cpu, scenario, stats};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Run one scenario against a server and report calls/s, failures,
    /// latency (percentiles, published buckets, coefficient) and server CPU.
    Run(Box<RunArgs>),
    /// Ramp the offered rate until the server falls behind; report peak and
    /// sustainable throughput (the published lean-server study) with every step.
    Peak(Box<PeakArgs>),
    /// Run scenarios against sipsec and Kamailio (started here, same users)
    /// and print the ratio table: calls/s and server CPU µs per call.
    Compare(Box<CompareArgs>),
    /// The RSA-variant experiment: sipsec's proxy over TLS with server keys
    /// in each variant and size, calls over new TLS connections inbound
    /// (private-key side) and outbound (public-key side); CPU % and
    /// response time per offered rate.
    RsaVariants(Box<RsaVariantsArgs>),
    /// The SRTP experiment: ns per packet protect and unprotect for every
    /// profile, ours against libsrtp 2.7 on OpenSSL in the same run, and
    /// ours broken down per internal step.
    Srtp(Box<SrtpArgs>),
    /// The PrivaSIP INVITE-preparation experiment (published Table 1): ms
    /// to build an INVITE for plain SIP and each scheme and level.
    PrivacyPrepare(Box<PrivacyPrepareArgs>),
    /// The PrivaSIP server experiment (published Tables 2–7): INVITE → 180
    /// through two proxies started here, N calls in flight, for plain SIP
    /// and each scheme, level and mode.
    PrivacyRoute(Box<PrivacyRouteArgs>),
    /// Answer every request with 200 at once: a target to measure the
    /// generator's own ceiling.
    Null {
        /// Address to answer on.
        #[arg(long, default_value = "127.0.0.1:5090")]
        udp: SocketAddr,
        /// Responder threads.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Stop after this many seconds (default: run until killed).
        #[arg(long)]
        seconds: Option<u64>,
    },
}

/// What every measured run needs: target, scenario, users, sampling, output.
#[derive(Args)]
pub struct CommonArgs {
    /// The server (loopback only).
    #[arg(long, default_value = "127.0.0.1:5060")]
    target: SocketAddr,
    /// register, register-update, register-logout, invite, invite-not-found, redirect.
    #[arg(long, default_value = "register")]
    scenario: String,
    /// Answer digest challenges (401 for REGISTER, 407 for INVITE).
    #[arg(long)]
    auth: bool,
    /// Callers: CSV with a `username,password` header [default: user00000…user09999, password pw].
    #[arg(long)]
    users: Option<PathBuf>,
    /// Generator threads, one UDP socket (or TCP connection) each.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Use TCP (one connection per generator thread) instead of UDP.
    #[arg(long, conflicts_with = "tls")]
    tcp: bool,
    /// Use TLS (one connection per generator thread); needs --tls-ca.
    #[arg(long, requires = "tls_ca")]
    tls: bool,
    /// CA certificates (PEM) that issued the target's certificate, which must name its IP.
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// Accept a target with a 1024-bit RSA key (legacy).
    #[arg(long)]
    tls_allow_rsa_1024: bool,
    /// With --tcp or --tls: a new connection for every call (one call at a
    /// time per thread; over TLS each call is a full handshake, no resumption).
    #[arg(long)]
    connection_per_call: bool,
    /// Spin instead of sleeping when idle (give the generator its own core,
    /// e.g. with taskset): the server is then not charged for waking it.
    #[arg(long)]
    busy_poll: bool,
    /// First local port (thread i binds PORT+i); fixed ports make register,
    /// register-update and register-logout runs touch the same bindings.
    #[arg(long, default_value_t = 0)]
    local_port: u16,
    /// The callee's user name (invite, redirect).
    #[arg(long, default_value = "callee")]
    callee: String,
    /// Where the built-in callee registers over UDP [default: --target; with --tls, the server's UDP address].
    #[arg(long)]
    callee_registrar: Option<SocketAddr>,
    /// The callee's password [default: from --users, else pw].
    #[arg(long)]
    callee_password: Option<String>,
    /// Sample this server process's CPU.
    #[arg(long)]
    server_pid: Vec<u32>,
    /// Sample the CPU of every process with this name (e.g. kamailio).
    #[arg(long)]
    server_name: Option<String>,
    /// Latency coefficient weights w1..w5.
    #[arg(long, default_value = "0.55,0.445,0.004,0.0007,0.0003")]
    weights: String,
    /// Write the full report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an HTML page with the tables and plots (SVG) here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Also write each plot as SVG and PNG files into this directory (PNG
    /// needs rsvg-convert, installed by setup.sh).
    #[arg(long)]
    plots: Option<PathBuf>,
}

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Open loop: new calls per second.
    #[arg(long, default_value_t = 1000.0, conflicts_with = "in_flight")]
    rate: f64,
    /// Closed loop: keep this many calls in flight instead of a rate.
    #[arg(long)]
    in_flight: Option<usize>,
    /// Most calls to start.
    #[arg(long, default_value_t = 10_000)]
    calls: u64,
    /// Longest time to keep starting calls, seconds.
    #[arg(long, default_value_t = 60.0)]
    duration: f64,
    /// Time calls in flight get to finish after the last start, seconds.
    #[arg(long, default_value_t = 35.0)]
    drain: f64,
    /// Write the per-second series as CSV here.
    #[arg(long)]
    csv: Option<PathBuf>,
}

#[derive(Args)]
pub struct PeakArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// First offered rate, calls/s.
    #[arg(long, default_value_t = 1000.0)]
    start: f64,
    /// Each step offers this many times the previous rate.
    #[arg(long, default_value_t = 1.5)]
    factor: f64,
    /// Highest rate to offer.
    #[arg(long, default_value_t = 200_000.0)]
    max: f64,
    /// Length of each step, seconds.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// p99 latency above this (ms) means the server is not keeping up.
    #[arg(long, default_value_t = 150.0)]
    max_p99_ms: f64,
}

#[derive(Args)]
pub struct CompareArgs {
    /// Servers, comma-separated: sipsec, kamailio. Ratios are the first's CPU over each other's.
    #[arg(long, default_value = "sipsec,kamailio", value_delimiter = ',')]
    targets: Vec<String>,
    /// Scenarios, comma-separated [default: all six].
    #[arg(long, value_delimiter = ',')]
    scenarios: Vec<String>,
    /// Digest authentication: none, digest or both.
    #[arg(long, default_value = "both")]
    auth: String,
    /// Offered calls/s.
    #[arg(long, default_value_t = 2000.0)]
    rate: f64,
    /// Calls per scenario.
    #[arg(long, default_value_t = 20_000)]
    calls: u64,
    /// Server on CPU 0 (taskset), generator on CPU 1, busy-polling there so
    /// the server's CPU is not charged for waking it.
    #[arg(long)]
    pin: bool,
    /// Server workers / Kamailio children [default: 1 pinned, else 2].
    #[arg(long)]
    workers: Option<usize>,
    /// Generator threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Users with passwords (callee included).
    #[arg(long, default_value = "interop/users.csv")]
    users: PathBuf,
    /// Kamailio configuration.
    #[arg(long, default_value = "interop/kamailio/kamailio.cfg")]
    kamailio_cfg: PathBuf,
    /// Latency coefficient weights w1..w5.
    #[arg(long, default_value = "0.55,0.445,0.004,0.0007,0.0003")]
    weights: String,
    #[command(flatten)]
    out: TableOutputs,
}

/// Where a multi-run experiment writes its results.
#[derive(Args)]
pub struct TableOutputs {
    /// Write every run's results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the tables (markdown) here.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Write an HTML page with the tables and plots (SVG) here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Also write each plot as SVG and PNG files into this directory.
    #[arg(long)]
    plots: Option<PathBuf>,
}

#[derive(Args)]
pub struct RsaVariantsArgs {
    /// Modulus sizes, comma-separated.
    #[arg(long, default_value = "1024,2048,3072,4096", value_delimiter = ',')]
    bits: Vec<u32>,
    /// Variants, comma-separated: standard, crt, multiprime (3 primes), multiprime4, multiprime5.
    #[arg(long, default_value = "standard,crt,multiprime", value_delimiter = ',')]
    variants: Vec<String>,
    /// Offered calls/s, comma-separated.
    #[arg(long, default_value = "200,400,600,800,1000", value_delimiter = ',')]
    rates: Vec<f64>,
    /// Seconds per point.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Directions, comma-separated: inbound, outbound.
    #[arg(long, default_value = "inbound,outbound", value_delimiter = ',')]
    directions: Vec<String>,
    /// Concurrent callers in the generator.
    #[arg(long, default_value_t = 32)]
    threads: usize,
    /// Proxy on CPU 0 (taskset), generator and next hops on CPU 1.
    #[arg(long)]
    pin: bool,
    /// A smoke run: 1024 bits, 100 calls/s, 1 s per point (what CI runs).
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    out: TableOutputs,
}

#[derive(Args)]
pub struct SrtpArgs {
    /// Profiles, comma-separated (SDES names; default: all eight).
    #[arg(long, value_delimiter = ',')]
    profiles: Vec<String>,
    /// Packets per round.
    #[arg(long, default_value_t = 100_000)]
    packets: usize,
    /// Rounds per profile and side (the tables show the median).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
    /// Packets each way per call in part two (calls through sipsec serve).
    #[arg(long, default_value_t = 10_000)]
    call_packets: u64,
    /// Skip part two (the calls).
    #[arg(long)]
    no_calls: bool,
    /// A smoke run: 2,000 packets, 2 rounds, calls of 50 packets (what CI runs).
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    out: TableOutputs,
}

#[derive(Args)]
pub struct PrivacyPrepareArgs {
    /// INVITEs timed per configuration.
    #[arg(long, default_value_t = 1_000)]
    iterations: usize,
    /// Untimed INVITEs first.
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    /// RSA modulus bits (the published run used 1024).
    #[arg(long, default_value_t = 2048)]
    bits: u32,
    /// A smoke run: 20 INVITEs per configuration (what CI runs).
    #[arg(long)]
    quick: bool,
    /// Write the rows as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the table (markdown) here.
    #[arg(long)]
    markdown: Option<PathBuf>,
}

#[derive(Args)]
pub struct PrivacyRouteArgs {
    /// Calls kept in flight, one run each, comma-separated.
    #[arg(
        long,
        default_value = "100,200,300,400,500,600,700,800,900,1000",
        value_delimiter = ','
    )]
    in_flight: Vec<usize>,
    /// Calls per run.
    #[arg(long, default_value_t = 5_000)]
    calls: u64,
    /// Untimed calls before each configuration's first run.
    #[arg(long, default_value_t = 500)]
    warmup: u64,
    /// Schemes, comma-separated: rsa (all three variants), rsa-standard,
    /// rsa-crt, rsa-multiprime, ecies, aes, hpke.
    #[arg(long, default_value = "rsa,ecies,aes,hpke", value_delimiter = ',')]
    schemes: Vec<String>,
    /// PrivaSIP levels, comma-separated (1, 2).
    #[arg(long, default_value = "1,2", value_delimiter = ',')]
    levels: Vec<u8>,
    /// Proxy modes, comma-separated: stateless, stateful.
    #[arg(long, default_value = "stateless,stateful", value_delimiter = ',')]
    modes: Vec<String>,
    /// RSA modulus bits (the published run used 1024).
    #[arg(long, default_value_t = 2048)]
    bits: u32,
    /// Callers registered at the home proxy.
    #[arg(long, default_value_t = 100)]
    users: usize,
    /// Worker threads per proxy.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Generator threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// A smoke run (what CI runs): 10 and 50 in flight, 200 calls, plain
    /// SIP, PrivaSIP-1 AES stateless, PrivaSIP-2 RSA 3-prime and HPKE
    /// stateful.
    #[arg(long)]
    quick: bool,
    /// Also write the rows as CSV here.
    #[arg(long)]
    csv: Option<PathBuf>,
    #[command(flatten)]
    out: TableOutputs,
}

fn privacy_route(a: PrivacyRouteArgs) -> Result<ExitCode, String> {
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
    if a.users == 0 || a.users > 1_000_000 {
        return Err("--users is 1 to 1000000".into());
    }
    let mut plan = Plan {
        exe,
        workdir: workdir.clone(),
        setups: route::setups(&schemes, &a.levels, &modes),
        in_flight: a.in_flight,
        calls: a.calls,
        warmup: a.warmup,
        bits: a.bits,
        users: a.users,
        workers: a.workers.max(1),
        threads: a.threads.max(1),
        weights: stats::DEFAULT_WEIGHTS,
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
    json_and_markdown(
        a.out.json.as_deref(),
        &rows,
        a.out.markdown.as_deref(),
        &table,
    )?;
    if let Some(p) = &a.csv {
        std::fs::write(p, route::csv(&rows)).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    outputs(&a.out.html, &a.out.plots, "privacy-route", || {
        route::html(&rows)
    })?;
    let failed: u64 = rows.iter().map(|r| r.failures.values().sum::<u64>()).sum();
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!("{failed} calls failed (see the table)");
        ExitCode::FAILURE
    })
}

fn privacy_prepare(a: PrivacyPrepareArgs) -> Result<ExitCode, String> {
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
    json_and_markdown(a.json.as_deref(), &rows, a.markdown.as_deref(), &table)?;
    Ok(ExitCode::SUCCESS)
}

fn srtp_bench(a: SrtpArgs) -> Result<ExitCode, String> {
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
            return Err(e);
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
    json_and_markdown(
        a.out.json.as_deref(),
        &value,
        a.out.markdown.as_deref(),
        &table,
    )?;
    outputs(&a.out.html, &a.out.plots, "srtp", || {
        let section = (!calls.is_empty()).then(|| srtp::calls_html(&calls, call_packets));
        srtp::html(&rows, section)
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `value` as JSON and `table` as markdown where asked.
fn json_and_markdown(
    json: Option<&std::path::Path>,
    value: &impl serde::Serialize,
    markdown: Option<&std::path::Path>,
    table: &str,
) -> Result<(), String> {
    if let Some(p) = json {
        let text = serde_json::to_string_pretty(value).unwrap_or_default();
        std::fs::write(p, text).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if let Some(p) = markdown {
        std::fs::write(p, table).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

fn rsa_variants(a: RsaVariantsArgs) -> Result<ExitCode, String> {
    use sipsec_bench::variants::{self, Direction};
    let variants = a
        .variants
        .iter()
        .map(|v| match v.as_str() {
            "multiprime4" => rsa_variants::Variant::parse("multiprime", Some(4)),
            "multiprime5" => rsa_variants::Variant::parse("multiprime", Some(5)),
            other => rsa_variants::Variant::parse(other, None),
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("--variants: {e}"))?;
    let directions = a
        .directions
        .iter()
        .map(|d| match d.as_str() {
            "inbound" => Ok(Direction::Inbound),
            "outbound" => Ok(Direction::Outbound),
            other => Err(format!("--directions {other:?}: use inbound or outbound")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (bits, rates, seconds) = if a.quick {
        (vec![1024], vec![100.0], 1.0)
    } else {
        (a.bits.clone(), a.rates.clone(), a.seconds)
    };
    if rates.iter().any(|r| !(r.is_finite() && *r > 0.0)) || !(seconds.is_finite() && seconds > 0.0)
    {
        return Err("--rates and --seconds must be positive".into());
    }
    for &b in &bits {
        for v in &variants {
            if let rsa_variants::Variant::MultiPrime { primes } = v {
                if *primes > rsa_variants::Variant::max_primes(b) {
                    return Err(format!(
                        "{primes}-prime keys need at least {} bits; drop {b} from --bits or that variant",
                        if *primes == 4 { 4096 } else { 8192 }
                    ));
                }
            }
        }
    }
    let workdir = std::env::temp_dir().join(format!("sipsec-rsa-variants-{}", std::process::id()));
    let plan = variants::Plan {
        exe: std::env::current_exe().map_err(|e| format!("finding the sipsec binary: {e}"))?,
        workdir: workdir.clone(),
        bits,
        variants,
        rates: rates.clone(),
        seconds,
        directions,
        threads: a.threads.max(1),
        pin: a.pin,
    };
    let points = variants::experiment(&plan, |p| {
        let failed: u64 = p.failures.values().sum();
        eprintln!(
            "{:8} RSA-{:<4} {:12} {:6.0}/s offered  {:7.1}/s answered  CPU {:6.1} %  {:8.1} µs/call  mean {:7.2} ms  p99 {:7.2} ms  {failed} failed",
            p.direction.name(),
            p.bits,
            p.variant,
            p.offered,
            p.achieved,
            p.cpu_percent,
            p.cpu_us_per_call,
            p.mean_ms,
            p.p99_ms
        );
    });
    let _ = std::fs::remove_dir_all(&workdir);
    let points = points?;
    let table = variants::markdown(&points, &rates);
    print!("{table}");
    json_and_markdown(
        a.out.json.as_deref(),
        &points,
        a.out.markdown.as_deref(),
        &table,
    )?;
    outputs(&a.out.html, &a.out.plots, "rsa-variants", || {
        variants::html(&points, &rates)
    })?;
    let failed: u64 = points.iter().flat_map(|p| p.failures.values()).sum();
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn peak(a: PeakArgs) -> Result<ExitCode, String> {
    use sipsec_bench::peak::{self, Ramp};
    let valid =
        positive(a.start) && positive(a.max) && positive(a.seconds) && positive(a.max_p99_ms);
    if !valid || a.factor <= 1.0 {
        return Err(
            "--start, --max, --seconds, --max-p99-ms must be positive and --factor above 1".into(),
        );
    }
    let base = options(&a.common)?;
    let ramp = Ramp {
        start: a.start,
        factor: a.factor,
        max: a.max,
        seconds: a.seconds,
        max_p99_us: (a.max_p99_ms * 1000.0) as u64,
        tolerance: 0.05,
    };
    println!("offered/s  achieved/s  failed  p99 ms  server µs/call");
    let (cap, steps, reports) = peak::peak(&base, &ramp, |st, r| {
        println!(
            "{:9.0}  {:10.1}  {:6}  {:6.2}  {:>8}",
            st.offered,
            st.achieved,
            st.failed,
            st.p99_us as f64 / 1000.0,
            r.server_cpu_us_per_call
                .map_or("-".to_owned(), |v| format!("{v:.1}"))
        );
    })?;
    println!(
        "{}: peak {:.0} calls/s, sustainable {:.0} calls/s",
        base.run.scenario.name, cap.peak, cap.sustainable
    );
    if let Some(p) = &a.common.json {
        let json = serde_json::json!({
            "scenario": base.run.scenario.name,
            "peak_cps": cap.peak,
            "sustainable_cps": cap.sustainable,
            "steps": steps.iter().zip(&reports).map(|(st, r)| serde_json::json!({
                "offered": st.offered, "achieved": st.achieved, "failed": st.failed,
                "p99_ms": st.p99_us as f64 / 1000.0, "report": r,
            })).collect::<Vec<_>>(),
        });
        std::fs::write(p, serde_json::to_string_pretty(&json).unwrap_or_default())
            .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    outputs(&a.common.html, &a.common.plots, "peak", || {
        peak::html(&base.run.scenario.name, &cap, &steps, &reports)
    })?;
    Ok(ExitCode::SUCCESS)
}

fn compare(a: CompareArgs) -> Result<ExitCode, String> {
    use sipsec_bench::compare::{self, Plan, Target};
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let targets = a
        .targets
        .iter()
        .map(|t| match t.as_str() {
            "sipsec" => Ok(Target::Sipsec { exe: exe.clone() }),
            "kamailio" => {
                if !a.kamailio_cfg.is_file() {
                    return Err(format!(
                        "{}: no Kamailio configuration (run from the repository root, or pass --kamailio-cfg)",
                        a.kamailio_cfg.display()
                    ));
                }
                let cfg = std::fs::canonicalize(&a.kamailio_cfg)
                    .map_err(|e| format!("{}: {e}", a.kamailio_cfg.display()))?;
                Ok(Target::Kamailio { cfg })
            }
            other => Err(format!("unknown target {other:?}: use sipsec or kamailio")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if targets.is_empty() {
        return Err("name at least one target".into());
    }
    let scenarios = if a.scenarios.is_empty() {
        scenario::BUILT_IN.iter().map(|s| (*s).to_owned()).collect()
    } else {
        for s in &a.scenarios {
            scenario::built_in(s, false)?;
        }
        a.scenarios.clone()
    };
    let auth = match a.auth.as_str() {
        "none" => vec![false],
        "digest" => vec![true],
        "both" => vec![false, true],
        other => return Err(format!("--auth {other:?}: use none, digest or both")),
    };
    if !(a.rate.is_finite() && a.rate > 0.0) || a.calls == 0 {
        return Err("--rate and --calls must be positive".into());
    }
    let workdir = std::env::temp_dir().join(format!("sipsec-compare-{}", std::process::id()));
    let plan = Plan {
        targets: targets.clone(),
        scenarios,
        auth,
        rate: a.rate,
        calls: a.calls,
        users: sipsec_bench::load_users(&a.users)?,
        pin: a.pin,
        workers: a.workers.unwrap_or(if a.pin { 1 } else { 2 }),
        threads: a.threads.max(1),
        workdir: workdir.clone(),
        weights: stats::parse_weights(&a.weights)?,
    };
    if a.pin {
        sipsec_bench::pin_to_core(1).map_err(|e| format!("pinning the generator to CPU 1: {e}"))?;
    }
    let cells = compare::compare(&plan, |c| {
        eprintln!(
            "{:9} {:17} {:6}  {:8.1} calls/s  {:>8} µs/call  {} failed",
            c.target,
            c.scenario,
            if c.auth { "digest" } else { "none" },
            c.report.achieved_cps,
            c.report
                .server_cpu_us_per_call
                .map_or("-".to_owned(), |v| format!("{v:.1}")),
            c.report.failed
        );
    });
    let _ = std::fs::remove_dir_all(&workdir);
    let cells = cells?;
    let table = compare::table(&cells, &targets);
    print!("{table}");
    json_and_markdown(
        a.out.json.as_deref(),
        &cells,
        a.out.markdown.as_deref(),
        &table,
    )?;
    outputs(&a.out.html, &a.out.plots, "compare", || {
        compare::html(&cells, &targets)
    })?;
    let failed: u64 = cells.iter().map(|c| c.report.failed).sum();
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub fn run(cmd: BenchCommand) -> ExitCode {
    let result = match cmd {
        BenchCommand::Run(a) => run_scenario(*a),
        BenchCommand::Compare(a) => compare(*a),
        BenchCommand::RsaVariants(a) => rsa_variants(*a),
        BenchCommand::Srtp(a) => srtp_bench(*a),
        BenchCommand::PrivacyPrepare(a) => privacy_prepare(*a),
        BenchCommand::PrivacyRoute(a) => privacy_route(*a),
        BenchCommand::Peak(a) => peak(*a),
        BenchCommand::Null {
            udp,
            threads,
            seconds,
        } => null(udp, threads, seconds),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Writes the HTML page and the plot files that were asked for.
fn outputs(
    html: &Option<PathBuf>,
    plots: &Option<PathBuf>,
    name: &str,
    make: impl FnOnce() -> String,
) -> Result<(), String> {
    if html.is_none() && plots.is_none() {
        return Ok(());
    }
    let page = make();
    if let Some(p) = html {
        std::fs::write(p, &page).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if let Some(dir) = plots {
        let files = sipsec_bench::plot::write_files(&page, dir, name)?;
        eprintln!("{} plot files in {}", files.len(), dir.display());
    }
    Ok(())
}

fn loopback_only(addr: SocketAddr) -> Result<(), String> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(format!(
            "{addr} is not a loopback address: sipsec bench only loads servers on 127.0.0.0/8 or ::1"
        ))
    }
}

/// The run's options from the shared arguments; shape and counts are the
/// caller's to set.
fn options(a: &CommonArgs) -> Result<sipsec_bench::Options, String> {
    loopback_only(a.target)?;
    let weights = stats::parse_weights(&a.weights)?;
    let scenario = scenario::built_in(&a.scenario, a.auth)?;
    if a.tls && scenario.needs_callee && a.callee_registrar.is_none() {
        return Err(format!(
            "--scenario {} over --tls: give --callee-registrar with the server's UDP address, where the built-in callee registers",
            a.scenario
        ));
    }
    if let Some(r) = a.callee_registrar {
        loopback_only(r)?;
    }
    if a.connection_per_call && !(a.tcp || a.tls) {
        return Err("--connection-per-call needs --tcp or --tls".into());
    }
    let users = match &a.users {
        Some(p) => sipsec_bench::load_users(p)?,
        None => sipsec_bench::generated_users(10_000),
    };
    let callee_password = a
        .callee_password
        .clone()
        .or_else(|| {
            users
                .iter()
                .find(|u| u.name == a.callee)
                .map(|u| u.password.clone())
        })
        .unwrap_or_else(|| "pw".to_owned());
    let mut server_pids = a.server_pid.clone();
    if let Some(name) = &a.server_name {
        let found = cpu::pids_named(name);
        if found.is_empty() {
            return Err(format!("no process named {name:?} to sample"));
        }
        server_pids.extend(found);
    }
    Ok(sipsec_bench::Options {
        run: Run {
            target: a.target,
            scenario,
            shape: Shape::Rate(1.0),
            calls: 0,
            duration: Duration::ZERO,
            drain: Duration::ZERO,
            threads: a.threads.max(1),
            local_port: a.local_port,
            users,
            busy_poll: a.busy_poll,
            ids: None,
            transport: if a.tls {
                sipsec_bench::link::Transport::Tls
            } else if a.tcp {
                sipsec_bench::link::Transport::Tcp
            } else {
                sipsec_bench::link::Transport::Udp
            },
            tls: match (&a.tls_ca, a.tls) {
                (Some(ca), true) => {
                    let config = sipsec_bench::link::client_config(ca, a.tls_allow_rsa_1024)
                        .map_err(|e| format!("--tls-ca: {e}"))?;
                    if a.connection_per_call {
                        Some(sipsec_bench::link::without_resumption(&config))
                    } else {
                        Some(config)
                    }
                }
                _ => None,
            },
            connection_per_call: a.connection_per_call,
        },
        callee: User {
            name: a.callee.clone(),
            password: callee_password,
        },
        callee_registrar: a.callee_registrar,
        callee_domain: None,
        server_pids,
        weights,
    })
}

fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

fn run_scenario(a: RunArgs) -> Result<ExitCode, String> {
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
        std::fs::write(p, report.json()).map_err(|e| format!("{}: {e}", p.display()))?;
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

/// A live progress bar on a terminal (hidden otherwise): calls done of
/// the total, the success rate of the last second, failures, p99 so far.
fn progress(live: &Live, done: &AtomicBool, total: u64) {
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::stderr_with_hz(4),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30}] {pos}/{len} calls  {msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    let mut last = (Instant::now(), 0u64);
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(250));
        let ok = live.ok.load(Ordering::Relaxed);
        let failed = live.failed.load(Ordering::Relaxed);
        bar.set_position(ok + failed);
        if last.0.elapsed() >= Duration::from_secs(1) {
            let rate = (ok - last.1) as f64 / last.0.elapsed().as_secs_f64();
            bar.set_message(format!(
                "{rate:.0} calls/s  {failed} failed  p99 {:.2} ms",
                live.p99_us.load(Ordering::Relaxed) as f64 / 1000.0
            ));
            last = (Instant::now(), ok);
        }
    }
    bar.finish_and_clear();
}

fn null(udp: SocketAddr, threads: usize, seconds: Option<u64>) -> Result<ExitCode, String> {
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
