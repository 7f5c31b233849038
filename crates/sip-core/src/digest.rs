//! HTTP Digest computations for SIP (RFC 3261 §22.4, RFC 7616 §3.4,
//! RFC 8760).
//!
//! ```text
//! HA1      = H(username ":" realm ":" password)
//! HA1-sess = H(HA1 ":" nonce ":" cnonce)
//! HA2      = H(method ":" digest-uri)                  qop=auth or none
//! HA2      = H(method ":" digest-uri ":" H(body))      qop=auth-int
//! response = H(HA1 ":" nonce ":" nc ":" cnonce ":" qop ":" HA2)   with qop
//! response = H(HA1 ":" nonce ":" HA2)                              RFC 2069
//! ```
//! All values are lowercase hex. Nothing here allocates.

use std::fmt;

use md5::Md5;
use sha2::{Digest, Sha256, Sha512_256};
use subtle::ConstantTimeEq;

/// A digest algorithm (RFC 7616 §3.1, RFC 8760 §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// MD5 (legacy; RFC 3261).
    Md5,
    /// MD5-sess.
    Md5Sess,
    /// SHA-256.
    Sha256,
    /// SHA-256-sess.
    Sha256Sess,
    /// SHA-512-256.
    Sha512_256,
    /// SHA-512-256-sess.
    Sha512_256Sess,
}

impl Algorithm {
    /// Parses the `algorithm` token, case-insensitively. A missing
    /// parameter means MD5 (RFC 7616 §3.3).
    pub fn from_token(s: &str) -> Option<Self> {
        const ALL: [(&str, Algorithm); 6] = [
            ("MD5", Algorithm::Md5),
            ("MD5-sess", Algorithm::Md5Sess),
            ("SHA-256", Algorithm::Sha256),
            ("SHA-256-sess", Algorithm::Sha256Sess),
            ("SHA-512-256", Algorithm::Sha512_256),
            ("SHA-512-256-sess", Algorithm::Sha512_256Sess),
        ];
        ALL.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(s))
            .map(|(_, a)| *a)
    }

    /// The token as written in challenges.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Md5 => "MD5",
            Algorithm::Md5Sess => "MD5-sess",
            Algorithm::Sha256 => "SHA-256",
            Algorithm::Sha256Sess => "SHA-256-sess",
            Algorithm::Sha512_256 => "SHA-512-256",
            Algorithm::Sha512_256Sess => "SHA-512-256-sess",
        }
    }

    /// Whether this is a `-sess` variant.
    pub fn is_session(self) -> bool {
        matches!(
            self,
            Algorithm::Md5Sess | Algorithm::Sha256Sess | Algorithm::Sha512_256Sess
        )
    }

    /// The same hash without `-sess`; HA1 values are stored per base hash.
    pub fn base(self) -> Self {
        match self {
            Algorithm::Md5 | Algorithm::Md5Sess => Algorithm::Md5,
            Algorithm::Sha256 | Algorithm::Sha256Sess => Algorithm::Sha256,
            Algorithm::Sha512_256 | Algorithm::Sha512_256Sess => Algorithm::Sha512_256,
        }
    }

    /// Length of the hex digest.
    pub fn hex_len(self) -> usize {
        match self.base() {
            Algorithm::Md5 => 32,
            _ => 64,
        }
    }

    fn hash(self, parts: &[&[u8]]) -> Hex {
        match self.base() {
            Algorithm::Md5 => hash_with::<Md5>(parts),
            Algorithm::Sha256 => hash_with::<Sha256>(parts),
            _ => hash_with::<Sha512_256>(parts),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Quality of protection (RFC 7616 §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qop {
    /// Authentication only.
    Auth,
    /// Authentication with body integrity.
    AuthInt,
}

impl Qop {
    /// Parses `auth` / `auth-int`.
    pub fn from_token(s: &str) -> Option<Self> {
        if s.eq_ignore_ascii_case("auth") {
            Some(Qop::Auth)
        } else if s.eq_ignore_ascii_case("auth-int") {
            Some(Qop::AuthInt)
        } else {
            None
        }
    }

    /// The token.
    pub fn as_str(self) -> &'static str {
        match self {
            Qop::Auth => "auth",
            Qop::AuthInt => "auth-int",
        }
    }
}

/// A lowercase hex digest held inline.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Hex {
    buf: [u8; 64],
    len: u8,
}

impl Hex {
    /// The hex text.
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever written into `buf`.
        std::str::from_utf8(&self.buf[..usize::from(self.len)]).unwrap_or("")
    }

    /// Parses stored hex (e.g. an HA1 from the users file); lowercases it.
    pub fn from_hex(s: &str) -> Option<Self> {
        if s.len() > 64 || s.is_empty() || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut h = Hex {
            buf: [0; 64],
            len: s.len() as u8,
        };
        h.buf[..s.len()].copy_from_slice(s.as_bytes());
        h.buf[..s.len()].make_ascii_lowercase();
        Some(h)
    }

    /// Constant-time comparison with a received hex string (case-insensitive).
    pub fn ct_eq_str(&self, other: &str) -> bool {
        let o = other.as_bytes();
        if o.len() != usize::from(self.len) {
            return false;
        }
        let mut lower = [0u8; 64];
        lower[..o.len()].copy_from_slice(o);
        lower[..o.len()].make_ascii_lowercase();
        bool::from(self.buf[..o.len()].ct_eq(&lower[..o.len()]))
    }
}

impl fmt::Debug for Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hex({})", self.as_str())
    }
}

impl fmt::Display for Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn hash_with<D: Digest>(parts: &[&[u8]]) -> Hex {
    let mut d = D::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            d.update(b":");
        }
        d.update(p);
    }
    let out = d.finalize();
    let mut h = Hex {
        buf: [0; 64],
        len: (out.len() * 2) as u8,
    };
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in out.iter().enumerate() {
        h.buf[2 * i] = DIGITS[usize::from(b >> 4)];
        h.buf[2 * i + 1] = DIGITS[usize::from(b & 15)];
    }
    h
}

/// `H(username ":" realm ":" password)`, the value a users file stores.
pub fn ha1(alg: Algorithm, username: &str, realm: &str, password: &str) -> Hex {
    alg.hash(&[username.as_bytes(), realm.as_bytes(), password.as_bytes()])
}

/// The inputs of one digest response computation.
#[derive(Debug, Clone, Copy)]
pub struct ResponseInput<'a> {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The stored `H(username:realm:password)` for the algorithm's base hash.
    pub ha1: &'a Hex,
    /// Server nonce.
    pub nonce: &'a str,
    /// Client nonce (required with qop or -sess).
    pub cnonce: &'a str,
    /// Nonce count as sent (eight hex digits).
    pub nc: &'a str,
    /// Quality of protection; `None` for RFC 2069 compatibility.
    pub qop: Option<Qop>,
    /// Request method.
    pub method: &'a str,
    /// digest-uri as sent.
    pub uri: &'a str,
    /// Message body (used by auth-int only).
    pub body: &'a [u8],
}

/// Who answers a digest challenge.
#[derive(Clone, Copy)]
pub struct Answerer<'a> {
    /// The user name the HA1 is computed over.
    pub username: &'a str,
    /// The password.
    pub password: &'a str,
    /// What to put in `username=` instead (a PrivaSIP pseudonym); `None`
    /// sends the user name.
    pub shown: Option<&'a str>,
}

impl std::fmt::Debug for Answerer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Answerer")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl<'a> Answerer<'a> {
    /// A user answering under their own name.
    pub fn new(username: &'a str, password: &'a str) -> Self {
        Self {
            username,
            password,
            shown: None,
        }
    }
}

/// A client's answer to a digest challenge (RFC 3261 §22.4, RFC 7616):
/// the value of the Authorization or Proxy-Authorization field, or `None`
/// when the challenge lacks realm or nonce or names an algorithm we cannot
/// compute. `qop=auth` is used when offered; `nc` counts uses of the nonce.
pub fn authorization(
    challenge: &crate::auth::Challenge<'_>,
    who: &Answerer<'_>,
    method: &str,
    uri: &str,
    cnonce: &str,
    nc: u32,
) -> Option<String> {
    if !challenge.scheme.eq_ignore_ascii_case("Digest") {
        return None;
    }
    let algorithm = Algorithm::from_token(challenge.algorithm.unwrap_or("MD5"))?;
    let (realm, nonce) = (challenge.realm?, challenge.nonce?);
    let qop = challenge.offers_qop("auth").then_some(Qop::Auth);
    let nc = format!("{nc:08x}");
    let ha1 = ha1(algorithm, who.username, realm, who.password);
    let username = who.shown.unwrap_or(who.username);
    let response = response(&ResponseInput {
        algorithm,
        ha1: &ha1,
        nonce,
        cnonce,
        nc: &nc,
        qop,
        method,
        uri,
        body: b"",
    });
    let mut out = format!(
        "Digest username=\"{username}\", realm=\"{realm}\", nonce=\"{nonce}\", uri=\"{uri}\", response=\"{}\", algorithm={}",
        response.as_str(),
        algorithm.as_str()
    );
    if qop.is_some() {
        out.push_str(&format!(", qop=auth, nc={nc}, cnonce=\"{cnonce}\""));
    }
    if let Some(o) = challenge.opaque {
        out.push_str(&format!(", opaque=\"{o}\""));
    }
    Some(out)
}

/// Computes the expected `response` value.
pub fn response(i: &ResponseInput<'_>) -> Hex {
    let alg = i.algorithm;
    let sess;
    let ha1 = if alg.is_session() {
        sess = alg.hash(&[
            i.ha1.as_str().as_bytes(),
            i.nonce.as_bytes(),
            i.cnonce.as_bytes(),
        ]);
        &sess
    } else {
        i.ha1
    };
    let ha2 = match i.qop {
        Some(Qop::AuthInt) => {
            let hb = alg.hash(&[i.body]);
            alg.hash(&[
                i.method.as_bytes(),
                i.uri.as_bytes(),
                hb.as_str().as_bytes(),
            ])
        }
        _ => alg.hash(&[i.method.as_bytes(), i.uri.as_bytes()]),
    };
    match i.qop {
        Some(q) => alg.hash(&[
            ha1.as_str().as_bytes(),
            i.nonce.as_bytes(),
            i.nc.as_bytes(),
            i.cnonce.as_bytes(),
            q.as_str().as_bytes(),
            ha2.as_str().as_bytes(),
        ]),
        None => alg.hash(&[
            ha1.as_str().as_bytes(),
            i.nonce.as_bytes(),
            ha2.as_str().as_bytes(),
        ]),
    }
}

/// Checks a received `response` in constant time.
pub fn verify(i: &ResponseInput<'_>, received: &str) -> bool {
    response(i).ct_eq_str(received)
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_client_answer_verifies_on_the_server_side() {
        use crate::auth::{Challenge, Credentials};
        for value in [
            "Digest realm=\"r\", nonce=\"n1\", qop=\"auth\", algorithm=SHA-256, opaque=\"o\"",
            "Digest realm=\"r\", nonce=\"n2\"",
        ] {
            let c = Challenge::parse(value).unwrap();
            // Under a pseudonym (PrivaSIP) the hash is still alice's.
            let hidden = Answerer {
                shown: Some("01abcd"),
                ..Answerer::new("alice", "pw")
            };
            let answer = authorization(&c, &hidden, "INVITE", "sip:bob@x", "c0ffee", 1).unwrap();
            let cred = Credentials::parse(&answer).unwrap();
            assert_eq!(cred.username, Some("01abcd"));
            let alg = Algorithm::from_token(cred.algorithm.unwrap()).unwrap();
            let ha1 = ha1(alg, "alice", "r", "pw");
            let input = ResponseInput {
                algorithm: alg,
                ha1: &ha1,
                nonce: cred.nonce.unwrap(),
                cnonce: cred.cnonce.unwrap_or(""),
                nc: cred.nc.unwrap_or(""),
                qop: cred.qop.and_then(Qop::from_token),
                method: "INVITE",
                uri: "sip:bob@x",
                body: b"",
            };
            assert!(verify(&input, cred.response.unwrap()), "{answer}");
        }
        let odd = Challenge::parse("Digest realm=\"r\", nonce=\"n\", algorithm=AKAv1-MD5").unwrap();
        assert_eq!(
            authorization(&odd, &Answerer::new("a", "b"), "REGISTER", "sip:x", "c", 1),
            None
        );
    }
    use super::*;

    /// RFC 2617 §3.5 example (MD5, qop=auth).
    #[test]
    fn rfc2617_section_3_5() {
        let h = ha1(
            Algorithm::Md5,
            "Mufasa",
            "testrealm@host.com",
            "Circle Of Life",
        );
        let r = response(&ResponseInput {
            algorithm: Algorithm::Md5,
            ha1: &h,
            nonce: "dcd98b7102dd2f0e8b11d0f600bfb0c093",
            cnonce: "0a4f113b",
            nc: "00000001",
            qop: Some(Qop::Auth),
            method: "GET",
            uri: "/dir/index.html",
            body: b"",
        });
        assert_eq!(r.as_str(), "6629fae49393a05397450978507c4ef1");
    }

    fn rfc7616(alg: Algorithm) -> Hex {
        let h = ha1(alg, "Mufasa", "http-auth@example.org", "Circle of Life");
        response(&ResponseInput {
            algorithm: alg,
            ha1: &h,
            nonce: "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v",
            cnonce: "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ",
            nc: "00000001",
            qop: Some(Qop::Auth),
            method: "GET",
            uri: "/dir/index.html",
            body: b"",
        })
    }

    /// RFC 7616 §3.9.1, MD5 and SHA-256 responses.
    #[test]
    fn rfc7616_section_3_9_1() {
        assert_eq!(
            rfc7616(Algorithm::Md5).as_str(),
            "8ca523f5e9506fed4657c9700eebdbec"
        );
        assert_eq!(
            rfc7616(Algorithm::Sha256).as_str(),
            "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1"
        );
    }

    /// SHA-512/256 over the same inputs; value cross-checked with Python's
    /// hashlib (OpenSSL's SHA-512/256).
    #[test]
    fn sha512_256_matches_openssl() {
        assert_eq!(
            rfc7616(Algorithm::Sha512_256).as_str(),
            "430d05014cecc49cab6fbe03176d41a1da86cbfe24a16580e22aaad928d960d0"
        );
    }

    #[test]
    fn verify_is_case_insensitive_and_length_checked() {
        let h = ha1(
            Algorithm::Md5,
            "Mufasa",
            "testrealm@host.com",
            "Circle Of Life",
        );
        let i = ResponseInput {
            algorithm: Algorithm::Md5,
            ha1: &h,
            nonce: "dcd98b7102dd2f0e8b11d0f600bfb0c093",
            cnonce: "0a4f113b",
            nc: "00000001",
            qop: Some(Qop::Auth),
            method: "GET",
            uri: "/dir/index.html",
            body: b"",
        };
        assert!(verify(&i, "6629FAE49393A05397450978507C4EF1"));
        assert!(!verify(&i, "6629fae49393a05397450978507c4ef"));
        assert!(!verify(&i, "6629fae49393a05397450978507c4ef2"));
        assert!(!verify(&i, ""));
    }

    #[test]
    fn sess_and_auth_int_and_rfc2069_differ() {
        let h = ha1(Algorithm::Sha256, "u", "r", "p");
        let base = ResponseInput {
            algorithm: Algorithm::Sha256,
            ha1: &h,
            nonce: "n",
            cnonce: "c",
            nc: "00000001",
            qop: Some(Qop::Auth),
            method: "REGISTER",
            uri: "sip:r",
            body: b"x",
        };
        let a = response(&base);
        let b = response(&ResponseInput {
            algorithm: Algorithm::Sha256Sess,
            ..base
        });
        let c = response(&ResponseInput {
            qop: Some(Qop::AuthInt),
            ..base
        });
        let d = response(&ResponseInput { qop: None, ..base });
        assert!(a != b && a != c && a != d && b != c);
        assert_eq!(Hex::from_hex(a.as_str()), Some(a));
        assert_eq!(
            Algorithm::from_token("sha-512-256-SESS"),
            Some(Algorithm::Sha512_256Sess)
        );
    }
}
