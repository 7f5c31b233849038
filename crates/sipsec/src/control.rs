//! Runtime control of a running server over its operator endpoint:
//! `sipsec ban list|remove` and `sipsec bindings list|remove`.

use std::process::ExitCode;

use clap::Subcommand;

use crate::status::{document, encode, Endpoint};

/// `sipsec ban`.
#[derive(Subcommand)]
pub enum BanCommand {
    /// List the banned sources (IPv4 addresses, IPv6 prefixes) and how
    /// long each ban has left.
    List {
        /// Where the server is.
        #[command(flatten)]
        endpoint: Endpoint,
    },
    /// Lift a ban at once (its failures are forgotten too).
    Remove {
        /// The banned source, as listed (`2001:db8::/64`), or any address
        /// in it.
        #[arg(value_parser = sipsec_server::proto::guard::parse_source)]
        ip: std::net::IpAddr,
        /// Where the server is.
        #[command(flatten)]
        endpoint: Endpoint,
    },
}

/// `sipsec bindings`.
#[derive(Subcommand)]
pub enum BindingsCommand {
    /// List the bindings (those whose AoR matches PATTERN: a part of it,
    /// or * and ? over all of it).
    List {
        /// Which AoRs.
        pattern: Option<String>,
        /// Where the server is.
        #[command(flatten)]
        endpoint: Endpoint,
    },
    /// Remove an AoR's bindings (or one contact), stored as a REGISTER's
    /// removal is: a restart does not bring them back.
    Remove {
        /// The address-of-record, as `sipsec bindings list` shows it.
        aor: String,
        /// Only this contact URI.
        #[arg(long)]
        contact: Option<String>,
        /// Where the server is.
        #[command(flatten)]
        endpoint: Endpoint,
    },
}

/// Prints what a request said, or its error (and fails).
pub(crate) fn done(result: Result<String, String>) -> ExitCode {
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `sipsec ban …`.
pub fn ban(cmd: BanCommand) -> ExitCode {
    done(match cmd {
        BanCommand::List { endpoint } => document(&endpoint, "limit=0").map(|doc| {
            let banned = doc["banned"].as_array().cloned().unwrap_or_default();
            let mut out: String = banned
                .iter()
                .map(|b| {
                    format!(
                        "{}\t{}\t{} s left\n",
                        b["address"].as_str().unwrap_or("?"),
                        scope_words(b["scope"].as_str()),
                        b["seconds_left"]
                    )
                })
                .collect();
            let mut sources: Vec<&str> = banned
                .iter()
                .filter_map(|b| b["address"].as_str())
                .collect();
            sources.sort_unstable();
            sources.dedup();
            out.push_str(&format!("{} source(s) banned\n", sources.len()));
            out
        }),
        BanCommand::Remove { ip, endpoint } => {
            endpoint.request("DELETE", &format!("/bans/{}", encode(&ip.to_string())))
        }
    })
}

/// What a ban's scope shuts out, in words.
fn scope_words(scope: Option<&str>) -> &'static str {
    match scope {
        Some("websocket") => "websocket only",
        _ => "all transports",
    }
}

/// Runs `sipsec bindings …`.
pub fn bindings(cmd: BindingsCommand) -> ExitCode {
    done(match cmd {
        BindingsCommand::List { pattern, endpoint } => {
            let filter = pattern
                .as_deref()
                .map(|p| format!("aor={}&", encode(p)))
                .unwrap_or_default();
            document(&endpoint, &format!("{filter}limit=10000")).map(|doc| {
                let rows = doc["bindings"].as_array().cloned().unwrap_or_default();
                let mut out: String = rows
                    .iter()
                    .map(|b| {
                        format!(
                            "{}\t{}\t{}:{}\t{} s\n",
                            b["aor"].as_str().unwrap_or("?"),
                            b["contact"].as_str().unwrap_or("?"),
                            b["address"].as_str().unwrap_or("?"),
                            b["port"],
                            b["expires_in"]
                        )
                    })
                    .collect();
                let matched = doc["page"]["matched"].as_u64().unwrap_or(0);
                out.push_str(&format!("{matched} binding(s)"));
                if matched > rows.len() as u64 {
                    out.push_str(&format!(
                        " ({} shown: `sipsec status --aor PATTERN` pages through all)",
                        rows.len()
                    ));
                }
                out.push('\n');
                out
            })
        }
        BindingsCommand::Remove {
            aor,
            contact,
            endpoint,
        } => {
            let mut path = format!("/bindings?aor={}", encode(&aor));
            if let Some(c) = contact {
                path.push_str(&format!("&contact={}", encode(&c)));
            }
            endpoint.request("DELETE", &path)
        }
    })
}
