//! `sipsec crypto-bench`: RSA implementations in several languages and
//! libraries, each a small adapter process (under `crossbench/`) speaking
//! one JSON object per line (`crossbench/protocol.md`). The runner makes
//! shared keys, checks that every implementation opens every other's
//! ciphertexts and accepts every other's signatures, then times each
//! operation with the study's protocol (repetitions × iterations after a
//! warm-up, plain timer) and again with each language's benchmark
//! framework, and summarises every implementation with the same code.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rsa_variants::{PrivateKey, Variant};
use serde::Serialize;
use serde_json::{json, Value};

use crate::plot;

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

fn have(argv: &[&str]) -> bool {
    Command::new(argv[0])
        .args(&argv[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What the adapters of each language need: a probe that succeeds when it
/// is there, and what provides it.
fn requirements(lang: &str) -> &'static [(&'static [&'static str], &'static str)] {
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
const JMH_JAR: &str = "jmh-core-1.37.jar";

fn run_build(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("building the {what} adapter: {e}"))?;
    if !out.status.success() {
        let mut text = String::from_utf8_lossy(&out.stderr).trim_end().to_owned();
        if text.is_empty() {
            text = String::from_utf8_lossy(&out.stdout).trim_end().to_owned();
        }
        return Err(format!(
            "building the {what} adapter failed (`./setup.sh --crypto-bench` installs the libraries):\n{text}"
        ));
    }
    Ok(())
}

fn abs(p: &Path) -> Result<PathBuf, String> {
    std::path::absolute(p).map_err(|e| format!("{}: {e}", p.display()))
}

/// Builds (where needed) and names the adapters of `languages`, from the
/// sources in `dir`, into `build`. Missing toolchains are an error that
/// names each of them and what installs them.
pub fn prepare(languages: &[String], dir: &Path, build: &Path) -> Result<Vec<Spec>, String> {
    if !dir.join("protocol.md").is_file() {
        return Err(format!(
            "{}: not the crossbench folder (no protocol.md); pass --crossbench DIR",
            dir.display()
        ));
    }
    let lacking = missing(languages, build);
    if !lacking.is_empty() {
        return Err(format!(
            "this machine lacks what the adapters need:\n  {}\ninstall it with `./setup.sh --crypto-bench` (or run again with --install)",
            lacking.join("\n  ")
        ));
    }
    std::fs::create_dir_all(build).map_err(|e| format!("{}: {e}", build.display()))?;
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
            "java" => {
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
                    .map_err(|e| format!("{}: {e}", dir.join("java/src").display()))?
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
            }
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
            "rust" => {
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
            }
            other => {
                return Err(format!(
                    "unknown language {other:?} (known: {})",
                    LANGUAGES.join(", ")
                ))
            }
        }
    }
    Ok(specs)
}

/// What an adapter says of itself (`hello`).
#[derive(Debug, Clone, Serialize)]
pub struct Info {
    /// The runner's id for it.
    pub id: String,
    /// Library and backend versions.
    pub version: String,
    /// Its language.
    pub language: String,
    /// Its benchmark framework; empty when none fits (C).
    pub framework: String,
    /// Key variants it computes with.
    pub variants: Vec<String>,
    /// Smallest modulus it accepts.
    pub min_bits: u32,
}

/// How much of an adapter's stderr is kept to explain its failure.
const STDERR_KEPT: usize = 4096;

/// A running adapter.
pub struct Adapter {
    /// What it said of itself.
    pub info: Info,
    child: Child,
    input: BufWriter<ChildStdin>,
    /// Reply lines, read by a thread so that a call can time out.
    replies: Receiver<std::io::Result<String>>,
    /// The end of its stderr, drained by a thread so that a chatty
    /// adapter never blocks on a full pipe.
    stderr: Arc<Mutex<String>>,
    timeout: Duration,
}

impl Adapter {
    /// Starts `spec` and asks who it is. A call without an answer within
    /// `timeout` stops the adapter and fails.
    pub fn start(spec: &Spec, timeout: Duration) -> Result<Self, String> {
        let mut child = Command::new(&spec.argv[0])
            .args(&spec.argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: cannot start {}: {e}", spec.id, spec.argv[0]))?;
        let (Some(i), Some(o), Some(e)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(format!("{}: no pipes", spec.id));
        };
        let (tx, replies) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(o).lines() {
                let failed = line.is_err();
                if tx.send(line).is_err() || failed {
                    return;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let tail = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in BufReader::new(e).lines() {
                let Ok(line) = line else { return };
                let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                t.push_str(&line);
                t.push('\n');
                if t.len() > 2 * STDERR_KEPT {
                    let mut cut = t.len() - STDERR_KEPT;
                    while !t.is_char_boundary(cut) {
                        cut += 1;
                    }
                    t.drain(..cut);
                }
            }
        });
        let mut a = Self {
            info: Info {
                id: spec.id.clone(),
                version: String::new(),
                language: String::new(),
                framework: String::new(),
                variants: Vec::new(),
                min_bits: 0,
            },
            child,
            input: BufWriter::new(i),
            replies,
            stderr,
            timeout,
        };
        let hello = a.call(&json!({"op": "hello"}))?;
        let text = |f: &str| hello[f].as_str().unwrap_or("").to_owned();
        a.info.version = text("version");
        a.info.language = text("language");
        a.info.framework = text("framework");
        a.info.variants = hello["variants"]
            .as_array()
            .map(|v| {
                v.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_else(|| vec!["crt".into()]);
        a.info.min_bits = hello["min_bits"].as_u64().unwrap_or(0) as u32;
        Ok(a)
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.info.id
    }

    /// Whether it computes with `key`.
    pub fn supports(&self, key: &TestKey) -> bool {
        key.bits >= self.info.min_bits && self.info.variants.iter().any(|v| v == key.variant)
    }

    /// Sends one request and returns the reply, or the adapter's error.
    pub fn call(&mut self, req: &Value) -> Result<Value, String> {
        let op = req["op"].as_str().unwrap_or("?");
        let mut line = serde_json::to_string(req).map_err(|e| e.to_string())?;
        line.push('\n');
        let sent = self
            .input
            .write_all(line.as_bytes())
            .and_then(|()| self.input.flush());
        let reply = match sent {
            Ok(()) => self.replies.recv_timeout(self.timeout),
            Err(_) => Err(RecvTimeoutError::Disconnected),
        };
        let reply = match reply {
            Ok(Ok(r)) => r,
            Err(RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                return Err(format!(
                    "{}: no answer to {op} within {} s; the adapter was stopped",
                    self.info.id,
                    self.timeout.as_secs_f64()
                ));
            }
            Ok(Err(_)) | Err(RecvTimeoutError::Disconnected) => {
                // Give the stderr thread a moment to read the last words.
                std::thread::sleep(Duration::from_millis(100));
                if self.child.try_wait().ok().flatten().is_none() {
                    let _ = self.child.kill();
                }
                let _ = self.child.wait();
                let err = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
                return Err(format!(
                    "{}: the adapter stopped answering ({op}){}{}",
                    self.info.id,
                    if err.is_empty() { "" } else { ": " },
                    err.trim_end()
                ));
            }
        };
        let v: Value = serde_json::from_str(&reply).map_err(|e| {
            format!(
                "{}: not a JSON reply ({e}): {}",
                self.info.id,
                reply.trim_end()
            )
        })?;
        if v["ok"] != json!(true) {
            return Err(format!(
                "{}: {op} failed: {}",
                self.info.id,
                v["error"].as_str().unwrap_or("no reason given")
            ));
        }
        Ok(v)
    }

    fn hex(&mut self, req: &Value, field: &str) -> Result<Vec<u8>, String> {
        let v = self.call(req)?;
        let h = v[field].as_str().unwrap_or("");
        from_hex(h).ok_or_else(|| format!("{}: {field} is not hex", self.info.id))
    }
}

impl Drop for Adapter {
    fn drop(&mut self) {
        let _ = self.input.write_all(b"{\"op\":\"quit\"}\n");
        let _ = self.input.flush();
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

fn to_hex(b: &[u8]) -> String {
    privacy::Encoding::Hex.encode(b)
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    privacy::Encoding::Hex.decode(s)
}

/// The largest OAEP-SHA-256 message for a key of `bits` (190 at 2048,
/// the published size).
pub fn oaep_max(bits: u32) -> usize {
    (bits as usize / 8).saturating_sub(2 * 32 + 2)
}

/// The published message size (OAEP-SHA-256's largest at 2048 bits).
pub const PUBLISHED_MSG: usize = 190;

/// Message sizes measured for `op` at `bits`: OAEP takes the published
/// 190 bytes where the key allows it and the largest the key allows;
/// PSS signs 190 bytes; key generation has none.
pub fn msg_lens(op: &str, bits: u32) -> Vec<usize> {
    match op {
        "keygen" => vec![0],
        "encrypt" | "decrypt" => {
            let max = oaep_max(bits);
            if PUBLISHED_MSG < max {
                vec![PUBLISHED_MSG, max]
            } else {
                vec![max]
            }
        }
        _ => vec![PUBLISHED_MSG],
    }
}

/// A shared test key.
pub struct TestKey {
    /// `k2048` for CRT keys, `k2048-standard`, `k2048-multiprime`.
    pub id: String,
    /// Modulus bits.
    pub bits: u32,
    /// One of [`VARIANTS`].
    pub variant: &'static str,
    /// PKCS#8 PEM (zero factors for a standard key; PKCS#1 version 1
    /// with other-prime-info for a multi-prime key).
    pub pem: String,
    /// n, e and d as hex, for libraries that build a key from them.
    pub ned: [String; 3],
}

impl TestKey {
    fn new(bits: u32, variant: &'static str, key: &PrivateKey) -> Result<Self, String> {
        let pem = String::from_utf8(key.to_pkcs8_pem().map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        let rsa = key.pkey().rsa().map_err(|e| e.to_string())?;
        let hex = |b: &openssl::bn::BigNumRef| -> Result<String, String> {
            Ok(b.to_hex_str()
                .map_err(|e| e.to_string())?
                .to_ascii_lowercase())
        };
        Ok(Self {
            id: if variant == "crt" {
                format!("k{bits}")
            } else {
                format!("k{bits}-{variant}")
            },
            bits,
            variant,
            pem,
            ned: [hex(rsa.n())?, hex(rsa.e())?, hex(rsa.d())?],
        })
    }

    fn load_request(&self) -> Value {
        json!({
            "op": "load", "id": self.id, "variant": self.variant, "pem": self.pem,
            "n": self.ned[0], "e": self.ned[1], "d": self.ned[2],
        })
    }
}

/// Makes the shared keys with rsa-variants (OpenSSL): per size a CRT key,
/// the same key without its factors (standard) and a 3-prime key, as
/// `variants` asks; writes them into `dir` when given.
pub fn make_keys(
    sizes: &[u32],
    variants: &[String],
    dir: Option<&Path>,
) -> Result<Vec<TestKey>, String> {
    let mut keys = Vec::new();
    let e = |e: rsa_variants::Error| e.to_string();
    for &bits in sizes {
        let crt = PrivateKey::generate(Variant::Crt, bits).map_err(e)?;
        keys.push(TestKey::new(bits, "crt", &crt)?);
        if variants.iter().any(|v| v == "standard") {
            keys.push(TestKey::new(
                bits,
                "standard",
                &crt.to_standard().map_err(e)?,
            )?);
        }
        if variants.iter().any(|v| v == "multiprime") {
            let mp = PrivateKey::generate(Variant::MultiPrime { primes: 3 }, bits).map_err(e)?;
            keys.push(TestKey::new(bits, "multiprime", &mp)?);
        }
    }
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for k in &keys {
            let p = dir.join(format!("rsa-{}-{}.pem", k.bits, k.variant));
            std::fs::write(&p, &k.pem).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    Ok(keys)
}

/// Loads each key into every adapter that computes with it, then has each
/// of those encrypt and sign and every one of them (itself included)
/// decrypt and verify; a tampered message must not verify. Returns how
/// many pairs passed.
pub fn cross_check(adapters: &mut [Adapter], keys: &[TestKey]) -> Result<usize, String> {
    let mut pairs = 0;
    for k in keys {
        let who: Vec<usize> = (0..adapters.len())
            .filter(|&i| adapters[i].supports(k))
            .collect();
        for &i in &who {
            let v = adapters[i].call(&k.load_request())?;
            if v["bits"].as_u64() != Some(u64::from(k.bits)) {
                return Err(format!(
                    "{}: loaded {} as {} bits",
                    adapters[i].id(),
                    k.id,
                    v["bits"]
                ));
            }
        }
        for &i in &who {
            let msg: Vec<u8> = (0..oaep_max(k.bits))
                .map(|n| (n * 7 + i * 13) as u8)
                .collect();
            let from = adapters[i].id().to_owned();
            let ct = adapters[i].hex(
                &json!({"op": "encrypt", "key": k.id, "msg": to_hex(&msg)}),
                "ct",
            )?;
            let sig = adapters[i].hex(
                &json!({"op": "sign", "key": k.id, "msg": to_hex(&msg)}),
                "sig",
            )?;
            for &j in &who {
                let b = &mut adapters[j];
                let to = b.id().to_owned();
                let at = |op: &str| {
                    format!(
                        "{to} {op} of {from}'s RSA-{} {} ({})",
                        k.bits, k.variant, k.id
                    )
                };
                let got = b
                    .hex(
                        &json!({"op": "decrypt", "key": k.id, "ct": to_hex(&ct)}),
                        "msg",
                    )
                    .map_err(|e| format!("{}: {e}", at("decryption")))?;
                if got != msg {
                    return Err(format!("{}: wrong plaintext", at("decryption")));
                }
                let ok = b.call(
                    &json!({"op": "verify", "key": k.id, "msg": to_hex(&msg), "sig": to_hex(&sig)}),
                )?;
                if ok["valid"] != json!(true) {
                    return Err(format!("{}: the signature was refused", at("verification")));
                }
                let mut bad = msg.clone();
                bad[0] ^= 1;
                let no = b.call(
                    &json!({"op": "verify", "key": k.id, "msg": to_hex(&bad), "sig": to_hex(&sig)}),
                )?;
                if no["valid"] != json!(false) {
                    return Err(format!(
                        "{}: a signature over another message was accepted",
                        at("verification")
                    ));
                }
                pairs += 1;
            }
        }
    }
    Ok(pairs)
}

/// Mean, sample standard deviation, median and 95 % CI half-width
/// (Student's t with n − 1 degrees of freedom) of `xs`.
pub fn summary(xs: &[f64]) -> (f64, f64, f64, f64) {
    const T975: [f64; 10] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    ];
    let n = xs.len();
    if n == 0 {
        return (0.0, 0.0, 0.0, 0.0);
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    if n < 2 {
        return (mean, 0.0, median, 0.0);
    }
    let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
    let t = T975.get(n - 2).copied().unwrap_or(1.96);
    (mean, sd, median, t * sd / (n as f64).sqrt())
}

/// One measured cell with the plain timer.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Implementation id.
    pub implementation: String,
    /// keygen, encrypt, decrypt, sign, verify.
    pub operation: String,
    /// Key size.
    pub bits: u32,
    /// Key variant (crt, standard, multiprime).
    pub variant: String,
    /// Message bytes (OAEP and PSS), 0 for key generation.
    pub msg_len: usize,
    /// Iterations per repetition.
    pub iterations: u64,
    /// Iterations asked for, when the time cap lowered them.
    pub capped_from: Option<u64>,
    /// Mean µs per operation of each repetition.
    pub reps_us: Vec<f64>,
    /// Mean over the repetitions, µs.
    pub mean_us: f64,
    /// Sample standard deviation, µs.
    pub sd_us: f64,
    /// Median, µs.
    pub median_us: f64,
    /// 95 % CI half-width, µs.
    pub ci95_us: f64,
}

/// One cell measured by the language's benchmark framework, beside the
/// plain timer's figure for the same cell.
#[derive(Debug, Clone, Serialize)]
pub struct FrameworkRow {
    /// Implementation id.
    pub implementation: String,
    /// JMH, criterion, testing.B, pytest-benchmark, Google Benchmark.
    pub framework: String,
    /// The operation.
    pub operation: String,
    /// Key size.
    pub bits: u32,
    /// Key variant.
    pub variant: String,
    /// Message bytes.
    pub msg_len: usize,
    /// The framework's mean, µs per operation.
    pub mean_us: f64,
    /// Its standard deviation (over its own samples), µs.
    pub sd_us: f64,
    /// Its median, µs.
    pub median_us: f64,
    /// Samples (rounds, iterations, repetitions: the framework's unit).
    pub samples: u64,
    /// Operations it ran in all.
    pub iterations: u64,
    /// The plain timer's mean for the same cell (most iterations), µs.
    pub plain_mean_us: f64,
    /// framework mean / plain mean.
    pub ratio: f64,
}

/// The run's plan.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Key sizes.
    pub sizes: Vec<u32>,
    /// Operations, from keygen, encrypt, decrypt, sign, verify.
    pub operations: Vec<String>,
    /// Key variants for the private-key operations (decrypt, sign).
    pub variants: Vec<String>,
    /// Iterations per repetition, each measured separately.
    pub iterations: Vec<u64>,
    /// Iterations per repetition for key generation (slow: fewer).
    pub keygen_iterations: Vec<u64>,
    /// Repetitions per cell.
    pub reps: u32,
    /// A cell whose estimate exceeds this many seconds runs fewer iterations.
    pub cell_seconds: f64,
    /// Seconds per framework sample; 0 leaves the frameworks out.
    pub framework_seconds: f64,
    /// Key generation above this size is left out of the framework runs
    /// (a framework wants many samples; one 4096-bit key takes seconds).
    pub framework_keygen_max_bits: u32,
}

/// Operations the protocol names.
pub const OPERATIONS: [&str; 5] = ["keygen", "encrypt", "decrypt", "sign", "verify"];

/// One cell of the plan: an operation on one implementation.
#[derive(Debug, Clone)]
pub struct Cell {
    /// The operation.
    pub op: String,
    /// Key size.
    pub bits: u32,
    /// Key variant.
    pub variant: &'static str,
    /// Message bytes.
    pub msg_len: usize,
    /// Index of the adapter.
    pub adapter: usize,
}

/// Every cell of `plan` on `adapters`, in report order: the private-key
/// operations once per variant, the rest on the CRT key; an implementation
/// is left out of keys it does not compute with.
pub fn cells(plan: &Plan, adapters: &[Adapter], keys: &[TestKey]) -> Vec<Cell> {
    let mut out = Vec::new();
    for op in &plan.operations {
        for &bits in &plan.sizes {
            for variant in VARIANTS {
                let private = op == "decrypt" || op == "sign";
                if (variant != "crt" && !private) || !plan.variants.iter().any(|v| v == variant) {
                    continue;
                }
                let Some(key) = keys.iter().find(|k| k.bits == bits && k.variant == variant) else {
                    continue;
                };
                for msg_len in msg_lens(op, bits) {
                    for (adapter, a) in adapters.iter().enumerate() {
                        if a.supports(key) {
                            out.push(Cell {
                                op: op.clone(),
                                bits,
                                variant,
                                msg_len,
                                adapter,
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// What one finished cell reports to the progress display.
pub struct Progress<'a> {
    /// Cells done, this one included.
    pub done: usize,
    /// Cells in all.
    pub total: usize,
    /// Seconds since the first cell started.
    pub elapsed: f64,
    /// The plain timer's rows of the cell (one per iteration count).
    pub rows: &'a [Row],
    /// The framework's row, when it ran.
    pub framework: Option<&'a FrameworkRow>,
    /// What failed in this cell, if anything.
    pub failure: Option<&'a str>,
}

/// Everything [`measure`] gathered.
#[derive(Debug, Default)]
pub struct Measured {
    /// Plain-timer rows.
    pub rows: Vec<Row>,
    /// Framework rows.
    pub framework: Vec<FrameworkRow>,
    /// Cells that failed, each named; the others were measured.
    pub failures: Vec<String>,
}

fn reps_from(v: &Value, field: &str) -> Vec<f64> {
    v[field]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_f64)
                .map(|ns| ns / 1e3)
                .collect()
        })
        .unwrap_or_default()
}

fn key_id(c: &Cell) -> String {
    if c.variant == "crt" {
        format!("k{}", c.bits)
    } else {
        format!("k{}-{}", c.bits, c.variant)
    }
}

/// The plain timer on one cell: a row per iteration count, the counts
/// after a capped one skipped.
fn plain_cell(a: &mut Adapter, plan: &Plan, c: &Cell) -> Result<Vec<Row>, String> {
    let counts = if c.op == "keygen" {
        &plan.keygen_iterations
    } else {
        &plan.iterations
    };
    let mut rows = Vec::new();
    // The first (smallest) count gives the estimate for the cap.
    let mut per_op_us: Option<f64> = None;
    for &asked in counts {
        let mut iterations = asked;
        if let Some(us) = per_op_us {
            let budget = plan.cell_seconds * 1e6 / (us * f64::from(plan.reps + 1));
            iterations = iterations.min((budget as u64).max(1));
        }
        let v = a.call(&json!({
            "op": "bench", "what": c.op, "key": key_id(c), "bits": c.bits,
            "msg_len": c.msg_len, "iterations": iterations, "reps": plan.reps,
        }))?;
        let reps_us = reps_from(&v, "ns");
        if reps_us.len() != plan.reps as usize {
            return Err(format!(
                "{}: bench returned {} repetitions, not {}",
                a.id(),
                reps_us.len(),
                plan.reps
            ));
        }
        let (mean_us, sd_us, median_us, ci95_us) = summary(&reps_us);
        per_op_us.get_or_insert(mean_us);
        rows.push(Row {
            implementation: a.id().to_owned(),
            operation: c.op.clone(),
            bits: c.bits,
            variant: c.variant.into(),
            msg_len: c.msg_len,
            iterations,
            capped_from: (iterations != asked).then_some(asked),
            reps_us,
            mean_us,
            sd_us,
            median_us,
            ci95_us,
        });
        if iterations < asked {
            break; // larger counts would be capped the same way
        }
    }
    Ok(rows)
}

/// The language's framework on one cell, beside `plain_mean_us`.
fn framework_cell(
    a: &mut Adapter,
    plan: &Plan,
    c: &Cell,
    plain_mean_us: f64,
) -> Result<FrameworkRow, String> {
    let v = a.call(&json!({
        "op": "framework", "what": c.op, "key": key_id(c), "bits": c.bits,
        "msg_len": c.msg_len, "reps": plan.reps, "seconds": plan.framework_seconds,
    }))?;
    let us = |f: &str| v[f].as_f64().unwrap_or(f64::NAN) / 1e3;
    let mean_us = us("mean_ns");
    if !(mean_us.is_finite() && mean_us > 0.0) {
        return Err(format!("{}: the framework gave no mean: {v}", a.id()));
    }
    Ok(FrameworkRow {
        implementation: a.id().to_owned(),
        framework: v["framework"]
            .as_str()
            .unwrap_or(&a.info.framework)
            .to_owned(),
        operation: c.op.clone(),
        bits: c.bits,
        variant: c.variant.into(),
        msg_len: c.msg_len,
        mean_us,
        sd_us: us("sd_ns"),
        median_us: us("median_ns"),
        samples: v["samples"].as_u64().unwrap_or(0),
        iterations: v["iterations"].as_u64().unwrap_or(0),
        plain_mean_us,
        ratio: mean_us / plain_mean_us,
    })
}

/// Times every cell with the plain timer (each iteration count of the
/// plan, capped by `cell_seconds`) and, where the implementation has a
/// framework, with the framework; `progress` hears each finished cell.
/// A cell that fails is named in [`Measured::failures`] and the run goes
/// on, so that one library's fault loses no other result.
pub fn measure(
    adapters: &mut [Adapter],
    plan: &Plan,
    cells: &[Cell],
    mut progress: impl FnMut(Progress<'_>),
) -> Measured {
    let mut m = Measured::default();
    let t0 = Instant::now();
    for (n, c) in cells.iter().enumerate() {
        let a = &mut adapters[c.adapter];
        let name =
            |what: &str| format!("{what} {} {} {} ({} B)", c.op, c.bits, c.variant, c.msg_len);
        let first = m.rows.len();
        let mut failure = None;
        match plain_cell(a, plan, c) {
            Ok(rows) => m.rows.extend(rows),
            Err(e) => failure = Some(format!("{}: {e}", name("plain timer"))),
        }
        let plain_mean_us = m.rows[first..]
            .iter()
            .max_by_key(|r| r.iterations)
            .map(|r| r.mean_us);
        let mut framework = None;
        let wants_framework = plan.framework_seconds > 0.0
            && !a.info.framework.is_empty()
            && (c.op != "keygen" || c.bits <= plan.framework_keygen_max_bits);
        if let (true, Some(plain)) = (wants_framework, plain_mean_us) {
            match framework_cell(a, plan, c, plain) {
                Ok(f) => {
                    m.framework.push(f);
                    framework = m.framework.last();
                }
                Err(e) => failure = Some(format!("{}: {e}", name(&a.info.framework))),
            }
        }
        progress(Progress {
            done: n + 1,
            total: cells.len(),
            elapsed: t0.elapsed().as_secs_f64(),
            rows: &m.rows[first..],
            framework,
            failure: failure.as_deref(),
        });
        m.failures.extend(failure);
    }
    m
}

/// CSV of every plain-timer row.
pub fn csv(rows: &[Row]) -> String {
    let mut s = String::from(
        "implementation,operation,bits,variant,msg_len,iterations,capped_from,reps,mean_us,sd_us,median_us,ci95_us\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3}",
            r.implementation,
            r.operation,
            r.bits,
            r.variant,
            r.msg_len,
            r.iterations,
            r.capped_from.map_or(String::new(), |n| n.to_string()),
            r.reps_us.len(),
            r.mean_us,
            r.sd_us,
            r.median_us,
            r.ci95_us
        );
    }
    s
}

/// A run's results, as written to results.json.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The implementations, as they described themselves.
    pub implementations: Vec<Info>,
    /// The plan.
    pub plan: Plan,
    /// Pairs that passed the cross-check.
    pub cross_check_pairs: usize,
    /// Plain-timer rows (every iteration count).
    pub rows: Vec<Row>,
    /// Framework rows.
    pub framework: Vec<FrameworkRow>,
    /// Cells that failed, each named.
    pub failures: Vec<String>,
}

/// A column of a table: a size and a message length.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Column {
    bits: u32,
    msg_len: usize,
}

impl Column {
    fn label(self, op: &str) -> String {
        if op == "keygen" || op == "sign" || op == "verify" {
            format!("RSA-{}", self.bits)
        } else {
            format!("RSA-{} ({} B)", self.bits, self.msg_len)
        }
    }
}

impl Report {
    fn impls(&self) -> Vec<&str> {
        self.implementations.iter().map(|i| i.id.as_str()).collect()
    }

    /// The row that stands for a cell: the most iterations measured.
    fn best(&self, imp: &str, op: &str, variant: &str, col: Column) -> Option<&Row> {
        self.rows
            .iter()
            .filter(|r| {
                r.implementation == imp
                    && r.operation == op
                    && r.variant == variant
                    && r.bits == col.bits
                    && r.msg_len == col.msg_len
            })
            .max_by_key(|r| r.iterations)
    }

    /// The (operation, variant) tables that have rows, in plan order.
    fn tables(&self) -> Vec<(String, String, Vec<Column>)> {
        let mut out = Vec::new();
        for op in &self.plan.operations {
            for v in VARIANTS {
                let mut cols: Vec<Column> = Vec::new();
                for r in self
                    .rows
                    .iter()
                    .filter(|r| &r.operation == op && r.variant == v)
                {
                    let c = Column {
                        bits: r.bits,
                        msg_len: r.msg_len,
                    };
                    if !cols.contains(&c) {
                        cols.push(c);
                    }
                }
                if !cols.is_empty() {
                    cols.sort_by_key(|c| (c.bits, c.msg_len));
                    out.push((op.clone(), v.to_owned(), cols));
                }
            }
        }
        out
    }

    /// Per table column: the fastest implementation and its mean, then
    /// the runner-up.
    fn fastest(&self) -> Vec<[String; 7]> {
        let mut out = Vec::new();
        for (op, v, cols) in self.tables() {
            for c in cols {
                let mut ranked: Vec<&Row> = self
                    .impls()
                    .iter()
                    .filter_map(|i| self.best(i, &op, &v, c))
                    .collect();
                ranked.sort_by(|a, b| a.mean_us.total_cmp(&b.mean_us));
                let Some(first) = ranked.first() else {
                    continue;
                };
                let (next, next_us, ratio) = match ranked.get(1) {
                    Some(n) => (
                        n.implementation.clone(),
                        format!("{:.1}", n.mean_us),
                        format!("{:.2}×", n.mean_us / first.mean_us),
                    ),
                    None => ("–".into(), "–".into(), "–".into()),
                };
                out.push([
                    format!("{op} ({v})"),
                    c.label(&op),
                    first.implementation.clone(),
                    format!("{:.1}", first.mean_us),
                    next,
                    next_us,
                    ratio,
                ]);
            }
        }
        out
    }

    fn cell_text(r: &Row) -> String {
        let ci = if r.reps_us.len() > 1 {
            format!(" ± {:.1}", r.ci95_us)
        } else {
            String::new()
        };
        format!(
            "{:.1}{ci} ({}×{}{})",
            r.mean_us,
            r.reps_us.len(),
            r.iterations,
            if r.capped_from.is_some() {
                ", capped"
            } else {
                ""
            }
        )
    }

    /// The implementations and the protocol, as lines.
    fn preamble(&self) -> Vec<String> {
        let p = &self.plan;
        let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        vec![
            format!(
                "Protocol: one warm-up repetition, then {} repetitions × {} iterations (key generation: × {}), each count measured; a cell expected to take over {} s runs fewer iterations and is marked \"capped\". Cells: mean ± 95 % CI (Student t) at the largest count, µs per operation, (repetitions×iterations).",
                p.reps,
                list(&p.iterations),
                list(&p.keygen_iterations),
                p.cell_seconds
            ),
            "Algorithms: RSA-OAEP with SHA-256 and MGF1-SHA-256; RSA-PSS with SHA-256 and a 32-byte salt; e = 65537. Variants: crt (two primes), standard (n, e, d: no CRT), multiprime (three primes); public-key operations use the CRT key.".into(),
            format!(
                "Cross-check: {} pairs decrypted each other's ciphertexts, verified each other's signatures and refused a tampered message before any timing.",
                self.cross_check_pairs
            ),
            if p.framework_seconds > 0.0 {
                format!(
                    "Frameworks: {} repetitions of about {} s each, in each framework's own way (JMH forks a JVM; criterion and pytest-benchmark run in a child process); key generation above {} bits is left out of the framework runs.",
                    p.reps, p.framework_seconds, p.framework_keygen_max_bits
                )
            } else {
                "Frameworks: not run (--framework-seconds 0).".into()
            },
        ]
    }

    /// Markdown: the implementations, one table per operation and variant
    /// (fastest per column in bold), the fastest per operation and size,
    /// and the frameworks beside the plain timer.
    pub fn markdown(&self) -> String {
        let mut s = String::from(
            "## Implementations\n\n| id | version | framework | variants |\n|---|---|---|---|\n",
        );
        for i in &self.implementations {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                i.id,
                i.version,
                if i.framework.is_empty() {
                    "none (plain loop)"
                } else {
                    &i.framework
                },
                i.variants.join(", ")
            );
        }
        s.push('\n');
        for line in self.preamble() {
            let _ = writeln!(s, "{line}\n");
        }
        for (op, v, cols) in self.tables() {
            let _ = writeln!(s, "### {op}, {v} key (µs per operation)\n");
            s.push_str("| implementation |");
            for c in &cols {
                let _ = write!(s, " {} |", c.label(&op));
            }
            s.push_str("\n|---|");
            for _ in &cols {
                s.push_str("---|");
            }
            s.push('\n');
            for imp in self.impls() {
                if cols.iter().all(|&c| self.best(imp, &op, &v, c).is_none()) {
                    continue;
                }
                let _ = write!(s, "| {imp} |");
                for &c in &cols {
                    let fastest = self
                        .impls()
                        .iter()
                        .filter_map(|i| self.best(i, &op, &v, c))
                        .map(|r| r.mean_us)
                        .fold(f64::INFINITY, f64::min);
                    match self.best(imp, &op, &v, c) {
                        Some(r) if r.mean_us == fastest => {
                            let _ = write!(s, " **{}** |", Self::cell_text(r));
                        }
                        Some(r) => {
                            let _ = write!(s, " {} |", Self::cell_text(r));
                        }
                        None => s.push_str(" – |"),
                    }
                }
                s.push('\n');
            }
            s.push('\n');
        }
        s.push_str("## Fastest per operation and size\n\n| operation | size | fastest | µs | next | µs | next / fastest |\n|---|---|---|---|---|---|---|\n");
        for r in self.fastest() {
            let _ = writeln!(s, "| {} |", r.join(" | "));
        }
        if !self.failures.is_empty() {
            s.push_str("\n## Cells that failed\n\n");
            for f in &self.failures {
                let _ = writeln!(s, "- {f}");
            }
        }
        if !self.framework.is_empty() {
            s.push_str("\n## Framework vs plain timer\n\n| implementation | framework | operation | size | framework mean ± sd | median | samples | plain mean | framework / plain |\n|---|---|---|---|---|---|---|---|---|\n");
            for f in &self.framework {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} ({}) | {} | {:.1} ± {:.1} | {:.1} | {} | {:.1} | {:.3} |",
                    f.implementation,
                    f.framework,
                    f.operation,
                    f.variant,
                    Column {
                        bits: f.bits,
                        msg_len: f.msg_len
                    }
                    .label(&f.operation),
                    f.mean_us,
                    f.sd_us,
                    f.median_us,
                    f.samples,
                    f.plain_mean_us,
                    f.ratio
                );
            }
        }
        s
    }

    /// The HTML page: a log-scale bar chart and a table per operation and
    /// variant, the fastest table and the framework comparison.
    pub fn html(&self) -> String {
        let mut sections = Vec::new();
        let mut head = String::new();
        for line in self.preamble() {
            let _ = write!(head, "<p>{}</p>", plot::escape(&line));
        }
        let rows: Vec<Vec<String>> = self
            .implementations
            .iter()
            .map(|i| {
                vec![
                    i.id.clone(),
                    i.version.clone(),
                    i.framework.clone(),
                    i.variants.join(", "),
                ]
            })
            .collect();
        head.push_str(&plot::table(
            &["id", "version", "framework", "variants"],
            &rows,
        ));
        sections.push(("Implementations".to_owned(), head));
        for (op, v, cols) in self.tables() {
            let labels: Vec<String> = cols.iter().map(|c| c.label(&op)).collect();
            let impls: Vec<&str> = self
                .impls()
                .into_iter()
                .filter(|i| cols.iter().any(|&c| self.best(i, &op, &v, c).is_some()))
                .collect();
            let series: Vec<(&str, Vec<f64>)> = impls
                .iter()
                .map(|i| {
                    (
                        *i,
                        cols.iter()
                            .map(|&c| self.best(i, &op, &v, c).map_or(f64::NAN, |r| r.mean_us))
                            .collect(),
                    )
                })
                .collect();
            let mut body = plot::bars_log(
                &format!("{op}, {v} key"),
                "µs per operation (log scale)",
                &labels,
                &series,
            );
            let mut head: Vec<&str> = vec!["implementation"];
            head.extend(labels.iter().map(String::as_str));
            let table: Vec<Vec<String>> = impls
                .iter()
                .map(|i| {
                    let mut row = vec![(*i).to_owned()];
                    row.extend(
                        cols.iter()
                            .map(|&c| self.best(i, &op, &v, c).map_or("–".into(), Self::cell_text)),
                    );
                    row
                })
                .collect();
            body.push_str(&plot::table(&head, &table));
            sections.push((format!("{op}, {v} key"), body));
        }
        sections.push((
            "Fastest per operation and size".into(),
            plot::table(
                &[
                    "operation",
                    "size",
                    "fastest",
                    "µs",
                    "next",
                    "µs",
                    "next / fastest",
                ],
                &self
                    .fastest()
                    .into_iter()
                    .map(Vec::from)
                    .collect::<Vec<_>>(),
            ),
        ));
        if !self.framework.is_empty() {
            let rows: Vec<Vec<String>> = self
                .framework
                .iter()
                .map(|f| {
                    vec![
                        f.implementation.clone(),
                        f.framework.clone(),
                        format!("{} ({})", f.operation, f.variant),
                        Column {
                            bits: f.bits,
                            msg_len: f.msg_len,
                        }
                        .label(&f.operation),
                        format!("{:.1} ± {:.1}", f.mean_us, f.sd_us),
                        format!("{:.1}", f.plain_mean_us),
                        format!("{:.3}", f.ratio),
                    ]
                })
                .collect();
            sections.push((
                "Framework vs plain timer".into(),
                plot::table(
                    &[
                        "implementation",
                        "framework",
                        "operation",
                        "size",
                        "framework µs",
                        "plain µs",
                        "framework / plain",
                    ],
                    &rows,
                ),
            ));
        }
        plot::page("sipsec crypto-bench: RSA across languages", &sections)
    }

    /// Writes results.json, results.csv, results.md, index.html and the
    /// plots (plots/crypto-K.svg, and PNG where rsvg-convert is) into
    /// `dir`; returns the files.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let html = self.html();
        let json = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        let mut files = Vec::new();
        for (name, text) in [
            ("results.json", json),
            ("results.csv", csv(&self.rows)),
            ("results.md", self.markdown()),
            ("index.html", html.clone()),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
            files.push(p);
        }
        files.extend(plot::write_files(&html, &dir.join("plots"), "crypto")?);
        Ok(files)
    }
}

/// Where the runner builds adapters: beside the other build output.
pub fn default_build_dir() -> PathBuf {
    PathBuf::from("target/crossbench")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_uses_students_t() {
        let (mean, sd, median, ci) = summary(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(mean, 3.0);
        assert!((sd - 2.5f64.sqrt()).abs() < 1e-12);
        assert_eq!(median, 3.0);
        assert!((ci - 2.776 * sd / 5f64.sqrt()).abs() < 1e-12);
        assert_eq!(summary(&[2.0, 4.0]).2, 3.0);
        assert_eq!(summary(&[7.0]), (7.0, 0.0, 7.0, 0.0));
    }

    #[test]
    fn oaep_limits_and_hex() {
        assert_eq!(oaep_max(2048), 190);
        assert_eq!(oaep_max(1024), 62);
        assert_eq!(
            from_hex(&to_hex(&[0, 1, 0xfe, 0xff])),
            Some(vec![0, 1, 0xfe, 0xff])
        );
        assert_eq!(from_hex("abc"), None);
        assert_eq!(msg_lens("encrypt", 1024), [62]);
        assert_eq!(msg_lens("decrypt", 2048), [190]);
        assert_eq!(msg_lens("encrypt", 4096), [190, 446]);
        assert_eq!(msg_lens("sign", 1024), [190]);
        assert_eq!(msg_lens("keygen", 4096), [0]);
        assert_eq!(from_hex("zz"), None);
    }
}
