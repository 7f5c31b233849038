//! SHAKEN PASSporTs (RFC 8225, RFC 8588): a compact JWS (RFC 7515) over
//! a JSON header and claims, signed with ES256 (ECDSA P-256 over
//! SHA-256, the signature as the 64 bytes of `r ‖ s`, RFC 7518 §3.4).
//! The JSON is written with its keys in lexicographic order and no white
//! space (RFC 8225 §9), as other implementations write it.
//!
//! A token from the network is untrusted: [`Passport::decode`] bounds its
//! size, checks every part and never panics; a signature is checked only
//! with [`Passport::verify`].

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use openssl::bn::BigNum;
use openssl::ec::EcKey;
use openssl::ecdsa::EcdsaSig;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private, Public};
use serde::{Deserialize, Serialize};

/// The longest token read: real SHAKEN tokens are about 400 bytes.
pub const MAX_TOKEN: usize = 4096;

/// Why a token cannot be read or signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PassportError {
    /// Not three base64url parts of JSON within the bounds.
    #[error("PASSporT malformed: {0}")]
    Malformed(&'static str),
    /// A header or claim other than SHAKEN's.
    #[error("PASSporT not acceptable: {0}")]
    Unacceptable(&'static str),
    /// The key could not sign.
    #[error("signing failed: {0}")]
    Signing(String),
}

/// The JOSE header (RFC 8225 §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// `ES256`.
    pub alg: String,
    /// `shaken`.
    pub ppt: String,
    /// `passport`.
    pub typ: String,
    /// Where the signer's certificate is.
    pub x5u: String,
}

/// The caller (RFC 8225 §5.2.1): a telephone number (`{"tn":"…"}`), or a
/// URI for an identity that is not one (`{"uri":"…"}`, e.g. a PrivaSIP
/// pseudonym).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Orig {
    /// The number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tn: Option<String>,
    /// The URI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
}

impl Orig {
    /// The caller `tn`.
    pub fn tn(tn: impl Into<String>) -> Self {
        Self {
            tn: Some(tn.into()),
            uri: None,
        }
    }
}

/// The called parties: numbers (`{"tn":["…"]}`) and URIs (`{"uri":[…]}`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Dest {
    /// The numbers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tn: Vec<String>,
    /// The URIs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uri: Vec<String>,
}

impl Dest {
    /// The callee `tn`.
    pub fn tn(tn: impl Into<String>) -> Self {
        Self {
            tn: vec![tn.into()],
            uri: Vec::new(),
        }
    }
}

/// The SHAKEN claims (RFC 8588 §6), in lexicographic key order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// A, B or C.
    pub attest: String,
    /// The called numbers.
    pub dest: Dest,
    /// Seconds since 1970 when the token was made.
    pub iat: i64,
    /// The calling number.
    pub orig: Orig,
    /// A UUID naming where the call entered the network.
    pub origid: String,
}

/// A decoded token: header, claims, and what the signature covers.
#[derive(Debug, Clone)]
pub struct Passport {
    /// The JOSE header.
    pub header: Header,
    /// The claims.
    pub claims: Claims,
    signing_input: String,
    signature: Vec<u8>,
}

/// An ES256 signing key: an EC P-256 private key.
#[derive(Clone)]
pub struct SigningKey(EcKey<Private>);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(P-256)")
    }
}

impl SigningKey {
    /// A PEM private key (PKCS#8 or SEC 1), which must be EC P-256.
    pub fn from_pem(pem: &[u8]) -> Result<Self, String> {
        let key = PKey::private_key_from_pem(pem).map_err(|e| format!("not a private key: {e}"))?;
        let ec = key
            .ec_key()
            .map_err(|_| "not an EC key (ES256 needs P-256)".to_string())?;
        if ec.group().curve_name() != Some(Nid::X9_62_PRIME256V1) {
            return Err("not a P-256 key (ES256 needs P-256)".into());
        }
        Ok(Self(ec))
    }

    /// Signs `claims` for the certificate at `x5u`: the compact token.
    pub fn sign(&self, claims: &Claims, x5u: &str) -> Result<String, PassportError> {
        let header = Header {
            alg: "ES256".into(),
            ppt: "shaken".into(),
            typ: "passport".into(),
            x5u: x5u.into(),
        };
        let json = |v: Result<String, serde_json::Error>| {
            v.map_err(|e| PassportError::Signing(e.to_string()))
        };
        let mut token = URL_SAFE_NO_PAD.encode(json(serde_json::to_string(&header))?);
        token.push('.');
        URL_SAFE_NO_PAD.encode_string(json(serde_json::to_string(claims))?, &mut token);
        let digest = openssl::sha::sha256(token.as_bytes());
        let sig =
            EcdsaSig::sign(&digest, &self.0).map_err(|e| PassportError::Signing(e.to_string()))?;
        let mut raw = [0u8; 64];
        let (r, s) = (sig.r().to_vec_padded(32), sig.s().to_vec_padded(32));
        let (Ok(r), Ok(s)) = (r, s) else {
            return Err(PassportError::Signing("signature out of range".into()));
        };
        raw[..32].copy_from_slice(&r);
        raw[32..].copy_from_slice(&s);
        token.push('.');
        URL_SAFE_NO_PAD.encode_string(raw, &mut token);
        Ok(token)
    }
}

fn part(b64: &str, what: &'static str) -> Result<Vec<u8>, PassportError> {
    URL_SAFE_NO_PAD
        .decode(b64)
        .map_err(|_| PassportError::Malformed(what))
}

impl Passport {
    /// Reads a compact token (`header.claims.signature`) without checking
    /// its signature; only SHAKEN tokens (ES256, `ppt` shaken, `typ`
    /// passport when given) are accepted.
    pub fn decode(token: &str) -> Result<Self, PassportError> {
        if token.len() > MAX_TOKEN {
            return Err(PassportError::Malformed("token too long"));
        }
        let mut parts = token.split('.');
        let (Some(h), Some(c), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(PassportError::Malformed("not three parts"));
        };
        if c.is_empty() {
            return Err(PassportError::Unacceptable(
                "compact form: SHAKEN claims cannot be rebuilt from SIP",
            ));
        }
        let header: Header = serde_json::from_slice(&part(h, "header not base64url")?)
            .map_err(|_| PassportError::Malformed("header not SHAKEN JSON"))?;
        let claims: Claims = serde_json::from_slice(&part(c, "claims not base64url")?)
            .map_err(|_| PassportError::Malformed("claims not SHAKEN JSON"))?;
        let signature = part(s, "signature not base64url")?;
        if header.alg != "ES256" {
            return Err(PassportError::Unacceptable("alg is not ES256"));
        }
        if header.ppt != "shaken" {
            return Err(PassportError::Unacceptable("ppt is not shaken"));
        }
        if !header.typ.is_empty() && header.typ != "passport" {
            return Err(PassportError::Unacceptable("typ is not passport"));
        }
        if signature.len() != 64 {
            return Err(PassportError::Malformed("ES256 signature is not 64 bytes"));
        }
        if claims.orig.tn.is_none() && claims.orig.uri.is_none() {
            return Err(PassportError::Malformed("orig has neither tn nor uri"));
        }
        if claims.dest.tn.is_empty() && claims.dest.uri.is_empty() {
            return Err(PassportError::Malformed("dest is empty"));
        }
        if !matches!(claims.attest.as_str(), "A" | "B" | "C") {
            return Err(PassportError::Unacceptable("attest is not A, B or C"));
        }
        Ok(Self {
            header,
            claims,
            signing_input: format!("{h}.{c}"),
            signature,
        })
    }

    /// Whether the signature is `key`'s (an EC P-256 public key).
    pub fn verify(&self, key: &EcKey<Public>) -> bool {
        let digest = openssl::sha::sha256(self.signing_input.as_bytes());
        let (Ok(r), Ok(s)) = (
            BigNum::from_slice(&self.signature[..32]),
            BigNum::from_slice(&self.signature[32..]),
        ) else {
            return false;
        };
        EcdsaSig::from_private_components(r, s)
            .and_then(|sig| sig.verify(&digest, key))
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openssl::ec::EcGroup;

    fn keypair() -> (SigningKey, EcKey<Public>) {
        let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
        let key = EcKey::generate(&group).unwrap();
        let public = EcKey::from_public_key(&group, key.public_key()).unwrap();
        (SigningKey(key), public)
    }

    fn claims() -> Claims {
        Claims {
            attest: "A".into(),
            dest: Dest::tn("12155551213"),
            iat: 1_700_000_000,
            orig: Orig::tn("12155551212"),
            origid: "123e4567-e89b-12d3-a456-426655440000".into(),
        }
    }

    #[test]
    fn signed_tokens_verify_with_their_key_only() {
        let (key, public) = keypair();
        let token = key.sign(&claims(), "https://cr.example/c.pem").unwrap();
        let p = Passport::decode(&token).unwrap();
        assert_eq!(p.claims, claims());
        assert_eq!(p.header.x5u, "https://cr.example/c.pem");
        assert!(p.verify(&public));
        let (_, other) = keypair();
        assert!(!p.verify(&other));
    }

    #[test]
    fn json_is_in_lexicographic_key_order_without_spaces() {
        let (key, _) = keypair();
        let token = key.sign(&claims(), "https://x/c.pem").unwrap();
        let mut parts = token.split('.');
        let h = URL_SAFE_NO_PAD.decode(parts.next().unwrap()).unwrap();
        let c = URL_SAFE_NO_PAD.decode(parts.next().unwrap()).unwrap();
        assert_eq!(
            String::from_utf8(h).unwrap(),
            r#"{"alg":"ES256","ppt":"shaken","typ":"passport","x5u":"https://x/c.pem"}"#
        );
        assert_eq!(
            String::from_utf8(c).unwrap(),
            r#"{"attest":"A","dest":{"tn":["12155551213"]},"iat":1700000000,"orig":{"tn":"12155551212"},"origid":"123e4567-e89b-12d3-a456-426655440000"}"#
        );
    }

    #[test]
    fn a_changed_claim_breaks_the_signature() {
        let (key, public) = keypair();
        let token = key.sign(&claims(), "https://x/c.pem").unwrap();
        let mut c = claims();
        c.dest.tn = vec!["19995550000".into()];
        let forged = format!(
            "{}.{}.{}",
            token.split('.').next().unwrap(),
            URL_SAFE_NO_PAD.encode(serde_json::to_string(&c).unwrap()),
            token.rsplit('.').next().unwrap()
        );
        assert!(!Passport::decode(&forged).unwrap().verify(&public));
    }

    #[test]
    fn malformed_and_foreign_tokens_are_refused() {
        let (key, _) = keypair();
        let token = key.sign(&claims(), "https://x/c.pem").unwrap();
        let (h, rest) = token.split_once('.').unwrap();
        let (_, s) = rest.split_once('.').unwrap();
        let cases = [
            "".to_string(),
            "a.b".into(),
            "a.b.c.d".into(),
            format!("{h}..{s}"),
            format!("{h}.!!.{s}"),
            format!("{h}.{}.{s}", URL_SAFE_NO_PAD.encode("{}")),
            format!(
                "{}.{}",
                URL_SAFE_NO_PAD
                    .encode(r#"{"alg":"RS256","ppt":"shaken","typ":"passport","x5u":"x"}"#),
                rest
            ),
            format!(
                "{}.{}",
                URL_SAFE_NO_PAD.encode(r#"{"alg":"ES256","ppt":"div","typ":"passport","x5u":"x"}"#),
                rest
            ),
            format!("{h}.{}.AAAA", rest.split('.').next().unwrap()),
            "x".repeat(MAX_TOKEN + 1),
        ];
        for t in cases {
            assert!(Passport::decode(&t).is_err(), "{t}");
        }
    }
}
