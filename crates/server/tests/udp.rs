//! The UDP server answers over a real loopback socket.

use std::net::UdpSocket;
use std::time::Duration;

use sip_core::{Message, StatusCode};
use sipsec_server::UdpServer;

fn exchange(server: std::net::SocketAddr, msg: &[u8]) -> Vec<u8> {
    let c = UdpSocket::bind("127.0.0.1:0").expect("client socket");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    c.send_to(msg, server).expect("send");
    let mut buf = vec![0u8; 65_535];
    let (n, _) = c.recv_from(&mut buf).expect("server answers");
    buf.truncate(n);
    buf
}

#[test]
fn options_malformed_and_unknown() {
    let h = UdpServer::new("127.0.0.1:0".parse().expect("addr"), 2)
        .start()
        .expect("binds");
    let addr = h.local_addr();
    let ok = exchange(addr, b"OPTIONS sip:s SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:s>\r\nCall-ID: c1\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n");
    let r = Message::parse(&ok).expect("response parses");
    assert_eq!(r.status(), Some(StatusCode::OK));
    assert_eq!(r.call_id(), "c1");

    let bad = exchange(addr, b"OPTIONS sip:s SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1;branch=z9hG4bK2\r\nFrom: <sip:a@h>;;tag=1\r\nTo: <sip:s>\r\nCall-ID: c2\r\nCSeq: 1 OPTIONS\r\n\r\n");
    // The 400 echoes the malformed From as received (RFC 3261 §8.2.6.2).
    let text = String::from_utf8(bad).expect("utf-8");
    assert!(text.starts_with("SIP/2.0 400 Bad Request\r\n"), "{text}");
    assert!(text.contains("Call-ID: c2\r\n"));
    assert!(
        text.contains("Warning: 399 sipsec \"invalid From header"),
        "{text}"
    );

    let unknown = exchange(addr, b"FOO sip:s SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1;branch=z9hG4bK3\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:s>\r\nCall-ID: c3\r\nCSeq: 1 FOO\r\n\r\n");
    assert_eq!(
        Message::parse(&unknown).expect("parses").status(),
        Some(StatusCode::NOT_IMPLEMENTED)
    );
    h.shutdown();
}
