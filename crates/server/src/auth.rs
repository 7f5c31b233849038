//! Digest authentication on the server side (RFC 3261 §22, RFC 7616,
//! RFC 8760): stateless nonces, replay tracking, challenges, verification.
//!
//! A nonce is `hex(issued) ‖ hex(counter) ‖ hex(HMAC-SHA-256(secret,
//! issued ‖ counter ‖ realm))[..32]`: unique per challenge (the counter),
//! checkable by any worker without shared state, and its age gives
//! `stale=true` after expiry.

use std::collections::HashMap;
use std::sync::Mutex;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use sip_core::auth::Credentials;
use sip_core::digest::{self, Algorithm, Hex, Qop, ResponseInput};
use sip_core::{HeaderName, Message};
use subtle::ConstantTimeEq;

use crate::users::{UserEntry, Users};

/// Length of a nonce in characters.
pub const NONCE_LEN: usize = 64;

/// A nonce, held inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nonce([u8; NONCE_LEN]);

impl Nonce {
    /// The text.
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are written.
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

impl std::fmt::Debug for Nonce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of a received nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceState {
    /// Ours and fresh.
    Fresh,
    /// Ours but expired: re-challenge with `stale=true`.
    Stale,
    /// Not ours.
    Invalid,
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Issues and checks nonces with a secret key.
pub struct NonceKey {
    secret: [u8; 32],
    ttl: u64,
    counter: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for NonceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NonceKey")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl NonceKey {
    /// A key from the OS random generator; nonces live `ttl` seconds.
    pub fn random(ttl: u64) -> std::io::Result<Self> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Self::from_secret(secret, ttl))
    }

    /// A key from given bytes (tests).
    pub fn from_secret(secret: [u8; 32], ttl: u64) -> Self {
        Self {
            secret,
            ttl,
            counter: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn mac(&self, prefix: &[u8], realm: &str) -> [u8; 32] {
        // HMAC accepts keys of any length; 32 bytes cannot fail.
        let mut m =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.secret).expect("HMAC takes any key length");
        m.update(prefix);
        m.update(b"\x00");
        m.update(realm.as_bytes());
        m.finalize().into_bytes().into()
    }

    fn build(&self, issued: u64, counter: u64, realm: &str) -> Nonce {
        let mut n = [0u8; NONCE_LEN];
        for i in 0..16 {
            n[i] = HEX[((issued >> (60 - 4 * i)) & 15) as usize];
            n[16 + i] = HEX[((counter >> (60 - 4 * i)) & 15) as usize];
        }
        let mac = self.mac(&n[..32], realm);
        for (i, b) in mac[..16].iter().enumerate() {
            n[32 + 2 * i] = HEX[usize::from(b >> 4)];
            n[33 + 2 * i] = HEX[usize::from(b & 15)];
        }
        Nonce(n)
    }

    /// Issues a fresh, unique nonce at `now` (Unix seconds).
    pub fn issue(&self, now: u64, realm: &str) -> Nonce {
        let c = self
            .counter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.build(now, c, realm)
    }

    /// Checks a received nonce.
    pub fn check(&self, nonce: &str, realm: &str, now: u64) -> NonceState {
        let b = nonce.as_bytes();
        if b.len() != NONCE_LEN {
            return NonceState::Invalid;
        }
        let hex = |r: std::ops::Range<usize>| {
            std::str::from_utf8(&b[r])
                .ok()
                .filter(|s| s.bytes().all(|c| c.is_ascii_hexdigit()))
                .and_then(|s| u64::from_str_radix(s, 16).ok())
        };
        let (Some(issued), Some(counter)) = (hex(0..16), hex(16..32)) else {
            return NonceState::Invalid;
        };
        let expect = self.build(issued, counter, realm);
        if !bool::from(expect.0.ct_eq(b)) {
            return NonceState::Invalid;
        }
        if issued > now + 5 || now - issued.min(now) > self.ttl {
            NonceState::Stale
        } else {
            NonceState::Fresh
        }
    }
}

/// Remembers the highest nonce count used with each nonce (RFC 7616
/// §3.4.5) and which request used it, so that a retransmission of that
/// same request (lost answer, UDP) is not mistaken for a replay.
#[derive(Debug)]
pub struct NcTracker {
    shards: Vec<Mutex<HashMap<Nonce, (u32, u64)>>>,
    per_shard: usize,
}

impl NcTracker {
    /// Tracks at most about `capacity` nonces; when a shard is full it is
    /// cleared, so old nonces must be re-challenged (they are stale soon anyway).
    pub fn new(capacity: usize) -> Self {
        Self {
            shards: (0..16).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: (capacity / 16).max(16),
        }
    }

    /// Accepts `nc` if it is above every count seen with `nonce`, or equal
    /// to the last one and `request` identifies the same request (a
    /// retransmission).
    pub fn accept(&self, nonce: &str, nc: u32, request: u64) -> bool {
        let Ok(key) = <[u8; NONCE_LEN]>::try_from(nonce.as_bytes()) else {
            return false;
        };
        let shard = usize::from(key[NONCE_LEN - 1]) % self.shards.len();
        let mut m = self.shards[shard].lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= self.per_shard && !m.contains_key(&Nonce(key)) {
            m.clear();
        }
        let last = m.entry(Nonce(key)).or_insert((0, 0));
        if nc > last.0 {
            *last = (nc, request);
            true
        } else {
            nc == last.0 && request == last.1
        }
    }
}

/// Why a request was not authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// No credentials for our realm: challenge.
    Missing,
    /// Our nonce, expired: challenge with `stale=true`.
    Stale,
    /// Wrong password, unknown user, foreign nonce, replayed nc, bad uri:
    /// challenge again and count the failure.
    Rejected,
    /// Credentials that do not parse: 400.
    Malformed,
    /// A pseudonym username that does not open (PrivaSIP): the uniform
    /// refusal.
    Undecryptable,
}

/// The outcome of checking a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthResult<'a> {
    /// Authenticated as this username (revealed, when it came encrypted).
    Ok(std::borrow::Cow<'a, str>),
    /// Not authenticated.
    Failed(AuthFailure),
}

/// Whether the digest-uri names this request's target (RFC 3261 §22.4):
/// the Request-URI itself, or a SIP URI for the same host and port (some
/// clients, SIPp among them, sign the server's URI).
fn digest_uri_matches(ruri: &sip_core::Uri<'_>, digest_uri: &str) -> bool {
    if ruri.as_str() == digest_uri {
        return true;
    }
    match sip_core::Uri::parse(digest_uri, sip_core::UriContext::Header) {
        Ok(d) => d.is_sip() && ruri.is_sip() && d.host() == ruri.host() && d.port() == ruri.port(),
        Err(_) => false,
    }
}

/// Everything needed to authenticate requests in one realm.
#[derive(Debug)]
pub struct Authenticator {
    /// The realm challenged.
    pub realm: String,
    key: NonceKey,
    nc: NcTracker,
    users: Users,
    algorithms: Vec<Algorithm>,
    request_ids: std::hash::RandomState,
    /// HA1s for users that do not exist, so that a lookup miss costs the
    /// same work as a wrong password.
    decoy: UserEntry,
}

impl Authenticator {
    /// Creates an authenticator challenging with `algorithms`, in order.
    pub fn new(realm: &str, key: NonceKey, users: Users, algorithms: &[Algorithm]) -> Self {
        let decoy =
            UserEntry::from_password("\u{0}decoy", realm, &format!("{:?}", key.issue(0, "decoy")));
        Self {
            realm: realm.to_owned(),
            key,
            nc: NcTracker::new(1 << 16),
            users,
            algorithms: algorithms.to_vec(),
            request_ids: std::hash::RandomState::new(),
            decoy,
        }
    }

    /// The users loaded.
    pub fn users(&self) -> &Users {
        &self.users
    }

    /// Appends one challenge header per configured algorithm, in order,
    /// for a 401 (`WWW-Authenticate`) or 407 (`Proxy-Authenticate`).
    pub fn challenges(
        &self,
        proxy: bool,
        stale: bool,
        now: u64,
        out: &mut Vec<(&'static str, String)>,
    ) {
        let name = if proxy {
            "Proxy-Authenticate"
        } else {
            "WWW-Authenticate"
        };
        let nonce = self.key.issue(now, &self.realm);
        let stale = if stale { ", stale=true" } else { "" };
        for alg in &self.algorithms {
            let alg = alg.as_str();
            out.push((
                name,
                format!(
                    "Digest realm=\"{}\", nonce=\"{}\", qop=\"auth\", algorithm={alg}{stale}",
                    self.realm,
                    nonce.as_str()
                ),
            ));
        }
    }

    /// Checks the request's credentials (Authorization, or
    /// Proxy-Authorization when `proxy`).
    pub fn check<'m>(&self, msg: &Message<'m>, proxy: bool, now: u64) -> AuthResult<'m> {
        self.check_as(msg, proxy, now, |u| Some(std::borrow::Cow::Borrowed(u)))
    }

    /// [`check`](Self::check) with the username passed through `reveal`
    /// first (PrivaSIP: the username may be a pseudonym); `None` from it
    /// is [`AuthFailure::Undecryptable`]. Called only once the cheap
    /// checks (syntax, nonce, qop) have passed.
    pub fn check_as<'m>(
        &self,
        msg: &Message<'m>,
        proxy: bool,
        now: u64,
        reveal: impl FnOnce(&'m str) -> Option<std::borrow::Cow<'m, str>>,
    ) -> AuthResult<'m> {
        let wanted = if proxy {
            HeaderName::ProxyAuthorization
        } else {
            HeaderName::Authorization
        };
        let mut found = None;
        for h in msg.headers_named(wanted) {
            match Credentials::parse_at(h.value, msg.offset_of(h.value), wanted) {
                Ok(c) if c.is_digest() && c.realm == Some(self.realm.as_str()) => {
                    found = Some(c);
                    break;
                }
                Ok(_) => {}
                Err(_) => return AuthResult::Failed(AuthFailure::Malformed),
            }
        }
        let Some(c) = found else {
            return AuthResult::Failed(AuthFailure::Missing);
        };
        let (Some(username), Some(nonce), Some(uri), Some(response)) =
            (c.username, c.nonce, c.uri, c.response)
        else {
            return AuthResult::Failed(AuthFailure::Malformed);
        };
        let algorithm = match c.algorithm {
            None if self.algorithms.contains(&Algorithm::Md5) => Algorithm::Md5,
            None => return AuthResult::Failed(AuthFailure::Rejected),
            Some(a) => match Algorithm::from_token(a) {
                Some(a) if self.algorithms.contains(&a) => a,
                _ => return AuthResult::Failed(AuthFailure::Rejected),
            },
        };
        match self.key.check(nonce, &self.realm, now) {
            NonceState::Fresh => {}
            NonceState::Stale => return AuthResult::Failed(AuthFailure::Stale),
            NonceState::Invalid => return AuthResult::Failed(AuthFailure::Rejected),
        }
        // We offer qop=auth only; RFC 2069-style responses are refused.
        let (Some(Qop::Auth), Some(cnonce), Some(nc)) =
            (c.qop.and_then(Qop::from_token), c.cnonce, c.nc)
        else {
            return AuthResult::Failed(AuthFailure::Rejected);
        };
        let Some(username) = reveal(username) else {
            return AuthResult::Failed(AuthFailure::Undecryptable);
        };
        let entry = self.users.get(&username, &self.realm);
        let ha1: &Hex = entry.unwrap_or(&self.decoy).ha1(algorithm);
        let input = ResponseInput {
            algorithm,
            ha1,
            nonce,
            cnonce,
            nc,
            qop: Some(Qop::Auth),
            method: msg.method().as_str(),
            uri,
            body: b"",
        };
        let good = digest::verify(&input, response);
        let uri_ok = msg
            .request_uri()
            .is_some_and(|r| digest_uri_matches(r, uri));
        if !(good && uri_ok && entry.is_some()) {
            return AuthResult::Failed(AuthFailure::Rejected);
        }
        let request = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = self.request_ids.build_hasher();
            h.write(msg.call_id().as_bytes());
            h.write_u32(msg.cseq().seq);
            h.write(msg.method().as_str().as_bytes());
            h.finish()
        };
        match c.nc_value() {
            Some(n) if self.nc.accept(nonce, n, request) => AuthResult::Ok(username),
            _ => AuthResult::Failed(AuthFailure::Rejected),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> NonceKey {
        NonceKey::from_secret([7; 32], 300)
    }

    #[test]
    fn nonces_verify_expire_and_resist_forgery() {
        let k = key();
        let n = k.issue(1000, "r");
        assert_ne!(k.issue(1000, "r"), n, "every challenge gets its own nonce");
        assert_eq!(k.check(n.as_str(), "r", 1000), NonceState::Fresh);
        assert_eq!(k.check(n.as_str(), "r", 1300), NonceState::Fresh);
        assert_eq!(k.check(n.as_str(), "r", 1301), NonceState::Stale);
        assert_eq!(k.check(n.as_str(), "other", 1000), NonceState::Invalid);
        let mut forged = n.as_str().to_owned();
        forged.replace_range(15..16, "f");
        assert_eq!(
            k.check(&forged, "r", 1000),
            NonceState::Invalid,
            "timestamp is authenticated"
        );
        assert_eq!(k.check("short", "r", 1000), NonceState::Invalid);
        assert_eq!(
            NonceKey::from_secret([8; 32], 300).check(n.as_str(), "r", 1000),
            NonceState::Invalid
        );
    }

    #[test]
    fn nc_must_increase() {
        let t = NcTracker::new(64);
        let n = key().issue(1, "r");
        assert!(t.accept(n.as_str(), 1, 11));
        assert!(
            t.accept(n.as_str(), 1, 11),
            "retransmission of the same request"
        );
        assert!(
            !t.accept(n.as_str(), 1, 12),
            "same count, other request: replay"
        );
        assert!(t.accept(n.as_str(), 3, 13));
        assert!(!t.accept(n.as_str(), 2, 12));
    }
}
