//! `sipsec crypto-bench` end to end: every adapter (C, C++, Go, Java ×2,
//! Python ×2, Rust ×3) is built and started, cross-checked and timed in
//! quick mode with the plain timer and its language's framework; a broken
//! adapter stops the run at the cross-check with the pair named.

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
    let results = dir.join("results");
    let keys = dir.join("keys");
    let out = sipsec()
        .args(["crypto-bench", "--quick", "--crossbench"])
        .arg(crossbench())
        // Built once per target dir: the Rust adapters take a minute or two.
        .arg("--build-dir")
        .arg(Path::new(env!("CARGO_TARGET_TMPDIR")).join("crossbench"))
        .arg("--keys-dir")
        .arg(&keys)
        .arg("--out")
        .arg(&results)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // 2048 bits: 10 implementations take the CRT key (100 pairs), 4 the
    // standard key (16), 2 the 3-prime key (4).
    assert!(err.contains("cross-check: 120 pairs agree"), "{err}");
    assert!(err.contains("[62/62]"), "progress: {err}");
    let report = common::report_json(&results.join("results.json"));
    let rows = report["rows"].as_array().expect("rows");
    let framework = report["framework"].as_array().expect("framework rows");
    let ids = [
        ("c-openssl", ""),
        ("cpp-cryptopp", "Google Benchmark"),
        ("go-crypto-rsa", "testing.B"),
        ("java-jca", "JMH"),
        ("java-bouncycastle", "JMH"),
        ("python-cryptography", "pytest-benchmark"),
        ("python-pycryptodome", "pytest-benchmark"),
        ("rust-rsa-variants", "criterion"),
        ("rust-aws-lc-rs", "criterion"),
        ("rust-rustcrypto-rsa", "criterion"),
    ];
    for (id, fw) in ids {
        for op in ["keygen", "encrypt", "decrypt", "sign", "verify"] {
            let find = |rows: &[serde_json::Value]| {
                rows.iter()
                    .find(|r| {
                        r["implementation"] == id
                            && r["operation"] == op
                            && r["bits"] == 2048
                            && r["variant"] == "crt"
                    })
                    .cloned()
            };
            let r = find(rows).unwrap_or_else(|| panic!("no {op} row for {id}"));
            assert!(r["mean_us"].as_f64().expect("mean") > 0.0, "{r}");
            match find(framework) {
                Some(f) if !fw.is_empty() => {
                    assert!(f["framework"].as_str().unwrap().starts_with(fw), "{f}");
                    assert!(f["mean_us"].as_f64().expect("mean") > 0.0, "{f}");
                    assert!(f["ratio"].as_f64().expect("ratio") > 0.0, "{f}");
                }
                None if fw.is_empty() => {}
                other => panic!("{id} {op}: framework row {other:?}, expected {fw:?}"),
            }
        }
    }
    // The key variants: standard in OpenSSL (C, rsa-variants) and the JCA
    // providers, 3-prime in OpenSSL.
    for (variant, who) in [
        (
            "standard",
            &[
                "c-openssl",
                "java-jca",
                "java-bouncycastle",
                "rust-rsa-variants",
            ][..],
        ),
        ("multiprime", &["c-openssl", "rust-rsa-variants"][..]),
    ] {
        for op in ["decrypt", "sign"] {
            let mut got: Vec<&str> = rows
                .iter()
                .filter(|r| r["operation"] == op && r["variant"] == variant)
                .map(|r| r["implementation"].as_str().unwrap())
                .collect();
            got.sort_unstable();
            let mut want = who.to_vec();
            want.sort_unstable();
            assert_eq!(got, want, "{op} {variant}");
        }
    }
    assert_eq!(rows.len(), 62);
    assert_eq!(framework.len(), 53);
    for v in ["crt", "standard", "multiprime"] {
        let pem = std::fs::read_to_string(keys.join(format!("rsa-2048-{v}.pem"))).expect("key");
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"));
    }
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("### decrypt, crt key"), "{md}");
    assert!(md.contains("## Framework vs plain timer"), "{md}");
    let html = std::fs::read_to_string(results.join("index.html")).expect("html");
    // One repetition per cell: nothing ranked, no interval claimed.
    for text in [md.as_ref(), err.as_ref(), html.as_str()] {
        let lower = text.to_lowercase();
        assert!(!lower.contains("fastest"), "a ranking from n=1: {text}");
        assert!(!text.contains("**"), "a winner in bold from n=1: {text}");
        assert!(!text.contains("± 0.0 ("), "an interval from n=1: {text}");
        assert!(text.contains("n=1"), "{text}");
    }
    assert!(md.contains("Not ranked: a ranking needs at least 5 repetitions"));
    assert_eq!(html.matches("<svg").count(), 9, "one plot per table");
    assert_eq!(common::assert_plots_readable(&html), 9);
    common::assert_page_provenance(&html);
    assert!(results.join("plots/crypto-decrypt-crt-key.svg").is_file());
    let csv = std::fs::read_to_string(results.join("results.csv")).expect("csv");
    assert_eq!(csv.lines().count(), 63);
}

#[test]
fn a_wrong_plaintext_stops_the_run_at_the_cross_check() {
    let dir = common::tempdir("crypto-bench-broken");
    let copy = broken_copy(
        &dir,
        r#"return {"msg": lib.decryptor(keys[req["key"]])(bytes.fromhex(req["ct"])).hex()}"#,
        r#"return {"msg": lib.decryptor(keys[req["key"]])(bytes.fromhex(req["ct"]))[::-1].hex()}"#,
    );
    let out = sipsec()
        .args([
            "crypto-bench",
            "--quick",
            "--langs",
            "c,python",
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
            "cross-check failed: python-cryptography decryption of c-openssl's RSA-2048 crt (k2048)"
        ),
        "{err}"
    );
}

/// A copy of the C and Python adapters, `find` replaced in the Python one.
fn broken_copy(dir: &Path, find: &str, replace: &str) -> PathBuf {
    let copy = dir.join("crossbench");
    std::fs::create_dir_all(copy.join("python")).expect("dir");
    std::fs::create_dir_all(copy.join("c")).expect("dir");
    std::fs::copy(crossbench().join("protocol.md"), copy.join("protocol.md")).expect("copy");
    std::fs::copy(crossbench().join("c/main.c"), copy.join("c/main.c")).expect("copy");
    let good = std::fs::read_to_string(crossbench().join("python/adapter.py")).expect("adapter");
    assert!(good.contains(find), "the adapter's line moved: {find}");
    std::fs::write(copy.join("python/adapter.py"), good.replace(find, replace)).expect("write");
    copy
}

/// Runs crypto-bench in quick mode on the adapters in `copy` with `args`,
/// the JSON and HTML reports (only) into `dir`: the exit code, stderr and
/// the JSON.
fn run_on(copy: &Path, dir: &Path, args: &[&str]) -> (Option<i32>, String, serde_json::Value) {
    let (json, html) = (dir.join("r.json"), dir.join("r.html"));
    let out = sipsec()
        .args(["crypto-bench", "--quick", "--variants", "crt"])
        .args(args)
        .arg("--crossbench")
        .arg(copy)
        .arg("--build-dir")
        .arg(dir.join("build"))
        .arg("--json")
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .current_dir(dir)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(html.is_file(), "--html written: {err}");
    assert!(
        !dir.join("target").exists(),
        "only what was asked for, not the default directory"
    );
    let report = std::fs::read(&json)
        .map(|j| serde_json::from_slice(&j).expect("parses"))
        .unwrap_or_else(|e| panic!("no {} ({e}): {err}", json.display()));
    (out.status.code(), err, report)
}

#[test]
fn a_failing_cell_is_named_and_the_others_are_kept() {
    let dir = common::tempdir("crypto-bench-cell");
    let copy = broken_copy(
        &dir,
        "    if what == \"sign\":\n        return lib.signer(key), (msg,)",
        "    if what == \"sign\":\n        raise RuntimeError(\"sign broke\")",
    );
    let (code, err, report) = run_on(
        &copy,
        &dir,
        &[
            "--langs",
            "c,python",
            "--ops",
            "encrypt,sign",
            "--framework-seconds",
            "0",
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("2 cells failed"), "{err}");
    assert!(
        err.contains("plain timer sign 2048 crt (190 B): python-cryptography: bench failed: RuntimeError: sign broke"),
        "{err}"
    );
    let rows = report["rows"].as_array().expect("rows");
    let has = |id: &str, op: &str| {
        rows.iter()
            .any(|r| r["implementation"] == id && r["operation"] == op)
    };
    assert!(has("c-openssl", "sign") && has("python-cryptography", "encrypt"));
    assert!(!has("python-cryptography", "sign") && !has("python-pycryptodome", "sign"));
    assert_eq!(report["failures"].as_array().expect("failures").len(), 2);
}

#[test]
fn a_hung_adapter_is_stopped_after_the_call_timeout() {
    let dir = common::tempdir("crypto-bench-hang");
    let copy = broken_copy(
        &dir,
        "    if what == \"sign\":\n        return lib.signer(key), (msg,)",
        "    if what == \"sign\":\n        time.sleep(3600)",
    );
    let (code, err, report) = run_on(
        &copy,
        &dir,
        &[
            "--langs",
            "python",
            "--ops",
            "sign,verify",
            "--framework-seconds",
            "0",
            "--call-timeout",
            "3",
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("python-cryptography: no answer to bench within 3 s; the adapter was stopped"),
        "{err}"
    );
    // Its later cells fail at once; the other adapter's are unaffected
    // until it hangs in turn.
    assert!(
        err.contains("python-cryptography: the adapter stopped answering (bench)"),
        "{err}"
    );
    assert!(err.contains("4 cells failed"), "{err}");
    assert_eq!(report["failures"].as_array().expect("failures").len(), 4);
}

#[test]
fn bad_arguments_are_named() {
    for (args, want) in [
        (vec!["--langs", "cobol"], "--langs: unknown value \"cobol\""),
        (vec!["--sizes", "1000"], "--sizes: 1000"),
        (vec!["--ops", "fly"], "--ops: unknown value \"fly\""),
        (
            vec!["--variants", "crt,octo"],
            "--variants: unknown value \"octo\"",
        ),
        (vec!["--variants", "standard"], "crt is needed"),
        (vec!["--reps", "0"], "must be positive"),
        (vec!["--keygen-iterations", "0"], "must be positive"),
        (vec!["--framework-seconds", "-1"], "--framework-seconds"),
        (vec!["--call-timeout", "0"], "--call-timeout"),
        (
            vec!["--crossbench", "/nonexistent"],
            "not the crossbench folder",
        ),
    ] {
        let dir = common::tempdir("crypto-bench-args");
        let mut cmd = sipsec();
        cmd.arg("crypto-bench").args(&args);
        if !args.contains(&"--crossbench") {
            cmd.arg("--crossbench").arg(crossbench());
        }
        let out = cmd
            .arg("--build-dir")
            .arg(dir.join("b"))
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn missing_toolchains_are_all_named_with_what_installs_them() {
    let dir = common::tempdir("crypto-bench-missing");
    let empty = dir.join("bin");
    std::fs::create_dir_all(&empty).expect("dir");
    let out = sipsec()
        .args(["crypto-bench", "--quick", "--langs", "go,python,java"])
        .arg("--crossbench")
        .arg(crossbench())
        .arg("--build-dir")
        .arg(dir.join("build"))
        .env("PATH", &empty)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for want in [
        "go: Go (Debian: golang-go)",
        "python: Python 3",
        "python: the Python package pycryptodome (pip)",
        "java: a JDK (Debian: default-jdk-headless)",
        "java: Maven",
        "`./setup.sh --crypto-bench` (or run again with --install)",
    ] {
        assert!(err.contains(want), "{want}: {err}");
    }
    assert!(!dir.join("build/go-crypto-rsa").exists(), "nothing built");
}

#[test]
fn install_does_nothing_when_the_adapters_have_what_they_need() {
    let dir = common::tempdir("crypto-bench-install");
    let out = sipsec()
        .args(["crypto-bench", "--install", "--quick", "--langs", "c"])
        .args([
            "--ops",
            "encrypt",
            "--variants",
            "crt",
            "--framework-seconds",
            "0",
        ])
        .arg("--crossbench")
        .arg(crossbench())
        .arg("--build-dir")
        .arg(dir.join("build"))
        .arg("--out")
        .arg(dir.join("results"))
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("--install: the adapters have what they need"),
        "{err}"
    );
    assert!(err.contains("[1/1] c-openssl"), "{err}");
}
