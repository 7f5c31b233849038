//! `sipsec sip check`: validate a captured SIP message and explain it.

use std::fmt::Write as _;
use std::io::Read;
use std::path::Path;

use sip_core::{Message, ParseError, StartLine};

/// Reads `path` (or standard input for `-`).
pub fn read_input(path: &Path) -> Result<Vec<u8>, String> {
    if path.as_os_str() == "-" {
        let mut v = Vec::new();
        std::io::stdin()
            .read_to_end(&mut v)
            .map_err(|e| format!("cannot read standard input: {e}"))?;
        Ok(v)
    } else {
        std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    }
}

/// Checks `bytes`; returns the report and whether the message is valid.
pub fn check(bytes: &[u8]) -> (String, bool) {
    match Message::parse(bytes).and_then(|m| m.validate_all().map(|()| m)) {
        Ok(m) => (summary(&m, bytes.len()), true),
        Err(e) => (explain(bytes, &e), false),
    }
}

fn summary(m: &Message<'_>, input_len: usize) -> String {
    let mut s = String::new();
    let _ = match m.start_line() {
        StartLine::Request { method, uri } => writeln!(s, "ok: request {method} {uri}"),
        StartLine::Response { status, reason } => {
            writeln!(s, "ok: response {} {reason}", status.as_u16())
        }
    };
    let tag = |t: Option<&str>| t.map(|t| format!(" (tag {t})")).unwrap_or_default();
    let _ = writeln!(s, "  Call-ID:      {}", m.call_id());
    let _ = writeln!(s, "  CSeq:         {} {}", m.cseq().seq, m.cseq().method);
    let _ = writeln!(
        s,
        "  From:         {}{}",
        m.from().uri(),
        tag(m.from().tag())
    );
    let _ = writeln!(s, "  To:           {}{}", m.to().uri(), tag(m.to().tag()));
    let v = m.top_via();
    let _ = writeln!(
        s,
        "  Via:          {} value(s); top {}/{} {}{} branch {}",
        m.via_count(),
        v.protocol_name(),
        v.transport_str(),
        v.host(),
        v.port().map(|p| format!(":{p}")).unwrap_or_default(),
        v.branch().unwrap_or("(none: RFC 2543 peer)")
    );
    if let Some(mf) = m.max_forwards() {
        let _ = writeln!(s, "  Max-Forwards: {mf}");
    }
    if m.is_contact_star() {
        let _ = writeln!(s, "  Contact:      * (remove all bindings)");
    }
    for c in m.contacts() {
        let _ = writeln!(
            s,
            "  Contact:      {}{}{}",
            c.addr.uri(),
            c.expires
                .map(|e| format!(" expires={e}"))
                .unwrap_or_default(),
            c.q.map(|q| format!(" q={}.{:03}", q / 1000, q % 1000))
                .unwrap_or_default()
        );
    }
    if let Some(e) = m.expires() {
        let _ = writeln!(s, "  Expires:      {e}");
    }
    if m.route_count() > 0 {
        let _ = writeln!(s, "  Route:        {} value(s)", m.route_count());
    }
    let _ = writeln!(
        s,
        "  Body:         {} byte(s){}",
        m.body().len(),
        m.content_type()
            .map(|t| format!(" of {t}"))
            .unwrap_or_default()
    );
    let _ = writeln!(s, "  Headers:      {}", m.header_count());
    let trailing = input_len - m.start_offset() - m.len();
    if trailing > 0 {
        let _ = writeln!(
            s,
            "  Note:         {trailing} byte(s) after the message were ignored"
        );
    }
    s
}

/// Renders the error with the line it occurred on and a caret.
fn explain(bytes: &[u8], e: &ParseError) -> String {
    let at = e.offset.min(bytes.len());
    let line_start = bytes[..at]
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |p| p + 1);
    let line_no = bytes[..line_start].iter().filter(|b| **b == b'\n').count() + 1;
    let line_end = bytes[line_start..]
        .iter()
        .position(|b| *b == b'\n' || *b == b'\r')
        .map_or(bytes.len(), |p| line_start + p);
    let line = String::from_utf8_lossy(&bytes[line_start..line_end]);
    let column = String::from_utf8_lossy(&bytes[line_start..at])
        .chars()
        .count()
        + 1;
    let mut s = String::new();
    let _ = writeln!(s, "error: {e}");
    let _ = writeln!(s, "  --> line {line_no}, column {column}");
    let _ = writeln!(s, "{line_no:>4} | {line}");
    let _ = writeln!(s, "     | {}^", " ".repeat(column - 1));
    let _ = writeln!(s, "  a server answers this with {}", e.status());
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_at_the_error() {
        let msg = b"OPTIONS sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: sip:c@d;;tag=1\r\nTo: <sip:a@b>\r\nCall-ID: x\r\nCSeq: 1 OPTIONS\r\n\r\n";
        let (report, ok) = check(msg);
        assert!(!ok);
        assert!(report.contains("line 3, column 15"), "{report}");
        assert!(report.contains("invalid From header"), "{report}");
        assert!(report.contains("     |               ^"), "{report}");
    }
}
