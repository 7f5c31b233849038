//! Properties the fuzz target (`fuzz/fuzz_targets/privasip_tickets.rs`)
//! and the property tests check: whatever a peer sends where a
//! PrivaSIP-3 ticket, a ticket batch or an enrollment goes, the readers
//! return an error or a value, never panic — and nothing but what this
//! proxy sealed opens.

use crate::tickets::{accept, open_batch, TicketKeys};
use crate::{hpke::HpkeKey, pseudonym_bytes, Encoding};

/// A fixed ticket key, user key and HPKE key, as a proxy would hold.
fn keys() -> (TicketKeys, [u8; 32], HpkeKey) {
    let keys = TicketKeys::new((1, &[3u8; 32]), Some((0, &[4u8; 32]))).expect("a fixed key");
    let hpke = HpkeKey::new([5u8; 32], 1).expect("a fixed key");
    (keys, [6u8; 32], hpke)
}

/// `data` as a ticket, a ticket batch, an enrollment, and as header text.
pub fn tickets(data: &[u8]) {
    let (keys, k_u, hpke) = keys();
    let _ = keys.open(data);
    let _ = keys.open_callee(data);
    let _ = crate::tickets::seal_callee(data, "bob");
    let _ = open_batch(&k_u, data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = accept(&hpke, None, text, "alice");
        let _ = crate::tickets::enrollment_key_id(text);
        if let Some(raw) = pseudonym_bytes(text) {
            let _ = keys.open(&raw);
            let _ = keys.open_callee(&raw);
        }
        if let Some(raw) = Encoding::decode_any(text) {
            let _ = open_batch(&k_u, &raw);
        }
    }
}

/// A callee pseudonym sealed under a domain ticket of this key, with
/// byte `at` set to `byte` and cut after `cut` bytes: it opens only when
/// unchanged.
pub fn mutated_callee(at: usize, byte: u8, cut: usize) -> bool {
    let (keys, _, _) = keys();
    let entry = keys.issue_domain(42).expect("issue");
    let t = crate::tickets::seal_callee(&entry, "bob").expect("seal");
    let mut m = t.clone();
    let i = at % m.len();
    m[i] = byte;
    m.truncate(cut.max(i + 1));
    match keys.open_callee(&m) {
        Ok(opened) => m == t && opened.id == "bob",
        Err(_) => m != t,
    }
}

/// A ticket this key issued, with byte `at` set to `byte` and cut after
/// `cut` bytes: it opens only when unchanged.
pub fn mutated_ticket(at: usize, byte: u8, cut: usize) -> bool {
    let (keys, _, _) = keys();
    let t = keys.issue("alice", 42).expect("issue");
    let mut m = t.clone();
    let i = at % m.len();
    m[i] = byte;
    m.truncate(cut.max(i + 1));
    match keys.open(&m) {
        Ok(opened) => m == t && opened.id == "alice",
        Err(_) => m != t,
    }
}
