//! `sipsec dialogs` and `sipsec trunks`: a running proxy's calls and
//! trunks over its operator endpoint; `sipsec ctl` gathers every
//! management command (bans, bindings, dialogs, trunks) under one name.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Subcommand;

use crate::control::done;
use crate::status::{document, encode, Endpoint};

/// `sipsec dialogs`.
#[derive(Subcommand)]
pub enum DialogsCommand {
    /// List the calls the proxy follows now (early and confirmed).
    List {
        /// Where the server is.
        #[command(flatten)]
        endpoint: Endpoint,
    },
    /// End a confirmed call: the proxy sends BYE to both parties and
    /// writes its record.
    End {
        /// Its Call-ID.
        call_id: String,
        /// Where the server is.
        #[command(flatten)]
        endpoint: Endpoint,
    },
}

/// `sipsec trunks`.
#[derive(Subcommand)]
pub enum TrunksCommand {
    /// List the trunks, their gateways and their state.
    List {
        /// Where the server is.
        #[command(flatten)]
        endpoint: Endpoint,
    },
    /// Drain a gateway: no new call goes to it; calls under way go on.
    Drain {
        /// The trunk's name.
        trunk: String,
        /// The gateway, IP:PORT.
        gateway: SocketAddr,
        /// Where the server is.
        #[command(flatten)]
        endpoint: Endpoint,
    },
    /// Put a drained gateway back in service.
    Undrain {
        /// The trunk's name.
        trunk: String,
        /// The gateway, IP:PORT.
        gateway: SocketAddr,
        /// Where the server is.
        #[command(flatten)]
        endpoint: Endpoint,
    },
}

/// `sipsec ctl`: every management command of a running server.
#[derive(Subcommand)]
pub enum CtlCommand {
    /// Bans (`sipsec ban`).
    Ban {
        #[command(subcommand)]
        command: crate::control::BanCommand,
    },
    /// Bindings (`sipsec bindings`).
    Bindings {
        #[command(subcommand)]
        command: crate::control::BindingsCommand,
    },
    /// Calls (`sipsec dialogs`).
    Dialogs {
        #[command(subcommand)]
        command: DialogsCommand,
    },
    /// Trunks (`sipsec trunks`).
    Trunks {
        #[command(subcommand)]
        command: TrunksCommand,
    },
    /// Reload the users file and the TLS certificate and key now (as
    /// SIGHUP does); other settings take a restart.
    Reload {
        /// Where the server is.
        #[command(flatten)]
        endpoint: Endpoint,
    },
}

/// Runs `sipsec ctl …`.
pub fn ctl(cmd: CtlCommand) -> ExitCode {
    match cmd {
        CtlCommand::Ban { command } => crate::control::ban(command),
        CtlCommand::Bindings { command } => crate::control::bindings(command),
        CtlCommand::Dialogs { command } => dialogs(command),
        CtlCommand::Trunks { command } => trunks(command),
        CtlCommand::Reload { endpoint } => done(endpoint.request("POST", "/reload")),
    }
}

/// Runs `sipsec dialogs …`.
pub fn dialogs(cmd: DialogsCommand) -> ExitCode {
    done(match cmd {
        DialogsCommand::List { endpoint } => document(&endpoint, "limit=0").map(|doc| {
            let d = &doc["dialogs"];
            let rows = d["list"].as_array().cloned().unwrap_or_default();
            let mut out: String = rows
                .iter()
                .map(|r| {
                    format!(
                        "{}\t{} → {}\t{}\t{} s{}\n",
                        r["call_id"].as_str().unwrap_or("?"),
                        r["caller"].as_str().unwrap_or("?"),
                        r["callee"].as_str().unwrap_or("?"),
                        r["state"].as_str().unwrap_or("?"),
                        r["seconds"],
                        r["trunk"]
                            .as_str()
                            .map(|t| format!("\ttrunk {t}"))
                            .unwrap_or_default()
                    )
                })
                .collect();
            out.push_str(&format!("{} call(s)\n", d["active"].as_u64().unwrap_or(0)));
            out
        }),
        DialogsCommand::End { call_id, endpoint } => {
            endpoint.request("DELETE", &format!("/dialogs/{}", encode(&call_id)))
        }
    })
}

/// Runs `sipsec trunks …`.
pub fn trunks(cmd: TrunksCommand) -> ExitCode {
    done(match cmd {
        TrunksCommand::List { endpoint } => document(&endpoint, "limit=0").map(|doc| {
            let mut out = String::new();
            for t in doc["trunks"].as_array().cloned().unwrap_or_default() {
                out.push_str(&format!(
                    "{} ({})\n",
                    t["name"].as_str().unwrap_or("?"),
                    t["algorithm"].as_str().unwrap_or("?")
                ));
                for g in t["gateways"].as_array().cloned().unwrap_or_default() {
                    out.push_str(&format!(
                        "  {}\t{}\tweight {}\tpriority {}\t{} call(s)\n",
                        g["address"].as_str().unwrap_or("?"),
                        g["state"].as_str().unwrap_or("?"),
                        g["weight"],
                        g["priority"],
                        g["calls"]
                    ));
                }
            }
            out
        }),
        TrunksCommand::Drain {
            trunk,
            gateway,
            endpoint,
        } => endpoint.request(
            "POST",
            &format!(
                "/trunks/{}/drain?gateway={}",
                encode(&trunk),
                encode(&gateway.to_string())
            ),
        ),
        TrunksCommand::Undrain {
            trunk,
            gateway,
            endpoint,
        } => endpoint.request(
            "POST",
            &format!(
                "/trunks/{}/undrain?gateway={}",
                encode(&trunk),
                encode(&gateway.to_string())
            ),
        ),
    })
}
