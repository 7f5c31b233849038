//! UDP transport: one socket per worker thread, bound with SO_REUSEPORT,
//! datagrams spread over them by sender (or by Call-ID, or at random, or
//! one socket all workers read: [`UdpBalance`]); each worker moves datagrams in batches
//! (recvmmsg/sendmmsg) through reused buffers.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::UdpBalance;
use crate::io::drive::{Deferred, Held, Storage};
use crate::io::pace::Pacer;
use crate::io::send::{Connections, Sender};
use crate::io::sinks::Sinks;
use crate::io::tcp::shared::TcpHub;
use crate::io::udp_xdp::XdpPort;
use crate::io::wake::Wakers;
use crate::proto::core::{Core, Reply, Transport};
use crate::proto::shared::{Now, Shared};
use sip_udp::xdp::Steering;
use sip_udp::{RecvBatch, SendBatch, BATCH};

fn bind_reuseport(addr: SocketAddr, icmp_errors: bool) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_port(true)?;
    // Large buffers absorb bursts under load.
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    s.bind(&addr.into())?;
    // No read timeout: a worker sleeps until a datagram comes, and the
    // stop wakes it by shutting the socket's receiving side down.
    let s: UdpSocket = s.into();
    if icmp_errors {
        sip_udp::report_errors(&s, addr.is_ipv6())?;
    }
    Ok(s)
}

/// Bound UDP sockets, ready to start: one per worker, or one all share.
#[derive(Debug)]
pub struct UdpServer {
    addr: SocketAddr,
    sockets: Vec<Arc<UdpSocket>>,
    workers: usize,
    /// Whether the group is steered by Call-ID (`UdpBalance::Call` in
    /// effect).
    by_call: bool,
}

impl UdpServer {
    /// Binds the workers' SO_REUSEPORT sockets on `addr` (port 0 picks
    /// one port for all; one socket for all with [`UdpBalance::Shared`]),
    /// reporting ICMP errors if `icmp_errors` (a stateful proxy's
    /// transactions fail on them; see `Sender::udp_errors`).
    ///
    /// A plain bind comes first so that a port already in use, even by
    /// another sipsec with SO_REUSEPORT, is reported instead of shared.
    pub fn bind(
        addr: SocketAddr,
        workers: usize,
        icmp_errors: bool,
        balance: UdpBalance,
    ) -> io::Result<Self> {
        let workers = workers.max(1);
        let probe = UdpSocket::bind(addr)?;
        let addr = probe.local_addr()?;
        drop(probe);
        let first = bind_reuseport(addr, icmp_errors)?;
        let addr = first.local_addr()?;
        let mut sockets = vec![first];
        if balance != UdpBalance::Shared {
            for _ in 1..workers {
                sockets.push(bind_reuseport(addr, icmp_errors)?);
            }
        }
        if balance == UdpBalance::Spread && workers > 1 {
            if let Err(e) = sip_udp::steer_at_random(&sockets[0], workers as u32) {
                crate::io::log::udp_spread_unavailable(&e);
            }
        }
        let mut by_call = false;
        if balance == UdpBalance::Call && workers > 1 {
            // The group holds the program once attached.
            let attached = sip_udp::CallSteering::load(workers as u32).and_then(|program| {
                program.attach(&sockets[0])?;
                Ok(program.bound())
            });
            match attached {
                Ok(bound) => {
                    crate::io::log::udp_call_on(bound.name());
                    by_call = true;
                }
                Err(e) => crate::io::log::udp_call_unavailable(&e),
            }
        }
        Ok(Self {
            addr,
            sockets: sockets.into_iter().map(Arc::new).collect(),
            workers,
            by_call,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// A handle on every worker's socket, to wake the workers at stop
    /// (see `server::wake_sockets`).
    pub fn wakers(&self) -> io::Result<Vec<Socket>> {
        self.sockets
            .iter()
            .map(|s| s.try_clone().map(Socket::from))
            .collect()
    }

    /// A handle on the first socket, for sending from other threads.
    pub fn sender(&self) -> io::Result<UdpSocket> {
        self.sockets[0].try_clone()
    }

    /// Starts the workers (journal `i` goes to worker `i`), adding their
    /// threads to `threads`; each traces through the `Sinks`.
    pub fn start(
        self,
        (shared, sinks): (&Arc<Shared>, &Sinks),
        storages: Vec<Storage>,
        hub: Option<&Arc<TcpHub>>,
        wakers: &Arc<Wakers>,
        stop: &Arc<AtomicBool>,
        threads: &mut Vec<JoinHandle<()>>,
    ) -> io::Result<()> {
        let mut storages = storages.into_iter();
        let by_call = u64::from(self.by_call);
        shared
            .metrics
            .udp_steered_by_call
            .store(by_call, Ordering::Relaxed);
        let steering = shared
            .config
            .udp_xdp
            .as_deref()
            .and_then(|iface| steer(iface, self.addr));
        for i in 0..self.workers {
            let stop = stop.clone();
            let sock = self.sockets[i % self.sockets.len()].clone();
            let sender = Sender::new(
                shared.clone(),
                sinks.clone(),
                Some(sock.clone()),
                hub.map(|h| Arc::new(h.clone()) as Arc<dyn Connections>),
                wakers.clone(),
            );
            let storage = storages.next().unwrap_or(Storage::Memory);
            let core = Core::new(shared.clone());
            let xdp = steering.as_ref().and_then(|s| open_port(s, i));
            let inbox = Inbox {
                socket: RecvBatch::new(),
                xdp: xdp.map(|port| (port, steering.clone())),
                from_xdp: false,
                xdp_taken: 0,
            };
            threads.push(
                std::thread::Builder::new()
                    .name(format!("udp-{i}"))
                    .spawn(move || worker(i, &sock, inbox, core, storage, &stop, &sender))?,
            );
        }
        Ok(())
    }
}

/// Most binding changes a worker gathers for one round trip to a shared
/// store.
const MAX_DEFERRED: usize = 8 * BATCH;

fn worker(
    index: usize,
    sock: &UdpSocket,
    mut rx: Inbox,
    mut core: Core,
    mut storage: Storage,
    stop: &AtomicBool,
    sender: &Sender,
) {
    let mut tx = SendBatch::default();
    let mut deferred = Deferred::default();
    let mut scratch = Vec::new();
    let (mut pacer, mut wait_until) = (Pacer::new(core.shared().config.batch_wait), None);
    while !stop.load(Ordering::Relaxed) {
        crate::io::pace::wait(wait_until.take(), core.shared());
        let mut n = if deferred.sending() {
            // A batch is with a shared store: handle what arrived meanwhile
            // while it works, or, if nothing did, answer that batch now.
            match rx.recv_queued(sock) {
                Ok(n) if n > 0 => {
                    core.shared().metrics.udp_worker_received(index, n);
                    n
                }
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => {
                    sender.udp_errors();
                    continue;
                }
                _ => {
                    deferred.receive(&mut core, &mut storage.hold());
                    answer_stored(&mut deferred, (&mut rx, &mut tx), sock, sender);
                    let mut ctx = (&mut rx, &mut tx, sock, &mut scratch);
                    answer_woken(&mut core, &mut storage, &mut deferred, &mut ctx, sender);
                    continue;
                }
            }
        } else {
            // ICMP errors from earlier sends surface here: read them and
            // serve on. The stop's shutdown returns at once.
            match rx.recv(sock) {
                Ok(n) => {
                    core.shared().metrics.udp_worker_received(index, n);
                    wait_until = pacer.read(Instant::now(), n, n == BATCH);
                    n
                }
                Err(_) => {
                    sender.udp_errors();
                    continue;
                }
            }
        };
        let mut held = storage.hold();
        // Bounded in system calls, not only in changes: a flood of other
        // requests must not hold the changes' answers back.
        let mut rounds = 1;
        loop {
            let now = crate::io::clock::now();
            for i in 0..n {
                let Some((data, src)) = rx.get(i) else {
                    continue;
                };
                // A media relay answers the commands this socket sent:
                // what waited on it goes on here, no other thread woken.
                if let Some(released) = sender.relay_answer(data, src) {
                    for (p, outcome) in released {
                        crate::io::drive::hand_in_and_send(
                            &mut core,
                            sender,
                            &p,
                            Some(outcome),
                            &mut scratch,
                        );
                    }
                    continue;
                }
                let out = tx.next_buf();
                let sinks = sender.sinks();
                let reply = decide(
                    &mut core,
                    sinks,
                    (&mut held, &mut deferred),
                    data,
                    src,
                    now,
                    out,
                );
                // What the core produced besides its reply goes first, so that a
                // 100 Trying reaches the caller before the forwarded INVITE can
                // draw an answer (stateful mode only; rare and small).
                sender.send_all(core.extra());
                match reply {
                    Reply::Send(dest, Transport::Udp) => {
                        sender.leaving_answer(out, dest, Transport::Udp, core.answered());
                        tx.commit(dest);
                    }
                    other => sender.reply(other, out, core.sent_key()),
                }
            }
            // Over a shared store, a full batch means more are queued: take
            // them too (answering what needs no store now), so that one round
            // trip carries up to MAX_DEFERRED changes (read in as many
            // datagrams) instead of waiting once per system call's worth.
            if !(held.batches() && n == BATCH && rounds * BATCH < MAX_DEFERRED) {
                break;
            }
            rounds += 1;
            if rx.flush(&mut tx, sock, sender) {
                sender.udp_errors();
            }
            match rx.recv_queued(sock) {
                Ok(more) if more > 0 => {
                    core.shared().metrics.udp_worker_received(index, more);
                    n = more;
                }
                Ok(_) => break,
                Err(_) => {
                    sender.udp_errors();
                    break;
                }
            }
        }
        // The batch sent before is answered, and this one sent: Redis
        // stores it while the next is read and handled (a journal stores
        // it here).
        deferred.send(&mut core, &mut held);
        drop(held);
        answer_stored(&mut deferred, (&mut rx, &mut tx), sock, sender);
        let mut ctx = (&mut rx, &mut tx, sock, &mut scratch);
        answer_woken(&mut core, &mut storage, &mut deferred, &mut ctx, sender);
    }
    // Stopping: what is with the store is still answered.
    if deferred.sending() {
        deferred.receive(&mut core, &mut storage.hold());
        answer_stored(&mut deferred, (&mut rx, &mut tx), sock, sender);
    }
    let mut ctx = (&mut rx, &mut tx, sock, &mut scratch);
    answer_woken(&mut core, &mut storage, &mut deferred, &mut ctx, sender);
}

/// Decides one datagram. Over a shared store its binding change waits in
/// `deferred` with its answer, for one round trip per batch; otherwise it
/// is stored before the answer leaves.
#[inline]
fn decide(
    core: &mut Core,
    sinks: &Sinks,
    (held, deferred): (&mut Held<'_>, &mut Deferred),
    data: &[u8],
    src: SocketAddr,
    now: Now,
    out: &mut Vec<u8>,
) -> Reply {
    let transport = Transport::Udp;
    if held.batches() {
        crate::io::drive::handle_deferring(core, sinks, deferred, data, src, transport, now, out)
    } else {
        crate::io::drive::handle(core, sinks, Some(held), data, src, transport, now, out)
    }
}

/// Hands in again the messages that waited on an AoR whose change this
/// worker finished (see `proto/busy.rs`), and sends what they draw. A
/// batch still with the store (Redis) is answered first: what waited is
/// stored by itself, on a connection with nothing else in flight.
fn answer_woken(
    core: &mut Core,
    storage: &mut Storage,
    deferred: &mut Deferred,
    (rx, tx, sock, out): &mut (&mut Inbox, &mut SendBatch, &UdpSocket, &mut Vec<u8>),
    sender: &Sender,
) {
    if !core.has_woken() {
        return;
    }
    if deferred.sending() {
        deferred.receive(core, &mut storage.hold());
        answer_stored(deferred, (rx, tx), sock, sender);
    }
    let mut held = storage.hold();
    let now = crate::io::clock::now();
    crate::io::drive::woken(
        core,
        sender.sinks(),
        &mut held,
        now,
        out,
        |core, reply, out| {
            sender.send_all(core.extra());
            sender.reply(reply, out, core.sent_key());
        },
    );
}

/// Sends the answers of the changes `deferred` finished.
fn answer_stored(
    deferred: &mut Deferred,
    (rx, tx): (&mut Inbox, &mut SendBatch),
    sock: &UdpSocket,
    sender: &Sender,
) {
    deferred.send_ready(|reply, out| match reply {
        Reply::Send(dest, Transport::Udp) => {
            sender.leaving(out, dest, Transport::Udp);
            tx.next_buf().extend_from_slice(out);
            tx.commit(dest);
        }
        other => sender.reply(other, out, None),
    });
    if rx.flush(tx, sock, sender) {
        sender.udp_errors();
    }
}

/// Attaches the program steering the UDP port's datagrams on `iface`
/// to AF_XDP sockets; `None` (said in the log) where it cannot.
fn steer(iface: &str, addr: SocketAddr) -> Option<Arc<Steering>> {
    let unavailable = |why: &str| {
        crate::io::log::udp_xdp_unavailable(iface, why);
        None
    };
    // Only datagrams for this host's own addresses: a host that forwards
    // traffic must not take what passes through to others.
    let addrs = match addr {
        SocketAddr::V4(a) if !a.ip().is_unspecified() => vec![*a.ip()],
        SocketAddr::V4(_) => match sip_udp::xdp::interface_ipv4(iface) {
            Ok(a) if a.is_empty() => return unavailable("the interface has no IPv4 address"),
            Ok(a) => a.into_iter().take(16).collect(),
            Err(e) => return unavailable(&e.to_string()),
        },
        SocketAddr::V6(_) => {
            return unavailable("the UDP address is IPv6; AF_XDP here carries IPv4")
        }
    };
    match Steering::attach(iface, addr.port(), &addrs) {
        Ok(s) => {
            crate::io::log::udp_xdp_past_the_firewall(iface, addr.port());
            Some(Arc::new(s))
        }
        Err(e) => unavailable(&e.to_string()),
    }
}

/// Worker `i`'s AF_XDP socket, on receive queue `i`; workers past the
/// interface's queues stay on their sockets.
fn open_port(steering: &Steering, i: usize) -> Option<XdpPort> {
    let queue = u32::try_from(i).ok()?;
    match XdpPort::open(steering, queue) {
        Ok(p) => {
            crate::io::log::udp_xdp_on(steering.interface(), queue);
            Some(p)
        }
        // No such queue: the interface has fewer than the workers.
        Err(e) if i > 0 && e.kind() == io::ErrorKind::InvalidInput => None,
        Err(e) => {
            crate::io::log::udp_xdp_unavailable(steering.interface(), &e.to_string());
            None
        }
    }
}

/// Where a worker reads: its socket and, with `udp_xdp`, the AF_XDP
/// socket beside it, the two taken in turn while both have datagrams.
struct Inbox {
    socket: RecvBatch,
    /// The port, and the steering kept attached while a worker uses it.
    xdp: Option<(XdpPort, Option<Arc<Steering>>)>,
    /// Whether the last batch came from the AF_XDP socket.
    from_xdp: bool,
    /// Datagrams it took since the metrics last counted them.
    xdp_taken: u64,
}

impl Inbox {
    /// Waits for datagrams (until the socket is shut down, at stop) and
    /// takes a batch.
    fn recv(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        let Some((port, _)) = &mut self.xdp else {
            return self.socket.recv(sock);
        };
        if !port.ready() {
            let n = self.socket.recv_queued(sock)?;
            if n > 0 {
                self.from_xdp = false;
                return Ok(n);
            }
        }
        if !port.ready() {
            // Either may bring the next datagram; a shut-down socket
            // reads as ready, and the caller then sees the stop.
            let fds = [port.fd(), std::os::fd::AsRawFd::as_raw_fd(sock)];
            sip_udp::wait_any(&fds, std::time::Duration::from_secs(1));
        }
        self.recv_queued(sock)
    }

    /// Takes the datagrams already waiting, the AF_XDP socket's and the
    /// UDP socket's in turn: after a batch from one, the other goes first.
    fn recv_queued(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        let Some((port, _)) = &mut self.xdp else {
            return self.socket.recv_queued(sock);
        };
        if self.from_xdp {
            let n = self.socket.recv_queued(sock)?;
            if n > 0 {
                self.from_xdp = false;
                return Ok(n);
            }
        }
        let n = port.take();
        self.xdp_taken += n as u64;
        self.from_xdp = n > 0;
        if n > 0 {
            return Ok(n);
        }
        self.socket.recv_queued(sock)
    }

    /// Datagram `i` of the last batch and its source.
    fn get(&self, i: usize) -> Option<(&[u8], SocketAddr)> {
        match &self.xdp {
            Some((port, _)) if self.from_xdp => port.get(i),
            _ => self.socket.get(i),
        }
    }

    /// Sends what `tx` holds: answers to peers seen on the AF_XDP socket
    /// that way, the rest on the UDP socket. True when a socket send
    /// failed (errors may be queued on it).
    fn flush(&mut self, tx: &mut SendBatch, sock: &UdpSocket, sender: &Sender) -> bool {
        if let Some((port, _)) = &mut self.xdp {
            // Counted before they leave: whoever reads an answer reads
            // counts that include it.
            let sent = port.queue_from(tx);
            let metrics = sender.metrics();
            let taken = std::mem::take(&mut self.xdp_taken);
            metrics.xdp_received.fetch_add(taken, Ordering::Relaxed);
            metrics.xdp_sent.fetch_add(sent, Ordering::Relaxed);
            let discarded = port.take_discarded();
            if discarded > 0 {
                metrics
                    .xdp_discarded
                    .fetch_add(discarded, Ordering::Relaxed);
            }
            let dropped = port.take_dropped(Instant::now());
            if dropped > 0 {
                metrics.xdp_dropped.fetch_add(dropped, Ordering::Relaxed);
            }
            port.send();
        }
        tx.flush(sock)
    }
}
