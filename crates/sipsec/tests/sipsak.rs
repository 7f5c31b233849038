//! A second real client: sipsak (Debian package, installed by setup.sh)
//! registers with digest authentication through `sipsec serve`.
//!
//! sipsak 0.9.8 mangles five-digit ports in the URIs it writes, so both
//! ends use free four-digit ports; its invite mode (-I) crashes (a sipsak
//! bug), so calls through the server are covered by SIPp instead.

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, UdpSocket};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_sipsec");

fn free_four_digit_port(skip: u16) -> u16 {
    (5200..9999)
        .find(|p| {
            *p != skip
                && UdpSocket::bind(("127.0.0.1", *p)).is_ok()
                && TcpListener::bind(("127.0.0.1", *p)).is_ok()
        })
        .expect("a free port")
}

#[test]
fn sipsak_registers_with_digest() {
    let dir = std::env::temp_dir().join(format!("sipsec-sipsak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("u.csv"), "username,password\nalice,wonderland\n").expect("csv");
    let users = dir.join("users.tsv");
    assert!(Command::new(BIN)
        .args(["users", "import"])
        .arg(dir.join("u.csv"))
        .arg("--file")
        .arg(&users)
        .output()
        .expect("import")
        .status
        .success());
    // sipsak registers for 15 s by default.
    std::fs::write(dir.join("short.toml"), "[registrar]\nmin_expires = 10\n").expect("config");
    let port = free_four_digit_port(0);
    let mut server = Command::new(BIN)
        .args([
            "serve",
            "--mode",
            "proxy",
            "--auth",
            "--digest",
            "md5",
            "--no-tcp",
            "--no-http",
        ])
        .args(["--udp", &format!("127.0.0.1:{port}"), "--config"])
        .arg(dir.join("short.toml"))
        .arg("--users")
        .arg(&users)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("serve");
    let mut line = String::new();
    BufReader::new(server.stdout.as_mut().expect("piped"))
        .read_line(&mut line)
        .expect("banner");
    assert!(line.contains("listening"), "{line}");

    let local = free_four_digit_port(port);
    let out = Command::new("sipsak")
        .args([
            "-U",
            "-vv",
            "-s",
            &format!("sip:alice@127.0.0.1:{port}"),
            "-u",
            "alice",
            "-a",
            "wonderland",
        ])
        .args(["-H", "127.0.0.1", "-l", &local.to_string()])
        .output()
        .unwrap_or_else(|e| panic!("cannot run sipsak ({e}): run ./setup.sh"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        out.status.success() && text.contains("completed successful"),
        "exit {:?}: {text}",
        out.status.code()
    );

    // Wrong password: sipsak must fail.
    let mut server = Command::new(BIN)
        .args([
            "serve",
            "--auth",
            "--digest",
            "md5",
            "--no-tcp",
            "--no-http",
        ])
        .args(["--udp", &format!("127.0.0.1:{port}"), "--config"])
        .arg(dir.join("short.toml"))
        .arg("--users")
        .arg(&users)
        .arg("--data-dir")
        .arg(dir.join("data2"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("serve");
    let mut line = String::new();
    BufReader::new(server.stdout.as_mut().expect("piped"))
        .read_line(&mut line)
        .expect("banner");
    let out = Command::new("sipsak")
        .args([
            "-U",
            "-s",
            &format!("sip:alice@127.0.0.1:{port}"),
            "-u",
            "alice",
            "-a",
            "guess",
        ])
        .args(["-H", "127.0.0.1", "-l", &local.to_string()])
        .output()
        .expect("sipsak");
    let _ = server.kill();
    let _ = server.wait();
    assert!(!out.status.success(), "a wrong password must not register");
}
