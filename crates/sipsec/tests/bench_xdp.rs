//! `sipsec bench xdp --server sipsec` end to end: a veth pair and a
//! namespace made by the command, `sipsec serve` in it with and without
//! `--udp-xdp`, a few thousand REGISTERs on each path, every one
//! answered, the namespace gone afterwards (run as root, as CI runs).

mod common;

use std::process::Command;

use common::BIN;

#[test]
fn both_paths_answer_every_register_and_the_namespace_goes() {
    let child = Command::new(BIN)
        .args(["bench", "xdp", "--server", "sipsec", "--rates", "2000"])
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
    for path in ["recvmmsg/sendmmsg", "AF_XDP"] {
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("| 2000 | {path} |")))
            .unwrap_or_else(|| panic!("no {path} row in\n{text}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(cells[4], "0", "failed REGISTERs on {path}: {row}");
        let answered: f64 = cells[3].parse().expect("answered/s");
        assert!(answered > 1500.0, "{row}");
    }
    assert!(text.contains("at 2000/s the socket path costs"), "{text}");
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
