//! The server over real loopback TCP connections.

#[path = "support/scratch.rs"]
mod scratch;
#[path = "support/served.rs"]
mod served;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use served::Served;
use sip_core::framing::{frame, Frame};
use sip_core::{Limits, Message};
use sipsec_server::{Config, Mode};

fn server(mode: Mode, name: &str) -> Served {
    server_with(mode, name, |_| {})
}

fn server_with(mode: Mode, name: &str, tune: impl FnOnce(&mut Config)) -> Served {
    let mut config = Config {
        mode,
        udp: "127.0.0.1:0".parse().expect("addr"),
        tcp: Some("127.0.0.1:0".parse().expect("addr")),
        http: None,
        advertise: "127.0.0.1:0".parse().expect("addr"),
        workers: 2,
        ..Config::default()
    };
    tune(&mut config);
    Served::start(&format!("tcp-{name}"), config).expect("server starts")
}

/// Reads one framed message from a stream.
fn read_message(s: &mut TcpStream, buf: &mut Vec<u8>) -> String {
    let mut chunk = [0u8; 4096];
    loop {
        match frame(buf, &Limits::DEFAULT) {
            Ok(Frame::Message(n)) => {
                let m = String::from_utf8(buf[..n].to_vec()).expect("utf-8");
                buf.drain(..n);
                return m;
            }
            Ok(Frame::KeepAlive(n)) => {
                buf.drain(..n);
            }
            Err(_) => {
                let n = s.read(&mut chunk).expect("read");
                assert!(n > 0, "connection closed early");
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

fn register(
    server: SocketAddr,
    user: &str,
    contact: &str,
    via_proto: &str,
    via_port: u16,
) -> String {
    format!(
        "REGISTER sip:{server} SIP/2.0\r\nVia: SIP/2.0/{via_proto} 127.0.0.1:{via_port};branch=z9hG4bK{user}r\r\nFrom: <sip:{user}@{server}>;tag=1\r\nTo: <sip:{user}@{server}>\r\nCall-ID: {user}-tcp\r\nCSeq: 1 REGISTER\r\nContact: {contact}\r\nContent-Length: 0\r\n\r\n"
    )
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s
}

#[test]
fn register_keepalive_and_framing_errors() {
    let s = server(Mode::Registrar, "reg");
    let addr = s.handle.tcp_addr().expect("tcp on");
    assert_eq!(
        addr.port(),
        s.handle.local_addr().port(),
        "one port for both transports"
    );
    let mut c = connect(addr);
    let mut buf = Vec::new();
    let msg = register(
        addr,
        "alice",
        "<sip:alice@192.0.2.1;transport=tcp>",
        "TCP",
        9,
    );
    // Two messages in one write, split across another: framing must cope.
    let two = format!("{msg}{}", msg.replace("CSeq: 1", "CSeq: 2"));
    c.write_all(&two.as_bytes()[..100]).expect("write");
    std::thread::sleep(Duration::from_millis(50));
    c.write_all(&two.as_bytes()[100..]).expect("write");
    for cseq in ["CSeq: 1 REGISTER", "CSeq: 2 REGISTER"] {
        let r = read_message(&mut c, &mut buf);
        assert!(
            r.starts_with("SIP/2.0 200 OK\r\n") && r.contains(cseq),
            "{r}"
        );
    }
    // RFC 5626 keep-alive: CRLFCRLF ping, CRLF pong.
    c.write_all(b"\r\n\r\n").expect("ping");
    let mut pong = [0u8; 2];
    c.read_exact(&mut pong).expect("pong");
    assert_eq!(&pong, b"\r\n");
    // A ping in two reads is a ping too.
    c.write_all(b"\r\n").expect("half a ping");
    std::thread::sleep(Duration::from_millis(50));
    c.write_all(b"\r\n").expect("the other half");
    c.read_exact(&mut pong).expect("pong to the split ping");
    assert_eq!(&pong, b"\r\n");
    // A message without Content-Length cannot be framed: 400, then close.
    c.write_all(msg.replace("Content-Length: 0\r\n", "").as_bytes())
        .expect("write");
    let r = read_message(&mut c, &mut buf);
    assert!(r.starts_with("SIP/2.0 400 Bad Request\r\n"), "{r}");
    assert!(r.contains("missing mandatory Content-Length"), "{r}");
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    s.handle.shutdown();
}

#[test]
fn proxy_between_tcp_and_udp() {
    let s = server(Mode::Proxy, "proxy");
    let tcp = s.handle.tcp_addr().expect("tcp on");
    let udp = s.handle.local_addr();

    // Callee reachable over TCP: registers a ;transport=tcp contact.
    let callee = TcpListener::bind("127.0.0.1:0").expect("listen");
    let callee_port = callee.local_addr().expect("addr").port();
    let reg = UdpSocket::bind("127.0.0.1:0").expect("udp");
    reg.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let contact = format!("<sip:bob@127.0.0.1:{callee_port};transport=tcp>");
    reg.send_to(
        register(
            udp,
            "bob",
            &contact,
            "UDP",
            reg.local_addr().expect("addr").port(),
        )
        .as_bytes(),
        udp,
    )
    .expect("send");
    let mut b = [0u8; 4096];
    let (n, _) = reg.recv_from(&mut b).expect("200");
    assert!(b[..n].starts_with(b"SIP/2.0 200 OK"));

    // Caller over TCP.
    let mut caller = connect(tcp);
    let caller_port = caller.local_addr().expect("addr").port();
    let invite = format!(
        "INVITE sip:bob@{udp} SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:{caller_port};branch=z9hG4bKtcp1\r\nMax-Forwards: 70\r\nFrom: <sip:alice@{udp}>;tag=a\r\nTo: <sip:bob@{udp}>\r\nCall-ID: tcp-call\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@127.0.0.1:{caller_port};transport=tcp>\r\nContent-Length: 0\r\n\r\n"
    );
    caller.write_all(invite.as_bytes()).expect("invite");
    let (mut uas, _) = callee.accept().expect("proxy connects to the callee");
    uas.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut ubuf = Vec::new();
    let fwd = read_message(&mut uas, &mut ubuf);
    let f = Message::parse(fwd.as_bytes()).expect("forwarded parses");
    assert_eq!(f.top_via().transport_str(), "TCP");
    let vias: Vec<_> = f.vias().collect();
    assert_eq!(
        vias[1].rport(),
        Some(Some(caller_port)),
        "forced rport finds the caller's connection"
    );
    // The callee answers on the same connection; the caller gets it on its own.
    let mut resp = Vec::new();
    sip_core::writer::write_response(
        &mut resp,
        &f,
        sip_core::StatusCode::OK,
        &sip_core::writer::ResponseOptions {
            to_tag: Some("b"),
            ..Default::default()
        },
    );
    uas.write_all(&resp).expect("200");
    let mut cbuf = Vec::new();
    let r = read_message(&mut caller, &mut cbuf);
    let r = Message::parse(r.as_bytes()).expect("parses");
    assert_eq!(r.status(), Some(sip_core::StatusCode::OK));
    assert_eq!(r.via_count(), 1);
    s.handle.shutdown();
}

/// A TCP listener on a port of its own (`--tcp ADDR`, not the UDP port)
/// is this server's address too: a request whose Request-URI names it is
/// routed to the registered user, not refused as a relay (it was: 403).
#[test]
fn a_request_uri_naming_a_tcp_port_of_its_own_is_local() {
    // A port free now (another program could take it before the server
    // does; then `start` fails and says so).
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config = Config {
        mode: Mode::Proxy,
        udp: "127.0.0.1:0".parse().expect("addr"),
        tcp: Some(SocketAddr::from(([127, 0, 0, 1], port))),
        http: None,
        advertise: "127.0.0.1:0".parse().expect("addr"),
        workers: 1,
        ..Config::default()
    };
    let s = Served::start("tcp-ownport", config).expect("server starts");
    let tcp = s.handle.tcp_addr().expect("tcp on");
    let udp = s.handle.local_addr();
    assert_ne!(tcp.port(), udp.port(), "the TCP listener has its own port");
    let callee = UdpSocket::bind("127.0.0.1:0").expect("udp");
    callee
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let callee_port = callee.local_addr().expect("addr").port();
    let contact = format!("<sip:bob@127.0.0.1:{callee_port}>");
    callee
        .send_to(
            register(udp, "bob", &contact, "UDP", callee_port).as_bytes(),
            udp,
        )
        .expect("send");
    let mut b = [0u8; 4096];
    let (n, _) = callee.recv_from(&mut b).expect("200");
    assert!(b[..n].starts_with(b"SIP/2.0 200 OK"));
    let mut caller = connect(tcp);
    let caller_port = caller.local_addr().expect("addr").port();
    let invite = format!(
        "INVITE sip:bob@{tcp} SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:{caller_port};branch=z9hG4bKown1\r\nMax-Forwards: 70\r\nFrom: <sip:alice@{tcp}>;tag=a\r\nTo: <sip:bob@{tcp}>\r\nCall-ID: own-port\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@127.0.0.1:{caller_port};transport=tcp>\r\nContent-Length: 0\r\n\r\n"
    );
    caller.write_all(invite.as_bytes()).expect("invite");
    let (n, _) = callee.recv_from(&mut b).expect("the INVITE reaches bob");
    let fwd = String::from_utf8_lossy(&b[..n]).into_owned();
    assert!(
        fwd.starts_with(&format!("INVITE sip:bob@127.0.0.1:{callee_port} SIP/2.0")),
        "{fwd}"
    );
    s.handle.shutdown();
}

/// A TCP target that never answers must not stall the UDP worker: a
/// request sent right behind the INVITEs to it is answered while their
/// connects (2 s timeout) are still pending. A blocked worker could only
/// answer after they had all timed out.
///
/// The unanswering target stays on loopback: a listener whose accept queue
/// is full makes Linux drop further SYNs, so connects to it hang.
#[test]
fn unreachable_tcp_target_does_not_stall_workers() {
    // One peer's datagrams on one worker (by its address, not by each
    // call's Call-ID), so that the REGISTER queues behind the INVITEs.
    let s = server_with(Mode::Proxy, "blackhole", |c| {
        c.udp_balance = sipsec_server::config::UdpBalance::Flow;
    });
    let udp = s.handle.local_addr();
    let c = UdpSocket::bind("127.0.0.1:0").expect("udp");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let port = c.local_addr().expect("addr").port();
    let mut b = [0u8; 4096];
    let blackhole =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    blackhole
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .expect("bind");
    blackhole.listen(0).expect("listen");
    let hole = blackhole
        .local_addr()
        .expect("addr")
        .as_socket()
        .expect("inet");
    // Fill the accept queue (never accepted), so later SYNs are dropped.
    let fillers: Vec<_> = (0..4)
        .filter_map(|_| TcpStream::connect_timeout(&hole, Duration::from_millis(300)).ok())
        .collect();
    assert!(!fillers.is_empty());
    let contact = format!("<sip:ghost@{hole};transport=tcp>");
    c.send_to(
        register(udp, "ghost", &contact, "UDP", port).as_bytes(),
        udp,
    )
    .expect("send");
    let (n, _) = c.recv_from(&mut b).expect("200");
    assert!(b[..n].starts_with(b"SIP/2.0 200 OK"));
    let invite = format!(
        "INVITE sip:ghost@{udp} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{port};branch=z9hG4bKbh1\r\nMax-Forwards: 70\r\nFrom: <sip:a@{udp}>;tag=a\r\nTo: <sip:ghost@{udp}>\r\nCall-ID: bh\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
    );
    for i in 0..4 {
        c.send_to(invite.replace("bh1", &format!("bh{i}")).as_bytes(), udp)
            .expect("send");
    }
    // A REGISTER right behind them is answered at once, not after connect timeouts.
    c.send_to(
        register(udp, "alive", "<sip:alive@192.0.2.2>", "UDP", port).as_bytes(),
        udp,
    )
    .expect("send");
    let (n, _) = c.recv_from(&mut b).expect("answer");
    let pending = s
        .handle
        .shared()
        .metrics
        .tcp_connects_pending
        .load(std::sync::atomic::Ordering::Acquire);
    assert!(
        b[..n].starts_with(b"SIP/2.0 200 OK"),
        "{}",
        String::from_utf8_lossy(&b[..n])
    );
    assert!(
        pending > 0,
        "the connects must still be in progress when the REGISTER is answered"
    );
    s.handle.shutdown();
}
