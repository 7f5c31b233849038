//! The SRTP key derivation (RFC 3711 §4.3; RFC 6188 §7 for AES-192/256):
//! session keys are AES-CM keystream under the master key, with the
//! counter block made from the master salt, a label and index DIV kdr.

use crate::cipher::Aes;
use crate::error::Error;
use crate::SALT_LEN;

/// What a derived key is for (RFC 3711 §4.3.2, §4.3.1 labels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    /// SRTP encryption key (0x00).
    RtpEncryption = 0x00,
    /// SRTP authentication key (0x01).
    RtpAuthentication = 0x01,
    /// SRTP salting key (0x02).
    RtpSalt = 0x02,
    /// SRTCP encryption key (0x03).
    RtcpEncryption = 0x03,
    /// SRTCP authentication key (0x04).
    RtcpAuthentication = 0x04,
    /// SRTCP salting key (0x05).
    RtcpSalt = 0x05,
}

/// Fills `out` with the key for `label` and `r` = index DIV kdr (0 when
/// the rate is 0), from a master key and master salt: 14 bytes for
/// AES-CM, 12 for AES-GCM (zero-padded to 14, as libsrtp does; RFC 7714
/// §11 keeps the RFC 3711 PRF).
pub fn derive(
    master_key: &[u8],
    master_salt: &[u8],
    label: Label,
    r: u64,
    out: &mut [u8],
) -> Result<(), Error> {
    let salt = padded_salt(master_salt)?;
    derive_with(&Aes::new(master_key)?, &salt, label, r, out);
    Ok(())
}

/// A 12- or 14-byte master salt, zero-padded to 14.
pub(crate) fn padded_salt(master_salt: &[u8]) -> Result<[u8; SALT_LEN], Error> {
    if master_salt.len() != SALT_LEN && master_salt.len() != 12 {
        return Err(Error::BadKey(format!(
            "the master salt is 14 bytes (AES-CM) or 12 (AES-GCM), not {}",
            master_salt.len()
        )));
    }
    let mut salt = [0u8; SALT_LEN];
    salt[..master_salt.len()].copy_from_slice(master_salt);
    Ok(salt)
}

pub(crate) fn derive_with(
    prf: &Aes,
    master_salt: &[u8; SALT_LEN],
    label: Label,
    r: u64,
    out: &mut [u8],
) {
    // key_id = label || r (48 bits), right-aligned against the salt;
    // x = key_id XOR master_salt; the PRF input is x * 2^16.
    let mut iv = [0u8; 16];
    iv[..SALT_LEN].copy_from_slice(master_salt);
    iv[7] ^= label as u8;
    for (d, s) in iv[8..14].iter_mut().zip(&r.to_be_bytes()[2..]) {
        *d ^= s;
    }
    out.fill(0);
    prf.apply_keystream(&iv, out);
}
