//! The primitives under the transforms: AES in counter mode (RFC 3711
//! §4.1.1), HMAC-SHA1 (§4.2.1) and AES-GCM (RFC 7714).

use aes::cipher::{BlockEncrypt, KeyInit};
use aes_gcm::aead::AeadInPlace;
use hmac::Hmac;
use sha1::Sha1;

use crate::error::Error;
use crate::SALT_LEN;

/// HMAC-SHA1 session authentication key length (160 bits).
pub const AUTH_KEY_LEN: usize = 20;

/// AES with the key length the profile asks for.
#[derive(Clone)]
pub(crate) enum Aes {
    A128(Box<aes::Aes128>),
    A192(Box<aes::Aes192>),
    A256(Box<aes::Aes256>),
}

pub(crate) fn bad_key(what: &str, len: usize) -> Error {
    Error::BadKey(format!("{what} of {len} bytes"))
}

impl Aes {
    pub(crate) fn new(key: &[u8]) -> Result<Self, Error> {
        let bad = || bad_key("AES key", key.len());
        Ok(match key.len() {
            16 => Aes::A128(Box::new(
                aes::Aes128::new_from_slice(key).map_err(|_| bad())?,
            )),
            24 => Aes::A192(Box::new(
                aes::Aes192::new_from_slice(key).map_err(|_| bad())?,
            )),
            32 => Aes::A256(Box::new(
                aes::Aes256::new_from_slice(key).map_err(|_| bad())?,
            )),
            _ => return Err(bad()),
        })
    }

    fn encrypt_blocks(&self, blocks: &mut [aes::Block]) {
        match self {
            Aes::A128(c) => c.encrypt_blocks(blocks),
            Aes::A192(c) => c.encrypt_blocks(blocks),
            Aes::A256(c) => c.encrypt_blocks(blocks),
        }
    }

    /// XORs `data` with the AES-CM keystream starting at counter block
    /// `iv` (RFC 3711 §4.1.1: block j is E(k, IV + j); the low 16 bits of
    /// IV are zero, so the counter fits there).
    pub(crate) fn apply_keystream(&self, iv: &[u8; 16], data: &mut [u8]) {
        const BATCH: usize = 8;
        let mut blocks = [aes::Block::default(); BATCH];
        let mut counter: u16 = 0;
        for chunk in data.chunks_mut(16 * BATCH) {
            let n = chunk.len().div_ceil(16);
            for b in blocks.iter_mut().take(n) {
                b.copy_from_slice(iv);
                let low = u16::from_be_bytes([iv[14], iv[15]]).wrapping_add(counter);
                b[14..].copy_from_slice(&low.to_be_bytes());
                counter = counter.wrapping_add(1);
            }
            self.encrypt_blocks(&mut blocks[..n]);
            for (d, k) in chunk.chunks_mut(16).zip(blocks.iter()) {
                for (x, y) in d.iter_mut().zip(k.iter()) {
                    *x ^= y;
                }
            }
        }
    }
}

/// AES-GCM with a 12-byte nonce and a 16-byte tag.
#[derive(Clone)]
pub(crate) enum Gcm {
    G128(Box<aes_gcm::Aes128Gcm>),
    G256(Box<aes_gcm::Aes256Gcm>),
}

/// AES-GCM tag length (RFC 7714 §14.2: 16 octets).
pub(crate) const GCM_TAG_LEN: usize = 16;

impl Gcm {
    pub(crate) fn new(key: &[u8]) -> Result<Self, Error> {
        let bad = || bad_key("AES-GCM key", key.len());
        Ok(match key.len() {
            16 => Gcm::G128(Box::new(
                aes_gcm::Aes128Gcm::new_from_slice(key).map_err(|_| bad())?,
            )),
            32 => Gcm::G256(Box::new(
                aes_gcm::Aes256Gcm::new_from_slice(key).map_err(|_| bad())?,
            )),
            _ => return Err(bad()),
        })
    }

    /// Encrypts `data` in place and returns the tag.
    pub(crate) fn seal(&self, nonce: &[u8; 12], aad: &[u8], data: &mut [u8]) -> [u8; 16] {
        let nonce = aes_gcm::Nonce::from_slice(nonce);
        let tag = match self {
            Gcm::G128(c) => c.encrypt_in_place_detached(nonce, aad, data),
            Gcm::G256(c) => c.encrypt_in_place_detached(nonce, aad, data),
        };
        // Only inputs over 2^36 bytes fail, far beyond any RTP packet.
        tag.map(Into::into).unwrap_or([0; 16])
    }

    /// Verifies `tag` and decrypts `data` in place; on failure `data` is
    /// left as it was (the tag is checked before decryption).
    pub(crate) fn open(&self, nonce: &[u8; 12], aad: &[u8], data: &mut [u8], tag: &[u8]) -> bool {
        let nonce = aes_gcm::Nonce::from_slice(nonce);
        let tag = aes_gcm::Tag::from_slice(tag);
        match self {
            Gcm::G128(c) => c.decrypt_in_place_detached(nonce, aad, data, tag),
            Gcm::G256(c) => c.decrypt_in_place_detached(nonce, aad, data, tag),
        }
        .is_ok()
    }
}

/// The session transform of one epoch.
#[derive(Clone)]
pub(crate) enum Transform {
    /// AES-CM encryption with an HMAC-SHA1 tag.
    Cm { cipher: Aes, mac: Box<Hmac<Sha1>> },
    /// AES-GCM.
    Gcm(Gcm),
}

/// AES-CM IV (RFC 3711 §4.1.1): (k_s * 2^16) XOR (SSRC * 2^64) XOR
/// (i * 2^16).
pub(crate) fn cm_iv(salt: &[u8; SALT_LEN], ssrc: u32, index: u64) -> [u8; 16] {
    let mut iv = [0u8; 16];
    iv[..SALT_LEN].copy_from_slice(salt);
    for (d, s) in iv[4..8].iter_mut().zip(ssrc.to_be_bytes()) {
        *d ^= s;
    }
    for (d, s) in iv[8..14].iter_mut().zip(&index.to_be_bytes()[2..]) {
        *d ^= s;
    }
    iv
}

/// AES-GCM IV (RFC 7714 §8.1, §9.1): 00 00 | SSRC | `tail` XOR salt,
/// where the tail is ROC | SEQ for SRTP and 00 00 | index for SRTCP.
pub(crate) fn gcm_iv(salt: &[u8; SALT_LEN], ssrc: u32, tail: [u8; 6]) -> [u8; 12] {
    let mut iv = [0u8; 12];
    iv[2..6].copy_from_slice(&ssrc.to_be_bytes());
    iv[6..].copy_from_slice(&tail);
    for (d, s) in iv.iter_mut().zip(salt) {
        *d ^= s;
    }
    iv
}
