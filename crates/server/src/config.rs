//! Server configuration: what `sipsec serve` runs, with secure defaults.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use sip_core::digest::Algorithm;

/// How hard a journal write tries to reach stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `write(2)` before answering: survives process crashes (`kill -9`).
    #[default]
    Process,
    /// Also `fsync(2)` each write: survives power loss, much slower.
    Fsync,
}

/// What happens when a REGISTER would take an AoR past its contact limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Refuse the REGISTER (403 with a Warning).
    #[default]
    Reject,
    /// Drop the contacts closest to expiry (the least recently refreshed)
    /// to make room.
    ReplaceOldest,
}

/// Default bound on the memory the stateful proxy's transactions hold
/// (entries and the messages they keep); past it new requests get 503
/// with Retry-After.
pub const DEFAULT_MAX_TRANSACTION_BYTES: u64 = 256 << 20;

/// Bindings the registrar holds at most by default: about 250 MB of
/// memory at the largest contacts allowed.
pub const DEFAULT_MAX_BINDINGS: usize = 200_000;

/// Which AES pseudonyms the proxy accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AesMode {
    /// None.
    #[default]
    Off,
    /// AES-128-GCM under keys from the users' HA1.
    Gcm,
    /// The published AES-128-CBC with ISO 10126 padding (no integrity).
    Cbc,
}

/// `[privacy]` in the configuration.
#[derive(Debug, Clone, Default)]
pub struct PrivacySettings {
    /// Private keys by the key id published with their public halves.
    pub keys: Vec<(u8, PathBuf)>,
    /// AES pseudonyms (trial decryption over the users' keys).
    pub aes: AesMode,
    /// The key id of AES pseudonyms.
    pub aes_key_id: u8,
    /// Cache entries (0: stateless).
    pub cache: usize,
    /// Seconds a cached pseudonym stays.
    pub cache_ttl: u64,
}

/// Where the TLS material lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// Listening address (port 0: the UDP port + 1; 5061 by convention).
    pub addr: std::net::SocketAddr,
    /// Certificate chain, PEM, leaf first.
    pub cert: PathBuf,
    /// Private key, PEM: RSA of any variant (PKCS#1 or PKCS#8), ECDSA
    /// (SEC1 or PKCS#8) or Ed25519.
    pub key: PathBuf,
    /// CAs whose client certificates are required (mutual TLS); `None`
    /// accepts clients without certificates.
    pub client_ca: Option<PathBuf>,
    /// CAs trusted for outbound connections (next hops); `None` uses the
    /// system bundle.
    pub peer_ca: Option<PathBuf>,
    /// Accept peers' 1024-bit RSA keys and signatures (verified by
    /// OpenSSL); off by default, as 2048 is the floor.
    pub allow_rsa_1024: bool,
}

/// What the server does with requests that are not REGISTER.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Registrar only: other requests for local users get 405/501.
    #[default]
    Registrar,
    /// Registrar plus proxy: requests are forwarded to registered contacts.
    Proxy,
    /// Registrar plus redirect server: INVITEs get 302 with the contacts.
    Redirect,
}

impl Mode {
    /// Parses `registrar`, `proxy` or `redirect`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "registrar" => Some(Mode::Registrar),
            "proxy" => Some(Mode::Proxy),
            "redirect" => Some(Mode::Redirect),
            _ => None,
        }
    }

    /// The name.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Registrar => "registrar",
            Mode::Proxy => "proxy",
            Mode::Redirect => "redirect",
        }
    }
}

/// What the registrar does with Path header fields (RFC 3327).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PathMode {
    /// Ignore Path: requests go straight to the contact.
    Off,
    /// Store Path with the binding and route through it; echo it in the
    /// 200 OK when the UA sent `Supported: path`.
    #[default]
    Lazy,
    /// Like `Lazy`, but a REGISTER with Path from a UA that does not
    /// support it gets 420 Bad Extension.
    Strict,
}

impl PathMode {
    /// Parses `off`, `lazy` or `strict`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "off" => Some(PathMode::Off),
            "lazy" => Some(PathMode::Lazy),
            "strict" => Some(PathMode::Strict),
            _ => None,
        }
    }
}

/// How datagrams are spread over the UDP workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UdpBalance {
    /// Each datagram to a worker picked at random (a BPF program on the
    /// SO_REUSEPORT group): one busy peer uses every worker, but two
    /// messages it sends back to back (a 180 and its 200) may leave in
    /// the other order.
    Spread,
    /// One socket every worker reads, as Kamailio's children share theirs
    /// (the same reordering as `Spread`).
    Shared,
    /// By a hash of the sender's address and port (SO_REUSEPORT's own):
    /// one peer's datagrams all go to one worker, in order.
    #[default]
    Flow,
}

impl UdpBalance {
    /// Parses `spread`, `shared` or `flow`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "spread" => Some(Self::Spread),
            "shared" => Some(Self::Shared),
            "flow" => Some(Self::Flow),
            _ => None,
        }
    }
}

/// How the stateful proxy forks a request for a user with several
/// contacts (RFC 3261 §16.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Forking {
    /// Only the first contact (the highest q) is tried.
    Off,
    /// Every contact at once, whatever its q.
    Parallel,
    /// Contacts of equal q at once, the highest q first; the next group
    /// when every branch of the previous one failed.
    #[default]
    ByQ,
}

impl Forking {
    /// Parses `off`, `parallel` or `by-q`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "off" => Some(Self::Off),
            "parallel" => Some(Self::Parallel),
            "by-q" => Some(Self::ByQ),
            _ => None,
        }
    }
}

/// Everything `sipsec serve` needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Registrar, proxy or redirect.
    pub mode: Mode,
    /// UDP listening address.
    pub udp: SocketAddr,
    /// TCP listening address (`None`: no TCP). Port 0 means the UDP port.
    pub tcp: Option<SocketAddr>,
    /// Operator endpoint (`/metrics`, `/status`); `None` turns it off.
    pub http: Option<SocketAddr>,
    /// Worker threads (UDP sockets).
    pub workers: usize,
    /// How datagrams are spread over the workers.
    pub udp_balance: UdpBalance,
    /// Address put in Via and used to recognise requests for this server;
    /// defaults to the UDP address.
    pub advertise: SocketAddr,
    /// Add Record-Route to dialog-creating requests the proxy forwards, so
    /// ACK, BYE and re-INVITEs traverse it too (RFC 3261 §16.6 step 4).
    pub record_route: bool,
    /// Proxy with transactions (RFC 3261 §16, §17): absorb retransmissions,
    /// send 100 Trying, handle CANCEL, time out with 408; record-routes
    /// dialog-creating requests. Off: stateless forwarding (§16.11).
    pub stateful: bool,
    /// How the stateful proxy forks requests for users with several
    /// contacts (a stateless proxy tries only the first, §16.11).
    pub forking: Forking,
    /// Memory the stateful proxy's transactions may hold; past it new
    /// requests get 503 with Retry-After.
    pub max_transaction_bytes: u64,
    /// Extra host names that mean "this server" in Request-URIs.
    pub domains: Vec<String>,
    /// Require digest authentication (401 for REGISTER, 407 for INVITE).
    pub auth: bool,
    /// Realm challenged.
    pub realm: String,
    /// Digest algorithms challenged, in order of preference (RFC 8760
    /// §2.4: SHA-256 first). Put MD5 first for clients that only try the
    /// first challenge (SIPp 3.6 does).
    pub digest_algorithms: Vec<Algorithm>,
    /// Users file (HA1 hashes).
    pub users: PathBuf,
    /// Nonce lifetime in seconds.
    pub nonce_ttl: u64,
    /// Directory of the embedded location store.
    pub data_dir: PathBuf,
    /// Journal durability.
    pub durability: Durability,
    /// Journal bytes past which the store compacts online (snapshot plus
    /// new journals), while the server runs.
    pub journal_compact_bytes: u64,
    /// Seconds a stopping server (SIGTERM) lets transactions under way
    /// finish before closing everything.
    pub drain_timeout: u64,
    /// Most contacts one address-of-record may hold.
    pub max_contacts: usize,
    /// What a REGISTER past `max_contacts` gets.
    pub max_contacts_policy: Overflow,
    /// Most bindings the registrar holds in all; past it a REGISTER that
    /// would add one gets 503 with a Warning.
    pub max_bindings: usize,
    /// Longest contact URI a binding may store, bytes (403 above).
    pub max_contact_len: usize,
    /// Journal bytes per second the registrar may write, on average
    /// (bursts of `journal_burst`); past it changes get 503 Retry-After.
    pub journal_rate: u64,
    /// Journal bytes the registrar may write at once above the rate.
    pub journal_burst: u64,
    /// Serve without authentication on an address beyond loopback: an
    /// open registrar (anyone binds any AoR) and proxy. Off, `serve`
    /// refuses to start that way.
    pub insecure_no_auth: bool,
    /// Most nonces whose counts the replay tracker holds at once; past it,
    /// a nonce it does not hold is challenged again with `stale=true`.
    pub max_tracked_nonces: usize,
    /// Most tracked nonces one username may hold; past it that user's
    /// new nonces are challenged again with `stale=true`.
    pub max_nonces_per_user: usize,
    /// Most tracked nonces one source address may hold.
    pub max_nonces_per_source: usize,
    /// Shortest registration accepted (423 below it, RFC 3261 §10.3 step 7).
    pub min_expires: u32,
    /// Path (RFC 3327) handling.
    pub path: PathMode,
    /// Longest registration granted; longer requests are shortened.
    pub max_expires: u32,
    /// Registration time when the request names none.
    pub default_expires: u32,
    /// Per-source rate limit and fail-ban.
    pub guard: crate::proto::guard::GuardConfig,
    /// SIP over TLS (`sips:`), when a certificate and key are given.
    pub tls: Option<TlsSettings>,
    /// Identity privacy (PrivaSIP): keys that open pseudonyms.
    pub privacy: Option<PrivacySettings>,
    /// Other domains' proxies: requests for these domains are forwarded to
    /// the address (proxy mode), and requests from those addresses are
    /// trusted as coming from that domain's proxy (not challenged).
    pub peers: Vec<(String, SocketAddr)>,
    /// Limits and deadlines of TCP and TLS connections.
    pub connections: ConnectionLimits,
    /// SIP over WebSocket (RFC 7118) for browser phones.
    pub websocket: WebSocketSettings,
    /// Where the location service keeps bindings: `None` is the embedded
    /// journal in `data_dir`; `Some` is a Redis or Valkey server shared by
    /// several nodes.
    pub redis: Option<RedisSettings>,
    /// HEP (Homer) tracing of every SIP message received and sent.
    pub trace: Option<TraceSettings>,
    /// A token the operator endpoint requires (`Authorization: Bearer`);
    /// needed when it listens beyond loopback.
    pub http_token: Option<String>,
    /// How next hops named by domains are resolved.
    pub dns: DnsSettings,
}

/// Resolving next hops named by domain names (`[dns]`, RFC 3263 without
/// NAPTR): the hosts file first, then SRV and A/AAAA queries.
#[derive(Debug, Clone, PartialEq)]
pub struct DnsSettings {
    /// Resolve names at all; off, a name no connection stands for is
    /// unreachable.
    pub enabled: bool,
    /// Name servers; empty: those of `/etc/resolv.conf`.
    pub servers: Vec<SocketAddr>,
    /// The hosts file read first (`None`: none).
    pub hosts: Option<std::path::PathBuf>,
    /// How long one query waits for its answer.
    pub timeout: std::time::Duration,
    /// Tries per server.
    pub attempts: u32,
    /// Longest time an answer is kept, whatever its TTL says (seconds).
    pub max_ttl: u32,
    /// How long "no such name" is kept (seconds).
    pub negative_ttl: u32,
    /// How long an address that failed (refused, silent, or 503) is
    /// skipped while its name leads elsewhere too (seconds).
    pub skip_failed_for: u32,
    /// A stateful proxy tries the next address of a name when the one it
    /// used has not answered at all within this (`None`: only when the
    /// transaction times out, is refused, or gets 503).
    pub failover_after: Option<std::time::Duration>,
    /// Take only answers the name server says it validated with DNSSEC
    /// (the AD bit): for a validating resolver on a trusted path.
    pub require_dnssec: bool,
}

impl Default for DnsSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            servers: Vec::new(),
            hosts: Some("/etc/hosts".into()),
            timeout: std::time::Duration::from_secs(1),
            attempts: 2,
            max_ttl: 3600,
            negative_ttl: 30,
            skip_failed_for: 30,
            failover_after: Some(std::time::Duration::from_secs(4)),
            require_dnssec: false,
        }
    }
}

/// HEP version 3 tracing (`[trace]`): a copy of each SIP message, with its
/// addresses, transport and time, to a Homer (or any HEP) collector.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// The collector (`udp:HOST:PORT` in the file).
    pub collector: String,
    /// Capture agent ID written in every packet.
    pub capture_id: u32,
    /// Authentication key sent in every packet (HEP chunk 14), if the
    /// collector wants one.
    pub password: Option<String>,
    /// Fraction of calls traced, chosen by Call-ID so a dialog is whole.
    pub sample: f64,
    /// Methods traced (requests and the responses to them); empty: all.
    pub methods: Vec<String>,
}

impl TraceSettings {
    /// Every message to `collector` (`HOST:PORT`).
    pub fn new(collector: impl Into<String>) -> Self {
        Self {
            collector: collector.into(),
            capture_id: 2001,
            password: None,
            sample: 1.0,
            methods: Vec::new(),
        }
    }
}

/// Parses `udp:HOST:PORT` (the only HEP transport sipsec sends) into
/// `HOST:PORT`.
pub fn parse_hep(spec: &str) -> Result<String, String> {
    let Some(rest) = spec.strip_prefix("udp:") else {
        return Err(format!("{spec:?}: expected udp:HOST:PORT"));
    };
    match rest.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Ok(rest.to_owned())
        }
        _ => Err(format!("{spec:?}: expected udp:HOST:PORT")),
    }
}

/// A secret (a password): kept out of `Debug` output, so out of logs and
/// messages.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// A Redis (or Valkey) location backend, shared by every node that names
/// it (`[location] backend = "redis"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// `redis://[user:password@]host:port[/db]`, `rediss://` for TLS, or
    /// `redis+unix:///path[?db=N&user=U&pass=P]` for a Unix socket.
    pub url: String,
    /// Prefix of every key and channel, so several deployments can share
    /// one server.
    pub prefix: String,
    /// A command not answered in this time fails (the REGISTER it serves
    /// gets 503), and the node waits as long before trying again.
    pub timeout: Duration,
    /// Seconds a REGISTER answered 503 while Redis is unreachable is told
    /// to wait (Retry-After).
    pub retry_after: u32,
    /// With `rediss://`: CA certificates (PEM) that issued the server's
    /// certificate, instead of the system's trust store.
    pub ca: Option<PathBuf>,
    /// With `rediss://`: a client certificate chain and its key (PEM), for
    /// servers that require them (`tls-auth-clients yes`).
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// Seconds this node's copy of the location may go without following
    /// the shared one (Redis unreachable) before calls stop being routed
    /// from it and get 503 with Retry-After; `None`: no limit.
    pub max_stale: Option<u32>,
    /// The password to log in with, given apart from the URL
    /// (`SIPSEC_REDIS_PASSWORD`); it replaces one in the URL.
    pub password: Option<Secret>,
}

impl RedisSettings {
    /// The defaults for a server at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            prefix: "sipsec:".to_owned(),
            timeout: Duration::from_secs(1),
            retry_after: 5,
            ca: None,
            client_cert: None,
            max_stale: None,
            password: None,
        }
    }
}

/// SIP over WebSocket listeners (RFC 7118) and what they accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSocketSettings {
    /// Plain WebSocket (`ws:`) address; `None`: no listener.
    pub ws: Option<SocketAddr>,
    /// Secure WebSocket (`wss:`) address, with the `[tls]` certificate;
    /// `None`: no listener.
    pub wss: Option<SocketAddr>,
    /// `Origin`s allowed to upgrade (exact, e.g. `https://phone.example`);
    /// empty: any origin.
    pub origins: Vec<String>,
    /// Longest WebSocket message (one SIP message) accepted, in bytes.
    pub max_message: usize,
}

impl Default for WebSocketSettings {
    fn default() -> Self {
        Self {
            ws: None,
            wss: None,
            origins: Vec::new(),
            max_message: 65_535,
        }
    }
}

/// Limits and deadlines of the connection layer (TCP, TLS), each one a
/// defence against a peer that holds resources without using them.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionLimits {
    /// Most open connections; 0: as many as the file-descriptor limit
    /// allows (raised to its hard limit at start), less a reserve.
    pub max: usize,
    /// Most connections from one source IP (carrier NAT puts many phones
    /// behind one address); 0: no per-IP limit.
    pub per_ip: usize,
    /// Source IPs the per-IP limit does not apply to (e.g. a trusted SBC).
    pub per_ip_exempt: Vec<std::net::IpAddr>,
    /// Bytes a connection may have queued for its peer; a peer that lets
    /// more pile up is closed as a slow reader.
    pub queue_bytes: usize,
    /// A TLS handshake must be complete this long after the connection
    /// opened (an absolute deadline, however slowly bytes drip in).
    pub handshake_timeout: Duration,
    /// A SIP message must be complete this long after its first byte.
    pub message_timeout: Duration,
    /// A connection that receives nothing (not even a keep-alive) this
    /// long is closed.
    pub idle_timeout: Duration,
    /// An outbound connect not established in this time fails.
    pub connect_timeout: Duration,
    /// Reactor threads serving connections; 0: one per core (at most 4).
    pub reactors: usize,
    /// Connections each reactor accepts per turn of its loop before it
    /// serves established connections again.
    pub accept_burst: usize,
    /// New connections accepted per second by the whole server (shared
    /// evenly by the reactors; 0: no limit). Connections beyond it wait in
    /// the kernel's accept queue, so a connect storm (every handshake a
    /// private-key operation) cannot take the CPU registered phones need.
    pub accept_rate: u32,
    /// New connections accepted per second from one source IP (at once:
    /// as many), checked before the server-wide rate so one address
    /// cannot spend the others' share; 0: no limit. `per_ip_exempt`
    /// addresses have none.
    pub accept_rate_per_ip: u32,
    /// A connection must send a SIP message this long after it opened
    /// (TLS handshake and WebSocket upgrade included), or it is closed.
    pub first_message_timeout: Duration,
    /// CRLF keep-alives and WebSocket pings one connection may send per
    /// second on average (at once: ten times as many); past it the
    /// connection is closed. RFC 5626 §4.4.1 keeps alive every 95–120 s.
    pub keepalive_rate: u32,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max: 0,
            per_ip: 1024,
            per_ip_exempt: Vec::new(),
            queue_bytes: 256 << 10,
            handshake_timeout: Duration::from_secs(10),
            message_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            connect_timeout: Duration::from_secs(2),
            reactors: 0,
            accept_burst: 64,
            accept_rate: 2000,
            accept_rate_per_ip: 100,
            first_message_timeout: Duration::from_secs(20),
            keepalive_rate: 2,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        let udp: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 5060));
        Self {
            mode: Mode::Registrar,
            udp,
            tcp: Some(udp),
            http: Some(DEFAULT_HTTP),
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            udp_balance: UdpBalance::Flow,
            advertise: udp,
            record_route: false,
            stateful: false,
            forking: Forking::ByQ,
            max_transaction_bytes: DEFAULT_MAX_TRANSACTION_BYTES,
            domains: vec!["localhost".to_owned()],
            auth: false,
            realm: "sipsec".to_owned(),
            digest_algorithms: vec![Algorithm::Sha256, Algorithm::Md5],
            users: PathBuf::from("users.tsv"),
            nonce_ttl: 300,
            data_dir: PathBuf::from("sipsec-data"),
            durability: Durability::Process,
            journal_compact_bytes: 64 << 20,
            drain_timeout: 10,
            max_contacts: 10,
            max_contacts_policy: Overflow::Reject,
            max_bindings: DEFAULT_MAX_BINDINGS,
            max_contact_len: 512,
            journal_rate: 64 << 20,
            journal_burst: 256 << 20,
            insecure_no_auth: false,
            max_tracked_nonces: 1 << 20,
            max_nonces_per_user: (1 << 20) / 64,
            max_nonces_per_source: (1 << 20) / 16,
            min_expires: 60,
            path: PathMode::Lazy,
            max_expires: 7200,
            default_expires: 3600,
            guard: crate::proto::guard::GuardConfig::default(),
            tls: None,
            privacy: None,
            peers: Vec::new(),
            connections: ConnectionLimits::default(),
            websocket: WebSocketSettings::default(),
            redis: None,
            trace: None,
            http_token: None,
            dns: DnsSettings::default(),
        }
    }
}

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
    pub privacy: Option<PrivacySection>,
    /// `[peers]` table: domain = "address".
    pub peers: Option<std::collections::BTreeMap<String, SocketAddr>>,
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
}

/// The operator endpoint's address unless configured.
pub const DEFAULT_HTTP: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    8060,
));

/// A listener in the file: an address, `true` (the default address) or
/// `false` (none); `"off"` is accepted for `false`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// `true` or `false`.
    Enabled(bool),
    /// An address (or "off").
    At(String),
}

impl<'de> serde::Deserialize<'de> for Listen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Listen;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an address such as \"127.0.0.1:5060\", or false")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Listen, E> {
                Ok(Listen::Enabled(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Listen, E> {
                Ok(Listen::At(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
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

/// `[dns]`: resolving next hops named by domain names.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsSection {
    /// `false`: no resolution.
    pub enabled: Option<bool>,
    /// Name servers, `"IP"` or `"IP:PORT"`.
    pub servers: Option<Vec<String>>,
    /// Hosts file, or `""` for none.
    pub hosts: Option<PathBuf>,
    /// Seconds one query waits.
    pub timeout: Option<f64>,
    /// Tries per server.
    pub attempts: Option<u32>,
    /// Longest time an answer is kept, seconds.
    pub max_ttl: Option<u32>,
    /// How long "no such name" is kept, seconds.
    pub negative_ttl: Option<u32>,
    /// How long an address that failed is skipped, seconds.
    pub skip_failed_for: Option<u32>,
    /// Seconds of silence from a next hop before the next address is
    /// tried; 0: only when its transaction fails.
    pub failover_after: Option<f64>,
    /// Only answers the name server validated with DNSSEC (AD bit).
    pub require_dnssec: Option<bool>,
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
    /// Reactor threads (0: one per core, at most 4).
    pub reactors: Option<usize>,
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

/// A configuration problem, naming the file and what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {err}")]
    Read {
        /// File.
        path: String,
        /// Cause.
        err: std::io::Error,
    },
    /// TOML syntax or an unknown key / wrong type.
    #[error("{path}: {msg}")]
    Parse {
        /// File.
        path: String,
        /// Parser message (with line and column).
        msg: String,
    },
    /// A value outside its allowed set.
    #[error("{path}: {key}: {msg}")]
    Value {
        /// File.
        path: String,
        /// Key.
        key: &'static str,
        /// What is allowed.
        msg: String,
    },
}

fn dns_settings(d: DnsSection, s: &mut DnsSettings) -> Result<(), (&'static str, String)> {
    if let Some(e) = d.enabled {
        s.enabled = e;
    }
    if let Some(list) = d.servers {
        s.servers = list
            .iter()
            .map(|a| {
                a.parse::<SocketAddr>()
                    .or_else(|_| {
                        a.parse::<std::net::IpAddr>()
                            .map(|ip| SocketAddr::new(ip, 53))
                    })
                    .map_err(|_| ("dns.servers", format!("{a:?}: expected IP or IP:PORT")))
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(h) = d.hosts {
        s.hosts = (!h.as_os_str().is_empty()).then_some(h);
    }
    if let Some(t) = d.timeout {
        if !(0.01..=30.0).contains(&t) {
            return Err(("dns.timeout", format!("{t}: seconds in [0.01, 30]")));
        }
        s.timeout = std::time::Duration::from_secs_f64(t);
    }
    if let Some(a) = d.attempts {
        if !(1..=5).contains(&a) {
            return Err(("dns.attempts", format!("{a}: 1 to 5")));
        }
        s.attempts = a;
    }
    if let Some(t) = d.max_ttl {
        s.max_ttl = t;
    }
    if let Some(t) = d.negative_ttl {
        s.negative_ttl = t;
    }
    if let Some(t) = d.skip_failed_for {
        if !(1..=86_400).contains(&t) {
            return Err(("dns.skip_failed_for", format!("{t}: seconds in [1, 86400]")));
        }
        s.skip_failed_for = t;
    }
    if let Some(t) = d.failover_after {
        if t != 0.0 && !(0.1..=32.0).contains(&t) {
            return Err((
                "dns.failover_after",
                format!("{t}: 0 (off) or seconds in [0.1, 32]"),
            ));
        }
        s.failover_after = (t > 0.0).then(|| std::time::Duration::from_secs_f64(t));
    }
    if let Some(r) = d.require_dnssec {
        s.require_dnssec = r;
    }
    Ok(())
}

/// Where TLS listens by default: beside UDP, on the UDP address's IP and
/// the next port — 5061 for the standard 5060 (RFC 3261 §19.1.2), 5081
/// for a server moved to 5080 — or any free port when UDP asked for one.
pub fn default_tls_addr(udp: SocketAddr) -> SocketAddr {
    let port = match udp.port() {
        0 => 0,
        p => p.checked_add(1).unwrap_or(5061),
    };
    SocketAddr::new(udp.ip(), port)
}

/// A listener setting that is neither `off` nor an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is neither \"off\" nor an address like 127.0.0.1:5060")]
pub struct NotAnAddress(pub String);

/// Parses `off` or an address.
pub fn parse_optional_addr(s: &str) -> Result<Option<SocketAddr>, NotAnAddress> {
    if s.eq_ignore_ascii_case("off") {
        Ok(None)
    } else {
        s.parse().map(Some).map_err(|_| NotAnAddress(s.into()))
    }
}

/// A digest algorithm name this server does not offer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown digest algorithm {0:?}: use md5, sha-256 or sha-512-256")]
pub struct UnknownDigest(pub String);

/// Parses a digest algorithm name accepted in challenges.
pub fn parse_digest(s: &str) -> Result<Algorithm, UnknownDigest> {
    match Algorithm::from_token(s) {
        Some(a @ (Algorithm::Md5 | Algorithm::Sha256 | Algorithm::Sha512_256)) => Ok(a),
        _ => Err(UnknownDigest(s.to_owned())),
    }
}

/// The settings of a `[privacy]` table.
fn privacy_settings(p: PrivacySection) -> Result<PrivacySettings, (&'static str, String)> {
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
    Ok(PrivacySettings {
        keys,
        aes,
        aes_key_id: p.aes_key_id.unwrap_or(1),
        cache,
        cache_ttl: p.cache_ttl.unwrap_or(300),
    })
}

/// Checks a Redis URL's form: `redis://` (TCP), `rediss://` (TLS) or
/// `redis+unix://` (a Unix socket, for a Redis on the node's host).
pub fn check_redis_url(url: &str) -> Result<(), String> {
    let form = "use redis://[user:password@]host:port[/db], rediss://… for TLS, \
                or redis+unix:///path/to/redis.sock[?db=N&user=U&pass=P] for a local socket";
    if url.starts_with("redis://") || url.starts_with("rediss://") {
        return Ok(());
    }
    let Some(rest) = url.strip_prefix("redis+unix://") else {
        return Err(format!("{url:?}: {form}"));
    };
    let path = rest.split('?').next().unwrap_or_default();
    if !path.starts_with('/') || path.len() < 2 {
        return Err(format!(
            "{}: the socket needs an absolute path (three slashes: redis+unix:///run/redis/redis.sock)",
            redact(url)
        ));
    }
    let query = rest.get(path.len() + 1..).unwrap_or_default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let ok = match name {
            "db" => value.parse::<u32>().is_ok(),
            "user" | "pass" => !value.is_empty(),
            _ => false,
        };
        if !ok {
            return Err(format!(
                "{}: {name:?} is not db=N, user=NAME or pass=PASSWORD",
                redact(url)
            ));
        }
    }
    Ok(())
}

/// Whether a Redis URL carries a password (`user:password@`, or a Unix
/// socket's `pass=` query).
pub fn has_password(url: &str) -> bool {
    redact(url) != url
}

/// A Redis URL without its password (`user:password@`, or a Unix
/// socket's `pass=` query), for messages.
pub fn redact(url: &str) -> String {
    if let Some((base, query)) = url.split_once('?') {
        let pairs: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some(("pass", _)) => "pass=***".to_owned(),
                _ => p.to_owned(),
            })
            .collect();
        return format!("{}?{}", redact(base), pairs.join("&"));
    }
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..scheme + 3], &creds[..c], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
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

impl Config {
    /// A SIP listener beyond loopback when authentication is off and
    /// `insecure_no_auth` was not given: such a server is an open
    /// registrar and proxy, so it is an explicit opt-in.
    pub fn open_service(&self) -> Option<SocketAddr> {
        if self.auth || self.insecure_no_auth {
            return None;
        }
        [
            Some(self.udp),
            self.tcp,
            self.websocket.ws,
            self.websocket.wss,
        ]
        .into_iter()
        .flatten()
        .chain(self.tls.as_ref().map(|t| t.addr))
        .find(|a| !a.ip().is_loopback())
    }

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
        if let Some(u) = f.udp {
            self.udp = u;
            self.advertise = u;
            if self.tcp.is_some() {
                self.tcp = Some(u);
            }
        }
        if let Some(t) = f.tcp {
            self.tcp = match t {
                Listen::Enabled(false) => None,
                Listen::Enabled(true) => Some(self.tcp.unwrap_or(self.udp)),
                Listen::At(a) => {
                    parse_optional_addr(&a).map_err(|m| value("tcp", m.to_string()))?
                }
            };
        }
        if let Some(h) = f.http {
            self.http = match h {
                Listen::Enabled(false) => None,
                Listen::Enabled(true) => Some(self.http.unwrap_or(DEFAULT_HTTP)),
                Listen::At(a) => {
                    parse_optional_addr(&a).map_err(|m| value("http", m.to_string()))?
                }
            };
        }
        if let Some(a) = f.advertise {
            self.advertise = a;
        }
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
            self.udp_balance = UdpBalance::parse(&b).ok_or_else(|| {
                value("udp_balance", format!("{b:?}: use spread, shared or flow"))
            })?;
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
        if let Some(d) = f.data_dir {
            self.data_dir = d;
        }
        if let (Some(_), Some(_)) = (f.fsync, &f.durability) {
            return Err(value(
                "fsync",
                "give fsync or its older spelling durability, not both".into(),
            ));
        }
        if let Some(s) = f.fsync {
            self.durability = if s {
                Durability::Fsync
            } else {
                Durability::Process
            };
        }
        if let Some(d) = f.durability {
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
        if let Some(d) = f.drain_timeout {
            self.drain_timeout = d;
        }
        if let Some(b) = f.journal_compact_bytes {
            self.journal_compact_bytes = b;
        }
        if let Some(a) = f.auth {
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
        }
        if let Some(r) = f.registrar {
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
        }
        if let Some(t) = f.tls {
            let (Some(cert), Some(key)) = (t.cert, t.key) else {
                return Err(value("tls", "give both cert and key".into()));
            };
            self.tls = Some(TlsSettings {
                addr: t.addr.unwrap_or_else(|| default_tls_addr(self.udp)),
                cert,
                key,
                client_ca: t.client_ca,
                peer_ca: t.peer_ca,
                allow_rsa_1024: t.allow_rsa_1024.unwrap_or(false),
            });
        }
        if let Some(g) = f.guard {
            let c = &mut self.guard;
            c.rate = g.rate.unwrap_or(c.rate);
            c.burst = g.burst.unwrap_or(c.burst);
            c.max_auth_failures = g.max_auth_failures.unwrap_or(c.max_auth_failures);
            c.failure_window = g.failure_window.unwrap_or(c.failure_window);
            c.ban_seconds = g.ban_seconds.unwrap_or(c.ban_seconds);
            c.exempt_loopback = g.exempt_loopback.unwrap_or(c.exempt_loopback);
            if c.rate > 0 && c.burst == 0 {
                return Err(value(
                    "guard.burst",
                    "must be at least 1 when rate is set".into(),
                ));
            }
        }
        if let Some(p) = f.privacy {
            self.privacy = Some(privacy_settings(p).map_err(|(k, m)| value(k, m))?);
        }
        if let Some(peers) = f.peers {
            self.peers = peers.into_iter().collect();
        }
        if let Some(w) = f.websocket {
            let s = &mut self.websocket;
            if let Some(a) = w.ws {
                s.ws = parse_optional_addr(&a).map_err(|m| value("websocket.ws", m.to_string()))?;
            }
            if let Some(a) = w.wss {
                s.wss =
                    parse_optional_addr(&a).map_err(|m| value("websocket.wss", m.to_string()))?;
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
        }
        if self.websocket.wss.is_some() && self.tls.is_none() {
            return Err(value(
                "websocket.wss",
                "secure WebSocket needs the [tls] cert and key".into(),
            ));
        }
        if let Some(c) = f.connections {
            let l = &mut self.connections;
            l.max = c.max.unwrap_or(l.max);
            l.per_ip = c.per_ip.unwrap_or(l.per_ip);
            l.per_ip_exempt = c
                .per_ip_exempt
                .unwrap_or(std::mem::take(&mut l.per_ip_exempt));
            l.reactors = c.reactors.unwrap_or(l.reactors);
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
            ] {
                if let Some(secs) = given {
                    if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
                        return Err(value(key, format!("{secs}: seconds in (0, 86400]")));
                    }
                    *slot = Duration::from_secs_f64(secs);
                }
            }
        }
        if let Some(t) = f.http_token {
            if t.len() < 16 {
                return Err(value("http_token", "at least 16 characters".into()));
            }
            self.http_token = Some(t);
        }
        if let Some(t) = f.trace {
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
        }
        if let Some(d) = f.dns {
            dns_settings(d, &mut self.dns).map_err(|(k, m)| value(k, m))?;
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

    /// Reads and applies a configuration file.
    pub fn apply_file(&mut self, path: &std::path::Path) -> Result<(), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read {
            path: path.display().to_string(),
            err,
        })?;
        self.apply_toml(&text, &path.display().to_string())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_section_is_read_and_bad_values_are_named() {
        let mut c = Config::default();
        c.apply_toml(
            "[dns]\nservers = [\"192.0.2.53\", \"[2001:db8::53]:5353\"]\nhosts = \"\"\ntimeout = 0.25\nattempts = 3\nnegative_ttl = 5\nskip_failed_for = 60\nfailover_after = 0\nrequire_dnssec = true\n",
            "t.toml",
        )
        .expect("valid");
        assert_eq!(
            c.dns.servers,
            [
                "192.0.2.53:53".parse::<SocketAddr>().unwrap(),
                "[2001:db8::53]:5353".parse().unwrap()
            ]
        );
        assert_eq!(c.dns.hosts, None);
        assert_eq!(c.dns.timeout, std::time::Duration::from_millis(250));
        assert_eq!((c.dns.attempts, c.dns.negative_ttl), (3, 5));
        assert_eq!((c.dns.skip_failed_for, c.dns.failover_after), (60, None));
        assert!(c.dns.require_dnssec);
        for (text, key) in [
            ("[dns]\nservers = [\"ns.example\"]\n", "dns.servers"),
            ("[dns]\ntimeout = 0\n", "dns.timeout"),
            ("[dns]\nattempts = 0\n", "dns.attempts"),
            ("[dns]\nskip_failed_for = 0\n", "dns.skip_failed_for"),
            ("[dns]\nfailover_after = 0.01\n", "dns.failover_after"),
            ("[dns]\nfailover_after = 40\n", "dns.failover_after"),
        ] {
            let err = Config::default().apply_toml(text, "t.toml").unwrap_err();
            assert!(err.to_string().contains(key), "{err}");
        }
        assert!(Config::default()
            .apply_toml("[dns]\nserver = []\n", "t.toml")
            .is_err());
    }

    #[test]
    fn example_file_parses_to_the_defaults() {
        let text = include_str!("../../../sipsec.example.toml");
        let mut c = Config::default();
        c.apply_toml(text, "sipsec.example.toml")
            .expect("example is valid");
        let d = Config::default();
        assert_eq!(
            (c.mode, c.udp, c.tcp, c.http),
            (d.mode, d.udp, d.tcp, d.http)
        );
        assert_eq!(
            (c.auth, c.realm.as_str(), c.digest_algorithms.clone()),
            (d.auth, d.realm.as_str(), d.digest_algorithms)
        );
        assert_eq!(
            (c.min_expires, c.max_expires, c.default_expires, c.path),
            (60, 7200, 3600, d.path)
        );
        assert_eq!((c.stateful, c.record_route), (d.stateful, d.record_route));
        assert_eq!(c.dns, d.dns);
        assert_eq!(
            c.connections, d.connections,
            "[connections] shows the defaults"
        );
        assert_eq!(c.websocket, d.websocket, "[websocket] shows the defaults");
        assert_eq!(c.redis, None, "[location] shows the embedded default");
        let mut r = Config::default();
        r.apply_toml(
            "[location]\nbackend = \"redis\"\nurl = \"redis://10.0.0.5:6379/2\"\ntimeout = 0.5\n",
            "x.toml",
        )
        .expect("redis");
        let rs = r.redis.expect("redis backend");
        assert_eq!(
            (
                rs.url.as_str(),
                rs.prefix.as_str(),
                rs.timeout,
                rs.retry_after
            ),
            (
                "redis://10.0.0.5:6379/2",
                "sipsec:",
                Duration::from_millis(500),
                5
            )
        );
        assert_eq!(rs.max_stale, None, "no limit unless set");
        let mut secret = rs.clone();
        secret.password = Some(Secret("s3cret".into()));
        let shown = format!("{secret:?}");
        assert!(
            shown.contains("password: Some(***)") && !shown.contains("s3cret"),
            "{shown}"
        );
        assert!(has_password("redis://u:p@h:1") && has_password("redis+unix:///s?pass=p"));
        assert!(!has_password("redis://u@h:1") && !has_password("redis+unix:///s?user=u"));
        let mut m = Config::default();
        m.apply_toml(
            "[location]\nbackend = \"redis\"\nurl = \"redis://h:1\"\nmax_stale = 30\n",
            "x.toml",
        )
        .expect("max_stale");
        assert_eq!(m.redis.expect("redis").max_stale, Some(30));
        for good in [
            "redis+unix:///run/redis/redis.sock",
            "redis+unix:///run/redis/redis.sock?db=2&user=sipsec&pass=s3cret",
        ] {
            let mut u = Config::default();
            u.apply_toml(
                &format!("[location]\nbackend = \"redis\"\nurl = {good:?}\n"),
                "x.toml",
            )
            .expect(good);
            assert_eq!(u.redis.expect("redis").url, good);
        }
        for (bad, needle) in [
            ("[location]\nbackend = \"redis\"\n", "needs a url"),
            (
                "[location]\nbackend = \"redis\"\nurl = \"redis+unix://run/redis.sock\"\n",
                "absolute path",
            ),
            (
                "[location]\nbackend = \"redis\"\nurl = \"redis+unix:///r.sock?db=x\"\n",
                "\"db\" is not",
            ),
            (
                "[location]\nbackend = \"redis\"\nurl = \"redis+unix:///r.sock?pass=s3cret&tls=1\"\n",
                "\"tls\" is not",
            ),
            (
                "[location]\nbackend = \"redis\"\nurl = \"redis+unix:///r.sock\"\nca = \"ca.pem\"\n",
                "rediss://",
            ),
            (
                "[location]\nbackend = \"redis\"\nurl = \"redis://h:1\"\nmax_stale = 0\n",
                "location.max_stale",
            ),
            ("[location]\nmax_stale = 30\n", "only a shared"),
            ("[location]\nbackend = \"etcd\"\n", "use embedded or redis"),
            (
                "[location]\nbackend = \"redis\"\nurl = \"10.0.0.5:6379\"\n",
                "redis://",
            ),
            ("[location]\nurl = \"redis://h:1\"\n", "backend = \"redis\""),
            (
                "[location]\nbackend = \"redis\"\nurl = \"redis://h:1\"\ntimeout = 0\n",
                "location.timeout",
            ),
            (
                "[location]\nbackend = \"redis\"\nurl = \"redis://h:1\"\nca = \"ca.pem\"\n",
                "rediss://",
            ),
            (
                "[location]\nbackend = \"redis\"\nurl = \"rediss://h:1\"\ncert = \"c.pem\"\n",
                "both cert and key",
            ),
        ] {
            let e = Config::default()
                .apply_toml(bad, "x.toml")
                .expect_err(bad)
                .to_string();
            assert!(e.contains(needle), "{bad}: {e}");
            assert!(!e.contains("s3cret"), "{bad}: {e}");
        }
        let mut w = Config::default();
        let e = w
            .apply_toml("[websocket]\nwss = \"127.0.0.1:0\"\n", "x.toml")
            .expect_err("wss without tls");
        assert!(e.to_string().contains("[tls]"), "{e}");
        let mut w = Config::default();
        w.apply_toml(
            "[websocket]\nws = \"127.0.0.1:8080\"\norigins = [\"https://a.example\"]\n",
            "x.toml",
        )
        .expect("ws");
        assert_eq!(
            w.websocket.ws,
            Some("127.0.0.1:8080".parse().expect("addr"))
        );
        assert_eq!(w.websocket.origins, ["https://a.example"]);
    }

    #[test]
    fn connection_settings_are_checked() {
        let mut c = Config::default();
        c.apply_toml(
            "[connections]\nper_ip = 8\nper_ip_exempt = [\"10.0.0.1\"]\nmessage_timeout = 2.5\n",
            "t",
        )
        .expect("valid");
        assert_eq!(c.connections.per_ip, 8);
        assert_eq!(c.connections.message_timeout, Duration::from_millis(2500));
        assert_eq!(
            c.connections.per_ip_exempt,
            ["10.0.0.1".parse::<std::net::IpAddr>().unwrap()]
        );
        for bad in [
            "[connections]\nqueue_bytes = 10\n",
            "[connections]\nidle_timeout = 0\n",
            "[connections]\naccept_burst = 0\n",
            "[connections]\nper_ip_exempt = [\"nope\"]\n",
        ] {
            let e = Config::default()
                .apply_toml(bad, "t")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("connections") || e.contains("nope") || e.contains("IP"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn trace_and_token_settings() {
        let mut c = Config::default();
        c.apply_toml(
            "http_token = \"0123456789abcdef\"\n[trace]\nhep = \"udp:collector.example:9060\"\nmethods = [\"invite\"]\nsample = 0.5\n",
            "t.toml",
        )
        .expect("valid");
        let t = c.trace.expect("trace on");
        assert_eq!(t.collector, "collector.example:9060");
        assert_eq!(
            (t.methods, t.sample, t.capture_id),
            (vec!["INVITE".to_owned()], 0.5, 2001)
        );
        assert_eq!(c.http_token.as_deref(), Some("0123456789abcdef"));
        for (bad, key) in [
            ("[trace]\nhep = \"tcp:h:1\"\n", "trace.hep"),
            ("[trace]\nhep = \"udp:h:0\"\n", "trace.hep"),
            ("[trace]\nsample = 0.5\n", "trace.hep"),
            ("[trace]\nhep = \"udp:h:1\"\nsample = 0\n", "trace.sample"),
            ("http_token = \"short\"\n", "http_token"),
        ] {
            let e = Config::default()
                .apply_toml(bad, "t.toml")
                .expect_err(bad)
                .to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }

    #[test]
    fn values_and_errors() {
        let mut c = Config::default();
        c.apply_toml(
            "mode = \"proxy\"\nudp = \"127.0.0.1:5070\"\nhttp = \"off\"\n[auth]\nenabled = true\ndigest = [\"md5\"]\n",
            "x.toml",
        )
        .expect("valid");
        assert_eq!(c.mode, Mode::Proxy);
        assert_eq!(
            c.tcp,
            Some("127.0.0.1:5070".parse().expect("addr")),
            "tcp follows udp"
        );
        assert_eq!(c.http, None);
        assert_eq!(c.digest_algorithms, vec![Algorithm::Md5]);
        assert_eq!(c.tls, None, "TLS stays off without a [tls] table");
        c.apply_toml("[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n", "x.toml")
            .expect("valid");
        c.apply_toml(
            "[privacy]\nkeys = [{ id = 2, key = \"k.pem\" }]\nmode = \"stateless\"\n[peers]\n\"b.example\" = \"127.0.0.1:5080\"\n",
            "x.toml",
        )
        .expect("valid");
        let p = c.privacy.clone().expect("privacy on");
        assert_eq!((p.keys.len(), p.cache), (1, 0));
        assert_eq!(
            c.peers,
            vec![("b.example".into(), "127.0.0.1:5080".parse().expect("addr"))]
        );
        let tls = c.tls.clone().expect("tls on");
        // Beside UDP (5070 here): the next port.
        assert_eq!(tls.addr, "127.0.0.1:5071".parse().expect("addr"));
        // Moved off 5060, TLS moves beside it.
        assert_eq!(
            default_tls_addr("10.0.0.1:5080".parse().expect("addr")),
            "10.0.0.1:5081".parse().expect("addr")
        );
        assert_eq!((tls.client_ca, tls.peer_ca), (None, None));
        for (bad, needle) in [
            ("mode = \"gateway\"", "mode"),
            ("udpp = \"1.2.3.4:5\"", "unknown field"),
            ("tcp = \"nowhere\"", "tcp"),
            ("[auth]\ndigest = [\"sha-1\"]", "auth.digest"),
            ("[registrar]\nmin_expires = 9000", "min_expires"),
            ("[registrar]\npath = \"maybe\"", "registrar.path"),
            ("workers = \"two\"", "invalid type"),
            ("[tls]\ncert = \"c.pem\"", "tls: give both cert and key"),
            ("[tls]\ncertificate = \"c.pem\"", "unknown field"),
            ("[privacy]\nmode = \"stateful\"", "privacy: give keys"),
            ("[privacy]\naes = \"ecb\"", "privacy.aes"),
            ("[privacy]\naes = \"gcm\"\nmode = \"lazy\"", "privacy.mode"),
            ("[privacy]\naes = \"gcm\"\ncache = 0", "privacy.cache"),
            (
                "[peers]\n\"b.example\" = \"nowhere\"",
                "invalid socket address",
            ),
        ] {
            let e = Config::default()
                .apply_toml(bad, "x.toml")
                .expect_err(bad)
                .to_string();
            assert!(e.contains(needle) && e.starts_with("x.toml"), "{bad}: {e}");
        }
    }

    #[test]
    fn keys_mirror_the_flags() {
        let mut c = Config::default();
        c.apply_toml("fsync = true\ntcp = false\nhttp = false\n", "x.toml")
            .expect("valid");
        assert_eq!(
            (c.durability, c.tcp, c.http),
            (Durability::Fsync, None, None),
            "as --fsync --no-tcp --no-http"
        );
        c.apply_toml("fsync = false\ntcp = true\nhttp = true\n", "x.toml")
            .expect("valid");
        assert_eq!(
            (c.durability, c.tcp, c.http),
            (Durability::Process, Some(c.udp), Some(DEFAULT_HTTP))
        );
        c.apply_toml("durability = \"fsync\"\ntcp = \"off\"\n", "x.toml")
            .expect("the older spellings still work");
        assert_eq!((c.durability, c.tcp), (Durability::Fsync, None));
        let both = Config::default()
            .apply_toml("fsync = true\ndurability = \"fsync\"\n", "x.toml")
            .expect_err("one or the other");
        assert!(both.to_string().contains("not both"), "{both}");
        let typo = Config::default()
            .apply_toml("tcp = 5060\n", "x.toml")
            .expect_err("a number is no address")
            .to_string();
        assert!(typo.contains("an address"), "{typo}");
    }

    #[test]
    fn syntax_errors_keep_the_parser_snippet() {
        let e = Config::default()
            .apply_toml("mode = \"proxy\"\nworkers = = 2\n", "x.toml")
            .expect_err("bad syntax")
            .to_string();
        let lines: Vec<&str> = e.lines().collect();
        assert!(lines.len() >= 4, "several lines: {e}");
        assert!(
            lines[0].starts_with("x.toml: ") && lines[0].contains("line 2"),
            "{e}"
        );
        // The caret sits under the fault: the column of the second `=`.
        let source = lines
            .iter()
            .position(|l| l.contains("workers = = 2"))
            .expect("source line");
        let caret = lines[source + 1];
        let at = |l: &str, c: char| l.find(c).expect("found");
        let code_start = at(lines[source], 'w');
        assert_eq!(at(caret, '^') - code_start, "workers = ".len(), "{e}");
    }
}
