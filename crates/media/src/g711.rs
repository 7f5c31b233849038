//! G.711 (ITU-T G.711) companding: 16-bit linear PCM to and from µ-law
//! (payload type 0, PCMU) and A-law (payload type 8, PCMA).

/// A G.711 law.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Law {
    /// µ-law, RTP payload type 0.
    Pcmu,
    /// A-law, RTP payload type 8.
    Pcma,
}

impl Law {
    /// The static RTP payload type (RFC 3551).
    pub fn payload_type(self) -> u8 {
        match self {
            Law::Pcmu => 0,
            Law::Pcma => 8,
        }
    }

    /// The law of a static payload type.
    pub fn from_payload_type(pt: u8) -> Option<Self> {
        match pt {
            0 => Some(Law::Pcmu),
            8 => Some(Law::Pcma),
            _ => None,
        }
    }

    /// The SDP rtpmap encoding name.
    pub fn name(self) -> &'static str {
        match self {
            Law::Pcmu => "PCMU",
            Law::Pcma => "PCMA",
        }
    }

    /// Encodes `pcm` into `out` (one byte per sample).
    pub fn encode(self, pcm: &[i16], out: &mut Vec<u8>) {
        out.extend(pcm.iter().map(|&s| match self {
            Law::Pcmu => ulaw_encode(s),
            Law::Pcma => alaw_encode(s),
        }));
    }

    /// Decodes `coded` into `out`.
    pub fn decode(self, coded: &[u8], out: &mut Vec<i16>) {
        out.extend(coded.iter().map(|&c| match self {
            Law::Pcmu => ulaw_decode(c),
            Law::Pcma => alaw_decode(c),
        }));
    }
}

const ULAW_BIAS: i32 = 0x84;
const ULAW_CLIP: i32 = 32_635;

/// One sample to µ-law.
pub fn ulaw_encode(sample: i16) -> u8 {
    let mut x = i32::from(sample);
    let sign = if x < 0 {
        x = -x;
        0x80
    } else {
        0
    };
    x = x.min(ULAW_CLIP) + ULAW_BIAS;
    // Segment: position of the highest set bit above bit 7.
    let exponent = (31 - (x as u32).leading_zeros()).saturating_sub(7).min(7) as i32;
    let mantissa = (x >> (exponent + 3)) & 0x0f;
    !(sign | (exponent << 4) as u8 | mantissa as u8)
}

/// One µ-law byte to a sample.
pub fn ulaw_decode(code: u8) -> i16 {
    let u = !code;
    let exponent = i32::from((u >> 4) & 0x07);
    let mantissa = i32::from(u & 0x0f);
    let x = (((mantissa << 3) + ULAW_BIAS) << exponent) - ULAW_BIAS;
    (if u & 0x80 != 0 { -x } else { x }) as i16
}

/// One sample to A-law.
pub fn alaw_encode(sample: i16) -> u8 {
    let mut x = i32::from(sample) >> 3;
    let mask = if x >= 0 {
        0xd5
    } else {
        x = -x - 1;
        0x55
    };
    let segment = (0..8).find(|s| x < (0x20 << s)).unwrap_or(8);
    if segment >= 8 {
        return 0x7f ^ mask;
    }
    let mantissa = if segment < 2 {
        (x >> 1) & 0x0f
    } else {
        (x >> segment) & 0x0f
    };
    ((segment << 4) as u8 | mantissa as u8) ^ mask
}

/// One A-law byte to a sample.
pub fn alaw_decode(code: u8) -> i16 {
    let a = code ^ 0x55;
    let mut t = i32::from(a & 0x0f) << 4;
    let segment = i32::from((a & 0x70) >> 4);
    match segment {
        0 => t += 8,
        1 => t += 0x108,
        _ => {
            t += 0x108;
            t <<= segment - 1;
        }
    }
    (if a & 0x80 != 0 { t } else { -t }) as i16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_and_extremes_have_their_standard_codes() {
        assert_eq!(ulaw_encode(0), 0xff);
        assert_eq!(alaw_encode(0), 0xd5);
        assert_eq!(ulaw_encode(i16::MAX), 0x80);
        assert_eq!(ulaw_encode(i16::MIN), 0x00);
        assert_eq!(alaw_encode(i16::MAX), 0xaa);
        assert_eq!(alaw_encode(i16::MIN), 0x2a);
        assert_eq!(ulaw_decode(0xff), 0);
        assert_eq!(ulaw_decode(0x80), 32_124);
        assert_eq!(alaw_decode(0xd5), 8);
        assert_eq!(alaw_decode(0xaa), 32_256);
    }

    #[test]
    fn every_code_survives_decode_then_encode() {
        for c in 0..=255u8 {
            // µ-law's negative zero (0x7f) decodes to 0 and comes back as 0xff.
            if c != 0x7f {
                assert_eq!(ulaw_encode(ulaw_decode(c)), c, "µ-law {c:#x}");
            }
            assert_eq!(alaw_encode(alaw_decode(c)), c, "A-law {c:#x}");
        }
    }

    #[test]
    fn quantisation_error_stays_within_the_segment_step() {
        for s in (-32_000i32..32_000).step_by(7) {
            let s = s as i16;
            for (law, got) in [
                ("µ", i32::from(ulaw_decode(ulaw_encode(s)))),
                ("A", i32::from(alaw_decode(alaw_encode(s)))),
            ] {
                let err = (got - i32::from(s)).abs();
                // Steps double per segment: at most 1/16 of the magnitude + 16.
                assert!(
                    err <= i32::from(s).abs() / 16 + 16,
                    "{law}-law {s} -> {got}"
                );
            }
        }
    }
}
