//! The location service (RFC 3261 §10): address-of-record → bindings.
//!
//! [`Location`] is the narrow interface; [`MemoryLocation`] is the sharded
//! in-memory store every worker shares. A change is made in two steps so
//! that nothing here waits on storage: [`Location::prepare`] computes the
//! records that describe it and marks the AoR busy; the driver persists
//! them (`io::journal`), then [`Location::commit`] applies them, or drops
//! them if they could not be stored (see `docs/server.md`).

use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;
use smallvec::SmallVec;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub use crate::config::{Durability, Overflow};
use crate::proto::aor_key::AorKey;
pub use crate::proto::binding::{Binding, Flow, Parts, Strings};
use crate::proto::parked::Parked;
use crate::shards::{ReadShards, Shards};

/// The REGISTER a set of changes comes from.
#[derive(Debug, Clone, Copy)]
pub struct Registration<'a> {
    /// Its Call-ID.
    pub call_id: &'a str,
    /// Its CSeq number.
    pub cseq: u32,
    /// Where it came from.
    pub source: SocketAddr,
    /// Path values to store (no tab or line feed), or "".
    pub path: &'a str,
    /// The transport it came over, when connection-oriented.
    pub flow: Option<sip_core::Transport>,
    /// The route to this node's end of that flow, for other nodes sharing
    /// the location (see [`Binding::node`]), or "".
    pub node: &'a str,
    /// When it arrived (Unix seconds).
    pub now: u64,
}

/// A requested change to one contact.
#[derive(Debug, Clone, Copy)]
pub struct ContactChange<'a> {
    /// The contact URI.
    pub contact: &'a str,
    /// Seconds to keep it; 0 removes it.
    pub expires: u32,
    /// Preference in thousandths.
    pub q: u16,
    /// The contact asks for RFC 5626 outbound (`reg-id` and `+sip.instance`).
    pub outbound: bool,
    /// Its `+sip.instance` and `reg-id` as `INSTANCE#REG-ID`, or "".
    pub instance: &'a str,
}

/// Why an update was refused; a refused update changes nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpdateError {
    /// Same Call-ID with a lower CSeq than the stored one: a stale REGISTER
    /// (RFC 3261 §10.3 step 7). An equal CSeq is a retransmission of the
    /// request that made the binding and is applied again, idempotently.
    #[error("CSeq {got} is below {stored} for this Call-ID")]
    OutOfOrder {
        /// CSeq received.
        got: u32,
        /// CSeq stored.
        stored: u32,
    },
    /// The AoR would hold more contacts than allowed (and the policy is to
    /// refuse).
    #[error("at most {max} contacts per address-of-record")]
    TooManyContacts {
        /// The limit.
        max: usize,
    },
    /// The contacts listed in the answer would not fit the reply.
    #[error("the contact listing would take {bytes} bytes, above {max}")]
    ListingTooLarge {
        /// Bytes the listing would take.
        bytes: usize,
        /// The most allowed.
        max: usize,
    },
    /// The store holds its most bindings (`max_bindings`) and this change
    /// would add more.
    #[error("the location holds its most bindings ({max})")]
    Full {
        /// The limit.
        max: usize,
    },
    /// Another change to this AoR (named) is being persisted; wait for
    /// its commit ([`MemoryLocation::wait_for`]) or try again (a retry,
    /// not a refusal).
    #[error("another change to {0} is in flight")]
    Busy(String),
}

/// Why the records of a change could not be stored; the change is then
/// not applied and the REGISTER is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The local journal could not be written (a full disk): 500.
    #[error("journal: {0}")]
    Journal(#[from] io::Error),
    /// The shared store (Redis) did not answer or refused: 503 with
    /// Retry-After, the phone tries again later.
    #[error("shared location store: {reason}")]
    Unavailable {
        /// What went wrong.
        reason: String,
        /// Seconds to tell the phone to wait.
        retry_after: u32,
    },
}

impl StoreError {
    /// The same error again (for each change of a batch that failed).
    pub fn again(&self) -> Self {
        match self {
            StoreError::Journal(e) => StoreError::Journal(io::Error::new(e.kind(), e.to_string())),
            StoreError::Unavailable {
                reason,
                retry_after,
            } => StoreError::Unavailable {
                reason: reason.clone(),
                retry_after: *retry_after,
            },
        }
    }
}

/// Limits one update must respect.
#[derive(Debug, Clone, Copy)]
pub struct UpdatePolicy {
    /// Most contacts per AoR.
    pub max_contacts: usize,
    /// What a REGISTER past the limit gets.
    pub overflow: Overflow,
    /// Most bytes the listing of contacts may take in the answer
    /// (`usize::MAX`: unbounded). Each contact counts its URI plus
    /// [`LISTING_OVERHEAD`].
    pub max_listing: usize,
    /// Most bindings the whole store may hold: a change that would add
    /// past it is refused ([`UpdateError::Full`]).
    pub max_bindings: usize,
}

/// Bytes a contact adds to a 200 OK besides its URI
/// (`Contact: <…>;expires=NNNNNNNNNN\r\n`).
pub const LISTING_OVERHEAD: usize = 32;

impl Default for UpdatePolicy {
    fn default() -> Self {
        Self {
            max_contacts: 10,
            overflow: Overflow::Reject,
            max_listing: usize::MAX,
            max_bindings: usize::MAX,
        }
    }
}

/// A journal record, written before the change is acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A binding was added or refreshed.
    Bind {
        /// Sequence number.
        seq: u64,
        /// AoR.
        aor: AorKey,
        /// The binding.
        binding: Binding,
    },
    /// A contact was removed.
    Remove {
        /// Sequence number.
        seq: u64,
        /// AoR.
        aor: AorKey,
        /// Contact URI.
        contact: String,
    },
}

impl Record {
    /// The AoR it changes.
    pub fn aor(&self) -> &AorKey {
        match self {
            Record::Bind { aor, .. } | Record::Remove { aor, .. } => aor,
        }
    }

    /// About the bytes the record takes in a journal line.
    pub fn approximate_len(&self) -> usize {
        const FIELDS: usize = 96;
        match self {
            Record::Bind { aor, binding, .. } => FIELDS + aor.len() + binding.strings.len(),
            Record::Remove { aor, contact, .. } => FIELDS + aor.len() + contact.len(),
        }
    }
}

/// A change computed by [`Location::prepare`], waiting for its records to
/// be persisted. Hand it back to [`Location::commit`] exactly once: until
/// then its AoR refuses other changes with [`UpdateError::Busy`].
#[derive(Debug)]
#[must_use = "a prepared change keeps its AoR busy until committed"]
pub struct Prepared {
    /// The AoR's hash in the backend (its shard and slot), so committing
    /// looks nothing up twice.
    hash: u64,
    /// 0: nothing to persist, nothing marked.
    token: u64,
    /// Each names the AoR: the change does not again (a `Prepared` is
    /// moved from the decision to the store and back; the smaller, the
    /// cheaper).
    records: Records,
    /// The AoR's bindings as they will be after the change, highest q
    /// first: stored ones it keeps (copied into `kept`) and ones its
    /// records make, which are not copied again.
    order: Slots,
    kept: Vec<Binding>,
}

/// A binding of a prepared list: the `Kept` one at an index of the AoR's
/// bindings (the stored list while preparing, [`Prepared`]'s copies
/// after), or the one the `Record::Bind` at an index of the change's
/// records `Made`.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Kept(usize),
    Made(usize),
}

impl Slot {
    fn get<'a>(self, kept: &'a [Binding], records: &'a [Record]) -> &'a Binding {
        match self {
            Slot::Kept(i) => &kept[i],
            Slot::Made(i) => match &records[i] {
                Record::Bind { binding, .. } => binding,
                // `apply` makes a `Made` slot only of the Bind it pushed.
                Record::Remove { .. } => unreachable!("a made slot names a Bind record"),
            },
        }
    }
}

impl Prepared {
    /// The records to persist before the change may take effect.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// The address-of-record it changes.
    pub fn aor(&self) -> &str {
        self.records.first().map_or("", |r| r.aor().as_str())
    }

    /// The AoR's live bindings as they will be once the change is
    /// committed, highest q first (what the 200 OK lists).
    pub fn bindings(&self) -> impl Iterator<Item = &Binding> + '_ {
        self.order.iter().map(|s| s.get(&self.kept, &self.records))
    }

    /// Whether nothing needs persisting (a query, or a no-op removal).
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

const SHARDS: usize = 64;

/// Messages that may wait on one AoR while a change to it is stored;
/// more are answered 500 with Retry-After.
pub const MAX_WAITING: usize = 32;

/// What became of a message that met a change in flight on its AoR.
#[derive(Debug)]
pub enum Wait {
    /// It waits; the change's commit hands it back.
    Parked,
    /// The change is done already: hand it in again now.
    NotBusy(Parked),
    /// Too many wait already.
    Full(Parked),
}

/// An AoR's bindings: most hold one contact, kept in the table's entry
/// beside the AoR's key, so a refresh finds it there, not on a heap
/// block of its own.
type List = SmallVec<[Binding; 1]>;

/// A change's records: the usual one (a refresh or a new binding) held
/// in the change itself, without an allocation.
type Records = SmallVec<[Record; 1]>;

/// A change's list of bindings, in place for up to two.
type Slots = SmallVec<[Slot; 2]>;

/// One AoR: its committed bindings, and the token of the change being
/// persisted (its bindings travel in the [`Prepared`] change).
#[derive(Debug, Default)]
struct Aor {
    list: List,
    pending: Option<u64>,
    /// Messages that met the change in flight, handed back by its commit.
    waiting: Vec<Parked>,
}

/// One shard of AoRs, in a table addressed by the hash the store
/// computes once per operation (it also picks the shard).
#[derive(Debug, Default)]
struct Shard {
    map: HashTable<(AorKey, Aor)>,
}

impl Shard {
    fn get(&self, hash: u64, aor: &(impl AsRef<[u8]> + ?Sized)) -> Option<&Aor> {
        self.map.find(hash, |(k, _)| k.is(aor)).map(|(_, a)| a)
    }

    fn get_mut(&mut self, hash: u64, aor: &(impl AsRef<[u8]> + ?Sized)) -> Option<&mut Aor> {
        self.map.find_mut(hash, |(k, _)| k.is(aor)).map(|(_, a)| a)
    }

    fn remove(&mut self, hash: u64, aor: &(impl AsRef<[u8]> + ?Sized)) {
        if let Ok(e) = self.map.find_entry(hash, |(k, _)| k.is(aor)) {
            e.remove();
        }
    }

    /// The entry for `aor`, made empty if missing.
    fn entry(&mut self, hash: u64, aor: &str, rehash: impl Fn(&str) -> u64) -> &mut Aor {
        if self.get(hash, aor).is_none() {
            self.map
                .insert_unique(hash, (AorKey::new(aor), Aor::default()), |(k, _)| {
                    rehash(k.as_str())
                });
        }
        self.get_mut(hash, aor).expect("just inserted")
    }
}

/// Sharded in-memory location store.
#[derive(Debug)]
pub struct MemoryLocation {
    shards: ReadShards<Shard>,
    hasher: RandomState,
    seq: AtomicU64,
    tokens: AtomicU64,
    /// Bindings held (expired ones until swept), for `max_bindings`.
    held: AtomicUsize,
    /// Messages woken outside any core, and how many.
    ready: Shards<Vec<Parked>>,
    ready_count: AtomicUsize,
}

impl MemoryLocation {
    /// An empty store; `hasher` (from the driver's randomness) spreads
    /// AoRs over the shards.
    pub fn new(hasher: RandomState) -> Self {
        Self {
            shards: ReadShards::new(SHARDS, Shard::default),
            hasher,
            seq: AtomicU64::new(1),
            tokens: AtomicU64::new(1),
            held: AtomicUsize::new(0),
            ready: Shards::new(1, Vec::new),
            ready_count: AtomicUsize::new(0),
        }
    }

    /// An AoR's list went from `before` to `after` bindings.
    fn held_changed(&self, before: usize, after: usize) {
        if after > before {
            self.held.fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.held.fetch_sub(before - after, Ordering::Relaxed);
        }
    }

    /// Bindings held, counting expired ones not yet swept.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    fn hash(&self, aor: &str) -> u64 {
        self.hasher.hash_one(aor)
    }

    /// The shard for a hash: bits the tables themselves do not use for
    /// the slot (low bits) or its tag (top 7 bits).
    fn shard(hash: u64) -> usize {
        (hash >> 32) as usize
    }

    /// Calls `f` with every live committed binding, one shard at a time
    /// under its read lock (snapshots).
    pub fn visit(&self, now: u64, mut f: impl FnMut(&str, &Binding)) {
        for s in self.shards.reads() {
            for (aor, a) in s.map.iter() {
                for b in a.list.iter().filter(|b| b.expires_at > now) {
                    f(aor.as_str(), b);
                }
            }
        }
    }

    /// Makes the store hold exactly `bindings` (AoR → its bindings), as
    /// read from a shared store after (re)connecting: AoRs absent there
    /// are dropped. A change in flight is applied over the new list by
    /// its commit, if stored.
    pub fn replace_all(&self, mut bindings: std::collections::HashMap<String, Vec<Binding>>) {
        for mut s in self.shards.writes() {
            s.map
                .retain(|(aor, a)| match bindings.remove(aor.as_str()) {
                    Some(list) => {
                        self.held_changed(a.list.len(), list.len());
                        a.list = List::from_vec(list);
                        true
                    }
                    None => {
                        self.held_changed(a.list.len(), 0);
                        a.list.clear();
                        a.pending.is_some()
                    }
                });
        }
        for (aor, list) in bindings {
            let hash = self.hash(&aor);
            let mut shard = self.shards.write(Self::shard(hash));
            let entry = shard.entry(hash, &aor, |k| self.hash(k));
            self.held_changed(entry.list.len(), list.len());
            entry.list = List::from_vec(list);
        }
    }

    /// Applies a journal record during recovery.
    pub fn replay(&self, r: Record) {
        let hash = self.hash(r.aor().as_str());
        let mut shard = self.shards.write(Self::shard(hash));
        match r {
            Record::Bind { seq, aor, binding } => {
                self.seq.fetch_max(seq + 1, Ordering::Relaxed);
                let list = &mut shard.entry(hash, aor.as_str(), |k| self.hash(k)).list;
                let before = list.len();
                bind(list, binding);
                self.held_changed(before, list.len());
            }
            Record::Remove { seq, aor, contact } => {
                self.seq.fetch_max(seq + 1, Ordering::Relaxed);
                if let Some(a) = shard.get_mut(hash, &aor) {
                    let before = a.list.len();
                    a.list.retain(|b| b.contact() != contact);
                    self.held_changed(before, a.list.len());
                    // An AoR with a change in flight stays for its commit.
                    if a.list.is_empty() && a.pending.is_none() {
                        shard.remove(hash, &aor);
                    }
                }
            }
        }
    }
}

/// Puts `binding` in an AoR's bindings, replacing the one for its contact.
fn bind(list: &mut List, binding: Binding) {
    match list.iter_mut().find(|b| b.contact() == binding.contact()) {
        Some(b) => *b = binding,
        None => list.push(binding),
    }
}

impl MemoryLocation {
    /// Computes a REGISTER's changes for `aor` against the stored
    /// bindings (`remove_all` is `Contact: *`) and marks the AoR busy
    /// until [`commit`](Self::commit); nothing is applied yet. `aor`
    /// and the bindings as they will be after the change are kept in the
    /// [`Prepared`] change.
    pub fn prepare(
        &self,
        aor: &str,
        changes: &[ContactChange<'_>],
        remove_all: bool,
        reg: &Registration<'_>,
        policy: &UpdatePolicy,
    ) -> Result<Prepared, UpdateError> {
        let (call_id, cseq, now) = (reg.call_id, reg.cseq, reg.now);
        let hash = self.hash(aor);
        let mut shard = self.shards.write(Self::shard(hash));
        let shard = &mut *shard;
        let mut stored = shard.get_mut(hash, aor);
        if stored.as_ref().is_some_and(|a| a.pending.is_some()) {
            return Err(UpdateError::Busy(aor.to_owned()));
        }
        // The change's records and the entry's key hold the AoR inline
        // (when short, as most are): no allocation for it.
        let key = AorKey::new(aor);
        let had: &[Binding] = stored.as_deref().map_or(&[], |a| &a.list);
        // The stored list changes only once persisted: the change works on
        // indexes into it, and copies only the bindings it keeps.
        let mut order: Slots = (0..had.len())
            .filter(|&i| had[i].expires_at > now)
            .map(Slot::Kept)
            .collect();
        for s in &order {
            let b = s.get(had, &[]);
            let touched = remove_all || changes.iter().any(|c| c.contact == b.contact());
            if b.call_id() == call_id && touched && cseq < b.cseq {
                return Err(UpdateError::OutOfOrder {
                    got: cseq,
                    stored: b.cseq,
                });
            }
        }
        let mut records = apply(&mut order, had, &key, changes, remove_all, reg);
        make_room(&mut order, had, &mut records, &key, changes, policy)?;
        if order.len() > had.len()
            && self.held().saturating_add(order.len() - had.len()) > policy.max_bindings
        {
            return Err(UpdateError::Full {
                max: policy.max_bindings,
            });
        }
        let listing: usize = order
            .iter()
            .map(|s| s.get(had, &records).contact().len() + LISTING_OVERHEAD)
            .sum();
        if listing > policy.max_listing {
            return Err(UpdateError::ListingTooLarge {
                bytes: listing,
                max: policy.max_listing,
            });
        }
        // Sequence numbers are taken under the shard lock, so replaying
        // every journal sorted by them reproduces this order.
        for r in &mut records {
            match r {
                Record::Bind { seq, .. } | Record::Remove { seq, .. } => {
                    *seq = self.seq.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        order.sort_by_key(|s| std::cmp::Reverse(s.get(had, &records).q));
        let mut kept = Vec::new();
        for s in &mut order {
            if let Slot::Kept(i) = *s {
                kept.push(had[i].clone());
                *s = Slot::Kept(kept.len() - 1);
            }
        }
        let token = if records.is_empty() {
            0
        } else {
            let token = self.tokens.fetch_add(1, Ordering::Relaxed);
            let pending = Some(token);
            match stored.as_mut() {
                Some(a) => a.pending = pending,
                None => {
                    let entry = Aor {
                        list: List::new(),
                        pending,
                        waiting: Vec::new(),
                    };
                    shard
                        .map
                        .insert_unique(hash, (key.clone(), entry), |(k, _)| self.hash(k.as_str()));
                }
            }
            token
        };
        Ok(Prepared {
            hash,
            token,
            records,
            order,
            kept,
        })
    }

    /// Applies a prepared change whose records were `stored`, or forgets
    /// it when they were not (memory never holds what storage lacks).
    /// Returns the messages that waited on the AoR meanwhile
    /// ([`MemoryLocation::wait_for`]): hand them in again.
    #[must_use = "the messages that waited on the AoR must be handed in again"]
    pub fn commit(&self, prepared: Prepared, stored: bool) -> Vec<Parked> {
        if prepared.token == 0 {
            return Vec::new();
        }
        let hash = prepared.hash;
        let mut shard = self.shards.write(Self::shard(hash));
        // A change with a token has records, and each names the AoR.
        let Some(key) = prepared.records.first().map(Record::aor) else {
            return Vec::new();
        };
        let Some(a) = shard.get_mut(hash, key) else {
            return Vec::new();
        };
        let Some(token) = a.pending.take() else {
            return Vec::new();
        };
        let woken = std::mem::take(&mut a.waiting);
        debug_assert_eq!(token, prepared.token, "one change per AoR in flight");
        let before = a.list.len();
        // Contact by contact, as the shared store applies it: another
        // node's change to this AoR that arrived meanwhile (`replay`,
        // `replace_all`) stays. The AoR is moved out of each record, not
        // copied: the last one removes an entry left empty.
        let mut aor = None;
        for r in prepared.records {
            aor = Some(match r {
                Record::Bind { binding, aor, .. } => {
                    if stored {
                        bind(&mut a.list, binding);
                    }
                    aor
                }
                Record::Remove { contact, aor, .. } => {
                    if stored {
                        a.list.retain(|b| b.contact() != contact);
                    }
                    aor
                }
            });
        }
        if stored {
            a.list.sort_by_key(|b| std::cmp::Reverse(b.q));
        }
        self.held_changed(before, a.list.len());
        if let Some(aor) = aor.filter(|_| a.list.is_empty()) {
            shard.remove(hash, &aor);
        }
        woken
    }

    /// Parks `p` on `aor` while a change to it is in flight: the commit
    /// of that change hands it back. Checked and parked under the AoR's
    /// lock, so it cannot miss the commit.
    pub fn wait_for(&self, aor: &str, p: Parked) -> Wait {
        let hash = self.hash(aor);
        let mut shard = self.shards.write(Self::shard(hash));
        match shard.get_mut(hash, aor) {
            Some(a) if a.pending.is_some() && a.waiting.len() >= MAX_WAITING => Wait::Full(p),
            Some(a) if a.pending.is_some() => {
                a.waiting.push(p);
                Wait::Parked
            }
            _ => Wait::NotBusy(p),
        }
    }

    /// Messages woken by a commit that no core made (an operator's
    /// removal): for the next worker that looks ([`Self::take_ready`]).
    pub fn release(&self, woken: Vec<Parked>) {
        if !woken.is_empty() {
            self.ready_count.fetch_add(woken.len(), Ordering::Relaxed);
            self.ready.lock(0).extend(woken);
        }
    }

    /// Whether [`Self::release`] left messages.
    pub fn has_ready(&self) -> bool {
        self.ready_count.load(Ordering::Relaxed) > 0
    }

    /// The messages [`Self::release`] left, if any (one atomic load when
    /// there are none).
    pub fn take_ready(&self) -> Vec<Parked> {
        if self.ready_count.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let taken = std::mem::take(&mut *self.ready.lock(0));
        self.ready_count.fetch_sub(taken.len(), Ordering::Relaxed);
        taken
    }

    /// Live bindings for `aor`, highest q first.
    pub fn lookup(&self, aor: &str, now: u64, out: &mut Vec<Binding>) {
        out.clear();
        let hash = self.hash(aor);
        let shard = self.shards.read(Self::shard(hash));
        if let Some(list) = shard.get(hash, aor).map(|a| &a.list) {
            out.extend(list.iter().filter(|b| b.expires_at > now).cloned());
        }
        drop(shard);
        out.sort_by_key(|b| std::cmp::Reverse(b.q));
    }

    /// Drops expired bindings; returns how many.
    pub fn expire(&self, now: u64) -> usize {
        let mut n = 0;
        for mut s in self.shards.writes() {
            s.map.retain(|(_, a)| {
                let before = a.list.len();
                a.list.retain(|b| b.expires_at > now);
                n += before - a.list.len();
                !a.list.is_empty() || a.pending.is_some()
            });
        }
        self.held.fetch_sub(n, Ordering::Relaxed);
        n
    }

    /// All live bindings (for the operator view).
    pub fn snapshot(&self, now: u64) -> Vec<(String, Binding)> {
        let mut v = Vec::new();
        for s in self.shards.reads() {
            for (aor, a) in s.map.iter() {
                v.extend(
                    a.list
                        .iter()
                        .filter(|b| b.expires_at > now)
                        .map(|b| (aor.as_str().to_owned(), b.clone())),
                );
            }
        }
        v.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.contact().cmp(b.1.contact())));
        v
    }

    /// Number of live bindings.
    pub fn len(&self, now: u64) -> usize {
        self.shards
            .reads()
            .map(|s| {
                s.map
                    .iter()
                    .map(|(_, a)| a.list.iter().filter(|b| b.expires_at > now).count())
                    .sum::<usize>()
            })
            .sum()
    }

    /// Whether there are no live bindings.
    pub fn is_empty(&self, now: u64) -> bool {
        self.len(now) == 0
    }
}

/// A record that removes `contact` from `aor`.
fn removal(aor: &AorKey, contact: String) -> Record {
    Record::Remove {
        seq: 0,
        aor: aor.clone(),
        contact,
    }
}

/// Applies a REGISTER's `changes` (all removed first when `remove_all`)
/// to `list`, the AoR's live bindings (kept from `had`), and returns the
/// records that store them (sequence numbers not yet taken).
fn apply(
    list: &mut Slots,
    had: &[Binding],
    aor: &AorKey,
    changes: &[ContactChange<'_>],
    remove_all: bool,
    reg: &Registration<'_>,
) -> Records {
    let mut records = Records::with_capacity(changes.len() + usize::from(remove_all) * list.len());
    if remove_all {
        for s in std::mem::take(list) {
            let gone = s.get(had, &records).contact().to_owned();
            records.push(removal(aor, gone));
        }
    }
    for c in changes {
        if !c.instance.is_empty() && c.expires != 0 {
            // RFC 5626 §6: the same instance and reg-id is the same
            // phone on a new flow (a reload, a new connection): its
            // older binding goes, whatever contact it had.
            while let Some(p) = list.iter().position(|s| {
                let b = s.get(had, &records);
                b.instance() == c.instance && b.contact() != c.contact
            }) {
                let gone = list.remove(p).get(had, &records).contact().to_owned();
                records.push(removal(aor, gone));
            }
        }
        let pos = list
            .iter()
            .position(|s| s.get(had, &records).contact() == c.contact);
        if c.expires == 0 {
            if let Some(p) = pos {
                list.remove(p);
                records.push(removal(aor, c.contact.to_owned()));
            }
            continue;
        }
        records.push(Record::Bind {
            seq: 0,
            aor: aor.clone(),
            binding: made(c, reg),
        });
        let slot = Slot::Made(records.len() - 1);
        match pos {
            Some(p) => list[p] = slot,
            None => list.push(slot),
        }
    }
    records
}

/// The binding a change makes.
fn made(c: &ContactChange<'_>, reg: &Registration<'_>) -> Binding {
    Binding {
        strings: Strings::new(Parts {
            contact: c.contact,
            call_id: reg.call_id,
            path: reg.path,
            node: reg.node,
            instance: c.instance,
        }),
        expires_at: reg.now + u64::from(c.expires),
        q: c.q,
        cseq: reg.cseq,
        source: reg.source,
        flow: reg.flow.map(|transport| Flow {
            transport,
            outbound: c.outbound,
        }),
    }
}

/// Keeps at most `max_contacts` bindings: refused under `Reject`, else
/// what this request did not name goes, nearest expiry first.
fn make_room(
    list: &mut Slots,
    had: &[Binding],
    records: &mut Records,
    aor: &AorKey,
    changes: &[ContactChange<'_>],
    policy: &UpdatePolicy,
) -> Result<(), UpdateError> {
    if list.len() > policy.max_contacts {
        if policy.overflow == Overflow::Reject {
            return Err(UpdateError::TooManyContacts {
                max: policy.max_contacts,
            });
        }
        // Make room by dropping what this request did not name,
        // nearest expiry first.
        let named = |b: &Binding| changes.iter().any(|c| c.contact == b.contact());
        while list.len() > policy.max_contacts {
            let Some(p) = list
                .iter()
                .enumerate()
                .map(|(i, s)| (i, s.get(had, records)))
                .filter(|(_, b)| !named(b))
                .min_by_key(|(_, b)| b.expires_at)
                .map(|(i, _)| i)
            else {
                return Err(UpdateError::TooManyContacts {
                    max: policy.max_contacts,
                });
            };
            let gone = list.remove(p).get(had, records).contact().to_owned();
            records.push(removal(aor, gone));
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Prepare, persist, commit in one call, as a caller that stores
    /// synchronously would.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn update(
        loc: &MemoryLocation,
        aor: &str,
        changes: &[ContactChange<'_>],
        remove_all: bool,
        reg: &Registration<'_>,
        policy: &UpdatePolicy,
        persist: &mut dyn FnMut(&[Record]) -> io::Result<()>,
        current: &mut Vec<Binding>,
    ) -> Result<(), Failure> {
        let prepared = loc
            .prepare(aor, changes, remove_all, reg, policy)
            .map_err(Failure::Refused)?;
        current.clear();
        current.extend(prepared.bindings().cloned());
        if prepared.is_empty() {
            let _ = loc.commit(prepared, true);
            return Ok(());
        }
        let result = persist(prepared.records());
        let _ = loc.commit(prepared, result.is_ok());
        result.map_err(Failure::NotStored)
    }

    /// Why [`update`] changed nothing.
    #[derive(Debug)]
    pub(crate) enum Failure {
        Refused(UpdateError),
        /// The change could not be persisted, so it was not applied.
        NotStored(io::Error),
    }

    pub(crate) fn src() -> SocketAddr {
        "192.0.2.1:5060".parse().expect("literal")
    }

    pub(crate) fn reg(call_id: &str, cseq: u32, now: u64) -> Registration<'_> {
        Registration {
            call_id,
            cseq,
            source: src(),
            path: "",
            flow: None,
            node: "",
            now,
        }
    }

    pub(crate) fn change(contact: &str, expires: u32) -> ContactChange<'_> {
        ContactChange {
            contact,
            expires,
            q: 1000,
            outbound: false,
            instance: "",
        }
    }

    /// RFC 5626 §6: a phone's later registration with the same instance
    /// and reg-id (a new flow, a new contact) replaces its binding; another
    /// reg-id or instance does not, and removals are journaled.
    #[test]
    fn the_same_instance_and_reg_id_replace_the_older_binding() {
        let loc = MemoryLocation::new(RandomState::new());
        let (mut cur, mut rec) = (Vec::new(), Vec::new());
        let with = |contact, instance| ContactChange {
            instance,
            ..change(contact, 600)
        };
        for (contact, instance) in [
            ("sip:old@a.invalid", "<urn:uuid:1>#1"),
            ("sip:other@b.invalid", "<urn:uuid:1>#2"),
            ("sip:new@c.invalid", "<urn:uuid:1>#1"),
        ] {
            upd(
                &loc,
                "sip:a@x",
                &[with(contact, instance)],
                false,
                &reg(contact, 1, 100),
                &mut cur,
                &mut rec,
            )
            .expect("bind");
        }
        let mut contacts: Vec<&str> = cur.iter().map(|b| b.contact()).collect();
        contacts.sort_unstable();
        assert_eq!(contacts, ["sip:new@c.invalid", "sip:other@b.invalid"]);
        assert!(rec.iter().any(
            |r| matches!(r, Record::Remove { contact, .. } if contact == "sip:old@a.invalid")
        ));
    }

    /// An update with the default policy whose records land in `rec`.
    pub(crate) fn upd(
        loc: &MemoryLocation,
        aor: &str,
        changes: &[ContactChange<'_>],
        remove_all: bool,
        r: &Registration<'_>,
        cur: &mut Vec<Binding>,
        rec: &mut Vec<Record>,
    ) -> Result<(), Failure> {
        let mut persist = |records: &[Record]| {
            rec.extend_from_slice(records);
            Ok(())
        };
        let policy = UpdatePolicy::default();
        update(loc, aor, changes, remove_all, r, &policy, &mut persist, cur)
    }

    /// A prepared change lists the AoR as its commit leaves it: bindings
    /// it keeps (copied), refreshes, adds and removes, highest q first.
    #[test]
    fn a_prepared_listing_is_what_the_commit_leaves() {
        let loc = MemoryLocation::new(RandomState::new());
        let policy = UpdatePolicy::default();
        let q = |contact, expires, q| ContactChange {
            q,
            ..change(contact, expires)
        };
        let (mut cur, mut rec) = (Vec::new(), Vec::new());
        let first = [q("sip:a@1.1.1.1", 60, 300), q("sip:a@2.2.2.2", 60, 600)];
        upd(
            &loc,
            "sip:a@x",
            &first,
            false,
            &reg("c1", 1, 100),
            &mut cur,
            &mut rec,
        )
        .expect("bind two");
        let changes = [
            q("sip:a@2.2.2.2", 0, 1000),
            q("sip:a@3.3.3.3", 60, 200),
            q("sip:a@1.1.1.1", 90, 900),
        ];
        let prepared = loc
            .prepare("sip:a@x", &changes, false, &reg("c1", 2, 101), &policy)
            .expect("prepare");
        let listed: Vec<(String, u16, u64)> = prepared
            .bindings()
            .map(|b| (b.contact().to_owned(), b.q, b.expires_at))
            .collect();
        assert_eq!(
            listed,
            [
                ("sip:a@1.1.1.1".to_owned(), 900, 191),
                ("sip:a@3.3.3.3".to_owned(), 200, 161)
            ]
        );
        let _ = loc.commit(prepared, true);
        loc.lookup("sip:a@x", 101, &mut cur);
        let stored: Vec<(String, u16, u64)> = cur
            .iter()
            .map(|b| (b.contact().to_owned(), b.q, b.expires_at))
            .collect();
        assert_eq!(stored, listed);
        // A binding the change does not name is kept, and listed by its q.
        let prepared = loc
            .prepare(
                "sip:a@x",
                &[q("sip:a@4.4.4.4", 60, 500)],
                false,
                &reg("c4", 1, 102),
                &policy,
            )
            .expect("prepare");
        let order: Vec<&str> = prepared.bindings().map(|b| b.contact()).collect();
        assert_eq!(order, ["sip:a@1.1.1.1", "sip:a@4.4.4.4", "sip:a@3.3.3.3"]);
        let _ = loc.commit(prepared, true);
    }

    #[test]
    fn bind_refresh_remove_and_order() {
        let loc = MemoryLocation::new(RandomState::new());
        let (mut cur, mut rec) = (Vec::new(), Vec::new());
        upd(
            &loc,
            "sip:a@x",
            &[change("sip:a@1.1.1.1", 60)],
            false,
            &reg("c1", 1, 100),
            &mut cur,
            &mut rec,
        )
        .expect("bind");
        assert_eq!(cur.len(), 1);
        upd(
            &loc,
            "sip:a@x",
            &[ContactChange {
                contact: "sip:a@2.2.2.2",
                expires: 60,
                q: 500,
                outbound: false,
                instance: "",
            }],
            false,
            &reg("c2", 1, 100),
            &mut cur,
            &mut rec,
        )
        .expect("second contact");
        assert_eq!(cur.len(), 2);
        assert_eq!(cur[0].contact(), "sip:a@1.1.1.1", "q=1 first");
        let mut up = |cseq, expires| {
            upd(
                &loc,
                "sip:a@x",
                &[change("sip:a@1.1.1.1", expires)],
                false,
                &reg("c1", cseq, 101),
                &mut cur,
                &mut rec,
            )
        };
        assert!(
            up(1, 60).is_ok(),
            "a retransmission (same Call-ID and CSeq) applies again"
        );
        assert!(up(3, 60).is_ok());
        assert!(
            matches!(
                up(2, 60),
                Err(Failure::Refused(UpdateError::OutOfOrder {
                    got: 2,
                    stored: 3
                }))
            ),
            "stale"
        );
        assert!(up(4, 0).is_ok(), "remove");
        assert_eq!(cur.len(), 1);
        assert_eq!(loc.len(170), 0, "expired");
        upd(
            &loc,
            "sip:a@x",
            &[],
            true,
            &reg("c9", 1, 101),
            &mut cur,
            &mut rec,
        )
        .expect("star");
        assert!(cur.is_empty());
        assert_eq!(loc.len(101), 0);
    }

    /// A change whose journal write fails is not applied: memory keeps
    /// what the client was told (before, the binding was served although
    /// the REGISTER got 500).
    #[test]
    fn a_failed_persist_changes_nothing() {
        let loc = MemoryLocation::new(RandomState::new());
        let mut cur = Vec::new();
        let policy = UpdatePolicy::default();
        let mut ok = |_: &[Record]| Ok(());
        update(
            &loc,
            "sip:a@x",
            &[change("sip:a@1.1.1.1", 60)],
            false,
            &reg("c1", 1, 100),
            &policy,
            &mut ok,
            &mut cur,
        )
        .expect("bind");
        let mut full = |_: &[Record]| Err(io::Error::other("No space left on device"));
        for (changes, star) in [
            (vec![change("sip:a@2.2.2.2", 60)], false),
            (vec![change("sip:a@1.1.1.1", 0)], false),
            (vec![], true),
        ] {
            let r = update(
                &loc,
                "sip:a@x",
                &changes,
                star,
                &reg("c1", 2, 100),
                &policy,
                &mut full,
                &mut cur,
            );
            assert!(
                matches!(r, Err(Failure::NotStored(e)) if e.to_string() == "No space left on device")
            );
            let mut now = Vec::new();
            loc.lookup("sip:a@x", 100, &mut now);
            assert_eq!(now.len(), 1);
            assert_eq!(now[0].contact(), "sip:a@1.1.1.1");
        }
    }

    #[test]
    fn contacts_are_bounded_by_refusal_or_replacement() {
        let loc = MemoryLocation::new(RandomState::new());
        let (mut cur, mut rec) = (Vec::new(), Vec::new());
        let mut persist = |r: &[Record]| {
            rec.extend_from_slice(r);
            Ok(())
        };
        let mut policy = UpdatePolicy {
            max_contacts: 2,
            ..UpdatePolicy::default()
        };
        for (i, c) in ["sip:1@h", "sip:2@h"].into_iter().enumerate() {
            update(
                &loc,
                "sip:a@x",
                &[change(c, 60 + i as u32)],
                false,
                &reg("c", 1, 100),
                &policy,
                &mut persist,
                &mut cur,
            )
            .expect("within the limit");
        }
        let third = [change("sip:3@h", 90)];
        let r = update(
            &loc,
            "sip:a@x",
            &third,
            false,
            &reg("c", 2, 100),
            &policy,
            &mut persist,
            &mut cur,
        );
        assert!(matches!(
            r,
            Err(Failure::Refused(UpdateError::TooManyContacts { max: 2 }))
        ));
        policy.overflow = Overflow::ReplaceOldest;
        update(
            &loc,
            "sip:a@x",
            &third,
            false,
            &reg("c", 3, 100),
            &policy,
            &mut persist,
            &mut cur,
        )
        .expect("replaces");
        let mut names: Vec<_> = cur.iter().map(|b| b.contact()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            ["sip:2@h", "sip:3@h"],
            "the one closest to expiry went"
        );
        policy.max_listing = 10;
        let r = update(
            &loc,
            "sip:b@x",
            &[change("sip:long-enough@h", 60)],
            false,
            &reg("d", 1, 100),
            &policy,
            &mut persist,
            &mut cur,
        );
        assert!(matches!(
            r,
            Err(Failure::Refused(UpdateError::ListingTooLarge { .. }))
        ));
        assert_eq!(loc.len(100), 2, "refused updates leave no trace");
        assert!(rec
            .iter()
            .any(|r| matches!(r, Record::Remove { contact, .. } if contact == "sip:1@h")));
    }

    /// Another node's changes that arrive while this node's change to the
    /// same AoR is with the shared store survive its commit, contact by
    /// contact (as in Redis); a full read meanwhile does too, and a
    /// change that was not stored leaves what arrived.
    #[test]
    fn a_commit_keeps_what_other_nodes_changed_meanwhile() {
        let loc = MemoryLocation::new(RandomState::new());
        let policy = UpdatePolicy::default();
        let bind = |contact: &str, call_id: &str| Record::Bind {
            seq: 0,
            aor: "sip:a@x".into(),
            binding: Binding {
                strings: Strings::new(Parts {
                    contact,
                    call_id,
                    ..Parts::default()
                }),
                expires_at: 160,
                q: 1000,
                cseq: 1,
                source: src(),
                flow: None,
            },
        };
        let contacts = |loc: &MemoryLocation| {
            let mut cur = Vec::new();
            loc.lookup("sip:a@x", 100, &mut cur);
            let mut c: Vec<String> = cur.iter().map(|b| b.contact().to_owned()).collect();
            c.sort();
            c
        };
        loc.replay(bind("sip:a@0.0.0.0", "old"));
        let prepare = |contact: &str, expires: u32| {
            loc.prepare(
                "sip:a@x",
                &[change(contact, expires)],
                false,
                &reg("here", 1, 100),
                &policy,
            )
            .expect("prepare")
        };
        let mine = prepare("sip:a@1.1.1.1", 60);
        loc.replay(bind("sip:a@2.2.2.2", "there"));
        let _ = loc.commit(mine, true);
        assert_eq!(
            contacts(&loc),
            ["sip:a@0.0.0.0", "sip:a@1.1.1.1", "sip:a@2.2.2.2"]
        );
        // A full read while a removal is in flight: the removal applies
        // over what was read.
        let gone = prepare("sip:a@1.1.1.1", 0);
        let mut all = std::collections::HashMap::new();
        let read = |r: Record| match r {
            Record::Bind { binding, .. } => binding,
            Record::Remove { .. } => unreachable!("binds only"),
        };
        all.insert(
            "sip:a@x".to_owned(),
            vec![
                read(bind("sip:a@1.1.1.1", "here")),
                read(bind("sip:a@3.3.3.3", "there")),
            ],
        );
        loc.replace_all(all);
        let _ = loc.commit(gone, true);
        assert_eq!(contacts(&loc), ["sip:a@3.3.3.3"]);
        // Another node removes the last binding while a change is in
        // flight: the AoR waits for the commit, which applies.
        let last = prepare("sip:a@6.6.6.6", 60);
        loc.replay(Record::Remove {
            seq: 0,
            aor: "sip:a@x".into(),
            contact: "sip:a@3.3.3.3".into(),
        });
        let _ = loc.commit(last, true);
        assert_eq!(contacts(&loc), ["sip:a@6.6.6.6"]);
        // Not stored: what arrived stays, the change does not apply.
        let failed = prepare("sip:a@4.4.4.4", 60);
        loc.replay(bind("sip:a@5.5.5.5", "there"));
        let _ = loc.commit(failed, false);
        assert_eq!(contacts(&loc), ["sip:a@5.5.5.5", "sip:a@6.6.6.6"]);
    }

    /// While a change is being persisted its AoR refuses another one
    /// (the caller retries), other AoRs are free, and a change whose
    /// storage failed leaves the AoR as it was and free again.
    #[test]
    fn an_aor_takes_one_change_at_a_time() {
        let loc = MemoryLocation::new(RandomState::new());
        let policy = UpdatePolicy::default();
        let mut cur = Vec::new();
        let first = loc
            .prepare(
                "sip:a@x",
                &[change("sip:a@1.1.1.1", 60)],
                false,
                &reg("c1", 1, 100),
                &policy,
            )
            .expect("prepare");
        assert_eq!(first.records().len(), 1);
        assert_eq!(
            first.bindings().count(),
            1,
            "the listing is the state after the change"
        );
        assert_eq!(loc.len(100), 0, "nothing applied before the commit");
        let second = loc.prepare(
            "sip:a@x",
            &[change("sip:a@2.2.2.2", 60)],
            false,
            &reg("c2", 1, 100),
            &policy,
        );
        assert!(matches!(second, Err(UpdateError::Busy(ref aor)) if aor == "sip:a@x"));
        // The message that met it waits, parked, for the commit; past
        // MAX_WAITING more are turned away; another AoR has nothing to
        // wait for.
        let parked = |n: u8| Parked {
            message: vec![n],
            src: SocketAddr::from(([192, 0, 2, n], 5060)),
            arrived: sip_core::Transport::Udp,
        };
        for n in 0..MAX_WAITING as u8 {
            assert!(matches!(loc.wait_for("sip:a@x", parked(n)), Wait::Parked));
        }
        assert!(matches!(loc.wait_for("sip:a@x", parked(99)), Wait::Full(_)));
        assert!(matches!(
            loc.wait_for("sip:b@x", parked(7)),
            Wait::NotBusy(_)
        ));
        let other = loc
            .prepare(
                "sip:b@x",
                &[change("sip:b@1.1.1.1", 60)],
                false,
                &reg("c3", 1, 100),
                &policy,
            )
            .expect("another AoR");
        assert!(loc.commit(other, true).is_empty());
        let woken = loc.commit(first, false);
        assert_eq!(woken.len(), MAX_WAITING, "the commit hands back who waited");
        assert_eq!(woken[0], parked(0), "in the order they came");
        assert!(matches!(
            loc.wait_for("sip:a@x", parked(1)),
            Wait::NotBusy(_)
        ));
        assert_eq!(loc.len(100), 1, "only b@x was stored");
        let again = loc
            .prepare(
                "sip:a@x",
                &[change("sip:a@2.2.2.2", 60)],
                false,
                &reg("c2", 1, 100),
                &policy,
            )
            .expect("free again");
        assert!(loc.commit(again, true).is_empty());
        // An operator's removal leaves what it woke for the next worker.
        assert!(!loc.has_ready() && loc.take_ready().is_empty());
        loc.release(vec![parked(3)]);
        assert!(loc.has_ready());
        assert_eq!(loc.take_ready(), [parked(3)]);
        assert!(!loc.has_ready());
        loc.lookup("sip:a@x", 100, &mut cur);
        assert_eq!(cur.len(), 1);
        assert_eq!(cur[0].contact(), "sip:a@2.2.2.2");
    }
}
