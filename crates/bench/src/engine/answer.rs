//! A response as the generator reads it: matched to its call by a
//! glance (start line, Call-ID, CSeq, To tag), parsed whole only where
//! the generator needs more of it — a 2xx to an INVITE (the dialog's
//! route set and remote target), and any answer of 300 or above (a
//! challenge, or the cause of a failure). The rest of a response is
//! not checked: a load generator reads what it acts on, as SIPp does,
//! and most of its CPU per call went to decoding URIs and parameters it
//! never looked at.

use sip_core::cseq::CSeq;
use sip_core::message::Glance;
use sip_core::{Message, Method};

/// A response, read.
pub(super) struct Answer<'a> {
    pub(super) status: u16,
    pub(super) call_id: &'a str,
    pub(super) cseq: CSeq<'a>,
    pub(super) to_tag: Option<&'a str>,
    /// The whole parse, where [`needs_whole`] says so.
    pub(super) whole: Option<Message<'a>>,
}

impl<'a> Answer<'a> {
    /// `None` for a request or what does not parse.
    pub(super) fn read(bytes: &'a [u8]) -> Option<Self> {
        if let Some(g) = Glance::read(bytes) {
            let status = g.status?;
            if !needs_whole(status, g.cseq.method) {
                return Some(Self {
                    status,
                    call_id: g.call_id,
                    cseq: g.cseq,
                    to_tag: g.to_tag,
                    whole: None,
                });
            }
        }
        let m = Message::parse(bytes).ok()?;
        Some(Self {
            status: m.status()?.as_u16(),
            call_id: m.call_id(),
            cseq: m.cseq(),
            to_tag: m.to().tag(),
            whole: Some(m),
        })
    }

    /// The whole parse of `bytes` (this answer's), made now if the
    /// glance did without it.
    pub(super) fn whole(&self, bytes: &'a [u8]) -> Option<Message<'a>> {
        self.whole.or_else(|| Message::parse(bytes).ok())
    }
}

/// An answer the generator reads beyond its call's identity.
fn needs_whole(status: u16, method: Method<'_>) -> bool {
    status >= 300 || (method == Method::Invite && status >= 200)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: &str, method: &str) -> String {
        format!(
            "SIP/2.0 {status}\r\nVia: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK1\r\n\
             From: <sip:a@127.0.0.1>;tag=1\r\nTo: <sip:b@127.0.0.1>;tag=2\r\n\
             Call-ID: c@127.0.0.1\r\nCSeq: 7 {method}\r\nContent-Length: 0\r\n\r\n"
        )
    }

    #[test]
    fn only_a_dialog_a_challenge_or_a_failure_is_parsed_whole() {
        for (status, method, whole) in [
            ("100 Trying", "INVITE", false),
            ("180 Ringing", "INVITE", false),
            ("200 OK", "INVITE", true),
            ("200 OK", "BYE", false),
            ("200 OK", "REGISTER", false),
            ("401 Unauthorized", "REGISTER", true),
            ("486 Busy Here", "INVITE", true),
        ] {
            let text = answer(status, method);
            let a = Answer::read(text.as_bytes()).expect(status);
            assert_eq!(a.whole.is_some(), whole, "{status} {method}");
            assert_eq!(
                (a.call_id, a.cseq.seq, a.to_tag),
                ("c@127.0.0.1", 7, Some("2"))
            );
            assert_eq!(a.cseq.method.as_str(), method);
            assert!(a.whole(text.as_bytes()).is_some());
        }
    }

    #[test]
    fn a_request_or_a_broken_answer_is_not_an_answer() {
        let request =
            "BYE sip:a@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1;branch=z9hG4bK2\r\n\
                       From: <sip:b@x>;tag=2\r\nTo: <sip:a@x>;tag=1\r\nCall-ID: c@x\r\n\
                       CSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n";
        assert!(Answer::read(request.as_bytes()).is_none());
        let broken = answer("200 OK", "BYE").replace("Call-ID: c@127.0.0.1\r\n", "");
        assert!(Answer::read(broken.as_bytes()).is_none());
        // A quoted To is past a glance: the whole parse reads it.
        let quoted = answer("180 Ringing", "INVITE").replace("To: <", "To: \"B\" <");
        let a = Answer::read(quoted.as_bytes()).unwrap();
        assert!(a.whole.is_some() && a.to_tag == Some("2"));
    }
}
