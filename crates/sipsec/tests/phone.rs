//! `sipsec phone`: two phones register with `sipsec serve` (digest auth)
//! and call through it with RTP and with SRTP (SDES), each hearing the
//! other's tone in its recording; a direct call without a server; STUN;
//! and a clear message for every failure (not found, wrong password,
//! busy, no SRTP suite in common, unanswered call cancelled, SDES over
//! UDP without the opt-in).

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;

use common::{answering, phone, tempdir, text};

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// The tone the WAV file at `path` carries most, from 100 to 3900 Hz.
fn tone_in(path: &Path) -> f64 {
    let samples = media::wav::read(path).expect("recording");
    assert!(samples.len() > 8_000, "at least a second recorded");
    let middle = &samples[samples.len() / 4..samples.len() * 3 / 4];
    media::tone::dominant_frequency(middle, 8_000, 100.0, 3_900.0, 20.0).expect("not silence")
}

fn server(dir: &Path) -> common::Running {
    common::import_users("alice,pw-alice\nbob,pw-bob\n", dir, &dir.join("users.tsv"));
    let users = dir.join("users.tsv");
    common::serve_mode(
        dir,
        "proxy",
        "data",
        &["--auth", "--users", p(&users), "--stateful"],
    )
}

fn call_through_proxy(srtp: Option<&str>) {
    let dir = tempdir(&format!("phone-{}", srtp.unwrap_or("rtp")));
    let srv = server(&dir);
    let s = srv.addr.to_string();
    let (bob_wav, alice_wav, stats) = (
        dir.join("bob.wav"),
        dir.join("alice.wav"),
        dir.join("alice.json"),
    );
    let mut secure: Vec<&str> = Vec::new();
    if let Some(suite) = srtp {
        secure = vec!["--srtp", suite, "--insecure-sdes"];
    }
    let mut bob_args = vec![
        "answer",
        "--user",
        "bob",
        "--server",
        &s,
        "--register",
        "--bind",
        "127.0.0.1:0",
        "--tone",
        "1000",
        "--packets",
        "150",
        "--record",
        p(&bob_wav),
    ];
    bob_args.extend(&secure);
    let (bob, _, _) = answering("pw-bob", &bob_args);
    let target = format!("sip:bob@{s}");
    let mut alice_args = vec![
        "call",
        &target,
        "--user",
        "alice",
        "--server",
        &s,
        "--bind",
        "127.0.0.1:0",
        "--tone",
        "440",
        "--packets",
        "200",
        "--record",
        p(&alice_wav),
        "--stats",
        p(&stats),
    ];
    alice_args.extend(&secure);
    let alice = phone("pw-alice", &alice_args).output().expect("alice runs");
    let bob = bob.wait_with_output().expect("bob runs");
    let (a, b) = (text(&alice), text(&bob));
    assert!(alice.status.success(), "alice: {a}\nbob: {b}");
    assert!(bob.status.success(), "bob: {b}\nalice: {a}");
    assert!(
        a.contains("180 Ringing") && a.contains("call established"),
        "{a}"
    );
    assert!(b.contains("remote hung up"), "{b}");
    let want = format!("srtp {}", srtp.unwrap_or("off"));
    assert!(a.contains(&want) && b.contains(&want), "{a}\n{b}");
    // Each hears the other.
    assert!(
        (tone_in(&alice_wav) - 1000.0).abs() <= 20.0,
        "alice heard {}",
        tone_in(&alice_wav)
    );
    assert!(
        (tone_in(&bob_wav) - 440.0).abs() <= 20.0,
        "bob heard {}",
        tone_in(&bob_wav)
    );
    let j: serde_json::Value = common::report_json(&stats);
    let m = &j["media"];
    assert_eq!(m["sent"], 200, "{j}");
    assert_eq!(m["received"]["packets"], 150, "{j}");
    assert_eq!(m["received"]["lost"], 0, "{j}");
    assert_eq!(m["rejected"], 0, "{j}");
    assert!(m["received"]["mos"].as_f64().expect("mos") > 4.0, "{j}");
    let mean = m["received"]["delta_mean_ms"].as_f64().expect("delta");
    assert!((mean - 20.0).abs() < 2.0, "packets paced every 20 ms: {j}");
}

#[test]
fn phones_call_through_the_proxy_with_plain_rtp() {
    call_through_proxy(None);
}

#[test]
fn phones_call_through_the_proxy_with_srtp_aes_192_sha1_32() {
    call_through_proxy(Some("AES_192_CM_HMAC_SHA1_32"));
}

#[test]
fn phones_call_through_the_proxy_with_srtp_aead_aes_128_gcm() {
    call_through_proxy(Some("AEAD_AES_128_GCM"));
}

#[test]
fn direct_call_without_a_server_and_stun_for_the_address() {
    let dir = tempdir("phone-direct");
    // A STUN server that maps everyone to 127.0.0.1 and their port.
    let stun = UdpSocket::bind("127.0.0.1:0").expect("stun socket");
    let stun_addr = stun.local_addr().expect("bound");
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = stun.recv_from(&mut buf) {
            let mut r = Vec::new();
            if sip_core::stun::answer(&buf[..n], from, &mut r) {
                let _ = stun.send_to(&r, from);
            }
        }
    });
    let wav = dir.join("heard.wav");
    let (bob, at, _) = answering(
        "",
        &[
            "answer",
            "--user",
            "bob",
            "--bind",
            "127.0.0.1:0",
            "--tone",
            "700",
            "--packets",
            "100",
        ],
    );
    let target = format!("sip:bob@{at}");
    let alice = phone(
        "",
        &[
            "call",
            &target,
            "--user",
            "alice",
            "--bind",
            "127.0.0.1:0",
            "--stun",
            &stun_addr.to_string(),
            "--packets",
            "80",
            "--record",
            p(&wav),
        ],
    )
    .output()
    .expect("alice runs");
    let bob = bob.wait_with_output().expect("bob runs");
    assert!(alice.status.success(), "{}\n{}", text(&alice), text(&bob));
    assert!((tone_in(&wav) - 700.0).abs() <= 20.0);
    // A STUN server that never answers is named in the error.
    let silent = UdpSocket::bind("127.0.0.1:0").expect("socket");
    let out = phone(
        "",
        &[
            "call",
            &target,
            "--user",
            "alice",
            "--stun",
            &silent.local_addr().expect("a").to_string(),
        ],
    )
    .output()
    .expect("runs");
    assert!(!out.status.success());
    assert!(
        text(&out).contains("STUN") && text(&out).contains("no answer"),
        "{}",
        text(&out)
    );
}

/// A call to `at` from a phone of its own on 127.0.0.2, not through any
/// server: what `sipsec phone call` printed and whether it succeeded.
fn direct_call_from_elsewhere(at: &str) -> (bool, String) {
    let target = format!("sip:bob@{at}");
    let out = phone(
        "",
        &[
            "call",
            &target,
            "--user",
            "mallory",
            "--bind",
            "127.0.0.2:0",
            "--packets",
            "20",
        ],
    )
    .output()
    .expect("mallory runs");
    (out.status.success(), text(&out))
}

#[test]
fn a_phone_with_a_server_rings_only_for_calls_through_it() {
    let dir = tempdir("phone-callers");
    let srv = server(&dir);
    let s = srv.addr.to_string();
    let bob_args = |extra: &'static [&'static str]| {
        let mut a = vec![
            "answer",
            "--user",
            "bob",
            "--server",
            &s,
            "--register",
            "--bind",
            "127.0.0.1:0",
            "--packets",
            "20",
        ];
        a.extend(extra);
        a
    };
    // A call sent straight to the phone from another address is refused;
    // the one through the server still rings.
    let (bob, at, bob_err) = answering("pw-bob", &bob_args(&[]));
    let (ok, said) = direct_call_from_elsewhere(&at);
    assert!(!ok && said.contains("403"), "{said}");
    let alice = phone(
        "pw-alice",
        &[
            "call",
            &format!("sip:bob@{s}"),
            "--user",
            "alice",
            "--server",
            &s,
            "--bind",
            "127.0.0.1:0",
            "--packets",
            "20",
        ],
    )
    .output()
    .expect("alice runs");
    let bob = bob.wait_with_output().expect("bob runs");
    let b = format!("{}{}", text(&bob), bob_err.join().expect("stderr"));
    assert!(alice.status.success(), "{}\n{b}", text(&alice));
    assert!(
        b.contains("refused a call from 127.0.0.2:")
            && b.contains("--trust 127.0.0.2 lets it ring); 1 refused so far"),
        "{b}"
    );
    // Trusted (another node of the server's cluster), it rings.
    let (bob, at, _) = answering("pw-bob", &bob_args(&["--trust", "127.0.0.2"]));
    let (ok, said) = direct_call_from_elsewhere(&at);
    let bob = bob.wait_with_output().expect("bob runs");
    assert!(
        ok && said.contains("call established"),
        "{said}\n{}",
        text(&bob)
    );
}

/// A UAS that answers every INVITE with `final_code` (after a 180), or
/// with only a 180 when it is 0 (and 487 after a CANCEL).
fn fake_uas(final_code: u16) -> SocketAddr {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("uas");
    let addr = sock.local_addr().expect("bound");
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_535];
        let mut invite: Option<String> = None;
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).to_string();
            let head: Vec<&str> = msg.split("\r\n").collect();
            let keep = |m: &str| {
                m.split("\r\n")
                    .filter(|l| {
                        ["Via:", "From:", "To:", "Call-ID:", "CSeq:"]
                            .iter()
                            .any(|h| l.starts_with(h))
                    })
                    .map(|l| {
                        if l.starts_with("To:") {
                            format!("{l};tag=uas")
                        } else {
                            l.to_string()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\r\n")
            };
            let reply = |code: &str, m: &str| {
                format!("SIP/2.0 {code}\r\n{}\r\nContent-Length: 0\r\n\r\n", keep(m))
            };
            if head[0].starts_with("INVITE") {
                invite = Some(msg.clone());
                let _ = sock.send_to(reply("180 Ringing", &msg).as_bytes(), from);
                if final_code != 0 {
                    let _ = sock.send_to(
                        reply(&format!("{final_code} Refused"), &msg).as_bytes(),
                        from,
                    );
                }
            } else if head[0].starts_with("CANCEL") {
                let _ = sock.send_to(reply("200 OK", &msg).as_bytes(), from);
                if let Some(inv) = &invite {
                    let _ = sock.send_to(reply("487 Request Terminated", inv).as_bytes(), from);
                }
            }
        }
    });
    addr
}

fn fails_with(args: &[&str], password: &str, needle: &str) {
    let out = phone(password, args).output().expect("sipsec phone runs");
    let t = text(&out);
    assert!(!out.status.success(), "{args:?} succeeded: {t}");
    assert!(t.contains(needle), "{args:?}: wanted {needle:?} in: {t}");
}

#[test]
fn every_failure_gets_a_clear_message() {
    let dir = tempdir("phone-failures");
    let srv = server(&dir);
    let s = srv.addr.to_string();
    let nobody = format!("sip:carol@{s}");
    fails_with(
        &[
            "call",
            &nobody,
            "--user",
            "alice",
            "--server",
            &s,
            "--packets",
            "1",
        ],
        "pw-alice",
        "not found",
    );
    fails_with(
        &["register", "--user", "alice", "--server", &s],
        "wrong",
        "authentication failed",
    );
    fails_with(
        &[
            "call",
            &nobody,
            "--user",
            "alice",
            "--server",
            &s,
            "--srtp",
            "AES_CM_128_HMAC_SHA1_80",
        ],
        "pw-alice",
        "--insecure-sdes",
    );
    fails_with(
        &[
            "call",
            &nobody,
            "--user",
            "alice",
            "--srtp",
            "NULL_CIPHER",
            "--insecure-sdes",
        ],
        "",
        "unknown suite",
    );
    // A target outside the proxy's domain: the policy and its Warning.
    fails_with(
        &[
            "call",
            "sip:bob@127.0.0.1:9",
            "--user",
            "alice",
            "--server",
            &s,
        ],
        "pw-alice",
        "403 Forbidden (399 sipsec \"relaying denied\")",
    );
    let busy = format!("sip:bob@{}", fake_uas(486));
    fails_with(&["call", &busy, "--user", "alice"], "", "busy");
    let ringing = format!("sip:bob@{}", fake_uas(0));
    fails_with(
        &["call", &ringing, "--user", "alice", "--ring-timeout", "1"],
        "",
        "no answer within 1 s; the call was cancelled",
    );
    // Offer and answer without a suite in common: both sides say so.
    let (bob, at, bob_err) = answering(
        "",
        &[
            "answer",
            "--user",
            "bob",
            "--bind",
            "127.0.0.1:0",
            "--srtp",
            "AEAD_AES_256_GCM",
            "--insecure-sdes",
        ],
    );
    let target = format!("sip:bob@{at}");
    fails_with(
        &[
            "call",
            &target,
            "--user",
            "alice",
            "--srtp",
            "AES_CM_128_HMAC_SHA1_80",
            "--insecure-sdes",
        ],
        "",
        "no SRTP suite in common",
    );
    let bob = bob.wait_with_output().expect("bob runs");
    let said = bob_err.join().expect("stderr");
    assert!(!bob.status.success());
    assert!(said.contains("no SRTP suite in common"), "{said}");
}

#[test]
fn phones_call_over_tls_with_srtp_and_need_no_opt_in() {
    let dir = tempdir("phone-tls");
    let f = |n: &str| dir.join(n).to_str().expect("utf-8").to_owned();
    common::tls_files(&dir);
    // A CA the server's certificate does not chain to.
    common::keygen(&["ec", "-o", &f("other.key")]);
    common::keygen(&[
        "cert",
        "--key",
        &f("other.key"),
        "--cn",
        "other",
        "--ca",
        "-o",
        &f("other.pem"),
    ]);
    common::import_users("alice,pw-alice\nbob,pw-bob\n", &dir, &dir.join("users.tsv"));
    let srv = common::serve(&[
        "--udp",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--mode",
        "proxy",
        "--data-dir",
        &f("data"),
        "--auth",
        "--users",
        &f("users.tsv"),
        "--stateful",
        "--tls",
        "127.0.0.1:0",
        "--cert",
        &f("srv.pem"),
        "--key",
        &f("srv.key"),
    ]);
    let tls = common::banner_tls_addr(&srv.banner)
        .expect("tls address")
        .to_string();
    let wav = dir.join("alice.wav");
    let (bob, _, _) = answering(
        "pw-bob",
        &[
            "answer",
            "--user",
            "bob",
            "--server",
            &tls,
            "--transport",
            "tls",
            "--tls-ca",
            &f("ca.pem"),
            "--register",
            "--tone",
            "1000",
            "--packets",
            "100",
            "--srtp",
            "AES_256_CM_HMAC_SHA1_80",
        ],
    );
    let target = format!("sip:bob@{}", srv.addr);
    let alice = phone(
        "pw-alice",
        &[
            "call",
            &target,
            "--user",
            "alice",
            "--server",
            &tls,
            "--transport",
            "tls",
            "--tls-ca",
            &f("ca.pem"),
            "--tone",
            "440",
            "--packets",
            "120",
            "--record",
            p(&wav),
            "--srtp",
            "AES_256_CM_HMAC_SHA1_80",
        ],
    )
    .output()
    .expect("alice runs");
    let bob = bob.wait_with_output().expect("bob runs");
    let (a, b) = (text(&alice), text(&bob));
    assert!(alice.status.success() && bob.status.success(), "{a}\n{b}");
    assert!(!a.contains("warning: SDES"), "no warning over TLS: {a}");
    assert!(a.contains("srtp AES_256_CM_HMAC_SHA1_80"), "{a}");
    assert!(
        a.contains("tls TLSv1_3 ") && a.contains(" X25519MLKEM768"),
        "{a}"
    );
    assert!((tone_in(&wav) - 1000.0).abs() <= 20.0);
    // Both phones hung up with a close_notify: the server counts two
    // closes by the peer and no TLS error (bounded wait for the count).
    let http = common::banner_http_addr(&srv.banner)
        .expect("http address")
        .to_string();
    let closed = |reason: &str| -> u64 {
        let line = format!("sipsec_connections_closed_total{{reason=\"{reason}\"}} ");
        common::http_get(&http, "/metrics")
            .lines()
            .find_map(|l| l.strip_prefix(line.as_str()).and_then(|v| v.parse().ok()))
            .unwrap_or(0)
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while closed("peer") < 2 && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(closed("peer"), 2, "both hang-ups seen as the peer's close");
    assert_eq!(closed("tls"), 0, "no hang-up counted as a TLS error");
    // Both phones' key exchange was the hybrid post-quantum group.
    let metrics = common::http_get(&http, "/metrics");
    assert!(
        metrics.contains("sipsec_tls_handshakes_total{group=\"X25519MLKEM768\"} 2\n")
            && metrics.contains("sipsec_tls_handshakes_total{group=\"x25519\"} 0\n"),
        "{metrics}"
    );
    // A server whose certificate does not chain to the given CA.
    fails_with(
        &[
            "register",
            "--user",
            "alice",
            "--server",
            &tls,
            "--transport",
            "tls",
            "--tls-ca",
            &f("other.pem"),
        ],
        "pw-alice",
        "TLS handshake",
    );
}

/// A phone behind NAT waiting for calls keeps its registration alive: a
/// STUN keep-alive to the server every `--keepalive` seconds, a new
/// REGISTER as soon as the address the server sees (the NAT's mapping)
/// moves, and a refresh at half the lifetime granted. The "server" here
/// is a socket of the test's that answers REGISTER with 200 and STUN with
/// the mapping it chooses.
#[test]
fn a_waiting_phone_keeps_its_registration_alive_through_nat() {
    let registrar = UdpSocket::bind("127.0.0.1:0").expect("udp");
    registrar
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let at = registrar.local_addr().expect("addr").to_string();
    let mut bob = phone(
        "pw-bob",
        &[
            "answer",
            "--user",
            "bob",
            "--server",
            &at,
            "--register",
            "--bind",
            "127.0.0.1:0",
            "--keepalive",
            "1",
            "--wait",
            "30",
        ],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .expect("sipsec phone runs");
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 65_535];
    let mut mapping = 40_000u16;
    while seen.len() < 8 {
        let Ok((n, from)) = registrar.recv_from(&mut buf) else {
            break;
        };
        let packet = &buf[..n];
        if sip_core::stun::is_stun(packet) {
            seen.push("STUN");
            // The NAT moves the phone to a new port on the third ping.
            if seen.iter().filter(|s| **s == "STUN").count() == 3 {
                mapping += 1;
            }
            let mut out = Vec::new();
            let nat = SocketAddr::from(([203, 0, 113, 7], mapping));
            assert!(sip_core::stun::answer(packet, nat, &mut out));
            registrar.send_to(&out, from).expect("send");
            continue;
        }
        let msg = String::from_utf8_lossy(packet).into_owned();
        assert!(msg.starts_with("REGISTER "), "{msg}");
        seen.push("REGISTER");
        let keep: Vec<&str> = msg
            .split("\r\n")
            .filter(|l| {
                ["Via:", "From:", "To:", "Call-ID:", "CSeq:"]
                    .iter()
                    .any(|h| l.starts_with(h))
            })
            .collect();
        // The second registration is granted 2 s: refreshed after 1.
        let granted = if seen.iter().filter(|s| **s == "REGISTER").count() == 2 {
            2
        } else {
            60
        };
        let ok = format!(
            "SIP/2.0 200 OK\r\n{}\r\nExpires: {granted}\r\nContent-Length: 0\r\n\r\n",
            keep.join("\r\n")
        );
        registrar.send_to(ok.as_bytes(), from).expect("send");
    }
    let _ = bob.kill();
    let _ = bob.wait();
    let registers: Vec<usize> = (0..seen.len()).filter(|&i| seen[i] == "REGISTER").collect();
    assert!(registers.len() >= 3, "{seen:?}");
    assert_eq!(registers[0], 0, "registered first: {seen:?}");
    // Re-registered right after the third keep-alive showed the move.
    let third_stun = (0..seen.len())
        .filter(|&i| seen[i] == "STUN")
        .nth(2)
        .expect("3 pings");
    assert_eq!(registers[1], third_stun + 1, "{seen:?}");
    // Then refreshed within its 2 s, before two more pings went by.
    assert!(registers[2] <= registers[1] + 2, "{seen:?}");
}
