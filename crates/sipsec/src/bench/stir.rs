//! `sipsec bench stir`: what STIR/SHAKEN costs a proxy per call, sipsec
//! beside Kamailio with its secsipid module in the same run. Each server
//! runs as a stateless proxy with one worker, three ways: forwarding only
//! (the baseline), signing every INVITE (authentication service), and
//! verifying every INVITE's Identity header (verification service, the
//! signer's certificate fetched once over HTTPS and then cached). A
//! caller sends N INVITEs, at most W at once; a callee answers each 486;
//! the caller ACKs. The server's CPU time over the N calls, divided by N,
//! is its cost per call. The repository is `secsipidx`'s HTTPS server.

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;

use super::peers::{free_udp, header_lines, median, serve, socket, wait_ready, Running};
use stir::cert::{self, Issue, TnEntry};
use stir::passport::{Dest, Orig};
use stir::{Claims, IdentityHeader, SigningKey};

const CALLER: &str = "12155551212";
const CALLEE: &str = "12155551213";

#[derive(Args)]
pub struct StirArgs {
    /// Calls per measurement.
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    calls: u32,
    /// Calls in flight at once.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    window: u32,
    /// Rounds (every server and mode once per round, interleaved); the
    /// median of the rounds is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    rounds: u32,
    /// Measure sipsec only.
    #[arg(long)]
    no_kamailio: bool,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Plain,
    Sign,
    Verify,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::Plain => "forward",
            Self::Sign => "sign",
            Self::Verify => "verify",
        }
    }
}

const MODES: [Mode; 3] = [Mode::Plain, Mode::Sign, Mode::Verify];

/// The keys and certificates of a run, in its directory.
struct Files {
    dir: PathBuf,
}

impl Files {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn p(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// An STI-CA, a provider certificate (SPC) in `www/` with its key, and a
/// TLS certificate for the repository at 127.0.0.1.
fn prepare(dir: &Path) -> Result<Files, String> {
    let f = Files {
        dir: dir.to_path_buf(),
    };
    std::fs::create_dir_all(f.path("www")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(f.path("cache")).map_err(|e| e.to_string())?;
    let e = |e: openssl::error::ErrorStack| e.to_string();
    let ca_key = cert::p256_key()?;
    let mut req = Issue {
        cn: "bench STI-CA",
        not_before: unix_now() - 3600,
        days: 30,
        ca: true,
        entries: &[],
        issuer: None,
    };
    let ca = cert::issue(&ca_key, &req)?;
    let key = cert::p256_key()?;
    let spc = [TnEntry::Spc("1234".into())];
    (req.cn, req.ca, req.entries, req.issuer) = ("SHAKEN 1234", false, &spc, Some((&ca, &ca_key)));
    let sp = cert::issue(&key, &req)?;
    write(&f.path("sti-ca.pem"), &ca.to_pem().map_err(e)?)?;
    write(&f.path("www/sp.pem"), &sp.to_pem().map_err(e)?)?;
    write(
        &f.path("sp.key"),
        &key.private_key_to_pem_pkcs8().map_err(e)?,
    )?;
    let tls_key = cert::p256_key()?;
    write(
        &f.path("repo.key"),
        &tls_key.private_key_to_pem_pkcs8().map_err(e)?,
    )?;
    crate::keygen::cert(&crate::keygen::CertRequest {
        key: &f.path("repo.key"),
        cn: "127.0.0.1",
        san: &[],
        days: 30,
        ca: false,
        issuer: None,
        out: &f.path("repo.pem"),
    })?;
    Ok(f)
}

/// `secsipidx` serving `www/` over HTTPS; the certificate's URL once it
/// accepts connections.
fn start_repository(f: &Files) -> Result<(Running, String), String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("a free port: {e}"))?
        .port();
    let child = Command::new("secsipidx")
        .args([
            "-http-dir",
            &f.p("www"),
            "-https-srv",
            &format!("127.0.0.1:{port}"),
        ])
        .args([
            "-https-pubkey",
            &f.p("repo.pem"),
            "-https-prvkey",
            &f.p("repo.key"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("secsipidx: {e} (./setup.sh installs it)"))?;
    let repo = Running(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err("secsipidx's HTTPS server did not start".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((repo, format!("https://127.0.0.1:{port}/v1/pub/sp.pem")))
}

/// sipsec as a stateless proxy for b.example, one worker, in `mode`.
fn start_sipsec(f: &Files, mode: Mode, url: &str) -> Result<(Running, SocketAddr), String> {
    let addr = free_udp()?;
    let stir = match mode {
        Mode::Plain => String::new(),
        Mode::Sign => format!(
            "[stir]\nkey = \"{}\"\nx5u = \"{url}\"\ntrunks = [\"127.0.0.1\"]\n",
            f.p("sp.key")
        ),
        Mode::Verify => format!(
            "[stir]\ntrust_anchors = \"{}\"\nfetch_roots = \"{}\"\nallow_private_x5u = true\n",
            f.p("sti-ca.pem"),
            f.p("repo.pem")
        ),
    };
    let config = f.path(&format!("sipsec-{}.toml", mode.name()));
    write(
        &config,
        format!("mode = \"proxy\"\ndomains = [\"b.example\"]\n{stir}").as_bytes(),
    )?;
    let data = f.path(&format!("data-{}", mode.name()));
    let _ = std::fs::remove_dir_all(&data);
    let server = serve(addr, &data, &config, &["--workers", "1"])?;
    Ok((server, addr))
}

/// Kamailio with `interop/kamailio/stir-bench.cfg` in `mode`.
fn start_kamailio(
    f: &Files,
    mode: Mode,
    url: &str,
    bob: SocketAddr,
) -> Result<(Running, SocketAddr), String> {
    let addr = free_udp()?;
    let cfg = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../interop/kamailio/stir-bench.cfg");
    let mut c = Command::new("kamailio");
    c.arg("-f")
        .arg(&cfg)
        .args(["-DD", "-E", "-n", "1", "-m", "64", "-M", "8"])
        .args(["-l", &format!("udp:{addr}"), "-w", &f.p("cache")])
        .args([
            "-A",
            &format!("BOB=\"sip:{bob}\""),
            "-A",
            &format!("X5U=\"{url}\""),
        ])
        .args(["-A", &format!("SIGN_KEY=\"{}\"", f.p("sp.key"))])
        .args([
            "-A",
            &format!("CA_OPT=\"CertCAFile={}\"", f.p("sti-ca.pem")),
        ])
        .args(["-A", &format!("CACHE_DIR=\"{}\"", f.p("cache"))])
        .env("SSL_CERT_FILE", f.path("repo.pem"));
    match mode {
        Mode::Plain => {}
        Mode::Sign => {
            c.args(["-A", "MODE_SIGN"]);
        }
        Mode::Verify => {
            c.args(["-A", "MODE_VERIFY"]);
        }
    }
    let child = c
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("kamailio: {e} (./setup.sh installs it)"))?;
    let server = Running(child);
    wait_ready(addr)?;
    Ok((server, addr))
}

/// The callee: answers every INVITE 486 until `stop`.
fn callee(s: UdpSocket, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        let mut invites = 0;
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = s.recv_from(&mut buf) else {
                continue;
            };
            let m = String::from_utf8_lossy(&buf[..n]);
            if !m.starts_with("INVITE ") {
                continue;
            }
            // Count the INVITEs that arrive signed.
            invites += u64::from(header_lines(&m, "Identity").next().is_some());
            let mut r = String::from("SIP/2.0 486 Busy Here\r\n");
            for name in ["Via", "From", "Call-ID", "CSeq"] {
                for h in header_lines(&m, name) {
                    r.push_str(h);
                    r.push_str("\r\n");
                }
            }
            for h in header_lines(&m, "To") {
                r.push_str(h);
                r.push_str(";tag=b\r\n");
            }
            r.push_str("Content-Length: 0\r\n\r\n");
            let _ = s.send_to(r.as_bytes(), from);
        }
        invites
    })
}

/// Registers the callee at a sipsec proxy.
fn register(s: &UdpSocket, proxy: SocketAddr) -> Result<(), String> {
    let me = s.local_addr().map_err(|e| e.to_string())?;
    let m = format!(
        "REGISTER sip:b.example SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-reg\r\nMax-Forwards: 70\r\n\
         From: <sip:{CALLEE}@b.example>;tag=r\r\nTo: <sip:{CALLEE}@b.example>\r\nCall-ID: reg\r\n\
         CSeq: 1 REGISTER\r\nContact: <sip:{CALLEE}@{me}>\r\nExpires: 600\r\nContent-Length: 0\r\n\r\n"
    );
    let answer = super::peers::transact(s, m.as_bytes(), proxy, false, |_| true)
        .map_err(|e| format!("REGISTER: {e}"))?;
    if !answer.starts_with(b"SIP/2.0 200") {
        return Err(format!("REGISTER: {}", String::from_utf8_lossy(&answer)));
    }
    Ok(())
}

fn invite(me: SocketAddr, tag: &str, i: u32, identity: Option<&str>) -> String {
    let id = identity.map_or(String::new(), |v| format!("Identity: {v}\r\n"));
    format!(
        "INVITE sip:{CALLEE}@b.example SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-{tag}-{i}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:{CALLER}@a.example>;tag={i}\r\nTo: <sip:{CALLEE}@b.example>\r\n\
         Call-ID: {tag}-{i}\r\nCSeq: 1 INVITE\r\nContact: <sip:{CALLER}@{me}>\r\n{id}Content-Length: 0\r\n\r\n"
    )
}

/// `n` calls through `proxy`, at most `window` at once; how many ended
/// 486 (the others failed or timed out).
fn calls(
    proxy: SocketAddr,
    n: u32,
    window: u32,
    tag: &str,
    identity: Option<&str>,
) -> Result<u32, String> {
    let s = socket(Duration::from_secs(2))?;
    let me = s.local_addr().map_err(|e| e.to_string())?;
    let (mut sent, mut done, mut busy) = (0, 0, 0);
    let mut buf = vec![0u8; 65_536];
    while sent < n.min(window) {
        s.send_to(invite(me, tag, sent, identity).as_bytes(), proxy)
            .map_err(|e| e.to_string())?;
        sent += 1;
    }
    while done < n {
        let Ok(len) = s.recv(&mut buf) else {
            break;
        };
        let m = String::from_utf8_lossy(&buf[..len]);
        if m.starts_with("SIP/2.0 1") {
            continue;
        }
        done += 1;
        if m.starts_with("SIP/2.0 486") {
            busy += 1;
        }
        let via = header_lines(&m, "Via").next().unwrap_or("");
        let from = header_lines(&m, "From").next().unwrap_or("");
        let to = header_lines(&m, "To").next().unwrap_or("");
        let call = header_lines(&m, "Call-ID").next().unwrap_or("");
        let ack = format!(
            "ACK sip:{CALLEE}@b.example SIP/2.0\r\n{via}\r\nMax-Forwards: 70\r\n{from}\r\n{to}\r\n{call}\r\n\
             CSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n"
        );
        let _ = s.send_to(ack.as_bytes(), proxy);
        if sent < n {
            s.send_to(invite(me, tag, sent, identity).as_bytes(), proxy)
                .map_err(|e| e.to_string())?;
            sent += 1;
        }
    }
    Ok(busy)
}

/// One measurement: CPU µs per call of `server` in `mode`.
fn measure(
    f: &Files,
    kamailio: bool,
    mode: Mode,
    url: &str,
    args: &StirArgs,
    round: u32,
) -> Result<f64, String> {
    let uas = socket(Duration::from_millis(100))?;
    let bob = uas.local_addr().map_err(|e| e.to_string())?;
    let (server, addr) = if kamailio {
        start_kamailio(f, mode, url, bob)?
    } else {
        start_sipsec(f, mode, url)?
    };
    let pids = if kamailio {
        sipsec_bench::cpu::settled_tree(server.0.id())
    } else {
        vec![server.0.id()]
    };
    if !kamailio {
        uas.set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(|e| e.to_string())?;
        register(&uas, addr)?;
        uas.set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(|e| e.to_string())?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let answering = callee(uas, stop.clone());
    let identity = (mode == Mode::Verify).then(|| token(f, url)).transpose()?;
    let tag = format!("{}{}{round}", if kamailio { "k" } else { "s" }, mode.name());
    // One call first: the certificate fetched and cached, the server warm.
    let warm = calls(addr, 1, 1, &format!("{tag}w"), identity.as_deref())?;
    let before = sipsec_bench::cpu::cpu_seconds(&pids);
    let busy = calls(addr, args.calls, args.window, &tag, identity.as_deref())?;
    let after = sipsec_bench::cpu::cpu_seconds(&pids);
    stop.store(true, Ordering::Relaxed);
    let signed = answering.join().unwrap_or(0);
    drop(server);
    if mode == Mode::Sign && signed < u64::from(args.calls) {
        return Err(format!(
            "{} sign: only {signed} of {} INVITEs reached the callee signed",
            if kamailio { "kamailio" } else { "sipsec" },
            args.calls
        ));
    }
    if warm != 1 || busy < args.calls {
        return Err(format!(
            "{} {}: {busy} of {} calls reached the callee (warm-up {warm})",
            if kamailio { "kamailio" } else { "sipsec" },
            mode.name(),
            args.calls
        ));
    }
    Ok((after - before) * 1e6 / f64::from(args.calls))
}

/// A SHAKEN token for CALLER → CALLEE, made now.
fn token(f: &Files, url: &str) -> Result<String, String> {
    let key = SigningKey::from_pem(&std::fs::read(f.path("sp.key")).map_err(|e| e.to_string())?)?;
    let claims = Claims {
        attest: "A".into(),
        dest: Dest::tn(CALLEE),
        iat: unix_now(),
        orig: Orig::tn(CALLER),
        origid: "9a9bba1e-6a42-4a5c-9d63-4d5f6c9e8a10".into(),
    };
    let t = key.sign(&claims, url).map_err(|e| e.to_string())?;
    Ok(IdentityHeader::format(&t, url))
}

pub fn stir_bench(args: StirArgs) -> Result<ExitCode, String> {
    run(&args).map(|()| ExitCode::SUCCESS)
}

impl StirArgs {
    /// `calls` per measurement, `window` in flight, `rounds`; Kamailio too
    /// unless `no_kamailio`.
    pub(super) fn new(calls: u32, window: u32, rounds: u32, no_kamailio: bool) -> Self {
        Self {
            calls,
            window,
            rounds,
            no_kamailio,
            json: None,
        }
    }
}

/// Every round's CPU µs per call: forward, sign, verify for sipsec, then
/// for Kamailio (unless left out); and the bytes of the Identity header
/// a signed INVITE carries.
pub(super) fn rounds(args: &StirArgs) -> Result<(Vec<Vec<f64>>, usize), String> {
    let dir = std::env::temp_dir().join(format!("sipsec-bench-stir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let f = prepare(&dir)?;
    let (_repo, url) = start_repository(&f)?;
    let identity_bytes = "Identity: ".len() + token(&f, &url)?.len() + 2;
    let servers: &[bool] = if args.no_kamailio {
        &[false]
    } else {
        &[false, true]
    };
    let mut results = vec![Vec::new(); servers.len() * MODES.len()];
    for round in 0..args.rounds {
        for (si, &k) in servers.iter().enumerate() {
            for (mi, &mode) in MODES.iter().enumerate() {
                let us = measure(&f, k, mode, &url, args, round)?;
                eprintln!(
                    "round {}: {} {}: {us:.1} µs/call",
                    round + 1,
                    if k { "kamailio" } else { "sipsec" },
                    mode.name()
                );
                results[si * MODES.len() + mi].push(us);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok((results, identity_bytes))
}

fn run(args: &StirArgs) -> Result<(), String> {
    let (mut results, _) = rounds(args)?;
    let servers: &[bool] = if args.no_kamailio {
        &[false]
    } else {
        &[false, true]
    };
    let m: Vec<f64> = results.iter_mut().map(|v| median(v)).collect();
    println!(
        "CPU per call, µs (median of {} rounds of {} calls, window {}):",
        args.rounds, args.calls, args.window
    );
    println!(
        "{:<10} {:>9} {:>9} {:>9}",
        "server", "forward", "sign", "verify"
    );
    for (si, &k) in servers.iter().enumerate() {
        let r = &m[si * 3..si * 3 + 3];
        println!(
            "{:<10} {:>9.1} {:>9.1} {:>9.1}",
            if k { "kamailio" } else { "sipsec" },
            r[0],
            r[1],
            r[2]
        );
    }
    let added = (m[1] - m[0]) + (m[2] - m[0]);
    println!(
        "sipsec: signing adds {:.1} µs per call, verifying {:.1} µs; together {added:.1} µs",
        m[1] - m[0],
        m[2] - m[0]
    );
    let mut json = serde_json::json!({
        "calls": args.calls, "window": args.window, "rounds": args.rounds,
        "sipsec": { "forward": m[0], "sign": m[1], "verify": m[2] },
        "sipsec_sign_plus_verify_added_us": added,
        "runs": results,
    });
    if servers.len() == 2 {
        println!(
            "sipsec / kamailio: signed call {:.2}, verified call {:.2}",
            m[1] / m[4],
            m[2] / m[5]
        );
        json["kamailio"] = serde_json::json!({ "forward": m[3], "sign": m[4], "verify": m[5] });
        json["ratio"] = serde_json::json!({ "sign": m[1] / m[4], "verify": m[2] / m[5] });
    }
    if let Some(p) = &args.json {
        write(
            p,
            serde_json::to_string_pretty(&json)
                .map_err(|e| e.to_string())?
                .as_bytes(),
        )?;
    }
    Ok(())
}
