//! UDP transport: one socket per worker thread, bound with SO_REUSEPORT
//! so the kernel spreads datagrams across workers; buffers are reused.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::core::{Core, Reply};

/// Largest datagram accepted (RFC 3261 §18.1.1 allows up to 65,535 bytes).
const MAX_DATAGRAM: usize = 65_535;

/// How often an idle worker checks for shutdown.
const POLL: Duration = Duration::from_millis(200);

/// A running UDP server.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
}

impl ServerHandle {
    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the workers and waits for them.
    pub fn shutdown(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }

    /// Waits for the workers (they run until the process ends).
    pub fn wait(mut self) {
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// Binds UDP sockets and starts workers.
#[derive(Debug, Clone)]
pub struct UdpServer {
    addr: SocketAddr,
    workers: usize,
}

fn bind_reuseport(addr: SocketAddr) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    // Large buffers absorb bursts under load.
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    s.bind(&addr.into())?;
    let u: UdpSocket = s.into();
    u.set_read_timeout(Some(POLL))?;
    Ok(u)
}

impl UdpServer {
    /// A server for `addr` with `workers` threads (at least one).
    pub fn new(addr: SocketAddr, workers: usize) -> Self {
        Self {
            addr,
            workers: workers.max(1),
        }
    }

    /// Binds every worker's socket, then starts the workers.
    pub fn start(&self) -> io::Result<ServerHandle> {
        let first = bind_reuseport(self.addr)?;
        let addr = first.local_addr()?;
        let mut sockets = vec![first];
        for _ in 1..self.workers {
            sockets.push(bind_reuseport(addr)?);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let workers = sockets
            .into_iter()
            .enumerate()
            .map(|(i, sock)| {
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name(format!("udp-{i}"))
                    .spawn(move || worker(sock, &stop))
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(ServerHandle {
            addr,
            stop,
            workers,
        })
    }
}

fn worker(sock: UdpSocket, stop: &AtomicBool) {
    let mut core = Core::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut out = Vec::with_capacity(MAX_DATAGRAM);
    while !stop.load(Ordering::Relaxed) {
        let (n, src) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            // ICMP errors from earlier sends surface here on Linux; keep serving.
            Err(_) => continue,
        };
        out.clear();
        if core.handle(&buf[..n], src, &mut out) == Reply::Send {
            let _ = sock.send_to(&out, src);
        }
    }
}
