//! SIP over TLS: every RSA variant (and ECDSA, Ed25519) as the server key,
//! TLS 1.2 and 1.3 against `openssl s_client`, mutual TLS, reload without
//! restart, clear start-up errors, and forwarding to a `sips:` contact
//! (`openssl s_server` as the callee).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{banner_tls_addr, serve, tempdir, BIN};

fn sipsec(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("sipsec runs");
    assert!(
        out.status.success(),
        "sipsec {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a `sipsec bench run` whose calls must all fail: checks that the
/// run failed and returns its report.
fn failing_bench_run(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(["bench", "run"])
        .args(args)
        .args(["--scenario", "register", "--calls", "20", "--duration", "2"])
        .args(["--drain", "1"])
        .output()
        .expect("sipsec runs");
    assert!(!out.status.success(), "failed calls fail the run");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains(" 0 ok"), "{text}");
    text
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// A CA (ECDSA) in `dir`: `ca.key`, `ca.pem`.
fn make_ca(dir: &Path) -> PathBuf {
    let key = dir.join("ca.key");
    let cert = dir.join("ca.pem");
    sipsec(&["keygen", "ec", "-o", p(&key)]);
    sipsec(&[
        "keygen",
        "cert",
        "--key",
        p(&key),
        "--cn",
        "sipsec test CA",
        "--ca",
        "-o",
        p(&cert),
    ]);
    cert
}

/// A certificate for `key`, issued by the CA in `dir`, valid for
/// 127.0.0.1, with common name `cn`.
fn issue(dir: &Path, key: &Path, cn: &str, out: &Path) {
    issue_for(dir, key, cn, &["127.0.0.1"], out);
}

/// Issues a certificate by the CA in `dir` for `cn`, naming `sans`.
fn issue_for(dir: &Path, key: &Path, cn: &str, sans: &[&str], out: &Path) {
    let (ca_cert, ca_key) = (dir.join("ca.pem"), dir.join("ca.key"));
    let mut args = vec!["keygen", "cert", "--key", p(key), "--cn", cn];
    for san in sans {
        args.extend(["--san", san]);
    }
    args.extend(["--issuer-cert", p(&ca_cert), "--issuer-key", p(&ca_key)]);
    args.extend(["-o", p(out)]);
    sipsec(&args);
}

/// Generates `NAME.key` with `sipsec keygen KIND…` and `NAME.pem`, issued
/// by the CA in `dir` for `cn` (and 127.0.0.1).
fn key_and_cert(dir: &Path, name: &str, kind: &[&str], cn: &str) -> (PathBuf, PathBuf) {
    let key = dir.join(format!("{name}.key"));
    let cert = dir.join(format!("{name}.pem"));
    let mut args = vec!["keygen"];
    args.extend(kind);
    args.extend(["-o", p(&key)]);
    sipsec(&args);
    issue(dir, &key, cn, &cert);
    (key, cert)
}

fn options(port: u16, call: &str) -> String {
    format!(
        "OPTIONS sip:127.0.0.1:{port} SIP/2.0\r\nVia: SIP/2.0/TLS 127.0.0.1:5999;branch=z9hG4bK{call}\r\n\
         From: <sip:probe@127.0.0.1>;tag=t{call}\r\nTo: <sip:127.0.0.1:{port}>\r\nCall-ID: {call}\r\n\
         CSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
    )
}

/// Sends one OPTIONS through `openssl s_client` and returns everything it
/// printed (verification lines and the response), once a whole response
/// arrived or the client gave up.
fn s_client(addr: SocketAddr, ca: &Path, extra: &[&str]) -> String {
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect", &addr.to_string(), "-CAfile", p(ca)])
        .args(["-verify_return_error", "-quiet"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl s_client (setup.sh installs openssl)");
    let mut stdin = child.stdin.take().expect("piped");
    let _ = stdin.write_all(options(addr.port(), "tls1").as_bytes());
    let stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut got = String::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            got.push_str(&line);
            got.push('\n');
            // The response ends with the blank line after Content-Length: 0.
            if line.trim().is_empty() && got.contains("Content-Length") {
                break;
            }
        }
        let _ = tx.send(got);
    });
    let got = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_default();
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    let _ = stderr.read_to_string(&mut err);
    format!("{err}{got}")
}

fn serve_tls(dir: &Path, cert: &Path, key: &Path, extra: &[&str]) -> (common::Running, SocketAddr) {
    let data = dir.join(format!(
        "data-{}",
        key.file_stem().and_then(|s| s.to_str()).unwrap_or("k")
    ));
    let mut args = vec![
        "--udp",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--data-dir",
        p(&data),
        "--tls",
        "127.0.0.1:0",
        "--cert",
        p(cert),
        "--key",
        p(key),
    ];
    args.extend(extra);
    let server = serve(&args);
    let tls = banner_tls_addr(&server.banner).expect("tls address in the banner");
    (server, tls)
}

#[test]
fn every_key_variant_serves_tls_12_and_13_to_openssl() {
    let dir = tempdir("tls-variants");
    let ca = make_ca(&dir);
    let keys: [(&str, Vec<&str>, &str); 5] = [
        (
            "standard",
            vec!["rsa", "--variant", "standard", "--bits", "2048"],
            "standard",
        ),
        (
            "crt",
            vec!["rsa", "--variant", "crt", "--bits", "2048"],
            "CRT",
        ),
        (
            "multiprime",
            vec![
                "rsa",
                "--variant",
                "multiprime",
                "--bits",
                "2048",
                "--pkcs8",
            ],
            "multi-prime (3 primes)",
        ),
        ("p256", vec!["ec", "--curve", "p256"], "ECDSA-256"),
        ("ed25519", vec!["ec", "--curve", "ed25519"], "Ed25519"),
    ];
    for (name, gen, shown) in keys {
        let key = dir.join(format!("{name}.key"));
        let cert = dir.join(format!("{name}.pem"));
        let mut args = vec!["keygen"];
        args.extend(gen);
        args.extend(["-o", p(&key)]);
        sipsec(&args);
        assert!(
            sipsec(&["keygen", "show", p(&key)]).contains(shown),
            "{name}"
        );
        issue(&dir, &key, "127.0.0.1", &cert);
        let (_server, tls) = serve_tls(&dir, &cert, &key, &[]);
        for version in ["-tls1_3", "-tls1_2"] {
            let out = s_client(tls, &ca, &[version]);
            assert!(out.contains("verify return:1"), "{name} {version}: {out}");
            assert!(out.contains("SIP/2.0 200 OK"), "{name} {version}: {out}");
            assert!(
                out.contains("Via: SIP/2.0/TLS 127.0.0.1:5999"),
                "{name} {version}: {out}"
            );
        }
    }
}

/// The count of `sipsec_tls_handshakes_total{group="GROUP"}` and of
/// refusals for want of post-quantum key exchange.
fn by_group(server: &common::Running, group: &str) -> (u64, u64) {
    let http = common::banner_http_addr(&server.banner).expect("http address in the banner");
    let body = common::http_get(&http.to_string(), "/metrics");
    let value = |prefix: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (
        value(&format!(
            "sipsec_tls_handshakes_total{{group=\"{group}\"}} "
        )),
        value("sipsec_tls_pq_refused_total "),
    )
}

#[test]
fn openssl_30_is_served_classically_and_refused_when_post_quantum_is_required() {
    let dir = tempdir("tls-pq");
    let ca = make_ca(&dir);
    let (key, cert) = key_and_cert(&dir, "server", &["rsa", "--bits", "2048"], "127.0.0.1");
    // OpenSSL 3.0 offers no ML-KEM group: served over x25519.
    let (server, tls) = serve_tls(&dir, &cert, &key, &[]);
    let out = s_client(tls, &ca, &["-tls1_3"]);
    assert!(out.contains("SIP/2.0 200 OK"), "{out}");
    assert_eq!(by_group(&server, "x25519"), (1, 0));
    // /status shows the session: version, suite, group.
    let http = common::banner_http_addr(&server.banner)
        .expect("http")
        .to_string();
    let status = common::http_get(&http, "/status");
    let body = status.split("\r\n\r\n").nth(1).expect("body");
    let v: serde_json::Value = serde_json::from_str(body).expect("status JSON");
    let s = &v["tls"]["recent_sessions"][0];
    assert_eq!(
        (s["version"].as_str(), s["group"].as_str()),
        (Some("TLSv1_3"), Some("x25519")),
        "{v}"
    );
    assert!(
        s["suite"].as_str().is_some_and(|x| x.starts_with("TLS13_")),
        "{v}"
    );
    drop(server);
    // Required: refused with a handshake_failure alert, counted.
    let (server, tls) = serve_tls(&dir, &cert, &key, &["--tls-require-pq"]);
    let out = s_client(tls, &ca, &["-tls1_3"]);
    assert!(!out.contains("SIP/2.0 200"), "{out}");
    assert!(out.contains("handshake failure"), "{out}");
    let out = s_client(tls, &ca, &["-tls1_2"]);
    assert!(
        !out.contains("SIP/2.0 200"),
        "TLS 1.2 has no post-quantum exchange: {out}"
    );
    assert_eq!(by_group(&server, "x25519"), (0, 1));
    // The status says what is required and what was refused.
    let http = common::banner_http_addr(&server.banner)
        .expect("http")
        .to_string();
    let status = common::http_get(&http, "/status");
    let body = status.split("\r\n\r\n").nth(1).expect("body");
    let v: serde_json::Value = serde_json::from_str(body).expect("status JSON");
    assert_eq!(v["tls"]["require_pq"], true, "{v}");
    assert_eq!(v["tls"]["pq_refused_total"], 1, "{v}");
    // A list without a post-quantum group cannot be required.
    let conf = dir.join("classical.toml");
    std::fs::write(
        &conf,
        format!(
            "udp = \"127.0.0.1:0\"\n[tls]\ncert = \"{}\"\nkey = \"{}\"\ngroups = [\"x25519\"]\nrequire_pq = true\n",
            p(&cert),
            p(&key)
        ),
    )
    .expect("config");
    let err = start_error(&["--config", p(&conf)]);
    assert!(
        err.contains("tls.groups") && err.contains("post-quantum"),
        "{err}"
    );
    std::fs::write(
        &conf,
        format!(
            "udp = \"127.0.0.1:0\"\n[tls]\ncert = \"{}\"\nkey = \"{}\"\ngroups = [\"kyber512\"]\n",
            p(&cert),
            p(&key)
        ),
    )
    .expect("config");
    let err = start_error(&["--config", p(&conf)]);
    assert!(
        err.contains("\"kyber512\"") && err.contains("X25519MLKEM768"),
        "{err}"
    );
}

/// A client that kept the server's session ticket resumes: no
/// certificate, counted in `sipsec_tls_resumed_total` and marked in
/// `/status` (OpenSSL 3.0's s_client, `-sess_out` then `-sess_in`).
#[test]
fn openssl_resumes_a_session_from_its_ticket() {
    let dir = tempdir("tls-resume");
    let ca = make_ca(&dir);
    let (key, cert) = key_and_cert(&dir, "server", &["rsa", "--bits", "2048"], "127.0.0.1");
    let (server, tls) = serve_tls(&dir, &cert, &key, &[]);
    let session = dir.join("session.pem");
    let out = s_client(tls, &ca, &["-tls1_3", "-sess_out", p(&session)]);
    assert!(out.contains("SIP/2.0 200 OK"), "{out}");
    assert!(session.exists(), "a ticket was kept: {out}");
    let out = s_client(tls, &ca, &["-tls1_3", "-sess_in", p(&session)]);
    assert!(out.contains("SIP/2.0 200 OK"), "{out}");
    let http = common::banner_http_addr(&server.banner)
        .expect("http")
        .to_string();
    let metrics = common::http_get(&http, "/metrics");
    assert!(
        metrics.lines().any(|l| l == "sipsec_tls_resumed_total 1"),
        "{metrics}"
    );
    let status = common::http_get(&http, "/status");
    let body = status.split("\r\n\r\n").nth(1).expect("body");
    let v: serde_json::Value = serde_json::from_str(body).expect("status JSON");
    let sessions = v["tls"]["recent_sessions"].as_array().expect("sessions");
    let resumed: Vec<bool> = sessions
        .iter()
        .map(|s| s["resumed"].as_bool().unwrap_or_default())
        .collect();
    assert_eq!(resumed, [true, false], "newest first: {v}");
    assert_eq!(v["tls"]["session_tickets"], true, "{v}");
}

#[test]
fn mutual_tls_requires_a_client_certificate() {
    let dir = tempdir("tls-mutual");
    let ca = make_ca(&dir);
    let (key, cert) = key_and_cert(&dir, "server", &["rsa", "--bits", "2048"], "127.0.0.1");
    let (client_key, client_cert) = key_and_cert(&dir, "client", &["ec"], "alice.phone.test");
    let (_server, tls) = serve_tls(&dir, &cert, &key, &["--client-ca", p(&ca)]);
    let without = s_client(tls, &ca, &[]);
    assert!(!without.contains("SIP/2.0 200 OK"), "{without}");
    let with = s_client(
        tls,
        &ca,
        &["-cert", p(&client_cert), "-key", p(&client_key)],
    );
    assert!(with.contains("SIP/2.0 200 OK"), "{with}");
    // A certificate from another CA is refused too.
    let other = tempdir("tls-mutual-other");
    make_ca(&other);
    let (stranger_key, stranger_cert) = key_and_cert(&other, "stranger", &["ec"], "mallory.test");
    let stranger = s_client(
        tls,
        &ca,
        &["-cert", p(&stranger_cert), "-key", p(&stranger_key)],
    );
    assert!(!stranger.contains("SIP/2.0 200 OK"), "{stranger}");
}

/// Polls `s_client` until the served certificate's CN is `cn` (bounded:
/// the server checks its files every second).
fn wait_for_cn(tls: SocketAddr, ca: &Path, cn: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = s_client(tls, ca, &[]);
        if out.contains(&format!("depth=0 CN = {cn}")) || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn certificate_reloads_on_change_and_on_sighup_and_survives_a_broken_file() {
    let dir = tempdir("tls-reload");
    let ca = make_ca(&dir);
    let key = dir.join("live.key");
    let cert = dir.join("live.pem");
    sipsec(&[
        "keygen",
        "rsa",
        "--variant",
        "crt",
        "--bits",
        "2048",
        "-o",
        p(&key),
    ]);
    issue(&dir, &key, "first.test", &cert);
    let (server, tls) = serve_tls(&dir, &cert, &key, &[]);
    assert!(wait_for_cn(tls, &ca, "first.test").contains("CN = first.test"));

    // New key and certificate written in place: picked up without restart.
    let key2 = dir.join("next.key");
    let cert2 = dir.join("next.pem");
    sipsec(&[
        "keygen",
        "rsa",
        "--variant",
        "multiprime",
        "--bits",
        "2048",
        "-o",
        p(&key2),
    ]);
    issue(&dir, &key2, "second.test", &cert2);
    std::fs::copy(&key2, &key).unwrap();
    std::fs::copy(&cert2, &cert).unwrap();
    let out = wait_for_cn(tls, &ca, "second.test");
    assert!(
        out.contains("SIP/2.0 200 OK") && out.contains("CN = second.test"),
        "{out}"
    );

    // A broken key is refused (the server counts it); it keeps serving
    // the old pair.
    std::fs::write(&key, b"not a key").unwrap();
    let http = common::banner_http_addr(&server.banner)
        .expect("http address in the banner")
        .to_string();
    let refused = || {
        common::http_get(&http, "/metrics").lines().any(|l| {
            l.strip_prefix("sipsec_tls_reload_failures_total ")
                .and_then(|v| v.parse::<u64>().ok())
                .is_some_and(|v| v >= 1)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !refused() {
        assert!(Instant::now() < deadline, "the broken key was not refused");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = s_client(tls, &ca, &[]);
    assert!(
        out.contains("CN = second.test") && out.contains("200 OK"),
        "{out}"
    );

    // SIGHUP reloads even when the files' times did not change: a new
    // pair takes the live files' timestamps first, then renames over them
    // (atomically, so the server's poll never sees a changed time).
    let stamp = std::fs::metadata(&key).unwrap().modified().unwrap();
    let cert_stamp = std::fs::metadata(&cert).unwrap().modified().unwrap();
    let standard = ["rsa", "--variant", "standard", "--bits", "2048"];
    let (key3, cert3) = key_and_cert(&dir, "third", &standard, "third.test");
    for (f, t) in [(&key3, stamp), (&cert3, cert_stamp)] {
        std::fs::File::options()
            .write(true)
            .open(f)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
    std::fs::rename(&key3, &key).unwrap();
    std::fs::rename(&cert3, &cert).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(s_client(tls, &ca, &[]).contains("CN = second.test"));
    let pid = server.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    let out = wait_for_cn(tls, &ca, "third.test");
    assert!(
        out.contains("CN = third.test") && out.contains("200 OK"),
        "{out}"
    );
}

fn start_error(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("serve")
        .args(args)
        .output()
        .expect("sipsec runs");
    assert!(!out.status.success(), "{args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_tls_files_are_named_at_start() {
    let dir = tempdir("tls-bad");
    make_ca(&dir);
    let key = dir.join("a.key");
    let cert = dir.join("a.pem");
    let other_key = dir.join("b.key");
    sipsec(&["keygen", "rsa", "--bits", "1024", "-o", p(&key)]);
    sipsec(&["keygen", "rsa", "--bits", "1024", "-o", p(&other_key)]);
    issue(&dir, &key, "127.0.0.1", &cert);
    let data = dir.join("data");
    let base = [
        "--udp",
        "127.0.0.1:0",
        "--no-http",
        "--data-dir",
        p(&data),
        "--tls",
        "127.0.0.1:0",
    ];
    let run = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend(extra);
        start_error(&a)
    };
    let missing = dir.join("missing.pem");
    let e = run(&["--cert", p(&missing), "--key", p(&key)]);
    assert!(
        e.contains("missing.pem") && e.contains("No such file"),
        "{e}"
    );
    let e = run(&["--cert", p(&key), "--key", p(&key)]);
    assert!(e.contains("no PEM certificate"), "{e}");
    let e = run(&["--cert", p(&cert), "--key", p(&cert)]);
    assert!(e.contains("a.pem") && e.contains("private key"), "{e}");
    let e = run(&["--cert", p(&cert), "--key", p(&other_key)]);
    assert!(e.contains("does not match"), "{e}");
    let e = run(&["--cert", p(&cert)]);
    assert!(e.contains("--key"), "{e}");
    let e = run(&["--cert", p(&cert), "--key", p(&key), "--client-ca", p(&key)]);
    assert!(e.contains("a.key"), "{e}");
}

/// `openssl s_server` as a TLS callee: prints what it receives.
struct Callee {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
}

impl Drop for Callee {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[test]
fn proxy_forwards_to_a_sips_contact_over_verified_tls() {
    let dir = tempdir("tls-forward");
    let ca = make_ca(&dir);
    let (proxy_key, proxy_cert) =
        key_and_cert(&dir, "proxy", &["rsa", "--bits", "2048"], "127.0.0.1");
    let multiprime = ["rsa", "--variant", "multiprime", "--bits", "2048"];
    let (callee_key, callee_cert) = key_and_cert(&dir, "callee", &multiprime, "127.0.0.1");
    let port = free_tcp_port();
    // stdbuf: s_server's stdout is a pipe, line-buffer it so lines arrive
    // while it runs.
    let mut child = Command::new("stdbuf")
        .args(["-oL", "openssl", "s_server", "-accept", &port.to_string()])
        .args(["-cert", p(&callee_cert), "-key", p(&callee_key), "-quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_server");
    let stdout = child.stdout.take().expect("piped");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let callee = Callee { child, lines };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "openssl s_server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let data = dir.join("data");
    let proxy = serve(&[
        "--udp",
        "127.0.0.1:0",
        "--no-http",
        "--data-dir",
        p(&data),
        "--mode",
        "proxy",
        "--tls",
        "127.0.0.1:0",
        "--cert",
        p(&proxy_cert),
        "--key",
        p(&proxy_key),
        "--peer-ca",
        p(&ca),
    ]);
    let ua = UdpSocket::bind("127.0.0.1:0").unwrap();
    ua.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let me = ua.local_addr().unwrap();
    let register = format!(
        "REGISTER sip:{a} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bKr1\r\nFrom: <sip:bob@{a}>;tag=r\r\n\
         To: <sip:bob@{a}>\r\nCall-ID: reg-tls\r\nCSeq: 1 REGISTER\r\n\
         Contact: <sips:bob@127.0.0.1:{port}>\r\nExpires: 600\r\nContent-Length: 0\r\n\r\n",
        a = proxy.addr
    );
    ua.send_to(register.as_bytes(), proxy.addr).unwrap();
    let mut buf = [0u8; 4096];
    let n = ua.recv(&mut buf).unwrap();
    assert!(
        buf[..n].starts_with(b"SIP/2.0 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    let invite = format!(
        "INVITE sip:bob@{a} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bKi1\r\nFrom: <sip:alice@{a}>;tag=i\r\n\
         To: <sip:bob@{a}>\r\nCall-ID: call-tls\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@{me}>\r\n\
         Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n",
        a = proxy.addr
    );
    ua.send_to(invite.as_bytes(), proxy.addr).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut got = Vec::new();
    while Instant::now() < deadline && !got.iter().any(|l: &String| l.starts_with("Call-ID")) {
        if let Ok(l) = callee.lines.recv_timeout(Duration::from_millis(200)) {
            got.push(l);
        }
    }
    let text = got.join("\n");
    assert!(
        text.contains(&format!("INVITE sips:bob@127.0.0.1:{port} SIP/2.0")),
        "{text}"
    );
    assert!(text.contains("Via: SIP/2.0/TLS 127.0.0.1:"), "{text}");
    assert!(text.contains("Call-ID: call-tls"), "{text}");
}

/// Waits (at most 15 s) for a line of `peer` starting with `prefix`;
/// returns every line read until then.
fn lines_until(peer: &Callee, prefix: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut got = Vec::new();
    while Instant::now() < deadline && !got.iter().any(|l: &String| l.starts_with(prefix)) {
        if let Ok(l) = peer.lines.recv_timeout(Duration::from_millis(200)) {
            got.push(l);
        }
    }
    got
}

/// RFC 5923: a peer proxy that connected over TLS with a client
/// certificate and put `alias` in its Via gets the requests for its
/// sent-by back over that connection, instead of over a new one, but only
/// for a sent-by its certificate names: bob2's INVITE (a sent-by the
/// certificate does not name) is not sent down it, and bob's is.
#[test]
fn a_tls_peer_named_by_its_certificate_gets_requests_back_on_its_connection() {
    requests_come_back_on_the_aliased_connection(
        "tls-alias",
        &["127.0.0.1"],
        "127.0.0.1",
        "127.0.0.2",
    );
}

/// The same with domain names, the usual sent-by of a TLS peer: the
/// certificate names `peer.proxy.test` (a dNSName), so requests for
/// `sips:…@peer.proxy.test:PORT` go down the connection — a name this
/// server would not otherwise reach, as it does no DNS — and those for
/// `other.proxy.test`, which the certificate does not name, do not.
#[test]
fn a_tls_peer_gets_requests_for_the_domain_name_its_certificate_names() {
    requests_come_back_on_the_aliased_connection(
        "tls-alias-name",
        &["peer.proxy.test", "127.0.0.1"],
        "peer.proxy.test",
        "other.proxy.test",
    );
}

/// A proxy peer with a certificate for `sans` aliases `own` and `other`
/// (at a port nothing listens on); bob's contact is at `own`, bob2's at
/// `other`: only bob's INVITE may come down the peer's connection.
fn requests_come_back_on_the_aliased_connection(name: &str, sans: &[&str], own: &str, other: &str) {
    let dir = tempdir(name);
    let ca = make_ca(&dir);
    let (key, cert) = key_and_cert(&dir, "server", &["ec"], "127.0.0.1");
    let peer_key = dir.join("peer.key");
    let peer_cert = dir.join("peer.pem");
    sipsec(&["keygen", "ec", "-o", p(&peer_key)]);
    issue_for(&dir, &peer_key, "peer.proxy.test", sans, &peer_cert);
    let (server, tls) = serve_tls(
        &dir,
        &cert,
        &key,
        &[
            "--mode",
            "proxy",
            "--client-ca",
            p(&ca),
            "--peer-ca",
            p(&ca),
        ],
    );
    // The sent-by the peer announces: nothing listens there, so a request
    // for it arrives at the peer only over the connection it opened.
    let port = free_tcp_port();
    let ua = UdpSocket::bind("127.0.0.1:0").unwrap();
    ua.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let me = ua.local_addr().unwrap();
    for (user, host) in [("bob", own), ("bob2", other)] {
        let register = format!(
            "REGISTER sip:{a} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bKr{user}\r\n\
             From: <sip:{user}@{a}>;tag=r\r\nTo: <sip:{user}@{a}>\r\nCall-ID: reg-{user}\r\n\
             CSeq: 1 REGISTER\r\nContact: <sips:{user}@{host}:{port}>\r\nExpires: 600\r\n\
             Content-Length: 0\r\n\r\n",
            a = server.addr
        );
        ua.send_to(register.as_bytes(), server.addr).unwrap();
        let mut buf = [0u8; 4096];
        let n = ua.recv(&mut buf).unwrap();
        assert!(buf[..n].starts_with(b"SIP/2.0 200"), "{user}");
    }
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect", &tls.to_string(), "-CAfile", p(&ca)])
        .args(["-cert", p(&peer_cert), "-key", p(&peer_key)])
        .args(["-verify_return_error", "-quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_client");
    let mut stdin = child.stdin.take().expect("piped");
    let stdout = child.stdout.take().expect("piped");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line.trim_end().to_owned()).is_err() {
                break;
            }
        }
    });
    let peer = Callee { child, lines };
    let aliases = |sent_by: &str, call: &str| {
        format!(
            "OPTIONS sip:{tls} SIP/2.0\r\nVia: SIP/2.0/TLS {sent_by};alias;branch=z9hG4bK{call}\r\n\
             From: <sip:peer@{sent_by}>;tag=t{call}\r\nTo: <sip:{tls}>\r\nCall-ID: {call}\r\n\
             CSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
        )
    };
    stdin
        .write_all(aliases(&format!("{other}:{port}"), "alias-other").as_bytes())
        .unwrap();
    stdin
        .write_all(aliases(&format!("{own}:{port}"), "alias-own").as_bytes())
        .unwrap();
    stdin.flush().unwrap();
    let got = lines_until(&peer, "Call-ID: alias-own");
    assert!(
        got.iter().filter(|l| l.starts_with("SIP/2.0 200")).count() == 2,
        "{got:?}"
    );
    let invite = |user: &str| {
        format!(
            "INVITE sip:{user}@{a} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bKi{user}\r\n\
             From: <sip:alice@{a}>;tag=i\r\nTo: <sip:{user}@{a}>\r\nCall-ID: call-{user}\r\n\
             CSeq: 1 INVITE\r\nContact: <sip:alice@{me}>\r\nMax-Forwards: 70\r\n\
             Content-Length: 0\r\n\r\n",
            a = server.addr
        )
    };
    // Sent in this order by one socket, handled in this order: had bob2's
    // INVITE gone down the connection, it would arrive before bob's.
    ua.send_to(invite("bob2").as_bytes(), server.addr).unwrap();
    ua.send_to(invite("bob").as_bytes(), server.addr).unwrap();
    let got = lines_until(&peer, "Call-ID: call-bob");
    let text = got.join("\n");
    assert!(
        text.contains(&format!("INVITE sips:bob@{own}:{port} SIP/2.0")),
        "{text}"
    );
    assert!(!text.contains("bob2"), "{text}");
    drop(stdin);
}

/// Completed TLS handshakes, from the server's /metrics.
fn handshakes(server: &common::Running) -> u64 {
    let http = common::banner_http_addr(&server.banner).expect("http address in the banner");
    let mut s = std::net::TcpStream::connect(http).expect("http");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .expect("request");
    let mut body = String::new();
    s.read_to_string(&mut body).expect("response");
    let counts: Vec<u64> = body
        .lines()
        .filter(|l| l.starts_with("sipsec_tls_handshakes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.trim().parse().ok())
        .collect();
    assert!(!counts.is_empty(), "no handshake counters: {body}");
    counts.iter().sum()
}

#[test]
fn bench_drives_register_and_invite_over_tls() {
    let dir = tempdir("tls-bench");
    let ca = make_ca(&dir);
    let multiprime = ["rsa", "--variant", "multiprime", "--bits", "2048"];
    let (key, cert) = key_and_cert(&dir, "server", &multiprime, "127.0.0.1");
    let (server, tls) = serve_tls(&dir, &cert, &key, &["--mode", "proxy"]);
    let udp = server.addr.to_string();
    let target = tls.to_string();
    for (scenario, extra) in [
        ("register", vec![]),
        ("invite", vec!["--callee-registrar", udp.as_str()]),
    ] {
        let mut args = vec![
            "bench",
            "run",
            "--target",
            &target,
            "--transport",
            "tls",
            "--tls-ca",
            p(&ca),
            "--scenario",
            scenario,
            "--rate",
            "300",
            "--calls",
            "300",
            "--drain",
            "5",
        ];
        args.extend(extra);
        let out = sipsec(&args);
        assert!(
            out.contains("300 started, 300 ok, 0 failed"),
            "{scenario}: {out}"
        );
    }
    // A new connection, and a full handshake, for every call.
    let before = handshakes(&server);
    let out = sipsec(&[
        "bench",
        "run",
        "--target",
        &target,
        "--transport",
        "tls",
        "--tls-ca",
        p(&ca),
        "--connection-per-call",
        "--threads",
        "4",
        "--scenario",
        "register",
        "--rate",
        "100",
        "--calls",
        "100",
    ]);
    assert!(out.contains("100 started, 100 ok, 0 failed"), "{out}");
    assert_eq!(handshakes(&server) - before, 100);
    // A CA that did not issue the server's certificate: every call fails,
    // and the report says why.
    let out = failing_bench_run(&[
        "--target",
        &target,
        "--transport",
        "tls",
        "--tls-ca",
        p(&cert),
    ]);
    assert!(out.contains("UnknownIssuer"), "{out}");
}

/// The load generator over WS and WSS (RFC 7118): an upgrade with the
/// `sip` subprotocol, then masked frames; registrations with digest, and
/// calls from WSS callers to a UDP callee across the WS ↔ UDP bridge.
#[test]
fn bench_drives_register_and_invite_over_websocket() {
    let dir = tempdir("ws-bench");
    let ca = make_ca(&dir);
    let (key, cert) = key_and_cert(&dir, "server", &["ec"], "127.0.0.1");
    let csv = dir.join("users.csv");
    let mut rows = String::from("username,password\ncallee,pw-callee\n");
    for i in 0..20 {
        rows.push_str(&format!("user{i:05},pw{i}\n"));
    }
    std::fs::write(&csv, &rows).expect("csv");
    let users = dir.join("users.tsv");
    sipsec(&["users", "import", p(&csv), "--file", p(&users)]);
    let extra = [
        "--mode",
        "proxy",
        "--auth",
        "--users",
        p(&users),
        "--ws",
        "127.0.0.1:0",
        "--wss",
        "127.0.0.1:0",
    ];
    let (server, _) = serve_tls(&dir, &cert, &key, &extra);
    let udp = server.addr.to_string();
    let ws = common::banner_listener(&server.banner, "ws").expect("ws in the banner");
    let wss = common::banner_listener(&server.banner, "wss").expect("wss in the banner");
    let run = |transport: &str, target: SocketAddr, scenario: &str| {
        let target = target.to_string();
        let mut args = vec![
            "bench",
            "run",
            "--transport",
            transport,
            "--target",
            &target,
            "--auth",
            "--credentials",
            p(&csv),
            "--scenario",
            scenario,
            "--rate",
            "200",
            "--calls",
            "200",
            "--drain",
            "5",
        ];
        if transport == "wss" {
            args.extend(["--tls-ca", p(&ca)]);
        }
        if scenario == "invite" {
            args.extend(["--callee-registrar", &udp]);
        }
        sipsec(&args)
    };
    for (transport, target) in [("ws", ws), ("wss", wss)] {
        for scenario in ["register", "invite"] {
            let out = run(transport, target, scenario);
            assert!(
                out.contains("200 started, 200 ok, 0 failed"),
                "{transport} {scenario}: {out}"
            );
        }
    }
    // An upgrade the server refuses (no Origin, and only listed origins
    // are let in) fails every call, and the report says why.
    let data = dir.join("data-origins");
    let strict = common::serve(&[
        "--udp",
        "127.0.0.1:0",
        "--no-http",
        "--data-dir",
        p(&data),
        "--ws",
        "127.0.0.1:0",
        "--ws-origins",
        "https://phone.example",
    ]);
    let strict_ws = common::banner_listener(&strict.banner, "ws").expect("ws in the banner");
    let text = failing_bench_run(&["--transport", "ws", "--target", &strict_ws.to_string()]);
    assert!(
        text.contains("WebSocket upgrade refused: HTTP/1.1 403"),
        "{text}"
    );
    // Without --tls-ca a WSS run is refused before it starts.
    let out = Command::new(BIN)
        .args([
            "bench",
            "run",
            "--transport",
            "wss",
            "--target",
            &wss.to_string(),
        ])
        .output()
        .expect("sipsec runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-ca"));
}

#[test]
fn rsa_variants_experiment_quick_mode_answers_every_call() {
    let dir = tempdir("tls-rsa-variants");
    let json = dir.join("points.json");
    let html = dir.join("page.html");
    let out = Command::new(BIN)
        .args([
            "bench",
            "rsa-variants",
            "--quick",
            "--json",
            p(&json),
            "--html",
            p(&html),
        ])
        .output()
        .expect("sipsec runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let points: serde_json::Value = common::report_json(&json);
    let points = points.as_array().expect("array");
    // Three variants × inbound and outbound at 1024 bits, 100 calls each.
    assert_eq!(points.len(), 6, "{text}");
    for pt in points {
        assert_eq!(pt["ok"], 100, "{pt}");
        assert_eq!(pt["bits"], 1024);
        assert!(pt["cpu_percent"].as_f64().expect("number") > 0.0, "{pt}");
    }
    for needle in [
        "RSA-1024 standard",
        "RSA-1024 crt",
        "RSA-1024 multiprime3",
        "outbound",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    let page = std::fs::read_to_string(&html).expect("html written");
    assert!(page.contains("<svg") && page.contains("inbound TLS connections"));
    common::assert_plots_readable(&page);
    common::assert_page_provenance(&page);
}
