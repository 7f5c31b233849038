//! `sipsec bench relay`: concurrent calls whose media crosses rtpengine
//! through sipsec's stateful proxy (`[media] mode = "always"`). It starts
//! an rtpengine (userspace, loopback) and a `sipsec serve`, registers a
//! callee, sets up N calls, sends 20 ms G.711 packets both ways on every
//! call for the given time, hangs up, and reports calls, packets and loss
//! per direction, and the CPU of the proxy and of rtpengine.
//!
//! Every caller's media leaves from one socket and every callee's from
//! another (calls are told apart by SSRC); the relay gives each call its
//! own ports.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;

use super::peers::{free_udp, serve, socket, Running};
use sipsec_server::io::ng::Relays;
use sipsec_server::proto::ng::{Command as Ng, RelayConfig, Reply, Settings};

#[derive(Args)]
pub struct RelayArgs {
    /// Calls held at once.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=5000))]
    calls: u32,
    /// Seconds of media on every call.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Proxy workers.
    #[arg(long, default_value_t = 2)]
    workers: usize,
}

/// rtpengine on loopback with ports for `calls` calls (four each: RTP
/// and RTCP on both sides), once it answers a ping.
fn start_rtpengine(ng: SocketAddr, calls: u32) -> Result<Running, String> {
    // Below the usual ephemeral range, so the generator's own sockets do
    // not take them.
    let base = 20_000;
    let span = (calls * 4 + 100).max(200);
    let child = Command::new("rtpengine")
        .args(["--config-file=none", "--table=-1", "--foreground"])
        .args(["--interface=127.0.0.1", "--delete-delay=0", "--log-level=3"])
        .arg(format!("--listen-ng={ng}"))
        .arg(format!("--port-min={base}"))
        .arg(format!("--port-max={}", base + span - 1))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("rtpengine: {e} (./setup.sh installs rtpengine-daemon)"))?;
    let engine = Running(child);
    let settings = Settings {
        relays: vec![RelayConfig {
            addr: ng,
            weight: 1,
        }],
        timeout: Duration::from_millis(200),
        tries: 1,
        ping_every: Duration::from_secs(3600),
        down_after: 100,
    };
    let mut relays =
        Relays::open(settings, "127.0.0.1:0".parse().expect("addr")).map_err(|e| e.to_string())?;
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if relays.call(&Ng::Ping) == Ok(Reply::Pong) {
            return Ok(engine);
        }
    }
    Err(format!("rtpengine did not answer on {ng}"))
}

/// `sipsec serve` relaying every call through `ng`, once it answers.
fn start_proxy(
    dir: &std::path::Path,
    ng: SocketAddr,
    workers: usize,
) -> Result<(Running, SocketAddr), String> {
    let config = dir.join("media.toml");
    let text = format!("[media]\nmode = \"always\"\nrelays = [\"{ng}\"]\n");
    std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
    let addr = free_udp()?;
    let workers = workers.to_string();
    let proxy = serve(
        addr,
        &dir.join("data"),
        &config,
        &["--mode", "proxy", "--stateful", "--workers", &workers],
    )?;
    Ok((proxy, addr))
}

fn sdp(port: u16) -> String {
    format!(
        "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
    )
}

/// The media port of an SDP body.
fn media_port(msg: &str) -> Option<u16> {
    let body = msg.split_once("\r\n\r\n")?.1;
    body.lines()
        .find_map(|l| l.strip_prefix("m=audio "))?
        .split(' ')
        .next()?
        .parse()
        .ok()
}

fn header<'a>(msg: &'a str, name: &str) -> &'a str {
    msg.lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
        .unwrap_or("")
}

/// A response to `request` with `status` (and a body), To tagged.
fn respond(request: &str, status: &str, body: &str) -> String {
    let mut head = String::new();
    for l in request.split("\r\n").skip(1).take_while(|l| !l.is_empty()) {
        let name = l
            .split(':')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match name.as_str() {
            "via" | "from" | "call-id" | "cseq" | "record-route" => {
                head.push_str(l);
                head.push_str("\r\n");
            }
            "to" if !l.contains("tag=") => head.push_str(&format!("{l};tag=callee\r\n")),
            "to" => head.push_str(&format!("{l}\r\n")),
            _ => {}
        }
    }
    let ct = if body.is_empty() {
        ""
    } else {
        "Content-Type: application/sdp\r\n"
    };
    format!(
        "SIP/2.0 {status}\r\n{head}{ct}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The callee: registers, then answers every INVITE with its media
/// socket's port and every BYE with 200; records where each call's media
/// goes (the relay's port in the INVITE).
fn callee(
    proxy: SocketAddr,
    sip: UdpSocket,
    rtp_port: u16,
    to_relay: Arc<Mutex<HashMap<String, u16>>>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, String> {
    let me = sip.local_addr().map_err(|e| e.to_string())?;
    let register = format!(
        "REGISTER sip:{proxy} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-reg\r\n\
         Max-Forwards: 70\r\nFrom: <sip:callee@{proxy}>;tag=r\r\nTo: <sip:callee@{proxy}>\r\n\
         Call-ID: relay-bench-reg\r\nCSeq: 1 REGISTER\r\nContact: <sip:callee@{me}>\r\n\
         Expires: 600\r\nContent-Length: 0\r\n\r\n"
    );
    let answer = super::peers::transact(&sip, register.as_bytes(), proxy, false, |_| true)
        .map_err(|e| format!("REGISTER: {e}"))?;
    if !answer.starts_with(b"SIP/2.0 200") {
        return Err(format!("REGISTER: {}", String::from_utf8_lossy(&answer)));
    }
    let mut buf = vec![0u8; 65_535];
    Ok(std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = sip.recv_from(&mut buf) else {
                continue;
            };
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            if msg.starts_with("INVITE ") {
                if let Some(port) = media_port(&msg) {
                    let call = header(&msg, "Call-ID").to_owned();
                    to_relay
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(call, port);
                }
                let ok = respond(&msg, "200 OK", &sdp(rtp_port));
                let _ = sip.send_to(ok.as_bytes(), from);
            } else if msg.starts_with("BYE ") {
                let _ = sip.send_to(respond(&msg, "200 OK", "").as_bytes(), from);
            }
        }
    }))
}

/// One call as its caller sees it.
struct Call {
    id: String,
    /// The relay's port for the caller's media.
    to_relay: u16,
    /// The callee's 200 (for the ACK and BYE's route and tag).
    ok: String,
}

/// Sets up call `i` from `sip` (the caller's media on `rtp_port`).
fn call(proxy: SocketAddr, sip: &UdpSocket, i: u32, rtp_port: u16) -> Result<Call, String> {
    let me = sip.local_addr().map_err(|e| e.to_string())?;
    let id = format!("relay-bench-{i}");
    let offer = sdp(rtp_port);
    let invite = format!(
        "INVITE sip:callee@{proxy} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-inv{i};rport\r\n\
         Max-Forwards: 70\r\nFrom: <sip:caller@{proxy}>;tag=c{i}\r\nTo: <sip:callee@{proxy}>\r\n\
         Call-ID: {id}\r\nCSeq: 1 INVITE\r\nContact: <sip:caller@{me}>\r\n\
         Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{offer}",
        offer.len()
    );
    let ours = |m: &[u8]| header(&String::from_utf8_lossy(m), "Call-ID") == id;
    let answer = super::peers::transact(sip, invite.as_bytes(), proxy, true, ours)
        .map_err(|e| format!("call {i}: {e}"))?;
    let msg = String::from_utf8_lossy(&answer).into_owned();
    if !msg.starts_with("SIP/2.0 200") {
        return Err(format!("call {i}: {}", msg.lines().next().unwrap_or("")));
    }
    let to_relay = media_port(&msg).ok_or(format!("call {i}: a 200 without SDP"))?;
    let call = Call {
        id,
        to_relay,
        ok: msg,
    };
    in_dialog(proxy, sip, i, &call, "ACK", 1)?;
    Ok(call)
}

/// Sends `method` in `call`'s dialog along its recorded route.
fn in_dialog(
    proxy: SocketAddr,
    sip: &UdpSocket,
    i: u32,
    call: &Call,
    method: &str,
    cseq: u32,
) -> Result<(), String> {
    let me = sip.local_addr().map_err(|e| e.to_string())?;
    let route = header(&call.ok, "Record-Route");
    let to = header(&call.ok, "To");
    let contact = header(&call.ok, "Contact").trim_matches(['<', '>']);
    let req = format!(
        "{method} {contact} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-{method}{i};rport\r\n\
         Route: {route}\r\nMax-Forwards: 70\r\nFrom: <sip:caller@{proxy}>;tag=c{i}\r\nTo: {to}\r\n\
         Call-ID: {}\r\nCSeq: {cseq} {method}\r\nContent-Length: 0\r\n\r\n",
        call.id
    );
    sip.send_to(req.as_bytes(), proxy)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Packets received per SSRC, each sequence number once.
type Seen = Arc<Mutex<HashMap<u32, u64>>>;

fn receiver(sock: UdpSocket, seen: Seen, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut local: HashMap<u32, u64> = HashMap::new();
        while !stop.load(Ordering::Relaxed) {
            if let Ok(n) = sock.recv(&mut buf) {
                if n >= 12 {
                    let ssrc = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]);
                    *local.entry(ssrc).or_default() += 1;
                }
            }
        }
        *seen.lock().unwrap_or_else(|e| e.into_inner()) = local;
    })
}

fn packet(ssrc: u32, seq: u16) -> Vec<u8> {
    let mut p = vec![0x80, 0, 0, 0, 0, 0, 0, 0];
    p[2..4].copy_from_slice(&seq.to_be_bytes());
    p[4..8].copy_from_slice(&(u32::from(seq) * 160).to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend(std::iter::repeat_n(0xffu8, 160));
    p
}

pub(super) fn relay(a: RelayArgs) -> Result<ExitCode, String> {
    let dir = std::env::temp_dir().join(format!("sipsec-bench-relay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let ng = free_udp()?;
    let engine = start_rtpengine(ng, a.calls)?;
    let (proxy, addr) = start_proxy(&dir, ng, a.workers)?;
    let (caller_rtp, callee_rtp) = (
        socket(Duration::from_millis(50))?,
        socket(Duration::from_millis(50))?,
    );
    let port = |s: &UdpSocket| s.local_addr().map(|a| a.port()).map_err(|e| e.to_string());
    let (caller_port, callee_port) = (port(&caller_rtp)?, port(&callee_rtp)?);
    let stop = Arc::new(AtomicBool::new(false));
    let to_callee_relay = Arc::new(Mutex::new(HashMap::new()));
    let answering = callee(
        addr,
        socket(Duration::from_millis(100))?,
        callee_port,
        to_callee_relay.clone(),
        stop.clone(),
    )?;
    let sip = socket(Duration::from_secs(5))?;
    let cpu = |pid: u32| sipsec_bench::cpu::cpu_seconds(&[pid]);
    let (proxy_cpu0, engine_cpu0) = (cpu(proxy.0.id()), cpu(engine.0.id()));
    let setup = Instant::now();
    let mut calls = Vec::new();
    let mut failed = Vec::new();
    for i in 0..a.calls {
        match call(addr, &sip, i, caller_port) {
            Ok(c) => calls.push(c),
            Err(e) => failed.push(e),
        }
    }
    let setup = setup.elapsed();
    let relay_ports: Vec<(u16, u16)> = {
        let m = to_callee_relay.lock().unwrap_or_else(|e| e.into_inner());
        calls
            .iter()
            .map(|c| (c.to_relay, m.get(&c.id).copied().unwrap_or(0)))
            .collect()
    };
    let (heard_by_callee, heard_by_caller): (Seen, Seen) = (Arc::default(), Arc::default());
    let rx_stop = Arc::new(AtomicBool::new(false));
    let rx = [
        receiver(
            callee_rtp.try_clone().map_err(|e| e.to_string())?,
            heard_by_callee.clone(),
            rx_stop.clone(),
        ),
        receiver(
            caller_rtp.try_clone().map_err(|e| e.to_string())?,
            heard_by_caller.clone(),
            rx_stop.clone(),
        ),
    ];
    let relay = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    let packets = a.seconds * 50;
    let start = Instant::now();
    for seq in 0..packets {
        let due = start + Duration::from_millis(20 * seq);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        for (i, (to_caller_side, to_callee_side)) in relay_ports.iter().enumerate() {
            let i = i as u32;
            let _ = caller_rtp.send_to(&packet(2 * i, seq as u16), relay(*to_caller_side));
            let _ = callee_rtp.send_to(&packet(2 * i + 1, seq as u16), relay(*to_callee_side));
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    rx_stop.store(true, Ordering::Relaxed);
    for t in rx {
        let _ = t.join();
    }
    for (i, c) in calls.iter().enumerate() {
        let _ = in_dialog(addr, &sip, i as u32, c, "BYE", 2);
    }
    let (proxy_cpu, engine_cpu) = (
        cpu(proxy.0.id()) - proxy_cpu0,
        cpu(engine.0.id()) - engine_cpu0,
    );
    stop.store(true, Ordering::Relaxed);
    let _ = answering.join();
    let sum = |s: &Seen, parity: u32| -> u64 {
        let m = s.lock().unwrap_or_else(|e| e.into_inner());
        m.iter()
            .filter(|(k, _)| *k % 2 == parity)
            .map(|(_, v)| *v)
            .sum()
    };
    let sent = packets * calls.len() as u64;
    let (to_callee, to_caller) = (sum(&heard_by_callee, 0), sum(&heard_by_caller, 1));
    let loss = |got: u64| {
        if sent == 0 {
            0.0
        } else {
            100.0 * (1.0 - got as f64 / sent as f64)
        }
    };
    println!("relayed calls through sipsec serve ([media] always) and rtpengine (userspace)");
    println!(
        "calls: {} set up, {} failed, in {:.2} s",
        calls.len(),
        failed.len(),
        setup.as_secs_f64()
    );
    for f in failed.iter().take(5) {
        println!("  {f}");
    }
    println!(
        "media: {} s, 20 ms G.711 both ways; caller → callee {to_callee}/{sent} packets ({:.2} % lost), callee → caller {to_caller}/{sent} ({:.2} % lost)",
        a.seconds,
        loss(to_callee),
        loss(to_caller)
    );
    let per_k = |s: f64| {
        if sent == 0 {
            0.0
        } else {
            s * 1e6 / (2 * sent) as f64
        }
    };
    println!(
        "CPU: proxy {proxy_cpu:.2} s, rtpengine {engine_cpu:.2} s ({:.1} µs per packet relayed)",
        per_k(engine_cpu)
    );
    drop(proxy);
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(if failed.is_empty() && to_callee > 0 && to_caller > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
