//! An append-only file written through a shared memory mapping: appending
//! is a copy into the page cache, not a system call, and what was copied
//! survives the process (even `kill -9`) exactly as a returned `write(2)`
//! does. Space is reserved with `posix_fallocate` one window ahead, so a
//! full disk is an error from [`MappedLog::append`], never a `SIGBUS`.
//!
//! The file is longer than its records while open (the reserved rest is
//! zero bytes); dropping the log trims it. After a crash, readers ignore
//! the zero tail.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;

/// Bytes mapped at a time.
const WINDOW: usize = 4 << 20;

/// An append-only file written through a memory window.
#[derive(Debug)]
pub struct MappedLog {
    file: File,
    /// The mapping of `[start, start + WINDOW)`.
    map: Option<NonNull<u8>>,
    start: u64,
    /// Bytes written (the file's logical length).
    len: u64,
    page: u64,
}

// SAFETY: the mapping is owned by this value alone (never shared or
// aliased), so moving it to another thread is like moving a Vec.
unsafe impl Send for MappedLog {}

fn last_os_error(what: &str, path: Option<&Path>) -> io::Error {
    let e = io::Error::last_os_error();
    match path {
        Some(p) => io::Error::new(e.kind(), format!("{}: {what}: {e}", p.display())),
        None => io::Error::new(e.kind(), format!("{what}: {e}")),
    }
}

impl MappedLog {
    /// Opens (or creates) `path` for appending after its last non-zero byte.
    pub fn open(path: &Path) -> io::Result<Self> {
        let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(named)?;
        let mut data = Vec::new();
        file.read_to_end(&mut data).map_err(named)?;
        let len = data.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1) as u64;
        // SAFETY: sysconf has no preconditions.
        let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let mut log = Self {
            file,
            map: None,
            start: 0,
            len,
            page,
        };
        log.map_at(len).map_err(named)?;
        Ok(log)
    }

    /// Bytes appended so far (the file's length once the log is dropped).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing has been appended.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn unmap(&mut self) {
        if let Some(p) = self.map.take() {
            // SAFETY: `p` is a live mapping of WINDOW bytes made by map_at.
            unsafe { libc::munmap(p.as_ptr().cast(), WINDOW) };
        }
    }

    /// Maps the window holding offset `at`, reserving its blocks first.
    fn map_at(&mut self, at: u64) -> io::Result<()> {
        self.unmap();
        let start = at - at % self.page;
        let fd = self.file.as_raw_fd();
        let off = libc::off_t::try_from(start)
            .map_err(|_| io::Error::new(io::ErrorKind::FileTooLarge, "journal too large"))?;
        // SAFETY: plain system call on an open descriptor.
        let r = unsafe { libc::posix_fallocate(fd, off, WINDOW as libc::off_t) };
        if r != 0 {
            let e = io::Error::from_raw_os_error(r);
            return Err(io::Error::new(e.kind(), format!("reserving space: {e}")));
        }
        // SAFETY: a fresh shared mapping of a range the file now covers
        // (posix_fallocate extended it); nothing else aliases it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                WINDOW,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(last_os_error("mmap", None));
        }
        self.map = NonNull::new(p.cast());
        self.start = start;
        Ok(())
    }

    /// Appends `data`; with `sync`, also waits until it is on stable storage.
    pub fn append(&mut self, data: &[u8], sync: bool) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let end = self.len + data.len() as u64;
        if data.len() as u64 > WINDOW as u64 - self.page {
            // Larger than any window: an ordinary positioned write.
            use std::os::unix::fs::FileExt;
            self.file.write_all_at(data, self.len)?;
            self.len = end;
            if sync {
                self.file.sync_data()?;
            }
            return self.map_at(self.len);
        }
        if self.map.is_none() || end > self.start + WINDOW as u64 {
            self.map_at(self.len)?;
        }
        let Some(base) = self.map else {
            return Err(io::Error::other("journal window not mapped"));
        };
        let at = (self.len - self.start) as usize;
        // SAFETY: `at + data.len() <= WINDOW` (checked above), the window
        // is mapped writable, and `data` cannot overlap our own mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), base.as_ptr().add(at), data.len());
        }
        self.len = end;
        if sync {
            let from = at - at % self.page as usize;
            // SAFETY: the range lies within the live mapping and starts on
            // a page boundary, as msync requires.
            let r = unsafe {
                libc::msync(
                    base.as_ptr().add(from).cast(),
                    at + data.len() - from,
                    libc::MS_SYNC,
                )
            };
            if r != 0 {
                return Err(last_os_error("msync", None));
            }
        }
        Ok(())
    }
}

impl MappedLog {
    /// Waits until everything appended is on stable storage (the mapped
    /// pages are in the page cache, which `fsync` writes back).
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

impl Drop for MappedLog {
    fn drop(&mut self) {
        self.unmap();
        let _ = self.file.set_len(self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("sipsec-maplog-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir.join("log")
    }

    /// Removes a passed test's directory (a failed one's stays to read).
    fn passed(log: &std::path::Path) {
        let _ = std::fs::remove_dir_all(log.parent().expect("its directory"));
    }

    #[test]
    fn appends_are_in_the_file_while_open_and_trimmed_on_drop() {
        let path = temp("basic");
        let mut log = MappedLog::open(&path).expect("open");
        log.append(b"one\n", false).expect("append");
        log.append(b"two\n", true).expect("append");
        // Another reader sees the records (and the zero reserve) at once.
        let seen = std::fs::read(&path).expect("read");
        assert!(seen.starts_with(b"one\ntwo\n"));
        assert!(seen[8..].iter().all(|b| *b == 0));
        drop(log);
        assert_eq!(std::fs::read(&path).expect("read"), b"one\ntwo\n");
        // Reopening continues after the last record.
        let mut log = MappedLog::open(&path).expect("reopen");
        assert_eq!(log.len(), 8);
        log.append(b"three\n", false).expect("append");
        drop(log);
        assert_eq!(std::fs::read(&path).expect("read"), b"one\ntwo\nthree\n");
        passed(&path);
    }

    #[test]
    fn crosses_windows_and_takes_records_larger_than_one() {
        let path = temp("windows");
        let mut log = MappedLog::open(&path).expect("open");
        let line = vec![b'x'; 999];
        let mut want = Vec::new();
        for i in 0..(2 * WINDOW / 1000 + 7) {
            let mut rec = line.clone();
            rec[0] = b'a' + (i % 26) as u8;
            rec.push(b'\n');
            log.append(&rec, false).expect("append");
            want.extend_from_slice(&rec);
        }
        let big = vec![b'y'; WINDOW + 10];
        log.append(&big, false).expect("append big");
        want.extend_from_slice(&big);
        log.append(b"end\n", false).expect("append after big");
        want.extend_from_slice(b"end\n");
        drop(log);
        assert_eq!(std::fs::read(&path).expect("read"), want);
        passed(&path);
    }

    #[test]
    fn a_crash_leaves_a_zero_tail_that_reopening_skips() {
        let path = temp("crash");
        let mut log = MappedLog::open(&path).expect("open");
        log.append(b"kept\n", false).expect("append");
        // A crash: the mapping goes, the file is never trimmed.
        std::mem::forget(log);
        let raw = std::fs::read(&path).expect("read");
        assert!(raw.len() > 5 && raw.starts_with(b"kept\n"));
        let log = MappedLog::open(&path).expect("reopen");
        assert_eq!(log.len(), 5);
        drop(log);
        passed(&path);
    }
}
