//! Key files: a proxy's private key picks its scheme by its type (RSA of
//! any variant → RSA-OAEP, P-256 → ECIES, X25519 → HPKE), and phones get
//! the matching public key as a PEM file — a raw SubjectPublicKeyInfo or
//! an X.509 certificate — with the key id the proxy publishes beside it.

use openssl::pkey::{Id, PKey, Public};
use openssl::x509::X509;
use rsa_variants::{PrivateKey, PublicKey};

use crate::ecies::{Ecies, EciesKey};
use crate::hpke::{Hpke, HpkeKey};
use crate::rsa::{RsaOaep, RsaOaepKey};
use crate::{Error, IdCipher, IdDecipher};

/// An encrypter that threads can share.
pub type Cipher = Box<dyn IdCipher + Send + Sync>;
/// A decrypter that threads can share.
pub type Decipher = Box<dyn IdDecipher + Send + Sync>;

/// The public key in `pem`: a certificate's or a bare one.
fn public_pkey(pem: &[u8]) -> Result<PKey<Public>, Error> {
    let text = String::from_utf8_lossy(pem);
    if text.contains("-----BEGIN CERTIFICATE-----") {
        return X509::from_pem(pem)
            .and_then(|c| c.public_key())
            .map_err(|e| Error::Key(format!("unreadable certificate ({e})")));
    }
    PKey::public_key_from_pem(pem).map_err(|e| {
        Error::Key(format!(
            "no public key or certificate in the PEM ({})",
            e.errors()
                .first()
                .and_then(|e| e.reason())
                .unwrap_or("no PEM block")
        ))
    })
}

/// A key type's name for messages.
fn type_name(id: Id) -> String {
    match id {
        Id::ED25519 => "Ed25519".into(),
        Id::ED448 => "Ed448".into(),
        Id::DSA => "DSA".into(),
        Id::X448 => "X448".into(),
        other => format!("type {}", other.as_raw()),
    }
}

/// An encrypter for the recipient whose public key (or certificate) is in
/// `pem`, known to it as `key_id`.
pub fn cipher_from_pem(pem: &[u8], key_id: u8) -> Result<Cipher, Error> {
    let pkey = public_pkey(pem)?;
    let der = pkey
        .public_key_to_der()
        .map_err(|e| Error::Key(e.to_string()))?;
    let spki_pem = pkey
        .public_key_to_pem()
        .map_err(|e| Error::Key(e.to_string()))?;
    match pkey.id() {
        Id::RSA => {
            let key = PublicKey::from_der(&der).map_err(|e| Error::Key(e.to_string()))?;
            Ok(Box::new(RsaOaep::new(key, key_id)))
        }
        Id::EC => Ok(Box::new(Ecies::from_pem(&spki_pem, key_id)?)),
        Id::X25519 => Ok(Box::new(Hpke::from_pem(&spki_pem, key_id)?)),
        other => Err(Error::Key(format!(
            "a {} key encrypts nothing here: use RSA (RSA-OAEP), P-256 (ECIES) or X25519 (HPKE)",
            type_name(other)
        ))),
    }
}

/// A decrypter for the private key in `pem`, published as `key_id`.
pub fn decipher_from_pem(pem: &[u8], key_id: u8) -> Result<Decipher, Error> {
    if let Ok(rsa) = PrivateKey::from_pem(pem) {
        return Ok(Box::new(RsaOaepKey::new(rsa, key_id)));
    }
    let pkey = openssl::pkey::PKey::private_key_from_pem(pem)
        .map_err(|_| Error::Key("no readable private key in the PEM".into()))?;
    match pkey.id() {
        Id::EC => Ok(Box::new(EciesKey::from_pem(pem, key_id)?)),
        Id::X25519 => Ok(Box::new(HpkeKey::from_pem(pem, key_id)?)),
        other => Err(Error::Key(format!(
            "a {} key decrypts nothing here: use RSA (RSA-OAEP), P-256 (ECIES) or X25519 (HPKE)",
            type_name(other)
        ))),
    }
}

/// The SubjectPublicKeyInfo PEM of the private key in `pem` (what the
/// proxy hands to its phones).
pub fn public_pem(pem: &[u8]) -> Result<Vec<u8>, Error> {
    if let Ok(rsa) = PrivateKey::from_pem(pem) {
        return rsa
            .public_key()
            .and_then(|k| k.to_pem())
            .map_err(|e| Error::Key(e.to_string()));
    }
    openssl::pkey::PKey::private_key_from_pem(pem)
        .and_then(|k| k.public_key_to_pem())
        .map_err(|_| Error::Key("no readable private key in the PEM".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scheme;

    fn pair(private: &[u8]) -> (Cipher, Decipher) {
        let public = public_pem(private).unwrap();
        (
            cipher_from_pem(&public, 7).unwrap(),
            decipher_from_pem(private, 7).unwrap(),
        )
    }

    #[test]
    fn every_key_type_picks_its_scheme_and_round_trips() {
        let rsa = PrivateKey::generate(rsa_variants::Variant::MultiPrime { primes: 3 }, 2048)
            .unwrap()
            .to_pkcs8_pem()
            .unwrap();
        let group =
            openssl::ec::EcGroup::from_curve_name(openssl::nid::Nid::X9_62_PRIME256V1).unwrap();
        let ec = PKey::from_ec_key(openssl::ec::EcKey::generate(&group).unwrap())
            .unwrap()
            .private_key_to_pem_pkcs8()
            .unwrap();
        let x = PKey::generate_x25519()
            .unwrap()
            .private_key_to_pem_pkcs8()
            .unwrap();
        for (pem, scheme) in [
            (rsa, Scheme::RsaOaep),
            (ec, Scheme::Ecies),
            (x, Scheme::Hpke),
        ] {
            let (enc, dec) = pair(&pem);
            assert_eq!(enc.scheme(), scheme);
            assert_eq!(dec.scheme(), scheme);
            assert_eq!((enc.key_id(), dec.key_id()), (7, 7));
            assert_eq!(
                dec.decrypt(&enc.encrypt("alice").unwrap()).unwrap(),
                "alice"
            );
        }
    }

    #[test]
    fn certificates_carry_the_key_and_wrong_files_are_named() {
        let pkey = PKey::generate_x25519().unwrap();
        let private = pkey.private_key_to_pem_pkcs8().unwrap();
        // A certificate for an RSA key signed by itself (X25519 cannot sign).
        let rsa = PrivateKey::generate(rsa_variants::Variant::Crt, 2048).unwrap();
        let mut b = openssl::x509::X509Builder::new().unwrap();
        b.set_pubkey(rsa.pkey()).unwrap();
        b.set_not_before(&openssl::asn1::Asn1Time::days_from_now(0).unwrap())
            .unwrap();
        b.set_not_after(&openssl::asn1::Asn1Time::days_from_now(1).unwrap())
            .unwrap();
        b.sign(rsa.pkey(), openssl::hash::MessageDigest::sha256())
            .unwrap();
        let cert = b.build().to_pem().unwrap();
        let enc = cipher_from_pem(&cert, 2).unwrap();
        let dec = decipher_from_pem(&rsa.to_pkcs1_pem().unwrap(), 2).unwrap();
        assert_eq!(dec.decrypt(&enc.encrypt("bob").unwrap()).unwrap(), "bob");
        assert!(decipher_from_pem(&private, 1).is_ok());
        let ed = PKey::generate_ed25519().unwrap();
        let err = cipher_from_pem(&ed.public_key_to_pem().unwrap(), 1)
            .err()
            .unwrap();
        assert!(err.to_string().contains("Ed25519"), "{err}");
        let err = cipher_from_pem(b"hello", 1).err().unwrap();
        assert!(err.to_string().contains("no public key"), "{err}");
        assert!(decipher_from_pem(b"hello", 1).is_err());
    }
}
