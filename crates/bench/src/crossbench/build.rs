//! Building each language's adapter, and what each needs installed.

use super::*;
use crate::error::Error;

/// An implementation the runner can start.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Short id, e.g. `python-cryptography`.
    pub id: String,
    /// Program and arguments.
    pub argv: Vec<String>,
}

/// The languages the runner knows, in report order.
pub const LANGUAGES: [&str; 6] = ["c", "cpp", "go", "java", "python", "rust"];

/// The key variants (`rsa-variants`): d alone, two primes with CRT,
/// three primes with CRT.
pub const VARIANTS: [&str; 3] = ["crt", "standard", "multiprime"];

pub(super) fn have(argv: &[&str]) -> bool {
    Command::new(argv[0])
        .args(&argv[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What the adapters of each language need: a probe that succeeds when it
/// is there, and what provides it.
pub(super) fn requirements(lang: &str) -> &'static [(&'static [&'static str], &'static str)] {
    match lang {
        "c" => &[
            (
                &["cc", "--version"],
                "a C compiler (Debian: build-essential)",
            ),
            (
                &["pkg-config", "--exists", "libcrypto"],
                "OpenSSL's headers (Debian: libssl-dev, pkg-config)",
            ),
        ],
        "cpp" => &[
            (
                &["c++", "--version"],
                "a C++ compiler (Debian: build-essential)",
            ),
            (
                &["pkg-config", "--exists", "libcrypto++"],
                "Crypto++ (Debian: libcrypto++-dev)",
            ),
            (
                &["pkg-config", "--exists", "benchmark"],
                "Google Benchmark (Debian: libbenchmark-dev)",
            ),
        ],
        "go" => &[(&["go", "version"], "Go (Debian: golang-go)")],
        "java" => &[
            (
                &["javac", "-version"],
                "a JDK (Debian: default-jdk-headless)",
            ),
            (
                &["java", "-version"],
                "a JRE (Debian: default-jdk-headless)",
            ),
        ],
        "python" => &[
            (&["python3", "--version"], "Python 3 (Debian: python3)"),
            (
                &["python3", "-c", "import cryptography"],
                "the Python package cryptography (pip)",
            ),
            (
                &["python3", "-c", "import Crypto.PublicKey.RSA"],
                "the Python package pycryptodome (pip)",
            ),
            (
                &["python3", "-c", "import pytest_benchmark"],
                "the Python package pytest-benchmark (pip)",
            ),
        ],
        "rust" => &[(&["cargo", "--version"], "cargo (rustup)")],
        _ => &[],
    }
}

/// What the adapters of `languages` need and this machine lacks, one line
/// each ("go: Go (Debian: golang-go)"); empty when all is there. The Java
/// libraries come from Maven Central into `build`, so Maven is needed only
/// until they are there.
pub fn missing(languages: &[String], build: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for lang in languages {
        for (probe, what) in requirements(lang) {
            if !have(probe) {
                out.push(format!("{lang}: {what}"));
            }
        }
        if lang == "java"
            && !build.join("java/lib").join(JMH_JAR).is_file()
            && !have(&["mvn", "--version"])
        {
            out.push("java: Maven, to fetch BouncyCastle and JMH (Debian: maven)".into());
        }
    }
    out
}

/// Present once the Java libraries are fetched.
pub(super) const JMH_JAR: &str = "jmh-core-1.37.jar";

pub(super) fn run_build(cmd: &mut Command, what: &str) -> Result<(), Error> {
    let out = cmd
        .output()
        .map_err(Error::io(format!("building the {what} adapter")))?;
    if !out.status.success() {
        let mut text = String::from_utf8_lossy(&out.stderr).trim_end().to_owned();
        if text.is_empty() {
            text = String::from_utf8_lossy(&out.stdout).trim_end().to_owned();
        }
        return Err(Error::Build {
            what: format!(
                "the {what} adapter (`./setup.sh --crypto-bench` installs the libraries)"
            ),
            detail: text,
        });
    }
    Ok(())
}

pub(super) fn abs(p: &Path) -> Result<PathBuf, Error> {
    std::path::absolute(p).map_err(Error::io(p.display()))
}

/// Builds (where needed) and names the adapters of `languages`, from the
/// sources in `dir`, into `build`. Missing toolchains are an error that
/// names each of them and what installs them.
pub fn prepare(languages: &[String], dir: &Path, build: &Path) -> Result<Vec<Spec>, Error> {
    if !dir.join("protocol.md").is_file() {
        return Err(Error::Input(format!(
            "{}: not the crossbench folder (no protocol.md); pass --crossbench DIR",
            dir.display()
        )));
    }
    let lacking = missing(languages, build);
    if !lacking.is_empty() {
        return Err(Error::Input(format!(
            "this machine lacks what the adapters need:\n  {}\ninstall it with `./setup.sh --crypto-bench` (or run again with --install)",
            lacking.join("\n  ")
        )));
    }
    std::fs::create_dir_all(build).map_err(Error::io(build.display()))?;
    let s = |p: &Path| p.display().to_string();
    let mut specs = Vec::new();
    for lang in languages {
        match lang.as_str() {
            "c" => {
                let out = build.join("c-openssl");
                run_build(
                    Command::new("cc")
                        .args(["-O2", "-Wall", "-o"])
                        .arg(&out)
                        .arg(dir.join("c/main.c"))
                        .arg("-lcrypto"),
                    "C",
                )?;
                specs.push(Spec {
                    id: "c-openssl".into(),
                    argv: vec![s(&out)],
                });
            }
            "cpp" => {
                let out = build.join("cpp-cryptopp");
                run_build(
                    Command::new("c++")
                        .args(["-O2", "-std=c++17", "-Wall", "-o"])
                        .arg(&out)
                        .arg(dir.join("cpp/main.cpp"))
                        .args(["-lcryptopp", "-lbenchmark", "-lpthread"]),
                    "C++",
                )?;
                specs.push(Spec {
                    id: "cpp-cryptopp".into(),
                    argv: vec![s(&out)],
                });
            }
            "go" => {
                let out = abs(&build.join("go-crypto-rsa"))?;
                let mut go = Command::new("go");
                if std::env::var_os("GOCACHE").is_none() && std::env::var_os("HOME").is_none() {
                    // Go refuses to build without a cache directory.
                    go.env("GOCACHE", abs(&build.join("go-cache"))?);
                }
                run_build(
                    go.args(["build", "-o"])
                        .arg(&out)
                        .arg(".")
                        .current_dir(dir.join("go")),
                    "Go",
                )?;
                specs.push(Spec {
                    id: "go-crypto-rsa".into(),
                    argv: vec![s(&out)],
                });
            }
            "java" => specs.extend(build_java(dir, build)?),
            "python" => {
                for lib in ["cryptography", "pycryptodome"] {
                    specs.push(Spec {
                        id: format!("python-{lib}"),
                        argv: vec![
                            "python3".into(),
                            s(&dir.join("python/adapter.py")),
                            "--lib".into(),
                            lib.into(),
                        ],
                    });
                }
            }
            "rust" => specs.extend(build_rust(dir, build)?),
            other => {
                return Err(Error::Input(format!(
                    "unknown language {other:?} (known: {})",
                    LANGUAGES.join(", ")
                )))
            }
        }
    }
    Ok(specs)
}

/// The Java adapters (JCA and BouncyCastle), compiled against the jars
/// Maven fetched.
fn build_java(dir: &Path, build: &Path) -> Result<Vec<Spec>, Error> {
    let mut specs = Vec::new();
    let lib = abs(&build.join("java/lib"))?;
    if !lib.join(JMH_JAR).is_file() {
        // BouncyCastle and JMH from Maven Central (setup.sh
        // fetches them once into ~/.m2).
        run_build(
            Command::new("mvn")
                .args(["-q", "-B", "dependency:copy-dependencies"])
                .arg(format!("-DoutputDirectory={}", lib.display()))
                .current_dir(dir.join("java")),
            "Java (Maven)",
        )?;
    }
    let classes = build.join("java/classes");
    let _ = std::fs::remove_dir_all(&classes);
    let sources: Vec<PathBuf> = std::fs::read_dir(dir.join("java/src/crossbench"))
        .map_err(Error::io(dir.join("java/src").display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "java"))
        .collect();
    run_build(
        Command::new("javac")
            .args(["-encoding", "UTF-8", "-cp"])
            .arg(format!("{}/*", lib.display()))
            .arg("-d")
            .arg(&classes)
            .args(&sources),
        "Java",
    )?;
    let cp = format!("{}:{}/*", abs(&classes)?.display(), lib.display());
    for (lib, id) in [("jca", "java-jca"), ("bc", "java-bouncycastle")] {
        specs.push(Spec {
            id: id.into(),
            argv: vec![
                "java".into(),
                "-cp".into(),
                cp.clone(),
                "crossbench.Adapter".into(),
                "--lib".into(),
                lib.into(),
            ],
        });
    }
    Ok(specs)
}

/// The Rust adapters (this project's RSA variants, aws-lc-rs, RustCrypto),
/// one binary built in its own workspace.
fn build_rust(dir: &Path, build: &Path) -> Result<Vec<Spec>, Error> {
    let s = |p: &Path| p.display().to_string();
    let mut specs = Vec::new();
    let target = abs(&build.join("rust"))?;
    run_build(
        Command::new("cargo")
            .args([
                "build",
                "--release",
                "--locked",
                "--quiet",
                "--manifest-path",
            ])
            .arg(dir.join("rust/Cargo.toml"))
            .arg("--target-dir")
            .arg(&target),
        "Rust",
    )?;
    let exe = target.join("release/crossbench-rust");
    for (lib, id) in [
        ("rsa-variants", "rust-rsa-variants"),
        ("aws-lc-rs", "rust-aws-lc-rs"),
        ("rustcrypto", "rust-rustcrypto-rsa"),
    ] {
        specs.push(Spec {
            id: id.into(),
            argv: vec![s(&exe), "--lib".into(), lib.into()],
        });
    }
    Ok(specs)
}

/// Where the runner builds adapters: beside the other build output.
pub fn default_build_dir() -> PathBuf {
    PathBuf::from("target/crossbench")
}
