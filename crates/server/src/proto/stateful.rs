//! Transaction-stateful proxying (RFC 3261 §16 over the §17 machines of
//! `sip_core::transaction`).
//!
//! Every request the proxy forwards gets an entry: a server transaction
//! towards the previous hop and a client transaction towards the next,
//! with the bytes either side may have to send again. The table takes
//! messages and time and writes what to send into [`Sends`]; sockets and
//! threads stay with the caller, so tests drive it with any clock.
//!
//! Entries live in shards keyed by the branch this proxy put in its Via
//! (a hash of the incoming transaction identity, so a CANCEL and an ACK
//! for a failure find their INVITE). Each shard keeps a heap of deadlines;
//! [`Transactions::tick`] pops the due ones.
//!
//! Responses this proxy makes itself for requests it does not forward
//! (404, 407, 483 …) stay stateless: they are a function of the request,
//! so a retransmitted request gets the same answer again.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sip_core::transaction::{
    ClientInvite, ClientInviteState, ClientNonInvite, ClientNonInviteState, Output, ServerInvite,
    ServerInviteState, ServerNonInvite, ServerNonInviteState, TimerConfig,
};
use sip_core::writer::{write_ack, write_cancel, write_response, ResponseOptions};
use sip_core::{Message, Method, StatusCode};

use crate::proto::metrics::Metrics;
use crate::proto::names::{Names, Route};
pub use sip_core::Transport;

/// A destination: address and transport.
pub type Hop = (SocketAddr, Transport);

/// Timer C (RFC 3261 §16.6 step 11): how long an INVITE may stay in
/// Proceeding after its last provisional response.
pub const TIMER_C: Duration = Duration::from_secs(180);
/// Most transactions at once; past it new requests get 503.
pub const MAX_TRANSACTIONS: u64 = 1 << 20;
pub use crate::config::DEFAULT_MAX_TRANSACTION_BYTES as DEFAULT_MAX_BYTES;
const SHARDS: usize = 32;
/// Prefix of the To tags on responses this server generates; an ACK
/// carrying one acknowledges such a response and ends here.
pub const LOCAL_TAG_PREFIX: &str = "sipsec-";
/// Prefix of the branch this proxy writes in its Via.
pub const BRANCH_PREFIX: &str = "z9hG4bKsps";
/// The bits of a branch that identify its transaction; the top four
/// number the tries of other addresses (RFC 3263 §4.3: each a new
/// branch, so a late answer from an address given up is told apart).
pub const BRANCH_MASK: u64 = u64::MAX >> 4;
/// Addresses tried for one request, the first included.
const MAX_TRIES: u8 = 8;

/// Which try of its transaction a message belongs to: the top four bits
/// of this proxy's branch in its top Via.
fn try_of(msg: &Message<'_>) -> u8 {
    msg.top_via()
        .branch()
        .and_then(parse_branch)
        .map_or(0, |b| (b.0 >> 60) as u8)
}

/// Reads a branch this proxy wrote: `z9hG4bKsps` then 16 hex digits (the
/// transaction, its try in the top four bits) and, on what it forwards,
/// 16 more: the tag that binds the transaction to the address its
/// responses go back to (see `Core::branch_tag`). `None` for any other
/// branch.
pub fn parse_branch(branch: &str) -> Option<(u64, Option<u64>)> {
    let hex = branch.strip_prefix(BRANCH_PREFIX)?;
    if !matches!(hex.len(), 16 | 32) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let id = u64::from_str_radix(&hex[..16], 16).ok()?;
    let tag = match hex.get(16..) {
        Some(t) if !t.is_empty() => Some(u64::from_str_radix(t, 16).ok()?),
        _ => None,
    };
    Some((id, tag))
}

/// The delta-seconds a 503's Retry-After starts with (RFC 3261 §20.33),
/// if any.
fn retry_after(msg: &Message<'_>) -> Option<u32> {
    let v = msg.header(sip_core::HeaderName::RetryAfter)?;
    let digits = v.trim_start().split(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse().ok()
}

/// Rewrites the try number in the branch of `request`'s top Via (this
/// proxy's); `false` when it has none.
fn renumber(request: &mut [u8], number: u8) -> bool {
    let Ok(msg) = Message::parse(request) else {
        return false;
    };
    let Some(hex) = msg
        .top_via()
        .branch()
        .filter(|b| parse_branch(b).is_some())
        .and_then(|b| b.strip_prefix(BRANCH_PREFIX))
    else {
        return false;
    };
    let at = hex.as_ptr() as usize - request.as_ptr() as usize;
    request[at] = b"0123456789abcdef"[usize::from(number & 0xf)];
    true
}

/// Messages to send, packed into one reused buffer.
#[derive(Debug, Default)]
pub struct Sends {
    buf: Vec<u8>,
    items: Vec<(Range<usize>, Hop)>,
}

impl Sends {
    /// Queues a copy of `bytes` for `to`.
    pub fn push(&mut self, bytes: &[u8], to: Hop) {
        let start = self.buf.len();
        self.buf.extend_from_slice(bytes);
        self.items.push((start..self.buf.len(), to));
    }

    /// The queued messages, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Hop)> {
        self.items.iter().map(|(r, h)| (&self.buf[r.clone()], *h))
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Forgets everything queued, keeping the capacity.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.items.clear();
    }
}

/// Identifies an entry: this proxy's branch, and whether it is the CANCEL
/// sharing that branch with an INVITE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The branch value after [`BRANCH_PREFIX`].
    pub branch: u64,
    /// The CANCEL's own transaction.
    pub cancel: bool,
}

impl Key {
    /// The entry a message belongs to, from its top Via and CSeq: a
    /// response coming back, or a request this proxy sent.
    pub fn of_message(msg: &Message<'_>) -> Option<Self> {
        let branch = parse_branch(msg.top_via().branch()?)?.0 & BRANCH_MASK;
        Some(Self {
            branch,
            cancel: msg.cseq().method == Method::Cancel,
        })
    }

    /// [`of_message`](Self::of_message) and which try of the transaction
    /// `msg` belongs to.
    pub fn with_try(msg: &Message<'_>) -> Option<(Self, u8)> {
        Some((Self::of_message(msg)?, try_of(msg)))
    }

    /// The transaction and try of a request this proxy sent, from the
    /// start of it that an ICMP error quotes (Linux quotes up to 576
    /// bytes in all): the request line, then the Via this proxy puts
    /// first, whose branch ends the line. `None` for a response, an ACK
    /// (no transaction of its own), or too little quoted.
    pub fn of_quoted(bytes: &[u8]) -> Option<(Self, u8)> {
        if bytes.starts_with(b"SIP/2.0 ") || bytes.starts_with(b"ACK ") {
            return None;
        }
        let line = bytes.iter().position(|&b| b == b'\n')?;
        let rest = &bytes[line + 1..];
        let via = &rest[..rest.iter().position(|&b| b == b'\n')?];
        let via = std::str::from_utf8(via).ok()?.trim_end_matches('\r');
        let params = via.strip_prefix("Via: SIP/2.0/")?;
        let (branch, _) = parse_branch(params.rsplit_once(";branch=")?.1)?;
        let key = Self {
            branch: branch & BRANCH_MASK,
            cancel: bytes.starts_with(b"CANCEL "),
        };
        Some((key, (branch >> 60) as u8))
    }
}

#[derive(Debug)]
enum Server {
    Invite(ServerInvite),
    NonInvite(ServerNonInvite),
    /// A CANCEL this proxy originated: no one upstream to answer.
    Absent,
}

impl Server {
    fn retransmission(&mut self) -> Output {
        match self {
            Server::Invite(t) => t.on_request_retransmission(),
            Server::NonInvite(t) => t.on_request_retransmission(),
            Server::Absent => Output::default(),
        }
    }

    fn tu_response(&mut self, status: StatusCode, now: Instant) -> Output {
        match self {
            Server::Invite(t) => t.on_tu_response(status, now),
            Server::NonInvite(t) => t.on_tu_response(status, now),
            Server::Absent => Output::default(),
        }
    }

    fn final_sent(&self) -> bool {
        match self {
            Server::Invite(t) => !matches!(t.state(), ServerInviteState::Proceeding { .. }),
            Server::NonInvite(t) => !matches!(
                t.state(),
                ServerNonInviteState::Trying | ServerNonInviteState::Proceeding
            ),
            Server::Absent => true,
        }
    }

    fn deadline(&self) -> Option<Instant> {
        match self {
            Server::Invite(t) => t.next_deadline(),
            Server::NonInvite(t) => t.next_deadline(),
            Server::Absent => None,
        }
    }

    fn on_timer(&mut self, now: Instant) -> Output {
        match self {
            Server::Invite(t) => t.on_timer(now),
            Server::NonInvite(t) => t.on_timer(now),
            Server::Absent => Output::default(),
        }
    }

    fn terminated(&self) -> bool {
        match self {
            Server::Invite(t) => t.is_terminated(),
            Server::NonInvite(t) => t.is_terminated(),
            Server::Absent => true,
        }
    }
}

#[derive(Debug)]
enum Client {
    Invite(ClientInvite),
    NonInvite(ClientNonInvite),
}

impl Client {
    fn on_response(&mut self, status: StatusCode, now: Instant) -> Output {
        match self {
            Client::Invite(t) => t.on_response(status, now),
            Client::NonInvite(t) => t.on_response(status, now),
        }
    }

    /// No final response yet.
    fn pending(&self) -> bool {
        match self {
            Client::Invite(t) => matches!(
                t.state(),
                ClientInviteState::Calling { .. } | ClientInviteState::Proceeding
            ),
            Client::NonInvite(t) => matches!(
                t.state(),
                ClientNonInviteState::Trying { .. } | ClientNonInviteState::Proceeding { .. }
            ),
        }
    }

    fn proceeding(&self) -> bool {
        matches!(self, Client::Invite(t) if t.state() == ClientInviteState::Proceeding)
    }

    fn deadline(&self) -> Option<Instant> {
        match self {
            Client::Invite(t) => t.next_deadline(),
            Client::NonInvite(t) => t.next_deadline(),
        }
    }

    fn on_timer(&mut self, now: Instant) -> Output {
        match self {
            Client::Invite(t) => t.on_timer(now),
            Client::NonInvite(t) => t.on_timer(now),
        }
    }

    fn abandon(&mut self) -> Output {
        match self {
            Client::Invite(t) => t.on_transport_error(),
            Client::NonInvite(t) => t.on_transport_error(),
        }
    }

    fn terminated(&self) -> bool {
        match self {
            Client::Invite(t) => t.is_terminated(),
            Client::NonInvite(t) => t.is_terminated(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cancel {
    No,
    /// Asked for before any provisional response: sent when one arrives.
    Wanted,
    Sent,
}

#[derive(Debug)]
struct Entry {
    server: Server,
    client: Client,
    upstream: Hop,
    downstream: Hop,
    /// The request as received, kept until a final response goes upstream
    /// (a 408 is written from it).
    original: Vec<u8>,
    /// The request as forwarded: resent by timers A/E, and the source of
    /// CANCEL and ACK.
    forwarded: Vec<u8>,
    /// The last response sent upstream, resent for retransmitted requests
    /// and by timer G.
    response: Vec<u8>,
    /// The ACK sent downstream for a non-2xx final, resent when the final
    /// is retransmitted.
    ack: Vec<u8>,
    cancel: Cancel,
    timer_c: Option<Instant>,
    /// The name the next hop was found by, when DNS found it: another of
    /// its addresses is tried if this one fails.
    route: Option<Box<Route>>,
    /// Which try this is (0: the first address).
    tries: u8,
    /// When, without any response, the next address is tried.
    failover_at: Option<Instant>,
    /// The deadline this entry has on the heap.
    scheduled: Option<Instant>,
    /// The bytes this entry adds to `Metrics::transaction_bytes`.
    counted: usize,
}

impl Entry {
    /// Memory held for this entry: the entry, its key in the map and on the
    /// heap, and the messages it keeps.
    fn footprint(&self) -> usize {
        std::mem::size_of::<Entry>()
            + 2 * std::mem::size_of::<(Instant, Key)>()
            + self.original.capacity()
            + self.forwarded.capacity()
            + self.response.capacity()
            + self.ack.capacity()
    }

    fn deadline(&self) -> Option<Instant> {
        [
            self.server.deadline(),
            self.client.deadline(),
            self.timer_c,
            self.failover_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn done(&self) -> bool {
        self.client.terminated() && self.server.terminated()
    }
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<Key, Entry>,
    heap: BinaryHeap<Reverse<(Instant, Key)>>,
}

impl Shard {
    /// Puts `key` on the heap for its entry's next deadline, or removes a
    /// finished entry; keeps the memory gauge in step with the entry.
    fn reschedule(&mut self, key: Key, metrics: &Metrics) {
        let Some(e) = self.map.get_mut(&key) else {
            return;
        };
        if e.done() {
            let gone = e.counted;
            self.map.remove(&key);
            metrics.active_transactions.fetch_sub(1, Ordering::Relaxed);
            metrics
                .transaction_bytes
                .fetch_sub(gone as u64, Ordering::Relaxed);
            return;
        }
        let now = e.footprint();
        if now != e.counted {
            let bytes = &metrics.transaction_bytes;
            if now > e.counted {
                bytes.fetch_add((now - e.counted) as u64, Ordering::Relaxed);
            } else {
                bytes.fetch_sub((e.counted - now) as u64, Ordering::Relaxed);
            }
            e.counted = now;
        }
        let next = e.deadline();
        if next != e.scheduled {
            e.scheduled = next;
            if let Some(t) = next {
                self.heap.push(Reverse((t, key)));
            }
        }
    }
}

/// What became of a request offered to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Not part of a transaction: route it.
    New,
    /// A retransmission or hop-by-hop ACK, handled here.
    Absorbed,
}

/// What to do with a response offered to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upstream {
    /// No transaction matches: forward statelessly (e.g. a 2xx retransmitted
    /// after the transaction ended).
    Unknown,
    /// Handled here; nothing goes upstream.
    Absorbed,
    /// Send the written response to this hop.
    Send(Hop),
}

/// Why a transaction could not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartError {
    /// The same transaction already exists (a retransmission raced in).
    Exists,
    /// [`MAX_TRANSACTIONS`] or the memory bound reached.
    Full,
}

/// Wakes the driver's timer thread.
struct Waker(Box<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Waker")
    }
}

/// The proxy's transactions.
#[derive(Debug)]
pub struct Transactions {
    shards: Box<[Mutex<Shard>]>,
    timers: TimerConfig,
    max_bytes: u64,
    /// How long a next hop found by DNS may stay silent (not even a
    /// provisional response) before another of its addresses is tried.
    failover_after: Option<Duration>,
    /// Where names lead (set by the driver): the other addresses.
    names: std::sync::OnceLock<std::sync::Arc<dyn Names>>,
    /// The driver's timer thread sleeps with the table empty: the next
    /// [`start`](Self::start) wakes it.
    idle: std::sync::atomic::AtomicBool,
    waker: std::sync::OnceLock<Waker>,
}

fn lock(m: &Mutex<Shard>) -> std::sync::MutexGuard<'_, Shard> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes the response this proxy sends itself for a request it forwarded
/// (100 Trying; 408 when the next hop never answered).
impl Entry {
    /// Answers the caller with a response of our own (503 on a transport
    /// error, 408 on a timeout), kept for its retransmissions.
    fn answer_upstream(&mut self, status: StatusCode, key: Key, now: Instant, sends: &mut Sends) {
        let mut resp = Vec::new();
        own_response(&self.original, status, key, &mut resp);
        if self.server.tu_response(status, now).send_response {
            sends.push(&resp, self.upstream);
            self.response = resp;
        }
    }
}

fn own_response(request: &[u8], status: StatusCode, key: Key, out: &mut Vec<u8>) {
    let Ok(msg) = Message::parse(request) else {
        return;
    };
    let tag = format!("{LOCAL_TAG_PREFIX}{:012x}", key.branch & 0xffff_ffff_ffff);
    write_response(
        out,
        &msg,
        status,
        &ResponseOptions {
            to_tag: Some(&tag),
            ..Default::default()
        },
    );
}

impl Transactions {
    /// An empty table using `timers`, holding at most `max_bytes` of
    /// entries and messages.
    pub fn new(timers: TimerConfig, max_bytes: u64) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            timers,
            max_bytes,
            failover_after: None,
            names: std::sync::OnceLock::new(),
            idle: std::sync::atomic::AtomicBool::new(false),
            waker: std::sync::OnceLock::new(),
        }
    }

    /// How the driver wakes its thread that runs [`tick`](Self::tick)
    /// when a transaction starts while it is [`idle`](Self::idle); set
    /// once.
    pub fn set_waker(&self, wake: impl Fn() + Send + Sync + 'static) {
        let _ = self.waker.set(Waker(Box::new(wake)));
    }

    /// The timer thread is about to sleep with nothing scheduled: `true`
    /// when it may (the table is still empty); the next transaction that
    /// starts then wakes it. After waking, it calls this again.
    pub fn idle(&self) -> bool {
        self.idle.store(true, Ordering::SeqCst);
        let empty = self.next_deadline().is_none();
        if !empty {
            self.idle.store(false, Ordering::SeqCst);
        }
        empty
    }

    /// The same table, trying another address of a next hop found by DNS
    /// when the one used has not answered at all within `after` (`None`:
    /// only when its transaction times out, is refused, or gets 503).
    pub fn with_failover_after(mut self, after: Option<Duration>) -> Self {
        self.failover_after = after;
        self
    }

    /// Where domain names lead, for trying other addresses (RFC 3263
    /// §4.3); set once by the driver.
    pub fn set_names(&self, names: std::sync::Arc<dyn Names>) {
        let _ = self.names.set(names);
    }

    /// RFC 3263 §4.3: `e`'s next hop failed (no answer, refused, or 503
    /// with perhaps a Retry-After in seconds). The address is skipped for
    /// a while; if the name leads elsewhere too, the request goes there
    /// as a new transaction (the next try's branch) and `true` is
    /// returned.
    fn fail_over(
        &self,
        e: &mut Entry,
        retry_after: Option<u32>,
        now: Instant,
        sends: &mut Sends,
        metrics: &Metrics,
    ) -> bool {
        let (Some(route), Some(names)) = (e.route.as_deref(), self.names.get()) else {
            return false;
        };
        names.failed(e.downstream.0, e.downstream.1, retry_after);
        if e.cancel != Cancel::No
            || e.server.final_sent()
            || e.tries + 1 >= MAX_TRIES
            || e.forwarded.is_empty()
        {
            return false;
        }
        let Some(next) = names.alternative(&route.name, route.port, route.transport) else {
            return false;
        };
        if next == e.downstream.0 || !renumber(&mut e.forwarded, e.tries + 1) {
            return false;
        }
        e.tries += 1;
        e.downstream.0 = next;
        let reliable = e.downstream.1.is_reliable();
        e.client = match e.client {
            Client::Invite(_) => Client::Invite(ClientInvite::new(now, reliable, self.timers)),
            Client::NonInvite(_) => {
                Client::NonInvite(ClientNonInvite::new(now, reliable, self.timers))
            }
        };
        e.ack.clear();
        if e.timer_c.is_some() {
            e.timer_c = Some(now + TIMER_C);
        }
        e.failover_at = self.failover_after.map(|d| now + d);
        sends.push(&e.forwarded, e.downstream);
        metrics.hop_failovers.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Bytes of map and heap slots allocated (used or not): what the
    /// table would hand back to the allocator when idle.
    pub fn allocated(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = lock(s);
                s.map.capacity() * (std::mem::size_of::<(Key, Entry)>() + 1)
                    + s.heap.capacity() * std::mem::size_of::<Reverse<(Instant, Key)>>()
            })
            .sum()
    }

    fn shard(&self, key: Key) -> &Mutex<Shard> {
        &self.shards[(key.branch % SHARDS as u64) as usize]
    }

    /// Entries in the table.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).map.len()).sum()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Transactions whose caller has not had a final response yet (what a
    /// stopping server waits for; entries kept only to absorb
    /// retransmissions after the final response do not count).
    pub fn unanswered(&self) -> usize {
        use sip_core::transaction::ServerNonInviteState as N;
        self.shards
            .iter()
            .map(|s| {
                lock(s)
                    .map
                    .values()
                    .filter(|e| match &e.server {
                        Server::Invite(t) => {
                            matches!(t.state(), ServerInviteState::Proceeding { .. })
                        }
                        Server::NonInvite(t) => matches!(t.state(), N::Trying | N::Proceeding),
                        Server::Absent => false,
                    })
                    .count()
            })
            .sum()
    }

    /// Offers a request that is neither CANCEL nor a new transaction's
    /// first copy: a retransmission is answered with the last response
    /// (into `sends`), an ACK for a non-2xx final this proxy sent upstream
    /// is absorbed (§17.2.1). Anything else is [`Seen::New`].
    pub fn on_request(
        &self,
        key: Key,
        method: Method<'_>,
        now: Instant,
        sends: &mut Sends,
        metrics: &Metrics,
    ) -> Seen {
        let mut shard = lock(self.shard(key));
        let Some(e) = shard.map.get_mut(&key) else {
            return Seen::New;
        };
        if method == Method::Ack {
            let Server::Invite(t) = &mut e.server else {
                return Seen::New;
            };
            if !matches!(
                t.state(),
                ServerInviteState::Completed { .. } | ServerInviteState::Confirmed { .. }
            ) {
                // An ACK for a 2xx reusing the INVITE's branch: end to end.
                return Seen::New;
            }
            t.on_ack(now);
            shard.reschedule(key, metrics);
            return Seen::Absorbed;
        }
        metrics
            .retransmissions_absorbed
            .fetch_add(1, Ordering::Relaxed);
        if e.server.retransmission().retransmit && !e.response.is_empty() {
            sends.push(&e.response, e.upstream);
        }
        Seen::Absorbed
    }

    /// Starts the transaction for `request` (as received from `upstream`),
    /// forwarded as `forwarded` to `downstream`. An INVITE gets 100 Trying
    /// into `sends` at once (§16.2, §17.2.1).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &self,
        key: Key,
        request: &Message<'_>,
        upstream: Hop,
        forwarded: &[u8],
        downstream: Hop,
        route: Option<Route>,
        now: Instant,
        sends: &mut Sends,
        metrics: &Metrics,
    ) -> Result<(), StartError> {
        let active = &metrics.active_transactions;
        if active.load(Ordering::Relaxed) >= MAX_TRANSACTIONS
            || metrics.transaction_bytes.load(Ordering::Relaxed) >= self.max_bytes
        {
            return Err(StartError::Full);
        }
        let mut shard = lock(self.shard(key));
        if shard.map.contains_key(&key) {
            return Err(StartError::Exists);
        }
        let reliable_up = upstream.1.is_reliable();
        let reliable_down = downstream.1.is_reliable();
        let invite = request.method() == Method::Invite;
        let mut e = Entry {
            server: if invite {
                Server::Invite(ServerInvite::new(reliable_up, self.timers))
            } else {
                Server::NonInvite(ServerNonInvite::new(reliable_up, self.timers))
            },
            client: if invite {
                Client::Invite(ClientInvite::new(now, reliable_down, self.timers))
            } else {
                Client::NonInvite(ClientNonInvite::new(now, reliable_down, self.timers))
            },
            upstream,
            downstream,
            original: request.as_bytes().to_vec(),
            forwarded: forwarded.to_vec(),
            response: Vec::new(),
            ack: Vec::new(),
            cancel: Cancel::No,
            timer_c: invite.then(|| now + TIMER_C),
            failover_at: route.as_ref().and(self.failover_after).map(|d| now + d),
            route: route.map(Box::new),
            tries: 0,
            scheduled: None,
            counted: 0,
        };
        if invite {
            write_response(
                &mut e.response,
                request,
                StatusCode::TRYING,
                &ResponseOptions::default(),
            );
            e.server.tu_response(StatusCode::TRYING, now);
            sends.push(&e.response, upstream);
        }
        shard.map.insert(key, e);
        active.fetch_add(1, Ordering::Relaxed);
        shard.reschedule(key, metrics);
        drop(shard);
        if self.idle.load(Ordering::Relaxed) && self.idle.swap(false, Ordering::SeqCst) {
            if let Some(w) = self.waker.get() {
                (w.0)();
            }
        }
        Ok(())
    }

    /// A CANCEL for the INVITE whose entry is `invite`: `false` when there
    /// is none (the caller answers 481). Otherwise the caller answers 200;
    /// this sends CANCEL downstream if the INVITE is still pending, at once
    /// when a provisional response has arrived, else when one does (§9.1).
    pub fn on_cancel(
        &self,
        invite: Key,
        now: Instant,
        sends: &mut Sends,
        metrics: &Metrics,
    ) -> bool {
        let mut shard = lock(self.shard(invite));
        let Some(e) = shard.map.get_mut(&invite) else {
            return false;
        };
        if !matches!(e.server, Server::Invite(_)) {
            return false;
        }
        metrics.cancels.fetch_add(1, Ordering::Relaxed);
        if e.cancel == Cancel::No && e.client.pending() {
            e.cancel = Cancel::Wanted;
            if e.client.proceeding() {
                self.send_cancel(&mut shard, invite, now, sends, metrics);
            }
        }
        true
    }

    /// Sends CANCEL for the INVITE at `invite` and opens its own client
    /// transaction (same shard: same branch).
    fn send_cancel(
        &self,
        shard: &mut Shard,
        invite: Key,
        now: Instant,
        sends: &mut Sends,
        metrics: &Metrics,
    ) {
        let Some(e) = shard.map.get_mut(&invite) else {
            return;
        };
        e.cancel = Cancel::Sent;
        let mut bytes = Vec::new();
        if let Ok(req) = Message::parse(&e.forwarded) {
            write_cancel(&req, &mut bytes);
        }
        let (downstream, tries) = (e.downstream, e.tries);
        if bytes.is_empty() {
            return;
        }
        sends.push(&bytes, downstream);
        let key = Key {
            branch: invite.branch,
            cancel: true,
        };
        let c = Entry {
            server: Server::Absent,
            client: Client::NonInvite(ClientNonInvite::new(
                now,
                downstream.1.is_reliable(),
                self.timers,
            )),
            upstream: downstream,
            downstream,
            original: Vec::new(),
            forwarded: bytes,
            response: Vec::new(),
            ack: Vec::new(),
            cancel: Cancel::No,
            timer_c: None,
            route: None,
            tries,
            failover_at: None,
            scheduled: None,
            counted: 0,
        };
        match shard.map.insert(key, c) {
            None => {
                metrics.active_transactions.fetch_add(1, Ordering::Relaxed);
            }
            Some(old) => {
                metrics
                    .transaction_bytes
                    .fetch_sub(old.counted as u64, Ordering::Relaxed);
            }
        }
        shard.reschedule(key, metrics);
    }

    /// A response from downstream. For [`Upstream::Send`], `out` holds it
    /// with this proxy's Via removed (`forward` writes that).
    #[allow(clippy::too_many_arguments)]
    pub fn on_response(
        &self,
        key: Key,
        msg: &Message<'_>,
        now: Instant,
        out: &mut Vec<u8>,
        sends: &mut Sends,
        metrics: &Metrics,
        forward: impl FnOnce(&Message<'_>, &mut Vec<u8>) -> bool,
    ) -> Upstream {
        let Some(status) = msg.status() else {
            return Upstream::Unknown;
        };
        let mut guard = lock(self.shard(key));
        let shard = &mut *guard;
        let Some(e) = shard.map.get_mut(&key) else {
            return Upstream::Unknown;
        };
        if try_of(msg) != e.tries {
            // From an address given up for another: a 2xx to the INVITE
            // still goes upstream (statelessly, as a 2xx may), the rest
            // ends here.
            let invite = matches!(e.client, Client::Invite(_));
            return if status.is_success() && invite && !key.cancel {
                Upstream::Unknown
            } else {
                Upstream::Absorbed
            };
        }
        e.failover_at = None;
        let pending = e.client.pending();
        let o = e.client.on_response(status, now);
        if o.send_ack {
            if e.ack.is_empty() {
                if let Ok(req) = Message::parse(&e.forwarded) {
                    write_ack(&req, msg, &mut e.ack);
                }
            }
            if !e.ack.is_empty() {
                sends.push(&e.ack, e.downstream);
            }
        }
        if pending
            && status == StatusCode::SERVICE_UNAVAILABLE
            && self.fail_over(e, retry_after(msg), now, sends, metrics)
        {
            shard.reschedule(key, metrics);
            return Upstream::Absorbed;
        }
        let mut verdict = Upstream::Absorbed;
        if o.deliver && status != StatusCode::TRYING && !matches!(e.server, Server::Absent) {
            if status.is_provisional() && e.timer_c.is_some() {
                e.timer_c = Some(now + TIMER_C);
            }
            out.clear();
            if forward(msg, out) && e.server.tu_response(status, now).send_response {
                verdict = Upstream::Send(e.upstream);
                let keep = !(status.is_success() && matches!(e.server, Server::Invite(_)));
                e.response.clear();
                if keep {
                    e.response.extend_from_slice(out);
                }
            } else {
                out.clear();
            }
        }
        if !e.client.pending() {
            // Final response: what was kept to resend requests or to write
            // a 408 is no longer needed.
            e.original = Vec::new();
            e.forwarded = Vec::new();
            e.timer_c = None;
        } else if e.cancel == Cancel::Wanted && e.client.proceeding() {
            self.send_cancel(shard, key, now, sends, metrics);
        }
        shard.reschedule(key, metrics);
        verdict
    }

    /// Sending `key`'s request downstream failed (TCP connect refused or
    /// the connection broke): the client transaction ends, and the caller
    /// gets 503 at once instead of 408 after timer B (§16.7 step 5,
    /// §17.1.1.2).
    /// When the next hop was found by DNS and its name leads elsewhere
    /// too, the request goes there instead (RFC 3263 §4.3). `tries` is
    /// the try the failed message belonged to ([`Key::with_try`]): a
    /// failure of one given up already changes nothing.
    pub fn on_transport_error(
        &self,
        key: Key,
        tries: u8,
        now: Instant,
        sends: &mut Sends,
        metrics: &Metrics,
    ) {
        let mut guard = lock(self.shard(key));
        let shard = &mut *guard;
        let Some(e) = shard.map.get_mut(&key) else {
            return;
        };
        if !e.client.pending() || tries != e.tries {
            return;
        }
        if self.fail_over(e, None, now, sends, metrics) {
            shard.reschedule(key, metrics);
            return;
        }
        e.client.abandon();
        e.timer_c = None;
        if !e.server.final_sent() {
            e.answer_upstream(StatusCode::SERVICE_UNAVAILABLE, key, now, sends);
        }
        e.original = Vec::new();
        e.forwarded = Vec::new();
        shard.reschedule(key, metrics);
    }

    /// The earliest time a timer may be due (a superseded one can make it
    /// early, never late); `None` when nothing is scheduled.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.shards
            .iter()
            .filter_map(|s| lock(s).heap.peek().map(|Reverse((t, _))| *t))
            .min()
    }

    /// Runs every timer due at `now`; what must be sent goes into `sends`.
    pub fn tick(&self, now: Instant, sends: &mut Sends, metrics: &Metrics) {
        for m in self.shards.iter() {
            let mut guard = lock(m);
            let shard = &mut *guard;
            while let Some(Reverse((t, key))) = shard.heap.peek().copied() {
                if t > now {
                    break;
                }
                shard.heap.pop();
                match shard.map.get(&key) {
                    Some(e) if e.scheduled == Some(t) => {}
                    _ => continue, // superseded or gone
                }
                self.fire(shard, key, now, sends, metrics);
                if let Some(e) = shard.map.get_mut(&key) {
                    e.scheduled = None;
                }
                shard.reschedule(key, metrics);
            }
            // After a storm, hand the emptied slots back: a table sized for
            // the peak would otherwise keep its memory for good.
            let len = shard.map.len();
            if shard.map.capacity() > 64 && len * 4 < shard.map.capacity() {
                shard.map.shrink_to(len * 2);
            }
            let heap = shard.heap.len();
            if shard.heap.capacity() > 64 && heap * 4 < shard.heap.capacity() {
                shard.heap.shrink_to(heap * 2);
            }
        }
    }

    fn fire(
        &self,
        shard: &mut Shard,
        key: Key,
        now: Instant,
        sends: &mut Sends,
        metrics: &Metrics,
    ) {
        let Some(e) = shard.map.get_mut(&key) else {
            return;
        };
        let s = e.server.on_timer(now);
        if s.retransmit && !e.response.is_empty() {
            sends.push(&e.response, e.upstream);
        }
        let c = e.client.on_timer(now);
        if c.retransmit && !e.forwarded.is_empty() {
            sends.push(&e.forwarded, e.downstream);
        }
        // Not a word from a next hop found by DNS, or its transaction
        // timed out: another of its addresses, if there is one.
        let silent = e.failover_at.is_some_and(|t| now >= t);
        if silent {
            e.failover_at = None;
        }
        if (silent || c.timeout) && self.fail_over(e, None, now, sends, metrics) {
            return;
        }
        let mut give_up = c.timeout;
        if e.timer_c.is_some_and(|t| now >= t) {
            if e.cancel != Cancel::Sent && e.client.proceeding() {
                // Timer C: cancel the branch; its 487 comes back normally,
                // and if nothing does, give up at the next firing.
                e.timer_c = Some(now + self.timers.timeout());
                self.send_cancel(shard, key, now, sends, metrics);
                return;
            }
            e.timer_c = None;
            give_up |= e.client.pending();
            e.client.abandon();
        }
        if give_up && !e.server.final_sent() {
            metrics.transaction_timeouts.fetch_add(1, Ordering::Relaxed);
            e.answer_upstream(StatusCode::REQUEST_TIMEOUT, key, now, sends);
            e.original = Vec::new();
            e.forwarded = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(port: u16, t: Transport) -> Hop {
        (SocketAddr::from(([127, 0, 0, 1], port)), t)
    }

    const INVITE: &[u8] = b"INVITE sip:bob@127.0.0.1:5070 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5080;branch=z9hG4bKa1;rport\r\nMax-Forwards: 70\r\nFrom: <sip:alice@sipsec>;tag=a\r\nTo: <sip:bob@sipsec>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
    const FORWARDED: &[u8] = b"INVITE sip:bob@127.0.0.1:5070 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKsps00000000000000ab\r\nVia: SIP/2.0/UDP 127.0.0.1:5080;branch=z9hG4bKa1;rport=5080\r\nMax-Forwards: 69\r\nFrom: <sip:alice@sipsec>;tag=a\r\nTo: <sip:bob@sipsec>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
    const KEY: Key = Key {
        branch: 0xab,
        cancel: false,
    };

    fn response(status: u16, method: &str) -> Vec<u8> {
        format!("SIP/2.0 {status} X\r\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKsps00000000000000ab\r\nVia: SIP/2.0/UDP 127.0.0.1:5080;branch=z9hG4bKa1;rport=5080\r\nFrom: <sip:alice@sipsec>;tag=a\r\nTo: <sip:bob@sipsec>;tag=b\r\nCall-ID: c1\r\nCSeq: 1 {method}\r\nContent-Length: 0\r\n\r\n").into_bytes()
    }

    fn strip(msg: &Message<'_>, out: &mut Vec<u8>) -> bool {
        sip_core::proxy::forward_response(msg, out).is_ok()
    }

    fn started(t0: Instant, down: Transport) -> (Transactions, Metrics, Sends) {
        let tx = Transactions::new(TimerConfig::RFC3261, DEFAULT_MAX_BYTES);
        let m = Metrics::default();
        let mut sends = Sends::default();
        let req = Message::parse(INVITE).unwrap();
        tx.start(
            KEY,
            &req,
            hop(5080, Transport::Udp),
            FORWARDED,
            hop(5070, down),
            None,
            t0,
            &mut sends,
            &m,
        )
        .unwrap();
        (tx, m, sends)
    }

    fn statuses(sends: &Sends) -> Vec<String> {
        sends
            .iter()
            .map(|(b, (a, _))| {
                let m = Message::parse(b).unwrap();
                let what = match m.status() {
                    Some(s) => s.as_u16().to_string(),
                    None => m.method().as_str().to_owned(),
                };
                format!("{what}->{}", a.port())
            })
            .collect()
    }

    /// A storm of INVITEs to a callee that never answers: the table stops
    /// at its memory bound (503 for the rest), and once timer B has ended
    /// them, the gauge is back at zero and the slots are handed back.
    #[test]
    fn the_table_is_bounded_by_memory_and_shrinks_after_a_storm() {
        let t0 = Instant::now();
        let bound = 8 << 20;
        let tx = Transactions::new(TimerConfig::RFC3261, bound);
        let m = Metrics::default();
        let mut sends = Sends::default();
        let req = Message::parse(INVITE).unwrap();
        let (mut started, mut full) = (0, 0);
        for branch in 0..40_000u64 {
            let key = Key {
                branch,
                cancel: false,
            };
            match tx.start(
                key,
                &req,
                hop(5080, Transport::Udp),
                FORWARDED,
                hop(5070, Transport::Udp),
                None,
                t0,
                &mut sends,
                &m,
            ) {
                Ok(()) => started += 1,
                Err(StartError::Full) => full += 1,
                Err(StartError::Exists) => unreachable!("distinct keys"),
            }
            sends.clear();
        }
        let held = m.transaction_bytes.load(Ordering::Relaxed);
        assert!(
            full > 0 && started > 100,
            "{started} started, {full} refused"
        );
        assert!(held >= bound && held < bound + 4096, "{held} bytes held");
        let peak = tx.allocated();
        // Timer B (64·T1), then timer C's leftovers: everything ends.
        for s in 1..=200 {
            tx.tick(t0 + Duration::from_secs(s), &mut sends, &m);
            sends.clear();
        }
        assert!(tx.is_empty());
        assert_eq!(m.transaction_bytes.load(Ordering::Relaxed), 0);
        assert_eq!(m.active_transactions.load(Ordering::Relaxed), 0);
        assert!(
            tx.allocated() * 8 < peak,
            "slots handed back: {} of {peak}",
            tx.allocated()
        );
    }

    #[test]
    fn invite_gets_100_trying_and_retransmissions_are_absorbed() {
        let t0 = Instant::now();
        let (tx, m, mut sends) = started(t0, Transport::Udp);
        assert_eq!(statuses(&sends), ["100->5080"]);
        assert_eq!(m.active_transactions.load(Ordering::Relaxed), 1);
        let req = Message::parse(INVITE).unwrap();
        assert_eq!(
            tx.start(
                KEY,
                &req,
                hop(5080, Transport::Udp),
                FORWARDED,
                hop(5070, Transport::Udp),
                None,
                t0,
                &mut sends,
                &m
            ),
            Err(StartError::Exists)
        );
        sends.clear();
        assert_eq!(
            tx.on_request(KEY, Method::Invite, t0, &mut sends, &m),
            Seen::Absorbed
        );
        assert_eq!(statuses(&sends), ["100->5080"], "last provisional resent");
        // Timer A resends the INVITE downstream after T1.
        sends.clear();
        tx.tick(t0 + Duration::from_millis(510), &mut sends, &m);
        assert_eq!(statuses(&sends), ["INVITE->5070"]);
    }

    #[test]
    fn non_2xx_final_is_acked_downstream_and_its_ack_absorbed() {
        let t0 = Instant::now();
        let (tx, m, mut sends) = started(t0, Transport::Udp);
        sends.clear();
        let busy = response(486, "INVITE");
        let busy = Message::parse(&busy).unwrap();
        let mut out = Vec::new();
        let v = tx.on_response(KEY, &busy, t0, &mut out, &mut sends, &m, strip);
        assert_eq!(v, Upstream::Send(hop(5080, Transport::Udp)));
        let up = Message::parse(&out).unwrap();
        assert_eq!(up.via_count(), 1);
        assert_eq!(statuses(&sends), ["ACK->5070"]);
        // The final retransmitted by the callee: ACK again, nothing upstream.
        sends.clear();
        let v = tx.on_response(KEY, &busy, t0, &mut out, &mut sends, &m, strip);
        assert_eq!(v, Upstream::Absorbed);
        assert_eq!(statuses(&sends), ["ACK->5070"]);
        // Timer G resends the 486 upstream until the caller's ACK.
        sends.clear();
        tx.tick(t0 + Duration::from_millis(510), &mut sends, &m);
        assert_eq!(statuses(&sends), ["486->5080"]);
        assert_eq!(
            tx.on_request(KEY, Method::Ack, t0, &mut sends, &m),
            Seen::Absorbed
        );
        // Timer I (T4) ends it; the client side ended at timer D (32 s).
        tx.tick(t0 + Duration::from_secs(40), &mut sends, &m);
        assert!(tx.is_empty());
        assert_eq!(m.active_transactions.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn no_answer_times_out_with_408_upstream() {
        let t0 = Instant::now();
        let (tx, m, mut sends) = started(t0, Transport::Tcp);
        sends.clear();
        tx.tick(t0 + Duration::from_secs(31), &mut sends, &m);
        assert!(sends.is_empty(), "TCP: no retransmissions, B not yet");
        tx.tick(t0 + Duration::from_secs(33), &mut sends, &m);
        assert_eq!(statuses(&sends), ["408->5080"]);
        let r = Message::parse(sends.iter().next().unwrap().0).unwrap();
        assert!(r.to().tag().unwrap().starts_with(LOCAL_TAG_PREFIX));
        assert_eq!(r.top_via().branch(), Some("z9hG4bKa1"));
        assert_eq!(m.transaction_timeouts.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn cancel_waits_for_a_provisional_then_goes_downstream() {
        let t0 = Instant::now();
        let (tx, m, mut sends) = started(t0, Transport::Udp);
        sends.clear();
        let absent = Key {
            branch: 1,
            cancel: false,
        };
        assert!(!tx.on_cancel(absent, t0, &mut sends, &m));
        assert!(tx.on_cancel(KEY, t0, &mut sends, &m));
        assert!(sends.is_empty(), "no CANCEL before a provisional (§9.1)");
        let ringing = response(180, "INVITE");
        let ringing = Message::parse(&ringing).unwrap();
        let mut out = Vec::new();
        let v = tx.on_response(KEY, &ringing, t0, &mut out, &mut sends, &m, strip);
        assert_eq!(v, Upstream::Send(hop(5080, Transport::Udp)));
        assert_eq!(statuses(&sends), ["CANCEL->5070"]);
        // The 200 for our CANCEL is absorbed; the 487 goes upstream.
        sends.clear();
        let ok = response(200, "CANCEL");
        let ok = Message::parse(&ok).unwrap();
        let k = Key::of_message(&ok).unwrap();
        assert!(k.cancel);
        assert_eq!(
            tx.on_response(k, &ok, t0, &mut out, &mut sends, &m, strip),
            Upstream::Absorbed
        );
        let terminated = response(487, "INVITE");
        let terminated = Message::parse(&terminated).unwrap();
        assert_eq!(
            tx.on_response(KEY, &terminated, t0, &mut out, &mut sends, &m, strip),
            Upstream::Send(hop(5080, Transport::Udp))
        );
        assert_eq!(statuses(&sends), ["ACK->5070"]);
    }

    #[test]
    fn timer_c_cancels_a_ringing_branch_then_gives_up() {
        let t0 = Instant::now();
        let (tx, m, mut sends) = started(t0, Transport::Tcp);
        let ringing = response(180, "INVITE");
        let ringing = Message::parse(&ringing).unwrap();
        let mut out = Vec::new();
        tx.on_response(KEY, &ringing, t0, &mut out, &mut sends, &m, strip);
        sends.clear();
        tx.tick(t0 + TIMER_C + Duration::from_secs(1), &mut sends, &m);
        assert_eq!(statuses(&sends), ["CANCEL->5070"]);
        sends.clear();
        tx.tick(t0 + TIMER_C + Duration::from_secs(40), &mut sends, &m);
        assert_eq!(statuses(&sends), ["408->5080"]);
    }

    #[test]
    fn transport_failure_downstream_is_503_upstream_at_once() {
        let t0 = Instant::now();
        let (tx, m, mut sends) = started(t0, Transport::Tcp);
        sends.clear();
        let fwd = Message::parse(FORWARDED).unwrap();
        tx.on_transport_error(Key::of_message(&fwd).unwrap(), 0, t0, &mut sends, &m);
        assert_eq!(statuses(&sends), ["503->5080"]);
        sends.clear();
        tx.tick(t0 + Duration::from_secs(40), &mut sends, &m);
        assert!(sends.is_empty(), "no 408 after the 503");
        assert!(tx.is_empty());
    }

    #[test]
    fn unknown_responses_are_left_to_the_caller() {
        let tx = Transactions::new(TimerConfig::RFC3261, DEFAULT_MAX_BYTES);
        let m = Metrics::default();
        let ok = response(200, "INVITE");
        let ok = Message::parse(&ok).unwrap();
        let mut out = Vec::new();
        let mut sends = Sends::default();
        assert_eq!(
            tx.on_response(KEY, &ok, Instant::now(), &mut out, &mut sends, &m, strip),
            Upstream::Unknown
        );
    }

    use crate::proto::names::{Found, Park};
    use std::sync::Arc;

    /// A name leading to the loopback addresses at `ports`, in order; it
    /// remembers which failed.
    #[derive(Debug, Default)]
    struct Pool {
        ports: Vec<u16>,
        down: Mutex<Vec<SocketAddr>>,
        retry_after: Mutex<Vec<Option<u32>>>,
    }

    impl Names for Pool {
        fn find(&self, _: &str, _: Option<u16>, _: Transport) -> Found {
            unreachable!("the table only asks for alternatives")
        }

        fn park(
            &self,
            _: &str,
            _: Option<u16>,
            _: Transport,
            _: &[u8],
            _: SocketAddr,
            _: Transport,
        ) -> Park {
            unreachable!("the table parks nothing")
        }

        fn failed(&self, to: SocketAddr, _: Transport, retry_after: Option<u32>) {
            self.down.lock().unwrap().push(to);
            self.retry_after.lock().unwrap().push(retry_after);
        }

        fn alternative(&self, name: &str, _: Option<u16>, _: Transport) -> Option<SocketAddr> {
            assert_eq!(name, "pool.example");
            let down = self.down.lock().unwrap();
            self.ports
                .iter()
                .map(|p| hop(*p, Transport::Udp).0)
                .find(|a| !down.contains(a))
        }
    }

    /// An INVITE to `pool.example`, first sent to port 5070, the pool's
    /// first address; tries others after 2 s of silence.
    fn pooled(t0: Instant, ports: &[u16]) -> (Transactions, Metrics, Sends, Arc<Pool>) {
        let tx = Transactions::new(TimerConfig::RFC3261, DEFAULT_MAX_BYTES)
            .with_failover_after(Some(Duration::from_secs(2)));
        let pool = Arc::new(Pool {
            ports: ports.to_vec(),
            ..Pool::default()
        });
        tx.set_names(pool.clone());
        let m = Metrics::default();
        let mut sends = Sends::default();
        let req = Message::parse(INVITE).unwrap();
        let route = Route {
            name: "pool.example".into(),
            port: None,
            transport: Transport::Udp,
        };
        tx.start(
            KEY,
            &req,
            hop(5080, Transport::Udp),
            FORWARDED,
            hop(5070, Transport::Udp),
            Some(route),
            t0,
            &mut sends,
            &m,
        )
        .unwrap();
        sends.clear();
        (tx, m, sends, pool)
    }

    /// `response` as the answer to try `number`.
    fn tried(mut response: Vec<u8>, number: u8) -> Vec<u8> {
        assert!(renumber(&mut response, number));
        response
    }

    fn branches(sends: &Sends) -> Vec<String> {
        sends
            .iter()
            .map(|(b, _)| {
                let m = Message::parse(b).unwrap();
                m.top_via().branch().unwrap().to_owned()
            })
            .collect()
    }

    /// RFC 3263 §4.3: a silent address, then one that answers 503, then
    /// one that answers; each try is a new transaction (branch), and a
    /// late answer from an address given up is not taken for the new one.
    #[test]
    fn a_failed_address_of_a_name_gives_way_to_the_next_one() {
        let t0 = Instant::now();
        let (tx, m, mut sends, pool) = pooled(t0, &[5070, 5071, 5072]);
        // Timer A resends to the first address; after 2 s of silence the
        // second gets the INVITE with the next try's branch.
        tx.tick(t0 + Duration::from_millis(510), &mut sends, &m);
        assert_eq!(statuses(&sends), ["INVITE->5070"]);
        sends.clear();
        tx.tick(t0 + Duration::from_millis(1600), &mut sends, &m);
        assert_eq!(statuses(&sends), ["INVITE->5070"]);
        sends.clear();
        tx.tick(t0 + Duration::from_secs(2), &mut sends, &m);
        assert_eq!(statuses(&sends), ["INVITE->5071"]);
        assert_eq!(branches(&sends), ["z9hG4bKsps10000000000000ab"]);
        assert_eq!(*pool.down.lock().unwrap(), [hop(5070, Transport::Udp).0]);
        sends.clear();
        // The first address wakes up: its answers are not the new try's.
        let mut out = Vec::new();
        let late = response(180, "INVITE");
        let late = Message::parse(&late).unwrap();
        let v = tx.on_response(KEY, &late, t0, &mut out, &mut sends, &m, strip);
        assert_eq!(v, Upstream::Absorbed);
        // The second answers 503 (Retry-After: 120): ACKed, skipped for
        // that long, and the third gets a try.
        let busy = tried(response(503, "INVITE"), 1);
        let busy = String::from_utf8(busy)
            .unwrap()
            .replacen("\r\n\r\n", "\r\nRetry-After: 120 (overloaded)\r\n\r\n", 1)
            .into_bytes();
        let busy = Message::parse(&busy).unwrap();
        let t1 = t0 + Duration::from_secs(3);
        let v = tx.on_response(KEY, &busy, t1, &mut out, &mut sends, &m, strip);
        assert_eq!(v, Upstream::Absorbed);
        assert_eq!(statuses(&sends), ["ACK->5071", "INVITE->5072"]);
        assert_eq!(branches(&sends)[1], "z9hG4bKsps20000000000000ab");
        assert_eq!(*pool.retry_after.lock().unwrap(), [None, Some(120)]);
        sends.clear();
        // The third rings: the caller hears it, and no more tries.
        let ringing = tried(response(180, "INVITE"), 2);
        let ringing = Message::parse(&ringing).unwrap();
        let v = tx.on_response(KEY, &ringing, t1, &mut out, &mut sends, &m, strip);
        assert_eq!(v, Upstream::Send(hop(5080, Transport::Udp)));
        tx.tick(t1 + Duration::from_secs(10), &mut sends, &m);
        assert!(!statuses(&sends).iter().any(|s| s.starts_with("INVITE")));
        assert_eq!(m.hop_failovers.load(Ordering::Relaxed), 2);
        // A 2xx from an address given up still reaches the caller.
        let ok = tried(response(200, "INVITE"), 1);
        let ok = Message::parse(&ok).unwrap();
        let v = tx.on_response(KEY, &ok, t1, &mut out, &mut sends, &m, strip);
        assert_eq!(v, Upstream::Unknown);
    }

    /// With every address failed, the caller gets the usual answer: 503
    /// on a refused connection (and a stale try's failure changes
    /// nothing).
    #[test]
    fn when_no_address_is_left_the_caller_gets_the_failure() {
        let t0 = Instant::now();
        let (tx, m, mut sends, _pool) = pooled(t0, &[5070, 5071]);
        let fwd = Message::parse(FORWARDED).unwrap();
        let key = Key::of_message(&fwd).unwrap();
        tx.on_transport_error(key, 0, t0, &mut sends, &m);
        assert_eq!(statuses(&sends), ["INVITE->5071"]);
        sends.clear();
        // The first try's connection fails again: already given up.
        tx.on_transport_error(key, 0, t0, &mut sends, &m);
        assert!(sends.is_empty());
        tx.on_transport_error(key, 1, t0, &mut sends, &m);
        assert_eq!(statuses(&sends), ["503->5080"]);
        assert_eq!(m.hop_failovers.load(Ordering::Relaxed), 1);
    }

    /// A name with more addresses than tries: after `MAX_TRIES` failed
    /// tries the caller gets 503, and the addresses left are not tried.
    #[test]
    fn tries_stop_at_the_cap_however_many_addresses_a_name_has() {
        let t0 = Instant::now();
        let ports: Vec<u16> = (5070..5090).collect();
        let (tx, m, mut sends, pool) = pooled(t0, &ports);
        let fwd = Message::parse(FORWARDED).unwrap();
        let key = Key::of_message(&fwd).unwrap();
        for n in 0..MAX_TRIES - 1 {
            tx.on_transport_error(key, n, t0, &mut sends, &m);
            assert_eq!(
                statuses(&sends),
                [format!("INVITE->{}", 5071 + u16::from(n))]
            );
            sends.clear();
        }
        tx.on_transport_error(key, MAX_TRIES - 1, t0, &mut sends, &m);
        assert_eq!(statuses(&sends), ["503->5080"]);
        assert_eq!(pool.down.lock().unwrap().len(), usize::from(MAX_TRIES));
        assert_eq!(
            m.hop_failovers.load(Ordering::Relaxed),
            u64::from(MAX_TRIES - 1)
        );
    }

    #[test]
    fn an_icmp_error_quoting_a_forwarded_request_names_its_transaction() {
        let sent = tried(FORWARDED.to_vec(), 2);
        let key = Key::of_message(&Message::parse(&sent).unwrap()).unwrap();
        // As much as an ICMP error quotes, or just past the Via.
        let via_end = sent.windows(2).position(|w| w == b"ab").unwrap() + 4;
        for cut in [sent.len(), 200, via_end] {
            assert_eq!(Key::of_quoted(&sent[..cut]), Some((key, 2)), "cut {cut}");
        }
        let cancel = [b"CANCEL".as_slice(), &sent[6..]].concat();
        let cancel_key = Key {
            cancel: true,
            ..key
        };
        assert_eq!(Key::of_quoted(&cancel), Some((cancel_key, 2)));
        // Too little quoted, an ACK, a response, someone else's Via.
        assert_eq!(Key::of_quoted(&sent[..via_end - 3]), None);
        let ack = [b"ACK".as_slice(), &sent[6..]].concat();
        assert_eq!(Key::of_quoted(&ack), None);
        assert_eq!(Key::of_quoted(&response(200, "INVITE")), None);
        assert_eq!(Key::of_quoted(INVITE), None);
        assert_eq!(Key::of_quoted(b""), None);
    }
}
