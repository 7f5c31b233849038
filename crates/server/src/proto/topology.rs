//! Topology hiding toward a trunk (`[[trunk]] hide_topology`): nothing of
//! the inside network crosses to the carrier. On a request sent out, the
//! Vias below this proxy's are sealed into a parameter of its own Via,
//! the Call-ID is replaced by a sealed one, and the caller's Contact by a
//! URI of this proxy carrying it sealed; responses and the carrier's
//! in-dialog requests bring them back, and are restored on their way in.
//! A call the carrier begins toward the inside is hidden the same way
//! except for its Call-ID, which is the carrier's own: the callee's
//! Contact in the answers is sealed, and so are the Vias and Contact of
//! the callee's requests in that dialog (its Record-Route and the
//! inbound mark of this proxy's Via say [`KEEP`]).
//! Sealing is AES-256-GCM under a key of this process, with the nonce
//! derived from the plaintext by HMAC-SHA-256 (so a Call-ID always seals
//! the same way and needs no table); what cannot be opened is not ours.
//!
//! The functions here rewrite messages as written for sending; they read
//! no clock and keep no state.

use hmac::{Hmac, Mac};
use openssl::symm::{decrypt_aead, encrypt_aead, Cipher};
use privacy::Encoding;
use sha2::Sha256;
use sip_core::{HeaderName, Message};

/// The prefix of sealed Call-IDs and contact users.
pub const SEALED: &str = "th-";
/// The Via parameter carrying the sealed Vias.
pub const VIA_PARAM: &str = "th";
/// The Via parameter marking a request that came in from a hidden trunk
/// (its responses are hidden on the way out).
pub const INBOUND: &str = "th-in";
/// The Record-Route parameter marking a hidden trunk's dialog.
pub const RR_PARAM: &str = "th";
/// The parameter of this proxy's Record-Route carrying the inside
/// proxies' Record-Routes sealed.
pub const RR_INSIDE: &str = "thr";
/// The value of [`RR_PARAM`] and [`INBOUND`] in a dialog the carrier
/// began: its Call-ID is the carrier's, never sealed.
pub const KEEP: &str = "k";
/// Longest text sealed (a Via stack, a Call-ID, a contact).
const MAX_PLAIN: usize = 4096;

/// Seals and opens with this process's keys.
pub struct Hider {
    aead: [u8; 32],
    mac: [u8; 32],
}

impl std::fmt::Debug for Hider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hider(…)")
    }
}

impl Hider {
    /// With keys `aead` and `mac`.
    pub fn new(aead: [u8; 32], mac: [u8; 32]) -> Self {
        Self { aead, mac }
    }

    /// `plain` sealed, as base32 text (SIP token and URI user safe).
    pub fn seal(&self, plain: &str) -> Option<String> {
        if plain.len() > MAX_PLAIN {
            return None;
        }
        let mut m = Hmac::<Sha256>::new_from_slice(&self.mac).ok()?;
        m.update(plain.as_bytes());
        let nonce = m.finalize().into_bytes();
        let nonce = &nonce[..12];
        let mut tag = [0u8; 16];
        let ct = encrypt_aead(
            Cipher::aes_256_gcm(),
            &self.aead,
            Some(nonce),
            &[],
            plain.as_bytes(),
            &mut tag,
        )
        .ok()?;
        let mut raw = Vec::with_capacity(12 + ct.len() + 16);
        raw.extend_from_slice(nonce);
        raw.extend_from_slice(&ct);
        raw.extend_from_slice(&tag);
        Some(Encoding::Base32.encode(&raw))
    }

    /// What `sealed` holds, when this process sealed it.
    pub fn open(&self, sealed: &str) -> Option<String> {
        if sealed.len() > MAX_PLAIN * 2 {
            return None;
        }
        let raw = Encoding::Base32.decode(sealed)?;
        if raw.len() < 28 {
            return None;
        }
        let (nonce, rest) = raw.split_at(12);
        let (ct, tag) = rest.split_at(rest.len() - 16);
        let plain =
            decrypt_aead(Cipher::aes_256_gcm(), &self.aead, Some(nonce), &[], ct, tag).ok()?;
        String::from_utf8(plain).ok()
    }

    /// A Call-ID as the carrier sees it.
    pub fn hide_call_id(&self, call_id: &str) -> Option<String> {
        Some(format!("{SEALED}{}", self.seal(call_id)?))
    }

    /// The inside Call-ID of a sealed one; `None` when it is not one.
    pub fn reveal_call_id(&self, call_id: &str) -> Option<String> {
        self.open(call_id.strip_prefix(SEALED)?)
    }
}

/// One edit of a message: bytes `start..end` replaced by `text`.
type Edit = (usize, usize, String);

fn at(whole: &[u8], part: &str) -> usize {
    part.as_ptr() as usize - whole.as_ptr() as usize
}

/// The span of a whole header line, its CRLF included.
fn line_span(whole: &[u8], line: &str) -> (usize, usize) {
    let start = at(whole, line);
    let mut end = start + line.len();
    if whole.get(end..end + 2) == Some(b"\r\n") {
        end += 2;
    }
    (start, end)
}

/// `bytes` with `edits` (in any order, not overlapping) applied.
fn apply(bytes: &[u8], mut edits: Vec<Edit>, out: &mut Vec<u8>) {
    edits.sort_by_key(|e| e.0);
    out.clear();
    let mut from = 0;
    for (start, end, text) in edits {
        out.extend_from_slice(&bytes[from..start]);
        out.extend_from_slice(text.as_bytes());
        from = end;
    }
    out.extend_from_slice(&bytes[from..]);
}

/// The Call-ID edit: `f` gives the new value.
fn call_id_edit(
    written: &[u8],
    m: &Message<'_>,
    f: impl FnOnce(&str) -> Option<String>,
) -> Option<Edit> {
    let h = m.headers_named(HeaderName::CallId).next()?;
    let new = f(h.value)?;
    let s = at(written, h.value);
    Some((s, s + h.value.len(), new))
}

/// The first Contact's URI replaced by one of this proxy (`here`)
/// carrying it sealed.
fn contact_edit(written: &[u8], m: &Message<'_>, th: &Hider, here: &str) -> Option<Edit> {
    let c = m.contacts().next()?;
    let uri = c.addr.uri().as_str();
    let sealed = th.seal(uri)?;
    let s = at(written, uri);
    Some((s, s + uri.len(), format!("sip:{SEALED}{sealed}@{here}")))
}

/// Whether a name-addr value's URI has parameter `name`.
fn has_param(value: &str, name: &str) -> bool {
    let uri = value.trim().trim_start_matches('<');
    let uri = uri.split('>').next().unwrap_or(uri);
    uri.split(';').skip(1).any(|p| {
        p.split('=')
            .next()
            .is_some_and(|n| n.trim().eq_ignore_ascii_case(name))
    })
}

/// An initial request's Record-Routes below this proxy's (the first,
/// marked hidden): sealed into a parameter of this proxy's, their lines
/// taken out. `None` when they cannot be sealed.
fn inside_routes_edits(written: &[u8], m: &Message<'_>, th: &Hider) -> Option<Vec<Edit>> {
    let mut rrs = m.headers_named(HeaderName::RecordRoute);
    let Some(ours) = rrs.next().filter(|h| has_param(h.value, RR_PARAM)) else {
        return Some(Vec::new());
    };
    let inner: Vec<_> = rrs.collect();
    if inner.is_empty() {
        return Some(Vec::new());
    }
    let list = inner.iter().map(|h| h.value).collect::<Vec<_>>().join(", ");
    let sealed = th.seal(&list)?;
    let gt = at(written, ours.value) + ours.value.rfind('>')?;
    let mut edits = vec![(gt, gt, format!(";{RR_INSIDE}={sealed}"))];
    for h in inner {
        let (s, e) = line_span(written, h.line);
        edits.push((s, e, String::new()));
    }
    Some(edits)
}

/// The sealed inside Record-Routes in this proxy's entry of a
/// `header` (Record-Route of a response, Route of a request) opened
/// back into the list after it. `None` when there are none.
fn inside_routes_revealed(
    bytes: &[u8],
    m: &Message<'_>,
    th: &Hider,
    header: HeaderName,
) -> Option<Edit> {
    let mark = format!(";{RR_INSIDE}=");
    let h = m.headers_named(header).find(|h| h.value.contains(&mark))?;
    let start = h.value.find(&mark)?;
    let token_at = start + mark.len();
    let len = h.value[token_at..].find([';', '>'])?;
    if h.value.as_bytes().get(token_at + len) != Some(&b'>') {
        return None;
    }
    let list = th.open(&h.value[token_at..token_at + len])?;
    let s = at(bytes, h.value) + start;
    Some((s, s + mark.len() + len + 1, format!(">, {list}")))
}

/// A request `written` as forwarded to a hidden trunk (this proxy's Via
/// on top): the Vias below sealed into its Via, Call-ID and Contact
/// sealed (the Call-ID only when `seal_call_id`: the dialog is the
/// inside's). `here` is this proxy's address toward the trunk.
pub fn hide_request(
    written: &[u8],
    th: &Hider,
    here: &str,
    seal_call_id: bool,
    out: &mut Vec<u8>,
) -> bool {
    let Ok(m) = Message::parse(written) else {
        return false;
    };
    let mut vias = m.headers_named(HeaderName::Via);
    let Some(ours) = vias.next() else {
        return false;
    };
    let inner: Vec<_> = vias.collect();
    let mut edits = Vec::new();
    if !inner.is_empty() {
        let stack = inner.iter().map(|h| h.value).collect::<Vec<_>>().join(", ");
        let Some(sealed) = th.seal(&stack) else {
            return false;
        };
        let end = at(written, ours.value) + ours.value.len();
        edits.push((end, end, format!(";{VIA_PARAM}={sealed}")));
        for h in inner {
            let (s, e) = line_span(written, h.line);
            edits.push((s, e, String::new()));
        }
    }
    if seal_call_id {
        edits.extend(call_id_edit(written, &m, |c| th.hide_call_id(c)));
    }
    let Some(routes) = inside_routes_edits(written, &m, th) else {
        return false;
    };
    edits.extend(routes);
    if m.method() != sip_core::Method::Ack && m.method() != sip_core::Method::Cancel {
        edits.extend(contact_edit(written, &m, th, here));
    }
    apply(written, edits, out);
    true
}

/// The sealed Via stack in a Via's parameter, if any.
fn sealed_stack(via: &str) -> Option<&str> {
    via.split(';').find_map(|p| {
        p.trim()
            .strip_prefix(VIA_PARAM)
            .and_then(|v| v.strip_prefix('='))
    })
}

/// A response from a hidden trunk as it arrived (`bytes`; this proxy's
/// Via on top, carrying the sealed stack): the Vias below restored, the
/// parameter taken off, the Call-ID revealed — a response as if nothing
/// had been hidden. `false` when it is not one.
pub fn reveal_response(bytes: &[u8], th: &Hider, out: &mut Vec<u8>) -> bool {
    let Ok(m) = Message::parse(bytes) else {
        return false;
    };
    let Some(ours) = m.headers_named(HeaderName::Via).next() else {
        return false;
    };
    let Some(sealed) = sealed_stack(ours.value) else {
        return false;
    };
    let Some(stack) = th.open(sealed) else {
        return false;
    };
    let param = format!(";{VIA_PARAM}={sealed}");
    let Some(p) = ours.value.find(&param) else {
        return false;
    };
    let p = at(bytes, ours.value) + p;
    let (_, end) = line_span(bytes, ours.line);
    let mut edits = vec![
        (p, p + param.len(), String::new()),
        (end, end, format!("Via: {stack}\r\n")),
    ];
    edits.extend(call_id_edit(bytes, &m, |c| th.reveal_call_id(c)));
    edits.extend(inside_routes_revealed(
        bytes,
        &m,
        th,
        HeaderName::RecordRoute,
    ));
    apply(bytes, edits, out);
    true
}

/// A request from a hidden trunk as it arrived (`bytes`): a Request-URI
/// that is a sealed contact of this proxy becomes the contact again, a
/// sealed Call-ID the inside one. `false` when neither is sealed.
pub fn reveal_request(bytes: &[u8], th: &Hider, out: &mut Vec<u8>) -> bool {
    let Ok(m) = Message::parse(bytes) else {
        return false;
    };
    let mut edits = Vec::new();
    if let Some(uri) = m.request_uri() {
        let opened = uri
            .user()
            .and_then(|u| u.strip_prefix(SEALED))
            .and_then(|s| th.open(s));
        if let Some(contact) = opened {
            let s = at(bytes, uri.as_str());
            edits.push((s, s + uri.as_str().len(), contact));
        }
    }
    edits.extend(call_id_edit(bytes, &m, |c| th.reveal_call_id(c)));
    edits.extend(inside_routes_revealed(bytes, &m, th, HeaderName::Route));
    if edits.is_empty() {
        return false;
    }
    apply(bytes, edits, out);
    true
}

/// A response going out to a hidden trunk (`incoming`'s top Via, ours,
/// is marked inbound): its Contact sealed, and its Call-ID when
/// `seal_call_id`.
pub fn hide_response(
    written: &[u8],
    th: &Hider,
    here: &str,
    seal_call_id: bool,
    out: &mut Vec<u8>,
) -> bool {
    let Ok(m) = Message::parse(written) else {
        return false;
    };
    let mut edits: Vec<Edit> = Vec::new();
    if seal_call_id {
        edits.extend(call_id_edit(written, &m, |c| th.hide_call_id(c)));
    }
    edits.extend(contact_edit(written, &m, th, here));
    let Some(routes) = callee_side_routes_edits(written, &m, th) else {
        return false;
    };
    edits.extend(routes);
    apply(written, edits, out);
    true
}

/// The Record-Route values of `m`, each with the line it is in.
fn record_routes<'a>(m: &Message<'a>) -> Vec<(&'a str, sip_core::Header<'a>)> {
    let mut out = Vec::new();
    for h in m.headers_named(HeaderName::RecordRoute) {
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in h.value.char_indices() {
            match c {
                '<' => depth += 1,
                '>' => depth -= 1,
                ',' if depth == 0 => {
                    out.push((h.value[start..i].trim(), h));
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.push((h.value[start..].trim(), h));
    }
    out
}

/// A response going out to a hidden trunk in a dialog it began: the
/// Record-Routes of inside proxies between this proxy and the callee
/// (above this proxy's, marked hidden) sealed into a parameter of this
/// proxy's, all the Record-Route lines written again as one. `None`
/// when they cannot be sealed.
fn callee_side_routes_edits(written: &[u8], m: &Message<'_>, th: &Hider) -> Option<Vec<Edit>> {
    let all = record_routes(m);
    let Some(ours) = all.iter().position(|(v, _)| has_param(v, RR_PARAM)) else {
        return Some(Vec::new());
    };
    if ours == 0 {
        return Some(Vec::new());
    }
    let inside: Vec<&str> = all[..ours].iter().map(|(v, _)| *v).collect();
    let sealed = th.seal(&inside.join(", "))?;
    let own = all[ours].0;
    let gt = own.rfind('>')?;
    let mut values = vec![format!("{};{RR_INSIDE}={sealed}{}", &own[..gt], &own[gt..])];
    values.extend(all[ours + 1..].iter().map(|(v, _)| (*v).to_owned()));
    let mut edits = Vec::new();
    let mut lines: Vec<&str> = all.iter().map(|(_, h)| h.line).collect();
    lines.dedup_by_key(|l| l.as_ptr());
    for (i, line) in lines.iter().enumerate() {
        let (s, e) = line_span(written, line);
        let text = if i == 0 {
            format!("Record-Route: {}\r\n", values.join(", "))
        } else {
            String::new()
        };
        edits.push((s, e, text));
    }
    Some(edits)
}

/// Whether a Via (ours, on a response) marks an inbound request from a
/// hidden trunk: `Some(seal_call_id)` when it does.
pub fn is_inbound(via: &str) -> Option<bool> {
    via.split(';').find_map(|p| match p.trim().split_once('=') {
        None if p.trim() == INBOUND => Some(true),
        Some((n, v)) if n == INBOUND => Some(v != KEEP),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hider() -> Hider {
        Hider::new([7; 32], [9; 32])
    }

    #[test]
    fn sealing_is_deterministic_authenticated_and_keyed() {
        let th = hider();
        let a = th.hide_call_id("c1@10.0.0.5").unwrap();
        assert_eq!(a, th.hide_call_id("c1@10.0.0.5").unwrap());
        assert!(!a.contains("10.0.0.5"));
        assert_eq!(th.reveal_call_id(&a).as_deref(), Some("c1@10.0.0.5"));
        assert_eq!(
            Hider::new([8; 32], [9; 32]).reveal_call_id(&a),
            None,
            "another key"
        );
        let mut bad = a.clone().into_bytes();
        let i = bad.len() - 3;
        bad[i] = if bad[i] == b'a' { b'b' } else { b'a' };
        assert_eq!(
            th.reveal_call_id(&String::from_utf8(bad).unwrap()),
            None,
            "tampered"
        );
        assert_eq!(th.reveal_call_id("plain-call-id"), None);
    }

    #[test]
    fn a_request_out_and_its_response_back_lose_and_regain_the_inside() {
        let th = hider();
        let req = b"INVITE sip:+1@gw.example SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKp\r\n\
            Via: SIP/2.0/UDP 10.0.0.5:5062;branch=z9hG4bKphone;rport=5062;received=10.0.0.5\r\n\
            From: <sip:alice@inside>;tag=1\r\nTo: <sip:+1@gw.example>\r\nCall-ID: k@10.0.0.5\r\n\
            CSeq: 1 INVITE\r\nContact: <sip:alice@10.0.0.5:5062>\r\nContent-Length: 0\r\n\r\n";
        let mut out = Vec::new();
        assert!(hide_request(req, &th, "192.0.2.1:5060", true, &mut out));
        let first = out.clone();
        let text = String::from_utf8(first.clone()).unwrap();
        assert!(
            !text.contains("10.0.0.5") && !text.contains("z9hG4bKphone"),
            "{text}"
        );
        let sent = Message::parse(&first).unwrap();
        assert_eq!(sent.vias().count(), 1);
        let contact = sent.contacts().next().unwrap();
        assert!(contact.addr.uri().as_str().starts_with("sip:th-"));
        // The carrier answers with our Via (sealed stack) on top.
        let hidden_id = sent.call_id().to_owned();
        let via = sent.top_via().as_str().to_owned();
        let resp = format!(
            "SIP/2.0 200 OK\r\nVia: {via}\r\nFrom: <sip:alice@inside>;tag=1\r\nTo: <sip:+1@gw.example>;tag=g\r\n\
             Call-ID: {hidden_id}\r\nCSeq: 1 INVITE\r\nContact: <sip:gw@192.0.2.9>\r\nContent-Length: 0\r\n\r\n"
        );
        assert!(reveal_response(resp.as_bytes(), &th, &mut out));
        let back = Message::parse(&out).unwrap();
        assert_eq!(back.call_id(), "k@10.0.0.5");
        let vias: Vec<_> = back
            .vias()
            .map(|v| v.branch().unwrap_or("").to_owned())
            .collect();
        assert_eq!(vias, ["z9hG4bKp", "z9hG4bKphone"]);
        assert!(!back.top_via().as_str().contains(";th="));
        // The carrier's BYE to the sealed contact comes back in.
        let target = contact.addr.uri().as_str().to_owned();
        let bye = format!(
            "BYE {target} SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.9;branch=z9hG4bKgw\r\nFrom: <sip:+1@gw.example>;tag=g\r\n\
             To: <sip:alice@inside>;tag=1\r\nCall-ID: {hidden_id}\r\nCSeq: 5 BYE\r\nContent-Length: 0\r\n\r\n"
        );
        assert!(reveal_request(bye.as_bytes(), &th, &mut out));
        let inside = Message::parse(&out).unwrap();
        assert_eq!(
            inside.request_uri().unwrap().as_str(),
            "sip:alice@10.0.0.5:5062"
        );
        assert_eq!(inside.call_id(), "k@10.0.0.5");
    }

    #[test]
    fn a_call_the_carrier_began_keeps_its_call_id_and_loses_the_callees_contact() {
        let th = hider();
        assert_eq!(
            is_inbound("SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKx;th-in"),
            Some(true)
        );
        assert_eq!(
            is_inbound("SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKx;th-in=k"),
            Some(false)
        );
        assert_eq!(
            is_inbound("SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKx;th=abc"),
            None
        );
        let ok = b"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 192.0.2.9;branch=z9hG4bKgw\r\n\
            From: <sip:+1@gw.example>;tag=g\r\nTo: <sip:bob@inside>;tag=b\r\nCall-ID: carrier-7@192.0.2.9\r\n\
            CSeq: 1 INVITE\r\nContact: <sip:bob@10.0.0.6:5064>\r\nContent-Length: 0\r\n\r\n";
        let mut out = Vec::new();
        assert!(hide_response(ok, &th, "192.0.2.1:5060", false, &mut out));
        let sent = Message::parse(&out).unwrap();
        assert_eq!(sent.call_id(), "carrier-7@192.0.2.9");
        assert!(!String::from_utf8_lossy(&out).contains("10.0.0.6"));
        // The callee's BYE in that dialog: Vias and Contact sealed, the
        // carrier's Call-ID kept.
        let bye =
            b"BYE sip:gw@192.0.2.9 SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKp\r\n\
            Via: SIP/2.0/UDP 10.0.0.6:5064;branch=z9hG4bKbob\r\nFrom: <sip:bob@inside>;tag=b\r\n\
            To: <sip:+1@gw.example>;tag=g\r\nCall-ID: carrier-7@192.0.2.9\r\nCSeq: 2 BYE\r\n\
            Contact: <sip:bob@10.0.0.6:5064>\r\nContent-Length: 0\r\n\r\n";
        assert!(hide_request(bye, &th, "192.0.2.1:5060", false, &mut out));
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(
            !text.contains("10.0.0.6") && !text.contains("z9hG4bKbob"),
            "{text}"
        );
        assert!(text.contains("Call-ID: carrier-7@192.0.2.9"), "{text}");
    }

    #[test]
    fn inside_proxies_record_routes_are_sealed_into_ours_and_come_back() {
        let th = hider();
        let req = b"INVITE sip:+1@gw.example SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKp\r\n\
            Via: SIP/2.0/UDP 10.0.0.7;branch=z9hG4bKinner\r\nVia: SIP/2.0/UDP 10.0.0.5:5062;branch=z9hG4bKphone\r\n\
            Record-Route: <sip:192.0.2.1:5060;th;lr>\r\nRecord-Route: <sip:10.0.0.7;lr>, <sip:10.0.0.8;lr>\r\n\
            From: <sip:alice@inside>;tag=1\r\nTo: <sip:+1@gw.example>\r\nCall-ID: r@10.0.0.5\r\n\
            CSeq: 1 INVITE\r\nContact: <sip:alice@10.0.0.5:5062>\r\nContent-Length: 0\r\n\r\n";
        let mut out = Vec::new();
        assert!(hide_request(req, &th, "192.0.2.1:5060", true, &mut out));
        let first = out.clone();
        let text = String::from_utf8(first.clone()).unwrap();
        assert!(!text.contains("10.0.0."), "{text}");
        let sent = Message::parse(&first).unwrap();
        let rr = sent
            .headers_named(HeaderName::RecordRoute)
            .next()
            .unwrap()
            .value
            .to_owned();
        assert!(rr.starts_with("<sip:192.0.2.1:5060;th;lr;thr="), "{rr}");
        // The carrier's 200 adds its own Record-Route above ours (one
        // line, comma-separated).
        let resp = format!(
            "SIP/2.0 200 OK\r\nVia: {}\r\nRecord-Route: <sip:gw.example;lr>, {rr}\r\n\
             From: <sip:alice@inside>;tag=1\r\nTo: <sip:+1@gw.example>;tag=g\r\nCall-ID: {}\r\nCSeq: 1 INVITE\r\n\
             Contact: <sip:gw@192.0.2.9>\r\nContent-Length: 0\r\n\r\n",
            sent.top_via().as_str(),
            sent.call_id()
        );
        assert!(reveal_response(resp.as_bytes(), &th, &mut out));
        let back = String::from_utf8(out.clone()).unwrap();
        assert!(
            back.contains("Record-Route: <sip:gw.example;lr>, <sip:192.0.2.1:5060;th;lr>, <sip:10.0.0.7;lr>, <sip:10.0.0.8;lr>\r\n"),
            "{back}"
        );
        // The carrier's BYE along its route set: ours expands again.
        let bye = format!(
            "BYE sip:x@192.0.2.1 SIP/2.0\r\nRoute: {rr}\r\nVia: SIP/2.0/UDP 192.0.2.9;branch=z9hG4bKgw\r\n\
             From: <sip:+1@gw.example>;tag=g\r\nTo: <sip:alice@inside>;tag=1\r\nCall-ID: {}\r\nCSeq: 5 BYE\r\n\
             Content-Length: 0\r\n\r\n",
            sent.call_id()
        );
        assert!(reveal_request(bye.as_bytes(), &th, &mut out));
        let inside = Message::parse(&out).unwrap();
        let routes: Vec<_> = inside
            .routes()
            .map(|r| r.uri().as_str().to_owned())
            .collect();
        assert_eq!(
            routes,
            [
                "sip:192.0.2.1:5060;th;lr",
                "sip:10.0.0.7;lr",
                "sip:10.0.0.8;lr"
            ]
        );
        // A forged seal opens nothing: the route is left as it came.
        let forged = bye.replace(";thr=", ";thr=AAAA");
        assert!(reveal_request(forged.as_bytes(), &th, &mut out));
        assert!(!String::from_utf8_lossy(&out).contains("10.0.0.7"));
    }

    #[test]
    fn inside_proxies_on_the_callee_side_are_sealed_toward_the_carrier() {
        let th = hider();
        let ok = b"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 192.0.2.9;branch=z9hG4bKgw\r\n\
            Record-Route: <sip:10.0.0.7;lr>\r\nRecord-Route: <sip:192.0.2.1:5060;th=k;lr>, <sip:gw.example;lr>\r\n\
            From: <sip:+1@gw.example>;tag=g\r\nTo: <sip:bob@inside>;tag=b\r\nCall-ID: c-9\r\nCSeq: 1 INVITE\r\n\
            Contact: <sip:bob@10.0.0.6:5064>\r\nContent-Length: 0\r\n\r\n";
        let mut out = Vec::new();
        assert!(hide_response(ok, &th, "192.0.2.1:5060", false, &mut out));
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(!text.contains("10.0.0."), "{text}");
        let sent = Message::parse(&out).unwrap();
        let rr: Vec<_> = sent
            .headers_named(HeaderName::RecordRoute)
            .map(|h| h.value.to_owned())
            .collect();
        assert_eq!(rr.len(), 1, "{text}");
        assert!(
            rr[0].starts_with("<sip:192.0.2.1:5060;th=k;lr;thr="),
            "{text}"
        );
        assert!(rr[0].ends_with(">, <sip:gw.example;lr>"), "{text}");
        // The carrier's BYE (route set reversed: its own, then ours) comes
        // back to the inside proxy.
        let ours = rr[0].split(", ").next().unwrap();
        let bye = format!(
            "BYE sip:th-x@192.0.2.1 SIP/2.0\r\nRoute: {ours}\r\nVia: SIP/2.0/UDP 192.0.2.9;branch=z9hG4bKgw2\r\n\
             From: <sip:+1@gw.example>;tag=g\r\nTo: <sip:bob@inside>;tag=b\r\nCall-ID: c-9\r\nCSeq: 2 BYE\r\n\
             Content-Length: 0\r\n\r\n"
        );
        assert!(reveal_request(bye.as_bytes(), &th, &mut out));
        let inside = Message::parse(&out).unwrap();
        let routes: Vec<_> = inside
            .routes()
            .map(|r| r.uri().as_str().to_owned())
            .collect();
        assert_eq!(routes, ["sip:192.0.2.1:5060;th=k;lr", "sip:10.0.0.7;lr"]);
    }
}
