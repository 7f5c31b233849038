//! The URI helpers the roles share: addresses-of-record, pseudonyms
//! revealed, option tags, Path and literal-address hops.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use sip_core::uri::Host;
use sip_core::{HeaderName, Message, Uri};

use crate::proto::privacy::{Privacy, Reveal};

/// The address-of-record of a URI: `sip:user@host`, host lowercased.
#[inline]
pub fn aor(uri: &Uri<'_>) -> Option<String> {
    Some(aor_of(uri.user()?, uri.host()?))
}

/// `sip:user@host`, host lowercased.
#[inline]
pub(super) fn aor_of(user: &str, host: Host<'_>) -> String {
    let mut s = String::with_capacity(8 + user.len() + 32);
    push_aor(&mut s, user, host);
    s
}

/// Writes [`aor_of`] into `s`, cleared first.
#[inline]
pub(super) fn push_aor(s: &mut String, user: &str, host: Host<'_>) {
    s.clear();
    s.push_str("sip:");
    s.push_str(user);
    s.push('@');
    match host {
        Host::Name(n) => {
            for c in n.chars() {
                s.push(c.to_ascii_lowercase());
            }
        }
        // Without the formatting machinery: this runs for every REGISTER.
        Host::V4(a) => sip_core::writer::push_ip(s, a.into()),
        other => {
            let _ = write!(s, "{other}");
        }
    }
}

/// What a user part at this server stands for: itself, or the ID inside
/// a pseudonym encrypted for us; `None` for a pseudonym that does not
/// open, or was not opened because `may_decrypt` said its source had
/// spent its decryptions (see [`Privacy::reveal`]).
#[inline]
pub(super) fn reveal<'a>(
    privacy: Option<&Privacy>,
    user: &'a str,
    now: u64,
    may_decrypt: impl FnOnce() -> bool,
) -> Option<Cow<'a, str>> {
    let Some(p) = privacy else {
        return Some(Cow::Borrowed(user));
    };
    match p.reveal(user, now, may_decrypt) {
        Reveal::Plain => Some(Cow::Borrowed(user)),
        Reveal::Id(id) => Some(Cow::Owned(id)),
        Reveal::Refused | Reveal::Limited => None,
    }
}

/// [`reveal`] for a request of the call `call_id`: a PrivaSIP-3 ticket
/// that opened is bound to that call and refused (`None`) with any other
/// ([`Privacy::ticket_call`]). Only a ticket that opened is recorded, so
/// ticket-shaped garbage fills nothing of the single-use table.
pub(super) fn reveal_for_call<'a>(
    privacy: Option<&Privacy>,
    user: &'a str,
    (call_id, now): (&str, u64),
    may_decrypt: impl FnOnce() -> bool,
) -> Option<Cow<'a, str>> {
    let id = reveal(privacy, user, now, may_decrypt)?;
    let single_use =
        matches!(id, Cow::Borrowed(_)) || privacy.is_none_or(|p| p.ticket_call(user, call_id, now));
    single_use.then_some(id)
}

/// Whether a header such as Supported or Require lists `tag`.
#[inline]
pub(super) fn has_option_tag(msg: &Message<'_>, name: HeaderName, tag: &str) -> bool {
    msg.headers_named(name)
        .flat_map(|h| h.value.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(tag))
}

/// The first URI of a stored Path (`<sip:edge;lr>, <…>`).
#[inline]
pub(super) fn first_path_uri(path: &str) -> Option<Uri<'_>> {
    let start = path.find('<')? + 1;
    let end = start + path[start..].find('>')?;
    Uri::parse(&path[start..end], sip_core::UriContext::Header)
        .ok()
        .filter(Uri::is_sip)
}

/// The transport address a URI or Via points at (IP literals and
/// `localhost` only: the hot path does no DNS).
#[inline]
pub(super) fn resolve(host: Host<'_>, port: Option<u16>) -> Option<SocketAddr> {
    let ip = match host {
        Host::V4(a) => IpAddr::V4(a),
        Host::V6(a) => IpAddr::V6(a),
        Host::Name(n) if n.eq_ignore_ascii_case("localhost") => IpAddr::from([127, 0, 0, 1]),
        Host::Name(_) => return None,
    };
    Some(SocketAddr::new(ip, port.unwrap_or(5060)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_aor_names_its_host_in_lower_case_and_its_address_in_full() {
        let v4 = |a: [u8; 4]| aor_of("alice", Host::V4(a.into()));
        assert_eq!(v4([192, 0, 2, 4]), "sip:alice@192.0.2.4");
        assert_eq!(v4([0, 10, 100, 255]), "sip:alice@0.10.100.255");
        assert_eq!(
            aor_of("bob", Host::Name("Biloxi.Example.COM")),
            "sip:bob@biloxi.example.com"
        );
        assert_eq!(
            aor_of("carol", Host::V6("2001:db8::1".parse().expect("literal"))),
            "sip:carol@[2001:db8::1]"
        );
    }
}
