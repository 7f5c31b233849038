//! The three Rust RSA libraries behind one interface: OAEP with SHA-256
//! (MGF1 SHA-256, empty label) and PSS with SHA-256 and a 32-byte salt.

use rsa_variants::{HashAlg, PrivateKey, Variant};

/// A loaded private key (its public half included).
pub trait Key {
    fn bits(&self) -> u32;
    fn encrypt(&self, msg: &[u8]) -> Result<Vec<u8>, String>;
    fn decrypt(&self, ct: &[u8]) -> Result<Vec<u8>, String>;
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, String>;
    fn verify(&self, msg: &[u8], sig: &[u8]) -> bool;
    fn clone_box(&self) -> Box<dyn Key>;
}

/// A library.
pub trait Lib: Sync {
    fn id(&self) -> &'static str;
    fn version(&self) -> String;
    /// Key variants it computes with (crossbench/protocol.md).
    fn variants(&self) -> &'static [&'static str];
    /// Smallest modulus it accepts.
    fn min_bits(&self) -> u32;
    fn load(&self, pem: &str, variant: &str) -> Result<Box<dyn Key>, String>;
    fn keygen(&self, bits: u32) -> Result<(), String>;
}

pub fn by_name(name: &str) -> Option<&'static dyn Lib> {
    match name {
        "rsa-variants" => Some(&RsaVariants),
        "aws-lc-rs" => Some(&AwsLc),
        "rustcrypto" => Some(&RustCrypto),
        _ => None,
    }
}

fn pem_body(pem: &str) -> Result<Vec<u8>, String> {
    let body: String = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<Vec<_>>()
        .concat();
    decode_base64(body.trim()).ok_or_else(|| "the PEM body is not base64".into())
}

fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c)? << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

// --- sipsec's rsa-variants (OpenSSL) ---------------------------------

struct RsaVariants;

#[derive(Clone)]
struct RvKey(PrivateKey, rsa_variants::PublicKey);

impl Key for RvKey {
    fn bits(&self) -> u32 {
        self.0.bits()
    }
    fn encrypt(&self, msg: &[u8]) -> Result<Vec<u8>, String> {
        self.1
            .encrypt_oaep(HashAlg::Sha256, msg)
            .map_err(|e| e.to_string())
    }
    fn decrypt(&self, ct: &[u8]) -> Result<Vec<u8>, String> {
        self.0
            .decrypt_oaep(HashAlg::Sha256, ct)
            .map_err(|e| e.to_string())
    }
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, String> {
        self.0
            .sign_pss(HashAlg::Sha256, msg)
            .map_err(|e| e.to_string())
    }
    fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        self.1.verify_pss(HashAlg::Sha256, msg, sig)
    }
    fn clone_box(&self) -> Box<dyn Key> {
        Box::new(self.clone())
    }
}

impl Lib for RsaVariants {
    fn id(&self) -> &'static str {
        "rsa-variants"
    }
    fn version(&self) -> String {
        format!("sipsec rsa-variants, {}", openssl::version::version())
    }
    fn variants(&self) -> &'static [&'static str] {
        &["crt", "standard", "multiprime"]
    }
    fn min_bits(&self) -> u32 {
        512
    }
    fn load(&self, pem: &str, variant: &str) -> Result<Box<dyn Key>, String> {
        let k = PrivateKey::from_pem(pem.as_bytes()).map_err(|e| e.to_string())?;
        let got = k.variant().name();
        if !got.starts_with(variant) {
            return Err(format!(
                "asked for a {variant} key, the PEM holds a {got} key"
            ));
        }
        let p = k.public_key().map_err(|e| e.to_string())?;
        Ok(Box::new(RvKey(k, p)))
    }
    fn keygen(&self, bits: u32) -> Result<(), String> {
        PrivateKey::generate(Variant::Crt, bits)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

// --- aws-lc-rs ---------------------------------------------------------

struct AwsLc;

mod aws {
    pub use aws_lc_rs::rand::SystemRandom;
    pub use aws_lc_rs::rsa::{
        KeySize, OaepPrivateDecryptingKey, OaepPublicEncryptingKey, PrivateDecryptingKey,
        OAEP_SHA256_MGF1SHA256,
    };
    pub use aws_lc_rs::signature::{
        KeyPair, RsaKeyPair, UnparsedPublicKey, RSA_PSS_2048_8192_SHA256, RSA_PSS_SHA256,
    };
}

#[derive(Clone)]
struct AwsKey {
    pkcs8: std::sync::Arc<(
        aws::RsaKeyPair,
        aws::OaepPrivateDecryptingKey,
        aws::OaepPublicEncryptingKey,
    )>,
}

impl Key for AwsKey {
    fn bits(&self) -> u32 {
        (self.pkcs8.0.public_modulus_len() * 8) as u32
    }
    fn encrypt(&self, msg: &[u8]) -> Result<Vec<u8>, String> {
        let mut out = vec![0; self.pkcs8.2.ciphertext_size()];
        let n = self
            .pkcs8
            .2
            .encrypt(&aws::OAEP_SHA256_MGF1SHA256, msg, &mut out, None)
            .map_err(|e| e.to_string())?
            .len();
        out.truncate(n);
        Ok(out)
    }
    fn decrypt(&self, ct: &[u8]) -> Result<Vec<u8>, String> {
        let mut out = vec![0; self.pkcs8.1.min_output_size()];
        let n = self
            .pkcs8
            .1
            .decrypt(&aws::OAEP_SHA256_MGF1SHA256, ct, &mut out, None)
            .map_err(|_| "OAEP decryption failed".to_owned())?
            .len();
        out.truncate(n);
        Ok(out)
    }
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, String> {
        let mut sig = vec![0; self.pkcs8.0.public_modulus_len()];
        self.pkcs8
            .0
            .sign(
                &aws::RSA_PSS_SHA256,
                &aws::SystemRandom::new(),
                msg,
                &mut sig,
            )
            .map_err(|e| e.to_string())?;
        Ok(sig)
    }
    fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        use aws::KeyPair as _;
        aws::UnparsedPublicKey::new(
            &aws::RSA_PSS_2048_8192_SHA256,
            self.pkcs8.0.public_key().as_ref(),
        )
        .verify(msg, sig)
        .is_ok()
    }
    fn clone_box(&self) -> Box<dyn Key> {
        Box::new(self.clone())
    }
}

impl Lib for AwsLc {
    fn id(&self) -> &'static str {
        "aws-lc-rs"
    }
    fn version(&self) -> String {
        concat!(
            "aws-lc-rs ",
            env!("LOCKED_AWS_LC_RS"),
            " (aws-lc-sys ",
            env!("LOCKED_AWS_LC_SYS"),
            ")"
        )
        .into()
    }
    fn variants(&self) -> &'static [&'static str] {
        &["crt"]
    }
    fn min_bits(&self) -> u32 {
        2048
    }
    fn load(&self, pem: &str, variant: &str) -> Result<Box<dyn Key>, String> {
        if variant != "crt" {
            return Err(format!(
                "aws-lc-rs computes with CRT keys only, not {variant}"
            ));
        }
        let der = pem_body(pem)?;
        let pair = aws::RsaKeyPair::from_pkcs8(&der).map_err(|e| e.to_string())?;
        let dec = aws::PrivateDecryptingKey::from_pkcs8(&der).map_err(|e| e.to_string())?;
        let enc = aws::OaepPublicEncryptingKey::new(dec.public_key()).map_err(|e| e.to_string())?;
        let dec = aws::OaepPrivateDecryptingKey::new(dec).map_err(|e| e.to_string())?;
        Ok(Box::new(AwsKey {
            pkcs8: std::sync::Arc::new((pair, dec, enc)),
        }))
    }
    fn keygen(&self, bits: u32) -> Result<(), String> {
        let size = match bits {
            2048 => aws::KeySize::Rsa2048,
            3072 => aws::KeySize::Rsa3072,
            4096 => aws::KeySize::Rsa4096,
            8192 => aws::KeySize::Rsa8192,
            other => {
                return Err(format!(
                    "aws-lc-rs generates 2048, 3072, 4096 or 8192 bits, not {other}"
                ))
            }
        };
        aws::RsaKeyPair::generate(size)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

// --- RustCrypto rsa (comparison only: RUSTSEC-2023-0071) ----------------

struct RustCrypto;

#[derive(Clone)]
struct RcKey(rsa::RsaPrivateKey, rsa::RsaPublicKey);

impl Key for RcKey {
    fn bits(&self) -> u32 {
        use rsa::traits::PublicKeyParts as _;
        (self.1.size() * 8) as u32
    }
    fn encrypt(&self, msg: &[u8]) -> Result<Vec<u8>, String> {
        self.1
            .encrypt(
                &mut rand::thread_rng(),
                rsa::Oaep::new::<sha2::Sha256>(),
                msg,
            )
            .map_err(|e| e.to_string())
    }
    fn decrypt(&self, ct: &[u8]) -> Result<Vec<u8>, String> {
        self.0
            .decrypt_blinded(
                &mut rand::thread_rng(),
                rsa::Oaep::new::<sha2::Sha256>(),
                ct,
            )
            .map_err(|e| e.to_string())
    }
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, String> {
        let digest = <sha2::Sha256 as sha2::Digest>::digest(msg);
        self.0
            .sign_with_rng(
                &mut rand::thread_rng(),
                rsa::Pss::new_with_salt::<sha2::Sha256>(32),
                &digest,
            )
            .map_err(|e| e.to_string())
    }
    fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        let digest = <sha2::Sha256 as sha2::Digest>::digest(msg);
        self.1
            .verify(rsa::Pss::new_with_salt::<sha2::Sha256>(32), &digest, sig)
            .is_ok()
    }
    fn clone_box(&self) -> Box<dyn Key> {
        Box::new(self.clone())
    }
}

impl Lib for RustCrypto {
    fn id(&self) -> &'static str {
        "rustcrypto"
    }
    fn version(&self) -> String {
        concat!(
            "RustCrypto rsa ",
            env!("LOCKED_RSA"),
            " (RUSTSEC-2023-0071: comparison only)"
        )
        .into()
    }
    fn variants(&self) -> &'static [&'static str] {
        &["crt"]
    }
    fn min_bits(&self) -> u32 {
        1024
    }
    fn load(&self, pem: &str, variant: &str) -> Result<Box<dyn Key>, String> {
        use rsa::pkcs8::DecodePrivateKey as _;
        if variant != "crt" {
            return Err(format!("this adapter loads CRT keys only, not {variant}"));
        }
        let k = rsa::RsaPrivateKey::from_pkcs8_pem(pem).map_err(|e| e.to_string())?;
        let p = k.to_public_key();
        Ok(Box::new(RcKey(k, p)))
    }
    fn keygen(&self, bits: u32) -> Result<(), String> {
        rsa::RsaPrivateKey::new(&mut rand::thread_rng(), bits as usize)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::decode_base64;

    #[test]
    fn base64() {
        assert_eq!(decode_base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_base64("aGVsbG8h").unwrap(), b"hello!");
        assert!(decode_base64("a*").is_none());
    }
}
