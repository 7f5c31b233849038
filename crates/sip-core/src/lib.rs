//! `sip-core`: the SIP message layer of sipsec, sans-IO.
//!
//! - [`Message::parse`]: zero-copy, allocation-free parsing of requests and
//!   responses (RFC 3261 §7, §20, §25), checked against the RFC 4475
//!   torture messages.
//! - [`framing::frame`]: message boundaries on TCP/TLS streams.
//! - [`writer`]: serialisation into reused buffers; [`proxy`]: the edits a
//!   proxy makes, spliced over the original bytes.
//! - [`digest`]: HTTP Digest (MD5, SHA-256, SHA-512/256) with
//!   constant-time verification; [`auth`]: the header fields carrying it.
//! - [`transaction`]: RFC 3261 §17 state machines driven by passed-in time.
//!
//! Nothing here opens sockets, spawns threads, sleeps or reads the clock.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod auth;
pub mod bencode;
pub mod contact;
pub mod cseq;
pub mod digest;
pub mod dns;
mod error;
pub mod framing;
#[doc(hidden)]
pub mod fuzzing;
pub mod header;
mod limits;
pub mod message;
mod method;
pub mod name_addr;
pub mod params;
pub mod proxy;
mod scan;
mod status;
pub mod stun;
pub mod transaction;
pub mod transport;
pub mod uri;
pub mod via;
pub mod websocket;
pub mod writer;

pub use error::{ErrorKind, ParseError, UriError};
pub use header::{Header, HeaderName};
pub use limits::Limits;
pub use message::{Message, StartLine};
pub use method::Method;
pub use status::StatusCode;
pub use transport::Transport;
pub use uri::{Host, Scheme, Uri, UriContext};
