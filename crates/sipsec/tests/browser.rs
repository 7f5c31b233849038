//! Browser phones: the page in `web/phone` (JsSIP, bundled by setup.sh)
//! runs in Debian's headless Chromium with fake media devices, registers
//! over secure WebSocket (RFC 7118) with digest and calls through `sipsec
//! serve`. The test serves the page, collects what each phone reports
//! (its RTCPeerConnection statistics among them), and bounds every wait.

mod common;
#[path = "../../server/tests/support/rtpengine.rs"]
mod rtpengine;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::{import_users, serve, tempdir, tls_files, Running};

/// What the phones posted, one JSON object each.
#[derive(Default)]
struct Reports {
    seen: Mutex<Vec<serde_json::Value>>,
    more: Condvar,
}

impl Reports {
    /// Waits (at most `bound`) for a report from `user` of `event`.
    fn wait(&self, user: &str, event: &str, bound: Duration) -> serde_json::Value {
        self.wait_for(user, event, bound, |_| true)
    }

    /// Waits (at most `bound`) for a report from `user` of `event` that
    /// `matches`.
    fn wait_for(
        &self,
        user: &str,
        event: &str,
        bound: Duration,
        matches: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let until = Instant::now() + bound;
        let mut seen = self.seen.lock().expect("reports");
        loop {
            if let Some(r) = seen
                .iter()
                .find(|r| r["user"] == user && r["event"] == event && matches(r))
            {
                return r.clone();
            }
            let left = until.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no {event:?} from {user} within {bound:?}; reports: {seen:#?}"
            );
            seen = self.more.wait_timeout(seen, left).expect("reports").0;
        }
    }

    fn all(&self) -> Vec<serde_json::Value> {
        self.seen.lock().expect("reports").clone()
    }
}

/// Serves `root` over HTTP on loopback (GET) and takes reports (POST
/// /report), one connection at a time on its own thread.
fn web_server(root: PathBuf, reports: Arc<Reports>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("web listener");
    let addr = l.local_addr().expect("bound");
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let (root, reports) = (root.clone(), reports.clone());
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = answer_http(s, &root, &reports);
            });
        }
    });
    addr
}

fn answer_http(s: TcpStream, root: &Path, reports: &Reports) -> std::io::Result<()> {
    let mut r = BufReader::new(s.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut len = 0;
    loop {
        let mut h = String::new();
        r.read_line(&mut h)?;
        if h.trim().is_empty() {
            break;
        }
        if let Some((n, v)) = h.split_once(':') {
            if n.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
    let path = path.split('?').next().unwrap_or("/");
    let mut s = s;
    if method == "POST" && path == "/report" {
        let mut body = vec![0; len.min(1 << 16)];
        r.read_exact(&mut body)?;
        if let Ok(v) = serde_json::from_slice(&body) {
            reports.seen.lock().expect("reports").push(v);
            reports.more.notify_all();
        }
        return s.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
    }
    let file = root.join(path.trim_start_matches('/'));
    let kind = match file.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html",
        Some("js") => "text/javascript",
        _ => "application/octet-stream",
    };
    match std::fs::read(&file) {
        Ok(body) if !path.contains("..") => {
            write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )?;
            s.write_all(&body)
        }
        _ => {
            s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        }
    }
}

/// A headless Chromium on one page, killed (with its whole process
/// group) when dropped.
struct Browser(Child);

impl Browser {
    fn open(url: &str, profile: &Path, log: &Path) -> Self {
        Self::open_with(url, profile, log, &[])
    }

    /// [`Browser::open`] with more Chromium flags.
    fn open_with(url: &str, profile: &Path, log: &Path, extra: &[String]) -> Self {
        let log = std::fs::File::create(log).expect("browser log");
        // Its own temporary files go with the test's directory.
        std::fs::create_dir_all(profile).expect("profile directory");
        let child = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--use-fake-ui-for-media-stream",
                "--use-fake-device-for-media-stream",
                // The test CA is not in the browser's store.
                "--ignore-certificate-errors",
                // Both phones are on this machine: offer loopback and plain
                // host candidates (no mDNS names).
                "--allow-loopback-in-peer-connection",
                "--disable-features=WebRtcHideLocalIpsWithMdns",
                "--autoplay-policy=no-user-gesture-required",
                // Page console lines go to the log, for a failing test.
                "--enable-logging=stderr",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(extra)
            .arg(url)
            .env("TMPDIR", profile)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("chromium runs (./setup.sh installs it)");
        Self(child)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Chromium's helpers end with their browser process.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The WSS address in a `sipsec serve` banner.
fn banner_wss(banner: &str) -> SocketAddr {
    common::banner_listener(banner, "wss").unwrap_or_else(|| panic!("no wss address in {banner:?}"))
}

/// `sipsec serve` with WSS (and TLS) on ephemeral ports, the test
/// certificate in `dir` (made by `tls_files`), plus `extra` flags.
fn wss_server(dir: &Path, extra: &[&str]) -> (Running, SocketAddr) {
    let f = |n: &str| dir.join(n).to_str().expect("utf-8").to_owned();
    let (cert, key, data) = (f("srv.pem"), f("srv.key"), f("data"));
    let mut args = vec![
        "--udp",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--cert",
        &cert,
        "--key",
        &key,
        "--tls",
        "127.0.0.1:0",
        "--wss",
        "127.0.0.1:0",
        "--data-dir",
        &data,
    ];
    args.extend_from_slice(extra);
    let server = serve(&args);
    let wss = banner_wss(&server.banner);
    (server, wss)
}

struct Setup {
    server: Running,
    wss: SocketAddr,
    web: SocketAddr,
    reports: Arc<Reports>,
    /// Last, so it is removed after the server stopped.
    dir: common::Scratch,
}

fn setup(name: &str) -> Setup {
    setup_with(name, None)
}

/// [`setup`] with a configuration file holding `config` (TOML).
fn setup_with(name: &str, config: Option<&str>) -> Setup {
    let dir = tempdir(name);
    tls_files(&dir);
    let users = dir.join("users.tsv");
    import_users("alice,pw-alice\nbob,pw-bob\ncarol,pw-carol\n", &dir, &users);
    let f = |n: &str| dir.join(n).to_str().expect("utf-8").to_owned();
    let file = f("sipsec.toml");
    let mut extra = Vec::new();
    if let Some(c) = config {
        std::fs::write(&file, c).expect("config file");
        extra = vec!["--config", file.as_str()];
    }
    let (server, wss) = wss_server(
        &dir,
        &[
            &extra[..],
            &[
                "--mode",
                "proxy",
                "--stateful",
                "--auth",
                // JsSIP answers only the first challenge, and only MD5.
                "--digest",
                "md5",
                "--users",
                &f("users.tsv"),
            ],
        ]
        .concat(),
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web");
    assert!(
        root.join("phone/vendor/jssip.js").exists(),
        "web/phone/vendor/jssip.js is missing: ./setup.sh bundles JsSIP"
    );
    let reports = Arc::new(Reports::default());
    let web = web_server(root, reports.clone());
    Setup {
        server,
        wss,
        web,
        reports,
        dir,
    }
}

impl Setup {
    fn phone(&self, user: &str, query: &str) -> Browser {
        self.phone_with(user, query, &[])
    }

    /// [`Setup::phone`] with more Chromium flags.
    fn phone_with(&self, user: &str, query: &str, extra: &[String]) -> Browser {
        let url = format!(
            "http://{}/phone/index.html?server=wss://{}&user={user}&password=pw-{user}&report=/report&{query}",
            self.web, self.wss
        );
        let profile = self.dir.join(format!("profile-{user}"));
        Browser::open_with(&url, &profile, &self.dir.join(format!("{user}.log")), extra)
    }
}

const BOUND: Duration = Duration::from_secs(60);

#[test]
fn two_browser_phones_register_over_wss_and_call_with_media_between_them() {
    let s = setup("browser-call");
    let _bob = s.phone("bob", "auto=answer&talk=1500");
    s.reports.wait("bob", "registered", BOUND);
    let _alice = s.phone("alice", "auto=call&target=bob&talk=4000");
    s.reports.wait("alice", "registered", BOUND);
    let confirmed = s.reports.wait("alice", "confirmed", BOUND);
    assert_eq!(confirmed["direction"], "outgoing");
    s.reports.wait("bob", "confirmed", BOUND);
    // Media flowed browser to browser (DTLS-SRTP), as each browser counts it.
    for user in ["alice", "bob"] {
        let media = s.reports.wait(user, "media", BOUND);
        let received = media["packetsReceived"].as_u64().unwrap_or(0);
        assert!(received > 0, "{user} received no RTP: {media}");
        assert_eq!(media["dtlsState"], "connected", "{user}: {media}");
    }
    // Alice hangs up: her BYE reaches bob through the proxy.
    let ended = s.reports.wait("bob", "ended", BOUND);
    assert_eq!(ended["originator"], "remote", "{ended}");
    s.reports.wait("alice", "ended", BOUND);
    let failures: Vec<_> = s
        .reports
        .all()
        .into_iter()
        .filter(|r| r["event"] == "failed" || r["event"] == "registrationFailed")
        .collect();
    assert!(failures.is_empty(), "{failures:?}");
    // Chromium's WSS connections used the hybrid post-quantum key
    // exchange, as the server saw it.
    let http = common::banner_http_addr(&s.server.banner).expect("http");
    let metrics = common::http_get(&http.to_string(), "/metrics");
    let pq: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("sipsec_tls_handshakes_total{group=\"X25519MLKEM768\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(pq >= 2, "{metrics}");
    assert!(
        metrics.contains("sipsec_tls_handshakes_total{group=\"x25519\"} 0\n"),
        "{metrics}"
    );
}

/// carol: `sipsec phone answer` registered over UDP with `server`, plus
/// `extra` flags; what `common::answering` gives.
fn carol_answers(
    server: &str,
    extra: &[&str],
) -> (std::process::Child, String, std::thread::JoinHandle<String>) {
    let mut args = vec![
        "answer",
        "--user",
        "carol",
        "--server",
        server,
        "--register",
        "--bind",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    common::answering("pw-carol", &args)
}

/// Waits (at most [`BOUND`]) for `phone` to end its call and exit.
fn wait_for_exit(phone: &mut std::process::Child) {
    let until = Instant::now() + BOUND;
    while phone.try_wait().expect("phone").is_none() {
        assert!(Instant::now() < until, "the phone never saw the call end");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_browser_phone_calls_a_udp_phone_across_the_websocket_bridge() {
    let s = setup("browser-bridge");
    let srv = s.server.addr.to_string();
    // carol is `sipsec phone`, registered over UDP.
    let (carol, _, carol_err) = carol_answers(&srv, &["--packets", "50"]);
    // carol registered under the server's address as her domain.
    let _alice = s.phone("alice", &format!("auto=call&target=carol@{srv}&talk=1000"));
    s.reports.wait("alice", "registered", BOUND);
    // The INVITE crossed WSS -> UDP and carol's 200 came back UDP -> WSS;
    // the browser cannot use plain RTP/AVP, so it acknowledges and hangs
    // up: the ACK and BYE cross WSS -> UDP along the double Record-Route.
    let failed = s.reports.wait("alice", "failed", BOUND);
    assert_eq!(failed["status"], 200, "{failed}");
    assert_eq!(failed["cause"], "Bad Media Description", "{failed}");
    let mut carol = carol;
    wait_for_exit(&mut carol);
    let log = carol_err.join().expect("carol's log");
    assert!(log.contains("call established"), "the ACK arrived: {log}");
    assert!(log.contains("remote hung up"), "the BYE arrived: {log}");
}

/// With rtpengine bridging (`[media] mode = "webrtc"`, `require_srtp`),
/// the browser phone (ICE, DTLS-SRTP, `UDP/TLS/RTP/SAVPF`) and `sipsec
/// phone` over UDP (SDES-SRTP, `AES_CM_128_HMAC_SHA1_80`) share a call
/// encrypted on both legs: the browser receives the phone's media over
/// DTLS-SRTP and the phone records the browser's tone.
#[test]
fn a_browser_phone_talks_to_a_udp_phone_through_rtpengine() {
    let engine = rtpengine::Rtpengine::start();
    let config = format!(
        "[media]\nmode = \"webrtc\"\nrequire_srtp = true\nrelays = [\"{}\"]\n",
        engine.ng
    );
    let s = setup_with("browser-relay", Some(&config));
    let srv = s.server.addr.to_string();
    // The browser's microphone plays a 440 Hz tone from a file.
    let tone_wav = s.dir.join("tone.wav");
    let mut tone = vec![0i16; 8000 * 10];
    media::tone::Tone::new(440.0, 8000, 8000.0).fill(&mut tone);
    std::fs::write(&tone_wav, media::wav::encode(&tone)).expect("tone file");
    let recording = s.dir.join("carol.wav");
    let (carol, _, carol_err) = carol_answers(
        &srv,
        &[
            "--srtp",
            "AES_CM_128_HMAC_SHA1_80",
            "--insecure-sdes",
            "--tone",
            "1000",
            "--packets",
            "400",
            "--record",
            recording.to_str().expect("utf-8"),
        ],
    );
    let fake_audio = format!("--use-file-for-fake-audio-capture={}", tone_wav.display());
    let _alice = s.phone_with(
        "alice",
        &format!("auto=call&target=carol@{srv}&talk=4000"),
        &[fake_audio],
    );
    s.reports.wait("alice", "registered", BOUND);
    s.reports.wait("alice", "confirmed", BOUND);
    let media = s.reports.wait("alice", "media", BOUND);
    assert!(
        media["packetsReceived"].as_u64().unwrap_or(0) > 50,
        "the browser received the phone's RTP through the relay: {media}"
    );
    // (Headless Chromium here has no audio output, so it decodes nothing
    // for playout and reports no audio level: its packets, decrypted over
    // DTLS-SRTP, are what it shows.)
    assert_eq!(media["dtlsState"], "connected", "{media}");
    s.reports.wait("alice", "ended", BOUND);
    let mut carol = carol;
    wait_for_exit(&mut carol);
    let log = carol_err.join().expect("carol's log");
    assert!(log.contains("remote hung up"), "{log}");
    let mut report = String::new();
    if let Some(mut out) = carol.stdout.take() {
        out.read_to_string(&mut report).expect("carol's report");
    }
    assert!(report.contains("srtp AES_CM_128_HMAC_SHA1_80"), "{report}");
    let heard = media::wav::read(&recording).expect("carol's recording");
    let f = media::tone::dominant_frequency(&heard, 8000, 200.0, 2000.0, 10.0);
    assert!(
        f.is_some_and(|f| (f - 440.0).abs() <= 20.0),
        "carol heard the browser's 440 Hz tone, not {f:?}: {log}"
    );
}

#[test]
fn a_page_from_an_origin_not_allowed_is_refused() {
    let dir = tempdir("browser-origin");
    tls_files(&dir);
    let (server, wss) = wss_server(&dir, &["--ws-origins", "https://phone.example"]);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web");
    let reports = Arc::new(Reports::default());
    let web = web_server(root, reports.clone());
    let url = format!(
        "http://{web}/phone/index.html?server=wss://{wss}&user=alice&password=x&report=/report&auto=answer"
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let mut server = server;
    let err = server.child.stderr.take().expect("piped stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let _b = Browser::open(&url, &dir.join("profile"), &dir.join("alice.log"));
    // The page's WebSocket is refused at the upgrade: the server says so,
    // and the phone never registers.
    let until = Instant::now() + BOUND;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no refusal logged within {BOUND:?}"));
        if line.contains("WebSocket upgrade refused: this Origin is not allowed") {
            break;
        }
    }
    assert!(
        !reports.all().iter().any(|r| r["event"] == "registered"),
        "{:?}",
        reports.all()
    );
}

/// A person's call on the page, driven through its buttons: bob presses
/// Register, then Answer when the call rings, mutes, sends a DTMF digit
/// and hangs up; the page shows each state. Before, the page had no
/// Answer button at all (only an undocumented URL parameter answered).
#[test]
fn a_person_answers_mutes_sends_dtmf_and_hangs_up_with_the_buttons() {
    let s = setup("browser-buttons");
    let _bob = s.phone("bob", "click=register,answer,mute,dtmf-5,hangup");
    s.reports.wait("bob", "registered", BOUND);
    // Alice calls and stays until bob hangs up.
    let _alice = s.phone("alice", "auto=call&target=bob&talk=30000");
    let incoming = s.reports.wait("bob", "incoming", BOUND);
    assert!(
        incoming["from"]
            .as_str()
            .is_some_and(|f| f.contains("alice")),
        "{incoming}"
    );
    s.reports.wait("bob", "confirmed", BOUND);
    s.reports.wait("alice", "confirmed", BOUND);
    let muted = s.reports.wait("bob", "muted", BOUND);
    assert_eq!(muted["muted"], true, "{muted}");
    let dtmf = s.reports.wait("bob", "dtmf", BOUND);
    assert_eq!(dtmf["tone"], "5", "{dtmf}");
    let ended = s.reports.wait("bob", "ended", BOUND);
    assert_eq!(ended["originator"], "local", "bob hung up: {ended}");
    let ended = s.reports.wait("alice", "ended", BOUND);
    assert_eq!(ended["originator"], "remote", "{ended}");
    // What the page showed, in order (the last state is posted after the
    // end itself).
    s.reports.wait_for("bob", "state", BOUND, |r| {
        r["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Call ended"))
    });
    let states: Vec<String> = s
        .reports
        .all()
        .into_iter()
        .filter(|r| r["user"] == "bob" && r["event"] == "state")
        .filter_map(|r| r["text"].as_str().map(str::to_owned))
        .collect();
    let expect = [
        "Registered as bob@",
        "Incoming call from sip:alice@",
        "In a call with sip:alice@",
        "Call ended (you hung up)",
    ];
    let mut at = 0;
    for e in expect {
        let found = states[at..].iter().position(|s| s.starts_with(e));
        assert!(found.is_some(), "{e:?} not shown in order: {states:?}");
        at += found.unwrap_or(0) + 1;
    }
}

/// Declining rings off with 603 for the caller, shown on both pages.
#[test]
fn a_person_declines_with_the_decline_button() {
    let s = setup("browser-decline");
    let _bob = s.phone("bob", "click=register,decline");
    s.reports.wait("bob", "registered", BOUND);
    let _alice = s.phone("alice", "auto=call&target=bob");
    let failed = s.reports.wait("alice", "failed", BOUND);
    assert_eq!(failed["status"], 603, "{failed}");
    let state = s.reports.wait("bob", "failed", BOUND);
    assert_eq!(state["originator"], "local", "{state}");
}

/// Without the bundled JsSIP the page says so where a person looks, and
/// Register is disabled, instead of a click that silently does nothing.
#[test]
fn a_missing_jssip_is_shown_on_the_page() {
    let dir = tempdir("browser-nojssip");
    let web_root = dir.join("web");
    std::fs::create_dir_all(web_root.join("phone")).expect("dir");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web/phone");
    for f in ["index.html", "phone.js"] {
        std::fs::copy(src.join(f), web_root.join("phone").join(f)).expect("copy");
    }
    let reports = Arc::new(Reports::default());
    let web = web_server(web_root, reports.clone());
    let url = format!("http://{web}/phone/index.html?user=alice&report=/report");
    let _b = Browser::open(&url, &dir.join("profile"), &dir.join("alice.log"));
    let error = reports.wait("alice", "error", BOUND);
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("vendor/jssip.js is missing") && m.contains("./setup.sh")),
        "{error}"
    );
}
