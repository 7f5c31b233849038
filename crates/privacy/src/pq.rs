//! The post-quantum half of a PrivaSIP-3 enrollment: ML-KEM-768 (FIPS
//! 203, through aws-lc-rs) beside the X25519 HPKE seal, so an enrollment
//! recorded today stays secret even from a future quantum computer — the
//! hybrid's secret holds while either half does, as in TLS's
//! X25519MLKEM768.
//!
//! Keys travel as PEM-armoured raw keys (OpenSSL 3.0 has no ML-KEM):
//! `SIPSEC ML-KEM-768 PRIVATE KEY` (the 2,400-byte decapsulation key) and
//! `SIPSEC ML-KEM-768 PUBLIC KEY` (the 1,184-byte encapsulation key); a
//! private key file holds both blocks.

use aws_lc_rs::kem::{Ciphertext, DecapsulationKey, EncapsulationKey, ML_KEM_768};

use crate::Error;

const PRIVATE_LABEL: &str = "SIPSEC ML-KEM-768 PRIVATE KEY";
const PUBLIC_LABEL: &str = "SIPSEC ML-KEM-768 PUBLIC KEY";

fn armour(label: &str, raw: &[u8]) -> Vec<u8> {
    let b64 = openssl::base64::encode_block(raw);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out.into_bytes()
}

fn unarmour(label: &str, pem: &[u8]) -> Result<Vec<u8>, Error> {
    let text = std::str::from_utf8(pem).map_err(|_| Error::Key("not PEM text".into()))?;
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text
        .find(&begin)
        .ok_or_else(|| Error::Key(format!("no {label}")))?
        + begin.len();
    let stop = text[start..]
        .find(&end)
        .ok_or_else(|| Error::Key(format!("{label} not ended")))?;
    let b64: String = text[start..start + stop].split_whitespace().collect();
    openssl::base64::decode_block(&b64).map_err(|_| Error::Key(format!("{label}: not base64")))
}

/// Whether `pem` holds an ML-KEM private key of ours.
pub fn is_private_pem(pem: &[u8]) -> bool {
    std::str::from_utf8(pem).is_ok_and(|t| t.contains(PRIVATE_LABEL))
}

/// A proxy's ML-KEM-768 key (and its public half).
pub struct PqKey(DecapsulationKey, Vec<u8>);

impl std::fmt::Debug for PqKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PqKey(ML-KEM-768)")
    }
}

impl PqKey {
    /// A new key, and its PEM.
    pub fn generate() -> Result<(Self, Vec<u8>), Error> {
        let k = DecapsulationKey::generate(&ML_KEM_768)
            .map_err(|_| Error::Key("ML-KEM-768 key generation".into()))?;
        let raw = k
            .key_bytes()
            .map_err(|_| Error::Key("ML-KEM-768 key bytes".into()))?;
        let public = k
            .encapsulation_key()
            .and_then(|e| e.key_bytes().map(|b| b.as_ref().to_vec()))
            .map_err(|_| Error::Key("ML-KEM-768 public key".into()))?;
        let pem = [
            armour(PRIVATE_LABEL, raw.as_ref()),
            armour(PUBLIC_LABEL, &public),
        ]
        .concat();
        Ok((Self(k, public), pem))
    }

    /// The key in `pem`.
    pub fn from_pem(pem: &[u8]) -> Result<Self, Error> {
        let raw = unarmour(PRIVATE_LABEL, pem)?;
        let public = unarmour(PUBLIC_LABEL, pem)?;
        EncapsulationKey::new(&ML_KEM_768, &public).map_err(|_| {
            Error::Key("not an ML-KEM-768 public key beside the private one".into())
        })?;
        DecapsulationKey::new(&ML_KEM_768, &raw)
            .map(|k| Self(k, public))
            .map_err(|_| Error::Key("not an ML-KEM-768 private key".into()))
    }

    /// Its public half, as PEM.
    pub fn public_pem(&self) -> Result<Vec<u8>, Error> {
        Ok(armour(PUBLIC_LABEL, &self.1))
    }

    /// The shared secret in `ciphertext`.
    pub fn decapsulate(&self, ciphertext: &[u8]) -> Result<Vec<u8>, Error> {
        self.0
            .decapsulate(Ciphertext::from(ciphertext))
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| Error::Undecryptable)
    }
}

/// A proxy's ML-KEM-768 public key, as its phones hold it.
pub struct PqPublic(EncapsulationKey);

impl std::fmt::Debug for PqPublic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PqPublic(ML-KEM-768)")
    }
}

impl PqPublic {
    /// The key in `pem`.
    pub fn from_pem(pem: &[u8]) -> Result<Self, Error> {
        let raw = unarmour(PUBLIC_LABEL, pem)?;
        EncapsulationKey::new(&ML_KEM_768, &raw)
            .map(Self)
            .map_err(|_| Error::Key("not an ML-KEM-768 public key".into()))
    }

    /// A fresh shared secret and the ciphertext that carries it.
    pub fn encapsulate(&self) -> Result<(Vec<u8>, Vec<u8>), Error> {
        let (ct, ss) = self
            .0
            .encapsulate()
            .map_err(|_| Error::Key("ML-KEM-768 encapsulation".into()))?;
        Ok((ct.as_ref().to_vec(), ss.as_ref().to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_pem_and_agree() {
        let (k, pem) = PqKey::generate().unwrap();
        assert!(is_private_pem(&pem));
        let k2 = PqKey::from_pem(&pem).unwrap();
        let public = PqPublic::from_pem(&k.public_pem().unwrap()).unwrap();
        let (ct, ss) = public.encapsulate().unwrap();
        assert_eq!(ct.len(), 1088);
        assert_eq!(k2.decapsulate(&ct).unwrap(), ss);
        assert!(PqKey::from_pem(b"-----BEGIN SIPSEC ML-KEM-768 PRIVATE KEY-----\nAAAA\n-----END SIPSEC ML-KEM-768 PRIVATE KEY-----\n").is_err());
        let public_only = k.public_pem().unwrap();
        assert!(
            PqKey::from_pem(&public_only).is_err(),
            "a public key is not a private one"
        );
        assert!(k.decapsulate(&[0u8; 10]).is_err());
    }
}
