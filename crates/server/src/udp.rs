//! UDP transport: one socket per worker thread, bound with SO_REUSEPORT
//! so the kernel spreads datagrams across workers; each worker moves
//! datagrams in batches (recvmmsg/sendmmsg) through reused buffers.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use socket2::{Domain, Protocol, Socket, Type};

use crate::core::{Core, Reply, Shared, Transport};
use crate::location::SharedJournal;
use crate::mmsg::{RecvBatch, SendBatch};
use crate::tcp::TcpHub;

/// How often an idle worker checks for shutdown.
pub const POLL: Duration = Duration::from_millis(200);

/// Current Unix time in seconds.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The time now, as the core takes it.
pub fn now() -> crate::core::Now {
    crate::core::Now {
        unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        mono: std::time::Instant::now(),
    }
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    tcp: Option<SocketAddr>,
    tls: Option<SocketAddr>,
    http: Option<SocketAddr>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    shared: Arc<Shared>,
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

    /// Records the HTTP address.
    pub fn with_http(mut self, http: Option<SocketAddr>) -> Self {
        self.http = http;
        self
    }

    /// The operator endpoint's address, when on.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http
    }

    /// Records the TCP address.
    pub fn with_tcp(mut self, tcp: Option<SocketAddr>) -> Self {
        self.tcp = tcp;
        self
    }

    /// Records the TLS address.
    pub fn with_tls(mut self, tls: Option<SocketAddr>) -> Self {
        self.tls = tls;
        self
    }

    /// The bound TLS address, when TLS is on.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls
    }

    /// Stops the threads and waits for them.
    pub fn shutdown(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    /// Waits for the threads (they run until the process ends).
    pub fn wait(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn bind_reuseport(addr: SocketAddr) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_port(true)?;
    // Large buffers absorb bursts under load.
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    s.bind(&addr.into())?;
    let u: UdpSocket = s.into();
    u.set_read_timeout(Some(POLL))?;
    Ok(u)
}

/// Bound UDP sockets, one per worker, ready to start.
#[derive(Debug)]
pub struct UdpServer {
    addr: SocketAddr,
    sockets: Vec<UdpSocket>,
}

impl UdpServer {
    /// Binds `workers` SO_REUSEPORT sockets on `addr` (port 0 picks one port for all).
    ///
    /// A plain bind comes first so that a port already in use, even by
    /// another sipsec with SO_REUSEPORT, is reported instead of shared.
    pub fn bind(addr: SocketAddr, workers: usize) -> io::Result<Self> {
        let probe = UdpSocket::bind(addr)?;
        let addr = probe.local_addr()?;
        drop(probe);
        let first = bind_reuseport(addr)?;
        let addr = first.local_addr()?;
        let mut sockets = vec![first];
        for _ in 1..workers.max(1) {
            sockets.push(bind_reuseport(addr)?);
        }
        Ok(Self { addr, sockets })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// A handle on the first socket, for sending from other threads.
    pub fn sender(&self) -> io::Result<UdpSocket> {
        self.sockets[0].try_clone()
    }

    /// Starts one worker per socket (journal `i` goes to worker `i`).
    pub fn start(
        self,
        shared: Arc<Shared>,
        journals: Vec<Option<SharedJournal>>,
        hub: Option<Arc<TcpHub>>,
        stop: Arc<AtomicBool>,
        mut threads: Vec<JoinHandle<()>>,
    ) -> io::Result<ServerHandle> {
        let mut journals = journals.into_iter();
        for (i, sock) in self.sockets.into_iter().enumerate() {
            let stop = stop.clone();
            let hub = hub.clone();
            let journal = journals.next().flatten();
            let core = Core::new(shared.clone(), journal);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("udp-{i}"))
                    .spawn(move || worker(sock, core, &stop, hub.as_ref()))?,
            );
        }
        Ok(ServerHandle {
            addr: self.addr,
            tcp: None,
            tls: None,
            http: None,
            stop,
            threads,
            shared,
        })
    }
}

fn worker(sock: UdpSocket, mut core: Core, stop: &AtomicBool, hub: Option<&Arc<TcpHub>>) {
    let mut rx = RecvBatch::new();
    let mut tx = SendBatch::default();
    while !stop.load(Ordering::Relaxed) {
        // Timeouts let the loop see `stop`; ICMP errors from earlier sends
        // also surface here on Linux: keep serving.
        let Ok(n) = rx.recv(&sock) else { continue };
        let now = now();
        for i in 0..n {
            let Some((data, src)) = rx.get(i) else {
                continue;
            };
            let out = tx.next_buf();
            let reply = core.handle(data, src, Transport::Udp, now, out);
            // What the core produced besides its reply goes first, so that a
            // 100 Trying reaches the caller before the forwarded INVITE can
            // draw an answer (stateful mode only; rare and small).
            let metrics = &core.shared().metrics;
            for (bytes, (dest, transport)) in core.extra().iter() {
                match transport {
                    Transport::Udp => {
                        metrics.sent(bytes);
                        let _ = sock.send_to(bytes, dest);
                    }
                    t => {
                        if let Some(hub) = hub {
                            let _ = hub.send(dest, t, bytes);
                        }
                    }
                }
            }
            match reply {
                Reply::Send(dest, Transport::Udp) => {
                    core.shared().metrics.sent(out);
                    tx.commit(dest);
                }
                Reply::Send(dest, t) => {
                    if let Some(hub) = hub {
                        let _ = hub.send(dest, t, out);
                    }
                }
                Reply::Drop => {}
            }
        }
        tx.flush(&sock);
    }
}
