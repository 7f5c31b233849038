//! SIP messages: start line, header section and body (RFC 3261 §7).
//!
//! ```text
//! INVITE sip:bob@biloxi.example.com SIP/2.0      <- start line
//! Via: SIP/2.0/UDP pc33.atlanta.example.com;...   \
//! From: Alice <sip:alice@atlanta.example.com>;...  > header section
//! ...                                             /
//!                                                 <- empty line
//! v=0 ...                                         <- body (Content-Length)
//! ```
//!
//! [`Message::parse`] borrows the input buffer and allocates nothing. It
//! checks the whole header section's framing and fully decodes the header
//! fields every proxy and registrar needs (Via, From, To, Call-ID, CSeq,
//! Max-Forwards, Contact, Route, Record-Route, Expires, Content-Length,
//! Content-Type); other fields are decoded on demand.

use crate::contact::{parse_contact, parse_contacts, parse_delta_seconds, Contact};
use crate::cseq::{parse_cseq, CSeq};
use crate::error::{ErrorKind, ParseError};
use crate::header::{Header, HeaderName};
use crate::limits::Limits;
use crate::method::Method;
use crate::name_addr::{parse_list, parse_name_addr, parse_single, NameAddr};
use crate::scan::{offset_in, parse_u64, Cursor};
use crate::status::StatusCode;
use crate::uri::Uri;
use crate::via::{parse_via, parse_via_list, Via};

pub(crate) mod checks;
pub mod glance;

use checks::{
    check_call_id, check_content_type, check_date, check_warning, invalid, parse_start_line,
    start_err,
};
pub use glance::Glance;

mod lines;
use lines::checked_field;
pub(crate) use lines::{find_head, next_field, split_field};

/// The first line of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartLine<'a> {
    /// `Method SP Request-URI SP SIP-Version`
    Request {
        /// The method.
        method: Method<'a>,
        /// The Request-URI.
        uri: Uri<'a>,
    },
    /// `SIP-Version SP Status-Code SP Reason-Phrase`
    Response {
        /// The status code.
        status: StatusCode,
        /// The reason phrase (may be empty).
        reason: &'a str,
    },
}

/// A parsed SIP message borrowing its input.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    raw: &'a [u8],
    head: &'a str,
    base: usize,
    start: StartLine<'a>,
    start_line: &'a str,
    body: &'a [u8],
    header_count: usize,
    index: [Field; INDEXED],
    indexed: usize,
    rest_at: Option<usize>,
    call_id: &'a str,
    cseq: CSeq<'a>,
    from: NameAddr<'a>,
    to: NameAddr<'a>,
    top_via: Via<'a>,
    top_via_line: &'a str,
    via_count: usize,
    max_forwards: Option<u8>,
    max_forwards_raw: Option<&'a str>,
    content_length: Option<usize>,
    content_type: Option<&'a str>,
    expires: Option<u32>,
    contact_star: bool,
    contact_count: usize,
    /// The first Contact value, as the parse checked it.
    first_contact: Option<Contact<'a>>,
    first_route: Option<(&'a str, NameAddr<'a>)>,
    route_count: usize,
}

/// Header fields the parse remembers, so that looking one up later does
/// not scan the header section again; fields past these are scanned.
const INDEXED: usize = 24;

/// Where one header field lies in the header section (byte offsets; a
/// field ending past 64 KiB is left to the scan).
#[derive(Debug, Clone, Copy)]
struct Field {
    name: HeaderName,
    start: u16,
    name_end: u16,
    value_start: u16,
    value_end: u16,
    end: u16,
}

impl Field {
    const EMPTY: Field = Field {
        name: HeaderName::Other,
        start: 0,
        name_end: 0,
        value_start: 0,
        value_end: 0,
        end: 0,
    };

    fn header<'a>(&self, head: &'a str) -> Header<'a> {
        let at = usize::from;
        Header {
            name: self.name,
            raw_name: &head[at(self.start)..at(self.name_end)],
            value: &head[at(self.value_start)..at(self.value_end)],
            line: &head[at(self.start)..at(self.end)],
        }
    }
}

/// The header fields of a parsed [`Message`], in order.
#[derive(Debug, Clone)]
pub struct Headers<'m, 'a> {
    head: &'a str,
    indexed: std::slice::Iter<'m, Field>,
    rest: Option<HeaderIter<'a>>,
}

impl<'a> Iterator for Headers<'_, 'a> {
    type Item = Header<'a>;

    fn next(&mut self) -> Option<Header<'a>> {
        match self.indexed.next() {
            Some(f) => Some(f.header(self.head)),
            None => self.rest.as_mut()?.next(),
        }
    }
}

impl<'a> Headers<'_, 'a> {
    /// The next field whose name `keep` chooses: a remembered field is
    /// matched by name before it is sliced out.
    fn next_where(&mut self, keep: impl Fn(HeaderName) -> bool) -> Option<Header<'a>> {
        if let Some(f) = self.indexed.by_ref().find(|f| keep(f.name)) {
            return Some(f.header(self.head));
        }
        self.rest.as_mut()?.find(|h| keep(h.name))
    }
}

/// The header fields of one name in a parsed [`Message`], in order: the
/// remembered fields are matched by name before any is sliced out.
#[derive(Debug, Clone)]
pub struct Named<'m, 'a> {
    headers: Headers<'m, 'a>,
    name: HeaderName,
}

impl<'a> Iterator for Named<'_, 'a> {
    type Item = Header<'a>;

    fn next(&mut self) -> Option<Header<'a>> {
        let name = self.name;
        self.headers.next_where(|n| n == name)
    }
}

/// The header fields whose names `keep` chooses, in order.
#[derive(Debug, Clone)]
pub(crate) struct Chosen<'m, 'a> {
    headers: Headers<'m, 'a>,
    keep: fn(HeaderName) -> bool,
}

impl<'a> Iterator for Chosen<'_, 'a> {
    type Item = Header<'a>;

    fn next(&mut self) -> Option<Header<'a>> {
        self.headers.next_where(self.keep)
    }
}

/// The header fields found by the parse.
struct Indexed {
    count: usize,
    index: [Field; INDEXED],
    indexed: usize,
    rest_at: Option<usize>,
}

/// Where the header section ends.
pub(crate) struct HeadSpan {
    /// Offset of the start line (after leading CRLFs).
    pub lead: usize,
    /// Offset one past the last header line's content.
    pub head_end: usize,
    /// Offset of the first body byte.
    pub body_start: usize,
}

/// Splits a header section into header fields, joining continuation lines.
#[derive(Debug, Clone)]
pub struct HeaderIter<'a> {
    head: &'a str,
    pos: usize,
}

impl<'a> HeaderIter<'a> {
    /// Iterates over the header fields of a header section that starts
    /// with a start line; stops at the first malformed field.
    pub fn over(head: &'a str) -> Self {
        let mut pos = 0;
        next_field(head, &mut pos);
        Self { head, pos }
    }
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = Header<'a>;

    fn next(&mut self) -> Option<Header<'a>> {
        let (s, e) = next_field(self.head, &mut self.pos)?;
        let line = &self.head[s..e];
        let (raw_name, value) = split_field(line).ok()?;
        Some(Header {
            name: HeaderName::from_name(raw_name),
            raw_name,
            value,
            line,
        })
    }
}

impl<'a> Message<'a> {
    /// Parses one message from a datagram with default [`Limits`].
    ///
    /// Without Content-Length the body runs to the end of the buffer
    /// (RFC 3261 §18.3); with it, bytes beyond the body are ignored
    /// (see [`Message::len`]).
    pub fn parse(buf: &'a [u8]) -> Result<Self, ParseError> {
        Self::parse_with(buf, &Limits::DEFAULT)
    }

    /// Parses one message with the given limits.
    pub fn parse_with(buf: &'a [u8], limits: &Limits) -> Result<Self, ParseError> {
        if buf.len() > limits.max_message_len {
            return Err(ParseError::new(
                ErrorKind::MessageTooLarge {
                    limit: limits.max_message_len,
                },
                limits.max_message_len,
            ));
        }
        let span = find_head(buf)?;
        let base = span.lead;
        let head = std::str::from_utf8(&buf[base..span.head_end])
            .map_err(|e| ParseError::new(ErrorKind::InvalidUtf8, base + e.valid_up_to()))?;
        let mut pos = 0;
        let (s, e) =
            checked_field(head, &mut pos, base)?.ok_or(ParseError::new(ErrorKind::Empty, base))?;
        let start_line = &head[s..e];
        if matches!(start_line.as_bytes().first(), Some(b' ' | b'\t')) {
            return Err(start_err("start line begins with white space", base));
        }
        // A folded start line would have been joined by next_field.
        if start_line.contains('\n') {
            return Err(start_err(
                "start line cannot be continued on the next line",
                base,
            ));
        }
        let start = parse_start_line(start_line, base, limits)?;

        let mut b = Builder::default();
        let mut count = 0usize;
        let mut index = [Field::EMPTY; INDEXED];
        let mut indexed = 0;
        let mut rest_at = None;
        while let Some((fs, fe)) = checked_field(head, &mut pos, base)? {
            count += 1;
            if count > limits.max_headers {
                return Err(ParseError::new(
                    ErrorKind::TooManyHeaders {
                        limit: limits.max_headers,
                    },
                    base + fs,
                ));
            }
            if fe - fs > limits.max_header_len {
                return Err(ParseError::new(
                    ErrorKind::HeaderTooLong {
                        limit: limits.max_header_len,
                    },
                    base + fs,
                ));
            }
            let field = &head[fs..fe];
            let (raw_name, value) =
                split_field(field).map_err(|(k, o)| ParseError::new(k, base + fs + o))?;
            let name = HeaderName::from_name(raw_name);
            let value_at = offset_in(head, value);
            let slot = index
                .get_mut(indexed)
                .filter(|_| u16::try_from(fe).is_ok() && rest_at.is_none());
            if let Some(slot) = slot {
                indexed += 1;
                // Every offset is at most `fe`, checked to fit.
                let o = |n: usize| n as u16;
                *slot = Field {
                    name,
                    start: o(fs),
                    name_end: o(fs + raw_name.len()),
                    value_start: o(value_at),
                    value_end: o(value_at + value.len()),
                    end: o(fe),
                };
            } else if rest_at.is_none() {
                rest_at = Some(fs);
            }
            b.add(name, field, value, base + value_at, limits)?;
        }
        let headers = Indexed {
            count,
            index,
            indexed,
            rest_at,
        };
        b.finish(buf, head, base, start, start_line, headers, &span)
    }

    /// Bytes consumed: header section plus Content-Length body. Bytes after
    /// that in a datagram are not part of this message (RFC 4475 §3.1.1.8).
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Never true: a message has at least a start line.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The message bytes (header section and body).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// Offset of the start line in the input (leading CRLFs skipped).
    pub fn start_offset(&self) -> usize {
        self.base
    }

    /// The header section from the start line to the last header field,
    /// without the final empty line.
    pub fn head(&self) -> &'a str {
        self.head
    }

    /// The start line as written.
    pub fn start_line_str(&self) -> &'a str {
        self.start_line
    }

    /// The decoded start line.
    pub fn start_line(&self) -> &StartLine<'a> {
        &self.start
    }

    /// Whether this is a request.
    pub fn is_request(&self) -> bool {
        matches!(self.start, StartLine::Request { .. })
    }

    /// The request method, or for a response the CSeq method.
    pub fn method(&self) -> Method<'a> {
        match self.start {
            StartLine::Request { method, .. } => method,
            StartLine::Response { .. } => self.cseq.method,
        }
    }

    /// The Request-URI of a request.
    pub fn request_uri(&self) -> Option<&Uri<'a>> {
        match &self.start {
            StartLine::Request { uri, .. } => Some(uri),
            StartLine::Response { .. } => None,
        }
    }

    /// The status of a response.
    pub fn status(&self) -> Option<StatusCode> {
        match self.start {
            StartLine::Response { status, .. } => Some(status),
            StartLine::Request { .. } => None,
        }
    }

    /// The reason phrase of a response.
    pub fn reason(&self) -> Option<&'a str> {
        match self.start {
            StartLine::Response { reason, .. } => Some(reason),
            StartLine::Request { .. } => None,
        }
    }

    /// Call-ID.
    pub fn call_id(&self) -> &'a str {
        self.call_id
    }

    /// CSeq.
    pub fn cseq(&self) -> CSeq<'a> {
        self.cseq
    }

    /// From.
    pub fn from(&self) -> &NameAddr<'a> {
        &self.from
    }

    /// To.
    pub fn to(&self) -> &NameAddr<'a> {
        &self.to
    }

    /// The topmost Via value.
    pub fn top_via(&self) -> &Via<'a> {
        &self.top_via
    }

    /// The whole header field line holding the topmost Via.
    pub fn top_via_line(&self) -> &'a str {
        self.top_via_line
    }

    /// Number of Via values across all Via fields.
    pub fn via_count(&self) -> usize {
        self.via_count
    }

    /// All Via values, top first.
    pub fn vias(&self) -> impl Iterator<Item = Via<'a>> + '_ {
        self.headers_named(HeaderName::Via)
            .flat_map(|h| CommaValues {
                cursor: Cursor::new(h.value, 0),
                done: false,
                parse: |c: &mut Cursor<'a>| parse_via(c, usize::MAX).ok(),
            })
    }

    /// Max-Forwards, if present.
    pub fn max_forwards(&self) -> Option<u8> {
        self.max_forwards
    }

    /// The Max-Forwards value text, for in-place edits.
    pub fn max_forwards_raw(&self) -> Option<&'a str> {
        self.max_forwards_raw
    }

    /// Content-Length, if present.
    pub fn content_length(&self) -> Option<usize> {
        self.content_length
    }

    /// Content-Type, if present.
    pub fn content_type(&self) -> Option<&'a str> {
        self.content_type
    }

    /// The Expires header value (saturated at `u32::MAX`).
    pub fn expires(&self) -> Option<u32> {
        self.expires
    }

    /// Whether the message has `Contact: *`.
    pub fn is_contact_star(&self) -> bool {
        self.contact_star
    }

    /// Number of Contact values (0 for `*`).
    pub fn contact_count(&self) -> usize {
        self.contact_count
    }

    /// Contact values in order (none for `*`).
    /// The usual single contact is the one the parse kept; more are
    /// parsed again here.
    pub fn contacts(&self) -> impl Iterator<Item = Contact<'a>> + '_ {
        let (star, single) = (self.contact_star, self.contact_count == 1);
        let kept = if single { self.first_contact } else { None };
        kept.into_iter().chain(
            self.headers_named(HeaderName::Contact)
                .filter(move |_| !star && !single)
                .flat_map(|h| CommaValues {
                    cursor: Cursor::new(h.value, 0),
                    done: false,
                    parse: |c: &mut Cursor<'a>| parse_contact(c, usize::MAX).ok(),
                }),
        )
    }

    /// Route values in order.
    pub fn routes(&self) -> impl Iterator<Item = NameAddr<'a>> + '_ {
        self.name_addrs(HeaderName::Route)
    }

    /// Record-Route values in order (the last proxy's first).
    pub fn record_routes(&self) -> impl Iterator<Item = NameAddr<'a>> + '_ {
        self.name_addrs(HeaderName::RecordRoute)
    }

    /// The bracketed name-addr values of the `name` fields, in order.
    fn name_addrs(&self, name: HeaderName) -> impl Iterator<Item = NameAddr<'a>> + '_ {
        self.headers_named(name).flat_map(move |h| CommaValues {
            cursor: Cursor::new(h.value, 0),
            done: false,
            parse: move |c: &mut Cursor<'a>| {
                parse_name_addr(c, name, usize::MAX, true, |_, _, _| Ok(())).ok()
            },
        })
    }

    /// The first Route value and the field line holding it.
    pub fn first_route(&self) -> Option<(&'a str, &NameAddr<'a>)> {
        self.first_route.as_ref().map(|(l, n)| (*l, n))
    }

    /// Number of Route values.
    pub fn route_count(&self) -> usize {
        self.route_count
    }

    /// Number of header fields.
    pub fn header_count(&self) -> usize {
        self.header_count
    }

    /// All header fields in order.
    pub fn headers(&self) -> Headers<'_, 'a> {
        Headers {
            head: self.head,
            indexed: self.index[..self.indexed].iter(),
            rest: self.rest_at.map(|pos| HeaderIter {
                head: self.head,
                pos,
            }),
        }
    }

    /// The header fields whose names `keep` chooses, in order.
    pub(crate) fn headers_where(&self, keep: fn(HeaderName) -> bool) -> Chosen<'_, 'a> {
        Chosen {
            headers: self.headers(),
            keep,
        }
    }

    /// Header fields with the given name, in order.
    pub fn headers_named(&self, name: HeaderName) -> Named<'_, 'a> {
        Named {
            headers: self.headers(),
            name,
        }
    }

    /// The first value of a header, by classified name.
    pub fn header(&self, name: HeaderName) -> Option<&'a str> {
        self.headers_named(name).next().map(|h| h.value)
    }

    /// The first value of a header, by case-insensitive raw name.
    pub fn header_raw(&self, name: &str) -> Option<&'a str> {
        self.headers()
            .find(|h| h.raw_name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }

    /// The body.
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// Offset of the first byte of `s`, which must borrow from this message,
    /// relative to the start of the input buffer.
    pub fn offset_of(&self, s: &str) -> usize {
        self.base + offset_in(self.head, s)
    }

    /// Decodes the header fields that [`Message::parse`] leaves for later
    /// (credentials and challenges), so that a message can be checked in
    /// full. Returns the first error.
    pub fn validate_all(&self) -> Result<(), ParseError> {
        for h in self.headers() {
            let at = self.offset_of(h.value);
            match h.name {
                HeaderName::Authorization | HeaderName::ProxyAuthorization => {
                    crate::auth::Credentials::parse_at(h.value, at, h.name)?;
                }
                HeaderName::WwwAuthenticate | HeaderName::ProxyAuthenticate => {
                    crate::auth::Challenge::parse_at(h.value, at, h.name)?;
                }
                HeaderName::MinExpires => {
                    parse_delta_seconds(h.value)
                        .ok_or_else(|| invalid(h.name, "must be delta-seconds", at))?;
                }
                HeaderName::RetryAfter => {
                    let digits = h
                        .value
                        .split(|c: char| !c.is_ascii_digit())
                        .next()
                        .unwrap_or("");
                    parse_u64(digits)
                        .filter(|n| u32::try_from(*n).is_ok())
                        .ok_or_else(|| {
                            invalid(h.name, "must start with delta-seconds below 2^32", at)
                        })?;
                }
                HeaderName::Warning => check_warning(h.value, at)?,
                HeaderName::Date => check_date(h.value, at)?,
                _ => {}
            }
        }
        Ok(())
    }
}

/// Iterates over comma-separated values of one field.
struct CommaValues<'a, F> {
    cursor: Cursor<'a>,
    done: bool,
    parse: F,
}

impl<'a, T, F: FnMut(&mut Cursor<'a>) -> Option<T>> Iterator for CommaValues<'a, F> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        if self.done {
            return None;
        }
        let item = (self.parse)(&mut self.cursor);
        self.cursor.skip_lws();
        if item.is_none() || !self.cursor.eat_sep(b',') {
            self.done = true;
        }
        item
    }
}

/// Accumulates the decoded fields while the header section is scanned.
#[derive(Default)]
struct Builder<'a> {
    call_id: Option<&'a str>,
    cseq: Option<CSeq<'a>>,
    from: Option<NameAddr<'a>>,
    to: Option<NameAddr<'a>>,
    top_via: Option<(Via<'a>, &'a str)>,
    via_count: usize,
    max_forwards: Option<(u8, &'a str)>,
    content_length: Option<usize>,
    content_type: Option<&'a str>,
    expires: Option<u32>,
    contact_star: bool,
    contact_count: usize,
    /// The first Contact value, as the parse checked it.
    first_contact: Option<Contact<'a>>,
    first_route: Option<(&'a str, NameAddr<'a>)>,
    route_count: usize,
}

fn once<T>(slot: &Option<T>, name: HeaderName, at: usize) -> Result<(), ParseError> {
    if slot.is_some() {
        Err(ParseError::new(ErrorKind::DuplicateHeader(name), at))
    } else {
        Ok(())
    }
}

impl<'a> Builder<'a> {
    fn add(
        &mut self,
        name: HeaderName,
        field: &'a str,
        value: &'a str,
        at: usize,
        limits: &Limits,
    ) -> Result<(), ParseError> {
        match name {
            HeaderName::Via => {
                let (mut top, mut n) = (None, 0);
                parse_via_list(value, at, limits.max_values, |v| {
                    if top.is_none() {
                        top = Some(v);
                    }
                    n += 1;
                })?;
                if self.top_via.is_none() {
                    self.top_via = top.map(|v| (v, field));
                }
                self.via_count += n;
            }
            HeaderName::From => {
                once(&self.from, name, at)?;
                self.from = Some(parse_single(value, at, name, limits.max_values)?);
            }
            HeaderName::To => {
                once(&self.to, name, at)?;
                self.to = Some(parse_single(value, at, name, limits.max_values)?);
            }
            HeaderName::CallId => {
                once(&self.call_id, name, at)?;
                check_call_id(value, at)?;
                self.call_id = Some(value);
            }
            HeaderName::CSeq => {
                once(&self.cseq, name, at)?;
                self.cseq = Some(parse_cseq(value, at)?);
            }
            HeaderName::MaxForwards => {
                once(&self.max_forwards, name, at)?;
                let n = parse_u64(value)
                    .and_then(|n| u8::try_from(n).ok())
                    .ok_or_else(|| invalid(name, "must be a decimal in 0..=255", at))?;
                self.max_forwards = Some((n, value));
            }
            HeaderName::ContentLength => {
                once(&self.content_length, name, at)?;
                let n = parse_u64(value)
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|n| *n <= limits.max_message_len)
                    .ok_or_else(|| {
                        invalid(
                            name,
                            "must be a non-negative decimal within the message size limit",
                            at,
                        )
                    })?;
                self.content_length = Some(n);
            }
            HeaderName::ContentType => {
                once(&self.content_type, name, at)?;
                check_content_type(value, at, limits)?;
                self.content_type = Some(value);
            }
            HeaderName::Expires => {
                once(&self.expires, name, at)?;
                self.expires = Some(
                    parse_delta_seconds(value)
                        .ok_or_else(|| invalid(name, "must be delta-seconds", at))?,
                );
            }
            HeaderName::Contact => {
                let (mut n, first) = (0, &mut self.first_contact);
                let star = parse_contacts(value, at, limits.max_values, |c| {
                    if first.is_none() {
                        *first = Some(c);
                    }
                    n += 1;
                })?;
                if (star && (self.contact_count > 0 || self.contact_star))
                    || (self.contact_star && n > 0)
                {
                    return Err(invalid(name, "'*' must be the only Contact", at));
                }
                self.contact_star |= star;
                self.contact_count += n;
            }
            HeaderName::Route | HeaderName::RecordRoute | HeaderName::Path => {
                let mut n = 0;
                let mut first = None;
                parse_list(value, at, name, limits.max_values, true, |na| {
                    if first.is_none() {
                        first = Some(na);
                    }
                    n += 1;
                    Ok(())
                })?;
                if name == HeaderName::Route {
                    if self.first_route.is_none() {
                        self.first_route = first.map(|na| (field, na));
                    }
                    self.route_count += n;
                }
            }
            _ => {}
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        self,
        buf: &'a [u8],
        head: &'a str,
        base: usize,
        start: StartLine<'a>,
        start_line: &'a str,
        headers: Indexed,
        span: &HeadSpan,
    ) -> Result<Message<'a>, ParseError> {
        let end = base + head.len();
        let missing = |h| ParseError::new(ErrorKind::MissingHeader(h), end);
        let (top_via, top_via_line) = self.top_via.ok_or_else(|| missing(HeaderName::Via))?;
        let from = self.from.ok_or_else(|| missing(HeaderName::From))?;
        let to = self.to.ok_or_else(|| missing(HeaderName::To))?;
        let call_id = self.call_id.ok_or_else(|| missing(HeaderName::CallId))?;
        let cseq = self.cseq.ok_or_else(|| missing(HeaderName::CSeq))?;
        if let StartLine::Request { method, .. } = start {
            if method.as_str() != cseq.method.as_str() {
                return Err(ParseError::new(ErrorKind::CSeqMethodMismatch, base));
            }
        }
        let available = buf.len() - span.body_start;
        let body_len = match self.content_length {
            Some(n) if n > available => {
                return Err(ParseError::new(
                    ErrorKind::BodyTruncated {
                        declared: n,
                        available,
                    },
                    buf.len(),
                ))
            }
            Some(n) => n,
            None => available,
        };
        let total = span.body_start + body_len;
        Ok(Message {
            raw: &buf[base..total],
            head,
            base,
            start,
            start_line,
            body: &buf[span.body_start..total],
            header_count: headers.count,
            index: headers.index,
            indexed: headers.indexed,
            rest_at: headers.rest_at,
            call_id,
            cseq,
            from,
            to,
            top_via,
            top_via_line,
            via_count: self.via_count,
            max_forwards: self.max_forwards.map(|m| m.0),
            max_forwards_raw: self.max_forwards.map(|m| m.1),
            content_length: self.content_length,
            content_type: self.content_type,
            expires: self.expires,
            contact_star: self.contact_star,
            contact_count: self.contact_count,
            first_contact: self.first_contact,
            first_route: self.first_route,
            route_count: self.route_count,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REGISTER: &[u8] = b"REGISTER sip:registrar.biloxi.example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP bobspc.biloxi.example.com:5060;branch=z9hG4bKnashds7\r\n\
Max-Forwards: 70\r\n\
To: Bob <sip:bob@biloxi.example.com>\r\n\
From: Bob <sip:bob@biloxi.example.com>;tag=456248\r\n\
Call-ID: 843817637684230@998sdasdh09\r\n\
CSeq: 1826 REGISTER\r\n\
Contact: <sip:bob@192.0.2.4>\r\n\
Expires: 7200\r\n\
Content-Length: 0\r\n\r\n";

    #[test]
    fn register() {
        let m = Message::parse(REGISTER).unwrap();
        assert!(m.is_request());
        assert_eq!(m.method(), Method::Register);
        assert_eq!(
            m.request_uri().unwrap().as_str(),
            "sip:registrar.biloxi.example.com"
        );
        assert_eq!(m.top_via().branch(), Some("z9hG4bKnashds7"));
        assert_eq!(m.max_forwards(), Some(70));
        assert_eq!(m.from().tag(), Some("456248"));
        assert_eq!(m.to().tag(), None);
        assert_eq!(m.call_id(), "843817637684230@998sdasdh09");
        assert_eq!(m.cseq().seq, 1826);
        assert_eq!(m.contact_count(), 1);
        assert_eq!(
            m.contacts().next().unwrap().addr.uri().as_str(),
            "sip:bob@192.0.2.4"
        );
        assert_eq!(m.expires(), Some(7200));
        assert_eq!(m.header_count(), 9);
        assert_eq!(m.len(), REGISTER.len());
        assert!(m.body().is_empty());
    }

    /// The head's end as found line by line: the first LF followed by LF
    /// or CRLF.
    fn head_line_by_line(buf: &[u8]) -> Option<(usize, usize, usize)> {
        let lead = buf
            .iter()
            .take_while(|b| matches!(b, b'\r' | b'\n'))
            .count();
        for nl in (lead..buf.len()).filter(|&i| buf[i] == b'\n') {
            let ends = |n| (lead, lines::line_content_end(buf, nl), nl + n);
            match (buf.get(nl + 1), buf.get(nl + 2)) {
                (Some(b'\n'), _) => return Some(ends(2)),
                (Some(b'\r'), Some(b'\n')) => return Some(ends(3)),
                _ => {}
            }
        }
        None
    }

    #[test]
    fn the_head_ends_where_a_line_by_line_scan_ends_it() {
        // Every string of up to 9 bytes over 'a', CR and LF, each also
        // after a start line and followed by a body.
        let alphabet = [b'a', b'\r', b'\n'];
        let mut checked = 0;
        for len in 0..=9u32 {
            for mut code in 0..3usize.pow(len) {
                let mut tail = Vec::new();
                for _ in 0..len {
                    tail.push(alphabet[code % 3]);
                    code /= 3;
                }
                for prefix in [&b""[..], b"X\r\n", b"\r\nA: b\n"] {
                    for suffix in [&b""[..], b"body\n\n"] {
                        let mut buf = prefix.to_vec();
                        buf.extend_from_slice(&tail);
                        buf.extend_from_slice(suffix);
                        let found = find_head(&buf);
                        if buf.iter().all(|b| matches!(b, b'\r' | b'\n')) {
                            assert!(found.is_err(), "{buf:?}");
                        } else {
                            let found = found.ok().map(|h| (h.lead, h.head_end, h.body_start));
                            assert_eq!(found, head_line_by_line(&buf), "{buf:?}");
                        }
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 160_000);
    }

    #[test]
    fn the_single_contact_is_the_one_parsed_and_more_come_in_order() {
        let text = String::from_utf8(REGISTER.to_vec()).expect("utf-8");
        let with = |contacts: &str| {
            text.replace(
                "Contact: <sip:bob@192.0.2.4>\r\n",
                &format!("Contact: {contacts}\r\n"),
            )
        };
        let one = with("\"Bob\" <sip:bob@192.0.2.4;transport=tcp>;q=0.7;expires=60");
        let m = Message::parse(one.as_bytes()).unwrap();
        let c: Vec<_> = m.contacts().collect();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].addr.uri().as_str(), "sip:bob@192.0.2.4;transport=tcp");
        assert_eq!(c[0].addr.display_name(), Some("Bob"));
        assert_eq!((c[0].q, c[0].expires), (Some(700), Some(60)));
        let (head, _) = one.split_once("Contact: ").unwrap();
        let value = one[head.len() + 9..].split("\r\n").next().unwrap();
        let mut again = Vec::new();
        crate::contact::parse_contacts(value, 0, usize::MAX, |c| again.push(c)).unwrap();
        assert_eq!(c, again, "kept from the parse, the same as parsed anew");

        let two = with("<sip:a@192.0.2.1>, <sip:b@192.0.2.2>\r\nContact: <sip:c@192.0.2.3>");
        let m = Message::parse(two.as_bytes()).unwrap();
        let uris: Vec<_> = m.contacts().map(|c| c.addr.uri().as_str()).collect();
        assert_eq!(
            uris,
            ["sip:a@192.0.2.1", "sip:b@192.0.2.2", "sip:c@192.0.2.3"]
        );
        assert_eq!(m.contact_count(), 3);

        let star = with("*").replace("Expires: 7200", "Expires: 0");
        let m = Message::parse(star.as_bytes()).unwrap();
        assert!(m.is_contact_star());
        assert_eq!(m.contacts().count(), 0);
    }

    #[test]
    fn headers_past_the_index_are_scanned_in_order() {
        for extra in [0, INDEXED - 9, INDEXED - 8, INDEXED, 3 * INDEXED] {
            let mut text = String::from_utf8(REGISTER.to_vec()).expect("utf-8");
            let end = text.len() - 2;
            let mut more = String::new();
            for i in 0..extra {
                more.push_str(&format!("X-H{i}: v{i}\r\n folded {i}\r\n"));
            }
            text.insert_str(end, &more);
            let m = Message::parse(text.as_bytes()).expect("parses");
            let indexed: Vec<_> = m
                .headers()
                .map(|h| (h.name, h.raw_name, h.value, h.line))
                .collect();
            let scanned: Vec<_> = HeaderIter::over(m.head())
                .map(|h| (h.name, h.raw_name, h.value, h.line))
                .collect();
            assert_eq!(indexed, scanned, "{extra} extra headers");
            assert_eq!(indexed.len(), m.header_count());
            for &(name, ..) in &indexed {
                let named: Vec<_> = m.headers_named(name).map(|h| h.line).collect();
                let filtered: Vec<_> = m
                    .headers()
                    .filter(|h| h.name == name)
                    .map(|h| h.line)
                    .collect();
                assert_eq!(named, filtered, "{name:?} with {extra} extra headers");
            }
            assert_eq!(m.header(HeaderName::ContentLength), Some("0"));
            if extra > 0 {
                let last = format!("X-H{}", extra - 1);
                assert_eq!(
                    m.header_raw(&last),
                    Some(format!("v{}\r\n folded {}", extra - 1, extra - 1).as_str())
                );
            }
        }
    }

    #[test]
    fn lf_only_and_leading_crlf() {
        let lf: Vec<u8> = REGISTER
            .windows(2)
            .enumerate()
            .filter_map(|(i, w)| (w != b"\r\n").then_some(REGISTER[i]))
            .chain(std::iter::once(b'\n'))
            .collect();
        let mut with_lead = b"\r\n\r\n".to_vec();
        with_lead.extend_from_slice(&lf);
        let m = Message::parse(&with_lead).unwrap();
        assert_eq!(m.call_id(), "843817637684230@998sdasdh09");
        assert_eq!(m.start_offset(), 4);
    }

    #[test]
    fn response() {
        let m = Message::parse(b"SIP/2.0 180 Ringing\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>;tag=2\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n").unwrap();
        assert_eq!(m.status(), Some(StatusCode::RINGING));
        assert_eq!(m.reason(), Some("Ringing"));
        assert_eq!(m.method(), Method::Invite);
    }

    #[test]
    fn errors_have_kinds_and_offsets() {
        let e = Message::parse(b"REGISTER sip:x SIP/2.0\r\nVia SIP/2.0/UDP h\r\n\r\n").unwrap_err();
        assert_eq!(e.kind, ErrorKind::HeaderName);
        assert_eq!(e.offset, 28);
        let e = Message::parse(b"REGISTER sip:x SIP/2.0\r\nVia: SIP/2.0/UDP h\r\n").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Incomplete);
        let e = Message::parse(b"\r\n\r\n").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Empty);
        let e = Message::parse(b"REGISTER sip:x SIP/2.0\r\nVia: SIP/2.0/UDP h\rX: y\r\n\r\n")
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::BareCr);
        let e =
            Message::parse(b"REGISTER sip:x SIP/2.0\r\nVia: SIP/2.0/UDP h\r\n\r\n").unwrap_err();
        assert_eq!(e.kind, ErrorKind::MissingHeader(HeaderName::From));
    }
}
