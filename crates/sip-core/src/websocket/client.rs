//! The client side of SIP over WebSocket (RFC 7118): the HTTP/1.1
//! upgrade request with the `sip` subprotocol (RFC 6455 §4.1, RFC 7118
//! §4.1), the check of the server's answer, masked client frames and the
//! server's unmasked frames (RFC 6455 §5.2). For phones, load generators
//! and test clients.

use super::parse_header;
#[cfg(test)]
use super::{opcode, BINARY, TEXT};

/// Longest upgrade answer read before giving up on the server.
pub const MAX_UPGRADE_ANSWER: usize = 8 << 10;

/// The upgrade request for `host` (the `Host` header: the server's
/// address or name), asking for the `sip` subprotocol. `key` is the
/// base64 of 16 random bytes; `origin` is sent when given (browsers
/// always send one).
pub fn upgrade_request(host: &str, path: &str, key: &str, origin: Option<&str>) -> String {
    let origin = origin.map_or(String::new(), |o| format!("Origin: {o}\r\n"));
    format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Protocol: sip\r\n{origin}\r\n"
    )
}

/// What the server's answer to the upgrade came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// Not all of it yet.
    Incomplete,
    /// 101 with the `sip` subprotocol: the first `used` bytes were the
    /// answer, frames follow.
    Upgraded {
        /// Bytes of the answer.
        used: usize,
    },
    /// Anything else: the status line, or what was wrong with a 101.
    Refused(String),
}

/// Reads the server's answer to an upgrade request at the start of
/// `bytes`.
pub fn upgrade_answer(bytes: &[u8]) -> Answer {
    let Some(end) = memchr::memmem::find(bytes, b"\r\n\r\n") else {
        if bytes.len() > MAX_UPGRADE_ANSWER {
            return Answer::Refused("an upgrade answer longer than 8 KiB".into());
        }
        return Answer::Incomplete;
    };
    let head = String::from_utf8_lossy(&bytes[..end]);
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let mut parts = status.split(' ');
    let (version, code) = (parts.next(), parts.next());
    if version != Some("HTTP/1.1") || code != Some("101") {
        return Answer::Refused(status.to_owned());
    }
    let sip = lines.any(|l| {
        l.split_once(':').is_some_and(|(n, v)| {
            n.trim().eq_ignore_ascii_case("sec-websocket-protocol")
                && v.split(',').any(|t| t.trim() == "sip")
        })
    });
    if !sip {
        return Answer::Refused("101 without the sip subprotocol (RFC 7118 section 4.1)".into());
    }
    Answer::Upgraded { used: end + 4 }
}

/// Appends a client frame (RFC 6455 §5.2): `first` is the FIN bit and
/// opcode (e.g. [`super::TEXT`]), the payload masked with `mask`.
pub fn push_client_frame(out: &mut Vec<u8>, first: u8, payload: &[u8], mask: [u8; 4]) {
    out.reserve(payload.len() + 14);
    out.push(first);
    match payload.len() {
        n @ 0..=125 => out.push(0x80 | n as u8),
        n @ 126..=65535 => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i & 3]));
}

/// A client frame as a new buffer; see [`push_client_frame`].
pub fn client_frame(first: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::new();
    push_client_frame(&mut f, first, payload, mask);
    f
}

/// One frame from the server.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The FIN bit: the last frame of its message.
    pub fin: bool,
    /// The opcode (see [`super::opcode`]).
    pub opcode: u8,
    /// The payload.
    pub payload: &'a [u8],
    /// Bytes of the frame, header included.
    pub len: usize,
}

/// Reads the server frame at the start of `bytes`: `Ok(None)` while it is
/// not whole; an error for what a server must not send (a masked frame,
/// reserved bits, a frame longer than `max`).
pub fn server_frame(bytes: &[u8], max: usize) -> Result<Option<Frame<'_>>, &'static str> {
    let Some(h) = parse_header(bytes) else {
        return Ok(None);
    };
    if h.rsv != 0 {
        return Err("reserved bits set in a server frame");
    }
    if h.mask.is_some() {
        // RFC 6455 §5.1: a server never masks.
        return Err("a masked server frame");
    }
    if h.len > max as u64 {
        return Err("a server frame larger than allowed");
    }
    let end = h.size + h.len as usize;
    let Some(payload) = bytes.get(h.size..end) else {
        return Ok(None);
    };
    Ok(Some(Frame {
        fin: h.fin,
        opcode: h.opcode,
        payload,
        len: end,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upgrade_request_asks_for_sip() {
        let r = upgrade_request("127.0.0.1:8080", "/", "dGhlIHNhbXBsZSBub25jZQ==", None);
        assert!(r.starts_with("GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"));
        assert!(r.contains("\r\nSec-WebSocket-Protocol: sip\r\n"));
        assert!(r.ends_with("\r\n\r\n") && !r.contains("Origin"));
        let r = upgrade_request("h", "/ws", "k", Some("https://phone.example"));
        assert!(r.contains("\r\nOrigin: https://phone.example\r\n\r\n"));
    }

    #[test]
    fn answers_are_checked() {
        let ok = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Protocol: sip\r\n\r\n\x81";
        assert_eq!(upgrade_answer(ok), Answer::Upgraded { used: ok.len() - 1 });
        assert_eq!(upgrade_answer(&ok[..20]), Answer::Incomplete);
        assert_eq!(
            upgrade_answer(b"HTTP/1.1 403 Forbidden\r\n\r\n"),
            Answer::Refused("HTTP/1.1 403 Forbidden".into())
        );
        assert!(matches!(
            upgrade_answer(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"),
            Answer::Refused(why) if why.contains("sip subprotocol")
        ));
        assert!(matches!(upgrade_answer(&[b'x'; 9000]), Answer::Refused(_)));
    }

    #[test]
    fn client_frames_are_masked_with_the_right_length() {
        let f = client_frame(TEXT, b"Hello", [0x37, 0xfa, 0x21, 0x3d]);
        // RFC 6455 §5.7's masked "Hello".
        assert_eq!(
            f,
            [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58]
        );
        let f = client_frame(BINARY, &[0; 300], [0; 4]);
        assert_eq!(&f[..4], [0x82, 0xfe, 0x01, 0x2c]);
        assert_eq!(f.len(), 4 + 4 + 300);
        let f = client_frame(BINARY, &[0; 70_000], [0; 4]);
        assert_eq!(f[1], 0xff);
        assert_eq!(&f[2..10], 70_000u64.to_be_bytes());
    }

    #[test]
    fn server_frames_are_read_whole_or_not_at_all() {
        // RFC 6455 §5.7: an unmasked "Hello", then a fragment "Hel".
        let mut bytes = vec![0x81, 0x05, b'H', b'e', b'l', b'l', b'o', 0x01, 0x03];
        let f = server_frame(&bytes, 1 << 16).unwrap().unwrap();
        assert_eq!(
            (f.fin, f.opcode, f.payload, f.len),
            (true, 1, &b"Hello"[..], 7)
        );
        assert_eq!(server_frame(&bytes[7..], 1 << 16), Ok(None));
        bytes.extend_from_slice(b"Hel");
        let f = server_frame(&bytes[7..], 1 << 16).unwrap().unwrap();
        assert!(!f.fin && f.opcode == opcode::TEXT && f.payload == b"Hel");
        let mut long = vec![0x82, 126, 0x01, 0x00];
        assert_eq!(server_frame(&long, 1 << 16), Ok(None));
        long.resize(4 + 256, 7);
        assert_eq!(
            server_frame(&long, 1 << 16).unwrap().unwrap().payload.len(),
            256
        );
        assert!(server_frame(&long, 255).is_err());
        assert!(server_frame(&[0x81, 0x85, 1, 2, 3, 4, 0], 100).is_err());
        assert!(server_frame(&[0xc1, 0x00], 100).is_err());
    }
}
