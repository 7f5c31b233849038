//! Pseudonyms as SIP URI user parts: hex (as published) or RFC 4648
//! base32, lowercase, without padding. Both alphabets are unreserved
//! characters (RFC 3261 §25.1).

/// How a raw pseudonym is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Two lowercase hex digits per byte.
    Hex,
    /// RFC 4648 base32, lowercase, unpadded: 8 characters per 5 bytes.
    Base32,
}

const B32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

impl Encoding {
    /// Writes `raw`.
    pub fn encode(self, raw: &[u8]) -> String {
        match self {
            Encoding::Hex => raw.iter().map(|b| format!("{b:02x}")).collect(),
            Encoding::Base32 => {
                let mut out = String::with_capacity(raw.len().div_ceil(5) * 8);
                let (mut acc, mut bits) = (0u32, 0u32);
                for &b in raw {
                    acc = (acc << 8) | u32::from(b);
                    bits += 8;
                    while bits >= 5 {
                        bits -= 5;
                        out.push(char::from(B32[((acc >> bits) & 31) as usize]));
                    }
                }
                if bits > 0 {
                    out.push(char::from(B32[((acc << (5 - bits)) & 31) as usize]));
                }
                out
            }
        }
    }

    /// Reads text written by [`Encoding::encode`] in this encoding.
    pub fn decode(self, text: &str) -> Option<Vec<u8>> {
        match self {
            Encoding::Hex => {
                if !text.len().is_multiple_of(2) {
                    return None;
                }
                (0..text.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
                    .collect()
            }
            Encoding::Base32 => {
                let mut out = Vec::with_capacity(text.len() * 5 / 8);
                let (mut acc, mut bits) = (0u32, 0u32);
                for c in text.bytes() {
                    let v = B32.iter().position(|&x| x == c.to_ascii_lowercase())? as u32;
                    acc = (acc << 5) | v;
                    bits += 5;
                    if bits >= 8 {
                        bits -= 8;
                        out.push((acc >> bits) as u8);
                    }
                }
                // Leftover bits must be zero padding of the last character.
                (bits < 5 && acc & ((1 << bits) - 1) == 0).then_some(out)
            }
        }
    }

    /// Reads either encoding: hex when every character is a hex digit and
    /// the length is even, else base32.
    pub fn decode_any(text: &str) -> Option<Vec<u8>> {
        let hexish = text.len().is_multiple_of(2) && text.bytes().all(|b| b.is_ascii_hexdigit());
        if hexish {
            if let Some(raw) = Encoding::Hex.decode(text) {
                if raw.first() == Some(&crate::VERSION) {
                    return Some(raw);
                }
            }
        }
        Encoding::Base32.decode(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_base32_vectors_lowercase_unpadded() {
        for (raw, want) in [
            ("", ""),
            ("f", "my"),
            ("fo", "mzxq"),
            ("foo", "mzxw6"),
            ("foob", "mzxw6yq"),
            ("fooba", "mzxw6ytb"),
            ("foobar", "mzxw6ytboi"),
        ] {
            assert_eq!(Encoding::Base32.encode(raw.as_bytes()), want);
            assert_eq!(Encoding::Base32.decode(want).unwrap(), raw.as_bytes());
        }
        assert_eq!(
            Encoding::Base32.decode("mzxw6yr"),
            None,
            "non-zero padding bits"
        );
        assert_eq!(Encoding::Base32.decode("mz1"), None);
    }

    #[test]
    fn hex_round_trip_and_garbage() {
        let raw = [1u8, 0, 255, 16];
        assert_eq!(Encoding::Hex.encode(&raw), "0100ff10");
        assert_eq!(Encoding::Hex.decode("0100ff10").unwrap(), raw);
        assert_eq!(Encoding::Hex.decode("0100f"), None);
        assert_eq!(Encoding::Hex.decode("zz"), None);
        assert_eq!(Encoding::decode_any("0100ff10").unwrap(), raw);
        assert_eq!(
            Encoding::decode_any(&Encoding::Base32.encode(&raw)).unwrap(),
            raw
        );
    }
}
