//! Which method a response answers: named by the core for the answers
//! it writes ([`Answered`]), read from the CSeq of any other that leaves.

/// The methods counted by name; any other is counted as `other`, the last.
pub(super) const METHODS: [&str; 15] = [
    "INVITE",
    "ACK",
    "BYE",
    "CANCEL",
    "REGISTER",
    "OPTIONS",
    "PRACK",
    "SUBSCRIBE",
    "NOTIFY",
    "PUBLISH",
    "INFO",
    "REFER",
    "MESSAGE",
    "UPDATE",
    "other",
];

/// An answer the core wrote into its output (`Ctx::respond`): its length
/// and status code, to know it again when it leaves, and its request's
/// method, which is its CSeq method (the parser refuses a request whose
/// CSeq names another).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    len: usize,
    pub(super) code: u16,
    /// Its index in [`METHODS`].
    pub(super) method: usize,
}

impl Answered {
    /// The answer `out` holds, with `code`, to a `method` request.
    pub fn new(out: &[u8], code: u16, method: &sip_core::Method<'_>) -> Self {
        Self {
            len: out.len(),
            code,
            method: method_slot(method),
        }
    }

    /// Whether `bytes` are this answer: a status line with its code, and
    /// its length.
    pub fn describes(&self, bytes: &[u8]) -> bool {
        let c = self.code;
        let digits = [(c / 100 % 10) as u8, (c / 10 % 10) as u8, (c % 10) as u8].map(|d| b'0' + d);
        bytes.len() == self.len
            && bytes.starts_with(b"SIP/2.0 ")
            && bytes.get(8..11) == Some(&digits[..])
    }
}

/// A method's index in [`METHODS`].
fn method_slot(m: &sip_core::Method<'_>) -> usize {
    use sip_core::Method as M;
    match m {
        M::Invite => 0,
        M::Ack => 1,
        M::Bye => 2,
        M::Cancel => 3,
        M::Register => 4,
        M::Options => 5,
        M::Prack => 6,
        M::Subscribe => 7,
        M::Notify => 8,
        M::Publish => 9,
        M::Info => 10,
        M::Refer => 11,
        M::Message => 12,
        M::Update => 13,
        M::Extension(_) => METHODS.len() - 1,
    }
}

/// A method name's index in [`METHODS`].
pub(super) fn method_index(method: &str) -> usize {
    METHODS
        .iter()
        .position(|m| *m == method)
        .unwrap_or(METHODS.len() - 1)
}

/// The method named in a message's CSeq header, when it has one on a
/// line of its own before the body. Every message sent passes here, so
/// it is one walk from line to line (a `memchr` each) that stops at the
/// CSeq or at the blank line that ends the head; only lines that begin
/// with a `c` are read. (A head with two CSeq lines, which the parser
/// refuses, counts the first.)
pub(super) fn cseq_method(msg: &[u8]) -> Option<&'static str> {
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', msg).chain([msg.len()]) {
        let line = msg.get(start..end)?;
        start = end + 1;
        match line.first() {
            None => return None,
            Some(b'\r') if line.len() == 1 => return None,
            Some(b'C' | b'c') => {
                if let Some(method) = cseq_line(line) {
                    return method;
                }
            }
            Some(_) => {}
        }
    }
    None
}

/// What a header line says when it is a CSeq (RFC 3261 §20.16): the
/// method, if its value has one; `None` when it is another header.
fn cseq_line(line: &[u8]) -> Option<Option<&'static str>> {
    if !line
        .get(..4)
        .is_some_and(|n| n.eq_ignore_ascii_case(b"CSeq"))
    {
        return None;
    }
    let rest = &line[4..];
    // A line that is not text is no CSeq.
    if !rest.is_ascii() && std::str::from_utf8(rest).is_err() {
        return None;
    }
    let value = rest.trim_ascii_start().strip_prefix(b":")?;
    Some(second_word(value).map(method_named))
}

/// The counted name of a method: itself when it is one of [`METHODS`],
/// `other` when not.
fn method_named(word: &[u8]) -> &'static str {
    METHODS[..METHODS.len() - 1]
        .iter()
        .find(|m| m.as_bytes() == word)
        .unwrap_or(&METHODS[METHODS.len() - 1])
}

/// `split_ascii_whitespace().nth(1)` of bytes, without the iterator
/// adapters that cost more than the rest of the CSeq's reading.
fn second_word(b: &[u8]) -> Option<&[u8]> {
    let mut i = 0;
    for word in 0..2 {
        while b.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        let start = i;
        while b.get(i).is_some_and(|c| !c.is_ascii_whitespace()) {
            i += 1;
        }
        if start == i {
            return None;
        }
        if word == 1 {
            return Some(&b[start..i]);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cseq_line_in_the_body_names_no_method() {
        assert_eq!(
            cseq_method(b"SIP/2.0 200 OK\r\nCSeq: 2 BYE\r\n\r\nCSeq: 1 INFO\r\n"),
            Some("BYE")
        );
        assert_eq!(
            cseq_method(b"SIP/2.0 603 Decline\r\nVia: x\r\n\r\nCSeq: 1 INFO\r\n"),
            None
        );
        assert_eq!(
            cseq_method(b"SIP/2.0 200 OK\nCSeq: 3 ACK\n\nCSeq: 1 INFO\n"),
            Some("ACK")
        );
        assert_eq!(
            cseq_method(b"SIP/2.0 200 OK\r\nCall-ID: x\r\ncseq :9 REGISTER"),
            Some("REGISTER")
        );
        assert_eq!(cseq_method(b"SIP/2.0 200 OK\r\nCSeqX 1 BYE\r\n"), None);
    }

    #[test]
    fn a_methods_slot_is_the_one_its_name_counts_in() {
        for name in METHODS.iter().copied().chain(["FOO", "invite"]) {
            let m = sip_core::Method::from_token(name);
            assert_eq!(method_slot(&m), method_index(m.as_str()), "{name}");
        }
    }

    #[test]
    fn the_cseq_method_is_read_from_the_head_alone() {
        let cases: [(&[u8], Option<&str>); 18] = [
            (
                b"SIP/2.0 200 OK\r\nVia: x\r\nCSeq: 7 REGISTER\r\nContent-Length: 0\r\n\r\n",
                Some("REGISTER"),
            ),
            (
                b"SIP/2.0 200 OK\r\ncseq: 7 OPTIONS\r\n\r\nCSeq: 1 INFO\r\n",
                Some("OPTIONS"),
            ),
            (
                b"SIP/2.0 200 OK\r\nCSEQ: 7 BYE\r\nX: y\r\n\r\n",
                Some("BYE"),
            ),
            (b"SIP/2.0 200 OK\r\nX: y\r\n\r\nCSeq: 1 INFO\r\n", None),
            (b"SIP/2.0 200 OK\nX: y\n\nCSeq: 1 INFO\n", None),
            (b"\r\nSIP/2.0 200 OK\r\nCSeq: 1 INFO\r\n", None),
            (b"\nSIP/2.0 200 OK\nCSeq: 1 INFO\n", None),
            (b"CSeq: 4 ACK\r\n", Some("ACK")),
            (
                b"SIP/2.0 200 OK\r\nCSeqX 1 BYE\r\nCSeq: 2 BYE\r\n",
                Some("BYE"),
            ),
            (b"SIP/2.0 200 OK\r\nCSeq: 2\r\nCSeq: 3 BYE\r\n", None),
            (b"SIP/2.0 200 OK\r\nCSeq \t: 2 PRACK", Some("PRACK")),
            (
                b"SIP/2.0 200 OK\r\nCSeq: 2 \xff\r\nCSeq: 3 BYE\r\n",
                Some("BYE"),
            ),
            (b"SIP/2.0 200 OK\r\nCSeq: 2 FOO\r\n", Some("other")),
            (
                b"SIP/2.0 200 OK\r\nCSeq: 2 INVIT\xc3\x89\r\n",
                Some("other"),
            ),
            (b"SIP/2.0 200 OK\r\nCSeq", None),
            (b"SIP/2.0 200 OK\r\n", None),
            (b"", None),
            (b"SIP/2.0 200 OK\r\nVia: a\r\n\r\n", None),
        ];
        for (msg, want) in cases {
            assert_eq!(cseq_method(msg), want, "{}", String::from_utf8_lossy(msg));
        }
    }

    #[test]
    fn the_second_word_is_the_one_split_ascii_whitespace_gives() {
        for s in [
            "",
            " ",
            "1",
            " 1 ",
            "1 INVITE",
            " \t1\r\n INVITE \r",
            "1 INVITE x",
            "1  ÄÖ\u{a0}x y",
            "\u{c}7\u{c}BYE\u{c}",
            "1\u{a0}BYE",
        ] {
            assert_eq!(
                second_word(s.as_bytes()),
                s.split_ascii_whitespace().nth(1).map(str::as_bytes),
                "{s:?}"
            );
        }
    }
}
