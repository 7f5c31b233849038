//! One forwarded request's state in the stateful proxy: the server
//! transaction toward the caller, one branch (client transaction) per
//! target (RFC 3261 §16.6–16.7), and what each may have to send again.

use std::time::{Duration, Instant};

use sip_core::transaction::{
    ClientInvite, ClientInviteState, ClientNonInvite, ClientNonInviteState, Output, ServerInvite,
    ServerInviteState, ServerNonInvite, ServerNonInviteState, TimerConfig,
};
use sip_core::StatusCode;

use crate::proto::branch::Key;
use crate::proto::effects::Hop;
use crate::proto::fork::Best;
use crate::proto::names::Route;

/// Timer C (RFC 3261 §16.6 step 11): how long an INVITE may stay in
/// Proceeding after its last provisional response.
pub const TIMER_C: Duration = Duration::from_secs(180);

#[derive(Debug)]
pub(super) enum Server {
    Invite(ServerInvite),
    NonInvite(ServerNonInvite),
    /// A CANCEL this proxy originated: no one upstream to answer.
    Absent,
}

impl Server {
    pub(super) fn retransmission(&mut self) -> Output {
        match self {
            Server::Invite(t) => t.on_request_retransmission(),
            Server::NonInvite(t) => t.on_request_retransmission(),
            Server::Absent => Output::default(),
        }
    }

    pub(super) fn tu_response(&mut self, status: StatusCode, now: Instant) -> Output {
        match self {
            Server::Invite(t) => t.on_tu_response(status, now),
            Server::NonInvite(t) => t.on_tu_response(status, now),
            Server::Absent => Output::default(),
        }
    }

    pub(super) fn final_sent(&self) -> bool {
        match self {
            Server::Invite(t) => !matches!(t.state(), ServerInviteState::Proceeding { .. }),
            Server::NonInvite(t) => !matches!(
                t.state(),
                ServerNonInviteState::Trying | ServerNonInviteState::Proceeding
            ),
            Server::Absent => true,
        }
    }

    pub(super) fn deadline(&self) -> Option<Instant> {
        match self {
            Server::Invite(t) => t.next_deadline(),
            Server::NonInvite(t) => t.next_deadline(),
            Server::Absent => None,
        }
    }

    pub(super) fn on_timer(&mut self, now: Instant) -> Output {
        match self {
            Server::Invite(t) => t.on_timer(now),
            Server::NonInvite(t) => t.on_timer(now),
            Server::Absent => Output::default(),
        }
    }

    pub(super) fn terminated(&self) -> bool {
        match self {
            Server::Invite(t) => t.is_terminated(),
            Server::NonInvite(t) => t.is_terminated(),
            Server::Absent => true,
        }
    }
}

#[derive(Debug)]
pub(super) enum Client {
    Invite(ClientInvite),
    NonInvite(ClientNonInvite),
}

impl Client {
    pub(super) fn on_response(&mut self, status: StatusCode, now: Instant) -> Output {
        match self {
            Client::Invite(t) => t.on_response(status, now),
            Client::NonInvite(t) => t.on_response(status, now),
        }
    }

    /// No final response yet.
    pub(super) fn pending(&self) -> bool {
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

    pub(super) fn proceeding(&self) -> bool {
        matches!(self, Client::Invite(t) if t.state() == ClientInviteState::Proceeding)
    }

    pub(super) fn deadline(&self) -> Option<Instant> {
        match self {
            Client::Invite(t) => t.next_deadline(),
            Client::NonInvite(t) => t.next_deadline(),
        }
    }

    pub(super) fn on_timer(&mut self, now: Instant) -> Output {
        match self {
            Client::Invite(t) => t.on_timer(now),
            Client::NonInvite(t) => t.on_timer(now),
        }
    }

    pub(super) fn abandon(&mut self) -> Output {
        match self {
            Client::Invite(t) => t.on_transport_error(),
            Client::NonInvite(t) => t.on_transport_error(),
        }
    }

    pub(super) fn terminated(&self) -> bool {
        match self {
            Client::Invite(t) => t.is_terminated(),
            Client::NonInvite(t) => t.is_terminated(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cancel {
    No,
    /// Asked for before any provisional response: sent when one arrives.
    Wanted,
    Sent,
}

/// One target a request was forked to: a client transaction toward it
/// (RFC 3261 §16.6), with the bytes it may have to send again.
#[derive(Debug)]
pub(super) struct Branch {
    /// `None` while the branch waits for its q group (§16.6: serial
    /// search), and for good if an earlier group answered.
    pub(super) client: Option<Client>,
    /// The transaction its request is sent as (its try number aside).
    pub(super) key: Key,
    pub(super) downstream: Hop,
    /// The request as forwarded: resent by timers A/E, and the source of
    /// CANCEL and ACK.
    pub(super) forwarded: Vec<u8>,
    /// The ACK sent downstream for a non-2xx final, resent when the final
    /// is retransmitted.
    pub(super) ack: Vec<u8>,
    pub(super) cancel: Cancel,
    pub(super) timer_c: Option<Instant>,
    /// The name the next hop was found by, when DNS found it: another of
    /// its addresses is tried if this one fails.
    pub(super) route: Option<Box<Route>>,
    /// Which try this is (0: the first address).
    pub(super) tries: u8,
    /// When, without any response, the next address is tried.
    pub(super) failover_at: Option<Instant>,
    /// The q group (0 first): the branches of one group run in parallel.
    pub(super) group: u8,
    /// A trunk's challenge was answered on this branch (once only).
    pub(super) answered_challenge: bool,
}

impl Branch {
    pub(super) fn pending(&self) -> bool {
        self.client.as_ref().is_some_and(Client::pending)
    }

    pub(super) fn proceeding(&self) -> bool {
        self.client.as_ref().is_some_and(Client::proceeding)
    }

    pub(super) fn deadline(&self) -> Option<Instant> {
        let client = self.client.as_ref().and_then(Client::deadline);
        [client, self.timer_c, self.failover_at]
            .into_iter()
            .flatten()
            .min()
    }

    pub(super) fn terminated(&self) -> bool {
        self.client.as_ref().is_none_or(Client::terminated)
    }

    pub(super) fn capacity(&self) -> usize {
        std::mem::size_of::<Branch>() + self.forwarded.capacity() + self.ack.capacity()
    }

    /// Starts the client transaction; the caller sends `forwarded`.
    pub(super) fn begin(
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

    /// What it sends: the request, as its transaction's current try.
    pub(super) fn sent(&self) -> (Key, u8) {
        (self.key, self.tries)
    }

    /// The client transaction gave up (timeout or transport failure).
    pub(super) fn abandon(&mut self) {
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
pub(super) struct Entry {
    pub(super) server: Server,
    pub(super) upstream: Hop,
    /// The request as received, kept until a final response goes upstream
    /// (a 408 or 503 is written from it).
    pub(super) original: Vec<u8>,
    /// The last response sent upstream, resent for retransmitted requests
    /// and by timer G.
    pub(super) response: Vec<u8>,
    /// One per target, in order (at most [`MAX_BRANCHES`]).
    pub(super) branches: Vec<Branch>,
    /// The best final response of the branches ended so far (§16.7).
    pub(super) best: Best,
    /// A 2xx or 6xx came back: no further group is started.
    pub(super) answered: bool,
    /// The caller cancelled (§16.10).
    pub(super) cancelled: bool,
    /// The deadline this entry has on the heap.
    pub(super) scheduled: Option<Instant>,
    /// The bytes this entry adds to `Metrics::transaction_bytes`.
    pub(super) counted: usize,
    /// Whose share of the table those bytes count against (`None`: no
    /// share).
    pub(super) source: Option<crate::proto::guard::SourceKey>,
}

impl Entry {
    /// Memory held for this entry: the entry, its key in the map and on the
    /// heap, and the messages it keeps.
    pub(super) fn footprint(&self) -> usize {
        std::mem::size_of::<Entry>()
            + 2 * std::mem::size_of::<(Instant, Key)>()
            + self.original.capacity()
            + self.response.capacity()
            + self.best.capacity()
            + self.branches.iter().map(Branch::capacity).sum::<usize>()
    }

    pub(super) fn deadline(&self) -> Option<Instant> {
        let branches = self.branches.iter().filter_map(Branch::deadline).min();
        [self.server.deadline(), branches]
            .into_iter()
            .flatten()
            .min()
    }

    pub(super) fn done(&self) -> bool {
        self.server.terminated() && self.branches.iter().all(Branch::terminated)
    }

    pub(super) fn invite(&self) -> bool {
        matches!(self.server, Server::Invite(_))
    }

    /// A 2xx or 6xx to the INVITE on branch `except`: CANCEL every other
    /// pending branch (§16.7 step 10), at once when it is ringing, else
    /// when it first answers.
    pub(super) fn cancel_others(&mut self, except: Option<usize>) -> Vec<usize> {
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
