//! The test keys every adapter uses, and the message lengths per operation.

use super::*;
use crate::error::Error;

/// The largest OAEP-SHA-256 message for a key of `bits` (190 at 2048,
/// the published size).
pub fn oaep_max(bits: u32) -> usize {
    (bits as usize / 8).saturating_sub(2 * 32 + 2)
}

/// The published message size (OAEP-SHA-256's largest at 2048 bits).
pub const PUBLISHED_MSG: usize = 190;

/// Message sizes measured for `op` at `bits`: OAEP takes the published
/// 190 bytes where the key allows it and the largest the key allows;
/// PSS signs 190 bytes; key generation has none.
pub fn msg_lens(op: &str, bits: u32) -> Vec<usize> {
    match op {
        "keygen" => vec![0],
        "encrypt" | "decrypt" => {
            let max = oaep_max(bits);
            if PUBLISHED_MSG < max {
                vec![PUBLISHED_MSG, max]
            } else {
                vec![max]
            }
        }
        _ => vec![PUBLISHED_MSG],
    }
}

/// A shared test key.
pub struct TestKey {
    /// `k2048` for CRT keys, `k2048-standard`, `k2048-multiprime`.
    pub id: String,
    /// Modulus bits.
    pub bits: u32,
    /// One of [`VARIANTS`].
    pub variant: &'static str,
    /// PKCS#8 PEM (zero factors for a standard key; PKCS#1 version 1
    /// with other-prime-info for a multi-prime key).
    pub pem: String,
    /// n, e and d as hex, for libraries that build a key from them.
    pub ned: [String; 3],
}

impl TestKey {
    pub(super) fn new(bits: u32, variant: &'static str, key: &PrivateKey) -> Result<Self, Error> {
        let pem =
            String::from_utf8(key.to_pkcs8_pem().map_err(Error::crypto)?).map_err(Error::crypto)?;
        let rsa = key.pkey().rsa().map_err(Error::crypto)?;
        let hex = |b: &openssl::bn::BigNumRef| -> Result<String, Error> {
            Ok(b.to_hex_str().map_err(Error::crypto)?.to_ascii_lowercase())
        };
        Ok(Self {
            id: if variant == "crt" {
                format!("k{bits}")
            } else {
                format!("k{bits}-{variant}")
            },
            bits,
            variant,
            pem,
            ned: [hex(rsa.n())?, hex(rsa.e())?, hex(rsa.d())?],
        })
    }

    pub(super) fn load_request(&self) -> Value {
        json!({
            "op": "load", "id": self.id, "variant": self.variant, "pem": self.pem,
            "n": self.ned[0], "e": self.ned[1], "d": self.ned[2],
        })
    }
}

/// Makes the shared keys with rsa-variants (OpenSSL): per size a CRT key,
/// the same key without its factors (standard) and a 3-prime key, as
/// `variants` asks; writes them into `dir` when given.
pub fn make_keys(
    sizes: &[u32],
    variants: &[String],
    dir: Option<&Path>,
) -> Result<Vec<TestKey>, Error> {
    let mut keys = Vec::new();
    for &bits in sizes {
        let crt = PrivateKey::generate(Variant::Crt, bits).map_err(Error::crypto)?;
        keys.push(TestKey::new(bits, "crt", &crt)?);
        if variants.iter().any(|v| v == "standard") {
            keys.push(TestKey::new(
                bits,
                "standard",
                &crt.to_standard().map_err(Error::crypto)?,
            )?);
        }
        if variants.iter().any(|v| v == "multiprime") {
            let mp = PrivateKey::generate(Variant::MultiPrime { primes: 3 }, bits)
                .map_err(Error::crypto)?;
            keys.push(TestKey::new(bits, "multiprime", &mp)?);
        }
    }
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir).map_err(Error::io(dir.display()))?;
        for k in &keys {
            let p = dir.join(format!("rsa-{}-{}.pem", k.bits, k.variant));
            std::fs::write(&p, &k.pem).map_err(Error::io(p.display()))?;
        }
    }
    Ok(keys)
}
