//! The proxy's side of trunks: a request for a number no local user has
//! (by prefix, or the default trunk) or for a trunk's domain goes to the
//! trunk's gateway the algorithm picks, its transaction failing over to
//! the others (see [`crate::proto::trunks`]).

use std::net::SocketAddr;

use sip_core::{Message, Method, StatusCode};

use crate::proto::ctx::Ctx;
use crate::proto::proxy::Proxy;
use crate::proto::proxy::Selected;
use crate::proto::reply::{Next, Reply};
use crate::proto::trunks::TrunkRef;

impl Proxy {
    /// Where `msg` goes through trunk `i`: its first gateway, failing over
    /// along the trunk's route. Only this domain's (authenticated) users
    /// reach a trunk when authentication is on: a trunk is not a relay
    /// for peers or strangers (toll fraud). No gateway up: 503.
    pub(super) fn trunk_target(
        &mut self,
        ctx: &mut Ctx,
        trunk: TrunkRef,
        msg: &Message<'_>,
        src: SocketAddr,
        authenticated: bool,
        out: &mut Vec<u8>,
    ) -> Result<Selected, Reply> {
        if !matches!(
            msg.method(),
            Method::Invite | Method::Message | Method::Options
        ) || (ctx.shared.auth.is_some() && !authenticated)
        {
            return Err(ctx.respond(
                msg,
                StatusCode::FORBIDDEN,
                &[(
                    "Warning",
                    "399 sipsec \"trunks carry this domain's users' calls\"",
                )],
                src,
                out,
            ));
        }
        let shared = ctx.shared.clone();
        let sticky = shared.transactions.is_none();
        let Some((gateway, route)) = trunk.pick(msg, &shared.names, ctx.now.mono, sticky) else {
            let warning = format!("399 sipsec \"no gateway of trunk {} is up\"", trunk.name());
            return Err(ctx.respond(
                msg,
                StatusCode::SERVICE_UNAVAILABLE,
                &[("Retry-After", "5"), ("Warning", &warning)],
                src,
                out,
            ));
        };
        let transport = route.transport;
        self.hide_out = trunk.hides();
        Ok(Selected {
            authenticated,
            to_peer: true,
            ..Selected::at(Next::Named(gateway, route), transport)
        })
    }

    /// A request from a trunk that hides the inside (a sealed
    /// Request-URI or Call-ID of this proxy's): its bytes revealed.
    pub(super) fn reveal_from_trunk(ctx: &Ctx, msg: &Message<'_>) -> Option<Vec<u8>> {
        let th = ctx.shared.hider.as_ref()?;
        let sealed = |s: &str| s.starts_with(crate::proto::topology::SEALED);
        let ruri_sealed = msg.request_uri().and_then(|u| u.user()).is_some_and(sealed);
        if !ruri_sealed && !sealed(msg.call_id()) {
            return None;
        }
        let mut out = Vec::new();
        crate::proto::topology::reveal_request(msg.as_bytes(), th, &mut out).then_some(out)
    }

    /// Whether `msg` is an in-dialog request of the inside toward a
    /// trunk that hides it (its first Route is ours, marked): `Some`
    /// with whether its Call-ID is sealed (not in a dialog the carrier
    /// began).
    pub(super) fn in_hidden_dialog(ctx: &Ctx, msg: &Message<'_>) -> Option<bool> {
        ctx.shared.hider.as_ref()?;
        msg.to().tag()?;
        let r = msg.routes().next()?;
        if !ctx.is_local_uri(r.uri()) {
            return None;
        }
        let mark = r.uri().param(crate::proto::topology::RR_PARAM)?;
        Some(mark != Some(crate::proto::topology::KEEP))
    }

    /// Whether `msg` begins a call from the inside is hidden from: a
    /// gateway of a trunk that hides it, or the proxy of a peer domain in
    /// `hide_topology_peers` (its source address is one).
    pub(super) fn begun_by_hidden_side(ctx: &Ctx, msg: &Message<'_>, src: SocketAddr) -> bool {
        if ctx.shared.hider.is_none() || msg.to().tag().is_some() {
            return false;
        }
        let c = &ctx.shared.config;
        let from_peer = || {
            c.peers.iter().any(|(domain, a)| {
                a.ip() == src.ip()
                    && c.hide_topology_peers
                        .iter()
                        .any(|d| d.eq_ignore_ascii_case(domain))
            })
        };
        ctx.shared.trunks.hides_source(src.ip()) || from_peer()
    }

    /// The request written into `out` goes to a trunk that hides the
    /// inside: Vias, Call-ID and Contact sealed.
    pub(super) fn hide_toward_trunk(
        &self,
        ctx: &Ctx,
        transport: sip_core::Transport,
        out: &mut Vec<u8>,
    ) {
        let (true, Some(th)) = (self.hide_out, ctx.shared.hider.as_ref()) else {
            return;
        };
        let here = ctx.listen_addr(transport).to_string();
        let written = std::mem::take(out);
        if !crate::proto::topology::hide_request(&written, th, &here, self.seal_call_id, out) {
            *out = written;
        }
    }
}
