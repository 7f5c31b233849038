//! RSA-OAEP with SHA-256 (label empty) under the proxy's public key; the
//! key may be in any of the three RSA variants, and decryption goes
//! through OpenSSL (`rsa-variants`), never RustCrypto `rsa` (Marvin).

use rsa_variants::{HashAlg, PrivateKey, PublicKey};

use crate::{body_for, header, id_from, Error, IdCipher, IdDecipher, Scheme};

/// Encrypts for the holder of a public key.
pub struct RsaOaep {
    key: PublicKey,
    key_id: u8,
}

impl RsaOaep {
    /// For `key`, known to the recipient as `key_id`.
    pub fn new(key: PublicKey, key_id: u8) -> Self {
        Self { key, key_id }
    }
}

impl IdCipher for RsaOaep {
    fn scheme(&self) -> Scheme {
        Scheme::RsaOaep
    }
    fn key_id(&self) -> u8 {
        self.key_id
    }
    fn encrypt(&self, id: &str) -> Result<Vec<u8>, Error> {
        let max = self.key.max_oaep_message(HashAlg::Sha256);
        if id.len() > max {
            return Err(Error::IdTooLong { len: id.len(), max });
        }
        let ct = self
            .key
            .encrypt_oaep(HashAlg::Sha256, id.as_bytes())
            .map_err(|e| Error::Key(e.to_string()))?;
        Ok([&header(Scheme::RsaOaep, self.key_id)[..], &ct].concat())
    }
}

/// Decrypts with the proxy's private key.
pub struct RsaOaepKey {
    key: PrivateKey,
    key_id: u8,
}

impl RsaOaepKey {
    /// Our private key, published as `key_id`.
    pub fn new(key: PrivateKey, key_id: u8) -> Self {
        Self { key, key_id }
    }
}

impl IdDecipher for RsaOaepKey {
    fn scheme(&self) -> Scheme {
        Scheme::RsaOaep
    }
    fn key_id(&self) -> u8 {
        self.key_id
    }
    fn decrypt(&self, raw: &[u8]) -> Result<String, Error> {
        let body = body_for(raw, Scheme::RsaOaep, self.key_id)?;
        let id = self
            .key
            .decrypt_oaep(HashAlg::Sha256, body)
            .map_err(|_| Error::Undecryptable)?;
        id_from(id)
    }
}
