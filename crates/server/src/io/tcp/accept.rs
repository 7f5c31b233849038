//! A reactor's accepts: up to a burst per turn within the accept rates,
//! each source checked first, and each connection handed to the reactor
//! whose turn it is.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use mio::net::TcpStream;
use mio::{Interest, Token};

use crate::proto::core::Transport;
use crate::proto::metrics::CloseReason;

use super::shared::*;

impl Reactor {
    /// Accepts up to a burst from each listener with connections waiting.
    pub(super) fn accept(&mut self) {
        let hub = self.hub.clone();
        let burst = hub.limits.accept_burst;
        if let Some(b) = &self.bucket {
            if b.waiting(Instant::now()).is_some() {
                return;
            }
        }
        for i in 0..self.listeners.len() {
            if !self.listeners[i].2 {
                continue;
            }
            let transport = match self.listeners[i].1 {
                LISTEN_TLS => Transport::Tls,
                LISTEN_WS => Transport::Ws,
                LISTEN_WSS => Transport::Wss,
                _ => Transport::Tcp,
            };
            let mut taken = 0;
            loop {
                if taken == burst {
                    // More may wait: come back after serving the others.
                    break;
                }
                if let Some(b) = &mut self.bucket {
                    if b.take(Instant::now()).is_err() {
                        // The rate is spent: the rest wait in the kernel's
                        // queue until the bucket refills.
                        hub.shared
                            .metrics
                            .accepts_deferred
                            .fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
                let (sock, peer) = match self.listeners[i].0.accept() {
                    Ok(a) => a,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.listeners[i].2 = false;
                        if let Some(b) = &mut self.bucket {
                            b.give_back();
                        }
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // Out of descriptors or memory: refuse for a turn.
                        crate::io::log::connection_trouble(&format!("accept: {e}"));
                        break;
                    }
                };
                taken += 1;
                // Each source first: what it is refused costs the others
                // none of the server-wide rate.
                if !(self.source_may_connect(peer.ip())
                    && self.adopt_accepted(sock, peer, transport))
                {
                    if let Some(b) = &mut self.bucket {
                        b.give_back();
                    }
                }
            }
        }
    }

    /// Whether `ip` may open another connection now under
    /// `accept_rate_per_ip`; counts the refusal when not.
    pub(super) fn source_may_connect(&mut self, ip: IpAddr) -> bool {
        let l = &self.hub.limits;
        if l.accept_rate_per_ip == 0 || l.per_ip_exempt.contains(&ip) {
            return true;
        }
        let now = Instant::now();
        let rate = f64::from(l.accept_rate_per_ip);
        if self.sources.len() >= MAX_SOURCES {
            self.sources.retain(|_, p| !p.idle(now, rate, rate));
            if self.sources.len() >= MAX_SOURCES {
                // Every one busy: start over rather than grow.
                self.sources.clear();
            }
        }
        let pace = self
            .sources
            .entry(self.hub.shared.guard.source_of(ip))
            .or_insert_with(|| Pace::full(rate, now));
        if pace.take(now, rate, rate) {
            return true;
        }
        self.hub
            .shared
            .metrics
            .refused_per_ip_rate
            .fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Near the connection limit: closes this reactor's oldest connection
    /// that has sent no SIP message yet, to make room; `false` when there
    /// is none.
    pub(super) fn evict_silent(&mut self) -> bool {
        let Some(t) = self
            .locals
            .iter()
            .filter(|(_, l)| !l.spoke)
            .min_by_key(|(_, l)| l.opened)
            .map(|(t, _)| *t)
        else {
            return false;
        };
        self.close(t, CloseReason::Evicted);
        true
    }

    /// Takes an accepted connection on; `false` when it is refused.
    pub(super) fn adopt_accepted(
        &mut self,
        mut sock: TcpStream,
        peer: SocketAddr,
        transport: Transport,
    ) -> bool {
        let secure = matches!(transport, Transport::Tls | Transport::Wss);
        if self.hub.open.load(Ordering::Relaxed) >= self.hub.max && !self.evict_silent() {
            self.hub
                .shared
                .metrics
                .refused_limit
                .fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let hub = &self.hub;
        let m = &hub.shared.metrics;
        if !hub.admit_ip(peer.ip()) {
            m.refused_per_ip.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let tls = match (&hub.tls, secure) {
            (Some(ctx), true) => match rustls::ServerConnection::new(ctx.server.clone()) {
                Ok(mut s) => {
                    s.set_buffer_limit(Some(hub.limits.queue_bytes));
                    Some(Box::new(rustls::Connection::Server(s)))
                }
                Err(_) => {
                    hub.release_ip(peer.ip());
                    return false;
                }
            },
            (None, true) => {
                hub.release_ip(peer.ip());
                return false;
            }
            (_, false) => None,
        };
        tune(&sock, &hub.limits);
        let token = Token(hub.next_token.fetch_add(1, Ordering::Relaxed));
        // Reactors take turns (with the connections we open), so a few
        // connections that came at once do not all land on the reactor
        // that woke first; a busy one is spread by its messages besides.
        let reactor = hub.pick_reactor();
        if reactor == self.index
            && self
                .poll
                .registry()
                .register(&mut sock, token, Interest::READABLE | Interest::WRITABLE)
                .is_err()
        {
            hub.release_ip(peer.ip());
            return false;
        }
        let conn = Arc::new(Conn {
            peer,
            token,
            reactor,
            transport,
            counted_ip: true,
            tx: Mutex::new(Tx {
                sock,
                tls,
                out: Vec::new(),
                sent: 0,
                phase: Phase::Open,
                wire: if matches!(transport, Transport::Ws | Transport::Wss) {
                    Wire::Upgrading
                } else {
                    Wire::Stream
                },
            }),
            closing: Mutex::new(None),
            extras: Mutex::new(None),
            spread: AtomicBool::new(false),
            handed: AtomicU32::new(0),
            outbox: Mutex::default(),
        });
        hub.open.fetch_add(1, Ordering::Relaxed);
        m.connections_accepted.fetch_add(1, Ordering::Relaxed);
        m.connection_opened(transport, true);
        // The newest connection from an address is the one to answer on.
        lock(&hub.conns).insert(peer, conn.clone());
        hub.shared.flows.opened(peer, transport, conn_id(&conn));
        if reactor == self.index {
            self.locals.insert(
                token,
                Local::new(conn, false, self.hub.limits.keepalive_rate),
            );
        } else {
            self.hub.order(
                reactor,
                Order::Adopt {
                    conn,
                    accepted: true,
                },
            );
        }
        true
    }
}
