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
use std::sync::RwLock;

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

/// Why an update was refused (RFC 3261 §10.3 step 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
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
    /// `Contact: *`. Returns the bindings after the change; journal
    /// records are appended to `records`.
    fn update(
        &self,
        aor: &str,
        changes: &[ContactChange<'_>],
        remove_all: bool,
        reg: &Registration<'_>,
        current: &mut Vec<Binding>,
        records: &mut Vec<Record>,
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
        current: &mut Vec<Binding>,
        records: &mut Vec<Record>,
    ) -> Result<(), UpdateError> {
        let Registration {
            call_id,
            cseq,
            source,
            path,
            now,
        } = *reg;
        let mut shard = self.shard(aor).write().unwrap_or_else(|e| e.into_inner());
        let list = shard.get(aor);
        // Validate first so a refused REGISTER changes nothing.
        if let Some(list) = list {
            for b in list
                .iter()
                .filter(|b| b.call_id == call_id && b.expires_at > now)
            {
                let touched = remove_all || changes.iter().any(|c| c.contact == b.contact);
                if touched && cseq < b.cseq {
                    return Err(UpdateError::OutOfOrder {
                        got: cseq,
                        stored: b.cseq,
                    });
                }
            }
        }
        let list = shard.entry(aor.to_owned()).or_default();
        list.retain(|b| b.expires_at > now);
        if remove_all {
            for b in list.drain(..) {
                records.push(Record::Remove {
                    seq: self.seq.fetch_add(1, Ordering::Relaxed),
                    aor: aor.to_owned(),
                    contact: b.contact,
                });
            }
        }
        for c in changes {
            let pos = list.iter().position(|b| b.contact == c.contact);
            let seq = self.seq.fetch_add(1, Ordering::Relaxed);
            if c.expires == 0 {
                if let Some(p) = pos {
                    list.remove(p);
                    records.push(Record::Remove {
                        seq,
                        aor: aor.to_owned(),
                        contact: c.contact.to_owned(),
                    });
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
                seq,
                aor: aor.to_owned(),
                binding,
            });
        }
        current.clear();
        current.extend(list.iter().cloned());
        current.sort_by_key(|b| std::cmp::Reverse(b.q));
        if list.is_empty() {
            shard.remove(aor);
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

fn encode(r: &Record, out: &mut Vec<u8>) {
    match r {
        Record::Bind {
            seq,
            aor,
            binding: b,
        } => {
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
}

/// The on-disk side of the embedded location store.
#[derive(Debug, Clone)]
pub struct Persistence {
    dir: PathBuf,
    durability: Durability,
}

/// What recovery found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Live bindings after replay.
    pub bindings: usize,
    /// Journal lines that could not be decoded (a torn last write).
    pub skipped_lines: usize,
}

impl Persistence {
    /// Uses `dir` (created if missing).
    pub fn new(dir: &Path, durability: Durability) -> io::Result<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        Ok(Self {
            dir: dir.to_owned(),
            durability,
        })
    }

    fn snapshot_path(&self) -> PathBuf {
        self.dir.join("location.snapshot")
    }

    fn journals(&self) -> io::Result<Vec<PathBuf>> {
        let mut v: Vec<_> = std::fs::read_dir(&self.dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("location-w") && n.ends_with(".log"))
            })
            .collect();
        v.sort();
        Ok(v)
    }

    /// Loads the snapshot and journals into `loc`, then compacts them into
    /// a new snapshot and empties the journals.
    pub fn recover(&self, loc: &MemoryLocation, now: u64) -> io::Result<Recovered> {
        let mut records = Vec::new();
        let mut skipped = 0;
        let mut files = vec![self.snapshot_path()];
        files.extend(self.journals()?);
        for path in &files {
            let f = match File::open(path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
            };
            for line in BufReader::new(f).split(b'\n') {
                let line = line?;
                match std::str::from_utf8(&line).ok().and_then(decode) {
                    Some(r) => records.push(r),
                    // An open journal's reserved space is zeros (a crash
                    // leaves them).
                    None if line.iter().all(|b| *b == 0) => {}
                    None => skipped += 1,
                }
            }
        }
        records.sort_by_key(|r| match r {
            Record::Bind { seq, .. } | Record::Remove { seq, .. } => *seq,
        });
        for r in records {
            loc.replay(r);
        }
        loc.expire(now);
        // Compact: snapshot of live bindings, written atomically.
        let tmp = self.dir.join("location.snapshot.tmp");
        let mut buf = Vec::new();
        let mut seq = 0;
        let live = loc.snapshot(now);
        for (aor, binding) in &live {
            seq += 1;
            encode(
                &Record::Bind {
                    seq,
                    aor: aor.clone(),
                    binding: binding.clone(),
                },
                &mut buf,
            );
        }
        loc.seq.fetch_max(seq + 1, Ordering::Relaxed);
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&buf)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, self.snapshot_path())?;
        for j in self.journals()? {
            std::fs::remove_file(j)?;
        }
        Ok(Recovered {
            bindings: live.len(),
            skipped_lines: skipped,
        })
    }

    /// Opens worker `n`'s journal for appending.
    pub fn journal(&self, n: usize) -> io::Result<Journal> {
        let path = self.dir.join(format!("location-w{n}.log"));
        Ok(Journal {
            log: MappedLog::open(&path)?,
            buf: Vec::with_capacity(1024),
            durability: self.durability,
        })
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

    #[test]
    fn bind_refresh_remove_and_order() {
        let loc = MemoryLocation::new();
        let (mut cur, mut rec) = (Vec::new(), Vec::new());
        loc.update(
            "sip:a@x",
            &[change("sip:a@1.1.1.1", 60)],
            false,
            &reg("c1", 1, 100),
            &mut cur,
            &mut rec,
        )
        .expect("bind");
        assert_eq!(cur.len(), 1);
        loc.update(
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
            loc.update(
                "sip:a@x",
                &[change("sip:a@1.1.1.1", expires)],
                false,
                &reg("c1", cseq, 101),
                &mut cur,
                &mut rec,
            )
        };
        assert_eq!(
            up(1, 60),
            Ok(()),
            "a retransmission (same Call-ID and CSeq) applies again"
        );
        assert_eq!(up(3, 60), Ok(()));
        assert_eq!(
            up(2, 60),
            Err(UpdateError::OutOfOrder { got: 2, stored: 3 }),
            "stale"
        );
        assert_eq!(up(4, 0), Ok(()), "remove");
        assert_eq!(cur.len(), 1);
        assert_eq!(loc.len(170), 0, "expired");
        loc.update("sip:a@x", &[], true, &reg("c9", 1, 101), &mut cur, &mut rec)
            .expect("star");
        assert!(cur.is_empty());
        assert_eq!(loc.len(101), 0);
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
        let dir = std::env::temp_dir().join(format!("sipsec-loc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let p = Persistence::new(&dir, Durability::Process).expect("dir");
        let loc = MemoryLocation::new();
        let (mut cur, mut rec) = (Vec::new(), Vec::new());
        loc.update(
            "sip:a@x",
            &[change("sip:a@1.1.1.1", 60)],
            false,
            &reg("c1", 1, 100),
            &mut cur,
            &mut rec,
        )
        .expect("bind");
        loc.update(
            "sip:b@x",
            &[change("sip:b@1.1.1.1", 60)],
            false,
            &reg("c2", 1, 100),
            &mut cur,
            &mut rec,
        )
        .expect("bind");
        loc.update(
            "sip:b@x",
            &[change("sip:b@1.1.1.1", 0)],
            false,
            &reg("c2", 2, 100),
            &mut cur,
            &mut rec,
        )
        .expect("unbind");
        let mut j = p.journal(0).expect("journal");
        j.append(&rec).expect("write");
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
