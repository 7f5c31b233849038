//! SIPVicious (PyPI `sipvicious`, installed by setup.sh) against the
//! server on loopback: svwar finds no extensions, svcrack is banned before
//! it reaches the password, legitimate registrations from another address
//! keep succeeding meanwhile; with bans off the same svcrack run succeeds,
//! which shows the test can fail.

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sip_core::auth::Challenge;
use sip_core::digest::{self, Algorithm, Qop, ResponseInput};
use sip_core::{HeaderName, Message};

mod common;

use common::{tempdir, Running};

fn serve(dir: &Path, extra: &[&str]) -> Running {
    let users = dir.join("users.tsv");
    common::import_users("100,pw-49\n101,legit-secret\n", dir, &users);
    let data = dir.join("data");
    let mut args = vec![
        "--udp",
        "127.0.0.1:0",
        "--no-tcp",
        "--no-http",
        "--auth",
        "--digest",
        "md5,sha-256",
        "--users",
        users.to_str().expect("utf-8 path"),
        "--data-dir",
        data.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    common::serve(&args)
}

/// Runs a SIPVicious tool through the interpreter it was installed into.
fn sipvicious(tool: &str, args: &[&str]) -> Output {
    let code = format!(
        "import sys; from sipvicious.{tool} import main; sys.argv[0] = '{tool}'; sys.exit(main())"
    );
    Command::new("python3")
        .args(["-c", &code])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("python3 not runnable ({e}): run ./setup.sh"))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn dictionary(dir: &Path) -> String {
    let path = dir.join("dict.txt");
    let words: String = (0..200).map(|i| format!("pw-{i}\n")).collect();
    std::fs::write(&path, words).expect("dictionary");
    path.to_str().expect("utf-8").to_owned()
}

/// Registers user 101 from 127.0.0.2 with its real password, refreshing
/// one contact as a phone does (from a new source port each time); returns
/// the final status.
fn legit_register(server: SocketAddr, cseq: u32) -> u16 {
    let s = UdpSocket::bind("127.0.0.2:0").expect("bind 127.0.0.2");
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let port = s.local_addr().expect("addr").port();
    let req = |cseq: u32, auth: &str| {
        format!(
            "REGISTER sip:{server} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.2:{port};branch=z9hG4bKlegit{cseq}\r\nMax-Forwards: 70\r\nFrom: <sip:101@{server}>;tag=l{cseq}\r\nTo: <sip:101@{server}>\r\nCall-ID: legit-{cseq}@127.0.0.2\r\nCSeq: {cseq} REGISTER\r\nContact: <sip:101@127.0.0.2:5060>\r\n{auth}Content-Length: 0\r\n\r\n"
        )
    };
    let mut buf = [0u8; 4096];
    let ask = |msg: String, buf: &mut [u8]| -> Option<String> {
        s.send_to(msg.as_bytes(), server).ok()?;
        let (n, _) = s.recv_from(buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    let Some(r) = ask(req(cseq, ""), &mut buf) else {
        return 0;
    };
    let m = Message::parse(r.as_bytes()).expect("parses");
    let Some(ch) = m.header(HeaderName::WwwAuthenticate) else {
        return m.status().map_or(0, |s| s.as_u16());
    };
    let c = Challenge::parse(ch).expect("challenge");
    let alg = Algorithm::from_token(c.algorithm.unwrap_or("MD5")).expect("algorithm");
    let (realm, nonce) = (c.realm.expect("realm"), c.nonce.expect("nonce"));
    let uri = format!("sip:{server}");
    let ha1 = digest::ha1(alg, "101", realm, "legit-secret");
    let response = digest::response(&ResponseInput {
        algorithm: alg,
        ha1: &ha1,
        nonce,
        cnonce: "c0ffee",
        nc: "00000001",
        qop: Some(Qop::Auth),
        method: "REGISTER",
        uri: &uri,
        body: b"",
    });
    let auth = format!(
        "Authorization: Digest username=\"101\", realm=\"{realm}\", nonce=\"{nonce}\", uri=\"{uri}\", response=\"{response}\", algorithm={}, qop=auth, nc=00000001, cnonce=\"c0ffee\"\r\n",
        alg.as_str()
    );
    ask(req(cseq + 1, &auth), &mut buf)
        .and_then(|r| Message::parse(r.as_bytes()).ok().and_then(|m| m.status()))
        .map_or(0, |s| s.as_u16())
}

#[test]
fn svwar_finds_nothing_and_svcrack_is_banned() {
    let dir = tempdir("guard");
    let s = serve(&dir, &[]);
    let port = s.addr.port().to_string();

    let war = sipvicious("svwar", &["-e90-220", "-p", &port, "127.0.0.1"]);
    let war_text = text(&war);
    assert!(
        war_text.contains("found nothing"),
        "svwar must not enumerate extensions:\n{war_text}"
    );

    // Legitimate registrations from 127.0.0.2 while svcrack runs from 127.0.0.1.
    let done = Arc::new(AtomicBool::new(false));
    let legit = {
        let done = done.clone();
        let server = s.addr;
        std::thread::spawn(move || {
            let mut results = Vec::new();
            let mut cseq = 1;
            while !done.load(Ordering::Relaxed) {
                results.push(legit_register(server, cseq));
                cseq += 2;
                std::thread::sleep(Duration::from_millis(300));
            }
            results
        })
    };
    let crack = sipvicious(
        "svcrack",
        &[
            "-u",
            "100",
            "-d",
            &dictionary(&dir),
            "-p",
            &port,
            "127.0.0.1",
        ],
    );
    done.store(true, Ordering::Relaxed);
    let crack_text = text(&crack);
    assert!(
        !crack_text.contains("pw-49"),
        "svcrack must be banned before it finds the password:\n{crack_text}"
    );
    let results = legit.join().expect("legit thread");
    assert!(results.len() >= 5, "{results:?}");
    assert!(
        results.iter().all(|r| *r == 200),
        "legitimate registrations must keep succeeding: {results:?}"
    );
}

#[test]
fn without_bans_svcrack_succeeds() {
    let dir = tempdir("noguard");
    std::fs::write(dir.join("noban.toml"), "[guard]\nmax_auth_failures = 0\n").expect("config");
    let cfg = dir.join("noban.toml");
    let s = serve(&dir, &["--config", cfg.to_str().expect("utf-8")]);
    let port = s.addr.port().to_string();
    let crack = sipvicious(
        "svcrack",
        &[
            "-u",
            "100",
            "-d",
            &dictionary(&dir),
            "-p",
            &port,
            "127.0.0.1",
        ],
    );
    let crack_text = text(&crack);
    assert!(
        crack_text.contains("pw-49"),
        "control run must find the password:\n{crack_text}"
    );
}
