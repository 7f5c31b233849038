//! Server configuration: what `sipsec serve` runs, with secure defaults.

use std::net::SocketAddr;
use std::path::PathBuf;

use sip_core::digest::Algorithm;

use crate::location::Durability;

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
    /// Address put in Via and used to recognise requests for this server;
    /// defaults to the UDP address.
    pub advertise: SocketAddr,
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
    /// Shortest registration accepted (423 below it, RFC 3261 §10.3 step 7).
    pub min_expires: u32,
    /// Longest registration granted; longer requests are shortened.
    pub max_expires: u32,
    /// Registration time when the request names none.
    pub default_expires: u32,
}

impl Default for Config {
    fn default() -> Self {
        let udp: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 5060));
        Self {
            mode: Mode::Registrar,
            udp,
            tcp: Some(udp),
            http: Some(SocketAddr::from(([127, 0, 0, 1], 8060))),
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            advertise: udp,
            domains: vec!["localhost".to_owned()],
            auth: false,
            realm: "sipsec".to_owned(),
            digest_algorithms: vec![Algorithm::Sha256, Algorithm::Md5],
            users: PathBuf::from("users.tsv"),
            nonce_ttl: 300,
            data_dir: PathBuf::from("sipsec-data"),
            durability: Durability::Process,
            min_expires: 60,
            max_expires: 7200,
            default_expires: 3600,
        }
    }
}
