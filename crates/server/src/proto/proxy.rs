//! The proxy (RFC 3261 §16): routing by Route, location, Path or peer
//! domain, stateless (§16.11) or through [`Transactions`], and responses
//! back along the Via.

use std::borrow::Cow;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;

use sip_core::proxy::{forward_request, RequestEdits};
use sip_core::uri::Host;
use sip_core::{HeaderName, Limits, Message, Method, StatusCode, Uri};

use crate::config::{Forking, Mode};
use crate::proto::branch::{Key, BRANCH_PREFIX, FORK_SHIFT, ID_MASK, LOCAL_TAG_PREFIX};
use crate::proto::ctx::Ctx;
use crate::proto::effects::Hop;
use crate::proto::fork::{Fork, MAX_BRANCHES};
use crate::proto::legs::Target;
use crate::proto::names::{Found, Park, Route};
use crate::proto::parked::Parked;
use crate::proto::reply::{bump, Event, Next, Reply};
use crate::proto::stateful::{NotStarted, Seen};
use crate::proto::tokens;
use crate::proto::uris::{first_path_uri, resolve, reveal_for_call};
use sip_core::Transport;

/// How one contact of a local user is reached.
pub(super) struct Leg {
    pub(super) next: Next,
    pub(super) contact: String,
    pub(super) transport: Transport,
    /// The connection the request goes down, when it goes down one.
    pub(super) flow: Option<SocketAddr>,
}

/// Where a request goes, as chosen before its next hop is known.
#[derive(Debug)]
pub(super) struct Selected {
    pub(super) next: Next,
    pub(super) transport: Transport,
    /// The connection it goes down (a registered flow, or the one a flow
    /// token names): the far side of its Record-Route.
    pub(super) flow: Option<SocketAddr>,
    /// The new Request-URI (a local user's contact).
    pub(super) ruri: Option<String>,
    pub(super) to_peer: bool,
    pub(super) authenticated: bool,
    /// Every contact of the user gets a branch.
    pub(super) forking: bool,
    /// The next hop is the one the request's Route or Request-URI names
    /// (a dialog's, RFC 3261 §16.12): forwarded only where this proxy's
    /// Record-Route proves it.
    pub(super) named_hop: bool,
}

impl Selected {
    pub(super) fn at(next: Next, transport: Transport) -> Self {
        Self {
            next,
            transport,
            flow: None,
            ruri: None,
            to_peer: false,
            authenticated: false,
            forking: false,
            named_hop: false,
        }
    }
}

/// What a forwarded request carries besides the request itself.
#[derive(Debug, Clone)]
struct Forward {
    /// The new Request-URI (a local user's contact).
    ruri: Option<String>,
    transport: Transport,
    flow: Option<SocketAddr>,
    /// Route entries naming this proxy, removed.
    pops: usize,
    to_peer: bool,
    /// The caller's credentials were checked here (and are removed).
    authenticated: bool,
    /// Where it is sent (its dialog's later requests may go back there).
    hop: SocketAddr,
}

/// The proxy's own state (stateless and stateful: the transaction table
/// is a shared one, in [`Ctx::shared`]): scratch for the request being
/// routed and what it carries across a wait.
#[derive(Debug)]
pub(super) struct Proxy {
    pub(super) via: String,
    pub(super) ip: String,
    pub(super) rr: String,
    /// The route of the target chosen (its Path, or this node's flow).
    pub(super) path: String,
    /// The other targets of the request being forked.
    pub(super) forks: Vec<Fork>,
    /// The media relay's answer for the message handed in again after
    /// waiting on it (`Core::handle_relayed`).
    pub(super) media: Option<crate::proto::media::Outcome>,
    /// What STIR/SHAKEN adds to the request being forwarded.
    pub(super) stir_edit: Option<crate::proto::stir::StirEdit>,
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
    /// The user whose credentials the request being routed proved here.
    pub(super) caller: Option<String>,
}

impl Proxy {
    pub(super) fn new() -> Self {
        Self {
            via: String::with_capacity(128),
            ip: String::with_capacity(48),
            rr: String::with_capacity(64),
            path: String::new(),
            forks: Vec::new(),
            media: None,
            stir_edit: None,
            swept_ms: 0,
            hide_out: false,
            hidden_in: false,
            seal_call_id: true,
            caller: None,
        }
    }
}

impl Proxy {
    /// Whether this node's copy of a shared location has not followed it
    /// for longer than `max_stale` at `now` (Unix seconds): then it is not
    /// trusted to route.
    pub(super) fn location_too_stale(ctx: &Ctx, now: u64) -> bool {
        let Some(max) = ctx.shared.config.redis.as_ref().and_then(|r| r.max_stale) else {
            return false;
        };
        let since = ctx
            .shared
            .location_stale_since
            .load(std::sync::atomic::Ordering::Relaxed);
        since != 0 && now.saturating_sub(since) >= u64::from(max)
    }

    /// 503 for a request whose callee's location cannot be trusted now
    /// (see [`location_too_stale`](Self::location_too_stale)), with the
    /// store's Retry-After.
    pub(super) fn location_stale(
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Reply {
        bump(&ctx.shared.metrics.location_stale);
        let retry = ctx
            .shared
            .config
            .redis
            .as_ref()
            .map_or(5, |r| r.retry_after)
            .to_string();
        ctx.respond(
            msg,
            StatusCode::SERVICE_UNAVAILABLE,
            &[
                ("Retry-After", retry.as_str()),
                ("Warning", "399 sipsec \"location store unreachable\""),
            ],
            src,
            out,
        )
    }

    /// 503 for a request whose next hop is a name the resolver cannot
    /// take on now: the caller tries again a little later.
    fn resolver_busy(
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Reply {
        bump(&ctx.shared.metrics.hop_resolver_full);
        ctx.respond(
            msg,
            StatusCode::SERVICE_UNAVAILABLE,
            &[
                ("Retry-After", "5"),
                ("Warning", "399 sipsec \"resolving the next hop\""),
            ],
            src,
            out,
        )
    }

    /// 503 for a request whose next hop is nowhere to be found.
    fn unresolvable(ctx: &mut Ctx, msg: &Message<'_>, src: SocketAddr, out: &mut Vec<u8>) -> Reply {
        bump(&ctx.shared.metrics.hop_unresolved);
        ctx.respond(
            msg,
            StatusCode::SERVICE_UNAVAILABLE,
            &[("Warning", "399 sipsec \"the next hop cannot be resolved\"")],
            src,
            out,
        )
    }

    /// Whether `b` was registered over a connection that only it can be
    /// reached on (WebSocket, or RFC 5626 outbound) and that is closed,
    /// on this node.
    pub(super) fn flow_gone(&self, ctx: &Ctx, b: &crate::proto::location::Binding) -> bool {
        let Some(f) = b.flow else {
            return false;
        };
        let here =
            b.node().is_empty() || first_path_uri(b.node()).is_none_or(|u| ctx.is_local_uri(&u));
        here && b.path().is_empty()
            && (f.outbound || matches!(f.transport, Transport::Ws | Transport::Wss))
            && !Self::flow_open(ctx, b.source, f.transport)
    }

    /// Whether the phone's connection (its registered flow) is still open.
    pub(super) fn flow_open(ctx: &Ctx, peer: SocketAddr, transport: Transport) -> bool {
        ctx.shared.flows.open(peer, transport)
    }

    /// A Record-Route value naming this server on `transport`, with a
    /// flow token when the hop on that side is a connection, and `proof`
    /// of where the dialog's requests may go ([`tokens::hops_proof`]).
    fn write_rr(
        &mut self,
        ctx: &mut Ctx,
        transport: Transport,
        flow: Option<SocketAddr>,
        proof: &str,
    ) {
        let here = ctx.listen_addr(transport);
        self.rr.push_str("<sip:");
        if let Some(peer) = flow {
            let token = tokens::flow_token(&ctx.shared.flow_key.0, peer, transport);
            self.rr.push_str(&token);
            self.rr.push('@');
        }
        sip_core::writer::push_socket_addr(&mut self.rr, here);
        let param = match transport {
            Transport::Udp => None,
            // RFC 7118 §5.2: WSS too is `transport=ws` in a URI.
            Transport::Ws | Transport::Wss => Some("ws"),
            Transport::Tls => Some("tls"),
            Transport::Tcp => Some("tcp"),
            Transport::Sctp => Some("sctp"),
            Transport::Other => None,
        };
        if let Some(p) = param {
            self.rr.push_str(";transport=");
            self.rr.push_str(p);
        }
        if self.hide_out || self.hidden_in {
            // This dialog's requests from the inside are hidden too.
            self.rr.push(';');
            self.rr.push_str(crate::proto::topology::RR_PARAM);
            if !self.seal_call_id {
                self.rr.push('=');
                self.rr.push_str(crate::proto::topology::KEEP);
            }
        }
        self.rr.push(';');
        self.rr.push_str(tokens::HOPS_PARAM);
        self.rr.push('=');
        self.rr.push_str(proof);
        self.rr.push_str(";lr>");
    }

    /// Whether `src` is another domain's proxy we peer with.
    pub(super) fn is_peer(ctx: &Ctx, src: SocketAddr) -> bool {
        ctx.is_peer(src)
    }

    /// The peer proxy serving the Request-URI's domain.
    pub(super) fn peer_for(ctx: &Ctx, uri: &Uri<'_>) -> Option<SocketAddr> {
        let Some(Host::Name(n)) = uri.host() else {
            return None;
        };
        ctx.shared
            .config
            .peers
            .iter()
            .find(|(d, _)| d.eq_ignore_ascii_case(n))
            .map(|(_, a)| *a)
    }

    /// A request that needs a local caller (INVITE, MESSAGE, SUBSCRIBE)
    /// with authentication on: digest, and under PrivaSIP the From user
    /// must open to the authenticated user. Requests from peer proxies
    /// were authenticated in their domain.
    pub(super) fn authorize_caller(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        now: u64,
        out: &mut Vec<u8>,
    ) -> Result<bool, Reply> {
        if ctx.shared.auth.is_none()
            || !matches!(
                msg.method(),
                Method::Invite | Method::Message | Method::Subscribe
            )
            || Self::is_peer(ctx, src)
        {
            return Ok(false);
        }
        let Some(user) = ctx.authenticate(msg, true, now, src, out)? else {
            return Ok(false);
        };
        if ctx.shared.dialogs.is_some() {
            // Whose share of the dialog table its call counts against.
            self.caller = Some(user.clone());
        }
        let from = msg.from().uri();
        let Some(from_user) = from.user() else {
            return Ok(true);
        };
        if ctx.shared.privacy.is_none() || !ctx.is_local_uri(from) {
            return Ok(true);
        }
        let privacy = ctx.shared.privacy.as_ref();
        let call = (msg.call_id(), now);
        match reveal_for_call(privacy, from_user, call, || ctx.may_decrypt(src)) {
            // Not ours, or a PrivaSIP-3 ticket already used by another
            // call: refused alike.
            None => Err(ctx.refuse(msg, src, out)),
            Some(Cow::Owned(id)) if id != user => Err(ctx.respond(
                msg,
                StatusCode::FORBIDDEN,
                &[(
                    "Warning",
                    "399 sipsec \"From is not the authenticated user\"",
                )],
                src,
                out,
            )),
            Some(_) => Ok(true),
        }
    }

    /// The branch this proxy uses when forwarding `msg` statelessly: a
    /// function of the incoming top Via, so retransmissions, the ACK for a
    /// failure and CANCEL all get the INVITE's branch (RFC 3261 §16.11).
    /// Its top four bits are zero: a stateful proxy numbers its tries of
    /// other addresses there ([`Key::of_message`]).
    pub(super) fn branch(ctx: &Ctx, msg: &Message<'_>) -> u64 {
        let v = msg.top_via();
        let mut h = ctx.shared.branch_salt.build_hasher();
        h.write(v.branch().unwrap_or("").as_bytes());
        h.write(v.as_str().as_bytes());
        if !v.is_rfc3261_branch() {
            // RFC 2543 peers: the transaction is identified by more fields.
            h.write(msg.call_id().as_bytes());
            h.write_u32(msg.cseq().seq);
            h.write(msg.from().tag().unwrap_or("").as_bytes());
        }
        h.finish() & ID_MASK
    }

    /// Where responses to `msg` go (RFC 3261 §18.2.2): back on the
    /// connection for TCP; for UDP the source address, and the Via's port
    /// unless rport asked for the source port.
    fn upstream(ctx: &Ctx, msg: &Message<'_>, src: SocketAddr) -> Hop {
        let top = msg.top_via();
        if ctx.transport.is_reliable() || top.rport().is_some() {
            return (src, ctx.transport);
        }
        (
            SocketAddr::new(src.ip(), top.port().unwrap_or(5060)),
            Transport::Udp,
        )
    }

    /// Stateful proxy: requests that belong to a transaction end here.
    fn stateful_request(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Option<Reply> {
        let tx = ctx.shared.transactions.as_ref()?;
        let key = Key {
            branch: Self::branch(ctx, msg),
            cancel: false,
        };
        let now = ctx.now.mono;
        let metrics = &ctx.shared.metrics;
        if msg.method() == Method::Cancel {
            // §16.10: answer the CANCEL here; the INVITE's 487 comes back
            // from downstream.
            let status = if tx.on_cancel(key, now, &mut ctx.sends, metrics) {
                Self::media_cancelled(ctx, msg);
                StatusCode::OK
            } else {
                StatusCode::CALL_DOES_NOT_EXIST
            };
            return Some(ctx.respond(msg, status, &[], src, out));
        }
        match tx.on_request(key, msg.method(), now, &mut ctx.sends, metrics) {
            Seen::Absorbed => Some(Reply::Drop),
            Seen::New => None,
        }
    }

    pub(super) fn route(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Reply {
        self.hidden_in = false;
        self.hide_out = false;
        self.seal_call_id = true;
        self.caller = None;
        ctx.routing = Some(src);
        if let Some(bytes) = Self::reveal_from_trunk(ctx, msg) {
            // From a trunk that hides the inside: routed as revealed.
            let Ok(revealed) = Message::parse(&bytes) else {
                return Reply::Drop;
            };
            self.hidden_in = true;
            self.seal_call_id = msg.call_id().starts_with(crate::proto::topology::SEALED);
            return self.route_revealed(ctx, &revealed, src, out);
        }
        if let Some(seal) = Self::in_hidden_dialog(ctx, msg) {
            self.hide_out = true;
            self.seal_call_id = seal;
        } else if Self::begun_by_hidden_side(ctx, msg, src) {
            // A call the carrier (or peer) begins: its answers and the callee's
            // requests in its dialog are hidden, its Call-ID kept.
            self.hidden_in = true;
            self.seal_call_id = false;
        }
        self.route_revealed(ctx, msg, src, out)
    }

    fn route_revealed(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Reply {
        if let Some(reply) = self.stateful_request(ctx, msg, src, out) {
            return reply;
        }
        if let Some(reply) = Self::refuse_to_route(ctx, msg, src, out) {
            return reply;
        }
        let (pops, flow_hop) = Self::loose_route(ctx, msg, src);
        let next_route = msg.routes().nth(pops).is_some();
        let Some(ruri) = msg.request_uri() else {
            return Reply::Drop;
        };
        if ctx.shared.config.mode != Mode::Proxy
            && (next_route || flow_hop.is_some() || !ctx.is_local_uri(ruri))
        {
            // A registrar or redirect server answers; it forwards nothing.
            return Self::relay_denied(ctx, msg, src, ruri, out);
        }
        if next_route && msg.to().tag().is_none() && !Self::is_peer(ctx, src) {
            // A preloaded Route on an initial request would send it, body
            // and all, to any address the sender names (Kamailio's default
            // configuration refuses them too). In-dialog requests follow
            // the route set the dialog recorded.
            bump(&ctx.shared.metrics.preloaded_routes);
            return ctx.respond(
                msg,
                StatusCode::FORBIDDEN,
                &[("Warning", "399 sipsec \"preloaded Route refused\"")],
                src,
                out,
            );
        }
        let target = match self.select_target(ctx, msg, src, pops, flow_hop, out) {
            Ok(t) => t,
            Err(reply) => return reply,
        };
        // A next hop the request's Request-URI or Route names is one its
        // dialog's INVITE came from or went to, as this proxy's
        // Record-Route proves (RFC 3261 §16.12 would send it anywhere a
        // peer writes); without a proof it was not even looked up
        // (`may_look_up`). A peer proxy is trusted as for a preloaded
        // Route; a hidden trunk's route set was sealed here.
        let proof = target.named_hop && !self.hidden_in && !Self::is_peer(ctx, src);
        let (hop, named) = match self.next_hop(ctx, target.next, msg, src, out) {
            Ok(h) => h,
            Err(reply) => return reply,
        };
        if proof && !Self::hop_proven(ctx, msg, pops, hop) {
            return Self::unproven_route(ctx, msg, src, out);
        }
        let f = Forward {
            ruri: target.ruri,
            transport: target.transport,
            flow: target.flow,
            pops,
            to_peer: target.to_peer,
            authenticated: target.authenticated,
            hop,
        };
        let callee_nat = crate::proto::media::contact_elsewhere(f.ruri.as_deref(), hop);
        if let Some(reply) = self.admit(ctx, msg, src, out) {
            return reply;
        }
        if let Some(reply) = self.stir_verify(ctx, msg, src, f.authenticated, out) {
            return reply;
        }
        if let Some(reply) = self.relay_offer(ctx, msg, src, f.transport, callee_nat, out) {
            return reply;
        }
        self.stir_sign(ctx, msg, src, f.authenticated);
        self.forward_to(ctx, msg, src, &f, target.forking, hop, named, out)
    }

    /// The answer to a request no proxy may forward (§16.3): an ACK for
    /// a response this server made, no hops left, or a loop.
    fn refuse_to_route(
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Option<Reply> {
        if msg.method() == Method::Ack
            && msg
                .to()
                .tag()
                .is_some_and(|t| t.starts_with(LOCAL_TAG_PREFIX))
        {
            // Acknowledges a final response this server generated (§17.2.1).
            return Some(Reply::Drop);
        }
        if msg.max_forwards() == Some(0) {
            return Some(ctx.respond(msg, StatusCode::TOO_MANY_HOPS, &[], src, out));
        }
        if msg.vias().skip(1).any(|v| ctx.is_our_via(&v)) || ctx.is_our_via(msg.top_via()) {
            return Some(ctx.respond(msg, StatusCode::LOOP_DETECTED, &[], src, out));
        }
        None
    }

    /// The address a target leads to now. A name being resolved parks the
    /// request (an external request: the resolver hands it in again);
    /// unknown or unresolvable names are answered.
    fn next_hop(
        &mut self,
        ctx: &mut Ctx,
        next: Next,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Result<(SocketAddr, Option<Route>), Reply> {
        match next {
            Next::At(a) => Ok((a, None)),
            Next::Named(a, route) => Ok((a, Some(route))),
            Next::Nowhere => Err(Self::unresolvable(ctx, msg, src, out)),
            Next::Resolving(name, port, transport) => {
                bump(&ctx.shared.metrics.hop_waits);
                let park = if ctx.again {
                    Park::Full
                } else {
                    let request = Parked {
                        message: msg.as_bytes().to_vec(),
                        src,
                        arrived: ctx.transport,
                    };
                    let question = (name.as_str(), port, transport);
                    let names = &ctx.shared.names;
                    names.park(question, request, ctx.source_share(src), ctx.now.mono)
                };
                match park {
                    // Handed in again once the name is resolved.
                    Park::Parked => Err(Reply::Drop),
                    Park::Known(Found::At(a)) => Ok((
                        a,
                        Some(Route {
                            name,
                            port,
                            transport,
                        }),
                    )),
                    Park::Known(Found::Nowhere) => Err(Self::unresolvable(ctx, msg, src, out)),
                    Park::Known(_) | Park::Full => Err(Self::resolver_busy(ctx, msg, src, out)),
                }
            }
            Next::Busy => Err(Self::resolver_busy(ctx, msg, src, out)),
        }
    }

    /// Writes the request as forwarded (§16.6) and sends it to `hop`, with
    /// a branch for every other contact when `forking`.
    #[allow(clippy::too_many_arguments)]
    fn forward_to(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        f: &Forward,
        forking: bool,
        hop: SocketAddr,
        named: Option<Route>,
        out: &mut Vec<u8>,
    ) -> Reply {
        match self.write_forward(ctx, msg, src, f, 0, out) {
            Ok(()) => {}
            Err(StatusCode::MESSAGE_TOO_LARGE_5XX) => {
                out.clear();
                return ctx.respond(
                    msg,
                    StatusCode::MESSAGE_TOO_LARGE_5XX,
                    &[(
                        "Warning",
                        "399 sipsec \"too large to forward with this proxy's headers\"",
                    )],
                    src,
                    out,
                );
            }
            Err(status) => {
                out.clear();
                return ctx.respond(msg, status, &[], src, out);
            }
        }
        self.forks.clear();
        if forking {
            self.fork(ctx, msg, src, f);
        }
        self.forwarded(ctx, msg, src, (hop, f.transport), named, out)
    }

    /// Forks `msg` to the local user's other contacts (RFC 3261 §16.6):
    /// a request for each into `self.forks`, in q groups. Contacts that
    /// cannot be reached at once (a closed flow, a name not resolved yet)
    /// are left out; at most [`MAX_BRANCHES`] in all.
    fn fork(&mut self, ctx: &mut Ctx, msg: &Message<'_>, src: SocketAddr, first: &Forward) {
        let by_q = ctx.shared.config.forking == Forking::ByQ;
        let (mut group, mut q) = (0u8, ctx.bindings[0].q);
        let mut bytes = Vec::new();
        for i in 1..ctx.bindings.len().min(MAX_BRANCHES) {
            if by_q && ctx.bindings[i].q != q {
                q = ctx.bindings[i].q;
                group += 1;
            }
            let Some(leg) = self.leg(ctx, i) else {
                continue;
            };
            let (at, route) = match leg.next {
                Next::At(a) => (a, None),
                Next::Named(a, r) => (a, Some(r)),
                _ => continue,
            };
            let f = Forward {
                ruri: Some(leg.contact),
                transport: leg.transport,
                flow: leg.flow,
                hop: at,
                ..*first
            };
            bytes.clear();
            if self.write_forward(ctx, msg, src, &f, i, &mut bytes).is_ok() {
                self.forks.push(Fork {
                    bytes: std::mem::take(&mut bytes),
                    hop: (at, leg.transport),
                    route,
                    group,
                });
            }
        }
    }

    /// Writes `msg` as forwarded to one target (fork index `fork`) into
    /// `out`: this proxy's Via (its branch tagged for the hop responses go
    /// back to), Record-Route, Route from a Path, the new Request-URI.
    /// The status to answer instead when it cannot be forwarded.
    fn write_forward(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        f: &Forward,
        fork: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), StatusCode> {
        let method = msg.method();
        let (out_transport, out_flow, pops) = (f.transport, f.flow, f.pops);
        let new_ruri = f.ruri.as_deref();
        let branch = Self::branch(ctx, msg) | (fork as u64) << FORK_SHIFT;
        let tag = tokens::branch_tag(
            &ctx.shared.branch_key.0,
            branch,
            Self::upstream(ctx, msg, src),
        );
        // Over TLS or WebSocket this server is reached at that listener.
        let here = ctx.listen_addr(out_transport);
        self.via.clear();
        self.via.push_str("SIP/2.0/");
        self.via.push_str(out_transport.as_str());
        self.via.push(' ');
        sip_core::writer::push_socket_addr(&mut self.via, here);
        self.via.push_str(";branch=");
        self.via.push_str(BRANCH_PREFIX);
        sip_core::writer::push_hex(&mut self.via, branch, 16);
        sip_core::writer::push_hex(&mut self.via, tag, 16);
        if self.hidden_in {
            // Its answer is hidden again on its way out to the trunk.
            self.via.push(';');
            self.via.push_str(crate::proto::topology::INBOUND);
            if !self.seal_call_id {
                self.via.push('=');
                self.via.push_str(crate::proto::topology::KEEP);
            }
        }
        let top = msg.top_via();
        let reliable = ctx.transport.is_reliable();
        let annotate = reliable
            || top.rport().is_some()
            || resolve(top.host(), None).map(|a| a.ip()) != Some(src.ip());
        self.ip.clear();
        sip_core::writer::push_ip(&mut self.ip, src.ip());
        // Dialog-creating requests for local users record-route when asked,
        // so the dialog's later requests come back through this proxy. A
        // phone on a TCP/TLS connection can only be reached over that
        // connection, which ends here: its dialogs always record-route
        // (as RFC 5626 §5.1 asks of an edge proxy), or the ACK and BYE
        // would be sent to a contact nobody listens on.
        let in_flow = ctx.transport.is_reliable().then_some(src);
        let flow = in_flow.is_some() || out_flow.is_some();
        self.rr.clear();
        if (ctx.shared.config.record_route || ctx.shared.transactions.is_some() || flow)
            && (new_ruri.is_some() || f.to_peer)
            && matches!(method, Method::Invite | Method::Subscribe | Method::Refer)
        {
            // The side toward the callee first, then (when the request
            // crossed transports or came on a connection) the side toward
            // the caller: double record-routing (RFC 5658 §3.2), each
            // entry with the flow token of its connection.
            let upstream = crate::proto::here::upstream_name(msg);
            let proof = tokens::hops_proof(&ctx.shared.route_key.0, src.ip(), f.hop.ip(), upstream);
            self.write_rr(ctx, out_transport, out_flow, &proof);
            if ctx.transport != out_transport || in_flow.is_some() {
                self.rr.push_str(", ");
                self.write_rr(ctx, ctx.transport, in_flow, &proof);
            }
        }
        let edits = RequestEdits {
            request_uri: new_ruri,
            via: Some(&self.via),
            record_route: (!self.rr.is_empty()).then_some(self.rr.as_str()),
            route: (new_ruri.is_some() && !self.path.is_empty()).then_some(self.path.as_str()),
            pop_routes: pops,
            received: annotate.then_some((self.ip.as_str(), src.port())),
            // The relay's session description in place of the caller's.
            body: self.relayed_sdp().map(str::as_bytes),
            max_forwards: true,
            force_rport: reliable,
            // The credentials we checked stop here (RFC 3261 §22.3).
            remove: if f.authenticated {
                ctx.shared.auth.as_ref().and_then(|a| {
                    msg.headers_named(HeaderName::ProxyAuthorization)
                        .find(|h| {
                            sip_core::auth::Credentials::parse(h.value)
                                .is_ok_and(|c| c.realm == Some(a.realm.as_str()))
                        })
                        .map(|h| (h.line, h.value))
                })
            } else {
                None
            },
        };
        let added = 1
            + usize::from(edits.record_route.is_some())
            + usize::from(edits.route.is_some())
            + usize::from(msg.max_forwards().is_none());
        let removed = usize::from(pops > 0 && msg.route_count() == pops)
            + usize::from(edits.remove.is_some());
        let written = forward_request(msg, &edits, out);
        if written.is_ok() {
            self.shift_cseq(ctx, msg, out);
            self.hide_toward_trunk(ctx, out_transport, out);
        }
        if written.is_ok() && self.stir_edit.is_some() {
            let first = std::mem::take(out);
            if !self.with_stir_edit(&first, out) {
                *out = first;
            }
        }
        match written {
            // What we forward must itself be acceptable to the next hop:
            // our lines can push a request at the limits over them.
            Ok(())
                if out.len() > Limits::DEFAULT.max_message_len
                    || msg.header_count() + added > Limits::DEFAULT.max_headers + removed =>
            {
                Err(StatusCode::MESSAGE_TOO_LARGE_5XX)
            }
            Ok(()) => Ok(()),
            Err(_) => Err(StatusCode::TOO_MANY_HOPS),
        }
    }

    /// A request was written into `out` for `target`: with transactions,
    /// open one first (a response may come back before this returns).
    fn forwarded(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        hop: (SocketAddr, Transport),
        named: Option<Route>,
        out: &mut Vec<u8>,
    ) -> Reply {
        if msg.method() != Method::Ack && ctx.shared.transactions.is_some() {
            if let Some(instead) = self.start_transaction(ctx, msg, src, hop, named, out) {
                return instead;
            }
        }
        bump(&ctx.shared.metrics.forwarded);
        Reply::Send(hop.0, hop.1)
    }

    /// Follows an initial INVITE's dialog and opens the transaction of
    /// the request written into `out` for `hop`. `Some`: what is answered
    /// instead of sending it (refused, a retransmission, no room).
    fn start_transaction(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        hop: (SocketAddr, Transport),
        named: Option<Route>,
        out: &mut Vec<u8>,
    ) -> Option<Reply> {
        let key = Key {
            branch: Self::branch(ctx, msg),
            cancel: false,
        };
        let up = Self::upstream(ctx, msg, src);
        let trunk = named.as_ref().filter(|r| r.name.starts_with("trunk."));
        let followed = match self.follow(ctx, msg, src, (up, hop), trunk, out) {
            Ok(f) => f,
            Err(refused) => {
                self.forks.clear();
                return Some(refused);
            }
        };
        let tx = ctx.shared.transactions.as_ref()?;
        let first = Target {
            forwarded: out,
            hop,
            route: named,
            group: 0,
        };
        let forks = self.forks.iter_mut().map(|f| Target {
            forwarded: &f.bytes,
            hop: f.hop,
            route: f.route.take(),
            group: f.group,
        });
        let started = tx.start(
            key,
            msg,
            (up, ctx.source_share(src)),
            std::iter::once(first).chain(forks),
            ctx.now.mono,
            &mut ctx.sends,
            &ctx.shared.metrics,
        );
        match started {
            Ok(()) => {
                // The reply's request is the first branch's first try.
                ctx.sent = Some((key, 0));
                if !self.forks.is_empty() {
                    let m = &ctx.shared.metrics;
                    bump(&m.forked);
                    let n = (self.forks.len() + 1).min(MAX_BRANCHES) as u64;
                    m.fork_branches
                        .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                }
                None
            }
            Err(NotStarted::Exists) => {
                // A copy of the request started the transaction
                // meanwhile (on another worker): this one is a
                // retransmission and gets what that copy got.
                out.clear();
                self.forks.clear();
                let now = ctx.now.mono;
                tx.on_request(key, msg.method(), now, &mut ctx.sends, &ctx.shared.metrics);
                Some(Reply::Drop)
            }
            Err(refused) => {
                // No room in the table, or none left in the source's
                // share of it: nothing of the request stays.
                out.clear();
                self.forks.clear();
                if let (true, Some(d)) = (followed, &ctx.shared.dialogs) {
                    d.abandon(msg);
                }
                Self::abandon_media(ctx, msg);
                let why = match refused {
                    NotStarted::OverShare => {
                        bump(&ctx.shared.metrics.transactions_over_share);
                        "399 sipsec \"too many transactions from this source\""
                    }
                    _ => "399 sipsec \"too many transactions in progress\"",
                };
                Some(ctx.respond(
                    msg,
                    StatusCode::SERVICE_UNAVAILABLE,
                    &[("Retry-After", "5"), ("Warning", why)],
                    src,
                    out,
                ))
            }
        }
    }

    /// 403 for a request this server will not forward.
    pub(super) fn relay_denied(
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        ruri: &Uri<'_>,
        out: &mut Vec<u8>,
    ) -> Reply {
        ctx.events.push(Event::RelayDenied {
            src,
            target: ruri.to_string(),
        });
        ctx.respond(
            msg,
            StatusCode::FORBIDDEN,
            &[("Warning", "399 sipsec \"relaying denied\"")],
            src,
            out,
        )
    }
}
