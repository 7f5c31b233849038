//! Why a packet or a key was refused.

/// Why a packet was refused. Deliberately coarse for authentication: a
/// forged packet learns nothing beyond "rejected".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Not an RTP/RTCP packet this context can handle.
    #[error("malformed packet: {0}")]
    Malformed(&'static str),
    /// The authentication tag did not verify.
    #[error("authentication failed")]
    AuthFailed,
    /// A packet already received (or too old for the replay window).
    #[error("replayed or too old packet (index {0})")]
    Replay(u64),
    /// The master key protected its lifetime's worth of packets; rekey.
    #[error("master key lifetime exhausted: rekey")]
    KeyExhausted,
    /// The packet names a master key this context does not have.
    #[error("unknown MKI")]
    UnknownMki,
    /// The caller's buffer has no room for the tag and trailer.
    #[error("buffer too small: {0} bytes needed")]
    BufferTooSmall(usize),
    /// A key, salt, MKI or option that cannot be used.
    #[error("{0}")]
    BadKey(String),
}
