//! Errors raised while decoding SIP messages (RFC 3261 §7, §25).
//!
//! Every error carries the byte offset into the input where decoding
//! stopped, so an operator can point at the offending character.

use crate::header::HeaderName;
use crate::status::StatusCode;

/// Why a URI was rejected (RFC 3261 §19.1, §25.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UriError {
    /// The URI is empty.
    #[error("empty URI")]
    Empty,
    /// The scheme is missing or contains characters outside `ALPHA *(ALPHA / DIGIT / "+" / "-" / ".")`.
    #[error("missing or malformed URI scheme")]
    Scheme,
    /// A character not allowed in the user part.
    #[error("invalid character in URI user part")]
    User,
    /// A character not allowed in the password part.
    #[error("invalid character in URI password")]
    Password,
    /// The host is empty or not a hostname, IPv4 address or IPv6 reference.
    #[error("missing or malformed URI host")]
    Host,
    /// The port is not a decimal number below 65536.
    #[error("malformed URI port")]
    Port,
    /// A URI parameter is empty or contains characters outside `paramchar`.
    #[error("malformed URI parameter")]
    Param,
    /// A URI header (`?name=value`) is malformed.
    #[error("malformed URI header")]
    Headers,
    /// URI headers are not allowed in a Request-URI (RFC 3261 §19.1.1).
    #[error("URI headers (?...) are not allowed in a Request-URI")]
    HeadersInRequestUri,
    /// A `%` not followed by two hexadecimal digits.
    #[error("bad %-escape in URI")]
    Escape,
    /// Characters not allowed in an opaque (non-SIP) URI.
    #[error("invalid character in URI")]
    Opaque,
}

/// What went wrong while decoding a SIP message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The input ends before the message does (stream framing: read more).
    #[error("incomplete message")]
    Incomplete,
    /// The input is empty or holds only blank lines.
    #[error("empty message")]
    Empty,
    /// The message is longer than the configured limit.
    #[error("message exceeds the {limit}-byte limit")]
    MessageTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// More header fields than the configured limit.
    #[error("more than {limit} header fields")]
    TooManyHeaders {
        /// The limit.
        limit: usize,
    },
    /// A header field (with its continuation lines) is longer than the limit.
    #[error("header field longer than {limit} bytes")]
    HeaderTooLong {
        /// The limit in bytes.
        limit: usize,
    },
    /// More comma-separated values or parameters than the limit.
    #[error("more than {limit} values or parameters in one header field")]
    TooManyValues {
        /// The limit.
        limit: usize,
    },
    /// The start line or a header field is not valid UTF-8.
    #[error("header section is not valid UTF-8")]
    InvalidUtf8,
    /// A CR not followed by LF inside the header section.
    #[error("bare CR inside a header line")]
    BareCr,
    /// A malformed Request-Line or Status-Line.
    #[error("malformed start line: {0}")]
    StartLine(&'static str),
    /// The method is not a token.
    #[error("malformed method")]
    Method,
    /// The SIP version is not SIP/2.0 (answer 505).
    #[error("unsupported SIP version (only SIP/2.0)")]
    UnsupportedVersion,
    /// The status code is not three digits in 100..=699.
    #[error("malformed status code")]
    StatusCode,
    /// The Request-URI, or a URI inside a header field, is malformed.
    #[error("{0}")]
    Uri(UriError),
    /// A header line with no name, or a name that is not a token.
    #[error("malformed header field name")]
    HeaderName,
    /// A header line with no colon after its name.
    #[error("missing ':' after header field name")]
    MissingColon,
    /// The first header line starts with whitespace (a continuation of nothing).
    #[error("continuation line with no header field before it")]
    OrphanContinuation,
    /// A header field value does not follow its grammar.
    #[error("invalid {name} header: {reason}")]
    InvalidHeader {
        /// Which header.
        name: HeaderName,
        /// What rule it broke.
        reason: &'static str,
    },
    /// A header field the message must carry is absent (RFC 3261 §8.1.1).
    #[error("missing mandatory {0} header")]
    MissingHeader(HeaderName),
    /// A single-valued header field appears more than once.
    #[error("{0} header appears more than once")]
    DuplicateHeader(HeaderName),
    /// The CSeq method differs from the request method (RFC 3261 §8.1.1.5).
    #[error("CSeq method does not match the request method")]
    CSeqMethodMismatch,
    /// Content-Length declares more bytes than the message holds.
    #[error("Content-Length is {declared} but only {available} body bytes are present")]
    BodyTruncated {
        /// Declared by Content-Length.
        declared: usize,
        /// Present after the header section.
        available: usize,
    },
}

/// A decoding error with the byte offset where it was detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{kind} (at byte {offset})")]
pub struct ParseError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// Byte offset into the input.
    pub offset: usize,
}

impl ParseError {
    /// Creates an error of `kind` at `offset`.
    pub const fn new(kind: ErrorKind, offset: usize) -> Self {
        Self { kind, offset }
    }

    /// The status a server answers a request that failed this way with
    /// (RFC 3261 §8.2, §21.4.19, §21.5.7).
    pub fn status(&self) -> StatusCode {
        match self.kind {
            ErrorKind::UnsupportedVersion => StatusCode::VERSION_NOT_SUPPORTED,
            ErrorKind::MessageTooLarge { .. } => StatusCode::MESSAGE_TOO_LARGE,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}
