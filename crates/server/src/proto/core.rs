//! The core's entry: [`Core::handle`] takes one message, its source,
//! transport and [`Now`], and says what to do with it ([`Reply`], plus
//! [`Core::extra`] messages, [`Core::to_persist`] records and
//! [`Core::events`]). The registrar (`registrar.rs`), proxy (`proxy.rs`)
//! and redirect server (`redirect.rs`) are its parts.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use sip_core::uri::Host;
use sip_core::writer::{write_error_response, write_response, ResponseOptions};
use sip_core::{HeaderName, Message, Method, StatusCode, Uri};

use crate::proto::auth::{AuthFailure, AuthResult};
use crate::proto::branch::Key;
use crate::proto::effects::Sends;
use crate::proto::guard::Verdict;
use crate::proto::location::{Binding, Prepared, Record, StoreError};
use crate::proto::metrics::{Stage, Stopwatch};
use crate::proto::names::{Found, Route};
use crate::proto::privacy::{Privacy, Reveal};
use crate::proto::shared::{Now, Shared};

pub use crate::proto::branch::LOCAL_TAG_PREFIX;

/// Methods this server accepts, advertised in Allow.
pub const ALLOW: &str = "INVITE, ACK, CANCEL, BYE, OPTIONS, REGISTER, MESSAGE, INFO, UPDATE, PRACK";

/// The transports (one type for the workspace). The server listens on
/// UDP, TCP and TLS; the drivers drop and count a message for any other.
pub use sip_core::Transport;

/// What to do with what the core wrote into `out`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Send `out` to this address over this transport (for TCP, on the
    /// connection with that peer, opening one if needed).
    Send(SocketAddr, Transport),
    /// Send nothing (responses not for us, ACKs, unanswerable garbage).
    Drop,
    /// `out` holds an answer that may go out only once the records in
    /// [`Core::to_persist`] are stored: store them, then call
    /// [`Core::persisted`], which says what to send.
    Persist,
    /// Another change to the same address-of-record is being stored
    /// (by another worker): park the message on it
    /// ([`Core::park_busy`]), which its commit hands back.
    Retry,
}

/// A binding change taken out of the core by [`Core::take_change`],
/// waiting for its records to be stored.
#[derive(Debug)]
#[must_use = "a change keeps its AoR busy until finished"]
pub struct Change {
    prepared: Prepared,
    dest: SocketAddr,
    transport: Transport,
}

impl Change {
    /// The records to store.
    pub fn records(&self) -> &[Record] {
        self.prepared.records()
    }
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
        /// The source banned (all its ports).
        src: SocketAddr,
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

/// Seconds a phone told "shutting down" waits before trying again.
const DRAIN_RETRY_AFTER: &str = "5";

/// Where [`Core::hop`] says a request goes.
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

/// A worker's request handler with its reusable buffers.
#[derive(Debug)]
pub struct Core {
    pub(super) shared: Arc<Shared>,
    pub(super) transport: Transport,
    pub(super) bindings: Vec<Binding>,
    pub(super) lines: String,
    pub(super) via: String,
    pub(super) ip: String,
    pub(super) rr: String,
    /// Addresses-of-record registered over a WebSocket by the messages
    /// handled since the driver last asked.
    pub(super) websocket_aors: Vec<String>,
    /// The other targets of the request being forked.
    pub(super) forks: Vec<crate::proto::fork::Fork>,
    tag: String,
    challenges: Vec<(&'static str, String)>,
    pub(super) sends: Sends,
    pub(super) path: String,
    /// The route to this node's end of a REGISTER's flow (shared
    /// location only).
    pub(super) node_route: String,
    /// Requests handled, for sampling stage timings.
    handled: u64,
    /// Whether this request's stages are timed.
    timed: bool,
    /// Whether the message is being handed in again after
    /// [`Reply::Retry`] or a resolution: it was admitted and counted the
    /// first time.
    pub(super) again: bool,
    /// When the message being handled arrived.
    pub(super) now: Now,
    /// A binding change waiting for [`Core::persisted`], and where its
    /// answer goes.
    pub(super) pending: Option<(Prepared, SocketAddr, Transport)>,
    /// The AoR of the last [`Reply::Retry`] (see `busy.rs`).
    pub(super) busy: Option<String>,
    /// Messages woken by this core's commits, to hand in again.
    pub(super) woken: std::collections::VecDeque<crate::proto::parked::Parked>,
    pub(super) events: Vec<Event>,
    /// A name was asked of the resolver while handling this message.
    asked: std::cell::Cell<bool>,
    /// The transaction and try of the request the last reply sends, when
    /// the stateful proxy forwarded one.
    pub(super) sent: Option<(Key, u8)>,
    /// The media relay's answer for the message handed in again after
    /// waiting on it ([`Core::handle_relayed`]).
    pub(super) media: Option<crate::proto::media::Outcome>,
    /// What STIR/SHAKEN adds to the request being forwarded.
    pub(super) stir_edit: Option<crate::proto::stir::StirEdit>,
    /// Call records made, for the driver to write.
    pub(super) records: Vec<crate::proto::dialogs::CallRecord>,
    /// When dialogs were last swept for timeouts (Unix ms).
    pub(super) swept_ms: u64,
    /// The request being routed goes to a trunk that hides the inside.
    pub(super) hide_out: bool,
    /// The request being routed came from such a trunk (revealed, or a
    /// call the trunk begins).
    pub(super) hidden_in: bool,
    /// In that hidden dialog the Call-ID is the inside's, sealed toward
    /// the trunk (not in a dialog the carrier began).
    pub(super) seal_call_id: bool,
}

/// The largest UDP payload (65,535 − 8 UDP − 20 IPv4 header bytes).
pub const MAX_DATAGRAM: usize = 65_507;

/// One request in this many has its stages timed: reading the clock
/// twice per stage cost more than some stages themselves.
pub const STAGE_SAMPLE: u64 = 16;

#[inline]
pub(super) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The address-of-record of a URI: `sip:user@host`, host lowercased.
#[inline]
pub fn aor(uri: &Uri<'_>) -> Option<String> {
    Some(aor_of(uri.user()?, uri.host()?))
}

/// `sip:user@host`, host lowercased.
#[inline]
pub(super) fn aor_of(user: &str, host: Host<'_>) -> String {
    let mut s = String::with_capacity(8 + user.len() + 32);
    s.push_str("sip:");
    s.push_str(user);
    s.push('@');
    match host {
        Host::Name(n) => {
            for c in n.chars() {
                s.push(c.to_ascii_lowercase());
            }
        }
        other => {
            let _ = write!(s, "{other}");
        }
    }
    s
}

/// What a user part at this server stands for: itself, or the ID inside
/// a pseudonym encrypted for us; `None` for a pseudonym that does not
/// open.
#[inline]
pub(super) fn reveal<'a>(
    privacy: Option<&Privacy>,
    user: &'a str,
    now: u64,
) -> Option<Cow<'a, str>> {
    let Some(p) = privacy else {
        return Some(Cow::Borrowed(user));
    };
    match p.reveal(user, now) {
        Reveal::Plain => Some(Cow::Borrowed(user)),
        Reveal::Id(id) => Some(Cow::Owned(id)),
        Reveal::Refused => None,
    }
}

/// Whether a header such as Supported or Require lists `tag`.
#[inline]
pub(super) fn has_option_tag(msg: &Message<'_>, name: HeaderName, tag: &str) -> bool {
    msg.headers_named(name)
        .flat_map(|h| h.value.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(tag))
}

/// The first URI of a stored Path (`<sip:edge;lr>, <…>`).
#[inline]
pub(super) fn first_path_uri(path: &str) -> Option<Uri<'_>> {
    let start = path.find('<')? + 1;
    let end = start + path[start..].find('>')?;
    Uri::parse(&path[start..end], sip_core::UriContext::Header)
        .ok()
        .filter(Uri::is_sip)
}

/// The transport address a URI or Via points at (IP literals and
/// `localhost` only: the hot path does no DNS).
#[inline]
pub(super) fn resolve(host: Host<'_>, port: Option<u16>) -> Option<SocketAddr> {
    let ip = match host {
        Host::V4(a) => IpAddr::V4(a),
        Host::V6(a) => IpAddr::V6(a),
        Host::Name(n) if n.eq_ignore_ascii_case("localhost") => IpAddr::from([127, 0, 0, 1]),
        Host::Name(_) => return None,
    };
    Some(SocketAddr::new(ip, port.unwrap_or(5060)))
}

impl Core {
    /// Where a request for `host:port` over `transport` goes: an IP
    /// literal or `localhost` as it is; over TLS, a domain name a peer's
    /// connection stands for (RFC 5923); any other name as DNS says
    /// (RFC 3263), from what the resolver holds. Over TLS the port
    /// defaults to 5061 (RFC 3261 §19.1.2). The hot path does no DNS.
    pub(super) fn hop(&self, host: Host<'_>, port: Option<u16>, transport: Transport) -> Next {
        let tls = transport == Transport::Tls;
        let name = match host {
            Host::Name(n) if !n.eq_ignore_ascii_case("localhost") => n,
            _ => {
                let port = port.or(tls.then_some(5061));
                return resolve(host, port).map_or(Next::Nowhere, Next::At);
            }
        };
        if tls {
            let alias = self.shared.flows.named(name, port.unwrap_or(5061));
            if let Some(a) = alias {
                return Next::At(a);
            }
        }
        match self.shared.names.find(name, port, transport, self.now.mono) {
            // Only a transaction can try another address: a stateless
            // proxy needs no copy of the name.
            Found::At(a) if self.shared.transactions.is_none() => Next::At(a),
            Found::At(a) => Next::Named(
                a,
                Route {
                    name: name.to_owned(),
                    port,
                    transport,
                },
            ),
            Found::Asked => {
                self.asked.set(true);
                Next::Resolving(name.to_owned(), port, transport)
            }
            Found::Resolving => Next::Resolving(name.to_owned(), port, transport),
            Found::Busy => Next::Busy,
            Found::Nowhere => Next::Nowhere,
        }
    }

    /// A handler for one worker.
    pub fn new(shared: Arc<Shared>) -> Self {
        let created = shared.created;
        Self {
            shared,
            transport: Transport::Udp,
            bindings: Vec::with_capacity(8),
            lines: String::with_capacity(512),
            via: String::with_capacity(128),
            ip: String::with_capacity(48),
            rr: String::with_capacity(64),
            forks: Vec::new(),
            websocket_aors: Vec::new(),
            tag: String::with_capacity(24),
            challenges: Vec::with_capacity(2),
            sends: Sends::default(),
            path: String::new(),
            node_route: String::new(),
            handled: 0,
            again: false,
            media: None,
            stir_edit: None,
            records: Vec::new(),
            swept_ms: 0,
            hide_out: false,
            hidden_in: false,
            seal_call_id: true,
            timed: false,
            now: Now {
                unix_ms: 0,
                mono: created,
            },
            pending: None,
            busy: None,
            woken: std::collections::VecDeque::new(),
            events: Vec::new(),
            asked: std::cell::Cell::new(false),
            sent: None,
        }
    }

    /// The start of a stage, when this request is timed (the metrics'
    /// stopwatch: instrumentation, not a protocol decision).
    #[inline]
    pub(super) fn clock(&self) -> Option<Stopwatch> {
        let read = self.shared.stage_clock.filter(|_| self.timed)?;
        Some(Stopwatch::at(read()))
    }

    /// Records a stage started at `t0`, when this request is timed.
    #[inline]
    pub(super) fn stage(&self, stage: Stage, t0: Option<Stopwatch>) {
        if let (Some(t0), Some(read)) = (t0, self.shared.stage_clock) {
            self.shared.metrics.stage(stage, t0.until(read()));
        }
    }

    /// The shared state.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The transaction (and try) of the request the last reply sends, when
    /// the stateful proxy forwarded one: a connection that cannot carry it
    /// fails that transaction.
    pub fn sent_key(&self) -> Option<(Key, u8)> {
        self.sent
    }

    /// Messages the last [`handle`](Self::handle) produced besides its
    /// reply (stateful proxy: 100 Trying, ACK and CANCEL downstream,
    /// responses resent for retransmitted requests).
    pub fn extra(&self) -> &Sends {
        &self.sends
    }

    /// What the last [`handle`](Self::handle) that returned
    /// [`Reply::Persist`] needs stored before its answer may go out.
    pub fn to_persist(&self) -> &[Record] {
        self.pending.as_ref().map_or(&[], |(p, _, _)| p.records())
    }

    /// Addresses-of-record registered over a WebSocket since the last
    /// call: the driver drops their bindings on that connection when it
    /// closes.
    pub fn websocket_registrations(&mut self) -> std::vec::Drain<'_, String> {
        self.websocket_aors.drain(..)
    }

    /// Whether the last calls produced anything worth logging.
    #[inline]
    pub fn has_events(&self) -> bool {
        !self.events.is_empty() || !self.records.is_empty()
    }

    /// Call records made since the driver last took them: to be written
    /// before what was produced with them is sent.
    pub fn take_records(&mut self) -> std::vec::Drain<'_, crate::proto::dialogs::CallRecord> {
        self.records.drain(..)
    }

    /// Things worth logging that the last calls produced; the driver
    /// drains them.
    pub fn events(&mut self) -> std::vec::Drain<'_, Event> {
        self.events.drain(..)
    }

    /// The earliest time a transaction timer may be due (stateful proxy),
    /// for the driver's timer.
    pub fn next_timer(&self) -> Option<Instant> {
        let own = self.shared.originated.next_deadline();
        let tx = self.shared.transactions.as_ref()?.next_deadline();
        own.into_iter().chain(tx).min()
    }

    /// Runs the transaction timers due at `now`; what must be sent is in
    /// [`extra`](Self::extra) afterwards.
    pub fn on_timer(&mut self, now: Now) {
        self.sends.clear();
        self.events.clear();
        if let Some(tx) = &self.shared.transactions {
            tx.tick(now.mono, &mut self.sends, &self.shared.metrics);
        }
        self.originated_timers(now);
        self.dialog_timers(now);
    }

    /// The driver stored (or failed to store) the records of the last
    /// [`Reply::Persist`]: the change takes effect and its answer, still
    /// in `out`, goes; or nothing changes and `out` becomes a 500 (503
    /// with Retry-After when a shared store is unavailable).
    /// `input` is the message that was handled.
    pub fn persisted(
        &mut self,
        stored: Result<(), StoreError>,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Reply {
        match self.take_change() {
            Some(change) => self.finish(change, stored, input, out),
            None => Reply::Drop,
        }
    }

    /// Takes the change of the last [`Reply::Persist`] out of the core,
    /// so a driver can store several in one round trip and
    /// [`finish`](Self::finish) each afterwards (its AoR stays busy
    /// until then). `out` still holds its answer: keep it with the change.
    pub fn take_change(&mut self) -> Option<Change> {
        self.pending
            .take()
            .map(|(prepared, dest, transport)| Change {
                prepared,
                dest,
                transport,
            })
    }

    /// [`persisted`](Self::persisted) for a change taken with
    /// [`take_change`](Self::take_change): `out` holds the answer that was
    /// in it then, and `input` is its message.
    pub fn finish(
        &mut self,
        change: Change,
        stored: Result<(), StoreError>,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Reply {
        let Change {
            prepared,
            dest,
            transport,
        } = change;
        let e = match stored {
            Ok(()) => {
                self.commit_change(prepared, true);
                bump(&self.shared.metrics.registered);
                return Reply::Send(dest, transport);
            }
            Err(e) => e,
        };
        let aor = prepared.aor().to_owned();
        self.commit_change(prepared, false);
        bump(&self.shared.metrics.journal_errors);
        self.events.push(Event::JournalFailed {
            aor,
            error: e.to_string(),
        });
        match e {
            StoreError::Unavailable { retry_after, .. } => {
                let retry_after = retry_after.to_string();
                let extra = [
                    ("Retry-After", retry_after.as_str()),
                    (
                        "Warning",
                        "399 sipsec \"binding not stored: the shared location store is unavailable\"",
                    ),
                ];
                self.error_answer(
                    input,
                    StatusCode::SERVICE_UNAVAILABLE,
                    &extra,
                    dest,
                    transport,
                    out,
                )
            }
            _ => {
                let warning = (
                    "Warning",
                    "399 sipsec \"binding not stored: the location journal could not be written\"",
                );
                self.server_error(input, &[warning], dest, transport, out)
            }
        }
    }

    /// Replaces `out` with a 500 (and `extra` header fields) to `input`,
    /// a request handled earlier.
    fn server_error(
        &mut self,
        input: &[u8],
        extra: &[(&str, &str)],
        dest: SocketAddr,
        transport: Transport,
        out: &mut Vec<u8>,
    ) -> Reply {
        self.error_answer(
            input,
            StatusCode::SERVER_INTERNAL_ERROR,
            extra,
            dest,
            transport,
            out,
        )
    }

    /// Replaces `out` with a `status` answer (and `extra` header fields)
    /// to `input`, a request handled earlier.
    fn error_answer(
        &mut self,
        input: &[u8],
        status: StatusCode,
        extra: &[(&str, &str)],
        dest: SocketAddr,
        transport: Transport,
        out: &mut Vec<u8>,
    ) -> Reply {
        out.clear();
        let Ok(msg) = Message::parse(input) else {
            return Reply::Drop;
        };
        self.transport = transport;
        self.respond(&msg, status, extra, dest, out)
    }

    /// Gives up on a message that kept getting [`Reply::Retry`]: 500 with
    /// Retry-After, so the phone tries again.
    pub fn answer_busy(
        &mut self,
        input: &[u8],
        src: SocketAddr,
        transport: Transport,
        out: &mut Vec<u8>,
    ) -> Reply {
        self.server_error(input, &[("Retry-After", "1")], src, transport, out)
    }

    /// Hands in again a message that got [`Reply::Retry`] (woken by the
    /// commit of the change it met, [`Core::next_woken`]): the same as
    /// [`Core::handle`] except that the message is not admitted or
    /// counted a second time.
    pub fn handle_again(
        &mut self,
        input: &[u8],
        src: SocketAddr,
        transport: Transport,
        now: Now,
        out: &mut Vec<u8>,
    ) -> Reply {
        self.again = true;
        let reply = self.handle(input, src, transport, now, out);
        self.again = false;
        reply
    }

    /// Hands in again a message that waited for a media relay's answer
    /// (`outcome`): as [`Core::handle_again`], the relay's session
    /// description passed on in place of the message's own.
    pub fn handle_relayed(
        &mut self,
        input: &[u8],
        src: SocketAddr,
        transport: Transport,
        outcome: crate::proto::media::Outcome,
        now: Now,
        out: &mut Vec<u8>,
    ) -> Reply {
        self.media = Some(outcome);
        let reply = self.handle_again(input, src, transport, now, out);
        self.media = None;
        reply
    }

    fn admit(&self, src: SocketAddr) -> Verdict {
        if self.again {
            Verdict::Admit
        } else {
            self.shared.guard.admit(src.ip(), self.now.unix_ms)
        }
    }

    /// Handles one message that arrived from `src` over `transport` at
    /// `now`, writing any answer or forwarded message into `out` (cleared
    /// by the caller).
    pub fn handle(
        &mut self,
        input: &[u8],
        src: SocketAddr,
        transport: Transport,
        now: Now,
        out: &mut Vec<u8>,
    ) -> Reply {
        let reply = self.decide(input, src, transport, now, out);
        if self.asked.take() {
            self.sends.wake_names();
        }
        reply
    }

    fn decide(
        &mut self,
        input: &[u8],
        src: SocketAddr,
        transport: Transport,
        now: Now,
        out: &mut Vec<u8>,
    ) -> Reply {
        self.now = now;
        let now = now.secs();
        self.transport = transport;
        self.sends.clear();
        self.events.clear();
        self.sent = None;
        if let Some((prepared, _, _)) = self.pending.take() {
            // A driver that did not store the last change: it never
            // happened (and its AoR is free again).
            self.commit_change(prepared, false);
        }
        if self.again {
            self.timed = false;
        } else {
            self.timed = self.handled.is_multiple_of(STAGE_SAMPLE);
            self.handled = self.handled.wrapping_add(1);
        }
        match self.admit(src) {
            Verdict::Admit => {}
            Verdict::Limited => {
                bump(&self.shared.metrics.rate_limited);
                self.events.push(Event::RateLimited { src });
                return Reply::Drop;
            }
            Verdict::Banned => {
                bump(&self.shared.metrics.banned);
                return Reply::Drop;
            }
        }
        if transport == Transport::Udp {
            // RFC 5626 §8: keep-alives share the SIP port.
            if sip_core::stun::answer(input, src, out) {
                bump(&self.shared.metrics.stun_bindings);
                return Reply::Send(src, transport);
            }
            if sip_core::stun::is_crlf_keepalive(input) {
                bump(&self.shared.metrics.keepalives);
                return Reply::Drop;
            }
            if sip_core::stun::is_stun(input) {
                // Other STUN methods, responses, bad lengths: not SIP.
                bump(&self.shared.metrics.dropped);
                return Reply::Drop;
            }
        }
        let t0 = self.clock();
        let parsed = Message::parse(input);
        self.stage(Stage::Parse, t0);
        let msg = match parsed {
            Ok(m) => m,
            Err(e) => {
                bump(&self.shared.metrics.malformed);
                return if write_error_response(input, &e, out) {
                    Reply::Send(src, transport)
                } else {
                    bump(&self.shared.metrics.dropped);
                    Reply::Drop
                };
            }
        };
        if !msg.is_request() {
            bump(&self.shared.metrics.responses_received);
            return self.forward_response(&msg, src, out);
        }
        if !self.again {
            self.shared
                .metrics
                .request(msg.method().as_str(), transport);
        }
        if self
            .shared
            .draining
            .load(std::sync::atomic::Ordering::Relaxed)
            && !matches!(msg.method(), Method::Ack | Method::Cancel)
            && msg.to().tag().is_none()
        {
            return self.respond(
                &msg,
                StatusCode::SERVICE_UNAVAILABLE,
                &[
                    ("Retry-After", DRAIN_RETRY_AFTER),
                    ("Warning", "399 sipsec \"shutting down\""),
                ],
                src,
                out,
            );
        }
        match msg.method() {
            Method::Register if self.request_is_for_us(&msg) => self.register(&msg, src, now, out),
            _ => self.route(&msg, src, now, out),
        }
    }

    #[inline]
    pub(super) fn request_is_for_us(&self, msg: &Message<'_>) -> bool {
        msg.request_uri()
            .is_some_and(|u| self.is_local_uri(u) || u.user().is_none())
    }

    pub(super) fn respond(
        &mut self,
        msg: &Message<'_>,
        status: StatusCode,
        extra: &[(&str, &str)],
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Reply {
        if msg.method() == Method::Ack {
            // An ACK is never answered: one this server cannot route ends here.
            bump(&self.shared.metrics.dropped);
            return Reply::Drop;
        }
        // The same request (and its retransmissions) always gets the same tag.
        let mut h = self.shared.branch_salt.build_hasher();
        h.write(msg.call_id().as_bytes());
        h.write(msg.from().tag().unwrap_or("").as_bytes());
        h.write(msg.top_via().branch().unwrap_or("").as_bytes());
        self.tag.clear();
        let _ = write!(
            self.tag,
            "{LOCAL_TAG_PREFIX}{:012x}",
            h.finish() & 0xffff_ffff_ffff
        );
        let t0 = self.clock();
        write_response(
            out,
            msg,
            status,
            &ResponseOptions {
                to_tag: Some(&self.tag),
                extra,
                raw_headers: &self.lines,
                ..Default::default()
            },
        );
        self.stage(Stage::FormatResponse, t0);
        self.lines.clear();
        if self.transport == Transport::Udp && out.len() > MAX_DATAGRAM {
            // Never drop an answer for its size: say so in a short one.
            bump(&self.shared.metrics.oversize);
            self.events.push(Event::Oversize {
                what: "response",
                dest: src,
                len: out.len(),
            });
            out.clear();
            write_response(
                out,
                msg,
                StatusCode::MESSAGE_TOO_LARGE_5XX,
                &ResponseOptions {
                    to_tag: Some(&self.tag),
                    extra: &[(
                        "Warning",
                        "399 sipsec \"the answer would not fit a UDP datagram: use TCP\"",
                    )],
                    ..Default::default()
                },
            );
        }
        Reply::Send(src, self.transport)
    }

    pub(super) fn challenge(
        &mut self,
        msg: &Message<'_>,
        proxy: bool,
        stale: bool,
        now: u64,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Reply {
        let Some(auth) = &self.shared.auth else {
            return Reply::Drop;
        };
        self.challenges.clear();
        auth.challenges(proxy, stale, now, &mut self.challenges);
        self.lines.clear();
        for (name, value) in &self.challenges {
            let _ = write!(self.lines, "{name}: {value}\r\n");
        }
        let status = if proxy {
            StatusCode::PROXY_AUTHENTICATION_REQUIRED
        } else {
            StatusCode::UNAUTHORIZED
        };
        self.respond(msg, status, &[], src, out)
    }

    /// Runs authentication; `Err` carries the reply to send instead.
    pub(super) fn authenticate(
        &mut self,
        msg: &Message<'_>,
        proxy: bool,
        now: u64,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Result<Option<String>, Reply> {
        let Some(auth) = &self.shared.auth else {
            return Ok(None);
        };
        let t0 = self.clock();
        let privacy = self.shared.privacy.as_ref();
        let shared_source = self.shared.guard.limits_source(src.ip());
        let result = auth.check_as(msg, (src, shared_source), proxy, now, |u| {
            reveal(privacy, u, now)
        });
        self.stage(Stage::Authenticate, t0);
        match result {
            AuthResult::Ok(user) => Ok(Some(user.into_owned())),
            AuthResult::Failed(AuthFailure::Undecryptable) => Err(self.refuse(msg, src, out)),
            AuthResult::Failed(AuthFailure::Malformed) => Err(self.respond(
                msg,
                StatusCode::BAD_REQUEST,
                &[("Warning", "399 sipsec \"malformed credentials\"")],
                src,
                out,
            )),
            AuthResult::Failed(f) => {
                match f {
                    // Only a wrong answer to a nonce we issued counts toward
                    // a ban: garbage or foreign nonces from a spoofed source
                    // cannot get that source banned.
                    AuthFailure::Rejected => {
                        bump(&self.shared.metrics.auth_failures);
                        self.events.push(Event::AuthFailed {
                            src,
                            user: msg.from().uri().user().unwrap_or("").to_owned(),
                        });
                        self.count_failure(src);
                    }
                    AuthFailure::Replay => bump(&self.shared.metrics.auth_replays),
                    _ => {}
                }
                Err(self.challenge(msg, proxy, f == AuthFailure::Stale, now, src, out))
            }
        }
    }

    /// The one answer to a pseudonym that does not open, wherever it was:
    /// 403 and nothing more, counted against the source like a failed
    /// authentication (so guessing is rate-limited and banned).
    pub(super) fn refuse(
        &mut self,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Reply {
        self.count_failure(src);
        self.respond(msg, StatusCode::FORBIDDEN, &[], src, out)
    }

    /// Counts a failed authentication against `src`, reporting the ban it
    /// may earn.
    fn count_failure(&mut self, src: SocketAddr) {
        if self.shared.guard.auth_failed(src.ip(), self.now.unix_ms) {
            bump(&self.shared.metrics.bans);
            self.events.push(Event::Banned {
                src,
                seconds: self.shared.guard.config().ban_seconds,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_hop_defaults_to_5061_and_a_name_needs_an_alias_or_is_asked() {
        let core = crate::fuzzing::server(1);
        let ip = Host::V4([192, 0, 2, 1].into());
        let at = |s: &str| Next::At(s.parse().expect("address"));
        assert_eq!(core.hop(ip, None, Transport::Tls), at("192.0.2.1:5061"));
        assert_eq!(core.hop(ip, None, Transport::Udp), at("192.0.2.1:5060"));
        assert_eq!(core.hop(ip, None, Transport::Tcp), at("192.0.2.1:5060"));
        assert_eq!(
            core.hop(ip, Some(5070), Transport::Tls),
            at("192.0.2.1:5070")
        );
        // No connection stands for the name: it is asked of the resolver
        // (once), and the request waits for it.
        let name = Host::Name("peer.example.com");
        let resolving = Next::Resolving("peer.example.com".into(), None, Transport::Tls);
        assert_eq!(core.hop(name, None, Transport::Tls), resolving);
        assert!(core.asked.take());
        assert_eq!(core.hop(name, None, Transport::Tls), resolving);
        assert!(!core.asked.take());
        assert_eq!(core.shared.names.take_asked().len(), 1);
        assert_eq!(
            core.hop(Host::Name("localhost"), None, Transport::Tls),
            at("127.0.0.1:5061")
        );
    }
}
