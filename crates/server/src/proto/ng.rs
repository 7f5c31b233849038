//! rtpengine's NG control protocol, client side, sans-IO: commands
//! (`ping`, `offer`, `answer`, `delete`, `query`) written as a cookie, a
//! space and a bencoded dictionary per datagram; answers matched by cookie
//! and by the relay they were sent to; retransmission on a timer with the
//! same cookie (rtpengine answers a repeated cookie from its cache, so a
//! retransmitted offer never makes a second session); several relays with
//! weights, a call kept on one relay by weighted rendezvous hashing of its
//! Call-ID, failover of an unanswered offer to the next relay, and `ping`
//! health checks. Every answer is untrusted: a datagram from an address
//! that is not a relay, with an unknown cookie, or malformed, changes
//! nothing and is counted.
//!
//! The driver owns the socket and the clock: it sends what [`Client`]
//! hands out, feeds in what arrives ([`Client::on_datagram`]) and calls
//! [`Client::on_timer`] at [`Client::next_deadline`].

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sip_core::bencode::{self, Writer};

/// Largest datagram read as an answer (an SDP of a few KiB fits).
pub const MAX_ANSWER: usize = 65_507;
/// Commands awaiting an answer at once; past it new ones are refused.
pub const MAX_PENDING: usize = 4096;

/// One media relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    /// Its NG control address.
    pub addr: SocketAddr,
    /// Its share of new calls against the others (0: only when no other
    /// is up).
    pub weight: u32,
}

/// How the client talks to its relays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The relays.
    pub relays: Vec<RelayConfig>,
    /// How long one try waits for its answer.
    pub timeout: Duration,
    /// Tries per relay (the first included).
    pub tries: u32,
    /// How often each relay is pinged.
    pub ping_every: Duration,
    /// Pings unanswered in a row before a relay counts as down.
    pub down_after: u32,
}

impl Settings {
    /// One relay at `addr`, with defaults: 1 s per try, 2 tries, a ping
    /// every 5 s, down after 2 unanswered.
    pub fn one(addr: SocketAddr) -> Self {
        Self {
            relays: vec![RelayConfig { addr, weight: 1 }],
            timeout: Duration::from_secs(1),
            tries: 2,
            ping_every: Duration::from_secs(5),
            down_after: 2,
        }
    }
}

/// A call's media as one side of it describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Media {
    /// The SIP Call-ID.
    pub call_id: String,
    /// The From tag.
    pub from_tag: String,
    /// The To tag (answer, and delete of one leg).
    pub to_tag: Option<String>,
    /// The SDP to rewrite.
    pub sdp: String,
    /// Flags (`trust-address`, `symmetric`, `asymmetric`, `strict-source`…).
    pub flags: &'static [&'static str],
    /// What to replace in the SDP (`origin`, `session-connection`…).
    pub replace: &'static [&'static str],
    /// Other options as key and value (`ICE` = `remove`,
    /// `transport-protocol` = `RTP/SAVP`, `DTLS` = `off`…).
    pub options: &'static [(&'static str, &'static str)],
    /// RTCP multiplexing (`offer`, `demux`, `accept`, `require`).
    pub rtcp_mux: &'static [&'static str],
    /// SDES-SRTP behaviour (`off`, `no-SUITE`…).
    pub sdes: &'static [&'static str],
    /// Where the SIP message came from (`received-from`): the address
    /// the relay takes for the endpoint with `SIP-source-address`.
    pub received_from: Option<std::net::IpAddr>,
}

/// A command to a relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Are you there?
    Ping,
    /// The caller's SDP: the relay answers it rewritten for the callee.
    Offer(Media),
    /// The callee's SDP: the relay answers it rewritten for the caller.
    Answer(Media),
    /// The call (or the leg of `to_tag`) is over.
    Delete {
        /// The SIP Call-ID.
        call_id: String,
        /// The From tag.
        from_tag: String,
        /// The To tag, when one leg of a forked call ends.
        to_tag: Option<String>,
    },
    /// What the relay knows of a call.
    Query {
        /// The SIP Call-ID.
        call_id: String,
    },
}

impl Command {
    fn name(&self) -> &'static str {
        match self {
            Command::Ping => "ping",
            Command::Offer(_) => "offer",
            Command::Answer(_) => "answer",
            Command::Delete { .. } => "delete",
            Command::Query { .. } => "query",
        }
    }

    fn call_id(&self) -> Option<&str> {
        match self {
            Command::Ping => None,
            Command::Offer(m) | Command::Answer(m) => Some(&m.call_id),
            Command::Delete { call_id, .. } | Command::Query { call_id } => Some(call_id),
        }
    }

    /// The datagram: `COOKIE d…e`.
    pub fn encode(&self, cookie: &str) -> Vec<u8> {
        let sdp = match self {
            Command::Offer(m) | Command::Answer(m) => m.sdp.len(),
            _ => 0,
        };
        let mut w = Writer::after_cookie(cookie, cookie.len() + sdp + 512);
        w.dict().str("command").str(self.name());
        match self {
            Command::Ping => {}
            Command::Offer(m) | Command::Answer(m) => {
                w.str("call-id").str(&m.call_id);
                w.str("from-tag").str(&m.from_tag);
                if let Some(t) = &m.to_tag {
                    w.str("to-tag").str(t);
                }
                w.str("sdp").str(&m.sdp);
                let lists = [
                    ("flags", m.flags),
                    ("replace", m.replace),
                    ("rtcp-mux", m.rtcp_mux),
                    ("SDES", m.sdes),
                ];
                for (key, items) in lists {
                    if !items.is_empty() {
                        w.str(key).list();
                        items.iter().for_each(|f| {
                            w.str(f);
                        });
                        w.end();
                    }
                }
                for (k, v) in m.options {
                    w.str(k).str(v);
                }
                if let Some(ip) = m.received_from {
                    let family = if ip.is_ipv4() { "IP4" } else { "IP6" };
                    let mut addr = String::with_capacity(39);
                    sip_core::writer::push_ip(&mut addr, ip);
                    w.str("received-from").list().str(family);
                    w.str(&addr).end();
                }
            }
            Command::Delete {
                call_id,
                from_tag,
                to_tag,
            } => {
                w.str("call-id").str(call_id).str("from-tag").str(from_tag);
                if let Some(t) = to_tag {
                    w.str("to-tag").str(t);
                }
            }
            Command::Query { call_id } => {
                w.str("call-id").str(call_id);
            }
        }
        w.end();
        w.into_bytes()
    }
}

/// What a relay answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// To a ping.
    Pong,
    /// Done; with the rewritten SDP for an offer or answer.
    Ok {
        /// The SDP to pass on.
        sdp: Option<String>,
    },
    /// Refused, and why (the relay's words).
    Error(String),
}

/// Why a datagram is not an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Malformed {
    /// No `COOKIE ` prefix.
    NoCookie,
    /// The body is not bencode.
    Bencode(bencode::Error),
    /// Bencode, but not an NG answer.
    NotAnAnswer,
}

/// Reads `COOKIE d…e` as an answer.
pub fn decode(datagram: &[u8]) -> Result<(&str, Reply), Malformed> {
    if datagram.len() > MAX_ANSWER {
        return Err(Malformed::NotAnAnswer);
    }
    let space = datagram
        .iter()
        .position(|b| *b == b' ')
        .ok_or(Malformed::NoCookie)?;
    let cookie = std::str::from_utf8(&datagram[..space]).map_err(|_| Malformed::NoCookie)?;
    if cookie.is_empty() || cookie.len() > 64 {
        return Err(Malformed::NoCookie);
    }
    // Only three strings are read; the statistics around them are
    // checked, not built.
    let [result, sdp, reason] =
        bencode::dict_strings(&datagram[space + 1..], ["result", "sdp", "error-reason"])
            .map_err(Malformed::Bencode)?
            .ok_or(Malformed::NotAnAnswer)?
            .map(|s| s.and_then(|b| std::str::from_utf8(b).ok()));
    let reply = match result.ok_or(Malformed::NotAnAnswer)? {
        "pong" => Reply::Pong,
        "ok" => Reply::Ok {
            sdp: sdp.map(str::to_owned),
        },
        "error" => Reply::Error(
            reason
                .unwrap_or("no reason given")
                .chars()
                .take(200)
                .collect(),
        ),
        _ => return Err(Malformed::NotAnAnswer),
    };
    Ok((cookie, reply))
}

/// Why a command got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// No relay is up.
    NoRelay,
    /// Too many commands await answers.
    Busy,
    /// No relay answered in time.
    Timeout,
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Send `bytes` to `to`.
    Send {
        /// The relay.
        to: SocketAddr,
        /// The datagram.
        bytes: Vec<u8>,
    },
    /// The command of `cookie` is answered.
    Answered {
        /// Its cookie.
        cookie: String,
        /// The relay's answer.
        reply: Reply,
    },
    /// The command of `cookie` failed.
    Failed {
        /// Its cookie.
        cookie: String,
        /// Why.
        why: Failure,
    },
    /// A relay stopped answering.
    RelayDown(SocketAddr),
    /// A relay answers again.
    RelayUp(SocketAddr),
}

#[derive(Debug)]
struct Relay {
    cfg: RelayConfig,
    up: bool,
    missed: u32,
    next_ping: Instant,
    /// The ping in flight, if any.
    ping: Option<String>,
}

#[derive(Debug)]
struct Pending {
    relay: usize,
    bytes: Vec<u8>,
    tries: u32,
    deadline: Instant,
    /// Relays tried and given up on (an offer moves on to the next).
    tried: Vec<usize>,
    /// An offer may move to another relay; other commands belong to the
    /// relay that holds the call.
    movable: bool,
    call_id: Option<String>,
    ping: bool,
}

/// Counts of what the client met.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Commands answered.
    pub answered: u64,
    /// Commands that failed.
    pub failed: u64,
    /// Datagrams sent again.
    pub retransmitted: u64,
    /// Datagrams refused: not from a relay, unknown cookie, malformed.
    pub refused: u64,
}

/// The NG client; see the module documentation.
#[derive(Debug)]
pub struct Client {
    settings: Settings,
    relays: Vec<Relay>,
    pending: HashMap<String, Pending>,
    next: u64,
    salt: u64,
    counts: Counts,
}

impl Client {
    /// A client of `settings.relays`, all counted up until a ping says
    /// otherwise; `salt` (the driver's randomness) makes cookies
    /// unguessable.
    pub fn new(settings: Settings, now: Instant, salt: u64) -> Self {
        let relays = settings
            .relays
            .iter()
            .map(|cfg| Relay {
                cfg: cfg.clone(),
                up: true,
                missed: 0,
                next_ping: now,
                ping: None,
            })
            .collect();
        Self {
            settings,
            relays,
            pending: HashMap::new(),
            next: 0,
            salt,
            counts: Counts::default(),
        }
    }

    /// What the client met so far.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Each relay and whether it is up.
    pub fn relays(&self) -> impl Iterator<Item = (SocketAddr, bool)> + '_ {
        self.relays.iter().map(|r| (r.cfg.addr, r.up))
    }

    /// Commands awaiting answers.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    fn cookie(&mut self) -> String {
        self.next += 1;
        let mut h = DefaultHasher::new();
        (self.salt, self.next).hash(&mut h);
        let mut cookie = String::with_capacity(34);
        sip_core::writer::push_hex(&mut cookie, self.next, 0);
        cookie.push('_');
        sip_core::writer::push_hex(&mut cookie, h.finish(), 16);
        cookie
    }

    /// The relay for `call_id`, skipping `except`: the highest weighted
    /// rendezvous score among those up, else among all.
    fn pick(&self, call_id: &str, except: &[usize]) -> Option<usize> {
        let score = |i: usize| {
            let r = &self.relays[i];
            let mut h = DefaultHasher::new();
            (call_id, r.cfg.addr).hash(&mut h);
            let u = ((h.finish() >> 11) as f64 + 1.0) / ((1u64 << 53) as f64 + 2.0);
            -f64::from(r.cfg.weight.max(1)) / u.ln() * if r.cfg.weight == 0 { 1e-9 } else { 1.0 }
        };
        let best = |up: bool| {
            (0..self.relays.len())
                .filter(|i| !except.contains(i) && (!up || self.relays[*i].up))
                .max_by(|a, b| score(*a).total_cmp(&score(*b)))
        };
        best(true).or_else(|| best(false))
    }

    /// Starts `command` at `now`: its cookie, and the datagram to send
    /// where [`Event::Send`] says.
    pub fn start(&mut self, command: &Command, now: Instant) -> Result<(String, Event), Failure> {
        if self.pending.len() >= MAX_PENDING {
            return Err(Failure::Busy);
        }
        let call_id = command.call_id().unwrap_or("");
        let relay = self.pick(call_id, &[]).ok_or(Failure::NoRelay)?;
        let cookie = self.cookie();
        let bytes = command.encode(&cookie);
        let send = Event::Send {
            to: self.relays[relay].cfg.addr,
            bytes: bytes.clone(),
        };
        self.pending.insert(
            cookie.clone(),
            Pending {
                relay,
                bytes,
                tries: 1,
                deadline: now + self.settings.timeout,
                tried: Vec::new(),
                movable: matches!(command, Command::Offer(_)),
                call_id: command.call_id().map(str::to_owned),
                ping: false,
            },
        );
        Ok((cookie, send))
    }

    /// A datagram arrived from `from`.
    pub fn on_datagram(&mut self, from: SocketAddr, datagram: &[u8], out: &mut Vec<Event>) {
        // A stranger's datagram is refused before it is read.
        if !self.relays.iter().any(|r| r.cfg.addr == from) {
            self.counts.refused += 1;
            return;
        }
        let Ok((cookie, reply)) = decode(datagram) else {
            self.counts.refused += 1;
            return;
        };
        let Some(p) = self.pending.get(cookie) else {
            self.counts.refused += 1;
            return;
        };
        // Only the relay it was sent to answers a command.
        if self.relays[p.relay].cfg.addr != from {
            self.counts.refused += 1;
            return;
        }
        let Some(p) = self.pending.remove(cookie) else {
            return;
        };
        let relay = &mut self.relays[p.relay];
        relay.missed = 0;
        if !relay.up {
            relay.up = true;
            out.push(Event::RelayUp(relay.cfg.addr));
        }
        if p.ping {
            relay.ping = None;
            return;
        }
        self.counts.answered += 1;
        out.push(Event::Answered {
            cookie: cookie.to_owned(),
            reply,
        });
    }

    /// The time is `now`: retransmissions, failovers, timeouts and pings.
    pub fn on_timer(&mut self, now: Instant, out: &mut Vec<Event>) {
        let due: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(c, _)| c.clone())
            .collect();
        for cookie in due {
            self.expire(cookie, now, out);
        }
        for i in 0..self.relays.len() {
            let r = &self.relays[i];
            if r.next_ping > now || r.ping.is_some() || self.pending.len() >= MAX_PENDING {
                continue;
            }
            let cookie = self.cookie();
            let bytes = Command::Ping.encode(&cookie);
            let r = &mut self.relays[i];
            r.next_ping = now + self.settings.ping_every;
            r.ping = Some(cookie.clone());
            out.push(Event::Send {
                to: r.cfg.addr,
                bytes: bytes.clone(),
            });
            self.pending.insert(
                cookie,
                Pending {
                    relay: i,
                    bytes,
                    tries: 1,
                    deadline: now + self.settings.timeout,
                    tried: Vec::new(),
                    movable: false,
                    call_id: None,
                    ping: true,
                },
            );
        }
    }

    fn expire(&mut self, cookie: String, now: Instant, out: &mut Vec<Event>) {
        let Some(mut p) = self.pending.remove(&cookie) else {
            return;
        };
        if p.tries < self.settings.tries {
            p.tries += 1;
            p.deadline = now + self.settings.timeout;
            self.counts.retransmitted += 1;
            out.push(Event::Send {
                to: self.relays[p.relay].cfg.addr,
                bytes: p.bytes.clone(),
            });
            self.pending.insert(cookie, p);
            return;
        }
        // This relay gave no answer.
        let relay = &mut self.relays[p.relay];
        if p.ping {
            relay.ping = None;
            relay.missed += 1;
            if relay.up && relay.missed >= self.settings.down_after {
                relay.up = false;
                out.push(Event::RelayDown(relay.cfg.addr));
            }
            return;
        }
        if relay.up {
            relay.up = false;
            out.push(Event::RelayDown(relay.cfg.addr));
        }
        p.tried.push(p.relay);
        let next = p
            .movable
            .then(|| self.pick(p.call_id.as_deref().unwrap_or(""), &p.tried))
            .flatten();
        match next {
            Some(relay) => {
                p.relay = relay;
                p.tries = 1;
                p.deadline = now + self.settings.timeout;
                out.push(Event::Send {
                    to: self.relays[relay].cfg.addr,
                    bytes: p.bytes.clone(),
                });
                self.pending.insert(cookie, p);
            }
            None => {
                self.counts.failed += 1;
                out.push(Event::Failed {
                    cookie,
                    why: Failure::Timeout,
                });
            }
        }
    }

    /// When [`on_timer`](Self::on_timer) should next run.
    pub fn next_deadline(&self) -> Option<Instant> {
        let pending = self.pending.values().map(|p| p.deadline);
        let pings = self
            .relays
            .iter()
            .filter(|r| r.ping.is_none())
            .map(|r| r.next_ping);
        pending.chain(pings).min()
    }
}

#[cfg(test)]
#[path = "ng_tests.rs"]
mod tests;
