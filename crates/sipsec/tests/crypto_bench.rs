//! `sipsec crypto-bench` end to end: every adapter (C, Go, Python ×2,
//! Rust) is built and started, cross-checked and timed in quick mode; a
//! broken adapter stops the run at the cross-check with the pair named.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn crossbench() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crossbench")
}

fn sipsec() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sipsec"))
}

#[test]
fn quick_mode_cross_checks_and_times_every_language() {
    let dir = common::tempdir("crypto-bench-quick");
    let json = dir.join("rows.json");
    let keys = dir.join("keys");
    let out = sipsec()
        .args(["crypto-bench", "--quick", "--crossbench"])
        .arg(crossbench())
        .arg("--build-dir")
        .arg(dir.join("build"))
        .arg("--keys-dir")
        .arg(&keys)
        .arg("--json")
        .arg(&json)
        .arg("--csv")
        .arg(dir.join("rows.csv"))
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // 5 implementations × 5 implementations, one 2048-bit key.
    assert!(err.contains("cross-check: 25 pairs agree"), "{err}");
    let rows: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("parses");
    let rows = rows.as_array().expect("array");
    let ids = [
        "c-openssl",
        "go-crypto-rsa",
        "python-cryptography",
        "python-pycryptodome",
        "rust-rsa-variants",
    ];
    for id in ids {
        for (op, bits) in [
            ("keygen", 1024),
            ("encrypt", 2048),
            ("decrypt", 2048),
            ("sign", 2048),
            ("verify", 2048),
        ] {
            let r = rows
                .iter()
                .find(|r| r["implementation"] == id && r["operation"] == op && r["bits"] == bits)
                .unwrap_or_else(|| panic!("no {op} {bits} row for {id}"));
            assert!(r["mean_us"].as_f64().expect("mean") > 0.0, "{r}");
        }
    }
    assert_eq!(rows.len(), ids.len() * 5);
    let pem = std::fs::read_to_string(keys.join("rsa-2048-crt.pem")).expect("shared key");
    assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"));
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("### decrypt") && md.contains("**"), "{md}");
}

#[test]
fn a_wrong_plaintext_stops_the_run_at_the_cross_check() {
    let dir = common::tempdir("crypto-bench-broken");
    let copy = dir.join("crossbench");
    std::fs::create_dir_all(copy.join("python")).expect("dir");
    std::fs::copy(crossbench().join("protocol.md"), copy.join("protocol.md")).expect("copy");
    let good = std::fs::read_to_string(crossbench().join("python/adapter.py")).expect("adapter");
    let line = r#"return {"msg": lib.decryptor(keys[req["key"]])(bytes.fromhex(req["ct"])).hex()}"#;
    assert!(good.contains(line), "the adapter's decrypt line moved");
    let broken = good.replace(
        line,
        r#"return {"msg": lib.decryptor(keys[req["key"]])(bytes.fromhex(req["ct"]))[::-1].hex()}"#,
    );
    std::fs::write(copy.join("python/adapter.py"), broken).expect("write");
    let out = sipsec()
        .args([
            "crypto-bench",
            "--quick",
            "--langs",
            "rust,python",
            "--crossbench",
        ])
        .arg(&copy)
        .arg("--build-dir")
        .arg(dir.join("build"))
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "cross-check failed: python-cryptography decryption of rust-rsa-variants's RSA-2048"
        ),
        "{err}"
    );
}

#[test]
fn bad_arguments_are_named() {
    for (args, want) in [
        (vec!["--langs", "cobol"], "unknown language \"cobol\""),
        (vec!["--sizes", "1000"], "--sizes: 1000"),
        (vec!["--ops", "fly"], "unknown operation \"fly\""),
        (vec!["--reps", "0"], "must be positive"),
        (
            vec!["--crossbench", "/nonexistent"],
            "not the crossbench folder",
        ),
    ] {
        let mut cmd = sipsec();
        cmd.arg("crypto-bench").args(&args);
        if !args.contains(&"--crossbench") {
            cmd.arg("--crossbench").arg(crossbench());
        }
        let out = cmd
            .arg("--build-dir")
            .arg(common::tempdir("crypto-bench-args").join("b"))
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
