//! The phone: registration with digest authentication, calls out
//! (INVITE with an SDP offer, 100/180/183/200, ACK, 401/407 retry,
//! CANCEL when unanswered, BYE) and calls in (auto-answer), over UDP, with
//! RTP or SDES-keyed SRTP media ([`crate::session`]).

mod answer;
mod call;
mod domain;
mod drive;
mod register;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use media::g711::Law;
use sip_core::transaction::TimerConfig;
use sip_core::{Message, Method};
use srtp::sdes::{self, Crypto};
use srtp::Profile;

use crate::agent::{self, Agent, Event, Identity, Setup};
use crate::sdp::{self, Audio};
use crate::session::{self, MediaReport, Sockets, Source};
use crate::signal::Signal;
use crate::sip;
use drive::Step;

/// Why a phone operation failed: each with the words a user needs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PhoneError {
    /// A socket failed.
    #[error("network: {0}")]
    Io(#[from] std::io::Error),
    /// Nobody answered in time.
    #[error("no response to {0} within 32 s: is the server at that address, or has it banned this address after failed logins (`sipsec ban list` on the server's host)?")]
    Timeout(String),
    /// The callee is busy (486, 600).
    #[error("busy: {0}")]
    Busy(String),
    /// No such user (404, 604).
    #[error("not found: {0}")]
    NotFound(String),
    /// The server refused our credentials.
    #[error("authentication failed: {0}")]
    AuthFailed(String),
    /// The callee takes none of our SRTP suites (or needs SRTP we lack).
    #[error("no SRTP suite in common (488): {0}")]
    NoCommonSuite(String),
    /// Any other final response.
    #[error("{what} failed: {code} {reason}")]
    Status {
        /// The request.
        what: String,
        /// The status code.
        code: u16,
        /// The reason phrase.
        reason: String,
    },
    /// The peer's SDP could not be used.
    #[error("{0}")]
    Sdp(#[from] crate::sdp::SdpError),
    /// SDES over signalling anyone can read, without the opt-in.
    #[error("SDES puts the SRTP keys in the SDP, and SIP over UDP carries them in clear: pass --insecure-sdes to accept that")]
    InsecureSdes,
    /// The call was not answered before the ring timeout; it was cancelled.
    #[error("no answer within {0} s; the call was cancelled")]
    NoAnswer(u64),
    /// A bad argument.
    #[error("{0}")]
    Invalid(String),
    /// A user ID could not be encrypted (PrivaSIP).
    #[error("identity privacy: {0}")]
    Privacy(String),
}

/// Who the phone is and how it talks.
#[derive(Debug, Clone)]
pub struct Config {
    /// User name (and digest username).
    pub user: String,
    /// Digest password, when the server challenges.
    pub password: Option<String>,
    /// The domain of our address of record.
    pub domain: String,
    /// Outbound proxy and registrar; `None` for peer-to-peer calls.
    pub server: Option<SocketAddr>,
    /// Whose calls ring, with a server: [`Callers`].
    pub callers: Callers,
    /// Local SIP address (UDP).
    pub bind: SocketAddr,
    /// The address to put in Contact and SDP (from STUN); default: the
    /// local address used towards the peer.
    pub public_ip: Option<IpAddr>,
    /// RTP port (0: any free even port).
    pub rtp_port: u16,
    /// SRTP suites, in preference order; empty: plain RTP.
    pub srtp: Vec<Profile>,
    /// Accept SDES keys over unencrypted signalling.
    pub insecure_sdes: bool,
    /// The G.711 law we prefer.
    pub law: Law,
    /// Registration lifetime, s.
    pub expires: u32,
    /// Seconds an outgoing call may ring before CANCEL.
    pub ring_timeout: u64,
    /// Signal over TLS to the server instead of UDP.
    pub tls: Option<TlsSetup>,
    /// Identity privacy (PrivaSIP), off when `None`.
    pub privacy: Option<PrivacySetup>,
}

/// Whose calls a phone with a server lets ring. A phone on UDP can be
/// reached by anyone who finds its port (scanners ring every address
/// they find, and a call straight to the phone bypasses the server's
/// authentication, its records and its policy), so by default only a call
/// from the server's address rings; any other gets 403. Without a server
/// every call rings: there is no one else to come through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Callers {
    /// The server's address, and these (the other nodes of a cluster that
    /// reaches phones on UDP from any node: `--trust`).
    Server(Vec<IpAddr>),
    /// Anyone (a loudly named opt-in: `--insecure-any-caller`).
    Anyone,
}

impl Default for Callers {
    fn default() -> Self {
        Self::Server(Vec::new())
    }
}

impl Callers {
    /// The addresses whose calls ring a phone whose server is `server`
    /// (`None`: anyone's), for [`Agent::ring_only_from`].
    pub fn admitted(&self, server: Option<SocketAddr>) -> Option<Vec<IpAddr>> {
        match (self, server) {
            (_, None) | (Self::Anyone, _) => None,
            (Self::Server(also), Some(s)) => Some(
                std::iter::once(s.ip())
                    .chain(also.iter().copied())
                    .collect(),
            ),
        }
    }
}

/// A shareable encrypter of user IDs.
pub type IdCipher = std::sync::Arc<dyn privacy::IdCipher + Send + Sync>;

/// PrivaSIP (opt-in): which user IDs leave the phone encrypted, and for
/// whom. Level 1 encrypts our user (From, the digest username) for our
/// home proxy, shows "Anonymous" and drops the user from Contact; level 2
/// also encrypts the callee's user (Request-URI, To) for the callee's home
/// proxy. Every registration and every call gets fresh pseudonyms; within
/// one they stay, as RFC 3261 wants From and To to.
#[derive(Clone)]
pub struct PrivacySetup {
    /// Encrypts for our home proxy.
    pub home: IdCipher,
    /// Encrypts for the callee's home proxy (PrivaSIP-2); `None`: level 1.
    pub callee: Option<IdCipher>,
    /// Hex (published) or base32.
    pub encoding: privacy::Encoding,
    /// Longest pseudonym allowed, in characters.
    pub limit: usize,
    /// PrivaSIP-3: enroll at each registration (HPKE to the home key)
    /// and put a fresh single-use ticket where our ID goes on each call.
    pub tickets: bool,
    /// The home proxy's ML-KEM-768 key: enrollments are hybrid
    /// (X25519 + ML-KEM-768).
    pub pq: Option<std::sync::Arc<privacy::pq::PqPublic>>,
}

impl std::fmt::Debug for PrivacySetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrivacySetup")
            .field("home", &self.home.scheme())
            .field("callee", &self.callee.as_ref().map(|c| c.scheme()))
            .field("encoding", &self.encoding)
            .finish()
    }
}

impl PrivacySetup {
    fn seal(&self, cipher: &IdCipher, id: &str) -> Result<String, PhoneError> {
        cipher
            .pseudonym(id, self.encoding, self.limit)
            .map_err(|e| PhoneError::Privacy(e.to_string()))
    }
}

/// How to reach the server over TLS.
#[derive(Clone)]
pub struct TlsSetup {
    /// Roots and protocol versions.
    pub config: std::sync::Arc<rustls::ClientConfig>,
    /// The name (or IP address) the server's certificate must carry.
    pub name: String,
}

impl std::fmt::Debug for TlsSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSetup")
            .field("name", &self.name)
            .finish()
    }
}

/// One finished call.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CallReport {
    /// The peer's address of record.
    pub peer: String,
    /// Provisional responses seen (caller side).
    pub provisional: Vec<u16>,
    /// Seconds from INVITE to 200 OK (caller side).
    pub setup_s: f64,
    /// Who hung up: "local" or "remote".
    pub hangup: String,
    /// The media.
    pub media: MediaReport,
}

/// RFC 3261 §17 timers: sip-core's, not a copy.
const TIMERS: TimerConfig = TimerConfig::RFC3261;

/// A SIP phone on one UDP socket (or a TLS connection): a blocking
/// driver around the sans-IO [`Agent`], with the media beside it.
pub struct Phone {
    cfg: Config,
    sig: Signal,
    local: SocketAddr,
    agent: Agent,
    /// Calls that came while the phone waits for one, not yet taken.
    invites: std::collections::VecDeque<Incoming>,
    /// The phone waits for a call: calls queue instead of drawing 486.
    accepting: bool,
    /// Our address seen by the server moved: register again.
    remapped: bool,
    /// Calls refused as not through the server.
    strangers: u64,
    /// Calls the peer hung up (BYE answered) before a step waited for it.
    hung_up: std::collections::VecDeque<String>,
    log: Box<dyn FnMut(&str) + Send>,
    /// How often a registration is kept alive while waiting (`None`: not).
    keepalive: Option<Duration>,
    /// The registration kept alive, once one is granted.
    kept: Option<Kept>,
    /// PrivaSIP-3 tickets the home proxy handed out, unused (encoded).
    tickets: std::collections::VecDeque<String>,
    /// PrivaSIP-3 level 2: tickets of the callees' domains.
    domains: domain::Domains,
}

/// A registration kept alive while the phone waits for a call.
#[derive(Debug, Clone)]
struct Kept {
    /// The lifetime asked for.
    expires: u32,
    /// When it is refreshed (at half the granted lifetime).
    refresh_at: Instant,
    /// When the next keep-alive goes.
    next_ping: Instant,
    /// The STUN transaction of the last keep-alive.
    txid: [u8; 12],
    /// Our address as the server sees it (the NAT's mapping).
    mapped: Option<SocketAddr>,
}

/// Our Contact URI: under PrivaSIP the host only.
fn contact(cfg: &Config, local: SocketAddr, reliable: bool) -> String {
    let transport = if reliable { ";transport=tls" } else { "" };
    let user = if cfg.privacy.is_some() {
        String::new()
    } else {
        format!("{}@", cfg.user)
    };
    format!("sip:{user}{}{transport}", agent::host(local))
}

/// The local address the system would use to reach `peer`.
fn local_ip_towards(peer: SocketAddr) -> Option<IpAddr> {
    let bind = if peer.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let s = UdpSocket::bind(bind).ok()?;
    s.connect(peer).ok()?;
    Some(s.local_addr().ok()?.ip())
}

/// A call offered to us: its Call-ID, source and INVITE.
type Incoming = (String, SocketAddr, Vec<u8>);

/// What a call's media needs once the offer and answer are agreed.
struct Media {
    sockets: Sockets,
    remote: SocketAddr,
    law: Law,
    source: Source,
    packets: u64,
    crypto: Option<session::Crypto>,
}

impl Phone {
    /// Binds the phone's SIP socket. Refuses SRTP over UDP signalling
    /// unless `insecure_sdes` says the user accepts it.
    pub fn new(cfg: Config) -> Result<Self, PhoneError> {
        if !cfg.srtp.is_empty() && !cfg.insecure_sdes && cfg.tls.is_none() {
            return Err(PhoneError::InsecureSdes);
        }
        if cfg.user.is_empty() || cfg.user.contains(['@', ':', ' ', '<', '>']) {
            return Err(PhoneError::Invalid(format!(
                "user {:?}: a plain SIP user name",
                cfg.user
            )));
        }
        let sig = match (&cfg.tls, cfg.server) {
            (Some(t), Some(server)) => Signal::tls(server, &t.name, t.config.clone())?,
            (Some(_), None) => {
                return Err(PhoneError::Invalid(
                    "TLS signalling needs --server (the phone connects to it)".into(),
                ))
            }
            (None, _) => Signal::Udp(UdpSocket::bind(cfg.bind)?),
        };
        let mut local = sig.local_addr()?;
        if local.ip().is_unspecified() {
            let towards = cfg
                .server
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 5060)));
            local.set_ip(local_ip_towards(towards).unwrap_or(IpAddr::from([127, 0, 0, 1])));
        }
        if let Some(ip) = cfg.public_ip {
            local.set_ip(ip);
        }
        let mut agent = Agent::new(Setup {
            user: cfg.user.clone(),
            domain: cfg.domain.clone(),
            password: cfg.password.clone(),
            local,
            transport: sig.via(),
            reliable: sig.reliable(),
            contact: contact(&cfg, local, sig.reliable()),
            timers: TIMERS,
            seed: None,
        });
        agent.ring_only_from(cfg.callers.admitted(cfg.server));
        Ok(Self {
            cfg,
            sig,
            local,
            agent,
            invites: std::collections::VecDeque::new(),
            accepting: false,
            remapped: false,
            strangers: 0,
            hung_up: std::collections::VecDeque::new(),
            log: Box::new(|_| {}),
            keepalive: None,
            tickets: std::collections::VecDeque::new(),
            domains: domain::Domains::default(),
            kept: None,
        })
    }

    /// The PrivaSIP-3 tickets left (encoded), taken out of the phone.
    pub fn take_tickets(&mut self) -> Vec<String> {
        self.tickets.drain(..).collect()
    }

    /// The TLS session's version, suite and key-exchange group, over TLS.
    pub fn tls_session(&self) -> Option<String> {
        self.sig.tls_session()
    }

    /// Reports progress lines ("180 Ringing", "call established") here.
    pub fn on_progress(&mut self, log: impl FnMut(&str) + Send + 'static) {
        self.log = Box::new(log);
    }

    /// Keeps registrations alive while the phone waits for a call (a
    /// phone behind NAT): a keep-alive every `every` (RFC 5626 §4.4.1).
    pub fn keep_alive(&mut self, every: Duration) {
        self.keepalive = Some(every.max(Duration::from_secs(1)));
    }

    /// The phone's SIP address (for Contact).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn aor(&self) -> String {
        format!("sip:{}@{}", self.cfg.user, self.cfg.domain)
    }

    /// The RTCP CNAME: our address of record, or under PrivaSIP a random
    /// one (RFC 7022), since RTCP may travel in clear.
    fn cname(&self) -> String {
        match self.cfg.privacy {
            Some(_) => format!("{}@{}", sip::token(8), self.local.ip()),
            None => self.aor(),
        }
    }

    /// Our From for a new registration or call: under PrivaSIP a fresh
    /// pseudonym for the home proxy, shown as "Anonymous" — for a call
    /// under PrivaSIP-3 the next unused ticket (one symmetric operation at
    /// the proxy) while any is left.
    fn identity(&mut self, call: bool) -> Result<Identity, PhoneError> {
        let Some(p) = &self.cfg.privacy else {
            return Ok(Identity {
                from: format!("<{}>", self.aor()),
                shown: None,
            });
        };
        let ticket = if call && p.tickets {
            self.tickets.pop_front()
        } else {
            None
        };
        let pseudonym = match ticket {
            Some(t) => t,
            None => p.seal(&p.home, &self.cfg.user)?,
        };
        Ok(Identity {
            from: format!("\"Anonymous\" <sip:{pseudonym}@{}>", self.cfg.domain),
            shown: Some(pseudonym),
        })
    }

    /// The Request-URI and To of a call to `target`: PrivaSIP-2 puts a
    /// fresh pseudonym for the callee's home proxy in the user part;
    /// PrivaSIP-3 one sealed under a ticket of the callee's domain.
    fn callee_uri(&mut self, target: &str) -> Result<String, PhoneError> {
        if self.cfg.privacy.as_ref().is_none_or(|p| p.callee.is_none()) {
            return Ok(target.to_string());
        }
        let (scheme, rest) = target
            .split_once(':')
            .ok_or_else(|| PhoneError::Invalid(format!("{target}: not a SIP URI")))?;
        let (user, host) = rest.split_once('@').ok_or_else(|| {
            PhoneError::Invalid(format!("{target}: PrivaSIP-2 needs a user part to encrypt"))
        })?;
        let domain = host.split([';', ':', '>']).next().unwrap_or(host);
        let pseudonym = match self.callee_ticket(user, domain)? {
            Some(t) => t,
            None => match self
                .cfg
                .privacy
                .as_ref()
                .and_then(|p| Some((p, p.callee.as_ref()?)))
            {
                Some((p, callee)) => p.seal(callee, user)?,
                None => return Ok(target.to_string()),
            },
        };
        Ok(format!("{scheme}:{pseudonym}@{host}"))
    }
}

/// Send and receive contexts from our attribute and the peer's.
fn contexts(mine: &Crypto, theirs: &Crypto) -> Result<session::Crypto, PhoneError> {
    let opts = srtp::Options::default();
    let bad = |e: srtp::Error| PhoneError::Invalid(format!("SRTP keys: {e}"));
    Ok(session::Crypto {
        tx: mine.context(opts).map_err(bad)?,
        rx: theirs.context(opts).map_err(bad)?,
        suite: mine.suite.name().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_server_and_whom_it_trusts_ring_a_phone_with_a_server() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("address");
        let server = Some(SocketAddr::new(ip("192.0.2.1"), 5060));
        assert_eq!(
            Callers::default().admitted(server),
            Some(vec![ip("192.0.2.1")])
        );
        let node = Callers::Server(vec![ip("198.51.100.7")]);
        assert_eq!(
            node.admitted(server),
            Some(vec![ip("192.0.2.1"), ip("198.51.100.7")])
        );
        assert_eq!(Callers::Anyone.admitted(server), None);
        // Without a server anyone may call.
        assert_eq!(Callers::default().admitted(None), None);
    }
}
