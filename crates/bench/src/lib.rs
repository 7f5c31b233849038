//! `sipsec bench`: a multi-threaded SIP load generator that measures what
//! the published experiments measured (the published lean-server study): calls/s offered and
//! achieved, failures by cause, retransmissions, latency per operation as
//! an HDR histogram and in the published buckets with the latency
//! coefficient, and the server's CPU per call.
//!
//! [`scenario`] describes call flows as data; [`engine`] runs them on
//! worker threads; [`responder`] is the built-in callee and the null
//! responder; [`stats`] and [`report`] turn outcomes into figures.

pub mod compare;
pub mod connections;
pub mod cpu;
pub mod crossbench;
pub mod drops;
pub mod engine;
pub mod error;
pub mod flows;
pub mod handshake;
pub mod link;
pub mod null_stream;
pub mod peak;
pub mod plot;
pub mod privacy;
pub mod privacy_route;
pub mod provenance;
pub mod report;
pub mod responder;
pub mod scale;
pub mod scenario;
pub mod security;
pub mod srtp;
pub mod stats;
pub mod steer;
pub mod timers;
pub mod variants;
pub mod xdp;

use crate::error::Error;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use crate::engine::{Live, Run, User};
use crate::report::Report;

/// Pins the calling thread, and the generator threads it starts later,
/// to CPU `core`.
pub fn pin_to_core(core: usize) -> std::io::Result<()> {
    sip_udp::pin_to_core(core)
}

/// Pins the calling thread, and the generator threads it starts later,
/// to `cores`.
pub fn pin_to_cores(cores: &[usize]) -> std::io::Result<()> {
    sip_udp::pin_to_cores(cores)
}

/// Runs `work` while another thread calls `tick` with the time elapsed
/// every `every` (on absolute deadlines), until `work` returns: progress
/// lines for a long phase that reports nothing by itself.
pub fn ticking<T>(every: Duration, tick: impl Fn(Duration) + Sync, work: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let tick = &tick;
        s.spawn(move || {
            let mut next = start + every;
            loop {
                let wait = next.saturating_duration_since(Instant::now());
                match stopped.recv_timeout(wait) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        tick(start.elapsed());
                        next += every;
                    }
                    _ => return,
                }
            }
        });
        let out = work();
        drop(stop);
        out
    })
}

/// Everything a measured run needs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The run.
    pub run: Run,
    /// The callee's credentials (invite and redirect scenarios).
    pub callee: User,
    /// Where the callee registers over UDP (default: the target; a TLS
    /// target needs the server's UDP address here).
    pub callee_registrar: Option<std::net::SocketAddr>,
    /// The domain of the callee's address-of-record (default: the
    /// registrar's address).
    pub callee_domain: Option<String>,
    /// Server processes whose CPU time is sampled (may be empty).
    pub server_pids: Vec<u32>,
    /// Latency coefficient weights.
    pub weights: [f64; 5],
}

/// Reads users from a CSV file with a `username,password` header.
pub fn load_users(path: &std::path::Path) -> Result<Vec<User>, Error> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path.display()))?;
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim().eq_ignore_ascii_case("username,password") => {}
        _ => {
            return Err(Error::Input(format!(
                "{}: the first line must be the header username,password",
                path.display()
            )))
        }
    }
    let mut users = Vec::new();
    for (i, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let (name, password) = line.split_once(',').ok_or_else(|| {
            Error::Input(format!(
                "{}:{}: expected username,password",
                path.display(),
                i + 1
            ))
        })?;
        users.push(User {
            name: name.trim().to_owned(),
            password: password.to_owned(),
        });
    }
    if users.is_empty() {
        return Err(Error::Input(format!("{}: no users", path.display())));
    }
    Ok(users)
}

/// `user00000` … with password `pw`, for servers without authentication.
pub fn generated_users(n: usize) -> Vec<User> {
    (0..n)
        .map(|i| User {
            name: format!("user{i:05}"),
            password: "pw".to_owned(),
        })
        .collect()
}

/// Runs one measurement: registers the built-in callee when the scenario
/// needs one, samples the server's CPU each second, and reports.
pub fn measure(opts: &Options, live: &Live, stop: &AtomicBool) -> Result<Report, Error> {
    let run = &opts.run;
    let callee = if run.scenario.needs_callee {
        let ip = if run.target.is_ipv6() {
            "[::1]:0"
        } else {
            "127.0.0.1:0"
        };
        // As many callee threads as the generator has: the callee must
        // not be what limits the calls a server relays.
        let r = responder::Responder::start(
            ip.parse().expect("literal"),
            responder::Mode::Callee,
            run.threads,
        )
        .map_err(Error::io("starting the callee"))?;
        let registrar = opts.callee_registrar.unwrap_or(run.target);
        let domain = opts
            .callee_domain
            .clone()
            .unwrap_or_else(|| registrar.to_string());
        let contact = format!("<sip:{}@{}>", opts.callee.name, r.addr());
        responder::register_in(registrar, &domain, &opts.callee, &contact, 3600)?;
        // Registered at another node sharing the location: the callers'
        // nodes learn of it a moment later. Calls start once each of them
        // routes to the callee (an OPTIONS answered by it), not before. A
        // callee in another domain is reached through the target's route
        // to that domain's proxy, its registrar: nothing to learn, and an
        // OPTIONS for the callee in the target's own domain never finds it.
        if run.transport == link::Transport::Udp && opts.callee_domain.is_none() {
            for via in std::iter::once(run.target).chain(run.also.iter().copied()) {
                if via != registrar {
                    if let Err(why) = responder::await_reachable(via, &opts.callee.name) {
                        eprintln!("bench: the callee is not reachable yet ({why}); calling anyway");
                    }
                }
            }
        }
        Some(r)
    } else {
        None
    };
    // Over UDP, what the server's own receive queue drops while it runs.
    let drops = (run.transport == link::Transport::Udp).then(|| {
        drops::DropCount::start(std::iter::once(run.target).chain(run.also.iter().copied()))
    });
    let done = AtomicBool::new(false);
    let (outcome, cpu) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut samples = Vec::new();
            if opts.server_pids.is_empty() {
                return samples;
            }
            let t0 = Instant::now();
            let mut last = cpu::cpu_seconds(&opts.server_pids);
            samples.push(last);
            let mut tick = 1u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let due = t0 + Duration::from_secs(tick);
                let now = Instant::now();
                if now < due {
                    std::thread::sleep((due - now).min(Duration::from_millis(50)));
                    continue;
                }
                last = cpu::cpu_seconds(&opts.server_pids);
                samples.push(last);
                tick += 1;
            }
            samples.push(cpu::cpu_seconds(&opts.server_pids).max(last));
            samples
        });
        let outcome = engine::execute(run, live, stop);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (outcome, sampler.join().unwrap_or_default())
    });
    if let Some(r) = callee {
        r.stop();
    }
    let outcome = outcome.map_err(Error::io("running the load"))?;
    let mut report = Report::new(opts, &outcome, &cpu);
    report.server_socket_drops = drops.and_then(|d| d.since());
    Ok(report)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ticking_reports_while_work_runs_and_stops_with_it() {
        let ticks = std::sync::atomic::AtomicU32::new(0);
        let out = super::ticking(
            std::time::Duration::from_millis(20),
            |_| {
                ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            },
            || {
                std::thread::sleep(std::time::Duration::from_millis(300));
                7
            },
        );
        assert_eq!(out, 7);
        let seen = ticks.load(std::sync::atomic::Ordering::Relaxed);
        assert!(seen >= 1, "{seen}");
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(
            ticks.load(std::sync::atomic::Ordering::Relaxed),
            seen,
            "no tick after the work ended"
        );
    }
}
