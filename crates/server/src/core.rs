//! Request handling, independent of sockets and threads.

use std::net::SocketAddr;

use sip_core::writer::{write_error_response, write_response, ResponseOptions};
use sip_core::{Message, Method, StatusCode};

/// Methods this server accepts, advertised in Allow.
pub const ALLOW: &str = "OPTIONS";

/// What to do with one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Send `out` back to the source address.
    Send,
    /// Send nothing (responses, ACKs, unanswerable garbage).
    Drop,
}

/// Per-datagram statistics a worker keeps.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Requests answered.
    pub answered: u64,
    /// Malformed messages (answered 400 when possible).
    pub malformed: u64,
    /// Messages dropped without an answer.
    pub dropped: u64,
}

/// The request handler.
#[derive(Debug, Clone, Default)]
pub struct Core {
    counters: Counters,
}

impl Core {
    /// A handler with zeroed counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Handles one datagram from `src`, writing any answer into `out`
    /// (which the caller clears and reuses).
    pub fn handle(&mut self, input: &[u8], _src: SocketAddr, out: &mut Vec<u8>) -> Reply {
        let msg = match Message::parse(input) {
            Ok(m) => m,
            Err(e) => {
                self.counters.malformed += 1;
                return if write_error_response(input, &e, out) {
                    Reply::Send
                } else {
                    self.counters.dropped += 1;
                    Reply::Drop
                };
            }
        };
        if !msg.is_request() || msg.method() == Method::Ack {
            self.counters.dropped += 1;
            return Reply::Drop;
        }
        let (status, extra): (StatusCode, &[(&str, &str)]) = match msg.method() {
            Method::Options => (
                StatusCode::OK,
                &[("Allow", ALLOW), ("Accept", "application/sdp")],
            ),
            _ => (StatusCode::NOT_IMPLEMENTED, &[("Allow", ALLOW)]),
        };
        write_response(
            out,
            &msg,
            status,
            &ResponseOptions {
                to_tag: Some("sipsec"),
                extra,
                ..Default::default()
            },
        );
        self.counters.answered += 1;
        Reply::Send
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src() -> SocketAddr {
        "192.0.2.1:5060".parse().expect("literal address")
    }

    #[test]
    fn options_is_answered() {
        let req = b"OPTIONS sip:s SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:s>\r\nCall-ID: c\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n";
        let mut core = Core::new();
        let mut out = Vec::new();
        assert_eq!(core.handle(req, src(), &mut out), Reply::Send);
        let r = Message::parse(&out).expect("valid response");
        assert_eq!(r.status(), Some(StatusCode::OK));
        assert_eq!(r.to().tag(), Some("sipsec"));
        assert_eq!(core.counters().answered, 1);
    }

    #[test]
    fn garbage_and_responses_are_dropped() {
        let mut core = Core::new();
        let mut out = Vec::new();
        assert_eq!(
            core.handle(b"\x00\x01garbage", src(), &mut out),
            Reply::Drop
        );
        assert_eq!(core.handle(b"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:s>\r\nCall-ID: c\r\nCSeq: 1 OPTIONS\r\n\r\n", src(), &mut out), Reply::Drop);
        assert!(out.is_empty());
        assert_eq!(
            core.counters(),
            Counters {
                answered: 0,
                malformed: 1,
                dropped: 2
            }
        );
    }
}
