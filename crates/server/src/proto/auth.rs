//! Digest authentication on the server side (RFC 3261 §22, RFC 7616,
//! RFC 8760): stateless nonces, replay tracking, challenges, verification.
//!
//! A nonce is `hex(issued) ‖ hex(counter) ‖ hex(HMAC-SHA-256(secret,
//! issued ‖ counter ‖ realm))[..32]`: unique per challenge (the counter),
//! checkable by any worker without shared state, and its age gives
//! `stale=true` after expiry.
//!
//! The secret comes from the driver (`io::keys` keeps it in the data
//! directory as `nonce.key`, mode 0600). The replay tracker lives in
//! memory, so a nonce is accepted only by the run that issued it: the
//! counter's top 32 bits are the run's epoch (random per start, from the
//! driver), and a nonce of another run (before a restart, another node)
//! is answered `stale=true`: a fresh challenge, never a failure, and
//! never accepted blind. So is a well-formed nonce that the secret did not
//! make (an older secret, another server).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

use crate::proto::guard::{GuardConfig, Scope, SourceKey};
use crate::shards::{Current, Shards};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use sip_core::auth::Credentials;
use sip_core::digest::{self, Algorithm, Hex, Qop, ResponseInput};
use sip_core::{HeaderName, Message};
use subtle::ConstantTimeEq;

use crate::proto::users::{UserEntry, Users};

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
    /// Ours but expired, or well-formed under a secret we no longer
    /// hold: re-challenge with `stale=true`.
    Stale,
    /// Not a nonce of ours in form.
    Invalid,
}

/// The identity of a nonce this server issued: when, and the challenge
/// counter. Unique per challenge; the tracker keys on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NonceId {
    /// Issue time, Unix seconds.
    pub issued: u64,
    /// Challenge counter.
    pub counter: u64,
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Issues and checks nonces with a secret key.
pub struct NonceKey {
    secret: [u8; 32],
    ttl: u64,
    counter: std::sync::atomic::AtomicU64,
    epoch: u32,
}

impl std::fmt::Debug for NonceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NonceKey")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl NonceKey {
    /// A key from its secret (`io::keys` loads or makes one); nonces
    /// live `ttl` seconds.
    pub fn from_secret(secret: [u8; 32], ttl: u64) -> Self {
        Self {
            secret,
            ttl,
            counter: std::sync::atomic::AtomicU64::new(0),
            epoch: 0,
        }
    }

    /// This run's epoch (random per start, from the driver): only nonces
    /// issued under it are fresh, so none from before a restart is
    /// accepted by a replay tracker that does not remember it.
    pub fn with_epoch(mut self, epoch: u32) -> Self {
        self.epoch = epoch;
        self
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
        self.build(now, u64::from(self.epoch) << 32 | (c & 0xffff_ffff), realm)
    }

    /// Nonces live this long, seconds.
    pub fn ttl(&self) -> u64 {
        self.ttl
    }

    /// Checks a received nonce.
    pub fn check(&self, nonce: &str, realm: &str, now: u64) -> NonceState {
        self.check_id(nonce, realm, now).0
    }

    /// Checks a received nonce and names it.
    pub fn check_id(&self, nonce: &str, realm: &str, now: u64) -> (NonceState, NonceId) {
        let b = nonce.as_bytes();
        let none = NonceId {
            issued: 0,
            counter: 0,
        };
        if b.len() != NONCE_LEN || !b.iter().all(u8::is_ascii_hexdigit) {
            return (NonceState::Invalid, none);
        }
        let hex = |r: std::ops::Range<usize>| {
            std::str::from_utf8(&b[r])
                .ok()
                .filter(|s| s.bytes().all(|c| c.is_ascii_hexdigit()))
                .and_then(|s| u64::from_str_radix(s, 16).ok())
        };
        let (Some(issued), Some(counter)) = (hex(0..16), hex(16..32)) else {
            return (NonceState::Invalid, none);
        };
        let id = NonceId { issued, counter };
        let expect = self.build(issued, counter, realm);
        let ours = bool::from(expect.0.ct_eq(b));
        let this_run = counter >> 32 == u64::from(self.epoch);
        if !ours || !this_run || issued > now + 5 || now - issued.min(now) > self.ttl {
            (NonceState::Stale, id)
        } else {
            (NonceState::Fresh, id)
        }
    }
}

/// What the tracker says of a nonce count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NcVerdict {
    /// A count above every one seen with this nonce, or a retransmission
    /// of the very request that used the highest one.
    Accepted,
    /// A count already used by another request: a replay.
    Replay,
    /// The tracker is full of nonces still valid and does not hold this
    /// one: challenge again with `stale=true` rather than accept unseen.
    Full,
}

/// Who used a nonce: a hash of the authenticated username and the
/// source address. Each has a bounded share of the tracker, so a flood of
/// fresh logins costs the flooder (its own logins are re-challenged), not
/// every other user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// Keyed hash of the username.
    pub user: u64,
    /// Where the request came from, when it is held to a share (not
    /// loopback or a trusted node: see `Guard::limits_source`), and over
    /// what kind of transport: WebSocket has a share of its own, so a web
    /// page in a visitor's browser cannot use up that of the SIP phones
    /// behind the visitor's address (see `proto::guard`).
    pub source: Option<(SourceKey, Scope)>,
}

#[derive(Debug, Clone, Copy)]
struct Used {
    nc: u32,
    request: u64,
    owner: Owner,
}

#[derive(Debug, Default)]
struct NcShard {
    /// Nonces by issue time first, so the expired ones are at the front.
    seen: BTreeMap<NonceId, Used>,
}

/// How many tracked nonces each user and each source holds.
#[derive(Debug, Default)]
struct Shares {
    users: HashMap<u64, usize>,
    sources: HashMap<Option<(SourceKey, Scope)>, usize>,
}

impl Shares {
    fn release(&mut self, owner: Owner) {
        fn down<K: std::hash::Hash + Eq>(m: &mut HashMap<K, usize>, k: K) {
            if let std::collections::hash_map::Entry::Occupied(mut e) = m.entry(k) {
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    e.remove();
                }
            }
        }
        down(&mut self.users, owner.user);
        if owner.source.is_some() {
            down(&mut self.sources, owner.source);
        }
    }
}

/// Remembers the highest nonce count used with each nonce (RFC 7616
/// §3.4.5) and which request used it, so that a retransmission of that
/// same request (lost answer, UDP) is not mistaken for a replay.
///
/// Memory is bounded without forgetting a nonce that is still valid:
/// a nonce leaves only once it has expired (then [`NonceKey::check`]
/// calls it stale anyway); when every slot holds a valid nonce, a nonce
/// not yet held gets [`NcVerdict::Full`]. Shards are picked by the
/// challenge counter, so they fill evenly. One user or one source holds
/// at most its share ([`NcLimits`]); past it its new nonces get
/// [`NcVerdict::Full`] while everyone else's are still taken.
#[derive(Debug)]
pub struct NcTracker {
    shards: Shards<NcShard>,
    shares: Shards<Shares>,
    per_shard: usize,
    limits: NcLimits,
    ttl: u64,
}

/// The size of the replay tracker and each user's and source's share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NcLimits {
    /// Most nonces tracked in all.
    pub capacity: usize,
    /// Most held for one username.
    pub per_user: usize,
    /// Most held for one source address.
    pub per_source: usize,
}

impl NcLimits {
    /// The default shares of `capacity`: a user 1/64, a source 1/16.
    pub fn of(capacity: usize) -> Self {
        Self {
            capacity,
            per_user: (capacity / 64).max(1),
            per_source: (capacity / 16).max(1),
        }
    }
}

const NC_SHARDS: usize = 16;

impl NcTracker {
    /// Tracks at most about `limits.capacity` nonces that live `ttl`
    /// seconds.
    pub fn new(limits: NcLimits, ttl: u64) -> Self {
        Self {
            shards: Shards::new(NC_SHARDS, NcShard::default),
            shares: Shards::new(1, Shares::default),
            per_shard: (limits.capacity / NC_SHARDS).max(1),
            limits,
            ttl,
        }
    }

    /// Nonces held.
    pub fn len(&self) -> usize {
        self.shards.each().map(|s| s.seen.len()).sum()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Offers count `nc` of nonce `id` used by the request identified by
    /// `request` from `owner`, at `now` (Unix seconds).
    pub fn accept(&self, id: NonceId, nc: u32, request: u64, owner: Owner, now: u64) -> NcVerdict {
        let shard = (id.counter as usize) % NC_SHARDS;
        let mut m = self.shards.lock(shard);
        if let Some(last) = m.seen.get_mut(&id) {
            return if nc > last.nc {
                last.nc = nc;
                last.request = request;
                NcVerdict::Accepted
            } else if nc == last.nc && request == last.request {
                NcVerdict::Accepted
            } else {
                NcVerdict::Replay
            };
        }
        // Forget what has expired (then the nonce itself is stale), so
        // the shares count only nonces still valid.
        let mut gone = Vec::new();
        while let Some((first, used)) = m.seen.first_key_value() {
            if first.issued.saturating_add(self.ttl) >= now {
                break;
            }
            gone.push(used.owner);
            m.seen.pop_first();
        }
        {
            // Held for a few map operations only: every worker takes it.
            let mut shares = self.shares.lock(0);
            for o in gone {
                shares.release(o);
            }
            if m.seen.len() >= self.per_shard {
                return NcVerdict::Full;
            }
            let user = shares.users.get(&owner.user).copied().unwrap_or(0);
            let source = match owner.source {
                Some(_) => shares.sources.get(&owner.source).copied().unwrap_or(0),
                None => 0,
            };
            if user >= self.limits.per_user || source >= self.limits.per_source {
                return NcVerdict::Full;
            }
            *shares.users.entry(owner.user).or_default() += 1;
            if owner.source.is_some() {
                *shares.sources.entry(owner.source).or_default() += 1;
            }
        }
        m.seen.insert(id, Used { nc, request, owner });
        NcVerdict::Accepted
    }
}

/// Why a request was not authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// No credentials for our realm: challenge.
    Missing,
    /// Our nonce expired, a nonce under another secret, or a nonce the
    /// full replay tracker cannot take: challenge with `stale=true`.
    Stale,
    /// A nonce count another request already used: challenge with a
    /// fresh nonce (not counted toward a ban: the credentials were right,
    /// and a replay's source address proves nothing).
    Replay,
    /// Credentials this server cannot check (an algorithm it did not
    /// offer, no qop=auth, a nonce not in its form): challenge again,
    /// not counted.
    Unusable,
    /// With a fresh nonce this server issued: a wrong response, an unknown
    /// user or a digest-uri for another target. Challenge again and count
    /// the failure toward a ban.
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
    users: Current<Users>,
    algorithms: Vec<Algorithm>,
    request_ids: std::hash::RandomState,
    /// HA1s for users that do not exist, so that a lookup miss costs the
    /// same work as a wrong password.
    decoy: UserEntry,
}

impl Authenticator {
    /// Creates an authenticator challenging with `algorithms`, in order,
    /// tracking nonce counts within `limits`; `request_ids`
    /// (from the driver's randomness) keys the hash that tells a
    /// retransmission from a replay.
    pub fn new(
        realm: &str,
        key: NonceKey,
        users: Users,
        algorithms: &[Algorithm],
        limits: NcLimits,
        request_ids: std::hash::RandomState,
    ) -> Self {
        let decoy =
            UserEntry::from_password("\u{0}decoy", realm, &format!("{:?}", key.issue(0, "decoy")));
        let ttl = key.ttl();
        Self {
            realm: realm.to_owned(),
            key,
            nc: NcTracker::new(limits, ttl),
            users: Current::new(users),
            algorithms: algorithms.to_vec(),
            request_ids,
            decoy,
        }
    }

    /// The users loaded now.
    pub fn users(&self) -> Arc<Users> {
        self.users.get()
    }

    /// Replaces the users at once (a reload); requests in flight finish
    /// with the set they started with.
    pub fn set_users(&self, users: Users) {
        self.users.set(users);
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
    /// Proxy-Authorization when `proxy`), holding `src` to its share (of
    /// SIP transports).
    pub fn check<'m>(
        &self,
        msg: &Message<'m>,
        src: SocketAddr,
        proxy: bool,
        now: u64,
    ) -> AuthResult<'m> {
        let source = SourceKey::of(src.ip(), GuardConfig::default().ipv6_prefix);
        self.check_as(msg, (src, Some((source, Scope::All))), proxy, now, |u| {
            Some(std::borrow::Cow::Borrowed(u))
        })
    }

    /// [`check`](Self::check) with the username passed through `reveal`
    /// first (PrivaSIP: the username may be a pseudonym); `None` from it
    /// is [`AuthFailure::Undecryptable`]. Called only once the cheap
    /// checks (syntax, nonce, qop) have passed. `src` is the sender, and
    /// `share` the share of the replay tracker it is held to (its
    /// source's, for the scope its transport counts in; `None`: none).
    pub fn check_as<'m>(
        &self,
        msg: &Message<'m>,
        (src, share): (SocketAddr, Option<(SourceKey, Scope)>),
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
            None => return AuthResult::Failed(AuthFailure::Unusable),
            Some(a) => match Algorithm::from_token(a) {
                Some(a) if self.algorithms.contains(&a) => a,
                _ => return AuthResult::Failed(AuthFailure::Unusable),
            },
        };
        let id = match self.key.check_id(nonce, &self.realm, now) {
            (NonceState::Fresh, id) => id,
            (NonceState::Stale, _) => return AuthResult::Failed(AuthFailure::Stale),
            (NonceState::Invalid, _) => return AuthResult::Failed(AuthFailure::Unusable),
        };
        // We offer qop=auth only; RFC 2069-style responses are refused.
        let (Some(Qop::Auth), Some(cnonce), Some(nc)) =
            (c.qop.and_then(Qop::from_token), c.cnonce, c.nc)
        else {
            return AuthResult::Failed(AuthFailure::Unusable);
        };
        let Some(username) = reveal(username) else {
            return AuthResult::Failed(AuthFailure::Undecryptable);
        };
        let users = self.users();
        let entry = users.get(&username, &self.realm);
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
        // A retransmission is the same request from the same place: the
        // same bytes from the same address. Anything else reusing the
        // count (another Contact, another source) is a replay.
        let request = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = self.request_ids.build_hasher();
            std::hash::Hash::hash(&src, &mut h);
            h.write(msg.as_bytes());
            h.finish()
        };
        let Some(n) = c.nc_value() else {
            return AuthResult::Failed(AuthFailure::Unusable);
        };
        let owner = Owner {
            user: {
                use std::hash::BuildHasher;
                self.request_ids.hash_one(username.as_ref())
            },
            source: share,
        };
        match self.nc.accept(id, n, request, owner, now) {
            NcVerdict::Accepted => AuthResult::Ok(username),
            NcVerdict::Replay => AuthResult::Failed(AuthFailure::Replay),
            NcVerdict::Full => AuthResult::Failed(AuthFailure::Stale),
        }
    }

    /// Nonces the replay tracker holds.
    pub fn tracked_nonces(&self) -> usize {
        self.nc.len()
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
        // Not ours (another realm, a forged field, another secret): never
        // fresh, and stale rather than a failure.
        assert_eq!(k.check(n.as_str(), "other", 1000), NonceState::Stale);
        let mut forged = n.as_str().to_owned();
        forged.replace_range(15..16, "f");
        assert_eq!(
            k.check(&forged, "r", 1000),
            NonceState::Stale,
            "timestamp is authenticated"
        );
        assert_eq!(k.check("short", "r", 1000), NonceState::Invalid);
        assert_eq!(
            k.check(&"z".repeat(NONCE_LEN), "r", 1000),
            NonceState::Invalid
        );
        assert_eq!(
            NonceKey::from_secret([8; 32], 300).check(n.as_str(), "r", 1000),
            NonceState::Stale
        );
    }

    /// The same secret after a restart (another epoch): the replay tracker
    /// forgot the nonces of the run before, so they are stale, never fresh.
    #[test]
    fn a_nonce_of_another_run_is_stale() {
        let before = key().with_epoch(1);
        let n = before.issue(1000, "r");
        assert_eq!(before.check(n.as_str(), "r", 1000), NonceState::Fresh);
        let after = key().with_epoch(2);
        assert_eq!(after.check(n.as_str(), "r", 1000), NonceState::Stale);
        let m = after.issue(1000, "r");
        assert_eq!(after.check(m.as_str(), "r", 1000), NonceState::Fresh);
    }

    const ME: Owner = Owner {
        user: 1,
        source: Some((
            SourceKey {
                ip: std::net::IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1)),
                bits: 32,
            },
            Scope::All,
        )),
    };

    /// Limits where one owner may take the whole tracker.
    fn unshared(capacity: usize) -> NcLimits {
        NcLimits {
            capacity,
            per_user: capacity,
            per_source: capacity,
        }
    }

    /// One account flooding fresh logins from two addresses fills only
    /// its share: past it its own new nonces are re-challenged, while
    /// another user, and the same user's nonces already held, go on.
    /// Before, one account filled the whole tracker in a minute and then
    /// every user got `stale=true` on every try.
    #[test]
    fn a_flood_of_logins_fills_only_the_flooders_share() {
        let k = key();
        let limits = NcLimits {
            capacity: 16 * 64,
            per_user: 100,
            per_source: 300,
        };
        let t = NcTracker::new(limits, 300);
        let source = |i: u8| {
            let ip = std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, i));
            Some((SourceKey::of(ip, 64), Scope::All))
        };
        let flooder = |i: u64| Owner {
            user: 66,
            source: source((i % 2) as u8),
        };
        let held = id(&k, &k.issue(1000, "r"));
        assert_eq!(t.accept(held, 1, 1, flooder(0), 1000), NcVerdict::Accepted);
        let mut taken = 1;
        for i in 0..1000u64 {
            let n = id(&k, &k.issue(1000, "r"));
            if t.accept(n, 1, i, flooder(i), 1000) == NcVerdict::Accepted {
                taken += 1;
            }
        }
        assert_eq!(taken, 100, "the user's share");
        assert_eq!(t.accept(held, 2, 2, flooder(0), 1000), NcVerdict::Accepted);
        let other = Owner {
            user: 7,
            source: source(9),
        };
        let n = id(&k, &k.issue(1000, "r"));
        assert_eq!(t.accept(n, 1, 1, other, 1000), NcVerdict::Accepted);
        // Many accounts from one address: that address's share.
        let mut from_one = 0;
        for u in 0..1000u64 {
            let n = id(&k, &k.issue(1000, "r"));
            let o = Owner {
                user: 1000 + u,
                source: source(50),
            };
            if t.accept(n, 1, u, o, 1000) == NcVerdict::Accepted {
                from_one += 1;
            }
        }
        assert_eq!(from_one, 300, "the source's share");
        // The same address over WebSocket has a share of its own, so the
        // two kinds of client cannot use up each other's.
        let over_web = Owner {
            user: 9000,
            source: source(50).map(|(ip, _)| (ip, Scope::WebSocket)),
        };
        let n = id(&k, &k.issue(1000, "r"));
        assert_eq!(t.accept(n, 1, 1, over_web, 1000), NcVerdict::Accepted);
        // A source not held to a share (loopback, a trusted node): only
        // each user's share applies.
        let mut exempt = 0;
        for u in 0..200u64 {
            let n = id(&k, &k.issue(1000, "r"));
            let o = Owner {
                user: 5000 + u,
                source: None,
            };
            if t.accept(n, 1, u, o, 1000) == NcVerdict::Accepted {
                exempt += 1;
            }
        }
        assert_eq!(exempt, 200, "no share for an exempt source");
        // Once the flood's nonces expire, its share is free again.
        let later = id(&k, &k.issue(1400, "r"));
        assert_eq!(t.accept(later, 1, 1, flooder(0), 1400), NcVerdict::Accepted);
    }

    fn id(k: &NonceKey, n: &Nonce) -> NonceId {
        k.check_id(n.as_str(), "r", 1).1
    }

    #[test]
    fn nc_must_increase() {
        let k = key();
        let t = NcTracker::new(unshared(64), 300);
        let n = id(&k, &k.issue(1, "r"));
        assert_eq!(t.accept(n, 1, 11, ME, 1), NcVerdict::Accepted);
        assert_eq!(
            t.accept(n, 1, 11, ME, 1),
            NcVerdict::Accepted,
            "retransmission of the same request"
        );
        assert_eq!(
            t.accept(n, 1, 12, ME, 1),
            NcVerdict::Replay,
            "same count, other request: replay"
        );
        assert_eq!(t.accept(n, 3, 13, ME, 1), NcVerdict::Accepted);
        assert_eq!(t.accept(n, 2, 12, ME, 1), NcVerdict::Replay);
    }

    /// The tracker never forgets a nonce that is still valid, however many
    /// others come: a captured nc=1 stays refused until the nonce expires
    /// (then the nonce itself is stale), and a full tracker refuses to take
    /// unseen nonces rather than accept them unchecked. Before, a full
    /// shard was wiped and the capture was accepted again.
    #[test]
    fn a_full_tracker_forgets_only_expired_nonces() {
        let k = key();
        let capacity = 16 * 64;
        let t = NcTracker::new(unshared(capacity), 300);
        let victim = id(&k, &k.issue(1000, "r"));
        assert_eq!(t.accept(victim, 1, 7, ME, 1000), NcVerdict::Accepted);
        let mut full = 0;
        for i in 0..(4 * capacity as u64) {
            let n = id(&k, &k.issue(1000 + i / 1000, "r"));
            if t.accept(n, 1, i, ME, 1001 + i / 1000) == NcVerdict::Full {
                full += 1;
            }
            assert_eq!(
                t.accept(victim, 1, 8, ME, 1001),
                NcVerdict::Replay,
                "the captured request is refused after {i} others"
            );
        }
        assert_eq!(
            full,
            3 * capacity + 1,
            "every shard filled evenly (one slot holds the victim), then refused"
        );
        assert!(t.len() <= capacity);
        // Once the old nonces have expired their slots are reused.
        let later = id(&k, &k.issue(1400, "r"));
        assert_eq!(t.accept(later, 1, 1, ME, 1400), NcVerdict::Accepted);
    }
}
