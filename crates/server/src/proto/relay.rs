//! Responses on their way back (RFC 3261 §16.7, §18.2.2): a stateful
//! proxy's transactions take them; otherwise only a response whose branch
//! tag proves this proxy forwarded its request to the hop the next Via
//! names is relayed there. Anything else is dropped and counted.

use std::net::{IpAddr, SocketAddr};

use sip_core::proxy::{forward_response, forward_response_with};
use sip_core::uri::Host;
use sip_core::Message;

use crate::config::Mode;
use crate::proto::branch::Key;
use crate::proto::ctx::Ctx;
use crate::proto::proxy::Proxy;
use crate::proto::reply::{bump, Event, Reply, MAX_DATAGRAM};
use crate::proto::shared::Transport;
use crate::proto::stateful::Upstream;
use crate::proto::tokens;
use crate::proto::uris::resolve;

impl Proxy {
    /// Relays the response `msg` (written into `out`) where it goes, if it
    /// can be proven ours to relay.
    pub(super) fn forward_response(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Reply {
        if ctx.shared.config.mode != Mode::Proxy {
            // A registrar or redirect server forwards no request, so no
            // response is ever for it to relay.
            return Self::unproven_response(ctx);
        }
        if !ctx.is_our_via(msg.top_via()) {
            return Self::unproven_response(ctx);
        }
        if let Some(branch) = msg
            .top_via()
            .branch()
            .filter(|b| b.starts_with(crate::proto::originated::BRANCH_PREFIX))
        {
            // An answer to a request of this proxy's own: it goes no further.
            let status = msg.status().map_or(0, |s| s.as_u16());
            if ctx.shared.originated.answered(branch, status, ctx.now.mono) {
                return Reply::Drop;
            }
            return Self::unproven_response(ctx);
        }
        if let Some(bytes) = Self::reveal_from_hidden_trunk(ctx, msg) {
            // From a trunk that hides the inside: relayed as revealed.
            return match Message::parse(&bytes) {
                Ok(revealed) => self.forward_response(ctx, &revealed, src, out),
                Err(_) => Self::unproven_response(ctx),
            };
        }
        let hide_back = Self::hide_back(ctx, msg);
        let reproof = reproof(ctx, msg, src);
        let reprove = |o: &mut Vec<u8>| {
            if let Some((key, from, contact, name)) = &reproof {
                tokens::reprove_response(key, *from, *contact, *name, o);
            }
            true
        };
        // Stateless mode skips the branch decoding altogether.
        let key = ctx
            .shared
            .transactions
            .as_ref()
            .and_then(|_| Key::of_message(msg));
        if let Some(key) = key {
            if let Some(reply) = self.relay_answer(ctx, msg, src, key) {
                return reply;
            }
        }
        let offset = Self::caller_offset(ctx, msg);
        let stateful = ctx.shared.transactions.as_ref().zip(key);
        if let Some((tx, key)) = stateful {
            let metrics = &ctx.shared.metrics;
            let relayed = self.relayed_sdp();
            let strip = |m: &Message<'_>, o: &mut Vec<u8>| {
                let body = relayed.map(str::as_bytes);
                forward_response_with(m, body, o).is_ok()
                    && reprove(o)
                    && unshift_cseq(offset, o)
                    && hide_back.as_ref().is_none_or(|h| sealed_back(h, o))
            };
            let upstream =
                tx.on_response(key, msg, ctx.now.mono, out, &mut ctx.sends, metrics, strip);
            Self::note_renumbered(ctx);
            match upstream {
                Upstream::Unknown => {}
                Upstream::Absorbed => return Reply::Drop,
                Upstream::Send((dest, transport)) => {
                    Self::dialog_response(ctx, msg);
                    return Reply::Send(dest, transport);
                }
            }
        }
        let Some(next) = msg.vias().nth(1) else {
            return Self::unproven_response(ctx);
        };
        let host = next
            .received_ip()
            .map(|ip| match ip {
                IpAddr::V4(a) => Host::V4(a),
                IpAddr::V6(a) => Host::V6(a),
            })
            .unwrap_or(next.host());
        let port = match next.rport() {
            Some(Some(p)) => Some(p),
            _ => next.port(),
        };
        let Some(dest) = resolve(host, port) else {
            return Self::unproven_response(ctx);
        };
        let transport = match next.transport() {
            t @ (Transport::Tcp | Transport::Tls | Transport::Ws | Transport::Wss) => t,
            _ => Transport::Udp,
        };
        // No transaction vouches for it: only the branch's tag can prove
        // that this proxy forwarded the request and that `dest` sent it.
        if !tokens::proves_hop(&ctx.shared.branch_key.0, msg, (dest, transport)) {
            return Self::unproven_response(ctx);
        }
        let hidden = |o: &mut Vec<u8>| hide_back.as_ref().is_none_or(|h| sealed_back(h, o));
        let written = forward_response(msg, out);
        match written.map(|()| reprove(out) && unshift_cseq(offset, out) && hidden(out)) {
            Ok(_) if transport == Transport::Udp && out.len() > MAX_DATAGRAM => {
                bump(&ctx.shared.metrics.oversize);
                bump(&ctx.shared.metrics.dropped);
                ctx.events.push(Event::Oversize {
                    what: "forwarded response",
                    dest,
                    len: out.len(),
                });
                Reply::Drop
            }
            Ok(_) => Reply::Send(dest, transport),
            Err(_) => {
                bump(&ctx.shared.metrics.dropped);
                Reply::Drop
            }
        }
    }

    /// Drops a response this server cannot prove it should relay, and
    /// counts it.
    fn unproven_response(ctx: &Ctx) -> Reply {
        bump(&ctx.shared.metrics.responses_unproven);
        bump(&ctx.shared.metrics.dropped);
        Reply::Drop
    }
}

/// What [`tokens::reprove_response`] needs: the route key, the answering
/// hop, its Contact's IP address and the name the caller's requests will
/// name after this proxy.
type Reproof<'a> = ([u8; 32], IpAddr, Option<IpAddr>, Option<&'a str>);

/// The [`Reproof`] for `msg` from `src`, for a provisional (not 100) or
/// 2xx answer that carries a Record-Route.
fn reproof<'a>(ctx: &Ctx, msg: &Message<'a>, src: SocketAddr) -> Option<Reproof<'a>> {
    let code = msg.status()?.as_u16();
    if !(101..300).contains(&code)
        || msg
            .headers_named(sip_core::HeaderName::RecordRoute)
            .next()
            .is_none()
    {
        return None;
    }
    let contact = msg
        .contacts()
        .next()
        .and_then(|c| match c.addr.uri().host()? {
            Host::V4(a) => Some(IpAddr::V4(a)),
            Host::V6(a) => Some(IpAddr::V6(a)),
            Host::Name(_) => None,
        });
    let name = crate::proto::here::downstream_name(ctx, msg);
    Some((ctx.shared.route_key.0, src.ip(), contact, name))
}

/// Takes a dialog's CSeq `offset` off the response in `out` (a response to
/// a caller's request the callee's side numbered higher); `true` unless
/// it could not be rewritten.
fn unshift_cseq(offset: u32, out: &mut Vec<u8>) -> bool {
    if offset == 0 {
        return true;
    }
    let written = std::mem::take(out);
    crate::proto::trunk_auth::rewrite_cseq(&written, -i64::from(offset), out)
}

impl Proxy {
    /// A response from a trunk that hides the inside (our Via carries the
    /// sealed stack): its bytes revealed.
    fn reveal_from_hidden_trunk(ctx: &Ctx, msg: &Message<'_>) -> Option<Vec<u8>> {
        let th = ctx.shared.hider.as_ref()?;
        let mut out = Vec::new();
        crate::proto::topology::reveal_response(msg.as_bytes(), th, &mut out).then_some(out)
    }

    /// For a response to a request that came in from a trunk that hides
    /// the inside (our Via marked): what seals its Call-ID and Contact
    /// once written for the trunk (the shared state, this proxy's address).
    fn hide_back(ctx: &Ctx, msg: &Message<'_>) -> Option<HideBack> {
        ctx.shared.hider.as_ref()?;
        let seal_call_id = crate::proto::topology::is_inbound(msg.top_via().as_str())?;
        Some((
            ctx.shared.clone(),
            ctx.listen_addr(Transport::Udp).to_string(),
            seal_call_id,
        ))
    }
}

/// Seals the Call-ID and Contact of the response in `o` for a trunk.
/// What seals a response back toward a hidden trunk: the shared state,
/// this proxy's address, whether the Call-ID is sealed too.
type HideBack = (std::sync::Arc<crate::proto::shared::Shared>, String, bool);

fn sealed_back(how: &HideBack, o: &mut Vec<u8>) -> bool {
    let Some(th) = how.0.hider.as_ref() else {
        return true;
    };
    let written = std::mem::take(o);
    crate::proto::topology::hide_response(&written, th, &how.1, how.2, o)
}
