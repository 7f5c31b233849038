//! What the core says back ([`Reply`], [`Event`]), where a hop goes
//! (`Next`), and the few constants and counters every role uses.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use sip_core::Transport;

use crate::proto::names::Route;

/// Methods this server accepts, advertised in Allow.
pub const ALLOW: &str = "INVITE, ACK, CANCEL, BYE, OPTIONS, REGISTER, MESSAGE, INFO, UPDATE, PRACK";

/// What to do with what the core wrote into `out`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Send `out` to this address over this transport (for TCP, on the
    /// connection with that peer, opening one if needed).
    Send(SocketAddr, Transport),
    /// Send nothing (responses not for us, ACKs, unanswerable garbage).
    Drop,
    /// `out` holds an answer that may go out only once the records in
    /// `Core::to_persist` are stored: store them, then call
    /// `Core::persisted`, which says what to send.
    Persist,
    /// Another change to the same address-of-record is being stored
    /// (by another worker): park the message on it
    /// (`Core::park_busy`), which its commit hands back.
    Retry,
}

/// Something the operator should hear about; the drivers log these
/// (rate limited).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A wrong answer to a nonce we issued.
    AuthFailed {
        /// The source.
        src: SocketAddr,
        /// The From user it claimed.
        user: String,
    },
    /// A message too large for UDP, answered or dropped.
    Oversize {
        /// What it was ("response", "forwarded response").
        what: &'static str,
        /// Where it was for.
        dest: SocketAddr,
        /// Its size.
        len: usize,
    },
    /// A source was banned after repeated authentication failures.
    Banned {
        /// The source banned (all its ports; an IPv6 prefix).
        source: crate::proto::guard::SourceKey,
        /// What the ban shuts out.
        scope: crate::proto::guard::Scope,
        /// For how long, seconds.
        seconds: u64,
    },
    /// A request for a domain this server neither serves nor peers with
    /// was refused (403, no open relay).
    RelayDenied {
        /// Its source.
        src: SocketAddr,
        /// Its Request-URI.
        target: String,
    },
    /// A request for a user found no open flow to any of its bindings
    /// (answered 430 Flow Failed).
    FlowFailed {
        /// The address-of-record.
        aor: String,
        /// Bindings it had, all on closed flows.
        bindings: usize,
    },
    /// A request was dropped by the per-source rate limit.
    RateLimited {
        /// Its source.
        src: SocketAddr,
    },
    /// A call's media could not be relayed (refused, or passed on
    /// unrelayed).
    MediaFailed {
        /// Its Call-ID.
        call_id: String,
        /// What happened.
        what: String,
    },
    /// A call was signed or verified (STIR/SHAKEN), or could not be.
    Stir {
        /// Its Call-ID.
        call_id: String,
        /// The outcome (`verstat` and why).
        what: String,
    },
    /// A request of this proxy's own (an operator's BYE) was given up
    /// unanswered at Timer F.
    Unanswered {
        /// Its branch.
        branch: String,
    },
    /// A binding change could not be stored and was refused with 500.
    JournalFailed {
        /// Its address-of-record.
        aor: String,
        /// Why.
        error: String,
    },
}
/// Where `Ctx::hop` says a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Next {
    /// There.
    At(SocketAddr),
    /// There, found by DNS for the route's name: another address may
    /// be tried if it fails.
    Named(SocketAddr, Route),
    /// Nowhere reachable.
    Nowhere,
    /// Not known without DNS yet: the name, port and transport to
    /// resolve.
    Resolving(String, Option<u16>, Transport),
    /// Not known, and the resolver has no room now.
    Busy,
}
/// The largest UDP payload (65,535 − 8 UDP − 20 IPv4 header bytes).
pub const MAX_DATAGRAM: usize = 65_507;

/// An unverified UDP source gets at most this many times the bytes it
/// sent (RFC 9000 §8.1 sets 3 for QUIC before address validation).
pub const AMPLIFICATION: usize = 3;
/// Bytes an answer adds besides the request's own headers and what it
/// lists (status line, To tag, Content-Length, Warning).
const RESPONSE_OVERHEAD: usize = 256;

/// The bytes an answer over UDP to a source nothing proves yet may list
/// (contacts, challenges) after echoing a request of `request` bytes,
/// so that the whole stays within [`AMPLIFICATION`] times the request:
/// a spoofed source is answered no larger than it asked.
pub fn unverified_budget(request: usize) -> usize {
    (AMPLIFICATION * request).saturating_sub(request + RESPONSE_OVERHEAD)
}

#[inline]
pub(super) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}
