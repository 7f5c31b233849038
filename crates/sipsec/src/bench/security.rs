//! `sipsec bench security`: every security layer's cost on this machine,
//! in one run (the experiments of `bench compare`, `connections`, `srtp`,
//! `privacy-route` and `stir`, each with the same rounds, rendered as one
//! table by `sipsec_bench::security`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use sip_core::digest::Algorithm;
use sipsec_bench::compare::{Cell, Certificate, Target};
use sipsec_bench::link::Transport;
use sipsec_bench::security::Row;

use super::common::{make_certificate, targets, TableOutputs};

#[derive(Args)]
pub struct SecurityArgs {
    /// Times every measurement runs, sipsec and its peer in turn; figures
    /// are medians with their range, ratios medians of the rounds' ratios.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// REGISTERs and calls per signalling measurement.
    #[arg(long, default_value_t = 6000, value_parser = clap::value_parser!(u64).range(10..=10_000_000))]
    calls: u64,
    /// Their offered rate, per second.
    #[arg(long, default_value_t = 1500.0)]
    rate: f64,
    /// TLS connections opened per handshake measurement.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(10..=15_000))]
    connections: u32,
    /// SRTP packets per profile and round.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(100..=1_048_576))]
    packets: u32,
    /// Calls per PrivaSIP configuration and per STIR/SHAKEN measurement.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    privacy_calls: u32,
    /// Measure sipsec only (no Kamailio beside it).
    #[arg(long)]
    no_kamailio: bool,
    /// Server on CPU 0 (taskset), load on CPU 1, for the signalling and
    /// handshake measurements.
    #[arg(long)]
    pin: bool,
    /// A small run of every layer (a check that all of it works; its
    /// figures are noise): 1 round, 300 calls, 40 connections, …
    #[arg(long)]
    quick: bool,
    /// Callers' credentials: CSV with a `username,password` header.
    #[arg(long, value_name = "CSV", default_value = "interop/users.csv")]
    credentials: PathBuf,
    /// Kamailio configuration.
    #[arg(long, default_value = "interop/kamailio/kamailio.cfg")]
    kamailio_cfg: PathBuf,
    /// The sipsec build measured as the server [default: this
    /// executable] (A/B of two builds with one generator).
    #[arg(long, value_name = "PATH")]
    sipsec_exe: Option<PathBuf>,
    #[command(flatten)]
    out: TableOutputs,
}

/// The sizes one run uses.
struct Sizes {
    rounds: usize,
    calls: u64,
    rate: f64,
    connections: usize,
    packets: usize,
    privacy_calls: u32,
}

pub(super) fn security(a: SecurityArgs) -> Result<ExitCode, String> {
    if !(a.rate.is_finite() && a.rate > 0.0) {
        return Err("--rate must be positive".into());
    }
    let sizes = if a.quick {
        Sizes {
            rounds: 1,
            calls: 300,
            rate: 300.0,
            connections: 40,
            packets: 2000,
            privacy_calls: 100,
        }
    } else {
        Sizes {
            rounds: a.rounds as usize,
            calls: a.calls,
            rate: a.rate,
            connections: a.connections as usize,
            packets: a.packets as usize,
            privacy_calls: a.privacy_calls,
        }
    };
    let names: Vec<String> = if a.no_kamailio {
        vec!["sipsec".into()]
    } else {
        vec!["sipsec".into(), "kamailio".into()]
    };
    let servers = targets(&names, &a.kamailio_cfg, a.sipsec_exe.as_deref())?;
    let workdir = std::env::temp_dir().join(format!("sipsec-security-{}", std::process::id()));
    std::fs::create_dir_all(&workdir).map_err(|e| format!("{}: {e}", workdir.display()))?;
    if a.pin {
        sipsec_bench::pin_to_core(1).map_err(|e| format!("pinning the load to CPU 1: {e}"))?;
    }
    let run = || -> Result<Vec<Row>, String> {
        let mut rows = Vec::new();
        let users = sipsec_bench::load_users(&a.credentials)?;
        rows.extend(signalling(&sizes, &servers, users, a.pin, &workdir)?);
        rows.extend(handshakes(&sizes, &servers, a.pin, &workdir)?);
        rows.extend(srtp(&sizes, &workdir)?);
        rows.extend(privacy(&sizes, &workdir)?);
        rows.extend(identity(&sizes, a.no_kamailio)?);
        Ok(rows)
    };
    let rows = run();
    let _ = std::fs::remove_dir_all(&workdir);
    let rows = rows?;
    let table = sipsec_bench::security::table(&rows);
    print!("{table}");
    a.out.write(&rows, &table, "security", || {
        sipsec_bench::security::html(&rows)
    })?;
    Ok(ExitCode::SUCCESS)
}

fn progress(what: &str) -> impl FnMut(&Cell) + '_ {
    move |c| {
        eprintln!(
            "{what}: round {} {:9} {:9} {:6}  {:>8} µs/call  {} failed",
            c.round,
            c.target,
            c.scenario,
            if c.auth { "digest" } else { "none" },
            c.report
                .server_cpu_us_per_call
                .map_or("-".to_owned(), |v| format!("{v:.1}")),
            c.report.failed
        );
    }
}

/// One measured layer of signalling: a transport, digest or not, and the
/// algorithm; the layer it adds to.
struct Step {
    transport: Transport,
    auth: &'static [bool],
    digest: Algorithm,
}

/// REGISTER and a call (INVITE, ACK, BYE through the proxy) over UDP
/// without auth, with digest MD5 and SHA-256, then over TCP and TLS
/// (held connections) with digest MD5: sipsec beside Kamailio.
fn signalling(
    sizes: &Sizes,
    servers: &[Target],
    users: Vec<sipsec_bench::engine::User>,
    pin: bool,
    workdir: &Path,
) -> Result<Vec<Row>, String> {
    use sipsec_bench::compare::{compare, Plan};
    let (chain, key, ca) = make_certificate(&workdir.join("signalling"))?;
    let steps = [
        Step {
            transport: Transport::Udp,
            auth: &[false, true],
            digest: Algorithm::Md5,
        },
        Step {
            transport: Transport::Udp,
            auth: &[true],
            digest: Algorithm::Sha256,
        },
        Step {
            transport: Transport::Tcp,
            auth: &[true],
            digest: Algorithm::Md5,
        },
        Step {
            transport: Transport::Tls,
            auth: &[true],
            digest: Algorithm::Md5,
        },
    ];
    let mut rows = Vec::new();
    for step in steps {
        let plan = Plan {
            targets: servers.to_vec(),
            scenarios: vec!["register".into(), "invite".into()],
            auth: step.auth.to_vec(),
            digest: step.digest,
            rate: sizes.rate,
            calls: sizes.calls,
            users: users.clone(),
            pin,
            server_cpus: None,
            sipsec_args: Vec::new(),
            // One worker, one Kamailio child: the cost per core (and
            // Kamailio 5.6's TLS takes one worker only).
            workers: 1,
            threads: 1,
            flows: 1,
            workdir: workdir.join("compare"),
            weights: sipsec_bench::stats::DEFAULT_WEIGHTS,
            transport: step.transport,
            certificate: Some(Certificate {
                chain: chain.clone(),
                key: key.clone(),
                ca: ca.clone(),
            }),
            rounds: sizes.rounds,
            media_relay: None,
        };
        let cells = compare(&plan, progress(step.transport.as_str())).map_err(|e| e.to_string())?;
        // sipsec must answer every call; a peer's losses (a loaded
        // machine, its own limits) leave its figures per successful call.
        if let Some(c) = cells
            .iter()
            .find(|c| c.target == "sipsec" && c.report.failed > 0)
        {
            return Err(format!(
                "sipsec {} over {}: {} calls failed ({:?})",
                c.scenario,
                step.transport.as_str(),
                c.report.failed,
                c.report.failures
            ));
        }
        for scenario in ["register", "invite"] {
            for &auth in step.auth {
                rows.push(signalling_row(&cells, scenario, auth, &step));
            }
        }
    }
    Ok(rows)
}

fn signalling_name(scenario: &str, transport: Transport, auth: Option<Algorithm>) -> String {
    let op = if scenario == "register" {
        "REGISTER"
    } else {
        "call (INVITE…BYE)"
    };
    let auth = auth.map_or("no auth".into(), |a| format!("digest {}", a.as_str()));
    format!("{op}, {}, {auth}", transport.as_str())
}

fn signalling_row(cells: &[Cell], scenario: &str, auth: bool, step: &Step) -> Row {
    let of = |target: &str| -> Vec<&Cell> {
        let mut v: Vec<&Cell> = cells
            .iter()
            .filter(|c| c.target == target && c.scenario == scenario && c.auth == auth)
            .collect();
        v.sort_by_key(|c| c.round);
        v
    };
    let cpu = |v: &[&Cell]| -> Vec<f64> {
        v.iter()
            .map(|c| c.report.server_cpu_us_per_call.unwrap_or(f64::NAN))
            .collect()
    };
    let bytes = |v: &[&Cell]| -> Option<f64> {
        let b: Vec<f64> = v
            .iter()
            .filter_map(|c| c.report.wire_bytes_per_call)
            .collect();
        (!b.is_empty()).then(|| sipsec_bench::security::median(&b))
    };
    let (mine, peer) = (of("sipsec"), of("kamailio"));
    let med = |f: fn(&Cell) -> f64| {
        sipsec_bench::security::median(&mine.iter().map(|c| f(c)).collect::<Vec<_>>())
    };
    let name = signalling_name(scenario, step.transport, auth.then_some(step.digest));
    let over = match (step.transport, auth) {
        (Transport::Udp, false) => None,
        (Transport::Udp, true) => Some(signalling_name(scenario, Transport::Udp, None)),
        (Transport::Tcp, _) => Some(signalling_name(
            scenario,
            Transport::Udp,
            Some(Algorithm::Md5),
        )),
        _ => Some(signalling_name(
            scenario,
            Transport::Tcp,
            Some(Algorithm::Md5),
        )),
    };
    Row {
        section: "signalling".into(),
        layer: name,
        unit: "µs CPU".into(),
        sipsec: cpu(&mine),
        peer_name: (!peer.is_empty()).then(|| "kamailio".into()),
        peer: cpu(&peer),
        bytes: bytes(&mine),
        peer_bytes: bytes(&peer),
        latency_ms: (!mine.is_empty()).then(|| {
            (
                med(|c| c.report.latency_ms.p50),
                med(|c| c.report.latency_ms.p99),
            )
        }),
        over,
    }
}

const KEYS: [&str; 4] = ["rsa-standard", "rsa-crt", "rsa-multiprime", "ecdsa-p256"];
const CLASSICAL: &str = "x25519";
const HYBRID: &str = "X25519MLKEM768";

/// A TCP connection opened, a full TLS handshake with each server key
/// and key exchange, and a first REGISTER; then resumed handshakes.
fn handshakes(
    sizes: &Sizes,
    servers: &[Target],
    pin: bool,
    workdir: &Path,
) -> Result<Vec<Row>, String> {
    use sipsec_bench::connections::{measure, Outcome, Plan, Stream};
    let dir = workdir.join("handshakes");
    let (_, _, ca) = make_certificate(&dir)?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let base = |cert: PathBuf, key: PathBuf, offers: Vec<Vec<String>>, resume: bool| Plan {
        targets: servers
            .iter()
            .filter(|t| !(openssl_cannot_sign(&key) && t.name() == "kamailio"))
            .cloned()
            .collect(),
        transport: Stream::Tls,
        connections: sizes.connections,
        sources: 1,
        // Resumption needs tickets from connections already made.
        in_flight: if resume { 4 } else { 20 },
        refresh_rate: 2000.0,
        warm_refreshes: 0,
        hold: std::time::Duration::ZERO,
        timeout: std::time::Duration::from_secs(30),
        threads: 1,
        cert,
        key,
        ca: ca.clone(),
        pin,
        workers: 1,
        workdir: dir.join("run"),
        nodes: 1,
        phone_processes: Some(1),
        phones_exe: exe.clone(),
        rounds: sizes.rounds,
        offers,
        offer: Vec::new(),
        resume,
    };
    let cpu = |outcomes: &[Outcome], target: &str| -> Vec<f64> {
        let mut v: Vec<&Outcome> = outcomes.iter().filter(|o| o.target == target).collect();
        v.sort_by_key(|o| o.round);
        v.iter()
            .map(|o| o.server_cpu_us_per_open.unwrap_or(f64::NAN))
            .collect()
    };
    let mut rows = Vec::new();
    for kind in KEYS {
        let (cert, key) = super::common::certificate_of_kind(&dir, kind)?;
        let offers = vec![vec![CLASSICAL.to_owned()], vec![HYBRID.to_owned()]];
        let outcomes = measure(&base(cert.clone(), key.clone(), offers, false), |l| {
            eprintln!("TLS {kind}: {l}")
        })
        .map_err(|e| e.to_string())?;
        check(&outcomes)?;
        for group in [CLASSICAL, HYBRID] {
            let bytes =
                super::connections::tls_bytes(&cert, &key, &ca, &[group.to_owned()], false)?;
            let peer = cpu(&outcomes, &format!("kamailio {group}"));
            rows.push(Row {
                section: "TLS handshake".into(),
                layer: handshake_name(kind, group, false),
                unit: "µs CPU".into(),
                sipsec: cpu(&outcomes, &format!("sipsec {group}")),
                peer_name: (!peer.is_empty()).then(|| "kamailio".into()),
                peer,
                bytes: Some((bytes.0 + bytes.1) as f64),
                over: (group == HYBRID).then(|| handshake_name(kind, CLASSICAL, false)),
                ..Row::default()
            });
        }
    }
    // Resumed: the default server key, classical, so Kamailio can join.
    let (cert, key) = super::common::certificate_of_kind(&dir, "rsa-crt")?;
    let offer = vec![vec![CLASSICAL.to_owned()]];
    let outcomes = measure(&base(cert.clone(), key.clone(), offer, true), |l| {
        eprintln!("TLS resumed: {l}")
    })
    .map_err(|e| e.to_string())?;
    check(&outcomes)?;
    for o in &outcomes {
        eprintln!(
            "TLS resumed: {} round {}: {} of {} handshakes resumed",
            o.target, o.round, o.resumed, o.registered
        );
    }
    let bytes = super::connections::tls_bytes(&cert, &key, &ca, &[CLASSICAL.to_owned()], true)?;
    let peer = cpu(&outcomes, "kamailio");
    rows.push(Row {
        section: "TLS handshake".into(),
        layer: handshake_name("rsa-crt", CLASSICAL, true),
        unit: "µs CPU".into(),
        sipsec: cpu(&outcomes, "sipsec"),
        peer_name: (!peer.is_empty()).then(|| "kamailio".into()),
        peer,
        bytes: Some((bytes.0 + bytes.1) as f64),
        over: Some(handshake_name("rsa-crt", CLASSICAL, false)),
        ..Row::default()
    });
    Ok(rows)
}

/// A standard RSA key (no CRT factors) is one OpenSSL reads but cannot
/// sign with, so Kamailio cannot present it.
fn openssl_cannot_sign(key: &Path) -> bool {
    key.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("rsa-standard"))
}

/// A run in which sipsec failed connections measures something else:
/// refused (the peer's failures are reported with its figures).
fn check(outcomes: &[sipsec_bench::connections::Outcome]) -> Result<(), String> {
    match outcomes
        .iter()
        .find(|o| o.failed() > 0 && o.target.starts_with("sipsec"))
    {
        Some(o) => Err(format!(
            "{}: {} connections failed ({:?}, {:?})",
            o.target,
            o.failed(),
            o.open_failures,
            o.refresh_failures
        )),
        None => Ok(()),
    }
}

fn handshake_name(kind: &str, group: &str, resumed: bool) -> String {
    let key = match kind {
        "rsa-standard" => "RSA-2048 standard",
        "rsa-crt" => "RSA-2048 CRT",
        "rsa-multiprime" => "RSA-2048 multi-prime",
        _ => "ECDSA P-256",
    };
    let how = if resumed { "resumed" } else { "full" };
    format!("TCP + {how} TLS 1.3 handshake + REGISTER, {key}, {group}")
}

/// Protect and unprotect of a 172-byte RTP packet (20 ms of G.711) in
/// each SRTP profile, ours beside libsrtp.
fn srtp(sizes: &Sizes, workdir: &Path) -> Result<Vec<Row>, String> {
    let rows = sipsec_bench::srtp::experiment(
        &::srtp::Profile::ALL,
        sizes.packets,
        sizes.rounds.max(2),
        &workdir.join("srtp"),
        |r| eprintln!("SRTP {}: ours and libsrtp measured", r.profile),
    )
    .map_err(|e| e.to_string())?;
    let both = |t: &sipsec_bench::srtp::Timing| -> Vec<f64> {
        t.protect_ns
            .iter()
            .zip(&t.unprotect_ns)
            .map(|(p, u)| p + u)
            .collect()
    };
    Ok(rows
        .iter()
        .map(|r| {
            let tag = ::srtp::Profile::parse(&r.profile).map_or(0, |p| p.tag_len());
            let bytes = (172 + tag) as f64;
            Row {
                section: "SRTP".into(),
                layer: format!("protect + unprotect, {}", r.profile),
                unit: "ns".into(),
                sipsec: both(&r.sipsec),
                peer_name: Some("libsrtp".into()),
                peer: both(&r.libsrtp),
                bytes: Some(bytes),
                peer_bytes: Some(bytes),
                ..Row::default()
            }
        })
        .collect())
}

/// A call's INVITE → 180 through two proxies, plain and with each
/// PrivaSIP scheme hiding the caller (level 1), then PrivaSIP-3 and
/// HPKE hiding the callee too (level 2), each INVITE opened anew
/// (stateless: no pseudonym cache to hide a scheme's cost).
fn privacy(sizes: &Sizes, workdir: &Path) -> Result<Vec<Row>, String> {
    use sipsec_bench::privacy_route::{measure, Plan, Scheme, Setup};
    let schemes = [
        Scheme::Plain,
        Scheme::Aes,
        Scheme::Tickets,
        Scheme::Hpke,
        Scheme::Ecies,
        Scheme::Rsa(rsa_variants::Variant::Crt),
    ];
    let mut setups: Vec<Setup> = schemes
        .iter()
        .map(|&scheme| Setup {
            scheme,
            level: u8::from(scheme != Scheme::Plain),
            stateful: false,
        })
        .collect();
    // Level 2: the callee's ID hidden too.
    for scheme in [Scheme::Tickets, Scheme::Hpke] {
        setups.push(Setup {
            scheme,
            level: 2,
            stateful: false,
        });
    }
    let plan = Plan {
        exe: std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?,
        workdir: workdir.join("privacy"),
        setups: setups.clone(),
        in_flight: vec![20],
        calls: u64::from(sizes.privacy_calls),
        warmup: u64::from(sizes.privacy_calls / 10).max(5),
        bits: 2048,
        users: 100,
        workers: 1,
        threads: 1,
        weights: sipsec_bench::stats::DEFAULT_WEIGHTS,
        rounds: sizes.rounds,
    };
    let measured = measure(&plan, |r| {
        eprintln!(
            "privacy: round {} {}: {:.0} calls/s",
            r.round, r.config, r.calls_per_s
        )
    })
    .map_err(|e| e.to_string())?;
    if let Some(r) = measured
        .iter()
        .find(|r| r.failures.values().sum::<u64>() > 0)
    {
        return Err(format!(
            "privacy: {}: calls failed {:?}",
            r.config, r.failures
        ));
    }
    let plain = setups[0].name(2048);
    Ok(setups
        .iter()
        .map(|s| {
            let name = s.name(2048);
            let mut of: Vec<_> = measured.iter().filter(|r| r.config == name).collect();
            of.sort_by_key(|r| r.round);
            let med = |f: fn(&sipsec_bench::privacy_route::Row) -> f64| {
                sipsec_bench::security::median(&of.iter().map(|r| f(r)).collect::<Vec<_>>())
            };
            Row {
                section: "PrivaSIP".into(),
                layer: format!("INVITE → 180 via two proxies, {name}"),
                unit: "µs CPU".into(),
                sipsec: of
                    .iter()
                    .map(|r| r.proxy_cpu_us_per_call.unwrap_or(f64::NAN))
                    .collect(),
                bytes: Some(med(|r| r.wire_bytes_per_call.unwrap_or(f64::NAN)))
                    .filter(|b| b.is_finite()),
                latency_ms: Some((med(|r| r.p50_ms), med(|r| r.p99_ms))),
                over: (name != plain).then(|| format!("INVITE → 180 via two proxies, {plain}")),
                ..Row::default()
            }
        })
        .collect())
}

/// An INVITE forwarded by a stateless proxy, then signed, then verified
/// (STIR/SHAKEN, the certificate cached), sipsec beside Kamailio with
/// secsipid.
fn identity(sizes: &Sizes, no_kamailio: bool) -> Result<Vec<Row>, String> {
    let args =
        super::stir::StirArgs::new(sizes.privacy_calls, 20, sizes.rounds as u32, no_kamailio);
    let (runs, identity_bytes) = super::stir::rounds(&args)?;
    let names = [
        "INVITE forwarded (stateless)",
        "INVITE signed",
        "INVITE verified",
    ];
    Ok(names
        .iter()
        .enumerate()
        .map(|(i, name)| Row {
            section: "STIR/SHAKEN".into(),
            layer: if i == 0 {
                (*name).to_owned()
            } else {
                format!("{name} (Identity header {identity_bytes} B)")
            },
            unit: "µs CPU".into(),
            sipsec: runs[i].clone(),
            peer_name: (!no_kamailio).then(|| "kamailio".into()),
            peer: runs.get(3 + i).cloned().unwrap_or_default(),
            over: (i > 0).then(|| names[0].to_owned()),
            ..Row::default()
        })
        .collect())
}
