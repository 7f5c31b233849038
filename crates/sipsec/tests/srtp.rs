//! `sipsec bench srtp`: the quick run measures every profile on both
//! sides (ours and libsrtp on OpenSSL) and writes its tables and plots;
//! bad arguments get a clear error.

mod common;

use std::process::Command;

use common::{tempdir, BIN};

#[test]
fn srtp_bench_quick_measures_every_profile_on_both_sides() {
    let dir = tempdir("srtp-bench");
    let (json, md, html) = (
        dir.join("srtp.json"),
        dir.join("srtp.md"),
        dir.join("srtp.html"),
    );
    let out = Command::new(BIN)
        .args(["bench", "srtp", "--quick", "--json"])
        .arg(&json)
        .arg("--markdown")
        .arg(&md)
        .arg("--html")
        .arg(&html)
        .output()
        .expect("sipsec runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all: serde_json::Value = common::report_json(&json);
    let rows = all["per_packet"].as_array().expect("array");
    assert_eq!(rows.len(), 8, "every profile");
    for r in rows {
        for side in ["sipsec", "libsrtp"] {
            for op in ["protect_ns", "unprotect_ns"] {
                let v = r[side][op].as_array().expect("rounds");
                assert_eq!(v.len(), 2, "{r}");
                assert!(v.iter().all(|x| x.as_f64().expect("ns") > 0.0), "{r}");
            }
        }
        let steps = r["steps"]["protect"].as_array().expect("steps");
        let encryption = steps
            .iter()
            .find(|s| s[0] == "encryption")
            .expect("encryption step");
        assert!(encryption[1].as_f64().expect("ns") > 0.0, "{r}");
        assert!(r["steps"]["key_derivation_ns"].as_f64().expect("ns") > 0.0);
    }
    // Part two: a call without SRTP and one per profile, both directions.
    let calls = all["calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 18, "{all}");
    for c in calls {
        assert_eq!(c["stats"]["packets"], 50, "{c}");
        assert_eq!(c["rejected"], 0, "{c}");
        let ip = c["stats"]["ip_bps"].as_f64().expect("bps");
        assert!(ip > 70_000.0 && ip < 100_000.0, "about 80 kbit/s: {c}");
    }
    for needle in [
        "AES_192_CM_HMAC_SHA1_32",
        "AEAD_AES_256_GCM",
        "replay check",
        "calls through sipsec serve",
        "caller → callee",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    let md = std::fs::read_to_string(&md).expect("markdown");
    assert!(
        md.starts_with("Made 20") && md.contains("Command: `"),
        "{md}"
    );
    assert!(md.ends_with(text.as_ref()), "the tables as printed: {md}");
    let page = std::fs::read_to_string(&html).expect("html written");
    assert!(page.contains("<svg") && page.contains("per-step timings"));
    assert_eq!(
        common::assert_plots_readable(&page),
        6,
        "3 speed + 3 call plots"
    );
    common::assert_page_provenance(&page);
}

#[test]
fn srtp_bench_refuses_unknown_profiles() {
    let out = Command::new(BIN)
        .args(["bench", "srtp", "--profiles", "AES_CM_128_NULL"])
        .output()
        .expect("sipsec runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown SRTP profile"), "{err}");
}
