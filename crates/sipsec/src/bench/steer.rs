//! `sipsec bench steer`: what steering UDP datagrams by Call-ID
//! (`udp_balance = "call"`) costs the kernel per datagram.

use std::process::ExitCode;

use clap::builder::PossibleValuesParser;
use clap::Args;
use sipsec_bench::stats::{median, median_range};
use sipsec_bench::steer::{measure, Bound};

#[derive(Args)]
pub struct SteerArgs {
    /// Runs of the program a round, on each sample datagram.
    #[arg(long, default_value_t = 1_000_000)]
    runs: u32,
    /// Rounds (the median is printed, with the range).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Sockets in the group the program is loaded for (the modulo).
    #[arg(long, default_value_t = 8)]
    workers: u32,
    /// How the program bounds its loops: `auto` as the server does (the
    /// first the kernel accepts), `may_goto` (Linux 6.9) or `bpf_loop`
    /// (Linux 5.17).
    #[arg(long, default_value = "auto", value_parser = bound_names())]
    bound: String,
}

/// `auto`, then each bound by its name.
fn bound_names() -> PossibleValuesParser {
    PossibleValuesParser::new(std::iter::once("auto").chain(Bound::ALL.map(Bound::name)))
}

pub(super) fn steer_bench(a: SteerArgs) -> Result<ExitCode, String> {
    if a.runs == 0 || a.workers == 0 {
        return Err("--runs and --workers must be positive".into());
    }
    let bound = Bound::ALL.into_iter().find(|b| b.name() == a.bound);
    let (bound, costs) = measure(a.workers, a.runs, a.rounds, bound).map_err(|e| e.to_string())?;
    println!(
        "steering by Call-ID (SO_REUSEPORT eBPF program bounded by {}, BPF_PROG_TEST_RUN, \
         {} runs × {} rounds)",
        bound.name(),
        a.runs,
        a.rounds.max(1)
    );
    println!("| datagram | bytes | bytes read | ns a datagram | ns a byte read |");
    println!("|---|---|---|---|---|");
    for c in costs {
        let ns: Vec<f64> = c.rounds.iter().map(|d| d.as_nanos() as f64).collect();
        let read = c.sample.scanned();
        println!(
            "| {} | {} | {read} | {} | {:.2} |",
            c.sample.name,
            c.sample.bytes.len(),
            median_range(&ns, 0),
            median(&ns) / read as f64
        );
    }
    Ok(ExitCode::SUCCESS)
}
