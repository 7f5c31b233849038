//! Trunks with real SIPp: two SIPp UASs are the gateways of one trunk
//! behind sipsec's stateful proxy; a SIPp UAC calls numbers the trunk
//! carries. Calls spread by weight; a stopped gateway's calls fail over
//! inside the transaction with none failed; its OPTIONS probes mark it
//! down, and up again once it is back.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{http_get, tempdir, Running};

fn free_port() -> u16 {
    loop {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("socket");
        let port = tcp.local_addr().expect("addr").port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// A SIPp UAS as a gateway (`interop/sipp/uas_gateway.xml`, OPTIONS
/// answered 200 by `-aa`), killed when dropped.
struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether a UDP socket is bound to `port` on this host (/proc/net/udp),
/// or a TCP socket listens there (/proc/net/tcp, state 0A).
fn bound(port: u16, tcp: bool) -> bool {
    let hex = format!(":{port:04X} ");
    let table = if tcp {
        "/proc/net/tcp"
    } else {
        "/proc/net/udp"
    };
    std::fs::read_to_string(table).is_ok_and(|t| {
        t.lines().skip(1).any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(1).is_some_and(|a| format!("{a} ").ends_with(&hex))
                && (!tcp || f.get(3) == Some(&"0A"))
        })
    })
}

fn gateway(port: u16) -> Gateway {
    gateway_playing(port, "uas_gateway.xml")
}

fn gateway_playing(port: u16, scenario: &str) -> Gateway {
    gateway_over(port, scenario, false)
}

/// A SIPp gateway playing `scenario` on `port`, over TCP when `tcp`.
fn gateway_over(port: u16, scenario: &str, tcp: bool) -> Gateway {
    let mut c = Command::new("sipp");
    c.arg("-sf")
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../interop/sipp")
                .join(scenario),
        )
        .args(["-aa", "-p", &port.to_string(), "-i", "127.0.0.1"])
        .args(["-nostdin", "-timeout", "300s"]);
    if tcp {
        c.args(["-t", "t1"]);
    }
    let g = Gateway(
        c.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sipp runs (./setup.sh installs sip-tester)"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !bound(port, tcp) {
        assert!(
            Instant::now() < deadline,
            "the SIPp gateway never listened on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    g
}

/// `calls` calls from a SIPp UAC to `number` through `proxy`; SIPp's exit
/// status says whether every call succeeded.
fn call(proxy: SocketAddr, number: &str, calls: u32) -> (bool, String) {
    call_playing(proxy, "invite_trunk.xml", number, calls, 100)
}

/// `calls` calls playing `scenario` at `rate` per second.
fn call_playing(
    proxy: SocketAddr,
    scenario: &str,
    number: &str,
    calls: u32,
    rate: u32,
) -> (bool, String) {
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../interop/sipp")
        .join(scenario);
    let out = Command::new("sipp")
        .arg(proxy.to_string())
        .arg("-sf")
        .arg(scenario)
        .args([
            "-s",
            number,
            "-m",
            &calls.to_string(),
            "-r",
            &rate.to_string(),
            "-l",
            "200",
        ])
        .args(["-p", &free_port().to_string(), "-i", "127.0.0.1"])
        .args(["-nostdin", "-timeout", "60s", "-timeout_error"])
        .output()
        .expect("sipp runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn status(proxy: &Running) -> serde_json::Value {
    let http = common::banner_http_addr(&proxy.banner).expect("http address in the banner");
    let response = http_get(&http.to_string(), "/status");
    let body = response.split("\r\n\r\n").nth(1).expect("body");
    serde_json::from_str(body).expect("status JSON")
}

fn gateways(proxy: &Running) -> Vec<serde_json::Value> {
    status(proxy)["trunks"][0]["gateways"]
        .as_array()
        .expect("gateways")
        .clone()
}

/// Waits until gateway `i`'s state is `state` (the probes decide).
fn wait_state(proxy: &Running, i: usize, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let g = gateways(proxy);
        if g[i]["state"] == state {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "gateway {i} never became {state}: {g:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn metric(proxy: &Running, name: &str) -> f64 {
    let http = common::banner_http_addr(&proxy.banner).expect("http");
    value_of(&http_get(&http.to_string(), "/metrics"), name)
}

/// The value of metric line `name` in the Prometheus `text` (0 if absent).
fn value_of(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn a_trunk_spreads_by_weight_fails_over_and_probes_its_gateways() {
    let dir = tempdir("trunks");
    let (p1, p2) = (free_port(), free_port());
    let _g1 = gateway(p1);
    let g2 = gateway(p2);
    let config = dir.join("sipsec.toml");
    std::fs::write(
        &config,
        format!(
            "mode = \"proxy\"\nstateful = true\nudp = \"127.0.0.1:0\"\ntcp = \"off\"\nhttp = \"127.0.0.1:0\"\n\
             data_dir = \"{}\"\n[[trunk]]\nname = \"carrier\"\nprefixes = [\"+1\"]\nprobe_every = 1.0\n\
             down_after = 3\nup_after = 2\ngateways = [{{ addr = \"127.0.0.1:{p1}\", weight = 1 }}, \
             {{ addr = \"127.0.0.1:{p2}\", weight = 3 }}]\n",
            dir.join("data").display()
        ),
    )
    .expect("config");
    let proxy = common::serve(&["--config", config.to_str().expect("utf-8")]);

    // 200 calls spread 1:3.
    let (ok, text) = call(proxy.addr, "+12155550100", 200);
    assert!(ok, "{text}");
    let g = gateways(&proxy);
    assert_eq!(
        (g[0]["calls"].as_u64(), g[1]["calls"].as_u64()),
        (Some(50), Some(150)),
        "{g:?}"
    );
    assert_eq!(g[0]["state"], "up");

    // One gateway stops: calls sent to it fail over inside their
    // transaction (the ICMP error, or no answer), none fails.
    drop(g2);
    let before = metric(&proxy, "sipsec_next_hop_failovers_total");
    let (ok, text) = call(proxy.addr, "+12155550101", 40);
    assert!(ok, "{text}");
    assert!(
        metric(&proxy, "sipsec_next_hop_failovers_total") > before,
        "no failover happened"
    );
    // Its probes go unanswered: down. Back: up, and it gets calls again.
    wait_state(&proxy, 1, "down");
    let _g2 = gateway(p2);
    wait_state(&proxy, 1, "up");
    let calls = gateways(&proxy)[1]["calls"].as_u64().expect("calls");
    let (ok, text) = call(proxy.addr, "+12155550102", 20);
    assert!(ok, "{text}");
    assert!(gateways(&proxy)[1]["calls"].as_u64() > Some(calls));
    // Numbers of no trunk still get 404; the names are in the metrics.
    let m = http_get(
        &common::banner_http_addr(&proxy.banner)
            .expect("http")
            .to_string(),
        "/metrics",
    );
    assert!(
        m.contains(&format!(
            "sipsec_trunk_gateway_up{{trunk=\"carrier\",gateway=\"127.0.0.1:{p2}\"}} 1"
        )),
        "{m}"
    );
}

/// The call records a proxy wrote (`DATA_DIR/calls.jsonl`).
#[test]
fn a_tcp_trunks_gateway_is_probed_over_tcp_and_carries_its_calls() {
    let dir = tempdir("trunk-tcp");
    let port = free_port();
    let g = gateway_over(port, "uas_gateway.xml", true);
    let config = dir.join("sipsec.toml");
    std::fs::write(
        &config,
        format!(
            "mode = \"proxy\"\nstateful = true\nudp = \"127.0.0.1:0\"\ntcp = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\n\
             data_dir = \"{}\"\n[[trunk]]\nname = \"carrier\"\nprefixes = [\"+1\"]\ntransport = \"tcp\"\n\
             probe_every = 0.5\ndown_after = 2\nup_after = 1\ngateways = [{{ addr = \"127.0.0.1:{port}\" }}]\n",
            dir.join("data").display()
        ),
    )
    .expect("config");
    let proxy = common::serve(&["--config", config.to_str().expect("utf-8")]);
    // Its probes are answered over TCP; calls reach it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while gateways(&proxy)[0]["probes_answered"].as_u64() < Some(1) {
        assert!(Instant::now() < deadline, "{:?}", gateways(&proxy));
        std::thread::sleep(Duration::from_millis(50));
    }
    let (ok, text) = call(proxy.addr, "+12155550100", 10);
    assert!(ok, "{text}");
    assert_eq!(gateways(&proxy)[0]["calls"].as_u64(), Some(10));
    // Stopped: its connections are refused, it goes down; back: up.
    drop(g);
    wait_state(&proxy, 0, "down");
    let _g = gateway_over(port, "uas_gateway.xml", true);
    wait_state(&proxy, 0, "up");
}

fn records(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("data/calls.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON record per line"))
        .collect()
}

/// A trunk proxy's configuration: gateways with weights.
fn trunk_config(dir: &Path, gateways: &[(u16, u32)]) -> std::path::PathBuf {
    let gws: Vec<String> = gateways
        .iter()
        .map(|(p, w)| format!("{{ addr = \"127.0.0.1:{p}\", weight = {w} }}"))
        .collect();
    let config = dir.join("sipsec.toml");
    std::fs::write(
        &config,
        format!(
            "mode = \"proxy\"\nstateful = true\nudp = \"127.0.0.1:0\"\ntcp = \"off\"\nhttp = \"127.0.0.1:0\"\n\
             data_dir = \"{}\"\n[calls]\nrecords = true\n[[trunk]]\nname = \"carrier\"\nprefixes = [\"+1\"]\nprobe_every = 0\n\
             gateways = [{}]\n",
            dir.join("data").display(),
            gws.join(", ")
        ),
    )
    .expect("config");
    config
}

#[test]
fn every_call_gets_exactly_one_record_with_its_disposition_and_duration() {
    let dir = tempdir("call-records");
    let (ok_port, busy_port) = (free_port(), free_port());
    let _ok = gateway(ok_port);
    let _busy = gateway_playing(busy_port, "uas_busy.xml");
    let config = trunk_config(&dir, &[(ok_port, 3), (busy_port, 1)]);
    let proxy = common::serve(&["--config", config.to_str().expect("utf-8")]);
    let (_, text) = call_playing(proxy.addr, "invite_records.xml", "+12155550100", 2000, 300);
    assert!(text.contains("Successful call"), "{text}");
    // Every call has ended once SIPp is done; the last BYE's record is
    // written before its 200 went back.
    let r = records(&dir);
    assert_eq!(r.len(), 2000, "one record per call");
    let ids: std::collections::HashSet<&str> = r
        .iter()
        .map(|x| x["call_id"].as_str().expect("call_id"))
        .collect();
    assert_eq!(ids.len(), 2000, "no call recorded twice");
    let g = gateways(&proxy);
    let answered: Vec<_> = r
        .iter()
        .filter(|x| x["disposition"] == "answered")
        .collect();
    let failed: Vec<_> = r.iter().filter(|x| x["disposition"] == "failed").collect();
    assert_eq!(
        answered.len() as u64,
        g[0]["calls"].as_u64().expect("calls"),
        "answered = sent to the answering gateway"
    );
    assert_eq!(
        failed.len() as u64,
        g[1]["calls"].as_u64().expect("calls"),
        "failed = sent to the busy one"
    );
    assert_eq!((answered.len(), failed.len()), (1500, 500));
    for x in &answered {
        let (start, answer, end) = (
            x["start_ms"].as_u64().expect("start"),
            x["answer_ms"].as_u64().expect("answer"),
            x["end_ms"].as_u64().expect("end"),
        );
        assert!(start <= answer && answer <= end, "{x}");
        let d = x["duration_s"].as_f64().expect("duration");
        assert!((d - (end - answer) as f64 / 1000.0).abs() < 1e-9, "{x}");
        assert_eq!(
            (x["status"].as_u64(), x["trunk"].as_str()),
            (Some(200), Some("carrier")),
            "{x}"
        );
        assert_eq!(x["gateway"], format!("127.0.0.1:{ok_port}"));
    }
    let mean = answered
        .iter()
        .map(|x| x["duration_s"].as_f64().expect("d"))
        .sum::<f64>()
        / 1500.0;
    assert!(
        mean > 0.05,
        "the calls lasted their random 0-300 ms: mean {mean}"
    );
    for x in &failed {
        assert_eq!(
            (x["status"].as_u64(), x["duration_s"].as_f64()),
            (Some(486), Some(0.0)),
            "{x}"
        );
        assert!(x["answer_ms"].is_null(), "{x}");
    }
    let s = status(&proxy);
    assert_eq!(s["dialogs"]["active"], 0, "{s}");
}

/// A gateway on a plain socket: answers INVITE 200 (echoing
/// Record-Route), BYE 200; ignores the rest. Runs until the socket is
/// dropped by the test ending.
/// A gateway answering INVITE and BYE 200; the requests of the method
/// `tell` names are also sent to its channel.
fn socket_gateway(s: UdpSocket, tell: Option<(&'static str, std::sync::mpsc::Sender<String>)>) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        loop {
            let Ok((n, from)) = s.recv_from(&mut buf) else {
                return;
            };
            let m = String::from_utf8_lossy(&buf[..n]).into_owned();
            if !(m.starts_with("INVITE ") || m.starts_with("BYE ")) {
                continue;
            }
            if let Some((method, tx)) = &tell {
                if m.starts_with(method) {
                    let _ = tx.send(m.clone());
                }
            }
            let me = s.local_addr().expect("addr");
            let mut r = String::from("SIP/2.0 200 OK\r\n");
            for l in m.split("\r\n") {
                let name = l.split(':').next().unwrap_or("").to_ascii_lowercase();
                if ["via", "from", "call-id", "cseq", "record-route"].contains(&name.as_str()) {
                    r.push_str(l);
                    r.push_str("\r\n");
                } else if name == "to" {
                    r.push_str(l);
                    if !l.contains("tag=") {
                        r.push_str(";tag=gw");
                    }
                    r.push_str("\r\n");
                }
            }
            r.push_str(&format!(
                "Contact: <sip:gw@{me}>\r\nContent-Length: 0\r\n\r\n"
            ));
            let _ = s.send_to(r.as_bytes(), from);
        }
    });
}

fn header<'a>(m: &'a str, name: &str) -> Vec<&'a str> {
    m.split("\r\n")
        .filter(|l| {
            l.split(':')
                .next()
                .is_some_and(|n| n.eq_ignore_ascii_case(name))
        })
        .collect()
}

/// From a 2xx: where the caller's ACK and BYE go (the callee's contact),
/// the Route lines (the Record-Route reversed) and the To line.
fn route_of(ok: &str) -> (String, String, String) {
    let to = header(ok, "To")[0].to_string();
    let target = header(ok, "Contact")[0]
        .split('<')
        .nth(1)
        .and_then(|c| c.split('>').next())
        .expect("contact")
        .to_string();
    let rr: Vec<&str> = header(ok, "Record-Route")
        .iter()
        .flat_map(|h| h.split_once(':').expect("value").1.split(','))
        .map(str::trim)
        .rev()
        .collect();
    (target, format!("Route: {}\r\n", rr.join(", ")), to)
}

/// One whole call through `proxy`: INVITE, 200, ACK and BYE along the
/// recorded route, BYE's 200.
fn one_call(s: &UdpSocket, proxy: SocketAddr, i: u32) {
    let me = s.local_addr().expect("addr");
    let call = format!("k9-{i}");
    let head = |method: &str, uri: &str, routes: &str, cseq: u32, branch: &str, to: &str| {
        format!(
            "{method} {uri} SIP/2.0\r\n{routes}Via: SIP/2.0/UDP {me};branch=z9hG4bK{branch}\r\nMax-Forwards: 70\r\n\
             From: <sip:alice@{me}>;tag=a{i}\r\n{to}\r\nCall-ID: {call}\r\nCSeq: {cseq} {method}\r\n\
             Contact: <sip:alice@{me}>\r\nContent-Length: 0\r\n\r\n"
        )
    };
    let to = "To: <sip:+12155550100@127.0.0.1>".to_string();
    let invite = head(
        "INVITE",
        &format!("sip:+12155550100@{proxy}"),
        "",
        1,
        &format!("i{i}"),
        &to,
    );
    s.send_to(invite.as_bytes(), proxy).expect("send");
    let mut buf = vec![0u8; 65_536];
    let ok = loop {
        let n = s.recv(&mut buf).expect("a response");
        let m = String::from_utf8_lossy(&buf[..n]).into_owned();
        if m.starts_with("SIP/2.0 200") {
            break m;
        }
    };
    let (target, routes, to) = route_of(&ok);
    let target = target.as_str();
    let ack = head("ACK", target, &routes, 1, &format!("a{i}"), &to);
    s.send_to(ack.as_bytes(), proxy).expect("ack");
    let bye = head("BYE", target, &routes, 2, &format!("b{i}"), &to);
    s.send_to(bye.as_bytes(), proxy).expect("bye");
    loop {
        let n = s.recv(&mut buf).expect("the BYE's answer");
        let m = String::from_utf8_lossy(&buf[..n]).into_owned();
        if m.starts_with("SIP/2.0 200") && m.contains(" BYE\r\n") {
            return;
        }
    }
}

#[test]
fn a_kill_9_loses_no_record_of_a_call_that_had_ended() {
    let dir = tempdir("records-kill9");
    let gw = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let gw_port = gw.local_addr().expect("addr").port();
    socket_gateway(gw, None);
    let config = trunk_config(&dir, &[(gw_port, 1)]);
    // The gateway named by a name (resolved at start).
    let text = std::fs::read_to_string(&config).expect("config");
    let named = text.replace(
        &format!("127.0.0.1:{gw_port}"),
        &format!("localhost:{gw_port}"),
    );
    std::fs::write(&config, named).expect("config");
    let proxy = common::serve(&["--config", config.to_str().expect("utf-8")]);
    let caller = UdpSocket::bind("127.0.0.1:0").expect("bind");
    caller
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    for i in 0..30 {
        one_call(&caller, proxy.addr, i);
    }
    // SIGKILL right after the last BYE's 200 came back.
    drop(proxy);
    let r = records(&dir);
    let ids: std::collections::HashSet<String> = r
        .iter()
        .map(|x| x["call_id"].as_str().expect("call_id").to_owned())
        .collect();
    for i in 0..30 {
        assert!(
            ids.contains(&format!("k9-{i}")),
            "call {i} ended but its record is lost: {r:?}"
        );
    }
    assert_eq!(r.len(), 30);
}

/// INVITE, 200, ACK along the recorded route: the call is up; its
/// Call-ID.
fn answered_call(s: &UdpSocket, proxy: SocketAddr, call: &str) {
    let me = s.local_addr().expect("addr");
    let ok = invite_final(s, proxy, call);
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    let (target, routes, to) = route_of(&ok);
    let ack = format!(
        "ACK {target} SIP/2.0\r\n{routes}Via: SIP/2.0/UDP {me};branch=z9hG4bKack{call}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:alice@{me}>;tag=a1\r\n{to}\r\nCall-ID: {call}\r\nCSeq: 1 ACK\r\n\
         Content-Length: 0\r\n\r\n"
    );
    s.send_to(ack.as_bytes(), proxy).expect("ack");
}

/// An INVITE for the trunk from `s` as call `call`: its final answer.
fn invite_final(s: &UdpSocket, proxy: SocketAddr, call: &str) -> String {
    let me = s.local_addr().expect("addr");
    let invite = format!(
        "INVITE sip:+12155550100@{proxy} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK{call}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:alice@{me}>;tag=a1\r\nTo: <sip:+12155550100@127.0.0.1>\r\n\
         Call-ID: {call}\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@{me}>\r\nContent-Length: 0\r\n\r\n"
    );
    s.send_to(invite.as_bytes(), proxy).expect("send");
    final_from(s)
}

/// A proxy whose calls leave through a trunk to a gateway that answers
/// every call, keeping records: `calls` added to its `[calls]`, `more`
/// at the end of its configuration, `args` on its command line.
fn recording_proxy(dir: &Path, calls: &str, more: &str, args: &[&str]) -> Running {
    let gw = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let gw_port = gw.local_addr().expect("addr").port();
    socket_gateway(gw, None);
    let config = trunk_config(dir, &[(gw_port, 1)]);
    let text = std::fs::read_to_string(&config).expect("config");
    let text = text.replace("records = true\n", &format!("records = true\n{calls}")) + more;
    std::fs::write(&config, text).expect("config");
    let mut all = vec!["--config", config.to_str().expect("utf-8")];
    all.extend_from_slice(args);
    common::serve(&all)
}

/// No call leaves unrecorded, and one caller cannot fill the dialog
/// table: a caller past its share is refused 403 while others still
/// call; past the table's size every new call is refused 503.
#[test]
fn one_caller_cannot_fill_the_dialog_table_and_no_call_goes_unrecorded() {
    let dir = tempdir("dialog-shares");
    // Loopback held to the guard's limits, so each address is a caller.
    let proxy = recording_proxy(
        &dir,
        "max_dialogs = 3\nmax_dialogs_per_caller = 2\n",
        "[guard]\nexempt_loopback = false\n",
        &[],
    );
    // (The gateway's own address, 127.0.0.1, carries a carrier's calls:
    // held to no share.)
    let (mallory, _) = socket_at("127.0.0.3");
    answered_call(&mallory, proxy.addr, "m1");
    answered_call(&mallory, proxy.addr, "m2");
    let refused = invite_final(&mallory, proxy.addr, "m3");
    assert!(
        refused.starts_with("SIP/2.0 403 ")
            && refused.contains("too many calls in progress for this caller"),
        "{refused}"
    );
    // Another caller still gets through, until the table is full.
    let (other, _) = socket_at("127.0.0.2");
    answered_call(&other, proxy.addr, "o1");
    let full = invite_final(&other, proxy.addr, "o2");
    assert!(
        full.starts_with("SIP/2.0 503 ") && full.contains("Retry-After: 5"),
        "{full}"
    );
    let refused_total = |reason: &str| {
        metric(
            &proxy,
            &format!("sipsec_dialogs_refused_total{{reason=\"{reason}\"}}"),
        )
    };
    assert_eq!(refused_total("caller_share"), 1.0);
    assert_eq!(refused_total("full"), 1.0);
    assert_eq!(status(&proxy)["dialogs"]["active"], 3);
}

/// Call `call` from `s` as alice with her password: the INVITE is
/// challenged (407, acknowledged), sent again with credentials, and its
/// final answer returned; a 200 is acknowledged.
fn alice_calls(s: &UdpSocket, proxy: SocketAddr, call: &str) -> String {
    let me = s.local_addr().expect("addr");
    let ruri = format!("sip:+12155550100@{proxy}");
    let request = |method: &str, branch: &str, cseq: u32, to: &str, extra: &str| {
        format!(
            "{method} {ruri} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK{branch}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:alice@{proxy}>;tag=a1\r\n{to}\r\n\
             Call-ID: {call}\r\nCSeq: {cseq} {method}\r\nContact: <sip:alice@{me}>\r\n\
             {extra}Content-Length: 0\r\n\r\n"
        )
    };
    let to = "To: <sip:+12155550100@127.0.0.1>";
    let first = format!("{call}-1");
    s.send_to(request("INVITE", &first, 1, to, "").as_bytes(), proxy)
        .expect("send");
    let challenge = final_from(s);
    assert!(challenge.starts_with("SIP/2.0 407 "), "{challenge}");
    let to_tagged = header(&challenge, "To")[0].to_owned();
    s.send_to(request("ACK", &first, 1, &to_tagged, "").as_bytes(), proxy)
        .expect("ack");
    let ch = header(&challenge, "Proxy-Authenticate")[0]
        .split_once(':')
        .expect("value")
        .1
        .trim();
    let c = sip_core::auth::Challenge::parse(ch).expect("challenge parses");
    let nonce = c.nonce.expect("nonce");
    let response = sip_core::digest::response(&sip_core::digest::ResponseInput {
        algorithm: sip_core::digest::Algorithm::Md5,
        ha1: &sip_core::digest::ha1(
            sip_core::digest::Algorithm::Md5,
            "alice",
            "sipsec",
            "secret-alice",
        ),
        nonce,
        cnonce: "c",
        nc: "00000001",
        qop: Some(sip_core::digest::Qop::Auth),
        method: "INVITE",
        uri: &ruri,
        body: b"",
    });
    let creds = format!(
        "Proxy-Authorization: Digest username=\"alice\", realm=\"sipsec\", nonce=\"{nonce}\", \
         uri=\"{ruri}\", response=\"{response}\", algorithm=MD5, qop=auth, nc=00000001, cnonce=\"c\"\r\n"
    );
    let second = format!("{call}-2");
    s.send_to(request("INVITE", &second, 2, to, &creds).as_bytes(), proxy)
        .expect("send");
    let answer = final_from(s);
    if answer.starts_with("SIP/2.0 200 ") {
        let (target, routes, to) = route_of(&answer);
        let ack = format!(
            "ACK {target} SIP/2.0\r\n{routes}Via: SIP/2.0/UDP {me};branch=z9hG4bKack{call}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:alice@{proxy}>;tag=a1\r\n{to}\r\nCall-ID: {call}\r\n\
             CSeq: 2 ACK\r\nContent-Length: 0\r\n\r\n"
        );
        s.send_to(ack.as_bytes(), proxy).expect("ack");
    }
    answer
}

/// The next final response on `s`.
fn final_from(s: &UdpSocket) -> String {
    let mut buf = vec![0u8; 65_536];
    loop {
        let n = s.recv(&mut buf).expect("a response");
        let m = String::from_utf8_lossy(&buf[..n]).into_owned();
        if !m.starts_with("SIP/2.0 1") {
            return m;
        }
    }
}

/// An authenticated caller's share is the user's: calling from another
/// address does not get round it.
#[test]
fn an_authenticated_callers_share_is_the_users_from_any_address() {
    let dir = tempdir("dialog-user-share");
    let users = dir.join("users.tsv");
    common::import_users("alice,secret-alice\n", &dir, &users);
    let users = users.to_str().expect("utf-8");
    let proxy = recording_proxy(
        &dir,
        "max_dialogs_per_caller = 2\n",
        "",
        &["--auth", "--users", users],
    );
    let (home, _) = socket_at("127.0.0.1");
    let (away, _) = socket_at("127.0.0.5");
    for (s, call) in [(&home, "u1"), (&away, "u2")] {
        let ok = alice_calls(s, proxy.addr, call);
        assert!(ok.starts_with("SIP/2.0 200 "), "{ok}");
    }
    let refused = alice_calls(&away, proxy.addr, "u3");
    assert!(
        refused.starts_with("SIP/2.0 403 ")
            && refused.contains("too many calls in progress for this caller"),
        "{refused}"
    );
    assert_eq!(status(&proxy)["dialogs"]["active"], 2);
}

/// `sipsec ctl ARGS` against the proxy's endpoint with `token`.
fn ctl(proxy: &Running, token: &str, args: &[&str]) -> std::process::Output {
    let http = common::banner_http_addr(&proxy.banner).expect("http");
    Command::new(common::BIN)
        .arg("ctl")
        .args(args)
        .args(["--http", &http.to_string()])
        .env("SIPSEC_HTTP_TOKEN", token)
        .output()
        .expect("sipsec ctl runs")
}

#[test]
fn the_operator_ends_a_call_with_bye_both_ways_and_drains_a_gateway_only_with_the_token() {
    let dir = tempdir("manage");
    let gw = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let gw_port = gw.local_addr().expect("addr").port();
    let (tx, byes) = std::sync::mpsc::channel();
    socket_gateway(gw, Some(("BYE ", tx)));
    let config = trunk_config(&dir, &[(gw_port, 1)]);
    let token = "a-long-operator-token-0123456789";
    let mut text = std::fs::read_to_string(&config).expect("config");
    text = text.replacen("[calls]", &format!("http_token = \"{token}\"\n[calls]"), 1);
    std::fs::write(&config, text).expect("config");
    let proxy = common::serve(&["--config", config.to_str().expect("utf-8")]);
    let caller = UdpSocket::bind("127.0.0.1:0").expect("bind");
    caller
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    answered_call(&caller, proxy.addr, "op-1");

    // No token, a wrong one: 401, and the call goes on.
    let http = common::banner_http_addr(&proxy.banner)
        .expect("http")
        .to_string();
    let bare = http_get_method(&http, "DELETE", "/dialogs/op-1", None);
    assert!(bare.starts_with("HTTP/1.1 401"), "{bare}");
    let wrong = ctl(
        &proxy,
        "not-the-operator-token-000000000",
        &["dialogs", "end", "op-1"],
    );
    assert!(!wrong.status.success());
    let listed = ctl(&proxy, token, &["dialogs", "list"]);
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(
        listed.contains("op-1") && listed.contains("confirmed") && listed.contains("1 call(s)"),
        "{listed}"
    );

    // With it: BYE to both parties, the record written.
    let ended = ctl(&proxy, token, &["dialogs", "end", "op-1"]);
    assert!(
        ended.status.success(),
        "{}",
        String::from_utf8_lossy(&ended.stderr)
    );
    let to_gateway = byes
        .recv_timeout(Duration::from_secs(5))
        .expect("the gateway got a BYE");
    assert!(
        to_gateway.contains("Call-ID: op-1") && to_gateway.contains("tag=a1"),
        "{to_gateway}"
    );
    let mut buf = vec![0u8; 65_536];
    let n = caller.recv(&mut buf).expect("the caller got a BYE");
    let to_caller = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(to_caller.starts_with("BYE sip:alice@"), "{to_caller}");
    assert!(to_caller.contains("Call-ID: op-1"), "{to_caller}");
    // Unanswered, the BYE comes again (Timer E, same transaction);
    // answered, it stops.
    let n = caller.recv(&mut buf).expect("the BYE again");
    let again = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert_eq!(header(&again, "Via"), header(&to_caller, "Via"), "{again}");
    let ok = format!(
        "SIP/2.0 200 OK\r\n{}\r\n{}\r\n{}\r\nCall-ID: op-1\r\n{}\r\nContent-Length: 0\r\n\r\n",
        header(&again, "Via")[0],
        header(&again, "From")[0],
        header(&again, "To")[0],
        header(&again, "CSeq")[0],
    );
    caller.send_to(ok.as_bytes(), proxy.addr).expect("200");
    let answered = "sipsec_own_requests_total{outcome=\"answered\"}";
    let own = |name: &str| {
        let text = http_get_method(&http, "GET", "/metrics", Some(token));
        value_of(&text, name)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while own(answered) < 2.0 {
        assert!(Instant::now() < deadline, "both BYEs answered");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(own("sipsec_own_requests_retransmitted_total") >= 1.0);
    let r = records(&dir);
    assert_eq!(
        (r.len(), r[0]["disposition"].as_str()),
        (1, Some("ended")),
        "{r:?}"
    );

    // Drain the only gateway: new calls get 503; undrain: they go through.
    let drained = ctl(
        &proxy,
        token,
        &[
            "trunks",
            "drain",
            "carrier",
            &format!("127.0.0.1:{gw_port}"),
        ],
    );
    assert!(
        drained.status.success(),
        "{}",
        String::from_utf8_lossy(&drained.stderr)
    );
    let listed =
        String::from_utf8_lossy(&ctl(&proxy, token, &["trunks", "list"]).stdout).into_owned();
    assert!(listed.contains("drained"), "{listed}");
    let me = caller.local_addr().expect("addr");
    let invite = format!(
        "INVITE sip:+12155550100@{} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bKd1\r\nMax-Forwards: 70\r\n\
         From: <sip:alice@{me}>;tag=d1\r\nTo: <sip:+12155550100@127.0.0.1>\r\nCall-ID: d1\r\nCSeq: 1 INVITE\r\n\
         Content-Length: 0\r\n\r\n",
        proxy.addr
    );
    caller.send_to(invite.as_bytes(), proxy.addr).expect("send");
    let n = caller.recv(&mut buf).expect("an answer");
    assert!(
        buf[..n].starts_with(b"SIP/2.0 503"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    // Reload: behind the token too.
    let refused = http_get_method(&http, "POST", "/reload", None);
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    let reloaded = ctl(&proxy, token, &["reload"]);
    let said = String::from_utf8_lossy(&reloaded.stdout).into_owned();
    assert!(
        reloaded.status.success() && said.contains("authentication is off"),
        "{said}"
    );
    let back = ctl(
        &proxy,
        token,
        &[
            "trunks",
            "undrain",
            "carrier",
            &format!("127.0.0.1:{gw_port}"),
        ],
    );
    assert!(back.status.success());
    answered_call(&caller, proxy.addr, "op-2");
}

#[test]
fn trunks_reload_from_the_file_keeping_what_stays_and_refusing_a_broken_file() {
    let dir = tempdir("trunk-reload");
    let (a, b) = (
        UdpSocket::bind("127.0.0.1:0").expect("bind"),
        UdpSocket::bind("127.0.0.1:0").expect("bind"),
    );
    let (a_port, b_port) = (
        a.local_addr().expect("addr").port(),
        b.local_addr().expect("addr").port(),
    );
    let (a_tx, a_got) = std::sync::mpsc::channel();
    let (b_tx, b_got) = std::sync::mpsc::channel();
    socket_gateway(a, Some(("INVITE ", a_tx)));
    socket_gateway(b, Some(("INVITE ", b_tx)));
    let token = "a-long-operator-token-0123456789";
    let with_gateways = |gws: &[u16]| {
        let config = trunk_config(&dir, &gws.iter().map(|p| (*p, 1)).collect::<Vec<_>>());
        let text = std::fs::read_to_string(&config).expect("config");
        let text = text.replacen("[calls]", &format!("http_token = \"{token}\"\n[calls]"), 1);
        std::fs::write(&config, text).expect("config");
        config
    };
    let config = with_gateways(&[a_port]);
    let proxy = common::serve(&["--config", config.to_str().expect("utf-8")]);
    let caller = UdpSocket::bind("127.0.0.1:0").expect("bind");
    caller
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    answered_call(&caller, proxy.addr, "reload-1");
    a_got
        .recv_timeout(Duration::from_secs(5))
        .expect("A got the call");

    // B replaces A: the next call goes to B.
    with_gateways(&[b_port]);
    let said = ctl(&proxy, token, &["reload"]);
    let said = String::from_utf8_lossy(&said.stdout).into_owned();
    assert!(
        said.contains("trunks: 1 trunk(s), 1 gateway(s), 0 of them kept their state"),
        "{said}"
    );
    answered_call(&caller, proxy.addr, "reload-2");
    b_got
        .recv_timeout(Duration::from_secs(5))
        .expect("B got the call");

    // A broken file: refused, B stays.
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        text.replacen("gateways = [", "gateways = [\"nonsense\", ", 1),
    )
    .expect("config");
    let said = ctl(&proxy, token, &["reload"]);
    let said = String::from_utf8_lossy(&said.stdout).into_owned();
    assert!(
        said.contains("trunks kept:") && said.contains("nonsense"),
        "{said}"
    );
    answered_call(&caller, proxy.addr, "reload-3");
    b_got
        .recv_timeout(Duration::from_secs(5))
        .expect("B still gets calls");

    // SIGHUP reloads too: A and B, B keeping its state (its calls).
    with_gateways(&[a_port, b_port]);
    let hup = Command::new("kill")
        .args(["-HUP", &proxy.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(hup.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let http = common::banner_http_addr(&proxy.banner)
            .expect("http")
            .to_string();
        let s = http_get_method(&http, "GET", "/status", Some(token));
        let body = s.split("\r\n\r\n").nth(1).unwrap_or("");
        let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
        let gws = v["trunks"][0]["gateways"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if gws.len() == 2 {
            assert_eq!(gws[1]["calls"], 2, "{gws:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "SIGHUP never reloaded the trunks: {v}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A request `method path` to the operator endpoint, with `token` when
/// given; the whole response.
fn http_get_method(addr: &str, method: &str, path: &str, token: Option<&str>) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("http endpoint");
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}\r\n"
    )
    .expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("response");
    text
}

#[test]
fn a_carrier_that_challenges_is_answered_with_the_trunks_credentials() {
    let dir = tempdir("trunk-auth");
    let port = free_port();
    let _gw = gateway_playing(port, "uas_auth_gateway.xml");
    let config = trunk_config(&dir, &[(port, 1)]);
    let secret = dir.join("carrier.password");
    std::fs::write(&secret, "trunk-secret\n").expect("password file");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!(
        "username = \"trunkuser\"\npassword_file = \"{}\"\n",
        secret.display()
    ));
    std::fs::write(&config, &text).expect("config");
    let proxy = common::serve(&["--config", config.to_str().expect("utf-8")]);
    // SIPp's caller sees no challenge: 200 to its INVITE (CSeq 1), its
    // ACK and BYE (CSeq 2) along the route, 200 to the BYE; the gateway
    // checked the credentials (a wrong password gets 403, failing the
    // call) and saw the INVITE again with CSeq 2 and the BYE with 3.
    let (ok, out) = call(proxy.addr, "+12155550100", 20);
    assert!(ok, "{out}");
    let r = records(&dir);
    assert_eq!(r.len(), 20);
    assert!(r.iter().all(|x| x["disposition"] == "answered"), "{r:?}");
    drop(proxy);

    // The wrong password: the gateway refuses, the caller gets its 403.
    std::fs::write(&secret, "not-the-secret\n").expect("password file");
    let proxy = common::serve(&["--config", config.to_str().expect("utf-8")]);
    let (ok, out) = call(proxy.addr, "+12155550100", 1);
    assert!(!ok && out.contains("403"), "{out}");
}

/// `redis-server` on a free port, killed when dropped.
struct RedisServer(Child, u16);

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `redis-cli -p PORT ARGS`: what it printed.
fn redis_cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn with_the_redis_location_each_record_is_also_in_a_redis_stream() {
    let dir = tempdir("records-stream");
    let port = free_port();
    let redis = RedisServer(
        Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--save",
                "",
            ])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server runs (./setup.sh installs it)"),
        port,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while redis_cli(redis.1, &["PING"]).is_none_or(|p| !p.contains("PONG")) {
        assert!(
            Instant::now() < deadline,
            "redis-server did not answer PING"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let gw = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let gw_port = gw.local_addr().expect("addr").port();
    socket_gateway(gw, None);
    let config = trunk_config(&dir, &[(gw_port, 1)]);
    let mut text = std::fs::read_to_string(&config).expect("config");
    text = text.replacen(
        "[calls]",
        &format!("[location]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:{port}/0\"\n[calls]"),
        1,
    );
    std::fs::write(&config, text).expect("config");
    let proxy = common::serve(&["--config", config.to_str().expect("utf-8")]);
    let caller = UdpSocket::bind("127.0.0.1:0").expect("bind");
    caller
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    for i in 0..5 {
        one_call(&caller, proxy.addr, i);
    }
    assert_eq!(records(&dir).len(), 5, "the journal has every record");
    // The stream gets them from a thread of its own: wait for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = redis_cli(port, &["XLEN", "sipsec:calls"]).unwrap_or_default();
        if n.trim() == "5" {
            break;
        }
        assert!(Instant::now() < deadline, "the stream has {n:?} entries");
        std::thread::sleep(Duration::from_millis(50));
    }
    let entries = redis_cli(port, &["XRANGE", "sipsec:calls", "-", "+"]).expect("XRANGE");
    for i in 0..5 {
        assert!(
            entries.contains(&format!("\"call_id\":\"k9-{i}\"")),
            "{entries}"
        );
    }
    drop(proxy);
}

/// A UDP socket on `ip` (any port) whose reads wait 5 s, and its address.
fn socket_at(ip: &str) -> (UdpSocket, SocketAddr) {
    let s = UdpSocket::bind(format!("{ip}:0")).unwrap_or_else(|e| panic!("bind {ip}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let addr = s.local_addr().expect("addr");
    (s, addr)
}

/// The trunk configuration at `config` hides the inside from its trunk.
fn hide_topology(config: &Path) {
    let mut text = std::fs::read_to_string(config).expect("config");
    text.push_str("hide_topology = true\n");
    std::fs::write(config, text).expect("config");
}

/// A carrier's gateway that keeps every datagram it gets (what crossed to
/// the outside) and answers INVITE and BYE 200.
fn capturing_gateway(s: UdpSocket) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    let seen: std::sync::Arc<std::sync::Mutex<Vec<String>>> = std::sync::Arc::default();
    let keep = seen.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        let me = s.local_addr().expect("addr");
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            let m = String::from_utf8_lossy(&buf[..n]).into_owned();
            keep.lock().expect("capture").push(m.clone());
            if !(m.starts_with("INVITE ") || m.starts_with("BYE ")) {
                continue;
            }
            let mut r = String::from("SIP/2.0 200 OK\r\n");
            for name in ["Via", "Record-Route", "From", "Call-ID", "CSeq"] {
                for h in header(&m, name) {
                    r.push_str(h);
                    r.push_str("\r\n");
                }
            }
            let to = header(&m, "To")[0];
            r.push_str(to);
            if !to.contains("tag=") {
                r.push_str(";tag=carrier");
            }
            r.push_str(&format!(
                "\r\nContact: <sip:gw@{me}>\r\nContent-Length: 0\r\n\r\n"
            ));
            let _ = s.send_to(r.as_bytes(), from);
        }
    });
    seen
}

/// The phone's side of one call out through the proxy: INVITE, its 200
/// (checked to be as the phone sent it), ACK along the route; the route
/// for later requests.
fn inside_call(phone: &UdpSocket, proxy: SocketAddr, call: &str) -> (String, String, String) {
    inside_call_to(phone, proxy, &format!("sip:+12155550100@{proxy}"), call)
}

/// [`inside_call`] to `ruri`.
fn inside_call_to(
    phone: &UdpSocket,
    proxy: SocketAddr,
    ruri: &str,
    call: &str,
) -> (String, String, String) {
    let me = phone.local_addr().expect("addr");
    let invite = format!(
        "INVITE {ruri} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bKphone-{call}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:alice@inside.example>;tag=callertag\r\nTo: <sip:+12155550100@pstn.example>\r\n\
         Call-ID: {call}@{}\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@{me}>\r\nContent-Length: 0\r\n\r\n",
        me.ip()
    );
    phone.send_to(invite.as_bytes(), proxy).expect("send");
    let mut buf = vec![0u8; 65_536];
    let ok = loop {
        let n = phone.recv(&mut buf).expect("a response");
        let m = String::from_utf8_lossy(&buf[..n]).into_owned();
        if m.starts_with("SIP/2.0 200") {
            break m;
        }
    };
    assert!(ok.contains(&format!("Call-ID: {call}@{}", me.ip())), "{ok}");
    assert!(
        header(&ok, "Via")[0].contains(&format!("z9hG4bKphone-{call}")),
        "{ok}"
    );
    let (target, routes, to) = route_of(&ok);
    let ack = format!(
        "ACK {target} SIP/2.0\r\n{routes}Via: SIP/2.0/UDP {me};branch=z9hG4bKphack-{call}\r\nMax-Forwards: 70\r\n\
         From: <sip:alice@inside.example>;tag=callertag\r\n{to}\r\nCall-ID: {call}@{}\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n",
        me.ip()
    );
    phone.send_to(ack.as_bytes(), proxy).expect("ack");
    (target, routes, to)
}

#[test]
fn a_trunk_that_hides_the_topology_sees_nothing_of_the_inside() {
    let dir = tempdir("topology");
    let gw = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let gw_port = gw.local_addr().expect("addr").port();
    let carrier = gw.try_clone().expect("clone");
    let seen = capturing_gateway(gw);
    let config = trunk_config(&dir, &[(gw_port, 1)]);
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str("hide_topology = true\n");
    let token = "a-long-operator-token-0123456789";
    text = text.replacen("[calls]", &format!("http_token = \"{token}\"\n[calls]"), 1);
    std::fs::write(&config, text).expect("config");
    let proxy = common::serve(&["--config", config.to_str().expect("utf-8")]);
    // The inside phone is 127.0.0.2; the proxy and the carrier 127.0.0.1.
    let (phone, me) = socket_at("127.0.0.2");
    let mut buf = vec![0u8; 65_536];

    // Call 1: the phone hangs up.
    let (target, routes, to) = inside_call(&phone, proxy.addr, "inside-1");
    let bye = format!(
        "BYE {target} SIP/2.0\r\n{routes}Via: SIP/2.0/UDP {me};branch=z9hG4bKphbye\r\nMax-Forwards: 70\r\n\
         From: <sip:alice@inside.example>;tag=callertag\r\n{to}\r\nCall-ID: inside-1@127.0.0.2\r\n\
         CSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n"
    );
    phone.send_to(bye.as_bytes(), proxy.addr).expect("bye");
    let n = phone.recv(&mut buf).expect("the BYE's answer");
    let ok = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(
        ok.starts_with("SIP/2.0 200") && ok.contains("Call-ID: inside-1@127.0.0.2"),
        "{ok}"
    );

    // Call 2: the carrier hangs up, to the contact and route it was given.
    inside_call(&phone, proxy.addr, "inside-2");
    let invite = {
        let captured = seen.lock().expect("capture");
        captured
            .iter()
            .rev()
            .find(|m| m.starts_with("INVITE "))
            .expect("the carrier got the INVITE")
            .clone()
    };
    let contact = header(&invite, "Contact")[0]
        .split('<')
        .nth(1)
        .and_then(|c| c.split('>').next())
        .expect("contact")
        .to_string();
    let route = header(&invite, "Record-Route")
        .iter()
        .map(|h| h.split_once(':').expect("value").1.trim())
        .collect::<Vec<_>>()
        .join(", ");
    let from = header(&invite, "From")[0].replacen("From:", "To:", 1);
    let to = header(&invite, "To")[0].replacen("To:", "From:", 1);
    let call_id = header(&invite, "Call-ID")[0];
    let gw_me = carrier.local_addr().expect("addr");
    let bye = format!(
        "BYE {contact} SIP/2.0\r\nRoute: {route}\r\nVia: SIP/2.0/UDP {gw_me};branch=z9hG4bKcarrierbye\r\n\
         Max-Forwards: 70\r\n{to};tag=carrier\r\n{from}\r\n{call_id}\r\nCSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n"
    );
    carrier
        .send_to(bye.as_bytes(), proxy.addr)
        .expect("carrier's BYE");
    let n = phone
        .recv(&mut buf)
        .expect("the phone gets the carrier's BYE");
    let got = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(got.starts_with(&format!("BYE sip:alice@{me} ")), "{got}");
    assert!(got.contains("Call-ID: inside-2@127.0.0.2"), "{got}");
    let mut reply = String::from("SIP/2.0 200 OK\r\n");
    for name in ["Via", "From", "To", "Call-ID", "CSeq"] {
        for h in header(&got, name) {
            reply.push_str(h);
            reply.push_str("\r\n");
        }
    }
    reply.push_str(&format!(
        "Contact: <sip:alice@{me}>\r\nContent-Length: 0\r\n\r\n"
    ));
    phone
        .send_to(reply.as_bytes(), proxy.addr)
        .expect("the phone's 200");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let done = seen.lock().expect("capture").iter().any(|m| {
            m.starts_with("SIP/2.0 200")
                && m.contains(" BYE\r\n")
                && m.contains("z9hG4bKcarrierbye")
        });
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the carrier never got the 200 to its BYE"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // Call 3: the operator ends it; the carrier's BYE names the Call-ID
    // the carrier knows (sealed), not the inside one.
    inside_call(&phone, proxy.addr, "inside-3");
    let sealed = {
        let captured = seen.lock().expect("capture");
        let invite = captured.iter().rev().find(|m| m.starts_with("INVITE "));
        header(invite.expect("the third INVITE"), "Call-ID")[0].to_owned()
    };
    let ended = ctl(&proxy, token, &["dialogs", "end", "inside-3@127.0.0.2"]);
    assert!(
        ended.status.success(),
        "{}",
        String::from_utf8_lossy(&ended.stderr)
    );
    let n = phone
        .recv(&mut buf)
        .expect("the phone gets the operator's BYE");
    let got = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(got.contains("Call-ID: inside-3@127.0.0.2"), "{got}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !seen
        .lock()
        .expect("capture")
        .iter()
        .any(|m| m.starts_with("BYE ") && m.contains(&sealed))
    {
        assert!(
            Instant::now() < deadline,
            "the carrier never got the operator's BYE with {sealed}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // Nothing of the inside crossed: its address and port, Call-IDs,
    // branches.
    let captured = seen.lock().expect("capture");
    assert!(
        captured.len() >= 9,
        "INVITE, ACK, BYE, INVITE, ACK, 200, INVITE, ACK, BYE: {captured:?}"
    );
    for m in captured.iter() {
        for inside in [
            "127.0.0.2",
            &format!(":{}", me.port()),
            "inside-1",
            "inside-2",
            "inside-3",
            "z9hG4bKph",
        ] {
            assert!(
                !m.contains(inside),
                "{inside:?} crossed to the carrier:\n{m}"
            );
        }
    }
}

/// A UDP request or response read by `s` within its timeout.
fn read_one(s: &UdpSocket) -> String {
    let mut buf = vec![0u8; 65_536];
    let n = s.recv(&mut buf).expect("a message");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// `m`'s lines named `names`, in order, CRLF after each.
fn copied(m: &str, names: &[&str]) -> String {
    let mut out = String::new();
    for name in names {
        for h in header(m, name) {
            out.push_str(h);
            out.push_str("\r\n");
        }
    }
    out
}

/// Waits for the first message the carrier captured that `f` accepts.
fn captured_where(
    seen: &std::sync::Mutex<Vec<String>>,
    what: &str,
    f: impl Fn(&String) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(m) = seen.lock().expect("capture").iter().find(|m| f(m)) {
            return m.clone();
        }
        assert!(Instant::now() < deadline, "the carrier never got {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_inside_proxys_record_route_is_hidden_from_the_trunk_and_restored_inside() {
    let dir = tempdir("topology-rr");
    let gw = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let carrier = gw.try_clone().expect("clone");
    let gw_me = gw.local_addr().expect("addr");
    let seen = capturing_gateway(gw);
    let config = trunk_config(&dir, &[(gw_me.port(), 1)]);
    hide_topology(&config);
    let proxy = common::serve(&["--config", config.to_str().expect("utf-8")]);
    let p = proxy.addr;
    // An inside proxy on 127.0.0.3 record-routed the phone's INVITE.
    let (inner, inner_me) = socket_at("127.0.0.3");
    let (phone, me) = socket_at("127.0.0.2");
    let invite = format!(
        "INVITE sip:+12155550100@{p} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bKphone-rr\r\n\
         Record-Route: <sip:{inner_me};lr>\r\nMax-Forwards: 70\r\nFrom: <sip:alice@inside.example>;tag=rr1\r\n\
         To: <sip:+12155550100@pstn.example>\r\nCall-ID: rr-1@127.0.0.2\r\nCSeq: 1 INVITE\r\n\
         Contact: <sip:alice@{me}>\r\nContent-Length: 0\r\n\r\n"
    );
    phone.send_to(invite.as_bytes(), p).expect("invite");
    let ok = loop {
        let m = read_one(&phone);
        if m.starts_with("SIP/2.0 200") {
            break m;
        }
    };
    // Inside, the route set is whole again.
    let rr = header(&ok, "Record-Route").join("\n");
    assert!(
        rr.contains(&inner_me.to_string()) && rr.contains(";th"),
        "{ok}"
    );
    let sent = captured_where(&seen, "the INVITE", |m| m.starts_with("INVITE "));
    assert!(!sent.contains("127.0.0.3"), "{sent}");
    // The carrier's BYE along its route set reaches the inside proxy.
    let contact = header(&sent, "Contact")[0]
        .split('<')
        .nth(1)
        .and_then(|c| c.split('>').next())
        .expect("contact")
        .to_string();
    let route = header(&sent, "Record-Route")
        .iter()
        .map(|h| h.split_once(':').expect("value").1.trim())
        .collect::<Vec<_>>()
        .join(", ");
    let bye = format!(
        "BYE {contact} SIP/2.0\r\nRoute: {route}\r\nVia: SIP/2.0/UDP {gw_me};branch=z9hG4bKcarrierbye-rr\r\n\
         Max-Forwards: 70\r\nFrom: <sip:+12155550100@pstn.example>;tag=carrier\r\nTo: <sip:alice@inside.example>;tag=rr1\r\n\
         {}\r\nCSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n",
        header(&sent, "Call-ID")[0]
    );
    carrier.send_to(bye.as_bytes(), p).expect("bye");
    let got = read_one(&inner);
    assert!(got.starts_with("BYE sip:alice@"), "{got}");
    assert!(got.contains("Call-ID: rr-1@127.0.0.2"), "{got}");
    assert!(
        header(&got, "Route")[0].contains(&inner_me.to_string()),
        "{got}"
    );
}

#[test]
fn a_call_a_hiding_trunk_begins_sees_nothing_of_the_inside_callee() {
    let dir = tempdir("topology-in");
    let gw = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let config = trunk_config(&dir, &[(gw.local_addr().expect("addr").port(), 1)]);
    hide_topology(&config);
    an_outside_call_sees_nothing_of_the_inside_callee(gw, &config);
}

/// A carrier's (or peer's) call to bob, set up as far as bob's phone:
/// the proxy started with `config`, the outside on `gw` capturing what
/// it gets, bob registered from 127.0.0.2, the outside's INVITE (Call-ID
/// `call`) received by the phone.
struct OutsideCall {
    proxy: Running,
    carrier: UdpSocket,
    gw_me: SocketAddr,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    phone: UdpSocket,
    me: SocketAddr,
    invite: String,
}

fn outside_calls_bob(gw: UdpSocket, config: &Path, call: &str) -> OutsideCall {
    let gw_me = gw.local_addr().expect("addr");
    let carrier = gw.try_clone().expect("clone");
    let seen = capturing_gateway(gw);
    let proxy = common::serve(&["--config", config.to_str().expect("utf-8")]);
    let p = proxy.addr;
    let (phone, me) = socket_at("127.0.0.2");
    let register = format!(
        "REGISTER sip:{p} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bKphreg-{call}\r\nMax-Forwards: 70\r\n\
         From: <sip:bob@{p}>;tag=r1\r\nTo: <sip:bob@{p}>\r\nCall-ID: reg-{call}@127.0.0.2\r\nCSeq: 1 REGISTER\r\n\
         Contact: <sip:bob@{me}>\r\nExpires: 300\r\nContent-Length: 0\r\n\r\n"
    );
    phone.send_to(register.as_bytes(), p).expect("register");
    let r = read_one(&phone);
    assert!(r.starts_with("SIP/2.0 200"), "{r}");
    let invite = format!(
        "INVITE sip:bob@{p} SIP/2.0\r\nVia: SIP/2.0/UDP {gw_me};branch=z9hG4bKcarrierinv\r\nMax-Forwards: 70\r\n\
         From: <sip:+12155550199@pstn.example>;tag=c1\r\nTo: <sip:bob@{p}>\r\nCall-ID: {call}\r\n\
         CSeq: 1 INVITE\r\nContact: <sip:+12155550199@{gw_me}>\r\nContent-Length: 0\r\n\r\n"
    );
    carrier.send_to(invite.as_bytes(), p).expect("invite");
    let invite = loop {
        let m = read_one(&phone);
        if m.starts_with("INVITE ") {
            break m;
        }
    };
    assert!(invite.contains(&format!("Call-ID: {call}")), "{invite}");
    OutsideCall {
        proxy,
        carrier,
        gw_me,
        seen,
        phone,
        me,
        invite,
    }
}

/// The URI in a message's first Contact.
fn contact_uri(m: &str) -> String {
    header(m, "Contact")[0]
        .split('<')
        .nth(1)
        .and_then(|c| c.split('>').next())
        .expect("contact")
        .to_string()
}

#[test]
fn an_inside_proxy_before_the_callee_of_a_carriers_call_is_hidden_too() {
    let dir = tempdir("topology-in-rr");
    let gw = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let config = trunk_config(&dir, &[(gw.local_addr().expect("addr").port(), 1)]);
    hide_topology(&config);
    let (inner, inner_me) = socket_at("127.0.0.3");
    let OutsideCall {
        proxy,
        carrier,
        gw_me,
        seen,
        phone,
        me,
        invite: got,
    } = outside_calls_bob(gw, &config, "carrier-call-2");
    let p = proxy.addr;
    // The 200 as it leaves an inside proxy on 127.0.0.3 that
    // record-routed between sipsec and bob.
    let ok = format!(
        "SIP/2.0 200 OK\r\n{}Record-Route: <sip:{inner_me};lr>\r\n{}{};tag=bob2\r\nContact: <sip:bob@{me}>\r\n\
         Content-Length: 0\r\n\r\n",
        copied(&got, &["Via"]),
        copied(&got, &["Record-Route", "From", "Call-ID", "CSeq"]),
        header(&got, "To")[0]
    );
    phone.send_to(ok.as_bytes(), p).expect("200");
    let answer = captured_where(&seen, "the 200", |m| {
        m.starts_with("SIP/2.0 200") && m.contains(" INVITE\r\n")
    });
    assert!(
        !answer.contains("127.0.0.3") && !answer.contains("127.0.0.2"),
        "{answer}"
    );
    // The carrier's BYE along its route set reaches the inside proxy.
    let contact = contact_uri(&answer);
    let route = header(&answer, "Record-Route")[0]
        .split_once(':')
        .expect("value")
        .1
        .trim()
        .to_owned();
    let bye = format!(
        "BYE {contact} SIP/2.0\r\nRoute: {route}\r\nVia: SIP/2.0/UDP {gw_me};branch=z9hG4bKcarrierbye2\r\n\
         Max-Forwards: 70\r\nFrom: <sip:+12155550199@pstn.example>;tag=c1\r\nTo: <sip:bob@{p}>;tag=bob2\r\n\
         Call-ID: carrier-call-2\r\nCSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n"
    );
    carrier.send_to(bye.as_bytes(), p).expect("bye");
    let at_inner = read_one(&inner);
    assert!(
        at_inner.starts_with(&format!("BYE sip:bob@{me} ")),
        "{at_inner}"
    );
    assert!(
        header(&at_inner, "Route")[0].contains(&inner_me.to_string()),
        "{at_inner}"
    );
}

#[test]
fn a_call_a_hidden_peer_domain_begins_sees_nothing_of_the_inside_callee() {
    let dir = tempdir("topology-peer-in");
    let gw = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let config = dir.join("sipsec.toml");
    std::fs::write(
        &config,
        format!(
            "mode = \"proxy\"\nstateful = true\nudp = \"127.0.0.1:0\"\ntcp = \"off\"\nhttp = \"127.0.0.1:0\"\n\
             data_dir = \"{}\"\nhide_topology_peers = [\"b.example\"]\n[peers]\n\"b.example\" = \"{}\"\n",
            dir.join("data").display(),
            gw.local_addr().expect("addr")
        ),
    )
    .expect("config");
    an_outside_call_sees_nothing_of_the_inside_callee(gw, &config);
}

/// The outside party on `gw` (a hiding trunk's gateway or a hidden peer
/// domain's proxy) calls a phone registered from 127.0.0.2 through the
/// proxy configured by `config`; the phone answers and hangs up; nothing
/// of the phone crosses, the outside's Call-ID is kept.
fn an_outside_call_sees_nothing_of_the_inside_callee(gw: UdpSocket, config: &Path) {
    let OutsideCall {
        proxy,
        carrier,
        gw_me,
        seen,
        phone,
        me,
        invite: got,
    } = outside_calls_bob(gw, config, "carrier-call-1");
    let p = proxy.addr;
    let ok = format!(
        "SIP/2.0 200 OK\r\n{}{};tag=bobtag\r\nContact: <sip:bob@{me}>\r\nContent-Length: 0\r\n\r\n",
        copied(&got, &["Via", "Record-Route", "From", "Call-ID", "CSeq"]),
        header(&got, "To")[0]
    );
    phone.send_to(ok.as_bytes(), p).expect("200");
    let answer = captured_where(&seen, "the 200", |m| {
        m.starts_with("SIP/2.0 200") && m.contains(" INVITE\r\n")
    });
    assert!(answer.contains("Call-ID: carrier-call-1"), "{answer}");
    // The carrier's ACK goes to the (sealed) contact along the route.
    let contact = contact_uri(&answer);
    assert!(contact.contains("sip:th-"), "{answer}");
    let route = header(&answer, "Record-Route")
        .iter()
        .map(|h| h.split_once(':').expect("value").1.trim())
        .collect::<Vec<_>>()
        .join(", ");
    let to = header(&answer, "To")[0];
    let ack = format!(
        "ACK {contact} SIP/2.0\r\nRoute: {route}\r\nVia: SIP/2.0/UDP {gw_me};branch=z9hG4bKcarrierack\r\n\
         Max-Forwards: 70\r\nFrom: <sip:+12155550199@pstn.example>;tag=c1\r\n{to}\r\nCall-ID: carrier-call-1\r\n\
         CSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n"
    );
    carrier.send_to(ack.as_bytes(), p).expect("ack");
    let got_ack = read_one(&phone);
    assert!(
        got_ack.starts_with(&format!("ACK sip:bob@{me} ")),
        "{got_ack}"
    );

    // Bob hangs up along the route the INVITE recorded (reversed: the
    // callee's route set is the Record-Route in order).
    let routes = header(&got, "Record-Route")
        .iter()
        .map(|h| h.replacen("Record-Route:", "Route:", 1))
        .collect::<Vec<_>>()
        .join("\r\n");
    let bye = format!(
        "BYE sip:+12155550199@{gw_me} SIP/2.0\r\n{routes}\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bKbobbye\r\n\
         Max-Forwards: 70\r\nFrom: <sip:bob@{p}>;tag=bobtag\r\nTo: <sip:+12155550199@pstn.example>;tag=c1\r\n\
         Call-ID: carrier-call-1\r\nCSeq: 1 BYE\r\nContact: <sip:bob@{me}>\r\nContent-Length: 0\r\n\r\n"
    );
    phone.send_to(bye.as_bytes(), p).expect("bye");
    let done = read_one(&phone);
    assert!(
        done.starts_with("SIP/2.0 200") && done.contains("z9hG4bKbobbye"),
        "{done}"
    );
    let carrier_bye = captured_where(&seen, "bob's BYE", |m| m.starts_with("BYE "));
    assert!(
        carrier_bye.contains("Call-ID: carrier-call-1"),
        "{carrier_bye}"
    );

    // Nothing of the inside crossed: bob's address, port, branches.
    for m in seen.lock().expect("capture").iter() {
        for inside in [
            "127.0.0.2",
            &format!(":{}", me.port()),
            "z9hG4bKbob",
            "z9hG4bKph",
        ] {
            assert!(
                !m.contains(inside),
                "{inside:?} crossed to the carrier:\n{m}"
            );
        }
    }
}

#[test]
fn a_gateway_that_answers_408_is_failed_over_inside_the_transaction() {
    let dir = tempdir("trunk-408");
    let timing_out = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let t_port = timing_out.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        while let Ok((n, from)) = timing_out.recv_from(&mut buf) {
            let m = String::from_utf8_lossy(&buf[..n]).into_owned();
            if !m.starts_with("INVITE ") {
                continue;
            }
            let mut r = String::from("SIP/2.0 408 Request Timeout\r\n");
            for name in ["Via", "From", "Call-ID", "CSeq"] {
                for h in header(&m, name) {
                    r.push_str(h);
                    r.push_str("\r\n");
                }
            }
            r.push_str(header(&m, "To")[0]);
            r.push_str(";tag=late\r\nContent-Length: 0\r\n\r\n");
            let _ = timing_out.send_to(r.as_bytes(), from);
        }
    });
    let good = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let g_port = good.local_addr().expect("addr").port();
    socket_gateway(good, None);
    let config = trunk_config(&dir, &[(t_port, 1), (g_port, 1)]);
    let text = std::fs::read_to_string(&config).expect("config").replace(
        &format!("{{ addr = \"127.0.0.1:{g_port}\", weight = 1 }}"),
        &format!("{{ addr = \"127.0.0.1:{g_port}\", weight = 1, priority = 1 }}"),
    ) + "algorithm = \"priority\"\n";
    std::fs::write(&config, text).expect("config");
    let proxy = common::serve(&["--config", config.to_str().expect("utf-8")]);
    let caller = UdpSocket::bind("127.0.0.1:0").expect("bind");
    caller
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    // The first gateway (priority 0) answers 408: the call goes on to the
    // second inside its transaction and completes.
    one_call(&caller, proxy.addr, 408);
    let r = records(&dir);
    assert_eq!(r[0]["disposition"], "answered", "{r:?}");
}

#[test]
fn a_peer_domain_the_topology_is_hidden_from_sees_nothing_of_the_inside() {
    let dir = tempdir("topology-peer");
    let peer = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let peer_port = peer.local_addr().expect("addr").port();
    let seen = capturing_gateway(peer);
    let config = dir.join("sipsec.toml");
    std::fs::write(
        &config,
        format!(
            "mode = \"proxy\"\nstateful = true\nudp = \"127.0.0.1:0\"\ntcp = \"off\"\nhttp = \"off\"\n\
             data_dir = \"{}\"\nhide_topology_peers = [\"Carrier.example\"]\n\
             [peers]\n\"carrier.example\" = \"127.0.0.1:{peer_port}\"\n",
            dir.join("data").display()
        ),
    )
    .expect("config");
    let proxy = common::serve(&["--config", config.to_str().expect("utf-8")]);
    let (phone, me) = socket_at("127.0.0.2");
    inside_call_to(&phone, proxy.addr, "sip:bob@carrier.example", "inside-3");
    let captured = seen.lock().expect("capture");
    assert!(
        captured
            .iter()
            .any(|m| m.starts_with("INVITE sip:bob@carrier.example")),
        "{captured:?}"
    );
    for m in captured.iter() {
        for inside in [
            "127.0.0.2",
            &format!(":{}", me.port()),
            "inside-3",
            "z9hG4bKph",
        ] {
            assert!(!m.contains(inside), "{inside:?} crossed to the peer:\n{m}");
        }
    }
}

/// A 200 OK to the probe `options` (its Via, From, To, Call-ID, CSeq).
fn ok_for_probe(options: &str) -> String {
    let kept: String = options
        .split("\r\n")
        .filter(|l| {
            let name = l.split(':').next().unwrap_or("").to_ascii_lowercase();
            matches!(name.as_str(), "via" | "from" | "to" | "call-id" | "cseq")
        })
        .map(|l| format!("{l}\r\n"))
        .collect();
    format!("SIP/2.0 200 OK\r\n{kept}Content-Length: 0\r\n\r\n")
}

/// The next OPTIONS probe at `gw`, and where it came from.
fn next_probe(gw: &UdpSocket) -> (String, SocketAddr) {
    let mut b = [0u8; 4096];
    loop {
        let (n, from) = gw.recv_from(&mut b).expect("a probe in time");
        let m = String::from_utf8_lossy(&b[..n]).into_owned();
        if m.starts_with("OPTIONS ") {
            return (m, from);
        }
    }
}

/// A probe's answer counts only from the gateway asked and with the
/// probe's random token: forged 200 OKs — the probe's own, copied by
/// another host, and one from the gateway's address whose number is
/// right but whose token is guessed — leave a silent gateway down; its
/// own answer brings it up.
#[test]
fn a_forged_answer_to_a_probe_moves_no_gateway() {
    let dir = tempdir("trunk-forged-probe");
    let gw = UdpSocket::bind("127.0.0.1:0").expect("gateway socket");
    gw.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let port = gw.local_addr().expect("addr").port();
    let config = dir.join("sipsec.toml");
    std::fs::write(
        &config,
        format!(
            "mode = \"proxy\"\nstateful = true\nudp = \"127.0.0.1:0\"\ntcp = \"off\"\nhttp = \"127.0.0.1:0\"\n\
             data_dir = \"{}\"\n[[trunk]]\nname = \"carrier\"\nprefixes = [\"+1\"]\nprobe_every = 0.2\n\
             down_after = 1\nup_after = 1\ngateways = [{{ addr = \"127.0.0.1:{port}\" }}]\n",
            dir.join("data").display()
        ),
    )
    .expect("config");
    let proxy = common::serve(&["--config", config.to_str().expect("utf-8")]);
    wait_state(&proxy, 0, "down");
    let elsewhere = UdpSocket::bind("127.0.0.1:0").expect("socket");
    for _ in 0..3 {
        let (probe, from) = next_probe(&gw);
        let ok = ok_for_probe(&probe);
        elsewhere.send_to(ok.as_bytes(), from).expect("send");
        let call_id = ok
            .lines()
            .find(|l| l.starts_with("Call-ID: probe-"))
            .expect("the probe's Call-ID");
        let (number, rest) = call_id["Call-ID: probe-".len()..]
            .split_once('-')
            .expect("number and token");
        let host = rest.split_once('@').expect("host").1;
        let guessed = ok.replace(call_id, &format!("Call-ID: probe-{number}-0@{host}"));
        gw.send_to(guessed.as_bytes(), from).expect("send");
    }
    // The next probe leaves after those were read: still down.
    next_probe(&gw);
    assert_eq!(gateways(&proxy)[0]["state"], "down");
    let (probe, from) = next_probe(&gw);
    gw.send_to(ok_for_probe(&probe).as_bytes(), from)
        .expect("send");
    wait_state(&proxy, 0, "up");
}
