//! Properties the fuzz targets check (the tests run them too).

use crate::sdp;

/// A session description from a peer: parsing never panics, and one
/// that parses says the same once written as this phone writes its own
/// (address, port, profile, payload types and every `a=crypto` it took).
pub fn sdp(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(audio) = sdp::parse(text) else {
        return;
    };
    let written = sdp::write(1, 1, &audio);
    assert_eq!(sdp::parse(&written).as_ref(), Ok(&audio), "{written}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_and_their_truncations_hold_the_property() {
        let texts = [
            "v=0\r\no=- 1 2 IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n\
             m=audio 5004 RTP/SAVP 8 101 x 300\r\nc=IN IP4 127.0.0.1\r\n\
             a=crypto:2 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR|2^20|1:4 KDR=1\r\n\
             a=crypto:3 F8_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR\r\n\
             m=video 5006 RTP/AVP 96\r\n",
            "v=0\nc=IN IP6 2001:db8::1\nm=audio 7078/2 RTP/AVP 0\na=crypto:1 AES_CM_128_HMAC_SHA1_32 \
             inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR|1048575 WSH=64 UNENCRYPTED_SRTCP\n",
        ];
        let mut rng = sip_core::fuzzing::Mutator::new(0x5eed_05d9);
        for t in texts {
            assert!(sdp::parse(t).is_ok(), "{t}");
            for n in 0..=t.len() {
                sdp(&t.as_bytes()[..n]);
            }
            for _ in 0..2_000 {
                sdp(&rng.mutate(t.as_bytes()));
            }
        }
    }
}
