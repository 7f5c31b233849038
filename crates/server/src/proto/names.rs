//! Domain names as next hops: what the core asks the driver's resolver
//! (RFC 3263), from memory only. The driver implements [`Names`]; the
//! core and the stateful proxy's transactions call it.

use std::net::SocketAddr;

use sip_core::Transport;

/// What the driver knows of where a domain name leads, from memory only
/// (the hot path never waits for DNS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// There.
    At(SocketAddr),
    /// Nowhere: the name does not resolve (or not now).
    Nowhere,
    /// Being resolved: a request for it can be [parked](Names::park).
    Resolving,
    /// Not known, and too many names are being resolved to start on it.
    Busy,
}

/// Domain names as next hops (RFC 3263: SRV, then addresses). Implemented
/// by the driver; called on the hot path, so it must not block.
pub trait Names: std::fmt::Debug + Send + Sync {
    /// Where a request for `name` (at `port`, if the URI gives one) over
    /// `transport` goes; a name not known yet starts being resolved.
    fn find(&self, name: &str, port: Option<u16>, transport: Transport) -> Found;

    /// Holds the request `message` (from `src` over `arrived`) until the
    /// resolution of `name` that [`find`](Self::find) started is over,
    /// then hands it in again.
    fn park(
        &self,
        name: &str,
        port: Option<u16>,
        transport: Transport,
        message: &[u8],
        src: SocketAddr,
        arrived: Transport,
    ) -> Park;

    /// Sending to `to` over `transport` failed (refused, timed out, or
    /// answered 503): it is skipped while other addresses are known, for
    /// the configured time or, given a 503's Retry-After, for that long
    /// (RFC 3263 §4.3, RFC 3261 §21.5.4).
    fn failed(&self, _to: SocketAddr, _transport: Transport, _retry_after: Option<u32>) {}

    /// The first address, in RFC 3263 order, that `name` (at `port`, over
    /// `transport`) leads to and that has not failed lately; from memory
    /// only, `None` when there is none.
    fn alternative(
        &self,
        _name: &str,
        _port: Option<u16>,
        _transport: Transport,
    ) -> Option<SocketAddr> {
        None
    }
}

/// A next hop named by a domain name: what a stateful proxy asks again
/// for another address when the one it used fails (RFC 3263 §4.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The name, as the URI gives it.
    pub name: String,
    /// The URI's port, if any (none: SRV records are asked).
    pub port: Option<u16>,
    /// The transport the request goes over.
    pub transport: Transport,
}

/// What became of a request [parked](Names::park) for a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Park {
    /// It waits: the resolver hands it in again.
    Parked,
    /// The resolution was over before it could wait: this is its outcome.
    Known(Found),
    /// No room for it.
    Full,
}
