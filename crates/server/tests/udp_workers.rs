//! One busy peer over two UDP workers (`udp_balance`): its datagrams use
//! both, every transaction is answered once, and retransmissions that land
//! on the other worker still meet their transaction.

#[path = "support/scratch.rs"]
mod scratch;
#[path = "support/served.rs"]
mod served;

use std::collections::HashMap;
use std::net::UdpSocket;
use std::time::Duration;

use served::Served;
use sipsec_server::config::UdpBalance;
use sipsec_server::{Config, Mode};

fn server(name: &str, balance: UdpBalance) -> Served {
    server_with(name, |c| {
        (c.mode, c.stateful) = (Mode::Proxy, true);
        (c.workers, c.udp_balance) = (2, balance);
    })
}

/// A server on loopback ports of its own, `tune` setting the rest.
fn server_with(name: &str, tune: impl FnOnce(&mut Config)) -> Served {
    let mut config = Config {
        udp: "127.0.0.1:0".parse().expect("addr"),
        tcp: None,
        http: None,
        advertise: "127.0.0.1:0".parse().expect("addr"),
        ..Config::default()
    };
    tune(&mut config);
    Served::start(&format!("udp-{name}"), config).expect("server starts")
}

fn socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("udp");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s
}

fn recv(s: &UdpSocket) -> String {
    let mut b = [0u8; 8192];
    let n = s.recv(&mut b).expect("a message");
    String::from_utf8_lossy(&b[..n]).into_owned()
}

fn header<'a>(msg: &'a str, name: &str) -> &'a str {
    msg.lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
        .unwrap_or("")
}

/// Sends `n` requests (`request(i)`, each its own Call-ID) from `peer`,
/// paced by the answers (a window of 32, so no datagram is lost to a full
/// buffer), and checks that each drew exactly one 200.
fn each_answered_200_once(
    peer: &UdpSocket,
    srv: std::net::SocketAddr,
    n: usize,
    request: impl Fn(usize) -> String,
) {
    let mut seen: HashMap<String, u32> = HashMap::new();
    let mut answered = || {
        let ok = recv(peer);
        assert!(ok.starts_with("SIP/2.0 200 "), "{ok}");
        *seen.entry(header(&ok, "Call-ID").to_owned()).or_default() += 1;
    };
    for i in 0..n {
        peer.send_to(request(i).as_bytes(), srv).expect("send");
        if i >= 32 {
            answered();
        }
    }
    for _ in 0..n.min(32) {
        answered();
    }
    assert_eq!(seen.len(), n, "every request answered");
    assert!(seen.values().all(|&c| c == 1), "each once");
}

/// One peer (one address and port) registers 400 users; the two workers
/// both serve it, and each REGISTER gets exactly one answer.
fn one_flow_uses_both_workers(balance: UdpBalance) {
    let s = server(&format!("{balance:?}"), balance);
    let srv = s.handle.local_addr();
    let peer = socket();
    let me = peer.local_addr().expect("addr");
    const N: usize = 400;
    each_answered_200_once(&peer, srv, N, |i| {
        format!(
            "REGISTER sip:localhost SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-r{i}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:u{i}@localhost>;tag=t{i}\r\nTo: <sip:u{i}@localhost>\r\n\
             Call-ID: reg-{i}\r\nCSeq: 1 REGISTER\r\nContact: <sip:u{i}@{me}>\r\n\
             Expires: 600\r\nContent-Length: 0\r\n\r\n"
        )
    });
    let m = &s.handle.shared().metrics;
    let (a, b) = (m.udp_worker_datagrams(0), m.udp_worker_datagrams(1));
    assert_eq!(a + b, N as u64);
    let steered = m
        .udp_steered_by_call
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(steered == 1, balance == UdpBalance::Call);
    assert!(a > 0 && b > 0, "one flow on both workers: {a} and {b}");
}

#[test]
fn one_flow_is_spread_over_every_worker() {
    one_flow_uses_both_workers(UdpBalance::Spread);
}

#[test]
fn one_flow_is_spread_by_call_id_over_every_worker() {
    one_flow_uses_both_workers(UdpBalance::Call);
}

/// Steered by Call-ID, one call's messages all reach the worker its
/// Call-ID hashes to, in the order they came: 100 REGISTER refreshes of
/// one AoR under one Call-ID, sent back to back without waiting, are
/// answered in CSeq order, all by that worker; another call goes to the
/// other worker.
#[test]
fn one_calls_messages_reach_one_worker_in_order() {
    let s = server("by-call", UdpBalance::Call);
    let srv = s.handle.local_addr();
    let peer = socket();
    let me = peer.local_addr().expect("addr");
    let m = &s.handle.shared().metrics;
    let steered = m
        .udp_steered_by_call
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(steered, 1, "the program is attached");
    let counts = || [m.udp_worker_datagrams(0), m.udp_worker_datagrams(1)];
    // One Call-ID for each worker, as the kernel's program hashes them.
    let call_for = |w: u32| {
        (0..)
            .map(|i| format!("refresh-{i}@{me}"))
            .find(|c| sip_udp::CallSteering::index_of(c.as_bytes(), 2) == w)
            .expect("a Call-ID")
    };
    const N: u32 = 100;
    for w in [0, 1] {
        let call_id = call_for(w);
        let before = counts();
        for cseq in 1..=N {
            let r = format!(
                "REGISTER sip:localhost SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-{w}-{cseq}\r\n\
                 Max-Forwards: 70\r\nFrom: <sip:refresh{w}@localhost>;tag=t\r\n\
                 To: <sip:refresh{w}@localhost>\r\nCall-ID: {call_id}\r\nCSeq: {cseq} REGISTER\r\n\
                 Contact: <sip:r@{me}>\r\nExpires: 600\r\nContent-Length: 0\r\n\r\n"
            );
            peer.send_to(r.as_bytes(), srv).expect("send");
        }
        for cseq in 1..=N {
            let ok = recv(&peer);
            assert!(ok.starts_with("SIP/2.0 200 "), "{ok}");
            assert_eq!(header(&ok, "CSeq"), format!("{cseq} REGISTER"), "in order");
        }
        let after = counts();
        let w = w as usize;
        assert_eq!(after[w] - before[w], u64::from(N), "all on worker {w}");
        assert_eq!(after[1 - w], before[1 - w], "none on the other");
    }
}

#[test]
fn one_flow_is_shared_by_every_worker_reading_one_socket() {
    one_flow_uses_both_workers(UdpBalance::Shared);
}

/// Retransmissions of one INVITE from one peer land on either worker; the
/// transaction table they share absorbs all of them: the callee gets the
/// INVITE once, the caller a 100 Trying for each copy and one 200.
#[test]
fn retransmissions_meet_their_transaction_on_any_worker() {
    let m = retransmissions_are_absorbed(UdpBalance::Spread);
    assert!(m[0].1 > 0 && m[1].1 > 0, "copies on both workers: {m:?}");
}

/// Steered by Call-ID, every copy of the INVITE meets its transaction on
/// the one worker its Call-ID names.
#[test]
fn retransmissions_steered_by_call_id_meet_their_transaction_on_one_worker() {
    let m = retransmissions_are_absorbed(UdpBalance::Call);
    let w = sip_udp::CallSteering::index_of(b"spread-inv", 2) as usize;
    assert!(
        m[w].1 >= 40 && m[1 - w].1 < 40,
        "copies on worker {w}: {m:?}"
    );
}

/// Sends 40 copies of one INVITE and has the callee answer it once;
/// returns, for each worker, its datagrams before the copies and those
/// it received from then on (the copies and the callee's 200).
fn retransmissions_are_absorbed(balance: UdpBalance) -> [(u64, u64); 2] {
    let s = server(&format!("retransmissions-{balance:?}"), balance);
    let srv = s.handle.local_addr();
    let callee = socket();
    let at = callee.local_addr().expect("addr");
    let reg = format!(
        "REGISTER sip:localhost SIP/2.0\r\nVia: SIP/2.0/UDP {at};branch=z9hG4bK-reg\r\n\
         Max-Forwards: 70\r\nFrom: <sip:bob@localhost>;tag=r\r\nTo: <sip:bob@localhost>\r\n\
         Call-ID: reg-bob\r\nCSeq: 1 REGISTER\r\nContact: <sip:bob@{at}>\r\n\
         Expires: 600\r\nContent-Length: 0\r\n\r\n"
    );
    callee.send_to(reg.as_bytes(), srv).expect("send");
    assert!(recv(&callee).starts_with("SIP/2.0 200 "));
    let caller = socket();
    let me = caller.local_addr().expect("addr");
    let m = &s.handle.shared().metrics;
    let before = [m.udp_worker_datagrams(0), m.udp_worker_datagrams(1)];
    let invite = format!(
        "INVITE sip:bob@localhost SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-inv;rport\r\n\
         Max-Forwards: 70\r\nFrom: <sip:alice@localhost>;tag=a\r\nTo: <sip:bob@localhost>\r\n\
         Call-ID: spread-inv\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@{me}>\r\n\
         Content-Length: 0\r\n\r\n"
    );
    const COPIES: usize = 40;
    for _ in 0..COPIES {
        caller.send_to(invite.as_bytes(), srv).expect("send");
    }
    // Every copy is answered (100 Trying) before the callee answers.
    for _ in 0..COPIES {
        let t = recv(&caller);
        assert!(t.starts_with("SIP/2.0 100 "), "{t}");
    }
    let inv = recv(&callee);
    assert!(inv.starts_with("INVITE sip:bob@"), "{inv}");
    let mut ok = String::from("SIP/2.0 200 OK\r\n");
    for l in inv.lines().skip(1) {
        let name = l.split(':').next().unwrap_or("").to_ascii_lowercase();
        if ["via", "from", "call-id", "cseq", "record-route"].contains(&name.as_str()) {
            ok.push_str(l);
            ok.push_str("\r\n");
        } else if name == "to" {
            ok.push_str(l);
            ok.push_str(";tag=b\r\n");
        }
    }
    ok.push_str(&format!(
        "Contact: <sip:bob@{at}>\r\nContent-Length: 0\r\n\r\n"
    ));
    callee.send_to(ok.as_bytes(), srv).expect("send");
    let got = recv(&caller);
    assert!(got.starts_with("SIP/2.0 200 "), "{got}");
    // The callee saw the INVITE once: a second copy would be here before
    // the 200's answer reached the caller.
    callee.set_nonblocking(true).expect("nonblocking");
    let mut b = [0u8; 8192];
    assert!(callee.recv(&mut b).is_err(), "the INVITE went down once");
    assert_eq!(
        m.retransmissions_absorbed
            .load(std::sync::atomic::Ordering::Relaxed),
        COPIES as u64 - 1
    );
    let copies = |w: usize| m.udp_worker_datagrams(w) - before[w];
    [(before[0], copies(0)), (before[1], copies(1))]
}

/// One peer's REGISTERs for two AoRs, spread over two workers that share
/// the location: a REGISTER that meets the other worker's change in flight
/// on its AoR waits for that change's commit (parked, see
/// `proto/busy.rs`) instead of spinning — and none is lost or answered
/// twice either way: each gets one 200, and every contact ends bound.
#[test]
fn registers_for_one_aor_on_both_workers_are_each_answered_once() {
    let s = server("one-aor", UdpBalance::Spread);
    let srv = s.handle.local_addr();
    let peer = socket();
    let me = peer.local_addr().expect("addr");
    const N: usize = 600;
    each_answered_200_once(&peer, srv, N, |i| {
        let (user, contact) = (i % 2, i % 5);
        format!(
            "REGISTER sip:localhost SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-one{i}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:busy{user}@localhost>;tag=t{i}\r\n\
             To: <sip:busy{user}@localhost>\r\nCall-ID: one-aor-{i}\r\nCSeq: 1 REGISTER\r\n\
             Contact: <sip:c{contact}@{me}>\r\nExpires: 600\r\nContent-Length: 0\r\n\r\n"
        )
    });
    let shared = s.handle.shared();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    for user in 0..2 {
        let mut bound = Vec::new();
        let aor = format!("sip:busy{user}@localhost");
        shared.location.lookup(&aor, now, &mut bound);
        assert_eq!(bound.len(), 5, "{aor}: every contact bound: {bound:?}");
    }
    let m = &shared.metrics;
    assert!(m.udp_worker_datagrams(0) > 0 && m.udp_worker_datagrams(1) > 0);
}

/// A worker that waits between reads (`batch_wait`, here the largest)
/// under a steady stream: it waits, answers every request exactly once,
/// and, idle again, answers a lone request (a wait only ever follows a
/// read; the bound on the added delay is checked on virtual time in
/// `io::pace`).
#[test]
fn a_pacing_worker_answers_a_steady_stream_once_each_and_a_lone_request() {
    let s = server_with("paced", |c| {
        (c.mode, c.workers) = (Mode::Registrar, 1);
        c.batch_wait = sipsec_server::config::MAX_BATCH_WAIT;
    });
    let srv = s.handle.local_addr();
    let peer = socket();
    let me = peer.local_addr().expect("addr");
    let register = |i: usize| {
        format!(
            "REGISTER sip:localhost SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-p{i}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:p{i}@localhost>;tag=t{i}\r\nTo: <sip:p{i}@localhost>\r\n\
             Call-ID: paced-{i}\r\nCSeq: 1 REGISTER\r\nContact: <sip:p{i}@{me}>\r\n\
             Expires: 600\r\nContent-Length: 0\r\n\r\n"
        )
    };
    // A steady stream the worker keeps up with whatever the machine's
    // load (a saturated worker reads full batches and never waits): five
    // requests, their five answers, a millisecond's pause, and again.
    const N: usize = 300;
    let mut seen: HashMap<String, u32> = HashMap::new();
    for round in 0..N / 5 {
        for i in round * 5..round * 5 + 5 {
            peer.send_to(register(i).as_bytes(), srv).expect("send");
        }
        for _ in 0..5 {
            let ok = recv(&peer);
            assert!(ok.starts_with("SIP/2.0 200 "), "{ok}");
            *seen.entry(header(&ok, "Call-ID").to_owned()).or_default() += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(seen.len(), N, "every request answered");
    assert!(seen.values().all(|&c| c == 1), "each once");
    let waits = s
        .handle
        .shared()
        .metrics
        .paced_waits
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(waits > 0, "a steady stream is waited for");
    let options = format!(
        "OPTIONS sip:localhost SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-lone\r\n\
         Max-Forwards: 70\r\nFrom: <sip:x@localhost>;tag=x\r\nTo: <sip:localhost>\r\n\
         Call-ID: lone\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
    );
    peer.send_to(options.as_bytes(), srv).expect("send");
    let ok = recv(&peer);
    assert!(
        ok.starts_with("SIP/2.0 200 ") && ok.contains("Call-ID: lone"),
        "{ok}"
    );
}
