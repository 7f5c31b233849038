//! Why a benchmark's input was refused. The modules move to these typed
//! errors one by one; until all have, `From<Error> for String` lets the
//! rest pass them on.

/// A refused scenario, template, domain or setting.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
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
}

impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}
