//! PrivaSIP-3: per-call unlinkable identities for one public-key
//! operation per registration and one symmetric operation per call.
//!
//! 1. **Enrollment**, in a REGISTER: the phone picks a random 32-byte
//!    secret and seals it to the home proxy's X25519 key with HPKE (the
//!    PrivaSIP-2 scheme, [`crate::hpke`]), and optionally encapsulates a
//!    second secret to the proxy's ML-KEM-768 key ([`crate::pq`]): the
//!    hybrid secret holds while either half does. Only that proxy opens
//!    it. Both sides derive the user key K_u from it (HKDF-SHA256, the
//!    user's ID in the info). On the wire: base32 of the HPKE seal, and
//!    with the post-quantum half `.` and base32 of the ML-KEM ciphertext.
//! 2. **Tickets**, in the REGISTER's 200 (sent only to an authenticated
//!    user): a batch of single-use pseudonyms, each the user's ID and an
//!    expiry sealed under the proxy's ticket key with AES-256-GCM-SIV
//!    (RFC 8452) and a fresh random nonce — so two tickets of one user
//!    share nothing but the 3-byte header. The batch travels sealed under
//!    K_u (AES-256-GCM-SIV again): an observer of the 200 cannot tell
//!    which tickets are whose.
//! 3. **Per call** the phone puts a fresh ticket where its ID goes (From,
//!    the digest username); the proxy opens it with its ticket key — one
//!    AEAD decryption, no lookup, no public-key operation.
//!
//! A ticket is `version | scheme 6 | epoch | nonce (12) | AES-256-GCM-SIV(
//! expiry (8, Unix seconds, big-endian) | ID)` with the 3-byte header as
//! associated data. The proxy keeps its current ticket key and the one
//! before (by epoch), so rotating the key does not void the tickets
//! already handed out.
//!
//! **The callee's side (level 2).** A caller enrolls with the callee's
//! domain the same way, anonymously (the key is derived for [`DOMAIN`],
//! not for a user), and gets *domain tickets*: `version | scheme 7 |
//! epoch | nonce | AES-256-GCM-SIV(expiry | k)` under that domain's
//! ticket key, each with its own random 32-byte key k beside it in the
//! sealed batch. Per call the caller seals the callee's ID under k
//! ([`seal_callee`]) after the ticket; the callee's proxy opens the
//! ticket, then the ID: two AEAD decryptions, no public-key operation,
//! and two calls to one callee share nothing but the header.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM_SIV};

use crate::{header, kdf, random, split, Encoding, Error, Scheme};

/// Associated data of a ticket batch.
const BATCH_AAD: &[u8] = b"sipsec privasip-3 tickets v1";
/// HKDF info prefix of the user key.
const USER_KEY_INFO: &[u8] = b"sipsec privasip-3 user key v1|";
/// HKDF salt of the hybrid enrollment secret.
const HYBRID_SALT: &[u8] = b"sipsec privasip-3 hybrid v1";
/// Tickets in one batch, at most (a SIP header stays small).
pub const MAX_BATCH: usize = 64;
/// Bytes of tickets one batch carries, at most: base32 makes 6.4 KB of
/// them, inside the 8 KB a header may take (`sip_core::Limits`).
const MAX_BATCH_BYTES: usize = 4_000;

/// How many of `wanted` tickets of `len` bytes each fit one batch (at
/// least one).
pub fn batch_fits(wanted: usize, len: usize) -> usize {
    wanted.min(MAX_BATCH_BYTES / (len + 1)).clamp(1, MAX_BATCH)
}
/// The name an anonymous enrollment with a callee's domain derives its
/// key for (the domain does not learn who enrolled).
pub const DOMAIN: &str = "sipsec privasip-3 callee domain v1";
/// Associated data of a callee's ID sealed under a domain ticket's key.
const CALLEE_AAD: &[u8] = b"sipsec privasip-3 callee v1";
/// A domain ticket: header, nonce, expiry and key (sealed), tag.
pub const DOMAIN_TICKET_LEN: usize = 3 + 12 + 8 + 32 + 16;
/// The longest ID a ticket carries.
pub const MAX_ID: usize = 128;

fn key(bytes: &[u8; 32]) -> Result<LessSafeKey, Error> {
    UnboundKey::new(&AES_256_GCM_SIV, bytes)
        .map(LessSafeKey::new)
        .map_err(|_| Error::Key("AES-256-GCM-SIV key".into()))
}

/// `nonce | AEAD(pt)` under `k` with `aad`.
fn seal(k: &LessSafeKey, aad: &[u8], pt: &[u8]) -> Result<Vec<u8>, Error> {
    let mut nonce = [0u8; 12];
    random(&mut nonce)?;
    let mut buf = pt.to_vec();
    k.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(aad),
        &mut buf,
    )
    .map_err(|_| Error::Key("AES-256-GCM-SIV seal".into()))?;
    Ok([&nonce[..], &buf].concat())
}

/// The plaintext of `nonce | AEAD` under `k` with `aad`.
fn open(k: &LessSafeKey, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, Error> {
    if sealed.len() < 12 + 16 {
        return Err(Error::Undecryptable);
    }
    let (nonce, ct) = sealed.split_at(12);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| Error::Undecryptable)?;
    let mut buf = ct.to_vec();
    let n = k
        .open_in_place(nonce, Aad::from(aad), &mut buf)
        .map_err(|_| Error::Undecryptable)?
        .len();
    buf.truncate(n);
    Ok(buf)
}

/// The user key both sides derive from the enrollment `secret` for `id`.
pub fn user_key(secret: &[u8], id: &str) -> [u8; 32] {
    let mut k = [0u8; 32];
    kdf::hkdf(
        &[],
        secret,
        &[USER_KEY_INFO, id.as_bytes()].concat(),
        &mut k,
    );
    k
}

/// A phone's enrollment: the secret it sealed for the proxy.
pub struct Enrollment {
    secret: [u8; 32],
}

impl std::fmt::Debug for Enrollment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Enrollment(…)")
    }
}

impl Enrollment {
    /// A fresh secret, and what carries it to the proxy (the header
    /// value): a raw pseudonym of it (hex text) sealed by `to` (the
    /// proxy's HPKE cipher), and with `pq` a second secret encapsulated
    /// to the proxy's ML-KEM-768 key, the two combined.
    pub fn new(
        to: &dyn crate::IdCipher,
        pq: Option<&crate::pq::PqPublic>,
    ) -> Result<(Self, String), Error> {
        if to.scheme() != Scheme::Hpke {
            return Err(Error::Key(
                "PrivaSIP-3 enrolls with the proxy's HPKE key".into(),
            ));
        }
        let mut secret = [0u8; 32];
        random(&mut secret)?;
        let sealed = to.encrypt(&Encoding::Hex.encode(&secret))?;
        let mut text = Encoding::Base32.encode(&sealed);
        if let Some(pq) = pq {
            let (ct, ss) = pq.encapsulate()?;
            secret = hybrid(&secret, &ss);
            text.push('.');
            text.push_str(&Encoding::Base32.encode(&ct));
        }
        Ok((Self { secret }, text))
    }

    /// The tickets in a batch the proxy sent `id` (opened under the user
    /// key this enrollment gives).
    pub fn tickets(&self, id: &str, batch: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
        open_batch(&user_key(&self.secret, id), batch)
    }
}

/// The hybrid enrollment secret of the X25519 and ML-KEM halves.
fn hybrid(classical: &[u8], post_quantum: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    kdf::hkdf(
        HYBRID_SALT,
        &[classical, post_quantum].concat(),
        &[],
        &mut out,
    );
    out
}

/// The key id of the HPKE key an enrollment (header value) was sealed
/// to, when it is one.
pub fn enrollment_key_id(text: &str) -> Option<u8> {
    let raw = Encoding::decode_any(text.split('.').next()?.trim())?;
    match split(&raw) {
        Ok((Scheme::Hpke, kid, _)) => Some(kid),
        _ => None,
    }
}

/// The proxy's side of an enrollment (its header value `text`): the
/// secret inside, the HPKE seal opened by `with` and, when the phone
/// sent the post-quantum half, its ML-KEM ciphertext by `pq` — as the
/// user key for `id`, and whether it was hybrid. A post-quantum half
/// without an ML-KEM key here does not open.
pub fn accept(
    with: &dyn crate::IdDecipher,
    pq: Option<&crate::pq::PqKey>,
    text: &str,
    id: &str,
) -> Result<([u8; 32], bool), Error> {
    if with.scheme() != Scheme::Hpke {
        return Err(Error::Undecryptable);
    }
    let mut parts = text.trim().split('.');
    let sealed = parts
        .next()
        .and_then(Encoding::decode_any)
        .ok_or(Error::Undecryptable)?;
    let ct = parts.next();
    if parts.next().is_some() {
        return Err(Error::Undecryptable);
    }
    let inner = with.decrypt(&sealed)?;
    let secret = Encoding::Hex.decode(&inner).ok_or(Error::Undecryptable)?;
    if secret.len() != 32 {
        return Err(Error::Undecryptable);
    }
    match (ct, pq) {
        (None, _) => Ok((user_key(&secret, id), false)),
        (Some(ct), Some(pq)) => {
            let ct = Encoding::decode_any(ct).ok_or(Error::Undecryptable)?;
            let ss = pq.decapsulate(&ct)?;
            Ok((user_key(&hybrid(&secret, &ss), id), true))
        }
        (Some(_), None) => Err(Error::Undecryptable),
    }
}

/// `tickets` sealed under the user key `k_u` (one blob for a header).
pub fn seal_batch(k_u: &[u8; 32], tickets: &[Vec<u8>]) -> Result<Vec<u8>, Error> {
    let mut pt = Vec::new();
    for t in tickets.iter().take(MAX_BATCH) {
        let len = u8::try_from(t.len()).map_err(|_| Error::Key("ticket too long".into()))?;
        pt.push(len);
        pt.extend_from_slice(t);
    }
    seal(&key(k_u)?, BATCH_AAD, &pt)
}

/// The tickets of a batch sealed under `k_u`.
pub fn open_batch(k_u: &[u8; 32], batch: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
    let pt = open(&key(k_u)?, BATCH_AAD, batch)?;
    let mut out = Vec::new();
    let mut rest = &pt[..];
    while let [len, tail @ ..] = rest {
        let len = usize::from(*len);
        if tail.len() < len || out.len() >= MAX_BATCH {
            return Err(Error::Undecryptable);
        }
        out.push(tail[..len].to_vec());
        rest = &tail[len..];
    }
    Ok(out)
}

/// What a ticket says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The user's ID.
    pub id: String,
    /// Until when it may be used (Unix seconds).
    pub expires: u64,
    /// Its nonce: what makes it single-use (replays share it).
    pub nonce: [u8; 12],
}

/// The proxy's ticket keys: the current one and the one before, by epoch.
pub struct TicketKeys {
    current: (u8, LessSafeKey),
    previous: Option<(u8, LessSafeKey)>,
}

impl std::fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TicketKeys")
            .field("epoch", &self.current.0)
            .finish_non_exhaustive()
    }
}

impl TicketKeys {
    /// Keys of epoch `epoch` (and the one before, if any).
    pub fn new(epoch: (u8, &[u8; 32]), previous: Option<(u8, &[u8; 32])>) -> Result<Self, Error> {
        Ok(Self {
            current: (epoch.0, key(epoch.1)?),
            previous: previous.map(|(e, k)| key(k).map(|k| (e, k))).transpose()?,
        })
    }

    /// A fresh random key of epoch `epoch`, none before.
    pub fn generate(epoch: u8) -> Result<(Self, [u8; 32]), Error> {
        let mut k = [0u8; 32];
        random(&mut k)?;
        Ok((Self::new((epoch, &k), None)?, k))
    }

    /// A new ticket for `id` until `expires`.
    pub fn issue(&self, id: &str, expires: u64) -> Result<Vec<u8>, Error> {
        if id.len() > MAX_ID {
            return Err(Error::IdTooLong {
                len: id.len(),
                max: MAX_ID,
            });
        }
        let h = header(Scheme::Ticket, self.current.0);
        let pt = [&expires.to_be_bytes()[..], id.as_bytes()].concat();
        Ok([&h[..], &seal(&self.current.1, &h, &pt)?].concat())
    }

    /// The key of `epoch`: the current one or the one before.
    fn key_of(&self, epoch: u8) -> Result<&LessSafeKey, Error> {
        if epoch == self.current.0 {
            return Ok(&self.current.1);
        }
        match &self.previous {
            Some((e, k)) if *e == epoch => Ok(k),
            _ => Err(Error::Undecryptable),
        }
    }

    /// A domain ticket for a caller until `expires`, with its key after
    /// it (`ticket | k`, [`DOMAIN_TICKET_LEN`] + 32 bytes): what the
    /// caller seals callee IDs with ([`seal_callee`]).
    pub fn issue_domain(&self, expires: u64) -> Result<Vec<u8>, Error> {
        let mut k = [0u8; 32];
        random(&mut k)?;
        let h = header(Scheme::CalleeTicket, self.current.0);
        let pt = [&expires.to_be_bytes()[..], &k].concat();
        Ok([&h[..], &seal(&self.current.1, &h, &pt)?, &k].concat())
    }

    /// The callee a callee pseudonym ([`seal_callee`]) names, when its
    /// domain ticket is this proxy's; its expiry is not checked here, and
    /// its nonce is the domain ticket's (what makes it single-use).
    pub fn open_callee(&self, raw: &[u8]) -> Result<Ticket, Error> {
        let (scheme, epoch, _) = split(raw)?;
        if scheme != Scheme::CalleeTicket || raw.len() < DOMAIN_TICKET_LEN + 12 + 16 {
            return Err(Error::Undecryptable);
        }
        let (ticket, sealed_id) = raw.split_at(DOMAIN_TICKET_LEN);
        let pt = open(self.key_of(epoch)?, &ticket[..3], &ticket[3..])?;
        let (exp, k) = pt.split_at_checked(8).ok_or(Error::Undecryptable)?;
        let k: &[u8; 32] = k.try_into().map_err(|_| Error::Undecryptable)?;
        let id = open(&key(k)?, CALLEE_AAD, sealed_id)?;
        let mut nonce = [0u8; 12];
        nonce.copy_from_slice(&ticket[3..15]);
        Ok(Ticket {
            id: String::from_utf8(id).map_err(|_| Error::Undecryptable)?,
            expires: u64::from_be_bytes(exp.try_into().map_err(|_| Error::Undecryptable)?),
            nonce,
        })
    }

    /// What the raw ticket `raw` says, when this proxy sealed it (under
    /// the current or the previous key); its expiry is not checked here.
    pub fn open(&self, raw: &[u8]) -> Result<Ticket, Error> {
        let (scheme, epoch, body) = split(raw)?;
        if scheme != Scheme::Ticket {
            return Err(Error::Undecryptable);
        }
        let pt = open(self.key_of(epoch)?, &raw[..3], body)?;
        if pt.len() < 8 {
            return Err(Error::Undecryptable);
        }
        let (exp, id) = pt.split_at(8);
        let mut nonce = [0u8; 12];
        nonce.copy_from_slice(&body[..12]);
        Ok(Ticket {
            id: String::from_utf8(id.to_vec()).map_err(|_| Error::Undecryptable)?,
            expires: u64::from_be_bytes(exp.try_into().map_err(|_| Error::Undecryptable)?),
            nonce,
        })
    }
}

/// The raw pseudonym of `callee` for its domain: the domain ticket of
/// `entry` (a `ticket | k` the domain issued, [`TicketKeys::issue_domain`])
/// and the ID sealed under k with a fresh nonce.
pub fn seal_callee(entry: &[u8], callee: &str) -> Result<Vec<u8>, Error> {
    if callee.len() > MAX_ID {
        return Err(Error::IdTooLong {
            len: callee.len(),
            max: MAX_ID,
        });
    }
    let (ticket, k) = entry
        .split_at_checked(DOMAIN_TICKET_LEN)
        .filter(|(t, k)| k.len() == 32 && split(t).is_ok_and(|s| s.0 == Scheme::CalleeTicket))
        .ok_or_else(|| Error::Key("not a domain ticket".into()))?;
    let k: &[u8; 32] = k
        .try_into()
        .map_err(|_| Error::Key("domain ticket key".into()))?;
    Ok([ticket, &seal(&key(k)?, CALLEE_AAD, callee.as_bytes())?].concat())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpke::{Hpke, HpkeKey};

    #[test]
    fn a_caller_enrolls_anonymously_with_the_callees_domain_and_each_call_is_unlinkable() {
        let (cipher, decipher) = proxy_hpke();
        let (enrollment, sealed) = Enrollment::new(&cipher, None).unwrap();
        // The callee's proxy: keys for no user (it does not learn who).
        let (k, _) = accept(&decipher, None, &sealed, DOMAIN).unwrap();
        let (keys, _) = TicketKeys::generate(3).unwrap();
        let entries: Vec<_> = (0..4).map(|_| keys.issue_domain(2_000).unwrap()).collect();
        let batch = seal_batch(&k, &entries).unwrap();
        let got = enrollment.tickets(DOMAIN, &batch).unwrap();
        assert_eq!(got, entries);
        // Two calls to bob: nothing shared past the header.
        let a = seal_callee(&got[0], "bob").unwrap();
        let b = seal_callee(&got[1], "bob").unwrap();
        assert_eq!(a[..3], b[..3]);
        assert_eq!(a[..3], [crate::VERSION, 7, 3]);
        assert!(a[3..].iter().zip(&b[3..]).filter(|(x, y)| x == y).count() < 16);
        let opened = keys.open_callee(&a).unwrap();
        assert_eq!((opened.id.as_str(), opened.expires), ("bob", 2_000));
        assert_eq!(opened.nonce[..], a[3..15]);
        // The key in the batch is not the ticket: a caller cannot forge
        // one, and a flipped bit anywhere is refused.
        for i in [
            3,
            20,
            DOMAIN_TICKET_LEN - 1,
            DOMAIN_TICKET_LEN + 13,
            a.len() - 1,
        ] {
            let mut bad = a.clone();
            bad[i] ^= 1;
            assert!(keys.open_callee(&bad).is_err(), "byte {i}");
        }
        // Another domain's keys open nothing; nor do caller tickets.
        let (other, _) = TicketKeys::generate(3).unwrap();
        assert!(other.open_callee(&a).is_err());
        assert!(keys.open(&a).is_err());
        assert!(keys.open_callee(&keys.issue("bob", 9).unwrap()).is_err());
        // A batch stays inside a SIP header's 8 KB once in base32.
        assert_eq!(batch_fits(MAX_BATCH, DOMAIN_TICKET_LEN + 32), 38);
        assert_eq!(batch_fits(8, DOMAIN_TICKET_LEN + 32), 8);
        assert_eq!(batch_fits(MAX_BATCH, 3 + 12 + 8 + MAX_ID + 16), 23);
        assert_eq!(batch_fits(MAX_BATCH, 100_000), 1);
        let full: Vec<Vec<u8>> = (0..38).map(|_| keys.issue_domain(1).unwrap()).collect();
        let text = Encoding::Base32.encode(&seal_batch(&k, &full).unwrap());
        assert!(
            text.len() < 8_192 - "Privasip-Tickets: ".len(),
            "{}",
            text.len()
        );
        // What is not a domain ticket cannot seal a callee.
        assert!(seal_callee(&keys.issue("bob", 9).unwrap(), "bob").is_err());
        assert!(seal_callee(&got[0][..50], "bob").is_err());
        assert!(seal_callee(&got[0], &"x".repeat(MAX_ID + 1)).is_err());
    }

    fn proxy_hpke() -> (Hpke, HpkeKey) {
        let sk = [7u8; 32];
        let pk = crate::hpke::public_of(&sk).unwrap();
        (Hpke::new(pk, 4), HpkeKey::new(sk, 4).unwrap())
    }

    #[test]
    fn a_phone_enrolls_gets_its_tickets_and_each_call_is_unlinkable() {
        let (cipher, decipher) = proxy_hpke();
        let (enrollment, sealed) = Enrollment::new(&cipher, None).unwrap();
        // The proxy: one HPKE open, the user key, a batch of tickets.
        let (k_u, hybrid) = accept(&decipher, None, &sealed, "alice").unwrap();
        assert!(!hybrid);
        assert_eq!(enrollment_key_id(&sealed), Some(4));
        let (keys, _) = TicketKeys::generate(1).unwrap();
        let tickets: Vec<_> = (0..16)
            .map(|_| keys.issue("alice", 1_000).unwrap())
            .collect();
        let batch = seal_batch(&k_u, &tickets).unwrap();
        // The phone opens them; another user's key does not.
        assert_eq!(enrollment.tickets("alice", &batch).unwrap(), tickets);
        assert_eq!(
            enrollment.tickets("mallory", &batch),
            Err(Error::Undecryptable)
        );
        // Two tickets of one user share nothing past the header.
        let (a, b) = (&tickets[0], &tickets[1]);
        assert_eq!(a[..3], b[..3]);
        assert_eq!(a.len(), b.len());
        let same = a[3..].iter().zip(&b[3..]).filter(|(x, y)| x == y).count();
        assert!(same < 8, "{same} equal bytes");
        // The proxy opens each with one symmetric operation.
        let t = keys.open(a).unwrap();
        assert_eq!((t.id.as_str(), t.expires), ("alice", 1_000));
        assert_ne!(t.nonce, keys.open(b).unwrap().nonce);
    }

    #[test]
    fn tampered_foreign_and_rotated_tickets() {
        let (old, old_key) = TicketKeys::generate(1).unwrap();
        let t = old.issue("bob", 5).unwrap();
        let mut bad = t.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(old.open(&bad), Err(Error::Undecryptable));
        let (other, _) = TicketKeys::generate(1).unwrap();
        assert_eq!(other.open(&t), Err(Error::Undecryptable));
        // Rotated: epoch 2 is current, epoch 1's tickets still open.
        let mut k2 = [0u8; 32];
        random(&mut k2).unwrap();
        let rotated = TicketKeys::new((2, &k2), Some((1, &old_key))).unwrap();
        assert_eq!(rotated.open(&t).unwrap().id, "bob");
        assert_eq!(rotated.issue("bob", 5).unwrap()[2], 2);
        let gone = TicketKeys::new((3, &k2), None).unwrap();
        assert_eq!(gone.open(&t), Err(Error::Undecryptable));
        // Not a ticket, or too short: refused the same way.
        assert_eq!(old.open(&t[..20]), Err(Error::Undecryptable));
        assert!(old.issue(&"x".repeat(MAX_ID + 1), 5).is_err());
    }

    #[test]
    fn an_enrollment_opens_only_at_its_proxy_and_batches_are_bounded() {
        let (cipher, _) = proxy_hpke();
        let (_, sealed) = Enrollment::new(&cipher, None).unwrap();
        let other = HpkeKey::new([9u8; 32], 4).unwrap();
        assert_eq!(
            accept(&other, None, &sealed, "alice"),
            Err(Error::Undecryptable)
        );
        let k = [1u8; 32];
        let many: Vec<Vec<u8>> = (0..MAX_BATCH + 5).map(|i| vec![i as u8; 40]).collect();
        let opened = open_batch(&k, &seal_batch(&k, &many).unwrap()).unwrap();
        assert_eq!(opened.len(), MAX_BATCH);
        assert_eq!(open_batch(&k, &[0u8; 10]), Err(Error::Undecryptable));
    }

    #[test]
    fn a_hybrid_enrollment_needs_both_halves() {
        let (cipher, decipher) = proxy_hpke();
        let (pq, _) = crate::pq::PqKey::generate().unwrap();
        let public = crate::pq::PqPublic::from_pem(&pq.public_pem().unwrap()).unwrap();
        let (enrollment, text) = Enrollment::new(&cipher, Some(&public)).unwrap();
        assert!(text.contains('.'));
        let (k_u, hybrid) = accept(&decipher, Some(&pq), &text, "alice").unwrap();
        assert!(hybrid);
        let batch = seal_batch(&k_u, &[vec![1, 2, 3]]).unwrap();
        assert_eq!(
            enrollment.tickets("alice", &batch).unwrap(),
            [vec![1, 2, 3]]
        );
        // Without the ML-KEM key it does not open; with another one
        // (implicit rejection) or the classical half alone, the key differs.
        assert!(accept(&decipher, None, &text, "alice").is_err());
        let (other, _) = crate::pq::PqKey::generate().unwrap();
        let k_other = accept(&decipher, Some(&other), &text, "alice").map(|k| k.0);
        assert_ne!(k_other, Ok(k_u));
        let classical = text.split('.').next().unwrap();
        assert_ne!(
            accept(&decipher, Some(&pq), classical, "alice").unwrap().0,
            k_u
        );
    }
}
