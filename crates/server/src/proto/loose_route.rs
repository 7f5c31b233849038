//! Loose routing (RFC 3261 §16.4) and the proof a dialog's named hops
//! carry: the Routes naming this proxy are popped, and a next hop the
//! request names (its next Route, or its Request-URI after them) is
//! looked up and used only when this proxy's Record-Route proved it
//! ([`tokens::HOPS_PARAM`]), so a peer cannot route through it anywhere
//! it writes, nor have its resolver ask names of its choosing.

use std::net::SocketAddr;

use sip_core::{Host, Message, StatusCode};

use crate::proto::ctx::Ctx;
use crate::proto::effects::Hop;
use crate::proto::proxy::Proxy;
use crate::proto::reply::{bump, Reply};
use crate::proto::tokens;

impl Proxy {
    /// Whether one of the `pops` Routes naming this proxy proves `hop`
    /// (its Record-Route's [`tokens::HOPS_PARAM`] names the address).
    pub(super) fn hop_proven(ctx: &Ctx, msg: &Message<'_>, pops: usize, hop: SocketAddr) -> bool {
        Self::proofs(msg, pops).any(|p| tokens::proves_ip(&ctx.shared.route_key.0, p, hop.ip()))
    }

    /// The proofs in the `pops` Routes naming this proxy.
    fn proofs<'m>(msg: &'m Message<'_>, pops: usize) -> impl Iterator<Item = &'m str> + 'm {
        msg.routes()
            .take(pops)
            .filter_map(|r| r.uri().param(tokens::HOPS_PARAM).flatten())
    }

    /// Before a next hop the request names (`host`: its next Route's, or
    /// its Request-URI's after this proxy's Routes) is looked up: refused
    /// (403) unless a popped Route carries this proxy's proof, and for a
    /// domain name, one that names it (its address is checked against the
    /// proof once known); or the request comes from a peer proxy, or from
    /// a trunk whose route set was sealed here. Otherwise anyone could
    /// have the resolver ask names of their choosing, fill its questions
    /// and learn from the answer which names exist.
    pub(super) fn may_look_up(
        &self,
        ctx: &mut Ctx,
        (msg, src): (&Message<'_>, SocketAddr),
        pops: usize,
        host: Option<Host<'_>>,
        out: &mut Vec<u8>,
    ) -> Result<(), Reply> {
        if self.hidden_in || Self::is_peer(ctx, src) {
            return Ok(());
        }
        let key = &ctx.shared.route_key.0;
        let proven = Self::proofs(msg, pops).any(|p| match host {
            Some(Host::Name(n)) => tokens::proves_name(key, p, n),
            _ => tokens::is_proof(p),
        });
        if proven {
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
