//! CSeq (RFC 3261 §8.1.1.5, §20.16).

use crate::error::{ErrorKind, ParseError};
use crate::header::HeaderName;
use crate::method::Method;
use crate::scan::{is_token, parse_u64, Cursor};

/// A CSeq value: sequence number and method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CSeq<'a> {
    /// Sequence number, always below 2^31.
    pub seq: u32,
    /// Method.
    pub method: Method<'a>,
}

fn invalid(reason: &'static str, offset: usize) -> ParseError {
    ParseError::new(
        ErrorKind::InvalidHeader {
            name: HeaderName::CSeq,
            reason,
        },
        offset,
    )
}

/// Parses `1*DIGIT LWS Method`.
pub(crate) fn parse_cseq(value: &str, base: usize) -> Result<CSeq<'_>, ParseError> {
    let mut c = Cursor::new(value, base);
    let digits = c.take_while(|b| b.is_ascii_digit());
    let seq = parse_u64(digits)
        .filter(|n| *n < 1 << 31)
        .ok_or_else(|| invalid("sequence number must be a decimal below 2^31", base))?;
    if !c.skip_lws() {
        return Err(invalid("expected white space before method", c.offset()));
    }
    let method = c.take_while(is_token);
    if method.is_empty() {
        return Err(invalid("missing method", c.offset()));
    }
    c.skip_lws();
    if !c.at_end() {
        return Err(invalid("unexpected text after method", c.offset()));
    }
    Ok(CSeq {
        seq: seq as u32,
        method: Method::from_token(method),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let c = parse_cseq("0009\r\n  INVITE", 0).unwrap();
        assert_eq!((c.seq, c.method), (9, Method::Invite));
        assert!(parse_cseq("36893488147419103232 REGISTER", 0).is_err());
        assert!(parse_cseq("2147483648 REGISTER", 0).is_err());
        assert!(parse_cseq("2147483647 REGISTER", 0).is_ok());
        assert!(parse_cseq("1", 0).is_err());
        assert!(parse_cseq("1INVITE", 0).is_err());
        assert!(parse_cseq("-1 INVITE", 0).is_err());
        assert!(parse_cseq("1 INVITE x", 0).is_err());
    }
}
