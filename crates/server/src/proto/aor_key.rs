//! An address-of-record as the location store's table holds it. Finding
//! an AoR compares its key once; kept inside the table's entry, a short
//! key (most are: `sip:user@host`) is read from the cache line the probe
//! has just loaded, not from an allocation of its own elsewhere in
//! memory, which at a REGISTER a phone sends once an hour is rarely in
//! any cache.

/// Keys up to this many bytes are kept in the entry; the size makes
/// [`AorKey`] six words, the same as a `String` and a spare `Vec` header.
pub const INLINE: usize = 46;
// An inline key's length is a byte.
const _: () = assert!(INLINE <= u8::MAX as usize);

/// An AoR, inline when short.
#[derive(Clone)]
pub enum AorKey {
    /// `len` bytes of `bytes`, always a whole UTF-8 string.
    Inline { len: u8, bytes: [u8; INLINE] },
    /// A longer key.
    Heap(Box<str>),
}

impl AorKey {
    /// The key for `aor`.
    pub fn new(aor: &str) -> Self {
        if aor.len() > INLINE {
            return AorKey::Heap(aor.into());
        }
        let mut bytes = [0; INLINE];
        bytes[..aor.len()].copy_from_slice(aor.as_bytes());
        AorKey::Inline {
            len: aor.len() as u8,
            bytes,
        }
    }

    /// Whether this is the key of `aor` (bytes only: no UTF-8 check).
    pub fn is(&self, aor: &str) -> bool {
        match self {
            AorKey::Inline { len, bytes } => &bytes[..usize::from(*len)] == aor.as_bytes(),
            AorKey::Heap(s) => **s == *aor,
        }
    }

    /// The AoR.
    pub fn as_str(&self) -> &str {
        match self {
            AorKey::Inline { len, bytes } => std::str::from_utf8(&bytes[..usize::from(*len)])
                .expect("an inline key is copied whole from a str"),
            AorKey::Heap(s) => s,
        }
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
            assert_eq!(matches!(k, AorKey::Inline { .. }), inline, "{aor}");
            assert_eq!(k.as_str(), aor);
            assert!(k.is(aor));
            assert!(!k.is(&aor[..aor.len() - 1]), "a prefix is another AoR");
            assert!(!k.is(&format!("{aor}x")), "so is a longer one");
        }
        assert!(!AorKey::new("").is("a"));
        assert!(AorKey::new("").is(""));
        assert_eq!(std::mem::size_of::<AorKey>(), 48);
    }
}
