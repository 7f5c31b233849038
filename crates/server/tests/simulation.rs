//! Simulation: server cores and phones on a virtual network with virtual
//! time (in the manner of quinn-proto's test `Pair`).
//!
//! The cores are the real `sipsec_server::Core`, driven by the production
//! driver's functions (`io::drive`: `handle` stores what a decision asks
//! on a virtual disk before its answer goes, `on_timer` runs the
//! transactions, `resolved` hands in again the requests a name kept
//! waiting), with a virtual resolver answering from a zone after a delay.
//! The phones are the real user agent core (`ua::agent`, the sans-IO
//! signalling the `sipsec phone` drives over its socket): sip-core's RFC
//! 3261 §17 transaction machines, digest answers, CANCEL, the ACKs of both
//! kinds and 2xx retransmission. Every link can lose,
//! duplicate, delay and (through jitter) reorder datagrams; every choice
//! comes from one seeded generator, so a run is a function of its seed and
//! takes milliseconds of real time however many virtual minutes it spans.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sip_core::digest::Algorithm;
use sip_core::transaction::TimerConfig;
use sip_core::{Message, Method};
use sipsec_server::io::drive::{self, Store};
use sipsec_server::io::sinks::Sinks;
use sipsec_server::proto::auth::{Authenticator, NonceKey};
use sipsec_server::proto::location::{Binding, MemoryLocation, Record, StoreError};
use sipsec_server::proto::users::{UserEntry, Users};
use sipsec_server::{Config, Core, Mode, Now, Reply, Shared, Transport};
use ua::agent::{Agent, Event as UaEvent, Identity, Setup};

/// Unix time at the start of every run (ms).
const EPOCH_MS: u64 = 1_800_000_000_000;
const T: TimerConfig = TimerConfig::RFC3261;
/// Every phone's password.
const PASSWORD: &str = "pw";

/// splitmix64: small, seedable, good enough to pick losses.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

/// One direction of a link.
#[derive(Debug, Clone, Copy)]
struct Link {
    loss: f64,
    dup: f64,
    delay: Duration,
    /// Up to this much more delay, drawn per datagram: reorders them.
    jitter: Duration,
}

const CLEAN: Link = Link {
    loss: 0.0,
    dup: 0.0,
    delay: Duration::from_millis(5),
    jitter: Duration::ZERO,
};

const LOSSY: Link = Link {
    loss: 0.2,
    dup: 0.1,
    delay: Duration::from_millis(20),
    jitter: Duration::from_millis(60),
};

const CUT: Link = Link { loss: 1.0, ..CLEAN };

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("address literal")
}

/// What happens at a virtual instant.
#[derive(Debug)]
enum Event {
    Deliver {
        from: SocketAddr,
        to: SocketAddr,
        bytes: Vec<u8>,
    },
    Wake(SocketAddr),
    /// The resolver of the server there answers.
    Resolve(SocketAddr),
}

/// The journal a driver keeps, on a virtual disk that can fill up.
#[derive(Debug, Default)]
struct Disk {
    /// What was stored, in order.
    records: Vec<Record>,
    /// Storing fails (a full disk).
    full: bool,
}

impl Store for Disk {
    fn store(&mut self, records: &[Record]) -> Result<(), StoreError> {
        if self.full {
            return Err(std::io::Error::other("no space left on device (simulated)").into());
        }
        self.records.extend_from_slice(records);
        Ok(())
    }
}

/// How long the virtual resolver takes to answer.
const DNS_DELAY: Duration = Duration::from_millis(1200);

/// A sipsec core with the journal and resolver its driver would keep.
struct Server {
    core: Core,
    journal: Disk,
    /// What the resolver finds: name → addresses (absent: no such name).
    zone: HashMap<String, Vec<SocketAddr>>,
    /// Names the core asked the resolver for.
    asked: Vec<String>,
}

/// Carries out a decision's output as the UDP workers do: extras first,
/// then the reply.
fn carry(core: &Core, reply: Reply, buf: &[u8], out: &mut Vec<(SocketAddr, Vec<u8>)>) {
    for (b, (dest, _)) in core.extra().iter() {
        out.push((dest, b.to_vec()));
    }
    if let Reply::Send(dest, _) = reply {
        out.push((dest, buf.to_vec()));
    }
}

impl Server {
    /// Handles a datagram; `true` when the core asked for a name.
    fn receive(
        &mut self,
        now: Now,
        from: SocketAddr,
        bytes: &[u8],
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) -> bool {
        let mut buf = Vec::new();
        let store: &mut dyn Store = &mut self.journal;
        let reply = drive::handle(
            &mut self.core,
            &Sinks::default(),
            Some(store),
            bytes,
            from,
            Transport::Udp,
            now,
            &mut buf,
        );
        carry(&self.core, reply, &buf, out);
        let mut asked = self.core.extra().wake().names;
        // What waited on an AoR this change freed goes on, as the
        // workers do after each batch.
        drive::woken(
            &mut self.core,
            &Sinks::default(),
            &mut self.journal,
            now,
            &mut buf,
            |core, reply, b| {
                carry(core, reply, b, out);
                asked |= core.extra().wake().names;
            },
        );
        asked
    }

    fn wake(&mut self, now: Now, out: &mut Vec<(SocketAddr, Vec<u8>)>) -> bool {
        drive::on_timer(&mut self.core, &Sinks::default(), now);
        carry(&self.core, Reply::Drop, &[], out);
        self.core.extra().wake().names
    }

    /// The resolver's answers for every name asked: the requests that
    /// waited go on.
    fn resolve(&mut self, now: Now, out: &mut Vec<(SocketAddr, Vec<u8>)>) -> bool {
        let mut asked_more = false;
        for key in self.core.shared().names.take_asked() {
            self.asked.push(key.0.clone());
            let to = self.zone.get(&key.0).cloned().unwrap_or_default();
            let mut buf = Vec::new();
            drive::resolved(
                &mut self.core,
                &Sinks::default(),
                &key,
                to,
                300,
                now,
                &mut buf,
                |core, reply, b| {
                    carry(core, reply, b, out);
                    asked_more |= core.extra().wake().names;
                },
            );
        }
        asked_more
    }

    fn next_wake(&self) -> Option<Instant> {
        self.core.next_timer()
    }

    fn lookup(&self, aor: &str, now: Now) -> Vec<Binding> {
        let mut v = Vec::new();
        self.core.shared().location.lookup(aor, now.secs(), &mut v);
        v
    }
}

/// How a phone answers an INVITE.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    /// 180 at once, 200 after this long (`None`: rings until cancelled).
    Ring(Option<Duration>),
}

/// A phone: the real user agent core (`ua::agent`, which the `sipsec
/// phone` drives over a socket), driven here on virtual time, with what
/// its user saw.
struct Phone {
    addr: SocketAddr,
    agent: Agent,
    /// Outbound proxy / registrar: where out-of-dialog requests go.
    proxy: SocketAddr,
    answer: Answer,
    /// Calls to answer 200 at a time.
    accept_at: Vec<(String, Instant)>,
    /// The last call placed.
    call: Option<String>,
    /// Every response delivered to this phone's requests.
    responses: Vec<(Method<'static>, u16)>,
    /// Requests of ours that timed out.
    timeouts: Vec<Method<'static>>,
    /// Requests received as UAS, by method (retransmissions not counted).
    received: Vec<Method<'static>>,
    /// A call of ours was answered 2xx (a dialog stands).
    dialog: bool,
}

/// A phone's own seed for its tokens: from its address, so that a run is
/// a function of the simulation's seed and no two phones draw alike.
fn seed_of(addr: SocketAddr) -> u64 {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(a) => u64::from(u32::from(a)),
        std::net::IpAddr::V6(a) => u128::from(a) as u64,
    };
    ip << 16 | u64::from(addr.port())
}

impl Phone {
    fn new(addr: SocketAddr, user: &'static str, domain: &'static str, proxy: SocketAddr) -> Self {
        Self::with_contact(addr, user, domain, proxy, &addr.to_string())
    }

    /// A phone that registers `sip:user@host` as its Contact.
    fn with_contact(
        addr: SocketAddr,
        user: &'static str,
        domain: &'static str,
        proxy: SocketAddr,
        host: &str,
    ) -> Self {
        let mut agent = Agent::new(Setup {
            user: user.into(),
            domain: domain.into(),
            password: Some(PASSWORD.into()),
            local: addr,
            transport: "UDP",
            reliable: false,
            contact: format!("sip:{user}@{host}"),
            timers: T,
            seed: Some(seed_of(addr)),
        });
        // Calls come through the home proxy, as a phone with a server takes them.
        agent.ring_only_from(Some(vec![proxy.ip()]));
        Self {
            addr,
            agent,
            proxy,
            answer: Answer::Ring(Some(Duration::from_secs(2))),
            accept_at: Vec::new(),
            call: None,
            responses: Vec::new(),
            timeouts: Vec::new(),
            received: Vec::new(),
            dialog: false,
        }
    }

    fn me(&self) -> Identity {
        let s = self.agent.setup();
        Identity {
            from: format!("<sip:{}@{}>", s.user, s.domain),
            shown: None,
        }
    }

    fn finals(&self, method: Method) -> Vec<u16> {
        self.responses
            .iter()
            .filter(|(m, s)| *m == method && *s >= 200)
            .map(|(_, s)| *s)
            .collect()
    }

    fn register(&mut self, now: Instant, expires: u32, out: &mut Vec<(SocketAddr, Vec<u8>)>) {
        let me = self.me();
        self.agent
            .register(self.proxy, &me, expires, Vec::new(), now)
            .expect("room for a REGISTER");
        self.settle(now, out);
    }

    fn invite(&mut self, now: Instant, target: &str, out: &mut Vec<(SocketAddr, Vec<u8>)>) {
        let me = self.me();
        let (_, call) = self
            .agent
            .invite(self.proxy, &me, target, None, None, now)
            .expect("room for a call");
        self.call = Some(call);
        self.settle(now, out);
    }

    fn cancel(&mut self, now: Instant, out: &mut Vec<(SocketAddr, Vec<u8>)>) {
        let call = self.call.clone().expect("a call to cancel");
        self.agent.cancel(&call, now).expect("a ringing call");
        self.settle(now, out);
    }

    fn bye(&mut self, now: Instant, out: &mut Vec<(SocketAddr, Vec<u8>)>) {
        let call = self.call.clone().expect("a call");
        self.agent.bye(&call, now).expect("an answered call");
        self.settle(now, out);
    }

    fn receive(
        &mut self,
        now: Instant,
        from: SocketAddr,
        bytes: &[u8],
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        assert!(
            self.agent.handle(bytes, from, now) || Message::parse(bytes).is_ok(),
            "{} got garbage from {from}",
            self.addr
        );
        self.settle(now, out);
    }

    fn wake(&mut self, now: Instant, out: &mut Vec<(SocketAddr, Vec<u8>)>) {
        let due: Vec<String> = self
            .accept_at
            .iter()
            .filter(|(_, at)| now >= *at)
            .map(|(c, _)| c.clone())
            .collect();
        self.accept_at.retain(|(_, at)| now < *at);
        for call in due {
            // A call cancelled meanwhile is not there to accept.
            let _ = self.agent.accept(&call, None, now);
        }
        self.agent.on_timer(now);
        self.settle(now, out);
    }

    /// What the user does with each event, then the sends.
    fn settle(&mut self, now: Instant, out: &mut Vec<(SocketAddr, Vec<u8>)>) {
        while let Some(e) = self.agent.poll_event() {
            match e {
                UaEvent::Response { method, code, .. } => {
                    self.responses.push((method, code));
                    self.dialog |= method == Method::Invite && (200..300).contains(&code);
                }
                UaEvent::Timeout { method, .. } => self.timeouts.push(method),
                UaEvent::Incoming { call_id, .. } => {
                    self.received.push(Method::Invite);
                    self.agent.ring(&call_id, now).expect("a new call rings");
                    let Answer::Ring(after) = self.answer;
                    if let Some(d) = after {
                        self.accept_at.push((call_id, now + d));
                    }
                }
                UaEvent::Request { method, .. } => self.received.push(method),
                UaEvent::Stranger { from, .. } => panic!("a call from {from}, not the proxy"),
                UaEvent::Cancelling { .. } | UaEvent::AckTimeout { .. } => {}
            }
        }
        while let Some(t) = self.agent.poll_transmit() {
            out.push((t.to, t.bytes));
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        let accept = self.accept_at.iter().map(|(_, at)| *at);
        self.agent.next_deadline().into_iter().chain(accept).min()
    }
}

enum Node {
    Server(Box<Server>),
    Phone(Box<Phone>),
}

/// The network, the clock and every node.
struct Sim {
    origin: Instant,
    t: Duration,
    rng: Rng,
    queue: BTreeMap<(Duration, u64), Event>,
    seq: u64,
    links: HashMap<(SocketAddr, SocketAddr), Link>,
    nodes: HashMap<SocketAddr, Node>,
    /// Wake-ups already queued, per node.
    wakes: HashMap<SocketAddr, Duration>,
    /// (time, from, to, first line, delivered) for every datagram sent.
    trace: Vec<(Duration, SocketAddr, SocketAddr, String, bool)>,
    /// Every datagram delivered, for attackers to replay.
    seen: Vec<(SocketAddr, SocketAddr, Vec<u8>)>,
}

impl Sim {
    fn new(seed: u64) -> Self {
        Self {
            origin: Instant::now(),
            t: Duration::ZERO,
            rng: Rng(seed),
            queue: BTreeMap::new(),
            seq: 0,
            links: HashMap::new(),
            nodes: HashMap::new(),
            wakes: HashMap::new(),
            trace: Vec::new(),
            seen: Vec::new(),
        }
    }

    fn now(&self) -> Now {
        Now {
            unix_ms: EPOCH_MS + self.t.as_millis() as u64,
            mono: self.origin + self.t,
        }
    }

    fn instant(&self) -> Instant {
        self.origin + self.t
    }

    /// Both directions between `a` and `b`.
    fn link(&mut self, a: SocketAddr, b: SocketAddr, l: Link) {
        self.links.insert((a, b), l);
        self.links.insert((b, a), l);
    }

    fn server(&mut self, at: SocketAddr, config: Config, auth: Option<Authenticator>) {
        let config = Config {
            advertise: at,
            udp: at,
            ..config
        };
        let shared = Shared::new(
            config,
            Arc::new(MemoryLocation::new(std::hash::RandomState::new())),
            auth,
            self.now(),
            std::hash::RandomState::new(),
        );
        self.nodes.insert(
            at,
            Node::Server(Box::new(Server {
                core: Core::new(Arc::new(shared)),
                journal: Disk::default(),
                zone: HashMap::new(),
                asked: Vec::new(),
            })),
        );
    }

    fn phone(&mut self, p: Phone) {
        self.nodes.insert(p.addr, Node::Phone(Box::new(p)));
    }

    fn srv(&mut self, at: SocketAddr) -> &mut Server {
        match self.nodes.get_mut(&at) {
            Some(Node::Server(s)) => s,
            _ => panic!("no server at {at}"),
        }
    }

    fn ph(&mut self, at: SocketAddr) -> &mut Phone {
        match self.nodes.get_mut(&at) {
            Some(Node::Phone(p)) => p,
            _ => panic!("no phone at {at}"),
        }
    }

    /// Lets `at` act (e.g. `|p, now, out| p.register(now, 60, out)`).
    fn act(
        &mut self,
        at: SocketAddr,
        f: impl FnOnce(&mut Phone, Instant, &mut Vec<(SocketAddr, Vec<u8>)>),
    ) {
        let now = self.instant();
        let mut out = Vec::new();
        f(self.ph(at), now, &mut out);
        self.send_all(at, out);
        self.schedule_wake(at);
    }

    /// Sends a datagram as `from` (an attacker needs no node).
    fn inject(&mut self, from: SocketAddr, to: SocketAddr, bytes: Vec<u8>) {
        self.send_all(from, vec![(to, bytes)]);
    }

    fn send_all(&mut self, from: SocketAddr, out: Vec<(SocketAddr, Vec<u8>)>) {
        for (to, bytes) in out {
            let l = self.links.get(&(from, to)).copied().unwrap_or(CLEAN);
            let first = String::from_utf8_lossy(&bytes)
                .lines()
                .next()
                .unwrap_or("")
                .to_owned();
            let lost = self.rng.chance(l.loss);
            self.trace.push((self.t, from, to, first, !lost));
            if lost {
                continue;
            }
            let copies = if self.rng.chance(l.dup) { 2 } else { 1 };
            for _ in 0..copies {
                let jitter = Duration::from_micros(self.rng.below(l.jitter.as_micros() as u64));
                let at = self.t + l.delay + jitter;
                self.push(
                    at,
                    Event::Deliver {
                        from,
                        to,
                        bytes: bytes.clone(),
                    },
                );
            }
        }
    }

    fn push(&mut self, at: Duration, e: Event) {
        self.seq += 1;
        self.queue.insert((at, self.seq), e);
    }

    fn schedule_wake(&mut self, at: SocketAddr) {
        let next = match self.nodes.get(&at) {
            Some(Node::Server(s)) => s.next_wake(),
            Some(Node::Phone(p)) => p.next_wake(),
            None => None,
        };
        let Some(next) = next else { return };
        let when = next.saturating_duration_since(self.origin).max(self.t);
        if self
            .wakes
            .get(&at)
            .is_some_and(|w| *w <= when && *w >= self.t)
        {
            return;
        }
        self.wakes.insert(at, when);
        self.push(when, Event::Wake(at));
    }

    /// Runs events until `until` (virtual), then sets the clock there.
    fn run_until(&mut self, until: Duration) {
        let mut steps = 0;
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > until {
                break;
            }
            let ((at, _), event) = entry.remove_entry();
            self.t = at;
            steps += 1;
            assert!(steps < 1_000_000, "the simulation does not settle");
            let now = self.now();
            let instant = self.instant();
            let mut out = Vec::new();
            let mut asked = false;
            let node = match event {
                Event::Deliver { from, to, bytes } => {
                    self.seen.push((from, to, bytes.clone()));
                    match self.nodes.get_mut(&to) {
                        Some(Node::Server(s)) => asked = s.receive(now, from, &bytes, &mut out),
                        Some(Node::Phone(p)) => p.receive(instant, from, &bytes, &mut out),
                        None => continue, // nobody listens there
                    }
                    to
                }
                Event::Wake(at) => {
                    if self.wakes.get(&at) == Some(&self.t) {
                        self.wakes.remove(&at);
                    }
                    match self.nodes.get_mut(&at) {
                        Some(Node::Server(s)) => asked = s.wake(now, &mut out),
                        Some(Node::Phone(p)) => p.wake(instant, &mut out),
                        None => {}
                    }
                    at
                }
                Event::Resolve(at) => {
                    if let Some(Node::Server(s)) = self.nodes.get_mut(&at) {
                        asked = s.resolve(now, &mut out);
                    }
                    at
                }
            };
            if asked {
                self.push(self.t + DNS_DELAY, Event::Resolve(node));
            }
            self.send_all(node, out);
            self.schedule_wake(node);
        }
        self.t = self.t.max(until);
    }

    /// Runs for `d` more.
    fn run_for(&mut self, d: Duration) {
        let until = self.t + d;
        self.run_until(until);
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

const ALICE: &str = "10.0.1.10:5060";
const BOB: &str = "10.0.2.20:5060";
const P1: &str = "10.0.1.1:5060";
const P2: &str = "10.0.2.1:5060";

fn proxy_config(domain: &str, peer: (&str, &str)) -> Config {
    Config {
        mode: Mode::Proxy,
        stateful: true,
        domains: vec![domain.to_owned()],
        peers: vec![(peer.0.to_owned(), addr(peer.1))],
        ..Config::default()
    }
}

/// Alice (a.example, behind P1) and Bob (b.example, registered at P2);
/// the P1–P2 link as given.
fn two_domains(seed: u64, middle: Link) -> Sim {
    let mut sim = Sim::new(seed);
    sim.server(addr(P1), proxy_config("a.example", ("b.example", P2)), None);
    sim.server(addr(P2), proxy_config("b.example", ("a.example", P1)), None);
    sim.phone(Phone::new(addr(ALICE), "alice", "a.example", addr(P1)));
    sim.phone(Phone::new(addr(BOB), "bob", "b.example", addr(P2)));
    sim.act(addr(BOB), |p, now, out| p.register(now, 3600, out));
    sim.run_for(secs(1));
    assert_eq!(sim.ph(addr(BOB)).finals(Method::Register), [200]);
    sim.link(addr(P1), addr(P2), middle);
    sim
}

#[test]
fn register_refresh_and_expire_over_a_lossy_link() {
    for seed in 1..=20 {
        let mut sim = Sim::new(seed);
        let registrar = Config {
            mode: Mode::Registrar,
            domains: vec!["b.example".into()],
            ..Config::default()
        };
        sim.server(addr(P2), registrar, None);
        sim.phone(Phone::new(addr(BOB), "bob", "b.example", addr(P2)));
        sim.link(addr(BOB), addr(P2), LOSSY);
        sim.act(addr(BOB), |p, now, out| p.register(now, 60, out));
        sim.run_for(secs(40));
        assert_eq!(
            sim.ph(addr(BOB)).finals(Method::Register),
            [200],
            "seed {seed}: one final answer, however many copies"
        );
        let now = sim.now();
        let bound = sim.srv(addr(P2)).lookup("sip:bob@b.example", now);
        assert_eq!(bound.len(), 1, "seed {seed}");
        assert_eq!(bound[0].contact(), format!("sip:bob@{BOB}"));
        // Refresh at 40 s: now bound until 100 s.
        sim.act(addr(BOB), |p, now, out| p.register(now, 60, out));
        sim.run_for(secs(50));
        assert_eq!(sim.ph(addr(BOB)).finals(Method::Register), [200, 200]);
        let now = sim.now();
        assert_eq!(sim.srv(addr(P2)).lookup("sip:bob@b.example", now).len(), 1);
        sim.run_until(secs(101));
        let now = sim.now();
        assert!(
            sim.srv(addr(P2))
                .lookup("sip:bob@b.example", now)
                .is_empty(),
            "seed {seed}: expired at 100 s"
        );
        let journal = &sim.srv(addr(P2)).journal.records;
        assert!(
            journal.len() >= 2
                && journal
                    .iter()
                    .all(|r| matches!(r, Record::Bind { aor, .. } if aor == "sip:bob@b.example")),
            "seed {seed}: every stored change is bob's binding: {journal:?}"
        );
    }
}

#[test]
fn a_call_through_two_stateful_proxies_completes_over_a_lossy_link() {
    for seed in 1..=10 {
        let mut sim = two_domains(seed, LOSSY);
        sim.link(addr(ALICE), addr(P1), LOSSY);
        sim.act(addr(ALICE), |p, now, out| {
            p.invite(now, "sip:bob@b.example", out)
        });
        sim.run_for(secs(40));
        let alice = sim.ph(addr(ALICE));
        assert_eq!(
            alice.finals(Method::Invite).first(),
            Some(&200),
            "seed {seed}"
        );
        assert!(
            alice.timeouts.is_empty(),
            "seed {seed}: {:?}",
            alice.timeouts
        );
        assert!(alice.dialog);
        let bob = sim.ph(addr(BOB));
        assert_eq!(
            bob.received
                .iter()
                .filter(|m| **m == Method::Invite)
                .count(),
            1,
            "seed {seed}: one INVITE reached bob, retransmissions absorbed"
        );
        assert!(
            bob.received.contains(&Method::Ack),
            "seed {seed}: the 2xx was acknowledged end to end"
        );
        sim.act(addr(ALICE), |p, now, out| p.bye(now, out));
        sim.run_for(secs(40));
        assert_eq!(sim.ph(addr(ALICE)).finals(Method::Bye).first(), Some(&200));
        assert!(sim.ph(addr(BOB)).received.contains(&Method::Bye));
    }
}

#[test]
fn cancel_reaches_the_callee_and_the_caller_gets_487() {
    for seed in 1..=10 {
        let mut sim = two_domains(seed, LOSSY);
        sim.ph(addr(BOB)).answer = Answer::Ring(None);
        sim.act(addr(ALICE), |p, now, out| {
            p.invite(now, "sip:bob@b.example", out)
        });
        sim.run_for(secs(3));
        assert!(sim
            .ph(addr(ALICE))
            .responses
            .contains(&(Method::Invite, 180)));
        sim.act(addr(ALICE), |p, now, out| p.cancel(now, out));
        sim.run_for(secs(40));
        let alice = sim.ph(addr(ALICE));
        assert_eq!(
            alice.finals(Method::Cancel).first(),
            Some(&200),
            "seed {seed}"
        );
        assert_eq!(alice.finals(Method::Invite), [487], "seed {seed}");
        assert!(sim.ph(addr(BOB)).received.contains(&Method::Cancel));
    }
}

#[test]
fn timer_c_cancels_a_branch_that_rings_for_ever() {
    let mut sim = two_domains(3, CLEAN);
    sim.ph(addr(BOB)).answer = Answer::Ring(None);
    sim.act(addr(ALICE), |p, now, out| {
        p.invite(now, "sip:bob@b.example", out)
    });
    sim.run_for(secs(170));
    assert!(sim.ph(addr(ALICE)).finals(Method::Invite).is_empty());
    // RFC 3261 §16.8: timer C (more than 3 minutes) cancels the branch; the
    // callee's 487 goes back to the caller.
    sim.run_for(secs(60));
    assert_eq!(sim.ph(addr(ALICE)).finals(Method::Invite), [487]);
    assert!(sim.ph(addr(BOB)).received.contains(&Method::Cancel));
}

#[test]
fn a_callee_that_never_answers_draws_408_from_the_proxy() {
    let mut sim = two_domains(4, CLEAN);
    sim.link(addr(P2), addr(BOB), CUT);
    sim.act(addr(ALICE), |p, now, out| {
        p.invite(now, "sip:bob@b.example", out)
    });
    sim.run_for(secs(40));
    let alice = sim.ph(addr(ALICE));
    // P1's 100 Trying moved Alice's transaction out of Calling, so her own
    // timer B does not fire: the answer is P2's timer B, as 408.
    assert!(alice.responses.contains(&(Method::Invite, 100)));
    assert_eq!(alice.finals(Method::Invite), [408]);
    assert!(alice.timeouts.is_empty());
}

/// A digest authenticator for `user` (password [`PASSWORD`]) in `realm`.
fn authenticator(user: &str, realm: &str) -> Authenticator {
    let mut users = Users::default();
    users
        .insert(user, realm, UserEntry::from_password(user, realm, PASSWORD))
        .expect("user");
    Authenticator::new(
        realm,
        NonceKey::from_secret([7; 32], 300),
        users,
        &[Algorithm::Md5],
        sipsec_server::proto::auth::NcLimits::of(1 << 12),
        std::hash::RandomState::new(),
    )
}

/// Alice's own proxy wants her credentials for a call (407): her phone
/// answers the challenge once, the INVITE goes again with them, and the
/// 2xx that comes back is acknowledged end to end — over lossy links.
#[test]
fn a_call_challenged_by_the_callers_proxy_is_authorized_and_acknowledged() {
    for seed in 1..=5 {
        let mut sim = Sim::new(seed);
        let p1 = Config {
            auth: true,
            realm: "a.example".into(),
            ..proxy_config("a.example", ("b.example", P2))
        };
        sim.server(addr(P1), p1, Some(authenticator("alice", "a.example")));
        sim.server(addr(P2), proxy_config("b.example", ("a.example", P1)), None);
        sim.phone(Phone::new(addr(ALICE), "alice", "a.example", addr(P1)));
        sim.phone(Phone::new(addr(BOB), "bob", "b.example", addr(P2)));
        sim.act(addr(BOB), |p, now, out| p.register(now, 3600, out));
        sim.run_for(secs(1));
        sim.link(addr(ALICE), addr(P1), LOSSY);
        sim.act(addr(ALICE), |p, now, out| {
            p.invite(now, "sip:bob@b.example", out)
        });
        sim.run_for(secs(40));
        let alice = sim.ph(addr(ALICE));
        assert_eq!(
            alice.finals(Method::Invite),
            [407, 200],
            "seed {seed}: challenged once, then answered"
        );
        assert!(alice.dialog, "seed {seed}");
        let bob = sim.ph(addr(BOB));
        assert!(
            bob.received.contains(&Method::Ack),
            "seed {seed}: the 2xx after the challenge was acknowledged"
        );
        sim.act(addr(ALICE), |p, now, out| p.bye(now, out));
        sim.run_for(secs(40));
        assert!(
            sim.ph(addr(BOB)).received.contains(&Method::Bye),
            "seed {seed}"
        );
    }
}

#[test]
fn a_replayed_authorization_is_refused() {
    let mut sim = Sim::new(5);
    let auth = authenticator("bob", "b.example");
    let registrar = Config {
        mode: Mode::Registrar,
        auth: true,
        realm: "b.example".into(),
        domains: vec!["b.example".into()],
        ..Config::default()
    };
    sim.server(addr(P2), registrar, Some(auth));
    sim.phone(Phone::new(addr(BOB), "bob", "b.example", addr(P2)));
    // The phone answers the challenge with its password.
    sim.act(addr(BOB), |p, now, out| p.register(now, 600, out));
    sim.run_for(secs(1));
    assert_eq!(sim.ph(addr(BOB)).finals(Method::Register), [401, 200]);
    let authorized = sim
        .seen
        .iter()
        .find(|(from, _, b)| *from == addr(BOB) && b.windows(14).any(|w| w == b"Authorization:"))
        .map(|(_, _, b)| b.clone())
        .expect("bob's authorized REGISTER");

    // The same bytes from another address, and Bob's credentials over
    // the attacker's contact: both 401, nothing bound to the attacker.
    let mallory = addr("10.6.6.6:5060");
    let text = String::from_utf8(authorized.clone()).expect("utf-8");
    let hijack = text.replace(
        &format!("Contact: <sip:bob@{BOB}>"),
        &format!("Contact: <sip:bob@{mallory}>"),
    );
    assert_ne!(hijack, text);
    sim.inject(mallory, addr(P2), authorized);
    sim.inject(mallory, addr(P2), hijack.into_bytes());
    sim.run_for(secs(1));
    let answers: Vec<u16> = sim
        .seen
        .iter()
        .filter(|(_, to, _)| *to == mallory)
        .filter_map(|(_, _, b)| Some(Message::parse(b).ok()?.status()?.as_u16()))
        .collect();
    assert_eq!(answers, [401, 401]);
    let now = sim.now();
    let bound = sim.srv(addr(P2)).lookup("sip:bob@b.example", now);
    assert_eq!(bound.len(), 1);
    assert_eq!(bound[0].contact(), format!("sip:bob@{BOB}"));
    assert_eq!(
        sim.srv(addr(P2))
            .core
            .shared()
            .metrics
            .auth_replays
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}

#[test]
fn a_journal_write_that_fails_leaves_memory_unchanged() {
    let mut sim = Sim::new(6);
    let registrar = Config {
        mode: Mode::Registrar,
        domains: vec!["b.example".into()],
        ..Config::default()
    };
    sim.server(addr(P2), registrar, None);
    sim.phone(Phone::new(addr(BOB), "bob", "b.example", addr(P2)));
    sim.act(addr(BOB), |p, now, out| p.register(now, 600, out));
    sim.run_for(secs(1));
    assert_eq!(sim.srv(addr(P2)).journal.records.len(), 1);
    // The disk fills: a new contact is refused and not served.
    sim.srv(addr(P2)).journal.full = true;
    let moved = addr("10.0.2.21:5060");
    sim.phone(Phone::new(moved, "bob", "b.example", addr(P2)));
    sim.act(moved, |p, now, out| p.register(now, 600, out));
    sim.run_for(secs(1));
    assert_eq!(sim.ph(moved).finals(Method::Register), [500]);
    let now = sim.now();
    let bound = sim.srv(addr(P2)).lookup("sip:bob@b.example", now);
    assert_eq!(bound.len(), 1, "only what was stored: {bound:?}");
    assert_eq!(bound[0].contact(), format!("sip:bob@{BOB}"));
    assert_eq!(sim.srv(addr(P2)).journal.records.len(), 1);
    // The AoR is not left busy: once the disk has room the change goes in.
    sim.srv(addr(P2)).journal.full = false;
    sim.act(moved, |p, now, out| p.register(now, 600, out));
    sim.run_for(secs(1));
    assert_eq!(sim.ph(moved).finals(Method::Register), [500, 200]);
    let now = sim.now();
    assert_eq!(sim.srv(addr(P2)).lookup("sip:bob@b.example", now).len(), 2);
    assert_eq!(sim.srv(addr(P2)).journal.records.len(), 2);
}

#[test]
fn a_run_is_a_function_of_its_seed() {
    let run = |seed| {
        let mut sim = two_domains(seed, LOSSY);
        sim.link(addr(ALICE), addr(P1), LOSSY);
        sim.act(addr(ALICE), |p, now, out| {
            p.invite(now, "sip:bob@b.example", out)
        });
        sim.run_for(secs(40));
        sim.trace
    };
    let a = run(11);
    assert_eq!(a, run(11), "same seed, same datagrams at the same times");
    assert_ne!(a, run(12), "another seed loses other datagrams");
    assert!(
        a.iter().any(|(_, _, _, _, delivered)| !delivered),
        "losses happened"
    );
}

/// Two workers share one location, as the UDP workers do: a REGISTER for
/// an AoR whose change is still being stored by the other waits, parked
/// on the AoR by the production driver (nothing answered, nothing
/// spinning); the commit of that change hands it to the core that made
/// it, whose driver stores it and answers it — admitted and counted once.
#[test]
fn a_register_that_meets_a_change_in_flight_waits_for_its_commit_and_is_counted_once() {
    let sim = Sim::new(7);
    let registrar = Config {
        mode: Mode::Registrar,
        domains: vec!["b.example".into()],
        advertise: addr(P2),
        udp: addr(P2),
        ..Config::default()
    };
    let shared = Arc::new(Shared::new(
        registrar,
        Arc::new(MemoryLocation::new(std::hash::RandomState::new())),
        None,
        sim.now(),
        std::hash::RandomState::new(),
    ));
    let (mut first, mut second) = (Core::new(shared.clone()), Core::new(shared.clone()));
    let register = |contact: &str, cseq: u32| {
        format!(
            "REGISTER sip:b.example SIP/2.0\r\nVia: SIP/2.0/UDP {BOB};branch=z9hG4bK-busy{cseq}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:bob@b.example>;tag=b\r\nTo: <sip:bob@b.example>\r\n\
             Call-ID: busy@{BOB}\r\nCSeq: {cseq} REGISTER\r\nContact: <{contact}>\r\nExpires: 600\r\n\
             Content-Length: 0\r\n\r\n"
        )
        .into_bytes()
    };
    let (a, b) = (
        register("sip:bob@10.0.2.20", 1),
        register("sip:bob@10.0.2.21", 2),
    );
    let (mut out_a, mut out_b) = (Vec::new(), Vec::new());
    let now = sim.now();
    let src = addr(BOB);
    let mut disk = Disk::default();
    assert_eq!(
        first.handle(&a, src, Transport::Udp, now, &mut out_a),
        Reply::Persist,
        "the first change is being stored"
    );
    let reply = drive::handle(
        &mut second,
        &Sinks::default(),
        Some(&mut disk),
        &b,
        src,
        Transport::Udp,
        now,
        &mut out_b,
    );
    assert_eq!(reply, Reply::Drop, "the second waits");
    assert!(
        out_b.is_empty(),
        "nothing is answered while the AoR is busy"
    );
    assert!(second.next_woken().is_none());
    assert!(matches!(
        first.persisted(Ok(()), &a, &mut out_a),
        Reply::Send(..)
    ));
    let mut answers = Vec::new();
    let sinks = Sinks::default();
    drive::woken(
        &mut first,
        &sinks,
        &mut disk,
        now,
        &mut out_b,
        |_, reply, bytes| {
            answers.push((reply, String::from_utf8_lossy(bytes).into_owned()));
        },
    );
    assert_eq!(answers.len(), 1, "the REGISTER that waited, once");
    assert!(matches!(answers[0].0, Reply::Send(..)));
    assert!(answers[0].1.starts_with("SIP/2.0 200"), "{}", answers[0].1);
    assert_eq!(disk.records.len(), 1, "stored by the driver that woke it");
    let m = &shared.metrics;
    assert_eq!(m.requests("REGISTER"), 2, "each REGISTER counted once");
    assert_eq!(m.busy_waits.load(std::sync::atomic::Ordering::Relaxed), 1);
    let mut bound = Vec::new();
    shared
        .location
        .lookup("sip:bob@b.example", now.secs(), &mut bound);
    let mut contacts: Vec<&str> = bound.iter().map(|b| b.contact()).collect();
    contacts.sort_unstable();
    assert_eq!(
        contacts,
        ["sip:bob@10.0.2.20", "sip:bob@10.0.2.21"],
        "both changes stored"
    );
}

/// Bob registered at P2 with a contact named by the domain name `host`;
/// Alice, in the same domain, calls him through P2 over `link`.
fn call_to_a_named_contact(seed: u64, host: &'static str, link: Link) -> Sim {
    let mut sim = Sim::new(seed);
    sim.server(addr(P2), proxy_config("b.example", ("a.example", P1)), None);
    let zone = &mut sim.srv(addr(P2)).zone;
    zone.insert("bob-phone.b.example".into(), vec![addr(BOB)]);
    sim.phone(Phone::with_contact(
        addr(BOB),
        "bob",
        "b.example",
        addr(P2),
        host,
    ));
    sim.phone(Phone::new(addr(ALICE), "alice", "b.example", addr(P2)));
    sim.act(addr(BOB), |p, now, out| p.register(now, 3600, out));
    sim.run_for(secs(1));
    assert_eq!(sim.ph(addr(BOB)).finals(Method::Register), [200]);
    sim.link(addr(ALICE), addr(P2), link);
    sim.act(addr(ALICE), |p, now, out| {
        p.invite(now, "sip:bob@b.example", out)
    });
    sim.run_for(secs(40));
    sim
}

/// An external request the core parks a call on: Bob registered a contact
/// named by a domain name, so the proxy asks the resolver (once, however
/// many copies of the INVITE wait) and parks the INVITE; when the virtual
/// resolver answers, the production driver hands the parked requests in
/// again and the call completes. A name that does not resolve gets the
/// caller 503 instead of a hung transaction.
#[test]
fn a_call_to_a_contact_named_by_a_domain_waits_for_the_name_and_resumes() {
    for seed in 1..=5 {
        let mut sim = call_to_a_named_contact(seed, "bob-phone.b.example", LOSSY);
        let alice = sim.ph(addr(ALICE));
        assert_eq!(
            alice.finals(Method::Invite).first(),
            Some(&200),
            "seed {seed}"
        );
        let bob = sim.ph(addr(BOB));
        let invites = bob.received.iter().filter(|m| **m == Method::Invite);
        assert_eq!(invites.count(), 1, "seed {seed}");
        let p2 = sim.srv(addr(P2));
        assert_eq!(p2.asked, ["bob-phone.b.example"], "seed {seed}: asked once");
        let waits = &p2.core.shared().metrics.hop_waits;
        assert!(waits.load(std::sync::atomic::Ordering::Relaxed) >= 1);
        assert_eq!(p2.core.shared().names.parked(), (0, 0));
    }
    // Nowhere to be found: the caller is answered, nothing stays parked.
    let mut sim = call_to_a_named_contact(9, "gone.b.example", CLEAN);
    let finals = sim.ph(addr(ALICE)).finals(Method::Invite);
    assert!(matches!(finals.first(), Some(480 | 503)), "{finals:?}");
    assert_eq!(sim.srv(addr(P2)).asked, ["gone.b.example"]);
    assert_eq!(sim.srv(addr(P2)).core.shared().names.parked(), (0, 0));
}
