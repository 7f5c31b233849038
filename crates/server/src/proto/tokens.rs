//! The tokens this server writes into messages and checks when they come
//! back, under keys only this server holds (drawn at start, see
//! `Shared::new`; the route key kept in the data directory): flow tokens
//! in Record-Route (RFC 5626 §5.2), the tag in this proxy's branches that
//! proves where a response may go (RFC 3261 §16.11), and the proof in its
//! Record-Route of where a dialog's requests may go. Pure functions of
//! key and input; the comparisons are constant time.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use hmac::Mac;
use sip_core::{Message, Transport};

use crate::proto::branch::{parse_branch, BRANCH_MASK};
use crate::proto::effects::Hop;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

fn hmac(key: &[u8; 32]) -> HmacSha256 {
    <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC takes any key length")
}

fn flow_mac(key: &[u8; 32], raw: &[u8]) -> [u8; 32] {
    let mut mac = hmac(key);
    mac.update(raw);
    mac.finalize().into_bytes().into()
}

/// A flow token for the connection from `peer` over `transport`, to put
/// in the user part of a Record-Route: `f`, then hex of the transport,
/// address and port, and 64 bits of HMAC-SHA256 over them under `key`, so
/// only this server's tokens are followed.
pub fn flow_token(key: &[u8; 32], peer: SocketAddr, transport: Transport) -> String {
    let mut raw = Vec::with_capacity(27);
    raw.push(match transport {
        Transport::Tcp => 1,
        Transport::Tls => 2,
        Transport::Ws => 3,
        _ => 4,
    });
    match peer.ip() {
        IpAddr::V4(a) => raw.extend_from_slice(&a.octets()),
        IpAddr::V6(a) => raw.extend_from_slice(&a.octets()),
    }
    raw.extend_from_slice(&peer.port().to_be_bytes());
    let mac = flow_mac(key, &raw);
    raw.extend_from_slice(&mac[..8]);
    let mut t = String::with_capacity(1 + raw.len() * 2);
    t.push('f');
    for b in raw {
        let _ = write!(t, "{b:02x}");
    }
    t
}

/// The connection a [`flow_token`] under `key` names; `None` for anything
/// else (malformed, or not ours).
pub fn read_flow_token(key: &[u8; 32], user: &str) -> Option<Hop> {
    let hex = user.strip_prefix('f')?;
    if !matches!(hex.len(), 30 | 54) || !hex.is_ascii() {
        return None;
    }
    let raw: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
        .collect::<Option<_>>()?;
    let (body, mac) = raw.split_at(raw.len() - 8);
    let want = flow_mac(key, body);
    if !bool::from(subtle::ConstantTimeEq::ct_eq(&want[..8], mac)) {
        return None;
    }
    let transport = match body[0] {
        1 => Transport::Tcp,
        2 => Transport::Tls,
        3 => Transport::Ws,
        4 => Transport::Wss,
        _ => return None,
    };
    let ip: IpAddr = match body.len() {
        7 => <[u8; 4]>::try_from(&body[1..5]).ok()?.into(),
        _ => <[u8; 16]>::try_from(&body[1..17]).ok()?.into(),
    };
    let port = u16::from_be_bytes([body[body.len() - 2], body[body.len() - 1]]);
    Some((SocketAddr::new(ip, port), transport))
}

fn transport_code(t: Transport) -> u8 {
    match t {
        Transport::Udp => 0,
        Transport::Tcp => 1,
        Transport::Tls => 2,
        Transport::Ws => 3,
        Transport::Wss => 4,
        Transport::Sctp => 5,
        Transport::Other => 6,
    }
}

/// The tag after the transaction in this proxy's branch: 64 bits of
/// HMAC-SHA256 under `key` over the transaction (`branch` without its try
/// number) and `hop`, where its responses go. A response is relayed only
/// when its branch's tag verifies for the hop its second Via names, so a
/// forged response cannot send bytes to an address of its choosing
/// (RFC 3261 §16.11 lets a stateless proxy compute its branch this way).
pub fn branch_tag(key: &[u8; 32], branch: u64, hop: Hop) -> u64 {
    let mut mac = hmac(key);
    mac.update(&(branch & BRANCH_MASK).to_be_bytes());
    mac.update(&[transport_code(hop.1)]);
    match hop.0.ip() {
        IpAddr::V4(a) => mac.update(&a.octets()),
        IpAddr::V6(a) => mac.update(&a.octets()),
    }
    mac.update(&hop.0.port().to_be_bytes());
    let out = mac.finalize().into_bytes();
    let mut tag = [0u8; 8];
    tag.copy_from_slice(&out[..8]);
    u64::from_be_bytes(tag)
}

/// Whether the branch in `msg`'s top Via is one this proxy wrote (under
/// `key`) for a request whose responses go to `hop`; constant time in the
/// tag.
pub fn proves_hop(key: &[u8; 32], msg: &Message<'_>, hop: Hop) -> bool {
    let Some((branch, Some(tag))) = msg.top_via().branch().and_then(parse_branch) else {
        return false;
    };
    let want = branch_tag(key, branch, hop).to_be_bytes();
    bool::from(subtle::ConstantTimeEq::ct_eq(
        &want[..],
        &tag.to_be_bytes()[..],
    ))
}

/// The parameter of this proxy's Record-Route naming, under its route
/// key, the addresses the dialog's requests may go to (see
/// [`hops_proof`]).
pub const HOPS_PARAM: &str = "hops";

fn ip_tag(key: &[u8; 32], ip: IpAddr) -> [u8; 8] {
    let mut mac = hmac(key);
    mac.update(b"sipsec dialog hop");
    match ip.to_canonical() {
        IpAddr::V4(a) => mac.update(&a.octets()),
        IpAddr::V6(a) => mac.update(&a.octets()),
    }
    let out = mac.finalize().into_bytes();
    let mut tag = [0u8; 8];
    tag.copy_from_slice(&out[..8]);
    tag
}

fn name_tag(key: &[u8; 32], name: Option<&str>) -> [u8; 8] {
    let mut mac = hmac(key);
    mac.update(b"sipsec dialog hop name");
    if let Some(n) = name {
        mac.update(b":");
        mac.update(n.to_ascii_lowercase().as_bytes());
    }
    let out = mac.finalize().into_bytes();
    let mut tag = [0u8; 8];
    tag.copy_from_slice(&out[..8]);
    tag
}

/// The length of a [`hops_proof`]: three 64-bit tags in hex.
pub const PROOF_LEN: usize = 48;
/// The length of a proof written before names were bound (two tags):
/// still read, so dialogs set up before an upgrade go on, but it proves
/// no name.
const OLD_PROOF_LEN: usize = 32;

/// The proof, for this proxy's Record-Route ([`HOPS_PARAM`]), of where a
/// dialog's later requests may go: 64 bits of HMAC-SHA256 under `key`
/// for each of the two IP addresses its initial request came from and
/// went to, and for the domain name (`None`: none) its requests will name
/// as their next hop after this proxy, in hex. Those requests are
/// forwarded only to those addresses (see [`proves_ip`]), and a name is
/// looked up only when the proof names it ([`proves_name`]): a peer that
/// writes a Route naming this proxy cannot have a request sent to an
/// address of its choosing (the proxy forwards to the Request-URI or the
/// next Route, RFC 3261 §16.12, which the peer writes too), nor have its
/// resolver ask a name of its choosing.
pub fn hops_proof(key: &[u8; 32], from: IpAddr, to: IpAddr, name: Option<&str>) -> String {
    let mut p = String::with_capacity(PROOF_LEN);
    let tags = [ip_tag(key, from), ip_tag(key, to), name_tag(key, name)];
    for b in tags.iter().flatten() {
        let _ = write!(p, "{b:02x}");
    }
    p
}

/// Whether `proof` is shaped as a [`hops_proof`] (or one written before
/// names were bound).
pub fn is_proof(proof: &str) -> bool {
    matches!(proof.len(), PROOF_LEN | OLD_PROOF_LEN) && proof.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The tags of a proof shaped as one.
fn tags(proof: &str) -> Option<Vec<u8>> {
    if !is_proof(proof) {
        return None;
    }
    (0..proof.len() / 2)
        .map(|i| u8::from_str_radix(&proof[2 * i..2 * i + 2], 16).ok())
        .collect()
}

/// Whether a [`hops_proof`] under `key` names `ip`; constant time in the
/// tags.
pub fn proves_ip(key: &[u8; 32], proof: &str, ip: IpAddr) -> bool {
    let Some(raw) = tags(proof) else {
        return false;
    };
    let want = ip_tag(key, ip);
    let first = subtle::ConstantTimeEq::ct_eq(&want[..], &raw[..8]);
    let second = subtle::ConstantTimeEq::ct_eq(&want[..], &raw[8..16]);
    bool::from(first | second)
}

/// Whether a [`hops_proof`] under `key` names the domain name `name` (in
/// any case); constant time in the tag.
pub fn proves_name(key: &[u8; 32], proof: &str, name: &str) -> bool {
    let Some(raw) = tags(proof).filter(|t| t.len() == PROOF_LEN / 2) else {
        return false;
    };
    let want = name_tag(key, Some(name));
    bool::from(subtle::ConstantTimeEq::ct_eq(&want[..], &raw[16..]))
}

/// Rewrites, in a response written for relaying upstream (`out`), this
/// proxy's Record-Route proofs of the dialog it answers: each
/// [`HOPS_PARAM`] in the head that proves `from` (the hop the request
/// went to, which answers) is replaced by the proof of `from`, `contact`
/// (the IP address of the answer's Contact, when it names one) and
/// `name` (the domain name the caller's requests will name next after
/// this proxy, if any). The caller's copy of the route set then proves
/// where its requests go (the callee, or the next proxy toward it), not
/// the caller's own side; the callee keeps the request's copy. Same
/// length, in place (a proof written before names were bound stays
/// without one).
pub fn reprove_response(
    key: &[u8; 32],
    from: IpAddr,
    contact: Option<IpAddr>,
    name: Option<&str>,
    out: &mut [u8],
) {
    let head = memchr::memmem::find(out, b"\r\n\r\n").unwrap_or(out.len());
    let needle = format!(";{HOPS_PARAM}=");
    let mut at = 0;
    while let Some(i) = memchr::memmem::find(&out[at..head], needle.as_bytes()) {
        let start = at + i + needle.len();
        at = start;
        let len = out[start..head]
            .iter()
            .take_while(|b| b.is_ascii_hexdigit())
            .count();
        let Ok(proof) = std::str::from_utf8(&out[start..start + len]) else {
            break;
        };
        if proves_ip(key, proof, from) {
            let new = hops_proof(key, from, contact.unwrap_or(from), name);
            out[start..start + len].copy_from_slice(&new.as_bytes()[..len]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reproves_only_this_proxys_entries_for_its_sender() {
        let key = [7u8; 32];
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let (caller, callee, contact) = (ip("192.0.2.1"), ip("192.0.2.5"), ip("198.51.100.9"));
        let ours = hops_proof(&key, caller, callee, Some("pc33.a.example"));
        let theirs = hops_proof(&[9u8; 32], caller, callee, None);
        let old = &hops_proof(&key, caller, callee, None)[..OLD_PROOF_LEN];
        let text = format!(
            "SIP/2.0 200 OK\r\nRecord-Route: <sip:gw;hops={theirs};lr>, <sip:p;hops={ours};lr>\r\n\
             Record-Route: <sip:p2;hops={old};lr>\r\nContent-Length: 57\r\n\r\nv=0;hops={ours}"
        );
        let mut out = text.clone().into_bytes();
        reprove_response(&key, callee, Some(contact), Some("b.example"), &mut out);
        let after = String::from_utf8(out).unwrap();
        let new = hops_proof(&key, callee, contact, Some("b.example"));
        assert_eq!(after.len(), text.len());
        assert!(after.contains(&format!("<sip:p;hops={new};lr>")), "{after}");
        assert!(proves_name(&key, &new, "B.Example") && !proves_name(&key, &new, "pc33.a.example"));
        let old_new = &new[..OLD_PROOF_LEN];
        assert!(
            after.contains(&format!("<sip:p2;hops={old_new};lr>")),
            "an old proof is reproved as one: {after}"
        );
        assert!(
            after.contains(&format!("<sip:gw;hops={theirs};lr>")),
            "{after}"
        );
        assert!(
            after.ends_with(&format!(";hops={ours}")),
            "the body is not touched"
        );
        // From another sender: nothing proves it, nothing changes.
        let mut out = text.clone().into_bytes();
        reprove_response(&key, ip("10.0.0.1"), Some(contact), None, &mut out);
        assert_eq!(out, text.as_bytes());
        // A truncated proof at the end of the head is left alone.
        let mut short = b"SIP/2.0 180 Ringing\r\nRecord-Route: <sip:p;hops=12".to_vec();
        reprove_response(&key, callee, None, None, &mut short);
        assert!(short.ends_with(b"hops=12"));
    }

    #[test]
    fn a_hops_proof_names_its_two_addresses_only_under_its_key() {
        let (key, other) = ([7u8; 32], [8u8; 32]);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "2001:db8::5".parse().unwrap();
        let proof = hops_proof(&key, a, b, None);
        assert_eq!(proof.len(), PROOF_LEN);
        assert!(proves_ip(&key, &proof[..OLD_PROOF_LEN], a), "an old proof");
        assert!(proves_ip(&key, &proof, a));
        assert!(proves_ip(&key, &proof, b));
        // The same IPv4 address as a dual-stack socket reports it.
        assert!(proves_ip(&key, &proof, "::ffff:192.0.2.1".parse().unwrap()));
        for ip in ["192.0.2.2", "10.0.0.1", "2001:db8::6"] {
            assert!(!proves_ip(&key, &proof, ip.parse().unwrap()), "{ip}");
        }
        assert!(!proves_ip(&other, &proof, a));
        for bad in [
            "",
            "zz",
            &proof[..31],
            &proof[..47],
            &format!("{proof}0"),
            &"g".repeat(PROOF_LEN),
        ] {
            assert!(!proves_ip(&key, bad, a), "{bad}");
        }
    }

    #[test]
    fn a_hops_proof_names_its_name_only_under_its_key() {
        let (key, other) = ([7u8; 32], [8u8; 32]);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let proof = hops_proof(&key, a, a, Some("Proxy.B.example"));
        assert!(proves_name(&key, &proof, "proxy.b.example"));
        assert!(proves_name(&key, &proof, "PROXY.B.EXAMPLE"));
        for name in ["b.example", "proxy.b.example.", "xproxy.b.example", ""] {
            assert!(!proves_name(&key, &proof, name), "{name}");
        }
        assert!(!proves_name(&other, &proof, "proxy.b.example"));
        // A proof without a name, or one written before names were bound,
        // names none.
        let none = hops_proof(&key, a, a, None);
        assert!(!proves_name(&key, &none, "proxy.b.example") && !proves_name(&key, &none, ""));
        assert!(!proves_name(
            &key,
            &proof[..OLD_PROOF_LEN],
            "proxy.b.example"
        ));
    }

    #[test]
    fn a_flow_token_names_its_connection_only_under_its_key() {
        let (key, other) = ([7u8; 32], [8u8; 32]);
        for (peer, t) in [
            ("192.0.2.1:5060", Transport::Tcp),
            ("[2001:db8::1]:5061", Transport::Tls),
            ("192.0.2.2:443", Transport::Wss),
        ] {
            let peer: SocketAddr = peer.parse().unwrap();
            let token = flow_token(&key, peer, t);
            assert_eq!(read_flow_token(&key, &token), Some((peer, t)));
            assert_eq!(read_flow_token(&other, &token), None);
            let mut forged = token.clone().into_bytes();
            let last = forged.len() - 1;
            forged[last] = if forged[last] == b'0' { b'1' } else { b'0' };
            let forged = String::from_utf8(forged).unwrap();
            assert_eq!(read_flow_token(&key, &forged), None);
        }
        for junk in ["", "f", "fzz", "alice", &"f".repeat(31)] {
            assert_eq!(read_flow_token(&key, junk), None, "{junk}");
        }
    }

    #[test]
    fn a_branch_tag_binds_the_transaction_to_its_hop() {
        let key = [1u8; 32];
        let hop: Hop = ("192.0.2.1:5060".parse().unwrap(), Transport::Udp);
        let elsewhere: Hop = ("192.0.2.99:5060".parse().unwrap(), Transport::Udp);
        let tag = branch_tag(&key, 0x1234, hop);
        assert_ne!(tag, branch_tag(&key, 0x1234, elsewhere));
        assert_ne!(tag, branch_tag(&key, 0x1234, (hop.0, Transport::Tcp)));
        // Another try of the same transaction (top four bits) keeps it.
        assert_eq!(tag, branch_tag(&key, 0x1234 | (3 << 60), hop));
    }
}
