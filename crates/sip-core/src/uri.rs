//! SIP, SIPS, tel and other URIs (RFC 3261 §19.1, §25.1; RFC 3966).
//!
//! ```text
//! sip:user:password@host:port;uri-parameters?headers
//! \_/ \__________________/ \_______/ \____________/ \_____/
//! scheme     userinfo      hostport   parameters   headers
//! ```
//!
//! The parser borrows from the input; escapes are validated but left in
//! place, so comparisons that need unescaping do it on demand.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::error::{ErrorKind, ParseError, UriError};
use crate::scan::{
    check_escaped, find_byte, is_param_char, is_password_char, is_unreserved, is_user_char,
};

/// Where a URI appears; Request-URIs may not carry URI headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UriContext {
    /// The Request-URI of a request line.
    RequestUri,
    /// Inside a header field (name-addr or addr-spec).
    Header,
}

/// URI scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `sip:`
    Sip,
    /// `sips:`
    Sips,
    /// `tel:` (RFC 3966)
    Tel,
    /// Any other scheme, kept opaque.
    Other,
}

/// The host part of a SIP URI or Via sent-by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Host<'a> {
    /// A domain name, as written.
    Name(&'a str),
    /// An IPv4 address.
    V4(Ipv4Addr),
    /// An IPv6 address (written as a `[reference]`).
    V6(Ipv6Addr),
}

impl fmt::Display for Host<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::V4(a) => write!(f, "{a}"),
            Host::V6(a) => write!(f, "[{a}]"),
        }
    }
}

/// A parsed URI borrowing from the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uri<'a> {
    raw: &'a str,
    scheme: Scheme,
    user: Option<&'a str>,
    password: Option<&'a str>,
    host: Option<Host<'a>>,
    port: Option<u16>,
    params: &'a str,
    headers: Option<&'a str>,
}

impl<'a> Uri<'a> {
    /// Parses `s` as a URI appearing in `ctx`.
    pub fn parse(s: &'a str, ctx: UriContext) -> Result<Self, ParseError> {
        parse_uri(s, 0, ctx, usize::MAX)
    }

    /// The URI exactly as written.
    pub fn as_str(&self) -> &'a str {
        self.raw
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// `sip:` or `sips:`.
    pub fn is_sip(&self) -> bool {
        matches!(self.scheme, Scheme::Sip | Scheme::Sips)
    }

    /// The user part (escapes kept); for `tel:` the subscriber number.
    pub fn user(&self) -> Option<&'a str> {
        self.user
    }

    /// The password, if the URI carries one (discouraged, RFC 3261 §19.1.1).
    pub fn password(&self) -> Option<&'a str> {
        self.password
    }

    /// The host (SIP and SIPS URIs only).
    pub fn host(&self) -> Option<Host<'a>> {
        self.host
    }

    /// The explicit port, if any.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// The raw parameter list without the leading `;` (empty when none).
    pub fn params_raw(&self) -> &'a str {
        self.params
    }

    /// Iterates over `name[=value]` URI parameters.
    pub fn params(&self) -> UriParams<'a> {
        UriParams { rest: self.params }
    }

    /// Looks a parameter up by case-insensitive name: `Some(None)` for a
    /// parameter without a value such as `lr`.
    pub fn param(&self, name: &str) -> Option<Option<&'a str>> {
        self.params()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// The raw URI headers after `?`, if any.
    pub fn headers(&self) -> Option<&'a str> {
        self.headers
    }
}

impl fmt::Display for Uri<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.raw)
    }
}

/// Iterator over URI parameters.
#[derive(Debug, Clone)]
pub struct UriParams<'a> {
    rest: &'a str,
}

impl<'a> Iterator for UriParams<'a> {
    type Item = (&'a str, Option<&'a str>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let (item, rest) = match find_byte(self.rest, b';') {
            Some(i) => (&self.rest[..i], &self.rest[i + 1..]),
            None => (self.rest, ""),
        };
        self.rest = rest;
        Some(match find_byte(item, b'=') {
            Some(i) => (&item[..i], Some(&item[i + 1..])),
            None => (item, None),
        })
    }
}

fn uri_err(e: UriError, offset: usize) -> ParseError {
    ParseError::new(ErrorKind::Uri(e), offset)
}

fn is_header_char(c: u8) -> bool {
    is_unreserved(c) || matches!(c, b'[' | b']' | b'/' | b'?' | b':' | b'+' | b'$')
}

fn is_uric(c: u8) -> bool {
    is_unreserved(c)
        || matches!(
            c,
            b';' | b'/' | b'?' | b':' | b'@' | b'&' | b'=' | b'+' | b'$' | b',' | b'[' | b']'
        )
}

/// Parses a URI; `base` is its offset in the message for error reporting.
pub(crate) fn parse_uri(
    s: &str,
    base: usize,
    ctx: UriContext,
    max_params: usize,
) -> Result<Uri<'_>, ParseError> {
    let b = s.as_bytes();
    if b.is_empty() {
        return Err(uri_err(UriError::Empty, base));
    }
    if b.len() >= 4 && b[..4].eq_ignore_ascii_case(b"sip:") {
        // The usual scheme, without the scan for its end.
        return parse_sip(s, Scheme::Sip, &s[4..], base + 4, ctx, max_params);
    }
    if !b[0].is_ascii_alphabetic() {
        return Err(uri_err(UriError::Scheme, base));
    }
    let mut i = 1;
    while i < b.len() && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'+' | b'-' | b'.')) {
        i += 1;
    }
    if i >= b.len() || b[i] != b':' {
        return Err(uri_err(UriError::Scheme, base + i));
    }
    let scheme_str = &s[..i];
    let rest = &s[i + 1..];
    let rest_base = base + i + 1;
    let scheme = if scheme_str.eq_ignore_ascii_case("sip") {
        Scheme::Sip
    } else if scheme_str.eq_ignore_ascii_case("sips") {
        Scheme::Sips
    } else if scheme_str.eq_ignore_ascii_case("tel") {
        Scheme::Tel
    } else {
        Scheme::Other
    };
    match scheme {
        Scheme::Sip | Scheme::Sips => parse_sip(s, scheme, rest, rest_base, ctx, max_params),
        Scheme::Tel | Scheme::Other => {
            if rest.is_empty() {
                return Err(uri_err(UriError::Opaque, rest_base));
            }
            check_escaped(rest, is_uric).map_err(|o| uri_err(UriError::Opaque, rest_base + o))?;
            let (user, params) = if scheme == Scheme::Tel {
                match find_byte(rest, b';') {
                    Some(p) => (Some(&rest[..p]), &rest[p + 1..]),
                    None => (Some(rest), ""),
                }
            } else {
                (None, "")
            };
            Ok(Uri {
                raw: s,
                scheme,
                user,
                password: None,
                host: None,
                port: None,
                params,
                headers: None,
            })
        }
    }
}

/// Validates `%HEXHEX` at `i`; returns the index after it.
#[inline]
fn escape_at(b: &[u8], i: usize) -> Option<usize> {
    (i + 2 < b.len() && crate::scan::is_hex(b[i + 1]) && crate::scan::is_hex(b[i + 2]))
        .then_some(i + 3)
}

/// Parses an IPv4 dotted quad without allocation; `None` if not one:
/// four decimal octets of one to three digits, none above 255 and none
/// with a leading zero (as `Ipv4Addr`'s own parser). One pass, a few
/// instructions a byte: every Via and most Contacts carry one.
pub(crate) fn parse_ipv4(b: &[u8]) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let (mut n, mut v, mut digits) = (0, 0u16, 0);
    for &c in b {
        if c == b'.' {
            if digits == 0 || n == 3 {
                return None;
            }
            octets[n] = v as u8;
            (n, v, digits) = (n + 1, 0, 0);
            continue;
        }
        let d = c.wrapping_sub(b'0');
        if d > 9 || digits == 3 || (digits == 1 && v == 0) {
            return None;
        }
        v = v * 10 + u16::from(d);
        digits += 1;
        if v > 255 {
            return None;
        }
    }
    if digits == 0 || n != 3 {
        return None;
    }
    octets[3] = v as u8;
    Some(Ipv4Addr::from(octets))
}

/// Bytes of a host name (alphanum, "-", ".", "_") and, among them, those
/// an IPv4 address is written with (digits and "."), as flags.
const HOST_NAME: u8 = 1;
const HOST_V4: u8 = 2;

static HOST_BYTES: [u8; 256] = host_bytes();

const fn host_bytes() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let c = i as u8;
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_') {
            t[i] |= HOST_NAME;
        }
        if c.is_ascii_digit() || c == b'.' {
            t[i] |= HOST_V4;
        }
        i += 1;
    }
    t
}

/// One pass over `rest` (everything after `sip:`), byte by byte.
fn parse_sip<'a>(
    raw: &'a str,
    scheme: Scheme,
    rest: &'a str,
    base: usize,
    ctx: UriContext,
    max_params: usize,
) -> Result<Uri<'a>, ParseError> {
    let b = rest.as_bytes();
    let err = |e, at: usize| uri_err(e, base + at);
    let (user, password, i) = userinfo(rest).map_err(|(e, at)| err(e, at))?;
    let (host, i) = host_at(rest, i).map_err(|(e, at)| err(e, at))?;
    let (port, i) = port_at(b, i).map_err(|(e, at)| err(e, at))?;
    let (params, i) = params_at(rest, i, base, max_params)?;
    let (headers, i) = headers_at(rest, i, ctx).map_err(|(e, at)| err(e, at))?;
    if i != b.len() {
        return Err(err(UriError::Host, i));
    }
    Ok(Uri {
        raw,
        scheme,
        user,
        password,
        host: Some(host),
        port,
        params,
        headers,
    })
}

/// What a URI part failed on, and where (from the start of `rest`).
type PartError = (UriError, usize);

/// `userinfo = user [ ":" password ] "@"`, if `rest` has one: the user,
/// the password, and where the host starts.
#[inline]
#[allow(clippy::type_complexity)]
fn userinfo(rest: &str) -> Result<(Option<&str>, Option<&str>, usize), PartError> {
    let b = rest.as_bytes();
    let Some(at) = memchr::memchr(b'@', b) else {
        return Ok((None, None, 0));
    };
    let user_end = escaped_run(&b[..at], 0, is_user_char, UriError::User)?;
    let password = if user_end < at {
        if b[user_end] != b':' {
            return Err((UriError::User, user_end));
        }
        let end = escaped_run(&b[..at], user_end + 1, is_password_char, UriError::Password)?;
        if end < at {
            return Err((UriError::Password, end));
        }
        Some(&rest[user_end + 1..at])
    } else {
        None
    };
    if user_end == 0 {
        return Err((UriError::User, 0));
    }
    Ok((Some(&rest[..user_end]), password, at + 1))
}

/// Where the run of bytes `ok` takes (and `%HEXHEX` escapes) that starts
/// at `i` in `b` ends; a broken escape is `part`'s error.
#[inline]
fn escaped_run(
    b: &[u8],
    mut i: usize,
    ok: fn(u8) -> bool,
    part: UriError,
) -> Result<usize, PartError> {
    while let Some(&c) = b.get(i) {
        if ok(c) {
            i += 1;
        } else if c == b'%' {
            i = escape_at(b, i).ok_or((part, i))?;
        } else {
            break;
        }
    }
    Ok(i)
}

/// The host at `i`: an IPv6 reference, an IPv4 address or a name.
#[inline]
fn host_at(rest: &str, mut i: usize) -> Result<(Host<'_>, usize), PartError> {
    let b = rest.as_bytes();
    if b.get(i) == Some(&b'[') {
        let close = memchr::memchr(b']', &b[i..])
            .map(|c| i + c)
            .ok_or((UriError::Host, i))?;
        let addr: Ipv6Addr = rest[i + 1..close]
            .parse()
            .map_err(|_| (UriError::Host, i))?;
        return Ok((Host::V6(addr), close + 1));
    }
    let start = i;
    // One table lookup a byte: whether it may be in a name, and whether
    // every byte so far may be in an address.
    let mut seen = HOST_NAME | HOST_V4;
    while let Some(&c) = b.get(i) {
        let class = HOST_BYTES[usize::from(c)];
        if class == 0 {
            break;
        }
        seen &= class;
        i += 1;
    }
    if i < b.len() && !matches!(b[i], b':' | b';' | b'?') {
        return Err((UriError::Host, i));
    }
    if i == start || b[start] == b'.' || b[start] == b'-' {
        return Err((UriError::Host, start));
    }
    let numeric = seen & HOST_V4 != 0;
    let host = match numeric.then(|| parse_ipv4(&b[start..i])).flatten() {
        Some(a) => Host::V4(a),
        None => Host::Name(&rest[start..i]),
    };
    Ok((host, i))
}

/// `":" port` at `i`, if there.
#[inline]
fn port_at(b: &[u8], mut i: usize) -> Result<(Option<u16>, usize), PartError> {
    if b.get(i) != Some(&b':') {
        return Ok((None, i));
    }
    let start = i + 1;
    i = start;
    let mut v: u32 = 0;
    while i < b.len() && b[i].is_ascii_digit() && i - start < 5 {
        v = v * 10 + u32::from(b[i] - b'0');
        i += 1;
    }
    if i == start || v > 65_535 || (i < b.len() && b[i].is_ascii_digit()) {
        return Err((UriError::Port, start));
    }
    Ok((Some(v as u16), i))
}

/// `uri-parameters = *( ";" pname [ "=" pvalue ] )` at `i`, at most
/// `max_params` of them.
#[inline]
fn params_at(
    rest: &str,
    mut i: usize,
    base: usize,
    max_params: usize,
) -> Result<(&str, usize), ParseError> {
    let b = rest.as_bytes();
    if b.get(i) != Some(&b';') {
        return Ok(("", i));
    }
    let err = |e, at: usize| uri_err(e, base + at);
    let start = i + 1;
    let mut count = 0;
    loop {
        // at the start of a parameter
        i += 1;
        count += 1;
        if count > max_params {
            return Err(ParseError::new(
                ErrorKind::TooManyValues { limit: max_params },
                base + i,
            ));
        }
        let name_start = i;
        let mut value_start = None;
        while i < b.len() && !matches!(b[i], b';' | b'?') {
            let c = b[i];
            if c == b'=' && value_start.is_none() {
                value_start = Some(i + 1);
                i += 1;
            } else if c == b'%' {
                i = escape_at(b, i).ok_or_else(|| err(UriError::Param, i))?;
            } else if is_param_char(c) {
                i += 1;
            } else {
                return Err(err(UriError::Param, i));
            }
        }
        let name_end = value_start.map_or(i, |v| v - 1);
        if name_end == name_start || value_start == Some(i) {
            return Err(err(UriError::Param, name_start));
        }
        if b.get(i) != Some(&b';') {
            return Ok((&rest[start..i], i));
        }
    }
}

/// `headers = "?" header *( "&" header )`, `header = hname "=" hvalue`, at
/// `i` (never in a Request-URI).
#[inline]
fn headers_at(
    rest: &str,
    mut i: usize,
    ctx: UriContext,
) -> Result<(Option<&str>, usize), PartError> {
    let b = rest.as_bytes();
    if b.get(i) != Some(&b'?') {
        return Ok((None, i));
    }
    if ctx == UriContext::RequestUri {
        return Err((UriError::HeadersInRequestUri, i));
    }
    let start = i + 1;
    loop {
        i += 1;
        let name_start = i;
        let mut eq = None;
        while i < b.len() && b[i] != b'&' {
            let c = b[i];
            if c == b'=' && eq.is_none() {
                eq = Some(i);
                i += 1;
            } else if c == b'%' {
                i = escape_at(b, i).ok_or((UriError::Headers, i))?;
            } else if is_header_char(c) {
                i += 1;
            } else {
                return Err((UriError::Headers, i));
            }
        }
        if eq.is_none_or(|e| e == name_start) {
            return Err((UriError::Headers, name_start));
        }
        if i >= b.len() {
            return Ok((Some(&rest[start..]), i));
        }
    }
}

/// Parses a decimal port.
pub(crate) fn parse_port(s: &str) -> Option<u16> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses `hostname / IPv4address` (IPv6 references are handled by callers
/// because they need the bracket position).
pub(crate) fn parse_host(s: &str, base: usize) -> Result<Host<'_>, ParseError> {
    let b = s.as_bytes();
    if b.is_empty() || b[0] == b'.' || b[0] == b'-' {
        return Err(uri_err(UriError::Host, base));
    }
    let mut seen = HOST_NAME | HOST_V4;
    for (k, &c) in b.iter().enumerate() {
        let class = HOST_BYTES[usize::from(c)];
        if class == 0 {
            return Err(uri_err(UriError::Host, base + k));
        }
        seen &= class;
    }
    match (seen & HOST_V4 != 0).then(|| parse_ipv4(b)).flatten() {
        Some(a) => Ok(Host::V4(a)),
        None => Ok(Host::Name(s)),
    }
}

/// Parses `host` that may be an IPv6 reference, returning the host and
/// the number of bytes consumed.
pub(crate) fn parse_host_prefix(s: &str, base: usize) -> Result<(Host<'_>, usize), ParseError> {
    let b = s.as_bytes();
    if b.first() == Some(&b'[') {
        let close = memchr::memchr(b']', b).ok_or_else(|| uri_err(UriError::Host, base))?;
        let addr: Ipv6Addr = s[1..close]
            .parse()
            .map_err(|_| uri_err(UriError::Host, base))?;
        return Ok((Host::V6(addr), close + 1));
    }
    let end = b
        .iter()
        .position(|&c| HOST_BYTES[usize::from(c)] == 0)
        .unwrap_or(b.len());
    Ok((parse_host(&s[..end], base)?, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &str, ctx: UriContext) -> UriError {
        match Uri::parse(s, ctx).unwrap_err().kind {
            ErrorKind::Uri(e) => e,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn full_sip_uri() {
        let u = Uri::parse(
            "sips:alice:secret@[2001:db8::1]:5061;transport=tcp;lr?subject=hi&x=",
            UriContext::Header,
        )
        .unwrap();
        assert_eq!(u.scheme(), Scheme::Sips);
        assert_eq!(u.user(), Some("alice"));
        assert_eq!(u.password(), Some("secret"));
        assert_eq!(u.host(), Some(Host::V6("2001:db8::1".parse().unwrap())));
        assert_eq!(u.port(), Some(5061));
        assert_eq!(u.param("TRANSPORT"), Some(Some("tcp")));
        assert_eq!(u.param("lr"), Some(None));
        assert_eq!(u.param("maddr"), None);
        assert_eq!(u.headers(), Some("subject=hi&x="));
    }

    #[test]
    fn user_with_unusual_characters() {
        let u = Uri::parse(
            "sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*:&it+has=1,weird!*pas$wo~d_too.(doesn't-it)@example.com",
            UriContext::RequestUri,
        )
        .unwrap();
        assert_eq!(
            u.user(),
            Some("1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*")
        );
        assert_eq!(
            u.password(),
            Some("&it+has=1,weird!*pas$wo~d_too.(doesn't-it)")
        );
        assert_eq!(u.host(), Some(Host::Name("example.com")));
    }

    #[test]
    fn hosts_and_ports() {
        let u = Uri::parse("sip:192.0.2.1:5060", UriContext::RequestUri).unwrap();
        assert_eq!(u.host(), Some(Host::V4(Ipv4Addr::new(192, 0, 2, 1))));
        assert_eq!(u.user(), None);
        assert_eq!(err("sip:host:99999", UriContext::Header), UriError::Port);
        assert_eq!(err("sip:host:", UriContext::Header), UriError::Port);
        assert_eq!(err("sip:", UriContext::Header), UriError::Host);
        assert_eq!(err("sip:user@", UriContext::Header), UriError::Host);
        assert_eq!(err("sip:[::1", UriContext::Header), UriError::Host);
        assert_eq!(err("sip:ho st", UriContext::Header), UriError::Host);
    }

    #[test]
    fn rejects_bad_parts() {
        assert_eq!(err("", UriContext::Header), UriError::Empty);
        assert_eq!(err("<sip:a@b>", UriContext::RequestUri), UriError::Scheme);
        assert_eq!(err("sip:@host", UriContext::Header), UriError::User);
        assert_eq!(err("sip:a%zz@host", UriContext::Header), UriError::User);
        assert_eq!(err("sip:host;;lr", UriContext::Header), UriError::Param);
        assert_eq!(err("sip:host;a=", UriContext::Header), UriError::Param);
        assert_eq!(
            err(
                "sip:user@example.com?Route=%3Csip:example.com%3E",
                UriContext::RequestUri
            ),
            UriError::HeadersInRequestUri
        );
        assert_eq!(
            err("sip:host?noequals", UriContext::Header),
            UriError::Headers
        );
    }

    #[test]
    fn other_schemes_are_opaque() {
        let t = Uri::parse(
            "tel:+1-201-555-0123;phone-context=example.com",
            UriContext::Header,
        )
        .unwrap();
        assert_eq!(t.scheme(), Scheme::Tel);
        assert_eq!(t.user(), Some("+1-201-555-0123"));
        assert_eq!(t.param("phone-context"), Some(Some("example.com")));
        let o = Uri::parse("soap.beep://192.0.2.103:3002", UriContext::RequestUri).unwrap();
        assert_eq!(o.scheme(), Scheme::Other);
        assert_eq!(err("http:", UriContext::Header), UriError::Opaque);
    }

    #[test]
    fn ipv4_literals() {
        assert_eq!(parse_ipv4(b"192.0.2.1"), Some(Ipv4Addr::new(192, 0, 2, 1)));
        assert_eq!(parse_ipv4(b"255.255.255.255"), Some(Ipv4Addr::BROADCAST));
        for bad in [
            &b"256.0.0.1"[..],
            b"1.2.3",
            b"1.2.3.4.5",
            b"01.2.3.4",
            b"1..2.3",
            b"",
            b"1.2.3.4.",
            b"1.2.3.04",
            b"1.2.3.1234",
            b"1.2.3.300",
            b"1.2.3.-1",
            b".1.2.3",
        ] {
            assert_eq!(parse_ipv4(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_ipv4(b"0.0.0.0"), Some(Ipv4Addr::UNSPECIFIED));
        assert_eq!(
            parse_ipv4(b"10.20.199.9"),
            Some(Ipv4Addr::new(10, 20, 199, 9))
        );
        // Every string of digits and dots up to eight bytes long, as
        // the standard library reads it.
        let alphabet = b"01259.";
        let mut word = Vec::new();
        for len in 0..=8u32 {
            for mut k in 0..alphabet.len().pow(len) {
                word.clear();
                for _ in 0..len {
                    word.push(alphabet[k % alphabet.len()]);
                    k /= alphabet.len();
                }
                let std = std::str::from_utf8(&word).unwrap().parse::<Ipv4Addr>().ok();
                assert_eq!(parse_ipv4(&word), std, "{}", String::from_utf8_lossy(&word));
            }
        }
        // And longer ones, drawn by a fixed generator (three-digit
        // octets, 256 and above, too many digits).
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200_000 {
            word.clear();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut r = x;
            for _ in 0..9 + r % 8 {
                r /= 7;
                word.push(b"0123569."[(r % 8) as usize]);
            }
            let std = std::str::from_utf8(&word).unwrap().parse::<Ipv4Addr>().ok();
            assert_eq!(parse_ipv4(&word), std, "{}", String::from_utf8_lossy(&word));
        }
        // All-numeric names that are not addresses stay names.
        let u = Uri::parse("sip:1.2.3", UriContext::Header).unwrap();
        assert_eq!(u.host(), Some(Host::Name("1.2.3")));
    }

    #[test]
    fn a_host_is_refused_at_its_first_stray_byte() {
        let at = |s: &str| {
            let e = Uri::parse(s, UriContext::Header).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Uri(UriError::Host), "{s}");
            e.offset
        };
        assert_eq!(at("sip:ex!ample.com"), 6);
        assert_eq!(at("sip:alice@192.0.2.1/x"), 19);
        assert_eq!(at("sip:alice@"), 10);
        assert_eq!(at("sip:alice@;lr"), 10);
        assert_eq!(at("sip:.example.com"), 4);
        assert_eq!(at("sip:-a.example.com:5060"), 4);
        for (s, host) in [
            ("sip:a_b-c.example:5060", Host::Name("a_b-c.example")),
            ("sip:192.0.2.1?x=1", Host::V4(Ipv4Addr::new(192, 0, 2, 1))),
            ("sip:192.0.2.1a;lr", Host::Name("192.0.2.1a")),
        ] {
            assert_eq!(
                Uri::parse(s, UriContext::Header).unwrap().host(),
                Some(host)
            );
        }
    }

    #[test]
    fn escaped_parameters() {
        let u = Uri::parse(
            "sip:cal%6Cer@host5.example.net;%6C%72;n%61me=v%61lue%25%34%31",
            UriContext::Header,
        )
        .unwrap();
        assert_eq!(u.params().count(), 2);
    }
}
