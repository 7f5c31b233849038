//! What every role works with ([`Ctx`]): the tables the workers share,
//! the message's transport and arrival time, the outputs (extra sends,
//! events, call records, the stateful try sent) and the helpers every
//! role answers with: where a hop goes, respond, challenge, authenticate,
//! refuse. The roles (`registrar.rs`, `proxy.rs` and the files beside it,
//! `redirect.rs`) own their own state and take a `&mut Ctx`.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::sync::Arc;

use sip_core::uri::Host;
use sip_core::via::BRANCH_MAGIC_COOKIE;
use sip_core::writer::{write_response, ResponseOptions};
use sip_core::{Message, Method, StatusCode};

use crate::proto::auth::{AuthFailure, AuthResult};
use crate::proto::branch::Key;
use crate::proto::branch::LOCAL_TAG_PREFIX;
use crate::proto::dialogs::CallRecord;
use crate::proto::effects::Sends;
use crate::proto::guard::{Scope, SourceKey};
use crate::proto::location::{Binding, Prepared};
use crate::proto::metrics::{Answered, Stage, Stopwatch};
use crate::proto::names::{Found, Route};
use crate::proto::parked::Parked;
use crate::proto::reply::{bump, Event, Next, Reply, AMPLIFICATION, MAX_DATAGRAM};
use crate::proto::shared::{Now, Shared};
use crate::proto::uris::{resolve, reveal};
use sip_core::Transport;

/// One request in this many has its stages timed: reading the clock
/// twice per stage cost more than some stages themselves.
const STAGE_SAMPLE: u64 = 16;

/// The context of the message being handled, shared by the roles.
#[derive(Debug)]
pub(super) struct Ctx {
    pub(super) shared: Arc<Shared>,
    /// The transport the message arrived over.
    pub(super) transport: Transport,
    /// When the message being handled arrived.
    pub(super) now: Now,
    /// A location lookup's bindings (the proxy's targets, the redirect's
    /// contacts).
    pub(super) bindings: Vec<Binding>,
    /// Raw header lines the next [`Ctx::respond`] adds.
    pub(super) lines: String,
    tag: String,
    challenges: Vec<(&'static str, String)>,
    /// Messages to send besides the reply.
    pub(super) sends: Sends,
    pub(super) events: Vec<Event>,
    /// Call records made, for the driver to write.
    pub(super) records: Vec<CallRecord>,
    /// Requests handled, for sampling stage timings.
    handled: u64,
    /// Journal bytes this worker took from the shared budget ahead of
    /// its changes (`ByteBudget::take_leased`).
    pub(super) journal_lease: u64,
    /// Whether this request's stages are timed.
    timed: bool,
    /// Whether the message is being handed in again after
    /// [`Reply::Retry`] or a resolution: it was admitted and counted the
    /// first time.
    pub(super) again: bool,
    /// A name was asked of the resolver while handling this message.
    pub(super) asked: std::cell::Cell<bool>,
    /// The source of the request the proxy is routing, whose share of
    /// the resolver's questions its names count against (`None`: no
    /// share).
    pub(super) routing: Option<SocketAddr>,
    /// A pseudonym of this message was left unopened: its source had
    /// spent its decryptions ([`Ctx::may_decrypt`]).
    pub(super) out_of_decryptions: std::cell::Cell<bool>,
    /// The transaction and try of the request the last reply sends, when
    /// the stateful proxy forwarded one.
    pub(super) sent: Option<(Key, u8)>,
    /// The answer [`respond`](Self::respond) last wrote for this message.
    pub(super) answered: Option<Answered>,
    /// The AoR of the last [`Reply::Retry`] (see `busy.rs`).
    pub(super) busy: Option<String>,
    /// Messages woken by this core's commits, to hand in again.
    pub(super) woken: VecDeque<Parked>,
}

impl Ctx {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        let created = shared.created;
        Self {
            shared,
            transport: Transport::Udp,
            now: Now {
                unix_ms: 0,
                mono: created,
            },
            bindings: Vec::with_capacity(8),
            lines: String::with_capacity(512),
            tag: String::with_capacity(24),
            challenges: Vec::with_capacity(2),
            sends: Sends::default(),
            events: Vec::new(),
            records: Vec::new(),
            handled: 0,
            journal_lease: 0,
            timed: false,
            again: false,
            asked: std::cell::Cell::new(false),
            routing: None,
            out_of_decryptions: std::cell::Cell::new(false),
            sent: None,
            answered: None,
            busy: None,
            woken: VecDeque::new(),
        }
    }

    /// Clears the per-message outputs and samples whether this message's
    /// stages are timed.
    pub(super) fn begin(&mut self, now: Now, transport: Transport) {
        self.now = now;
        self.transport = transport;
        self.sends.clear();
        self.events.clear();
        self.sent = None;
        self.answered = None;
        self.routing = None;
        self.out_of_decryptions.set(false);
        if self.again {
            self.timed = false;
        } else {
            self.timed = self.handled.is_multiple_of(STAGE_SAMPLE);
            self.handled = self.handled.wrapping_add(1);
        }
    }

    /// Commits a prepared change; the messages that waited on its AoR
    /// become this core's to hand in again.
    pub(crate) fn commit_change(&mut self, prepared: Prepared, stored: bool) {
        let woken = self.shared.location.commit(prepared, stored);
        self.woken.extend(woken);
    }

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
        let asker = || self.routing.and_then(|src| self.source_share(src));
        match self
            .shared
            .names
            .find(name, port, transport, self.now.mono, asker)
        {
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

    /// Whether `src` is a configured peer proxy.
    pub(super) fn is_peer(&self, src: SocketAddr) -> bool {
        self.shared.config.peers.iter().any(|(_, a)| *a == src)
    }

    /// The source a request from `src` is held to a share as (of the
    /// dialog table, of the resolver's questions), unless it is one that
    /// carries many parties' requests: loopback while the guard exempts
    /// it, a trusted node, a peer proxy, a trunk's gateway.
    pub(super) fn source_share(&self, src: SocketAddr) -> Option<SourceKey> {
        let ip = src.ip();
        let guard = &self.shared.guard;
        let carrier =
            !guard.limits_source(ip) || self.is_peer(src) || self.shared.trunks.is_gateway(ip);
        (!carrier).then(|| guard.source_of(ip))
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
        // The same request (and its retransmissions) always gets the same
        // tag, keyed by a secret so that no one can foretell it (RFC 3261
        // §19.3): from its Call-ID and its branch, which RFC 3261 makes
        // unique to the transaction (§8.1.1.7, the magic cookie says so),
        // or, from an RFC 2543 client, the From whole as well, tag and all.
        let mut h = self.shared.branch_salt.build_hasher();
        let branch = msg.top_via().branch().unwrap_or("");
        h.write(msg.call_id().as_bytes());
        if !branch.starts_with(BRANCH_MAGIC_COOKIE) {
            h.write(msg.from().as_str().as_bytes());
        }
        h.write(branch.as_bytes());
        self.tag.clear();
        self.tag.push_str(LOCAL_TAG_PREFIX);
        sip_core::writer::push_hex(&mut self.tag, h.finish() & 0xffff_ffff_ffff, 12);
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
        let mut code = status;
        if self.transport == Transport::Udp && out.len() > MAX_DATAGRAM {
            code = StatusCode::MESSAGE_TOO_LARGE_5XX;
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
                code,
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
        self.answered = Some(Answered::new(out, code.as_u16(), &msg.method()));
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
        let status = if proxy {
            StatusCode::PROXY_AUTHENTICATION_REQUIRED
        } else {
            StatusCode::UNAUTHORIZED
        };
        // Over UDP the source is not proven yet (a spoofed request is
        // challenged too): past the first, preferred algorithm, the others
        // are offered only while the answer stays within AMPLIFICATION
        // times the request's bytes. A request of a phone's usual size
        // gets them all at the first try.
        let mut offered = self.challenges.len();
        loop {
            self.lines.clear();
            for (name, value) in &self.challenges[..offered] {
                let _ = write!(self.lines, "{name}: {value}\r\n");
            }
            let start = out.len();
            let reply = self.respond(msg, status, &[], src, out);
            let within = out.len() - start <= AMPLIFICATION * msg.len();
            if self.transport != Transport::Udp || within || offered <= 1 {
                if offered < self.challenges.len() {
                    bump(&self.shared.metrics.challenges_cut);
                }
                return reply;
            }
            out.truncate(start);
            offered -= 1;
        }
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
        let guard = &self.shared.guard;
        let share = guard
            .limits_source(src.ip())
            .then(|| (guard.source_of(src.ip()), Scope::of(self.transport)));
        let result = auth.check_as(msg, (src, share), proxy, now, |u| {
            reveal(privacy, u, now, || self.may_decrypt(src))
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
    /// authentication (so guessing is rate-limited and banned). One left
    /// unopened because its source had spent its decryptions gets 503
    /// with Retry-After instead, and counts as no failure.
    pub(super) fn refuse(
        &mut self,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Reply {
        if self.out_of_decryptions.get() {
            return self.respond(
                msg,
                StatusCode::SERVICE_UNAVAILABLE,
                &[
                    ("Retry-After", "1"),
                    (
                        "Warning",
                        "399 sipsec \"too many pseudonyms to open from this source\"",
                    ),
                ],
                src,
                out,
            );
        }
        self.count_failure(src);
        self.respond(msg, StatusCode::FORBIDDEN, &[], src, out)
    }

    /// Whether the request from `src` may cost a private-key decryption
    /// now (`[guard] decryption_rate`); one that carries many parties'
    /// requests (a peer proxy, a trunk's gateway, exempt loopback) always
    /// may. A refusal is remembered for [`Ctx::refuse`].
    pub(super) fn may_decrypt(&self, src: SocketAddr) -> bool {
        let may = self.source_share(src).is_none()
            || self.shared.guard.may_decrypt(src.ip(), self.now.unix_ms);
        if !may {
            self.out_of_decryptions.set(true);
        }
        may
    }

    /// Counts a failed authentication against `src`, reporting the ban it
    /// may earn.
    fn count_failure(&mut self, src: SocketAddr) {
        let scope = Scope::of(self.transport);
        if self
            .shared
            .guard
            .auth_failed(src.ip(), scope, self.now.unix_ms)
        {
            bump(&self.shared.metrics.bans);
            self.events.push(Event::Banned {
                source: self.shared.guard.source_of(src.ip()),
                scope,
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
        let core = &core.ctx;
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

    #[test]
    fn a_local_tag_is_its_transactions_alone() {
        let mut core = crate::fuzzing::server(1);
        let ctx = &mut core.ctx;
        let src: SocketAddr = "192.0.2.9:5060".parse().expect("literal");
        let mut tag = |branch: &str, from_tag: &str, call_id: &str| {
            let req = format!(
                "OPTIONS sip:a@example.com SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.9;branch={branch}\r\n\
                 From: <sip:x@example.net>;tag={from_tag}\r\nTo: <sip:a@example.com>\r\n\
                 Call-ID: {call_id}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
            );
            let msg = Message::parse(req.as_bytes()).expect("request");
            let mut out = Vec::new();
            ctx.respond(&msg, StatusCode::OK, &[], src, &mut out);
            let answer = Message::parse(&out).expect("answer");
            answer.to().tag().expect("tagged").to_owned()
        };
        let first = tag("z9hG4bK1", "f1", "c1");
        assert!(first.starts_with(LOCAL_TAG_PREFIX), "{first}");
        assert_eq!(first, tag("z9hG4bK1", "f1", "c1"), "a retransmission's");
        // RFC 3261 branches name the transaction: the From is not read.
        assert_eq!(first, tag("z9hG4bK1", "f2", "c1"));
        assert_ne!(first, tag("z9hG4bK2", "f1", "c1"), "another branch");
        assert_ne!(first, tag("z9hG4bK1", "f1", "c2"), "another call");
        // An RFC 2543 branch does not: the From tells requests apart.
        let old = tag("1", "f1", "c1");
        assert_eq!(old, tag("1", "f1", "c1"));
        assert_ne!(old, tag("1", "f2", "c1"));
    }
}
