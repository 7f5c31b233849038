//! What the tests' own peers do on real sockets: a UDP socket bound
//! where asked with a read deadline, a wrong answer to a digest
//! challenge, `ip` (iproute2) for network namespaces and veth pairs.

#![allow(dead_code)]

use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

/// A UDP socket bound to `at`, whose reads give up after 5 s.
pub fn udp_at(at: impl std::net::ToSocketAddrs) -> UdpSocket {
    let s = UdpSocket::bind(at).expect("bind");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s
}

/// A wrong answer (user alice, realm sipsec) to the challenge in
/// `challenge` (a 401), for the request URI `uri`: an Authorization
/// line.
pub fn wrong_credentials(challenge: &str, uri: &str) -> String {
    assert!(challenge.starts_with("SIP/2.0 401 "), "{challenge}");
    let nonce = challenge
        .split("nonce=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a nonce");
    format!(
        "Authorization: Digest username=\"alice\", realm=\"sipsec\", nonce=\"{nonce}\", \
         uri=\"{uri}\", response=\"{}\", algorithm=MD5, qop=auth, nc=00000001, cnonce=\"c\"\r\n",
        "0".repeat(32)
    )
}

/// Runs `ip ARGS` (iproute2), which must succeed.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("ip runs (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}
