//! `[stir]`: signed caller identity, STIR/SHAKEN (RFC 8224, 8225, 8588).
//! The authentication service signs the calls of authenticated users;
//! the verification service checks the calls that arrive signed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// What the originating side signs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignSettings {
    /// The EC P-256 private key (PEM) of the STI certificate.
    pub key: PathBuf,
    /// Where verifiers fetch that certificate (`https://…`).
    pub x5u: String,
    /// Attestation for authenticated users: `A`, `B` or `C`.
    pub attest: char,
    /// Attestation per user, where it differs.
    pub users: HashMap<String, char>,
    /// Trunks (gateways, SBCs) by source address: their calls are signed
    /// (with `trunk_attest`) instead of verified.
    pub trunks: Vec<std::net::IpAddr>,
    /// Attestation of trunks' calls (C: the gateway's callers are not
    /// known to us).
    pub trunk_attest: char,
}

/// How the verification service fetches certificates (`x5u`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSettings {
    /// The whole fetch, redirects included, must end within this.
    pub timeout: Duration,
    /// Bytes a certificate chain may have.
    pub max_bytes: usize,
    /// Redirects followed.
    pub max_redirects: u8,
    /// Certificates at loopback, private or link-local addresses may be
    /// fetched (a test bed; off: such addresses are refused, SSRF).
    pub allow_private: bool,
    /// Roots the repository's HTTPS certificate must chain to (default:
    /// the system's, `/etc/ssl/certs/ca-certificates.crt`).
    pub roots: Option<PathBuf>,
    /// How long a certificate without Cache-Control max-age is kept.
    pub default_ttl: Duration,
    /// How long a failed fetch is remembered (no fetch storm).
    pub failure_ttl: Duration,
    /// Fetches at once (threads).
    pub fetchers: usize,
}

impl Default for FetchSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(2),
            max_bytes: 16 * 1024,
            max_redirects: 2,
            allow_private: false,
            roots: None,
            default_ttl: Duration::from_secs(3600),
            failure_ttl: Duration::from_secs(10),
            fetchers: 4,
        }
    }
}

/// What the terminating side verifies with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifySettings {
    /// STI-CA certificates (PEM) signers must chain to.
    pub trust_anchors: PathBuf,
    /// Revocation lists (PEM).
    pub crls: Vec<PathBuf>,
    /// Seconds a PASSporT's `iat` may be from now.
    pub max_age: u32,
    /// Refuse calls that fail (428, 436, 437, 438, 403 Stale Date)
    /// instead of passing them on marked `TN-Validation-Failed`.
    pub require: bool,
    /// Fetching certificates.
    pub fetch: FetchSettings,
}

/// The `[stir]` settings: either side, both, or neither.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StirSettings {
    /// Sign calls from authenticated users.
    pub sign: Option<SignSettings>,
    /// Verify calls that arrive from elsewhere.
    pub verify: Option<VerifySettings>,
}

impl StirSettings {
    /// Whether either side is on.
    pub fn on(&self) -> bool {
        self.sign.is_some() || self.verify.is_some()
    }
}

/// `[stir]` as written.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StirSection {
    /// The signing key (turns signing on, with `x5u`).
    pub key: Option<PathBuf>,
    /// The certificate's URL.
    pub x5u: Option<String>,
    /// Attestation: A, B or C.
    pub attest: Option<String>,
    /// Attestation per user.
    pub attest_users: Option<HashMap<String, String>>,
    /// Source addresses whose calls are signed as a trunk's.
    pub trunks: Option<Vec<String>>,
    /// Attestation of trunks' calls.
    pub trunk_attest: Option<String>,
    /// Trust anchors (turns verification on).
    pub trust_anchors: Option<PathBuf>,
    /// Revocation lists.
    pub crls: Option<Vec<PathBuf>>,
    /// `iat` freshness, seconds.
    pub max_age: Option<u32>,
    /// Refuse failed calls.
    pub require: Option<bool>,
    /// Seconds a fetch may take.
    pub fetch_timeout: Option<f64>,
    /// Bytes a certificate chain may have.
    pub fetch_max_bytes: Option<usize>,
    /// Redirects followed.
    pub fetch_max_redirects: Option<u8>,
    /// Allow certificates at private and loopback addresses.
    pub allow_private_x5u: Option<bool>,
    /// Roots for the repositories' HTTPS.
    pub fetch_roots: Option<PathBuf>,
    /// Seconds a certificate is kept without Cache-Control.
    pub cache_ttl: Option<u64>,
    /// Fetches at once.
    pub fetchers: Option<usize>,
}

fn attest(key: &'static str, s: &str) -> Result<char, (&'static str, String)> {
    match s {
        "A" | "B" | "C" => Ok(s.chars().next().unwrap_or('C')),
        _ => Err((key, format!("{s:?}: attestation is A, B or C"))),
    }
}

/// Applies `sec` to `s`; the key and what is wrong with it on error.
pub fn stir_settings(sec: StirSection, s: &mut StirSettings) -> Result<(), (&'static str, String)> {
    match (sec.key, sec.x5u) {
        (Some(key), Some(x5u)) => {
            if !x5u.starts_with("https://") && !x5u.starts_with("http://") {
                return Err(("stir.x5u", format!("{x5u:?}: an https:// URL")));
            }
            let mut users = HashMap::new();
            for (u, a) in sec.attest_users.unwrap_or_default() {
                users.insert(u, attest("stir.attest_users", &a)?);
            }
            let trunks = sec
                .trunks
                .unwrap_or_default()
                .iter()
                .map(|t| {
                    t.parse()
                        .map_err(|_| ("stir.trunks", format!("{t:?}: a trunk's IP address")))
                })
                .collect::<Result<_, _>>()?;
            s.sign = Some(SignSettings {
                key,
                x5u,
                attest: attest("stir.attest", sec.attest.as_deref().unwrap_or("A"))?,
                users,
                trunks,
                trunk_attest: attest(
                    "stir.trunk_attest",
                    sec.trunk_attest.as_deref().unwrap_or("C"),
                )?,
            });
        }
        (None, None) => {}
        (Some(_), None) => return Err(("stir.x5u", "signing needs the certificate's URL".into())),
        (None, Some(_)) => return Err(("stir.key", "signing needs the private key".into())),
    }
    let Some(trust_anchors) = sec.trust_anchors else {
        return Ok(());
    };
    let mut fetch = FetchSettings::default();
    if let Some(t) = sec.fetch_timeout {
        if !(0.05..=30.0).contains(&t) {
            return Err(("stir.fetch_timeout", format!("{t}: seconds in [0.05, 30]")));
        }
        fetch.timeout = Duration::from_secs_f64(t);
    }
    if let Some(n) = sec.fetch_max_bytes {
        if !(1024..=stir::cert::MAX_CHAIN).contains(&n) {
            return Err(("stir.fetch_max_bytes", format!("{n}: 1024 to 65536")));
        }
        fetch.max_bytes = n;
    }
    if let Some(n) = sec.fetch_max_redirects {
        fetch.max_redirects = n.min(5);
    }
    fetch.allow_private = sec.allow_private_x5u.unwrap_or(false);
    fetch.roots = sec.fetch_roots;
    if let Some(t) = sec.cache_ttl {
        fetch.default_ttl = Duration::from_secs(t.min(86_400));
    }
    if let Some(n) = sec.fetchers {
        if !(1..=64).contains(&n) {
            return Err(("stir.fetchers", format!("{n}: 1 to 64")));
        }
        fetch.fetchers = n;
    }
    let max_age = sec.max_age.unwrap_or(60);
    if !(1..=3600).contains(&max_age) {
        return Err(("stir.max_age", format!("{max_age}: seconds in [1, 3600]")));
    }
    s.verify = Some(VerifySettings {
        trust_anchors,
        crls: sec.crls.unwrap_or_default(),
        max_age,
        require: sec.require.unwrap_or(false),
        fetch,
    });
    Ok(())
}
