//! A second real client: sipsak (Debian package, installed by setup.sh)
//! registers with digest authentication through `sipsec serve`.
//!
//! sipsak 0.9.8 mangles five-digit ports in the URIs it writes, so both
//! ends use free four-digit ports; its invite mode (-I) crashes (a sipsak
//! bug), so calls through the server are covered by SIPp instead.

mod common;

use std::net::{TcpListener, UdpSocket};
use std::process::{Command, Output};

fn free_four_digit_port(skip: u16) -> u16 {
    (5200..9999)
        .find(|p| {
            *p != skip
                && UdpSocket::bind(("127.0.0.1", *p)).is_ok()
                && TcpListener::bind(("127.0.0.1", *p)).is_ok()
        })
        .expect("a free port")
}

fn sipsak_register(port: u16, local: u16, password: &str) -> Output {
    Command::new("sipsak")
        .args(["-U", "-vv", "-s", &format!("sip:alice@127.0.0.1:{port}")])
        .args([
            "-u",
            "alice",
            "-a",
            password,
            "-H",
            "127.0.0.1",
            "-l",
            &local.to_string(),
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run sipsak ({e}): run ./setup.sh"))
}

#[test]
fn sipsak_registers_with_digest() {
    let dir = common::tempdir("sipsak");
    let users = dir.join("users.tsv");
    common::import_users("alice,wonderland\n", &dir, &users);
    // sipsak registers for 15 s by default.
    let config = dir.join("short.toml");
    std::fs::write(&config, "[registrar]\nmin_expires = 10\n").expect("config");
    let port = free_four_digit_port(0);
    let local = free_four_digit_port(port);
    let udp = format!("127.0.0.1:{port}");
    let serve = |mode: &str, data: &str| {
        let data = dir.join(data);
        common::serve(&[
            "--mode",
            mode,
            "--auth",
            "--digest",
            "md5",
            "--no-tcp",
            "--no-http",
            "--udp",
            &udp,
            "--config",
            config.to_str().expect("utf-8 path"),
            "--users",
            users.to_str().expect("utf-8 path"),
            "--data-dir",
            data.to_str().expect("utf-8 path"),
        ])
    };

    let server = serve("proxy", "data");
    let out = sipsak_register(port, local, "wonderland");
    drop(server);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("completed successful"),
        "exit {:?}: {text}",
        out.status.code()
    );

    // Wrong password: sipsak must fail.
    let server = serve("registrar", "data2");
    let out = sipsak_register(port, local, "guess");
    drop(server);
    assert!(!out.status.success(), "a wrong password must not register");
}
