//! The server's log: `tracing` events on standard error, as text (colours
//! on a terminal) or one JSON object a line, filtered by `--log-level` or
//! `RUST_LOG` (`info` by default; directives such as
//! `warn,sipsec::conn=debug`).

use std::io::IsTerminal;

use clap::ValueEnum;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, target, fields).
    Json,
}

/// Parses a filter: a level (`debug`) or `target=level` directives,
/// comma-separated; the error names what is wrong.
pub fn parse_filter(spec: &str) -> Result<Targets, String> {
    spec.parse::<Targets>()
        .map_err(|e| format!("log filter {spec:?}: {e} (e.g. info, or warn,sipsec::conn=debug)"))
}

/// Changes the filter of an installed log (on SIGHUP).
pub type Reload = Box<dyn Fn(Targets) -> Result<(), String> + Send>;

/// The filter `--log-level` (or else `RUST_LOG`, or else `info`) asks for.
pub fn filter(level: Option<&str>) -> Result<Targets, String> {
    let env = std::env::var("RUST_LOG")
        .ok()
        .filter(|s| !s.trim().is_empty());
    let (spec, from) = match (level, env.as_deref()) {
        (Some(l), _) => (l, "--log-level"),
        (None, Some(e)) => (e, "RUST_LOG"),
        (None, None) => ("info", ""),
    };
    parse_filter(spec).map_err(|e| {
        if from.is_empty() {
            e
        } else {
            format!("{from}: {e}")
        }
    })
}

/// Installs the subscriber: `level` (from `--log-level`) wins over
/// `RUST_LOG`; neither means `info`. Returns what changes the filter later.
pub fn init(level: Option<&str>, format: LogFormat) -> Result<Reload, String> {
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter(level)?);
    let ansi = std::io::stderr().is_terminal();
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => tracing_subscriber::registry()
            .with(layer.with_ansi(ansi).with_filter(filter))
            .try_init(),
        LogFormat::Json => tracing_subscriber::registry()
            .with(
                layer
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(false)
                    .with_filter(filter),
            )
            .try_init(),
    };
    result.map_err(|e| format!("installing the log: {e}"))?;
    Ok(Box::new(move |t| {
        handle
            .reload(t)
            .map_err(|e| format!("changing the log filter: {e}"))
    }))
}
