//! Answering a trunk's digest challenge (RFC 3261 §22.2, as Kamailio's
//! `uac_auth` does): when a carrier's gateway answers the proxy's request
//! 401 or 407, the proxy sends it again with the trunk's credentials and
//! a CSeq one higher, inside the same transaction; the caller never sees
//! the challenge. From then on the two sides of the dialog number the
//! caller's requests differently, so the proxy adds the difference to
//! the caller's in-dialog requests and takes it off the responses
//! ([`rewrite_cseq`], the offsets kept with the dialog).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher, RandomState};

use sip_core::auth::Challenge;
use sip_core::digest::{authorization, Answerer};
use sip_core::{HeaderName, Message};

use crate::config_trunks::{Secret, TrunkConfig};

/// The trunks' credentials, by the route name their gateways are
/// reached by (`trunk.NAME`).
#[derive(Debug)]
pub struct Credentials {
    by_route: HashMap<String, (String, Secret)>,
    salt: RandomState,
}

impl Credentials {
    /// The credentials of the trunks that have some; `None` when none does.
    pub fn of(trunks: &[TrunkConfig], salt: RandomState) -> Option<Self> {
        let by_route: HashMap<_, _> = trunks
            .iter()
            .filter_map(|t| {
                let a = t.auth.as_ref()?;
                let route = format!("trunk.{}", t.name.to_ascii_lowercase());
                Some((route, (a.username.clone(), a.password.clone())))
            })
            .collect();
        (!by_route.is_empty()).then_some(Self { by_route, salt })
    }

    /// `forwarded` (a request the gateway reached by `route` challenged
    /// with `challenge`, a 401 or 407) again with its credentials and a
    /// CSeq one higher; `None` when the route has no credentials or the
    /// challenge cannot be answered.
    pub fn answer(
        &self,
        route: &str,
        forwarded: &[u8],
        challenge: &Message<'_>,
    ) -> Option<Vec<u8>> {
        let (user, password) = self.by_route.get(route)?;
        let req = Message::parse(forwarded).ok()?;
        let (asks, answers) = match challenge.status()?.as_u16() {
            401 => (HeaderName::WwwAuthenticate, "Authorization"),
            407 => (HeaderName::ProxyAuthenticate, "Proxy-Authorization"),
            _ => return None,
        };
        let value = challenge.headers_named(asks).next()?.value;
        let c = Challenge::parse(value).ok()?;
        let mut h = self.salt.build_hasher();
        h.write(c.nonce.unwrap_or("").as_bytes());
        h.write(req.call_id().as_bytes());
        let cnonce = format!("{:016x}", h.finish());
        let uri = req.request_uri()?.as_str();
        let method = req.method().as_str();
        let auth = authorization(
            &c,
            &Answerer::new(user, &password.0),
            method,
            uri,
            &cnonce,
            1,
        )?;
        let mut out = Vec::with_capacity(forwarded.len() + auth.len() + 32);
        if !rewrite_cseq(forwarded, 1, &mut out) {
            return None;
        }
        let blank = out.windows(4).position(|w| w == b"\r\n\r\n")? + 2;
        let line = format!("{answers}: {auth}\r\n");
        out.splice(blank..blank, line.bytes());
        Some(out)
    }
}

/// `msg` (bytes) with its CSeq number moved by `delta`, into `out`;
/// `false` when it has no CSeq or the number would leave its range.
pub fn rewrite_cseq(msg: &[u8], delta: i64, out: &mut Vec<u8>) -> bool {
    let Ok(m) = Message::parse(msg) else {
        return false;
    };
    let Some(h) = m.headers_named(HeaderName::CSeq).next() else {
        return false;
    };
    let seq = m.cseq().seq;
    let Ok(new) = u32::try_from(i64::from(seq) + delta) else {
        return false;
    };
    let at = h.value.as_ptr() as usize - msg.as_ptr() as usize;
    let digits = h.value.bytes().take_while(u8::is_ascii_digit).count();
    out.clear();
    out.extend_from_slice(&msg[..at]);
    out.extend_from_slice(new.to_string().as_bytes());
    out.extend_from_slice(&msg[at + digits..]);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "BYE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP p;branch=z9hG4bKx\r\n\
        From: <sip:a@b>;tag=1\r\nTo: <sip:c@d>;tag=2\r\nCall-ID: c\r\n";

    #[test]
    fn cseq_moves_both_ways_and_nothing_else_changes() {
        let m = format!("{HEAD}CSeq: 9 BYE\r\nContent-Length: 0\r\n\r\n");
        let mut out = Vec::new();
        assert!(rewrite_cseq(m.as_bytes(), 1, &mut out));
        let up = format!("{HEAD}CSeq: 10 BYE\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(out, up.as_bytes());
        let again = out.clone();
        assert!(rewrite_cseq(&again, -1, &mut out));
        assert_eq!(out, m.as_bytes());
        let zero = format!("{HEAD}CSeq: 0 BYE\r\nContent-Length: 0\r\n\r\n");
        assert!(!rewrite_cseq(zero.as_bytes(), -1, &mut out));
    }

    #[test]
    fn a_407_is_answered_with_proxy_authorization_that_verifies_and_the_next_cseq() {
        use crate::config_trunks::{Algorithm as Spread, TrunkAuth};
        use sip_core::digest::{ha1, verify, Algorithm, Qop, ResponseInput};
        let trunk = TrunkConfig {
            name: "Carrier".into(),
            gateways: Vec::new(),
            algorithm: Spread::Weighted,
            prefixes: Vec::new(),
            domains: Vec::new(),
            default: false,
            transport: sip_core::Transport::Udp,
            probe_every: None,
            down_after: 2,
            up_after: 2,
            auth: Some(TrunkAuth {
                username: "u".into(),
                password_file: "/dev/null".into(),
                password: Secret("pw".into()),
            }),
            hide_topology: false,
            resolve_every: None,
        };
        let creds = Credentials::of(&[trunk], RandomState::new()).unwrap();
        let invite = b"INVITE sip:+1215@gw SIP/2.0\r\nVia: SIP/2.0/UDP p;branch=z9hG4bKx\r\n\
            From: <sip:a@b>;tag=1\r\nTo: <sip:+1215@gw>\r\nCall-ID: c\r\nCSeq: 7 INVITE\r\n\
            Content-Length: 0\r\n\r\n";
        let challenge = b"SIP/2.0 407 Proxy Authentication Required\r\nVia: SIP/2.0/UDP p;branch=z9hG4bKx\r\n\
            From: <sip:a@b>;tag=1\r\nTo: <sip:+1215@gw>;tag=g\r\nCall-ID: c\r\nCSeq: 7 INVITE\r\n\
            Proxy-Authenticate: Digest realm=\"r\", nonce=\"n1\", qop=\"auth\"\r\nContent-Length: 0\r\n\r\n";
        let c = Message::parse(challenge).unwrap();
        assert_eq!(
            creds.answer("trunk.other", invite, &c),
            None,
            "another route"
        );
        let again = creds.answer("trunk.carrier", invite, &c).unwrap();
        let m = Message::parse(&again).unwrap();
        assert_eq!(m.cseq().seq, 8);
        let h = m
            .headers_named(HeaderName::ProxyAuthorization)
            .next()
            .unwrap();
        let got = sip_core::auth::Credentials::parse(h.value).unwrap();
        let input = ResponseInput {
            algorithm: Algorithm::Md5,
            ha1: &ha1(Algorithm::Md5, "u", "r", "pw"),
            nonce: "n1",
            cnonce: got.cnonce.unwrap(),
            nc: got.nc.unwrap(),
            qop: Some(Qop::Auth),
            method: "INVITE",
            uri: "sip:+1215@gw",
            body: b"",
        };
        assert!(verify(&input, got.response.unwrap()));
    }
}
