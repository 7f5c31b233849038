//! The transports SIP runs over (RFC 3261 §18, RFC 7118 for WebSocket):
//! one type for the whole workspace — Via parsing, the server's drivers,
//! the phone and the load generator.

use crate::uri::{Scheme, Uri};

/// A SIP transport, as a Via names it or a URI asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// UDP
    Udp,
    /// TCP
    Tcp,
    /// TLS over TCP
    Tls,
    /// SCTP
    Sctp,
    /// WebSocket (RFC 7118)
    Ws,
    /// Secure WebSocket (RFC 7118)
    Wss,
    /// Anything else.
    Other,
}

const NAMES: [(&str, Transport); 6] = [
    ("UDP", Transport::Udp),
    ("TCP", Transport::Tcp),
    ("TLS", Transport::Tls),
    ("SCTP", Transport::Sctp),
    ("WS", Transport::Ws),
    ("WSS", Transport::Wss),
];

impl Transport {
    /// The transport a Via token or `transport=` value names (any case).
    pub fn from_token(s: &str) -> Self {
        NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(s))
            .map_or(Transport::Other, |(_, t)| *t)
    }

    /// The Via token (`UDP`, `TLS`, …); `OTHER` for an unknown one.
    pub fn as_str(self) -> &'static str {
        NAMES
            .iter()
            .find(|(_, t)| *t == self)
            .map_or("OTHER", |(n, _)| n)
    }

    /// Whether the transport is reliable (timers and retransmissions differ, RFC 3261 §17).
    pub fn is_reliable(self) -> bool {
        !matches!(self, Transport::Udp | Transport::Other)
    }

    /// The transport a URI asks for (RFC 3261 §18, §26.2.2): `sips:` is
    /// TLS, a `transport=` parameter names one, and without either it is
    /// UDP (an unknown parameter value too).
    pub fn of_uri(uri: &Uri<'_>) -> Self {
        if uri.scheme() == Scheme::Sips {
            return Transport::Tls;
        }
        match uri.param("transport").flatten().map(Self::from_token) {
            Some(Transport::Other) | None => Transport::Udp,
            Some(t) => t,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uri::UriContext;

    #[test]
    fn tokens_round_trip_and_uris_choose() {
        for (name, t) in NAMES {
            assert_eq!(Transport::from_token(&name.to_lowercase()), t);
            assert_eq!(t.as_str(), name);
        }
        assert_eq!(Transport::from_token("QUIC"), Transport::Other);
        let of = |s: &str| Transport::of_uri(&Uri::parse(s, UriContext::Header).expect("uri"));
        assert_eq!(of("sip:a@h"), Transport::Udp);
        assert_eq!(of("sips:a@h"), Transport::Tls);
        assert_eq!(of("sip:a@h;transport=TCP"), Transport::Tcp);
        assert_eq!(of("sip:a@h;transport=tls"), Transport::Tls);
        assert_eq!(of("sip:a@h;transport=ws"), Transport::Ws);
        assert_eq!(of("sip:a@h;transport=carrier-pigeon"), Transport::Udp);
        assert!(Transport::Tls.is_reliable() && !Transport::Udp.is_reliable());
    }
}
