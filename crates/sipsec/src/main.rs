//! The `sipsec` command line.
#![forbid(unsafe_code)]

mod bench;
mod check;
mod control;
mod crypto_bench;
mod keygen;
mod keygen_sti;
mod logging;
mod manage;
mod phone;
mod provenance;
mod status;
mod users;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use sipsec_server::{Config, Mode};

/// sipsec: a secure, fast SIP server, softphone and benchmark harness.
#[derive(Parser)]
#[command(version = sipsec_server::VERSION, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the SIP server (registrar by default; proxy or redirect by --mode).
    Serve(Box<ServeArgs>),
    /// Show a running server: a summary (counts, top AoRs, bans, TLS,
    /// connections, transactions, uptime); its bindings with --all or --aor.
    Status(status::StatusArgs),
    /// Manage the users file (HA1 hashes; passwords are never stored).
    Users {
        #[command(subcommand)]
        command: users::UsersCommand,
    },
    /// List and lift a running server's bans (over its operator endpoint).
    Ban {
        #[command(subcommand)]
        command: control::BanCommand,
    },
    /// List and remove a running server's bindings (over its operator
    /// endpoint; removals are stored).
    Bindings {
        #[command(subcommand)]
        command: control::BindingsCommand,
    },
    /// List and end a running proxy's calls (over its operator endpoint;
    /// ending one sends BYE to both parties).
    Dialogs {
        #[command(subcommand)]
        command: manage::DialogsCommand,
    },
    /// List a running proxy's trunks and gateways; drain and undrain a
    /// gateway (over its operator endpoint).
    Trunks {
        #[command(subcommand)]
        command: manage::TrunksCommand,
    },
    /// Manage a running server over its operator endpoint: bans,
    /// bindings, dialogs, trunks (each also a command of its own).
    Ctl {
        #[command(subcommand)]
        command: manage::CtlCommand,
    },
    /// Load-test a SIP server and measure it (calls/s, latency, server CPU).
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
    /// Compare RSA implementations across languages and libraries (C, C++,
    /// Go, Java, Python, Rust): cross-check, then time key generation, OAEP
    /// and PSS.
    CryptoBench(Box<crypto_bench::CryptoBenchArgs>),
    /// Generate keys (RSA in every variant, EC) and certificates for TLS.
    Keygen {
        #[command(subcommand)]
        command: keygen::KeygenCommand,
    },
    /// A softphone: register, call, answer; RTP or SRTP (SDES) media,
    /// WAV play and record, call-quality statistics.
    Phone {
        #[command(subcommand)]
        command: Box<phone::PhoneCommand>,
    },
    /// Work with SIP messages.
    Sip {
        #[command(subcommand)]
        command: SipCommand,
    },
    /// Print shell completions (bash, zsh, fish, elvish, powershell):
    /// e.g. `sipsec completions bash > /etc/bash_completion.d/sipsec`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the manual pages (sipsec.1 and one per subcommand) into a
    /// directory, or print sipsec.1 without one.
    Man {
        /// Directory for the pages (e.g. /usr/local/share/man/man1).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    Registrar,
    Proxy,
    Redirect,
}

#[derive(Args, Clone)]
struct ServeArgs {
    /// Configuration file (see sipsec.example.toml); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Registrar only, or registrar plus proxy or redirect server [default: registrar].
    #[arg(long, value_enum)]
    mode: Option<ModeArg>,
    /// Require digest authentication (401 for REGISTER, 407 for INVITE).
    #[arg(long)]
    auth: bool,
    /// Serve beyond loopback without --auth: an open registrar and proxy
    /// where anyone binds any address-of-record (refused without this).
    #[arg(long, conflicts_with = "auth")]
    insecure_no_auth: bool,
    /// Digest algorithms to challenge with, in order [default: sha-256,md5].
    #[arg(long, value_delimiter = ',', value_parser = sipsec_server::config::parse_digest)]
    digest: Option<Vec<sip_core::digest::Algorithm>>,
    /// UDP address to listen on [default: 127.0.0.1:5060].
    #[arg(long)]
    udp: Option<SocketAddr>,
    /// TCP address to listen on [default: the UDP address].
    #[arg(long)]
    tcp: Option<SocketAddr>,
    /// Do not listen on TCP.
    #[arg(long, conflicts_with = "tcp")]
    no_tcp: bool,
    /// Operator endpoint (/metrics, /status); keep it on loopback [default: 127.0.0.1:8060].
    #[arg(long)]
    http: Option<SocketAddr>,
    /// Do not serve /metrics and /status.
    #[arg(long, conflicts_with = "http")]
    no_http: bool,
    /// Address to put in Via and to recognise as this server [default: the UDP address].
    #[arg(long)]
    advertise: Option<SocketAddr>,
    /// Users file (see `sipsec users add`) [default: users.tsv].
    #[arg(long)]
    users: Option<PathBuf>,
    /// Realm used in challenges [default: sipsec].
    #[arg(long)]
    realm: Option<String>,
    /// Directory of the embedded location store [default: sipsec-data].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Worker threads, one UDP socket each [default: one per core].
    #[arg(long)]
    workers: Option<usize>,
    /// How datagrams are spread over the workers: call (by Call-ID, so
    /// one busy peer uses them all and each call stays in order; needs
    /// Linux 5.17, CAP_BPF and CAP_PERFMON, else flow), flow (each sender to one worker,
    /// in order), spread (each datagram to a worker at random;
    /// back-to-back messages may be reordered) or shared (one socket all
    /// read) [default: call].
    #[arg(long, value_parser = ["call", "spread", "shared", "flow"])]
    udp_balance: Option<String>,
    /// Take the UDP port's IPv4 datagrams on this interface past the
    /// kernel's stack (AF_XDP, root; worker i on receive queue i): they
    /// skip the host's firewall (nftables, iptables); other traffic stays
    /// on the sockets [default: sockets only].
    #[arg(long, value_name = "INTERFACE", value_parser = sipsec_server::config::interface_name)]
    udp_xdp: Option<String>,
    /// Longest a busy worker waits after a read before the next, so that
    /// one read takes several messages (fewer wake-ups); the most it adds
    /// to an answer's delay; 0 never waits [default: 500, at most 10000].
    #[arg(long, value_name = "MICROSECONDS", value_parser = parse_batch_wait)]
    batch_wait_us: Option<std::time::Duration>,
    /// Record-route forwarded INVITE/SUBSCRIBE/REFER so in-dialog requests traverse the proxy.
    #[arg(long)]
    record_route: bool,
    /// Proxy with transaction state: 100 Trying, retransmissions absorbed, CANCEL, 408.
    #[arg(long)]
    stateful: bool,
    /// fsync every location change (survives power loss; slower).
    #[arg(long)]
    fsync: bool,
    /// Keep bindings in this Redis or Valkey server, shared with every node that names it
    /// (redis://[user[:password]@]host:port[/db], rediss:// for TLS, redis+unix:///path/redis.sock[?db=N&user=U&pass=P]
    /// for a Redis on this host; the password better in SIPSEC_REDIS_PASSWORD, which ps does not show)
    /// [default: the journal in --data-dir].
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// SIP over TLS on this address (sips:) [default with --cert: the UDP IP and the next port, 5061 beside 5060].
    #[arg(long)]
    tls: Option<SocketAddr>,
    /// TLS certificate chain, PEM (reloaded when the file changes or on SIGHUP).
    #[arg(long)]
    cert: Option<PathBuf>,
    /// TLS private key, PEM: RSA (standard, CRT or multi-prime), ECDSA or Ed25519.
    #[arg(long)]
    key: Option<PathBuf>,
    /// Require TLS clients to present a certificate signed by a CA in this file.
    #[arg(long)]
    client_ca: Option<PathBuf>,
    /// CAs trusted for outbound TLS to next hops [default: the system bundle].
    #[arg(long)]
    peer_ca: Option<PathBuf>,
    /// Accept peers' 1024-bit RSA keys and signatures (legacy; below today's floor of 2048).
    #[arg(long)]
    tls_allow_rsa_1024: bool,
    /// Require post-quantum key exchange (X25519MLKEM768 or another ML-KEM group, TLS 1.3) on
    /// TLS and WSS: classical-only clients are refused. The hybrid is offered first either way.
    #[arg(long)]
    tls_require_pq: bool,
    /// SIP over WebSocket (RFC 7118) for browser phones on this address (ws://).
    #[arg(long)]
    ws: Option<SocketAddr>,
    /// SIP over secure WebSocket on this address (wss://), with the TLS certificate (--cert/--key).
    #[arg(long)]
    wss: Option<SocketAddr>,
    /// WebSocket Origins allowed to connect, comma-separated (e.g. https://phone.example) [default: any].
    #[arg(long, value_delimiter = ',')]
    ws_origins: Option<Vec<String>>,
    /// Which log events to write: a level (error, warn, info, debug, trace)
    /// or directives such as warn,sipsec::conn=debug [default: RUST_LOG, else info].
    #[arg(long, value_name = "FILTER", value_parser = |s: &str| logging::parse_filter(s).map(|_| s.to_owned()))]
    log_level: Option<String>,
    /// Log lines as text or one JSON object each, on standard error.
    #[arg(long, value_enum, default_value_t = logging::LogFormat::Text)]
    log_format: logging::LogFormat,
    /// Copy every SIP message received and sent to this HEP (Homer) collector: udp:HOST:PORT.
    #[arg(long, value_name = "udp:HOST:PORT", value_parser = sipsec_server::config::parse_hep)]
    hep: Option<String>,
    /// Seconds a stopping server (SIGTERM, SIGINT) lets transactions under way finish [default: 10].
    #[arg(long, value_name = "SECONDS")]
    drain_timeout: Option<u64>,
    /// Validate the configuration, users file, TLS and privacy keys, then exit
    /// (0: usable, 1: the error); binds nothing and leaves the data directory alone.
    #[arg(long)]
    check: bool,
}

#[derive(Subcommand)]
enum SipCommand {
    /// Validate a SIP message; print a summary, or the error and where it is.
    Check {
        /// File holding one message, or `-` for standard input.
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cmd = Cli::command();
    let matches = cmd.clone().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    provenance::record(&cmd, &matches);
    match cli.command {
        Command::Serve(args) => serve(*args),
        Command::Users { command } => users::run(command),
        Command::Ban { command } => control::ban(command),
        Command::Bindings { command } => control::bindings(command),
        Command::Dialogs { command } => manage::dialogs(command),
        Command::Trunks { command } => manage::trunks(command),
        Command::Ctl { command } => manage::ctl(command),
        Command::Status(args) => status::run(&args),
        Command::Bench { command } => bench::run(command),
        Command::Keygen { command } => keygen::run(command),
        Command::CryptoBench(args) => crypto_bench::run(*args),
        Command::Phone { command } => phone::run(*command),
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut cmd, "sipsec", &mut out);
            write_out(&out)
        }
        Command::Man { dir } => man(dir.as_deref()),
        Command::Sip {
            command: SipCommand::Check { file },
        } => match check::read_input(&file) {
            Ok(bytes) => {
                let (report, ok) = check::check(&bytes);
                print!("{report}");
                if ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
    }
}

/// Defaults, then the file, then flags.
/// `--batch-wait-us`: microseconds, bounded as in the configuration file.
fn parse_batch_wait(s: &str) -> Result<std::time::Duration, String> {
    let us: u64 = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    sipsec_server::config::batch_wait(us)
}

fn build_config(a: ServeArgs) -> Result<Config, String> {
    let mut config = Config::default();
    if let Some(path) = &a.config {
        config.apply_file(path).map_err(|e| e.to_string())?;
    }
    if let Some(m) = a.mode {
        config.mode = match m {
            ModeArg::Registrar => Mode::Registrar,
            ModeArg::Proxy => Mode::Proxy,
            ModeArg::Redirect => Mode::Redirect,
        };
    }
    config.auth |= a.auth;
    config.insecure_no_auth |= a.insecure_no_auth;
    config.record_route |= a.record_route;
    config.stateful |= a.stateful;
    if let Some(d) = a.digest {
        config.digest_algorithms = d;
    }
    if let Some(u) = a.udp {
        config.udp = u;
        config.advertise = u;
        if config.tcp.is_some() {
            config.tcp = Some(u);
        }
    }
    if let Some(t) = a.tcp {
        config.tcp = Some(t);
    }
    if a.no_tcp {
        config.tcp = None;
    }
    if let Some(h) = a.http {
        config.http = Some(h);
    }
    if a.no_http {
        config.http = None;
    }
    if let Some(adv) = a.advertise {
        config.advertise = adv;
    }
    if let Some(u) = a.users {
        config.users = u;
    }
    if let Some(r) = a.realm {
        config.realm = r;
    }
    if let Some(d) = a.data_dir {
        config.data_dir = d;
    }
    if let Some(w) = a.workers {
        config.workers = w.max(1);
    }
    if let Some(b) = a
        .udp_balance
        .as_deref()
        .and_then(sipsec_server::config::UdpBalance::parse)
    {
        config.udp_balance = b;
    }
    if let Some(i) = a.udp_xdp {
        config.udp_xdp = Some(i);
    }
    if let Some(w) = a.batch_wait_us {
        config.batch_wait = w;
    }
    if let Some(h) = a.hep {
        let mut t = config
            .trace
            .take()
            .unwrap_or_else(|| sipsec_server::config::TraceSettings::new(h.clone()));
        t.collector = h;
        config.trace = Some(t);
    }
    if let Ok(t) = std::env::var("SIPSEC_HTTP_TOKEN") {
        if t.len() < 16 {
            return Err("SIPSEC_HTTP_TOKEN: at least 16 characters".into());
        }
        config.http_token = Some(t);
    }
    if let Some(d) = a.drain_timeout {
        config.drain_timeout = d;
    }
    if a.fsync {
        config.durability = sipsec_server::config::Durability::Fsync;
    }
    redis_flags(&mut config, a.redis)?;
    let tls = TlsFlags {
        addr: a.tls,
        cert: a.cert,
        key: a.key,
        client_ca: a.client_ca,
        peer_ca: a.peer_ca,
        allow_rsa_1024: a.tls_allow_rsa_1024,
        require_pq: a.tls_require_pq,
    };
    tls_flags(&mut config, tls)?;
    if let Some(w) = a.ws {
        config.websocket.ws = Some(w);
    }
    if let Some(w) = a.wss {
        config.websocket.wss = Some(w);
    }
    if let Some(o) = a.ws_origins {
        config.websocket.origins = o;
    }
    if config.websocket.wss.is_some() && config.tls.is_none() {
        return Err(
            "--wss needs the TLS certificate: give --cert CERT.pem and --key KEY.pem".into(),
        );
    }
    Ok(config)
}

/// `--redis`, and the password from `SIPSEC_REDIS_PASSWORD` (never from
/// the command line, which every user of the host can read).
fn redis_flags(config: &mut Config, url: Option<String>) -> Result<(), String> {
    if let Some(url) = url {
        sipsec_server::config::check_redis_url(&url).map_err(|e| format!("--redis {e}"))?;
        if sipsec_server::config::has_password(&url) {
            eprintln!(
                "warning: the password in --redis can be read by every user of this host (ps); \
                 set SIPSEC_REDIS_PASSWORD or put the URL in the configuration file"
            );
        }
        let mut r = config
            .redis
            .take()
            .unwrap_or_else(|| sipsec_server::config::RedisSettings::new(url.clone()));
        r.url = url;
        config.redis = Some(r);
    }
    if let Ok(p) = std::env::var("SIPSEC_REDIS_PASSWORD") {
        let Some(r) = config.redis.as_mut() else {
            return Err(
                "SIPSEC_REDIS_PASSWORD is set but no Redis location is configured (--redis or [location] backend = \"redis\")".into(),
            );
        };
        if p.is_empty() {
            return Err("SIPSEC_REDIS_PASSWORD is empty".into());
        }
        r.password = Some(sipsec_server::config::Secret(p));
    }
    Ok(())
}

/// The TLS flags of `serve`.
struct TlsFlags {
    addr: Option<SocketAddr>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    peer_ca: Option<PathBuf>,
    allow_rsa_1024: bool,
    require_pq: bool,
}

/// The TLS flags over what the file says: the certificate and key come
/// together, from the flags or the file.
fn tls_flags(config: &mut Config, t: TlsFlags) -> Result<(), String> {
    let tls_asked = t.addr.is_some()
        || t.cert.is_some()
        || t.key.is_some()
        || t.client_ca.is_some()
        || t.peer_ca.is_some()
        || t.allow_rsa_1024
        || t.require_pq;
    if !tls_asked {
        return Ok(());
    }
    let file = config.tls.take();
    let cert = t.cert.or_else(|| file.as_ref().map(|f| f.cert.clone()));
    let key = t.key.or_else(|| file.as_ref().map(|f| f.key.clone()));
    let (Some(cert), Some(key)) = (cert, key) else {
        return Err("TLS needs both --cert CERT.pem and --key KEY.pem".into());
    };
    config.tls = Some(sipsec_server::config::TlsSettings {
        addr: t
            .addr
            .or_else(|| file.as_ref().map(|f| f.addr))
            .unwrap_or_else(|| sipsec_server::config::default_tls_addr(config.udp)),
        cert,
        key,
        client_ca: t
            .client_ca
            .or_else(|| file.as_ref().and_then(|f| f.client_ca.clone())),
        peer_ca: t
            .peer_ca
            .or_else(|| file.as_ref().and_then(|f| f.peer_ca.clone())),
        allow_rsa_1024: t.allow_rsa_1024 || file.as_ref().is_some_and(|f| f.allow_rsa_1024),
        groups: file
            .as_ref()
            .map_or_else(sipsec_server::config::TlsSettings::default_groups, |f| {
                f.groups.clone()
            }),
        require_pq: t.require_pq || file.as_ref().is_some_and(|f| f.require_pq),
        session_tickets: file.as_ref().is_none_or(|f| f.session_tickets),
    });
    if let Some(s) = &config.tls {
        sipsec_server::config::TlsSettings::check_groups(&s.groups, s.require_pq)?;
    }
    Ok(())
}

/// `serve --check`: what would be loaded, loaded and reported; nothing
/// bound or started.
fn check_config(config: &sipsec_server::Config) -> ExitCode {
    match sipsec_server::check(config) {
        Ok(c) => {
            let auth = if config.auth {
                format!("on ({} user(s) in realm {})", c.users, config.realm)
            } else {
                "off (no users file read)".to_owned()
            };
            println!(
                "configuration OK: mode {}, auth {auth}, tls {}, privacy {}",
                config.mode.as_str(),
                c.tls.as_deref().unwrap_or("off"),
                if c.privacy { "on" } else { "off" }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The line `serve` prints once it listens: every address, the limits
/// and what was restored and loaded.
fn listening(started: &sipsec_server::Started, summary: &str) -> String {
    let h = &started.handle;
    let users = h.shared().auth.as_ref().map_or(0, |a| a.users().len());
    let tcp = h
        .tcp_addr()
        .map(|t| format!(", tcp {t}"))
        .unwrap_or_default();
    let tls = h
        .tls_addr()
        .map(|t| {
            let key = h
                .shared()
                .config
                .tls
                .as_ref()
                .map(|s| s.key.display().to_string())
                .unwrap_or_default();
            format!(", tls {t} (key {key})")
        })
        .unwrap_or_default();
    let ws = &h.shared().config.websocket;
    let tls = format!(
        "{tls}{}{}",
        ws.ws.map(|a| format!(", ws {a}")).unwrap_or_default(),
        ws.wss.map(|a| format!(", wss {a}")).unwrap_or_default()
    );
    let limit = h
        .connection_limit()
        .map(|n| format!(" (at most {n} connections)"))
        .unwrap_or_default();
    let http = h
        .http_addr()
        .map(|t| format!("; status on http://{t}/status"))
        .unwrap_or_default();
    format!(
        "sipsec serve: listening on udp {}{tcp}{tls}{limit}; {summary}; {} binding(s) restored, {users} user(s) loaded{http}",
        h.local_addr(),
        started.recovered.bindings,
    )
}

fn serve(a: ServeArgs) -> ExitCode {
    let check = a.check;
    let reload_log = match logging::init(a.log_level.as_deref(), a.log_format) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let args = a.clone();
    let config = match build_config(a) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if config.advertise.ip().is_unspecified() {
        eprintln!(
            "error: --udp {} is a wildcard address: give --advertise with the address peers reach",
            config.udp
        );
        return ExitCode::FAILURE;
    }
    if check {
        return check_config(&config);
    }
    // Before the server answers anything: a SIGTERM sent as soon as it
    // does (a supervisor, a test) must drain it, not kill it by default.
    let signals = match Signals::register() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: signal handling: {e}");
            return ExitCode::FAILURE;
        }
    };
    let store = match &config.redis {
        Some(r) => format!(
            "location in {} (shared)",
            sipsec_server::io::redis::redact(&r.url)
        ),
        None => format!("data in {}", config.data_dir.display()),
    };
    let initial = config.clone();
    match sipsec_server::start(config) {
        Ok(started) => {
            let metrics = &started.handle.shared().metrics;
            let steered = metrics
                .udp_steered_by_call
                .load(std::sync::atomic::Ordering::Relaxed)
                == 1;
            let summary = format!(
                "mode {}, auth {}, {} worker(s){}, {store}",
                initial.mode.as_str(),
                if initial.auth { "on" } else { "off" },
                initial.workers,
                if steered { " steered by Call-ID" } else { "" },
            );
            println!("{}", listening(&started, &summary));
            let h = started.handle;
            if started.recovered.skipped_lines > 0 {
                eprintln!(
                    "warning: {} unreadable journal line(s) skipped (a write torn by a crash)",
                    started.recovered.skipped_lines
                );
            }
            tracing::info!(
                target: "sipsec::server",
                version = sipsec_server::VERSION,
                commit = sipsec_server::COMMIT,
                udp = %h.local_addr(),
                "started"
            );
            let signal = run_until_stopped(&signals, &initial, &args, &reload_log);
            let deadline = std::time::Duration::from_secs(h.shared().config.drain_timeout);
            tracing::info!(
                target: "sipsec::server",
                signal,
                deadline_s = deadline.as_secs(),
                "stopping: new requests get 503, transactions under way may finish"
            );
            let d = h.drain(deadline);
            let journal = match &d.journal {
                None => "none".to_owned(),
                Some(Ok(())) => "flushed".to_owned(),
                Some(Err(e)) => format!("flush failed: {e}"),
            };
            tracing::info!(
                target: "sipsec::server",
                waited_ms = d.waited.as_millis() as u64,
                transactions_abandoned = d.transactions_left,
                connections_closed = d.connections_closed,
                journal,
                "stopped"
            );
            if matches!(d.journal, Some(Err(_))) {
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The signals `sipsec serve` acts on, each raising its flag and then
/// writing to `wake`, which the main thread sleeps on.
struct Signals {
    term: std::sync::Arc<std::sync::atomic::AtomicBool>,
    int: std::sync::Arc<std::sync::atomic::AtomicBool>,
    hup: std::sync::Arc<std::sync::atomic::AtomicBool>,
    wake: std::os::unix::net::UnixStream,
}

impl Signals {
    /// Registers SIGTERM and SIGINT (a second one ends the process at
    /// once) and SIGHUP.
    fn register() -> std::io::Result<Self> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let (wake, waker) = std::os::unix::net::UnixStream::pair()?;
        wake.set_read_timeout(Some(std::time::Duration::from_secs(1)))?;
        let s = Self {
            term: Default::default(),
            int: Default::default(),
            hup: Default::default(),
            wake,
        };
        for (sig, flag) in [(SIGTERM, &s.term), (SIGINT, &s.int)] {
            signal_hook::flag::register_conditional_shutdown(sig, 1, flag.clone())?;
            signal_hook::flag::register(sig, flag.clone())?;
        }
        signal_hook::flag::register(SIGHUP, s.hup.clone())?;
        // Registered after the flags, so a woken reader finds them raised.
        for sig in [SIGTERM, SIGINT, SIGHUP] {
            signal_hook::low_level::pipe::register(sig, waker.try_clone()?)?;
        }
        Ok(s)
    }

    /// Sleeps until a signal arrives (or a second passes).
    fn wait(&self) {
        use std::io::Read;
        let mut buf = [0u8; 64];
        let _ = (&self.wake).read(&mut buf);
    }
}

/// Serves until SIGTERM or SIGINT; on SIGHUP re-reads the configuration.
/// Returns the stopping signal.
fn run_until_stopped(
    signals: &Signals,
    running: &Config,
    args: &ServeArgs,
    reload_log: &logging::Reload,
) -> &'static str {
    use std::sync::atomic::Ordering;
    loop {
        if signals.term.load(Ordering::Relaxed) {
            return "SIGTERM";
        }
        if signals.int.load(Ordering::Relaxed) {
            return "SIGINT";
        }
        if signals.hup.swap(false, Ordering::Relaxed) {
            reload_config(running, args, reload_log);
        }
        signals.wait();
    }
}

/// SIGHUP: reads the configuration again. The log filter changes now;
/// users and the TLS certificate are reloaded by the server itself; any
/// other setting that differs is named as needing a restart. A file that
/// does not load changes nothing.
fn reload_config(running: &Config, args: &ServeArgs, reload_log: &logging::Reload) {
    let new = match build_config(args.clone()) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(target: "sipsec::server", error = %e, "configuration reload refused; nothing changed");
            return;
        }
    };
    match logging::filter(args.log_level.as_deref()).and_then(reload_log) {
        Ok(()) => {}
        Err(e) => tracing::error!(target: "sipsec::server", error = %e, "log filter unchanged"),
    }
    let restart = changed_settings(running, &new);
    tracing::info!(
        target: "sipsec::server",
        config = args.config.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "(flags only)".into()),
        needs_restart = %if restart.is_empty() { "none".to_owned() } else { restart.join(",") },
        "configuration reloaded (log filter, users and TLS certificate apply now)"
    );
}

/// The top-level settings whose values differ between `old` and `new`,
/// by name (read from their `Debug` form, which lists every field).
fn changed_settings(old: &Config, new: &Config) -> Vec<String> {
    fn fields(c: &Config) -> Vec<(String, String)> {
        let text = format!("{c:#?}");
        let mut out: Vec<(String, String)> = Vec::new();
        for line in text.lines().skip(1) {
            let top = line.strip_prefix("    ").filter(|l| !l.starts_with(' '));
            match (top.and_then(|l| l.split_once(": ")), out.last_mut()) {
                (Some((name, rest)), _) => out.push((name.to_owned(), rest.to_owned())),
                (None, Some(last)) => last.1.push_str(line),
                (None, None) => {}
            }
        }
        out
    }
    let new = fields(new);
    fields(old)
        .into_iter()
        .zip(new)
        .filter(|(a, b)| a != b)
        .map(|(a, _)| a.0)
        .collect()
}

/// Writes `bytes` to standard output; a closed pipe ends quietly.
fn write_out(bytes: &[u8]) -> ExitCode {
    use std::io::Write;
    match std::io::stdout().lock().write_all(bytes) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `sipsec man`: the pages generated from the command line's own
/// definition, so they never drift from `--help`.
fn man(dir: Option<&std::path::Path>) -> ExitCode {
    let cmd = <Cli as clap::CommandFactory>::command();
    let Some(dir) = dir else {
        let mut out = Vec::new();
        return match clap_mangen::Man::new(cmd).render(&mut out) {
            Ok(()) => write_out(&out),
            Err(e) => {
                eprintln!("error: rendering the manual page: {e}");
                ExitCode::FAILURE
            }
        };
    };
    let result = std::fs::create_dir_all(dir).and_then(|()| clap_mangen::generate_to(cmd, dir));
    match result {
        Ok(()) => {
            println!("manual pages written to {}", dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: writing manual pages to {}: {e}", dir.display());
            ExitCode::FAILURE
        }
    }
}
