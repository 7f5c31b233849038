//! The load engine: worker threads, each with its own UDP socket and its
//! share of the calls, driving every call through its scenario with
//! RFC 3261 retransmissions and timeouts from sip-core's client transaction
//! machines (timers A/E from T1 = 500 ms, B/F at 64·T1).

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sip_core::transaction::{Client, TimerConfig};
use sip_core::writer::write_u64;
use sip_core::StatusCode;

use crate::flows::Flows;
use crate::link::{Link, Transport};
use crate::scenario::{Branch, Cseq, Scenario, Send, Step};
use crate::stats::Latency;
use crate::timers::Timers;
use answer::Answer;

mod answer;
mod caller;
use caller::caller;
mod dialog;
use dialog::{capture, dialog, Captured};
mod cause;
mod handoff;
use cause::failure_cause;
use handoff::{owner_of, shared_links, steered_links, Handoff};
mod unreachable;
mod write;
use write::Ctx;

/// RFC 3261 T1 (sip-core's timers, not a copy).
pub const T1: Duration = TimerConfig::RFC3261.t1;
/// RFC 3261 T2.
pub const T2: Duration = TimerConfig::RFC3261.t2;
/// Transaction timeout (64·T1).
pub const TIMEOUT: Duration = Duration::from_millis(64 * T1.as_millis() as u64);

/// Calls started per loop turn at most.
const START_BURST: usize = 16;
/// Datagrams read per loop turn at most.
const RECV_BURST: usize = 64;

/// How calls are started.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shape {
    /// Open loop: this many new calls per second.
    Rate(f64),
    /// Closed loop: keep this many calls in flight.
    InFlight(usize),
}

/// A user to call as, from a CSV of `username,password`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Name.
    pub name: String,
    /// Password (only for computing digests).
    pub password: String,
}

/// The user parts one call shows instead of the user's and the service's
/// names: PrivaSIP pseudonyms, made before the run so that their cost is
/// the phone's (measured by `bench privacy-prepare`), not the load's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallIds {
    /// `[caller]`: the From user and the digest `username=`.
    pub caller: String,
    /// `[callee]`: the Request-URI and To user.
    pub callee: String,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Run {
    /// The server.
    pub target: SocketAddr,
    /// Further servers sharing the load (nodes of one deployment):
    /// generator thread `i` sends to the `i mod n`-th of `target` and
    /// these.
    pub also: Vec<SocketAddr>,
    /// The flow.
    pub scenario: Scenario,
    /// Load shape.
    pub shape: Shape,
    /// Most calls to start.
    pub calls: u64,
    /// Longest time to keep starting calls.
    pub duration: Duration,
    /// Time allowed after the last start for calls to finish.
    pub drain: Duration,
    /// Worker threads.
    pub threads: usize,
    /// Flows per worker: UDP sockets or connections, each with its own
    /// local port; a caller keeps to one (user `u` on flow `u mod flows`).
    pub flows: usize,
    /// First local port (worker `i`'s flow `j` binds `port + i·flows +
    /// j`); 0 for ephemeral.
    pub local_port: u16,
    /// Callers, used in turn.
    pub users: Vec<User>,
    /// UDP, TCP or TLS.
    pub transport: Transport,
    /// TLS client configuration (CAs trusted), for `Transport::Tls`.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// TCP/TLS: a new connection for every call (one call at a time per
    /// thread, one flow), so each call pays the connection set-up and, over TLS,
    /// the full handshake: the server's private-key operation.
    pub connection_per_call: bool,
    /// Spin instead of sleeping when idle. With the generator on a core of
    /// its own, this keeps the kernel from charging the server for waking
    /// a sleeping generator on every response (an inter-processor wake-up,
    /// costly in a VM), so the server's CPU is the server's work.
    pub busy_poll: bool,
    /// UDP: every worker sends and reads on worker 0's sockets, so one
    /// flow (one local port) carries what several threads generate — the
    /// load of one busy peer beyond what one thread makes. A worker that
    /// reads another's response hands it over. Over UDP each worker has
    /// a socket on each such port, steered by Call-ID where the kernel
    /// can (see [`crate::link::udp_group`]).
    pub share_flows: bool,
    /// With `share_flows` over UDP: one socket every worker reads (the
    /// reader hands over what is another's) even where the kernel could
    /// steer, to compare the two.
    pub one_shared_socket: bool,
    /// Per call number, the IDs it shows (none: the plain names). A run
    /// with more calls than entries reuses them in turn.
    pub ids: Option<std::sync::Arc<Vec<CallIds>>>,
}

impl Run {
    /// The server generator thread `thread` sends to.
    pub fn target_for(&self, thread: usize) -> SocketAddr {
        match thread % (1 + self.also.len()) {
            0 => self.target,
            i => self.also[i - 1],
        }
    }
}

/// One second of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Second {
    /// Calls started.
    pub started: u64,
    /// Calls completed successfully.
    pub ok: u64,
    /// Calls failed.
    pub failed: u64,
    /// Requests retransmitted.
    pub retransmissions: u64,
}

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Calls started.
    pub started: u64,
    /// Calls completed successfully.
    pub ok: u64,
    /// Failed calls by cause.
    pub failures: BTreeMap<String, u64>,
    /// Requests retransmitted.
    pub retransmissions: u64,
    /// Responses that matched no step (stray retransmissions and the like).
    pub unexpected: u64,
    /// Latency of successful calls (sum of their timed legs).
    pub latency: Latency,
    /// Per second, from the start.
    pub seconds: Vec<Second>,
    /// From the first start to the last completion.
    pub elapsed: Duration,
    /// Bytes the generator's links moved (both directions counted apart).
    pub wire: crate::link::Wire,
    /// Shared flows: responses one thread read for another's call and
    /// handed over.
    pub handed_over: u64,
    /// Shared UDP flows: each thread had a socket on the flow's port,
    /// the kernel steering responses by Call-ID.
    pub steered: bool,
    /// Shared UDP flows that could not be steered: why (the kernel
    /// refused the program, say), the threads then sharing one socket.
    pub unsteered: Option<String>,
}

impl Outcome {
    /// Failed calls.
    pub fn failed(&self) -> u64 {
        self.failures.values().sum()
    }

    fn merge(&mut self, o: Outcome) {
        self.started += o.started;
        self.ok += o.ok;
        for (k, v) in o.failures {
            *self.failures.entry(k).or_default() += v;
        }
        self.retransmissions += o.retransmissions;
        self.unexpected += o.unexpected;
        self.latency.merge(&o.latency);
        if self.seconds.len() < o.seconds.len() {
            self.seconds.resize(o.seconds.len(), Second::default());
        }
        for (a, b) in self.seconds.iter_mut().zip(o.seconds) {
            a.started += b.started;
            a.ok += b.ok;
            a.failed += b.failed;
            a.retransmissions += b.retransmissions;
        }
        self.elapsed = self.elapsed.max(o.elapsed);
        self.wire += o.wire;
        self.handed_over += o.handed_over;
        self.steered |= o.steered;
    }
}

/// Counters the progress display reads while a run goes on.
#[derive(Debug, Default)]
pub struct Live {
    /// Calls started.
    pub started: AtomicU64,
    /// Calls succeeded.
    pub ok: AtomicU64,
    /// Calls failed.
    pub failed: AtomicU64,
    /// 99th percentile latency so far, µs (the highest of the workers').
    pub p99_us: AtomicU64,
}

#[derive(Debug)]
struct Call {
    number: u64,
    slot: usize,
    /// The worker's flow the call goes over.
    flow: usize,
    step: usize,
    user: usize,
    leg_start: Instant,
    latency: Duration,
    cseq: u32,
    branch: u32,
    method: &'static str,
    txn_start: Instant,
    /// The request's client transaction (sip-core's RFC 3261 §17.1
    /// machine: retransmissions and its timeout), until its final answer.
    txn: Option<Client>,
    generation: u32,
    last: Vec<u8>,
    peer_tag: String,
    /// With a steered shared flow, what ends the Call-ID so that it
    /// hashes to this worker's socket.
    nonce: Option<u32>,
    challenge: Option<Captured>,
    /// The dialog's route set (a `Route:` line) and remote target, from
    /// the 2xx to the INVITE (RFC 3261 §12.1.2).
    route: String,
    target: String,
}

/// When a transaction's timer next fires: its machine's next deadline,
/// and never past the transaction timeout from `start` (an INVITE that
/// only rang would otherwise wait for ever).
fn deadline(txn: &Client, start: Instant) -> Instant {
    let limit = start + TIMEOUT;
    txn.next_deadline().map_or(limit, |d| d.min(limit))
}

struct Worker<'a> {
    run: &'a Run,
    id: usize,
    /// The server this worker loads.
    target: SocketAddr,
    flows: Flows,
    remote: String,
    run_id: u32,
    slots: Vec<Option<Call>>,
    free: Vec<usize>,
    /// Pending timers: the slot and the generation they were set for.
    timers: Timers<Instant, (usize, u32)>,
    out: Vec<u8>,
    scratch: Vec<u8>,
    outcome: Outcome,
    start: Instant,
    live: &'a Live,
    active: usize,
    /// Timer generations, unique across the worker's calls: a slot reused
    /// by a new call must not inherit the old call's pending timers.
    generations: u32,
    /// Messages received in this loop turn, back to back, and their ends.
    inbox: Vec<u8>,
    ends: Vec<usize>,
    /// The link has carried a call (connection-per-call mode).
    used: bool,
    /// With shared flows, every worker's responses read by another.
    handoffs: &'a [Handoff],
    /// With a shared flow steered by Call-ID, the sockets in its group
    /// (each worker's Call-IDs hash to its own); 0 otherwise.
    steered: u32,
    /// Workers of a steered group done with their calls.
    group_done: &'a std::sync::atomic::AtomicUsize,
}

/// Runs `run`, updating `live` as it goes; stops early when `stop` is set.
pub fn execute(run: &Run, live: &Live, stop: &AtomicBool) -> io::Result<Outcome> {
    if run.users.is_empty() {
        return Err(io::Error::other("no users to call as"));
    }
    let threads = run.threads.max(1);
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let run_id = std::process::id().rotate_left(16) ^ clock;
    let per = run.flows.max(1);
    if per > 1 {
        // Each flow holds a descriptor (and an epoll watch).
        let needed = (threads * per) as u64 + 1024;
        let limit = sip_udp::raise_fd_limit_to(needed);
        if limit < needed {
            return Err(io::Error::other(format!(
                "{} flows need a descriptor limit of {needed}; this process may open {limit}: raise the hard limit (`ulimit -Hn`) or use fewer --flows",
                threads * per
            )));
        }
    }
    let ip = crate::link::source_for(run.target)?;
    let local = |i: usize, j: usize| -> io::Result<SocketAddr> {
        let port = if run.local_port == 0 {
            0
        } else {
            u16::try_from(usize::from(run.local_port) + i * per + j)
                .map_err(|_| io::Error::other("--local-port: the flows' ports run past 65535"))?
        };
        Ok(SocketAddr::new(ip, port))
    };
    let open_links = |i: usize| -> io::Result<Vec<Link>> {
        (0..per)
            .map(|j| {
                Link::open(
                    run.transport,
                    local(i, j)?,
                    run.target_for(i),
                    run.tls.as_ref(),
                )
                .map_err(|e| {
                    if per > 1 {
                        io::Error::new(e.kind(), format!("flow {j} of thread {i}: {e}"))
                    } else {
                        e
                    }
                })
            })
            .collect()
    };
    // Handles on the shared connections kept here, to count their bytes
    // once every thread is done with them.
    let mut watched = Vec::new();
    // One flow shared over UDP: a socket a thread on the flow's port,
    // each reading its own calls' responses, where the kernel steers by
    // Call-ID; else one socket all read, handing over what is another's.
    let steer =
        run.share_flows && !run.one_shared_socket && run.transport == Transport::Udp && threads > 1;
    let (groups, unsteered) = if steer {
        match steered_links((0..per).map(|j| local(0, j)), threads) {
            Ok(links) => (Some(links), None),
            Err(why) => (None, Some(why)),
        }
    } else {
        (None, None)
    };
    let steered = groups.is_some();
    let sockets = if let Some(links) = groups {
        links
    } else if run.share_flows {
        let links = shared_links(open_links(0)?, threads)?;
        for l in &links[0] {
            watched.extend(l.share()?.filter(|l| l.shared_wire().is_some()));
        }
        links
    } else {
        (0..threads)
            .map(open_links)
            .collect::<io::Result<Vec<_>>>()?
    };
    let handoffs: Vec<Handoff> = (0..threads)
        .filter(|_| run.share_flows)
        .map(|_| Handoff::new())
        .collect::<io::Result<_>>()?;
    let sockets = sockets
        .into_iter()
        .enumerate()
        .map(|(i, links)| {
            let mut flows = Flows::new(links)?;
            if let Some(h) = handoffs.get(i) {
                flows.listen(&h.bell)?;
            }
            Ok(flows)
        })
        .collect::<io::Result<Vec<_>>>()?;
    let handoffs = &handoffs[..];
    let group_done = &std::sync::atomic::AtomicUsize::new(0);
    let start = Instant::now();
    let outcomes = std::thread::scope(|scope| {
        let handles: Vec<_> = sockets
            .into_iter()
            .enumerate()
            .map(|(id, flows)| {
                scope.spawn(move || {
                    let mut w = Worker {
                        run,
                        id,
                        flows,
                        target: run.target_for(id),
                        remote: run.target_for(id).to_string(),
                        run_id,
                        slots: Vec::new(),
                        free: Vec::new(),
                        timers: Timers::default(),
                        out: Vec::with_capacity(2048),
                        scratch: Vec::with_capacity(256),
                        outcome: Outcome::default(),
                        start,
                        live,
                        active: 0,
                        generations: 0,
                        inbox: Vec::new(),
                        ends: Vec::new(),
                        used: false,
                        handoffs,
                        steered: if steered { threads as u32 } else { 0 },
                        group_done,
                    };
                    w.go(threads, stop);
                    w.outcome
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect::<Vec<_>>()
    });
    let mut total = Outcome::default();
    for o in outcomes {
        total.merge(o);
    }
    for l in &watched {
        total.wire += l.shared_wire().unwrap_or_default();
    }
    total.unsteered = unsteered;
    Ok(total)
}

impl Worker<'_> {
    fn second(&mut self, now: Instant) -> &mut Second {
        let i = now.duration_since(self.start).as_secs() as usize;
        if self.outcome.seconds.len() <= i {
            self.outcome.seconds.resize(i + 1, Second::default());
        }
        &mut self.outcome.seconds[i]
    }

    fn go(&mut self, threads: usize, stop: &AtomicBool) {
        let quota = self.run.calls / threads as u64
            + u64::from((self.id as u64) < self.run.calls % threads as u64);
        let interval = match self.run.shape {
            Shape::Rate(r) => Duration::from_secs_f64(threads as f64 / r.max(0.001)),
            Shape::InFlight(_) => Duration::ZERO,
        };
        // Workers start staggered so their calls interleave evenly.
        let first = self.start + interval.mul_f64(self.id as f64 / threads as f64);
        let stop_starting = self.start + self.run.duration;
        let mut started = 0u64;
        let mut starts_ended: Option<Instant> = None;
        let mut buf = vec![0u8; crate::link::RECEIVE_BUFFER];
        let mut closed = Vec::new();
        loop {
            let now = Instant::now();
            let may_start = now < stop_starting && !stop.load(Ordering::Relaxed);
            // A few starts at a time, so that a generator running behind
            // its schedule still reads its socket before it overflows.
            let mut burst = 0;
            while may_start && started < quota && burst < START_BURST {
                let due = match self.run.shape {
                    Shape::Rate(_) => first + interval.mul_f64(started as f64) <= now,
                    Shape::InFlight(n) => self.active < n.div_ceil(threads),
                };
                if !due || (self.run.connection_per_call && self.active > 0) {
                    break;
                }
                let number = started * threads as u64 + self.id as u64;
                if self.run.connection_per_call && !self.fresh_link(now) {
                    started += 1;
                    continue;
                }
                self.start_call(number, now);
                started += 1;
                burst += 1;
            }
            let received = self.read(&mut buf, &mut closed);
            let handed = self.take_handoffs();
            let received = received + handed;
            let mut why = String::new();
            for &flow in &closed {
                why = self
                    .flows
                    .link(flow)
                    .error()
                    .unwrap_or_else(|| "connection closed by the server".to_owned());
                self.abandon(flow, Instant::now(), &why);
            }
            if self.flows.pick(0).is_none() {
                // Every connection is gone: the calls not started yet
                // cannot be, and fail for the same reason.
                let left = if may_start { quota - started } else { 0 };
                if left > 0 {
                    self.fail_unstarted(&format!("not started: {why}"), left, Instant::now());
                    started = quota;
                }
                break;
            }
            self.fire_timers(Instant::now());
            if burst == 0 && received == 0 && self.run.busy_poll {
                std::hint::spin_loop();
            } else if burst == 0 && received == 0 {
                // Idle: sleep until a response arrives or the next start or
                // timer is due (at most 50 ms, to notice `stop`).
                let mut next = now + Duration::from_millis(50);
                if may_start && started < quota {
                    if let Shape::Rate(_) = self.run.shape {
                        next = next.min(first + interval.mul_f64(started as f64));
                    }
                }
                if let Some((t, _)) = self.timers.peek() {
                    next = next.min(t);
                }
                let now = Instant::now();
                if next > now {
                    match self.handoffs.get(self.id) {
                        Some(h) => h.idle(&mut self.flows, next - now),
                        None => self.flows.wait(next - now),
                    }
                }
            }
            if started >= quota || !may_start {
                if self.active == 0 {
                    break;
                }
                // Drain: calls in flight get `drain` to finish.
                let ended = *starts_ended.get_or_insert(now);
                if now >= ended + self.run.drain {
                    self.abandon_all(now, "unfinished at the end of the run");
                    break;
                }
            }
        }
        if self.steered > 0 {
            self.serve_the_group(&mut buf, &mut closed, stop);
        }
        self.outcome.started = started;
        self.outcome.steered = self.steered > 0;
        self.outcome.elapsed = Instant::now().duration_since(self.start);
        self.outcome.wire = self.flows.wire();
    }

    /// Reads everything queued on the links, up to a batch, and handles
    /// it; returns how many messages came.
    fn read(&mut self, buf: &mut [u8], closed: &mut Vec<usize>) -> usize {
        let (inbox, ends) = (&mut self.inbox, &mut self.ends);
        inbox.clear();
        ends.clear();
        closed.clear();
        let received = self.flows.receive(
            buf,
            RECV_BURST,
            |m| {
                inbox.extend_from_slice(m);
                ends.push(inbox.len());
            },
            closed,
        );
        let inbox = std::mem::take(&mut self.inbox);
        let mut at = 0;
        for i in 0..self.ends.len() {
            let end = self.ends[i];
            self.on_message(&inbox[at..end]);
            at = end;
        }
        self.inbox = inbox;
        self.fail_unreachable();
        received
    }

    fn abandon_all(&mut self, now: Instant, cause: &str) {
        for i in 0..self.slots.len() {
            if self.slots[i].is_some() {
                self.fail(i, cause, now);
            }
        }
    }

    /// Counts `n` calls that could not start as started and failed for
    /// `cause` (the caller counts them in its `started`).
    fn fail_unstarted(&mut self, cause: &str, n: u64, now: Instant) {
        *self.outcome.failures.entry(cause.to_owned()).or_default() += n;
        self.second(now).started += n;
        self.second(now).failed += n;
        self.live.started.fetch_add(n, Ordering::Relaxed);
        self.live.failed.fetch_add(n, Ordering::Relaxed);
    }

    /// Fails the calls in flight over `flow`.
    fn abandon(&mut self, flow: usize, now: Instant, cause: &str) {
        for i in 0..self.slots.len() {
            if self.slots[i].as_ref().is_some_and(|c| c.flow == flow) {
                self.fail(i, cause, now);
            }
        }
    }

    /// Connection-per-call mode: replaces a used link with a new
    /// connection. `false` when the connect failed (counted as a failed
    /// call).
    fn fresh_link(&mut self, now: Instant) -> bool {
        if !self.used {
            self.used = true;
            return true;
        }
        self.flows.close();
        let local = SocketAddr::new(
            self.flows
                .link(0)
                .local_addr()
                .map_or(std::net::IpAddr::from([127, 0, 0, 1]), |a| a.ip()),
            0,
        );
        match Link::open(
            self.run.transport,
            local,
            self.target,
            self.run.tls.as_ref(),
        ) {
            Ok(link) => {
                self.flows.replace(link);
                true
            }
            Err(e) => {
                self.fail_unstarted(&format!("connect: {e}"), 1, now);
                false
            }
        }
    }

    fn start_call(&mut self, number: u64, now: Instant) {
        let threads = self.run.threads.max(1);
        let (user, flow) = caller(number, threads, self.run.users.len(), self.flows.len());
        // A caller keeps to its flow while it is open.
        let Some(flow) = self.flows.pick(flow) else {
            return self.fail_unstarted("no open connection", 1, now);
        };
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        self.slots[slot] = Some(Call {
            number,
            slot,
            flow,
            step: 0,
            user,
            leg_start: now,
            latency: Duration::ZERO,
            cseq: 0,
            branch: 0,
            method: "",
            txn_start: now,
            txn: None,
            generation: 0,
            last: Vec::new(),
            peer_tag: String::new(),
            nonce: None,
            challenge: None,
            route: String::new(),
            target: String::new(),
        });
        if self.steered > 0 {
            let nonce = write::steering_nonce(number, slot, self.id, self.run_id, self.steered);
            if let Some(c) = self.slots[slot].as_mut() {
                c.nonce = Some(nonce);
            }
        }
        self.active += 1;
        self.second(now).started += 1;
        self.live.started.fetch_add(1, Ordering::Relaxed);
        self.advance(slot, now);
    }

    /// Runs Send steps until the call waits for a response or ends.
    fn advance(&mut self, slot: usize, now: Instant) {
        loop {
            let Some(call) = self.slots[slot].as_ref() else {
                return;
            };
            match self.run.scenario.steps.get(call.step) {
                None => return self.succeed(slot, now),
                Some(Step::Expect(_)) => return,
                Some(Step::Send(s)) => {
                    if let Err(e) = self.send(slot, s, now) {
                        return self.fail(slot, &format!("send: {e}"), now);
                    }
                    if let Some(c) = self.slots[slot].as_mut() {
                        c.step += 1;
                    }
                }
            }
        }
    }

    fn send(&mut self, slot: usize, s: &Send, now: Instant) -> io::Result<()> {
        let run = self.run;
        let Some(call) = self.slots[slot].as_mut() else {
            return Ok(());
        };
        let flow = call.flow;
        if s.cseq == Cseq::Next {
            call.cseq += 1;
        }
        if s.branch == Branch::New {
            call.branch += 1;
        }
        if s.leg_start {
            call.leg_start = now;
        }
        let user = &run.users[call.user];
        let ids = run
            .ids
            .as_ref()
            .filter(|v| !v.is_empty())
            .map(|v| &v[(call.number % v.len() as u64) as usize]);
        let mut uri = std::mem::take(&mut self.scratch);
        uri.clear();
        let ctx = Ctx {
            call,
            user,
            ids,
            local: self.flows.local(call.flow),
            remote: &self.remote,
            run_id: self.run_id,
            worker: self.id,
            scenario: &run.scenario,
            method: s.method,
            uri: "",
            transport: run.transport.as_str(),
        };
        s.uri.render(&mut uri, |v, o| ctx.value(v, o));
        let uri_str = std::str::from_utf8(&uri).unwrap_or("");
        let ctx = Ctx {
            uri: uri_str,
            ..ctx
        };
        let out = &mut self.out;
        out.clear();
        out.extend_from_slice(s.method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(uri_str.as_bytes());
        out.extend_from_slice(b" SIP/2.0\r\n");
        s.headers.render(out, |v, o| ctx.value(v, o));
        out.extend_from_slice(b"Content-Length: ");
        write_u64(out, s.body.len() as u64);
        out.extend_from_slice(b"\r\n\r\n");
        out.extend_from_slice(s.body.as_bytes());
        self.scratch = uri;
        let sent = self.flows.send(flow, &self.out, self.target);
        self.generations = self.generations.wrapping_add(1);
        let generation = self.generations;
        let reliable = self.flows.link(flow).reliable();
        let call = self.slots[slot].as_mut().expect("call is live");
        if s.retransmit {
            call.method = s.method;
            call.txn_start = now;
            call.generation = generation;
            let txn = Client::new(s.method == "INVITE", now, reliable, TimerConfig::RFC3261);
            if !reliable {
                call.last.clear();
                call.last.extend_from_slice(&self.out);
            }
            let at = deadline(&txn, now);
            call.txn = Some(txn);
            self.timers.push(at, (slot, generation));
        }
        sent
    }

    fn on_message(&mut self, bytes: &[u8]) {
        let Some(msg) = Answer::read(bytes) else {
            // Unparseable, or a request to the generator (e.g. a BYE
            // from a callee): not ours.
            self.outcome.unexpected += 1;
            return;
        };
        let status = msg.status;
        if !self.handoffs.is_empty() {
            if let Some(h) = owner_of(msg.call_id)
                .filter(|w| *w != self.id)
                .and_then(|w| self.handoffs.get(w))
            {
                h.push(bytes.to_vec());
                self.outcome.handed_over += 1;
                return;
            }
        }
        let Some(slot) = self.slot_of(msg.call_id) else {
            self.outcome.unexpected += 1;
            return;
        };
        let now = Instant::now();
        let run = self.run;
        let steps = &run.scenario.steps;
        let call = self.slots[slot].as_mut().expect("slot_of checks");
        if msg.cseq.seq != call.cseq || msg.cseq.method.as_str() != call.method {
            // A retransmitted response to an earlier transaction.
            self.outcome.unexpected += 1;
            return;
        }
        if let (Some(txn), Some(code)) = (call.txn.as_mut(), StatusCode::new(status)) {
            // The machine moves on (a provisional stops INVITE
            // retransmissions; a final one ends them); its timers are
            // scheduled afresh, and a final answer ends the transaction.
            txn.on_response(code, now);
            self.generations = self.generations.wrapping_add(1);
            call.generation = self.generations;
            if status >= 200 {
                call.txn = None;
            } else {
                let at = deadline(txn, call.txn_start);
                self.timers.push(at, (slot, call.generation));
            }
        }
        // The first acceptable Expect from here, skipping optional ones.
        // A skipped optional response that would have ended a leg (a 180
        // overtaken by the 200) ends it here: the latest it can have come.
        let mut i = call.step;
        let mut skipped_leg_end = false;
        let matched = loop {
            match steps.get(i) {
                Some(Step::Expect(e)) if e.accepts(status) => break Some((i, *e)),
                Some(Step::Expect(e)) if e.optional => {
                    skipped_leg_end |= e.leg_end;
                    i += 1;
                }
                _ => break None,
            }
        };
        let Some((i, e)) = matched else {
            if status >= 200 {
                let whole = msg.whole(bytes);
                let Some(whole) = whole.as_ref() else {
                    return self.fail(slot, "a final answer that does not parse", now);
                };
                let cause = failure_cause(status, whole, &self.outcome.failures);
                return self.fail(slot, &cause, now);
            }
            self.outcome.unexpected += 1;
            return;
        };
        call.step = i + 1;
        if let Some(tag) = msg.to_tag {
            call.peer_tag.clear();
            call.peer_tag.push_str(";tag=");
            call.peer_tag.push_str(tag);
        }
        if let (true, Some(whole)) = (call.method == "INVITE", &msg.whole) {
            if (200..300).contains(&status) {
                dialog(whole, call);
            }
        }
        if e.leg_end || skipped_leg_end {
            call.latency += now.duration_since(call.leg_start);
        }
        if e.challenge {
            call.challenge = msg.whole.as_ref().and_then(capture);
            if call.challenge.is_none() {
                return self.fail(slot, "challenge without a usable digest offer", now);
            }
        }
        self.advance(slot, now);
    }

    /// Handles the responses other workers read for this one; returns
    /// how many.
    fn take_handoffs(&mut self) -> usize {
        let Some(h) = self.handoffs.get(self.id) else {
            return 0;
        };
        let messages = h.take();
        for m in &messages {
            match unreachable::as_quoted(m) {
                Some(q) => self.fail_quoted(q),
                None => self.on_message(m),
            }
        }
        messages.len()
    }

    fn slot_of(&self, call_id: &str) -> Option<usize> {
        // [call_id] is `NUMBER.SLOT.WORKER.RUN` in hex.
        let mut parts = call_id.split('.');
        let number = u64::from_str_radix(parts.next()?, 16).ok()?;
        let slot = usize::from_str_radix(parts.next()?, 16).ok()?;
        let live = self.slots.get(slot)?.as_ref()?;
        (live.number == number).then_some(slot)
    }

    fn fire_timers(&mut self, now: Instant) {
        while let Some((t, (slot, generation))) = self.timers.peek() {
            if t > now {
                return;
            }
            self.timers.pop();
            let Some(call) = self.slots.get_mut(slot).and_then(Option::as_mut) else {
                continue;
            };
            if call.generation != generation {
                continue;
            }
            if now.duration_since(call.txn_start) >= TIMEOUT {
                self.fail(slot, "timeout", now);
                continue;
            }
            let Some(txn) = call.txn.as_mut() else {
                continue;
            };
            let o = txn.on_timer(now);
            if o.timeout {
                self.fail(slot, "timeout", now);
                continue;
            }
            let at = deadline(txn, call.txn_start);
            self.timers.push(at, (slot, generation));
            if o.retransmit {
                let _ = self.flows.send(call.flow, &call.last, self.target);
                self.outcome.retransmissions += 1;
                self.second(now).retransmissions += 1;
            }
        }
    }

    fn end(&mut self, slot: usize) -> Option<Call> {
        let call = self.slots.get_mut(slot)?.take()?;
        self.free.push(slot);
        self.active -= 1;
        Some(call)
    }

    fn succeed(&mut self, slot: usize, now: Instant) {
        if let Some(call) = self.end(slot) {
            self.outcome.ok += 1;
            self.outcome
                .latency
                .record_us(call.latency.as_micros().min(u128::from(u64::MAX)) as u64);
            self.second(now).ok += 1;
            self.live.ok.fetch_add(1, Ordering::Relaxed);
            // Early too (after 1, 2, 4 … calls), so a slow run shows its
            // p99 from its first seconds, then every 1,024 calls.
            let ok = self.outcome.ok;
            if ok.is_multiple_of(1024) || (ok < 1024 && ok.is_power_of_two()) {
                let p99 = self.outcome.latency.quantile_us(0.99);
                self.live.p99_us.fetch_max(p99, Ordering::Relaxed);
            }
        }
    }

    fn fail(&mut self, slot: usize, cause: &str, now: Instant) {
        if self.end(slot).is_some() {
            *self.outcome.failures.entry(cause.to_owned()).or_default() += 1;
            self.second(now).failed += 1;
            self.live.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::net::UdpSocket;
    use std::sync::Arc;

    use sip_core::writer::{write_response, ResponseOptions};
    use sip_core::Message;
    use sip_core::StatusCode;

    /// A UDP responder that answers a 200 to each request `answer` lets
    /// through, keeping `state` for it; the state comes back at the end.
    fn responder<S: std::marker::Send + 'static>(
        stop: Arc<AtomicBool>,
        mut state: S,
        mut answer: impl FnMut(&mut S, &Message, SocketAddr) -> bool + std::marker::Send + 'static,
    ) -> (SocketAddr, std::thread::JoinHandle<S>) {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("socket");
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .expect("timeout");
        let addr = sock.local_addr().expect("addr");
        let t = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let mut out = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let Ok((n, src)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let m = Message::parse(&buf[..n]).expect("generator sends valid SIP");
                if !answer(&mut state, &m, src) {
                    continue;
                }
                out.clear();
                let tag = ResponseOptions {
                    to_tag: Some("t"),
                    ..Default::default()
                };
                write_response(&mut out, &m, StatusCode::OK, &tag);
                let _ = sock.send_to(&out, src);
            }
            state
        });
        (addr, t)
    }

    /// A responder that ignores the first copy of every request and
    /// answers its retransmission: RFC 3261 timer A/E at work.
    fn lossy_responder(
        stop: Arc<AtomicBool>,
    ) -> (SocketAddr, std::thread::JoinHandle<HashSet<String>>) {
        responder(stop, HashSet::new(), |seen, m, _| {
            // The first copy is "lost".
            !seen.insert(m.top_via().branch().unwrap_or("").to_owned())
        })
    }

    fn run(target: SocketAddr, calls: u64) -> Run {
        Run {
            target,
            also: Vec::new(),
            scenario: crate::scenario::built_in("register", false).expect("built in"),
            shape: Shape::Rate(200.0),
            calls,
            duration: Duration::from_secs(30),
            drain: Duration::from_secs(10),
            threads: 2,
            flows: 1,
            local_port: 0,
            users: crate::generated_users(10),
            transport: Transport::Udp,
            tls: None,
            connection_per_call: false,
            busy_poll: false,
            share_flows: false,
            one_shared_socket: false,
            ids: None,
        }
    }

    /// Which source ports each AoR (the To user) registered from.
    type Seen = std::collections::HashMap<String, HashSet<u16>>;

    fn recording_responder(stop: Arc<AtomicBool>) -> (SocketAddr, std::thread::JoinHandle<Seen>) {
        responder(stop, Seen::default(), |seen, m, src| {
            let user = m.to().uri().user().unwrap_or("").to_owned();
            seen.entry(user).or_default().insert(src.port());
            true
        })
    }

    #[test]
    fn a_phone_registers_from_one_socket_and_every_socket_carries_phones() {
        let stop = Arc::new(AtomicBool::new(false));
        let (addr, t) = recording_responder(stop.clone());
        let mut r = run(addr, 200);
        r.shape = Shape::Rate(2000.0);
        // 10 users over 3 threads (not a multiple) with 2 sockets each.
        (r.threads, r.flows) = (3, 2);
        let o = execute(&r, &Live::default(), &AtomicBool::new(false)).expect("runs");
        stop.store(true, Ordering::Relaxed);
        let seen = t.join().expect("responder");
        assert_eq!(o.ok, 200, "{:?}", o.failures);
        for (user, ports) in &seen {
            assert_eq!(ports.len(), 1, "{user} registered from {ports:?}");
        }
        let sockets: HashSet<u16> = seen.values().flatten().copied().collect();
        assert_eq!(sockets.len(), 6, "every thread's every socket: {sockets:?}");
    }

    #[test]
    fn lost_requests_are_retransmitted_after_t1() {
        let stop = Arc::new(AtomicBool::new(false));
        let (addr, t) = lossy_responder(stop.clone());
        let o = execute(&run(addr, 40), &Live::default(), &AtomicBool::new(false)).expect("runs");
        stop.store(true, Ordering::Relaxed);
        let _ = t.join();
        assert_eq!(o.ok, 40, "{:?}", o.failures);
        assert_eq!(o.retransmissions, 40, "one retransmission per call");
        // Each call waited T1 for its retransmission (a lower bound set by
        // the protocol, not a speed expectation).
        assert!(o.latency.quantile_us(0.0) >= 490_000);
        assert_eq!(o.seconds.iter().map(|s| s.retransmissions).sum::<u64>(), 40);
    }

    #[test]
    fn silence_is_a_timeout_after_the_drain() {
        // A bound socket that never answers.
        let mute = UdpSocket::bind("127.0.0.1:0").expect("socket");
        let mut r = run(mute.local_addr().expect("addr"), 4);
        r.drain = Duration::from_millis(1200);
        let o = execute(&r, &Live::default(), &AtomicBool::new(false)).expect("runs");
        assert_eq!(o.ok, 0);
        assert_eq!(o.failures.get("unfinished at the end of the run"), Some(&4));
        // T1 then 2·T1 passed within the drain: two retransmissions each.
        assert!(o.retransmissions >= 4, "{}", o.retransmissions);
    }

    /// One flow shared by three threads: every REGISTER leaves from one
    /// port, and where the kernel steers the group by Call-ID (Linux 5.17
    /// on) each response reaches the socket of the thread whose call it
    /// answers: none is handed over.
    #[test]
    fn a_shared_flow_is_one_port_and_each_thread_reads_its_own() {
        let stop = Arc::new(AtomicBool::new(false));
        let (addr, t) = responder(stop.clone(), HashSet::new(), |ports, _, src| {
            ports.insert(src.port());
            true
        });
        let mut r = run(addr, 120);
        (r.threads, r.share_flows, r.shape) = (3, true, Shape::Rate(2000.0));
        let o = execute(&r, &Live::default(), &AtomicBool::new(false)).expect("runs");
        stop.store(true, Ordering::Relaxed);
        let ports = t.join().expect("responder");
        assert_eq!(o.ok, 120, "{:?}", o.failures);
        assert_eq!(ports.len(), 1, "one flow: {ports:?}");
        let steerable = sip_udp::CallSteering::load(3).is_ok();
        assert_eq!(o.steered, steerable);
        if steerable {
            assert_eq!(o.handed_over, 0);
        }
        // Asked for one socket: all three read it, handing over.
        let stop = Arc::new(AtomicBool::new(false));
        let (addr, t) = responder(stop.clone(), HashSet::new(), |ports, _, src| {
            ports.insert(src.port());
            true
        });
        r.target = addr;
        r.one_shared_socket = true;
        let o = execute(&r, &Live::default(), &AtomicBool::new(false)).expect("runs");
        stop.store(true, Ordering::Relaxed);
        assert_eq!(t.join().expect("responder").len(), 1);
        assert_eq!((o.ok, o.steered), (120, false), "{:?}", o.failures);
    }

    #[test]
    fn a_request_to_a_closed_port_fails_its_call_at_once() {
        // A port nothing listens on: each REGISTER draws an ICMP port
        // unreachable quoting it, which fails that call (RFC 3261 §18.4),
        // one worker's or the other's, with no retransmission.
        let closed = UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("a free port");
        let o = execute(&run(closed, 6), &Live::default(), &AtomicBool::new(false)).expect("runs");
        assert_eq!(o.ok, 0);
        assert_eq!(
            o.failures.get(unreachable::CAUSE),
            Some(&6),
            "{:?}",
            o.failures
        );
        assert_eq!(o.retransmissions, 0);
        // Three threads on one shared socket: whichever reads an error
        // hands it to the thread whose call it names.
        let mut r = run(closed, 30);
        (r.threads, r.share_flows) = (3, true);
        let o = execute(&r, &Live::default(), &AtomicBool::new(false)).expect("runs");
        let failed = o.failures.get(unreachable::CAUSE);
        assert_eq!(failed, Some(&30), "{:?}", o.failures);
        assert_eq!(o.retransmissions, 0);
    }
}
