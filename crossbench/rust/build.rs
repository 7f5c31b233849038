//! Exports the locked versions of the measured crates (`Cargo.lock`) as
//! `LOCKED_<NAME>` so that `hello` names exactly what was timed.

use std::fs;

fn main() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    let lock = fs::read_to_string("Cargo.lock").unwrap_or_default();
    for name in ["aws-lc-rs", "aws-lc-sys", "rsa", "criterion"] {
        let version = lock
            .split("[[package]]")
            .find(|p| p.lines().any(|l| l.trim() == format!("name = \"{name}\"")))
            .and_then(|p| {
                p.lines()
                    .find_map(|l| l.trim().strip_prefix("version = \""))
                    .map(|v| v.trim_end_matches('"').to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        let var = name.replace('-', "_").to_uppercase();
        println!("cargo:rustc-env=LOCKED_{var}={version}");
    }
}
