//! STIR/SHAKEN across two domains on loopback: `a.example` signs the calls
//! of its authenticated users, `b.example` verifies what arrives, fetching
//! signers' certificates from an HTTPS repository the test runs. Debian's
//! independent implementation, `secsipidx`, signs tokens sipsec verifies
//! and verifies the tokens sipsec signs. Every way a call can fail gets
//! its own status and counter, and the verifier keeps answering while a
//! repository hangs.

mod common;
#[path = "stir_support/repo.rs"]
mod repo;

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{http_get, keygen, phone, tempdir, text, tls_files, Running};
use repo::Repo;
use stir::passport::{Dest, Orig};
use stir::{Claims, IdentityHeader, SigningKey};

const ALICE: &str = "12155551212";
const BOB: &str = "12155551213";

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

/// ALICE's users file at a.example (password pw-alice).
fn alice_users(dir: &Path) -> std::path::PathBuf {
    let users = dir.join("a.users.tsv");
    let csv = dir.join("a.csv");
    std::fs::write(&csv, format!("username,password\n{ALICE},pw-alice\n")).expect("csv");
    let out = Command::new(common::BIN)
        .args([
            "users",
            "import",
            p(&csv),
            "--realm",
            "a.example",
            "--file",
            p(&users),
        ])
        .output()
        .expect("users import");
    assert!(out.status.success(), "{}", text(&out));
    users
}

/// ALICE calls BOB at b.example from her phone through a.example.
fn alice_calls(a: &Running, extra: &[&str]) -> std::process::Child {
    let bob = format!("sip:{BOB}@b.example");
    let server = a.addr.to_string();
    let mut args = vec![
        "call",
        &bob,
        "--user",
        ALICE,
        "--domain",
        "a.example",
        "--server",
        &server,
        "--bind",
        "127.0.0.1:0",
    ];
    args.extend(extra);
    phone("pw-alice", &args).spawn().expect("phone")
}

/// The STI-CA, the certificates under it (and under a rogue CA), and the
/// repository's own TLS certificate.
fn certificates(dir: &Path) {
    let f = |n: &str| dir.join(n).to_str().expect("utf-8").to_owned();
    keygen(&[
        "sti-ca",
        "--key-out",
        &f("sti-ca.key"),
        "-o",
        &f("sti-ca.pem"),
    ]);
    let issue = |name: &str, ca: &str, authority: &[&str]| {
        let (ca_pem, ca_key) = (f(&format!("{ca}.pem")), f(&format!("{ca}.key")));
        let (key, pem) = (f(&format!("{name}.key")), f(&format!("{name}.pem")));
        let mut args = vec![
            "sti-cert",
            "--issuer-cert",
            &ca_pem,
            "--issuer-key",
            &ca_key,
        ];
        args.extend(authority);
        args.extend(["--key-out", &key, "-o", &pem]);
        keygen(&args);
    };
    issue("sp", "sti-ca", &["--spc", "1234"]);
    issue("narrow", "sti-ca", &["--tn", "+19995550001"]);
    keygen(&[
        "sti-ca",
        "--cn",
        "rogue",
        "--key-out",
        &f("rogue-ca.key"),
        "-o",
        &f("rogue-ca.pem"),
    ]);
    issue("rogue", "rogue-ca", &["--spc", "6666"]);
    tls_files(dir);
}

fn repository(dir: &Path) -> Repo {
    let mut files = HashMap::new();
    for name in ["sp", "narrow", "rogue"] {
        let pem = std::fs::read(dir.join(format!("{name}.pem"))).expect("certificate");
        files.insert(format!("/{name}.pem"), pem);
    }
    Repo::start(dir, files)
}

/// The proxy `name` for `domain` with `extra` TOML (its `[stir]`,
/// `[auth]`, peers).
fn proxy(dir: &Path, name: &str, domain: &str, extra: &str) -> Running {
    let config = format!(
        "mode = \"proxy\"\nudp = \"127.0.0.1:0\"\ntcp = \"off\"\nhttp = \"127.0.0.1:0\"\n\
         stateful = true\ndomains = [\"{domain}\"]\ndata_dir = \"{}\"\n{extra}",
        p(&dir.join(format!("{name}.data"))),
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, config).expect("config");
    common::serve(&["--config", p(&path)])
}

/// `[stir]` of a verifier trusting the STI-CA and the repository.
fn verifier(dir: &Path, extra: &str) -> String {
    format!(
        "[stir]\ntrust_anchors = \"{}\"\nrequire = true\nfetch_roots = \"{}\"\nfetch_timeout = 3.0\n{extra}",
        p(&dir.join("sti-ca.pem")),
        p(&dir.join("ca.pem")),
    )
}

fn stir_status(proxy: &Running) -> serde_json::Value {
    let http = common::banner_http_addr(&proxy.banner).expect("http address in the banner");
    let response = http_get(&http.to_string(), "/status");
    let body = response.split("\r\n\r\n").nth(1).expect("body");
    let status: serde_json::Value = serde_json::from_str(body).expect("status JSON");
    status["stir"].clone()
}

fn socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    s
}

fn recv(s: &UdpSocket) -> String {
    let mut buf = vec![0u8; 65_536];
    let n = s.recv(&mut buf).expect("a SIP message before the timeout");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// The first message on `s` that is not a 100 Trying (or an ACK for an
/// earlier call's 486).
fn final_or_request(s: &UdpSocket) -> String {
    loop {
        let m = recv(s);
        if !m.starts_with("SIP/2.0 100") && !m.starts_with("ACK ") {
            return m;
        }
    }
}

/// `m`'s header lines named `name` (any case).
fn headers<'a>(m: &'a str, name: &str) -> Vec<&'a str> {
    m.lines()
        .filter(|l| {
            l.split_once(':')
                .is_some_and(|(n, _)| n.trim().eq_ignore_ascii_case(name))
        })
        .collect()
}

/// The response `status` to the request `req`, as a UAS writes it.
fn answer(req: &str, status: &str) -> String {
    let mut r = format!("SIP/2.0 {status}\r\n");
    for name in ["Via", "From", "Call-ID", "CSeq"] {
        for h in headers(req, name) {
            r.push_str(h);
            r.push_str("\r\n");
        }
    }
    for h in headers(req, "To") {
        r.push_str(&format!("{h};tag=callee\r\n"));
    }
    r.push_str("Content-Length: 0\r\n\r\n");
    r
}

/// Registers `user` at `proxy` with `s` as its contact.
fn register(s: &UdpSocket, user: &str, domain: &str, proxy: SocketAddr) {
    let me = s.local_addr().expect("addr");
    let m = format!(
        "REGISTER sip:{domain} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bKreg{user}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:{user}@{domain}>;tag=r1\r\nTo: <sip:{user}@{domain}>\r\n\
         Call-ID: reg-{user}\r\nCSeq: 1 REGISTER\r\nContact: <sip:{user}@{me}>\r\nExpires: 600\r\n\
         Content-Length: 0\r\n\r\n"
    );
    s.send_to(m.as_bytes(), proxy).expect("send");
    let r = final_or_request(s);
    assert!(r.starts_with("SIP/2.0 200"), "{r}");
}

/// An INVITE from ALICE to BOB at b.example, with `identity`.
fn invite(s: &UdpSocket, call: &str, identity: Option<&str>) -> String {
    let me = s.local_addr().expect("addr");
    let id = identity.map_or(String::new(), |v| format!("Identity: {v}\r\n"));
    format!(
        "INVITE sip:{BOB}@b.example SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK{call}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:+{ALICE}@a.example>;tag={call}\r\nTo: <sip:{BOB}@b.example>\r\n\
         Call-ID: {call}\r\nCSeq: 1 INVITE\r\nContact: <sip:{ALICE}@{me}>\r\n{id}Content-Length: 0\r\n\r\n"
    )
}

/// A token for ALICE → `dest` signed with `key`, made `iat`, for `x5u`.
fn token(dir: &Path, key: &str, dest: &str, iat: i64, x5u: &str) -> String {
    let key = SigningKey::from_pem(&std::fs::read(dir.join(key)).expect("key")).expect("P-256");
    let claims = Claims {
        attest: "A".into(),
        dest: Dest::tn(dest),
        iat,
        orig: Orig::tn(ALICE),
        origid: "4437c7eb-8f92-4bd0-bf35-3c04dc1a2fda".into(),
    };
    IdentityHeader::format(&key.sign(&claims, x5u).expect("signed"), x5u)
}

/// `secsipidx` (Debian's independent implementation) signs ALICE → BOB.
fn secsipidx_sign(dir: &Path, x5u: &str) -> String {
    let out = Command::new("secsipidx")
        .args([
            "-sign-full",
            "-orig-tn",
            ALICE,
            "-dest-tn",
            BOB,
            "-attest",
            "A",
            "-x5u",
            x5u,
            "-k",
        ])
        .arg(dir.join("sp.key"))
        .output()
        .expect("secsipidx runs (./setup.sh installs it)");
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

/// `secsipidx` verifies an Identity value with the signer's certificate
/// checked against the STI-CA: whether it says ok.
fn secsipidx_verifies(dir: &Path, identity: &str) -> bool {
    let file = dir.join("identity.txt");
    std::fs::write(&file, identity).expect("write");
    let out = Command::new("secsipidx")
        .args([
            "-check",
            "-expire",
            "300",
            "-cert-verify",
            "4",
            "-fidentity",
        ])
        .arg(&file)
        .arg("-fpubkey")
        .arg(dir.join("sp.pem"))
        .arg("-ca-file")
        .arg(dir.join("sti-ca.pem"))
        .output()
        .expect("secsipidx runs");
    out.status.success() && text(&out).contains("ok") && !text(&out).contains("not-ok")
}

/// Sends `inv` to `proxy` from `caller`; BOB's socket takes the INVITE
/// and answers 486. Returns the INVITE as BOB saw it.
fn reaches_bob(caller: &UdpSocket, bob: &UdpSocket, proxy: SocketAddr, inv: &str) -> String {
    caller.send_to(inv.as_bytes(), proxy).expect("send");
    let seen = final_or_request(bob);
    assert!(seen.starts_with("INVITE "), "{seen}");
    bob.send_to(answer(&seen, "486 Busy Here").as_bytes(), proxy)
        .expect("answer");
    let r = final_or_request(caller);
    assert!(r.starts_with("SIP/2.0 486"), "{r}");
    // The ACK for the failure ends the proxy's transaction (no more 486s).
    let to = headers(&r, "To")[0];
    let via = headers(inv, "Via")[0];
    let call = headers(inv, "Call-ID")[0];
    let from = headers(inv, "From")[0];
    let ack = format!(
        "ACK sip:{BOB}@b.example SIP/2.0\r\n{via}\r\nMax-Forwards: 70\r\n{from}\r\n{to}\r\n{call}\r\n\
         CSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n"
    );
    caller.send_to(ack.as_bytes(), proxy).expect("ack");
    seen
}

/// Whether nothing has arrived on `s` yet (a call still waiting).
fn nothing_yet(s: &UdpSocket) -> bool {
    s.set_nonblocking(true).expect("nonblocking");
    let mut buf = [0u8; 2048];
    let nothing = s.recv(&mut buf).is_err();
    s.set_nonblocking(false).expect("blocking");
    nothing
}

fn verstat(invite: &str) -> Option<&str> {
    let from = headers(invite, "From").into_iter().next()?;
    from.split("verstat=").nth(1)?.split(['@', ';', '>']).next()
}

#[test]
fn calls_signed_in_one_domain_are_verified_in_another_and_with_secsipidx() {
    let dir = tempdir("stir-across");
    certificates(&dir);
    let repo = repository(&dir);
    let b = proxy(
        &dir,
        "b",
        "b.example",
        &verifier(&dir, "allow_private_x5u = true\n"),
    );
    let users = alice_users(&dir);
    let a = proxy(
        &dir,
        "a",
        "a.example",
        &format!(
            "[auth]\nenabled = true\nrealm = \"a.example\"\nusers = \"{}\"\n[peers]\n\"b.example\" = \"{}\"\n\
             [stir]\nkey = \"{}\"\nx5u = \"{}\"\nattest = \"A\"\n",
            p(&users),
            b.addr,
            p(&dir.join("sp.key")),
            repo.url("sp.pem"),
        ),
    );
    let bob = socket();
    register(&bob, BOB, "b.example", b.addr);

    // Alice's phone calls through a.example, which signs.
    let mut alice = alice_calls(&a, &[]);
    let seen = final_or_request(&bob);
    bob.send_to(answer(&seen, "486 Busy Here").as_bytes(), b.addr)
        .expect("answer");
    let _ = alice.wait();
    assert_eq!(verstat(&seen), Some("TN-Validation-Passed"), "{seen}");
    let identity = headers(&seen, "Identity");
    assert_eq!(identity.len(), 1, "{seen}");
    let value = identity[0].split_once(':').expect("value").1.trim();
    assert!(secsipidx_verifies(&dir, value), "secsipidx refused {value}");
    assert!(
        !secsipidx_verifies(&dir, &value.replacen('e', "f", 1)),
        "secsipidx's check can fail"
    );

    // secsipidx signs; sipsec verifies (the certificate now cached).
    let caller = socket();
    let signed = secsipidx_sign(&dir, &repo.url("sp.pem"));
    let seen = reaches_bob(&caller, &bob, b.addr, &invite(&caller, "x1", Some(&signed)));
    assert_eq!(verstat(&seen), Some("TN-Validation-Passed"), "{seen}");
    assert_eq!(repo.hits("sp.pem"), 1, "fetched once, then cached");
    let s = stir_status(&a);
    assert_eq!(s["signed"], 1, "{s}");
    let s = stir_status(&b);
    assert_eq!(s["passed"], 2, "{s}");

    // The compact form, and a good header after a bad one.
    let compact = invite(&caller, "x3", Some(&signed)).replace("Identity: ", "y: ");
    let seen = reaches_bob(&caller, &bob, b.addr, &compact);
    assert_eq!(verstat(&seen), Some("TN-Validation-Passed"), "{seen}");
    let two = invite(&caller, "x4", Some(&signed)).replace(
        "Identity: ",
        "Identity: junk.token.x;info=<https://x/y>\r\nIdentity: ",
    );
    let seen = reaches_bob(&caller, &bob, b.addr, &two);
    assert_eq!(verstat(&seen), Some("TN-Validation-Passed"), "{seen}");
    assert_eq!(stir_status(&b)["passed"], 4);

    // A caller's own verstat is not believed.
    let forged = invite(&caller, "x2", None).replace(
        &format!("<sip:+{ALICE}@"),
        &format!("<sip:+{ALICE};verstat=TN-Validation-Passed@"),
    );
    caller.send_to(forged.as_bytes(), b.addr).expect("send");
    let r = final_or_request(&caller);
    assert!(r.starts_with("SIP/2.0 428"), "{r}");
}

#[test]
fn every_failure_has_its_own_status_and_counter_and_others_go_on() {
    let dir = tempdir("stir-failures");
    certificates(&dir);
    let repo = repository(&dir);
    let b = proxy(
        &dir,
        "b",
        "b.example",
        &verifier(&dir, "allow_private_x5u = true\n"),
    );
    let bob = socket();
    register(&bob, BOB, "b.example", b.addr);
    let caller = socket();
    let t = now();
    let sp = repo.url("sp.pem");
    let cases: Vec<(&str, Option<String>, &str, &str)> = vec![
        ("no-id", None, "428", "no_identity"),
        (
            "dest",
            Some(token(&dir, "sp.key", "19995550000", t, &sp)),
            "438",
            "mismatch",
        ),
        (
            "iat",
            Some(token(&dir, "sp.key", BOB, t - 3600, &sp)),
            "403",
            "stale",
        ),
        (
            "sig",
            Some(token(&dir, "rogue.key", BOB, t, &sp)),
            "438",
            "bad_signature",
        ),
        (
            "narrow",
            Some(token(&dir, "narrow.key", BOB, t, &repo.url("narrow.pem"))),
            "437",
            "not_covered",
        ),
        (
            "rogue",
            Some(token(&dir, "rogue.key", BOB, t, &repo.url("rogue.pem"))),
            "437",
            "untrusted",
        ),
        (
            "huge",
            Some(token(&dir, "sp.key", BOB, t, &repo.url("huge.pem"))),
            "436",
            "x5u_too_large",
        ),
        (
            "loop",
            Some(token(&dir, "sp.key", BOB, t, &repo.url("loop.pem"))),
            "436",
            "x5u_redirects",
        ),
        (
            "junk",
            Some("not.a.token;info=<https://x/y>".into()),
            "438",
            "malformed",
        ),
    ];
    for (call, identity, status, why) in &cases {
        caller
            .send_to(
                invite(&caller, call, identity.as_deref()).as_bytes(),
                b.addr,
            )
            .expect("send");
        let r = final_or_request(&caller);
        assert!(r.starts_with(&format!("SIP/2.0 {status}")), "{call}: {r}");
        assert!(r.contains(why), "{call}: the Warning names {why}: {r}");
        assert_eq!(stir_status(&b)["failed"][why], 1, "{call}");
    }
    // Only the bad signature needed the certificate: claims that fail
    // first never make the verifier fetch.
    assert_eq!(repo.hits("sp.pem"), 1);

    // A repository that never answers holds one fetch, not the server.
    let slow = socket();
    let hang = token(&dir, "sp.key", BOB, now(), &repo.url("slow.pem"));
    slow.send_to(invite(&slow, "slow", Some(&hang)).as_bytes(), b.addr)
        .expect("send");
    let good = token(&dir, "sp.key", BOB, now(), &sp);
    let seen = reaches_bob(&caller, &bob, b.addr, &invite(&caller, "good", Some(&good)));
    assert_eq!(verstat(&seen), Some("TN-Validation-Passed"), "{seen}");
    assert!(nothing_yet(&slow), "the slow call is still waiting");
    let r = final_or_request(&slow);
    assert!(
        r.starts_with("SIP/2.0 436") && r.contains("x5u_timeout"),
        "{r}"
    );
    let s = stir_status(&b);
    assert_eq!(
        (s["passed"].as_u64(), s["refused"].as_u64()),
        (Some(1), Some(10)),
        "{s}"
    );

    // A verifier that may not fetch from inside addresses refuses to.
    let c = proxy(&dir, "c", "b.example", &verifier(&dir, ""));
    register(&socket(), BOB, "b.example", c.addr);
    let caller = socket();
    caller
        .send_to(invite(&caller, "private", Some(&good)).as_bytes(), c.addr)
        .expect("send");
    let r = final_or_request(&caller);
    assert!(
        r.starts_with("SIP/2.0 436") && r.contains("x5u_private_address"),
        "{r}"
    );
    assert_eq!(
        repo.hits("sp.pem"),
        1,
        "no request went to the private address"
    );
}

/// Any caller may name any repository, so one that names repositories
/// that hang holds at most half the fetchers (two of the default four)
/// and its share of the waiting calls: its further URLs are answered
/// `busy` at once, and another caller's certificate is fetched and its
/// call verified meanwhile (before the share, the hanging URLs held every
/// fetcher and the other call waited behind them).
#[test]
fn one_caller_naming_repositories_that_hang_holds_only_its_share_of_the_fetchers() {
    let dir = tempdir("stir-share");
    certificates(&dir);
    let repo = repository(&dir);
    let config = verifier(&dir, "allow_private_x5u = true\n");
    let b = proxy(
        &dir,
        "b",
        "b.example",
        &format!("{config}[guard]\nexempt_loopback = false\n"),
    );
    let bob = socket();
    register(&bob, BOB, "b.example", b.addr);
    let hostile = socket();
    for i in 0..8 {
        let hang = token(
            &dir,
            "sp.key",
            BOB,
            now(),
            &repo.url(&format!("slow-{i}.pem")),
        );
        let call = format!("hang{i}");
        hostile
            .send_to(invite(&hostile, &call, Some(&hang)).as_bytes(), b.addr)
            .expect("send");
    }
    for _ in 0..6 {
        let r = final_or_request(&hostile);
        assert!(
            r.starts_with("SIP/2.0 503") && r.contains("STIR/SHAKEN: busy"),
            "past its share, at once: {r}"
        );
    }
    let caller = UdpSocket::bind("127.0.0.2:0").expect("another source");
    caller
        .set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let good = token(&dir, "sp.key", BOB, now(), &repo.url("sp.pem"));
    let seen = reaches_bob(&caller, &bob, b.addr, &invite(&caller, "good", Some(&good)));
    assert_eq!(verstat(&seen), Some("TN-Validation-Passed"), "{seen}");
    assert!(
        nothing_yet(&hostile),
        "the two calls within the share still wait on their repositories"
    );
    for _ in 0..2 {
        let r = final_or_request(&hostile);
        assert!(
            r.starts_with("SIP/2.0 436") && r.contains("x5u_timeout"),
            "{r}"
        );
    }
    let slow: usize = (0..8).map(|i| repo.hits(&format!("slow-{i}.pem"))).sum();
    assert_eq!(slow, 2, "the calls past the share fetched nothing");
    assert_eq!(stir_status(&b)["failed"]["busy"], 6);
}

/// Kamailio with secsipid, stopped (SIGTERM, so its workers go too) when
/// dropped.
struct Kamailio(std::process::Child);

impl Drop for Kamailio {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

/// Starts `interop/kamailio/stir.cfg` on `addr` and waits for it to
/// answer OPTIONS.
fn kamailio(
    dir: &Path,
    addr: SocketAddr,
    bob: SocketAddr,
    verifier: SocketAddr,
    x5u: &str,
) -> Kamailio {
    let cfg = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../interop/kamailio/stir.cfg"
    );
    let child = Command::new("kamailio")
        .args(["-f", cfg, "-DD", "-E", "-n", "1", "-m", "64", "-M", "8"])
        .args(["-l", &format!("udp:{addr}"), "-w", p(dir)])
        .args([
            "-A",
            &format!("BOB=\"sip:{bob}\""),
            "-A",
            &format!("VERIFIER=\"sip:{verifier}\""),
        ])
        .args(["-A", &format!("X5U=\"{x5u}\"")])
        .args(["-A", &format!("SIGN_KEY=\"{}\"", p(&dir.join("sp.key")))])
        .args([
            "-A",
            &format!("CA_OPT=\"CertCAFile={}\"", p(&dir.join("sti-ca.pem"))),
        ])
        .env("SSL_CERT_FILE", dir.join("ca.pem"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("kamailio.log")).expect("log"))
        .spawn()
        .expect("kamailio runs (./setup.sh installs it with kamailio-secsipid-modules)");
    let k = Kamailio(child);
    let s = socket();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let me = s.local_addr().expect("addr");
    let mut buf = [0u8; 2048];
    for i in 0..100 {
        let options = format!(
            "OPTIONS sip:{addr} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bKk{i}\r\nMax-Forwards: 70\r\n\
             From: <sip:t@x>;tag=k\r\nTo: <sip:{addr}>\r\nCall-ID: k{i}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
        );
        s.send_to(options.as_bytes(), addr).expect("send");
        if s.recv(&mut buf).is_ok() {
            return k;
        }
    }
    let log = std::fs::read_to_string(dir.join("kamailio.log")).unwrap_or_default();
    panic!("Kamailio never answered OPTIONS: {log}");
}

#[test]
fn kamailio_verifies_what_sipsec_signs_and_sipsec_what_kamailio_signs() {
    let dir = tempdir("stir-kamailio");
    certificates(&dir);
    let repo = repository(&dir);
    let sp = repo.url("sp.pem");
    let b = proxy(
        &dir,
        "b",
        "b.example",
        &verifier(&dir, "allow_private_x5u = true\n"),
    );
    let bob_at_b = socket();
    register(&bob_at_b, BOB, "b.example", b.addr);
    let bob = socket();
    let k_addr = UdpSocket::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let _k = kamailio(&dir, k_addr, bob.local_addr().expect("addr"), b.addr, &sp);
    let users = alice_users(&dir);
    let a = proxy(
        &dir,
        "a",
        "a.example",
        &format!(
            "[auth]\nenabled = true\nrealm = \"a.example\"\nusers = \"{}\"\n[peers]\n\"b.example\" = \"{k_addr}\"\n\
             [stir]\nkey = \"{}\"\nx5u = \"{sp}\"\n",
            p(&users),
            p(&dir.join("sp.key")),
        ),
    );

    // sipsec signs, Kamailio verifies.
    let mut alice = alice_calls(&a, &[]);
    let seen = final_or_request(&bob);
    bob.send_to(answer(&seen, "486 Busy Here").as_bytes(), k_addr)
        .expect("answer");
    let _ = alice.wait();
    assert_eq!(headers(&seen, "X-Stir"), ["X-Stir: ok"], "{seen}");
    // …and its check can fail: a signature by another key.
    let caller = socket();
    let forged = token(&dir, "rogue.key", BOB, now(), &sp);
    caller
        .send_to(
            invite(&caller, "k-forged", Some(&forged)).as_bytes(),
            k_addr,
        )
        .expect("send");
    let seen = final_or_request(&bob);
    assert_eq!(headers(&seen, "X-Stir"), ["X-Stir: failed"], "{seen}");

    // Kamailio signs, sipsec verifies.
    let inv = invite(&caller, "k-signs", None)
        .replace(
            &format!("INVITE sip:{BOB}@b.example"),
            &format!("INVITE sip:{BOB}@c.example"),
        )
        .replace(&format!("<sip:+{ALICE}@"), &format!("<sip:{ALICE}@"));
    caller.send_to(inv.as_bytes(), k_addr).expect("send");
    let seen = final_or_request(&bob_at_b);
    assert_eq!(verstat(&seen), Some("TN-Validation-Passed"), "{seen}");
}

/// The claims of an Identity header value, as JSON text.
fn claims_of(identity: &str) -> String {
    let token = identity.split(';').next().expect("token");
    let p = stir::Passport::decode(token).expect("a PASSporT");
    serde_json::to_string(&p.claims).expect("JSON")
}

#[test]
fn a_privasip_caller_is_attested_without_the_number_leaving_its_domain() {
    let dir = tempdir("stir-privasip");
    certificates(&dir);
    let repo = repository(&dir);
    let f = |n: &str| dir.join(n).to_str().expect("utf-8").to_owned();
    for d in ["a", "b"] {
        keygen(&["ec", "--curve", "x25519", "-o", &f(&format!("{d}.hpke"))]);
        keygen(&[
            "public",
            "--key",
            &f(&format!("{d}.hpke")),
            "-o",
            &f(&format!("{d}.hpke.pub")),
        ]);
    }
    let privacy = |d: &str| {
        format!(
            "[privacy]\nkeys = [{{ id = 1, key = \"{}\" }}]\n",
            f(&format!("{d}.hpke"))
        )
    };
    let b = proxy(
        &dir,
        "b",
        "b.example",
        &format!(
            "{}{}",
            privacy("b"),
            verifier(&dir, "allow_private_x5u = true\n")
        ),
    );
    let bob = socket();
    register(&bob, BOB, "b.example", b.addr);
    let users = alice_users(&dir);
    let a = proxy(
        &dir,
        "a",
        "a.example",
        &format!(
            "[auth]\nenabled = true\nrealm = \"a.example\"\nusers = \"{}\"\n{}[peers]\n\"b.example\" = \"{}\"\n\
             [stir]\nkey = \"{}\"\nx5u = \"{}\"\n",
            p(&users),
            privacy("a"),
            b.addr,
            f("sp.key"),
            repo.url("sp.pem"),
        ),
    );
    let (home, callee) = (f("a.hpke.pub"), f("b.hpke.pub"));
    let extra = [
        "--privacy",
        "2",
        "--home-key",
        &home,
        "--callee-key",
        &callee,
    ];
    let mut alice = alice_calls(&a, &extra);
    let seen = final_or_request(&bob);
    bob.send_to(answer(&seen, "486 Busy Here").as_bytes(), b.addr)
        .expect("answer");
    let _ = alice.wait();
    assert_eq!(verstat(&seen), Some("TN-Validation-Passed"), "{seen}");
    assert!(
        !seen.contains(ALICE),
        "the caller's number reached the callee:\n{seen}"
    );
    let identity = headers(&seen, "Identity");
    let claims = claims_of(identity[0].split_once(':').expect("value").1.trim());
    let from = headers(&seen, "From")[0];
    let pseudonym = from
        .split("sip:")
        .nth(1)
        .expect("uri")
        .split(';')
        .next()
        .expect("user");
    assert!(
        claims.contains(&format!("\"orig\":{{\"uri\":\"sip:{pseudonym}")),
        "{claims}"
    );
    assert!(claims.contains("\"attest\":\"A\""), "{claims}");
    assert!(!claims.contains(ALICE), "{claims}");
}
