//! Where a request goes (RFC 3261 §16.5): down the connection a flow
//! token names, to the next Route, to a local user's contacts, along an
//! in-dialog Request-URI, or to a peer domain's proxy.

use std::net::SocketAddr;

use sip_core::{Message, Method, StatusCode, Uri};

use crate::config::{Forking, Mode, PathMode};
use crate::proto::ctx::Ctx;
use crate::proto::effects::Hop;
use crate::proto::flows::same_flow_transport;
use crate::proto::metrics::Stage;
use crate::proto::proxy::Proxy;
use crate::proto::proxy::{Leg, Selected};
use crate::proto::reply::{bump, Event, Next, Reply, ALLOW};
use crate::proto::uris::{aor_of, first_path_uri, reveal_for_call};
use sip_core::Transport;

impl Proxy {
    /// Where the request goes (§16.5): down the connection a flow token
    /// names, to the next Route, to a local user's contact, along an
    /// in-dialog Request-URI, or to a peer domain's proxy; anything else
    /// is refused (no open relay).
    pub(super) fn select_target(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        pops: usize,
        flow_hop: Option<Hop>,
        out: &mut Vec<u8>,
    ) -> Result<Selected, Reply> {
        let now = ctx.now.secs();
        let next_route = msg.routes().nth(pops);
        let ruri = msg.request_uri().ok_or(Reply::Drop)?;
        let target = if let Some((peer, t)) = flow_hop.filter(|_| next_route.is_none()) {
            // A closed TCP/TLS flow is connected to again; a browser's is
            // gone for good.
            if matches!(t, Transport::Ws | Transport::Wss) && !Self::flow_open(ctx, peer, t) {
                bump(&ctx.shared.metrics.flows_failed);
                return Err(ctx.respond(msg, StatusCode::FLOW_FAILED, &[], src, out));
            }
            Selected {
                flow: Some(peer),
                ..Selected::at(Next::At(peer), t)
            }
        } else if let Some(r) = next_route {
            let u = r.uri();
            self.may_look_up(ctx, (msg, src), pops, u.host(), out)?;
            let t = Transport::of_uri(u);
            Selected {
                named_hop: true,
                ..Selected::at(
                    u.host().map_or(Next::Nowhere, |h| ctx.hop(h, u.port(), t)),
                    t,
                )
            }
        } else if ctx.is_local_uri(ruri) {
            return self.local_user_target(ctx, msg, src, now, out);
        } else if pops > 0 {
            // In-dialog request that record-routed through us (§16.12):
            // the Request-URI is the peer's contact.
            self.may_look_up(ctx, (msg, src), pops, ruri.host(), out)?;
            let t = Transport::of_uri(ruri);
            let next = ruri
                .host()
                .map_or(Next::Nowhere, |h| ctx.hop(h, ruri.port(), t));
            Selected {
                named_hop: true,
                ..Selected::at(next, t)
            }
        } else if let Some(peer) =
            Self::peer_for(ctx, ruri).filter(|_| ctx.shared.config.mode == Mode::Proxy)
        {
            // Another domain we peer with: our users' requests go to its
            // proxy, the Request-URI (perhaps a pseudonym for it) as is.
            self.hide_out = ruri.host().is_some_and(|h| {
                let h = h.to_string();
                ctx.shared
                    .config
                    .hide_topology_peers
                    .iter()
                    .any(|d| d.eq_ignore_ascii_case(&h))
            });
            Selected {
                authenticated: self.authorize_caller(ctx, msg, src, now, out)?,
                to_peer: true,
                ..Selected::at(Next::At(peer), Transport::Udp)
            }
        } else if let Some(i) = ruri
            .host()
            .and_then(|h| ctx.shared.trunks.for_domain(&h.to_string()))
            .filter(|_| ctx.shared.config.mode == Mode::Proxy)
        {
            // A trunk's domain (a carrier's): through its gateways.
            let authenticated = self.authorize_caller(ctx, msg, src, now, out)?;
            return self.trunk_target(ctx, i, msg, src, authenticated, out);
        } else {
            // No open relay: only requests for this server's domains are proxied.
            return Err(Self::relay_denied(ctx, msg, src, ruri, out));
        };
        Ok(target)
    }

    /// Domain tickets (PrivaSIP-3 level 2) for an OPTIONS to this domain
    /// that enrolls anonymously: no credentials asked, as the tickets name
    /// nobody (the per-source guard bounds what one address may ask).
    /// The answer is some 30 times the request's size, so it goes only
    /// where the source is proven: a configured peer proxy's address (the
    /// callers' home proxies) or a connection — never to a UDP source
    /// that could be a spoofed victim of a reflection.
    fn domain_tickets(ctx: &Ctx, msg: &Message<'_>, src: SocketAddr, now: u64) -> Option<String> {
        let proven = ctx.transport != Transport::Udp
            || ctx.shared.config.peers.iter().any(|(_, a)| *a == src);
        if !proven {
            return None;
        }
        let p = ctx.shared.privacy.as_ref().filter(|p| p.issues_tickets())?;
        let enroll = msg.headers_named(sip_core::HeaderName::Other).find(|h| {
            h.raw_name
                .eq_ignore_ascii_case(crate::proto::registrar::ENROLL)
        })?;
        p.enroll_domain(enroll.value, now, || ctx.may_decrypt(src))
    }

    /// A request for a user of this domain: the caller is authorized, the
    /// user's live bindings are looked up, and the first contact becomes
    /// the target (the others are forked to, when forking).
    fn local_user_target(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        now: u64,
        out: &mut Vec<u8>,
    ) -> Result<Selected, Reply> {
        let ruri = msg.request_uri().ok_or(Reply::Drop)?;
        let key = match (ruri.user(), ruri.host()) {
            (Some(u), Some(h)) => {
                // A PrivaSIP-3 callee pseudonym is single-use too.
                let privacy = ctx.shared.privacy.as_ref();
                let call = (msg.call_id(), now);
                match reveal_for_call(privacy, u, call, || ctx.may_decrypt(src)) {
                    Some(id) => Some(aor_of(&id, h)),
                    None => return Err(ctx.refuse(msg, src, out)),
                }
            }
            _ => None,
        };
        let Some(key) = key else {
            return Err(match msg.method() {
                Method::Options => {
                    let tickets = Self::domain_tickets(ctx, msg, src, now);
                    let mut extra = vec![("Allow", ALLOW), ("Accept", "application/sdp")];
                    if let Some(t) = &tickets {
                        extra.push((crate::proto::registrar::TICKETS, t.as_str()));
                    }
                    ctx.respond(msg, StatusCode::OK, &extra, src, out)
                }
                _ => ctx.respond(msg, StatusCode::NOT_FOUND, &[], src, out),
            });
        };
        let mode = ctx.shared.config.mode;
        if mode == Mode::Registrar {
            return Err(ctx.respond(
                msg,
                StatusCode::METHOD_NOT_ALLOWED,
                &[("Allow", "REGISTER, OPTIONS")],
                src,
                out,
            ));
        }
        let authenticated = self.authorize_caller(ctx, msg, src, now, out)?;
        if Self::location_too_stale(ctx, now) {
            return Err(Self::location_stale(ctx, msg, src, out));
        }
        let t0 = ctx.clock();
        ctx.shared.location.lookup(&key, now, &mut ctx.bindings);
        ctx.stage(Stage::FindUser, t0);
        if ctx.bindings.is_empty() {
            // A number no local user has: out through its trunk.
            let trunk = ruri.user().and_then(|u| ctx.shared.trunks.for_number(u));
            if let Some(i) = trunk.filter(|_| mode == Mode::Proxy) {
                return self.trunk_target(ctx, i, msg, src, authenticated, out);
            }
            return Err(ctx.respond(msg, StatusCode::NOT_FOUND, &[], src, out));
        }
        // A binding whose WebSocket or outbound flow is closed can
        // never be reached again (RFC 5626 §5.3): a phone that
        // reloaded or reconnected is reached on its newer binding.
        let had = ctx.bindings.len();
        let mut bindings = std::mem::take(&mut ctx.bindings);
        bindings.retain(|b| !self.flow_gone(ctx, b));
        ctx.bindings = bindings;
        if ctx.bindings.is_empty() {
            bump(&ctx.shared.metrics.flows_failed);
            ctx.events.push(Event::FlowFailed {
                aor: key,
                bindings: had,
            });
            return Err(ctx.respond(msg, StatusCode::FLOW_FAILED, &[], src, out));
        }
        if mode == Mode::Redirect {
            return Err(crate::proto::redirect::answer(ctx, msg, src, out));
        }
        let Some(leg) = self.leg(ctx, 0) else {
            // A browser is reached on its connection or not at all.
            bump(&ctx.shared.metrics.flows_failed);
            return Err(ctx.respond(msg, StatusCode::FLOW_FAILED, &[], src, out));
        };
        let forking = ctx.shared.transactions.is_some()
            && ctx.shared.config.forking != Forking::Off
            && ctx.bindings.len() > 1
            && msg.method() != Method::Ack;
        Ok(Selected {
            flow: leg.flow,
            ruri: Some(leg.contact),
            authenticated,
            forking,
            ..Selected::at(leg.next, leg.transport)
        })
    }

    /// How the local user's contact `ctx.bindings[i]` is reached; its
    /// Path (or the route to the node holding its flow) is left in
    /// `self.path`. `None` when the contact's browser or outbound flow is
    /// closed: it can never be reached again (RFC 5626 §5.3).
    pub(super) fn leg(&mut self, ctx: &mut Ctx, i: usize) -> Option<Leg> {
        let contact = ctx.bindings[i].contact().to_owned();
        // A stored Path (RFC 3327) is the route to the contact: the
        // request goes to its first hop with the Path as Route.
        self.path.clear();
        let remote_flow = {
            let b = &ctx.bindings[i];
            b.flow.is_some() && first_path_uri(b.node()).is_some_and(|u| !ctx.is_local_uri(&u))
        };
        if remote_flow {
            // The phone is connected to another node sharing the
            // location: the request goes there, which sends it down
            // the flow its token names.
            self.path.push_str(ctx.bindings[i].node());
        } else if ctx.shared.config.path != PathMode::Off {
            self.path.push_str(ctx.bindings[i].path());
        }
        let next = match first_path_uri(&self.path) {
            Some(hop) => Some(hop),
            None => {
                self.path.clear();
                Uri::parse(&contact, sip_core::UriContext::Header).ok()
            }
        };
        let binding = &ctx.bindings[i];
        // The flow serves a contact reached over its transport (a
        // phone that registers over TCP a contact for UDP is reached
        // over UDP), and every outbound contact.
        let websocket = |t: Transport| matches!(t, Transport::Ws | Transport::Wss);
        let flow = binding.flow.filter(|f| {
            self.path.is_empty()
                && (f.outbound
                    || websocket(f.transport)
                    || next
                        .as_ref()
                        .is_some_and(|u| same_flow_transport(Transport::of_uri(u), f.transport)))
        });
        let (next, transport, flow) = match flow {
            // The phone registered over a connection: the request goes
            // back down it (RFC 3261 §18, RFC 5626 §5.3), whatever
            // address its Contact names (often a private one).
            Some(f) if Self::flow_open(ctx, binding.source, f.transport) => {
                (Next::At(binding.source), f.transport, Some(binding.source))
            }
            Some(f) if f.outbound || websocket(f.transport) => return None,
            // Gone without outbound: try the contact's own address.
            _ => match next {
                Some(u) => {
                    let t = Transport::of_uri(&u);
                    let hop = u.host().map_or(Next::Nowhere, |h| ctx.hop(h, u.port(), t));
                    (hop, t, None)
                }
                None => (Next::Nowhere, Transport::Udp, None),
            },
        };
        Some(Leg {
            next,
            contact,
            transport,
            flow,
        })
    }
}
