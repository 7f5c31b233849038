//! Authorization, Proxy-Authorization, WWW-Authenticate and
//! Proxy-Authenticate header fields (RFC 3261 §20.7, §20.27, §20.28,
//! §20.44, §25.1; RFC 7616 §3.3, §3.4).
//!
//! ```text
//! Authorization: Digest username="bob", realm="biloxi.example.com",
//!     nonce="dcd98b…", uri="sip:bob@biloxi.example.com", qop=auth,
//!     nc=00000001, cnonce="0a4f113b", response="6629fae4…"
//! ```
//! Quoted values are returned without quotes and with `\` escapes kept.

use crate::error::{ErrorKind, ParseError};
use crate::header::HeaderName;
use crate::scan::{is_token, Cursor};

fn invalid(name: HeaderName, reason: &'static str, offset: usize) -> ParseError {
    ParseError::new(ErrorKind::InvalidHeader { name, reason }, offset)
}

/// Reads `scheme LWS name=value *(COMMA name=value)`, calling `f` for each
/// parameter with its value, whether it was quoted, and its offset.
fn parse_auth<'a>(
    value: &'a str,
    base: usize,
    name: HeaderName,
    mut f: impl FnMut(&'a str, &'a str, bool, usize) -> Result<(), ParseError>,
) -> Result<&'a str, ParseError> {
    let mut c = Cursor::new(value, base);
    c.skip_lws();
    let scheme = c
        .token()
        .ok_or_else(|| invalid(name, "missing authentication scheme", c.offset()))?;
    if !c.skip_lws() {
        return Err(invalid(
            name,
            "expected white space after the scheme",
            c.offset(),
        ));
    }
    let mut count = 0;
    loop {
        let at = c.offset();
        let pname = c
            .token()
            .ok_or_else(|| invalid(name, "expected a parameter name", at))?;
        if !c.eat_sep(b'=') {
            return Err(invalid(
                name,
                "expected '=' after parameter name",
                c.offset(),
            ));
        }
        let (v, quoted) = if c.peek() == Some(b'"') {
            (
                c.quoted()
                    .map_err(|o| invalid(name, "unterminated quoted string", o))?,
                true,
            )
        } else {
            let v = c.take_while(is_token);
            if v.is_empty() {
                return Err(invalid(name, "parameter has no value", c.offset()));
            }
            (v, false)
        };
        count += 1;
        if count > 64 {
            return Err(ParseError::new(ErrorKind::TooManyValues { limit: 64 }, at));
        }
        f(pname, v, quoted, at)?;
        c.skip_lws();
        if c.at_end() {
            return Ok(scheme);
        }
        if !c.eat_sep(b',') {
            return Err(invalid(name, "expected ',' between parameters", c.offset()));
        }
    }
}

fn set<'a>(
    slot: &mut Option<&'a str>,
    v: &'a str,
    name: HeaderName,
    at: usize,
) -> Result<(), ParseError> {
    if slot.is_some() {
        return Err(invalid(name, "parameter appears twice", at));
    }
    *slot = Some(v);
    Ok(())
}

/// Credentials from an Authorization or Proxy-Authorization field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Credentials<'a> {
    /// The scheme, e.g. `Digest`.
    pub scheme: &'a str,
    /// `username` (quoted text, escapes kept).
    pub username: Option<&'a str>,
    /// `realm`.
    pub realm: Option<&'a str>,
    /// `nonce`.
    pub nonce: Option<&'a str>,
    /// `uri` (digest-uri).
    pub uri: Option<&'a str>,
    /// `response` (hex).
    pub response: Option<&'a str>,
    /// `algorithm`.
    pub algorithm: Option<&'a str>,
    /// `cnonce`.
    pub cnonce: Option<&'a str>,
    /// `opaque`.
    pub opaque: Option<&'a str>,
    /// `qop` (one token).
    pub qop: Option<&'a str>,
    /// `nc` (eight hex digits).
    pub nc: Option<&'a str>,
    /// `userhash=true` (RFC 7616 §3.4.4).
    pub userhash: bool,
}

impl<'a> Credentials<'a> {
    /// Parses a credentials value.
    pub fn parse(value: &'a str) -> Result<Self, ParseError> {
        Self::parse_at(value, 0, HeaderName::Authorization)
    }

    /// Parses with an offset and header name for error reports.
    pub fn parse_at(value: &'a str, base: usize, name: HeaderName) -> Result<Self, ParseError> {
        let mut c = Credentials::default();
        let scheme = parse_auth(value, base, name, |p, v, _, at| {
            let slot = match p.to_ascii_lowercase().as_str() {
                "username" => &mut c.username,
                "realm" => &mut c.realm,
                "nonce" => &mut c.nonce,
                "uri" => &mut c.uri,
                "response" => &mut c.response,
                "algorithm" => &mut c.algorithm,
                "cnonce" => &mut c.cnonce,
                "opaque" => &mut c.opaque,
                "qop" => &mut c.qop,
                "nc" => {
                    if v.len() != 8 || !v.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err(invalid(name, "nc must be eight hex digits", at));
                    }
                    &mut c.nc
                }
                "userhash" => {
                    c.userhash = v.eq_ignore_ascii_case("true");
                    return Ok(());
                }
                _ => return Ok(()),
            };
            set(slot, v, name, at)
        })?;
        c.scheme = scheme;
        Ok(c)
    }

    /// Whether the scheme is Digest.
    pub fn is_digest(&self) -> bool {
        self.scheme.eq_ignore_ascii_case("Digest")
    }

    /// The nonce count as a number.
    pub fn nc_value(&self) -> Option<u32> {
        self.nc.and_then(|n| u32::from_str_radix(n, 16).ok())
    }
}

/// A challenge from a WWW-Authenticate or Proxy-Authenticate field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Challenge<'a> {
    /// The scheme, e.g. `Digest`.
    pub scheme: &'a str,
    /// `realm`.
    pub realm: Option<&'a str>,
    /// `domain`.
    pub domain: Option<&'a str>,
    /// `nonce`.
    pub nonce: Option<&'a str>,
    /// `opaque`.
    pub opaque: Option<&'a str>,
    /// `stale=true`.
    pub stale: bool,
    /// `algorithm`.
    pub algorithm: Option<&'a str>,
    /// `qop` options as written inside the quotes, e.g. `auth,auth-int`.
    pub qop: Option<&'a str>,
    /// `userhash=true`.
    pub userhash: bool,
}

impl<'a> Challenge<'a> {
    /// Parses a challenge value.
    pub fn parse(value: &'a str) -> Result<Self, ParseError> {
        Self::parse_at(value, 0, HeaderName::WwwAuthenticate)
    }

    /// Parses with an offset and header name for error reports.
    pub fn parse_at(value: &'a str, base: usize, name: HeaderName) -> Result<Self, ParseError> {
        let mut c = Challenge::default();
        let scheme = parse_auth(value, base, name, |p, v, _, at| {
            let slot = match p.to_ascii_lowercase().as_str() {
                "realm" => &mut c.realm,
                "domain" => &mut c.domain,
                "nonce" => &mut c.nonce,
                "opaque" => &mut c.opaque,
                "algorithm" => &mut c.algorithm,
                "qop" => &mut c.qop,
                "stale" => {
                    c.stale = v.eq_ignore_ascii_case("true");
                    return Ok(());
                }
                "userhash" => {
                    c.userhash = v.eq_ignore_ascii_case("true");
                    return Ok(());
                }
                _ => return Ok(()),
            };
            set(slot, v, name, at)
        })?;
        c.scheme = scheme;
        Ok(c)
    }

    /// Whether `qop` offers the given option (`auth`, `auth-int`).
    pub fn offers_qop(&self, option: &str) -> bool {
        self.qop
            .is_some_and(|q| q.split(',').any(|o| o.trim().eq_ignore_ascii_case(option)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials() {
        let c = Credentials::parse(
            "Digest username=\"bob\", realm=\"biloxi.example.com\",\r\n nonce=\"dcd98b7102dd2f0e8b11d0f600bfb0c093\", uri=\"sip:bob@biloxi.example.com\", qop=auth, nc=00000001, cnonce=\"0a4f113b\", response=\"6629fae49393a05397450978507c4ef1\", opaque=\"5ccc069c403ebaf9f0171e9517f40e41\", algorithm=MD5",
        )
        .unwrap();
        assert!(c.is_digest());
        assert_eq!(c.username, Some("bob"));
        assert_eq!(c.qop, Some("auth"));
        assert_eq!(c.nc_value(), Some(1));
        assert_eq!(c.algorithm, Some("MD5"));
        let other = Credentials::parse("NoOneKnowsThisScheme opaque-data=here").unwrap();
        assert!(!other.is_digest());
    }

    #[test]
    fn rejects() {
        for bad in [
            "Digest",
            "Digest username",
            "Digest username=\"bob",
            "Digest username=\"a\" realm=\"b\"",
            "Digest nc=1",
            "Digest username=\"a\", username=\"b\"",
            "Digestusername=\"a\"",
        ] {
            assert!(Credentials::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn challenge() {
        let c = Challenge::parse(
            "Digest realm=\"atlanta.example.com\", qop=\"auth,auth-int\", nonce=\"ea9c8e88df84f1cec4341ae6cbe5a359\", opaque=\"\", stale=TRUE, algorithm=SHA-256",
        )
        .unwrap();
        assert!(c.stale);
        assert!(c.offers_qop("auth-int"));
        assert!(!c.offers_qop("foo"));
        assert_eq!(c.opaque, Some(""));
        assert_eq!(c.algorithm, Some("SHA-256"));
    }
}
