//! Peak and sustainable throughput: a rate ramp against one server, step
//! by step until it falls behind (achieved well under offered, failures,
//! or latency past a ceiling), then the published lean-server study's two figures.

use crate::error::Error;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::engine::{Live, Shape};
use crate::report::Report;
use crate::stats::{capacity, Capacity, Step};
use crate::Options;

/// How to ramp.
#[derive(Debug, Clone)]
pub struct Ramp {
    /// First offered rate.
    pub start: f64,
    /// Each step offers this many times the previous one.
    pub factor: f64,
    /// Highest rate offered.
    pub max: f64,
    /// Length of each step, seconds.
    pub seconds: f64,
    /// p99 latency above this is a blow-up, µs.
    pub max_p99_us: u64,
    /// Achieved within this share of offered counts as fully processed.
    pub tolerance: f64,
    /// Steps added once the ramp ends, each halfway (geometrically)
    /// between the highest rate fully processed and the lowest above it
    /// that was not, so the limit is known closer than one `factor`.
    pub refine: u32,
    /// Each rate is offered up to this many times, until one try is fully
    /// processed: a step that lost datagrams to a moment's stall of the
    /// machine (another process, the hypervisor) does not end the ramp
    /// below the server's limit. Every try is kept and reported; a rate
    /// counts as sustained when one of its tries was fully processed.
    pub tries: u32,
}

impl Ramp {
    /// The offered rates, in order.
    pub fn rates(&self) -> Vec<f64> {
        let mut v = Vec::new();
        let mut r = self.start;
        while r <= self.max * (1.0 + 1e-9) && v.len() < 64 {
            v.push(r.round());
            r *= self.factor.max(1.01);
        }
        v
    }
}

/// The next refinement step: halfway (geometrically) between the highest
/// rate fully processed and the lowest above it that was not; none while
/// either is missing or they are within 2 % of each other.
pub fn probe(steps: &[Step], ramp: &Ramp) -> Option<f64> {
    let lo = capacity(steps, ramp.tolerance, ramp.max_p99_us).sustainable;
    let hi = steps
        .iter()
        .map(|s| s.offered)
        .filter(|o| *o > lo)
        .fold(f64::INFINITY, f64::min);
    (lo > 0.0 && hi.is_finite() && hi > lo * 1.02).then(|| (lo * hi).sqrt().round())
}

/// Whether a step shows the server past its knee: the ramp stops there.
pub fn overloaded(s: &Step, ramp: &Ramp) -> bool {
    let calls = s.achieved + s.failed as f64;
    s.achieved < s.offered * 0.8
        || s.failed as f64 > 0.01 * calls
        || s.p99_us > 10 * ramp.max_p99_us
}

/// Runs the ramp with `base` (its shape and call count are replaced per
/// step); `on_step` hears each step as it ends.
pub fn peak(
    base: &Options,
    ramp: &Ramp,
    mut on_step: impl FnMut(&Step, &Report),
) -> Result<(Capacity, Vec<Step>, Vec<Report>), Error> {
    let mut steps = Vec::new();
    let mut reports = Vec::new();
    let mut base = base.clone();
    // Every step from the same local ports, as phones refresh from where
    // they are: a new port per step (a new connection each, over TCP and
    // TLS) would add a contact per AoR per step until the registrar's cap
    // refused them (403 from the 11th step on).
    if base.run.local_port == 0 && !base.run.connection_per_call {
        let flows = base.run.threads.max(1) * base.run.flows.max(1);
        base.run.local_port = crate::scale::local_port(flows)?;
    }
    let step = |rate: f64| -> Result<Step, Error> {
        let mut opts = base.clone();
        opts.run.shape = Shape::Rate(rate);
        opts.run.calls = (rate * ramp.seconds).ceil() as u64;
        opts.run.duration = Duration::from_secs_f64(ramp.seconds + 1.0);
        opts.run.drain = Duration::from_secs(5);
        let report = crate::measure(&opts, &Live::default(), &AtomicBool::new(false))?;
        // Achieved over the step's nominal length: calls finishing late
        // lower it, as they lower the server's real throughput.
        let span = report.elapsed_s.max(ramp.seconds);
        let step = Step {
            offered: rate,
            achieved: report.ok as f64 / span,
            failed: report.failed,
            p99_us: (report.latency_ms.p99 * 1000.0) as u64,
        };
        on_step(&step, &report);
        reports.push(report);
        Ok(step)
    };
    climb(ramp, &mut steps, step)?;
    Ok((
        capacity(&steps, ramp.tolerance, ramp.max_p99_us),
        steps,
        reports,
    ))
}

/// Climbs the ramp with `step` (one offered rate's measurement), each rate
/// tried up to `ramp.tries` times until one try is fully processed; stops
/// at the first rate whose last try shows the server past its knee, then
/// refines. Every try lands in `steps`, in order.
pub fn climb<E>(
    ramp: &Ramp,
    steps: &mut Vec<Step>,
    mut step: impl FnMut(f64) -> Result<Step, E>,
) -> Result<(), E> {
    let mut offer = |rate: f64, steps: &mut Vec<Step>| -> Result<Step, E> {
        let mut tried = 0;
        loop {
            let s = step(rate)?;
            steps.push(s);
            tried += 1;
            if tried >= ramp.tries.max(1) || s.full(ramp.tolerance, ramp.max_p99_us) {
                return Ok(s);
            }
        }
    };
    for rate in ramp.rates() {
        if overloaded(&offer(rate, steps)?, ramp) {
            break;
        }
    }
    for _ in 0..ramp.refine {
        let Some(rate) = probe(steps, ramp) else {
            break;
        };
        offer(rate, steps)?;
    }
    Ok(())
}

/// The ramp as an HTML page: achieved vs offered, p99 and server CPU.
pub fn html(name: &str, cap: &Capacity, steps: &[Step], reports: &[Report]) -> String {
    use crate::plot;
    // Refinement steps come after the ramp, below its last rate: the
    // plots take every step in the order of its rate.
    let mut order: Vec<usize> = (0..steps.len().min(reports.len())).collect();
    order.sort_by(|a, b| steps[*a].offered.total_cmp(&steps[*b].offered));
    let steps: Vec<Step> = order.iter().map(|i| steps[*i]).collect();
    let reports: Vec<&Report> = order.iter().map(|i| &reports[*i]).collect();
    let offered: Vec<(f64, f64)> = steps.iter().map(|s| (s.offered, s.offered)).collect();
    let achieved: Vec<(f64, f64)> = steps.iter().map(|s| (s.offered, s.achieved)).collect();
    let p99: Vec<(f64, f64)> = steps
        .iter()
        .map(|s| (s.offered, s.p99_us as f64 / 1000.0))
        .collect();
    let cpu: Vec<(f64, f64)> = steps
        .iter()
        .zip(&reports)
        .filter_map(|(s, r)| Some((s.offered, r.server_cpu_us_per_call?)))
        .collect();
    let rows: Vec<Vec<String>> = steps
        .iter()
        .zip(&reports)
        .map(|(s, r)| {
            vec![
                format!("{:.0}", s.offered),
                format!("{:.1}", s.achieved),
                s.failed.to_string(),
                format!("{:.2}", s.p99_us as f64 / 1000.0),
                r.server_cpu_us_per_call
                    .map_or("-".into(), |v| format!("{v:.1}")),
                r.server_socket_drops.map_or("-".into(), |d| d.to_string()),
            ]
        })
        .collect();
    let mut sections = vec![
        (
            format!(
                "{name}: peak {:.0} calls/s, sustainable {:.0} calls/s",
                cap.peak, cap.sustainable
            ),
            plot::table(
                &[
                    "offered/s",
                    "achieved/s",
                    "failed",
                    "p99 ms",
                    "server µs/call",
                    "socket drops",
                ],
                &rows,
            ),
        ),
        (
            "Achieved vs offered".to_owned(),
            plot::lines(
                "Achieved vs offered",
                "offered calls/s",
                "calls/s",
                &[("offered", offered), ("achieved", achieved)],
            ),
        ),
        (
            "Latency".to_owned(),
            plot::lines("p99 latency", "offered calls/s", "ms", &[("p99", p99)]),
        ),
    ];
    if !cpu.is_empty() {
        sections.push((
            "CPU vs load".to_owned(),
            plot::lines(
                "Server CPU per call",
                "offered calls/s",
                "µs per call",
                &[("server", cpu)],
            ),
        ));
    }
    plot::page(&format!("sipsec bench peak: {name}"), &sections)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp() -> Ramp {
        Ramp {
            start: 1000.0,
            factor: 2.0,
            max: 10_000.0,
            seconds: 5.0,
            max_p99_us: 150_000,
            tolerance: 0.05,
            refine: 0,
            tries: 1,
        }
    }

    #[test]
    fn rates_grow_geometrically_up_to_the_max() {
        assert_eq!(ramp().rates(), [1000.0, 2000.0, 4000.0, 8000.0]);
        let flat = Ramp {
            factor: 1.0,
            max: 1000.0,
            ..ramp()
        };
        assert_eq!(flat.rates(), [1000.0], "a factor ≤ 1 still ends");
    }

    #[test]
    fn the_knee_stops_the_ramp() {
        let r = ramp();
        let step = |achieved: f64, failed: u64, p99_ms: u64| Step {
            offered: 4000.0,
            achieved,
            failed,
            p99_us: p99_ms * 1000,
        };
        assert!(!overloaded(&step(3990.0, 0, 5), &r));
        assert!(overloaded(&step(3000.0, 0, 5), &r), "falls behind");
        assert!(overloaded(&step(3990.0, 100, 5), &r), "fails calls");
        assert!(overloaded(&step(3990.0, 0, 2000), &r), "latency blow-up");
    }

    /// A server that holds up to `limit` calls/s, and whose first try at
    /// each rate in `stalled` lost datagrams to a stall (fell behind).
    fn server(
        limit: f64,
        stalled: &'static [f64],
    ) -> impl FnMut(f64) -> Result<Step, std::convert::Infallible> {
        let mut seen = Vec::new();
        move |rate| {
            let first = !seen.contains(&rate);
            seen.push(rate);
            let behind = rate > limit || (first && stalled.contains(&rate));
            Ok(Step {
                offered: rate,
                achieved: if behind { rate * 0.6 } else { rate },
                failed: 0,
                p99_us: if behind { 510_000 } else { 2000 },
            })
        }
    }

    fn offered(steps: &[Step]) -> Vec<f64> {
        steps.iter().map(|s| s.offered).collect()
    }

    #[test]
    fn a_second_try_carries_the_ramp_past_a_stall() {
        let r = Ramp { tries: 2, ..ramp() };
        let mut steps = Vec::new();
        climb(&r, &mut steps, server(5000.0, &[2000.0])).unwrap();
        assert_eq!(
            offered(&steps),
            [1000.0, 2000.0, 2000.0, 4000.0, 8000.0, 8000.0]
        );
        let cap = capacity(&steps, r.tolerance, r.max_p99_us);
        assert_eq!(
            cap.sustainable, 4000.0,
            "the stalled rate's second try held"
        );

        let mut once = Vec::new();
        climb(&ramp(), &mut once, server(5000.0, &[2000.0])).unwrap();
        assert_eq!(
            offered(&once),
            [1000.0, 2000.0],
            "one try: the stall ends it"
        );
        let cap = capacity(&once, r.tolerance, r.max_p99_us);
        assert_eq!(cap.sustainable, 1000.0);
    }

    #[test]
    fn a_rate_past_the_limit_is_tried_as_often_as_asked_and_no_more() {
        let r = Ramp { tries: 3, ..ramp() };
        let mut steps = Vec::new();
        climb(&r, &mut steps, server(3000.0, &[])).unwrap();
        assert_eq!(offered(&steps), [1000.0, 2000.0, 4000.0, 4000.0, 4000.0]);
        // A rate that holds at once is offered once.
        let mut held = Vec::new();
        climb(&r, &mut held, server(1e9, &[])).unwrap();
        assert_eq!(offered(&held), [1000.0, 2000.0, 4000.0, 8000.0]);
    }

    #[test]
    fn refinement_probes_try_again_too() {
        let r = Ramp {
            tries: 2,
            refine: 1,
            ..ramp()
        };
        let mut steps = Vec::new();
        climb(&r, &mut steps, server(3000.0, &[2828.0])).unwrap();
        assert_eq!(
            offered(&steps),
            [1000.0, 2000.0, 4000.0, 4000.0, 2828.0, 2828.0]
        );
        let cap = capacity(&steps, r.tolerance, r.max_p99_us);
        assert_eq!(cap.sustainable, 2828.0);
    }

    #[test]
    fn refinement_probes_between_the_limit_and_the_first_rate_past_it() {
        let r = ramp();
        let step = |offered: f64, achieved: f64| Step {
            offered,
            achieved,
            failed: 0,
            p99_us: 1000,
        };
        let held = [step(1000.0, 1000.0), step(2000.0, 1999.0)];
        assert_eq!(probe(&held, &r), None, "nothing failed yet");
        let mut steps = vec![held[0], held[1], step(4000.0, 2500.0)];
        assert_eq!(probe(&steps, &r), Some(2828.0));
        steps.push(step(2828.0, 2827.0));
        assert_eq!(probe(&steps, &r), Some(3363.0), "up from the new limit");
        steps.push(step(3363.0, 3000.0));
        assert_eq!(probe(&steps, &r), Some(3084.0), "down from the new failure");
        assert_eq!(probe(&[step(4000.0, 100.0)], &r), None, "nothing held");
        let close = [step(1000.0, 1000.0), step(1015.0, 900.0)];
        assert_eq!(probe(&close, &r), None, "within 2 %");
    }
}
