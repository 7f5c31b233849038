//! STIR/SHAKEN, sans-IO: what an authentication service signs and a
//! verification service checks (RFC 8224 §5, §6), with no socket, file or
//! clock — the caller passes the time and the bytes.
//!
//! - [`tn`]: telephone numbers as PASSporTs carry them.
//! - [`passport`]: SHAKEN PASSporTs (RFC 8225, RFC 8588), ES256 compact
//!   JWS, signed and verified with OpenSSL.
//! - [`identity`]: the SIP `Identity` header (RFC 8224 §4.1).
//! - [`cert`]: STI certificates: the TNAuthList extension (RFC 8226), a
//!   signer's chain checked against trust anchors and CRLs, and issuing
//!   (for `sipsec keygen` and tests).

pub mod cert;
mod der;
pub mod fuzzing;
pub mod identity;
pub mod passport;
pub mod tn;

pub use cert::{CertError, Signer, TnEntry, Trust};
pub use identity::{IdentityError, IdentityHeader};
pub use passport::{Claims, Passport, PassportError, SigningKey};
