//! Which final response the caller of a forked request gets (RFC 3261
//! §16.7 steps 6 and 7).
//!
//! While branches are still pending, the proxy keeps the best final
//! response seen so far: a 6xx over everything, otherwise the lowest
//! class; within a class, an answer from a phone (486 Busy Here, 404 …)
//! over what only says that a branch could not be reached (408, 430,
//! 503), so one gone or silent contact never hides a real answer. The
//! first of equals stays. When the best is a challenge (401/407), the
//! challenges of the other branches are merged into it (step 7).

use std::net::SocketAddr;

use sip_core::{HeaderName, Message, StatusCode, Transport};

use crate::proto::names::Route;

/// Most branches one request forks to; contacts past it are not tried.
pub const MAX_BRANCHES: usize = 8;
/// Most bytes of other branches' challenges merged into a 401/407.
const MAX_CHALLENGE_BYTES: usize = 4096;

/// One of a forked request's targets past the first, as the core wrote
/// it (RFC 3261 §16.6).
#[derive(Debug)]
pub struct Fork {
    /// The request as forwarded there.
    pub(crate) bytes: Vec<u8>,
    /// Where it goes.
    pub(crate) hop: (SocketAddr, Transport),
    /// The name the address was found by, when DNS found it.
    pub(crate) route: Option<Route>,
    /// Its q group (0: with the first target).
    pub(crate) group: u8,
}

/// How good a final response is for the caller: lower is better.
fn rank(status: StatusCode) -> u16 {
    let code = status.as_u16();
    if code >= 600 {
        return 0;
    }
    let unreachable = matches!(code, 408 | 430 | 503);
    (code / 100) * 2 + u16::from(unreachable)
}

fn is_challenge(status: StatusCode) -> bool {
    matches!(status.as_u16(), 401 | 407)
}

/// The best final response kept for a request's caller.
#[derive(Debug, Default)]
pub struct Best {
    status: Option<StatusCode>,
    /// The response as it goes upstream (this proxy's Via removed); empty
    /// when this proxy writes its own (a branch timed out or could not be
    /// reached).
    bytes: Vec<u8>,
    /// WWW-/Proxy-Authenticate lines of the other branches' challenges.
    challenges: Vec<u8>,
}

impl Best {
    /// The status kept, if any.
    pub fn status(&self) -> Option<StatusCode> {
        self.status
    }

    /// Bytes held, for the memory bound.
    pub fn capacity(&self) -> usize {
        self.bytes.capacity() + self.challenges.capacity()
    }

    /// A branch ended with `status`; `upstream` is the response as it
    /// would go upstream, or empty for one this proxy writes itself.
    pub fn offer(&mut self, status: StatusCode, upstream: &[u8]) {
        let Some(kept) = self.status else {
            self.keep(status, upstream);
            return;
        };
        if rank(status) < rank(kept) {
            self.challenges.clear();
            self.keep(status, upstream);
        } else if is_challenge(status) && is_challenge(kept) {
            self.merge(upstream);
        }
    }

    fn keep(&mut self, status: StatusCode, upstream: &[u8]) {
        self.status = Some(status);
        self.bytes.clear();
        self.bytes.extend_from_slice(upstream);
    }

    /// Keeps the challenge lines of another 401/407.
    fn merge(&mut self, upstream: &[u8]) {
        let Ok(msg) = Message::parse(upstream) else {
            return;
        };
        for h in msg.headers().filter(|h| {
            matches!(
                h.name,
                HeaderName::WwwAuthenticate | HeaderName::ProxyAuthenticate
            )
        }) {
            if self.challenges.len() + h.line.len() + 2 > MAX_CHALLENGE_BYTES {
                return;
            }
            self.challenges.extend_from_slice(h.line.as_bytes());
            self.challenges.extend_from_slice(b"\r\n");
        }
    }

    /// Writes the kept response into `out` (with the merged challenges
    /// after its status line) and returns its status; `None` (nothing
    /// written) when this proxy must write its own response instead.
    pub fn write(&self, out: &mut Vec<u8>) -> Option<StatusCode> {
        if self.bytes.is_empty() {
            return None;
        }
        let line = self.bytes.windows(2).position(|w| w == b"\r\n")? + 2;
        out.clear();
        out.extend_from_slice(&self.bytes[..line]);
        out.extend_from_slice(&self.challenges);
        out.extend_from_slice(&self.bytes[line..]);
        self.status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(code: u16, extra: &str) -> Vec<u8> {
        format!(
            "SIP/2.0 {code} X\r\nVia: SIP/2.0/UDP 127.0.0.1:5080;branch=z9hG4bKa\r\n\
             From: <sip:a@x>;tag=1\r\nTo: <sip:b@x>;tag=2\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\n\
             {extra}Content-Length: 0\r\n\r\n"
        )
        .into_bytes()
    }

    fn chosen(offers: &[(u16, bool)]) -> u16 {
        let mut best = Best::default();
        for &(code, own) in offers {
            let bytes = if own { Vec::new() } else { response(code, "") };
            best.offer(StatusCode::new(code).unwrap(), &bytes);
        }
        best.status().unwrap().as_u16()
    }

    #[test]
    fn a_phones_answer_beats_an_unreachable_branch_and_6xx_beats_all() {
        assert_eq!(chosen(&[(408, true), (486, false)]), 486);
        assert_eq!(chosen(&[(486, false), (430, false), (503, true)]), 486);
        assert_eq!(
            chosen(&[(404, false), (486, false)]),
            404,
            "first of equals"
        );
        assert_eq!(chosen(&[(486, false), (302, false)]), 302, "lowest class");
        assert_eq!(chosen(&[(302, false), (603, false)]), 603);
        assert_eq!(chosen(&[(503, false), (408, true)]), 408, "lowest class");
        assert_eq!(chosen(&[(503, false), (500, false)]), 500);
    }

    #[test]
    fn challenges_of_every_branch_reach_the_caller() {
        let mut best = Best::default();
        let a = response(401, "WWW-Authenticate: Digest realm=\"a\", nonce=\"1\"\r\n");
        let b = response(
            407,
            "Proxy-Authenticate: Digest realm=\"b\", nonce=\"2\"\r\n",
        );
        best.offer(StatusCode::UNAUTHORIZED, &a);
        best.offer(StatusCode::PROXY_AUTHENTICATION_REQUIRED, &b);
        best.offer(StatusCode::BUSY_HERE, &response(486, ""));
        let mut out = Vec::new();
        assert_eq!(best.write(&mut out), Some(StatusCode::UNAUTHORIZED));
        let msg = Message::parse(&out).unwrap();
        let realms: Vec<_> = msg
            .headers()
            .filter(|h| {
                matches!(
                    h.name,
                    HeaderName::WwwAuthenticate | HeaderName::ProxyAuthenticate
                )
            })
            .map(|h| h.value)
            .collect();
        assert_eq!(realms.len(), 2, "{}", String::from_utf8_lossy(&out));
        assert!(realms.iter().any(|r| r.contains("realm=\"b\"")));
    }

    #[test]
    fn merged_challenges_are_bounded() {
        let mut best = Best::default();
        let big = format!(
            "WWW-Authenticate: Digest realm=\"{}\"\r\n",
            "r".repeat(1000)
        );
        best.offer(StatusCode::UNAUTHORIZED, &response(401, &big));
        for _ in 0..20 {
            best.offer(StatusCode::UNAUTHORIZED, &response(401, &big));
        }
        assert!(best.challenges.len() <= MAX_CHALLENGE_BYTES);
    }

    #[test]
    fn an_own_response_writes_nothing() {
        let mut best = Best::default();
        best.offer(StatusCode::REQUEST_TIMEOUT, &[]);
        let mut out = b"old".to_vec();
        assert_eq!(best.write(&mut out), None);
        assert_eq!(best.status(), Some(StatusCode::REQUEST_TIMEOUT));
    }
}

/// Forked requests through the transaction table.
#[cfg(test)]
mod table {
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};

    use sip_core::transaction::TimerConfig;
    use sip_core::{Message, Transport};

    use crate::proto::branch::Key;
    use crate::proto::effects::{Hop, Sends};
    use crate::proto::legs::Target;
    use crate::proto::metrics::Metrics;
    use crate::proto::stateful::{Transactions, Upstream, DEFAULT_MAX_BYTES};

    const INVITE: &str = "INVITE sip:bob@sipsec SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5080;branch=z9hG4bKa1;rport\r\nMax-Forwards: 70\r\nFrom: <sip:alice@sipsec>;tag=a\r\nTo: <sip:bob@sipsec>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
    const ID: u64 = 0xab;

    fn hop(port: u16) -> Hop {
        (SocketAddr::from(([127, 0, 0, 1], port)), Transport::Udp)
    }

    fn via(fork: usize) -> String {
        format!("Via: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKsps0{fork:x}{ID:014x}\r\n")
    }

    /// The INVITE as forwarded down branch `fork`, to the contact at `port`.
    fn forwarded(fork: usize, port: u16) -> Vec<u8> {
        INVITE
            .replacen("sip:bob@sipsec", &format!("sip:bob@127.0.0.1:{port}"), 1)
            .replacen("Via: ", &format!("{}Via: ", via(fork)), 1)
            .replace("Max-Forwards: 70", "Max-Forwards: 69")
            .into_bytes()
    }

    fn response(fork: usize, status: u16, method: &str, extra: &str) -> Vec<u8> {
        format!(
            "SIP/2.0 {status} X\r\n{}Via: SIP/2.0/UDP 127.0.0.1:5080;branch=z9hG4bKa1;rport=5080\r\n\
             From: <sip:alice@sipsec>;tag=a\r\nTo: <sip:bob@sipsec>;tag=b{fork}\r\nCall-ID: c1\r\n\
             CSeq: 1 {method}\r\n{extra}Content-Length: 0\r\n\r\n",
            via(fork)
        )
        .into_bytes()
    }

    struct Fixture {
        tx: Transactions,
        m: Metrics,
        sends: Sends,
        t0: Instant,
    }

    /// An INVITE forked to the contacts at `ports`, in the q `groups`
    /// given (one per port).
    fn forked(ports: &[u16], groups: &[u8]) -> Fixture {
        let t0 = Instant::now();
        let tx = Transactions::new(TimerConfig::RFC3261, DEFAULT_MAX_BYTES);
        let (m, mut sends) = (Metrics::default(), Sends::default());
        let reqs: Vec<_> = ports
            .iter()
            .enumerate()
            .map(|(i, p)| forwarded(i, *p))
            .collect();
        let targets = reqs
            .iter()
            .zip(ports)
            .zip(groups)
            .map(|((r, p), g)| Target {
                forwarded: r,
                hop: hop(*p),
                route: None,
                group: *g,
            });
        let req = Message::parse(INVITE.as_bytes()).unwrap();
        let key = Key {
            branch: ID,
            cancel: false,
        };
        tx.start(key, &req, (hop(5080), None), targets, t0, &mut sends, &m)
            .unwrap();
        Fixture { tx, m, sends, t0 }
    }

    impl Fixture {
        /// What was sent since the last call, as `WHAT->PORT`.
        fn sent(&mut self) -> Vec<String> {
            let out = self.sends.summary();
            self.sends.clear();
            out
        }

        /// Branch `fork` answers; what goes upstream, as a status.
        fn answer(&mut self, fork: usize, status: u16, method: &str, extra: &str) -> Option<u16> {
            let bytes = response(fork, status, method, extra);
            let msg = Message::parse(&bytes).unwrap();
            let key = Key::of_message(&msg).unwrap();
            let mut out = Vec::new();
            let strip =
                |m: &Message<'_>, o: &mut Vec<u8>| sip_core::proxy::forward_response(m, o).is_ok();
            match self.tx.on_response(
                key,
                &msg,
                self.t0,
                &mut out,
                &mut self.sends,
                &self.m,
                strip,
            ) {
                Upstream::Send(h) => {
                    assert_eq!(h, hop(5080));
                    Some(Message::parse(&out).unwrap().status().unwrap().as_u16())
                }
                _ => None,
            }
        }

        fn tick(&mut self, after: Duration) {
            self.tx.tick(self.t0 + after, &mut self.sends, &self.m);
        }
    }

    #[test]
    fn the_first_2xx_goes_up_and_the_other_branches_are_cancelled() {
        let mut f = forked(&[5070, 5071, 5072], &[0, 0, 0]);
        assert_eq!(f.sent(), ["INVITE->5071", "INVITE->5072", "100->5080"]);
        assert_eq!(f.tx.pending_branches(), 3);
        assert_eq!(f.answer(1, 180, "INVITE", ""), Some(180));
        assert_eq!(f.answer(0, 180, "INVITE", ""), Some(180));
        assert_eq!(f.answer(0, 200, "INVITE", ""), Some(200));
        // Branch 1 rings: cancelled at once; branch 2 has not answered
        // yet: cancelled once it does (RFC 3261 §9.1).
        assert_eq!(f.sent(), ["CANCEL->5071"]);
        assert_eq!(f.answer(2, 180, "INVITE", ""), None, "after the 2xx");
        assert_eq!(f.sent(), ["CANCEL->5072"]);
        assert_eq!(f.answer(1, 200, "CANCEL", ""), None);
        assert_eq!(f.answer(1, 487, "INVITE", ""), None);
        assert_eq!(f.sent(), ["ACK->5071"]);
        // A second 2xx (the callee raced the CANCEL) still goes up: the
        // caller sorts out its dialogs (§16.7 step 5).
        assert_eq!(f.answer(2, 200, "INVITE", ""), Some(200));
        f.tick(Duration::from_secs(64));
        assert!(f.tx.is_empty(), "nothing left behind");
    }

    #[test]
    fn the_best_failure_goes_up_once_every_branch_failed() {
        let mut f = forked(&[5070, 5071, 5072], &[0, 0, 0]);
        f.sent();
        assert_eq!(f.answer(0, 486, "INVITE", ""), None, "others still live");
        assert_eq!(f.answer(2, 430, "INVITE", ""), None);
        assert_eq!(f.answer(1, 404, "INVITE", ""), Some(486));
        assert_eq!(f.sent(), ["ACK->5070", "ACK->5072", "ACK->5071"]);
    }

    #[test]
    fn a_silent_or_unreachable_branch_never_fails_the_call() {
        let mut f = forked(&[5070, 5071], &[0, 0]);
        f.sent();
        f.tx.on_transport_error(
            Key {
                branch: ID | 1 << 56,
                cancel: false,
            },
            0,
            f.t0,
            &mut f.sends,
            &f.m,
        );
        assert_eq!(f.sent(), Vec::<String>::new(), "no 503 while 5070 lives");
        assert_eq!(f.answer(0, 180, "INVITE", ""), Some(180));
        assert_eq!(f.answer(0, 200, "INVITE", ""), Some(200));
        // Alone, a branch that could not be reached fails the call at once.
        let mut g = forked(&[5070, 5071], &[0, 0]);
        g.sent();
        for fork in [0u64, 1] {
            let key = Key {
                branch: ID | fork << 56,
                cancel: false,
            };
            g.tx.on_transport_error(key, 0, g.t0, &mut g.sends, &g.m);
        }
        assert_eq!(g.sent(), ["500->5080"], "a 503 of several goes up as 500");
    }

    #[test]
    fn a_6xx_ends_the_search() {
        let mut f = forked(&[5070, 5071], &[0, 0]);
        f.sent();
        assert_eq!(f.answer(1, 180, "INVITE", ""), Some(180));
        assert_eq!(f.answer(0, 603, "INVITE", ""), None);
        assert_eq!(f.sent(), ["ACK->5070", "CANCEL->5071"]);
        assert_eq!(f.answer(1, 487, "INVITE", ""), Some(603));
    }

    #[test]
    fn challenges_of_all_branches_are_merged() {
        let mut f = forked(&[5070, 5071], &[0, 0]);
        f.sent();
        let a = "WWW-Authenticate: Digest realm=\"a\", nonce=\"1\"\r\n";
        let b = "Proxy-Authenticate: Digest realm=\"b\", nonce=\"2\"\r\n";
        assert_eq!(f.answer(0, 401, "INVITE", a), None);
        let bytes = response(1, 407, "INVITE", b);
        let msg = Message::parse(&bytes).unwrap();
        let mut out = Vec::new();
        let strip =
            |m: &Message<'_>, o: &mut Vec<u8>| sip_core::proxy::forward_response(m, o).is_ok();
        let key = Key::of_message(&msg).unwrap();
        let up =
            f.tx.on_response(key, &msg, f.t0, &mut out, &mut f.sends, &f.m, strip);
        assert_eq!(up, Upstream::Send(hop(5080)));
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("SIP/2.0 401 "), "{text}");
        assert!(
            text.contains("realm=\"a\"") && text.contains("realm=\"b\""),
            "{text}"
        );
    }

    #[test]
    fn q_groups_are_tried_one_after_another() {
        let mut f = forked(&[5070, 5071, 5072], &[0, 0, 1]);
        assert_eq!(f.sent(), ["INVITE->5071", "100->5080"], "5072 waits");
        assert_eq!(f.answer(0, 486, "INVITE", ""), None);
        assert_eq!(f.answer(1, 480, "INVITE", ""), None);
        assert_eq!(f.sent(), ["ACK->5070", "ACK->5071", "INVITE->5072"]);
        assert_eq!(f.answer(2, 200, "INVITE", ""), Some(200));
    }

    #[test]
    fn a_cancel_from_the_caller_reaches_every_branch_and_starts_no_group() {
        let mut f = forked(&[5070, 5071, 5072], &[0, 0, 1]);
        f.sent();
        assert_eq!(f.answer(0, 180, "INVITE", ""), Some(180));
        let key = Key {
            branch: ID,
            cancel: false,
        };
        assert!(f.tx.on_cancel(key, f.t0, &mut f.sends, &f.m));
        assert_eq!(f.sent(), ["CANCEL->5070"]);
        assert_eq!(f.answer(1, 180, "INVITE", ""), Some(180));
        assert_eq!(f.sent(), ["CANCEL->5071"]);
        assert_eq!(f.answer(0, 487, "INVITE", ""), None);
        assert_eq!(f.answer(1, 487, "INVITE", ""), Some(487));
        assert!(!f.sent().iter().any(|s| s.ends_with("5072")));
    }

    #[test]
    fn timer_c_runs_per_branch() {
        let mut f = forked(&[5070, 5071], &[0, 0]);
        f.sent();
        assert_eq!(f.answer(0, 180, "INVITE", ""), Some(180));
        assert_eq!(f.answer(1, 180, "INVITE", ""), Some(180));
        // Branch 1 rang again later: only branch 0's timer C fires.
        let later = f.t0 + Duration::from_secs(100);
        let bytes = response(1, 180, "INVITE", "");
        let msg = Message::parse(&bytes).unwrap();
        let key = Key::of_message(&msg).unwrap();
        let strip =
            |m: &Message<'_>, o: &mut Vec<u8>| sip_core::proxy::forward_response(m, o).is_ok();
        f.tx.on_response(key, &msg, later, &mut Vec::new(), &mut f.sends, &f.m, strip);
        f.sends.clear();
        f.tick(Duration::from_secs(181));
        assert_eq!(f.sent(), ["CANCEL->5070"]);
        assert_eq!(f.answer(0, 487, "INVITE", ""), None, "branch 1 still rings");
    }
}
