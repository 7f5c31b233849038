//! A test's scratch directory: made empty for it, removed when the test
//! passes, kept (and named on stderr) when it fails, so a failure can be
//! read and a passing run leaves nothing behind in the temporary
//! directory. Shared by the server's and the command's tests (`#[path]`).

#![allow(dead_code)]

use std::ffi::OsStr;
use std::ops::Deref;
use std::path::{Path, PathBuf};

/// A directory of the temporary directory, named after the test and the
/// process, removed on drop unless the thread is panicking.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    /// `$TMPDIR/sipsec-{name}-{pid}`, emptied and created.
    pub fn new(name: &str) -> Self {
        let s = Self::unmade(name);
        std::fs::create_dir_all(&s.0).expect("scratch directory");
        s
    }

    /// The same path, emptied but not created (for what makes its own).
    pub fn unmade(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("sipsec-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Self(dir)
    }

    /// The path, owned (for a configuration that takes one).
    pub fn path_buf(&self) -> PathBuf {
        self.0.clone()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept for the failed test: {}", self.0.display());
            return;
        }
        // A process killed a moment ago (a browser's helpers, which end
        // after it) may still be writing here; removal then fails with
        // the directory not empty, and is tried again, a bounded number
        // of times (best effort: what stays is named).
        for _ in 0..50 {
            match std::fs::remove_dir_all(&self.0) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                _ => return,
            }
        }
        eprintln!("could not remove {}", self.0.display());
    }
}

impl Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<OsStr> for Scratch {
    fn as_ref(&self) -> &OsStr {
        self.0.as_os_str()
    }
}
