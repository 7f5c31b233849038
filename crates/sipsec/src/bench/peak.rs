//! `sipsec bench peak`: ramp the offered rate until the server falls behind.

use std::process::ExitCode;

use clap::Args;

use super::common::{options, outputs, ramp, CommonArgs, KneeArgs};

#[derive(Args)]
pub struct PeakArgs {
    #[command(flatten)]
    pub(super) common: CommonArgs,
    /// First offered rate, calls/s.
    #[arg(long, default_value_t = 1000.0)]
    pub(super) start: f64,
    /// Each step offers this many times the previous rate.
    #[arg(long, default_value_t = 1.5)]
    pub(super) factor: f64,
    /// Highest rate to offer.
    #[arg(long, default_value_t = 200_000.0)]
    pub(super) max: f64,
    /// Length of each step, seconds.
    #[arg(long, alias = "seconds", value_name = "SECONDS", default_value_t = 5.0)]
    pub(super) duration: f64,
    #[command(flatten)]
    pub(super) knee: KneeArgs,
}

pub(super) fn peak(a: PeakArgs) -> Result<ExitCode, String> {
    use sipsec_bench::peak;
    let ramp = ramp(a.start, a.factor, a.max, a.duration, &a.knee)?;
    let base = options(&a.common)?;
    println!("offered/s  achieved/s  failed  p99 ms  server µs/call  socket drops");
    let (cap, steps, reports) = peak::peak(&base, &ramp, |st, r| {
        println!(
            "{:9.0}  {:10.1}  {:6}  {:6.2}  {:>14}  {:>12}",
            st.offered,
            st.achieved,
            st.failed,
            st.p99_us as f64 / 1000.0,
            r.server_cpu_us_per_call
                .map_or("-".to_owned(), |v| format!("{v:.1}")),
            r.server_socket_drops
                .map_or("-".to_owned(), |d| d.to_string())
        );
    })?;
    // A ramp with no step above what was fully processed stopped because
    // the next would pass --max, not at the server's limit.
    let capped = !steps.is_empty() && steps.iter().all(|st| st.offered <= cap.sustainable);
    println!(
        "{}: peak {}{:.0} calls/s, sustainable {}{:.0} calls/s{}",
        base.run.scenario.name,
        if capped { "at least " } else { "" },
        cap.peak,
        if capped { "at least " } else { "" },
        cap.sustainable,
        if capped {
            format!(
                " (the ramp stopped at --max {:.0}: raise it to find the limit)",
                a.max
            )
        } else {
            String::new()
        }
    );
    if let Some(p) = &a.common.json {
        let json = serde_json::json!({
            "scenario": base.run.scenario.name,
            "peak_cps": cap.peak,
            "sustainable_cps": cap.sustainable,
            "stopped_at_max": capped,
            "tries": ramp.tries,
            "steps": steps.iter().zip(&reports).map(|(st, r)| serde_json::json!({
                "offered": st.offered, "achieved": st.achieved, "failed": st.failed,
                "p99_ms": st.p99_us as f64 / 1000.0, "report": r,
            })).collect::<Vec<_>>(),
        });
        crate::provenance::write_json(p, &json)?;
    }
    outputs(&a.common.html, &a.common.plots, "peak", || {
        peak::html(&base.run.scenario.name, &cap, &steps, &reports)
    })?;
    Ok(ExitCode::SUCCESS)
}
