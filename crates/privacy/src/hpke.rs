//! HPKE (RFC 9180), base mode, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256,
//! AES-128-GCM — the modern scheme none of the published implementations
//! had. Built on OpenSSL's X25519, HKDF (extract and expand separately)
//! and AES-GCM: Debian's OpenSSL 3.0 has no HPKE of its own.
//!
//! A pseudonym's body is enc (32 bytes) ‖ ciphertext ‖ tag, sealed once
//! (sequence 0) with info "sipsec privasip hpke v1" and the 3-byte header
//! as associated data.

use openssl::derive::Deriver;
use openssl::pkey::{Id, PKey, Private};
use openssl::symm::{decrypt_aead, encrypt_aead, Cipher};

use crate::{body_for, header, id_from, kdf, random, Error, IdCipher, IdDecipher, Scheme};

const KEM_ID: u16 = 0x0020;
const KDF_ID: u16 = 0x0001;
const AEAD_ID: u16 = 0x0001;
const INFO: &[u8] = b"sipsec privasip hpke v1";

fn err(e: openssl::error::ErrorStack) -> Error {
    Error::Key(e.to_string())
}

fn labeled_extract(suite: &[u8], salt: &[u8], label: &[u8], ikm: &[u8]) -> [u8; 32] {
    kdf::extract(salt, &[b"HPKE-v1", suite, label, ikm])
}

fn labeled_expand(suite: &[u8], prk: &[u8], label: &[u8], info: &[u8], out: &mut [u8]) {
    let len = (out.len() as u16).to_be_bytes();
    kdf::expand(prk, &[&len, b"HPKE-v1", suite, label, info], out);
}

fn kem_suite() -> Vec<u8> {
    [b"KEM".as_slice(), &KEM_ID.to_be_bytes()].concat()
}

fn hpke_suite() -> Vec<u8> {
    [
        b"HPKE".as_slice(),
        &KEM_ID.to_be_bytes(),
        &KDF_ID.to_be_bytes(),
        &AEAD_ID.to_be_bytes(),
    ]
    .concat()
}

/// A raw X25519 private key as an OpenSSL key. Importing it computes the
/// public key (one scalar multiplication): do it once per key.
fn private_key(private: &[u8; 32]) -> Result<PKey<Private>, Error> {
    PKey::private_key_from_raw_bytes(private, Id::X25519).map_err(err)
}

/// The raw public half of an X25519 key.
fn raw_public(sk: &PKey<Private>) -> Result<[u8; 32], Error> {
    let raw = sk.raw_public_key().map_err(err)?;
    raw.try_into()
        .map_err(|_| Error::Key("X25519 public key length".into()))
}

/// X25519 of a private key and a raw public key.
fn dh(sk: &PKey<Private>, public: &[u8]) -> Result<Vec<u8>, Error> {
    let pk =
        PKey::public_key_from_raw_bytes(public, Id::X25519).map_err(|_| Error::Undecryptable)?;
    let mut d = Deriver::new(sk).map_err(err)?;
    d.set_peer(&pk).map_err(|_| Error::Undecryptable)?;
    d.derive_to_vec().map_err(|_| Error::Undecryptable)
}

/// The raw X25519 public key of a raw private key.
pub fn public_of(private: &[u8; 32]) -> Result<[u8; 32], Error> {
    raw_public(&private_key(private)?)
}

fn shared_secret(dh_out: &[u8], enc: &[u8], pk_r: &[u8]) -> [u8; 32] {
    let suite = kem_suite();
    let eae_prk = labeled_extract(&suite, &[], b"eae_prk", dh_out);
    let mut shared = [0u8; 32];
    labeled_expand(
        &suite,
        &eae_prk,
        b"shared_secret",
        &[enc, pk_r].concat(),
        &mut shared,
    );
    shared
}

/// The base-mode key schedule (RFC 9180 §5.1): AEAD key and base nonce.
pub fn key_schedule(shared: &[u8], info: &[u8]) -> ([u8; 16], [u8; 12]) {
    let suite = hpke_suite();
    let psk_id_hash = labeled_extract(&suite, &[], b"psk_id_hash", &[]);
    let info_hash = labeled_extract(&suite, &[], b"info_hash", info);
    let context = [&[0u8][..], &psk_id_hash, &info_hash].concat();
    let secret = labeled_extract(&suite, shared, b"secret", &[]);
    let mut key = [0u8; 16];
    let mut nonce = [0u8; 12];
    labeled_expand(&suite, &secret, b"key", &context, &mut key);
    labeled_expand(&suite, &secret, b"base_nonce", &context, &mut nonce);
    (key, nonce)
}

/// Single-shot seal (sequence 0) to `pk_r` with the ephemeral private key
/// `sk_e`: returns enc and the ciphertext with its tag.
pub fn seal_base(
    pk_r: &[u8],
    sk_e: &[u8; 32],
    info: &[u8],
    aad: &[u8],
    pt: &[u8],
) -> Result<(Vec<u8>, Vec<u8>), Error> {
    let sk_e = private_key(sk_e)?;
    let enc = raw_public(&sk_e)?;
    let dh_out = dh(&sk_e, pk_r).map_err(|_| Error::Key("not an X25519 public key".into()))?;
    let shared = shared_secret(&dh_out, &enc, pk_r);
    let (key, nonce) = key_schedule(&shared, info);
    let mut tag = [0u8; 16];
    let ct =
        encrypt_aead(Cipher::aes_128_gcm(), &key, Some(&nonce), aad, pt, &mut tag).map_err(err)?;
    Ok((enc.to_vec(), [ct, tag.to_vec()].concat()))
}

/// Single-shot open (sequence 0) with our private key `sk_r`.
pub fn open_base(
    sk_r: &[u8; 32],
    enc: &[u8],
    info: &[u8],
    aad: &[u8],
    ct: &[u8],
) -> Result<Vec<u8>, Error> {
    let sk_r = private_key(sk_r)?;
    open_with(&sk_r, &raw_public(&sk_r)?, enc, info, aad, ct)
}

/// [`open_base`] with the key imported and its public half computed
/// beforehand: one scalar multiplication per open.
fn open_with(
    sk_r: &PKey<Private>,
    pk_r: &[u8; 32],
    enc: &[u8],
    info: &[u8],
    aad: &[u8],
    ct: &[u8],
) -> Result<Vec<u8>, Error> {
    if ct.len() < 16 {
        return Err(Error::Undecryptable);
    }
    let dh_out = dh(sk_r, enc)?;
    let shared = shared_secret(&dh_out, enc, pk_r);
    let (key, nonce) = key_schedule(&shared, info);
    let (body, tag) = ct.split_at(ct.len() - 16);
    decrypt_aead(Cipher::aes_128_gcm(), &key, Some(&nonce), aad, body, tag)
        .map_err(|_| Error::Undecryptable)
}

/// Encrypts for the holder of an X25519 public key.
pub struct Hpke {
    pk_r: [u8; 32],
    key_id: u8,
}

impl Hpke {
    /// For the raw 32-byte X25519 public key `pk_r`.
    pub fn new(pk_r: [u8; 32], key_id: u8) -> Self {
        Self { pk_r, key_id }
    }

    /// For an X25519 public key in PEM (SubjectPublicKeyInfo).
    pub fn from_pem(pem: &[u8], key_id: u8) -> Result<Self, Error> {
        let k = PKey::public_key_from_pem(pem)
            .map_err(|e| Error::Key(format!("no X25519 public key in the PEM ({e})")))?;
        if k.id() != Id::X25519 {
            return Err(Error::Key("the HPKE key must be X25519".into()));
        }
        let raw = k.raw_public_key().map_err(err)?;
        Ok(Self::new(
            raw.try_into()
                .map_err(|_| Error::Key("X25519 key length".into()))?,
            key_id,
        ))
    }
}

impl IdCipher for Hpke {
    fn scheme(&self) -> Scheme {
        Scheme::Hpke
    }
    fn key_id(&self) -> u8 {
        self.key_id
    }
    fn encrypt(&self, id: &str) -> Result<Vec<u8>, Error> {
        let mut sk_e = [0u8; 32];
        random(&mut sk_e)?;
        let head = header(Scheme::Hpke, self.key_id);
        let (enc, ct) = seal_base(&self.pk_r, &sk_e, INFO, &head, id.as_bytes())?;
        sk_e.fill(0);
        Ok([&head[..], &enc, &ct].concat())
    }
}

/// Decrypts with our X25519 private key.
pub struct HpkeKey {
    sk_r: PKey<Private>,
    pk_r: [u8; 32],
    key_id: u8,
}

impl HpkeKey {
    /// From the raw 32-byte private key.
    pub fn new(mut sk_r: [u8; 32], key_id: u8) -> Result<Self, Error> {
        let sk = private_key(&sk_r);
        sk_r.fill(0);
        let sk_r = sk?;
        Ok(Self {
            pk_r: raw_public(&sk_r)?,
            sk_r,
            key_id,
        })
    }

    /// From an X25519 private key in PEM (PKCS#8).
    pub fn from_pem(pem: &[u8], key_id: u8) -> Result<Self, Error> {
        let k = PKey::private_key_from_pem(pem)
            .map_err(|e| Error::Key(format!("no X25519 private key in the PEM ({e})")))?;
        if k.id() != Id::X25519 {
            return Err(Error::Key("the HPKE key must be X25519".into()));
        }
        let raw = k.raw_private_key().map_err(err)?;
        Self::new(
            raw.try_into()
                .map_err(|_| Error::Key("X25519 key length".into()))?,
            key_id,
        )
    }
}

impl IdDecipher for HpkeKey {
    fn scheme(&self) -> Scheme {
        Scheme::Hpke
    }
    fn key_id(&self) -> u8 {
        self.key_id
    }
    fn decrypt(&self, raw: &[u8]) -> Result<String, Error> {
        let body = body_for(raw, Scheme::Hpke, self.key_id)?;
        if body.len() < 32 + 16 {
            return Err(Error::Undecryptable);
        }
        let (enc, ct) = body.split_at(32);
        id_from(open_with(&self.sk_r, &self.pk_r, enc, INFO, &raw[..3], ct)?)
    }
}
