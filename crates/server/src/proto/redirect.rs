//! The redirect server (RFC 3261 §8.3.1): a request for a registered user
//! gets 302 with every live contact, highest q first; nothing is proxied.
//! The role keeps no state of its own: it answers from the context's
//! lookup.

use std::fmt::Write as _;
use std::net::SocketAddr;

use sip_core::{Message, StatusCode};

use crate::proto::ctx::Ctx;
use crate::proto::reply::Reply;

/// Answers with the bindings the lookup left in `ctx.bindings`.
pub(super) fn answer(
    ctx: &mut Ctx,
    msg: &Message<'_>,
    src: SocketAddr,
    out: &mut Vec<u8>,
) -> Reply {
    ctx.lines.clear();
    for b in &ctx.bindings {
        let _ = write!(ctx.lines, "Contact: <{}>\r\n", b.contact());
    }
    ctx.respond(msg, StatusCode::MOVED_TEMPORARILY, &[], src, out)
}
