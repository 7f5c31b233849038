//! STIR/SHAKEN's shared state (`[stir]`): the signing key, the trust
//! anchors, the certificates fetched (`x5u`) with the requests parked on
//! them, and what came of each call, counted.
//!
//! A certificate not known yet is an external request: [`CertTable::lookup`]
//! queues its URL (the core asks its driver to wake the fetcher) and the
//! INVITE that needs it is [parked](CertTable::park) in a bounded
//! `proto::parked::Waiting`. The fetcher [finishes](CertTable::finish) the
//! URL with the certificate checked against the trust anchors (or why it
//! failed) and hands the parked requests in again; they then find it
//! here. Certificates are kept as long as the repository's Cache-Control
//! says (bounded), failures for a few seconds, so a broken repository
//! cannot draw a fetch per call.
//!
//! Any caller can name any `https://` URL, so one source (as the guard
//! counts it) may have at most [`MAX_FETCHES_PER_SOURCE`] URLs being
//! fetched, and never more than half the fetcher threads, and a
//! sixteenth of the requests waiting: one party naming repositories
//! that hang cannot leave every other caller's certificate unfetched.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sip_core::StatusCode;
use stir::{CertError, Signer, SigningKey, Trust};

use crate::config_stir::{SignSettings, VerifySettings};
use crate::proto::guard::SourceKey;
use crate::proto::parked::{make_room, Bounds, Parked, Refused, Waiting};
use crate::shards::Shards;

/// Certificates kept.
pub const MAX_CACHE: usize = 1024;
/// URLs one source may have being fetched at once (fewer with fewer than
/// eight fetcher threads: at most half of them).
pub const MAX_FETCHES_PER_SOURCE: usize = 4;
/// How many requests may wait for certificates.
const BOUNDS: Bounds = Bounds {
    questions: 64,
    per_question: 64,
    requests: 1024,
    bytes: 4 << 20,
    questions_per_source: MAX_FETCHES_PER_SOURCE,
    requests_per_source: 1024 / 16,
};

/// What the forwarded request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StirEdit {
    /// An `Identity` header (signed here).
    Identity(String),
    /// `verstat` on the caller's identity (verified here).
    Verstat(&'static str),
}

/// Why a certificate could not be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchFailure {
    /// Not an `https://` URL (or not a URL).
    NotHttps,
    /// The name leads to a loopback, private or link-local address.
    Private,
    /// No answer within the fetch's deadline.
    Timeout,
    /// Larger than allowed.
    TooLarge,
    /// More redirects than allowed.
    Redirects,
    /// An HTTP status other than 200, a connection or TLS failure.
    Unreachable,
}

impl FetchFailure {
    /// The word in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotHttps => "x5u_not_https",
            Self::Private => "x5u_private_address",
            Self::Timeout => "x5u_timeout",
            Self::TooLarge => "x5u_too_large",
            Self::Redirects => "x5u_redirects",
            Self::Unreachable => "x5u_unreachable",
        }
    }
}

/// What a URL gave.
#[derive(Debug, Clone)]
pub enum Cert {
    /// A certificate that chains to a trust anchor.
    Valid(Arc<Signer>),
    /// A certificate that does not.
    Invalid(CertError),
    /// No certificate.
    Failed(FetchFailure),
}

/// What the table knows of a URL.
#[derive(Debug, Clone)]
pub enum Lookup {
    /// Known.
    Known(Cert),
    /// Being fetched: a request can be parked on it.
    Fetching,
    /// Being fetched from this question on: wake the fetcher.
    Asked,
    /// Not known, and too many fetches under way.
    Busy,
}

#[derive(Debug)]
struct State {
    cache: HashMap<String, (Cert, Instant)>,
    pending: Waiting<String>,
    fresh: Vec<String>,
    closed: bool,
}

/// The certificates fetched and the requests waiting on them.
#[derive(Debug)]
pub struct CertTable {
    state: Shards<State>,
}

impl CertTable {
    /// An empty table for `fetchers` fetcher threads.
    pub fn new(fetchers: usize) -> Self {
        let bounds = Bounds {
            questions_per_source: (fetchers / 2).clamp(1, MAX_FETCHES_PER_SOURCE),
            ..BOUNDS
        };
        Self {
            state: Shards::new(1, || State {
                cache: HashMap::new(),
                pending: Waiting::new(bounds),
                fresh: Vec::new(),
                closed: false,
            }),
        }
    }

    /// What is known of `url` at `now`; an unknown one is queued, within
    /// the share of the source `asker` names (asked only then; `None`:
    /// one that carries many parties' requests, held to no share).
    pub fn lookup(
        &self,
        url: &str,
        now: Instant,
        asker: impl FnOnce() -> Option<SourceKey>,
    ) -> Lookup {
        let mut st = self.state.lock(0);
        if let Some((cert, until)) = st.cache.get(url) {
            if *until > now {
                return Lookup::Known(cert.clone());
            }
        }
        if st.pending.asked(&url.to_string()) {
            return Lookup::Fetching;
        }
        if st.closed || !st.pending.ask(url.to_string(), asker()) {
            return Lookup::Busy;
        }
        st.fresh.push(url.to_string());
        Lookup::Asked
    }

    /// Parks `request` of `parker` (its source, or `None`) until `url` is
    /// fetched; `Err` with what is known when the fetch ended meanwhile,
    /// or `None` when there is no room.
    pub fn park(
        &self,
        url: &str,
        request: Parked,
        parker: Option<SourceKey>,
    ) -> Result<(), Option<Cert>> {
        let mut st = self.state.lock(0);
        match st.pending.park(&url.to_string(), request, parker) {
            Ok(()) => Ok(()),
            Err(Refused::Full) => Err(None),
            Err(Refused::NotAsked) => Err(st.cache.get(url).map(|(c, _)| c.clone())),
        }
    }

    /// The URLs queued since the last call.
    pub fn take_asked(&self) -> Vec<String> {
        std::mem::take(&mut self.state.lock(0).fresh)
    }

    /// Records what `url` gave, kept for `ttl`, and takes the requests
    /// waiting on it.
    pub fn finish(&self, url: &str, cert: Cert, ttl: Duration, now: Instant) -> Vec<Parked> {
        let mut st = self.state.lock(0);
        make_room(&mut st.cache, MAX_CACHE, now, |c| {
            !matches!(c, Cert::Valid(_))
        });
        st.cache.insert(url.to_string(), (cert, now + ttl));
        st.pending.answered(&url.to_string())
    }

    /// The fetcher stops: the requests still waiting (to be answered).
    pub fn close(&self) -> Vec<Parked> {
        let mut st = self.state.lock(0);
        st.closed = true;
        st.fresh.clear();
        st.pending.drain()
    }

    /// Certificates kept, and requests waiting.
    pub fn sizes(&self) -> (usize, usize) {
        let st = self.state.lock(0);
        (st.cache.len(), st.pending.totals().0)
    }
}

/// The signing side, loaded.
#[derive(Debug)]
pub struct Signing {
    /// The key.
    pub key: SigningKey,
    /// What it was configured with.
    pub settings: SignSettings,
}

/// The verifying side, loaded.
#[derive(Debug)]
pub struct Verifying {
    /// Anchors and CRLs.
    pub trust: Trust,
    /// What it was configured with.
    pub settings: VerifySettings,
    /// Certificates fetched.
    pub certs: CertTable,
}

/// Why a call did not pass verification, each counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// No (SHAKEN) Identity header.
    NoIdentity,
    /// An Identity header or PASSporT that cannot be read or is not SHAKEN.
    Malformed,
    /// `iat` too far from now.
    Stale,
    /// `orig` or `dest` are not the request's numbers, or `x5u` not `info`.
    Mismatch,
    /// The signature is not the certificate's key's.
    BadSignature,
    /// The certificate does not chain to a trust anchor (or is not STI).
    Untrusted,
    /// The certificate is expired or not valid yet.
    Expired,
    /// The certificate is revoked.
    Revoked,
    /// The certificate's TNAuthList does not cover `orig`.
    NotCovered,
    /// The certificate could not be fetched.
    Fetch(FetchFailure),
    /// Too many certificates being fetched to wait for this one.
    Busy,
}

/// Every [`Why`], in the order counted.
pub const WHYS: [Why; 16] = [
    Why::NoIdentity,
    Why::Malformed,
    Why::Stale,
    Why::Mismatch,
    Why::BadSignature,
    Why::Untrusted,
    Why::Expired,
    Why::Revoked,
    Why::NotCovered,
    Why::Fetch(FetchFailure::NotHttps),
    Why::Fetch(FetchFailure::Private),
    Why::Fetch(FetchFailure::Timeout),
    Why::Fetch(FetchFailure::TooLarge),
    Why::Fetch(FetchFailure::Redirects),
    Why::Fetch(FetchFailure::Unreachable),
    Why::Busy,
];

impl Why {
    /// The word in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoIdentity => "no_identity",
            Self::Malformed => "malformed",
            Self::Stale => "stale",
            Self::Mismatch => "mismatch",
            Self::BadSignature => "bad_signature",
            Self::Untrusted => "untrusted",
            Self::Expired => "expired",
            Self::Revoked => "revoked",
            Self::NotCovered => "not_covered",
            Self::Fetch(f) => f.as_str(),
            Self::Busy => "busy",
        }
    }

    fn index(self) -> usize {
        WHYS.iter().position(|w| *w == self).unwrap_or(0)
    }

    /// What the request is refused with under `require` (RFC 8224
    /// §6.2.2; a stale `iat` is 403 "Stale Date", §6.2.1).
    pub fn refusal(self) -> StatusCode {
        match self {
            Self::NoIdentity => StatusCode::USE_IDENTITY_HEADER,
            Self::Malformed | Self::Mismatch | Self::BadSignature => {
                StatusCode::INVALID_IDENTITY_HEADER
            }
            Self::Stale => StatusCode::FORBIDDEN,
            Self::Untrusted | Self::Expired | Self::Revoked | Self::NotCovered => {
                StatusCode::UNSUPPORTED_CREDENTIAL
            }
            Self::Fetch(_) => StatusCode::BAD_IDENTITY_INFO,
            Self::Busy => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The `verstat` a call passed on with this failure gets.
    pub fn verstat(self) -> &'static str {
        match self {
            Self::NoIdentity | Self::Busy => "No-TN-Validation",
            _ => "TN-Validation-Failed",
        }
    }

    /// A certificate's failure as a reason.
    pub fn of_cert(e: &CertError) -> Self {
        match e {
            CertError::Expired(_) => Self::Expired,
            CertError::Revoked => Self::Revoked,
            CertError::Malformed(_) | CertError::Untrusted(_) | CertError::NotSti(_) => {
                Self::Untrusted
            }
        }
    }
}

/// What came of calls, counted.
#[derive(Debug, Default)]
pub struct StirCounts {
    /// Calls signed.
    pub signed: AtomicU64,
    /// Calls from authenticated users left unsigned: a party is not a
    /// telephone number.
    pub unsigned_not_tn: AtomicU64,
    /// Calls that passed verification.
    pub passed: AtomicU64,
    /// Calls that failed, by why.
    failed: [AtomicU64; WHYS.len()],
    /// Calls refused (under `require`).
    pub refused: AtomicU64,
    /// Certificates fetched, and fetches that failed.
    pub fetched: AtomicU64,
    /// Fetches that failed.
    pub fetch_failed: AtomicU64,
}

impl StirCounts {
    /// Counts a failure.
    pub fn failed(&self, why: Why) {
        self.failed[why.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Failures of `why` so far.
    pub fn failures(&self, why: Why) -> u64 {
        self.failed[why.index()].load(Ordering::Relaxed)
    }
}

/// `[stir]`, loaded: what the cores read and the fetcher fills.
#[derive(Debug)]
pub struct Stir {
    /// Signing, when on.
    pub sign: Option<Signing>,
    /// Verification, when on.
    pub verify: Option<Verifying>,
    /// Outcomes.
    pub counts: StirCounts,
}

impl Stir {
    /// The Prometheus text of the outcomes.
    pub fn render(&self, o: &mut String) {
        use std::fmt::Write;
        let c = &self.counts;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let _ = writeln!(
            o,
            "# HELP sipsec_stir_signed_total Calls signed with a SHAKEN PASSporT (RFC 8588).\n\
# TYPE sipsec_stir_signed_total counter\n\
sipsec_stir_signed_total {}\n\
# HELP sipsec_stir_unsigned_total Calls from authenticated users left unsigned, by why.\n\
# TYPE sipsec_stir_unsigned_total counter\n\
sipsec_stir_unsigned_total{{why=\"not_a_number\"}} {}\n\
# HELP sipsec_stir_verified_total Calls verified (RFC 8224 §6.2), by outcome.\n\
# TYPE sipsec_stir_verified_total counter\n\
sipsec_stir_verified_total{{outcome=\"passed\"}} {}",
            load(&c.signed),
            load(&c.unsigned_not_tn),
            load(&c.passed),
        );
        for w in WHYS {
            let _ = writeln!(
                o,
                "sipsec_stir_verified_total{{outcome=\"{}\"}} {}",
                w.as_str(),
                c.failures(w)
            );
        }
        let (certs, parked) = self.verify.as_ref().map_or((0, 0), |v| v.certs.sizes());
        let _ = writeln!(
            o,
            "# HELP sipsec_stir_refused_total Calls refused for failing verification (require).\n\
# TYPE sipsec_stir_refused_total counter\n\
sipsec_stir_refused_total {}\n\
# HELP sipsec_stir_fetches_total Signers' certificates fetched (x5u), by result.\n\
# TYPE sipsec_stir_fetches_total counter\n\
sipsec_stir_fetches_total{{result=\"ok\"}} {}\n\
sipsec_stir_fetches_total{{result=\"failed\"}} {}\n\
# HELP sipsec_stir_certificates Signers' certificates (and failures) cached.\n\
# TYPE sipsec_stir_certificates gauge\n\
sipsec_stir_certificates {certs}\n\
# HELP sipsec_stir_parked Requests waiting for a certificate.\n\
# TYPE sipsec_stir_parked gauge\n\
sipsec_stir_parked {parked}",
            load(&c.refused),
            load(&c.fetched),
            load(&c.fetch_failed),
        );
    }

    /// `/status`'s `stir`.
    pub fn status(&self) -> serde_json::Value {
        let c = &self.counts;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut failed = serde_json::Map::new();
        for w in WHYS {
            failed.insert(w.as_str().into(), c.failures(w).into());
        }
        serde_json::json!({
            "sign": self.sign.as_ref().map(|s| serde_json::json!({
                "x5u": s.settings.x5u,
                "attest": s.settings.attest.to_string(),
            })),
            "verify": self.verify.as_ref().map(|v| serde_json::json!({
                "require": v.settings.require,
                "max_age": v.settings.max_age,
                "certificates": v.certs.sizes().0,
                "parked": v.certs.sizes().1,
            })),
            "signed": load(&c.signed),
            "unsigned_not_a_number": load(&c.unsigned_not_tn),
            "passed": load(&c.passed),
            "failed": failed,
            "refused": load(&c.refused),
            "fetched": load(&c.fetched),
            "fetch_failed": load(&c.fetch_failed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sip_core::Transport;

    fn parked() -> Parked {
        Parked {
            message: b"INVITE".to_vec(),
            src: "192.0.2.1:5060".parse().unwrap(),
            arrived: Transport::Udp,
        }
    }

    /// Asks `n` fresh URLs for `source`: how many were queued.
    fn asked(t: &CertTable, source: Option<SourceKey>, prefix: &str, n: usize) -> usize {
        let now = Instant::now();
        (0..n)
            .filter(|i| {
                let url = format!("https://{prefix}.example/{i}.pem");
                matches!(t.lookup(&url, now, || source), Lookup::Asked)
            })
            .count()
    }

    #[test]
    fn a_source_has_at_most_half_the_fetchers_busy_and_a_sixteenth_of_the_waiting() {
        let key = |ip: &str| Some(SourceKey::of(ip.parse().unwrap(), 64));
        let (a, b) = (key("192.0.2.1"), key("192.0.2.2"));
        for (fetchers, share) in [(1, 1), (4, 2), (8, 4), (64, 4)] {
            let t = CertTable::new(fetchers);
            assert_eq!(asked(&t, a, "a", 10), share, "{fetchers} fetchers");
            assert_eq!(asked(&t, b, "b", 1), 1, "another source");
            assert_eq!(asked(&t, None, "n", 10), 10, "a carrier has no share");
        }
        let t = CertTable::new(4);
        let now = Instant::now();
        let urls = ["https://b.example/0.pem", "https://b.example/1.pem"];
        for url in urls {
            assert!(matches!(t.lookup(url, now, || b), Lookup::Asked));
        }
        // A URL under way is not asked again, whoever names it.
        assert!(matches!(t.lookup(urls[0], now, || a), Lookup::Fetching));
        for i in 0..BOUNDS.requests_per_source {
            assert!(t.park(urls[i % 2], parked(), a).is_ok());
        }
        assert!(
            matches!(t.park(urls[0], parked(), a), Err(None)),
            "a's share"
        );
        assert!(t.park(urls[0], parked(), b).is_ok());
        let fetched = Cert::Failed(FetchFailure::Timeout);
        let back = t.finish(urls[0], fetched, Duration::from_secs(1), now);
        assert_eq!(back.len(), BOUNDS.requests_per_source / 2 + 1);
        assert!(
            t.park(urls[1], parked(), a).is_ok(),
            "a's share is free again"
        );
        let url = urls[0];
        assert!(t.park(url, parked(), a).is_err(), "answered meanwhile");
    }
}
