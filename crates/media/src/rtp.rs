//! RTP packets (RFC 3550 §5.1) and drift-free pacing.

use std::time::{Duration, Instant};

/// The fields of an RTP header we set and read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Payload type.
    pub payload_type: u8,
    /// Marker bit.
    pub marker: bool,
    /// Sequence number.
    pub seq: u16,
    /// Timestamp.
    pub timestamp: u32,
    /// Synchronisation source.
    pub ssrc: u32,
}

impl Header {
    /// Appends the 12-byte header (no CSRCs, no extension) to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(0x80);
        out.push((u8::from(self.marker) << 7) | (self.payload_type & 0x7f));
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out.extend_from_slice(&self.ssrc.to_be_bytes());
    }

    /// Parses a packet: the header and the offset of its payload
    /// (after CSRCs and extension; padding removed from the end).
    pub fn parse(packet: &[u8]) -> Option<(Self, std::ops::Range<usize>)> {
        if packet.len() < 12 || packet[0] >> 6 != 2 {
            return None;
        }
        let mut start = 12 + 4 * usize::from(packet[0] & 0x0f);
        if packet[0] & 0x10 != 0 {
            let ext = packet.get(start + 2..start + 4)?;
            start += 4 + 4 * usize::from(u16::from_be_bytes([ext[0], ext[1]]));
        }
        let mut end = packet.len();
        if packet[0] & 0x20 != 0 {
            end = end.checked_sub(usize::from(*packet.last()?))?;
        }
        if start > end {
            return None;
        }
        let h = Header {
            payload_type: packet[1] & 0x7f,
            marker: packet[1] & 0x80 != 0,
            seq: u16::from_be_bytes([packet[2], packet[3]]),
            timestamp: u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]),
            ssrc: u32::from_be_bytes([packet[8], packet[9], packet[10], packet[11]]),
        };
        Some((h, start..end))
    }
}

/// Whether a datagram on a shared port is RTCP rather than RTP
/// (RFC 5761 §4: payload types 64–95 belong to RTCP).
pub fn is_rtcp(packet: &[u8]) -> bool {
    packet.len() >= 2 && (192..=223).contains(&packet[1])
}

/// Send times on a fixed grid from a start instant: packet n is due at
/// start + n·period, so late wake-ups never accumulate into drift.
#[derive(Debug, Clone)]
pub struct Pacer {
    start: Instant,
    period: Duration,
    sent: u64,
}

impl Pacer {
    /// A pacer starting at `start`, one packet per `period`.
    pub fn new(start: Instant, period: Duration) -> Self {
        Self {
            start,
            period,
            sent: 0,
        }
    }

    /// When the next packet is due.
    pub fn next_due(&self) -> Instant {
        self.start
            + self
                .period
                .saturating_mul(self.sent.min(u64::from(u32::MAX)) as u32)
    }

    /// Counts one packet as sent.
    pub fn sent(&mut self) {
        self.sent += 1;
    }

    /// Packets sent so far.
    pub fn count(&self) -> u64 {
        self.sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_payload_bounds() {
        let h = Header {
            payload_type: 8,
            marker: true,
            seq: 65_535,
            timestamp: 0xdead_beef,
            ssrc: 42,
        };
        let mut p = Vec::new();
        h.write(&mut p);
        p.extend_from_slice(&[1, 2, 3]);
        assert_eq!(Header::parse(&p), Some((h, 12..15)));
        let mut padded = p.clone();
        padded[0] |= 0x20;
        padded.extend_from_slice(&[0, 2]);
        assert_eq!(Header::parse(&padded).map(|x| x.1), Some(12..15));
        assert_eq!(Header::parse(&p[..11]), None);
        let mut v1 = p;
        v1[0] = 0x40;
        assert_eq!(Header::parse(&v1), None);
        assert!(is_rtcp(&[0x80, 200]) && !is_rtcp(&[0x80, 0]));
    }

    #[test]
    fn pacing_is_on_a_grid() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, Duration::from_millis(20));
        for _ in 0..500 {
            p.sent();
        }
        assert_eq!(p.next_due() - t0, Duration::from_secs(10));
    }
}
