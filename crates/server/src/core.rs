//! Request handling, independent of sockets and threads: registrar
//! (RFC 3261 §10.3), stateless proxy (§16.11) and redirect server (§8.3).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use sip_core::proxy::{forward_request, forward_response, RequestEdits};
use sip_core::uri::Host;
use sip_core::via::Via;
use sip_core::writer::{write_error_response, write_response, ResponseOptions};
use sip_core::{HeaderName, Limits, Message, Method, StatusCode, Uri};

use crate::auth::{AuthFailure, AuthResult, Authenticator};
use crate::config::{Config, Mode, PathMode};
use crate::location::{
    Binding, ContactChange, Location, MemoryLocation, Record, Registration, SharedJournal,
    UpdateError, UpdatePolicy,
};
use crate::metrics::{Metrics, Stage};
use crate::privacy::{Privacy, Reveal};
use crate::stateful::{Hop, Key, Seen, Sends, StartError, Transactions, Upstream, BRANCH_PREFIX};

/// Prefix of the To tags on responses this server generates; an ACK
/// carrying one acknowledges such a response and ends here.
pub const LOCAL_TAG_PREFIX: &str = "sipsec-";

/// Methods this server accepts, advertised in Allow.
pub const ALLOW: &str = "INVITE, ACK, CANCEL, BYE, OPTIONS, REGISTER, MESSAGE, INFO, UPDATE, PRACK";

/// The transports (one type for the workspace). The server listens on
/// UDP, TCP and TLS; the drivers drop and count a message for any other.
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

/// Where to send what the core wrote into `out`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Send `out` to this address over this transport (for TCP, on the
    /// connection with that peer, opening one if needed).
    Send(SocketAddr, Transport),
    /// Send nothing (responses not for us, ACKs, unanswerable garbage).
    Drop,
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
    pub guard: crate::guard::Guard,
    /// The proxy's transactions, when it is transaction-stateful.
    pub transactions: Option<Transactions>,
    /// PrivaSIP keys, when configured.
    pub privacy: Option<crate::privacy::Privacy>,
    branch_salt: RandomState,
}

impl Shared {
    /// Bundles the shared state; `now` is the start time.
    pub fn new(
        config: Config,
        location: Arc<MemoryLocation>,
        auth: Option<Authenticator>,
        now: Now,
    ) -> Self {
        let guard = crate::guard::Guard::new(config.guard.clone());
        let transactions = (config.stateful && config.mode == Mode::Proxy).then(|| {
            Transactions::new(
                sip_core::transaction::TimerConfig::RFC3261,
                config.max_transaction_bytes,
            )
        });
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
            branch_salt: RandomState::new(),
        }
    }
}

/// A worker's request handler with its reusable buffers.
#[derive(Debug)]
pub struct Core {
    shared: Arc<Shared>,
    journal: Option<SharedJournal>,
    transport: Transport,
    bindings: Vec<Binding>,
    lines: String,
    via: String,
    ip: String,
    rr: String,
    tag: String,
    challenges: Vec<(&'static str, String)>,
    sends: Sends,
    path: String,
    /// Requests handled, for sampling stage timings.
    handled: u64,
    /// Whether this request's stages are timed.
    timed: bool,
    /// When the message being handled arrived.
    now: Now,
}

/// The largest UDP payload (65,535 − 8 UDP − 20 IPv4 header bytes).
pub const MAX_DATAGRAM: usize = 65_507;

/// One request in this many has its stages timed: reading the clock
/// twice per stage cost more than some stages themselves.
pub const STAGE_SAMPLE: u64 = 16;

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The address-of-record of a URI: `sip:user@host`, host lowercased.
pub fn aor(uri: &Uri<'_>) -> Option<String> {
    Some(aor_of(uri.user()?, uri.host()?))
}

/// `sip:user@host`, host lowercased.
fn aor_of(user: &str, host: Host<'_>) -> String {
    let mut s = String::with_capacity(8 + user.len() + 32);
    s.push_str("sip:");
    s.push_str(user);
    s.push('@');
    match host {
        Host::Name(n) => {
            for c in n.chars() {
                s.push(c.to_ascii_lowercase());
            }
        }
        other => {
            let _ = write!(s, "{other}");
        }
    }
    s
}

/// What a user part at this server stands for: itself, or the ID inside
/// a pseudonym encrypted for us; `None` for a pseudonym that does not
/// open.
fn reveal<'a>(privacy: Option<&Privacy>, user: &'a str, now: u64) -> Option<Cow<'a, str>> {
    let Some(p) = privacy else {
        return Some(Cow::Borrowed(user));
    };
    match p.reveal(user, now) {
        Reveal::Plain => Some(Cow::Borrowed(user)),
        Reveal::Id(id) => Some(Cow::Owned(id)),
        Reveal::Refused => None,
    }
}

/// Whether a header such as Supported or Require lists `tag`.
fn has_option_tag(msg: &Message<'_>, name: HeaderName, tag: &str) -> bool {
    msg.headers_named(name)
        .flat_map(|h| h.value.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(tag))
}

/// The first URI of a stored Path (`<sip:edge;lr>, <…>`).
fn first_path_uri(path: &str) -> Option<Uri<'_>> {
    let start = path.find('<')? + 1;
    let end = start + path[start..].find('>')?;
    Uri::parse(&path[start..end], sip_core::UriContext::Header)
        .ok()
        .filter(Uri::is_sip)
}

/// The transport address a URI or Via points at (IP literals and
/// `localhost` only: the hot path does no DNS).
fn resolve(host: Host<'_>, port: Option<u16>) -> Option<SocketAddr> {
    let ip = match host {
        Host::V4(a) => IpAddr::V4(a),
        Host::V6(a) => IpAddr::V6(a),
        Host::Name(n) if n.eq_ignore_ascii_case("localhost") => IpAddr::from([127, 0, 0, 1]),
        Host::Name(_) => return None,
    };
    Some(SocketAddr::new(ip, port.unwrap_or(5060)))
}

impl Core {
    /// A handler for one worker; `journal` persists binding changes.
    pub fn new(shared: Arc<Shared>, journal: Option<SharedJournal>) -> Self {
        let created = shared.created;
        Self {
            shared,
            journal,
            transport: Transport::Udp,
            bindings: Vec::with_capacity(8),
            lines: String::with_capacity(512),
            via: String::with_capacity(128),
            ip: String::with_capacity(48),
            rr: String::with_capacity(64),
            tag: String::with_capacity(24),
            challenges: Vec::with_capacity(2),
            sends: Sends::default(),
            path: String::new(),
            handled: 0,
            timed: false,
            now: Now {
                unix_ms: 0,
                mono: created,
            },
        }
    }

    /// The start of a stage, when this request is timed (the metrics'
    /// stopwatch: instrumentation, not a protocol decision).
    fn clock(&self) -> Option<crate::metrics::Stopwatch> {
        self.timed.then(crate::metrics::Stopwatch::start)
    }

    /// Records a stage started at `t0`, when this request is timed.
    fn stage(&self, stage: Stage, t0: Option<crate::metrics::Stopwatch>) {
        if let Some(t0) = t0 {
            self.shared.metrics.stage(stage, t0.elapsed());
        }
    }

    /// The shared state.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Messages the last [`handle`](Self::handle) produced besides its
    /// reply (stateful proxy: 100 Trying, ACK and CANCEL downstream,
    /// responses resent for retransmitted requests).
    pub fn extra(&self) -> &Sends {
        &self.sends
    }

    /// Whether `host:port` names this server. `tls`: reached over TLS,
    /// where the TLS port (default 5061) counts too; elsewhere only the
    /// UDP/TCP port does, so a peer whose own port happens to equal our
    /// TLS port is not mistaken for us.
    fn is_local_host(&self, host: Host<'_>, port: Option<u16>, tls: bool) -> bool {
        let adv = self.shared.config.advertise;
        let tls_port = self
            .shared
            .config
            .tls
            .as_ref()
            .map(|t| t.addr.port())
            .filter(|_| tls);
        let port_ok = port.unwrap_or(5060) == adv.port()
            || tls_port.is_some_and(|t| port.unwrap_or(5061) == t);
        let host_ok = match host {
            Host::V4(a) => IpAddr::V4(a) == adv.ip(),
            Host::V6(a) => IpAddr::V6(a) == adv.ip(),
            Host::Name(n) => self
                .shared
                .config
                .domains
                .iter()
                .any(|d| d.eq_ignore_ascii_case(n)),
        };
        host_ok && (port_ok || matches!(host, Host::Name(_)) && port.is_none())
    }

    /// A URI naming this server: its TLS port counts for `sips:`,
    /// `transport=tls`, and requests that arrived over TLS.
    fn is_local_uri(&self, uri: &Uri<'_>) -> bool {
        // Only a server with TLS has a TLS port to match (and only then is
        // the URI's transport worth looking up, on this per-message path).
        let tls = self.shared.config.tls.is_some()
            && (self.transport == Transport::Tls || Transport::of_uri(uri) == Transport::Tls);
        uri.is_sip()
            && uri
                .host()
                .is_some_and(|h| self.is_local_host(h, uri.port(), tls))
    }

    fn is_our_via(&self, via: &Via<'_>) -> bool {
        let tls = via.transport() == sip_core::via::Transport::Tls;
        self.is_local_host(via.host(), via.port(), tls)
    }

    /// Handles one message that arrived from `src` over `transport` at
    /// `now`, writing any answer or forwarded message into `out` (cleared
    /// by the caller).
    pub fn handle(
        &mut self,
        input: &[u8],
        src: SocketAddr,
        transport: Transport,
        now: Now,
        out: &mut Vec<u8>,
    ) -> Reply {
        self.now = now;
        let now = now.secs();
        self.transport = transport;
        self.sends.clear();
        self.timed = self.handled.is_multiple_of(STAGE_SAMPLE);
        self.handled = self.handled.wrapping_add(1);
        match self.shared.guard.admit(src.ip(), self.now.unix_ms) {
            crate::guard::Verdict::Admit => {}
            crate::guard::Verdict::Limited => {
                bump(&self.shared.metrics.rate_limited);
                return Reply::Drop;
            }
            crate::guard::Verdict::Banned => {
                bump(&self.shared.metrics.banned);
                return Reply::Drop;
            }
        }
        let t0 = self.clock();
        let parsed = Message::parse(input);
        self.stage(Stage::Parse, t0);
        let msg = match parsed {
            Ok(m) => m,
            Err(e) => {
                bump(&self.shared.metrics.malformed);
                return if write_error_response(input, &e, out) {
                    Reply::Send(src, transport)
                } else {
                    bump(&self.shared.metrics.dropped);
                    Reply::Drop
                };
            }
        };
        if !msg.is_request() {
            bump(&self.shared.metrics.responses_received);
            return self.forward_response(&msg, out);
        }
        self.shared.metrics.request(msg.method().as_str());
        match msg.method() {
            Method::Register if self.request_is_for_us(&msg) => self.register(&msg, src, now, out),
            _ => self.route(&msg, src, now, out),
        }
    }

    fn request_is_for_us(&self, msg: &Message<'_>) -> bool {
        msg.request_uri()
            .is_some_and(|u| self.is_local_uri(u) || u.user().is_none())
    }

    fn respond(
        &mut self,
        msg: &Message<'_>,
        status: StatusCode,
        extra: &[(&str, &str)],
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Reply {
        if msg.method() == Method::Ack {
            // An ACK is never answered: one this server cannot route ends here.
            bump(&self.shared.metrics.dropped);
            return Reply::Drop;
        }
        // The same request (and its retransmissions) always gets the same tag.
        let mut h = self.shared.branch_salt.build_hasher();
        h.write(msg.call_id().as_bytes());
        h.write(msg.from().tag().unwrap_or("").as_bytes());
        h.write(msg.top_via().branch().unwrap_or("").as_bytes());
        self.tag.clear();
        let _ = write!(
            self.tag,
            "{LOCAL_TAG_PREFIX}{:012x}",
            h.finish() & 0xffff_ffff_ffff
        );
        let t0 = self.clock();
        write_response(
            out,
            msg,
            status,
            &ResponseOptions {
                to_tag: Some(&self.tag),
                extra,
                raw_headers: &self.lines,
                ..Default::default()
            },
        );
        self.stage(Stage::FormatResponse, t0);
        self.lines.clear();
        if self.transport == Transport::Udp && out.len() > MAX_DATAGRAM {
            // Never drop an answer for its size: say so in a short one.
            bump(&self.shared.metrics.oversize);
            crate::log::oversize("response", src, out.len());
            out.clear();
            write_response(
                out,
                msg,
                StatusCode::MESSAGE_TOO_LARGE_5XX,
                &ResponseOptions {
                    to_tag: Some(&self.tag),
                    extra: &[(
                        "Warning",
                        "399 sipsec \"the answer would not fit a UDP datagram: use TCP\"",
                    )],
                    ..Default::default()
                },
            );
        }
        Reply::Send(src, self.transport)
    }

    fn challenge(
        &mut self,
        msg: &Message<'_>,
        proxy: bool,
        stale: bool,
        now: u64,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Reply {
        let Some(auth) = &self.shared.auth else {
            return Reply::Drop;
        };
        self.challenges.clear();
        auth.challenges(proxy, stale, now, &mut self.challenges);
        self.lines.clear();
        for (name, value) in &self.challenges {
            let _ = write!(self.lines, "{name}: {value}\r\n");
        }
        let status = if proxy {
            StatusCode::PROXY_AUTHENTICATION_REQUIRED
        } else {
            StatusCode::UNAUTHORIZED
        };
        self.respond(msg, status, &[], src, out)
    }

    /// Runs authentication; `Err` carries the reply to send instead.
    fn authenticate(
        &mut self,
        msg: &Message<'_>,
        proxy: bool,
        now: u64,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Result<Option<String>, Reply> {
        let Some(auth) = &self.shared.auth else {
            return Ok(None);
        };
        let t0 = self.clock();
        let privacy = self.shared.privacy.as_ref();
        let result = auth.check_as(msg, src, proxy, now, |u| reveal(privacy, u, now));
        self.stage(Stage::Authenticate, t0);
        match result {
            AuthResult::Ok(user) => Ok(Some(user.into_owned())),
            AuthResult::Failed(AuthFailure::Undecryptable) => Err(self.refuse(msg, src, out)),
            AuthResult::Failed(AuthFailure::Malformed) => Err(self.respond(
                msg,
                StatusCode::BAD_REQUEST,
                &[("Warning", "399 sipsec \"malformed credentials\"")],
                src,
                out,
            )),
            AuthResult::Failed(f) => {
                match f {
                    // Only a wrong answer to a nonce we issued counts toward
                    // a ban: garbage or foreign nonces from a spoofed source
                    // cannot get that source banned.
                    AuthFailure::Rejected => {
                        bump(&self.shared.metrics.auth_failures);
                        self.shared.guard.auth_failed(src.ip(), self.now.unix_ms);
                        crate::log::auth_failure(src, msg.from().uri().user().unwrap_or(""));
                    }
                    AuthFailure::Replay => bump(&self.shared.metrics.auth_replays),
                    _ => {}
                }
                Err(self.challenge(msg, proxy, f == AuthFailure::Stale, now, src, out))
            }
        }
    }

    /// The one answer to a pseudonym that does not open, wherever it was:
    /// 403 and nothing more, counted against the source like a failed
    /// authentication (so guessing is rate-limited and banned).
    fn refuse(&mut self, msg: &Message<'_>, src: SocketAddr, out: &mut Vec<u8>) -> Reply {
        self.shared.guard.auth_failed(src.ip(), self.now.unix_ms);
        self.respond(msg, StatusCode::FORBIDDEN, &[], src, out)
    }

    /// Whether `src` is another domain's proxy we peer with.
    fn is_peer(&self, src: SocketAddr) -> bool {
        self.shared.config.peers.iter().any(|(_, a)| *a == src)
    }

    /// The peer proxy serving the Request-URI's domain.
    fn peer_for(&self, uri: &Uri<'_>) -> Option<SocketAddr> {
        let Some(Host::Name(n)) = uri.host() else {
            return None;
        };
        self.shared
            .config
            .peers
            .iter()
            .find(|(d, _)| d.eq_ignore_ascii_case(n))
            .map(|(_, a)| *a)
    }

    /// A request that needs a local caller (INVITE, MESSAGE, SUBSCRIBE)
    /// with authentication on: digest, and under PrivaSIP the From user
    /// must open to the authenticated user. Requests from peer proxies
    /// were authenticated in their domain.
    fn authorize_caller(
        &mut self,
        msg: &Message<'_>,
        src: SocketAddr,
        now: u64,
        out: &mut Vec<u8>,
    ) -> Result<bool, Reply> {
        if self.shared.auth.is_none()
            || !matches!(
                msg.method(),
                Method::Invite | Method::Message | Method::Subscribe
            )
            || self.is_peer(src)
        {
            return Ok(false);
        }
        let Some(user) = self.authenticate(msg, true, now, src, out)? else {
            return Ok(false);
        };
        let from = msg.from().uri();
        let Some(from_user) = from.user() else {
            return Ok(true);
        };
        if self.shared.privacy.is_none() || !self.is_local_uri(from) {
            return Ok(true);
        }
        match reveal(self.shared.privacy.as_ref(), from_user, now) {
            None => Err(self.refuse(msg, src, out)),
            Some(Cow::Owned(id)) if id != user => Err(self.respond(
                msg,
                StatusCode::FORBIDDEN,
                &[(
                    "Warning",
                    "399 sipsec \"From is not the authenticated user\"",
                )],
                src,
                out,
            )),
            Some(_) => Ok(true),
        }
    }

    fn register(
        &mut self,
        msg: &Message<'_>,
        src: SocketAddr,
        now: u64,
        out: &mut Vec<u8>,
    ) -> Reply {
        let user = match self.authenticate(msg, false, now, src, out) {
            Ok(u) => u,
            Err(reply) => return reply,
        };
        let to = msg.to().uri();
        let (Some(to_user), Some(to_host)) = (to.user(), to.host()) else {
            return self.respond(
                msg,
                StatusCode::BAD_REQUEST,
                &[(
                    "Warning",
                    "399 sipsec \"To must be a SIP URI with a user part\"",
                )],
                src,
                out,
            );
        };
        let Some(to_user) = reveal(self.shared.privacy.as_ref(), to_user, now) else {
            return self.refuse(msg, src, out);
        };
        if let Some(user) = user {
            if *to_user != *user {
                return self.respond(msg, StatusCode::FORBIDDEN, &[], src, out);
            }
        }
        let aor = aor_of(&to_user, to_host);
        let cfg = &self.shared.config;
        let (min, max, default) = (cfg.min_expires, cfg.max_expires, cfg.default_expires);
        let star = msg.is_contact_star();
        if star && (msg.expires() != Some(0) || msg.contact_count() > 0) {
            return self.respond(
                msg,
                StatusCode::BAD_REQUEST,
                &[(
                    "Warning",
                    "399 sipsec \"Contact: * needs Expires: 0 and no other contact\"",
                )],
                src,
                out,
            );
        }
        let mut changes: Vec<ContactChange<'_>> = Vec::with_capacity(msg.contact_count());
        for c in msg.contacts() {
            let wanted = c.expires.or(msg.expires()).unwrap_or(default);
            if wanted != 0 && wanted < min {
                let min = min.to_string();
                return self.respond(
                    msg,
                    StatusCode::INTERVAL_TOO_BRIEF,
                    &[("Min-Expires", &min)],
                    src,
                    out,
                );
            }
            changes.push(ContactChange {
                contact: c.addr.uri().as_str(),
                expires: wanted.min(max),
                q: c.q.unwrap_or(1000),
            });
        }
        let t0 = self.clock();
        let supports_path = match self.collect_path(msg, src, out) {
            Ok(supported) => supported,
            Err(reply) => return reply,
        };
        let reg = Registration {
            call_id: msg.call_id(),
            cseq: msg.cseq().seq,
            source: src,
            path: &self.path,
            now,
        };
        let cfg = &self.shared.config;
        // Over UDP the 200 must fit one datagram with the request's own
        // headers, which it echoes (RFC 3261 §18.2.2 leaves no other way
        // back for a response).
        let max_listing = if self.transport == Transport::Udp {
            MAX_DATAGRAM.saturating_sub(msg.len() + 256)
        } else {
            usize::MAX
        };
        let policy = UpdatePolicy {
            max_contacts: cfg.max_contacts,
            overflow: cfg.max_contacts_policy,
            max_listing,
        };
        let journal = self.journal.as_ref();
        let mut persist = |records: &[Record]| match journal {
            Some(j) => j.lock().unwrap_or_else(|e| e.into_inner()).append(records),
            None => Ok(()),
        };
        let result = self.shared.location.update(
            &aor,
            &changes,
            star,
            &reg,
            &policy,
            &mut persist,
            &mut self.bindings,
        );
        match result {
            Ok(()) => {}
            Err(UpdateError::OutOfOrder { .. }) => {
                return self.respond(
                    msg,
                    StatusCode::SERVER_INTERNAL_ERROR,
                    &[(
                        "Warning",
                        "399 sipsec \"CSeq below the stored one for this Call-ID\"",
                    )],
                    src,
                    out,
                );
            }
            Err(UpdateError::TooManyContacts { max }) => {
                let warning = format!(
                    "399 sipsec \"too many contacts for this address-of-record (at most {max})\""
                );
                return self.respond(
                    msg,
                    StatusCode::FORBIDDEN,
                    &[("Warning", &warning)],
                    src,
                    out,
                );
            }
            Err(UpdateError::ListingTooLarge { .. }) => {
                bump(&self.shared.metrics.oversize);
                return self.respond(
                    msg,
                    StatusCode::MESSAGE_TOO_LARGE_5XX,
                    &[(
                        "Warning",
                        "399 sipsec \"the contact list would not fit a UDP answer: register over TCP\"",
                    )],
                    src,
                    out,
                );
            }
            Err(UpdateError::Journal(e)) => {
                bump(&self.shared.metrics.journal_errors);
                crate::log::journal_error(&aor, &e);
                return self.respond(
                    msg,
                    StatusCode::SERVER_INTERNAL_ERROR,
                    &[(
                        "Warning",
                        "399 sipsec \"binding not stored: the location journal could not be written\"",
                    )],
                    src,
                    out,
                );
            }
        }
        self.stage(Stage::AddUser, t0);
        bump(&self.shared.metrics.registered);
        self.lines.clear();
        for b in &self.bindings {
            let _ = write!(
                self.lines,
                "Contact: <{}>;expires={}\r\n",
                b.contact,
                b.expires_at.saturating_sub(now)
            );
        }
        if supports_path && !self.path.is_empty() {
            // RFC 3327 §5.3: the stored Path goes back to the UA.
            let _ = write!(self.lines, "Path: {}\r\n", self.path);
        }
        self.respond(msg, StatusCode::OK, &[], src, out)
    }

    /// Gathers the REGISTER's Path values into `self.path` (RFC 3327)
    /// according to the configured mode; `Ok` tells whether the UA sent
    /// `Supported: path` (only looked up when there is a Path), `Err` is
    /// the refusal to send.
    fn collect_path(
        &mut self,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Result<bool, Reply> {
        self.path.clear();
        let mode = self.shared.config.path;
        if mode == PathMode::Off {
            return Ok(false);
        }
        for h in msg.headers_named(HeaderName::Path) {
            if !self.path.is_empty() {
                self.path.push_str(", ");
            }
            // Folded lines become spaces: the journal is one line per record.
            self.path.extend(
                h.value
                    .chars()
                    .map(|c| if c.is_ascii_whitespace() { ' ' } else { c }),
            );
        }
        if self.path.is_empty() {
            return Ok(false);
        }
        let supported = has_option_tag(msg, HeaderName::Supported, "path");
        if first_path_uri(&self.path).is_none() {
            return Err(self.respond(
                msg,
                StatusCode::BAD_REQUEST,
                &[("Warning", "399 sipsec \"Path must hold <sip:...> values\"")],
                src,
                out,
            ));
        }
        if mode == PathMode::Strict && !supported {
            return Err(self.respond(
                msg,
                StatusCode::BAD_EXTENSION,
                &[(
                    "Warning",
                    "399 sipsec \"Path needs Supported: path (RFC 3327)\"",
                )],
                src,
                out,
            ));
        }
        Ok(supported)
    }

    /// The branch this proxy uses when forwarding `msg` statelessly: a
    /// function of the incoming top Via, so retransmissions, the ACK for a
    /// failure and CANCEL all get the INVITE's branch (RFC 3261 §16.11).
    fn branch(&self, msg: &Message<'_>) -> u64 {
        let v = msg.top_via();
        let mut h = self.shared.branch_salt.build_hasher();
        h.write(v.branch().unwrap_or("").as_bytes());
        h.write(v.as_str().as_bytes());
        if !v.is_rfc3261_branch() {
            // RFC 2543 peers: the transaction is identified by more fields.
            h.write(msg.call_id().as_bytes());
            h.write_u32(msg.cseq().seq);
            h.write(msg.from().tag().unwrap_or("").as_bytes());
        }
        h.finish()
    }

    /// Where responses to `msg` go (RFC 3261 §18.2.2): back on the
    /// connection for TCP; for UDP the source address, and the Via's port
    /// unless rport asked for the source port.
    fn upstream(&self, msg: &Message<'_>, src: SocketAddr) -> Hop {
        let top = msg.top_via();
        if self.transport.is_reliable() || top.rport().is_some() {
            return (src, self.transport);
        }
        (
            SocketAddr::new(src.ip(), top.port().unwrap_or(5060)),
            Transport::Udp,
        )
    }

    /// Stateful proxy: requests that belong to a transaction end here.
    fn stateful_request(
        &mut self,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Option<Reply> {
        let tx = self.shared.transactions.as_ref()?;
        let key = Key {
            branch: self.branch(msg),
            cancel: false,
        };
        let now = self.now.mono;
        let metrics = &self.shared.metrics;
        if msg.method() == Method::Cancel {
            // §16.10: answer the CANCEL here; the INVITE's 487 comes back
            // from downstream.
            let status = if tx.on_cancel(key, now, &mut self.sends, metrics) {
                StatusCode::OK
            } else {
                StatusCode::CALL_DOES_NOT_EXIST
            };
            return Some(self.respond(msg, status, &[], src, out));
        }
        match tx.on_request(key, msg.method(), now, &mut self.sends, metrics) {
            Seen::Absorbed => Some(Reply::Drop),
            Seen::New => None,
        }
    }

    fn route(&mut self, msg: &Message<'_>, src: SocketAddr, now: u64, out: &mut Vec<u8>) -> Reply {
        let method = msg.method();
        if let Some(reply) = self.stateful_request(msg, src, out) {
            return reply;
        }
        if method == Method::Ack
            && msg
                .to()
                .tag()
                .is_some_and(|t| t.starts_with(LOCAL_TAG_PREFIX))
        {
            // Acknowledges a final response this server generated (§17.2.1).
            return Reply::Drop;
        }
        if msg.max_forwards() == Some(0) {
            return self.respond(msg, StatusCode::TOO_MANY_HOPS, &[], src, out);
        }
        if msg.vias().skip(1).any(|v| self.is_our_via(&v)) || self.is_our_via(msg.top_via()) {
            return self.respond(msg, StatusCode::LOOP_DETECTED, &[], src, out);
        }
        // Loose routing (§16.4): a first Route naming us is removed.
        let pop_route = msg
            .first_route()
            .is_some_and(|(_, r)| self.is_local_uri(r.uri()));
        let next_route = msg.routes().nth(usize::from(pop_route));
        let Some(ruri) = msg.request_uri() else {
            return Reply::Drop;
        };
        let mut new_ruri: Option<String> = None;
        let mut to_peer = false;
        let mut authenticated = false;
        let mut out_transport = Transport::Udp;
        let target = if let Some(r) = next_route {
            let u = r.uri();
            out_transport = Transport::of_uri(u);
            u.host().and_then(|h| resolve(h, u.port()))
        } else if self.is_local_uri(ruri) {
            let key = match (ruri.user(), ruri.host()) {
                (Some(u), Some(h)) => match reveal(self.shared.privacy.as_ref(), u, now) {
                    Some(u) => Some(aor_of(&u, h)),
                    None => return self.refuse(msg, src, out),
                },
                _ => None,
            };
            let Some(key) = key else {
                return match method {
                    Method::Options => self.respond(
                        msg,
                        StatusCode::OK,
                        &[("Allow", ALLOW), ("Accept", "application/sdp")],
                        src,
                        out,
                    ),
                    _ => self.respond(msg, StatusCode::NOT_FOUND, &[], src, out),
                };
            };
            let mode = self.shared.config.mode;
            if mode == Mode::Registrar {
                return self.respond(
                    msg,
                    StatusCode::METHOD_NOT_ALLOWED,
                    &[("Allow", "REGISTER, OPTIONS")],
                    src,
                    out,
                );
            }
            match self.authorize_caller(msg, src, now, out) {
                Ok(a) => authenticated = a,
                Err(reply) => return reply,
            }
            let t0 = self.clock();
            self.shared.location.lookup(&key, now, &mut self.bindings);
            self.stage(Stage::FindUser, t0);
            if self.bindings.is_empty() {
                return self.respond(msg, StatusCode::NOT_FOUND, &[], src, out);
            }
            if mode == Mode::Redirect {
                self.lines.clear();
                for b in &self.bindings {
                    let _ = write!(self.lines, "Contact: <{}>\r\n", b.contact);
                }
                return self.respond(msg, StatusCode::MOVED_TEMPORARILY, &[], src, out);
            }
            let contact = self.bindings[0].contact.clone();
            // A stored Path (RFC 3327) is the route to the contact: the
            // request goes to its first hop with the Path as Route.
            self.path.clear();
            if self.shared.config.path != PathMode::Off {
                self.path.push_str(&self.bindings[0].path);
            }
            let next = match first_path_uri(&self.path) {
                Some(hop) => Some(hop),
                None => {
                    self.path.clear();
                    Uri::parse(&contact, sip_core::UriContext::Header).ok()
                }
            };
            let addr = next.and_then(|u| {
                out_transport = Transport::of_uri(&u);
                u.host().and_then(|h| resolve(h, u.port()))
            });
            new_ruri = Some(contact);
            addr
        } else if pop_route {
            // In-dialog request that record-routed through us (§16.12):
            // the Request-URI is the peer's contact.
            out_transport = Transport::of_uri(ruri);
            ruri.host().and_then(|h| resolve(h, ruri.port()))
        } else if let Some(peer) = self
            .peer_for(ruri)
            .filter(|_| self.shared.config.mode == Mode::Proxy)
        {
            // Another domain we peer with: our users' requests go to its
            // proxy, the Request-URI (perhaps a pseudonym for it) as is.
            match self.authorize_caller(msg, src, now, out) {
                Ok(a) => authenticated = a,
                Err(reply) => return reply,
            }
            to_peer = true;
            Some(peer)
        } else {
            // No open relay: only requests for this server's domains are proxied.
            return self.respond(
                msg,
                StatusCode::FORBIDDEN,
                &[("Warning", "399 sipsec \"relaying denied\"")],
                src,
                out,
            );
        };
        let Some(target) = target else {
            return self.respond(
                msg,
                StatusCode::SERVICE_UNAVAILABLE,
                &[("Warning", "399 sipsec \"next hop is not an IP address\"")],
                src,
                out,
            );
        };
        let branch = self.branch(msg);
        // Over TLS this server is reached at its TLS address.
        let here = match (&self.shared.config.tls, out_transport) {
            (Some(t), Transport::Tls) => {
                SocketAddr::new(self.shared.config.advertise.ip(), t.addr.port())
            }
            _ => self.shared.config.advertise,
        };
        self.via.clear();
        let _ = write!(
            self.via,
            "SIP/2.0/{} {here};branch={BRANCH_PREFIX}{branch:016x}",
            out_transport.as_str(),
        );
        let top = msg.top_via();
        let reliable = self.transport.is_reliable();
        let annotate = reliable
            || top.rport().is_some()
            || resolve(top.host(), None).map(|a| a.ip()) != Some(src.ip());
        self.ip.clear();
        let _ = write!(self.ip, "{}", src.ip());
        // Dialog-creating requests for local users record-route when asked,
        // so the dialog's later requests come back through this proxy. A
        // phone on a TCP/TLS connection can only be reached over that
        // connection, which ends here: its dialogs always record-route
        // (as RFC 5626 §5.1 asks of an edge proxy), or the ACK and BYE
        // would be sent to a contact nobody listens on.
        let flow = self.transport.is_reliable() && self.transport == out_transport;
        self.rr.clear();
        if (self.shared.config.record_route || self.shared.transactions.is_some() || flow)
            && (new_ruri.is_some() || to_peer)
            && matches!(method, Method::Invite | Method::Subscribe | Method::Refer)
        {
            let _ = write!(self.rr, "<sip:{here};lr");
            if out_transport != Transport::Udp {
                self.rr.push_str(";transport=");
                self.rr.extend(
                    out_transport
                        .as_str()
                        .chars()
                        .map(|c| c.to_ascii_lowercase()),
                );
            }
            self.rr.push('>');
        }
        let edits = RequestEdits {
            request_uri: new_ruri.as_deref(),
            via: Some(&self.via),
            record_route: (!self.rr.is_empty()).then_some(self.rr.as_str()),
            route: (new_ruri.is_some() && !self.path.is_empty()).then_some(self.path.as_str()),
            pop_route,
            received: annotate.then_some((self.ip.as_str(), src.port())),
            max_forwards: true,
            force_rport: reliable,
            // The credentials we checked stop here (RFC 3261 §22.3).
            remove: if authenticated {
                self.shared.auth.as_ref().and_then(|a| {
                    msg.headers_named(HeaderName::ProxyAuthorization)
                        .find(|h| {
                            sip_core::auth::Credentials::parse(h.value)
                                .is_ok_and(|c| c.realm == Some(a.realm.as_str()))
                        })
                        .map(|h| (h.line, h.value))
                })
            } else {
                None
            },
        };
        let added = 1
            + usize::from(edits.record_route.is_some())
            + usize::from(edits.route.is_some())
            + usize::from(msg.max_forwards().is_none());
        let removed = usize::from(edits.pop_route && msg.route_count() == 1)
            + usize::from(edits.remove.is_some());
        match forward_request(msg, &edits, out) {
            // What we forward must itself be acceptable to the next hop:
            // our lines can push a request at the limits over them.
            Ok(())
                if out.len() > Limits::DEFAULT.max_message_len
                    || msg.header_count() + added > Limits::DEFAULT.max_headers + removed =>
            {
                out.clear();
                self.respond(
                    msg,
                    StatusCode::MESSAGE_TOO_LARGE_5XX,
                    &[(
                        "Warning",
                        "399 sipsec \"too large to forward with this proxy's headers\"",
                    )],
                    src,
                    out,
                )
            }
            Ok(()) => self.forwarded(msg, src, target, out_transport, out),
            Err(_) => {
                out.clear();
                self.respond(msg, StatusCode::TOO_MANY_HOPS, &[], src, out)
            }
        }
    }

    /// A request was written into `out` for `target`: with transactions,
    /// open one first (a response may come back before this returns).
    fn forwarded(
        &mut self,
        msg: &Message<'_>,
        src: SocketAddr,
        target: SocketAddr,
        transport: Transport,
        out: &mut Vec<u8>,
    ) -> Reply {
        if let Some(tx) = &self.shared.transactions {
            if msg.method() != Method::Ack {
                let key = Key {
                    branch: self.branch(msg),
                    cancel: false,
                };
                let up = self.upstream(msg, src);
                let started = tx.start(
                    key,
                    msg,
                    up,
                    out,
                    (target, transport),
                    self.now.mono,
                    &mut self.sends,
                    &self.shared.metrics,
                );
                match started {
                    Ok(()) => {}
                    Err(StartError::Exists) => {
                        out.clear();
                        return Reply::Drop;
                    }
                    Err(StartError::Full) => {
                        out.clear();
                        return self.respond(
                            msg,
                            StatusCode::SERVICE_UNAVAILABLE,
                            &[("Retry-After", "5")],
                            src,
                            out,
                        );
                    }
                }
            }
        }
        bump(&self.shared.metrics.forwarded);
        Reply::Send(target, transport)
    }

    fn forward_response(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Reply {
        if !self.is_our_via(msg.top_via()) || msg.via_count() < 2 {
            bump(&self.shared.metrics.dropped);
            return Reply::Drop;
        }
        // Stateless mode skips the branch decoding altogether.
        let stateful = self
            .shared
            .transactions
            .as_ref()
            .and_then(|tx| Some((tx, Key::of_message(msg)?)));
        if let Some((tx, key)) = stateful {
            let metrics = &self.shared.metrics;
            let strip = |m: &Message<'_>, o: &mut Vec<u8>| forward_response(m, o).is_ok();
            match tx.on_response(
                key,
                msg,
                self.now.mono,
                out,
                &mut self.sends,
                metrics,
                strip,
            ) {
                Upstream::Unknown => {}
                Upstream::Absorbed => return Reply::Drop,
                Upstream::Send((dest, transport)) => return Reply::Send(dest, transport),
            }
        }
        let Some(next) = msg.vias().nth(1) else {
            return Reply::Drop;
        };
        let host = next
            .received()
            .and_then(|r| r.parse::<IpAddr>().ok())
            .map(|ip| match ip {
                IpAddr::V4(a) => Host::V4(a),
                IpAddr::V6(a) => Host::V6(a),
            })
            .unwrap_or(next.host());
        let port = match next.rport() {
            Some(Some(p)) => Some(p),
            _ => next.port(),
        };
        let Some(dest) = resolve(host, port) else {
            bump(&self.shared.metrics.dropped);
            return Reply::Drop;
        };
        let transport = match next.transport() {
            sip_core::via::Transport::Tcp => Transport::Tcp,
            sip_core::via::Transport::Tls => Transport::Tls,
            _ => Transport::Udp,
        };
        match forward_response(msg, out) {
            Ok(()) if transport == Transport::Udp && out.len() > MAX_DATAGRAM => {
                bump(&self.shared.metrics.oversize);
                bump(&self.shared.metrics.dropped);
                crate::log::oversize("forwarded response", dest, out.len());
                Reply::Drop
            }
            Ok(()) => Reply::Send(dest, transport),
            Err(_) => {
                bump(&self.shared.metrics.dropped);
                Reply::Drop
            }
        }
    }
}
