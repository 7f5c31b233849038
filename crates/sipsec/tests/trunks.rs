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

/// Whether a UDP socket is bound to `port` on this host (/proc/net/udp).
fn udp_bound(port: u16) -> bool {
    let hex = format!(":{port:04X} ");
    std::fs::read_to_string("/proc/net/udp").is_ok_and(|t| {
        t.lines().skip(1).any(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|a| format!("{a} ").ends_with(&hex))
        })
    })
}

fn gateway(port: u16) -> Gateway {
    let g = Gateway(
        Command::new("sipp")
            .arg("-sf")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../interop/sipp/uas_gateway.xml"))
            .args(["-aa", "-p", &port.to_string(), "-i", "127.0.0.1"])
            .args(["-nostdin", "-timeout", "300s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sipp runs (./setup.sh installs sip-tester)"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !udp_bound(port) {
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
    let scenario =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../interop/sipp/invite_trunk.xml");
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
            "100",
            "-l",
            "100",
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
    let text = http_get(&http.to_string(), "/metrics");
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
