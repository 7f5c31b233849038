//! RSA keys in the three variants a SIP server may run, on OpenSSL 3.
//!
//! - **standard**: n, e, d only; every private operation is c^d mod n;
//! - **CRT**: two primes with the Chinese-remainder parameters (what every
//!   library generates by default);
//! - **multi-prime**: three or more primes (RFC 8017 §3.2), CRT over each.
//!
//! Private-key operations run in OpenSSL (constant-time code, implicit
//! rejection for PKCS#1 v1.5), never in RustCrypto `rsa`, whose decryption
//! is open to the Marvin timing attack (RUSTSEC-2023-0071). Sans-IO: no
//! sockets, threads or clocks.

mod der;
mod ffi;
#[cfg(feature = "rustls")]
pub mod tls;

use std::fmt;

use openssl::bn::BigNum;
use openssl::hash::MessageDigest;
use openssl::pkey::{HasPublic, Id, PKey, PKeyRef, Private, Public};
use openssl::pkey_ctx::PkeyCtx;
use openssl::rsa::{Padding, Rsa, RsaPrivateKeyBuilder, RsaRef};
use openssl::sign::{RsaPssSaltlen, Signer, Verifier};

/// How a private key computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// n, e, d: decryption is c^d mod n.
    Standard,
    /// Two primes with CRT parameters.
    Crt,
    /// `primes` ≥ 3 primes with CRT parameters.
    MultiPrime {
        /// Number of prime factors.
        primes: u8,
    },
}

impl Variant {
    /// Parses `standard`, `crt` or `multiprime`/`multi-prime`; `primes`
    /// applies to the last (default 3).
    pub fn parse(name: &str, primes: Option<u8>) -> Result<Self, Error> {
        match (name, primes) {
            ("standard", None | Some(2)) => Ok(Variant::Standard),
            ("crt", None | Some(2)) => Ok(Variant::Crt),
            ("multiprime" | "multi-prime", None) => Ok(Variant::MultiPrime { primes: 3 }),
            ("multiprime" | "multi-prime", Some(p @ 3..=5)) => {
                Ok(Variant::MultiPrime { primes: p })
            }
            ("multiprime" | "multi-prime", Some(p)) => Err(Error::Unsupported(format!(
                "{p} primes: multi-prime keys have 3 to 5"
            ))),
            ("standard" | "crt", Some(p)) => Err(Error::Unsupported(format!(
                "{p} primes: only multi-prime keys take --primes"
            ))),
            _ => Err(Error::Unsupported(format!(
                "variant {name:?}: expected standard, crt or multiprime"
            ))),
        }
    }

    /// Short machine name: `standard`, `crt`, `multiprime3`…
    pub fn name(self) -> String {
        match self {
            Variant::Standard => "standard".into(),
            Variant::Crt => "crt".into(),
            Variant::MultiPrime { primes } => format!("multiprime{primes}"),
        }
    }

    /// Most primes OpenSSL 3 generates for a modulus of `bits`
    /// (`ossl_rsa_multip_cap`).
    pub fn max_primes(bits: u32) -> u8 {
        match bits {
            0..=1023 => 2,
            1024..=4095 => 3,
            4096..=8191 => 4,
            _ => 5,
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Variant::Standard => f.write_str("standard (n, e, d; no CRT)"),
            Variant::Crt => f.write_str("CRT (2 primes)"),
            Variant::MultiPrime { primes } => write!(f, "multi-prime ({primes} primes)"),
        }
    }
}

/// Hash for OAEP, PSS and PKCS#1 v1.5 signatures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashAlg {
    /// SHA-1 (OAEP's original hash; not for new signatures).
    Sha1,
    /// SHA-256.
    Sha256,
    /// SHA-384.
    Sha384,
    /// SHA-512.
    Sha512,
}

impl HashAlg {
    fn md(self) -> MessageDigest {
        match self {
            HashAlg::Sha1 => MessageDigest::sha1(),
            HashAlg::Sha256 => MessageDigest::sha256(),
            HashAlg::Sha384 => MessageDigest::sha384(),
            HashAlg::Sha512 => MessageDigest::sha512(),
        }
    }

    fn md_ref(self) -> &'static openssl::md::MdRef {
        match self {
            HashAlg::Sha1 => openssl::md::Md::sha1(),
            HashAlg::Sha256 => openssl::md::Md::sha256(),
            HashAlg::Sha384 => openssl::md::Md::sha384(),
            HashAlg::Sha512 => openssl::md::Md::sha512(),
        }
    }

    /// Digest length in bytes.
    pub fn output_len(self) -> usize {
        match self {
            HashAlg::Sha1 => 20,
            HashAlg::Sha256 => 32,
            HashAlg::Sha384 => 48,
            HashAlg::Sha512 => 64,
        }
    }
}

/// What went wrong; messages name the cause.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// OpenSSL refused (bad key material, wrong sizes, …).
    #[error("openssl: {0}")]
    OpenSsl(#[from] openssl::error::ErrorStack),
    /// The input is not a key this crate reads.
    #[error("not an RSA key: {0}")]
    NotRsa(String),
    /// Something the variant or size does not allow.
    #[error("{0}")]
    Unsupported(String),
    /// Decryption failed. Deliberately uniform: which check failed is not
    /// said, so the error is no padding oracle.
    #[error("decryption failed")]
    Decrypt,
    /// The input to a raw or OAEP operation has the wrong length.
    #[error("input is {got} bytes; {what}")]
    Length {
        /// Actual length.
        got: usize,
        /// What was expected.
        what: String,
    },
}

/// An RSA private key of any variant.
#[derive(Clone)]
pub struct PrivateKey {
    pkey: PKey<Private>,
    variant: Variant,
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never prints key material.
        f.debug_struct("PrivateKey")
            .field("bits", &self.bits())
            .field("variant", &self.variant)
            .finish()
    }
}

fn variant_of(rsa: &RsaRef<Private>) -> Variant {
    match rsa.p() {
        None => Variant::Standard,
        Some(p) if p.num_bits() == 0 => Variant::Standard,
        Some(_) => match ffi::extra_primes(rsa) {
            0 => Variant::Crt,
            n => Variant::MultiPrime {
                primes: u8::try_from(n + 2).unwrap_or(u8::MAX),
            },
        },
    }
}

fn strip_factors(rsa: &RsaRef<Private>) -> Result<Rsa<Private>, Error> {
    Ok(RsaPrivateKeyBuilder::new(
        rsa.n().to_owned()?,
        rsa.e().to_owned()?,
        rsa.d().to_owned()?,
    )?
    .build())
}

impl PrivateKey {
    /// Generates a key of `bits` (e = 65537).
    pub fn generate(variant: Variant, bits: u32) -> Result<Self, Error> {
        if bits < 512 {
            return Err(Error::Unsupported(format!(
                "{bits}-bit keys: at least 512 bits"
            )));
        }
        let pkey = match variant {
            Variant::Standard | Variant::Crt => PKey::from_rsa(Rsa::generate(bits)?)?,
            Variant::MultiPrime { primes } => {
                let cap = Variant::max_primes(bits);
                if primes < 3 || primes > cap {
                    return Err(Error::Unsupported(format!(
                        "{primes} primes at {bits} bits: OpenSSL allows 3 to {cap} here (3 from 1024 bits, 4 from 4096, 5 from 8192)"
                    )));
                }
                let mut ctx = PkeyCtx::new_id(Id::RSA)?;
                ctx.keygen_init()?;
                ctx.set_rsa_keygen_bits(bits)?;
                ffi::set_keygen_primes(&mut ctx, u32::from(primes))?;
                ctx.keygen()?
            }
        };
        let key = Self::from_pkey(pkey)?;
        match variant {
            Variant::Standard => key.to_standard(),
            _ => Ok(key),
        }
    }

    /// Wraps an OpenSSL key, finding its variant (zero factors, our
    /// encoding of a standard key, become none).
    pub fn from_pkey(pkey: PKey<Private>) -> Result<Self, Error> {
        if pkey.id() != Id::RSA {
            return Err(Error::NotRsa(format!("the key is {:?}", pkey.id())));
        }
        let rsa = pkey.rsa()?;
        let variant = variant_of(&rsa);
        if variant == Variant::Standard && rsa.p().is_some() {
            // Zero factors (our PKCS#1 encoding of a standard key):
            // rebuild without them so OpenSSL computes c^d mod n.
            return Ok(Self {
                pkey: PKey::from_rsa(strip_factors(&rsa)?)?,
                variant,
            });
        }
        Ok(Self { pkey, variant })
    }

    /// The same key as the standard variant: the factors are dropped and
    /// every private operation becomes c^d mod n.
    pub fn to_standard(&self) -> Result<Self, Error> {
        let rsa = self.pkey.rsa()?;
        Ok(Self {
            pkey: PKey::from_rsa(strip_factors(&rsa)?)?,
            variant: Variant::Standard,
        })
    }

    /// Reads PEM: PKCS#1 (`RSA PRIVATE KEY`, multi-prime included) or
    /// unencrypted PKCS#8 (`PRIVATE KEY`).
    pub fn from_pem(pem: &[u8]) -> Result<Self, Error> {
        let pkey = PKey::private_key_from_pem(pem)
            .map_err(|e| Error::NotRsa(format!("no readable private key in the PEM ({e})")))?;
        Self::from_pkey(pkey)
    }

    /// Reads DER: PKCS#1 `RSAPrivateKey` or PKCS#8 `PrivateKeyInfo`.
    pub fn from_der(der: &[u8]) -> Result<Self, Error> {
        let pkey = PKey::private_key_from_der(der)
            .or_else(|_| Rsa::private_key_from_der(der).and_then(PKey::from_rsa))
            .map_err(|e| Error::NotRsa(format!("no readable private key in the DER ({e})")))?;
        Self::from_pkey(pkey)
    }

    /// PKCS#1 DER (RFC 8017 A.1.2; version 1 with other-prime-info for
    /// multi-prime keys, zero factors for standard keys).
    pub fn to_pkcs1_der(&self) -> Result<Vec<u8>, Error> {
        let rsa = self.pkey.rsa()?;
        match self.variant {
            Variant::Standard => Ok(der::standard_pkcs1(rsa.n(), rsa.e(), rsa.d())),
            _ => Ok(rsa.private_key_to_der()?),
        }
    }

    /// PKCS#1 PEM (`RSA PRIVATE KEY`).
    pub fn to_pkcs1_pem(&self) -> Result<Vec<u8>, Error> {
        Ok(der::pem("RSA PRIVATE KEY", &self.to_pkcs1_der()?))
    }

    /// PKCS#8 DER (RFC 5208, unencrypted).
    pub fn to_pkcs8_der(&self) -> Result<Vec<u8>, Error> {
        Ok(der::pkcs8(&self.to_pkcs1_der()?))
    }

    /// PKCS#8 PEM (`PRIVATE KEY`).
    pub fn to_pkcs8_pem(&self) -> Result<Vec<u8>, Error> {
        Ok(der::pem("PRIVATE KEY", &self.to_pkcs8_der()?))
    }

    /// Which variant this key computes with.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// Modulus size in bits.
    pub fn bits(&self) -> u32 {
        self.pkey.bits()
    }

    /// Modulus size in bytes (the length of ciphertexts and signatures).
    pub fn size(&self) -> usize {
        self.pkey.size()
    }

    /// The public half.
    pub fn public_key(&self) -> Result<PublicKey, Error> {
        let rsa = self.pkey.rsa()?;
        let public = Rsa::from_public_components(rsa.n().to_owned()?, rsa.e().to_owned()?)?;
        Ok(PublicKey {
            pkey: PKey::from_rsa(public)?,
        })
    }

    /// The OpenSSL key, for APIs that take one (certificate signing).
    pub fn pkey(&self) -> &PKeyRef<Private> {
        &self.pkey
    }

    /// RSAES-OAEP decryption (RFC 8017 §7.1.2) with `hash` for the label
    /// hash and MGF1. Every failure is the same [`Error::Decrypt`].
    pub fn decrypt_oaep(&self, hash: HashAlg, ciphertext: &[u8]) -> Result<Vec<u8>, Error> {
        if ciphertext.len() != self.size() {
            return Err(Error::Decrypt);
        }
        let run = || -> Result<Vec<u8>, openssl::error::ErrorStack> {
            let mut ctx = PkeyCtx::new(&self.pkey)?;
            ctx.decrypt_init()?;
            ctx.set_rsa_padding(Padding::PKCS1_OAEP)?;
            ctx.set_rsa_oaep_md(hash.md_ref())?;
            ctx.set_rsa_mgf1_md(hash.md_ref())?;
            let mut out = Vec::new();
            ctx.decrypt_to_vec(ciphertext, &mut out)?;
            Ok(out)
        };
        run().map_err(|_| Error::Decrypt)
    }

    /// RSASSA-PSS signature (RFC 8017 §8.1) over `message`, salt as long
    /// as the digest (what TLS 1.3 requires).
    pub fn sign_pss(&self, hash: HashAlg, message: &[u8]) -> Result<Vec<u8>, Error> {
        let mut s = Signer::new(hash.md(), &self.pkey)?;
        s.set_rsa_padding(Padding::PKCS1_PSS)?;
        s.set_rsa_pss_saltlen(RsaPssSaltlen::DIGEST_LENGTH)?;
        s.set_rsa_mgf1_md(hash.md())?;
        Ok(s.sign_oneshot_to_vec(message)?)
    }

    /// RSASSA-PKCS1-v1_5 signature (RFC 8017 §8.2); deterministic.
    pub fn sign_pkcs1(&self, hash: HashAlg, message: &[u8]) -> Result<Vec<u8>, Error> {
        let mut s = Signer::new(hash.md(), &self.pkey)?;
        s.set_rsa_padding(Padding::PKCS1)?;
        Ok(s.sign_oneshot_to_vec(message)?)
    }

    /// The raw private operation m = c^d mod n (RSADP/RSASP1), no padding:
    /// `input` is exactly the modulus length and below n.
    pub fn raw_private(&self, input: &[u8]) -> Result<Vec<u8>, Error> {
        raw(&self.pkey, input, |rsa, i, o| {
            rsa.private_decrypt(i, o, Padding::NONE)
        })
    }
}

fn raw<T: HasPublic>(
    pkey: &PKeyRef<T>,
    input: &[u8],
    op: impl FnOnce(&RsaRef<T>, &[u8], &mut [u8]) -> Result<usize, openssl::error::ErrorStack>,
) -> Result<Vec<u8>, Error> {
    let rsa = pkey.rsa()?;
    let k = rsa.size() as usize;
    if input.len() != k {
        return Err(Error::Length {
            got: input.len(),
            what: format!("raw RSA takes exactly the modulus length, {k}"),
        });
    }
    if BigNum::from_slice(input)? >= *rsa.n() {
        return Err(Error::Unsupported(
            "raw RSA input is not below the modulus".into(),
        ));
    }
    let mut out = vec![0; k];
    let n = op(&rsa, input, &mut out)?;
    out.truncate(n);
    Ok(out)
}

/// An RSA public key.
#[derive(Clone)]
pub struct PublicKey {
    pkey: PKey<Public>,
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublicKey")
            .field("bits", &self.bits())
            .finish()
    }
}

impl PublicKey {
    /// Reads PEM: SubjectPublicKeyInfo (`PUBLIC KEY`) or PKCS#1
    /// (`RSA PUBLIC KEY`).
    pub fn from_pem(pem: &[u8]) -> Result<Self, Error> {
        let pkey = PKey::public_key_from_pem(pem)
            .or_else(|_| Rsa::public_key_from_pem_pkcs1(pem).and_then(PKey::from_rsa))
            .map_err(|e| Error::NotRsa(format!("no readable public key in the PEM ({e})")))?;
        Self::from_pkey(pkey)
    }

    /// Reads DER: SubjectPublicKeyInfo or PKCS#1 `RSAPublicKey`.
    pub fn from_der(der: &[u8]) -> Result<Self, Error> {
        let pkey = PKey::public_key_from_der(der)
            .or_else(|_| Rsa::public_key_from_der_pkcs1(der).and_then(PKey::from_rsa))
            .map_err(|e| Error::NotRsa(format!("no readable public key in the DER ({e})")))?;
        Self::from_pkey(pkey)
    }

    fn from_pkey(pkey: PKey<Public>) -> Result<Self, Error> {
        if pkey.id() != Id::RSA {
            return Err(Error::NotRsa(format!("the key is {:?}", pkey.id())));
        }
        Ok(Self { pkey })
    }

    /// SubjectPublicKeyInfo PEM.
    pub fn to_pem(&self) -> Result<Vec<u8>, Error> {
        Ok(self.pkey.public_key_to_pem()?)
    }

    /// SubjectPublicKeyInfo DER.
    pub fn to_der(&self) -> Result<Vec<u8>, Error> {
        Ok(self.pkey.public_key_to_der()?)
    }

    /// Modulus size in bits.
    pub fn bits(&self) -> u32 {
        self.pkey.bits()
    }

    /// Modulus size in bytes.
    pub fn size(&self) -> usize {
        self.pkey.size()
    }

    /// Longest message OAEP with `hash` takes: k − 2·hLen − 2.
    pub fn max_oaep_message(&self, hash: HashAlg) -> usize {
        self.size().saturating_sub(2 * hash.output_len() + 2)
    }

    /// RSAES-OAEP encryption (RFC 8017 §7.1.1).
    pub fn encrypt_oaep(&self, hash: HashAlg, message: &[u8]) -> Result<Vec<u8>, Error> {
        let max = self.max_oaep_message(hash);
        if message.len() > max {
            return Err(Error::Length {
                got: message.len(),
                what: format!("OAEP with this key and hash takes at most {max}"),
            });
        }
        let mut ctx = PkeyCtx::new(&self.pkey)?;
        ctx.encrypt_init()?;
        ctx.set_rsa_padding(Padding::PKCS1_OAEP)?;
        ctx.set_rsa_oaep_md(hash.md_ref())?;
        ctx.set_rsa_mgf1_md(hash.md_ref())?;
        let mut out = Vec::new();
        ctx.encrypt_to_vec(message, &mut out)?;
        Ok(out)
    }

    /// Verifies an RSASSA-PSS signature (any salt length).
    pub fn verify_pss(&self, hash: HashAlg, message: &[u8], signature: &[u8]) -> bool {
        let run = || -> Result<bool, openssl::error::ErrorStack> {
            let mut v = Verifier::new(hash.md(), &self.pkey)?;
            v.set_rsa_padding(Padding::PKCS1_PSS)?;
            // -2: RSA_PSS_SALTLEN_AUTO, the salt length read from the signature.
            v.set_rsa_pss_saltlen(RsaPssSaltlen::custom(-2))?;
            v.set_rsa_mgf1_md(hash.md())?;
            v.verify_oneshot(signature, message)
        };
        run().unwrap_or(false)
    }

    /// Verifies an RSASSA-PKCS1-v1_5 signature.
    pub fn verify_pkcs1(&self, hash: HashAlg, message: &[u8], signature: &[u8]) -> bool {
        let run = || -> Result<bool, openssl::error::ErrorStack> {
            let mut v = Verifier::new(hash.md(), &self.pkey)?;
            v.set_rsa_padding(Padding::PKCS1)?;
            v.verify_oneshot(signature, message)
        };
        run().unwrap_or(false)
    }

    /// The raw public operation c = m^e mod n (RSAEP/RSAVP1).
    pub fn raw_public(&self, input: &[u8]) -> Result<Vec<u8>, Error> {
        raw(&self.pkey, input, |rsa, i, o| {
            rsa.public_encrypt(i, o, Padding::NONE)
        })
    }
}
