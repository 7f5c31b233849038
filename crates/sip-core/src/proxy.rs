//! The edits a proxy makes when forwarding (RFC 3261 §16.6, §16.7,
//! §18.2.1; RFC 3581), applied as splices over the original bytes so that
//! untouched header fields are copied, never re-serialised.

use crate::message::Message;
use crate::scan::{is_lws, offset_in};
use crate::writer::write_u64;

/// Why a message cannot be forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EditError {
    /// Max-Forwards is zero: answer 483 Too Many Hops instead.
    #[error("Max-Forwards is 0")]
    TooManyHops,
    /// `pop_routes` asked for more Route values than the request has.
    #[error("no Route header to remove")]
    NoRoute,
    /// The response has a single Via: it is addressed to this element.
    #[error("the response carries only one Via")]
    LastVia,
}

/// Edits for forwarding a request.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestEdits<'e> {
    /// New Request-URI (the target, RFC 3261 §16.6 step 2).
    pub request_uri: Option<&'e str>,
    /// New top Via value, e.g. `SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK…`.
    pub via: Option<&'e str>,
    /// Record-Route value to add, e.g. `<sip:192.0.2.1;lr>`.
    pub record_route: Option<&'e str>,
    /// Route value(s) to put before any Route the request has: the Path a
    /// registrar stored for the target (RFC 3327 §5.3), e.g.
    /// `<sip:edge.example;lr>`.
    pub route: Option<&'e str>,
    /// Remove this many Route values from the top: those naming this
    /// proxy (§16.4), two after double record-routing (RFC 5658).
    pub pop_routes: usize,
    /// Source address of the request: adds `received=` to the previous
    /// top Via and fills a bare `rport` with the port (§18.2.1, RFC 3581).
    pub received: Option<(&'e str, u16)>,
    /// Decrement Max-Forwards, or add `Max-Forwards: 70` when absent.
    pub max_forwards: bool,
    /// A header of the request to leave out, as its `(line, value)`:
    /// the Proxy-Authorization this proxy consumed (RFC 3261 §22.3), so
    /// credentials for our realm do not travel on to other domains.
    pub remove: Option<(&'e str, &'e str)>,
    /// With `received`: add `rport=PORT` even when the sender did not ask
    /// (connection-oriented transports, where responses must find the
    /// connection the request came on).
    pub force_rport: bool,
    /// A body in place of the request's own (a session description a
    /// media relay rewrote, RFC 3264); Content-Length says its length.
    pub body: Option<&'e [u8]>,
}

const SPLICE_PARTS: usize = 10;

struct Splice<'e> {
    start: usize,
    end: usize,
    text: [&'e str; SPLICE_PARTS],
    number: Option<u64>,
}

fn splice<'e>(start: usize, end: usize, parts: &[&'e str]) -> Splice<'e> {
    let mut text = [""; SPLICE_PARTS];
    text[..parts.len()].copy_from_slice(parts);
    Splice {
        start,
        end,
        text,
        number: None,
    }
}

fn rport_text(prefix: &str) -> [&str; SPLICE_PARTS] {
    let mut t = [""; SPLICE_PARTS];
    t[0] = prefix;
    t
}

fn apply(head: &str, body: &[u8], splices: &mut [Splice<'_>], out: &mut Vec<u8>) {
    splices.sort_by_key(|s| (s.start, s.end));
    let mut at = 0;
    for s in splices.iter() {
        out.extend_from_slice(&head.as_bytes()[at..s.start]);
        for t in s.text {
            out.extend_from_slice(t.as_bytes());
        }
        if let Some(n) = s.number {
            write_u64(out, n);
        }
        at = s.end;
    }
    out.extend_from_slice(&head.as_bytes()[at..]);
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
}

/// Range that removes the first comma-separated value `value` from the
/// header line `line`, or the whole line when it holds only that value.
fn remove_first_value(head: &str, line: &str, value: &str) -> (usize, usize) {
    let line_start = offset_in(head, line);
    let line_end = line_start + line.len();
    let value_end = offset_in(head, value) + value.len();
    let b = head.as_bytes();
    let mut i = value_end;
    while i < line_end && is_lws(b[i]) {
        i += 1;
    }
    if i < line_end && b[i] == b',' {
        i += 1;
        while i < line_end && is_lws(b[i]) {
            i += 1;
        }
        return (offset_in(head, value), i);
    }
    remove_line(head, line)
}

/// The span of `line` with one line terminator.
fn remove_line(head: &str, line: &str) -> (usize, usize) {
    let b = head.as_bytes();
    let line_start = offset_in(head, line);
    let line_end = line_start + line.len();
    if line_end < b.len() {
        let term = if b[line_end] == b'\r' { 2 } else { 1 };
        (line_start, line_end + term)
    } else {
        let term = if line_start >= 2 && b[line_start - 2] == b'\r' {
            2
        } else {
            1
        };
        (line_start - term, line_end)
    }
}

/// Writes `msg` with `edits` applied into `out`.
pub fn forward_request(
    msg: &Message<'_>,
    edits: &RequestEdits<'_>,
    out: &mut Vec<u8>,
) -> Result<(), EditError> {
    let head = msg.head();
    let mut splices: [Splice<'_>; 10] =
        std::array::from_fn(|_| splice(usize::MAX, usize::MAX, &[]));
    let mut n = 0;
    if let (Some(new), Some(uri)) = (edits.request_uri, msg.request_uri()) {
        let s = offset_in(head, uri.as_str());
        splices[n] = splice(s, s + uri.as_str().len(), &[new]);
        n += 1;
    }
    // New Via, Record-Route, Route and (when absent) Max-Forwards lines go
    // first: a new Route thus precedes the request's own.
    let line = msg.start_line_str().len();
    let headers_at = line
        + if head.as_bytes().get(line) == Some(&b'\r') {
            2
        } else {
            1
        };
    let mut top = splice(headers_at, headers_at, &[]);
    let mut k = 0;
    if let Some(v) = edits.via {
        top.text[k..k + 3].copy_from_slice(&["Via: ", v, "\r\n"]);
        k += 3;
    }
    if let Some(r) = edits.record_route {
        top.text[k..k + 3].copy_from_slice(&["Record-Route: ", r, "\r\n"]);
        k += 3;
    }
    if let Some(r) = edits.route {
        top.text[k..k + 3].copy_from_slice(&["Route: ", r, "\r\n"]);
        k += 3;
    }
    if edits.max_forwards && msg.max_forwards_raw().is_none() {
        top.text[k] = "Max-Forwards: 70\r\n";
    }
    splices[n] = top;
    n += 1;
    if edits.max_forwards {
        if let (Some(raw), Some(v)) = (msg.max_forwards_raw(), msg.max_forwards()) {
            if v == 0 {
                return Err(EditError::TooManyHops);
            }
            let s = offset_in(head, raw);
            splices[n] = Splice {
                start: s,
                end: s + raw.len(),
                text: [""; SPLICE_PARTS],
                number: Some(u64::from(v) - 1),
            };
            n += 1;
        }
    }
    if let Some((ip, port)) = edits.received {
        let via = msg.top_via();
        let end = offset_in(head, via.as_str()) + via.as_str().len();
        splices[n] = splice(end, end, &[";received=", ip]);
        n += 1;
        if let (Some(raw), Some(None)) = (via.rport_raw(), via.rport()) {
            let s = offset_in(head, raw);
            splices[n] = Splice {
                start: s,
                end: s + raw.len(),
                text: rport_text("rport="),
                number: Some(u64::from(port)),
            };
            n += 1;
        } else if via.rport().is_none() && edits.force_rport {
            splices[n] = Splice {
                start: end,
                end,
                text: rport_text(";rport="),
                number: Some(u64::from(port)),
            };
            n += 1;
        }
    }
    if edits.pop_routes > 0 {
        n = pop_routes(msg, edits.pop_routes, &mut splices, n)?;
    }
    if let Some((line, value)) = edits.remove {
        let (s, e) = remove_first_value(head, line, value);
        splices[n] = splice(s, e, &[]);
        n += 1;
    }
    if let Some(body) = edits.body {
        splices[n] = content_length(msg, body);
        n += 1;
    }
    apply(
        head,
        edits.body.unwrap_or(msg.body()),
        &mut splices[..n],
        out,
    );
    Ok(())
}

/// The splice that makes `msg`'s Content-Length say `body`'s length:
/// its value replaced, or a line added at the end of the head.
fn content_length<'e>(msg: &Message<'_>, body: &[u8]) -> Splice<'e> {
    let head = msg.head();
    let (start, end, text) = match msg.header(crate::header::HeaderName::ContentLength) {
        Some(v) => {
            let s = offset_in(head, v);
            (s, s + v.len(), rport_text(""))
        }
        None => (head.len(), head.len(), rport_text("\r\nContent-Length: ")),
    };
    Splice {
        start,
        end,
        text,
        number: Some(body.len() as u64),
    }
}

/// Adds to `splices` (from `n`) what removes the first `count` Route
/// values: whole lines when all their values go, else the leading values
/// of a line with their commas. Returns the new `n`.
fn pop_routes<'e>(
    msg: &Message<'_>,
    count: usize,
    splices: &mut [Splice<'e>],
    mut n: usize,
) -> Result<usize, EditError> {
    let head = msg.head();
    let mut left = count;
    let mut prev_end = 0;
    for h in msg.headers_named(crate::header::HeaderName::Route) {
        if left == 0 {
            break;
        }
        let (ls, le) = (
            offset_in(head, h.line),
            offset_in(head, h.line) + h.line.len(),
        );
        let within = |r: &crate::name_addr::NameAddr<'_>| {
            let at = offset_in(head, r.as_str());
            (ls..le).contains(&at)
        };
        let values = msg.routes().filter(within).count();
        if values == 0 {
            continue;
        }
        let (s, e) = if values <= left {
            left -= values;
            remove_line(head, h.line)
        } else {
            let mut in_line = msg.routes().filter(within);
            let first = in_line.next().map_or(ls, |r| offset_in(head, r.as_str()));
            let keep = in_line
                .nth(left - 1)
                .map_or(le, |r| offset_in(head, r.as_str()));
            left = 0;
            (first, keep)
        };
        // Two removed lines at the end of the head share a terminator.
        if n > 0 && s < prev_end && splices[n - 1].end == prev_end {
            splices[n - 1].end = e.max(prev_end);
        } else {
            splices[n] = splice(s, e, &[]);
            n += 1;
        }
        prev_end = e;
    }
    if left > 0 {
        return Err(EditError::NoRoute);
    }
    Ok(n)
}

/// Writes a response with its top Via value removed (RFC 3261 §16.7 step 3).
pub fn forward_response(msg: &Message<'_>, out: &mut Vec<u8>) -> Result<(), EditError> {
    forward_response_with(msg, None, out)
}

/// [`forward_response`], with `body` (when given) in place of the
/// response's own and Content-Length saying its length.
pub fn forward_response_with(
    msg: &Message<'_>,
    body: Option<&[u8]>,
    out: &mut Vec<u8>,
) -> Result<(), EditError> {
    if msg.via_count() < 2 {
        return Err(EditError::LastVia);
    }
    let head = msg.head();
    let (s, e) = remove_first_value(head, msg.top_via_line(), msg.top_via().as_str());
    let mut splices = [splice(s, e, &[]), splice(usize::MAX, usize::MAX, &[])];
    let n = match body {
        Some(b) => {
            splices[1] = content_length(msg, b);
            2
        }
        None => 1,
    };
    apply(head, body.unwrap_or(msg.body()), &mut splices[..n], out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::HeaderName;

    const INVITE: &[u8] = b"INVITE sip:bob@example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP 10.0.0.1:5060;rport;branch=z9hG4bKa, SIP/2.0/UDP 10.0.0.9;branch=z9hG4bKz\r\n\
Max-Forwards: 70\r\n\
Route: <sip:proxy.example.com;lr>, <sip:next.example.com;lr>\r\n\
From: <sip:alice@example.com>;tag=1\r\n\
To: <sip:bob@example.com>\r\n\
Call-ID: c1\r\n\
CSeq: 1 INVITE\r\n\
Content-Type: application/sdp\r\n\
Content-Length: 4\r\n\r\nv=0\n";

    #[test]
    fn request_edits() {
        let m = Message::parse(INVITE).unwrap();
        let mut out = Vec::new();
        forward_request(
            &m,
            &RequestEdits {
                request_uri: Some("sip:bob@192.0.2.7:5062"),
                via: Some("SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKp1"),
                record_route: Some("<sip:192.0.2.1;lr>"),
                route: Some("<sip:edge.example;lr>"),
                pop_routes: 1,
                received: Some(("203.0.113.5", 40000)),
                max_forwards: true,
                force_rport: false,
                remove: None,
                body: None,
            },
            &mut out,
        )
        .unwrap();
        let f = Message::parse(&out)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
        assert_eq!(f.request_uri().unwrap().as_str(), "sip:bob@192.0.2.7:5062");
        assert_eq!(f.max_forwards(), Some(69));
        assert_eq!(f.via_count(), 3);
        let vias: Vec<_> = f.vias().collect();
        assert_eq!(vias[0].branch(), Some("z9hG4bKp1"));
        assert_eq!(vias[1].received(), Some("203.0.113.5"));
        assert_eq!(vias[1].rport(), Some(Some(40000)));
        assert_eq!(vias[2].branch(), Some("z9hG4bKz"));
        let routes: Vec<_> = f.routes().map(|r| r.uri().as_str()).collect();
        assert_eq!(
            routes,
            ["sip:edge.example;lr", "sip:next.example.com;lr"],
            "the added Route first, ours popped"
        );
        assert_eq!(
            f.header(HeaderName::RecordRoute),
            Some("<sip:192.0.2.1;lr>")
        );
        assert_eq!(f.body(), b"v=0\n");
    }

    #[test]
    fn forced_rport() {
        let s =
            String::from_utf8_lossy(INVITE).replace(";rport;branch=z9hG4bKa", ";branch=z9hG4bKa");
        let m = Message::parse(s.as_bytes()).unwrap();
        let mut out = Vec::new();
        let edits = RequestEdits {
            received: Some(("203.0.113.5", 40000)),
            force_rport: true,
            remove: None,
            ..Default::default()
        };
        forward_request(&m, &edits, &mut out).unwrap();
        let f = Message::parse(&out).unwrap();
        assert_eq!(f.top_via().rport(), Some(Some(40000)));
        assert_eq!(f.top_via().received(), Some("203.0.113.5"));
        out.clear();
        forward_request(
            &m,
            &RequestEdits {
                force_rport: false,
                remove: None,
                ..edits
            },
            &mut out,
        )
        .unwrap();
        assert_eq!(Message::parse(&out).unwrap().top_via().rport(), None);
    }

    #[test]
    fn max_forwards_zero_and_missing() {
        let zero = String::from_utf8_lossy(INVITE).replace("Max-Forwards: 70", "Max-Forwards: 0");
        let m = Message::parse(zero.as_bytes()).unwrap();
        let e = forward_request(
            &m,
            &RequestEdits {
                max_forwards: true,
                ..Default::default()
            },
            &mut Vec::new(),
        );
        assert_eq!(e, Err(EditError::TooManyHops));
        let none = String::from_utf8_lossy(INVITE).replace("Max-Forwards: 70\r\n", "");
        let m = Message::parse(none.as_bytes()).unwrap();
        let mut out = Vec::new();
        forward_request(
            &m,
            &RequestEdits {
                max_forwards: true,
                ..Default::default()
            },
            &mut out,
        )
        .unwrap();
        assert_eq!(Message::parse(&out).unwrap().max_forwards(), Some(70));
    }

    #[test]
    fn double_record_routes_pop_as_two_values_wherever_they_sit() {
        let routes = |m: &Message<'_>| -> Vec<String> {
            m.routes().map(|r| r.uri().as_str().to_owned()).collect()
        };
        // One line with three values, two lines, and two lines at the end.
        let cases = [
            "Route: <sip:a;lr>, <sip:b;lr>, <sip:c;lr>\r\n",
            "Route: <sip:a;lr>\r\nRoute: <sip:b;lr>, <sip:c;lr>\r\n",
            "Route: <sip:a;lr>, <sip:b;lr>\r\nRoute: <sip:c;lr>\r\n",
        ];
        for case in cases {
            let s = String::from_utf8_lossy(INVITE).replace(
                "Route: <sip:proxy.example.com;lr>, <sip:next.example.com;lr>\r\n",
                case,
            );
            let m = Message::parse(s.as_bytes()).unwrap();
            let mut out = Vec::new();
            let edits = RequestEdits {
                pop_routes: 2,
                ..Default::default()
            };
            forward_request(&m, &edits, &mut out).unwrap();
            let f = Message::parse(&out).unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(routes(&f), ["sip:c;lr"], "{case}");
            out.clear();
            let edits = RequestEdits {
                pop_routes: 3,
                ..Default::default()
            };
            forward_request(&m, &edits, &mut out).unwrap();
            let f = Message::parse(&out).unwrap();
            assert_eq!(f.route_count(), 0, "{case}");
            assert_eq!(f.body(), b"v=0\n");
            let too_many = RequestEdits {
                pop_routes: 4,
                ..Default::default()
            };
            assert_eq!(
                forward_request(&m, &too_many, &mut Vec::new()),
                Err(EditError::NoRoute)
            );
        }
        // The last two header lines, both Route.
        let end = "Call-ID: c1\r\nCSeq: 1 INVITE\r\nRoute: <sip:a;lr>\r\nRoute: <sip:b;lr>";
        let s = format!("INVITE sip:bob@example.com SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bKa\r\nFrom: <sip:a@x>;tag=1\r\nTo: <sip:b@x>\r\n{end}\r\n\r\n");
        let m = Message::parse(s.as_bytes()).unwrap();
        let mut out = Vec::new();
        let edits = RequestEdits {
            pop_routes: 2,
            ..Default::default()
        };
        forward_request(&m, &edits, &mut out).unwrap();
        let f = Message::parse(&out)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
        assert_eq!(f.route_count(), 0);
        assert_eq!(f.cseq().seq, 1);
    }

    #[test]
    fn single_route_line_removed_even_when_last() {
        let s = String::from_utf8_lossy(INVITE)
            .replace(
                "Route: <sip:proxy.example.com;lr>, <sip:next.example.com;lr>\r\n",
                "",
            )
            .replace(
                "Content-Length: 4\r\n",
                "Content-Length: 4\r\nRoute: <sip:proxy.example.com;lr>\r\n",
            );
        let m = Message::parse(s.as_bytes()).unwrap();
        let mut out = Vec::new();
        forward_request(
            &m,
            &RequestEdits {
                pop_routes: 1,
                ..Default::default()
            },
            &mut out,
        )
        .unwrap();
        let f = Message::parse(&out).unwrap();
        assert_eq!(f.route_count(), 0);
        assert_eq!(f.body(), b"v=0\n");
    }

    #[test]
    fn response_top_via_removed() {
        let resp = b"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP p;branch=z9hG4bKp\r\nVia: SIP/2.0/UDP a;branch=z9hG4bKa\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:b@h>;tag=2\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
        let m = Message::parse(resp).unwrap();
        let mut out = Vec::new();
        forward_response(&m, &mut out).unwrap();
        let f = Message::parse(&out).unwrap();
        assert_eq!(f.via_count(), 1);
        assert_eq!(f.top_via().branch(), Some("z9hG4bKa"));
        let mut once = Vec::new();
        assert_eq!(forward_response(&f, &mut once), Err(EditError::LastVia));
        let folded = b"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP p;branch=z9hG4bKp , SIP/2.0/UDP a;branch=z9hG4bKa\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:b@h>;tag=2\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
        let m = Message::parse(folded).unwrap();
        out.clear();
        forward_response(&m, &mut out).unwrap();
        assert_eq!(
            Message::parse(&out).unwrap().top_via().branch(),
            Some("z9hG4bKa")
        );
    }

    #[test]
    fn a_relayed_body_replaces_the_request_body_and_its_length() {
        let m = Message::parse(INVITE).unwrap();
        let mut out = Vec::new();
        let sdp = b"v=0\r\nc=IN IP4 192.0.2.99\r\n";
        let edits = RequestEdits {
            via: Some("SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKp1"),
            pop_routes: 2,
            max_forwards: true,
            body: Some(sdp),
            ..RequestEdits::default()
        };
        forward_request(&m, &edits, &mut out).unwrap();
        let r = Message::parse(&out).unwrap();
        assert_eq!(r.body(), sdp);
        assert_eq!(r.content_length(), Some(sdp.len()));
        assert_eq!(r.call_id(), "c1");
        assert_eq!(r.header(HeaderName::ContentType), Some("application/sdp"));
        assert_eq!(r.route_count(), 0);
        // The same edits without the body: the same head but its length.
        let mut plain = Vec::new();
        let edits = RequestEdits {
            body: None,
            ..edits
        };
        forward_request(&m, &edits, &mut plain).unwrap();
        let p = Message::parse(&plain).unwrap();
        assert_eq!((p.body(), p.header_count()), (m.body(), r.header_count()));
    }

    #[test]
    fn a_relayed_body_replaces_the_response_body_and_adds_a_length() {
        let ok = b"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP p;branch=z9hG4bKp, SIP/2.0/UDP a;branch=z9hG4bKx\r\n\
From: <sip:a@b>;tag=1\r\nTo: <sip:b@b>;tag=2\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\n\
Content-Length: 3\r\n\r\nabc";
        let m = Message::parse(ok).unwrap();
        let mut out = Vec::new();
        forward_response_with(&m, Some(b"v=0\r\ns=-\r\n"), &mut out).unwrap();
        let r = Message::parse(&out).unwrap();
        assert_eq!(
            (r.body(), r.content_length()),
            (&b"v=0\r\ns=-\r\n"[..], Some(10))
        );
        assert_eq!((r.via_count(), r.top_via().branch()), (1, Some("z9hG4bKx")));
        // None: the response's own body.
        out.clear();
        forward_response_with(&m, None, &mut out).unwrap();
        assert_eq!(Message::parse(&out).unwrap().body(), b"abc");
        // Without a Content-Length (allowed over UDP) one is added.
        let bare = Message::parse(
            b"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP p;branch=z9hG4bKp\r\nVia: SIP/2.0/UDP a;branch=z9hG4bKx\r\n\
From: <sip:a@b>;tag=1\r\nTo: <sip:b@b>;tag=2\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\n\r\n",
        )
        .unwrap();
        out.clear();
        forward_response_with(&bare, Some(b"v=0\r\n"), &mut out).unwrap();
        let r = Message::parse(&out).unwrap();
        assert_eq!((r.body(), r.content_length()), (&b"v=0\r\n"[..], Some(5)));
        assert_eq!(r.header_count(), bare.header_count());
    }
}
