//! The null responder over AF_XDP and over its socket, on a veth pair in
//! a network namespace of the test's own: each answers what is sent to it
//! through the pair (run as root, as CI runs; `./setup.sh` installs
//! iproute2).

use std::net::UdpSocket;
use std::time::Duration;

use sip_core::{Message, StatusCode};
use sipsec_bench::xdp::{NullServer, Path, Veth};

fn register(n: u32, local: std::net::SocketAddr, to: std::net::SocketAddr) -> String {
    format!(
        "REGISTER sip:{to} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK-t{n}\r\nMax-Forwards: 70\r\nFrom: <sip:u{n}@{to}>;tag=f{n}\r\nTo: <sip:u{n}@{to}>\r\nCall-ID: c{n}\r\nCSeq: 1 REGISTER\r\nContact: <sip:u{n}@{local}>\r\nContent-Length: 0\r\n\r\n"
    )
}

/// Sends 200 REGISTERs in bursts of 20 and checks each is answered once,
/// with its own Call-ID.
fn answers_each_once(path: Path) {
    let veth = Veth::create().expect("namespace and veth pair");
    let server = NullServer::start(&veth, path, 5060, None).expect("responder");
    let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let local = sock.local_addr().unwrap();
    let mut buf = [0u8; 4096];
    for burst in 0..10 {
        let ids: Vec<u32> = (burst * 20..burst * 20 + 20).collect();
        for n in &ids {
            sock.send_to(register(*n, local, server.addr).as_bytes(), server.addr)
                .unwrap();
        }
        let mut seen = Vec::new();
        for _ in &ids {
            let len = sock.recv(&mut buf).expect("an answer");
            let m = Message::parse(&buf[..len]).expect("a SIP response");
            assert_eq!(m.status(), Some(StatusCode::OK));
            seen.push(m.call_id().to_owned());
        }
        seen.sort();
        let mut want: Vec<String> = ids.iter().map(|n| format!("c{n}")).collect();
        want.sort();
        assert_eq!(seen, want, "{}", path.as_str());
    }
    // The probe OPTIONS count too.
    let (answered, dropped) = server.stop();
    assert!(answered >= 200, "{answered} answered");
    assert_eq!(dropped, 0, "frames dropped");
}

#[test]
fn af_xdp_answers_through_the_veth() {
    answers_each_once(Path::Xdp);
}

#[test]
fn the_socket_path_answers_through_the_veth() {
    answers_each_once(Path::Socket);
}
