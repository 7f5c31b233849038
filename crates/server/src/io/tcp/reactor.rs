//! A reactor thread: its poll, accepts, reads and writes, deadlines and
//! closes; each message goes to its core.

use std::collections::HashMap;
use std::io::{self, Read};

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};

use crate::io::drive::Deferred;
use crate::proto::core::{Core, Reply, Transport};
use crate::proto::metrics::{CloseReason, Spread};
use sip_core::websocket::server::{self as websocket};

use super::shared::*;
use super::spread::Route;

impl Reactor {
    pub(super) fn new(
        hub: Arc<TcpHub>,
        index: usize,
        (poll, storage): (Poll, crate::io::drive::Storage),
        listeners: Vec<(mio::net::TcpListener, Token, bool)>,
    ) -> Self {
        let core = Core::new(hub.shared.clone());
        let sender = hub.sender();
        let reactors = hub.reactors.get().map_or(1, Vec::len).max(1);
        let bucket = (hub.limits.accept_rate > 0).then(|| {
            Bucket::new(
                f64::from(hub.limits.accept_rate) / reactors as f64,
                Instant::now(),
            )
        });
        Self {
            hub,
            index,
            poll,
            listeners,
            locals: TokenMap::default(),
            core,
            storage,
            sender,
            out: Vec::with_capacity(8192),
            scratch: vec![0; SCRATCH],
            again: Vec::new(),
            held: Vec::new(),
            bucket,
            sources: HashMap::new(),
            deferred: Deferred::default(),
            handoffs: Vec::new(),
            watch_until: None,
        }
    }

    pub(super) fn run(mut self) {
        super::outbox::set_reactor(self.index);
        let mut events = Events::with_capacity(1024);
        let mut next_sweep = Instant::now() + SWEEP;
        while !self.hub.stop.load(Ordering::Relaxed) {
            if !self.listeners.is_empty() && self.hub.shared.draining.load(Ordering::Relaxed) {
                // Draining: no new connections. Closing the listeners
                // makes the kernel refuse them (and reset those queued).
                for (l, _, _) in &mut self.listeners {
                    let _ = self.poll.registry().deregister(l);
                }
                self.listeners.clear();
            }
            let now = Instant::now();
            let spent = self.bucket.as_ref().and_then(|b| b.waiting(now));
            let accepting = spent.is_none() && self.listeners.iter().any(|l| l.2);
            // Nothing else is due before the sweep: other threads' orders,
            // the stop and the drain wake the reactor.
            let until = spent.map_or(next_sweep, |s| s.min(next_sweep));
            let ready = accepting || !self.again.is_empty();
            let watching = self.watch_until.is_some_and(|u| now < u);
            let wait = super::spread::turn_wait(
                ready,
                !self.held.is_empty() || watching,
                until.saturating_duration_since(now),
            );
            // Waiting, it is woken for orders (unless it looks for them
            // itself); an order that came as it parked is taken at once.
            let link = self
                .hub
                .link(self.index)
                .filter(|_| !wait.is_zero() && !watching);
            let wait = match link {
                Some(l) if l.park() => Duration::ZERO,
                _ => wait,
            };
            let polled = self.poll.poll(&mut events, Some(wait));
            if let Some(l) = link {
                l.unpark();
            }
            if let Err(e) = polled {
                if e.kind() != io::ErrorKind::Interrupted {
                    crate::io::log::connection_trouble(&format!("connection reactor: {e}"));
                    std::thread::sleep(TURN);
                }
                continue;
            }
            for ev in events.iter() {
                match ev.token() {
                    WAKER => self.take_orders(),
                    t @ (LISTEN_TCP | LISTEN_TLS | LISTEN_WS | LISTEN_WSS) => {
                        for l in &mut self.listeners {
                            if l.1 == t {
                                l.2 = true;
                            }
                        }
                    }
                    t => {
                        if ev.is_writable() {
                            self.writable(t);
                        }
                        if ev.is_error() {
                            self.readable(t, Cause::Failed);
                        } else if ev.is_read_closed() {
                            self.readable(t, Cause::Listed);
                        } else if ev.is_readable() {
                            self.readable(t, Cause::Readable);
                        }
                    }
                }
            }
            // Orders that came while this reactor was busy (no wake-up
            // was sent for them).
            self.take_orders();
            self.read_listed();
            self.send_handoffs();
            self.commit();
            // What an operator's removal released (see `proto/busy.rs`).
            self.answer_woken();
            self.accept();
            let now = Instant::now();
            if now >= next_sweep {
                self.sweep(now);
                next_sweep = now + SWEEP;
            }
        }
        self.commit();
        self.take_orders();
        let tokens: Vec<Token> = self.locals.keys().copied().collect();
        for t in tokens {
            self.close(t, CloseReason::Shutdown);
        }
    }

    pub(super) fn take_orders(&mut self) {
        let Some(link) = self.hub.link(self.index) else {
            return;
        };
        let orders = std::mem::take(&mut *lock(&link.orders));
        // The connections whose handed messages were decided, each with
        // how many in a row: counted back once a run, not per message.
        let mut decided: Vec<(Arc<Conn>, u32)> = Vec::new();
        for o in orders {
            match o {
                Order::Decide(conn, bytes) => {
                    self.decide(&conn, &bytes);
                    match decided.last_mut() {
                        Some((last, n)) if Arc::ptr_eq(last, &conn) => *n += 1,
                        _ => decided.push((conn, 1)),
                    }
                }
                Order::Write(conn) => {
                    let _ = self.hub.write_outbox(&conn, None);
                }
                Order::Close(t) => {
                    let reason = self
                        .locals
                        .get(&t)
                        .and_then(|l| *lock(&l.conn.closing))
                        .unwrap_or(CloseReason::Error);
                    self.close(t, reason);
                }
                Order::Adopt { conn, accepted } => {
                    let (registered, connecting) = {
                        let mut tx = lock(&conn.tx);
                        let r = self.poll.registry().register(
                            &mut tx.sock,
                            conn.token,
                            Interest::READABLE | Interest::WRITABLE,
                        );
                        (r, matches!(tx.phase, Phase::Connecting(_)))
                    };
                    let token = conn.token;
                    let mut local = Local::new(conn, connecting, self.hub.limits.keepalive_rate);
                    // Ours need not prove themselves with a first message;
                    // a peer's must, on whichever reactor.
                    local.spoke = !accepted;
                    self.locals.insert(token, local);
                    if registered.is_err() {
                        let why = if accepted {
                            CloseReason::Error
                        } else {
                            CloseReason::ConnectFailed
                        };
                        self.close(token, why);
                    }
                }
            }
        }
        if !decided.is_empty() {
            let taken: u32 = decided.iter().map(|(_, n)| n).sum();
            if let Some(link) = self.hub.link(self.index) {
                link.handed.fetch_sub(taken as usize, Ordering::Relaxed);
            }
            self.watch_until = Some(Instant::now() + WATCH);
            // Deferred answers (a store that waits) are sent first.
            self.commit();
            for (conn, n) in decided {
                self.handed_decided(&conn, n);
            }
        }
    }

    pub(super) fn writable(&mut self, t: Token) {
        let Some(l) = self.locals.get(&t) else {
            return;
        };
        let waits = l.busy.waits_for_peer;
        let conn = l.conn.clone();
        let mut tx = lock(&conn.tx);
        if let Phase::Connecting(_) = tx.phase {
            match tx.sock.take_error() {
                Ok(None) => {}
                _ => {
                    drop(tx);
                    self.close(t, CloseReason::ConnectFailed);
                    return;
                }
            }
            match tx.sock.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(_) => {
                    drop(tx);
                    self.close(t, CloseReason::ConnectFailed);
                    return;
                }
            }
            self.hub
                .shared
                .metrics
                .tcp_connects_pending
                .fetch_sub(1, Ordering::AcqRel);
            let Phase::Connecting(pending) = std::mem::replace(&mut tx.phase, Phase::Open) else {
                unreachable!("checked above");
            };
            if let Some(l) = self.locals.get_mut(&t) {
                l.connecting = false;
                drop(l.conn.take_extra(|e| &mut e.waiting));
            }
            for p in pending {
                if tx.queue(&p, usize::MAX).is_err() {
                    drop(tx);
                    self.close(t, CloseReason::Error);
                    return;
                }
            }
        }
        if let Err(e) = tx.flush() {
            drop(tx);
            self.close(t, failure(&e));
            return;
        }
        if waits && !tx.backlogged() {
            drop(tx);
            self.peer_caught_up(t);
        }
    }

    /// Reads what `t` has, within a budget, feeds TLS, and handles every
    /// complete message. [`Cause::Readable`]: the event said only
    /// "readable" (no hang-up), so a plain socket that gave less than
    /// asked for is empty now, and new bytes will raise a new edge: no
    /// second read just to hear "would block" (one system call less per
    /// request, as tokio does).
    pub(super) fn readable(&mut self, t: Token, cause: Cause) {
        let Some(l) = self.locals.get(&t) else {
            return;
        };
        let conn = l.conn.clone();
        // A failed socket is read for its error whatever it waits for.
        if l.busy.spread && cause != Cause::Failed && self.busy_waits(t, &conn, true) {
            return;
        }
        let short_read_drains = cause == Cause::Readable;
        let mut budget = READ_BUDGET;
        loop {
            if budget == 0 {
                // More than a turn's reading waits: behind, until a read
                // drains the socket.
                if let Some(l) = self.locals.get_mut(&t) {
                    l.busy.behind = true;
                }
                self.again.push(t);
                return;
            }
            let got = {
                let mut tx = lock(&conn.tx);
                if matches!(tx.phase, Phase::Connecting(_)) {
                    return;
                }
                read_some(&mut tx, &mut self.scratch)
            };
            match got {
                Got::Bytes(0, _) => {}
                Got::Bytes(n, drained) => {
                    budget = budget.saturating_sub(n);
                    if let (true, Some(l)) = (drained, self.locals.get_mut(&t)) {
                        l.busy.behind = false;
                    }
                    if !self.received(t, n) {
                        return;
                    }
                    if conn.spread.load(Ordering::Relaxed) {
                        // What the others decided so far goes with it.
                        let _ = self.hub.write_outbox(&conn, None);
                    }
                    if short_read_drains && drained {
                        return;
                    }
                    if self.locals.get(&t).is_some_and(|l| l.busy.spread)
                        && self.busy_waits(t, &conn, self.gathered_any())
                    {
                        // This read filled a reactor, or the peer's
                        // answers wait: the rest waits.
                        return;
                    }
                }
                Got::Nothing => {
                    self.after_tls_read(t);
                    return;
                }
                Got::Closed(plain) => {
                    if plain > 0 {
                        self.received(t, plain);
                    } else {
                        // A handshake that finished in the read that
                        // closed is still a session: counted and traced.
                        self.after_tls_read(t);
                    }
                    self.close(t, CloseReason::Peer);
                    return;
                }
                Got::NoGroup => {
                    self.refused_for_its_groups(t);
                    return;
                }
                Got::Failed(reason) => {
                    // A handshake that finished before a bad record in
                    // the same read is a session, not a failed handshake.
                    self.note_handshake(t, false);
                    if reason == CloseReason::Tls
                        && self.locals.get(&t).is_some_and(|l| l.handshaking)
                    {
                        self.hub
                            .shared
                            .metrics
                            .tls_handshake_failures
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    self.close(t, reason);
                    return;
                }
            }
        }
    }

    /// A TLS client offered no group the server takes: counted, logged
    /// (as a post-quantum refusal under `require_pq`), closed.
    fn refused_for_its_groups(&mut self, t: Token) {
        let m = &self.hub.shared.metrics;
        m.tls_handshake_failures.fetch_add(1, Ordering::Relaxed);
        let peer = self.locals.get(&t).map(|l| l.conn.peer);
        let pq = self
            .hub
            .shared
            .config
            .tls
            .as_ref()
            .is_some_and(|s| s.require_pq);
        if pq {
            m.tls_pq_refused.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(peer) = peer {
            crate::io::log::tls_no_group(peer, pq);
        }
        self.close(t, CloseReason::Tls);
    }

    /// Notes a finished handshake and sends what the session must answer.
    pub(super) fn after_tls_read(&mut self, t: Token) {
        if self.note_handshake(t, true) {
            self.close(t, CloseReason::Error);
        }
    }

    /// Notes a handshake that has just finished (counted, traced and kept
    /// among the recent sessions, once) and, with `flush`, sends what the
    /// session must answer, under one lock of the connection's sending
    /// side. `true`: the connection broke as it sent.
    fn note_handshake(&mut self, t: Token, flush: bool) -> bool {
        let Some(l) = self.locals.get_mut(&t) else {
            return false;
        };
        let mut tx = lock(&l.conn.tx);
        let Some(tls) = &tx.tls else {
            return false;
        };
        if l.handshaking && !tls.is_handshaking() {
            l.handshaking = false;
            let group = tls
                .negotiated_key_exchange_group()
                .map_or("other", |g| sip_tls::name_of(g.name()));
            let resumed = tls.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
            self.hub.shared.metrics.tls_handshake(group, resumed);
            let session = super::shared::TlsSession {
                peer: l.conn.peer.to_string(),
                version: tls
                    .protocol_version()
                    .map_or_else(String::new, |v| format!("{v:?}")),
                suite: tls
                    .negotiated_cipher_suite()
                    .map_or_else(String::new, |s| format!("{:?}", s.suite())),
                group: group.to_owned(),
                resumed,
            };
            if let Some(tap) = &self.hub.sinks.tap {
                let record = serde_json::json!({ "tls_session": &session }).to_string();
                tap.connection_event(l.conn.peer, l.conn.transport, &record);
            }
            let mut recent = lock(&self.hub.recent);
            if recent.len() >= super::shared::RECENT_SESSIONS {
                recent.pop_front();
            }
            recent.push_back(session);
        }
        flush && tx.flush().is_err()
    }

    /// `n` bytes of SIP (plaintext) arrived in the scratch buffer: frame
    /// and handle them. `false`: the connection was closed.
    pub(super) fn received(&mut self, t: Token, n: usize) -> bool {
        self.after_tls_read(t);
        let Some(l) = self.locals.get_mut(&t) else {
            return false;
        };
        if l.ws.is_some() {
            return self.received_ws(t, n);
        }
        let now = Instant::now();
        l.last_read = now;
        let mut inbuf = std::mem::take(&mut l.inbuf);
        let conn = l.conn.clone();
        let mut crlf = l.crlf;
        // The read's answers on this connection are written once, after
        // its last message (`outbox`).
        let (consumed, written) = super::outbox::with_cork(&conn, || {
            // The common case: a whole message in one read, handled in place.
            if inbuf.is_empty() {
                let scratch = std::mem::take(&mut self.scratch);
                let r = self.handle_frames(&conn, &scratch[..n], &mut crlf);
                if let Ok(used) = r {
                    inbuf.extend_from_slice(&scratch[used..n]);
                }
                self.scratch = scratch;
                r.map(|_| ())
            } else {
                inbuf.extend_from_slice(&self.scratch[..n]);
                let r = self.handle_frames(&conn, &inbuf, &mut crlf);
                if let Ok(used) = r {
                    inbuf.drain(..used);
                }
                r.map(|_| ())
            }
        });
        if let Err(reason) = consumed.and(written.map_err(|_| CloseReason::Error)) {
            self.close(t, reason);
            return false;
        }
        let Some(l) = self.locals.get_mut(&t) else {
            return false;
        };
        l.crlf = crlf;
        if inbuf.is_empty() {
            l.message_start = None;
            l.inbuf = Vec::new();
        } else {
            l.message_start.get_or_insert(now);
            l.inbuf = inbuf;
        }
        true
    }

    /// A WebSocket connection closed: the bindings registered over it can
    /// never be reached again (RFC 7118 §5: a browser is reached on its
    /// connection or not at all; a reloaded page registers anew), so they
    /// are dropped now, stored as a REGISTER's removal is, instead of
    /// lingering until they expire.
    pub(super) fn drop_bindings(&mut self, conn: &Conn) {
        let aors = conn.take_extra(|e| &mut e.registered);
        let shared = &self.hub.shared;
        let (peer, transport) = (conn.peer, conn.transport);
        let on_conn = |b: &crate::proto::location::Binding| {
            b.source == peer && b.flow.is_some_and(|f| f.transport == transport)
        };
        for aor in aors {
            let mut held = self.storage.hold();
            let now = crate::io::clock::unix_now();
            match crate::io::drive::remove_bindings(
                &shared.location,
                &mut held,
                &aor,
                &on_conn,
                now,
            ) {
                Ok(n) => {
                    let dropped = &shared.metrics.flow_bindings_dropped;
                    dropped.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) => crate::io::log::journal_error(&aor, &e),
            }
        }
    }

    /// One framed SIP message from a connection this reactor reads: it
    /// decides it, or (a busy connection) hands it to the reactor its
    /// Call-ID belongs to.
    pub(super) fn handle_message(&mut self, conn: &Arc<Conn>, bytes: &[u8]) {
        if let Some(l) = self.locals.get_mut(&conn.token) {
            l.spoke = true;
        }
        match self.spread_to(conn, bytes) {
            Route::To(to) => self.hand_off(to, conn, bytes),
            Route::Here => self.decide(conn, bytes),
            Route::Kept => {
                // What the others decided for this connection goes out
                // before what this decides: each call's order holds.
                let _ = self.hub.write_outbox(conn, None);
                let metrics = &self.hub.shared.metrics;
                metrics.spread_add(Spread::Kept);
                self.decide(conn, bytes);
            }
        }
    }

    /// Hands one SIP message to the core and sends what it gives. Over a
    /// store where each write waits (Redis, an fsync journal), a binding
    /// change waits with its answer for the end of the round (see
    /// [`Reactor::commit`]).
    pub(super) fn decide(&mut self, conn: &Arc<Conn>, bytes: &[u8]) {
        self.hub.shared.metrics.reactor_decided(self.index);
        if conn.transport == Transport::Tls
            && self.hub.tls.as_ref().is_some_and(|t| t.mutual)
            && memchr::memmem::find(bytes, b"alias").is_some()
        {
            self.hub.alias(conn, bytes);
        }
        let mut held = self.storage.hold();
        let now = crate::io::clock::now();
        let reply = if held.batches() {
            crate::io::drive::handle_deferring(
                &mut self.core,
                self.sender.sinks(),
                &mut self.deferred,
                bytes,
                conn.peer,
                conn.transport,
                now,
                &mut self.out,
            )
        } else {
            crate::io::drive::handle(
                &mut self.core,
                self.sender.sinks(),
                Some(&mut held),
                bytes,
                conn.peer,
                conn.transport,
                now,
                &mut self.out,
            )
        };
        drop(held);
        for aor in self.core.websocket_registrations() {
            conn.with_extras(|e| {
                let known = &mut e.registered;
                if known.len() < MAX_AORS_REGISTERED && !known.contains(&aor) {
                    known.push(aor);
                }
            });
        }
        // Extras first: a 100 Trying must not trail the answers the
        // forwarded INVITE draws.
        self.sender.send_all(self.core.extra());
        match reply {
            // The answer to a request goes back on its connection, held
            // here: no lookup by address under the hub's lock.
            Reply::Send(dest, transport) if dest == conn.peer && transport == conn.transport => {
                let _ = self.hub.send_over(
                    conn,
                    dest,
                    &self.out,
                    self.core.sent_key(),
                    self.core.answered(),
                );
            }
            other => self.sender.reply(other, &self.out, self.core.sent_key()),
        }
        if self.deferred.len() >= MAX_DEFERRED {
            self.commit();
        }
        self.answer_woken();
    }

    /// Hands in again the messages that waited on an AoR whose change
    /// this reactor finished (see `proto/busy.rs`), and sends what they
    /// draw.
    pub(super) fn answer_woken(&mut self) {
        if !self.core.has_woken() {
            return;
        }
        let mut held = self.storage.hold();
        let sender = &self.sender;
        let now = crate::io::clock::now();
        crate::io::drive::woken(
            &mut self.core,
            sender.sinks(),
            &mut held,
            now,
            &mut self.out,
            |core, reply, out| {
                sender.send_all(core.extra());
                sender.reply(reply, out, core.sent_key());
            },
        );
    }

    /// Stores the binding changes this round gathered, all in one write
    /// (one fsync, one Redis round trip), then sends their answers: the
    /// reactor waits once for every connection it served this round
    /// instead of once per REGISTER.
    pub(super) fn commit(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        let mut held = self.storage.hold();
        self.deferred.flush(&mut self.core, &mut held);
        drop(held);
        let sender = &self.sender;
        self.deferred
            .send_ready(|reply, out| sender.reply(reply, out, None));
        self.answer_woken();
    }

    /// Closes connections past a deadline.
    pub(super) fn sweep(&mut self, now: Instant) {
        let l = &self.hub.limits;
        let mut due = Vec::new();
        for (t, c) in &mut self.locals {
            if c.busy.waits_for_peer && !lock(&c.conn.tx).backlogged() {
                // Its writable edge went to a flush that left nothing
                // to wait for (another thread's): read it now.
                c.busy.waits_for_peer = false;
                self.again.push(*t);
            }
            if c.busy.waits_for_peer || self.held.contains(t) {
                // Not read for now (its peer takes nothing, which
                // `send_timeout` bounds, or other reactors are behind on
                // it): a message it had begun waits on us, so its clock
                // starts again when reading does.
                if let Some(start) = &mut c.message_start {
                    *start = now;
                }
            }
            let reason = if c.connecting {
                (now >= c.opened + l.connect_timeout).then_some(CloseReason::ConnectFailed)
            } else if c.opening() && now >= c.opened + l.handshake_timeout {
                Some(CloseReason::HandshakeTimeout)
            } else if !c.spoke && now >= c.opened + l.first_message_timeout {
                Some(CloseReason::Silent)
            } else if c
                .message_start
                .is_some_and(|s| now >= s + l.message_timeout)
            {
                Some(CloseReason::MessageTimeout)
            } else if now >= c.last_read + l.idle_timeout {
                Some(CloseReason::Idle)
            } else {
                None
            };
            if let Some(r) = reason {
                due.push((*t, r));
            }
        }
        for (t, r) in due {
            if r == CloseReason::HandshakeTimeout {
                self.hub
                    .shared
                    .metrics
                    .tls_handshake_failures
                    .fetch_add(1, Ordering::Relaxed);
            }
            self.close(t, r);
        }
    }

    /// Closes `t` (TLS with close_notify), forgets it and counts why.
    pub(super) fn close(&mut self, t: Token, reason: CloseReason) {
        let Some(l) = self.locals.remove(&t) else {
            return;
        };
        let conn = l.conn;
        let hub = self.hub.clone();
        let reason = lock(&conn.closing).get_or_insert(reason).to_owned();
        let pending = {
            let mut tx = lock(&conn.tx);
            let was = std::mem::replace(&mut tx.phase, Phase::Open);
            if tx.wire == Wire::Frames
                && matches!(reason, CloseReason::Shutdown | CloseReason::Idle)
            {
                let code = if reason == CloseReason::Shutdown {
                    websocket::close::GOING_AWAY
                } else {
                    websocket::close::NORMAL
                };
                let _ = tx.queue_raw(&[&websocket::close_frame(code)], usize::MAX);
            }
            if let Some(tls) = &mut tx.tls {
                if reason != CloseReason::SlowReader && !matches!(was, Phase::Connecting(_)) {
                    tls.send_close_notify();
                    let _ = tx.flush();
                }
            }
            tx.phase = Phase::Closed;
            if matches!(
                reason,
                CloseReason::SlowReader
                    | CloseReason::HandshakeTimeout
                    | CloseReason::MessageTimeout
            ) {
                // Abort (RST): what the kernel still holds for a peer that
                // misbehaves is freed now, not after it drains at the
                // peer's pace.
                let _ = socket2::SockRef::from(&tx.sock).set_linger(Some(Duration::ZERO));
            }
            let _ = self.poll.registry().deregister(&mut tx.sock);
            let _ = tx.sock.shutdown(std::net::Shutdown::Both);
            tx.out = Vec::new();
            match was {
                Phase::Connecting(p) => Some(p),
                _ => None,
            }
        };
        if let Some(p) = pending {
            hub.shared
                .metrics
                .tcp_connects_pending
                .fetch_sub(1, Ordering::AcqRel);
            let dropped = p.len() as u64;
            hub.shared
                .metrics
                .dropped
                .fetch_add(dropped, Ordering::Relaxed);
            let waiting = conn.take_extra(|e| &mut e.waiting);
            if !waiting.is_empty() {
                hub.transport_failed(&waiting);
            }
        }
        {
            let aliases = conn.take_extra(|e| &mut e.aliases);
            hub.forget_flow(&conn, &aliases);
            let mine = |c: Option<&Arc<Conn>>| c.is_some_and(|c| Arc::ptr_eq(c, &conn));
            let mut conns = lock(&hub.conns);
            for at in std::iter::once(Alias::Addr(conn.peer)).chain(aliases) {
                match at {
                    Alias::Addr(at) => {
                        if mine(conns.get(&at)) {
                            conns.remove(&at);
                        }
                    }
                    Alias::Name(key) => {
                        let mut names = lock(&hub.names);
                        if mine(names.get(&key)) {
                            names.remove(&key);
                        }
                    }
                }
            }
        }
        if conn.counted_ip {
            hub.release_ip(conn.peer.ip());
        }
        if reason != CloseReason::Shutdown {
            self.drop_bindings(&conn);
        }
        let watched = conn.take_extra(|e| &mut e.requests);
        if !watched.is_empty() {
            hub.transport_failed(&watched);
        }
        hub.open.fetch_sub(1, Ordering::Relaxed);
        hub.shared.metrics.connection_closed(conn.transport, reason);
        if !matches!(
            reason,
            CloseReason::Peer | CloseReason::Shutdown | CloseReason::Error
        ) {
            crate::io::log::connection_closed(conn.peer, reason.label());
        }
    }
}

/// What one read from a connection gave.
enum Got {
    /// SIP bytes (plaintext) in the scratch buffer; `true`: the socket
    /// gave less than asked for and the session holds no more plaintext,
    /// so nothing is left to read until the socket is readable again.
    Bytes(usize, bool),
    /// Nothing more for now.
    Nothing,
    /// The peer closed (after these last plaintext bytes).
    Closed(usize),
    /// The connection failed.
    Failed(CloseReason),
    /// The TLS client offered no key-exchange group the server takes
    /// (under `require_pq`: no post-quantum one); the alert was sent.
    NoGroup,
}

/// One read: plain TCP bytes, or TLS records fed to the session and the
/// plaintext they gave.
fn read_some(tx: &mut Tx, scratch: &mut [u8]) -> Got {
    let Tx { sock, tls, .. } = tx;
    let Some(tls) = tls else {
        return match sock.read(scratch) {
            Ok(0) => Got::Closed(0),
            Ok(n) => Got::Bytes(n, n < scratch.len()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Got::Nothing,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Got::Bytes(0, false),
            Err(e) => Got::Failed(failure(&e)),
        };
    };
    // Plaintext left from the last records first.
    match tls.reader().read(scratch) {
        Ok(n) if n > 0 => return Got::Bytes(n, false),
        Ok(_) => return Got::Closed(0),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(_) => return Got::Failed(CloseReason::Tls),
    }
    let mut wire = sip_tls::ShortRead::new(sock);
    let eof = match tls.read_tls(&mut wire) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Got::Nothing,
        Err(e) if e.kind() == io::ErrorKind::Interrupted => return Got::Bytes(0, false),
        Err(e) => return Got::Failed(failure(&e)),
    };
    let socket_empty = wire.short;
    if let Err(e) = tls.process_new_packets() {
        // Send the alert that says why, then give up.
        let _ = tls.write_tls(sock);
        let no_group =
            rustls::Error::PeerIncompatible(rustls::PeerIncompatible::NoKxGroupsInCommon);
        return if e == no_group {
            Got::NoGroup
        } else {
            Got::Failed(CloseReason::Tls)
        };
    }
    let n = match tls.reader().read(scratch) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
        Err(_) => return Got::Failed(CloseReason::Tls),
    };
    if eof {
        Got::Closed(n)
    } else {
        Got::Bytes(n, socket_empty && n < scratch.len())
    }
}
