//! `sipsec bench connections`: phones held on TCP/TLS connections.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use sipsec_bench::connections::{self, Plan, Stream};

use super::common::{make_certificate, positive, targets, TableOutputs};

#[derive(Clone, Copy, ValueEnum)]
pub(super) enum StreamArg {
    Tcp,
    Tls,
    /// SIP over WebSocket (RFC 7118).
    Ws,
    /// SIP over secure WebSocket.
    Wss,
}

#[derive(Args)]
pub struct ConnectionsArgs {
    /// Servers, comma-separated: sipsec, kamailio, null (`bench null`: a
    /// 200 to every request, the floor of the transport's cost),
    /// sipsec@PATH (another sipsec build, for an A/B in the same rounds), started
    /// here one after the other on the same certificate. Ratios are the
    /// first's over each other's.
    #[arg(
        long,
        alias = "server",
        default_value = "sipsec",
        value_delimiter = ','
    )]
    pub(super) servers: Vec<String>,
    /// Transport of the phones: tcp, tls, ws or wss (browser-style phones:
    /// an HTTP upgrade, then SIP in WebSocket frames, RFC 7118; Kamailio
    /// with kamailio-websocket-modules).
    #[arg(long, value_enum, default_value = "tls")]
    pub(super) transport: StreamArg,
    /// Connections to open, one registered phone on each.
    #[arg(long, default_value_t = 10_000)]
    pub(super) connections: usize,
    /// Loopback source addresses (127.0.1.1 …) [default: one per 20,000 connections].
    #[arg(long)]
    pub(super) sources: Option<usize>,
    /// Connections being opened (connect, handshake, REGISTER) at once.
    #[arg(long, default_value_t = 256)]
    pub(super) in_flight: usize,
    /// Refreshes per second in the refresh phase (every phone once).
    #[arg(long, default_value_t = 2000.0)]
    pub(super) refresh_rate: f64,
    /// Refreshes of every phone before the measured one, at the same
    /// rate: phones that keep refreshing, as in service, meet a server
    /// whose tables have stopped growing and whose caches they warmed.
    #[arg(long, default_value_t = 0)]
    pub(super) warm_refreshes: usize,
    /// Seconds to hold every connection idle before measuring memory.
    #[arg(long, default_value_t = 3.0)]
    pub(super) hold: f64,
    /// A phase with no progress for this many seconds fails what is left.
    #[arg(long, default_value_t = 32.0)]
    pub(super) timeout: f64,
    /// Generator event-loop threads [default: 2; 1 with --pin].
    #[arg(long)]
    pub(super) threads: Option<usize>,
    /// Server certificate chain (PEM) [default: an RSA-2048 certificate made here].
    #[arg(long, requires_all = ["key", "tls_ca"])]
    pub(super) cert: Option<PathBuf>,
    /// Its private key.
    #[arg(long, requires = "cert")]
    pub(super) key: Option<PathBuf>,
    /// The CA certificates (PEM) the phones trust for the certificate.
    #[arg(long, alias = "ca", requires = "cert")]
    pub(super) tls_ca: Option<PathBuf>,
    /// Server on CPU 0 (taskset), phones on CPU 1, busy-polling there so
    /// that the server is not charged for waking them (as bench compare
    /// --pin).
    #[arg(long)]
    pub(super) pin: bool,
    /// Server workers and connection reactors / Kamailio children (one with
    /// TLS or WSS: Debian's Kamailio 5.6 crashes with more under OpenSSL 3).
    #[arg(long, default_value_t = 1)]
    pub(super) workers: usize,
    /// sipsec nodes sharing one Redis location (a redis-server started
    /// here), the phones spread over them: a process holds at most its
    /// descriptor limit of connections, N nodes N times as many.
    #[arg(long, default_value_t = 1)]
    pub(super) nodes: usize,
    /// Processes the phones run in [default: as many as the descriptor
    /// limit needs].
    #[arg(long)]
    pub(super) phone_processes: Option<usize>,
    /// Kamailio configuration.
    #[arg(long, default_value = "interop/kamailio/kamailio.cfg")]
    pub(super) kamailio_cfg: PathBuf,
    /// The sipsec build measured as the server [default: this
    /// executable] (A/B of two builds with one generator).
    #[arg(long, value_name = "PATH")]
    pub(super) sipsec_exe: Option<PathBuf>,
    /// Measure every server this many times, in turn (the order reversed
    /// every other round); the table gives each figure's median and range
    /// and each ratio as the median of the rounds' ratios, so that one
    /// noisy moment on a shared machine does not make the comparison;
    /// from nine rounds on, with that median's 95 % confidence interval.
    #[arg(long, default_value_t = 1)]
    pub(super) rounds: usize,
    /// TLS key exchange the phones offer, each offer measured in turn
    /// against every server, comma-separated; one offer may list several
    /// groups joined by `+` (e.g. `X25519MLKEM768,x25519`: the hybrid
    /// post-quantum group, then classical X25519) [default: the default
    /// offer, X25519MLKEM768 first]. A post-quantum-only offer skips
    /// Kamailio (OpenSSL 3.0 has no ML-KEM).
    #[arg(long, value_delimiter = ',')]
    pub(super) groups: Vec<String>,
    /// Server keys to measure in turn, comma-separated: rsa-standard,
    /// rsa-crt, rsa-multiprime (2048 bits) and ecdsa-p256, each with its
    /// certificate under one CA made here; rows are named by the key
    /// [default: one RSA-2048 CRT key, or --cert].
    #[arg(long, value_delimiter = ',', conflicts_with = "cert")]
    pub(super) keys: Vec<String>,
    /// TLS phones resume sessions from the tickets the server sent to
    /// earlier connections (RFC 8446 §2.2), the process's phones sharing
    /// one session cache; the table counts the handshakes that resumed.
    #[arg(long)]
    pub(super) resume: bool,
    #[command(flatten)]
    pub(super) out: TableOutputs,
}

pub(super) fn connections(a: ConnectionsArgs) -> Result<ExitCode, String> {
    let targets = targets(&a.servers, &a.kamailio_cfg, a.sipsec_exe.as_deref())?;
    let threads = a.threads.unwrap_or(if a.pin {
        1
    } else {
        super::common::GENERATOR_THREADS
    });
    if a.connections == 0
        || a.in_flight == 0
        || threads == 0
        || a.sources == Some(0)
        || a.nodes == 0
        || a.phone_processes == Some(0)
        || a.rounds == 0
    {
        return Err(
            "--connections, --in-flight, --threads, --sources, --nodes, --phone-processes and --rounds must be positive"
                .into(),
        );
    }
    let hold_ok = a.hold.is_finite() && a.hold >= 0.0;
    if !(positive(a.refresh_rate) && positive(a.timeout) && hold_ok) {
        return Err("--refresh-rate and --timeout must be positive, --hold not negative".into());
    }
    let workdir = std::env::temp_dir().join(format!("sipsec-connections-{}", std::process::id()));
    let (cert, key, ca) = match (a.cert, a.key, a.tls_ca) {
        (Some(c), Some(k), Some(ca)) => (c, k, ca),
        _ => make_certificate(&workdir)?,
    };
    let plan = Plan {
        targets,
        transport: match a.transport {
            StreamArg::Tcp => Stream::Tcp,
            StreamArg::Tls => Stream::Tls,
            StreamArg::Ws => Stream::Ws,
            StreamArg::Wss => Stream::Wss,
        },
        connections: a.connections,
        sources: a.sources.unwrap_or(a.connections.div_ceil(20_000)),
        in_flight: a.in_flight,
        refresh_rate: a.refresh_rate,
        warm_refreshes: a.warm_refreshes,
        hold: std::time::Duration::from_secs_f64(a.hold),
        timeout: std::time::Duration::from_secs_f64(a.timeout),
        threads,
        cert,
        key,
        ca,
        pin: a.pin,
        workers: a.workers.max(1),
        workdir: workdir.clone(),
        nodes: a.nodes,
        phone_processes: a.phone_processes,
        phones_exe: std::env::current_exe()
            .map_err(|e| format!("cannot find this executable: {e}"))?,
        rounds: a.rounds,
        offers: offers(&a.groups)?,
        offer: Vec::new(),
        resume: a.resume,
    };
    if a.pin {
        sipsec_bench::pin_to_core(1).map_err(|e| format!("pinning the phones to CPU 1: {e}"))?;
    }
    let outcomes = if a.keys.is_empty() {
        connections::measure(&plan, |line| eprintln!("{line}")).map_err(|e| e.to_string())
    } else {
        by_key(&plan, &a.keys, &workdir)
    };
    let bytes = if plan.transport.secure() {
        if a.keys.is_empty() {
            handshake_bytes(&plan, "this certificate")
        } else {
            a.keys
                .iter()
                .map(|kind| {
                    let p = Plan {
                        cert: workdir.join(format!("{kind}.pem")),
                        key: workdir.join(format!("{kind}.key")),
                        ..plan.clone()
                    };
                    handshake_bytes(&p, kind)
                })
                .collect()
        }
    } else {
        String::new()
    };
    let _ = std::fs::remove_dir_all(&workdir);
    let outcomes = outcomes?;
    let table = connections::table(&outcomes) + &bytes;
    print!("{table}");
    a.out.write(&outcomes, &table, "connections", || {
        connections::html(&plan, &outcomes)
    })?;
    let failed: u64 = outcomes.iter().map(|o| o.failed()).sum();
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `plan` measured with each server key of `keys` in turn, each row
/// named by its key (the servers' order and rounds as the plan says).
fn by_key(
    plan: &Plan,
    keys: &[String],
    workdir: &std::path::Path,
) -> Result<Vec<connections::Outcome>, String> {
    let mut all = Vec::new();
    for kind in keys {
        let (cert, key) = super::common::certificate_of_kind(workdir, kind)?;
        let p = Plan {
            cert,
            key,
            ..plan.clone()
        };
        let measured = connections::measure(&p, |line| eprintln!("{kind}: {line}"))
            .map_err(|e| e.to_string())?;
        for mut o in measured {
            o.target = format!("{} {kind}", o.target);
            all.push(o);
        }
    }
    Ok(all)
}

/// Bytes of one full handshake with this certificate for each offer,
/// against sipsec's TLS configuration (run in memory), as lines after
/// the table.
fn handshake_bytes(plan: &Plan, what: &str) -> String {
    let offers = if plan.offers.is_empty() {
        vec![Vec::new()]
    } else {
        plan.offers.clone()
    };
    let mut out = format!(
        "\nTLS bytes per full handshake with sipsec (records both ways, in memory, {what}):\n"
    );
    for offer in offers {
        let label = if offer.is_empty() {
            "default offer".to_owned()
        } else {
            offer.join("+")
        };
        match tls_bytes(&plan.cert, &plan.key, &plan.ca, &offer, false) {
            Ok((up, down, group)) => out.push_str(&format!(
                "- {label}: {group}, client→server {up} B, server→client {down} B, {} B in all\n",
                up + down
            )),
            Err(e) => out.push_str(&format!("- {label}: not measured ({e})\n")),
        }
    }
    out
}

/// Bytes each way of a TLS handshake with sipsec's configuration for
/// `cert`/`key` (run in memory, session tickets included) offering
/// `offer` (empty: the default), and the group agreed; `resumed`: of a
/// second handshake that resumes the first's session.
pub(super) fn tls_bytes(
    cert: &std::path::Path,
    key: &std::path::Path,
    ca: &std::path::Path,
    offer: &[String],
    resumed: bool,
) -> Result<(usize, usize, String), String> {
    let settings = sipsec_server::config::TlsSettings::with_files(
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        cert.to_owned(),
        key.to_owned(),
    );
    let server = sipsec_server::io::tls::TlsContext::new(&settings)
        .map_err(|e| e.to_string())?
        .server;
    let groups = if offer.is_empty() {
        sip_tls::Groups::default()
    } else {
        sip_tls::Groups::parse(offer)?
    };
    let client =
        sipsec_bench::link::client_config_with(ca, false, &groups).map_err(|e| e.to_string())?;
    let client = if resumed {
        client
    } else {
        sipsec_bench::link::without_resumption(&client)
    };
    let once = || {
        sipsec_bench::link::handshake_bytes(client.clone(), server.clone(), "127.0.0.1")
            .map_err(|e| e.to_string())
    };
    let first = once()?;
    if resumed {
        once()
    } else {
        Ok(first)
    }
}

/// The `--groups` offers, each checked.
fn offers(groups: &[String]) -> Result<Vec<Vec<String>>, String> {
    groups
        .iter()
        .map(|offer| {
            let names: Vec<String> = offer.split('+').map(str::to_owned).collect();
            sip_tls::Groups::parse(&names).map_err(|e| format!("--groups: {e}"))?;
            Ok(names)
        })
        .collect()
}

/// `sipsec bench phones`: one process of a `bench connections` run.
pub(super) fn phones() -> Result<ExitCode, String> {
    connections::phones(std::io::stdin().lock(), std::io::stdout().lock())
        .map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}
