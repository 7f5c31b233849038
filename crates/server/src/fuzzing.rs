//! Fuzz target bodies for the server's core and its WebSocket frame
//! decoder: the cargo-fuzz targets in `fuzz/` call them, and the test
//! suite calls them over mutations of seeds (`tests/hostile_input.rs`),
//! so the properties are checked on every commit, as `sip_core::fuzzing`
//! does for the parser.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sip_core::digest::Algorithm;
use sip_core::{Limits, Message};

use crate::config::{Config, Mode};
use crate::io::drive;
use crate::io::sinks::Sinks;
use crate::proto::auth::{Authenticator, NonceKey};
use crate::proto::core::{Core, Reply, Transport};
use crate::proto::location::MemoryLocation;
use crate::proto::shared::{Now, Shared};
use crate::proto::users::{UserEntry, Users};
use sip_core::websocket::server as websocket;

pub use sip_core::fuzzing::{split, SEPARATOR};

/// The servers the first byte picks from (its low two bits).
const SERVERS: [(Mode, bool); 4] = [
    (Mode::Registrar, true),
    (Mode::Proxy, true),
    (Mode::Proxy, false),
    (Mode::Redirect, false),
];

const TRANSPORTS: [Transport; 5] = [
    Transport::Udp,
    Transport::Tcp,
    Transport::Tls,
    Transport::Ws,
    Transport::Wss,
];

/// Where messages come from: a phone, another, a v6 peer, the server
/// itself (a loop), a port-0 peer.
const SOURCES: [&str; 5] = [
    "192.0.2.10:5060",
    "198.51.100.7:40000",
    "[2001:db8::5]:5062",
    "127.0.0.1:5060",
    "203.0.113.9:0",
];

/// A fresh core: a registrar with digest (user `alice`, password `pw`,
/// realm `example.com`), a transaction-stateful record-routing proxy
/// following dialogs (at most four, two per caller), a stateless proxy,
/// or a redirect server; each also a registrar.
pub fn server(pick: u8) -> Core {
    let (mode, stateful) = SERVERS[usize::from(pick & 3)];
    let auth = mode == Mode::Registrar;
    let config = Config {
        mode,
        stateful,
        record_route: stateful,
        auth,
        realm: "example.com".into(),
        domains: vec!["example.com".into()],
        advertise: "127.0.0.1:5060".parse().expect("literal"),
        // The stateful proxy follows dialogs in a table small enough for
        // a dialogue to fill it and a caller's share.
        calls: crate::config_calls::CallsSettings {
            records: stateful,
            max_dialogs: 4,
            max_dialogs_per_caller: Some(2),
            ..Default::default()
        },
        ..Config::default()
    };
    let now = Now {
        unix_ms: 1_700_000_000_000,
        mono: Instant::now(),
    };
    let authenticator = auth.then(|| {
        let mut users = Users::default();
        let _ = users.insert(
            "alice",
            "example.com",
            UserEntry::from_password("alice", "example.com", "pw"),
        );
        Authenticator::new(
            "example.com",
            NonceKey::from_secret([7; 32], 300),
            users,
            &[Algorithm::Sha256, Algorithm::Md5],
            crate::proto::auth::NcLimits::of(64),
            std::hash::RandomState::new(),
        )
    });
    let shared = Shared::new(
        config,
        Arc::new(MemoryLocation::new(std::hash::RandomState::new())),
        authenticator,
        now,
        std::hash::RandomState::new(),
    );
    Core::new(Arc::new(shared))
}

/// The server core under hostile input. The first byte picks the server
/// (see [`server`]) and, message by message, the transport and source;
/// the rest is one or more messages separated by [`SEPARATOR`], handed to
/// the same core in turn, a second apart, its timers run between them.
///
/// Never panics; whatever a message that parses makes the core send
/// parses too (with room for the header lines a proxy adds); a message
/// that does not parse gets at most an error response; a response is
/// relayed only when its branch is one the core wrote on a request it
/// forwarded earlier in the dialogue.
pub fn core(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let mut core = server(pick);
    let start = Instant::now();
    let mut out = Vec::with_capacity(4096);
    let mut forwarded = std::collections::HashSet::new();
    for (i, msg) in split(rest).enumerate() {
        let salt = usize::from(pick >> 2).wrapping_add(i);
        let transport = TRANSPORTS[salt % TRANSPORTS.len()];
        let src: SocketAddr = SOURCES[(salt / TRANSPORTS.len()) % SOURCES.len()]
            .parse()
            .expect("literal");
        let now = Now {
            unix_ms: 1_700_000_000_000 + 1000 * i as u64,
            mono: start + Duration::from_secs(i as u64),
        };
        core.on_timer(now);
        check_sends(&core, "a timer");
        let reply = drive::handle(
            &mut core,
            &Sinks::default(),
            None,
            msg,
            src,
            transport,
            now,
            &mut out,
        );
        let parsed = Message::parse(msg).is_ok();
        if let Reply::Send(..) = reply {
            relayed_only_ours(msg, &out, &mut forwarded);
            if salt % 2 == 1 {
                icmp_error(&core, &out, salt, now.mono);
            }
            if parsed {
                must_parse(&out, "the reply");
            } else {
                assert!(
                    out.starts_with(b"SIP/2.0 4") || out.starts_with(b"SIP/2.0 5"),
                    "not an error response to input that does not parse: {}",
                    String::from_utf8_lossy(&out)
                );
            }
        }
        if parsed {
            check_sends(&core, "an extra send");
        }
    }
}

/// This proxy's branch in `msg`'s top Via without its try digit.
fn our_branch(msg: &Message<'_>) -> Option<String> {
    let b = msg.top_via().branch()?;
    let hex = b.strip_prefix(crate::proto::branch::BRANCH_PREFIX)?;
    Some(hex.get(1..)?.to_owned())
}

/// Remembers the branch of a request the core forwarded (`out`); for a
/// response it relayed, checks it answered one of them.
fn relayed_only_ours(input: &[u8], out: &[u8], forwarded: &mut std::collections::HashSet<String>) {
    let (Ok(sent), Ok(got)) = (Message::parse(out), Message::parse(input)) else {
        return;
    };
    if sent.is_request() {
        if let Some(b) = our_branch(&sent) {
            forwarded.insert(b);
        }
    } else if !got.is_request() {
        let ours = our_branch(&got).is_some_and(|b| forwarded.contains(&b));
        assert!(
            ours,
            "relayed a response to no request this core forwarded:\n{}",
            String::from_utf8_lossy(input)
        );
    }
}

/// The response path alone: `data` handed as one message to a fresh core
/// of every kind, over every transport, from every source. Nothing was
/// forwarded, so a response is relayed nowhere, whatever its Vias and
/// branch: the core drops it and queues nothing.
pub fn response_path(data: &[u8]) {
    match Message::parse(data) {
        Ok(m) if !m.is_request() => {}
        _ => return,
    }
    let now = Now {
        unix_ms: 1_700_000_000_000,
        mono: Instant::now(),
    };
    let mut out = Vec::with_capacity(4096);
    for pick in 0..SERVERS.len() as u8 {
        let mut core = server(pick);
        for (i, transport) in TRANSPORTS.iter().enumerate() {
            let src: SocketAddr = SOURCES[i % SOURCES.len()].parse().expect("literal");
            out.clear();
            let reply = drive::handle(
                &mut core,
                &Sinks::default(),
                None,
                data,
                src,
                *transport,
                now,
                &mut out,
            );
            assert!(
                matches!(reply, Reply::Drop) && core.extra().is_empty(),
                "a response no request led to was relayed ({reply:?}):\n{}",
                String::from_utf8_lossy(data)
            );
        }
    }
}

/// An ICMP error for the datagram `sent`, quoting as much of its start
/// as `salt` says (routers quote 8 bytes to all of it): the stateful
/// proxy fails the transaction it names over or answers it, with
/// messages that parse; anything else it ignores.
fn icmp_error(core: &Core, sent: &[u8], salt: usize, now: Instant) {
    let shared = core.shared();
    let Some(tx) = &shared.transactions else {
        return;
    };
    let quoted = &sent[..sent.len().min(8 + salt.wrapping_mul(37) % 700)];
    let Some((key, tries)) = crate::proto::branch::Key::of_quoted(quoted) else {
        return;
    };
    let mut sends = crate::proto::effects::Sends::default();
    tx.on_transport_error(key, tries, now, &mut sends, &shared.metrics);
    for (bytes, _) in sends.iter() {
        must_parse(bytes, "what an ICMP error made the proxy send");
    }
}

fn check_sends(core: &Core, what: &str) {
    for (bytes, _) in core.extra().iter() {
        must_parse(bytes, what);
    }
}

fn must_parse(bytes: &[u8], what: &str) {
    let headroom = Limits {
        max_headers: Limits::DEFAULT.max_headers + 4,
        max_message_len: Limits::DEFAULT.max_message_len + 1024,
        ..Limits::DEFAULT
    };
    if let Err(e) = Message::parse_with(bytes, &headroom) {
        panic!(
            "{what} does not parse ({e}):\n{}",
            String::from_utf8_lossy(bytes)
        );
    }
}

/// The longest frame header (RFC 6455 §5.2): two bytes, a 64-bit
/// length, a mask.
const MAX_FRAME_HEAD: usize = 14;

/// A [`websocket::Event`] kept past the decoder's call.
#[derive(Debug, PartialEq, Eq)]
enum Owned {
    Message(Vec<u8>),
    Ping(Vec<u8>),
    Close(Option<u16>),
}

/// Decodes `bytes` handed over `chunk` bytes at a time, as reads bring
/// them: the events until the peer's close or a violation.
fn frames(bytes: &[u8], chunk: usize, max: usize) -> (Vec<Owned>, Option<websocket::Violation>) {
    let mut decoder = websocket::Decoder::default();
    let mut buf = Vec::new();
    let mut events = Vec::new();
    for piece in bytes.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        let decoded = decoder.decode(&mut buf, max, |e| {
            events.push(match e {
                websocket::Event::Message(m) => {
                    assert!(m.len() <= max, "a message of {} > {max} bytes", m.len());
                    Owned::Message(m.to_vec())
                }
                websocket::Event::Ping(p) => Owned::Ping(p.to_vec()),
                websocket::Event::Close(c) => Owned::Close(c),
            })
        });
        match decoded {
            Ok(used) => {
                assert!(used <= buf.len());
                buf.drain(..used);
            }
            Err(v) => return (events, Some(v)),
        }
        if matches!(events.last(), Some(Owned::Close(_))) {
            break;
        }
        // What waits is at most one frame within the limit (or a
        // control frame, up to 125 bytes): a peer cannot make the
        // connection hold more.
        assert!(
            buf.len() <= max.max(125) + MAX_FRAME_HEAD,
            "{} bytes held for a message limit of {max}",
            buf.len()
        );
    }
    (events, None)
}

/// The WebSocket frame decoder under hostile frames. The first byte
/// picks the message size limit (its low two bits) and how many bytes
/// each read brings (the rest, plus one); the rest are the frames.
///
/// Never panics; no message exceeds the limit; the frames read in pieces
/// give the same messages, pings, close and violation as read whole.
pub fn websocket(data: &[u8]) {
    let Some((&pick, bytes)) = data.split_first() else {
        return;
    };
    let max = [16, 125, 4096, 65_536][usize::from(pick & 3)];
    let chunk = 1 + usize::from(pick >> 2);
    let whole = frames(bytes, bytes.len(), max);
    let pieces = frames(bytes, chunk, max);
    assert_eq!(whole, pieces, "read whole and in pieces of {chunk}");
}
