//! Records the git commit the server is built from, for
//! `sipsec_build_info` and `sipsec --version` ("unknown" outside git),
//! and the version with semver build metadata naming a profile-guided
//! build (`+pgo`) or one instrumented to collect a profile
//! (`+instrumented`), so that a report says which kind it measured.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

include!("build_metadata.rs");

fn main() {
    println!(
        "cargo:rustc-env=SIPSEC_VERSION={}{}",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default(),
        build_metadata(&std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default())
    );
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SIPSEC_COMMIT={commit}");
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/refs/heads");
        // Only when it exists: cargo takes a missing file as changed, so
        // every build would compile the server again. Refs packed later
        // leave refs/heads, which is watched.
        let packed = format!("{dir}/packed-refs");
        if std::path::Path::new(&packed).exists() {
            println!("cargo:rerun-if-changed={packed}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build_metadata.rs");
}
