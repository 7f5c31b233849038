//! What the hub and the reactors share: connections and their queues,
//! the hub's tables, a reactor's per-connection state and paces.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Poll, Token, Waker};

use crate::config::ConnectionLimits;
use crate::io::drive::{Deferred, Storage};
use crate::io::send::Sender;
use crate::io::tls::TlsContext;
use crate::io::wake::Wakers;
use crate::proto::branch::Key;
use crate::proto::core::{Core, Transport};
use crate::proto::guard::SourceKey;
use crate::proto::metrics::CloseReason;
use crate::proto::shared::Shared;
use sip_core::websocket::server::{self as websocket};

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
pub(super) enum Wire {
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
pub(super) const FD_RESERVE: usize = 256;
/// How long a reactor waits before polling again after `poll` failed.
pub(super) const TURN: Duration = Duration::from_millis(100);
/// How long a busy connection held back by the hand-off bound waits
/// before it is tried again (TCP's window holds its peer meanwhile).
pub(super) const HELD: Duration = Duration::from_millis(1);
/// Orders waiting for a reactor that wake it even while it looks for
/// them itself: a millisecond's hand-offs at 64,000 a second.
pub(super) const WAKE_AT: usize = 64;
/// How long a reactor that took messages handed on keeps looking for
/// more every [`HELD`] without being woken.
pub(super) const WATCH: Duration = Duration::from_millis(100);
/// How often a reactor walks its connections for deadlines: a deadline is
/// met at most this late, and a walk over 50,000 idle connections costs
/// a fraction of a millisecond per second instead of per turn.
pub(super) const SWEEP: Duration = Duration::from_secs(1);
/// Bytes read from one connection per event before others get a turn.
pub(super) const READ_BUDGET: usize = 256 << 10;
/// The reactor's read buffer.
pub(super) const SCRATCH: usize = 64 << 10;

pub(super) const WAKER: Token = Token(0);
pub(super) const LISTEN_TCP: Token = Token(1);
pub(super) const LISTEN_TLS: Token = Token(2);
pub(super) const LISTEN_WS: Token = Token(3);
pub(super) const LISTEN_WSS: Token = Token(4);
pub(super) const FIRST_CONN: usize = 16;

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets up a connection's socket: no Nagle delay (a SIP message is
/// written whole), and bytes sent must be acknowledged by the peer
/// within `send_timeout` (`TCP_USER_TIMEOUT`, RFC 5482), zero-window
/// probes included: the kernel then aborts the connection (ETIMEDOUT,
/// closed as a slow reader) with no timer of ours.
pub(super) fn tune(sock: &TcpStream, limits: &ConnectionLimits) {
    let _ = sock.set_nodelay(true);
    let _ = socket2::SockRef::from(sock).set_tcp_user_timeout(Some(limits.send_timeout));
}

/// Why a connection whose socket failed with `e` is closed: a send the
/// peer did not take within `send_timeout` (the kernel's ETIMEDOUT) is
/// a slow reader's; anything else an error.
pub(super) fn failure(e: &io::Error) -> CloseReason {
    if e.kind() == io::ErrorKind::TimedOut {
        CloseReason::SlowReader
    } else {
        CloseReason::Error
    }
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
pub(super) enum QueueError {
    /// The connection is closed or closing.
    Closed,
    /// The peer's queue is full: it is being closed as a slow reader.
    Full,
}

impl QueueError {
    /// Why the connection is closed for it.
    pub(super) fn close_reason(self) -> CloseReason {
        match self {
            QueueError::Full => CloseReason::SlowReader,
            QueueError::Closed => CloseReason::Error,
        }
    }
}

#[derive(Debug)]
pub(super) enum Phase {
    /// An outbound connect in progress, with what waits for it.
    Connecting(Vec<Vec<u8>>),
    Open,
    Closed,
}

/// One connection's sending side and session, shared by its reactor and
/// every sender.
#[derive(Debug)]
pub(super) struct Tx {
    pub(super) sock: TcpStream,
    /// Boxed: a session is about 1.2 KB, which every plain TCP or WS
    /// connection would otherwise carry unused, and which put the fields
    /// each of its messages reads lines apart.
    pub(super) tls: Option<Box<rustls::Connection>>,
    /// Plain TCP: bytes queued for the peer, from `sent` on.
    pub(super) out: Vec<u8>,
    pub(super) sent: usize,
    pub(super) phase: Phase,
    pub(super) wire: Wire,
}

impl Tx {
    pub(super) fn queued(&self) -> usize {
        match &self.phase {
            Phase::Connecting(p) => p.iter().map(Vec::len).sum(),
            _ => self.out.len() - self.sent,
        }
    }

    /// Bytes are waiting for the socket to take them (it took no more at
    /// the last write).
    pub(super) fn backlogged(&self) -> bool {
        match &self.tls {
            Some(tls) => tls.wants_write(),
            None => self.queued() > 0,
        }
    }

    /// Writes what the socket takes now. `Err`: the connection is broken.
    pub(super) fn flush(&mut self) -> io::Result<()> {
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
                    // Given back once written: a phone's connection idles
                    // between refreshes (an hour), and its last answer's
                    // buffer would be a third of what it holds meanwhile.
                    self.sent = 0;
                    self.out = Vec::new();
                } else if self.sent > self.out.len() / 2 {
                    self.out.drain(..self.sent);
                    self.sent = 0;
                }
            }
        }
        Ok(())
    }

    /// Queues the SIP message `bytes` for the peer (at most `limit` bytes
    /// waiting), in a frame of its own over WebSocket, without writing
    /// it yet: [`flush`](Self::flush) does.
    pub(super) fn stage(&mut self, bytes: &[u8], limit: usize) -> Result<(), QueueError> {
        match self.wire {
            Wire::Stream => self.stage_raw(&[bytes], limit),
            Wire::Upgrading => Err(QueueError::Closed),
            Wire::Frames => {
                let (h, n) = websocket::data_header(bytes);
                self.stage_raw(&[&h[..n], bytes], limit)
            }
        }
    }

    /// [`stage`](Self::stage), then writes what the socket takes.
    pub(super) fn queue(&mut self, bytes: &[u8], limit: usize) -> Result<(), QueueError> {
        self.stage(bytes, limit)?;
        self.flush().map_err(|_| QueueError::Closed)
    }

    /// Queues `parts` as they are (an HTTP response, a whole frame) and
    /// writes what the socket takes.
    pub(super) fn queue_raw(&mut self, parts: &[&[u8]], limit: usize) -> Result<(), QueueError> {
        self.stage_raw(parts, limit)?;
        self.flush().map_err(|_| QueueError::Closed)
    }

    fn stage_raw(&mut self, parts: &[&[u8]], limit: usize) -> Result<(), QueueError> {
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
                    push_tls(tls, &mut self.sock, bytes)?;
                }
            }
            None => {
                if self.queued() + len > limit {
                    // Gathered answers (a corked read, an outbox) may
                    // reach the bound before anything was written: what
                    // the socket takes now makes room.
                    self.flush().map_err(|_| QueueError::Closed)?;
                }
                if self.queued() + len > limit {
                    return Err(QueueError::Full);
                }
                for bytes in parts {
                    self.out.extend_from_slice(bytes);
                }
            }
        }
        Ok(())
    }
}

/// Puts `bytes` in `tls`'s record buffer (bounded by its buffer limit),
/// writing records to `sock` when it fills. `Full`: the socket takes no
/// more and the buffer has no room.
fn push_tls(
    tls: &mut rustls::Connection,
    sock: &mut TcpStream,
    mut bytes: &[u8],
) -> Result<(), QueueError> {
    while !bytes.is_empty() {
        let n = tls.writer().write(bytes).map_err(|_| QueueError::Closed)?;
        bytes = &bytes[n..];
        if bytes.is_empty() {
            break;
        }
        match tls.write_tls(sock) {
            Ok(0) => return Err(QueueError::Closed),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(QueueError::Full),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(QueueError::Closed),
        }
    }
    Ok(())
}

/// One connection, as the connection table and senders see it.
#[derive(Debug)]
pub(super) struct Conn {
    pub(super) peer: SocketAddr,
    pub(super) token: Token,
    pub(super) reactor: usize,
    pub(super) transport: Transport,
    /// Counted against its source IP's share (accepted connections).
    pub(super) counted_ip: bool,
    pub(super) tx: Mutex<Tx>,
    /// Why it is being closed, set by whoever decided it (once).
    pub(super) closing: Mutex<Option<CloseReason>>,
    /// What few connections need (forwarded requests watched, a
    /// connect's waiting requests, WebSocket registrations, TLS aliases):
    /// made when first used, so a phone's connection holds one pointer
    /// for them instead of four locked lists. Locked after `tx` where
    /// both are held, and before the hub's tables.
    pub(super) extras: Mutex<Option<Box<Extras>>>,
    /// Busy: every reactor decides its messages (`spread`).
    pub(super) spread: AtomicBool,
    /// Its messages handed to other reactors and not yet decided there
    /// (`spread`): while any are, each call's next message follows them.
    pub(super) handed: AtomicU32,
    /// The answers other reactors decided for it, for its reactor to
    /// write (`outbox`): made when it is first used, since most
    /// connections are never busy.
    pub(super) outbox: Mutex<Option<Box<super::outbox::Outbox>>>,
}

/// The lists of a [`Conn`] that most connections never fill.
#[derive(Debug, Default)]
pub(super) struct Extras {
    /// WebSocket: the latest requests the stateful proxy forwarded over
    /// it (at most [`MAX_REQUESTS_WATCHED`]). A browser cannot be reached
    /// another way (RFC 7118 §5), so when the connection closes those
    /// still unanswered fail at once (503 upstream) instead of after
    /// timer B or C.
    pub(super) requests: Vec<(Key, u8)>,
    /// The forwarded requests queued while it connects: failed at once
    /// if the connect fails (bounded as the queue is).
    pub(super) waiting: Vec<(Key, u8)>,
    /// WebSocket: the addresses-of-record registered over it (at most
    /// [`MAX_AORS_REGISTERED`]): when it closes, their bindings on it are
    /// dropped, since a browser is never reached on another connection.
    pub(super) registered: Vec<String>,
    /// TLS: other addresses and domain names it stands for (RFC 5923
    /// aliases, at most [`MAX_ALIASES`]).
    pub(super) aliases: Vec<Alias>,
}

impl Conn {
    /// Its extras, made on first use.
    pub(super) fn with_extras<R>(&self, f: impl FnOnce(&mut Extras) -> R) -> R {
        f(lock(&self.extras).get_or_insert_with(Box::default))
    }

    /// Takes one of its extras' lists (empty where none was made).
    pub(super) fn take_extra<T>(&self, list: impl FnOnce(&mut Extras) -> &mut Vec<T>) -> Vec<T> {
        lock(&self.extras)
            .as_deref_mut()
            .map(|e| std::mem::take(list(e)))
            .unwrap_or_default()
    }
}

/// A domain name (lower case) and port.
pub(super) type NameKey = (Box<str>, u16);

/// A connection's identity in the core's table of open flows (unique
/// while it lives).
pub(super) fn conn_id(conn: &Conn) -> u64 {
    conn as *const Conn as u64
}

/// A sent-by a TLS connection stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Alias {
    /// An address, in the connection table.
    Addr(SocketAddr),
    /// A domain name and port, in the table of names.
    Name(NameKey),
}

/// Aliases one TLS connection may hold (a proxy has one sent-by, maybe a
/// few; a peer must not fill the connection table with ports).
pub(super) const MAX_ALIASES: usize = 4;

/// Requests watched per WebSocket connection (a phone rarely has more
/// than a few transactions under way; the oldest are forgotten first).
pub(super) const MAX_REQUESTS_WATCHED: usize = 16;

/// Addresses-of-record one WebSocket connection registers whose bindings
/// are dropped when it closes (a browser registers one; more are left to
/// expire).
pub(super) const MAX_AORS_REGISTERED: usize = 8;

/// What reactors receive from other threads.
#[derive(Debug)]
pub(super) enum Order {
    /// Serve this connection: one we opened, or (`accepted`) one another
    /// reactor accepted, handed over so that connections spread evenly
    /// whichever reactor woke first to accept them.
    Adopt { conn: Arc<Conn>, accepted: bool },
    /// Close this connection.
    Close(Token),
    /// Decide this message of a busy connection (see `spread`).
    Decide(Arc<Conn>, Vec<u8>),
    /// Write this connection's outbox (see `outbox`).
    Write(Arc<Conn>),
}

/// A reactor, as other threads reach it.
#[derive(Debug)]
pub(super) struct ReactorLink {
    pub(super) waker: Waker,
    pub(super) orders: Mutex<Vec<Order>>,
    /// Messages handed to it to decide and not yet decided.
    pub(super) handed: AtomicUsize,
    /// It waits in its poll: only then does an order need a wake-up. A
    /// busy reactor takes its orders at the end of each turn, so one
    /// reading a busy connection is not woken once per answer the others
    /// decided for it.
    pub(super) parked: AtomicBool,
}

impl ReactorLink {
    /// Gives it `orders`, waking it if it waits, or if they bring what
    /// it has to take to [`WAKE_AT`] (a reactor looking for hand-offs
    /// every millisecond then takes a full batch at once, not a
    /// millisecond later).
    pub(super) fn give(&self, orders: impl FnOnce(&mut Vec<Order>)) {
        let (before, after) = {
            let mut queued = lock(&self.orders);
            let before = queued.len();
            orders(&mut queued);
            (before, queued.len())
        };
        // Pairs with `park`: the order is in before `parked` is read, so
        // either the reactor sees it before it waits or this sees it wait.
        if self.parked.load(std::sync::atomic::Ordering::SeqCst)
            || (before < WAKE_AT && after >= WAKE_AT)
        {
            let _ = self.waker.wake();
        }
    }

    /// The reactor is about to wait: whether an order came first (then
    /// it must not wait).
    pub(super) fn park(&self) -> bool {
        self.parked.store(true, std::sync::atomic::Ordering::SeqCst);
        !lock(&self.orders).is_empty()
    }

    /// The reactor is awake again.
    pub(super) fn unpark(&self) {
        self.parked
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Open TCP and TLS connections and what their reactors share.
#[derive(Debug)]
pub struct TcpHub {
    pub(super) shared: Arc<Shared>,
    /// Where messages are traced and call records written.
    pub(super) sinks: crate::io::sinks::Sinks,
    /// Where each reactor stores binding changes (its own journal: no
    /// reactor waits for another's decision), taken by `start`.
    pub(super) stores: Mutex<Vec<Storage>>,
    pub(super) udp: Option<Arc<UdpSocket>>,
    pub(super) tls: Option<Arc<TlsContext>>,
    pub(super) wakers: Arc<Wakers>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) limits: ConnectionLimits,
    /// The effective global limit.
    pub(super) max: usize,
    pub(super) conns: Mutex<HashMap<SocketAddr, Arc<Conn>>>,
    /// TLS connections that stand for a domain name and port (RFC 5923).
    pub(super) names: Mutex<HashMap<NameKey, Arc<Conn>>>,
    pub(super) per_ip: Mutex<HashMap<SourceKey, usize>>,
    pub(super) open: AtomicUsize,
    pub(super) next_token: AtomicUsize,
    pub(super) next_reactor: AtomicUsize,
    pub(super) reactors: OnceLock<Vec<ReactorLink>>,
    /// The last TLS sessions set up (peer, version, suite, group), for
    /// `/status`: at most [`RECENT_SESSIONS`].
    pub(super) recent: Mutex<std::collections::VecDeque<TlsSession>>,
}

/// TLS sessions `/status` shows, at most.
pub const RECENT_SESSIONS: usize = 16;

/// One TLS session as it was set up.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TlsSession {
    /// The peer's address.
    pub peer: String,
    /// TLSv1_3, TLSv1_2.
    pub version: String,
    /// The cipher suite.
    pub suite: String,
    /// The key-exchange group (IANA name).
    pub group: String,
    /// The handshake resumed a session.
    pub resumed: bool,
}

/// What a reactor keeps per connection beside the shared part.
#[derive(Debug)]
pub(super) struct Local {
    pub(super) conn: Arc<Conn>,
    /// Bytes of an incomplete message (empty, unallocated, between
    /// messages).
    pub(super) inbuf: Vec<u8>,
    pub(super) opened: Instant,
    pub(super) last_read: Instant,
    /// When the first byte of the incomplete message in `inbuf` came.
    pub(super) message_start: Option<Instant>,
    pub(super) handshaking: bool,
    /// An outbound connect not yet complete (known here, so the deadline
    /// walk takes no lock).
    pub(super) connecting: bool,
    /// WebSocket: the upgrade still to come (`None`), or the frames'
    /// reassembly after it.
    pub(super) ws: Option<Box<Option<websocket::Decoder>>>,
    /// CR/LF bytes the reads so far ended with: a CRLFCRLF ping (RFC 5626
    /// §4.4.1) may come in two reads.
    pub(super) crlf: u8,
    /// Whether a SIP message came (outbound connections: ours, so yes).
    pub(super) spoke: bool,
    /// The keep-alives it may still send now.
    pub(super) pings: Pace,
    /// How busy it is: past `spread_above` every reactor decides.
    pub(super) busy: super::spread::Busy,
}

/// A token bucket for one peer: `rate` a second, `burst` at most.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pace {
    pub(super) tokens: f64,
    pub(super) at: Instant,
}

impl Pace {
    pub(super) fn full(burst: f64, now: Instant) -> Self {
        Self {
            tokens: burst,
            at: now,
        }
    }

    /// Refills to `now` and says how many whole tokens there are.
    pub(super) fn refill(&mut self, now: Instant, rate: f64, burst: f64) -> u32 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.at = self.at.max(now);
        self.tokens as u32
    }

    /// Takes one token at `now`, if there is one.
    pub(super) fn take(&mut self, now: Instant, rate: f64, burst: f64) -> bool {
        if self.refill(now, rate, burst) >= 1 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Whether a bucket left alone since its last use is full again.
    pub(super) fn idle(&self, now: Instant, rate: f64, burst: f64) -> bool {
        self.tokens + now.saturating_duration_since(self.at).as_secs_f64() * rate >= burst
    }
}

/// Keep-alives a connection may send at once: ten times its rate a second.
pub(super) fn ping_burst(rate: u32) -> f64 {
    f64::from(rate) * 10.0
}

/// Sources whose accept rate a reactor remembers; past it, those whose
/// buckets are full again are forgotten (they lose nothing).
pub(super) const MAX_SOURCES: usize = 16_384;

impl Local {
    /// A connection that opens now (TLS ones start handshaking).
    pub(super) fn new(conn: Arc<Conn>, connecting: bool, ping_rate: u32) -> Self {
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
            busy: super::spread::Busy::default(),
        }
    }

    /// Still in its TLS handshake or WebSocket upgrade.
    pub(super) fn opening(&self) -> bool {
        self.handshaking || self.ws.as_ref().is_some_and(|w| w.is_none())
    }
}

/// A reactor's connections by token. The hub hands tokens out in
/// sequence, so no peer chooses a key and none can aim keys at one bucket:
/// one multiplication hashes a token, where the default keyed hash cost
/// about 140 instructions for each of the seven lookups a message makes.
pub(super) type TokenMap<V> = HashMap<Token, V, std::hash::BuildHasherDefault<TokenHasher>>;

/// Fibonacci hashing of a token: a multiplication by an odd constant,
/// a bijection that spreads consecutive tokens over the table's buckets
/// (low bits) and its tags (high bits).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct TokenHasher(u64);

impl std::hash::Hasher for TokenHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// Why a reactor reads a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cause {
    /// A readable edge and nothing else.
    Readable,
    /// Listed for another read, or the peer hung up.
    Listed,
    /// The socket failed: read for its error, whatever it waits for.
    Failed,
}

/// One reactor thread: its poll, its connections and its core.
pub(super) struct Reactor {
    pub(super) hub: Arc<TcpHub>,
    pub(super) index: usize,
    pub(super) poll: Poll,
    pub(super) listeners: Vec<(mio::net::TcpListener, Token, bool)>,
    pub(super) locals: TokenMap<Local>,
    pub(super) core: Core,
    pub(super) storage: Storage,
    pub(super) sender: Sender,
    pub(super) out: Vec<u8>,
    pub(super) scratch: Vec<u8>,
    /// Connections with more to read after their budget ran out.
    pub(super) again: Vec<Token>,
    /// Busy connections not read while another reactor holds the bound
    /// of messages handed to it: tried again after [`HELD`], not in a
    /// spin that would take the core from the reactor catching up.
    pub(super) held: Vec<Token>,
    /// This reactor's share of the accept rate.
    pub(super) bucket: Option<Bucket>,
    /// Each source's accept rate (`accept_rate_per_ip`).
    pub(super) sources: HashMap<SourceKey, Pace>,
    /// Binding changes waiting for the end of the round, with their
    /// answers.
    pub(super) deferred: Deferred,
    /// Messages of busy connections for other reactors, by reactor, sent
    /// at the end of the turn.
    pub(super) handoffs: Vec<Vec<Order>>,
    /// Until when it looks for orders every [`HELD`] instead of waiting
    /// to be woken: it took messages handed on lately, and a reactor
    /// that does not wait is not woken (no system call for the reactor
    /// handing them on, and fewer, fuller turns here).
    pub(super) watch_until: Option<Instant>,
}

/// Most binding changes a reactor gathers before it stores them.
pub(super) const MAX_DEFERRED: usize = 256;

/// The server-wide accept rate: a [`Pace`] of `rate` tokens a second,
/// holding at most a tenth of a second's worth (and at least one), that
/// remembers until when it is spent.
pub(super) struct Bucket {
    pub(super) rate: f64,
    pub(super) pace: Pace,
    /// Spent: accept again at this time.
    pub(super) until: Option<Instant>,
}

impl Bucket {
    pub(super) fn new(rate: f64, now: Instant) -> Self {
        Self {
            rate,
            pace: Pace::full(Self::capacity(rate), now),
            until: None,
        }
    }

    pub(super) fn capacity(rate: f64) -> f64 {
        (rate / 10.0).max(1.0)
    }

    /// Takes a token, or says when the next one comes.
    pub(super) fn take(&mut self, now: Instant) -> Result<(), Instant> {
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
    pub(super) fn give_back(&mut self) {
        self.pace.tokens = (self.pace.tokens + 1.0).min(Self::capacity(self.rate));
    }

    /// Spent until a time still ahead.
    pub(super) fn waiting(&self, now: Instant) -> Option<Instant> {
        self.until.filter(|u| *u > now)
    }
}

/// `tokens` with each listed once (in token order).
pub(super) fn once_each(mut tokens: Vec<Token>) -> Vec<Token> {
    tokens.sort_unstable();
    tokens.dedup();
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `poll` was woken since it was last asked.
    fn woken(poll: &mut Poll) -> bool {
        let mut events = mio::Events::with_capacity(8);
        poll.poll(&mut events, Some(Duration::ZERO)).expect("poll");
        events.iter().any(|e| e.token() == WAKER)
    }

    #[test]
    fn a_reactor_is_woken_when_it_waits_or_when_a_batch_is_ready() {
        let mut poll = Poll::new().expect("poll");
        let link = ReactorLink {
            waker: Waker::new(poll.registry(), WAKER).expect("waker"),
            orders: Mutex::new(Vec::new()),
            handed: AtomicUsize::new(0),
            parked: AtomicBool::new(false),
        };
        let order = |o: &mut Vec<Order>| o.push(Order::Close(Token(9)));
        // Busy, or looking for orders itself: less than a batch wakes
        // nothing, the order that makes one wakes it, once.
        for _ in 1..WAKE_AT {
            link.give(order);
        }
        assert!(!woken(&mut poll), "woken before a batch");
        link.give(order);
        assert!(woken(&mut poll), "a batch waits");
        link.give(order);
        assert!(!woken(&mut poll), "woken twice for one batch");
        // Waiting in its poll, one order wakes it; one that came as it
        // parked keeps it from waiting.
        lock(&link.orders).clear();
        assert!(!link.park(), "nothing waited as it parked");
        link.give(order);
        assert!(woken(&mut poll), "a parked reactor sleeps on an order");
        assert!(link.park(), "the order is seen");
        link.unpark();
    }

    #[test]
    fn a_connection_listed_twice_is_read_once() {
        let listed = vec![Token(7), Token(3), Token(7), Token(3), Token(9)];
        assert_eq!(once_each(listed), vec![Token(3), Token(7), Token(9)]);
        assert!(once_each(Vec::new()).is_empty());
    }

    #[test]
    fn the_limit_comes_from_the_descriptors_unless_set_lower() {
        assert_eq!(effective_limit(0, 1_048_576), 1_048_576 - FD_RESERVE);
        assert_eq!(effective_limit(5_000, 1_048_576), 5_000);
        assert_eq!(effective_limit(5_000, 1024), 1024 - FD_RESERVE);
        assert_eq!(effective_limit(0, 100), 64, "never below a floor");
    }

    #[test]
    fn consecutive_tokens_fill_distinct_buckets_and_are_found() {
        use std::hash::BuildHasher;
        let hasher = std::hash::BuildHasherDefault::<TokenHasher>::default();
        // A bijection on the low bits: 4,096 consecutive tokens land in
        // 4,096 distinct buckets of a 4,096-bucket table.
        let buckets: std::collections::HashSet<u64> = (1_000..5_096)
            .map(|t| hasher.hash_one(Token(t)) & 4_095)
            .collect();
        assert_eq!(buckets.len(), 4_096);
        let mut map = TokenMap::default();
        for t in 0..10_000 {
            map.insert(Token(t), t);
        }
        assert!((0..10_000).all(|t| map.get(&Token(t)) == Some(&t)));
        assert!(!map.contains_key(&Token(10_000)));
    }
}
