//! Building the requests and responses a user agent sends (RFC 3261
//! §8.1.1, §8.2.6, §12), sans-IO.

use std::fmt::Write as _;

use sip_core::{HeaderName, Message, Method};

/// A random lowercase hex token of `bytes` random bytes.
pub fn token(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    // getrandom only fails where the OS has no entropy source at all.
    let _ = getrandom::fill(&mut b);
    b.iter().fold(String::with_capacity(bytes * 2), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

/// A new RFC 3261 branch.
pub fn branch() -> String {
    format!("z9hG4bK{}", token(8))
}

/// The parts of a request outside a transaction's retransmissions.
#[derive(Debug, Clone)]
pub struct Request {
    /// Method.
    pub method: Method<'static>,
    /// Request-URI.
    pub uri: String,
    /// Via sent-by: `host:port`, and the transport (`UDP`).
    pub via: String,
    /// Via branch.
    pub branch: String,
    /// From: name-addr and tag.
    pub from: String,
    /// From tag.
    pub from_tag: String,
    /// To: name-addr.
    pub to: String,
    /// To tag (in dialog).
    pub to_tag: Option<String>,
    /// Call-ID.
    pub call_id: String,
    /// CSeq number.
    pub cseq: u32,
    /// Contact URI, when the method wants one.
    pub contact: Option<String>,
    /// Route set, in order.
    pub routes: Vec<String>,
    /// Further header lines (`Name: value`).
    pub extra: Vec<String>,
    /// Content type and body.
    pub body: Option<(String, String)>,
}

impl Request {
    /// The request's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut s = format!(
            "{} {} SIP/2.0\r\nVia: SIP/2.0/{};branch={};rport\r\nMax-Forwards: 70\r\n",
            self.method, self.uri, self.via, self.branch
        );
        for r in &self.routes {
            let _ = write!(s, "Route: {r}\r\n");
        }
        let _ = write!(
            s,
            "From: {};tag={}\r\nTo: {}",
            self.from, self.from_tag, self.to
        );
        if let Some(t) = &self.to_tag {
            let _ = write!(s, ";tag={t}");
        }
        let _ = write!(
            s,
            "\r\nCall-ID: {}\r\nCSeq: {} {}\r\n",
            self.call_id, self.cseq, self.method
        );
        if let Some(c) = &self.contact {
            let _ = write!(s, "Contact: <{c}>\r\n");
        }
        for e in &self.extra {
            let _ = write!(s, "{e}\r\n");
        }
        s.push_str("User-Agent: sipsec-phone\r\n");
        match &self.body {
            Some((ctype, body)) => {
                let _ = write!(
                    s,
                    "Content-Type: {ctype}\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
            None => s.push_str("Content-Length: 0\r\n\r\n"),
        }
        s.into_bytes()
    }
}

/// A response to `req` (RFC 3261 §8.2.6): its Via, From, Call-ID, CSeq
/// and Record-Route (for dialog-making responses) copied, To with
/// `to_tag` added when it had none.
pub fn response(
    req: &Message<'_>,
    status: u16,
    reason: &str,
    to_tag: Option<&str>,
    contact: Option<&str>,
    body: Option<(&str, &str)>,
) -> Vec<u8> {
    response_with(req, (status, reason), to_tag, contact, body, &[])
}

/// [`response`] with `extra` header fields (`Allow`, …).
pub fn response_with(
    req: &Message<'_>,
    (status, reason): (u16, &str),
    to_tag: Option<&str>,
    contact: Option<&str>,
    body: Option<(&str, &str)>,
    extra: &[(&str, &str)],
) -> Vec<u8> {
    let Some(code) = sip_core::StatusCode::new(status) else {
        return Vec::new();
    };
    let contact = contact.map(|c| format!("<{c}>"));
    let mut fields = Vec::with_capacity(2 + extra.len());
    if let Some(c) = &contact {
        fields.push(("Contact", c.as_str()));
    }
    fields.extend_from_slice(extra);
    fields.push(("User-Agent", "sipsec-phone"));
    let mut out = Vec::new();
    sip_core::writer::write_response(
        &mut out,
        req,
        code,
        &sip_core::writer::ResponseOptions {
            reason: Some(reason),
            to_tag,
            copy_record_route: (101..300).contains(&status),
            extra: &fields,
            content_type: body.map(|(t, _)| t),
            body: body.map_or(&[][..], |(_, b)| b.as_bytes()),
            ..Default::default()
        },
    );
    out
}

/// The URIs of a message's Record-Route headers, in order.
pub fn record_routes(msg: &Message<'_>) -> Vec<String> {
    msg.headers_named(HeaderName::RecordRoute)
        .flat_map(|h| split_list(h.value))
        .collect()
}

/// Splits a comma-separated header value outside quotes and brackets.
fn split_list(v: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut depth, mut quoted, mut start) = (0i32, false, 0);
    for (i, c) in v.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '<' if !quoted => depth += 1,
            '>' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                out.push(v[start..i].trim().to_string());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(v[start..].trim().to_string());
    out.retain(|s| !s.is_empty());
    out
}

/// The URI inside a name-addr (`"x" <sip:a@b>;p` → `sip:a@b`).
pub fn addr_uri(name_addr: &str) -> &str {
    match (name_addr.find('<'), name_addr.find('>')) {
        (Some(a), Some(b)) if a < b => &name_addr[a + 1..b],
        _ => name_addr.split(';').next().unwrap_or(name_addr).trim(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_responses_mirror_them() {
        let r = Request {
            method: Method::Invite,
            uri: "sip:bob@127.0.0.1:5062".into(),
            via: "UDP 127.0.0.1:5070".into(),
            branch: branch(),
            from: "<sip:alice@example.com>".into(),
            from_tag: token(4),
            to: "<sip:bob@example.com>".into(),
            to_tag: None,
            call_id: token(8),
            cseq: 1,
            contact: Some("sip:alice@127.0.0.1:5070".into()),
            routes: vec!["<sip:127.0.0.1:5060;lr>".into()],
            extra: vec![],
            body: Some(("application/sdp".into(), "v=0\r\n".into())),
        };
        let bytes = r.to_bytes();
        let m = Message::parse(&bytes).expect("our request parses");
        assert_eq!(m.body(), b"v=0\r\n");
        assert_eq!(m.route_count(), 1);
        let resp = response(
            &m,
            180,
            "Ringing",
            Some("t1"),
            Some("sip:bob@127.0.0.1:5062"),
            None,
        );
        let p = Message::parse(&resp).expect("our response parses");
        assert_eq!(p.status().map(|s| s.as_u16()), Some(180));
        assert_eq!(p.to().tag(), Some("t1"));
        assert_eq!(p.top_via().branch(), Some(r.branch.as_str()));
        assert_eq!(p.cseq().seq, 1);
    }

    #[test]
    fn lists_and_uris() {
        assert_eq!(
            split_list("<sip:a;lr>, \"x,y\" <sip:b;lr>"),
            vec!["<sip:a;lr>".to_string(), "\"x,y\" <sip:b;lr>".to_string()]
        );
        assert_eq!(addr_uri("\"Bob\" <sip:bob@h:5>;tag=1"), "sip:bob@h:5");
        assert_eq!(addr_uri("sip:bob@h;tag=1"), "sip:bob@h");
    }
}
