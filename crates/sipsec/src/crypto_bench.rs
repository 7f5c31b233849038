//! `sipsec crypto-bench`: RSA implementations across languages (see
//! `crossbench/protocol.md` and `docs/crypto-bench.md`).

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use clap::Args;
use sipsec_bench::crossbench::{self, Adapter, Plan, Report, LANGUAGES, OPERATIONS, VARIANTS};

/// Arguments of `sipsec crypto-bench`.
#[derive(Args)]
pub struct CryptoBenchArgs {
    /// Languages, comma-separated: c, cpp, go, java, python, rust.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "c,cpp,go,java,python,rust"
    )]
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
    /// Key variants for decrypt and sign: crt, standard, multiprime.
    #[arg(long, value_delimiter = ',', default_value = "crt,standard,multiprime")]
    variants: Vec<String>,
    /// Iterations per repetition (the study's protocol), each measured.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000,10000")]
    iterations: Vec<u64>,
    /// Iterations per repetition for key generation (slow: fewer).
    #[arg(long, value_delimiter = ',', default_value = "1,10")]
    keygen_iterations: Vec<u64>,
    /// Repetitions per cell (after one warm-up repetition).
    #[arg(long, default_value_t = 5)]
    reps: u32,
    /// Seconds a cell may take; slower cells run fewer iterations, marked "capped".
    #[arg(long, default_value_t = 20.0)]
    cell_seconds: f64,
    /// Seconds per framework sample (JMH, criterion, testing.B,
    /// pytest-benchmark, Google Benchmark); 0 runs no framework.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    framework_seconds: f64,
    /// Seconds an adapter may take to answer one request before it is
    /// stopped and its remaining cells fail.
    #[arg(long, default_value_t = 600.0)]
    call_timeout: f64,
    /// Smoke run: 2048 bits, 1 × 10 iterations (key generation 1 × 1),
    /// short framework runs.
    #[arg(long)]
    quick: bool,
    /// The crossbench folder (adapter sources and protocol.md).
    #[arg(long, default_value = "crossbench")]
    crossbench: PathBuf,
    /// Where adapters are built.
    #[arg(long, default_value = "target/crossbench")]
    build_dir: PathBuf,
    /// Write every result as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the plain-timer rows as CSV here.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write the tables (markdown) here.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Write an HTML page with the tables and plots (SVG) here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Also write each plot as SVG and PNG files into this directory.
    #[arg(long)]
    plots: Option<PathBuf>,
    /// Write all of the above into this directory (results.json,
    /// results.csv, results.md, index.html, plots/); the default when none
    /// of them is given.
    #[arg(long, default_value = "target/crypto-bench")]
    out: PathBuf,
    /// Also write the shared test keys (PKCS#8 PEM) here.
    #[arg(long)]
    keys_dir: Option<PathBuf>,
    /// Install what the adapters lack first, with `setup.sh --crypto-bench`
    /// beside the crossbench folder (apt-get, pip, Maven; sudo when not root).
    #[arg(long)]
    install: bool,
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("sipsec crypto-bench: {msg}");
    ExitCode::from(code)
}

fn unknown<'a>(given: &'a [String], known: &[&str]) -> Option<&'a String> {
    given.iter().find(|g| !known.contains(&g.as_str()))
}

/// `s` seconds as "42s" or "4m05s" (rounded to the second first, so that
/// 299.6 s is "5m00s", not "4m60s").
fn minutes(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s < 60 {
        format!("{s}s")
    } else {
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

/// Runs `setup.sh --crypto-bench` when the adapters lack something.
fn install(a: &CryptoBenchArgs) -> Result<(), String> {
    let lacking = crossbench::missing(&a.langs, &a.build_dir);
    if lacking.is_empty() {
        eprintln!("--install: the adapters have what they need");
        return Ok(());
    }
    let script = a.crossbench.join("../setup.sh");
    if !script.is_file() {
        return Err(format!("--install: {} not found", script.display()));
    }
    eprintln!(
        "--install: missing {}; running {} --crypto-bench",
        lacking.join("; "),
        script.display()
    );
    // The script's output goes to stderr: stdout carries the tables.
    let status = Command::new("bash")
        .arg(&script)
        .arg("--crypto-bench")
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .map_err(|e| format!("--install: cannot run {}: {e}", script.display()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("--install: {} failed ({status})", script.display()))
    }
}

/// Runs the command.
pub fn run(a: CryptoBenchArgs) -> ExitCode {
    let plan = match plan(&a) {
        Ok(p) => p,
        Err(e) => return fail(2, e),
    };
    if a.install {
        if let Err(e) = install(&a) {
            return fail(2, e);
        }
    }
    eprintln!("building the adapters in {}", a.build_dir.display());
    let specs = match crossbench::prepare(&a.langs, &a.crossbench, &a.build_dir) {
        Ok(s) => s,
        Err(e) => return fail(2, e),
    };
    let mut adapters = Vec::new();
    for s in &specs {
        match Adapter::start(s, Duration::from_secs_f64(a.call_timeout)) {
            Ok(ad) => {
                eprintln!("{:<22} {}", ad.id(), ad.info.version);
                adapters.push(ad);
            }
            Err(e) => return fail(1, e),
        }
    }
    let keys = match crossbench::make_keys(&plan.sizes, &plan.variants, a.keys_dir.as_deref()) {
        Ok(k) => k,
        Err(e) => return fail(1, format!("making the test keys: {e}")),
    };
    let pairs = match crossbench::cross_check(&mut adapters, &keys) {
        Ok(n) => n,
        Err(e) => return fail(1, format!("cross-check failed: {e}")),
    };
    eprintln!(
        "cross-check: {pairs} pairs agree (decrypt each other's OAEP, verify each other's PSS, refuse a tampered message)"
    );
    let cells = crossbench::cells(&plan, &adapters, &keys);
    eprintln!(
        "measuring {} cells ({} implementations)",
        cells.len(),
        adapters.len()
    );
    let m = crossbench::measure(&mut adapters, &plan, &cells, show);
    let report = Report {
        implementations: adapters.iter().map(|a| a.info.clone()).collect(),
        plan,
        cross_check_pairs: pairs,
        rows: m.rows,
        framework: m.framework,
        failures: m.failures,
        provenance: Some(crate::provenance::get().clone()),
    };
    println!("{}", report.markdown());
    if let Err(e) = write_outputs(&a, &report) {
        return fail(1, e);
    }
    if report.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        fail(
            1,
            format!(
                "{} cells failed (the others are in the results):\n{}",
                report.failures.len(),
                report.failures.join("\n")
            ),
        )
    }
}

/// The measurement plan the arguments ask for, checked.
fn plan(a: &CryptoBenchArgs) -> Result<Plan, String> {
    let mut plan = Plan {
        sizes: a.sizes.clone(),
        operations: a.ops.clone(),
        variants: a.variants.clone(),
        iterations: a.iterations.clone(),
        keygen_iterations: a.keygen_iterations.clone(),
        reps: a.reps,
        cell_seconds: a.cell_seconds,
        framework_seconds: a.framework_seconds,
        framework_keygen_max_bits: 2048,
    };
    if a.quick {
        plan.sizes = vec![2048];
        plan.iterations = vec![10];
        plan.keygen_iterations = vec![1];
        plan.reps = 1;
        if plan.framework_seconds > 0.0 {
            plan.framework_seconds = 0.05;
        }
    }
    for (flag, given, known) in [
        ("--langs", &a.langs, &LANGUAGES[..]),
        ("--ops", &plan.operations, &OPERATIONS[..]),
        ("--variants", &plan.variants, &VARIANTS[..]),
    ] {
        if let Some(x) = unknown(given, known) {
            return Err(format!(
                "{flag}: unknown value {x:?} (known: {})",
                known.join(", ")
            ));
        }
    }
    if !plan.variants.iter().any(|v| v == "crt") {
        return Err("--variants: crt is needed (the public-key operations use it)".into());
    }
    if let Some(b) = plan
        .sizes
        .iter()
        .find(|b| !(1024..=8192).contains(*b) || *b % 8 != 0)
    {
        return Err(format!(
            "--sizes: {b} is not a multiple of 8 in 1024..=8192"
        ));
    }
    if plan.iterations.is_empty()
        || plan.iterations.contains(&0)
        || plan.keygen_iterations.is_empty()
        || plan.keygen_iterations.contains(&0)
        || plan.reps == 0
    {
        return Err("--iterations, --keygen-iterations and --reps must be positive".into());
    }
    if !plan.cell_seconds.is_finite() || plan.cell_seconds <= 0.0 {
        return Err("--cell-seconds must be positive".into());
    }
    if !(0.1..=86_400.0).contains(&a.call_timeout) {
        return Err("--call-timeout must be between 0.1 and 86400 seconds".into());
    }
    if !plan.framework_seconds.is_finite() || plan.framework_seconds < 0.0 {
        return Err("--framework-seconds must be 0 (off) or positive".into());
    }
    Ok(plan)
}

/// One line on stderr per cell measured.
fn show(p: crossbench::Progress<'_>) {
    if let Some(f) = p.failure {
        eprintln!("[{}/{}] FAILED {f}", p.done, p.total);
    }
    let Some(r) = p.rows.last() else { return };
    let fw = p.framework.map_or(String::new(), |f| {
        format!(" | {} {:.1} µs ({:.2}×)", f.framework, f.mean_us, f.ratio)
    });
    let left = p.elapsed / p.done as f64 * (p.total - p.done) as f64;
    eprintln!(
        "[{}/{}] {:<20} {:<7} {:>4} {:<10} {:>3} B {:>10.1} µs {} ({}×{}{}){fw}  {} elapsed, ~{} left",
        p.done,
        p.total,
        r.implementation,
        r.operation,
        r.bits,
        r.variant,
        r.msg_len,
        r.mean_us,
        sipsec_bench::stats::plus_minus(r.ci95_us, r.reps_us.len(), 1),
        r.reps_us.len(),
        r.iterations,
        if r.capped_from.is_some() { ", capped" } else { "" },
        minutes(p.elapsed),
        minutes(left)
    );
}

/// Writes the report where asked (or every format into `--out`).
fn write_outputs(a: &CryptoBenchArgs, report: &Report) -> Result<(), String> {
    let mut outputs = crossbench::Outputs {
        json: a.json.clone(),
        csv: a.csv.clone(),
        markdown: a.markdown.clone(),
        html: a.html.clone(),
        plots: a.plots.clone(),
    };
    if outputs.is_empty() {
        outputs = crossbench::Outputs::in_dir(&a.out);
    }
    match report.write(&outputs) {
        Ok(files) => eprintln!(
            "wrote {} files: {}",
            files.len(),
            files
                .iter()
                .filter(|f| f.extension().is_some_and(|e| e != "svg" && e != "png"))
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Err(e) => return Err(e.to_string()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::minutes;

    #[test]
    fn times_left_round_to_the_second_before_splitting() {
        assert_eq!(minutes(0.4), "0s");
        assert_eq!(minutes(59.4), "59s");
        assert_eq!(minutes(59.6), "1m00s");
        assert_eq!(minutes(299.6), "5m00s");
        assert_eq!(minutes(3725.0), "62m05s");
    }
}
