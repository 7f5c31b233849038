//! The `sipsec` binary end to end: serve, users, kill -9 recovery.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;

use common::{http_get, tempdir, Running, BIN};

/// Starts `sipsec serve` on ephemeral ports with its data in `dir`.
fn serve(dir: &Path, extra: &[&str]) -> Running {
    common::serve_in(&dir.join("data"), extra)
}

fn register(server: SocketAddr, user: &str, cseq: u32) -> String {
    let c = UdpSocket::bind("127.0.0.1:0").expect("socket");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let msg = format!(
        "REGISTER sip:{server} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bK{user}{cseq}\r\nFrom: <sip:{user}@{server}>;tag=1\r\nTo: <sip:{user}@{server}>\r\nCall-ID: {user}-cli\r\nCSeq: {cseq} REGISTER\r\nContact: <sip:{user}@192.0.2.44:5060>\r\nExpires: 3600\r\nContent-Length: 0\r\n\r\n"
    );
    c.send_to(msg.as_bytes(), server).expect("send");
    let mut buf = [0u8; 4096];
    let (n, _) = c.recv_from(&mut buf).expect("answer");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn bindings_survive_kill_9() {
    let dir = tempdir("kill9");
    let s = serve(&dir, &[]);
    let addr = s.addr;
    for (i, user) in ["u1", "u2", "u3"].iter().enumerate() {
        let r = register(addr, user, i as u32 + 1);
        assert!(r.starts_with("SIP/2.0 200 OK\r\n"), "{r}");
    }
    drop(s); // SIGKILL
    let s = serve(&dir, &[]);
    let banner = &s.banner;
    assert!(banner.contains("3 binding(s) restored"), "{banner}");
    drop(s);
}

#[test]
fn users_add_import_and_auth_serve() {
    let dir = tempdir("users");
    let users = dir.join("users.tsv");
    let mut add = Command::new(BIN)
        .args([
            "users",
            "add",
            "alice",
            "--realm",
            "example.test",
            "--password-stdin",
            "--file",
        ])
        .arg(&users)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("runs");
    add.stdin
        .take()
        .expect("piped")
        .write_all(b"s3cret!-long\n")
        .expect("password");
    assert!(add.wait().expect("exits").success());
    // A password a captured login would give away offline is refused.
    let mut short = Command::new(BIN)
        .args(["users", "add", "dave", "--password-stdin", "--file"])
        .arg(&users)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    short
        .stdin
        .take()
        .expect("piped")
        .write_all(b"x\n")
        .expect("password");
    let out = short.wait_with_output().expect("exits");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1 character(s): at least 8"), "{err}");
    std::fs::write(
        dir.join("u.csv"),
        "username,password\nbob,b0b\ncarol,c,arol\n",
    )
    .expect("csv");
    let out = Command::new(BIN)
        .args(["users", "import"])
        .arg(dir.join("u.csv"))
        .args(["--realm", "example.test", "--file"])
        .arg(&users)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&users).expect("users file");
    assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 3);
    assert!(!text.contains("s3cret") && !text.contains("b0b") && !text.contains("c,arol"));
    assert!(!text.contains("dave"), "the short password was not stored");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&users)
            .expect("meta")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
    }
    // Without a terminal or --password-stdin, `users add` refuses clearly.
    let out = Command::new(BIN)
        .args(["users", "add", "x", "--file"])
        .arg(&users)
        .stdin(Stdio::null())
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--password-stdin"));

    let s = serve(
        &dir,
        &[
            "--auth",
            "--realm",
            "example.test",
            "--users",
            users.to_str().expect("utf-8"),
        ],
    );
    let (addr, banner) = (s.addr, s.banner.clone());
    assert!(banner.contains("3 user(s) loaded"), "{banner}");
    assert!(register(addr, "alice", 1).starts_with("SIP/2.0 401 Unauthorized\r\n"));
    drop(s);

    // A broken users file stops the server with the line at fault.
    std::fs::write(dir.join("bad.tsv"), "alice\texample.test\tzz\n").expect("write");
    let out = Command::new(BIN)
        .args([
            "serve",
            "--udp",
            "127.0.0.1:0",
            "--no-http",
            "--auth",
            "--users",
        ])
        .arg(dir.join("bad.tsv"))
        .arg("--data-dir")
        .arg(dir.join("data2"))
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.tsv:1:"), "{err}");
}

#[test]
fn port_in_use_is_reported() {
    let dir = tempdir("inuse");
    let taken = UdpSocket::bind("127.0.0.1:0").expect("socket");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = Command::new(BIN)
        .args(["serve", "--udp", &addr, "--no-http", "--data-dir"])
        .arg(dir.join("data"))
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on udp {addr}")),
        "{err}"
    );
    drop(taken);
    // A second sipsec on the same port is refused, not silently load-shared.
    let first = serve(&dir, &[]);
    let addr = first.addr;
    let out = Command::new(BIN)
        .args([
            "serve",
            "--udp",
            &addr.to_string(),
            "--no-http",
            "--data-dir",
        ])
        .arg(dir.join("data2"))
        .output()
        .expect("runs");
    assert!(!out.status.success(), "second server must not start");
    drop(first);
}

#[test]
fn status_and_metrics() {
    let dir = tempdir("status");
    let s = serve(&dir, &[]);
    let (addr, banner) = (s.addr, s.banner.clone());
    let http = common::banner_http_addr(&banner)
        .unwrap_or_else(|| panic!("no http address in {banner:?}"))
        .to_string();
    assert!(register(addr, "dave", 1).starts_with("SIP/2.0 200 OK\r\n"));
    let out = Command::new(BIN)
        .args(["status", "--http", &http, "--all"])
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("mode registrar"), "{table}");
    assert!(
        table.contains(&format!("sip:dave@{}", addr.ip())),
        "{table}"
    );
    assert!(table.contains("sip:dave@192.0.2.44:5060"), "{table}");
    assert!(table.contains("1 binding(s)"), "{table}");

    let m = http_get(&http, "/metrics");
    assert!(m.starts_with("HTTP/1.1 200 OK\r\n"), "{m}");
    assert!(
        m.contains("sipsec_requests_total{method=\"REGISTER\"} 1\n"),
        "{m}"
    );
    assert!(m.contains("sipsec_registrations_total 1\n"), "{m}");
    assert!(m.contains("sipsec_bindings 1\n"), "{m}");
    assert!(
        m.contains("sipsec_stage_seconds_count{stage=\"parse\"} 1\n"),
        "{m}"
    );
    assert!(
        m.contains("sipsec_stage_seconds_count{stage=\"add_user\"} 1\n"),
        "{m}"
    );
    assert!(http_get(&http, "/nope").starts_with("HTTP/1.1 404"));
    drop(s);

    // Nothing listening: a clear error, not a hang.
    let out = Command::new(BIN)
        .args(["status", "--http", &http])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach"));
}

/// `serve --check` loads what a start would (config, users, TLS) and exits,
/// binding nothing and leaving the data directory alone.
#[test]
fn serve_check_validates_and_exits() {
    let dir = tempdir("check");
    let users = dir.join("users.tsv");
    common::import_users("alice,pw\n", &dir, &users);
    let data = dir.join("data");
    let check = |extra: &[&str]| {
        Command::new(BIN)
            .args(["serve", "--check", "--data-dir"])
            .arg(&data)
            .args(extra)
            .output()
            .expect("runs")
    };
    let u = users.to_str().expect("utf-8");
    let ok = check(&["--auth", "--users", u]);
    assert!(ok.status.success(), "{}", common::text(&ok));
    assert!(
        common::text(&ok).contains("configuration OK") && common::text(&ok).contains("1 user(s)"),
        "{}",
        common::text(&ok)
    );
    // Without --auth the users file is not read, and it says so rather
    // than "0 user(s)".
    let off = check(&["--users", u]);
    assert!(
        common::text(&off).contains("auth off (no users file read)"),
        "{}",
        common::text(&off)
    );
    assert!(!data.exists(), "the data directory is not touched");
    for (extra, needle) in [
        (
            vec!["--auth", "--users", u, "--realm", "other"],
            "realm \"other\"",
        ),
        (
            vec!["--auth", "--users", "/nonexistent/users.tsv"],
            "nonexistent",
        ),
        (
            vec![
                "--cert",
                "/nonexistent/c.pem",
                "--key",
                "/nonexistent/k.pem",
            ],
            "TLS",
        ),
    ] {
        let bad = check(&extra);
        assert!(!bad.status.success(), "{extra:?}: {}", common::text(&bad));
        assert!(
            common::text(&bad).contains(needle),
            "{extra:?}: {}",
            common::text(&bad)
        );
    }
}

/// `sipsec status | head -1` with a long listing: the closed pipe ends the
/// output quietly (it used to panic with exit 101).
#[test]
fn status_into_a_closed_pipe_ends_quietly() {
    use std::io::BufRead;
    let dir = tempdir("status-pipe");
    let s = serve(&dir, &[]);
    let http = common::banner_http_addr(&s.banner)
        .expect("http address")
        .to_string();
    for i in 0..3000 {
        assert!(register(s.addr, &format!("u{i}"), 1).starts_with("SIP/2.0 200"));
    }
    let mut child = Command::new(BIN)
        .args(["status", "--http", &http, "--all"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut first)
        .expect("a first line");
    // The reader is gone: like `head -1`.
    let out = child.wait_with_output().expect("ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(first.starts_with("mode registrar"), "{first}");
    assert!(out.status.success() && !err.contains("panicked"), "{err}");
}

#[test]
fn config_file_and_flag_precedence() {
    let dir = tempdir("config");
    let cfg = dir.join("sipsec.toml");
    std::fs::write(
        &cfg,
        format!(
            "mode = \"proxy\"\nudp = \"127.0.0.1:0\"\nhttp = \"off\"\nworkers = 1\ndata_dir = \"{}\"\n[registrar]\nmin_expires = 120\n",
            dir.join("cfgdata").display()
        ),
    )
    .expect("config");
    let cfg_arg = cfg.to_str().expect("utf-8").to_owned();
    let run = |extra: &[&str]| {
        let mut child = Command::new(BIN)
            .args(["serve", "--config", &cfg_arg])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("runs");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("piped"))
            .read_line(&mut line)
            .expect("banner");
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        line
    };
    let banner = run(&[]);
    assert!(
        banner.contains("mode proxy") && banner.contains("1 worker(s)"),
        "{banner}"
    );
    assert!(!banner.contains("status on http"), "http = off: {banner}");
    let banner = run(&["--mode", "redirect"]);
    assert!(
        banner.contains("mode redirect"),
        "flags override the file: {banner}"
    );

    std::fs::write(&cfg, "mode = \"proxy\"\nudpp = \"127.0.0.1:0\"\n").expect("config");
    let out = Command::new(BIN)
        .args(["serve", "--config", &cfg_arg])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sipsec.toml") && err.contains("udpp"), "{err}");
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(dir.join("missing.toml"))
        .output()
        .expect("runs");
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.toml"));
}
