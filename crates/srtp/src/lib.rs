//! SRTP and SRTCP (RFC 3711) with the AES counter-mode suites of RFC 3711
//! and RFC 6188 (AES-128/192/256 with HMAC-SHA1 tags of 80 or 32 bits) and
//! the AES-GCM suites of RFC 7714. Sans-IO: packets are protected and
//! unprotected in the caller's buffer; no sockets, threads or clocks.
//!
//! - [`kdf`]: the AES-CM key derivation (RFC 3711 §4.3), key derivation
//!   rate included;
//! - [`Context`]: one direction of one SRTP session — per-SSRC rollover
//!   counter and sequence estimation (§3.3.1), replay windows for SRTP
//!   and SRTCP (§3.3.2, 64 packets by default, configurable), optional
//!   MKI with several master keys (§3.1), key lifetimes (2^48 SRTP and
//!   2^31 SRTCP packets per master key, §9.2);
//! - [`Hook`]: per-step timings ([`StepTimes`]) that cost nothing when
//!   off ([`NoHook`]).
//!
//! Packet layouts, as libsrtp writes them:
//! - SRTP, AES-CM: header | encrypted payload | MKI | tag;
//! - SRTP, AES-GCM: header | encrypted payload | tag | MKI;
//! - SRTCP, AES-CM: header | encrypted rest | E+index | MKI | tag;
//! - SRTCP, AES-GCM: header | encrypted rest | tag | E+index | MKI.

mod cipher;
mod context;
mod error;
pub mod fuzzing;
mod hook;
pub mod kdf;
mod keys;
mod profile;
mod replay;
mod rtcp;
mod rtp;
pub mod sdes;

pub use cipher::AUTH_KEY_LEN;
pub use context::{Context, MasterKey, Options};
pub use error::Error;
pub use hook::{Hook, NoHook, Step, StepTimes};
pub use profile::Profile;
pub use replay::ReplayWindow;
pub use rtp::{estimate_index, rtp_header_len};

/// Longest master salt (AES-CM, 112 bits); AES-GCM uses 12 bytes.
pub const SALT_LEN: usize = 14;
/// SRTP packets one master key may protect (RFC 3711 §9.2).
pub const MAX_PACKETS: u64 = 1 << 48;
/// SRTCP packets one master key may protect (RFC 3711 §9.2).
pub const MAX_RTCP_PACKETS: u64 = 1 << 31;
/// Longest MKI accepted (libsrtp's limit).
pub const MAX_MKI_LEN: usize = 128;
