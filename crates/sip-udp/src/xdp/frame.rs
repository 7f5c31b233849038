//! The Ethernet, IPv4 and UDP headers of one frame (IEEE 802.3, RFC 791,
//! RFC 768), read from a frame an AF_XDP socket received and written in
//! front of the answer it sends: no options, no fragments, no VLAN tags —
//! what the XDP program steers here (see `bpf.rs`) and nothing else.
//!
//! ```text
//!  0            6           12    14                34          42
//!  | dst MAC    | src MAC   | 0800 | IPv4, IHL 5 (20) | UDP (8)  | payload
//! ```

use std::net::{Ipv4Addr, SocketAddrV4};

/// Bytes of headers in front of a UDP payload.
pub const HEADERS: usize = 14 + 20 + 8;

const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
const UDP: u8 = 17;

/// Where a datagram came from and went, as the frame says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoints {
    /// Source MAC address.
    pub src_mac: [u8; 6],
    /// Destination MAC address.
    pub dst_mac: [u8; 6],
    /// Source address and port.
    pub src: SocketAddrV4,
    /// Destination address and port.
    pub dst: SocketAddrV4,
}

impl Endpoints {
    /// The endpoints of an answer: source and destination swapped.
    pub fn reversed(&self) -> Self {
        Self {
            src_mac: self.dst_mac,
            dst_mac: self.src_mac,
            src: self.dst,
            dst: self.src,
        }
    }
}

/// The endpoints and UDP payload of an Ethernet frame carrying an
/// unfragmented IPv4 UDP datagram with a 20-byte header; `None` for any
/// other frame, or one whose lengths disagree with its size.
pub fn parse(frame: &[u8]) -> Option<(Endpoints, &[u8])> {
    if frame.len() < HEADERS || frame[12..14] != ETHERTYPE_IPV4 {
        return None;
    }
    let ip = &frame[14..];
    let fragmented = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0;
    if ip[0] != 0x45 || ip[9] != UDP || fragmented {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let udp = &ip[20..];
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if total > ip.len() || udp_len < 8 || 20 + udp_len > total {
        return None;
    }
    let mac = |at: usize| -> [u8; 6] {
        let mut m = [0; 6];
        m.copy_from_slice(&frame[at..at + 6]);
        m
    };
    let addr = |at: usize, port_at: usize| {
        SocketAddrV4::new(
            Ipv4Addr::new(ip[at], ip[at + 1], ip[at + 2], ip[at + 3]),
            u16::from_be_bytes([udp[port_at], udp[port_at + 1]]),
        )
    };
    let ends = Endpoints {
        dst_mac: mac(0),
        src_mac: mac(6),
        src: addr(12, 0),
        dst: addr(16, 2),
    };
    Some((ends, &udp[8..udp_len]))
}

/// Writes the headers of a frame from `ends` carrying `payload_len` bytes
/// of UDP payload into `out[..HEADERS]`; the UDP checksum is left zero
/// ("no checksum", RFC 768) and the IPv4 header's is computed. False when
/// `out` is shorter than the headers or the payload does not fit a
/// datagram.
pub fn write_headers(out: &mut [u8], ends: &Endpoints, payload_len: usize, id: u16) -> bool {
    let Some(udp_len) = u16::try_from(payload_len + 8).ok().filter(|l| *l <= 65_507) else {
        return false;
    };
    if out.len() < HEADERS {
        return false;
    }
    out[0..6].copy_from_slice(&ends.dst_mac);
    out[6..12].copy_from_slice(&ends.src_mac);
    out[12..14].copy_from_slice(&ETHERTYPE_IPV4);
    let ip = &mut out[14..34];
    ip[0] = 0x45;
    ip[1] = 0;
    ip[2..4].copy_from_slice(&(udp_len + 20).to_be_bytes());
    ip[4..6].copy_from_slice(&id.to_be_bytes());
    ip[6..8].copy_from_slice(&[0x40, 0]); // don't fragment
    ip[8] = 64;
    ip[9] = UDP;
    ip[10..12].copy_from_slice(&[0, 0]);
    ip[12..16].copy_from_slice(&ends.src.ip().octets());
    ip[16..20].copy_from_slice(&ends.dst.ip().octets());
    let sum = checksum(ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let udp = &mut out[34..HEADERS];
    udp[0..2].copy_from_slice(&ends.src.port().to_be_bytes());
    udp[2..4].copy_from_slice(&ends.dst.port().to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    udp[6..8].copy_from_slice(&[0, 0]);
    true
}

/// The Internet checksum (RFC 1071) of `bytes`, an even number of them.
fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends() -> Endpoints {
        Endpoints {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: "10.201.0.1:40000".parse().unwrap(),
            dst: "10.201.0.2:5060".parse().unwrap(),
        }
    }

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0; HEADERS + payload.len()];
        assert!(write_headers(&mut f, &ends(), payload.len(), 7));
        f[HEADERS..].copy_from_slice(payload);
        f
    }

    #[test]
    fn headers_written_are_read_back() {
        let f = frame(b"REGISTER");
        let (e, payload) = parse(&f).unwrap();
        assert_eq!(e, ends());
        assert_eq!(payload, b"REGISTER");
        assert_eq!(e.reversed().reversed(), e);
        assert_eq!(e.reversed().src, ends().dst);
    }

    #[test]
    fn the_ip_checksum_verifies() {
        // RFC 1071 §1: summing a header with its checksum gives all ones.
        let f = frame(b"x");
        assert_eq!(checksum(&f[14..34]), 0);
        // The example header of RFC 1071 §3 (bytes 00 01 f2 03 f4 f5 f6 f7)
        // sums to ddf2; the checksum is its complement.
        assert_eq!(
            checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            !0xddf2
        );
    }

    #[test]
    fn other_frames_are_refused() {
        let good = frame(b"OPTIONS");
        assert!(parse(&good[..HEADERS - 1]).is_none(), "short");
        let mut arp = good.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(parse(&arp).is_none(), "ARP");
        let mut options = good.clone();
        options[14] = 0x46;
        assert!(parse(&options).is_none(), "IP options");
        let mut tcp = good.clone();
        tcp[23] = 6;
        assert!(parse(&tcp).is_none(), "TCP");
        let mut fragment = good.clone();
        fragment[20] = 0x20; // more fragments
        assert!(parse(&fragment).is_none(), "fragment");
        let mut long = good.clone();
        long[38..40].copy_from_slice(&1000u16.to_be_bytes());
        assert!(parse(&long).is_none(), "UDP length past the frame");
        let mut short = good;
        short[38..40].copy_from_slice(&4u16.to_be_bytes());
        assert!(parse(&short).is_none(), "UDP length under its header");
    }

    #[test]
    fn padding_after_the_datagram_is_not_payload() {
        // Ethernet pads short frames to 60 bytes.
        let mut f = frame(b"hi");
        f.resize(60, 0);
        assert_eq!(parse(&f).unwrap().1, b"hi");
    }

    #[test]
    fn oversized_payloads_are_refused() {
        let mut out = [0u8; HEADERS];
        assert!(!write_headers(&mut out, &ends(), 65_500, 0));
        assert!(!write_headers(&mut out[..10], &ends(), 10, 0));
    }
}
