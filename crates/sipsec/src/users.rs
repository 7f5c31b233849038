//! `sipsec users`: manage the users file.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use sipsec_server::io::users_file;
use sipsec_server::proto::users::UserEntry;

/// Which user, in which realm, in which file.
#[derive(clap::Args)]
pub struct Who {
    /// Username (the user part of the AoR).
    name: String,
    /// Realm the HA1 hashes are computed for.
    #[arg(long, default_value = "sipsec")]
    realm: String,
    /// Users file (created by `add` if missing, mode 0600; an existing
    /// file keeps its owner, group and group-read bit).
    #[arg(long, default_value = "users.tsv")]
    file: PathBuf,
}

#[derive(Subcommand)]
pub enum UsersCommand {
    /// Add or replace a user; the password is read from a prompt or stdin.
    Add {
        #[command(flatten)]
        who: Who,
        /// Read the password from the first line of standard input.
        #[arg(long)]
        password_stdin: bool,
    },
    /// List the users (name and realm; never a hash).
    List {
        /// Users file.
        #[arg(long, default_value = "users.tsv")]
        file: PathBuf,
    },
    /// Remove a user (a running server reloads the file within a second).
    Remove {
        #[command(flatten)]
        who: Who,
    },
    /// Change an existing user's password (from a prompt or stdin).
    Passwd {
        #[command(flatten)]
        who: Who,
        /// Read the password from the first line of standard input.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Import `username,password` rows from a CSV file (passwords are hashed, not stored).
    Import {
        /// CSV file with the header `username,password`.
        csv: PathBuf,
        /// Realm the HA1 hashes are computed for.
        #[arg(long, default_value = "sipsec")]
        realm: String,
        /// Users file to update (created if missing, mode 0600).
        #[arg(long, default_value = "users.tsv")]
        file: PathBuf,
    },
}

/// The shortest password `users add` stores.
const MIN_PASSWORD: usize = 8;

fn read_password(from_stdin: bool) -> Result<String, String> {
    let stdin = std::io::stdin();
    if !from_stdin && stdin.is_terminal() {
        // No echo control without extra dependencies: warn and read a line.
        eprint!("password for the new user (input is visible; prefer --password-stdin): ");
        let _ = std::io::stderr().flush();
    } else if !from_stdin {
        return Err(
            "standard input is not a terminal: pass --password-stdin to read the password from it"
                .into(),
        );
    }
    let mut line = String::new();
    stdin
        .lock()
        .read_line(&mut line)
        .map_err(|e| format!("cannot read the password: {e}"))?;
    let pw = line.trim_end_matches(['\r', '\n']).to_owned();
    let chars = pw.chars().count();
    if chars < MIN_PASSWORD {
        return Err(format!(
            "the password has {chars} character(s): at least {MIN_PASSWORD} (NIST SP 800-63B); one captured digest login lets a shorter one be guessed offline"
        ));
    }
    Ok(pw)
}

pub fn run(cmd: UsersCommand) -> ExitCode {
    let result = match cmd {
        UsersCommand::Add {
            who: Who { name, realm, file },
            password_stdin,
        } => read_password(password_stdin).and_then(|pw| {
            let mut users = users_file::load_or_empty(&file).map_err(|e| e.to_string())?;
            users
                .insert(&name, &realm, UserEntry::from_password(&name, &realm, &pw))
                .map_err(|e| e.to_string())?;
            users_file::save(&users, &file).map_err(|e| e.to_string())?;
            Ok(format!(
                "{}: user {name} in realm {realm} saved ({} in all)",
                file.display(),
                users.len()
            ))
        }),
        UsersCommand::List { file } => {
            users_file::load(&file)
                .map_err(|e| e.to_string())
                .map(|users| {
                    let mut rows: Vec<(&str, &str)> =
                        users.iter().map(|(n, r, _)| (n, r)).collect();
                    rows.sort_unstable();
                    let mut out: String = rows.iter().map(|(n, r)| format!("{n}\t{r}\n")).collect();
                    out.push_str(&format!("{} user(s) in {}", rows.len(), file.display()));
                    out
                })
        }
        UsersCommand::Remove {
            who: Who { name, realm, file },
        } => users_file::load(&file)
            .map_err(|e| e.to_string())
            .and_then(|mut users| {
                if !users.remove(&name, &realm) {
                    return Err(format!(
                        "{}: no user {name} in realm {realm}",
                        file.display()
                    ));
                }
                users_file::save(&users, &file).map_err(|e| e.to_string())?;
                Ok(format!(
                    "{}: user {name} in realm {realm} removed ({} left)",
                    file.display(),
                    users.len()
                ))
            }),
        UsersCommand::Passwd {
            who: Who { name, realm, file },
            password_stdin,
        } => users_file::load(&file)
            .map_err(|e| e.to_string())
            .and_then(|mut users| {
                if users.get(&name, &realm).is_none() {
                    return Err(format!(
                        "{}: no user {name} in realm {realm} (`sipsec users add` makes one)",
                        file.display()
                    ));
                }
                let pw = read_password(password_stdin)?;
                users
                    .insert(&name, &realm, UserEntry::from_password(&name, &realm, &pw))
                    .map_err(|e| e.to_string())?;
                users_file::save(&users, &file).map_err(|e| e.to_string())?;
                Ok(format!(
                    "{}: password of {name} in realm {realm} changed",
                    file.display()
                ))
            }),
        UsersCommand::Import { csv, realm, file } => std::fs::read_to_string(&csv)
            .map_err(|e| format!("cannot read {}: {e}", csv.display()))
            .and_then(|text| {
                let mut users = users_file::load_or_empty(&file).map_err(|e| e.to_string())?;
                let n = users
                    .import_csv(&text, &realm, &csv.display().to_string())
                    .map_err(|e| e.to_string())?;
                users_file::save(&users, &file).map_err(|e| e.to_string())?;
                Ok(format!(
                    "{}: imported {n} user(s) into realm {realm} ({} in all)",
                    file.display(),
                    users.len()
                ))
            }),
    };
    match result {
        Ok(msg) => {
            println!("{msg}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
