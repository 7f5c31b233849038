//! The call records journal: one JSON object per line, appended with one
//! `write` per batch before the message that ended the calls is sent, so
//! a kill -9 loses no record of a call that ended before it.
//!
//! Rotation needs no signal: before each batch the file at the path is
//! compared with the one open (device and inode), so once logrotate (or
//! an operator) moved it away, the batch goes to a new file at the path,
//! and the old one holds every record written before (a copy-and-truncate
//! rotation works too: the file is appended to).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::io::sinks::CallLog;
use crate::proto::dialogs::CallRecord;

/// The records file.
#[derive(Debug)]
pub struct CallFile {
    path: PathBuf,
    file: Mutex<File>,
}

/// `path` opened for appending (created, mode 0640).
fn append_to(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)
}

/// Whether `file` is no longer the file at `path` (moved away, or
/// replaced).
fn moved(path: &Path, file: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(path), file.metadata()) {
        (Ok(at), Ok(open)) => (at.dev(), at.ino()) != (open.dev(), open.ino()),
        (Err(_), _) => true,
        (Ok(_), Err(_)) => false,
    }
}

impl CallFile {
    /// Opens `path` for appending (created, mode 0640).
    pub fn open(path: &Path) -> std::io::Result<Self> {
        Ok(Self {
            path: path.to_owned(),
            file: Mutex::new(append_to(path)?),
        })
    }
}

impl CallLog for CallFile {
    fn write(&self, records: &[CallRecord]) {
        let mut text = Vec::with_capacity(records.len() * 320);
        for r in records {
            if serde_json::to_writer(&mut text, r).is_ok() {
                text.push(b'\n');
            }
        }
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if moved(&self.path, &f) {
            match append_to(&self.path) {
                Ok(new) => {
                    *f = new;
                    tracing::info!(target: "sipsec::calls", path = %self.path.display(), "call records file rotated: writing a new one");
                }
                Err(e) => {
                    tracing::error!(target: "sipsec::calls", path = %self.path.display(), "call records file moved and not reopened, writing on to the moved one: {e}");
                }
            }
        }
        if let Err(e) = f.write_all(&text) {
            tracing::error!(target: "sipsec::calls", "call records not written: {e}");
        }
    }
}

/// Records queued for the Redis stream at most; beyond, a record goes to
/// the journal only (counted).
const STREAM_QUEUE: usize = 10_000;
/// Entries the stream keeps (approximately: `XADD … MAXLEN ~`).
const STREAM_MAXLEN: &str = "1000000";

/// The journal, and a copy of each record for the shared location's Redis
/// (a stream, `PREFIXcalls`, one entry per call with its JSON in
/// `record`), which a thread of its own adds: a slow or absent Redis never
/// holds a worker, and the journal stays the record of truth.
#[derive(Debug)]
pub struct CallFileAndStream {
    file: CallFile,
    queue: Mutex<std::sync::mpsc::SyncSender<Vec<u8>>>,
    /// Records that found the queue full.
    pub dropped: std::sync::atomic::AtomicU64,
}

impl CallFileAndStream {
    /// The journal `file`, and a thread adding to `settings`' Redis until
    /// `stop`.
    pub fn start(
        file: CallFile,
        settings: &crate::config::RedisSettings,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<(Self, std::thread::JoinHandle<()>), String> {
        let client = crate::io::redis::client(settings)?;
        let key = format!("{}calls", settings.prefix);
        let timeout = settings.timeout;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(STREAM_QUEUE);
        let thread = std::thread::Builder::new()
            .name("call-stream".into())
            .spawn(move || stream(&client, &key, timeout, &rx, &stop))
            .map_err(|e| e.to_string())?;
        Ok((
            Self {
                file,
                queue: Mutex::new(tx),
                dropped: std::sync::atomic::AtomicU64::new(0),
            },
            thread,
        ))
    }
}

impl CallLog for CallFileAndStream {
    fn write(&self, records: &[CallRecord]) {
        self.file.write(records);
        let q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        for r in records {
            let Ok(json) = serde_json::to_vec(r) else {
                continue;
            };
            if q.try_send(json).is_err() {
                self.dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

/// Adds each queued record to the stream, reconnecting (after a pause of
/// `timeout`) when Redis fails; a record that failed is tried again.
fn stream(
    client: &redis::Client,
    key: &str,
    timeout: std::time::Duration,
    rx: &std::sync::mpsc::Receiver<Vec<u8>>,
    stop: &std::sync::atomic::AtomicBool,
) {
    let mut conn: Option<redis::Connection> = None;
    let mut pending: Option<Vec<u8>> = None;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let record = match pending.take() {
            Some(r) => r,
            None => match rx.recv_timeout(std::time::Duration::from_millis(200)) {
                Ok(r) => r,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
            },
        };
        if conn.is_none() {
            conn = client.get_connection_with_timeout(timeout).ok();
            if let Some(c) = &conn {
                let _ = c.set_read_timeout(Some(timeout));
                let _ = c.set_write_timeout(Some(timeout));
            }
        }
        let Some(c) = conn.as_mut() else {
            pending = Some(record);
            std::thread::sleep(timeout);
            continue;
        };
        let added: redis::RedisResult<String> = redis::cmd("XADD")
            .arg(key)
            .arg("MAXLEN")
            .arg("~")
            .arg(STREAM_MAXLEN)
            .arg("*")
            .arg("record")
            .arg(&record)
            .query(c);
        if let Err(e) = added {
            tracing::warn!(target: "sipsec::calls", "call record not added to the Redis stream (retrying): {e}");
            conn = None;
            pending = Some(record);
            std::thread::sleep(timeout);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::dialogs::Disposition;

    fn record(call_id: &str) -> CallRecord {
        CallRecord {
            call_id: call_id.into(),
            caller: "alice".into(),
            callee: "bob".into(),
            start_ms: 1,
            answer_ms: None,
            end_ms: 2,
            duration_s: 0.0,
            status: 486,
            disposition: Disposition::Failed,
            trunk: None,
            gateway: None,
            transport: "udp",
            stir: None,
        }
    }

    fn lines(path: &Path) -> Vec<String> {
        let text = std::fs::read_to_string(path).expect("readable");
        text.lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("one JSON object a line");
                v["call_id"].as_str().expect("call_id").to_owned()
            })
            .collect()
    }

    /// logrotate moves the file away (and may compress it later): the
    /// next batch goes to a new file at the path, and nothing is lost;
    /// a file removed outright is made again.
    #[test]
    fn a_file_moved_away_is_followed_by_a_new_one_and_no_record_is_lost() {
        let dir = std::env::temp_dir().join(format!("sipsec-records-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("calls.jsonl");
        let log = CallFile::open(&path).expect("opened");
        log.write(&[record("c1"), record("c2")]);
        let rotated = dir.join("calls.jsonl.1");
        std::fs::rename(&path, &rotated).expect("rotate");
        log.write(&[record("c3")]);
        assert_eq!(lines(&rotated), ["c1", "c2"]);
        assert_eq!(lines(&path), ["c3"]);
        std::fs::remove_file(&path).expect("remove");
        log.write(&[record("c4")]);
        assert_eq!(lines(&path), ["c4"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
