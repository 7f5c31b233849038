//! HEP version 3 tracing: a copy of every SIP message received and sent,
//! with its addresses, transport and time, sent over UDP to a Homer (or
//! any HEP) collector. Messages on TLS and WebSocket connections are
//! traced as the server reads and writes them — decrypted, which a
//! sniffer on the wire cannot see.
//!
//! The encoding follows the HEP3 specification (sipcapture.org, "HEP3
//! Network Protocol Specification", rev. 12): the ASCII `HEP3`, the total
//! length, then chunks of vendor ID (0, generic), type ID, length
//! (header included) and value, all in network byte order.
//!
//! Tracing never slows the workers down: a message is encoded where it
//! passes and put on a bounded queue; one thread sends the queue to the
//! collector. When the queue is full the copy is dropped and counted.

use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use sip_core::Transport;

use crate::config::TraceSettings;
use crate::io::sinks::Tap;

/// Chunk types of the generic vendor (0) that sipsec writes.
pub mod chunk {
    /// IP family: 2 (IPv4) or 10 (IPv6), one byte.
    pub const FAMILY: u16 = 0x0001;
    /// IP protocol: 17 (UDP) or 6 (TCP), one byte.
    pub const PROTOCOL: u16 = 0x0002;
    /// IPv4 source address.
    pub const SRC_IP4: u16 = 0x0003;
    /// IPv4 destination address.
    pub const DST_IP4: u16 = 0x0004;
    /// IPv6 source address.
    pub const SRC_IP6: u16 = 0x0005;
    /// IPv6 destination address.
    pub const DST_IP6: u16 = 0x0006;
    /// Source port, two bytes.
    pub const SRC_PORT: u16 = 0x0007;
    /// Destination port, two bytes.
    pub const DST_PORT: u16 = 0x0008;
    /// Seconds since the Unix epoch, four bytes.
    pub const SECONDS: u16 = 0x0009;
    /// Microseconds within that second, four bytes.
    pub const MICROS: u16 = 0x000a;
    /// Captured protocol: 1 is SIP, one byte.
    pub const PROTO_TYPE: u16 = 0x000b;
    /// Capture agent ID, four bytes.
    pub const CAPTURE_ID: u16 = 0x000c;
    /// Authentication key for the collector.
    pub const AUTH_KEY: u16 = 0x000e;
    /// The captured message.
    pub const PAYLOAD: u16 = 0x000f;
    /// Correlation ID: the Call-ID.
    pub const CORRELATION: u16 = 0x0011;
}

/// One message as traced.
#[derive(Debug, Clone, Copy)]
pub struct Capture<'a> {
    /// Where it came from.
    pub src: SocketAddr,
    /// Where it went.
    pub dst: SocketAddr,
    /// TCP for every stream transport (TCP, TLS, WS, WSS), else UDP.
    pub transport: Transport,
    /// When.
    pub time: SystemTime,
    /// Capture agent ID.
    pub capture_id: u32,
    /// Authentication key, if any.
    pub password: Option<&'a str>,
    /// The SIP message.
    pub payload: &'a [u8],
    /// Its Call-ID, if it has one.
    pub call_id: Option<&'a str>,
    /// HEP protocol type: [`SIP`] for a message, [`LOG`] for a record of
    /// the connection (a TLS session set up).
    pub proto_type: u8,
}

/// HEP protocol type of a SIP message.
pub const SIP: u8 = 1;
/// HEP protocol type of a log record (as Homer's agents send logs).
pub const LOG: u8 = 100;

fn put(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&((6 + value.len()) as u16).to_be_bytes());
    out.extend_from_slice(value);
}

/// The largest payload one HEP packet carries (its length field is 16
/// bits; the chunks around the payload take well under 512 bytes).
pub const MAX_PAYLOAD: usize = 65_535 - 512;

/// Encodes one HEP3 packet; `None` when the message is too large for one.
pub fn encode(c: &Capture<'_>) -> Option<Vec<u8>> {
    if c.payload.len() > MAX_PAYLOAD
        || c.password.is_some_and(|p| p.len() > 128)
        || c.call_id.is_some_and(|i| i.len() > 256)
    {
        return None;
    }
    let mut out = Vec::with_capacity(c.payload.len() + 128);
    out.extend_from_slice(b"HEP3\0\0");
    let (src_ip, dst_ip) = (c.src.ip(), canonical(c.dst.ip(), c.src.ip()));
    let src_ip = canonical(src_ip, dst_ip);
    match (src_ip, dst_ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            put(&mut out, chunk::FAMILY, &[2]);
            put(&mut out, chunk::SRC_IP4, &s.octets());
            put(&mut out, chunk::DST_IP4, &d.octets());
        }
        (s, d) => {
            put(&mut out, chunk::FAMILY, &[10]);
            put(&mut out, chunk::SRC_IP6, &v6(s).octets());
            put(&mut out, chunk::DST_IP6, &v6(d).octets());
        }
    }
    let protocol = if c.transport == Transport::Udp { 17 } else { 6 };
    put(&mut out, chunk::PROTOCOL, &[protocol]);
    put(&mut out, chunk::SRC_PORT, &c.src.port().to_be_bytes());
    put(&mut out, chunk::DST_PORT, &c.dst.port().to_be_bytes());
    let since = c.time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = u32::try_from(since.as_secs()).unwrap_or(u32::MAX);
    put(&mut out, chunk::SECONDS, &secs.to_be_bytes());
    put(
        &mut out,
        chunk::MICROS,
        &since.subsec_micros().to_be_bytes(),
    );
    put(&mut out, chunk::PROTO_TYPE, &[c.proto_type]);
    put(&mut out, chunk::CAPTURE_ID, &c.capture_id.to_be_bytes());
    if let Some(p) = c.password {
        put(&mut out, chunk::AUTH_KEY, p.as_bytes());
    }
    if let Some(id) = c.call_id {
        put(&mut out, chunk::CORRELATION, id.as_bytes());
    }
    put(&mut out, chunk::PAYLOAD, c.payload);
    let len = out.len() as u16;
    out[4..6].copy_from_slice(&len.to_be_bytes());
    Some(out)
}

/// An IPv4-mapped IPv6 address as IPv4 when the other side is IPv4, so
/// both addresses of a packet share a family.
fn canonical(ip: IpAddr, other: IpAddr) -> IpAddr {
    match (ip, other) {
        (IpAddr::V6(v6), IpAddr::V4(_)) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        _ => ip,
    }
}

fn v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// A header's value in a message's head (full or compact name, any case).
fn header<'a>(msg: &'a [u8], full: &str, compact: &str) -> Option<&'a str> {
    let end = memchr::memmem::find(msg, b"\r\n\r\n").unwrap_or(msg.len());
    std::str::from_utf8(&msg[..end])
        .ok()?
        .split("\r\n")
        .skip(1)
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            let name = name.trim();
            (name.eq_ignore_ascii_case(full) || name.eq_ignore_ascii_case(compact))
                .then(|| value.trim())
        })
}

/// The method a message is about: a request's own, a response's CSeq's.
fn method(msg: &[u8]) -> Option<&str> {
    if msg.starts_with(b"SIP/2.0 ") {
        header(msg, "CSeq", "CSeq")?.split_ascii_whitespace().nth(1)
    } else {
        let sp = memchr::memchr(b' ', msg)?;
        std::str::from_utf8(&msg[..sp]).ok()
    }
}

/// Packets waiting for the sender thread, at most.
const QUEUE: usize = 8192;

/// The tracer the drivers tap: filters, encodes and queues.
#[derive(Debug)]
pub struct Tracer {
    settings: TraceSettings,
    /// This server's address on each transport (the listening address).
    locals: Locals,
    queue: SyncSender<Vec<u8>>,
    sampler: std::hash::RandomState,
    queued: AtomicU64,
    dropped: AtomicU64,
}

/// The server's own address per transport, written as the other end of
/// each traced message.
#[derive(Debug, Clone, Copy)]
pub struct Locals {
    /// UDP.
    pub udp: SocketAddr,
    /// TCP (the UDP address when off).
    pub tcp: Option<SocketAddr>,
    /// TLS.
    pub tls: Option<SocketAddr>,
    /// WebSocket.
    pub ws: Option<SocketAddr>,
    /// Secure WebSocket.
    pub wss: Option<SocketAddr>,
}

impl Locals {
    fn of(&self, t: Transport) -> SocketAddr {
        let own = match t {
            Transport::Tcp => self.tcp,
            Transport::Tls => self.tls,
            Transport::Ws => self.ws,
            Transport::Wss => self.wss,
            _ => None,
        };
        own.unwrap_or(self.udp)
    }
}

impl Tracer {
    /// Starts the sender thread towards the collector in `settings`.
    pub fn start(
        settings: TraceSettings,
        locals: Locals,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> std::io::Result<(Arc<Self>, std::thread::JoinHandle<()>)> {
        let collector = std::net::ToSocketAddrs::to_socket_addrs(&settings.collector)?
            .next()
            .ok_or_else(|| std::io::Error::other(format!("{}: no address", settings.collector)))?;
        let bind: SocketAddr = if collector.is_ipv6() {
            "[::]:0".parse().expect("literal")
        } else {
            "0.0.0.0:0".parse().expect("literal")
        };
        let sock = UdpSocket::bind(bind)?;
        sock.connect(collector)?;
        let (queue, rx) = sync_channel(QUEUE);
        let thread = std::thread::Builder::new()
            .name("hep".into())
            .spawn(move || send_loop(&sock, &rx, &stop))?;
        let tracer = Arc::new(Self {
            settings,
            locals,
            queue,
            sampler: std::hash::RandomState::new(),
            queued: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        });
        Ok((tracer, thread))
    }

    fn wanted(&self, bytes: &[u8], call_id: Option<&str>) -> bool {
        let s = &self.settings;
        if !s.methods.is_empty() && !method(bytes).is_some_and(|m| s.methods.iter().any(|w| w == m))
        {
            return false;
        }
        if s.sample >= 1.0 {
            return true;
        }
        // The same Call-ID always draws the same number: whole dialogs.
        let mut h = self.sampler.build_hasher();
        h.write(call_id.unwrap_or("").as_bytes());
        (h.finish() % 1_000_000) < (s.sample * 1_000_000.0) as u64
    }

    fn capture(&self, bytes: &[u8], src: SocketAddr, dst: SocketAddr, transport: Transport) {
        let call_id = header(bytes, "Call-ID", "i");
        if !self.wanted(bytes, call_id) {
            return;
        }
        let packet = encode(&Capture {
            src,
            dst,
            transport,
            time: SystemTime::now(),
            capture_id: self.settings.capture_id,
            password: self.settings.password.as_deref(),
            payload: bytes,
            call_id,
            proto_type: SIP,
        });
        self.enqueue(packet);
    }

    /// Queues an encoded packet for the sender thread (`None`: too large
    /// to encode), counting what is dropped.
    fn enqueue(&self, packet: Option<Vec<u8>>) {
        let Some(packet) = packet else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        // Counted before it is queued, so that the count never lags a
        // copy the collector already has; taken back if it is not.
        self.queued.fetch_add(1, Ordering::Relaxed);
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.queue.try_send(packet)
        {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Tap for Tracer {
    fn received(&self, bytes: &[u8], peer: SocketAddr, transport: Transport) {
        self.capture(bytes, peer, self.locals.of(transport), transport);
    }

    fn sent(&self, bytes: &[u8], peer: SocketAddr, transport: Transport) {
        self.capture(bytes, self.locals.of(transport), peer, transport);
    }

    fn connection_event(&self, peer: SocketAddr, transport: Transport, record: &str) {
        // One per connection: not filtered by method or sampled.
        let packet = encode(&Capture {
            src: peer,
            dst: self.locals.of(transport),
            transport,
            time: SystemTime::now(),
            capture_id: self.settings.capture_id,
            password: self.settings.password.as_deref(),
            payload: record.as_bytes(),
            call_id: None,
            proto_type: LOG,
        });
        self.enqueue(packet);
    }

    fn counts(&self) -> (u64, u64) {
        (
            self.queued.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
        )
    }

    fn wake(&self) {
        let _ = self.queue.try_send(Vec::new());
    }
}

/// Sends what is queued until the server stops; a collector that is away
/// costs a failed send per packet (ICMP refusals are ignored).
fn send_loop(sock: &UdpSocket, rx: &Receiver<Vec<u8>>, stop: &std::sync::atomic::AtomicBool) {
    // Blocks until a copy comes; the stop sends an empty one to wake it
    // (when the queue is full there is no room for it, but then the loop
    // is not waiting and sees the stop after the copy it sends).
    while !stop.load(Ordering::Relaxed) {
        match rx.recv() {
            Ok(p) if p.is_empty() => {}
            Ok(p) => {
                let _ = sock.send(&p);
            }
            Err(_) => return,
        }
    }
    // What was queued before the stop still goes.
    while let Ok(p) = rx.try_recv() {
        if p.is_empty() {
            continue;
        }
        let _ = sock.send(&p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn chunks(p: &[u8]) -> Vec<(u16, Vec<u8>)> {
        assert_eq!(&p[..4], b"HEP3");
        assert_eq!(usize::from(u16::from_be_bytes([p[4], p[5]])), p.len());
        let mut out = Vec::new();
        let mut at = 6;
        while at < p.len() {
            let vendor = u16::from_be_bytes([p[at], p[at + 1]]);
            let kind = u16::from_be_bytes([p[at + 2], p[at + 3]]);
            let len = usize::from(u16::from_be_bytes([p[at + 4], p[at + 5]]));
            assert_eq!(vendor, 0);
            out.push((kind, p[at + 6..at + len].to_vec()));
            at += len;
        }
        out
    }

    #[test]
    fn a_packet_has_every_chunk_in_network_order() {
        let msg = b"OPTIONS sip:a@b SIP/2.0\r\ni: abc@x\r\nCSeq: 1 OPTIONS\r\n\r\n";
        let p = encode(&Capture {
            src: "192.0.2.1:5062".parse().expect("addr"),
            dst: "[::ffff:192.0.2.2]:5060".parse().expect("addr"),
            transport: Transport::Tls,
            time: UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456),
            capture_id: 7,
            password: Some("k"),
            payload: msg,
            call_id: header(msg, "Call-ID", "i"),
            proto_type: SIP,
        })
        .expect("fits");
        let c = chunks(&p);
        let get = |k| c.iter().find(|(t, _)| *t == k).map(|(_, v)| v.clone());
        assert_eq!(get(chunk::FAMILY), Some(vec![2]));
        assert_eq!(get(chunk::PROTOCOL), Some(vec![6]));
        assert_eq!(get(chunk::SRC_IP4), Some(vec![192, 0, 2, 1]));
        assert_eq!(
            get(chunk::DST_IP4),
            Some(vec![192, 0, 2, 2]),
            "mapped to v4"
        );
        assert_eq!(get(chunk::SRC_PORT), Some(5062u16.to_be_bytes().to_vec()));
        assert_eq!(
            get(chunk::SECONDS),
            Some(1_700_000_000u32.to_be_bytes().to_vec())
        );
        assert_eq!(get(chunk::MICROS), Some(123_456u32.to_be_bytes().to_vec()));
        assert_eq!(get(chunk::CAPTURE_ID), Some(7u32.to_be_bytes().to_vec()));
        assert_eq!(get(chunk::AUTH_KEY), Some(b"k".to_vec()));
        assert_eq!(get(chunk::CORRELATION), Some(b"abc@x".to_vec()));
        assert_eq!(get(chunk::PAYLOAD), Some(msg.to_vec()));
        assert_eq!(method(msg), Some("OPTIONS"));
        assert_eq!(
            method(b"SIP/2.0 200 OK\r\nCSeq: 2 INVITE\r\n\r\n"),
            Some("INVITE")
        );
    }

    #[test]
    fn oversized_messages_are_refused_not_truncated() {
        let big = vec![b'x'; MAX_PAYLOAD + 1];
        assert!(encode(&Capture {
            src: "[::1]:1".parse().expect("addr"),
            dst: "[::1]:2".parse().expect("addr"),
            transport: Transport::Udp,
            time: SystemTime::now(),
            capture_id: 1,
            password: None,
            payload: &big,
            call_id: None,
            proto_type: SIP,
        })
        .is_none());
    }
}
