//! The Via header field (RFC 3261 §8.1.1.7, §18.2.1, §20.42; RFC 3581 rport).
//!
//! ```text
//! Via: SIP/2.0/UDP host.example.com:5060;branch=z9hG4bK776asdhds;rport
//!      \_____/ \_/ \__________________/ \___________________________/
//!      protocol  transport   sent-by              via-params
//! ```

use std::net::IpAddr;

use crate::error::{ErrorKind, ParseError};
use crate::header::HeaderName;
use crate::params::{parse_params, Params};
use crate::scan::{is_token, offset_in, parse_u64, Cursor};
use crate::uri::{parse_host_prefix, parse_ipv4, parse_port, Host};

/// The RFC 3261 branch magic cookie (§8.1.1.7).
pub const BRANCH_MAGIC_COOKIE: &str = "z9hG4bK";

pub use crate::transport::Transport;

/// One via-parm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Via<'a> {
    raw: &'a str,
    protocol_name: &'a str,
    protocol_version: &'a str,
    transport_raw: &'a str,
    transport: Transport,
    host: Host<'a>,
    port: Option<u16>,
    params: Params<'a>,
    branch: Option<&'a str>,
    received: Option<&'a str>,
    rport: Option<Option<u16>>,
    rport_raw: Option<&'a str>,
    maddr: Option<&'a str>,
    ttl: Option<u8>,
}

impl<'a> Via<'a> {
    /// The via-parm as written.
    pub fn as_str(&self) -> &'a str {
        self.raw
    }
    /// Protocol name, normally `SIP`.
    pub fn protocol_name(&self) -> &'a str {
        self.protocol_name
    }
    /// Protocol version, normally `2.0`.
    pub fn protocol_version(&self) -> &'a str {
        self.protocol_version
    }
    /// Transport as written.
    pub fn transport_str(&self) -> &'a str {
        self.transport_raw
    }
    /// Transport, classified.
    pub fn transport(&self) -> Transport {
        self.transport
    }
    /// sent-by host.
    pub fn host(&self) -> Host<'a> {
        self.host
    }
    /// sent-by port.
    pub fn port(&self) -> Option<u16> {
        self.port
    }
    /// All parameters.
    pub fn params(&self) -> Params<'a> {
        self.params
    }
    /// The branch parameter.
    pub fn branch(&self) -> Option<&'a str> {
        self.branch
    }
    /// Whether the branch starts with the RFC 3261 magic cookie.
    pub fn is_rfc3261_branch(&self) -> bool {
        self.branch
            .is_some_and(|b| b.starts_with(BRANCH_MAGIC_COOKIE))
    }
    /// The received parameter.
    pub fn received(&self) -> Option<&'a str> {
        self.received
    }
    /// The `received` parameter as an address (the parse checked that it
    /// is one; brackets of an IPv6 address are not kept).
    pub fn received_ip(&self) -> Option<IpAddr> {
        ip_literal(self.received?)
    }
    /// `Some(None)` for a bare `rport` (a request to fill it in, RFC 3581).
    pub fn rport(&self) -> Option<Option<u16>> {
        self.rport
    }
    /// The `rport[=n]` text, for in-place edits.
    pub fn rport_raw(&self) -> Option<&'a str> {
        self.rport_raw
    }
    /// The maddr parameter.
    pub fn maddr(&self) -> Option<&'a str> {
        self.maddr
    }
    /// The ttl parameter.
    pub fn ttl(&self) -> Option<u8> {
        self.ttl
    }
}

fn invalid(reason: &'static str, offset: usize) -> ParseError {
    ParseError::new(
        ErrorKind::InvalidHeader {
            name: HeaderName::Via,
            reason,
        },
        offset,
    )
}

/// Parses one via-parm at the cursor.
/// An IP address as written: IPv4 by the URI's one-pass reader (every
/// proxied response carries one or more), anything else by the standard
/// library's.
fn ip_literal(s: &str) -> Option<IpAddr> {
    parse_ipv4(s.as_bytes())
        .map(IpAddr::V4)
        .or_else(|| s.parse().ok())
}

pub(crate) fn parse_via<'a>(c: &mut Cursor<'a>, max_params: usize) -> Result<Via<'a>, ParseError> {
    c.skip_lws();
    let start = c.pos();
    let protocol_name = c
        .token()
        .ok_or_else(|| invalid("missing protocol name", c.offset()))?;
    if !c.eat_sep(b'/') {
        return Err(invalid("expected '/' after protocol name", c.offset()));
    }
    let protocol_version = c
        .token()
        .ok_or_else(|| invalid("missing protocol version", c.offset()))?;
    if !c.eat_sep(b'/') {
        return Err(invalid("expected '/' after protocol version", c.offset()));
    }
    let transport_raw = c
        .token()
        .ok_or_else(|| invalid("missing transport", c.offset()))?;
    if !c.skip_lws() {
        return Err(invalid("expected white space before sent-by", c.offset()));
    }
    let (host, used) = parse_host_prefix(c.rest(), c.offset())
        .map_err(|e| invalid("malformed sent-by host", e.offset))?;
    c.set_pos(c.pos() + used);
    let mut port = None;
    if c.eat_sep(b':') {
        let at = c.offset();
        let digits = c.take_while(|b| b.is_ascii_digit());
        port = Some(parse_port(digits).ok_or_else(|| invalid("malformed sent-by port", at))?);
    }
    let (mut branch, mut received, mut rport, mut rport_raw, mut maddr, mut ttl) =
        (None, None, None, None, None, None);
    let src = c.src();
    let params = parse_params(c, HeaderName::Via, max_params, |name, value, at| {
        if name.eq_ignore_ascii_case("branch") {
            match value {
                Some(v) if v.bytes().all(is_token) => branch = Some(v),
                _ => return Err(invalid("branch must be a token", at)),
            }
        } else if name.eq_ignore_ascii_case("received") {
            // An IPv6 address with or without brackets (RFC 5118 §4.5);
            // kept without them.
            let address = value.map(|v| {
                v.strip_prefix('[')
                    .and_then(|v| v.strip_suffix(']'))
                    .filter(|v| v.parse::<std::net::Ipv6Addr>().is_ok())
                    .unwrap_or(v)
            });
            match address {
                Some(v) if ip_literal(v).is_some() => received = Some(v),
                _ => return Err(invalid("received must be an IP address", at)),
            }
        } else if name.eq_ignore_ascii_case("rport") {
            let n = match value {
                None => None,
                Some(v) => {
                    Some(parse_port(v).ok_or_else(|| invalid("rport must be a port number", at))?)
                }
            };
            rport = Some(n);
            let begin = offset_in(src, name);
            let end = value.map_or(begin + name.len(), |v| offset_in(src, v) + v.len());
            rport_raw = Some(&src[begin..end]);
        } else if name.eq_ignore_ascii_case("maddr") {
            match value {
                Some(v) if !v.is_empty() => maddr = Some(v),
                _ => return Err(invalid("maddr needs a host", at)),
            }
        } else if name.eq_ignore_ascii_case("ttl") {
            match value.and_then(parse_u64).and_then(|t| u8::try_from(t).ok()) {
                Some(t) => ttl = Some(t),
                None => return Err(invalid("ttl must be 0..=255", at)),
            }
        }
        Ok(())
    })?;
    Ok(Via {
        raw: &src[start..c.pos()],
        protocol_name,
        protocol_version,
        transport_raw,
        transport: Transport::from_token(transport_raw),
        host,
        port,
        params,
        branch,
        received,
        rport,
        rport_raw,
        maddr,
        ttl,
    })
}

/// Parses a whole Via field value (one or more via-parms), calling `f` on each.
pub(crate) fn parse_via_list<'a>(
    value: &'a str,
    base: usize,
    max_values: usize,
    mut f: impl FnMut(Via<'a>),
) -> Result<(), ParseError> {
    crate::params::parse_comma_list(
        value,
        base,
        HeaderName::Via,
        max_values,
        |c| parse_via(c, max_values),
        |v| {
            f(v);
            Ok(())
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(s: &str) -> Result<Vec<Via<'_>>, ParseError> {
        let mut v = Vec::new();
        parse_via_list(s, 0, 16, |x| v.push(x)).map(|_| v)
    }

    #[test]
    fn folded_multi_value() {
        let v = all("SIP  / 2.0  / TCP     spindle.example.com   ;\r\n  branch  =   z9hG4bK9ikj8  ,\r\n SIP  /    2.0   / UDP  192.168.255.111   ; branch=\r\n z9hG4bK30239").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].transport(), Transport::Tcp);
        assert_eq!(v[0].host(), Host::Name("spindle.example.com"));
        assert_eq!(v[0].branch(), Some("z9hG4bK9ikj8"));
        assert_eq!(v[1].branch(), Some("z9hG4bK30239"));
        assert!(v[1].is_rfc3261_branch());
    }

    #[test]
    fn rport_received_ttl_ipv6() {
        let v = all("SIP/2.0/UDP [2001:db8::9]:5070;rport;received=192.0.2.1;ttl=16;maddr=239.255.255.1;branch=z9hG4bK1").unwrap();
        let v = &v[0];
        assert_eq!(v.host(), Host::V6("2001:db8::9".parse().unwrap()));
        assert_eq!(v.port(), Some(5070));
        assert_eq!(v.rport(), Some(None));
        assert_eq!(v.rport_raw(), Some("rport"));
        assert_eq!(v.received(), Some("192.0.2.1"));
        assert_eq!(v.received_ip(), Some(IpAddr::from([192, 0, 2, 1])));
        assert_eq!(v.ttl(), Some(16));
        assert_eq!(v.maddr(), Some("239.255.255.1"));
        // RFC 5118 §4.5: an IPv6 received, with and without brackets.
        for text in [
            "SIP/2.0/UDP [2001:db8::9:1];received=[2001:db8::9:255];branch=z9hG4bKas3-111",
            "SIP/2.0/UDP [2001:db8::9:1];received=2001:db8::9:255;branch=z9hG4bKas3-111",
        ] {
            let v = all(text).unwrap();
            assert_eq!(v[0].received(), Some("2001:db8::9:255"), "{text}");
            assert_eq!(
                v[0].received_ip(),
                Some("2001:db8::9:255".parse().unwrap()),
                "{text}"
            );
            assert_eq!(v[0].branch(), Some("z9hG4bKas3-111"), "{text}");
        }
        let v = all("SIP/2.0/UDP h;received=::1;rport=5").unwrap();
        assert_eq!(
            (v[0].received(), v[0].rport()),
            (Some("::1"), Some(Some(5)))
        );
        for bad in [
            "SIP/2.0/UDP h;received=2001:db8::zz",
            "SIP/2.0/UDP h;received=[2001:db8::1",
            "SIP/2.0/UDP h;received=[192.0.2.1]",
            "SIP/2.0/UDP h;received=1:2:3:4:5:6:7:8:9",
        ] {
            assert!(all(bad).is_err(), "{bad}");
        }
        let w = all("SIP/2.0/UDP h;rport=5066").unwrap();
        assert_eq!(w[0].rport(), Some(Some(5066)));
        assert_eq!(w[0].rport_raw(), Some("rport=5066"));
    }

    #[test]
    fn rejects() {
        for bad in [
            "SIP/2.0/UDP 192.0.2.15;;,;,,",
            "SIP/2.0/UDP",
            "SIP/2.0/UDP192.0.2.1",
            "SIP/2.0 192.0.2.1",
            "SIP/2.0/UDP h;ttl=300",
            "SIP/2.0/UDP h;received=host",
            "SIP/2.0/UDP h:99999",
            "SIP/2.0/UDP h extra",
        ] {
            assert!(all(bad).is_err(), "{bad}");
        }
    }
}
