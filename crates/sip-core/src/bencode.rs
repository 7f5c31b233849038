//! Bencode (the BitTorrent encoding, BEP 3), as media relays speak it over
//! their control protocols (rtpengine's NG protocol: a cookie, a space and
//! one bencoded dictionary per datagram).
//!
//! Every answer is untrusted input: [`parse`] borrows from the bytes,
//! refuses anything malformed with the offset it stopped at, and is
//! bounded in nesting depth and in the number of values, so a hostile
//! answer costs at most [`MAX_VALUES`] small allocations and never the
//! stack.

use std::fmt;

/// Deepest nesting of lists and dictionaries accepted.
pub const MAX_DEPTH: usize = 16;
/// Most values (strings, integers, lists, dictionaries) in one document.
pub const MAX_VALUES: usize = 4096;

/// One bencoded value, borrowing its strings from the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value<'a> {
    /// A byte string.
    Bytes(&'a [u8]),
    /// An integer.
    Int(i64),
    /// A list.
    List(Vec<Value<'a>>),
    /// A dictionary, in the order read (keys are byte strings).
    Dict(Vec<(&'a [u8], Value<'a>)>),
}

impl<'a> Value<'a> {
    /// The value at `key`, if this is a dictionary holding it.
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        match self {
            Value::Dict(entries) => entries
                .iter()
                .find(|(k, _)| *k == key.as_bytes())
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// This byte string as UTF-8, if it is one.
    pub fn as_str(&self) -> Option<&'a str> {
        match self {
            Value::Bytes(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The string at `key` of this dictionary.
    pub fn str_at(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(Value::as_str)
    }

    /// This integer.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// This list's items.
    pub fn as_list(&self) -> Option<&[Value<'a>]> {
        match self {
            Value::List(l) => Some(l),
            _ => None,
        }
    }
}

/// Why bytes are not one bencoded value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The input ended inside a value.
    Truncated,
    /// A byte that starts no value, or breaks one, at this offset.
    Unexpected(usize),
    /// A string length or integer that is malformed or out of range.
    BadNumber(usize),
    /// A dictionary key that is not a byte string, at this offset.
    KeyNotString(usize),
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep(usize),
    /// More than [`MAX_VALUES`] values.
    TooMany(usize),
    /// Bytes after the value, from this offset.
    Trailing(usize),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated => f.write_str("bencode: cut short"),
            Error::Unexpected(at) => write!(f, "bencode: unexpected byte at {at}"),
            Error::BadNumber(at) => write!(f, "bencode: malformed number at {at}"),
            Error::KeyNotString(at) => write!(f, "bencode: dictionary key not a string at {at}"),
            Error::TooDeep(at) => write!(f, "bencode: nested deeper than {MAX_DEPTH} at {at}"),
            Error::TooMany(at) => write!(f, "bencode: more than {MAX_VALUES} values at {at}"),
            Error::Trailing(at) => write!(f, "bencode: bytes after the value at {at}"),
        }
    }
}

impl std::error::Error for Error {}

/// Parses exactly one value filling `input`.
pub fn parse(input: &[u8]) -> Result<Value<'_>, Error> {
    let mut p = Parser {
        b: input,
        i: 0,
        values: 0,
    };
    let v = p.value(0)?;
    if p.i != input.len() {
        return Err(Error::Trailing(p.i));
    }
    Ok(v)
}

/// The byte strings at `keys` in the dictionary filling `input` (the
/// first of each; `None` where absent or not a string), or `None` when
/// the value is not a dictionary. The input is checked whole, refused as
/// [`parse`] refuses it, but nothing is built: an answer's statistics
/// cost no allocation.
pub fn dict_strings<'a, const N: usize>(
    input: &'a [u8],
    keys: [&str; N],
) -> Result<Option<[Option<&'a [u8]>; N]>, Error> {
    let mut p = Parser {
        b: input,
        i: 0,
        values: 0,
    };
    let (mut found, mut seen) = ([None; N], [false; N]);
    let dict = input.first() == Some(&b'd');
    if dict {
        p.i = 1;
        p.values = 1;
        while p.peek()? != b'e' {
            let key = p.key()?;
            let slot = keys.iter().position(|k| k.as_bytes() == key);
            match slot.filter(|k| !seen[*k]) {
                Some(k) if p.peek()?.is_ascii_digit() => {
                    seen[k] = true;
                    p.values += 1;
                    if p.values > MAX_VALUES {
                        return Err(Error::TooMany(p.i));
                    }
                    found[k] = Some(p.bytes()?);
                }
                first => {
                    if let Some(k) = first {
                        seen[k] = true;
                    }
                    p.read(1, false)?;
                }
            }
        }
        p.i += 1;
    } else {
        p.read(0, false)?;
    }
    if p.i != input.len() {
        return Err(Error::Trailing(p.i));
    }
    Ok(dict.then_some(found))
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    values: usize,
}

impl<'a> Parser<'a> {
    fn value(&mut self, depth: usize) -> Result<Value<'a>, Error> {
        Ok(self.read(depth, true)?.unwrap_or(Value::Int(0)))
    }

    /// Reads one value, building it when `build` (else only checking it
    /// and stepping over it, allocating nothing).
    fn read(&mut self, depth: usize, build: bool) -> Result<Option<Value<'a>>, Error> {
        self.values += 1;
        if self.values > MAX_VALUES {
            return Err(Error::TooMany(self.i));
        }
        let v = match self.b.get(self.i) {
            None => return Err(Error::Truncated),
            Some(b'i') => {
                self.i += 1;
                Value::Int(self.int(b'e')?)
            }
            Some(b'l') | Some(b'd') if depth >= MAX_DEPTH => return Err(Error::TooDeep(self.i)),
            Some(b'l') => {
                self.i += 1;
                let mut items = Vec::new();
                while self.peek()? != b'e' {
                    items.extend(self.read(depth + 1, build)?);
                }
                self.i += 1;
                Value::List(items)
            }
            Some(b'd') => {
                self.i += 1;
                let mut entries = Vec::new();
                while self.peek()? != b'e' {
                    let key = self.key()?;
                    if let Some(v) = self.read(depth + 1, build)? {
                        entries.push((key, v));
                    }
                }
                self.i += 1;
                Value::Dict(entries)
            }
            Some(c) if c.is_ascii_digit() => Value::Bytes(self.bytes()?),
            Some(_) => return Err(Error::Unexpected(self.i)),
        };
        Ok(build.then_some(v))
    }

    /// A dictionary's key: a byte string.
    fn key(&mut self) -> Result<&'a [u8], Error> {
        if !self.peek()?.is_ascii_digit() {
            return Err(Error::KeyNotString(self.i));
        }
        self.bytes()
    }

    fn peek(&self) -> Result<u8, Error> {
        self.b.get(self.i).copied().ok_or(Error::Truncated)
    }

    /// `LEN:BYTES`.
    fn bytes(&mut self) -> Result<&'a [u8], Error> {
        let at = self.i;
        let len = self.int(b':')?;
        let len = usize::try_from(len).map_err(|_| Error::BadNumber(at))?;
        let end = self.i.checked_add(len).ok_or(Error::BadNumber(at))?;
        let s = self.b.get(self.i..end).ok_or(Error::Truncated)?;
        self.i = end;
        Ok(s)
    }

    /// A decimal integer ended by `end`: no leading zeros, no `-0`, no
    /// sign before a string's length; read in one pass.
    fn int(&mut self, end: u8) -> Result<i64, Error> {
        let start = self.i;
        let negative = self.b.get(start) == Some(&b'-');
        let first = start + usize::from(negative);
        let mut at = first;
        let mut n: i64 = 0;
        loop {
            match self.b.get(at) {
                None => return Err(Error::Truncated),
                Some(&c) if c == end => break,
                Some(&c) if c.is_ascii_digit() => {
                    let d = i64::from(c - b'0');
                    n = n
                        .checked_mul(10)
                        .and_then(|n| {
                            if negative {
                                n.checked_sub(d)
                            } else {
                                n.checked_add(d)
                            }
                        })
                        .ok_or(Error::BadNumber(start))?;
                    at += 1;
                }
                // Malformed, unless the input ends before any `end`.
                Some(_) if !self.b[at..].contains(&end) => return Err(Error::Truncated),
                Some(_) => return Err(Error::BadNumber(start)),
            }
        }
        let digits = &self.b[first..at];
        let malformed = digits.is_empty()
            || (digits.len() > 1 && digits[0] == b'0')
            || (negative && (digits == b"0" || end == b':'));
        if malformed {
            return Err(Error::BadNumber(start));
        }
        self.i = at + 1;
        Ok(n)
    }
}

/// Writes bencoded values into a buffer.
#[derive(Debug, Default)]
pub struct Writer {
    out: Vec<u8>,
}

impl Writer {
    /// An empty document.
    pub fn new() -> Self {
        Self::default()
    }

    /// An NG datagram: `cookie`, a space, then the document, in a
    /// buffer of `capacity` bytes (grown if the document needs more).
    pub fn after_cookie(cookie: &str, capacity: usize) -> Self {
        let mut out = Vec::with_capacity(capacity.max(cookie.len() + 1));
        out.extend_from_slice(cookie.as_bytes());
        out.push(b' ');
        Self { out }
    }

    /// A byte string.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        crate::writer::write_u64(&mut self.out, b.len() as u64);
        self.out.push(b':');
        self.out.extend_from_slice(b);
        self
    }

    /// A UTF-8 string.
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.bytes(s.as_bytes())
    }

    /// An integer.
    pub fn int(&mut self, n: i64) -> &mut Self {
        self.out.push(b'i');
        if n < 0 {
            self.out.push(b'-');
        }
        crate::writer::write_u64(&mut self.out, n.unsigned_abs());
        self.out.push(b'e');
        self
    }

    /// Starts a list (close it with [`end`](Self::end)).
    pub fn list(&mut self) -> &mut Self {
        self.out.push(b'l');
        self
    }

    /// Starts a dictionary (keys with [`str`](Self::str), each followed by
    /// its value; close it with [`end`](Self::end)).
    pub fn dict(&mut self) -> &mut Self {
        self.out.push(b'd');
        self
    }

    /// Closes the innermost list or dictionary.
    pub fn end(&mut self) -> &mut Self {
        self.out.push(b'e');
        self
    }

    /// The bytes written.
    pub fn into_bytes(self) -> Vec<u8> {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ng_answer_reads_as_a_dictionary() {
        let v = parse(b"d6:result2:ok3:sdp5:v=0\r\n4:listl1:ai42eee").unwrap();
        assert_eq!(v.str_at("result"), Some("ok"));
        assert_eq!(v.str_at("sdp"), Some("v=0\r\n"));
        let list = v.get("list").and_then(Value::as_list).unwrap();
        assert_eq!(list[0].as_str(), Some("a"));
        assert_eq!(list[1].as_int(), Some(42));
        assert_eq!(v.get("missing"), None);
    }

    #[test]
    fn what_is_written_reads_back() {
        let mut w = Writer::new();
        w.dict()
            .str("command")
            .str("offer")
            .str("flags")
            .list()
            .str("trust-address")
            .end()
            .str("n")
            .int(-7)
            .end();
        let bytes = w.into_bytes();
        assert_eq!(
            bytes,
            b"d7:command5:offer5:flagsl13:trust-addresse1:ni-7ee".to_vec()
        );
        let v = parse(&bytes).unwrap();
        assert_eq!(v.str_at("command"), Some("offer"));
        let mut w = Writer::after_cookie("c1", 0);
        w.dict().str("n").int(i64::MIN).str("m").int(0).end();
        let datagram = w.into_bytes();
        assert_eq!(datagram, b"c1 d1:ni-9223372036854775808e1:mi0ee".to_vec());
        assert_eq!(
            parse(&datagram[3..])
                .unwrap()
                .get("n")
                .and_then(Value::as_int),
            Some(i64::MIN)
        );
        assert_eq!(v.get("n").and_then(Value::as_int), Some(-7));
    }

    #[test]
    fn malformed_input_is_refused_with_where() {
        for (bad, err) in [
            (&b""[..], Error::Truncated),
            (b"i42", Error::Truncated),
            (b"i4x", Error::Truncated),
            (b"i4xe", Error::BadNumber(1)),
            (b"i--1e", Error::BadNumber(1)),
            (b"i-9223372036854775809e", Error::BadNumber(1)),
            (b"-0:", Error::Unexpected(0)),
            (b"l-1:ae", Error::Unexpected(1)),
            (b"i042e", Error::BadNumber(1)),
            (b"i-0e", Error::BadNumber(1)),
            (b"ie", Error::BadNumber(1)),
            (b"i99999999999999999999e", Error::BadNumber(1)),
            (b"5:abc", Error::Truncated),
            (b"-1:a", Error::Unexpected(0)),
            (b"01:a", Error::BadNumber(0)),
            (b"99999999999999999999:a", Error::BadNumber(0)),
            (b"di1ei2ee", Error::KeyNotString(1)),
            (b"l1:a", Error::Truncated),
            (b"1:ax", Error::Trailing(3)),
            (b"x", Error::Unexpected(0)),
        ] {
            assert_eq!(parse(bad), Err(err), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn hostile_nesting_and_counts_are_bounded() {
        let deep = [b"l".repeat(MAX_DEPTH + 1), b"e".repeat(MAX_DEPTH + 1)].concat();
        assert!(matches!(parse(&deep), Err(Error::TooDeep(_))));
        let ok = [b"l".repeat(MAX_DEPTH), b"e".repeat(MAX_DEPTH)].concat();
        assert!(parse(&ok).is_ok());
        let many = [b"l".to_vec(), b"i1e".repeat(MAX_VALUES), b"e".to_vec()].concat();
        assert!(matches!(parse(&many), Err(Error::TooMany(_))));
    }

    /// [`dict_strings`] accepts and refuses what [`parse`] does, and finds
    /// what the parsed dictionary holds.
    fn agree(input: &[u8]) {
        let keys = ["a", "result", "x"];
        let strings = dict_strings(input, keys);
        match parse(input) {
            Err(e) => assert_eq!(strings, Err(e), "{:?}", String::from_utf8_lossy(input)),
            Ok(v @ Value::Dict(_)) => {
                let want = keys.map(|k| match v.get(k) {
                    Some(Value::Bytes(b)) => Some(*b),
                    _ => None,
                });
                assert_eq!(strings, Ok(Some(want)));
            }
            Ok(_) => assert_eq!(strings, Ok(None)),
        }
    }

    #[test]
    fn the_strings_of_an_answer_are_read_without_building_it() {
        let answer = b"d6:result2:ok5:statsd1:xl1:ai1eee3:sdp3:v=01:xi3e6:result5:othere";
        let [result, sdp, x] = dict_strings(answer, ["result", "sdp", "x"])
            .unwrap()
            .unwrap();
        assert_eq!(
            (result, sdp, x),
            (Some(&b"ok"[..]), Some(&b"v=0"[..]), None)
        );
        assert_eq!(dict_strings(b"l1:ae", ["a"]), Ok(None));
        let twice = dict_strings(b"d6:resulti1e6:result2:oke", ["result"]);
        assert_eq!(twice, Ok(Some([None])), "the first of a key counts");
        for bad in [
            &b"d6:result2:ok"[..],
            b"d6:result2:oke1:a",
            b"d6:resulti01ee",
            b"di1e1:ae",
        ] {
            agree(bad);
            assert!(dict_strings(bad, ["result"]).is_err());
        }
        let deep = [
            b"d1:x".to_vec(),
            b"l".repeat(MAX_DEPTH),
            b"e".repeat(MAX_DEPTH + 1),
        ]
        .concat();
        agree(&deep);
        assert!(matches!(dict_strings(&deep, ["x"]), Err(Error::TooDeep(_))));
        let many = [b"d1:al".to_vec(), b"i1e".repeat(MAX_VALUES), b"ee".to_vec()].concat();
        agree(&many);
        assert!(matches!(dict_strings(&many, ["a"]), Err(Error::TooMany(_))));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A small deterministic generator over bencode's own alphabet.
        let alphabet = b"ilde0123456789:-ax";
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let mut input = Vec::new();
            for _ in 0..(x % 24) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                input.push(alphabet[(x % alphabet.len() as u64) as usize]);
            }
            agree(&input);
            x = x.wrapping_add(1);
        }
    }
}
