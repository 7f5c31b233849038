//! What each source holds of a table every party shares, so that one
//! party cannot fill it and shut the others out: a count per source (an
//! IPv4 address or IPv6 prefix, [`SourceKey`]) against a cap. The lock
//! of a source's shard is a leaf: taken inside a table's own lock, never
//! around another.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::proto::guard::SourceKey;
use crate::shards::Shards;

const SHARDS: usize = 16;

/// Amounts held per source, each at most `cap`.
#[derive(Debug)]
pub struct SourceShares {
    held: Shards<HashMap<SourceKey, u64>>,
    cap: u64,
}

/// The shard of `source`: its address's bytes folded (not keyed: a party
/// that picks addresses of one shard costs the others only a wait).
fn shard_of(source: &SourceKey) -> usize {
    let fold = |bytes: &[u8]| {
        bytes
            .iter()
            .fold(0usize, |h, b| h.wrapping_mul(31) ^ usize::from(*b))
    };
    match source.ip {
        IpAddr::V4(a) => fold(&a.octets()),
        IpAddr::V6(a) => fold(&a.octets()),
    }
}

impl SourceShares {
    /// Nothing held; each source may hold up to `cap`.
    pub fn new(cap: u64) -> Self {
        Self {
            held: Shards::new(SHARDS, HashMap::new),
            cap,
        }
    }

    /// What `source` holds now.
    pub fn held(&self, source: SourceKey) -> u64 {
        let s = self.held.lock(shard_of(&source));
        s.get(&source).copied().unwrap_or(0)
    }

    /// Whether `source` holds less than its cap.
    pub fn has_room(&self, source: SourceKey) -> bool {
        self.held(source) < self.cap
    }

    /// `source` holds `up` more and `down` less than before.
    pub fn change(&self, source: SourceKey, up: u64, down: u64) {
        if up == down {
            return;
        }
        let mut s = self.held.lock(shard_of(&source));
        let now = s.get(&source).copied().unwrap_or(0) + up;
        match now.saturating_sub(down) {
            0 => s.remove(&source),
            n => s.insert(source, n),
        };
    }

    /// Sources holding anything (for tests and the operator's view).
    pub fn sources(&self) -> usize {
        self.held.each().map(|s| s.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_source_holds_its_own_amount_up_to_its_cap_and_gives_it_back() {
        let shares = SourceShares::new(100);
        let a = SourceKey::of([192, 0, 2, 1].into(), 64);
        let b = SourceKey::of("2001:db8::1".parse().unwrap(), 64);
        assert!(shares.has_room(a));
        shares.change(a, 100, 0);
        assert!(!shares.has_room(a));
        assert!(shares.has_room(b), "per source");
        shares.change(a, 0, 30);
        assert_eq!(shares.held(a), 70);
        assert!(shares.has_room(a));
        shares.change(b, 5, 0);
        assert_eq!(shares.sources(), 2);
        shares.change(a, 0, 70);
        shares.change(b, 0, 9);
        assert_eq!(shares.sources(), 0, "nothing held, nothing kept");
    }
}
