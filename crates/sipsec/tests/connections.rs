//! `sipsec bench connections` end to end: thousands of TLS phones held on
//! their own connections to a real `sipsec serve`, registered and
//! refreshed, with the server's memory per connection under its target;
//! and the same load side by side with Kamailio over TCP; phones in
//! several processes over several nodes sharing a Redis location.

mod common;

use std::path::Path;
use std::process::Command;

use common::{tempdir, BIN};

fn outcomes(path: &Path) -> Vec<serde_json::Value> {
    let v = common::report_json(path);
    v.as_array().expect("one outcome per server").clone()
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn five_thousand_tls_phones_are_held_registered_and_refreshed() {
    let dir = tempdir("bench-connections");
    let (json, html) = (dir.join("c.json"), dir.join("c.html"));
    // The server may be another build than the generator (here the same
    // one, by another path).
    let server = dir.join("sipsec-under-test");
    std::os::unix::fs::symlink(BIN, &server).expect("link");
    let out = Command::new(BIN)
        .args(["bench", "connections", "--transport", "tls"])
        .args(["--connections", "5000", "--sources", "3"])
        .args(["--refresh-rate", "2500", "--hold", "1"])
        .arg("--sipsec-exe")
        .arg(&server)
        .arg("--json")
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .output()
        .expect("sipsec bench connections runs");
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    let all = outcomes(&json);
    let o = &all[0];
    assert_eq!(o["target"], "sipsec", "{o}");
    assert_eq!(o["registered"], 5000, "{o}");
    assert_eq!(o["refreshed"], 5000, "{o}");
    assert_eq!(o["open_failures"], serde_json::json!({}), "{o}");
    assert_eq!(o["refresh_failures"], serde_json::json!({}), "{o}");
    // A handful of reactor and worker threads, not one per connection.
    let threads = o["threads"].as_u64().expect("threads");
    assert!(threads < 32, "{threads} threads for 5,000 connections");
    // The connection layer's memory target: 20 kB per idle registered
    // TLS connection (binding, TLS session, buffers).
    let per = o["memory_per_connection"]
        .as_f64()
        .expect("memory measured");
    assert!(
        per > 0.0 && per <= 20_000.0,
        "{per} bytes per TLS connection"
    );
    assert!(o["server_cpu_us_per_refresh"].as_f64().is_some(), "{o}");
    let page = std::fs::read_to_string(&html).expect("html written");
    assert_eq!(page.matches("<svg").count(), 3, "memory, CPU, open rate");
    common::assert_plots_readable(&page);
    common::assert_page_provenance(&page);
    assert!(
        text.contains("5000 of 5000 connections registered"),
        "{text}"
    );
}

#[test]
fn the_post_quantum_and_classical_offers_are_measured_side_by_side() {
    let out = Command::new(BIN)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .args(["bench", "connections", "--transport", "tls"])
        .args(["--connections", "50", "--hold", "0"])
        .args(["--servers", "sipsec,kamailio"])
        .args(["--groups", "X25519MLKEM768,x25519"])
        .output()
        .expect("sipsec bench connections runs");
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    for column in [
        "| sipsec X25519MLKEM768 |",
        " sipsec x25519 |",
        " kamailio x25519 |",
        " sipsec X25519MLKEM768/sipsec x25519 |",
    ] {
        assert!(text.contains(column), "{column}: {text}");
    }
    assert!(
        text.contains("kamailio: skipped with the offer X25519MLKEM768"),
        "{text}"
    );
    // The hybrid's key shares make its handshake longer, both ways.
    let bytes = |group: &str| -> (u64, u64) {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("- {group}: {group}, ")))
            .unwrap_or_else(|| panic!("no bytes for {group}: {text}"));
        let n = |after: &str| -> u64 {
            line.split(after)
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .and_then(|v| v.parse().ok())
                .expect("bytes")
        };
        (n("client→server "), n("server→client "))
    };
    let (pq, classical) = (bytes("X25519MLKEM768"), bytes("x25519"));
    assert!(
        pq.0 > classical.0 + 1000 && pq.1 > classical.1 + 1000,
        "{text}"
    );
}

#[test]
fn each_server_key_is_measured_in_turn() {
    let out = Command::new(BIN)
        .args(["bench", "connections", "--transport", "tls"])
        .args(["--connections", "20", "--hold", "0"])
        .args(["--keys", "rsa-standard,ecdsa-p256", "--groups", "x25519"])
        .output()
        .expect("sipsec bench connections runs");
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("| sipsec rsa-standard | sipsec ecdsa-p256 |"),
        "{text}"
    );
    // An ECDSA certificate and signature are smaller than RSA-2048's.
    let down = |key: &str| -> u64 {
        let block = text
            .split(&format!("in memory, {key}):"))
            .nth(1)
            .unwrap_or_else(|| panic!("no bytes for {key}: {text}"));
        block
            .split("server→client ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|v| v.parse().ok())
            .expect("bytes")
    };
    assert!(down("ecdsa-p256") < down("rsa-standard"), "{text}");
    let bad = Command::new(BIN)
        .args([
            "bench",
            "connections",
            "--connections",
            "5",
            "--keys",
            "dsa",
        ])
        .output()
        .expect("runs");
    assert!(!bad.status.success());
    assert!(
        text_of(&bad).contains("\"dsa\": rsa-standard, rsa-crt"),
        "{}",
        text_of(&bad)
    );
}

fn text_of(o: &std::process::Output) -> String {
    text(o)
}

/// Phones refreshed twice before the measured refresh: each warm pass is
/// reported, and the measured one still counts every phone once.
#[test]
fn warm_refreshes_come_before_the_measured_one() {
    let dir = tempdir("bench-connections-warm");
    let json = dir.join("c.json");
    let out = Command::new(BIN)
        .args(["bench", "connections", "--transport", "tcp"])
        .args(["--connections", "300", "--refresh-rate", "3000"])
        .args(["--hold", "0", "--warm-refreshes", "2", "--json"])
        .arg(&json)
        .output()
        .expect("sipsec bench connections runs");
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    for pass in [
        "warm refresh 1 of 2: 300 refreshed",
        "warm refresh 2 of 2: 300 refreshed",
    ] {
        assert!(text.contains(pass), "{text}");
    }
    let o = &outcomes(&json)[0];
    assert_eq!(o["refreshed"], 300, "{o}");
    assert_eq!(o["refresh_failures"], serde_json::json!({}), "{o}");
    assert!(o["server_cpu_us_per_refresh"].as_f64().is_some(), "{o}");
}

#[test]
fn tcp_phones_side_by_side_with_kamailio() {
    side_by_side_with_kamailio("tcp", 1);
}

/// Browser-style phones: an HTTP upgrade, then REGISTERs in WebSocket
/// frames; Kamailio with kamailio-websocket-modules.
/// A server that cannot start says why in its own words: the run's
/// scratch directory (and the server's log in it) goes with the run, so
/// the error carries the log's last lines.
#[test]
fn a_server_that_fails_to_start_shows_its_log() {
    let dir = tempdir("bench-connections-bad-cfg");
    let cfg = dir.join("bad.cfg");
    std::fs::write(&cfg, "this is not a kamailio configuration ;;;\n").expect("cfg");
    let out = Command::new(BIN)
        .args(["bench", "connections", "--servers", "kamailio"])
        .args(["--transport", "tcp", "--connections", "10"])
        .arg("--kamailio-cfg")
        .arg(&cfg)
        .output()
        .expect("sipsec bench connections runs");
    let text = text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("exited at start"), "{text}");
    assert!(text.contains("its log ends:"), "{text}");
    assert!(text.contains("parse error in config file"), "{text}");
}

#[test]
fn websocket_phones_side_by_side_with_kamailio() {
    // Two rounds, the second in reverse order: medians and ranges.
    side_by_side_with_kamailio("ws", 2);
}

fn side_by_side_with_kamailio(transport: &str, rounds: usize) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempdir(&format!("bench-connections-kamailio-{transport}"));
    let json = dir.join("c.json");
    let out = Command::new(BIN)
        .current_dir(&root)
        .args(["bench", "connections", "--server", "sipsec,kamailio"])
        .args(["--transport", transport, "--connections", "400"])
        .args(["--refresh-rate", "1000", "--hold", "0.5"])
        .args(["--rounds", &rounds.to_string()])
        .arg("--json")
        .arg(&json)
        .output()
        .expect("sipsec bench connections runs");
    let text = text(&out);
    assert!(
        out.status.success(),
        "{text} (Kamailio comes from ./setup.sh)"
    );
    assert!(text.contains("| sipsec/kamailio |"), "{text}");
    assert!(
        !text.contains("Redis"),
        "no Redis rows without Redis: {text}"
    );
    let all = outcomes(&json);
    assert_eq!(all.len(), 2 * rounds, "{all:?}");
    for o in &all {
        assert_eq!(o["registered"], 400, "{o}");
        assert_eq!(o["refreshed"], 400, "{o}");
        assert_eq!(o["transport"], transport, "{o}");
    }
    let order: Vec<(&str, u64)> = all
        .iter()
        .map(|o| {
            (
                o["target"].as_str().unwrap_or("?"),
                o["round"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let expected = [
        ("sipsec", 1),
        ("kamailio", 1),
        ("kamailio", 2),
        ("sipsec", 2),
    ];
    assert_eq!(order, expected[..2 * rounds], "every other round reversed");
    let kamailio = all.iter().find(|o| o["target"] == "kamailio").expect("ran");
    assert!(
        kamailio["processes"].as_u64() > Some(1),
        "Kamailio's children are measured"
    );
    let refresh = text
        .lines()
        .find(|l| l.starts_with("| server CPU µs per refresh |"))
        .unwrap_or_else(|| panic!("{text}"));
    // Over rounds sipsec's figure is the median of its rounds, with their
    // range in brackets unless they agree at the printed precision.
    let mine: Vec<f64> = all
        .iter()
        .filter(|o| o["target"] == "sipsec")
        .filter_map(|o| o["server_cpu_us_per_refresh"].as_f64())
        .collect();
    assert_eq!(mine.len(), rounds, "{all:?}");
    let lo = mine.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = mine.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mid = mine.iter().sum::<f64>() / rounds as f64; // one or two rounds
    let cell = if format!("{lo:.1}") == format!("{hi:.1}") {
        format!("{mid:.1}")
    } else {
        format!("{mid:.1} ({lo:.1}–{hi:.1})")
    };
    assert!(
        refresh.starts_with(&format!("| server CPU µs per refresh | {cell} |")),
        "{refresh} from {mine:?}"
    );
}

/// Past one process's descriptor limit the phones run in several
/// processes and sipsec in several nodes sharing a real Redis location:
/// the 100,000-phone run, small.
#[test]
fn phones_in_several_processes_are_spread_over_nodes_sharing_redis() {
    let dir = tempdir("bench-connections-nodes");
    let json = dir.join("c.json");
    let out = Command::new(BIN)
        .args(["bench", "connections", "--transport", "tls"])
        .args(["--connections", "600", "--sources", "2"])
        .args(["--nodes", "2", "--phone-processes", "3"])
        .args(["--refresh-rate", "1000", "--hold", "1"])
        .arg("--json")
        .arg(&json)
        .output()
        .expect("sipsec bench connections runs");
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("(2 nodes, location in Redis on 127.0.0.1:"),
        "{text}"
    );
    assert!(
        text.contains("| of the server's: Redis CPU µs per refresh |"),
        "{text}"
    );
    let all = outcomes(&json);
    let o = &all[0];
    assert_eq!(o["registered"], 600, "{o}");
    assert_eq!(o["refreshed"], 600, "{o}");
    assert_eq!(o["open_failures"], serde_json::json!({}), "{o}");
    assert_eq!(o["refresh_failures"], serde_json::json!({}), "{o}");
    assert_eq!(o["nodes"], 2, "{o}");
    assert_eq!(o["phone_processes"], 3, "{o}");
    // Two nodes and their Redis are measured together.
    assert_eq!(o["processes"], 3, "{o}");
    // Redis' part is reported apart, and is part of the whole.
    let redis = o["redis_memory_held"].as_u64().expect("Redis memory");
    assert!(
        redis > 0 && redis < o["memory_held"].as_u64().unwrap(),
        "{o}"
    );
    assert!(o["redis_cpu_us_per_refresh"].as_f64().is_some(), "{o}");
}

/// A phone process told nonsense says so and stops.
#[test]
fn a_phone_process_refuses_a_spec_it_cannot_read() {
    use std::io::Write;
    let mut child = Command::new(BIN)
        .args(["bench", "phones"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(b"open 100 phones please\n")
        .expect("written");
    let out = child.wait_with_output().expect("ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("a phones spec was expected on stdin"), "{err}");
    assert!(out.stdout.is_empty(), "no tally for nonsense");
}

#[test]
fn bad_arguments_are_refused_before_anything_starts() {
    for (args, want) in [
        (&["--connections", "0"][..], "must be positive"),
        (&["--nodes", "0"][..], "must be positive"),
        (
            &[
                "--server",
                "kamailio",
                "--nodes",
                "2",
                "--kamailio-cfg",
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../../interop/kamailio/kamailio.cfg"
                ),
            ][..],
            "Kamailio runs as one server",
        ),
        (&["--server", "asterisk"][..], "unknown server \"asterisk\""),
        (&["--refresh-rate=-1"][..], "must be positive"),
        (&["--cert", "/nonexistent.pem"][..], "--key"),
        (
            &["--sipsec-exe", "/nonexistent/sipsec"][..],
            "no such sipsec build",
        ),
    ] {
        let out = Command::new(BIN)
            .args(["bench", "connections"])
            .args(args)
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
