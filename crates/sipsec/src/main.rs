//! The `sipsec` command line.
#![forbid(unsafe_code)]

mod check;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// sipsec: a secure, fast SIP server, softphone and benchmark harness.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the SIP server.
    Serve {
        /// UDP address to listen on.
        #[arg(long, default_value = "127.0.0.1:5060")]
        udp: SocketAddr,
        /// Worker threads (one UDP socket each); default: one per core.
        #[arg(long)]
        workers: Option<usize>,
    },
    /// Work with SIP messages.
    Sip {
        #[command(subcommand)]
        command: SipCommand,
    },
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
        Command::Serve { udp, workers } => serve(udp, workers),
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

fn serve(udp: SocketAddr, workers: Option<usize>) -> ExitCode {
    let workers =
        workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    match sipsec_server::UdpServer::new(udp, workers).start() {
        Ok(h) => {
            println!(
                "sipsec serve: listening on udp {} with {workers} worker(s); methods: {}",
                h.local_addr(),
                sipsec_server::core::ALLOW
            );
            h.wait();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: cannot listen on udp {udp}: {e}");
            ExitCode::FAILURE
        }
    }
}
