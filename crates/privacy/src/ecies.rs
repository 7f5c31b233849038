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

use openssl::bn::{BigNum, BigNumContext};
use openssl::ec::{EcGroup, EcKey, EcPoint, EcPointRef, PointConversionForm};
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private, Public};
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

/// K from ECDH of `scalar` and `peer` (ephemeral and recipient points
/// as bytes for the salt). The multiplication is the one OpenSSL's ECDH
/// does (P-256 has cofactor 1), without building EVP keys per call: that
/// conversion cost more than the multiplication.
fn shared_key(
    group: &EcGroup,
    scalar: &openssl::bn::BigNumRef,
    peer: &EcPointRef,
    ephemeral: &[u8],
    recipient: &[u8],
) -> Result<[u8; 32], Error> {
    let bad = |_| Error::Undecryptable;
    let mut ctx = BigNumContext::new().map_err(bad)?;
    let mut shared = EcPoint::new(group).map_err(bad)?;
    shared.mul2(group, peer, scalar, &mut ctx).map_err(bad)?;
    if shared.is_infinity(group) {
        return Err(Error::Undecryptable);
    }
    let (mut x, mut y) = (BigNum::new().map_err(bad)?, BigNum::new().map_err(bad)?);
    shared
        .affine_coordinates(group, &mut x, &mut y, &mut ctx)
        .map_err(bad)?;
    let mut z = x.to_vec_padded(32).map_err(bad)?;
    let mut k = [0u8; 32];
    crate::kdf::hkdf(&[ephemeral, recipient].concat(), &z, INFO, &mut k);
    z.fill(0);
    Ok(k)
}

/// Encrypts for the holder of a P-256 public key.
pub struct Ecies {
    group: EcGroup,
    recipient: EcKey<Public>,
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
        Ok(Self {
            group: group()?,
            recipient: key,
            recipient_point,
            key_id,
        })
    }

    /// Encrypts with a given ephemeral key (known-answer tests).
    pub fn encrypt_with(&self, id: &str, ephemeral: &EcKey<Private>) -> Result<Vec<u8>, Error> {
        let e_point = point_bytes(ephemeral)?;
        let k = shared_key(
            &self.group,
            ephemeral.private_key(),
            self.recipient.public_key(),
            &e_point,
            &self.recipient_point,
        )
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
        let ephemeral = EcKey::generate(&self.group).map_err(|e| Error::Key(e.to_string()))?;
        self.encrypt_with(id, &ephemeral)
    }
}

/// Decrypts with the recipient's P-256 private key.
pub struct EciesKey {
    group: EcGroup,
    key: EcKey<Private>,
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
        Ok(Self {
            group: group()?,
            key,
            point,
            key_id,
        })
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
        let bad = |_| Error::Undecryptable;
        let mut ctx = BigNumContext::new().map_err(bad)?;
        // Rejects points not on the curve.
        let e = EcPoint::from_bytes(&self.group, e_point, &mut ctx).map_err(bad)?;
        let k = shared_key(
            &self.group,
            self.key.private_key(),
            &e,
            e_point,
            &self.point,
        )?;
        let head = &raw[..3];
        let id = decrypt_aead(Cipher::aes_256_gcm(), &k, Some(&[0; 12]), head, ct, tag)
            .map_err(|_| Error::Undecryptable)?;
        id_from(id)
    }
}
