//! `sipsec crypto-bench`: RSA implementations across languages (see
//! `crossbench/protocol.md` and `docs/crypto-bench.md`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use sipsec_bench::crossbench::{self, Adapter, Plan, OPERATIONS};

/// Arguments of `sipsec crypto-bench`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct CryptoBenchArgs {
    #[command(subcommand)]
    command: Option<CryptoBenchCommand>,
    /// Languages, comma-separated: c, go, python, rust.
    #[arg(long, value_delimiter = ',', default_value = "c,go,python,rust")]
    langs: Vec<String>,
    /// Key sizes in bits, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1024,2048,3072,4096")]
    sizes: Vec<u32>,
    /// Operations, comma-separated: keygen, encrypt, decrypt, sign, verify.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "keygen,encrypt,decrypt,sign,verify"
    )]
    ops: Vec<String>,
    /// Iterations per repetition (the study's protocol), each measured.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000,10000")]
    iterations: Vec<u64>,
    /// Repetitions per cell (after one warm-up repetition).
    #[arg(long, default_value_t = 5)]
    reps: u32,
    /// Seconds a cell may take; slower cells run fewer iterations, marked "capped".
    #[arg(long, default_value_t = 20.0)]
    cell_seconds: f64,
    /// Smoke run: 2048 bits (key generation 1024), 1 × 10 iterations.
    #[arg(long)]
    quick: bool,
    /// The crossbench folder (adapter sources and protocol.md).
    #[arg(long, default_value = "crossbench")]
    crossbench: PathBuf,
    /// Where adapters are built.
    #[arg(long, default_value = "target/crossbench")]
    build_dir: PathBuf,
    /// Also write the shared test keys (PKCS#8 PEM) here.
    #[arg(long)]
    keys_dir: Option<PathBuf>,
    /// Write every row (with each repetition) as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write every row as CSV here.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write the tables (markdown) here.
    #[arg(long)]
    markdown: Option<PathBuf>,
}

#[derive(Subcommand)]
enum CryptoBenchCommand {
    /// Serve the line protocol on stdin/stdout with sipsec's own RSA
    /// (rsa-variants on OpenSSL): the Rust adapter the runner starts.
    Adapter,
}

fn fail(code: u8, msg: &str) -> ExitCode {
    eprintln!("sipsec crypto-bench: {msg}");
    ExitCode::from(code)
}

/// Runs the command.
pub fn run(a: CryptoBenchArgs) -> ExitCode {
    if let Some(CryptoBenchCommand::Adapter) = a.command {
        return match crossbench::serve_adapter() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(1, &e),
        };
    }
    let mut plan = Plan {
        sizes: a.sizes.clone(),
        operations: a.ops.clone(),
        iterations: a.iterations.clone(),
        reps: a.reps,
        cell_seconds: a.cell_seconds,
    };
    if a.quick {
        plan.sizes = vec![2048];
        plan.iterations = vec![10];
        plan.reps = 1;
    }
    if let Some(b) = plan
        .sizes
        .iter()
        .find(|b| !(1024..=8192).contains(*b) || *b % 8 != 0)
    {
        return fail(
            2,
            &format!("--sizes: {b} is not a multiple of 8 in 1024..=8192"),
        );
    }
    if let Some(op) = plan
        .operations
        .iter()
        .find(|o| !OPERATIONS.contains(&o.as_str()))
    {
        return fail(
            2,
            &format!(
                "--ops: unknown operation {op:?} (known: {})",
                OPERATIONS.join(", ")
            ),
        );
    }
    if plan.iterations.is_empty() || plan.iterations.contains(&0) || plan.reps == 0 {
        return fail(2, "--iterations and --reps must be positive");
    }
    if !plan.cell_seconds.is_finite() || plan.cell_seconds <= 0.0 {
        return fail(2, "--cell-seconds must be positive");
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return fail(1, &format!("cannot find this program: {e}")),
    };
    let specs = match crossbench::prepare(&a.langs, &a.crossbench, &a.build_dir, &exe) {
        Ok(s) => s,
        Err(e) => return fail(2, &e),
    };
    let mut adapters = Vec::new();
    for s in &specs {
        match Adapter::start(s) {
            Ok(ad) => {
                eprintln!("{:<22} {}", ad.id, ad.version);
                adapters.push(ad);
            }
            Err(e) => return fail(1, &e),
        }
    }
    // Key generation in quick mode: one 1024-bit key per implementation.
    let keygen_quick = a.quick && plan.operations.iter().any(|o| o == "keygen");
    let keys = match crossbench::make_keys(&plan.sizes, a.keys_dir.as_deref()) {
        Ok(k) => k,
        Err(e) => return fail(1, &format!("making the test keys: {e}")),
    };
    match crossbench::cross_check(&mut adapters, &keys) {
        Ok(n) => eprintln!(
            "cross-check: {n} pairs agree (decrypt each other's OAEP, verify each other's PSS, refuse a tampered message)"
        ),
        Err(e) => return fail(1, &format!("cross-check failed: {e}")),
    }
    let print = |r: &crossbench::Row| {
        eprintln!(
            "{:<22} {:<8} {:>5} bits {:>6} × {:<6} {:>12.1} µs ± {:.1}{}",
            r.implementation,
            r.operation,
            r.bits,
            r.reps_us.len(),
            r.iterations,
            r.mean_us,
            r.ci95_us,
            r.capped_from
                .map_or(String::new(), |n| format!(" (capped from {n})"))
        )
    };
    let mut rows = Vec::new();
    if keygen_quick {
        let kg = Plan {
            sizes: vec![1024],
            operations: vec!["keygen".into()],
            iterations: vec![1],
            reps: 1,
            cell_seconds: plan.cell_seconds,
        };
        match crossbench::measure(&mut adapters, &kg, print) {
            Ok(r) => rows.extend(r),
            Err(e) => return fail(1, &e),
        }
        plan.operations.retain(|o| o != "keygen");
    }
    match crossbench::measure(&mut adapters, &plan, print) {
        Ok(r) => rows.extend(r),
        Err(e) => return fail(1, &e),
    }
    if keygen_quick {
        plan.operations.insert(0, "keygen".into());
        plan.sizes.insert(0, 1024);
    }
    let md = crossbench::markdown(&rows, &plan);
    println!("{md}");
    let write = |path: &Option<PathBuf>, text: String| -> Result<(), String> {
        match path {
            Some(p) => std::fs::write(p, text).map_err(|e| format!("{}: {e}", p.display())),
            None => Ok(()),
        }
    };
    let json = serde_json::to_string_pretty(&rows).unwrap_or_default();
    for (p, t) in [
        (&a.json, json),
        (&a.csv, crossbench::csv(&rows)),
        (&a.markdown, md),
    ] {
        if let Err(e) = write(p, t) {
            return fail(1, &e);
        }
    }
    ExitCode::SUCCESS
}
