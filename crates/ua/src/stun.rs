//! STUN Binding (RFC 5389), sans-IO: the request a phone sends to learn
//! its public address for SDP and Contact, the response's
//! XOR-MAPPED-ADDRESS, and the server side's answer.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The magic cookie (RFC 5389 §6).
pub const MAGIC: u32 = 0x2112_a442;
const BINDING_REQUEST: u16 = 0x0001;
const BINDING_SUCCESS: u16 = 0x0101;
const BINDING_ERROR: u16 = 0x0111;
const MAPPED_ADDRESS: u16 = 0x0001;
const XOR_MAPPED_ADDRESS: u16 = 0x0020;

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

/// Whether `packet` looks like STUN (RFC 5389 §6: two zero bits, the
/// cookie), to tell it from SIP or RTP on a shared port.
pub fn is_stun(packet: &[u8]) -> bool {
    packet.len() >= 20 && packet[0] & 0xc0 == 0 && packet[4..8] == MAGIC.to_be_bytes()
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

/// The server's success response to a Binding request from `source`
/// (XOR-MAPPED-ADDRESS), or `None` when `request` is not one.
pub fn binding_response(request: &[u8], source: SocketAddr) -> Option<Vec<u8>> {
    if !is_stun(request) || u16::from_be_bytes([request[0], request[1]]) != BINDING_REQUEST {
        return None;
    }
    let txid: [u8; 12] = request[8..20].try_into().ok()?;
    let cookie = MAGIC.to_be_bytes();
    let mut value = vec![0u8];
    let port = source.port() ^ (MAGIC >> 16) as u16;
    match source.ip() {
        IpAddr::V4(a) => {
            value.push(1);
            value.extend_from_slice(&port.to_be_bytes());
            value.extend(a.octets().iter().zip(cookie).map(|(b, c)| b ^ c));
        }
        IpAddr::V6(a) => {
            value.push(2);
            value.extend_from_slice(&port.to_be_bytes());
            let key: Vec<u8> = cookie.iter().chain(&txid).copied().collect();
            value.extend(a.octets().iter().zip(key).map(|(b, k)| b ^ k));
        }
    }
    let mut m = Vec::with_capacity(20 + 4 + value.len());
    m.extend_from_slice(&BINDING_SUCCESS.to_be_bytes());
    m.extend_from_slice(&((4 + value.len()) as u16).to_be_bytes());
    m.extend_from_slice(&cookie);
    m.extend_from_slice(&txid);
    m.extend_from_slice(&XOR_MAPPED_ADDRESS.to_be_bytes());
    m.extend_from_slice(&(value.len() as u16).to_be_bytes());
    m.extend_from_slice(&value);
    Some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_response_round_trip_v4_and_v6() {
        let txid = [7u8; 12];
        let req = binding_request(txid);
        assert!(is_stun(&req));
        for src in ["192.0.2.1:32853", "[2001:db8::1]:5060"] {
            let src: SocketAddr = src.parse().unwrap();
            let resp = binding_response(&req, src).unwrap();
            assert_eq!(parse_response(&resp, &txid), Ok(src));
            assert_eq!(parse_response(&resp, &[8; 12]), Err(StunError::NotOurs));
        }
        assert_eq!(
            binding_response(
                b"INVITE sip:x SIP/2.0\r\n\r\n",
                "1.2.3.4:5".parse().unwrap()
            ),
            None
        );
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
