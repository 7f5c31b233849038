//! `[privacy]`: the PrivaSIP pseudonyms a proxy opens (keys, AES under
//! the users' HA1, the stateful cache, PrivaSIP-3 tickets).

use std::path::PathBuf;

use crate::config::{AesMode, PrivacySettings};

/// `[privacy]`: PrivaSIP pseudonyms this proxy opens.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivacySection {
    /// Private keys (RSA of any variant, P-256, X25519), each with the key
    /// id published beside its public half.
    pub keys: Option<Vec<PrivacyKey>>,
    /// AES pseudonyms under keys from the users' HA1: `off`, `gcm` or the
    /// published `cbc`.
    pub aes: Option<String>,
    /// Key id of AES pseudonyms (default 1).
    pub aes_key_id: Option<u8>,
    /// `stateless` (decrypt every time) or `stateful` (cache).
    pub mode: Option<String>,
    /// Cache entries in stateful mode (default 100,000).
    pub cache: Option<usize>,
    /// Seconds a cached pseudonym stays (default 300).
    pub cache_ttl: Option<u64>,
    /// PrivaSIP-3 tickets per enrolling REGISTER (0: off; at most 64).
    pub tickets: Option<usize>,
    /// Seconds a ticket may be used (default 3600).
    pub ticket_ttl: Option<u64>,
    /// ML-KEM-768 private key for hybrid post-quantum enrollments.
    pub pq_key: Option<PathBuf>,
}

/// One key of `[privacy]`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivacyKey {
    /// Key id (0–255).
    pub id: u8,
    /// Private key file, PEM.
    pub key: PathBuf,
}

/// The settings of a `[privacy]` table.
pub fn privacy_settings(p: PrivacySection) -> Result<PrivacySettings, (&'static str, String)> {
    let aes = match p.aes.as_deref().unwrap_or("off") {
        "off" => AesMode::Off,
        "gcm" => AesMode::Gcm,
        "cbc" => AesMode::Cbc,
        other => return Err(("privacy.aes", format!("{other:?}: use off, gcm or cbc"))),
    };
    let stateful = match p.mode.as_deref().unwrap_or("stateful") {
        "stateful" => true,
        "stateless" => false,
        other => {
            return Err((
                "privacy.mode",
                format!("{other:?}: use stateless or stateful"),
            ))
        }
    };
    let keys: Vec<(u8, PathBuf)> = p
        .keys
        .unwrap_or_default()
        .into_iter()
        .map(|k| (k.id, k.key))
        .collect();
    if keys.is_empty() && aes == AesMode::Off {
        return Err((
            "privacy",
            "give keys = [{ id = 1, key = \"file.pem\" }] or aes = \"gcm\"".into(),
        ));
    }
    let cache = if stateful {
        p.cache.unwrap_or(100_000)
    } else {
        0
    };
    if stateful && cache == 0 {
        return Err((
            "privacy.cache",
            "0 entries: say mode = \"stateless\" instead".into(),
        ));
    }
    let tickets = p.tickets.unwrap_or(0);
    if tickets > privacy::tickets::MAX_BATCH {
        return Err((
            "privacy.tickets",
            format!(
                "{tickets}: at most {} per registration",
                privacy::tickets::MAX_BATCH
            ),
        ));
    }
    let ticket_ttl = p.ticket_ttl.unwrap_or(3600);
    if !(60..=86_400).contains(&ticket_ttl) {
        return Err((
            "privacy.ticket_ttl",
            format!("{ticket_ttl}: seconds in [60, 86400]"),
        ));
    }
    Ok(PrivacySettings {
        keys,
        aes,
        aes_key_id: p.aes_key_id.unwrap_or(1),
        cache,
        cache_ttl: p.cache_ttl.unwrap_or(300),
        tickets,
        ticket_ttl,
        pq_key: p.pq_key,
    })
}
