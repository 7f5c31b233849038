//! The Rust adapters of `sipsec crypto-bench` (crossbench/protocol.md):
//! `--lib rsa-variants` (sipsec's own RSA, on OpenSSL), `--lib aws-lc-rs`
//! and `--lib rustcrypto` (the `rsa` crate, for comparison only: it has
//! an unpatched timing advisory, RUSTSEC-2023-0071).
//!
//! The framework timing uses criterion. Criterion prints to stdout, which
//! is the protocol's channel, so it runs in a child of this program
//! (`--criterion`) whose results are read back from its estimates.json.

mod libs;

use std::io::{BufRead, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use libs::{Key, Lib};

/// The framework's name and locked version (build.rs), as `hello` and
/// `framework` replies give it.
const FRAMEWORK: &str = concat!("criterion ", env!("LOCKED_CRITERION"));

fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn from_hex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err("odd-length hex".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| "not hex".to_owned()))
        .collect()
}

fn field<'a>(req: &'a Value, name: &str) -> &'a str {
    req[name].as_str().unwrap_or("")
}

fn num(req: &Value, name: &str, default: u64) -> u64 {
    req[name].as_u64().unwrap_or(default)
}

/// One timed operation, prepared once (its input made by the adapter).
type Op = Box<dyn FnMut() -> Result<(), String>>;

fn prepare(lib: &'static dyn Lib, key: Option<&dyn Key>, req: &Value) -> Result<Op, String> {
    let what = field(req, "what");
    if what == "keygen" {
        let bits = u32::try_from(num(req, "bits", 2048)).map_err(|e| e.to_string())?;
        return Ok(Box::new(move || lib.keygen(bits)));
    }
    let key = key.ok_or_else(|| format!("unknown key {:?}", field(req, "key")))?;
    let msg: Vec<u8> = (0..num(req, "msg_len", 32))
        .map(|i| (i * 31 + 7) as u8)
        .collect();
    let k = key.clone_box();
    Ok(match what {
        "encrypt" => Box::new(move || k.encrypt(&msg).map(drop)),
        "decrypt" => {
            let ct = k.encrypt(&msg)?;
            Box::new(move || k.decrypt(&ct).map(drop))
        }
        "sign" => Box::new(move || k.sign(&msg).map(drop)),
        "verify" => {
            let sig = k.sign(&msg)?;
            Box::new(move || {
                k.verify(&msg, &sig)
                    .then_some(())
                    .ok_or_else(|| "verification failed".to_owned())
            })
        }
        other => return Err(format!("unknown bench operation {other:?}")),
    })
}

/// The plain timer: one warm-up repetition, then `reps` of `iterations`.
fn plain(mut op: Op, iterations: u64, reps: u64) -> Result<Vec<f64>, String> {
    let mut out = Vec::new();
    for rep in 0..=reps {
        let t0 = Instant::now();
        for _ in 0..iterations {
            op()?;
        }
        if rep > 0 {
            out.push(t0.elapsed().as_nanos() as f64 / iterations as f64);
        }
    }
    Ok(out)
}

/// Runs one cell under criterion in a child process and reads its
/// estimates back.
fn framework(
    lib: &'static dyn Lib,
    key_pem: Option<&(String, String)>,
    req: &Value,
) -> Result<Value, String> {
    let home = std::env::temp_dir().join(format!("crossbench-criterion-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    let mut job = req.clone();
    if let Some((pem, variant)) = key_pem {
        job["pem"] = json!(pem);
        job["variant"] = json!(variant);
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args(["--lib", lib.id(), "--criterion"])
        .env("CRITERION_HOME", &home)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting criterion: {e}"))?;
    if let Some(mut i) = child.stdin.take() {
        writeln!(i, "{job}").map_err(|e| e.to_string())?;
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("criterion run failed: {}", err.trim_end()));
    }
    let read = |name: &str| -> Result<Value, String> {
        let p = home.join("cell/new").join(name);
        let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
    };
    let est = read("estimates.json")?;
    let sample = read("sample.json")?;
    let _ = std::fs::remove_dir_all(&home);
    let iters: f64 = sample["iters"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).sum())
        .unwrap_or(0.0);
    Ok(json!({
        "framework": FRAMEWORK,
        "mean_ns": est["mean"]["point_estimate"],
        "sd_ns": est["std_dev"]["point_estimate"],
        "median_ns": est["median"]["point_estimate"],
        "samples": sample["iters"].as_array().map_or(0, Vec::len),
        "iterations": iters as u64,
    }))
}

/// The child side of [`framework`]: one request on stdin, criterion's
/// files under CRITERION_HOME.
fn criterion_child(lib: &'static dyn Lib) -> Result<(), String> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let req: Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
    let key = match req["pem"].as_str() {
        Some(pem) => Some(lib.load(pem, field(&req, "variant"))?),
        None => None,
    };
    let mut op = prepare(lib, key.as_deref(), &req)?;
    let seconds = req["seconds"].as_f64().unwrap_or(1.0).max(0.01);
    let samples = num(&req, "reps", 10).max(10) as usize;
    let mut c = criterion::Criterion::default()
        .sample_size(samples)
        .warm_up_time(Duration::from_secs_f64(seconds))
        .measurement_time(Duration::from_secs_f64(seconds * samples as f64 / 2.0))
        .without_plots();
    let mut failed = None;
    c.bench_function("cell", |b| {
        b.iter(|| {
            if let Err(e) = op() {
                failed.get_or_insert(e);
            }
        })
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

struct Loaded {
    id: String,
    key: Box<dyn Key>,
    pem: String,
    variant: String,
}

fn handle(lib: &'static dyn Lib, keys: &mut Vec<Loaded>, req: &Value) -> Result<Value, String> {
    let find = |keys: &[Loaded]| keys.iter().position(|k| k.id == field(req, "key"));
    let key = |keys: &[Loaded]| -> Result<usize, String> {
        find(keys).ok_or_else(|| format!("unknown key {:?}", field(req, "key")))
    };
    Ok(match field(req, "op") {
        "hello" => json!({
            "name": lib.id(), "version": lib.version(), "language": "rust",
            "variants": lib.variants(), "min_bits": lib.min_bits(), "framework": FRAMEWORK,
        }),
        "load" => {
            let variant = req["variant"].as_str().unwrap_or("crt");
            let k = lib.load(field(req, "pem"), variant)?;
            let bits = k.bits();
            keys.retain(|l| l.id != field(req, "id"));
            keys.push(Loaded {
                id: field(req, "id").to_owned(),
                key: k,
                pem: field(req, "pem").to_owned(),
                variant: variant.to_owned(),
            });
            json!({ "bits": bits })
        }
        "encrypt" => {
            let i = key(keys)?;
            json!({"ct": to_hex(&keys[i].key.encrypt(&from_hex(field(req, "msg"))?)?)})
        }
        "decrypt" => {
            let i = key(keys)?;
            json!({"msg": to_hex(&keys[i].key.decrypt(&from_hex(field(req, "ct"))?)?)})
        }
        "sign" => {
            let i = key(keys)?;
            json!({"sig": to_hex(&keys[i].key.sign(&from_hex(field(req, "msg"))?)?)})
        }
        "verify" => {
            let i = key(keys)?;
            let ok = keys[i]
                .key
                .verify(&from_hex(field(req, "msg"))?, &from_hex(field(req, "sig"))?);
            json!({ "valid": ok })
        }
        "bench" => {
            let k = find(keys).map(|i| keys[i].key.as_ref());
            let op = prepare(lib, k, req)?;
            json!({"ns": plain(op, num(req, "iterations", 1).max(1), num(req, "reps", 1).max(1))?})
        }
        "framework" => {
            let k = find(keys).map(|i| (keys[i].pem.clone(), keys[i].variant.clone()));
            if field(req, "what") != "keygen" && k.is_none() {
                return Err(format!("unknown key {:?}", field(req, "key")));
            }
            framework(lib, k.as_ref(), req)?
        }
        other => return Err(format!("unknown op {other:?}")),
    })
}

fn serve(lib: &'static dyn Lib) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    let mut keys = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        if line.trim().is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Value>(&line) {
            Ok(req) if req["op"] == "quit" => break,
            Ok(req) => match handle(lib, &mut keys, &req) {
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

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: crossbench-rust --lib rsa-variants|aws-lc-rs|rustcrypto [--criterion]";
    let lib = match args
        .iter()
        .position(|a| a == "--lib")
        .and_then(|i| args.get(i + 1))
    {
        Some(name) => match libs::by_name(name) {
            Some(l) => l,
            None => {
                eprintln!("crossbench-rust: unknown --lib {name:?}; {usage}");
                return std::process::ExitCode::from(2);
            }
        },
        None => {
            eprintln!("crossbench-rust: {usage}");
            return std::process::ExitCode::from(2);
        }
    };
    let run = if args.iter().any(|a| a == "--criterion") {
        criterion_child(lib)
    } else {
        serve(lib)
    };
    match run {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crossbench-rust: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
