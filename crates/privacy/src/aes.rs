//! AES under a key the phone and its home proxy share without a new
//! secret: derived from the user's digest credentials. The proxy stores
//! HA1 = H(user:realm:password), never the password, so the key is
//!
//! K = HKDF-SHA256(salt = realm, ikm = HA1 as its hex text,
//!                 info = "sipsec privasip aes v1" ‖ key id), 16 bytes.
//!
//! AES-128-GCM is the default: body = nonce (12 random bytes) ‖
//! ciphertext ‖ tag, the 3-byte pseudonym header as associated data.
//! AES-128-CBC with a random IV and ISO 10126 padding (random bytes, the
//! last one the padding length) is the published mode, kept for
//! comparison only: it has no integrity, so a proxy learns of tampering
//! only when the ID does not parse.

use openssl::symm::{decrypt_aead, encrypt_aead, Cipher, Crypter, Mode};

use crate::kdf::hkdf;
use crate::{body_for, header, id_from, random, Error, IdCipher, IdDecipher, Scheme};

const INFO: &[u8] = b"sipsec privasip aes v1";

/// A user's AES key, for the phone (encrypt) and the proxy (decrypt).
pub struct AesId {
    key: [u8; 16],
    key_id: u8,
    scheme: Scheme,
}

impl std::fmt::Debug for AesId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AesId")
            .field("key_id", &self.key_id)
            .field("scheme", &self.scheme)
            .finish()
    }
}

impl AesId {
    /// The key from `ha1` (hex, as the users file stores it) and `realm`;
    /// `cbc` picks the published CBC mode instead of GCM.
    pub fn new(ha1_hex: &str, realm: &str, key_id: u8, cbc: bool) -> Result<Self, Error> {
        let mut key = [0u8; 16];
        hkdf(
            realm.as_bytes(),
            ha1_hex.as_bytes(),
            &[INFO, &[key_id]].concat(),
            &mut key,
        );
        Ok(Self {
            key,
            key_id,
            scheme: if cbc { Scheme::AesCbc } else { Scheme::AesGcm },
        })
    }

    /// GCM with a given nonce (known-answer tests).
    pub fn seal_with_nonce(&self, id: &str, nonce: [u8; 12]) -> Result<Vec<u8>, Error> {
        let head = header(Scheme::AesGcm, self.key_id);
        let mut tag = [0u8; 16];
        let ct = encrypt_aead(
            Cipher::aes_128_gcm(),
            &self.key,
            Some(&nonce),
            &head,
            id.as_bytes(),
            &mut tag,
        )
        .map_err(|e| Error::Key(e.to_string()))?;
        Ok([&head[..], &nonce, &ct, &tag].concat())
    }

    fn cbc(
        &self,
        mode: Mode,
        iv: &[u8],
        data: &[u8],
    ) -> Result<Vec<u8>, openssl::error::ErrorStack> {
        let mut c = Crypter::new(Cipher::aes_128_cbc(), mode, &self.key, Some(iv))?;
        c.pad(false);
        let mut out = vec![0u8; data.len() + 16];
        let mut n = c.update(data, &mut out)?;
        n += c.finalize(&mut out[n..])?;
        out.truncate(n);
        Ok(out)
    }
}

impl IdCipher for AesId {
    fn scheme(&self) -> Scheme {
        self.scheme
    }
    fn key_id(&self) -> u8 {
        self.key_id
    }
    fn encrypt(&self, id: &str) -> Result<Vec<u8>, Error> {
        match self.scheme {
            Scheme::AesCbc => {
                let mut iv = [0u8; 16];
                random(&mut iv)?;
                let pad = 16 - id.len() % 16;
                let mut data = id.as_bytes().to_vec();
                let mut filler = vec![0u8; pad];
                random(&mut filler)?;
                filler[pad - 1] = pad as u8;
                data.extend_from_slice(&filler);
                let ct = self
                    .cbc(Mode::Encrypt, &iv, &data)
                    .map_err(|e| Error::Key(e.to_string()))?;
                Ok([&header(Scheme::AesCbc, self.key_id)[..], &iv, &ct].concat())
            }
            _ => {
                let mut nonce = [0u8; 12];
                random(&mut nonce)?;
                self.seal_with_nonce(id, nonce)
            }
        }
    }
}

impl IdDecipher for AesId {
    fn scheme(&self) -> Scheme {
        self.scheme
    }
    fn key_id(&self) -> u8 {
        self.key_id
    }
    fn decrypt(&self, raw: &[u8]) -> Result<String, Error> {
        let body = body_for(raw, self.scheme, self.key_id)?;
        match self.scheme {
            Scheme::AesCbc => {
                if body.len() < 32 || body.len() % 16 != 0 {
                    return Err(Error::Undecryptable);
                }
                let (iv, ct) = body.split_at(16);
                let mut data = self
                    .cbc(Mode::Decrypt, iv, ct)
                    .map_err(|_| Error::Undecryptable)?;
                let pad = usize::from(*data.last().ok_or(Error::Undecryptable)?);
                if pad == 0 || pad > 16 {
                    return Err(Error::Undecryptable);
                }
                data.truncate(data.len() - pad);
                id_from(data)
            }
            _ => {
                if body.len() < 12 + 16 {
                    return Err(Error::Undecryptable);
                }
                let (nonce, rest) = body.split_at(12);
                let (ct, tag) = rest.split_at(rest.len() - 16);
                let id = decrypt_aead(
                    Cipher::aes_128_gcm(),
                    &self.key,
                    Some(nonce),
                    &raw[..3],
                    ct,
                    tag,
                )
                .map_err(|_| Error::Undecryptable)?;
                id_from(id)
            }
        }
    }
}
