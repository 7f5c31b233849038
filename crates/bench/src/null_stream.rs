//! A null SIP responder over TCP and TLS: it frames each message by its
//! Content-Length (RFC 3261 §18.3), answers 200 OK at once and keeps no
//! state but the connections. It is the floor a server's stream path is
//! measured against, as the UDP null responder is for datagrams: what
//! the kernel, the framing and TLS cost with no SIP work at all.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use sip_core::framing::{frame, Frame};
use sip_core::writer::{write_response, ResponseOptions};
use sip_core::{ErrorKind, HeaderName, Limits, Message, Method, StatusCode};

const LISTENER: Token = Token(usize::MAX);

/// Most bytes a connection may hold unanswered (a message and a half).
const MAX_BUFFERED: usize = 96 * 1024;

/// Answers written out at least this often while a backlog is read.
const FLUSH_EVERY: usize = 256;

/// The responder's threads, stopped when dropped.
pub struct StreamNull {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// What the reactors did, summed over them.
#[derive(Debug, Default)]
struct Counts {
    answered: AtomicU64,
    /// Reads from a socket, and how many of them found nothing (a read
    /// spent only to learn the socket was empty: the floor must not pay
    /// for one per message where a short read already said so).
    reads: AtomicU64,
    empty_reads: AtomicU64,
}

/// A TLS server configuration from a PEM certificate chain and its key.
pub fn tls_config(
    chain: &std::path::Path,
    key: &std::path::Path,
) -> io::Result<Arc<rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let named = |p: &std::path::Path| {
        let p = p.display().to_string();
        move |e: rustls::pki_types::pem::Error| io::Error::other(format!("{p}: {e}"))
    };
    let certs = CertificateDer::pem_file_iter(chain)
        .map_err(named(chain))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(named(chain))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(named(key))?;
    let config = rustls::ServerConfig::builder_with_provider(sip_tls::default_provider())
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| io::Error::other(format!("{}: {e}", chain.display())))?;
    Ok(Arc::new(config))
}

impl StreamNull {
    /// Listens on `addr` (TLS with `tls`), one reactor per thread, the
    /// threads sharing the port (SO_REUSEPORT).
    pub fn start(
        addr: SocketAddr,
        tls: Option<Arc<rustls::ServerConfig>>,
        threads: usize,
    ) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let mut bound = addr;
        let mut handles = Vec::new();
        for i in 0..threads.max(1) {
            let listener = listen(bound)?;
            bound = listener.local_addr()?;
            let (tls, stop, counts) = (tls.clone(), stop.clone(), counts.clone());
            let handle = std::thread::Builder::new()
                .name(format!("null-tcp-{i}"))
                .spawn(move || {
                    if let Err(e) = serve(listener, tls, &stop, &counts) {
                        eprintln!("null responder: {e}");
                    }
                })?;
            handles.push(handle);
        }
        Ok(StreamNull {
            addr: bound,
            stop,
            counts,
            threads: handles,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests answered so far.
    pub fn answered(&self) -> u64 {
        self.counts.answered.load(Ordering::Relaxed)
    }

    /// Reads from its sockets so far, and how many of them found nothing.
    pub fn reads(&self) -> (u64, u64) {
        let c = &self.counts;
        (
            c.reads.load(Ordering::Relaxed),
            c.empty_reads.load(Ordering::Relaxed),
        )
    }
}

impl Drop for StreamNull {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(4096)?;
    Ok(TcpListener::from_std(s.into()))
}

/// What one read brought: bytes (0 at the end of the stream), and
/// whether the socket gave less than asked for (a stream socket does so
/// only when it held no more).
struct Got {
    bytes: usize,
    drained: bool,
}

/// One connection: its socket, TLS state, what arrived and what waits to
/// leave.
struct Conn {
    stream: TcpStream,
    tls: Option<rustls::ServerConnection>,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Registered for writability too (output waits).
    writing: bool,
}

fn serve(
    mut listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop: &AtomicBool,
    counts: &Counts,
) -> io::Result<()> {
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(1024);
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut conns: HashMap<usize, Conn> = HashMap::new();
    let mut next = 0usize;
    let mut out = Vec::with_capacity(2048);
    // One read buffer for every connection, zeroed once (a fresh one per
    // readiness event cost the floor more than the framing did).
    let mut scratch = vec![0u8; 16 * 1024];
    while !stop.load(Ordering::Relaxed) {
        match poll.poll(&mut events, Some(Duration::from_millis(100))) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => r?,
        }
        for ev in &events {
            if ev.token() == LISTENER {
                while let Ok((mut stream, _)) = listener.accept() {
                    let _ = stream.set_nodelay(true);
                    next = (next + 1) % (usize::MAX - 1);
                    poll.registry()
                        .register(&mut stream, Token(next), Interest::READABLE)?;
                    let tls = match &tls {
                        Some(c) => {
                            let mut session = rustls::ServerConnection::new(c.clone())
                                .map_err(io::Error::other)?;
                            // Answers wait in the session until the socket
                            // takes them (a limit would drop them), bounded
                            // by `pump`, which stops reading while they do.
                            session.set_buffer_limit(None);
                            Some(session)
                        }
                        None => None,
                    };
                    conns.insert(
                        next,
                        Conn {
                            stream,
                            tls,
                            input: Vec::new(),
                            output: Vec::new(),
                            writing: false,
                        },
                    );
                }
                continue;
            }
            let id = ev.token().0;
            let Some(conn) = conns.get_mut(&id) else {
                continue;
            };
            let open = conn.pump(&mut out, &mut scratch, counts).unwrap_or(false);
            let registry = poll.registry();
            if !open {
                let _ = registry.deregister(&mut conn.stream);
                conns.remove(&id);
            } else if conn.wants_write() != conn.writing {
                // Edge-triggered: asked again only when what it waits
                // for changes, not per message.
                conn.writing = !conn.writing;
                let wants = if conn.writing {
                    Interest::READABLE | Interest::WRITABLE
                } else {
                    Interest::READABLE
                };
                registry.reregister(&mut conn.stream, Token(id), wants)?;
            }
        }
    }
    Ok(())
}

impl Conn {
    /// Reads what there is, answers every whole request, writes what it
    /// can. False once the connection is over (closed, or broken input).
    fn pump(&mut self, out: &mut Vec<u8>, buf: &mut [u8], counts: &Counts) -> io::Result<bool> {
        let mut open = true;
        let mut unflushed = 0;
        loop {
            counts.reads.fetch_add(1, Ordering::Relaxed);
            let Some(Got { bytes: n, drained }) = self.read_some(buf)? else {
                counts.empty_reads.fetch_add(1, Ordering::Relaxed);
                break;
            };
            if n == 0 {
                open = false;
            }
            // Each read is answered before the next: a pipelining peer's
            // backlog is not held whole.
            let Some(k) = self.answer(out, &counts.answered) else {
                return Ok(false);
            };
            if self.input.len() > MAX_BUFFERED {
                return Ok(false);
            }
            unflushed += k;
            if unflushed >= FLUSH_EVERY {
                self.flush()?;
                unflushed = 0;
                if self.wants_write() {
                    // The peer is not reading: read on when the socket
                    // takes the answers (a writable edge pumps again).
                    break;
                }
            }
            // A short read drained the socket (over TLS, the records it
            // gave were all decrypted and taken): what comes later raises
            // a new edge, so no read is spent to see EAGAIN.
            if n == 0 || drained {
                break;
            }
        }
        self.flush()?;
        Ok(open)
    }

    /// Appends what one read brings (TLS records decrypted): 0 bytes at
    /// the end of the stream, `None` when nothing more is there now.
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<Option<Got>> {
        let would_block = |e: &io::Error| e.kind() == io::ErrorKind::WouldBlock;
        let Some(tls) = &mut self.tls else {
            return match self.stream.read(buf) {
                Ok(n) => {
                    self.input.extend_from_slice(&buf[..n]);
                    Ok(Some(Got {
                        bytes: n,
                        drained: n < buf.len(),
                    }))
                }
                Err(e) if would_block(&e) => Ok(None),
                Err(e) => Err(e),
            };
        };
        let mut wire = sip_tls::ShortRead::new(&mut self.stream);
        match tls.read_tls(&mut wire) {
            Ok(0) => {
                return Ok(Some(Got {
                    bytes: 0,
                    drained: true,
                }))
            }
            Ok(_) => {}
            Err(e) if would_block(&e) => return Ok(None),
            Err(e) => return Err(e),
        }
        let drained = wire.short;
        tls.process_new_packets().map_err(io::Error::other)?;
        let mut got = 0;
        loop {
            match tls.reader().read(buf) {
                Ok(0) => break,
                Ok(n) => {
                    self.input.extend_from_slice(&buf[..n]);
                    got += n;
                }
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(e),
            }
        }
        // Records that held no data (handshake) still count as progress.
        Ok(Some(Got {
            bytes: got.max(1),
            drained,
        }))
    }

    /// Answers each whole request in the input with 200 OK (a CRLFCRLF
    /// ping with a CRLF pong, RFC 5626 §4.4.1): how many. `None` on input
    /// that is not SIP.
    fn answer(&mut self, out: &mut Vec<u8>, answered: &AtomicU64) -> Option<usize> {
        let limits = Limits::default();
        let mut at = 0;
        let mut count = 0;
        loop {
            match frame(&self.input[at..], &limits) {
                Ok(Frame::KeepAlive(n)) => {
                    if n >= 4 {
                        self.send(b"\r\n");
                    }
                    at += n;
                }
                Ok(Frame::Message(n)) => {
                    let Ok(req) = Message::parse(&self.input[at..at + n]) else {
                        return None;
                    };
                    if req.is_request() && req.method() != Method::Ack {
                        out.clear();
                        let contact = req.header(HeaderName::Contact).unwrap_or("");
                        let extra = [("Contact", contact)];
                        let opts = ResponseOptions {
                            to_tag: Some("null"),
                            extra: if contact.is_empty() { &[] } else { &extra },
                            ..Default::default()
                        };
                        write_response(out, &req, StatusCode::OK, &opts);
                        let reply = std::mem::take(out);
                        self.send(&reply);
                        *out = reply;
                        answered.fetch_add(1, Ordering::Relaxed);
                        count += 1;
                    }
                    at += n;
                }
                Err(e) if e.kind == ErrorKind::Incomplete => break,
                Err(_) => return None,
            }
        }
        self.input.drain(..at);
        Some(count)
    }

    fn send(&mut self, bytes: &[u8]) {
        match &mut self.tls {
            Some(tls) => {
                let _ = tls.writer().write_all(bytes);
            }
            None => self.output.extend_from_slice(bytes),
        }
    }

    fn wants_write(&self) -> bool {
        !self.output.is_empty() || self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Writes what waits, as far as the socket takes it.
    fn flush(&mut self) -> io::Result<()> {
        if let Some(tls) = &mut self.tls {
            while tls.wants_write() {
                match tls.write_tls(&mut self.stream) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            return Ok(());
        }
        while !self.output.is_empty() {
            match self.stream.write(&self.output) {
                Ok(n) => {
                    self.output.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A self-signed P-256 certificate and its key, for the responder.
    fn tls() -> Arc<rustls::ServerConfig> {
        use openssl::{asn1, ec, hash, nid, pkey, x509};
        let group = ec::EcGroup::from_curve_name(nid::Nid::X9_62_PRIME256V1).unwrap();
        let key = pkey::PKey::from_ec_key(ec::EcKey::generate(&group).unwrap()).unwrap();
        let mut name = x509::X509NameBuilder::new().unwrap();
        name.append_entry_by_text("CN", "null").unwrap();
        let name = name.build();
        let mut c = x509::X509Builder::new().unwrap();
        c.set_version(2).unwrap();
        c.set_subject_name(&name).unwrap();
        c.set_issuer_name(&name).unwrap();
        c.set_pubkey(&key).unwrap();
        c.set_not_before(&asn1::Asn1Time::days_from_now(0).unwrap())
            .unwrap();
        c.set_not_after(&asn1::Asn1Time::days_from_now(1).unwrap())
            .unwrap();
        c.sign(&key, hash::MessageDigest::sha256()).unwrap();
        let cert = rustls::pki_types::CertificateDer::from(c.build().to_der().unwrap());
        let der = key.private_key_to_pkcs8().unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(der.into());
        let config = rustls::ServerConfig::builder_with_provider(sip_tls::default_provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        Arc::new(config)
    }

    fn request(cseq: u32) -> String {
        format!(
            "REGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:5;branch=z9hG4bK{cseq}\r\nFrom: <sip:a@example.com>;tag=1\r\nTo: <sip:a@example.com>\r\nCall-ID: null-{cseq}\r\nCSeq: {cseq} REGISTER\r\nContent-Length: 0\r\n\r\n"
        )
    }

    /// Requests one at a time, each answer awaited, as a phone refreshes:
    /// each is one read, none spent only to find the socket empty (a
    /// short read said so), over TCP and TLS alike.
    #[test]
    fn a_lone_request_costs_one_read_over_tcp_and_tls() {
        const ROUNDS: u32 = 200;
        for tls in [None, Some(tls())] {
            let over_tls = tls.is_some();
            let null = StreamNull::start("127.0.0.1:0".parse().unwrap(), tls, 1).unwrap();
            let tcp = std::net::TcpStream::connect(null.addr()).unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut stream: Box<dyn ReadWrite> = if over_tls {
                let mut b =
                    openssl::ssl::SslConnector::builder(openssl::ssl::SslMethod::tls()).unwrap();
                b.set_verify(openssl::ssl::SslVerifyMode::NONE);
                Box::new(b.build().connect("null", tcp).unwrap())
            } else {
                Box::new(tcp)
            };
            let (before, _) = null.reads();
            let mut buf = [0u8; 4096];
            for cseq in 1..=ROUNDS {
                stream.write_all(request(cseq).as_bytes()).unwrap();
                let mut got = Vec::new();
                let want = format!("CSeq: {cseq} REGISTER");
                while !String::from_utf8_lossy(&got).contains(&want) {
                    let n = stream.read(&mut buf).unwrap();
                    assert!(n > 0, "closed at {cseq}");
                    got.extend_from_slice(&buf[..n]);
                }
            }
            let (reads, empty) = null.reads();
            assert_eq!(null.answered(), u64::from(ROUNDS));
            // A request split by the network can still draw an edge for
            // bytes already read: a few, never one a request.
            assert!(
                reads - before < u64::from(ROUNDS) * 11 / 10 && empty < u64::from(ROUNDS) / 10,
                "TLS {over_tls}: {reads} reads ({before} before the requests), {empty} found nothing"
            );
        }
    }

    trait ReadWrite: Read + Write {}
    impl<T: Read + Write> ReadWrite for T {}
}
