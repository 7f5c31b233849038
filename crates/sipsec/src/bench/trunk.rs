//! `sipsec bench trunk`: what a call through a trunk costs a stateful
//! proxy that follows its dialog and writes its record, sipsec beside
//! Kamailio with dispatcher + dialog + acc (`interop/kamailio/
//! trunk-bench.cfg`) in the same run. A caller makes N whole calls
//! (INVITE, 200, ACK, BYE, 200; the ACK and BYE along the recorded
//! route), at most W at once, through the proxy to a gateway that answers
//! them; the proxy's CPU time over the N calls, divided by N, is its cost
//! per call.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::peers::{free_udp, header_lines, median, serve, socket, wait_ready, Running};

#[derive(Args)]
pub struct TrunkArgs {
    /// Calls per measurement.
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    calls: u32,
    /// Calls in flight at once.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    window: u32,
    /// Rounds (both servers once per round); medians reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    rounds: u32,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The gateway: answers INVITE 200 (echoing Record-Route) and BYE 200.
fn gateway(s: UdpSocket, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let me = s.local_addr().map(|a| a.to_string()).unwrap_or_default();
        let mut buf = vec![0u8; 65_536];
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = s.recv_from(&mut buf) else {
                continue;
            };
            let m = String::from_utf8_lossy(&buf[..n]);
            if !(m.starts_with("INVITE ") || m.starts_with("BYE ")) {
                continue;
            }
            let mut r = String::from("SIP/2.0 200 OK\r\n");
            for name in ["Via", "Record-Route", "From", "Call-ID", "CSeq"] {
                for h in header_lines(&m, name) {
                    r.push_str(h);
                    r.push_str("\r\n");
                }
            }
            for h in header_lines(&m, "To") {
                r.push_str(h);
                if !h.contains("tag=") {
                    r.push_str(";tag=gw");
                }
                r.push_str("\r\n");
            }
            r.push_str(&format!(
                "Contact: <sip:gw@{me}>\r\nContent-Length: 0\r\n\r\n"
            ));
            let _ = s.send_to(r.as_bytes(), from);
        }
    })
}

/// What a call needs after its 200: where its ACK and BYE go.
struct Dialog {
    target: String,
    routes: String,
    to: String,
}

fn request(
    method: &str,
    uri: &str,
    routes: &str,
    me: SocketAddr,
    call: &str,
    cseq: u32,
    to: &str,
) -> String {
    format!(
        "{method} {uri} SIP/2.0\r\n{routes}Via: SIP/2.0/UDP {me};branch=z9hG4bK-{method}-{call}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:alice@{me}>;tag={call}\r\n{to}\r\nCall-ID: {call}\r\n\
         CSeq: {cseq} {method}\r\nContact: <sip:alice@{me}>\r\nContent-Length: 0\r\n\r\n"
    )
}

/// The ACK and BYE's route, from a 200's Record-Route and Contact.
fn dialog_of(ok: &str) -> Option<Dialog> {
    let contact = header_lines(ok, "Contact").next()?;
    let target = contact.split('<').nth(1)?.split('>').next()?.to_owned();
    let mut rr: Vec<&str> = header_lines(ok, "Record-Route")
        .filter_map(|h| h.split_once(':').map(|(_, v)| v))
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    rr.reverse();
    let routes = if rr.is_empty() {
        String::new()
    } else {
        format!("Route: {}\r\n", rr.join(", "))
    };
    let to = header_lines(ok, "To").next()?.to_owned();
    Some(Dialog { target, routes, to })
}

/// `n` whole calls through `proxy`, at most `window` at once: how many
/// ended with the BYE's 200.
fn calls(proxy: SocketAddr, n: u32, window: u32, tag: &str) -> Result<u32, String> {
    let s = socket(Duration::from_secs(2))?;
    let me = s.local_addr().map_err(|e| e.to_string())?;
    let ruri = format!("sip:+12155550100@{proxy}");
    let to = "To: <sip:+12155550100@127.0.0.1>";
    let (mut sent, mut done) = (0, 0);
    let mut open: HashMap<String, Dialog> = HashMap::new();
    let mut buf = vec![0u8; 65_536];
    let invite = |i: u32| request("INVITE", &ruri, "", me, &format!("{tag}-{i}"), 1, to);
    while sent < n.min(window) {
        s.send_to(invite(sent).as_bytes(), proxy)
            .map_err(|e| e.to_string())?;
        sent += 1;
    }
    while done < n {
        let Ok(len) = s.recv(&mut buf) else {
            break;
        };
        let m = String::from_utf8_lossy(&buf[..len]);
        if !m.starts_with("SIP/2.0 2") {
            continue;
        }
        let call = header_lines(&m, "Call-ID")
            .next()
            .and_then(|h| h.split_once(':'))
            .map(|(_, v)| v.trim().to_owned())
            .unwrap_or_default();
        let cseq = header_lines(&m, "CSeq").next().unwrap_or("");
        if cseq.ends_with("INVITE") && !open.contains_key(&call) {
            let Some(d) = dialog_of(&m) else { continue };
            let ack = request("ACK", &d.target, &d.routes, me, &call, 1, &d.to);
            let bye = request("BYE", &d.target, &d.routes, me, &call, 2, &d.to);
            let _ = s.send_to(ack.as_bytes(), proxy);
            let _ = s.send_to(bye.as_bytes(), proxy);
            open.insert(call, d);
        } else if cseq.ends_with("BYE") && open.remove(&call).is_some() {
            done += 1;
            if sent < n {
                s.send_to(invite(sent).as_bytes(), proxy)
                    .map_err(|e| e.to_string())?;
                sent += 1;
            }
        }
    }
    Ok(done)
}

fn start_sipsec(dir: &Path, gw: SocketAddr) -> Result<(Running, SocketAddr), String> {
    let addr = free_udp()?;
    let data = dir.join("sipsec-data");
    let _ = std::fs::remove_dir_all(&data);
    let config = dir.join("sipsec-trunk.toml");
    let text = format!(
        "mode = \"proxy\"\nstateful = true\n[calls]\nrecords = true\n\
         [[trunk]]\nname = \"carrier\"\nprefixes = [\"+1\"]\nprobe_every = 0\ngateways = [\"{gw}\"]\n"
    );
    std::fs::write(&config, text).map_err(|e| e.to_string())?;
    let server = serve(addr, &data, &config, &["--workers", "1"])?;
    Ok((server, addr))
}

fn start_kamailio(dir: &Path, gw: SocketAddr) -> Result<(Running, SocketAddr), String> {
    let addr = free_udp()?;
    let list = dir.join("dispatcher.list");
    std::fs::write(&list, format!("1 sip:{gw}\n")).map_err(|e| e.to_string())?;
    let cfg = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../interop/kamailio/trunk-bench.cfg");
    let child = Command::new("kamailio")
        .arg("-f")
        .arg(&cfg)
        .args(["-DD", "-E", "-n", "1", "-m", "128", "-M", "16"])
        .args(["-l", &format!("udp:{addr}")])
        .arg("-w")
        .arg(dir)
        .args(["-A", &format!("DS_LIST=\"{}\"", list.display())])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("kamailio: {e} (./setup.sh installs it)"))?;
    let server = Running(child);
    wait_ready(addr)?;
    Ok((server, addr))
}

/// One measurement: CPU µs per call.
fn measure(dir: &Path, kamailio: bool, args: &TrunkArgs, round: u32) -> Result<f64, String> {
    let gw = socket(Duration::from_millis(100))?;
    let gw_addr = gw.local_addr().map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let answering = gateway(gw, stop.clone());
    let (server, addr) = if kamailio {
        start_kamailio(dir, gw_addr)?
    } else {
        start_sipsec(dir, gw_addr)?
    };
    let pids = if kamailio {
        sipsec_bench::cpu::settled_tree(server.0.id())
    } else {
        vec![server.0.id()]
    };
    let name = if kamailio { "kamailio" } else { "sipsec" };
    let warm = calls(addr, 10, 5, &format!("{name}w{round}"))?;
    let before = sipsec_bench::cpu::cpu_seconds(&pids);
    let done = calls(addr, args.calls, args.window, &format!("{name}{round}"))?;
    let after = sipsec_bench::cpu::cpu_seconds(&pids);
    stop.store(true, Ordering::Relaxed);
    let _ = answering.join();
    drop(server);
    if warm != 10 || done < args.calls {
        return Err(format!(
            "{name}: {done} of {} calls completed (warm-up {warm} of 10)",
            args.calls
        ));
    }
    Ok((after - before) * 1e6 / f64::from(args.calls))
}

pub fn trunk_bench(args: TrunkArgs) -> Result<ExitCode, String> {
    let dir = std::env::temp_dir().join(format!("sipsec-bench-trunk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut runs = [Vec::new(), Vec::new()];
    for round in 0..args.rounds {
        for (i, k) in [false, true].into_iter().enumerate() {
            let us = measure(&dir, k, &args, round)?;
            eprintln!(
                "round {}: {}: {us:.1} µs/call",
                round + 1,
                if k { "kamailio" } else { "sipsec" }
            );
            runs[i].push(us);
        }
    }
    let (s, k) = (median(&mut runs[0].clone()), median(&mut runs[1].clone()));
    println!(
        "CPU per call through a trunk, dialog followed, record written, µs (median of {} rounds of {} calls, window {}):",
        args.rounds, args.calls, args.window
    );
    println!(
        "sipsec    {s:>8.1}\nkamailio  {k:>8.1}\nsipsec / kamailio: {:.2}",
        s / k
    );
    if let Some(p) = &args.json {
        let json = serde_json::json!({
            "calls": args.calls, "window": args.window, "rounds": args.rounds,
            "sipsec": s, "kamailio": k, "ratio": s / k, "runs": runs,
        });
        std::fs::write(
            p,
            serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?,
        )
        .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ExitCode::SUCCESS)
}
