//! The NG client against a real rtpengine (Debian's `rtpengine-daemon`,
//! userspace only: `--table=-1`), started on free loopback ports.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use sipsec_server::io::ng::Relays;
use sipsec_server::proto::ng::{Command, Event, Failure, Media, Reply, Settings};

#[path = "support/scratch.rs"]
mod scratch;
#[path = "support/served.rs"]
mod served;
#[path = "support/rtpengine.rs"]
mod support;
use support::{free_udp_port, settings, Rtpengine};

/// An endpoint's offer. Its ports lie below every relay's range
/// (20,000–59,999, `support/rtpengine.rs`): a relay that happened to be
/// given 40,000–40,099 once handed out 40,000, the port offered, and
/// the check that the relay rewrote it failed.
fn sdp(ip: &str, port: u16) -> String {
    format!(
        "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 0 8\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\n"
    )
}

fn media(call_id: &str, to_tag: Option<&str>, body: String) -> Media {
    Media {
        call_id: call_id.into(),
        from_tag: "caller-tag".into(),
        to_tag: to_tag.map(str::to_owned),
        sdp: body,
        flags: &["trust-address"],
        replace: &["origin", "session-connection"],
        options: &[("ICE", "remove")],
        ..Media::default()
    }
}

/// The media line's port and the connection address of an SDP.
fn relayed(sdp: &str) -> (String, u16) {
    let c = sdp
        .lines()
        .find_map(|l| l.strip_prefix("c=IN IP4 "))
        .expect("c= line");
    let port = sdp
        .lines()
        .find_map(|l| l.strip_prefix("m=audio "))
        .and_then(|l| l.split(' ').next())
        .and_then(|p| p.parse().ok())
        .expect("m= line");
    (c.trim().to_owned(), port)
}

/// A call through the relay: the offer's SDP comes back with the relay's
/// address and a port of its range for the callee, the answer's for the
/// caller; the relay knows the call until it is deleted, then not.
#[test]
fn offer_answer_query_and_delete_with_a_real_rtpengine() {
    let engine = Rtpengine::start();
    let mut relays = Relays::open(
        settings(&[(engine.ng, 1)], 1000),
        "127.0.0.1:0".parse().unwrap(),
    )
    .unwrap();
    let call = "ng-call-1@sipsec.test";
    let offer = relays
        .call(&Command::Offer(media(call, None, sdp("192.0.2.10", 10000))))
        .expect("offer answered");
    let Reply::Ok {
        sdp: Some(to_callee),
    } = offer
    else {
        panic!("offer: {offer:?}");
    };
    let (ip, port) = relayed(&to_callee);
    assert_eq!(ip, "127.0.0.1", "{to_callee}");
    assert_ne!(port, 10000);
    assert!(!to_callee.contains("192.0.2.10"), "{to_callee}");
    let answer = relays
        .call(&Command::Answer(media(
            call,
            Some("callee-tag"),
            sdp("192.0.2.20", 12000),
        )))
        .expect("answer answered");
    let Reply::Ok {
        sdp: Some(to_caller),
    } = answer
    else {
        panic!("answer: {answer:?}");
    };
    let (ip, port_back) = relayed(&to_caller);
    assert_eq!(ip, "127.0.0.1");
    assert_ne!(port_back, port, "each side gets its own port");
    assert!(matches!(
        relays.call(&Command::Query {
            call_id: call.into()
        }),
        Ok(Reply::Ok { .. })
    ));
    let delete = Command::Delete {
        call_id: call.into(),
        from_tag: "caller-tag".into(),
        to_tag: None,
    };
    assert!(matches!(relays.call(&delete), Ok(Reply::Ok { .. })));
    assert!(
        matches!(
            relays.call(&Command::Query {
                call_id: call.into()
            }),
            Ok(Reply::Error(_))
        ),
        "the call is gone"
    );
    assert_eq!(relays.client().counts().refused, 0);
}

/// Two relays, the heavier one where nobody listens: the offer is resent
/// to it, then moves to the live one, which answers; the dead one is
/// reported down and new calls go to the live one at once.
#[test]
fn an_offer_fails_over_from_a_silent_relay_to_a_live_one() {
    let engine = Rtpengine::start();
    let dead = SocketAddr::from(([127, 0, 0, 1], free_udp_port()));
    let mut relays = Relays::open(
        settings(&[(dead, 1_000_000), (engine.ng, 1)], 200),
        "127.0.0.1:0".parse().unwrap(),
    )
    .unwrap();
    let offer = relays.call(&Command::Offer(media(
        "ng-failover@sipsec.test",
        None,
        sdp("192.0.2.10", 10000),
    )));
    assert!(matches!(offer, Ok(Reply::Ok { sdp: Some(_) })), "{offer:?}");
    assert_eq!(relays.take_changes(), [Event::RelayDown(dead)]);
    let up: Vec<_> = relays.client().relays().collect();
    assert_eq!(up, [(dead, false), (engine.ng, true)]);
    let resent = relays.client().counts().retransmitted;
    let again = relays.call(&Command::Offer(media(
        "ng-failover-2@sipsec.test",
        None,
        sdp("192.0.2.11", 10002),
    )));
    assert!(matches!(again, Ok(Reply::Ok { .. })));
    assert_eq!(
        relays.client().counts().retransmitted,
        resent,
        "the next call went straight to the live relay"
    );
    // With only the dead relay, a command fails instead of hanging.
    let mut lonely =
        Relays::open(settings(&[(dead, 1)], 100), "127.0.0.1:0".parse().unwrap()).unwrap();
    assert_eq!(lonely.call(&Command::Ping), Err(Failure::Timeout));
}

// --- Calls through the stateful proxy with `[media]` on ---------------

use served::Served;
use sipsec_server::config_media::{MediaMode, MediaSettings, RelayFailure};
use sipsec_server::{Config, Mode};

fn proxy(name: &str, media: MediaSettings) -> Served {
    Served::start(&format!("media-{name}"), proxy_config(media)).expect("server starts")
}

fn proxy_config(media: MediaSettings) -> Config {
    Config {
        mode: Mode::Proxy,
        stateful: true,
        udp: "127.0.0.1:0".parse().expect("addr"),
        tcp: None,
        http: Some("127.0.0.1:0".parse().expect("addr")),
        advertise: "127.0.0.1:0".parse().expect("addr"),
        workers: 2,
        media,
        ..Config::default()
    }
}

fn media_settings(relay: SocketAddr, timeout_ms: u64, on_failure: RelayFailure) -> MediaSettings {
    MediaSettings {
        mode: MediaMode::Always,
        relays: Settings {
            tries: 1,
            ..settings(&[(relay, 1)], timeout_ms)
        },
        on_failure,
        ..MediaSettings::default()
    }
}

fn udp() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("udp");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s
}

/// The next SIP message on `s` that is not a 100 Trying.
fn recv_sip(s: &UdpSocket) -> String {
    let mut b = [0u8; 8192];
    loop {
        let n = s.recv(&mut b).expect("a SIP message in time");
        let m = String::from_utf8_lossy(&b[..n]).into_owned();
        if !m.starts_with("SIP/2.0 100 ") {
            return m;
        }
    }
}

fn header<'a>(msg: &'a str, name: &str) -> &'a str {
    msg.lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
        .unwrap_or("")
}

fn body(msg: &str) -> &str {
    msg.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

/// Registers `user` at `phone`'s address.
fn register(srv: SocketAddr, phone: &UdpSocket, user: &str) {
    let at = phone.local_addr().expect("addr");
    let reg = format!(
        "REGISTER sip:localhost SIP/2.0\r\nVia: SIP/2.0/UDP {at};branch=z9hG4bK-reg-{user}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:{user}@localhost>;tag=r\r\nTo: <sip:{user}@localhost>\r\n\
         Call-ID: reg-{user}\r\nCSeq: 1 REGISTER\r\nContact: <sip:{user}@{at}>\r\n\
         Expires: 600\r\nContent-Length: 0\r\n\r\n"
    );
    phone.send_to(reg.as_bytes(), srv).expect("send");
    let ok = recv_sip(phone);
    assert!(ok.starts_with("SIP/2.0 200 "), "{ok}");
}

fn invite(from: &UdpSocket, call: &str, sdp: &str) -> String {
    let me = from.local_addr().expect("addr");
    let branch = call.replace(['@', '.'], "-");
    format!(
        "INVITE sip:bob@localhost SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-{branch};rport\r\n\
         Max-Forwards: 70\r\nFrom: <sip:alice@localhost>;tag=alice-tag\r\nTo: <sip:bob@localhost>\r\n\
         Call-ID: {call}\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@{me}>\r\n\
         Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
        sdp.len()
    )
}

/// The callee's answer to `request` with `status` (and `sdp`).
fn answer(request: &str, status: &str, sdp: &str, contact: SocketAddr) -> String {
    let mut lines = String::new();
    for l in request.split("\r\n").skip(1) {
        let name = l
            .split(':')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if l.is_empty() {
            break;
        }
        if matches!(
            name.as_str(),
            "via" | "from" | "call-id" | "cseq" | "record-route"
        ) {
            lines.push_str(l);
            lines.push_str("\r\n");
        } else if name == "to" {
            lines.push_str(&format!("{l};tag=bob-tag\r\n"));
        }
    }
    let ct = if sdp.is_empty() {
        String::new()
    } else {
        "Content-Type: application/sdp\r\n".to_owned()
    };
    format!(
        "SIP/2.0 {status}\r\n{lines}Contact: <sip:bob@{contact}>\r\n{ct}Content-Length: {}\r\n\r\n{sdp}",
        sdp.len()
    )
}

/// Alice calls bob (`call`, offering `offer`) and bob answers 200 with
/// his media at `bob_rtp`: the INVITE as bob saw it, and the 200 as
/// alice saw it.
fn answered(
    srv: SocketAddr,
    (alice, bob): (&UdpSocket, &UdpSocket),
    bob_rtp: &UdpSocket,
    call: &str,
    offer: &str,
) -> (String, String) {
    alice
        .send_to(invite(alice, call, offer).as_bytes(), srv)
        .unwrap();
    let inv = recv_sip(bob);
    assert!(inv.starts_with("INVITE "), "{inv}");
    let bob_sdp = sdp("127.0.0.1", bob_rtp.local_addr().unwrap().port());
    let ok = answer(&inv, "200 OK", &bob_sdp, bob.local_addr().unwrap());
    bob.send_to(ok.as_bytes(), srv).unwrap();
    let ok = recv_sip(alice);
    assert!(ok.starts_with("SIP/2.0 200 "), "{ok}");
    (inv, ok)
}

/// A minimal RTP packet (version 2, PCMU) carrying `marker` as payload.
fn rtp(seq: u16, marker: u8) -> Vec<u8> {
    let mut p = vec![0x80, 0, 0, 0, 0, 0, 0, 160, 0x12, 0x34, 0x56, 0x78];
    p[2..4].copy_from_slice(&seq.to_be_bytes());
    p.extend(std::iter::repeat_n(marker, 160));
    p
}

/// Sends RTP from `from` to `to` until `at` receives one of them (the
/// relay forwards once it has learned both ends): the marker seen.
fn media_crosses(from: &UdpSocket, to: SocketAddr, at: &UdpSocket, marker: u8) -> bool {
    at.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let mut b = [0u8; 2048];
    for seq in 0..50u16 {
        from.send_to(&rtp(seq, marker), to).expect("send rtp");
        if let Ok(n) = at.recv(&mut b) {
            if n == 172 && b[12] == marker {
                return true;
            }
        }
    }
    false
}

/// Queries the relay until `call` is gone (a delete sent by the media
/// thread), or gives up after ten seconds.
fn gone_from(engine: &Rtpengine, call: &str) -> bool {
    let mut relays = Relays::open(
        settings(&[(engine.ng, 1)], 500),
        "127.0.0.1:0".parse().unwrap(),
    )
    .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let q = relays.call(&Command::Query {
            call_id: call.into(),
        });
        if matches!(q, Ok(Reply::Error(_))) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Two phones call through the proxy with `mode = "always"` and a real
/// rtpengine: each SDP the other side sees names the relay's ports, RTP
/// crosses the relay both ways, and the BYE deletes the call there.
#[test]
fn a_relayed_call_carries_media_both_ways_and_its_bye_deletes_it() {
    let engine = Rtpengine::start();
    let s = proxy(
        "always",
        media_settings(engine.ng, 1000, RelayFailure::Refuse),
    );
    let srv = s.handle.local_addr();
    let (alice, bob) = (udp(), udp());
    let (alice_rtp, bob_rtp) = (udp(), udp());
    register(srv, &bob, "bob");
    let call = "relayed-call@sipsec.test";
    let offer = sdp("127.0.0.1", alice_rtp.local_addr().unwrap().port());
    let (inv, ok) = answered(srv, (&alice, &bob), &bob_rtp, call, &offer);
    let (_, to_bob) = relayed(body(&inv));
    assert_ne!(to_bob, alice_rtp.local_addr().unwrap().port(), "{inv}");
    assert_eq!(
        header(&inv, "Content-Length"),
        body(&inv).len().to_string(),
        "{inv}"
    );
    let (_, to_alice) = relayed(body(&ok));
    assert_ne!(to_alice, bob_rtp.local_addr().unwrap().port(), "{ok}");
    let relay = |port| SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        media_crosses(&alice_rtp, relay(to_alice), &bob_rtp, 0xa1),
        "alice → bob through the relay"
    );
    assert!(
        media_crosses(&bob_rtp, relay(to_bob), &alice_rtp, 0xb0),
        "bob → alice through the relay"
    );
    // The BYE follows the recorded route, through the proxy.
    let route = header(&ok, "Record-Route").to_owned();
    let me = alice.local_addr().unwrap();
    let bye = format!(
        "BYE sip:bob@{} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-bye;rport\r\n\
         Route: {route}\r\nMax-Forwards: 70\r\nFrom: <sip:alice@localhost>;tag=alice-tag\r\n\
         To: <sip:bob@localhost>;tag=bob-tag\r\nCall-ID: {call}\r\nCSeq: 2 BYE\r\n\
         Content-Length: 0\r\n\r\n",
        bob.local_addr().unwrap()
    );
    alice.send_to(bye.as_bytes(), srv).unwrap();
    let bye = recv_sip(&bob);
    assert!(bye.starts_with("BYE "), "{bye}");
    let table = s.handle.shared().media.as_ref().expect("media on");
    assert_eq!(table.sizes().0, 1, "a BYE alone ends nothing");
    let ok = answer(&bye, "200 OK", "", bob.local_addr().unwrap());
    bob.send_to(ok.as_bytes(), srv).unwrap();
    assert!(recv_sip(&alice).starts_with("SIP/2.0 200 "));
    assert!(
        gone_from(&engine, call),
        "the BYE deleted the call at the relay"
    );
    let status = s.handle.shared().media.as_ref().expect("media on");
    assert_eq!(status.sizes(), (0, 0));
    // The operator sees the relay, its health and what was asked of it.
    let http = s.handle.http_addr().expect("operator endpoint");
    let json: serde_json::Value =
        serde_json::from_str(body(&http_get(http, "/status"))).expect("status JSON");
    let media = &json["media"];
    assert_eq!(media["mode"], "always", "{media}");
    assert_eq!(media["relays"][0]["addr"], engine.ng.to_string(), "{media}");
    assert_eq!(media["relays"][0]["up"], true, "{media}");
    let totals = ["offers_total", "answers_total", "deletes_total"].map(|k| media[k].clone());
    assert_eq!(totals, [1, 1, 1].map(serde_json::Value::from), "{media}");
    // The delete's answer came to the quiet socket nobody is woken for,
    // and was read there: three commands answered, none retried to
    // failure.
    let until = Instant::now() + Duration::from_secs(10);
    let mut metrics = http_get(http, "/metrics");
    while !metrics.contains("sipsec_media_outcomes_total{outcome=\"ok\"} 3")
        && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(20));
        metrics = http_get(http, "/metrics");
    }
    for line in [
        "sipsec_media_outcomes_total{outcome=\"ok\"} 3",
        "sipsec_media_outcomes_total{outcome=\"failed\"} 0",
        "sipsec_media_commands_total{command=\"offer\"} 1",
        "sipsec_media_relays_up 1",
        "sipsec_media_calls 0",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}

/// An HTTP GET on the operator endpoint: the whole answer.
fn http_get(at: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(at).expect("connect");
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut text = String::new();
    c.read_to_string(&mut text).expect("read");
    text
}

/// Alice calls bob (`call`, offering RTP at port 10000), and bob rings:
/// alice's INVITE.
fn ringing(srv: SocketAddr, alice: &UdpSocket, bob: &UdpSocket, call: &str) -> String {
    let inv = invite(alice, call, &sdp("127.0.0.1", 10000));
    alice.send_to(inv.as_bytes(), srv).unwrap();
    let to_bob = recv_sip(bob);
    let ringing = answer(&to_bob, "180 Ringing", "", bob.local_addr().unwrap());
    bob.send_to(ringing.as_bytes(), srv).unwrap();
    assert!(recv_sip(alice).starts_with("SIP/2.0 180 "));
    inv
}

/// A CANCEL ends a relayed call that was never answered: nothing is left
/// in the relay.
#[test]
fn a_cancelled_call_leaves_nothing_in_the_relay() {
    let engine = Rtpengine::start();
    let s = proxy(
        "cancel",
        media_settings(engine.ng, 1000, RelayFailure::Refuse),
    );
    let srv = s.handle.local_addr();
    let (alice, bob) = (udp(), udp());
    register(srv, &bob, "bob");
    let call = "cancelled-call@sipsec.test";
    let inv = ringing(srv, &alice, &bob, call);
    let cancel = inv
        .replacen("INVITE sip:", "CANCEL sip:", 1)
        .replace("CSeq: 1 INVITE", "CSeq: 1 CANCEL");
    let cancel = format!(
        "{}Content-Length: 0\r\n\r\n",
        cancel.split("Content-Type").next().unwrap()
    );
    alice.send_to(cancel.as_bytes(), srv).unwrap();
    assert!(
        recv_sip(&alice).starts_with("SIP/2.0 200 "),
        "CANCEL answered"
    );
    assert!(gone_from(&engine, call));
}

/// No relay answers: with `refuse` the caller gets 503 with Retry-After
/// (no hung transaction); under `require_srtp` a plain-RTP offer gets 488
/// before any relay is asked; with `pass` the call goes on unrelayed.
#[test]
fn a_silent_relay_refuses_or_passes_calls_as_configured() {
    let dead = SocketAddr::from(([127, 0, 0, 1], free_udp_port()));
    let refusing = proxy(
        "refuse",
        MediaSettings {
            require_srtp: true,
            ..media_settings(dead, 200, RelayFailure::Refuse)
        },
    );
    let srv = refusing.handle.local_addr();
    let (alice, bob) = (udp(), udp());
    register(srv, &bob, "bob");
    let plain = invite(&alice, "plain@sipsec.test", &sdp("127.0.0.1", 10000));
    alice.send_to(plain.as_bytes(), srv).unwrap();
    let refused = recv_sip(&alice);
    assert!(refused.starts_with("SIP/2.0 488 "), "{refused}");
    let srtp = sdp("127.0.0.1", 10000).replace("RTP/AVP", "RTP/SAVP");
    let asked = Instant::now();
    let inv = invite(&alice, "no-relay@sipsec.test", &srtp);
    alice.send_to(inv.as_bytes(), srv).unwrap();
    let refused = recv_sip(&alice);
    assert!(refused.starts_with("SIP/2.0 503 "), "{refused}");
    assert_eq!(header(&refused, "Retry-After"), "5");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "answered, not hung"
    );
    drop(refusing);

    let passing = proxy("pass", media_settings(dead, 200, RelayFailure::Pass));
    let srv = passing.handle.local_addr();
    register(srv, &bob, "bob");
    let offer = sdp("127.0.0.1", 10000);
    let inv = invite(&alice, "passed@sipsec.test", &offer);
    alice.send_to(inv.as_bytes(), srv).unwrap();
    let forwarded = recv_sip(&bob);
    assert!(forwarded.starts_with("INVITE "), "{forwarded}");
    assert_eq!(body(&forwarded), offer, "forwarded unrelayed");
    let table = passing.handle.shared().media.as_ref().expect("media on");
    assert_eq!(
        table
            .counts
            .passed_unrelayed
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

/// Anyone can send to the media thread's socket. A flood of datagrams
/// there, from two threads, must not hold that thread's timers: a relay
/// that stays silent still fails the offer to 503 in time, and what the
/// flood sent is counted as refused for the operator. (Whether a flood
/// outruns the reader depends on the cores free; the per-turn read cap
/// itself is tested in `io::media`.)
#[test]
fn a_flood_at_the_relay_socket_holds_no_timer() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let relay = udp();
    let to = relay.local_addr().unwrap();
    let s = proxy("flood", media_settings(to, 200, RelayFailure::Refuse));
    let srv = s.handle.local_addr();
    // The media thread pings every relay at once, from its own socket.
    let mut b = [0u8; 2048];
    let media_socket = loop {
        let (n, from) = relay.recv_from(&mut b).expect("a ping in time");
        if String::from_utf8_lossy(&b[..n]).contains("4:ping") {
            break from;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flooders: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                // Batches of datagrams per system call (sendmmsg), so
                // that the flood outruns a reader paying one per datagram.
                let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                let mut batch = sip_udp::SendBatch::default();
                let until = Instant::now() + Duration::from_secs(30);
                let mut sent = 0u64;
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    for _ in 0..sip_udp::BATCH {
                        batch.next_buf().extend_from_slice(b"c d6:result2:oke");
                        batch.commit(media_socket);
                    }
                    batch.flush(&s);
                    sent += sip_udp::BATCH as u64;
                }
                sent
            })
        })
        .collect();
    let (alice, bob) = (udp(), udp());
    register(srv, &bob, "bob");
    let asked = Instant::now();
    let inv = invite(&alice, "flooded@sipsec.test", &sdp("127.0.0.1", 10000));
    alice.send_to(inv.as_bytes(), srv).unwrap();
    let answer = recv_sip(&alice);
    let waited = asked.elapsed();
    stop.store(true, Ordering::Relaxed);
    let sent: u64 = flooders.into_iter().map(|f| f.join().unwrap()).sum();
    assert!(answer.starts_with("SIP/2.0 503 "), "{answer}");
    assert!(waited < Duration::from_secs(10), "answered, not hung");
    let http = s.handle.http_addr().expect("operator endpoint");
    let metrics = http_get(http, "/metrics");
    let refused: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("sipsec_media_answers_refused_total "))
        .and_then(|n| n.trim().parse().ok())
        .expect("the refused count");
    assert!(
        refused > 0 && refused <= sent,
        "{refused} of {sent} refused"
    );
}

/// `mode = "nat"`: a caller whose SDP names an address it cannot be
/// reached at (a private one, behind NAT) has its call relayed, and the
/// relay sends the callee's media to where the caller's messages come
/// from; a caller whose SDP is its own address is not relayed.
#[test]
fn a_caller_behind_nat_gets_media_through_the_relay_in_nat_mode() {
    let engine = Rtpengine::start();
    let s = proxy(
        "nat",
        MediaSettings {
            mode: MediaMode::Nat,
            ..media_settings(engine.ng, 1000, RelayFailure::Refuse)
        },
    );
    let srv = s.handle.local_addr();
    let (alice, bob) = (udp(), udp());
    let (alice_rtp, bob_rtp) = (udp(), udp());
    register(srv, &bob, "bob");
    // The caller's SDP names 192.0.2.55 (unreachable); its media comes
    // from 127.0.0.1, the port it named.
    let alice_port = alice_rtp.local_addr().unwrap().port();
    let call = "natted@sipsec.test";
    let offer = sdp("192.0.2.55", alice_port);
    let (to_bob_inv, ok) = answered(srv, (&alice, &bob), &bob_rtp, call, &offer);
    assert!(!body(&to_bob_inv).contains("192.0.2.55"), "{to_bob_inv}");
    let (_, to_bob) = relayed(body(&to_bob_inv));
    let (_, to_alice) = relayed(body(&ok));
    let relay = |port| SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        media_crosses(&bob_rtp, relay(to_bob), &alice_rtp, 0xb1),
        "bob → alice reaches the address alice's messages came from"
    );
    assert!(media_crosses(&alice_rtp, relay(to_alice), &bob_rtp, 0xa2));
    // A caller that is where its SDP says is not relayed.
    let direct = sdp("127.0.0.1", 40_100);
    let inv = invite(&alice, "direct@sipsec.test", &direct);
    alice.send_to(inv.as_bytes(), srv).unwrap();
    let forwarded = recv_sip(&bob);
    assert_eq!(body(&forwarded), direct, "not relayed");
}

/// A caller whose session-level address is its own names a third party
/// (127.0.0.5) for its media stream: the relay still sends the callee's
/// media to where the caller's messages came from, not to the address
/// the description names (before, only the first `c=` line was compared,
/// and the callee's RTP went to the third party).
#[test]
fn a_callers_media_goes_where_its_messages_came_from_not_where_its_sdp_points() {
    let engine = Rtpengine::start();
    let s = proxy(
        "third-party",
        media_settings(engine.ng, 1000, RelayFailure::Refuse),
    );
    let srv = s.handle.local_addr();
    let (alice, bob) = (udp(), udp());
    let (alice_rtp, bob_rtp) = (udp(), udp());
    let port = alice_rtp.local_addr().unwrap().port();
    let victim = UdpSocket::bind(("127.0.0.5", port)).expect("a third party on alice's port");
    register(srv, &bob, "bob");
    let offer = sdp("127.0.0.1", port).replacen(
        " RTP/AVP 0 8\r\n",
        " RTP/AVP 0 8\r\nc=IN IP4 127.0.0.5\r\n",
        1,
    );
    let call = "third-party@sipsec.test";
    let (to_bob_inv, _) = answered(srv, (&alice, &bob), &bob_rtp, call, &offer);
    let (_, to_bob) = relayed(body(&to_bob_inv));
    let relay = SocketAddr::from(([127, 0, 0, 1], to_bob));
    assert!(
        media_crosses(&bob_rtp, relay, &alice_rtp, 0xb3),
        "bob → alice reaches the address alice's messages came from"
    );
    victim.set_nonblocking(true).expect("nonblocking");
    let mut b = [0u8; 2048];
    assert!(
        victim.recv(&mut b).is_err(),
        "nothing went to the third party"
    );
}

/// An offer the relay cannot read (not SDP at all) gets a clear outcome:
/// the relay's error, then 488 for the caller (the offer is not
/// acceptable; trying again will not help), counted as a failure; nothing
/// is left waiting.
#[test]
fn an_offer_the_relay_cannot_read_is_refused_not_hung() {
    let engine = Rtpengine::start();
    let s = proxy(
        "bad-sdp",
        media_settings(engine.ng, 1000, RelayFailure::Refuse),
    );
    let srv = s.handle.local_addr();
    let (alice, bob) = (udp(), udp());
    register(srv, &bob, "bob");
    let inv = invite(
        &alice,
        "bad-sdp@sipsec.test",
        "this is not a session description\r\n",
    );
    alice.send_to(inv.as_bytes(), srv).unwrap();
    let refused = recv_sip(&alice);
    assert!(refused.starts_with("SIP/2.0 488 "), "{refused}");
    let table = s.handle.shared().media.as_ref().expect("media on");
    let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(load(&table.counts.failed), 1);
    assert_eq!(load(&table.counts.refused_no_relay), 0);
    assert_eq!(table.sizes(), (0, 0));
}

/// rtpengine stops in the middle of a call: the callee's 200 waits on an
/// answer no relay gives, then goes to the caller unrelayed (the call is
/// up; its media may not be) instead of hanging the transaction; the next
/// call gets 503 with Retry-After.
#[test]
fn a_relay_that_stops_mid_call_hangs_nothing() {
    let engine = Rtpengine::start();
    let s = proxy(
        "stopped",
        media_settings(engine.ng, 300, RelayFailure::Refuse),
    );
    let srv = s.handle.local_addr();
    let (alice, bob) = (udp(), udp());
    register(srv, &bob, "bob");
    let inv = invite(&alice, "stopped@sipsec.test", &sdp("127.0.0.1", 10000));
    alice.send_to(inv.as_bytes(), srv).unwrap();
    let to_bob = recv_sip(&bob);
    assert!(to_bob.starts_with("INVITE "), "{to_bob}");
    drop(engine);
    let bob_sdp = sdp("127.0.0.1", 10002);
    let ok = answer(&to_bob, "200 OK", &bob_sdp, bob.local_addr().unwrap());
    bob.send_to(ok.as_bytes(), srv).unwrap();
    let ok = recv_sip(&alice);
    assert!(ok.starts_with("SIP/2.0 200 "), "{ok}");
    assert_eq!(body(&ok), bob_sdp, "passed on unrelayed");
    let next = invite(&alice, "after-stop@sipsec.test", &sdp("127.0.0.1", 40004));
    alice.send_to(next.as_bytes(), srv).unwrap();
    let refused = recv_sip(&alice);
    assert!(refused.starts_with("SIP/2.0 503 "), "{refused}");
    let table = s.handle.shared().media.as_ref().expect("media on");
    let unrelayed = table
        .counts
        .passed_unrelayed
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(unrelayed, 1);
}

/// A call the callee refuses (486) leaves nothing in the relay.
#[test]
fn a_refused_call_leaves_nothing_in_the_relay() {
    let engine = Rtpengine::start();
    let s = proxy(
        "busy",
        media_settings(engine.ng, 1000, RelayFailure::Refuse),
    );
    let srv = s.handle.local_addr();
    let (alice, bob) = (udp(), udp());
    register(srv, &bob, "bob");
    let call = "busy-call@sipsec.test";
    let inv = invite(&alice, call, &sdp("127.0.0.1", 10000));
    alice.send_to(inv.as_bytes(), srv).unwrap();
    let to_bob = recv_sip(&bob);
    let busy = answer(&to_bob, "486 Busy Here", "", bob.local_addr().unwrap());
    bob.send_to(busy.as_bytes(), srv).unwrap();
    assert!(recv_sip(&alice).starts_with("SIP/2.0 486 "));
    assert!(gone_from(&engine, call));
}

/// A call refused because its caller holds its whole share of the calls
/// (here one) is refused before its offer reaches the relay, however
/// often it is sent, and the caller's call under way keeps its session.
#[test]
fn a_call_over_its_callers_share_leaves_nothing_in_the_relay() {
    let engine = Rtpengine::start();
    let mut config = proxy_config(media_settings(engine.ng, 1000, RelayFailure::Refuse));
    // Loopback held to the guard's limits: the caller's address is its
    // share's.
    config.guard.exempt_loopback = false;
    config.calls.max_dialogs_per_caller = Some(1);
    let s = Served::start("media-share", config).expect("server starts");
    let srv = s.handle.local_addr();
    let (alice, bob) = (udp(), udp());
    register(srv, &bob, "bob");
    let first = "share-first@sipsec.test";
    ringing(srv, &alice, &bob, first);
    let second = "share-second@sipsec.test";
    let inv = invite(&alice, second, &sdp("127.0.0.1", 10002)).replace("alice-tag", "alice-2");
    alice.send_to(inv.as_bytes(), srv).unwrap();
    for _ in 0..3 {
        let refused = recv_sip(&alice);
        assert!(
            refused.starts_with("SIP/2.0 403 ") && refused.contains("for this caller"),
            "{refused}"
        );
        // Sent again, as a phone that took no answer would.
        alice.send_to(inv.as_bytes(), srv).unwrap();
    }
    assert!(recv_sip(&alice).starts_with("SIP/2.0 403 "));
    let table = s.handle.shared().media.as_ref().expect("media on");
    let counted = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        (
            counted(&table.counts.offers),
            counted(&table.counts.deletes)
        ),
        (1, 0),
        "only the first call's offer reached the relay"
    );
    assert!(gone_from(&engine, second));
    let mut relays = Relays::open(
        settings(&[(engine.ng, 1)], 500),
        "127.0.0.1:0".parse().unwrap(),
    )
    .unwrap();
    let q = relays.call(&Command::Query {
        call_id: first.into(),
    });
    assert!(matches!(q, Ok(Reply::Ok { .. })), "{q:?}");
}

/// A re-INVITE in a relayed call (here from the callee) is relayed too:
/// the caller is offered the relay's port, not the callee's new one.
#[test]
fn a_re_invite_in_a_relayed_call_is_relayed() {
    let engine = Rtpengine::start();
    let s = proxy(
        "reinvite",
        media_settings(engine.ng, 1000, RelayFailure::Refuse),
    );
    let srv = s.handle.local_addr();
    let (alice, bob) = (udp(), udp());
    register(srv, &bob, "bob");
    let call = "reinvite@sipsec.test";
    alice
        .send_to(
            invite(&alice, call, &sdp("127.0.0.1", 10000)).as_bytes(),
            srv,
        )
        .unwrap();
    let to_bob = recv_sip(&bob);
    let ok = answer(
        &to_bob,
        "200 OK",
        &sdp("127.0.0.1", 10002),
        bob.local_addr().unwrap(),
    );
    bob.send_to(ok.as_bytes(), srv).unwrap();
    assert!(recv_sip(&alice).starts_with("SIP/2.0 200 "));
    // Bob's re-INVITE follows the route recorded, in reverse.
    let route = header(&to_bob, "Record-Route").to_owned();
    let (me, to) = (bob.local_addr().unwrap(), alice.local_addr().unwrap());
    let offer = sdp("127.0.0.1", 40010);
    let reinvite = format!(
        "INVITE sip:alice@{to} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-reinv;rport\r\n\
         Route: {route}\r\nMax-Forwards: 70\r\nFrom: <sip:bob@localhost>;tag=bob-tag\r\n\
         To: <sip:alice@localhost>;tag=alice-tag\r\nCall-ID: {call}\r\nCSeq: 7 INVITE\r\n\
         Contact: <sip:bob@{me}>\r\nContent-Type: application/sdp\r\n\
         Content-Length: {}\r\n\r\n{offer}",
        offer.len()
    );
    bob.send_to(reinvite.as_bytes(), srv).unwrap();
    let got = recv_sip(&alice);
    assert!(got.starts_with("INVITE "), "{got}");
    let (_, port) = relayed(body(&got));
    assert_ne!(port, 40010, "the relay's port: {got}");
    let table = s.handle.shared().media.as_ref().expect("media on");
    let offers = table
        .counts
        .offers
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(offers, 2);
}

/// A phone that offers SDES-SRTP keeps it through the relay: the callee
/// is offered `RTP/SAVP` with keys (rtpengine passes the caller's on, so
/// the SRTP stays end to end), and the caller's answer is `RTP/SAVP`
/// too; relaying never downgrades a call to plain RTP.
#[test]
fn an_srtp_call_stays_srtp_through_the_relay() {
    let engine = Rtpengine::start();
    let s = proxy(
        "sdes",
        media_settings(engine.ng, 1000, RelayFailure::Refuse),
    );
    let srv = s.handle.local_addr();
    let (alice, bob) = (udp(), udp());
    register(srv, &bob, "bob");
    let secure = |port: u16| {
        sdp("127.0.0.1", port).replace("RTP/AVP", "RTP/SAVP")
            + "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR\r\n"
    };
    let inv = invite(&alice, "sdes@sipsec.test", &secure(10000));
    alice.send_to(inv.as_bytes(), srv).unwrap();
    let to_bob = recv_sip(&bob);
    let offered = body(&to_bob);
    assert!(offered.contains(" RTP/SAVP "), "{offered}");
    assert!(offered.contains("a=crypto:"), "{offered}");
    let ok = answer(&to_bob, "200 OK", &secure(10002), bob.local_addr().unwrap());
    bob.send_to(ok.as_bytes(), srv).unwrap();
    let ok = recv_sip(&alice);
    assert!(ok.starts_with("SIP/2.0 200 "), "{ok}");
    assert!(body(&ok).contains(" RTP/SAVP "), "{ok}");
    assert!(body(&ok).contains("a=crypto:"), "{ok}");
}
