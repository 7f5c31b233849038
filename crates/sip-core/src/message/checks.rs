//! What a message's start line and the headers with a grammar of their
//! own must look like (RFC 3261 §7.1, §25.1), checked as the message is
//! parsed: the version, spacing, Call-ID, Warning, Date and Content-Type.

use crate::error::{ErrorKind, ParseError};
use crate::header::HeaderName;
use crate::limits::Limits;
use crate::method::Method;
use crate::scan::{find_byte, is_token_str, is_word, parse_u64, Cursor};
use crate::status::StatusCode;
use crate::uri::{parse_uri, UriContext};

use super::StartLine;

pub(super) fn invalid(name: HeaderName, reason: &'static str, offset: usize) -> ParseError {
    ParseError::new(ErrorKind::InvalidHeader { name, reason }, offset)
}

pub(super) fn start_err(reason: &'static str, offset: usize) -> ParseError {
    ParseError::new(ErrorKind::StartLine(reason), offset)
}

/// Whether `s` starts with `SIP/`, case-insensitively. Byte-wise, so that
/// a multibyte character at offset 3 cannot split a slice.
pub(crate) fn starts_with_sip_slash(s: &str) -> bool {
    s.as_bytes()
        .get(..4)
        .is_some_and(|p| p.eq_ignore_ascii_case(b"SIP/"))
}

pub(super) fn check_version(v: &str, offset: usize) -> Result<(), ParseError> {
    if v.eq_ignore_ascii_case("SIP/2.0") {
        return Ok(());
    }
    let well_formed = starts_with_sip_slash(v)
        && v[4..].split_once('.').is_some_and(|(a, b)| {
            !a.is_empty() && !b.is_empty() && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit())
        });
    Err(if well_formed {
        ParseError::new(ErrorKind::UnsupportedVersion, offset)
    } else {
        start_err("malformed SIP-Version", offset)
    })
}

pub(super) const SPACING: &str =
    "Request-Line must be Method SP Request-URI SP SIP-Version with single spaces";

/// Offset of the space that breaks `Method SP Request-URI SP SIP-Version`:
/// a leading, doubled or trailing space, else the third space.
pub(super) fn bad_space(line: &str) -> usize {
    let b = line.as_bytes();
    let mut spaces = 0;
    for (i, &c) in b.iter().enumerate() {
        if c == b' ' {
            spaces += 1;
            if i == 0 || b[i - 1] == b' ' || i + 1 == b.len() || spaces == 3 {
                return i;
            }
        }
    }
    b.len()
}

/// A Request-Line's three words, each non-empty, split at exactly two
/// single spaces (RFC 3261 section 7.1); `None` for any other spacing.
pub(super) fn three_words(line: &str) -> Option<(&str, &str, &str)> {
    let b = line.as_bytes();
    let first = b.iter().position(|&c| c == b' ')?;
    let second = first + 1 + b[first + 1..].iter().position(|&c| c == b' ')?;
    let last = &b[second + 1..];
    if first == 0 || second == first + 1 || last.is_empty() || last.contains(&b' ') {
        return None;
    }
    // Splitting at ASCII spaces keeps every part on character boundaries.
    Some((
        &line[..first],
        &line[first + 1..second],
        &line[second + 1..],
    ))
}

pub(super) fn parse_start_line<'a>(
    line: &'a str,
    base: usize,
    limits: &Limits,
) -> Result<StartLine<'a>, ParseError> {
    if starts_with_sip_slash(line) {
        return parse_status_line(line, base);
    }
    let Some((m, u, v)) = three_words(line) else {
        return Err(start_err(SPACING, base + bad_space(line)));
    };
    if !is_token_str(m) {
        return Err(ParseError::new(ErrorKind::Method, base));
    }
    let uri_at = base + m.len() + 1;
    check_version(v, uri_at + u.len() + 1)?;
    let uri = parse_uri(u, uri_at, UriContext::RequestUri, limits.max_values)?;
    Ok(StartLine::Request {
        method: Method::from_token(m),
        uri,
    })
}

/// `SIP-Version SP Status-Code SP Reason-Phrase` (RFC 3261 §7.2).
pub(super) fn parse_status_line(line: &str, base: usize) -> Result<StartLine<'_>, ParseError> {
    let Some(sp) = find_byte(line, b' ') else {
        return Err(start_err(
            "Status-Line needs a status code",
            base + line.len(),
        ));
    };
    check_version(&line[..sp], base)?;
    let rest = &line[sp + 1..];
    let (code, reason) = match find_byte(rest, b' ') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    let status = (code.len() == 3)
        .then(|| parse_u64(code))
        .flatten()
        .and_then(|c| StatusCode::new(c as u16))
        .ok_or_else(|| ParseError::new(ErrorKind::StatusCode, base + sp + 1))?;
    if let Some(i) = reason.bytes().position(|c| c < 0x20 && c != b'\t') {
        return Err(start_err(
            "control character in Reason-Phrase",
            base + sp + 5 + i,
        ));
    }
    Ok(StartLine::Response { status, reason })
}

pub(super) fn check_call_id(v: &str, offset: usize) -> Result<(), ParseError> {
    // One pass: every byte a word character or '@', at most one '@',
    // with a word on each side of it.
    let b = v.as_bytes();
    let (mut ats, mut at, mut words) = (0, 0, true);
    for (i, &c) in b.iter().enumerate() {
        if c == b'@' {
            ats += 1;
            at = i;
        } else {
            words &= is_word(c);
        }
    }
    let ok = words
        && !b.is_empty()
        && match ats {
            0 => true,
            1 => at > 0 && at + 1 < b.len(),
            _ => false,
        };
    if ok {
        Ok(())
    } else {
        Err(invalid(
            HeaderName::CallId,
            "must be word [\"@\" word]",
            offset,
        ))
    }
}

/// `warning-value = warn-code SP warn-agent SP warn-text` (RFC 3261 §20.43).
pub(super) fn check_warning(v: &str, offset: usize) -> Result<(), ParseError> {
    let mut c = Cursor::new(v, offset);
    loop {
        c.skip_lws();
        let code = c.take_while(|b| b.is_ascii_digit());
        if code.len() != 3 || !c.eat(b' ') {
            return Err(invalid(
                HeaderName::Warning,
                "warn-code must be three digits",
                c.offset(),
            ));
        }
        if c.take_while(|b| b != b' ').is_empty() || !c.eat(b' ') {
            return Err(invalid(
                HeaderName::Warning,
                "missing warn-agent",
                c.offset(),
            ));
        }
        c.quoted()
            .map_err(|o| invalid(HeaderName::Warning, "warn-text must be a quoted string", o))?;
        c.skip_lws();
        if c.at_end() {
            return Ok(());
        }
        if !c.eat_sep(b',') {
            return Err(invalid(
                HeaderName::Warning,
                "expected ',' between warnings",
                c.offset(),
            ));
        }
    }
}

/// `rfc1123-date = wkday "," SP date1 SP time SP "GMT"` (RFC 3261 §20.17).
pub(super) fn check_date(v: &str, offset: usize) -> Result<(), ParseError> {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let b = v.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    // ASCII only, so every fixed offset below is a character boundary.
    let ok = b.len() == 29
        && v.is_ascii()
        && DAYS.contains(&&v[..3])
        && &v[3..5] == ", "
        && digits(5..7)
        && b[7] == b' '
        && MONTHS.contains(&&v[8..11])
        && b[11] == b' '
        && digits(12..16)
        && b[16] == b' '
        && digits(17..19)
        && b[19] == b':'
        && digits(20..22)
        && b[22] == b':'
        && digits(23..25)
        && &v[25..] == " GMT";
    if ok {
        Ok(())
    } else {
        Err(invalid(
            HeaderName::Date,
            "must be an RFC 1123 date in GMT",
            offset,
        ))
    }
}

pub(super) fn check_content_type(
    v: &str,
    offset: usize,
    limits: &Limits,
) -> Result<(), ParseError> {
    let mut c = Cursor::new(v, offset);
    let bad = |c: &Cursor<'_>| {
        invalid(
            HeaderName::ContentType,
            "must be type/subtype *(;param)",
            c.offset(),
        )
    };
    c.token().ok_or_else(|| bad(&c))?;
    if !c.eat_sep(b'/') {
        return Err(bad(&c));
    }
    c.token().ok_or_else(|| bad(&c))?;
    crate::params::parse_params(
        &mut c,
        HeaderName::ContentType,
        limits.max_values,
        |_, _, _| Ok(()),
    )?;
    c.skip_lws();
    if c.at_end() {
        Ok(())
    } else {
        Err(bad(&c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_id_is_a_word_with_at_most_one_at_between_words() {
        for ok in [
            "a",
            "843817637684230@998sdasdh09",
            "a@b.c",
            "x-(y)<z>!%*_+`'~",
        ] {
            assert!(check_call_id(ok, 0).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "@",
            "@b",
            "a@",
            "a@b@c",
            "a@@b",
            "a b",
            "a\tb",
            "a;b=\"c\"",
            "é",
        ] {
            assert!(check_call_id(bad, 0).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_request_line_is_three_words_at_two_single_spaces() {
        assert_eq!(
            three_words("REGISTER sip:a.example SIP/2.0"),
            Some(("REGISTER", "sip:a.example", "SIP/2.0"))
        );
        assert_eq!(three_words("é ü ß"), Some(("é", "ü", "ß")));
        for bad in [
            "",
            " ",
            "  ",
            "INVITE",
            "INVITE sip:a",
            "INVITE sip:a ",
            " INVITE sip:a SIP/2.0",
            "INVITE  sip:a SIP/2.0",
            "INVITE sip:a  SIP/2.0",
            "INVITE sip:a SIP/2.0 ",
            "INVITE sip:a SIP/2.0 x",
        ] {
            assert_eq!(three_words(bad), None, "{bad:?}");
        }
    }
}
