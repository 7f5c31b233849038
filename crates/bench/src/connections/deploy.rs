//! Starting what is measured: the servers (several sharing a Redis
//! location when asked) and reading what they hold.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{source, tail, Plan};
use crate::compare::{self, Server, Target};
use crate::cpu;
use crate::error::Error;

/// Memory (PSS, bytes), threads of `pids`.
pub(super) fn footprint(pids: &[u32]) -> (u64, u64) {
    let mut pss = 0;
    let mut threads = 0;
    for pid in pids {
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) {
            pss += field_kb(&s, "Pss:") * 1024;
        }
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            threads += field_kb(&s, "Threads:");
        }
    }
    (pss, threads)
}

pub(super) fn field_kb(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// One target's servers: one process, or `nodes` sipsec nodes sharing a
/// Redis location, each with its own listener.
pub(super) struct Deployment {
    /// Dropped first: the nodes stop before their Redis.
    pub(super) servers: Vec<Server>,
    pub(super) redis: Option<Server>,
    /// Where the phones connect, one per server.
    pub(super) listens: Vec<SocketAddr>,
}

impl Deployment {
    /// Every process of the deployment (children included).
    pub(super) fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .servers
            .iter()
            .flat_map(|s| cpu::process_tree(s.child.id()))
            .collect();
        pids.extend(self.redis.iter().map(|r| r.child.id()));
        pids
    }
}

/// The log of `target`'s `i`-th node.
pub(super) fn log_name(plan: &Plan, target: &Target, i: usize) -> String {
    if plan.nodes > 1 {
        format!("{}-{i}.log", target.name())
    } else {
        format!("{}.log", target.name())
    }
}

pub(super) fn start(plan: &Plan, target: &Target) -> Result<Deployment, Error> {
    let dir = &plan.workdir;
    std::fs::create_dir_all(dir).map_err(Error::io(dir.display()))?;
    let target = &private_copy(dir, target)?;
    let redis = if plan.nodes > 1 {
        Some(start_redis(plan)?)
    } else {
        None
    };
    let url = redis.as_ref().map(|r| format!("redis://{}/0", r.addr));
    let mut servers = Vec::new();
    let mut listens = Vec::new();
    for i in 0..plan.nodes {
        let (server, listen) = start_node(plan, target, i, url.as_deref())?;
        servers.push(server);
        listens.push(listen);
    }
    Ok(Deployment {
        servers,
        redis,
        listens,
    })
}

/// `target` run from its own copy of its executable in `dir`: a server
/// started from the executable the bench itself runs would share its
/// code pages with the generator, and PSS would count them half (2 MB
/// less "memory held" than the same build from another file).
pub(super) fn private_copy(dir: &std::path::Path, target: &Target) -> Result<Target, Error> {
    let (exe, name) = match target {
        Target::Sipsec { exe, label } => (exe, label.as_str()),
        Target::Null { exe } => (exe, "null"),
        Target::Kamailio { .. } => return Ok(target.clone()),
    };
    let copy = dir.join(format!("{name}.exe"));
    // A new file, not one a server of an earlier round may still run.
    let _ = std::fs::remove_file(&copy);
    std::fs::copy(exe, &copy).map_err(Error::io(exe.display()))?;
    Ok(match target {
        Target::Sipsec { label, .. } => Target::Sipsec {
            exe: copy,
            label: label.clone(),
        },
        _ => Target::Null { exe: copy },
    })
}

/// A `redis-server` on a free port, data in the scratch directory, with
/// the append-only file fsynced every second (the default deployment in
/// `docs/scale-out.md`).
pub(super) fn start_redis(plan: &Plan) -> Result<Server, Error> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(Error::io("finding a free port"))?
        .port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let dir = plan.workdir.join("redis");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(Error::io(dir.display()))?;
    let log = std::fs::File::create(plan.workdir.join("redis.log"))
        .map_err(Error::io(plan.workdir.display()))?;
    let mut child = compare::command(plan.pin, std::path::Path::new("redis-server"))
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args([
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
        ])
        .arg("--dir")
        .arg(&dir)
        .stdout(log)
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(Error::io(
            "cannot start redis-server (--nodes shares one Redis location)",
        ))?;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Error::peer(
                "redis-server",
                format!("exited at start ({status}); see its log"),
            ));
        }
        let pong = std::net::TcpStream::connect(addr).and_then(|mut c| {
            c.set_read_timeout(Some(Duration::from_millis(200)))?;
            c.write_all(b"PING\r\n")?;
            let mut b = [0u8; 7];
            c.read_exact(&mut b)?;
            Ok(&b == b"+PONG\r\n")
        });
        if pong.unwrap_or(false) {
            break;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::Timeout(format!(
                "redis-server on {addr}: no PONG within 15 s"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let pids = vec![child.id()];
    Ok(Server { child, addr, pids })
}

/// Starts `target`'s `i`-th node (its location in `redis`, if any).
/// Tries to start a server on ports found free a moment before.
pub(super) const START_TRIES: usize = 3;

/// Starts `target`'s `i`-th node. The ports are found free just before,
/// and another program (a test or a phone running beside) may take one
/// meanwhile: a server that exits at start because its port is in use is
/// started again on fresh ports; any other failure says what the server
/// logged.
pub(super) fn start_node(
    plan: &Plan,
    target: &Target,
    i: usize,
    redis: Option<&str>,
) -> Result<(Server, SocketAddr), Error> {
    let log = plan.workdir.join(log_name(plan, target, i));
    let mut tries = 0;
    loop {
        tries += 1;
        match start_node_once(plan, target, i, redis) {
            Ok(started) => return Ok(started),
            Err(e) => {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.contains("in use") && tries < START_TRIES {
                    continue;
                }
                if text.trim().is_empty() {
                    return Err(e);
                }
                let why = match e {
                    Error::Peer { detail, .. } => detail,
                    other => other.to_string(),
                };
                return Err(Error::peer(
                    target.name(),
                    format!("{why}; its log ends:\n{}", tail(&text, 8)),
                ));
            }
        }
    }
}

pub(super) fn start_node_once(
    plan: &Plan,
    target: &Target,
    i: usize,
    redis: Option<&str>,
) -> Result<(Server, SocketAddr), Error> {
    let udp = compare::free_port().map_err(Error::io("finding a free port"))?;
    let stream = compare::free_port().map_err(Error::io("finding a free port"))?;
    let udp = SocketAddr::from(([127, 0, 0, 1], udp));
    let listen = SocketAddr::from(([127, 0, 0, 1], stream));
    let dir = &plan.workdir;
    let workers = plan.workers.max(1).to_string();
    let max = plan.connections.div_ceil(plan.nodes.max(1)) + 1024;
    let mut cmd = match target {
        Target::Sipsec { exe, label } => {
            let data = dir.join(format!("{label}-data-{i}"));
            let _ = std::fs::remove_dir_all(&data);
            // Every phone comes from loopback: the per-source limit is
            // lifted as a carrier-NAT allow-list would; the accept rate is
            // lifted too, since the handshake capacity is what is measured.
            let sources: Vec<String> = (0..plan.sources)
                .map(|i| format!("\"{}\"", source(i)))
                .collect();
            let config = dir.join("connections.toml");
            std::fs::write(
                &config,
                format!(
                    "[connections]\nmax = {max}\nreactors = {workers}\naccept_rate = 0\nper_ip_exempt = [{}]\n",
                    sources.join(", ")
                ),
            )
            .map_err(Error::io(config.display()))?;
            let mut c = compare::command(plan.pin, exe);
            c.args(["serve", "--mode", "registrar", "--udp", &udp.to_string()])
                .args(["--no-http", "--workers", &workers])
                .arg("--config")
                .arg(&config)
                .arg("--data-dir")
                .arg(&data);
            if let Some(url) = redis {
                c.args(["--redis", url]);
            }
            c
        }
        Target::Kamailio { cfg } => {
            let mut c = compare::command(plan.pin, std::path::Path::new("kamailio"));
            c.arg("-f")
                .arg(cfg)
                .args(["-DD", "-E", "-m", "4096", "-M", "64", "-n", &workers])
                .args(["-l", &format!("udp:{udp}")])
                .arg("-w")
                .arg(dir)
                .args(["-A", "MODE_REGISTRAR", "-A"])
                .arg(format!("MAX_CONNECTIONS={max}"));
            c
        }
        Target::Null { exe } => {
            let mut c = compare::command(plan.pin, exe);
            c.args(["bench", "null", "--udp", &udp.to_string()])
                .args(["--workers", &workers]);
            c
        }
    };
    compare::listener_args(
        &mut cmd,
        target,
        plan.transport.transport(),
        listen,
        &plan.cert,
        &plan.key,
    )?;
    let log = std::fs::File::create(dir.join(log_name(plan, target, i)))
        .map_err(Error::io(dir.display()))?;
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(Error::io(format!("cannot start {}", target.name())))?;
    compare::wait_ready(udp, &mut child).map_err(|e| Error::peer(target.name(), e))?;
    let pids = cpu::settled_tree(child.id());
    Ok((
        Server {
            child,
            addr: udp,
            pids,
        },
        listen,
    ))
}
