//! `sipsec crypto-bench`: RSA implementations in several languages and
//! libraries, each a small adapter process (under `crossbench/`) speaking
//! one JSON object per line (`crossbench/protocol.md`). The runner makes
//! shared keys, checks that every implementation opens every other's
//! ciphertexts and accepts every other's signatures, then times each
//! operation with the study's protocol (repetitions × iterations after a
//! warm-up) and summarises every implementation with the same code.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use rsa_variants::{HashAlg, PrivateKey, Variant};
use serde::Serialize;
use serde_json::{json, Value};

/// An implementation the runner can start.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Short id, e.g. `python-cryptography`.
    pub id: String,
    /// Program and arguments.
    pub argv: Vec<String>,
}

/// The languages the runner knows, in report order.
pub const LANGUAGES: [&str; 4] = ["c", "go", "python", "rust"];

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

fn run_build(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("building the {what} adapter: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "building the {what} adapter failed:\n{}",
            String::from_utf8_lossy(&out.stderr).trim_end()
        ));
    }
    Ok(())
}

/// Builds (where needed) and names the adapters of `languages`, from the
/// sources in `dir`, into `build`; `exe` is this program (the Rust
/// adapters run inside it). A missing toolchain is an error that names
/// what to install.
pub fn prepare(
    languages: &[String],
    dir: &Path,
    build: &Path,
    exe: &Path,
) -> Result<Vec<Spec>, String> {
    if !dir.join("protocol.md").is_file() {
        return Err(format!(
            "{}: not the crossbench folder (no protocol.md); pass --crossbench DIR",
            dir.display()
        ));
    }
    std::fs::create_dir_all(build).map_err(|e| format!("{}: {e}", build.display()))?;
    let s = |p: &Path| p.display().to_string();
    let mut specs = Vec::new();
    for lang in languages {
        match lang.as_str() {
            "c" => {
                if !have("cc") {
                    return Err("the C adapter needs cc and libssl-dev: run ./setup.sh".into());
                }
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
            "go" => {
                if !have("go") {
                    return Err(
                        "the Go adapter needs go (Debian: golang-go): run ./setup.sh".into(),
                    );
                }
                let out = build.join("go-crypto-rsa");
                let abs = std::path::absolute(&out).map_err(|e| e.to_string())?;
                let mut go = Command::new("go");
                if std::env::var_os("GOCACHE").is_none() && std::env::var_os("HOME").is_none() {
                    // Go refuses to build without a cache directory.
                    go.env(
                        "GOCACHE",
                        std::path::absolute(build.join("go-cache")).map_err(|e| e.to_string())?,
                    );
                }
                run_build(
                    go.args(["build", "-o"])
                        .arg(&abs)
                        .arg(".")
                        .current_dir(dir.join("go")),
                    "Go",
                )?;
                specs.push(Spec {
                    id: "go-crypto-rsa".into(),
                    argv: vec![s(&out)],
                });
            }
            "python" => {
                if !have("python3") {
                    return Err("the Python adapters need python3: run ./setup.sh".into());
                }
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
            "rust" => specs.push(Spec {
                id: "rust-rsa-variants".into(),
                argv: vec![s(exe), "crypto-bench".into(), "adapter".into()],
            }),
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

/// A running adapter.
pub struct Adapter {
    /// Its id.
    pub id: String,
    /// What it said of itself (`hello`).
    pub version: String,
    child: Child,
    input: BufWriter<ChildStdin>,
    output: BufReader<ChildStdout>,
}

impl Adapter {
    /// Starts `spec` and asks who it is.
    pub fn start(spec: &Spec) -> Result<Self, String> {
        let mut child = Command::new(&spec.argv[0])
            .args(&spec.argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: cannot start {}: {e}", spec.id, spec.argv[0]))?;
        let (Some(i), Some(o)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(format!("{}: no pipes", spec.id));
        };
        let mut a = Self {
            id: spec.id.clone(),
            version: String::new(),
            child,
            input: BufWriter::new(i),
            output: BufReader::new(o),
        };
        let hello = a.call(&json!({"op": "hello"}))?;
        a.version = hello["version"].as_str().unwrap_or("?").to_owned();
        Ok(a)
    }

    /// Sends one request and returns the reply, or the adapter's error.
    pub fn call(&mut self, req: &Value) -> Result<Value, String> {
        let mut line = serde_json::to_string(req).map_err(|e| e.to_string())?;
        line.push('\n');
        let mut reply = String::new();
        let io = self
            .input
            .write_all(line.as_bytes())
            .and_then(|()| self.input.flush())
            .and_then(|()| self.output.read_line(&mut reply));
        if matches!(io, Ok(0) | Err(_)) {
            let mut err = String::new();
            if let Some(mut e) = self.child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return Err(format!(
                "{}: the adapter stopped answering ({}){}{}",
                self.id,
                req["op"].as_str().unwrap_or("?"),
                if err.is_empty() { "" } else { ": " },
                err.trim_end()
            ));
        }
        let v: Value = serde_json::from_str(&reply)
            .map_err(|e| format!("{}: not a JSON reply ({e}): {}", self.id, reply.trim_end()))?;
        if v["ok"] != json!(true) {
            return Err(format!(
                "{}: {} failed: {}",
                self.id,
                req["op"].as_str().unwrap_or("?"),
                v["error"].as_str().unwrap_or("no reason given")
            ));
        }
        Ok(v)
    }

    fn hex(&mut self, req: &Value, field: &str) -> Result<Vec<u8>, String> {
        let v = self.call(req)?;
        let h = v[field].as_str().unwrap_or("");
        from_hex(h).ok_or_else(|| format!("{}: {field} is not hex", self.id))
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

/// A shared test key.
pub struct TestKey {
    /// `k1024`, `k2048`, …
    pub id: String,
    /// Modulus bits.
    pub bits: u32,
    /// PKCS#8 PEM.
    pub pem: String,
}

/// Makes one CRT key per size (rsa-variants, OpenSSL) and writes them
/// into `dir` when given.
pub fn make_keys(sizes: &[u32], dir: Option<&Path>) -> Result<Vec<TestKey>, String> {
    let mut keys = Vec::new();
    for &bits in sizes {
        let k = PrivateKey::generate(Variant::Crt, bits).map_err(|e| e.to_string())?;
        let pem = String::from_utf8(k.to_pkcs8_pem().map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        if let Some(dir) = dir {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let p = dir.join(format!("rsa-{bits}-crt.pem"));
            std::fs::write(&p, &pem).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        keys.push(TestKey {
            id: format!("k{bits}"),
            bits,
            pem,
        });
    }
    Ok(keys)
}

/// Loads the keys into every adapter, then has each one encrypt and sign
/// under each key and every adapter (itself included) decrypt and verify;
/// a tampered message must not verify. Returns how many pairs passed.
pub fn cross_check(adapters: &mut [Adapter], keys: &[TestKey]) -> Result<usize, String> {
    for a in adapters.iter_mut() {
        for k in keys {
            let v = a.call(&json!({"op": "load", "id": k.id, "pem": k.pem}))?;
            if v["bits"].as_u64() != Some(u64::from(k.bits)) {
                return Err(format!("{}: loaded {} as {} bits", a.id, k.id, v["bits"]));
            }
        }
    }
    let mut pairs = 0;
    for k in keys {
        for i in 0..adapters.len() {
            let msg: Vec<u8> = (0..oaep_max(k.bits))
                .map(|n| (n * 7 + i * 13) as u8)
                .collect();
            let from = adapters[i].id.clone();
            let ct = adapters[i].hex(
                &json!({"op": "encrypt", "key": k.id, "msg": to_hex(&msg)}),
                "ct",
            )?;
            let sig = adapters[i].hex(
                &json!({"op": "sign", "key": k.id, "msg": to_hex(&msg)}),
                "sig",
            )?;
            for b in adapters.iter_mut() {
                let to = b.id.clone();
                let at = |op: &str| format!("{to} {op} of {from}'s RSA-{} ({})", k.bits, k.id);
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

/// One measured cell.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Implementation id.
    pub implementation: String,
    /// What it reported of itself.
    pub version: String,
    /// keygen, encrypt, decrypt, sign, verify.
    pub operation: String,
    /// Key size.
    pub bits: u32,
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

/// The run's plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Key sizes.
    pub sizes: Vec<u32>,
    /// Operations, from keygen, encrypt, decrypt, sign, verify.
    pub operations: Vec<String>,
    /// Iterations per repetition, each measured separately.
    pub iterations: Vec<u64>,
    /// Repetitions per cell.
    pub reps: u32,
    /// A cell whose estimate exceeds this many seconds runs fewer iterations.
    pub cell_seconds: f64,
}

/// Operations the protocol names.
pub const OPERATIONS: [&str; 5] = ["keygen", "encrypt", "decrypt", "sign", "verify"];

/// Times every operation, size and iteration count on every adapter;
/// `progress` hears each finished cell.
pub fn measure(
    adapters: &mut [Adapter],
    plan: &Plan,
    mut progress: impl FnMut(&Row),
) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for op in &plan.operations {
        for &bits in &plan.sizes {
            let msg_len = if op == "keygen" { 0 } else { oaep_max(bits) };
            for a in adapters.iter_mut() {
                // The first (smallest) count gives the estimate for the cap.
                let mut per_op_us: Option<f64> = None;
                for &asked in &plan.iterations {
                    let mut iterations = asked;
                    if let Some(us) = per_op_us {
                        let budget = plan.cell_seconds * 1e6 / (us * f64::from(plan.reps + 1));
                        iterations = iterations.min((budget as u64).max(1));
                    }
                    let v = a.call(&json!({
                        "op": "bench", "what": op, "key": format!("k{bits}"), "bits": bits,
                        "msg_len": msg_len, "iterations": iterations, "reps": plan.reps,
                    }))?;
                    let reps_us: Vec<f64> = v["ns"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(Value::as_f64)
                                .map(|ns| ns / 1e3)
                                .collect()
                        })
                        .unwrap_or_default();
                    if reps_us.len() != plan.reps as usize {
                        return Err(format!(
                            "{}: bench {op} {bits} returned {} repetitions, not {}",
                            a.id,
                            reps_us.len(),
                            plan.reps
                        ));
                    }
                    let (mean_us, sd_us, median_us, ci95_us) = summary(&reps_us);
                    per_op_us.get_or_insert(mean_us);
                    let row = Row {
                        implementation: a.id.clone(),
                        version: a.version.clone(),
                        operation: op.clone(),
                        bits,
                        msg_len,
                        iterations,
                        capped_from: (iterations != asked).then_some(asked),
                        reps_us,
                        mean_us,
                        sd_us,
                        median_us,
                        ci95_us,
                    };
                    progress(&row);
                    rows.push(row);
                    if iterations < asked {
                        break; // larger counts would be capped the same way
                    }
                }
            }
        }
    }
    Ok(rows)
}

/// CSV of every row.
pub fn csv(rows: &[Row]) -> String {
    let mut s = String::from(
        "implementation,operation,bits,msg_len,iterations,capped_from,reps,mean_us,sd_us,median_us,ci95_us\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3}",
            r.implementation,
            r.operation,
            r.bits,
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

/// Markdown: one table per operation, implementations as rows, sizes as
/// columns; each cell the mean ± 95 % CI (µs) at the largest iteration
/// count measured; the fastest per size in bold.
pub fn markdown(rows: &[Row], plan: &Plan) -> String {
    let mut s = String::new();
    let mut impls: Vec<&str> = Vec::new();
    for r in rows {
        if !impls.contains(&r.implementation.as_str()) {
            impls.push(&r.implementation);
        }
    }
    // The row that stands for (implementation, op, bits): most iterations.
    let best_row = |imp: &str, op: &str, bits: u32| {
        rows.iter()
            .filter(|r| r.implementation == imp && r.operation == op && r.bits == bits)
            .max_by_key(|r| r.iterations)
    };
    for op in &plan.operations {
        let sizes: Vec<u32> = plan
            .sizes
            .iter()
            .copied()
            .filter(|b| rows.iter().any(|r| &r.operation == op && r.bits == *b))
            .collect();
        let _ = writeln!(s, "### {op} (µs per operation, mean ± 95 % CI)\n");
        let _ = write!(s, "| implementation |");
        for b in &sizes {
            let _ = write!(s, " RSA-{b} |");
        }
        let _ = write!(s, "\n|---|");
        for _ in &sizes {
            let _ = write!(s, "---|");
        }
        s.push('\n');
        for imp in &impls {
            let _ = write!(s, "| {imp} |");
            for &b in &sizes {
                let fastest = impls
                    .iter()
                    .filter_map(|i| best_row(i, op, b))
                    .map(|r| r.mean_us)
                    .fold(f64::INFINITY, f64::min);
                match best_row(imp, op, b) {
                    Some(r) => {
                        let ci = if r.reps_us.len() > 1 {
                            format!(" ± {:.1}", r.ci95_us)
                        } else {
                            String::new()
                        };
                        let cell = format!(
                            "{:.1}{ci} ({}×{}{})",
                            r.mean_us,
                            r.reps_us.len(),
                            r.iterations,
                            if r.capped_from.is_some() {
                                ", capped"
                            } else {
                                ""
                            }
                        );
                        if r.mean_us == fastest {
                            let _ = write!(s, " **{cell}** |");
                        } else {
                            let _ = write!(s, " {cell} |");
                        }
                    }
                    None => s.push_str(" – |"),
                }
            }
            s.push('\n');
        }
        s.push('\n');
    }
    s
}

/// Serves the protocol on stdin/stdout with sipsec's own RSA
/// (`rsa-variants`, on OpenSSL): the Rust adapter.
pub fn serve_adapter() -> Result<(), String> {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    let mut keys: Vec<(String, PrivateKey)> = Vec::new();
    for line in stdin.lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        if line.trim().is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Value>(&line) {
            Ok(req) if req["op"] == "quit" => break,
            Ok(req) => match rust_op(&mut keys, &req) {
                Ok(mut v) => {
                    v["ok"] = json!(true);
                    v
                }
                Err(e) => json!({"ok": false, "error": e}),
            },
            Err(e) => json!({"ok": false, "error": format!("not JSON: {e}")}),
        };
        writeln!(out, "{reply}")
            .and_then(|()| out.flush())
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn rust_op(keys: &mut Vec<(String, PrivateKey)>, req: &Value) -> Result<Value, String> {
    let h = HashAlg::Sha256;
    let arg = |name: &str| -> Result<Vec<u8>, String> {
        from_hex(req[name].as_str().unwrap_or("")).ok_or_else(|| format!("{name}: not hex"))
    };
    let key = |keys: &[(String, PrivateKey)]| -> Result<PrivateKey, String> {
        let id = req["key"].as_str().unwrap_or("");
        keys.iter()
            .find(|(k, _)| k == id)
            .map(|(_, k)| k.clone())
            .ok_or_else(|| format!("unknown key {id:?}"))
    };
    let e = |e: rsa_variants::Error| e.to_string();
    Ok(match req["op"].as_str().unwrap_or("") {
        "hello" => json!({
            "name": "rust-rsa-variants",
            "version": format!("rsa-variants {}, {}", env!("CARGO_PKG_VERSION"), openssl::version::version()),
            "language": "rust",
        }),
        "load" => {
            let k =
                PrivateKey::from_pem(req["pem"].as_str().unwrap_or("").as_bytes()).map_err(e)?;
            let bits = k.bits();
            keys.push((req["id"].as_str().unwrap_or("").to_owned(), k));
            json!({"bits": bits})
        }
        "encrypt" => {
            let k = key(keys)?;
            let ct = k
                .public_key()
                .map_err(e)?
                .encrypt_oaep(h, &arg("msg")?)
                .map_err(e)?;
            json!({"ct": to_hex(&ct)})
        }
        "decrypt" => json!({"msg": to_hex(&key(keys)?.decrypt_oaep(h, &arg("ct")?).map_err(e)?)}),
        "sign" => json!({"sig": to_hex(&key(keys)?.sign_pss(h, &arg("msg")?).map_err(e)?)}),
        "verify" => {
            let p = key(keys)?.public_key().map_err(e)?;
            json!({"valid": p.verify_pss(h, &arg("msg")?, &arg("sig")?)})
        }
        "bench" => json!({"ns": rust_bench(keys, req, key)?}),
        other => return Err(format!("unknown op {other:?}")),
    })
}

fn rust_bench(
    keys: &[(String, PrivateKey)],
    req: &Value,
    key: impl Fn(&[(String, PrivateKey)]) -> Result<PrivateKey, String>,
) -> Result<Vec<f64>, String> {
    let h = HashAlg::Sha256;
    let n = req["iterations"].as_u64().unwrap_or(1).max(1);
    let reps = req["reps"].as_u64().unwrap_or(1).max(1);
    let e = |e: rsa_variants::Error| e.to_string();
    let mut op: Box<dyn FnMut() -> Result<(), String>> = match req["what"].as_str().unwrap_or("") {
        "keygen" => {
            let bits =
                u32::try_from(req["bits"].as_u64().unwrap_or(2048)).map_err(|e| e.to_string())?;
            Box::new(move || {
                PrivateKey::generate(Variant::Crt, bits)
                    .map(drop)
                    .map_err(e)
            })
        }
        what => {
            let k = key(keys)?;
            let p = k.public_key().map_err(e)?;
            let msg = vec![0x5a; req["msg_len"].as_u64().unwrap_or(32) as usize];
            match what {
                "encrypt" => Box::new(move || p.encrypt_oaep(h, &msg).map(drop).map_err(e)),
                "decrypt" => {
                    let ct = p.encrypt_oaep(h, &msg).map_err(e)?;
                    Box::new(move || k.decrypt_oaep(h, &ct).map(drop).map_err(e))
                }
                "sign" => Box::new(move || k.sign_pss(h, &msg).map(drop).map_err(e)),
                "verify" => {
                    let sig = k.sign_pss(h, &msg).map_err(e)?;
                    Box::new(move || {
                        p.verify_pss(h, &msg, &sig)
                            .then_some(())
                            .ok_or_else(|| "verification failed".to_owned())
                    })
                }
                other => return Err(format!("unknown bench operation {other:?}")),
            }
        }
    };
    let mut out = Vec::new();
    for rep in 0..=reps {
        let t0 = std::time::Instant::now();
        for _ in 0..n {
            op()?;
        }
        let dt = t0.elapsed().as_nanos() as f64;
        if rep > 0 {
            out.push(dt / n as f64);
        }
    }
    Ok(out)
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
        assert_eq!(from_hex("zz"), None);
    }
}
