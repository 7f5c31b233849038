//! CPU time of the server under test (every process given, e.g. all of
//! Kamailio's children): its threads' run time in nanoseconds from
//! `/proc/PID/task/*/schedstat`, and exited threads' from `/proc/PID/stat`.

use std::time::Duration;

/// Clock ticks per second of `/proc` times (USER_HZ; 100 on Linux).
const TICKS: f64 = 100.0;

/// Processes whose command name (`/proc/PID/comm`) is `name`, this one
/// excepted (the generator is itself a `sipsec`).
pub fn pids_named(name: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id();
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .collect()
}

/// `pid` and all its descendants (e.g. Kamailio's main process and the
/// children it forks), so that two servers of the same name never mix.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|p| {
                    let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
                    // After the command name: state, then the parent's pid.
                    let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?;
                    Some((p, ppid.parse().ok()?))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    tree
}

/// [`process_tree`] once it has stopped changing (the same processes
/// for 150 ms, at most 5 s): a server may answer before it has forked
/// all its workers (Kamailio's TCP and TLS ones come after its UDP ones),
/// and a worker left out would be CPU left out.
pub fn settled_tree(pid: u32) -> Vec<u32> {
    settled_tree_after(pid, Duration::from_millis(150), Duration::from_secs(5))
}

/// [`process_tree`] once it has been the same for `quiet`, or after
/// `limit`.
fn settled_tree_after(pid: u32, quiet: Duration, limit: Duration) -> Vec<u32> {
    let deadline = std::time::Instant::now() + limit;
    let mut tree = process_tree(pid);
    let mut since = std::time::Instant::now();
    while since.elapsed() < quiet && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(25));
        let now = process_tree(pid);
        if now != tree {
            (tree, since) = (now, std::time::Instant::now());
        }
    }
    tree
}

/// utime + stime of one `/proc/.../stat` line, in ticks.
fn stat_ticks(stat: &str) -> Option<u64> {
    let (user, system) = user_system(stat)?;
    Some(user + system)
}

/// utime and stime of one `/proc/.../stat` line, in ticks.
fn user_system(stat: &str) -> Option<(u64, u64)> {
    // Fields after the parenthesised command name: state is 3rd, utime
    // 14th and stime 15th of the whole line.
    let rest = stat.rsplit_once(')')?.1;
    let mut f = rest.split_whitespace().skip(11);
    Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
}

/// User and system ticks of `pids` so far (`/proc/PID/stat`: every
/// thread, ended ones included). The kernel charges each timer tick to
/// the side a thread was on, so over a run of many ticks their split
/// estimates how its CPU divides between its own code and the kernel
/// (interrupts taken while it ran count as the kernel's).
pub fn user_system_ticks(pids: &[u32]) -> (u64, u64) {
    pids.iter()
        .filter_map(|pid| user_system(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?))
        .fold((0, 0), |(u, s), (du, ds)| (u + du, s + ds))
}

/// Of the ticks gained from `before` to `after` ([`user_system_ticks`]),
/// the share in user space; `None` below `min` ticks, too few to say.
pub fn user_share(before: (u64, u64), after: (u64, u64), min: u64) -> Option<f64> {
    let user = after.0.saturating_sub(before.0);
    let all = user + after.1.saturating_sub(before.1);
    (all >= min.max(1)).then(|| user as f64 / all as f64)
}

/// CPU seconds used so far by one process: its live threads' run time
/// in nanoseconds (`/proc/PID/task/TID/schedstat`), plus, at the 10 ms
/// tick resolution of `/proc/PID/stat`, what its exited threads used.
/// Ticks alone made a low-rate run's CPU per call move in 10 ms steps.
fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let total = stat_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
    let mut live_ns = 0u64;
    let mut live_ticks = 0u64;
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok();
    for t in tasks.into_iter().flatten().flatten() {
        let dir = t.path();
        let (Ok(sched), Ok(stat)) = (
            std::fs::read_to_string(dir.join("schedstat")),
            std::fs::read_to_string(dir.join("stat")),
        ) else {
            continue;
        };
        let (Some(ns), Some(ticks)) = (
            sched
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok()),
            stat_ticks(&stat),
        ) else {
            // No schedstat here: the ticks are all there is.
            return Some(total as f64 / TICKS);
        };
        live_ns += ns;
        live_ticks += ticks;
    }
    Some(live_ns as f64 / 1e9 + total.saturating_sub(live_ticks) as f64 / TICKS)
}

/// CPU seconds used so far by `pids` (those gone count as 0).
pub fn cpu_seconds(pids: &[u32]) -> f64 {
    pids.iter()
        .filter_map(|pid| process_cpu_seconds(*pid))
        .sum()
}

/// One thread of the server under test and the CPU it has used so far.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadCpu {
    /// Its thread id (a process's own for a single-threaded process).
    pub tid: u32,
    /// Its name (`/proc/PID/task/TID/comm`): sipsec names its workers
    /// `udp-N`; Kamailio's children are single-threaded processes.
    pub name: String,
    /// CPU seconds (`schedstat` run time).
    pub seconds: f64,
}

/// Every live thread of `pids` and its CPU so far: what shows how evenly
/// a server spreads its load over its workers.
pub fn threads(pids: &[u32]) -> Vec<ThreadCpu> {
    let mut out = Vec::new();
    for pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let dir = t.path();
            let tid = t.file_name().to_str().and_then(|s| s.parse().ok());
            let ns = std::fs::read_to_string(dir.join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok());
            let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            if let (Some(tid), Some(ns)) = (tid, ns) {
                out.push(ThreadCpu {
                    tid,
                    name: name.trim_end().to_owned(),
                    seconds: ns as f64 / 1e9,
                });
            }
        }
    }
    out
}

/// What each thread used between two [`threads`] readings, busiest first
/// (threads that ended in between are left out).
pub fn thread_deltas(before: &[ThreadCpu], after: &[ThreadCpu]) -> Vec<ThreadCpu> {
    let mut out: Vec<ThreadCpu> = after
        .iter()
        .map(|a| {
            let was = before
                .iter()
                .find(|b| b.tid == a.tid)
                .map_or(0.0, |b| b.seconds);
            ThreadCpu {
                seconds: (a.seconds - was).max(0.0),
                ..a.clone()
            }
        })
        .collect();
    out.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    out
}

/// CPU % of one core used between two readings `dt` apart.
pub fn percent(before: f64, after: f64, dt: Duration) -> f64 {
    if dt.is_zero() {
        return 0.0;
    }
    (after - before).max(0.0) / dt.as_secs_f64() * 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` rounds of arithmetic the optimiser cannot fold away.
    fn spin(mut x: u64, n: u64) -> u64 {
        for i in 0..n {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        x
    }

    #[test]
    fn a_spinning_thread_is_counted_in_user_space() {
        let line = "42 (a b) c) S 1 2 3 4 5 6 7 8 9 10 110 220 0 0";
        assert_eq!(user_system(line), Some((110, 220)));
        assert_eq!(stat_ticks(line), Some(330));
        assert_eq!(user_system("42 (x) S 1"), None);
        assert_eq!(user_share((10, 10), (13, 11), 4), Some(0.75));
        assert_eq!(user_share((10, 10), (11, 11), 4), None, "too few ticks");
        assert_eq!(user_share((5, 5), (5, 5), 0), None);
        // This thread alone: spin in user space until 25 ticks accrued
        // (bounded: at most a few seconds of CPU).
        let own = || {
            let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("stat");
            user_system(&stat).expect("parsed")
        };
        let before = own();
        // Bounded by the clock, not by rounds: an optimised build spins
        // faster than a debug one.
        let give_up = std::time::Instant::now() + Duration::from_secs(20);
        let mut x = 0u64;
        loop {
            x = spin(x, 2_000_000);
            let now = own();
            if now.0 + now.1 >= before.0 + before.1 + 25 {
                break;
            }
            assert!(
                std::time::Instant::now() < give_up,
                "25 ticks of CPU in 20 s"
            );
        }
        assert_ne!(x, 1);
        let share = user_share(before, own(), 25).expect("25 ticks spent");
        assert!(share > 0.8, "a loop without system calls: {share}");
    }

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        // Burn a little CPU so the counter is above zero.
        assert_ne!(spin(0, 20_000_000), 1);
        let used = cpu_seconds(&[me]);
        assert!(used > 0.0);
        // Nanoseconds, not 10 ms ticks: not a whole number of ticks.
        assert!((used * TICKS).fract() != 0.0, "{used}");
        assert_eq!(cpu_seconds(&[u32::MAX]), 0.0);
        // Spin until this thread's counter moves (a tick at least).
        let before = threads(&[me]);
        let give_up = std::time::Instant::now() + Duration::from_secs(20);
        let mut spent = Vec::new();
        while !spent.iter().any(|t: &ThreadCpu| t.seconds > 0.0)
            && std::time::Instant::now() < give_up
        {
            assert_ne!(spin(7, 2_000_000), 1);
            spent = thread_deltas(&before, &threads(&[me]));
        }
        assert!(spent.iter().any(|t| t.seconds > 0.0), "{spent:?}");
        assert!(spent.windows(2).all(|w| w[0].seconds >= w[1].seconds));
        let comm = std::fs::read_to_string(format!("/proc/{me}/comm")).expect("comm");
        assert!(!pids_named(comm.trim_end()).contains(&me), "never itself");
        assert!((percent(1.0, 1.5, Duration::from_secs(1)) - 50.0).abs() < 1e-9);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        let tree = process_tree(me);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(tree[0], me);
        assert!(tree.contains(&child.id()), "children are in the tree");
    }

    #[test]
    fn a_settled_tree_has_the_workers_forked_after_start() {
        use std::io::Write;
        // Like a server that forks two workers after it answers.
        let mut server = std::process::Command::new("sh")
            .args(["-c", "read go; sleep 30 & sleep 30 & wait"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("sh runs");
        let at_once = process_tree(server.id());
        writeln!(server.stdin.as_mut().expect("piped"), "go").expect("write");
        let settled =
            settled_tree_after(server.id(), Duration::from_secs(1), Duration::from_secs(10));
        for pid in &settled[1..] {
            let _ = std::process::Command::new("kill")
                .arg(pid.to_string())
                .status();
        }
        let _ = server.kill();
        let _ = server.wait();
        assert_eq!(at_once.len(), 1, "nothing forked yet: {at_once:?}");
        assert_eq!(settled.len(), 3, "sh and both workers: {settled:?}");
    }
}
