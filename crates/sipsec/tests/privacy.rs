//! PrivaSIP across two domains on loopback: `a.example` (alice's home
//! proxy) and `b.example` (bob's home and inbound proxy), two `sipsec
//! serve` peered with each other. Phones register and call with their IDs
//! encrypted; tcpdump captures what crosses between the proxies, and no
//! plaintext user ID may be in it — while the same capture of a plain call
//! shows both names, so the check can fail. Wrong keys get one uniform
//! 403.

mod common;

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::{answering, http_get, phone, tempdir, text, Running, BIN};

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// A UDP port free right now (the proxies must know each other's before
/// they start).
fn free_port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
    s.local_addr().expect("addr").port()
}

fn keygen(args: &[&str]) {
    let out = Command::new(BIN)
        .arg("keygen")
        .args(args)
        .output()
        .expect("sipsec keygen");
    assert!(out.status.success(), "keygen {args:?}: {}", text(&out));
}

/// A private key of `kind` and its public half: (private, public).
fn key_pair(dir: &Path, name: &str, kind: &str) -> (PathBuf, PathBuf) {
    let (private, public) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.pub.pem")),
    );
    match kind {
        "rsa-multiprime" => keygen(&[
            "rsa",
            "--variant",
            "multiprime",
            "--bits",
            "2048",
            "-o",
            p(&private),
        ]),
        "rsa-standard" => keygen(&[
            "rsa",
            "--variant",
            "standard",
            "--bits",
            "2048",
            "-o",
            p(&private),
        ]),
        "ecies" => keygen(&["ec", "--curve", "p256", "-o", p(&private)]),
        "hpke" => keygen(&["ec", "--curve", "x25519", "-o", p(&private)]),
        other => panic!("{other}"),
    }
    keygen(&["public", "--key", p(&private), "-o", p(&public)]);
    (private, public)
}

/// One domain's proxy.
struct Domain {
    name: &'static str,
    port: u16,
}

impl Domain {
    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// Starts the proxy of `d`, peered with `peer`, opening pseudonyms with
/// `key` (and AES when `aes`), stateful or stateless.
fn proxy(
    dir: &Path,
    d: &Domain,
    peer: &Domain,
    key: Option<&Path>,
    aes: bool,
    mode: &str,
) -> Running {
    proxy_with(dir, d, peer, key, aes, mode, "")
}

/// [`proxy`] with `extra` lines in its `[privacy]` table.
fn proxy_with(
    dir: &Path,
    d: &Domain,
    peer: &Domain,
    key: Option<&Path>,
    aes: bool,
    mode: &str,
    extra: &str,
) -> Running {
    let users = dir.join(format!("{}.users.tsv", d.name));
    let csv = dir.join(format!("{}.csv", d.name));
    std::fs::write(&csv, "username,password\nalice,pw-alice\nbob,pw-bob\n").expect("csv");
    let out = Command::new(BIN)
        .args([
            "users",
            "import",
            p(&csv),
            "--realm",
            d.name,
            "--file",
            p(&users),
        ])
        .output()
        .expect("users import");
    assert!(out.status.success(), "{}", text(&out));
    let mut privacy = String::new();
    if key.is_some() || aes {
        privacy = format!("[privacy]\nmode = \"{mode}\"\n");
        if let Some(k) = key {
            privacy.push_str(&format!("keys = [{{ id = 1, key = \"{}\" }}]\n", p(k)));
        }
        if aes {
            privacy.push_str("aes = \"gcm\"\n");
        }
        privacy.push_str(extra);
    }
    let config = format!(
        "mode = \"proxy\"\nudp = \"127.0.0.1:{}\"\ntcp = \"off\"\nhttp = \"127.0.0.1:0\"\nstateful = true\n\
         domains = [\"{}\"]\ndata_dir = \"{}\"\n[auth]\nenabled = true\nrealm = \"{}\"\nusers = \"{}\"\n\
         {privacy}[peers]\n\"{}\" = \"{}\"\n",
        d.port,
        d.name,
        p(&dir.join(format!("{}.data", d.name))),
        d.name,
        p(&users),
        peer.name,
        peer.addr(),
    );
    let path = dir.join(format!("{}.toml", d.name));
    std::fs::write(&path, config).expect("config");
    common::serve(&["--config", p(&path)])
}

/// tcpdump on loopback, keeping only datagrams between the two proxies.
struct Capture {
    child: Child,
    file: PathBuf,
}

impl Capture {
    fn start(dir: &Path, a: &Domain, b: &Domain) -> Self {
        let file = dir.join("between-proxies.pcap");
        let filter = format!("udp and port {} and port {}", a.port, b.port);
        let mut child = Command::new("tcpdump")
            .args([
                "-i",
                "lo",
                "-U",
                "--immediate-mode",
                "-n",
                "-w",
                p(&file),
                &filter,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump runs (./setup.sh installs it; capturing needs root or CAP_NET_RAW)");
        let mut err = BufReader::new(child.stderr.take().expect("piped"));
        let mut line = String::new();
        err.read_line(&mut line).expect("tcpdump stderr");
        assert!(line.contains("listening on lo"), "tcpdump: {line}");
        std::thread::spawn(move || {
            let mut sink = String::new();
            while err.read_line(&mut sink).is_ok_and(|n| n > 0) {}
        });
        Self { child, file }
    }

    /// Stops tcpdump and returns the datagram payloads it saw (pcap:
    /// 24-byte file header, then 16-byte record headers).
    fn stop(mut self) -> Vec<Vec<u8>> {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        let bytes = std::fs::read(&self.file).expect("pcap written");
        let mut out = Vec::new();
        let mut at = 24;
        while at + 16 <= bytes.len() {
            let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().expect("4")) as usize;
            at += 16;
            out.push(bytes[at..(at + len).min(bytes.len())].to_vec());
            at += len;
        }
        out
    }
}

/// The `privacy` counters in a proxy's `/status`.
fn privacy_counters(proxy: &Running) -> serde_json::Value {
    let http = common::banner_http_addr(&proxy.banner).expect("http address in the banner");
    let response = http_get(&http.to_string(), "/status");
    let body = response.split("\r\n\r\n").nth(1).expect("body");
    let status: serde_json::Value = serde_json::from_str(body).expect("status JSON");
    status["privacy"].clone()
}

/// Whether `needle` (lowercase) is in `hay`, ignoring case.
fn contains(hay: &[u8], needle: &str) -> bool {
    let hay = String::from_utf8_lossy(hay).to_ascii_lowercase();
    hay.contains(needle)
}

/// Whether the user `name` (lowercase) is named in `hay`: as a whole
/// word, since a pseudonym or ticket in base32 or hex may spell "bob" by
/// chance (1 in 32,768 per position) where a name in clear stands between
/// delimiters ("sip:bob@").
fn names(hay: &[u8], name: &str) -> bool {
    let hay = String::from_utf8_lossy(hay).to_ascii_lowercase();
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    hay.match_indices(name).any(|(i, _)| {
        !word(hay[..i].chars().next_back()) && !word(hay[i + name.len()..].chars().next())
    })
}

/// Bob registers at b.example and answers; alice calls him through both
/// proxies. Returns what crossed between the proxies.
fn call_across(
    dir: &Path,
    (a, b): (&Domain, &Domain),
    alice_privacy: &[&str],
    bob_privacy: &[&str],
) -> Vec<Vec<u8>> {
    let cap = Capture::start(dir, a, b);
    let mut bob_args = vec![
        "answer",
        "--user",
        "bob",
        "--domain",
        b.name,
        "--register",
        "--bind",
        "127.0.0.1:0",
        "--tone",
        "1000",
        "--packets",
        "50",
    ];
    let b_addr = b.addr();
    bob_args.extend(["--server", &b_addr]);
    bob_args.extend(bob_privacy);
    let (bob, _, _) = answering("pw-bob", &bob_args);
    let a_addr = a.addr();
    let mut alice_args = vec![
        "call",
        "sip:bob@b.example",
        "--user",
        "alice",
        "--domain",
        a.name,
        "--server",
        &a_addr,
        "--bind",
        "127.0.0.1:0",
        "--tone",
        "440",
        "--packets",
        "60",
    ];
    alice_args.extend(alice_privacy);
    let alice = phone("pw-alice", &alice_args).output().expect("alice runs");
    let bob = bob.wait_with_output().expect("bob runs");
    let (ta, tb) = (text(&alice), text(&bob));
    assert!(alice.status.success(), "alice: {ta}\nbob: {tb}");
    assert!(bob.status.success(), "bob: {tb}\nalice: {ta}");
    assert!(
        ta.contains("180 Ringing") && ta.contains("call established"),
        "{ta}"
    );
    assert!(tb.contains("remote hung up"), "{tb}");
    assert!(ta.contains("lost 0"), "{ta}");
    cap.stop()
}

fn domains() -> (Domain, Domain) {
    (
        Domain {
            name: "a.example",
            port: free_port(),
        },
        Domain {
            name: "b.example",
            port: free_port(),
        },
    )
}

/// What crossed carried the whole call set-up and tear-down.
fn assert_call_crossed(packets: &[Vec<u8>]) {
    for m in [
        "invite sip:",
        "sip/2.0 180 ringing",
        "bye sip:",
        "sip/2.0 200 ok",
    ] {
        assert!(
            packets.iter().any(|d| contains(d, m)),
            "{m:?} crossed between the proxies: {:?}",
            packets
                .iter()
                .map(|d| String::from_utf8_lossy(d).into_owned())
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn privasip_2_calls_cross_two_domains_with_no_user_id_in_clear() {
    let dir = tempdir("privasip2");
    let (a, b) = domains();
    // a.example: a multi-prime RSA key; b.example: HPKE (X25519).
    let (a_key, a_pub) = key_pair(&dir, "a", "rsa-multiprime");
    let (b_key, b_pub) = key_pair(&dir, "b", "hpke");
    let pa = proxy(&dir, &a, &b, Some(&a_key), false, "stateful");
    let pb = proxy(&dir, &b, &a, Some(&b_key), false, "stateful");
    let alice = [
        "--privacy",
        "2",
        "--home-key",
        p(&a_pub),
        "--callee-key",
        p(&b_pub),
    ];
    let bob = ["--privacy", "1", "--home-key", p(&b_pub)];
    let seen = call_across(&dir, (&a, &b), &alice, &bob);
    assert_call_crossed(&seen);
    // What crossed names pseudonyms (hex, version 1) and "Anonymous".
    let invite = seen
        .iter()
        .map(|d| String::from_utf8_lossy(d).into_owned())
        .find(|d| d.contains("INVITE sip:"))
        .expect("the INVITE crossed");
    assert!(invite.contains("INVITE sip:01"), "{invite}");
    assert!(invite.contains("\"Anonymous\" <sip:01"), "{invite}");
    // Stateful: the pseudonyms seen again (the INVITE sent with
    // credentials, To beside the Request-URI) come from the cache.
    let (ca, cb) = (privacy_counters(&pa), privacy_counters(&pb));
    eprintln!("stateful counters: a.example {ca}, b.example {cb}");
    assert_eq!(ca["stateful"], true);
    assert!(ca["cache_hits_total"].as_u64() > Some(0), "{ca}");
    assert_eq!(
        (ca["refused_total"].as_u64(), cb["refused_total"].as_u64()),
        (Some(0), Some(0))
    );
    for d in &seen {
        for name in ["alice", "bob"] {
            assert!(
                !names(d, name),
                "{name} crossed in clear:\n{}",
                String::from_utf8_lossy(d)
            );
        }
    }
}

/// The From user of the INVITE that crossed between the proxies.
fn from_user(packets: &[Vec<u8>]) -> String {
    // A capture record holds the IP and UDP headers before the SIP.
    let invite = packets
        .iter()
        .map(|d| String::from_utf8_lossy(d).into_owned())
        .find_map(|m| m.find("INVITE sip:").map(|i| m[i..].to_owned()))
        .expect("an INVITE crossed");
    let from = invite
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("from:"))
        .expect("From");
    from.split("sip:")
        .nth(1)
        .and_then(|r| r.split('@').next())
        .expect("From user")
        .to_owned()
}

#[test]
fn privasip_3_calls_carry_single_use_tickets_opened_with_one_symmetric_operation() {
    let dir = tempdir("privasip3");
    let (a, b) = domains();
    let (a_key, a_pub) = key_pair(&dir, "a", "hpke");
    // And an ML-KEM-768 key for hybrid post-quantum enrollments.
    let (pq, pq_pub) = (dir.join("a.mlkem"), dir.join("a.mlkem.pub"));
    keygen(&["mlkem", "-o", p(&pq)]);
    keygen(&["public", "--key", p(&pq), "-o", p(&pq_pub)]);
    let extra = format!("tickets = 8\npq_key = \"{}\"\n", p(&pq));
    let pa = proxy_with(&dir, &a, &b, Some(&a_key), false, "stateless", &extra);
    let _pb = proxy(&dir, &b, &a, None, false, "stateful");
    let alice = [
        "--register",
        "--privacy",
        "1",
        "--home-key",
        p(&a_pub),
        "--base32",
        "--tickets",
    ];
    let first = call_across(&dir, (&a, &b), &alice, &[]);
    assert_call_crossed(&first);
    // The second enrolls with the post-quantum half too.
    let hybrid = [&alice[..], &["--home-pq-key", p(&pq_pub)]].concat();
    let second = call_across(&dir, (&a, &b), &hybrid, &[]);
    for d in first.iter().chain(&second) {
        assert!(!names(d, "alice"), "alice crossed in clear");
    }
    // Two calls, two tickets: nothing in common past the 3-byte header.
    assert_unlinkable(&from_user(&first), &from_user(&second), 6);
    // Each registration enrolled (one HPKE open) and got 8 tickets; each
    // call's identity opened with a ticket (one AES-GCM-SIV open each:
    // INVITE and its authenticated resend, BYE).
    let c = privacy_counters(&pa);
    assert_eq!(c["enrollments_total"], 2, "{c}");
    assert_eq!(c["enrollments_pq_total"], 1, "{c}");
    assert_eq!(c["tickets_issued_total"], 16, "{c}");
    assert!(c["tickets_opened_total"].as_u64() >= Some(2), "{c}");
    assert_eq!(c["refused_total"], 0, "{c}");
    // Single-use by Call-ID: the INVITE, its resend with credentials and
    // the BYE share one, so nothing was taken for a replay.
    assert_eq!(c["tickets_replayed_total"], 0, "{c}");
    // The ticket key survived in the data directory (0600).
    let key = dir.join("a.example.data/privasip3-tickets.key");
    let mode = std::fs::metadata(&key).expect("ticket key").permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
}

/// Two pseudonyms (base32) of PrivaSIP scheme `scheme` that share
/// nothing past their 3-byte header but what chance gives (random bytes
/// agree one time in 256: well under 12 of them).
fn assert_unlinkable(a: &str, b: &str, scheme: u8) {
    assert_ne!(a, b);
    let (ra, rb) = (
        privacy::Encoding::decode_any(a).expect("base32"),
        privacy::Encoding::decode_any(b).expect("base32"),
    );
    assert_eq!((ra[1], rb[1]), (scheme, scheme), "scheme {scheme}: {a} {b}");
    let same = ra[3..].iter().zip(&rb[3..]).filter(|(x, y)| x == y).count();
    assert!(same < 12, "{same} bytes in common");
}

/// The user of the Request-URI of the INVITE that crossed.
fn request_user(packets: &[Vec<u8>]) -> String {
    packets
        .iter()
        .map(|d| String::from_utf8_lossy(d).into_owned())
        .find_map(|m| {
            let i = m.find("INVITE sip:")? + "INVITE sip:".len();
            Some(m[i..].split('@').next()?.to_owned())
        })
        .expect("an INVITE crossed")
}

/// PrivaSIP-3 at level 2: the caller enrolls anonymously with the
/// callee's domain (an OPTIONS through its home proxy) and seals the
/// callee's ID under a fresh domain ticket per call; the callee's proxy
/// opens it with two symmetric decryptions.
#[test]
fn privasip_3_level_2_seals_the_callee_under_the_callee_domains_tickets() {
    let dir = tempdir("privasip3-callee");
    let (a, b) = domains();
    let (a_key, a_pub) = key_pair(&dir, "a", "hpke");
    let (b_key, b_pub) = key_pair(&dir, "b", "hpke");
    let pa = proxy_with(
        &dir,
        &a,
        &b,
        Some(&a_key),
        false,
        "stateless",
        "tickets = 8\n",
    );
    let pb = proxy_with(
        &dir,
        &b,
        &a,
        Some(&b_key),
        false,
        "stateless",
        "tickets = 8\n",
    );
    let alice = [
        "--register",
        "--privacy",
        "2",
        "--home-key",
        p(&a_pub),
        "--callee-key",
        p(&b_pub),
        "--base32",
        "--tickets",
    ];
    let bob = ["--privacy", "1", "--home-key", p(&b_pub), "--base32"];
    let first = call_across(&dir, (&a, &b), &alice, &bob);
    assert_call_crossed(&first);
    let second = call_across(&dir, (&a, &b), &alice, &bob);
    for d in first.iter().chain(&second) {
        for name in ["alice", "bob"] {
            assert!(
                !names(d, name),
                "{name} crossed in clear:\n{}",
                String::from_utf8_lossy(d)
            );
        }
    }
    // Two calls to bob: two callee pseudonyms sharing only the header.
    assert_unlinkable(&request_user(&first), &request_user(&second), 7);
    // Each alice (one per call here) enrolled with b.example once and got
    // 8 domain tickets; b opened a callee pseudonym per call, none
    // refused or replayed; a opened none of them.
    let cb = privacy_counters(&pb);
    assert_eq!(cb["domain_enrollments_total"], 2, "{cb}");
    assert_eq!(cb["domain_tickets_issued_total"], 16, "{cb}");
    assert!(cb["callee_opened_total"].as_u64() >= Some(2), "{cb}");
    assert_eq!(cb["refused_total"], 0, "{cb}");
    assert_eq!(cb["tickets_replayed_total"], 0, "{cb}");
    let ca = privacy_counters(&pa);
    assert_eq!(ca["callee_opened_total"], 0, "{ca}");
    assert_eq!(ca["refused_total"], 0, "{ca}");
    // The same enrollment sent straight over UDP from an address that is
    // no peer proxy (it could be a spoofed victim): answered, without the
    // 30-times-larger batch of tickets.
    let pem = std::fs::read(&b_pub).expect("b's public key");
    let cipher = privacy::keys::cipher_from_pem(&pem, 1).expect("b's cipher");
    let (_, enroll) = privacy::tickets::Enrollment::new(cipher.as_ref(), None).expect("seal");
    let sock = UdpSocket::bind("127.0.0.1:0").expect("udp");
    sock.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");
    let me = sock.local_addr().expect("addr");
    let options = format!(
        "OPTIONS sip:b.example SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bKspoof\r\nMax-Forwards: 70\r\nFrom: <sip:x@{me}>;tag=1\r\nTo: <sip:b.example>\r\nCall-ID: enroll-direct\r\nCSeq: 1 OPTIONS\r\nPrivasip-Enroll: {enroll}\r\nContent-Length: 0\r\n\r\n"
    );
    sock.send_to(options.as_bytes(), b.addr()).expect("send");
    let mut buf = [0u8; 65_536];
    let n = sock.recv(&mut buf).expect("an answer");
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("SIP/2.0 200"), "{answer}");
    assert!(!answer.contains("Privasip-Tickets"), "{answer}");
    assert_eq!(privacy_counters(&pb)["domain_enrollments_total"], 2);
}

#[test]
fn the_capture_sees_names_when_privacy_is_off() {
    let dir = tempdir("privasip-off");
    let (a, b) = domains();
    let _pa = proxy(&dir, &a, &b, None, false, "stateful");
    let _pb = proxy(&dir, &b, &a, None, false, "stateful");
    let seen = call_across(&dir, (&a, &b), &[], &[]);
    assert_call_crossed(&seen);
    // Alice's proxy consumed her credentials: they do not travel on.
    assert!(seen.iter().all(|d| !contains(d, "proxy-authorization")));
    for name in ["alice", "bob"] {
        assert!(
            seen.iter().any(|d| names(d, name)),
            "{name} is visible without privacy"
        );
    }
}

#[test]
fn privasip_1_with_aes_and_ecies_stateless() {
    let dir = tempdir("privasip1");
    let (a, b) = domains();
    // a.example opens AES pseudonyms (keys from the users' HA1);
    // b.example holds an ECIES P-256 key.
    let (b_key, b_pub) = key_pair(&dir, "b", "ecies");
    let pa = proxy(&dir, &a, &b, None, true, "stateless");
    let pb = proxy(&dir, &b, &a, Some(&b_key), false, "stateless");
    let alice = [
        "--privacy",
        "1",
        "--home-aes",
        "gcm",
        "--realm",
        "a.example",
    ];
    let bob = ["--privacy", "1", "--home-key", p(&b_pub), "--base32"];
    let seen = call_across(&dir, (&a, &b), &alice, &bob);
    assert_call_crossed(&seen);
    // PrivaSIP-1 hides the caller; the callee's ID is in clear by design.
    assert!(seen.iter().all(|d| !names(d, "alice")));
    assert!(seen.iter().any(|d| names(d, "bob")));
    // Stateless: every pseudonym is decrypted where it is needed.
    let (ca, cb) = (privacy_counters(&pa), privacy_counters(&pb));
    eprintln!("stateless counters: a.example {ca}, b.example {cb}");
    assert_eq!(ca["stateful"], false);
    for c in [&ca, &cb] {
        assert_eq!(c["cache_hits_total"], 0, "{c}");
        assert!(c["decryptions_total"].as_u64() > Some(0), "{c}");
    }
}

#[test]
fn wrong_keys_get_one_uniform_refusal() {
    let dir = tempdir("privasip-refused");
    let (a, b) = domains();
    let (a_key, _) = key_pair(&dir, "a", "ecies");
    // A key the proxy does not hold, and a key id it does not publish.
    let (_, stranger_pub) = key_pair(&dir, "stranger", "ecies");
    let (_, a_pub) = (a_key.clone(), dir.join("a.pub.pem"));
    let _pa = proxy(&dir, &a, &b, Some(&a_key), false, "stateful");
    let a_addr = a.addr();
    let register = |key: &[&str]| {
        let mut args = vec![
            "register",
            "--user",
            "alice",
            "--domain",
            "a.example",
            "--server",
            &a_addr,
            "--bind",
            "127.0.0.1:0",
            "--privacy",
            "1",
        ];
        args.extend(key);
        phone("pw-alice", &args).output().expect("phone runs")
    };
    let mut answers = Vec::new();
    for key in [
        vec!["--home-key", p(&stranger_pub)],
        vec!["--home-key", p(&a_pub), "--home-key-id", "9"],
    ] {
        let out = register(&key);
        let t = text(&out);
        assert!(!out.status.success(), "{t}");
        answers.push(t.lines().last().unwrap_or("").to_string());
    }
    assert!(answers[0].contains("403 Forbidden"), "{answers:?}");
    assert_eq!(answers[0], answers[1], "the same answer for both");
    // The right key registers.
    let out = register(&["--home-key", p(&a_pub)]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn the_invite_preparation_experiment_runs_every_configuration() {
    let dir = tempdir("privacy-prepare");
    let (json, html) = (dir.join("prepare.json"), dir.join("prepare.html"));
    let out = Command::new(BIN)
        .args(["bench", "privacy-prepare", "--quick", "--bits", "1024"])
        .args(["--json", p(&json), "--html", p(&html)])
        .args(["--plots", p(&dir.join("plots"))])
        .output()
        .expect("sipsec bench runs");
    assert!(out.status.success(), "{}", text(&out));
    let page = std::fs::read_to_string(&html).expect("html");
    assert_eq!(common::assert_plots_readable(&page), 1);
    common::assert_page_provenance(&page);
    assert!(dir
        .join("plots/privacy-prepare-invite-preparation-mean-ms.svg")
        .is_file());
    let rows: serde_json::Value = common::report_json(&json);
    let rows = rows.as_array().expect("rows");
    // Plain, PrivaSIP-1 × (3 RSA variants, ECIES, AES, HPKE), PrivaSIP-2 × (3 RSA, ECIES, HPKE).
    assert_eq!(rows.len(), 12, "{rows:?}");
    let plain = rows[0]["invite_bytes"].as_u64().expect("bytes");
    for r in rows {
        assert_eq!(r["n"], 20);
        let (mean, min, max) = (
            r["mean_ms"].as_f64().expect("mean"),
            r["min_ms"].as_f64().expect("min"),
            r["max_ms"].as_f64().expect("max"),
        );
        assert!(min > 0.0 && min <= mean && mean <= max, "{r}");
        if r["config"] != "plain SIP" {
            // The pseudonyms make every PrivaSIP INVITE longer.
            assert!(r["invite_bytes"].as_u64().expect("bytes") > plain, "{r}");
        }
    }
    assert!(text(&out).contains("published mean ms (Table 1)"));
}

#[test]
fn the_server_experiment_routes_calls_through_both_proxies_and_counts_decryptions() {
    let dir = tempdir("privacy-route");
    let (json, html) = (dir.join("route.json"), dir.join("route.html"));
    let out = Command::new(BIN)
        .args(["bench", "privacy-route", "--quick"])
        .args(["--json", p(&json), "--html", p(&html)])
        .output()
        .expect("sipsec bench runs");
    assert!(out.status.success(), "{}", text(&out));
    // The callee is at the other domain's proxy, its registrar: each call
    // reaches it through the home proxy's route, with no wait for it first.
    assert!(!text(&out).contains("not reachable"), "{}", text(&out));
    let rows: serde_json::Value = common::report_json(&json);
    let rows = rows.as_array().expect("rows");
    // 6 configurations × 2 numbers of calls in flight.
    assert_eq!(rows.len(), 12, "{rows:?}");
    for r in rows {
        let config = r["config"].as_str().expect("config");
        assert_eq!(r["ok"], 200, "{r}");
        assert_eq!(r["failures"], serde_json::json!({}), "{r}");
        let mean = r["mean_ms"].as_f64().expect("mean");
        assert!(
            mean > 0.0 && mean <= r["p99_ms"].as_f64().expect("p99") * 1.5,
            "{r}"
        );
        // What each proxy had to open per call: plain nothing; PrivaSIP-1
        // stateless the username and From at a.example (the same
        // pseudonym, decrypted twice); PrivaSIP-2 stateful the username at
        // a.example (From then comes from the cache) and the Request-URI
        // at b.example.
        let (decryptions, hits) = match config {
            "plain SIP" => (0.0, 0.0),
            c if c.starts_with("PrivaSIP-1 AES-128-GCM stateless") => (2.0, 0.0),
            c if c.starts_with("PrivaSIP-2") && c.ends_with("stateful") => (2.0, 1.0),
            // PrivaSIP-3: the ticket in the username and in From, each
            // one AES-256-GCM-SIV open at a.example.
            c if c.starts_with("PrivaSIP-3 tickets AES-256-GCM-SIV stateless") => (2.0, 0.0),
            // And at level 2 the callee pseudonym in the Request-URI: a
            // domain ticket and the ID under its key at b.example.
            c if c.starts_with("PrivaSIP-3 tickets AES-256-GCM-SIV, callee too, stateless") => {
                (3.0, 0.0)
            }
            other => panic!("unexpected configuration {other}"),
        };
        let got = (
            r["decryptions_per_call"].as_f64().expect("decryptions"),
            r["cache_hits_per_call"].as_f64().expect("hits"),
        );
        if r["retransmissions"] == 0 {
            assert_eq!(got, (decryptions, hits), "{r}");
        } else {
            // A retransmitted INVITE may be opened again.
            assert!(got.0 >= decryptions && got.0 < decryptions + 1.0, "{r}");
        }
    }
    let page = std::fs::read_to_string(&html).expect("html");
    assert!(page.contains("<svg") && page.contains("PrivaSIP-2 stateful"));
    common::assert_plots_readable(&page);
    common::assert_page_provenance(&page);
    assert!(text(&out).contains("Throughput sustained"));
}

#[test]
fn bad_privacy_settings_are_named_at_start() {
    let dir = tempdir("privacy-bad-config");
    let garbage = dir.join("garbage.pem");
    std::fs::write(&garbage, "hello\n").expect("write");
    let ed = dir.join("ed.pem");
    keygen(&["ec", "--curve", "ed25519", "-o", p(&ed)]);
    for (key, want) in [
        (dir.join("missing.pem"), "missing.pem: No such file"),
        (garbage, "no readable private key"),
        (ed, "Ed25519 key decrypts nothing here"),
    ] {
        let config = dir.join("sipsec.toml");
        std::fs::write(
            &config,
            format!(
                "mode = \"proxy\"\nudp = \"127.0.0.1:0\"\nhttp = \"off\"\ndata_dir = \"{}\"\n[privacy]\nkeys = [{{ id = 1, key = \"{}\" }}]\n",
                p(&dir.join("data")),
                p(&key)
            ),
        )
        .expect("config");
        let out = Command::new(BIN)
            .args(["serve", "--config", p(&config)])
            .output()
            .expect("sipsec serve runs");
        let t = text(&out);
        assert!(!out.status.success() && t.contains(want), "{want}: {t}");
    }
    // A phone asking for PrivaSIP-2 without the callee's key is told so.
    let out = phone(
        "pw",
        &[
            "register",
            "--user",
            "a",
            "--privacy",
            "2",
            "--home-aes",
            "gcm",
        ],
    )
    .output()
    .expect("phone runs");
    assert!(text(&out).contains("--callee-key"), "{}", text(&out));
}
