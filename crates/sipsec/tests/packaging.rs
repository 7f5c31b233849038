//! What a packager installs: shell completions and manual pages generated
//! from the command line, a hardened systemd unit that verifies, a licence.

mod common;

use std::path::Path;
use std::process::Command;

use common::{tempdir, BIN};

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn completions_load_in_bash_and_name_the_subcommands() {
    let dir = tempdir("pkg-completions");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = Command::new(BIN)
            .args(["completions", shell])
            .output()
            .expect("runs");
        assert!(out.status.success(), "{shell}: {}", common::text(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("serve") && text.contains("drain-timeout"),
            "{shell}"
        );
        std::fs::write(dir.join(shell), &out.stdout).expect("write");
    }
    // Bash loads the script and registers the completion function.
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {} && complete -p sipsec",
            dir.join("bash").display()
        ))
        .output()
        .expect("bash");
    assert!(out.status.success(), "{}", common::text(&out));
    assert!(common::text(&out).contains("-F _sipsec sipsec"));
    let bad = Command::new(BIN)
        .args(["completions", "tcsh"])
        .output()
        .expect("runs");
    assert!(!bad.status.success());
    assert!(
        common::text(&bad).contains("possible values"),
        "{}",
        common::text(&bad)
    );
}

/// Manual pages for every subcommand; the systemd unit checks out with
/// `systemd-analyze verify`, including its `man:sipsec(1)` reference.
#[test]
fn man_pages_and_the_systemd_unit_verify() {
    let dir = tempdir("pkg-man");
    let man1 = dir.join("man/man1");
    let out = Command::new(BIN)
        .args(["man", "--dir"])
        .arg(&man1)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", common::text(&out));
    let serve = std::fs::read_to_string(man1.join("sipsec-serve.1")).expect("sipsec-serve.1");
    assert!(
        serve.starts_with(".ie") || serve.contains(".TH sipsec-serve"),
        "{serve}"
    );
    assert!(serve.contains("drain"), "options are documented");
    for page in ["sipsec.1", "sipsec-status.1", "sipsec-bench-run.1"] {
        assert!(man1.join(page).exists(), "{page}");
    }
    // `man` itself renders the page.
    let rendered = Command::new("man")
        .arg("-l")
        .arg(man1.join("sipsec-status.1"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .expect("man (installed with the systemd unit's tools)");
    assert!(rendered.status.success(), "{}", common::text(&rendered));
    assert!(common::text(&rendered).contains("--aor"));

    let unit = std::fs::read_to_string(root().join("packaging/sipsec.service")).expect("unit");
    for hardening in [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "DynamicUser=yes",
        "SupplementaryGroups=sipsec",
        "CapabilityBoundingSet=",
        "SystemCallFilter=@system-service",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(unit.contains(hardening), "{hardening}");
    }
    // Verified as installed, with the binary under test in place.
    let local = dir.join("sipsec.service");
    let mut granted = unit.clone();
    for line in [
        "CapabilityBoundingSet=CAP_BPF CAP_PERFMON",
        "AmbientCapabilities=CAP_BPF CAP_PERFMON",
        "SystemCallFilter=bpf",
    ] {
        let commented = format!("\n#{line}\n");
        assert!(unit.contains(&commented), "the unit offers {line}");
        granted = granted.replace(&commented, &format!("\n{line}\n"));
    }
    // As shipped, and with Call-ID steering's capabilities granted.
    for unit in [unit, granted] {
        std::fs::write(&local, unit.replace("/usr/local/bin/sipsec", BIN)).expect("unit copy");
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&local)
            .env("MANPATH", dir.join("man"))
            .output()
            .expect("systemd-analyze (setup.sh installs systemd)");
        assert!(out.status.success(), "{}", common::text(&out));
        assert!(
            common::text(&out).trim().is_empty(),
            "warnings: {}",
            common::text(&out)
        );
    }
}

#[test]
fn licence_and_metadata_are_real() {
    let licence = std::fs::read_to_string(root().join("LICENSE")).expect("LICENSE");
    assert!(licence.contains("Apache License") && licence.contains("Version 2.0"));
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    assert!(manifest.contains("license = \"Apache-2.0\""));
    assert!(
        !manifest.contains("example.invalid"),
        "no made-up repository"
    );
    let ops = std::fs::read_to_string(root().join("docs/operations.md")).expect("docs");
    assert!(ops.contains("install -m 0755 target/release/sipsec /usr/local/bin/"));
    assert!(ops.contains("cargo install --path crates/sipsec"));
}

/// The unit runs as a dynamic user in the `sipsec` group and reads the
/// users file through that group: the install steps it documents make the
/// file root:sipsec 0640, and `sipsec users add` keeps an existing file's
/// owner, group and group-read bit (a new file stays 0600). Before, every
/// save made it root-only 0600 and the service could not read it.
#[test]
fn the_users_file_stays_readable_by_the_units_group() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let unit = std::fs::read_to_string(root().join("packaging/sipsec.service")).expect("unit");
    assert!(unit.contains("SupplementaryGroups=sipsec"));
    assert!(unit.contains("install -m 0640 -g sipsec /dev/null /etc/sipsec/users.tsv"));
    let dir = tempdir("pkg-users");
    let users = dir.join("users.tsv");
    std::fs::write(&users, "").expect("empty file");
    std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    // Another group where the test may set one (root): nogroup.
    let gid = if std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1)
        == 0
    {
        std::os::unix::fs::chown(&users, None, Some(65534)).expect("chown");
        65534
    } else {
        std::fs::metadata(&users).expect("meta").gid()
    };
    let mut add = Command::new(BIN)
        .args(["users", "add", "alice", "--password-stdin", "--file"])
        .arg(&users)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("runs");
    std::io::Write::write_all(&mut add.stdin.take().expect("piped"), b"long-enough\n")
        .expect("password");
    assert!(add.wait().expect("exits").success());
    let m = std::fs::metadata(&users).expect("meta");
    assert_eq!(m.mode() & 0o777, 0o640, "group-readable, no more");
    assert_eq!(m.gid(), gid, "the group kept");
}

/// The profile `./setup.sh` builds the release binary with: an indexed
/// LLVM profile (its magic bytes), and beside it the rustc it was made
/// with, which setup.sh compares before using it.
#[test]
fn the_committed_profile_is_an_llvm_profile_for_a_named_rustc() {
    let dir = root().join("packaging/pgo");
    let stamp = std::fs::read_to_string(dir.join("rustc.txt")).expect("packaging/pgo/rustc.txt");
    let field = |name: &str| {
        stamp
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
            .unwrap_or_else(|| panic!("rustc.txt names no {name}: {stamp}"))
    };
    let hash = field("commit-hash");
    assert!(
        hash.len() == 40 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
        "{hash}"
    );
    assert!(field("release").starts_with("1."), "{stamp}");
    assert!(!field("LLVM version").is_empty());
    assert!(!field("trained-on").is_empty());
    let out = Command::new("xz")
        .arg("-dc")
        .arg(dir.join("sipsec.profdata.xz"))
        .output()
        .expect("xz (setup.sh installs xz-utils)");
    assert!(out.status.success(), "{}", common::text(&out));
    assert!(
        out.stdout.starts_with(b"\xfflprofi\x81"),
        "not an indexed LLVM profile"
    );
    assert!(out.stdout.len() > 1 << 20, "{} bytes", out.stdout.len());
}
