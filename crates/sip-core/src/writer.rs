//! Serialisation into caller-provided buffers (RFC 3261 §7, §8.2.6).
//!
//! Writers append to a `Vec<u8>` the caller reuses, so a warmed-up buffer
//! makes serialisation allocation-free.

use crate::header::HeaderName;
use crate::message::{Message, StartLine};
use crate::status::StatusCode;

/// Appends the decimal form of `n` (every response's CSeq and
/// Content-Length, every journal record's four numbers).
pub fn write_u64(out: &mut Vec<u8>, n: u64) {
    let (buf, start) = decimal(n);
    out.extend_from_slice(&buf[start..]);
}

/// `n`'s decimal digits at the end of a buffer, two a division, and
/// where they start.
fn decimal(mut n: u64) -> ([u8; 20], usize) {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    while n >= 10 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n > 0 || i == buf.len() {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    (buf, i)
}

/// A buffer the text writers append to: bytes or a `String` (what they
/// write is text).
pub trait Text {
    /// Appends `s`.
    fn put(&mut self, s: &str);

    /// Appends ASCII bytes a writer made (digits, dots, colons): bytes
    /// take them as they are, a `String` each ASCII one as its character
    /// (any other byte appends nothing).
    fn put_ascii(&mut self, b: &[u8]);
}

impl Text for Vec<u8> {
    fn put(&mut self, s: &str) {
        self.extend_from_slice(s.as_bytes());
    }

    fn put_ascii(&mut self, b: &[u8]) {
        debug_assert!(b.is_ascii());
        self.extend_from_slice(b);
    }
}

impl Text for String {
    fn put(&mut self, s: &str) {
        self.push_str(s);
    }

    fn put_ascii(&mut self, b: &[u8]) {
        // A byte at a time: a UTF-8 check of the slice cost 183
        // instructions for a 12-digit tag.
        self.extend(b.iter().filter(|c| c.is_ascii()).map(|&c| char::from(c)));
    }
}

/// Appends the decimal form of `n` to text.
pub fn push_u64(out: &mut impl Text, n: u64) {
    let (buf, start) = decimal(n);
    out.put_ascii(&buf[start..]);
}

/// Appends `n` in lower-case hexadecimal, zero-padded to `width` digits
/// (at most 16).
pub fn push_hex(out: &mut impl Text, n: u64, width: usize) {
    let (buf, start) = hex_digits(n, width);
    out.put_ascii(&buf[start..]);
}

/// Each octet's decimal digits, after how many there are.
const OCTETS: [[u8; 4]; 256] = {
    let mut t = [[0u8; 4]; 256];
    let mut o = 0;
    while o < 256 {
        let d = [(o / 100) as u8, (o / 10 % 10) as u8, (o % 10) as u8];
        t[o] = if o >= 100 {
            [3, b'0' + d[0], b'0' + d[1], b'0' + d[2]]
        } else if o >= 10 {
            [2, b'0' + d[1], b'0' + d[2], 0]
        } else {
            [1, b'0' + d[2], 0, 0]
        };
        o += 1;
    }
    t
};

/// Appends an IP address as `Display` writes it, IPv4 by hand (the
/// common case on every forwarded request).
pub fn push_ip(out: &mut impl Text, ip: std::net::IpAddr) {
    match ip {
        std::net::IpAddr::V4(v4) => {
            // At most 15 bytes, written into a buffer and put at once;
            // each octet's digits copied from a table, three bytes at a
            // time (the ones past its length are written over or left).
            let mut buf = [0u8; 16];
            let mut len = 0;
            for (i, o) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    buf[len] = b'.';
                    len += 1;
                }
                let [n, digits @ ..] = OCTETS[usize::from(o)];
                buf[len..len + 3].copy_from_slice(&digits);
                len += usize::from(n);
            }
            out.put_ascii(&buf[..len]);
        }
        std::net::IpAddr::V6(v6) => push_display(out, v6),
    }
}

/// Appends a socket address as `Display` writes it (`a.b.c.d:port`,
/// `[v6]:port`).
pub fn push_socket_addr(out: &mut impl Text, addr: std::net::SocketAddr) {
    match addr {
        std::net::SocketAddr::V4(v4) => {
            push_ip(out, std::net::IpAddr::V4(*v4.ip()));
            out.put(":");
            push_u64(out, u64::from(v4.port()));
        }
        std::net::SocketAddr::V6(v6) => push_display(out, v6),
    }
}

/// Appends what `Display` writes of an IPv6 address or socket address
/// (at most 58 characters: `[` 39 `%` 10 `]:` 5), through a buffer on
/// the stack.
fn push_display(out: &mut impl Text, v: impl std::fmt::Display) {
    struct Stack {
        buf: [u8; 64],
        len: usize,
    }
    impl std::fmt::Write for Stack {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let end = self.len + s.len();
            self.buf
                .get_mut(self.len..end)
                .ok_or(std::fmt::Error)?
                .copy_from_slice(s.as_bytes());
            self.len = end;
            Ok(())
        }
    }
    let mut s = Stack {
        buf: [0; 64],
        len: 0,
    };
    if std::fmt::Write::write_fmt(&mut s, format_args!("{v}")).is_ok() {
        out.put_ascii(&s.buf[..s.len]);
    }
}

/// `n`'s hexadecimal digits at the end of a buffer, at least `width` of
/// them, and where they start (a shift a digit: every answer's To tag).
fn hex_digits(mut n: u64, width: usize) -> ([u8; 20], usize) {
    let mut buf = [b'0'; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b"0123456789abcdef"[(n & 0xf) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    (buf, i.min(buf.len() - width.min(16)))
}

/// Builds a message field by field.
#[derive(Debug)]
pub struct MessageWriter<'o> {
    out: &'o mut Vec<u8>,
}

impl<'o> MessageWriter<'o> {
    /// Starts a request: `METHOD uri SIP/2.0`.
    pub fn request(out: &'o mut Vec<u8>, method: &str, uri: &str) -> Self {
        out.extend_from_slice(method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(uri.as_bytes());
        out.extend_from_slice(b" SIP/2.0\r\n");
        Self { out }
    }

    /// Starts a response: `SIP/2.0 code reason`.
    pub fn response(out: &'o mut Vec<u8>, status: StatusCode, reason: &str) -> Self {
        out.extend_from_slice(b"SIP/2.0 ");
        out.extend_from_slice(&status.digits());
        out.push(b' ');
        out.extend_from_slice(reason.as_bytes());
        out.extend_from_slice(b"\r\n");
        Self { out }
    }

    /// Appends `name: value`.
    pub fn header(&mut self, name: &str, value: &str) -> &mut Self {
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b": ");
        self.out.extend_from_slice(value.as_bytes());
        self.out.extend_from_slice(b"\r\n");
        self
    }

    /// Appends `name: value` for a numeric value.
    pub fn header_u64(&mut self, name: &str, value: u64) -> &mut Self {
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b": ");
        write_u64(self.out, value);
        self.out.extend_from_slice(b"\r\n");
        self
    }

    /// Appends a header line verbatim (as found in another message).
    pub fn raw_line(&mut self, line: &str) -> &mut Self {
        self.out.extend_from_slice(line.as_bytes());
        self.out.extend_from_slice(b"\r\n");
        self
    }

    /// Appends pieces as one header value: `name: p0p1p2…`.
    pub fn header_parts(&mut self, name: &str, parts: &[&str]) -> &mut Self {
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b": ");
        for p in parts {
            self.out.extend_from_slice(p.as_bytes());
        }
        self.out.extend_from_slice(b"\r\n");
        self
    }

    /// Appends Content-Length, the empty line and the body.
    pub fn finish(self, body: &[u8]) {
        self.out.extend_from_slice(b"Content-Length: ");
        write_u64(self.out, body.len() as u64);
        self.out.extend_from_slice(b"\r\n\r\n");
        self.out.extend_from_slice(body);
    }
}

/// Writes a parsed message back out: canonical start line, each header
/// field as `name: value` (continuation lines kept), the empty line and
/// the body.
pub fn write_message(msg: &Message<'_>, out: &mut Vec<u8>) {
    match msg.start_line() {
        StartLine::Request { method, uri } => {
            MessageWriter::request(out, method.as_str(), uri.as_str());
        }
        StartLine::Response { status, reason } => {
            MessageWriter::response(out, *status, reason);
        }
    }
    for h in msg.headers() {
        out.extend_from_slice(h.raw_name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(msg.body());
}

/// Options for [`write_response`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ResponseOptions<'a> {
    /// Reason phrase; the status code's default when `None`.
    pub reason: Option<&'a str>,
    /// Tag to add to To when the request's To has none (not for 100).
    pub to_tag: Option<&'a str>,
    /// Copy Record-Route (dialog-creating 2xx/1xx, RFC 3261 §12.1.1).
    pub copy_record_route: bool,
    /// Extra header fields, already formatted as `(name, value)`.
    pub extra: &'a [(&'a str, &'a str)],
    /// Further header lines, already formatted, each ending in CRLF.
    pub raw_headers: &'a str,
    /// Content-Type of `body`, if any.
    pub content_type: Option<&'a str>,
    /// Body.
    pub body: &'a [u8],
}

/// Writes a response to `req` (RFC 3261 §8.2.6.2): Via fields, From,
/// Call-ID and CSeq copied as written; To copied with a tag added.
pub fn write_response(
    out: &mut Vec<u8>,
    req: &Message<'_>,
    status: StatusCode,
    opts: &ResponseOptions<'_>,
) {
    // Only the fields a response copies are sliced out of the request.
    let copied = |name| {
        matches!(
            name,
            HeaderName::Via
                | HeaderName::From
                | HeaderName::To
                | HeaderName::CallId
                | HeaderName::CSeq
                | HeaderName::RecordRoute
        )
    };
    let headers = req.headers_where(copied);
    write_response_over(out, headers, req.to().tag().is_some(), status, opts);
}

/// [`write_response`] from a request's header fields as written (a
/// [`Glance`](crate::message::Glance)'s), `to_tagged` when its To has a tag.
pub fn write_response_over<'a>(
    out: &mut Vec<u8>,
    headers: impl Iterator<Item = crate::Header<'a>>,
    to_tagged: bool,
    status: StatusCode,
    opts: &ResponseOptions<'_>,
) {
    let mut w =
        MessageWriter::response(out, status, opts.reason.unwrap_or_else(|| status.reason()));
    for h in headers {
        match h.name {
            HeaderName::Via | HeaderName::From | HeaderName::CallId | HeaderName::CSeq => {
                w.header(h.raw_name, h.value);
            }
            HeaderName::RecordRoute if opts.copy_record_route => {
                w.header(h.raw_name, h.value);
            }
            HeaderName::To => match opts.to_tag {
                Some(tag) if !to_tagged && status != StatusCode::TRYING => {
                    w.header_parts(h.raw_name, &[h.value, ";tag=", tag]);
                }
                _ => {
                    w.header(h.raw_name, h.value);
                }
            },
            _ => {}
        }
    }
    for (n, v) in opts.extra {
        w.header(n, v);
    }
    w.out.extend_from_slice(opts.raw_headers.as_bytes());
    if let Some(ct) = opts.content_type {
        w.header("Content-Type", ct);
    }
    w.finish(opts.body);
}

/// Writes a 400 (or 505/413 as [`ParseError::status`](crate::ParseError::status) says) for a request
/// that failed to parse, copying Via, From, To, Call-ID and CSeq as found
/// (RFC 3261 §8.2.6.2) and naming the error in a Warning (§20.43).
/// Returns `false`, writing nothing, when the input is not a request or
/// lacks a field a response must echo: such input is dropped.
pub fn write_error_response(input: &[u8], err: &crate::ParseError, out: &mut Vec<u8>) -> bool {
    let Ok(span) = crate::message::find_head(input) else {
        return false;
    };
    let Ok(head) = std::str::from_utf8(&input[span.lead..span.head_end]) else {
        return false;
    };
    if crate::message::checks::starts_with_sip_slash(head) {
        return false; // never answer a response
    }
    let fields = crate::message::HeaderIter::over(head);
    let wanted = [
        HeaderName::Via,
        HeaderName::From,
        HeaderName::To,
        HeaderName::CallId,
        HeaderName::CSeq,
    ];
    for w in wanted {
        if !fields.clone().any(|h| h.name == w) {
            return false;
        }
    }
    let start = out.len();
    let status = err.status();
    let mut w = MessageWriter::response(out, status, status.reason());
    for h in fields {
        if wanted.contains(&h.name) {
            if h.value.bytes().any(|b| b == b'\r' || b == b'\n') {
                // Folded values are echoed on one line.
                w.header_parts(h.raw_name, &[&h.value.replace(['\r', '\n'], " ")]);
            } else {
                w.header(h.raw_name, h.value);
            }
        }
    }
    let mut warning = String::with_capacity(96);
    warning.push_str("399 sipsec \"");
    for c in err.to_string().chars() {
        if c == '"' || c == '\\' {
            warning.push('\\');
        }
        warning.push(c);
    }
    warning.push('"');
    w.header("Warning", &warning);
    w.finish(b"");
    debug_assert!(out.len() > start);
    true
}

/// Writes a request that shares `request`'s transaction identity and
/// routing (RFC 3261 §9.1, §17.1.1.3): its Request-URI, top Via only,
/// Route fields, From, Call-ID and CSeq number, with `method` and `to`.
fn write_sibling(request: &Message<'_>, method: &str, to: &str, out: &mut Vec<u8>) {
    let StartLine::Request { uri, .. } = request.start_line() else {
        return;
    };
    let mut w = MessageWriter::request(out, method, uri.as_str());
    w.header("Via", request.top_via().as_str());
    w.header("Max-Forwards", "70");
    for h in request.headers_named(HeaderName::Route) {
        w.header("Route", h.value);
    }
    w.header("From", request.from().as_str());
    w.header("To", to);
    w.header("Call-ID", request.call_id());
    w.out.extend_from_slice(b"CSeq: ");
    write_u64(w.out, u64::from(request.cseq().seq));
    w.out.push(b' ');
    w.out.extend_from_slice(method.as_bytes());
    w.out.extend_from_slice(b"\r\n");
    w.finish(b"");
}

/// Writes the CANCEL for a pending `request` (RFC 3261 §9.1). Nothing is
/// written for a response.
pub fn write_cancel(request: &Message<'_>, out: &mut Vec<u8>) {
    write_sibling(request, "CANCEL", request.to().as_str(), out);
}

/// Writes the ACK an INVITE client transaction sends for the non-2xx
/// final `response` to `request` (RFC 3261 §17.1.1.3): the To of the
/// response (with its tag), everything else from the INVITE.
pub fn write_ack(request: &Message<'_>, response: &Message<'_>, out: &mut Vec<u8>) {
    write_sibling(request, "ACK", response.to().as_str(), out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_responses_echo_the_transaction() {
        let bad = b"INVITE sip:b@h SIP/7.0\r\nVia: SIP/7.0/UDP a;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=x\r\nTo: <sip:b@h>\r\nCall-ID: id1\r\nCSeq: 5 INVITE\r\n\r\n";
        let e = Message::parse(bad).unwrap_err();
        let mut out = Vec::new();
        assert!(write_error_response(bad, &e, &mut out));
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("SIP/2.0 505 Version Not Supported\r\n"),
            "{text}"
        );
        assert!(
            text.contains("Call-ID: id1\r\n")
                && text.contains("Warning: 399 sipsec \"unsupported SIP version")
        );
        let mut out = Vec::new();
        assert!(!write_error_response(
            b"INVITE sip:b@h SIP/2.0\r\nVia: x\r\n\r\n",
            &e,
            &mut out
        ));
        assert!(!write_error_response(
            b"SIP/2.0 200 OK\r\n\r\n",
            &e,
            &mut out
        ));
        assert!(out.is_empty());
    }

    #[test]
    fn numbers_as_text() {
        for n in [0u64, 9, 10, 255, 65_535, 4_294_967_295, u64::MAX] {
            let mut s = String::from("x");
            push_u64(&mut s, n);
            assert_eq!(s, format!("x{n}"));
            for width in [0, 1, 12, 16] {
                let mut s = String::new();
                push_hex(&mut s, n, width);
                assert_eq!(s, format!("{n:0width$x}"));
            }
        }
    }

    #[test]
    fn every_octet_is_written_as_display_writes_it() {
        for o in 0..=255u8 {
            for ip in [[o, 0, 9, 10], [99, o, 100, 1], [255, 7, o, o], [1, 2, 3, o]] {
                let ip = std::net::IpAddr::from(ip);
                let mut s = String::new();
                push_ip(&mut s, ip);
                assert_eq!(s, ip.to_string());
            }
        }
    }

    #[test]
    fn addresses_as_text() {
        for a in [
            "0.0.0.0:0",
            "127.0.0.1:5060",
            "255.255.255.255:65535",
            "[::1]:5061",
            "[2001:db8::7]:1",
            "[fe80::1%2]:5060",
            "[1111:2222:3333:4444:5555:6666:7777:8888%4294967295]:65535",
            "[::ffff:192.0.2.1]:5060",
        ] {
            let addr: std::net::SocketAddr = a.parse().expect("literal");
            let mut s = String::from("x");
            push_socket_addr(&mut s, addr);
            assert_eq!(s, format!("x{addr}"));
            // The same into bytes.
            let mut v = b"x".to_vec();
            push_socket_addr(&mut v, addr);
            assert_eq!(v, format!("x{addr}").into_bytes());
            let mut s = String::new();
            push_ip(&mut s, addr.ip());
            assert_eq!(s, addr.ip().to_string());
        }
    }

    #[test]
    fn numbers() {
        let mut cases = vec![0u64, 7, 4_294_967_295, u64::MAX, u64::MAX - 1];
        for k in 1..20 {
            let p = 10u64.pow(k);
            cases.extend([p - 1, p, p + 1, p + 9, p.saturating_mul(5)]);
        }
        for n in cases {
            let mut v = Vec::new();
            write_u64(&mut v, n);
            assert_eq!(v, n.to_string().as_bytes());
        }
    }

    #[test]
    fn response_copies_and_tags() {
        let req = b"INVITE sip:b@h SIP/2.0\r\nv: SIP/2.0/UDP a;branch=z9hG4bK1\r\nVia: SIP/2.0/UDP b;branch=z9hG4bK2\r\nf: <sip:a@h>;tag=x\r\nt: <sip:b@h>\r\ni: id1\r\nCSeq: 5 INVITE\r\nRecord-Route: <sip:p;lr>\r\nl: 0\r\n\r\n";
        let m = Message::parse(req).unwrap();
        let mut out = Vec::new();
        write_response(
            &mut out,
            &m,
            StatusCode::OK,
            &ResponseOptions {
                to_tag: Some("srv1"),
                copy_record_route: true,
                extra: &[("Contact", "<sip:b@10.0.0.1>")],
                ..Default::default()
            },
        );
        let r = Message::parse(&out).unwrap();
        assert_eq!(r.status(), Some(StatusCode::OK));
        assert_eq!(r.via_count(), 2);
        assert_eq!(r.top_via().branch(), Some("z9hG4bK1"));
        assert_eq!(r.to().tag(), Some("srv1"));
        assert_eq!(r.from().tag(), Some("x"));
        assert_eq!(r.call_id(), "id1");
        assert_eq!(r.header(HeaderName::RecordRoute), Some("<sip:p;lr>"));
        assert_eq!(r.content_length(), Some(0));

        out.clear();
        write_response(
            &mut out,
            &m,
            StatusCode::TRYING,
            &ResponseOptions {
                to_tag: Some("t"),
                ..Default::default()
            },
        );
        let r = Message::parse(&out).unwrap();
        assert_eq!(r.to().tag(), None);
        assert_eq!(r.header(HeaderName::RecordRoute), None);
    }

    #[test]
    fn numbers_read_the_same_in_a_string_and_in_bytes() {
        let (mut text, mut bytes) = (String::new(), Vec::new());
        for n in [0u64, 9, 0xabc, u64::MAX] {
            push_hex(&mut text, n, 12);
            push_hex(&mut bytes, n, 12);
        }
        let addr: std::net::SocketAddr = "[2001:db8::1]:5061".parse().unwrap();
        push_socket_addr(&mut text, addr);
        push_socket_addr(&mut bytes, addr);
        assert_eq!(text.as_bytes(), bytes);
        assert_eq!(
            text,
            "000000000000000000000009000000000abcffffffffffffffff[2001:db8::1]:5061"
        );
        // Only ASCII reaches a string.
        text.clear();
        text.put_ascii(b"a\xffb");
        assert_eq!(text, "ab");
    }

    #[test]
    fn a_response_copies_fields_past_the_parse_index_in_order() {
        // Thirty fields: the parse remembers the first 24, the rest are
        // scanned; a Via among each, and fields a response never copies.
        let mut req =
            String::from("OPTIONS sip:b@h SIP/2.0\r\nVia: SIP/2.0/UDP a;branch=z9hG4bK1\r\n");
        for i in 0..26 {
            req.push_str(&format!("X-Filler-{i}: {i}\r\n"));
        }
        req.push_str("Via: SIP/2.0/UDP b;branch=z9hG4bK2\r\nf: <sip:a@h>;tag=x\r\nTo: <sip:b@h>\r\ni: id1\r\nCSeq: 5 OPTIONS\r\n\r\n");
        let m = Message::parse(req.as_bytes()).unwrap();
        let mut out = Vec::new();
        write_response(&mut out, &m, StatusCode::OK, &ResponseOptions::default());
        let r = Message::parse(&out).unwrap();
        let vias: Vec<_> = r.headers_named(HeaderName::Via).map(|h| h.value).collect();
        assert_eq!(
            vias,
            [
                "SIP/2.0/UDP a;branch=z9hG4bK1",
                "SIP/2.0/UDP b;branch=z9hG4bK2"
            ]
        );
        assert_eq!(r.from().tag(), Some("x"));
        assert_eq!(r.call_id(), "id1");
        assert_eq!(r.cseq().seq, 5);
        assert!(r.headers().all(|h| !h.raw_name.starts_with("X-Filler")));
    }

    #[test]
    fn cancel_and_ack_keep_the_transaction_identity() {
        let req = b"INVITE sip:b@10.0.0.2:5070 SIP/2.0\r\nVia: SIP/2.0/UDP p:5060;branch=z9hG4bKsps1, SIP/2.0/UDP a;branch=z9hG4bK2\r\nRoute: <sip:r1;lr>\r\nRoute: <sip:r2;lr>\r\nMax-Forwards: 69\r\nFrom: \"A\" <sip:a@h>;tag=x\r\nTo: <sip:b@h>\r\nCall-ID: id1\r\nCSeq: 314159 INVITE\r\nContent-Type: application/sdp\r\nContent-Length: 3\r\n\r\nv=0";
        let m = Message::parse(req).unwrap();
        let mut out = Vec::new();
        write_cancel(&m, &mut out);
        let c = Message::parse(&out).unwrap();
        assert_eq!(c.method(), crate::Method::Cancel);
        assert_eq!(c.request_uri().unwrap().as_str(), "sip:b@10.0.0.2:5070");
        assert_eq!(c.via_count(), 1);
        assert_eq!(c.top_via().branch(), Some("z9hG4bKsps1"));
        assert_eq!(c.route_count(), 2);
        assert_eq!(c.from().tag(), Some("x"));
        assert_eq!(c.to().as_str(), "<sip:b@h>");
        assert_eq!(c.call_id(), "id1");
        assert_eq!(c.cseq().seq, 314159);
        assert_eq!(c.cseq().method, crate::Method::Cancel);
        assert_eq!(c.max_forwards(), Some(70));
        assert!(c.body().is_empty());

        let resp = b"SIP/2.0 486 Busy Here\r\nVia: SIP/2.0/UDP p:5060;branch=z9hG4bKsps1\r\nFrom: \"A\" <sip:a@h>;tag=x\r\nTo: <sip:b@h>;tag=callee\r\nCall-ID: id1\r\nCSeq: 314159 INVITE\r\nContent-Length: 0\r\n\r\n";
        let r = Message::parse(resp).unwrap();
        out.clear();
        write_ack(&m, &r, &mut out);
        let a = Message::parse(&out).unwrap();
        assert_eq!(a.method(), crate::Method::Ack);
        assert_eq!(a.to().tag(), Some("callee"));
        assert_eq!(a.cseq().seq, 314159);
        assert_eq!(a.cseq().method, crate::Method::Ack);
        assert_eq!(a.top_via().branch(), Some("z9hG4bKsps1"));
        assert_eq!(a.route_count(), 2);

        // A response has no transaction to cancel.
        out.clear();
        write_cancel(&r, &mut out);
        assert!(out.is_empty());
    }
}
