//! The sipsec SIP server, in two layers (see `docs/server.md`):
//!
//! - [`proto`] decides: registrar (RFC 3261 §10.3), proxy (§16, stateless
//!   or transaction-stateful), redirect (§8.3), digest authentication,
//!   rate limits and bans, PrivaSIP pseudonyms and the in-memory location
//!   service. It takes bytes, their source and the time, and returns what
//!   to send, what to persist and what happened; it reads no clock and
//!   touches no file or socket, so a simulation can drive it.
//! - [`io`] does: UDP (recvmmsg/sendmmsg) workers, TCP and TLS
//!   connections, the location journal, the timer thread, the operator's
//!   HTTP endpoint, logging and start-up.
//!
//! [`config`] is below both: settings and their parsing; so is
//! [`shards`], the locking of the tables the workers share.
#![deny(unsafe_code)] // allowed only in `io::maplog` (sockets: the sip-udp crate)
#![deny(missing_docs)]

pub mod config;
pub mod config_calls;
pub mod config_connections;
mod config_dns;
mod config_file;
pub mod config_media;
pub mod config_privacy;
pub mod config_stir;
pub mod config_timers;
pub mod config_trunks;
pub mod fuzzing;
pub mod io;
pub mod proto;
pub mod shards;
mod stripes;

pub use crate::config::{Config, Mode};
pub use crate::io::handle::{Drained, ServerHandle};
pub use crate::io::process::{COMMIT, VERSION};
pub use crate::io::server::{check, start, Checked, Started};
pub use crate::io::start_error::StartError;
pub use crate::io::udp::UdpServer;
pub use crate::proto::core::{Core, Reply, Transport};
pub use crate::proto::shared::{Now, Shared};
