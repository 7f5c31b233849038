//! Message boundaries on stream transports (RFC 3261 §18.3, RFC 5626 §3.5.1).
//!
//! On TCP and TLS, Content-Length is mandatory and delimits the body.
//! CRLFs between messages are keep-alives and are skipped.

use crate::error::{ErrorKind, ParseError};
use crate::header::HeaderName;
use crate::limits::Limits;
use crate::message::{find_head, next_field};
use crate::scan::{find_byte, parse_u64, trim_lws};

/// What the front of a stream buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// `n` bytes of CR/LF keep-alive to discard.
    KeepAlive(usize),
    /// A complete message of `n` bytes (parse `&buf[..n]`).
    Message(usize),
}

/// Finds the first frame in `buf`. Returns [`ErrorKind::Incomplete`] when
/// more bytes are needed, and an error for a header section or declared
/// body beyond `limits.max_message_len` (close the connection then).
pub fn frame(buf: &[u8], limits: &Limits) -> Result<Frame, ParseError> {
    if buf.is_empty() {
        return Err(ParseError::new(ErrorKind::Incomplete, 0));
    }
    let crlf = buf
        .iter()
        .take_while(|b| matches!(b, b'\r' | b'\n'))
        .count();
    if crlf > 0 {
        return Ok(Frame::KeepAlive(crlf));
    }
    let too_large = || {
        ParseError::new(
            ErrorKind::MessageTooLarge {
                limit: limits.max_message_len,
            },
            limits.max_message_len,
        )
    };
    let span = match find_head(buf) {
        Ok(s) => s,
        Err(e) if e.kind == ErrorKind::Incomplete && buf.len() > limits.max_message_len => {
            return Err(too_large())
        }
        Err(e) => return Err(e),
    };
    let head = &buf[..span.head_end];
    let head = std::str::from_utf8(head)
        .map_err(|e| ParseError::new(ErrorKind::InvalidUtf8, e.valid_up_to()))?;
    let mut pos = 0;
    next_field(head, &mut pos); // start line
    let mut length = None;
    while let Some((s, e)) = next_field(head, &mut pos) {
        let field = &head[s..e];
        // Only `Content-Length` or its compact `l` can name it (14 bytes
        // or 1, after any white space): other fields are passed over by
        // their first byte and length, without a search or a lookup.
        if !matches!(
            field.as_bytes().first(),
            Some(b'c' | b'C' | b'l' | b'L' | b' ' | b'\t')
        ) {
            continue;
        }
        let Some(colon) = find_byte(field, b':') else {
            continue;
        };
        let name = trim_lws(&field[..colon]);
        if !matches!(name.len(), 1 | 14) || HeaderName::from_name(name) != HeaderName::ContentLength
        {
            continue;
        }
        let v = trim_lws(&field[colon + 1..]);
        let n = parse_u64(v)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or(ParseError::new(
                ErrorKind::InvalidHeader {
                    name: HeaderName::ContentLength,
                    reason: "must be a non-negative decimal",
                },
                s + colon + 1,
            ))?;
        if length.replace(n).is_some() {
            return Err(ParseError::new(
                ErrorKind::DuplicateHeader(HeaderName::ContentLength),
                s,
            ));
        }
    }
    let n = length.ok_or(ParseError::new(
        ErrorKind::MissingHeader(HeaderName::ContentLength),
        span.head_end,
    ))?;
    let total = span.body_start.checked_add(n).ok_or_else(too_large)?;
    if total > limits.max_message_len {
        return Err(too_large());
    }
    if buf.len() < total {
        return Err(ParseError::new(ErrorKind::Incomplete, buf.len()));
    }
    Ok(Frame::Message(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSG: &[u8] =
        b"OPTIONS sip:a@b SIP/2.0\r\nVia: SIP/2.0/TCP h;branch=z9hG4bK1\r\nl: 4\r\n\r\nbody";

    #[test]
    fn frames_and_keepalives() {
        let l = Limits::DEFAULT;
        assert_eq!(frame(b"\r\n\r\nOPT", &l), Ok(Frame::KeepAlive(4)));
        assert_eq!(frame(MSG, &l), Ok(Frame::Message(MSG.len())));
        let mut two = MSG.to_vec();
        two.extend_from_slice(MSG);
        assert_eq!(frame(&two, &l), Ok(Frame::Message(MSG.len())));
        assert_eq!(frame(b"", &l).unwrap_err().kind, ErrorKind::Incomplete);
        for cut in 1..MSG.len() {
            assert_eq!(
                frame(&MSG[..cut], &l).unwrap_err().kind,
                ErrorKind::Incomplete,
                "cut {cut}"
            );
        }
    }

    #[test]
    fn limits_and_missing_length() {
        let small = Limits {
            max_message_len: 40,
            ..Limits::DEFAULT
        };
        assert!(matches!(
            frame(MSG, &small).unwrap_err().kind,
            ErrorKind::MessageTooLarge { .. }
        ));
        assert!(matches!(
            frame(&[b'a'; 100], &small).unwrap_err().kind,
            ErrorKind::MessageTooLarge { .. }
        ));
        let e = frame(
            b"OPTIONS sip:a@b SIP/2.0\r\nVia: x\r\n\r\n",
            &Limits::DEFAULT,
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::MissingHeader(HeaderName::ContentLength));
        let e = frame(
            b"OPTIONS sip:a@b SIP/2.0\r\nContent-Length: -1\r\n\r\n",
            &Limits::DEFAULT,
        )
        .unwrap_err();
        assert!(matches!(e.kind, ErrorKind::InvalidHeader { .. }));
        let huge = b"OPTIONS sip:a@b SIP/2.0\r\nContent-Length: 99999999999999999999999\r\n\r\n";
        assert!(frame(huge, &Limits::DEFAULT).is_err());
    }

    #[test]
    fn the_length_is_found_however_it_is_spelled_and_only_under_its_names() {
        let l = Limits::DEFAULT;
        for (head, body) in [
            ("content-LENGTH : 2", 2),
            ("L:3", 3),
            ("Content-Length\t:\t1", 1),
            ("Content-Lengthx: 9\r\nl: 0", 0),
            ("X-Content-Length: 9\r\nContent-Length: 4", 4),
        ] {
            let msg = format!("OPTIONS sip:a@b SIP/2.0\r\n{head}\r\n\r\nbodybodybody");
            let end = msg.find("\r\n\r\n").expect("head") + 4;
            assert_eq!(
                frame(msg.as_bytes(), &l),
                Ok(Frame::Message(end + body)),
                "{head}"
            );
        }
        let e = frame(b"OPTIONS sip:a@b SIP/2.0\r\nlength: 4\r\n\r\n", &l).unwrap_err();
        assert_eq!(e.kind, ErrorKind::MissingHeader(HeaderName::ContentLength));
    }
}
