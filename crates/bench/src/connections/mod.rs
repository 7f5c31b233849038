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
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::compare::Target;
use crate::cpu;
use crate::error::Error;

mod deploy;
mod phone;
mod report;

use deploy::*;
use phone::*;
pub use report::{html, table};

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
    /// Refreshes of every phone, at the same rate, before the measured
    /// one: phones that keep refreshing, as they do in service, meet a
    /// server whose tables have stopped growing (a table's growth moves
    /// its entries) and whose caches they have warmed.
    pub warm_refreshes: usize,
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
    /// What the phones offer for TLS key exchange, each offer measured in
    /// turn against every server (a list of group names; empty: the
    /// default offer, X25519MLKEM768 first). With more than one offer,
    /// each row is named by the server and the offer.
    pub offers: Vec<Vec<String>>,
    /// The offer being measured (set by [`measure`] for each).
    pub offer: Vec<String>,
    /// The phones of a process share a session cache and resume TLS
    /// sessions from the tickets the server sent earlier connections
    /// (RFC 8446 §2.2); [`Outcome::resumed`] counts the handshakes that did.
    pub resume: bool,
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
    /// Of the TLS handshakes, those that resumed a session (with
    /// [`Plan::resume`]).
    pub resumed: usize,
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
    /// Of it, in the server's own code (user space), by the share of
    /// timer ticks the kernel charged to user time; `None` when too few
    /// ticks fell in the phase to say.
    pub server_user_us_per_refresh: Option<f64>,
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

/// Ticks (10 ms) of server CPU a phase must span before its user/kernel
/// split is given. The kernel samples the side at each of its own timer
/// ticks (250 a second here), so 10 ticks are some 25 samples: the split
/// to within about ±15 %, a tenth of a second of CPU (5,000 refreshes at
/// 20 µs each).
const MIN_TICKS: u64 = 10;

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
            for offer in offers(plan) {
                if !offer_fits(target, &offer) {
                    progress(&format!(
                        "{}: skipped with the offer {} (no post-quantum key exchange in its OpenSSL)",
                        target.name(),
                        offer.join("+")
                    ));
                    continue;
                }
                let p = Plan {
                    offer: offer.clone(),
                    ..plan.clone()
                };
                let mut outcome = measure_one(&p, target, processes, &mut progress)?;
                outcome.round = round;
                if plan.offers.len() > 1 {
                    outcome.target = format!("{} {}", outcome.target, offer.join("+"));
                }
                outcomes.push(outcome);
            }
        }
    }
    Ok(outcomes)
}

/// The offers to measure (the default one when none are given).
fn offers(plan: &Plan) -> Vec<Vec<String>> {
    if plan.offers.is_empty() {
        vec![Vec::new()]
    } else {
        plan.offers.clone()
    }
}

/// Whether `target` can take `offer`: Kamailio (OpenSSL 3.0) has no
/// ML-KEM group, so an offer of post-quantum groups only is not for it.
fn offer_fits(target: &Target, offer: &[String]) -> bool {
    let pq_only = !offer.is_empty()
        && sip_tls::Groups::parse(offer)
            .is_ok_and(|g| g.post_quantum_only().names().len() == offer.len());
    !(pq_only && matches!(target, Target::Kamailio { .. }))
}

/// The phones' TLS client configuration for `offer`: without `resume`,
/// every connection a full handshake; with it, a session cache of its own
/// shared by the process's phones.
fn phones_tls(
    ca: &std::path::Path,
    offer: &[String],
    resume: bool,
) -> Result<std::sync::Arc<rustls::ClientConfig>, Error> {
    let groups = if offer.is_empty() {
        sip_tls::Groups::default()
    } else {
        sip_tls::Groups::parse(offer).map_err(Error::Input)?
    };
    let config =
        crate::link::client_config_with(ca, false, &groups).map_err(Error::io("client TLS"))?;
    if resume {
        let mut own = (*config).clone();
        own.resumption = rustls::client::Resumption::in_memory_sessions(4096);
        return Ok(std::sync::Arc::new(own));
    }
    Ok(crate::link::without_resumption(&config))
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
    out.resumed = opened.resumed;
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
    let mut failures = BTreeMap::new();
    for pass in 1..=plan.warm_refreshes {
        let warm = phones.refresh(plan.refresh_rate)?;
        progress(&format!(
            "{}: warm refresh {pass} of {}: {} refreshed{}",
            out.target,
            plan.warm_refreshes,
            warm.ok,
            causes(&warm.failures)
        ));
        for (cause, n) in warm.failures {
            *failures
                .entry(format!("{cause} (warm refresh)"))
                .or_insert(0) += n;
        }
    }
    // Refresh: every open phone once, paced at the refresh rate.
    let cpu0 = cpu::cpu_seconds(&pids);
    let ticks0 = cpu::user_system_ticks(&pids);
    let store0 = redis_cpu();
    let t0 = Instant::now();
    let refreshed = phones.refresh(plan.refresh_rate)?;
    out.refresh_seconds = t0.elapsed().as_secs_f64();
    alive(plan, target, deployment)?;
    let cpu1 = cpu::cpu_seconds(&pids);
    let user = cpu::user_share(ticks0, cpu::user_system_ticks(&pids), MIN_TICKS);
    out.redis_cpu_us_per_refresh = per(store0, redis_cpu(), refreshed.ok);
    out.refreshed = refreshed.ok;
    for (cause, n) in refreshed.failures {
        *failures.entry(cause).or_insert(0) += n;
    }
    out.refresh_failures = failures;
    if out.refreshed > 0 {
        out.server_cpu_us_per_refresh = Some((cpu1 - cpu0) * 1e6 / out.refreshed as f64);
        out.server_user_us_per_refresh =
            user.zip(out.server_cpu_us_per_refresh).map(|(u, c)| u * c);
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
    /// The key-exchange groups they offer (empty: the default offer).
    #[serde(default)]
    offer: Vec<String>,
    /// The phones resume TLS sessions.
    #[serde(default)]
    resume: bool,
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
            Some(phones_tls(&plan.ca, &plan.offer, plan.resume)?)
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
                        offer: plan.offer.clone(),
                        resume: plan.resume,
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
        Some(phones_tls(&spec.ca, &spec.offer, spec.resume)?)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_server_runs_from_its_own_copy_of_its_executable() {
        let dir = std::env::temp_dir().join(format!("sipsec-private-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let exe = dir.join("built");
        std::fs::write(&exe, b"#!/bin/sh\n").expect("exe");
        for _ in 0..2 {
            let copy = deploy::private_copy(&dir, &Target::Null { exe: exe.clone() });
            let Ok(Target::Null { exe: copy }) = copy else {
                panic!("a null responder: {copy:?}");
            };
            assert_eq!(copy, dir.join("null.exe"));
            assert_eq!(std::fs::read(&copy).expect("copied"), b"#!/bin/sh\n");
        }
        let b = Target::Sipsec {
            exe: exe.clone(),
            label: "sipsec@old".into(),
        };
        match deploy::private_copy(&dir, &b).expect("copied") {
            Target::Sipsec { exe: copy, label } => {
                assert_eq!(
                    (copy, label.as_str()),
                    (dir.join("sipsec@old.exe"), "sipsec@old")
                );
            }
            other => panic!("{other:?}"),
        }
        let k = Target::Kamailio {
            cfg: "k.cfg".into(),
        };
        assert!(matches!(
            deploy::private_copy(&dir, &k),
            Ok(Target::Kamailio { cfg }) if cfg == std::path::Path::new("k.cfg")
        ));
        let gone = Target::Null {
            exe: dir.join("missing"),
        };
        assert!(deploy::private_copy(&dir, &gone).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

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
