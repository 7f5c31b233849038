//! The published RSA-variant experiment: for each key variant and size,
//! sipsec's proxy over TLS at offered 200…1000 calls/s, inbound (each call
//! a new TLS connection to the proxy: its private-key operation) and
//! outbound (each call forwarded over a new TLS connection to the next
//! hop: certificate verification, public-key operations), reporting the
//! proxy's CPU % of one core and the call response time.
//!
//! Keys and certificates are made with `sipsec keygen` (an ECDSA CA issues
//! every certificate, so chain verification costs the same throughout).
//! The next hops in the outbound runs have CRT keys of the same size: the
//! proxy only verifies their signatures, which costs the same for every
//! variant of a size.

use crate::error::Error;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use rsa_variants::Variant;
use rustls::pki_types::pem::PemObject;

use crate::compare::{command, free_port, wait_ready, Server};
use crate::handshake::{self, Measured, Schedule, TlsCallees};
use crate::{cpu, plot, responder, User};

/// Which side of the proxy opens the new connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Calls arrive over new TLS connections (the proxy signs).
    Inbound,
    /// The proxy forwards over new TLS connections (the proxy verifies).
    Outbound,
}

impl Direction {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Inbound => "inbound",
            Direction::Outbound => "outbound",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The `sipsec` executable (serve, keygen).
    pub exe: PathBuf,
    /// Keys, certificates, data directories.
    pub workdir: PathBuf,
    /// Modulus sizes.
    pub bits: Vec<u32>,
    /// Variants.
    pub variants: Vec<Variant>,
    /// Offered rates, calls/s.
    pub rates: Vec<f64>,
    /// Seconds per point.
    pub seconds: f64,
    /// Directions.
    pub directions: Vec<Direction>,
    /// Concurrent callers in the generator.
    pub threads: usize,
    /// Proxy on CPU 0, generator (and next hops) on CPU 1.
    pub pin: bool,
}

/// One measured point.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Point {
    /// Inbound or outbound.
    pub direction: Direction,
    /// Variant name (`standard`, `crt`, `multiprime3`…).
    pub variant: String,
    /// Modulus bits.
    pub bits: u32,
    /// Offered calls/s.
    pub offered: f64,
    /// Answered calls per second of the run.
    pub achieved: f64,
    /// Calls started.
    pub started: u64,
    /// Calls answered 200.
    pub ok: u64,
    /// Failures by cause.
    pub failures: std::collections::BTreeMap<String, u64>,
    /// The proxy's CPU, % of one core.
    pub cpu_percent: f64,
    /// Proxy CPU µs per answered call.
    pub cpu_us_per_call: f64,
    /// Mean response time, ms.
    pub mean_ms: f64,
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
}

fn run(exe: &Path, args: &[&str]) -> Result<(), Error> {
    let out = Command::new(exe)
        .args(args)
        .stdout(Stdio::null())
        .output()
        .map_err(Error::io(exe.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::peer(
            format!("sipsec {}", args.join(" ")),
            String::from_utf8_lossy(&out.stderr).trim(),
        ))
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

/// A key of `variant` and `bits` and its certificate (SAN 127.0.0.1),
/// issued by the CA in `dir`, as `ROLE-VARIANT-BITS.{key,pem}`.
fn key_and_cert(
    plan: &Plan,
    role: &str,
    variant: Variant,
    bits: u32,
) -> Result<(PathBuf, PathBuf), Error> {
    let dir = &plan.workdir;
    let name = format!("{role}-{}-{bits}", variant.name());
    let key = dir.join(format!("{name}.key"));
    let cert = dir.join(format!("{name}.pem"));
    let (kind, primes) = match variant {
        Variant::Standard => ("standard", None),
        Variant::Crt => ("crt", None),
        Variant::MultiPrime { primes } => ("multiprime", Some(primes.to_string())),
    };
    let bits_s = bits.to_string();
    let mut args = vec![
        "keygen",
        "rsa",
        "--variant",
        kind,
        "--bits",
        &bits_s,
        "-o",
        s(&key),
    ];
    if let Some(p) = &primes {
        args.extend(["--primes", p.as_str()]);
    }
    run(&plan.exe, &args)?;
    run(
        &plan.exe,
        &[
            "keygen",
            "cert",
            "--key",
            s(&key),
            "--cn",
            "127.0.0.1",
            "--san",
            "127.0.0.1",
            "--issuer-cert",
            s(&dir.join("ca.pem")),
            "--issuer-key",
            s(&dir.join("ca.key")),
            "-o",
            s(&cert),
        ],
    )?;
    Ok((key, cert))
}

fn free_tcp_port() -> Result<u16, Error> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(Error::io("finding a free port"))
}

/// The TLS configuration the next hops serve: `cert` and the RSA key of
/// any variant in `key`.
fn callee_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, Error> {
    let chain = rustls::pki_types::CertificateDer::pem_file_iter(cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| Error::Crypto(format!("{}: {e}", cert.display())))?;
    let pem = std::fs::read(key).map_err(Error::io(key.display()))?;
    let rsa = rsa_variants::PrivateKey::from_pem(&pem).map_err(Error::crypto)?;
    let signing = rsa_variants::tls::signing_key(rsa).map_err(Error::crypto)?;
    let certified = rustls::sign::CertifiedKey::new(chain, signing);
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(sip_tls::provider(
        &sip_tls::Groups::default(),
    )))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .map_err(Error::crypto)?
    .with_no_client_auth()
    .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified)));
    // No tickets and no session cache: the proxy's attempts to resume
    // fail, so each outbound call is a full handshake it must verify.
    let mut config = config;
    config.send_tls13_tickets = 0;
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    Ok(Arc::new(config))
}

fn point(
    direction: Direction,
    variant: Variant,
    bits: u32,
    offered: f64,
    m: &Measured,
    cpu_seconds: f64,
) -> Point {
    let secs = m.elapsed.as_secs_f64().max(1e-9);
    Point {
        direction,
        variant: variant.name(),
        bits,
        offered,
        achieved: m.ok as f64 / secs,
        started: m.started,
        ok: m.ok,
        failures: m.failures.clone(),
        cpu_percent: cpu_seconds / secs * 100.0,
        cpu_us_per_call: if m.ok > 0 {
            cpu_seconds * 1e6 / m.ok as f64
        } else {
            0.0
        },
        mean_ms: m.latency.mean_us() / 1000.0,
        p50_ms: m.latency.quantile_us(0.5) as f64 / 1000.0,
        p99_ms: m.latency.quantile_us(0.99) as f64 / 1000.0,
    }
}

/// Runs the plan; `progress` sees each point as it is measured.
pub fn experiment(plan: &Plan, mut progress: impl FnMut(&Point)) -> Result<Vec<Point>, Error> {
    let dir = &plan.workdir;
    std::fs::create_dir_all(dir).map_err(Error::io(dir.display()))?;
    run(&plan.exe, &["keygen", "ec", "-o", s(&dir.join("ca.key"))])?;
    run(
        &plan.exe,
        &[
            "keygen",
            "cert",
            "--key",
            s(&dir.join("ca.key")),
            "--cn",
            "sipsec bench CA",
            "--ca",
            "-o",
            s(&dir.join("ca.pem")),
        ],
    )?;
    // The published experiment used 1024-bit keys: both sides accept them.
    let client = crate::link::client_config(&dir.join("ca.pem"), true)
        .map_err(Error::io(dir.join("ca.pem").display()))?;
    let client = crate::link::without_resumption(&client);
    if plan.pin {
        // Threads started from here on (callers, next hops) inherit it.
        sip_udp::pin_to_core(1).map_err(Error::io("pinning the generator"))?;
    }
    let stop = AtomicBool::new(false);
    let mut points = Vec::new();
    for &bits in &plan.bits {
        // The next hops' key: verifying a signature costs the same for
        // every variant of a size (same n and e), so they use the cheapest
        // to sign with, CRT, and the generator's core is not what limits
        // the outbound runs.
        let next_hop = if plan.directions.contains(&Direction::Outbound) {
            Some(key_and_cert(plan, "next-hop", Variant::Crt, bits)?)
        } else {
            None
        };
        for &variant in &plan.variants {
            let (key, cert) = key_and_cert(plan, "proxy", variant, bits)?;
            let udp_port = free_port().map_err(Error::io("finding a free port"))?;
            let udp: SocketAddr = ([127, 0, 0, 1], udp_port).into();
            let tls: SocketAddr = ([127, 0, 0, 1], free_tcp_port()?).into();
            let data = dir.join(format!("data-{}-{bits}", variant.name()));
            let _ = std::fs::remove_dir_all(&data);
            let mut child = command(plan.pin, &plan.exe)
                .args(["serve", "--mode", "proxy", "--no-http", "--workers", "1"])
                .args(["--udp", &udp.to_string(), "--tls", &tls.to_string()])
                .args(["--cert", s(&cert), "--key", s(&key)])
                .args(["--peer-ca", s(&dir.join("ca.pem")), "--data-dir", s(&data)])
                .arg("--tls-allow-rsa-1024")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(Error::io(plan.exe.display()))?;
            wait_ready(udp, &mut child)?;
            let pids = cpu::settled_tree(child.id());
            let server = Server {
                child,
                addr: udp,
                pids,
            };
            let callee = responder::Responder::start(
                "127.0.0.1:0".parse().expect("literal"),
                responder::Mode::Callee,
                1,
            )
            .map_err(Error::io("starting the callee"))?;
            let user = User {
                name: "callee".into(),
                password: "pw".into(),
            };
            responder::register(server.addr, &user, callee.addr(), 3600)?;
            let callees = if let Some((hop_key, hop_cert)) = &next_hop {
                let c = TlsCallees::start([127, 0, 0, 1].into(), callee_config(hop_cert, hop_key)?)
                    .map_err(Error::io("starting the TLS callees"))?;
                let names = handshake::register_callees(server.addr, &c)?;
                Some((c, names))
            } else {
                None
            };
            for &direction in &plan.directions {
                for &rate in &plan.rates {
                    let schedule = Schedule {
                        rate,
                        calls: (rate * plan.seconds).round().max(1.0) as u64,
                        threads: plan.threads,
                    };
                    let before = cpu::cpu_seconds(&server.pids);
                    let m = match (direction, &callees) {
                        (Direction::Inbound, _) => {
                            handshake::inbound(tls, &client, "callee", schedule, &stop)
                        }
                        (Direction::Outbound, Some((_, names))) => {
                            handshake::outbound(server.addr, names, schedule, &stop)
                        }
                        (Direction::Outbound, None) => continue,
                    };
                    let used = cpu::cpu_seconds(&server.pids) - before;
                    let p = point(direction, variant, bits, rate, &m, used);
                    progress(&p);
                    points.push(p);
                }
            }
            if let Some((c, _)) = callees {
                c.stop();
            }
            callee.stop();
            drop(server);
        }
    }
    Ok(points)
}

/// Markdown: one table per direction, a row per key, "CPU % / mean ms"
/// per offered rate.
pub fn markdown(points: &[Point], rates: &[f64]) -> String {
    let mut o = String::new();
    for direction in [Direction::Inbound, Direction::Outbound] {
        let rows: Vec<&Point> = points.iter().filter(|p| p.direction == direction).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(
            o,
            "\n{} — proxy CPU % of one core / mean response time ms (failed calls in brackets)\n",
            direction.name()
        );
        let _ = write!(o, "| key |");
        for r in rates {
            let _ = write!(o, " {r:.0}/s |");
        }
        let _ = write!(o, "\n|---|");
        for _ in rates {
            o.push_str("---|");
        }
        o.push('\n');
        let mut keys: Vec<(u32, String)> =
            rows.iter().map(|p| (p.bits, p.variant.clone())).collect();
        keys.dedup();
        for (bits, variant) in keys {
            let _ = write!(o, "| RSA-{bits} {variant} |");
            for r in rates {
                match rows
                    .iter()
                    .find(|p| p.bits == bits && p.variant == variant && p.offered == *r)
                {
                    Some(p) => {
                        let failed: u64 = p.failures.values().sum();
                        let _ = write!(o, " {:.1} / {:.2}", p.cpu_percent, p.mean_ms);
                        if failed > 0 {
                            let _ = write!(o, " [{failed}]");
                        }
                        o.push_str(" |");
                    }
                    None => o.push_str(" – |"),
                }
            }
            o.push('\n');
        }
    }
    o
}

/// One HTML page: the tables and, per direction, CPU % and mean response
/// time against the offered rate, a line per key.
pub fn html(points: &[Point], rates: &[f64]) -> String {
    let mut sections = Vec::new();
    for direction in [Direction::Inbound, Direction::Outbound] {
        let rows: Vec<&Point> = points.iter().filter(|p| p.direction == direction).collect();
        if rows.is_empty() {
            continue;
        }
        let mut keys: Vec<(u32, String)> =
            rows.iter().map(|p| (p.bits, p.variant.clone())).collect();
        keys.dedup();
        let names: Vec<String> = keys.iter().map(|(b, v)| format!("RSA-{b} {v}")).collect();
        // One chart per size: its variants' lines side by side.
        let mut charts = String::new();
        let mut sizes: Vec<u32> = keys.iter().map(|(b, _)| *b).collect();
        sizes.dedup();
        for size in sizes {
            let series = |f: fn(&Point) -> f64| -> Vec<(&str, Vec<(f64, f64)>)> {
                keys.iter()
                    .filter(|(b, _)| *b == size)
                    .map(|(b, v)| {
                        let pts = rows
                            .iter()
                            .filter(|p| p.bits == *b && &p.variant == v)
                            .map(|p| (p.offered, f(p)))
                            .collect();
                        (v.as_str(), pts)
                    })
                    .collect()
            };
            charts.push_str(&plot::lines(
                &format!("{} RSA-{size}: proxy CPU", direction.name()),
                "offered calls/s",
                "CPU % of one core",
                &series(|p| p.cpu_percent),
            ));
            charts.push_str(&plot::lines(
                &format!("{} RSA-{size}: response time", direction.name()),
                "offered calls/s",
                "mean ms",
                &series(|p| p.mean_ms),
            ));
        }
        let head: Vec<String> = std::iter::once("key".to_owned())
            .chain(rates.iter().map(|r| format!("{r:.0}/s: CPU % / ms")))
            .collect();
        let head_refs: Vec<&str> = head.iter().map(String::as_str).collect();
        let table_rows: Vec<Vec<String>> = keys
            .iter()
            .zip(&names)
            .map(|((b, v), n)| {
                std::iter::once(n.clone())
                    .chain(rates.iter().map(|r| {
                        rows.iter()
                            .find(|p| p.bits == *b && &p.variant == v && p.offered == *r)
                            .map_or("–".into(), |p| {
                                format!("{:.1} / {:.2}", p.cpu_percent, p.mean_ms)
                            })
                    }))
                    .collect()
            })
            .collect();
        sections.push((
            format!("{} TLS connections", direction.name()),
            format!("{}{charts}", plot::table(&head_refs, &table_rows)),
        ));
    }
    plot::page("sipsec bench rsa-variants", &sections)
}
