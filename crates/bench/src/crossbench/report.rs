//! The report: tables, plots and the published figures beside ours.

use super::*;
use crate::error::Error;

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
    /// When, on what and with which command the run was made.
    pub provenance: Option<crate::provenance::Provenance>,
}

/// A column of a table: a size and a message length.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Column {
    bits: u32,
    msg_len: usize,
}

impl Column {
    pub(super) fn label(self, op: &str) -> String {
        if op == "keygen" || op == "sign" || op == "verify" {
            format!("RSA-{}", self.bits)
        } else {
            format!("RSA-{} ({} B)", self.bits, self.msg_len)
        }
    }
}

/// A mean and its standard deviation, or the mean and `n=1` when one
/// sample leaves no spread to state.
fn spread(mean: f64, sd: f64, samples: u64) -> String {
    if samples >= 2 {
        format!("{mean:.1} ± {sd:.1}")
    } else {
        format!("{mean:.1} (n={samples})")
    }
}

impl Report {
    pub(super) fn impls(&self) -> Vec<&str> {
        self.implementations.iter().map(|i| i.id.as_str()).collect()
    }

    /// The row that stands for a cell: the most iterations measured.
    pub(super) fn best(&self, imp: &str, op: &str, variant: &str, col: Column) -> Option<&Row> {
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
    pub(super) fn tables(&self) -> Vec<(String, String, Vec<Column>)> {
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

    /// Whether a column's rows can be ranked: each has at least
    /// [`MIN_TO_RANK`] repetitions.
    fn rankable(&self, op: &str, v: &str, c: Column) -> bool {
        self.impls()
            .iter()
            .filter_map(|i| self.best(i, op, v, c))
            .all(|r| r.reps_us.len() >= MIN_TO_RANK)
    }

    /// Per table column with enough repetitions to rank: the fastest
    /// implementation and its mean, then the runner-up.
    pub(super) fn fastest(&self) -> Vec<[String; 7]> {
        let mut out = Vec::new();
        for (op, v, cols) in self.tables() {
            for c in cols {
                if !self.rankable(&op, &v, c) {
                    continue;
                }
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

    pub(super) fn cell_text(r: &Row) -> String {
        let n = r.reps_us.len();
        let ci = match r.ci95_us {
            Some(c) if n >= 2 => format!(" ± {c:.1}"),
            _ => String::new(),
        };
        format!(
            "{:.1}{ci} ({}{}×{}{})",
            r.mean_us,
            if n < 2 { "n=" } else { "" },
            n,
            r.iterations,
            if r.capped_from.is_some() {
                ", capped"
            } else {
                ""
            }
        )
    }

    /// Why nothing is ranked: too few repetitions.
    pub(super) fn unranked(&self) -> String {
        format!(
            "Not ranked: a ranking needs at least {MIN_TO_RANK} repetitions per cell and this run made {}; with so few, two runs of the same code can swap places. Run with --reps {MIN_TO_RANK} or more (the default) to rank.",
            self.plan.reps
        )
    }

    /// The implementations and the protocol, as lines.
    pub(super) fn preamble(&self) -> Vec<String> {
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
        let mut s = self
            .provenance
            .as_ref()
            .map_or_else(String::new, |p| p.markdown());
        s.push_str(
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
                        Some(r) if r.mean_us == fastest && self.rankable(&op, &v, c) => {
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
        let ranked = self.fastest();
        if ranked.is_empty() {
            let _ = writeln!(s, "## Ranking\n\n{}", self.unranked());
        } else {
            s.push_str("## Fastest per operation and size\n\n| operation | size | fastest | µs | next | µs | next / fastest |\n|---|---|---|---|---|---|---|\n");
            for r in ranked {
                let _ = writeln!(s, "| {} |", r.join(" | "));
            }
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
                    "| {} | {} | {} ({}) | {} | {} | {:.1} | {} | {:.1} | {:.3} |",
                    f.implementation,
                    f.framework,
                    f.operation,
                    f.variant,
                    Column {
                        bits: f.bits,
                        msg_len: f.msg_len
                    }
                    .label(&f.operation),
                    spread(f.mean_us, f.sd_us, f.samples),
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
                "key size (message length)",
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
        let ranked = self.fastest();
        sections.push(if ranked.is_empty() {
            (
                "Ranking".into(),
                format!("<p>{}</p>", plot::escape(&self.unranked())),
            )
        } else {
            (
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
                    &ranked.into_iter().map(Vec::from).collect::<Vec<_>>(),
                ),
            )
        });
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
                        spread(f.mean_us, f.sd_us, f.samples),
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
        let page = plot::page("sipsec crypto-bench: RSA across languages", &sections);
        match &self.provenance {
            Some(p) => plot::after_heading(&page, &p.html()),
            None => page,
        }
    }

    /// Writes the outputs asked for (the plots as `crypto-TITLE.svg`, and
    /// PNG where rsvg-convert is); returns the files.
    pub fn write(&self, out: &Outputs) -> Result<Vec<PathBuf>, Error> {
        let html = self.html();
        let json = serde_json::to_string_pretty(self).map_err(|e| Error::Input(e.to_string()))?;
        let mut files = Vec::new();
        for (path, text) in [
            (&out.json, json),
            (&out.csv, csv(&self.rows)),
            (&out.markdown, self.markdown()),
            (&out.html, html.clone()),
        ] {
            let Some(p) = path else { continue };
            if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(Error::io(dir.display()))?;
            }
            std::fs::write(p, text).map_err(Error::io(p.display()))?;
            files.push(p.clone());
        }
        if let Some(dir) = &out.plots {
            let caption = self
                .provenance
                .as_ref()
                .map_or_else(|| "crypto-bench".to_owned(), |p| p.caption("crypto-bench"));
            files.extend(plot::write_files(&html, dir, "crypto", &caption)?);
        }
        Ok(files)
    }
}

/// Where a crypto-bench run writes its results; each is optional.
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    /// Everything, as JSON.
    pub json: Option<PathBuf>,
    /// The plain-timer rows as CSV.
    pub csv: Option<PathBuf>,
    /// The tables as markdown.
    pub markdown: Option<PathBuf>,
    /// The HTML page with tables and plots.
    pub html: Option<PathBuf>,
    /// A directory for the plots as SVG and PNG files.
    pub plots: Option<PathBuf>,
}

impl Outputs {
    /// All of them in `dir`: results.json, results.csv, results.md,
    /// index.html and plots/.
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            json: Some(dir.join("results.json")),
            csv: Some(dir.join("results.csv")),
            markdown: Some(dir.join("results.md")),
            html: Some(dir.join("index.html")),
            plots: Some(dir.join("plots")),
        }
    }

    /// Whether nothing is asked for.
    pub fn is_empty(&self) -> bool {
        self.json.is_none()
            && self.csv.is_none()
            && self.markdown.is_none()
            && self.html.is_none()
            && self.plots.is_none()
    }
}
