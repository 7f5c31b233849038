//! Media for the sipsec phone, sans-IO: G.711 µ-law and A-law
//! ([`g711`]), WAV files ([`wav`]), tone generation and detection
//! ([`tone`]), RTP packets and drift-free pacing ([`rtp`]), RTCP sender
//! and receiver reports ([`rtcp`]), and receive-side call-quality
//! statistics with an E-model MOS estimate ([`stats`]).

pub mod fuzzing;
pub mod g711;
pub mod rtcp;
pub mod rtp;
pub mod stats;
pub mod tone;
pub mod wav;

/// The G.711 sample rate.
pub const RATE: u32 = 8_000;
/// Samples in one 20 ms G.711 packet.
pub const SAMPLES_PER_PACKET: usize = 160;
