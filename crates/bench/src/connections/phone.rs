//! The phones of one process: shares of connections, each driven by an
//! event loop (mio) through opening, registering, holding and refreshing.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{source, Stream};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use serde::{Deserialize, Serialize};
use sip_core::websocket as ws;

/// Runs `phase` on every share, each on its own thread, and adds up
/// their tallies.
pub(super) fn every_share(
    shares: &mut [Share],
    phase: impl Fn(&mut Share) -> Tally + Sync,
) -> Tally {
    let tallies = std::thread::scope(|s| {
        let phase = &phase;
        let handles: Vec<_> = shares
            .iter_mut()
            .map(|sh| s.spawn(move || phase(sh)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect::<Vec<Tally>>()
    });
    let mut all = Tally::default();
    for t in tallies {
        all.add(t);
    }
    all
}

/// What every phone thread shares.
pub(super) struct Ctx {
    /// The servers; phone `id` connects to `servers[id % len]`.
    pub(super) servers: Vec<SocketAddr>,
    pub(super) transport: Stream,
    pub(super) tls: Option<Arc<rustls::ClientConfig>>,
    pub(super) sources: usize,
    pub(super) timeout: Duration,
    pub(super) run: u32,
    /// Spin instead of sleeping in the event loop (pinned runs: the
    /// phones have their own core, and the server is then not charged
    /// for waking them).
    pub(super) busy_poll: bool,
}

impl Ctx {
    /// How long an event loop may sleep when it could sleep `wait`.
    pub(super) fn wait(&self, wait: Duration) -> Duration {
        if self.busy_poll {
            Duration::ZERO
        } else {
            wait
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Tally {
    pub(super) ok: usize,
    /// Of `ok`, those whose TLS handshake resumed a session.
    #[serde(default)]
    pub(super) resumed: usize,
    pub(super) failures: BTreeMap<String, u64>,
}

impl Tally {
    pub(super) fn fail(&mut self, why: &str) {
        *self.failures.entry(why.to_owned()).or_default() += 1;
    }

    pub(super) fn add(&mut self, other: Tally) {
        self.ok += other.ok;
        self.resumed += other.resumed;
        for (k, v) in other.failures {
            *self.failures.entry(k).or_default() += v;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// TCP connect under way.
    Connecting,
    /// TLS handshake under way.
    Handshaking,
    /// WebSocket upgrade sent; waiting for 101.
    Upgrading,
    /// A REGISTER sent; waiting for its final answer.
    Waiting,
    /// Registered and idle.
    Held,
    /// Closed or failed.
    Dead,
}

pub(super) struct Phone {
    pub(super) id: usize,
    /// The server it connects to.
    pub(super) server: SocketAddr,
    pub(super) sock: TcpStream,
    pub(super) tls: Option<rustls::ClientConnection>,
    pub(super) state: State,
    pub(super) out: Vec<u8>,
    pub(super) inbuf: Vec<u8>,
    pub(super) cseq: u32,
    pub(super) local: SocketAddr,
    pub(super) websocket: bool,
}

/// One thread's phones and poll.
pub(super) struct Share {
    pub(super) ids: Vec<usize>,
    pub(super) phones: Vec<Option<Phone>>,
    pub(super) poll: Poll,
}

/// Outcome of driving a phone once.
pub(super) enum Step {
    /// Still in the same phase.
    Busy,
    /// Reached Held with a 200.
    Done,
    /// Failed, with a cause.
    Failed(&'static str),
}

impl Share {
    pub(super) fn new(ids: Vec<usize>) -> io::Result<Share> {
        Ok(Share {
            phones: ids.iter().map(|_| None).collect(),
            ids,
            poll: Poll::new()?,
        })
    }

    pub(super) fn connect(&self, ctx: &Ctx, slot: usize) -> io::Result<Phone> {
        let id = self.ids[slot];
        let server = ctx.servers[id % ctx.servers.len()];
        let src = SocketAddr::new(source(id % ctx.sources), 0);
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        sock.set_nonblocking(true)?;
        // Phones send small messages and wait for the answer: no Nagle.
        sock.set_nodelay(true)?;
        // The port is chosen at connect, per destination: earlier runs'
        // TIME_WAIT sockets on the same source do not exhaust it.
        sip_udp::bind_address_no_port(&sock)?;
        sock.bind(&src.into())?;
        match sock.connect(&server.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        let local = sock
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("no local address"))?;
        let mut sock = TcpStream::from_std(sock.into());
        self.poll.registry().register(
            &mut sock,
            Token(slot),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        let tls = match &ctx.tls {
            Some(config) => Some(
                rustls::ClientConnection::new(
                    config.clone(),
                    rustls::pki_types::ServerName::IpAddress(server.ip().into()),
                )
                .map_err(io::Error::other)?,
            ),
            None => None,
        };
        Ok(Phone {
            id,
            server,
            sock,
            tls,
            state: State::Connecting,
            out: Vec::new(),
            inbuf: Vec::new(),
            cseq: 0,
            local,
            websocket: ctx.transport.websocket(),
        })
    }

    /// Opens and registers every phone of this share.
    pub(super) fn open(&mut self, ctx: &Ctx, in_flight: usize) -> Tally {
        let mut tally = Tally::default();
        let mut next = 0;
        let mut busy = 0;
        let mut events = Events::with_capacity(1024);
        let mut last_progress = Instant::now();
        while next < self.ids.len() || busy > 0 {
            while busy < in_flight && next < self.ids.len() {
                match self.connect(ctx, next) {
                    Ok(p) => {
                        self.phones[next] = Some(p);
                        busy += 1;
                    }
                    Err(e) => tally.fail(&format!("connect: {}", e.kind())),
                }
                next += 1;
            }
            if busy == 0 {
                continue;
            }
            if self
                .poll
                .poll(&mut events, Some(ctx.wait(Duration::from_millis(100))))
                .is_err()
            {
                continue;
            }
            for ev in events.iter() {
                let slot = ev.token().0;
                let Some(p) = self.phones[slot].as_mut() else {
                    continue;
                };
                let before = p.state;
                if matches!(before, State::Held | State::Dead) {
                    continue;
                }
                match p.drive(ctx) {
                    Step::Busy => {}
                    Step::Done => {
                        busy -= 1;
                        tally.ok += 1;
                        tally.resumed += usize::from(p.resumed());
                        last_progress = Instant::now();
                    }
                    Step::Failed(why) => {
                        busy -= 1;
                        tally.fail(why);
                        self.bury(slot);
                    }
                }
            }
            if last_progress.elapsed() > ctx.timeout {
                // Nothing finished for a whole timeout: fail what is left.
                for slot in 0..next {
                    if let Some(p) = &self.phones[slot] {
                        if !matches!(p.state, State::Held | State::Dead) {
                            tally.fail(match p.state {
                                State::Connecting => "connect timeout",
                                State::Handshaking => "handshake timeout",
                                State::Upgrading => "upgrade timeout",
                                _ => "register timeout",
                            });
                            busy -= 1;
                            self.bury(slot);
                        }
                    }
                }
                last_progress = Instant::now();
            }
        }
        tally
    }

    /// Refreshes every held phone once, `rate` per second.
    pub(super) fn refresh(&mut self, ctx: &Ctx, rate: f64) -> Tally {
        let mut tally = Tally::default();
        let start = Instant::now();
        let live: Vec<usize> = (0..self.phones.len())
            .filter(|s| {
                self.phones[*s]
                    .as_ref()
                    .is_some_and(|p| p.state == State::Held)
            })
            .collect();
        let mut next = 0;
        let mut busy = 0;
        let mut events = Events::with_capacity(1024);
        let mut last_send = Instant::now();
        while next < live.len() || busy > 0 {
            let now = Instant::now();
            while next < live.len() && start + Duration::from_secs_f64(next as f64 / rate) <= now {
                let slot = live[next];
                next += 1;
                if let Some(p) = self.phones[slot].as_mut() {
                    match p.register(ctx) {
                        Ok(()) => busy += 1,
                        Err(_) => {
                            tally.fail("closed by the server");
                            self.bury(slot);
                        }
                    }
                }
                last_send = now;
            }
            let wait = if next < live.len() {
                (start + Duration::from_secs_f64(next as f64 / rate))
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(100))
            } else {
                Duration::from_millis(100)
            };
            if self.poll.poll(&mut events, Some(ctx.wait(wait))).is_err() {
                continue;
            }
            for ev in events.iter() {
                let slot = ev.token().0;
                let Some(p) = self.phones[slot].as_mut() else {
                    continue;
                };
                if p.state != State::Waiting {
                    // A held phone hearing something: the server closing it.
                    if p.state == State::Held && ev.is_read_closed() {
                        p.state = State::Dead;
                    }
                    continue;
                }
                match p.drive(ctx) {
                    Step::Busy => {}
                    Step::Done => {
                        busy -= 1;
                        tally.ok += 1;
                    }
                    Step::Failed(why) => {
                        busy -= 1;
                        tally.fail(why);
                        self.bury(slot);
                    }
                }
            }
            if next == live.len() && busy > 0 && last_send.elapsed() > ctx.timeout {
                for &slot in &live {
                    if self.phones[slot]
                        .as_ref()
                        .is_some_and(|p| p.state == State::Waiting)
                    {
                        tally.fail("refresh timeout");
                        busy -= 1;
                        self.bury(slot);
                    }
                }
            }
        }
        tally
    }

    pub(super) fn bury(&mut self, slot: usize) {
        if let Some(mut p) = self.phones[slot].take() {
            let _ = self.poll.registry().deregister(&mut p.sock);
        }
    }
}

impl Phone {
    /// Whether its TLS handshake resumed a session.
    pub(super) fn resumed(&self) -> bool {
        self.tls
            .as_ref()
            .and_then(|t| t.handshake_kind())
            .is_some_and(|k| k == rustls::HandshakeKind::Resumed)
    }

    /// Advances the phone after a readiness event.
    pub(super) fn drive(&mut self, ctx: &Ctx) -> Step {
        if self.state == State::Connecting {
            match self.sock.take_error() {
                Ok(None) => {}
                _ => return Step::Failed("connect refused"),
            }
            if self.sock.peer_addr().is_err() {
                return Step::Busy;
            }
            if self.tls.is_some() {
                self.state = State::Handshaking;
            } else if self.begin(ctx).is_err() {
                return Step::Failed("closed by the server");
            }
        }
        if let Err(why) = self.pump() {
            return Step::Failed(why);
        }
        if self.state == State::Handshaking {
            let done = self.tls.as_ref().is_some_and(|t| !t.is_handshaking());
            if !done {
                return Step::Busy;
            }
            if self.begin(ctx).is_err() {
                return Step::Failed("closed by the server");
            }
            if let Err(why) = self.pump() {
                return Step::Failed(why);
            }
        }
        if self.state == State::Upgrading {
            match ws::upgrade_answer(&self.inbuf) {
                ws::Answer::Incomplete => return Step::Busy,
                ws::Answer::Refused(_) => return Step::Failed("upgrade refused"),
                ws::Answer::Upgraded { used } => {
                    self.inbuf.drain(..used);
                }
            }
            if self.register(ctx).is_err() {
                return Step::Failed("closed by the server");
            }
            if let Err(why) = self.pump() {
                return Step::Failed(why);
            }
        }
        if self.state == State::Waiting {
            return self.answer();
        }
        Step::Busy
    }

    /// Moves bytes both ways until the socket would block.
    pub(super) fn pump(&mut self) -> Result<(), &'static str> {
        let mut buf = [0u8; 16 << 10];
        match &mut self.tls {
            Some(tls) => loop {
                while tls.wants_write() {
                    match tls.write_tls(&mut self.sock) {
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => return Err("write error"),
                    }
                }
                match tls.read_tls(&mut self.sock) {
                    Ok(0) => return Err("closed by the server"),
                    Ok(_) => {
                        if tls.process_new_packets().is_err() {
                            return Err("TLS error");
                        }
                        loop {
                            match tls.reader().read(&mut buf) {
                                Ok(0) => return Err("closed by the server"),
                                Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                                Err(_) => break,
                            }
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if !tls.wants_write() {
                            return Ok(());
                        }
                    }
                    Err(_) => return Err("read error"),
                }
            },
            None => {
                while !self.out.is_empty() {
                    match self.sock.write(&self.out) {
                        Ok(n) => {
                            self.out.drain(..n);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => return Err("write error"),
                    }
                }
                loop {
                    match self.sock.read(&mut buf) {
                        Ok(0) => return Err("closed by the server"),
                        Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                        Err(_) => return Err("read error"),
                    }
                }
            }
        }
    }

    /// The connection is open (and secured): upgrade it to WebSocket, or
    /// register at once.
    pub(super) fn begin(&mut self, ctx: &Ctx) -> io::Result<()> {
        if !ctx.transport.websocket() {
            return self.register(ctx);
        }
        let upgrade = ws::upgrade_request(
            &self.server.to_string(),
            "/",
            "dGhlIHNhbXBsZSBub25jZQ==",
            None,
        );
        self.send(upgrade.as_bytes())?;
        self.state = State::Upgrading;
        self.pump().map_err(io::Error::other)
    }

    pub(super) fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.tls {
            Some(tls) => tls.writer().write_all(bytes),
            None => {
                self.out.extend_from_slice(bytes);
                Ok(())
            }
        }
    }

    /// Queues a REGISTER (the first or a refresh) and sends what it can.
    pub(super) fn register(&mut self, ctx: &Ctx) -> io::Result<()> {
        self.cseq += 1;
        self.inbuf.clear();
        let t = ctx.transport;
        let msg = format!(
            "REGISTER sip:{srv} SIP/2.0\r\n\
             Via: SIP/2.0/{via} {local};branch=z9hG4bK-c{run}-{id}-{cseq};rport\r\n\
             Max-Forwards: 70\r\n\
             From: <sip:c{id}@{srv}>;tag=c{id}\r\n\
             To: <sip:c{id}@{srv}>\r\n\
             Call-ID: conn-{run}-{id}\r\n\
             CSeq: {cseq} REGISTER\r\n\
             Contact: <sip:c{id}@{local};transport={param}>\r\n\
             Expires: 3600\r\n\
             Content-Length: 0\r\n\r\n",
            srv = self.server,
            via = t.via(),
            local = self.local,
            run = ctx.run,
            id = self.id,
            cseq = self.cseq,
            param = t.param(),
        );
        if t.websocket() {
            let mask = (self.id as u32 ^ self.cseq).to_be_bytes();
            self.send(&ws::client_frame(ws::TEXT, msg.as_bytes(), mask))?;
        } else {
            self.send(msg.as_bytes())?;
        }
        self.state = State::Waiting;
        self.pump().map_err(io::Error::other)
    }

    /// Reads the final answer to the REGISTER out of the input, if whole.
    pub(super) fn answer(&mut self) -> Step {
        if self.websocket {
            // Server frames: unmasked, one SIP message each.
            loop {
                let (opcode, code, used) = match ws::server_frame(&self.inbuf, 1 << 16) {
                    Ok(None) => return Step::Busy,
                    Err(_) => return Step::Failed("bad WebSocket frame"),
                    Ok(Some(f)) => (
                        f.opcode,
                        std::str::from_utf8(f.payload)
                            .ok()
                            .and_then(|m| m.split_whitespace().nth(1))
                            .and_then(|c| c.parse::<u16>().ok())
                            .unwrap_or(0),
                        f.len,
                    ),
                };
                self.inbuf.drain(..used);
                match (opcode, code) {
                    (ws::opcode::CLOSE, _) => return Step::Failed("closed by the server"),
                    (ws::opcode::TEXT | ws::opcode::BINARY, 100..=199)
                    | (ws::opcode::PING | ws::opcode::PONG, _) => continue,
                    (ws::opcode::TEXT | ws::opcode::BINARY, 200..=299) => {
                        self.state = State::Held;
                        self.inbuf = Vec::new();
                        self.out = Vec::new();
                        return Step::Done;
                    }
                    _ => return Step::Failed("register refused"),
                }
            }
        }
        loop {
            let Some(end) = self.inbuf.windows(4).position(|w| w == b"\r\n\r\n") else {
                return Step::Busy;
            };
            let head = String::from_utf8_lossy(&self.inbuf[..end]).into_owned();
            let body = head
                .lines()
                .find_map(|l| {
                    let (n, v) = l.split_once(':')?;
                    (n.trim().eq_ignore_ascii_case("content-length")
                        || n.trim().eq_ignore_ascii_case("l"))
                    .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if self.inbuf.len() < end + 4 + body {
                return Step::Busy;
            }
            self.inbuf.drain(..end + 4 + body);
            let code = head
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse::<u16>().ok())
                .unwrap_or(0);
            match code {
                100..=199 => continue,
                200..=299 => {
                    self.state = State::Held;
                    // The read buffer goes with the answer: held phones
                    // cost the generator as little as possible.
                    self.inbuf = Vec::new();
                    self.out = Vec::new();
                    return Step::Done;
                }
                _ => return Step::Failed("register refused"),
            }
        }
    }
}
