//! Identity privacy after PrivaSIP: a user ID is encrypted so that only
//! the proxy that must read it can, and travels as a pseudonym that is
//! valid in a SIP URI user part and different on every message.
//!
//! A pseudonym is `version | scheme | key id | scheme output`, written in
//! hex (as published) or RFC 4648 base32 (lowercase, unpadded). The
//! schemes ([`Scheme`]):
//! - RSA-OAEP with SHA-256 under the proxy's public key, in any of the
//!   three RSA variants ([`rsa`]; decryption through OpenSSL);
//! - ECIES over P-256 ([`ecies`]);
//! - AES with a key derived from the user's digest credentials, AES-GCM
//!   by default and the published AES-CBC with ISO 10126 padding as a
//!   compatibility mode ([`aes`]);
//! - HPKE (RFC 9180) with X25519 ([`hpke`]);
//! - PrivaSIP-3 tickets: single-use pseudonyms the home proxy hands a
//!   phone at registration, sealed with AES-256-GCM-SIV under the proxy's
//!   ticket key, opened with one symmetric operation per call
//!   ([`tickets`]).
//!
//! Every failure to decrypt is the same [`Error::Undecryptable`], so a
//! proxy answering on it gives attackers no oracle.

pub mod aes;
pub mod ecies;
pub mod encoding;
pub mod fuzzing;
pub mod hpke;
pub mod kdf;
pub mod keys;
pub mod pq;
pub mod rsa;
pub mod tickets;

pub use encoding::Encoding;

/// The format version in every pseudonym.
pub const VERSION: u8 = 1;

/// How an ID was encrypted (one byte on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// RSA-OAEP-SHA256.
    RsaOaep = 1,
    /// ECIES over P-256 with HKDF-SHA256 and AES-256-GCM.
    Ecies = 2,
    /// AES-128-GCM under a key from the digest credentials.
    AesGcm = 3,
    /// AES-128-CBC with ISO 10126 padding (the published mode).
    AesCbc = 4,
    /// HPKE (RFC 9180): DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM.
    Hpke = 5,
    /// A PrivaSIP-3 ticket: AES-256-GCM-SIV under the proxy's ticket key.
    Ticket = 6,
    /// A PrivaSIP-3 callee pseudonym: a ticket of the callee's domain
    /// and the callee's ID sealed under the key inside it.
    CalleeTicket = 7,
}

impl Scheme {
    /// The scheme of a wire byte.
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(Scheme::RsaOaep),
            2 => Some(Scheme::Ecies),
            3 => Some(Scheme::AesGcm),
            4 => Some(Scheme::AesCbc),
            5 => Some(Scheme::Hpke),
            6 => Some(Scheme::Ticket),
            7 => Some(Scheme::CalleeTicket),
            _ => None,
        }
    }

    /// A short name for tables and configuration.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::RsaOaep => "rsa-oaep",
            Scheme::Ecies => "ecies-p256",
            Scheme::AesGcm => "aes-gcm",
            Scheme::AesCbc => "aes-cbc",
            Scheme::Hpke => "hpke-x25519",
            Scheme::Ticket => "ticket-aes-gcm-siv",
            Scheme::CalleeTicket => "callee-ticket-aes-gcm-siv",
        }
    }
}

/// Why an ID could not be protected or recovered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Not a pseudonym we can open: wrong key, tampered, truncated or not
    /// ours. Deliberately one value.
    #[error("the pseudonym cannot be decrypted")]
    Undecryptable,
    /// The encoded pseudonym is longer than the configured limit.
    #[error("the pseudonym would be {len} characters, over the limit of {limit}: use base32 or a smaller key")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The ID is too long for the scheme (RSA-OAEP's message limit).
    #[error("user ID of {len} bytes: at most {max} with this key")]
    IdTooLong {
        /// The ID's length.
        len: usize,
        /// The most the key takes.
        max: usize,
    },
    /// A key that cannot be used.
    #[error("{0}")]
    Key(String),
}

/// The header every pseudonym starts with.
fn header(scheme: Scheme, key_id: u8) -> [u8; 3] {
    [VERSION, scheme as u8, key_id]
}

/// Splits a raw pseudonym into scheme, key id and body.
pub fn split(raw: &[u8]) -> Result<(Scheme, u8, &[u8]), Error> {
    match raw {
        [VERSION, s, kid, body @ ..] => Ok((
            Scheme::from_byte(*s).ok_or(Error::Undecryptable)?,
            *kid,
            body,
        )),
        _ => Err(Error::Undecryptable),
    }
}

/// The shortest raw pseudonym any scheme makes (AES-GCM of an empty ID:
/// header, nonce, tag).
pub const MIN_RAW_LEN: usize = 3 + 12 + 16;

/// The raw bytes of `text` when it is shaped like a pseudonym: hex or
/// base32 of at least [`MIN_RAW_LEN`] bytes starting with our version and
/// a known scheme. A plain user name practically never is (it would have
/// to be 50+ characters of one alphabet with those first bytes).
pub fn pseudonym_bytes(text: &str) -> Option<Vec<u8>> {
    if text.len() < MIN_RAW_LEN * 8 / 5 {
        return None;
    }
    let raw = Encoding::decode_any(text)?;
    (raw.len() >= MIN_RAW_LEN && split(&raw).is_ok()).then_some(raw)
}

/// Random bytes from OpenSSL's CSPRNG.
fn random(out: &mut [u8]) -> Result<(), Error> {
    openssl::rand::rand_bytes(out).map_err(|e| Error::Key(format!("no randomness: {e}")))
}

/// Encrypts user IDs for one recipient.
pub trait IdCipher {
    /// The scheme.
    fn scheme(&self) -> Scheme;
    /// The recipient's key id.
    fn key_id(&self) -> u8;
    /// A fresh raw pseudonym for `id` (different on every call).
    fn encrypt(&self, id: &str) -> Result<Vec<u8>, Error>;
    /// A fresh pseudonym for `id`, encoded and checked against `limit`
    /// characters.
    fn pseudonym(&self, id: &str, encoding: Encoding, limit: usize) -> Result<String, Error> {
        let raw = self.encrypt(id)?;
        let text = encoding.encode(&raw);
        if text.len() > limit {
            return Err(Error::TooLong {
                len: text.len(),
                limit,
            });
        }
        Ok(text)
    }
}

/// Recovers user IDs encrypted for us.
pub trait IdDecipher {
    /// The scheme.
    fn scheme(&self) -> Scheme;
    /// Our key id.
    fn key_id(&self) -> u8;
    /// The ID inside a raw pseudonym.
    fn decrypt(&self, raw: &[u8]) -> Result<String, Error>;
    /// The ID inside an encoded pseudonym (hex or base32, either).
    fn open(&self, text: &str) -> Result<String, Error> {
        let raw = Encoding::decode_any(text).ok_or(Error::Undecryptable)?;
        self.decrypt(&raw)
    }
}

/// The body of `raw` when it names this scheme and key.
fn body_for(raw: &[u8], scheme: Scheme, key_id: u8) -> Result<&[u8], Error> {
    let (s, kid, body) = split(raw)?;
    if s != scheme || kid != key_id {
        return Err(Error::Undecryptable);
    }
    Ok(body)
}

/// An ID must be UTF-8 after decryption.
fn id_from(bytes: Vec<u8>) -> Result<String, Error> {
    String::from_utf8(bytes).map_err(|_| Error::Undecryptable)
}
