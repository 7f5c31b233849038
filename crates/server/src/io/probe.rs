//! OPTIONS probes of the trunks' gateways (RFC 3261 §11): each gateway is
//! asked every `probe_every` (less often while it is down) — a UDP
//! gateway from this thread's own socket, a TCP gateway over a connection
//! of its own opened by a short-lived thread (one per gateway at a time,
//! so a gateway that blackholes connections delays no other probe); an
//! answer below 500 within the deadline counts as alive, anything else
//! (no answer, no connection, 5xx) as failed. What the answers
//! mean — down after `down_after` failures in a row, up again after
//! `up_after` answers — is [`crate::proto::trunks::Trunks::probed`]'s;
//! this thread only moves the bytes and keeps time, and logs each
//! change.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sip_core::Transport;

use crate::proto::shared::Shared;

/// How long a probe waits for its answer (at most; less when probes are
/// more frequent).
const DEADLINE: Duration = Duration::from_secs(2);
/// How often the thread looks at what is due.
const TICK: Duration = Duration::from_millis(50);

/// A probe in flight: trunk, gateway, when it is given up.
type Pending = HashMap<u64, (usize, usize, Instant)>;

/// The most of a TCP probe's answer read.
const MAX_ANSWER: usize = 16 * 1024;

/// Starts the probe thread when a trunk is probed.
pub fn start(
    shared: Arc<Shared>,
    bind: SocketAddr,
    stop: Arc<AtomicBool>,
) -> std::io::Result<Option<JoinHandle<()>>> {
    if shared.trunks.probes().is_empty() {
        return Ok(None);
    }
    let sock = UdpSocket::bind(SocketAddr::new(bind.ip(), 0))?;
    sock.set_read_timeout(Some(TICK))?;
    let thread = std::thread::Builder::new()
        .name("probes".into())
        .spawn(move || run(&shared, &sock, &stop))?;
    Ok(Some(thread))
}

fn options(me: SocketAddr, to: (SocketAddr, Transport), seq: u64) -> String {
    let (to, transport) = to;
    let uri_transport = if transport == Transport::Tcp {
        ";transport=tcp"
    } else {
        ""
    };
    format!(
        "OPTIONS sip:{to}{uri_transport} SIP/2.0\r\nVia: SIP/2.0/{} {me};branch=z9hG4bK-probe-{seq:x};rport\r\n\
         Max-Forwards: 70\r\nFrom: <sip:probe@{me}>;tag=probe\r\nTo: <sip:{to}>\r\n\
         Call-ID: probe-{seq:x}@{me}\r\nCSeq: {} OPTIONS\r\nUser-Agent: sipsec\r\nContent-Length: 0\r\n\r\n",
        transport.as_str(),
        seq % 1_000_000 + 1
    )
}

/// The probe number a response's Call-ID names, and whether it answers
/// "alive" (below 500).
fn answer(bytes: &[u8]) -> Option<(u64, bool)> {
    let m = sip_core::Message::parse(bytes).ok()?;
    let status = m.status()?;
    let seq = m.call_id().strip_prefix("probe-")?.split('@').next()?;
    Some((u64::from_str_radix(seq, 16).ok()?, status.as_u16() < 500))
}

fn run(shared: &Arc<Shared>, sock: &UdpSocket, stop: &AtomicBool) {
    let me = sock
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)));
    let mut next_due: HashMap<(usize, usize), Instant> = HashMap::new();
    let mut pending: Pending = HashMap::new();
    let mut streams: HashMap<(usize, usize), JoinHandle<()>> = HashMap::new();
    let mut seq: u64 = 0;
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        for (t, g, to, every) in shared.trunks.probes() {
            let due = next_due.entry((t, g)).or_insert(now);
            let busy = pending.values().any(|p| (p.0, p.1) == (t, g))
                || streams.get(&(t, g)).is_some_and(|h| !h.is_finished());
            if *due > now || busy {
                continue;
            }
            *due = now + every;
            seq += 1;
            if to.1 != Transport::Udp {
                if let Some(h) = probe_stream(shared, (t, g), to, seq, DEADLINE.min(every)) {
                    streams.insert((t, g), h);
                }
                continue;
            }
            let addr = to.0;
            if sock.send_to(options(me, to, seq).as_bytes(), addr).is_ok() {
                pending.insert(seq, (t, g, now + DEADLINE.min(every)));
            } else {
                report(shared, t, g, false);
            }
        }
        // An error (an ICMP error for a probe) is left to that probe's
        // deadline.
        if let Ok((n, _)) = sock.recv_from(&mut buf) {
            if let Some((s, alive)) = answer(&buf[..n]) {
                if let Some((t, g, _)) = pending.remove(&s) {
                    report(shared, t, g, alive);
                }
            }
        }
        let now = Instant::now();
        let late: Vec<u64> = pending
            .iter()
            .filter(|(_, p)| p.2 <= now)
            .map(|(s, _)| *s)
            .collect();
        for s in late {
            if let Some((t, g, _)) = pending.remove(&s) {
                report(shared, t, g, false);
            }
        }
    }
}

/// Probes the TCP gateway `to` (trunk and gateway `tg`) on a thread of
/// its own: connect, OPTIONS, the answer's status line, all within
/// `deadline`; the outcome reported.
fn probe_stream(
    shared: &Arc<Shared>,
    tg: (usize, usize),
    to: (SocketAddr, Transport),
    seq: u64,
    deadline: Duration,
) -> Option<JoinHandle<()>> {
    let mine = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("probe-tcp".into())
        .spawn(move || {
            let alive = ask_over_stream(to, seq, Instant::now() + deadline).unwrap_or(false);
            report(&mine, tg.0, tg.1, alive);
        });
    match spawned {
        Ok(h) => Some(h),
        Err(_) => {
            report(shared, tg.0, tg.1, false);
            None
        }
    }
}

/// One OPTIONS over a new connection to `to`, answered before `until`:
/// whether the answer says alive (below 500). `None`: no answer.
fn ask_over_stream(to: (SocketAddr, Transport), seq: u64, until: Instant) -> Option<bool> {
    let left = || {
        until
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    };
    let mut s = TcpStream::connect_timeout(&to.0, left()?).ok()?;
    let me = s.local_addr().ok()?;
    s.set_write_timeout(left()).ok()?;
    s.write_all(options(me, to, seq).as_bytes()).ok()?;
    let mut got = Vec::with_capacity(1024);
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        s.set_read_timeout(Some(left()?)).ok()?;
        let n = s.read(&mut buf).ok().filter(|n| *n > 0)?;
        got.extend_from_slice(&buf[..n]);
        if got.len() > MAX_ANSWER {
            return None;
        }
    }
    let (s, alive) = answer(&got)?;
    (s == seq).then_some(alive)
}

fn report(shared: &Shared, t: usize, g: usize, alive: bool) {
    if let Some(c) = shared.trunks.probed(t, g, alive, &shared.names) {
        if c.up {
            tracing::info!(target: "sipsec::trunk", trunk = c.trunk, gateway = %c.gateway, "gateway up: its probes are answered");
        } else {
            tracing::warn!(target: "sipsec::trunk", trunk = c.trunk, gateway = %c.gateway, "gateway down: its probes go unanswered");
        }
    }
}
