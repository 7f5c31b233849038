//! Anyone can encrypt a PrivaSIP pseudonym for the proxy's public key,
//! for a public-key operation; each one costs the proxy a private-key
//! decryption. One source may make it spend `[guard] decryption_rate` a
//! second (a burst of twice that): past it its requests get 503 with
//! Retry-After, counted as no authentication failure, while another
//! source's pseudonyms still open. Real sockets on loopback (held to the
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
use privacy::Encoding;
use served::Served;
use sipsec_server::config::PrivacySettings;
use sipsec_server::{Config, Mode};

/// An OPTIONS from `from` to the callee pseudonym `user`.
fn options(from: &UdpSocket, user: &str, n: u32) -> String {
    let me = from.local_addr().expect("local");
    format!(
        "OPTIONS sip:{user}@example.com SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-pb{n};rport\r\n\
         Max-Forwards: 70\r\nFrom: <sip:carol@elsewhere.test>;tag=c{n}\r\nTo: <sip:{user}@example.com>\r\n\
         Call-ID: pb-{n}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
    )
}

fn ask(from: &UdpSocket, to: SocketAddr, req: &str) -> String {
    from.send_to(req.as_bytes(), to).expect("send");
    let mut b = [0u8; 8192];
    loop {
        let n = from.recv(&mut b).expect("an answer");
        let m = String::from_utf8_lossy(&b[..n]).into_owned();
        if !m.starts_with("SIP/2.0 1") {
            return m;
        }
    }
}

#[test]
fn one_source_opens_pseudonyms_at_its_decryption_rate_and_others_still_do() {
    let dir = scratch::Scratch::new("privacy-budget");
    let key = openssl::pkey::PKey::generate_x25519().expect("key");
    let pem = key.private_key_to_pem_pkcs8().expect("pem");
    let key_file = dir.join("hpke.pem");
    std::fs::write(&key_file, &pem).expect("key file");
    let public = privacy::keys::public_pem(&pem).expect("public half");
    let cipher = privacy::keys::cipher_from_pem(&public, 1).expect("cipher");
    let mut config = Config {
        mode: Mode::Proxy,
        udp: "127.0.0.1:0".parse().expect("addr"),
        tcp: None,
        http: None,
        domains: vec!["example.com".into()],
        insecure_no_auth: true,
        privacy: Some(PrivacySettings {
            keys: vec![(1, key_file)],
            ..PrivacySettings::default()
        }),
        ..Config::default()
    };
    config.guard.exempt_loopback = false;
    config.guard.decryption_rate = 2;
    let s = Served::start("privacy-budget-server", config).expect("server starts");
    let srv = s.handle.local_addr();
    let fresh = || {
        cipher
            .pseudonym("bob", Encoding::Hex, 1000)
            .expect("pseudonym")
    };
    let minter = udp_at("127.0.0.1:0");
    // The burst (twice the rate): each opens, to a callee not registered.
    for n in 0..4 {
        let answer = ask(&minter, srv, &options(&minter, &fresh(), n));
        assert!(answer.starts_with("SIP/2.0 404 "), "{answer}");
    }
    let limited = ask(&minter, srv, &options(&minter, &fresh(), 4));
    assert!(
        limited.starts_with("SIP/2.0 503 ")
            && limited.contains("Retry-After: 1")
            && limited.contains("too many pseudonyms"),
        "{limited}"
    );
    // Another source's still open; the first was not failed or banned.
    let other = udp_at("127.0.0.2:0");
    let answer = ask(&other, srv, &options(&other, &fresh(), 5));
    assert!(answer.starts_with("SIP/2.0 404 "), "{answer}");
    let shared = s.handle.shared();
    let privacy = shared.privacy.as_ref().expect("privacy on");
    let counted = (
        privacy.counters.decryptions.load(Relaxed),
        privacy.counters.limited.load(Relaxed),
        privacy.counters.refused.load(Relaxed),
    );
    assert_eq!(counted, (5, 1, 0));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    assert!(shared.guard.banned(now).is_empty());
    assert_eq!(shared.metrics.auth_failures.load(Relaxed), 0);
}
