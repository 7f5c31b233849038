//! The operator's view of a running server: structured logs, status
//! summaries and filters, metrics read by the reference Prometheus
//! parser, and a graceful stop on SIGTERM.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::{http_get, tempdir, BIN};
use serde_json::Value;

fn udp() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("socket");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s
}

fn exchange(sock: &UdpSocket, to: SocketAddr, msg: &str) -> String {
    sock.send_to(msg.as_bytes(), to).expect("send");
    recv(sock)
}

fn recv(sock: &UdpSocket) -> String {
    let mut buf = [0u8; 8192];
    let (n, _) = sock.recv_from(&mut buf).expect("an answer");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn register_msg(server: SocketAddr, user: &str, contact: &str, call: &str, extra: &str) -> String {
    format!(
        "REGISTER sip:{server} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bK{call}\r\nFrom: <sip:{user}@{server}>;tag=1\r\nTo: <sip:{user}@{server}>\r\nCall-ID: {call}\r\nCSeq: 1 REGISTER\r\nContact: <{contact}>\r\n{extra}Expires: 3600\r\nContent-Length: 0\r\n\r\n"
    )
}

fn register(server: SocketAddr, user: &str, contact: &str) -> String {
    let call = format!(
        "{user}-{}",
        contact.len() + contact.bytes().map(usize::from).sum::<usize>()
    );
    exchange(
        &udp(),
        server,
        &register_msg(server, user, contact, &call, ""),
    )
}

/// Answers a real challenge for `user` wrongly: one authentication failure.
fn wrong_answer(sock: &UdpSocket, server: SocketAddr, user: &str, call: &str) -> String {
    let challenge = exchange(
        sock,
        server,
        &register_msg(server, user, "sip:x@192.0.2.9", call, ""),
    );
    assert!(challenge.starts_with("SIP/2.0 401"), "{challenge}");
    let nonce = challenge
        .split("nonce=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a nonce");
    let auth = format!(
        "Authorization: Digest username=\"{user}\", realm=\"sipsec\", nonce=\"{nonce}\", uri=\"sip:{server}\", response=\"{}\", algorithm=MD5, qop=auth, nc=00000001, cnonce=\"c\"\r\n",
        "0".repeat(32)
    );
    exchange(
        sock,
        server,
        &register_msg(server, user, "sip:x@192.0.2.9", call, &auth)
            .replace("CSeq: 1", "CSeq: 2")
            .replace(
                &format!("branch=z9hG4bK{call}"),
                &format!("branch=z9hG4bK{call}x"),
            ),
    )
}

/// Sends SIGTERM and waits (bounded) for the process to end.
fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(ok.success());
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return s;
        }
        assert!(Instant::now() < until, "the server did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The JSON log lines a stopped server wrote.
fn json_lines(child: &mut Child) -> Vec<Value> {
    let mut err = String::new();
    child
        .stderr
        .as_mut()
        .expect("piped")
        .read_to_string(&mut err)
        .expect("stderr");
    err.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn find<'a>(lines: &'a [Value], message: &str) -> Option<&'a Value> {
    lines
        .iter()
        .find(|l| l["message"].as_str() == Some(message))
}

/// A server on the embedded defaults in a fresh directory, and its
/// operator endpoint's address.
fn serve_with_endpoint(name: &str) -> (common::Running, String) {
    let dir = tempdir(name);
    let s = common::serve_in(&dir.join("data"), &[]);
    let http = common::banner_http_addr(&s.banner)
        .expect("http")
        .to_string();
    (s, http)
}

#[test]
fn status_summarises_filters_and_pages() {
    let (s, http) = serve_with_endpoint("op-status");
    for i in 0..30 {
        let r = register(
            s.addr,
            &format!("u{i}"),
            &format!("sip:u{i}@192.0.2.1:5060"),
        );
        assert!(r.starts_with("SIP/2.0 200"), "{r}");
    }
    for port in [1, 2, 3] {
        let r = register(s.addr, "multi", &format!("sip:multi@192.0.2.2:{port}"));
        assert!(r.starts_with("SIP/2.0 200"), "{r}");
    }
    let status = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(["status", "--http", &http])
            .args(args)
            .output()
            .expect("runs");
        assert!(out.status.success(), "{}", common::text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The summary: counts and the largest AoRs, not 33 rows.
    let summary = status(&[]);
    assert!(summary.contains("bindings 33 for 31 AoR(s)"), "{summary}");
    assert!(
        summary.contains(&format!("most contacts: sip:multi@{} (3)", s.addr.ip())),
        "{summary}"
    );
    assert!(!summary.contains("192.0.2.1"), "no rows: {summary}");
    assert!(summary.contains("banned 0"), "{summary}");
    // A glob over the whole AoR, and a plain part of it.
    let some = status(&["--aor", "sip:u1?@*"]);
    assert!(some.contains("10 binding(s) matching"), "{some}");
    assert!(
        some.contains("sip:u15@") && !some.contains("sip:u5@"),
        "{some}"
    );
    assert!(status(&["--aor", "MULTI"]).contains("3 binding(s) matching"));
    // Every binding, as JSON.
    let all: Value = serde_json::from_str(&status(&["--all", "--json"])).expect("JSON");
    assert_eq!(all["bindings"].as_array().map(Vec::len), Some(33));
    assert_eq!(all["summary"]["aors"], 31);
    // Pages of the endpoint itself.
    let page = http_get(&http, "/status?aor=sip:*&offset=28&limit=5");
    let body: Value =
        serde_json::from_str(page.split_once("\r\n\r\n").expect("body").1).expect("JSON");
    assert_eq!(body["page"]["matched"], 33);
    assert_eq!(body["bindings"].as_array().map(Vec::len), Some(5));
    let bad = http_get(&http, "/status?limit=lots");
    assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
    assert!(bad.contains("not a whole number"), "{bad}");
}

/// A GET answered within 10 s (a hung endpoint fails the test instead
/// of hanging it).
fn get_within(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("http endpoint");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("{path} unanswered: {e}"));
    text
}

/// The server closes `s` (EOF or reset) within 10 s, sending nothing.
fn assert_closed_unanswered(mut s: std::net::TcpStream, who: &str) {
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("{who} is still open or was answered: {other:?} {rest:?}"),
    }
}

/// A client that drips its request a byte at a time, or connects and
/// says nothing, neither holds the endpoint from other clients nor keeps
/// its connection past the exchange deadline (5 s in all, not per read).
#[test]
fn slow_operator_clients_neither_block_others_nor_outstay_the_deadline() {
    let (_server, http) = serve_with_endpoint("op-slow-http");
    let silent = std::net::TcpStream::connect(&http).expect("connect");
    let mut drip = std::net::TcpStream::connect(&http).expect("connect");
    drip.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    // Both are being served (or waited on) while these are answered.
    std::thread::sleep(Duration::from_millis(300));
    assert!(get_within(&http, "/metrics").starts_with("HTTP/1.1 200"));
    assert!(get_within(&http, "/status").starts_with("HTTP/1.1 200"));
    // One byte every 300 ms: each read is quick, the whole is not. The
    // request would take 30 s; the server closes it at its 5 s deadline.
    let request = format!("GET /metrics HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "a".repeat(60));
    let started = Instant::now();
    let mut closed = None;
    for b in request.as_bytes() {
        if drip.write_all(&[*b]).is_err() {
            closed = Some(started.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
        assert!(get_within(&http, "/metrics").starts_with("HTTP/1.1 200"));
        if started.elapsed() > Duration::from_secs(7) {
            // Past the deadline: the server has closed its end; a read
            // says so (EOF or reset), with nothing answered.
            let mut rest = Vec::new();
            let _ = drip.read_to_end(&mut rest);
            assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
            closed = Some(started.elapsed());
            break;
        }
    }
    let closed = closed.expect("the dripping client was closed before its request ended");
    assert!(closed < Duration::from_secs(25), "{closed:?}");
    assert_closed_unanswered(silent, "the silent client");
    assert!(get_within(&http, "/metrics").starts_with("HTTP/1.1 200"));
}

/// Clients that connect and say nothing, more than the endpoint serves
/// at once, do not keep a scrape out: each newcomer takes the place of
/// the longest-silent one, which is closed.
#[test]
fn a_crowd_of_silent_clients_cannot_keep_a_scrape_out() {
    let (_server, http) = serve_with_endpoint("op-crowd-http");
    // Three times the places (8), all silent.
    let crowd: Vec<_> = (0..24)
        .map(|_| std::net::TcpStream::connect(&http).expect("connect"))
        .collect();
    for _ in 0..3 {
        assert!(get_within(&http, "/metrics").starts_with("HTTP/1.1 200"));
    }
    // The first of the crowd made way.
    let first = crowd.into_iter().next().expect("a client");
    assert_closed_unanswered(first, "the first silent client");
}

#[test]
fn metrics_parse_with_the_reference_parser() {
    let (s, http) = serve_with_endpoint("op-metrics");
    assert!(register(s.addr, "alice", "sip:alice@192.0.2.1").starts_with("SIP/2.0 200"));
    // One REGISTER over TCP, one OPTIONS for someone unknown.
    let mut tcp = std::net::TcpStream::connect(s.addr).expect("tcp");
    tcp.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let msg = register_msg(
        s.addr,
        "bob",
        "sip:bob@192.0.2.3;transport=tcp",
        "tcp-1",
        "",
    )
    .replace("SIP/2.0/UDP", "SIP/2.0/TCP");
    tcp.write_all(msg.as_bytes()).expect("write");
    let mut line = String::new();
    BufReader::new(&tcp).read_line(&mut line).expect("answer");
    assert!(line.starts_with("SIP/2.0 200"), "{line}");
    let text = http_get(&http, "/metrics");
    let body = text.split_once("\r\n\r\n").expect("body").1;
    // The Prometheus project's own Python parser (Debian's
    // python3-prometheus-client, installed by setup.sh).
    let script = "import sys, json\nfrom prometheus_client.parser import text_string_to_metric_families\nout = []\nfor f in text_string_to_metric_families(sys.stdin.read()):\n    for s in f.samples:\n        out.append([f.type, s.name, s.labels, s.value])\nprint(json.dumps(out))\n";
    let mut py = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("/usr/bin/python3 (run ./setup.sh)");
    py.stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("feed");
    let out = py.wait_with_output().expect("parser ends");
    assert!(
        out.status.success(),
        "the exposition does not parse: {}",
        common::text(&out)
    );
    let samples: Vec<(String, String, Value, f64)> =
        serde_json::from_slice(&out.stdout).expect("parser output");
    let value = |name: &str, labels: &[(&str, &str)]| {
        samples
            .iter()
            .find(|(_, n, l, _)| {
                n == name && labels.iter().all(|(k, v)| l[*k].as_str() == Some(*v))
            })
            .map(|s| s.3)
    };
    assert_eq!(
        value(
            "sipsec_responses_total",
            &[("code", "200"), ("method", "REGISTER")]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            "sipsec_requests_by_transport_total",
            &[("transport", "tcp")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            "sipsec_requests_by_transport_total",
            &[("transport", "udp")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value("sipsec_connections", &[("transport", "tcp")]),
        Some(1.0)
    );
    assert_eq!(value("sipsec_bans_total", &[]), Some(0.0));
    // A worker a CPU by default, steered by Call-ID where there are two.
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let steered = if cpus > 1 { 1.0 } else { 0.0 };
    assert_eq!(value("sipsec_udp_steered_by_call", &[]), Some(steered));
    let said = s.banner.contains("worker(s) steered by Call-ID");
    assert_eq!(said, cpus > 1, "{}", s.banner);
    assert!(value("process_resident_memory_bytes", &[]).is_some_and(|v| v > 1e6));
    assert!(value("process_open_fds", &[]).is_some_and(|v| v >= 5.0));
    assert!(value("process_cpu_seconds_total", &[]).is_some());
    let start = value("process_start_time_seconds", &[]).expect("start time");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    assert!((now - start).abs() < 600.0, "{start} vs {now}");
    let info = samples
        .iter()
        .find(|(_, n, _, _)| n == "sipsec_build_info")
        .expect("build info");
    assert_eq!(info.2["version"], env!("CARGO_PKG_VERSION"));
    assert!(!info.2["commit"].as_str().unwrap_or("").is_empty());
}

#[test]
fn logs_name_attackers_bans_and_relays_as_json() {
    let dir = tempdir("op-logs");
    let users = dir.join("users.tsv");
    common::import_users("alice,secret\n", &dir, &users);
    let cfg = dir.join("guard.toml");
    std::fs::write(&cfg, "[guard]\nmax_auth_failures = 3\n").expect("config");
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--udp", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args([
            "--workers",
            "1",
            "--mode",
            "proxy",
            "--auth",
            "--log-format",
            "json",
            // Beyond loopback with no origin list: warned at start.
            "--ws",
            "0.0.0.0:0",
        ])
        .arg("--config")
        .arg(&cfg)
        .arg("--users")
        .arg(&users)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("RUST_LOG", "info");
    let mut s = common::serve_command(cmd);
    let server = s.addr;
    // A relay attempt (before the failures below ban 127.0.0.1).
    let other = udp();
    let invite = format!(
        "INVITE sip:bob@elsewhere.example SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bKrelay\r\nFrom: <sip:x@{server}>;tag=1\r\nTo: <sip:bob@elsewhere.example>\r\nCall-ID: relay\r\nCSeq: 1 INVITE\r\nContact: <sip:x@127.0.0.1:9>\r\nContent-Length: 0\r\n\r\n"
    );
    let denied = exchange(&other, server, &invite);
    assert!(denied.starts_with("SIP/2.0 403"), "{denied}");
    let sock = udp();
    // Wrong answers to real challenges: each an authentication failure,
    // the third a ban.
    for i in 0..3 {
        let answer = wrong_answer(&sock, server, "alice", &format!("bad-{i}"));
        assert!(answer.starts_with("SIP/2.0 401"), "{answer}");
    }
    let status = terminate(&mut s.child);
    assert!(status.success(), "{status:?}");
    let lines = json_lines(&mut s.child);
    let started = find(&lines, "started").expect("a start line");
    assert_eq!(started["target"], "sipsec::server");
    assert!(started["timestamp"]
        .as_str()
        .is_some_and(|t| t.ends_with('Z')));
    let any_origin = lines
        .iter()
        .find(|l| {
            l["message"].as_str().is_some_and(|m| {
                m.starts_with("SIP over WebSocket takes pages from any web origin")
            })
        })
        .expect("a warning that any page may connect");
    assert_eq!(any_origin["level"], "WARN");
    assert_eq!(any_origin["proto"], "ws");
    let failed = find(&lines, "authentication failed").expect("an auth failure line");
    assert_eq!(failed["level"], "WARN");
    assert_eq!(failed["user"], "alice");
    assert!(failed["src"]
        .as_str()
        .is_some_and(|a| a.starts_with("127.0.0.1:")));
    let ban = find(
        &lines,
        "source banned after repeated authentication failures",
    )
    .expect("a ban line");
    assert_eq!(ban["ip"], "127.0.0.1");
    assert_eq!(ban["scope"], "all", "failures over UDP shut out everything");
    assert_eq!(ban["seconds"], 600);
    let relay = find(&lines, "relaying denied (403)").expect("a relay line");
    assert_eq!(relay["ruri"], "sip:bob@elsewhere.example");
    assert!(find(&lines, "stopped").is_some());
    // The rate limit on log lines: three failures within a second make
    // one line (the others are counted in the next one).
    let failures = lines
        .iter()
        .filter(|l| l["message"] == "authentication failed")
        .count();
    assert_eq!(failures, 1, "{lines:?}");
}

#[test]
fn log_levels_filter_and_bad_filters_are_refused() {
    let dir = tempdir("op-level");
    let mut cmd = Command::new(BIN);
    cmd.args([
        "serve",
        "--udp",
        "127.0.0.1:0",
        "--no-http",
        "--workers",
        "1",
    ])
    .args(["--log-level", "warn"])
    .arg("--data-dir")
    .arg(dir.join("data"))
    .env("RUST_LOG", "debug");
    let mut s = common::serve_command(cmd);
    assert!(terminate(&mut s.child).success());
    let mut err = String::new();
    s.child
        .stderr
        .as_mut()
        .expect("piped")
        .read_to_string(&mut err)
        .expect("stderr");
    assert!(
        !err.contains("started") && !err.contains("stopped"),
        "--log-level warn wins over RUST_LOG: {err}"
    );
    for (env, flag, needle) in [
        (Some("sipsec=loud"), None, "RUST_LOG"),
        (None, Some("sipsec::conn=nope"), "--log-level"),
    ] {
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--udp", "127.0.0.1:0", "--no-http"])
            .arg("--data-dir")
            .arg(dir.join("data2"));
        if let Some(e) = env {
            cmd.env("RUST_LOG", e);
        }
        if let Some(f) = flag {
            cmd.args(["--log-level", f]);
        }
        let out = cmd.output().expect("runs");
        assert!(!out.status.success());
        assert!(
            common::text(&out).contains(needle),
            "{}",
            common::text(&out)
        );
    }
}

/// SIGTERM: new requests get 503, an INVITE under way still gets its
/// answer, TLS connections get close_notify, the journal is flushed, and
/// the stop is logged; the binding is there after a restart.
#[test]
fn sigterm_drains_then_stops_cleanly() {
    let dir = tempdir("op-drain");
    common::tls_files(&dir);
    let f = |n: &str| dir.join(n).to_str().expect("utf-8").to_owned();
    let data = f("data");
    let args = [
        "--mode",
        "proxy",
        "--stateful",
        "--log-format",
        "json",
        "--cert",
        &f("srv.pem"),
        "--key",
        &f("srv.key"),
        "--tls",
        "127.0.0.1:0",
    ];
    let mut s = common::serve_in(std::path::Path::new(&data), &args);
    let server = s.addr;
    let tls_addr = common::banner_tls_addr(&s.banner).expect("tls address");
    // The callee, a UDP socket playing a phone.
    let callee = udp();
    let contact = format!("sip:bob@{}", callee.local_addr().expect("addr"));
    assert!(register(server, "bob", &contact).starts_with("SIP/2.0 200"));
    // A TLS phone connected (handshake done).
    let mut b = openssl::ssl::SslConnector::builder(openssl::ssl::SslMethod::tls()).expect("tls");
    b.set_ca_file(f("ca.pem")).expect("ca");
    let tcp = std::net::TcpStream::connect(tls_addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut tls = b.build().connect("127.0.0.1", tcp).expect("handshake");
    // A call under way: the INVITE reached the callee, unanswered.
    let caller = udp();
    let invite = format!(
        "INVITE sip:bob@{server} SIP/2.0\r\nVia: SIP/2.0/UDP {};branch=z9hG4bKdrain1\r\nFrom: <sip:carol@{server}>;tag=c1\r\nTo: <sip:bob@{server}>\r\nCall-ID: drain-call\r\nCSeq: 1 INVITE\r\nContact: <sip:carol@{}>\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n",
        caller.local_addr().expect("addr"),
        caller.local_addr().expect("addr")
    );
    caller.send_to(invite.as_bytes(), server).expect("invite");
    let trying = recv(&caller);
    assert!(trying.starts_with("SIP/2.0 100"), "{trying}");
    let forwarded = recv(&callee);
    assert!(forwarded.starts_with("INVITE sip:bob@"), "{forwarded}");
    // Stop.
    Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status()
        .expect("kill");
    // New work is turned away once the signal is taken: asked until it
    // is, each time as a new transaction. A REGISTER answered before
    // then is a binding like any other: kept through the stop.
    let until = Instant::now() + Duration::from_secs(20);
    let (mut dave_registered, mut tries) = (false, 0);
    let late = loop {
        tries += 1;
        let call = format!("late-{tries}");
        let msg = register_msg(server, "dave", "sip:dave@192.0.2.5", &call, "");
        let r = exchange(&udp(), server, &msg);
        if r.starts_with("SIP/2.0 503") || Instant::now() >= until {
            break r;
        }
        dave_registered |= r.starts_with("SIP/2.0 200");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(late.contains("Retry-After: 5"), "{late}");
    // ...while the call under way is answered through the proxy.
    let head: Vec<&str> = forwarded
        .split("\r\n")
        .filter(|l| {
            ["Via:", "From:", "To:", "Call-ID:", "CSeq:", "Record-Route:"]
                .iter()
                .any(|h| l.starts_with(h))
        })
        .map(|l| {
            if l.starts_with("To:") {
                "To: <sip:bob@x>;tag=b1"
            } else {
                l
            }
        })
        .collect();
    let ok = format!(
        "SIP/2.0 200 OK\r\n{}\r\nContact: <{contact}>\r\nContent-Length: 0\r\n\r\n",
        head.join("\r\n")
    );
    callee
        .send_to(ok.as_bytes(), server)
        .expect("answer the call");
    let answered = recv(&caller);
    assert!(answered.starts_with("SIP/2.0 200"), "{answered}");
    // The TLS phone is told goodbye properly: close_notify, a clean end.
    let mut buf = [0u8; 64];
    match tls.ssl_read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.code() == openssl::ssl::ErrorCode::ZERO_RETURN => {}
        other => panic!("expected close_notify, got {other:?}"),
    }
    let status = {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = s.child.try_wait().expect("wait") {
                break st;
            }
            assert!(Instant::now() < until, "the server did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    assert!(status.success(), "{status:?}");
    let lines = json_lines(&mut s.child);
    let stopping = find(
        &lines,
        "stopping: new requests get 503, transactions under way may finish",
    )
    .expect("a stopping line");
    assert_eq!(stopping["signal"], "SIGTERM");
    let stopped = find(&lines, "stopped").expect("a stopped line");
    assert_eq!(stopped["journal"], "flushed", "{stopped}");
    assert_eq!(stopped["transactions_abandoned"], 0, "{stopped}");
    assert!(
        stopped["connections_closed"].as_u64() >= Some(1),
        "{stopped}"
    );
    drop(s);
    // The bindings made before the stop are there after a restart.
    let again = common::serve_in(std::path::Path::new(&data), &[]);
    let restored = 1 + usize::from(dave_registered);
    assert!(
        again
            .banner
            .contains(&format!("{restored} binding(s) restored")),
        "{}",
        again.banner
    );
}

/// One HEP3 packet, decoded from the specification (sipcapture.org,
/// "HEP3 Network Protocol Specification" rev. 12): chunk type to value.
fn hep_chunks(p: &[u8]) -> std::collections::BTreeMap<u16, Vec<u8>> {
    assert_eq!(&p[..4], b"HEP3", "magic");
    assert_eq!(
        usize::from(u16::from_be_bytes([p[4], p[5]])),
        p.len(),
        "total length"
    );
    let mut out = std::collections::BTreeMap::new();
    let mut at = 6;
    while at < p.len() {
        let vendor = u16::from_be_bytes([p[at], p[at + 1]]);
        let kind = u16::from_be_bytes([p[at + 2], p[at + 3]]);
        let len = usize::from(u16::from_be_bytes([p[at + 4], p[at + 5]]));
        assert!(len >= 6 && at + len <= p.len(), "chunk length");
        assert_eq!(vendor, 0, "generic chunks");
        out.insert(kind, p[at + 6..at + len].to_vec());
        at += len;
    }
    out
}

struct Hep {
    family: u8,
    protocol: u8,
    src: SocketAddr,
    dst: SocketAddr,
    seconds: u32,
    capture_id: u32,
    call_id: String,
    payload: String,
}

fn hep_packet(collector: &UdpSocket) -> Hep {
    let mut buf = [0u8; 65_536];
    let n = collector.recv(&mut buf).expect("a HEP packet");
    let c = hep_chunks(&buf[..n]);
    let u8_of = |k: u16| c.get(&k).map(|v| v[0]).expect("one-byte chunk");
    let u16_of = |k: u16| {
        c.get(&k)
            .map(|v| u16::from_be_bytes([v[0], v[1]]))
            .expect("port")
    };
    let u32_of = |k: u16| {
        c.get(&k)
            .map(|v| u32::from_be_bytes([v[0], v[1], v[2], v[3]]))
            .expect("four-byte chunk")
    };
    let ip = |k: u16| {
        let v = c.get(&k).expect("address");
        std::net::IpAddr::from(<[u8; 4]>::try_from(v.as_slice()).expect("IPv4"))
    };
    assert_eq!(u8_of(0x000b), 1, "protocol type SIP");
    assert!(c.contains_key(&0x000a), "microseconds");
    Hep {
        family: u8_of(0x0001),
        protocol: u8_of(0x0002),
        src: SocketAddr::new(ip(0x0003), u16_of(0x0007)),
        dst: SocketAddr::new(ip(0x0004), u16_of(0x0008)),
        seconds: u32_of(0x0009),
        capture_id: u32_of(0x000c),
        call_id: String::from_utf8_lossy(c.get(&0x0011).expect("correlation id")).into_owned(),
        payload: String::from_utf8_lossy(c.get(&0x000f).expect("payload")).into_owned(),
    }
}

/// `--hep udp:HOST:PORT`: every message received and sent reaches the
/// collector with its addresses, transport, time and Call-ID, over UDP and
/// TCP alike; `[trace] methods` keeps only what is asked.
#[test]
fn hep_tracing_copies_every_message_to_the_collector() {
    let dir = tempdir("op-hep");
    let collector = udp();
    let hep = format!("udp:{}", collector.local_addr().expect("addr"));
    let s = common::serve_in(&dir.join("data"), &["--hep", &hep]);
    let server = s.addr;
    let phone = udp();
    let msg = register_msg(server, "alice", "sip:alice@192.0.2.1", "hep-udp-1", "");
    let answer = exchange(&phone, server, &msg);
    assert!(answer.starts_with("SIP/2.0 200"), "{answer}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let inbound = hep_packet(&collector);
    assert_eq!((inbound.family, inbound.protocol), (2, 17), "IPv4, UDP");
    assert_eq!(inbound.src, phone.local_addr().expect("addr"));
    assert_eq!(inbound.dst, server);
    assert_eq!(inbound.payload, msg, "the message as received");
    assert_eq!(inbound.call_id, "hep-udp-1");
    assert_eq!(inbound.capture_id, 2001);
    assert!(u64::from(inbound.seconds).abs_diff(now) < 60, "timestamp");
    let outbound = hep_packet(&collector);
    assert_eq!(outbound.src, server);
    assert_eq!(outbound.dst, phone.local_addr().expect("addr"));
    assert_eq!(outbound.payload, answer, "the answer as sent");
    // Over TCP: protocol 6, the connection's addresses.
    let mut tcp = std::net::TcpStream::connect(server).expect("tcp");
    tcp.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let msg = register_msg(
        server,
        "bob",
        "sip:bob@192.0.2.3;transport=tcp",
        "hep-tcp-1",
        "",
    )
    .replace("SIP/2.0/UDP", "SIP/2.0/TCP");
    tcp.write_all(msg.as_bytes()).expect("write");
    let inbound = hep_packet(&collector);
    assert_eq!(inbound.protocol, 6, "TCP");
    assert_eq!(inbound.src, tcp.local_addr().expect("addr"));
    assert_eq!(inbound.payload, msg);
    let outbound = hep_packet(&collector);
    assert_eq!(outbound.dst, tcp.local_addr().expect("addr"));
    assert!(
        outbound.payload.starts_with("SIP/2.0 200"),
        "{}",
        outbound.payload
    );
    let m = http_get(
        &common::banner_http_addr(&s.banner)
            .expect("http")
            .to_string(),
        "/metrics",
    );
    assert!(m.contains("sipsec_hep_packets_total 4\n"), "{m}");
    drop(s);

    // Only OPTIONS: the REGISTER and its answer are left out.
    let cfg = dir.join("trace.toml");
    std::fs::write(
        &cfg,
        format!("[trace]\nhep = \"{hep}\"\nmethods = [\"options\"]\ncapture_id = 77\n"),
    )
    .expect("config");
    let s = common::serve_in(
        &dir.join("data2"),
        &["--config", cfg.to_str().expect("utf-8")],
    );
    let r = register(s.addr, "carol", "sip:carol@192.0.2.4");
    assert!(r.starts_with("SIP/2.0 200"), "{r}");
    let options = format!(
        "OPTIONS sip:{0} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bKopt\r\nFrom: <sip:x@{0}>;tag=1\r\nTo: <sip:{0}>\r\nCall-ID: hep-opt\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
        s.addr
    );
    let _ = exchange(&udp(), s.addr, &options);
    let first = hep_packet(&collector);
    assert_eq!(first.call_id, "hep-opt", "the REGISTER was not traced");
    assert_eq!(first.capture_id, 77);
    // A bad collector is a clear error at start.
    let out = Command::new(BIN)
        .args([
            "serve",
            "--udp",
            "127.0.0.1:0",
            "--no-http",
            "--hep",
            "tcp:1.2.3.4:9060",
        ])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(
        common::text(&out).contains("udp:HOST:PORT"),
        "{}",
        common::text(&out)
    );
}

/// A TLS connection's session (version, suite, key-exchange group,
/// resumed or not) reaches the collector once, as a HEP log record
/// (protocol type 100) from the peer's address, beside its SIP messages.
#[test]
fn hep_tracing_records_each_tls_session() {
    let dir = tempdir("op-hep-tls");
    common::tls_files(&dir);
    let collector = udp();
    collector
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let hep = format!("udp:{}", collector.local_addr().expect("addr"));
    let f = |n: &str| dir.join(n).to_str().expect("utf-8").to_owned();
    let s = common::serve_in(
        &dir.join("data"),
        &[
            "--hep",
            &hep,
            "--tls",
            "127.0.0.1:0",
            "--cert",
            &f("srv.pem"),
            "--key",
            &f("srv.key"),
        ],
    );
    let tls = common::banner_tls_addr(&s.banner).expect("tls address");
    let out = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &tls.to_string(),
            "-CAfile",
            &f("ca.pem"),
        ])
        // Closes at the end of its (empty) input, once the handshake is
        // done: -quiet alone would wait for the server to close.
        .args(["-verify_return_error", "-quiet", "-no_ign_eof", "-tls1_3"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl s_client (setup.sh installs openssl)");
    assert!(out.status.success(), "{}", common::text(&out));
    let mut buf = [0u8; 65_536];
    let n = collector
        .recv(&mut buf)
        .expect("a HEP packet for the session");
    let c = hep_chunks(&buf[..n]);
    assert_eq!(c.get(&0x000b).map(|v| v[0]), Some(100), "a log record");
    assert_eq!(c.get(&0x0002).map(|v| v[0]), Some(6), "over TCP");
    let port = c
        .get(&0x0008)
        .map(|v| u16::from_be_bytes([v[0], v[1]]))
        .expect("destination port");
    assert_eq!(port, tls.port(), "to the TLS listener");
    let payload = String::from_utf8_lossy(c.get(&0x000f).expect("payload")).into_owned();
    let v: Value = serde_json::from_str(&payload).expect("a JSON record");
    let session = &v["tls_session"];
    assert_eq!(session["version"], "TLSv1_3", "{v}");
    assert_eq!(session["group"], "x25519", "OpenSSL 3.0 is classical: {v}");
    assert_eq!(session["resumed"], false, "{v}");
    assert!(
        session["suite"]
            .as_str()
            .is_some_and(|x| x.starts_with("TLS13_")),
        "{v}"
    );
}

/// `alice` registers at `server` with the phone.
fn register_alice(server: SocketAddr, password: &str) {
    let at = server.to_string();
    let out = common::phone(password, &["register", "--user", "alice", "--server", &at])
        .output()
        .expect("phone");
    assert!(out.status.success(), "{}", common::text(&out));
}

/// The web view in a real browser: a registration and a ban appear, the
/// page needs the token, and the screenshot is written for a look.
#[test]
fn the_web_view_shows_registrations_and_bans_in_chromium() {
    let dir = tempdir("op-web");
    let users = dir.join("users.tsv");
    common::import_users("alice,secret\n", &dir, &users);
    let cfg = dir.join("guard.toml");
    std::fs::write(&cfg, "[guard]\nmax_auth_failures = 1\n").expect("config");
    let token = "a-long-operator-token-1234";
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--udp", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--workers", "1", "--auth"])
        .arg("--config")
        .arg(&cfg)
        .arg("--users")
        .arg(&users)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("SIPSEC_HTTP_TOKEN", token);
    let s = common::serve_command(cmd);
    let http = common::banner_http_addr(&s.banner)
        .expect("http")
        .to_string();
    register_alice(s.addr, "secret");
    // One wrong answer to a challenge bans the source (max_auth_failures = 1).
    let _ = wrong_answer(&udp(), s.addr, "alice", "web-bad");
    // Without the token: refused.
    assert!(http_get(&http, "/").starts_with("HTTP/1.1 401"));
    assert!(http_get(&http, "/status?token=wrong-token-of-some-length").starts_with("HTTP/1.1 401"));
    let page = http_get(&http, &format!("/?token={token}"));
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("Content-Security-Policy:"), "{page}");
    let url = format!("http://{http}/?token={token}");
    let chromium = |extra: &[&str]| {
        Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--virtual-time-budget=10000",
            ])
            .arg(format!("--user-data-dir={}", dir.join("profile").display()))
            .args(extra)
            .arg(&url)
            // Its own temporary files go with the test's directory.
            .env("TMPDIR", &*dir)
            .output()
            .expect("chromium (./setup.sh installs it)")
    };
    let dom = chromium(&["--dump-dom"]);
    assert!(dom.status.success(), "{}", common::text(&dom));
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    assert!(
        dom.contains(&format!("<td>sip:alice@{}</td>", s.addr.ip())),
        "the registration is listed: {dom}"
    );
    assert!(dom.contains("showing 1 of 1"), "{dom}");
    let bans = dom
        .split("<table id=\"bans\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .expect("the bans table");
    assert!(
        bans.contains("<td>127.0.0.1</td><td>all transports</td>"),
        "the ban is listed: {bans}"
    );
    assert!(dom.contains("<polyline"), "the charts have data: {dom}");
    assert!(
        dom.contains(">now</text>") && dom.contains(">-5 min</text>"),
        "the charts have a time axis: {dom}"
    );
    // The charts start from the server's own history, not empty.
    let history = http_get(&http, &format!("/history?token={token}"));
    let body = history.split("\r\n\r\n").nth(1).unwrap_or("");
    let h: Value = serde_json::from_str(body).expect("history is JSON");
    let samples = h["samples"].as_array().expect("samples");
    assert!(samples.len() >= 2, "{h}");
    assert!(
        samples
            .iter()
            .all(|s| s["t"].as_u64().is_some() && s["req"].is_number()),
        "{h}"
    );
    let shot = dir.join("web.png");
    let out = chromium(&[
        &format!("--screenshot={}", shot.display()),
        "--window-size=1280,900",
        "--hide-scrollbars",
    ]);
    assert!(out.status.success(), "{}", common::text(&out));
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "{} bytes",
        png.len()
    );
}

/// A web page on another site cannot drive the endpoint through the
/// operator's browser: a real Chromium, on a page served from another
/// origin, POSTs `/reload` (browsers send such a request without asking
/// first), and opens `/status` under a name made to resolve to 127.0.0.1
/// (DNS rebinding). Both reach the server and are refused 403; nothing
/// is reloaded and no binding is shown.
#[test]
fn another_sites_page_cannot_drive_the_endpoint_through_a_browser() {
    let dir = tempdir("op-csrf");
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--udp", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--workers", "1"])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env_remove("SIPSEC_HTTP_TOKEN");
    let mut s = common::serve_command(cmd);
    let http = common::banner_http_addr(&s.banner)
        .expect("http")
        .to_string();
    register_alice(s.addr, "");
    assert!(http_get(&http, "/status?aor=alice").contains("sip:alice@"));
    // The other site: one page whose script POSTs to the endpoint.
    let site = std::net::TcpListener::bind("127.0.0.1:0").expect("site");
    let page = format!(
        "<html><body>waiting<script>fetch('http://{http}/reload', \
         {{method: 'POST', mode: 'no-cors'}}).then(() => document.body.textContent = 'posted', \
         e => document.body.textContent = 'failed ' + e)</script></body></html>"
    );
    let origin = site.local_addr().expect("site address");
    std::thread::spawn(move || {
        for mut c in site.incoming().flatten().take(8) {
            let mut head = [0u8; 2048];
            let _ = c.read(&mut head);
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    let chromium = |url: &str, extra: &[&str]| {
        let out = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
            ])
            .args(["--virtual-time-budget=5000", "--dump-dom"])
            .arg(format!("--user-data-dir={}", dir.join("profile").display()))
            .args(extra)
            .arg(url)
            .env("TMPDIR", &*dir)
            .output()
            .expect("chromium (./setup.sh installs it)");
        assert!(out.status.success(), "{}", common::text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let dom = chromium(&format!("http://{origin}/"), &[]);
    assert!(dom.contains("posted"), "the page's POST went: {dom}");
    let port = http.rsplit(':').next().expect("port");
    let rules = "--host-resolver-rules=MAP rebind.test 127.0.0.1";
    let dom = chromium(&format!("http://rebind.test:{port}/status"), &[rules]);
    assert!(dom.contains("DNS-rebinding"), "refused: {dom}");
    assert!(!dom.contains("sip:alice@"), "no binding shown: {dom}");
    // Both, and whatever else the browser asked of the rebound name (a
    // favicon).
    let metrics = http_get(&http, "/metrics");
    let refused: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("sipsec_http_refused_total "))
        .and_then(|v| v.parse().ok())
        .expect("the counter");
    assert!(refused >= 2, "both refused: {refused}");
    let _ = s.child.kill();
    let mut log = String::new();
    let _ = s
        .child
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut log);
    assert!(!log.contains("reload asked by the operator"), "{log}");
}

/// `sipsec` with `args`, to its end: (success, stdout, stderr).
fn cli(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("SIPSEC_HTTP")
        .env_remove("SIPSEC_CONFIG")
        .env_remove("SIPSEC_HTTP_TOKEN")
        .envs(env.iter().copied())
        .output()
        .expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runtime control without a restart: a banned address is listed and
/// unbanned, bindings are listed and removed (for good: a restart does
/// not bring them back), users are listed, re-passworded and removed;
/// the client commands find the endpoint from the flag, $SIPSEC_HTTP or
/// the server's configuration file.
#[test]
fn bans_bindings_and_users_are_controlled_at_runtime() {
    let dir = tempdir("op-control");
    let users = dir.join("users.tsv");
    common::import_users("alice,secret-alice\nbob,secret-bob\n", &dir, &users);
    let u = users.to_str().expect("utf-8");
    let cfg = dir.join("server.toml");
    std::fs::write(&cfg, "[guard]\nmax_auth_failures = 3\n").expect("config");
    let data = dir.join("data");
    let start = || {
        common::serve_workers(
            &data,
            "1",
            &[
                "--auth",
                "--users",
                u,
                "--config",
                cfg.to_str().expect("utf-8"),
            ],
        )
    };
    let s = start();
    let server = s.addr;
    let http = common::banner_http_addr(&s.banner)
        .expect("http")
        .to_string();
    // A client configuration naming the endpoint, as `serve --config` would.
    let client_cfg = dir.join("client.toml");
    std::fs::write(&client_cfg, format!("http = \"{http}\"\n")).expect("config");
    let by_flag = ["--http", http.as_str()];

    // Bob registers (digest answered properly by the phone-like helper).
    let sock = udp();
    let challenge = exchange(
        &sock,
        server,
        &register_msg(server, "bob", "sip:bob@192.0.2.20", "bob-1", ""),
    );
    let ch = challenge
        .lines()
        .find_map(|l| l.strip_prefix("WWW-Authenticate: "))
        .expect("challenge");
    let c = sip_core::auth::Challenge::parse(ch).expect("parses");
    let alg = sip_core::digest::Algorithm::from_token(c.algorithm.unwrap_or("MD5")).expect("alg");
    let uri = format!("sip:{server}");
    let response = sip_core::digest::response(&sip_core::digest::ResponseInput {
        algorithm: alg,
        ha1: &sip_core::digest::ha1(alg, "bob", "sipsec", "secret-bob"),
        nonce: c.nonce.expect("nonce"),
        cnonce: "c",
        nc: "00000001",
        qop: Some(sip_core::digest::Qop::Auth),
        method: "REGISTER",
        uri: &uri,
        body: b"",
    });
    let auth = format!(
        "Authorization: Digest username=\"bob\", realm=\"sipsec\", nonce=\"{}\", uri=\"{uri}\", response=\"{response}\", algorithm={}, qop=auth, nc=00000001, cnonce=\"c\"\r\n",
        c.nonce.expect("nonce"),
        alg.as_str()
    );
    let ok = exchange(
        &sock,
        server,
        &register_msg(server, "bob", "sip:bob@192.0.2.20", "bob-1", &auth)
            .replace("CSeq: 1", "CSeq: 2")
            .replace("branch=z9hG4bKbob-1", "branch=z9hG4bKbob-1x"),
    );
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    let aor = format!("sip:bob@{}", server.ip());
    let (_, listed, _) = cli(&["bindings", "list", "bob"], &[("SIPSEC_HTTP", &http)]);
    assert!(
        listed.contains(&aor) && listed.contains("sip:bob@192.0.2.20"),
        "{listed}"
    );

    // Three wrong answers ban 127.0.0.1; the ban is listed and lifted.
    let bad = udp();
    for i in 0..3 {
        wrong_answer(&bad, server, "alice", &format!("bad-{i}"));
    }
    let (ok, listed, err) = cli(
        &[
            "ban",
            "list",
            "--config",
            client_cfg.to_str().expect("utf-8"),
        ],
        &[],
    );
    assert!(
        ok && listed.contains("127.0.0.1\tall transports\t")
            && listed.contains("1 source(s) banned"),
        "{listed}{err}"
    );
    let (ok, said, err) = cli(
        &[&["ban", "remove", "127.0.0.1"][..], &by_flag].concat(),
        &[],
    );
    assert!(ok && said.contains("127.0.0.1 unbanned"), "{said}{err}");
    let answer = exchange(
        &udp(),
        server,
        &register_msg(server, "alice", "sip:a@192.0.2.9", "after-unban", ""),
    );
    assert!(
        answer.starts_with("SIP/2.0 401"),
        "answered again: {answer}"
    );
    let (ok, _, err) = cli(
        &[&["ban", "remove", "127.0.0.1"][..], &by_flag].concat(),
        &[],
    );
    assert!(!ok && err.contains("not banned"), "{err}");

    // Bob's binding is removed, and stays removed after a restart.
    let (ok, said, err) = cli(
        &[&["bindings", "remove", aor.as_str()][..], &by_flag].concat(),
        &[],
    );
    assert!(ok && said.contains("1 binding(s)"), "{said}{err}");
    let (_, listed, _) = cli(&[&["bindings", "list"][..], &by_flag].concat(), &[]);
    assert!(listed.contains("0 binding(s)"), "{listed}");
    drop(s);
    let s = start();
    let http = common::banner_http_addr(&s.banner)
        .expect("http")
        .to_string();
    let (_, listed, _) = cli(&["bindings", "list", "--http", &http], &[]);
    assert!(
        listed.contains("0 binding(s)"),
        "removed for good: {listed}"
    );
    drop(s);

    // The users file: list, change a password, remove.
    let (ok, listed, _) = cli(&["users", "list", "--file", u], &[]);
    assert!(
        ok && listed.contains("alice\tsipsec") && listed.contains("2 user(s)"),
        "{listed}"
    );
    let before = std::fs::read_to_string(&users).expect("users");
    let mut passwd = Command::new(BIN)
        .args(["users", "passwd", "alice", "--password-stdin", "--file", u])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    passwd
        .stdin
        .take()
        .expect("piped")
        .write_all(b"another-secret\n")
        .expect("password");
    assert!(passwd.wait().expect("exits").success());
    assert_ne!(std::fs::read_to_string(&users).expect("users"), before);
    let (ok, _, _) = cli(&["users", "remove", "bob", "--file", u], &[]);
    assert!(ok);
    let (_, listed, _) = cli(&["users", "list", "--file", u], &[]);
    assert!(
        !listed.contains("bob") && listed.contains("1 user(s)"),
        "{listed}"
    );
    let (ok, _, err) = cli(&["users", "remove", "bob", "--file", u], &[]);
    assert!(!ok && err.contains("no user bob"), "{err}");
}
