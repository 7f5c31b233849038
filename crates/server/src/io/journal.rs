//! The embedded location store's files: per-worker append-only journals,
//! snapshots, recovery and online compaction (see `docs/server.md`).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use crate::config::Durability;
use crate::io::maplog::MappedLog;
use crate::proto::location::{MemoryLocation, Record};
use crate::proto::records::{decode, encode, encode_bind};

/// A worker's append-only journal.
#[derive(Debug)]
pub struct Journal {
    log: MappedLog,
    buf: Vec<u8>,
    durability: Durability,
    worker: usize,
    /// Waits for stable storage, counted for the whole store.
    syncs: Arc<AtomicU64>,
    /// The store's journal growth, which this journal adds to.
    growth: Arc<Growth>,
    /// Bytes appended and not yet added to `growth`: added a step at a
    /// time, so that workers appending at once do not pass one counter's
    /// cache line between their cores for every change.
    unshared: u64,
}

/// How much the journals grew since the last compaction, and the thread
/// to wake once that is worth a compaction: so the compactor sleeps
/// instead of looking at the journals' sizes every so often.
#[derive(Debug)]
struct Growth {
    /// Bytes appended since the last switch of generation (a little more
    /// when appends race with the switch: the trigger is a hint, the
    /// compactor checks the files).
    bytes: AtomicU64,
    /// The configured compaction threshold; `u64::MAX` until a compactor
    /// listens.
    threshold: AtomicU64,
    /// The last snapshot's size.
    snapshot: AtomicU64,
    /// Set once the compactor was woken, until it compacted.
    told: std::sync::atomic::AtomicBool,
    compactor: std::sync::OnceLock<std::thread::Thread>,
}

impl Default for Growth {
    fn default() -> Self {
        Self {
            bytes: AtomicU64::new(0),
            threshold: AtomicU64::new(u64::MAX),
            snapshot: AtomicU64::new(0),
            told: Default::default(),
            compactor: std::sync::OnceLock::new(),
        }
    }
}

impl Growth {
    /// The growth worth compacting for: the threshold or the last
    /// snapshot's size, the larger (so a large, mostly live store is not
    /// rewritten over and over).
    fn trigger(&self) -> u64 {
        let threshold = self.threshold.load(Ordering::Relaxed);
        threshold.max(self.snapshot.load(Ordering::Relaxed))
    }

    /// What a journal appends before it adds to the growth: a 64th of
    /// the trigger, at most 64 KiB (a hint lagging by that much per
    /// journal).
    fn step(&self) -> u64 {
        (self.trigger() / 64).clamp(1, 64 << 10)
    }

    fn grew(&self, n: u64) {
        let total = self.bytes.fetch_add(n, Ordering::Relaxed) + n;
        if total >= self.trigger() && !self.told.swap(true, Ordering::AcqRel) {
            if let Some(t) = self.compactor.get() {
                t.unpark();
            }
        }
    }
}

impl Journal {
    /// Appends `records` into the page cache (no system call; and waits
    /// for stable storage if asked).
    pub fn append(&mut self, records: &[Record]) -> io::Result<()> {
        self.append_all(&[records])
    }

    /// Appends the records of several changes in one write and, with
    /// [`Durability::Fsync`], one wait for stable storage: a group commit.
    pub fn append_all(&mut self, changes: &[&[Record]]) -> io::Result<()> {
        self.buf.clear();
        for r in changes.iter().flat_map(|c| c.iter()) {
            encode(r, &mut self.buf);
        }
        if self.buf.is_empty() {
            return Ok(());
        }
        let sync = self.syncs_each_write();
        self.log.append(&self.buf, sync)?;
        if sync {
            self.syncs.fetch_add(1, Ordering::Relaxed);
        }
        self.unshared += self.buf.len() as u64;
        if self.unshared >= self.growth.step() {
            self.growth.grew(std::mem::take(&mut self.unshared));
        }
        Ok(())
    }

    /// Whether each write waits for stable storage (then writes are worth
    /// gathering: see [`Journal::append_all`]).
    pub fn syncs_each_write(&self) -> bool {
        self.durability == Durability::Fsync
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
/// route.key                  a proxy's Record-Route proof key (see tokens)
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
    /// Waits for stable storage by every journal.
    syncs: Arc<AtomicU64>,
    /// The journals' growth since the last compaction, and the last
    /// snapshot's size.
    growth: Arc<Growth>,
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
            syncs: Arc::default(),
            growth: Arc::default(),
            _lock: lock,
        })
    }

    /// How many times journal writes waited for stable storage (fsync
    /// durability; several changes written together wait once).
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
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
        self.growth.snapshot.store(bytes, Ordering::Relaxed);
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
        // before the rotation was committed before its journal could be
        // rotated (the driver holds the journal across the change).
        let mut failed = None;
        loc.visit(now, |aor, b| {
            if failed.is_some() {
                return;
            }
            buf.clear();
            encode_bind(0, aor.as_bytes(), b, &mut buf);
            bytes += buf.len() as u64;
            if let Err(e) = w.write_all(&buf) {
                failed = Some(e);
            }
        });
        if let Some(e) = failed {
            return Err(e);
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
            syncs: self.syncs.clone(),
            growth: self.growth.clone(),
            unshared: 0,
        }));
        lock(&self.journals).push(j.clone());
        Ok(j)
    }

    /// Puts every open journal on stable storage (at shutdown).
    pub fn sync(&self) -> io::Result<()> {
        for j in lock(&self.journals).iter() {
            lock(j).log.sync()?;
        }
        sync_dir(&self.dir)
    }

    /// Bytes in the open journals.
    pub fn journal_bytes(&self) -> u64 {
        lock(&self.journals).iter().map(|j| lock(j).len()).sum()
    }

    /// Unparks `compactor` once the journals have grown by `threshold`
    /// bytes and by the last snapshot's size since the last compaction
    /// (see [`Persistence::wants_compaction`]); once per compaction.
    pub fn wake_when_grown(&self, threshold: u64, compactor: std::thread::Thread) {
        let _ = self.growth.compactor.set(compactor);
        self.growth.threshold.store(threshold, Ordering::Relaxed);
        self.arm();
    }

    /// Lets the journals wake the compactor again.
    fn arm(&self) {
        self.growth.told.store(false, Ordering::Release);
        self.growth.grew(0);
    }

    /// Whether the journals have grown enough to compact: past `threshold`
    /// bytes and past the last snapshot's size (so a large, mostly live
    /// store is not rewritten over and over).
    pub fn wants_compaction(&self, threshold: u64) -> bool {
        let j = self.journal_bytes();
        j > threshold && j > self.growth.snapshot.load(Ordering::Relaxed)
    }

    /// Compacts online: journals switch to a new generation, memory is
    /// written as that generation's snapshot, older journals go. Safe to
    /// crash at any step (see the type's documentation).
    pub fn compact(&self, loc: &MemoryLocation, now: u64) -> io::Result<()> {
        let gen = self.gen.fetch_add(1, Ordering::Relaxed) + 1;
        self.growth.bytes.store(0, Ordering::Relaxed);
        let journals: Vec<SharedJournal> = lock(&self.journals).clone();
        for j in &journals {
            let mut j = lock(j);
            let log = MappedLog::open(&self.journal_path(gen, j.worker))?;
            // The old log is trimmed as it drops.
            j.log = log;
        }
        let bytes = self.write_snapshot(loc, now, gen)?;
        self.growth.snapshot.store(bytes, Ordering::Relaxed);
        self.arm();
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
    use crate::proto::location::tests::{change, reg, src, upd};
    use crate::proto::location::{Binding, Flow, Parts, Strings, UpdatePolicy};

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
            crate::proto::location::tests::update(
                loc,
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
                crate::proto::location::tests::update(
                    loc,
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

    /// The compactor sleeps until the journals grew past the threshold
    /// (and past the last snapshot), is woken once, and is armed again
    /// by the compaction.
    #[test]
    fn the_compactor_is_woken_once_the_journals_grew_enough() {
        let dir = temp("growth");
        let p = Persistence::new(&dir, Durability::Process).expect("dir");
        let loc = MemoryLocation::new(std::hash::RandomState::new());
        let j = p.journal(0).expect("journal");
        let told = || p.growth.told.load(Ordering::Acquire);
        p.wake_when_grown(4_000, std::thread::current());
        fill(&loc, &j, 0, 10);
        let small = p.journal_bytes();
        assert!(small > 0 && small < 4_000, "{small}");
        assert!(!told() && !p.wants_compaction(4_000));
        fill(&loc, &j, 10, 100);
        assert!(told() && p.wants_compaction(4_000));
        // The wake is waiting: this returns at once (else in a minute,
        // and the assertions after the compaction still hold).
        std::thread::park_timeout(std::time::Duration::from_secs(60));
        p.compact(&loc, 100).expect("compact");
        assert!(!told());
        assert_eq!(p.growth.bytes.load(Ordering::Relaxed), 0);
        // The snapshot is larger than the threshold: the next wake waits
        // for the journals to outgrow it.
        let snapshot = p.growth.snapshot.load(Ordering::Relaxed);
        assert!(snapshot > 4_000, "{snapshot}");
        assert_eq!(p.growth.trigger(), snapshot);
        fill(&loc, &j, 200, 30);
        assert!(!told());
        fill(&loc, &j, 300, 200);
        assert!(told() && p.wants_compaction(4_000));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_journal_adds_to_the_shared_growth_a_step_at_a_time() {
        let dir = temp("growth-steps");
        let p = Persistence::new(&dir, Durability::Process).expect("dir");
        let loc = MemoryLocation::new(std::hash::RandomState::new());
        let j = p.journal(0).expect("journal");
        // No compactor listens: steps of 64 KiB.
        assert_eq!(p.growth.step(), 64 << 10);
        fill(&loc, &j, 0, 10);
        assert_eq!(p.growth.bytes.load(Ordering::Relaxed), 0);
        fill(&loc, &j, 10, 1_000);
        let (added, written) = (p.growth.bytes.load(Ordering::Relaxed), p.journal_bytes());
        assert!(
            added >= 64 << 10 && written - added < 64 << 10,
            "{added} of {written}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Online compaction leaves, at every step a crash can stop it at, a
    /// directory that recovers to the same bindings.
    #[test]
    fn compaction_is_crash_safe_at_every_step() {
        for stop_after in 0..4 {
            let dir = temp(&format!("compact{stop_after}"));
            let p = Persistence::new(&dir, Durability::Process).expect("dir");
            let loc = MemoryLocation::new(std::hash::RandomState::new());
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
            let again = MemoryLocation::new(std::hash::RandomState::new());
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
                strings: Strings::new(Parts {
                    contact: "sip:a@1.1.1.1",
                    call_id: "c1",
                    path: "<sip:edge.example;lr>, <sip:p2.example;lr>",
                    ..Parts::default()
                }),
                expires_at: 160,
                q: 1000,
                cseq: 1,
                source: src(),
                flow: None,
            },
        };
        let mut out = Vec::new();
        encode(&r, &mut out);
        let line = std::str::from_utf8(&out).expect("utf-8");
        assert_eq!(decode(line.trim_end()), Some(r.clone()));
        // An instance without a flow: the flow is "-".
        let Record::Bind { binding, .. } = &r else {
            unreachable!("a Bind")
        };
        let with_instance = Record::Bind {
            seq: 7,
            aor: "sip:a@x".into(),
            binding: Binding {
                strings: Strings::new(Parts {
                    instance: "<urn:uuid:1>#2",
                    ..binding.parts()
                }),
                ..binding.clone()
            },
        };
        let mut out = Vec::new();
        encode(&with_instance, &mut out);
        let line = std::str::from_utf8(&out).expect("utf-8");
        assert!(line.ends_with("\t-\t\t<urn:uuid:1>#2\n"), "{line:?}");
        assert_eq!(decode(line.trim_end()), Some(with_instance));
        // A flow follows Path, empty or not; an unknown one is corruption.
        for path in ["", "<sip:edge.example;lr>"] {
            for flow in [
                Flow::decode("TLS"),
                Flow::decode("TCP+ob"),
                Flow::decode("wss+ob"),
            ] {
                let flow = Some(flow.expect("a flow"));
                let r = Record::Bind {
                    seq: 8,
                    aor: "sip:a@x".into(),
                    binding: Binding {
                        strings: Strings::new(Parts {
                            contact: "sip:a@10.0.0.1;transport=tcp",
                            call_id: "c1",
                            path,
                            node: if path.is_empty() {
                                ""
                            } else {
                                "<sip:f01@192.0.2.9:5060;lr>"
                            },
                            instance: if path.is_empty() {
                                "<urn:uuid:00000000-0000-4000-8000-000000000001>#1"
                            } else {
                                ""
                            },
                        }),
                        expires_at: 160,
                        q: 1000,
                        cseq: 1,
                        source: src(),
                        flow,
                    },
                };
                let mut out = Vec::new();
                encode(&r, &mut out);
                let line = std::str::from_utf8(&out).expect("utf-8");
                assert_eq!(decode(line.trim_end()), Some(r), "{line}");
            }
        }
        let udp = "7\tB\tsip:a@x\tsip:a@1.1.1.1\t160\t1000\tc1\t1\t192.0.2.1:5060\t\tUDP";
        assert_eq!(decode(udp), None, "UDP is no flow");
        // A record written before Path was stored still decodes.
        let old = "7\tB\tsip:a@x\tsip:a@1.1.1.1\t160\t1000\tc1\t1\t192.0.2.1:5060";
        let Some(Record::Bind { binding, .. }) = decode(old) else {
            panic!("old record")
        };
        assert_eq!(binding.path(), "");
    }

    #[test]
    fn records_round_trip_and_recovery() {
        let dir = temp("roundtrip");
        let p = Persistence::new(&dir, Durability::Process).expect("dir");
        let loc = MemoryLocation::new(std::hash::RandomState::new());
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
        let fresh = MemoryLocation::new(std::hash::RandomState::new());
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
        assert_eq!(out[0].contact(), "sip:a@1.1.1.1");
        assert_eq!(out[0].source, src());
        // Recovery again from the compacted snapshot alone.
        let again = MemoryLocation::new(std::hash::RandomState::new());
        assert_eq!(p.recover(&again, 110).expect("recover").bindings, 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
