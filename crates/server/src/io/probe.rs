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

/// A gateway across generations of the trunks: trunk name, address.
type Gw = (String, SocketAddr);

/// A UDP probe in flight, by number.
type Pending = HashMap<u64, Probe>;

/// What a UDP probe's answer must match to count: it comes from the
/// address asked and names the probe's random token (the number alone is
/// a counter anyone could guess), before the deadline.
#[derive(Debug)]
struct Probe {
    gw: Gw,
    to: SocketAddr,
    token: u64,
    deadline: Instant,
}

/// Whether `a` and `b` are one address: a dual-stack socket reports an
/// IPv4 sender as IPv4-mapped IPv6.
fn same_host_port(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && a.ip().to_canonical() == b.ip().to_canonical()
}

/// A probe's unguessable token.
fn token() -> u64 {
    let mut b = [0u8; 8];
    // Without the system's randomness the token is still unique to the
    // process's probes; the source check stands either way.
    if getrandom::fill(&mut b).is_err() {
        return std::process::id().into();
    }
    u64::from_le_bytes(b)
}

/// The most of a TCP probe's answer read.
const MAX_ANSWER: usize = 16 * 1024;

/// How long the thread sleeps when nothing is probed (a reload may add
/// probes).
const IDLE: Duration = Duration::from_secs(1);

/// Starts the trunks' thread (probes, and lookups of gateways' names)
/// for a proxy: a reload may add trunks later.
pub fn start(
    shared: Arc<Shared>,
    bind: SocketAddr,
    stop: Arc<AtomicBool>,
) -> std::io::Result<Option<JoinHandle<()>>> {
    if shared.config.mode != crate::config::Mode::Proxy {
        return Ok(None);
    }
    let sock = UdpSocket::bind(SocketAddr::new(bind.ip(), 0))?;
    sock.set_read_timeout(Some(TICK))?;
    let thread = std::thread::Builder::new()
        .name("probes".into())
        .spawn(move || run(&shared, &sock, &stop))?;
    Ok(Some(thread))
}

fn options(me: SocketAddr, to: (SocketAddr, Transport), seq: u64, token: u64) -> String {
    let (to, transport) = to;
    let uri_transport = if transport == Transport::Tcp {
        ";transport=tcp"
    } else {
        ""
    };
    format!(
        "OPTIONS sip:{to}{uri_transport} SIP/2.0\r\nVia: SIP/2.0/{} {me};branch=z9hG4bK-probe-{seq:x}-{token:x};rport\r\n\
         Max-Forwards: 70\r\nFrom: <sip:probe@{me}>;tag=probe\r\nTo: <sip:{to}>\r\n\
         Call-ID: probe-{seq:x}-{token:016x}@{me}\r\nCSeq: {} OPTIONS\r\nUser-Agent: sipsec\r\nContent-Length: 0\r\n\r\n",
        transport.as_str(),
        seq % 1_000_000 + 1
    )
}

/// The probe number and token a response's Call-ID names, and whether it
/// answers "alive" (below 500).
fn answer(bytes: &[u8]) -> Option<(u64, u64, bool)> {
    let m = sip_core::Message::parse(bytes).ok()?;
    let status = m.status()?;
    let id = m.call_id().strip_prefix("probe-")?.split('@').next()?;
    let (seq, token) = id.split_once('-')?;
    let parse = |s: &str| u64::from_str_radix(s, 16).ok();
    Some((parse(seq)?, parse(token)?, status.as_u16() < 500))
}

fn run(shared: &Arc<Shared>, sock: &UdpSocket, stop: &AtomicBool) {
    let me = sock
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)));
    let mut next_due: HashMap<Gw, Instant> = HashMap::new();
    let mut pending: Pending = HashMap::new();
    let mut streams: HashMap<Gw, JoinHandle<()>> = HashMap::new();
    let mut lookups = Lookups::default();
    let mut seq: u64 = 0;
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        lookups.run_due(shared, now);
        let probes = shared.trunks.probes();
        let _ = sock.set_read_timeout(Some(if probes.is_empty() && pending.is_empty() {
            IDLE
        } else {
            TICK
        }));
        for p in probes {
            let gw = (p.trunk, p.gateway);
            let due = next_due.entry(gw.clone()).or_insert(now);
            let busy = pending.values().any(|p| p.gw == gw)
                || streams.get(&gw).is_some_and(|h| !h.is_finished());
            if *due > now || busy {
                continue;
            }
            *due = now + p.every;
            seq += 1;
            let to = (p.gateway, p.transport);
            let deadline = DEADLINE.min(p.every);
            let token = token();
            if to.1 != Transport::Udp {
                if let Some(h) = probe_stream(shared, gw.clone(), to, (seq, token), deadline) {
                    streams.insert(gw, h);
                }
                continue;
            }
            if sock
                .send_to(options(me, to, seq, token).as_bytes(), to.0)
                .is_ok()
            {
                let deadline = now + deadline;
                let probe = Probe {
                    gw,
                    to: to.0,
                    token,
                    deadline,
                };
                pending.insert(seq, probe);
            } else {
                report(shared, &gw, false);
            }
        }
        // An error (an ICMP error for a probe) is left to that probe's
        // deadline.
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            if let Some((s, token, alive)) = answer(&buf[..n]) {
                // Anything else leaves the probe waiting for its answer.
                let ours = pending
                    .get(&s)
                    .is_some_and(|p| same_host_port(p.to, from) && p.token == token);
                if let Some(p) = ours.then(|| pending.remove(&s)).flatten() {
                    report(shared, &p.gw, alive);
                }
            }
        }
        let now = Instant::now();
        let late: Vec<u64> = pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(s, _)| *s)
            .collect();
        for s in late {
            if let Some(p) = pending.remove(&s) {
                report(shared, &p.gw, false);
            }
        }
    }
}

/// When each trunk's gateway names are next looked up, and the lookup
/// under way (on a thread of its own: the system's resolver blocks).
#[derive(Default)]
struct Lookups {
    next: HashMap<String, Instant>,
    running: Option<JoinHandle<()>>,
}

impl Lookups {
    /// Starts a lookup of the trunks due at `now`, unless one runs.
    fn run_due(&mut self, shared: &Arc<Shared>, now: Instant) {
        if self.running.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        let mut due = Vec::new();
        for t in shared.trunks.configs() {
            let Some(every) = t.resolve_every else {
                continue;
            };
            if t.gateways.iter().all(|g| g.name.is_none()) {
                continue;
            }
            let next = self.next.entry(t.name.clone()).or_insert(now + every);
            if *next <= now {
                *next = now + every;
                due.push(t.name);
            }
        }
        if due.is_empty() {
            return;
        }
        let mine = shared.clone();
        self.running = std::thread::Builder::new()
            .name("trunk-names".into())
            .spawn(move || crate::io::trunk_files::refresh(&mine, &due))
            .ok();
    }
}

/// Probes the TCP gateway `to` (`gw`) on a thread of
/// its own: connect, OPTIONS, the answer's status line, all within
/// `deadline`; the outcome reported.
fn probe_stream(
    shared: &Arc<Shared>,
    gw: Gw,
    to: (SocketAddr, Transport),
    seq: (u64, u64),
    deadline: Duration,
) -> Option<JoinHandle<()>> {
    let mine = shared.clone();
    let theirs = gw.clone();
    let spawned = std::thread::Builder::new()
        .name("probe-tcp".into())
        .spawn(move || {
            let alive = ask_over_stream(to, seq, Instant::now() + deadline).unwrap_or(false);
            report(&mine, &theirs, alive);
        });
    match spawned {
        Ok(h) => Some(h),
        Err(_) => {
            report(shared, &gw, false);
            None
        }
    }
}

/// One OPTIONS over a new connection to `to`, answered before `until`:
/// whether the answer says alive (below 500). `None`: no answer.
fn ask_over_stream(to: (SocketAddr, Transport), seq: (u64, u64), until: Instant) -> Option<bool> {
    let left = || {
        until
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    };
    let mut s = TcpStream::connect_timeout(&to.0, left()?).ok()?;
    let me = s.local_addr().ok()?;
    s.set_write_timeout(left()).ok()?;
    s.write_all(options(me, to, seq.0, seq.1).as_bytes()).ok()?;
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
    let (n, token, alive) = answer(&got)?;
    ((n, token) == seq).then_some(alive)
}

fn report(shared: &Shared, gw: &Gw, alive: bool) {
    if let Some(c) = shared.trunks.probed(&gw.0, gw.1, alive, &shared.names) {
        if c.up {
            tracing::info!(target: "sipsec::trunk", trunk = c.trunk, gateway = %c.gateway, "gateway up: its probes are answered");
        } else {
            tracing::warn!(target: "sipsec::trunk", trunk = c.trunk, gateway = %c.gateway, "gateway down: its probes go unanswered");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_matched_by_number_token_and_address() {
        let me: SocketAddr = "127.0.0.1:5060".parse().unwrap();
        let gw: SocketAddr = "192.0.2.7:5070".parse().unwrap();
        let probe = options(me, (gw, Transport::Udp), 41, 0xfeed);
        let call_id = probe.lines().find(|l| l.starts_with("Call-ID:")).unwrap();
        let ok = format!(
            "SIP/2.0 503 Busy\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-probe-29-feed\r\n\
             From: <sip:probe@{me}>;tag=probe\r\nTo: <sip:{gw}>;tag=g\r\n{call_id}\r\n\
             CSeq: 42 OPTIONS\r\nContent-Length: 0\r\n\r\n"
        );
        assert_eq!(answer(ok.as_bytes()), Some((41, 0xfeed, false)));
        let unnumbered = ok.replace(call_id, "Call-ID: probe-29@127.0.0.1:5060");
        assert_eq!(answer(unnumbered.as_bytes()), None);
        let mapped: SocketAddr = "[::ffff:192.0.2.7]:5070".parse().unwrap();
        assert!(same_host_port(gw, mapped) && same_host_port(mapped, gw));
        assert!(!same_host_port(
            gw,
            "[::ffff:192.0.2.7]:5071".parse().unwrap()
        ));
        assert!(!same_host_port(gw, "192.0.2.8:5070".parse().unwrap()));
    }
}
