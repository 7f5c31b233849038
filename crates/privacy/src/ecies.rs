//! ECIES over P-256 (the published work used 160-bit curves, too weak
//! now). Construction, byte for byte:
//!
//! - the sender makes an ephemeral key pair (e, E) and computes the ECDH
//!   shared secret Z = x-coordinate of e·R (R: the recipient's key);
//! - K = HKDF-SHA256(salt = E ‖ R, ikm = Z, info = "sipsec privasip ecies v1"),
//!   32 bytes, with E and R as uncompressed points (65 bytes each);
//! - the body is E ‖ AES-256-GCM(K, nonce = 12 zero bytes, aad = the
//!   3-byte pseudonym header, plaintext = the ID) ‖ tag (16 bytes).
//!
//! A key encrypts one message only (e is fresh each time), so the fixed
//! nonce is safe. All primitives are OpenSSL's.

use openssl::bn::BigNumContext;
use openssl::derive::Deriver;
use openssl::ec::{EcGroup, EcKey, EcPoint, PointConversionForm};
use openssl::md::Md;
use openssl::nid::Nid;
use openssl::pkey::{Id, PKey, Private, Public};
use openssl::pkey_ctx::PkeyCtx;
use openssl::symm::{decrypt_aead, encrypt_aead, Cipher};

use crate::{body_for, header, id_from, Error, IdCipher, IdDecipher, Scheme};

const INFO: &[u8] = b"sipsec privasip ecies v1";
const POINT: usize = 65;
const TAG: usize = 16;

fn group() -> Result<EcGroup, Error> {
    EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).map_err(|e| Error::Key(e.to_string()))
}

fn point_bytes(key: &EcKey<impl openssl::pkey::HasPublic>) -> Result<Vec<u8>, Error> {
    let mut ctx = BigNumContext::new().map_err(|e| Error::Key(e.to_string()))?;
    key.public_key()
        .to_bytes(key.group(), PointConversionForm::UNCOMPRESSED, &mut ctx)
        .map_err(|e| Error::Key(e.to_string()))
}

/// HKDF-SHA256 (RFC 5869) through OpenSSL.
pub fn hkdf_sha256(salt: &[u8], ikm: &[u8], info: &[u8], out: &mut [u8]) -> Result<(), Error> {
    let err = |e: openssl::error::ErrorStack| Error::Key(e.to_string());
    let mut ctx = PkeyCtx::new_id(Id::HKDF).map_err(err)?;
    ctx.derive_init().map_err(err)?;
    ctx.set_hkdf_md(Md::sha256()).map_err(err)?;
    ctx.set_hkdf_salt(salt).map_err(err)?;
    ctx.set_hkdf_key(ikm).map_err(err)?;
    ctx.add_hkdf_info(info).map_err(err)?;
    ctx.derive(Some(out)).map_err(err)?;
    Ok(())
}

fn shared_key(
    mine: &PKey<Private>,
    theirs: &PKey<Public>,
    ephemeral: &[u8],
    recipient: &[u8],
) -> Result<[u8; 32], Error> {
    let bad = |_| Error::Undecryptable;
    let mut d = Deriver::new(mine).map_err(bad)?;
    d.set_peer(theirs).map_err(bad)?;
    let z = d.derive_to_vec().map_err(bad)?;
    let mut k = [0u8; 32];
    hkdf_sha256(&[ephemeral, recipient].concat(), &z, INFO, &mut k)?;
    Ok(k)
}

/// Encrypts for the holder of a P-256 public key.
pub struct Ecies {
    recipient: PKey<Public>,
    recipient_point: Vec<u8>,
    key_id: u8,
}

impl Ecies {
    /// For the P-256 public key in `pem` (SubjectPublicKeyInfo), known
    /// to the recipient as `key_id`.
    pub fn from_pem(pem: &[u8], key_id: u8) -> Result<Self, Error> {
        let key = EcKey::public_key_from_pem(pem)
            .map_err(|e| Error::Key(format!("no P-256 public key in the PEM ({e})")))?;
        if key.group().curve_name() != Some(Nid::X9_62_PRIME256V1) {
            return Err(Error::Key("the ECIES key must be on P-256".into()));
        }
        let recipient_point = point_bytes(&key)?;
        let recipient = PKey::from_ec_key(key).map_err(|e| Error::Key(e.to_string()))?;
        Ok(Self {
            recipient,
            recipient_point,
            key_id,
        })
    }

    /// Encrypts with a given ephemeral key (known-answer tests).
    pub fn encrypt_with(&self, id: &str, ephemeral: &EcKey<Private>) -> Result<Vec<u8>, Error> {
        let e_point = point_bytes(ephemeral)?;
        let e = PKey::from_ec_key(ephemeral.clone()).map_err(|e| Error::Key(e.to_string()))?;
        let k = shared_key(&e, &self.recipient, &e_point, &self.recipient_point)
            .map_err(|_| Error::Key("ECDH failed".into()))?;
        let head = header(Scheme::Ecies, self.key_id);
        let mut tag = [0u8; TAG];
        let ct = encrypt_aead(
            Cipher::aes_256_gcm(),
            &k,
            Some(&[0; 12]),
            &head,
            id.as_bytes(),
            &mut tag,
        )
        .map_err(|e| Error::Key(e.to_string()))?;
        Ok([&head[..], &e_point, &ct, &tag].concat())
    }
}

impl IdCipher for Ecies {
    fn scheme(&self) -> Scheme {
        Scheme::Ecies
    }
    fn key_id(&self) -> u8 {
        self.key_id
    }
    fn encrypt(&self, id: &str) -> Result<Vec<u8>, Error> {
        let group = group()?;
        let ephemeral = EcKey::generate(&group).map_err(|e| Error::Key(e.to_string()))?;
        self.encrypt_with(id, &ephemeral)
    }
}

/// Decrypts with the recipient's P-256 private key.
pub struct EciesKey {
    key: PKey<Private>,
    point: Vec<u8>,
    key_id: u8,
}

impl EciesKey {
    /// Our P-256 private key (PEM, SEC1 or PKCS#8), published as `key_id`.
    pub fn from_pem(pem: &[u8], key_id: u8) -> Result<Self, Error> {
        let key = PKey::private_key_from_pem(pem)
            .and_then(|k| k.ec_key())
            .map_err(|e| Error::Key(format!("no EC private key in the PEM ({e})")))?;
        if key.group().curve_name() != Some(Nid::X9_62_PRIME256V1) {
            return Err(Error::Key("the ECIES key must be on P-256".into()));
        }
        let point = point_bytes(&key)?;
        let key = PKey::from_ec_key(key).map_err(|e| Error::Key(e.to_string()))?;
        Ok(Self { key, point, key_id })
    }
}

impl IdDecipher for EciesKey {
    fn scheme(&self) -> Scheme {
        Scheme::Ecies
    }
    fn key_id(&self) -> u8 {
        self.key_id
    }
    fn decrypt(&self, raw: &[u8]) -> Result<String, Error> {
        let body = body_for(raw, Scheme::Ecies, self.key_id)?;
        if body.len() < POINT + TAG {
            return Err(Error::Undecryptable);
        }
        let (e_point, rest) = body.split_at(POINT);
        let (ct, tag) = rest.split_at(rest.len() - TAG);
        let group = group()?;
        let mut ctx = BigNumContext::new().map_err(|_| Error::Undecryptable)?;
        let point =
            EcPoint::from_bytes(&group, e_point, &mut ctx).map_err(|_| Error::Undecryptable)?;
        let e = EcKey::from_public_key(&group, &point)
            .and_then(PKey::from_ec_key)
            .map_err(|_| Error::Undecryptable)?;
        let k = shared_key(&self.key, &e, e_point, &self.point)?;
        let head = &raw[..3];
        let id = decrypt_aead(Cipher::aes_256_gcm(), &k, Some(&[0; 12]), head, ct, tag)
            .map_err(|_| Error::Undecryptable)?;
        id_from(id)
    }
}
