//! What every worker shares: the configuration, the tables (location,
//! transactions, names, sources), the keys this server writes with, and
//! the time a message is handled ([`Now`]).

use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::config::{Config, Mode};
use crate::proto::auth::Authenticator;
use crate::proto::branch::Key;
use crate::proto::effects::Sends;
use crate::proto::flows::OpenFlows;
use crate::proto::guard::Guard;
use crate::proto::location::MemoryLocation;
use crate::proto::metrics::Metrics;
use crate::proto::names::NameTable;
use crate::proto::privacy::Privacy;
use crate::proto::stateful::Transactions;
pub use sip_core::Transport;

/// When a message is handled, read once by the driver that received it:
/// the core itself reads no clock, so a simulation can run it on virtual
/// time.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    /// Wall-clock time, Unix milliseconds (nonces, expiry, bans).
    pub unix_ms: u64,
    /// Monotonic time (transaction timers).
    pub mono: Instant,
}

impl Now {
    /// Unix seconds.
    pub fn secs(&self) -> u64 {
        self.unix_ms / 1000
    }
}

/// State shared by every worker.
#[derive(Debug)]
pub struct Shared {
    /// The configuration.
    pub config: Config,
    /// The location service.
    pub location: Arc<MemoryLocation>,
    /// Present when authentication is on.
    pub auth: Option<Authenticator>,
    /// Counters and stage timings.
    pub metrics: Metrics,
    /// When the server started (Unix seconds).
    pub started: u64,
    /// When this state was made (the origin of monotonic time before the
    /// first message).
    pub created: Instant,
    /// Per-source rate limit and fail-ban.
    pub guard: Guard,
    /// The proxy's transactions, when it is transaction-stateful.
    pub transactions: Option<Transactions>,
    /// PrivaSIP keys, when configured.
    pub privacy: Option<Privacy>,
    /// The clock for sampled stage timings (instrumentation, never a
    /// protocol decision); `None` turns them off (simulations).
    pub stage_clock: Option<fn() -> Instant>,
    /// The server is stopping: requests that would start something new
    /// are answered 503 with Retry-After, so phones turn to another
    /// server, while transactions and dialogs under way finish.
    pub draining: std::sync::atomic::AtomicBool,
    /// Since when (Unix seconds) this node's copy of a shared location has
    /// not followed it (the store unreachable); 0 while it follows.
    pub location_stale_since: AtomicU64,
    /// Where domain names lead: read by the core, filled by the driver's
    /// resolver, which the core's [`Sends::wake`] wakes.
    pub names: Arc<NameTable>,
    /// Which connections are open: kept by the connection layer, read
    /// by the core.
    pub flows: OpenFlows,
    /// Calls' media through relays (`[media]` on, stateful proxy): read
    /// and asked by the core, served by the driver's media thread, which
    /// the core's [`Sends::wake`] wakes.
    pub media: Option<crate::proto::media::MediaTable>,
    /// STIR/SHAKEN (`[stir]`), loaded by the driver (keys, anchors):
    /// read by the core, its certificates fetched by the driver's
    /// fetcher, which the core's [`Sends::wake`] wakes.
    pub stir: Option<crate::proto::stir::Stir>,
    /// Trunks calls leave through (`[[trunk]]`): read by the core, their
    /// gateways' health reported by the driver's probes.
    pub trunks: crate::proto::trunks::Trunks,
    /// The INVITE dialogs a stateful proxy follows, for call records.
    pub dialogs: Option<crate::proto::dialogs::Dialogs>,
    /// This proxy's own requests (the operator's BYEs) until answered.
    pub originated: crate::proto::originated::Originated,
    /// Seals what topology hiding hides, when a trunk hides it.
    pub hider: Option<crate::proto::topology::Hider>,
    pub(super) branch_salt: RandomState,
    /// Keys the flow tokens this proxy writes into Record-Route.
    pub(super) flow_key: Secret,
    /// Keys the tags in this proxy's branches that prove a response
    /// answers a request it forwarded (RFC 3261 §16.11).
    pub(super) branch_key: Secret,
    /// Keys the proof in this proxy's Record-Route of where a dialog's
    /// requests may go (`tokens::hops_proof`). Drawn at start; the server
    /// sets the one kept in its data directory, so dialogs outlive a
    /// restart.
    pub route_key: Secret,
    /// Journal bytes the registrar may still write now.
    pub(super) journal_budget: crate::proto::budget::ByteBudget,
}

/// 256 secret bits, which `Debug` does not show (`Shared` is `Debug`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Secret(pub [u8; 32]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// 256 bits for `label`, drawn from the salt's random keys.
fn derive_key(salt: &RandomState, label: &[u8]) -> [u8; 32] {
    let mut key = [0u8; 32];
    for (i, chunk) in key.chunks_mut(8).enumerate() {
        let mut h = salt.build_hasher();
        h.write(label);
        h.write_usize(i);
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    key
}

impl Shared {
    /// A request this proxy forwarded as `key`'s try `tries` could not
    /// be sent (the connection failed, or the peer's answer would not fit):
    /// its transaction tries the next address of its name or answers 503
    /// (RFC 3261 §16.9), into `sends`. The transport layer's door into
    /// the transaction table.
    pub fn transport_failed(&self, key: Key, tries: u8, now: Instant, sends: &mut Sends) {
        if let Some(tx) = &self.transactions {
            tx.on_transport_error(key, tries, now, sends, &self.metrics);
        }
    }

    /// An ICMP error quoting `quoted` arrived: the transaction whose
    /// request it quotes (by this proxy's branch) fails as if its send
    /// failed (RFC 3261 §18.4).
    pub fn unreachable(&self, quoted: &[u8], now: Instant, sends: &mut Sends) {
        self.metrics.udp_unreachable.fetch_add(1, Ordering::Relaxed);
        if let Some((key, tries)) = Key::of_quoted(quoted) {
            self.transport_failed(key, tries, now, sends);
        }
    }

    /// Bundles the shared state; `now` is the start time, `salt` (from
    /// the driver's randomness) keys the branches and tags this server
    /// writes and the guard's table.
    pub fn new(
        config: Config,
        location: Arc<MemoryLocation>,
        auth: Option<Authenticator>,
        now: Now,
        salt: RandomState,
    ) -> Self {
        let guard = Guard::new(config.guard.clone(), salt.clone());
        let flow_key = Secret(derive_key(&salt, b"sipsec flow token key"));
        let branch_key = Secret(derive_key(&salt, b"sipsec branch tag key"));
        let route_key = Secret(derive_key(&salt, b"sipsec dialog route key"));
        let names = Arc::new(NameTable::new(&config.dns));
        let trunks = crate::proto::trunks::Trunks::new(&config.trunks, &names);
        let hides =
            config.trunks.iter().any(|t| t.hide_topology) || !config.hide_topology_peers.is_empty();
        let hider = hides.then(|| {
            crate::proto::topology::Hider::new(
                derive_key(&salt, b"sipsec topology hiding aead key"),
                derive_key(&salt, b"sipsec topology hiding nonce key"),
            )
        });
        let dialogs =
            // Followed for their records, for the CSeq offsets of trunks
            // that challenge, or to hold each caller to its share of
            // the calls the media relays carry.
            (config.stateful
                && config.mode == Mode::Proxy
                && (config.calls.records
                    || config.media.on()
                    || config.trunks.iter().any(|t| t.auth.is_some())))
            .then(|| {
                crate::proto::dialogs::Dialogs::new(
                    config.calls.max_dialogs,
                    config.calls.per_caller(),
                    config.calls.max_duration,
                    salt.clone(),
                )
            });
        let streams = config.tcp.is_some()
            || config.tls.is_some()
            || config.websocket.ws.is_some()
            || config.websocket.wss.is_some();
        let flows = OpenFlows::new(streams, salt.clone());
        let timers = config.timers;
        let transactions = (config.stateful && config.mode == Mode::Proxy).then(|| {
            Transactions::new(timers, config.max_transaction_bytes)
                .with_failover_after(config.dns.failover_after)
                .with_names(names.clone())
                .with_credentials(crate::proto::trunk_auth::Credentials::of(
                    &config.trunks,
                    salt.clone(),
                ))
        });
        let media = (transactions.is_some() && config.media.on())
            .then(|| crate::proto::media::MediaTable::new(&config.media));
        Self {
            config,
            location,
            auth,
            metrics: Metrics::default(),
            started: now.secs(),
            created: now.mono,
            guard,
            transactions,
            privacy: None,
            stage_clock: None,
            draining: std::sync::atomic::AtomicBool::new(false),
            location_stale_since: AtomicU64::new(0),
            names,
            flows,
            media,
            stir: None,
            trunks,
            dialogs,
            hider,
            originated: crate::proto::originated::Originated::new(timers),
            branch_salt: salt,
            flow_key,
            branch_key,
            route_key,
            journal_budget: crate::proto::budget::ByteBudget::new(now.mono),
        }
    }
}
