//! Transaction-stateful proxying (RFC 3261 §16 over the §17 machines of
//! `sip_core::transaction`).
//!
//! Every request the proxy forwards gets an entry: a server transaction
//! towards the previous hop and a client transaction towards the next,
//! with the bytes either side may have to send again. The table takes
//! messages and time and writes what to send into a
//! [`Sends`](crate::proto::effects::Sends); sockets and
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
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sip_core::transaction::{ServerInvite, ServerInviteState, ServerNonInvite, TimerConfig};
use sip_core::writer::{write_ack, write_cancel, write_response, ResponseOptions};
use sip_core::{Message, Method, StatusCode};

use crate::proto::branch::{
    renumber, retry_after, split, try_of, Key, FORK_SHIFT, LOCAL_TAG_PREFIX, MAX_TRIES,
};
use crate::proto::effects::{Hop, Sends};
use crate::proto::fork::{Best, MAX_BRANCHES};
use crate::proto::guard::SourceKey;
use crate::proto::legs::{Branch, Cancel, Client, Entry, Server, Target, TIMER_C};
use crate::proto::metrics::Metrics;
use crate::proto::names::NameTable;
use crate::proto::shares::SourceShares;
use crate::shards::Shards;
pub use sip_core::Transport;

/// Most transactions at once; past it new requests get 503.
pub const MAX_TRANSACTIONS: u64 = 1 << 20;
pub use crate::config::DEFAULT_MAX_TRANSACTION_BYTES as DEFAULT_MAX_BYTES;
const SHARDS: usize = 32;
#[derive(Debug, Default)]
struct Shard {
    map: HashMap<Key, Entry>,
    heap: BinaryHeap<Reverse<(Instant, Key)>>,
}

impl Shard {
    /// Puts `key` on the heap for its entry's next deadline, or removes a
    /// finished entry; keeps the memory gauge in step with the entry.
    fn reschedule(&mut self, key: Key, metrics: &Metrics, shares: &SourceShares) {
        let Some(e) = self.map.get_mut(&key) else {
            return;
        };
        if e.done() {
            let gone = e.counted;
            if let Some(s) = e.source {
                shares.change(s, 0, gone as u64);
            }
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
            if let Some(s) = e.source {
                shares.change(s, now as u64, e.counted as u64);
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
        (metrics, shares): (&Metrics, &SourceShares),
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
            let ckey = Key {
                branch: key.branch | (i as u64) << FORK_SHIFT,
                cancel: true,
            };
            sends.push_request(&bytes, downstream, (ckey, tries));
            let mut branch = Branch {
                client: None,
                key: ckey,
                downstream,
                forwarded: bytes,
                ack: Vec::new(),
                cancel: Cancel::No,
                timer_c: None,
                route: None,
                tries,
                failover_at: None,
                group: 0,
                answered_challenge: false,
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
                source: None,
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
            self.reschedule(ckey, metrics, shares);
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
    /// The source's transactions hold their whole share of the memory.
    OverShare,
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
    /// Trunks' credentials, for their challenges.
    credentials: Option<crate::proto::trunk_auth::Credentials>,
    /// The driver's timer thread sleeps with the table empty: the next
    /// [`start`](Self::start) asks for it to be woken ([`Wake::timers`]).
    idle: std::sync::atomic::AtomicBool,
    /// The bytes each source's transactions hold (a sixteenth of
    /// `max_bytes` each).
    shares: SourceShares,
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
                sends.push_request(&b.forwarded, b.downstream, b.sent());
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
            credentials: None,
            names: None,
            idle: std::sync::atomic::AtomicBool::new(false),
            shares: SourceShares::new(max_bytes / 16),
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

    /// The same table, answering trunks' challenges with `credentials`.
    pub fn with_credentials(
        mut self,
        credentials: Option<crate::proto::trunk_auth::Credentials>,
    ) -> Self {
        self.credentials = credentials;
        self
    }

    /// A gateway of a trunk with credentials challenged branch `b`'s
    /// request (401/407): it goes again with them and a CSeq one higher,
    /// as the next try of the branch (once per branch). `true` when sent.
    fn answer_challenge(
        &self,
        b: &mut Branch,
        challenge: &Message<'_>,
        now: Instant,
        sends: &mut Sends,
    ) -> bool {
        let (Some(creds), Some(route)) = (self.credentials.as_ref(), b.route.as_deref()) else {
            return false;
        };
        if b.answered_challenge
            || b.cancel != Cancel::No
            || b.tries + 1 >= MAX_TRIES
            || b.forwarded.is_empty()
        {
            return false;
        }
        let Some(mut again) = creds.answer(&route.name, &b.forwarded, challenge) else {
            return false;
        };
        if !renumber(&mut again, b.tries + 1) {
            return false;
        }
        let invite = matches!(b.client, Some(Client::Invite(_)));
        b.forwarded = again;
        b.tries += 1;
        b.answered_challenge = true;
        b.begin(invite, now, self.timers, self.failover_after);
        b.ack.clear();
        sends.push_request(&b.forwarded, b.downstream, b.sent());
        sends.renumbered.push((
            challenge.call_id().to_owned(),
            challenge.from().tag().unwrap_or("").to_owned(),
        ));
        true
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
        sends.push_request(&b.forwarded, b.downstream, b.sent());
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

    /// Whether a transaction of this proxy's has the branch `key`
    /// (possibly one of its forks).
    pub fn knows(&self, key: Key) -> bool {
        let (ekey, _) = split(key);
        self.shard(ekey).map.contains_key(&ekey)
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
            shard.reschedule(key, metrics, &self.shares);
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
    /// group; the rest are left out), its memory counted against
    /// `source`'s share (`None`: one that carries many parties' requests). The first target's request is the
    /// caller's to send; the others of its group go into `sends`, later
    /// groups when the earlier ones failed. An INVITE gets 100 Trying into
    /// `sends` at once (§16.2, §17.2.1).
    #[allow(clippy::too_many_arguments)]
    pub fn start<'a>(
        &self,
        key: Key,
        request: &Message<'_>,
        (upstream, source): (Hop, Option<SourceKey>),
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
        // A copy racing in is a retransmission first: it is absorbed,
        // not refused, whatever its source holds.
        if source.is_some_and(|s| !self.shares.has_room(s)) {
            return Err(NotStarted::OverShare);
        }
        let invite = request.method() == Method::Invite;
        let mut branches: Vec<Branch> = targets
            .into_iter()
            .take(MAX_BRANCHES)
            .enumerate()
            .map(|(i, t)| Branch {
                client: None,
                key: Key {
                    branch: key.branch | (i as u64) << FORK_SHIFT,
                    cancel: false,
                },
                downstream: t.hop,
                forwarded: t.forwarded.to_vec(),
                ack: Vec::new(),
                cancel: Cancel::No,
                timer_c: None,
                route: t.route.map(Box::new),
                tries: 0,
                failover_at: None,
                group: t.group,
                answered_challenge: false,
            })
            .collect();
        let first = branches.first().map_or(0, |b| b.group);
        for (i, b) in branches.iter_mut().enumerate() {
            if b.group == first {
                b.begin(invite, now, self.timers, self.failover_after);
                if i > 0 {
                    sends.push_request(&b.forwarded, b.downstream, b.sent());
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
            source,
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
        shard.reschedule(key, metrics, &self.shares);
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
        shard.cancel(
            invite,
            &ringing,
            now,
            self.timers,
            sends,
            (metrics, &self.shares),
        );
        shard.reschedule(invite, metrics, &self.shares);
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
            && matches!(status.as_u16(), 401 | 407)
            && self.answer_challenge(b, msg, now, sends)
        {
            shard.reschedule(ekey, metrics, &self.shares);
            return Upstream::Absorbed;
        }
        // A trunk's gateway that answers 408 (its own side timed out) is
        // failed over too, as a 503 is for any name (RFC 3263 §4.3).
        let trunk = b
            .route
            .as_deref()
            .is_some_and(|r| r.name.starts_with("trunk."));
        if pending
            && (status == StatusCode::SERVICE_UNAVAILABLE
                || trunk && status == StatusCode::REQUEST_TIMEOUT)
            && self.fail_over(b, settled, retry_after(msg), now, sends, metrics)
        {
            shard.reschedule(ekey, metrics, &self.shares);
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
        shard.cancel(
            ekey,
            &ringing,
            now,
            self.timers,
            sends,
            (metrics, &self.shares),
        );
        shard.reschedule(ekey, metrics, &self.shares);
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
            shard.reschedule(ekey, metrics, &self.shares);
            return;
        }
        b.abandon();
        e.best.offer(StatusCode::SERVICE_UNAVAILABLE, &[]);
        let mut out = Vec::new();
        let upstream = e.settle(ekey, now, self.timers, self.failover_after, &mut out, sends);
        if let Upstream::Send(hop) = upstream {
            sends.push(&out, hop);
        }
        shard.reschedule(ekey, metrics, &self.shares);
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
                shard.reschedule(key, metrics, &self.shares);
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
                sends.push_request(&b.forwarded, b.downstream, b.sent());
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
        shard.cancel(
            key,
            &ringing,
            now,
            self.timers,
            sends,
            (metrics, &self.shares),
        );
    }
}

#[cfg(test)]
#[path = "stateful_tests.rs"]
mod tests;
