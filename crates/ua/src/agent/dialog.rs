//! Calls: the dialog state of RFC 3261 §12 (Call-ID, tags, remote target,
//! route set) and, for a call we answer, its INVITE server transaction.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use sip_core::transaction::{Answered, ServerInvite};
use sip_core::{HeaderName, Message, Method, Uri, UriContext};

use super::{Transmit, Tx};
use crate::sip::{self, Request};

/// The INVITE of a call we answer, and what we answered.
#[derive(Debug)]
pub(super) struct Answering {
    pub(super) machine: ServerInvite,
    /// The INVITE as it came.
    pub(super) request: Vec<u8>,
    /// Its top Via branch.
    pub(super) branch: String,
    /// Where responses go: where it came from (RFC 3581).
    pub(super) reply_to: SocketAddr,
    /// The last response, sent again for retransmissions.
    pub(super) last: Vec<u8>,
    /// A final response went.
    pub(super) answered: bool,
    /// Our 2xx, again until its ACK (RFC 3261 §13.3.1.4).
    pub(super) resend: Option<Answered>,
}

/// Which side began the call.
#[derive(Debug)]
pub(super) enum Side {
    /// Ours: the INVITE, and the ACK for its 2xx once sent.
    Caller { invite: Tx, ack: Option<Transmit> },
    /// Theirs.
    Callee(Box<Answering>),
}

/// One call.
#[derive(Debug)]
pub(super) struct Dialog {
    pub(super) call_id: String,
    /// Our name-addr and tag.
    pub(super) local: (String, String),
    /// Theirs, and their tag once known.
    pub(super) remote: (String, Option<String>),
    /// Where in-dialog requests are addressed (their Contact).
    pub(super) target: String,
    /// Route set, in the order requests carry it.
    pub(super) routes: Vec<String>,
    /// Where in-dialog requests go when neither the route set nor the
    /// target names an IP address.
    pub(super) fallback: SocketAddr,
    pub(super) side: Side,
}

impl Dialog {
    /// The last response we sent for a call we answer.
    #[cfg(test)]
    pub(super) fn side_last(&self) -> Option<Vec<u8>> {
        match &self.side {
            Side::Callee(a) => Some(a.last.clone()),
            Side::Caller { .. } => None,
        }
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        match &self.side {
            Side::Caller { .. } => None,
            Side::Callee(a) => [
                a.machine.next_deadline(),
                a.resend.as_ref().and_then(Answered::next_deadline),
            ]
            .into_iter()
            .flatten()
            .min(),
        }
    }

    /// Where the next in-dialog request goes: the first route when it is
    /// a loose router, else the remote target (RFC 3261 §12.2.1.1), when
    /// that names an IP address; else the fallback.
    pub(super) fn next_hop(&self) -> SocketAddr {
        let first = match self.routes.first() {
            Some(r) if r.contains(";lr") => sip::addr_uri(r),
            _ => self.target.as_str(),
        };
        ip_of(first).unwrap_or(self.fallback)
    }

    /// An in-dialog request (BYE, the ACK for a 2xx) with our `via`
    /// sent-by and a new `branch`.
    pub(super) fn request(
        &self,
        via: String,
        branch: String,
        method: Method<'static>,
        cseq: u32,
    ) -> Request {
        Request {
            method,
            uri: self.target.clone(),
            via,
            branch,
            from: self.local.0.clone(),
            from_tag: self.local.1.clone(),
            to: self.remote.0.clone(),
            to_tag: self.remote.1.clone(),
            call_id: self.call_id.clone(),
            cseq,
            contact: None,
            routes: self.routes.clone(),
            extra: Vec::new(),
            body: None,
        }
    }
}

/// The socket address a SIP URI names by IP literal (default port 5060,
/// 5061 for `sips:`); `None` for a domain name.
pub(super) fn ip_of(uri: &str) -> Option<SocketAddr> {
    let u = Uri::parse(uri, UriContext::Header).ok()?;
    let ip: IpAddr = match u.host()? {
        sip_core::uri::Host::V4(a) => a.into(),
        sip_core::uri::Host::V6(a) => a.into(),
        sip_core::uri::Host::Name(_) => return None,
    };
    let default = if u.scheme() == sip_core::uri::Scheme::Sips {
        5061
    } else {
        5060
    };
    Some(SocketAddr::new(ip, u.port().unwrap_or(default)))
}

/// A From or To value without its `tag` parameter.
pub(super) fn untagged(value: &str) -> String {
    let split = value
        .rfind('>')
        .map_or_else(|| value.find(';').unwrap_or(value.len()), |i| i + 1);
    let (addr, params) = value.split_at(split);
    let kept: String = params
        .split(';')
        .filter(|p| !p.is_empty())
        .filter(|p| {
            !p.trim()
                .split('=')
                .next()
                .is_some_and(|n| n.trim().eq_ignore_ascii_case("tag"))
        })
        .map(|p| format!(";{p}"))
        .collect();
    format!("{}{kept}", addr.trim())
}

/// The dialog a request to us opens (RFC 3261 §12.1.1): their From and
/// Contact, the Record-Route set in order.
pub(super) fn of_invite(m: &Message<'_>, tag: String, from: SocketAddr, side: Side) -> Dialog {
    let target = m
        .contacts()
        .next()
        .map(|c| c.addr.uri().as_str().to_owned())
        .unwrap_or_else(|| sip::addr_uri(m.from().as_str()).to_owned());
    Dialog {
        call_id: m.call_id().to_owned(),
        local: (untagged(m.to().as_str()), tag),
        remote: (
            untagged(m.from().as_str()),
            m.from().tag().map(str::to_owned),
        ),
        target,
        routes: sip::record_routes(m),
        fallback: from,
        side,
    }
}

/// The route set and target a 2xx to our INVITE sets (RFC 3261 §12.1.2):
/// Record-Route reversed, the Contact.
pub(super) fn confirm(d: &mut Dialog, ok: &Message<'_>) {
    d.remote.1 = ok.to().tag().map(str::to_owned);
    if let Some(c) = ok.contacts().next() {
        d.target = c.addr.uri().as_str().to_owned();
    }
    let mut routes = sip::record_routes(ok);
    routes.reverse();
    d.routes = routes;
}

/// The ACK or CANCEL in the transaction of `req` (RFC 3261 §9.1,
/// §17.1.1.3): its Request-URI, Via, From, Call-ID, CSeq number and
/// Route set; `to_tag` from the response it acknowledges.
pub(super) fn same_transaction(
    req: &Request,
    method: Method<'static>,
    to_tag: Option<&str>,
) -> Request {
    Request {
        method,
        to_tag: to_tag.map(str::to_owned).or_else(|| req.to_tag.clone()),
        contact: None,
        extra: Vec::new(),
        body: None,
        ..req.clone()
    }
}

/// Whether a message's To carries a tag (an in-dialog request).
pub(super) fn in_dialog(m: &Message<'_>) -> bool {
    m.header(HeaderName::To).is_some() && m.to().tag().is_some()
}
