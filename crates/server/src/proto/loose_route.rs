//! Loose routing (RFC 3261 §16.4) and the proof a dialog's named hops
//! carry: the Routes naming this proxy are popped, and a next hop the
//! request names (its next Route, or its Request-URI after them) is
//! looked up and used only when this proxy's Record-Route proved it
//! ([`tokens::HOPS_PARAM`]), so a peer cannot route through it anywhere
//! it writes, nor have its resolver ask names of its choosing.

use std::net::SocketAddr;

use sip_core::{Message, StatusCode};

use crate::proto::ctx::Ctx;
use crate::proto::effects::Hop;
use crate::proto::proxy::Proxy;
use crate::proto::reply::{bump, Reply};
use crate::proto::tokens;

impl Proxy {
    /// Whether one of the `pops` Routes naming this proxy proves `hop`
    /// (its Record-Route's [`tokens::HOPS_PARAM`] names the address), or,
    /// before the hop is known, carries a proof at all.
    pub(super) fn hop_proven(
        ctx: &Ctx,
        msg: &Message<'_>,
        pops: usize,
        hop: Option<SocketAddr>,
    ) -> bool {
        msg.routes().take(pops).any(|r| {
            r.uri()
                .param(tokens::HOPS_PARAM)
                .flatten()
                .is_some_and(|p| match hop {
                    Some(h) => tokens::proves_ip(&ctx.shared.route_key.0, p, h.ip()),
                    None => tokens::is_proof(p),
                })
        })
    }

    /// Before a next hop the request names (its next Route, or its
    /// Request-URI after this proxy's Routes) is looked up: refused
    /// (403) unless a popped Route carries this proxy's proof (checked
    /// against the hop's address once it is known), the request comes
    /// from a peer proxy, or from a trunk whose route set was sealed here.
    /// Otherwise anyone could have the resolver ask names of their
    /// choosing and fill its questions.
    pub(super) fn may_look_up(
        &self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        pops: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), Reply> {
        if self.hidden_in || Self::is_peer(ctx, src) || Self::hop_proven(ctx, msg, pops, None) {
            return Ok(());
        }
        Err(Self::unproven_route(ctx, msg, src, out))
    }

    /// The answer to a request whose next hop is not proven.
    pub(super) fn unproven_route(
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Reply {
        bump(&ctx.shared.metrics.unproven_routes);
        ctx.respond(
            msg,
            StatusCode::FORBIDDEN,
            &[("Warning", "399 sipsec \"in-dialog route not proven\"")],
            src,
            out,
        )
    }

    /// Loose routing (§16.4): the first Routes naming us are removed (two
    /// after double record-routing, RFC 5658); a flow token in one names
    /// the connection the request continues on when it did not come from
    /// there (RFC 5626 §5.3). Returns how many and that connection.
    pub(super) fn loose_route(
        ctx: &Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
    ) -> (usize, Option<Hop>) {
        let mut pops = 0;
        let mut flow_hop = None;
        for r in msg.routes().take(2) {
            if !ctx.is_local_uri(r.uri()) {
                break;
            }
            pops += 1;
            if let Some((peer, t)) = r
                .uri()
                .user()
                .and_then(|u| tokens::read_flow_token(&ctx.shared.flow_key.0, u))
            {
                if peer != src {
                    flow_hop = Some((peer, t));
                }
            }
        }
        (pops, flow_hop)
    }
}
