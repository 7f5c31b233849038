//! The server over real loopback UDP sockets.

#[path = "support/scratch.rs"]
mod scratch;
use scratch::Scratch;

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::time::Duration;

use sip_core::auth::Challenge;
use sip_core::digest::{self, Algorithm, Qop, ResponseInput};
use sip_core::{HeaderName, Message, Method, StatusCode};
use sipsec_server::proto::users::{UserEntry, Users};
use sipsec_server::{start, Config, Mode, Started};

fn tempdir(name: &str) -> Scratch {
    Scratch::new(&format!("test-{name}"))
}

/// A proxy on ephemeral loopback ports (UDP only, no HTTP) storing in `dir`.
fn loopback_proxy(dir: &Path) -> Config {
    Config {
        mode: Mode::Proxy,
        udp: "127.0.0.1:0".parse().expect("addr"),
        tcp: None,
        http: None,
        advertise: "127.0.0.1:0".parse().expect("addr"),
        workers: 1,
        data_dir: dir.join("data"),
        ..Config::default()
    }
}

fn server(mode: Mode, auth: bool, dir: &Path) -> Started {
    let users = dir.join("users.tsv");
    if auth {
        let mut u = Users::default();
        for (n, p) in [("alice", "wonderland"), ("bob", "builder")] {
            u.insert(n, "sipsec", UserEntry::from_password(n, "sipsec", p))
                .expect("user");
        }
        sipsec_server::io::users_file::save(&u, &users).expect("save users");
    }
    start(Config {
        mode,
        auth,
        udp: "127.0.0.1:0".parse().expect("addr"),
        tcp: Some("127.0.0.1:0".parse().expect("addr")),
        http: Some("127.0.0.1:0".parse().expect("addr")),
        advertise: "127.0.0.1:0".parse().expect("addr"),
        workers: 2,
        users,
        data_dir: dir.join("data"),
        ..Config::default()
    })
    .expect("server starts")
}

struct Ua {
    sock: UdpSocket,
    server: SocketAddr,
}

impl Ua {
    fn new(server: SocketAddr) -> Self {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("ua socket");
        sock.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        Self { sock, server }
    }
    fn port(&self) -> u16 {
        self.sock.local_addr().expect("bound").port()
    }
    fn send(&self, msg: &str, to: SocketAddr) {
        self.sock.send_to(msg.as_bytes(), to).expect("send");
    }
    fn recv(&self) -> (String, SocketAddr) {
        let mut buf = vec![0u8; 65_535];
        let (n, from) = self.sock.recv_from(&mut buf).expect("a message arrives");
        (String::from_utf8(buf[..n].to_vec()).expect("utf-8"), from)
    }
    fn ask(&self, msg: &str) -> String {
        self.send(msg, self.server);
        self.recv().0
    }
    fn register(&self, user: &str, call_id: &str, cseq: u32, contact: &str, extra: &str) -> String {
        self.ask(&format!(
            "REGISTER sip:{srv} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{p};branch=z9hG4bK{call_id}{cseq};rport\r\nMax-Forwards: 70\r\nFrom: <sip:{user}@{srv}>;tag=f{cseq}\r\nTo: <sip:{user}@{srv}>\r\nCall-ID: {call_id}\r\nCSeq: {cseq} REGISTER\r\nContact: {contact}\r\n{extra}Content-Length: 0\r\n\r\n",
            srv = self.server,
            p = self.port(),
        ))
    }
}

fn status(resp: &str) -> u16 {
    Message::parse(resp.as_bytes())
        .expect("response parses")
        .status()
        .expect("response")
        .as_u16()
}

#[test]
fn register_refresh_logout_and_limits() {
    let dir = tempdir("reg");
    let s = server(Mode::Registrar, false, &dir);
    let ua = Ua::new(s.handle.local_addr());
    let c1 = format!("<sip:alice@127.0.0.1:{}>", ua.port());
    let r = ua.register("alice", "r1", 1, &c1, "Expires: 600\r\n");
    assert_eq!(status(&r), 200, "{r}");
    let m = Message::parse(r.as_bytes()).expect("parses");
    let c = m.contacts().next().expect("binding listed");
    assert_eq!(c.expires, Some(600));
    let r = ua.register(
        "alice",
        "r2",
        1,
        "<sip:alice@192.0.2.9:5070>;q=0.5;expires=300",
        "",
    );
    assert_eq!(
        Message::parse(r.as_bytes())
            .expect("parses")
            .contact_count(),
        2
    );
    assert_eq!(
        status(&ua.register("alice", "r1", 1, &c1, "")),
        200,
        "a retransmission (same Call-ID and CSeq) gets the same answer"
    );
    assert_eq!(status(&ua.register("alice", "r1", 5, &c1, "")), 200);
    assert_eq!(
        status(&ua.register("alice", "r1", 4, &c1, "")),
        500,
        "a lower CSeq for the same Call-ID is stale"
    );
    let r = ua.register("alice", "r3", 1, "<sip:alice@192.0.2.10>;expires=10", "");
    assert_eq!(status(&r), 423);
    assert!(r.contains("Min-Expires: 60\r\n"), "{r}");
    let r = ua.register("alice", "r1", 6, &format!("{c1};expires=0"), "");
    assert_eq!(
        Message::parse(r.as_bytes())
            .expect("parses")
            .contact_count(),
        1,
        "{r}"
    );
    assert_eq!(
        status(&ua.register("alice", "r9", 1, "*", "")),
        400,
        "* needs Expires: 0"
    );
    let r = ua.register("alice", "r9", 1, "*", "Expires: 0\r\n");
    assert_eq!(status(&r), 200);
    assert_eq!(
        Message::parse(r.as_bytes())
            .expect("parses")
            .contact_count(),
        0
    );
    assert_eq!(
        s.handle
            .shared()
            .location
            .len(sipsec_server::io::clock::unix_now()),
        0
    );
    s.handle.shutdown();
}

fn authorization(
    challenge: &str,
    user: &str,
    password: &str,
    method: &str,
    uri: &str,
    nc: u32,
    header: &str,
) -> String {
    let c = Challenge::parse(challenge).expect("challenge parses");
    let alg = Algorithm::from_token(c.algorithm.unwrap_or("MD5")).expect("known algorithm");
    let realm = c.realm.expect("realm");
    let nonce = c.nonce.expect("nonce");
    let ha1 = digest::ha1(alg, user, realm, password);
    let nc = format!("{nc:08x}");
    let resp = digest::response(&ResponseInput {
        algorithm: alg,
        ha1: &ha1,
        nonce,
        cnonce: "0a4f113b",
        nc: &nc,
        qop: Some(Qop::Auth),
        method,
        uri,
        body: b"",
    });
    format!(
        "{header}: Digest username=\"{user}\", realm=\"{realm}\", nonce=\"{nonce}\", uri=\"{uri}\", response=\"{resp}\", algorithm={}, qop=auth, nc={nc}, cnonce=\"0a4f113b\"\r\n",
        alg.as_str()
    )
}

/// One REGISTER may bind several contacts, over one Contact field or
/// several (RFC 3261 §10.2.1); each gets its own expiry and they are
/// listed by q. A later REGISTER naming one of them keeps the others.
#[test]
fn one_register_binds_several_contacts() {
    let dir = tempdir("reg-many");
    let s = server(Mode::Registrar, false, &dir);
    let ua = Ua::new(s.handle.local_addr());
    let r = ua.register(
        "carol",
        "m1",
        1,
        "<sip:carol@192.0.2.1>;q=0.2, <sip:carol@192.0.2.2>;expires=120\r\n\
         Contact: <sip:carol@192.0.2.3>;q=0.5",
        "Expires: 600\r\n",
    );
    assert_eq!(status(&r), 200, "{r}");
    let listed = |r: &str| -> Vec<(String, Option<u32>)> {
        let m = Message::parse(r.as_bytes()).expect("parses");
        m.contacts()
            .map(|c| (c.addr.uri().as_str().to_owned(), c.expires))
            .collect()
    };
    let bound = listed(&r);
    let uri =
        |b: &[(String, Option<u32>)]| -> Vec<String> { b.iter().map(|c| c.0.clone()).collect() };
    assert_eq!(
        uri(&bound),
        [
            "sip:carol@192.0.2.2",
            "sip:carol@192.0.2.3",
            "sip:carol@192.0.2.1"
        ],
        "{r}"
    );
    assert_eq!(bound[0].1, Some(120));
    assert_eq!(bound[1].1, Some(600));
    let r = ua.register("carol", "m1", 2, "<sip:carol@192.0.2.3>;expires=0", "");
    assert_eq!(status(&r), 200, "{r}");
    assert_eq!(
        uri(&listed(&r)),
        ["sip:carol@192.0.2.2", "sip:carol@192.0.2.1"],
        "{r}"
    );
}

#[test]
fn digest_registration() {
    let dir = tempdir("auth");
    let s = server(Mode::Registrar, true, &dir);
    let ua = Ua::new(s.handle.local_addr());
    let uri = format!("sip:{}", s.handle.local_addr());
    let contact = "<sip:alice@192.0.2.1>";
    let r = ua.register("alice", "a1", 1, contact, "");
    assert_eq!(status(&r), 401);
    let m = Message::parse(r.as_bytes()).expect("parses");
    let challenges: Vec<_> = m
        .headers_named(HeaderName::WwwAuthenticate)
        .map(|h| h.value.to_owned())
        .collect();
    assert_eq!(challenges.len(), 2);
    assert!(challenges[0].contains("algorithm=SHA-256") && challenges[1].contains("algorithm=MD5"));

    let good = authorization(
        &challenges[0],
        "alice",
        "wonderland",
        "REGISTER",
        &uri,
        1,
        "Authorization",
    );
    assert_eq!(status(&ua.register("alice", "a1", 2, contact, &good)), 200);
    // A retransmission of that very request gets the same answer (UDP
    // loss must not look like an attack)...
    assert_eq!(status(&ua.register("alice", "a1", 2, contact, &good)), 200);
    // ...but the same nonce count on another request is a replay.
    assert_eq!(status(&ua.register("alice", "a1", 3, contact, &good)), 401);
    let next = authorization(
        &challenges[0],
        "alice",
        "wonderland",
        "REGISTER",
        &uri,
        2,
        "Authorization",
    );
    assert_eq!(status(&ua.register("alice", "a1", 4, contact, &next)), 200);
    // Both challenges carry one nonce, so its count goes on rising.
    let md5 = authorization(
        &challenges[1],
        "alice",
        "wonderland",
        "REGISTER",
        &uri,
        3,
        "Authorization",
    );
    assert_eq!(status(&ua.register("alice", "a1", 5, contact, &md5)), 200);

    let wrong = authorization(
        &challenges[0],
        "alice",
        "guess",
        "REGISTER",
        &uri,
        9,
        "Authorization",
    );
    let unknown = authorization(
        &challenges[0],
        "mallory",
        "guess",
        "REGISTER",
        &uri,
        9,
        "Authorization",
    );
    let rw = ua.register("alice", "a2", 1, contact, &wrong);
    let ru = ua.register("mallory", "a3", 1, contact, &unknown);
    assert_eq!(
        (status(&rw), status(&ru)),
        (401, 401),
        "unknown users fail exactly like wrong passwords"
    );
    // Bob's credentials cannot register Alice (fresh challenge: new nonce).
    let r = ua.register("alice", "a4", 1, contact, "");
    let fresh = Message::parse(r.as_bytes())
        .expect("parses")
        .header(HeaderName::WwwAuthenticate)
        .expect("challenge")
        .to_owned();
    assert!(!fresh.contains(
        Challenge::parse(&challenges[0])
            .expect("parses")
            .nonce
            .expect("nonce")
    ));
    let bob = authorization(
        &fresh,
        "bob",
        "builder",
        "REGISTER",
        &uri,
        1,
        "Authorization",
    );
    assert_eq!(status(&ua.register("alice", "a4", 1, contact, &bob)), 403);
    // Credentials computed for another target are refused.
    let r = ua.register("alice", "a6", 1, contact, "");
    let fresh = Message::parse(r.as_bytes())
        .expect("parses")
        .header(HeaderName::WwwAuthenticate)
        .expect("challenge")
        .to_owned();
    let elsewhere = authorization(
        &fresh,
        "alice",
        "wonderland",
        "REGISTER",
        "sip:192.0.2.99",
        1,
        "Authorization",
    );
    assert_eq!(
        status(&ua.register("alice", "a6", 2, contact, &elsewhere)),
        401
    );
    let garbage = "Authorization: Digest username=\"alice\r\n";
    assert_eq!(
        status(&ua.register("alice", "a5", 1, contact, garbage)),
        400
    );
    let stats = &s.handle.shared().metrics;
    let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        load(&stats.auth_failures),
        3,
        "wrong password, unknown user, another target"
    );
    assert_eq!(load(&stats.auth_replays), 1, "the reused count");
    s.handle.shutdown();
}

fn invite(
    from_port: u16,
    server: SocketAddr,
    user: &str,
    branch: &str,
    max_forwards: u8,
    method: &str,
) -> String {
    format!(
        "{method} sip:{user}@{server} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{from_port};branch={branch};rport\r\nMax-Forwards: {max_forwards}\r\nFrom: <sip:alice@{server}>;tag=a1\r\nTo: <sip:{user}@{server}>\r\nCall-ID: call-{branch}\r\nCSeq: 1 {method}\r\nContact: <sip:alice@127.0.0.1:{from_port}>\r\nContent-Length: 0\r\n\r\n"
    )
}

#[test]
fn proxy_forwards_requests_and_responses() {
    let dir = tempdir("proxy");
    let s = server(Mode::Proxy, false, &dir);
    let srv = s.handle.local_addr();
    let uac = Ua::new(srv);
    let uas = Ua::new(srv);
    assert_eq!(
        status(&uas.register(
            "bob",
            "b1",
            1,
            &format!("<sip:bob@127.0.0.1:{}>", uas.port()),
            ""
        )),
        200
    );

    uac.send(
        &invite(uac.port(), srv, "bob", "z9hG4bKinv1", 70, "INVITE"),
        srv,
    );
    let (fwd, from) = uas.recv();
    assert_eq!(from, srv);
    let f = Message::parse(fwd.as_bytes()).expect("forwarded INVITE parses");
    assert_eq!(
        f.request_uri().expect("request").as_str(),
        format!("sip:bob@127.0.0.1:{}", uas.port())
    );
    assert_eq!(f.max_forwards(), Some(69));
    assert_eq!(f.via_count(), 2);
    let vias: Vec<_> = f.vias().collect();
    assert_eq!(
        vias[1].received(),
        Some("127.0.0.1"),
        "rport asks for received (RFC 3581 §4)"
    );
    assert_eq!(vias[1].rport(), Some(Some(uac.port())));

    // The UAS answers to the top Via (the proxy); the UAC gets it with one Via.
    for code in ["180 Ringing", "200 OK"] {
        let mut resp = Vec::new();
        sip_core::writer::write_response(
            &mut resp,
            &f,
            StatusCode::new(code[..3].parse().expect("code")).expect("valid"),
            &sip_core::writer::ResponseOptions {
                to_tag: Some("b9"),
                ..Default::default()
            },
        );
        uas.send(std::str::from_utf8(&resp).expect("utf-8"), srv);
        let (r, _) = uac.recv();
        let r = Message::parse(r.as_bytes()).expect("response parses");
        assert_eq!(r.via_count(), 1);
        assert_eq!(r.top_via().branch(), Some("z9hG4bKinv1"));
    }
    // ACK and BYE sent to the proxy reach the UAS too.
    for (m, b) in [("ACK", "z9hG4bKack1"), ("BYE", "z9hG4bKbye1")] {
        uac.send(&invite(uac.port(), srv, "bob", b, 70, m), srv);
        let (fwd, _) = uas.recv();
        assert!(
            fwd.starts_with(&format!("{m} sip:bob@127.0.0.1:{}", uas.port())),
            "{fwd}"
        );
    }
    // Retransmitted INVITE gets the same downstream branch (stateless §16.11).
    uac.send(
        &invite(uac.port(), srv, "bob", "z9hG4bKinv1", 70, "INVITE"),
        srv,
    );
    let (again, _) = uas.recv();
    let b1 = f.top_via().branch().expect("branch").to_owned();
    assert_eq!(
        Message::parse(again.as_bytes())
            .expect("parses")
            .top_via()
            .branch(),
        Some(b1.as_str())
    );

    assert_eq!(
        status(&uac.ask(&invite(
            uac.port(),
            srv,
            "nobody",
            "z9hG4bKnf",
            70,
            "INVITE"
        ))),
        404
    );
    assert_eq!(
        status(&uac.ask(&invite(uac.port(), srv, "bob", "z9hG4bKmf", 0, "INVITE"))),
        483
    );
    let foreign = invite(uac.port(), srv, "bob", "z9hG4bKrelay", 70, "INVITE").replacen(
        &format!("sip:bob@{srv}"),
        "sip:bob@192.0.2.50",
        1,
    );
    assert_eq!(status(&uac.ask(&foreign)), 403, "no open relay");
    s.handle.shutdown();
}

#[test]
fn redirect_answers_302_with_contacts() {
    let dir = tempdir("redirect");
    let s = server(Mode::Redirect, false, &dir);
    let srv = s.handle.local_addr();
    let ua = Ua::new(srv);
    assert_eq!(
        status(&ua.register("bob", "b1", 1, "<sip:bob@192.0.2.7:5062>", "")),
        200
    );
    let r = ua.ask(&invite(ua.port(), srv, "bob", "z9hG4bKr1", 70, "INVITE"));
    let m = Message::parse(r.as_bytes()).expect("parses");
    assert_eq!(m.status(), Some(StatusCode::MOVED_TEMPORARILY));
    assert_eq!(
        m.contacts()
            .next()
            .map(|c| c.addr.uri().as_str().to_owned()),
        Some("sip:bob@192.0.2.7:5062".into())
    );
    assert_eq!(
        status(&ua.ask(&invite(ua.port(), srv, "carol", "z9hG4bKr2", 70, "INVITE"))),
        404
    );
    s.handle.shutdown();
}

#[test]
fn bindings_survive_restart() {
    let dir = tempdir("restart");
    let s = server(Mode::Redirect, false, &dir);
    let ua = Ua::new(s.handle.local_addr());
    assert_eq!(
        status(&ua.register("bob", "b1", 1, "<sip:bob@192.0.2.7:5062>", "")),
        200
    );
    assert_eq!(
        status(&ua.register("carol", "c1", 1, "<sip:carol@192.0.2.8>", "")),
        200
    );
    assert_eq!(
        status(&ua.register("carol", "c1", 2, "<sip:carol@192.0.2.8>;expires=0", "")),
        200
    );
    s.handle.shutdown();
    let s = server(Mode::Redirect, false, &dir);
    assert_eq!(s.recovered.bindings, 1);
    let ua = Ua::new(s.handle.local_addr());
    let r = ua.ask(&invite(
        ua.port(),
        s.handle.local_addr(),
        "bob",
        "z9hG4bKr1",
        70,
        "INVITE",
    ));
    assert_eq!(status(&r), 302);
    assert_eq!(
        status(&ua.ask(&invite(
            ua.port(),
            s.handle.local_addr(),
            "carol",
            "z9hG4bKr2",
            70,
            "INVITE"
        ))),
        404
    );
    s.handle.shutdown();
}

#[test]
fn auth_without_users_is_a_clear_error() {
    let dir = tempdir("nousers");
    let e = start(Config {
        auth: true,
        tcp: None,
        udp: "127.0.0.1:0".parse().expect("addr"),
        users: dir.join("missing.tsv"),
        data_dir: dir.join("data"),
        ..Config::default()
    })
    .expect_err("must not start");
    assert!(e.to_string().contains("missing.tsv"), "{e}");
}

#[test]
fn proxy_refuses_what_it_could_not_forward_within_limits() {
    let dir = tempdir("limits");
    let s = server(Mode::Proxy, false, &dir);
    let srv = s.handle.local_addr();
    let uac = Ua::new(srv);
    assert_eq!(
        status(&uac.register("bob", "b1", 1, "<sip:bob@127.0.0.1:9>", "")),
        200
    );
    // 128 header fields: parseable (the limit), but not once our Via is added.
    let filler: String = (0..120).map(|i| format!("X-Pad-{i}: x\r\n")).collect();
    let big = invite(uac.port(), srv, "bob", "z9hG4bKbig", 70, "INVITE").replacen(
        "Content-Length: 0\r\n",
        &format!("{filler}Content-Length: 0\r\n"),
        1,
    );
    assert_eq!(
        Message::parse(big.as_bytes())
            .expect("parses")
            .header_count(),
        128
    );
    assert_eq!(status(&uac.ask(&big)), 513);
    // One field fewer still fits and is forwarded (to a closed port: no answer).
    let fits = big.replacen("X-Pad-0: x\r\n", "", 1);
    let forwarded = s
        .handle
        .shared()
        .metrics
        .forwarded
        .load(std::sync::atomic::Ordering::Relaxed);
    uac.send(&fits, srv);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut now_forwarded = forwarded;
    while now_forwarded == forwarded && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        now_forwarded = s
            .handle
            .shared()
            .metrics
            .forwarded
            .load(std::sync::atomic::Ordering::Relaxed);
    }
    assert_eq!(now_forwarded, forwarded + 1);
    s.handle.shutdown();
}

#[test]
fn ipv6_registration() {
    let dir = tempdir("ipv6");
    let Ok(probe) = UdpSocket::bind("[::1]:0") else {
        panic!("IPv6 loopback unavailable on this machine");
    };
    drop(probe);
    let s = start(Config {
        udp: "[::1]:0".parse().expect("addr"),
        tcp: Some("[::1]:0".parse().expect("addr")),
        http: None,
        advertise: "[::1]:0".parse().expect("addr"),
        workers: 1,
        data_dir: dir.join("data"),
        ..Config::default()
    })
    .expect("server on ::1");
    let srv = s.handle.local_addr();
    assert!(srv.is_ipv6());
    let sock = UdpSocket::bind("[::1]:0").expect("client");
    sock.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let port = sock.local_addr().expect("addr").port();
    let msg = format!(
        "REGISTER sip:{srv} SIP/2.0\r\nVia: SIP/2.0/UDP [::1]:{port};branch=z9hG4bKv6;rport\r\nFrom: <sip:v6@{srv}>;tag=1\r\nTo: <sip:v6@{srv}>\r\nCall-ID: v6\r\nCSeq: 1 REGISTER\r\nContact: <sip:v6@[::1]:{port}>\r\nContent-Length: 0\r\n\r\n"
    );
    sock.send_to(msg.as_bytes(), srv).expect("send");
    let mut buf = [0u8; 4096];
    let (n, _) = sock.recv_from(&mut buf).expect("answer");
    let r = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(r.starts_with("SIP/2.0 200 OK\r\n"), "{r}");
    let snap = s
        .handle
        .shared()
        .location
        .snapshot(sipsec_server::io::clock::unix_now());
    assert_eq!(snap.len(), 1);
    assert_eq!(snap[0].0, "sip:v6@[::1]");
    assert!(snap[0].1.source.is_ipv6());
    s.handle.shutdown();
}

/// A record-routing proxy, a caller and bob registered at his own
/// socket, and the INVITE (branch `branch`) as the proxy forwarded it.
struct RoutedCall {
    s: Started,
    srv: SocketAddr,
    uac: Ua,
    uas: Ua,
    contact: String,
    invite: String,
}

fn routed_call(dir: &Path, branch: &str) -> RoutedCall {
    let s = start(Config {
        record_route: true,
        ..loopback_proxy(dir)
    })
    .expect("server");
    let srv = s.handle.local_addr();
    let (uac, uas) = (Ua::new(srv), Ua::new(srv));
    let contact = format!("sip:bob@127.0.0.1:{}", uas.port());
    assert_eq!(
        status(&uas.register("bob", "b1", 1, &format!("<{contact}>"), "")),
        200
    );
    uac.send(&invite(uac.port(), srv, "bob", branch, 70, "INVITE"), srv);
    let (invite, _) = uas.recv();
    RoutedCall {
        s,
        srv,
        uac,
        uas,
        contact,
        invite,
    }
}

/// The caller's BYE through `srv` to `target` along `route`.
fn bye_along(uac: &Ua, srv: SocketAddr, target: &str, route: &str, branch: &str) -> String {
    invite(uac.port(), srv, "bob", branch, 70, "BYE")
        .replacen(&format!("BYE sip:bob@{srv}"), &format!("BYE {target}"), 1)
        .replacen(
            "Content-Length: 0\r\n",
            &format!("Route: {route}\r\nContent-Length: 0\r\n"),
            1,
        )
}

#[test]
fn record_route_brings_in_dialog_requests_back() {
    let dir = tempdir("rr");
    let RoutedCall {
        s,
        srv,
        uac,
        uas,
        contact,
        invite: fwd,
    } = routed_call(&dir, "z9hG4bKrr1");
    let f = Message::parse(fwd.as_bytes()).expect("parses");
    // Our entry proves where the dialog's requests may go.
    let rr = f.header(HeaderName::RecordRoute).expect("record-routed");
    assert!(
        rr.starts_with(&format!("<sip:{srv};hops=")) && rr.ends_with(";lr>"),
        "{rr}"
    );
    let bye_to =
        |target: &str, route: &str, branch: &str| bye_along(&uac, srv, target, route, branch);
    // A peer that writes a Route naming this proxy cannot have the
    // request sent to an address of its choosing: not with our entry of
    // another dialog, nor with one it wrote.
    for (route, branch) in [
        (rr, "z9hG4bKrr4"),
        (&format!("<sip:{srv};lr>"), "z9hG4bKrr5"),
    ] {
        let forged = bye_to("sip:victim@192.0.2.50", route, branch);
        assert_eq!(status(&uac.ask(&forged)), 403, "{route}");
    }
    let forged = bye_to(&contact, &format!("<sip:{srv};lr>"), "z9hG4bKrr6");
    assert_eq!(status(&uac.ask(&forged)), 403, "an entry without our proof");
    let m = &s.handle.shared().metrics;
    assert_eq!(
        m.unproven_routes.load(std::sync::atomic::Ordering::Relaxed),
        3
    );
    // The BYE goes to the callee's contact with the recorded route.
    uac.send(&bye_to(&contact, rr, "z9hG4bKrr2"), srv);
    let (fwd, _) = uas.recv();
    let f = Message::parse(fwd.as_bytes()).expect("parses");
    assert_eq!(f.method(), Method::Bye);
    assert_eq!(f.route_count(), 0, "our Route is consumed");
    assert_eq!(f.via_count(), 2);
    // Without our Route, a foreign Request-URI is still refused.
    let relay = invite(uac.port(), srv, "bob", "z9hG4bKrr3", 70, "BYE").replacen(
        &format!("BYE sip:bob@{srv}"),
        "BYE sip:bob@192.0.2.50",
        1,
    );
    assert_eq!(status(&uac.ask(&relay)), 403);
    s.handle.shutdown();
    // The proof's key is kept in the data directory: a call under way
    // can still be ended through the proxy after a restart.
    let s = start(Config {
        record_route: true,
        udp: srv,
        ..loopback_proxy(&dir)
    })
    .expect("server again, on its port");
    uac.send(&bye_to(&contact, rr, "z9hG4bKrr7"), srv);
    let (fwd, _) = uas.recv();
    assert!(fwd.starts_with(&format!("BYE {contact} ")), "{fwd}");
    s.handle.shutdown();
}

/// The callee's 200 to the INVITE it was forwarded, `inv`: its To tag
/// `b1`, the Record-Route copied (RFC 3261 §12.1.1), its Contact
/// `contact`.
fn callee_ok(inv: &Message<'_>, contact: &str) -> String {
    let mut ok = Vec::new();
    sip_core::writer::write_response(
        &mut ok,
        inv,
        StatusCode::OK,
        &sip_core::writer::ResponseOptions {
            to_tag: Some("b1"),
            copy_record_route: true,
            extra: &[("Contact", &format!("<{contact}>"))],
            ..Default::default()
        },
    );
    String::from_utf8(ok).expect("utf-8")
}

/// A callee may answer with a Contact at another address than the one it
/// was reached at (a carrier's answering SBC): the proxy's entry in the
/// answer's Record-Route then proves that Contact, so the caller's BYE
/// reaches it, while the caller's own side is no longer proven there.
#[test]
fn a_callee_answering_from_another_address_is_reached_in_its_dialog() {
    let dir = tempdir("rr-elsewhere");
    let RoutedCall {
        s,
        srv,
        uac,
        uas,
        invite: fwd,
        ..
    } = routed_call(&dir, "z9hG4bKel1");
    let elsewhere = UdpSocket::bind("127.0.0.2:0").expect("a second loopback address");
    elsewhere
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let there = elsewhere.local_addr().expect("bound");
    let inv = Message::parse(fwd.as_bytes()).expect("parses");
    uas.send(&callee_ok(&inv, &format!("sip:bob@{there}")), srv);
    let (answer, _) = uac.recv();
    let answer = Message::parse(answer.as_bytes()).expect("parses");
    assert_eq!(answer.status(), Some(StatusCode::OK));
    let (sent, got) = (
        inv.header(HeaderName::RecordRoute).expect("record-routed"),
        answer.header(HeaderName::RecordRoute).expect("copied"),
    );
    assert_ne!(sent, got, "the caller's copy proves other addresses");
    let target = format!("sip:bob@{there}");
    let bye = |route: &str, branch: &str| bye_along(&uac, srv, &target, route, branch);
    // The callee's copy (the INVITE's) does not prove the new address.
    assert_eq!(status(&uac.ask(&bye(sent, "z9hG4bKel2"))), 403);
    uac.send(&bye(got, "z9hG4bKel3"), srv);
    let mut buf = [0u8; 4096];
    let (n, _) = elsewhere
        .recv_from(&mut buf)
        .expect("the BYE reaches the answer's contact");
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with(&format!("BYE sip:bob@{there} ")), "{text}");
    s.handle.shutdown();
}

/// A dialog whose parties name their hosts by domain (Contacts
/// `caller.test` and `callee.test`, from a hosts file): each side's
/// requests reach the other by that name, as this proxy's entry in its
/// route set proves the name; a name the dialog did not record is
/// refused before it is looked up, though it leads to the same address
/// (before, any proof-shaped entry had the name resolved, and here
/// forwarded), so a peer learns nothing of which names exist.
#[test]
fn a_dialogs_next_hops_named_by_domain_are_proven_by_name() {
    let dir = tempdir("rr-names");
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, "127.0.0.1 caller.test callee.test other.test\n").expect("hosts");
    let silent = UdpSocket::bind("127.0.0.1:0").expect("a name server that never answers");
    let s = start(Config {
        record_route: true,
        dns: sipsec_server::config::DnsSettings {
            servers: vec![silent.local_addr().expect("bound")],
            hosts: Some(hosts),
            ..Default::default()
        },
        ..loopback_proxy(&dir)
    })
    .expect("server");
    let srv = s.handle.local_addr();
    let (uac, uas) = (Ua::new(srv), Ua::new(srv));
    let bob_at = format!("<sip:bob@127.0.0.1:{}>", uas.port());
    assert_eq!(status(&uas.register("bob", "b1", 1, &bob_at, "")), 200);
    let inv = invite(uac.port(), srv, "bob", "z9hG4bKnm1", 70, "INVITE").replacen(
        "Contact: <sip:alice@127.0.0.1:",
        "Contact: <sip:alice@caller.test:",
        1,
    );
    uac.send(&inv, srv);
    let (fwd, _) = uas.recv();
    let fwd = Message::parse(fwd.as_bytes()).expect("parses");
    let callee = format!("sip:bob@callee.test:{}", uas.port());
    uas.send(&callee_ok(&fwd, &callee), srv);
    let (answer, _) = uac.recv();
    let answer = Message::parse(answer.as_bytes()).expect("parses");
    assert_eq!(answer.status(), Some(StatusCode::OK));
    let (callees, callers) = (
        fwd.header(HeaderName::RecordRoute).expect("record-routed"),
        answer.header(HeaderName::RecordRoute).expect("copied"),
    );
    // The caller's requests reach callee.test along its copy.
    uac.send(&bye_along(&uac, srv, &callee, callers, "z9hG4bKnm2"), srv);
    let (bye, _) = uas.recv();
    assert!(bye.starts_with(&format!("BYE {callee} ")), "{bye}");
    // The callee's reach caller.test along its own.
    let caller = format!("sip:alice@caller.test:{}", uac.port());
    let back = invite(uas.port(), srv, "alice", "z9hG4bKnm3", 70, "BYE")
        .replacen(&format!("BYE sip:alice@{srv}"), &format!("BYE {caller}"), 1)
        .replacen(
            "Content-Length: 0\r\n",
            &format!("Route: {callees}\r\nContent-Length: 0\r\n"),
            1,
        );
    uas.send(&back, srv);
    let (bye, _) = uac.recv();
    assert!(bye.starts_with(&format!("BYE {caller} ")), "{bye}");
    // Names the dialog did not record: refused, not looked up.
    let other = format!("sip:bob@other.test:{}", uas.port());
    for (route, branch) in [(callers, "z9hG4bKnm4"), (callees, "z9hG4bKnm5")] {
        let forged = bye_along(&uac, srv, &other, route, branch);
        assert_eq!(status(&uac.ask(&forged)), 403, "{route}");
    }
    let m = &s.handle.shared().metrics;
    assert_eq!(
        m.unproven_routes.load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    s.handle.shutdown();
}

/// A challenge over UDP goes to a source nothing proves (a spoofed
/// request's is answered too): a REGISTER cut to the headers a 401 must
/// echo (127 bytes) gets one within three times its bytes, with the
/// preferred algorithm only (counted); both challenges made it 465 bytes,
/// 3.7 times. A REGISTER of a phone's usual size, or any over TCP, gets
/// every algorithm.
#[test]
fn a_udp_challenge_amplifies_at_most_three_times() {
    let dir = tempdir("challenge-amplify");
    let s = server(Mode::Registrar, true, &dir);
    let srv = s.handle.local_addr();
    let ua = Ua::new(srv);
    let challenges = |r: &str| {
        r.lines()
            .filter(|l| l.starts_with("WWW-Authenticate: "))
            .count()
    };
    let tiny = format!(
        "REGISTER sip:a SIP/2.0\r\nv:SIP/2.0/UDP 127.0.0.1:{};branch=z9hG4bK1\r\n\
         f:<sip:a@a>;tag=1\r\nt:<sip:a@a>\r\ni:1\r\nCSeq:1 REGISTER\r\n\r\n",
        ua.port()
    );
    let r = ua.ask(&tiny);
    assert_eq!(status(&r), 401, "{r}");
    assert!(
        r.len() <= 3 * tiny.len(),
        "{} bytes answered to {}: {r}",
        r.len(),
        tiny.len()
    );
    assert_eq!(challenges(&r), 1, "{r}");
    assert!(r.contains("algorithm=SHA-256"), "the preferred one: {r}");
    let m = &s.handle.shared().metrics;
    assert_eq!(
        m.challenges_cut.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    let contact = format!("<sip:alice@127.0.0.1:{}>", ua.port());
    let r = ua.register("alice", "usual", 1, &contact, "User-Agent: sipsec-test\r\n");
    assert_eq!((status(&r), challenges(&r)), (401, 2), "{r}");
    use std::io::{Read, Write};
    let tcp_addr = s.handle.tcp_addr().expect("tcp");
    let mut tcp = std::net::TcpStream::connect(tcp_addr).expect("tcp");
    tcp.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let me = tcp.local_addr().expect("bound");
    tcp.write_all(
        tiny.replace("v:SIP/2.0/UDP 127.0.0.1", "v:SIP/2.0/TCP 127.0.0.1")
            .replace(&format!("127.0.0.1:{}", ua.port()), &me.to_string())
            .replace("\r\n\r\n", "\r\nl:0\r\n\r\n")
            .as_bytes(),
    )
    .expect("send");
    let mut buf = vec![0u8; 4096];
    let mut got = String::new();
    while !got.contains("\r\n\r\n") {
        let n = tcp.read(&mut buf).expect("an answer over TCP");
        assert!(n > 0, "closed: {got}");
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert_eq!((status(&got), challenges(&got)), (401, 2), "{got}");
    s.handle.shutdown();
}

/// Drives the core directly with chosen times: an expired nonce gets a new
/// challenge with stale=true, a fresh one is accepted.
#[test]
fn expired_nonces_are_stale() {
    use sipsec_server::proto::auth::{Authenticator, NonceKey};
    use sipsec_server::proto::location::MemoryLocation;
    use sipsec_server::{Core, Now, Reply, Shared, Transport};
    use std::sync::Arc;

    let mut users = Users::default();
    users
        .insert(
            "alice",
            "sipsec",
            UserEntry::from_password("alice", "sipsec", "wonderland"),
        )
        .expect("user");
    let auth = Authenticator::new(
        "sipsec",
        NonceKey::from_secret([9; 32], 60),
        users,
        &[Algorithm::Md5],
        sipsec_server::proto::auth::NcLimits::of(1 << 10),
        std::hash::RandomState::new(),
    );
    let config = Config {
        auth: true,
        advertise: "127.0.0.1:5060".parse().expect("addr"),
        ..Config::default()
    };
    let origin = std::time::Instant::now();
    // Virtual time: the core reads no clock, so seconds pass at will.
    let at = |secs: u64| Now {
        unix_ms: secs * 1000,
        mono: origin + Duration::from_secs(secs - 1_000_000),
    };
    let shared = Arc::new(Shared::new(
        config,
        Arc::new(MemoryLocation::new(std::hash::RandomState::new())),
        Some(auth),
        at(1_000_000),
        std::hash::RandomState::new(),
    ));
    let mut core = Core::new(shared);
    let src: SocketAddr = "127.0.0.1:5099".parse().expect("addr");
    let register = |cseq: u32, auth: &str| {
        format!(
            "REGISTER sip:127.0.0.1:5060 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5099;branch=z9hG4bKst{cseq}\r\nFrom: <sip:alice@127.0.0.1>;tag=s\r\nTo: <sip:alice@127.0.0.1>\r\nCall-ID: stale-test\r\nCSeq: {cseq} REGISTER\r\nContact: <sip:alice@127.0.0.1:5099>\r\n{auth}Content-Length: 0\r\n\r\n"
        )
    };
    let mut out = Vec::new();
    let mut ask = |msg: String, now: u64| -> String {
        out.clear();
        assert_eq!(
            sipsec_server::io::drive::handle(
                &mut core,
                &sipsec_server::io::sinks::Sinks::default(),
                None,
                msg.as_bytes(),
                src,
                Transport::Udp,
                at(now),
                &mut out
            ),
            Reply::Send(src, Transport::Udp)
        );
        String::from_utf8(out.clone()).expect("utf-8")
    };
    let t0 = 1_000_000;
    let r = ask(register(1, ""), t0);
    let challenge = Message::parse(r.as_bytes())
        .expect("parses")
        .header(HeaderName::WwwAuthenticate)
        .expect("401")
        .to_owned();
    assert!(!challenge.contains("stale"));
    let uri = "sip:127.0.0.1:5060";
    let creds = authorization(
        &challenge,
        "alice",
        "wonderland",
        "REGISTER",
        uri,
        1,
        "Authorization",
    );
    let late = ask(register(2, &creds), t0 + 61);
    assert_eq!(status(&late), 401);
    assert!(late.contains("stale=true"), "{late}");
    let fresh = authorization(
        &challenge,
        "alice",
        "wonderland",
        "REGISTER",
        uri,
        2,
        "Authorization",
    );
    assert_eq!(
        status(&ask(register(3, &fresh), t0 + 30)),
        200,
        "within nonce_ttl"
    );
}

fn respond_to(req: &Message<'_>, code: u16, tag: &str) -> String {
    let mut out = Vec::new();
    sip_core::writer::write_response(
        &mut out,
        req,
        StatusCode::new(code).expect("valid code"),
        &sip_core::writer::ResponseOptions {
            to_tag: Some(tag),
            ..Default::default()
        },
    );
    String::from_utf8(out).expect("utf-8")
}

/// Receives until a message that is not a `100 Trying` arrives.
fn recv_skipping_trying(ua: &Ua) -> String {
    loop {
        let (m, _) = ua.recv();
        if !m.starts_with("SIP/2.0 100 ") {
            return m;
        }
    }
}

#[test]
fn stateful_proxy_absorbs_retransmissions_and_forwards_cancel() {
    let dir = tempdir("stateful");
    let s = start(Config {
        stateful: true,
        workers: 2,
        ..loopback_proxy(&dir)
    })
    .expect("server");
    let srv = s.handle.local_addr();
    let metrics = &s.handle.shared().metrics;
    let (uac, uas) = (Ua::new(srv), Ua::new(srv));
    let contact = format!("<sip:bob@127.0.0.1:{}>", uas.port());
    assert_eq!(status(&uas.register("bob", "b1", 1, &contact, "")), 200);

    let inv = invite(uac.port(), srv, "bob", "z9hG4bKst1", 70, "INVITE");
    uac.send(&inv, srv);
    assert_eq!(status(&uac.recv().0), 100, "100 Trying at once (§16.2)");
    let (fwd, _) = uas.recv();
    let f = Message::parse(fwd.as_bytes()).expect("forwarded INVITE parses");
    assert_eq!(f.method(), Method::Invite);
    assert!(
        f.header(HeaderName::RecordRoute).is_some(),
        "stateful proxies record-route"
    );
    // A retransmitted INVITE is answered with the last provisional and
    // not forwarded again.
    uac.send(&inv, srv);
    assert_eq!(status(&uac.recv().0), 100);
    assert_eq!(
        metrics
            .retransmissions_absorbed
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    uas.send(&respond_to(&f, 180, "b9"), srv);
    assert_eq!(status(&recv_skipping_trying(&uac)), 180);

    // CANCEL: answered 200 here, sent downstream, and the callee's 487 comes
    // back; the proxy ACKs the 487 itself (hop by hop).
    let cancel = inv.replacen("INVITE sip:", "CANCEL sip:", 1).replacen(
        "CSeq: 1 INVITE",
        "CSeq: 1 CANCEL",
        1,
    );
    uac.send(&cancel, srv);
    let r = uac.recv().0;
    assert_eq!(status(&r), 200, "{r}");
    assert!(r.contains("CSeq: 1 CANCEL"), "{r}");
    let (c, _) = uas.recv();
    let c = Message::parse(c.as_bytes()).expect("CANCEL parses");
    assert_eq!(c.method(), Method::Cancel);
    assert_eq!(c.top_via().branch(), f.top_via().branch());
    uas.send(&respond_to(&c, 200, "b9"), srv);
    uas.send(&respond_to(&f, 487, "b9"), srv);
    let r = recv_skipping_trying(&uac);
    assert_eq!(status(&r), 487, "{r}");
    let (ack, _) = uas.recv();
    let a = Message::parse(ack.as_bytes()).expect("ACK parses");
    assert_eq!(a.method(), Method::Ack);
    assert_eq!(a.to().tag(), Some("b9"));
    assert_eq!(a.top_via().branch(), f.top_via().branch());
    // The caller's ACK for the 487 ends at the proxy.
    let ack =
        inv.replacen("INVITE sip:", "ACK sip:", 1)
            .replacen("CSeq: 1 INVITE", "CSeq: 1 ACK", 1);
    uac.send(&ack, srv);
    // CANCEL for an unknown transaction: 481.
    let stray = invite(uac.port(), srv, "bob", "z9hG4bKnone", 70, "CANCEL");
    assert_eq!(status(&uac.ask(&stray)), 481);
    assert_eq!(
        metrics.cancels.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    s.handle.shutdown();
}

#[test]
fn stateful_proxy_answers_503_when_the_callee_cannot_be_reached_over_tcp() {
    let dir = tempdir("stateful-503");
    let s = start(Config {
        stateful: true,
        tcp: Some("127.0.0.1:0".parse().expect("addr")),
        ..loopback_proxy(&dir)
    })
    .expect("server");
    let srv = s.handle.local_addr();
    // A loopback port with nothing listening: connects are refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port");
    let r = invite_bob_at(srv, &format!("<sip:bob@{closed};transport=tcp>"), "503");
    assert_eq!(status(&r), 503, "{r}");
    s.handle.shutdown();
}

/// Registers bob at `contact` through the stateful proxy `srv`, then
/// calls him: the final response, after the proxy's 100 Trying.
fn invite_bob_at(srv: SocketAddr, contact: &str, tag: &str) -> String {
    let uac = Ua::new(srv);
    let call_id = format!("b{tag}");
    assert_eq!(status(&uac.register("bob", &call_id, 1, contact, "")), 200);
    uac.send(
        &invite(
            uac.port(),
            srv,
            "bob",
            &format!("z9hG4bK{tag}"),
            70,
            "INVITE",
        ),
        srv,
    );
    assert_eq!(status(&uac.recv().0), 100);
    uac.recv().0
}

/// The same over UDP: ICMP port unreachable is the transport failure
/// (RFC 3261 §18.4), answered 503 at once, not 408 after timer B.
#[test]
fn stateful_proxy_answers_503_when_icmp_says_nobody_listens_on_udp() {
    let dir = tempdir("stateful-icmp");
    let s = start(Config {
        stateful: true,
        ..loopback_proxy(&dir)
    })
    .expect("server");
    let srv = s.handle.local_addr();
    let closed = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|u| u.local_addr())
        .expect("port");
    let r = invite_bob_at(srv, &format!("<sip:bob@{closed}>"), "icmp");
    assert_eq!(status(&r), 503, "{r}");
    let m = &s.handle.shared().metrics;
    assert_eq!(
        m.udp_unreachable.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    s.handle.shutdown();
}

/// With ICMP errors reported (a stateful proxy), an error drawn by one
/// datagram fails the socket's next send once: that send's datagram goes
/// again. Requests forwarded to a port nobody listens on, interleaved
/// with a live phone's REGISTERs: every one of the phone's answers
/// arrives, and each forwarded request fails with 503 at once.
#[test]
fn answers_are_not_lost_to_icmp_errors_drawn_by_other_datagrams() {
    let dir = tempdir("stateful-icmp-others");
    let s = start(Config {
        stateful: true,
        ..loopback_proxy(&dir)
    })
    .expect("server");
    let srv = s.handle.local_addr();
    let closed = UdpSocket::bind("127.0.0.1:0")
        .and_then(|u| u.local_addr())
        .expect("port");
    let caller = Ua::new(srv);
    let live = Ua::new(srv);
    let contact = format!("<sip:bob@{closed}>");
    assert_eq!(
        status(&caller.register("bob", "icmp-b", 1, &contact, "")),
        200
    );
    // Few: the kernel sends at most 50 ICMP errors in a burst (icmp_msgs_burst).
    const ROUNDS: u32 = 16;
    for n in 1..=ROUNDS {
        caller.send(
            &format!(
                "MESSAGE sip:bob@{srv} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{p};rport;branch=z9hG4bKicmpm{n}\r\nMax-Forwards: 70\r\nFrom: <sip:alice@{srv}>;tag=a{n}\r\nTo: <sip:bob@{srv}>\r\nCall-ID: icmp-m-{n}\r\nCSeq: {n} MESSAGE\r\nContent-Length: 0\r\n\r\n",
                p = caller.port()
            ),
            srv,
        );
        live.send(
            &format!(
                "REGISTER sip:{srv} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{p};rport;branch=z9hG4bKicmpr{n}\r\nMax-Forwards: 70\r\nFrom: <sip:live@{srv}>;tag=f{n}\r\nTo: <sip:live@{srv}>\r\nCall-ID: icmp-r-{n}\r\nCSeq: {n} REGISTER\r\nContact: <sip:live@127.0.0.1:5999>\r\nContent-Length: 0\r\n\r\n",
                p = live.port()
            ),
            srv,
        );
    }
    let answers = |ua: &Ua, code: u16| {
        let mut seqs: Vec<u32> = (0..ROUNDS)
            .map(|_| {
                let r = ua.recv().0;
                assert_eq!(status(&r), code, "{r}");
                Message::parse(r.as_bytes()).expect("parses").cseq().seq
            })
            .collect();
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=ROUNDS).collect::<Vec<_>>());
    };
    answers(&live, 200);
    answers(&caller, 503);
    let m = &s.handle.shared().metrics;
    assert_eq!(
        m.udp_unreachable.load(std::sync::atomic::Ordering::Relaxed),
        u64::from(ROUNDS)
    );
    s.handle.shutdown();
}

#[test]
fn path_from_registration_routes_requests_through_the_edge_proxy() {
    let dir = tempdir("path");
    let s = server(Mode::Proxy, false, &dir);
    let srv = s.handle.local_addr();
    let (uac, uas, edge) = (Ua::new(srv), Ua::new(srv), Ua::new(srv));
    let contact = format!("<sip:bob@127.0.0.1:{}>", uas.port());
    let path = format!("<sip:127.0.0.1:{};lr>", edge.port());
    // The UA supports Path: the 200 OK echoes it (RFC 3327 §5.3).
    let ok = uas.register(
        "bob",
        "p1",
        1,
        &contact,
        &format!("Path: {path}\r\nSupported: path\r\n"),
    );
    assert_eq!(status(&ok), 200, "{ok}");
    let r = Message::parse(ok.as_bytes()).expect("parses");
    assert_eq!(r.header(HeaderName::Path), Some(path.as_str()));
    // Without Supported: path the Path is kept but not echoed.
    let carol = format!("<sip:carol@127.0.0.1:{}>", uas.port());
    let ok = uas.register("carol", "p2", 1, &carol, &format!("Path: {path}\r\n"));
    assert_eq!(status(&ok), 200, "{ok}");
    assert!(!ok.contains("Path:"), "{ok}");
    // A Path that is not a list of <sip:…> values is refused.
    let bad = uas.register("dave", "p3", 1, &contact, "Path: garbage\r\n");
    assert_eq!(status(&bad), 400, "{bad}");

    // An INVITE for bob goes to the edge proxy, with the Path as Route and
    // bob's contact as Request-URI.
    uac.send(
        &invite(uac.port(), srv, "bob", "z9hG4bKpath1", 70, "INVITE"),
        srv,
    );
    let (fwd, _) = edge.recv();
    let f = Message::parse(fwd.as_bytes()).expect("parses");
    assert_eq!(
        f.request_uri().expect("request").as_str(),
        format!("sip:bob@127.0.0.1:{}", uas.port())
    );
    let routes: Vec<String> = f.routes().map(|r| r.as_str().to_owned()).collect();
    assert_eq!(routes, [path]);
    s.handle.shutdown();
}

/// A UDP peer whose port number equals the proxy's TLS port is not the
/// proxy: its Via is not mistaken for ours (which would answer 482).
#[test]
fn a_peer_on_the_tls_port_number_over_udp_is_not_a_loop() {
    let dir = tempdir("tls-port-peer");
    let (key, cert) = (dir.join("k.pem"), dir.join("c.pem"));
    let ok = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
        ])
        .args(["-days", "1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl CLI (setup.sh installs it)");
    assert!(ok.success());
    // The UA's UDP port number for the server's TLS port: a TCP socket
    // elsewhere on this host may hold that number (an outgoing
    // connection's), so another is picked until one is free for both.
    let (uac_sock, port, s) = (0..50)
        .find_map(|_| {
            let uac_sock = UdpSocket::bind("127.0.0.1:0").expect("ua socket");
            let port = uac_sock.local_addr().expect("bound").port();
            let started = start(Config {
                tls: Some(sipsec_server::config::TlsSettings::with_files(
                    SocketAddr::from(([127, 0, 0, 1], port)),
                    cert.clone(),
                    key.clone(),
                )),
                ..loopback_proxy(&dir)
            });
            match started {
                Ok(s) => Some((uac_sock, port, s)),
                Err(sipsec_server::StartError::Bind { err, .. })
                    if err.kind() == std::io::ErrorKind::AddrInUse =>
                {
                    None
                }
                Err(e) => panic!("server starts: {e:?}"),
            }
        })
        .expect("a port number free for UDP and TCP");
    let srv = s.handle.local_addr();
    assert_eq!(s.handle.tls_addr().map(|a| a.port()), Some(port));
    uac_sock
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let uac = Ua {
        sock: uac_sock,
        server: srv,
    };
    let uas = Ua::new(srv);
    let contact = format!("<sip:bob@127.0.0.1:{}>", uas.port());
    assert_eq!(status(&uas.register("bob", "b1", 1, &contact, "")), 200);
    uac.send(
        &invite(port, srv, "bob", "z9hG4bKtlsport", 70, "INVITE"),
        srv,
    );
    let (fwd, _) = uas.recv();
    assert!(fwd.starts_with("INVITE sip:bob@127.0.0.1:"), "{fwd}");
    s.handle.shutdown();
}

/// RFC 5626 §8 keep-alives on the SIP UDP port, over a real socket: a
/// STUN Binding request (RFC 5389, with FINGERPRINT) is answered with the
/// address it came from; a CRLF keep-alive is dropped silently; a STUN
/// message that is not a Binding request gets nothing; SIP on the same
/// port goes on.
#[test]
fn stun_and_crlf_keep_alives_share_the_sip_port() {
    let dir = tempdir("stun");
    let s = start(loopback_proxy(&dir)).expect("server starts");
    let ua = Ua::new(s.handle.local_addr());
    let txid = *b"sipsec-stun1";
    let mut req = vec![0x00, 0x01, 0x00, 0x08, 0x21, 0x12, 0xa4, 0x42];
    req.extend_from_slice(&txid);
    // FINGERPRINT (RFC 5389 §15.5): zlib's CRC-32 of what precedes it.
    let crc = zlib_crc32(&req) ^ 0x5354_554e;
    req.extend_from_slice(&[0x80, 0x28, 0x00, 0x04]);
    req.extend_from_slice(&crc.to_be_bytes());
    ua.sock.send_to(&req, ua.server).expect("send");
    let mut buf = [0u8; 1500];
    let (n, from) = ua.sock.recv_from(&mut buf).expect("a STUN answer");
    let resp = &buf[..n];
    assert_eq!(from, ua.server);
    assert_eq!(&resp[..2], [0x01, 0x01], "Binding success");
    assert_eq!(&resp[4..20], &req[4..20], "cookie and transaction ID");
    assert_eq!(usize::from(u16::from_be_bytes([resp[2], resp[3]])), n - 20);
    // XOR-MAPPED-ADDRESS: our own address, unmasked.
    assert_eq!(&resp[20..26], [0x00, 0x20, 0x00, 0x08, 0x00, 0x01]);
    let port = u16::from_be_bytes([resp[26], resp[27]]) ^ 0x2112;
    let ip: Vec<u8> = resp[28..32]
        .iter()
        .zip([0x21, 0x12, 0xa4, 0x42])
        .map(|(a, k)| a ^ k)
        .collect();
    assert_eq!((ip.as_slice(), port), (&[127u8, 0, 0, 1][..], ua.port()));
    // Its own FINGERPRINT, last, over everything before it.
    assert_eq!(&resp[n - 8..n - 4], [0x80, 0x28, 0x00, 0x04]);
    let want = zlib_crc32(&resp[..n - 8]) ^ 0x5354_554e;
    assert_eq!(resp[n - 4..], want.to_be_bytes());
    // A CRLF keep-alive and a Binding indication: no answer, and the SIP
    // request that follows is answered.
    ua.sock.send_to(b"\r\n\r\n", ua.server).expect("send");
    let mut indication = req[..20].to_vec();
    indication[1] = 0x11;
    indication[3] = 0;
    ua.sock.send_to(&indication, ua.server).expect("send");
    let ok = ua.register("alice", "stun-1", 1, "<sip:alice@127.0.0.1:5999>", "");
    assert_eq!(status(&ok), 200, "{ok}");
    let m = &s.handle.shared().metrics;
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(m.stun_bindings.load(Relaxed), 1);
    assert_eq!(m.keepalives.load(Relaxed), 1);
    assert_eq!(
        m.malformed.load(Relaxed),
        0,
        "keep-alives are not malformed SIP"
    );
}

/// zlib's CRC-32, bit by bit (the test's own, not the server's).
fn zlib_crc32(bytes: &[u8]) -> u32 {
    let mut table = [0u32; 256];
    for (i, t) in table.iter_mut().enumerate() {
        let mut c = i as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        *t = c;
    }
    !bytes.iter().fold(!0u32, |c, b| {
        table[((c ^ u32::from(*b)) & 0xff) as usize] ^ (c >> 8)
    })
}
