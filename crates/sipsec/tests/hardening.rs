//! `sipsec serve` against a hostile peer and a hostile machine: replayed
//! credentials, forged nonces, a full disk, a second server on the same
//! data directory, contact floods, kill -9 during compaction, counters,
//! users that change under a running server, and the phone's verdict on a
//! call without media. Real binary, real loopback sockets.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{banner_http_addr, http_get, tempdir, text, Running, BIN};
use sip_core::auth::Challenge;
use sip_core::digest::{self, Algorithm, Qop, ResponseInput};
use sip_core::{HeaderName, Message};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Starts `sipsec serve` on ephemeral ports with HTTP on, storing in `data`.
fn start(data: &Path, extra: &[&str]) -> Running {
    common::serve_in(data, extra)
}

/// Starts `sipsec serve ARGS` through `bash -c PRELUDE; exec …` (limits,
/// signal dispositions), waiting for its banner.
fn start_under(prelude: &str, data: &Path, extra: &[&str]) -> Running {
    let mut cmd = format!(
        "{prelude}; exec '{BIN}' serve --udp 127.0.0.1:0 --http 127.0.0.1:0 --workers 1 --data-dir '{}'",
        s(data)
    );
    for a in extra {
        cmd.push_str(&format!(" '{a}'"));
    }
    let mut bash = Command::new("bash");
    bash.args(["-c", &cmd]);
    common::serve_command(bash)
}

/// Runs `cmd` to its end, or kills it after `secs` (a server that should
/// have refused to start but serves instead).
fn output_within(cmd: &mut Command, secs: u64) -> std::process::Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    for _ in 0..secs * 10 {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("output");
    panic!("still running after {secs} s: {}", text(&out));
}

fn http(r: &Running) -> String {
    banner_http_addr(&r.banner)
        .expect("http address in the banner")
        .to_string()
}

fn metric(r: &Running, line_start: &str) -> u64 {
    let page = http_get(&http(r), "/metrics");
    page.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// A raw SIP client on its own UDP socket.
struct Ua {
    sock: UdpSocket,
    server: SocketAddr,
}

impl Ua {
    fn new(server: SocketAddr) -> Self {
        Self::at("127.0.0.1:0", server)
    }
    fn at(bind: &str, server: SocketAddr) -> Self {
        let sock = UdpSocket::bind(bind).expect("ua socket");
        sock.set_read_timeout(Some(Duration::from_secs(3)))
            .expect("timeout");
        Self { sock, server }
    }
    fn port(&self) -> u16 {
        self.sock.local_addr().expect("bound").port()
    }
    fn send(&self, msg: &str) {
        self.sock
            .send_to(msg.as_bytes(), self.server)
            .expect("send");
    }
    fn recv(&self) -> Option<String> {
        let mut buf = vec![0u8; 65_535];
        let (n, _) = self.sock.recv_from(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }
    /// Sends and waits for the final answer (skipping 100 Trying).
    fn ask(&self, msg: &str) -> Option<String> {
        self.send(msg);
        loop {
            let r = self.recv()?;
            if !r.starts_with("SIP/2.0 100") {
                return Some(r);
            }
        }
    }
    fn register_text(
        &self,
        user: &str,
        call_id: &str,
        cseq: u32,
        contacts: &str,
        extra: &str,
    ) -> String {
        format!(
            "REGISTER sip:{srv} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{p};branch=z9hG4bK{call_id}x{cseq};rport\r\nMax-Forwards: 70\r\nFrom: <sip:{user}@{srv}>;tag=f{cseq}\r\nTo: <sip:{user}@{srv}>\r\nCall-ID: {call_id}\r\nCSeq: {cseq} REGISTER\r\n{contacts}{extra}Content-Length: 0\r\n\r\n",
            srv = self.server,
            p = self.port(),
        )
    }
    fn register(
        &self,
        user: &str,
        call_id: &str,
        cseq: u32,
        contacts: &str,
        extra: &str,
    ) -> Option<String> {
        self.ask(&self.register_text(user, call_id, cseq, contacts, extra))
    }
}

fn code(resp: &str) -> u16 {
    resp.get(8..11).and_then(|c| c.parse().ok()).unwrap_or(0)
}

fn header(resp: &str, name: HeaderName) -> Option<String> {
    Message::parse(resp.as_bytes())
        .ok()?
        .header(name)
        .map(str::to_owned)
}

fn authorization(challenge: &str, user: &str, password: &str, uri: &str, nc: u32) -> String {
    let c = Challenge::parse(challenge).expect("challenge parses");
    let alg = Algorithm::from_token(c.algorithm.unwrap_or("MD5")).expect("known algorithm");
    let (realm, nonce) = (c.realm.expect("realm"), c.nonce.expect("nonce"));
    let nc = format!("{nc:08x}");
    let response = digest::response(&ResponseInput {
        algorithm: alg,
        ha1: &digest::ha1(alg, user, realm, password),
        nonce,
        cnonce: "c0ffee",
        nc: &nc,
        qop: Some(Qop::Auth),
        method: "REGISTER",
        uri,
        body: b"",
    });
    format!(
        "Authorization: Digest username=\"{user}\", realm=\"{realm}\", nonce=\"{nonce}\", uri=\"{uri}\", response=\"{response}\", algorithm={}, qop=auth, nc={nc}, cnonce=\"c0ffee\"\r\n",
        alg.as_str()
    )
}

/// A users file with alice and bob in realm `sipsec`.
fn users(dir: &Path) -> PathBuf {
    let f = dir.join("users.tsv");
    common::import_users("alice,pw-alice\nbob,pw-bob\n", dir, &f);
    f
}

/// Registers alice with credentials; returns the challenge used.
fn register_alice(ua: &Ua, contact: &str, call_id: &str) -> String {
    let r = ua
        .register(
            "alice",
            call_id,
            1,
            &format!("Contact: <{contact}>\r\n"),
            "",
        )
        .expect("challenge");
    assert_eq!(code(&r), 401, "{r}");
    let ch = header(&r, HeaderName::WwwAuthenticate).expect("challenge header");
    let auth = authorization(&ch, "alice", "pw-alice", &format!("sip:{}", ua.server), 1);
    let ok = ua
        .register(
            "alice",
            call_id,
            2,
            &format!("Contact: <{contact}>\r\n"),
            &auth,
        )
        .expect("answer");
    assert_eq!(code(&ok), 200, "{ok}");
    ch
}

fn bindings(r: &Running) -> String {
    http_get(&http(r), "/status")
}

#[test]
fn a_replayed_authorization_from_another_address_cannot_rebind_the_victim() {
    let dir = tempdir("hard-replay");
    let users = users(&dir);
    let srv = start(&dir.join("data"), &["--auth", "--users", s(&users)]);
    let victim = Ua::new(srv.addr);
    let ch = register_alice(&victim, "sip:alice@192.0.2.10:5060", "replay-1");
    let auth = authorization(&ch, "alice", "pw-alice", &format!("sip:{}", srv.addr), 1);
    // The victim's own retransmission (same bytes, same address) is answered.
    let same = victim.register_text(
        "alice",
        "replay-1",
        2,
        "Contact: <sip:alice@192.0.2.10:5060>\r\n",
        &auth,
    );
    assert_eq!(code(&victim.ask(&same).expect("answer")), 200);
    // The attacker replays Call-ID, CSeq and Authorization with its Contact.
    let attacker = Ua::new(srv.addr);
    for contact in ["sip:mallory@203.0.113.66:5060", "sip:alice@192.0.2.10:5060"] {
        let r = attacker
            .register(
                "alice",
                "replay-1",
                2,
                &format!("Contact: <{contact}>\r\n"),
                &auth,
            )
            .expect("answer");
        assert_eq!(code(&r), 401, "replay must be challenged: {r}");
        let fresh = header(&r, HeaderName::WwwAuthenticate).expect("challenge");
        assert!(!fresh.contains("stale=true"), "{fresh}");
        assert_ne!(
            Challenge::parse(&fresh).expect("parses").nonce,
            Challenge::parse(&ch).expect("parses").nonce,
            "a fresh nonce"
        );
    }
    // The victim's request with another Contact but the same count is a replay too.
    let r = victim
        .register(
            "alice",
            "replay-1",
            2,
            "Contact: <sip:x@192.0.2.99>\r\n",
            &auth,
        )
        .expect("answer");
    assert_eq!(code(&r), 401, "{r}");
    let status = bindings(&srv);
    assert!(status.contains("sip:alice@192.0.2.10:5060"), "{status}");
    assert!(
        !status.contains("mallory") && !status.contains("192.0.2.99"),
        "{status}"
    );
    assert!(metric(&srv, "sipsec_auth_replays_total") >= 3);
}

/// A captured login (nc=1) replayed after a restart with a new Call-ID,
/// CSeq and Contact: the replay tracker did not survive the restart, so
/// every nonce issued before it is answered `stale=true` (a fresh
/// challenge, no failure, no ban) and the attacker's contact is not
/// stored. Before, the nonce key in the data directory made it fresh
/// again and the replay got 200.
#[test]
fn a_captured_login_does_not_replay_after_a_restart() {
    let dir = tempdir("hard-nonce");
    let users = users(&dir);
    let data = dir.join("data");
    let srv = start(&data, &["--auth", "--users", s(&users)]);
    let ua = Ua::new(srv.addr);
    let ch = register_alice(&ua, "sip:alice@192.0.2.10", "restart-1");
    drop(srv);
    let key = std::fs::metadata(data.join("nonce.key")).expect("nonce.key in the data dir");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(key.permissions().mode() & 0o777, 0o600);
    let srv = start(&data, &["--auth", "--users", s(&users)]);
    let ua = Ua::new(srv.addr);
    let uri = format!("sip:{}", srv.addr);
    // The attacker replays the captured nc=1 with its own dialog and
    // Contact; the phone refreshes with the nonce it had. Both are
    // challenged afresh, stale, uncounted.
    let captured = authorization(&ch, "alice", "pw-alice", &uri, 1);
    let next = authorization(&ch, "alice", "pw-alice", &uri, 2);
    let attacker = Ua::new(srv.addr);
    for (who, call_id, contact, auth) in [
        (
            &attacker,
            "mallory-1",
            "sip:mallory@203.0.113.66",
            &captured,
        ),
        (&ua, "restart-1", "sip:alice@192.0.2.10", &next),
    ] {
        let r = who
            .register(
                "alice",
                call_id,
                3,
                &format!("Contact: <{contact}>\r\n"),
                auth,
            )
            .expect("answer");
        assert_eq!(code(&r), 401, "a nonce from before the restart: {r}");
        assert!(
            header(&r, HeaderName::WwwAuthenticate).is_some_and(|h| h.contains("stale=true")),
            "{r}"
        );
    }
    assert!(!bindings(&srv).contains("mallory"), "{}", bindings(&srv));
    assert_eq!(metric(&srv, "sipsec_auth_failures_total"), 0);
    // The phone answers the fresh challenge and is registered again.
    register_alice(&ua, "sip:alice@192.0.2.10", "restart-2");
    // A well-formed nonce under another secret: stale, not a failure; from
    // one source, many times, it must not ban that source.
    let nonce = Challenge::parse(&ch)
        .expect("parses")
        .nonce
        .expect("nonce")
        .to_owned();
    let forged_nonce = format!("{}{}", &nonce[..32], "0".repeat(32));
    let forged = ch.replace(&nonce, &forged_nonce);
    for i in 0..15 {
        let auth = authorization(&forged, "alice", "guess", &uri, 1);
        let r = ua
            .register(
                "alice",
                &format!("forged-{i}"),
                1,
                "Contact: <sip:a@192.0.2.1>\r\n",
                &auth,
            )
            .expect("answered, not banned");
        assert_eq!(code(&r), 401);
        assert!(
            header(&r, HeaderName::WwwAuthenticate).is_some_and(|h| h.contains("stale=true")),
            "{r}"
        );
    }
    assert_eq!(metric(&srv, "sipsec_auth_failures_total"), 0);
    // Wrong passwords with this server's nonce still ban.
    for i in 0..12 {
        let Some(r) = ua.register(
            "alice",
            &format!("wrong-{i}"),
            1,
            "Contact: <sip:a@192.0.2.1>\r\n",
            "",
        ) else {
            break;
        };
        let Some(ch) = header(&r, HeaderName::WwwAuthenticate) else {
            break;
        };
        let auth = authorization(&ch, "alice", "guess", &uri, 1);
        let _ = ua.register(
            "alice",
            &format!("wrong-{i}"),
            2,
            "Contact: <sip:a@192.0.2.1>\r\n",
            &auth,
        );
    }
    assert!(
        ua.register("alice", "after", 1, "Contact: <sip:a@192.0.2.1>\r\n", "")
            .is_none(),
        "ten wrong passwords ban the source"
    );
    assert!(metric(&srv, "sipsec_requests_banned_total") >= 1);
}

#[test]
fn a_second_server_on_the_same_data_dir_refuses_to_start() {
    let dir = tempdir("hard-flock");
    let data = dir.join("data");
    let first = start(&data, &[]);
    let out = output_within(
        Command::new(BIN).args([
            "serve",
            "--udp",
            "127.0.0.1:0",
            "--no-http",
            "--data-dir",
            s(&data),
        ]),
        20,
    );
    assert!(!out.status.success(), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains(s(&data)), "{said}");
    assert!(
        said.contains(&first.child.id().to_string()),
        "names the holder's PID: {said}"
    );
    drop(first);
    // Once the holder is gone the directory is free again.
    let again = start(&data, &[]);
    drop(again);
}

#[test]
fn a_full_disk_refuses_the_binding_and_memory_agrees_after_restart() {
    let dir = tempdir("hard-disk");
    let data = dir.join("data");
    // Files may grow to 4 MiB + 64 KiB: the first journal window fits, the
    // next reservation fails as on a full disk.
    let srv = start_under("trap '' XFSZ; ulimit -f 4160", &data, &[]);
    let ua = Ua::new(srv.addr);
    // Contacts near the longest a binding stores (512 bytes).
    let long = "x".repeat(480);
    let mut acked = Vec::new();
    let mut refused = None;
    for i in 0..2000 {
        let contacts: String = (0..8)
            .map(|c| format!("Contact: <sip:u{i}c{c}{long}@192.0.2.1>\r\n"))
            .collect();
        let r = ua
            .register(&format!("u{i}"), &format!("disk-{i}"), 1, &contacts, "")
            .expect("every REGISTER is answered");
        match code(&r) {
            200 => acked.push(i),
            500 => {
                assert!(
                    header(&r, HeaderName::Warning).is_some_and(|w| w.contains("journal")),
                    "{r}"
                );
                refused = Some(i);
                break;
            }
            other => panic!("unexpected {other}: {r}"),
        }
    }
    let refused = refused.expect("the journal filled up");
    // Memory says what the client was told: nothing for the refused AoR.
    // (The query is padded: over UDP without credentials an answer is at
    // most three times the request's bytes.)
    let pad = format!("X-Pad: {}\r\n", "p".repeat(2000));
    let query = |srv: &Running, user: &str| {
        Ua::new(srv.addr)
            .register(user, "query", 1, "", &pad)
            .expect("answer")
    };
    let r = query(&srv, &format!("u{refused}"));
    assert_eq!(code(&r), 200);
    assert!(!r.contains("Contact:"), "refused binding served: {r}");
    let mut srv = srv;
    let _ = srv.child.kill();
    let _ = srv.child.wait();
    let back = start(&data, &[]);
    for i in acked.iter().step_by(37).chain(acked.last()) {
        let r = query(&back, &format!("u{i}"));
        assert_eq!(r.matches("Contact:").count(), 8, "u{i} lost: {r}");
    }
    assert!(!query(&back, &format!("u{refused}")).contains("Contact:"));
}

#[test]
fn contacts_per_aor_are_bounded_and_no_answer_is_dropped_for_size() {
    let dir = tempdir("hard-contacts");
    let ua_contacts = |n: usize, tag: &str| -> String {
        (0..n)
            .map(|c| format!("Contact: <sip:{tag}{c}@192.0.2.1>\r\n"))
            .collect()
    };
    let srv = start(&dir.join("data"), &[]);
    let ua = Ua::new(srv.addr);
    let r = ua
        .register("victim", "flood", 1, &ua_contacts(10, "a"), "")
        .expect("answer");
    assert_eq!(code(&r), 200);
    let r = ua
        .register("victim", "flood", 2, &ua_contacts(1, "b"), "")
        .expect("answer");
    assert_eq!(code(&r), 403, "the eleventh contact is refused: {r}");
    assert!(
        header(&r, HeaderName::Warning).is_some_and(|w| w.contains("10")),
        "{r}"
    );
    drop(srv);

    // With a replace-oldest policy the newest contact wins.
    let cfg = dir.join("replace.toml");
    std::fs::write(
        &cfg,
        "[registrar]\nmax_contacts = 2\nmax_contacts_policy = \"replace-oldest\"\n",
    )
    .expect("config");
    let srv = start(&dir.join("data2"), &["--config", s(&cfg)]);
    let ua = Ua::new(srv.addr);
    for (i, expires) in [(0, 600), (1, 900), (2, 1200)] {
        let r = ua
            .register(
                "r",
                &format!("c{i}"),
                1,
                &format!("Contact: <sip:r{i}@192.0.2.1>;expires={expires}\r\n"),
                "",
            )
            .expect("answer");
        assert_eq!(code(&r), 200, "{r}");
    }
    let r = ua.register("r", "q", 1, "", "").expect("answer");
    assert!(
        !r.contains("sip:r0@") && r.contains("sip:r1@") && r.contains("sip:r2@"),
        "{r}"
    );
    drop(srv);

    // A listing that cannot fit a datagram is refused before it is stored.
    let cfg = dir.join("many.toml");
    std::fs::write(&cfg, "[registrar]\nmax_contacts = 100000\n").expect("config");
    let srv = start(&dir.join("data3"), &["--config", s(&cfg)]);
    let ua = Ua::new(srv.addr);
    let long = "y".repeat(480);
    let mut last = 0;
    for round in 0..60 {
        let contacts: String = (0..40)
            .map(|c| format!("Contact: <sip:{long}{round}x{c}@192.0.2.1>\r\n"))
            .collect();
        let r = ua
            .register("big", "big", round + 1, &contacts, "")
            .expect("every REGISTER is answered, none dropped for size");
        last = code(&r);
        if last != 200 {
            assert_eq!(last, 513, "{r}");
            assert!(header(&r, HeaderName::Warning).is_some(), "{r}");
            break;
        }
    }
    assert_eq!(last, 513, "the listing outgrew a datagram");
}

/// A UAS over UDP that answers INVITE with 200 and an SDP pointing at a
/// port where nothing is sent, and BYE with 200: a call without media.
fn silent_uas() -> SocketAddr {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("uas");
    let addr = sock.local_addr().expect("bound");
    let black_hole = UdpSocket::bind("127.0.0.1:0").expect("rtp");
    std::thread::spawn(move || {
        let _keep = black_hole;
        let mut buf = vec![0u8; 65_535];
        sock.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).to_string();
            let keep: Vec<String> = msg
                .split("\r\n")
                .filter(|l| {
                    ["Via:", "From:", "To:", "Call-ID:", "CSeq:"]
                        .iter()
                        .any(|h| l.starts_with(h))
                })
                .map(|l| {
                    if l.starts_with("To:") && !l.contains("tag=") {
                        format!("{l};tag=uas")
                    } else {
                        l.to_owned()
                    }
                })
                .collect();
            let head = keep.join("\r\n");
            if msg.starts_with("INVITE") {
                let port = _keep.local_addr().expect("bound").port();
                let sdp = format!("v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio {port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n");
                let reply = format!(
                    "SIP/2.0 200 OK\r\n{head}\r\nContact: <sip:uas@{addr}>\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
                    sdp.len()
                );
                let _ = sock.send_to(reply.as_bytes(), from);
            } else if msg.starts_with("BYE") {
                let reply = format!("SIP/2.0 200 OK\r\n{head}\r\nContent-Length: 0\r\n\r\n");
                let _ = sock.send_to(reply.as_bytes(), from);
            }
        }
    });
    addr
}

#[test]
fn a_call_without_media_has_no_mos_and_fails() {
    let uas = silent_uas();
    let out = common::phone(
        "",
        &[
            "call",
            &format!("sip:uas@{uas}"),
            "--user",
            "alice",
            "--packets",
            "10",
        ],
    )
    .output()
    .expect("phone runs");
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("no media"), "{said}");
    assert!(!said.contains("MOS 4"), "{said}");
}

#[test]
fn users_outside_the_realm_refuse_to_start_and_the_file_reloads_on_sighup() {
    let dir = tempdir("hard-users");
    let users = users(&dir);
    let out = output_within(
        Command::new(BIN)
            .args([
                "serve",
                "--udp",
                "127.0.0.1:0",
                "--no-http",
                "--auth",
                "--realm",
                "elsewhere",
            ])
            .args(["--users", s(&users), "--data-dir", s(&dir.join("d0"))]),
        20,
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("elsewhere") && text(&out).contains("sipsec"),
        "{}",
        text(&out)
    );

    let srv = start(&dir.join("data"), &["--auth", "--users", s(&users)]);
    let ua = Ua::new(srv.addr);
    let try_carol = |ua: &Ua, call: &str| -> u16 {
        let r = ua
            .register("carol", call, 1, "Contact: <sip:carol@192.0.2.3>\r\n", "")
            .expect("challenge");
        let ch = header(&r, HeaderName::WwwAuthenticate).expect("challenge");
        let auth = authorization(&ch, "carol", "pw-carol", &format!("sip:{}", ua.server), 1);
        code(
            &ua.register(
                "carol",
                call,
                2,
                "Contact: <sip:carol@192.0.2.3>\r\n",
                &auth,
            )
            .expect("answer"),
        )
    };
    assert_eq!(try_carol(&ua, "carol-1"), 401, "carol is not a user yet");
    let mut add = Command::new(BIN)
        .args([
            "users",
            "add",
            "carol",
            "--password-stdin",
            "--file",
            s(&users),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("users add");
    {
        use std::io::Write;
        let mut stdin = add.stdin.take().expect("piped");
        stdin.write_all(b"pw-carol\n").expect("password");
    }
    let add = add.wait_with_output().expect("users add ends");
    assert!(add.status.success(), "{}", text(&add));
    let pid = srv.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("kill")
        .success());
    let mut got = 0;
    for i in 0..50 {
        got = try_carol(&ua, &format!("carol-r{i}"));
        if got == 200 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(got, 200, "carol is served after SIGHUP without a restart");
}

#[test]
fn responses_the_server_makes_itself_are_counted_and_bans_are_counted() {
    let dir = tempdir("hard-count");
    // T1 = 100 ms (RFC 3261 §17.1.1.1 allows a smaller T1 on a known
    // short path): Timer B is 6.4 s instead of 32 s.
    let cfg = dir.join("timers.toml");
    std::fs::write(&cfg, "[timers]\nt1_ms = 100\n").expect("config");
    let srv = start(
        &dir.join("data"),
        &["--mode", "proxy", "--stateful", "--config", s(&cfg)],
    );
    // A callee that never answers.
    let silent = UdpSocket::bind("127.0.0.1:0").expect("callee");
    let ua = Ua::new(srv.addr);
    let r = ua
        .register(
            "callee",
            "cnt",
            1,
            &format!(
                "Contact: <sip:callee@{}>\r\n",
                silent.local_addr().expect("bound")
            ),
            "",
        )
        .expect("answer");
    assert_eq!(code(&r), 200);
    let invite = format!(
        "INVITE sip:callee@{srv} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{p};branch=z9hG4bKcnt1;rport\r\nMax-Forwards: 70\r\nFrom: <sip:caller@{srv}>;tag=c1\r\nTo: <sip:callee@{srv}>\r\nCall-ID: cnt-invite\r\nCSeq: 1 INVITE\r\nContact: <sip:caller@127.0.0.1:{p}>\r\nContent-Length: 0\r\n\r\n",
        srv = srv.addr,
        p = ua.port()
    );
    let sent = std::time::Instant::now();
    ua.send(&invite);
    let trying = ua.recv().expect("100 Trying");
    assert!(trying.starts_with("SIP/2.0 100"), "{trying}");
    // Timer B: 64·T1 without an answer, then 408.
    let sock = &ua.sock;
    sock.set_read_timeout(Some(Duration::from_secs(40)))
        .expect("timeout");
    let timeout = ua.recv().expect("408 after timer B");
    assert!(timeout.starts_with("SIP/2.0 408"), "{timeout}");
    let waited = sent.elapsed();
    assert!(
        waited >= Duration::from_millis(6400) && waited < Duration::from_secs(32),
        "Timer B is 64·T1 = 6.4 s with t1_ms = 100: 408 after {waited:?}"
    );
    assert_eq!(
        metric(&srv, "sipsec_responses_sent_total{class=\"1xx\"}"),
        1
    );
    assert_eq!(
        metric(&srv, "sipsec_responses_sent_total{class=\"4xx\"}"),
        1
    );
    assert_eq!(
        metric(&srv, "sipsec_responses_sent_total{class=\"2xx\"}"),
        1
    );
}

#[test]
fn kill_9_during_online_compaction_loses_no_binding() {
    let dir = tempdir("hard-compact");
    let data = dir.join("data");
    let cfg = dir.join("compact.toml");
    // Compact at every 20 kB of journal: many compactions per round.
    std::fs::write(&cfg, "journal_compact_bytes = 20000\n").expect("config");
    let mut acked: Vec<String> = Vec::new();
    let mut compactions = 0;
    for round in 0..4u64 {
        let srv = start(&data, &["--config", s(&cfg)]);
        let pid = srv.child.id();
        let ua = Ua::new(srv.addr);
        ua.sock
            .set_read_timeout(Some(Duration::from_millis(500)))
            .expect("timeout");
        let http_addr = http(&srv);
        // kill -9 at a moment that falls among compactions.
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(600 + 130 * round));
            let page = http_get(&http_addr, "/metrics");
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            page.lines()
                .find(|l| l.starts_with("sipsec_journal_compactions_total "))
                .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .unwrap_or(0)
        });
        for i in 0.. {
            let user = format!("k{round}u{i}");
            let contact = format!("Contact: <sip:{user}@192.0.2.7:5060>\r\n");
            // Refreshes grow the journal without growing the state.
            let first = ua.register(&user, &user, 1, &contact, "");
            let Some(r) = first else { break };
            assert_eq!(code(&r), 200, "{r}");
            acked.push(user.clone());
            if ua.register(&user, &user, 2, &contact, "").is_none() {
                break;
            }
        }
        compactions += killer.join().expect("killer");
        drop(srv);
    }
    assert!(!acked.is_empty());
    let srv = start(&data, &[]);
    // Every binding, page by page.
    let mut bound = std::collections::HashSet::new();
    loop {
        let page: serde_json::Value = serde_json::from_str(
            http_get(
                &http(&srv),
                &format!("/status?offset={}&limit=10000", bound.len()),
            )
            .split("\r\n\r\n")
            .nth(1)
            .expect("body"),
        )
        .expect("json");
        let rows = page["bindings"].as_array().expect("bindings");
        bound.extend(
            rows.iter()
                .filter_map(|b| b["aor"].as_str().map(str::to_owned)),
        );
        if rows.is_empty() {
            break;
        }
    }
    for user in &acked {
        let aor = format!("sip:{user}@127.0.0.1");
        assert!(
            bound.contains(aor.as_str()),
            "{user} was acknowledged, then lost ({} acknowledged, {} restored, {compactions} compactions seen)",
            acked.len(),
            bound.len()
        );
    }
    assert!(compactions > 0, "the journal was compacted while serving");
}

#[test]
fn a_tls_call_through_a_proxy_without_record_route_carries_media_and_bye() {
    let dir = tempdir("hard-tls-rr");
    let f = |n: &str| dir.join(n).to_str().expect("utf-8").to_owned();
    common::tls_files(&dir);
    let users = users(&dir);
    let srv = start(
        &dir.join("data"),
        &[
            "--mode",
            "proxy",
            "--auth",
            "--users",
            s(&users),
            "--tls",
            "127.0.0.1:0",
            "--cert",
            &f("srv.pem"),
            "--key",
            &f("srv.key"),
        ],
    );
    let tls = common::banner_tls_addr(&srv.banner)
        .expect("tls address")
        .to_string();
    let (mut bob, _, bob_err) = common::answering(
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
            "50",
        ],
    );
    let alice = common::phone(
        "pw-alice",
        &[
            "call",
            &format!("sip:bob@{}", srv.addr),
            "--user",
            "alice",
            "--server",
            &tls,
            "--transport",
            "tls",
            "--tls-ca",
            &f("ca.pem"),
            "--tone",
            "600",
            "--packets",
            "50",
        ],
    )
    .output()
    .expect("alice runs");
    let said = text(&alice);
    let bob_status = bob.wait().expect("bob ends");
    let bob_said = bob_err.join().expect("stderr");
    assert!(alice.status.success(), "{said}\nbob: {bob_said}");
    assert!(!said.contains("received 0 "), "{said}");
    assert!(bob_status.success(), "bob: {bob_said}");
    assert!(
        metric(&srv, "sipsec_forwarded_total") >= 3,
        "INVITE, ACK and BYE forwarded"
    );
}

/// One valid account flooding fresh logins (each a new nonce) filled the
/// whole replay tracker, then every user got `stale=true` on every try.
/// Now a user holds at most its share: past it its own new logins are
/// re-challenged, while other users still log in.
#[test]
fn one_account_flooding_logins_does_not_lock_others_out() {
    let dir = tempdir("hard-nonce-flood");
    let users = users(&dir);
    let config = dir.join("sipsec.toml");
    std::fs::write(
        &config,
        "[auth]\nmax_tracked_nonces = 32\nmax_nonces_per_user = 8\n",
    )
    .expect("config");
    let srv = start(
        &dir.join("data"),
        &["--auth", "--users", s(&users), "--config", s(&config)],
    );
    let uri = format!("sip:{}", srv.addr);
    let login = |ua: &Ua, user: &str, password: &str, call_id: &str| -> u16 {
        let contact = format!("Contact: <sip:{user}@192.0.2.10>\r\n");
        let r = ua
            .register(user, call_id, 1, &contact, "")
            .expect("challenge");
        assert_eq!(code(&r), 401, "{r}");
        let ch = header(&r, HeaderName::WwwAuthenticate).expect("challenge header");
        let auth = authorization(&ch, user, password, &uri, 1);
        let r = ua
            .register(user, call_id, 2, &contact, &auth)
            .expect("answer");
        if code(&r) == 401 {
            assert!(r.contains("stale=true"), "{r}");
        }
        code(&r)
    };
    let flooder = Ua::new(srv.addr);
    let taken = (0..40)
        .filter(|i| login(&flooder, "alice", "pw-alice", &format!("flood-{i}")) == 200)
        .count();
    assert_eq!(taken, 8, "the flooder's share");
    let other = Ua::new(srv.addr);
    for i in 0..4 {
        assert_eq!(
            login(&other, "bob", "pw-bob", &format!("bob-{i}")),
            200,
            "another user still logs in"
        );
    }
    assert_eq!(metric(&srv, "sipsec_auth_failures_total"), 0);
}
