//! UDP past the kernel's stack, measured: the same null responder (a 200
//! to every request, as `bench null` answers) over two receive paths —
//! `recvmmsg`/`sendmmsg` batches on a UDP socket, and an AF_XDP socket
//! (`sip_udp::xdp`) — on one end of a veth pair whose other end the load
//! generator sends from. The pair and the network namespace holding the
//! responder's end are made for the run and removed after it (`ip
//! netns`, `ip link`), so the load never leaves this machine.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use sip_core::writer::{write_response, ResponseOptions};
use sip_core::{Message, Method, StatusCode};
use sip_udp::xdp::{frame, Steering, XdpSocket};

use crate::error::Error;
use crate::stats::{median, median_range, round_order};

/// How the responder receives and sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    /// A UDP socket: `recvmmsg` and `sendmmsg`, up to 32 a call.
    Socket,
    /// An AF_XDP socket on the veth's receive queue.
    Xdp,
}

impl Path {
    /// Its name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Path::Socket => "recvmmsg/sendmmsg",
            Path::Xdp => "AF_XDP",
        }
    }
}

/// A veth pair: one end here, the other in a network namespace of its
/// own, with a /30 between them. Dropping it deletes both.
#[derive(Debug)]
pub struct Veth {
    ns: String,
    /// The end in this namespace (the generator's side).
    pub outer: String,
    /// The end in the namespace (the responder's side).
    pub inner: String,
    /// The responder's address.
    pub inner_ip: Ipv4Addr,
}

fn ip(args: &[&str]) -> Result<(), Error> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| Error::Input(format!("ip {}: {e} (iproute2 is needed)", args.join(" "))))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Input(format!(
            "ip {}: {} (making namespaces needs root or CAP_NET_ADMIN)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl Veth {
    /// Makes the namespace, the pair and their addresses.
    pub fn create() -> Result<Self, Error> {
        // Unique per pair in this process (tests make several at once) and,
        // by the process id, across processes.
        static PAIRS: AtomicU64 = AtomicU64::new(0);
        let id = u64::from(std::process::id()) * 16 + PAIRS.fetch_add(1, Ordering::Relaxed) % 16;
        let ns = format!("sipsec-xdp-{id}");
        let (outer, inner) = (
            format!("sxo{}", id % 1_000_000_000),
            format!("sxi{}", id % 1_000_000_000),
        );
        let net = [10, 201, (id / 64 % 256) as u8, (id % 64 * 4) as u8];
        let outer_ip = Ipv4Addr::new(net[0], net[1], net[2], net[3] + 1);
        let inner_ip = Ipv4Addr::new(net[0], net[1], net[2], net[3] + 2);
        ip(&["netns", "add", &ns])?;
        let veth = Self {
            ns,
            outer,
            inner,
            inner_ip,
        };
        let ns = veth.ns.as_str();
        let (o, i) = (veth.outer.as_str(), veth.inner.as_str());
        ip(&[
            "link", "add", o, "type", "veth", "peer", "name", i, "netns", ns,
        ])?;
        ip(&["addr", "add", &format!("{outer_ip}/30"), "dev", o])?;
        ip(&["link", "set", o, "up"])?;
        let inner_addr = format!("{inner_ip}/30");
        ip(&["-n", ns, "addr", "add", &inner_addr, "dev", i])?;
        ip(&["-n", ns, "link", "set", i, "up"])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        Ok(veth)
    }

    /// Whether an XDP program is attached to the inner end.
    pub fn has_xdp(&self) -> bool {
        Command::new("ip")
            .args(["-n", &self.ns, "link", "show", "dev", &self.inner])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("prog/xdp"))
    }

    /// The namespace's path, for `setns(2)`.
    pub fn namespace(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.ns)
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end, and with it the pair.
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

/// The answer of a null responder to `req` in `out`: 200 to every request
/// but ACK (none); false when there is none to send.
pub fn null_answer(req: &[u8], tag: &str, out: &mut Vec<u8>) -> bool {
    let Ok(req) = Message::parse(req) else {
        return false;
    };
    if !req.is_request() || req.method() == Method::Ack {
        return false;
    }
    out.clear();
    let options = ResponseOptions {
        to_tag: Some(tag),
        ..Default::default()
    };
    write_response(out, &req, StatusCode::OK, &options);
    true
}

/// A null responder on the veth's inner end, one thread.
#[derive(Debug)]
pub struct NullServer {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    thread: Option<JoinHandle<u64>>,
    tid: u32,
    /// Where it answers.
    pub addr: SocketAddr,
}

const THREAD: &str = "null-path";

impl NullServer {
    /// Starts it on `port` of `veth`'s inner end, on `core` when given,
    /// and returns once it answers an OPTIONS sent from here.
    pub fn start(veth: &Veth, path: Path, port: u16, core: Option<usize>) -> Result<Self, Error> {
        let addr = SocketAddr::V4(SocketAddrV4::new(veth.inner_ip, port));
        let (ns, inner, inner_ip) = (veth.namespace(), veth.inner.clone(), veth.inner_ip);
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let (ready, started) = mpsc::channel();
        let (stop2, answered2) = (stop.clone(), answered.clone());
        let thread = std::thread::Builder::new()
            .name(THREAD.into())
            .spawn(move || {
                let setup = || -> std::io::Result<Serving> {
                    sip_udp::enter_network_namespace(&ns)?;
                    if let Some(c) = core {
                        sip_udp::pin_to_core(c)?;
                    }
                    Ok(match path {
                        Path::Socket => {
                            let sock = UdpSocket::bind(addr)?;
                            // The receive buffer `bench null` and the
                            // server ask for: a burst the AF_XDP path's
                            // ring holds is not dropped here instead.
                            let _ = socket2::SockRef::from(&sock).set_recv_buffer_size(4 << 20);
                            Serving::Socket(sock)
                        }
                        Path::Xdp => {
                            let steering = Steering::attach(&inner, port, &[inner_ip])?;
                            let xsk = XdpSocket::open(&steering, 0)?;
                            Serving::Xdp(Box::new((steering, xsk)))
                        }
                    })
                };
                match setup() {
                    Ok(s) => {
                        let _ = ready.send(Ok(()));
                        s.run(&stop2, &answered2)
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        0
                    }
                }
            })
            .map_err(Error::io("starting the responder"))?;
        let opened = started
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| Error::Input(format!("{}: the responder did not start", path.as_str())))?;
        opened.map_err(|e| Error::Input(format!("{} on {addr}: {e}", path.as_str())))?;
        let tid = crate::cpu::threads(&[std::process::id()])
            .into_iter()
            .find(|t| t.name == THREAD)
            .map_or(0, |t| t.tid);
        let server = Self {
            stop,
            answered,
            thread: Some(thread),
            tid,
            addr,
        };
        crate::compare::wait_answering(server.addr, None, Duration::from_secs(5))?;
        Ok(server)
    }

    /// Requests answered so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Its thread's CPU so far, seconds.
    pub fn cpu_seconds(&self) -> f64 {
        crate::cpu::threads(&[std::process::id()])
            .into_iter()
            .find(|t| t.tid == self.tid)
            .map_or(0.0, |t| t.seconds)
    }

    /// Stops it: the requests it answered, and the frames the kernel
    /// dropped on the way to it (AF_XDP only).
    pub fn stop(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let dropped = self.thread.take().map_or(0, |t| t.join().unwrap_or(0));
        (self.answered(), dropped)
    }
}

impl Drop for NullServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

enum Serving {
    Socket(UdpSocket),
    Xdp(Box<(Steering, XdpSocket)>),
}

const TAG: &str = "null";

impl Serving {
    /// Answers until `stop`; returns the frames dropped before reaching it.
    fn run(self, stop: &AtomicBool, answered: &AtomicU64) -> u64 {
        let wait = Duration::from_millis(50);
        match self {
            Serving::Socket(sock) => {
                let _ = sock.set_read_timeout(Some(wait));
                let mut batch = sip_udp::RecvBatch::new();
                let mut send = sip_udp::SendBatch::default();
                while !stop.load(Ordering::Relaxed) {
                    let Ok(n) = batch.recv(&sock) else { continue };
                    for i in 0..n {
                        let Some((req, src)) = batch.get(i) else {
                            break;
                        };
                        if null_answer(req, TAG, send.next_buf()) {
                            send.commit(src);
                        }
                    }
                    answered.fetch_add(send.len() as u64, Ordering::Relaxed);
                    send.flush(&sock);
                }
                0
            }
            Serving::Xdp(both) => {
                let (_steering, mut xsk) = *both;
                // This turn's answers: their endpoints and where their
                // bytes lie in `bytes`.
                let mut answers: Vec<(frame::Endpoints, std::ops::Range<usize>)> = Vec::new();
                let (mut bytes, mut out) = (Vec::new(), Vec::new());
                let mut id = 0u16;
                while !stop.load(Ordering::Relaxed) {
                    if !xsk.wait(wait) {
                        continue;
                    }
                    answers.clear();
                    bytes.clear();
                    xsk.receive(64, |rx| {
                        if let Some((ends, payload)) = frame::parse(rx) {
                            if null_answer(payload, TAG, &mut out) {
                                answers
                                    .push((ends.reversed(), bytes.len()..bytes.len() + out.len()));
                                bytes.extend_from_slice(&out);
                            }
                        }
                    });
                    for (ends, at) in &answers {
                        let body = &bytes[at.clone()];
                        id = id.wrapping_add(1);
                        xsk.transmit(|tx| {
                            let fits = body.len() <= tx.len() - frame::HEADERS
                                && frame::write_headers(tx, ends, body.len(), id);
                            if !fits {
                                return 0;
                            }
                            tx[frame::HEADERS..frame::HEADERS + body.len()].copy_from_slice(body);
                            frame::HEADERS + body.len()
                        });
                    }
                    xsk.flush();
                    answered.fetch_add(answers.len() as u64, Ordering::Relaxed);
                }
                xsk.drops().map_or(0, |d| d.rx)
            }
        }
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Offered REGISTERs per second, each measured on both paths.
    pub rates: Vec<f64>,
    /// How long each rate is offered.
    pub duration: Duration,
    /// Rounds; the paths' order alternates from one to the next.
    pub rounds: usize,
    /// Responder on core 0, generator on core 1.
    pub pin: bool,
    /// Generator sockets (local ports).
    pub flows: usize,
    /// What answers, each on both paths in every round.
    pub targets: Vec<Target>,
}

/// What answers the load on each path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The null responder, in this process.
    Null,
    /// `sipsec serve --mode registrar --workers 1` from this executable,
    /// in the namespace, with `--udp-xdp` on the AF_XDP path.
    Sipsec(PathBuf),
}

impl Target {
    /// Its name in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Target::Null => "null",
            Target::Sipsec(_) => "sipsec",
        }
    }
}

/// One path at one rate in one round.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// The round, from 1.
    pub round: usize,
    /// What answered ([`Target::name`]).
    pub server: &'static str,
    /// The path.
    pub path: Path,
    /// Offered REGISTERs per second.
    pub rate: f64,
    /// REGISTERs answered with 200 per second, as the generator saw them.
    pub ok_per_s: f64,
    /// REGISTERs that failed (no answer in time).
    pub failed: u64,
    /// REGISTERs answered with 200.
    pub answered: u64,
    /// The responder's CPU (its thread's; the server process's) per
    /// REGISTER answered, µs.
    pub thread_us: f64,
    /// Its core's busy time per REGISTER answered, µs (softirq work
    /// included; with `pin` only).
    pub core_us: Option<f64>,
    /// Frames the kernel dropped before the AF_XDP socket.
    pub dropped: u64,
    /// The commonest reason calls failed, with its count.
    pub why: Option<(String, u64)>,
}

/// Busy ticks (user, nice, system, irq, softirq) of CPU `core` so far,
/// from `/proc/stat`, in seconds.
fn core_busy(core: usize) -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&format!("cpu{core}")))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let busy = [0, 1, 2, 5, 6]
        .iter()
        .filter_map(|i| v.get(*i))
        .sum::<u64>();
    Some(busy as f64 / 100.0)
}

fn run_for(plan: &Plan, target: SocketAddr, rate: f64) -> Result<crate::engine::Run, Error> {
    Ok(crate::engine::Run {
        target,
        also: Vec::new(),
        scenario: crate::scenario::built_in("register", false)?,
        shape: crate::engine::Shape::Rate(rate),
        calls: (rate * plan.duration.as_secs_f64()).ceil() as u64,
        duration: plan.duration,
        drain: Duration::from_secs(2),
        threads: 1,
        flows: plan.flows.max(1),
        local_port: 0,
        users: crate::generated_users(1000),
        transport: crate::link::Transport::Udp,
        tls: None,
        connection_per_call: false,
        busy_poll: false,
        share_flows: false,
        one_shared_socket: false,
        ids: None,
    })
}

/// A `sipsec serve` in the namespace.
struct Served {
    child: std::process::Child,
    data: PathBuf,
    addr: SocketAddr,
    /// Its operator endpoint, on the namespace's address, and the token
    /// it asks for there (beyond loopback it requires one): its counts of
    /// frames the kernel dropped are read there.
    http: (SocketAddr, String),
}

/// A token for the server's operator endpoint: 16 bytes of the kernel's
/// randomness, in hex.
fn token() -> Result<String, Error> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(Error::io("/dev/urandom"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The port of the server's operator endpoint in the namespace.
const HTTP_PORT: u16 = 8060;

impl Served {
    /// Frames the kernel dropped before its AF_XDP socket took them, as
    /// its `/metrics` counts them. A worker reads the kernel's count at
    /// most once a second, and wakes at least once a second when idle,
    /// so the cell's two seconds of drain bring its last drops in.
    fn dropped(&self) -> Result<u64, Error> {
        let name = "sipsec_udp_xdp_dropped_total";
        let (addr, token) = &self.http;
        let text = crate::compare::operator_get(*addr, "/metrics", Some(token))?;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .ok_or_else(|| Error::Input(format!("no {name} in the server's /metrics")))
    }
}

impl Served {
    fn start(
        veth: &Veth,
        exe: &std::path::Path,
        path: Path,
        core: Option<usize>,
    ) -> Result<Self, Error> {
        let addr = SocketAddr::V4(SocketAddrV4::new(veth.inner_ip, 5060));
        let http = (
            SocketAddr::V4(SocketAddrV4::new(veth.inner_ip, HTTP_PORT)),
            token()?,
        );
        let data = std::env::temp_dir().join(format!("{}-serve-{}", veth.ns, path.as_str().len()));
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data).map_err(Error::io(data.display()))?;
        // One generator address sends it all: no per-source rate limit.
        let config = data.join("bench.toml");
        std::fs::write(&config, "[guard]\nrate = 0\n").map_err(Error::io(config.display()))?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &veth.ns]);
        if let Some(c) = core {
            cmd.args(["taskset", "-c", &c.to_string()]);
        }
        cmd.arg(exe)
            .args(["serve", "--mode", "registrar", "--no-tcp", "--workers", "1"])
            .args(["--http", &http.0.to_string()])
            .env("SIPSEC_HTTP_TOKEN", &http.1)
            .args(["--insecure-no-auth", "--udp", &addr.to_string()])
            .arg("--data-dir")
            .arg(&data)
            .arg("--config")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if path == Path::Xdp {
            cmd.args(["--udp-xdp", &veth.inner]);
        }
        let child = cmd.spawn().map_err(Error::io("starting sipsec serve"))?;
        let mut served = Self {
            child,
            data,
            addr,
            http,
        };
        let within = Duration::from_secs(15);
        crate::compare::wait_answering(addr, Some(&mut served.child), within)?;
        if path == Path::Xdp && !veth.has_xdp() {
            return Err(Error::Input(format!(
                "sipsec serve --udp-xdp {}: no XDP program on the interface (see the server's log)",
                veth.inner
            )));
        }
        Ok(served)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

/// The responder of one cell.
enum Answering {
    Null(NullServer),
    Sipsec(Served),
}

impl Answering {
    fn addr(&self) -> SocketAddr {
        match self {
            Answering::Null(n) => n.addr,
            Answering::Sipsec(s) => s.addr,
        }
    }
    fn cpu_seconds(&self) -> f64 {
        match self {
            Answering::Null(n) => n.cpu_seconds(),
            Answering::Sipsec(s) => crate::cpu::cpu_seconds(&[s.child.id()]),
        }
    }
    /// Stops it: the frames the kernel dropped on the way (AF_XDP).
    fn stop(self) -> Result<u64, Error> {
        match self {
            Answering::Null(n) => Ok(n.stop().1),
            Answering::Sipsec(s) => s.dropped(),
        }
    }
}

/// One path at one rate: a fresh responder, the load, its CPU.
fn cell(
    plan: &Plan,
    veth: &Veth,
    (target, path): (&Target, Path),
    rate: f64,
    round: usize,
) -> Result<Cell, Error> {
    let core = plan.pin.then_some(0);
    let server = match target {
        Target::Null => Answering::Null(NullServer::start(veth, path, 5060, core)?),
        Target::Sipsec(exe) => Answering::Sipsec(Served::start(veth, exe, path, core)?),
    };
    let run = run_for(plan, server.addr(), rate)?;
    let (cpu0, core0) = (server.cpu_seconds(), core_busy(0));
    let outcome = std::thread::scope(|s| {
        s.spawn(|| {
            if plan.pin {
                sip_udp::pin_to_core(1)?;
            }
            crate::engine::execute(
                &run,
                &crate::engine::Live::default(),
                &AtomicBool::new(false),
            )
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the generator panicked")))
    })
    .map_err(Error::io("generating the load"))?;
    let (cpu1, core1) = (server.cpu_seconds(), core_busy(0));
    let dropped = server.stop()?;
    let per = |s: f64| s * 1e6 / outcome.ok.max(1) as f64;
    Ok(Cell {
        round,
        server: target.name(),
        path,
        rate,
        ok_per_s: outcome.ok as f64 / outcome.elapsed.as_secs_f64().max(1e-9),
        failed: outcome.failed(),
        answered: outcome.ok,
        thread_us: per(cpu1 - cpu0),
        core_us: match (plan.pin, core0, core1) {
            (true, Some(a), Some(b)) => Some(per(b - a)),
            _ => None,
        },
        dropped,
        why: outcome
            .failures
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(k, n)| (k.clone(), *n)),
    })
}

/// Runs the plan on a veth pair made for it, handing each cell to `each`
/// as it is measured.
pub fn measure(plan: &Plan, mut each: impl FnMut(&Cell)) -> Result<Vec<Cell>, Error> {
    let veth = Veth::create()?;
    let mut cells = Vec::new();
    let each_way: Vec<(&Target, Path)> = plan
        .targets
        .iter()
        .flat_map(|t| [(t, Path::Socket), (t, Path::Xdp)])
        .collect();
    for round in 1..=plan.rounds.max(1) {
        for &rate in &plan.rates {
            for &way in round_order(&each_way, round) {
                let c = cell(plan, &veth, way, rate, round)?;
                each(&c);
                cells.push(c);
            }
        }
    }
    Ok(cells)
}

/// The medians of one server's cells on one path at one rate: answered/s,
/// failures (summed), CPU per REGISTER in the responder and on its core.
struct Summary {
    row: String,
    ok: f64,
    thread: Option<f64>,
    core: Option<f64>,
}

fn summary(cells: &[&Cell]) -> Summary {
    let range = |v: &[f64]| median_range(v, 2);
    let t: Vec<f64> = cells.iter().map(|c| c.thread_us).collect();
    let k: Vec<f64> = cells.iter().filter_map(|c| c.core_us).collect();
    let ok = median(&cells.iter().map(|c| c.ok_per_s).collect::<Vec<_>>());
    let failed: u64 = cells.iter().map(|c| c.failed).sum();
    Summary {
        row: format!("{ok:.0} | {failed} | {} | {}", range(&t), range(&k)),
        ok,
        thread: Some(median(&t)).filter(|m| !m.is_nan()),
        core: Some(median(&k)).filter(|m| !m.is_nan()),
    }
}

/// `a / b` as a ratio, `–` where either is missing.
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".into(),
    }
}

/// The summary: per rate, server and path the medians (and ranges) of
/// the rounds; each server's socket path's cost over its AF_XDP path's;
/// and, when both ran, sipsec over AF_XDP against the null responder over
/// sockets — the floor a server past the kernel is held to.
pub fn table(cells: &[Cell]) -> String {
    let mut rates: Vec<f64> = cells.iter().map(|c| c.rate).collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    let mut servers: Vec<&'static str> = cells.iter().map(|c| c.server).collect();
    servers.sort_unstable();
    servers.dedup();
    let mut out = String::from(
        "| offered/s | server | path | answered/s | failed | µs per REGISTER, the responder | µs per REGISTER, its core |\n|---|---|---|---|---|---|---|\n",
    );
    let mut ratios = String::new();
    for rate in rates {
        let mut of_rate = std::collections::HashMap::new();
        for &server in &servers {
            for path in [Path::Socket, Path::Xdp] {
                let of: Vec<&Cell> = cells
                    .iter()
                    .filter(|c| c.rate == rate && c.server == server && c.path == path)
                    .collect();
                if of.is_empty() {
                    continue;
                }
                let s = summary(&of);
                out.push_str(&format!(
                    "| {rate:.0} | {server} | {} | {} |\n",
                    path.as_str(),
                    s.row
                ));
                of_rate.insert((server, path), s);
            }
            let (Some(sock), Some(xdp)) = (
                of_rate.get(&(server, Path::Socket)),
                of_rate.get(&(server, Path::Xdp)),
            ) else {
                continue;
            };
            ratios.push_str(&format!(
                "at {rate:.0}/s {server}'s socket path costs {} AF_XDP's per REGISTER in the responder, {} on its core\n",
                ratio(sock.thread, xdp.thread),
                ratio(sock.core, xdp.core)
            ));
        }
        if let (Some(null), Some(server)) = (
            of_rate.get(&("null", Path::Socket)),
            of_rate.get(&("sipsec", Path::Xdp)),
        ) {
            ratios.push_str(&format!(
                "at {rate:.0}/s sipsec over AF_XDP against the null responder over sockets: {} its efficiency in the responder (null's CPU per REGISTER / sipsec's), {} on its core; {} its answered/s\n",
                ratio(null.thread, server.thread),
                ratio(null.core, server.core),
                ratio(Some(server.ok), Some(null.ok)),
            ));
        }
    }
    out + "\n" + &ratios
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(path: Path, round: usize, thread_us: f64) -> Cell {
        Cell {
            round,
            server: "null",
            path,
            rate: 1000.0,
            ok_per_s: 1000.0,
            failed: 0,
            answered: 1000,
            thread_us,
            core_us: Some(thread_us * 1.5),
            dropped: 0,
            why: None,
        }
    }

    #[test]
    fn the_table_gives_medians_and_the_ratio() {
        let cells = [
            c(Path::Socket, 1, 4.0),
            c(Path::Xdp, 1, 2.0),
            c(Path::Socket, 2, 6.0),
            c(Path::Xdp, 2, 3.0),
            c(Path::Socket, 3, 5.0),
            c(Path::Xdp, 3, 2.5),
        ];
        let t = table(&cells);
        assert!(
            t.contains(
                "| 1000 | null | recvmmsg/sendmmsg | 1000 | 0 | 5.00 (4.00–6.00) | 7.50 (6.00–9.00) |"
            ),
            "{t}"
        );
        assert!(
            t.contains("| 1000 | null | AF_XDP | 1000 | 0 | 2.50 (2.00–3.00) |"),
            "{t}"
        );
        assert!(
            t.contains(
                "null's socket path costs 2.00× AF_XDP's per REGISTER in the responder, 2.00× on its core"
            ),
            "{t}"
        );
        assert!(!t.contains("sipsec over AF_XDP"), "{t}");
    }

    #[test]
    fn sipsec_past_the_kernel_is_set_against_the_null_responder_on_sockets() {
        let sipsec = |path, round, thread_us, ok_per_s| Cell {
            server: "sipsec",
            ok_per_s,
            ..c(path, round, thread_us)
        };
        let cells = [
            c(Path::Socket, 1, 3.0),
            c(Path::Xdp, 1, 2.0),
            sipsec(Path::Socket, 1, 4.0, 900.0),
            sipsec(Path::Xdp, 1, 2.5, 950.0),
        ];
        let t = table(&cells);
        assert!(
            t.contains("| 1000 | sipsec | AF_XDP | 950 | 0 | 2.50 | 3.75 |"),
            "{t}"
        );
        assert!(
            t.contains("sipsec's socket path costs 1.60× AF_XDP's"),
            "{t}"
        );
        assert!(
            t.contains(
                "sipsec over AF_XDP against the null responder over sockets: 1.20× its efficiency in the responder (null's CPU per REGISTER / sipsec's), 1.20× on its core; 0.95× its answered/s"
            ),
            "{t}"
        );
    }

    #[test]
    fn null_answers_requests_but_not_acks_or_responses() {
        let mut out = Vec::new();
        let req = b"OPTIONS sip:a SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK1\r\nFrom: <sip:b@c>;tag=1\r\nTo: <sip:a>\r\nCall-ID: x\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n";
        assert!(null_answer(req, "t", &mut out));
        assert!(out.starts_with(b"SIP/2.0 200 OK\r\n"));
        let ack = String::from_utf8_lossy(req).replace("OPTIONS", "ACK");
        assert!(!null_answer(ack.as_bytes(), "t", &mut out));
        assert!(!null_answer(&out.clone(), "t", &mut out), "a response");
        assert!(!null_answer(b"\x00garbage", "t", &mut out));
    }
}
