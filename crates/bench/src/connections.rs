//! `sipsec bench connections`: many phones, each on its own TCP or TLS
//! connection, registered over it and held open; then every one refreshes
//! once. Measures what the connection layer costs the server: memory
//! (proportional set size, so a forking server's shared memory is counted
//! once) and threads per held connection, server CPU per full TLS
//! handshake + first REGISTER and per refresh, handshakes/s, failures.
//!
//! The phones are driven by a few event-loop threads (mio), each owning a
//! share of the connections; connections come from several loopback source
//! addresses so that no address runs out of ephemeral ports. A process may
//! hold only as many connections as its descriptor limit allows: past that
//! the phones run in several child processes (`sipsec bench phones`, told
//! what to do on stdin, answering on stdout), and `nodes` sipsec servers
//! share one Redis location, each holding its share of the connections.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use serde::{Deserialize, Serialize};
use sip_core::websocket as ws;

use crate::compare::{self, Server, Target};
use crate::cpu;
use crate::error::Error;

/// Stream transport of the phones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// SIP over TCP.
    Tcp,
    /// SIP over TLS (a full handshake per connection, no resumption).
    Tls,
    /// SIP over WebSocket (RFC 7118): an HTTP upgrade, then one masked
    /// frame per message.
    Ws,
    /// SIP over secure WebSocket: a full TLS handshake, then as `Ws`.
    Wss,
}

impl Stream {
    /// As in a Via header.
    pub fn via(self) -> &'static str {
        match self {
            Stream::Tcp => "TCP",
            Stream::Tls => "TLS",
            Stream::Ws => "WS",
            Stream::Wss => "WSS",
        }
    }

    fn param(self) -> &'static str {
        match self {
            Stream::Tcp => "tcp",
            Stream::Tls => "tls",
            // RFC 7118 §5.2: a URI names WSS as `transport=ws` too.
            Stream::Ws | Stream::Wss => "ws",
        }
    }

    /// The transport.
    pub fn transport(self) -> crate::link::Transport {
        use crate::link::Transport;
        match self {
            Stream::Tcp => Transport::Tcp,
            Stream::Tls => Transport::Tls,
            Stream::Ws => Transport::Ws,
            Stream::Wss => Transport::Wss,
        }
    }

    /// Over TLS (TLS, WSS).
    pub fn secure(self) -> bool {
        matches!(self, Stream::Tls | Stream::Wss)
    }

    /// Over WebSocket (WS, WSS).
    pub fn websocket(self) -> bool {
        matches!(self, Stream::Ws | Stream::Wss)
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Servers, each started here in turn.
    pub targets: Vec<Target>,
    /// TCP or TLS.
    pub transport: Stream,
    /// Connections (one registered phone each).
    pub connections: usize,
    /// Loopback source addresses the connections are spread over
    /// (127.0.1.1, 127.0.1.2, …).
    pub sources: usize,
    /// Connections being opened (connect, handshake, first REGISTER) at once.
    pub in_flight: usize,
    /// Refreshes per second in the refresh phase (all phones once).
    pub refresh_rate: f64,
    /// Seconds to hold the connections idle before measuring memory.
    pub hold: Duration,
    /// A phase that has not finished this long after its last send fails
    /// what is left.
    pub timeout: Duration,
    /// Client event-loop threads.
    pub threads: usize,
    /// TLS certificate chain (PEM) every server presents.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The CA the phones trust for it.
    pub ca: PathBuf,
    /// Server on core 0, phones on the others, busy-polling there.
    pub pin: bool,
    /// Server UDP workers and connection reactors / Kamailio UDP and TCP children.
    pub workers: usize,
    /// Scratch directory for configuration and data.
    pub workdir: PathBuf,
    /// sipsec servers sharing one Redis location (a `redis-server` started
    /// here), the phones spread over them; 1: one server, no Redis.
    pub nodes: usize,
    /// Phone processes; `None`: as many as the descriptor limit needs.
    pub phone_processes: Option<usize>,
    /// The executable that runs `bench phones` in a child process.
    pub phones_exe: PathBuf,
    /// Times every server is measured, in turn; the servers' order is
    /// reversed every other round (A B, B A, …) so that a machine that
    /// slows down or speeds up meanwhile weighs on each alike.
    pub rounds: usize,
}

/// One server's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Outcome {
    /// Server.
    pub target: String,
    /// Which round of the run measured it (from 1).
    pub round: usize,
    /// TCP or TLS.
    pub transport: String,
    /// Connections asked for.
    pub connections: usize,
    /// Source addresses used.
    pub sources: usize,
    /// Connections opened and registered (200 to the first REGISTER).
    pub registered: usize,
    /// Connections that failed to open or register, by cause.
    pub open_failures: BTreeMap<String, u64>,
    /// Seconds from the first connect to the last registration.
    pub open_seconds: f64,
    /// Connections opened and registered per second (for TLS: full
    /// handshakes per second).
    pub opened_per_s: f64,
    /// Server CPU µs per connection opened and registered.
    pub server_cpu_us_per_open: Option<f64>,
    /// Server memory (PSS) before the first connection, bytes.
    pub memory_before: u64,
    /// Server memory (PSS) with every connection held idle, bytes.
    pub memory_held: u64,
    /// (held − before) / registered.
    pub memory_per_connection: Option<f64>,
    /// Server threads (all processes) with the connections held.
    pub threads: u64,
    /// Server processes (with `nodes` > 1: every node and Redis).
    pub processes: usize,
    /// sipsec nodes sharing a Redis location (1: one server).
    pub nodes: usize,
    /// Processes the phones ran in.
    pub phone_processes: usize,
    /// Refreshes answered 200.
    pub refreshed: usize,
    /// Refreshes that failed, by cause.
    pub refresh_failures: BTreeMap<String, u64>,
    /// Seconds the refresh phase took.
    pub refresh_seconds: f64,
    /// Server CPU µs per refresh.
    pub server_cpu_us_per_refresh: Option<f64>,
    /// With `nodes` > 1, Redis' part of the server figures: memory held
    /// (PSS, bytes) and CPU µs per open and per refresh.
    pub redis_memory_held: Option<u64>,
    /// See `redis_memory_held`.
    pub redis_cpu_us_per_open: Option<f64>,
    /// See `redis_memory_held`.
    pub redis_cpu_us_per_refresh: Option<f64>,
}

impl Outcome {
    /// Failures of both phases.
    pub fn failed(&self) -> u64 {
        self.open_failures.values().sum::<u64>() + self.refresh_failures.values().sum::<u64>()
    }
}

/// The `i`-th loopback source address.
pub fn source(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(
        u32::from(Ipv4Addr::new(127, 0, 1, 1)) + i as u32,
    ))
}

/// Memory (PSS, bytes), threads of `pids`.
fn footprint(pids: &[u32]) -> (u64, u64) {
    let mut pss = 0;
    let mut threads = 0;
    for pid in pids {
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) {
            pss += field_kb(&s, "Pss:") * 1024;
        }
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            threads += field_kb(&s, "Threads:");
        }
    }
    (pss, threads)
}

fn field_kb(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// One target's servers: one process, or `nodes` sipsec nodes sharing a
/// Redis location, each with its own listener.
struct Deployment {
    /// Dropped first: the nodes stop before their Redis.
    servers: Vec<Server>,
    redis: Option<Server>,
    /// Where the phones connect, one per server.
    listens: Vec<SocketAddr>,
}

impl Deployment {
    /// Every process of the deployment (children included).
    fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .servers
            .iter()
            .flat_map(|s| cpu::process_tree(s.child.id()))
            .collect();
        pids.extend(self.redis.iter().map(|r| r.child.id()));
        pids
    }
}

/// The log of `target`'s `i`-th node.
fn log_name(plan: &Plan, target: &Target, i: usize) -> String {
    if plan.nodes > 1 {
        format!("{}-{i}.log", target.name())
    } else {
        format!("{}.log", target.name())
    }
}

fn start(plan: &Plan, target: &Target) -> Result<Deployment, Error> {
    let dir = &plan.workdir;
    std::fs::create_dir_all(dir).map_err(Error::io(dir.display()))?;
    let redis = if plan.nodes > 1 {
        Some(start_redis(plan)?)
    } else {
        None
    };
    let url = redis.as_ref().map(|r| format!("redis://{}/0", r.addr));
    let mut servers = Vec::new();
    let mut listens = Vec::new();
    for i in 0..plan.nodes {
        let (server, listen) = start_node(plan, target, i, url.as_deref())?;
        servers.push(server);
        listens.push(listen);
    }
    Ok(Deployment {
        servers,
        redis,
        listens,
    })
}

/// A `redis-server` on a free port, data in the scratch directory, with
/// the append-only file fsynced every second (the default deployment in
/// `docs/scale-out.md`).
fn start_redis(plan: &Plan) -> Result<Server, Error> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(Error::io("finding a free port"))?
        .port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let dir = plan.workdir.join("redis");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(Error::io(dir.display()))?;
    let log = std::fs::File::create(plan.workdir.join("redis.log"))
        .map_err(Error::io(plan.workdir.display()))?;
    let mut child = compare::command(plan.pin, std::path::Path::new("redis-server"))
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args([
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
        ])
        .arg("--dir")
        .arg(&dir)
        .stdout(log)
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(Error::io(
            "cannot start redis-server (--nodes shares one Redis location)",
        ))?;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Error::peer(
                "redis-server",
                format!("exited at start ({status}); see its log"),
            ));
        }
        let pong = std::net::TcpStream::connect(addr).and_then(|mut c| {
            c.set_read_timeout(Some(Duration::from_millis(200)))?;
            c.write_all(b"PING\r\n")?;
            let mut b = [0u8; 7];
            c.read_exact(&mut b)?;
            Ok(&b == b"+PONG\r\n")
        });
        if pong.unwrap_or(false) {
            break;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::Timeout(format!(
                "redis-server on {addr}: no PONG within 15 s"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let pids = vec![child.id()];
    Ok(Server { child, addr, pids })
}

/// Starts `target`'s `i`-th node (its location in `redis`, if any).
/// Tries to start a server on ports found free a moment before.
const START_TRIES: usize = 3;

/// Starts `target`'s `i`-th node. The ports are found free just before,
/// and another program (a test or a phone running beside) may take one
/// meanwhile: a server that exits at start because its port is in use is
/// started again on fresh ports; any other failure says what the server
/// logged.
fn start_node(
    plan: &Plan,
    target: &Target,
    i: usize,
    redis: Option<&str>,
) -> Result<(Server, SocketAddr), Error> {
    let log = plan.workdir.join(log_name(plan, target, i));
    let mut tries = 0;
    loop {
        tries += 1;
        match start_node_once(plan, target, i, redis) {
            Ok(started) => return Ok(started),
            Err(e) => {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.contains("in use") && tries < START_TRIES {
                    continue;
                }
                if text.trim().is_empty() {
                    return Err(e);
                }
                let why = match e {
                    Error::Peer { detail, .. } => detail,
                    other => other.to_string(),
                };
                return Err(Error::peer(
                    target.name(),
                    format!("{why}; its log ends:\n{}", tail(&text, 8)),
                ));
            }
        }
    }
}

fn start_node_once(
    plan: &Plan,
    target: &Target,
    i: usize,
    redis: Option<&str>,
) -> Result<(Server, SocketAddr), Error> {
    let udp = compare::free_port().map_err(Error::io("finding a free port"))?;
    let stream = compare::free_port().map_err(Error::io("finding a free port"))?;
    let udp = SocketAddr::from(([127, 0, 0, 1], udp));
    let listen = SocketAddr::from(([127, 0, 0, 1], stream));
    let dir = &plan.workdir;
    let workers = plan.workers.max(1).to_string();
    let max = plan.connections.div_ceil(plan.nodes.max(1)) + 1024;
    let mut cmd = match target {
        Target::Sipsec { exe } => {
            let data = dir.join(format!("sipsec-data-{i}"));
            let _ = std::fs::remove_dir_all(&data);
            // Every phone comes from loopback: the per-source limit is
            // lifted as a carrier-NAT allow-list would; the accept rate is
            // lifted too, since the handshake capacity is what is measured.
            let sources: Vec<String> = (0..plan.sources)
                .map(|i| format!("\"{}\"", source(i)))
                .collect();
            let config = dir.join("connections.toml");
            std::fs::write(
                &config,
                format!(
                    "[connections]\nmax = {max}\nreactors = {workers}\naccept_rate = 0\nper_ip_exempt = [{}]\n",
                    sources.join(", ")
                ),
            )
            .map_err(Error::io(config.display()))?;
            let mut c = compare::command(plan.pin, exe);
            c.args(["serve", "--mode", "registrar", "--udp", &udp.to_string()])
                .args(["--no-http", "--workers", &workers])
                .arg("--config")
                .arg(&config)
                .arg("--data-dir")
                .arg(&data);
            if let Some(url) = redis {
                c.args(["--redis", url]);
            }
            c
        }
        Target::Kamailio { cfg } => {
            let mut c = compare::command(plan.pin, std::path::Path::new("kamailio"));
            c.arg("-f")
                .arg(cfg)
                .args(["-DD", "-E", "-m", "4096", "-M", "64", "-n", &workers])
                .args(["-l", &format!("udp:{udp}")])
                .arg("-w")
                .arg(dir)
                .args(["-A", "MODE_REGISTRAR", "-A"])
                .arg(format!("MAX_CONNECTIONS={max}"));
            c
        }
    };
    compare::listener_args(
        &mut cmd,
        target,
        plan.transport.transport(),
        listen,
        &plan.cert,
        &plan.key,
    )?;
    let log = std::fs::File::create(dir.join(log_name(plan, target, i)))
        .map_err(Error::io(dir.display()))?;
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(Error::io(format!("cannot start {}", target.name())))?;
    compare::wait_ready(udp, &mut child).map_err(|e| Error::peer(target.name(), e))?;
    let pids = cpu::settled_tree(child.id());
    Ok((
        Server {
            child,
            addr: udp,
            pids,
        },
        listen,
    ))
}

/// Connections one process may hold, with a reserve for everything else.
const FD_RESERVE: u64 = 512;

/// Runs the plan against every target; `progress` hears each phase.
pub fn measure(plan: &Plan, mut progress: impl FnMut(&str)) -> Result<Vec<Outcome>, Error> {
    if plan.connections == 0
        || plan.sources == 0
        || plan.threads == 0
        || plan.nodes == 0
        || plan.rounds == 0
    {
        return Err(Error::Input(
            "connections, sources, threads, nodes and rounds must be positive".into(),
        ));
    }
    if plan.phone_processes == Some(0) {
        return Err(Error::Input("phone processes must be positive".into()));
    }
    if !plan.refresh_rate.is_finite() || plan.refresh_rate <= 0.0 {
        return Err(Error::Input("the refresh rate must be positive".into()));
    }
    let kamailio = plan
        .targets
        .iter()
        .any(|t| matches!(t, Target::Kamailio { .. }));
    if kamailio && plan.nodes > 1 {
        return Err(Error::Input(
            "--nodes starts sipsec nodes sharing a Redis location; Kamailio runs as one server"
                .into(),
        ));
    }
    if kamailio && plan.transport.secure() && plan.workers > 1 {
        // Debian's Kamailio 5.6 has no tls_threads_mode: with OpenSSL 3 its
        // TCP workers corrupt each other's TLS state and crash under
        // handshake load (kamailio/kamailio#3791, fixed in 5.7.4).
        return Err(Error::Input(
            "Kamailio 5.6 with OpenSSL 3 crashes with more than one TLS worker: use --workers 1"
                .into(),
        ));
    }
    // Servers inherit this limit; each holds its share of the connections.
    let limit = sip_udp::raise_fd_limit_to(2 * plan.connections as u64 + 4096);
    let per_process = limit.saturating_sub(FD_RESERVE).max(1);
    let per_server = plan.connections.div_ceil(plan.nodes) as u64;
    if per_server > per_process {
        return Err(Error::Input(format!(
            "{per_server} connections per server need a descriptor limit above {}; a process may open {limit} here: raise the hard limit (`ulimit -Hn`, `LimitNOFILE=`), or spread them over --nodes {} (sipsec)",
            per_server + FD_RESERVE,
            (plan.connections as u64).div_ceil(per_process)
        )));
    }
    let processes = plan
        .phone_processes
        .unwrap_or_else(|| (plan.connections as u64).div_ceil(per_process) as usize)
        .min(plan.connections);
    let mut outcomes = Vec::new();
    for round in 1..=plan.rounds {
        if plan.rounds > 1 {
            progress(&format!("round {round} of {}", plan.rounds));
        }
        for target in crate::stats::round_order(&plan.targets, round) {
            let mut outcome = measure_one(plan, target, processes, &mut progress)?;
            outcome.round = round;
            outcomes.push(outcome);
        }
    }
    Ok(outcomes)
}

/// Starts `target`, opens, holds and refreshes the phones, and stops it.
fn measure_one(
    plan: &Plan,
    target: &Target,
    processes: usize,
    progress: &mut impl FnMut(&str),
) -> Result<Outcome, Error> {
    let deployment = start(plan, target)?;
    progress(&format!(
        "{}: listening on {} {}{}",
        target.name(),
        plan.transport.via(),
        deployment
            .listens
            .iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        deployment
            .redis
            .as_ref()
            .map(|r| format!(" ({} nodes, location in Redis on {})", plan.nodes, r.addr))
            .unwrap_or_default()
    ));
    let phones = if processes > 1 {
        Phones::Children {
            plan: Box::new(plan.clone()),
            servers: deployment.listens.clone(),
            processes,
            children: Vec::new(),
        }
    } else {
        Phones::here(plan, &deployment.listens)?
    };
    one(plan, target, &deployment, phones, progress)
}

fn one(
    plan: &Plan,
    target: &Target,
    deployment: &Deployment,
    mut phones: Phones,
    progress: &mut impl FnMut(&str),
) -> Result<Outcome, Error> {
    std::thread::sleep(Duration::from_millis(500));
    let pids = deployment.pids();
    let (memory_before, _) = footprint(&pids);
    let mut out = Outcome {
        target: target.name().to_owned(),
        transport: plan.transport.via().to_ascii_lowercase(),
        connections: plan.connections,
        sources: plan.sources,
        processes: pids.len(),
        nodes: plan.nodes,
        phone_processes: phones.processes(),
        memory_before,
        ..Outcome::default()
    };
    let redis: Vec<u32> = deployment.redis.iter().map(|r| r.child.id()).collect();
    let redis_cpu = || (!redis.is_empty()).then(|| cpu::cpu_seconds(&redis));
    let per = |a: Option<f64>, b: Option<f64>, n: usize| match (a, b) {
        (Some(a), Some(b)) if n > 0 => Some((b - a) * 1e6 / n as f64),
        _ => None,
    };
    // Open: connect, handshake, first REGISTER, at most `in_flight` at once.
    let cpu0 = cpu::cpu_seconds(&pids);
    let store0 = redis_cpu();
    let t0 = Instant::now();
    let opened = phones.open()?;
    out.open_seconds = t0.elapsed().as_secs_f64();
    let cpu1 = cpu::cpu_seconds(&pids);
    out.redis_cpu_us_per_open = per(store0, redis_cpu(), opened.ok);
    out.registered = opened.ok;
    out.open_failures = opened.failures;
    out.opened_per_s = out.registered as f64 / out.open_seconds.max(1e-9);
    alive(plan, target, deployment)?;
    if out.registered > 0 {
        out.server_cpu_us_per_open = Some((cpu1 - cpu0) * 1e6 / out.registered as f64);
    }
    progress(&format!(
        "{}: {} of {} connections registered in {:.1} s ({:.0}/s){}",
        out.target,
        out.registered,
        plan.connections,
        out.open_seconds,
        out.opened_per_s,
        causes(&out.open_failures)
    ));
    // Hold: memory and threads with every connection idle.
    std::thread::sleep(plan.hold);
    let pids = deployment.pids();
    let (held, threads_now) = footprint(&pids);
    out.memory_held = held;
    out.threads = threads_now;
    out.processes = pids.len();
    if out.registered > 0 {
        out.memory_per_connection =
            Some(held.saturating_sub(memory_before) as f64 / out.registered as f64);
    }
    if !redis.is_empty() {
        out.redis_memory_held = Some(footprint(&redis).0);
    }
    progress(&format!(
        "{}: {:.1} MB held, {} threads in {} processes{}",
        out.target,
        held as f64 / 1e6,
        out.threads,
        out.processes,
        out.redis_memory_held
            .map(|m| format!(" (Redis {:.1} MB of it)", m as f64 / 1e6))
            .unwrap_or_default()
    ));
    // Refresh: every open phone once, paced at the refresh rate.
    let cpu0 = cpu::cpu_seconds(&pids);
    let store0 = redis_cpu();
    let t0 = Instant::now();
    let refreshed = phones.refresh(plan.refresh_rate)?;
    out.refresh_seconds = t0.elapsed().as_secs_f64();
    alive(plan, target, deployment)?;
    let cpu1 = cpu::cpu_seconds(&pids);
    out.redis_cpu_us_per_refresh = per(store0, redis_cpu(), refreshed.ok);
    out.refreshed = refreshed.ok;
    out.refresh_failures = refreshed.failures;
    if out.refreshed > 0 {
        out.server_cpu_us_per_refresh = Some((cpu1 - cpu0) * 1e6 / out.refreshed as f64);
    }
    progress(&format!(
        "{}: {} refreshed in {:.1} s{}{}",
        out.target,
        out.refreshed,
        out.refresh_seconds,
        causes(&out.refresh_failures),
        match (out.server_cpu_us_per_refresh, out.redis_cpu_us_per_refresh) {
            (Some(all), Some(r)) => format!(" ({all:.1} µs CPU each, Redis {r:.1} of it)"),
            _ => String::new(),
        }
    ));
    Ok(out)
}

/// Where the phones run: event-loop threads in this process, or child
/// processes (`sipsec bench phones`) when one process may not hold them
/// all.
enum Phones {
    Here {
        shares: Vec<Share>,
        ctx: Ctx,
        in_flight: usize,
    },
    Children {
        plan: Box<Plan>,
        servers: Vec<SocketAddr>,
        processes: usize,
        /// Started by `open`.
        children: Vec<PhoneProcess>,
    },
}

/// What a phone process is told on its first line: its phones and how to
/// open them. It then opens them and answers a [`Tally`] line; each
/// [`Order`] line after that gets another; it stops at the end of input.
#[derive(Debug, Serialize, Deserialize)]
pub struct PhonesSpec {
    servers: Vec<SocketAddr>,
    transport: Stream,
    /// Phones `first`, `first + step`, … below `connections`.
    connections: usize,
    first: usize,
    step: usize,
    sources: usize,
    in_flight: usize,
    threads: usize,
    timeout_ms: u64,
    /// The CA the phones trust, for TLS and WSS.
    ca: PathBuf,
    busy_poll: bool,
    run: u32,
}

/// An order to a phone process after the open phase.
#[derive(Debug, Serialize, Deserialize)]
enum Order {
    /// Refresh every held phone once, this many per second.
    Refresh(f64),
}

struct PhoneProcess {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: io::BufReader<std::process::ChildStdout>,
}

impl PhoneProcess {
    /// The next tally the process writes.
    fn tally(&mut self) -> Result<Tally, Error> {
        use std::io::BufRead;
        let mut line = String::new();
        let read = self.output.read_line(&mut line);
        let gone = |detail: String| {
            Error::peer(
                format!("phone process {}", self.child.id()),
                format!("{detail} (its errors are above)"),
            )
        };
        match read {
            Ok(0) => Err(gone("exited".into())),
            Ok(_) => serde_json::from_str(&line).map_err(|e| gone(format!("wrote {line:?}: {e}"))),
            Err(e) => Err(gone(e.to_string())),
        }
    }

    fn order(&mut self, order: &Order) -> Result<(), Error> {
        let line = serde_json::to_string(order).expect("an order serializes");
        writeln!(self.input, "{line}").map_err(Error::io("writing to a phone process"))
    }
}

impl Drop for PhoneProcess {
    fn drop(&mut self) {
        // End of input stops it; a process stuck in a phase is killed.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Phones {
    fn here(plan: &Plan, servers: &[SocketAddr]) -> Result<Phones, Error> {
        let tls = if plan.transport.secure() {
            Some(crate::link::without_resumption(
                &crate::link::client_config(&plan.ca, false).map_err(Error::io("client TLS"))?,
            ))
        } else {
            None
        };
        let threads = plan.threads.min(plan.connections).max(1);
        let ids: Vec<usize> = (0..plan.connections).collect();
        Ok(Phones::Here {
            shares: shares(&ids, threads).map_err(Error::io("poll"))?,
            ctx: Ctx {
                servers: servers.to_vec(),
                transport: plan.transport,
                tls,
                sources: plan.sources,
                timeout: plan.timeout,
                run: std::process::id(),
                busy_poll: plan.pin,
            },
            in_flight: (plan.in_flight / threads).max(1),
        })
    }

    fn processes(&self) -> usize {
        match self {
            Phones::Here { .. } => 1,
            Phones::Children { processes, .. } => *processes,
        }
    }

    /// Opens and registers every phone.
    fn open(&mut self) -> Result<Tally, Error> {
        match self {
            Phones::Here {
                shares,
                ctx,
                in_flight,
            } => Ok(every_share(shares, |sh| sh.open(ctx, *in_flight))),
            Phones::Children {
                plan,
                servers,
                processes,
                children,
            } => {
                let n = *processes;
                for first in 0..n {
                    let spec = PhonesSpec {
                        servers: servers.clone(),
                        transport: plan.transport,
                        connections: plan.connections,
                        first,
                        step: n,
                        sources: plan.sources,
                        in_flight: (plan.in_flight / n).max(1),
                        threads: plan.threads.div_ceil(n),
                        timeout_ms: plan.timeout.as_millis() as u64,
                        ca: plan.ca.clone(),
                        busy_poll: plan.pin,
                        run: std::process::id(),
                    };
                    let mut child = std::process::Command::new(&plan.phones_exe)
                        .args(["bench", "phones"])
                        .stdin(std::process::Stdio::piped())
                        .stdout(std::process::Stdio::piped())
                        .spawn()
                        .map_err(Error::io(format!(
                            "cannot start {} bench phones",
                            plan.phones_exe.display()
                        )))?;
                    let input = child.stdin.take().expect("piped");
                    let output = io::BufReader::new(child.stdout.take().expect("piped"));
                    let mut p = PhoneProcess {
                        child,
                        input,
                        output,
                    };
                    let line = serde_json::to_string(&spec).expect("a spec serializes");
                    writeln!(p.input, "{line}").map_err(Error::io("writing to a phone process"))?;
                    children.push(p);
                }
                sum(children.iter_mut().map(PhoneProcess::tally))
            }
        }
    }

    /// Refreshes every held phone once, `rate` per second in all.
    fn refresh(&mut self, rate: f64) -> Result<Tally, Error> {
        match self {
            Phones::Here { shares, ctx, .. } => {
                let rate = rate / shares.len() as f64;
                Ok(every_share(shares, |sh| sh.refresh(ctx, rate)))
            }
            Phones::Children { children, .. } => {
                let order = Order::Refresh(rate / children.len().max(1) as f64);
                for c in children.iter_mut() {
                    c.order(&order)?;
                }
                sum(children.iter_mut().map(PhoneProcess::tally))
            }
        }
    }
}

/// `ids` dealt round-robin over `threads` shares.
fn shares(ids: &[usize], threads: usize) -> io::Result<Vec<Share>> {
    (0..threads)
        .map(|t| Share::new(ids.iter().skip(t).step_by(threads).copied().collect()))
        .collect()
}

/// The tallies added up; the first error if any.
fn sum(tallies: impl Iterator<Item = Result<Tally, Error>>) -> Result<Tally, Error> {
    let mut all = Tally::default();
    for t in tallies {
        all.add(t?);
    }
    Ok(all)
}

/// A phone process (`sipsec bench phones`): reads its [`PhonesSpec`] from
/// `input`, opens its phones, writes the [`Tally`] to `output`, then
/// serves each further order the same way until `input` ends.
pub fn phones(mut input: impl io::BufRead, mut output: impl Write) -> Result<(), Error> {
    let mut line = String::new();
    input
        .read_line(&mut line)
        .map_err(Error::io("reading the phones' spec"))?;
    let spec: PhonesSpec = serde_json::from_str(&line)
        .map_err(|e| Error::Input(format!("a phones spec was expected on stdin: {e}")))?;
    if spec.step == 0 || spec.threads == 0 || spec.sources == 0 || spec.servers.is_empty() {
        return Err(Error::Input(
            "step, threads, sources and servers must be positive".into(),
        ));
    }
    let ids: Vec<usize> = (spec.first..spec.connections).step_by(spec.step).collect();
    let limit = sip_udp::raise_fd_limit_to(ids.len() as u64 * 2 + 4096);
    if (ids.len() as u64) > limit.saturating_sub(FD_RESERVE) {
        return Err(Error::Input(format!(
            "{} phones need more descriptors than the {limit} this process may open",
            ids.len()
        )));
    }
    let tls = if spec.transport.secure() {
        Some(crate::link::without_resumption(
            &crate::link::client_config(&spec.ca, false).map_err(Error::io("client TLS"))?,
        ))
    } else {
        None
    };
    let threads = spec.threads.min(ids.len()).max(1);
    let mut shares = shares(&ids, threads).map_err(Error::io("poll"))?;
    let ctx = Ctx {
        servers: spec.servers,
        transport: spec.transport,
        tls,
        sources: spec.sources,
        timeout: Duration::from_millis(spec.timeout_ms),
        run: spec.run,
        busy_poll: spec.busy_poll,
    };
    let in_flight = (spec.in_flight / threads).max(1);
    let mut answer = |t: &Tally| -> Result<(), Error> {
        let line = serde_json::to_string(t).expect("a tally serializes");
        writeln!(output, "{line}")
            .and_then(|()| output.flush())
            .map_err(Error::io("writing the tally"))
    };
    answer(&every_share(&mut shares, |sh| sh.open(&ctx, in_flight)))?;
    loop {
        line.clear();
        if input
            .read_line(&mut line)
            .map_err(Error::io("reading an order"))?
            == 0
        {
            return Ok(());
        }
        let order: Order = serde_json::from_str(&line)
            .map_err(|e| Error::Input(format!("{line:?} is not an order: {e}")))?;
        match order {
            Order::Refresh(rate) => {
                if !(rate.is_finite() && rate > 0.0) {
                    return Err(Error::Input("the refresh rate must be positive".into()));
                }
                let rate = rate / shares.len() as f64;
                answer(&every_share(&mut shares, |sh| sh.refresh(&ctx, rate)))?;
            }
        }
    }
}

/// ", failed: 3 connect timeout, 1 register refused", or nothing.
fn causes(failures: &BTreeMap<String, u64>) -> String {
    if failures.is_empty() {
        return String::new();
    }
    let list: Vec<String> = failures.iter().map(|(k, v)| format!("{v} {k}")).collect();
    format!(", failed: {}", list.join(", "))
}

/// An error carrying the end of a server's log when one is no longer running.
fn alive(plan: &Plan, target: &Target, deployment: &Deployment) -> Result<(), Error> {
    let running = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
        })
    };
    if let Some(r) = &deployment.redis {
        if !running(r.child.id()) {
            return Err(Error::peer("redis-server", "exited during the run"));
        }
    }
    for (i, server) in deployment.servers.iter().enumerate() {
        if running(server.child.id()) {
            continue;
        }
        let log = std::fs::read_to_string(plan.workdir.join(log_name(plan, target, i)))
            .unwrap_or_default();
        return Err(Error::peer(
            target.name(),
            format!("exited during the run; its log ends:\n{}", tail(&log, 8)),
        ));
    }
    Ok(())
}

/// The last `n` lines of a server's log (its workdir goes with the run,
/// so the message carries them).
fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs `phase` on every share, each on its own thread, and adds up
/// their tallies.
fn every_share(shares: &mut [Share], phase: impl Fn(&mut Share) -> Tally + Sync) -> Tally {
    let tallies = std::thread::scope(|s| {
        let phase = &phase;
        let handles: Vec<_> = shares
            .iter_mut()
            .map(|sh| s.spawn(move || phase(sh)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect::<Vec<Tally>>()
    });
    let mut all = Tally::default();
    for t in tallies {
        all.add(t);
    }
    all
}

/// What every phone thread shares.
struct Ctx {
    /// The servers; phone `id` connects to `servers[id % len]`.
    servers: Vec<SocketAddr>,
    transport: Stream,
    tls: Option<Arc<rustls::ClientConfig>>,
    sources: usize,
    timeout: Duration,
    run: u32,
    /// Spin instead of sleeping in the event loop (pinned runs: the
    /// phones have their own core, and the server is then not charged
    /// for waking them).
    busy_poll: bool,
}

impl Ctx {
    /// How long an event loop may sleep when it could sleep `wait`.
    fn wait(&self, wait: Duration) -> Duration {
        if self.busy_poll {
            Duration::ZERO
        } else {
            wait
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Tally {
    ok: usize,
    failures: BTreeMap<String, u64>,
}

impl Tally {
    fn fail(&mut self, why: &str) {
        *self.failures.entry(why.to_owned()).or_default() += 1;
    }

    fn add(&mut self, other: Tally) {
        self.ok += other.ok;
        for (k, v) in other.failures {
            *self.failures.entry(k).or_default() += v;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// TCP connect under way.
    Connecting,
    /// TLS handshake under way.
    Handshaking,
    /// WebSocket upgrade sent; waiting for 101.
    Upgrading,
    /// A REGISTER sent; waiting for its final answer.
    Waiting,
    /// Registered and idle.
    Held,
    /// Closed or failed.
    Dead,
}

struct Phone {
    id: usize,
    /// The server it connects to.
    server: SocketAddr,
    sock: TcpStream,
    tls: Option<rustls::ClientConnection>,
    state: State,
    out: Vec<u8>,
    inbuf: Vec<u8>,
    cseq: u32,
    local: SocketAddr,
    websocket: bool,
}

/// One thread's phones and poll.
struct Share {
    ids: Vec<usize>,
    phones: Vec<Option<Phone>>,
    poll: Poll,
}

/// Outcome of driving a phone once.
enum Step {
    /// Still in the same phase.
    Busy,
    /// Reached Held with a 200.
    Done,
    /// Failed, with a cause.
    Failed(&'static str),
}

impl Share {
    fn new(ids: Vec<usize>) -> io::Result<Share> {
        Ok(Share {
            phones: ids.iter().map(|_| None).collect(),
            ids,
            poll: Poll::new()?,
        })
    }

    fn connect(&self, ctx: &Ctx, slot: usize) -> io::Result<Phone> {
        let id = self.ids[slot];
        let server = ctx.servers[id % ctx.servers.len()];
        let src = SocketAddr::new(source(id % ctx.sources), 0);
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        sock.set_nonblocking(true)?;
        // Phones send small messages and wait for the answer: no Nagle.
        sock.set_nodelay(true)?;
        // The port is chosen at connect, per destination: earlier runs'
        // TIME_WAIT sockets on the same source do not exhaust it.
        sip_udp::bind_address_no_port(&sock)?;
        sock.bind(&src.into())?;
        match sock.connect(&server.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        let local = sock
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("no local address"))?;
        let mut sock = TcpStream::from_std(sock.into());
        self.poll.registry().register(
            &mut sock,
            Token(slot),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        let tls = match &ctx.tls {
            Some(config) => Some(
                rustls::ClientConnection::new(
                    config.clone(),
                    rustls::pki_types::ServerName::IpAddress(server.ip().into()),
                )
                .map_err(io::Error::other)?,
            ),
            None => None,
        };
        Ok(Phone {
            id,
            server,
            sock,
            tls,
            state: State::Connecting,
            out: Vec::new(),
            inbuf: Vec::new(),
            cseq: 0,
            local,
            websocket: ctx.transport.websocket(),
        })
    }

    /// Opens and registers every phone of this share.
    fn open(&mut self, ctx: &Ctx, in_flight: usize) -> Tally {
        let mut tally = Tally::default();
        let mut next = 0;
        let mut busy = 0;
        let mut events = Events::with_capacity(1024);
        let mut last_progress = Instant::now();
        while next < self.ids.len() || busy > 0 {
            while busy < in_flight && next < self.ids.len() {
                match self.connect(ctx, next) {
                    Ok(p) => {
                        self.phones[next] = Some(p);
                        busy += 1;
                    }
                    Err(e) => tally.fail(&format!("connect: {}", e.kind())),
                }
                next += 1;
            }
            if busy == 0 {
                continue;
            }
            if self
                .poll
                .poll(&mut events, Some(ctx.wait(Duration::from_millis(100))))
                .is_err()
            {
                continue;
            }
            for ev in events.iter() {
                let slot = ev.token().0;
                let Some(p) = self.phones[slot].as_mut() else {
                    continue;
                };
                let before = p.state;
                if matches!(before, State::Held | State::Dead) {
                    continue;
                }
                match p.drive(ctx) {
                    Step::Busy => {}
                    Step::Done => {
                        busy -= 1;
                        tally.ok += 1;
                        last_progress = Instant::now();
                    }
                    Step::Failed(why) => {
                        busy -= 1;
                        tally.fail(why);
                        self.bury(slot);
                    }
                }
            }
            if last_progress.elapsed() > ctx.timeout {
                // Nothing finished for a whole timeout: fail what is left.
                for slot in 0..next {
                    if let Some(p) = &self.phones[slot] {
                        if !matches!(p.state, State::Held | State::Dead) {
                            tally.fail(match p.state {
                                State::Connecting => "connect timeout",
                                State::Handshaking => "handshake timeout",
                                State::Upgrading => "upgrade timeout",
                                _ => "register timeout",
                            });
                            busy -= 1;
                            self.bury(slot);
                        }
                    }
                }
                last_progress = Instant::now();
            }
        }
        tally
    }

    /// Refreshes every held phone once, `rate` per second.
    fn refresh(&mut self, ctx: &Ctx, rate: f64) -> Tally {
        let mut tally = Tally::default();
        let start = Instant::now();
        let live: Vec<usize> = (0..self.phones.len())
            .filter(|s| {
                self.phones[*s]
                    .as_ref()
                    .is_some_and(|p| p.state == State::Held)
            })
            .collect();
        let mut next = 0;
        let mut busy = 0;
        let mut events = Events::with_capacity(1024);
        let mut last_send = Instant::now();
        while next < live.len() || busy > 0 {
            let now = Instant::now();
            while next < live.len() && start + Duration::from_secs_f64(next as f64 / rate) <= now {
                let slot = live[next];
                next += 1;
                if let Some(p) = self.phones[slot].as_mut() {
                    match p.register(ctx) {
                        Ok(()) => busy += 1,
                        Err(_) => {
                            tally.fail("closed by the server");
                            self.bury(slot);
                        }
                    }
                }
                last_send = now;
            }
            let wait = if next < live.len() {
                (start + Duration::from_secs_f64(next as f64 / rate))
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(100))
            } else {
                Duration::from_millis(100)
            };
            if self.poll.poll(&mut events, Some(ctx.wait(wait))).is_err() {
                continue;
            }
            for ev in events.iter() {
                let slot = ev.token().0;
                let Some(p) = self.phones[slot].as_mut() else {
                    continue;
                };
                if p.state != State::Waiting {
                    // A held phone hearing something: the server closing it.
                    if p.state == State::Held && ev.is_read_closed() {
                        p.state = State::Dead;
                    }
                    continue;
                }
                match p.drive(ctx) {
                    Step::Busy => {}
                    Step::Done => {
                        busy -= 1;
                        tally.ok += 1;
                    }
                    Step::Failed(why) => {
                        busy -= 1;
                        tally.fail(why);
                        self.bury(slot);
                    }
                }
            }
            if next == live.len() && busy > 0 && last_send.elapsed() > ctx.timeout {
                for &slot in &live {
                    if self.phones[slot]
                        .as_ref()
                        .is_some_and(|p| p.state == State::Waiting)
                    {
                        tally.fail("refresh timeout");
                        busy -= 1;
                        self.bury(slot);
                    }
                }
            }
        }
        tally
    }

    fn bury(&mut self, slot: usize) {
        if let Some(mut p) = self.phones[slot].take() {
            let _ = self.poll.registry().deregister(&mut p.sock);
        }
    }
}

impl Phone {
    /// Advances the phone after a readiness event.
    fn drive(&mut self, ctx: &Ctx) -> Step {
        if self.state == State::Connecting {
            match self.sock.take_error() {
                Ok(None) => {}
                _ => return Step::Failed("connect refused"),
            }
            if self.sock.peer_addr().is_err() {
                return Step::Busy;
            }
            if self.tls.is_some() {
                self.state = State::Handshaking;
            } else if self.begin(ctx).is_err() {
                return Step::Failed("closed by the server");
            }
        }
        if let Err(why) = self.pump() {
            return Step::Failed(why);
        }
        if self.state == State::Handshaking {
            let done = self.tls.as_ref().is_some_and(|t| !t.is_handshaking());
            if !done {
                return Step::Busy;
            }
            if self.begin(ctx).is_err() {
                return Step::Failed("closed by the server");
            }
            if let Err(why) = self.pump() {
                return Step::Failed(why);
            }
        }
        if self.state == State::Upgrading {
            match ws::upgrade_answer(&self.inbuf) {
                ws::Answer::Incomplete => return Step::Busy,
                ws::Answer::Refused(_) => return Step::Failed("upgrade refused"),
                ws::Answer::Upgraded { used } => {
                    self.inbuf.drain(..used);
                }
            }
            if self.register(ctx).is_err() {
                return Step::Failed("closed by the server");
            }
            if let Err(why) = self.pump() {
                return Step::Failed(why);
            }
        }
        if self.state == State::Waiting {
            return self.answer();
        }
        Step::Busy
    }

    /// Moves bytes both ways until the socket would block.
    fn pump(&mut self) -> Result<(), &'static str> {
        let mut buf = [0u8; 16 << 10];
        match &mut self.tls {
            Some(tls) => loop {
                while tls.wants_write() {
                    match tls.write_tls(&mut self.sock) {
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => return Err("write error"),
                    }
                }
                match tls.read_tls(&mut self.sock) {
                    Ok(0) => return Err("closed by the server"),
                    Ok(_) => {
                        if tls.process_new_packets().is_err() {
                            return Err("TLS error");
                        }
                        loop {
                            match tls.reader().read(&mut buf) {
                                Ok(0) => return Err("closed by the server"),
                                Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                                Err(_) => break,
                            }
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if !tls.wants_write() {
                            return Ok(());
                        }
                    }
                    Err(_) => return Err("read error"),
                }
            },
            None => {
                while !self.out.is_empty() {
                    match self.sock.write(&self.out) {
                        Ok(n) => {
                            self.out.drain(..n);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => return Err("write error"),
                    }
                }
                loop {
                    match self.sock.read(&mut buf) {
                        Ok(0) => return Err("closed by the server"),
                        Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                        Err(_) => return Err("read error"),
                    }
                }
            }
        }
    }

    /// The connection is open (and secured): upgrade it to WebSocket, or
    /// register at once.
    fn begin(&mut self, ctx: &Ctx) -> io::Result<()> {
        if !ctx.transport.websocket() {
            return self.register(ctx);
        }
        let upgrade = ws::upgrade_request(
            &self.server.to_string(),
            "/",
            "dGhlIHNhbXBsZSBub25jZQ==",
            None,
        );
        self.send(upgrade.as_bytes())?;
        self.state = State::Upgrading;
        self.pump().map_err(io::Error::other)
    }

    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.tls {
            Some(tls) => tls.writer().write_all(bytes),
            None => {
                self.out.extend_from_slice(bytes);
                Ok(())
            }
        }
    }

    /// Queues a REGISTER (the first or a refresh) and sends what it can.
    fn register(&mut self, ctx: &Ctx) -> io::Result<()> {
        self.cseq += 1;
        self.inbuf.clear();
        let t = ctx.transport;
        let msg = format!(
            "REGISTER sip:{srv} SIP/2.0\r\n\
             Via: SIP/2.0/{via} {local};branch=z9hG4bK-c{run}-{id}-{cseq};rport\r\n\
             Max-Forwards: 70\r\n\
             From: <sip:c{id}@{srv}>;tag=c{id}\r\n\
             To: <sip:c{id}@{srv}>\r\n\
             Call-ID: conn-{run}-{id}\r\n\
             CSeq: {cseq} REGISTER\r\n\
             Contact: <sip:c{id}@{local};transport={param}>\r\n\
             Expires: 3600\r\n\
             Content-Length: 0\r\n\r\n",
            srv = self.server,
            via = t.via(),
            local = self.local,
            run = ctx.run,
            id = self.id,
            cseq = self.cseq,
            param = t.param(),
        );
        if t.websocket() {
            let mask = (self.id as u32 ^ self.cseq).to_be_bytes();
            self.send(&ws::client_frame(ws::TEXT, msg.as_bytes(), mask))?;
        } else {
            self.send(msg.as_bytes())?;
        }
        self.state = State::Waiting;
        self.pump().map_err(io::Error::other)
    }

    /// Reads the final answer to the REGISTER out of the input, if whole.
    fn answer(&mut self) -> Step {
        if self.websocket {
            // Server frames: unmasked, one SIP message each.
            loop {
                let (opcode, code, used) = match ws::server_frame(&self.inbuf, 1 << 16) {
                    Ok(None) => return Step::Busy,
                    Err(_) => return Step::Failed("bad WebSocket frame"),
                    Ok(Some(f)) => (
                        f.opcode,
                        std::str::from_utf8(f.payload)
                            .ok()
                            .and_then(|m| m.split_whitespace().nth(1))
                            .and_then(|c| c.parse::<u16>().ok())
                            .unwrap_or(0),
                        f.len,
                    ),
                };
                self.inbuf.drain(..used);
                match (opcode, code) {
                    (ws::opcode::CLOSE, _) => return Step::Failed("closed by the server"),
                    (ws::opcode::TEXT | ws::opcode::BINARY, 100..=199)
                    | (ws::opcode::PING | ws::opcode::PONG, _) => continue,
                    (ws::opcode::TEXT | ws::opcode::BINARY, 200..=299) => {
                        self.state = State::Held;
                        self.inbuf = Vec::new();
                        self.out = Vec::new();
                        return Step::Done;
                    }
                    _ => return Step::Failed("register refused"),
                }
            }
        }
        loop {
            let Some(end) = self.inbuf.windows(4).position(|w| w == b"\r\n\r\n") else {
                return Step::Busy;
            };
            let head = String::from_utf8_lossy(&self.inbuf[..end]).into_owned();
            let body = head
                .lines()
                .find_map(|l| {
                    let (n, v) = l.split_once(':')?;
                    (n.trim().eq_ignore_ascii_case("content-length")
                        || n.trim().eq_ignore_ascii_case("l"))
                    .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if self.inbuf.len() < end + 4 + body {
                return Step::Busy;
            }
            self.inbuf.drain(..end + 4 + body);
            let code = head
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse::<u16>().ok())
                .unwrap_or(0);
            match code {
                100..=199 => continue,
                200..=299 => {
                    self.state = State::Held;
                    // The read buffer goes with the answer: held phones
                    // cost the generator as little as possible.
                    self.inbuf = Vec::new();
                    self.out = Vec::new();
                    return Step::Done;
                }
                _ => return Step::Failed("register refused"),
            }
        }
    }
}

/// The servers measured, in the order given (the first round's).
fn names(outcomes: &[Outcome]) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for o in outcomes {
        if !names.contains(&o.target.as_str()) {
            names.push(&o.target);
        }
    }
    names
}

/// The side-by-side table (markdown). Over several rounds a figure is
/// the median of the rounds with their range in brackets, a ratio the
/// median of the rounds' own ratios (each round's servers ran back to
/// back), and failures the total.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut s = String::new();
    let names = names(outcomes);
    // Outcomes made by hand (round 0) count as one round.
    let round = |o: &Outcome| o.round.max(1);
    let rounds = outcomes.iter().map(round).max().unwrap_or(1);
    let _ = write!(s, "| measure |");
    for n in &names {
        let _ = write!(s, " {n} |");
    }
    for n in names.iter().skip(1) {
        let _ = write!(s, " {}/{n} |", names[0]);
    }
    s.push('\n');
    s.push_str(&"|---".repeat(1 + names.len() + names.len().saturating_sub(1)));
    s.push_str("|\n");
    let opt = |v: Option<f64>| v.map_or(f64::NAN, |v| v);
    type Row<'a> = (&'a str, &'a dyn Fn(&Outcome) -> f64, usize);
    let rows: [Row; 12] = [
        ("connections registered", &|o| o.registered as f64, 0),
        ("failures", &|o| o.failed() as f64, 0),
        ("opened/s (TLS: full handshakes/s)", &|o| o.opened_per_s, 0),
        (
            "server CPU µs per open + REGISTER",
            &|o| opt(o.server_cpu_us_per_open),
            1,
        ),
        ("server memory held, MB", &|o| o.memory_held as f64 / 1e6, 1),
        (
            "server bytes per connection",
            &|o| opt(o.memory_per_connection),
            0,
        ),
        ("server threads", &|o| o.threads as f64, 0),
        (
            "server CPU µs per refresh",
            &|o| opt(o.server_cpu_us_per_refresh),
            1,
        ),
        ("refresh seconds", &|o| o.refresh_seconds, 1),
        (
            "of the server's: Redis memory held, MB",
            &|o| opt(o.redis_memory_held.map(|m| m as f64 / 1e6)),
            1,
        ),
        (
            "of the server's: Redis CPU µs per open",
            &|o| opt(o.redis_cpu_us_per_open),
            1,
        ),
        (
            "of the server's: Redis CPU µs per refresh",
            &|o| opt(o.redis_cpu_us_per_refresh),
            1,
        ),
    ];
    let of =
        |name: &str| -> Vec<&Outcome> { outcomes.iter().filter(|o| o.target == name).collect() };
    for (label, f, digits) in rows {
        // Rows no server has (Redis' share in a one-node run) are left out.
        if outcomes.iter().all(|o| f(o).is_nan()) {
            continue;
        }
        let _ = write!(s, "| {label} |");
        for n in &names {
            let values: Vec<f64> = of(n).into_iter().map(f).collect();
            if label == "failures" {
                let _ = write!(s, " {:.0} |", values.iter().sum::<f64>());
            } else {
                let _ = write!(s, " {} |", crate::stats::median_range(&values, digits));
            }
        }
        for n in names.iter().skip(1) {
            let ratios: Vec<f64> = (1..=rounds)
                .filter_map(|r| {
                    let a = of(names[0]).into_iter().find(|o| round(o) == r).map(f)?;
                    let b = of(n).into_iter().find(|o| round(o) == r).map(f)?;
                    (b != 0.0).then(|| a / b)
                })
                .collect();
            let _ = write!(s, " {} |", crate::stats::median_range(&ratios, 2));
        }
        s.push('\n');
    }
    s
}

/// The report page: the table and bars of memory, CPU and handshake rate.
pub fn html(plan: &Plan, outcomes: &[Outcome]) -> String {
    use crate::plot;
    let md = table(outcomes);
    let mut lines = md.lines();
    let head: Vec<&str> = lines
        .next()
        .unwrap_or("")
        .trim_matches('|')
        .split('|')
        .map(str::trim)
        .collect();
    let rows: Vec<Vec<String>> = lines
        .skip(1)
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect();
    // Over several rounds, each server's bar is the median.
    let bar = |title: &str, unit: &str, f: &dyn Fn(&Outcome) -> Option<f64>| {
        let series: Vec<(&str, Vec<f64>)> = names(outcomes)
            .into_iter()
            .map(|n| {
                let values: Vec<f64> = outcomes
                    .iter()
                    .filter(|o| o.target == n)
                    .filter_map(f)
                    .collect();
                (n, vec![crate::stats::median(&values)])
            })
            .collect();
        plot::bars(
            title,
            "transport",
            unit,
            &[plan.transport.via().to_owned()],
            &series,
        )
    };
    let sections = vec![
        ("Side by side".to_owned(), plot::table(&head, &rows)),
        (
            "Memory per held connection".to_owned(),
            bar("Server bytes per held connection", "bytes", &|o| {
                o.memory_per_connection
            }),
        ),
        (
            "CPU per refresh".to_owned(),
            bar("Server CPU µs per REGISTER refresh", "µs", &|o| {
                o.server_cpu_us_per_refresh
            }),
        ),
        (
            "Connections opened per second".to_owned(),
            bar(
                "Connections opened and registered per second",
                "per second",
                &|o| Some(o.opened_per_s),
            ),
        ),
    ];
    plot::page(
        &format!(
            "sipsec bench connections: {} {} connections from {} source addresses{}",
            plan.connections,
            plan.transport.via(),
            plan.sources,
            if plan.rounds > 1 {
                format!(", {} rounds (medians)", plan.rounds)
            } else {
                String::new()
            }
        ),
        &sections,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(target: &str, round: usize, refresh_us: f64, failed: u64) -> Outcome {
        let mut o = Outcome {
            target: target.into(),
            round,
            registered: 100,
            server_cpu_us_per_refresh: Some(refresh_us),
            ..Outcome::default()
        };
        if failed > 0 {
            o.refresh_failures.insert("timeout".into(), failed);
        }
        o
    }

    fn row<'a>(table: &'a str, label: &str) -> Vec<&'a str> {
        let line = table
            .lines()
            .find(|l| l.starts_with(&format!("| {label} |")))
            .unwrap_or_else(|| panic!("no row {label} in\n{table}"));
        line.trim_matches('|').split('|').map(str::trim).collect()
    }

    #[test]
    fn one_round_gives_plain_figures() {
        let t = table(&[
            outcome("sipsec", 1, 30.0, 0),
            outcome("kamailio", 1, 90.0, 2),
        ]);
        assert_eq!(
            row(&t, "server CPU µs per refresh"),
            ["server CPU µs per refresh", "30.0", "90.0", "0.33"]
        );
        assert_eq!(row(&t, "failures"), ["failures", "0", "2", "0.00"]);
    }

    #[test]
    fn rounds_give_medians_ranges_and_the_median_of_each_rounds_ratio() {
        // Round 2 ran in reverse order on a slow moment: both servers
        // slower, the ratio of that round like the others'.
        let outcomes = [
            outcome("sipsec", 1, 30.0, 0),
            outcome("kamailio", 1, 90.0, 1),
            outcome("kamailio", 2, 150.0, 0),
            outcome("sipsec", 2, 60.0, 0),
            outcome("sipsec", 3, 36.0, 0),
            outcome("kamailio", 3, 100.0, 2),
        ];
        let t = table(&outcomes);
        assert!(t.starts_with("| measure | sipsec | kamailio | sipsec/kamailio |"));
        assert_eq!(
            row(&t, "server CPU µs per refresh"),
            [
                "server CPU µs per refresh",
                "36.0 (30.0–60.0)",
                "100.0 (90.0–150.0)",
                // 0.33, 0.40, 0.36: not 36/100 from the medians alone.
                "0.36 (0.33–0.40)"
            ]
        );
        assert_eq!(row(&t, "failures")[1..3], ["0", "3"]);
        // A figure every round agrees on has no range.
        assert_eq!(row(&t, "connections registered")[1], "100");
    }
}
