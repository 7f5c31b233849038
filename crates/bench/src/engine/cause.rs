//! Why a call failed, as the bench reports it.

use std::collections::BTreeMap;

use sip_core::Message;

/// Failure causes kept apart, at most: past them a final answer is
/// counted by its status alone.
const MAX_CAUSES: usize = 16;

/// Why a call failed on final answer `status`: the status, and the text
/// of the server's Warning (RFC 3261 §20.43) when it gave one — an
/// overloaded server's 503 says which of its limits refused the call —
/// unless `known` causes are too many to add another.
pub(super) fn failure_cause(
    status: u16,
    msg: &Message<'_>,
    known: &BTreeMap<String, u64>,
) -> String {
    let plain = format!("unexpected {status}");
    let Some(text) = msg
        .header(sip_core::HeaderName::Warning)
        .and_then(|w| w.split('"').nth(1))
    else {
        return plain;
    };
    let text: String = text.chars().take(80).collect();
    let cause = format!("{plain} ({text})");
    if known.len() < MAX_CAUSES || known.contains_key(&cause) {
        cause
    } else {
        plain
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_the_servers_warning_while_the_causes_are_few() {
        let with = b"SIP/2.0 503 Service Unavailable\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:a@h>;tag=2\r\nCall-ID: c\r\nCSeq: 1 REGISTER\r\nWarning: 399 sipsec \"too many location changes: try later\"\r\nRetry-After: 5\r\n\r\n";
        let without = b"SIP/2.0 486 Busy Here\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:b@h>;tag=2\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\n\r\n";
        let (with, without) = (
            Message::parse(with).unwrap(),
            Message::parse(without).unwrap(),
        );
        let mut known = BTreeMap::new();
        let cause = failure_cause(503, &with, &known);
        assert_eq!(
            cause,
            "unexpected 503 (too many location changes: try later)"
        );
        assert_eq!(failure_cause(486, &without, &known), "unexpected 486");
        known.insert(cause.clone(), 1);
        for i in 1..MAX_CAUSES {
            known.insert(format!("cause {i}"), 1);
        }
        assert_eq!(
            failure_cause(503, &with, &known),
            cause,
            "a known cause still counts"
        );
        known.remove(&cause);
        known.insert("one more".into(), 1);
        assert_eq!(
            failure_cause(503, &with, &known),
            "unexpected 503",
            "no new cause past the bound"
        );
    }
}
