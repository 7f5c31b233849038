//! A run's figures: JSON (everything), CSV (per second) and a text summary.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::engine::{Outcome, Second, Shape};
use crate::stats::{coefficient, BUCKET_BOUNDS_MS};
use crate::Options;

/// Latency figures in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyMs {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
    /// Standard deviation.
    pub sd: f64,
}

/// One second of the run, with the server's CPU when sampled.
#[derive(Debug, Clone, Serialize)]
pub struct SecondRow {
    /// Seconds since the start.
    pub t: usize,
    /// Calls started (offered).
    pub offered: u64,
    /// Calls completed successfully.
    pub achieved: u64,
    /// Calls failed.
    pub failed: u64,
    /// Requests retransmitted.
    pub retransmissions: u64,
    /// Server CPU, % of one core (absent without a server process).
    pub server_cpu_percent: Option<f64>,
}

/// Everything a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// The servers loaded (callers' targets), comma-separated.
    pub target: String,
    /// The callers' transport: UDP, TCP, TLS, WS or WSS.
    pub transport: String,
    /// Where the callee registered, when it is another server than the
    /// callers' (a call that crosses nodes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callee_at: Option<String>,
    /// `rate N` or `in-flight N`.
    pub shape: String,
    /// Calls started.
    pub started: u64,
    /// Calls completed successfully.
    pub ok: u64,
    /// Calls failed.
    pub failed: u64,
    /// Failed calls by cause.
    pub failures: BTreeMap<String, u64>,
    /// Requests retransmitted.
    pub retransmissions: u64,
    /// Responses that matched no call step.
    pub unexpected: u64,
    /// With shared flows (`--share-flows`), how the threads shared them
    /// and how many responses one thread read for another's call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_flows: Option<String>,
    /// Wall time, seconds.
    pub elapsed_s: f64,
    /// Successful calls per second over the run.
    pub achieved_cps: f64,
    /// Latency of successful calls (sum of their timed legs).
    pub latency_ms: LatencyMs,
    /// Shares of calls in 0–30, 31–60, 61–90, 91–120, 121–150, >150 ms.
    pub buckets: [f64; 6],
    /// `p1*w1 + … + p5*w5 − p6`.
    pub latency_coefficient: f64,
    /// The weights used.
    pub weights: [f64; 5],
    /// Server CPU seconds during the run (when sampled).
    pub server_cpu_s: Option<f64>,
    /// Server CPU microseconds per successful call (when sampled).
    pub server_cpu_us_per_call: Option<f64>,
    /// Bytes on the wire per successful call, both directions, as the
    /// generator's sockets moved them (headers of IP/UDP/TCP not counted;
    /// TLS records, WebSocket frames, retransmissions, failed calls and
    /// connection set-up spread over the calls).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wire_bytes_per_call: Option<f64>,
    /// Over UDP, datagrams the server's receive queue dropped during the
    /// run (the kernel's per-socket count at the target's port): the
    /// server fell behind what arrived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_socket_drops: Option<u64>,
    /// Per second.
    pub seconds: Vec<SecondRow>,
    /// Latency CDF points (ms, share).
    pub cdf: Vec<(f64, f64)>,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

impl Report {
    /// Builds the report of `o`; `cpu` holds the server's cumulative CPU
    /// seconds at the start, after each second, and at the end.
    pub fn new(opts: &Options, o: &Outcome, cpu: &[f64]) -> Self {
        let l = &o.latency;
        let buckets = l.bucket_shares();
        let cpu_used = match (cpu.first(), cpu.last()) {
            // A process that exited takes its time with it: never negative.
            (Some(a), Some(b)) if cpu.len() >= 2 => Some((b - a).max(0.0)),
            _ => None,
        };
        let elapsed = o.elapsed.as_secs_f64();
        let seconds = o
            .seconds
            .iter()
            .enumerate()
            .map(|(t, s): (usize, &Second)| SecondRow {
                t,
                offered: s.started,
                achieved: s.ok,
                failed: s.failed,
                retransmissions: s.retransmissions,
                server_cpu_percent: match (cpu.get(t), cpu.get(t + 1)) {
                    (Some(a), Some(b)) => Some(((b - a) * 100.0).max(0.0)),
                    _ => None,
                },
            })
            .collect();
        Self {
            scenario: opts.run.scenario.name.clone(),
            target: std::iter::once(&opts.run.target)
                .chain(&opts.run.also)
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            transport: opts.run.transport.as_str().to_owned(),
            callee_at: opts
                .callee_registrar
                .filter(|r| opts.run.scenario.needs_callee && *r != opts.run.target)
                .map(|r| r.to_string()),
            shape: match opts.run.shape {
                Shape::Rate(r) => format!("rate {r}"),
                Shape::InFlight(n) => format!("in-flight {n}"),
            },
            started: o.started,
            ok: o.ok,
            failed: o.failed(),
            failures: o.failures.clone(),
            retransmissions: o.retransmissions,
            unexpected: o.unexpected,
            shared_flows: opts.run.share_flows.then(|| {
                let how = match (&o.steered, &o.unsteered) {
                    (true, _) => {
                        "a socket per thread on each flow's port, responses steered by Call-ID"
                            .to_owned()
                    }
                    (false, Some(why)) => format!(
                        "one socket per flow, read by every thread (not steered by Call-ID: {why})"
                    ),
                    (false, None) => {
                        "one socket or connection per flow, read by every thread".to_owned()
                    }
                };
                format!("{how}; {} responses handed over", o.handed_over)
            }),
            elapsed_s: elapsed,
            achieved_cps: if elapsed > 0.0 {
                o.ok as f64 / elapsed
            } else {
                0.0
            },
            latency_ms: LatencyMs {
                p50: ms(l.quantile_us(0.5)),
                p90: ms(l.quantile_us(0.9)),
                p99: ms(l.quantile_us(0.99)),
                p999: ms(l.quantile_us(0.999)),
                max: ms(l.max_us()),
                mean: l.mean_us() / 1000.0,
                sd: l.stdev_us() / 1000.0,
            },
            buckets,
            latency_coefficient: coefficient(&buckets, &opts.weights),
            weights: opts.weights,
            server_cpu_s: cpu_used,
            server_cpu_us_per_call: cpu_used.filter(|_| o.ok > 0).map(|c| c * 1e6 / o.ok as f64),
            wire_bytes_per_call: (o.ok > 0)
                .then(|| (o.wire.sent + o.wire.received) as f64 / o.ok as f64),
            server_socket_drops: None,
            seconds,
            cdf: l.cdf().into_iter().map(|(us, p)| (ms(us), p)).collect(),
        }
    }

    /// Per-second rows as CSV.
    pub fn csv(&self) -> String {
        let mut s = String::from("t,offered,achieved,failed,retransmissions,server_cpu_percent\n");
        for r in &self.seconds {
            let cpu = r
                .server_cpu_percent
                .map(|c| format!("{c:.1}"))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "{},{},{},{},{},{cpu}",
                r.t, r.offered, r.achieved, r.failed, r.retransmissions
            );
        }
        s
    }

    /// A human summary.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} over {} against {}{} ({}): {} started, {} ok, {} failed in {:.2} s = {:.1} calls/s",
            self.scenario,
            self.transport,
            self.target,
            self.callee_at
                .as_ref()
                .map(|c| format!(", callee registered at {c}"))
                .unwrap_or_default(),
            self.shape,
            self.started,
            self.ok,
            self.failed,
            self.elapsed_s,
            self.achieved_cps
        );
        for (cause, n) in &self.failures {
            let _ = writeln!(s, "  failed: {n} × {cause}");
        }
        let l = &self.latency_ms;
        let _ = writeln!(
            s,
            "  latency ms: p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}  mean {:.2}",
            l.p50, l.p90, l.p99, l.p999, l.max, l.mean
        );
        let mut lo = 0;
        let mut parts = Vec::new();
        for (i, share) in self.buckets.iter().enumerate() {
            let label = match BUCKET_BOUNDS_MS.get(i) {
                Some(hi) => {
                    let l = format!("{lo}-{hi}");
                    lo = hi + 1;
                    l
                }
                None => format!(">{}", BUCKET_BOUNDS_MS[4]),
            };
            parts.push(format!("{label}: {:.1}%", share * 100.0));
        }
        let _ = writeln!(
            s,
            "  buckets (ms): {}  coefficient {:.4}",
            parts.join("  "),
            self.latency_coefficient
        );
        let _ = writeln!(
            s,
            "  retransmissions {}, unexpected responses {}",
            self.retransmissions, self.unexpected
        );
        if let Some(shared) = &self.shared_flows {
            let _ = writeln!(s, "  shared flows: {shared}");
        }
        if let Some(b) = self.wire_bytes_per_call {
            let _ = writeln!(s, "  on the wire {b:.0} bytes per successful call");
        }
        if let (Some(c), Some(per)) = (self.server_cpu_s, self.server_cpu_us_per_call) {
            let _ = writeln!(s, "  server CPU {c:.2} s = {per:.1} µs per successful call");
        }
        if let Some(d) = self.server_socket_drops.filter(|d| *d > 0) {
            let _ = writeln!(
                s,
                "  the server's receive queue dropped {d} datagrams (it fell behind)"
            );
        }
        s
    }

    /// A self-contained HTML page: summary tables and plots.
    pub fn html(&self) -> String {
        use crate::plot;
        let l = &self.latency_ms;
        let f1 = |v: f64| format!("{v:.1}");
        let f2 = |v: f64| format!("{v:.2}");
        let summary = plot::table(
            &[
                "started",
                "ok",
                "failed",
                "calls/s",
                "retransmissions",
                "server CPU µs/call",
            ],
            &[vec![
                self.started.to_string(),
                self.ok.to_string(),
                self.failed.to_string(),
                f1(self.achieved_cps),
                self.retransmissions.to_string(),
                self.server_cpu_us_per_call.map_or("-".into(), f1),
            ]],
        );
        let latency = plot::table(
            &[
                "p50 ms",
                "p90 ms",
                "p99 ms",
                "p99.9 ms",
                "max ms",
                "mean ms",
                "coefficient",
            ],
            &[vec![
                f2(l.p50),
                f2(l.p90),
                f2(l.p99),
                f2(l.p999),
                f2(l.max),
                f2(l.mean),
                format!("{:.4}", self.latency_coefficient),
            ]],
        );
        let labels: Vec<String> = ["0-30", "31-60", "61-90", "91-120", "121-150", ">150"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let buckets = plot::bars(
            "Latency buckets",
            "call latency, ms",
            "% of calls",
            &labels,
            &[("calls", self.buckets.iter().map(|b| b * 100.0).collect())],
        );
        let per_second = plot::lines(
            "Offered and achieved per second",
            "seconds",
            "calls/s",
            &[
                (
                    "offered",
                    self.seconds
                        .iter()
                        .map(|r| (r.t as f64, r.offered as f64))
                        .collect(),
                ),
                (
                    "achieved",
                    self.seconds
                        .iter()
                        .map(|r| (r.t as f64, r.achieved as f64))
                        .collect(),
                ),
                (
                    "failed",
                    self.seconds
                        .iter()
                        .map(|r| (r.t as f64, r.failed as f64))
                        .collect(),
                ),
            ],
        );
        let cdf = plot::lines_log_x(
            "Latency CDF",
            "call latency, ms (log scale)",
            "share of calls",
            &[("latency", self.cdf.clone())],
        );
        let mut sections = vec![
            (
                format!(
                    "{} over {} against {} ({})",
                    self.scenario, self.transport, self.target, self.shape
                ),
                summary,
            ),
            ("Latency".to_owned(), format!("{latency}{buckets}{cdf}")),
            ("Load".to_owned(), per_second),
        ];
        let cpu: Vec<(f64, f64)> = self
            .seconds
            .iter()
            .filter_map(|r| Some((r.t as f64, r.server_cpu_percent?)))
            .collect();
        if !cpu.is_empty() {
            sections.push((
                "Server CPU".to_owned(),
                plot::lines("Server CPU", "seconds", "% of one core", &[("cpu", cpu)]),
            ));
        }
        plot::page(&format!("sipsec bench: {}", self.scenario), &sections)
    }
}
