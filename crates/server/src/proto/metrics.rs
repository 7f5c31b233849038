//! Counters and stage-time histograms, exported in the Prometheus text
//! format (<https://prometheus.io/docs/instrumenting/exposition_formats/>).
//!
//! Stages are the ones the published lean server reported: parse, find
//! user, authenticate, format response, add user. Recording is a few
//! relaxed atomic adds.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use crate::proto::metrics_methods::Answered;
use crate::proto::metrics_methods::{cseq_method, method_index, METHODS};
use crate::stripes::{Padded, Striped};

/// What a busy connection (one decided by every reactor) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spread {
    /// Connections that became busy enough to be decided by every reactor.
    Connections,
    /// Messages of a busy connection handed to another reactor to decide.
    Handoffs,
    /// Times a busy connection was not read because a reactor held
    /// `spread_queue` messages handed to it, or 256 of its own were
    /// still being decided elsewhere (tried again a millisecond later).
    Held,
    /// Times a busy connection was not read because its socket took no
    /// more of its answers (read again on the edge that says its peer
    /// took them).
    PeerWaits,
    /// Messages handed to another reactor and decided there (`Handoffs`
    /// less this is what waits).
    Decided,
    /// Messages of a busy connection decided by its own reactor though
    /// their calls are another's: it kept up, so no hand-off was needed.
    Kept,
}

const SPREAD_KINDS: usize = Spread::Kept as usize + 1;
use sip_tls::COUNTED_GROUPS as TLS_GROUPS;

/// Upper bounds of the histogram buckets, in nanoseconds.
pub const BUCKETS_NS: [u64; 14] = [
    250, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 1_000_000,
    4_000_000, 16_000_000,
];

/// Times a stage for the histograms, from a clock the driver lends the
/// core (`Shared::stage_clock`) and only for sampled requests.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(std::time::Instant);

impl Stopwatch {
    /// Starts timing at `t`.
    pub fn at(t: std::time::Instant) -> Self {
        Self(t)
    }

    /// Time from the start to `t`.
    pub fn until(&self, t: std::time::Instant) -> Duration {
        t.saturating_duration_since(self.0)
    }
}

/// A fixed-bucket latency histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS_NS.len() + 1],
    sum_ns: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    /// Records one duration.
    pub fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let i = BUCKETS_NS
            .iter()
            .position(|b| ns <= *b)
            .unwrap_or(BUCKETS_NS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Mean in nanoseconds (0 without samples).
    pub fn mean_ns(&self) -> u64 {
        self.sum_ns
            .load(Ordering::Relaxed)
            .checked_div(self.count())
            .unwrap_or(0)
    }

    fn write(&self, out: &mut String, name: &str, label: &str) {
        let mut cumulative = 0;
        for (i, b) in BUCKETS_NS.iter().enumerate() {
            cumulative += self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{label},le=\"{}\"}} {cumulative}",
                *b as f64 / 1e9
            );
        }
        cumulative += self.buckets[BUCKETS_NS.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{label},le=\"+Inf\"}} {cumulative}");
        let _ = writeln!(
            out,
            "{name}_sum{{{label}}} {}",
            self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9
        );
        let _ = writeln!(out, "{name}_count{{{label}}} {}", self.count());
    }
}

/// The internal stages timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Parsing the message.
    Parse,
    /// Looking the user up in the location service.
    FindUser,
    /// Checking credentials.
    Authenticate,
    /// Writing the response.
    FormatResponse,
    /// Adding or updating bindings (memory and journal).
    AddUser,
}

impl Stage {
    /// All stages.
    pub const ALL: [Stage; 5] = [
        Stage::Parse,
        Stage::FindUser,
        Stage::Authenticate,
        Stage::FormatResponse,
        Stage::AddUser,
    ];

    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Parse => "parse",
            Stage::FindUser => "find_user",
            Stage::Authenticate => "authenticate",
            Stage::FormatResponse => "format_response",
            Stage::AddUser => "add_user",
        }
    }
}

/// Why a connection was closed (`sipsec_connections_closed_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The peer closed it.
    Peer,
    /// Nothing arrived for the idle timeout.
    Idle,
    /// The TLS handshake missed its deadline.
    HandshakeTimeout,
    /// A SIP message was not complete in time after its first byte.
    MessageTimeout,
    /// The peer did not read what was queued for it.
    SlowReader,
    /// The byte stream could not be framed as SIP.
    BadFraming,
    /// TLS failed (bad record, handshake refused).
    Tls,
    /// An outbound connect failed or timed out.
    ConnectFailed,
    /// A socket error.
    Error,
    /// The server stopped.
    Shutdown,
    /// A WebSocket upgrade was refused, or the peer broke RFC 6455's
    /// framing rules.
    WebSocket,
    /// CRLF keep-alives or WebSocket pings far beyond RFC 5626's pace.
    KeepaliveFlood,
    /// No SIP message within the first-message deadline.
    Silent,
    /// Closed near the connection limit to make room: it had sent no SIP
    /// message yet.
    Evicted,
}

impl CloseReason {
    /// Every reason, in label order.
    pub const ALL: [CloseReason; 14] = [
        CloseReason::Peer,
        CloseReason::Idle,
        CloseReason::HandshakeTimeout,
        CloseReason::MessageTimeout,
        CloseReason::SlowReader,
        CloseReason::BadFraming,
        CloseReason::Tls,
        CloseReason::ConnectFailed,
        CloseReason::Error,
        CloseReason::Shutdown,
        CloseReason::WebSocket,
        CloseReason::KeepaliveFlood,
        CloseReason::Silent,
        CloseReason::Evicted,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            CloseReason::Peer => "peer",
            CloseReason::Idle => "idle",
            CloseReason::HandshakeTimeout => "handshake_timeout",
            CloseReason::MessageTimeout => "message_timeout",
            CloseReason::SlowReader => "slow_reader",
            CloseReason::BadFraming => "bad_framing",
            CloseReason::Tls => "tls",
            CloseReason::ConnectFailed => "connect_failed",
            CloseReason::Error => "error",
            CloseReason::Shutdown => "shutdown",
            CloseReason::WebSocket => "websocket",
            CloseReason::KeepaliveFlood => "keepalive_flood",
            CloseReason::Silent => "first_message_timeout",
            CloseReason::Evicted => "evicted",
        }
    }
}

/// The transports counted apart, in label order.
pub const TRANSPORTS: [&str; 5] = ["udp", "tcp", "tls", "ws", "wss"];

/// A transport's index in [`TRANSPORTS`] (transports not served, such as
/// SCTP, never reach a counter; they would count as UDP).
fn transport_index(t: sip_core::Transport) -> usize {
    use sip_core::Transport as T;
    match t {
        T::Tcp => 1,
        T::Tls => 2,
        T::Ws => 3,
        T::Wss => 4,
        _ => 0,
    }
}

/// Lowest and highest status codes counted one by one.
const CODES: std::ops::RangeInclusive<u16> = 100..=699;

/// The counters every message adds to, one per thread (see
/// `crate::stripes`), at these offsets: requests by method, requests by
/// transport, responses by class, then responses with one of
/// [`HOT_CODES`] by code and by the method of the request they answer.
const REQUESTS: usize = 0;
const BY_TRANSPORT: usize = REQUESTS + METHODS.len();
const BY_CLASS: usize = BY_TRANSPORT + TRANSPORTS.len();
const BY_CODE: usize = BY_CLASS + 6;
const PER_MESSAGE: usize = BY_CODE + HOT_CODES.len() * METHODS.len();

/// The codes most answers carry, counted per thread with the rest of a
/// message's counters; the others share one counter per code and method
/// ([`ByCode`]): a thread's copy stays two kilobytes, not seventy.
const HOT_CODES: [u16; 15] = [
    100, 180, 183, 200, 202, 401, 403, 404, 407, 408, 480, 486, 487, 500, 503,
];

/// Where the count of answers with a code to a method is kept.
enum CodeSlot {
    /// In the per-thread counters, at this offset.
    Hot(usize),
    /// In [`ByCode`], at this index.
    Shared(usize),
}

/// The slot of `code` (within [`CODES`]) and method `m` (an index in
/// [`METHODS`]).
fn code_slot(code: u16, m: usize) -> Option<CodeSlot> {
    if !CODES.contains(&code) {
        return None;
    }
    Some(match HOT_CODES.iter().position(|c| *c == code) {
        Some(h) => CodeSlot::Hot(BY_CODE + h * METHODS.len() + m),
        None => CodeSlot::Shared(usize::from(code - CODES.start()) * METHODS.len() + m),
    })
}

/// Answers counted by code and by the method of the request they answer
/// (its CSeq), for the codes not in [`HOT_CODES`]: one counter per pair.
struct ByCode(Box<[AtomicU64]>);

impl std::fmt::Debug for ByCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ByCode")
    }
}

impl Default for ByCode {
    fn default() -> Self {
        let n = CODES.len() * METHODS.len();
        Self((0..n).map(|_| AtomicU64::new(0)).collect())
    }
}

/// UDP workers counted apart.
pub const MAX_WORKERS_COUNTED: usize = 32;

/// Everything the server counts.
#[derive(Debug, Default)]
pub struct Metrics {
    closed: [AtomicU64; CloseReason::ALL.len()],
    closed_by_transport: [AtomicU64; TRANSPORTS.len()],
    open_by_transport: [AtomicU64; TRANSPORTS.len()],
    accepted_by_transport: [AtomicU64; TRANSPORTS.len()],
    /// Requests and responses, by method, transport, class and code.
    per_message: Striped<PER_MESSAGE>,
    by_code: ByCode,
    /// Sources banned after repeated authentication failures.
    pub bans: AtomicU64,
    /// Bans that ran out.
    pub unbans: AtomicU64,
    /// Connections accepted.
    pub connections_accepted: AtomicU64,
    /// Connections refused at accept: the global limit was reached.
    pub refused_limit: AtomicU64,
    /// Connections refused at accept: their source IP had its share.
    pub refused_per_ip: AtomicU64,
    /// Connections refused at accept: their source IP connected faster
    /// than its accept rate.
    pub refused_per_ip_rate: AtomicU64,
    /// CRLF keep-alives and WebSocket pings received on connections.
    pub conn_keepalives: AtomicU64,
    /// Times a reactor left connections in the accept queue because the
    /// accept rate was spent.
    pub accepts_deferred: AtomicU64,
    stages: [Histogram; 5],
    /// Responses received (proxy).
    pub responses_received: AtomicU64,
    /// REGISTERs refused for what a binding would store (a contact, To,
    /// Call-ID or Path longer than the registrar keeps).
    pub contacts_refused: AtomicU64,
    /// REGISTERs refused because the registrar held `max_bindings`.
    pub registrar_full: AtomicU64,
    /// Location changes refused because the journal's byte rate was spent.
    pub journal_throttled: AtomicU64,
    /// UDP answers to unverified sources whose contact listing was cut to
    /// bound amplification.
    pub listings_cut: AtomicU64,
    /// UDP challenges to unverified sources that left out algorithms to
    /// bound amplification.
    pub challenges_cut: AtomicU64,
    /// Initial requests refused for a Route naming another element.
    pub preloaded_routes: AtomicU64,
    /// In-dialog requests refused for a next hop this proxy's
    /// Record-Route does not prove.
    pub unproven_routes: AtomicU64,
    /// Responses dropped because nothing proves they answer a request
    /// this server forwarded (forged, or from before a restart).
    pub responses_unproven: AtomicU64,
    /// Malformed messages.
    pub malformed: AtomicU64,
    /// STUN Binding requests answered on the SIP UDP port (RFC 5626 §8).
    pub stun_bindings: AtomicU64,
    /// CRLF keep-alives received over UDP (dropped).
    pub keepalives: AtomicU64,
    /// Messages dropped without an answer.
    pub dropped: AtomicU64,
    /// Requests forwarded.
    pub forwarded: AtomicU64,
    /// Successful REGISTERs.
    pub registered: AtomicU64,
    /// Authentication failures (wrong credentials, replay, unknown user).
    pub auth_failures: AtomicU64,
    /// Journal write failures.
    pub journal_errors: AtomicU64,
    /// Nonce counts reused by another request (replays refused).
    pub auth_replays: AtomicU64,
    /// Requests dropped because their source is banned.
    pub banned: AtomicU64,
    /// Messages too large for a UDP datagram (answered with a short error
    /// or dropped).
    pub oversize: AtomicU64,
    /// Requests for an outbound registration whose connection was gone
    /// (answered 430 Flow Failed, RFC 5626 §5.3).
    pub flows_failed: AtomicU64,
    /// DNS queries sent for next hops named by domain names.
    pub dns_queries: AtomicU64,
    /// DNS answers refused because the server did not mark them
    /// validated by DNSSEC (`[dns] require_dnssec`).
    pub dns_unvalidated: AtomicU64,
    /// Requests whose next hop's name was not known yet (they waited
    /// for it, or it came as they were about to).
    pub hop_waits: AtomicU64,
    /// REGISTERs that met a change in flight on their AoR and waited for
    /// its commit.
    pub busy_waits: AtomicU64,
    /// Waits a UDP worker took after a read so that the next read
    /// takes several messages (`batch_wait_us`).
    pub paced_waits: AtomicU64,
    /// 1 while the UDP workers are steered by Call-ID (`udp_balance =
    /// "call"` loaded and attached), else 0.
    pub udp_steered_by_call: AtomicU64,
    /// Datagrams the UDP workers received past the kernel's stack
    /// (AF_XDP, `udp_xdp`).
    pub xdp_received: AtomicU64,
    /// Datagrams they sent that way.
    pub xdp_sent: AtomicU64,
    /// Frames taken on AF_XDP sockets and discarded as the kernel's stack
    /// would have (checksums that fail, sources that cannot send).
    pub xdp_discarded: AtomicU64,
    /// Frames the kernel dropped before an AF_XDP socket could take them
    /// (its receive ring full, or no buffer lent to fill), read from the
    /// sockets at most once a second.
    pub xdp_dropped: AtomicU64,
    /// Requests answered 503 because their next hop's name did not
    /// resolve.
    pub hop_unresolved: AtomicU64,
    /// Requests answered 503 with Retry-After because the resolver had no
    /// room to wait for their next hop's name.
    pub hop_resolver_full: AtomicU64,
    /// Requests answered 503 with Retry-After because this node's copy of
    /// the shared location had not followed it for longer than
    /// `max_stale`.
    pub location_stale: AtomicU64,
    /// Requests sent to another address of their next hop's name after
    /// the one tried failed (RFC 3263 §4.3).
    pub hop_failovers: AtomicU64,
    /// Datagrams each UDP worker received (workers past the last share
    /// the last slot): how evenly the load is spread.
    udp_workers: [Padded; MAX_WORKERS_COUNTED],
    /// Messages each connection reactor decided (reactors past the last
    /// share the last slot).
    reactor_messages: [Padded; MAX_WORKERS_COUNTED],
    /// What busy connections did ([`Spread`]), counted per thread: the
    /// hand-off path adds to these for every message it hands on, on
    /// every reactor at once.
    spread: Striped<SPREAD_KINDS>,
    /// Bindings dropped because the WebSocket connection they were
    /// registered over closed.
    pub flow_bindings_dropped: AtomicU64,
    /// Requests forked to several contacts of a user (RFC 3261 §16.6).
    pub forked: AtomicU64,
    /// Branches those requests were forked to, the first included.
    pub fork_branches: AtomicU64,
    /// ICMP "unreachable" errors for datagrams this server sent.
    pub udp_unreachable: AtomicU64,
    /// Online compactions of the location journal.
    pub compactions: AtomicU64,
    /// Requests refused by the rate limiter.
    pub rate_limited: AtomicU64,
    /// Outbound TCP connects in progress (a gauge).
    pub tcp_connects_pending: AtomicU64,
    /// Proxy transactions in the table (a gauge; stateful mode).
    pub active_transactions: AtomicU64,
    /// Memory the transaction table holds, bytes (a gauge; stateful mode).
    pub transaction_bytes: AtomicU64,
    /// Requests refused (503): their source's transactions held its whole
    /// share of the table's memory.
    pub transactions_over_share: AtomicU64,
    /// Request retransmissions absorbed by a transaction (stateful mode).
    pub retransmissions_absorbed: AtomicU64,
    /// Client transactions that timed out, answered upstream with 408.
    pub transaction_timeouts: AtomicU64,
    /// CANCELs received for a pending INVITE.
    pub cancels: AtomicU64,
    /// TLS handshakes completed (accepted and opened).
    pub tls_handshakes: AtomicU64,
    /// The same, by key-exchange group (index in [`TLS_GROUPS`]).
    pub tls_groups: [AtomicU64; TLS_GROUPS.len()],
    /// Of them, those that resumed a session (no certificate sent).
    pub tls_resumed: AtomicU64,
    /// Handshakes refused because the client offered no post-quantum
    /// group (`[tls] require_pq`).
    pub tls_pq_refused: AtomicU64,
    /// TLS handshakes that failed or timed out.
    pub tls_handshake_failures: AtomicU64,
    /// WebSocket upgrades accepted (RFC 7118).
    pub ws_upgrades: AtomicU64,
    /// WebSocket upgrades refused (bad request, origin, subprotocol).
    pub ws_upgrades_refused: AtomicU64,
    /// Operator-endpoint requests refused as a browser's cross-site or
    /// DNS-rebinding request.
    pub http_refused: AtomicU64,
    /// Certificate/key reloads that took effect.
    pub tls_reloads: AtomicU64,
    /// Reloads refused (the old certificate stayed in use).
    pub tls_reload_failures: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Metrics {
    /// Counts a connection closed for `reason`.
    pub fn closed(&self, reason: CloseReason) {
        bump(&self.closed[reason as usize]);
    }

    /// UDP worker `index` received `n` datagrams.
    #[inline]
    pub fn udp_worker_received(&self, index: usize, n: usize) {
        let slot = index.min(MAX_WORKERS_COUNTED - 1);
        self.udp_workers[slot]
            .0
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Connection reactor `index` decided a message.
    #[inline]
    pub fn reactor_decided(&self, index: usize) {
        bump(&self.reactor_messages[index.min(MAX_WORKERS_COUNTED - 1)].0);
    }

    /// Counts one event of a busy connection.
    pub fn spread_add(&self, what: Spread) {
        self.spread_add_n(what, 1);
    }

    /// Counts `n` events of a busy connection.
    pub fn spread_add_n(&self, what: Spread, n: u64) {
        self.spread.add(what as usize, n);
    }

    /// Events of busy connections of one kind, since the start.
    pub fn spread(&self, what: Spread) -> u64 {
        self.spread.get(what as usize)
    }

    /// Messages connection reactor `index` decided so far.
    pub fn reactor_messages(&self, index: usize) -> u64 {
        self.reactor_messages[index.min(MAX_WORKERS_COUNTED - 1)]
            .0
            .load(Ordering::Relaxed)
    }

    /// Datagrams UDP worker `index` received so far.
    pub fn udp_worker_datagrams(&self, index: usize) -> u64 {
        self.udp_workers[index.min(MAX_WORKERS_COUNTED - 1)]
            .0
            .load(Ordering::Relaxed)
    }

    /// Connections closed for `reason` so far.
    pub fn closed_for(&self, reason: CloseReason) -> u64 {
        self.closed[reason as usize].load(Ordering::Relaxed)
    }

    /// Counts a connection opened (accepted or connected) on `t`.
    pub fn connection_opened(&self, t: sip_core::Transport, accepted: bool) {
        let i = transport_index(t);
        bump(&self.open_by_transport[i]);
        if accepted {
            bump(&self.accepted_by_transport[i]);
        }
    }

    /// Counts a connection on `t` closed for `reason`.
    pub fn connection_closed(&self, t: sip_core::Transport, reason: CloseReason) {
        let i = transport_index(t);
        self.open_by_transport[i].fetch_sub(1, Ordering::Relaxed);
        bump(&self.closed_by_transport[i]);
        self.closed(reason);
    }

    /// Open connections on `t`.
    pub fn open_connections(&self, t: sip_core::Transport) -> u64 {
        self.open_by_transport[transport_index(t)].load(Ordering::Relaxed)
    }

    /// Counts a request by method and by the transport it came over.
    pub fn request(&self, method: &str, transport: sip_core::Transport) {
        self.per_message.add(REQUESTS + method_index(method), 1);
        self.per_message
            .add(BY_TRANSPORT + transport_index(transport), 1);
    }

    /// Requests received so far, all methods.
    pub fn requests_total(&self) -> u64 {
        (0..METHODS.len())
            .map(|i| self.per_message.get(REQUESTS + i))
            .sum()
    }

    /// Responses sent or forwarded so far in class `class` (1 to 6).
    pub fn responses_in_class(&self, class: usize) -> u64 {
        match class {
            1..=6 => self.per_message.get(BY_CLASS + class - 1),
            _ => 0,
        }
    }

    /// Requests received over `t`.
    pub fn requests_over(&self, t: sip_core::Transport) -> u64 {
        self.per_message.get(BY_TRANSPORT + transport_index(t))
    }

    /// Counts a response this server sent or forwarded, by class, and by
    /// code and method when the method is known.
    pub fn response(&self, code: u16, method: Option<&str>) {
        self.response_to(code, method.map(method_index));
    }

    /// [`response`](Self::response) with the method's index in [`METHODS`].
    fn response_to(&self, code: u16, method: Option<usize>) {
        let class = usize::from(code / 100).clamp(1, 6) - 1;
        self.per_message.add(BY_CLASS + class, 1);
        match method.and_then(|m| code_slot(code, m)) {
            Some(CodeSlot::Hot(i)) => self.per_message.add(i, 1),
            Some(CodeSlot::Shared(i)) => bump(&self.by_code.0[i]),
            None => {}
        }
    }

    /// Responses with `code` to `method` requests.
    pub fn responses(&self, code: u16, method: &str) -> u64 {
        self.answers(code, method_index(method))
    }

    /// Answers with `code` to requests of method `m` (its index).
    fn answers(&self, code: u16, m: usize) -> u64 {
        match code_slot(code, m) {
            Some(CodeSlot::Hot(i)) => self.per_message.get(i),
            Some(CodeSlot::Shared(i)) => self.by_code.0[i].load(Ordering::Relaxed),
            None => 0,
        }
    }

    /// [`sent`](Self::sent) for bytes that may be an answer the core
    /// wrote ([`Answered`]): counted from what it says of them when it
    /// describes them, without reading their CSeq again.
    pub fn sent_answer(&self, bytes: &[u8], answered: Option<Answered>) {
        match answered.filter(|a| a.describes(bytes)) {
            Some(a) => {
                debug_assert_eq!(cseq_method(bytes).map(method_index), Some(a.method));
                self.response_to(a.code, Some(a.method));
            }
            None => self.sent(bytes),
        }
    }

    /// Counts what is being sent when it is a response: every send path
    /// calls this once per message, so every response that leaves (made
    /// here, forwarded, or resent by a transaction timer) is counted once.
    pub fn sent(&self, bytes: &[u8]) {
        if let Some(&[a, b, c]) = bytes.strip_prefix(b"SIP/2.0 ").and_then(|r| r.get(..3)) {
            if [a, b, c].iter().all(u8::is_ascii_digit) {
                let code = [a, b, c]
                    .iter()
                    .fold(0, |n, d| n * 10 + u16::from(d - b'0'));
                self.response(code, cseq_method(bytes));
            }
        }
    }

    /// Records a stage duration.
    pub fn stage(&self, s: Stage, d: Duration) {
        self.stages[s as usize].record(d);
    }

    /// A stage's histogram.
    pub fn stage_histogram(&self, s: Stage) -> &Histogram {
        &self.stages[s as usize]
    }

    /// Requests counted for a method.
    pub fn requests(&self, method: &str) -> u64 {
        self.per_message.get(REQUESTS + method_index(method))
    }

    /// The Prometheus text exposition, with gauges supplied by the caller.
    pub fn render(&self, gauges: &[(&str, &str, u64)]) -> String {
        let mut o = String::with_capacity(8192);
        self.render_messages(&mut o);
        self.render_transports(&mut o);
        for (name, help, c) in self.counters() {
            let _ = writeln!(
                o,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                c.load(Ordering::Relaxed)
            );
        }
        self.render_connections(&mut o);
        self.render_tls_groups(&mut o);
        for (name, help, v) in gauges {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        self.render_stages(&mut o);
        o
    }

    /// Requests and responses, by method, class and code.
    fn render_messages(&self, o: &mut String) {
        o.push_str("# HELP sipsec_requests_total SIP requests received, by method.\n# TYPE sipsec_requests_total counter\n");
        for (i, m) in METHODS.iter().enumerate() {
            let _ = writeln!(
                o,
                "sipsec_requests_total{{method=\"{m}\"}} {}",
                self.per_message.get(REQUESTS + i)
            );
        }
        o.push_str("# HELP sipsec_responses_sent_total Responses sent or forwarded, by class.\n# TYPE sipsec_responses_sent_total counter\n");
        for class in 1..=6 {
            let _ = writeln!(
                o,
                "sipsec_responses_sent_total{{class=\"{class}xx\"}} {}",
                self.responses_in_class(class)
            );
        }
        o.push_str("# HELP sipsec_responses_total Responses sent or forwarded, by status code and the method of the request answered (pairs never seen are left out).\n# TYPE sipsec_responses_total counter\n");
        for code in CODES {
            for (i, m) in METHODS.iter().enumerate() {
                let n = self.answers(code, i);
                if n > 0 {
                    let _ = writeln!(
                        o,
                        "sipsec_responses_total{{code=\"{code}\",method=\"{m}\"}} {n}"
                    );
                }
            }
        }
    }

    /// Requests and connections, by transport.
    fn render_transports(&self, o: &mut String) {
        let load =
            |a: &[AtomicU64; TRANSPORTS.len()]| a.each_ref().map(|c| c.load(Ordering::Relaxed));
        let requests = std::array::from_fn(|i| self.per_message.get(BY_TRANSPORT + i));
        for (family, help, kind, values) in [
            (
                "sipsec_requests_by_transport_total",
                "SIP requests received, by transport.",
                "counter",
                requests,
            ),
            (
                "sipsec_connections",
                "Open connections, by transport.",
                "gauge",
                load(&self.open_by_transport),
            ),
            (
                "sipsec_connections_accepted_by_transport_total",
                "Connections accepted, by transport.",
                "counter",
                load(&self.accepted_by_transport),
            ),
            (
                "sipsec_connections_closed_by_transport_total",
                "Connections closed (any reason), by transport.",
                "counter",
                load(&self.closed_by_transport),
            ),
        ] {
            let _ = writeln!(o, "# HELP {family} {help}\n# TYPE {family} {kind}");
            for (i, t) in TRANSPORTS.iter().enumerate() {
                if family != "sipsec_requests_by_transport_total" && i == 0 {
                    continue;
                }
                let _ = writeln!(o, "{family}{{transport=\"{t}\"}} {}", values[i]);
            }
        }
    }

    /// A TLS handshake completed with key-exchange group `group` (an
    /// IANA name; counted as "other" when not in [`TLS_GROUPS`]).
    pub fn tls_handshake(&self, group: &str, resumed: bool) {
        if resumed {
            self.tls_resumed.fetch_add(1, Ordering::Relaxed);
        }
        let i = TLS_GROUPS
            .iter()
            .position(|g| *g == group)
            .unwrap_or(TLS_GROUPS.len() - 1);
        self.tls_groups[i].fetch_add(1, Ordering::Relaxed);
        self.tls_handshakes.fetch_add(1, Ordering::Relaxed);
    }

    /// Handshakes by group, as `/status` shows them (groups seen only).
    pub fn tls_groups_seen(&self) -> Vec<(&'static str, u64)> {
        TLS_GROUPS
            .iter()
            .zip(&self.tls_groups)
            .map(|(g, n)| (*g, n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// `sipsec_tls_handshakes_total{group}`.
    fn render_tls_groups(&self, o: &mut String) {
        o.push_str("# HELP sipsec_tls_handshakes_total TLS handshakes completed, by key-exchange group (X25519MLKEM768: hybrid post-quantum).\n# TYPE sipsec_tls_handshakes_total counter\n");
        for (g, n) in TLS_GROUPS.iter().zip(&self.tls_groups) {
            let _ = writeln!(
                o,
                "sipsec_tls_handshakes_total{{group=\"{g}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            o,
            "# HELP sipsec_tls_resumed_total TLS handshakes that resumed a session (a ticket; no certificate or signature).\n# TYPE sipsec_tls_resumed_total counter\nsipsec_tls_resumed_total {}",
            self.tls_resumed.load(Ordering::Relaxed)
        );
    }

    /// The UDP workers' shares and the connection layer's counts.
    fn render_connections(&self, o: &mut String) {
        o.push_str("# HELP sipsec_udp_worker_datagrams_total Datagrams each UDP worker received (workers that received none are left out): how evenly the load is spread.\n# TYPE sipsec_udp_worker_datagrams_total counter\n");
        for (i, c) in self.udp_workers.iter().enumerate() {
            let n = c.0.load(Ordering::Relaxed);
            if n > 0 {
                let _ = writeln!(o, "sipsec_udp_worker_datagrams_total{{worker=\"{i}\"}} {n}");
            }
        }
        o.push_str("# HELP sipsec_reactor_messages_total Messages each connection reactor decided (reactors that decided none are left out).\n# TYPE sipsec_reactor_messages_total counter\n");
        for (i, c) in self.reactor_messages.iter().enumerate() {
            let n = c.0.load(Ordering::Relaxed);
            if n > 0 {
                let _ = writeln!(o, "sipsec_reactor_messages_total{{reactor=\"{i}\"}} {n}");
            }
        }
        let _ = writeln!(
            o,
            "# HELP sipsec_connection_spread_total Busy connections whose messages every reactor decides, the messages handed to another reactor, the times a busy connection waited for the reactors deciding them and for its peer to take its answers, the handed messages decided, and those its own reactor decided as it kept up.\n# TYPE sipsec_connection_spread_total counter\nsipsec_connection_spread_total{{what=\"connections\"}} {}\nsipsec_connection_spread_total{{what=\"handoffs\"}} {}\nsipsec_connection_spread_total{{what=\"held\"}} {}\nsipsec_connection_spread_total{{what=\"peer_waits\"}} {}\nsipsec_connection_spread_total{{what=\"decided\"}} {}\nsipsec_connection_spread_total{{what=\"kept\"}} {}",
            self.spread(Spread::Connections),
            self.spread(Spread::Handoffs),
            self.spread(Spread::Held),
            self.spread(Spread::PeerWaits),
            self.spread(Spread::Decided),
            self.spread(Spread::Kept)
        );
        o.push_str("# HELP sipsec_connections_closed_total Connections closed, by reason.\n# TYPE sipsec_connections_closed_total counter\n");
        for r in CloseReason::ALL {
            let _ = writeln!(
                o,
                "sipsec_connections_closed_total{{reason=\"{}\"}} {}",
                r.label(),
                self.closed_for(r)
            );
        }
        let _ = writeln!(
            o,
            "# HELP sipsec_connections_accepted_total Connections accepted.\n# TYPE sipsec_connections_accepted_total counter\nsipsec_connections_accepted_total {}",
            self.connections_accepted.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            o,
            "# HELP sipsec_connections_refused_total Connections refused at accept, by limit.\n# TYPE sipsec_connections_refused_total counter\nsipsec_connections_refused_total{{reason=\"limit\"}} {}\nsipsec_connections_refused_total{{reason=\"per_ip\"}} {}\nsipsec_connections_refused_total{{reason=\"per_ip_rate\"}} {}",
            self.refused_limit.load(Ordering::Relaxed),
            self.refused_per_ip.load(Ordering::Relaxed),
            self.refused_per_ip_rate.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            o,
            "# HELP sipsec_connection_keepalives_total CRLF keep-alives and WebSocket pings received on connections.\n# TYPE sipsec_connection_keepalives_total counter\nsipsec_connection_keepalives_total {}",
            self.conn_keepalives.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            o,
            "# HELP sipsec_connections_accepts_deferred_total Times accepting waited for the accept rate (connect storms).\n# TYPE sipsec_connections_accepts_deferred_total counter\nsipsec_connections_accepts_deferred_total {}",
            self.accepts_deferred.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            o,
            "# HELP sipsec_tcp_connects_pending Outbound TCP connects in progress.\n# TYPE sipsec_tcp_connects_pending gauge\nsipsec_tcp_connects_pending {}",
            self.tcp_connects_pending.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            o,
            "# HELP sipsec_active_transactions Proxy transactions in progress.\n# TYPE sipsec_active_transactions gauge\nsipsec_active_transactions {}",
            self.active_transactions.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            o,
            "# HELP sipsec_transaction_bytes Memory held by proxy transactions (entries and kept messages).\n# TYPE sipsec_transaction_bytes gauge\nsipsec_transaction_bytes {}",
            self.transaction_bytes.load(Ordering::Relaxed)
        );
    }

    /// The stage timings' histograms.
    fn render_stages(&self, o: &mut String) {
        o.push_str("# HELP sipsec_stage_seconds Time spent in internal stages (each worker times one request in 16).\n# TYPE sipsec_stage_seconds histogram\n");
        for s in Stage::ALL {
            self.stage_histogram(s).write(
                o,
                "sipsec_stage_seconds",
                &format!("stage=\"{}\"", s.as_str()),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        h.record(Duration::from_nanos(100));
        h.record(Duration::from_nanos(700));
        h.record(Duration::from_secs(1));
        let mut s = String::new();
        h.write(&mut s, "x", "a=\"b\"");
        assert!(s.contains("x_bucket{a=\"b\",le=\"0.00000025\"} 1\n"), "{s}");
        assert!(s.contains("x_bucket{a=\"b\",le=\"0.000001\"} 2\n"), "{s}");
        assert!(s.contains("x_bucket{a=\"b\",le=\"+Inf\"} 3\n"), "{s}");
        assert!(s.contains("x_count{a=\"b\"} 3\n"));
    }

    #[test]
    fn render_has_every_family() {
        let m = Metrics::default();
        m.request("REGISTER", sip_core::Transport::Udp);
        m.request("FOO", sip_core::Transport::Tls);
        m.response(200, Some("REGISTER"));
        m.response(404, None);
        m.sent(b"SIP/2.0 486 Busy Here\r\nVia: SIP/2.0/UDP h\r\ncseq: 7  INVITE\r\n\r\n");
        // A code not among the hot ones, and one past the codes counted.
        m.response(420, Some("OPTIONS"));
        m.response(420, Some("OPTIONS"));
        m.response(799, Some("OPTIONS"));
        let t = m.render(&[("sipsec_bindings", "Live bindings.", 7)]);
        assert!(t.contains("sipsec_requests_total{method=\"REGISTER\"} 1\n"));
        assert!(t.contains("sipsec_requests_total{method=\"other\"} 1\n"));
        assert!(t.contains("sipsec_responses_sent_total{class=\"4xx\"} 4\n"));
        assert!(t.contains("sipsec_responses_sent_total{class=\"6xx\"} 1\n"));
        assert!(t.contains("sipsec_responses_total{code=\"420\",method=\"OPTIONS\"} 2\n"));
        assert!(!t.contains("code=\"799\""));
        assert!(t.contains("sipsec_bindings 7\n"));
        assert!(t.contains("sipsec_stage_seconds_count{stage=\"add_user\"} 0\n"));
        assert!(t.contains("sipsec_responses_total{code=\"200\",method=\"REGISTER\"} 1\n"));
        assert!(t.contains("sipsec_responses_total{code=\"486\",method=\"INVITE\"} 1\n"));
        assert!(!t.contains("code=\"404\""), "no method, no pair");
        assert!(t.contains("sipsec_requests_by_transport_total{transport=\"tls\"} 1\n"));
        assert_eq!(m.responses(486, "INVITE"), 1);
    }

    #[test]
    fn an_answer_is_known_again_by_its_length_and_code_alone() {
        let ok: &[u8] = b"SIP/2.0 200 OK\r\nCSeq: 1 REGISTER\r\n\r\n";
        let a = Answered::new(ok, 200, &sip_core::Method::Register);
        assert!(a.describes(ok));
        let busy: &[u8] = b"SIP/2.0 486 OK\r\nCSeq: 1 REGISTER\r\n\r\n";
        assert!(!a.describes(busy), "another code");
        assert!(!a.describes(&ok[1..]), "another length");
        assert!(!a.describes(b"XIP/2.0 200 OK\r\nCSeq: 1 REGISTER\r\n\r\n"));
        let m = Metrics::default();
        m.sent_answer(ok, Some(a));
        m.sent_answer(busy, Some(a));
        assert_eq!(m.responses(200, "REGISTER"), 1);
        assert_eq!(m.responses(486, "REGISTER"), 1, "read when not described");
        let odd: &[u8] = b"SIP/2.0 513 x\r\nCSeq: 1 X\r\n\r\n";
        let q = Answered::new(odd, 513, &sip_core::Method::Extension("X"));
        m.sent_answer(odd, Some(q));
        assert_eq!(m.responses(513, "other"), 1);
    }
}
