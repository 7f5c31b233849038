//! Starting a configured server: recovery, users, workers.

use std::sync::Arc;

use crate::auth::{Authenticator, NonceKey};
use crate::config::Config;
use crate::core::{Shared, Transport};
use crate::location::{MemoryLocation, Persistence, Recovered};
use crate::stateful::Sends;
use crate::tcp::TcpHub;
use crate::tls::TlsContext;
use crate::udp::{unix_now, ServerHandle, UdpServer};
use crate::users::Users;

/// Why the server could not start; each names what to fix.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The users file is missing or malformed.
    #[error("users file: {0}")]
    Users(#[from] crate::users::UsersError),
    /// Authentication is on but the users file names nobody.
    #[error("--auth needs users: {0} has none (add some with `sipsec users add`)")]
    NoUsers(String),
    /// The data directory or its files could not be used.
    #[error("location store in {dir}: {err}")]
    Store {
        /// Directory.
        dir: String,
        /// Cause.
        err: std::io::Error,
    },
    /// A listening socket could not be bound.
    #[error("cannot listen on {proto} {addr}: {err}")]
    Bind {
        /// "udp" or "tcp".
        proto: &'static str,
        /// Address.
        addr: std::net::SocketAddr,
        /// Cause.
        err: std::io::Error,
    },
    /// The OS random generator failed.
    #[error("no randomness for nonces: {0}")]
    Random(std::io::Error),
    /// The privacy keys could not be used.
    #[error("privacy: {0}")]
    Privacy(String),
    /// The TLS certificate, key or CA files could not be used.
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
}

/// A started server and what recovery found.
#[derive(Debug)]
pub struct Started {
    /// The running server.
    pub handle: ServerHandle,
    /// Bindings restored from disk.
    pub recovered: Recovered,
}

/// Recovers the location store, loads users, binds and starts workers.
pub fn start(mut config: Config) -> Result<Started, StartError> {
    let store = |err| StartError::Store {
        dir: config.data_dir.display().to_string(),
        err,
    };
    let location = Arc::new(MemoryLocation::new());
    let persistence = Persistence::new(&config.data_dir, config.durability).map_err(store)?;
    let recovered = persistence.recover(&location, unix_now()).map_err(store)?;
    let auth = if config.auth {
        let users = Users::load(&config.users)?;
        if users.is_empty() {
            return Err(StartError::NoUsers(config.users.display().to_string()));
        }
        let key = NonceKey::random(config.nonce_ttl).map_err(StartError::Random)?;
        Some(Authenticator::new(
            &config.realm,
            key,
            users,
            &config.digest_algorithms,
        ))
    } else {
        None
    };
    let workers = config.workers.max(1);
    let journals = (0..workers)
        .map(|i| persistence.journal(i).map(Some))
        .collect::<Result<Vec<_>, _>>()
        .map_err(store)?;
    let addr = config.udp;
    let bind = |err| StartError::Bind {
        proto: "udp",
        addr,
        err,
    };
    let udp = UdpServer::bind(addr, workers).map_err(bind)?;
    let udp_port = udp.local_addr().port();
    if config.advertise.port() == 0 {
        config.advertise.set_port(udp_port);
    }
    // TCP listens on the UDP port when asked for port 0, so one address
    // names the server on both transports.
    let tcp_listener = match config.tcp {
        Some(mut t) => {
            if t.port() == 0 {
                t.set_port(udp_port);
            }
            Some(
                std::net::TcpListener::bind(t).map_err(|err| StartError::Bind {
                    proto: "tcp",
                    addr: t,
                    err,
                })?,
            )
        }
        None => None,
    };
    let tcp_addr = tcp_listener.as_ref().and_then(|l| l.local_addr().ok());
    let tls = match &config.tls {
        Some(t) => Some(Arc::new(TlsContext::new(t)?)),
        None => None,
    };
    let tls_listener = match &mut config.tls {
        Some(t) => {
            let l = std::net::TcpListener::bind(t.addr).map_err(|err| StartError::Bind {
                proto: "tls",
                addr: t.addr,
                err,
            })?;
            if let Ok(a) = l.local_addr() {
                t.addr = a;
            }
            Some(l)
        }
        None => None,
    };
    let tls_addr = tls_listener.as_ref().and_then(|l| l.local_addr().ok());
    let tcp_journal = if tcp_listener.is_some() || tls_listener.is_some() {
        Some(Arc::new(std::sync::Mutex::new(
            persistence.journal(workers).map_err(store)?,
        )))
    } else {
        None
    };
    let http_listener = match config.http {
        Some(h) => Some(
            std::net::TcpListener::bind(h).map_err(|err| StartError::Bind {
                proto: "http",
                addr: h,
                err,
            })?,
        ),
        None => None,
    };
    let udp_addr = udp.local_addr();
    let privacy = match &config.privacy {
        Some(p) => Some(
            crate::privacy::Privacy::load(p, auth.as_ref().map(|a| a.users()), &config.realm)
                .map_err(StartError::Privacy)?,
        ),
        None => None,
    };
    let mut shared = Shared::new(config, location, auth);
    shared.privacy = privacy;
    let shared = Arc::new(shared);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut threads = Vec::new();
    let hub = if tcp_listener.is_some() || tls_listener.is_some() {
        let hub = TcpHub::new(
            shared.clone(),
            tcp_journal,
            udp.sender().ok(),
            tls.clone(),
            stop.clone(),
        );
        if let Some(l) = tcp_listener {
            threads.push(hub.listen(l, false).map_err(bind)?);
        }
        if let Some(l) = tls_listener {
            threads.push(hub.listen(l, true).map_err(bind)?);
        }
        Some(hub)
    } else {
        None
    };
    if let Some(ctx) = &tls {
        threads.push(watch_certificates(ctx.clone(), shared.clone(), stop.clone()).map_err(bind)?);
    }
    if shared.transactions.is_some() {
        let sock = udp.sender().map_err(bind)?;
        threads.push(
            transaction_timers(shared.clone(), sock, hub.clone(), stop.clone()).map_err(bind)?,
        );
    }
    let http_addr = http_listener.as_ref().and_then(|l| l.local_addr().ok());
    if let Some(l) = http_listener {
        let view = crate::http::View {
            shared: shared.clone(),
            hub: hub.clone(),
            udp: udp_addr,
            tcp: tcp_addr,
            tls: tls.clone(),
        };
        threads.push(crate::http::serve(view, l, stop.clone()).map_err(bind)?);
    }
    let handle = udp
        .start(shared, journals, hub, stop, threads)
        .map_err(bind)?
        .with_tcp(tcp_addr)
        .with_tls(tls_addr)
        .with_http(http_addr);
    Ok(Started { handle, recovered })
}

/// How often the stateful proxy's timers are checked.
const TICK: std::time::Duration = std::time::Duration::from_millis(10);

/// Runs the stateful proxy's timers (retransmissions, 408s, clean-up).
fn transaction_timers(
    shared: Arc<Shared>,
    udp: std::net::UdpSocket,
    hub: Option<Arc<TcpHub>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("transactions".into())
        .spawn(move || {
            let mut sends = Sends::default();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(TICK);
                let Some(tx) = &shared.transactions else {
                    return;
                };
                sends.clear();
                tx.tick(std::time::Instant::now(), &mut sends, &shared.metrics);
                for (bytes, (dest, transport)) in sends.iter() {
                    match (transport, &hub) {
                        (Transport::Udp, _) => {
                            let _ = udp.send_to(bytes, dest);
                        }
                        (t, Some(hub)) => {
                            let _ = hub.send(dest, t, bytes);
                        }
                        (_, None) => {}
                    }
                }
            }
        })
}

/// How often the certificate and key files are checked for changes.
const CERT_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Reloads the TLS certificate and key when their files change or on
/// SIGHUP, without a restart; a broken pair is reported and the old one
/// kept.
fn watch_certificates(
    ctx: Arc<TlsContext>,
    shared: Arc<Shared>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, hup.clone())?;
    std::thread::Builder::new()
        .name("tls-reload".into())
        .spawn(move || {
            let mut waited = std::time::Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(TICK);
                waited += TICK;
                let forced = hup.swap(false, Ordering::Relaxed);
                if !forced && waited < CERT_POLL {
                    continue;
                }
                waited = std::time::Duration::ZERO;
                match ctx.certs.reload(forced) {
                    Ok(true) => {
                        shared.metrics.tls_reloads.fetch_add(1, Ordering::Relaxed);
                        eprintln!(
                            "sipsec: TLS certificate reloaded ({})",
                            ctx.certs.info().description
                        );
                    }
                    Ok(false) => {}
                    Err(e) => {
                        shared
                            .metrics
                            .tls_reload_failures
                            .fetch_add(1, Ordering::Relaxed);
                        eprintln!("sipsec: TLS reload refused, keeping the old certificate: {e}");
                    }
                }
            }
        })
}
