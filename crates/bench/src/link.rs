//! A worker's connection to the target: a UDP socket, or one TCP or TLS
//! connection with stream framing (RFC 3261 §18.3) and a write queue, so a
//! worker never blocks on a full socket buffer. A TLS link is a rustls
//! session (sans-IO) over the non-blocking socket; its handshake runs
//! inside the worker's ordinary send/receive/flush calls.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;

use sip_core::framing::{frame, Frame};
use sip_core::{ErrorKind, Limits};

/// Which transport a run uses: UDP (with retransmissions), or TCP or TLS
/// with one connection per worker (the workspace's one transport type;
/// others are refused by [`Link::open`]).
pub use sip_core::Transport;

/// A worker's way to the target.
#[derive(Debug)]
pub enum Link {
    /// A non-blocking UDP socket.
    Udp(UdpSocket),
    /// A non-blocking TCP connection.
    Tcp {
        /// The stream.
        stream: TcpStream,
        /// Bytes read and not yet framed.
        rbuf: Vec<u8>,
        /// Bytes accepted by `send` and not yet written.
        wbuf: Vec<u8>,
        /// The peer closed the connection or it failed.
        closed: bool,
    },
    /// A TLS session over a non-blocking TCP connection.
    Tls {
        /// The stream.
        stream: TcpStream,
        /// The session; it also queues what the socket did not take.
        session: Box<rustls::ClientConnection>,
        /// Plaintext read and not yet framed.
        rbuf: Vec<u8>,
        /// The peer closed the connection, or it or the session failed.
        closed: bool,
        /// Why the session failed (handshake, certificate, protocol).
        error: Option<String>,
    },
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
        s.set_reuse_address(true)?;
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
    /// Opens the link from `local` (port 0: any) to `target`; TLS needs
    /// a client configuration (the target's certificate must name its IP
    /// address).
    pub fn open(
        transport: Transport,
        local: SocketAddr,
        target: SocketAddr,
        tls: Option<&Arc<rustls::ClientConfig>>,
    ) -> io::Result<Self> {
        match transport {
            Transport::Udp => {
                let s = socket2::Socket::new(
                    socket2::Domain::for_address(local),
                    socket2::Type::DGRAM,
                    Some(socket2::Protocol::UDP),
                )?;
                // Large buffers absorb the bursts of a thousand calls in
                // flight (capped by net.core.rmem_max / wmem_max).
                let _ = s.set_recv_buffer_size(4 << 20);
                let _ = s.set_send_buffer_size(4 << 20);
                s.bind(&local.into())?;
                s.set_nonblocking(true)?;
                Ok(Link::Udp(s.into()))
            }
            Transport::Tcp => Ok(Link::Tcp {
                stream: connect(local, target)?,
                rbuf: Vec::with_capacity(64 * 1024),
                wbuf: Vec::new(),
                closed: false,
            }),
            Transport::Tls => {
                let config = tls.ok_or_else(|| io::Error::other("TLS needs a CA (--tls-ca)"))?;
                let mut session = rustls::ClientConnection::new(
                    config.clone(),
                    ServerName::IpAddress(target.ip().into()),
                )
                .map_err(io::Error::other)?;
                // The worker's own queue bound is its in-flight calls.
                session.set_buffer_limit(None);
                Ok(Link::Tls {
                    stream: connect(local, target)?,
                    session: Box::new(session),
                    rbuf: Vec::with_capacity(64 * 1024),
                    closed: false,
                    error: None,
                })
            }
            other => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("the load generator does not speak {}", other.as_str()),
            )),
        }
    }

    /// Ends a TCP or TLS connection politely (TLS: close_notify).
    pub fn close(&mut self) {
        match self {
            Link::Tls {
                stream, session, ..
            } => {
                session.send_close_notify();
                while session.wants_write() && session.write_tls(stream).is_ok() {}
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
            Link::Tcp { stream, .. } => {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
            Link::Udp(_) => {}
        }
    }

    /// Why the connection ended, when more is known than "closed".
    pub fn error(&self) -> Option<&str> {
        match self {
            Link::Tls { error, .. } => error.as_deref(),
            _ => None,
        }
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Link::Udp(s) => s.local_addr(),
            Link::Tcp { stream, .. } | Link::Tls { stream, .. } => stream.local_addr(),
        }
    }

    /// Whether requests are retransmitted (UDP) or not (TCP).
    pub fn reliable(&self) -> bool {
        !matches!(self, Link::Udp(_))
    }

    /// Whether the connection is gone (TCP only).
    pub fn closed(&self) -> bool {
        matches!(
            self,
            Link::Tcp { closed: true, .. } | Link::Tls { closed: true, .. }
        )
    }

    /// Sends one message (queued if the socket is full).
    pub fn send(&mut self, bytes: &[u8], target: SocketAddr) -> io::Result<()> {
        match self {
            Link::Udp(s) => s.send_to(bytes, target).map(|_| ()),
            Link::Tcp { closed: true, .. } | Link::Tls { closed: true, .. } => {
                Err(io::Error::other("connection closed"))
            }
            Link::Tcp { wbuf, .. } => {
                wbuf.extend_from_slice(bytes);
                self.flush()
            }
            Link::Tls { session, .. } => {
                session.writer().write_all(bytes)?;
                self.flush()
            }
        }
    }

    /// Writes what is queued, as far as the socket takes it.
    pub fn flush(&mut self) -> io::Result<()> {
        if let Link::Tls {
            stream,
            session,
            closed,
            ..
        } = self
        {
            while session.wants_write() {
                match session.write_tls(stream) {
                    Ok(0) => {
                        *closed = true;
                        return Err(io::Error::other("connection closed"));
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) => {
                        *closed = true;
                        return Err(e);
                    }
                }
            }
            return Ok(());
        }
        let Link::Tcp {
            stream,
            wbuf,
            closed,
            ..
        } = self
        else {
            return Ok(());
        };
        while !wbuf.is_empty() {
            match stream.write(wbuf) {
                Ok(0) => {
                    *closed = true;
                    return Err(io::Error::other("connection closed"));
                }
                Ok(n) => {
                    wbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => {
                    *closed = true;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Hands up to `max` received messages to `on`; returns how many.
    pub fn receive(&mut self, buf: &mut [u8], max: usize, mut on: impl FnMut(&[u8])) -> usize {
        match self {
            Link::Udp(s) => {
                let mut n = 0;
                while n < max {
                    match s.recv_from(buf) {
                        Ok((len, _)) => on(&buf[..len]),
                        Err(_) => break,
                    }
                    n += 1;
                }
                n
            }
            Link::Tcp {
                stream,
                rbuf,
                closed,
                ..
            } => {
                if !*closed {
                    match stream.read(buf) {
                        Ok(0) => *closed = true,
                        Ok(len) => rbuf.extend_from_slice(&buf[..len]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(_) => *closed = true,
                    }
                }
                deframe(rbuf, closed, max.max(1) * 4, &mut on)
            }
            Link::Tls {
                stream,
                session,
                rbuf,
                closed,
                error,
            } => {
                if !*closed {
                    match stream.read(buf) {
                        Ok(0) => *closed = true,
                        Ok(len) => {
                            if let Err(e) = decrypt(session, &buf[..len], rbuf) {
                                // Send the alert that says why, then stop.
                                while session.wants_write() && session.write_tls(stream).is_ok() {}
                                *error = Some(format!("TLS: {e}"));
                                *closed = true;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(_) => *closed = true,
                    }
                }
                deframe(rbuf, closed, max.max(1) * 4, &mut on)
            }
        }
    }

    /// Waits until there is something to read (or, with a write queue,
    /// room to write) or `timeout` passes.
    pub fn wait(&self, timeout: Duration) {
        let (fd, write): (RawFd, bool) = match self {
            Link::Udp(s) => (s.as_raw_fd(), false),
            Link::Tcp { stream, wbuf, .. } => (stream.as_raw_fd(), !wbuf.is_empty()),
            Link::Tls {
                stream, session, ..
            } => (stream.as_raw_fd(), session.wants_write()),
        };
        crate::poll::wait(fd, write, timeout);
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
pub fn client_config(
    ca: &std::path::Path,
    allow_rsa_1024: bool,
) -> io::Result<Arc<rustls::ClientConfig>> {
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
    let ring = rustls::crypto::ring::default_provider();
    let provider = if allow_rsa_1024 {
        rsa_variants::tls::allow_rsa_1024(ring)
    } else {
        ring
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
