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
use std::sync::Arc;
use std::time::{Duration, Instant};

use sip_core::transaction::{
    ClientInvite, ClientInviteState, ClientNonInvite, ClientNonInviteState, Output, ServerInvite,
    ServerInviteState, ServerNonInvite, ServerNonInviteState, TimerConfig,
};
use sip_core::writer::{write_ack, write_cancel, write_response, ResponseOptions};
use sip_core::{Message, Method, StatusCode};

use crate::proto::fork::{Best, MAX_BRANCHES};
use crate::proto::metrics::Metrics;
use crate::proto::names::{NameTable, Route};
use crate::shards::Shards;
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
/// Where the fork index sits in a branch (the four bits below the try
/// number): each target of a forked request gets its own branch
/// (RFC 3261 §16.6 step 8).
pub const FORK_SHIFT: u32 = 56;
/// The bits of a branch that name the request, without try and fork.
pub const ID_MASK: u64 = u64::MAX >> 8;
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

/// Threads of the driver that a decision needs woken.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Wake {
    /// The one running the transactions' timers: a transaction started
    /// while the table was idle.
    pub timers: bool,
    /// The resolver: a name was asked (see `NameTable::take_asked`).
    pub names: bool,
}

/// What a decision produced besides its reply: messages to send, packed
/// into one reused buffer, threads to wake, next hops that failed.
#[derive(Debug, Default)]
pub struct Sends {
    buf: Vec<u8>,
    items: Vec<(Range<usize>, Hop)>,
    wake: Wake,
    failed: Vec<(Hop, u32)>,
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

    /// Whether no message is queued.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The driver's threads to wake.
    pub fn wake(&self) -> Wake {
        self.wake
    }

    /// Asks the driver to wake its resolver.
    pub fn wake_names(&mut self) {
        self.wake.names = true;
    }

    /// Next hops that failed and are skipped from now on, for how many
    /// seconds (each worth a line in the log).
    pub fn failed_hops(&self) -> &[(Hop, u32)] {
        &self.failed
    }

    /// Forgets everything queued, keeping the capacity.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.items.clear();
        self.wake = Wake::default();
        self.failed.clear();
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

/// One target a request was forked to: a client transaction toward it
/// (RFC 3261 §16.6), with the bytes it may have to send again.
#[derive(Debug)]
struct Branch {
    /// `None` while the branch waits for its q group (§16.6: serial
    /// search), and for good if an earlier group answered.
    client: Option<Client>,
    downstream: Hop,
    /// The request as forwarded: resent by timers A/E, and the source of
    /// CANCEL and ACK.
    forwarded: Vec<u8>,
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
    /// The q group (0 first): the branches of one group run in parallel.
    group: u8,
}

impl Branch {
    fn pending(&self) -> bool {
        self.client.as_ref().is_some_and(Client::pending)
    }

    fn proceeding(&self) -> bool {
        self.client.as_ref().is_some_and(Client::proceeding)
    }

    fn deadline(&self) -> Option<Instant> {
        let client = self.client.as_ref().and_then(Client::deadline);
        [client, self.timer_c, self.failover_at]
            .into_iter()
            .flatten()
            .min()
    }

    fn terminated(&self) -> bool {
        self.client.as_ref().is_none_or(Client::terminated)
    }

    fn capacity(&self) -> usize {
        std::mem::size_of::<Branch>() + self.forwarded.capacity() + self.ack.capacity()
    }

    /// Starts the client transaction; the caller sends `forwarded`.
    fn begin(
        &mut self,
        invite: bool,
        now: Instant,
        timers: TimerConfig,
        failover: Option<Duration>,
    ) {
        let reliable = self.downstream.1.is_reliable();
        self.client = Some(if invite {
            Client::Invite(ClientInvite::new(now, reliable, timers))
        } else {
            Client::NonInvite(ClientNonInvite::new(now, reliable, timers))
        });
        self.timer_c = invite.then(|| now + TIMER_C);
        self.failover_at = self.route.as_ref().and(failover).map(|d| now + d);
    }

    /// The client transaction gave up (timeout or transport failure).
    fn abandon(&mut self) {
        if let Some(c) = &mut self.client {
            c.abandon();
        }
        self.timer_c = None;
        self.failover_at = None;
        self.forwarded = Vec::new();
    }
}

/// Where a forked request goes: what the core wrote for one target.
#[derive(Debug)]
pub struct Target<'a> {
    /// The request as forwarded to it (its Via branch numbers the fork,
    /// [`FORK_SHIFT`]).
    pub forwarded: &'a [u8],
    /// Where it goes.
    pub hop: Hop,
    /// The name `hop` was found by, when DNS found it.
    pub route: Option<Route>,
    /// Its q group: 0 for the highest q; the next group starts when
    /// every branch of the previous one failed.
    pub group: u8,
}

#[derive(Debug)]
struct Entry {
    server: Server,
    upstream: Hop,
    /// The request as received, kept until a final response goes upstream
    /// (a 408 or 503 is written from it).
    original: Vec<u8>,
    /// The last response sent upstream, resent for retransmitted requests
    /// and by timer G.
    response: Vec<u8>,
    /// One per target, in order (at most [`MAX_BRANCHES`]).
    branches: Vec<Branch>,
    /// The best final response of the branches ended so far (§16.7).
    best: Best,
    /// A 2xx or 6xx came back: no further group is started.
    answered: bool,
    /// The caller cancelled (§16.10).
    cancelled: bool,
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
            + self.response.capacity()
            + self.best.capacity()
            + self.branches.iter().map(Branch::capacity).sum::<usize>()
    }

    fn deadline(&self) -> Option<Instant> {
        let branches = self.branches.iter().filter_map(Branch::deadline).min();
        [self.server.deadline(), branches]
            .into_iter()
            .flatten()
            .min()
    }

    fn done(&self) -> bool {
        self.server.terminated() && self.branches.iter().all(Branch::terminated)
    }

    fn invite(&self) -> bool {
        matches!(self.server, Server::Invite(_))
    }

    /// A 2xx or 6xx to the INVITE on branch `except`: CANCEL every other
    /// pending branch (§16.7 step 10), at once when it is ringing, else
    /// when it first answers.
    fn cancel_others(&mut self, except: Option<usize>) -> Vec<usize> {
        let mut now = Vec::new();
        for (i, b) in self.branches.iter_mut().enumerate() {
            if Some(i) == except || b.cancel != Cancel::No || !b.pending() {
                continue;
            }
            b.cancel = Cancel::Wanted;
            if b.proceeding() {
                now.push(i);
            }
        }
        now
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

    /// Opens the CANCEL transactions of `branches` of the INVITE at `key`
    /// (sending each CANCEL), each under its branch's own key.
    fn cancel(
        &mut self,
        key: Key,
        branches: &[usize],
        now: Instant,
        timers: TimerConfig,
        sends: &mut Sends,
        metrics: &Metrics,
    ) {
        for &i in branches {
            let Some(b) = self.map.get_mut(&key).and_then(|e| e.branches.get_mut(i)) else {
                continue;
            };
            b.cancel = Cancel::Sent;
            let mut bytes = Vec::new();
            if let Ok(req) = Message::parse(&b.forwarded) {
                write_cancel(&req, &mut bytes);
            }
            if bytes.is_empty() {
                continue;
            }
            let (downstream, tries) = (b.downstream, b.tries);
            sends.push(&bytes, downstream);
            let mut branch = Branch {
                client: None,
                downstream,
                forwarded: bytes,
                ack: Vec::new(),
                cancel: Cancel::No,
                timer_c: None,
                route: None,
                tries,
                failover_at: None,
                group: 0,
            };
            branch.begin(false, now, timers, None);
            let c = Entry {
                server: Server::Absent,
                upstream: downstream,
                original: Vec::new(),
                response: Vec::new(),
                branches: vec![branch],
                best: Best::default(),
                answered: false,
                cancelled: false,
                scheduled: None,
                counted: 0,
            };
            let ckey = Key {
                branch: key.branch | (i as u64) << FORK_SHIFT,
                cancel: true,
            };
            match self.map.insert(ckey, c) {
                None => {
                    metrics.active_transactions.fetch_add(1, Ordering::Relaxed);
                }
                Some(old) => {
                    metrics
                        .transaction_bytes
                        .fetch_sub(old.counted as u64, Ordering::Relaxed);
                }
            }
            self.reschedule(ckey, metrics);
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
pub enum NotStarted {
    /// The same transaction already exists (a retransmission raced in).
    Exists,
    /// [`MAX_TRANSACTIONS`] or the memory bound reached.
    Full,
}

/// The proxy's transactions.
#[derive(Debug)]
pub struct Transactions {
    shards: Shards<Shard>,
    timers: TimerConfig,
    max_bytes: u64,
    /// How long a next hop found by DNS may stay silent (not even a
    /// provisional response) before another of its addresses is tried.
    failover_after: Option<Duration>,
    /// Where names lead: the other addresses.
    names: Option<Arc<NameTable>>,
    /// The driver's timer thread sleeps with the table empty: the next
    /// [`start`](Self::start) asks for it to be woken ([`Wake::timers`]).
    idle: std::sync::atomic::AtomicBool,
}

/// The entry a response or error names, and which of its branches:
/// CANCELs have entries of their own, under their branch's key.
fn split(key: Key) -> (Key, usize) {
    if key.cancel {
        return (key, 0);
    }
    let fork = (key.branch >> FORK_SHIFT) & 0xf;
    let entry = Key {
        branch: key.branch & ID_MASK,
        cancel: false,
    };
    (entry, fork as usize)
}

impl Entry {
    /// Once no branch is pending: the next q group starts (its requests
    /// into `sends`), or the best final response is written into `out`
    /// for the caller (§16.7 step 6: a 503 chosen among several branches
    /// goes up as 500). `Upstream::Send` when `out` holds one.
    fn settle(
        &mut self,
        key: Key,
        now: Instant,
        timers: TimerConfig,
        failover: Option<Duration>,
        out: &mut Vec<u8>,
        sends: &mut Sends,
    ) -> Upstream {
        if self.server.final_sent() || self.branches.iter().any(Branch::pending) {
            return Upstream::Absorbed;
        }
        let next = self
            .branches
            .iter()
            .filter(|b| b.client.is_none())
            .map(|b| b.group)
            .min();
        if let Some(group) = next.filter(|_| !self.answered && !self.cancelled) {
            let invite = self.invite();
            for b in self.branches.iter_mut().filter(|b| b.group == group) {
                b.begin(invite, now, timers, failover);
                sends.push(&b.forwarded, b.downstream);
            }
            return Upstream::Absorbed;
        }
        let forked = self.branches.len() > 1;
        let status = match self.best.write(out) {
            Some(s) if !(forked && s == StatusCode::SERVICE_UNAVAILABLE) => s,
            kept => {
                let own = match kept.or(self.best.status()) {
                    Some(StatusCode::SERVICE_UNAVAILABLE) if forked => {
                        StatusCode::SERVER_INTERNAL_ERROR
                    }
                    Some(s) => s,
                    None => StatusCode::REQUEST_TIMEOUT,
                };
                out.clear();
                own_response(&self.original, own, key, out);
                own
            }
        };
        self.best = Best::default();
        self.original = Vec::new();
        if out.is_empty() || !self.server.tu_response(status, now).send_response {
            out.clear();
            return Upstream::Absorbed;
        }
        self.response.clear();
        self.response.extend_from_slice(out);
        Upstream::Send(self.upstream)
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
            shards: Shards::new(SHARDS, Shard::default),
            timers,
            max_bytes,
            failover_after: None,
            names: None,
            idle: std::sync::atomic::AtomicBool::new(false),
        }
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

    /// The same table, trying other addresses of names in `names`
    /// (RFC 3263 §4.3).
    pub fn with_names(mut self, names: Arc<NameTable>) -> Self {
        self.names = Some(names);
        self
    }

    /// RFC 3263 §4.3: branch `b`'s next hop failed (no answer, refused,
    /// or 503 with perhaps a Retry-After in seconds). The address is
    /// skipped for a while; if the name leads elsewhere too, the request
    /// goes there as a new transaction (the next try's branch) and `true`
    /// is returned. `settled`: the caller has had its final response.
    fn fail_over(
        &self,
        b: &mut Branch,
        settled: bool,
        retry_after: Option<u32>,
        now: Instant,
        sends: &mut Sends,
        metrics: &Metrics,
    ) -> bool {
        let (Some(route), Some(names)) = (b.route.as_deref(), self.names.as_deref()) else {
            return false;
        };
        if let Some(skip) = names.failed(b.downstream.0, b.downstream.1, retry_after, now) {
            sends.failed.push((b.downstream, skip));
        }
        if b.cancel != Cancel::No || settled || b.tries + 1 >= MAX_TRIES || b.forwarded.is_empty() {
            return false;
        }
        let Some(next) = names.alternative(&route.name, route.port, route.transport, now) else {
            return false;
        };
        if next == b.downstream.0 || !renumber(&mut b.forwarded, b.tries + 1) {
            return false;
        }
        b.tries += 1;
        b.downstream.0 = next;
        let invite = matches!(b.client, Some(Client::Invite(_)));
        let ringing = b.timer_c.is_some();
        b.begin(invite, now, self.timers, self.failover_after);
        if !ringing {
            b.timer_c = None;
        }
        b.ack.clear();
        sends.push(&b.forwarded, b.downstream);
        metrics.hop_failovers.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Bytes of map and heap slots allocated (used or not): what the
    /// table would hand back to the allocator when idle.
    pub fn allocated(&self) -> usize {
        self.shards
            .each()
            .map(|s| {
                s.map.capacity() * (std::mem::size_of::<(Key, Entry)>() + 1)
                    + s.heap.capacity() * std::mem::size_of::<Reverse<(Instant, Key)>>()
            })
            .sum()
    }

    fn shard(&self, key: Key) -> impl std::ops::DerefMut<Target = Shard> + '_ {
        self.shards.lock((key.branch % SHARDS as u64) as usize)
    }

    /// Entries in the table.
    pub fn len(&self) -> usize {
        self.shards.each().map(|s| s.map.len()).sum()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Branches of requests that await a final response: the forks and
    /// tries still pending, CANCELs included.
    pub fn pending_branches(&self) -> usize {
        self.shards
            .each()
            .map(|s| {
                let pending = s.map.values().flat_map(|e| &e.branches);
                pending.filter(|b| b.pending()).count()
            })
            .sum()
    }

    /// Transactions whose caller has not had a final response yet (what a
    /// stopping server waits for; entries kept only to absorb
    /// retransmissions after the final response do not count).
    pub fn unanswered(&self) -> usize {
        use sip_core::transaction::ServerNonInviteState as N;
        self.shards
            .each()
            .map(|s| {
                s.map
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
        let mut shard = self.shard(key);
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

    /// Starts the transaction for `request` (as received from `upstream`)
    /// with a branch per target (at most [`MAX_BRANCHES`], sorted by
    /// group; the rest are left out). The first target's request is the
    /// caller's to send; the others of its group go into `sends`, later
    /// groups when the earlier ones failed. An INVITE gets 100 Trying into
    /// `sends` at once (§16.2, §17.2.1).
    #[allow(clippy::too_many_arguments)]
    pub fn start<'a>(
        &self,
        key: Key,
        request: &Message<'_>,
        upstream: Hop,
        targets: impl IntoIterator<Item = Target<'a>>,
        now: Instant,
        sends: &mut Sends,
        metrics: &Metrics,
    ) -> Result<(), NotStarted> {
        let active = &metrics.active_transactions;
        if active.load(Ordering::Relaxed) >= MAX_TRANSACTIONS
            || metrics.transaction_bytes.load(Ordering::Relaxed) >= self.max_bytes
        {
            return Err(NotStarted::Full);
        }
        let mut shard = self.shard(key);
        if shard.map.contains_key(&key) {
            return Err(NotStarted::Exists);
        }
        let invite = request.method() == Method::Invite;
        let mut branches: Vec<Branch> = targets
            .into_iter()
            .take(MAX_BRANCHES)
            .map(|t| Branch {
                client: None,
                downstream: t.hop,
                forwarded: t.forwarded.to_vec(),
                ack: Vec::new(),
                cancel: Cancel::No,
                timer_c: None,
                route: t.route.map(Box::new),
                tries: 0,
                failover_at: None,
                group: t.group,
            })
            .collect();
        let first = branches.first().map_or(0, |b| b.group);
        for (i, b) in branches.iter_mut().enumerate() {
            if b.group == first {
                b.begin(invite, now, self.timers, self.failover_after);
                if i > 0 {
                    sends.push(&b.forwarded, b.downstream);
                }
            }
        }
        let reliable_up = upstream.1.is_reliable();
        let mut e = Entry {
            server: if invite {
                Server::Invite(ServerInvite::new(reliable_up, self.timers))
            } else {
                Server::NonInvite(ServerNonInvite::new(reliable_up, self.timers))
            },
            upstream,
            original: request.as_bytes().to_vec(),
            response: Vec::new(),
            branches,
            best: Best::default(),
            answered: false,
            cancelled: false,
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
            sends.wake.timers = true;
        }
        Ok(())
    }

    /// A CANCEL for the INVITE whose entry is `invite`: `false` when there
    /// is none (the caller answers 481). Otherwise the caller answers 200;
    /// this sends CANCEL down every pending branch, at once where a
    /// provisional response has arrived, else when one does (§9.1,
    /// §16.10), and starts no further branch.
    pub fn on_cancel(
        &self,
        invite: Key,
        now: Instant,
        sends: &mut Sends,
        metrics: &Metrics,
    ) -> bool {
        let mut shard = self.shard(invite);
        let Some(e) = shard.map.get_mut(&invite) else {
            return false;
        };
        if !e.invite() {
            return false;
        }
        metrics.cancels.fetch_add(1, Ordering::Relaxed);
        e.cancelled = true;
        let ringing = e.cancel_others(None);
        shard.cancel(invite, &ringing, now, self.timers, sends, metrics);
        shard.reschedule(invite, metrics);
        true
    }

    /// A response from downstream. For [`Upstream::Send`], `out` holds
    /// what goes upstream: this response with this proxy's Via removed
    /// (`forward` writes that), or, when it ends the last pending branch
    /// of a forked request, the best final response of all (§16.7).
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
        let (ekey, fork) = split(key);
        let mut guard = self.shard(ekey);
        let shard = &mut *guard;
        let Some(e) = shard.map.get_mut(&ekey) else {
            return Upstream::Unknown;
        };
        let invite = e.invite();
        let settled = e.server.final_sent();
        let absent = matches!(e.server, Server::Absent);
        let Some(b) = e.branches.get_mut(fork) else {
            return Upstream::Absorbed;
        };
        let Some(client) = b.client.as_mut() else {
            return Upstream::Absorbed;
        };
        if try_of(msg) != b.tries {
            // From an address given up for another: a 2xx to the INVITE
            // still goes upstream (statelessly, as a 2xx may), the rest
            // ends here.
            let client_invite = matches!(client, Client::Invite(_));
            return if status.is_success() && client_invite && !key.cancel {
                Upstream::Unknown
            } else {
                Upstream::Absorbed
            };
        }
        b.failover_at = None;
        let pending = client.pending();
        let o = client.on_response(status, now);
        if o.send_ack {
            if b.ack.is_empty() {
                if let Ok(req) = Message::parse(&b.forwarded) {
                    write_ack(&req, msg, &mut b.ack);
                }
            }
            if !b.ack.is_empty() {
                sends.push(&b.ack, b.downstream);
            }
        }
        if pending
            && status == StatusCode::SERVICE_UNAVAILABLE
            && self.fail_over(b, settled, retry_after(msg), now, sends, metrics)
        {
            shard.reschedule(ekey, metrics);
            return Upstream::Absorbed;
        }
        if !b.pending() {
            // Final response: what was kept to resend the request is no
            // longer needed.
            b.forwarded = Vec::new();
            b.timer_c = None;
        } else if status.is_provisional() && b.timer_c.is_some() {
            b.timer_c = Some(now + TIMER_C);
        }
        let mut ringing = Vec::new();
        if b.cancel == Cancel::Wanted && b.proceeding() {
            ringing.push(fork);
        }
        let mut verdict = Upstream::Absorbed;
        if o.deliver && status != StatusCode::TRYING && !absent {
            out.clear();
            let written = forward(msg, out);
            if status.is_final() && !status.is_success() {
                if status.as_u16() >= 600 {
                    // A 6xx ends the search (§16.7 step 10).
                    e.answered = true;
                    if invite {
                        ringing.extend(e.cancel_others(Some(fork)));
                    }
                }
                // One that cannot be passed on is answered with its
                // status by this proxy.
                e.best.offer(status, if written { out } else { &[] });
                verdict = e.settle(ekey, now, self.timers, self.failover_after, out, sends);
            } else if written && e.server.tu_response(status, now).send_response {
                verdict = Upstream::Send(e.upstream);
                e.response.clear();
                if !(status.is_success() && invite) {
                    e.response.extend_from_slice(out);
                }
            } else {
                out.clear();
                if status.is_success() && invite {
                    // The caller's transaction is over (timer L): a 2xx
                    // still goes up, statelessly, as a 2xx may.
                    verdict = Upstream::Unknown;
                }
            }
            if status.is_success() {
                e.answered = true;
                if invite {
                    ringing.extend(e.cancel_others(Some(fork)));
                }
            }
        }
        shard.cancel(ekey, &ringing, now, self.timers, sends, metrics);
        shard.reschedule(ekey, metrics);
        verdict
    }

    /// Sending `key`'s request downstream failed (TCP connect refused or
    /// the connection broke): its branch ends, and once no other branch is
    /// pending the caller gets the best answer, 503 at once if that was
    /// the only one, instead of 408 after timer B (§16.7 step 5,
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
        let (ekey, fork) = split(key);
        let mut guard = self.shard(ekey);
        let shard = &mut *guard;
        let Some(e) = shard.map.get_mut(&ekey) else {
            return;
        };
        let settled = e.server.final_sent();
        let Some(b) = e.branches.get_mut(fork) else {
            return;
        };
        if !b.pending() || tries != b.tries {
            return;
        }
        if self.fail_over(b, settled, None, now, sends, metrics) {
            shard.reschedule(ekey, metrics);
            return;
        }
        b.abandon();
        e.best.offer(StatusCode::SERVICE_UNAVAILABLE, &[]);
        let mut out = Vec::new();
        let upstream = e.settle(ekey, now, self.timers, self.failover_after, &mut out, sends);
        if let Upstream::Send(hop) = upstream {
            sends.push(&out, hop);
        }
        shard.reschedule(ekey, metrics);
    }

    /// The earliest time a timer may be due (a superseded one can make it
    /// early, never late); `None` when nothing is scheduled.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.shards
            .each()
            .filter_map(|s| s.heap.peek().map(|Reverse((t, _))| *t))
            .min()
    }

    /// Runs every timer due at `now`; what must be sent goes into `sends`.
    pub fn tick(&self, now: Instant, sends: &mut Sends, metrics: &Metrics) {
        for mut guard in self.shards.each() {
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
        let settled = e.server.final_sent();
        let mut ringing = Vec::new();
        let mut ended = false;
        for (i, b) in e.branches.iter_mut().enumerate() {
            let Some(client) = b.client.as_mut() else {
                continue;
            };
            let c = client.on_timer(now);
            if c.retransmit && !b.forwarded.is_empty() {
                sends.push(&b.forwarded, b.downstream);
            }
            // Not a word from a next hop found by DNS, or its transaction
            // timed out: another of its addresses, if there is one.
            let silent = b.failover_at.is_some_and(|t| now >= t);
            if silent {
                b.failover_at = None;
            }
            if (silent || c.timeout) && self.fail_over(b, settled, None, now, sends, metrics) {
                continue;
            }
            let mut give_up = c.timeout;
            if b.timer_c.is_some_and(|t| now >= t) {
                if b.cancel != Cancel::Sent && b.proceeding() {
                    // Timer C: cancel the branch; its 487 comes back
                    // normally, and if nothing does, give up at the next
                    // firing.
                    b.timer_c = Some(now + self.timers.timeout());
                    ringing.push(i);
                    continue;
                }
                b.timer_c = None;
                give_up |= b.pending();
            }
            if give_up {
                b.abandon();
                ended = true;
                if !settled {
                    metrics.transaction_timeouts.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if ended {
            e.best.offer(StatusCode::REQUEST_TIMEOUT, &[]);
            let mut out = Vec::new();
            if let Upstream::Send(hop) =
                e.settle(key, now, self.timers, self.failover_after, &mut out, sends)
            {
                sends.push(&out, hop);
            }
        }
        shard.cancel(key, &ringing, now, self.timers, sends, metrics);
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

    /// One target: the request as forwarded, its hop and name.
    fn one(forwarded: &[u8], hop: Hop, route: Option<Route>) -> [Target<'_>; 1] {
        [Target {
            forwarded,
            hop,
            route,
            group: 0,
        }]
    }

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
            one(FORWARDED, hop(5070, down), None),
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
                one(FORWARDED, hop(5070, Transport::Udp), None),
                t0,
                &mut sends,
                &m,
            ) {
                Ok(()) => started += 1,
                Err(NotStarted::Full) => full += 1,
                Err(NotStarted::Exists) => unreachable!("distinct keys"),
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
                one(FORWARDED, hop(5070, Transport::Udp), None),
                t0,
                &mut sends,
                &m
            ),
            Err(NotStarted::Exists)
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

    use crate::proto::names::{key_of, Found};

    /// An INVITE to `pool.example`, a name leading to the loopback
    /// addresses at `ports` in order, first sent to port 5070, the first;
    /// tries others after 2 s of silence.
    fn pooled(t0: Instant, ports: &[u16]) -> (Transactions, Metrics, Sends) {
        let names = Arc::new(NameTable::new(&crate::config::DnsSettings::default()));
        let udp = Transport::Udp;
        assert_eq!(names.find("pool.example", None, udp, t0), Found::Asked);
        let addrs = ports.iter().map(|p| hop(*p, udp).0).collect();
        names.finish(&key_of("pool.example", None, udp), addrs, 3600, t0);
        let tx = Transactions::new(TimerConfig::RFC3261, DEFAULT_MAX_BYTES)
            .with_failover_after(Some(Duration::from_secs(2)))
            .with_names(names);
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
            one(FORWARDED, hop(5070, Transport::Udp), Some(route)),
            t0,
            &mut sends,
            &m,
        )
        .unwrap();
        sends.clear();
        (tx, m, sends)
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
        let (tx, m, mut sends) = pooled(t0, &[5070, 5071, 5072]);
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
        assert_eq!(sends.failed_hops(), [(hop(5070, Transport::Udp), 30)]);
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
        assert_eq!(sends.failed_hops(), [(hop(5071, Transport::Udp), 120)]);
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
        let (tx, m, mut sends) = pooled(t0, &[5070, 5071]);
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
        let (tx, m, mut sends) = pooled(t0, &ports);
        let fwd = Message::parse(FORWARDED).unwrap();
        let key = Key::of_message(&fwd).unwrap();
        let mut failed = 0;
        for n in 0..MAX_TRIES - 1 {
            tx.on_transport_error(key, n, t0, &mut sends, &m);
            assert_eq!(
                statuses(&sends),
                [format!("INVITE->{}", 5071 + u16::from(n))]
            );
            failed += sends.failed_hops().len();
            sends.clear();
        }
        tx.on_transport_error(key, MAX_TRIES - 1, t0, &mut sends, &m);
        assert_eq!(statuses(&sends), ["503->5080"]);
        failed += sends.failed_hops().len();
        assert_eq!(failed, usize::from(MAX_TRIES));
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
