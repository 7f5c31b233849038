//! The connection layer: TCP and TLS (RFC 3261 §18.3, §26.2) served by a
//! few reactor threads (mio, edge-triggered epoll), none per connection.
//!
//! Each connection lives on one reactor, which alone reads it, frames
//! its SIP messages (sip-core) and hands them to that reactor's core.
//! Anyone may send on it: a send appends to the connection's bounded
//! outbound queue (for TLS, rustls's own record buffer under a limit) and
//! writes what the socket takes without blocking; the reactor writes the
//! rest when the socket drains. A peer that lets its queue fill is closed
//! as a slow reader, so no peer can stall a worker or another peer.
//!
//! Deadlines are absolute and checked on every reactor turn: a TLS
//! handshake must finish within its timeout of the connection opening, a
//! SIP message within its timeout of its first byte, and a silent
//! connection is closed after the idle timeout. Connections are bounded
//! globally (sized from the file-descriptor limit) and per source IP, and
//! each reactor accepts a bounded burst per turn, so a connect storm
//! cannot starve established phones.
//!
//! Memory per idle connection is the socket, a small state record and,
//! for TLS, the rustls session: read buffers belong to the reactor, and a
//! connection holds bytes only while a message is incomplete or output
//! is queued.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use rustls::pki_types::ServerName;
use sip_core::framing::{frame, Frame};
use sip_core::writer::write_error_response;
use sip_core::{ErrorKind, Limits};

use crate::config::ConnectionLimits;
use crate::io::drive::{Backing, Deferred, Storage};
use crate::io::send::{Connections, Sender};
use crate::io::tls::TlsContext;
use crate::proto::core::{same_flow_transport, Core, Shared, Transport};
use crate::proto::metrics::CloseReason;
use crate::proto::stateful::{Key, Sends};
use sip_core::websocket::server::{self as websocket, Upgrade};

/// The listening sockets of the connection layer, by transport.
#[derive(Debug, Default)]
pub struct Listeners {
    /// SIP over TCP.
    pub tcp: Option<TcpListener>,
    /// SIP over TLS.
    pub tls: Option<TcpListener>,
    /// SIP over WebSocket (RFC 7118).
    pub ws: Option<TcpListener>,
    /// SIP over secure WebSocket.
    pub wss: Option<TcpListener>,
}

/// How a connection's messages are framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    /// SIP as a byte stream (TCP, TLS).
    Stream,
    /// WebSocket before its upgrade: nothing may be sent yet.
    Upgrading,
    /// WebSocket: one frame per SIP message.
    Frames,
}

/// Outbound connects in progress at most; more are refused (dropped).
pub const MAX_PENDING_CONNECTS: usize = 64;
/// File descriptors kept for everything but connections (journals,
/// listeners, the operator endpoint) when the limit is sized from them.
const FD_RESERVE: usize = 256;
/// How long a reactor waits before polling again after `poll` failed.
const TURN: Duration = Duration::from_millis(100);
/// How often a reactor walks its connections for deadlines: a deadline is
/// met at most this late, and a walk over 50,000 idle connections costs
/// a fraction of a millisecond per second instead of per turn.
const SWEEP: Duration = Duration::from_secs(1);
/// Bytes read from one connection per event before others get a turn.
const READ_BUDGET: usize = 256 << 10;
/// The reactor's read buffer.
const SCRATCH: usize = 64 << 10;

const WAKER: Token = Token(0);
const LISTEN_TCP: Token = Token(1);
const LISTEN_TLS: Token = Token(2);
const LISTEN_WS: Token = Token(3);
const LISTEN_WSS: Token = Token(4);
const FIRST_CONN: usize = 16;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The connection limit in effect: the configured one, or what the
/// file-descriptor limit leaves after the reserve.
pub fn effective_limit(configured: usize, fd_limit: usize) -> usize {
    let by_fds = fd_limit.saturating_sub(FD_RESERVE).max(64);
    if configured == 0 {
        by_fds
    } else {
        configured.min(by_fds)
    }
}

/// Why a message could not be queued on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QueueError {
    /// The connection is closed or closing.
    Closed,
    /// The peer's queue is full: it is being closed as a slow reader.
    Full,
}

#[derive(Debug)]
enum Phase {
    /// An outbound connect in progress, with what waits for it.
    Connecting(Vec<Vec<u8>>),
    Open,
    Closed,
}

/// One connection's sending side and session, shared by its reactor and
/// every sender.
#[derive(Debug)]
struct Tx {
    sock: TcpStream,
    tls: Option<rustls::Connection>,
    /// Plain TCP: bytes queued for the peer, from `sent` on.
    out: Vec<u8>,
    sent: usize,
    phase: Phase,
    wire: Wire,
}

impl Tx {
    fn queued(&self) -> usize {
        match &self.phase {
            Phase::Connecting(p) => p.iter().map(Vec::len).sum(),
            _ => self.out.len() - self.sent,
        }
    }

    /// Writes what the socket takes now. `Err`: the connection is broken.
    fn flush(&mut self) -> io::Result<()> {
        if !matches!(self.phase, Phase::Open) {
            return Ok(());
        }
        match &mut self.tls {
            Some(tls) => {
                while tls.wants_write() {
                    match tls.write_tls(&mut self.sock) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            None => {
                while self.sent < self.out.len() {
                    match self.sock.write(&self.out[self.sent..]) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(n) => self.sent += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                if self.sent == self.out.len() {
                    self.sent = 0;
                    self.out.clear();
                    if self.out.capacity() > 16 << 10 {
                        self.out = Vec::new();
                    }
                } else if self.sent > self.out.len() / 2 {
                    self.out.drain(..self.sent);
                    self.sent = 0;
                }
            }
        }
        Ok(())
    }

    /// Queues the SIP message `bytes` for the peer (at most `limit` bytes
    /// waiting), in a frame of its own over WebSocket, and writes what the
    /// socket takes.
    fn queue(&mut self, bytes: &[u8], limit: usize) -> Result<(), QueueError> {
        match self.wire {
            Wire::Stream => self.queue_raw(&[bytes], limit),
            Wire::Upgrading => Err(QueueError::Closed),
            Wire::Frames => {
                let (h, n) = websocket::data_header(bytes);
                self.queue_raw(&[&h[..n], bytes], limit)
            }
        }
    }

    /// Queues `parts` as they are (an HTTP response, a whole frame).
    fn queue_raw(&mut self, parts: &[&[u8]], limit: usize) -> Result<(), QueueError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        match &mut self.phase {
            Phase::Closed => return Err(QueueError::Closed),
            Phase::Connecting(pending) => {
                let waiting: usize = pending.iter().map(Vec::len).sum();
                if waiting + len > limit {
                    return Err(QueueError::Full);
                }
                pending.push(parts.concat());
                return Ok(());
            }
            Phase::Open => {}
        }
        match &mut self.tls {
            Some(tls) => {
                for bytes in parts {
                    let n = tls.writer().write(bytes).map_err(|_| QueueError::Closed)?;
                    if n < bytes.len() {
                        return Err(QueueError::Full);
                    }
                }
            }
            None => {
                if self.queued() + len > limit {
                    return Err(QueueError::Full);
                }
                for bytes in parts {
                    self.out.extend_from_slice(bytes);
                }
            }
        }
        self.flush().map_err(|_| QueueError::Closed)
    }
}

/// One connection, as the connection table and senders see it.
#[derive(Debug)]
struct Conn {
    peer: SocketAddr,
    token: Token,
    reactor: usize,
    transport: Transport,
    /// Counted against its source IP's share (accepted connections).
    counted_ip: bool,
    tx: Mutex<Tx>,
    /// Why it is being closed, set by whoever decided it (once).
    closing: Mutex<Option<CloseReason>>,
    /// WebSocket: the latest requests the stateful proxy forwarded over
    /// it (at most [`MAX_REQUESTS_WATCHED`]). A browser cannot be reached
    /// another way (RFC 7118 §5), so when the connection closes those
    /// still unanswered fail at once (503 upstream) instead of after
    /// timer B or C.
    requests: Mutex<Vec<(Key, u8)>>,
    /// WebSocket: the addresses-of-record registered over it (at most
    /// [`MAX_AORS_REGISTERED`]): when it closes, their bindings on it are
    /// dropped, since a browser is never reached on another connection.
    registered: Mutex<Vec<String>>,
    /// TLS: other addresses and domain names it stands for (RFC 5923
    /// aliases, at most [`MAX_ALIASES`]).
    aliases: Mutex<Vec<Alias>>,
}

/// A domain name (lower case) and port.
type NameKey = (Box<str>, u16);

/// A sent-by a TLS connection stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Alias {
    /// An address, in the connection table.
    Addr(SocketAddr),
    /// A domain name and port, in the table of names.
    Name(NameKey),
}

/// Aliases one TLS connection may hold (a proxy has one sent-by, maybe a
/// few; a peer must not fill the connection table with ports).
const MAX_ALIASES: usize = 4;

/// Requests watched per WebSocket connection (a phone rarely has more
/// than a few transactions under way; the oldest are forgotten first).
const MAX_REQUESTS_WATCHED: usize = 16;

/// Addresses-of-record one WebSocket connection registers whose bindings
/// are dropped when it closes (a browser registers one; more are left to
/// expire).
const MAX_AORS_REGISTERED: usize = 8;

/// What reactors receive from other threads.
#[derive(Debug)]
enum Order {
    /// Serve this (outbound) connection.
    Adopt(Arc<Conn>),
    /// Close this connection.
    Close(Token),
}

/// A reactor, as other threads reach it.
#[derive(Debug)]
struct ReactorLink {
    waker: Waker,
    orders: Mutex<Vec<Order>>,
}

/// Open TCP and TLS connections and what their reactors share.
#[derive(Debug)]
pub struct TcpHub {
    shared: Arc<Shared>,
    backing: Backing,
    udp: Option<Arc<UdpSocket>>,
    tls: Option<Arc<TlsContext>>,
    stop: Arc<AtomicBool>,
    limits: ConnectionLimits,
    /// The effective global limit.
    max: usize,
    conns: Mutex<HashMap<SocketAddr, Arc<Conn>>>,
    /// TLS connections that stand for a domain name and port (RFC 5923).
    names: Mutex<HashMap<NameKey, Arc<Conn>>>,
    per_ip: Mutex<HashMap<IpAddr, usize>>,
    open: AtomicUsize,
    next_token: AtomicUsize,
    next_reactor: AtomicUsize,
    reactors: OnceLock<Vec<ReactorLink>>,
}

impl TcpHub {
    /// A hub; `udp` sends what connections must forward over UDP; `tls`
    /// serves and opens TLS connections. Raises the file-descriptor
    /// limit to size the connection limit.
    pub fn new(
        shared: Arc<Shared>,
        backing: Backing,
        udp: Option<Arc<UdpSocket>>,
        tls: Option<Arc<TlsContext>>,
        stop: Arc<AtomicBool>,
    ) -> Arc<Self> {
        let limits = shared.config.connections.clone();
        let max = effective_limit(limits.max, sip_udp::raise_fd_limit());
        Arc::new(Self {
            shared,
            backing,
            udp,
            tls,
            stop,
            limits,
            max,
            conns: Mutex::new(HashMap::new()),
            names: Mutex::new(HashMap::new()),
            per_ip: Mutex::new(HashMap::new()),
            open: AtomicUsize::new(0),
            next_token: AtomicUsize::new(FIRST_CONN),
            next_reactor: AtomicUsize::new(0),
            reactors: OnceLock::new(),
        })
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// The most connections served at once.
    pub fn limit(&self) -> usize {
        self.max
    }

    /// Starts the reactors, each accepting from the given listeners
    /// (TLS and WSS ones open TLS server sessions).
    pub fn start(self: &Arc<Self>, listen: Listeners) -> io::Result<Vec<JoinHandle<()>>> {
        let n = match self.limits.reactors {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
            n => n,
        };
        let mut polls = Vec::with_capacity(n);
        let mut links = Vec::with_capacity(n);
        for _ in 0..n {
            let poll = Poll::new()?;
            links.push(ReactorLink {
                waker: Waker::new(poll.registry(), WAKER)?,
                orders: Mutex::new(Vec::new()),
            });
            polls.push(poll);
        }
        if self.reactors.set(links).is_err() {
            return Err(io::Error::other("the connection layer is already started"));
        }
        let mut threads = Vec::with_capacity(n);
        for (i, poll) in polls.into_iter().enumerate() {
            let mut listeners = Vec::new();
            for (l, token) in [
                (&listen.tcp, LISTEN_TCP),
                (&listen.tls, LISTEN_TLS),
                (&listen.ws, LISTEN_WS),
                (&listen.wss, LISTEN_WSS),
            ] {
                if let Some(l) = l {
                    let l = l.try_clone()?;
                    l.set_nonblocking(true)?;
                    let mut l = mio::net::TcpListener::from_std(l);
                    poll.registry()
                        .register(&mut l, token, Interest::READABLE)?;
                    listeners.push((l, token, true));
                }
            }
            let hub = self.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("conn-{i}"))
                    .spawn(move || Reactor::new(hub, i, poll, listeners).run())?,
            );
        }
        Ok(threads)
    }

    /// Wakes every reactor to look at the stop and drain flags now.
    pub fn wake_all(&self) {
        for link in self.reactors.get().into_iter().flatten() {
            let _ = link.waker.wake();
        }
    }

    fn link(&self, reactor: usize) -> Option<&ReactorLink> {
        self.reactors.get().and_then(|r| r.get(reactor))
    }

    fn order(&self, reactor: usize, order: Order) {
        if let Some(link) = self.link(reactor) {
            lock(&link.orders).push(order);
            let _ = link.waker.wake();
        }
    }

    /// Marks `conn` for closing (the first reason wins) and has its
    /// reactor close it.
    fn close_later(&self, conn: &Conn, reason: CloseReason) {
        {
            let mut closing = lock(&conn.closing);
            if closing.is_some() {
                return;
            }
            *closing = Some(reason);
        }
        {
            let mut tx = lock(&conn.tx);
            if matches!(tx.phase, Phase::Open) {
                tx.phase = Phase::Closed;
            }
        }
        self.order(conn.reactor, Order::Close(conn.token));
    }

    /// Sends `bytes` to `dest` on its open connection, or connects (TCP,
    /// or TLS when `transport` says so) without blocking the caller. A
    /// message that cannot be queued is dropped and counted; a forwarded
    /// request among them is answered 503 by its transaction.
    pub fn send(
        self: &Arc<Self>,
        dest: SocketAddr,
        transport: Transport,
        bytes: &[u8],
    ) -> io::Result<()> {
        let websocket = matches!(transport, Transport::Ws | Transport::Wss);
        if !matches!(transport, Transport::Tcp | Transport::Tls) && !websocket {
            // No listener or connector for it (SCTP): the message cannot
            // leave; a forwarded request is answered 503.
            self.shared.metrics.dropped.fetch_add(1, Ordering::Relaxed);
            self.undeliverable(bytes);
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("no {} transport to reach {dest}", transport.as_str()),
            ));
        }
        let existing = lock(&self.conns).get(&dest).cloned();
        let Some(conn) = existing else {
            if websocket {
                // Browsers are only reached on the connection they opened.
                self.shared.metrics.dropped.fetch_add(1, Ordering::Relaxed);
                self.undeliverable(bytes);
                return Err(io::Error::other(format!(
                    "no {} connection from {dest}",
                    transport.as_str()
                )));
            }
            return self.connect_then_send(dest, transport, bytes);
        };
        if websocket {
            // Watched before it can reach the browser: a browser that
            // closes as soon as it has the request must find it among
            // the connection's requests when the reactor closes it.
            self.watch(&conn, bytes);
        }
        let queued = lock(&conn.tx).queue(bytes, self.limits.queue_bytes);
        match queued {
            Ok(()) => {
                self.shared.sending(bytes, dest, conn.transport);
                Ok(())
            }
            Err(e) => {
                let reason = if e == QueueError::Full {
                    CloseReason::SlowReader
                } else {
                    CloseReason::Error
                };
                self.close_later(&conn, reason);
                self.shared.metrics.dropped.fetch_add(1, Ordering::Relaxed);
                self.undeliverable(bytes);
                Err(io::Error::other(match e {
                    QueueError::Full => "the peer does not read: closed as a slow reader",
                    QueueError::Closed => "the connection is closed",
                }))
            }
        }
    }

    /// A message could not be sent. For a request the stateful proxy
    /// forwarded, its transaction answers the caller (503) at once.
    fn undeliverable(self: &Arc<Self>, bytes: &[u8]) {
        if let Some(key) = self.request_key(bytes) {
            self.transport_failed(&[key]);
        }
    }

    /// The transaction of a request the stateful proxy forwarded, and
    /// which try of it the request is.
    fn request_key(&self, bytes: &[u8]) -> Option<(Key, u8)> {
        self.shared.transactions.as_ref()?;
        if bytes.starts_with(b"SIP/2.0 ") {
            return None;
        }
        let msg = sip_core::Message::parse(bytes).ok()?;
        Key::with_try(&msg).filter(|_| msg.is_request())
    }

    /// Remembers a forwarded request sent over a WebSocket connection.
    fn watch(&self, conn: &Conn, bytes: &[u8]) {
        if let Some(key) = self.request_key(bytes) {
            let mut r = lock(&conn.requests);
            if r.len() == MAX_REQUESTS_WATCHED {
                r.remove(0);
            }
            r.push(key);
        }
    }

    /// RFC 5923: a TLS peer whose request's top Via carries `alias`
    /// gets the requests for its sent-by (`host:port`, 5061 by default)
    /// down this connection instead of over a new one. Only when its
    /// certificate names the sent-by (subjectAltName iPAddress for an
    /// address, dNSName for a domain name, as a next hop's certificate
    /// is checked) and no other connection stands for it: a peer can
    /// only alias itself, and never takes another's place.
    fn alias(&self, conn: &Arc<Conn>, bytes: &[u8]) {
        let Ok(msg) = sip_core::Message::parse(bytes) else {
            return;
        };
        let via = msg.top_via();
        if !msg.is_request()
            || !via.transport_str().eq_ignore_ascii_case("TLS")
            || via.params().get("alias").is_none()
        {
            return;
        }
        let port = via.port().unwrap_or(5061);
        // The alias, and the name its certificate must carry for it.
        let (alias, server_name) = match via.host() {
            sip_core::uri::Host::V4(a) => (Alias::Addr((a, port).into()), IpAddr::V4(a).into()),
            sip_core::uri::Host::V6(a) => (Alias::Addr((a, port).into()), IpAddr::V6(a).into()),
            sip_core::uri::Host::Name(n) => {
                let name = n.to_ascii_lowercase();
                let Ok(server_name) = ServerName::try_from(name.clone()) else {
                    return;
                };
                (Alias::Name((name.into(), port)), server_name)
            }
        };
        if alias == Alias::Addr(conn.peer) {
            return;
        }
        let named = {
            let tx = lock(&conn.tx);
            let leaf = tx
                .tls
                .as_ref()
                .and_then(|t| t.peer_certificates())
                .and_then(|c| c.first());
            leaf.is_some_and(|leaf| {
                rustls::server::ParsedCertificate::try_from(leaf).is_ok_and(|cert| {
                    rustls::client::verify_server_name(&cert, &server_name).is_ok()
                })
            })
        };
        if !named {
            tracing::debug!(target: "sipsec::conn", peer = %conn.peer, alias = ?alias, "alias refused: the client certificate does not name the Via sent-by");
            return;
        }
        let mut aliases = lock(&conn.aliases);
        if aliases.contains(&alias) || aliases.len() >= MAX_ALIASES {
            return;
        }
        match &alias {
            Alias::Addr(at) => {
                let mut conns = lock(&self.conns);
                if conns.contains_key(at) {
                    return;
                }
                conns.insert(*at, conn.clone());
            }
            Alias::Name(key) => {
                let mut names = lock(&self.names);
                if names.contains_key(key) {
                    return;
                }
                names.insert(key.clone(), conn.clone());
            }
        }
        tracing::debug!(target: "sipsec::conn", peer = %conn.peer, alias = ?alias, "connection reused for requests to its sent-by (RFC 5923)");
        aliases.push(alias);
    }

    /// The requests of `keys` cannot be answered: those still waiting
    /// answer their callers (503, RFC 3261 §16.9) now.
    fn transport_failed(self: &Arc<Self>, keys: &[(Key, u8)]) {
        let Some(tx) = &self.shared.transactions else {
            return;
        };
        let mut sends = Sends::default();
        let now = Instant::now();
        for (key, tries) in keys {
            tx.on_transport_error(*key, *tries, now, &mut sends, &self.shared.metrics);
        }
        self.sender().send_all(&sends);
    }

    fn connect_then_send(
        self: &Arc<Self>,
        dest: SocketAddr,
        transport: Transport,
        bytes: &[u8],
    ) -> io::Result<()> {
        let refuse = |hub: &Arc<Self>, why: &str| {
            hub.shared.metrics.dropped.fetch_add(1, Ordering::Relaxed);
            hub.undeliverable(bytes);
            Err(io::Error::other(format!("{dest}: {why}")))
        };
        // A TLS next hop is named by address here, so its certificate must
        // carry that IP address (subjectAltName iPAddress).
        let session = match (transport, &self.tls) {
            (Transport::Tls, Some(ctx)) => {
                match rustls::ClientConnection::new(
                    ctx.client.clone(),
                    ServerName::IpAddress(dest.ip().into()),
                ) {
                    Ok(c) => Some(rustls::Connection::Client(c)),
                    Err(e) => return refuse(self, &e.to_string()),
                }
            }
            (Transport::Tls, None) => {
                return refuse(self, "no TLS configured for a sips: next hop")
            }
            _ => None,
        };
        if self.open.load(Ordering::Relaxed) >= self.max {
            return refuse(self, "the connection limit is reached");
        }
        let pending = &self.shared.metrics.tcp_connects_pending;
        if pending.fetch_add(1, Ordering::AcqRel) >= MAX_PENDING_CONNECTS as u64 {
            pending.fetch_sub(1, Ordering::AcqRel);
            return refuse(self, "too many connects in progress");
        }
        let sock = match TcpStream::connect(dest) {
            Ok(s) => s,
            Err(e) => {
                pending.fetch_sub(1, Ordering::AcqRel);
                return refuse(self, &e.to_string());
            }
        };
        let _ = sock.set_nodelay(true);
        let reactor = self.pick_reactor();
        let conn = Arc::new(Conn {
            peer: dest,
            token: Token(self.next_token.fetch_add(1, Ordering::Relaxed)),
            reactor,
            transport,
            counted_ip: false,
            tx: Mutex::new(Tx {
                sock,
                tls: session.map(|mut s| {
                    s.set_buffer_limit(Some(self.limits.queue_bytes));
                    s
                }),
                out: Vec::new(),
                sent: 0,
                phase: Phase::Connecting(vec![bytes.to_vec()]),
                wire: Wire::Stream,
            }),
            closing: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            registered: Mutex::new(Vec::new()),
            aliases: Mutex::new(Vec::new()),
        });
        {
            let mut conns = lock(&self.conns);
            if let Some(other) = conns.get(&dest).cloned() {
                // Another sender connected meanwhile: use its connection.
                drop(conns);
                pending.fetch_sub(1, Ordering::AcqRel);
                return self.send(dest, other.transport, bytes);
            }
            conns.insert(dest, conn.clone());
        }
        self.open.fetch_add(1, Ordering::Relaxed);
        self.shared.metrics.connection_opened(conn.transport, false);
        self.shared.sending(bytes, dest, conn.transport);
        self.order(reactor, Order::Adopt(conn));
        Ok(())
    }

    fn pick_reactor(&self) -> usize {
        let n = self.reactors.get().map_or(1, Vec::len).max(1);
        self.next_reactor.fetch_add(1, Ordering::Relaxed) % n
    }

    /// Sends by transport, with this hub for TCP and TLS.
    fn sender(self: &Arc<Self>) -> Sender {
        Sender::new(
            self.shared.clone(),
            self.udp.clone(),
            Some(Arc::new(self.clone())),
        )
    }

    /// Takes a share for `ip`; `false`: it has its limit.
    fn admit_ip(&self, ip: IpAddr) -> bool {
        let l = &self.limits;
        if l.per_ip == 0 || l.per_ip_exempt.contains(&ip) {
            return true;
        }
        let mut per_ip = lock(&self.per_ip);
        let n = per_ip.entry(ip).or_insert(0);
        if *n >= l.per_ip {
            return false;
        }
        *n += 1;
        true
    }

    fn release_ip(&self, ip: IpAddr) {
        let l = &self.limits;
        if l.per_ip == 0 || l.per_ip_exempt.contains(&ip) {
            return;
        }
        let mut per_ip = lock(&self.per_ip);
        if let Some(n) = per_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                per_ip.remove(&ip);
            }
        }
    }
}

impl crate::proto::core::Flows for TcpHub {
    fn open(&self, peer: SocketAddr, transport: Transport) -> bool {
        lock(&self.conns).get(&peer).is_some_and(|c| {
            same_flow_transport(c.transport, transport)
                && lock(&c.closing).is_none()
                && !matches!(lock(&c.tx).phase, Phase::Closed)
        })
    }

    fn named(&self, name: &str, port: u16) -> Option<SocketAddr> {
        let names = lock(&self.names);
        if names.is_empty() {
            return None;
        }
        let key = (name.to_ascii_lowercase().into_boxed_str(), port);
        names.get(&key).map(|c| c.peer)
    }
}

impl Connections for Arc<TcpHub> {
    fn send_on(&self, dest: SocketAddr, transport: Transport, bytes: &[u8]) {
        let _ = self.send(dest, transport, bytes);
    }
}

/// What a reactor keeps per connection beside the shared part.
#[derive(Debug)]
struct Local {
    conn: Arc<Conn>,
    /// Bytes of an incomplete message (empty, unallocated, between
    /// messages).
    inbuf: Vec<u8>,
    opened: Instant,
    last_read: Instant,
    /// When the first byte of the incomplete message in `inbuf` came.
    message_start: Option<Instant>,
    handshaking: bool,
    /// An outbound connect not yet complete (known here, so the deadline
    /// walk takes no lock).
    connecting: bool,
    /// WebSocket: the upgrade still to come (`None`), or the frames'
    /// reassembly after it.
    ws: Option<Box<Option<websocket::Decoder>>>,
    /// CR/LF bytes the reads so far ended with: a CRLFCRLF ping (RFC 5626
    /// §4.4.1) may come in two reads.
    crlf: u8,
    /// Whether a SIP message came (outbound connections: ours, so yes).
    spoke: bool,
    /// The keep-alives it may still send now.
    pings: Pace,
}

/// A token bucket for one peer: `rate` a second, `burst` at most.
#[derive(Debug, Clone, Copy)]
struct Pace {
    tokens: f64,
    at: Instant,
}

impl Pace {
    fn full(burst: f64, now: Instant) -> Self {
        Self {
            tokens: burst,
            at: now,
        }
    }

    /// Refills to `now` and says how many whole tokens there are.
    fn refill(&mut self, now: Instant, rate: f64, burst: f64) -> u32 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.at = self.at.max(now);
        self.tokens as u32
    }

    /// Takes one token at `now`, if there is one.
    fn take(&mut self, now: Instant, rate: f64, burst: f64) -> bool {
        if self.refill(now, rate, burst) >= 1 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Whether a bucket left alone since its last use is full again.
    fn idle(&self, now: Instant, rate: f64, burst: f64) -> bool {
        self.tokens + now.saturating_duration_since(self.at).as_secs_f64() * rate >= burst
    }
}

/// Keep-alives a connection may send at once: ten times its rate a second.
fn ping_burst(rate: u32) -> f64 {
    f64::from(rate) * 10.0
}

/// Sources whose accept rate a reactor remembers; past it, those whose
/// buckets are full again are forgotten (they lose nothing).
const MAX_SOURCES: usize = 16_384;

impl Local {
    /// A connection that opens now (TLS ones start handshaking).
    fn new(conn: Arc<Conn>, connecting: bool, ping_rate: u32) -> Self {
        let now = Instant::now();
        let handshaking = matches!(conn.transport, Transport::Tls | Transport::Wss);
        let ws = matches!(conn.transport, Transport::Ws | Transport::Wss).then(|| Box::new(None));
        Self {
            conn,
            inbuf: Vec::new(),
            opened: now,
            last_read: now,
            message_start: None,
            handshaking,
            connecting,
            ws,
            crlf: 0,
            spoke: false,
            pings: Pace::full(ping_burst(ping_rate), now),
        }
    }

    /// Still in its TLS handshake or WebSocket upgrade.
    fn opening(&self) -> bool {
        self.handshaking || self.ws.as_ref().is_some_and(|w| w.is_none())
    }
}

/// One reactor thread: its poll, its connections and its core.
struct Reactor {
    hub: Arc<TcpHub>,
    index: usize,
    poll: Poll,
    listeners: Vec<(mio::net::TcpListener, Token, bool)>,
    locals: HashMap<Token, Local>,
    core: Core,
    storage: Storage,
    sender: Sender,
    out: Vec<u8>,
    scratch: Vec<u8>,
    /// Connections with more to read after their budget ran out.
    again: Vec<Token>,
    /// This reactor's share of the accept rate.
    bucket: Option<Bucket>,
    /// Each source's accept rate (`accept_rate_per_ip`).
    sources: HashMap<IpAddr, Pace>,
    /// Binding changes waiting for the end of the round, with their
    /// answers.
    deferred: Deferred,
}

/// Most binding changes a reactor gathers before it stores them.
const MAX_DEFERRED: usize = 256;

/// The server-wide accept rate: a [`Pace`] of `rate` tokens a second,
/// holding at most a tenth of a second's worth (and at least one), that
/// remembers until when it is spent.
struct Bucket {
    rate: f64,
    pace: Pace,
    /// Spent: accept again at this time.
    until: Option<Instant>,
}

impl Bucket {
    fn new(rate: f64, now: Instant) -> Self {
        Self {
            rate,
            pace: Pace::full(Self::capacity(rate), now),
            until: None,
        }
    }

    fn capacity(rate: f64) -> f64 {
        (rate / 10.0).max(1.0)
    }

    /// Takes a token, or says when the next one comes.
    fn take(&mut self, now: Instant) -> Result<(), Instant> {
        if self.pace.take(now, self.rate, Self::capacity(self.rate)) {
            self.until = None;
            Ok(())
        } else {
            let next = now + Duration::from_secs_f64((1.0 - self.pace.tokens) / self.rate);
            self.until = Some(next);
            Err(next)
        }
    }

    /// Returns a token taken for a connection that was not there.
    fn give_back(&mut self) {
        self.pace.tokens = (self.pace.tokens + 1.0).min(Self::capacity(self.rate));
    }

    /// Spent until a time still ahead.
    fn waiting(&self, now: Instant) -> Option<Instant> {
        self.until.filter(|u| *u > now)
    }
}

impl Reactor {
    fn new(
        hub: Arc<TcpHub>,
        index: usize,
        poll: Poll,
        listeners: Vec<(mio::net::TcpListener, Token, bool)>,
    ) -> Self {
        let core = Core::new(hub.shared.clone());
        let storage = hub.backing.clone().open();
        let sender = hub.sender();
        let reactors = hub.reactors.get().map_or(1, Vec::len).max(1);
        let bucket = (hub.limits.accept_rate > 0).then(|| {
            Bucket::new(
                f64::from(hub.limits.accept_rate) / reactors as f64,
                Instant::now(),
            )
        });
        Self {
            hub,
            index,
            poll,
            listeners,
            locals: HashMap::new(),
            core,
            storage,
            sender,
            out: Vec::with_capacity(8192),
            scratch: vec![0; SCRATCH],
            again: Vec::new(),
            bucket,
            sources: HashMap::new(),
            deferred: Deferred::default(),
        }
    }

    fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut next_sweep = Instant::now() + SWEEP;
        while !self.hub.stop.load(Ordering::Relaxed) {
            if !self.listeners.is_empty() && self.hub.shared.draining.load(Ordering::Relaxed) {
                // Draining: no new connections. Closing the listeners
                // makes the kernel refuse them (and reset those queued).
                for (l, _, _) in &mut self.listeners {
                    let _ = self.poll.registry().deregister(l);
                }
                self.listeners.clear();
            }
            let now = Instant::now();
            let spent = self.bucket.as_ref().and_then(|b| b.waiting(now));
            let accepting = spent.is_none() && self.listeners.iter().any(|l| l.2);
            let wait = if accepting || !self.again.is_empty() {
                Duration::ZERO
            } else {
                // Nothing else is due before the sweep: other threads'
                // orders, the stop and the drain wake the reactor.
                let until = spent.map_or(next_sweep, |s| s.min(next_sweep));
                until.saturating_duration_since(now)
            };
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    crate::io::log::connection_trouble(&format!("connection reactor: {e}"));
                    std::thread::sleep(TURN);
                }
                continue;
            }
            for ev in events.iter() {
                match ev.token() {
                    WAKER => self.take_orders(),
                    t @ (LISTEN_TCP | LISTEN_TLS | LISTEN_WS | LISTEN_WSS) => {
                        for l in &mut self.listeners {
                            if l.1 == t {
                                l.2 = true;
                            }
                        }
                    }
                    t => {
                        if ev.is_writable() {
                            self.writable(t);
                        }
                        if ev.is_read_closed() || ev.is_error() {
                            self.readable(t, false);
                        } else if ev.is_readable() {
                            self.readable(t, true);
                        }
                    }
                }
            }
            for t in std::mem::take(&mut self.again) {
                self.readable(t, false);
            }
            self.commit();
            self.accept();
            let now = Instant::now();
            if now >= next_sweep {
                self.sweep(now);
                next_sweep = now + SWEEP;
            }
        }
        self.commit();
        self.take_orders();
        let tokens: Vec<Token> = self.locals.keys().copied().collect();
        for t in tokens {
            self.close(t, CloseReason::Shutdown);
        }
    }

    fn take_orders(&mut self) {
        let Some(link) = self.hub.link(self.index) else {
            return;
        };
        let orders = std::mem::take(&mut *lock(&link.orders));
        for o in orders {
            match o {
                Order::Close(t) => {
                    let reason = self
                        .locals
                        .get(&t)
                        .and_then(|l| *lock(&l.conn.closing))
                        .unwrap_or(CloseReason::Error);
                    self.close(t, reason);
                }
                Order::Adopt(conn) => {
                    let (registered, connecting) = {
                        let mut tx = lock(&conn.tx);
                        let r = self.poll.registry().register(
                            &mut tx.sock,
                            conn.token,
                            Interest::READABLE | Interest::WRITABLE,
                        );
                        (r, matches!(tx.phase, Phase::Connecting(_)))
                    };
                    let token = conn.token;
                    let mut local = Local::new(conn, connecting, self.hub.limits.keepalive_rate);
                    // Ours: it need not prove itself with a first message.
                    local.spoke = true;
                    self.locals.insert(token, local);
                    if registered.is_err() {
                        self.close(token, CloseReason::ConnectFailed);
                    }
                }
            }
        }
    }

    /// Accepts up to a burst from each listener with connections waiting.
    fn accept(&mut self) {
        let hub = self.hub.clone();
        let burst = hub.limits.accept_burst;
        if let Some(b) = &self.bucket {
            if b.waiting(Instant::now()).is_some() {
                return;
            }
        }
        for i in 0..self.listeners.len() {
            if !self.listeners[i].2 {
                continue;
            }
            let transport = match self.listeners[i].1 {
                LISTEN_TLS => Transport::Tls,
                LISTEN_WS => Transport::Ws,
                LISTEN_WSS => Transport::Wss,
                _ => Transport::Tcp,
            };
            let mut taken = 0;
            loop {
                if taken == burst {
                    // More may wait: come back after serving the others.
                    break;
                }
                if let Some(b) = &mut self.bucket {
                    if b.take(Instant::now()).is_err() {
                        // The rate is spent: the rest wait in the kernel's
                        // queue until the bucket refills.
                        hub.shared
                            .metrics
                            .accepts_deferred
                            .fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
                let (sock, peer) = match self.listeners[i].0.accept() {
                    Ok(a) => a,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.listeners[i].2 = false;
                        if let Some(b) = &mut self.bucket {
                            b.give_back();
                        }
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // Out of descriptors or memory: refuse for a turn.
                        crate::io::log::connection_trouble(&format!("accept: {e}"));
                        break;
                    }
                };
                taken += 1;
                // Each source first: what it is refused costs the others
                // none of the server-wide rate.
                if !(self.source_may_connect(peer.ip())
                    && self.adopt_accepted(sock, peer, transport))
                {
                    if let Some(b) = &mut self.bucket {
                        b.give_back();
                    }
                }
            }
        }
    }

    /// Whether `ip` may open another connection now under
    /// `accept_rate_per_ip`; counts the refusal when not.
    fn source_may_connect(&mut self, ip: IpAddr) -> bool {
        let l = &self.hub.limits;
        if l.accept_rate_per_ip == 0 || l.per_ip_exempt.contains(&ip) {
            return true;
        }
        let now = Instant::now();
        let rate = f64::from(l.accept_rate_per_ip);
        if self.sources.len() >= MAX_SOURCES {
            self.sources.retain(|_, p| !p.idle(now, rate, rate));
            if self.sources.len() >= MAX_SOURCES {
                // Every one busy: start over rather than grow.
                self.sources.clear();
            }
        }
        let pace = self
            .sources
            .entry(ip)
            .or_insert_with(|| Pace::full(rate, now));
        if pace.take(now, rate, rate) {
            return true;
        }
        self.hub
            .shared
            .metrics
            .refused_per_ip_rate
            .fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Near the connection limit: closes this reactor's oldest connection
    /// that has sent no SIP message yet, to make room; `false` when there
    /// is none.
    fn evict_silent(&mut self) -> bool {
        let Some(t) = self
            .locals
            .iter()
            .filter(|(_, l)| !l.spoke)
            .min_by_key(|(_, l)| l.opened)
            .map(|(t, _)| *t)
        else {
            return false;
        };
        self.close(t, CloseReason::Evicted);
        true
    }

    /// Takes an accepted connection on; `false` when it is refused.
    fn adopt_accepted(
        &mut self,
        mut sock: TcpStream,
        peer: SocketAddr,
        transport: Transport,
    ) -> bool {
        let secure = matches!(transport, Transport::Tls | Transport::Wss);
        if self.hub.open.load(Ordering::Relaxed) >= self.hub.max && !self.evict_silent() {
            self.hub
                .shared
                .metrics
                .refused_limit
                .fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let hub = &self.hub;
        let m = &hub.shared.metrics;
        if !hub.admit_ip(peer.ip()) {
            m.refused_per_ip.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let tls = match (&hub.tls, secure) {
            (Some(ctx), true) => match rustls::ServerConnection::new(ctx.server.clone()) {
                Ok(mut s) => {
                    s.set_buffer_limit(Some(hub.limits.queue_bytes));
                    Some(rustls::Connection::Server(s))
                }
                Err(_) => {
                    hub.release_ip(peer.ip());
                    return false;
                }
            },
            (None, true) => {
                hub.release_ip(peer.ip());
                return false;
            }
            (_, false) => None,
        };
        let _ = sock.set_nodelay(true);
        let token = Token(hub.next_token.fetch_add(1, Ordering::Relaxed));
        if self
            .poll
            .registry()
            .register(&mut sock, token, Interest::READABLE | Interest::WRITABLE)
            .is_err()
        {
            hub.release_ip(peer.ip());
            return false;
        }
        let conn = Arc::new(Conn {
            peer,
            token,
            reactor: self.index,
            transport,
            counted_ip: true,
            tx: Mutex::new(Tx {
                sock,
                tls,
                out: Vec::new(),
                sent: 0,
                phase: Phase::Open,
                wire: if matches!(transport, Transport::Ws | Transport::Wss) {
                    Wire::Upgrading
                } else {
                    Wire::Stream
                },
            }),
            closing: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            registered: Mutex::new(Vec::new()),
            aliases: Mutex::new(Vec::new()),
        });
        hub.open.fetch_add(1, Ordering::Relaxed);
        m.connections_accepted.fetch_add(1, Ordering::Relaxed);
        m.connection_opened(transport, true);
        // The newest connection from an address is the one to answer on.
        lock(&hub.conns).insert(peer, conn.clone());
        self.locals.insert(
            token,
            Local::new(conn, false, self.hub.limits.keepalive_rate),
        );
        true
    }

    fn writable(&mut self, t: Token) {
        let Some(l) = self.locals.get(&t) else {
            return;
        };
        let conn = l.conn.clone();
        let mut tx = lock(&conn.tx);
        if let Phase::Connecting(_) = tx.phase {
            match tx.sock.take_error() {
                Ok(None) => {}
                _ => {
                    drop(tx);
                    self.close(t, CloseReason::ConnectFailed);
                    return;
                }
            }
            match tx.sock.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(_) => {
                    drop(tx);
                    self.close(t, CloseReason::ConnectFailed);
                    return;
                }
            }
            self.hub
                .shared
                .metrics
                .tcp_connects_pending
                .fetch_sub(1, Ordering::AcqRel);
            let Phase::Connecting(pending) = std::mem::replace(&mut tx.phase, Phase::Open) else {
                unreachable!("checked above");
            };
            if let Some(l) = self.locals.get_mut(&t) {
                l.connecting = false;
            }
            for p in pending {
                if tx.queue(&p, usize::MAX).is_err() {
                    drop(tx);
                    self.close(t, CloseReason::Error);
                    return;
                }
            }
        }
        if tx.flush().is_err() {
            drop(tx);
            self.close(t, CloseReason::Error);
        }
    }

    /// Reads what `t` has (up to the budget), feeds TLS, and handles
    /// every complete message.
    /// Reads what `t` has, within a budget. `short_read_drains`: the
    /// event said only "readable" (no hang-up), so a plain socket that
    /// gave less than asked for is empty now, and new bytes will raise a
    /// new edge: no second read just to hear "would block" (one system
    /// call less per request, as tokio does).
    fn readable(&mut self, t: Token, short_read_drains: bool) {
        let Some(l) = self.locals.get(&t) else {
            return;
        };
        let conn = l.conn.clone();
        let mut budget = READ_BUDGET;
        loop {
            if budget == 0 {
                self.again.push(t);
                return;
            }
            let got = {
                let mut tx = lock(&conn.tx);
                if matches!(tx.phase, Phase::Connecting(_)) {
                    return;
                }
                read_some(&mut tx, &mut self.scratch)
            };
            match got {
                Got::Bytes(0, _) => {}
                Got::Bytes(n, drained) => {
                    budget = budget.saturating_sub(n);
                    if !self.received(t, n) {
                        return;
                    }
                    if short_read_drains && drained {
                        return;
                    }
                }
                Got::Nothing => {
                    self.after_tls_read(t);
                    return;
                }
                Got::Closed(plain) => {
                    if plain > 0 {
                        self.received(t, plain);
                    }
                    self.close(t, CloseReason::Peer);
                    return;
                }
                Got::Failed(reason) => {
                    if reason == CloseReason::Tls
                        && self.locals.get(&t).is_some_and(|l| l.handshaking)
                    {
                        self.hub
                            .shared
                            .metrics
                            .tls_handshake_failures
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    self.close(t, reason);
                    return;
                }
            }
        }
    }

    /// Notes a finished handshake and sends what the session must answer.
    fn after_tls_read(&mut self, t: Token) {
        let Some(l) = self.locals.get_mut(&t) else {
            return;
        };
        let mut tx = lock(&l.conn.tx);
        let Some(tls) = &tx.tls else {
            return;
        };
        if l.handshaking && !tls.is_handshaking() {
            l.handshaking = false;
            self.hub
                .shared
                .metrics
                .tls_handshakes
                .fetch_add(1, Ordering::Relaxed);
        }
        let broken = tx.flush().is_err();
        drop(tx);
        if broken {
            self.close(t, CloseReason::Error);
        }
    }

    /// `n` bytes of SIP (plaintext) arrived in the scratch buffer: frame
    /// and handle them. `false`: the connection was closed.
    fn received(&mut self, t: Token, n: usize) -> bool {
        self.after_tls_read(t);
        let Some(l) = self.locals.get_mut(&t) else {
            return false;
        };
        if l.ws.is_some() {
            return self.received_ws(t, n);
        }
        let now = Instant::now();
        l.last_read = now;
        let mut inbuf = std::mem::take(&mut l.inbuf);
        let conn = l.conn.clone();
        let mut crlf = l.crlf;
        // The common case: a whole message in one read, handled in place.
        let consumed = if inbuf.is_empty() {
            let scratch = std::mem::take(&mut self.scratch);
            let r = self.handle_frames(&conn, &scratch[..n], &mut crlf);
            if let Ok(used) = r {
                inbuf.extend_from_slice(&scratch[used..n]);
            }
            self.scratch = scratch;
            r.map(|_| ())
        } else {
            inbuf.extend_from_slice(&self.scratch[..n]);
            let r = self.handle_frames(&conn, &inbuf, &mut crlf);
            if let Ok(used) = r {
                inbuf.drain(..used);
            }
            r.map(|_| ())
        };
        if let Err(reason) = consumed {
            self.close(t, reason);
            return false;
        }
        let Some(l) = self.locals.get_mut(&t) else {
            return false;
        };
        l.crlf = crlf;
        if inbuf.is_empty() {
            l.message_start = None;
            l.inbuf = Vec::new();
        } else {
            l.message_start.get_or_insert(now);
            l.inbuf = inbuf;
        }
        true
    }

    /// Handles every complete message at the start of `bytes`; returns
    /// how many bytes they took. `crlf` carries the CR/LF bytes a read
    /// ended with to the next. `Err`: why the connection must close: the
    /// stream cannot be framed (answered when possible), or it pings far
    /// beyond the keep-alive pace.
    fn handle_frames(
        &mut self,
        conn: &Arc<Conn>,
        bytes: &[u8],
        crlf: &mut u8,
    ) -> Result<usize, CloseReason> {
        let limits = Limits::DEFAULT;
        let mut at = 0;
        loop {
            match frame(&bytes[at..], &limits) {
                Ok(Frame::KeepAlive(n)) => {
                    if !self.keepalive(conn, 1) {
                        return Err(CloseReason::KeepaliveFlood);
                    }
                    // RFC 5626 §3.5.1: a CRLFCRLF ping gets a CRLF pong,
                    // also when its halves come in two reads.
                    *crlf = crlf.saturating_add(u8::try_from(n).unwrap_or(u8::MAX));
                    if *crlf >= 4 {
                        *crlf = 0;
                        let _ = lock(&conn.tx).queue(b"\r\n", self.hub.limits.queue_bytes);
                    }
                    at += n;
                }
                Ok(Frame::Message(n)) => {
                    *crlf = 0;
                    self.handle_message(conn, &bytes[at..at + n]);
                    at += n;
                }
                Err(e) if e.kind == ErrorKind::Incomplete => return Ok(at),
                Err(e) => {
                    self.out.clear();
                    if write_error_response(&bytes[at..], &e, &mut self.out) {
                        let _ = lock(&conn.tx).queue(&self.out, self.hub.limits.queue_bytes);
                    }
                    return Err(CloseReason::BadFraming);
                }
            }
            if at == bytes.len() {
                return Ok(at);
            }
        }
    }

    /// A WebSocket connection closed: the bindings registered over it can
    /// never be reached again (RFC 7118 §5: a browser is reached on its
    /// connection or not at all; a reloaded page registers anew), so they
    /// are dropped now, stored as a REGISTER's removal is, instead of
    /// lingering until they expire.
    fn drop_bindings(&mut self, conn: &Conn) {
        let aors = std::mem::take(&mut *lock(&conn.registered));
        let shared = &self.hub.shared;
        let (peer, transport) = (conn.peer, conn.transport);
        let on_conn = |b: &crate::proto::location::Binding| {
            b.source == peer && b.flow.is_some_and(|f| f.transport == transport)
        };
        for aor in aors {
            let mut held = self.storage.hold();
            let now = crate::io::clock::unix_now();
            match crate::io::drive::remove_bindings(
                &shared.location,
                &mut held,
                &aor,
                &on_conn,
                now,
            ) {
                Ok(n) => {
                    let dropped = &shared.metrics.flow_bindings_dropped;
                    dropped.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) => crate::io::log::journal_error(&aor, &e),
            }
        }
    }

    /// Hands one SIP message to the core and sends what it gives. Over a
    /// store where each write waits (Redis, an fsync journal), a binding
    /// change waits with its answer for the end of the round (see
    /// [`Reactor::commit`]).
    fn handle_message(&mut self, conn: &Arc<Conn>, bytes: &[u8]) {
        if let Some(l) = self.locals.get_mut(&conn.token) {
            l.spoke = true;
        }
        if conn.transport == Transport::Tls
            && self.hub.tls.as_ref().is_some_and(|t| t.mutual)
            && memchr::memmem::find(bytes, b"alias").is_some()
        {
            self.hub.alias(conn, bytes);
        }
        let mut held = self.storage.hold();
        let now = crate::io::clock::now();
        let reply = if held.batches() {
            crate::io::drive::handle_deferring(
                &mut self.core,
                &mut held,
                &mut self.deferred,
                bytes,
                conn.peer,
                conn.transport,
                now,
                &mut self.out,
            )
        } else {
            crate::io::drive::handle(
                &mut self.core,
                Some(&mut held),
                bytes,
                conn.peer,
                conn.transport,
                now,
                &mut self.out,
            )
        };
        drop(held);
        for aor in self.core.websocket_registrations() {
            let mut known = lock(&conn.registered);
            if known.len() < MAX_AORS_REGISTERED && !known.contains(&aor) {
                known.push(aor);
            }
        }
        // Extras first: a 100 Trying must not trail the answers the
        // forwarded INVITE draws.
        self.sender.send_all(self.core.extra());
        self.sender.reply(reply, &self.out);
        if self.deferred.len() >= MAX_DEFERRED {
            self.commit();
        }
    }

    /// Stores the binding changes this round gathered, all in one write
    /// (one fsync, one Redis round trip), then sends their answers: the
    /// reactor waits once for every connection it served this round
    /// instead of once per REGISTER.
    fn commit(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        let mut held = self.storage.hold();
        self.deferred.flush(&mut self.core, &mut held);
        drop(held);
        let sender = &self.sender;
        self.deferred
            .send_ready(|reply, out| sender.reply(reply, out));
    }

    /// `n` bytes arrived on a WebSocket connection: its upgrade request,
    /// then frames, each message one SIP message (RFC 7118 §5.1).
    /// `false`: the connection was closed.
    fn received_ws(&mut self, t: Token, n: usize) -> bool {
        let Some(l) = self.locals.get_mut(&t) else {
            return false;
        };
        let now = Instant::now();
        l.last_read = now;
        let conn = l.conn.clone();
        let mut inbuf = std::mem::take(&mut l.inbuf);
        let Some(mut state) = l.ws.take() else {
            return false;
        };
        inbuf.extend_from_slice(&self.scratch[..n]);
        let hub = self.hub.clone();
        let limit = hub.limits.queue_bytes;
        let settings = &hub.shared.config.websocket;
        let mut used = 0;
        if state.is_none() {
            match websocket::upgrade(&inbuf, &settings.origins) {
                Upgrade::Incomplete => {}
                Upgrade::Refuse { response, why } => {
                    hub.shared
                        .metrics
                        .ws_upgrades_refused
                        .fetch_add(1, Ordering::Relaxed);
                    let _ = lock(&conn.tx).queue_raw(&[&response], limit);
                    crate::io::log::connection_trouble(&format!(
                        "{}: WebSocket upgrade refused: {why}",
                        conn.peer
                    ));
                    self.close(t, CloseReason::WebSocket);
                    return false;
                }
                Upgrade::Accept { used: u, response } => {
                    let mut tx = lock(&conn.tx);
                    let sent = tx.queue_raw(&[&response], limit);
                    tx.wire = Wire::Frames;
                    drop(tx);
                    if sent.is_err() {
                        self.close(t, CloseReason::Error);
                        return false;
                    }
                    hub.shared
                        .metrics
                        .ws_upgrades
                        .fetch_add(1, Ordering::Relaxed);
                    *state = Some(websocket::Decoder::default());
                    used = u;
                }
            }
        }
        let mut peer_closed = None;
        let mut violation = None;
        let mut flooded = false;
        if let Some(decoder) = state.as_mut() {
            match decoder.decode(&mut inbuf[used..], settings.max_message, |e| match e {
                websocket::Event::Message(m) => self.handle_message(&conn, m),
                websocket::Event::Ping(p) => {
                    if !flooded && self.keepalive(&conn, 1) {
                        let _ = lock(&conn.tx).queue_raw(&[&websocket::pong(p)], limit);
                    } else {
                        flooded = true;
                    }
                }
                websocket::Event::Close(code) => peer_closed = Some(code),
            }) {
                Ok(u) => used += u,
                Err(v) => violation = Some(v),
            }
        }
        if flooded {
            let code = websocket::close::POLICY_VIOLATION;
            let _ = lock(&conn.tx).queue_raw(&[&websocket::close_frame(code)], limit);
            self.close(t, CloseReason::KeepaliveFlood);
            return false;
        }
        if let Some(v) = violation {
            let _ = lock(&conn.tx).queue_raw(&[&websocket::close_frame(v.code)], limit);
            crate::io::log::connection_trouble(&format!(
                "{}: WebSocket closed with {}: {}",
                conn.peer, v.code, v.why
            ));
            self.close(t, CloseReason::WebSocket);
            return false;
        }
        if let Some(code) = peer_closed {
            // RFC 6455 §5.5.1: answer the close, then end the connection.
            let echo = code
                .filter(|c| (1000..5000).contains(c) && !matches!(c, 1004..=1006 | 1015))
                .unwrap_or(websocket::close::NORMAL);
            let _ = lock(&conn.tx).queue_raw(&[&websocket::close_frame(echo)], limit);
            self.close(t, CloseReason::Peer);
            return false;
        }
        let Some(l) = self.locals.get_mut(&t) else {
            return false;
        };
        inbuf.drain(..used);
        let midway = state.as_ref().as_ref().is_some_and(|d| d.is_midway());
        if inbuf.is_empty() && !midway {
            l.message_start = None;
            l.inbuf = Vec::new();
        } else {
            l.message_start.get_or_insert(now);
            if inbuf.is_empty() {
                inbuf = Vec::new();
            }
            l.inbuf = inbuf;
        }
        l.ws = Some(state);
        true
    }

    /// Counts `n` keep-alives (CRLF or WebSocket pings) from `conn`
    /// against its pace and its source's request rate; `false` when the
    /// connection pings far beyond RFC 5626's pace and must close.
    fn keepalive(&mut self, conn: &Conn, n: u32) -> bool {
        let m = &self.hub.shared.metrics;
        m.conn_keepalives.fetch_add(u64::from(n), Ordering::Relaxed);
        let rate = self.hub.limits.keepalive_rate;
        let Some(l) = self.locals.get_mut(&conn.token) else {
            return false;
        };
        let now = Instant::now();
        let mut allowed = l.pings.refill(now, f64::from(rate), ping_burst(rate));
        for _ in 0..n {
            if allowed == 0 {
                return false;
            }
            allowed -= 1;
            l.pings.tokens -= 1.0;
            // The source's request rate pays for them too (the guard).
            if self
                .hub
                .shared
                .guard
                .admit(conn.peer.ip(), crate::io::clock::now().unix_ms)
                != crate::proto::guard::Verdict::Admit
            {
                m.rate_limited.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        }
        true
    }

    /// Closes connections past a deadline.
    fn sweep(&mut self, now: Instant) {
        let l = &self.hub.limits;
        let mut due = Vec::new();
        for (t, c) in &self.locals {
            let reason = if c.connecting {
                (now >= c.opened + l.connect_timeout).then_some(CloseReason::ConnectFailed)
            } else if c.opening() && now >= c.opened + l.handshake_timeout {
                Some(CloseReason::HandshakeTimeout)
            } else if !c.spoke && now >= c.opened + l.first_message_timeout {
                Some(CloseReason::Silent)
            } else if c
                .message_start
                .is_some_and(|s| now >= s + l.message_timeout)
            {
                Some(CloseReason::MessageTimeout)
            } else if now >= c.last_read + l.idle_timeout {
                Some(CloseReason::Idle)
            } else {
                None
            };
            if let Some(r) = reason {
                due.push((*t, r));
            }
        }
        for (t, r) in due {
            if r == CloseReason::HandshakeTimeout {
                self.hub
                    .shared
                    .metrics
                    .tls_handshake_failures
                    .fetch_add(1, Ordering::Relaxed);
            }
            self.close(t, r);
        }
    }

    /// Closes `t` (TLS with close_notify), forgets it and counts why.
    fn close(&mut self, t: Token, reason: CloseReason) {
        let Some(l) = self.locals.remove(&t) else {
            return;
        };
        let conn = l.conn;
        let hub = self.hub.clone();
        let reason = lock(&conn.closing).get_or_insert(reason).to_owned();
        let pending = {
            let mut tx = lock(&conn.tx);
            let was = std::mem::replace(&mut tx.phase, Phase::Open);
            if tx.wire == Wire::Frames
                && matches!(reason, CloseReason::Shutdown | CloseReason::Idle)
            {
                let code = if reason == CloseReason::Shutdown {
                    websocket::close::GOING_AWAY
                } else {
                    websocket::close::NORMAL
                };
                let _ = tx.queue_raw(&[&websocket::close_frame(code)], usize::MAX);
            }
            if let Some(tls) = &mut tx.tls {
                if reason != CloseReason::SlowReader && !matches!(was, Phase::Connecting(_)) {
                    tls.send_close_notify();
                    let _ = tx.flush();
                }
            }
            tx.phase = Phase::Closed;
            if matches!(
                reason,
                CloseReason::SlowReader
                    | CloseReason::HandshakeTimeout
                    | CloseReason::MessageTimeout
            ) {
                // Abort (RST): what the kernel still holds for a peer that
                // misbehaves is freed now, not after it drains at the
                // peer's pace.
                let _ = socket2::SockRef::from(&tx.sock).set_linger(Some(Duration::ZERO));
            }
            let _ = self.poll.registry().deregister(&mut tx.sock);
            let _ = tx.sock.shutdown(std::net::Shutdown::Both);
            tx.out = Vec::new();
            match was {
                Phase::Connecting(p) => Some(p),
                _ => None,
            }
        };
        if let Some(p) = pending {
            hub.shared
                .metrics
                .tcp_connects_pending
                .fetch_sub(1, Ordering::AcqRel);
            for bytes in p {
                hub.shared.metrics.dropped.fetch_add(1, Ordering::Relaxed);
                hub.undeliverable(&bytes);
            }
        }
        {
            let aliases = std::mem::take(&mut *lock(&conn.aliases));
            let mine = |c: Option<&Arc<Conn>>| c.is_some_and(|c| Arc::ptr_eq(c, &conn));
            let mut conns = lock(&hub.conns);
            for at in std::iter::once(Alias::Addr(conn.peer)).chain(aliases) {
                match at {
                    Alias::Addr(at) => {
                        if mine(conns.get(&at)) {
                            conns.remove(&at);
                        }
                    }
                    Alias::Name(key) => {
                        let mut names = lock(&hub.names);
                        if mine(names.get(&key)) {
                            names.remove(&key);
                        }
                    }
                }
            }
        }
        if conn.counted_ip {
            hub.release_ip(conn.peer.ip());
        }
        if reason != CloseReason::Shutdown {
            self.drop_bindings(&conn);
        }
        let watched = std::mem::take(&mut *lock(&conn.requests));
        if !watched.is_empty() {
            hub.transport_failed(&watched);
        }
        hub.open.fetch_sub(1, Ordering::Relaxed);
        hub.shared.metrics.connection_closed(conn.transport, reason);
        if !matches!(
            reason,
            CloseReason::Peer | CloseReason::Shutdown | CloseReason::Error
        ) {
            crate::io::log::connection_closed(conn.peer, reason.label());
        }
    }
}

/// What one read from a connection gave.
enum Got {
    /// SIP bytes (plaintext) in the scratch buffer; `true`: the socket
    /// gave less than asked for and the session holds no more plaintext,
    /// so nothing is left to read until the socket is readable again.
    Bytes(usize, bool),
    /// Nothing more for now.
    Nothing,
    /// The peer closed (after these last plaintext bytes).
    Closed(usize),
    /// The connection failed.
    Failed(CloseReason),
}

/// One read: plain TCP bytes, or TLS records fed to the session and the
/// plaintext they gave.
fn read_some(tx: &mut Tx, scratch: &mut [u8]) -> Got {
    let Tx { sock, tls, .. } = tx;
    let Some(tls) = tls else {
        return match sock.read(scratch) {
            Ok(0) => Got::Closed(0),
            Ok(n) => Got::Bytes(n, n < scratch.len()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Got::Nothing,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Got::Bytes(0, false),
            Err(_) => Got::Failed(CloseReason::Error),
        };
    };
    // Plaintext left from the last records first.
    match tls.reader().read(scratch) {
        Ok(n) if n > 0 => return Got::Bytes(n, false),
        Ok(_) => return Got::Closed(0),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(_) => return Got::Failed(CloseReason::Tls),
    }
    let mut wire = Short { sock, short: false };
    let eof = match tls.read_tls(&mut wire) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Got::Nothing,
        Err(e) if e.kind() == io::ErrorKind::Interrupted => return Got::Bytes(0, false),
        Err(_) => return Got::Failed(CloseReason::Error),
    };
    let socket_empty = wire.short;
    if tls.process_new_packets().is_err() {
        // Send the alert that says why, then give up.
        let _ = tls.write_tls(sock);
        return Got::Failed(CloseReason::Tls);
    }
    let n = match tls.reader().read(scratch) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
        Err(_) => return Got::Failed(CloseReason::Tls),
    };
    if eof {
        Got::Closed(n)
    } else {
        Got::Bytes(n, socket_empty && n < scratch.len())
    }
}

/// The socket as TLS reads it, noting whether a read gave less than it
/// asked for: a stream socket does so only when it had no more.
struct Short<'a> {
    sock: &'a mut TcpStream,
    short: bool,
}

impl Read for Short<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.sock.read(buf)?;
        self.short = n < buf.len();
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_comes_from_the_descriptors_unless_set_lower() {
        assert_eq!(effective_limit(0, 1_048_576), 1_048_576 - FD_RESERVE);
        assert_eq!(effective_limit(5_000, 1_048_576), 5_000);
        assert_eq!(effective_limit(5_000, 1024), 1024 - FD_RESERVE);
        assert_eq!(effective_limit(0, 100), 64, "never below a floor");
    }
}
