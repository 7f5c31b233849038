//! An address-of-record as the location store's table holds it. Finding
//! an AoR compares its key once; kept inside the table's entry, a short
//! key (most are: `sip:user@host`) is read from the cache line the probe
//! has just loaded, not from an allocation of its own elsewhere in
//! memory, which at a REGISTER a phone sends once an hour is rarely in
//! any cache. A change's records carry their AoR the same way, so that
//! preparing one allocates nothing for it.

/// Keys up to this many bytes are kept in the entry; the size makes
/// [`AorKey`] six words, the same as a `String` and a spare `Vec` header.
pub const INLINE: usize = 46;
// An inline key's length is a byte.
const _: () = assert!(INLINE <= u8::MAX as usize);

/// An AoR, inline when short.
#[derive(Clone)]
pub struct AorKey(Repr);

#[derive(Clone)]
enum Repr {
    /// `len` bytes of `bytes`, always a whole UTF-8 string.
    Inline { len: u8, bytes: [u8; INLINE] },
    /// A longer key.
    Heap(Box<str>),
}

impl AorKey {
    /// The key for `aor`.
    pub fn new(aor: &str) -> Self {
        if aor.len() > INLINE {
            return AorKey(Repr::Heap(aor.into()));
        }
        let mut bytes = [0; INLINE];
        bytes[..aor.len()].copy_from_slice(aor.as_bytes());
        AorKey(Repr::Inline {
            len: aor.len() as u8,
            bytes,
        })
    }

    /// Whether this is the key of `aor` (bytes only: no UTF-8 check).
    pub fn is(&self, aor: &(impl AsRef<[u8]> + ?Sized)) -> bool {
        self.as_bytes() == aor.as_ref()
    }

    /// The AoR's bytes (no UTF-8 check: what a journal line copies).
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Heap(s) => s.as_bytes(),
        }
    }

    /// The AoR's length in bytes.
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// Whether the AoR is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The AoR.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline { len, bytes } => std::str::from_utf8(&bytes[..usize::from(*len)])
                .expect("an inline key is copied whole from a str"),
            Repr::Heap(s) => s,
        }
    }
}

impl PartialEq for AorKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for AorKey {}

impl AsRef<[u8]> for AorKey {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq<str> for AorKey {
    fn eq(&self, other: &str) -> bool {
        self.is(other)
    }
}

impl PartialEq<&str> for AorKey {
    fn eq(&self, other: &&str) -> bool {
        self.is(*other)
    }
}

impl From<&str> for AorKey {
    fn from(aor: &str) -> Self {
        AorKey::new(aor)
    }
}

impl From<String> for AorKey {
    fn from(aor: String) -> Self {
        AorKey::new(&aor)
    }
}

impl std::fmt::Display for AorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for AorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_inline_long_ones_on_the_heap_and_both_read_back() {
        let short = "sip:alice@example.com";
        let edge = "x".repeat(INLINE);
        let long = format!("sip:{}@example.com", "ü".repeat(40));
        for (aor, inline) in [(short, true), (edge.as_str(), true), (long.as_str(), false)] {
            let k = AorKey::new(aor);
            assert_eq!(matches!(k.0, Repr::Inline { .. }), inline, "{aor}");
            assert_eq!(k.as_str(), aor);
            assert_eq!((k.as_bytes(), k.len()), (aor.as_bytes(), aor.len()));
            assert_eq!(k, AorKey::from(aor.to_owned()));
            assert_ne!(k, AorKey::new(&aor[1..]));
            assert!(k.is(aor));
            assert!(!k.is(&aor[..aor.len() - 1]), "a prefix is another AoR");
            assert!(!k.is(&format!("{aor}x")), "so is a longer one");
        }
        assert!(!AorKey::new("").is("a"));
        assert!(AorKey::new("").is(""));
        assert_eq!(std::mem::size_of::<AorKey>(), 48);
    }
}
