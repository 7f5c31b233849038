//! Answering side of a run: the built-in callee (a UAS that registers and
//! answers INVITE with 180 and 200, BYE with 200) and the null responder
//! (200 to every request at once, to measure the generator's own ceiling).

use crate::error::Error;
use sip_core::transaction::{Answered, Resend, TimerConfig};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sip_core::auth::Challenge;
use sip_core::digest;
use sip_core::message::Glance;
use sip_core::writer::{write_response_over, ResponseOptions};
use sip_core::{Header, HeaderName, Message, Method, StatusCode};
use socket2::{Domain, Protocol, Socket, Type};

use crate::engine::User;

/// How the responder answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A callee: INVITE → 180 + 200 (with SDP), ACK → nothing, others → 200.
    Callee,
    /// 200 to every request but ACK, at once.
    Null,
}

/// A running responder.
#[derive(Debug)]
pub struct Responder {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    unacked: Arc<[Mutex<Unacked>]>,
    threads: Vec<JoinHandle<()>>,
}

const SDP: &str = "v=0\r\no=- 2 2 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 40002 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n";

fn bind(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_port(true)?;
    let _ = s.set_recv_buffer_size(4 << 20);
    s.bind(&addr.into())?;
    let u: UdpSocket = s.into();
    u.set_read_timeout(Some(Duration::from_millis(50)))?;
    Ok(u)
}

impl Responder {
    /// Starts `threads` responder threads on `addr` (port 0 picks one).
    /// The null responder gives each thread its own `SO_REUSEPORT`
    /// socket, as a server's workers have. The callee's threads share one
    /// socket: a proxy sends every call from one address, which the
    /// kernel's port hash would hand to one thread, and a call's ACK or
    /// BYE may be read by another thread than its INVITE (the 2xx
    /// retransmission state is shared, sharded by Call-ID).
    pub fn start(addr: SocketAddr, mode: Mode, threads: usize) -> std::io::Result<Self> {
        let first = bind(addr)?;
        let addr = first.local_addr()?;
        let threads = threads.max(1);
        let mut sockets = Vec::with_capacity(threads);
        for _ in 1..threads {
            sockets.push(match mode {
                Mode::Callee => first.try_clone()?,
                Mode::Null => bind(addr)?,
            });
        }
        sockets.insert(0, first);
        let unacked: Arc<[Mutex<Unacked>]> = (0..threads).map(|_| Mutex::default()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let threads = sockets
            .into_iter()
            .enumerate()
            .map(|(i, sock)| {
                let shared = Shared {
                    stop: stop.clone(),
                    answered: answered.clone(),
                    unacked: unacked.clone(),
                };
                std::thread::Builder::new()
                    .name(format!("responder-{i}"))
                    .spawn(move || serve(&sock, mode, addr, i, &shared))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Self {
            addr,
            stop,
            answered,
            unacked,
            threads,
        })
    }

    /// The address it answers on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests answered so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// 2xx responses to INVITE sent and not yet acknowledged.
    pub fn unacknowledged(&self) -> usize {
        self.unacked.iter().map(|m| lock(m).by_call.len()).sum()
    }

    /// Stops the threads.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// 2xx responses to INVITE sent and not yet acknowledged: the UAS
/// retransmits them (T1 doubling up to T2) until the ACK or a BYE comes,
/// for at most 64·T1 (RFC 3261 §13.3.1.4) — a lost 200 must not leave the
/// caller waiting for its transaction to time out.
#[derive(Debug, Default)]
struct Unacked {
    by_call: std::collections::HashMap<String, (Vec<u8>, SocketAddr, Answered)>,
    due: std::collections::BinaryHeap<std::cmp::Reverse<(Instant, String)>>,
}

impl Unacked {
    fn add(&mut self, call_id: &str, bytes: &[u8], to: SocketAddr, now: Instant) {
        let timer = Answered::new(now, false, TimerConfig::RFC3261);
        if let Some(at) = timer.next_deadline() {
            self.due.push(std::cmp::Reverse((at, call_id.to_owned())));
        }
        self.by_call
            .insert(call_id.to_owned(), (bytes.to_vec(), to, timer));
    }

    fn acked(&mut self, call_id: &str) {
        self.by_call.remove(call_id);
    }

    /// Resends what is due.
    fn fire(&mut self, sock: &UdpSocket, now: Instant) {
        while let Some(std::cmp::Reverse((at, _))) = self.due.peek() {
            if *at > now {
                return;
            }
            let Some(std::cmp::Reverse((_, call_id))) = self.due.pop() else {
                return;
            };
            let Some((bytes, to, timer)) = self.by_call.get_mut(&call_id) else {
                continue;
            };
            match timer.on_timer(now) {
                Resend::Again => {
                    let _ = sock.send_to(bytes, *to);
                }
                Resend::GiveUp => {
                    self.by_call.remove(&call_id);
                    continue;
                }
                Resend::Wait => {}
            }
            if let Some(next) = timer.next_deadline() {
                self.due.push(std::cmp::Reverse((next, call_id)));
            }
        }
    }
}

/// What a responder's threads share.
struct Shared {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    /// One shard per thread; a call's state lives in its Call-ID's.
    unacked: Arc<[Mutex<Unacked>]>,
}

impl Shared {
    fn unacked(&self, call_id: &str) -> std::sync::MutexGuard<'_, Unacked> {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let h = BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
            .hash_one(call_id);
        lock(&self.unacked[(h % self.unacked.len() as u64) as usize])
    }
}

fn lock(m: &Mutex<Unacked>) -> std::sync::MutexGuard<'_, Unacked> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One responder thread: reads what is queued on `sock` (up to
/// [`sip_udp::BATCH`] datagrams a system call, waiting for the first)
/// and sends the batch's answers together, so that under load a thread
/// makes two system calls per batch instead of one per datagram.
fn serve(sock: &UdpSocket, mode: Mode, addr: SocketAddr, shard: usize, shared: &Shared) {
    let mut rx = sip_udp::RecvBatch::new();
    let mut tx = sip_udp::SendBatch::default();
    let tag = format!("uas{:x}", addr.port());
    let contact = format!("<sip:callee@{addr}>");
    while !shared.stop.load(Ordering::Relaxed) {
        lock(&shared.unacked[shard]).fire(sock, Instant::now());
        let Ok(n) = rx.recv(sock) else {
            continue;
        };
        for i in 0..n {
            if let Some((bytes, src)) = rx.get(i) {
                answer_datagram(bytes, src, mode, (&tag, &contact), shared, &mut tx);
            }
        }
        tx.flush(sock);
    }
}

/// Queues in `tx` the answers to the datagram `bytes` from `src` (none to
/// an ACK, a response or what does not parse). The callee reads by a
/// glance what its answers copy, and parses whole a request it does not
/// read plainly. The null responder parses every request whole, as the
/// server does: it is the floor the server is measured against, the same
/// parse with only the transport's work around it.
fn answer_datagram(
    bytes: &[u8],
    src: SocketAddr,
    mode: Mode,
    ours: (&str, &str),
    shared: &Shared,
    tx: &mut sip_udp::SendBatch,
) {
    let glance = match mode {
        Mode::Callee => Glance::read(bytes),
        Mode::Null => None,
    };
    if let Some(g) = glance {
        if let Some(method) = g.method {
            let asked = Asked {
                method,
                call_id: g.call_id,
                to_tagged: g.to_tag.is_some(),
                headers: || g.headers(),
            };
            answer_request(&asked, src, mode, ours, shared, tx);
        }
        return;
    }
    let Ok(req) = Message::parse(bytes) else {
        return;
    };
    if req.is_request() {
        let asked = Asked {
            method: req.method(),
            call_id: req.call_id(),
            to_tagged: req.to().tag().is_some(),
            headers: || req.headers(),
        };
        answer_request(&asked, src, mode, ours, shared, tx);
    }
}

/// A request as the callee reads it: what its answers need.
struct Asked<'a, F> {
    method: Method<'a>,
    call_id: &'a str,
    to_tagged: bool,
    /// Its header fields as written, from the first.
    headers: F,
}

fn answer_request<'a, F, I>(
    req: &Asked<'a, F>,
    src: SocketAddr,
    mode: Mode,
    (tag, contact): (&str, &str),
    shared: &Shared,
    tx: &mut sip_udp::SendBatch,
) where
    F: Fn() -> I,
    I: Iterator<Item = Header<'a>>,
{
    if matches!(req.method, Method::Ack | Method::Bye) {
        shared.unacked(req.call_id).acked(req.call_id);
    }
    if req.method == Method::Ack {
        return;
    }
    let invite = req.method == Method::Invite;
    let mut queue = |status: StatusCode, body: &[u8]| {
        let out = tx.next_buf();
        out.clear();
        let extra = [("Contact", contact)];
        let opts = ResponseOptions {
            to_tag: Some(tag),
            copy_record_route: true,
            extra: if invite { &extra } else { &[] },
            content_type: (!body.is_empty()).then_some("application/sdp"),
            body,
            ..Default::default()
        };
        write_response_over(out, (req.headers)(), req.to_tagged, status, &opts);
        if status == StatusCode::OK && mode == Mode::Callee && invite {
            // Held before it is sent: the ACK it draws may be read by
            // another thread at once, and must find it.
            shared
                .unacked(req.call_id)
                .add(req.call_id, out, src, Instant::now());
        }
        tx.commit(src);
    };
    if mode == Mode::Callee && invite {
        queue(StatusCode::RINGING, b"");
        queue(StatusCode::OK, SDP.as_bytes());
    } else if invite {
        queue(StatusCode::OK, SDP.as_bytes());
    } else {
        queue(StatusCode::OK, b"");
    }
    shared.answered.fetch_add(1, Ordering::Relaxed);
}

/// Registers `user` at `server` with contact `contact_addr` as its only
/// binding (earlier ones, e.g. a previous run's callee, are removed
/// first), answering digest challenges: the callee before an invite run.
pub fn register(
    server: SocketAddr,
    user: &User,
    contact_addr: SocketAddr,
    expires: u32,
) -> Result<(), Error> {
    register_uri(
        server,
        user,
        &format!("<sip:{}@{contact_addr}>", user.name),
        expires,
    )
}

/// Like [`register`] with a Contact value of the caller's choosing (e.g.
/// a `sips:` URI): stale bindings are cleared first.
pub fn register_uri(
    server: SocketAddr,
    user: &User,
    contact: &str,
    expires: u32,
) -> Result<(), Error> {
    register_in(server, &server.to_string(), user, contact, expires)
}

/// Like [`register_uri`] for the address-of-record `user@domain` (a
/// server that serves a domain name rather than its address).
pub fn register_in(
    server: SocketAddr,
    domain: &str,
    user: &User,
    contact: &str,
    expires: u32,
) -> Result<(), Error> {
    register_contact(server, domain, user, "*", 0, 1)?;
    register_contact(server, domain, user, contact, expires, 10)
}

fn register_contact(
    server: SocketAddr,
    domain: &str,
    user: &User,
    contact: &str,
    expires: u32,
    first_cseq: u32,
) -> Result<(), Error> {
    let sock = UdpSocket::bind(SocketAddr::new(server.ip(), 0)).map_err(Error::io("socket"))?;
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .map_err(Error::io("socket"))?;
    let local = sock.local_addr().map_err(Error::io("socket"))?;
    let uri = format!("sip:{domain}");
    let mut authorization = String::new();
    for cseq in first_cseq..first_cseq + 3 {
        let msg = format!(
            "REGISTER {uri} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK-reg{cseq}-{}\r\nMax-Forwards: 70\r\nFrom: <sip:{name}@{domain}>;tag=r{cseq}\r\nTo: <sip:{name}@{domain}>\r\nCall-ID: callee-{}@{local}\r\nCSeq: {cseq} REGISTER\r\nContact: {contact}\r\nExpires: {expires}\r\n{authorization}Content-Length: 0\r\n\r\n",
            local.port(),
            local.port(),
            name = user.name,
        );
        let response = ask(&sock, msg.as_bytes(), server)?;
        let r = Message::parse(&response)
            .map_err(|e| Error::peer(server, format!("bad response: {e}")))?;
        match r.status().map(StatusCode::as_u16) {
            Some(200) => return Ok(()),
            Some(code @ (401 | 407)) => {
                let name = if code == 401 {
                    HeaderName::WwwAuthenticate
                } else {
                    HeaderName::ProxyAuthenticate
                };
                let header = if code == 401 {
                    "Authorization"
                } else {
                    "Proxy-Authorization"
                };
                authorization = r
                    .headers_named(name)
                    .find_map(|h| answer(h.value, header, user, &uri))
                    .ok_or_else(|| {
                        Error::peer(server, "challenge without a usable digest offer")
                    })?;
            }
            other => {
                return Err(Error::peer(
                    server,
                    format!("REGISTER for {} answered {other:?}", user.name),
                ))
            }
        }
    }
    Err(Error::peer(
        server,
        format!(
            "REGISTER for {} kept being challenged (wrong password?)",
            user.name
        ),
    ))
}

/// Sends `msg` and waits for a final response, retransmitting (T1 doubling).
/// Waits (at most 5 s) until `via` routes a request for `user` at its own
/// address to a callee that answers it: an OPTIONS, sent again every
/// 100 ms while the answer is not 200 (say 404 while `via` has not yet
/// learnt of a registration made at another node). Gives up with what it
/// last heard; the calls that follow then report what went wrong.
pub fn await_reachable(via: SocketAddr, user: &str) -> Result<(), String> {
    let sock = UdpSocket::bind(SocketAddr::new(via.ip(), 0)).map_err(|e| e.to_string())?;
    let local = sock.local_addr().map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 65_535];
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = None;
    for n in 0u32.. {
        if Instant::now() >= deadline {
            break;
        }
        let msg = format!(
            "OPTIONS sip:{user}@{via} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK-probe{n}-{}\r\nMax-Forwards: 70\r\nFrom: <sip:probe@{local}>;tag=p{n}\r\nTo: <sip:{user}@{via}>\r\nCall-ID: probe-{}@{local}\r\nCSeq: {n} OPTIONS\r\nContent-Length: 0\r\n\r\n",
            local.port(),
            local.port(),
        );
        sock.send_to(msg.as_bytes(), via)
            .map_err(|e| format!("sending to {via}: {e}"))?;
        let until = Instant::now() + Duration::from_millis(100);
        while Instant::now() < until {
            let Ok(got) = sock.recv(&mut buf) else {
                break;
            };
            let status = Message::parse(&buf[..got]).ok().and_then(|m| m.status());
            match status.map(StatusCode::as_u16) {
                Some(200) => return Ok(()),
                Some(s) if s >= 200 => {
                    // Not routed yet: wait out the rest of the 100 ms.
                    last = Some(s);
                    std::thread::sleep(until.saturating_duration_since(Instant::now()));
                    break;
                }
                _ => {}
            }
        }
    }
    Err(match last {
        Some(s) => format!("{via} still answers {s} to an OPTIONS for {user} after 5 s"),
        None => format!("{via} did not answer an OPTIONS for {user} in 5 s"),
    })
}

fn ask(sock: &UdpSocket, msg: &[u8], server: SocketAddr) -> Result<Vec<u8>, Error> {
    let mut buf = vec![0u8; 65_535];
    let deadline = Instant::now() + Duration::from_secs(8);
    while Instant::now() < deadline {
        sock.send_to(msg, server).map_err(Error::io("sending"))?;
        let until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < until {
            if let Ok(n) = sock.recv(&mut buf) {
                if Message::parse(&buf[..n])
                    .ok()
                    .and_then(|m| m.status())
                    .is_some_and(|s| s.is_final())
                {
                    return Ok(buf[..n].to_vec());
                }
            }
        }
    }
    Err(Error::Timeout(format!("no answer from {server}")))
}

fn answer(challenge: &str, header: &str, user: &User, uri: &str) -> Option<String> {
    let c = Challenge::parse(challenge).ok()?;
    let value = digest::authorization(
        &c,
        &digest::Answerer::new(&user.name, &user.password),
        "REGISTER",
        uri,
        "5ea1ca11",
        1,
    )?;
    Some(format!("{header}: {value}\r\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, call: u32, local: SocketAddr, to: SocketAddr) -> String {
        format!(
            "{method} sip:callee@{to} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK-{method}{call}\r\nMax-Forwards: 70\r\nFrom: <sip:a@{local}>;tag=a{call}\r\nTo: <sip:callee@{to}>\r\nCall-ID: c{call}@{local}\r\nCSeq: 1 {method}\r\nContent-Length: 0\r\n\r\n"
        )
    }

    /// Everything from one address, as a proxy sends it: every INVITE is
    /// answered 180 then 200, and every ACK, whichever thread reads it,
    /// finds its 2xx (none is left to be retransmitted).
    #[test]
    fn a_callee_on_four_threads_answers_one_peer_and_holds_no_acknowledged_2xx() {
        let callee = Responder::start("127.0.0.1:0".parse().unwrap(), Mode::Callee, 4).unwrap();
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let (local, to) = (sock.local_addr().unwrap(), callee.addr());
        let mut buf = vec![0u8; 65_535];
        for call in 0..200 {
            sock.send_to(request("INVITE", call, local, to).as_bytes(), to)
                .unwrap();
            let mut statuses = Vec::new();
            while statuses.last() != Some(&200) {
                let n = sock.recv(&mut buf).expect("an answer");
                let m = Message::parse(&buf[..n]).unwrap();
                assert_eq!(m.call_id(), format!("c{call}@{local}"));
                statuses.push(m.status().unwrap().as_u16());
            }
            assert_eq!(statuses, [180, 200]);
            sock.send_to(request("ACK", call, local, to).as_bytes(), to)
                .unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while callee.unacknowledged() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(callee.unacknowledged(), 0);
        assert_eq!(callee.answered(), 200);
        callee.stop();
    }

    /// The null responder parses whole, as the server does (a request
    /// with a broken Via draws nothing); the callee reads by a glance
    /// (it answers it, copying the Via as written).
    #[test]
    fn the_null_responder_parses_whole_and_the_callee_glances() {
        for (mode, first_answered) in [(Mode::Null, 2), (Mode::Callee, 1)] {
            let r = Responder::start("127.0.0.1:0".parse().unwrap(), mode, 1).unwrap();
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let (local, to) = (sock.local_addr().unwrap(), r.addr());
            let broken = request("OPTIONS", 1, local, to).replace("Via: SIP/2.0/UDP ", "Via: ");
            assert!(Message::parse(broken.as_bytes()).is_err());
            sock.send_to(broken.as_bytes(), to).unwrap();
            sock.send_to(request("OPTIONS", 2, local, to).as_bytes(), to)
                .unwrap();
            let mut buf = vec![0u8; 65_535];
            let n = sock.recv(&mut buf).expect("an answer");
            let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
            assert!(
                answer.contains(&format!("Call-ID: c{first_answered}@")),
                "{mode:?}: {answer}"
            );
            r.stop();
        }
    }
}
