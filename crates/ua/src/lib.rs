//! The sipsec user agent: SDP offer/answer with SDES keys ([`sdp`]),
//! request and response building ([`sip`]), STUN ([`stun`]), server
//! location per RFC 3263 ([`resolve`]), the media of a call
//! ([`session`]) and the phone that ties them together ([`phone`]).

pub mod phone;
pub mod resolve;
pub mod sdp;
pub mod session;
pub mod signal;
pub mod sip;
