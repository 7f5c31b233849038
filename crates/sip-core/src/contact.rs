//! Contact (RFC 3261 §10.2.1, §20.10): `*` or a list of name-addr values
//! with `expires` and `q` parameters.

use crate::error::{ErrorKind, ParseError};
use crate::header::HeaderName;
use crate::name_addr::{parse_name_addr, NameAddr};
use crate::scan::{parse_u64, trim_lws, Cursor};

/// One Contact value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contact<'a> {
    /// The address and its parameters.
    pub addr: NameAddr<'a>,
    /// The `expires` parameter, saturated at `u32::MAX`.
    pub expires: Option<u32>,
    /// The `q` parameter in thousandths (`q=0.5` is 500).
    pub q: Option<u16>,
}

fn invalid(reason: &'static str, offset: usize) -> ParseError {
    ParseError::new(
        ErrorKind::InvalidHeader {
            name: HeaderName::Contact,
            reason,
        },
        offset,
    )
}

/// Parses `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`
/// into thousandths.
pub fn parse_qvalue(s: &str) -> Option<u16> {
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, f),
        None => (s, ""),
    };
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut thousandths = 0u16;
    for (k, d) in frac.bytes().enumerate() {
        thousandths += u16::from(d - b'0') * [100, 10, 1][k];
    }
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Parses a delta-seconds value, saturating at `u32::MAX` (RFC 3261 §20.19).
pub fn parse_delta_seconds(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(parse_u64(s).map_or(u32::MAX, |v| u32::try_from(v).unwrap_or(u32::MAX)))
}

/// Parses one contact-param at the cursor.
pub(crate) fn parse_contact<'a>(
    c: &mut Cursor<'a>,
    max_params: usize,
) -> Result<Contact<'a>, ParseError> {
    let (mut expires, mut q) = (None, None);
    let addr = parse_name_addr(c, HeaderName::Contact, max_params, false, |name, v, at| {
        if name.eq_ignore_ascii_case("expires") {
            expires = Some(
                v.and_then(parse_delta_seconds)
                    .ok_or_else(|| invalid("expires must be delta-seconds", at))?,
            );
        } else if name.eq_ignore_ascii_case("q") {
            q = Some(
                v.and_then(parse_qvalue)
                    .ok_or_else(|| invalid("q must be a qvalue in 0..1", at))?,
            );
        }
        Ok(())
    })?;
    Ok(Contact { addr, expires, q })
}

/// Parses a Contact value. Returns `Ok(true)` for `*`; otherwise calls `f`
/// on each contact and returns `Ok(false)`.
pub(crate) fn parse_contacts<'a>(
    value: &'a str,
    base: usize,
    max_values: usize,
    mut f: impl FnMut(Contact<'a>),
) -> Result<bool, ParseError> {
    if trim_lws(value) == "*" {
        return Ok(true);
    }
    crate::params::parse_comma_list(
        value,
        base,
        HeaderName::Contact,
        max_values,
        |c| parse_contact(c, max_values),
        |contact| {
            f(contact);
            Ok(())
        },
    )?;
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qvalues() {
        assert_eq!(parse_qvalue("0.33"), Some(330));
        assert_eq!(parse_qvalue("1"), Some(1000));
        assert_eq!(parse_qvalue("1.000"), Some(1000));
        assert_eq!(parse_qvalue("0"), Some(0));
        assert_eq!(parse_qvalue("1.5"), None);
        assert_eq!(parse_qvalue("0.1234"), None);
        assert_eq!(parse_qvalue("2"), None);
    }

    #[test]
    fn lists_and_star() {
        assert_eq!(parse_contacts(" * ", 0, 8, |_| ()), Ok(true));
        let mut v = Vec::new();
        parse_contacts(
            "\"Quoted string \\\"\\\"\" <sip:jdrosen@example.com> ; newparam =\r\n      newvalue ;\r\n  secondparam ; q = 0.33, <sip:b@h>;expires=280297596632815",
            0,
            8,
            |c| v.push(c),
        )
        .unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].q, Some(330));
        assert_eq!(v[1].expires, Some(u32::MAX));
        assert!(parse_contacts("<sip:a@b>;expires=soon", 0, 8, |_| ()).is_err());
        assert!(parse_contacts("<sip:a@b> <sip:c@d>", 0, 8, |_| ()).is_err());
    }
}
