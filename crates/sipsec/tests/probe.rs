//! What a probe sweep found an unauthenticated peer could make `sipsec
//! serve` do, each a regression test: forged responses relayed to any
//! address, requests relayed by a registrar, logins flooding the replay
//! tracker, unbounded bindings and UDP amplification. Real binary, real
//! loopback sockets; every wait is for an answer or a counter.

mod common;

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use common::{banner_http_addr, http_get, tempdir, Running};

fn metric(r: &Running, line_start: &str) -> u64 {
    let http = banner_http_addr(&r.banner).expect("http address in the banner");
    http_get(&http.to_string(), "/metrics")
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// `sipsec serve` on ephemeral ports with one worker, so the datagrams
/// of one socket are handled in the order sent.
fn start(data: &Path, extra: &[&str]) -> Running {
    common::serve_workers(data, "1", extra)
}

/// A raw SIP peer on its own UDP socket.
struct Peer {
    sock: UdpSocket,
}

impl Peer {
    fn new() -> Self {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("socket");
        sock.set_read_timeout(Some(Duration::from_secs(3)))
            .expect("timeout");
        Self { sock }
    }
    fn addr(&self) -> SocketAddr {
        self.sock.local_addr().expect("bound")
    }
    fn send(&self, to: SocketAddr, msg: &str) {
        self.sock.send_to(msg.as_bytes(), to).expect("send");
    }
    fn recv(&self) -> Option<String> {
        let mut buf = vec![0u8; 65_535];
        let (n, _) = self.sock.recv_from(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }
    /// The next message that is not a 100 Trying.
    fn next(&self) -> Option<String> {
        loop {
            let m = self.recv()?;
            if !m.starts_with("SIP/2.0 100") {
                return Some(m);
            }
        }
    }
    /// An OPTIONS answered: every datagram sent before it from this
    /// socket has been handled (one worker reads them in order).
    fn sync(&self, server: SocketAddr) {
        static SYNCS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SYNCS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.send(
            server,
            &format!(
                "OPTIONS sip:{server} SIP/2.0\r\nVia: SIP/2.0/UDP {me};rport;branch=z9hG4bKsync{n}\r\nMax-Forwards: 70\r\nFrom: <sip:probe@{server}>;tag=s\r\nTo: <sip:{server}>\r\nCall-ID: sync-{n}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
                me = self.addr()
            ),
        );
        let r = self.next().expect("OPTIONS answered");
        assert!(r.starts_with("SIP/2.0 "), "{r}");
    }
}

/// Listeners that must see nothing: a TCP one (the server must not
/// connect) and a UDP one (it must not send a datagram).
struct Traps {
    tcp: TcpListener,
    udp: UdpSocket,
}

impl Traps {
    fn new() -> Self {
        let tcp = TcpListener::bind("127.0.0.1:0").expect("tcp trap");
        tcp.set_nonblocking(true).expect("nonblocking");
        let udp = UdpSocket::bind("127.0.0.1:0").expect("udp trap");
        udp.set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        Self { tcp, udp }
    }
    fn tcp_port(&self) -> u16 {
        self.tcp.local_addr().expect("bound").port()
    }
    fn udp_port(&self) -> u16 {
        self.udp.local_addr().expect("bound").port()
    }
    /// Nothing arrives within a second after the server has handled
    /// what it was sent (the caller synced first).
    fn assert_untouched(&self, what: &str) {
        let until = Instant::now() + Duration::from_secs(1);
        let mut buf = [0u8; 2048];
        while Instant::now() < until {
            if let Ok((_, from)) = self.tcp.accept() {
                panic!("{what}: the server connected to the TCP trap from {from}");
            }
            if let Ok((n, from)) = self.udp.recv_from(&mut buf) {
                panic!(
                    "{what}: the server sent the UDP trap {n} bytes from {from}: {}",
                    String::from_utf8_lossy(&buf[..n])
                );
            }
        }
    }
}

/// A response shaped to reach `target`: the top Via names the server,
/// the second the target; the body is what a password-less Redis would
/// run.
fn forged_response(server: SocketAddr, second_via: &str, branch: &str) -> String {
    let body = "SET pwned 1\r\n";
    format!(
        "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP {server};branch={branch}\r\nVia: {second_via};branch=z9hG4bKvictim\r\nFrom: <sip:a@x>;tag=1\r\nTo: <sip:b@x>;tag=2\r\nCall-ID: forged\r\nCSeq: 1 INVITE\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The severe defect: one unauthenticated datagram shaped as a response
/// (top Via naming the server, a second naming any TCP or UDP service)
/// made the server connect there and write the body, in every mode. Now
/// a response is relayed only when it answers a request this server
/// forwarded: a registrar and a redirect server relay none, a stateful
/// proxy needs its transaction, a stateless one a branch whose tag it
/// can verify for the address the response goes to.
#[test]
fn a_forged_response_is_relayed_nowhere_in_any_mode() {
    let dir = tempdir("probe-forged");
    let modes: [(&str, &[&str]); 4] = [
        ("registrar", &["--mode", "registrar"]),
        ("redirect", &["--mode", "redirect"]),
        ("stateless proxy", &["--mode", "proxy"]),
        ("stateful proxy", &["--mode", "proxy", "--stateful"]),
    ];
    for (i, (name, args)) in modes.iter().enumerate() {
        let srv = start(&dir.join(format!("data-{i}")), args);
        let traps = Traps::new();
        let attacker = Peer::new();
        let vias = [
            format!("SIP/2.0/TCP 127.0.0.1:{}", traps.tcp_port()),
            format!("SIP/2.0/UDP 127.0.0.1:{}", traps.udp_port()),
            format!("SIP/2.0/UDP 127.0.0.1:{};rport", traps.udp_port()),
        ];
        // Branches of every shape: plain, this server's prefix with an
        // untagged or a guessed tag.
        let branches = [
            "z9hG4bKforged",
            "z9hG4bKsps0000000000000001",
            "z9hG4bKsps00000000000000010000000000000001",
        ];
        let mut sent = 0;
        for via in &vias {
            for branch in branches {
                attacker.send(srv.addr, &forged_response(srv.addr, via, branch));
                sent += 1;
            }
        }
        attacker.sync(srv.addr);
        assert_eq!(
            metric(&srv, "sipsec_responses_unproven_total"),
            sent,
            "{name}: every forged response dropped and counted"
        );
        traps.assert_untouched(name);
    }
}

/// A stateless proxy still relays the responses to what it forwarded,
/// and only to where the request came from: the callee changing the
/// caller's Via to aim the response elsewhere gets it dropped.
#[test]
fn a_stateless_proxy_relays_only_answers_to_what_it_forwarded() {
    let dir = tempdir("probe-stateless");
    let srv = start(&dir.join("data"), &["--mode", "proxy"]);
    let (alice, bob) = (Peer::new(), Peer::new());
    let s = srv.addr;
    bob.send(
        s,
        &format!(
            "REGISTER sip:{s} SIP/2.0\r\nVia: SIP/2.0/UDP {b};rport;branch=z9hG4bKr1\r\nMax-Forwards: 70\r\nFrom: <sip:bob@{s}>;tag=r\r\nTo: <sip:bob@{s}>\r\nCall-ID: reg-bob\r\nCSeq: 1 REGISTER\r\nContact: <sip:bob@{b}>\r\nContent-Length: 0\r\n\r\n",
            b = bob.addr()
        ),
    );
    assert!(bob.next().expect("answer").starts_with("SIP/2.0 200"));
    let invite = |branch: &str| {
        format!(
            "INVITE sip:bob@{s} SIP/2.0\r\nVia: SIP/2.0/UDP {a};rport;branch={branch}\r\nMax-Forwards: 70\r\nFrom: <sip:alice@{s}>;tag=a\r\nTo: <sip:bob@{s}>\r\nCall-ID: call-{branch}\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@{a}>\r\nContent-Length: 0\r\n\r\n",
            a = alice.addr()
        )
    };
    let traps = Traps::new();
    for (branch, aim) in [("z9hG4bKc1", None), ("z9hG4bKc2", Some(traps.udp_port()))] {
        alice.send(s, &invite(branch));
        let forwarded = bob.next().expect("INVITE forwarded to bob");
        assert!(forwarded.starts_with("INVITE "), "{forwarded}");
        // Bob answers with the Vias he got, in order.
        let vias: Vec<String> = forwarded
            .lines()
            .filter(|l| l.starts_with("Via:"))
            .map(|l| match aim {
                Some(port) if l.contains(branch) => l.replace(
                    &format!("rport={}", alice.addr().port()),
                    &format!("rport={port}"),
                ),
                _ => l.to_owned(),
            })
            .collect();
        let ringing = format!(
            "SIP/2.0 180 Ringing\r\n{}\r\nFrom: <sip:alice@{s}>;tag=a\r\nTo: <sip:bob@{s}>;tag=b\r\nCall-ID: call-{branch}\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n",
            vias.join("\r\n")
        );
        bob.send(s, &ringing);
        match aim {
            None => {
                let r = alice.next().expect("180 relayed to alice");
                assert!(r.starts_with("SIP/2.0 180"), "{r}");
            }
            Some(_) => {
                bob.sync(s);
                assert_eq!(metric(&srv, "sipsec_responses_unproven_total"), 1);
                traps.assert_untouched("a response re-aimed by the callee");
            }
        }
    }
}

/// A registrar and a redirect server forward no request either, and a
/// proxy follows no preloaded Route on an initial request: a Route
/// naming another address (here a TCP service) is refused with 403, not
/// followed.
#[test]
fn a_preloaded_route_is_refused_in_every_mode() {
    let dir = tempdir("probe-route");
    for (i, mode) in ["registrar", "redirect", "proxy"].iter().enumerate() {
        let srv = start(&dir.join(format!("data-{i}")), &["--mode", mode]);
        let traps = Traps::new();
        let p = Peer::new();
        let s = srv.addr;
        p.send(
            s,
            &format!(
                "MESSAGE sip:x@{s} SIP/2.0\r\nVia: SIP/2.0/UDP {me};rport;branch=z9hG4bKm1\r\nRoute: <sip:127.0.0.1:{t};transport=tcp;lr>\r\nMax-Forwards: 70\r\nFrom: <sip:a@{s}>;tag=a\r\nTo: <sip:x@{s}>\r\nCall-ID: route-1\r\nCSeq: 1 MESSAGE\r\nContent-Length: 13\r\n\r\nSET pwned 1\r\n",
                me = p.addr(),
                t = traps.tcp_port()
            ),
        );
        let r = p.next().expect("answer");
        assert!(r.starts_with("SIP/2.0 403"), "{mode}: {r}");
        traps.assert_untouched(mode);
    }
}

/// A proxy forwarded a request with a Route naming it to whatever its
/// Request-URI (or a second Route) named, as RFC 3261 §16.12 says for a
/// dialog's requests: any peer, `--auth` or not, could have an INVITE or
/// a BYE sent to an address of its choosing. Now the next hop must be one
/// the proxy's own Record-Route proves (the addresses the dialog's
/// INVITE came from and went to), else 403.
#[test]
fn a_forged_in_dialog_request_is_relayed_nowhere() {
    let dir = tempdir("probe-in-dialog");
    let users = dir.join("users.tsv");
    common::import_users("alice,secret\n", &dir, &users);
    let users = users.to_str().expect("utf-8");
    for (i, extra) in [&[][..], &["--stateful"][..]].iter().enumerate() {
        let args = [&["--mode", "proxy", "--auth", "--users", users][..], extra].concat();
        let srv = start(&dir.join(format!("data-{i}")), &args);
        let traps = Traps::new();
        let p = Peer::new();
        let s = srv.addr;
        let udp_trap = format!("sip:victim@127.0.0.1:{}", traps.udp_port());
        let tcp_trap = format!("<sip:127.0.0.1:{};transport=tcp;lr>", traps.tcp_port());
        let ours = format!("<sip:{s};lr>");
        let forged_proof = format!("<sip:{s};hops={};lr>", "0".repeat(32));
        let cases = [
            ("INVITE", udp_trap.as_str(), ours.as_str(), ";tag=b"),
            ("BYE", udp_trap.as_str(), ours.as_str(), ""),
            ("BYE", udp_trap.as_str(), forged_proof.as_str(), ";tag=b"),
            ("MESSAGE", "sip:x@example.com", tcp_trap.as_str(), ";tag=b"),
        ];
        for (n, (method, target, route, to_tag)) in cases.iter().enumerate() {
            p.send(
                s,
                &format!(
                    "{method} {target} SIP/2.0\r\nVia: SIP/2.0/UDP {me};rport;branch=z9hG4bKd{n}\r\nRoute: {route}\r\nMax-Forwards: 70\r\nFrom: <sip:a@example.com>;tag=a\r\nTo: <sip:x@example.com>{to_tag}\r\nCall-ID: dialog-{n}\r\nCSeq: 2 {method}\r\nContact: <sip:a@{me}>\r\nContent-Length: 0\r\n\r\n",
                    me = p.addr()
                ),
            );
            let r = p.next().expect("answer");
            assert!(
                r.starts_with("SIP/2.0 403"),
                "{extra:?} {method} {route}: {r}"
            );
        }
        traps.assert_untouched("in-dialog");
        assert_eq!(metric(&srv, "sipsec_in_dialog_routes_unproven_total"), 4);
    }
}

/// A REGISTER from `ua` for `user` with `contacts` (whole header lines).
fn register_text(
    ua: &Peer,
    server: SocketAddr,
    user: &str,
    call_id: &str,
    contacts: &str,
) -> String {
    format!(
        "REGISTER sip:{server} SIP/2.0\r\nVia: SIP/2.0/UDP {me};rport;branch=z9hG4bK{call_id}\r\nMax-Forwards: 70\r\nFrom: <sip:{user}@{server}>;tag=r\r\nTo: <sip:{user}@{server}>\r\nCall-ID: {call_id}\r\nCSeq: 1 REGISTER\r\n{contacts}Content-Length: 0\r\n\r\n",
        me = ua.addr()
    )
}

fn status_of(r: &str) -> u16 {
    r.get(8..11).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// An unauthenticated registrar stored whatever it was sent: 600,000 AoRs
/// took 554 MB, 7.9 kB contacts 258 MB in 2.5 s. Now a binding stores at
/// most `max_contact_len` bytes of contact (403 above), the registrar at
/// most `max_bindings` bindings (503 with a Warning past it, refreshes and
/// removals still served), and the journal takes at most its byte rate
/// (503 Retry-After past it).
#[test]
fn an_unauthenticated_registrar_stores_bounded_bindings() {
    let dir = tempdir("probe-bounds");
    let config = dir.join("sipsec.toml");
    std::fs::write(
        &config,
        "[registrar]\nmax_bindings = 20\nmax_contact_len = 200\njournal_rate = 1\njournal_burst = 8000\n",
    )
    .expect("config");
    let srv = start(
        &dir.join("data"),
        &["--config", config.to_str().expect("utf-8")],
    );
    let (s, ua) = (srv.addr, Peer::new());
    let register = |user: &str, call_id: &str, contact: &str| {
        ua.send(
            s,
            &register_text(&ua, s, user, call_id, &format!("Contact: <{contact}>\r\n")),
        );
        let r = ua.next().expect("answer");
        (status_of(&r), r)
    };
    let long = format!("sip:{}@192.0.2.1", "x".repeat(300));
    let (code, r) = register("big", "big-1", &long);
    assert_eq!(code, 403, "{r}");
    assert!(r.contains("longer than 200 bytes"), "{r}");
    let mut first_full = None;
    for i in 0..30 {
        let (code, r) = register(
            &format!("u{i}"),
            &format!("fill-{i}"),
            &format!("sip:u{i}@192.0.2.1"),
        );
        match code {
            200 => {}
            503 if first_full.is_none() => {
                assert!(r.contains("most bindings (20)"), "{r}");
                first_full = Some(i);
            }
            503 => {}
            _ => panic!("{r}"),
        }
    }
    assert_eq!(first_full, Some(20), "the 21st binding is refused");
    assert_eq!(metric(&srv, "sipsec_registrar_full_total"), 10);
    // A binding held is still refreshed and removed.
    let (code, r) = register("u3", "fill-3", "sip:u3@192.0.2.1");
    assert_eq!(code, 200, "{r}");
    // The journal's burst is spent (20 records of about 150 bytes, then
    // the refusals): a change now waits for the byte rate.
    let mut throttled = 0;
    for _ in 0..60 {
        let (code, r) = register("u3", "fill-3", "sip:u3@192.0.2.1");
        match code {
            200 => {}
            503 => {
                assert!(r.contains("Retry-After"), "{r}");
                throttled += 1;
            }
            _ => panic!("{r}"),
        }
    }
    assert!(throttled > 0, "the journal's rate bounds changes");
    assert_eq!(metric(&srv, "sipsec_journal_throttled_total"), throttled);
}

/// Seven long contacts on an AoR made a 241-byte query answered with
/// 55,880 bytes (232×) to any spoofed source. Now an answer over UDP to a
/// source without credentials is at most three times the request, the
/// contacts it named first, with a Warning naming what was left out; over
/// TCP the whole list comes back.
#[test]
fn a_registrar_query_over_udp_amplifies_at_most_three_times() {
    let dir = tempdir("probe-amplify");
    let srv = start(&dir.join("data"), &[]);
    let (s, ua) = (srv.addr, Peer::new());
    for i in 0..7 {
        let contact = format!("sip:{}{i}@192.0.2.1", "c".repeat(480));
        ua.send(
            s,
            &register_text(
                &ua,
                s,
                "amp",
                &format!("amp-{i}"),
                &format!("Contact: <{contact}>\r\n"),
            ),
        );
        let r = ua.next().expect("answer");
        assert_eq!(status_of(&r), 200, "{r}");
        assert!(
            r.len()
                <= 3 * register_text(
                    &ua,
                    s,
                    "amp",
                    &format!("amp-{i}"),
                    &format!("Contact: <{contact}>\r\n")
                )
                .len(),
            "{} bytes",
            r.len()
        );
    }
    let query = register_text(&ua, s, "amp", "query", "");
    ua.send(s, &query);
    let r = ua.next().expect("answer");
    assert_eq!(status_of(&r), 200, "{r}");
    assert!(
        r.len() <= 3 * query.len(),
        "{} bytes answered to a {}-byte query",
        r.len(),
        query.len()
    );
    assert!(r.contains("not listed over UDP"), "{r}");
    assert!(metric(&srv, "sipsec_udp_listings_cut_total") >= 1);
    // Over TCP the source is proven: the whole list.
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(s).expect("tcp");
    tcp.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let me = tcp.local_addr().expect("bound");
    let q = format!(
        "REGISTER sip:{s} SIP/2.0\r\nVia: SIP/2.0/TCP {me};branch=z9hG4bKtcpq\r\nMax-Forwards: 70\r\nFrom: <sip:amp@{s}>;tag=r\r\nTo: <sip:amp@{s}>\r\nCall-ID: tcp-query\r\nCSeq: 1 REGISTER\r\nContent-Length: 0\r\n\r\n"
    );
    tcp.write_all(q.as_bytes()).expect("send");
    let mut got = Vec::new();
    let mut buf = [0u8; 65_536];
    while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
        let n = tcp.read(&mut buf).expect("read");
        assert!(n > 0, "closed");
        got.extend_from_slice(&buf[..n]);
    }
    let r = String::from_utf8_lossy(&got);
    assert_eq!(r.matches("Contact: ").count(), 7, "{r}");
}

/// Without authentication SIP listens only on loopback unless the
/// operator says, loudly, that an open registrar is meant.
#[test]
fn an_open_registrar_beyond_loopback_is_an_explicit_opt_in() {
    let dir = tempdir("probe-open");
    let check = |extra: &[&str]| {
        std::process::Command::new(common::BIN)
            .args(["serve", "--check", "--udp", "0.0.0.0:5060"])
            .args(["--advertise", "192.0.2.1:5060", "--data-dir"])
            .arg(dir.join("data"))
            .args(extra)
            .output()
            .expect("runs")
    };
    let out = check(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("without authentication") && err.contains("--insecure-no-auth"),
        "{err}"
    );
    let out = check(&["--insecure-no-auth"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
}
