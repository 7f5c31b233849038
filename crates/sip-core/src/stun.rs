//! STUN Binding (RFC 5389), sans-IO, for both ends: the request a phone
//! sends to learn its public address for SDP and Contact and the mapped
//! address in the answer; the answer a SIP server gives a Binding request
//! on its SIP port (RFC 5626 §4.4.2, §8 keep-alives), and the CRLF
//! keep-alive many phones send instead.
//!
//! STUN and SIP share the port: a STUN message starts with two zero bits
//! and carries the magic cookie at bytes 4–7 (RFC 5389 §6, RFC 7983 §7),
//! which no SIP message does.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The magic cookie (RFC 5389 §6).
pub const MAGIC: u32 = 0x2112_a442;
const HEADER: usize = 20;
const BINDING_REQUEST: u16 = 0x0001;
const BINDING_SUCCESS: u16 = 0x0101;
const BINDING_ERROR: u16 = 0x0111;
const MAPPED_ADDRESS: u16 = 0x0001;
const XOR_MAPPED_ADDRESS: u16 = 0x0020;
const FINGERPRINT: u16 = 0x8028;
/// XORed into the CRC-32 of a FINGERPRINT (RFC 5389 §15.5).
const FINGERPRINT_XOR: u32 = 0x5354_554e;

/// Whether `input` is a STUN message (a request or not, well formed or
/// not): it is never SIP.
pub fn is_stun(input: &[u8]) -> bool {
    input.len() >= HEADER && input[0] & 0xc0 == 0 && input[4..8] == MAGIC.to_be_bytes()
}

/// Whether `input` is a CRLF keep-alive: only CR and LF bytes.
pub fn is_crlf_keepalive(input: &[u8]) -> bool {
    !input.is_empty() && input.iter().all(|b| matches!(b, b'\r' | b'\n'))
}

/// Writes the Binding success response to the Binding request `input`
/// from `src` into `out`: its transaction ID, `src` as XOR-MAPPED-ADDRESS,
/// and a FINGERPRINT when the request had one. `false` (and `out`
/// untouched) for anything else: other methods, responses, indications,
/// a length that does not match, a request with a wrong fingerprint.
pub fn answer(input: &[u8], src: SocketAddr, out: &mut Vec<u8>) -> bool {
    if !is_stun(input) {
        return false;
    }
    let kind = u16::from_be_bytes([input[0], input[1]]);
    let length = usize::from(u16::from_be_bytes([input[2], input[3]]));
    if kind != BINDING_REQUEST || length % 4 != 0 || HEADER + length != input.len() {
        return false;
    }
    let Some(fingerprinted) = check_attributes(input) else {
        return false;
    };
    let start = out.len();
    out.extend_from_slice(&BINDING_SUCCESS.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&input[4..HEADER]);
    let port = src.port() ^ (MAGIC >> 16) as u16;
    match src {
        SocketAddr::V4(a) => {
            attribute(out, XOR_MAPPED_ADDRESS, 8);
            out.extend_from_slice(&[0, 0x01]);
            out.extend_from_slice(&port.to_be_bytes());
            out.extend_from_slice(&(u32::from(*a.ip()) ^ MAGIC).to_be_bytes());
        }
        SocketAddr::V6(a) => {
            attribute(out, XOR_MAPPED_ADDRESS, 20);
            out.extend_from_slice(&[0, 0x02]);
            out.extend_from_slice(&port.to_be_bytes());
            // Cookie and transaction ID: the header's bytes 4..20.
            let ip = a.ip().octets();
            out.extend(ip.iter().zip(&input[4..HEADER]).map(|(a, k)| a ^ k));
        }
    }
    if fingerprinted {
        // RFC 5389 §15.5: the CRC covers the message before the attribute,
        // with a length that already counts it.
        set_length(out, start, 8);
        let crc = crc32(&out[start..]) ^ FINGERPRINT_XOR;
        attribute(out, FINGERPRINT, 4);
        out.extend_from_slice(&crc.to_be_bytes());
    }
    set_length(out, start, 0);
    true
}

fn attribute(out: &mut Vec<u8>, kind: u16, len: u16) {
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
}

/// Sets the header's length to what follows the header, plus `more`.
fn set_length(out: &mut [u8], start: usize, more: usize) {
    let len = ((out.len() - start - HEADER + more) as u16).to_be_bytes();
    out[start + 2] = len[0];
    out[start + 3] = len[1];
}

/// Walks the attributes: `Some(true)` when the last is a FINGERPRINT
/// that matches, `Some(false)` when there is none, `None` when they do
/// not fit the message or the fingerprint is wrong.
fn check_attributes(input: &[u8]) -> Option<bool> {
    let mut at = HEADER;
    while at < input.len() {
        let head = input.get(at..at + 4)?;
        let kind = u16::from_be_bytes([head[0], head[1]]);
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        let end = at + 4 + len.div_ceil(4) * 4;
        if end > input.len() {
            return None;
        }
        if kind == FINGERPRINT {
            // RFC 5389 §15.5: the last attribute, over all that precedes it.
            if len != 4 || end != input.len() {
                return None;
            }
            let want = u32::from_be_bytes(input[at + 4..end].try_into().ok()?);
            return (crc32(&input[..at]) ^ FINGERPRINT_XOR == want).then_some(true);
        }
        at = end;
    }
    Some(false)
}

/// CRC-32 (ISO 3309, the one zlib computes), bit by bit: STUN messages
/// are a few dozen bytes.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Why a STUN exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StunError {
    /// Not a STUN message, or not ours.
    #[error("not a STUN response to our request")]
    NotOurs,
    /// The server refused.
    #[error("STUN error response {0}")]
    Refused(u16),
    /// A success without a mapped address.
    #[error("STUN response without a mapped address")]
    NoAddress,
}

/// A Binding request with transaction id `txid`.
pub fn binding_request(txid: [u8; 12]) -> Vec<u8> {
    let mut m = Vec::with_capacity(20);
    m.extend_from_slice(&BINDING_REQUEST.to_be_bytes());
    m.extend_from_slice(&0u16.to_be_bytes());
    m.extend_from_slice(&MAGIC.to_be_bytes());
    m.extend_from_slice(&txid);
    m
}

fn xor_address(value: &[u8], txid: &[u8; 12], xor: bool) -> Option<SocketAddr> {
    let family = *value.get(1)?;
    let mut port = u16::from_be_bytes([*value.get(2)?, *value.get(3)?]);
    let cookie = MAGIC.to_be_bytes();
    if xor {
        port ^= (MAGIC >> 16) as u16;
    }
    let ip = match family {
        1 => {
            let mut a: [u8; 4] = value.get(4..8)?.try_into().ok()?;
            if xor {
                for (b, c) in a.iter_mut().zip(cookie) {
                    *b ^= c;
                }
            }
            IpAddr::V4(Ipv4Addr::from(a))
        }
        2 => {
            let mut a: [u8; 16] = value.get(4..20)?.try_into().ok()?;
            if xor {
                let key: Vec<u8> = cookie.iter().chain(txid).copied().collect();
                for (b, k) in a.iter_mut().zip(key) {
                    *b ^= k;
                }
            }
            IpAddr::V6(Ipv6Addr::from(a))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The mapped address in the response to our request `txid`.
pub fn parse_response(packet: &[u8], txid: &[u8; 12]) -> Result<SocketAddr, StunError> {
    if !is_stun(packet) || packet[8..20] != txid[..] {
        return Err(StunError::NotOurs);
    }
    let kind = u16::from_be_bytes([packet[0], packet[1]]);
    let len = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
    let attrs = packet.get(20..20 + len).ok_or(StunError::NotOurs)?;
    let mut at = 0;
    let mut plain = None;
    while at + 4 <= attrs.len() {
        let t = u16::from_be_bytes([attrs[at], attrs[at + 1]]);
        let n = usize::from(u16::from_be_bytes([attrs[at + 2], attrs[at + 3]]));
        let value = attrs.get(at + 4..at + 4 + n).ok_or(StunError::NotOurs)?;
        match (kind, t) {
            (BINDING_ERROR, 0x0009) if n >= 4 => {
                return Err(StunError::Refused(
                    u16::from(value[2] & 0x07) * 100 + u16::from(value[3]),
                ))
            }
            (BINDING_SUCCESS, XOR_MAPPED_ADDRESS) => {
                return xor_address(value, txid, true).ok_or(StunError::NoAddress)
            }
            (BINDING_SUCCESS, MAPPED_ADDRESS) => plain = xor_address(value, txid, false),
            _ => {}
        }
        at += 4 + n.div_ceil(4) * 4;
    }
    match kind {
        BINDING_SUCCESS => plain.ok_or(StunError::NoAddress),
        BINDING_ERROR => Err(StunError::Refused(0)),
        _ => Err(StunError::NotOurs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 5769 §2.1's sample request: SOFTWARE, PRIORITY, ICE-CONTROLLED,
    /// USERNAME, MESSAGE-INTEGRITY and FINGERPRINT.
    const RFC5769_REQUEST: [u8; 108] = [
        0x00, 0x01, 0x00, 0x58, 0x21, 0x12, 0xa4, 0x42, 0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34, 0xd6,
        0x86, 0xfa, 0x87, 0xdf, 0xae, 0x80, 0x22, 0x00, 0x10, 0x53, 0x54, 0x55, 0x4e, 0x20, 0x74,
        0x65, 0x73, 0x74, 0x20, 0x63, 0x6c, 0x69, 0x65, 0x6e, 0x74, 0x00, 0x24, 0x00, 0x04, 0x6e,
        0x00, 0x01, 0xff, 0x80, 0x29, 0x00, 0x08, 0x93, 0x2f, 0xf9, 0xb1, 0x51, 0x26, 0x3b, 0x36,
        0x00, 0x06, 0x00, 0x09, 0x65, 0x76, 0x74, 0x6a, 0x3a, 0x68, 0x36, 0x76, 0x59, 0x20, 0x20,
        0x20, 0x00, 0x08, 0x00, 0x14, 0x9a, 0xea, 0xa7, 0x0c, 0xbf, 0xd8, 0xcb, 0x56, 0x78, 0x1e,
        0xf2, 0xb5, 0xb2, 0xd3, 0xf2, 0x49, 0xc1, 0xb5, 0x71, 0xa2, 0x80, 0x28, 0x00, 0x04, 0xe5,
        0x7a, 0x3b, 0xcf,
    ];

    /// RFC 5769 §2.2's IPv4 response carries 192.0.2.1:32853 as
    /// XOR-MAPPED-ADDRESS: these bytes.
    const RFC5769_XOR_V4: [u8; 12] = [
        0x00, 0x20, 0x00, 0x08, 0x00, 0x01, 0xa1, 0x47, 0xe1, 0x12, 0xa6, 0x43,
    ];

    /// RFC 5769 §2.3's IPv6 response: 2001:db8:1234:5678:11:2233:4455:6677
    /// port 32853, for the transaction ID below.
    const RFC5769_XOR_V6: [u8; 24] = [
        0x00, 0x20, 0x00, 0x14, 0x00, 0x02, 0xa1, 0x47, 0x01, 0x13, 0xa9, 0xfa, 0xa5, 0xd3, 0xf1,
        0x79, 0xbc, 0x25, 0xf4, 0xb5, 0xbe, 0xd2, 0xb9, 0xd9,
    ];

    fn request(txid: [u8; 12]) -> Vec<u8> {
        let mut r = vec![0x00, 0x01, 0x00, 0x00];
        r.extend_from_slice(&MAGIC.to_be_bytes());
        r.extend_from_slice(&txid);
        r
    }

    #[test]
    fn the_rfc_5769_request_is_answered_with_its_fingerprint() {
        let src: SocketAddr = "192.0.2.1:32853".parse().expect("addr");
        let mut out = Vec::new();
        assert!(answer(&RFC5769_REQUEST, src, &mut out));
        assert_eq!(&out[..2], [0x01, 0x01]);
        assert_eq!(
            &out[4..20],
            &RFC5769_REQUEST[4..20],
            "cookie and transaction"
        );
        assert_eq!(&out[20..32], RFC5769_XOR_V4);
        assert_eq!(
            usize::from(u16::from_be_bytes([out[2], out[3]])),
            out.len() - 20
        );
        assert_eq!(check_attributes(&out), Some(true), "our fingerprint checks");
        // One bit flipped: the fingerprint no longer matches.
        let mut bad = RFC5769_REQUEST;
        bad[30] ^= 1;
        assert!(!answer(&bad, src, &mut Vec::new()));
    }

    #[test]
    fn ipv6_sources_are_xored_with_cookie_and_transaction() {
        let txid = [
            0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34, 0xd6, 0x86, 0xfa, 0x87, 0xdf, 0xae,
        ];
        let src: SocketAddr = "[2001:db8:1234:5678:11:2233:4455:6677]:32853"
            .parse()
            .expect("addr");
        let mut out = Vec::new();
        assert!(answer(&request(txid), src, &mut out));
        assert_eq!(&out[20..], RFC5769_XOR_V6);
        assert_eq!(out.len(), 44, "no fingerprint asked, none given");
    }

    #[test]
    fn only_well_formed_binding_requests_are_answered() {
        let src: SocketAddr = "127.0.0.1:5060".parse().expect("addr");
        let ok = request([7; 12]);
        let mut indication = ok.clone();
        indication[1] = 0x11;
        let mut response = ok.clone();
        response[0] = 0x01;
        response[1] = 0x01;
        let mut long = ok.clone();
        long[3] = 4;
        let mut odd = ok.clone();
        odd[3] = 2;
        odd.extend_from_slice(&[0, 0]);
        let mut cut = ok.clone();
        cut[3] = 8;
        cut.extend_from_slice(&[0x80, 0x22, 0x00, 0x08]);
        for (name, bad) in [
            ("indication", indication),
            ("response", response),
            ("length past the end", long),
            ("length not a multiple of 4", odd),
            ("attribute past the end", cut),
            ("SIP", b"OPTIONS sip:a@b SIP/2.0\r\n\r\n".to_vec()),
        ] {
            let mut out = vec![9];
            assert!(!answer(&bad, src, &mut out), "{name}");
            assert_eq!(out, [9], "{name}: nothing written");
        }
        assert!(is_stun(&ok) && !is_stun(b"INVITE sip:bob@example.com SIP/2.0"));
        assert!(is_crlf_keepalive(b"\r\n\r\n") && is_crlf_keepalive(b"\r\n"));
        assert!(!is_crlf_keepalive(b"") && !is_crlf_keepalive(b"\r\nX"));
    }

    #[test]
    fn request_response_round_trip_v4_and_v6() {
        let txid = [7u8; 12];
        let req = binding_request(txid);
        assert!(is_stun(&req));
        for src in ["192.0.2.1:32853", "[2001:db8::1]:5060"] {
            let src: SocketAddr = src.parse().unwrap();
            let mut resp = Vec::new();
            assert!(answer(&req, src, &mut resp));
            assert_eq!(parse_response(&resp, &txid), Ok(src));
            assert_eq!(parse_response(&resp, &[8; 12]), Err(StunError::NotOurs));
        }
        let sip = b"INVITE sip:x SIP/2.0\r\n\r\n";
        assert!(!answer(sip, "1.2.3.4:5".parse().unwrap(), &mut Vec::new()));
    }

    #[test]
    fn rfc5769_sample_ipv4_response() {
        // RFC 5769 §2.2 (fingerprint and integrity attributes skipped by us).
        let hex = "0101003c2112a442b7e7a701bc34d686fa87dfae8022000b7465737420766563746f7220002000080001a147e112a643000800142b91f599fd9e90c38c7489f92af9ba53f06be7d780280004c07d4c96";
        let p: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let txid: [u8; 12] = p[8..20].try_into().unwrap();
        assert_eq!(
            parse_response(&p, &txid),
            Ok("192.0.2.1:32853".parse().unwrap())
        );
    }

    #[test]
    fn error_responses_are_reported() {
        let txid = [1u8; 12];
        let mut m = vec![0x01, 0x11, 0, 8];
        m.extend_from_slice(&MAGIC.to_be_bytes());
        m.extend_from_slice(&txid);
        m.extend_from_slice(&[0, 9, 0, 4, 0, 0, 4, 20]);
        assert_eq!(parse_response(&m, &txid), Err(StunError::Refused(420)));
    }
}
