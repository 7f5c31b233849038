//! Header parameters: `*( SEMI generic-param )` (RFC 3261 §25.1).
//!
//! ```text
//! generic-param = token [ EQUAL gen-value ]
//! gen-value     = token / host / quoted-string
//! ```

use crate::error::{ErrorKind, ParseError};
use crate::header::HeaderName;
use crate::scan::{is_token, Cursor};

/// The parameters of one header value, kept raw and iterated on demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Params<'a> {
    raw: &'a str,
}

impl<'a> Params<'a> {
    /// The raw text, starting at the first `;` (empty when none).
    pub fn as_str(&self) -> &'a str {
        self.raw
    }

    /// Iterates over `(name, value)`; quoted values are returned without
    /// their quotes and with escapes kept.
    pub fn iter(&self) -> ParamIter<'a> {
        ParamIter {
            cursor: Cursor::new(self.raw, 0),
        }
    }

    /// Looks a parameter up by case-insensitive name.
    pub fn get(&self, name: &str) -> Option<Option<&'a str>> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }
}

/// Iterator over [`Params`].
#[derive(Debug, Clone)]
pub struct ParamIter<'a> {
    cursor: Cursor<'a>,
}

impl<'a> Iterator for ParamIter<'a> {
    type Item = (&'a str, Option<&'a str>);

    fn next(&mut self) -> Option<Self::Item> {
        // The text was validated when the message was parsed.
        next_param(&mut self.cursor, HeaderName::Other)
            .ok()
            .flatten()
    }
}

fn invalid(name: HeaderName, reason: &'static str, offset: usize) -> ParseError {
    ParseError::new(ErrorKind::InvalidHeader { name, reason }, offset)
}

/// Reads one `SEMI generic-param`, or returns `None` if no `;` follows.
pub(crate) fn next_param<'a>(
    c: &mut Cursor<'a>,
    header: HeaderName,
) -> Result<Option<(&'a str, Option<&'a str>)>, ParseError> {
    if !c.eat_sep(b';') {
        return Ok(None);
    }
    let Some(name) = c.token() else {
        return Err(invalid(
            header,
            "empty or malformed parameter name",
            c.offset(),
        ));
    };
    if !c.eat_sep(b'=') {
        return Ok(Some((name, None)));
    }
    let value = match c.peek() {
        Some(b'"') => c
            .quoted()
            .map_err(|o| invalid(header, "unterminated quoted string in parameter", o))?,
        Some(b'[') => {
            let rest = c.rest();
            let Some(close) = rest.find(']') else {
                return Err(invalid(
                    header,
                    "unterminated IPv6 reference in parameter",
                    c.offset(),
                ));
            };
            let v = &rest[..=close];
            c.set_pos(c.pos() + close + 1);
            v
        }
        _ => {
            let start = c.pos();
            c.take_while(is_token);
            if header == HeaderName::Via
                && c.peek() == Some(b':')
                && name.eq_ignore_ascii_case("received")
            {
                // RFC 3261's grammar gives `received` an IPv6 address
                // without brackets (RFC 5118 §4.5: accept it with and
                // without them).
                c.take_while(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
            }
            let v = &c.src()[start..c.pos()];
            if v.is_empty() {
                return Err(invalid(
                    header,
                    "parameter has '=' but no value",
                    c.offset(),
                ));
            }
            v
        }
    };
    Ok(Some((name, Some(value))))
}

/// Parses all parameters at the cursor, calling `f` for each, and returns
/// them as [`Params`].
pub(crate) fn parse_params<'a>(
    c: &mut Cursor<'a>,
    header: HeaderName,
    limit: usize,
    mut f: impl FnMut(&'a str, Option<&'a str>, usize) -> Result<(), ParseError>,
) -> Result<Params<'a>, ParseError> {
    let start = c.pos();
    let mut end = start;
    let mut count = 0;
    loop {
        let at = c.offset();
        match next_param(c, header)? {
            Some((name, value)) => {
                count += 1;
                if count > limit {
                    return Err(ParseError::new(ErrorKind::TooManyValues { limit }, at));
                }
                f(name, value, at)?;
                end = c.pos();
            }
            None => break,
        }
    }
    Ok(Params {
        raw: &c.src()[start..end],
    })
}

/// Parses `item *(COMMA item)` (RFC 3261 §7.3.1) with `one` reading each
/// item, and at most `max_values` items.
pub(crate) fn parse_comma_list<'a, T>(
    value: &'a str,
    base: usize,
    header: HeaderName,
    max_values: usize,
    mut one: impl FnMut(&mut Cursor<'a>) -> Result<T, ParseError>,
    mut each: impl FnMut(T) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    let mut c = Cursor::new(value, base);
    let mut n = 0;
    loop {
        n += 1;
        if n > max_values {
            return Err(ParseError::new(
                ErrorKind::TooManyValues { limit: max_values },
                c.offset(),
            ));
        }
        each(one(&mut c)?)?;
        c.skip_lws();
        if c.at_end() {
            return Ok(());
        }
        if !c.eat_sep(b',') {
            return Err(invalid(header, "expected ',' or end of value", c.offset()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_params() {
        let mut c = Cursor::new(" ; tag = 1918181833n ;lr; q=\"a;b\" ;x=[::1]", 0);
        let p = parse_params(&mut c, HeaderName::To, 10, |_, _, _| Ok(())).unwrap();
        assert!(c.at_end());
        let all: Vec<_> = p.iter().collect();
        assert_eq!(
            all,
            vec![
                ("tag", Some("1918181833n")),
                ("lr", None),
                ("q", Some("a;b")),
                ("x", Some("[::1]"))
            ]
        );
        assert_eq!(p.get("TAG"), Some(Some("1918181833n")));
    }

    #[test]
    fn malformed_params() {
        for bad in [";;tag=1", "; =x", ";tag=", ";q=\"open", ";x=[::1"] {
            let mut c = Cursor::new(bad, 0);
            assert!(
                parse_params(&mut c, HeaderName::To, 10, |_, _, _| Ok(())).is_err(),
                "{bad}"
            );
        }
        let mut c = Cursor::new(";a;b;c", 0);
        assert!(matches!(
            parse_params(&mut c, HeaderName::To, 2, |_, _, _| Ok(()))
                .unwrap_err()
                .kind,
            ErrorKind::TooManyValues { limit: 2 }
        ));
    }
}
