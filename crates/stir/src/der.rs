//! Just enough DER (ITU-T X.690) to read and write a TNAuthList and to
//! find an extension in a certificate: tag, definite length, contents.
//! Every length is checked against what is left; nothing recurses
//! without bound.

/// One element: its tag byte and contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tlv<'a> {
    pub tag: u8,
    pub contents: &'a [u8],
}

pub const SEQUENCE: u8 = 0x30;
pub const OID: u8 = 0x06;
pub const BOOLEAN: u8 = 0x01;
pub const OCTET_STRING: u8 = 0x04;
pub const IA5_STRING: u8 = 0x16;
pub const INTEGER: u8 = 0x02;

/// The elements of `bytes` in turn; `Err` at the first malformed one.
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next element, or `Err` when it is malformed or cut short.
    pub fn next_tlv(&mut self) -> Result<Tlv<'a>, &'static str> {
        let (&tag, rest) = self.rest.split_first().ok_or("DER: element missing")?;
        if tag & 0x1f == 0x1f {
            return Err("DER: multi-byte tags are not used here");
        }
        let (&first, mut rest) = rest.split_first().ok_or("DER: length missing")?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return Err("DER: bad length");
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
            rest = &rest[n..];
            len
        };
        if rest.len() < len {
            return Err("DER: element longer than its container");
        }
        let (contents, rest) = rest.split_at(len);
        self.rest = rest;
        Ok(Tlv { tag, contents })
    }

    /// The next element, which must have tag `tag`.
    pub fn expect(&mut self, tag: u8, what: &'static str) -> Result<&'a [u8], &'static str> {
        let t = self.next_tlv()?;
        if t.tag != tag {
            return Err(what);
        }
        Ok(t.contents)
    }
}

/// Appends the element `tag`/`contents` to `out`.
pub fn write(tag: u8, contents: &[u8], out: &mut Vec<u8>) {
    out.push(tag);
    let len = contents.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(contents);
}

/// The contents of a non-negative INTEGER that fits 64 bits.
pub fn read_u64(contents: &[u8]) -> Result<u64, &'static str> {
    let c = match contents {
        [0, rest @ ..] if !rest.is_empty() => rest,
        c => c,
    };
    if c.is_empty() || c.len() > 8 || c[0] & 0x80 != 0 && contents[0] != 0 {
        return Err("DER: INTEGER out of range");
    }
    Ok(c.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
}

/// A non-negative INTEGER's contents.
pub fn u64_contents(v: u64) -> Vec<u8> {
    let bytes = v.to_be_bytes();
    let skip = bytes.iter().take_while(|&&b| b == 0).count().min(7);
    let mut c = bytes[skip..].to_vec();
    if c[0] & 0x80 != 0 {
        c.insert(0, 0);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_short_and_long_round_trip() {
        for n in [0usize, 1, 127, 128, 255, 256, 70_000] {
            let mut out = Vec::new();
            write(OCTET_STRING, &vec![7; n], &mut out);
            let t = Reader::new(&out).next_tlv().unwrap();
            assert_eq!((t.tag, t.contents.len()), (OCTET_STRING, n));
        }
    }

    #[test]
    fn cut_short_and_oversize_lengths_are_errors() {
        assert!(Reader::new(&[0x30]).next_tlv().is_err());
        assert!(Reader::new(&[0x30, 0x05, 1, 2]).next_tlv().is_err());
        assert!(Reader::new(&[0x30, 0x85, 1, 1, 1, 1, 1])
            .next_tlv()
            .is_err());
        assert!(Reader::new(&[0x30, 0x80]).next_tlv().is_err());
        assert!(Reader::new(&[0x1f, 0x01, 0]).next_tlv().is_err());
    }

    #[test]
    fn integers_round_trip() {
        for v in [0u64, 1, 127, 128, 255, 65_535, u64::MAX] {
            assert_eq!(read_u64(&u64_contents(v)), Ok(v));
        }
        assert!(read_u64(&[0x80]).is_err(), "negative");
        assert!(read_u64(&[]).is_err());
    }
}
