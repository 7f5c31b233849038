//! The `sipsec` command line.
#![forbid(unsafe_code)]

mod check;
mod status;
mod users;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use sipsec_server::{Config, Mode};

/// sipsec: a secure, fast SIP server, softphone and benchmark harness.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the SIP server (registrar by default; proxy or redirect by --mode).
    Serve(ServeArgs),
    /// Show a running server's configuration and registered users.
    Status {
        /// The server's operator endpoint.
        #[arg(long, default_value = "127.0.0.1:8060")]
        http: SocketAddr,
    },
    /// Manage the users file (HA1 hashes; passwords are never stored).
    Users {
        #[command(subcommand)]
        command: users::UsersCommand,
    },
    /// Work with SIP messages.
    Sip {
        #[command(subcommand)]
        command: SipCommand,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    Registrar,
    Proxy,
    Redirect,
}

#[derive(Args)]
struct ServeArgs {
    /// Registrar only, or registrar plus proxy or redirect server.
    #[arg(long, value_enum, default_value = "registrar")]
    mode: ModeArg,
    /// Require digest authentication (401 for REGISTER, 407 for INVITE).
    #[arg(long)]
    auth: bool,
    /// UDP address to listen on.
    #[arg(long, default_value = "127.0.0.1:5060")]
    udp: SocketAddr,
    /// TCP address to listen on (default: the --udp address).
    #[arg(long)]
    tcp: Option<SocketAddr>,
    /// Do not listen on TCP.
    #[arg(long, conflicts_with = "tcp")]
    no_tcp: bool,
    /// Operator endpoint (/metrics, /status); keep it on loopback.
    #[arg(long, default_value = "127.0.0.1:8060")]
    http: SocketAddr,
    /// Do not serve /metrics and /status.
    #[arg(long)]
    no_http: bool,
    /// Address to put in Via and to recognise as this server (default: --udp).
    #[arg(long)]
    advertise: Option<SocketAddr>,
    /// Digest algorithms to challenge with, in order of preference.
    #[arg(long, value_delimiter = ',', default_value = "sha-256,md5", value_parser = parse_algorithm)]
    digest: Vec<sip_core::digest::Algorithm>,
    /// Users file (see `sipsec users add`).
    #[arg(long, default_value = "users.tsv")]
    users: PathBuf,
    /// Realm used in challenges.
    #[arg(long, default_value = "sipsec")]
    realm: String,
    /// Directory of the embedded location store.
    #[arg(long, default_value = "sipsec-data")]
    data_dir: PathBuf,
    /// Worker threads, one UDP socket each (default: one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// fsync every location change (survives power loss; slower).
    #[arg(long)]
    fsync: bool,
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
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(args),
        Command::Users { command } => users::run(command),
        Command::Status { http } => status::run(http),
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

fn parse_algorithm(s: &str) -> Result<sip_core::digest::Algorithm, String> {
    use sip_core::digest::Algorithm;
    match Algorithm::from_token(s) {
        Some(a @ (Algorithm::Md5 | Algorithm::Sha256 | Algorithm::Sha512_256)) => Ok(a),
        _ => Err(format!(
            "unknown digest algorithm {s:?}: use md5, sha-256 or sha-512-256"
        )),
    }
}

fn serve(a: ServeArgs) -> ExitCode {
    let mut config = Config {
        mode: match a.mode {
            ModeArg::Registrar => Mode::Registrar,
            ModeArg::Proxy => Mode::Proxy,
            ModeArg::Redirect => Mode::Redirect,
        },
        auth: a.auth,
        digest_algorithms: a.digest,
        udp: a.udp,
        tcp: if a.no_tcp {
            None
        } else {
            Some(a.tcp.unwrap_or(a.udp))
        },
        http: (!a.no_http).then_some(a.http),
        advertise: a.advertise.unwrap_or(a.udp),
        users: a.users,
        realm: a.realm,
        data_dir: a.data_dir,
        ..Config::default()
    };
    if let Some(w) = a.workers {
        config.workers = w.max(1);
    }
    if a.fsync {
        config.durability = sipsec_server::location::Durability::Fsync;
    }
    if config.advertise.ip().is_unspecified() {
        eprintln!(
            "error: --udp {} is a wildcard address: give --advertise with the address peers reach",
            config.udp
        );
        return ExitCode::FAILURE;
    }
    let summary = format!(
        "mode {}, auth {}, {} worker(s), data in {}",
        config.mode.as_str(),
        if config.auth { "on" } else { "off" },
        config.workers,
        config.data_dir.display()
    );
    match sipsec_server::start(config) {
        Ok(started) => {
            let h = started.handle;
            let users = h.shared().auth.as_ref().map_or(0, |a| a.users().len());
            let tcp = h
                .tcp_addr()
                .map(|t| format!(" and tcp {t}"))
                .unwrap_or_default();
            let http = h
                .http_addr()
                .map(|t| format!("; status on http://{t}/status"))
                .unwrap_or_default();
            println!(
                "sipsec serve: listening on udp {}{tcp}; {summary}; {} binding(s) restored, {users} user(s) loaded{http}",
                h.local_addr(),
                started.recovered.bindings,
            );
            if started.recovered.skipped_lines > 0 {
                eprintln!(
                    "warning: {} unreadable journal line(s) skipped (a write torn by a crash)",
                    started.recovered.skipped_lines
                );
            }
            h.wait();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
