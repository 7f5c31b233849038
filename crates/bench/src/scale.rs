//! Workers against throughput: each server with 1, 2, 4, … workers under
//! loads from one flow (a trunk, an SBC, a peer proxy: one address and
//! port) to thousands of phones. Per cell: the highest rate sustained
//! (a ramp, as `bench peak`), the CPU per call there, and each worker's
//! share of it, so that a load held to one core shows.

use std::sync::Arc;

use serde::Serialize;

use crate::compare::{self, Target};
use crate::cpu::{self, ThreadCpu};
use crate::engine::{Run, Shape, User};
use crate::error::Error;
use crate::link::Transport;
use crate::peak::{self, Ramp};
use crate::stats::{self, Step};
use crate::{scenario, Options};

/// How the load arrives: `flows` sockets in all over `threads` generator
/// threads (a caller keeps to one socket). Fewer flows than threads are
/// shared by all of them: one busy peer's load is not held to what one
/// generator thread makes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Load {
    /// Generator threads.
    pub threads: usize,
    /// Sockets per thread (with `shared`, the same ones in every thread).
    pub per_thread: usize,
    /// Every thread sends and reads on the same sockets.
    pub shared: bool,
}

impl Load {
    /// `flows` sockets over at most `threads` threads (as many as divide
    /// them evenly), or shared by all `threads` when they are fewer.
    pub fn new(flows: usize, threads: usize) -> Self {
        let (flows, threads) = (flows.max(1), threads.max(1));
        if flows < threads {
            return Load {
                threads,
                per_thread: flows,
                shared: true,
            };
        }
        let threads = (1..=threads)
            .rev()
            .find(|t| flows.is_multiple_of(*t))
            .unwrap_or(1);
        Load {
            threads,
            per_thread: flows / threads,
            shared: false,
        }
    }

    /// Sockets in all.
    pub fn flows(&self) -> usize {
        if self.shared {
            self.per_thread
        } else {
            self.threads * self.per_thread
        }
    }

    /// Its name in tables: `1 flow`, `8 flows`, `10000 flows`.
    pub fn name(&self) -> String {
        match self.flows() {
            1 => "1 flow".to_owned(),
            n => format!("{n} flows"),
        }
    }
}

/// A server as measured: its target and, for sipsec, how its UDP workers
/// share datagrams (`--udp-balance`).
#[derive(Debug, Clone)]
pub struct Variant {
    /// The server.
    pub target: Target,
    /// sipsec's `--udp-balance` (flow, call, spread, shared); none for
    /// Kamailio.
    pub balance: Option<String>,
}

impl Variant {
    /// Its name in tables: `sipsec spread`, `kamailio`.
    pub fn name(&self) -> String {
        match &self.balance {
            Some(b) => format!("{} {b}", self.target.name()),
            None => self.target.name().to_owned(),
        }
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Servers, users, work directory, weights and transport (its
    /// workers, threads and flows are set per cell).
    pub base: compare::Plan,
    /// The servers as measured.
    pub variants: Vec<Variant>,
    /// Worker counts (sipsec's UDP workers, or its connection reactors
    /// over TCP, TLS, WS or WSS; Kamailio's children).
    pub workers: Vec<usize>,
    /// Loads.
    pub loads: Vec<Load>,
    /// Scenarios: register, invite.
    pub scenarios: Vec<String>,
    /// The ramp of the first cell of each row; later cells start near
    /// what the row's last cell sustained.
    pub ramp: Ramp,
    /// Servers on CPUs 0…W−1 (the generator pinned elsewhere by the
    /// caller) and a busy-polling generator.
    pub pin: bool,
    /// Times every cell runs; the servers' order reversed every other round.
    pub rounds: usize,
}

/// One server, one load, one worker count, one round.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// Server (and sipsec's balance).
    pub server: String,
    /// Scenario.
    pub scenario: String,
    /// Load name.
    pub load: String,
    /// Sockets the load came from.
    pub flows: usize,
    /// Workers.
    pub workers: usize,
    /// Round (from 1).
    pub round: usize,
    /// Highest calls/s answered while stable.
    pub peak: f64,
    /// Highest offered calls/s fully processed.
    pub sustained: f64,
    /// Server CPU µs per call at the measured step (the highest fully
    /// processed one, else the last stable one).
    pub cpu_us_per_call: Option<f64>,
    /// % of one core each of the W busiest server threads used in that
    /// step, busiest first (sipsec's UDP workers, Kamailio's children).
    pub workers_cpu: Vec<f64>,
    /// % of one core the other threads used together.
    pub other_cpu: f64,
    /// Why calls failed over the whole ramp (the report's reasons).
    pub failures: std::collections::BTreeMap<String, u64>,
    /// The ramp's steps.
    pub steps: Vec<StepRow>,
}

/// A ramp step as recorded.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StepRow {
    /// Offered calls/s.
    pub offered: f64,
    /// Answered calls/s.
    pub achieved: f64,
    /// Failed calls.
    pub failed: u64,
    /// p99 latency, ms.
    pub p99_ms: f64,
    /// Whether the step was fully processed (no failure, achieved within
    /// the ramp's tolerance, p99 under its ceiling).
    pub full: bool,
    /// Datagrams the server's socket dropped in the step (UDP; none
    /// over a connection).
    pub socket_drops: Option<u64>,
}

impl Cell {
    /// What the last step not fully processed showed: the evidence on
    /// which the ramp stopped (or a try it made again), e.g. `121900/s:
    /// 83170/s achieved, p99 514.6 ms, 7563 socket drops`.
    pub fn ended(&self) -> Option<String> {
        let s = self.steps.iter().rev().find(|s| !s.full)?;
        let mut why = format!(
            "{:.0}/s: {:.0}/s achieved, p99 {:.1} ms",
            s.offered, s.achieved, s.p99_ms
        );
        if s.failed > 0 {
            why += &format!(", {} failed", s.failed);
        }
        if let Some(d) = s.socket_drops.filter(|d| *d > 0) {
            why += &format!(", {d} socket drops");
        }
        Some(why)
    }
}

/// Most connections a cell over TCP, TLS, WS or WSS may open: every
/// ramp step opens its own, and their handshakes would count as the
/// step's CPU (thousands of held connections are `bench connections`'
/// to measure).
pub const MAX_CONNECTIONS: usize = 1000;

/// What a plan over connections cannot do, said before anything starts.
fn check_connections(plan: &Plan) -> Result<(), Error> {
    let transport = plan.base.transport;
    if transport == Transport::Udp {
        return match plan
            .variants
            .iter()
            .any(|v| v.balance.as_deref() == Some("handoff"))
        {
            true => Err(Error::Input(
                "--balance handoff is for connections (tcp, tls, ws, wss)".into(),
            )),
            false => Ok(()),
        };
    }
    if let Some(b) = plan
        .variants
        .iter()
        .filter_map(|v| v.balance.as_deref())
        .find(|b| matches!(*b, "shared" | "call"))
    {
        return Err(Error::Input(format!(
            "--balance {b} is for UDP sockets; over {} the balances are flow (each connection decided by its reactor), spread (a busy connection by every reactor while its own is behind) and handoff (a busy connection by every reactor at any load)",
            transport.as_str()
        )));
    }
    let kamailio = plan
        .variants
        .iter()
        .any(|v| matches!(v.target, Target::Kamailio { .. }));
    let secure = matches!(transport, Transport::Tls | Transport::Wss);
    if kamailio && secure && plan.workers.iter().any(|w| *w > 1) {
        // As in `compare::compare`: Debian's Kamailio 5.6 crashes.
        return Err(Error::Input(
            "Kamailio 5.6 with OpenSSL 3 crashes with more than one TLS worker: use --workers 1 or leave kamailio out"
                .into(),
        ));
    }
    if let Some(l) = plan.loads.iter().find(|l| l.flows() > MAX_CONNECTIONS) {
        return Err(Error::Input(format!(
            "{} connections: each ramp step would open them anew and count their handshakes; at most {MAX_CONNECTIONS} here (`bench connections` measures thousands held open)",
            l.flows()
        )));
    }
    Ok(())
}

/// The generator's TLS configuration for a plan over TLS or WSS.
fn client_tls(plan: &Plan) -> Result<Option<Arc<rustls::ClientConfig>>, Error> {
    if !matches!(plan.base.transport, Transport::Tls | Transport::Wss) {
        return Ok(None);
    }
    let cert = plan.base.certificate.as_ref().ok_or_else(|| {
        Error::Input(format!(
            "{} needs a certificate",
            plan.base.transport.as_str()
        ))
    })?;
    crate::link::client_config(&cert.ca, false)
        .map(Some)
        .map_err(Error::io(cert.ca.display()))
}

/// Runs the plan; `progress` hears of each cell as it ends.
pub fn scale(plan: &Plan, mut progress: impl FnMut(&Cell)) -> Result<Vec<Cell>, Error> {
    check_connections(plan)?;
    let tls = client_tls(plan)?;
    compare::write_users(&plan.base)?;
    let callee = plan.base.users.iter().find(|u| u.name == "callee").cloned();
    let mut cells: Vec<Cell> = Vec::new();
    for round in 1..=plan.rounds.max(1) {
        for variant in stats::round_order(&plan.variants, round) {
            for scenario in &plan.scenarios {
                for load in &plan.loads {
                    for &w in &plan.workers {
                        let start = start_rate(plan.ramp.start, &cells, variant, scenario, load, w);
                        let cell =
                            measure_cell(plan, variant, scenario, *load, w, start, &callee, &tls)?;
                        let cell = Cell { round, ..cell };
                        progress(&cell);
                        cells.push(cell);
                    }
                }
            }
        }
    }
    Ok(cells)
}

/// Where a cell's ramp starts: `first` for a row's first cell, else 0.6 ×
/// what the row's last cell sustained, scaled by the workers added (a
/// ramp of few steps whether the server scales or not).
fn start_rate(
    first: f64,
    cells: &[Cell],
    variant: &Variant,
    scenario: &str,
    load: &Load,
    workers: usize,
) -> f64 {
    let name = variant.name();
    let last = cells.iter().rev().find(|c| {
        c.server == name && c.scenario == scenario && c.load == load.name() && c.workers < workers
    });
    match last {
        Some(c) if c.sustained > 0.0 => (0.6 * c.sustained * workers as f64 / c.workers as f64)
            .max(first)
            .round(),
        _ => first,
    }
}

/// sipsec's arguments for a cell: over UDP its `--udp-balance`; over a
/// connection a configuration of `workers` reactors, each connection
/// decided by its reactor (`flow`), a busy one by all while its reactor
/// is behind (`spread`, the default) or at any load (`handoff`), and
/// the generator's address free of the per-address limits. Either way
/// the registrar's journal budget (64 MiB/s of binding changes, a guard
/// for the disk, which refused eight workers' refreshes past about
/// 750,000 a second) is set out of the ramp's reach: the cell measures
/// the workers.
fn sipsec_args(plan: &Plan, variant: &Variant, workers: usize) -> Result<Vec<String>, Error> {
    let Some(balance) = &variant.balance else {
        return Ok(Vec::new());
    };
    let udp = plan.base.transport == Transport::Udp;
    let mut args: Vec<String> = Vec::new();
    if udp {
        args.extend(["--udp-balance".into(), balance.clone()]);
    }
    let text = sipsec_config(udp, workers, balance);
    let path = plan
        .base
        .workdir
        .join(format!("sipsec-{workers}-{balance}.toml"));
    std::fs::write(&path, text).map_err(Error::io(path.display()))?;
    args.extend(["--config".into(), path.display().to_string()]);
    Ok(args)
}

/// The configuration file of a sipsec cell: the journal budget out of
/// reach and, over a connection, the reactors.
fn sipsec_config(udp: bool, workers: usize, balance: &str) -> String {
    let mut text =
        format!("[registrar]\njournal_rate = {UNLIMITED}\njournal_burst = {UNLIMITED}\n");
    if !udp {
        let spread = match balance {
            "flow" => "spread_above = 0\n",
            "handoff" => "spread_always = true\n",
            _ => "",
        };
        text += &format!(
            "[connections]\nreactors = {workers}\n{spread}accept_rate = 0\nper_ip_exempt = [\"127.0.0.1\", \"::1\"]\n"
        );
    }
    text
}

/// A budget no ramp reaches, bytes a second (16 GiB).
const UNLIMITED: u64 = 1 << 34;

/// One cell: the server started with `workers`, the ramp from `start`
/// (again from a quarter of it, up to three times, while no step was
/// fully processed).
#[allow(clippy::too_many_arguments)]
fn measure_cell(
    plan: &Plan,
    variant: &Variant,
    scenario: &str,
    load: Load,
    workers: usize,
    start: f64,
    callee: &Option<User>,
    tls: &Option<Arc<rustls::ClientConfig>>,
) -> Result<Cell, Error> {
    let mut base = plan.base.clone();
    base.workers = workers;
    base.server_cpus = plan.pin.then(|| match workers {
        1 => "0".to_owned(),
        w => format!("0-{}", w - 1),
    });
    base.sipsec_args = sipsec_args(plan, variant, workers)?;
    let mode = compare::mode_of(scenario);
    let (server, listen) = compare::start(&base, &variant.target, mode, false)?;
    let callee = match (scenario::built_in(scenario, false)?.needs_callee, callee) {
        (true, None) => return Err(Error::Input(format!("{scenario} needs a `callee` user"))),
        (_, c) => c.clone().unwrap_or_else(|| base.users[0].clone()),
    };
    let opts = Options {
        run: Run {
            target: listen,
            also: Vec::new(),
            scenario: scenario::built_in(scenario, false)?,
            shape: Shape::Rate(start),
            calls: 1,
            duration: plan.ramp_duration(),
            drain: plan.ramp_duration(),
            threads: load.threads,
            local_port: local_port(load.flows())?,
            users: base.users.clone(),
            transport: base.transport,
            tls: tls.clone(),
            connection_per_call: false,
            flows: load.per_thread,
            busy_poll: plan.pin,
            share_flows: load.shared,
            one_shared_socket: false,
            ids: None,
        },
        callee,
        // Over a connection the built-in callee registers over UDP.
        callee_registrar: (listen != server.addr).then_some(server.addr),
        callee_domain: None,
        server_pids: server.pids.clone(),
        weights: base.weights,
    };
    let mut ramp = Ramp {
        start,
        ..plan.ramp.clone()
    };
    let mut run = ramp_with_threads(&opts, &ramp, &server.pids)?;
    let sustained = |r: &Ramped| stats::capacity(&r.steps, ramp.tolerance, ramp.max_p99_us);
    for _ in 0..3 {
        if sustained(&run).sustainable > 0.0 || ramp.start < 4.0 {
            break;
        }
        ramp.start = (ramp.start / 4.0).round();
        run = ramp_with_threads(&opts, &ramp, &server.pids)?;
    }
    drop(server);
    Ok(run.cell(variant, scenario, load, workers, &ramp))
}

/// The first of `flows` consecutive local ports: the same in every step,
/// as phones re-register from where they are (new ports each step would
/// add a binding per step until the registrar's per-AoR cap refused them).
/// A few flows start at a port free now; many end just below the kernel's
/// ephemeral range, where no server started here nor any socket bound to
/// port 0 can sit among them.
pub(crate) fn local_port(flows: usize) -> Result<u16, Error> {
    if flows <= 64 {
        let free = compare::free_port().map_err(Error::io("finding a free port"))?;
        return Ok(free.min(u16::MAX - 64));
    }
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<usize>().ok())
        .unwrap_or(32_768);
    low.checked_sub(flows + 1)
        .filter(|base| *base >= 1024)
        .and_then(|base| u16::try_from(base).ok())
        .ok_or_else(|| {
            Error::Input(format!(
                "{flows} flows do not fit between port 1024 and the ephemeral ports from {low}"
            ))
        })
}

impl Plan {
    fn ramp_duration(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.ramp.seconds + 1.0)
    }
}

/// A ramp's steps with the server's CPU per call and per thread in each.
struct Ramped {
    steps: Vec<Step>,
    cpu_us: Vec<Option<f64>>,
    drops: Vec<Option<u64>>,
    failures: std::collections::BTreeMap<String, u64>,
    /// Each step's threads' CPU (busiest first) and how long its load
    /// ran, seconds.
    threads: Vec<(Vec<ThreadCpu>, f64)>,
}

fn ramp_with_threads(opts: &Options, ramp: &Ramp, pids: &[u32]) -> Result<Ramped, Error> {
    let mut last = cpu::threads(pids);
    let mut threads = Vec::new();
    let mut cpu_us = Vec::new();
    let mut drops = Vec::new();
    let mut failures = std::collections::BTreeMap::new();
    let (_, steps, _) = peak::peak(opts, ramp, |_, report| {
        for (why, n) in &report.failures {
            *failures.entry(why.clone()).or_insert(0) += n;
        }
        let now = cpu::threads(pids);
        threads.push((cpu::thread_deltas(&last, &now), report.elapsed_s));
        cpu_us.push(report.server_cpu_us_per_call);
        drops.push(report.server_socket_drops);
        last = now;
    })?;
    Ok(Ramped {
        steps,
        cpu_us,
        drops,
        failures,
        threads,
    })
}

impl Ramped {
    fn cell(
        &self,
        variant: &Variant,
        scenario: &str,
        load: Load,
        workers: usize,
        ramp: &Ramp,
    ) -> Cell {
        let cap = stats::capacity(&self.steps, ramp.tolerance, ramp.max_p99_us);
        // The try that held at the sustained rate (a rate may be tried
        // more than once: a failed try before it is not the one to show).
        let full =
            |s: &Step| s.full(ramp.tolerance, ramp.max_p99_us) && s.offered <= cap.sustainable;
        let stable = |s: &Step| s.failed as f64 <= 0.01 * (s.achieved + s.failed as f64);
        let at = (self.steps.iter().rposition(full))
            .or_else(|| self.steps.iter().rposition(stable))
            .unwrap_or(0);
        let (spent, seconds) = self.threads.get(at).cloned().unwrap_or_default();
        let percent = |s: f64| {
            if seconds > 0.0 {
                s / seconds * 100.0
            } else {
                0.0
            }
        };
        let n = workers.min(spent.len());
        Cell {
            server: variant.name(),
            scenario: scenario.to_owned(),
            load: load.name(),
            flows: load.flows(),
            workers,
            round: 0,
            peak: cap.peak,
            sustained: cap.sustainable,
            cpu_us_per_call: self.cpu_us.get(at).copied().flatten(),
            workers_cpu: spent[..n].iter().map(|t| percent(t.seconds)).collect(),
            other_cpu: percent(spent[n..].iter().map(|t| t.seconds).sum()),
            failures: self.failures.clone(),
            steps: self
                .steps
                .iter()
                .zip(&self.drops)
                .map(|(s, drops)| StepRow {
                    offered: s.offered,
                    achieved: s.achieved,
                    failed: s.failed,
                    p99_ms: s.p99_us as f64 / 1000.0,
                    full: s.full(ramp.tolerance, ramp.max_p99_us),
                    socket_drops: *drops,
                })
                .collect(),
        }
    }
}

/// The cells of one row (server, scenario, load) with `workers`.
fn of<'a>(cells: &'a [Cell], row: &(String, String, String), workers: usize) -> Vec<&'a Cell> {
    cells
        .iter()
        .filter(|c| (&c.server, &c.scenario, &c.load) == (&row.0, &row.1, &row.2))
        .filter(|c| c.workers == workers)
        .collect()
}

/// Rows (server, scenario, load) and worker counts, in the order run.
fn axes(cells: &[Cell]) -> (Vec<(String, String, String)>, Vec<usize>) {
    let mut rows = Vec::new();
    let mut workers = Vec::new();
    for c in cells {
        let row = (c.server.clone(), c.scenario.clone(), c.load.clone());
        if !rows.contains(&row) {
            rows.push(row);
        }
        if !workers.contains(&c.workers) {
            workers.push(c.workers);
        }
    }
    // Loads by their number of flows ("8 flows" before "10000 flows").
    let flows = |load: &str| -> u64 {
        load.split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    rows.sort_by(|a, b| (&a.1, flows(&a.2), &a.0).cmp(&(&b.1, flows(&b.2), &b.0)));
    workers.sort_unstable();
    (rows, workers)
}

/// A row's first three cells: scenario, load, server.
fn lead(row: &(String, String, String)) -> String {
    format!("| {} | {} | {} |", row.1, row.2, row.0)
}

/// The round whose sustained rate is the median of a cell's rounds.
fn median_cell<'a>(mine: &[&'a Cell]) -> Option<&'a Cell> {
    let mut v = mine.to_vec();
    v.sort_by(|a, b| a.sustained.total_cmp(&b.sustained));
    v.get(v.len() / 2).copied()
}

/// Each round's ratio of `f` at W workers to `f` at the row's fewest.
fn ratios(cells: &[Cell], row: &(String, String, String), w: usize, w0: usize) -> Vec<f64> {
    let rounds = cells.iter().map(|c| c.round).max().unwrap_or(1);
    (1..=rounds)
        .filter_map(|r| {
            let at = |w| of(cells, row, w).into_iter().find(|c| c.round == r);
            let (a, b) = (at(w)?, at(w0)?);
            (b.sustained > 0.0).then(|| a.sustained / b.sustained)
        })
        .collect()
}

/// Two markdown tables: calls/s sustained per worker count with the
/// scaling from the fewest workers; and per cell, the CPU per call and
/// each worker's share of a core.
pub fn table(cells: &[Cell]) -> String {
    use std::fmt::Write as _;
    let (rows, workers) = axes(cells);
    let (Some(&w0), Some(&wn)) = (workers.first(), workers.last()) else {
        return String::new();
    };
    let mut s = String::from("| scenario | load | server |");
    for w in &workers {
        let _ = write!(s, " W={w} calls/s |");
    }
    let _ = writeln!(s, " W={wn} / W={w0} |");
    s.push_str(&"|---".repeat(4 + workers.len()));
    s.push_str("|\n");
    for row in &rows {
        s.push_str(&lead(row));
        for &w in &workers {
            let v: Vec<f64> = of(cells, row, w).iter().map(|c| c.sustained).collect();
            let _ = write!(s, " {} |", stats::median_range(&v, 0));
        }
        let _ = writeln!(
            s,
            " {}× |",
            stats::ratio_summary(&ratios(cells, row, wn, w0), 2)
        );
    }
    s.push_str("\n| scenario | load | server | W | CPU µs/call | vs W=");
    let _ = writeln!(
        s,
        "{w0} | each worker's CPU, % of a core (busiest first) | busiest / idlest | other threads % |"
    );
    s.push_str(&"|---".repeat(9));
    s.push_str("|\n");
    for row in &rows {
        let us = |w| -> Vec<f64> {
            of(cells, row, w)
                .iter()
                .filter_map(|c| c.cpu_us_per_call)
                .collect()
        };
        let base = stats::median(&us(w0));
        for &w in &workers {
            let Some(mid) = median_cell(&of(cells, row, w)) else {
                continue;
            };
            let mine = us(w);
            let split: Vec<String> = mid.workers_cpu.iter().map(|p| format!("{p:.0}")).collect();
            let lo = mid.workers_cpu.last().copied().unwrap_or(0.0);
            let hi = mid.workers_cpu.first().copied().unwrap_or(0.0);
            // Under half a percent of a core is a worker left idle.
            let spread = if lo >= 0.5 {
                format!("{:.2}", hi / lo)
            } else {
                "idle worker".to_owned()
            };
            let _ = writeln!(
                s,
                "{} {w} | {} | {} | {} | {spread} | {:.0} |",
                lead(row),
                stats::median_range(&mine, 1),
                if base > 0.0 {
                    format!("{:.2}", stats::median(&mine) / base)
                } else {
                    "-".into()
                },
                split.join(" / "),
                mid.other_cpu
            );
        }
    }
    s.push_str(&against_null(cells));
    s
}

/// With the null responder among the servers, each other server against
/// it in the same round, load and worker count: the rate ratio (its
/// sustained calls/s over the null responder's) and the efficiency (the
/// null responder's CPU per call over its own), medians and ranges of
/// the rounds. Empty without null cells.
fn against_null(cells: &[Cell]) -> String {
    use std::fmt::Write as _;
    let (rows, workers) = axes(cells);
    let mut s = String::new();
    for row in rows.iter().filter(|r| r.0 != "null") {
        let null = (String::from("null"), row.1.clone(), row.2.clone());
        for &w in &workers {
            let (mut rate, mut efficiency) = (Vec::new(), Vec::new());
            for c in of(cells, row, w) {
                let Some(n) = of(cells, &null, w).into_iter().find(|n| n.round == c.round) else {
                    continue;
                };
                if n.sustained > 0.0 {
                    rate.push(c.sustained / n.sustained);
                }
                if let (Some(mine), Some(theirs)) = (c.cpu_us_per_call, n.cpu_us_per_call) {
                    if mine > 0.0 {
                        efficiency.push(theirs / mine);
                    }
                }
            }
            if rate.is_empty() && efficiency.is_empty() {
                continue;
            }
            let _ = writeln!(
                s,
                "{} {w} | {} | {} |",
                lead(row),
                stats::ratio_summary(&rate, 2),
                stats::ratio_summary(&efficiency, 2)
            );
        }
    }
    if s.is_empty() {
        return s;
    }
    format!(
        "\n| scenario | load | server | W | calls/s / null's | efficiency (null's CPU per call / its own) |\n|---|---|---|---|---|---|\n{s}"
    )
}

/// Named series as the plots take them.
fn borrowed(v: &[(String, Vec<(f64, f64)>)]) -> Vec<(&str, Vec<(f64, f64)>)> {
    v.iter().map(|(n, p)| (n.as_str(), p.clone())).collect()
}

/// The tables and, per scenario, calls/s and CPU per call against workers.
pub fn html(cells: &[Cell]) -> String {
    use crate::plot;
    let (rows, workers) = axes(cells);
    let mut sections = Vec::new();
    let mut scenarios: Vec<&String> = rows.iter().map(|r| &r.1).collect();
    scenarios.dedup();
    for sc in scenarios {
        let series = |f: &dyn Fn(&Cell) -> Option<f64>| -> Vec<(String, Vec<(f64, f64)>)> {
            rows.iter()
                .filter(|r| &r.1 == sc)
                .map(|row| {
                    let points = workers
                        .iter()
                        .filter_map(|&w| {
                            let v: Vec<f64> = of(cells, row, w).into_iter().filter_map(f).collect();
                            (!v.is_empty()).then(|| (w as f64, stats::median(&v)))
                        })
                        .collect();
                    (format!("{}, {}", row.0, row.2), points)
                })
                .collect()
        };
        let rate = series(&|c| Some(c.sustained));
        let cpu = series(&|c| c.cpu_us_per_call);
        sections.push((
            format!("{sc}: calls/s sustained against workers"),
            plot::lines(
                &format!("{sc}: calls/s sustained"),
                "workers",
                "calls/s",
                &borrowed(&rate),
            ),
        ));
        sections.push((
            format!("{sc}: server CPU per call against workers"),
            plot::lines(
                &format!("{sc}: CPU µs per call"),
                "workers",
                "µs per call",
                &borrowed(&cpu),
            ),
        ));
    }
    let md = table(cells);
    for (i, part) in md.split("\n\n").enumerate() {
        let title = if i == 0 {
            "Calls/s sustained by workers"
        } else {
            "CPU per call and each worker's share"
        };
        sections.insert(i, (title.to_owned(), plot::markdown_table(part)));
    }
    plot::page("sipsec bench scale: workers against throughput", &sections)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sipsec_cell_lifts_the_journal_budget_and_sets_its_reactors() {
        let udp = sipsec_config(true, 8, "call");
        assert!(udp.contains("journal_rate = 17179869184\njournal_burst = 17179869184"));
        assert!(!udp.contains("[connections]"));
        let tcp = sipsec_config(false, 4, "flow");
        assert!(tcp.contains("[registrar]") && tcp.contains("reactors = 4\nspread_above = 0\n"));
        let spread = sipsec_config(false, 4, "spread");
        assert!(!spread.contains("spread_above") && !spread.contains("spread_always"));
        assert!(sipsec_config(false, 4, "handoff").contains("spread_always = true\n"));
    }

    #[test]
    fn loads_divide_evenly_over_threads() {
        assert_eq!(
            Load::new(1, 8),
            Load {
                threads: 8,
                per_thread: 1,
                shared: true
            },
            "one flow, every thread"
        );
        assert_eq!(Load::new(1, 8).flows(), 1);
        assert_eq!(Load::new(1, 1).flows(), 1);
        assert!(!Load::new(1, 1).shared);
        assert_eq!(
            Load::new(8, 2),
            Load {
                threads: 2,
                per_thread: 4,
                shared: false
            }
        );
        assert_eq!(
            Load::new(10_000, 8),
            Load {
                threads: 8,
                per_thread: 1250,
                shared: false
            }
        );
        assert_eq!(
            Load::new(7, 2),
            Load {
                threads: 1,
                per_thread: 7,
                shared: false
            }
        );
        assert_eq!(Load::new(8, 2).name(), "8 flows");
        assert_eq!(Load::new(1, 2).name(), "1 flow");
    }

    fn cell(server: &str, w: usize, round: usize, sustained: f64, split: &[f64]) -> Cell {
        Cell {
            server: server.into(),
            scenario: "register".into(),
            load: "1 flow".into(),
            flows: 1,
            workers: w,
            round,
            peak: sustained,
            sustained,
            cpu_us_per_call: Some(10.0 * w as f64),
            workers_cpu: split.to_vec(),
            other_cpu: 1.0,
            failures: Default::default(),
            steps: Vec::new(),
        }
    }

    #[test]
    fn a_cell_says_what_the_last_step_not_held_showed() {
        let row = |offered: f64, achieved: f64, p99_ms: f64, full: bool, drops: u64| StepRow {
            offered,
            achieved,
            failed: 0,
            p99_ms,
            full,
            socket_drops: Some(drops),
        };
        let mut c = cell("sipsec call", 1, 1, 115_000.0, &[91.0]);
        assert_eq!(c.ended(), None, "no step yet");
        c.steps = vec![row(115_000.0, 114_967.0, 4.2, true, 0)];
        assert_eq!(
            c.ended(),
            None,
            "every step held: the ramp stopped at --max"
        );
        c.steps.push(row(121_900.0, 83_170.0, 514.56, false, 7563));
        c.steps.push(row(121_900.0, 75_718.0, 566.78, false, 0));
        assert_eq!(
            c.ended().as_deref(),
            Some("121900/s: 75718/s achieved, p99 566.8 ms"),
            "the last try, without drops it did not have"
        );
        c.steps[2].failed = 12;
        c.steps[2].socket_drops = Some(23_263);
        assert_eq!(
            c.ended().as_deref(),
            Some("121900/s: 75718/s achieved, p99 566.8 ms, 12 failed, 23263 socket drops")
        );
    }

    #[test]
    fn the_table_shows_scaling_and_an_idle_worker() {
        let cells = [
            cell("sipsec flow", 1, 1, 100_000.0, &[95.0]),
            cell("sipsec flow", 2, 1, 100_000.0, &[96.0, 0.0]),
            cell("sipsec spread", 1, 1, 100_000.0, &[95.0]),
            cell("sipsec spread", 2, 1, 190_000.0, &[90.0, 85.0]),
        ];
        let t = table(&cells);
        assert!(
            t.contains("| register | 1 flow | sipsec spread | 100000 | 190000 | 1.90× |"),
            "{t}"
        );
        assert!(
            t.contains("| sipsec flow | 2 | 20.0 | 2.00 | 96 / 0 | idle worker | 1 |"),
            "{t}"
        );
        assert!(t.contains("| 90 / 85 | 1.06 |"), "{t}");
        let mut many = cell("sipsec spread", 1, 1, 1.0, &[1.0]);
        many.load = "10000 flows".into();
        let mut few = many.clone();
        few.load = "8 flows".into();
        let t = table(&[many, few]);
        assert!(t.find("| 8 flows |") < t.find("| 10000 flows |"), "{t}");
        let page = html(&cells);
        assert_eq!(crate::plot::svgs(&page).len(), 2, "two plots");
    }

    #[test]
    fn each_server_is_set_against_the_null_responder_round_by_round() {
        let mut cells = Vec::new();
        // Round 1: sipsec at 90 % of the rate and 8/10 of the efficiency;
        // round 2: 100 % and 10/10. The null responder runs 100 and 80.
        for (round, sipsec, null) in [(1, 90_000.0, 100_000.0), (2, 80_000.0, 80_000.0)] {
            let mut mine = cell("sipsec spread", 1, round, sipsec, &[95.0]);
            mine.cpu_us_per_call = Some(if round == 1 { 10.0 } else { 8.0 });
            let mut theirs = cell("null", 1, round, null, &[90.0]);
            theirs.cpu_us_per_call = Some(8.0);
            cells.extend([mine, theirs]);
        }
        let t = table(&cells);
        assert!(
            t.contains(
                "| register | 1 flow | sipsec spread | 1 | 0.95 (0.90–1.00) | 0.90 (0.80–1.00) |"
            ),
            "{t}"
        );
        assert!(!t.contains("| null | 1 | 1.00"), "not against itself: {t}");
        let alone: Vec<Cell> = cells.into_iter().filter(|c| c.server != "null").collect();
        assert!(!table(&alone).contains("null's"), "no null, no table");
    }

    #[test]
    fn a_row_starts_near_what_its_last_cell_sustained() {
        let cells = [cell("sipsec spread", 1, 1, 100_000.0, &[95.0])];
        let kamailio = Variant {
            target: Target::Kamailio { cfg: "k".into() },
            balance: None,
        };
        let sipsec = Variant {
            target: Target::sipsec("s".into()),
            balance: Some("spread".into()),
        };
        let load = Load::new(1, 1);
        let start = |v: &Variant, w| start_rate(20_000.0, &cells, v, "register", &load, w);
        assert_eq!(start(&sipsec, 2), 120_000.0);
        assert_eq!(start(&sipsec, 1), 20_000.0);
        assert_eq!(start(&kamailio, 2), 20_000.0);
    }
}
