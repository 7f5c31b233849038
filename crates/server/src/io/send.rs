//! The one place that decides how a message leaves: UDP from a socket,
//! every other transport through the connection layer ([`Connections`],
//! `io::tcp` today), which drops and counts what it cannot carry.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::io::sinks::Sinks;
use crate::io::wake::{Via, Wakers};
use crate::proto::branch::Key;
use crate::proto::core::{Reply, Transport};
use crate::proto::effects::Sends;
use crate::proto::metrics::Answered;
use crate::proto::shared::Shared;

/// Every send path calls this once per message leaving, before its bytes
/// are written (so that a peer holding an answer finds it counted): it
/// counts the message and hands a copy to the tracer when one is on (the
/// core never calls the tracer: the drivers do, here and on what they
/// receive).
pub fn leaving(
    shared: &Shared,
    sinks: &Sinks,
    bytes: &[u8],
    peer: SocketAddr,
    transport: Transport,
) {
    leaving_answer(shared, sinks, bytes, peer, transport, None);
}

/// [`leaving`] for bytes that may be the answer the core says it wrote
/// ([`Core::answered`](crate::proto::core::Core::answered)): counted from
/// what the core says when it describes them.
pub fn leaving_answer(
    shared: &Shared,
    sinks: &Sinks,
    bytes: &[u8],
    peer: SocketAddr,
    transport: Transport,
    answered: Option<Answered>,
) {
    shared.metrics.sent_answer(bytes, answered);
    sinks.sent(bytes, peer, transport);
}

/// Most ICMP errors one look at a socket's queue reads: all it can hold.
/// The kernel charges queued errors to the receive buffer (4 MiB, at
/// least ~700 bytes an error), so errors left queued would take the room
/// of requests; a flood of them costs a look as long as it takes to read
/// them, and no more.
const ERRORS_PER_LOOK: usize = 8192;

/// The connection layer, as senders see it.
pub trait Connections: std::fmt::Debug + Send + Sync {
    /// Sends on the connection to `dest` (opening one if needed, without
    /// blocking the caller on the connect); a message for a transport it
    /// does not carry is dropped and counted.
    /// `key`: the transaction (and try) a forwarded request belongs to,
    /// failed at once when it cannot be carried.
    fn send_on(&self, dest: SocketAddr, transport: Transport, bytes: &[u8], key: Option<(Key, u8)>);
}

/// Sends by transport.
#[derive(Debug, Clone)]
pub struct Sender {
    shared: Arc<Shared>,
    sinks: Sinks,
    udp: Option<Arc<UdpSocket>>,
    /// Whether `udp` sends to IPv4 addresses.
    udp_ipv4: bool,
    hub: Option<Arc<dyn Connections>>,
    wakers: Arc<Wakers>,
}

impl Sender {
    /// Sends UDP from `udp` and the rest through `hub`, waking the
    /// threads the cores ask for through `wakers`, tracing through
    /// `sinks`.
    pub fn new(
        shared: Arc<Shared>,
        sinks: Sinks,
        udp: Option<Arc<UdpSocket>>,
        hub: Option<Arc<dyn Connections>>,
        wakers: Arc<Wakers>,
    ) -> Self {
        let udp_ipv4 = udp
            .as_ref()
            .and_then(|u| u.local_addr().ok())
            .is_some_and(|a| a.is_ipv4());
        Self {
            shared,
            sinks,
            udp,
            udp_ipv4,
            hub,
            wakers,
        }
    }

    /// Counts and traces `bytes` leaving for `peer` by a path of the
    /// driver's own (a batch of datagrams), as [`leaving`].
    pub fn leaving(&self, bytes: &[u8], peer: SocketAddr, transport: Transport) {
        leaving(&self.shared, &self.sinks, bytes, peer, transport);
    }

    /// [`leaving_answer`] with this sender's counters and tracer.
    pub fn leaving_answer(
        &self,
        bytes: &[u8],
        peer: SocketAddr,
        transport: Transport,
        answered: Option<Answered>,
    ) {
        leaving_answer(&self.shared, &self.sinks, bytes, peer, transport, answered);
    }

    /// Where this driver traces messages and writes call records.
    pub fn sinks(&self) -> &Sinks {
        &self.sinks
    }

    /// The metrics its sends count in.
    pub fn metrics(&self) -> &crate::proto::metrics::Metrics {
        &self.shared.metrics
    }

    /// Sends `bytes` to `dest` over `transport`; what cannot leave is
    /// counted as dropped (and, for a forwarded request, answered 503 by
    /// its transaction).
    pub fn send(&self, bytes: &[u8], dest: SocketAddr, transport: Transport) {
        self.send_keyed(bytes, dest, transport, None);
    }

    /// [`send`](Self::send) for a request sent as try `key.1` of the
    /// stateful proxy's transaction `key.0`.
    pub fn send_keyed(
        &self,
        bytes: &[u8],
        dest: SocketAddr,
        transport: Transport,
        key: Option<(Key, u8)>,
    ) {
        match (transport, &self.udp, &self.hub) {
            (Transport::Udp, Some(udp), _) => {
                leaving(&self.shared, &self.sinks, bytes, dest, Transport::Udp);
                if sip_udp::send_to(udp, bytes, dest) {
                    self.udp_errors();
                }
            }
            (_, _, Some(hub)) if transport != Transport::Udp => {
                hub.send_on(dest, transport, bytes, key);
            }
            _ => {
                self.shared.metrics.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Reads the ICMP errors queued on the UDP socket (a system call on it
    /// failed; see [`sip_udp::report_errors`]). A request the stateful proxy
    /// forwarded to an address where nobody listens fails at once: the
    /// caller gets 503, or the next address of its next hop's name gets
    /// the request (RFC 3261 §18.4, RFC 3263 §4.3), instead of waiting
    /// for its timer. The branch that names the transaction is this
    /// proxy's, random and unguessable, so a forged ICMP error can only
    /// make a send fail once, as a lost datagram would.
    pub fn udp_errors(&self) {
        let Some(udp) = &self.udp else {
            return;
        };
        let shared = &self.shared;
        let mut sends = Sends::default();
        let now = std::time::Instant::now();
        sip_udp::unreachable(udp, ERRORS_PER_LOOK, |_, quoted| {
            shared.unreachable(quoted, now, &mut sends);
        });
        // What that produced goes without looking at the queue again (no
        // recursion): errors it draws are read at the next failure.
        for (bytes, (dest, transport)) in sends.iter() {
            if transport == Transport::Udp {
                leaving(shared, &self.sinks, bytes, dest, Transport::Udp);
                sip_udp::send_to(udp, bytes, dest);
            } else {
                self.send(bytes, dest, transport);
            }
        }
        for ((to, transport), skip) in sends.failed_hops() {
            crate::io::log::hop_failed(*to, transport.as_str(), *skip);
        }
    }

    /// What a datagram from `src` on a SIP socket answers, when it is a
    /// media relay's: the messages that waited on it, with their outcome.
    pub fn relay_answer(
        &self,
        data: &[u8],
        src: std::net::SocketAddr,
    ) -> Option<Vec<(crate::proto::parked::Parked, crate::proto::media::Outcome)>> {
        self.wakers.relay_answer(data, src)
    }

    /// Carries out what a decision produced besides its reply: sends
    /// every message in `sends`, in order, wakes the threads it asks for
    /// and logs the next hops that failed.
    pub fn send_all(&self, sends: &Sends) {
        for (bytes, (dest, transport), key) in sends.keyed() {
            self.send_keyed(bytes, dest, transport, key);
        }
        let via = self.udp.as_deref().map(|sock| Via {
            sock,
            ipv4: self.udp_ipv4,
        });
        self.wakers.wake(sends.wake(), via);
        for ((to, transport), skip) in sends.failed_hops() {
            crate::io::log::hop_failed(*to, transport.as_str(), *skip);
        }
    }

    /// Carries out a core's reply for the message in `out`; `key`: the
    /// transaction of the request it sends (`Core::sent_key`), if any.
    pub fn reply(&self, reply: Reply, out: &[u8], key: Option<(Key, u8)>) {
        if let Reply::Send(dest, transport) = reply {
            self.send_keyed(out, dest, transport, key);
        }
    }
}
