//! SIP over WebSocket (RFC 7118) over real loopback sockets, with a
//! client written here from RFC 6455 so every frame can be bent: phones
//! register and call each other over WS and across the WS ↔ UDP bridge
//! (double record-routing, RFC 5658); RFC 6455 edge cases get the close
//! codes and HTTP statuses the RFCs give.

#[path = "support/peers.rs"]
mod peers;
#[path = "support/scratch.rs"]
mod scratch;
#[path = "support/served.rs"]
mod served;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use served::Served;
use sipsec_server::config::WebSocketSettings;
use sipsec_server::proto::metrics::CloseReason;
use sipsec_server::{Config, Mode};

fn server(name: &str, origins: &[&str]) -> Served {
    Served::start(&format!("ws-{name}"), server_config(origins)).expect("server starts")
}

fn server_config(origins: &[&str]) -> Config {
    Config {
        mode: Mode::Proxy,
        stateful: true,
        udp: "127.0.0.1:0".parse().expect("addr"),
        tcp: None,
        http: None,
        advertise: "127.0.0.1:0".parse().expect("addr"),
        workers: 1,
        websocket: WebSocketSettings {
            ws: Some("127.0.0.1:0".parse().expect("addr")),
            origins: origins.iter().map(|o| o.to_string()).collect(),
            ..WebSocketSettings::default()
        },
        ..Config::default()
    }
}

fn ws_addr(s: &Served) -> SocketAddr {
    s.handle.shared().config.websocket.ws.expect("ws listener")
}

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

fn upgrade_request(extra: &str) -> String {
    format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    )
}

/// A browser-like WebSocket client: masks what it sends, reads frames.
struct Ws {
    s: TcpStream,
    buf: Vec<u8>,
}

/// A frame from the server.
#[derive(Debug, PartialEq)]
enum Got {
    Text(String),
    Pong(Vec<u8>),
    Close(u16),
    /// The connection ended.
    Eof,
}

impl Ws {
    /// Connects and upgrades; returns the client and the server's answer
    /// (the status line and headers).
    fn open(to: SocketAddr, extra: &str) -> (Self, String) {
        let mut s = TcpStream::connect(to).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s.write_all(upgrade_request(extra).as_bytes())
            .expect("send upgrade");
        let mut ws = Self { s, buf: Vec::new() };
        let head = loop {
            if let Some(end) = ws.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&ws.buf[..end + 4]).into_owned();
                ws.buf.drain(..end + 4);
                break head;
            }
            if !ws.fill() {
                break String::from_utf8_lossy(&ws.buf).into_owned();
            }
        };
        (ws, head)
    }

    fn sip(to: SocketAddr) -> Self {
        let (ws, head) = Self::open(to, "Sec-WebSocket-Protocol: sip\r\n");
        assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
        ws
    }

    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        match self.s.read(&mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// Sends one frame with this first byte (FIN, opcode), masked.
    fn frame(&mut self, first: u8, payload: &[u8]) {
        let f = sip_core::websocket::client_frame(first, payload, [0x37, 0xfa, 0x21, 0x3d]);
        self.s.write_all(&f).expect("send frame");
    }

    fn send(&mut self, msg: &str) {
        self.frame(0x81, msg.as_bytes());
    }

    fn next(&mut self) -> Got {
        loop {
            if self.buf.len() >= 2 {
                let (op, len0) = (self.buf[0] & 0x0f, self.buf[1] & 0x7f);
                assert_eq!(self.buf[1] & 0x80, 0, "server frames are unmasked");
                let (len, head) = match len0 {
                    126 if self.buf.len() >= 4 => {
                        (u16::from_be_bytes([self.buf[2], self.buf[3]]) as usize, 4)
                    }
                    126 | 127 => (usize::MAX, 0),
                    n => (n as usize, 2),
                };
                if len != usize::MAX && self.buf.len() >= head + len {
                    let payload: Vec<u8> = self.buf.drain(..head + len).skip(head).collect();
                    return match op {
                        1 | 2 => Got::Text(String::from_utf8_lossy(&payload).into_owned()),
                        0xa => Got::Pong(payload),
                        8 => Got::Close(u16::from_be_bytes([payload[0], payload[1]])),
                        other => panic!("unexpected opcode {other}"),
                    };
                }
            }
            if !self.fill() {
                return Got::Eof;
            }
        }
    }

    /// The next SIP message (skipping nothing else: a close fails).
    fn message(&mut self) -> String {
        match self.next() {
            Got::Text(m) => m,
            other => panic!("expected a SIP message, got {other:?}"),
        }
    }

    /// The next message that is not a provisional response.
    fn final_message(&mut self) -> String {
        loop {
            let m = self.message();
            if !m.starts_with("SIP/2.0 1") {
                return m;
            }
        }
    }

    fn local(&self) -> SocketAddr {
        self.s.local_addr().expect("local")
    }
}

fn register(user: &str, transport: &str, contact: &str) -> String {
    format!(
        "REGISTER sip:localhost SIP/2.0\r\nVia: SIP/2.0/{transport} abc.invalid;branch=z9hG4bK-{user}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:{user}@localhost>;tag=r{user}\r\nTo: <sip:{user}@localhost>\r\n\
         Call-ID: reg-{user}\r\nCSeq: 1 REGISTER\r\n\
         Contact: <{contact}>;reg-id=1;+sip.instance=\"<urn:uuid:00000000-0000-4000-8000-00000000000{}>\"\r\n\
         Expires: 600\r\nContent-Length: 0\r\n\r\n",
        user.len()
    )
}

fn header<'a>(msg: &'a str, name: &str) -> Vec<&'a str> {
    msg.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(n, _)| n.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
        .collect()
}

/// The Record-Route values, in order, split at commas between `<…>`.
fn record_routes(msg: &str) -> Vec<String> {
    header(msg, "Record-Route")
        .iter()
        .flat_map(|v| v.split(", <"))
        .map(|v| format!("<{}", v.trim_start_matches('<')))
        .collect()
}

/// A response to `req` with `status`, To tagged, Contact given.
fn answer(req: &str, status: &str, contact: &str) -> String {
    let mut out = format!("SIP/2.0 {status}\r\n");
    for l in req.lines().skip(1) {
        let name = l
            .split(':')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match name.as_str() {
            "via" | "from" | "call-id" | "cseq" | "record-route" => {
                out.push_str(l);
                out.push_str("\r\n");
            }
            "to" => {
                out.push_str(l);
                out.push_str(";tag=callee\r\n");
            }
            _ => {}
        }
    }
    out.push_str(&format!(
        "Contact: <{contact}>\r\nContent-Length: 0\r\n\r\n"
    ));
    out
}

/// The dialog an in-dialog request belongs to, as its sender sees it.
struct Dialog<'a> {
    from: &'a str,
    to: &'a str,
    call_id: &'a str,
}

/// An in-dialog request along `routes` (the route set) to `target`.
fn in_dialog(
    method: &str,
    target: &str,
    routes: &[String],
    via: &str,
    d: &Dialog<'_>,
    cseq: u32,
) -> String {
    let route = if routes.is_empty() {
        String::new()
    } else {
        format!("Route: {}\r\n", routes.join(", "))
    };
    let Dialog { from, to, call_id } = d;
    format!(
        "{method} {target} SIP/2.0\r\nVia: {via};branch=z9hG4bK-{method}-{cseq}\r\nMax-Forwards: 70\r\n\
         {route}From: {from}\r\nTo: {to}\r\nCall-ID: {call_id}\r\nCSeq: {cseq} {method}\r\nContent-Length: 0\r\n\r\n"
    )
}

fn invite(from: &str, to: &str, via: &str, contact: &str, call_id: &str) -> String {
    format!(
        "INVITE sip:{to}@localhost SIP/2.0\r\nVia: {via};branch=z9hG4bK-inv-{call_id}\r\nMax-Forwards: 70\r\n\
         From: <sip:{from}@localhost>;tag=caller\r\nTo: <sip:{to}@localhost>\r\nCall-ID: {call_id}\r\n\
         CSeq: 1 INVITE\r\nContact: <{contact}>\r\nContent-Length: 0\r\n\r\n"
    )
}

#[test]
fn two_websocket_phones_register_and_call_through_double_record_routes() {
    let s = server("call", &[]);
    let ws = ws_addr(&s);
    let mut alice = Ws::sip(ws);
    let mut bob = Ws::sip(ws);
    alice.send(&register("alice", "WS", "sip:a1@abc.invalid;transport=ws"));
    let ok = alice.final_message();
    assert!(ok.starts_with("SIP/2.0 200 "), "{ok}");
    assert_eq!(header(&ok, "Require"), ["outbound"], "{ok}");
    bob.send(&register("bob", "WS", "sip:b1@bob.invalid;transport=ws"));
    assert!(bob.final_message().starts_with("SIP/2.0 200 "));

    alice.send(&invite(
        "alice",
        "bob",
        "SIP/2.0/WS abc.invalid",
        "sip:a1@abc.invalid;transport=ws",
        "ws-call",
    ));
    let inv = bob.message();
    assert!(
        inv.starts_with("INVITE sip:b1@bob.invalid;transport=ws "),
        "{inv}"
    );
    // Both sides are connections: two entries, each with its flow token.
    let rr = record_routes(&inv);
    assert_eq!(rr.len(), 2, "{inv}");
    for r in &rr {
        assert!(
            r.starts_with("<sip:f")
                && r.contains(&format!("@{ws};transport=ws;hops="))
                && r.ends_with(";lr>"),
            "{r}"
        );
    }
    // The caller's Via got received/rport: responses find its connection.
    let vias = header(&inv, "Via");
    assert!(
        vias.iter()
            .any(|v| v.contains("abc.invalid")
                && v.contains(&format!("rport={}", alice.local().port()))),
        "{inv}"
    );
    bob.send(&answer(&inv, "200 OK", "sip:b1@bob.invalid;transport=ws"));
    let ok = alice.final_message();
    assert!(ok.starts_with("SIP/2.0 200 "), "{ok}");
    // Caller's route set: the Record-Route reversed (RFC 3261 §12.1.2).
    let mut caller_routes = record_routes(&ok);
    caller_routes.reverse();
    let from = "<sip:alice@localhost>;tag=caller";
    let to = "<sip:bob@localhost>;tag=callee";
    alice.send(&in_dialog(
        "ACK",
        "sip:b1@bob.invalid;transport=ws",
        &caller_routes,
        "SIP/2.0/WS abc.invalid",
        &Dialog {
            from,
            to,
            call_id: "ws-call",
        },
        1,
    ));
    let ack = bob.message();
    assert!(ack.starts_with("ACK sip:b1@bob.invalid"), "{ack}");
    assert!(
        header(&ack, "Route").is_empty(),
        "both of ours popped: {ack}"
    );
    // The callee hangs up along its route set (the Record-Route as is).
    let callee_routes = record_routes(&inv);
    bob.send(&in_dialog(
        "BYE",
        "sip:a1@abc.invalid;transport=ws",
        &callee_routes,
        "SIP/2.0/WS bob.invalid",
        &Dialog {
            from: to,
            to: from,
            call_id: "ws-call",
        },
        2,
    ));
    let bye = alice.message();
    assert!(
        bye.starts_with("BYE sip:a1@abc.invalid;transport=ws "),
        "{bye}"
    );
    alice.send(&answer(&bye, "200 OK", "sip:a1@abc.invalid;transport=ws"));
    let ok = bob.final_message();
    assert!(ok.starts_with("SIP/2.0 200 ") && ok.contains("BYE"), "{ok}");

    // Alice's browser goes away: once the server has seen it close, her
    // binding is dropped (it can never be reached again), so a call for
    // her is 404 as for any user with no binding.
    drop(alice);
    let until = Instant::now() + Duration::from_secs(10);
    while s.handle.shared().metrics.closed_for(CloseReason::Peer) < 1 {
        assert!(Instant::now() < until, "the close is seen");
        std::thread::sleep(Duration::from_millis(20));
    }
    bob.send(&invite(
        "bob",
        "alice",
        "SIP/2.0/WS bob.invalid",
        "sip:b1@bob.invalid;transport=ws",
        "gone",
    ));
    let answer = bob.final_message();
    assert!(answer.starts_with("SIP/2.0 404 "), "{answer}");
    assert_eq!(
        s.handle
            .shared()
            .metrics
            .flow_bindings_dropped
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[test]
fn a_websocket_phone_calls_a_udp_phone_across_the_bridge_both_ways() {
    let s = server("bridge", &[]);
    let ws = ws_addr(&s);
    let udp_srv = s.handle.local_addr();
    let phone = UdpSocket::bind("127.0.0.1:0").expect("udp");
    phone
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let me = phone.local_addr().expect("addr");
    let contact = format!("sip:carol@{me}");
    let reg = register("carol", "UDP", &contact).replace("abc.invalid", &me.to_string());
    phone.send_to(reg.as_bytes(), udp_srv).expect("send");
    assert!(udp_final(&phone).starts_with("SIP/2.0 200 "));

    let mut alice = Ws::sip(ws);
    alice.send(&register("alice", "WS", "sip:a1@abc.invalid;transport=ws"));
    assert!(alice.final_message().starts_with("SIP/2.0 200 "));
    alice.send(&invite(
        "alice",
        "carol",
        "SIP/2.0/WS abc.invalid",
        "sip:a1@abc.invalid;transport=ws",
        "bridge",
    ));
    let inv = udp_final(&phone);
    assert!(inv.starts_with(&format!("INVITE {contact} ")), "{inv}");
    // RFC 5658: the UDP side first, then the WebSocket side with its token.
    let rr = record_routes(&inv);
    assert_eq!(rr.len(), 2, "{inv}");
    assert!(
        rr[0].starts_with(&format!("<sip:{udp_srv};hops=")) && rr[0].ends_with(";lr>"),
        "{}",
        rr[0]
    );
    assert!(
        rr[1].starts_with("<sip:f")
            && rr[1].contains(&format!("@{ws};transport=ws;hops="))
            && rr[1].ends_with(";lr>"),
        "{}",
        rr[1]
    );
    phone
        .send_to(answer(&inv, "200 OK", &contact).as_bytes(), udp_srv)
        .expect("send");
    let ok = alice.final_message();
    assert!(ok.starts_with("SIP/2.0 200 "), "{ok}");
    let from = "<sip:alice@localhost>;tag=caller";
    let to = "<sip:carol@localhost>;tag=callee";
    let mut caller_routes = record_routes(&ok);
    caller_routes.reverse();
    alice.send(&in_dialog(
        "ACK",
        &contact,
        &caller_routes,
        "SIP/2.0/WS abc.invalid",
        &Dialog {
            from,
            to,
            call_id: "bridge",
        },
        1,
    ));
    let ack = udp_final(&phone);
    assert!(
        ack.starts_with(&format!("ACK {contact} ")) && !ack.contains("Route:"),
        "{ack}"
    );
    // UDP → WS: the callee's BYE crosses back on the browser's socket.
    let bye = in_dialog(
        "BYE",
        "sip:a1@abc.invalid;transport=ws",
        &rr,
        &format!("SIP/2.0/UDP {me}"),
        &Dialog {
            from: to,
            to: from,
            call_id: "bridge",
        },
        2,
    );
    phone.send_to(bye.as_bytes(), udp_srv).expect("send");
    let got = alice.message();
    assert!(
        got.starts_with("BYE sip:a1@abc.invalid;transport=ws "),
        "{got}"
    );
    alice.send(&answer(&got, "200 OK", "sip:a1@abc.invalid;transport=ws"));
    let ok = udp_final(&phone);
    assert!(ok.starts_with("SIP/2.0 200 ") && ok.contains("BYE"), "{ok}");
}

/// Something a client does to a fresh connection.
type Act = Box<dyn Fn(&mut Ws)>;

#[test]
fn frames_fragments_pings_and_violations_are_handled_as_rfc_6455_says() {
    let s = server("frames", &[]);
    let ws = ws_addr(&s);
    // A REGISTER in three fragments with a ping between them.
    let mut c = Ws::sip(ws);
    let reg = register("frag", "WS", "sip:f@frag.invalid;transport=ws");
    let (a, rest) = reg.split_at(40);
    let (b, z) = rest.split_at(60);
    c.frame(0x01, a.as_bytes());
    c.frame(0x89, b"hi");
    c.frame(0x00, b.as_bytes());
    c.frame(0x80, z.as_bytes());
    assert_eq!(c.next(), Got::Pong(b"hi".to_vec()));
    assert!(c.final_message().starts_with("SIP/2.0 200 "));
    // A peer's close is answered with its code.
    c.frame(0x88, &1000u16.to_be_bytes());
    assert_eq!(c.next(), Got::Close(1000));
    assert_eq!(c.next(), Got::Eof);

    let cases: [(&str, Act, u16); 4] = [
        (
            "oversized",
            Box::new(|c: &mut Ws| c.frame(0x81, &vec![b'a'; 70_000])),
            1009,
        ),
        (
            "unmasked",
            Box::new(|c: &mut Ws| c.s.write_all(&[0x81, 0x01, b'x']).expect("send")),
            1002,
        ),
        (
            "continuation of nothing",
            Box::new(|c: &mut Ws| c.frame(0x80, b"x")),
            1002,
        ),
        (
            // Close mid-message: the half-sent message is dropped, the close answered.
            "close mid-message",
            Box::new(|c: &mut Ws| {
                c.frame(0x01, b"REGISTER sip:localhost SIP/2.0\r\n");
                c.frame(0x88, &1001u16.to_be_bytes());
            }),
            1001,
        ),
    ];
    for (what, act, code) in cases {
        let mut c = Ws::sip(ws);
        act(&mut c);
        assert_eq!(c.next(), Got::Close(code), "{what}");
        assert_eq!(c.next(), Got::Eof, "{what}: then the connection ends");
    }
    // The server still serves.
    let mut c = Ws::sip(ws);
    c.send(&register("after", "WS", "sip:x@after.invalid;transport=ws"));
    assert!(c.final_message().starts_with("SIP/2.0 200 "));
}

#[test]
fn bad_upgrades_and_foreign_origins_are_refused() {
    let s = server("upgrade", &["https://phone.example"]);
    let ws = ws_addr(&s);
    let cases = [
        ("Origin: https://phone.example\r\n", "400 "),
        (
            "Sec-WebSocket-Protocol: sip\r\nOrigin: https://evil.example\r\n",
            "403 ",
        ),
        ("Sec-WebSocket-Protocol: sip\r\n", "403 "),
    ];
    for (extra, status) in cases {
        let (mut c, head) = Ws::open(ws, extra);
        assert!(
            head.starts_with(&format!("HTTP/1.1 {status}")),
            "{extra}: {head}"
        );
        assert_eq!(c.next(), Got::Eof, "{extra}");
    }
    // A plain HTTP GET (no upgrade) is told this is a WebSocket port.
    let mut s2 = TcpStream::connect(ws).expect("connect");
    s2.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s2.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("send");
    let mut r = String::new();
    let _ = s2.read_to_string(&mut r);
    assert!(r.starts_with("HTTP/1.1 426 "), "{r}");
    let (_, head) = Ws::open(
        ws,
        "Sec-WebSocket-Protocol: sip\r\nOrigin: https://phone.example\r\n",
    );
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert!(head.contains("Sec-WebSocket-Protocol: sip\r\n"), "{head}");
    let refused = s
        .handle
        .shared()
        .metrics
        .ws_upgrades_refused
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(refused, 4);
}

/// A browser that closes its tab while it rings: nothing can reach it any
/// more (it has no listening socket, RFC 7118 §5), so the caller hears 503
/// when the connection closes, not after timer C (180 s) or B (32 s).
/// The caller waits at most 20 s, well under either.
#[test]
fn calls_ringing_on_a_closed_websocket_fail_at_once() {
    let s = server("gone", &[]);
    let ws = ws_addr(&s);
    let udp_srv = s.handle.local_addr();
    let carol = UdpSocket::bind("127.0.0.1:0").expect("udp");
    carol
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let me = carol.local_addr().expect("addr");
    let next = |p: &UdpSocket| {
        let mut b = [0u8; 8192];
        let n = p.recv(&mut b).expect("an answer within 20 s");
        String::from_utf8_lossy(&b[..n]).into_owned()
    };
    let bob_contact = "sip:b1@bob.invalid;transport=ws";
    for (call, rings) in [("gone-ringing", true), ("gone-trying", false)] {
        let mut bob = Ws::sip(ws);
        bob.send(&register("bob", "WS", bob_contact));
        assert!(bob.final_message().starts_with("SIP/2.0 200 "));
        let inv = invite(
            "carol",
            "bob",
            &format!("SIP/2.0/UDP {me}"),
            &format!("sip:carol@{me}"),
            call,
        );
        carol.send_to(inv.as_bytes(), udp_srv).expect("send");
        assert!(next(&carol).starts_with("SIP/2.0 100 "));
        let got = bob.message();
        assert!(got.starts_with("INVITE sip:b1@bob.invalid"), "{got}");
        if rings {
            bob.send(&answer(&got, "180 Ringing", bob_contact));
            let ringing = next(&carol);
            assert!(ringing.starts_with("SIP/2.0 180 "), "{ringing}");
        }
        drop(bob);
        let fin = next(&carol);
        assert!(
            fin.starts_with("SIP/2.0 503 ") && fin.contains(&format!("Call-ID: {call}")),
            "{fin}"
        );
        // Acknowledged as a client transaction does (RFC 3261 §17.1.1.3),
        // so the 503 is not sent again while the next call is placed.
        let ack = format!(
            "ACK sip:bob@localhost SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-inv-{call}\r\nMax-Forwards: 70\r\n\
             From: <sip:carol@localhost>;tag=caller\r\nTo: {}\r\nCall-ID: {call}\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n",
            header(&fin, "To")[0]
        );
        carol.send_to(ack.as_bytes(), udp_srv).expect("send");
    }
}

/// WebSocket pings were answered without bound (4–6 million on one
/// connection, 97–99.8 % of a core). Now a connection pinging far beyond
/// RFC 5626's keep-alive pace is closed with 1008 after its burst
/// (`keepalive_rate` a second, ten times as many at once).
#[test]
fn a_websocket_ping_flood_is_closed_after_its_burst() {
    let s = server("pingflood", &[]);
    let ws = ws_addr(&s);
    let mut c = Ws::sip(ws);
    let mut pongs = 0;
    let closed_with = loop {
        c.frame(0x89, b"p");
        match c.next() {
            Got::Pong(_) => pongs += 1,
            Got::Close(code) => break code,
            other => panic!("after {pongs} pongs: {other:?}"),
        }
        assert!(pongs < 1000, "1,000 pings answered: no bound");
    };
    assert_eq!(closed_with, 1008);
    let burst = 10 * s.handle.shared().config.connections.keepalive_rate;
    assert!(
        pongs >= burst as usize,
        "{pongs} pongs, below the burst {burst}"
    );
    // Counted as the reactor finishes closing it (bounded wait).
    let flood = sipsec_server::proto::metrics::CloseReason::KeepaliveFlood;
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while s.handle.shared().metrics.closed_for(flood) == 0 && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(s.handle.shared().metrics.closed_for(flood), 1);
    // Another connection is served.
    let mut c = Ws::sip(ws);
    c.send(&register("after", "WS", "sip:x@after.invalid;transport=ws"));
    assert!(c.final_message().starts_with("SIP/2.0 200 "));
}

/// A browser phone that reloads registers again on a new connection.
/// Calls to it went to the old, closed connection and got 430 Flow Failed
/// for as long as that binding lived; now the binding is dropped when its
/// connection closes and the call reaches the new connection at once.
#[test]
fn a_reloaded_browser_phone_is_reached_at_once() {
    let s = server("reload", &[]);
    let ws = ws_addr(&s);
    let mut before = Ws::sip(ws);
    before.send(&register("alice", "WS", "sip:old@abc.invalid;transport=ws"));
    assert!(before.final_message().starts_with("SIP/2.0 200 "));
    drop(before);
    // The server has seen the old connection close (bounded wait).
    let peer = sipsec_server::proto::metrics::CloseReason::Peer;
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while s.handle.shared().metrics.closed_for(peer) == 0 && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    // The reloaded page is another instance (JsSIP draws one per load).
    let mut after = Ws::sip(ws);
    after.send(
        &register("alice", "WS", "sip:new@def.invalid;transport=ws")
            .replace("Call-ID: reg-alice", "Call-ID: reg-alice-reloaded")
            .replace("000000000005>", "0000000000a5>"),
    );
    let ok = after.final_message();
    assert!(ok.starts_with("SIP/2.0 200 "), "{ok}");
    let contacts = header(&ok, "Contact");
    assert_eq!(contacts.len(), 1, "the closed flow's binding dropped: {ok}");
    assert!(contacts[0].contains("sip:new@def.invalid"), "{ok}");
    let mut bob = Ws::sip(ws);
    bob.send(&invite(
        "bob",
        "alice",
        "SIP/2.0/WS bob.invalid",
        "sip:b@bob.invalid;transport=ws",
        "after-reload",
    ));
    let inv = after.message();
    assert!(
        inv.starts_with("INVITE sip:new@def.invalid;transport=ws "),
        "{inv}"
    );
}

/// RFC 5626 §6: a phone that registers again with the same
/// `+sip.instance` and `reg-id` on a new connection (and a new contact)
/// replaces its older binding at once, instead of leaving it to expire.
#[test]
fn the_same_instance_and_reg_id_replace_a_phones_older_binding() {
    let s = server("instance", &[]);
    let ws = ws_addr(&s);
    let mut before = Ws::sip(ws);
    before.send(&register("alice", "WS", "sip:old@abc.invalid;transport=ws"));
    assert!(before.final_message().starts_with("SIP/2.0 200 "));
    let mut after = Ws::sip(ws);
    after.send(
        &register("alice", "WS", "sip:new@def.invalid;transport=ws")
            .replace("Call-ID: reg-alice", "Call-ID: reg-alice-again"),
    );
    let ok = after.final_message();
    assert!(ok.starts_with("SIP/2.0 200 "), "{ok}");
    let contacts = header(&ok, "Contact");
    assert_eq!(contacts.len(), 1, "the older binding replaced: {ok}");
    assert!(contacts[0].contains("sip:new@def.invalid"), "{ok}");
}

/// The next UDP message that is not a provisional response.
fn udp_final(p: &UdpSocket) -> String {
    let mut b = [0u8; 8192];
    loop {
        let n = p.recv(&mut b).expect("udp message");
        let m = String::from_utf8_lossy(&b[..n]).into_owned();
        if !m.starts_with("SIP/2.0 1") {
            return m;
        }
    }
}

fn top_branch(msg: &str) -> String {
    let via = header(msg, "Via")[0];
    via.split(";branch=").nth(1).expect("branch").to_owned()
}

/// RFC 3261 §16.6–16.7: a user with two UDP phones and a browser phone.
/// A call rings all three, each on its own branch; the browser answers,
/// the ringing UDP phones get CANCEL, the caller gets the 200 and none
/// of their 487s, and no branch is left pending.
#[test]
fn a_call_forks_to_two_udp_phones_and_a_browser() {
    let s = server("fork", &[]);
    let ws = ws_addr(&s);
    let udp_srv = s.handle.local_addr();
    let bind = || {
        let p = UdpSocket::bind("127.0.0.1:0").expect("udp");
        p.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        p
    };
    let phones = [bind(), bind()];
    for (i, p) in phones.iter().enumerate() {
        let me = p.local_addr().expect("addr");
        let reg = format!(
            "REGISTER sip:localhost SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-reg{i}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:alice@localhost>;tag=r{i}\r\nTo: <sip:alice@localhost>\r\n\
             Call-ID: reg-udp-{i}\r\nCSeq: 1 REGISTER\r\nContact: <sip:alice@{me}>\r\n\
             Expires: 600\r\nContent-Length: 0\r\n\r\n"
        );
        p.send_to(reg.as_bytes(), udp_srv).expect("send");
        assert!(udp_final(p).starts_with("SIP/2.0 200 "));
    }
    let mut browser = Ws::sip(ws);
    browser.send(&register("alice", "WS", "sip:a1@abc.invalid;transport=ws"));
    let ok = browser.final_message();
    assert_eq!(header(&ok, "Contact").len(), 3, "{ok}");

    let caller = bind();
    let me = caller.local_addr().expect("addr");
    let inv = invite(
        "bob",
        "alice",
        &format!("SIP/2.0/UDP {me}"),
        &format!("sip:bob@{me}"),
        "forked",
    );
    caller.send_to(inv.as_bytes(), udp_srv).expect("send");
    let mut invites: Vec<String> = phones.iter().map(udp_final).collect();
    invites.push(browser.message());
    for i in &invites {
        assert!(i.starts_with("INVITE sip:"), "{i}");
    }
    let mut branches: Vec<String> = invites.iter().map(|i| top_branch(i)).collect();
    branches.sort();
    branches.dedup();
    assert_eq!(branches.len(), 3, "one branch per target: {branches:?}");
    for (p, i) in phones.iter().zip(&invites) {
        let contact = format!("sip:alice@{}", p.local_addr().expect("addr"));
        p.send_to(answer(i, "180 Ringing", &contact).as_bytes(), udp_srv)
            .expect("send");
    }
    browser.send(&answer(
        &invites[2],
        "200 OK",
        "sip:a1@abc.invalid;transport=ws",
    ));
    let ok = udp_final(&caller);
    assert!(ok.starts_with("SIP/2.0 200 "), "{ok}");
    for (p, i) in phones.iter().zip(&invites) {
        let cancel = udp_final(p);
        assert!(cancel.starts_with("CANCEL "), "{cancel}");
        assert_eq!(top_branch(&cancel), top_branch(i), "the INVITE's branch");
        let contact = format!("sip:alice@{}", p.local_addr().expect("addr"));
        for status in ["200 OK", "487 Request Terminated"] {
            let to = if status.starts_with("200") {
                &cancel
            } else {
                i
            };
            p.send_to(answer(to, status, &contact).as_bytes(), udp_srv)
                .expect("send");
        }
        let ack = udp_final(p);
        assert!(ack.starts_with("ACK "), "{ack}");
    }
    let tx = s.handle.shared().transactions.as_ref().expect("stateful");
    let until = Instant::now() + Duration::from_secs(5);
    while tx.pending_branches() > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(tx.pending_branches(), 0, "no branch left pending");
    caller.set_nonblocking(true).expect("nonblocking");
    let mut b = [0u8; 8192];
    while let Ok(n) = caller.recv(&mut b) {
        let m = String::from_utf8_lossy(&b[..n]);
        assert!(
            !m.starts_with("SIP/2.0 487"),
            "a cancelled branch's 487: {m}"
        );
    }
}

/// A REGISTER for alice over `transport` (Via sent-by `via`), CSeq `cseq`.
fn register_alice(transport: &str, via: &str, cseq: u32, auth: &str) -> String {
    format!(
        "REGISTER sip:localhost SIP/2.0\r\nVia: SIP/2.0/{transport} {via};branch=z9hG4bK-ban{transport}{cseq}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:alice@localhost>;tag=ban\r\nTo: <sip:alice@localhost>\r\n\
         Call-ID: ban-{transport}\r\nCSeq: {cseq} REGISTER\r\nContact: <sip:alice@{via}>\r\n\
         {auth}Content-Length: 0\r\n\r\n"
    )
}

/// Waits (bounded) until the server has dropped `n` requests from banned
/// sources in all: the sign that a request sent was refused, not lost.
fn await_banned_drops(s: &Served, n: u64) {
    let banned = &s.handle.shared().metrics.banned;
    let until = Instant::now() + Duration::from_secs(10);
    while banned.load(std::sync::atomic::Ordering::Relaxed) < n {
        assert!(Instant::now() < until, "no request was refused as banned");
        std::thread::yield_now();
    }
}

/// Any page a visitor opens can connect a WebSocket from the visitor's
/// browser and answer nonces wrong: that bans WebSocket from the
/// visitor's address, not the SIP phones behind the same NAT. Failures
/// over UDP still ban the address on every transport.
#[test]
fn wrong_answers_over_websocket_ban_websocket_not_the_address() {
    use sipsec_server::proto::guard::Scope;
    use sipsec_server::proto::users::{UserEntry, Users};

    let users_dir = scratch::Scratch::new("ws-ban-users");
    let users = users_dir.join("users.tsv");
    let mut u = Users::default();
    let entry = UserEntry::from_password("alice", "sipsec", "wonderland");
    u.insert("alice", "sipsec", entry).expect("user");
    sipsec_server::io::users_file::save(&u, &users).expect("save users");
    let mut config = server_config(&[]);
    config.auth = true;
    config.users = users;
    config.guard.max_auth_failures = 3;
    let s = Served::start("ws-ban", config).expect("server starts");
    let (mut page, head) = Ws::open(
        ws_addr(&s),
        "Sec-WebSocket-Protocol: sip\r\nOrigin: https://evil.example\r\n",
    );
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    for i in 0..3 {
        page.send(&register_alice("WS", "abc.invalid", 2 * i + 1, ""));
        let creds = peers::wrong_credentials(&page.final_message(), "sip:localhost");
        page.send(&register_alice("WS", "abc.invalid", 2 * i + 2, &creds));
        let refused = page.final_message();
        assert!(refused.starts_with("SIP/2.0 401 "), "{refused}");
    }
    let udp_srv = s.handle.local_addr();
    let bans = s.handle.shared().guard.banned(unix_secs());
    assert_eq!(bans.len(), 1, "{bans:?}");
    assert_eq!(
        (bans[0].source.ip, bans[0].scope),
        (udp_srv.ip(), Scope::WebSocket)
    );
    // The page's connection and a new WebSocket are shut out…
    page.send(&register_alice("WS", "abc.invalid", 7, ""));
    await_banned_drops(&s, 1);
    let mut other = Ws::sip(ws_addr(&s));
    other.send(&register_alice("WS", "def.invalid", 1, ""));
    await_banned_drops(&s, 2);
    // …a SIP phone at the same address is not.
    let phone = UdpSocket::bind("127.0.0.1:0").expect("bind");
    phone
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let me = phone.local_addr().expect("local").to_string();
    let ask = |cseq: u32, auth: &str| {
        let req = register_alice("UDP", &me, cseq, auth);
        phone.send_to(req.as_bytes(), udp_srv).expect("send");
        udp_final(&phone)
    };
    // Three wrong answers over UDP ban the address everywhere.
    for i in 0..3 {
        let creds = peers::wrong_credentials(&ask(2 * i + 1, ""), "sip:localhost");
        let refused = ask(2 * i + 2, &creds);
        assert!(refused.starts_with("SIP/2.0 401 "), "{refused}");
    }
    let scopes: Vec<Scope> = s
        .handle
        .shared()
        .guard
        .banned(unix_secs())
        .iter()
        .map(|b| b.scope)
        .collect();
    assert_eq!(scopes, [Scope::All, Scope::WebSocket]);
    let req = register_alice("UDP", &me, 9, "");
    phone.send_to(req.as_bytes(), udp_srv).expect("send");
    await_banned_drops(&s, 3);
}

/// A page's flood over WebSocket spends the WebSocket tokens of the
/// visitor's address, not those of the SIP phones behind it.
#[test]
fn a_flood_over_websocket_does_not_rate_limit_the_address() {
    let mut config = server_config(&[]);
    config.guard.exempt_loopback = false;
    config.guard.rate = 1;
    config.guard.burst = 3;
    let s = Served::start("ws-flood", config).expect("server starts");
    let mut page = Ws::sip(ws_addr(&s));
    for i in 0..20 {
        page.send(&register_alice("WS", "abc.invalid", i + 1, ""));
    }
    let limited = &s.handle.shared().metrics.rate_limited;
    let until = Instant::now() + Duration::from_secs(10);
    while limited.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        assert!(Instant::now() < until, "the flood was not limited");
        std::thread::yield_now();
    }
    let phone = UdpSocket::bind("127.0.0.1:0").expect("bind");
    phone
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let me = phone.local_addr().expect("local").to_string();
    let req = register_alice("UDP", &me, 1, "");
    phone
        .send_to(req.as_bytes(), s.handle.local_addr())
        .expect("send");
    let ok = udp_final(&phone);
    assert!(ok.starts_with("SIP/2.0 200 "), "{ok}");
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}
