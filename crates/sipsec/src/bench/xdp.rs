//! `sipsec bench xdp`: the null responder (and the server) over AF_XDP
//! against the same over recvmmsg/sendmmsg, on a veth pair made for the
//! run.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use sipsec_bench::xdp::{measure, table, Plan, Target};

use super::common::positive;

#[derive(Args)]
pub struct XdpArgs {
    /// Offered REGISTERs per second; each is measured on both paths.
    #[arg(long, value_delimiter = ',', default_value = "30000,150000")]
    rates: Vec<f64>,
    /// Seconds each rate is offered.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Rounds (the paths' order alternates).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Responder on core 0, generator on core 1; also gives each path's
    /// whole-core cost (softirq work included).
    #[arg(long)]
    pin: bool,
    /// Generator sockets (local ports).
    #[arg(long, default_value_t = 8)]
    flows: usize,
    /// What answers, comma-separated: the null responder, `sipsec serve
    /// --mode registrar --workers 1` (this executable) with and without
    /// `--udp-xdp`, or both in the same rounds (`null,sipsec`: sipsec over
    /// AF_XDP is then set against the null responder over sockets).
    #[arg(long, value_delimiter = ',', default_value = "null", value_parser = ["null", "sipsec"])]
    server: Vec<String>,
}

pub(super) fn xdp_bench(a: XdpArgs) -> Result<ExitCode, String> {
    if !positive(a.duration) || a.rates.is_empty() || !a.rates.iter().all(|r| positive(*r)) {
        return Err("--rates and --duration must be positive".into());
    }
    let plan = Plan {
        rates: a.rates,
        duration: Duration::from_secs_f64(a.duration),
        rounds: a.rounds.max(1),
        pin: a.pin,
        flows: a.flows.max(1),
        targets: targets(&a.server)?,
    };
    let cells = measure(&plan, |c| {
        let core = c.core_us.map_or(String::new(), |u| format!(", {u:.2} on its core"));
        println!(
            "round {} {:>6} {:>17} at {:>7.0}/s: {:>7.0} answered/s, {} failed, {:.2} µs per REGISTER in the responder{core}{}",
            c.round,
            c.server,
            c.path.as_str(),
            c.rate,
            c.ok_per_s,
            c.failed,
            c.thread_us,
            if c.dropped > 0 { format!(", {} frames dropped", c.dropped) } else { String::new() },
        );
        if let Some((why, n)) = &c.why {
            println!("  most failures ({n}): {why}");
        }
    })
    .map_err(|e| e.to_string())?;
    println!();
    print!("{}", table(&cells));
    Ok(ExitCode::SUCCESS)
}

/// The servers named, each once, in the order given.
fn targets(names: &[String]) -> Result<Vec<Target>, String> {
    let mut out: Vec<Target> = Vec::new();
    for name in names {
        let t = match name.as_str() {
            "sipsec" => Target::Sipsec(std::env::current_exe().map_err(|e| e.to_string())?),
            _ => Target::Null,
        };
        if !out.iter().any(|o| o.name() == t.name()) {
            out.push(t);
        }
    }
    Ok(out)
}
