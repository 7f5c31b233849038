//! Message boundaries on stream transports (RFC 3261 §18.3, RFC 5626 §3.5.1).
//!
//! On TCP and TLS, Content-Length is mandatory and delimits the body.
//! CRLFs between messages are keep-alives and are skipped.

use crate::error::{ErrorKind, ParseError};
use crate::header::HeaderName;
use crate::limits::Limits;
use crate::message::{find_head, next_field};
use crate::scan::{parse_u64, trim_lws};

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
        let Some(colon) = field.find(':') else {
            continue;
        };
        if HeaderName::from_name(trim_lws(&field[..colon])) != HeaderName::ContentLength {
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
}
