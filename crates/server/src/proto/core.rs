//! The core's entry: [`Core::handle`] takes one message, its source,
//! transport and [`Now`], and says what to do with it ([`Reply`], plus
//! [`Core::extra`] messages, [`Core::to_persist`] records and
//! [`Core::events`]). It admits and parses the message, then hands it to
//! one role — the registrar (`registrar.rs`), the proxy (`proxy.rs` and
//! the files beside it) or the redirect server (`redirect.rs`) — each
//! owning its state and taking the context every role shares (`ctx.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use sip_core::writer::write_error_response;
use sip_core::{Message, Method, StatusCode};

use crate::proto::branch::Key;
use crate::proto::ctx::Ctx;
use crate::proto::effects::Sends;
use crate::proto::guard::{Scope, Verdict};
use crate::proto::location::{Prepared, Record, StoreError};
use crate::proto::metrics::Stage;
use crate::proto::proxy::Proxy;
use crate::proto::registrar::Registrar;
use crate::proto::reply::bump;
use crate::proto::shared::{Now, Shared};

pub use crate::proto::branch::LOCAL_TAG_PREFIX;
pub use crate::proto::reply::{Event, Reply, ALLOW, MAX_DATAGRAM};
pub use crate::proto::uris::aor;

/// The transports (one type for the workspace). The server listens on
/// UDP, TCP and TLS; the drivers drop and count a message for any other.
pub use sip_core::Transport;

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

/// Seconds a phone told "shutting down" waits before trying again.
const DRAIN_RETRY_AFTER: &str = "5";

/// A worker's request handler: the context every role takes and the
/// roles, each owning its state.
#[derive(Debug)]
pub struct Core {
    pub(super) ctx: Ctx,
    pub(super) registrar: Registrar,
    pub(super) proxy: Proxy,
}

impl Core {
    /// A handler for one worker.
    pub fn new(shared: Arc<Shared>) -> Self {
        Self {
            ctx: Ctx::new(shared),
            registrar: Registrar::default(),
            proxy: Proxy::new(),
        }
    }

    /// The shared state.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.ctx.shared
    }

    /// The transaction (and try) of the request the last reply sends, when
    /// the stateful proxy forwarded one: a connection that cannot carry it
    /// fails that transaction.
    pub fn sent_key(&self) -> Option<(Key, u8)> {
        self.ctx.sent
    }

    /// The answer the last [`handle`](Self::handle) (or
    /// [`persisted`](Self::persisted)) wrote itself, to count when it
    /// leaves without reading it again ([`Metrics::sent_answer`]).
    ///
    /// [`Metrics::sent_answer`]: crate::proto::metrics::Metrics::sent_answer
    pub fn answered(&self) -> Option<crate::proto::metrics::Answered> {
        self.ctx.answered
    }

    /// Messages the last [`handle`](Self::handle) produced besides its
    /// reply (stateful proxy: 100 Trying, ACK and CANCEL downstream,
    /// responses resent for retransmitted requests).
    pub fn extra(&self) -> &Sends {
        &self.ctx.sends
    }

    /// What the last [`handle`](Self::handle) that returned
    /// [`Reply::Persist`] needs stored before its answer may go out.
    pub fn to_persist(&self) -> &[Record] {
        self.registrar
            .pending
            .as_ref()
            .map_or(&[], |(p, _, _)| p.records())
    }

    /// Addresses-of-record registered over a WebSocket since the last
    /// call: the driver drops their bindings on that connection when it
    /// closes.
    pub fn websocket_registrations(&mut self) -> std::vec::Drain<'_, String> {
        self.registrar.websocket_aors.drain(..)
    }

    /// Whether the last calls produced anything worth logging.
    #[inline]
    pub fn has_events(&self) -> bool {
        !self.ctx.events.is_empty() || !self.ctx.records.is_empty()
    }

    /// Call records made since the driver last took them: to be written
    /// before what was produced with them is sent.
    pub fn take_records(&mut self) -> std::vec::Drain<'_, crate::proto::dialogs::CallRecord> {
        self.ctx.records.drain(..)
    }

    /// Things worth logging that the last calls produced; the driver
    /// drains them.
    pub fn events(&mut self) -> std::vec::Drain<'_, Event> {
        self.ctx.events.drain(..)
    }

    /// The operator ends the confirmed call `call_id`: a BYE to each
    /// party (each as the other party would send it, with this proxy's
    /// Via) is queued in [`Core::extra`] and kept for retransmission
    /// until answered ([`crate::proto::originated`]), and the call's
    /// record made. `None` when no confirmed call has that Call-ID.
    pub fn end_dialog(
        &mut self,
        call_id: &str,
        now: Now,
    ) -> Option<crate::proto::dialogs::CallRecord> {
        self.proxy.end_dialog(&mut self.ctx, call_id, now)
    }

    /// The earliest time a transaction timer may be due (stateful proxy),
    /// for the driver's timer.
    pub fn next_timer(&self) -> Option<Instant> {
        let own = self.ctx.shared.originated.next_deadline();
        let tx = self.ctx.shared.transactions.as_ref()?.next_deadline();
        own.into_iter().chain(tx).min()
    }

    /// Runs the transaction timers due at `now`; what must be sent is in
    /// [`extra`](Self::extra) afterwards.
    pub fn on_timer(&mut self, now: Now) {
        self.ctx.sends.clear();
        self.ctx.events.clear();
        if let Some(tx) = &self.ctx.shared.transactions {
            tx.tick(now.mono, &mut self.ctx.sends, &self.ctx.shared.metrics);
        }
        Proxy::originated_timers(&mut self.ctx, now);
        self.proxy.dialog_timers(&mut self.ctx, now);
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
        self.registrar
            .pending
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
                self.ctx.commit_change(prepared, true);
                bump(&self.ctx.shared.metrics.registered);
                return Reply::Send(dest, transport);
            }
            Err(e) => e,
        };
        let aor = prepared.aor().to_owned();
        self.ctx.commit_change(prepared, false);
        bump(&self.ctx.shared.metrics.journal_errors);
        self.ctx.events.push(Event::JournalFailed {
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
        self.ctx.transport = transport;
        self.ctx.respond(&msg, status, extra, dest, out)
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
        self.ctx.again = true;
        let reply = self.handle(input, src, transport, now, out);
        self.ctx.again = false;
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
        self.proxy.media = Some(outcome);
        let reply = self.handle_again(input, src, transport, now, out);
        self.proxy.media = None;
        reply
    }

    fn admit(&self, src: SocketAddr, transport: Transport) -> Verdict {
        if self.ctx.again {
            Verdict::Admit
        } else {
            let scope = Scope::of(transport);
            self.ctx
                .shared
                .guard
                .admit(src.ip(), scope, self.ctx.now.unix_ms)
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
        if self.ctx.asked.take() {
            self.ctx.sends.wake_names();
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
        self.ctx.begin(now, transport);
        let now = now.secs();
        if let Some((prepared, _, _)) = self.registrar.pending.take() {
            // A driver that did not store the last change: it never
            // happened (and its AoR is free again).
            self.ctx.commit_change(prepared, false);
        }
        match self.admit(src, transport) {
            Verdict::Admit => {}
            Verdict::Limited => {
                bump(&self.ctx.shared.metrics.rate_limited);
                self.ctx.events.push(Event::RateLimited { src });
                return Reply::Drop;
            }
            Verdict::Banned => {
                bump(&self.ctx.shared.metrics.banned);
                return Reply::Drop;
            }
        }
        if transport == Transport::Udp {
            // RFC 5626 §8: keep-alives share the SIP port.
            if sip_core::stun::answer(input, src, out) {
                bump(&self.ctx.shared.metrics.stun_bindings);
                return Reply::Send(src, transport);
            }
            if sip_core::stun::is_crlf_keepalive(input) {
                bump(&self.ctx.shared.metrics.keepalives);
                return Reply::Drop;
            }
            if sip_core::stun::is_stun(input) {
                // Other STUN methods, responses, bad lengths: not SIP.
                bump(&self.ctx.shared.metrics.dropped);
                return Reply::Drop;
            }
        }
        let t0 = self.ctx.clock();
        let parsed = Message::parse(input);
        self.ctx.stage(Stage::Parse, t0);
        // By reference: the parsed message is large, and moving it out
        // of the result copied it once per request.
        let msg = match &parsed {
            Ok(m) => m,
            Err(e) => {
                bump(&self.ctx.shared.metrics.malformed);
                return if write_error_response(input, e, out) {
                    Reply::Send(src, transport)
                } else {
                    bump(&self.ctx.shared.metrics.dropped);
                    Reply::Drop
                };
            }
        };
        if !msg.is_request() {
            bump(&self.ctx.shared.metrics.responses_received);
            return self.proxy.forward_response(&mut self.ctx, msg, src, out);
        }
        if !self.ctx.again {
            self.ctx
                .shared
                .metrics
                .request(msg.method().as_str(), transport);
        }
        if self
            .ctx
            .shared
            .draining
            .load(std::sync::atomic::Ordering::Relaxed)
            && !matches!(msg.method(), Method::Ack | Method::Cancel)
            && msg.to().tag().is_none()
        {
            return self.ctx.respond(
                msg,
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
            Method::Register if self.ctx.request_is_for_us(msg) => {
                self.registrar.register(&mut self.ctx, msg, src, now, out)
            }
            _ => self.proxy.route(&mut self.ctx, msg, src, out),
        }
    }
}
