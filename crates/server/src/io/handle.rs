//! A running server as its owner holds it: its addresses, shared state,
//! and the ways to stop it (at once, or draining what is under way).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::io::journal::Persistence;
use crate::io::tcp::shared::TcpHub;
use crate::proto::shared::Shared;

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    pub(crate) addr: SocketAddr,
    pub(crate) tcp: Option<SocketAddr>,
    pub(crate) tls: Option<SocketAddr>,
    pub(crate) http: Option<SocketAddr>,
    pub(crate) stop: Arc<AtomicBool>,
    /// Wakes the threads that sleep on it (the file watcher) to stop.
    pub(crate) waker: std::os::unix::net::UnixStream,
    /// Sockets threads block on, shut down to stop them.
    pub(crate) sockets: Vec<socket2::Socket>,
    /// The connection reactors, woken to stop and to drain.
    pub(crate) hub: Option<Arc<TcpHub>>,
    /// Resolves next hops named by domain names.
    pub(crate) resolver: Arc<crate::io::resolver::Resolver>,
    /// Wakes the media thread (relayed calls), when it runs.
    pub(crate) media: Option<Arc<crate::io::media::Pump>>,
    /// Wakes the thread following the shared location (Redis).
    pub(crate) redis_sync: Option<crate::io::redis::SyncWaker>,
    pub(crate) threads: Vec<JoinHandle<()>>,
    pub(crate) shared: Arc<Shared>,
    /// The tracer (woken at the stop) and the call log.
    pub(crate) sinks: crate::io::sinks::Sinks,
    pub(crate) connection_limit: Option<usize>,
    pub(crate) persistence: Option<Arc<Persistence>>,
}

/// What a graceful stop did.
#[derive(Debug)]
pub struct Drained {
    /// How long the transactions under way took to finish (or the deadline).
    pub waited: std::time::Duration,
    /// Transactions whose caller had no final response at the deadline
    /// (abandoned).
    pub transactions_left: u64,
    /// Connections closed (TLS with close_notify, WebSocket with a close frame).
    pub connections_closed: u64,
    /// Whether the journal reached stable storage (`None`: no journal).
    pub journal: Option<std::io::Result<()>>,
}

impl ServerHandle {
    /// The bound UDP address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bound TCP address, when TCP is on.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp
    }

    /// The state shared by the workers.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The operator endpoint's address, when on.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http
    }

    /// The bound TLS address, when TLS is on.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls
    }

    /// The most TCP and TLS connections served at once (from the
    /// configuration or the raised file-descriptor limit), when either is on.
    pub fn connection_limit(&self) -> Option<usize> {
        self.connection_limit
    }

    /// How many times the location journal waited for stable storage
    /// (`None`: no journal).
    pub fn journal_syncs(&self) -> Option<u64> {
        self.persistence.as_ref().map(|p| p.syncs())
    }

    /// Raises `stop`, wakes the threads sleeping on `waker`, on a socket
    /// and in the reactors, and waits for every thread.
    fn stop_threads(&mut self) {
        use std::io::Write;
        self.stop.store(true, Ordering::Relaxed);
        let _ = (&self.waker).write(b"s");
        if let Some(h) = &self.hub {
            h.wake_all();
        }
        self.resolver.wake();
        if let Some(m) = &self.media {
            m.wake();
        }
        if let Some(t) = self.sinks.tap.as_ref() {
            t.wake();
        }
        if let Some(r) = &self.redis_sync {
            r.wake();
        }
        wake_sockets(&self.sockets);
        for t in self.threads.iter() {
            t.thread().unpark();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    /// Stops the threads and waits for them.
    pub fn shutdown(mut self) {
        self.stop_threads();
    }

    /// Stops gracefully: new connections and new requests are refused
    /// (503 with Retry-After, so phones turn elsewhere), transactions under
    /// way finish until `deadline`, then every connection is closed (TLS
    /// with close_notify) and the journal is put on stable storage.
    pub fn drain(mut self, deadline: std::time::Duration) -> Drained {
        let start = std::time::Instant::now();
        self.shared.draining.store(true, Ordering::Relaxed);
        if let Some(h) = &self.hub {
            h.wake_all();
        }
        let shared = self.shared.clone();
        let m = &shared.metrics;
        let active = || {
            self.shared
                .transactions
                .as_ref()
                .map_or(0, |t| t.unanswered() as u64)
        };
        while active() > 0 && start.elapsed() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let waited = start.elapsed();
        let transactions_left = active();
        let closed_before = m.closed_for(crate::proto::metrics::CloseReason::Shutdown);
        self.stop_threads();
        Drained {
            waited,
            transactions_left,
            connections_closed: m
                .closed_for(crate::proto::metrics::CloseReason::Shutdown)
                .saturating_sub(closed_before),
            journal: self.persistence.as_ref().map(|p| p.sync()),
        }
    }

    /// Waits for the threads (they run until the process ends).
    pub fn wait(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Wakes the threads blocked on these sockets (UDP workers in
/// `recvmmsg`, the operator endpoint in `accept`) once `stop` is raised:
/// shutting a socket's receiving side down returns them at once, so they
/// need no timeout to notice the stop (sending is not affected).
pub(crate) fn wake_sockets(sockets: &[socket2::Socket]) {
    for s in sockets {
        let _ = s.shutdown(std::net::Shutdown::Read);
    }
}
