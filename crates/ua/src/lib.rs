//! The sipsec user agent: SDP offer/answer with SDES keys ([`sdp`]),
//! request and response building ([`sip`]), STUN ([`sip_core::stun`]), server
//! location per RFC 3263 ([`resolve`]), the media of a call
//! ([`session`]), the signalling core of a user agent ([`agent`], sans-IO)
//! and the phone that drives it over a socket ([`phone`]).

pub mod agent;
pub mod fuzzing;
pub mod phone;
pub mod resolve;
pub mod sdp;
pub mod session;
pub mod signal;
pub mod sip;
