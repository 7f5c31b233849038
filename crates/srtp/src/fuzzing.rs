//! Properties the fuzz targets check (the tests run them too).

use crate::{Context, Profile};

/// Unprotecting arbitrary bytes never panics; a refused packet is left as
/// it was, an accepted one loses exactly its tag. The first byte picks
/// the profile.
pub fn unprotect(data: &[u8]) {
    let Some((&pick, packet)) = data.split_first() else {
        return;
    };
    let profile = Profile::ALL[usize::from(pick) % Profile::ALL.len()];
    let key = vec![0x11; profile.key_len()];
    let Ok(mut rx) = Context::new(profile, &key, &[0x22; crate::SALT_LEN]) else {
        panic!("a valid key was refused");
    };
    let mut buf = packet.to_vec();
    match rx.unprotect(&mut buf) {
        Ok(()) => assert_eq!(buf.len() + profile.tag_len(), packet.len()),
        Err(_) => assert_eq!(buf, packet, "a refused packet must be left unchanged"),
    }
}
