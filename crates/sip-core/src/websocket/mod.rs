//! SIP over WebSocket (RFC 7118), sans-IO, both ends: the frame header
//! codec both use (RFC 6455 §5.2), the client's upgrade request, masked
//! frames and reading of the server's frames ([`client`], re-exported
//! here), and the server's upgrade answer and message reassembly
//! ([`server`]).

pub mod client;
pub mod server;

pub use client::*;

/// First byte of a final text frame.
pub const TEXT: u8 = 0x81;
/// First byte of a final binary frame.
pub const BINARY: u8 = 0x82;
/// First byte of a close frame.
pub const CLOSE: u8 = 0x88;
/// First byte of a pong frame.
pub const PONG: u8 = 0x8a;

/// Opcodes (RFC 6455 §5.2).
pub mod opcode {
    /// Continuation of a fragmented message.
    pub const CONTINUATION: u8 = 0x0;
    /// A text frame.
    pub const TEXT: u8 = 0x1;
    /// A binary frame.
    pub const BINARY: u8 = 0x2;
    /// Close.
    pub const CLOSE: u8 = 0x8;
    /// Ping.
    pub const PING: u8 = 0x9;
    /// Pong.
    pub const PONG: u8 = 0xa;
}

/// Close codes (RFC 6455 §7.4.1).
pub mod close {
    /// The purpose of the connection is fulfilled (an answer to the
    /// peer's close).
    pub const NORMAL: u16 = 1000;
    /// The endpoint is going away (server shutdown).
    pub const GOING_AWAY: u16 = 1001;
    /// A protocol error: an unmasked client frame, reserved bits or
    /// opcodes, a fragmented or oversized control frame, a continuation
    /// out of place.
    pub const PROTOCOL: u16 = 1002;
    /// A text message that is not UTF-8.
    pub const INVALID_DATA: u16 = 1007;
    /// The peer broke the endpoint's policy (pings far beyond the pace).
    pub const POLICY_VIOLATION: u16 = 1008;
    /// A message larger than the endpoint accepts.
    pub const TOO_BIG: u16 = 1009;
}

/// A frame's header (RFC 6455 §5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The FIN bit: the last frame of its message.
    pub fin: bool,
    /// RSV1–3, which no extension we agree to sets.
    pub rsv: u8,
    /// The opcode (see [`opcode`]).
    pub opcode: u8,
    /// The masking key, on every client frame and no server frame.
    pub mask: Option<[u8; 4]>,
    /// Payload length.
    pub len: u64,
    /// Bytes of the header itself (2 to 14).
    pub size: usize,
}

impl Header {
    /// A control frame (close, ping, pong, reserved 0xB–0xF).
    pub fn is_control(&self) -> bool {
        self.opcode & 0x8 != 0
    }
}

/// Reads the frame header at the start of `bytes`; `None` until all of it
/// is there.
pub fn parse_header(bytes: &[u8]) -> Option<Header> {
    let (&b0, &b1) = (bytes.first()?, bytes.get(1)?);
    let (len, mut size) = match b1 & 0x7f {
        126 => (
            u64::from(u16::from_be_bytes(bytes.get(2..4)?.try_into().ok()?)),
            4,
        ),
        127 => (u64::from_be_bytes(bytes.get(2..10)?.try_into().ok()?), 10),
        n => (u64::from(n), 2),
    };
    let mask = if b1 & 0x80 != 0 {
        let m: [u8; 4] = bytes.get(size..size + 4)?.try_into().ok()?;
        size += 4;
        Some(m)
    } else {
        None
    };
    Some(Header {
        fin: b0 & 0x80 != 0,
        rsv: (b0 >> 4) & 0x7,
        opcode: b0 & 0x0f,
        mask,
        len,
        size,
    })
}

/// An unmasked frame header (a server's): `first` is the FIN bit and
/// opcode (e.g. [`TEXT`]), for `len` payload bytes. Returns the buffer
/// and how much of it is the header.
pub fn unmasked_header(first: u8, len: usize) -> ([u8; 10], usize) {
    let mut h = [0u8; 10];
    h[0] = first;
    let n = match len {
        0..=125 => {
            h[1] = len as u8;
            2
        }
        126..=65535 => {
            h[1] = 126;
            h[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            4
        }
        _ => {
            h[1] = 127;
            h[2..10].copy_from_slice(&(len as u64).to_be_bytes());
            10
        }
    };
    (h, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_at_every_length_form() {
        for len in [0usize, 125, 126, 65535, 65536, 1 << 20] {
            let (h, n) = unmasked_header(TEXT, len);
            let got = parse_header(&h[..n]).expect("whole");
            assert_eq!(
                (got.fin, got.rsv, got.opcode, got.mask, got.len, got.size),
                (true, 0, opcode::TEXT, None, len as u64, n)
            );
            assert_eq!(parse_header(&h[..n - 1]), None, "{len}: cut short");
        }
        let masked = client_frame(BINARY, b"abc", [1, 2, 3, 4]);
        let h = parse_header(&masked).expect("whole");
        assert_eq!((h.mask, h.len, h.size), (Some([1, 2, 3, 4]), 3, 6));
        assert_eq!(parse_header(&masked[..5]), None, "mask cut short");
        assert_eq!(parse_header(&[0xc1, 0]).map(|h| h.rsv), Some(4));
    }
}
