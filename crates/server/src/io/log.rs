//! Operator log events, emitted with [`tracing`] under `sipsec::*` targets
//! (`sipsec::server`, `sipsec::auth`, `sipsec::guard`, `sipsec::proxy`,
//! `sipsec::conn`, `sipsec::store`, `sipsec::tls`, `sipsec::users`); the
//! binary chooses the format (text or JSON) and the levels (`RUST_LOG`,
//! `--log-level`). Events a peer can trigger at will (authentication
//! failures, bans, relaying denied, rate limiting, connection defences,
//! journal errors under a full disk) are rate limited per kind — at most
//! one line a second, the next one saying how many were suppressed — so
//! an attack cannot flood the log.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::{error, info, warn};

use crate::proto::guard::{Scope, SourceKey};

/// One kind of event's rate limit.
#[derive(Debug)]
pub struct Limiter {
    next_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl Limiter {
    /// A limiter that lets the first line through.
    pub const fn new() -> Self {
        Self {
            next_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Whether a line may go out now; `Some(n)` with the lines suppressed
    /// since the last one.
    fn admit(&self) -> Option<u64> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let next = self.next_ms.load(Ordering::Relaxed);
        if now < next
            || self
                .next_ms
                .compare_exchange(next, now + 1000, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.suppressed.swap(0, Ordering::Relaxed))
    }
}

impl Default for Limiter {
    fn default() -> Self {
        Self::new()
    }
}

static AUTH_FAILURES: Limiter = Limiter::new();
static BANS: Limiter = Limiter::new();
static UNBANS: Limiter = Limiter::new();
static RELAY: Limiter = Limiter::new();
static FLOWS: Limiter = Limiter::new();
static RATE: Limiter = Limiter::new();
static JOURNAL_ERRORS: Limiter = Limiter::new();
static OVERSIZE: Limiter = Limiter::new();
static CONNECTIONS: Limiter = Limiter::new();
static CLOSED: Limiter = Limiter::new();
static UNRESOLVED: Limiter = Limiter::new();
static HOP_FAILED: Limiter = Limiter::new();
static NOT_VALIDATED: Limiter = Limiter::new();

/// A wrong answer to one of our challenges.
pub fn auth_failure(src: SocketAddr, user: &str) {
    if let Some(suppressed) = AUTH_FAILURES.admit() {
        warn!(target: "sipsec::auth", %src, user, suppressed, "authentication failed");
    }
}

/// A source was banned after repeated authentication failures, from
/// what `scope` names.
pub fn banned(source: SourceKey, scope: Scope, seconds: u64) {
    if let Some(suppressed) = BANS.admit() {
        warn!(target: "sipsec::guard", ip = %source, scope = scope.as_str(), seconds, suppressed, "source banned after repeated authentication failures");
    }
}

/// Bans that ran out (source and scope).
pub fn unbanned(lifted: &[(SourceKey, Scope)]) {
    if lifted.is_empty() {
        return;
    }
    if let Some(suppressed) = UNBANS.admit() {
        let shown: Vec<String> = lifted
            .iter()
            .take(10)
            .map(|(ip, scope)| match scope {
                Scope::All => ip.to_string(),
                Scope::WebSocket => format!("{ip} (websocket)"),
            })
            .collect();
        info!(target: "sipsec::guard", count = lifted.len(), ips = %shown.join(","), suppressed, "ban lifted");
    }
}

/// A call found its callee's every flow closed (430 Flow Failed).
pub fn flow_failed(aor: &str, bindings: usize) {
    if let Some(suppressed) = FLOWS.admit() {
        warn!(target: "sipsec::proxy", aor, bindings, suppressed, "no open flow to the callee (430 Flow Failed)");
    }
}

/// A change the operator made at runtime (over the operator endpoint);
/// rare and deliberate, so never suppressed.
pub fn operator(what: &str) {
    info!(target: "sipsec::operator", "{what}");
}

/// A request for a domain nobody here serves was refused.
pub fn relay_denied(src: SocketAddr, target: &str) {
    if let Some(suppressed) = RELAY.admit() {
        warn!(target: "sipsec::proxy", %src, ruri = target, suppressed, "relaying denied (403)");
    }
}

/// A request was dropped by the per-source rate limit (overload shedding).
pub fn rate_limited(src: SocketAddr) {
    if let Some(suppressed) = RATE.admit() {
        warn!(target: "sipsec::guard", %src, suppressed, "request dropped by the per-source rate limit");
    }
}

/// A binding change could not be journaled and was not applied.
pub fn journal_error(aor: &str, err: &str) {
    if let Some(suppressed) = JOURNAL_ERRORS.admit() {
        error!(target: "sipsec::store", aor, error = err, suppressed, "location write failed; binding refused");
    }
}

/// A message too large for a datagram was not sent as is.
pub fn oversize(what: &str, dest: SocketAddr, len: usize) {
    if let Some(suppressed) = OVERSIZE.admit() {
        warn!(target: "sipsec::server", what, %dest, len, suppressed, "message does not fit a UDP datagram");
    }
}

static COMPACTION: Limiter = Limiter::new();

/// An online compaction of the journal failed (it is retried).
pub fn compaction_failed(dir: &std::path::Path, err: &std::io::Error) {
    if let Some(suppressed) = COMPACTION.admit() {
        error!(target: "sipsec::store", dir = %dir.display(), error = %err, suppressed, "journal compaction failed (will retry)");
    }
}

/// The kernel refused the program that spreads datagrams over the UDP
/// workers (once, at start).
pub fn udp_spread_unavailable(err: &std::io::Error) {
    warn!(target: "sipsec::server", error = %err, "udp_balance = \"spread\" needs SO_ATTACH_REUSEPORT_CBPF (Linux 4.5); each sender stays on one worker (use \"shared\" to spread one peer)");
}

/// `udp_balance = "call"` could not load or attach its program: each
/// sender stays on one worker.
pub fn udp_call_unavailable(err: &std::io::Error) {
    warn!(target: "sipsec::server", error = %err, "udp_balance = \"call\" needs Linux 5.17, CAP_BPF and CAP_PERFMON to steer datagrams by Call-ID; each sender stays on one worker");
}

/// `udp_balance = "call"` steers by Call-ID with its loops bounded as
/// `bound` names (`bpf_loop` before Linux 6.9 costs the kernel about
/// 1.7 times as much a datagram as `may_goto`).
pub fn udp_call_on(bound: &str) {
    info!(target: "sipsec::server", bound, "udp_balance = \"call\": datagrams steered by Call-ID");
}

/// A WebSocket listener beyond loopback takes pages from any origin
/// (no `[websocket] origins` list), once at start.
pub fn ws_any_origin(proto: &str, addr: SocketAddr) {
    warn!(target: "sipsec::server", proto, %addr, "SIP over WebSocket takes pages from any web origin: any site a visitor opens can use the visitor's browser as a SIP client here (its failures ban only WebSocket from the visitor's address); name your web phone's origins in [websocket] origins (--ws-origins)");
}

/// `udp_xdp` could not be used on `iface` (or on one of its queues):
/// the UDP sockets serve what it would have carried.
pub fn udp_xdp_unavailable(iface: &str, why: &str) {
    warn!(target: "sipsec::server", interface = iface, error = why, "udp_xdp: AF_XDP unavailable; the UDP sockets serve this traffic");
}

/// The XDP program took `iface`'s datagrams for `port`: they reach the
/// workers before the host's packet filter sees them.
pub fn udp_xdp_past_the_firewall(iface: &str, port: u16) {
    warn!(target: "sipsec::server", interface = iface, port, "udp_xdp: datagrams for this port on this interface skip netfilter (nftables, iptables), rp_filter and tc; the host's firewall rules do not apply to them");
}

/// A UDP worker takes `iface`'s receive queue `queue` past the kernel.
pub fn udp_xdp_on(iface: &str, queue: u32) {
    info!(target: "sipsec::server", interface = iface, queue, "udp_xdp: UDP on AF_XDP");
}

/// The connection layer could not do something it should (accept, poll).
pub fn connection_trouble(msg: &str) {
    if let Some(suppressed) = CONNECTIONS.admit() {
        warn!(target: "sipsec::conn", suppressed, "{msg}");
    }
}

/// A next hop's domain name did not resolve (requests for it got 503).
pub fn unresolved(name: &str) {
    if let Some(suppressed) = UNRESOLVED.admit() {
        warn!(target: "sipsec::dns", name, suppressed, "next hop name did not resolve");
    }
}

/// A name server's answer was refused because it was not validated by
/// DNSSEC (`[dns] require_dnssec`).
pub fn not_validated(name: &str, server: SocketAddr) {
    if let Some(suppressed) = NOT_VALIDATED.admit() {
        warn!(target: "sipsec::dns", name, %server, suppressed, "answer not validated by DNSSEC (no AD bit) refused: require_dnssec is on");
    }
}

/// An address a next hop's name leads to failed (refused, silent, or
/// 503): later requests try the name's other addresses first.
pub fn hop_failed(to: SocketAddr, transport: &str, skipped_for: u32) {
    if let Some(suppressed) = HOP_FAILED.admit() {
        warn!(target: "sipsec::dns", %to, transport, skipped_for, suppressed, "next hop address failed; its name's other addresses are tried first");
    }
}

/// A connection was closed by a defence (deadline, slow reader, limit),
/// or a flow a phone registered on went away.
pub fn connection_closed(peer: SocketAddr, reason: &str) {
    if let Some(suppressed) = CLOSED.admit() {
        info!(target: "sipsec::conn", %peer, reason, suppressed, "connection closed");
    }
}

/// A call's media could not be relayed.
pub fn media_failed(call_id: &str, what: &str) {
    warn!(target: "sipsec::media", call_id, "{what}");
}

/// A TLS client was refused: it offered no key-exchange group the server
/// takes (`pq`: no post-quantum one, which `[tls] require_pq` demands).
pub fn tls_no_group(peer: SocketAddr, pq: bool) {
    if pq {
        warn!(target: "sipsec::tls", %peer, "TLS handshake refused: the client offers no post-quantum key exchange (X25519MLKEM768 or another ML-KEM group) and [tls] require_pq is set");
    } else {
        warn!(target: "sipsec::tls", %peer, "TLS handshake refused: the client offers no key-exchange group in [tls] groups");
    }
}

/// A request of the proxy's own (an operator's BYE) went unanswered.
pub fn unanswered(branch: &str) {
    warn!(target: "sipsec::operator", branch, "a BYE the operator asked for went unanswered (given up after 32 s)");
}

/// What STIR/SHAKEN made of a call (its `verstat` and why).
pub fn stir(call_id: &str, what: &str) {
    info!(target: "sipsec::stir", call_id, "{what}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_yields_one_line() {
        let l = Limiter::new();
        let admitted = (0..100).filter(|_| l.admit().is_some()).count();
        assert_eq!(admitted, 1);
        assert_eq!(l.suppressed.load(Ordering::Relaxed), 99);
    }
}
