//! The drivers: they own the sockets, files, threads and clocks, feed
//! what arrives to [`crate::proto::core::Core`] and carry out what it
//! returns.

pub mod certs;
pub mod clock;
pub mod drive;
pub mod fetch;
pub mod files;
pub mod handle;
pub mod hep;
pub mod http;
mod http_guard;
pub mod journal;
pub mod keys;
pub mod log;
pub mod manage;
pub mod maplog;
pub mod media;
pub mod ng;
pub mod pace;
pub mod probe;
pub mod process;
pub mod records;
pub mod redis;
pub mod resolver;
pub mod send;
pub mod server;
pub mod sinks;
pub mod start_error;
pub mod tcp;
pub mod tls;
pub mod trunk_files;
pub mod udp;
pub mod udp_xdp;
pub mod users_file;
pub mod wake;
