//! A worker's connection to the target: a UDP socket, or one TCP, TLS,
//! WebSocket or secure WebSocket connection with its framing (RFC 3261
//! §18.3 on a stream, one message per WebSocket message on WS, RFC 7118)
//! and a write queue, so a worker never blocks on a full socket buffer. A
//! TLS link is a rustls session (sans-IO) over the non-blocking socket; its
//! handshake and a WebSocket upgrade run inside the worker's ordinary
//! send/receive/flush calls.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::ServerName;

use sip_core::framing::{frame, Frame};
use sip_core::websocket as ws;
use sip_core::{ErrorKind, Limits};

/// Which transport a run uses: UDP (with retransmissions), or TCP, TLS,
/// WS or WSS with one connection per worker, or one all of them share
/// (the workspace's one transport type; SCTP is refused by
/// [`Link::open`]).
pub use sip_core::Transport;

/// Largest WebSocket message accepted from the target.
const MAX_WS_MESSAGE: usize = 1 << 16;

/// Room for each datagram a batch reads: the largest UDP payload, so
/// none is cut, and a few cache lines more, so that the slots' first
/// lines do not share cache sets (see [`sip_udp::RECV_STRIDE`]).
const RX_SLOT: usize = sip_udp::RECV_STRIDE;
/// The receive buffer a worker hands to [`Link::receive`]: a batch of
/// datagrams (`recvmmsg`), one slot each; a connection reads into its
/// first 64 KiB. Its pages are zero until written.
pub const RECEIVE_BUFFER: usize = sip_udp::SLOTS * RX_SLOT;
/// What one read of a connection takes at most.
const STREAM_READ: usize = 65_535;

/// Bytes a link moved on the wire: datagram payloads, or what the TCP
/// socket carried (TLS records and WebSocket frames included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wire {
    /// Bytes written.
    pub sent: u64,
    /// Bytes read.
    pub received: u64,
}

impl std::ops::AddAssign for Wire {
    fn add_assign(&mut self, o: Wire) {
        self.sent += o.sent;
        self.received += o.received;
    }
}

/// A worker's way to the target.
#[derive(Debug)]
pub enum Link {
    /// A non-blocking UDP socket.
    Udp(Box<Datagrams>),
    /// A non-blocking connection: TCP, TLS, WS or WSS.
    Stream(Box<Stream>),
    /// A connection every generator thread sends and reads on, one at a
    /// time (see [`Link::into_shared`]).
    Shared(Box<Handle>),
}

/// A UDP socket, read a batch of datagrams per system call (`recvmmsg`):
/// a generator that reads one datagram per call pays a second call,
/// answered `EAGAIN`, to learn the queue is empty; a batch that comes
/// back short says so itself.
#[derive(Debug)]
pub struct Datagrams {
    socket: UdpSocket,
    /// The last turn stopped at its limit: more may be queued.
    more: bool,
    wire: Wire,
    /// A send or read failed: the socket's error queue may hold ICMP
    /// errors to read.
    errors: bool,
    /// The starts of datagrams an ICMP "unreachable" quoted, not yet
    /// taken (at most [`MAX_UNREACHABLE`]).
    unreachable: Vec<Vec<u8>>,
}

/// Quoted datagrams a UDP link keeps until the worker takes them; more
/// are read and dropped (their calls time out instead).
const MAX_UNREACHABLE: usize = 256;

impl Datagrams {
    fn new(socket: UdpSocket) -> Self {
        // ICMP errors are then queued with the datagram they quote, so a
        // call to a port where nothing listens fails at once (RFC 3261
        // §18.4) instead of after its retransmissions.
        let v6 = socket.local_addr().is_ok_and(|a| a.is_ipv6());
        let _ = sip_udp::report_errors(&socket, v6);
        Datagrams {
            socket,
            more: false,
            wire: Wire::default(),
            errors: false,
            unreachable: Vec::new(),
        }
    }

    /// Reads the ICMP errors queued on the socket.
    fn read_errors(&mut self) {
        self.errors = false;
        let kept = &mut self.unreachable;
        sip_udp::unreachable(&self.socket, MAX_UNREACHABLE, |_, quoted| {
            if kept.len() < MAX_UNREACHABLE {
                kept.push(quoted.to_vec());
            }
        });
    }
}

impl Datagrams {
    /// Hands up to `max` queued datagrams to `on`, read into `rx` (slots
    /// of `RX_SLOT` bytes, or one slot when it is smaller); returns how many.
    fn receive(&mut self, rx: &mut [u8], max: usize, on: &mut impl FnMut(&[u8])) -> usize {
        let slot = RX_SLOT.min(rx.len()).max(1);
        let slots = (rx.len() / slot).clamp(1, sip_udp::SLOTS);
        let mut n = 0;
        let mut lens = [0usize; sip_udp::SLOTS];
        while n < max {
            let want = (max - n).min(slots);
            // An error ends the turn: EAGAIN (nothing queued), or one an
            // ICMP message left, whose details are in the error queue.
            let got =
                match sip_udp::recv_batch(self.socket.as_raw_fd(), rx, slot, &mut lens[..want]) {
                    Ok(got) => got,
                    Err(e) => {
                        self.errors |= e.kind() != io::ErrorKind::WouldBlock;
                        break;
                    }
                };
            for (i, len) in lens.iter().take(got).enumerate() {
                self.wire.received += *len as u64;
                on(&rx[i * slot..][..*len]);
            }
            n += got;
            if got < want {
                break;
            }
        }
        self.more = n >= max;
        if self.errors {
            self.read_errors();
        }
        n
    }
}

/// A connection and what is in flight on it.
#[derive(Debug)]
pub struct Stream {
    socket: TcpStream,
    /// The TLS session (TLS, WSS); it also queues what the socket did not
    /// take.
    tls: Option<rustls::ClientConnection>,
    /// The WebSocket state (WS, WSS).
    ws: Option<WebSocket>,
    /// Plaintext read and not yet framed.
    rbuf: Vec<u8>,
    /// Bytes for a plain socket, accepted and not yet written.
    wbuf: Vec<u8>,
    /// The peer closed the connection, or it or the session failed.
    closed: bool,
    /// Why the connection failed (handshake, certificate, upgrade, frame).
    error: Option<String>,
    /// The last read filled its buffer, or the last turn stopped at its
    /// limit: more may be waiting.
    more: bool,
    wire: Wire,
}

/// A client's side of a WebSocket (RFC 6455).
#[derive(Debug)]
struct WebSocket {
    /// The server answered the upgrade with 101 and `sip`.
    upgraded: bool,
    /// Frames sent before the upgrade was answered.
    held: Vec<u8>,
    /// A fragmented message's parts so far.
    partial: Vec<u8>,
    /// State of the masking keys' generator (xorshift).
    mask: u32,
}

impl WebSocket {
    fn next_mask(&mut self) -> [u8; 4] {
        let mut x = self.mask;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.mask = x;
        x.to_be_bytes()
    }
}

/// A non-blocking UDP socket bound to `local`, in a SO_REUSEPORT group
/// when `group`.
fn udp(local: SocketAddr, group: bool) -> io::Result<UdpSocket> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(local),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    // Large buffers absorb the bursts of a thousand calls in flight
    // (capped by net.core.rmem_max / wmem_max).
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    if group {
        s.set_reuse_port(true)?;
    }
    s.bind(&local.into())?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// `members` UDP links on one local address and port (`local`'s; port 0:
/// one the first is given), a SO_REUSEPORT group steered by Call-ID
/// (`sip_udp::CallSteering`): one flow on the wire, each member reading
/// the responses to the calls whose Call-IDs hash to its index (see
/// [`sip_udp::CallSteering::index_of`]). Fails where the kernel refuses
/// the program (before Linux 5.17).
pub fn udp_group(local: SocketAddr, members: usize) -> io::Result<Vec<Link>> {
    let steering = sip_udp::CallSteering::load(u32::try_from(members).map_err(io::Error::other)?)?;
    let first = udp(local, true)?;
    let at = first.local_addr()?;
    // The kernel numbers a group's sockets in the order they bind; the
    // program goes on once all have.
    let mut group = vec![first];
    for _ in 1..members {
        group.push(udp(at, true)?);
    }
    steering.attach(&group[0])?;
    Ok(group
        .into_iter()
        .map(|s| Link::Udp(Box::new(Datagrams::new(s))))
        .collect())
}

/// Connects a TCP stream from `local` (port 0: any) and makes it
/// non-blocking.
fn connect(local: SocketAddr, target: SocketAddr) -> io::Result<TcpStream> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(target),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    if local.port() != 0 {
        // A fixed local port is bound again by the next scenario of a run
        // (update and logout touch register's bindings). Closing with a
        // reset frees it at once: a graceful close leaves it in FIN_WAIT_2
        // for as long as the server keeps its side open (Kamailio over WSS
        // did), and the next bind fails with "Address already in use".
        s.set_reuse_address(true)?;
        s.set_linger(Some(Duration::ZERO))?;
        s.bind(&local.into())?;
    }
    s.connect_timeout(&target.into(), Duration::from_secs(5))
        .map_err(|e| io::Error::new(e.kind(), format!("TCP connect to {target}: {e}")))?;
    let stream: TcpStream = s.into();
    stream.set_nodelay(true)?;
    stream.set_nonblocking(true)?;
    Ok(stream)
}

/// Hands complete messages in `rbuf` to `on` (at most `max`), dropping
/// keep-alives; a stream that cannot be framed is marked closed.
fn deframe(rbuf: &mut Vec<u8>, closed: &mut bool, max: usize, on: &mut impl FnMut(&[u8])) -> usize {
    let mut n = 0;
    let mut at = 0;
    while n < max {
        match frame(&rbuf[at..], &Limits::DEFAULT) {
            Ok(Frame::KeepAlive(k)) => at += k,
            Ok(Frame::Message(k)) => {
                on(&rbuf[at..at + k]);
                at += k;
                n += 1;
            }
            Err(e) if e.kind == ErrorKind::Incomplete => break,
            Err(_) => {
                // The stream cannot be resynchronised.
                *closed = true;
                at = rbuf.len();
                break;
            }
        }
    }
    rbuf.drain(..at);
    n
}

impl Link {
    /// This link made ready to be shared by generator threads: a
    /// connection goes behind a lock, so that one thread at a time frames
    /// its bytes (a UDP socket needs nothing).
    pub fn into_shared(self) -> Link {
        match self {
            Link::Stream(s) => Link::Shared(Box::new(Handle {
                fd: s.socket.as_raw_fd(),
                conn: Arc::new(Mutex::new(*s)),
            })),
            other => other,
        }
    }

    /// Another handle on this link, for another generator thread: one
    /// peer's load sent from several threads. A UDP socket is shared with
    /// counts of its own; a connection made shared by
    /// [`into_shared`](Self::into_shared) is the same connection, whose
    /// bytes no handle reports ([`shared_wire`](Self::shared_wire) does).
    /// `None` for a connection one thread owns.
    pub fn share(&self) -> io::Result<Option<Link>> {
        match self {
            Link::Udp(d) => Ok(Some(Link::Udp(Box::new(Datagrams::new(
                d.socket.try_clone()?,
            ))))),
            Link::Shared(h) => Ok(Some(Link::Shared(Box::new(Handle {
                fd: h.fd,
                conn: h.conn.clone(),
            })))),
            Link::Stream(_) => Ok(None),
        }
    }

    /// Runs `f` on the connection (locked when shared); `None` for UDP.
    fn stream<R>(&mut self, f: impl FnOnce(&mut Stream) -> R) -> Option<R> {
        match self {
            Link::Udp(_) => None,
            Link::Stream(s) => Some(f(s)),
            Link::Shared(h) => Some(f(&mut h.lock())),
        }
    }

    /// [`stream`](Self::stream) for a look that changes nothing.
    fn peek<R>(&self, f: impl FnOnce(&Stream) -> R) -> Option<R> {
        match self {
            Link::Udp(_) => None,
            Link::Stream(s) => Some(f(s)),
            Link::Shared(h) => Some(f(&h.lock())),
        }
    }

    /// Opens the link from `local` (port 0: any) to `target`; TLS and WSS
    /// need a client configuration (the target's certificate must name its
    /// IP address). WS and WSS send their upgrade request at once and hold
    /// SIP messages until it is answered.
    pub fn open(
        transport: Transport,
        local: SocketAddr,
        target: SocketAddr,
        tls: Option<&Arc<rustls::ClientConfig>>,
    ) -> io::Result<Self> {
        let secure = match transport {
            Transport::Udp => return Ok(Link::Udp(Box::new(Datagrams::new(udp(local, false)?)))),
            Transport::Tcp | Transport::Ws => false,
            Transport::Tls | Transport::Wss => true,
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("the load generator does not speak {}", other.as_str()),
                ))
            }
        };
        let tls = if secure {
            let config = tls.ok_or_else(|| {
                io::Error::other(format!("{} needs a CA (--tls-ca)", transport.as_str()))
            })?;
            let mut session = rustls::ClientConnection::new(
                config.clone(),
                ServerName::IpAddress(target.ip().into()),
            )
            .map_err(io::Error::other)?;
            // The worker's own queue bound is its in-flight calls.
            session.set_buffer_limit(None);
            Some(session)
        } else {
            None
        };
        let socket = connect(local, target)?;
        let websocket = matches!(transport, Transport::Ws | Transport::Wss);
        let mut stream = Stream {
            ws: websocket.then(|| WebSocket {
                upgraded: false,
                held: Vec::new(),
                partial: Vec::new(),
                mask: (socket.local_addr().map_or(1, |a| a.port()) as u32) << 16 | 0x9e37,
            }),
            socket,
            tls,
            rbuf: Vec::with_capacity(64 * 1024),
            wbuf: Vec::new(),
            closed: false,
            error: None,
            more: false,
            wire: Wire::default(),
        };
        if websocket {
            // RFC 6455 §4.1: the base64 of 16 bytes (a nonce; the server only
            // checks its form).
            let key = "c2lwc2VjIGJlbmNoIGtleQ==";
            stream.write(ws::upgrade_request(&target.to_string(), "/", key, None).as_bytes())?;
            stream.flush()?;
        }
        Ok(Link::Stream(Box::new(stream)))
    }

    /// Ends a connection politely (WebSocket: a close frame; TLS:
    /// close_notify); a shared one only by its last handle.
    pub fn close(&mut self) {
        if let Link::Shared(h) = self {
            if Arc::strong_count(&h.conn) > 1 {
                return;
            }
        }
        self.stream(Stream::close);
    }

    /// Why the connection ended, when more is known than "closed".
    pub fn error(&self) -> Option<String> {
        self.peek(|s| s.error.clone()).flatten()
    }

    /// The bytes it moved so far (none for a shared connection: every
    /// thread's handle would count them again).
    pub fn wire(&self) -> Wire {
        match self {
            Link::Udp(d) => d.wire,
            Link::Stream(s) => s.wire,
            Link::Shared(_) => Wire::default(),
        }
    }

    /// The bytes a shared connection moved, all threads' together; `None`
    /// for any other link.
    pub fn shared_wire(&self) -> Option<Wire> {
        match self {
            Link::Shared(h) => Some(h.lock().wire),
            _ => None,
        }
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Link::Udp(d) => d.socket.local_addr(),
            _ => self
                .peek(|s| s.socket.local_addr())
                .unwrap_or_else(|| Err(io::ErrorKind::NotConnected.into())),
        }
    }

    /// Whether requests are retransmitted (UDP) or not (connections).
    pub fn reliable(&self) -> bool {
        !matches!(self, Link::Udp(_))
    }

    /// Whether the connection is gone.
    pub fn closed(&self) -> bool {
        self.peek(|s| s.closed).unwrap_or(false)
    }

    /// Sends one message (queued if the socket is full, or until the
    /// WebSocket upgrade is answered).
    pub fn send(&mut self, bytes: &[u8], target: SocketAddr) -> io::Result<()> {
        match self {
            Link::Udp(d) => {
                // A failure may be an earlier datagram's ICMP error, which
                // fails one call only: the datagram goes again, and the
                // next read takes the error from the queue.
                let n = d.socket.send_to(bytes, target).or_else(|_| {
                    d.errors = true;
                    d.socket.send_to(bytes, target)
                })?;
                d.wire.sent += n as u64;
                Ok(())
            }
            _ => self.stream(|s| s.send(bytes)).unwrap_or(Ok(())),
        }
    }

    /// Writes what is queued, as far as the socket takes it.
    pub fn flush(&mut self) -> io::Result<()> {
        self.stream(Stream::flush).unwrap_or(Ok(()))
    }

    /// Hands up to `max` received messages to `on`, read into `buf`
    /// ([`RECEIVE_BUFFER`] bytes take a whole batch of datagrams); returns
    /// how many.
    pub fn receive(&mut self, buf: &mut [u8], max: usize, mut on: impl FnMut(&[u8])) -> usize {
        match self {
            Link::Udp(d) => d.receive(buf, max, &mut on),
            _ => self.stream(|s| s.receive(buf, max, &mut on)).unwrap_or(0),
        }
    }

    /// The starts of the datagrams ICMP errors quoted since the last call
    /// (a UDP link's; a connection reports its end instead).
    pub fn take_unreachable(&mut self, out: &mut Vec<Vec<u8>>) {
        if let Link::Udp(d) = self {
            out.append(&mut d.unreachable);
        }
    }

    /// Whether the last [`receive`](Self::receive) may have left something
    /// unread (it stopped at its limit, or its read filled the buffer):
    /// with edge-triggered readiness, such a link is read again without
    /// waiting for an edge.
    pub fn more(&self) -> bool {
        match self {
            Link::Udp(d) => d.more,
            _ => self.peek(|s| s.more && !s.closed).unwrap_or(false),
        }
    }

    /// Whether bytes are queued that the socket did not take yet.
    pub fn wants_write(&self) -> bool {
        self.peek(|s| !s.wbuf.is_empty() || s.tls.as_ref().is_some_and(|t| t.wants_write()))
            .unwrap_or(false)
    }

    /// The socket's descriptor (to watch it with others).
    pub fn raw_fd(&self) -> RawFd {
        match self {
            Link::Udp(d) => d.socket.as_raw_fd(),
            Link::Stream(s) => s.socket.as_raw_fd(),
            Link::Shared(h) => h.fd,
        }
    }

    /// Waits until there is something to read (or, with a write queue,
    /// room to write) or `timeout` passes.
    pub fn wait(&self, timeout: Duration) {
        sip_udp::wait(self.raw_fd(), self.wants_write(), timeout);
    }
}

/// One generator thread's handle on a connection all of them share.
#[derive(Debug)]
pub struct Handle {
    conn: Arc<Mutex<Stream>>,
    /// The connection's descriptor, to wait on without the lock.
    fd: RawFd,
}

impl Handle {
    fn lock(&self) -> std::sync::MutexGuard<'_, Stream> {
        // A thread that panicked holding it left whole messages or none.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Stream {
    /// Sends one message: framed for a WebSocket, held until the upgrade
    /// is answered.
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.closed {
            return Err(io::Error::other("connection closed"));
        }
        match &mut self.ws {
            Some(w) if !w.upgraded => {
                let mask = w.next_mask();
                ws::push_client_frame(&mut w.held, ws::TEXT, bytes, mask);
            }
            Some(w) => {
                let frame = ws::client_frame(ws::TEXT, bytes, w.next_mask());
                self.write(&frame)?;
            }
            None => self.write(bytes)?,
        }
        self.flush()
    }

    /// Reads what the socket has, then hands up to four times `max`
    /// whole messages to `on`.
    fn receive(&mut self, buf: &mut [u8], max: usize, on: &mut impl FnMut(&[u8])) -> usize {
        let read = buf.len().min(STREAM_READ);
        let filled = self.read(&mut buf[..read]);
        let cap = max.max(1) * 4;
        let n = if self.ws.is_some() {
            self.websocket_messages(cap, on)
        } else {
            deframe(&mut self.rbuf, &mut self.closed, cap, on)
        };
        self.more = filled || n >= cap;
        n
    }

    /// Ends the connection politely.
    fn close(&mut self) {
        if let Some(w) = &mut self.ws {
            if w.upgraded && !self.closed {
                let frame = ws::client_frame(ws::CLOSE, &1000u16.to_be_bytes(), w.next_mask());
                let _ = self.write(&frame);
            }
        }
        if let Some(tls) = &mut self.tls {
            tls.send_close_notify();
        }
        let _ = self.flush();
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
    }
    /// Queues bytes for the peer (through TLS when there is a session).
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.tls {
            Some(tls) => tls.writer().write_all(bytes),
            None => {
                self.wbuf.extend_from_slice(bytes);
                Ok(())
            }
        }
    }

    /// Writes what is queued, as far as the socket takes it.
    fn flush(&mut self) -> io::Result<()> {
        let result = match &mut self.tls {
            Some(tls) => {
                let mut result = Ok(());
                while tls.wants_write() {
                    match tls.write_tls(&mut self.socket) {
                        Ok(0) => {
                            result = Err(io::Error::other("connection closed"));
                            break;
                        }
                        Ok(n) => self.wire.sent += n as u64,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    }
                }
                result
            }
            None => {
                let mut result = Ok(());
                while !self.wbuf.is_empty() {
                    match self.socket.write(&self.wbuf) {
                        Ok(0) => {
                            result = Err(io::Error::other("connection closed"));
                            break;
                        }
                        Ok(n) => {
                            self.wire.sent += n as u64;
                            self.wbuf.drain(..n);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    }
                }
                result
            }
        };
        if result.is_err() {
            self.closed = true;
        }
        result
    }

    /// Reads what the socket has into `rbuf` (decrypted); true when the
    /// read filled `buf` (the socket may hold more).
    fn read(&mut self, buf: &mut [u8]) -> bool {
        if self.closed {
            return false;
        }
        match self.socket.read(buf) {
            Ok(0) => self.closed = true,
            Ok(len) => {
                self.wire.received += len as u64;
                match &mut self.tls {
                    Some(tls) => {
                        if let Err(e) = decrypt(tls, &buf[..len], &mut self.rbuf) {
                            // Send the alert that says why, then stop.
                            while tls.wants_write() && tls.write_tls(&mut self.socket).is_ok() {}
                            self.error = Some(format!("TLS: {e}"));
                            self.closed = true;
                        }
                    }
                    None => self.rbuf.extend_from_slice(&buf[..len]),
                }
                return len == buf.len();
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => self.closed = true,
        }
        false
    }

    /// Reads the upgrade answer, then hands whole WebSocket messages to
    /// `on` (at most `max`), answering pings and closes.
    fn websocket_messages(&mut self, max: usize, on: &mut impl FnMut(&[u8])) -> usize {
        let Some(w) = &mut self.ws else {
            return 0;
        };
        let mut replies = Vec::new();
        if !w.upgraded {
            match ws::upgrade_answer(&self.rbuf) {
                ws::Answer::Incomplete => return 0,
                ws::Answer::Refused(why) => {
                    self.error = Some(format!("WebSocket upgrade refused: {why}"));
                    self.closed = true;
                    return 0;
                }
                ws::Answer::Upgraded { used } => {
                    self.rbuf.drain(..used);
                    w.upgraded = true;
                    replies = std::mem::take(&mut w.held);
                }
            }
        }
        let (mut n, mut at) = (0, 0);
        while n < max {
            let f = match ws::server_frame(&self.rbuf[at..], MAX_WS_MESSAGE) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(why) => {
                    self.error = Some(format!("WebSocket: {why}"));
                    self.closed = true;
                    break;
                }
            };
            at += f.len;
            match f.opcode {
                ws::opcode::TEXT | ws::opcode::BINARY if f.fin && w.partial.is_empty() => {
                    on(f.payload);
                    n += 1;
                }
                ws::opcode::TEXT | ws::opcode::BINARY | ws::opcode::CONTINUATION => {
                    if w.partial.len() + f.payload.len() > MAX_WS_MESSAGE {
                        self.error = Some("WebSocket: a message larger than allowed".into());
                        self.closed = true;
                        break;
                    }
                    w.partial.extend_from_slice(f.payload);
                    if f.fin {
                        on(&w.partial);
                        w.partial.clear();
                        n += 1;
                    }
                }
                ws::opcode::PING => {
                    let mask = w.next_mask();
                    ws::push_client_frame(&mut replies, ws::PONG, f.payload, mask);
                }
                ws::opcode::CLOSE => {
                    // Echo the status code and stop (RFC 6455 §5.5.1).
                    let code = f.payload.get(..2).unwrap_or_default().to_vec();
                    let mask = w.next_mask();
                    ws::push_client_frame(&mut replies, ws::CLOSE, &code, mask);
                    self.closed = true;
                    break;
                }
                _ => {}
            }
        }
        self.rbuf.drain(..at.min(self.rbuf.len()));
        if !replies.is_empty() && self.write(&replies).is_ok() {
            let _ = self.flush();
        }
        n
    }
}

/// Feeds TLS records to the session and appends the plaintext to `rbuf`.
fn decrypt(
    session: &mut rustls::ClientConnection,
    mut records: &[u8],
    rbuf: &mut Vec<u8>,
) -> io::Result<()> {
    while !records.is_empty() {
        session.read_tls(&mut records)?;
        let state = session
            .process_new_packets()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let mut left = state.plaintext_bytes_to_read();
        while left > 0 {
            let start = rbuf.len();
            rbuf.resize(start + left, 0);
            let n = session.reader().read(&mut rbuf[start..])?;
            rbuf.truncate(start + n);
            if n == 0 {
                break;
            }
            left = left.saturating_sub(n);
        }
    }
    Ok(())
}

/// A TLS client configuration trusting the CAs in `ca` (PEM), TLS 1.2 and
/// 1.3; `allow_rsa_1024` also accepts servers with 1024-bit RSA keys.
/// Key exchange: the default groups, the hybrid post-quantum first.
pub fn client_config(
    ca: &std::path::Path,
    allow_rsa_1024: bool,
) -> io::Result<Arc<rustls::ClientConfig>> {
    client_config_with(ca, allow_rsa_1024, &sip_tls::Groups::default())
}

/// The CAs in `ca` (PEM).
fn roots_of(ca: &std::path::Path) -> io::Result<rustls::RootCertStore> {
    use rustls::pki_types::pem::PemObject;
    let pem = std::fs::read(ca)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", ca.display())))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| io::Error::other(format!("{}: {e}", ca.display())))?;
        roots
            .add(cert)
            .map_err(|e| io::Error::other(format!("{}: {e}", ca.display())))?;
    }
    if roots.is_empty() {
        return Err(io::Error::other(format!(
            "{}: no PEM certificate",
            ca.display()
        )));
    }
    Ok(roots)
}

/// [`client_config`] offering the key-exchange `groups`.
pub fn client_config_with(
    ca: &std::path::Path,
    allow_rsa_1024: bool,
    groups: &sip_tls::Groups,
) -> io::Result<Arc<rustls::ClientConfig>> {
    let roots = roots_of(ca)?;
    let base = sip_tls::provider(groups);
    let provider = if allow_rsa_1024 {
        rsa_variants::tls::allow_rsa_1024(base)
    } else {
        base
    };
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(io::Error::other)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// `config` without session resumption: every connection a full
/// handshake (certificate and server signature), as a load that must make
/// the server pay its private-key operation needs.
pub fn without_resumption(config: &Arc<rustls::ClientConfig>) -> Arc<rustls::ClientConfig> {
    let mut full = (**config).clone();
    full.resumption = rustls::client::Resumption::disabled();
    Arc::new(full)
}

/// Bytes of one full TLS handshake between `client` and `server` run in
/// memory (records as they would cross the wire, each way, the
/// server's session tickets included), and the key-exchange group they
/// agreed on. `name`: the server name the client checks.
pub fn handshake_bytes(
    client: Arc<rustls::ClientConfig>,
    server: Arc<rustls::ServerConfig>,
    name: &str,
) -> io::Result<(usize, usize, String)> {
    let name = rustls::pki_types::ServerName::try_from(name.to_owned())
        .map_err(|e| io::Error::other(format!("server name {name:?}: {e}")))?;
    let mut c = rustls::ClientConnection::new(client, name).map_err(io::Error::other)?;
    let mut s = rustls::ServerConnection::new(server).map_err(io::Error::other)?;
    let (mut up, mut down) = (0, 0);
    for _ in 0..16 {
        up += pass(&mut c, &mut s)?;
        down += pass(&mut s, &mut c)?;
        if !c.is_handshaking() && !s.is_handshaking() && !s.wants_write() {
            break;
        }
    }
    if c.is_handshaking() {
        return Err(io::Error::other("the handshake did not finish"));
    }
    let group = c
        .negotiated_key_exchange_group()
        .map_or("?".into(), |g| sip_tls::name_of(g.name()).to_owned());
    Ok((up, down, group))
}

/// Moves what `from` has to send into `to`: the bytes moved.
fn pass<A, B, DA, DB>(from: &mut A, to: &mut B) -> io::Result<usize>
where
    A: std::ops::DerefMut<Target = rustls::ConnectionCommon<DA>>,
    B: std::ops::DerefMut<Target = rustls::ConnectionCommon<DB>>,
    DA: rustls::SideData,
    DB: rustls::SideData,
{
    let mut wire = Vec::new();
    while from.wants_write() {
        from.write_tls(&mut wire)?;
    }
    let mut rest = &wire[..];
    while !rest.is_empty() {
        to.read_tls(&mut rest)?;
        to.process_new_packets().map_err(io::Error::other)?;
    }
    Ok(wire.len())
}

/// The address to send to `target` from: loopback's for a loopback
/// target, otherwise the one the kernel's routes pick (a target on a veth
/// pair of `bench xdp`'s).
pub(crate) fn source_for(target: SocketAddr) -> io::Result<std::net::IpAddr> {
    match target.ip() {
        std::net::IpAddr::V4(ip) if ip.is_loopback() => return Ok([127, 0, 0, 1].into()),
        std::net::IpAddr::V6(ip) if ip.is_loopback() => return Ok(ip.into()),
        _ => {}
    }
    let any: SocketAddr = if target.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let probe = std::net::UdpSocket::bind(any)?;
    probe.connect(target)?;
    Ok(probe.local_addr()?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_hands_over_every_datagram_in_order_and_at_most_max_a_turn() {
        let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let mut link = Link::open(Transport::Udp, any, any, None).expect("open");
        let to = link.local_addr().expect("addr");
        let peer = UdpSocket::bind(any).expect("peer");
        for i in 0..100u32 {
            peer.send_to(format!("datagram {i}").as_bytes(), to)
                .expect("send");
        }
        let mut got = Vec::new();
        let mut buf = vec![0u8; RECEIVE_BUFFER];
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut first = None;
        while got.len() < 100 && std::time::Instant::now() < deadline {
            link.wait(Duration::from_millis(100));
            let n = link.receive(&mut buf, 70, |m| {
                got.push(String::from_utf8_lossy(m).into_owned())
            });
            assert!(n <= 70, "{n} in one turn");
            first.get_or_insert(n);
        }
        // All 100 were queued before the first turn: it takes 70 (more
        // than one batch), the next the rest.
        assert_eq!(first, Some(70));
        let want: Vec<String> = (0..100).map(|i| format!("datagram {i}")).collect();
        assert_eq!(got, want);
    }
}
