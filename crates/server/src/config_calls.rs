//! `[calls]`: the stateful proxy's dialogs and call records.

use std::path::PathBuf;

/// What the proxy keeps of calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallsSettings {
    /// Write a call record per call (a stateful proxy only; off by
    /// default, as a proxy that only routes need not follow dialogs).
    pub records: bool,
    /// Where (JSON lines; default `DATA_DIR/calls.jsonl`).
    pub file: Option<PathBuf>,
    /// Dialogs followed at once; past it new calls are refused (503).
    pub max_dialogs: usize,
    /// Dialogs one caller holds at once (an authenticated user, or an
    /// address the guard limits); past it its new calls are refused
    /// (403), so one account cannot fill the table. `None`: 1/64 of
    /// `max_dialogs`.
    pub max_dialogs_per_caller: Option<usize>,
    /// Seconds a confirmed call may last before it is ended by timeout.
    pub max_duration: u64,
}

impl Default for CallsSettings {
    fn default() -> Self {
        Self {
            records: false,
            file: None,
            max_dialogs: 100_000,
            max_dialogs_per_caller: None,
            max_duration: 4 * 3600,
        }
    }
}

/// `[calls]` as written.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallsSection {
    /// Write call records.
    pub records: Option<bool>,
    /// The records file.
    pub file: Option<PathBuf>,
    /// Dialogs at once.
    pub max_dialogs: Option<usize>,
    /// Dialogs one caller holds at once.
    pub max_dialogs_per_caller: Option<usize>,
    /// Longest call, seconds.
    pub max_duration: Option<u64>,
}

/// Applies `sec` to `s`; the key and what is wrong on error.
pub fn calls_settings(
    sec: CallsSection,
    s: &mut CallsSettings,
) -> Result<(), (&'static str, String)> {
    if let Some(r) = sec.records {
        s.records = r;
    }
    if sec.file.is_some() {
        s.file = sec.file;
    }
    if let Some(n) = sec.max_dialogs {
        if !(1..=10_000_000).contains(&n) {
            return Err(("calls.max_dialogs", format!("{n}: 1 to 10000000")));
        }
        s.max_dialogs = n;
    }
    if let Some(n) = sec.max_dialogs_per_caller {
        if !(1..=10_000_000).contains(&n) {
            return Err((
                "calls.max_dialogs_per_caller",
                format!("{n}: 1 to 10000000"),
            ));
        }
        s.max_dialogs_per_caller = Some(n);
    }
    if let Some(d) = sec.max_duration {
        if !(10..=7 * 86_400).contains(&d) {
            return Err((
                "calls.max_duration",
                format!("{d}: seconds from 10 to a week"),
            ));
        }
        s.max_duration = d;
    }
    Ok(())
}

impl CallsSettings {
    /// Dialogs one caller holds at once: as set, or 1/64 of the table
    /// (at least one).
    pub fn per_caller(&self) -> usize {
        self.max_dialogs_per_caller
            .unwrap_or(self.max_dialogs / 64)
            .max(1)
    }
}
