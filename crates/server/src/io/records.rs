//! The call records journal: one JSON object per line, appended with one
//! `write` per batch before the message that ended the calls is sent, so
//! a kill -9 loses no record of a call that ended before it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use crate::io::sinks::CallLog;
use crate::proto::dialogs::CallRecord;

/// The records file.
#[derive(Debug)]
pub struct CallFile {
    file: Mutex<File>,
}

impl CallFile {
    /// Opens `path` for appending (created, mode 0640).
    pub fn open(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o640)
            .open(path)?;
        Ok(Self {
            file: Mutex::new(file),
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
