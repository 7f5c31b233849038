//! The phone: registration with digest authentication, calls out
//! (INVITE with an SDP offer, 100/180/183/200, ACK, 401/407 retry,
//! CANCEL when unanswered, BYE) and calls in (auto-answer), over UDP, with
//! RTP or SDES-keyed SRTP media ([`crate::session`]).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use media::g711::Law;
use sip_core::auth::Challenge;
use sip_core::transaction::{ClientInvite, ClientNonInvite, Output, TimerConfig};
use sip_core::{HeaderName, Message, StatusCode};
use srtp::sdes::{self, Crypto};
use srtp::Profile;

use crate::sdp::{self, Audio};
use crate::session::{self, MediaReport, Sockets, Source};
use crate::signal::Signal;
use crate::sip::{self, Request};

/// Why a phone operation failed: each with the words a user needs.
#[derive(Debug, thiserror::Error)]
pub enum PhoneError {
    /// A socket failed.
    #[error("network: {0}")]
    Io(#[from] std::io::Error),
    /// Nobody answered in time.
    #[error("no response to {0} within 32 s (is the server at that address?)")]
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

/// Who we say we are in one registration or call.
#[derive(Debug, Clone)]
struct Identity {
    /// From (and a REGISTER's To) name-addr.
    from: String,
    /// The digest `username=` (a pseudonym under PrivaSIP).
    shown: Option<String>,
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
const T1: Duration = TIMERS.t1;
const T2: Duration = TIMERS.t2;
/// Timer B (64·T1).
const TIMER_B: Duration = Duration::from_millis(64 * TIMERS.t1.as_millis() as u64);

/// A client transaction: sip-core's INVITE or non-INVITE machine.
enum Client {
    Invite(ClientInvite),
    NonInvite(ClientNonInvite),
}

impl Client {
    fn start(invite: bool, now: Instant, reliable: bool) -> Self {
        if invite {
            Self::Invite(ClientInvite::new(now, reliable, TIMERS))
        } else {
            Self::NonInvite(ClientNonInvite::new(now, reliable, TIMERS))
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        match self {
            Self::Invite(m) => m.next_deadline(),
            Self::NonInvite(m) => m.next_deadline(),
        }
    }

    fn on_timer(&mut self, now: Instant) -> Output {
        match self {
            Self::Invite(m) => m.on_timer(now),
            Self::NonInvite(m) => m.on_timer(now),
        }
    }

    fn on_response(&mut self, status: StatusCode, now: Instant) -> Output {
        match self {
            Self::Invite(m) => m.on_response(status, now),
            Self::NonInvite(m) => m.on_response(status, now),
        }
    }
}

/// A SIP phone on one UDP socket.
pub struct Phone {
    cfg: Config,
    sig: Signal,
    local: SocketAddr,
    cseq: u32,
    register_call_id: String,
    register_tag: String,
    log: Box<dyn FnMut(&str) + Send>,
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

/// Status code and reason phrase, with the Warning text when there is one.
fn status_of(m: &Message<'_>) -> (u16, String) {
    let mut reason = m.reason().unwrap_or("").to_string();
    if let Some(w) = m.header_raw("Warning") {
        reason.push_str(&format!(" ({w})"));
    }
    (m.status().map(|s| s.as_u16()).unwrap_or(0), reason)
}

/// What a call's media needs once the offer and answer are agreed.
struct Media {
    sockets: Sockets,
    remote: SocketAddr,
    law: Law,
    source: Source,
    packets: u64,
    crypto: Option<session::Crypto>,
}

/// The final response of a client transaction and what came before it.
struct Outcome {
    bytes: Vec<u8>,
    provisional: Vec<u16>,
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
        Ok(Self {
            cfg,
            sig,
            local,
            cseq: 1,
            register_call_id: sip::token(12),
            register_tag: sip::token(4),
            log: Box::new(|_| {}),
        })
    }

    /// Reports progress lines ("180 Ringing", "call established") here.
    pub fn on_progress(&mut self, log: impl FnMut(&str) + Send + 'static) {
        self.log = Box::new(log);
    }

    /// The phone's SIP address (for Contact).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn host(addr: SocketAddr) -> String {
        match addr {
            SocketAddr::V4(a) => a.to_string(),
            SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
        }
    }

    fn contact(&self) -> String {
        let transport = if self.sig.reliable() {
            ";transport=tls"
        } else {
            ""
        };
        // PrivaSIP: the Contact names the host only.
        let user = if self.cfg.privacy.is_some() {
            String::new()
        } else {
            format!("{}@", self.cfg.user)
        };
        format!("sip:{user}{}{transport}", Self::host(self.local))
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
    /// pseudonym for the home proxy, shown as "Anonymous".
    fn identity(&self) -> Result<Identity, PhoneError> {
        let Some(p) = &self.cfg.privacy else {
            return Ok(Identity {
                from: format!("<{}>", self.aor()),
                shown: None,
            });
        };
        let pseudonym = p.seal(&p.home, &self.cfg.user)?;
        Ok(Identity {
            from: format!("\"Anonymous\" <sip:{pseudonym}@{}>", self.cfg.domain),
            shown: Some(pseudonym),
        })
    }

    /// The Request-URI and To of a call to `target`: PrivaSIP-2 puts a
    /// fresh pseudonym for the callee's home proxy in the user part.
    fn callee_uri(&self, target: &str) -> Result<String, PhoneError> {
        let Some((p, callee)) = self
            .cfg
            .privacy
            .as_ref()
            .and_then(|p| Some((p, p.callee.as_ref()?)))
        else {
            return Ok(target.to_string());
        };
        let (scheme, rest) = target
            .split_once(':')
            .ok_or_else(|| PhoneError::Invalid(format!("{target}: not a SIP URI")))?;
        let (user, host) = rest.split_once('@').ok_or_else(|| {
            PhoneError::Invalid(format!("{target}: PrivaSIP-2 needs a user part to encrypt"))
        })?;
        Ok(format!("{scheme}:{}@{host}", p.seal(callee, user)?))
    }

    fn next_cseq(&mut self) -> u32 {
        self.cseq += 1;
        self.cseq
    }

    fn base_request(
        &self,
        method: &str,
        uri: &str,
        (from, to): (&str, &str),
        call_id: &str,
        tag: &str,
        cseq: u32,
    ) -> Request {
        Request {
            method: method.into(),
            uri: uri.into(),
            via: format!("{} {}", self.sig.via(), Self::host(self.local)),
            branch: sip::branch(),
            from: from.into(),
            from_tag: tag.into(),
            to: to.into(),
            to_tag: None,
            call_id: call_id.into(),
            cseq,
            contact: None,
            routes: Vec::new(),
            extra: Vec::new(),
            body: None,
        }
    }

    /// Answers requests that arrive while we wait for something else.
    fn stray_request(&mut self, m: &Message<'_>, from: SocketAddr) {
        let reply = match m.method().as_str() {
            "ACK" => return,
            "OPTIONS" => sip::response(m, 200, "OK", Some(&sip::token(4)), None, None),
            "INVITE" => sip::response(m, 486, "Busy Here", Some(&sip::token(4)), None, None),
            _ => sip::response(m, 481, "Call/Transaction Does Not Exist", None, None, None),
        };
        let _ = self.sig.send_to(&reply, from);
    }

    /// Runs a client transaction on sip-core's RFC 3261 §17.1 machines
    /// (timers A/E retransmit over UDP, B/F give up; reliable transports
    /// send once) and returns the final response. INVITE ringing past
    /// `ring` is cancelled.
    fn transact(
        &mut self,
        dest: SocketAddr,
        req: &Request,
        ring: Option<Duration>,
    ) -> Result<Outcome, PhoneError> {
        let bytes = req.to_bytes();
        let started = Instant::now();
        let reliable = self.sig.reliable();
        let mut machine = Client::start(req.method == "INVITE", started, reliable);
        self.sig.send_to(&bytes, dest)?;
        let mut provisional = Vec::new();
        let mut cancelled = false;
        loop {
            let now = Instant::now();
            if machine.next_deadline().is_some_and(|d| now >= d) {
                let o = machine.on_timer(now);
                if o.retransmit && !cancelled {
                    self.sig.send_to(&bytes, dest)?;
                }
                if o.timeout {
                    return Err(PhoneError::Timeout(req.method.clone()));
                }
            }
            if let (Some(limit), false, false) = (ring, provisional.is_empty(), cancelled) {
                if now.duration_since(started) > limit {
                    let mut cancel = req.clone();
                    cancel.method = "CANCEL".into();
                    cancel.body = None;
                    cancel.contact = None;
                    cancel.extra.clear();
                    self.transact(dest, &cancel, None)?;
                    cancelled = true;
                }
            }
            if now.duration_since(started) > Duration::from_secs(600) {
                return Err(PhoneError::Timeout(req.method.clone()));
            }
            let wait = machine
                .next_deadline()
                .map_or(T1, |d| d.saturating_duration_since(Instant::now()))
                .clamp(Duration::from_millis(5), T1);
            let Some((data, from)) = self.sig.recv(wait)? else {
                continue;
            };
            let Ok(m) = Message::parse(&data) else {
                continue;
            };
            if m.is_request() {
                self.stray_request(&m, from);
                continue;
            }
            if m.top_via().branch() != Some(req.branch.as_str())
                || m.cseq().method.as_str() != req.method
            {
                continue;
            }
            let Some(status) = m.status() else {
                continue;
            };
            machine.on_response(status, Instant::now());
            let (code, reason) = status_of(&m);
            if code < 200 {
                if code > 100 {
                    (self.log)(&format!("{code} {reason}"));
                }
                provisional.push(code);
                continue;
            }
            if cancelled && code == 487 {
                self.ack_error(dest, req, &m);
                return Err(PhoneError::NoAnswer(ring.map_or(0, |r| r.as_secs())));
            }
            return Ok(Outcome {
                bytes: data.clone(),
                provisional,
            });
        }
    }

    /// The ACK for a non-2xx final response to INVITE (§17.1.1.3).
    fn ack_error(&mut self, dest: SocketAddr, invite: &Request, resp: &Message<'_>) {
        let mut ack = invite.clone();
        ack.method = "ACK".into();
        ack.to_tag = resp.to().tag().map(str::to_owned);
        ack.body = None;
        ack.contact = None;
        ack.extra.clear();
        let _ = self.sig.send_to(&ack.to_bytes(), dest);
    }

    /// Adds credentials answering the challenge in `resp` to `req`.
    fn authorize(
        &self,
        req: &mut Request,
        resp: &Message<'_>,
        shown: Option<&str>,
    ) -> Result<(), PhoneError> {
        let code = resp.status().map(|s| s.as_u16()).unwrap_or(0);
        let (field, header) = if code == 407 {
            (HeaderName::ProxyAuthenticate, "Proxy-Authorization")
        } else {
            (HeaderName::WwwAuthenticate, "Authorization")
        };
        let password = self.cfg.password.as_deref().ok_or_else(|| {
            PhoneError::AuthFailed(format!("{code}: the server wants a password (--password)"))
        })?;
        let value = resp
            .headers_named(field)
            .find_map(|h| {
                let c = Challenge::parse(h.value).ok()?;
                let who = sip_core::digest::Answerer {
                    shown,
                    ..sip_core::digest::Answerer::new(&self.cfg.user, password)
                };
                sip_core::digest::authorization(&c, &who, &req.method, &req.uri, &sip::token(8), 1)
            })
            .ok_or_else(|| PhoneError::AuthFailed(format!("{code}: no challenge we can answer")))?;
        req.extra
            .retain(|e| !e.starts_with("Authorization:") && !e.starts_with("Proxy-Authorization:"));
        req.extra.push(format!("{header}: {value}"));
        Ok(())
    }

    /// After a 401/407: the request again with credentials, a new CSeq
    /// and branch, the first time; a second challenge means our
    /// credentials were refused.
    fn rechallenge(
        &mut self,
        req: &mut Request,
        resp: &Message<'_>,
        challenged: &mut bool,
        shown: Option<&str>,
    ) -> Result<(), PhoneError> {
        if *challenged {
            let (code, reason) = status_of(resp);
            return Err(PhoneError::AuthFailed(format!(
                "{}: {code} {reason}",
                req.method
            )));
        }
        *challenged = true;
        self.authorize(req, resp, shown)?;
        req.cseq = self.next_cseq();
        req.branch = sip::branch();
        Ok(())
    }

    /// Registers the phone's Contact for `expires` seconds (0 removes it).
    /// Returns the lifetime the registrar granted.
    pub fn register(&mut self, expires: u32) -> Result<u32, PhoneError> {
        let server = self
            .cfg
            .server
            .ok_or_else(|| PhoneError::Invalid("registering needs --server".into()))?;
        let uri = format!("sip:{}", self.cfg.domain);
        let (call_id, tag) = (self.register_call_id.clone(), self.register_tag.clone());
        let cseq = self.next_cseq();
        let me = self.identity()?;
        let mut req =
            self.base_request("REGISTER", &uri, (&me.from, &me.from), &call_id, &tag, cseq);
        req.contact = Some(self.contact());
        req.extra.push(format!("Expires: {expires}"));
        let mut challenged = false;
        loop {
            let out = self.transact(server, &req, None)?;
            let m = Message::parse(&out.bytes).map_err(|e| PhoneError::Invalid(e.to_string()))?;
            let (code, reason) = status_of(&m);
            match code {
                200..=299 => {
                    let granted = m
                        .contacts()
                        .find(|c| c.addr.uri().as_str().contains(&Self::host(self.local)))
                        .and_then(|c| c.expires)
                        .or(m.expires())
                        .unwrap_or(expires);
                    return Ok(granted);
                }
                401 | 407 => {
                    self.rechallenge(&mut req, &m, &mut challenged, me.shown.as_deref())?
                }
                403 if challenged => {
                    return Err(PhoneError::AuthFailed(format!("REGISTER: {code} {reason}")))
                }
                _ => {
                    return Err(PhoneError::Status {
                        what: "REGISTER".into(),
                        code,
                        reason,
                    })
                }
            }
        }
    }

    fn offer(&self, rtp_port: u16) -> Result<(Audio, Vec<Crypto>), PhoneError> {
        let mut ours = Vec::new();
        for (i, p) in self.cfg.srtp.iter().enumerate() {
            let mut key = vec![0u8; p.key_len() + p.salt_len()];
            getrandom::fill(&mut key)
                .map_err(|e| PhoneError::Invalid(format!("no randomness for SRTP keys: {e}")))?;
            ours.push(
                Crypto::new(i as u32 + 1, *p, key)
                    .map_err(|e| PhoneError::Invalid(e.to_string()))?,
            );
        }
        let other = match self.cfg.law {
            Law::Pcmu => Law::Pcma,
            Law::Pcma => Law::Pcmu,
        };
        Ok((
            Audio {
                addr: self.local.ip(),
                port: rtp_port,
                savp: !ours.is_empty(),
                payloads: vec![self.cfg.law.payload_type(), other.payload_type()],
                crypto: ours.clone(),
            },
            ours,
        ))
    }

    fn resolve_uri(&self, uri: &str) -> Result<SocketAddr, PhoneError> {
        let parsed = sip_core::Uri::parse(uri, sip_core::UriContext::Header)
            .map_err(|e| PhoneError::Invalid(format!("{uri}: {e}")))?;
        let host = parsed
            .host()
            .ok_or_else(|| PhoneError::Invalid(format!("{uri}: no host")))?
            .to_string();
        crate::resolve::resolve(
            &host,
            parsed.port(),
            false,
            crate::resolve::system_nameserver(),
        )
        .map_err(|e| PhoneError::Invalid(e.to_string()))?
        .into_iter()
        .next()
        .ok_or_else(|| PhoneError::Invalid(format!("{uri}: no address")))
    }

    /// Calls `target` (a SIP URI): through the server when one is set,
    /// else straight to the URI's host. Sends `packets` packets of
    /// `source`, then hangs up (unless the callee does first).
    pub fn call(
        &mut self,
        target: &str,
        source: Source,
        packets: u64,
    ) -> Result<CallReport, PhoneError> {
        let target = if target.starts_with("sip:") || target.starts_with("sips:") {
            target.to_string()
        } else {
            format!("sip:{target}")
        };
        let dest = match self.cfg.server {
            Some(s) => s,
            None => self.resolve_uri(&target)?,
        };
        let sockets = Sockets::bind(self.local.ip(), self.cfg.rtp_port)
            .or_else(|_| Sockets::bind(self.cfg.bind.ip(), self.cfg.rtp_port))?;
        let (audio, ours) = self.offer(sockets.port())?;
        let session_id = u64::from_str_radix(&sip::token(4), 16).unwrap_or(1);
        let body = sdp::write(session_id, 1, &audio);
        let (mut req, me) = self.invite(&target, body)?;
        let (call_id, tag, to) = (req.call_id.clone(), req.from_tag.clone(), req.to.clone());
        let started = Instant::now();
        let mut challenged = false;
        let ring = Some(Duration::from_secs(self.cfg.ring_timeout));
        let (out, provisional) = loop {
            let out = self.transact(dest, &req, ring)?;
            let m = Message::parse(&out.bytes).map_err(|e| PhoneError::Invalid(e.to_string()))?;
            let (code, reason) = status_of(&m);
            if code >= 300 {
                self.ack_error(dest, &req, &m);
            }
            match code {
                200..=299 => break (out.bytes.clone(), out.provisional),
                // (A 403 is policy, e.g. relaying denied: reported below
                // with its Warning.)
                401 | 407 => {
                    self.rechallenge(&mut req, &m, &mut challenged, me.shown.as_deref())?
                }

                486 | 600 => return Err(PhoneError::Busy(format!("{target} ({code} {reason})"))),
                404 | 604 => {
                    return Err(PhoneError::NotFound(format!("{target} ({code} {reason})")))
                }
                488 | 606 => {
                    return Err(PhoneError::NoCommonSuite(format!(
                        "{target} answered {code} {reason}"
                    )))
                }
                _ => {
                    return Err(PhoneError::Status {
                        what: "INVITE".into(),
                        code,
                        reason,
                    })
                }
            }
        };
        let setup_s = started.elapsed().as_secs_f64();
        let m = Message::parse(&out).map_err(|e| PhoneError::Invalid(e.to_string()))?;
        let to_tag = m.to().tag().map(str::to_owned);
        let remote_target = m
            .contacts()
            .next()
            .map(|c| c.addr.uri().as_str().to_owned())
            .unwrap_or_else(|| target.clone());
        let mut routes = sip::record_routes(&m);
        routes.reverse();
        let answer = sdp::parse(std::str::from_utf8(m.body()).unwrap_or(""));
        let in_dialog = |phone: &mut Self, method: &str, cseq: u32| {
            let mut r = phone.base_request(
                method,
                &remote_target,
                (&me.from, &to),
                &call_id,
                &tag,
                cseq,
            );
            r.to_tag = to_tag.clone();
            r.routes = routes.clone();
            r
        };
        let next_hop = match routes.first() {
            Some(r) if r.contains(";lr") => self.resolve_uri(sip::addr_uri(r)).unwrap_or(dest),
            _ => self.resolve_uri(&remote_target).unwrap_or(dest),
        };
        let ack = in_dialog(self, "ACK", cseq_of(&m));
        self.sig.send_to(&ack.to_bytes(), next_hop)?;
        // The answer decides the media; a bad one ends the call at once.
        let negotiated = answer
            .map_err(PhoneError::from)
            .and_then(|a| self.negotiate_answer(&a, &ours).map(|c| (a, c)));
        let (answer, crypto) = match negotiated {
            Ok(x) => x,
            Err(e) => {
                let cseq = self.next_cseq();
                let bye = in_dialog(self, "BYE", cseq);
                let _ = self.transact(next_hop, &bye, None);
                return Err(e);
            }
        };
        let law = answer.law().unwrap_or(self.cfg.law);
        let remote = SocketAddr::new(answer.addr, answer.port);
        let media = Media {
            sockets,
            remote,
            law,
            source,
            packets,
            crypto,
        };
        let (running, hangup) = self.run_media(media, &call_id, true)?;
        if hangup == "local" {
            let cseq = self.next_cseq();
            let bye = in_dialog(self, "BYE", cseq);
            let _ = self.transact(next_hop, &bye, None);
        }
        Ok(CallReport {
            peer: target,
            provisional,
            setup_s,
            hangup: hangup.into(),
            media: running.finish(),
        })
    }

    /// A new INVITE to `target` with an SDP `body`, and who it says we
    /// are: fresh Call-ID, tag and (under PrivaSIP) pseudonyms.
    fn invite(&mut self, target: &str, body: String) -> Result<(Request, Identity), PhoneError> {
        let me = self.identity()?;
        let uri = self.callee_uri(target)?;
        let (call_id, tag) = (sip::token(12), sip::token(4));
        let cseq = self.next_cseq();
        let mut req = self.base_request(
            "INVITE",
            &uri,
            (&me.from, &format!("<{uri}>")),
            &call_id,
            &tag,
            cseq,
        );
        req.contact = Some(self.contact());
        req.body = Some(("application/sdp".into(), body));
        Ok((req, me))
    }

    /// The bytes of the INVITE a call to `target` would start with: what
    /// the INVITE preparation experiment times (PrivaSIP encryption
    /// included).
    pub fn prepare_invite(&mut self, target: &str, sdp: &str) -> Result<Vec<u8>, PhoneError> {
        Ok(self.invite(target, sdp.to_string())?.0.to_bytes())
    }

    /// Keys from the answer: our offered key for the tag it picked (send)
    /// and its key (receive).
    fn negotiate_answer(
        &self,
        answer: &Audio,
        ours: &[Crypto],
    ) -> Result<Option<session::Crypto>, PhoneError> {
        if ours.is_empty() {
            return Ok(None);
        }
        let theirs = answer
            .crypto
            .iter()
            .find(|c| ours.iter().any(|o| o.tag == c.tag && o.suite == c.suite))
            .ok_or_else(|| {
                PhoneError::NoCommonSuite("the answer has no a=crypto matching our offer".into())
            })?;
        let mine = ours
            .iter()
            .find(|o| o.tag == theirs.tag)
            .ok_or_else(|| PhoneError::NoCommonSuite("tag".into()))?;
        contexts(mine, theirs).map(Some)
    }

    /// Starts the media of an established call and waits while it flows
    /// (see [`Phone::wait_media`]).
    fn run_media(
        &mut self,
        m: Media,
        call_id: &str,
        hang_up_after_send: bool,
    ) -> Result<(session::Running, &'static str), PhoneError> {
        (self.log)("call established");
        let running = session::start(
            m.sockets,
            m.remote,
            m.law,
            m.source,
            m.packets,
            m.crypto,
            self.cname(),
        )?;
        let hangup = self.wait_media(&running, call_id, hang_up_after_send)?;
        Ok((running, hangup))
    }

    /// Waits while media flows: answers BYE (remote hang-up) or, when
    /// `hang_up_after_send`, returns once every packet went out.
    fn wait_media(
        &mut self,
        running: &session::Running,
        call_id: &str,
        hang_up_after_send: bool,
    ) -> Result<&'static str, PhoneError> {
        let mut idle_since: Option<Instant> = None;
        loop {
            if running.sender_done() {
                if hang_up_after_send {
                    // Let the last packets land.
                    std::thread::sleep(Duration::from_millis(300));
                    return Ok("local");
                }
                // The callee waits for the caller's BYE, but not forever.
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(30) {
                    return Ok("local");
                }
            }
            let Some((data, from)) = self.sig.recv(Duration::from_millis(50))? else {
                continue;
            };
            let Ok(m) = Message::parse(&data) else {
                continue;
            };
            if !m.is_request() {
                continue;
            }
            if m.method().as_str() == "BYE" && m.call_id() == call_id {
                let ok = sip::response(&m, 200, "OK", None, None, None);
                self.sig.send_to(&ok, from)?;
                (self.log)("remote hung up");
                return Ok("remote");
            }
            if m.method().as_str() == "ACK" && m.call_id() == call_id {
                continue;
            }
            self.stray_request(&m, from);
        }
    }

    /// Waits up to `wait` for a call, answers it at once and plays
    /// `packets` packets of `source` until the caller hangs up.
    pub fn answer(
        &mut self,
        wait: Duration,
        source: Source,
        packets: u64,
    ) -> Result<CallReport, PhoneError> {
        let deadline = Instant::now() + wait;
        let (bytes, from) = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(PhoneError::Timeout(format!(
                    "an incoming call ({} s)",
                    wait.as_secs()
                )));
            }
            let Some((data, from)) = self.sig.recv(left.min(Duration::from_millis(500)))? else {
                continue;
            };
            let Ok(m) = Message::parse(&data) else {
                continue;
            };
            if m.is_request() && m.method().as_str() == "INVITE" {
                break (data.clone(), from);
            }
            if m.is_request() {
                self.stray_request(&m, from);
            }
        };
        let m = Message::parse(&bytes).map_err(|e| PhoneError::Invalid(e.to_string()))?;
        let to_tag = sip::token(4);
        let trying = sip::response(&m, 100, "Trying", None, None, None);
        self.sig.send_to(&trying, from)?;
        let peer = sip::addr_uri(m.from().as_str()).to_string();
        let offer = sdp::parse(std::str::from_utf8(m.body()).unwrap_or(""));
        let refuse = |phone: &mut Self, code: u16, reason: &str| {
            let r = sip::response(&m, code, reason, Some(&to_tag), None, None);
            let _ = phone.sig.send_to(&r, from);
        };
        let offer = match offer {
            Ok(o) => o,
            Err(e) => {
                refuse(self, 488, "Not Acceptable Here");
                return Err(e.into());
            }
        };
        let Some(law) = [self.cfg.law, Law::Pcmu, Law::Pcma]
            .into_iter()
            .find(|l| offer.payloads.contains(&l.payload_type()))
        else {
            refuse(self, 488, "Not Acceptable Here");
            return Err(PhoneError::NoCommonSuite(
                "the offer has no G.711 payload".into(),
            ));
        };
        let sockets = Sockets::bind(self.local.ip(), self.cfg.rtp_port)?;
        let mut answer = Audio {
            addr: self.local.ip(),
            port: sockets.port(),
            savp: offer.savp,
            payloads: vec![law.payload_type()],
            crypto: Vec::new(),
        };
        let crypto = if self.cfg.srtp.is_empty() {
            if offer.savp {
                refuse(self, 488, "Not Acceptable Here");
                return Err(PhoneError::NoCommonSuite(
                    "the caller requires SRTP; start with --srtp".into(),
                ));
            }
            None
        } else {
            let Some(theirs) = sdes::choose(&offer.crypto, &self.cfg.srtp) else {
                refuse(self, 488, "Not Acceptable Here");
                return Err(PhoneError::NoCommonSuite(format!(
                    "{peer} offered {}",
                    offer
                        .crypto
                        .iter()
                        .map(|c| c.suite_name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            };
            let mut key = vec![0u8; theirs.suite.key_len() + theirs.suite.salt_len()];
            getrandom::fill(&mut key)
                .map_err(|e| PhoneError::Invalid(format!("no randomness: {e}")))?;
            let mine = theirs
                .answer(key)
                .map_err(|e| PhoneError::Invalid(e.to_string()))?;
            answer.crypto.push(mine.clone());
            Some(contexts(&mine, theirs)?)
        };
        let ringing = sip::response(
            &m,
            180,
            "Ringing",
            Some(&to_tag),
            Some(&self.contact()),
            None,
        );
        self.sig.send_to(&ringing, from)?;
        let body = sdp::write(u64::from(std::process::id()), 1, &answer);
        let ok = sip::response(
            &m,
            200,
            "OK",
            Some(&to_tag),
            Some(&self.contact()),
            Some(("application/sdp", &body)),
        );
        // Timer G: retransmit the 200 until the ACK.
        let call_id = m.call_id().to_string();
        let started = Instant::now();
        let mut interval = T1;
        let mut acked = false;
        let reliable = self.sig.reliable();
        let mut sent = false;
        while !acked && started.elapsed() < TIMER_B {
            if !(reliable && sent) {
                self.sig.send_to(&ok, from)?;
                sent = true;
            }
            let until = Instant::now() + interval;
            while Instant::now() < until {
                let left = until.saturating_duration_since(Instant::now());
                let Some((data, src)) = self.sig.recv(left)? else {
                    break;
                };
                let Ok(r) = Message::parse(&data) else {
                    continue;
                };
                if r.is_request() && r.call_id() == call_id && r.method().as_str() == "ACK" {
                    acked = true;
                    break;
                }
                if r.is_request() && !(r.method().as_str() == "INVITE" && r.call_id() == call_id) {
                    self.stray_request(&r, src);
                }
            }
            interval = (interval * 2).min(T2);
        }
        if !acked {
            return Err(PhoneError::Timeout("the ACK for our 200 OK".into()));
        }
        let remote = SocketAddr::new(offer.addr, offer.port);
        let media = Media {
            sockets,
            remote,
            law,
            source,
            packets,
            crypto,
        };
        let (running, hangup) = self.run_media(media, &call_id, false)?;
        Ok(CallReport {
            peer,
            provisional: Vec::new(),
            setup_s: 0.0,
            hangup: hangup.into(),
            media: running.finish(),
        })
    }
}

fn cseq_of(m: &Message<'_>) -> u32 {
    m.cseq().seq
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
