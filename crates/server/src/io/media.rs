//! The media relays (rtpengine, NG protocol over UDP): what the cores
//! queue in their [`MediaTable`] is sent at once by the thread that
//! carries the core's output ([`Pump::pump`], no hand-off to another
//! thread). A UDP worker sends from its own SIP socket, so the relay's
//! answer arrives where the workers already wait: the worker that reads
//! it ([`Pump::answer`]) hands the message that waited in again itself,
//! and no other thread wakes. Commands sent from other threads (a TCP
//! reactor's, the timers', retransmissions, pings) go from the media
//! socket, whose answers the media thread reads and hands in. A command
//! nothing waits on (a call's `delete`) goes from a quiet socket nobody
//! is woken for: the media thread reads its answers every
//! [`QUIET_READ`] while such commands are in flight (or at once after
//! [`QUIET_BATCH`] of them), so ending a call wakes no thread at the
//! relay's answer. The NG client (`proto::ng::Client`: retransmissions,
//! failover, pings) is shared; the media thread keeps its timers and
//! sleeps until an answer arrives or the next deadline (a pump that
//! starts a command due sooner wakes it).
//!
//! [`MediaTable`]: crate::proto::media::MediaTable

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket as StdSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::io::send::Sender;
use crate::io::wake::{Pumps, Via};
use crate::proto::core::Core;
use crate::proto::media::{MediaTable, Outcome};
use crate::proto::ng::{Client, Event, Reply, Settings, MAX_ANSWER};
use crate::proto::parked::Parked;
use crate::proto::shared::Shared;

const WAKER: Token = Token(0);
const SOCKET: Token = Token(1);
/// How often calls left behind are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// How often the quiet socket's answers are read while commands are in
/// flight: well below a try's timeout (1 s by default), so an answered
/// command is never retried for want of reading it. Measured at 200
/// relayed calls/s: reading every 50 ms cost the media thread 24 µs per
/// answer, every 250 ms 18 µs (fewer wake-ups share the answers).
pub const QUIET_READ: Duration = Duration::from_millis(250);
/// Quiet commands sent since the last read that wake the media thread
/// at once, bounding the answers queued on the quiet socket (an answer
/// with its statistics is a few kB of buffer: 32 stay well inside the
/// default receive buffer).
pub const QUIET_BATCH: u64 = 32;
/// Datagrams read from one socket per wake: a flood at either socket's
/// port (anyone can send to it) cannot hold the media thread from its
/// timers and hand-ins; what is left is read on the next turn.
pub const READ_BATCH: usize = 64;

/// The NG client and what it waits for, shared by the pumps and the
/// media thread.
#[derive(Debug)]
struct Inner {
    client: Client,
    /// The question each command in flight answers (0: none waits).
    cookies: HashMap<String, u64>,
    /// Questions whose command could not start (no relay up, too many in
    /// flight): the media thread hands their messages in.
    failed: Vec<(u64, Outcome)>,
}

/// Sends what the cores asked of the relays; see the module documentation.
#[derive(Debug)]
pub struct Pump {
    shared: Arc<Shared>,
    inner: Mutex<Inner>,
    sock: StdSocket,
    /// Sends the commands nothing waits on; read on the media thread's
    /// own schedule, never polled.
    quiet: StdSocket,
    /// Commands sent from `quiet`, and how many of them the media thread
    /// had seen sent when it last read it.
    quiet_sent: AtomicU64,
    quiet_seen: AtomicU64,
    waker: Arc<Waker>,
    origin: Instant,
    /// When the media thread means to wake next (nanoseconds since
    /// `origin`): a command due sooner wakes it.
    planned: AtomicU64,
    /// The relays' addresses: a datagram from one on a SIP socket is an
    /// answer.
    relays: Vec<SocketAddr>,
}

impl Pump {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn table(&self) -> &MediaTable {
        self.shared
            .media
            .as_ref()
            .expect("media relays run only with a media table")
    }

    fn nanos(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin).as_nanos() as u64
    }

    /// Whether commands were sent from the quiet socket since the media
    /// thread last read it.
    fn quiet_unread(&self) -> bool {
        self.quiet_sent.load(Ordering::Acquire) != self.quiet_seen.load(Ordering::Acquire)
    }

    /// Hands the NG client a datagram from `from`, publishing what it
    /// refused so far.
    fn datagram(&self, inner: &mut Inner, from: SocketAddr, data: &[u8], events: &mut Vec<Event>) {
        inner.client.on_datagram(from, data, events);
        let refused = inner.client.counts().refused;
        self.table()
            .counts
            .answers_refused
            .store(refused, Ordering::Relaxed);
    }

    /// Wakes the media thread (to see the stop).
    pub fn wake(&self) {
        let _ = self.waker.wake();
    }

    /// Carries out what the client said: sends (from the media socket),
    /// relay changes (published); the questions answered or failed, with
    /// their outcomes, are returned.
    fn settle(&self, events: Vec<Event>) -> Vec<(u64, Outcome)> {
        let mut settled = Vec::new();
        for e in events {
            match e {
                Event::Send { to, bytes } => {
                    let _ = self.sock.send_to(&bytes, to);
                }
                Event::Answered { cookie, reply } => {
                    let question = self.lock().cookies.remove(&cookie).unwrap_or(0);
                    let outcome = match reply {
                        Reply::Ok { sdp: Some(sdp) } => Outcome::Sdp(sdp),
                        Reply::Ok { sdp: None } | Reply::Pong => {
                            Outcome::Failed("the media relay answered without SDP".into())
                        }
                        Reply::Error(e) => Outcome::Refused(e),
                    };
                    let c = &self.table().counts;
                    count(if question == 0 || matches!(outcome, Outcome::Sdp(_)) {
                        &c.ok
                    } else {
                        &c.failed
                    });
                    settled.push((question, outcome));
                }
                Event::Failed { cookie, why } => {
                    let question = self.lock().cookies.remove(&cookie).unwrap_or(0);
                    count(&self.table().counts.failed);
                    settled.push((question, Outcome::failure(&why)));
                }
                Event::RelayDown(a) => {
                    tracing::warn!(target: "sipsec::media", relay = %a, "media relay down");
                    self.publish_relays();
                }
                Event::RelayUp(a) => {
                    tracing::info!(target: "sipsec::media", relay = %a, "media relay up");
                    self.publish_relays();
                }
            }
        }
        settled
    }

    /// The messages that waited on the questions `settled` answers, each
    /// with its question's outcome.
    fn released(&self, settled: Vec<(u64, Outcome)>) -> Vec<(Parked, Outcome)> {
        let mut out = Vec::new();
        for (question, outcome) in settled {
            if question == 0 {
                continue;
            }
            for p in self.table().answered(question) {
                out.push((p, outcome.clone()));
            }
        }
        out
    }

    fn publish_relays(&self) {
        let relays = self.lock().client.relays().collect();
        self.table().set_relays(relays);
    }
}

impl Pumps for Pump {
    /// Starts every command the cores queued, sending each from the
    /// calling thread; wakes the media thread when one is due before it
    /// means to wake, or could not start.
    fn pump(&self, via: Option<Via<'_>>) {
        let asked = self.table().take_asked();
        if asked.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut sends = Vec::with_capacity(asked.len());
        let mut wake = false;
        {
            let mut inner = self.lock();
            for (question, command) in asked {
                match inner.client.start(&command, now) {
                    Ok((cookie, Event::Send { to, bytes })) => {
                        inner.cookies.insert(cookie, question);
                        sends.push((to, bytes, question == 0));
                    }
                    Ok(_) => {}
                    Err(why) => {
                        count(&self.table().counts.failed);
                        inner.failed.push((question, Outcome::failure(&why)));
                        wake = true;
                    }
                }
            }
            let due = inner
                .client
                .next_deadline()
                .map_or(u64::MAX, |d| self.nanos(d));
            wake |= due < self.planned.load(Ordering::Acquire);
        }
        for (to, bytes, quiet) in sends {
            // A relay that cannot be reached fails by its timer.
            let from = if quiet {
                let sent = self.quiet_sent.fetch_add(1, Ordering::AcqRel) + 1;
                wake |= sent.saturating_sub(self.quiet_seen.load(Ordering::Acquire)) >= QUIET_BATCH;
                &self.quiet
            } else {
                via.filter(|v| v.ipv4 == to.is_ipv4())
                    .map_or(&self.sock, |v| v.sock)
            };
            let _ = from.send_to(&bytes, to);
        }
        if wake {
            let _ = self.waker.wake();
        }
    }

    fn answer(&self, data: &[u8], src: SocketAddr) -> Option<Vec<(Parked, Outcome)>> {
        if !self.relays.contains(&src) {
            return None;
        }
        let mut events = Vec::new();
        self.datagram(&mut self.lock(), src, data, &mut events);
        Some(self.released(self.settle(events)))
    }
}

/// Reads at most [`READ_BATCH`] datagrams with `recv`, handing each to
/// `each`; whether the batch filled (more may be queued).
fn drain(
    mut recv: impl FnMut(&mut [u8]) -> io::Result<(usize, SocketAddr)>,
    buf: &mut [u8],
    mut each: impl FnMut(&[u8], SocketAddr),
) -> bool {
    for _ in 0..READ_BATCH {
        match recv(buf) {
            Ok((n, from)) => each(&buf[..n], from),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            // An ICMP error for a relay nobody listens on: its command
            // fails by its timer.
            Err(_) => {}
        }
    }
    true
}

fn count(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Starts the media thread for the relays of `settings`; `core` and
/// `sender` hand the parked messages in again and send what comes of
/// them. Returns the pump the senders call, and the thread.
pub fn start(
    settings: Settings,
    core: Core,
    sender: Sender,
    stop: Arc<AtomicBool>,
) -> io::Result<(Arc<Pump>, JoinHandle<()>)> {
    let bind: SocketAddr = if settings.relays.iter().all(|r| r.addr.is_ipv4()) {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    let std_sock = StdSocket::bind(bind)?;
    std_sock.set_nonblocking(true)?;
    let quiet = StdSocket::bind(bind)?;
    quiet.set_nonblocking(true)?;
    let mut sock = UdpSocket::from_std(std_sock.try_clone()?);
    let poll = Poll::new()?;
    poll.registry()
        .register(&mut sock, SOCKET, Interest::READABLE)?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let mut salt = [0u8; 8];
    getrandom::fill(&mut salt).map_err(|e| io::Error::other(e.to_string()))?;
    let origin = Instant::now();
    let relays = settings.relays.iter().map(|r| r.addr).collect();
    let pump = Arc::new(Pump {
        shared: core.shared().clone(),
        inner: Mutex::new(Inner {
            client: Client::new(settings, origin, u64::from_le_bytes(salt)),
            cookies: HashMap::new(),
            failed: Vec::new(),
        }),
        sock: std_sock,
        quiet,
        quiet_sent: AtomicU64::new(0),
        quiet_seen: AtomicU64::new(0),
        waker,
        origin,
        planned: AtomicU64::new(0),
        relays,
    });
    let worker = Worker {
        pump: pump.clone(),
        sock,
        poll,
        core,
        sender,
        out: Vec::new(),
        events: Vec::new(),
    };
    let thread = std::thread::Builder::new()
        .name("media".into())
        .spawn(move || worker.run(&stop))?;
    Ok((pump, thread))
}

/// The media thread: answers, timers, hand-ins.
struct Worker {
    pump: Arc<Pump>,
    sock: UdpSocket,
    poll: Poll,
    core: Core,
    sender: Sender,
    out: Vec<u8>,
    events: Vec<Event>,
}

impl Worker {
    fn run(mut self, stop: &AtomicBool) {
        let mut events = Events::with_capacity(16);
        let mut buf = vec![0u8; MAX_ANSWER + 1];
        let mut next_sweep = Instant::now() + SWEEP_EVERY;
        let mut more = false;
        self.pump.publish_relays();
        while !stop.load(Ordering::Relaxed) {
            // Commands asked before any pump ran (a wake asked before the
            // thread started is not lost), and those that failed to start.
            self.pump.pump(None);
            let failed = std::mem::take(&mut self.pump.lock().failed);
            let released = self.pump.released(failed);
            self.hand_in_all(released);
            let next = {
                let inner = self.pump.lock();
                let mut next = inner
                    .client
                    .next_deadline()
                    .map_or(next_sweep, |d| d.min(next_sweep));
                if inner.client.pending() > 0 || self.pump.quiet_unread() {
                    next = next.min(Instant::now() + QUIET_READ);
                }
                self.pump
                    .planned
                    .store(self.pump.nanos(next), Ordering::Release);
                next
            };
            // A socket left with answers queued is read again at once:
            // its readiness was reported and will not be again.
            let wait = if more {
                Duration::ZERO
            } else {
                next.saturating_duration_since(Instant::now())
            };
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    crate::io::log::connection_trouble(&format!("media relays: {e}"));
                    std::thread::sleep(Duration::from_millis(100));
                }
                continue;
            }
            // Awake: pumps must wake it again for anything due sooner.
            self.pump.planned.store(0, Ordering::Release);
            more = self.read(&mut buf);
            let now = Instant::now();
            {
                let mut inner = self.pump.lock();
                if inner.client.next_deadline().is_some_and(|d| d <= now) {
                    inner.client.on_timer(now, &mut self.events);
                }
            }
            self.carry_out();
            if now >= next_sweep {
                let ended = self.table().sweep(now);
                if ended > 0 {
                    tracing::info!(target: "sipsec::media", ended, "calls left behind deleted at the relay");
                }
                next_sweep = now + SWEEP_EVERY;
            }
        }
        // Stopping: what still waits goes on as if no relay answered.
        let parked = self.table().close();
        for p in parked {
            self.hand_in(&p, Outcome::Failed("the server is stopping".into()));
        }
    }

    fn table(&self) -> &MediaTable {
        self.pump.table()
    }

    /// Reads the answers that arrived, on both sockets, at most
    /// [`READ_BATCH`] from each; whether one had more queued.
    fn read(&mut self, buf: &mut [u8]) -> bool {
        let sent = self.pump.quiet_sent.load(Ordering::Acquire);
        self.pump.quiet_seen.store(sent, Ordering::Release);
        let (pump, events) = (&self.pump, &mut self.events);
        let mut answer = |data: &[u8], from| pump.datagram(&mut pump.lock(), from, data, events);
        let quiet = drain(|b| pump.quiet.recv_from(b), buf, &mut answer);
        let polled = drain(|b| self.sock.recv_from(b), buf, &mut answer);
        quiet || polled
    }

    /// Does what the client asked: sends, answers, relay changes.
    fn carry_out(&mut self) {
        let events = std::mem::take(&mut self.events);
        let released = self.pump.released(self.pump.settle(events));
        self.hand_in_all(released);
    }

    /// Each message that waited goes on with its outcome.
    fn hand_in_all(&mut self, released: Vec<(Parked, Outcome)>) {
        for (p, outcome) in released {
            self.hand_in(&p, outcome);
        }
    }

    fn hand_in(&mut self, p: &Parked, outcome: Outcome) {
        let (core, sender) = (&mut self.core, &self.sender);
        crate::io::drive::hand_in_and_send(core, sender, p, Some(outcome), &mut self.out);
    }
}

impl Drop for Worker {
    /// Should the thread die (a bug), nothing waits for it any more.
    fn drop(&mut self) {
        if std::thread::panicking() {
            drop(self.table().close());
            tracing::error!(target: "sipsec::media", "the media thread stopped on a bug: calls are no longer relayed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flood queued at a socket is read [`READ_BATCH`] datagrams a turn,
    /// each turn saying whether more waits, nothing lost between turns.
    #[test]
    fn a_flood_is_read_a_batch_per_turn() {
        let sock = StdSocket::bind("127.0.0.1:0").unwrap();
        sock.set_nonblocking(true).unwrap();
        let to = sock.local_addr().unwrap();
        let flood = StdSocket::bind("127.0.0.1:0").unwrap();
        let total = READ_BATCH * 2 + 5;
        for i in 0..total {
            flood.send_to(&(i as u16).to_be_bytes(), to).unwrap();
        }
        let mut buf = [0u8; 16];
        let mut seen = Vec::new();
        let mut turns = Vec::new();
        loop {
            let before = seen.len();
            let more = drain(
                |b| sock.recv_from(b),
                &mut buf,
                |d, from| {
                    assert_eq!(from, flood.local_addr().unwrap());
                    seen.push(u16::from_be_bytes([d[0], d[1]]) as usize);
                },
            );
            turns.push((seen.len() - before, more));
            if !more {
                break;
            }
        }
        assert_eq!(turns, [(READ_BATCH, true), (READ_BATCH, true), (5, false)]);
        assert_eq!(seen, (0..total).collect::<Vec<_>>());
    }
}
