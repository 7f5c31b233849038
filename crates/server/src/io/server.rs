//! Starting a configured server: recovery, users, workers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::config::{Config, Mode};
use crate::io::clock::unix_now;
use crate::io::drive::Backing;
use crate::io::journal::{Persistence, Recovered};
use crate::io::send::Sender;
use crate::io::tcp::shared::TcpHub;
use crate::io::tls::TlsContext;
use crate::io::udp::UdpServer;
use crate::proto::auth::Authenticator;
use crate::proto::core::Core;
use crate::proto::location::MemoryLocation;
use crate::proto::shared::Shared;
use crate::proto::users::Users;

/// Why the server could not start; each names what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The users file is missing or malformed.
    #[error("users file: {0}")]
    Users(#[from] crate::proto::users::UsersError),
    /// Authentication is on but the users file names nobody.
    #[error("--auth needs users: {0} has none (add some with `sipsec users add`)")]
    NoUsers(String),
    /// Authentication is on but no user is in the realm served.
    #[error("--auth: none of the {count} user(s) in {file} is in realm {realm:?} (they are in {found}): serve that realm with --realm, or add users with `sipsec users add --realm {realm}`")]
    NoUsersInRealm {
        /// Users file.
        file: String,
        /// Realm served.
        realm: String,
        /// Users in the file.
        count: usize,
        /// The realms the file has, quoted.
        found: String,
    },
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
    #[error("nonce secret: {0}")]
    Random(std::io::Error),
    /// The privacy keys could not be used.
    #[error("privacy: {0}")]
    Privacy(#[from] crate::proto::privacy::PrivacyError),
    /// The TLS certificate, key or CA files could not be used.
    #[error("TLS: {0}")]
    Tls(#[from] crate::io::tls::TlsError),
    /// The shared location store could not be reached or read.
    #[error("location store (redis): {0}")]
    Redis(String),
    /// The `[dns]` settings cannot be used (an unreadable hosts file).
    #[error("dns: {0}")]
    Dns(String),
    /// The operator endpoint would listen beyond loopback without a token.
    #[error("the operator endpoint on {0} is reachable from other hosts: set http_token (or SIPSEC_HTTP_TOKEN) to require a token, or keep --http on 127.0.0.1")]
    HttpExposed(std::net::SocketAddr),
    /// SIP would be served beyond loopback without authentication.
    #[error("SIP on {0} is reachable from other hosts without authentication: anyone could bind any address-of-record and call through it. Add --auth (and users), or pass --insecure-no-auth ([auth] insecure_no_auth = true) to serve an open registrar anyway")]
    OpenService(std::net::SocketAddr),
    /// The HEP collector's address could not be used.
    #[error("trace (HEP collector {collector}): {err}")]
    Trace {
        /// The collector as configured.
        collector: String,
        /// Cause.
        err: std::io::Error,
    },
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
    // A file-size limit (ulimit -f) must make a journal write fail with
    // EFBIG, answered 500 like a full disk, not kill the server.
    static XFSZ: std::sync::Once = std::sync::Once::new();
    XFSZ.call_once(|| {
        let _ = signal_hook::flag::register(
            signal_hook::consts::SIGXFSZ,
            Arc::new(std::sync::atomic::AtomicBool::new(false)),
        );
    });
    if let Some(a) = config.open_service() {
        return Err(StartError::OpenService(a));
    }
    // Read before anything starts: a bad hosts file stops the start here.
    let hosts = crate::io::resolver::read_hosts(&config.dns).map_err(StartError::Dns)?;
    let store = |err| StartError::Store {
        dir: config.data_dir.display().to_string(),
        err,
    };
    let location = Arc::new(MemoryLocation::new(std::hash::RandomState::new()));
    // The embedded journal, or a Redis server shared with other nodes
    // whose bindings are read into memory before anything is served.
    let (persistence, recovered) = match &config.redis {
        None => {
            let p = Arc::new(Persistence::new(&config.data_dir, config.durability).map_err(store)?);
            let recovered = p.recover(&location, unix_now()).map_err(store)?;
            (Some(p), recovered)
        }
        // Read by the sync thread, started below before anything serves.
        Some(_) => (None, Recovered::default()),
    };
    let auth = if config.auth {
        let users = load_users(&config)?;
        let key = crate::io::keys::nonce_key(&config.data_dir.join("nonce.key"), config.nonce_ttl)
            .map_err(StartError::Random)?;
        Some(Authenticator::new(
            &config.realm,
            key,
            users,
            &config.digest_algorithms,
            crate::proto::auth::NcLimits {
                capacity: config.max_tracked_nonces,
                per_user: config.max_nonces_per_user,
                per_source: config.max_nonces_per_source,
            },
            std::hash::RandomState::new(),
        ))
    } else {
        None
    };
    let workers = config.workers.max(1);
    // Only a stateful proxy acts on ICMP errors (its transactions fail on
    // them), so only its sockets ask for them.
    let icmp_errors = config.stateful && config.mode == Mode::Proxy;
    let (udp, tcp_listener) = bind_udp_and_tcp(&config, workers, icmp_errors)?;
    let addr = config.udp;
    let bind = |err| StartError::Bind {
        proto: "udp",
        addr,
        err,
    };
    let udp_port = udp.local_addr().port();
    if config.advertise.port() == 0 {
        config.advertise.set_port(udp_port);
    }
    let tcp_addr = tcp_listener.as_ref().and_then(|l| l.local_addr().ok());
    let tls = match &config.tls {
        Some(t) => Some(Arc::new(TlsContext::new(t)?)),
        None => None,
    };
    let tls_listener = match &mut config.tls {
        Some(t) => {
            let l = stream_listener(t.addr).map_err(|err| StartError::Bind {
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
    // WebSocket listeners; their bound addresses (port 0 picks one) go
    // back into the config, which names them in Via and Record-Route.
    let ws_listener = |slot: &mut Option<SocketAddr>, proto: &'static str| {
        let Some(a) = *slot else {
            return Ok(None);
        };
        let l = stream_listener(a).map_err(|err| StartError::Bind {
            proto,
            addr: a,
            err,
        })?;
        *slot = l.local_addr().ok();
        Ok::<_, StartError>(Some(l))
    };
    let ws = ws_listener(&mut config.websocket.ws, "ws")?;
    let wss = ws_listener(&mut config.websocket.wss, "wss")?;
    let listeners = crate::io::tcp::shared::Listeners {
        tcp: tcp_listener,
        tls: tls_listener,
        ws,
        wss,
    };
    let streams = listeners.tcp.is_some()
        || listeners.tls.is_some()
        || listeners.ws.is_some()
        || listeners.wss.is_some();
    // This node's name in the shared location's change feed: its address
    // and a random part, so a restarted node is a new one.
    let node: Arc<str> = format!(
        "{}#{:016x}",
        config.advertise,
        std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), unix_now())
    )
    .into();
    // The link to a shared location: followed by the sync thread, looked
    // at by every thread that writes to it.
    let redis = config
        .redis
        .clone()
        .map(|r| (r, Arc::new(crate::io::redis::RedisState::default())));
    let backing = |i: usize| -> Result<Backing, StartError> {
        Ok(match (&persistence, &redis) {
            (Some(p), _) => Backing::Journal(p.journal(i).map_err(store)?),
            (None, Some((r, state))) => {
                Backing::Redis(r.clone(), node.clone(), config.max_expires, state.clone())
            }
            (None, None) => Backing::Memory,
        })
    };
    let backings = (0..workers).map(&backing).collect::<Result<Vec<_>, _>>()?;
    // The operator's removals (over the HTTP endpoint) write through a
    // store of their own, opened only when the endpoint is.
    let admin_backing = if config.http.is_some() {
        backing(workers + 1)?
    } else {
        Backing::Memory
    };
    let hub_backing = if streams {
        backing(workers)?
    } else {
        Backing::Memory
    };
    let http_listener = match config.http {
        Some(h) if !h.ip().is_loopback() && config.http_token.is_none() => {
            return Err(StartError::HttpExposed(h));
        }
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
        Some(p) => Some(crate::io::keys::privacy(
            p,
            auth.as_ref().map(|a| a.users()).as_deref(),
            &config.realm,
        )?),
        None => None,
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut threads = Vec::new();
    let mut unwind = Unwind {
        stop: stop.clone(),
        hub: None,
        resolver: None,
        tap: None,
        redis_sync: None,
        sockets: Vec::new(),
        armed: true,
    };
    let tap = if let Some(t) = &config.trace {
        let locals = crate::io::hep::Locals {
            udp: udp.local_addr(),
            tcp: tcp_addr,
            tls: tls_addr,
            ws: config.websocket.ws,
            wss: config.websocket.wss,
        };
        let (tracer, thread) = crate::io::hep::Tracer::start(t.clone(), locals, stop.clone())
            .map_err(|err| StartError::Trace {
                collector: t.collector.clone(),
                err,
            })?;
        threads.push(thread);
        let tap: Arc<dyn crate::proto::shared::Tap> = tracer;
        unwind.tap = Some(tap.clone());
        Some(tap)
    } else {
        None
    };
    let salt = std::hash::RandomState::new();
    let mut shared = Shared::new(config, location, auth, crate::io::clock::now(), salt);
    shared.privacy = privacy;
    shared.stage_clock = Some(std::time::Instant::now);
    shared.tap = tap;
    shared.names.set_hosts(hosts);
    let shared = Arc::new(shared);
    let wakers = Arc::new(crate::io::wake::Wakers::default());
    let mut redis_sync = None;
    let redis_state = match redis {
        Some((r, state)) => {
            let (thread, waker) = crate::io::redis::spawn_sync(
                r.clone(),
                node.clone(),
                shared.clone(),
                state.clone(),
                stop.clone(),
            )
            .map_err(|e| StartError::Redis(e.to_string()))?;
            threads.push(thread);
            unwind.redis_sync = Some(waker.clone());
            redis_sync = Some(waker);
            // Nothing is served before this node holds every binding and
            // follows the changes.
            let waited = state.wait_synced(r.timeout * 3 + std::time::Duration::from_secs(1));
            if let Err(e) = waited {
                return Err(StartError::Redis(e));
            }
            Some(state)
        }
        None => None,
    };
    let recovered = match &shared.config.redis {
        Some(_) => Recovered {
            bindings: shared.location.len(unix_now()),
            skipped_lines: 0,
        },
        None => recovered,
    };
    let hub = if streams {
        let hub = TcpHub::new(
            shared.clone(),
            hub_backing,
            udp.sender().ok().map(Arc::new),
            tls.clone(),
            wakers.clone(),
            stop.clone(),
        );
        unwind.hub = Some(hub.clone());
        threads.extend(hub.start(listeners).map_err(bind)?);
        Some(hub)
    } else {
        None
    };
    threads.push(store_upkeep(shared.clone(), persistence.clone(), stop.clone()).map_err(bind)?);
    let (sleeper, waker) = std::os::unix::net::UnixStream::pair().map_err(bind)?;
    let sighup = waker.try_clone().map_err(bind)?;
    threads.push(
        watch_files(tls.clone(), shared.clone(), stop.clone(), sleeper, sighup).map_err(bind)?,
    );
    // A core for a thread of the driver: it asks the connection layer
    // whether a registered flow is still open.
    let core = || {
        let core = Core::new(shared.clone());
        match &hub {
            Some(h) => core.with_flows(h.clone()),
            None => core,
        }
    };
    if shared.transactions.is_some() {
        let sock = Arc::new(udp.sender().map_err(bind)?);
        let sender = Sender::new(
            shared.clone(),
            Some(sock),
            hub.clone()
                .map(|h| Arc::new(h) as Arc<dyn crate::io::send::Connections>),
            wakers.clone(),
        );
        threads
            .push(transaction_timers(core(), sender, wakers.clone(), stop.clone()).map_err(bind)?);
    }
    // Next hops named by domain names: the hosts file, then DNS.
    let names_sender = Sender::new(
        shared.clone(),
        Some(Arc::new(udp.sender().map_err(bind)?)),
        hub.clone()
            .map(|h| Arc::new(h) as Arc<dyn crate::io::send::Connections>),
        wakers.clone(),
    );
    let (resolver, thread) = crate::io::resolver::Resolver::start(
        shared.config.dns.clone(),
        core(),
        names_sender,
        stop.clone(),
    )
    .map_err(|e| StartError::Dns(format!("cannot start the resolver: {e}")))?;
    threads.push(thread);
    unwind.resolver = Some(resolver.clone());
    wakers.set_names(resolver.waker());
    let http_addr = http_listener.as_ref().and_then(|l| l.local_addr().ok());
    if let Some(l) = http_listener {
        unwind
            .sockets
            .push(socket2::Socket::from(l.try_clone().map_err(bind)?));
        let view = crate::io::http::View {
            shared: shared.clone(),
            hub: hub.clone(),
            udp: udp_addr,
            tcp: tcp_addr,
            tls: tls.clone(),
            redis: redis_state.clone(),
            persistence: persistence.clone(),
            store: Arc::new(std::sync::Mutex::new(admin_backing.open())),
            history: Arc::default(),
        };
        threads.push(crate::io::http::serve(view, l, stop.clone()).map_err(bind)?);
    }
    unwind.sockets.extend(udp.wakers().map_err(bind)?);
    udp.start(
        &shared,
        backings,
        hub.as_ref(),
        &wakers,
        &stop,
        &mut threads,
    )
    .map_err(bind)?;
    unwind.armed = false;
    let sockets = std::mem::take(&mut unwind.sockets);
    drop(unwind);
    let handle = ServerHandle {
        addr: udp_addr,
        tcp: tcp_addr,
        tls: tls_addr,
        http: http_addr,
        stop,
        waker,
        sockets,
        connection_limit: hub.as_ref().map(|h| h.limit()),
        hub,
        resolver,
        redis_sync,
        threads,
        shared,
        persistence,
    };
    Ok(Started { handle, recovered })
}

/// What a start that fails part-way leaves running is stopped: the stop
/// flag raised, the reactors woken to see it (and release the listeners),
/// the threads blocked on a socket woken.
struct Unwind {
    stop: Arc<AtomicBool>,
    hub: Option<Arc<TcpHub>>,
    resolver: Option<Arc<crate::io::resolver::Resolver>>,
    tap: Option<Arc<dyn crate::proto::shared::Tap>>,
    redis_sync: Option<crate::io::redis::SyncWaker>,
    /// Sockets threads block on, see [`wake_sockets`].
    sockets: Vec<socket2::Socket>,
    /// Cleared once the server is started.
    armed: bool,
}

impl Drop for Unwind {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = &self.hub {
            h.wake_all();
        }
        if let Some(r) = &self.resolver {
            r.wake();
        }
        if let Some(t) = &self.tap {
            t.wake();
        }
        if let Some(r) = &self.redis_sync {
            r.wake();
        }
        wake_sockets(&self.sockets);
    }
}

/// Wakes the threads blocked on these sockets (UDP workers in
/// `recvmmsg`, the operator endpoint in `accept`) once `stop` is raised:
/// shutting a socket's receiving side down returns them at once, so they
/// need no timeout to notice the stop (sending is not affected).
fn wake_sockets(sockets: &[socket2::Socket]) {
    for s in sockets {
        let _ = s.shutdown(std::net::Shutdown::Read);
    }
}

/// How often the stateful proxy's timers are checked while transactions
/// are under way (a new one may be due sooner than the earliest known).
const TICK: std::time::Duration = std::time::Duration::from_millis(10);

/// Runs the stateful proxy's timers (retransmissions, 408s, clean-up):
/// the core says when the next one is due, this thread sleeps until then
/// (at most [`TICK`]) and sends what firing them produced. With no
/// transaction at all it sleeps until one starts (or the stop).
fn transaction_timers(
    mut core: Core,
    sender: Sender,
    wakers: Arc<crate::io::wake::Wakers>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    let shared = core.shared().clone();
    std::thread::Builder::new()
        .name("transactions".into())
        .spawn(move || {
            let Some(tx) = shared.transactions.as_ref() else {
                return;
            };
            wakers.set_timers(std::thread::current());
            while !stop.load(Ordering::Relaxed) {
                match core.next_timer() {
                    None if tx.idle() => {
                        // Woken by a start or the stop; the timeout only
                        // bounds a wake-up lost to a start that failed.
                        std::thread::park_timeout(std::time::Duration::from_secs(1));
                        continue;
                    }
                    next => std::thread::sleep(
                        next.map_or(TICK, |t| {
                            t.saturating_duration_since(std::time::Instant::now())
                        })
                        .min(TICK),
                    ),
                }
                crate::io::drive::on_timer(&mut core, crate::io::clock::now());
                sender.send_all(core.extra());
            }
        })
}

/// What `sipsec serve --check` found usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Users loaded (0 without authentication).
    pub users: usize,
    /// The TLS key's description, when TLS is on.
    pub tls: Option<String>,
    /// Whether PrivaSIP keys were loaded.
    pub privacy: bool,
}

/// Validates what `start` would load — users (and their realm), the TLS
/// certificate and key, the PrivaSIP keys — without binding a socket or
/// touching the data directory (a running server may hold it).
pub fn check(config: &Config) -> Result<Checked, StartError> {
    if let Some(a) = config.open_service() {
        return Err(StartError::OpenService(a));
    }
    if let Some(h) = config.http.filter(|h| !h.ip().is_loopback()) {
        if config.http_token.is_none() {
            return Err(StartError::HttpExposed(h));
        }
    }
    let users = if config.auth {
        Some(load_users(config)?)
    } else {
        None
    };
    let tls = match &config.tls {
        Some(t) => Some(TlsContext::new(t)?.certs.info().description),
        None => None,
    };
    if let Some(p) = &config.privacy {
        crate::io::keys::privacy(p, users.as_ref(), &config.realm)?;
    }
    crate::io::resolver::read_hosts(&config.dns).map_err(StartError::Dns)?;
    Ok(Checked {
        users: users.map_or(0, |u| u.len()),
        tls,
        privacy: config.privacy.is_some(),
    })
}

/// Loads the users file and checks that someone is in the realm served.
fn load_users(config: &Config) -> Result<Users, StartError> {
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

/// How often the store checks for expired bindings.
const EXPIRY_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Expires bindings every [`EXPIRY_EVERY`] and compacts the journal
/// online when the journals wake it, having grown past the threshold;
/// asleep otherwise.
fn store_upkeep(
    shared: Arc<Shared>,
    persistence: Option<Arc<Persistence>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    use std::sync::atomic::Ordering;
    std::thread::Builder::new()
        .name("store".into())
        .spawn(move || {
            let threshold = shared.config.journal_compact_bytes;
            if let Some(p) = &persistence {
                p.wake_when_grown(threshold, std::thread::current());
            }
            let mut next_expiry = std::time::Instant::now() + EXPIRY_EVERY;
            while !stop.load(Ordering::Relaxed) {
                // Unparked by the stop and by the journals' growth.
                std::thread::park_timeout(
                    next_expiry.saturating_duration_since(std::time::Instant::now()),
                );
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let (now, mono) = (unix_now(), std::time::Instant::now());
                if mono >= next_expiry {
                    shared.location.expire(now);
                    let lifted = shared.guard.lift_expired(now);
                    shared
                        .metrics
                        .unbans
                        .fetch_add(lifted.len() as u64, Ordering::Relaxed);
                    crate::io::log::unbanned(&lifted);
                    next_expiry = mono + EXPIRY_EVERY;
                }
                let Some(persistence) = &persistence else {
                    continue;
                };
                if persistence.wants_compaction(threshold) {
                    match persistence.compact(&shared.location, now) {
                        Ok(()) => {
                            shared.metrics.compactions.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            shared
                                .metrics
                                .journal_errors
                                .fetch_add(1, Ordering::Relaxed);
                            crate::io::log::compaction_failed(persistence.dir(), &e);
                        }
                    }
                }
            }
        })
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
/// SIGHUP, without a restart. A broken file is reported and the old
/// contents kept. The thread sleeps on `wake` between checks: SIGHUP
/// writes to its peer `sighup` from the signal handler, and the server's
/// stop to another handle of that peer.
fn watch_files(
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
                    reload_certificates(ctx, &shared, forced);
                }
                if shared.auth.is_some() {
                    let stamp = file_stamp(&shared.config.users);
                    if forced || stamp != users_stamp {
                        users_stamp = stamp;
                        reload_users(&shared);
                    }
                }
            }
            signal_hook::low_level::unregister(hup);
        })
}

fn reload_certificates(ctx: &TlsContext, shared: &Shared, forced: bool) {
    use std::sync::atomic::Ordering;
    match ctx.certs.reload(forced) {
        Ok(true) => {
            shared.metrics.tls_reloads.fetch_add(1, Ordering::Relaxed);
            tracing::info!(target: "sipsec::tls", key = %ctx.certs.info().description, "TLS certificate reloaded");
        }
        Ok(false) => {}
        Err(e) => {
            shared
                .metrics
                .tls_reload_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::error!(target: "sipsec::tls", error = %e, "TLS reload refused, keeping the old certificate");
        }
    }
}

/// Swaps in the users file as it is now, all at once, and says what
/// changed; a file that does not load, or has nobody in the realm,
/// leaves the running set as it was.
fn reload_users(shared: &Shared) {
    let Some(auth) = &shared.auth else {
        return;
    };
    let file = shared.config.users.display();
    let new = match load_users(&shared.config) {
        Ok(u) => u,
        Err(e) => {
            tracing::error!(target: "sipsec::users", kept = auth.users().len(), error = %e, "users reload refused, keeping the users loaded");
            return;
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
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    tcp: Option<SocketAddr>,
    tls: Option<SocketAddr>,
    http: Option<SocketAddr>,
    stop: Arc<AtomicBool>,
    /// Wakes the threads that sleep on it (the file watcher) to stop.
    waker: std::os::unix::net::UnixStream,
    /// Sockets threads block on, shut down to stop them.
    sockets: Vec<socket2::Socket>,
    /// The connection reactors, woken to stop and to drain.
    hub: Option<Arc<TcpHub>>,
    /// Resolves next hops named by domain names.
    resolver: Arc<crate::io::resolver::Resolver>,
    /// Wakes the thread following the shared location (Redis).
    redis_sync: Option<crate::io::redis::SyncWaker>,
    threads: Vec<JoinHandle<()>>,
    shared: Arc<Shared>,
    connection_limit: Option<usize>,
    persistence: Option<Arc<Persistence>>,
}

/// What a graceful stop did.
#[derive(Debug)]
pub struct Drained {
    /// How long the transactions under way took to finish (or the deadline).
    pub waited: std::time::Duration,
    /// Transactions whose caller had no final response at the deadline
    /// (abandoned).
    pub transactions_left: u64,
    /// Connections closed (TLS with close_notify, WebSocket with a close frame).
    pub connections_closed: u64,
    /// Whether the journal reached stable storage (`None`: no journal).
    pub journal: Option<std::io::Result<()>>,
}

impl ServerHandle {
    /// The bound UDP address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bound TCP address, when TCP is on.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp
    }

    /// The state shared by the workers.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The operator endpoint's address, when on.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http
    }

    /// The bound TLS address, when TLS is on.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls
    }

    /// The most TCP and TLS connections served at once (from the
    /// configuration or the raised file-descriptor limit), when either is on.
    pub fn connection_limit(&self) -> Option<usize> {
        self.connection_limit
    }

    /// How many times the location journal waited for stable storage
    /// (`None`: no journal).
    pub fn journal_syncs(&self) -> Option<u64> {
        self.persistence.as_ref().map(|p| p.syncs())
    }

    /// Raises `stop`, wakes the threads sleeping on `waker`, on a socket
    /// and in the reactors, and waits for every thread.
    fn stop_threads(&mut self) {
        use std::io::Write;
        self.stop.store(true, Ordering::Relaxed);
        let _ = (&self.waker).write(b"s");
        if let Some(h) = &self.hub {
            h.wake_all();
        }
        self.resolver.wake();
        if let Some(t) = self.shared.tap.as_ref() {
            t.wake();
        }
        if let Some(r) = &self.redis_sync {
            r.wake();
        }
        wake_sockets(&self.sockets);
        for t in self.threads.iter() {
            t.thread().unpark();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    /// Stops the threads and waits for them.
    pub fn shutdown(mut self) {
        self.stop_threads();
    }

    /// Stops gracefully: new connections and new requests are refused
    /// (503 with Retry-After, so phones turn elsewhere), transactions under
    /// way finish until `deadline`, then every connection is closed (TLS
    /// with close_notify) and the journal is put on stable storage.
    pub fn drain(mut self, deadline: std::time::Duration) -> Drained {
        let start = std::time::Instant::now();
        self.shared.draining.store(true, Ordering::Relaxed);
        if let Some(h) = &self.hub {
            h.wake_all();
        }
        let shared = self.shared.clone();
        let m = &shared.metrics;
        let active = || {
            self.shared
                .transactions
                .as_ref()
                .map_or(0, |t| t.unanswered() as u64)
        };
        while active() > 0 && start.elapsed() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let waited = start.elapsed();
        let transactions_left = active();
        let closed_before = m.closed_for(crate::proto::metrics::CloseReason::Shutdown);
        self.stop_threads();
        Drained {
            waited,
            transactions_left,
            connections_closed: m
                .closed_for(crate::proto::metrics::CloseReason::Shutdown)
                .saturating_sub(closed_before),
            journal: self.persistence.as_ref().map(|p| p.sync()),
        }
    }

    /// Waits for the threads (they run until the process ends).
    pub fn wait(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A TCP listener with a deep accept queue: a burst of phones (a restart,
/// a NAT rebinding) waits in the kernel while the reactors take them at
/// their pace, instead of overflowing a short queue into SYN
/// retransmissions a second later. The kernel caps it at somaxconn.
/// Binds UDP on `udp` and, when asked, TCP on `tcp`; TCP port 0 means
/// the UDP port, so one address names the server on both transports. With
/// both at port 0 the port must be free for both: a port the kernel gave
/// UDP that a TCP socket already holds is given back and another tried.
fn bind_udp_and_tcp(
    config: &Config,
    workers: usize,
    icmp_errors: bool,
) -> Result<(UdpServer, Option<std::net::TcpListener>), StartError> {
    let (udp, tcp) = (config.udp, config.tcp);
    let any = udp.port() == 0 && tcp.is_some_and(|t| t.port() == 0);
    let mut tries = 0;
    loop {
        let server =
            UdpServer::bind(udp, workers, icmp_errors, config.udp_balance).map_err(|err| {
                StartError::Bind {
                    proto: "udp",
                    addr: udp,
                    err,
                }
            })?;
        let Some(mut t) = tcp else {
            return Ok((server, None));
        };
        if t.port() == 0 {
            t.set_port(server.local_addr().port());
        }
        match stream_listener(t) {
            Ok(l) => return Ok((server, Some(l))),
            Err(e) if any && e.kind() == std::io::ErrorKind::AddrInUse && tries < 16 => {
                tries += 1;
            }
            Err(err) => {
                return Err(StartError::Bind {
                    proto: "tcp",
                    addr: t,
                    err,
                })
            }
        }
    }
}

fn stream_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.bind(&addr.into())?;
    sock.listen(ACCEPT_QUEUE)?;
    Ok(sock.into())
}

/// Connections the kernel may hold completed for a listener.
const ACCEPT_QUEUE: i32 = 4096;
