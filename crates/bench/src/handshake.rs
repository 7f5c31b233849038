//! Calls over a new TLS connection each: the load that makes a server pay
//! its private-key operation (inbound) or its certificate verification
//! (outbound) on every call — the experiment of the published RSA-variant study.
//!
//! - **Inbound**: each call opens a TCP connection to the server's TLS
//!   port, completes a handshake (the server signs with its key), sends
//!   an INVITE for the registered callee and waits for the 200 OK, which
//!   the built-in UDP callee sends back through the proxy.
//! - **Outbound**: each call is an INVITE over UDP to the proxy for one of
//!   [`OUTBOUND_CALLEES`] users registered with `sips:` contacts; the
//!   proxy opens a new TLS connection to that callee (verifying its
//!   certificate: public-key operations), which answers 200 OK and closes
//!   the connection, so the next call to it needs a new handshake.
//!
//! Open loop: call `i` is due at `i / rate`; its response time counts
//! from that due time, so a generator falling behind shows as latency,
//! never as a quietly lower rate.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use sip_core::framing::{frame, Frame};
use sip_core::writer::{write_response, ResponseOptions};
use sip_core::{Limits, Message, StatusCode};

use crate::error::Error;
use crate::stats::Latency;
use crate::User;

/// Callees the outbound experiment rotates over, each on its own port.
pub const OUTBOUND_CALLEES: usize = 32;
/// A call not answered in this time fails.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What a point of the experiment measured.
#[derive(Debug, Default)]
pub struct Measured {
    /// Calls started.
    pub started: u64,
    /// Calls answered 200.
    pub ok: u64,
    /// Failures by cause.
    pub failures: BTreeMap<String, u64>,
    /// Response time of the answered calls (from their due time).
    pub latency: Latency,
    /// Wall time from the first due call to the last answer.
    pub elapsed: Duration,
}

/// An open-loop schedule of `calls` at `rate` calls/s, run by `threads`.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Offered calls per second.
    pub rate: f64,
    /// Calls in total.
    pub calls: u64,
    /// Concurrent callers (each call blocks one until it ends).
    pub threads: usize,
}

fn run_schedule(
    schedule: Schedule,
    stop: &AtomicBool,
    call: &(dyn Fn(u64) -> Result<(), Error> + Sync),
) -> Measured {
    let next = AtomicU64::new(0);
    let merged = Mutex::new(Measured::default());
    let t0 = Instant::now() + Duration::from_millis(50);
    std::thread::scope(|s| {
        for _ in 0..schedule.threads.max(1) {
            s.spawn(|| {
                let mut mine = Measured::default();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= schedule.calls || stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let due = t0 + Duration::from_secs_f64(i as f64 / schedule.rate);
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                    mine.started += 1;
                    match call(i) {
                        Ok(()) => {
                            mine.ok += 1;
                            mine.latency.record_us(due.elapsed().as_micros() as u64);
                        }
                        Err(e) => *mine.failures.entry(e.cause()).or_default() += 1,
                    }
                }
                let mut m = merged.lock().unwrap_or_else(|e| e.into_inner());
                m.started += mine.started;
                m.ok += mine.ok;
                for (k, v) in mine.failures {
                    *m.failures.entry(k).or_default() += v;
                }
                m.latency.merge(&mine.latency);
            });
        }
    });
    let mut m = merged.into_inner().unwrap_or_else(|e| e.into_inner());
    m.elapsed = t0.elapsed();
    m
}

/// Reads framed SIP messages from `r` until a final response arrives;
/// returns its status code.
fn final_status(r: &mut impl Read) -> Result<u16, Error> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = r
            .read(&mut chunk)
            .map_err(Error::io("reading the response"))?;
        if n == 0 {
            return Err(Error::peer(
                "server",
                "connection closed before a final response",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        loop {
            match frame(&buf, &Limits::DEFAULT) {
                Ok(Frame::Message(k)) => {
                    let code = Message::parse(&buf[..k])
                        .ok()
                        .and_then(|m| m.status())
                        .map(StatusCode::as_u16)
                        .ok_or_else(|| Error::peer("server", "unparsable response"))?;
                    if code >= 200 {
                        return Ok(code);
                    }
                    buf.drain(..k);
                }
                Ok(Frame::KeepAlive(k)) => {
                    buf.drain(..k);
                }
                Err(e) if e.kind == sip_core::ErrorKind::Incomplete => break,
                Err(e) => return Err(Error::peer("server", format!("bad framing: {e}"))),
            }
        }
    }
}

fn invite(ruri: &str, via: &str, local: SocketAddr, call_id: &str) -> String {
    format!(
        "INVITE {ruri} SIP/2.0\r\nVia: SIP/2.0/{via} {local};branch=z9hG4bK-{call_id}\r\nMax-Forwards: 70\r\n\
         From: <sip:caller@{local}>;tag=f{call_id}\r\nTo: <{ruri}>\r\nCall-ID: {call_id}\r\nCSeq: 1 INVITE\r\n\
         Contact: <sip:caller@{local}>\r\nContent-Length: 0\r\n\r\n"
    )
}

/// Inbound: each call a new TLS connection to `target` carrying an INVITE
/// for `callee` (registered with the server, answering 200).
pub fn inbound(
    target: SocketAddr,
    tls: &Arc<rustls::ClientConfig>,
    callee: &str,
    schedule: Schedule,
    stop: &AtomicBool,
) -> Measured {
    let run = std::process::id();
    let ruri = format!("sip:{callee}@{target}");
    let call = |i: u64| -> Result<(), Error> {
        let sock =
            TcpStream::connect_timeout(&target, CALL_TIMEOUT).map_err(Error::io("connect"))?;
        sock.set_read_timeout(Some(CALL_TIMEOUT))
            .map_err(Error::io("socket"))?;
        sock.set_nodelay(true).map_err(Error::io("socket"))?;
        let local = sock.local_addr().map_err(Error::io("socket"))?;
        let session =
            rustls::ClientConnection::new(tls.clone(), ServerName::IpAddress(target.ip().into()))
                .map_err(Error::crypto)?;
        let mut stream = rustls::StreamOwned::new(session, sock);
        let msg = invite(&ruri, "TLS", local, &format!("in{i}-{run}"));
        stream
            .write_all(msg.as_bytes())
            .map_err(Error::io("sending"))?;
        let code = final_status(&mut stream)?;
        stream.conn.send_close_notify();
        let _ = stream.flush();
        match code {
            200 => Ok(()),
            c => Err(Error::Status(c)),
        }
    };
    run_schedule(schedule, stop, &call)
}

/// TLS callees for the outbound experiment: each answers one INVITE per
/// connection with 200 OK and closes it.
#[derive(Debug)]
pub struct TlsCallees {
    addrs: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl TlsCallees {
    /// Starts [`OUTBOUND_CALLEES`] listeners on `ip` serving `config`.
    pub fn start(ip: std::net::IpAddr, config: Arc<rustls::ServerConfig>) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut addrs = Vec::new();
        let mut threads = Vec::new();
        for _ in 0..OUTBOUND_CALLEES {
            let listener = TcpListener::bind(SocketAddr::new(ip, 0))?;
            listener.set_nonblocking(true)?;
            addrs.push(listener.local_addr()?);
            let (stop, config) = (stop.clone(), config.clone());
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((sock, _)) => {
                            // A thread per connection: one slow handshake
                            // must not hold up the next call.
                            let config = config.clone();
                            std::thread::spawn(move || answer_once(sock, config));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
            }));
        }
        Ok(Self {
            addrs,
            stop,
            threads,
        })
    }

    /// The listening addresses.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Stops the listeners.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn answer_once(sock: TcpStream, config: Arc<rustls::ServerConfig>) -> io::Result<()> {
    sock.set_nonblocking(false)?;
    sock.set_read_timeout(Some(CALL_TIMEOUT))?;
    sock.set_nodelay(true)?;
    let session = rustls::ServerConnection::new(config).map_err(io::Error::other)?;
    let mut stream = rustls::StreamOwned::new(session, sock);
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let len = loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        match frame(&buf, &Limits::DEFAULT) {
            Ok(Frame::Message(k)) => break k,
            Ok(Frame::KeepAlive(k)) => {
                buf.drain(..k);
            }
            Err(e) if e.kind == sip_core::ErrorKind::Incomplete => {}
            Err(_) => return Ok(()),
        }
    };
    let Ok(req) = Message::parse(&buf[..len]) else {
        return Ok(());
    };
    let mut out = Vec::with_capacity(1024);
    write_response(
        &mut out,
        &req,
        StatusCode::OK,
        &ResponseOptions {
            to_tag: Some("tlscallee"),
            copy_record_route: true,
            ..Default::default()
        },
    );
    stream.write_all(&out)?;
    stream.conn.send_close_notify();
    stream.flush()
}

/// Registers the callees as `callee00`… with `sips:` contacts at `proxy`.
pub fn register_callees(proxy: SocketAddr, callees: &TlsCallees) -> Result<Vec<String>, Error> {
    let mut names = Vec::new();
    for (k, addr) in callees.addrs().iter().enumerate() {
        let user = User {
            name: format!("tlscallee{k:02}"),
            password: "pw".into(),
        };
        crate::responder::register_uri(
            proxy,
            &user,
            &format!("<sips:{}@{addr}>", user.name),
            3600,
        )?;
        names.push(user.name);
    }
    Ok(names)
}

/// Outbound: each call an INVITE over UDP to `proxy` for the next of
/// `callees`, which the proxy reaches over a new TLS connection.
pub fn outbound(
    proxy: SocketAddr,
    callees: &[String],
    schedule: Schedule,
    stop: &AtomicBool,
) -> Measured {
    let run = std::process::id();
    let call = |i: u64| -> Result<(), Error> {
        let sock = UdpSocket::bind(SocketAddr::new(proxy.ip(), 0)).map_err(Error::io("socket"))?;
        sock.set_read_timeout(Some(Duration::from_millis(500)))
            .map_err(Error::io("socket"))?;
        let local = sock.local_addr().map_err(Error::io("socket"))?;
        let callee = &callees[i as usize % callees.len().max(1)];
        let msg = invite(
            &format!("sip:{callee}@{proxy}"),
            "UDP",
            local,
            &format!("out{i}-{run}"),
        );
        let deadline = Instant::now() + CALL_TIMEOUT;
        let mut wait = Duration::from_millis(500);
        let mut next_send = Instant::now();
        let mut buf = [0u8; 4096];
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout(format!("INVITE to {callee}")));
            }
            if now >= next_send {
                // RFC 3261 timer A: retransmit with doubling intervals.
                sock.send_to(msg.as_bytes(), proxy)
                    .map_err(Error::io("sending"))?;
                next_send = now + wait;
                wait = (wait * 2).min(Duration::from_secs(4));
            }
            let left = next_send
                .min(deadline)
                .saturating_duration_since(Instant::now());
            sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .map_err(Error::io("socket"))?;
            let Ok(n) = sock.recv(&mut buf) else {
                continue;
            };
            let code = Message::parse(&buf[..n])
                .ok()
                .and_then(|m| m.status())
                .map(StatusCode::as_u16);
            match code {
                Some(200) => return Ok(()),
                Some(c) if c >= 300 => return Err(Error::Status(c)),
                _ => {}
            }
        }
    };
    run_schedule(schedule, stop, &call)
}
