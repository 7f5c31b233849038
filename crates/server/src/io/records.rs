//! The call records journal: one JSON object per line, appended with one
//! `write` per batch before the message that ended the calls is sent, so
//! a kill -9 loses no record of a call that ended before it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use crate::proto::dialogs::{CallLog, CallRecord};

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
