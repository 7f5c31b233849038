//! The media thread: asks the media relays (rtpengine, NG protocol over
//! UDP) what the cores queued in their [`MediaTable`], and hands each
//! message that waited on an answer in again with it. It owns the NG
//! client (`proto::ng::Client`: retransmissions, failover, pings), one UDP
//! socket, and the clock; it sleeps until a core wakes it, an answer
//! arrives or the client's next deadline.
//!
//! [`MediaTable`]: crate::proto::media::MediaTable

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::io::send::Sender;
use crate::proto::core::Core;
use crate::proto::media::{MediaTable, Outcome};
use crate::proto::ng::{Client, Command, Event, Reply, Settings, MAX_ANSWER};

const WAKER: Token = Token(0);
const SOCKET: Token = Token(1);
/// How often calls left behind are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// Starts the media thread for the relays of `settings`; `core` and
/// `sender` hand the parked messages in again and send what comes of
/// them. Returns what wakes it.
pub fn start(
    settings: Settings,
    core: Core,
    sender: Sender,
    stop: Arc<AtomicBool>,
) -> io::Result<(Arc<Waker>, JoinHandle<()>)> {
    let bind: SocketAddr = if settings.relays.iter().all(|r| r.addr.is_ipv4()) {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    let mut sock = UdpSocket::bind(bind)?;
    let poll = Poll::new()?;
    poll.registry()
        .register(&mut sock, SOCKET, Interest::READABLE)?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let mut salt = [0u8; 8];
    getrandom::fill(&mut salt).map_err(|e| io::Error::other(e.to_string()))?;
    let client = Client::new(settings, Instant::now(), u64::from_le_bytes(salt));
    let worker = Worker {
        sock,
        poll,
        client,
        cookies: HashMap::new(),
        core,
        sender,
        out: Vec::new(),
        events: Vec::new(),
    };
    let thread = std::thread::Builder::new()
        .name("media".into())
        .spawn(move || worker.run(&stop))?;
    Ok((waker, thread))
}

struct Worker {
    sock: UdpSocket,
    poll: Poll,
    client: Client,
    /// The question each command in flight answers (0: none waits).
    cookies: HashMap<String, u64>,
    core: Core,
    sender: Sender,
    out: Vec<u8>,
    events: Vec<Event>,
}

impl Worker {
    fn table(&self) -> &MediaTable {
        self.core
            .shared()
            .media
            .as_ref()
            .expect("the media thread runs only with a media table")
    }

    fn run(mut self, stop: &AtomicBool) {
        let mut events = Events::with_capacity(16);
        let mut buf = vec![0u8; MAX_ANSWER + 1];
        let mut next_sweep = Instant::now() + SWEEP_EVERY;
        self.publish_relays();
        while !stop.load(Ordering::Relaxed) {
            // The commands asked since the last look, first: one asked
            // before the thread could be woken is not left waiting.
            for (question, command) in self.table().take_asked() {
                self.begin(question, &command);
            }
            self.carry_out();
            let now = Instant::now();
            let next = self
                .client
                .next_deadline()
                .map_or(next_sweep, |d| d.min(next_sweep));
            if let Err(e) = self
                .poll
                .poll(&mut events, Some(next.saturating_duration_since(now)))
            {
                if e.kind() != io::ErrorKind::Interrupted {
                    crate::io::log::connection_trouble(&format!("media relays: {e}"));
                    std::thread::sleep(Duration::from_millis(100));
                }
                continue;
            }
            self.read(&mut buf);
            let now = Instant::now();
            if self.client.next_deadline().is_some_and(|d| d <= now) {
                self.client.on_timer(now, &mut self.events);
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

    /// Reads every answer that arrived.
    fn read(&mut self, buf: &mut [u8]) {
        loop {
            match self.sock.recv_from(buf) {
                Ok((n, from)) => self.client.on_datagram(from, &buf[..n], &mut self.events),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                // An ICMP error for a relay nobody listens on: its
                // command fails by its timer.
                Err(_) => {}
            }
        }
    }

    fn begin(&mut self, question: u64, command: &Command) {
        match self.client.start(command, Instant::now()) {
            Ok((cookie, send)) => {
                self.cookies.insert(cookie, question);
                self.events.push(send);
            }
            Err(why) => {
                self.count(false);
                self.finish(question, Outcome::failure(&why));
            }
        }
    }

    /// Does what the client asked: sends, answers, relay changes.
    fn carry_out(&mut self) {
        while !self.events.is_empty() {
            for e in std::mem::take(&mut self.events) {
                match e {
                    Event::Send { to, bytes } => {
                        // A relay that cannot be reached fails by its timer.
                        let _ = self.sock.send_to(&bytes, to);
                    }
                    Event::Answered { cookie, reply } => {
                        let question = self.cookies.remove(&cookie).unwrap_or(0);
                        let outcome = match reply {
                            Reply::Ok { sdp: Some(sdp) } => Outcome::Sdp(sdp),
                            Reply::Ok { sdp: None } | Reply::Pong => {
                                Outcome::Failed("the media relay answered without SDP".into())
                            }
                            Reply::Error(e) => {
                                Outcome::Failed(format!("the media relay refused: {e}"))
                            }
                        };
                        self.count(question == 0 || matches!(outcome, Outcome::Sdp(_)));
                        self.finish(question, outcome);
                    }
                    Event::Failed { cookie, why } => {
                        let question = self.cookies.remove(&cookie).unwrap_or(0);
                        self.count(false);
                        self.finish(question, Outcome::failure(&why));
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
        }
    }

    fn count(&self, ok: bool) {
        let c = &self.table().counts;
        if ok { &c.ok } else { &c.failed }.fetch_add(1, Ordering::Relaxed);
    }

    fn publish_relays(&self) {
        self.table().set_relays(self.client.relays().collect());
    }

    /// `question` is answered: the message that waited on it goes on.
    fn finish(&mut self, question: u64, outcome: Outcome) {
        if question == 0 {
            return;
        }
        for p in self.table().answered(question) {
            self.hand_in(&p, outcome.clone());
        }
    }

    fn hand_in(&mut self, p: &crate::proto::parked::Parked, outcome: Outcome) {
        let now = crate::io::clock::now();
        let reply = crate::io::drive::handle_relayed(
            &mut self.core,
            &p.message,
            p.src,
            p.arrived,
            outcome,
            now,
            &mut self.out,
        );
        self.sender.send_all(self.core.extra());
        self.sender.reply(reply, &self.out, self.core.sent_key());
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
