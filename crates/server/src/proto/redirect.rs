//! The redirect server (RFC 3261 §8.3.1): a request for a registered user
//! gets 302 with every live contact, highest q first; nothing is proxied.

use std::fmt::Write as _;
use std::net::SocketAddr;

use sip_core::{Message, StatusCode};

use crate::proto::core::{Core, Reply};

impl Core {
    /// Answers with the bindings the lookup left in `self.bindings`.
    pub(super) fn redirect(
        &mut self,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Reply {
        self.lines.clear();
        for b in &self.bindings {
            let _ = write!(self.lines, "Contact: <{}>\r\n", b.contact);
        }
        self.respond(msg, StatusCode::MOVED_TEMPORARILY, &[], src, out)
    }
}
