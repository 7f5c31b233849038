//! `[connections]`: the limits and deadlines of the connection layer
//! (TCP, TLS, WebSocket).

use std::time::Duration;

/// Default `[connections] spread_queue`: a few turns of a busy trunk.
pub const DEFAULT_SPREAD_QUEUE: usize = 4096;
/// Largest `[connections] spread_queue` accepted: each waiting message is
/// held in memory (up to 64 KiB each).
pub const MAX_SPREAD_QUEUE: usize = 65_536;

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
    /// Bytes sent on a connection must be taken by its peer within this
    /// time: a peer that stops reading (a zero window) or answers nothing
    /// (a dead host, a cut path) is closed as a slow reader when it runs
    /// out. The kernel keeps it (`TCP_USER_TIMEOUT`, RFC 5482), so it
    /// costs nothing while no byte waits.
    pub send_timeout: Duration,
    /// Reactor threads serving connections; 0: one per core (at most 4).
    pub reactors: usize,
    /// Messages a second on one connection past which its messages are
    /// decided by every reactor, spread by Call-ID (a busy trunk); 0:
    /// never. Messages of one call stay on one reactor, in order.
    pub spread_above: u32,
    /// A busy connection's messages go to their calls' reactors even
    /// while its own reactor keeps up (by default only while it is
    /// behind: a hand-off costs more than a decision): for measuring
    /// the hand-off itself.
    pub spread_always: bool,
    /// Messages of busy connections handed to one reactor and not yet
    /// decided, at most: past it the busy connections are not read until
    /// that reactor catches up (TCP's window holds their peers).
    pub spread_queue: usize,
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
            send_timeout: Duration::from_secs(30),
            reactors: 0,
            spread_above: 2000,
            spread_always: false,
            spread_queue: DEFAULT_SPREAD_QUEUE,
            accept_burst: 64,
            accept_rate: 2000,
            accept_rate_per_ip: 100,
            first_message_timeout: Duration::from_secs(20),
            keepalive_rate: 2,
        }
    }
}

/// The most connection reactors a configuration may ask for.
pub const MAX_REACTORS: usize = 256;

impl ConnectionLimits {
    /// The reactor threads to start: `reactors`, or one per core (at
    /// most 4) when it is 0.
    pub fn reactor_count(&self) -> usize {
        match self.reactors {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
            n => n,
        }
    }
}
