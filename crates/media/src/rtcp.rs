//! RTCP sender and receiver reports (RFC 3550 §6.4) with an SDES CNAME,
//! as compound packets.

/// One reception report block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReportBlock {
    /// The source reported on.
    pub ssrc: u32,
    /// Fraction lost since the last report, in 1/256.
    pub fraction_lost: u8,
    /// Cumulative packets lost (24 bits, signed).
    pub cumulative_lost: i32,
    /// Extended highest sequence number received.
    pub highest_seq: u32,
    /// Interarrival jitter, timestamp units.
    pub jitter: u32,
    /// Middle 32 bits of the last SR's NTP time.
    pub last_sr: u32,
    /// Delay since that SR, 1/65536 s.
    pub delay_since_last_sr: u32,
}

/// A sender's own counts for an SR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SenderInfo {
    /// NTP timestamp (64 bits).
    pub ntp: u64,
    /// RTP timestamp of the same instant.
    pub rtp_timestamp: u32,
    /// Packets sent.
    pub packets: u32,
    /// Payload octets sent.
    pub octets: u32,
}

/// What a compound RTCP packet said.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    /// The reporter's SSRC.
    pub ssrc: u32,
    /// Present in an SR.
    pub sender: Option<SenderInfo>,
    /// Reception reports.
    pub reports: Vec<ReportBlock>,
    /// The CNAME, when an SDES chunk carried one.
    pub cname: Option<String>,
    /// A BYE was included.
    pub bye: bool,
}

fn header(out: &mut Vec<u8>, count: u8, pt: u8) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0x80 | (count & 0x1f), pt, 0, 0]);
    at
}

fn finish(out: &mut [u8], at: usize) {
    let words = ((out.len() - at) / 4 - 1) as u16;
    out[at + 2..at + 4].copy_from_slice(&words.to_be_bytes());
}

fn block(out: &mut Vec<u8>, b: &ReportBlock) {
    out.extend_from_slice(&b.ssrc.to_be_bytes());
    let lost = (b.cumulative_lost.clamp(-0x80_0000, 0x7f_ffff) as u32) & 0x00ff_ffff;
    out.extend_from_slice(&((u32::from(b.fraction_lost) << 24) | lost).to_be_bytes());
    out.extend_from_slice(&b.highest_seq.to_be_bytes());
    out.extend_from_slice(&b.jitter.to_be_bytes());
    out.extend_from_slice(&b.last_sr.to_be_bytes());
    out.extend_from_slice(&b.delay_since_last_sr.to_be_bytes());
}

/// A compound packet: SR (when `sender` is given) or RR, then SDES with
/// the CNAME, then BYE when `bye`.
pub fn compound(
    ssrc: u32,
    sender: Option<&SenderInfo>,
    reports: &[ReportBlock],
    cname: &str,
    bye: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    let reports = &reports[..reports.len().min(31)];
    let at = header(
        &mut out,
        reports.len() as u8,
        if sender.is_some() { 200 } else { 201 },
    );
    out.extend_from_slice(&ssrc.to_be_bytes());
    if let Some(s) = sender {
        out.extend_from_slice(&s.ntp.to_be_bytes());
        out.extend_from_slice(&s.rtp_timestamp.to_be_bytes());
        out.extend_from_slice(&s.packets.to_be_bytes());
        out.extend_from_slice(&s.octets.to_be_bytes());
    }
    for b in reports {
        block(&mut out, b);
    }
    finish(&mut out, at);
    let at = header(&mut out, 1, 202);
    out.extend_from_slice(&ssrc.to_be_bytes());
    let name = &cname.as_bytes()[..cname.len().min(255)];
    out.push(1);
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    // The item list ends with a zero byte, then pads to 32 bits.
    out.push(0);
    while out.len() % 4 != 0 {
        out.push(0);
    }
    finish(&mut out, at);
    if bye {
        let at = header(&mut out, 1, 203);
        out.extend_from_slice(&ssrc.to_be_bytes());
        finish(&mut out, at);
    }
    out
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Parses a compound RTCP packet; `None` when it is not valid RTCP.
pub fn parse(packet: &[u8]) -> Option<Parsed> {
    let mut p = Parsed::default();
    let mut at = 0;
    let mut first = true;
    while at + 4 <= packet.len() {
        let (v, count, pt) = (packet[at] >> 6, packet[at] & 0x1f, packet[at + 1]);
        let len = 4 * (usize::from(u16::from_be_bytes([packet[at + 2], packet[at + 3]])) + 1);
        let body = packet.get(at + 4..at + len)?;
        if v != 2 || (first && !(pt == 200 || pt == 201)) {
            return None;
        }
        first = false;
        match pt {
            200 | 201 => {
                p.ssrc = be32(body.get(..4)?);
                let mut b = 4;
                if pt == 200 {
                    let s = body.get(4..24)?;
                    p.sender = Some(SenderInfo {
                        ntp: u64::from_be_bytes(s[..8].try_into().ok()?),
                        rtp_timestamp: be32(&s[8..]),
                        packets: be32(&s[12..]),
                        octets: be32(&s[16..]),
                    });
                    b = 24;
                }
                for k in 0..usize::from(count) {
                    let r = body.get(b + 24 * k..b + 24 * (k + 1))?;
                    let word = be32(&r[4..]);
                    let lost = ((word & 0x00ff_ffff) << 8) as i32 >> 8;
                    p.reports.push(ReportBlock {
                        ssrc: be32(r),
                        fraction_lost: (word >> 24) as u8,
                        cumulative_lost: lost,
                        highest_seq: be32(&r[8..]),
                        jitter: be32(&r[12..]),
                        last_sr: be32(&r[16..]),
                        delay_since_last_sr: be32(&r[20..]),
                    });
                }
            }
            202 => {
                let mut i = 4;
                while i + 2 <= body.len() && body[i] != 0 {
                    let (kind, n) = (body[i], usize::from(body[i + 1]));
                    let value = body.get(i + 2..i + 2 + n)?;
                    if kind == 1 {
                        p.cname = Some(String::from_utf8_lossy(value).into_owned());
                    }
                    i += 2 + n;
                }
            }
            203 => p.bye = true,
            _ => {}
        }
        at += len;
    }
    (at == packet.len() && !first).then_some(p)
}

/// NTP time (RFC 5905: seconds since 1900 in the high 32 bits) of a
/// system time.
pub fn ntp(t: std::time::SystemTime) -> u64 {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() + 2_208_988_800;
    let frac = (u64::from(d.subsec_nanos()) << 32) / 1_000_000_000;
    (secs << 32) | frac
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sender_and_receiver_reports_round_trip() {
        let s = SenderInfo {
            ntp: 0x0102_0304_0506_0708,
            rtp_timestamp: 160,
            packets: 10,
            octets: 1600,
        };
        let b = ReportBlock {
            ssrc: 7,
            fraction_lost: 25,
            cumulative_lost: -3,
            highest_seq: 70_000,
            jitter: 12,
            last_sr: 0x0304_0506,
            delay_since_last_sr: 65_536,
        };
        let sr = compound(1, Some(&s), &[b], "alice@host", false);
        assert_eq!(sr.len() % 4, 0);
        let p = parse(&sr).unwrap();
        assert_eq!((p.ssrc, p.sender, p.reports.clone()), (1, Some(s), vec![b]));
        assert_eq!(p.cname.as_deref(), Some("alice@host"));
        assert!(!p.bye);
        let rr = compound(2, None, &[], "bob", true);
        let p = parse(&rr).unwrap();
        assert_eq!((p.ssrc, p.sender, p.bye), (2, None, true));
        assert_eq!(parse(&rr[..rr.len() - 1]), None);
        assert_eq!(parse(&[0x80, 0, 0, 0]), None, "RTP is not RTCP");
    }
}
