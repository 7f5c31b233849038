//! The configuration file (`sipsec.toml`): its tables as read, and how
//! each one changes a [`Config`]. Every key is optional; absent keys keep
//! their defaults, unknown keys are errors.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::*;

use crate::config_dns::{dns_settings, DnsSection};

/// `sipsec.toml`: every key optional; absent keys keep their defaults.
/// Unknown keys are errors, so a typo never silently falls back.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `registrar`, `proxy` or `redirect`.
    pub mode: Option<String>,
    /// UDP address.
    pub udp: Option<SocketAddr>,
    /// TCP address, or `false` (as `--no-tcp`; `"off"` too).
    pub tcp: Option<Listen>,
    /// Operator endpoint address, or `false` (as `--no-http`; `"off"` too).
    pub http: Option<Listen>,
    /// Address for Via and for recognising this server.
    pub advertise: Option<SocketAddr>,
    /// Host names that mean this server.
    pub domains: Option<Vec<String>>,
    /// Record-route dialog-creating requests (proxy mode).
    pub record_route: Option<bool>,
    /// Transaction-stateful proxy.
    pub stateful: Option<bool>,
    /// `off`, `parallel` or `by-q`.
    pub forking: Option<String>,
    /// Memory bound of the stateful proxy's transactions, bytes.
    pub max_transaction_bytes: Option<u64>,
    /// Worker threads; 0 means one per core.
    pub workers: Option<usize>,
    /// `spread`, `shared` or `flow`.
    pub udp_balance: Option<String>,
    pub udp_xdp: Option<String>,
    /// Microseconds a busy transport thread may wait between reads.
    pub batch_wait_us: Option<u64>,
    /// Location store directory.
    pub data_dir: Option<PathBuf>,
    /// `true`: fsync every location change (as `--fsync`).
    pub fsync: Option<bool>,
    /// `process` or `fsync`: the older spelling of `fsync`.
    pub durability: Option<String>,
    /// Journal bytes that trigger an online compaction.
    pub journal_compact_bytes: Option<u64>,
    /// Seconds to let transactions finish on SIGTERM.
    pub drain_timeout: Option<u64>,
    /// `[auth]` table.
    pub auth: Option<AuthSection>,
    /// `[registrar]` table.
    pub registrar: Option<RegistrarSection>,
    /// `[guard]` table.
    pub guard: Option<GuardSection>,
    /// `[tls]` table.
    pub tls: Option<TlsSection>,
    /// `[privacy]` table.
    pub privacy: Option<crate::config_privacy::PrivacySection>,
    /// `[peers]` table: domain = "address".
    pub peers: Option<std::collections::BTreeMap<String, SocketAddr>>,
    /// Peer domains the inside network is hidden from.
    pub hide_topology_peers: Option<Vec<String>>,
    /// `[connections]` table.
    pub connections: Option<ConnectionsSection>,
    /// SIP over WebSocket.
    pub websocket: Option<WebSocketSection>,
    /// `[location]` table.
    pub location: Option<LocationSection>,
    /// `[trace]` table.
    pub trace: Option<TraceSection>,
    /// A token the operator endpoint requires.
    pub http_token: Option<String>,
    /// `[dns]` table.
    pub dns: Option<DnsSection>,
    /// `[media]` table.
    pub media: Option<crate::config_media::MediaSection>,
    /// `[stir]` table.
    pub stir: Option<crate::config_stir::StirSection>,
    /// `[[trunk]]` tables.
    pub trunk: Option<Vec<crate::config_trunks::TrunkSection>>,
    /// `[calls]` table.
    pub calls: Option<crate::config_calls::CallsSection>,
    /// `[timers]` table.
    pub timers: Option<crate::config_timers::TimersSection>,
}

/// `[trace]`: HEP tracing to a Homer collector.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceSection {
    /// `udp:HOST:PORT`.
    pub hep: Option<String>,
    /// Capture agent ID.
    pub capture_id: Option<u32>,
    /// Authentication key for the collector.
    pub password: Option<String>,
    /// Fraction of calls traced, in (0, 1].
    pub sample: Option<f64>,
    /// Methods traced; empty or absent: all.
    pub methods: Option<Vec<String>>,
}

/// `[location]`: where bindings are kept.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocationSection {
    /// `embedded` (journal in `data_dir`) or `redis`.
    pub backend: Option<String>,
    /// Redis URL (`redis://…`, `rediss://…` or `redis+unix:///…`).
    pub url: Option<String>,
    /// Key and channel prefix.
    pub prefix: Option<String>,
    /// Seconds a Redis command may take.
    pub timeout: Option<f64>,
    /// Retry-After seconds of the 503 sent while Redis is unreachable.
    pub retry_after: Option<u32>,
    /// Seconds calls are still routed from the copy in memory while Redis
    /// is unreachable (no limit when absent).
    pub max_stale: Option<u32>,
    /// CA certificates (PEM) for a `rediss://` server.
    pub ca: Option<PathBuf>,
    /// Client certificate chain (PEM) for a `rediss://` server.
    pub cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    pub key: Option<PathBuf>,
}

/// `[websocket]`: SIP over WebSocket listeners for browser phones.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSocketSection {
    /// `ws:` address, or `"off"`.
    pub ws: Option<String>,
    /// `wss:` address (needs `[tls]`), or `"off"`.
    pub wss: Option<String>,
    /// Origins allowed to connect (empty: any).
    pub origins: Option<Vec<String>>,
    /// Longest message, bytes.
    pub max_message: Option<usize>,
}

/// `[connections]`: limits and deadlines of TCP and TLS connections.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionsSection {
    /// Most open connections (0: from the file-descriptor limit).
    pub max: Option<usize>,
    /// Most connections per source IP (0: no limit).
    pub per_ip: Option<usize>,
    /// Source IPs exempt from the per-IP limit.
    pub per_ip_exempt: Option<Vec<std::net::IpAddr>>,
    /// Bytes queued per connection before it is closed as a slow reader.
    pub queue_bytes: Option<usize>,
    /// Seconds a TLS handshake may take from the connection's start.
    pub handshake_timeout: Option<f64>,
    /// Seconds a SIP message may take from its first byte.
    pub message_timeout: Option<f64>,
    /// Seconds without a byte before a connection is closed.
    pub idle_timeout: Option<f64>,
    /// Seconds an outbound connect may take.
    pub connect_timeout: Option<f64>,
    /// Seconds the peer may take to accept bytes sent to it.
    pub send_timeout: Option<f64>,
    /// Reactor threads (0: one per core, at most 4).
    pub reactors: Option<usize>,
    /// Messages a second on one connection past which every reactor
    /// decides its messages (0: never).
    pub spread_above: Option<u32>,
    /// Hand a busy connection's messages on even while its reactor keeps
    /// up (default: only while it is behind).
    pub spread_always: Option<bool>,
    /// Messages handed to one reactor and not yet decided, at most.
    pub spread_queue: Option<usize>,
    /// Accepts per reactor turn.
    pub accept_burst: Option<usize>,
    /// New connections per second (0: no limit).
    pub accept_rate: Option<u32>,
    /// New connections per second from one source IP (0: no limit).
    pub accept_rate_per_ip: Option<u32>,
    /// Seconds a connection may take to send its first SIP message.
    pub first_message_timeout: Option<f64>,
    /// Keep-alives (CRLF, WebSocket pings) per second per connection.
    pub keepalive_rate: Option<u32>,
}

/// `[tls]`: SIP over TLS. `cert` and `key` turn it on.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// Listening address (default: the UDP address's IP and the next
    /// port, 5061 beside 5060).
    pub addr: Option<SocketAddr>,
    /// Certificate chain, PEM.
    pub cert: Option<PathBuf>,
    /// Private key, PEM (RSA of any variant, ECDSA, Ed25519).
    pub key: Option<PathBuf>,
    /// CA bundle; when set, clients must present a certificate it signed.
    pub client_ca: Option<PathBuf>,
    /// CA bundle trusted for outbound TLS (default: the system's).
    pub peer_ca: Option<PathBuf>,
    /// Accept peers' 1024-bit RSA keys (legacy; off by default).
    pub allow_rsa_1024: Option<bool>,
    /// Key-exchange groups in order of preference.
    pub groups: Option<Vec<String>>,
    /// Only post-quantum key exchange.
    pub require_pq: Option<bool>,
    /// Resume sessions from stateless tickets (default true).
    pub session_tickets: Option<bool>,
}

/// `[guard]`: per-source rate limit and fail-ban.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardSection {
    /// Requests per second per source IP (0: no limit).
    pub rate: Option<u32>,
    /// Burst above the rate.
    pub burst: Option<u32>,
    /// Auth failures within the window that ban a source (0: no bans).
    pub max_auth_failures: Option<u32>,
    /// Failure window, seconds.
    pub failure_window: Option<u64>,
    /// Ban length, seconds.
    pub ban_seconds: Option<u64>,
    /// Exempt loopback sources from the rate limit (bans still apply).
    pub exempt_loopback: Option<bool>,
    /// Leading bits of an IPv6 address that name one source.
    pub ipv6_prefix: Option<u8>,
    /// Private-key decryptions a second per source (0: no limit).
    pub decryption_rate: Option<u32>,
}

/// `[auth]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// Require digest authentication.
    pub enabled: Option<bool>,
    /// Realm.
    pub realm: Option<String>,
    /// Users file.
    pub users: Option<PathBuf>,
    /// Algorithms challenged, in order: `sha-256`, `md5`, `sha-512-256`.
    pub digest: Option<Vec<String>>,
    /// Nonce lifetime, seconds.
    pub nonce_ttl: Option<u64>,
    /// Most nonces tracked for replay protection.
    pub max_tracked_nonces: Option<usize>,
    /// Most tracked nonces one username may hold.
    pub max_nonces_per_user: Option<usize>,
    /// Most tracked nonces one source address may hold.
    pub max_nonces_per_source: Option<usize>,
    /// Serve beyond loopback without authentication (an open registrar).
    pub insecure_no_auth: Option<bool>,
}

/// `[registrar]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrarSection {
    /// Shortest registration accepted.
    pub min_expires: Option<u32>,
    /// Longest registration granted.
    pub max_expires: Option<u32>,
    /// Registration time when none is asked.
    pub default_expires: Option<u32>,
    /// Path (RFC 3327): `off`, `lazy` or `strict`.
    pub path: Option<String>,
    /// Most contacts per address-of-record.
    pub max_contacts: Option<usize>,
    /// `reject` (403) or `replace-oldest`.
    pub max_contacts_policy: Option<String>,
    /// Most bindings in all.
    pub max_bindings: Option<usize>,
    /// Longest contact URI, bytes.
    pub max_contact_len: Option<usize>,
    /// Journal bytes per second, on average.
    pub journal_rate: Option<u64>,
    /// Journal bytes at once above the rate.
    pub journal_burst: Option<u64>,
}

fn location_settings(
    l: LocationSection,
    current: Option<RedisSettings>,
) -> Result<Option<RedisSettings>, (&'static str, String)> {
    let backend = l.backend.as_deref().unwrap_or(match current {
        Some(_) => "redis",
        None => "embedded",
    });
    match backend {
        "embedded" => {
            if l.url.is_some() {
                return Err((
                    "location.url",
                    "set backend = \"redis\" to use a Redis server".into(),
                ));
            }
            if l.max_stale.is_some() {
                return Err((
                    "location.max_stale",
                    "only a shared (redis) location can go stale".into(),
                ));
            }
            Ok(None)
        }
        "redis" => {
            let url = l
                .url
                .or(current.as_ref().map(|c| c.url.clone()))
                .ok_or(("location.url", "the redis backend needs a url".into()))?;
            check_redis_url(&url).map_err(|m| ("location.url", m))?;
            let mut r = current.unwrap_or_else(|| RedisSettings::new(url.clone()));
            r.url = url;
            if let Some(p) = l.prefix {
                if p.is_empty() || p.contains(char::is_whitespace) {
                    return Err((
                        "location.prefix",
                        format!("{p:?}: not empty, no white space"),
                    ));
                }
                r.prefix = p;
            }
            if let Some(t) = l.timeout {
                if !(t.is_finite() && t > 0.0 && t <= 60.0) {
                    return Err(("location.timeout", format!("{t}: seconds in (0, 60]")));
                }
                r.timeout = Duration::from_secs_f64(t);
            }
            if let Some(s) = l.retry_after {
                r.retry_after = s;
            }
            if let Some(s) = l.max_stale {
                if s == 0 {
                    return Err((
                        "location.max_stale",
                        "0: at least 1 second (leave it out for no limit)".into(),
                    ));
                }
                r.max_stale = Some(s);
            }
            if let Some(ca) = l.ca {
                r.ca = Some(ca);
            }
            match (l.cert, l.key) {
                (Some(c), Some(k)) => r.client_cert = Some((c, k)),
                (None, None) => {}
                _ => return Err(("location.cert", "give both cert and key, or neither".into())),
            }
            if (r.ca.is_some() || r.client_cert.is_some()) && !r.url.starts_with("rediss://") {
                return Err((
                    "location.ca",
                    "TLS files need a rediss:// url (redis:// is plain TCP)".into(),
                ));
            }
            Ok(Some(r))
        }
        other => Err((
            "location.backend",
            format!("{other:?}: use embedded or redis"),
        )),
    }
}

/// Sets `field` from a key given in the file that must be at least 1.
fn positive<T: Copy + PartialEq + From<u8>>(
    key: &'static str,
    given: Option<T>,
    field: &mut T,
) -> Result<(), (&'static str, String)> {
    match given {
        Some(n) if n == T::from(0) => Err((key, "must be at least 1".into())),
        Some(n) => {
            *field = n;
            Ok(())
        }
        None => Ok(()),
    }
}

impl Config {
    /// Applies a configuration file's text over `self`.
    pub fn apply_toml(&mut self, text: &str, path: &str) -> Result<(), ConfigError> {
        // The parser's message is several lines: where, the line with a
        // caret under the fault, and what was expected. Kept as it is.
        let f: FileConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            msg: e.to_string().trim_end().to_owned(),
        })?;
        let value = |key, msg: String| ConfigError::Value {
            path: path.to_owned(),
            key,
            msg,
        };
        if let Some(m) = f.mode {
            self.mode = Mode::parse(&m)
                .ok_or_else(|| value("mode", format!("{m:?}: use registrar, proxy or redirect")))?;
        }
        self.apply_listen(f.udp, f.tcp, f.http, f.advertise, &value)?;
        if let Some(d) = f.domains {
            self.domains = d;
        }
        if let Some(r) = f.record_route {
            self.record_route = r;
        }
        if let Some(st) = f.stateful {
            self.stateful = st;
        }
        if let Some(b) = f.udp_balance {
            let hint = || value("udp_balance", format!("{b:?}: use {}", UdpBalance::CHOICES));
            self.udp_balance = UdpBalance::parse(&b).ok_or_else(hint)?;
        }
        if let Some(i) = f.udp_xdp {
            self.udp_xdp = Some(interface_name(&i).map_err(|e| value("udp_xdp", e))?);
        }
        if let Some(us) = f.batch_wait_us {
            self.batch_wait = batch_wait(us).map_err(|e| value("batch_wait_us", e))?;
        }
        if let Some(k) = f.forking {
            self.forking = Forking::parse(&k)
                .ok_or_else(|| value("forking", format!("{k:?}: use off, parallel or by-q")))?;
        }
        if let Some(b) = f.max_transaction_bytes {
            self.max_transaction_bytes = b;
        }
        if let Some(w) = f.workers {
            if w > 0 {
                self.workers = w;
            }
        }
        self.apply_storage(f.data_dir, f.fsync, f.durability, &value)?;
        if let Some(d) = f.drain_timeout {
            self.drain_timeout = d;
        }
        if let Some(b) = f.journal_compact_bytes {
            self.journal_compact_bytes = b;
        }
        if let Some(a) = f.auth {
            self.apply_auth(a, &value)?;
        }
        if let Some(r) = f.registrar {
            self.apply_registrar(r, &value)?;
        }
        if let Some(t) = f.tls {
            self.apply_tls(t, &value)?;
        }
        if let Some(g) = f.guard {
            self.apply_guard(g, &value)?;
        }
        if let Some(p) = f.privacy {
            self.privacy =
                Some(crate::config_privacy::privacy_settings(p).map_err(|(k, m)| value(k, m))?);
        }
        if let Some(h) = f.hide_topology_peers {
            self.hide_topology_peers = h.into_iter().map(|d| d.to_ascii_lowercase()).collect();
        }
        if let Some(peers) = f.peers {
            self.peers = peers.into_iter().collect();
        }
        if let Some(w) = f.websocket {
            self.apply_websocket(w, &value)?;
        }
        if self.websocket.wss.is_some() && self.tls.is_none() {
            return Err(value(
                "websocket.wss",
                "secure WebSocket needs the [tls] cert and key".into(),
            ));
        }
        if let Some(c) = f.connections {
            self.apply_connections(c, &value)?;
        }
        if let Some(t) = f.http_token {
            if t.len() < 16 {
                return Err(value("http_token", "at least 16 characters".into()));
            }
            self.http_token = Some(t);
        }
        if let Some(t) = f.trace {
            self.apply_trace(t, &value)?;
        }
        if let Some(d) = f.dns {
            dns_settings(d, &mut self.dns).map_err(|(k, m)| value(k, m))?;
        }
        if let Some(m) = f.media {
            crate::config_media::media_settings(m, &mut self.media)
                .map_err(|(k, m)| value(k, m))?;
        }
        if let Some(c) = f.calls {
            crate::config_calls::calls_settings(c, &mut self.calls)
                .map_err(|(k, m)| value(k, m))?;
        }
        if let Some(t) = f.timers {
            crate::config_timers::timer_settings(t, &mut self.timers)
                .map_err(|(k, m)| value(k, m))?;
        }
        if let Some(t) = f.trunk {
            self.trunks = crate::config_trunks::trunk_settings(t).map_err(|(k, m)| value(k, m))?;
        }
        if let Some(st) = f.stir {
            crate::config_stir::stir_settings(st, &mut self.stir).map_err(|(k, m)| value(k, m))?;
        }
        if let Some(l) = f.location {
            self.redis = location_settings(l, self.redis.take()).map_err(|(k, m)| value(k, m))?;
        }
        if self.min_expires > self.max_expires {
            return Err(value(
                "registrar",
                format!(
                    "min_expires {} is above max_expires {}",
                    self.min_expires, self.max_expires
                ),
            ));
        }
        Ok(())
    }

    /// Where the server listens and what it advertises (top-level keys).
    fn apply_listen(
        &mut self,
        udp: Option<SocketAddr>,
        tcp: Option<Listen>,
        http: Option<Listen>,
        advertise: Option<SocketAddr>,
        value: &impl Fn(&'static str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        if let Some(u) = udp {
            self.udp = u;
            self.advertise = u;
            if self.tcp.is_some() {
                self.tcp = Some(u);
            }
        }
        if let Some(t) = tcp {
            self.tcp = match t {
                Listen::Enabled(false) => None,
                Listen::Enabled(true) => Some(self.tcp.unwrap_or(self.udp)),
                Listen::At(a) => {
                    parse_optional_addr(&a).map_err(|m| value("tcp", m.to_string()))?
                }
            };
        }
        if let Some(h) = http {
            self.http = match h {
                Listen::Enabled(false) => None,
                Listen::Enabled(true) => Some(self.http.unwrap_or(DEFAULT_HTTP)),
                Listen::At(a) => {
                    parse_optional_addr(&a).map_err(|m| value("http", m.to_string()))?
                }
            };
        }
        if let Some(a) = advertise {
            self.advertise = a;
        }
        Ok(())
    }

    /// Where bindings are kept and how durably (top-level keys).
    fn apply_storage(
        &mut self,
        data_dir: Option<PathBuf>,
        fsync: Option<bool>,
        durability: Option<String>,
        value: &impl Fn(&'static str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        if let Some(d) = data_dir {
            self.data_dir = d;
        }
        if let (Some(_), Some(_)) = (fsync, &durability) {
            return Err(value(
                "fsync",
                "give fsync or its older spelling durability, not both".into(),
            ));
        }
        if let Some(s) = fsync {
            self.durability = if s {
                Durability::Fsync
            } else {
                Durability::Process
            };
        }
        if let Some(d) = durability {
            self.durability = match d.as_str() {
                "process" => Durability::Process,
                "fsync" => Durability::Fsync,
                other => {
                    return Err(value(
                        "durability",
                        format!("{other:?}: use process or fsync"),
                    ))
                }
            };
        }
        Ok(())
    }

    /// The `[auth]` table of a configuration file.
    fn apply_auth(
        &mut self,
        a: AuthSection,
        value: &impl Fn(&'static str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        if let Some(e) = a.enabled {
            self.auth = e;
        }
        if let Some(r) = a.realm {
            self.realm = r;
        }
        if let Some(u) = a.users {
            self.users = u;
        }
        if let Some(d) = a.digest {
            let algs = d
                .iter()
                .map(|s| parse_digest(s))
                .collect::<Result<Vec<_>, _>>();
            self.digest_algorithms = algs.map_err(|e| value("auth.digest", e.to_string()))?;
            if self.digest_algorithms.is_empty() {
                return Err(value("auth.digest", "name at least one algorithm".into()));
            }
        }
        if let Some(t) = a.nonce_ttl {
            self.nonce_ttl = t;
        }
        self.insecure_no_auth = a.insecure_no_auth.unwrap_or(self.insecure_no_auth);
        if let Some(n) = a.max_tracked_nonces {
            if n == 0 {
                return Err(value(
                    "auth.max_tracked_nonces",
                    "must be at least 1".into(),
                ));
            }
            self.max_tracked_nonces = n;
            self.max_nonces_per_user = (n / 64).max(1);
            self.max_nonces_per_source = (n / 16).max(1);
        }
        positive(
            "auth.max_nonces_per_user",
            a.max_nonces_per_user,
            &mut self.max_nonces_per_user,
        )
        .map_err(|(k, m)| value(k, m))?;
        positive(
            "auth.max_nonces_per_source",
            a.max_nonces_per_source,
            &mut self.max_nonces_per_source,
        )
        .map_err(|(k, m)| value(k, m))?;
        Ok(())
    }

    /// The `[registrar]` table of a configuration file.
    fn apply_registrar(
        &mut self,
        r: RegistrarSection,
        value: &impl Fn(&'static str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        self.min_expires = r.min_expires.unwrap_or(self.min_expires);
        self.max_expires = r.max_expires.unwrap_or(self.max_expires);
        self.default_expires = r.default_expires.unwrap_or(self.default_expires);
        if let Some(p) = r.path {
            self.path = PathMode::parse(&p).ok_or_else(|| {
                value("registrar.path", format!("{p:?}: use off, lazy or strict"))
            })?;
        }
        if let Some(m) = r.max_contacts {
            if m == 0 {
                return Err(value("registrar.max_contacts", "must be at least 1".into()));
            }
            self.max_contacts = m;
        }
        positive(
            "registrar.max_bindings",
            r.max_bindings,
            &mut self.max_bindings,
        )
        .map_err(|(k, m)| value(k, m))?;
        positive(
            "registrar.max_contact_len",
            r.max_contact_len,
            &mut self.max_contact_len,
        )
        .map_err(|(k, m)| value(k, m))?;
        positive(
            "registrar.journal_rate",
            r.journal_rate,
            &mut self.journal_rate,
        )
        .map_err(|(k, m)| value(k, m))?;
        positive(
            "registrar.journal_burst",
            r.journal_burst,
            &mut self.journal_burst,
        )
        .map_err(|(k, m)| value(k, m))?;
        if let Some(p) = r.max_contacts_policy {
            self.max_contacts_policy = match p.as_str() {
                "reject" => Overflow::Reject,
                "replace-oldest" => Overflow::ReplaceOldest,
                other => {
                    return Err(value(
                        "registrar.max_contacts_policy",
                        format!("{other:?}: use reject or replace-oldest"),
                    ))
                }
            };
        }
        Ok(())
    }

    /// The `[tls]` table of a configuration file.
    fn apply_tls(
        &mut self,
        t: TlsSection,
        value: &impl Fn(&'static str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        let (Some(cert), Some(key)) = (t.cert, t.key) else {
            return Err(value("tls", "give both cert and key".into()));
        };
        let groups = t.groups.unwrap_or_else(TlsSettings::default_groups);
        let require_pq = t.require_pq.unwrap_or(false);
        TlsSettings::check_groups(&groups, require_pq).map_err(|e| value("tls.groups", e))?;
        self.tls = Some(TlsSettings {
            addr: t.addr.unwrap_or_else(|| default_tls_addr(self.udp)),
            cert,
            key,
            client_ca: t.client_ca,
            peer_ca: t.peer_ca,
            allow_rsa_1024: t.allow_rsa_1024.unwrap_or(false),
            groups,
            require_pq,
            session_tickets: t.session_tickets.unwrap_or(true),
        });
        Ok(())
    }

    /// The `[guard]` table of a configuration file.
    fn apply_guard(
        &mut self,
        g: GuardSection,
        value: &impl Fn(&'static str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        let c = &mut self.guard;
        c.rate = g.rate.unwrap_or(c.rate);
        c.burst = g.burst.unwrap_or(c.burst);
        c.max_auth_failures = g.max_auth_failures.unwrap_or(c.max_auth_failures);
        c.failure_window = g.failure_window.unwrap_or(c.failure_window);
        c.ban_seconds = g.ban_seconds.unwrap_or(c.ban_seconds);
        c.exempt_loopback = g.exempt_loopback.unwrap_or(c.exempt_loopback);
        c.ipv6_prefix = g.ipv6_prefix.unwrap_or(c.ipv6_prefix);
        c.decryption_rate = g.decryption_rate.unwrap_or(c.decryption_rate);
        if !(32..=128).contains(&c.ipv6_prefix) {
            return Err(value(
                "guard.ipv6_prefix",
                format!(
                    "{}: 32 to 128 (64, one end site's subnet, by default; 128 counts each address alone)",
                    c.ipv6_prefix
                ),
            ));
        }
        if c.rate > 0 && c.burst == 0 {
            return Err(value(
                "guard.burst",
                "must be at least 1 when rate is set".into(),
            ));
        }
        Ok(())
    }

    /// The `[websocket]` table of a configuration file.
    fn apply_websocket(
        &mut self,
        w: WebSocketSection,
        value: &impl Fn(&'static str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        let s = &mut self.websocket;
        if let Some(a) = w.ws {
            s.ws = parse_optional_addr(&a).map_err(|m| value("websocket.ws", m.to_string()))?;
        }
        if let Some(a) = w.wss {
            s.wss = parse_optional_addr(&a).map_err(|m| value("websocket.wss", m.to_string()))?;
        }
        s.origins = w.origins.unwrap_or(std::mem::take(&mut s.origins));
        if let Some(m) = w.max_message {
            if !(1024..=16 << 20).contains(&m) {
                return Err(value(
                    "websocket.max_message",
                    format!("{m}: between 1024 and 16777216 bytes"),
                ));
            }
            s.max_message = m;
        }
        Ok(())
    }

    /// The `[connections]` table of a configuration file.
    fn apply_connections(
        &mut self,
        c: ConnectionsSection,
        value: &impl Fn(&'static str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        let l = &mut self.connections;
        l.max = c.max.unwrap_or(l.max);
        l.per_ip = c.per_ip.unwrap_or(l.per_ip);
        l.per_ip_exempt = c
            .per_ip_exempt
            .unwrap_or(std::mem::take(&mut l.per_ip_exempt));
        if let Some(r) = c.reactors {
            // Each is a thread with a journal of its own (4 MiB reserved).
            if r > MAX_REACTORS {
                return Err(value(
                    "connections.reactors",
                    format!("{r}: at most {MAX_REACTORS} (0: one per core, at most 4)"),
                ));
            }
            l.reactors = r;
        }
        l.spread_above = c.spread_above.unwrap_or(l.spread_above);
        l.spread_always = c.spread_always.unwrap_or(l.spread_always);
        if let Some(q) = c.spread_queue {
            l.spread_queue = spread_queue(q).map_err(|e| value("connections.spread_queue", e))?;
        }
        if let Some(q) = c.queue_bytes {
            if q < 4096 {
                return Err(value(
                    "connections.queue_bytes",
                    format!("{q}: at least 4096 (a SIP message must fit)"),
                ));
            }
            l.queue_bytes = q;
        }
        if let Some(b) = c.accept_burst {
            if b == 0 {
                return Err(value(
                    "connections.accept_burst",
                    "must be at least 1".into(),
                ));
            }
            l.accept_burst = b;
        }
        l.accept_rate = c.accept_rate.unwrap_or(l.accept_rate);
        l.accept_rate_per_ip = c.accept_rate_per_ip.unwrap_or(l.accept_rate_per_ip);
        positive(
            "connections.keepalive_rate",
            c.keepalive_rate,
            &mut l.keepalive_rate,
        )
        .map_err(|(k, m)| value(k, m))?;
        for (key, given, slot) in [
            (
                "connections.first_message_timeout",
                c.first_message_timeout,
                &mut l.first_message_timeout,
            ),
            (
                "connections.handshake_timeout",
                c.handshake_timeout,
                &mut l.handshake_timeout,
            ),
            (
                "connections.message_timeout",
                c.message_timeout,
                &mut l.message_timeout,
            ),
            (
                "connections.idle_timeout",
                c.idle_timeout,
                &mut l.idle_timeout,
            ),
            (
                "connections.connect_timeout",
                c.connect_timeout,
                &mut l.connect_timeout,
            ),
            (
                "connections.send_timeout",
                c.send_timeout,
                &mut l.send_timeout,
            ),
        ] {
            if let Some(secs) = given {
                if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
                    return Err(value(key, format!("{secs}: seconds in (0, 86400]")));
                }
                *slot = Duration::from_secs_f64(secs);
            }
        }
        Ok(())
    }

    /// The `[trace]` table of a configuration file.
    fn apply_trace(
        &mut self,
        t: TraceSection,
        value: &impl Fn(&'static str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        let Some(hep) = t.hep else {
            return Err(value("trace.hep", "missing: give udp:HOST:PORT".into()));
        };
        let mut s = TraceSettings::new(parse_hep(&hep).map_err(|m| value("trace.hep", m))?);
        if let Some(id) = t.capture_id {
            s.capture_id = id;
        }
        s.password = t.password;
        if let Some(r) = t.sample {
            if !(r > 0.0 && r <= 1.0) {
                return Err(value("trace.sample", format!("{r}: a fraction in (0, 1]")));
            }
            s.sample = r;
        }
        if let Some(m) = t.methods {
            s.methods = m.iter().map(|m| m.to_ascii_uppercase()).collect();
        }
        self.trace = Some(s);
        Ok(())
    }

    /// Reads and applies a configuration file.
    pub fn apply_file(&mut self, path: &std::path::Path) -> Result<(), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read {
            path: path.display().to_string(),
            err,
        })?;
        self.apply_toml(&text, &path.display().to_string())?;
        self.config_file = Some(path.to_owned());
        Ok(())
    }
}
