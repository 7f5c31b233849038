//! The measurement plan, its cells and the timed runs.

use super::*;
use crate::error::Error;

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
    /// 95 % CI half-width, µs; none from fewer than two repetitions.
    pub ci95_us: Option<f64>,
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

pub(super) fn reps_from(v: &Value, field: &str) -> Vec<f64> {
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

pub(super) fn key_id(c: &Cell) -> String {
    if c.variant == "crt" {
        format!("k{}", c.bits)
    } else {
        format!("k{}-{}", c.bits, c.variant)
    }
}

/// The plain timer on one cell: a row per iteration count, the counts
/// after a capped one skipped.
pub(super) fn plain_cell(a: &mut Adapter, plan: &Plan, c: &Cell) -> Result<Vec<Row>, Error> {
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
            return Err(Error::peer(
                a.id(),
                format!(
                    "bench returned {} repetitions, not {}",
                    reps_us.len(),
                    plan.reps
                ),
            ));
        }
        let (mean_us, sd_us, median_us, ci95_us) = summary(&reps_us);
        let ci95_us = (reps_us.len() >= 2).then_some(ci95_us);
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
pub(super) fn framework_cell(
    a: &mut Adapter,
    plan: &Plan,
    c: &Cell,
    plain_mean_us: f64,
) -> Result<FrameworkRow, Error> {
    let v = a.call(&json!({
        "op": "framework", "what": c.op, "key": key_id(c), "bits": c.bits,
        "msg_len": c.msg_len, "reps": plan.reps, "seconds": plan.framework_seconds,
    }))?;
    let us = |f: &str| v[f].as_f64().unwrap_or(f64::NAN) / 1e3;
    let mean_us = us("mean_ns");
    if !(mean_us.is_finite() && mean_us > 0.0) {
        return Err(Error::peer(
            a.id(),
            format!("the framework gave no mean: {v}"),
        ));
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
            "{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{}",
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
            r.ci95_us.map_or(String::new(), |c| format!("{c:.3}"))
        );
    }
    s
}
