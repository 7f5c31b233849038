//! TCP transport (RFC 3261 §18.3): one reader thread per connection,
//! stream framing from sip-core, and a table of open connections so
//! responses and forwarded requests reuse them.
//!
//! Threads keep this simple and fast for the connection counts SIP
//! trunks and test loads use; the table is the seam where an async
//! runtime can take over when TLS arrives.

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

use crate::core::{Core, Reply, Shared, Transport};
use crate::location::Journal;
use crate::stateful::{Key, Sends};
use crate::udp::unix_now;

/// Most simultaneous connections; further ones are refused.
pub const MAX_CONNECTIONS: usize = 4096;
/// A connection silent this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
const POLL: Duration = Duration::from_millis(200);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Outbound connects in progress at most; more are refused (dropped).
pub const MAX_PENDING_CONNECTS: usize = 64;

type Writer = Arc<Mutex<TcpStream>>;

/// Open TCP connections and what their readers share.
#[derive(Debug)]
pub struct TcpHub {
    shared: Arc<Shared>,
    journal: Option<Arc<Mutex<Journal>>>,
    udp: Option<UdpSocket>,
    conns: Mutex<HashMap<SocketAddr, Writer>>,
    stop: Arc<AtomicBool>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl TcpHub {
    /// A hub; `udp` sends what TCP readers must forward over UDP.
    pub fn new(
        shared: Arc<Shared>,
        journal: Option<Arc<Mutex<Journal>>>,
        udp: Option<UdpSocket>,
        stop: Arc<AtomicBool>,
    ) -> Arc<Self> {
        Arc::new(Self {
            shared,
            journal,
            udp,
            conns: Mutex::new(HashMap::new()),
            stop,
        })
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        lock(&self.conns).len()
    }

    /// Accepts connections until stopped.
    pub fn listen(self: &Arc<Self>, listener: TcpListener) -> io::Result<JoinHandle<()>> {
        listener.set_nonblocking(true)?;
        let hub = self.clone();
        std::thread::Builder::new()
            .name("tcp-accept".into())
            .spawn(move || {
                while !hub.stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, peer)) => {
                            let _ = hub.adopt(stream, peer);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(10))
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            })
    }

    fn adopt(self: &Arc<Self>, stream: TcpStream, peer: SocketAddr) -> io::Result<Writer> {
        stream.set_nonblocking(false)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(POLL))?;
        let writer: Writer = Arc::new(Mutex::new(stream.try_clone()?));
        {
            let mut conns = lock(&self.conns);
            if conns.len() >= MAX_CONNECTIONS {
                return Err(io::Error::other("too many TCP connections"));
            }
            conns.insert(peer, writer.clone());
        }
        let hub = self.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("tcp-{peer}"))
            .spawn(move || hub.read_loop(peer, stream));
        if let Err(e) = spawned {
            lock(&self.conns).remove(&peer);
            return Err(e);
        }
        Ok(writer)
    }

    /// Sends `bytes` to `dest` on its open connection. Without one, the
    /// connect happens on a background thread (at most
    /// [`MAX_PENDING_CONNECTS`] at once) so that an unreachable target
    /// cannot stall the caller, a worker serving everyone; the message is
    /// sent when the connection is up, or dropped like a lost datagram.
    pub fn send(self: &Arc<Self>, dest: SocketAddr, bytes: &[u8]) -> io::Result<()> {
        let existing = lock(&self.conns).get(&dest).cloned();
        let Some(conn) = existing else {
            return self.connect_then_send(dest, bytes.to_vec());
        };
        let r = lock(&conn).write_all(bytes);
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
        for (b, (dest, transport)) in sends.iter() {
            self.dispatch(Reply::Send(dest, transport), b);
        }
    }

    fn connect_then_send(self: &Arc<Self>, dest: SocketAddr, bytes: Vec<u8>) -> io::Result<()> {
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
                    .and_then(|s| hub.adopt(s, dest))
                    .and_then(|conn| lock(&conn).write_all(&bytes));
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

    /// Sends what a core produced.
    pub fn dispatch(self: &Arc<Self>, reply: Reply, out: &[u8]) {
        match reply {
            Reply::Send(dest, Transport::Tcp) => {
                let _ = self.send(dest, out);
            }
            Reply::Send(dest, Transport::Udp) => {
                if let Some(u) = &self.udp {
                    let _ = u.send_to(out, dest);
                }
            }
            Reply::Drop => {}
        }
    }

    fn read_loop(self: Arc<Self>, peer: SocketAddr, mut stream: TcpStream) {
        let mut core = Core::new(self.shared.clone(), self.journal.clone());
        let limits = Limits::DEFAULT;
        let mut buf: Vec<u8> = Vec::with_capacity(8192);
        let mut out = Vec::with_capacity(8192);
        let mut chunk = vec![0u8; 16 * 1024];
        let mut last = Instant::now();
        'conn: while !self.stop.load(Ordering::Relaxed) {
            match stream.read(&mut chunk) {
                Ok(0) => break,
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
                            let _ = self.send(peer, b"\r\n");
                        }
                        buf.drain(..n);
                    }
                    Ok(Frame::Message(n)) => {
                        out.clear();
                        let reply =
                            core.handle(&buf[..n], peer, Transport::Tcp, unix_now(), &mut out);
                        // Extras first: a 100 Trying must not trail the
                        // answers the forwarded INVITE draws.
                        for (bytes, (dest, transport)) in core.extra().iter() {
                            self.dispatch(Reply::Send(dest, transport), bytes);
                        }
                        self.dispatch(reply, &out);
                        buf.drain(..n);
                    }
                    Err(e) if e.kind == ErrorKind::Incomplete => break,
                    Err(e) => {
                        // The stream cannot be resynchronised: answer if
                        // possible, then close.
                        out.clear();
                        if write_error_response(&buf, &e, &mut out) {
                            let _ = self.send(peer, &out);
                        }
                        break 'conn;
                    }
                }
            }
        }
        lock(&self.conns).remove(&peer);
    }
}
