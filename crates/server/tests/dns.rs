//! Next hops named by domain names (RFC 3263 without NAPTR), against a
//! real name server: dnsmasq, started on a free loopback port.

#[path = "support/scratch.rs"]
mod scratch;
use scratch::Scratch;

use std::io::{Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sip_core::dns::{self, Kind};
use sip_core::{Message, Method};
use sipsec_server::config::DnsSettings;
use sipsec_server::proto::tokens;
use sipsec_server::{start, Config, Mode, Started};

fn tempdir(name: &str) -> Scratch {
    Scratch::new(&format!("test-{name}"))
}

fn socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("socket");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s
}

fn port_of(s: &UdpSocket) -> u16 {
    s.local_addr().expect("bound").port()
}

fn recv(s: &UdpSocket) -> String {
    let mut buf = vec![0u8; 65_535];
    let (n, _) = s.recv_from(&mut buf).expect("a message arrives");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// A 200 OK for `req`.
fn ok_for(req: &Message<'_>) -> Vec<u8> {
    let mut ok = Vec::new();
    sip_core::writer::write_response(
        &mut ok,
        req,
        sip_core::StatusCode::OK,
        &sip_core::writer::ResponseOptions::default(),
    );
    ok
}

/// dnsmasq answering for `test.` only (no upstream, no system files),
/// killed when dropped.
struct NameServer {
    child: Child,
    addr: SocketAddr,
}

impl NameServer {
    /// Starts dnsmasq on a port free for UDP and TCP both (it listens on
    /// both), and waits until it answers. A dnsmasq that exits instead
    /// (another test took the port meanwhile) is started again on a fresh
    /// port, a few times, and its own words are shown if it never runs.
    fn start(records: &[String]) -> Self {
        let mut said = String::new();
        for _ in 0..5 {
            match Self::try_start(records) {
                Ok(ns) => return ns,
                Err(e) => said = e,
            }
        }
        panic!("dnsmasq did not start: {said}");
    }

    fn try_start(records: &[String]) -> Result<Self, String> {
        let port = loop {
            let port = port_of(&socket());
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                break port;
            }
        };
        let mut c = Command::new("dnsmasq");
        c.args([
            "--keep-in-foreground",
            "--no-resolv",
            "--no-hosts",
            "--no-poll",
        ])
        .args(["--conf-file=/dev/null", "--pid-file", "--bind-interfaces"])
        .args([
            "--listen-address=127.0.0.1",
            "--local=/test/",
            "--local-ttl=60",
        ])
        .arg(format!("--port={port}"))
        .args(records)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        let child = c
            .spawn()
            .expect("dnsmasq runs (setup.sh installs dnsmasq-base)");
        let mut ns = Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        // Ready once it answers; given up on once it has exited.
        let probe = socket();
        probe
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let mut q = Vec::new();
        dns::query(1, "ready.test", Kind::A, &mut q).expect("query");
        let until = Instant::now() + Duration::from_secs(30);
        let mut buf = [0u8; 512];
        while Instant::now() < until {
            if ns.child.try_wait().ok().flatten().is_some() {
                let mut err = String::new();
                if let Some(mut e) = ns.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return Err(format!("it exited on port {port}: {}", err.trim()));
            }
            let _ = probe.send_to(&q, ns.addr);
            if probe.recv_from(&mut buf).is_ok() {
                return Ok(ns);
            }
        }
        Err(format!("it did not answer on {} within 30 s", ns.addr))
    }
}

impl Drop for NameServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A proxy on loopback (UDP and TCP, no HTTP) resolving with `dns`.
fn proxy(dir: &std::path::Path, dns: DnsSettings) -> sipsec_server::Started {
    start(proxy_config(dir, dns)).expect("server starts")
}

/// A proxy whose only name server reads the queries and never answers,
/// with that server's socket (to see the queries arrive).
fn silent_proxy(
    dir: &std::path::Path,
    timeout: Duration,
    attempts: u32,
) -> (UdpSocket, sipsec_server::Started) {
    let silent = socket();
    let dns = DnsSettings {
        servers: vec![silent.local_addr().expect("bound")],
        hosts: None,
        timeout,
        attempts,
        ..DnsSettings::default()
    };
    (silent, proxy(dir, dns))
}

fn proxy_config(dir: &std::path::Path, dns: DnsSettings) -> Config {
    Config {
        mode: Mode::Proxy,
        udp: "127.0.0.1:0".parse().expect("addr"),
        tcp: Some("127.0.0.1:0".parse().expect("addr")),
        http: None,
        advertise: "127.0.0.1:0".parse().expect("addr"),
        workers: 1,
        data_dir: dir.join("data"),
        dns,
        ..Config::default()
    }
}

/// A transaction-stateful proxy resolving with the name server `ns`,
/// failing an address over after `failover_after` of silence.
fn stateful_proxy(
    dir: &std::path::Path,
    ns: SocketAddr,
    failover_after: Option<Duration>,
) -> sipsec_server::Started {
    let dns = DnsSettings {
        servers: vec![ns],
        hosts: None,
        timeout: Duration::from_millis(500),
        failover_after,
        ..DnsSettings::default()
    };
    start(Config {
        stateful: true,
        ..proxy_config(dir, dns)
    })
    .expect("server starts")
}

/// An in-dialog MESSAGE (its To has a tag: the proxy follows the route
/// set a dialog recorded, and refuses a preloaded Route on an initial
/// request) routed through `proxy`, then `route`: the route set of a
/// dialog whose INVITE the proxy record-routed between two parties on
/// 127.0.0.1 (its entry proves that address, and the name `route` names).
fn message(ua: &UdpSocket, proxy: &Started, route: &str, n: u32) -> String {
    let here: std::net::IpAddr = [127, 0, 0, 1].into();
    let key = &proxy.handle.shared().route_key.0;
    let proof = tokens::hops_proof(key, here, here, Some(host_of(route)));
    format!(
        "MESSAGE sip:bob@elsewhere.test SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{p};rport;branch=z9hG4bKdns{n}\r\nMax-Forwards: 70\r\nRoute: <sip:{at};{hops}={proof};lr>, <{route}>\r\nFrom: <sip:alice@example.com>;tag=a{n}\r\nTo: <sip:bob@elsewhere.test>;tag=b{n}\r\nCall-ID: dns-{n}\r\nCSeq: 1 MESSAGE\r\nContent-Length: 0\r\n\r\n",
        p = port_of(ua),
        at = proxy.handle.local_addr(),
        hops = tokens::HOPS_PARAM,
    )
}

/// The host `route` (a SIP URI) names.
fn host_of(route: &str) -> &str {
    let rest = route.trim_start_matches('<').trim_start_matches("sip:");
    rest.split([':', ';', '>']).next().unwrap_or(rest)
}

/// Sends a MESSAGE routed through `route`; what the callee at `peer`
/// receives (answered 200), or the response the caller got instead.
fn route_through(
    ua: &UdpSocket,
    proxy: &Started,
    route: &str,
    peer: &UdpSocket,
    n: u32,
) -> Result<(), String> {
    ua.send_to(
        message(ua, proxy, route, n).as_bytes(),
        proxy.handle.local_addr(),
    )
    .expect("send");
    peer.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let mut buf = vec![0u8; 65_535];
    match peer.recv_from(&mut buf) {
        Ok((len, from)) => {
            let text = String::from_utf8_lossy(&buf[..len]).into_owned();
            let req = Message::parse(text.as_bytes()).expect("forwarded request parses");
            assert_eq!(req.method(), Method::Message);
            assert_eq!(req.call_id(), format!("dns-{n}"));
            let ok = ok_for(&req);
            peer.send_to(&ok, from).expect("answer");
            let resp = recv(ua);
            assert!(resp.starts_with("SIP/2.0 200"), "{resp}");
            Ok(())
        }
        Err(_) => Err(recv(ua)),
    }
}

#[test]
fn next_hops_named_by_domains_are_resolved_by_hosts_file_a_and_srv_records() {
    let dir = tempdir("dns");
    let a_peer = socket();
    let srv_peer = socket();
    let hosts_peer = socket();
    let ns = NameServer::start(&[
        "--host-record=a.test,127.0.0.1".into(),
        "--host-record=tcp.test,127.0.0.1".into(),
        "--host-record=target.test,127.0.0.1".into(),
        format!(
            "--srv-host=_sip._udp.srv.test,target.test,{},0,5",
            port_of(&srv_peer)
        ),
        // The first target has no address: the next one is used.
        "--srv-host=_sip._udp.backup.test,dead.test,5999,0,5".into(),
        format!(
            "--srv-host=_sip._udp.backup.test,target.test,{},10,5",
            port_of(&srv_peer)
        ),
    ]);
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, "# test\n127.0.0.1 Hosts.Test\n").expect("hosts file");
    let server = proxy(
        &dir,
        DnsSettings {
            servers: vec![ns.addr],
            hosts: Some(hosts),
            timeout: Duration::from_millis(500),
            ..DnsSettings::default()
        },
    );
    let proxy = &server;
    let ua = socket();

    // The hosts file, as the C library reads it (any case).
    let to_hosts = format!("sip:hosts.test:{};lr", port_of(&hosts_peer));
    route_through(&ua, proxy, &to_hosts, &hosts_peer, 1).expect("forwarded by the hosts file");
    // An A record, the URI's port.
    let to_a = format!("sip:A.test:{};lr", port_of(&a_peer));
    route_through(&ua, proxy, &to_a, &a_peer, 2).expect("forwarded by the A record");
    // No port: the SRV record's target and port (RFC 3263 §4.2).
    route_through(&ua, proxy, "sip:srv.test;lr", &srv_peer, 3).expect("forwarded by SRV");
    // SRV targets in order, past one that does not resolve (§4.4).
    route_through(&ua, proxy, "sip:backup.test;lr", &srv_peer, 8).expect("the second target");
    // A name that does not exist: 503, saying why.
    let refused = route_through(&ua, proxy, "sip:nothing.test;lr", &a_peer, 4)
        .expect_err("nothing to forward to");
    assert!(refused.starts_with("SIP/2.0 503"), "{refused}");
    assert!(refused.contains("cannot be resolved"), "{refused}");
    // A request that arrived over TCP waits the same, and the answer
    // comes back down its connection.
    let tcp_addr = server.handle.tcp_addr().expect("tcp");
    let mut phone = std::net::TcpStream::connect(tcp_addr).expect("connect");
    phone
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let route = format!("sip:tcp.test:{};lr", port_of(&a_peer));
    let over_tcp = message(&ua, proxy, &route, 7).replace("SIP/2.0/UDP", "SIP/2.0/TCP");
    phone.write_all(over_tcp.as_bytes()).expect("send");
    let mut buf = vec![0u8; 65_535];
    let (len, from) = a_peer.recv_from(&mut buf).expect("forwarded");
    let req = Message::parse(&buf[..len]).expect("parses");
    assert_eq!(req.call_id(), "dns-7");
    let ok = ok_for(&req);
    a_peer.send_to(&ok, from).expect("answer");
    let n = phone.read(&mut buf).expect("the 200 on the connection");
    let resp = String::from_utf8_lossy(&buf[..n]);
    assert!(
        resp.starts_with("SIP/2.0 200") && resp.contains("dns-7"),
        "{resp}"
    );
    // Answers are kept for their TTL: with the name server gone, the
    // names it gave still lead where they did.
    drop(ns);
    route_through(&ua, proxy, &to_a, &a_peer, 5).expect("forwarded from the cache");
    route_through(&ua, proxy, "sip:srv.test;lr", &srv_peer, 6).expect("SRV from the cache");
    let m = &server.handle.shared().metrics;
    let count = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    // A, SRV, SRV with a dead target, the missing name and the TCP one
    // waited; the hosts file and the cache answered at once.
    assert_eq!(count(&m.hop_waits), 5);
    assert_eq!(count(&m.hop_unresolved), 1);
    assert!(count(&m.dns_queries) >= 4);
    server.handle.shutdown();
}

#[test]
fn a_name_server_that_does_not_answer_gets_503_not_a_hang() {
    let dir = tempdir("dns-down");
    let (silent, server) = silent_proxy(&dir, Duration::from_millis(200), 2);
    let ua = socket();
    let peer = socket();
    let route = format!("sip:unanswered.test:{};lr", port_of(&peer));
    let refused = route_through(&ua, &server, &route, &peer, 1).expect_err("nothing to forward to");
    assert!(refused.starts_with("SIP/2.0 503"), "{refused}");
    // The queries reached the (silent) server: the resolver did ask.
    silent
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let mut buf = [0u8; 512];
    let (n, _) = silent.recv_from(&mut buf).expect("a query arrived");
    assert!(n > 12, "a DNS query");
    // Two tries (the default) at the one server, then given up.
    let m = &server.handle.shared().metrics;
    let count = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(count(&m.dns_queries), 2);
    assert_eq!(count(&m.hop_unresolved), 1);
    server.handle.shutdown();
}

#[test]
fn an_unreadable_hosts_file_is_a_clear_error_before_anything_starts() {
    let dir = tempdir("dns-hosts");
    let missing = dir.join("no-such-hosts");
    let config = Config {
        udp: "127.0.0.1:0".parse().expect("addr"),
        tcp: None,
        http: None,
        data_dir: dir.join("data"),
        dns: DnsSettings {
            hosts: Some(missing.clone()),
            ..DnsSettings::default()
        },
        ..Config::default()
    };
    let checked = sipsec_server::check(&config).expect_err("--check refuses it");
    let Err(started) = start(config) else {
        panic!("serve refuses it");
    };
    for err in [checked.to_string(), started.to_string()] {
        assert!(err.starts_with("dns: hosts file"), "{err}");
        assert!(err.contains(&missing.display().to_string()), "{err}");
    }
    // Nothing was opened: not even the data directory.
    assert!(!dir.join("data").exists());
}

/// A dialog's request whose Route names this proxy without its proof (or
/// with its proof of another dialog's next hop), then a name: refused at
/// once (with the name server silent, a request
/// that waited for the name would get no answer for 30 s), and its name
/// is not asked of the name server, so a peer cannot make the proxy look
/// up names of its choosing, nor fill the resolver's questions.
#[test]
fn an_unproven_route_is_refused_before_its_name_is_looked_up() {
    let dir = tempdir("dns-unproven");
    let (silent, server) = silent_proxy(&dir, Duration::from_secs(30), 1);
    let ua = socket();
    let forged = message(&ua, &server, "sip:anything.test:5999;lr", 1).replacen(
        &format!(";{}=", tokens::HOPS_PARAM),
        ";x=",
        1,
    );
    ua.send_to(forged.as_bytes(), server.handle.local_addr())
        .expect("send");
    let r = recv(&ua);
    assert!(r.starts_with("SIP/2.0 403"), "{r}");
    // This proxy's proof of a dialog with another next hop: it names
    // other.test, so anything.test is not looked up either (the answer
    // would tell the peer whether the name exists).
    let elsewhere = message(&ua, &server, "sip:other.test:5999;lr", 3).replacen(
        "other.test",
        "anything.test",
        1,
    );
    ua.send_to(elsewhere.as_bytes(), server.handle.local_addr())
        .expect("send");
    let r = recv(&ua);
    assert!(r.starts_with("SIP/2.0 403"), "{r}");
    let m = &server.handle.shared().metrics;
    assert_eq!(m.unproven_routes.load(Ordering::Relaxed), 2);
    // The first question the name server gets is the next, proven
    // request's: the refused one asked none.
    let proven = message(&ua, &server, "sip:second.test:5999;lr", 2);
    ua.send_to(proven.as_bytes(), server.handle.local_addr())
        .expect("send");
    let mut q = [0u8; 512];
    let n = silent.recv(&mut q).expect("a question");
    let names = |label: &[u8]| q[..n].windows(label.len()).any(|w| w == label);
    assert!(
        names(b"\x06second\x04test") && !names(b"anything"),
        "{:?}",
        String::from_utf8_lossy(&q[..n])
    );
}

/// The names a request asks the resolver about, from its question's
/// bytes (`\x05flood\x01`…): the labels, dot-joined.
fn asked_name(q: &[u8]) -> String {
    let mut at = 12;
    let mut labels = Vec::new();
    while at < q.len() && q[at] != 0 {
        let len = usize::from(q[at]);
        labels.push(String::from_utf8_lossy(&q[at + 1..at + 1 + len]).into_owned());
        at += 1 + len;
    }
    labels.join(".")
}

/// One source (here held to the guard's limits: loopback not exempt)
/// has at most its share of the resolver's questions under way at once
/// (8 of 128): its next new name gets 503 at once, while another
/// source's name is still asked. Otherwise one party holding a dialog's
/// proof could ask names until no one else's call could be resolved.
#[test]
fn one_source_has_at_most_its_share_of_the_resolvers_questions() {
    let dir = tempdir("dns-share");
    let silent = socket();
    let dns = DnsSettings {
        servers: vec![silent.local_addr().expect("bound")],
        hosts: None,
        timeout: Duration::from_secs(30),
        attempts: 1,
        ..DnsSettings::default()
    };
    let mut config = proxy_config(&dir, dns);
    config.guard.exempt_loopback = false;
    let server = start(config).expect("server starts");
    let at = server.handle.local_addr();
    let ua = socket();
    let share = sipsec_server::proto::names::MAX_JOBS_PER_SOURCE as u32;
    let mut asked = Vec::new();
    let mut q = [0u8; 512];
    for i in 0..share {
        let route = format!("sip:flood{i}.test:5999;lr");
        ua.send_to(message(&ua, &server, &route, 100 + i).as_bytes(), at)
            .expect("send");
        let n = silent.recv(&mut q).expect("a question");
        asked.push(asked_name(&q[..n]));
    }
    asked.sort();
    let mut want: Vec<String> = (0..share).map(|i| format!("flood{i}.test")).collect();
    want.sort();
    assert_eq!(asked, want);
    let over = message(&ua, &server, "sip:flood-more.test:5999;lr", 200);
    ua.send_to(over.as_bytes(), at).expect("send");
    let refused = recv(&ua);
    assert!(refused.starts_with("SIP/2.0 503"), "{refused}");
    // Another source still has its names asked.
    let other = UdpSocket::bind("127.0.0.2:0").expect("socket");
    let m = message(&other, &server, "sip:other.test:5999;lr", 300);
    other.send_to(m.as_bytes(), at).expect("send");
    let n = silent.recv(&mut q).expect("the other source's question");
    assert_eq!(asked_name(&q[..n]), "other.test");
}

#[test]
fn requests_waiting_for_a_name_are_answered_when_the_server_stops() {
    let dir = tempdir("dns-stop");
    let (silent, server) = silent_proxy(&dir, Duration::from_secs(30), 1);
    let ua = socket();
    let route = "sip:waiting.test:5999;lr";
    ua.send_to(
        message(&ua, &server, route, 1).as_bytes(),
        server.handle.local_addr(),
    )
    .expect("send");
    // The query is out: the request waits for it.
    let mut buf = [0u8; 512];
    silent.recv_from(&mut buf).expect("a query arrived");
    server.handle.shutdown();
    let resp = recv(&ua);
    assert!(resp.starts_with("SIP/2.0 503"), "{resp}");
    assert!(resp.contains("Retry-After"), "{resp}");
}

/// Reads one SIP message without a body from `s`.
fn read_request(s: &mut std::net::TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).expect("the request arrives");
        assert!(n > 0, "connection closed before a request");
        got.extend_from_slice(&buf[..n]);
    }
    got
}

#[test]
fn a_stateful_proxy_tries_the_next_address_when_one_fails() {
    let dir = tempdir("dns-failover");
    // SRV for UDP: first a target that takes requests and never answers,
    // then one that answers. For TCP: first a port nobody listens on.
    let silent = socket();
    let live = socket();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let closed_port = closed.local_addr().expect("bound").port();
    drop(closed);
    let live_tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let live_tcp_port = live_tcp.local_addr().expect("bound").port();
    let srv = |proto: &str, port: u16, priority: u16| {
        format!("--srv-host=_sip._{proto}.pool.test,one.test,{port},{priority},5")
    };
    let ns = NameServer::start(&[
        "--host-record=one.test,127.0.0.1".into(),
        srv("udp", port_of(&silent), 0),
        srv("udp", port_of(&live), 10),
        srv("tcp", closed_port, 0),
        srv("tcp", live_tcp_port, 10),
    ]);
    let server = stateful_proxy(&dir, ns.addr, Some(Duration::from_millis(300)));
    let proxy = &server;
    let ua = socket();

    // The first address is silent: after 300 ms the request goes to the
    // second, as a new transaction (another branch), and is answered.
    ua.send_to(
        message(&ua, proxy, "sip:pool.test;lr", 1).as_bytes(),
        proxy.handle.local_addr(),
    )
    .expect("send");
    let first = recv(&silent);
    let first = Message::parse(first.as_bytes()).expect("parses");
    assert_eq!(first.call_id(), "dns-1");
    let mut buf = vec![0u8; 65_535];
    let (n, from) = live
        .recv_from(&mut buf)
        .expect("the second address gets it");
    let second = Message::parse(&buf[..n]).expect("parses");
    assert_eq!(second.call_id(), "dns-1");
    assert_ne!(second.top_via().branch(), first.top_via().branch());
    let ok = ok_for(&second);
    live.send_to(&ok, from).expect("answer");
    let resp = recv(&ua);
    assert!(
        resp.starts_with("SIP/2.0 200") && resp.contains("dns-1"),
        "{resp}"
    );
    // The next request goes to the second address at once: the silent
    // one is skipped for now.
    route_through(&ua, proxy, "sip:pool.test;lr", &live, 2).expect("forwarded");
    silent
        .set_read_timeout(Some(Duration::from_millis(600)))
        .expect("timeout");
    assert!(
        silent.recv_from(&mut buf).is_err(),
        "nothing more for the silent address"
    );

    // Over TCP the first address refuses the connection: the second
    // gets the request at once, and its answer reaches the caller.
    ua.send_to(
        message(&ua, proxy, "sip:pool.test;transport=tcp;lr", 3).as_bytes(),
        proxy.handle.local_addr(),
    )
    .expect("send");
    live_tcp.set_nonblocking(true).expect("nonblocking");
    let until = Instant::now() + Duration::from_secs(5);
    let mut conn = loop {
        match live_tcp.accept() {
            Ok((c, _)) => break c,
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!(
                "the proxy did not connect to the second address: {e}; {}",
                recv(&ua)
            ),
        }
    };
    conn.set_nonblocking(false).expect("blocking");
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let req = read_request(&mut conn);
    let req = Message::parse(&req).expect("parses");
    assert_eq!(req.call_id(), "dns-3");
    let ok = ok_for(&req);
    conn.write_all(&ok).expect("answer");
    let resp = recv(&ua);
    assert!(
        resp.starts_with("SIP/2.0 200") && resp.contains("dns-3"),
        "{resp}"
    );
    let m = &server.handle.shared().metrics;
    assert_eq!(
        m.hop_failovers.load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    server.handle.shutdown();
}

/// An SRV answer too large for UDP comes cut short (TC): it is asked
/// again over TCP (RFC 7766), where the only target that works is.
#[test]
fn a_truncated_answer_is_asked_again_over_tcp() {
    let dir = tempdir("dns-tcp");
    let peer = socket();
    // 39 targets without addresses fill the UDP answer; the one that
    // works is listed last, but comes first by priority.
    let mut records: Vec<String> = (0..39)
        .map(|i| format!("--srv-host=_sip._udp.big.test,no-address-number-{i}.test,5060,10,5"))
        .collect();
    records.push("--host-record=works.test,127.0.0.1".into());
    records.push(format!(
        "--srv-host=_sip._udp.big.test,works.test,{},0,5",
        port_of(&peer)
    ));
    let ns = NameServer::start(&records);
    // What UDP carries: part of the records, with TC set; more of them
    // when the query offers EDNS(0)'s larger payload, as the resolver's do.
    let probe = socket();
    let ask = |edns: bool| {
        let mut q = Vec::new();
        dns::query(7, "_sip._udp.big.test", Kind::Srv, &mut q).expect("query");
        if edns {
            dns::add_edns(&mut q, dns::EDNS_PAYLOAD);
        }
        probe.send_to(&q, ns.addr).expect("send");
        let mut buf = [0u8; 65_535];
        let (n, _) = probe.recv_from(&mut buf).expect("answer");
        assert!(n <= usize::from(if edns { dns::EDNS_PAYLOAD } else { 512 }));
        dns::parse(&buf[..n], 7, "_sip._udp.big.test", Kind::Srv).expect("parses")
    };
    let (plain, edns) = (ask(false), ask(true));
    assert!(
        plain.truncated && edns.truncated && edns.records.len() < 40,
        "{edns:?}"
    );
    assert!(edns.records.len() > plain.records.len(), "{edns:?}");
    let server = proxy(
        &dir,
        DnsSettings {
            servers: vec![ns.addr],
            hosts: None,
            timeout: Duration::from_millis(500),
            ..DnsSettings::default()
        },
    );
    route_through(&socket(), &server, "sip:big.test;lr", &peer, 1)
        .expect("forwarded to the target only TCP told of");
    server.handle.shutdown();
}

/// What [`tiny_name_server`] saw of a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Asked {
    /// It carried an EDNS(0) OPT record.
    opt: bool,
    /// It set the AD bit (asking whether the answer was validated).
    ad: bool,
}

/// A name server answering every A question with 127.0.0.1, killed when
/// `stop` is set. `edns: false` makes it one from before EDNS(0) (RFC
/// 6891 §7): FORMERR to a query with an OPT record. `validated` sets the
/// AD bit in its answers, as a validating resolver does for signed
/// names. `strays` datagrams that answer no question (another ID) go
/// before each answer. Records what each query asked.
fn tiny_name_server(
    stop: Arc<AtomicBool>,
    edns: bool,
    validated: bool,
    strays: usize,
) -> (SocketAddr, Arc<Mutex<Vec<Asked>>>) {
    let sock = socket();
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    let addr = sock.local_addr().expect("bound");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = sock.recv_from(&mut buf) else {
                continue;
            };
            let q = &buf[..n];
            let asked = Asked {
                opt: n > 12 && q[10..12] != [0, 0],
                ad: n > 12 && q[3] & 0x20 != 0,
            };
            log.lock().expect("log").push(asked);
            // The question: the query without its OPT record (11 bytes).
            let question = &q[12..if asked.opt { n - 11 } else { n }];
            let mut a = q[..2].to_vec();
            if asked.opt && !edns {
                a.extend_from_slice(&[0x81, 0x81, 0, 1, 0, 0, 0, 0, 0, 0]);
                a.extend_from_slice(question);
            } else {
                let flags = if validated { 0xa0 } else { 0x80 };
                a.extend_from_slice(&[0x81, flags, 0, 1, 0, 1, 0, 0, 0, 0]);
                a.extend_from_slice(question);
                a.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1]);
            }
            let mut stray = a.clone();
            stray[0] ^= 0xff;
            for _ in 0..strays {
                let _ = sock.send_to(&stray, from);
            }
            let _ = sock.send_to(&a, from);
        }
    });
    (addr, seen)
}

#[test]
fn a_name_server_without_edns_is_asked_again_without_it() {
    let dir = tempdir("dns-old");
    let stop = Arc::new(AtomicBool::new(false));
    let (ns, seen) = tiny_name_server(Arc::clone(&stop), false, false, 0);
    let server = proxy(
        &dir,
        DnsSettings {
            servers: vec![ns],
            hosts: None,
            timeout: Duration::from_millis(500),
            // One try: the question asked again without EDNS(0) is not
            // a second try.
            attempts: 1,
            ..DnsSettings::default()
        },
    );
    let peer = socket();
    let ua = socket();
    let to = &server;
    route_through(
        &ua,
        to,
        &format!("sip:old.test:{};lr", port_of(&peer)),
        &peer,
        1,
    )
    .expect("forwarded to the address the plain query found");
    let opts = |seen: &Mutex<Vec<Asked>>| -> Vec<bool> {
        seen.lock().expect("log").iter().map(|a| a.opt).collect()
    };
    assert_eq!(opts(&seen), [true, false]);
    // The server is remembered: another name is asked without at once.
    route_through(
        &ua,
        to,
        &format!("sip:older.test:{};lr", port_of(&peer)),
        &peer,
        2,
    )
    .expect("forwarded");
    assert_eq!(opts(&seen), [true, false, false]);
    server.handle.shutdown();
    stop.store(true, Ordering::Relaxed);
}

/// Forged answers (another question's ID) queued ahead of the real one,
/// more than the resolver reads from a socket per turn: it reads them
/// over several turns and finds the answer behind them, with no second
/// try.
#[test]
fn an_answer_behind_a_pile_of_forged_ones_is_found() {
    let dir = tempdir("dns-strays");
    let stop = Arc::new(AtomicBool::new(false));
    let (ns, seen) = tiny_name_server(Arc::clone(&stop), true, false, 150);
    let server = proxy(
        &dir,
        DnsSettings {
            servers: vec![ns],
            hosts: None,
            timeout: Duration::from_secs(2),
            attempts: 1,
            ..DnsSettings::default()
        },
    );
    let peer = socket();
    route_through(
        &socket(),
        &server,
        &format!("sip:strays.test:{};lr", port_of(&peer)),
        &peer,
        1,
    )
    .expect("forwarded to the address the answer gave");
    assert_eq!(seen.lock().expect("log").len(), 1, "asked once");
    server.handle.shutdown();
    stop.store(true, Ordering::Relaxed);
}

/// Nobody listens at the first address (ICMP port unreachable): the
/// request goes to the second at once, without waiting for silence.
#[test]
fn an_unreachable_address_gives_way_at_once() {
    let dir = tempdir("dns-icmp");
    let closed = socket();
    let closed_port = port_of(&closed);
    drop(closed);
    let live = socket();
    let ns = NameServer::start(&[
        "--host-record=one.test,127.0.0.1".into(),
        format!("--srv-host=_sip._udp.pool.test,one.test,{closed_port},0,5"),
        format!(
            "--srv-host=_sip._udp.pool.test,one.test,{},10,5",
            port_of(&live)
        ),
    ]);
    // Only a failure moves the request on: no timer for silence (and
    // timer F would take 32 s).
    let server = stateful_proxy(&dir, ns.addr, None);
    route_through(&socket(), &server, "sip:pool.test;lr", &live, 1)
        .expect("forwarded to the second address");
    let m = &server.handle.shared().metrics;
    let count = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(count(&m.udp_unreachable), 1);
    assert_eq!(count(&m.hop_failovers), 1);
    server.handle.shutdown();
}

/// `require_dnssec`: only answers a validating resolver vouches for (the
/// AD bit) are taken; queries ask for it.
#[test]
fn with_require_dnssec_only_validated_answers_are_taken() {
    let dir = tempdir("dns-ad");
    let peer = socket();
    let route = format!("sip:signed.test:{};lr", port_of(&peer));
    for validated in [true, false] {
        let stop = Arc::new(AtomicBool::new(false));
        let (ns, seen) = tiny_name_server(Arc::clone(&stop), true, validated, 0);
        let server = proxy(
            &dir,
            DnsSettings {
                servers: vec![ns],
                hosts: None,
                timeout: Duration::from_millis(300),
                require_dnssec: true,
                ..DnsSettings::default()
            },
        );
        let routed = route_through(&socket(), &server, &route, &peer, 1);
        if validated {
            routed.expect("forwarded to the validated address");
        } else {
            let refused = routed.expect_err("an answer not validated is not taken");
            assert!(refused.starts_with("SIP/2.0 503"), "{refused}");
        }
        let seen = seen.lock().expect("log").clone();
        assert!(
            !seen.is_empty() && seen.iter().all(|a| a.ad && a.opt),
            "{seen:?}"
        );
        // Refused answers are retried like a failed server's: two tries.
        assert_eq!(seen.len(), if validated { 1 } else { 2 });
        let m = &server.handle.shared().metrics;
        let refused = m.dns_unvalidated.load(Ordering::Relaxed);
        assert_eq!(refused, if validated { 0 } else { 2 });
        server.handle.shutdown();
        stop.store(true, Ordering::Relaxed);
    }
}
