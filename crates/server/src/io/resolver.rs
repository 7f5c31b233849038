//! Next hops named by domain names, resolved off the hot path (RFC 3263
//! §4 without NAPTR: the transport comes from the URI).
//!
//! The cores read the core's [`NameTable`], which answers from memory:
//! the hosts file, or what an earlier resolution left there. A name not
//! known yet is queued there and the request waiting on it parked there;
//! the core's output asks for this thread to be woken. The thread takes
//! the queued names, resolves them, [finishes](NameTable::finish) each,
//! and hands the requests that waited to its own core again, which now
//! finds the answer and forwards them (or answers 503).
//!
//! The thread asks SRV first when the URI gives no port (`_sip._udp`,
//! `_sip._tcp`, `_sips._tcp`), then A, then AAAA, of the name servers in
//! `/etc/resolv.conf` (or `[dns] servers`). Every query goes from a fresh
//! socket on a random port with a random ID, connected to the server, and
//! only an answer to the very question asked is read, so an off-path
//! attacker has to guess 32 bits to poison the cache. An answer cut
//! short (TC) is asked again over TCP. Every SRV target is resolved, so
//! a stateful proxy has the next address at hand when one fails (RFC 3263
//! §4.3); a failed address is skipped for a while. Everything is
//! bounded: names being resolved, requests parked (in count and bytes),
//! the cache; a request that finds no room is answered 503 with
//! Retry-After.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token, Waker};

use crate::config::DnsSettings;
use crate::io::send::Sender;
use crate::proto::core::{Core, Transport};
use crate::proto::names::{default_port, Key, NameTable};
use crate::proto::parked::Parked;
use sip_core::dns::{self, Kind, Record};

/// SRV targets resolved for one name, and addresses kept for it: the
/// ones tried in turn when one fails (RFC 3263 §4.3).
const MAX_TARGETS: usize = 8;
const MAX_ADDRESSES: usize = 8;
/// How long a name no server answered for is remembered as unreachable.
const UNANSWERED_TTL: u32 = 5;
/// Name servers taken from `/etc/resolv.conf`, as the C library does.
const MAX_SERVERS: usize = 3;
const WAKER: Token = Token(0);
/// Datagrams that are not a question's answer read from its socket per
/// turn; see `Worker::readable`.
const MAX_STRAYS: usize = 64;

/// The resolver the workers share; see the module documentation.
#[derive(Debug)]
pub struct Resolver {
    settings: DnsSettings,
    servers: Vec<SocketAddr>,
    names: Arc<NameTable>,
    waker: Arc<Waker>,
}

/// The SRV name RFC 3263 §4.2 asks for a transport (none for WebSocket).
fn service(name: &str, transport: Transport) -> Option<String> {
    let prefix = match transport {
        Transport::Udp => "_sip._udp.",
        Transport::Tcp => "_sip._tcp.",
        Transport::Tls => "_sips._tcp.",
        _ => return None,
    };
    Some(format!("{prefix}{name}"))
}

/// The name servers of `/etc/resolv.conf`-style text (port 53); the
/// local one when it names none, as the C library does.
pub fn servers_of_resolv_conf(text: &str) -> Vec<SocketAddr> {
    let mut servers: Vec<SocketAddr> = dns::nameservers(text).take(MAX_SERVERS).collect();
    if servers.is_empty() {
        servers.push(SocketAddr::from(([127, 0, 0, 1], 53)));
    }
    servers
}

/// Names and their first address in hosts-file text (`IP name alias…`,
/// `#` comments).
pub fn parse_hosts(text: &str) -> HashMap<String, IpAddr> {
    let mut hosts = HashMap::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let Some(ip) = words.next().and_then(|w| w.parse::<IpAddr>().ok()) else {
            continue;
        };
        for name in words {
            let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
            hosts.entry(name).or_insert(ip);
        }
    }
    hosts
}

/// The hosts file the settings name: a configured one that cannot be
/// read is an error; the default one may be missing.
pub fn read_hosts(settings: &DnsSettings) -> Result<HashMap<String, IpAddr>, String> {
    let Some(p) = &settings.hosts else {
        return Ok(HashMap::new());
    };
    match std::fs::read_to_string(p) {
        Ok(text) => Ok(parse_hosts(&text)),
        Err(e) if p == Path::new("/etc/hosts") && e.kind() == io::ErrorKind::NotFound => {
            Ok(HashMap::new())
        }
        Err(e) => Err(format!("hosts file {}: {e}", p.display())),
    }
}

fn random_u16() -> u16 {
    let mut b = [0u8; 2];
    // Without randomness the query is still sent; only its ID is
    // guessable (the source port stays random).
    let _ = getrandom::fill(&mut b);
    u16::from_le_bytes(b)
}

impl Resolver {
    /// Starts the resolver thread over the core's name table; `core` and
    /// `sender` hand parked requests in again and send what comes of
    /// them.
    pub fn start(
        settings: DnsSettings,
        core: Core,
        sender: Sender,
        stop: Arc<AtomicBool>,
    ) -> io::Result<(Arc<Self>, JoinHandle<()>)> {
        let servers = if settings.servers.is_empty() {
            servers_of_resolv_conf(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default())
        } else {
            settings.servers.clone()
        };
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let resolver = Arc::new(Self {
            settings,
            servers,
            names: core.shared().names.clone(),
            waker,
        });
        let r = resolver.clone();
        let thread = std::thread::Builder::new()
            .name("resolver".into())
            .spawn(move || {
                Worker {
                    plain: vec![false; r.servers.len()],
                    resolver: r,
                    poll,
                    jobs: Vec::new(),
                    core,
                    sender,
                    out: Vec::with_capacity(4096),
                    query: Vec::with_capacity(512),
                }
                .run(&stop)
            })?;
        Ok((resolver, thread))
    }

    /// Wakes the thread: to start on the names asked, or to see the stop.
    pub fn wake(&self) {
        let _ = self.waker.wake();
    }

    /// What wakes the thread, for the senders that carry out the cores'
    /// requests to resolve a name.
    pub fn waker(&self) -> Arc<Waker> {
        self.waker.clone()
    }
}

/// What a resolution is asking now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The SRV records of the destination.
    Srv,
    /// A (then AAAA) records, for this port.
    Host { port: u16, v6: bool },
}

/// One destination being resolved: the question in flight.
#[derive(Debug)]
struct Job {
    key: Key,
    stage: Stage,
    name: String,
    kind: Kind,
    sock: Option<mio::net::UdpSocket>,
    /// The server the question went to.
    server: SocketAddr,
    /// The question asked again over TCP, its UDP answer being cut short.
    tcp: Option<Tcp>,
    id: u16,
    /// Queries sent for this question.
    tries: u32,
    /// The query in flight carries an EDNS(0) OPT record.
    edns: bool,
    deadline: Instant,
    /// The smallest TTL met on the way.
    ttl: u32,
    /// SRV targets still to resolve, in order.
    targets: std::collections::VecDeque<dns::Srv>,
    /// Addresses the SRV answer gave for its targets.
    glue: Vec<(String, IpAddr)>,
    /// Addresses found so far, in the order to try them.
    found: Vec<SocketAddr>,
    /// The first addresses are in the cache already: a later target was
    /// slow to resolve.
    published: bool,
}

/// A question asked over TCP (RFC 1035 §4.2.2, RFC 7766) because the
/// UDP answer had TC set.
#[derive(Debug)]
struct Tcp {
    stream: mio::net::TcpStream,
    /// The framed query still to write.
    out: Vec<u8>,
    /// What arrived: a two-byte length, then the answer.
    answer: Vec<u8>,
    /// The truncated UDP answer, used if TCP fails.
    partial: dns::Answer,
}

impl Job {
    /// Writes the job's question into `out`: with the AD bit when only
    /// validated answers are taken, with EDNS(0) when `edns`.
    fn write_query(
        &self,
        dnssec: bool,
        edns: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), dns::DnsError> {
        dns::query(self.id, &self.name, self.kind, out)?;
        if dnssec {
            dns::ask_authenticated(out);
        }
        if edns {
            dns::add_edns(out, dns::EDNS_PAYLOAD);
        }
        Ok(())
    }

    /// Keeps `ip:port` as the next address to try (once, and up to
    /// [`MAX_ADDRESSES`]).
    fn add(&mut self, ip: IpAddr, port: u16) {
        let a = SocketAddr::new(ip, port);
        if self.found.len() < MAX_ADDRESSES && !self.found.contains(&a) {
            self.found.push(a);
        }
    }
}

/// What an answer or a timeout leads to.
enum Step {
    /// Wait on.
    Wait,
    /// Ask this.
    Ask(Stage, String, Kind),
    /// This question is over (answered, or given up on), with the TTL
    /// the destination gets should it lead nowhere: on to the next SRV
    /// target, if any, else the destination is resolved.
    Done(u32),
}

/// An answer `job`'s server did not mark validated, refused under
/// `require_dnssec`: logged and counted.
fn unvalidated(core: &Core, job: &Job) {
    crate::io::log::not_validated(&job.name, job.server);
    let m = &core.shared().metrics;
    m.dns_unvalidated.fetch_add(1, Ordering::Relaxed);
}

struct Worker {
    resolver: Arc<Resolver>,
    poll: Poll,
    /// Jobs by token − 1.
    jobs: Vec<Option<Job>>,
    core: Core,
    sender: Sender,
    out: Vec<u8>,
    query: Vec<u8>,
    /// By the index of `resolver.servers`: the server answered a query
    /// with EDNS(0) as one it cannot read, so it is asked without.
    plain: Vec<bool>,
}

impl Worker {
    fn run(mut self, stop: &AtomicBool) {
        let mut events = Events::with_capacity(64);
        let mut buf = vec![0u8; 4096];
        // Questions whose sockets had more strays queued than one turn reads.
        let mut again: Vec<usize> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            // The names asked since the last look, first: one asked before
            // the thread could be woken is not left waiting.
            for key in self.resolver.names.take_asked() {
                self.begin(key);
            }
            let now = Instant::now();
            let next = self.jobs.iter().flatten().map(|j| j.deadline).min();
            // Idle, the thread sleeps until a name or the stop wakes it.
            let wait = if again.is_empty() {
                next.map(|d| d.saturating_duration_since(now))
            } else {
                Some(Duration::ZERO)
            };
            if let Err(e) = self.poll.poll(&mut events, wait) {
                if e.kind() != io::ErrorKind::Interrupted {
                    crate::io::log::connection_trouble(&format!("resolver: {e}"));
                    std::thread::sleep(Duration::from_millis(100));
                }
                continue;
            }
            let ready = events
                .iter()
                .filter(|ev| ev.token() != WAKER)
                .map(|ev| ev.token().0 - 1);
            let slots: Vec<usize> = std::mem::take(&mut again)
                .into_iter()
                .chain(ready)
                .collect();
            for slot in slots {
                if self.readable(slot, &mut buf) && !again.contains(&slot) {
                    again.push(slot);
                }
            }
            let now = Instant::now();
            for slot in 0..self.jobs.len() {
                let Some(job) = self.jobs[slot].as_ref().filter(|j| j.deadline <= now) else {
                    continue;
                };
                let step = if job.tcp.is_some() {
                    self.tcp_failed(slot)
                } else {
                    // A later SRV target is slow to resolve: the requests
                    // waiting go to the addresses known, now.
                    self.publish(slot);
                    self.send(slot)
                };
                self.advance(slot, step);
            }
        }
        // Stopping: what still waits is answered (503 with Retry-After,
        // its name being unresolved), not dropped.
        for p in self.resolver.names.close() {
            self.hand_in(&p);
        }
    }

    fn begin(&mut self, key: Key) {
        let (name, port, transport) = (&key.0, key.1, key.2);
        let srv = if port.is_none() {
            service(name, transport)
        } else {
            None
        };
        let (stage, ask, kind) = match srv {
            Some(s) => (Stage::Srv, s, Kind::Srv),
            None => (
                Stage::Host {
                    port: port.unwrap_or(default_port(transport)),
                    v6: false,
                },
                name.clone(),
                Kind::A,
            ),
        };
        let slot = match self.jobs.iter().position(Option::is_none) {
            Some(s) => s,
            None => {
                self.jobs.push(None);
                self.jobs.len() - 1
            }
        };
        self.jobs[slot] = Some(Job {
            key,
            stage,
            name: String::new(),
            kind,
            sock: None,
            server: SocketAddr::from(([0, 0, 0, 0], 0)),
            tcp: None,
            id: 0,
            tries: 0,
            edns: false,
            deadline: Instant::now(),
            ttl: u32::MAX,
            targets: std::collections::VecDeque::new(),
            glue: Vec::new(),
            found: Vec::new(),
            published: false,
        });
        self.ask(slot, stage, ask, kind);
    }

    /// Caches the addresses `slot` has found so far and hands in the
    /// requests waiting on them, while it resolves the rest (once).
    fn publish(&mut self, slot: usize) {
        let Some(job) = self.jobs[slot].as_mut() else {
            return;
        };
        if job.found.is_empty() || job.published {
            return;
        }
        job.published = true;
        let (key, to, ttl) = (job.key.clone(), job.found.clone(), job.ttl);
        self.resolved(&key, to, ttl);
    }

    /// Sends the job's next question (a fresh socket, port and ID).
    fn ask(&mut self, slot: usize, stage: Stage, name: String, kind: Kind) {
        let Some(job) = self.jobs[slot].as_mut() else {
            return;
        };
        job.stage = stage;
        job.name = name;
        job.kind = kind;
        job.tries = 0;
        let step = self.send(slot);
        self.advance(slot, step);
    }

    /// Sends the question to the server whose turn it is (again, after a
    /// timeout or an error answer), or gives up once every try is used.
    fn send(&mut self, slot: usize) -> Step {
        let settings = &self.resolver.settings;
        let servers = &self.resolver.servers;
        let Some(job) = self.jobs[slot].as_mut() else {
            return Step::Wait;
        };
        if let Some(mut old) = job.sock.take() {
            let _ = self.poll.registry().deregister(&mut old);
        }
        if let Some(mut old) = job.tcp.take() {
            let _ = self.poll.registry().deregister(&mut old.stream);
        }
        let total = settings.attempts as usize * servers.len();
        loop {
            if job.tries as usize >= total {
                return Step::Done(UNANSWERED_TTL);
            }
            let index = job.tries as usize % servers.len();
            let server = servers[index];
            job.server = server;
            job.tries += 1;
            job.id = random_u16();
            job.deadline = Instant::now() + settings.timeout;
            job.edns = !self.plain[index];
            if job
                .write_query(settings.require_dnssec, job.edns, &mut self.query)
                .is_err()
            {
                // Not a name DNS can be asked about.
                return Step::Done(self.resolver.settings.negative_ttl);
            }
            let local: SocketAddr = if server.is_ipv4() {
                ([0, 0, 0, 0], 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            let sent = mio::net::UdpSocket::bind(local).and_then(|mut s| {
                s.connect(server)?;
                s.send(&self.query)?;
                self.poll
                    .registry()
                    .register(&mut s, Token(slot + 1), Interest::READABLE)?;
                Ok(s)
            });
            if let Ok(s) = sent {
                self.core
                    .shared()
                    .metrics
                    .dns_queries
                    .fetch_add(1, Ordering::Relaxed);
                job.sock = Some(s);
                return Step::Wait;
            }
        }
    }

    /// Reads what arrived for the job in `slot`; `true` when it stopped
    /// at [`MAX_STRAYS`] datagrams that were not its answer, with more
    /// perhaps queued (read again next turn: a flood of forged answers
    /// at one question's port cannot hold the thread every name waits
    /// on).
    fn readable(&mut self, slot: usize, buf: &mut [u8]) -> bool {
        if self
            .jobs
            .get(slot)
            .and_then(Option::as_ref)
            .is_some_and(|j| j.tcp.is_some())
        {
            let step = self.tcp_ready(slot, buf);
            self.advance(slot, step);
            return false;
        }
        let mut strays = 0;
        loop {
            let Some(job) = self.jobs.get_mut(slot).and_then(Option::as_mut) else {
                return false;
            };
            let Some(sock) = &job.sock else {
                return false;
            };
            let n = match sock.recv(buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                // An ICMP error (nobody at that port): the next server.
                Err(_) => {
                    let step = self.send(slot);
                    self.advance(slot, step);
                    return false;
                }
            };
            let step = match dns::parse(&buf[..n], job.id, &job.name, job.kind) {
                // Not vouched for by a validating resolver: as if the
                // server had failed (the next try, or no answer).
                Ok(a) if self.resolver.settings.require_dnssec && !a.authenticated => {
                    unvalidated(&self.core, job);
                    self.send(slot)
                }
                Ok(a) if a.truncated => self.over_tcp(slot, a),
                Ok(a) => self.answered(slot, a),
                // A stray or forged datagram: keep waiting for ours.
                Err(dns::DnsError::NotOurs(_)) => {
                    strays += 1;
                    if strays == MAX_STRAYS {
                        return true;
                    }
                    continue;
                }
                // A server from before EDNS(0): the same question again,
                // without it (once per server: it is remembered).
                Err(e) if e.refuses_edns() && job.edns => {
                    let server = job.server;
                    job.tries -= 1;
                    self.without_edns(server);
                    self.send(slot)
                }
                Err(_) => self.send(slot),
            };
            self.advance(slot, step);
            return false;
        }
    }

    /// Asks `server` without EDNS(0) from now on.
    fn without_edns(&mut self, server: SocketAddr) {
        let servers = &self.resolver.servers;
        if let Some(i) = servers.iter().position(|s| *s == server) {
            if !self.plain[i] {
                self.plain[i] = true;
                tracing::info!(
                    target: "sipsec::dns",
                    %server,
                    "name server does not read EDNS(0) queries; it is asked without, and answers over 512 bytes come over TCP"
                );
            }
        }
    }

    /// The UDP answer `partial` was cut short: the same question goes to
    /// the same server over TCP; should that fail, `partial` is used.
    fn over_tcp(&mut self, slot: usize, partial: dns::Answer) -> Step {
        let Some(job) = self.jobs[slot].as_mut() else {
            return Step::Wait;
        };
        if let Some(mut old) = job.sock.take() {
            let _ = self.poll.registry().deregister(&mut old);
        }
        let dnssec = self.resolver.settings.require_dnssec;
        if job.write_query(dnssec, false, &mut self.query).is_err() {
            return self.answered(slot, partial);
        }
        let mut out = Vec::with_capacity(2 + self.query.len());
        out.extend_from_slice(&(self.query.len() as u16).to_be_bytes());
        out.extend_from_slice(&self.query);
        let interest = Interest::READABLE | Interest::WRITABLE;
        let opened = mio::net::TcpStream::connect(job.server).and_then(|mut s| {
            self.poll
                .registry()
                .register(&mut s, Token(slot + 1), interest)?;
            Ok(s)
        });
        let Ok(stream) = opened else {
            return self.answered(slot, partial);
        };
        job.deadline = Instant::now() + self.resolver.settings.timeout;
        job.tcp = Some(Tcp {
            stream,
            out,
            answer: Vec::new(),
            partial,
        });
        self.core
            .shared()
            .metrics
            .dns_queries
            .fetch_add(1, Ordering::Relaxed);
        Step::Wait
    }

    /// The TCP question of `slot` can go on: writes what is left of it,
    /// reads what came; the answer once whole.
    fn tcp_ready(&mut self, slot: usize, buf: &mut [u8]) -> Step {
        use std::io::{Read, Write};
        let Some(job) = self.jobs[slot].as_mut() else {
            return Step::Wait;
        };
        let Some(tcp) = job.tcp.as_mut() else {
            return Step::Wait;
        };
        let pending = |e: &io::Error| {
            matches!(
                e.kind(),
                io::ErrorKind::WouldBlock
                    | io::ErrorKind::NotConnected
                    | io::ErrorKind::Interrupted
            )
        };
        let mut failed = false;
        while !tcp.out.is_empty() && !failed {
            match tcp.stream.write(&tcp.out) {
                Ok(n) => {
                    tcp.out.drain(..n);
                }
                Err(e) if pending(&e) => break,
                Err(_) => failed = true,
            }
        }
        while !failed {
            match tcp.stream.read(buf) {
                // Closed before the whole answer.
                Ok(0) => failed = true,
                Ok(n) => {
                    tcp.answer.extend_from_slice(&buf[..n]);
                    // A length prefix bounds it: at most 2 + 65,535 bytes.
                    failed = tcp.answer.len() > 2 + usize::from(u16::MAX);
                }
                Err(e) if pending(&e) => break,
                Err(_) => failed = true,
            }
        }
        let whole = match tcp.answer.get(..2) {
            Some(l) => {
                let len = usize::from(u16::from_be_bytes([l[0], l[1]]));
                tcp.answer.get(2..2 + len)
            }
            None => None,
        };
        let parsed = whole.map(|a| dns::parse(a, job.id, &job.name, job.kind));
        let require = self.resolver.settings.require_dnssec;
        match parsed {
            Some(Ok(a)) if require && !a.authenticated => {
                unvalidated(&self.core, job);
                self.tcp_failed(slot)
            }
            Some(Ok(a)) => {
                self.end_tcp(slot);
                self.answered(slot, a)
            }
            Some(Err(_)) => self.tcp_failed(slot),
            None if failed => self.tcp_failed(slot),
            None => Step::Wait,
        }
    }

    /// Closes `slot`'s TCP question; its truncated UDP answer, if any.
    fn end_tcp(&mut self, slot: usize) -> Option<dns::Answer> {
        let tcp = self.jobs[slot].as_mut()?.tcp.take()?;
        let mut stream = tcp.stream;
        let _ = self.poll.registry().deregister(&mut stream);
        Some(tcp.partial)
    }

    /// TCP gave nothing usable (refused, closed, timed out, garbage): what
    /// the UDP answer held is used.
    fn tcp_failed(&mut self, slot: usize) -> Step {
        match self.end_tcp(slot) {
            Some(partial) => self.answered(slot, partial),
            None => Step::Wait,
        }
    }

    fn answered(&mut self, slot: usize, mut a: dns::Answer) -> Step {
        let negative = self.resolver.settings.negative_ttl;
        let Some(job) = self.jobs[slot].as_mut() else {
            return Step::Wait;
        };
        if !a.records.is_empty() {
            job.ttl = job.ttl.min(a.ttl);
        }
        match job.stage {
            Stage::Srv => {
                let glue = std::mem::take(&mut a.extra);
                let srvs = a.srv_records();
                let (name, transport) = (job.key.0.clone(), job.key.2);
                if srvs.is_empty() {
                    // No SRV records: the name's own addresses (§4.2).
                    let port = default_port(transport);
                    return Step::Ask(Stage::Host { port, v6: false }, name, Kind::A);
                }
                job.targets = dns::order(srvs, random_u16).into();
                job.targets.truncate(MAX_TARGETS);
                job.glue = glue;
                if job.targets.is_empty() {
                    // "." : the service is not offered there (RFC 2782).
                    return Step::Done(job.ttl);
                }
                self.next_target(slot)
            }
            Stage::Host { port, v6 } => {
                let mut any = false;
                for r in &a.records {
                    if let Record::Address(ip) = r {
                        job.add(*ip, port);
                        any = true;
                    }
                }
                if any {
                    Step::Done(job.ttl)
                } else if !v6 {
                    Step::Ask(Stage::Host { port, v6: true }, job.name.clone(), Kind::Aaaa)
                } else {
                    // A target without addresses: the next one (§4.4).
                    Step::Done(negative)
                }
            }
        }
    }

    /// The next SRV target in order: its addresses from the answer or
    /// the hosts file, or its A records asked.
    fn next_target(&mut self, slot: usize) -> Step {
        let Some(job) = self.jobs[slot].as_mut() else {
            return Step::Wait;
        };
        let Some(srv) = job.targets.pop_front() else {
            return Step::Done(self.resolver.settings.negative_ttl);
        };
        let glue: Vec<IpAddr> = job
            .glue
            .iter()
            .filter(|(n, _)| *n == srv.target)
            .map(|e| e.1)
            .chain(self.resolver.names.host(&srv.target))
            .collect();
        for ip in &glue {
            job.add(*ip, srv.port);
        }
        match glue.is_empty() {
            false => Step::Done(job.ttl),
            true => Step::Ask(
                Stage::Host {
                    port: srv.port,
                    v6: false,
                },
                srv.target,
                Kind::A,
            ),
        }
    }

    fn advance(&mut self, slot: usize, step: Step) {
        match step {
            Step::Wait => {}
            Step::Ask(stage, name, kind) => self.ask(slot, stage, name, kind),
            Step::Done(ttl) => {
                let Some(job) = self.jobs[slot].as_mut() else {
                    return;
                };
                if !job.targets.is_empty() && job.found.len() < MAX_ADDRESSES {
                    // Every SRV target is resolved: the later ones are
                    // where requests go when the first fails.
                    let step = self.next_target(slot);
                    return self.advance(slot, step);
                }
                let Some(mut job) = self.jobs[slot].take() else {
                    return;
                };
                if let Some(mut s) = job.sock.take() {
                    let _ = self.poll.registry().deregister(&mut s);
                }
                let to = std::mem::take(&mut job.found);
                let ttl = if to.is_empty() { ttl } else { job.ttl.min(ttl) };
                if to.is_empty() {
                    crate::io::log::unresolved(&job.key.0);
                }
                self.resolved(&job.key, to, ttl);
            }
        }
    }

    /// Records where `key` leads and hands the requests that waited on
    /// it in again.
    fn resolved(&mut self, key: &Key, to: Vec<SocketAddr>, ttl: u32) {
        let sender = &self.sender;
        crate::io::drive::resolved(
            &mut self.core,
            sender.sinks(),
            key,
            to,
            ttl,
            crate::io::clock::now(),
            &mut self.out,
            |core, reply, out| {
                sender.send_all(core.extra());
                sender.reply(reply, out, core.sent_key());
            },
        );
    }

    /// Hands a parked request in again, now that its name is known.
    fn hand_in(&mut self, p: &Parked) {
        crate::io::drive::hand_in_and_send(&mut self.core, &self.sender, p, None, &mut self.out);
    }
}

impl Drop for Worker {
    /// Should the thread die (a bug), nothing waits for it any more: new
    /// requests for unknown names get 503 with Retry-After from the
    /// workers instead of waiting forever.
    fn drop(&mut self) {
        if std::thread::panicking() {
            drop(self.resolver.names.close());
            tracing::error!(target: "sipsec::dns", "the resolver thread stopped on a bug: names are no longer resolved");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_and_hosts_files_are_read_as_the_c_library_does() {
        let conf = "# comment\nsearch example.com\nnameserver 192.0.2.53\nnameserver fe80::1%eth0\nnameserver bogus\nnameserver 192.0.2.54\nnameserver 192.0.2.55\n";
        let s = servers_of_resolv_conf(conf);
        assert_eq!(
            s,
            [
                "192.0.2.53:53".parse().unwrap(),
                "[fe80::1]:53".parse().unwrap(),
                "192.0.2.54:53".parse().unwrap(),
            ]
        );
        assert_eq!(
            servers_of_resolv_conf(""),
            ["127.0.0.1:53".parse().unwrap()]
        );
        let h = parse_hosts(
            "127.0.0.1 localhost\n::1 localhost ip6-localhost\n# 10.0.0.1 hidden\n192.0.2.9  Proxy.Example.  px # trailing\nnot-an-ip name\n",
        );
        assert_eq!(h.get("localhost"), Some(&IpAddr::from([127, 0, 0, 1])));
        assert_eq!(h.get("proxy.example"), Some(&IpAddr::from([192, 0, 2, 9])));
        assert_eq!(h.get("px"), Some(&IpAddr::from([192, 0, 2, 9])));
        assert!(h.get("ip6-localhost").is_some_and(IpAddr::is_ipv6));
        assert!(!h.contains_key("hidden") && !h.contains_key("name"));
    }

    #[test]
    fn service_names_follow_rfc_3263() {
        assert_eq!(
            service("a.test", Transport::Udp).as_deref(),
            Some("_sip._udp.a.test")
        );
        assert_eq!(
            service("a.test", Transport::Tcp).as_deref(),
            Some("_sip._tcp.a.test")
        );
        assert_eq!(
            service("a.test", Transport::Tls).as_deref(),
            Some("_sips._tcp.a.test")
        );
        assert_eq!(service("a.test", Transport::Wss), None);
    }
}
