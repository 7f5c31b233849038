//! The one place that decides how a message leaves: UDP from a socket,
//! every other transport through the connection layer ([`Connections`],
//! `io::tcp` today), which drops and counts what it cannot carry.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;

use crate::proto::core::{Reply, Shared, Transport};
use crate::proto::stateful::Sends;

/// The connection layer, as senders see it.
pub trait Connections: std::fmt::Debug + Send + Sync {
    /// Sends on the connection to `dest` (opening one if needed, without
    /// blocking the caller on the connect); a message for a transport it
    /// does not carry is dropped and counted.
    fn send_on(&self, dest: SocketAddr, transport: Transport, bytes: &[u8]);
}

/// Sends by transport.
#[derive(Debug, Clone)]
pub struct Sender {
    shared: Arc<Shared>,
    udp: Option<Arc<UdpSocket>>,
    hub: Option<Arc<dyn Connections>>,
}

impl Sender {
    /// Sends UDP from `udp` and the rest through `hub`.
    pub fn new(
        shared: Arc<Shared>,
        udp: Option<Arc<UdpSocket>>,
        hub: Option<Arc<dyn Connections>>,
    ) -> Self {
        Self { shared, udp, hub }
    }

    /// Sends `bytes` to `dest` over `transport`; what cannot leave is
    /// counted as dropped (and, for a forwarded request, answered 503 by
    /// its transaction).
    pub fn send(&self, bytes: &[u8], dest: SocketAddr, transport: Transport) {
        match (transport, &self.udp, &self.hub) {
            (Transport::Udp, Some(udp), _) => {
                self.shared.sending(bytes, dest, Transport::Udp);
                let _ = udp.send_to(bytes, dest);
            }
            (_, _, Some(hub)) if transport != Transport::Udp => {
                hub.send_on(dest, transport, bytes);
            }
            _ => {
                self.shared
                    .metrics
                    .dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Sends every message in `sends`, in order.
    pub fn send_all(&self, sends: &Sends) {
        for (bytes, (dest, transport)) in sends.iter() {
            self.send(bytes, dest, transport);
        }
    }

    /// Carries out a core's reply for the message in `out`.
    pub fn reply(&self, reply: Reply, out: &[u8]) {
        if let Reply::Send(dest, transport) = reply {
            self.send(out, dest, transport);
        }
    }
}
