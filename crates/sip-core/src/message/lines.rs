//! The header section's lines: where it ends, each field's extent
//! (continuation lines joined, bare CRs refused), and a field's name and
//! value (RFC 3261 §7.3.1).

use memchr::memchr;

use super::HeadSpan;
use crate::error::{ErrorKind, ParseError};
use crate::scan::{token_len, trim_lws};

/// Finds the header section, skipping leading empty lines (RFC 3261 §7.5).
pub(crate) fn find_head(buf: &[u8]) -> Result<HeadSpan, ParseError> {
    let mut lead = 0;
    while lead < buf.len() && (buf[lead] == b'\r' || buf[lead] == b'\n') {
        lead += 1;
    }
    if lead == buf.len() {
        return Err(ParseError::new(ErrorKind::Empty, lead));
    }
    // The blank line ends the head: the first LF followed by CRLF or by
    // LF. One vector search for each ending (the second only up to where
    // the first was found), instead of a search per line.
    let rest = &buf[lead..];
    let crlf = BLANK_CRLF.find(rest);
    let lf = BLANK_LF.find(&rest[..crlf.map_or(rest.len(), |at| at + 2)]);
    let (nl, body_start) = match (crlf, lf) {
        (_, Some(at)) => (lead + at, lead + at + 2),
        (Some(at), None) => (lead + at, lead + at + 3),
        (None, None) => return Err(ParseError::new(ErrorKind::Incomplete, buf.len())),
    };
    Ok(HeadSpan {
        lead,
        head_end: line_content_end(buf, nl),
        body_start,
    })
}

/// An empty line after a CRLF- or LF-ended one, from the first LF.
static BLANK_CRLF: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\n\r\n"));
static BLANK_LF: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\n\n"));

pub(super) fn line_content_end(buf: &[u8], nl: usize) -> usize {
    if nl > 0 && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    }
}

/// One header field before its name is checked: the whole field text
/// (name through value, continuation lines included) and its offset.
pub(crate) fn next_field(head: &str, pos: &mut usize) -> Option<(usize, usize)> {
    let b = head.as_bytes();
    if *pos >= b.len() {
        return None;
    }
    let start = *pos;
    let mut end;
    let mut scan = start;
    loop {
        match memchr(b'\n', &b[scan..]) {
            Some(nl) => {
                end = scan + nl;
                if matches!(b.get(end + 1), Some(b' ' | b'\t')) {
                    scan = end + 1;
                    continue;
                }
                *pos = end + 1;
            }
            None => {
                end = b.len();
                *pos = b.len();
            }
        }
        break;
    }
    if end > start && b[end - 1] == b'\r' {
        end -= 1;
    }
    Some((start, end))
}

/// [`next_field`] for a head not yet checked: a CR must begin a CRLF
/// (RFC 3261 §7.3.1), so the one vector search per line that finds the
/// line's end also finds any bare CR before it.
pub(super) fn checked_field(
    head: &str,
    pos: &mut usize,
    base: usize,
) -> Result<Option<(usize, usize)>, ParseError> {
    let b = head.as_bytes();
    let start = *pos;
    if start >= b.len() {
        return Ok(None);
    }
    let mut scan = start;
    loop {
        let Some(at) = memchr::memchr2(b'\r', b'\n', &b[scan..]).map(|i| scan + i) else {
            *pos = b.len();
            return Ok(Some((start, b.len())));
        };
        let nl = if b[at] == b'\r' {
            if b.get(at + 1) != Some(&b'\n') {
                return Err(ParseError::new(ErrorKind::BareCr, base + at));
            }
            at + 1
        } else {
            at
        };
        if matches!(b.get(nl + 1), Some(b' ' | b'\t')) {
            scan = nl + 1;
            continue;
        }
        *pos = nl + 1;
        return Ok(Some((start, at)));
    }
}

/// Splits a field into name and trimmed value; `Err` gives the error and
/// the offset within the field.
pub(crate) fn split_field(field: &str) -> Result<(&str, &str), (ErrorKind, usize)> {
    let b = field.as_bytes();
    if matches!(b.first(), Some(b' ' | b'\t')) {
        return Err((ErrorKind::OrphanContinuation, 0));
    }
    let mut i = token_len(b);
    if i == 0 {
        return Err((ErrorKind::HeaderName, 0));
    }
    let name = &field[..i];
    while i < b.len() && matches!(b[i], b' ' | b'\t') {
        i += 1;
    }
    if b.get(i) != Some(&b':') {
        return Err((
            if i < b.len() {
                ErrorKind::HeaderName
            } else {
                ErrorKind::MissingColon
            },
            i,
        ));
    }
    Ok((name, trim_lws(&field[i + 1..])))
}
