//! Calls whose request an ICMP error quoted: nothing listens where it
//! went (or no route leads there), a transport error that fails the call
//! at once (RFC 3261 §18.4, §8.1.3.1) rather than after Timer F. On
//! shared flows the worker that reads the error hands it to the call's.

use std::time::Instant;

use super::{owner_of, Handoff, Worker};

/// Why such a call failed.
pub(super) const CAUSE: &str = "unreachable (ICMP error)";

/// The Call-ID of a request of which `quoted` is the start (an ICMP
/// message quotes only that): the value of the first complete
/// `Call-ID` (or compact `i`) line of its header, if the quote reaches it.
pub(super) fn quoted_call_id(quoted: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(quoted)
        .or_else(|e| std::str::from_utf8(&quoted[..e.valid_up_to()]))
        .ok()?;
    let mut lines = text.split("\r\n");
    lines.next()?;
    // The last piece may be cut short: only lines ended by CRLF count.
    let complete = text.matches("\r\n").count();
    for line in lines.take(complete.saturating_sub(1)) {
        if line.is_empty() {
            return None;
        }
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        if name.eq_ignore_ascii_case("Call-ID") || name.eq_ignore_ascii_case("i") {
            return Some(value.trim());
        }
    }
    None
}

/// Marks a handed-over quote (a SIP message never starts with NUL).
const QUOTE: u8 = 0;

impl Handoff {
    /// Hands over the start of a request an ICMP error quoted.
    pub(super) fn put_quoted(&self, quoted: &[u8]) {
        self.push([&[QUOTE], quoted].concat());
    }
}

/// A handed-over quote, without its mark; `None` for a message.
pub(super) fn as_quoted(handed: &[u8]) -> Option<&[u8]> {
    handed.strip_prefix(&[QUOTE])
}

impl Worker<'_> {
    /// Fails the calls whose requests ICMP errors quoted since the last
    /// turn; a quote of another worker's call (shared flows) goes to it.
    pub(super) fn fail_unreachable(&mut self) {
        let mut quoted = Vec::new();
        self.flows.take_unreachable(&mut quoted);
        for q in &quoted {
            self.fail_quoted(q);
        }
    }

    /// Fails the call whose request `quoted` starts, if it is live.
    pub(super) fn fail_quoted(&mut self, quoted: &[u8]) {
        let Some(id) = quoted_call_id(quoted) else {
            return;
        };
        if let Some(h) = owner_of(id)
            .filter(|w| *w != self.id)
            .and_then(|w| self.handoffs.get(w))
        {
            return h.put_quoted(quoted);
        }
        if let Some(slot) = self.slot_of(id) {
            self.fail(slot, CAUSE, Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_call_id_is_read_from_whole_lines_of_the_quote_only() {
        let req = b"REGISTER sip:a SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nCall-ID: 1f.2.0.ab\r\nCSeq: 1 REGISTER\r\n\r\n";
        assert_eq!(quoted_call_id(req), Some("1f.2.0.ab"));
        let compact = b"OPTIONS sip:a SIP/2.0\r\ni: x.y\r\n\r\n";
        assert_eq!(quoted_call_id(compact), Some("x.y"));
        // Cut inside the Call-ID line: its value may be short, so none.
        let cut = &req[..req.windows(4).position(|w| w == b".0.a").expect("in") + 2];
        assert_eq!(quoted_call_id(cut), None);
        // Cut before it, or a header without one.
        assert_eq!(quoted_call_id(&req[..30]), None);
        assert_eq!(
            quoted_call_id(b"REGISTER sip:a SIP/2.0\r\nTo: <sip:a>\r\n\r\n"),
            None
        );
        // Bytes that are not UTF-8 after the header end nothing.
        let mut odd = req.to_vec();
        odd.extend_from_slice(&[0xff, 0xfe]);
        assert_eq!(quoted_call_id(&odd), Some("1f.2.0.ab"));
    }
}
