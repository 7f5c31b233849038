//! A second real client: two baresip softphones (Debian `baresip-core`,
//! installed by setup.sh) register with the server and call each other
//! through it: digest auth (401 and 407), the INVITE through the proxy,
//! RTP between the phones, the BYE back through the proxy.

mod common;
#[path = "../../server/tests/support/rtpengine.rs"]
mod rtpengine;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::process::{Command, Output};

use common::tempdir;

/// A port free for UDP and TCP, with the next one free for TCP too
/// (baresip listens for TLS on its SIP port + 1).
fn free_sip_port() -> u16 {
    loop {
        let u = UdpSocket::bind("127.0.0.1:0").expect("udp");
        let p = u.local_addr().expect("bound").port();
        if p < 65_000
            && TcpListener::bind(("127.0.0.1", p)).is_ok()
            && TcpListener::bind(("127.0.0.1", p + 1)).is_ok()
        {
            return p;
        }
    }
}

/// Writes a baresip config directory for `user` (password `pw-USER`),
/// auto-answering, with audio from a WAV file and no sound card; `tls`
/// adds its CA file and its own certificate-and-key PEM.
fn phone(
    dir: &Path,
    user: &str,
    server: SocketAddr,
    transport: &str,
    tls: Option<(&Path, &Path)>,
) -> std::path::PathBuf {
    let d = dir.join(user);
    std::fs::create_dir_all(&d).expect("phone dir");
    let port = free_sip_port();
    let tls_lines = tls
        .map(|(ca, cert)| {
            format!(
                "sip_cafile {}\nsip_certificate {}\n",
                ca.display(),
                cert.display()
            )
        })
        .unwrap_or_default();
    std::fs::write(
        d.join("config"),
        format!(
            "poll_method epoll\n\
             {tls_lines}\
             sip_listen 127.0.0.1:{port}\n\
             net_interface 127.0.0.1\n\
             call_local_timeout 20\n\
             audio_player aubridge,play-{user}\n\
             audio_source aufile,/usr/share/baresip/callwaiting.wav\n\
             audio_alert aubridge,alert-{user}\n\
             module_path /usr/lib/baresip/modules\n\
             module g711.so\n\
             module aufile.so\n\
             module aubridge.so\n\
             module_tmp account.so\n\
             module_app menu.so\n"
        ),
    )
    .expect("config");
    std::fs::write(
        d.join("accounts"),
        format!(
            "<sip:{user}@{server};transport={transport}>;auth_pass=pw-{user};answermode=auto;regint=600;audio_codecs=pcmu\n"
        ),
    )
    .expect("accounts");
    d
}

fn baresip(config: &Path, seconds: u32, commands: &[&str]) -> std::process::Child {
    let mut c = Command::new("baresip");
    c.arg("-f").arg(config).args(["-t", &seconds.to_string()]);
    for cmd in commands {
        c.args(["-e", cmd]);
    }
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run baresip ({e}): run ./setup.sh"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn metrics(http: SocketAddr) -> String {
    let mut s = TcpStream::connect(http).expect("http");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .expect("request");
    let mut body = String::new();
    s.read_to_string(&mut body).expect("response");
    body
}

fn keygen(args: &[&str]) {
    let out = Command::new(common::BIN)
        .arg("keygen")
        .args(args)
        .output()
        .expect("sipsec keygen");
    assert!(out.status.success(), "{}", text(&out));
}

/// A CA, the server's certificate (a *standard*-variant RSA key) and a
/// certificate-and-key PEM per phone, all for 127.0.0.1.
struct Pki {
    ca: std::path::PathBuf,
    server_cert: std::path::PathBuf,
    server_key: std::path::PathBuf,
}

fn pki(dir: &Path) -> Pki {
    let f = |n: &str| dir.join(n);
    let p = |n: &str| f(n).to_str().expect("utf-8").to_owned();
    keygen(&["ec", "-o", &p("ca.key")]);
    keygen(&[
        "cert",
        "--key",
        &p("ca.key"),
        "--cn",
        "test CA",
        "--ca",
        "-o",
        &p("ca.pem"),
    ]);
    let issue = |key: &str, cert: &str| {
        keygen(&[
            "cert",
            "--key",
            &p(key),
            "--cn",
            "127.0.0.1",
            "--san",
            "127.0.0.1",
            "--issuer-cert",
            &p("ca.pem"),
            "--issuer-key",
            &p("ca.key"),
            "-o",
            &p(cert),
        ]);
    };
    keygen(&[
        "rsa",
        "--variant",
        "standard",
        "--bits",
        "2048",
        "-o",
        &p("server.key"),
    ]);
    issue("server.key", "server.pem");
    for phone in ["alice", "bob"] {
        let (key, cert) = (format!("{phone}.key"), format!("{phone}.crt"));
        keygen(&["rsa", "--bits", "2048", "-o", &p(&key)]);
        issue(&key, &cert);
        // libre reads the certificate and its key from one file.
        let both = [
            std::fs::read(f(&cert)).expect("cert"),
            std::fs::read(f(&key)).expect("key"),
        ]
        .concat();
        std::fs::write(f(&format!("{phone}.pem")), both).expect("pem");
    }
    Pki {
        ca: f("ca.pem"),
        server_cert: f("server.pem"),
        server_key: f("server.key"),
    }
}

fn call(stateful: bool, transport: &str) {
    let dir = tempdir(&format!("baresip-{stateful}-{transport}"));
    common::import_users("alice,pw-alice\nbob,pw-bob\n", &dir, &dir.join("users.tsv"));
    let data = dir.join("data");
    let users = dir.join("users.tsv");
    let pki = (transport == "tls").then(|| pki(&dir));
    let tls_args: Vec<String> = match &pki {
        Some(k) => [
            "--tls",
            "127.0.0.1:0",
            "--cert",
            k.server_cert.to_str().expect("utf-8"),
            "--key",
            k.server_key.to_str().expect("utf-8"),
            "--peer-ca",
            k.ca.to_str().expect("utf-8"),
        ]
        .map(str::to_owned)
        .to_vec(),
        None => Vec::new(),
    };
    let mut args = vec![
        "--udp",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--mode",
        "proxy",
        "--auth",
        // libre 1.0 (baresip's SIP stack) fails on any challenge whose
        // algorithm it does not know, even when an MD5 one is also offered.
        "--digest",
        "md5",
        "--users",
        users.to_str().expect("utf-8"),
        "--data-dir",
        data.to_str().expect("utf-8"),
    ];
    if stateful {
        args.push("--stateful");
    } else {
        args.push("--record-route");
    }
    args.extend(tls_args.iter().map(String::as_str));
    let server = common::serve(&args);
    // Phones reach the server on the transport's address.
    let target = match &pki {
        Some(_) => common::banner_tls_addr(&server.banner).expect("tls address"),
        None => server.addr,
    };
    let phone_tls = |who: &str| {
        pki.as_ref()
            .map(|k| (k.ca.clone(), dir.join(format!("{who}.pem"))))
    };
    let http = common::banner_http_addr(&server.banner).expect("http address in banner");

    let bob_tls = phone_tls("bob");
    let bob_tls = bob_tls.as_ref().map(|(a, b)| (a.as_path(), b.as_path()));
    let bob = baresip(&phone(&dir, "bob", target, transport, bob_tls), 9, &[]);
    // Bob is registered before Alice dials.
    let registered = (0..250).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        metrics(http).contains("sipsec_registrations_total 1\n")
    });
    assert!(registered, "bob never registered:\n{}", metrics(http));
    // Alice hangs up when she quits, before Bob's 5 s of audio run out.
    let alice_tls = phone_tls("alice");
    let alice_tls = alice_tls.as_ref().map(|(a, b)| (a.as_path(), b.as_path()));
    let dial = match transport {
        "tls" => format!("/dial sip:bob@{target};transport=tls"),
        _ => format!("/dial sip:bob@{target}"),
    };
    let alice = baresip(
        &phone(&dir, "alice", target, transport, alice_tls),
        4,
        &[&dial],
    )
    .wait_with_output()
    .expect("alice runs");
    let bob = bob.wait_with_output().expect("bob runs");
    let (a, b) = (text(&alice), text(&bob));
    let both = format!("--- alice\n{a}\n--- bob\n{b}");
    let registered = format!("{{0/{}/v4}} 200 OK", transport.to_uppercase());
    assert!(
        a.contains(&registered) && b.contains(&registered),
        "both registered over {transport}: {both}"
    );
    assert!(
        a.contains("Call established: sip:bob@"),
        "alice's call: {both}"
    );
    assert!(
        b.contains("Call established: sip:alice@"),
        "bob's call: {both}"
    );
    assert!(
        b.contains("incoming rtp for 'audio' established"),
        "media: {both}"
    );
    assert!(
        b.contains("Call with sip:alice@") && b.contains("terminated"),
        "bob sees the hang-up: {both}"
    );
    let m = metrics(http);
    let bye = "sipsec_requests_total{method=\"BYE\"} 1\n";
    assert!(m.contains(bye), "one BYE through the proxy:\n{m}");
    assert!(
        m.contains("sipsec_auth_failures_total 0\n"),
        "no failed authentication:\n{m}"
    );
}

#[test]
fn baresip_phones_call_through_the_stateful_proxy_over_udp() {
    call(true, "udp");
}

#[test]
fn baresip_phones_call_through_the_stateless_proxy_over_tcp() {
    call(false, "tcp");
}

#[test]
fn baresip_phones_call_through_the_stateful_proxy_over_tls() {
    call(true, "tls");
}

/// `sipsec phone` calls a baresip phone through `sipsec serve` with
/// SRTP (SDES, RTP/SAVP, baresip's `srtp-mand`): baresip plays a
/// 1000 Hz tone from a WAV file and `sipsec phone` must find it in its
/// recording; baresip must receive our SRTP.
/// `sipsec serve` as a stateful proxy with MD5 digest for alice and bob
/// (and `extra` flags): the server and its operator endpoint.
fn auth_proxy(dir: &Path, extra: &[&str]) -> (common::Running, SocketAddr) {
    common::import_users("alice,pw-alice\nbob,pw-bob\n", dir, &dir.join("users.tsv"));
    let (users, data) = (dir.join("users.tsv"), dir.join("data"));
    let mut args = vec![
        "--udp",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--mode",
        "proxy",
        "--stateful",
        "--auth",
        "--digest",
        "md5",
        "--users",
        users.to_str().expect("utf-8"),
        "--data-dir",
        data.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    let server = common::serve(&args);
    let http = common::banner_http_addr(&server.banner).expect("http address in banner");
    (server, http)
}

/// A WAV file of a 1 kHz tone in `dir`.
fn tone_1000(dir: &Path) -> std::path::PathBuf {
    let tone = dir.join("tone1000.wav");
    let mut samples = vec![0i16; 8_000 * 10];
    media::tone::Tone::new(1_000.0, 8_000, 8_000.0).fill(&mut samples);
    media::wav::write(&tone, &samples).expect("tone file");
    tone
}

/// Waits until one phone registered with the server at `http`.
fn wait_registered(http: SocketAddr) {
    let registered = (0..250).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        metrics(http).contains("sipsec_registrations_total 1\n")
    });
    assert!(registered, "bob never registered:\n{}", metrics(http));
}

/// The tone in the middle of the recording at `path`.
fn tone_heard(path: &Path) -> Option<f64> {
    let rec = media::wav::read(path).expect("recording");
    let middle = &rec[rec.len() / 4..rec.len() * 3 / 4];
    media::tone::dominant_frequency(middle, 8_000, 100.0, 3_900.0, 20.0)
}

fn sipsec_phone_calls_baresip_over_srtp(suite: &str) {
    let dir = tempdir(&format!("baresip-srtp-{suite}"));
    let (server, http) = auth_proxy(&dir, &[]);
    let tone = tone_1000(&dir);
    let bob_dir = dir.join("bob");
    std::fs::create_dir_all(&bob_dir).expect("bob dir");
    std::fs::write(
        bob_dir.join("config"),
        format!(
            "poll_method epoll\n\
             sip_listen 127.0.0.1:{}\n\
             net_interface 127.0.0.1\n\
             audio_player aubridge,play-bob\n\
             audio_source aufile,{}\n\
             audio_alert aubridge,alert-bob\n\
             module_path /usr/lib/baresip/modules\n\
             module g711.so\n\
             module aufile.so\n\
             module aubridge.so\n\
             module srtp.so\n\
             module_tmp account.so\n\
             module_app menu.so\n",
            free_sip_port(),
            tone.display()
        ),
    )
    .expect("config");
    std::fs::write(
        bob_dir.join("accounts"),
        format!(
            "<sip:bob@{};transport=udp>;auth_pass=pw-bob;answermode=auto;regint=600;audio_codecs=pcmu;mediaenc=srtp-mand\n",
            server.addr
        ),
    )
    .expect("accounts");
    let bob = baresip(&bob_dir, 12, &[]);
    wait_registered(http);
    let heard = dir.join("heard.wav");
    let s = server.addr.to_string();
    let alice = Command::new(common::BIN)
        .env("SIPSEC_PASSWORD", "pw-alice")
        .args([
            "phone",
            "call",
            &format!("sip:bob@{s}"),
            "--user",
            "alice",
            "--server",
            &s,
            "--bind",
            "127.0.0.1:0",
            "--srtp",
            suite,
            "--insecure-sdes",
            "--tone",
            "440",
            "--packets",
            "200",
            "--record",
        ])
        .arg(&heard)
        .output()
        .expect("sipsec phone runs");
    let bob = {
        let mut bob = bob;
        let _ = bob.kill();
        bob.wait_with_output().expect("bob runs")
    };
    let (a, b) = (text(&alice), text(&bob));
    let both = format!("--- sipsec phone\n{a}\n--- baresip\n{b}");
    assert!(alice.status.success(), "{both}");
    assert!(a.contains(&format!("srtp {suite}")), "{both}");
    assert!(
        b.contains(&format!("SRTP is Enabled (cryptosuite={suite})")),
        "{both}"
    );
    assert!(
        b.contains("incoming rtp for 'audio' established"),
        "baresip receives our SRTP: {both}"
    );
    assert_eq!(
        tone_heard(&heard),
        Some(1_000.0),
        "the tone baresip played: {both}"
    );
}

#[test]
fn sipsec_phone_calls_baresip_over_srtp_aes_cm_128_sha1_80() {
    sipsec_phone_calls_baresip_over_srtp("AES_CM_128_HMAC_SHA1_80");
}

#[test]
fn sipsec_phone_calls_baresip_over_srtp_aead_aes_256_gcm() {
    sipsec_phone_calls_baresip_over_srtp("AEAD_AES_256_GCM");
}

/// A STUN server of the test's that tells every asker it is at
/// 192.0.2.55 (an address nothing here can reach): a phone that believes
/// it puts that address in its SDP, as a phone behind NAT puts its
/// private one.
fn misleading_stun() -> SocketAddr {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("stun");
    let addr = sock.local_addr().expect("bound");
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let mut out = Vec::new();
            let nat = SocketAddr::from(([192, 0, 2, 55], from.port()));
            if sip_core::stun::answer(&buf[..n], nat, &mut out) {
                let _ = sock.send_to(&out, from);
            }
        }
    });
    addr
}

/// `sipsec phone` advertises an address it cannot be reached at (its SDP
/// says 192.0.2.55) and calls baresip through the proxy with `[media]
/// mode = "nat"` and a real rtpengine: the proxy sees the NAT and relays
/// the call, baresip's tone reaches the phone where its messages came
/// from, and the phone's media reaches baresip.
#[test]
fn a_phone_behind_nat_talks_to_baresip_through_rtpengine() {
    let engine = rtpengine::Rtpengine::start();
    let dir = tempdir("baresip-nat");
    let config = dir.join("media.toml");
    let media = format!("[media]\nmode = \"nat\"\nrelays = [\"{}\"]\n", engine.ng);
    std::fs::write(&config, media).expect("config");
    let path = |p: &Path| p.to_str().expect("utf-8").to_owned();
    let (server, http) = auth_proxy(&dir, &["--config", &path(&config)]);
    let tone = tone_1000(&dir);
    let bob_dir = phone(&dir, "bob", server.addr, "udp", None);
    let bob_config = std::fs::read_to_string(bob_dir.join("config")).expect("config");
    std::fs::write(
        bob_dir.join("config"),
        bob_config.replace("/usr/share/baresip/callwaiting.wav", &path(&tone)),
    )
    .expect("config");
    let bob = baresip(&bob_dir, 12, &[]);
    wait_registered(http);
    let heard = dir.join("heard.wav");
    let s = server.addr.to_string();
    let stun = misleading_stun().to_string();
    let alice = Command::new(common::BIN)
        .env("SIPSEC_PASSWORD", "pw-alice")
        .args([
            "phone",
            "call",
            &format!("sip:bob@{s}"),
            "--user",
            "alice",
            "--server",
            &s,
        ])
        .args([
            "--bind",
            "127.0.0.1:0",
            "--stun",
            &stun,
            "--tone",
            "440",
            "--packets",
            "200",
        ])
        .arg("--record")
        .arg(&heard)
        .output()
        .expect("sipsec phone runs");
    let bob = {
        let mut bob = bob;
        let _ = bob.kill();
        bob.wait_with_output().expect("bob runs")
    };
    let (a, b) = (text(&alice), text(&bob));
    let both = format!("--- sipsec phone\n{a}\n--- baresip\n{b}");
    assert!(alice.status.success(), "{both}");
    assert!(
        metrics(http).contains("sipsec_media_commands_total{command=\"offer\"} 1\n"),
        "relayed: {both}"
    );
    assert!(
        b.contains("incoming rtp for 'audio' established"),
        "baresip receives the phone's RTP through the relay: {both}"
    );
    assert_eq!(
        tone_heard(&heard),
        Some(1_000.0),
        "baresip's tone reached the phone: {both}"
    );
}
