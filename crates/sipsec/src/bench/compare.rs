//! `sipsec bench compare`: sipsec and its peers under the same load.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use sipsec_bench::{scenario, stats};

use super::common::{make_certificate, targets, TableOutputs, TransportArg};

#[derive(Args)]
pub struct CompareArgs {
    /// Servers, comma-separated: sipsec, kamailio, null (`bench null`, no
    /// auth), sipsec@PATH (another sipsec build, for an A/B in the same
    /// rounds) started here. Ratios are the first's CPU over each other's.
    #[arg(
        long,
        alias = "targets",
        default_value = "sipsec,kamailio",
        value_delimiter = ','
    )]
    pub(super) servers: Vec<String>,
    /// Scenarios, comma-separated [default: all six].
    #[arg(long, value_delimiter = ',')]
    pub(super) scenarios: Vec<String>,
    /// Run each scenario without authentication (none), with digest (digest), or both, comma-separated.
    #[arg(
        long,
        alias = "auth",
        default_value = "none,digest",
        value_delimiter = ','
    )]
    pub(super) auth_modes: Vec<String>,
    /// The digest algorithm both servers challenge with: md5 or sha-256
    /// (RFC 8760; Kamailio's auth module `algorithm`).
    #[arg(long, default_value = "md5", value_parser = parse_digest)]
    pub(super) digest: sip_core::digest::Algorithm,
    /// Offered calls/s.
    #[arg(long, default_value_t = 2000.0)]
    pub(super) rate: f64,
    /// Calls per scenario.
    #[arg(long, default_value_t = 20_000)]
    pub(super) calls: u64,
    /// Server on CPU 0 (taskset), generator on CPU 1, busy-polling there so
    /// the server's CPU is not charged for waking it.
    #[arg(long)]
    pub(super) pin: bool,
    /// Run every server this many times, in turn (the order reversed every
    /// other round); the table gives each figure's median and range and
    /// each ratio as the median of the rounds' ratios, so that one noisy
    /// moment on a shared machine does not make the comparison; from nine
    /// rounds on, with that median's 95 % confidence interval.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(super) rounds: u32,
    /// Server workers / Kamailio children [default: 1 pinned, else 2].
    #[arg(long)]
    pub(super) workers: Option<usize>,
    /// Generator threads [default: 2; 1 with --pin].
    #[arg(long)]
    pub(super) threads: Option<usize>,
    /// Flows per generator thread: UDP sockets or connections, a caller
    /// keeping to one (as `bench run --flows`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=50_000))]
    pub(super) flows: u32,
    /// Callers' credentials (callee included): CSV with a `username,password` header.
    #[arg(
        long,
        alias = "users",
        value_name = "CSV",
        default_value = "interop/users.csv"
    )]
    pub(super) credentials: PathBuf,
    /// The generator's transport: udp, tcp, tls, ws or wss. Over a
    /// connection the servers listen on a second port for it (Kamailio with
    /// kamailio-tls-modules and kamailio-websocket-modules) and the built-in
    /// callee registers over UDP, so calls cross transports.
    #[arg(long, value_enum, default_value = "udp")]
    pub(super) transport: TransportArg,
    /// Server certificate chain (PEM) for tls and wss [default: an RSA-2048 certificate made here].
    #[arg(long, requires_all = ["key", "tls_ca"])]
    pub(super) cert: Option<PathBuf>,
    /// Its private key.
    #[arg(long, requires = "cert")]
    pub(super) key: Option<PathBuf>,
    /// The CA certificates (PEM) the generator trusts for the certificate.
    #[arg(long, requires = "cert")]
    pub(super) tls_ca: Option<PathBuf>,
    /// Kamailio configuration.
    #[arg(long, default_value = "interop/kamailio/kamailio.cfg")]
    pub(super) kamailio_cfg: PathBuf,
    /// The sipsec build measured as the server [default: this
    /// executable] (A/B of two builds with one generator).
    #[arg(long, value_name = "PATH")]
    pub(super) sipsec_exe: Option<PathBuf>,
    /// An rtpengine's NG address (`rtpengine --listen-ng=ADDR`, running):
    /// the proxies become stateful and relay every call's media through
    /// it with the same flags (RTP/AVP, ICE removed, origin and connection
    /// replaced).
    #[arg(long, value_name = "ADDR")]
    pub(super) media_relay: Option<std::net::SocketAddr>,
    /// Latency coefficient weights w1..w5.
    #[arg(long, default_value = "0.55,0.445,0.004,0.0007,0.0003")]
    pub(super) weights: String,
    #[command(flatten)]
    pub(super) out: TableOutputs,
}

/// `md5` or `sha-256`: what both servers can challenge with.
pub(super) fn parse_digest(s: &str) -> Result<sip_core::digest::Algorithm, String> {
    use sip_core::digest::Algorithm;
    match sipsec_server::config::parse_digest(s) {
        Ok(a @ (Algorithm::Md5 | Algorithm::Sha256)) => Ok(a),
        _ => Err(format!("{s:?}: use md5 or sha-256")),
    }
}

pub(super) fn compare(a: CompareArgs) -> Result<ExitCode, String> {
    use sipsec_bench::compare::{self, Certificate, Plan};
    use sipsec_bench::link::Transport;
    let targets = targets(&a.servers, &a.kamailio_cfg, a.sipsec_exe.as_deref())?;
    let scenarios = if a.scenarios.is_empty() {
        scenario::BUILT_IN.iter().map(|s| (*s).to_owned()).collect()
    } else {
        for s in &a.scenarios {
            scenario::built_in(s, false)?;
        }
        a.scenarios.clone()
    };
    let mut auth = Vec::new();
    for m in &a.auth_modes {
        let modes: &[bool] = match m.as_str() {
            "none" => &[false],
            "digest" => &[true],
            "both" => &[false, true],
            other => return Err(format!("--auth-modes {other:?}: use none, digest or both")),
        };
        for m in modes {
            if !auth.contains(m) {
                auth.push(*m);
            }
        }
    }
    if !(a.rate.is_finite() && a.rate > 0.0) || a.calls == 0 {
        return Err("--rate and --calls must be positive".into());
    }
    let workdir = std::env::temp_dir().join(format!("sipsec-compare-{}", std::process::id()));
    let transport = a.transport.into();
    let certificate = match (a.cert, a.key, a.tls_ca) {
        (Some(chain), Some(key), Some(ca)) => Some(Certificate { chain, key, ca }),
        _ if matches!(transport, Transport::Tls | Transport::Wss) => {
            let (chain, key, ca) = make_certificate(&workdir)?;
            Some(Certificate { chain, key, ca })
        }
        _ => None,
    };
    let secure_kamailio = certificate.is_some()
        && matches!(transport, Transport::Tls | Transport::Wss)
        && targets.iter().any(|t| t.name() == "kamailio");
    let plan = Plan {
        targets: targets.clone(),
        scenarios,
        auth,
        digest: a.digest,
        rate: a.rate,
        calls: a.calls,
        users: sipsec_bench::load_users(&a.credentials)?,
        pin: a.pin,
        server_cpus: None,
        sipsec_args: Vec::new(),
        // Kamailio 5.6's TLS needs one worker (see compare::compare).
        workers: a
            .workers
            .unwrap_or(if a.pin || secure_kamailio { 1 } else { 2 }),
        threads: a
            .threads
            .unwrap_or(if a.pin {
                1
            } else {
                super::common::GENERATOR_THREADS
            })
            .max(1),
        flows: a.flows as usize,
        workdir: workdir.clone(),
        weights: stats::parse_weights(&a.weights)?,
        transport,
        certificate,
        rounds: a.rounds as usize,
        media_relay: a.media_relay,
    };
    if a.pin {
        sipsec_bench::pin_to_core(1).map_err(|e| format!("pinning the generator to CPU 1: {e}"))?;
    }
    let cells = compare::compare(&plan, |c| {
        eprintln!(
            "{}{:9} {:17} {:6}  {:8.1} calls/s  {:>8} µs/call  {} failed",
            if a.rounds > 1 {
                format!("round {}  ", c.round)
            } else {
                String::new()
            },
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
    a.out.write(&cells, &table, "compare", || {
        compare::html(&cells, &targets)
    })?;
    let failed: u64 = cells.iter().map(|c| c.report.failed).sum();
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
