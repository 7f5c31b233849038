//! Simulation: server cores and phones on a virtual network with virtual
//! time (in the manner of quinn-proto's test `Pair`).
//!
//! The cores are the real `sipsec_server::Core`, driven by the production
//! driver's functions (`io::drive`: `handle` stores what a decision asks
//! on a virtual disk before its answer goes, `on_timer` runs the
//! transactions, `resolved` hands in again the requests a name kept
//! waiting), with a virtual resolver answering from a zone after a delay.
//! The phones use
//! sip-core's RFC 3261 §17 transaction machines. Every link can lose,
//! duplicate, delay and (through jitter) reorder datagrams; every choice
//! comes from one seeded generator, so a run is a function of its seed and
//! takes milliseconds of real time however many virtual minutes it spans.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sip_core::auth::Challenge;
use sip_core::digest::{self, Algorithm, Qop, ResponseInput};
use sip_core::transaction::{Answered, Resend, ServerInvite, TimerConfig};
use sip_core::writer::{write_response, ResponseOptions};
use sip_core::{HeaderName, Message, Method, StatusCode};
use sipsec_server::io::drive::{self, Store};
use sipsec_server::proto::auth::{Authenticator, NonceKey};
use sipsec_server::proto::location::{Binding, MemoryLocation, Record, StoreError};
use sipsec_server::proto::users::{UserEntry, Users};
use sipsec_server::{Config, Core, Mode, Now, Reply, Shared, Transport};

/// Unix time at the start of every run (ms).
const EPOCH_MS: u64 = 1_800_000_000_000;
const T: TimerConfig = TimerConfig::RFC3261;

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
            Some(store),
            bytes,
            from,
            Transport::Udp,
            now,
            &mut buf,
        );
        carry(&self.core, reply, &buf, out);
        self.core.extra().wake().names
    }

    fn wake(&mut self, now: Now, out: &mut Vec<(SocketAddr, Vec<u8>)>) -> bool {
        drive::on_timer(&mut self.core, now);
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

struct Client {
    method: Method<'static>,
    machine: sip_core::transaction::Client,
    request: Vec<u8>,
    dest: SocketAddr,
    /// The ACK for a 2xx, sent again for each 2xx retransmission.
    ack: Option<Vec<u8>>,
}

/// An INVITE this phone is answering.
struct Incoming {
    machine: ServerInvite,
    request: Vec<u8>,
    reply_to: SocketAddr,
    last: Vec<u8>,
    ok_at: Option<Instant>,
    /// 2xx retransmission (RFC 3261 §13.3.1.4) until the ACK or 64·T1.
    retransmit: Option<Answered>,
}

/// A simulated phone (user agent) using sip-core's transactions.
struct Phone {
    addr: SocketAddr,
    user: &'static str,
    domain: &'static str,
    password: &'static str,
    /// Outbound proxy / registrar: where out-of-dialog requests go.
    proxy: SocketAddr,
    answer: Answer,
    clients: HashMap<String, Client>,
    incoming: HashMap<String, Incoming>,
    /// Non-INVITE requests answered, by branch: the answer, resent for
    /// retransmissions.
    answered: HashMap<String, (Vec<u8>, SocketAddr)>,
    next_branch: u64,
    cseq: u32,
    /// Every response delivered to this phone's client transactions.
    responses: Vec<(Method<'static>, u16)>,
    /// Client transactions that timed out.
    timeouts: Vec<Method<'static>>,
    /// Requests received as UAS, by method (retransmissions not counted).
    received: Vec<Method<'static>>,
    /// The confirmed dialog: remote target, route set, remote tag.
    dialog: Option<(String, Vec<String>, String)>,
    /// The last INVITE sent (for CANCEL).
    invite: Option<(String, Vec<u8>, SocketAddr)>,
    /// The host the phone registers in its Contact (default: its address).
    contact_host: Option<&'static str>,
}

impl Phone {
    fn new(addr: SocketAddr, user: &'static str, domain: &'static str, proxy: SocketAddr) -> Self {
        Self {
            addr,
            user,
            domain,
            password: "pw",
            proxy,
            answer: Answer::Ring(Some(Duration::from_secs(2))),
            clients: HashMap::new(),
            incoming: HashMap::new(),
            answered: HashMap::new(),
            next_branch: 1,
            cseq: 0,
            responses: Vec::new(),
            timeouts: Vec::new(),
            received: Vec::new(),
            dialog: None,
            invite: None,
            contact_host: None,
        }
    }

    fn branch(&mut self) -> String {
        self.next_branch += 1;
        format!("z9hG4bK{}x{}", self.user, self.next_branch)
    }

    fn finals(&self, method: Method) -> Vec<u16> {
        self.responses
            .iter()
            .filter(|(m, s)| *m == method && *s >= 200)
            .map(|(_, s)| *s)
            .collect()
    }

    fn start(
        &mut self,
        now: Instant,
        method: Method<'static>,
        branch: String,
        request: Vec<u8>,
        dest: SocketAddr,
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        let machine = sip_core::transaction::Client::new(method == Method::Invite, now, false, T);
        out.push((dest, request.clone()));
        self.clients.insert(
            branch,
            Client {
                method,
                machine,
                request,
                dest,
                ack: None,
            },
        );
    }

    fn register(&mut self, now: Instant, expires: u32, out: &mut Vec<(SocketAddr, Vec<u8>)>) {
        self.register_with(now, expires, "", out);
    }

    fn register_with(
        &mut self,
        now: Instant,
        expires: u32,
        authorization: &str,
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        self.cseq += 1;
        let b = self.branch();
        let (user, domain, addr, cseq) = (self.user, self.domain, self.addr, self.cseq);
        let contact = match self.contact_host {
            Some(host) => host.to_owned(),
            None => addr.to_string(),
        };
        let req = format!(
            "REGISTER sip:{domain} SIP/2.0\r\nVia: SIP/2.0/UDP {addr};branch={b};rport\r\nMax-Forwards: 70\r\nFrom: <sip:{user}@{domain}>;tag=r{user}\r\nTo: <sip:{user}@{domain}>\r\nCall-ID: reg-{user}\r\nCSeq: {cseq} REGISTER\r\nContact: <sip:{user}@{contact}>\r\nExpires: {expires}\r\n{authorization}Content-Length: 0\r\n\r\n"
        );
        self.start(now, Method::Register, b, req.into_bytes(), self.proxy, out);
    }

    fn invite(&mut self, now: Instant, target: &str, out: &mut Vec<(SocketAddr, Vec<u8>)>) {
        self.cseq += 1;
        let b = self.branch();
        let (user, domain, addr, cseq) = (self.user, self.domain, self.addr, self.cseq);
        let req = format!(
            "INVITE {target} SIP/2.0\r\nVia: SIP/2.0/UDP {addr};branch={b};rport\r\nMax-Forwards: 70\r\nFrom: <sip:{user}@{domain}>;tag=i{user}\r\nTo: <{target}>\r\nCall-ID: call-{user}\r\nCSeq: {cseq} INVITE\r\nContact: <sip:{user}@{addr}>\r\nContent-Length: 0\r\n\r\n"
        )
        .into_bytes();
        self.invite = Some((b.clone(), req.clone(), self.proxy));
        self.start(now, Method::Invite, b, req, self.proxy, out);
    }

    /// CANCEL for the last INVITE (RFC 3261 §9.1): its branch, Call-ID,
    /// From, To and CSeq number, to the same place.
    fn cancel(&mut self, now: Instant, out: &mut Vec<(SocketAddr, Vec<u8>)>) {
        let (branch, invite, dest) = self.invite.clone().expect("an INVITE to cancel");
        let req = same_transaction(&invite, "CANCEL", None);
        // The CANCEL is its own transaction, matched by method too.
        self.start(
            now,
            Method::Cancel,
            format!("{branch}/cancel"),
            req.into_bytes(),
            dest,
            out,
        );
    }

    /// An in-dialog request (BYE) along the route set.
    fn bye(&mut self, now: Instant, out: &mut Vec<(SocketAddr, Vec<u8>)>) {
        let (target, routes, tag) = self.dialog.clone().expect("a dialog");
        self.cseq += 1;
        let b = self.branch();
        let (user, domain, addr, cseq) = (self.user, self.domain, self.addr, self.cseq);
        let route: String = routes.iter().map(|r| format!("Route: {r}\r\n")).collect();
        let invite = self.invite.as_ref().expect("the INVITE");
        let to = Message::parse(&invite.1)
            .expect("own INVITE")
            .header(HeaderName::To)
            .expect("To")
            .to_owned();
        let req = format!(
            "BYE {target} SIP/2.0\r\nVia: SIP/2.0/UDP {addr};branch={b};rport\r\nMax-Forwards: 70\r\n{route}From: <sip:{user}@{domain}>;tag=i{user}\r\nTo: {to};tag={tag}\r\nCall-ID: call-{user}\r\nCSeq: {cseq} BYE\r\nContent-Length: 0\r\n\r\n"
        );
        let dest = routes
            .first()
            .map_or_else(|| uri_addr(&target), |r| uri_addr(r));
        self.start(now, Method::Bye, b, req.into_bytes(), dest, out);
    }

    fn receive(
        &mut self,
        now: Instant,
        from: SocketAddr,
        bytes: &[u8],
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        let Ok(msg) = Message::parse(bytes) else {
            panic!("{} got garbage from {from}", self.user);
        };
        if msg.is_request() {
            self.request(now, &msg, out);
            return;
        }
        let status = msg.status().expect("response");
        let mut key = msg.top_via().branch().unwrap_or("").to_owned();
        if msg.cseq().method == Method::Cancel {
            key.push_str("/cancel");
        }
        let Some(c) = self.clients.get_mut(&key) else {
            return; // stray or after the transaction ended
        };
        let o = c.machine.on_response(status, now);
        let method = c.method;
        if o.deliver {
            self.responses.push((method, status.as_u16()));
        }
        if o.send_ack {
            // §17.1.1.3: ACK for a non-2xx final, same branch, hop by hop.
            let ack = same_transaction(&c.request, "ACK", msg.header(HeaderName::To));
            out.push((c.dest, ack.into_bytes()));
        }
        if method == Method::Invite && status.is_success() && o.deliver {
            // §13.2.2.4: the UAC core ACKs every 2xx, end to end.
            if c.ack.is_none() {
                let target = msg
                    .contacts()
                    .next()
                    .map(|ct| ct.addr.uri().as_str().to_owned())
                    .expect("2xx has a Contact");
                let mut routes: Vec<String> = msg
                    .headers_named(HeaderName::RecordRoute)
                    .flat_map(|h| h.value.split(','))
                    .map(|r| r.trim().to_owned())
                    .collect();
                routes.reverse();
                let tag = msg.to().tag().expect("2xx To tag").to_owned();
                let route: String = routes.iter().map(|r| format!("Route: {r}\r\n")).collect();
                let req = Message::parse(&c.request).expect("own request");
                let ack = format!(
                    "ACK {target} SIP/2.0\r\nVia: SIP/2.0/UDP {};branch={}ack;rport\r\nMax-Forwards: 70\r\n{route}From: {}\r\nTo: {}\r\nCall-ID: {}\r\nCSeq: {} ACK\r\nContent-Length: 0\r\n\r\n",
                    self.addr,
                    key,
                    req.header(HeaderName::From).expect("From"),
                    msg.header(HeaderName::To).expect("To"),
                    req.call_id(),
                    req.cseq().seq,
                );
                let dest = routes
                    .first()
                    .map_or_else(|| uri_addr(&target), |r| uri_addr(r));
                c.ack = Some(ack.clone().into_bytes());
                self.dialog = Some((target, routes, tag));
                out.push((dest, ack.into_bytes()));
            } else if let (Some(ack), Some((target, routes, _))) = (&c.ack, &self.dialog) {
                let dest = routes
                    .first()
                    .map_or_else(|| uri_addr(target), |r| uri_addr(r));
                out.push((dest, ack.clone()));
            }
        }
    }

    /// As UAS.
    fn request(&mut self, now: Instant, msg: &Message<'_>, out: &mut Vec<(SocketAddr, Vec<u8>)>) {
        let branch = msg.top_via().branch().unwrap_or("").to_owned();
        let reply_to = via_addr(msg);
        match msg.method() {
            Method::Invite => {
                if let Some(inc) = self.incoming.get_mut(&branch) {
                    if inc.machine.on_request_retransmission().retransmit {
                        out.push((inc.reply_to, inc.last.clone()));
                    }
                    return;
                }
                self.received.push(Method::Invite);
                let mut machine = ServerInvite::new(false, T);
                let ringing = self.response(msg, StatusCode::RINGING);
                machine.on_tu_response(StatusCode::RINGING, now);
                out.push((reply_to, ringing.clone()));
                let Answer::Ring(after) = self.answer;
                self.incoming.insert(
                    branch,
                    Incoming {
                        machine,
                        request: msg.as_bytes().to_vec(),
                        reply_to,
                        last: ringing,
                        ok_at: after.map(|d| now + d),
                        retransmit: None,
                    },
                );
            }
            Method::Ack => {
                self.received.push(Method::Ack);
                // A 2xx ACK has its own branch: it stops every 2xx
                // retransmission of this dialog.
                for inc in self.incoming.values_mut() {
                    inc.retransmit = None;
                    inc.machine.on_ack(now);
                }
            }
            Method::Cancel => {
                if let Some((resp, to)) = self.answered.get(&format!("{branch}/cancel")) {
                    out.push((*to, resp.clone()));
                    return;
                }
                self.received.push(Method::Cancel);
                let ok = self.response(msg, StatusCode::OK);
                out.push((reply_to, ok.clone()));
                self.answered
                    .insert(format!("{branch}/cancel"), (ok, reply_to));
                let inc = self.incoming.get_mut(&branch);
                if let Some(inc) = inc.filter(|i| i.retransmit.is_none()) {
                    let req = inc.request.clone();
                    let invite = Message::parse(&req).expect("kept INVITE");
                    let terminated = self.response(&invite, StatusCode::REQUEST_TERMINATED);
                    let inc = self.incoming.get_mut(&branch).expect("present");
                    inc.ok_at = None;
                    if inc
                        .machine
                        .on_tu_response(StatusCode::REQUEST_TERMINATED, now)
                        .send_response
                    {
                        inc.last = terminated.clone();
                        out.push((inc.reply_to, terminated));
                    }
                }
            }
            other => {
                if let Some((resp, to)) = self.answered.get(&branch) {
                    out.push((*to, resp.clone()));
                    return;
                }
                self.received.push(match other {
                    Method::Bye => Method::Bye,
                    Method::Options => Method::Options,
                    m => panic!("unexpected {m:?}"),
                });
                let ok = self.response(msg, StatusCode::OK);
                out.push((reply_to, ok.clone()));
                self.answered.insert(branch, (ok, reply_to));
            }
        }
    }

    fn response(&self, req: &Message<'_>, status: StatusCode) -> Vec<u8> {
        let contact = format!("Contact: <sip:{}@{}>\r\n", self.user, self.addr);
        let mut out = Vec::new();
        write_response(
            &mut out,
            req,
            status,
            &ResponseOptions {
                to_tag: Some("b1"),
                copy_record_route: req.method() == Method::Invite,
                raw_headers: if req.method() == Method::Invite {
                    &contact
                } else {
                    ""
                },
                ..Default::default()
            },
        );
        out
    }

    fn wake(&mut self, now: Instant, out: &mut Vec<(SocketAddr, Vec<u8>)>) {
        let mut ended = Vec::new();
        for (key, c) in &mut self.clients {
            let o = c.machine.on_timer(now);
            if o.retransmit {
                out.push((c.dest, c.request.clone()));
            }
            if o.timeout {
                self.timeouts.push(c.method);
            }
            if o.terminated {
                ended.push(key.clone());
            }
        }
        for k in ended {
            self.clients.remove(&k);
        }
        let mut answers = Vec::new();
        for (key, inc) in &mut self.incoming {
            if inc.ok_at.is_some_and(|t| now >= t) {
                inc.ok_at = None;
                answers.push(key.clone());
            }
            let o = inc.machine.on_timer(now);
            if o.retransmit {
                out.push((inc.reply_to, inc.last.clone()));
            }
            match inc.retransmit.as_mut().map(|r| r.on_timer(now)) {
                Some(Resend::Again) => out.push((inc.reply_to, inc.last.clone())),
                Some(Resend::GiveUp) => inc.retransmit = None,
                _ => {}
            }
        }
        for key in answers {
            let req = self.incoming[&key].request.clone();
            let invite = Message::parse(&req).expect("kept INVITE");
            let ok = self.response(&invite, StatusCode::OK);
            let inc = self.incoming.get_mut(&key).expect("present");
            inc.machine.on_tu_response(StatusCode::OK, now);
            inc.last = ok.clone();
            inc.retransmit = Some(Answered::new(now, false, T));
            out.push((inc.reply_to, ok));
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        let clients = self
            .clients
            .values()
            .filter_map(|c| c.machine.next_deadline());
        let incoming = self.incoming.values().flat_map(|i| {
            [
                i.ok_at,
                i.machine.next_deadline(),
                i.retransmit.as_ref().and_then(Answered::next_deadline),
            ]
            .into_iter()
            .flatten()
        });
        clients.chain(incoming).min()
    }
}

/// A request in the transaction of `request` (RFC 3261 §9.1 CANCEL,
/// §17.1.1.3 ACK for a non-2xx): its Request-URI, top Via, From,
/// Call-ID and CSeq number; `to` replaces its To (the answer's, with tag).
fn same_transaction(request: &[u8], method: &str, to: Option<&str>) -> String {
    let m = Message::parse(request).expect("own request parses");
    format!(
        "{method} {} SIP/2.0\r\nVia: {}\r\nMax-Forwards: 70\r\nFrom: {}\r\nTo: {}\r\nCall-ID: {}\r\nCSeq: {} {method}\r\nContent-Length: 0\r\n\r\n",
        m.request_uri().expect("request").as_str(),
        m.top_via().as_str(),
        m.header(HeaderName::From).expect("From"),
        to.or(m.header(HeaderName::To)).expect("To"),
        m.call_id(),
        m.cseq().seq,
    )
}

/// Where a SIP URI (or `<URI;lr>`) points: IP literals only.
fn uri_addr(uri: &str) -> SocketAddr {
    let u = uri.trim_start_matches('<');
    let u = u.split(['>', ';']).next().expect("uri");
    let host = u
        .rsplit('@')
        .next()
        .expect("host")
        .trim_start_matches("sip:");
    if host.contains(':') {
        addr(host)
    } else {
        addr(&format!("{host}:5060"))
    }
}

/// Where a response to `req` goes (RFC 3261 §18.2.2, with rport).
fn via_addr(req: &Message<'_>) -> SocketAddr {
    let v = req.top_via();
    let host = v
        .received()
        .map(str::to_owned)
        .unwrap_or_else(|| v.host().to_string());
    let port = match v.rport() {
        Some(Some(p)) => p,
        _ => v.port().unwrap_or(5060),
    };
    addr(&format!("{host}:{port}"))
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
        assert_eq!(bound[0].contact, format!("sip:bob@{BOB}"));
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
        assert!(alice.dialog.is_some());
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

/// An Authorization header for `challenge` (a 401's WWW-Authenticate).
fn authorization(challenge: &str, user: &str, password: &str, uri: &str) -> String {
    let c = Challenge::parse(challenge).expect("challenge parses");
    let alg = Algorithm::from_token(c.algorithm.unwrap_or("MD5")).expect("known algorithm");
    let realm = c.realm.expect("realm");
    let nonce = c.nonce.expect("nonce");
    let ha1 = digest::ha1(alg, user, realm, password);
    let resp = digest::response(&ResponseInput {
        algorithm: alg,
        ha1: &ha1,
        nonce,
        cnonce: "c0ffee",
        nc: "00000001",
        qop: Some(Qop::Auth),
        method: "REGISTER",
        uri,
        body: b"",
    });
    format!(
        "Authorization: Digest username=\"{user}\", realm=\"{realm}\", nonce=\"{nonce}\", uri=\"{uri}\", response=\"{resp}\", algorithm={}, qop=auth, nc=00000001, cnonce=\"c0ffee\"\r\n",
        alg.as_str()
    )
}

#[test]
fn a_replayed_authorization_is_refused() {
    let mut sim = Sim::new(5);
    let mut users = Users::default();
    users
        .insert(
            "bob",
            "b.example",
            UserEntry::from_password("bob", "b.example", "pw"),
        )
        .expect("user");
    let auth = Authenticator::new(
        "b.example",
        NonceKey::from_secret([7; 32], 300),
        users,
        &[Algorithm::Md5],
        sipsec_server::proto::auth::NcLimits::of(1 << 12),
        std::hash::RandomState::new(),
    );
    let registrar = Config {
        mode: Mode::Registrar,
        auth: true,
        realm: "b.example".into(),
        domains: vec!["b.example".into()],
        ..Config::default()
    };
    sim.server(addr(P2), registrar, Some(auth));
    sim.phone(Phone::new(addr(BOB), "bob", "b.example", addr(P2)));
    sim.act(addr(BOB), |p, now, out| p.register(now, 600, out));
    sim.run_for(secs(1));
    assert_eq!(sim.ph(addr(BOB)).finals(Method::Register), [401]);
    let challenge = sim
        .seen
        .iter()
        .rev()
        .find_map(|(_, to, b)| {
            let m = Message::parse(b).ok()?;
            (*to == addr(BOB) && m.status()?.as_u16() == 401)
                .then(|| m.header(HeaderName::WwwAuthenticate).map(str::to_owned))?
        })
        .expect("a challenge");
    let password = sim.ph(addr(BOB)).password;
    let creds = authorization(&challenge, "bob", password, "sip:b.example");
    sim.act(addr(BOB), |p, now, out| {
        p.register_with(now, 600, &creds, out)
    });
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
    assert_eq!(bound[0].contact, format!("sip:bob@{BOB}"));
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
    sim.ph(addr(BOB)).addr = addr("10.0.2.21:5060");
    let bob = sim.nodes.remove(&addr(BOB)).expect("bob");
    sim.nodes.insert(addr("10.0.2.21:5060"), bob);
    let moved = addr("10.0.2.21:5060");
    sim.act(moved, |p, now, out| p.register(now, 600, out));
    sim.run_for(secs(1));
    assert_eq!(sim.ph(moved).finals(Method::Register), [200, 500]);
    let now = sim.now();
    let bound = sim.srv(addr(P2)).lookup("sip:bob@b.example", now);
    assert_eq!(bound.len(), 1, "only what was stored: {bound:?}");
    assert_eq!(bound[0].contact, format!("sip:bob@{BOB}"));
    assert_eq!(sim.srv(addr(P2)).journal.records.len(), 1);
    // The AoR is not left busy: once the disk has room the change goes in.
    sim.srv(addr(P2)).journal.full = false;
    sim.act(moved, |p, now, out| p.register(now, 600, out));
    sim.run_for(secs(1));
    assert_eq!(sim.ph(moved).finals(Method::Register), [200, 500, 200]);
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
/// an AoR whose change is still being stored by the other is handed back
/// (`Reply::Retry`), and when handed in again it is stored and answered
/// once, admitted and counted once.
#[test]
fn a_register_that_meets_a_change_in_flight_is_handed_in_again_and_counted_once() {
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
    assert_eq!(
        first.handle(&a, src, Transport::Udp, now, &mut out_a),
        Reply::Persist
    );
    assert_eq!(
        second.handle(&b, src, Transport::Udp, now, &mut out_b),
        Reply::Retry
    );
    assert!(
        out_b.is_empty(),
        "nothing is answered while the AoR is busy"
    );
    // Still busy: handed back again, and not counted again.
    assert_eq!(
        second.handle_again(&b, src, Transport::Udp, now, &mut out_b),
        Reply::Retry
    );
    assert!(matches!(
        first.persisted(Ok(()), &a, &mut out_a),
        Reply::Send(..)
    ));
    assert_eq!(
        second.handle_again(&b, src, Transport::Udp, now, &mut out_b),
        Reply::Persist
    );
    assert!(matches!(
        second.persisted(Ok(()), &b, &mut out_b),
        Reply::Send(..)
    ));
    assert!(String::from_utf8_lossy(&out_b).starts_with("SIP/2.0 200"));
    assert_eq!(
        shared.metrics.requests("REGISTER"),
        2,
        "each REGISTER counted once"
    );
    let mut bound = Vec::new();
    shared
        .location
        .lookup("sip:bob@b.example", now.secs(), &mut bound);
    let mut contacts: Vec<&str> = bound.iter().map(|b| b.contact.as_str()).collect();
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
    let mut bob = Phone::new(addr(BOB), "bob", "b.example", addr(P2));
    bob.contact_host = Some(host);
    sim.phone(bob);
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
