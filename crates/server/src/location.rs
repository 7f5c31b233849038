//! The location service (RFC 3261 §10): address-of-record → bindings.
//!
//! [`Location`] is the narrow interface; [`MemoryLocation`] is the sharded
//! in-memory store every worker shares; [`Journal`] makes its changes
//! survive a crash (see `docs/server.md`).

use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasher, RandomState};
use std::io::{self, BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::maplog::MappedLog;

/// One contact bound to an address-of-record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The contact URI.
    pub contact: String,
    /// Expiry, in Unix seconds.
    pub expires_at: u64,
    /// Preference in thousandths (`q=0.5` is 500); 1000 when absent.
    pub q: u16,
    /// Call-ID of the REGISTER that made the binding.
    pub call_id: String,
    /// CSeq of that REGISTER.
    pub cseq: u32,
    /// Where the REGISTER came from.
    pub source: SocketAddr,
    /// The REGISTER's Path values (RFC 3327), comma-separated, first hop
    /// first; empty without Path.
    pub path: String,
}

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
}

/// Why an update was refused; a refused update changes nothing.
#[derive(Debug, thiserror::Error)]
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
    /// The change could not be persisted, so it was not applied.
    #[error("journal: {0}")]
    Journal(io::Error),
}

/// What happens when a REGISTER would take an AoR past its contact limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Refuse the REGISTER (403 with a Warning).
    #[default]
    Reject,
    /// Drop the contacts closest to expiry (the least recently refreshed)
    /// to make room.
    ReplaceOldest,
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
        aor: String,
        /// The binding.
        binding: Binding,
    },
    /// A contact was removed.
    Remove {
        /// Sequence number.
        seq: u64,
        /// AoR.
        aor: String,
        /// Contact URI.
        contact: String,
    },
}

/// The location-service interface shared by every backend.
pub trait Location: Send + Sync {
    /// Applies a REGISTER's changes atomically for `aor`. `remove_all` is
    /// `Contact: *`. The records describing the change are handed to
    /// `persist` first; only when it succeeds does the change take effect
    /// (so memory never holds what the journal lacks). Returns the
    /// bindings after the change in `current`.
    #[allow(clippy::too_many_arguments)]
    fn update(
        &self,
        aor: &str,
        changes: &[ContactChange<'_>],
        remove_all: bool,
        reg: &Registration<'_>,
        policy: &UpdatePolicy,
        persist: &mut dyn FnMut(&[Record]) -> io::Result<()>,
        current: &mut Vec<Binding>,
    ) -> Result<(), UpdateError>;

    /// Live bindings for `aor`, highest q first.
    fn lookup(&self, aor: &str, now: u64, out: &mut Vec<Binding>);

    /// Drops expired bindings; returns how many.
    fn expire(&self, now: u64) -> usize;

    /// All live bindings (for the operator view).
    fn snapshot(&self, now: u64) -> Vec<(String, Binding)>;

    /// Number of live bindings.
    fn len(&self, now: u64) -> usize;

    /// Whether there are no live bindings.
    fn is_empty(&self, now: u64) -> bool {
        self.len(now) == 0
    }
}

const SHARDS: usize = 64;

/// Sharded in-memory location store.
#[derive(Debug)]
pub struct MemoryLocation {
    shards: Vec<RwLock<HashMap<String, Vec<Binding>>>>,
    hasher: RandomState,
    seq: AtomicU64,
}

impl Default for MemoryLocation {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryLocation {
    /// An empty store.
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            seq: AtomicU64::new(1),
        }
    }

    fn shard(&self, aor: &str) -> &RwLock<HashMap<String, Vec<Binding>>> {
        &self.shards[(self.hasher.hash_one(aor) as usize) % SHARDS]
    }

    /// Applies a journal record during recovery.
    pub fn replay(&self, r: Record) {
        let mut shard = match &r {
            Record::Bind { aor, .. } | Record::Remove { aor, .. } => {
                self.shard(aor).write().unwrap_or_else(|e| e.into_inner())
            }
        };
        match r {
            Record::Bind { seq, aor, binding } => {
                self.seq.fetch_max(seq + 1, Ordering::Relaxed);
                let list = shard.entry(aor).or_default();
                match list.iter_mut().find(|b| b.contact == binding.contact) {
                    Some(b) => *b = binding,
                    None => list.push(binding),
                }
            }
            Record::Remove { seq, aor, contact } => {
                self.seq.fetch_max(seq + 1, Ordering::Relaxed);
                if let Some(list) = shard.get_mut(&aor) {
                    list.retain(|b| b.contact != contact);
                    if list.is_empty() {
                        shard.remove(&aor);
                    }
                }
            }
        }
    }
}

impl Location for MemoryLocation {
    fn update(
        &self,
        aor: &str,
        changes: &[ContactChange<'_>],
        remove_all: bool,
        reg: &Registration<'_>,
        policy: &UpdatePolicy,
        persist: &mut dyn FnMut(&[Record]) -> io::Result<()>,
        current: &mut Vec<Binding>,
    ) -> Result<(), UpdateError> {
        let Registration {
            call_id,
            cseq,
            source,
            path,
            now,
        } = *reg;
        let mut shard = self.shard(aor).write().unwrap_or_else(|e| e.into_inner());
        // Work on a copy: the stored list changes only once persisted.
        let mut list: Vec<Binding> = shard
            .get(aor)
            .map(|l| l.iter().filter(|b| b.expires_at > now).cloned().collect())
            .unwrap_or_default();
        for b in list.iter().filter(|b| b.call_id == call_id) {
            let touched = remove_all || changes.iter().any(|c| c.contact == b.contact);
            if touched && cseq < b.cseq {
                return Err(UpdateError::OutOfOrder {
                    got: cseq,
                    stored: b.cseq,
                });
            }
        }
        let mut records = Vec::with_capacity(changes.len() + usize::from(remove_all) * list.len());
        let remove = |records: &mut Vec<Record>, contact: String| {
            records.push(Record::Remove {
                seq: 0,
                aor: aor.to_owned(),
                contact,
            });
        };
        if remove_all {
            for b in list.drain(..) {
                remove(&mut records, b.contact);
            }
        }
        for c in changes {
            let pos = list.iter().position(|b| b.contact == c.contact);
            if c.expires == 0 {
                if let Some(p) = pos {
                    list.remove(p);
                    remove(&mut records, c.contact.to_owned());
                }
                continue;
            }
            let binding = Binding {
                contact: c.contact.to_owned(),
                expires_at: now + u64::from(c.expires),
                q: c.q,
                call_id: call_id.to_owned(),
                cseq,
                source,
                path: path.to_owned(),
            };
            match pos {
                Some(p) => list[p] = binding.clone(),
                None => list.push(binding.clone()),
            }
            records.push(Record::Bind {
                seq: 0,
                aor: aor.to_owned(),
                binding,
            });
        }
        if list.len() > policy.max_contacts {
            if policy.overflow == Overflow::Reject {
                return Err(UpdateError::TooManyContacts {
                    max: policy.max_contacts,
                });
            }
            // Make room by dropping what this request did not name,
            // nearest expiry first.
            let named = |b: &Binding| changes.iter().any(|c| c.contact == b.contact);
            while list.len() > policy.max_contacts {
                let Some(p) = list
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| !named(b))
                    .min_by_key(|(_, b)| b.expires_at)
                    .map(|(i, _)| i)
                else {
                    return Err(UpdateError::TooManyContacts {
                        max: policy.max_contacts,
                    });
                };
                let gone = list.remove(p);
                remove(&mut records, gone.contact);
            }
        }
        let listing: usize = list
            .iter()
            .map(|b| b.contact.len() + LISTING_OVERHEAD)
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
        persist(&records).map_err(UpdateError::Journal)?;
        current.clear();
        current.extend(list.iter().cloned());
        current.sort_by_key(|b| std::cmp::Reverse(b.q));
        match shard.get_mut(aor) {
            _ if list.is_empty() => {
                shard.remove(aor);
            }
            Some(stored) => *stored = list,
            None => {
                shard.insert(aor.to_owned(), list);
            }
        }
        Ok(())
    }

    fn lookup(&self, aor: &str, now: u64, out: &mut Vec<Binding>) {
        out.clear();
        let shard = self.shard(aor).read().unwrap_or_else(|e| e.into_inner());
        if let Some(list) = shard.get(aor) {
            out.extend(list.iter().filter(|b| b.expires_at > now).cloned());
        }
        drop(shard);
        out.sort_by_key(|b| std::cmp::Reverse(b.q));
    }

    fn expire(&self, now: u64) -> usize {
        let mut n = 0;
        for s in &self.shards {
            let mut s = s.write().unwrap_or_else(|e| e.into_inner());
            s.retain(|_, list| {
                let before = list.len();
                list.retain(|b| b.expires_at > now);
                n += before - list.len();
                !list.is_empty()
            });
        }
        n
    }

    fn snapshot(&self, now: u64) -> Vec<(String, Binding)> {
        let mut v = Vec::new();
        for s in &self.shards {
            let s = s.read().unwrap_or_else(|e| e.into_inner());
            for (aor, list) in s.iter() {
                v.extend(
                    list.iter()
                        .filter(|b| b.expires_at > now)
                        .map(|b| (aor.clone(), b.clone())),
                );
            }
        }
        v.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.contact.cmp(&b.1.contact)));
        v
    }

    fn len(&self, now: u64) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.read().unwrap_or_else(|e| e.into_inner());
                s.values()
                    .map(|l| l.iter().filter(|b| b.expires_at > now).count())
                    .sum::<usize>()
            })
            .sum()
    }
}

fn encode_bind(seq: u64, aor: &str, b: &Binding, out: &mut Vec<u8>) {
    let _ = write!(
        out,
        "{seq}\tB\t{aor}\t{}\t{}\t{}\t{}\t{}\t{}",
        b.contact, b.expires_at, b.q, b.call_id, b.cseq, b.source
    );
    // Path is a trailing field, absent from records written before it.
    if !b.path.is_empty() {
        let _ = write!(out, "\t{}", b.path);
    }
    out.push(b'\n');
}

fn encode(r: &Record, out: &mut Vec<u8>) {
    match r {
        Record::Bind {
            seq,
            aor,
            binding: b,
        } => encode_bind(*seq, aor, b, out),
        Record::Remove { seq, aor, contact } => {
            let _ = writeln!(out, "{seq}\tD\t{aor}\t{contact}");
        }
    }
}

fn decode(line: &str) -> Option<Record> {
    let mut f = line.split('\t');
    let seq = f.next()?.parse().ok()?;
    match f.next()? {
        "B" => {
            let aor = f.next()?.to_owned();
            let binding = Binding {
                contact: f.next()?.to_owned(),
                expires_at: f.next()?.parse().ok()?,
                q: f.next()?.parse().ok()?,
                call_id: f.next()?.to_owned(),
                cseq: f.next()?.parse().ok()?,
                source: f.next()?.parse().ok()?,
                path: f.next().unwrap_or("").to_owned(),
            };
            f.next()
                .is_none()
                .then_some(Record::Bind { seq, aor, binding })
        }
        "D" => {
            let aor = f.next()?.to_owned();
            let contact = f.next()?.to_owned();
            f.next()
                .is_none()
                .then_some(Record::Remove { seq, aor, contact })
        }
        _ => None,
    }
}

/// How hard a journal write tries to reach stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `write(2)` before answering: survives process crashes (`kill -9`).
    #[default]
    Process,
    /// Also `fsync(2)` each write: survives power loss, much slower.
    Fsync,
}

/// A worker's append-only journal.
#[derive(Debug)]
pub struct Journal {
    log: MappedLog,
    buf: Vec<u8>,
    durability: Durability,
    worker: usize,
}

impl Journal {
    /// Appends `records` into the page cache (no system call; and waits
    /// for stable storage if asked).
    pub fn append(&mut self, records: &[Record]) -> io::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        self.buf.clear();
        for r in records {
            encode(r, &mut self.buf);
        }
        self.log
            .append(&self.buf, self.durability == Durability::Fsync)
    }

    /// Bytes written to the current file.
    pub fn len(&self) -> u64 {
        self.log.len()
    }

    /// Whether the current file holds nothing.
    pub fn is_empty(&self) -> bool {
        self.log.is_empty()
    }
}

/// A shared journal, as workers hold it.
pub type SharedJournal = Arc<Mutex<Journal>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The on-disk side of the embedded location store.
///
/// Files in the data directory:
///
/// ```text
/// lock                       flock'ed by the running server, holds its PID
/// location.snapshot          "#sipsec-location-snapshot gen=G", then records
/// location-gG-wN.log         worker N's journal of generation G
/// nonce.key                  the digest nonce secret (see auth)
/// ```
///
/// Recovery loads the snapshot and replays, sorted by sequence number,
/// the journals of its generation and later ones (older ones are already
/// in it and are deleted). Online compaction: (1) every journal is
/// switched to a new generation under its own lock; (2) memory is written
/// to a temporary snapshot naming that generation, synced, renamed over
/// the old one and the directory synced; (3) older journals are deleted.
/// A crash at any point leaves a snapshot plus every journal newer than
/// it, which replays to the state every acknowledged REGISTER saw.
#[derive(Debug)]
pub struct Persistence {
    dir: PathBuf,
    durability: Durability,
    /// The generation new journals are opened at.
    gen: AtomicU64,
    journals: Mutex<Vec<SharedJournal>>,
    /// Snapshot size after the last compaction.
    snapshot_bytes: AtomicU64,
    _lock: File,
}

/// What recovery found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Live bindings after replay.
    pub bindings: usize,
    /// Journal lines that could not be decoded (a torn last write).
    pub skipped_lines: usize,
}

const SNAPSHOT_MAGIC: &str = "#sipsec-location-snapshot gen=";

/// The generation of a journal file name: `location-gG-wN.log` is G, the
/// older `location-wN.log` is 0.
fn journal_gen(name: &str) -> Option<u64> {
    let stem = name.strip_prefix("location-")?.strip_suffix(".log")?;
    match stem.strip_prefix('g') {
        Some(rest) => rest.split_once("-w")?.0.parse().ok(),
        None => stem.strip_prefix('w')?.parse::<usize>().ok().map(|_| 0),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Takes the data directory's lock, or says who holds it.
fn lock_dir(dir: &Path) -> io::Result<File> {
    use std::io::{Read, Seek};
    let path = dir.join("lock");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = f.read_to_string(&mut holder);
            let holder = holder.trim();
            let who = if holder.is_empty() {
                "another process".to_owned()
            } else {
                format!("another sipsec serve (PID {holder})")
            };
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "{} is in use by {who}: give each server its own --data-dir",
                    dir.display()
                ),
            ));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(io::Error::new(
                e.kind(),
                format!("{}: cannot lock: {e}", path.display()),
            ))
        }
    }
    f.set_len(0)?;
    f.rewind()?;
    f.write_all(format!("{}\n", std::process::id()).as_bytes())?;
    Ok(f)
}

impl Persistence {
    /// Uses `dir` (created if missing), locking it against a second server.
    pub fn new(dir: &Path, durability: Durability) -> io::Result<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        let lock = lock_dir(dir)?;
        Ok(Self {
            dir: dir.to_owned(),
            durability,
            gen: AtomicU64::new(1),
            journals: Mutex::new(Vec::new()),
            snapshot_bytes: AtomicU64::new(0),
            _lock: lock,
        })
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn snapshot_path(&self) -> PathBuf {
        self.dir.join("location.snapshot")
    }

    /// Journal files with their generation, sorted by name.
    fn journals(&self) -> io::Result<Vec<(u64, PathBuf)>> {
        let mut v: Vec<_> = std::fs::read_dir(&self.dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| {
                let g = journal_gen(p.file_name()?.to_str()?)?;
                Some((g, p))
            })
            .collect();
        v.sort();
        Ok(v)
    }

    fn journal_path(&self, gen: u64, worker: usize) -> PathBuf {
        self.dir.join(format!("location-g{gen}-w{worker}.log"))
    }

    /// Loads the snapshot and journals into `loc`, then compacts them into
    /// a new snapshot and removes the journals.
    pub fn recover(&self, loc: &MemoryLocation, now: u64) -> io::Result<Recovered> {
        let mut records = Vec::new();
        let mut skipped = 0;
        let mut read = |path: &Path, header: bool, records: &mut Vec<Record>| -> io::Result<u64> {
            let f = match File::open(path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
                Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
            };
            let mut gen = 0;
            for (i, line) in BufReader::new(f).split(b'\n').enumerate() {
                let line = line?;
                let text = std::str::from_utf8(&line).ok();
                if header && i == 0 {
                    if let Some(g) = text.and_then(|t| t.strip_prefix(SNAPSHOT_MAGIC)) {
                        gen = g.trim().parse().unwrap_or(0);
                        continue;
                    }
                }
                match text.and_then(decode) {
                    Some(r) => records.push(r),
                    // An open journal's reserved space is zeros (a crash
                    // leaves them).
                    None if line.iter().all(|b| *b == 0) => {}
                    None => skipped += 1,
                }
            }
            Ok(gen)
        };
        let snapshot_gen = read(&self.snapshot_path(), true, &mut records)?;
        let journals = self.journals()?;
        let mut newest = snapshot_gen;
        for (gen, path) in &journals {
            // Older generations are in the snapshot already.
            if *gen >= snapshot_gen {
                read(path, false, &mut records)?;
                newest = newest.max(*gen);
            }
        }
        // Stable: snapshot records (sequence 0) stay ahead of the journals.
        records.sort_by_key(|r| match r {
            Record::Bind { seq, .. } | Record::Remove { seq, .. } => *seq,
        });
        for r in records {
            loc.replay(r);
        }
        loc.expire(now);
        let gen = newest + 1;
        let bytes = self.write_snapshot(loc, now, gen)?;
        self.snapshot_bytes.store(bytes, Ordering::Relaxed);
        self.gen.store(gen, Ordering::Relaxed);
        for (_, j) in self.journals()? {
            std::fs::remove_file(j)?;
        }
        Ok(Recovered {
            bindings: loc.len(now),
            skipped_lines: skipped,
        })
    }

    /// Writes every live binding as the snapshot of generation `gen`
    /// (temporary file, fsync, rename, directory fsync); returns its size.
    fn write_snapshot(&self, loc: &MemoryLocation, now: u64, gen: u64) -> io::Result<u64> {
        let tmp = self.dir.join("location.snapshot.tmp");
        let mut w = std::io::BufWriter::new(File::create(&tmp)?);
        writeln!(w, "{SNAPSHOT_MAGIC}{gen}")?;
        let mut buf = Vec::with_capacity(256);
        let mut bytes = 0;
        // One shard at a time, under its read lock: a change journaled
        // before the rotation is in memory by the time its shard is read.
        for s in &loc.shards {
            let s = s.read().unwrap_or_else(|e| e.into_inner());
            for (aor, list) in s.iter() {
                for b in list.iter().filter(|b| b.expires_at > now) {
                    buf.clear();
                    encode_bind(0, aor, b, &mut buf);
                    bytes += buf.len() as u64;
                    w.write_all(&buf)?;
                }
            }
        }
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, self.snapshot_path())?;
        sync_dir(&self.dir)?;
        Ok(bytes)
    }

    /// Opens worker `n`'s journal for appending at the current generation.
    pub fn journal(&self, n: usize) -> io::Result<SharedJournal> {
        let gen = self.gen.load(Ordering::Relaxed);
        let j = Arc::new(Mutex::new(Journal {
            log: MappedLog::open(&self.journal_path(gen, n))?,
            buf: Vec::with_capacity(1024),
            durability: self.durability,
            worker: n,
        }));
        lock(&self.journals).push(j.clone());
        Ok(j)
    }

    /// Bytes in the open journals.
    pub fn journal_bytes(&self) -> u64 {
        lock(&self.journals).iter().map(|j| lock(j).len()).sum()
    }

    /// Whether the journals have grown enough to compact: past `threshold`
    /// bytes and past the last snapshot's size (so a large, mostly live
    /// store is not rewritten over and over).
    pub fn wants_compaction(&self, threshold: u64) -> bool {
        let j = self.journal_bytes();
        j > threshold && j > self.snapshot_bytes.load(Ordering::Relaxed)
    }

    /// Compacts online: journals switch to a new generation, memory is
    /// written as that generation's snapshot, older journals go. Safe to
    /// crash at any step (see the type's documentation).
    pub fn compact(&self, loc: &MemoryLocation, now: u64) -> io::Result<()> {
        let gen = self.gen.fetch_add(1, Ordering::Relaxed) + 1;
        let journals: Vec<SharedJournal> = lock(&self.journals).clone();
        for j in &journals {
            let mut j = lock(j);
            let log = MappedLog::open(&self.journal_path(gen, j.worker))?;
            // The old log is trimmed as it drops.
            j.log = log;
        }
        let bytes = self.write_snapshot(loc, now, gen)?;
        self.snapshot_bytes.store(bytes, Ordering::Relaxed);
        for (g, path) in self.journals()? {
            if g < gen {
                std::fs::remove_file(path)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src() -> SocketAddr {
        "192.0.2.1:5060".parse().expect("literal")
    }

    fn reg(call_id: &str, cseq: u32, now: u64) -> Registration<'_> {
        Registration {
            call_id,
            cseq,
            source: src(),
            path: "",
            now,
        }
    }

    fn change(contact: &str, expires: u32) -> ContactChange<'_> {
        ContactChange {
            contact,
            expires,
            q: 1000,
        }
    }

    /// An update with the default policy whose records land in `rec`.
    fn upd(
        loc: &MemoryLocation,
        aor: &str,
        changes: &[ContactChange<'_>],
        remove_all: bool,
        r: &Registration<'_>,
        cur: &mut Vec<Binding>,
        rec: &mut Vec<Record>,
    ) -> Result<(), UpdateError> {
        let mut persist = |records: &[Record]| {
            rec.extend_from_slice(records);
            Ok(())
        };
        let policy = UpdatePolicy::default();
        loc.update(aor, changes, remove_all, r, &policy, &mut persist, cur)
    }

    #[test]
    fn bind_refresh_remove_and_order() {
        let loc = MemoryLocation::new();
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
            }],
            false,
            &reg("c2", 1, 100),
            &mut cur,
            &mut rec,
        )
        .expect("second contact");
        assert_eq!(cur.len(), 2);
        assert_eq!(cur[0].contact, "sip:a@1.1.1.1", "q=1 first");
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
                Err(UpdateError::OutOfOrder { got: 2, stored: 3 })
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
        let loc = MemoryLocation::new();
        let mut cur = Vec::new();
        let policy = UpdatePolicy::default();
        let mut ok = |_: &[Record]| Ok(());
        loc.update(
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
            let r = loc.update(
                "sip:a@x",
                &changes,
                star,
                &reg("c1", 2, 100),
                &policy,
                &mut full,
                &mut cur,
            );
            assert!(matches!(r, Err(UpdateError::Journal(_))));
            let mut now = Vec::new();
            loc.lookup("sip:a@x", 100, &mut now);
            assert_eq!(now.len(), 1);
            assert_eq!(now[0].contact, "sip:a@1.1.1.1");
        }
    }

    #[test]
    fn contacts_are_bounded_by_refusal_or_replacement() {
        let loc = MemoryLocation::new();
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
            loc.update(
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
        let r = loc.update(
            "sip:a@x",
            &third,
            false,
            &reg("c", 2, 100),
            &policy,
            &mut persist,
            &mut cur,
        );
        assert!(matches!(r, Err(UpdateError::TooManyContacts { max: 2 })));
        policy.overflow = Overflow::ReplaceOldest;
        loc.update(
            "sip:a@x",
            &third,
            false,
            &reg("c", 3, 100),
            &policy,
            &mut persist,
            &mut cur,
        )
        .expect("replaces");
        let mut names: Vec<_> = cur.iter().map(|b| b.contact.as_str()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            ["sip:2@h", "sip:3@h"],
            "the one closest to expiry went"
        );
        policy.max_listing = 10;
        let r = loc.update(
            "sip:b@x",
            &[change("sip:long-enough@h", 60)],
            false,
            &reg("d", 1, 100),
            &policy,
            &mut persist,
            &mut cur,
        );
        assert!(matches!(r, Err(UpdateError::ListingTooLarge { .. })));
        assert_eq!(loc.len(100), 2, "refused updates leave no trace");
        assert!(rec
            .iter()
            .any(|r| matches!(r, Record::Remove { contact, .. } if contact == "sip:1@h")));
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sipsec-loc-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// Binds `n` AoRs (and removes every third) through journal `j`.
    fn fill(loc: &MemoryLocation, j: &SharedJournal, from: usize, n: usize) {
        let mut cur = Vec::new();
        let policy = UpdatePolicy::default();
        let mut persist = |r: &[Record]| lock(j).append(r);
        for i in from..from + n {
            let aor = format!("sip:u{i}@x");
            let contact = format!("sip:u{i}@192.0.2.1");
            loc.update(
                &aor,
                &[change(&contact, 600)],
                false,
                &reg("c", 1, 100),
                &policy,
                &mut persist,
                &mut cur,
            )
            .expect("bind");
            if i % 3 == 0 {
                loc.update(
                    &aor,
                    &[change(&contact, 0)],
                    false,
                    &reg("c", 2, 100),
                    &policy,
                    &mut persist,
                    &mut cur,
                )
                .expect("unbind");
            }
        }
    }

    /// Online compaction leaves, at every step a crash can stop it at, a
    /// directory that recovers to the same bindings.
    #[test]
    fn compaction_is_crash_safe_at_every_step() {
        for stop_after in 0..4 {
            let dir = temp(&format!("compact{stop_after}"));
            let p = Persistence::new(&dir, Durability::Process).expect("dir");
            let loc = MemoryLocation::new();
            p.recover(&loc, 100).expect("empty");
            let j = p.journal(0).expect("journal");
            fill(&loc, &j, 0, 300);
            let want = loc.snapshot(100);
            match stop_after {
                // Journals rotated, no snapshot yet.
                0 => {
                    let gen = p.gen.fetch_add(1, Ordering::Relaxed) + 1;
                    let mut g = lock(&j);
                    g.log = MappedLog::open(&p.journal_path(gen, 0)).expect("rotate");
                }
                // Snapshot written but not renamed.
                1 => {
                    let old = std::fs::read(dir.join("location.snapshot")).expect("old");
                    let gen = p.gen.load(Ordering::Relaxed) + 1;
                    p.write_snapshot(&loc, 100, gen).expect("snapshot");
                    std::fs::rename(
                        dir.join("location.snapshot"),
                        dir.join("location.snapshot.tmp"),
                    )
                    .expect("unrename");
                    std::fs::write(dir.join("location.snapshot"), old).expect("old back");
                }
                // Snapshot renamed, old journals still there.
                2 => {
                    let gen = p.gen.fetch_add(1, Ordering::Relaxed) + 1;
                    {
                        let mut g = lock(&j);
                        g.log = MappedLog::open(&p.journal_path(gen, 0)).expect("rotate");
                    }
                    p.write_snapshot(&loc, 100, gen).expect("snapshot");
                }
                // A whole compaction, then more changes.
                _ => {
                    p.compact(&loc, 100).expect("compact");
                    fill(&loc, &j, 300, 50);
                }
            }
            let want = if stop_after == 3 {
                loc.snapshot(100)
            } else {
                want
            };
            // kill -9: nothing is dropped or trimmed.
            std::mem::forget(j);
            std::mem::forget(p);
            let again = MemoryLocation::new();
            let p2 = {
                // The crashed process's lock dies with it; here it is
                // leaked, so take the directory as a new process would.
                let _ = std::fs::remove_file(dir.join("lock"));
                Persistence::new(&dir, Durability::Process).expect("reopen")
            };
            p2.recover(&again, 100).expect("recover");
            assert_eq!(again.snapshot(100), want, "stopped after step {stop_after}");
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[test]
    fn the_data_directory_takes_one_server() {
        let dir = temp("lock");
        let first = Persistence::new(&dir, Durability::Process).expect("first");
        let e = Persistence::new(&dir, Durability::Process).expect_err("second");
        let said = e.to_string();
        assert!(said.contains(&dir.display().to_string()), "{said}");
        assert!(
            said.contains(&format!("PID {}", std::process::id())),
            "{said}"
        );
        drop(first);
        Persistence::new(&dir, Durability::Process).expect("free again");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn path_is_an_optional_trailing_field() {
        let r = Record::Bind {
            seq: 7,
            aor: "sip:a@x".into(),
            binding: Binding {
                contact: "sip:a@1.1.1.1".into(),
                expires_at: 160,
                q: 1000,
                call_id: "c1".into(),
                cseq: 1,
                source: src(),
                path: "<sip:edge.example;lr>, <sip:p2.example;lr>".into(),
            },
        };
        let mut out = Vec::new();
        encode(&r, &mut out);
        let line = std::str::from_utf8(&out).expect("utf-8");
        assert_eq!(decode(line.trim_end()), Some(r));
        // A record written before Path was stored still decodes.
        let old = "7\tB\tsip:a@x\tsip:a@1.1.1.1\t160\t1000\tc1\t1\t192.0.2.1:5060";
        let Some(Record::Bind { binding, .. }) = decode(old) else {
            panic!("old record")
        };
        assert_eq!(binding.path, "");
    }

    #[test]
    fn records_round_trip_and_recovery() {
        let dir = temp("roundtrip");
        let p = Persistence::new(&dir, Durability::Process).expect("dir");
        let loc = MemoryLocation::new();
        let (mut cur, mut rec) = (Vec::new(), Vec::new());
        for (aor, contact, call, cseq, expires) in [
            ("sip:a@x", "sip:a@1.1.1.1", "c1", 1, 60),
            ("sip:b@x", "sip:b@1.1.1.1", "c2", 1, 60),
            ("sip:b@x", "sip:b@1.1.1.1", "c2", 2, 0),
        ] {
            upd(
                &loc,
                aor,
                &[change(contact, expires)],
                false,
                &reg(call, cseq, 100),
                &mut cur,
                &mut rec,
            )
            .expect("update");
        }
        let j = p.journal(0).expect("journal");
        lock(&j).append(&rec).expect("write");
        drop(j);
        std::fs::write(dir.join("location-w1.log"), b"garbage line\n").expect("torn");
        let fresh = MemoryLocation::new();
        let r = p.recover(&fresh, 110).expect("recover");
        assert_eq!(
            r,
            Recovered {
                bindings: 1,
                skipped_lines: 1
            }
        );
        let mut out = Vec::new();
        fresh.lookup("sip:a@x", 110, &mut out);
        assert_eq!(out[0].contact, "sip:a@1.1.1.1");
        assert_eq!(out[0].source, src());
        // Recovery again from the compacted snapshot alone.
        let again = MemoryLocation::new();
        assert_eq!(p.recover(&again, 110).expect("recover").bindings, 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
