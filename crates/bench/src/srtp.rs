//! `sipsec bench srtp`, part one: the cost of SRTP per packet, ours
//! against libsrtp 2.7 on OpenSSL in the same run, and the per-step
//! breakdown of ours (the published softphone measured its SRTP per
//! internal step).
//!
//! Both sides run the same loop on a 172-byte packet (12-byte RTP header,
//! 160 bytes of G.711): copy a template, set the sequence number,
//! protect; unprotect copies of packets protected up front. libsrtp runs
//! in a C program (`interop/srtp/libsrtp_peer.c`, built here by
//! `interop/srtp/build-peer.sh`) so no language boundary sits inside its
//! loop.

use crate::error::Error;
use crate::stats::median;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ::srtp::{Context, Profile, Step, StepTimes};
use serde::Serialize;

use crate::plot;

const PEER_SOURCE: &str = include_str!("../../../interop/srtp/libsrtp_peer.c");
const PEER_BUILD: &str = include_str!("../../../interop/srtp/build-peer.sh");

/// The packet both sides protect.
fn template() -> [u8; 172] {
    let mut p = [0xd5u8; 172];
    p[..12].copy_from_slice(&[0x80, 0x00, 0, 0, 0, 0, 0, 160, 0xca, 0xfe, 0xba, 0xbe]);
    p
}

/// The key both sides use: 0x07 bytes of key, 0x09 bytes of salt.
fn keys(profile: Profile) -> (Vec<u8>, Vec<u8>) {
    (vec![7; profile.key_len()], vec![9; profile.salt_len()])
}

/// ns per packet, one value per round.
#[derive(Debug, Clone, Serialize)]
pub struct Timing {
    /// Protect, per round.
    pub protect_ns: Vec<f64>,
    /// Unprotect, per round.
    pub unprotect_ns: Vec<f64>,
}

impl Timing {
    /// Median protect ns.
    pub fn protect(&self) -> f64 {
        median(&self.protect_ns)
    }
    /// Median unprotect ns.
    pub fn unprotect(&self) -> f64 {
        median(&self.unprotect_ns)
    }
}

/// Protected copies of `packets` packets, for the unprotect loops.
fn protected_batch(profile: Profile, packets: usize) -> Result<Vec<Vec<u8>>, Error> {
    let (k, s) = keys(profile);
    let mut tx = Context::new(profile, &k, &s).map_err(Error::crypto)?;
    let t = template();
    (0..packets)
        .map(|i| {
            let mut p = t.to_vec();
            p[2..4].copy_from_slice(&(i as u16).to_be_bytes());
            tx.protect(&mut p).map_err(Error::crypto)?;
            Ok(p)
        })
        .collect()
}

/// Our ns per packet over `rounds` rounds of `packets` packets.
pub fn ours(profile: Profile, packets: usize, rounds: usize) -> Result<Timing, Error> {
    let (k, s) = keys(profile);
    let t = template();
    let batch = protected_batch(profile, packets)?;
    let mut timing = Timing {
        protect_ns: Vec::new(),
        unprotect_ns: Vec::new(),
    };
    let mut buf = [0u8; 256];
    for _ in 0..rounds {
        let mut tx = Context::new(profile, &k, &s).map_err(Error::crypto)?;
        let start = Instant::now();
        for i in 0..packets {
            buf[..172].copy_from_slice(&t);
            buf[2..4].copy_from_slice(&(i as u16).to_be_bytes());
            tx.protect_in_place(&mut buf, 172)
                .map_err(|e| Error::Crypto(format!("protect: {e}")))?;
        }
        timing
            .protect_ns
            .push(start.elapsed().as_nanos() as f64 / packets as f64);
        let mut rx = Context::new(profile, &k, &s).map_err(Error::crypto)?;
        let start = Instant::now();
        for p in &batch {
            buf[..p.len()].copy_from_slice(p);
            rx.unprotect_in_place(&mut buf[..p.len()])
                .map_err(|e| Error::Crypto(format!("unprotect: {e}")))?;
        }
        timing
            .unprotect_ns
            .push(start.elapsed().as_nanos() as f64 / packets as f64);
    }
    Ok(timing)
}

/// Mean ns per packet of each step, protect and unprotect, from one
/// round of `packets` packets with the timing hook on.
#[derive(Debug, Clone, Serialize)]
pub struct Steps {
    /// (step, mean ns per packet) while protecting.
    pub protect: Vec<(String, f64)>,
    /// (step, mean ns per packet) while unprotecting.
    pub unprotect: Vec<(String, f64)>,
    /// One key derivation (SRTP session keys), ns.
    pub key_derivation_ns: f64,
}

/// The per-step breakdown for `profile`.
pub fn steps(profile: Profile, packets: usize) -> Result<Steps, Error> {
    let (k, s) = keys(profile);
    let t = template();
    let batch = protected_batch(profile, packets)?;
    let mut tx = Context::new(profile, &k, &s)
        .map_err(Error::crypto)?
        .with_hook(StepTimes::default());
    let mut rx = Context::new(profile, &k, &s)
        .map_err(Error::crypto)?
        .with_hook(StepTimes::default());
    let mut buf = [0u8; 256];
    for i in 0..packets {
        buf[..172].copy_from_slice(&t);
        buf[2..4].copy_from_slice(&(i as u16).to_be_bytes());
        tx.protect_in_place(&mut buf, 172)
            .map_err(|e| Error::Crypto(format!("protect: {e}")))?;
    }
    for p in &batch {
        buf[..p.len()].copy_from_slice(p);
        rx.unprotect_in_place(&mut buf[..p.len()])
            .map_err(|e| Error::Crypto(format!("unprotect: {e}")))?;
    }
    let per_packet = |h: &StepTimes| -> Vec<(String, f64)> {
        Step::ALL
            .into_iter()
            .filter(|s| *s != Step::KeyDerivation)
            .map(|s| (s.name().to_string(), h.nanos(s) as f64 / packets as f64))
            .collect()
    };
    Ok(Steps {
        protect: per_packet(tx.hook()),
        unprotect: per_packet(rx.hook()),
        key_derivation_ns: tx.hook().mean(Step::KeyDerivation),
    })
}

/// libsrtp's C peer, built in a directory of its own.
pub struct Libsrtp {
    bin: PathBuf,
    lib: String,
}

impl Libsrtp {
    /// Builds the peer in `dir` (needs a C compiler, libsrtp2-dev and the
    /// pylibsrtp wheel: `./setup.sh` installs them).
    pub fn build(dir: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(dir).map_err(Error::io(dir.display()))?;
        let src = dir.join("libsrtp_peer.c");
        let script = dir.join("build-peer.sh");
        std::fs::write(&src, PEER_SOURCE).map_err(Error::io(src.display()))?;
        std::fs::write(&script, PEER_BUILD).map_err(Error::io(script.display()))?;
        let bin = dir.join("libsrtp_peer");
        let out = Command::new("bash")
            .arg(&script)
            .arg(&bin)
            .output()
            .map_err(Error::io("running bash"))?;
        if !out.status.success() {
            return Err(Error::Build {
                what: "the libsrtp peer (./setup.sh installs libsrtp2-dev and pylibsrtp)".into(),
                detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        let lib = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok(Self { bin, lib })
    }

    /// libsrtp's ns per packet, same loop, same packet.
    pub fn timing(&self, profile: Profile, packets: usize, rounds: usize) -> Result<Timing, Error> {
        let out = Command::new(&self.bin)
            .args([
                self.lib.as_str(),
                "bench",
                profile.name(),
                &packets.to_string(),
                &rounds.to_string(),
            ])
            .output()
            .map_err(Error::io("running the libsrtp peer"))?;
        if !out.status.success() {
            return Err(Error::peer(
                "libsrtp peer",
                String::from_utf8_lossy(&out.stderr).trim(),
            ));
        }
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).map_err(|e| Error::peer("libsrtp peer", e))?;
        let list = |k: &str| -> Vec<f64> {
            v[k].as_array()
                .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
                .unwrap_or_default()
        };
        Ok(Timing {
            protect_ns: list("protect_ns"),
            unprotect_ns: list("unprotect_ns"),
        })
    }
}

/// One profile's results.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The profile's SDES name.
    pub profile: String,
    /// Ours.
    pub sipsec: Timing,
    /// libsrtp 2.7 on OpenSSL.
    pub libsrtp: Timing,
    /// Our per-step breakdown.
    pub steps: Steps,
}

/// Runs every profile: ours and libsrtp interleaved per profile, so both
/// see the same machine state.
pub fn experiment(
    profiles: &[Profile],
    packets: usize,
    rounds: usize,
    workdir: &Path,
    mut progress: impl FnMut(&Row),
) -> Result<Vec<Row>, Error> {
    let peer = Libsrtp::build(workdir)?;
    let mut rows = Vec::new();
    for &p in profiles {
        let libsrtp = peer.timing(p, packets, rounds)?;
        let sipsec = ours(p, packets, rounds)?;
        let steps = steps(p, packets)?;
        let row = Row {
            profile: p.name().to_string(),
            sipsec,
            libsrtp,
            steps,
        };
        progress(&row);
        rows.push(row);
    }
    Ok(rows)
}

/// The markdown tables: ns per packet against libsrtp, and per step.
pub fn markdown(rows: &[Row]) -> String {
    let mut o = String::from(
        "\nns per 172-byte packet (median of rounds): sipsec vs libsrtp 2.7 on OpenSSL\n\n\
         | profile | protect sipsec | protect libsrtp | ratio | unprotect sipsec | unprotect libsrtp | ratio |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let (ps, pl) = (r.sipsec.protect(), r.libsrtp.protect());
        let (us, ul) = (r.sipsec.unprotect(), r.libsrtp.unprotect());
        let _ = writeln!(
            o,
            "| {} | {ps:.0} | {pl:.0} | {:.2} | {us:.0} | {ul:.0} | {:.2} |",
            r.profile,
            ps / pl,
            us / ul
        );
    }
    o.push_str("\nratio = sipsec / libsrtp (below 1: sipsec is faster)\n");
    let names: Vec<String> = rows
        .first()
        .map(|r| r.steps.protect.iter().map(|(n, _)| n.clone()).collect())
        .unwrap_or_default();
    for (side, pick) in [
        (
            "protect",
            (|s: &Steps| &s.protect) as fn(&Steps) -> &Vec<(String, f64)>,
        ),
        ("unprotect", |s: &Steps| &s.unprotect),
    ] {
        let _ = write!(
            o,
            "\nsipsec {side}, mean ns per packet per step (timing hook on)\n\n| profile |"
        );
        for n in &names {
            let _ = write!(o, " {n} |");
        }
        o.push_str(" sum |\n|---|");
        for _ in &names {
            o.push_str("---|");
        }
        o.push_str("---|\n");
        for r in rows {
            let _ = write!(o, "| {} |", r.profile);
            let steps = pick(&r.steps);
            for (_, ns) in steps {
                let _ = write!(o, " {ns:.0} |");
            }
            let sum: f64 = steps.iter().map(|(_, ns)| ns).sum();
            let _ = writeln!(o, " {sum:.0} |");
        }
    }
    o.push_str("\nkey derivation (SRTP session keys, once per context), ns\n\n| profile | ns |\n|---|---|\n");
    for r in rows {
        let _ = writeln!(o, "| {} | {:.0} |", r.profile, r.steps.key_derivation_ns);
    }
    o
}

/// The HTML page: the tables and bar charts, and the calls' section
/// when there is one.
pub fn html(rows: &[Row], calls: Option<(String, String)>) -> String {
    let labels: Vec<String> = rows.iter().map(|r| r.profile.clone()).collect();
    let per_packet = plot::bars(
        "ns per packet: sipsec vs libsrtp (OpenSSL)",
        "SRTP protection profile",
        "ns per 172-byte packet",
        &labels,
        &[
            (
                "sipsec protect",
                rows.iter().map(|r| r.sipsec.protect()).collect(),
            ),
            (
                "libsrtp protect",
                rows.iter().map(|r| r.libsrtp.protect()).collect(),
            ),
            (
                "sipsec unprotect",
                rows.iter().map(|r| r.sipsec.unprotect()).collect(),
            ),
            (
                "libsrtp unprotect",
                rows.iter().map(|r| r.libsrtp.unprotect()).collect(),
            ),
        ],
    );
    let names: Vec<String> = rows
        .first()
        .map(|r| r.steps.protect.iter().map(|(n, _)| n.clone()).collect())
        .unwrap_or_default();
    let step_chart = |side: &str, pick: fn(&Steps) -> &Vec<(String, f64)>| {
        let series: Vec<(&str, Vec<f64>)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                (
                    n.as_str(),
                    rows.iter().map(|r| pick(&r.steps)[i].1).collect(),
                )
            })
            .collect();
        plot::bars(
            &format!("sipsec {side}: ns per packet per step"),
            "SRTP protection profile",
            "ns per packet",
            &labels,
            &series,
        )
    };
    let head = [
        "profile",
        "protect sipsec",
        "protect libsrtp",
        "ratio",
        "unprotect sipsec",
        "unprotect libsrtp",
        "ratio",
    ];
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let (ps, pl, us, ul) = (
                r.sipsec.protect(),
                r.libsrtp.protect(),
                r.sipsec.unprotect(),
                r.libsrtp.unprotect(),
            );
            vec![
                r.profile.clone(),
                format!("{ps:.0}"),
                format!("{pl:.0}"),
                format!("{:.2}", ps / pl),
                format!("{us:.0}"),
                format!("{ul:.0}"),
                format!("{:.2}", us / ul),
            ]
        })
        .collect();
    let mut sections = vec![
        (
            "ns per packet against libsrtp".to_string(),
            format!("{}{per_packet}", plot::table(&head, &table_rows)),
        ),
        (
            "per-step timings".to_string(),
            format!(
                "{}{}",
                step_chart("protect", |s| &s.protect),
                step_chart("unprotect", |s| &s.unprotect)
            ),
        ),
    ];
    sections.extend(calls);
    plot::page("sipsec bench srtp", &sections)
}

/// One direction of one measured call.
#[derive(Debug, Clone, Serialize)]
pub struct CallRow {
    /// "RTP" or the SRTP profile.
    pub config: String,
    /// "caller → callee" or back.
    pub direction: String,
    /// What the receiving side measured.
    pub stats: media::stats::Summary,
    /// Packets refused by SRTP at the receiver.
    pub rejected: u64,
    /// Throughput counting Ethernet framing too (14 bytes a packet), bit/s:
    /// the published figures' unit.
    pub ethernet_bps: f64,
}

fn ethernet_bps(s: &media::stats::Summary) -> f64 {
    if s.duration_s > 0.0 {
        s.ip_bps + s.packets.saturating_sub(1) as f64 * 14.0 * 8.0 / s.duration_s
    } else {
        0.0
    }
}

/// Calls through a `sipsec serve` proxy (digest auth, stateful) between
/// two in-process phones, `packets` packets each way, once without SRTP
/// and once per profile. `progress` hears each direction's row; `tick`
/// hears every 5 s of a call under way (its configuration, the time so
/// far and the call's length).
pub fn calls(
    exe: &Path,
    profiles: &[Profile],
    packets: u64,
    workdir: &Path,
    mut progress: impl FnMut(&CallRow),
    tick: &(dyn Fn(&str, Duration, Duration) + Sync),
) -> Result<Vec<CallRow>, Error> {
    use ua::phone::{Config, Phone};
    use ua::session::Source;
    std::fs::create_dir_all(workdir).map_err(Error::io(workdir.display()))?;
    let csv = workdir.join("users.csv");
    let users = workdir.join("users.tsv");
    std::fs::write(&csv, "username,password\nalice,pw-alice\nbob,pw-bob\n")
        .map_err(Error::io(csv.display()))?;
    let out = Command::new(exe)
        .args(["users", "import"])
        .arg(&csv)
        .arg("--file")
        .arg(&users)
        .output()
        .map_err(Error::io(exe.display()))?;
    if !out.status.success() {
        return Err(Error::peer(
            "sipsec users import",
            String::from_utf8_lossy(&out.stderr).trim(),
        ));
    }
    let port = crate::compare::free_port().map_err(Error::io("finding a free port"))?;
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let mut child = Command::new(exe)
        .args([
            "serve",
            "--mode",
            "proxy",
            "--stateful",
            "--auth",
            "--no-http",
        ])
        .args(["--udp", &addr.to_string()])
        .arg("--users")
        .arg(&users)
        .arg("--data-dir")
        .arg(workdir.join("data"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(Error::io(exe.display()))?;
    crate::compare::wait_ready(addr, &mut child)?;
    let server = crate::compare::Server {
        child,
        addr,
        pids: Vec::new(),
    };
    let config = |user: &str, srtp: Vec<Profile>| Config {
        user: user.into(),
        password: Some(format!("pw-{user}")),
        domain: "127.0.0.1".into(),
        server: Some(server.addr),
        callers: ua::phone::Callers::default(),
        bind: ([127, 0, 0, 1], 0).into(),
        public_ip: None,
        rtp_port: 0,
        srtp,
        insecure_sdes: true,
        law: media::g711::Law::Pcmu,
        expires: 600,
        ring_timeout: 30,
        tls: None,
        privacy: None,
    };
    let mut rows = Vec::new();
    let configs: Vec<Option<Profile>> = std::iter::once(None)
        .chain(profiles.iter().copied().map(Some))
        .collect();
    for p in configs {
        let suites: Vec<Profile> = p.into_iter().collect();
        let name = p.map_or("RTP".to_string(), |p| p.name().to_string());
        let mut bob =
            Phone::new(config("bob", suites.clone())).map_err(|e| Error::peer("bob", e))?;
        bob.register(600).map_err(|e| Error::peer("bob", e))?;
        let callee = std::thread::spawn(move || {
            let r = bob.answer(Duration::from_secs(30), Source::Tone(1_000.0), packets);
            let _ = bob.register(0);
            r
        });
        let mut alice = Phone::new(config("alice", suites)).map_err(|e| Error::peer("alice", e))?;
        let target = format!("sip:bob@{}", server.addr);
        let length = Duration::from_millis(packets * 20);
        let caller = crate::ticking(
            Duration::from_secs(5),
            |t| tick(&name, t, length),
            || alice.call(&target, Source::Tone(440.0), packets),
        )
        .map_err(|e| Error::peer(format!("{name}: alice"), e))?;
        let answered = callee
            .join()
            .map_err(|_| Error::peer(format!("{name}: bob"), "the thread failed"))?
            .map_err(|e| Error::peer(format!("{name}: bob"), e))?;
        for (direction, report) in [("caller → callee", &answered), ("callee → caller", &caller)]
        {
            let row = CallRow {
                config: name.clone(),
                direction: direction.into(),
                stats: report.media.received.clone(),
                rejected: report.media.rejected,
                ethernet_bps: ethernet_bps(&report.media.received),
            };
            progress(&row);
            rows.push(row);
        }
    }
    drop(server);
    Ok(rows)
}

/// The call-quality table beside the published figures.
pub fn calls_markdown(rows: &[CallRow], packets: u64) -> String {
    let mut o = format!(
        "\ncalls through sipsec serve, {packets} packets each way (20 ms G.711)\n\n\
         | config | direction | delta max ms | delta mean ms | jitter max ms | jitter mean ms | kbit/s IP | kbit/s Ethernet | kbit/s payload | loss % | MOS |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for r in rows {
        let s = &r.stats;
        let _ = writeln!(
            o,
            "| {} | {} | {:.2} | {:.2} | {:.3} | {:.3} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            r.config,
            r.direction,
            s.delta_max_ms,
            s.delta_mean_ms,
            s.jitter_max_ms,
            s.jitter_mean_ms,
            s.ip_bps / 1000.0,
            r.ethernet_bps / 1000.0,
            s.payload_bps / 1000.0,
            s.loss_percent,
            s.mos_text()
        );
    }
    o.push_str(
        "\nPublished SRTP softphone study: 81.6 kbit/s without SRTP, 83.23 kbit/s with a 32-bit tag (214-byte frames become 218)\n",
    );
    o
}

/// The calls' HTML section: the table and bar charts of delta, jitter
/// and throughput per configuration.
pub fn calls_html(rows: &[CallRow], packets: u64) -> (String, String) {
    let labels: Vec<String> = rows
        .iter()
        .filter(|r| r.direction.starts_with("caller"))
        .map(|r| r.config.clone())
        .collect();
    let pick = |f: fn(&CallRow) -> f64| -> Vec<(&str, Vec<f64>)> {
        ["caller → callee", "callee → caller"]
            .into_iter()
            .map(|d| (d, rows.iter().filter(|r| r.direction == d).map(f).collect()))
            .collect()
    };
    let head = [
        "config",
        "direction",
        "delta max ms",
        "delta mean ms",
        "jitter max ms",
        "jitter mean ms",
        "kbit/s IP",
        "kbit/s Ethernet",
        "loss %",
        "MOS",
    ];
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let s = &r.stats;
            vec![
                r.config.clone(),
                r.direction.clone(),
                format!("{:.2}", s.delta_max_ms),
                format!("{:.2}", s.delta_mean_ms),
                format!("{:.3}", s.jitter_max_ms),
                format!("{:.3}", s.jitter_mean_ms),
                format!("{:.2}", s.ip_bps / 1000.0),
                format!("{:.2}", r.ethernet_bps / 1000.0),
                format!("{:.2}", s.loss_percent),
                s.mos_text(),
            ]
        })
        .collect();
    let body = format!(
        "{}{}{}{}",
        plot::table(&head, &table_rows),
        plot::bars(
            "maximum delta",
            "configuration",
            "ms",
            &labels,
            &pick(|r| r.stats.delta_max_ms)
        ),
        plot::bars(
            "mean jitter",
            "configuration",
            "ms",
            &labels,
            &pick(|r| r.stats.jitter_mean_ms)
        ),
        plot::bars(
            "throughput, Ethernet level",
            "configuration",
            "kbit/s",
            &labels,
            &pick(|r| r.ethernet_bps / 1000.0)
        ),
    );
    (
        format!("calls through sipsec serve, {packets} packets each way"),
        body,
    )
}
