//! SDP (RFC 4566) for one audio stream: the offer and answer a phone
//! makes, with SDES `a=crypto` lines (RFC 4568) when media is secured,
//! and the parse of what the peer sent.

use std::net::IpAddr;

use media::g711::Law;
use srtp::sdes::{self, Crypto};

/// Why a session description could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SdpError {
    /// The text is not SDP we understand.
    #[error("malformed SDP: {0}")]
    Malformed(String),
    /// No audio stream in it.
    #[error("no audio stream in the SDP")]
    NoAudio,
    /// A bad a=crypto line.
    #[error("{0}")]
    Crypto(#[from] sdes::SdesError),
}

/// The audio stream of a session description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audio {
    /// Where media goes (c= line).
    pub addr: IpAddr,
    /// RTP port (RTCP on the next one).
    pub port: u16,
    /// `RTP/SAVP`: SRTP is mandatory.
    pub savp: bool,
    /// Payload types in preference order.
    pub payloads: Vec<u8>,
    /// The a=crypto attributes.
    pub crypto: Vec<Crypto>,
}

impl Audio {
    /// The first payload type that is a G.711 law.
    pub fn law(&self) -> Option<Law> {
        self.payloads
            .iter()
            .find_map(|&pt| Law::from_payload_type(pt))
    }
}

/// Writes a session description with one audio stream (`laws` in
/// preference order, plus telephone events left out on purpose).
pub fn write(session_id: u64, version: u64, audio: &Audio) -> String {
    let ip = match audio.addr {
        IpAddr::V4(_) => "IP4",
        IpAddr::V6(_) => "IP6",
    };
    let proto = if audio.savp { "RTP/SAVP" } else { "RTP/AVP" };
    let mut s = format!(
        "v=0\r\no=sipsec {session_id} {version} IN {ip} {addr}\r\ns=sipsec\r\nc=IN {ip} {addr}\r\nt=0 0\r\nm=audio {port} {proto}",
        addr = audio.addr,
        port = audio.port
    );
    for pt in &audio.payloads {
        s.push_str(&format!(" {pt}"));
    }
    s.push_str("\r\n");
    for pt in &audio.payloads {
        if let Some(law) = Law::from_payload_type(*pt) {
            s.push_str(&format!("a=rtpmap:{pt} {}/8000\r\n", law.name()));
        }
    }
    for c in &audio.crypto {
        s.push_str(&format!("a=crypto:{c}\r\n"));
    }
    s.push_str("a=ptime:20\r\na=sendrecv\r\n");
    s
}

/// Parses the first audio stream of `text`. a=crypto lines with suites
/// we do not know are skipped; malformed ones are errors.
pub fn parse(text: &str) -> Result<Audio, SdpError> {
    let bad = |why: &str| SdpError::Malformed(why.to_string());
    let mut session_addr: Option<IpAddr> = None;
    let mut audio: Option<(u16, bool, Vec<u8>)> = None;
    let mut media_addr: Option<IpAddr> = None;
    let mut in_audio = false;
    let mut seen_media = false;
    let mut crypto_lines: Vec<&str> = Vec::new();
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            continue;
        }
        let (kind, value) = line
            .split_once('=')
            .ok_or_else(|| bad("a line without '='"))?;
        match kind {
            "c" => {
                let addr = value
                    .split_whitespace()
                    .nth(2)
                    .and_then(|a| a.split('/').next())
                    .and_then(|a| a.parse::<IpAddr>().ok())
                    .ok_or_else(|| bad("c= needs IN IP4|IP6 and a numeric address"))?;
                if !seen_media {
                    session_addr = Some(addr);
                } else if in_audio {
                    media_addr = Some(addr);
                }
            }
            "m" => {
                seen_media = true;
                let was_audio = in_audio;
                let mut f = value.split_whitespace();
                in_audio = f.next() == Some("audio") && audio.is_none() && !was_audio;
                if in_audio {
                    let port = f
                        .next()
                        .and_then(|p| p.split('/').next())
                        .and_then(|p| p.parse::<u16>().ok())
                        .ok_or_else(|| bad("m=audio needs a port"))?;
                    let proto = f.next().ok_or_else(|| bad("m=audio needs a protocol"))?;
                    let payloads = f.filter_map(|p| p.parse::<u8>().ok()).collect();
                    audio = Some((port, proto == "RTP/SAVP", payloads));
                }
            }
            "a" if in_audio => {
                if let Some(c) = value.strip_prefix("crypto:") {
                    crypto_lines.push(c);
                }
            }
            _ => {}
        }
    }
    let (port, savp, payloads) = audio.ok_or(SdpError::NoAudio)?;
    let addr = media_addr
        .or(session_addr)
        .ok_or_else(|| bad("no c= line for the audio stream"))?;
    Ok(Audio {
        addr,
        port,
        savp,
        payloads,
        crypto: sdes::parse_all(crypto_lines)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offer_round_trips_through_parse() {
        let crypto = Crypto::new(1, srtp::Profile::AeadAes128Gcm, vec![5; 28]).unwrap();
        let a = Audio {
            addr: "127.0.0.1".parse().unwrap(),
            port: 40_000,
            savp: true,
            payloads: vec![0, 8],
            crypto: vec![crypto],
        };
        let text = write(1, 2, &a);
        assert!(text.contains("m=audio 40000 RTP/SAVP 0 8\r\n"));
        assert!(text.contains("a=rtpmap:8 PCMA/8000\r\n"));
        assert_eq!(parse(&text).unwrap(), a);
        assert_eq!(a.law(), Some(Law::Pcmu));
    }

    #[test]
    fn baresip_style_answer_with_media_level_address() {
        let text = "v=0\r\no=- 1 2 IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n\
                    m=audio 5004 RTP/SAVP 8 101\r\nc=IN IP4 127.0.0.1\r\n\
                    a=rtpmap:101 telephone-event/8000\r\n\
                    a=crypto:2 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR\r\n\
                    m=video 5006 RTP/AVP 96\r\nc=IN IP4 10.9.9.9\r\n";
        let a = parse(text).unwrap();
        assert_eq!(a.addr, "127.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(
            (a.port, a.savp, a.payloads.clone()),
            (5004, true, vec![8, 101])
        );
        assert_eq!(a.crypto.len(), 1);
        assert_eq!(a.law(), Some(Law::Pcma));
    }

    #[test]
    fn bad_sdp_gets_a_reason() {
        assert_eq!(
            parse("v=0\r\nm=video 1 RTP/AVP 96\r\n"),
            Err(SdpError::NoAudio)
        );
        assert!(matches!(
            parse("v=0\r\nnonsense\r\n"),
            Err(SdpError::Malformed(_))
        ));
        assert!(matches!(
            parse("v=0\r\nm=audio 1 RTP/AVP 0\r\n"),
            Err(SdpError::Malformed(_))
        ));
        assert!(matches!(
            parse("c=IN IP4 1.2.3.4\r\nm=audio 1 RTP/SAVP 0\r\na=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:xx\r\n"),
            Err(SdpError::Crypto(_))
        ));
    }
}
