//! The sipsec SIP server.
//!
//! [`core`] decides what to answer (no I/O); [`udp`] moves datagrams
//! between sockets and the core on one thread per worker.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod core;
pub mod udp;

pub use crate::core::Core;
pub use crate::udp::{ServerHandle, UdpServer};
