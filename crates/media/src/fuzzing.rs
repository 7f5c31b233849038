//! Properties the fuzz targets check (the tests run them too).

use crate::{rtcp, rtp};

/// Whatever a peer sends to a media port: parsing never panics, an RTP
/// payload lies inside the packet, and a compound RTCP packet that
/// parses says the same once written again as this crate writes it.
pub fn packets(data: &[u8]) {
    if let Some((_, payload)) = rtp::Header::parse(data) {
        assert!(payload.start <= payload.end && payload.end <= data.len());
    }
    let Some(parsed) = rtcp::parse(data) else {
        return;
    };
    // What one compound packet can carry: 31 reports, a 255-byte CNAME.
    let cname = parsed.cname.clone().unwrap_or_default();
    if parsed.reports.len() > 31 || cname.len() > 255 {
        return;
    }
    let again = rtcp::compound(
        parsed.ssrc,
        parsed.sender.as_ref(),
        &parsed.reports,
        &cname,
        parsed.bye,
    );
    let mut reparsed = rtcp::parse(&again).expect("a written compound packet parses");
    if parsed.cname.is_none() {
        // An empty CNAME is written: it reads back as one.
        assert_eq!(reparsed.cname.as_deref(), Some(""));
        reparsed.cname = None;
    }
    assert_eq!(reparsed, parsed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_packets_and_their_truncations_hold_the_property() {
        let report = rtcp::ReportBlock {
            ssrc: 7,
            fraction_lost: 3,
            cumulative_lost: -5,
            highest_seq: 70_000,
            jitter: 12,
            last_sr: 0xdead_beef,
            delay_since_last_sr: 655,
        };
        let sender = rtcp::SenderInfo {
            ntp: 1 << 40,
            rtp_timestamp: 160,
            packets: 50,
            octets: 8000,
        };
        let sr = rtcp::compound(1, Some(&sender), &[report; 3], "a@b", true);
        let rr = rtcp::compound(2, None, &[], "", false);
        let mut rtp_packet = Vec::new();
        rtp::Header {
            payload_type: 0,
            marker: true,
            seq: 9,
            timestamp: 1,
            ssrc: 3,
        }
        .write(&mut rtp_packet);
        rtp_packet.extend_from_slice(&[0xff; 160]);
        let mut rng = sip_core::fuzzing::Mutator::new(0x5eed_0a11);
        for p in [sr, rr, rtp_packet] {
            for n in 0..=p.len() {
                packets(&p[..n]);
            }
            for _ in 0..2_000 {
                packets(&rng.mutate(&p));
            }
        }
        // Padding longer than the packet; an extension past its end.
        packets(&[0xa0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 200]);
        packets(&[0x90, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
    }
}
