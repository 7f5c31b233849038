//! The files a running server watches: the users file and the TLS
//! certificate and key, reloaded when they change or on SIGHUP. A broken file is reported
//! and the running contents kept.

use std::sync::Arc;

use crate::config::Config;
use crate::io::start_error::StartError;
use crate::io::tls::TlsContext;
use crate::proto::shared::Shared;
use crate::proto::users::Users;

/// Loads the users file and checks that someone is in the realm served.
pub(crate) fn load_users(config: &Config) -> Result<Users, StartError> {
    let users = crate::io::users_file::load(&config.users)?;
    let file = config.users.display().to_string();
    if users.is_empty() {
        return Err(StartError::NoUsers(file));
    }
    if !users.iter().any(|(_, r, _)| r == config.realm) {
        let mut realms: Vec<&str> = users.iter().map(|(_, r, _)| r).collect();
        realms.sort_unstable();
        realms.dedup();
        let found = realms
            .iter()
            .take(5)
            .map(|r| format!("{r:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(StartError::NoUsersInRealm {
            file,
            realm: config.realm.clone(),
            count: users.len(),
            found,
        });
    }
    Ok(users)
}

/// How often the certificate, key and users files are checked for changes.
const FILE_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// The users file's identity, to notice a change.
fn file_stamp(path: &std::path::Path) -> Option<(std::time::SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Reloads the users file (when authentication is on), and the TLS
/// certificate and key (when TLS is on), when their files change or on
/// SIGHUP, and a proxy's trunks on SIGHUP, without a restart. A broken file is reported and the old
/// contents kept. The thread sleeps on `wake` between checks: SIGHUP
/// writes to its peer `sighup` from the signal handler, and the server's
/// stop to another handle of that peer.
pub(crate) fn watch_files(
    tls: Option<Arc<TlsContext>>,
    shared: Arc<Shared>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    mut wake: std::os::unix::net::UnixStream,
    sighup: std::os::unix::net::UnixStream,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    use std::io::Read;
    use std::sync::atomic::Ordering;
    wake.set_read_timeout(Some(FILE_POLL))?;
    let hup = signal_hook::low_level::pipe::register(signal_hook::consts::SIGHUP, sighup)?;
    std::thread::Builder::new()
        .name("reload".into())
        .spawn(move || {
            let mut users_stamp = file_stamp(&shared.config.users);
            let mut buf = [0u8; 64];
            loop {
                // A byte: SIGHUP (or the stop, seen below); a timeout: the
                // periodic check.
                let forced = matches!(wake.read(&mut buf), Ok(n) if n > 0);
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if let Some(ctx) = &tls {
                    let _ = reload_certificates(ctx, &shared, forced);
                }
                if shared.auth.is_some() {
                    let stamp = file_stamp(&shared.config.users);
                    if forced || stamp != users_stamp {
                        users_stamp = stamp;
                        let _ = reload_users(&shared);
                    }
                }
                if forced && shared.config.mode == crate::config::Mode::Proxy {
                    let said = crate::io::trunk_files::reload(&shared);
                    tracing::info!(target: "sipsec::trunk", "SIGHUP: {said}");
                }
            }
            signal_hook::low_level::unregister(hup);
        })
}

/// Reloads the TLS certificate and key (`forced`: even unchanged); what
/// came of it.
pub(crate) fn reload_certificates(ctx: &TlsContext, shared: &Shared, forced: bool) -> String {
    use std::sync::atomic::Ordering;
    match ctx.certs.reload(forced) {
        Ok(true) => {
            shared.metrics.tls_reloads.fetch_add(1, Ordering::Relaxed);
            tracing::info!(target: "sipsec::tls", key = %ctx.certs.info().description, "TLS certificate reloaded");
            format!(
                "TLS certificate reloaded ({})",
                ctx.certs.info().description
            )
        }
        Ok(false) => "TLS certificate unchanged".into(),
        Err(e) => {
            shared
                .metrics
                .tls_reload_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::error!(target: "sipsec::tls", error = %e, "TLS reload refused, keeping the old certificate");
            format!("TLS reload refused, the old certificate kept: {e}")
        }
    }
}

/// Swaps in the users file as it is now, all at once, and says what
/// changed; a file that does not load, or has nobody in the realm,
/// leaves the running set as it was.
pub(crate) fn reload_users(shared: &Shared) -> String {
    let Some(auth) = &shared.auth else {
        return "no users (authentication is off)".into();
    };
    let file = shared.config.users.display();
    let new = match load_users(&shared.config) {
        Ok(u) => u,
        Err(e) => {
            tracing::error!(target: "sipsec::users", kept = auth.users().len(), error = %e, "users reload refused, keeping the users loaded");
            return format!("users reload refused, {} kept: {e}", auth.users().len());
        }
    };
    let old = auth.users();
    let (mut added, mut changed, mut removed) = (0, 0, 0);
    for (name, realm, entry) in new.iter() {
        match old.get(name, realm) {
            None => added += 1,
            Some(e) if e != entry => changed += 1,
            Some(_) => {}
        }
    }
    for (name, realm, _) in old.iter() {
        if new.get(name, realm).is_none() {
            removed += 1;
        }
    }
    let total = new.len();
    auth.set_users(new);
    tracing::info!(target: "sipsec::users", %file, total, added, changed, removed, "users reloaded");
    format!("users reloaded: {total} ({added} added, {changed} changed, {removed} removed)")
}
