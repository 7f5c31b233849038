//! Properties the fuzz targets (`fuzz/fuzz_targets/identity.rs`,
//! `passport.rs`) and the property tests check: whatever a peer sends,
//! the Identity header, PASSporT and TNAuthList readers return an error
//! or a value, never panic.

use crate::cert::parse_tn_auth_list;
use crate::{IdentityHeader, Passport};

/// The Identity header reader, and the PASSporT in what it accepts.
pub fn identity(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(h) = IdentityHeader::parse(s) {
        let _ = Passport::decode(h.token);
    }
}

/// The PASSporT decoder, and the TNAuthList reader on the same bytes.
pub fn passport(data: &[u8]) {
    let _ = parse_tn_auth_list(data);
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = Passport::decode(s) {
        let _ = p.claims.orig.tn.as_deref().map(crate::tn::normalise);
    }
}
