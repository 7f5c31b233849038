//! `name-addr` and `addr-spec` values as used by From, To, Contact, Route,
//! Record-Route and Path (RFC 3261 §20, §25.1).
//!
//! ```text
//! name-addr    = [ display-name ] LAQUOT addr-spec RAQUOT
//! display-name = *(token LWS) / quoted-string
//! ```
//! Without angle brackets, everything after the URI's first `;` is a
//! header parameter, and the URI may not contain `?`, `,` or `;`.

use crate::error::{ErrorKind, ParseError};
use crate::header::HeaderName;
use crate::params::{parse_params, Params};
use crate::scan::{find_byte, is_lws, is_token, Cursor};
use crate::uri::{parse_uri, Uri, UriContext};

/// A URI with optional display name and header parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameAddr<'a> {
    display_name: Option<&'a str>,
    uri: Uri<'a>,
    angle_brackets: bool,
    params: Params<'a>,
    raw: &'a str,
}

impl<'a> NameAddr<'a> {
    /// The display name: the inner text of a quoted string (escapes kept),
    /// or the run of tokens as written.
    pub fn display_name(&self) -> Option<&'a str> {
        self.display_name
    }

    /// The URI.
    pub fn uri(&self) -> &Uri<'a> {
        &self.uri
    }

    /// Whether the URI was written inside `<` `>`.
    pub fn has_angle_brackets(&self) -> bool {
        self.angle_brackets
    }

    /// The header parameters (`;tag=…`, `;expires=…`).
    pub fn params(&self) -> Params<'a> {
        self.params
    }

    /// The `tag` parameter (From and To, RFC 3261 §19.3).
    pub fn tag(&self) -> Option<&'a str> {
        self.params.get("tag").flatten()
    }

    /// The whole value as written.
    pub fn as_str(&self) -> &'a str {
        self.raw
    }
}

fn invalid(name: HeaderName, reason: &'static str, offset: usize) -> ParseError {
    ParseError::new(ErrorKind::InvalidHeader { name, reason }, offset)
}

/// Parses one name-addr / addr-spec with its parameters at the cursor.
///
/// `require_brackets` enforces the name-addr form (Route, Record-Route,
/// Path). `on_param` sees every header parameter.
pub(crate) fn parse_name_addr<'a>(
    c: &mut Cursor<'a>,
    header: HeaderName,
    max_params: usize,
    require_brackets: bool,
    on_param: impl FnMut(&'a str, Option<&'a str>, usize) -> Result<(), ParseError>,
) -> Result<NameAddr<'a>, ParseError> {
    c.skip_lws();
    let start = c.pos();
    let mut display_name = None;
    let mut bracketed = true;
    match c.peek() {
        Some(b'"') => {
            let inner = c
                .quoted()
                .map_err(|o| invalid(header, "unterminated quoted display name", o))?;
            display_name = Some(inner);
            c.skip_lws();
            if c.peek() != Some(b'<') {
                return Err(invalid(
                    header,
                    "quoted display name must be followed by <URI>",
                    c.offset(),
                ));
            }
        }
        Some(b'<') => {}
        Some(_) => {
            let first = c.pos();
            let t = c.take_while(is_token);
            if !t.is_empty() && c.peek() == Some(b':') {
                // A scheme: this is an addr-spec.
                c.set_pos(first);
                bracketed = false;
            } else {
                let mut last_end = c.pos();
                loop {
                    if t.is_empty() && c.pos() == first {
                        return Err(invalid(
                            header,
                            "expected a display name or URI",
                            c.offset(),
                        ));
                    }
                    c.skip_lws();
                    match c.peek() {
                        Some(b'<') => break,
                        Some(b) if is_token(b) => {
                            c.take_while(is_token);
                            last_end = c.pos();
                        }
                        _ => {
                            return Err(invalid(
                                header,
                                "display name with non-token characters must be quoted",
                                c.offset(),
                            ))
                        }
                    }
                }
                display_name = Some(&c.src()[first..last_end]);
            }
        }
        None => return Err(invalid(header, "empty value", c.offset())),
    }
    let uri = if bracketed {
        c.eat(b'<');
        let uri_start = c.pos();
        let Some(len) = find_byte(c.rest(), b'>') else {
            return Err(invalid(header, "missing '>' after URI", c.offset()));
        };
        let text = &c.src()[uri_start..uri_start + len];
        let uri = parse_uri(text, c.offset(), UriContext::Header, max_params)?;
        c.set_pos(uri_start + len + 1);
        uri
    } else {
        if require_brackets {
            return Err(invalid(header, "URI must be enclosed in <>", c.offset()));
        }
        let uri_start = c.pos();
        let base = c.offset();
        let text = c.take_while(|b| !is_lws(b) && b != b';' && b != b',');
        if let Some(q) = text.find('?') {
            return Err(invalid(
                header,
                "a URI with headers must be enclosed in <>",
                base + q,
            ));
        }
        let _ = uri_start;
        parse_uri(text, base, UriContext::Header, max_params)?
    };
    let params = parse_params(c, header, max_params, on_param)?;
    Ok(NameAddr {
        display_name,
        uri,
        angle_brackets: bracketed,
        params,
        raw: &c.src()[start..c.pos()],
    })
}

/// Parses a whole single-valued From/To style field.
pub(crate) fn parse_single<'a>(
    value: &'a str,
    base: usize,
    header: HeaderName,
    max_params: usize,
) -> Result<NameAddr<'a>, ParseError> {
    let mut c = Cursor::new(value, base);
    let na = parse_name_addr(&mut c, header, max_params, false, |_, _, _| Ok(()))?;
    c.skip_lws();
    if !c.at_end() {
        return Err(invalid(header, "unexpected text after value", c.offset()));
    }
    Ok(na)
}

/// Parses a comma-separated list of name-addr values, calling `f` on each.
pub(crate) fn parse_list<'a>(
    value: &'a str,
    base: usize,
    header: HeaderName,
    max_values: usize,
    require_brackets: bool,
    f: impl FnMut(NameAddr<'a>) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    crate::params::parse_comma_list(
        value,
        base,
        header,
        max_values,
        |c| parse_name_addr(c, header, max_values, require_brackets, |_, _, _| Ok(())),
        f,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(s: &str) -> Result<NameAddr<'_>, ParseError> {
        parse_single(s, 0, HeaderName::From, 16)
    }

    #[test]
    fn forms() {
        let a =
            one(r#""J Rosenberg \\\""       <sip:jdrosen@example.com>  ;  tag = 98asjd8"#).unwrap();
        assert_eq!(a.display_name(), Some(r#"J Rosenberg \\\""#));
        assert_eq!(a.tag(), Some("98asjd8"));
        let b = one("caller<sip:caller@example.com>;tag=323").unwrap();
        assert_eq!(b.display_name(), Some("caller"));
        let c = one("sip:user@example.com;tag=1").unwrap();
        assert!(!c.has_angle_brackets());
        assert_eq!(c.uri().params_raw(), "");
        assert_eq!(c.tag(), Some("1"));
        let d = one("Bob  Smith <sip:bob@example.com>").unwrap();
        assert_eq!(d.display_name(), Some("Bob  Smith"));
    }

    #[test]
    fn rejects() {
        assert!(one(r#""Mr. J. User <sip:j.user@example.com>"#).is_err());
        assert!(one("Bell, Alexander <sip:a.g.bell@example.com>;tag=43").is_err());
        assert!(one(r#""Watson, Thomas" < sip:t.watson@example.org >"#).is_err());
        assert!(one("sip:user@example.com?Route=%3Csip:sip.example.com%3E").is_err());
        assert!(one("<sip:user@example.com").is_err());
        assert!(one("").is_err());
        assert!(one("<sip:a@b> junk").is_err());
    }
}
