//! PrivaSIP at the proxy: user IDs that arrive as pseudonyms encrypted
//! for this server (Request-URI, To, From, the digest username) are
//! revealed for authentication and the location lookup only; what is
//! forwarded keeps them encrypted.
//!
//! Stateless, every pseudonym is decrypted where it is needed. Stateful,
//! a bounded cache maps pseudonym text → ID for a while, so the same
//! pseudonym in several headers, in the INVITE sent again with
//! credentials, and in the dialog's later requests costs one decryption.
//! Anything shaped like a pseudonym that does not open is refused, always
//! the same way.
//!
//! PrivaSIP-3 ([`privacy::tickets`]): a REGISTER that carries an
//! enrollment (`Privasip-Enroll`, a secret sealed to this proxy's HPKE
//! key) gets a batch of single-use tickets in its 200
//! (`Privasip-Tickets`, sealed under the user key the enrollment gives);
//! a ticket used where an ID goes opens with one AES-256-GCM-SIV
//! decryption under the ticket key, until it expires.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use privacy::aes::AesId;
use privacy::keys::Decipher;
use privacy::tickets::TicketKeys;
use privacy::{Encoding, IdDecipher, Scheme};

use crate::proto::users::Users;
use crate::shards::Shards;

pub use crate::config::{AesMode, PrivacySettings};

/// Why the PrivaSIP keys could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrivacyError {
    /// A private key could not be read or used.
    #[error("{name}: {reason}")]
    Key {
        /// The key file.
        name: String,
        /// Why.
        reason: String,
    },
    /// Two keys of one scheme share a key id.
    #[error("{name}: a second {scheme} key with id {id}")]
    DuplicateKey {
        /// The second key's file.
        name: String,
        /// The scheme.
        scheme: &'static str,
        /// The key id.
        id: u8,
    },
    /// AES pseudonyms were asked for without users to derive keys from.
    #[error("aes pseudonyms need authentication on ([auth] enabled, a users file)")]
    AesNeedsUsers,
    /// An AES key could not be derived.
    #[error("aes: {0}")]
    Aes(String),
    /// Nothing to decrypt with.
    #[error("give at least one key, or aes with users")]
    NoKeys,
    /// Tickets were asked for without an HPKE key to enroll with.
    #[error("tickets (PrivaSIP-3) need an X25519 key among the keys: phones enroll with HPKE")]
    TicketsNeedHpke,
}

/// What a user part turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reveal {
    /// Not a pseudonym: a plain user name.
    Plain,
    /// A pseudonym for us, and the ID inside.
    Id(String),
    /// Shaped like a pseudonym, but not one we can open.
    Refused,
    /// Not opened: its source has spent its private-key decryptions for
    /// now (`[guard] decryption_rate`).
    Limited,
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct PrivacyCounters {
    /// Decryptions performed.
    pub decryptions: AtomicU64,
    /// Pseudonyms answered from the cache.
    pub cache_hits: AtomicU64,
    /// Pseudonyms refused.
    pub refused: AtomicU64,
    /// Pseudonyms and enrollments left unopened: their source had spent
    /// its private-key decryptions.
    pub limited: AtomicU64,
    /// PrivaSIP-3 enrollments answered with tickets.
    pub enrollments: AtomicU64,
    /// Enrollments refused (not ours, or broken).
    pub enrollments_refused: AtomicU64,
    /// Enrollments with the post-quantum (ML-KEM-768) half.
    pub enrollments_pq: AtomicU64,
    /// Tickets handed out.
    pub tickets_issued: AtomicU64,
    /// Tickets opened (one symmetric decryption each).
    pub tickets_opened: AtomicU64,
    /// Tickets refused because they had expired.
    pub tickets_expired: AtomicU64,
    /// Tickets refused because another call had used them (replays).
    pub tickets_replayed: AtomicU64,
    /// Anonymous enrollments of callers with this domain, answered with
    /// domain tickets (PrivaSIP-3 level 2).
    pub domain_enrollments: AtomicU64,
    /// Domain tickets handed out.
    pub domain_tickets_issued: AtomicU64,
    /// Callee pseudonyms opened (two symmetric decryptions each).
    pub callee_opened: AtomicU64,
}

#[derive(Debug, Default)]
struct Cache {
    map: HashMap<String, (String, u64)>,
}

/// Tickets seen, by nonce: the Call-ID each was first used in, and until
/// when that is kept.
#[derive(Debug, Default)]
struct Used {
    map: HashMap<[u8; 12], (String, u64)>,
}

/// Tickets remembered at most (their first Call-ID).
const MAX_USED: usize = 1 << 18;

/// The proxy's keys and cache.
pub struct Privacy {
    keys: Vec<Decipher>,
    aes: Vec<(String, AesId)>,
    aes_key_id: u8,
    capacity: usize,
    ttl: u64,
    cache: Shards<Cache>,
    tickets: Option<(TicketKeys, usize, u64)>,
    pq: Option<privacy::pq::PqKey>,
    used: Shards<Used>,
    /// Counters.
    pub counters: PrivacyCounters,
}

impl std::fmt::Debug for Privacy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Privacy")
            .field("keys", &self.keys.len())
            .field("aes_users", &self.aes.len())
            .field("cache", &self.capacity)
            .finish()
    }
}

impl Privacy {
    /// Sets up decryption with the private keys in `pems` (key id, a name
    /// for messages, PEM text); AES needs the users (their SHA-256 HA1 in
    /// `realm`); PrivaSIP-3 tickets the ticket key `ticket_keys` when
    /// `s.tickets` asks for them.
    pub fn new(
        s: &PrivacySettings,
        pems: &[(u8, String, Vec<u8>)],
        users: Option<&Users>,
        realm: &str,
        ticket_keys: Option<TicketKeys>,
    ) -> Result<Self, PrivacyError> {
        let mut keys = Vec::new();
        for (id, name, pem) in pems {
            let key =
                privacy::keys::decipher_from_pem(pem, *id).map_err(|e| PrivacyError::Key {
                    name: name.clone(),
                    reason: e.to_string(),
                })?;
            if keys
                .iter()
                .any(|k: &Decipher| k.scheme() == key.scheme() && k.key_id() == *id)
            {
                return Err(PrivacyError::DuplicateKey {
                    name: name.clone(),
                    scheme: key.scheme().name(),
                    id: *id,
                });
            }
            keys.push(key);
        }
        let mut aes = Vec::new();
        if s.aes != AesMode::Off {
            let users = users.ok_or(PrivacyError::AesNeedsUsers)?;
            for (name, r, entry) in users.iter() {
                if r == realm {
                    let ha1 = entry.ha1(sip_core::digest::Algorithm::Sha256);
                    let key = AesId::new(ha1.as_str(), realm, s.aes_key_id, s.aes == AesMode::Cbc)
                        .map_err(|e| PrivacyError::Aes(e.to_string()))?;
                    aes.push((name.to_owned(), key));
                }
            }
        }
        if keys.is_empty() && aes.is_empty() {
            return Err(PrivacyError::NoKeys);
        }
        let tickets = match ticket_keys.filter(|_| s.tickets > 0) {
            Some(_) if !keys.iter().any(|k| k.scheme() == Scheme::Hpke) => {
                return Err(PrivacyError::TicketsNeedHpke)
            }
            Some(t) => Some((t, s.tickets, s.ticket_ttl)),
            None => None,
        };
        Ok(Self {
            tickets,
            pq: None,
            used: Shards::new(8, Used::default),
            keys,
            aes,
            aes_key_id: s.aes_key_id,
            capacity: s.cache,
            ttl: s.cache_ttl,
            cache: Shards::new(1, Cache::default),
            counters: PrivacyCounters::default(),
        })
    }

    /// Whether pseudonyms are cached (stateful mode).
    pub fn stateful(&self) -> bool {
        self.capacity > 0
    }

    /// What `user` is, at `now` (Unix seconds). A pseudonym not in the
    /// cache that takes a private-key decryption (any scheme but the
    /// PrivaSIP-3 tickets, which open with one symmetric operation) is
    /// opened only when `may_decrypt` says its source may spend one: any
    /// party can mint pseudonyms for our public key, each a decryption
    /// here.
    pub fn reveal(&self, user: &str, now: u64, may_decrypt: impl FnOnce() -> bool) -> Reveal {
        let Some(raw) = privacy::pseudonym_bytes(user) else {
            return Reveal::Plain;
        };
        if self.capacity > 0 {
            let cache = self.cache.lock(0);
            if let Some((id, until)) = cache.map.get(user) {
                if *until > now {
                    self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                    return Reveal::Id(id.clone());
                }
            }
        }
        let ticket = matches!(
            privacy::split(&raw),
            Ok((Scheme::Ticket | Scheme::CalleeTicket, _, _))
        );
        if !ticket && !may_decrypt() {
            self.counters.limited.fetch_add(1, Ordering::Relaxed);
            return Reveal::Limited;
        }
        self.counters.decryptions.fetch_add(1, Ordering::Relaxed);
        match self.decrypt(&raw, now) {
            Some(id) => {
                if self.capacity > 0 {
                    self.remember(user, &id, now);
                }
                Reveal::Id(id)
            }
            None => {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                Reveal::Refused
            }
        }
    }

    fn decrypt(&self, raw: &[u8], now: u64) -> Option<String> {
        let (scheme, key_id, _) = privacy::split(raw).ok()?;
        if matches!(scheme, Scheme::Ticket | Scheme::CalleeTicket) {
            let (keys, _, _) = self.tickets.as_ref()?;
            let (t, opened) = if scheme == Scheme::Ticket {
                (keys.open(raw).ok()?, &self.counters.tickets_opened)
            } else {
                (keys.open_callee(raw).ok()?, &self.counters.callee_opened)
            };
            if t.expires < now {
                self.counters
                    .tickets_expired
                    .fetch_add(1, Ordering::Relaxed);
                return None;
            }
            opened.fetch_add(1, Ordering::Relaxed);
            return Some(t.id);
        }
        if matches!(scheme, Scheme::AesGcm | Scheme::AesCbc) {
            if key_id != self.aes_key_id {
                return None;
            }
            // A symmetric pseudonym does not say whose key it is under:
            // the user it opens to under their own key is the one.
            return self
                .aes
                .iter()
                .filter(|(_, k)| k.scheme() == scheme)
                .find_map(|(name, k)| k.decrypt(raw).ok().filter(|id| id == name));
        }
        self.keys
            .iter()
            .find(|k| k.scheme() == scheme && k.key_id() == key_id)?
            .decrypt(raw)
            .ok()
    }

    /// Whether `user` may stand for the caller (or, as a callee
    /// pseudonym, the callee) of the call `call_id` at `now`: a PrivaSIP-3
    /// ticket is single-use — bound to the first
    /// Call-ID it came with (its retransmissions, its resend with
    /// credentials and its dialog's requests share it), refused with any
    /// other. Anything but a ticket passes. The table is bounded: when
    /// full, bindings past the ticket lifetime go, then an eighth of the
    /// rest.
    pub fn ticket_call(&self, user: &str, call_id: &str, now: u64) -> bool {
        let Some((_, _, ttl)) = &self.tickets else {
            return true;
        };
        let Some(raw) = privacy::pseudonym_bytes(user) else {
            return true;
        };
        let (Ok((Scheme::Ticket | Scheme::CalleeTicket, _, body)), true) =
            (privacy::split(&raw), raw.len() >= 15)
        else {
            return true;
        };
        let mut nonce = [0u8; 12];
        nonce.copy_from_slice(&body[..12]);
        let mut used = self.used.lock(usize::from(nonce[0]));
        if let Some((first, _)) = used.map.get(&nonce) {
            let same = first == call_id;
            if !same {
                self.counters
                    .tickets_replayed
                    .fetch_add(1, Ordering::Relaxed);
            }
            return same;
        }
        let per_shard = MAX_USED / self.used.len();
        if used.map.len() >= per_shard {
            used.map.retain(|_, (_, until)| *until > now);
            if used.map.len() >= per_shard {
                let drop: Vec<[u8; 12]> =
                    used.map.keys().take(per_shard / 8 + 1).copied().collect();
                for k in drop {
                    used.map.remove(&k);
                }
            }
        }
        used.map.insert(nonce, (call_id.to_owned(), now + ttl));
        true
    }

    /// The Prometheus text of the counters.
    pub fn render(&self, text: &mut String) {
        let c = &self.counters;
        for (name, help, v) in [
            (
                "sipsec_privacy_decryptions_total",
                "Pseudonyms decrypted.",
                &c.decryptions,
            ),
            (
                "sipsec_privacy_cache_hits_total",
                "Pseudonyms found in the cache.",
                &c.cache_hits,
            ),
            (
                "sipsec_privacy_refused_total",
                "Pseudonyms that did not open (refused).",
                &c.refused,
            ),
            (
                "sipsec_privacy_decryptions_limited_total",
                "Pseudonyms and anonymous enrollments left unopened: their source had spent its decryptions ([guard] decryption_rate).",
                &c.limited,
            ),
            (
                "sipsec_privacy_enrollments_total",
                "PrivaSIP-3 enrollments answered with tickets.",
                &c.enrollments,
            ),
            (
                "sipsec_privacy_enrollments_refused_total",
                "PrivaSIP-3 enrollments refused (not for this proxy, or broken).",
                &c.enrollments_refused,
            ),
            (
                "sipsec_privacy_enrollments_pq_total",
                "PrivaSIP-3 enrollments with the post-quantum half (X25519 + ML-KEM-768).",
                &c.enrollments_pq,
            ),
            (
                "sipsec_privacy_tickets_issued_total",
                "PrivaSIP-3 tickets handed out.",
                &c.tickets_issued,
            ),
            (
                "sipsec_privacy_tickets_opened_total",
                "PrivaSIP-3 tickets opened (one AES-256-GCM-SIV decryption each).",
                &c.tickets_opened,
            ),
            (
                "sipsec_privacy_tickets_expired_total",
                "PrivaSIP-3 tickets refused as expired.",
                &c.tickets_expired,
            ),
            (
                "sipsec_privacy_tickets_replayed_total",
                "PrivaSIP-3 tickets refused: another call had used them.",
                &c.tickets_replayed,
            ),
            (
                "sipsec_privacy_domain_enrollments_total",
                "Anonymous enrollments of callers with this domain (PrivaSIP-3 level 2).",
                &c.domain_enrollments,
            ),
            (
                "sipsec_privacy_domain_tickets_issued_total",
                "Domain tickets handed out to callers (PrivaSIP-3 level 2).",
                &c.domain_tickets_issued,
            ),
            (
                "sipsec_privacy_callee_opened_total",
                "Callee pseudonyms opened (PrivaSIP-3 level 2: two AES-256-GCM-SIV decryptions each).",
                &c.callee_opened,
            ),
        ] {
            text.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}\n",
                v.load(Ordering::Relaxed)
            ));
        }
    }

    /// `/status`'s `privacy`.
    pub fn status(&self) -> serde_json::Value {
        let c = &self.counters;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        serde_json::json!({
            "stateful": self.stateful(),
            "decryptions_total": n(&c.decryptions),
            "cache_hits_total": n(&c.cache_hits),
            "refused_total": n(&c.refused),
            "limited_total": n(&c.limited),
            "tickets": self.issues_tickets(),
            "enrollments_total": n(&c.enrollments),
            "enrollments_refused_total": n(&c.enrollments_refused),
            "enrollments_pq_total": n(&c.enrollments_pq),
            "tickets_issued_total": n(&c.tickets_issued),
            "tickets_opened_total": n(&c.tickets_opened),
            "tickets_expired_total": n(&c.tickets_expired),
            "domain_enrollments_total": n(&c.domain_enrollments),
            "domain_tickets_issued_total": n(&c.domain_tickets_issued),
            "callee_opened_total": n(&c.callee_opened),
            "tickets_replayed_total": n(&c.tickets_replayed),
        })
    }

    /// Enrollments may carry a post-quantum half for `key` (ML-KEM-768).
    pub fn with_pq(mut self, key: privacy::pq::PqKey) -> Self {
        self.pq = Some(key);
        self
    }

    /// Whether PrivaSIP-3 tickets are handed out.
    pub fn issues_tickets(&self) -> bool {
        self.tickets.is_some()
    }

    /// The `Privasip-Tickets` value for the authenticated user `id` whose
    /// REGISTER carried the enrollment `enroll` (its header value), at
    /// `now`: a batch of fresh tickets sealed under the user key. `None`
    /// when tickets are off or the enrollment is not one for this proxy.
    pub fn enroll(&self, id: &str, enroll: &str, now: u64) -> Option<String> {
        let (keys, batch, ttl) = self.tickets.as_ref()?;
        let k_u = self.enrollment_key(enroll, id)?;
        // A ticket: header, nonce, expiry, ID, tag.
        let batch = privacy::tickets::batch_fits(*batch, 3 + 12 + 8 + id.len() + 16);
        let tickets: Vec<Vec<u8>> = (0..batch)
            .map(|_| keys.issue(id, now + ttl))
            .collect::<Result<_, _>>()
            .ok()?;
        let sealed = privacy::tickets::seal_batch(&k_u, &tickets).ok()?;
        self.counters.enrollments.fetch_add(1, Ordering::Relaxed);
        self.counters
            .tickets_issued
            .fetch_add(tickets.len() as u64, Ordering::Relaxed);
        Some(Encoding::Base32.encode(&sealed))
    }

    /// The `Privasip-Tickets` value for a caller of any domain that
    /// enrolled anonymously with this one (an OPTIONS to the domain
    /// carrying `enroll`), at `now`: domain tickets, each with the key
    /// the caller seals a callee's ID under, sealed under the enrollment's
    /// key. `None` when tickets are off or the enrollment is not for us.
    /// Its decryption is made only when `may_decrypt` says the source
    /// may spend one (anyone may enroll anonymously).
    pub fn enroll_domain(
        &self,
        enroll: &str,
        now: u64,
        may_decrypt: impl FnOnce() -> bool,
    ) -> Option<String> {
        let (keys, batch, ttl) = self.tickets.as_ref()?;
        if !may_decrypt() {
            self.counters.limited.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let k = self.enrollment_key(enroll, privacy::tickets::DOMAIN)?;
        let batch = privacy::tickets::batch_fits(*batch, privacy::tickets::DOMAIN_TICKET_LEN + 32);
        let entries: Vec<Vec<u8>> = (0..batch)
            .map(|_| keys.issue_domain(now + ttl))
            .collect::<Result<_, _>>()
            .ok()?;
        let sealed = privacy::tickets::seal_batch(&k, &entries).ok()?;
        self.counters
            .domain_enrollments
            .fetch_add(1, Ordering::Relaxed);
        self.counters
            .domain_tickets_issued
            .fetch_add(entries.len() as u64, Ordering::Relaxed);
        Some(Encoding::Base32.encode(&sealed))
    }

    /// The key an enrollment (header value) gives for `id`: its secret
    /// opened with our HPKE key (and ML-KEM key, for a hybrid one);
    /// `None`, counted, when it is not for this proxy or broken.
    fn enrollment_key(&self, enroll: &str, id: &str) -> Option<[u8; 32]> {
        let refused = || {
            self.counters
                .enrollments_refused
                .fetch_add(1, Ordering::Relaxed);
            None
        };
        let Some(key_id) = privacy::tickets::enrollment_key_id(enroll) else {
            return refused();
        };
        let Some(k) = self
            .keys
            .iter()
            .find(|k| k.scheme() == Scheme::Hpke && k.key_id() == key_id)
        else {
            return refused();
        };
        let Ok((k, hybrid)) = privacy::tickets::accept(k.as_ref(), self.pq.as_ref(), enroll, id)
        else {
            return refused();
        };
        if hybrid {
            self.counters.enrollments_pq.fetch_add(1, Ordering::Relaxed);
        }
        Some(k)
    }

    /// Bounded: when full, expired entries go; if that is not enough, an
    /// eighth of the rest (in the map's random order) goes too.
    fn remember(&self, text: &str, id: &str, now: u64) {
        let mut cache = self.cache.lock(0);
        if cache.map.len() >= self.capacity {
            cache.map.retain(|_, (_, until)| *until > now);
            if cache.map.len() >= self.capacity {
                let drop: Vec<String> = cache
                    .map
                    .keys()
                    .take(self.capacity / 8 + 1)
                    .cloned()
                    .collect();
                for k in drop {
                    cache.map.remove(&k);
                }
            }
        }
        cache
            .map
            .insert(text.to_owned(), (id.to_owned(), now + self.ttl));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use privacy::{Encoding, IdCipher};

    fn setup(cache: usize) -> (Privacy, privacy::keys::Cipher) {
        let key = openssl::pkey::PKey::generate_x25519().unwrap();
        let pem = key.private_key_to_pem_pkcs8().unwrap();
        let public = privacy::keys::public_pem(&pem).unwrap();
        let enc = privacy::keys::cipher_from_pem(&public, 3).unwrap();
        let settings = PrivacySettings {
            cache,
            cache_ttl: 60,
            ..Default::default()
        };
        let pems = [(3, "hpke.pem".to_owned(), pem)];
        (
            Privacy::new(&settings, &pems, None, "r", None).unwrap(),
            enc,
        )
    }

    /// Only a decryption asks the source's budget: not a plain name, not
    /// a cached pseudonym; a pseudonym left unopened is counted apart.
    #[test]
    fn a_pseudonym_is_opened_only_while_its_source_may_spend_a_decryption() {
        let (p, enc) = setup(16);
        let asked = std::cell::Cell::new(0);
        let spend = |may: bool| {
            let asked = &asked;
            move || {
                asked.set(asked.get() + 1);
                may
            }
        };
        assert_eq!(p.reveal("alice", 0, spend(false)), Reveal::Plain);
        let text = enc.pseudonym("alice", Encoding::Hex, 1000).unwrap();
        assert_eq!(p.reveal(&text, 0, spend(false)), Reveal::Limited);
        assert_eq!(p.reveal(&text, 0, spend(true)), Reveal::Id("alice".into()));
        assert_eq!(
            p.reveal(&text, 0, spend(false)),
            Reveal::Id("alice".into()),
            "cached"
        );
        assert_eq!(asked.get(), 2);
        let c = &p.counters;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        assert_eq!((n(&c.limited), n(&c.decryptions), n(&c.refused)), (1, 1, 0));
    }

    #[test]
    fn plain_names_pass_pseudonyms_open_and_bad_ones_are_refused() {
        let (p, enc) = setup(0);
        assert_eq!(p.reveal("alice", 0, || true), Reveal::Plain);
        assert_eq!(p.reveal("1000", 0, || true), Reveal::Plain);
        let text = enc.pseudonym("alice", Encoding::Hex, 1000).unwrap();
        assert_eq!(p.reveal(&text, 0, || true), Reveal::Id("alice".into()));
        let b32 = enc.pseudonym("alice", Encoding::Base32, 1000).unwrap();
        assert_eq!(p.reveal(&b32, 0, || true), Reveal::Id("alice".into()));
        // Tampered, and for a key id we do not hold: the same refusal.
        let mut bad = text.clone().into_bytes();
        let last = bad.len() - 1;
        bad[last] = if bad[last] == b'0' { b'1' } else { b'0' };
        assert_eq!(
            p.reveal(std::str::from_utf8(&bad).unwrap(), 0, || true),
            Reveal::Refused
        );
        let other_id = format!("{}04{}", &text[..4], &text[6..]);
        assert_eq!(p.reveal(&other_id, 0, || true), Reveal::Refused);
        assert_eq!(p.counters.decryptions.load(Ordering::Relaxed), 4);
        assert_eq!(p.counters.refused.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn the_cache_saves_decryptions_expires_and_stays_bounded() {
        let (p, enc) = setup(16);
        let text = enc.pseudonym("bob", Encoding::Hex, 1000).unwrap();
        for _ in 0..3 {
            assert_eq!(p.reveal(&text, 100, || true), Reveal::Id("bob".into()));
        }
        assert_eq!(p.counters.decryptions.load(Ordering::Relaxed), 1);
        assert_eq!(p.counters.cache_hits.load(Ordering::Relaxed), 2);
        // After the TTL it is decrypted again.
        assert_eq!(p.reveal(&text, 161, || true), Reveal::Id("bob".into()));
        assert_eq!(p.counters.decryptions.load(Ordering::Relaxed), 2);
        for i in 0..100 {
            let t = enc
                .pseudonym(&format!("u{i}"), Encoding::Hex, 1000)
                .unwrap();
            assert_eq!(p.reveal(&t, 200, || true), Reveal::Id(format!("u{i}")));
            assert!(p.cache.lock(0).map.len() <= 16);
        }
    }

    #[test]
    fn aes_pseudonyms_open_under_their_users_key_only() {
        let mut users = Users::default();
        for u in ["alice", "bob"] {
            users
                .insert(
                    u,
                    "example.org",
                    crate::proto::users::UserEntry::from_password(u, "example.org", "pw"),
                )
                .unwrap();
        }
        let ha1 = |u: &str| {
            sip_core::digest::ha1(sip_core::digest::Algorithm::Sha256, u, "example.org", "pw")
        };
        for (mode, cbc) in [(AesMode::Gcm, false), (AesMode::Cbc, true)] {
            let settings = PrivacySettings {
                aes: mode,
                aes_key_id: 1,
                ..Default::default()
            };
            let p = Privacy::new(&settings, &[], Some(&users), "example.org", None).unwrap();
            let bob = AesId::new(ha1("bob").as_str(), "example.org", 1, cbc).unwrap();
            let t = bob.pseudonym("bob", Encoding::Hex, 1000).unwrap();
            assert_eq!(p.reveal(&t, 0, || true), Reveal::Id("bob".into()));
            // Bob's key cannot claim to be alice.
            let lie = bob.pseudonym("alice", Encoding::Hex, 1000).unwrap();
            assert_eq!(p.reveal(&lie, 0, || true), Reveal::Refused);
        }
        let err = Privacy::new(&PrivacySettings::default(), &[], None, "r", None).unwrap_err();
        assert!(err.to_string().contains("at least one key"), "{err}");
    }

    #[test]
    fn an_enrolled_user_gets_tickets_that_open_once_each_until_they_expire() {
        let key = openssl::pkey::PKey::generate_x25519().unwrap();
        let pem = key.private_key_to_pem_pkcs8().unwrap();
        let public = privacy::keys::public_pem(&pem).unwrap();
        let enc = privacy::keys::cipher_from_pem(&public, 3).unwrap();
        let settings = PrivacySettings {
            tickets: 4,
            ticket_ttl: 100,
            ..Default::default()
        };
        let (keys, _) = TicketKeys::generate(1).unwrap();
        let pems = [(3, "hpke.pem".to_owned(), pem)];
        let p = Privacy::new(&settings, &pems, None, "r", Some(keys)).unwrap();
        assert!(p.issues_tickets());
        let (enrollment, sealed) = privacy::tickets::Enrollment::new(enc.as_ref(), None).unwrap();
        let header = p.enroll("alice", &sealed, 1_000).expect("tickets");
        let batch = Encoding::decode_any(&header).unwrap();
        let tickets = enrollment.tickets("alice", &batch).unwrap();
        assert_eq!(tickets.len(), 4);
        let texts: Vec<String> = tickets.iter().map(|t| Encoding::Base32.encode(t)).collect();
        // A ticket opens with one symmetric operation: no decryption
        // budget is asked.
        let budget = || unreachable!("a ticket spends no decryption");
        for t in &texts {
            assert_eq!(p.reveal(t, 1_050, budget), Reveal::Id("alice".into()));
        }
        assert_eq!(
            p.reveal(&texts[0], 1_101, || true),
            Reveal::Refused,
            "expired"
        );
        // Single-use: bound to the first call's Call-ID.
        assert!(p.ticket_call(&texts[1], "call-1", 1_050));
        assert!(p.ticket_call(&texts[1], "call-1", 1_051), "the same call");
        assert!(!p.ticket_call(&texts[1], "call-2", 1_052), "a replay");
        assert!(p.ticket_call(&texts[2], "call-2", 1_052));
        assert!(p.ticket_call("alice", "call-3", 1_052), "not a ticket");
        assert_eq!(p.counters.tickets_replayed.load(Ordering::Relaxed), 1);
        assert_eq!(p.counters.tickets_expired.load(Ordering::Relaxed), 1);
        // A forged copy of an unused ticket (its nonce, a broken tag) sent
        // first does not open, and does not take the ticket from the call
        // that uses it after.
        let reveal_for = |t: &str, call: &str| {
            crate::proto::uris::reveal_for_call(Some(&p), t, (call, 1_060), || true)
                .map(|id| id.into_owned())
        };
        let mut forged = Encoding::decode_any(&texts[3]).unwrap();
        let last = forged.len() - 1;
        forged[last] ^= 1;
        let forged = Encoding::Base32.encode(&forged);
        assert_eq!(reveal_for(&forged, "forged-call"), None);
        assert_eq!(reveal_for(&texts[3], "call-4").as_deref(), Some("alice"));
        assert_eq!(reveal_for(&texts[3], "call-5"), None, "then single-use");
        // An enrollment for another proxy, or junk: no tickets.
        assert_eq!(p.enroll("alice", "not-an-enrollment", 1_000), None);
        let other = openssl::pkey::PKey::generate_x25519().unwrap();
        let other_pub =
            privacy::keys::public_pem(&other.private_key_to_pem_pkcs8().unwrap()).unwrap();
        let other_enc = privacy::keys::cipher_from_pem(&other_pub, 3).unwrap();
        let (_, foreign) = privacy::tickets::Enrollment::new(other_enc.as_ref(), None).unwrap();
        assert_eq!(p.enroll("alice", &foreign, 1_000), None);
        assert_eq!(p.counters.enrollments_refused.load(Ordering::Relaxed), 2);
        // Tickets need an HPKE key to enroll with.
        let aes_only = Privacy::new(
            &settings,
            &[],
            None,
            "r",
            TicketKeys::generate(1).ok().map(|k| k.0),
        );
        assert!(aes_only.is_err());
    }
}
