//! `sipsec bench rsa-variants`: the three RSA variants side by side.

use std::process::ExitCode;

use clap::Args;

use super::common::TableOutputs;

#[derive(Args)]
pub struct RsaVariantsArgs {
    /// Modulus sizes, comma-separated.
    #[arg(long, default_value = "1024,2048,3072,4096", value_delimiter = ',')]
    pub(super) bits: Vec<u32>,
    /// Variants, comma-separated: standard, crt, multiprime (3 primes), multiprime4, multiprime5.
    #[arg(long, default_value = "standard,crt,multiprime", value_delimiter = ',')]
    pub(super) variants: Vec<String>,
    /// Offered calls/s, comma-separated.
    #[arg(long, default_value = "200,400,600,800,1000", value_delimiter = ',')]
    pub(super) rates: Vec<f64>,
    /// Length of each point, seconds.
    #[arg(
        long,
        alias = "seconds",
        value_name = "SECONDS",
        default_value_t = 10.0
    )]
    pub(super) duration: f64,
    /// Directions, comma-separated: inbound, outbound.
    #[arg(long, default_value = "inbound,outbound", value_delimiter = ',')]
    pub(super) directions: Vec<String>,
    /// Calls the generator keeps in flight.
    #[arg(long, alias = "threads", default_value_t = 32)]
    pub(super) in_flight: usize,
    /// Proxy on CPU 0 (taskset), generator and next hops on CPU 1.
    #[arg(long)]
    pub(super) pin: bool,
    /// A smoke run: 1024 bits, 100 calls/s, 1 s per point (what CI runs).
    #[arg(long)]
    pub(super) quick: bool,
    #[command(flatten)]
    pub(super) out: TableOutputs,
}

pub(super) fn rsa_variants(a: RsaVariantsArgs) -> Result<ExitCode, String> {
    use sipsec_bench::variants::{self, Direction};
    let variants = a
        .variants
        .iter()
        .map(|v| match v.as_str() {
            "multiprime4" => rsa_variants::Variant::parse("multiprime", Some(4)),
            "multiprime5" => rsa_variants::Variant::parse("multiprime", Some(5)),
            other => rsa_variants::Variant::parse(other, None),
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("--variants: {e}"))?;
    let directions = a
        .directions
        .iter()
        .map(|d| match d.as_str() {
            "inbound" => Ok(Direction::Inbound),
            "outbound" => Ok(Direction::Outbound),
            other => Err(format!("--directions {other:?}: use inbound or outbound")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (bits, rates, seconds) = if a.quick {
        (vec![1024], vec![100.0], 1.0)
    } else {
        (a.bits.clone(), a.rates.clone(), a.duration)
    };
    if rates.iter().any(|r| !(r.is_finite() && *r > 0.0)) || !(seconds.is_finite() && seconds > 0.0)
    {
        return Err("--rates and --seconds must be positive".into());
    }
    for &b in &bits {
        for v in &variants {
            if let rsa_variants::Variant::MultiPrime { primes } = v {
                if *primes > rsa_variants::Variant::max_primes(b) {
                    return Err(format!(
                        "{primes}-prime keys need at least {} bits; drop {b} from --bits or that variant",
                        if *primes == 4 { 4096 } else { 8192 }
                    ));
                }
            }
        }
    }
    let workdir = std::env::temp_dir().join(format!("sipsec-rsa-variants-{}", std::process::id()));
    let plan = variants::Plan {
        exe: std::env::current_exe().map_err(|e| format!("finding the sipsec binary: {e}"))?,
        workdir: workdir.clone(),
        bits,
        variants,
        rates: rates.clone(),
        seconds,
        directions,
        threads: a.in_flight.max(1),
        pin: a.pin,
    };
    let points = variants::experiment(&plan, |p| {
        let failed: u64 = p.failures.values().sum();
        eprintln!(
            "{:8} RSA-{:<4} {:12} {:6.0}/s offered  {:7.1}/s answered  CPU {:6.1} %  {:8.1} µs/call  mean {:7.2} ms  p99 {:7.2} ms  {failed} failed",
            p.direction.name(),
            p.bits,
            p.variant,
            p.offered,
            p.achieved,
            p.cpu_percent,
            p.cpu_us_per_call,
            p.mean_ms,
            p.p99_ms
        );
    });
    let _ = std::fs::remove_dir_all(&workdir);
    let points = points?;
    let table = variants::markdown(&points, &rates);
    print!("{table}");
    a.out.write(&points, &table, "rsa-variants", || {
        variants::html(&points, &rates)
    })?;
    let failed: u64 = points.iter().flat_map(|p| p.failures.values()).sum();
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
