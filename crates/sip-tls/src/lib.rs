//! The TLS crypto provider every sipsec endpoint uses — server, phone,
//! benchmarks, outbound connections: rustls on aws-lc-rs, whose key
//! exchange includes the hybrid post-quantum group X25519MLKEM768
//! (draft-ietf-tls-ecdhe-mlkem: ML-KEM-768, FIPS 203, beside X25519), so
//! signalling recorded today cannot be decrypted by a future quantum
//! computer ("harvest now, decrypt later"). Signatures are not changed
//! here: RSA keys sign through OpenSSL (`rsa-variants`) in every variant.
//!
//! Groups are named as the IANA TLS Supported Groups registry names them;
//! an ordered list is the server's preference and the client's offer.

use std::sync::Arc;

use rustls::crypto::aws_lc_rs::kx_group;
use rustls::crypto::{CryptoProvider, SupportedKxGroup};
use rustls::NamedGroup;

/// Every group this provider can use, by its IANA name.
const GROUPS: &[(&str, &dyn SupportedKxGroup)] = &[
    ("X25519MLKEM768", kx_group::X25519MLKEM768),
    ("SecP256r1MLKEM768", kx_group::SECP256R1MLKEM768),
    ("MLKEM768", kx_group::MLKEM768),
    ("MLKEM1024", kx_group::MLKEM1024),
    ("x25519", kx_group::X25519),
    ("secp256r1", kx_group::SECP256R1),
    ("secp384r1", kx_group::SECP384R1),
];

/// The groups offered and preferred when none are configured: the hybrid
/// first, then the classical ones every peer has.
pub const DEFAULT_GROUPS: &[&str] = &["X25519MLKEM768", "x25519", "secp256r1", "secp384r1"];

/// Key-exchange groups in order of preference.
#[derive(Debug, Clone)]
pub struct Groups(Vec<&'static dyn SupportedKxGroup>);

impl Default for Groups {
    fn default() -> Self {
        Self::parse(DEFAULT_GROUPS).expect("the default groups are known")
    }
}

impl Groups {
    /// The groups `names` (any case), in that order. `Err` names the one
    /// that is unknown, or says the list is empty or repeats a group.
    pub fn parse<S: AsRef<str>>(names: &[S]) -> Result<Self, String> {
        let mut out: Vec<&'static dyn SupportedKxGroup> = Vec::new();
        for n in names {
            let n = n.as_ref();
            let (_, g) = GROUPS
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(n))
                .ok_or_else(|| {
                    let known: Vec<_> = GROUPS.iter().map(|(n, _)| *n).collect();
                    format!("{n:?}: not a group this build knows ({})", known.join(", "))
                })?;
            if out.iter().any(|o| o.name() == g.name()) {
                return Err(format!("{n:?} is listed twice"));
            }
            out.push(*g);
        }
        if out.is_empty() {
            return Err("no group: list at least one".into());
        }
        Ok(Self(out))
    }

    /// Only the post-quantum ones (hybrid or pure ML-KEM), in order.
    pub fn post_quantum_only(&self) -> Self {
        Self(
            self.0
                .iter()
                .copied()
                .filter(|g| is_post_quantum(g.name()))
                .collect(),
        )
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether any is post-quantum.
    pub fn any_post_quantum(&self) -> bool {
        self.0.iter().any(|g| is_post_quantum(g.name()))
    }

    /// Their names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|g| name_of(g.name())).collect()
    }
}

/// The provider: aws-lc-rs's suites and signature verification, these
/// key-exchange groups.
pub fn provider(groups: &Groups) -> CryptoProvider {
    CryptoProvider {
        kx_groups: groups.0.clone(),
        ..rustls::crypto::aws_lc_rs::default_provider()
    }
}

/// [`provider`] with the default groups, shared.
pub fn default_provider() -> Arc<CryptoProvider> {
    Arc::new(provider(&Groups::default()))
}

/// Whether `group` resists a quantum computer (an ML-KEM hybrid or pure
/// ML-KEM).
pub fn is_post_quantum(group: NamedGroup) -> bool {
    matches!(
        group,
        NamedGroup::X25519MLKEM768
            | NamedGroup::secp256r1MLKEM768
            | NamedGroup::MLKEM768
            | NamedGroup::MLKEM1024
    )
}

/// `group`'s IANA name ("other" for one this build does not name).
pub fn name_of(group: NamedGroup) -> &'static str {
    GROUPS
        .iter()
        .find(|(_, g)| g.name() == group)
        .map_or("other", |(n, _)| n)
}

/// Every group name this build knows, in the registry's spelling.
pub fn known_names() -> impl Iterator<Item = &'static str> {
    GROUPS.iter().map(|(n, _)| *n)
}

/// A signing key for a non-RSA private key (ECDSA, Ed25519) through
/// aws-lc-rs.
pub fn any_supported_type(
    der: &rustls::pki_types::PrivateKeyDer<'_>,
) -> Result<Arc<dyn rustls::sign::SigningKey>, rustls::Error> {
    rustls::crypto::aws_lc_rs::sign::any_supported_type(der)
}

/// The key-exchange groups TLS handshakes are counted by (IANA names),
/// the last for any other.
pub const COUNTED_GROUPS: [&str; 8] = [
    "X25519MLKEM768",
    "SecP256r1MLKEM768",
    "MLKEM768",
    "MLKEM1024",
    "x25519",
    "secp256r1",
    "secp384r1",
    "other",
];

/// A stream socket as a TLS session reads it (`read_tls`), noting
/// whether the last read gave less than it asked for: a stream socket
/// does so only when it held no more, so an edge-triggered reader can
/// stop there instead of spending a read to see `EAGAIN`.
pub struct ShortRead<'a, R> {
    /// The socket read.
    pub socket: &'a mut R,
    /// The last read gave less than asked for.
    pub short: bool,
}

impl<'a, R: std::io::Read> ShortRead<'a, R> {
    /// Reads `socket`, no read made yet.
    pub fn new(socket: &'a mut R) -> Self {
        ShortRead {
            socket,
            short: false,
        }
    }
}

impl<R: std::io::Read> std::io::Read for ShortRead<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.socket.read(buf)?;
        self.short = n < buf.len();
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_parse_by_name_in_order_and_refuse_unknown_or_repeated_ones() {
        let g = Groups::parse(&["x25519mlkem768", "X25519"]).unwrap();
        assert_eq!(g.names(), ["X25519MLKEM768", "x25519"]);
        assert!(g.any_post_quantum());
        assert_eq!(g.post_quantum_only().names(), ["X25519MLKEM768"]);
        let e = Groups::parse(&["kyber"]).unwrap_err();
        assert!(
            e.contains("\"kyber\"") && e.contains("X25519MLKEM768"),
            "{e}"
        );
        assert!(Groups::parse(&["x25519", "X25519"]).is_err());
        assert!(Groups::parse::<&str>(&[]).is_err());
        assert!(Groups::parse(&["x25519"])
            .unwrap()
            .post_quantum_only()
            .is_empty());
        assert_eq!(Groups::default().names(), DEFAULT_GROUPS);
    }

    #[test]
    fn a_client_and_server_agree_on_the_hybrid_group_in_memory() {
        // Both sides on the default provider: the hybrid is negotiated.
        let p = default_provider();
        assert_eq!(p.kx_groups[0].name(), NamedGroup::X25519MLKEM768);
        assert!(is_post_quantum(p.kx_groups[0].name()));
        assert!(!is_post_quantum(NamedGroup::X25519));
        assert_eq!(name_of(NamedGroup::secp256r1), "secp256r1");
    }
}
