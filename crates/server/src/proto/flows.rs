//! Which connections are open, as the connection layer keeps them: the
//! proxy asks before it sends a request down a registered flow (RFC 5626
//! §5.3; a browser is reached on its WebSocket or not at all) and for the
//! TLS connection that stands for a domain name (RFC 5923 aliases). The
//! connection layer writes here when a connection opens, takes an alias,
//! starts closing or closes; the core only reads.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddr;

use sip_core::uri::Host;
use sip_core::{Message, Transport};

use crate::shards::Shards;

const SHARDS: usize = 16;

/// A domain name (lower case) and port.
type Name = (Box<str>, u16);

/// Whether a flow over `a` serves `b`: the same transport, or either
/// kind of WebSocket (browsers put `transport=ws` in Contact over WSS too).
pub fn same_flow_transport(a: Transport, b: Transport) -> bool {
    a == b
        || matches!(
            (a, b),
            (
                Transport::Ws | Transport::Wss,
                Transport::Ws | Transport::Wss
            )
        )
}

/// What an RFC 5923 alias request asks a TLS connection to stand for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AliasTarget {
    /// An address (its certificate must name the IP).
    Addr(SocketAddr),
    /// A domain name, lower case, and port (its certificate must name the
    /// name).
    Name(String, u16),
}

/// The alias a request that came over TLS from `peer` asks for (RFC 5923
/// §5: a top Via over TLS with `alias`, its sent-by — port 5061 when it
/// gives none — other than the connection's own peer). Whether the peer's
/// certificate names it is the connection layer's check; without it the
/// alias is refused, so a peer can only alias itself.
pub fn alias_asked(msg: &Message<'_>, peer: SocketAddr) -> Option<AliasTarget> {
    let via = msg.top_via();
    if !msg.is_request()
        || !via.transport_str().eq_ignore_ascii_case("TLS")
        || via.params().get("alias").is_none()
    {
        return None;
    }
    let port = via.port().unwrap_or(5061);
    let target = match via.host() {
        Host::V4(a) => AliasTarget::Addr((a, port).into()),
        Host::V6(a) => AliasTarget::Addr((a, port).into()),
        Host::Name(n) => AliasTarget::Name(n.to_ascii_lowercase(), port),
    };
    (target != AliasTarget::Addr(peer)).then_some(target)
}

/// The open flows; see the module documentation.
#[derive(Debug)]
pub struct OpenFlows {
    /// Whether a connection layer keeps this table: without one (UDP
    /// only, simulations) every flow counts as open.
    kept: bool,
    hasher: RandomState,
    /// Peer (or alias address) → the connection's transport and identity.
    peers: Shards<HashMap<SocketAddr, (Transport, u64)>>,
    /// (lower-case name, port) → the peer of the TLS connection standing
    /// for it.
    names: Shards<HashMap<Name, (SocketAddr, u64)>>,
}

impl OpenFlows {
    /// An empty table; `kept`: a connection layer will keep it.
    pub fn new(kept: bool, hasher: RandomState) -> Self {
        Self {
            kept,
            hasher,
            peers: Shards::new(SHARDS, HashMap::new),
            names: Shards::new(SHARDS, HashMap::new),
        }
    }

    fn shard<T: std::hash::Hash>(&self, key: &T) -> usize {
        self.hasher.hash_one(key) as usize
    }

    /// Connection `id` over `transport` is open to `peer` (or stands for
    /// the address `peer`); a newer one replaces an older.
    pub fn opened(&self, peer: SocketAddr, transport: Transport, id: u64) {
        self.peers
            .lock(self.shard(&peer))
            .insert(peer, (transport, id));
    }

    /// Connection `id` stands for the domain `name` at `port` (TLS, its
    /// certificate names it), with its peer `peer`.
    pub fn aliased(&self, name: &str, port: u16, peer: SocketAddr, id: u64) {
        let key = (name.to_ascii_lowercase().into_boxed_str(), port);
        self.names.lock(self.shard(&key)).insert(key, (peer, id));
    }

    /// Connection `id` closes (or starts to): `at` and `names` no longer
    /// lead to it, unless a newer connection took them meanwhile.
    pub fn closed<'a>(
        &self,
        at: impl IntoIterator<Item = SocketAddr>,
        names: impl IntoIterator<Item = (&'a str, u16)>,
        id: u64,
    ) {
        for peer in at {
            let mut s = self.peers.lock(self.shard(&peer));
            if s.get(&peer).is_some_and(|(_, i)| *i == id) {
                s.remove(&peer);
            }
        }
        for (name, port) in names {
            let key = (name.to_ascii_lowercase().into_boxed_str(), port);
            let mut s = self.names.lock(self.shard(&key));
            if s.get(&key).is_some_and(|(_, i)| *i == id) {
                s.remove(&key);
            }
        }
    }

    /// Whether a `transport` connection with `peer` is open.
    pub fn open(&self, peer: SocketAddr, transport: Transport) -> bool {
        if !self.kept {
            return true;
        }
        self.peers
            .lock(self.shard(&peer))
            .get(&peer)
            .is_some_and(|(t, _)| same_flow_transport(*t, transport))
    }

    /// The peer of an open TLS connection that stands for `name` at
    /// `port`, if one does.
    pub fn named(&self, name: &str, port: u16) -> Option<SocketAddr> {
        let key = (name.to_ascii_lowercase().into_boxed_str(), port);
        let s = self.names.lock(self.shard(&key));
        s.get(&key).map(|(peer, _)| *peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 1], port))
    }

    #[test]
    fn a_flow_is_open_from_its_opening_to_its_closing_and_a_newer_one_wins() {
        let f = OpenFlows::new(true, RandomState::new());
        assert!(!f.open(at(1), Transport::Tcp));
        f.opened(at(1), Transport::Wss, 7);
        assert!(f.open(at(1), Transport::Ws), "either WebSocket serves");
        assert!(!f.open(at(1), Transport::Tcp));
        // A newer connection from the same address; the old one's close
        // leaves it.
        f.opened(at(1), Transport::Wss, 8);
        f.closed([at(1)], [], 7);
        assert!(f.open(at(1), Transport::Wss));
        f.closed([at(1)], [], 8);
        assert!(!f.open(at(1), Transport::Wss));
        assert!(OpenFlows::new(false, RandomState::new()).open(at(1), Transport::Tcp));
    }

    #[test]
    fn an_alias_is_asked_by_a_tls_via_with_alias_naming_another_sent_by() {
        let ask = |via: &str, peer: &str| {
            let req = format!(
                "OPTIONS sip:a@b SIP/2.0\r\nVia: {via}\r\nMax-Forwards: 70\r\n\
                 From: <sip:x@y>;tag=1\r\nTo: <sip:a@b>\r\nCall-ID: c\r\n\
                 CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
            );
            let msg = Message::parse(req.as_bytes()).unwrap();
            alias_asked(&msg, peer.parse().unwrap())
        };
        let peer = "192.0.2.1:40000";
        assert_eq!(
            ask("SIP/2.0/TLS Peer.Example;branch=z9hG4bK1;alias", peer),
            Some(AliasTarget::Name("peer.example".into(), 5061))
        );
        assert_eq!(
            ask("SIP/2.0/TLS 192.0.2.1:5061;branch=z9hG4bK1;alias", peer),
            Some(AliasTarget::Addr("192.0.2.1:5061".parse().unwrap()))
        );
        assert_eq!(
            ask("SIP/2.0/TLS 192.0.2.1:40000;branch=z9hG4bK1;alias", peer),
            None
        );
        assert_eq!(ask("SIP/2.0/TLS peer.example;branch=z9hG4bK1", peer), None);
        assert_eq!(
            ask("SIP/2.0/TCP peer.example;branch=z9hG4bK1;alias", peer),
            None
        );
    }

    #[test]
    fn an_alias_leads_to_its_connection_until_it_closes() {
        let f = OpenFlows::new(true, RandomState::new());
        f.opened(at(5061), Transport::Tls, 3);
        f.aliased("Peer.Example", 5061, at(5061), 3);
        assert_eq!(f.named("peer.example", 5061), Some(at(5061)));
        assert_eq!(f.named("peer.example", 5060), None);
        f.closed([at(5061)], [("peer.example", 5061)], 3);
        assert_eq!(f.named("peer.example", 5061), None);
    }
}
