//! One source cannot fill the stateful proxy's transaction table: each
//! source's transactions hold at most a sixteenth of its memory
//! (`max_transaction_bytes`). A sender of large MESSAGEs to a registered
//! phone that never answers (each kept for timer F, 32 s, with its
//! bytes) is refused 503 past its share, while another source's
//! requests are still forwarded. Real sockets on loopback (held to the
//! guard's limits here).

#[path = "support/peers.rs"]
mod peers;
#[path = "support/scratch.rs"]
mod scratch;
#[path = "support/served.rs"]
mod served;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering::Relaxed;

use peers::udp_at;
use served::Served;
use sipsec_server::{Config, Mode};

fn recv(s: &UdpSocket) -> String {
    let mut b = vec![0u8; 65_535];
    let n = s.recv(&mut b).expect("a message");
    String::from_utf8_lossy(&b[..n]).into_owned()
}

/// A MESSAGE of `size` body bytes from `from` to bob.
fn message(from: &UdpSocket, n: u32, size: usize) -> String {
    let me = from.local_addr().expect("local");
    let body = "x".repeat(size);
    format!(
        "MESSAGE sip:bob@example.com SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-ts{n};rport\r\n\
         Max-Forwards: 70\r\nFrom: <sip:carol@elsewhere.test>;tag=c{n}\r\nTo: <sip:bob@example.com>\r\n\
         Call-ID: ts-{n}\r\nCSeq: 1 MESSAGE\r\nContent-Type: text/plain\r\n\
         Content-Length: {size}\r\n\r\n{body}"
    )
}

#[test]
fn one_source_holds_at_most_its_share_of_the_transaction_table() {
    let mut config = Config {
        mode: Mode::Proxy,
        stateful: true,
        udp: "127.0.0.1:0".parse().expect("addr"),
        tcp: None,
        http: None,
        domains: vec!["example.com".into()],
        insecure_no_auth: true,
        max_transaction_bytes: 4 << 20,
        workers: 1,
        ..Config::default()
    };
    config.guard.exempt_loopback = false;
    let s = Served::start("transaction-share", config).expect("server starts");
    let srv: SocketAddr = s.handle.local_addr();
    // Bob's phone is registered and never answers.
    let bob = udp_at("127.0.0.1:0");
    let at = bob.local_addr().expect("local");
    let register = format!(
        "REGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/UDP {at};branch=z9hG4bK-reg\r\n\
         Max-Forwards: 70\r\nFrom: <sip:bob@example.com>;tag=b\r\nTo: <sip:bob@example.com>\r\n\
         Call-ID: ts-reg\r\nCSeq: 1 REGISTER\r\nContact: <sip:bob@{at}>\r\nExpires: 600\r\n\
         Content-Length: 0\r\n\r\n"
    );
    bob.send_to(register.as_bytes(), srv).expect("send");
    assert!(recv(&bob).starts_with("SIP/2.0 200 "));
    // 30 KB MESSAGEs, each kept twice (as received and as forwarded):
    // the share (256 KiB) holds four. After each, a small MESSAGE from
    // another source: with one worker taking datagrams in turn, bob gets
    // the big one first when it was forwarded, else only the small one.
    let sender = udp_at("127.0.0.1:0");
    let prober = udp_at("127.0.0.2:0");
    let mut forwarded = 0;
    for n in 0..16 {
        sender
            .send_to(message(&sender, n, 30_000).as_bytes(), srv)
            .expect("send");
        prober
            .send_to(message(&prober, 1000 + n, 100).as_bytes(), srv)
            .expect("send");
        let first = recv(&bob);
        assert!(first.starts_with("MESSAGE "), "{first}");
        if first.contains(&format!("Call-ID: ts-{n}\r\n")) {
            forwarded += 1;
            let probe = recv(&bob);
            assert!(probe.contains(&format!("ts-{}", 1000 + n)), "{probe}");
            continue;
        }
        assert!(first.contains(&format!("ts-{}", 1000 + n)), "{first}");
        break;
    }
    assert!(forwarded < 16, "never refused");
    let refused = recv(&sender);
    assert!(
        refused.starts_with("SIP/2.0 503 ") && refused.contains("from this source"),
        "{refused}"
    );
    assert!(
        forwarded >= 2,
        "{forwarded} forwarded before the share ran out"
    );
    let m = &s.handle.shared().metrics;
    assert_eq!(m.transactions_over_share.load(Relaxed), 1);
}
