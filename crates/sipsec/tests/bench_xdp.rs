//! `sipsec bench xdp --server null,sipsec` end to end: a veth pair and a
//! namespace made by the command, the null responder and `sipsec serve`
//! in it with and without AF_XDP, a few thousand REGISTERs on each path,
//! every one answered, sipsec past the kernel set against the null
//! responder on sockets, the namespace gone afterwards; and `sipsec
//! bench steer` (run as root, as CI runs).

mod common;

use std::process::Command;

use common::BIN;

#[test]
fn both_paths_answer_every_register_and_the_namespace_goes() {
    let child = Command::new(BIN)
        .args(["bench", "xdp", "--server", "null,sipsec", "--rates", "2000"])
        .args(["--duration", "1", "--rounds", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sipsec bench xdp runs");
    // Its namespace is named after its process id (times 16, plus a
    // sequence number).
    let ns = format!("sipsec-xdp-{}", u64::from(child.id()) * 16);
    let out = child.wait_with_output().expect("it ends");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (server, path) in ["null", "sipsec"]
        .into_iter()
        .flat_map(|s| [(s, "recvmmsg/sendmmsg"), (s, "AF_XDP")])
    {
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("| 2000 | {server} | {path} |")))
            .unwrap_or_else(|| panic!("no {server} {path} row in\n{text}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(cells[5], "0", "failed REGISTERs: {row}");
        let answered: f64 = cells[4].parse().expect("answered/s");
        assert!(answered > 1500.0, "{row}");
    }
    assert!(
        text.contains("at 2000/s sipsec's socket path costs"),
        "{text}"
    );
    assert!(
        text.contains("at 2000/s sipsec over AF_XDP against the null responder over sockets: "),
        "{text}"
    );
    let left = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip");
    let left = String::from_utf8_lossy(&left.stdout);
    assert!(
        !left
            .lines()
            .any(|l| l.split_whitespace().next() == Some(&ns)),
        "{ns} was left behind"
    );
}

/// `sipsec bench steer` times the Call-ID steering program on its four
/// datagrams, bounded as the server would load it or by `bpf_loop`, and
/// names the bound; a bound it does not know is refused with the ones
/// it does (root, as CI runs).
#[test]
fn the_steering_bench_times_the_program_with_each_bound() {
    let steer = |bound: &str| {
        Command::new(BIN)
            .args(["bench", "steer", "--runs", "1000", "--rounds", "1"])
            .args(["--bound", bound])
            .output()
            .expect("sipsec bench steer runs")
    };
    for bound in ["auto", "bpf_loop"] {
        let out = steer(bound);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{bound}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let named = ["may_goto", "bpf_loop"]
            .into_iter()
            .find(|b| text.contains(&format!("bounded by {b}")))
            .unwrap_or_else(|| panic!("no bound named in\n{text}"));
        assert!(bound == "auto" || named == bound, "{text}");
        let rows = text
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| datagram"));
        assert_eq!(rows.count(), 4, "{text}");
    }
    let out = steer("loop");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("may_goto") && err.contains("bpf_loop"),
        "{err}"
    );
}
