//! The user agent's signalling as a sans-IO core (RFC 3261 §8, §12–§17):
//! it opens no socket and reads no clock. Every input is a method that
//! takes the time — a datagram or framed message ([`Agent::handle`]), a
//! timer ([`Agent::on_timer`]), a user's action ([`Agent::register`],
//! [`Agent::invite`], [`Agent::cancel`], [`Agent::bye`], [`Agent::ring`],
//! [`Agent::accept`], [`Agent::reject`]) — and every effect is an output
//! polled from it: bytes to send ([`Agent::poll_transmit`]) and what
//! happened ([`Agent::poll_event`]), with [`Agent::next_deadline`] saying
//! when to call `on_timer` next.
//!
//! Retransmissions, timeouts and the ACKs of both kinds are sip-core's
//! §17 machines ([`sip_core::transaction`]); 2xx retransmission until the
//! ACK is [`sip_core::transaction::Answered`] (§13.3.1.4). The phone
//! ([`crate::phone`]) is a blocking driver around this core, and the
//! server's simulation drives the same core on virtual time.

mod client;
mod dialog;
mod server;

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use sip_core::transaction::TimerConfig;
use sip_core::{Message, Method};

use crate::sip::Request;

use client::Outgoing;
use dialog::Dialog;
use server::Answers;

/// Who the agent is and how it talks.
#[derive(Debug, Clone)]
pub struct Setup {
    /// User name (and digest username).
    pub user: String,
    /// The domain we register in (REGISTER's Request-URI).
    pub domain: String,
    /// Digest password: challenges (401/407) are answered once with it.
    pub password: Option<String>,
    /// Our address as Via's sent-by.
    pub local: SocketAddr,
    /// Via's transport token: `UDP` or `TLS`.
    pub transport: &'static str,
    /// Over a reliable transport nothing is retransmitted.
    pub reliable: bool,
    /// Our Contact URI (without angle brackets).
    pub contact: String,
    /// RFC 3261 §17 timer values.
    pub timers: TimerConfig,
    /// Tags, branches, Call-IDs and cnonces from this seed (a simulation
    /// that must repeat itself); `None`: from the operating system.
    pub seed: Option<u64>,
}

/// Who a registration or call says we are.
#[derive(Debug, Clone)]
pub struct Identity {
    /// From (and a REGISTER's To) name-addr.
    pub from: String,
    /// The digest `username=` when it differs from the user (a PrivaSIP
    /// pseudonym).
    pub shown: Option<String>,
}

/// One client request of ours, kept across a retry with credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tx(u64);

/// Bytes to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Where.
    pub to: SocketAddr,
    /// What.
    pub bytes: Vec<u8>,
}

/// What happened, for the agent's user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A response to one of our requests (provisional or final).
    Response {
        /// The request.
        tx: Tx,
        /// Its method.
        method: Method<'static>,
        /// Status code.
        code: u16,
        /// Reason phrase, with the Warning text when there is one.
        reason: String,
        /// The whole response.
        message: Vec<u8>,
        /// A challenge the agent answered: the request went again with
        /// credentials, so more is to come for `tx`.
        retried: bool,
    },
    /// Nothing answered a request of ours (timer B or F; or no final
    /// response 64·T1 after our CANCEL, RFC 3261 §9.1).
    Timeout {
        /// The request.
        tx: Tx,
        /// Its method.
        method: Method<'static>,
    },
    /// An INVITE rang past its ring time: the agent sent CANCEL.
    Cancelling {
        /// The INVITE.
        tx: Tx,
    },
    /// A new call for us: answer it with [`Agent::ring`],
    /// [`Agent::accept`] or [`Agent::reject`]. 100 Trying went already.
    Incoming {
        /// Its Call-ID.
        call_id: String,
        /// Where it came from.
        from: SocketAddr,
        /// The INVITE.
        message: Vec<u8>,
    },
    /// A request the agent answered itself (ACK, BYE, CANCEL, OPTIONS,
    /// and what it refuses): retransmissions are not reported again.
    Request {
        /// Its Call-ID.
        call_id: String,
        /// Its method.
        method: Method<'static>,
        /// The status the agent answered (none for ACK).
        answered: Option<u16>,
    },
    /// A new call from an address that may not ring us
    /// ([`Agent::ring_only_from`]), refused 403 and not kept.
    Stranger {
        /// Its Call-ID.
        call_id: String,
        /// Where it came from.
        from: SocketAddr,
    },
    /// Our 2xx to an INVITE was never acknowledged (64·T1).
    AckTimeout {
        /// The call.
        call_id: String,
    },
}

/// Why the agent refused a user's action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// No such call, or not in a state for that.
    #[error("no call {0} in a state for that")]
    NoCall(String),
    /// Too many calls at once.
    #[error("{0} calls at once: no room for another")]
    Full(usize),
}

/// Calls (dialogs and INVITEs being answered) held at once: a flood of
/// INVITEs is answered 486 beyond it.
pub const MAX_CALLS: usize = 32;
/// Client requests of ours in flight at once.
pub const MAX_REQUESTS: usize = 64;

/// The user agent core.
#[derive(Debug)]
pub struct Agent {
    setup: Setup,
    tokens: Tokens,
    cseq: u32,
    next_tx: u64,
    /// REGISTER keeps one Call-ID and From tag (RFC 3261 §10.2).
    register_ids: (String, String),
    outgoing: Vec<Outgoing>,
    dialogs: Vec<Dialog>,
    answers: Answers,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    /// The addresses whose new calls ring (`None`: anyone's).
    callers: Option<Vec<IpAddr>>,
}

impl Agent {
    /// A new agent.
    pub fn new(setup: Setup) -> Self {
        let mut tokens = Tokens::new(setup.seed);
        let register_ids = (tokens.hex(12), tokens.hex(4));
        Self {
            setup,
            tokens,
            cseq: 1,
            next_tx: 0,
            register_ids,
            outgoing: Vec::new(),
            dialogs: Vec::new(),
            answers: Answers::default(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            callers: None,
        }
    }

    /// Lets only new calls from these addresses ring (`None`: anyone's);
    /// a call from any other is refused 403 without being kept, so
    /// strangers cannot fill the [`MAX_CALLS`] table.
    /// IPv4 addresses are matched as such also where a dual-stack socket
    /// reports them IPv4-mapped.
    pub fn ring_only_from(&mut self, callers: Option<Vec<IpAddr>>) {
        self.callers = callers.map(|ips| ips.into_iter().map(|ip| ip.to_canonical()).collect());
    }

    /// Who the agent is.
    pub fn setup(&self) -> &Setup {
        &self.setup
    }

    /// The next bytes to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next thing that happened.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Agent::on_timer`] is due next.
    pub fn next_deadline(&self) -> Option<Instant> {
        let clients = self.outgoing.iter().filter_map(Outgoing::next_deadline);
        let calls = self.dialogs.iter().filter_map(Dialog::next_deadline);
        clients
            .chain(calls)
            .chain(self.answers.next_deadline())
            .min()
    }

    /// Runs every timer due at `now`.
    pub fn on_timer(&mut self, now: Instant) {
        self.client_timers(now);
        self.server_timers(now);
    }

    /// A datagram or framed message from `from`. Bytes that are not SIP,
    /// and responses to nothing of ours, are dropped (`false`).
    pub fn handle(&mut self, bytes: &[u8], from: SocketAddr, now: Instant) -> bool {
        let Ok(m) = Message::parse(bytes) else {
            return false;
        };
        if m.is_request() {
            self.on_request(&m, from, now);
            true
        } else {
            self.on_response(&m, now)
        }
    }

    fn send(&mut self, to: SocketAddr, bytes: Vec<u8>) {
        self.transmits.push_back(Transmit { to, bytes });
    }

    fn next_cseq(&mut self) -> u32 {
        self.cseq += 1;
        self.cseq
    }

    fn new_tx(&mut self) -> Tx {
        self.next_tx += 1;
        Tx(self.next_tx)
    }

    /// A fresh request from us: Via, branch, From tag and CSeq filled in.
    fn request(
        &mut self,
        method: Method<'static>,
        uri: &str,
        (from, to): (&str, &str),
        (call_id, tag): (&str, &str),
    ) -> Request {
        let cseq = self.next_cseq();
        Request {
            method,
            uri: uri.into(),
            via: self.via(),
            branch: self.branch(),
            from: from.into(),
            from_tag: tag.into(),
            to: to.into(),
            to_tag: None,
            call_id: call_id.into(),
            cseq,
            contact: None,
            routes: Vec::new(),
            extra: Vec::new(),
            body: None,
        }
    }

    /// Via's transport and sent-by.
    fn via(&self) -> String {
        format!("{} {}", self.setup.transport, host(self.setup.local))
    }

    fn branch(&mut self) -> String {
        format!("z9hG4bK{}", self.tokens.hex(8))
    }
}

/// `host:port`, with IPv6 addresses in brackets.
pub fn host(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => a.to_string(),
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
    }
}

/// Status code and reason phrase, with the Warning text when there is one.
pub fn status_of(m: &Message<'_>) -> (u16, String) {
    let mut reason = m.reason().unwrap_or("").to_string();
    if let Some(w) = m.header_raw("Warning") {
        reason.push_str(&format!(" ({w})"));
    }
    (m.status().map(|s| s.as_u16()).unwrap_or(0), reason)
}

/// Where tokens come from.
#[derive(Debug, Clone)]
enum Tokens {
    Os,
    /// splitmix64.
    Seeded(u64),
}

impl Tokens {
    fn new(seed: Option<u64>) -> Self {
        seed.map_or(Tokens::Os, Tokens::Seeded)
    }

    /// `bytes` random bytes as lowercase hex.
    fn hex(&mut self, bytes: usize) -> String {
        let mut b = vec![0u8; bytes];
        match self {
            // getrandom only fails where the OS has no entropy source.
            Tokens::Os => {
                let _ = getrandom::fill(&mut b);
            }
            Tokens::Seeded(s) => {
                for chunk in b.chunks_mut(8) {
                    *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
                    let mut z = *s;
                    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                    z ^= z >> 31;
                    chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
                }
            }
        }
        b.iter().fold(String::with_capacity(bytes * 2), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
    }
}

#[cfg(test)]
mod tests;
