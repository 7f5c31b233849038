//! Side by side: the same scenarios against several servers in one run,
//! each server started and stopped here with the same users, optionally
//! pinned to its own core; the result is a ratio table.

use crate::error::Error;
use std::fmt::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::engine::{Live, Run, Shape, User};
use crate::link::Transport;
use crate::report::Report;
use crate::{cpu, scenario, Options};

/// A server to measure.
#[derive(Debug, Clone)]
pub enum Target {
    /// `sipsec serve`, from this executable or another build.
    Sipsec {
        /// The `sipsec` binary.
        exe: PathBuf,
        /// Its name in tables: `sipsec`, or `sipsec@NAME` for a second
        /// build measured beside the first (an A/B in the same rounds).
        label: String,
    },
    /// Kamailio with the shipped configuration.
    Kamailio {
        /// `interop/kamailio/kamailio.cfg`.
        cfg: PathBuf,
    },
    /// `sipsec bench null`: 200 OK to every request, no other work — the
    /// floor of what moving the messages costs.
    Null {
        /// The `sipsec` binary.
        exe: PathBuf,
    },
}

impl Target {
    /// `sipsec serve` from `exe`, named `sipsec` in tables.
    pub fn sipsec(exe: PathBuf) -> Self {
        Target::Sipsec {
            exe,
            label: "sipsec".into(),
        }
    }

    /// Its name in tables.
    pub fn name(&self) -> &str {
        match self {
            Target::Sipsec { label, .. } => label,
            Target::Kamailio { .. } => "kamailio",
            Target::Null { .. } => "null",
        }
    }
}

/// What to compare.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Servers, the first being the one whose ratios are reported.
    pub targets: Vec<Target>,
    /// Scenario names.
    pub scenarios: Vec<String>,
    /// Run without auth, with auth, or both.
    pub auth: Vec<bool>,
    /// The digest algorithm both servers challenge with (their users'
    /// HA1s written for it).
    pub digest: sip_core::digest::Algorithm,
    /// Offered calls/s.
    pub rate: f64,
    /// Calls per scenario.
    pub calls: u64,
    /// Users (the callee among them).
    pub users: Vec<User>,
    /// Server on core 0, generator on core 1 (busy-polling its own core).
    pub pin: bool,
    /// The CPUs the servers run on (`taskset -c` syntax, e.g. `0-3`),
    /// overriding `pin`'s core 0.
    pub server_cpus: Option<String>,
    /// More `sipsec serve` flags (e.g. `--udp-balance spread`).
    pub sipsec_args: Vec<String>,
    /// Server worker threads / Kamailio children.
    pub workers: usize,
    /// Generator threads.
    pub threads: usize,
    /// Flows (UDP sockets or connections) per generator thread.
    pub flows: usize,
    /// Scratch directory for users files, databases and stores.
    pub workdir: PathBuf,
    /// Latency coefficient weights.
    pub weights: [f64; 5],
    /// The generator's transport; over anything but UDP the servers listen
    /// on a second port for it, and the built-in callee still registers
    /// over UDP (calls cross transports, RFC 5658).
    pub transport: Transport,
    /// The certificate both servers present over TLS and WSS.
    pub certificate: Option<Certificate>,
    /// Times every server runs every scenario, in turn; the servers'
    /// order is reversed every other round (A B, B A, …).
    pub rounds: usize,
    /// An rtpengine's NG address: the proxies are then stateful and put
    /// every call's media through it with the same flags (sipsec's
    /// `[media] mode = "always"`, Kamailio's rtpengine module).
    pub media_relay: Option<SocketAddr>,
}

/// Where the proxies relay media in the plan: sipsec's configuration
/// file for it, or Kamailio's defines.
fn media_args(c: &mut Command, plan: &Plan, target: &Target, mode: &str) -> Result<(), Error> {
    let Some(relay) = plan.media_relay.filter(|_| mode == "proxy") else {
        return Ok(());
    };
    match target {
        Target::Sipsec { .. } => {
            let file = plan.workdir.join("media.toml");
            let text = format!("[media]\nmode = \"always\"\nrelays = [\"{relay}\"]\n");
            std::fs::write(&file, text).map_err(Error::io(file.display()))?;
            c.args(["--stateful", "--config"]).arg(file);
        }
        Target::Kamailio { .. } => {
            c.args(["-A", "WITH_STATEFUL", "-A", "WITH_RTPENGINE", "-A"])
                .arg(format!("RTPENGINE_SOCK=\"udp:{relay}\""));
        }
        Target::Null { .. } => {
            return Err(Error::Input("the null responder relays no media".into()))
        }
    }
    Ok(())
}

/// A server certificate and the CA that issued it.
#[derive(Debug, Clone)]
pub struct Certificate {
    /// Certificate chain (PEM), naming 127.0.0.1.
    pub chain: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The CA certificates (PEM) the generator trusts.
    pub ca: PathBuf,
}

/// Adds a listener for `transport` on `listen` to a server's command line
/// (`chain` and `key`: the certificate for TLS and WSS). sipsec's TCP
/// listener is off unless TCP is asked for; Kamailio takes WebSocket
/// upgrades on its TCP or TLS listener (kamailio-websocket-modules).
pub(crate) fn listener_args(
    c: &mut Command,
    target: &Target,
    transport: Transport,
    listen: SocketAddr,
    chain: &Path,
    key: &Path,
) -> Result<(), Error> {
    let at = listen.to_string();
    match target {
        Target::Sipsec { .. } => match transport {
            Transport::Tcp => c.args(["--tcp", &at]),
            Transport::Tls => c.args(["--no-tcp", "--tls", &at]),
            Transport::Ws => c.args(["--no-tcp", "--ws", &at]),
            Transport::Wss => {
                // Its TLS listener would default to port 5061: move it.
                let tls = free_port().map_err(Error::io("finding a free port"))?;
                c.args(["--no-tcp", "--wss", &at, "--tls"])
                    .arg(SocketAddr::from(([127, 0, 0, 1], tls)).to_string())
            }
            _ => c.arg("--no-tcp"),
        },
        Target::Kamailio { .. } => match transport {
            Transport::Tcp | Transport::Ws => c.args(["-l", &format!("tcp:{at}")]),
            Transport::Tls | Transport::Wss => c
                .args(["-l", &format!("tls:{at}"), "-A", "WITH_TLS", "-A"])
                .arg(format!("TLS_CERT=\"{}\"", chain.display()))
                .arg("-A")
                .arg(format!("TLS_KEY=\"{}\"", key.display())),
            _ => c,
        },
        Target::Null { .. } => match transport {
            Transport::Tcp => c.args(["--tcp", &at]),
            Transport::Tls => c.args(["--tls", &at]),
            Transport::Udp => c,
            other => {
                return Err(Error::Input(format!(
                    "the null responder does not speak {}",
                    other.as_str()
                )))
            }
        },
    };
    let secure = matches!(transport, Transport::Tls | Transport::Wss);
    if secure && matches!(target, Target::Sipsec { .. } | Target::Null { .. }) {
        c.arg("--cert").arg(chain).arg("--key").arg(key);
    }
    if matches!(target, Target::Kamailio { .. })
        && matches!(transport, Transport::Ws | Transport::Wss)
    {
        c.args(["-A", "WITH_WEBSOCKET"]);
    }
    Ok(())
}

/// One scenario on one server.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// Server.
    pub target: String,
    /// Which round of the comparison ran it (from 1).
    pub round: usize,
    /// Scenario.
    pub scenario: String,
    /// With digest auth.
    pub auth: bool,
    /// The run's report.
    pub report: Report,
}

pub(crate) fn mode_of(scenario: &str) -> &'static str {
    match scenario {
        "invite" | "invite-not-found" => "proxy",
        "redirect" => "redirect",
        _ => "registrar",
    }
}

/// A loopback port free for both UDP and TCP at this moment (servers
/// listen on both, and a port free for one may be another program's for
/// the other).
pub(crate) fn free_port() -> std::io::Result<u16> {
    let mut last = None;
    for _ in 0..64 {
        let udp = UdpSocket::bind("127.0.0.1:0")?;
        let port = udp.local_addr()?.port();
        match std::net::TcpListener::bind(("127.0.0.1", port)) {
            Ok(_) => return Ok(port),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free port")))
}

/// Waits until something answers an OPTIONS on `addr`.
pub(crate) fn wait_ready(addr: SocketAddr, child: &mut Child) -> Result<(), Error> {
    wait_answering(addr, Some(child), Duration::from_secs(15))
}

/// Sends OPTIONS to `addr` every 100 ms (from the address routes pick;
/// the first also resolves the neighbour) until something answers, for
/// at most `within`; fails at once if `child`, the server, exits.
pub(crate) fn wait_answering(
    addr: SocketAddr,
    mut child: Option<&mut Child>,
    within: Duration,
) -> Result<(), Error> {
    let source = crate::link::source_for(addr).map_err(Error::io("socket"))?;
    let sock = UdpSocket::bind(SocketAddr::new(source, 0)).map_err(Error::io("socket"))?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(Error::io("socket"))?;
    let local = sock.local_addr().map_err(Error::io("socket"))?;
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if let Some(Ok(Some(status))) = child.as_mut().map(|c| c.try_wait()) {
            return Err(Error::peer(
                addr,
                format!("the server exited at start ({status})"),
            ));
        }
        let msg = format!("OPTIONS sip:{addr} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK-ready{}\r\nMax-Forwards: 70\r\nFrom: <sip:probe@{local}>;tag=p\r\nTo: <sip:{addr}>\r\nCall-ID: ready-{}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n", local.port(), local.port());
        let _ = sock.send_to(msg.as_bytes(), addr);
        if sock.recv(&mut buf).is_ok() {
            return Ok(());
        }
    }
    Err(Error::Timeout(format!(
        "no answer from {addr} within {} s",
        within.as_secs()
    )))
}

/// The body of `path` on a server's operator endpoint at `addr` (with
/// `token` where it asks for one), read whole up to 1 MiB within 5 s.
pub(crate) fn operator_get(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> Result<String, Error> {
    use std::io::{Read, Write};
    let what = format!("{addr}{path}");
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(Error::io(&what))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let ask = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n{auth}\r\n");
    s.write_all(ask.as_bytes()).map_err(Error::io(&what))?;
    let mut text = String::new();
    s.take(1 << 20)
        .read_to_string(&mut text)
        .map_err(Error::io(&what))?;
    text.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .ok_or_else(|| Error::peer(what, "no HTTP body"))
}

/// A started server, killed when dropped.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
    pub(crate) pids: Vec<u32>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let pid = self.child.id();
        // SIGTERM lets Kamailio stop its children; kill if it lingers.
        let quiet = |args: &[&str]| {
            let _ = Command::new("kill")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        };
        quiet(&[&pid.to_string()]);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for p in &self.pids {
            quiet(&["-9", &p.to_string()]);
        }
    }
}

pub(crate) fn command(pin: bool, program: &Path) -> Command {
    command_on(pin.then_some("0"), program)
}

/// `program` on the CPUs `cpus` names (`taskset -c` syntax), or anywhere.
pub(crate) fn command_on(cpus: Option<&str>, program: &Path) -> Command {
    if let Some(cpus) = cpus {
        let mut c = Command::new("taskset");
        c.args(["-c", cpus]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Writes the users for both servers: sipsec's HA1 file (via `sipsec users
/// import`) and Kamailio's db_text `subscriber` table (HA1 only).
pub(crate) fn write_users(plan: &Plan) -> Result<(), Error> {
    let dir = &plan.workdir;
    std::fs::create_dir_all(dir).map_err(Error::io(dir.display()))?;
    let mut csv = String::from("username,password\n");
    let mut table = String::from(
        "id(int,auto) username(string) domain(string,null) password(string,null) ha1(string,null) ha1b(string,null)\n",
    );
    for (i, u) in plan.users.iter().enumerate() {
        let _ = writeln!(csv, "{},{}", u.name, u.password);
        let ha1 = sip_core::digest::ha1(plan.digest, &u.name, "sipsec", &u.password);
        let _ = writeln!(table, "{}:{}:sipsec::{}:", i + 1, u.name, ha1.as_str());
    }
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(Error::io(dir.join(name).display()))
    };
    write("users.csv", &csv)?;
    write("subscriber", &table)?;
    write(
        "version",
        "table_name(string) table_version(int)\nsubscriber:7\n",
    )?;
    for t in &plan.targets {
        if let Target::Sipsec { exe, .. } = t {
            let out = Command::new(exe)
                .args(["users", "import"])
                .arg(dir.join("users.csv"))
                .arg("--file")
                .arg(dir.join("users.tsv"))
                .output()
                .map_err(Error::io(exe.display()))?;
            if !out.status.success() {
                return Err(Error::peer(
                    "sipsec users import",
                    String::from_utf8_lossy(&out.stderr).trim(),
                ));
            }
        }
    }
    Ok(())
}

/// Starts `target` for `mode`; returns it and the address the generator
/// loads (its UDP address, or the listener for the plan's transport).
pub(crate) fn start(
    plan: &Plan,
    target: &Target,
    mode: &str,
    auth: bool,
) -> Result<(Server, SocketAddr), Error> {
    let free = || {
        free_port()
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
            .map_err(Error::io("finding a free port"))
    };
    let addr = free()?;
    let listen = if plan.transport == Transport::Udp {
        addr
    } else {
        free()?
    };
    let dir = &plan.workdir;
    let workers = plan.workers.max(1).to_string();
    let cpus = plan.server_cpus.as_deref().or(plan.pin.then_some("0"));
    let mut c = match target {
        Target::Sipsec { exe, label } => {
            let data = dir.join(format!("data-{label}-{mode}-{auth}"));
            let _ = std::fs::remove_dir_all(&data);
            let mut c = command_on(cpus, exe);
            c.args(["serve", "--mode", mode, "--udp", &addr.to_string()])
                .args(["--no-http", "--workers", &workers])
                .args(&plan.sipsec_args)
                .arg("--data-dir")
                .arg(&data);
            if auth {
                // Both servers challenge with the plan's one algorithm.
                c.args(["--auth", "--digest", plan.digest.as_str(), "--users"])
                    .arg(dir.join("users.tsv"));
            }
            c
        }
        Target::Kamailio { cfg } => {
            let mut c = command_on(cpus, Path::new("kamailio"));
            c.arg("-f")
                .arg(cfg)
                .args(["-DD", "-E", "-m", "256", "-M", "32", "-n", &workers])
                .args(["-l", &format!("udp:{addr}")])
                .arg("-w")
                .arg(dir)
                .args(["-A", &format!("MODE_{}", mode.to_uppercase())]);
            if auth {
                c.args(["-A", "WITH_AUTH", "-A"])
                    .arg(format!("DBURL=\"text://{}\"", dir.display()));
                if plan.digest != sip_core::digest::Algorithm::Md5 {
                    c.arg("-A")
                        .arg(format!("DIGEST_ALGORITHM=\"{}\"", plan.digest.as_str()));
                }
            }
            c
        }
        Target::Null { exe } => {
            if auth {
                return Err(Error::Input("the null responder challenges no one".into()));
            }
            let mut c = command_on(cpus, exe);
            c.args(["bench", "null", "--udp", &addr.to_string()])
                .args(["--workers", &workers]);
            c
        }
    };
    media_args(&mut c, plan, target, mode)?;
    if plan.transport != Transport::Udp {
        let none = PathBuf::new();
        let (chain, key) = plan
            .certificate
            .as_ref()
            .map_or((&none, &none), |c| (&c.chain, &c.key));
        listener_args(&mut c, target, plan.transport, listen, chain, key)?;
    }
    let mut child = c
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(Error::io(format!("cannot start {}", target.name())))?;
    wait_ready(addr, &mut child)
        .map_err(|e| Error::peer(format!("{} ({mode})", target.name()), e))?;
    // Kamailio forks its workers after start: all of them are measured,
    // and only they are stopped (another run's servers are left alone).
    let pids = cpu::settled_tree(child.id());
    Ok((Server { child, addr, pids }, listen))
}

/// Runs the plan; `progress` hears about each cell as it finishes.
pub fn compare(plan: &Plan, mut progress: impl FnMut(&Cell)) -> Result<Vec<Cell>, Error> {
    write_users(plan)?;
    let callee = plan
        .users
        .iter()
        .find(|u| u.name == "callee")
        .cloned()
        .ok_or_else(|| Error::Input("the users need a `callee` for invite and redirect".into()))?;
    let secure = matches!(plan.transport, Transport::Tls | Transport::Wss);
    let kamailio = plan
        .targets
        .iter()
        .any(|t| matches!(t, Target::Kamailio { .. }));
    if kamailio && secure && plan.workers > 1 {
        // Debian's Kamailio 5.6 has no tls_threads_mode: with OpenSSL 3 its
        // TCP workers corrupt each other's TLS state and crash under
        // load (kamailio/kamailio#3791, fixed in 5.7.4).
        return Err(Error::Input(
            "Kamailio 5.6 with OpenSSL 3 crashes with more than one TLS worker: use --workers 1"
                .into(),
        ));
    }
    let tls = match (&plan.certificate, secure) {
        (Some(c), true) => {
            Some(crate::link::client_config(&c.ca, false).map_err(Error::io(c.ca.display()))?)
        }
        (None, true) => {
            return Err(Error::Input(format!(
                "{} needs a certificate",
                plan.transport.as_str()
            )))
        }
        _ => None,
    };
    if plan.rounds == 0 {
        return Err(Error::Input("rounds must be positive".into()));
    }
    let mut cells = Vec::new();
    for round in 1..=plan.rounds {
        for target in crate::stats::round_order(&plan.targets, round) {
            run_target(
                plan,
                target,
                round,
                &callee,
                &tls,
                &mut cells,
                &mut progress,
            )?;
        }
    }
    Ok(cells)
}

/// Every scenario of `plan` on `target`, without and with auth as asked.
fn run_target(
    plan: &Plan,
    target: &Target,
    round: usize,
    callee: &User,
    tls: &Option<Arc<rustls::ClientConfig>>,
    cells: &mut Vec<Cell>,
    progress: &mut impl FnMut(&Cell),
) -> Result<(), Error> {
    for &auth in &plan.auth {
        for mode in ["registrar", "proxy", "redirect"] {
            let names: Vec<&String> = plan
                .scenarios
                .iter()
                .filter(|s| mode_of(s) == mode)
                .collect();
            if names.is_empty() {
                continue;
            }
            let (server, listen) = start(plan, target, mode, auth)?;
            // Fixed local ports: update and logout touch register's bindings.
            let local_port = free_port().map_err(Error::io("finding a free port"))?;
            for name in names {
                let opts = Options {
                    run: Run {
                        target: listen,
                        also: Vec::new(),
                        scenario: scenario::built_in(name, auth)?,
                        shape: Shape::Rate(plan.rate),
                        calls: plan.calls,
                        duration: Duration::from_secs_f64(plan.calls as f64 / plan.rate + 1.0),
                        drain: Duration::from_secs(35),
                        threads: plan.threads,
                        local_port,
                        users: plan.users.clone(),
                        transport: plan.transport,
                        tls: tls.clone(),
                        connection_per_call: false,
                        flows: plan.flows,
                        busy_poll: plan.pin,
                        share_flows: false,
                        one_shared_socket: false,
                        ids: None,
                    },
                    callee: callee.clone(),
                    callee_registrar: (listen != server.addr).then_some(server.addr),
                    callee_domain: None,
                    server_pids: server.pids.clone(),
                    weights: plan.weights,
                };
                let report = crate::measure(&opts, &Live::default(), &AtomicBool::new(false))?;
                let cell = Cell {
                    target: target.name().to_owned(),
                    round,
                    scenario: name.clone(),
                    auth,
                    report,
                };
                progress(&cell);
                cells.push(cell);
            }
        }
    }
    Ok(())
}

/// One round's CPU ratio of two servers, and whether both kept up (failed
/// no call) in it.
struct RoundPair {
    ratio: f64,
    kept_up: bool,
}

/// The ratio column's cell: the median (range) of the rounds in which both
/// servers kept up, from nine rounds on with the median's 95 % confidence
/// interval (an A/B whose interval excludes 1 differs beyond the rounds'
/// noise), and with how many of the rounds that was when not all. A
/// server that fails calls pays for retransmissions and timeouts and
/// divides its CPU by fewer calls, so such a round is no comparison; when
/// every round had failures, all of them, said so.
fn ratio_cell(pairs: &[RoundPair]) -> String {
    let kept: Vec<f64> = pairs
        .iter()
        .filter(|p| p.kept_up)
        .map(|p| p.ratio)
        .collect();
    let all: Vec<f64> = pairs.iter().map(|p| p.ratio).collect();
    let median = |v: &[f64]| crate::stats::ratio_summary(v, 2);
    match kept.len() {
        0 if all.is_empty() => "-".into(),
        0 => format!("{} (calls failed in every round)", median(&all)),
        n if n == all.len() => median(&kept),
        n => format!(
            "{} in the {n} of {} rounds without failed calls",
            median(&kept),
            all.len()
        ),
    }
}

/// The ratio table: per scenario and auth, calls/s, CPU µs per call and
/// the calls' latency (p50 / p99) of each target, and the first target's
/// CPU relative to each other one. Over several rounds a figure is the
/// median of the rounds with their range in brackets (the latencies the
/// medians of the rounds' percentiles), a ratio the median of the own ratios of the rounds
/// in which both servers kept up ([`ratio_cell`]), and failures the total.
pub fn table(cells: &[Cell], targets: &[Target]) -> String {
    let mut s = String::new();
    let names: Vec<&str> = targets.iter().map(Target::name).collect();
    let _ = write!(s, "| scenario | auth |");
    for n in &names {
        let _ = write!(
            s,
            " {n} calls/s | {n} CPU µs/call | {n} failed | {n} p50 / p99 ms |"
        );
    }
    for n in names.iter().skip(1) {
        let _ = write!(s, " CPU {}/{n} |", names[0]);
    }
    s.push('\n');
    let cols = 2 + 4 * names.len() + names.len().saturating_sub(1);
    s.push_str(&"|---".repeat(cols));
    s.push_str("|\n");
    let mut rows: Vec<(&str, bool)> = cells
        .iter()
        .map(|c| (c.scenario.as_str(), c.auth))
        .collect();
    rows.dedup();
    rows.sort_by_key(|(sc, a)| (scenario::BUILT_IN.iter().position(|b| b == sc), *a));
    rows.dedup();
    // Cells made by hand (round 0) count as one round.
    let round = |c: &Cell| c.round.max(1);
    let rounds = cells.iter().map(round).max().unwrap_or(1);
    for (sc, auth) in rows {
        let of = |t: &str| -> Vec<&Cell> {
            cells
                .iter()
                .filter(|c| c.target == t && c.scenario == sc && c.auth == auth)
                .collect()
        };
        let cpu = |c: &Cell| c.report.server_cpu_us_per_call.unwrap_or(f64::NAN);
        let _ = write!(s, "| {sc} | {} |", if auth { "digest" } else { "none" });
        for n in &names {
            let mine = of(n);
            if mine.is_empty() {
                s.push_str(" - | - | - | - |");
                continue;
            }
            let cps: Vec<f64> = mine.iter().map(|c| c.report.achieved_cps).collect();
            let us: Vec<f64> = mine.iter().map(|c| cpu(c)).collect();
            let failed: u64 = mine.iter().map(|c| c.report.failed).sum();
            let latency = |f: fn(&crate::report::LatencyMs) -> f64| {
                let v: Vec<f64> = mine.iter().map(|c| f(&c.report.latency_ms)).collect();
                crate::stats::median(&v)
            };
            let _ = write!(
                s,
                " {} | {} | {failed} | {:.2} / {:.2} |",
                crate::stats::median_range(&cps, 0),
                crate::stats::median_range(&us, 1),
                latency(|l| l.p50),
                latency(|l| l.p99)
            );
        }
        for n in names.iter().skip(1) {
            // Each round's own ratio: its servers ran back to back.
            let pairs: Vec<RoundPair> = (1..=rounds)
                .filter_map(|r| {
                    let a = of(names[0]).into_iter().find(|c| round(c) == r)?;
                    let b = of(n).into_iter().find(|c| round(c) == r)?;
                    Some(RoundPair {
                        ratio: (cpu(b) > 0.0).then(|| cpu(a) / cpu(b))?,
                        kept_up: a.report.failed == 0 && b.report.failed == 0,
                    })
                })
                .collect();
            let _ = write!(s, " {} |", ratio_cell(&pairs));
        }
        s.push('\n');
    }
    s
}

/// The comparison as an HTML page: the table and CPU and throughput bars.
pub fn html(cells: &[Cell], targets: &[Target]) -> String {
    use crate::plot;
    let names: Vec<&str> = targets.iter().map(Target::name).collect();
    let mut sections = Vec::new();
    for auth in [false, true] {
        let scenarios: Vec<String> = scenario::BUILT_IN
            .iter()
            .filter(|sc| cells.iter().any(|c| c.scenario == **sc && c.auth == auth))
            .map(|sc| (*sc).to_owned())
            .collect();
        if scenarios.is_empty() {
            continue;
        }
        // Over several rounds, the median.
        let value = |t: &str, sc: &str, f: &dyn Fn(&Report) -> Option<f64>| {
            let values: Vec<f64> = cells
                .iter()
                .filter(|c| c.target == t && c.scenario == sc && c.auth == auth)
                .filter_map(|c| f(&c.report))
                .collect();
            crate::stats::median(&values)
        };
        let series = |f: &dyn Fn(&Report) -> Option<f64>| -> Vec<(&str, Vec<f64>)> {
            names
                .iter()
                .map(|n| (*n, scenarios.iter().map(|sc| value(n, sc, f)).collect()))
                .collect()
        };
        let which = if auth { "with digest" } else { "without auth" };
        sections.push((
            format!("Server CPU per call, {which}"),
            plot::bars(
                &format!("Server CPU µs per call, {which}"),
                "scenario",
                "µs per call",
                &scenarios,
                &series(&|r| r.server_cpu_us_per_call),
            ),
        ));
        sections.push((
            format!("Throughput, {which}"),
            plot::bars(
                &format!("Achieved calls/s, {which}"),
                "scenario",
                "calls/s",
                &scenarios,
                &series(&|r| Some(r.achieved_cps)),
            ),
        ));
    }
    let md = table(cells, targets);
    sections.insert(0, ("Ratio table".to_owned(), plot::markdown_table(&md)));
    let transport = cells.first().map_or("UDP", |c| c.report.transport.as_str());
    plot::page(
        &format!(
            "sipsec bench compare over {transport}: {}",
            names.join(" vs ")
        ),
        &sections,
    )
}

#[cfg(test)]
mod tests {
    use super::{ratio_cell, RoundPair};

    fn pairs(r: &[(f64, bool)]) -> Vec<RoundPair> {
        r.iter()
            .map(|&(ratio, kept_up)| RoundPair { ratio, kept_up })
            .collect()
    }

    #[test]
    fn a_round_with_failed_calls_is_left_out_of_the_ratio() {
        let all_kept = pairs(&[(0.35, true), (0.31, true), (0.36, true)]);
        assert_eq!(ratio_cell(&all_kept), "0.35 (0.31–0.36)");
        let some_failed = pairs(&[(0.35, true), (0.20, false), (0.33, true), (0.25, false)]);
        assert_eq!(
            ratio_cell(&some_failed),
            "0.34 (0.33–0.35) in the 2 of 4 rounds without failed calls"
        );
        let every_round_failed = pairs(&[(0.22, false), (0.24, false)]);
        assert_eq!(
            ratio_cell(&every_round_failed),
            "0.23 (0.22–0.24) (calls failed in every round)"
        );
        assert_eq!(ratio_cell(&[]), "-");
    }

    #[test]
    fn nine_rounds_give_the_median_ratio_a_confidence_interval() {
        let r = [0.91, 0.95, 0.87, 1.02, 0.93, 0.96, 0.90, 0.94, 0.99];
        let nine = pairs(&r.map(|x| (x, true)));
        // Sorted: 0.87 0.90 0.91 0.93 0.94 0.95 0.96 0.99 1.02.
        assert_eq!(ratio_cell(&nine), "0.94 (0.87–1.02), 95 % CI 0.90–0.99");
        // Eight: the range alone.
        let eight = [0.90, 0.92, 0.94, 0.96, 0.98, 1.00, 0.86, 1.04];
        assert_eq!(
            ratio_cell(&pairs(&eight.map(|x| (x, true)))),
            "0.95 (0.86–1.04)"
        );
    }
}
