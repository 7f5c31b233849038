//! The hub: the connection table every thread sends through, outbound
//! connects, RFC 5923 aliases and the per-source shares.

use std::collections::HashMap;
use std::io::{self};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;

use mio::net::TcpStream;
use mio::{Interest, Poll, Token, Waker};
use rustls::pki_types::ServerName;

use crate::io::drive::Storage;
use crate::io::send::{Connections, Sender};
use crate::io::sinks::Sinks;
use crate::io::tls::TlsContext;
use crate::io::wake::Wakers;
use crate::proto::branch::Key;
use crate::proto::core::Transport;
use crate::proto::effects::Sends;
use crate::proto::flows::{alias_asked, AliasTarget};
use crate::proto::metrics::Answered;
use crate::proto::metrics::CloseReason;
use crate::proto::shared::Shared;

use super::outbox::Posted;
use super::shared::*;

impl TcpHub {
    /// A hub; `stores` are where the reactors store binding changes, one
    /// each ([`ConnectionLimits::reactor_count`](crate::config::ConnectionLimits::reactor_count)
    /// of them); `udp` sends what connections must forward over UDP;
    /// `tls` serves and opens TLS connections. Raises the
    /// file-descriptor limit to size the connection limit.
    pub fn new(
        shared: Arc<Shared>,
        sinks: Sinks,
        stores: Vec<Storage>,
        udp: Option<Arc<UdpSocket>>,
        tls: Option<Arc<TlsContext>>,
        wakers: Arc<Wakers>,
        stop: Arc<AtomicBool>,
    ) -> Arc<Self> {
        let limits = shared.config.connections.clone();
        let max = effective_limit(limits.max, sip_udp::raise_fd_limit());
        Arc::new(Self {
            shared,
            sinks,
            stores: Mutex::new(stores),
            udp,
            tls,
            wakers,
            stop,
            limits,
            max,
            recent: Mutex::new(std::collections::VecDeque::new()),
            conns: Mutex::new(HashMap::new()),
            names: Mutex::new(HashMap::new()),
            per_ip: Mutex::new(HashMap::new()),
            open: AtomicUsize::new(0),
            next_token: AtomicUsize::new(FIRST_CONN),
            next_reactor: AtomicUsize::new(0),
            reactors: OnceLock::new(),
        })
    }

    /// The last TLS sessions set up, newest first.
    pub fn recent_sessions(&self) -> Vec<super::shared::TlsSession> {
        lock(&self.recent).iter().rev().cloned().collect()
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// The most connections served at once.
    pub fn limit(&self) -> usize {
        self.max
    }

    /// Starts the reactors, each accepting from the given listeners
    /// (TLS and WSS ones open TLS server sessions).
    pub fn start(self: &Arc<Self>, listen: Listeners) -> io::Result<Vec<JoinHandle<()>>> {
        let n = self.limits.reactor_count();
        let mut stores = std::mem::take(&mut *lock(&self.stores));
        if stores.len() != n {
            return Err(io::Error::other(format!(
                "{} stores for {n} connection reactors",
                stores.len()
            )));
        }
        let mut polls = Vec::with_capacity(n);
        let mut links = Vec::with_capacity(n);
        for _ in 0..n {
            let poll = Poll::new()?;
            links.push(ReactorLink {
                waker: Waker::new(poll.registry(), WAKER)?,
                orders: Mutex::new(Vec::new()),
                handed: AtomicUsize::new(0),
                parked: AtomicBool::new(false),
            });
            polls.push(poll);
        }
        if self.reactors.set(links).is_err() {
            return Err(io::Error::other("the connection layer is already started"));
        }
        let mut threads = Vec::with_capacity(n);
        for ((i, poll), store) in polls.into_iter().enumerate().zip(stores.drain(..)) {
            let mut listeners = Vec::new();
            for (l, token) in [
                (&listen.tcp, LISTEN_TCP),
                (&listen.tls, LISTEN_TLS),
                (&listen.ws, LISTEN_WS),
                (&listen.wss, LISTEN_WSS),
            ] {
                if let Some(l) = l {
                    let l = l.try_clone()?;
                    l.set_nonblocking(true)?;
                    let mut l = mio::net::TcpListener::from_std(l);
                    poll.registry()
                        .register(&mut l, token, Interest::READABLE)?;
                    listeners.push((l, token, true));
                }
            }
            let hub = self.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("conn-{i}"))
                    .spawn(move || Reactor::new(hub, i, (poll, store), listeners).run())?,
            );
        }
        Ok(threads)
    }

    /// Wakes every reactor to look at the stop and drain flags now.
    pub fn wake_all(&self) {
        for link in self.reactors.get().into_iter().flatten() {
            let _ = link.waker.wake();
        }
    }

    pub(super) fn link(&self, reactor: usize) -> Option<&ReactorLink> {
        self.reactors.get().and_then(|r| r.get(reactor))
    }

    pub(super) fn order(&self, reactor: usize, order: Order) {
        if let Some(link) = self.link(reactor) {
            link.give(|orders| orders.push(order));
        }
    }

    /// `conn` closes: the core no longer finds it open, at its peer or
    /// at any alias it took.
    pub(super) fn forget_flow(&self, conn: &Conn, aliases: &[Alias]) {
        let addrs = aliases.iter().filter_map(|a| match a {
            Alias::Addr(at) => Some(*at),
            Alias::Name(_) => None,
        });
        let names = aliases.iter().filter_map(|a| match a {
            Alias::Name((name, port)) => Some((&**name, *port)),
            Alias::Addr(_) => None,
        });
        let at = std::iter::once(conn.peer).chain(addrs);
        self.shared.flows.closed(at, names, conn_id(conn));
    }

    /// Marks `conn` for closing (the first reason wins) and has its
    /// reactor close it.
    pub(super) fn close_later(&self, conn: &Conn, reason: CloseReason) {
        {
            let mut closing = lock(&conn.closing);
            if closing.is_some() {
                return;
            }
            *closing = Some(reason);
        }
        {
            let extras = lock(&conn.extras);
            let aliases = extras.as_ref().map_or(&[][..], |e| &e.aliases[..]);
            self.forget_flow(conn, aliases);
        }
        {
            let mut tx = lock(&conn.tx);
            if matches!(tx.phase, Phase::Open) {
                tx.phase = Phase::Closed;
            }
        }
        self.order(conn.reactor, Order::Close(conn.token));
    }

    /// Sends `bytes` to `dest` on its open connection, or connects (TCP,
    /// or TLS when `transport` says so) without blocking the caller. A
    /// message that cannot be queued is dropped and counted; a forwarded
    /// request among them is answered 503 by its transaction.
    pub fn send(
        self: &Arc<Self>,
        dest: SocketAddr,
        transport: Transport,
        bytes: &[u8],
        key: Option<(Key, u8)>,
    ) -> io::Result<()> {
        let websocket = matches!(transport, Transport::Ws | Transport::Wss);
        if !matches!(transport, Transport::Tcp | Transport::Tls) && !websocket {
            // No listener or connector for it (SCTP): the message cannot
            // leave; a forwarded request is answered 503.
            self.shared.metrics.dropped.fetch_add(1, Ordering::Relaxed);
            self.undeliverable(key);
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("no {} transport to reach {dest}", transport.as_str()),
            ));
        }
        let existing = lock(&self.conns).get(&dest).cloned();
        let Some(conn) = existing else {
            if websocket {
                // Browsers are only reached on the connection they opened.
                self.shared.metrics.dropped.fetch_add(1, Ordering::Relaxed);
                self.undeliverable(key);
                return Err(io::Error::other(format!(
                    "no {} connection from {dest}",
                    transport.as_str()
                )));
            }
            return self.connect_then_send(dest, transport, bytes, key);
        };
        self.send_over(&conn, dest, bytes, key, None)
    }

    /// Sends `bytes` for `dest` on `conn`: the connection found for it,
    /// or the one the request being answered came over (RFC 3261
    /// §18.2.2), which its reactor holds and need not look up.
    /// `answered`: what the core says of the answer it wrote, when these
    /// bytes may be it ([`Core::answered`](crate::proto::core::Core::answered)).
    pub(super) fn send_over(
        self: &Arc<Self>,
        conn: &Arc<Conn>,
        dest: SocketAddr,
        bytes: &[u8],
        key: Option<(Key, u8)>,
        answered: Option<Answered>,
    ) -> io::Result<()> {
        if matches!(conn.transport, Transport::Ws | Transport::Wss) {
            // Watched before it can reach the browser: a browser that
            // closes as soon as it has the request must find it among
            // the connection's requests when the reactor closes it.
            self.watch(conn, key);
        }
        // Counted before it is written: a peer that has the answer finds
        // it in the metrics.
        let count = || {
            crate::io::send::leaving_answer(
                &self.shared,
                &self.sinks,
                bytes,
                dest,
                conn.transport,
                answered,
            )
        };
        let posted = self.post(conn, bytes, key);
        if !matches!(posted, Posted::No) {
            count();
        }
        match posted {
            Posted::No => {}
            Posted::Yes { ask } => {
                if ask {
                    self.order(conn.reactor, Order::Write(conn.clone()));
                }
                return Ok(());
            }
            Posted::Full => return self.write_outbox(conn, Some((bytes, key))),
        }
        let queued = {
            let mut tx = lock(&conn.tx);
            let connecting = matches!(tx.phase, Phase::Connecting(_));
            let staged = tx.stage(bytes, self.limits.queue_bytes);
            if let (Ok(()), true, Some(k)) = (&staged, connecting, key) {
                // Failed with the connect, if it fails.
                conn.with_extras(|e| e.waiting.push(k));
            }
            if staged.is_ok() {
                count();
            }
            // A read being decided on this connection writes its
            // answers once, after its last message.
            let corked = super::outbox::corked(conn);
            staged.and_then(|()| match corked {
                true => Ok(()),
                false => tx.flush().map_err(|_| QueueError::Closed),
            })
        };
        match queued {
            Ok(()) => Ok(()),
            Err(e) => self.not_queued(conn, key, e),
        }
    }

    /// A message could not be queued on `conn`: it is closed (as a slow
    /// reader when its queue is full) and a forwarded request fails.
    fn not_queued(
        self: &Arc<Self>,
        conn: &Arc<Conn>,
        key: Option<(Key, u8)>,
        e: QueueError,
    ) -> io::Result<()> {
        self.close_later(conn, e.close_reason());
        self.shared.metrics.dropped.fetch_add(1, Ordering::Relaxed);
        self.undeliverable(key);
        Err(io::Error::other(match e {
            QueueError::Full => "the peer does not read: closed as a slow reader",
            QueueError::Closed => "the connection is closed",
        }))
    }

    /// A message could not be sent. For a request the stateful proxy
    /// forwarded (`key`), its transaction answers the caller (503) at once.
    pub(super) fn undeliverable(self: &Arc<Self>, key: Option<(Key, u8)>) {
        if let Some(key) = key {
            self.transport_failed(&[key]);
        }
    }

    /// Remembers a forwarded request sent over a WebSocket connection.
    pub(super) fn watch(&self, conn: &Conn, key: Option<(Key, u8)>) {
        if let Some(key) = key {
            conn.with_extras(|e| {
                if e.requests.len() == MAX_REQUESTS_WATCHED {
                    e.requests.remove(0);
                }
                e.requests.push(key);
            });
        }
    }

    /// RFC 5923: a TLS peer whose request's top Via carries `alias`
    /// gets the requests for its sent-by (`host:port`, 5061 by default)
    /// down this connection instead of over a new one. Only when its
    /// certificate names the sent-by (subjectAltName iPAddress for an
    /// address, dNSName for a domain name, as a next hop's certificate
    /// is checked) and no other connection stands for it: a peer can
    /// only alias itself, and never takes another's place.
    pub(super) fn alias(&self, conn: &Arc<Conn>, bytes: &[u8]) {
        let Ok(msg) = sip_core::Message::parse(bytes) else {
            return;
        };
        // The alias, and the name its certificate must carry for it.
        let (alias, server_name) = match alias_asked(&msg, conn.peer) {
            None => return,
            Some(AliasTarget::Addr(at)) => (Alias::Addr(at), ServerName::from(at.ip())),
            Some(AliasTarget::Name(name, port)) => {
                let Ok(server_name) = ServerName::try_from(name.clone()) else {
                    return;
                };
                (Alias::Name((name.into(), port)), server_name)
            }
        };
        let named = {
            let tx = lock(&conn.tx);
            let leaf = tx
                .tls
                .as_ref()
                .and_then(|t| t.peer_certificates())
                .and_then(|c| c.first());
            leaf.is_some_and(|leaf| {
                rustls::server::ParsedCertificate::try_from(leaf).is_ok_and(|cert| {
                    rustls::client::verify_server_name(&cert, &server_name).is_ok()
                })
            })
        };
        if !named {
            tracing::debug!(target: "sipsec::conn", peer = %conn.peer, alias = ?alias, "alias refused: the client certificate does not name the Via sent-by");
            return;
        }
        let mut extras = lock(&conn.extras);
        let aliases = &mut extras.get_or_insert_with(Box::default).aliases;
        if aliases.contains(&alias) || aliases.len() >= MAX_ALIASES {
            return;
        }
        match &alias {
            Alias::Addr(at) => {
                let mut conns = lock(&self.conns);
                if conns.contains_key(at) {
                    return;
                }
                conns.insert(*at, conn.clone());
                self.shared.flows.opened(*at, conn.transport, conn_id(conn));
            }
            Alias::Name(key) => {
                let mut names = lock(&self.names);
                if names.contains_key(key) {
                    return;
                }
                names.insert(key.clone(), conn.clone());
                self.shared
                    .flows
                    .aliased(&key.0, key.1, conn.peer, conn_id(conn));
            }
        }
        tracing::debug!(target: "sipsec::conn", peer = %conn.peer, alias = ?alias, "connection reused for requests to its sent-by (RFC 5923)");
        aliases.push(alias);
    }

    /// The requests of `keys` cannot be answered: those still waiting
    /// answer their callers (503, RFC 3261 §16.9) now.
    pub(super) fn transport_failed(self: &Arc<Self>, keys: &[(Key, u8)]) {
        let mut sends = Sends::default();
        let now = Instant::now();
        for (key, tries) in keys {
            self.shared.transport_failed(*key, *tries, now, &mut sends);
        }
        self.sender().send_all(&sends);
    }

    pub(super) fn connect_then_send(
        self: &Arc<Self>,
        dest: SocketAddr,
        transport: Transport,
        bytes: &[u8],
        key: Option<(Key, u8)>,
    ) -> io::Result<()> {
        let refuse = |hub: &Arc<Self>, why: &str| {
            hub.shared.metrics.dropped.fetch_add(1, Ordering::Relaxed);
            hub.undeliverable(key);
            Err(io::Error::other(format!("{dest}: {why}")))
        };
        // A TLS next hop is named by address here, so its certificate must
        // carry that IP address (subjectAltName iPAddress).
        let session = match (transport, &self.tls) {
            (Transport::Tls, Some(ctx)) => {
                match rustls::ClientConnection::new(
                    ctx.client.clone(),
                    ServerName::IpAddress(dest.ip().into()),
                ) {
                    Ok(c) => Some(Box::new(rustls::Connection::Client(c))),
                    Err(e) => return refuse(self, &e.to_string()),
                }
            }
            (Transport::Tls, None) => {
                return refuse(self, "no TLS configured for a sips: next hop")
            }
            _ => None,
        };
        if self.open.load(Ordering::Relaxed) >= self.max {
            return refuse(self, "the connection limit is reached");
        }
        let pending = &self.shared.metrics.tcp_connects_pending;
        if pending.fetch_add(1, Ordering::AcqRel) >= MAX_PENDING_CONNECTS as u64 {
            pending.fetch_sub(1, Ordering::AcqRel);
            return refuse(self, "too many connects in progress");
        }
        let sock = match TcpStream::connect(dest) {
            Ok(s) => s,
            Err(e) => {
                pending.fetch_sub(1, Ordering::AcqRel);
                return refuse(self, &e.to_string());
            }
        };
        tune(&sock, &self.limits);
        let reactor = self.pick_reactor();
        let conn = Arc::new(Conn {
            peer: dest,
            token: Token(self.next_token.fetch_add(1, Ordering::Relaxed)),
            reactor,
            transport,
            counted_ip: false,
            tx: Mutex::new(Tx {
                sock,
                tls: session.map(|mut s| {
                    s.set_buffer_limit(Some(self.limits.queue_bytes));
                    s
                }),
                out: Vec::new(),
                sent: 0,
                phase: Phase::Connecting(vec![bytes.to_vec()]),
                wire: Wire::Stream,
            }),
            closing: Mutex::new(None),
            extras: Mutex::new(key.map(|k| {
                Box::new(Extras {
                    waiting: vec![k],
                    ..Extras::default()
                })
            })),
            spread: AtomicBool::new(false),
            handed: AtomicU32::new(0),
            outbox: Mutex::default(),
        });
        {
            let mut conns = lock(&self.conns);
            if let Some(other) = conns.get(&dest).cloned() {
                // Another sender connected meanwhile: use its connection.
                drop(conns);
                pending.fetch_sub(1, Ordering::AcqRel);
                return self.send(dest, other.transport, bytes, key);
            }
            conns.insert(dest, conn.clone());
            self.shared
                .flows
                .opened(dest, conn.transport, conn_id(&conn));
        }
        self.open.fetch_add(1, Ordering::Relaxed);
        self.shared.metrics.connection_opened(conn.transport, false);
        crate::io::send::leaving(&self.shared, &self.sinks, bytes, dest, conn.transport);
        self.order(
            reactor,
            Order::Adopt {
                conn,
                accepted: false,
            },
        );
        Ok(())
    }

    pub(super) fn pick_reactor(&self) -> usize {
        let n = self.reactors.get().map_or(1, Vec::len).max(1);
        self.next_reactor.fetch_add(1, Ordering::Relaxed) % n
    }

    /// Sends by transport, with this hub for TCP and TLS.
    pub(super) fn sender(self: &Arc<Self>) -> Sender {
        Sender::new(
            self.shared.clone(),
            self.sinks.clone(),
            self.udp.clone(),
            Some(Arc::new(self.clone())),
            self.wakers.clone(),
        )
    }

    /// Takes a share for `ip`; `false`: it has its limit.
    pub(super) fn admit_ip(&self, ip: IpAddr) -> bool {
        let l = &self.limits;
        if l.per_ip == 0 || l.per_ip_exempt.contains(&ip) {
            return true;
        }
        let source = self.shared.guard.source_of(ip);
        let mut per_ip = lock(&self.per_ip);
        let n = per_ip.entry(source).or_insert(0);
        if *n >= l.per_ip {
            return false;
        }
        *n += 1;
        true
    }

    pub(super) fn release_ip(&self, ip: IpAddr) {
        let l = &self.limits;
        if l.per_ip == 0 || l.per_ip_exempt.contains(&ip) {
            return;
        }
        let source = self.shared.guard.source_of(ip);
        let mut per_ip = lock(&self.per_ip);
        if let Some(n) = per_ip.get_mut(&source) {
            *n -= 1;
            if *n == 0 {
                per_ip.remove(&source);
            }
        }
    }
}

impl Connections for Arc<TcpHub> {
    fn send_on(
        &self,
        dest: SocketAddr,
        transport: Transport,
        bytes: &[u8],
        key: Option<(Key, u8)>,
    ) {
        let _ = self.send(dest, transport, bytes, key);
    }
}
