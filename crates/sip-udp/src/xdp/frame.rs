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
/// other frame, one whose lengths disagree with its size, and what the
/// kernel's stack would discard before a socket saw it (RFC 1122): a
/// header checksum that fails (§3.2.1.2), a UDP checksum that fails
/// (§4.1.3.4), or a source that cannot have sent it (§3.2.1.3, see
/// [`may_send`]).
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
    if checksum(&ip[..20]) != 0 || !udp_checksum_holds(ip, &udp[..udp_len]) {
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
    may_send(ends.src, ends.dst).then_some((ends, &udp[8..udp_len]))
}

/// Whether `src` can have sent a datagram to `dst` (RFC 1122 §3.2.1.3,
/// the checks the kernel's routing makes of a source): not "this
/// network" (0/8), loopback (127/8, which never arrives on an
/// interface), multicast (224/4) or reserved and broadcast (240/4), not
/// the destination itself, and from a port an answer can go to. An
/// answer to such a source would go to many hosts, or to this one.
pub fn may_send(src: SocketAddrV4, dst: SocketAddrV4) -> bool {
    let ip = src.ip();
    let [first, ..] = ip.octets();
    first != 0 && !ip.is_loopback() && first < 224 && ip != dst.ip() && src.port() != 0
}

/// Whether the checksum of a UDP datagram from the IPv4 header `ip`
/// holds (RFC 768): right over the pseudo-header and the datagram, or
/// none (zero: the sender computed none, which IPv4 allows). A field
/// holding only the pseudo-header's sum is a checksum left for a device
/// to complete (checksum offload): frames from this host's own stack
/// cross a veth pair so, never having left memory, and the kernel takes
/// them unchecked; it is taken like zero, which any sender may send.
fn udp_checksum_holds(ip: &[u8], udp: &[u8]) -> bool {
    let field = u16::from_be_bytes([udp[6], udp[7]]);
    if field == 0 {
        return true;
    }
    let pseudo = sum(&ip[12..20], u64::from(UDP) + udp.len() as u64);
    field == fold(pseudo) || fold(sum(udp, pseudo)) == 0xffff
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

/// Writes the UDP checksum (RFC 768) of the IPv4 datagram in `frame`,
/// whose headers [`write_headers`] wrote, over its pseudo-header and the
/// whole datagram (a computed zero is sent as all ones); false for a
/// frame shorter than its headers.
pub fn fill_udp_checksum(frame: &mut [u8]) -> bool {
    if frame.len() < HEADERS {
        return false;
    }
    frame[40..42].copy_from_slice(&[0, 0]);
    let pseudo = sum(&frame[26..34], u64::from(UDP) + (frame.len() - 34) as u64);
    let c = match !fold(sum(&frame[34..], pseudo)) {
        0 => 0xffff,
        c => c,
    };
    frame[40..42].copy_from_slice(&c.to_be_bytes());
    true
}

/// The Internet checksum (RFC 1071) of `bytes`.
fn checksum(bytes: &[u8]) -> u16 {
    !fold(sum(bytes, 0))
}

/// `acc` plus `bytes` as 16-bit words in network order, an odd last byte
/// padded with zero, the carries of `acc` not yet folded. The sum does
/// not depend on byte order or word size (RFC 1071 §2), so the bytes are
/// added four at a time in the machine's order, which vectorises, and
/// the folded sum swapped to network order after.
fn sum(bytes: &[u8], acc: u64) -> u64 {
    let mut native = 0u64;
    let mut words = bytes.chunks_exact(4);
    for w in &mut words {
        native += u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
    }
    native += match *words.remainder() {
        [a, b, c] => u64::from(u16::from_le_bytes([a, b])) + u64::from(c),
        [a, b] => u64::from(u16::from_le_bytes([a, b])),
        [a] => u64::from(a),
        _ => 0,
    };
    acc + u64::from(fold(native).swap_bytes())
}

/// A sum's carries folded into 16 bits (ones' complement addition).
fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
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

    fn checksummed(mut f: Vec<u8>) -> Vec<u8> {
        assert!(fill_udp_checksum(&mut f));
        f
    }

    /// RFC 1071's sum one 16-bit word at a time, to check the faster one.
    fn plain_sum(bytes: &[u8]) -> u16 {
        let mut acc = 0u64;
        for (i, b) in bytes.iter().enumerate() {
            acc += u64::from(*b) << if i % 2 == 0 { 8 } else { 0 };
        }
        fold(acc)
    }

    #[test]
    fn the_sum_is_rfc_1071s_at_every_length() {
        let bytes: Vec<u8> = (0..64u32).map(|i| (i * 37 + 11) as u8 | 0x80).collect();
        for len in 0..bytes.len() {
            assert_eq!(
                fold(sum(&bytes[..len], 0)),
                plain_sum(&bytes[..len]),
                "{len} bytes"
            );
        }
        // All ones summed with carries: 0xffff, never folded to zero.
        assert_eq!(fold(sum(&[0xff; 10], 0)), 0xffff);
    }

    #[test]
    fn a_udp_checksum_sent_is_checked() {
        for payload in [&b"REGISTER sip:x SIP/2.0\r\n\r\n"[..], b"odd"] {
            let good = checksummed(frame(payload));
            assert_ne!(&good[40..42], &[0, 0]);
            assert_eq!(parse(&good).unwrap().1, payload);
            let mut bent = good.clone();
            bent[HEADERS] ^= 0x20;
            assert!(parse(&bent).is_none(), "a payload changed on the way");
            let mut bent = good;
            bent[26] ^= 1;
            bent[24..26].copy_from_slice(&[0, 0]);
            let ip_sum = checksum(&bent[14..34]);
            bent[24..26].copy_from_slice(&ip_sum.to_be_bytes());
            assert!(parse(&bent).is_none(), "another source than summed");
        }
        // None sent: taken as it is (RFC 768), however it arrived.
        let mut none = frame(b"REGISTER");
        none[HEADERS] = b'X';
        assert_eq!(parse(&none).unwrap().1, b"XEGISTER");
    }

    #[test]
    fn a_checksum_left_for_the_device_is_taken_like_none() {
        // What a sender with checksum offload leaves: the pseudo-header's
        // sum (source, destination, protocol, UDP length), not inverted.
        let mut partial = frame(b"OPTIONS");
        let pseudo = fold(sum(&partial[26..34], 17 + 8 + 7));
        partial[40..42].copy_from_slice(&pseudo.to_be_bytes());
        assert!(parse(&partial).is_some());
        let mut other = partial;
        other[40..42].copy_from_slice(&pseudo.wrapping_add(1).to_be_bytes());
        assert!(parse(&other).is_none(), "neither partial nor right");
    }

    #[test]
    fn a_header_checksum_that_fails_is_refused() {
        let mut f = frame(b"OPTIONS");
        f[22] -= 1; // the TTL, the checksum left as it was
        assert!(parse(&f).is_none());
    }

    #[test]
    fn sources_that_cannot_send_are_refused() {
        let from = |src: &str| {
            let ends = Endpoints {
                src: src.parse().unwrap(),
                ..ends()
            };
            let mut f = vec![0; HEADERS + 2];
            assert!(write_headers(&mut f, &ends, 2, 1));
            parse(&f).map(|(e, _)| e.src.to_string())
        };
        for bad in [
            "0.0.0.0:5060",
            "0.1.2.3:5060",
            "127.0.0.1:5060",
            "224.0.0.251:5353",
            "239.255.255.250:1900",
            "240.0.0.1:5060",
            "255.255.255.255:5060",
            "10.201.0.2:5060",
            "10.201.0.2:5061",
            "10.201.0.1:0",
        ] {
            assert_eq!(from(bad), None, "{bad}");
        }
        for good in ["10.201.0.1:40000", "10.201.0.3:5060", "223.255.255.254:1"] {
            assert_eq!(from(good).as_deref(), Some(good));
        }
    }

    /// Every frame one bit away from a good one, in its headers, and
    /// every cut of it: the fuzz property holds, and past the MACs (which
    /// nothing sums) no flip gets through a frame whose UDP checksum was
    /// sent.
    #[test]
    fn one_bit_from_a_good_frame_the_property_holds() {
        let seeds = [
            checksummed(frame(b"REGISTER sip:x SIP/2.0\r\n\r\n")),
            frame(b"OPTIONS sip:x SIP/2.0\r\n\r\n"),
        ];
        for good in &seeds {
            crate::fuzzing::xdp_frame(good);
            for bit in 0..HEADERS * 8 {
                let mut f = good.clone();
                f[bit / 8] ^= 1 << (bit % 8);
                crate::fuzzing::xdp_frame(&f);
                let at = bit / 8;
                if at >= 12 && good[40..42] != [0, 0] {
                    assert!(parse(&f).is_none(), "a flip at byte {at} got through");
                }
            }
            for len in 0..good.len() {
                crate::fuzzing::xdp_frame(&good[..len]);
            }
        }
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
