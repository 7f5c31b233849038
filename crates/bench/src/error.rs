//! Why a benchmark could not run or a measurement failed.

use std::fmt::Display;
use std::io;

/// A refused input, or a measurement that could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A `[` in a message template has no `]`.
    #[error("unclosed '[' in template: {0:?}")]
    UnclosedTemplate(String),
    /// A message template names a variable the engine does not know.
    #[error("unknown template variable [{0}]")]
    UnknownVariable(String),
    /// No built-in scenario has this name.
    #[error("unknown scenario {name:?}; built in:{known}")]
    UnknownScenario {
        /// The name asked for.
        name: String,
        /// The names there are, each preceded by a space.
        known: String,
    },
    /// A domain that cannot go into a SIP URI as given.
    #[error("domain {0:?}: a host name or IPv4 address (no brackets, spaces or @)")]
    BadDomain(String),
    /// Latency weights that are not five non-negative numbers summing to 1.
    #[error("weights {given:?}: {why}")]
    Weights {
        /// What was given.
        given: String,
        /// What is wrong with it.
        why: String,
    },
    /// A setting or input file the benchmark cannot use.
    #[error("{0}")]
    Input(String),
    /// A file, socket or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, and on what.
        context: String,
        /// The operating system's answer.
        #[source]
        source: io::Error,
    },
    /// Nothing answered in time.
    #[error("timeout: {0}")]
    Timeout(String),
    /// A system under test (a server, a phone, an adapter, a peer program)
    /// answered something the benchmark did not expect, or failed.
    #[error("{peer}: {detail}")]
    Peer {
        /// Who answered.
        peer: String,
        /// What was wrong.
        detail: String,
    },
    /// The system under test answered with this final status instead of success.
    #[error("status {0}")]
    Status(u16),
    /// Building a program the benchmark runs failed.
    #[error("building {what}: {detail}")]
    Build {
        /// What was built.
        what: String,
        /// The build's own report.
        detail: String,
    },
    /// A key, certificate or cipher could not be made or used.
    #[error("crypto: {0}")]
    Crypto(String),
    /// Two implementations disagreed on the same input.
    #[error("{0}")]
    Mismatch(String),
}

impl Error {
    /// Wraps an I/O error with what was being done: `.map_err(Error::io("reading x"))`.
    pub fn io(context: impl Display) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::Io {
            context: context.to_string(),
            source,
        }
    }

    /// A failure of a system under test.
    pub fn peer(peer: impl Display, detail: impl Display) -> Error {
        Error::Peer {
            peer: peer.to_string(),
            detail: detail.to_string(),
        }
    }

    /// Wraps a key or cipher library's error: `.map_err(Error::crypto)`.
    pub fn crypto(e: impl Display) -> Error {
        Error::Crypto(e.to_string())
    }

    /// The short cause a load run counts failures by: "timeout" for every
    /// deadline, else the message.
    pub fn cause(&self) -> String {
        match self {
            Error::Timeout(_) => "timeout".into(),
            Error::Io { source, .. }
                if matches!(
                    source.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                "timeout".into()
            }
            Error::Io { source, .. } => source.to_string(),
            other => other.to_string(),
        }
    }
}

impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}
