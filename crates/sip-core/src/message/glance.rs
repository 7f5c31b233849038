//! A message read only as far as a load generator or a test callee
//! needs: the start line, Call-ID, CSeq and To's tag.
//!
//! [`Message::parse`](super::Message::parse) decodes every URI, Via and
//! parameter of the fields a proxy needs; a generator that only matches
//! an answer to its call pays for all of it on every response (most of
//! its CPU per call). [`Glance::read`] checks what it returns as the
//! full parse does and leaves the rest unread; it answers `None` for
//! anything it does not read plainly (a repeated field, a quoted To, a
//! start line out of form), where the caller parses in full.

use crate::cseq::{parse_cseq, CSeq};
use crate::header::{Header, HeaderName};
use crate::method::Method;
use crate::scan::{find_byte, is_token_str};

use super::checks::{
    check_call_id, check_version, parse_status_line, starts_with_sip_slash, three_words,
};
use super::StartLine;
use super::{find_head, next_field, split_field, HeaderIter};

/// What [`Glance::read`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Glance<'a> {
    /// A request's method, or `None` for a response.
    pub method: Option<Method<'a>>,
    /// A response's status code (100-699), or `None` for a request.
    pub status: Option<u16>,
    /// The Call-ID.
    pub call_id: &'a str,
    /// The CSeq.
    pub cseq: CSeq<'a>,
    /// To's `tag` parameter.
    pub to_tag: Option<&'a str>,
    head: &'a str,
}

impl<'a> Glance<'a> {
    /// Reads `buf`'s start line, Call-ID, CSeq and To tag; `None` when
    /// one is missing, repeated or not plainly written.
    pub fn read(buf: &'a [u8]) -> Option<Self> {
        let span = find_head(buf).ok()?;
        let head = std::str::from_utf8(&buf[span.lead..span.head_end]).ok()?;
        let mut pos = 0;
        let (s, e) = next_field(head, &mut pos)?;
        let (method, status) = start_line(&head[s..e])?;
        let (mut call_id, mut cseq, mut to) = (None, None, None);
        while let Some((s, e)) = next_field(head, &mut pos) {
            let field = &head[s..e];
            // Only Call-ID, CSeq and To (`i`, `t`) are read: a field whose
            // name starts otherwise is passed without a look at its name.
            let first = field.as_bytes().first().map_or(0, |b| b | 0x20);
            if !matches!(first, b'c' | b'i' | b't') {
                continue;
            }
            let (name, value) = split_field(field).ok()?;
            let slot = match HeaderName::from_name(name) {
                HeaderName::CallId => &mut call_id,
                HeaderName::CSeq => &mut cseq,
                HeaderName::To => &mut to,
                _ => continue,
            };
            if slot.replace(value).is_some() {
                return None;
            }
        }
        let call_id = call_id.filter(|c| check_call_id(c, 0).is_ok())?;
        let cseq = parse_cseq(cseq?, 0).ok()?;
        let to_tag = tag(to?)?;
        Some(Self {
            method,
            status,
            call_id,
            cseq,
            to_tag,
            head,
        })
    }

    /// The header fields, in order, as written (for an answer that
    /// copies them: [`crate::writer::write_response_over`]).
    pub fn headers(&self) -> impl Iterator<Item = Header<'a>> + Clone {
        HeaderIter::over(self.head)
    }
}

/// A Status-Line, read as the full parse reads it, or a Request-Line's
/// method and version (its URI is left unread).
fn start_line(line: &str) -> Option<(Option<Method<'_>>, Option<u16>)> {
    if starts_with_sip_slash(line) {
        return match parse_status_line(line, 0).ok()? {
            StartLine::Response { status, .. } => Some((None, Some(status.as_u16()))),
            StartLine::Request { .. } => None,
        };
    }
    let (method, _, version) = three_words(line)?;
    let plain = is_token_str(method) && check_version(version, 0).is_ok();
    plain.then(|| (Some(Method::from_token(method)), None))
}

/// To's `tag`: `Some(None)` when it has none, `None` when the value is
/// not plainly a name-addr or addr-spec with token parameters.
fn tag(to: &str) -> Option<Option<&str>> {
    if to.bytes().any(|b| matches!(b, b'"' | b'\r' | b'\n')) {
        return None;
    }
    // Header parameters follow the `>` of a name-addr, or the first `;`
    // of an addr-spec (whose URI cannot have parameters, RFC 3261 §20).
    let params = match (find_byte(to, b'<'), memchr::memrchr(b'>', to.as_bytes())) {
        (Some(open), Some(close)) if open < close => &to[close + 1..],
        (None, None) => find_byte(to, b';').map_or("", |at| &to[at..]),
        _ => return None,
    };
    let params = params.trim_start_matches([' ', '\t']);
    if params.is_empty() {
        return Some(None);
    }
    let mut found = None;
    for p in params.strip_prefix(';')?.split(';') {
        let (name, value) = p.split_once('=').unwrap_or((p, ""));
        let (name, value) = (
            name.trim_matches([' ', '\t']),
            value.trim_matches([' ', '\t']),
        );
        if !is_token_str(name) || !(value.is_empty() || is_token_str(value)) {
            return None;
        }
        if name.eq_ignore_ascii_case("tag") {
            if found.is_some() || value.is_empty() {
                return None;
            }
            found = Some(value);
        }
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;

    const INVITE: &str = "INVITE sip:bob@127.0.0.1:5060 SIP/2.0\r\n\
        Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK1;rport\r\n\
        Max-Forwards: 70\r\n\
        From: <sip:alice@127.0.0.1>;tag=a1\r\n\
        To: <sip:bob@127.0.0.1>\r\n\
        Call-ID: c1@127.0.0.1\r\n\
        CSeq: 1 INVITE\r\n\
        Contact: <sip:alice@127.0.0.1:5070>\r\n\
        Content-Length: 0\r\n\r\n";

    const OK: &str = "SIP/2.0 200 OK\r\n\
        Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK1;rport=5070\r\n\
        From: <sip:alice@127.0.0.1>;tag=a1\r\n\
        t: \"Bob\" <sip:bob@127.0.0.1>;tag=b2\r\n\
        i: c1@127.0.0.1\r\n\
        CSeq: 1 INVITE\r\n\
        Content-Length: 0\r\n\r\n";

    #[test]
    fn a_glance_reads_what_the_full_parse_reads() {
        let quoted_elsewhere = OK.replace("t: \"Bob\" ", "To: ");
        let cases = [
            INVITE.to_owned(),
            quoted_elsewhere.clone(),
            quoted_elsewhere.replace(";tag=b2", " ; TAG = b2 ;x"),
            quoted_elsewhere.replace("To: <sip:bob@127.0.0.1>", "To: sip:bob@127.0.0.1"),
            INVITE.replace("To: <sip:bob@127.0.0.1>", "To: sip:bob@127.0.0.1;tag=z"),
            INVITE
                .replace("INVITE sip", "ACK sip")
                .replace("1 INVITE", "1 ACK"),
            format!("\r\n{}", quoted_elsewhere.replace("200 OK", "180 Ringing")),
            quoted_elsewhere
                .replace("200 OK", "486 Busy Here")
                .replace("\r\n", "\n"),
        ];
        for c in &cases {
            assert!(Glance::read(c.as_bytes()).is_some(), "glance: {c}");
            Message::parse(c.as_bytes()).unwrap_or_else(|e| panic!("{e}: {c}"));
            // Both read: the fuzz target's check that they agree.
            crate::fuzzing::message(c.as_bytes());
        }
        let g = Glance::read(cases[2].as_bytes()).unwrap();
        assert_eq!(
            (g.status, g.call_id, g.to_tag),
            (Some(200), "c1@127.0.0.1", Some("b2"))
        );
        assert_eq!((g.cseq.seq, g.cseq.method), (1, Method::Invite));
        assert_eq!(Glance::read(cases[4].as_bytes()).unwrap().to_tag, Some("z"));
    }

    #[test]
    fn a_glance_declines_what_it_does_not_read_plainly() {
        let declined = [
            // A quoted display name: the full parse knows where it ends.
            OK.to_owned(),
            INVITE.replace("Call-ID: c1@127.0.0.1\r\n", ""),
            INVITE.replace("CSeq: 1 INVITE\r\n", "CSeq: 1 INVITE\r\nCSeq: 2 INVITE\r\n"),
            INVITE.replace(
                "To: <sip:bob@127.0.0.1>\r\n",
                "To: <sip:bob@127.0.0.1>\r\nt: <sip:c@d>\r\n",
            ),
            INVITE.replace("CSeq: 1 INVITE", "CSeq: one INVITE"),
            INVITE.replace("Call-ID: c1@127.0.0.1", "Call-ID: c1 @x"),
            INVITE.replace(" SIP/2.0\r\n", " SIP/3.0\r\n"),
            INVITE.replace("INVITE sip", "INVITE  sip"),
            OK.replace("200 OK", "20 OK"),
            OK.replace("200 OK", "999 What"),
            OK.replace(";tag=b2", ";tag=b2;tag=b3"),
            OK.replace(";tag=b2", ";tag"),
            INVITE.replace("To: <sip:bob@127.0.0.1>", "To: sip:bob@127.0.0.1>"),
            INVITE[..40].to_owned(),
            String::new(),
        ];
        for c in &declined {
            assert_eq!(Glance::read(c.as_bytes()), None, "{c}");
        }
        assert_eq!(
            Glance::read(b"INVITE sip:a@b SIP/2.0\r\nTo: <sip:\xff>\r\n\r\n"),
            None
        );
    }
}
