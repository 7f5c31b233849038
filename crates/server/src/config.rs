//! Server configuration: what `sipsec serve` runs, with secure defaults.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use sip_core::digest::Algorithm;

pub use crate::config_connections::{
    ConnectionLimits, DEFAULT_SPREAD_QUEUE, MAX_REACTORS, MAX_SPREAD_QUEUE,
};
use crate::config_media::MediaSettings;

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

/// Default `batch_wait`: half a millisecond, so that with timer slack and
/// scheduling the added delay stays under a millisecond.
pub const DEFAULT_BATCH_WAIT: Duration = Duration::from_micros(500);

/// Largest `batch_wait` accepted: SIP's timers start at 500 ms, and a
/// wait is paid by every message that meets it.
pub const MAX_BATCH_WAIT: Duration = Duration::from_millis(10);

/// `batch_wait` from microseconds, refused past [`MAX_BATCH_WAIT`].
pub fn batch_wait(us: u64) -> Result<Duration, String> {
    let wait = Duration::from_micros(us);
    if wait > MAX_BATCH_WAIT {
        return Err(format!(
            "{us} µs: at most {} (0 never waits)",
            MAX_BATCH_WAIT.as_micros()
        ));
    }
    Ok(wait)
}

/// `[connections] spread_queue`, refused outside 1 to [`MAX_SPREAD_QUEUE`].
pub fn spread_queue(q: usize) -> Result<usize, String> {
    if (1..=MAX_SPREAD_QUEUE).contains(&q) {
        Ok(q)
    } else {
        Err(format!("{q}: from 1 to {MAX_SPREAD_QUEUE}"))
    }
}

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
    /// PrivaSIP-3: tickets handed to a phone that enrolls in its
    /// REGISTER (0: none).
    pub tickets: usize,
    /// Seconds a ticket may be used.
    pub ticket_ttl: u64,
    /// The ML-KEM-768 key enrollments may also encapsulate to (the
    /// hybrid post-quantum half).
    pub pq_key: Option<PathBuf>,
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
    /// Key-exchange groups, in order of preference (IANA names; checked
    /// when read): by default the hybrid post-quantum X25519MLKEM768
    /// first, then the classical ones.
    pub groups: Vec<String>,
    /// Only post-quantum key exchange (TLS 1.3 with an ML-KEM group): a
    /// classical-only client is refused with a handshake_failure alert.
    pub require_pq: bool,
    /// Resume TLS 1.3 sessions from stateless tickets (RFC 8446 §2.2,
    /// §4.6.1; AEAD-sealed under a key that rotates every 6 hours, with a
    /// fresh (EC)DHE exchange on resumption, no 0-RTT): a phone that
    /// reconnects skips the certificate and its signature, however many
    /// phones there are. Off: a server-side cache of 256 sessions.
    pub session_tickets: bool,
}

impl TlsSettings {
    /// TLS on `addr` with this certificate chain and key, every other
    /// setting its default (no client certificates, the default groups,
    /// session tickets on).
    pub fn with_files(addr: SocketAddr, cert: PathBuf, key: PathBuf) -> Self {
        Self {
            addr,
            cert,
            key,
            client_ca: None,
            peer_ca: None,
            allow_rsa_1024: false,
            groups: Self::default_groups(),
            require_pq: false,
            session_tickets: true,
        }
    }

    /// The default groups (see [`sip_tls::DEFAULT_GROUPS`]).
    pub fn default_groups() -> Vec<String> {
        sip_tls::DEFAULT_GROUPS
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    }

    /// Checks `groups` and `require_pq` together: a message for what is
    /// wrong.
    pub fn check_groups(groups: &[String], require_pq: bool) -> Result<(), String> {
        let g = sip_tls::Groups::parse(groups)?;
        if require_pq && !g.any_post_quantum() {
            return Err(format!(
                "require_pq needs a post-quantum group in groups ({})",
                groups.join(", ")
            ));
        }
        Ok(())
    }
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

/// Checks an interface name for `udp_xdp` (IFNAMSIZ: at most 15 bytes,
/// no '/', no whitespace).
pub fn interface_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 15
        && !s.contains('/')
        && !s.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{s:?} is not an interface name (1 to 15 bytes, no '/' or spaces)"
        ))
    }
}

/// How datagrams are spread over the UDP workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UdpBalance {
    /// By a hash of each datagram's Call-ID (an eBPF program on the
    /// SO_REUSEPORT group; Linux 5.17, `CAP_BPF` and `CAP_PERFMON`): one busy peer uses
    /// every worker, and one call's messages all reach one worker, in
    /// the order they came. Where the program cannot be loaded, `Flow`.
    #[default]
    Call,
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
    Flow,
}

impl UdpBalance {
    /// The names [`UdpBalance::parse`] takes, for messages.
    pub const CHOICES: &str = "call, flow, spread or shared";

    /// Parses `call`, `spread`, `shared` or `flow`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "call" => Some(Self::Call),
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
    /// Interface whose IPv4 UDP datagrams for the UDP port come to the
    /// workers past the kernel's stack (AF_XDP; worker `i` on receive
    /// queue `i`), the sockets serving everything else; `None`: sockets
    /// only. Where the kernel or the privileges lack it the server says
    /// why and stays on its sockets.
    pub udp_xdp: Option<String>,
    /// Longest a busy transport thread waits after a read before the
    /// next, so that one read takes several messages (`io::pace`): the
    /// most a message's answer is delayed by it. Zero: never wait.
    pub batch_wait: Duration,
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
    /// Calls' media through rtpengine relays (`[media]`).
    pub media: MediaSettings,
    /// Signed caller identity, STIR/SHAKEN (`[stir]`).
    pub stir: crate::config_stir::StirSettings,
    /// Trunks calls leave through (`[[trunk]]`).
    pub trunks: Vec<crate::config_trunks::TrunkConfig>,
    /// The configuration file it was read from, if any (a reload reads
    /// the trunks from it again).
    pub config_file: Option<std::path::PathBuf>,
    /// Peer domains (of `peers`) the inside network is hidden from, as
    /// from a trunk with `hide_topology`.
    pub hide_topology_peers: Vec<String>,
    /// Dialogs and call records (`[calls]`).
    pub calls: crate::config_calls::CallsSettings,
    /// T1, T2 and T4 of every transaction (`[timers]`; RFC 3261's 500 ms,
    /// 4 s and 5 s by default).
    pub timers: sip_core::transaction::TimerConfig,
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

impl Default for Config {
    fn default() -> Self {
        let udp: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 5060));
        Self {
            mode: Mode::Registrar,
            udp,
            tcp: Some(udp),
            http: Some(DEFAULT_HTTP),
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            udp_balance: UdpBalance::Call,
            udp_xdp: None,
            batch_wait: DEFAULT_BATCH_WAIT,
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
            media: MediaSettings::default(),
            stir: Default::default(),
            trunks: Vec::new(),
            config_file: None,
            hide_topology_peers: Vec::new(),
            calls: Default::default(),
            timers: Default::default(),
        }
    }
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

impl Config {
    /// Why the `[media]` settings cannot run with the rest: only a
    /// stateful proxy's transactions can hold what the relay answers.
    pub fn media_problem(&self) -> Option<String> {
        if !self.media.on() {
            return None;
        }
        if self.mode != Mode::Proxy || !self.stateful {
            return Some(format!(
                "mode {:?} relays calls through the stateful proxy: serve with --mode proxy --stateful",
                self.media.mode.as_str()
            ));
        }
        if self.media.relays.relays.is_empty() {
            return Some("no relay: give [media] relays".into());
        }
        None
    }

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
    fn udp_xdp_names_an_interface() {
        let mut c = Config::default();
        assert_eq!(c.udp_xdp, None);
        c.apply_toml("udp_xdp = \"eth1\"\n", "t.toml")
            .expect("valid");
        assert_eq!(c.udp_xdp.as_deref(), Some("eth1"));
        for bad in ["", "a-name-of-16-byte", "../eth0", "eth 0"] {
            let err = Config::default()
                .apply_toml(&format!("udp_xdp = {bad:?}\n"), "t.toml")
                .unwrap_err();
            assert!(err.to_string().contains("udp_xdp"), "{err}");
        }
    }

    #[test]
    fn batch_wait_is_bounded() {
        let mut c = Config::default();
        c.apply_toml("batch_wait_us = 0\n", "t.toml")
            .expect("0 is off");
        assert!(c.batch_wait.is_zero());
        c.apply_toml("batch_wait_us = 10000\n", "t.toml")
            .expect("the most");
        assert_eq!(c.batch_wait, MAX_BATCH_WAIT);
        let err = c
            .apply_toml("batch_wait_us = 10001\n", "t.toml")
            .unwrap_err();
        assert!(err.to_string().contains("batch_wait_us"), "{err}");
        assert!(c.apply_toml("batch_wait_us = -1\n", "t.toml").is_err());
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
        assert_eq!(c.batch_wait, d.batch_wait);
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
            "[connections]\nper_ip = 8\nper_ip_exempt = [\"10.0.0.1\"]\nmessage_timeout = 2.5\nspread_queue = 16\nsend_timeout = 5\n",
            "t",
        )
        .expect("valid");
        assert_eq!(c.connections.per_ip, 8);
        assert_eq!(c.connections.spread_queue, 16);
        assert_eq!(
            Config::default().connections.spread_queue,
            DEFAULT_SPREAD_QUEUE
        );
        assert_eq!(c.connections.message_timeout, Duration::from_millis(2500));
        assert_eq!(c.connections.send_timeout, Duration::from_secs(5));
        assert_eq!(
            c.connections.per_ip_exempt,
            ["10.0.0.1".parse::<std::net::IpAddr>().unwrap()]
        );
        for bad in [
            "[connections]\nqueue_bytes = 10\n",
            "[connections]\nidle_timeout = 0\n",
            "[connections]\nsend_timeout = -1\n",
            "[connections]\naccept_burst = 0\n",
            "[connections]\nspread_queue = 0\n",
            "[connections]\nspread_queue = 65537\n",
            "[connections]\nreactors = 100000\n",
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
        assert!(tls.session_tickets, "resumption from tickets by default");
        c.apply_toml(
            "[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nsession_tickets = false\n",
            "x.toml",
        )
        .expect("valid");
        assert!(!c.tls.as_ref().expect("tls on").session_tickets);
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
            ("[guard]\nipv6_prefix = 16", "guard.ipv6_prefix"),
            ("[guard]\nipv6_prefix = 129", "32 to 128"),
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
