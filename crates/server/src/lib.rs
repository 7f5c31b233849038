//! The sipsec SIP server.
//!
//! [`core`] decides what to answer or forward (no I/O); [`udp`] moves
//! datagrams between sockets and the core on one thread per worker;
//! [`location`] keeps bindings (in memory, journaled to disk); [`auth`] and
//! [`users`] implement digest authentication; [`stateful`] keeps the
//! proxy's transactions when it runs transaction-stateful.
#![deny(unsafe_code)] // allowed only in `mmsg`, the recvmmsg/sendmmsg wrapper
#![deny(missing_docs)]

pub mod auth;
pub mod config;
pub mod core;
pub mod guard;
pub mod http;
pub mod location;
pub mod log;
pub mod maplog;
pub mod metrics;
pub mod mmsg;
pub mod privacy;
pub mod server;
pub mod stateful;
pub mod tcp;
pub mod tls;
pub mod udp;
pub mod users;

pub use crate::config::{Config, Mode};
pub use crate::core::{Core, Now, Reply, Shared, Transport};
pub use crate::server::{check, start, Checked, StartError, Started};
pub use crate::udp::{ServerHandle, UdpServer};
