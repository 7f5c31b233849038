//! Lexical rules shared by every header parser (RFC 3261 §25.1).
//!
//! Within a header field value, CR and LF only occur as part of folding
//! (`CRLF 1*WSP`), because the line splitter rejects any other use. The
//! cursor therefore treats SP, HT, CR and LF alike as linear white space.

/// Character classes as bit flags in one table lookup.
const TOKEN: u8 = 1; // alphanum / "-" / "." / "!" / "%" / "*" / "_" / "+" / "`" / "'" / "~"
const UNRESERVED: u8 = 2; // alphanum / mark
const WORD: u8 = 4; // Call-ID word characters
const LWS: u8 = 8;
const HEX: u8 = 16;
const USER: u8 = 32; // unreserved / & = + $ , ; ? /
const PARAM: u8 = 64; // unreserved / [ ] / : & + $
const PASSWORD: u8 = 128; // unreserved / & = + $ ,

const fn class_table() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let c = i as u8;
        let alnum = c.is_ascii_alphanumeric();
        let mut f = 0;
        if alnum
            || matches!(
                c,
                b'-' | b'.' | b'!' | b'%' | b'*' | b'_' | b'+' | b'`' | b'\'' | b'~'
            )
        {
            f |= TOKEN;
        }
        if alnum
            || matches!(
                c,
                b'-' | b'_' | b'.' | b'!' | b'~' | b'*' | b'\'' | b'(' | b')'
            )
        {
            f |= UNRESERVED;
        }
        if alnum
            || matches!(
                c,
                b'-' | b'.'
                    | b'!'
                    | b'%'
                    | b'*'
                    | b'_'
                    | b'+'
                    | b'`'
                    | b'\''
                    | b'~'
                    | b'('
                    | b')'
                    | b'<'
                    | b'>'
                    | b':'
                    | b'\\'
                    | b'"'
                    | b'/'
                    | b'['
                    | b']'
                    | b'?'
                    | b'{'
                    | b'}'
            )
        {
            f |= WORD;
        }
        if matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
            f |= LWS;
        }
        if c.is_ascii_hexdigit() {
            f |= HEX;
        }
        let unreserved = alnum
            || matches!(
                c,
                b'-' | b'_' | b'.' | b'!' | b'~' | b'*' | b'\'' | b'(' | b')'
            );
        if unreserved || matches!(c, b'&' | b'=' | b'+' | b'$' | b',' | b';' | b'?' | b'/') {
            f |= USER;
        }
        if unreserved || matches!(c, b'[' | b']' | b'/' | b':' | b'&' | b'+' | b'$') {
            f |= PARAM;
        }
        if unreserved || matches!(c, b'&' | b'=' | b'+' | b'$' | b',') {
            f |= PASSWORD;
        }
        t[i] = f;
        i += 1;
    }
    t
}

static CLASS: [u8; 256] = class_table();

/// `token` character (RFC 3261 §25.1).
#[inline]
pub(crate) fn is_token(b: u8) -> bool {
    CLASS[b as usize] & TOKEN != 0
}

/// `unreserved` character (RFC 3261 §25.1).
#[inline]
pub(crate) fn is_unreserved(b: u8) -> bool {
    CLASS[b as usize] & UNRESERVED != 0
}

/// URI `user` character (RFC 3261 §25.1), escapes aside.
#[inline]
pub(crate) fn is_user_char(b: u8) -> bool {
    CLASS[b as usize] & USER != 0
}

/// URI `paramchar` (RFC 3261 §25.1), escapes aside.
#[inline]
pub(crate) fn is_param_char(b: u8) -> bool {
    CLASS[b as usize] & PARAM != 0
}

/// URI `password` character (RFC 3261 §25.1), escapes aside.
#[inline]
pub(crate) fn is_password_char(b: u8) -> bool {
    CLASS[b as usize] & PASSWORD != 0
}

/// `word` character, as used by Call-ID (RFC 3261 §25.1).
#[inline]
pub(crate) fn is_word(b: u8) -> bool {
    CLASS[b as usize] & WORD != 0
}

/// Linear white space inside a (possibly folded) header value.
#[inline]
pub(crate) fn is_lws(b: u8) -> bool {
    CLASS[b as usize] & LWS != 0
}

/// Hexadecimal digit.
#[inline]
pub(crate) fn is_hex(b: u8) -> bool {
    CLASS[b as usize] & HEX != 0
}

/// How many bytes of `b` are `token` characters, from the start. Out of
/// line on purpose: inlined into the message parser, LLVM carried every
/// offset later derived from the index through the loop, 15 instructions
/// a byte where this loop takes 4.
#[inline(never)]
pub(crate) fn token_len(b: &[u8]) -> usize {
    b.iter().position(|&c| !is_token(c)).unwrap_or(b.len())
}

/// True when `s` is a non-empty `token`.
pub(crate) fn is_token_str(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_token)
}

/// Checks that every `%` in `s` starts a `%HEXHEX` escape and every other
/// byte satisfies `allowed`.
pub(crate) fn check_escaped(s: &str, allowed: impl Fn(u8) -> bool) -> Result<(), usize> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'%' {
            if i + 2 >= b.len() || !(is_hex(b[i + 1]) && is_hex(b[i + 2])) {
                return Err(i);
            }
            i += 3;
        } else if allowed(c) {
            i += 1;
        } else {
            return Err(i);
        }
    }
    Ok(())
}

/// Parses a decimal number of at most `u64` range; `None` on overflow,
/// empty input or a non-digit.
pub(crate) fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &c in s.as_bytes() {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(v)
}

/// Where the ASCII byte `b` first occurs in `s` (a character boundary):
/// `str::find` with a `char` walks a searcher that costs several times
/// a vector search on the short values a message's fields hold.
#[inline]
pub(crate) fn find_byte(s: &str, b: u8) -> Option<usize> {
    debug_assert!(b.is_ascii());
    memchr::memchr(b, s.as_bytes())
}

/// Removes leading and trailing linear white space (out of line for the
/// reason [`token_len`] is).
#[inline(never)]
pub(crate) fn trim_lws(s: &str) -> &str {
    let b = s.as_bytes();
    let mut start = 0;
    let mut end = b.len();
    while start < end && is_lws(b[start]) {
        start += 1;
    }
    while end > start && is_lws(b[end - 1]) {
        end -= 1;
    }
    // Only ASCII bytes were skipped, so both ends are character boundaries.
    &s[start..end]
}

/// Byte offset of `inner` within `outer`; both must borrow the same buffer.
#[inline]
pub(crate) fn offset_in(outer: &str, inner: &str) -> usize {
    (inner.as_ptr() as usize).wrapping_sub(outer.as_ptr() as usize)
}

/// A forward-only cursor over one header value.
///
/// `base` is the offset of the value within the message, so errors can
/// report absolute positions.
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    s: &'a str,
    pos: usize,
    base: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(s: &'a str, base: usize) -> Self {
        Self { s, pos: 0, base }
    }

    /// Absolute offset of the cursor.
    pub(crate) fn offset(&self) -> usize {
        self.base + self.pos
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn set_pos(&mut self, pos: usize) {
        self.pos = pos;
    }

    pub(crate) fn src(&self) -> &'a str {
        self.s
    }

    pub(crate) fn rest(&self) -> &'a str {
        &self.s[self.pos..]
    }

    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.s.len()
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.pos).copied()
    }

    /// Skips linear white space; returns whether any was skipped.
    pub(crate) fn skip_lws(&mut self) -> bool {
        let start = self.pos;
        let b = self.s.as_bytes();
        while self.pos < b.len() && is_lws(b[self.pos]) {
            self.pos += 1;
        }
        self.pos != start
    }

    /// Consumes `c` if it is next.
    pub(crate) fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Consumes `SWS c SWS` (RFC 3261 §25.1 separators such as SEMI, COMMA,
    /// EQUAL, SLASH); on failure leaves the cursor where it was.
    pub(crate) fn eat_sep(&mut self, c: u8) -> bool {
        let save = self.pos;
        self.skip_lws();
        if self.eat(c) {
            self.skip_lws();
            true
        } else {
            self.pos = save;
            false
        }
    }

    /// Consumes the longest run of bytes satisfying `pred`.
    pub(crate) fn take_while(&mut self, pred: impl Fn(u8) -> bool) -> &'a str {
        let start = self.pos;
        let b = self.s.as_bytes();
        while self.pos < b.len() && pred(b[self.pos]) {
            self.pos += 1;
        }
        // Only ASCII bytes satisfy the predicates used with this method, so
        // the slice boundaries fall on character boundaries.
        &self.s[start..self.pos]
    }

    /// Consumes a non-empty token.
    pub(crate) fn token(&mut self) -> Option<&'a str> {
        let t = self.take_while(is_token);
        (!t.is_empty()).then_some(t)
    }

    /// Consumes a `quoted-string` and returns its inner text with escapes
    /// left in place. `Err` carries the offset of the unterminated quote.
    pub(crate) fn quoted(&mut self) -> Result<&'a str, usize> {
        let open = self.pos;
        if !self.eat(b'"') {
            return Err(self.base + open);
        }
        let b = self.s.as_bytes();
        let start = self.pos;
        while self.pos < b.len() {
            match b[self.pos] {
                b'"' => {
                    let inner = &self.s[start..self.pos];
                    self.pos += 1;
                    return Ok(inner);
                }
                b'\\' => {
                    // quoted-pair = "\" (%x00-09 / %x0B-0C / %x0E-7F)
                    match b.get(self.pos + 1) {
                        Some(&n) if n <= 0x7f && n != b'\r' && n != b'\n' => self.pos += 2,
                        _ => return Err(self.base + self.pos),
                    }
                }
                _ => self.pos += 1,
            }
        }
        Err(self.base + open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_checked() {
        assert!(check_escaped("a%20b", is_unreserved).is_ok());
        assert_eq!(check_escaped("a%2", is_unreserved), Err(1));
        assert_eq!(check_escaped("a%zz", is_unreserved), Err(1));
        assert_eq!(check_escaped("%", is_unreserved), Err(0));
        assert_eq!(check_escaped("a b", is_unreserved), Err(1));
    }

    #[test]
    fn quoted_strings_honour_escapes() {
        let mut c = Cursor::new(r#""a \"b\" c" rest"#, 0);
        assert_eq!(c.quoted(), Ok(r#"a \"b\" c"#));
        assert_eq!(c.rest(), " rest");
        assert!(Cursor::new(r#""open"#, 0).quoted().is_err());
        assert!(Cursor::new(r#""bad \"#, 0).quoted().is_err());
    }

    #[test]
    fn numbers_reject_overflow() {
        assert_eq!(parse_u64("0068"), Some(68));
        assert_eq!(parse_u64("36893488147419103232"), None);
        assert_eq!(parse_u64("-1"), None);
        assert_eq!(parse_u64(""), None);
    }
}
