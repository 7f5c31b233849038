//! The provenance every report carries: recorded once from the parsed
//! command line, read by whatever writes a report.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use clap::{ArgMatches, Command};
use sipsec_bench::provenance::Provenance;

static PROVENANCE: OnceLock<Provenance> = OnceLock::new();

/// Options whose values stay out of reports.
fn secret(name: &str) -> bool {
    ["password", "token", "secret"]
        .iter()
        .any(|s| name.contains(s))
}

/// Every option of the subcommand that ran, named as on the command line
/// (`--target`), with its value, given or default; secrets redacted.
fn settings(mut cmd: &Command, mut m: &ArgMatches) -> BTreeMap<String, String> {
    while let Some((name, sub)) = m.subcommand() {
        match cmd.find_subcommand(name) {
            Some(c) => cmd = c,
            None => break,
        }
        m = sub;
    }
    let mut out = BTreeMap::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        let Ok(Some(values)) = m.try_get_raw(id) else {
            continue;
        };
        let name = arg
            .get_long()
            .map_or_else(|| id.to_owned(), |l| format!("--{l}"));
        let value = if secret(&name) {
            "(redacted)".to_owned()
        } else {
            values
                .map(|v| v.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(",")
        };
        out.insert(name, value);
    }
    out
}

/// Records the run's provenance; the first call wins.
pub fn record(cmd: &Command, matches: &ArgMatches) {
    let args: Vec<String> = std::env::args().collect();
    let _ = PROVENANCE.set(Provenance::now(
        sipsec_server::VERSION,
        sipsec_server::COMMIT,
        &args,
        settings(cmd, matches),
    ));
}

/// The run's provenance (recorded at start).
pub fn get() -> &'static Provenance {
    PROVENANCE.get_or_init(|| {
        let args: Vec<String> = std::env::args().collect();
        Provenance::now(
            sipsec_server::VERSION,
            sipsec_server::COMMIT,
            &args,
            BTreeMap::new(),
        )
    })
}

/// Writes `value` as pretty JSON with the provenance to `path`.
pub fn write_json(path: &std::path::Path, value: &impl serde::Serialize) -> Result<(), String> {
    let v = serde_json::to_value(value).map_err(|e| format!("{}: {e}", path.display()))?;
    let text = serde_json::to_string_pretty(&get().stamp(v)).unwrap_or_default();
    std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
}
