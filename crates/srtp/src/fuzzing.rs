//! Properties the fuzz targets check (the tests run them too).

use crate::{Context, MasterKey, Options, Profile};

/// Unprotecting arbitrary bytes never panics; a refused packet is left as
/// it was, an accepted one loses exactly its overhead. The first byte
/// picks the profile (low 3 bits), a 4-byte MKI (bit 6) and SRTCP
/// instead of SRTP (bit 7).
pub fn unprotect(data: &[u8]) {
    let Some((&pick, packet)) = data.split_first() else {
        return;
    };
    let profile = Profile::ALL[usize::from(pick & 0x07)];
    let key = vec![0x11; profile.key_len()];
    let salt = vec![0x22; profile.salt_len()];
    let mki: &[u8] = if pick & 0x40 != 0 { &[0, 0, 0, 1] } else { &[] };
    let master = MasterKey {
        key: &key,
        salt: &salt,
        mki,
    };
    let Ok(mut rx) = Context::with_keys(profile, &[master], Options::default()) else {
        panic!("a valid key was refused");
    };
    let mut buf = packet.to_vec();
    let (result, overhead) = if pick & 0x80 != 0 {
        (rx.unprotect_rtcp(&mut buf), rx.rtcp_overhead())
    } else {
        (rx.unprotect(&mut buf), rx.rtp_overhead())
    };
    match result {
        Ok(()) => assert_eq!(buf.len() + overhead, packet.len()),
        Err(_) => assert_eq!(buf, packet, "a refused packet must be left unchanged"),
    }
}
