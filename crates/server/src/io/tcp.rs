//! TCP and TLS transports (RFC 3261 §18.3, §26.2): one reader thread per
//! connection, stream framing from sip-core, and a table of open
//! connections so responses and forwarded requests reuse them.
//!
//! A TLS connection is a rustls session (sans-IO) beside its socket: the
//! reader feeds it the bytes it reads without holding any lock across
//! the read; senders lock the connection, write plaintext and flush the
//! records. Threads keep this simple and fast for the connection counts
//! SIP trunks and test loads use.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sip_core::framing::{frame, Frame};
use sip_core::writer::write_error_response;
use sip_core::{ErrorKind, Limits};

use rustls::pki_types::ServerName;

use crate::io::journal::SharedJournal;
use crate::io::send::{Connections, Sender};
use crate::io::tls::TlsContext;
use crate::proto::core::{Core, Shared, Transport};
use crate::proto::stateful::{Key, Sends};

/// Most simultaneous connections; further ones are refused.
pub const MAX_CONNECTIONS: usize = 4096;
/// A connection silent this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
const POLL: Duration = Duration::from_millis(200);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Outbound connects in progress at most; more are refused (dropped).
pub const MAX_PENDING_CONNECTS: usize = 64;
/// A TLS handshake not finished in this time closes the connection.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection's sending side: the socket and, for TLS, the session.
#[derive(Debug)]
struct Conn {
    sock: TcpStream,
    tls: Option<rustls::Connection>,
}

impl Conn {
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.tls {
            None => self.sock.write_all(bytes),
            Some(tls) => {
                tls.writer().write_all(bytes)?;
                flush(tls, &mut self.sock)
            }
        }
    }
}

/// Writes every pending TLS record.
fn flush(tls: &mut rustls::Connection, sock: &mut TcpStream) -> io::Result<()> {
    while tls.wants_write() {
        tls.write_tls(sock)?;
    }
    Ok(())
}

type Writer = Arc<Mutex<Conn>>;

/// Open TCP connections and what their readers share.
#[derive(Debug)]
pub struct TcpHub {
    shared: Arc<Shared>,
    journal: Option<SharedJournal>,
    udp: Option<Arc<UdpSocket>>,
    tls: Option<Arc<TlsContext>>,
    conns: Mutex<HashMap<SocketAddr, Writer>>,
    stop: Arc<AtomicBool>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl TcpHub {
    /// A hub; `udp` sends what TCP readers must forward over UDP; `tls`
    /// serves and opens TLS connections.
    pub fn new(
        shared: Arc<Shared>,
        journal: Option<SharedJournal>,
        udp: Option<Arc<UdpSocket>>,
        tls: Option<Arc<TlsContext>>,
        stop: Arc<AtomicBool>,
    ) -> Arc<Self> {
        Arc::new(Self {
            shared,
            journal,
            udp,
            tls,
            conns: Mutex::new(HashMap::new()),
            stop,
        })
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        lock(&self.conns).len()
    }

    /// Accepts connections until stopped; `secure`: each is a TLS server
    /// session (the hub must have a TLS context).
    pub fn listen(
        self: &Arc<Self>,
        listener: TcpListener,
        secure: bool,
    ) -> io::Result<JoinHandle<()>> {
        listener.set_nonblocking(true)?;
        let hub = self.clone();
        std::thread::Builder::new()
            .name(if secure { "tls-accept" } else { "tcp-accept" }.into())
            .spawn(move || {
                while !hub.stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, peer)) => {
                            let session = match (&hub.tls, secure) {
                                (Some(ctx), true) => {
                                    match rustls::ServerConnection::new(ctx.server.clone()) {
                                        Ok(s) => Some(rustls::Connection::Server(s)),
                                        Err(_) => continue,
                                    }
                                }
                                (None, true) => continue,
                                (_, false) => None,
                            };
                            let _ = hub.adopt(stream, peer, session);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(10))
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            })
    }

    fn adopt(
        self: &Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        tls: Option<rustls::Connection>,
    ) -> io::Result<Writer> {
        stream.set_nonblocking(false)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(POLL))?;
        let writer: Writer = Arc::new(Mutex::new(Conn {
            sock: stream.try_clone()?,
            tls,
        }));
        {
            let mut conns = lock(&self.conns);
            if conns.len() >= MAX_CONNECTIONS {
                return Err(io::Error::other("too many TCP connections"));
            }
            conns.insert(peer, writer.clone());
        }
        let hub = self.clone();
        let conn = writer.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("tcp-{peer}"))
            .spawn(move || hub.read_loop(peer, stream, conn));
        if let Err(e) = spawned {
            lock(&self.conns).remove(&peer);
            return Err(e);
        }
        Ok(writer)
    }

    /// Sends `bytes` to `dest` on its open connection. Without one, the
    /// connect (TCP, or TLS when `transport` says so) happens on a
    /// background thread (at most [`MAX_PENDING_CONNECTS`] at once) so
    /// that an unreachable target cannot stall the caller, a worker
    /// serving everyone; the message is sent when the connection is up,
    /// or dropped like a lost datagram.
    pub fn send(
        self: &Arc<Self>,
        dest: SocketAddr,
        transport: Transport,
        bytes: &[u8],
    ) -> io::Result<()> {
        if !matches!(transport, Transport::Tcp | Transport::Tls) {
            // No listener or connector for it (SCTP, WebSocket): the
            // message cannot leave; a forwarded request is answered 503.
            self.shared.metrics.dropped.fetch_add(1, Ordering::Relaxed);
            self.undeliverable(bytes);
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("no {} transport to reach {dest}", transport.as_str()),
            ));
        }
        self.shared.metrics.sent(bytes);
        let existing = lock(&self.conns).get(&dest).cloned();
        let Some(conn) = existing else {
            return self.connect_then_send(dest, transport, bytes.to_vec());
        };
        let r = lock(&conn).send(bytes);
        if r.is_err() {
            lock(&self.conns).remove(&dest);
            self.undeliverable(bytes);
        }
        r
    }

    /// A message could not be sent. For a request the stateful proxy
    /// forwarded, its transaction answers the caller (503) at once.
    fn undeliverable(self: &Arc<Self>, bytes: &[u8]) {
        let Some(tx) = &self.shared.transactions else {
            return;
        };
        let Ok(msg) = sip_core::Message::parse(bytes) else {
            return;
        };
        let Some(key) = Key::of_message(&msg).filter(|_| msg.is_request()) else {
            return;
        };
        let mut sends = Sends::default();
        tx.on_transport_error(key, Instant::now(), &mut sends, &self.shared.metrics);
        self.sender().send_all(&sends);
    }

    fn connect_then_send(
        self: &Arc<Self>,
        dest: SocketAddr,
        transport: Transport,
        bytes: Vec<u8>,
    ) -> io::Result<()> {
        // A TLS next hop is named by address here, so its certificate must
        // carry that IP address (subjectAltName iPAddress).
        let session = match (transport, &self.tls) {
            (Transport::Tls, Some(ctx)) => Some(rustls::Connection::Client(
                rustls::ClientConnection::new(
                    ctx.client.clone(),
                    ServerName::IpAddress(dest.ip().into()),
                )
                .map_err(io::Error::other)?,
            )),
            (Transport::Tls, None) => {
                self.undeliverable(&bytes);
                return Err(io::Error::other("no TLS configured for a sips: next hop"));
            }
            _ => None,
        };
        let pending = &self.shared.metrics.tcp_connects_pending;
        if pending.fetch_add(1, Ordering::AcqRel) >= MAX_PENDING_CONNECTS as u64 {
            pending.fetch_sub(1, Ordering::AcqRel);
            return Err(io::Error::other("too many TCP connects in progress"));
        }
        let hub = self.clone();
        let spawned = std::thread::Builder::new()
            .name("tcp-connect".into())
            .spawn(move || {
                let result = TcpStream::connect_timeout(&dest, CONNECT_TIMEOUT)
                    .and_then(|s| hub.adopt(s, dest, session))
                    .and_then(|conn| lock(&conn).send(&bytes));
                if result.is_err() {
                    lock(&hub.conns).remove(&dest);
                    hub.undeliverable(&bytes);
                }
                hub.shared
                    .metrics
                    .tcp_connects_pending
                    .fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            pending.fetch_sub(1, Ordering::AcqRel);
            return Err(e);
        }
        Ok(())
    }

    /// Sends by transport, with this hub for TCP and TLS.
    fn sender(self: &Arc<Self>) -> Sender {
        Sender::new(
            self.shared.clone(),
            self.udp.clone(),
            Some(Arc::new(self.clone())),
        )
    }

    fn read_loop(self: Arc<Self>, peer: SocketAddr, mut stream: TcpStream, conn: Writer) {
        let secure = lock(&conn).tls.is_some();
        let transport = if secure {
            Transport::Tls
        } else {
            Transport::Tcp
        };
        let mut core = Core::new(self.shared.clone());
        let sender = self.sender();
        let limits = Limits::DEFAULT;
        let mut buf: Vec<u8> = Vec::with_capacity(8192);
        let mut out = Vec::with_capacity(8192);
        let mut chunk = vec![0u8; 16 * 1024];
        let opened = Instant::now();
        let mut last = opened;
        let mut handshaking = secure;
        let mut peer_closed = false;
        'conn: while !peer_closed && !self.stop.load(Ordering::Relaxed) {
            match stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) if secure => {
                    last = Instant::now();
                    match self.decrypt(&conn, &chunk[..n], &mut buf) {
                        Ok(open) => {
                            if handshaking
                                && !lock(&conn).tls.as_ref().is_some_and(|t| t.is_handshaking())
                            {
                                handshaking = false;
                                self.shared
                                    .metrics
                                    .tls_handshakes
                                    .fetch_add(1, Ordering::Relaxed);
                            }
                            // A close_notify may arrive with the last
                            // message: handle what came, then stop.
                            peer_closed = !open;
                        }
                        Err(_) => {
                            if handshaking {
                                self.shared
                                    .metrics
                                    .tls_handshake_failures
                                    .fetch_add(1, Ordering::Relaxed);
                            }
                            break;
                        }
                    }
                }
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    last = Instant::now();
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if handshaking && opened.elapsed() > HANDSHAKE_TIMEOUT {
                        self.shared
                            .metrics
                            .tls_handshake_failures
                            .fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    if last.elapsed() > IDLE_TIMEOUT {
                        break;
                    }
                    continue;
                }
                Err(_) => break,
            }
            loop {
                match frame(&buf, &limits) {
                    Ok(Frame::KeepAlive(n)) => {
                        // RFC 5626 §3.5.1: a CRLFCRLF ping gets a CRLF pong.
                        if n >= 4 {
                            let _ = lock(&conn).send(b"\r\n");
                        }
                        buf.drain(..n);
                    }
                    Ok(Frame::Message(n)) => {
                        let mut journal = self
                            .journal
                            .as_ref()
                            .map(|j| j.lock().unwrap_or_else(|e| e.into_inner()));
                        let reply = crate::io::drive::handle(
                            &mut core,
                            journal.as_deref_mut(),
                            &buf[..n],
                            peer,
                            transport,
                            crate::io::clock::now(),
                            &mut out,
                        );
                        drop(journal);
                        // Extras first: a 100 Trying must not trail the
                        // answers the forwarded INVITE draws.
                        sender.send_all(core.extra());
                        sender.reply(reply, &out);
                        buf.drain(..n);
                    }
                    Err(e) if e.kind == ErrorKind::Incomplete => break,
                    Err(e) => {
                        // The stream cannot be resynchronised: answer if
                        // possible, then close.
                        out.clear();
                        if write_error_response(&buf, &e, &mut out) {
                            let _ = lock(&conn).send(&out);
                        }
                        break 'conn;
                    }
                }
            }
        }
        {
            let mut c = lock(&conn);
            let Conn { sock, tls } = &mut *c;
            if let Some(tls) = tls {
                tls.send_close_notify();
                let _ = flush(tls, sock);
            }
        }
        let mut conns = lock(&self.conns);
        if conns.get(&peer).is_some_and(|w| Arc::ptr_eq(w, &conn)) {
            conns.remove(&peer);
        }
    }

    /// Feeds TLS records read from the socket to the session, appends the
    /// plaintext to `buf` and sends what the session must answer
    /// (handshake messages, alerts). `Ok(false)`: the peer closed.
    fn decrypt(&self, conn: &Writer, mut records: &[u8], buf: &mut Vec<u8>) -> io::Result<bool> {
        let mut c = lock(conn);
        let Conn {
            sock,
            tls: Some(tls),
        } = &mut *c
        else {
            return Err(io::Error::other("not a TLS connection"));
        };
        let mut open = true;
        while !records.is_empty() {
            tls.read_tls(&mut records)?;
            let state = match tls.process_new_packets() {
                Ok(state) => state,
                Err(e) => {
                    // Send the alert that says why, then give up.
                    let _ = flush(tls, sock);
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
            };
            let mut left = state.plaintext_bytes_to_read();
            while left > 0 {
                let start = buf.len();
                buf.resize(start + left, 0);
                let n = tls.reader().read(&mut buf[start..])?;
                buf.truncate(start + n);
                left -= n.min(left);
                if n == 0 {
                    break;
                }
            }
            if state.peer_has_closed() {
                open = false;
            }
        }
        flush(tls, sock)?;
        Ok(open)
    }
}

impl Connections for Arc<TcpHub> {
    fn send_on(&self, dest: SocketAddr, transport: Transport, bytes: &[u8]) {
        let _ = self.send(dest, transport, bytes);
    }
}
