//! The side-by-side table and the HTML report of connection runs.

use super::{Outcome, Plan};
use std::fmt::Write as _;

/// The servers measured, in the order given (the first round's).
pub(super) fn names(outcomes: &[Outcome]) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for o in outcomes {
        if !names.contains(&o.target.as_str()) {
            names.push(&o.target);
        }
    }
    names
}

/// The side-by-side table (markdown). Over several rounds a figure is
/// the median of the rounds with their range in brackets, a ratio the
/// median of the rounds' own ratios (each round's servers ran back to
/// back), and failures the total.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut s = String::new();
    let names = names(outcomes);
    // Outcomes made by hand (round 0) count as one round.
    let round = |o: &Outcome| o.round.max(1);
    let rounds = outcomes.iter().map(round).max().unwrap_or(1);
    let _ = write!(s, "| measure |");
    for n in &names {
        let _ = write!(s, " {n} |");
    }
    for n in names.iter().skip(1) {
        let _ = write!(s, " {}/{n} |", names[0]);
    }
    s.push('\n');
    s.push_str(&"|---".repeat(1 + names.len() + names.len().saturating_sub(1)));
    s.push_str("|\n");
    let opt = |v: Option<f64>| v.map_or(f64::NAN, |v| v);
    type Row<'a> = (&'a str, &'a dyn Fn(&Outcome) -> f64, usize);
    let rows: [Row; 14] = [
        ("connections registered", &|o| o.registered as f64, 0),
        ("failures", &|o| o.failed() as f64, 0),
        ("opened/s (TLS: full handshakes/s)", &|o| o.opened_per_s, 0),
        ("TLS handshakes resumed", &|o| o.resumed as f64, 0),
        (
            "server CPU µs per open + REGISTER",
            &|o| opt(o.server_cpu_us_per_open),
            1,
        ),
        ("server memory held, MB", &|o| o.memory_held as f64 / 1e6, 1),
        (
            "server bytes per connection",
            &|o| opt(o.memory_per_connection),
            0,
        ),
        ("server threads", &|o| o.threads as f64, 0),
        (
            "server CPU µs per refresh",
            &|o| opt(o.server_cpu_us_per_refresh),
            1,
        ),
        (
            "of it in user space (by timer ticks)",
            &|o| opt(o.server_user_us_per_refresh),
            1,
        ),
        ("refresh seconds", &|o| o.refresh_seconds, 1),
        (
            "of the server's: Redis memory held, MB",
            &|o| opt(o.redis_memory_held.map(|m| m as f64 / 1e6)),
            1,
        ),
        (
            "of the server's: Redis CPU µs per open",
            &|o| opt(o.redis_cpu_us_per_open),
            1,
        ),
        (
            "of the server's: Redis CPU µs per refresh",
            &|o| opt(o.redis_cpu_us_per_refresh),
            1,
        ),
    ];
    let of =
        |name: &str| -> Vec<&Outcome> { outcomes.iter().filter(|o| o.target == name).collect() };
    for (label, f, digits) in rows {
        // Rows no server has (Redis' share in a one-node run) are left out.
        if outcomes.iter().all(|o| f(o).is_nan()) {
            continue;
        }
        let _ = write!(s, "| {label} |");
        for n in &names {
            let values: Vec<f64> = of(n).into_iter().map(f).collect();
            if label == "failures" {
                let _ = write!(s, " {:.0} |", values.iter().sum::<f64>());
            } else {
                let _ = write!(s, " {} |", crate::stats::median_range(&values, digits));
            }
        }
        for n in names.iter().skip(1) {
            let ratios: Vec<f64> = (1..=rounds)
                .filter_map(|r| {
                    let a = of(names[0]).into_iter().find(|o| round(o) == r).map(f)?;
                    let b = of(n).into_iter().find(|o| round(o) == r).map(f)?;
                    (b != 0.0).then(|| a / b)
                })
                .collect();
            let _ = write!(s, " {} |", crate::stats::ratio_summary(&ratios, 2));
        }
        s.push('\n');
    }
    s
}

/// The report page: the table and bars of memory, CPU and handshake rate.
pub fn html(plan: &Plan, outcomes: &[Outcome]) -> String {
    use crate::plot;
    let md = table(outcomes);
    // Over several rounds, each server's bar is the median.
    let bar = |title: &str, unit: &str, f: &dyn Fn(&Outcome) -> Option<f64>| {
        let series: Vec<(&str, Vec<f64>)> = names(outcomes)
            .into_iter()
            .map(|n| {
                let values: Vec<f64> = outcomes
                    .iter()
                    .filter(|o| o.target == n)
                    .filter_map(f)
                    .collect();
                (n, vec![crate::stats::median(&values)])
            })
            .collect();
        plot::bars(
            title,
            "transport",
            unit,
            &[plan.transport.via().to_owned()],
            &series,
        )
    };
    let sections = vec![
        ("Side by side".to_owned(), plot::markdown_table(&md)),
        (
            "Memory per held connection".to_owned(),
            bar("Server bytes per held connection", "bytes", &|o| {
                o.memory_per_connection
            }),
        ),
        (
            "CPU per refresh".to_owned(),
            bar("Server CPU µs per REGISTER refresh", "µs", &|o| {
                o.server_cpu_us_per_refresh
            }),
        ),
        (
            "Connections opened per second".to_owned(),
            bar(
                "Connections opened and registered per second",
                "per second",
                &|o| Some(o.opened_per_s),
            ),
        ),
    ];
    plot::page(
        &format!(
            "sipsec bench connections: {} {} connections from {} source addresses{}",
            plan.connections,
            plan.transport.via(),
            plan.sources,
            if plan.rounds > 1 {
                format!(", {} rounds (medians)", plan.rounds)
            } else {
                String::new()
            }
        ),
        &sections,
    )
}
