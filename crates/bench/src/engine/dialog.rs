//! What a call keeps from its responses: the dialog's route set and
//! remote target from a 2xx to its INVITE, and a digest challenge to
//! answer.

use sip_core::auth::Challenge;
use sip_core::digest::Algorithm;
use sip_core::{HeaderName, Message};

use super::Call;

/// A digest challenge kept to answer.
#[derive(Debug, Clone)]
pub(super) struct Captured {
    pub(super) proxy: bool,
    pub(super) algorithm: Algorithm,
    pub(super) realm: String,
    pub(super) nonce: String,
    pub(super) opaque: Option<String>,
    pub(super) qop: bool,
}

/// Keeps the route set (Record-Route reversed) and remote target (the
/// Contact) of a 2xx to an INVITE, for the in-dialog ACK and BYE.
pub(super) fn dialog(msg: &Message<'_>, call: &mut Call) {
    call.route.clear();
    let set = ua::sip::record_routes(msg);
    if !set.is_empty() {
        call.route.push_str("Route: ");
        call.route
            .push_str(&set.into_iter().rev().collect::<Vec<_>>().join(", "));
        call.route.push_str("\r\n");
    }
    call.target.clear();
    if let Some(c) = msg.contacts().next() {
        call.target.push_str(c.addr.uri().as_str());
    }
}

pub(super) fn capture(msg: &Message<'_>) -> Option<Captured> {
    let proxy = msg.status().map(|s| s.as_u16()) == Some(407);
    let name = if proxy {
        HeaderName::ProxyAuthenticate
    } else {
        HeaderName::WwwAuthenticate
    };
    // The first offer with an algorithm we can answer (RFC 8760 §2.4).
    msg.headers_named(name).find_map(|h| {
        let c = Challenge::parse(h.value).ok()?;
        let algorithm = Algorithm::from_token(c.algorithm.unwrap_or("MD5"))?;
        Some(Captured {
            proxy,
            algorithm,
            realm: c.realm?.to_owned(),
            nonce: c.nonce?.to_owned(),
            opaque: c.opaque.map(str::to_owned),
            qop: c.offers_qop("auth"),
        })
    })
}
