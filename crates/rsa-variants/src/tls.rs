//! A rustls [`SigningKey`] for RSA keys of any variant (feature `rustls`):
//! TLS servers and clients sign handshakes with standard, CRT or
//! multi-prime keys through OpenSSL.

use std::sync::{Arc, OnceLock};

use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{
    alg_id, AlgorithmIdentifier, InvalidSignature, SignatureVerificationAlgorithm,
    SubjectPublicKeyInfoDer,
};
use rustls::sign::{Signer, SigningKey};
use rustls::{SignatureAlgorithm, SignatureScheme};

use crate::{Error, HashAlg, PrivateKey, PublicKey};

/// `key` as a rustls signing key (PSS for TLS 1.3, PKCS#1 v1.5 too for
/// TLS 1.2 peers that offer only that).
pub fn signing_key(key: PrivateKey) -> Result<Arc<dyn SigningKey>, Error> {
    let spki = key.public_key()?.to_der()?;
    Ok(Arc::new(RsaKey {
        key: Arc::new(key),
        spki,
    }))
}

#[derive(Debug)]
struct RsaKey {
    key: Arc<PrivateKey>,
    spki: Vec<u8>,
}

/// TLS 1.3 needs PSS; TLS 1.2 peers may only offer PKCS#1 v1.5.
const RSA_SCHEMES: [SignatureScheme; 6] = [
    SignatureScheme::RSA_PSS_SHA256,
    SignatureScheme::RSA_PSS_SHA384,
    SignatureScheme::RSA_PSS_SHA512,
    SignatureScheme::RSA_PKCS1_SHA256,
    SignatureScheme::RSA_PKCS1_SHA384,
    SignatureScheme::RSA_PKCS1_SHA512,
];

impl SigningKey for RsaKey {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        let scheme = RSA_SCHEMES.into_iter().find(|s| offered.contains(s))?;
        Some(Box::new(RsaSigner {
            key: self.key.clone(),
            scheme,
        }))
    }

    fn public_key(&self) -> Option<SubjectPublicKeyInfoDer<'_>> {
        Some(SubjectPublicKeyInfoDer::from(self.spki.as_slice()))
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        SignatureAlgorithm::RSA
    }
}

#[derive(Debug)]
struct RsaSigner {
    key: Arc<PrivateKey>,
    scheme: SignatureScheme,
}

impl Signer for RsaSigner {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, rustls::Error> {
        let r = match self.scheme {
            SignatureScheme::RSA_PSS_SHA256 => self.key.sign_pss(HashAlg::Sha256, message),
            SignatureScheme::RSA_PSS_SHA384 => self.key.sign_pss(HashAlg::Sha384, message),
            SignatureScheme::RSA_PSS_SHA512 => self.key.sign_pss(HashAlg::Sha512, message),
            SignatureScheme::RSA_PKCS1_SHA256 => self.key.sign_pkcs1(HashAlg::Sha256, message),
            SignatureScheme::RSA_PKCS1_SHA384 => self.key.sign_pkcs1(HashAlg::Sha384, message),
            _ => self.key.sign_pkcs1(HashAlg::Sha512, message),
        };
        r.map_err(|e| rustls::Error::General(format!("RSA signature: {e}")))
    }

    fn scheme(&self) -> SignatureScheme {
        self.scheme
    }
}

/// Smallest modulus [`allow_rsa_1024`] accepts; the usual floor (rustls
/// with ring, browsers) is 2048.
pub const LEGACY_MIN_BITS: u32 = 1024;
/// Largest modulus verified (as ring).
const MAX_BITS: u32 = 8192;

/// RSA signature verification through OpenSSL that also accepts 1024-bit
/// keys, for peers with legacy keys (the published RSA-variant experiment
/// used 1024 bits). An explicit opt-in: 1024-bit RSA is below today's
/// security floor.
#[derive(Debug)]
struct LegacyRsa {
    pss: bool,
    hash: HashAlg,
    id: AlgorithmIdentifier,
}

impl SignatureVerificationAlgorithm for LegacyRsa {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        // `public_key` is the subjectPublicKey: a PKCS#1 RSAPublicKey.
        let key = PublicKey::from_der(public_key).map_err(|_| InvalidSignature)?;
        if !(LEGACY_MIN_BITS..=MAX_BITS).contains(&key.bits()) {
            return Err(InvalidSignature);
        }
        let ok = if self.pss {
            key.verify_pss(self.hash, message, signature)
        } else {
            key.verify_pkcs1(self.hash, message, signature)
        };
        ok.then_some(()).ok_or(InvalidSignature)
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::RSA_ENCRYPTION
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        self.id
    }
}

static LEGACY: [(SignatureScheme, LegacyRsa); 6] = [
    (
        SignatureScheme::RSA_PSS_SHA256,
        LegacyRsa {
            pss: true,
            hash: HashAlg::Sha256,
            id: alg_id::RSA_PSS_SHA256,
        },
    ),
    (
        SignatureScheme::RSA_PSS_SHA384,
        LegacyRsa {
            pss: true,
            hash: HashAlg::Sha384,
            id: alg_id::RSA_PSS_SHA384,
        },
    ),
    (
        SignatureScheme::RSA_PSS_SHA512,
        LegacyRsa {
            pss: true,
            hash: HashAlg::Sha512,
            id: alg_id::RSA_PSS_SHA512,
        },
    ),
    (
        SignatureScheme::RSA_PKCS1_SHA256,
        LegacyRsa {
            pss: false,
            hash: HashAlg::Sha256,
            id: alg_id::RSA_PKCS1_SHA256,
        },
    ),
    (
        SignatureScheme::RSA_PKCS1_SHA384,
        LegacyRsa {
            pss: false,
            hash: HashAlg::Sha384,
            id: alg_id::RSA_PKCS1_SHA384,
        },
    ),
    (
        SignatureScheme::RSA_PKCS1_SHA512,
        LegacyRsa {
            pss: false,
            hash: HashAlg::Sha512,
            id: alg_id::RSA_PKCS1_SHA512,
        },
    ),
];

/// `provider` with its RSA signature verification replaced by OpenSSL's,
/// accepting moduli from [`LEGACY_MIN_BITS`] (certificate chains and
/// handshake signatures alike). Other algorithms are unchanged.
pub fn allow_rsa_1024(mut provider: CryptoProvider) -> CryptoProvider {
    static TABLE: OnceLock<WebPkiSupportedAlgorithms> = OnceLock::new();
    let base = provider.signature_verification_algorithms;
    let table = TABLE.get_or_init(|| {
        let ours = |scheme: SignatureScheme| {
            LEGACY
                .iter()
                .find(|(s, _)| *s == scheme)
                .map(|(_, a)| a as &'static dyn SignatureVerificationAlgorithm)
        };
        let all: Vec<&'static dyn SignatureVerificationAlgorithm> = base
            .all
            .iter()
            .copied()
            .filter(|a| a.public_key_alg_id() != alg_id::RSA_ENCRYPTION)
            .chain(
                LEGACY
                    .iter()
                    .map(|(_, a)| a as &'static dyn SignatureVerificationAlgorithm),
            )
            .collect();
        let mapping: Vec<(
            SignatureScheme,
            &'static [&'static dyn SignatureVerificationAlgorithm],
        )> = base
            .mapping
            .iter()
            .map(|(scheme, algs)| match ours(*scheme) {
                Some(a) => {
                    let one: &'static [&'static dyn SignatureVerificationAlgorithm] =
                        Box::leak(vec![a].into_boxed_slice());
                    (*scheme, one)
                }
                None => (*scheme, *algs),
            })
            .collect();
        // Built once per process; the tables live as long as it does.
        WebPkiSupportedAlgorithms {
            all: Box::leak(all.into_boxed_slice()),
            mapping: Box::leak(mapping.into_boxed_slice()),
        }
    });
    provider.signature_verification_algorithms = *table;
    provider
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Variant;

    fn verifier(scheme: SignatureScheme) -> &'static dyn SignatureVerificationAlgorithm {
        LEGACY
            .iter()
            .find(|(s, _)| *s == scheme)
            .map(|(_, a)| a as &'static dyn SignatureVerificationAlgorithm)
            .expect("scheme covered")
    }

    /// The subjectPublicKey webpki hands over: PKCS#1 RSAPublicKey.
    fn pkcs1_public(key: &PrivateKey) -> Vec<u8> {
        key.pkey().rsa().unwrap().public_key_to_der_pkcs1().unwrap()
    }

    #[test]
    fn legacy_verification_takes_1024_bit_keys_and_rejects_smaller_or_wrong() {
        let key = PrivateKey::generate(Variant::Standard, 1024).unwrap();
        let public = pkcs1_public(&key);
        let pss = verifier(SignatureScheme::RSA_PSS_SHA256);
        let sig = key.sign_pss(HashAlg::Sha256, b"transcript").unwrap();
        assert!(pss.verify_signature(&public, b"transcript", &sig).is_ok());
        assert!(pss.verify_signature(&public, b"transcripT", &sig).is_err());
        let pkcs1 = verifier(SignatureScheme::RSA_PKCS1_SHA384);
        let sig = key.sign_pkcs1(HashAlg::Sha384, b"chain").unwrap();
        assert!(pkcs1.verify_signature(&public, b"chain", &sig).is_ok());
        assert!(pss.verify_signature(&public, b"chain", &sig).is_err());
        let small = PrivateKey::generate(Variant::Crt, 768).unwrap();
        let sig = small.sign_pss(HashAlg::Sha256, b"t").unwrap();
        assert!(pss
            .verify_signature(&pkcs1_public(&small), b"t", &sig)
            .is_err());
        assert!(pss.verify_signature(b"\x30\x00", b"t", &sig).is_err());
    }
}
