//! The phone's signalling transport: a UDP socket, or one TLS connection
//! to the server (RFC 3261 §18 with the connection reused for requests
//! towards us, as RFC 5626 does), messages framed by Content-Length.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use sip_core::framing::{self, Frame};
use sip_core::{ErrorKind, Limits};

/// A TLS connection to the server.
pub struct TlsLink {
    stream: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
    buf: Vec<u8>,
    server: SocketAddr,
}

impl Drop for TlsLink {
    /// Ends the session as RFC 8446 §6.1 asks: a close_notify, so the
    /// server sees a hang-up, not a broken connection.
    fn drop(&mut self) {
        self.stream.conn.send_close_notify();
        let _ = self
            .stream
            .sock
            .set_write_timeout(Some(Duration::from_millis(500)));
        while self.stream.conn.wants_write() {
            if self.stream.conn.write_tls(&mut self.stream.sock).is_err() {
                break;
            }
        }
    }
}

/// Where SIP messages go and come from.
pub enum Signal {
    /// Datagrams to anyone.
    Udp(UdpSocket),
    /// A stream to the server only.
    Tls(Box<TlsLink>),
}

impl Signal {
    /// Connects to `server` over TLS, checking its certificate against
    /// `config`'s roots for `name`, and completes the handshake.
    pub fn tls(
        server: SocketAddr,
        name: &str,
        config: Arc<rustls::ClientConfig>,
    ) -> io::Result<Self> {
        let name = rustls::pki_types::ServerName::try_from(name.to_string())
            .map_err(|e| io::Error::other(format!("TLS server name {name:?}: {e}")))?;
        let sock = TcpStream::connect_timeout(&server, Duration::from_secs(10))?;
        sock.set_nodelay(true)?;
        let conn = rustls::ClientConnection::new(config, name).map_err(io::Error::other)?;
        let mut stream = rustls::StreamOwned::new(conn, sock);
        stream
            .sock
            .set_read_timeout(Some(Duration::from_secs(10)))?;
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock).map_err(|e| {
                io::Error::new(e.kind(), format!("TLS handshake with {server}: {e}"))
            })?;
        }
        Ok(Signal::Tls(Box::new(TlsLink {
            stream,
            buf: Vec::new(),
            server,
        })))
    }

    /// Over TLS: the protocol version, cipher suite and key-exchange
    /// group the handshake settled on (e.g. "TLSv1_3
    /// TLS13_AES_256_GCM_SHA384 X25519MLKEM768").
    pub fn tls_session(&self) -> Option<String> {
        let Signal::Tls(t) = self else {
            return None;
        };
        let c = &t.stream.conn;
        let name = |o: Option<String>| o.unwrap_or_else(|| "?".into());
        Some(format!(
            "{} {} {}",
            name(c.protocol_version().map(|v| format!("{v:?}"))),
            name(
                c.negotiated_cipher_suite()
                    .map(|s| format!("{:?}", s.suite()))
            ),
            name(
                c.negotiated_key_exchange_group()
                    .map(|g| format!("{:?}", g.name()))
            ),
        ))
    }

    /// Our address on this transport.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Signal::Udp(s) => s.local_addr(),
            Signal::Tls(t) => t.stream.sock.local_addr(),
        }
    }

    /// The Via transport token.
    pub fn via(&self) -> &'static str {
        match self {
            Signal::Udp(_) => "UDP",
            Signal::Tls(_) => "TLS",
        }
    }

    /// Whether the transport is reliable (no retransmissions).
    pub fn reliable(&self) -> bool {
        matches!(self, Signal::Tls(_))
    }

    /// Whether the signalling is encrypted (SDES keys are safe on it).
    pub fn encrypted(&self) -> bool {
        matches!(self, Signal::Tls(_))
    }

    /// Sends `bytes` to `dest` (over TLS: to the server, whatever `dest`).
    pub fn send_to(&mut self, bytes: &[u8], dest: SocketAddr) -> io::Result<()> {
        match self {
            Signal::Udp(s) => s.send_to(bytes, dest).map(drop),
            Signal::Tls(t) => {
                t.stream.write_all(bytes)?;
                t.stream.flush()
            }
        }
    }

    /// The next message and its sender, waiting up to `timeout`; `None`
    /// when nothing came. A closed or broken TLS connection is an error.
    pub fn recv(&mut self, timeout: Duration) -> io::Result<Option<(Vec<u8>, SocketAddr)>> {
        let timeout = timeout.max(Duration::from_millis(1));
        match self {
            Signal::Udp(s) => {
                s.set_read_timeout(Some(timeout))?;
                let mut buf = vec![0u8; 65_535];
                match s.recv_from(&mut buf) {
                    Ok((n, from)) => Ok(Some((buf[..n].to_vec(), from))),
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                    {
                        Ok(None)
                    }
                    // ICMP port unreachable from an earlier send: not fatal.
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(None),
                    Err(e) => Err(e),
                }
            }
            Signal::Tls(t) => {
                let limits = Limits::default();
                loop {
                    match framing::frame(&t.buf, &limits) {
                        Ok(Frame::KeepAlive(n)) => {
                            t.buf.drain(..n);
                            continue;
                        }
                        Ok(Frame::Message(n)) => {
                            let msg: Vec<u8> = t.buf.drain(..n).collect();
                            return Ok(Some((msg, t.server)));
                        }
                        Err(e) if e.kind == ErrorKind::Incomplete => {}
                        Err(e) => {
                            return Err(io::Error::other(format!(
                                "unframeable message from {}: {e}",
                                t.server
                            )))
                        }
                    }
                    t.stream.sock.set_read_timeout(Some(timeout))?;
                    let mut chunk = [0u8; 16 * 1024];
                    match t.stream.read(&mut chunk) {
                        Ok(0) => {
                            return Err(io::Error::new(
                                io::ErrorKind::ConnectionAborted,
                                format!("{} closed the TLS connection", t.server),
                            ))
                        }
                        Ok(n) => t.buf.extend_from_slice(&chunk[..n]),
                        Err(e)
                            if matches!(
                                e.kind(),
                                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                            ) =>
                        {
                            return Ok(None)
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
}
