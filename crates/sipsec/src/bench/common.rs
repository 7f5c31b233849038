//! What the bench subcommands share: target and load options, output files, progress.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use sipsec_bench::engine::{Live, Run, Shape, User};
use sipsec_bench::link::Transport;
use sipsec_bench::{cpu, scenario, stats};

/// Generator threads unless `--threads` says otherwise (one with `--pin`,
/// where the generator has one core to itself).
pub(super) const GENERATOR_THREADS: usize = 2;

/// What every measured run needs: target, scenario, users, sampling, output.
#[derive(Args)]
pub struct CommonArgs {
    /// The server (loopback only). Several (repeated or comma-separated): nodes sharing the
    /// load, generator thread i on the (i mod n)-th; a callee registers at the last one and
    /// callers use the others, so every call crosses nodes.
    #[arg(
        long = "target",
        default_value = "127.0.0.1:5060",
        value_delimiter = ','
    )]
    pub(super) targets: Vec<SocketAddr>,
    /// register, register-update, register-logout, invite, invite-not-found, redirect.
    #[arg(long, default_value = "register")]
    pub(super) scenario: String,
    /// Answer digest challenges (401 for REGISTER, 407 for INVITE).
    #[arg(long)]
    pub(super) auth: bool,
    /// Callers' credentials: CSV with a `username,password` header
    /// [default: user00000…user09999, password pw].
    #[arg(long, alias = "users", value_name = "CSV")]
    pub(super) credentials: Option<PathBuf>,
    /// Generator threads, each with its flows (--flows: one UDP socket or connection by default).
    #[arg(long, default_value_t = GENERATOR_THREADS)]
    pub(super) threads: usize,
    /// Flows per generator thread: UDP sockets or connections, each its
    /// own local port; a caller keeps to one (many phones on their own
    /// connections instead of one trunk).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=50_000))]
    pub(super) flows: u32,
    /// The generator's transport: udp, tcp (a connection per flow), tls
    /// (needs --tls-ca), ws (SIP over WebSocket, RFC 7118: --target is the
    /// WS listener) or wss (as ws, over TLS; needs --tls-ca).
    #[arg(long, value_enum, default_value = "udp")]
    pub(super) transport: TransportArg,
    /// CA certificates (PEM) that issued the target's certificate, which must name its IP.
    #[arg(long)]
    pub(super) tls_ca: Option<PathBuf>,
    /// Accept a target with a 1024-bit RSA key (legacy).
    #[arg(long)]
    pub(super) tls_allow_rsa_1024: bool,
    /// With --transport tcp, tls, ws or wss: a new connection for every call (one call at a
    /// time per thread; over TLS each call is a full handshake, no resumption).
    #[arg(long)]
    pub(super) connection_per_call: bool,
    /// Spin instead of sleeping when idle (give the generator its own core,
    /// e.g. with taskset): the server is then not charged for waking it.
    #[arg(long)]
    pub(super) busy_poll: bool,
    /// Every generator thread sends and reads on the first thread's
    /// flows (--flows of them), so one flow carries the load of all the
    /// threads — one busy peer (a trunk, an SBC) beyond what one thread
    /// makes. Over UDP each thread has a socket on each flow's port, and
    /// the kernel steers each response to the socket of the thread whose
    /// call it answers (by Call-ID; Linux 5.17 on, else one socket all
    /// read). A connection is framed by one thread at a time. A thread
    /// that reads another's response hands it over and wakes it.
    #[arg(long)]
    pub(super) share_flows: bool,
    /// With --share-flows over UDP: one socket every thread reads, a
    /// thread handing over the responses to others' calls, even where
    /// the kernel could steer them (to compare the two ways).
    #[arg(long, requires = "share_flows")]
    pub(super) one_shared_socket: bool,
    /// First local port (thread i binds PORT+i); fixed ports make register,
    /// register-update and register-logout runs touch the same bindings.
    #[arg(long, default_value_t = 0)]
    pub(super) local_port: u16,
    /// The callee's user name (invite, redirect).
    #[arg(long, default_value = "callee")]
    pub(super) callee: String,
    /// Where the built-in callee registers over UDP [default: --target; over a connection, the server's UDP address].
    #[arg(long)]
    pub(super) callee_registrar: Option<SocketAddr>,
    /// The callee's password [default: from --users, else pw].
    #[arg(long)]
    pub(super) callee_password: Option<String>,
    /// Sample this server process's CPU.
    #[arg(long)]
    pub(super) server_pid: Vec<u32>,
    /// Sample the CPU of every process with this name (e.g. kamailio).
    #[arg(long)]
    pub(super) server_name: Option<String>,
    /// Latency coefficient weights w1..w5.
    #[arg(long, default_value = "0.55,0.445,0.004,0.0007,0.0003")]
    pub(super) weights: String,
    /// Write the full report as JSON here.
    #[arg(long)]
    pub(super) json: Option<PathBuf>,
    /// Write an HTML page with the tables and plots (SVG) here.
    #[arg(long)]
    pub(super) html: Option<PathBuf>,
    /// Also write each plot as SVG and PNG files into this directory (PNG
    /// needs rsvg-convert, installed by setup.sh).
    #[arg(long)]
    pub(super) plots: Option<PathBuf>,
}

/// Where a multi-run experiment writes its results.
#[derive(Args)]
pub struct TableOutputs {
    /// Write every run's results as JSON here.
    #[arg(long)]
    pub(super) json: Option<PathBuf>,
    /// Write the tables (markdown) here.
    #[arg(long)]
    pub(super) markdown: Option<PathBuf>,
    /// Write an HTML page with the tables and plots (SVG) here.
    #[arg(long)]
    pub(super) html: Option<PathBuf>,
    /// Also write each plot as SVG and PNG files into this directory.
    #[arg(long)]
    pub(super) plots: Option<PathBuf>,
}

impl TableOutputs {
    /// Writes what was asked for: `value` as JSON, `table` as markdown,
    /// the page `make` builds as HTML and its plots (named `name-TITLE`),
    /// each with the run's provenance.
    pub(super) fn write(
        &self,
        value: &impl serde::Serialize,
        table: &str,
        name: &str,
        make: impl FnOnce() -> String,
    ) -> Result<(), String> {
        if let Some(p) = &self.json {
            crate::provenance::write_json(p, value)?;
        }
        if let Some(p) = &self.markdown {
            let text = format!("{}{table}", crate::provenance::get().markdown());
            std::fs::write(p, text).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        outputs(&self.html, &self.plots, name, make)
    }
}

/// Writes the HTML page and the plot files that were asked for.
pub(super) fn outputs(
    html: &Option<PathBuf>,
    plots: &Option<PathBuf>,
    name: &str,
    make: impl FnOnce() -> String,
) -> Result<(), String> {
    if html.is_none() && plots.is_none() {
        return Ok(());
    }
    let page = sipsec_bench::plot::after_heading(&make(), &crate::provenance::get().html());
    if let Some(p) = html {
        std::fs::write(p, &page).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if let Some(dir) = plots {
        let caption = crate::provenance::get().caption(&format!("sipsec bench {name}"));
        let files = sipsec_bench::plot::write_files(&page, dir, name, &caption)?;
        eprintln!("{} plot files in {}", files.len(), dir.display());
    }
    Ok(())
}

/// A server certificate for 127.0.0.1 under the CA `make_certificate`
/// made in `dir`, its key of `kind`: rsa-standard, rsa-crt,
/// rsa-multiprime (2048 bits) or ecdsa-p256. (certificate, key).
pub(super) fn certificate_of_kind(
    dir: &std::path::Path,
    kind: &str,
) -> Result<(PathBuf, PathBuf), String> {
    use crate::keygen::{ec, rsa, Curve};
    let (key, crt) = (
        dir.join(format!("{kind}.key")),
        dir.join(format!("{kind}.pem")),
    );
    match kind {
        "rsa-standard" => rsa("standard", 2048, None, false, &key),
        "rsa-crt" => rsa("crt", 2048, None, false, &key),
        "rsa-multiprime" => rsa("multiprime", 2048, Some(3), false, &key),
        "ecdsa-p256" => ec(Curve::P256, &key),
        other => Err(format!(
            "{other:?}: rsa-standard, rsa-crt, rsa-multiprime or ecdsa-p256"
        )),
    }?;
    server_certificate(&key, (&dir.join("ca.pem"), &dir.join("ca.key")), &crt)?;
    Ok((crt, key))
}

/// A certificate `out` for `key`, naming 127.0.0.1, issued by `ca`
/// (certificate, key).
fn server_certificate(
    key: &std::path::Path,
    ca: (&std::path::Path, &std::path::Path),
    out: &std::path::Path,
) -> Result<(), String> {
    crate::keygen::cert(&crate::keygen::CertRequest {
        key,
        cn: "127.0.0.1",
        san: &["127.0.0.1".to_owned()],
        days: 2,
        ca: false,
        issuer: Some(ca),
        out,
    })
    .map(drop)
}

/// An RSA-2048 server certificate for 127.0.0.1, issued by a CA made here.
pub(super) fn make_certificate(
    dir: &std::path::Path,
) -> Result<(PathBuf, PathBuf, PathBuf), String> {
    use crate::keygen::{cert, rsa, CertRequest};
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (ca_key, ca, key, crt) = (
        dir.join("ca.key"),
        dir.join("ca.pem"),
        dir.join("server.key"),
        dir.join("server.pem"),
    );
    rsa("crt", 2048, None, false, &ca_key)?;
    cert(&CertRequest {
        key: &ca_key,
        cn: "sipsec bench CA",
        san: &[],
        days: 2,
        ca: true,
        issuer: None,
        out: &ca,
    })?;
    rsa("crt", 2048, None, false, &key)?;
    server_certificate(&key, (&ca, &ca_key), &crt)?;
    Ok((crt, key, ca))
}

pub(super) fn loopback_only(addr: SocketAddr) -> Result<(), String> {
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
pub(super) fn options(a: &CommonArgs) -> Result<sipsec_bench::Options, String> {
    for t in &a.targets {
        loopback_only(*t)?;
    }
    let weights = stats::parse_weights(&a.weights)?;
    let scenario = scenario::built_in(&a.scenario, a.auth)?;
    let transport = Transport::from(a.transport);
    if matches!(transport, Transport::Tls | Transport::Wss) && a.tls_ca.is_none() {
        return Err(format!(
            "--transport {}: give --tls-ca with the CA certificates (PEM) that issued the target's certificate",
            transport.as_str().to_ascii_lowercase()
        ));
    }
    if !matches!(transport, Transport::Udp | Transport::Tcp)
        && scenario.needs_callee
        && a.callee_registrar.is_none()
    {
        return Err(format!(
            "--scenario {} over --transport {}: give --callee-registrar with the server's UDP address, where the built-in callee registers",
            a.scenario,
            transport.as_str().to_ascii_lowercase()
        ));
    }
    if let Some(r) = a.callee_registrar {
        loopback_only(r)?;
    }
    if a.connection_per_call && transport == Transport::Udp {
        return Err("--connection-per-call needs --transport tcp, tls, ws or wss".into());
    }
    if a.connection_per_call && a.share_flows {
        return Err(
            "--connection-per-call gives each thread connections of its own: drop --share-flows"
                .into(),
        );
    }
    if a.connection_per_call && a.flows > 1 {
        return Err("--connection-per-call opens one connection at a time: drop --flows".into());
    }
    let users = match &a.credentials {
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
    // Several nodes: the callee on the last one, callers on the others.
    let (callers, callee_registrar) = match (&a.targets[..], a.callee_registrar) {
        ([], _) => return Err("--target: give at least one server".into()),
        ([one], r) => (vec![*one], r),
        (many, Some(r)) => (many.to_vec(), Some(r)),
        (many, None) if scenario.needs_callee => {
            (many[..many.len() - 1].to_vec(), many.last().copied())
        }
        (many, None) => (many.to_vec(), None),
    };
    if a.threads.max(1) < callers.len() {
        return Err(format!(
            "--threads {}: give at least one generator thread per target ({})",
            a.threads,
            callers.len()
        ));
    }
    Ok(sipsec_bench::Options {
        run: Run {
            target: callers[0],
            also: callers[1..].to_vec(),
            scenario,
            shape: Shape::Rate(1.0),
            calls: 0,
            duration: Duration::ZERO,
            drain: Duration::ZERO,
            threads: a.threads.max(1),
            flows: a.flows as usize,
            local_port: a.local_port,
            users,
            busy_poll: a.busy_poll,
            share_flows: a.share_flows,
            one_shared_socket: a.one_shared_socket,
            ids: None,
            transport,
            tls: match &a.tls_ca {
                Some(ca) if matches!(transport, Transport::Tls | Transport::Wss) => {
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
        callee_registrar,
        callee_domain: None,
        server_pids,
        weights,
    })
}

/// A generator's transport, as `--transport` names it (the same word
/// for every client command: `bench`, `phone`).
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TransportArg {
    Udp,
    Tcp,
    Tls,
    /// SIP over WebSocket (RFC 7118).
    Ws,
    /// SIP over secure WebSocket.
    Wss,
}

impl From<TransportArg> for Transport {
    fn from(t: TransportArg) -> Self {
        match t {
            TransportArg::Udp => Transport::Udp,
            TransportArg::Tcp => Transport::Tcp,
            TransportArg::Tls => Transport::Tls,
            TransportArg::Ws => Transport::Ws,
            TransportArg::Wss => Transport::Wss,
        }
    }
}

pub(super) fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

/// How `bench peak` and `bench scale` tell a step held from one past the
/// server's limit, and how closely they look for it.
#[derive(Args)]
pub struct KneeArgs {
    /// p99 latency above this (ms) means the server is not keeping up.
    #[arg(long, default_value_t = 150.0)]
    pub(super) max_p99_ms: f64,
    /// Steps added after the ramp, each halfway between the highest rate
    /// fully processed and the lowest above it that was not (a limit
    /// known closer than one --factor).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=8))]
    pub(super) refine: u32,
    /// Offer each rate up to this many times, until one try is fully
    /// processed: a step that lost datagrams to a moment's stall of the
    /// machine does not end the ramp below the server's limit (every try
    /// is reported; a rate is sustained when one of its tries was).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=5))]
    pub(super) tries: u32,
}

/// The ramp `bench peak` and `bench scale` climb, from their flags:
/// `--start`, `--factor`, `--max`, `--duration` and the knee's.
pub(super) fn ramp(
    start: f64,
    factor: f64,
    max: f64,
    duration: f64,
    knee: &KneeArgs,
) -> Result<sipsec_bench::peak::Ramp, String> {
    let valid = positive(start)
        && positive(max)
        && positive(duration)
        && positive(knee.max_p99_ms)
        && factor.is_finite()
        && factor > 1.0;
    if !valid {
        return Err(
            "--start, --max, --duration, --max-p99-ms must be positive and --factor above 1".into(),
        );
    }
    Ok(sipsec_bench::peak::Ramp {
        start,
        factor,
        max,
        seconds: duration,
        max_p99_us: (knee.max_p99_ms * 1000.0) as u64,
        tolerance: 0.05,
        refine: knee.refine,
        tries: knee.tries,
    })
}

/// Progress of a run on standard error: calls done of the total, the
/// success rate of the last interval, failures, p99 so far. A live bar on
/// a terminal; a line every 5 s otherwise (a log file, a pipe).
pub(super) fn progress(live: &Live, done: &AtomicBool, total: u64) {
    use std::io::IsTerminal as _;
    if !std::io::stderr().is_terminal() {
        return progress_lines(live, done, total, Duration::from_secs(5));
    }
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
                "{rate:.0} calls/s  {failed} failed  p99 {}",
                p99_text(live.p99_us.load(Ordering::Relaxed))
            ));
            last = (Instant::now(), ok);
        }
    }
    bar.finish_and_clear();
}

/// A progress line every `every` until `done`.
fn progress_lines(live: &Live, done: &AtomicBool, total: u64, every: Duration) {
    let start = Instant::now();
    let (mut next, mut last) = (start + every, (start, 0u64));
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        let now = Instant::now();
        if now < next {
            continue;
        }
        next += every;
        let ok = live.ok.load(Ordering::Relaxed);
        let failed = live.failed.load(Ordering::Relaxed);
        let rate = (ok - last.1) as f64 / (now - last.0).as_secs_f64();
        last = (now, ok);
        eprintln!(
            "{:5.0} s  {}/{total} calls  {rate:.0} calls/s  {failed} failed  p99 {}",
            (now - start).as_secs_f64(),
            ok + failed,
            p99_text(live.p99_us.load(Ordering::Relaxed))
        );
    }
}

/// The live p99: "-" until a latency has been measured (not 0.00 ms).
fn p99_text(us: u64) -> String {
    if us == 0 {
        "-".to_owned()
    } else {
        format!("{:.2} ms", us as f64 / 1000.0)
    }
}

/// The servers named on the command line (`sipsec`, `kamailio`, `null`), in
/// order; `sipsec` is `sipsec_exe` when given (another build, measured
/// with this one's generator), else this executable.
pub(super) fn targets(
    names: &[String],
    kamailio_cfg: &std::path::Path,
    sipsec_exe: Option<&std::path::Path>,
) -> Result<Vec<sipsec_bench::compare::Target>, String> {
    use sipsec_bench::compare::Target;
    let own = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let exe = match sipsec_exe {
        Some(p) if !p.is_file() => return Err(format!("{}: no such sipsec build", p.display())),
        Some(p) => std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()))?,
        None => own.clone(),
    };
    let targets = names
        .iter()
        .map(|t| match t.as_str() {
            "sipsec" => Ok(Target::sipsec(exe.clone())),
            other if other.starts_with("sipsec@") => another_build(&other["sipsec@".len()..]),
            "kamailio" => {
                if !kamailio_cfg.is_file() {
                    return Err(format!(
                        "{}: no Kamailio configuration (run from the repository root, or pass --kamailio-cfg)",
                        kamailio_cfg.display()
                    ));
                }
                let cfg = std::fs::canonicalize(kamailio_cfg)
                    .map_err(|e| format!("{}: {e}", kamailio_cfg.display()))?;
                Ok(Target::Kamailio { cfg })
            }
            "null" => Ok(Target::Null { exe: own.clone() }),
            other => Err(format!(
                "unknown server {other:?}: use sipsec, sipsec@PATH (another build), kamailio or null"
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if targets.is_empty() {
        return Err("name at least one server".into());
    }
    for (i, t) in targets.iter().enumerate() {
        if targets[..i].iter().any(|u| u.name() == t.name()) {
            return Err(format!(
                "{} is named twice: each server once (a second build as sipsec@PATH, its file named apart)",
                t.name()
            ));
        }
    }
    Ok(targets)
}

/// `sipsec@PATH`: another sipsec build, measured as a server of its own
/// and named in tables by its file name (`sipsec@NAME`).
fn another_build(path: &str) -> Result<sipsec_bench::compare::Target, String> {
    let p = std::path::Path::new(path);
    if !p.is_file() {
        return Err(format!("sipsec@{path}: no such sipsec build"));
    }
    let exe = std::fs::canonicalize(p).map_err(|e| format!("sipsec@{path}: {e}"))?;
    let name = p
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| {
            n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        })
        .ok_or_else(|| {
            format!("sipsec@{path}: name the build's file with letters, digits, '-', '_' or '.'")
        })?;
    Ok(sipsec_bench::compare::Target::Sipsec {
        exe,
        label: format!("sipsec@{name}"),
    })
}
