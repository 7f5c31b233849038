//! The PrivaSIP server experiment (the PrivaSIP papers, the published Tables 2–7):
//! response time INVITE → 180 Ringing through the caller's home proxy and
//! the callee's home proxy, two `sipsec serve` on loopback for `a.example`
//! and `b.example`, with the generator keeping N calls in flight — for
//! plain SIP and each scheme, level and mode (stateless or stateful).
//!
//! Each configuration gets freshly started proxies (so stateful caches
//! start empty), its own keys, and pseudonyms made before the run, one
//! set per call (the phone's cost is `bench privacy-prepare`'s; here the
//! servers are measured). The proxies' `/status` counters give the
//! decryptions and cache hits per call; their CPU is sampled.

use crate::error::Error;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use privacy::keys::{cipher_from_pem, public_pem};
use privacy::{Encoding, IdCipher};
use rsa_variants::{PrivateKey, Variant};
use serde::Serialize;

use crate::compare::{command, free_port, wait_ready, Server};
use crate::engine::{CallIds, Live, Run, Shape, User};
use crate::{cpu, plot, scenario, Options};

/// The caller's domain.
pub const HOME: &str = "a.example";
/// The callee's domain.
pub const INBOUND: &str = "b.example";

/// How user IDs are encrypted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// No PrivaSIP.
    Plain,
    /// RSA-OAEP with the proxy's key in this variant.
    Rsa(Variant),
    /// ECIES over P-256.
    Ecies,
    /// AES-128-GCM under a key from the caller's digest credentials.
    Aes,
    /// HPKE X25519.
    Hpke,
    /// PrivaSIP-3: tickets the home proxy hands out at registration
    /// (AES-256-GCM-SIV), the caller's ID only.
    Tickets,
}

impl Scheme {
    /// Parses a scheme list entry: rsa (all three variants), rsa-standard,
    /// rsa-crt, rsa-multiprime, ecies, aes, hpke.
    pub fn parse_list(s: &str) -> Result<Vec<Scheme>, Error> {
        Ok(match s {
            "rsa" => vec![
                Scheme::Rsa(Variant::Standard),
                Scheme::Rsa(Variant::Crt),
                Scheme::Rsa(Variant::MultiPrime { primes: 3 }),
            ],
            "rsa-standard" => vec![Scheme::Rsa(Variant::Standard)],
            "rsa-crt" => vec![Scheme::Rsa(Variant::Crt)],
            "rsa-multiprime" => vec![Scheme::Rsa(Variant::MultiPrime { primes: 3 })],
            "ecies" => vec![Scheme::Ecies],
            "aes" => vec![Scheme::Aes],
            "hpke" => vec![Scheme::Hpke],
            "tickets" => vec![Scheme::Tickets],
            other => {
                return Err(Error::Input(format!(
                    "unknown scheme {other:?}: rsa, rsa-standard, rsa-crt, rsa-multiprime, ecies, aes, hpke, tickets"
                )))
            }
        })
    }

    fn name(self, bits: u32) -> String {
        match self {
            Scheme::Plain => "plain".into(),
            Scheme::Rsa(v) => format!("RSA-{bits} {v}"),
            Scheme::Ecies => "ECIES P-256".into(),
            Scheme::Aes => "AES-128-GCM".into(),
            Scheme::Hpke => "HPKE X25519".into(),
            Scheme::Tickets => "tickets AES-256-GCM-SIV".into(),
        }
    }
}

/// One configuration of the proxies and the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    /// The scheme.
    pub scheme: Scheme,
    /// PrivaSIP level: 0 (plain), 1 or 2.
    pub level: u8,
    /// Cache pseudonym → ID at the proxies.
    pub stateful: bool,
}

impl Setup {
    /// Its name in tables, e.g. "PrivaSIP-2 HPKE X25519 stateful".
    pub fn name(&self, bits: u32) -> String {
        if self.level == 0 {
            return "plain SIP".into();
        }
        let tickets = self.scheme == Scheme::Tickets;
        format!(
            "PrivaSIP-{} {}{} {}",
            if tickets { 3 } else { self.level },
            self.scheme.name(bits),
            if tickets && self.level == 2 {
                ", callee too,"
            } else {
                ""
            },
            if self.stateful {
                "stateful"
            } else {
                "stateless"
            }
        )
    }
}

/// Plain SIP, then every scheme at every level (AES at level 1 only: the
/// caller shares no secret with the callee's proxy) in every mode.
pub fn setups(schemes: &[Scheme], levels: &[u8], stateful: &[bool]) -> Vec<Setup> {
    let mut out = vec![Setup {
        scheme: Scheme::Plain,
        level: 0,
        stateful: false,
    }];
    for &level in levels {
        for &s in schemes {
            // AES hides the caller only: level 1.
            if s == Scheme::Plain || (s == Scheme::Aes && level == 2) {
                continue;
            }
            for &st in stateful {
                out.push(Setup {
                    scheme: s,
                    level,
                    stateful: st,
                });
            }
        }
    }
    out
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The `sipsec` binary that runs the proxies.
    pub exe: PathBuf,
    /// Scratch directory: keys, users, configurations, data.
    pub workdir: PathBuf,
    /// The configurations.
    pub setups: Vec<Setup>,
    /// Calls kept in flight, one run each.
    pub in_flight: Vec<usize>,
    /// Calls per run.
    pub calls: u64,
    /// Untimed calls before the first run of each configuration.
    pub warmup: u64,
    /// RSA modulus bits.
    pub bits: u32,
    /// Callers at the home proxy (AES opens a pseudonym by trying each
    /// user's key, so its cost grows with this).
    pub users: usize,
    /// Worker threads per proxy.
    pub workers: usize,
    /// Generator threads.
    pub threads: usize,
    /// Latency coefficient weights.
    pub weights: [f64; 5],
    /// Every configuration measured this many times, in turn (the order
    /// reversed every other round); the sustained throughput is the
    /// median of the rounds', each ratio the median of the rounds' own.
    pub rounds: usize,
}

/// One configuration at one number of calls in flight.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// e.g. "PrivaSIP-2 RSA-2048 crt stateful".
    pub config: String,
    /// The round that measured it (from 1).
    #[serde(default)]
    pub round: usize,
    /// 0 (plain), 1 or 2.
    pub level: u8,
    /// Cached pseudonyms.
    pub stateful: bool,
    /// Calls kept in flight.
    pub in_flight: usize,
    /// Calls started.
    pub calls: u64,
    /// Calls that completed.
    pub ok: u64,
    /// Failed calls by cause.
    pub failures: std::collections::BTreeMap<String, u64>,
    /// Retransmitted requests.
    pub retransmissions: u64,
    /// INVITE → 180, ms: mean, standard deviation, 95 % CI half-width
    /// (1.96 · sd / √n), median, 99th percentile, largest.
    pub mean_ms: f64,
    /// Standard deviation, ms.
    pub sd_ms: f64,
    /// 95 % CI half-width, ms; none from fewer than two calls.
    pub ci95_ms: Option<f64>,
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
    /// Completed calls per second.
    pub calls_per_s: f64,
    /// Both proxies' CPU per completed call, µs.
    pub proxy_cpu_us_per_call: Option<f64>,
    /// Bytes the caller's and callee's sockets moved per completed call
    /// (the INVITE with its pseudonyms, the challenge, the answers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wire_bytes_per_call: Option<f64>,
    /// Decryptions per completed call (both proxies).
    pub decryptions_per_call: f64,
    /// Cache hits per completed call (both proxies).
    pub cache_hits_per_call: f64,
}

type Cipher = Arc<dyn IdCipher + Send + Sync>;

/// The keys of one configuration: the proxies' private key files and the
/// callers' ciphers.
struct Keys {
    /// A's `[privacy]` keys and aes lines.
    home_conf: String,
    /// B's.
    inbound_conf: String,
    /// Per caller, the cipher for the home proxy (none: plain).
    home: Vec<Option<Cipher>>,
    /// For the callee's proxy (PrivaSIP-2).
    inbound: Option<Cipher>,
    /// PrivaSIP-3: callers enroll with `home` and call with tickets.
    tickets: bool,
}

fn private_key(scheme: Scheme, bits: u32) -> Result<Vec<u8>, Error> {
    Ok(match scheme {
        Scheme::Rsa(v) => PrivateKey::generate(v, bits)
            .and_then(|k| k.to_pkcs8_pem())
            .map_err(Error::crypto)?,
        Scheme::Ecies => {
            let group = openssl::ec::EcGroup::from_curve_name(openssl::nid::Nid::X9_62_PRIME256V1)
                .map_err(Error::crypto)?;
            openssl::pkey::PKey::from_ec_key(
                openssl::ec::EcKey::generate(&group).map_err(Error::crypto)?,
            )
            .and_then(|k| k.private_key_to_pem_pkcs8())
            .map_err(Error::crypto)?
        }
        Scheme::Hpke | Scheme::Tickets => openssl::pkey::PKey::generate_x25519()
            .and_then(|k| k.private_key_to_pem_pkcs8())
            .map_err(Error::crypto)?,
        Scheme::Plain | Scheme::Aes => {
            return Err(Error::Input(format!("{scheme:?} has no key pair")))
        }
    })
}

/// A key pair for `domain`'s proxy: the `[privacy]` line and the cipher.
fn key_pair(
    dir: &Path,
    domain: &str,
    scheme: Scheme,
    bits: u32,
) -> Result<(String, Cipher), Error> {
    let pem = private_key(scheme, bits)?;
    let path = dir.join(format!("{domain}.key.pem"));
    write(&path, &pem)?;
    let public = public_pem(&pem).map_err(Error::crypto)?;
    let cipher: Cipher = Arc::from(cipher_from_pem(&public, 1).map_err(Error::crypto)?);
    Ok((
        format!("keys = [{{ id = 1, key = \"{}\" }}]\n", path.display()),
        cipher,
    ))
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    std::fs::write(path, bytes).map_err(Error::io(path.display()))
}

fn keys(plan: &Plan, setup: Setup, callers: &[User]) -> Result<Keys, Error> {
    let dir = &plan.workdir;
    let mut k = Keys {
        home_conf: String::new(),
        inbound_conf: String::new(),
        home: vec![None; callers.len()],
        inbound: None,
        tickets: setup.scheme == Scheme::Tickets,
    };
    if setup.level == 0 {
        return Ok(k);
    }
    if setup.scheme == Scheme::Aes {
        k.home_conf = "aes = \"gcm\"\naes_key_id = 1\n".into();
        for (slot, u) in k.home.iter_mut().zip(callers) {
            let ha1 = sip_core::digest::ha1(
                sip_core::digest::Algorithm::Sha256,
                &u.name,
                HOME,
                &u.password,
            );
            let c: Cipher = Arc::new(
                privacy::aes::AesId::new(ha1.as_str(), HOME, 1, false).map_err(Error::crypto)?,
            );
            *slot = Some(c);
        }
    } else {
        let (mut conf, cipher) = key_pair(dir, HOME, setup.scheme, plan.bits)?;
        if k.tickets {
            conf.push_str(&format!(
                "tickets = {}\nticket_ttl = 86400\n",
                privacy::tickets::MAX_BATCH
            ));
        }
        k.home_conf = conf;
        k.home.fill(Some(cipher));
    }
    if setup.level == 2 {
        let (mut conf, cipher) = key_pair(dir, INBOUND, setup.scheme, plan.bits)?;
        if k.tickets {
            conf.push_str(&format!(
                "tickets = {}\nticket_ttl = 86400\n",
                privacy::tickets::MAX_BATCH
            ));
        }
        k.inbound_conf = conf;
        k.inbound = Some(cipher);
    }
    Ok(k)
}

/// A PrivaSIP-3 phone of `u` at the home proxy `at`, sealing for `home`
/// (and the callee's domain's `callee`).
fn ticket_phone(
    u: &User,
    home: Cipher,
    callee: Option<Cipher>,
    at: SocketAddr,
) -> Result<ua::phone::Phone, Error> {
    let privacy = ua::phone::PrivacySetup {
        home,
        callee,
        encoding: Encoding::Hex,
        limit: 2048,
        tickets: true,
        pq: None,
    };
    let config = crate::privacy::phone_config((&u.name, &u.password, HOME), at, Some(privacy));
    ua::phone::Phone::new(config).map_err(|e| Error::peer(&u.name, e))
}

/// PrivaSIP-3: each caller registers at the home proxy `at` with an
/// enrollment until it holds `each` tickets (a batch per registration);
/// the tickets per caller, in order.
fn enroll_all(
    keys: &Keys,
    callers: &[User],
    at: SocketAddr,
    each: u64,
) -> Result<Vec<std::collections::VecDeque<String>>, Error> {
    let mut out = Vec::with_capacity(callers.len());
    for (u, home) in callers.iter().zip(&keys.home) {
        let home = home
            .clone()
            .ok_or_else(|| Error::Input("tickets need the home proxy's key".into()))?;
        let mut phone = ticket_phone(u, home, None, at)?;
        let mut pool = std::collections::VecDeque::new();
        while (pool.len() as u64) < each {
            phone.register(3600).map_err(|e| Error::peer(&u.name, e))?;
            let batch = phone.take_tickets();
            if batch.is_empty() {
                return Err(Error::peer(&u.name, "no tickets in the 200"));
            }
            pool.extend(batch);
        }
        out.push(pool);
    }
    Ok(out)
}

/// PrivaSIP-3 level 2: `n` domain tickets of the callee's domain, got
/// through the home proxy `at` by anonymous enrollments (an OPTIONS to
/// the domain per batch), as a caller of `callers[0]` would.
fn domain_entries(
    keys: &Keys,
    callers: &[User],
    at: SocketAddr,
    n: u64,
) -> Result<std::collections::VecDeque<Vec<u8>>, Error> {
    let (Some(u), Some(Some(home)), Some(callee)) =
        (callers.first(), keys.home.first(), keys.inbound.clone())
    else {
        return Err(Error::Input(
            "level 2 tickets need both proxies' keys".into(),
        ));
    };
    let mut phone = ticket_phone(u, home.clone(), Some(callee), at)?;
    let mut pool = std::collections::VecDeque::new();
    while (pool.len() as u64) < n {
        let batch = phone
            .domain_tickets(INBOUND)
            .map_err(|e| Error::peer(INBOUND, e))?;
        if batch.is_empty() {
            return Err(Error::peer(INBOUND, "no domain tickets in the 200"));
        }
        pool.extend(batch);
    }
    Ok(pool)
}

/// One set of pseudonyms per call number `first..first + n`, the caller
/// being `callers[number % len]` as the engine picks it; made on every
/// core.
fn pseudonyms(keys: &Keys, callers: &[User], first: u64, n: u64) -> Result<Vec<CallIds>, Error> {
    let one = |number: u64| -> Result<CallIds, Error> {
        let i = (number % callers.len() as u64) as usize;
        let name = &callers[i].name;
        let seal = |c: &Option<Cipher>, id: &str| -> Result<String, Error> {
            match c {
                Some(c) => c.pseudonym(id, Encoding::Hex, 2048).map_err(Error::crypto),
                None => Ok(id.to_owned()),
            }
        };
        Ok(CallIds {
            caller: seal(&keys.home[i], name)?,
            callee: seal(&keys.inbound, "callee")?,
        })
    };
    let parts = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let chunk = n.div_ceil(parts.max(1)).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..parts)
            .map(|p| {
                let one = &one;
                s.spawn(move || {
                    let lo = first + (p * chunk).min(n);
                    let hi = first + ((p + 1) * chunk).min(n);
                    (lo..hi).map(one).collect::<Result<Vec<_>, Error>>()
                })
            })
            .collect();
        let mut out = Vec::with_capacity(n as usize);
        for h in handles {
            out.extend(
                h.join()
                    .map_err(|_| Error::Crypto("a pseudonym thread panicked".into()))??,
            );
        }
        Ok(out)
    })
}

/// The calls `first..first + n` under PrivaSIP-3: each the next ticket
/// of its caller (`pools[number % len]`), the callee in clear or (level
/// 2) sealed under the next domain ticket of `domain`.
fn tickets_for(
    pools: &mut [std::collections::VecDeque<String>],
    domain: &mut std::collections::VecDeque<Vec<u8>>,
    level: u8,
    first: u64,
    n: u64,
) -> Result<Vec<CallIds>, Error> {
    let len = pools.len().max(1) as u64;
    (first..first + n)
        .map(|number| {
            let caller = pools[(number % len) as usize]
                .pop_front()
                .ok_or_else(|| Error::Input("a caller ran out of tickets".into()))?;
            let callee = if level == 2 {
                let entry = domain
                    .pop_front()
                    .ok_or_else(|| Error::Input("ran out of domain tickets".into()))?;
                Encoding::Hex.encode(
                    &privacy::tickets::seal_callee(&entry, "callee").map_err(Error::crypto)?,
                )
            } else {
                "callee".into()
            };
            Ok(CallIds { caller, callee })
        })
        .collect()
}

/// Writes a users file for `realm` through `sipsec users import`.
fn users_file(plan: &Plan, realm: &str, users: &[User]) -> Result<PathBuf, Error> {
    let csv = plan.workdir.join(format!("{realm}.csv"));
    let mut text = String::from("username,password\n");
    for u in users {
        let _ = writeln!(text, "{},{}", u.name, u.password);
    }
    write(&csv, text.as_bytes())?;
    let tsv = plan.workdir.join(format!("{realm}.users.tsv"));
    let out = std::process::Command::new(&plan.exe)
        .args(["users", "import"])
        .arg(&csv)
        .args(["--realm", realm, "--file"])
        .arg(&tsv)
        .output()
        .map_err(Error::io(plan.exe.display()))?;
    if !out.status.success() {
        return Err(Error::peer(
            "sipsec users import",
            String::from_utf8_lossy(&out.stderr).trim(),
        ));
    }
    Ok(tsv)
}

/// A proxy for `domain` with digest auth, peered with the other domain.
struct Proxy {
    server: Server,
    http: SocketAddr,
}

#[allow(clippy::too_many_arguments)]
fn start_proxy(
    plan: &Plan,
    domain: &str,
    addr: SocketAddr,
    users: &Path,
    privacy: &str,
    stateful: bool,
    peer: (&str, SocketAddr),
) -> Result<Proxy, Error> {
    let http = SocketAddr::from((
        [127, 0, 0, 1],
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(Error::io("finding a free port"))?
            .port(),
    ));
    let data = plan.workdir.join(format!("{domain}.data"));
    let _ = std::fs::remove_dir_all(&data);
    let privacy = if privacy.is_empty() {
        String::new()
    } else {
        format!(
            "[privacy]\nmode = \"{}\"\n{privacy}",
            if stateful { "stateful" } else { "stateless" }
        )
    };
    let config = format!(
        "mode = \"proxy\"\nudp = \"{addr}\"\ntcp = \"off\"\nhttp = \"{http}\"\nstateful = true\nworkers = {}\n\
         domains = [\"{domain}\"]\ndata_dir = \"{}\"\n[auth]\nenabled = true\nrealm = \"{domain}\"\nusers = \"{}\"\n\
         {privacy}[peers]\n\"{}\" = \"{}\"\n",
        plan.workers.max(1),
        data.display(),
        users.display(),
        peer.0,
        peer.1,
    );
    let path = plan.workdir.join(format!("{domain}.toml"));
    write(&path, config.as_bytes())?;
    let mut child = command(false, &plan.exe)
        .arg("serve")
        .arg("--config")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(Error::io(format!("cannot start {}", plan.exe.display())))?;
    if let Err(e) = wait_ready(addr, &mut child) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(Error::peer(format!("{domain} proxy"), e));
    }
    let pids = cpu::settled_tree(child.id());
    Ok(Proxy {
        server: Server { child, addr, pids },
        http,
    })
}

/// (decryptions, cache hits) so far, from the proxy's `/status`.
fn counters(http: SocketAddr) -> Result<(u64, u64), Error> {
    let body = crate::compare::operator_get(http, "/status", None)?;
    let v: serde_json::Value =
        serde_json::from_str(&body).map_err(|e| Error::peer(format!("{http}/status"), e))?;
    let p = &v["privacy"];
    Ok((
        p["decryptions_total"].as_u64().unwrap_or(0),
        p["cache_hits_total"].as_u64().unwrap_or(0),
    ))
}

/// Runs the plan; `progress` hears about each row as it finishes.
pub fn measure(plan: &Plan, mut progress: impl FnMut(&Row)) -> Result<Vec<Row>, Error> {
    std::fs::create_dir_all(&plan.workdir).map_err(Error::io(plan.workdir.display()))?;
    let callers: Vec<User> = (0..plan.users.max(1))
        .map(|i| User {
            name: format!("user{i:05}"),
            password: format!("pw{i}"),
        })
        .collect();
    let callee = User {
        name: "callee".into(),
        password: "pw-callee".into(),
    };
    let users = Users {
        home: users_file(plan, HOME, &callers)?,
        inbound: users_file(plan, INBOUND, std::slice::from_ref(&callee))?,
        scenario: scenario::ringing(HOME, INBOUND, true)?,
    };
    let mut rows = Vec::new();
    let rounds = plan.rounds.max(1);
    for round in 1..=rounds {
        for &setup in crate::stats::round_order(&plan.setups, round) {
            let mut measured = measure_setup(plan, setup, &callers, &callee, &users)?;
            for r in &mut measured {
                r.round = round;
                progress(r);
            }
            rows.extend(measured);
        }
    }
    Ok(rows)
}

/// The users files and scenario every configuration shares.
struct Users {
    home: PathBuf,
    inbound: PathBuf,
    scenario: crate::scenario::Scenario,
}

/// Fresh proxies for `setup`, its runs, their rows.
fn measure_setup(
    plan: &Plan,
    setup: Setup,
    callers: &[User],
    callee: &User,
    users: &Users,
) -> Result<Vec<Row>, Error> {
    let (home_users, inbound_users, scenario) = (&users.home, &users.inbound, &users.scenario);
    let mut rows = Vec::new();
    {
        let keys = keys(plan, setup, callers)?;
        let a = SocketAddr::from((
            [127, 0, 0, 1],
            free_port().map_err(Error::io("finding a free port"))?,
        ));
        let b = SocketAddr::from((
            [127, 0, 0, 1],
            free_port().map_err(Error::io("finding a free port"))?,
        ));
        let pa = start_proxy(
            plan,
            HOME,
            a,
            home_users,
            &keys.home_conf,
            setup.stateful,
            (INBOUND, b),
        )?;
        let pb = start_proxy(
            plan,
            INBOUND,
            b,
            inbound_users,
            &keys.inbound_conf,
            setup.stateful,
            (HOME, a),
        )?;
        let mut pids = pa.server.pids.clone();
        pids.extend(&pb.server.pids);
        let total = plan.warmup + plan.calls * plan.in_flight.len() as u64;
        let mut pools = if keys.tickets {
            enroll_all(&keys, callers, a, total.div_ceil(callers.len() as u64))?
        } else {
            Vec::new()
        };
        let mut domain = if keys.tickets && setup.level == 2 {
            domain_entries(&keys, callers, a, total)?
        } else {
            std::collections::VecDeque::new()
        };
        let mut next_call = 0u64;
        let mut run = |in_flight: usize, calls: u64| -> Result<crate::report::Report, Error> {
            // Fresh pseudonyms for every call: none seen before by the
            // stateful proxies (PrivaSIP-3: each caller's next ticket).
            let ids = if keys.tickets {
                tickets_for(&mut pools, &mut domain, setup.level, next_call, calls)?
            } else {
                pseudonyms(&keys, callers, next_call, calls)?
            };
            let opts = Options {
                run: Run {
                    target: a,
                    also: Vec::new(),
                    scenario: scenario.clone(),
                    shape: Shape::InFlight(in_flight),
                    calls,
                    duration: Duration::from_secs(600),
                    drain: Duration::from_secs(35),
                    threads: plan.threads.max(1),
                    local_port: 0,
                    // Call numbers restart at 0 each run: rotate the
                    // callers so that ids[n] is the caller of call n.
                    users: rotate(callers, next_call),
                    transport: crate::link::Transport::Udp,
                    tls: None,
                    connection_per_call: false,
                    flows: 1,
                    busy_poll: false,
                    share_flows: false,
                    one_shared_socket: false,
                    ids: Some(Arc::new(ids)),
                },
                callee: callee.clone(),
                callee_registrar: Some(b),
                callee_domain: Some(INBOUND.into()),
                server_pids: pids.clone(),
                weights: plan.weights,
            };
            next_call += calls;
            crate::measure(&opts, &Live::default(), &AtomicBool::new(false))
        };
        if plan.warmup > 0 {
            run(plan.in_flight.first().copied().unwrap_or(10), plan.warmup)?;
        }
        for &n in &plan.in_flight {
            let before = (counters(pa.http)?, counters(pb.http)?);
            let r = run(n, plan.calls)?;
            let after = (counters(pa.http)?, counters(pb.http)?);
            let per_call = |d: u64| {
                if r.ok > 0 {
                    d as f64 / r.ok as f64
                } else {
                    0.0
                }
            };
            let decryptions = (after.0 .0 - before.0 .0) + (after.1 .0 - before.1 .0);
            let hits = (after.0 .1 - before.0 .1) + (after.1 .1 - before.1 .1);
            let row = Row {
                config: setup.name(plan.bits),
                round: 0,
                level: setup.level,
                stateful: setup.stateful,
                in_flight: n,
                calls: r.started,
                ok: r.ok,
                failures: r.failures.clone(),
                retransmissions: r.retransmissions,
                mean_ms: r.latency_ms.mean,
                sd_ms: r.latency_ms.sd,
                ci95_ms: (r.ok >= 2).then(|| 1.96 * r.latency_ms.sd / (r.ok as f64).sqrt()),
                p50_ms: r.latency_ms.p50,
                p99_ms: r.latency_ms.p99,
                max_ms: r.latency_ms.max,
                calls_per_s: r.achieved_cps,
                proxy_cpu_us_per_call: r.server_cpu_us_per_call,
                wire_bytes_per_call: r.wire_bytes_per_call,
                decryptions_per_call: per_call(decryptions),
                cache_hits_per_call: per_call(hits),
            };
            rows.push(row);
        }
        drop(pa);
        drop(pb);
    }
    Ok(rows)
}

/// `users` starting at index `first % len`.
fn rotate(users: &[User], first: u64) -> Vec<User> {
    let k = (first % users.len().max(1) as u64) as usize;
    let mut v = users[k..].to_vec();
    v.extend_from_slice(&users[..k]);
    v
}

/// Per configuration: the calls/s it sustained (the best run without
/// failures; `None` when every run had failures) and that over plain SIP's.
pub fn sustained(rows: &[Row]) -> Vec<(String, Option<f64>, Option<f64>, f64)> {
    let mut order: Vec<&str> = Vec::new();
    let mut rounds: Vec<usize> = Vec::new();
    for r in rows {
        if !order.contains(&r.config.as_str()) {
            order.push(&r.config);
        }
        if !rounds.contains(&r.round.max(1)) {
            rounds.push(r.round.max(1));
        }
    }
    // The best run without failures of `c` in `round`.
    let best = |c: &str, round: usize| {
        rows.iter()
            .filter(|r| r.config == c && r.round.max(1) == round)
            .filter(|r| r.ok > 0 && r.failures.is_empty())
            .map(|r| r.calls_per_s)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
    };
    let decryptions = |c: &str| {
        let v: Vec<f64> = rows
            .iter()
            .filter(|r| r.config == c)
            .map(|r| r.decryptions_per_call)
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    let median = |v: Vec<f64>| (!v.is_empty()).then(|| crate::stats::median(&v));
    order
        .into_iter()
        .map(|c| {
            let bests: Vec<f64> = rounds.iter().filter_map(|&r| best(c, r)).collect();
            let ratios: Vec<f64> = rounds
                .iter()
                .filter_map(|&r| {
                    let (x, p) = (best(c, r)?, best("plain SIP", r)?);
                    (p > 0.0).then(|| x / p)
                })
                .collect();
            (c.to_owned(), median(bests), median(ratios), decryptions(c))
        })
        .collect()
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("—".into(), |v| format!("{v:.digits$}"))
}

/// The tables as markdown: response time per configuration and calls in
/// flight, then the throughput each configuration sustained.
pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::from(
        "INVITE → 180 Ringing through both proxies (ms)\n\n| configuration | in flight | calls ok | failed | mean | sd | 95 % CI | p50 | p99 | calls/s | proxies' CPU µs/call | decryptions/call | cache hits/call |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let failed: u64 = r.failures.values().sum();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2} | {:.2} | {} | {:.2} | {:.2} | {:.0} | {} | {:.2} | {:.2} |",
            r.config,
            r.in_flight,
            r.ok,
            failed,
            r.mean_ms,
            r.sd_ms,
            crate::stats::plus_minus(r.ci95_ms, r.ok as usize, 3),
            r.p50_ms,
            r.p99_ms,
            r.calls_per_s,
            opt(r.proxy_cpu_us_per_call, 0),
            r.decryptions_per_call,
            r.cache_hits_per_call,
        );
    }
    s.push_str("\nPublished (the PrivaSIP papers, SIPp keeping the queue at 100 … 1,000 calls; 1024-bit RSA): plain SIP 483–1,050 ms mean, PrivaSIP-2 RSA 1,245–1,749 ms.\n\nThroughput sustained (best run without failures; over several rounds the median of the rounds', each ratio the median of the rounds' own)\n\n| configuration | calls/s | of plain SIP | decryptions/call |\n|---|---|---|---|\n");
    for (c, b, ratio, d) in sustained(rows) {
        let _ = writeln!(
            s,
            "| {c} | {} | {} | {d:.2} |",
            opt(b, 0),
            ratio.map_or("—".into(), |r| format!("{:.0} %", r * 100.0))
        );
    }
    s
}

/// Per-row CSV.
pub fn csv(rows: &[Row]) -> String {
    let mut s = String::from("config,in_flight,calls,ok,failed,mean_ms,sd_ms,ci95_ms,p50_ms,p99_ms,max_ms,calls_per_s,proxy_cpu_us_per_call,decryptions_per_call,cache_hits_per_call\n");
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{:.4},{:.4},{},{:.4},{:.4},{:.4},{:.1},{},{:.3},{:.3}",
            r.config,
            r.in_flight,
            r.calls,
            r.ok,
            r.failures.values().sum::<u64>(),
            r.mean_ms,
            r.sd_ms,
            r.ci95_ms.map_or(String::new(), |c| format!("{c:.4}")),
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            r.calls_per_s,
            r.proxy_cpu_us_per_call
                .map_or(String::new(), |v| format!("{v:.1}")),
            r.decryptions_per_call,
            r.cache_hits_per_call
        );
    }
    s
}

/// An HTML page: mean response time against calls in flight (one plot
/// per level and mode, plain SIP on each), throughput bars, the tables.
pub fn html(rows: &[Row]) -> String {
    let mut sections = Vec::new();
    let series = |keep: &dyn Fn(&Row) -> bool| -> Vec<(String, Vec<(f64, f64)>)> {
        let mut out: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for r in rows.iter().filter(|r| keep(r)) {
            let p = (r.in_flight as f64, r.mean_ms);
            match out.iter_mut().find(|(n, _)| *n == r.config) {
                Some((_, v)) => v.push(p),
                None => out.push((r.config.clone(), vec![p])),
            }
        }
        out
    };
    for level in [1u8, 2] {
        for stateful in [false, true] {
            let s = series(&|r: &Row| r.level == 0 || (r.level == level && r.stateful == stateful));
            if s.len() < 2 {
                continue;
            }
            let title = format!(
                "PrivaSIP-{level} {}: INVITE → 180 mean",
                if stateful { "stateful" } else { "stateless" }
            );
            let named: Vec<(&str, Vec<(f64, f64)>)> =
                s.iter().map(|(n, p)| (n.as_str(), p.clone())).collect();
            sections.push((
                title.clone(),
                plot::lines(&title, "calls in flight", "ms", &named),
            ));
        }
    }
    let sus = sustained(rows);
    let labels: Vec<String> = sus.iter().map(|(c, ..)| c.clone()).collect();
    let values: Vec<f64> = sus.iter().map(|(_, b, ..)| b.unwrap_or(f64::NAN)).collect();
    sections.push((
        "Throughput sustained".into(),
        plot::bars(
            "calls/s sustained",
            "configuration",
            "calls/s",
            &labels,
            &[("calls/s", values)],
        ),
    ));
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.config.clone(),
                r.in_flight.to_string(),
                r.ok.to_string(),
                r.failures.values().sum::<u64>().to_string(),
                format!("{:.2}", r.mean_ms),
                format!("{:.2}", r.sd_ms),
                crate::stats::plus_minus(r.ci95_ms, r.ok as usize, 3),
                format!("{:.0}", r.calls_per_s),
                opt(r.proxy_cpu_us_per_call, 0),
                format!("{:.2}", r.decryptions_per_call),
            ]
        })
        .collect();
    sections.push((
        "Runs".into(),
        plot::table(
            &[
                "configuration",
                "in flight",
                "ok",
                "failed",
                "mean ms",
                "sd ms",
                "95 % CI ms",
                "calls/s",
                "proxies' CPU µs/call",
                "decryptions/call",
            ],
            &table,
        ),
    ));
    plot::page("PrivaSIP: INVITE → 180 through two proxies", &sections)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setups_skip_aes_at_level_two() {
        let s = setups(&[Scheme::Aes, Scheme::Hpke], &[1, 2], &[false, true]);
        let names: Vec<String> = s.iter().map(|x| x.name(2048)).collect();
        assert_eq!(names[0], "plain SIP");
        assert_eq!(names.len(), 1 + 2 * 2 + 2, "{names:?}");
        assert!(!names.iter().any(|n| n.starts_with("PrivaSIP-2 AES")));
        assert!(Scheme::parse_list("des").is_err());
        assert_eq!(Scheme::parse_list("rsa").unwrap().len(), 3);
    }

    #[test]
    fn sustained_is_the_best_clean_run_over_plain() {
        let row = |c: &str, cps: f64, failed: bool| Row {
            config: c.into(),
            round: 0,
            level: 0,
            stateful: false,
            in_flight: 10,
            calls: 10,
            ok: 10,
            failures: if failed {
                [("timeout".to_string(), 1)].into()
            } else {
                Default::default()
            },
            retransmissions: 0,
            mean_ms: 1.0,
            sd_ms: 0.0,
            ci95_ms: None,
            p50_ms: 1.0,
            p99_ms: 1.0,
            max_ms: 1.0,
            calls_per_s: cps,
            proxy_cpu_us_per_call: None,
            wire_bytes_per_call: None,
            decryptions_per_call: 2.0,
            cache_hits_per_call: 0.0,
        };
        let s = sustained(&[
            row("plain SIP", 1000.0, false),
            row("plain SIP", 1200.0, true),
            row("x", 900.0, false),
            row("y", 5.0, true),
        ]);
        assert_eq!(s[0].1, Some(1000.0), "the failed run does not count");
        assert!((s[1].2.unwrap() - 0.9).abs() < 1e-12);
        assert_eq!(s[2].1, None);
        assert!(rotate(&generated(3), 4)[0].name.ends_with('1'));
        // Over rounds: the median of each round's own ratio.
        let mut rounds = Vec::new();
        for (round, (plain, x)) in [(1000.0, 950.0), (800.0, 800.0), (1200.0, 1080.0)]
            .into_iter()
            .enumerate()
        {
            for (c, cps) in [("plain SIP", plain), ("x", x)] {
                rounds.push(Row {
                    round: round + 1,
                    ..row(c, cps, false)
                });
            }
        }
        let s = sustained(&rounds);
        assert_eq!(s[0].1, Some(1000.0));
        assert!((s[1].2.unwrap() - 0.95).abs() < 1e-12, "{s:?}");
    }

    fn generated(n: usize) -> Vec<User> {
        crate::generated_users(n)
    }
}
