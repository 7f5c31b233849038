//! Starting a configured server: recovery, users, workers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::config::{Config, Mode};
use crate::io::clock::unix_now;
use crate::io::drive::Storage;
use crate::io::files::{load_users, watch_files};
use crate::io::handle::{wake_sockets, ServerHandle};
use crate::io::journal::{Persistence, Recovered};
use crate::io::send::Sender;
use crate::io::sinks::Sinks;
use crate::io::start_error::StartError;
use crate::io::tcp::shared::{Listeners, TcpHub};
use crate::io::tls::TlsContext;
use crate::io::udp::UdpServer;
use crate::proto::auth::Authenticator;
use crate::proto::core::Core;
use crate::proto::location::MemoryLocation;
use crate::proto::shared::{Secret, Shared};

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
    survive_file_size_limit();
    refuse_unsafe(&config)?;
    // Read before anything starts: a bad hosts file stops the start here.
    let hosts = crate::io::resolver::read_hosts(&config.dns).map_err(StartError::Dns)?;
    let location = Arc::new(MemoryLocation::new(std::hash::RandomState::new()));
    let (persistence, recovered) = recover(&config, &location)?;
    let auth = authenticator(&config)?;
    let workers = config.workers.max(1);
    prepare_trunks(&mut config)?;
    let (udp, listeners, tls) = bind_all(&mut config, workers)?;
    let addr = config.udp;
    let bind = |err| StartError::Bind {
        proto: "udp",
        addr,
        err,
    };
    let tcp_addr = listeners.tcp.as_ref().and_then(|l| l.local_addr().ok());
    let tls_addr = listeners.tls.as_ref().and_then(|l| l.local_addr().ok());
    let streams = listeners.tcp.is_some()
        || listeners.tls.is_some()
        || listeners.ws.is_some()
        || listeners.wss.is_some();
    let Stores {
        node,
        redis,
        workers: backings,
        admin: admin_store,
        hub: hub_stores,
    } = stores(&config, persistence.as_deref(), workers, streams)?;
    let http_listener = http_listener(&config)?;
    let udp_addr = udp.local_addr();
    let privacy = privacy(&config, auth.as_ref())?;
    let stir = crate::io::keys::stir(&config.stir, config.mode == Mode::Proxy)?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut threads = Vec::new();
    let mut unwind = Unwind::new(stop.clone());
    let listening = (udp.local_addr(), tcp_addr, tls_addr);
    let tap = start_tracer(&config, listening, &mut threads, &mut unwind)?;
    let mut shared = Shared::new(
        config,
        location,
        auth,
        crate::io::clock::now(),
        std::hash::RandomState::new(),
    );
    with_keys(&mut shared, privacy, stir)?;
    let call_log = call_log(&shared)?;
    let shared = equip(shared, hosts);
    let sinks = Sinks { tap, call_log };
    let wakers = Arc::new(crate::io::wake::Wakers::default());
    let (redis_state, redis_sync) = match redis {
        Some((r, state)) => {
            let waker =
                follow_shared_location(&r, &node, &shared, &state, &mut threads, &mut unwind)?;
            (Some(state), Some(waker))
        }
        None => (None, None),
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
            sinks.clone(),
            hub_stores,
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
    let waker = start_upkeep(
        &shared,
        persistence.as_ref(),
        tls.as_ref(),
        &mut threads,
        &stop,
    )
    .map_err(bind)?;
    let resolver = start_timers_and_resolver(
        &shared,
        &sinks,
        &udp,
        hub.as_ref(),
        &wakers,
        &mut threads,
        &mut unwind,
    )?;
    let http_addr = http_listener.as_ref().and_then(|l| l.local_addr().ok());
    if let Some(l) = http_listener {
        let view = crate::io::http::View {
            shared: shared.clone(),
            hub: hub.clone(),
            udp: udp_addr,
            tcp: tcp_addr,
            tls: tls.clone(),
            redis: redis_state.clone(),
            persistence: persistence.clone(),
            store: Arc::new(std::sync::Mutex::new(admin_store)),
            history: Arc::default(),
            sender: operator_sender(&shared, &sinks, &udp, hub.as_ref(), &wakers),
            sinks: sinks.clone(),
        };
        start_http(l, view, &mut threads, &mut unwind).map_err(bind)?;
    }
    unwind.sockets.extend(udp.wakers().map_err(bind)?);
    udp.start(
        (&shared, &sinks),
        backings,
        hub.as_ref(),
        &wakers,
        &stop,
        &mut threads,
    )
    .map_err(bind)?;
    unwind.armed = false;
    let sockets = std::mem::take(&mut unwind.sockets);
    let media = unwind.media.take();
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
        media,
        redis_sync,
        threads,
        shared,
        sinks,
        persistence,
    };
    Ok(Started { handle, recovered })
}

/// Every listening socket, bound before anything starts: UDP (one
/// socket per worker, or shared), TCP, TLS (with its context) and the
/// WebSocket listeners. The advertised port follows UDP's when it was 0.
fn bind_all(
    config: &mut Config,
    workers: usize,
) -> Result<(UdpServer, Listeners, Option<Arc<TlsContext>>), StartError> {
    // Only a stateful proxy acts on ICMP errors (its transactions fail on
    // them), so only its sockets ask for them.
    let icmp_errors = config.stateful && config.mode == Mode::Proxy;
    let (udp, tcp_listener) = bind_udp_and_tcp(config, workers, icmp_errors)?;
    if config.advertise.port() == 0 {
        config.advertise.set_port(udp.local_addr().port());
    }
    let (listeners, tls) = bind_streams(config, tcp_listener)?;
    Ok((udp, listeners, tls))
}

/// Resolves the trunks' gateway names and reads their password files.
fn prepare_trunks(config: &mut Config) -> Result<(), StartError> {
    crate::io::trunk_files::prepare(&mut config.trunks).map_err(StartError::Trunk)
}

/// What carries the operator's requests (a dialog's BYEs) out.
fn operator_sender(
    shared: &Arc<Shared>,
    sinks: &Sinks,
    udp: &UdpServer,
    hub: Option<&Arc<TcpHub>>,
    wakers: &Arc<crate::io::wake::Wakers>,
) -> Option<Arc<Sender>> {
    let udp = udp.sender().ok()?;
    Some(Arc::new(Sender::new(
        shared.clone(),
        sinks.clone(),
        Some(Arc::new(udp)),
        hub.map(|h| Arc::new(h.clone()) as Arc<dyn crate::io::send::Connections>),
        wakers.clone(),
    )))
}

/// The shared state with what the driver provides: the stage clock, the
/// hosts file.
fn equip(
    mut shared: Shared,
    hosts: std::collections::HashMap<String, std::net::IpAddr>,
) -> Arc<Shared> {
    shared.stage_clock = Some(std::time::Instant::now);
    shared.names.set_hosts(hosts);
    Arc::new(shared)
}

/// The call records journal, when the proxy keeps records.
fn call_log(shared: &Shared) -> Result<Option<Arc<dyn crate::io::sinks::CallLog>>, StartError> {
    if shared.dialogs.is_none() || !shared.config.calls.records {
        return Ok(None);
    }
    let c = &shared.config;
    let path = c
        .calls
        .file
        .clone()
        .unwrap_or_else(|| c.data_dir.join("calls.jsonl"));
    let file = crate::io::records::CallFile::open(&path)
        .map_err(|e| StartError::CallRecords(format!("{}: {e}", path.display())))?;
    let Some(redis) = &c.redis else {
        return Ok(Some(Arc::new(file)));
    };
    // With the shared location, a copy of each record goes to its Redis
    // too; the thread ends once the server (the queue's sender) is gone.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (both, _thread) = crate::io::records::CallFileAndStream::start(file, redis, stop)
        .map_err(StartError::CallRecords)?;
    Ok(Some(Arc::new(both)))
}

/// The privacy and STIR/SHAKEN services into `shared`, and a proxy's
/// route key kept in its data directory (`io::keys::route_key`), so the
/// proofs in its Record-Routes hold across a restart.
fn with_keys(
    shared: &mut Shared,
    privacy: Option<crate::proto::privacy::Privacy>,
    stir: Option<crate::proto::stir::Stir>,
) -> Result<(), StartError> {
    (shared.privacy, shared.stir) = (privacy, stir);
    if shared.config.mode == Mode::Proxy {
        // A Redis-located node may have made no data directory yet.
        let _ = std::fs::create_dir_all(&shared.config.data_dir);
        let path = shared.config.data_dir.join("route.key");
        shared.route_key = Secret(crate::io::keys::route_key(&path).map_err(StartError::Random)?);
    }
    Ok(())
}

/// PrivaSIP's keys, when configured.
fn privacy(
    config: &Config,
    auth: Option<&Authenticator>,
) -> Result<Option<crate::proto::privacy::Privacy>, StartError> {
    let Some(p) = &config.privacy else {
        return Ok(None);
    };
    let users = auth.map(|a| a.users());
    let ticket_file = config.data_dir.join("privasip3-tickets.key");
    if p.tickets > 0 {
        // A Redis-located node may have made no data directory yet.
        let _ = std::fs::create_dir_all(&config.data_dir);
    }
    Ok(Some(crate::io::keys::privacy(
        p,
        users.as_deref(),
        &config.realm,
        Some(&ticket_file),
    )?))
}

/// Where binding changes go, per thread.
struct Stores {
    /// This node's name in a shared location's change feed.
    node: Arc<str>,
    /// The link to a shared location: followed by the sync thread, looked
    /// at by every thread that writes to it.
    redis: Option<(
        crate::config::RedisSettings,
        Arc<crate::io::redis::RedisState>,
    )>,
    /// One per UDP worker.
    workers: Vec<Storage>,
    /// The operator's removals (over the HTTP endpoint), opened only when
    /// the endpoint is.
    admin: Storage,
    /// One per connection reactor, opened only with stream listeners.
    hub: Vec<Storage>,
}

fn stores(
    config: &Config,
    persistence: Option<&Persistence>,
    workers: usize,
    streams: bool,
) -> Result<Stores, StartError> {
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
    let backing = |i: usize| backing(config, persistence, redis.as_ref(), &node, i);
    let backings = (0..workers).map(backing).collect::<Result<Vec<_>, _>>()?;
    // Each connection reactor stores through its own journal, numbered
    // after the UDP workers': a reactor deciding never waits for another
    // to finish its decision.
    let reactors = if streams {
        config.connections.reactor_count()
    } else {
        0
    };
    let hub_stores = (workers..workers + reactors)
        .map(backing)
        .collect::<Result<Vec<_>, _>>()?;
    // The operator's removals (over the HTTP endpoint) write through a
    // store of their own, opened only when the endpoint is.
    let admin_store = if config.http.is_some() {
        backing(workers + reactors)?
    } else {
        Storage::Memory
    };
    Ok(Stores {
        node,
        redis,
        workers: backings,
        admin: admin_store,
        hub: hub_stores,
    })
}

/// The threads that keep the store and watch the files (certificates,
/// users); returns what wakes the watcher (SIGHUP's path too).
fn start_upkeep(
    shared: &Arc<Shared>,
    persistence: Option<&Arc<Persistence>>,
    tls: Option<&Arc<TlsContext>>,
    threads: &mut Vec<JoinHandle<()>>,
    stop: &Arc<AtomicBool>,
) -> std::io::Result<std::os::unix::net::UnixStream> {
    threads.push(store_upkeep(
        shared.clone(),
        persistence.cloned(),
        stop.clone(),
    )?);
    let (sleeper, waker) = std::os::unix::net::UnixStream::pair()?;
    let sighup = waker.try_clone()?;
    let watcher = watch_files(tls.cloned(), shared.clone(), stop.clone(), sleeper, sighup)?;
    threads.push(watcher);
    Ok(waker)
}

/// The operator's HTTP endpoint on `listener`, serving `view`.
fn start_http(
    listener: std::net::TcpListener,
    view: crate::io::http::View,
    threads: &mut Vec<JoinHandle<()>>,
    unwind: &mut Unwind,
) -> std::io::Result<()> {
    let blocked_on = socket2::Socket::from(listener.try_clone()?);
    unwind.sockets.push(blocked_on);
    threads.push(crate::io::http::serve(view, listener, unwind.stop.clone())?);
    Ok(())
}

/// A file-size limit (ulimit -f) must make a journal write fail with
/// EFBIG, answered 500 like a full disk, not kill the server.
fn survive_file_size_limit() {
    static XFSZ: std::sync::Once = std::sync::Once::new();
    XFSZ.call_once(|| {
        let _ = signal_hook::flag::register(
            signal_hook::consts::SIGXFSZ,
            Arc::new(std::sync::atomic::AtomicBool::new(false)),
        );
    });
}

/// Where thread `i` stores binding changes: its own journal, the shared
/// location's Redis server, or nowhere (memory only).
fn backing(
    config: &Config,
    persistence: Option<&Persistence>,
    redis: Option<&(
        crate::config::RedisSettings,
        Arc<crate::io::redis::RedisState>,
    )>,
    node: &Arc<str>,
    i: usize,
) -> Result<Storage, StartError> {
    let store = |err| StartError::Store {
        dir: config.data_dir.display().to_string(),
        err,
    };
    Ok(match (persistence, redis) {
        (Some(p), _) => Storage::Journal(p.journal(i).map_err(store)?),
        (None, Some((r, state))) => {
            Storage::redis(r, node.clone(), config.max_expires, state.clone())
        }
        (None, None) => Storage::Memory,
    })
}

/// The location as stored: the embedded journal recovered, or nothing yet
/// with a Redis server shared with other nodes (whose bindings the sync
/// thread reads into memory before anything is served).
fn recover(
    config: &Config,
    location: &MemoryLocation,
) -> Result<(Option<Arc<Persistence>>, Recovered), StartError> {
    let store = |err| StartError::Store {
        dir: config.data_dir.display().to_string(),
        err,
    };
    match &config.redis {
        None => {
            let p = Arc::new(Persistence::new(&config.data_dir, config.durability).map_err(store)?);
            let recovered = p.recover(location, unix_now()).map_err(store)?;
            Ok((Some(p), recovered))
        }
        Some(_) => Ok((None, Recovered::default())),
    }
}

/// Digest authentication, when on: the users file and the nonce key.
fn authenticator(config: &Config) -> Result<Option<Authenticator>, StartError> {
    if !config.auth {
        return Ok(None);
    }
    let users = load_users(config)?;
    let key = crate::io::keys::nonce_key(&config.data_dir.join("nonce.key"), config.nonce_ttl)
        .map_err(StartError::Random)?;
    Ok(Some(Authenticator::new(
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
    )))
}

/// The TLS context and the stream listeners besides TCP (bound before
/// anything starts); the addresses they bound (port 0 picks one) go back
/// into the config, which names them in Via and Record-Route.
fn bind_streams(
    config: &mut Config,
    tcp: Option<std::net::TcpListener>,
) -> Result<(Listeners, Option<Arc<TlsContext>>), StartError> {
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
        if !a.ip().is_loopback() && config.websocket.origins.is_empty() {
            crate::io::log::ws_any_origin(proto, a);
        }
        Ok::<_, StartError>(Some(l))
    };
    let ws = ws_listener(&mut config.websocket.ws, "ws")?;
    let wss = ws_listener(&mut config.websocket.wss, "wss")?;
    let listeners = Listeners {
        tcp,
        tls: tls_listener,
        ws,
        wss,
    };
    Ok((listeners, tls))
}

/// The operator's HTTP endpoint, bound; refused on a non-loopback address
/// without a token.
fn http_listener(config: &Config) -> Result<Option<std::net::TcpListener>, StartError> {
    match config.http {
        Some(h) if !h.ip().is_loopback() && config.http_token.is_none() => {
            Err(StartError::HttpExposed(h))
        }
        Some(h) => Ok(Some(std::net::TcpListener::bind(h).map_err(|err| {
            StartError::Bind {
                proto: "http",
                addr: h,
                err,
            }
        })?)),
        None => Ok(None),
    }
}

/// The HEP tracer, when configured, naming the UDP, TCP and TLS
/// addresses listened on: its thread runs from here on.
fn start_tracer(
    config: &Config,
    (udp, tcp, tls): (SocketAddr, Option<SocketAddr>, Option<SocketAddr>),
    threads: &mut Vec<JoinHandle<()>>,
    unwind: &mut Unwind,
) -> Result<Option<Arc<dyn crate::io::sinks::Tap>>, StartError> {
    let Some(t) = &config.trace else {
        return Ok(None);
    };
    let locals = crate::io::hep::Locals {
        udp,
        tcp,
        tls,
        ws: config.websocket.ws,
        wss: config.websocket.wss,
    };
    let (tracer, thread) = crate::io::hep::Tracer::start(t.clone(), locals, unwind.stop.clone())
        .map_err(|err| StartError::Trace {
            collector: t.collector.clone(),
            err,
        })?;
    threads.push(thread);
    let tap: Arc<dyn crate::io::sinks::Tap> = tracer;
    unwind.tap = Some(tap.clone());
    Ok(Some(tap))
}

/// Starts the thread that follows a location shared over Redis and waits
/// until this node holds every binding and follows the changes: nothing
/// is served before.
fn follow_shared_location(
    r: &crate::config::RedisSettings,
    node: &Arc<str>,
    shared: &Arc<Shared>,
    state: &Arc<crate::io::redis::RedisState>,
    threads: &mut Vec<JoinHandle<()>>,
    unwind: &mut Unwind,
) -> Result<crate::io::redis::SyncWaker, StartError> {
    let (thread, waker) = crate::io::redis::spawn_sync(
        r.clone(),
        node.clone(),
        shared.clone(),
        state.clone(),
        unwind.stop.clone(),
    )
    .map_err(|e| StartError::Redis(e.to_string()))?;
    threads.push(thread);
    unwind.redis_sync = Some(waker.clone());
    state
        .wait_synced(r.timeout * 3 + std::time::Duration::from_secs(1))
        .map_err(StartError::Redis)?;
    Ok(waker)
}

/// The threads that wake on their own: the transactions' timers (a
/// stateful proxy) and the resolver of next hops named by domain names
/// (the hosts file, then DNS).
fn start_timers_and_resolver(
    shared: &Arc<Shared>,
    sinks: &Sinks,
    udp: &UdpServer,
    hub: Option<&Arc<TcpHub>>,
    wakers: &Arc<crate::io::wake::Wakers>,
    threads: &mut Vec<JoinHandle<()>>,
    unwind: &mut Unwind,
) -> Result<Arc<crate::io::resolver::Resolver>, StartError> {
    let bind = |err| StartError::Bind {
        proto: "udp",
        addr: shared.config.udp,
        err,
    };
    let stop = &unwind.stop;
    let core = || Core::new(shared.clone());
    let sender = || -> Result<Sender, StartError> {
        Ok(Sender::new(
            shared.clone(),
            sinks.clone(),
            Some(Arc::new(udp.sender().map_err(bind)?)),
            hub.map(|h| Arc::new(h.clone()) as Arc<dyn crate::io::send::Connections>),
            wakers.clone(),
        ))
    };
    if shared.transactions.is_some() {
        let timers = transaction_timers(core(), sender()?, wakers.clone(), stop.clone());
        threads.push(timers.map_err(bind)?);
    }
    let (resolver, thread) = crate::io::resolver::Resolver::start(
        shared.config.dns.clone(),
        core(),
        sender()?,
        stop.clone(),
    )
    .map_err(|e| StartError::Dns(format!("cannot start the resolver: {e}")))?;
    threads.push(thread);
    unwind.resolver = Some(resolver.clone());
    wakers.set_names(resolver.waker());
    if shared.media.is_some() {
        let (pump, thread) = crate::io::media::start(
            shared.config.media.relays.clone(),
            core(),
            sender()?,
            stop.clone(),
        )
        .map_err(|e| StartError::Media(format!("cannot start the media thread: {e}")))?;
        threads.push(thread);
        unwind.media = Some(pump.clone());
        wakers.set_media(pump);
    }
    let probes = crate::io::probe::start(shared.clone(), udp.local_addr(), stop.clone());
    threads.extend(probes.map_err(bind)?);
    if shared.stir.as_ref().is_some_and(|s| s.verify.is_some()) {
        let mut made = Vec::new();
        for _ in 0..shared
            .config
            .stir
            .verify
            .as_ref()
            .map_or(0, |v| v.fetch.fetchers)
        {
            made.push((core(), sender()?));
        }
        let mut made = made.into_iter();
        let (fetcher, fetchers) = crate::io::certs::start(
            shared.clone(),
            move || made.next().expect("one per thread"),
            stop.clone(),
        )
        .map_err(|e| StartError::Stir(format!("cannot start the certificate fetcher: {e}")))?;
        threads.extend(fetchers);
        wakers.set_certs(fetcher);
    }
    Ok(resolver)
}

/// What a start that fails part-way leaves running is stopped: the stop
/// flag raised, the reactors woken to see it (and release the listeners),
/// the threads blocked on a socket woken.
struct Unwind {
    stop: Arc<AtomicBool>,
    hub: Option<Arc<TcpHub>>,
    resolver: Option<Arc<crate::io::resolver::Resolver>>,
    media: Option<Arc<crate::io::media::Pump>>,
    tap: Option<Arc<dyn crate::io::sinks::Tap>>,
    redis_sync: Option<crate::io::redis::SyncWaker>,
    /// Sockets threads block on, see [`wake_sockets`].
    sockets: Vec<socket2::Socket>,
    /// Cleared once the server is started.
    armed: bool,
}

impl Unwind {
    /// Armed: dropped before the start completes, it stops what started.
    fn new(stop: Arc<AtomicBool>) -> Self {
        Self {
            stop,
            hub: None,
            resolver: None,
            media: None,
            tap: None,
            redis_sync: None,
            sockets: Vec::new(),
            armed: true,
        }
    }
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
        if let Some(m) = &self.media {
            m.wake();
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

/// How often the stateful proxy's timers are checked while transactions
/// are under way: a transaction that starts may be due sooner than the
/// earliest known, but never sooner than 100 ms after it starts (the
/// shortest `dns.failover_after` and the shortest `[timers] t1_ms`), so
/// looking every 50 ms sees it in time without a wake-up per start.
const TICK: std::time::Duration = std::time::Duration::from_millis(50);

/// Timers due within this of each other fire together: under load one
/// is due every few milliseconds (each call leaves clean-up timers
/// behind), and waking for each cost more than the timers themselves.
/// SIP's shortest timer is T1 (500 ms, at least 100 ms), so a
/// retransmission 20 ms late changes nothing a peer can tell.
const COALESCE: std::time::Duration = std::time::Duration::from_millis(20);

/// Runs the stateful proxy's timers (retransmissions, 408s, clean-up):
/// the core says when the next one is due, this thread sleeps until then
/// (at least [`COALESCE`], at most [`TICK`]) and sends what firing them
/// produced. With no transaction at all it sleeps until one starts (or
/// the stop).
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
                        .clamp(COALESCE, TICK),
                    ),
                }
                crate::io::drive::on_timer(&mut core, sender.sinks(), crate::io::clock::now());
                sender.send_all(core.extra());
            }
        })
}

/// Settings no server starts with: an open service (no authentication
/// beyond loopback, unasked), `[media]` without a stateful proxy.
fn refuse_unsafe(config: &Config) -> Result<(), StartError> {
    if let Some(a) = config.open_service() {
        return Err(StartError::OpenService(a));
    }
    if let Some(m) = config.media_problem() {
        return Err(StartError::Media(m));
    }
    Ok(())
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
    refuse_unsafe(config)?;
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
        crate::io::keys::privacy(p, users.as_ref(), &config.realm, None)?;
    }
    crate::io::keys::stir(&config.stir, config.mode == Mode::Proxy)?;
    crate::io::resolver::read_hosts(&config.dns).map_err(StartError::Dns)?;
    Ok(Checked {
        users: users.map_or(0, |u| u.len()),
        tls,
        privacy: config.privacy.is_some(),
    })
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

/// A TCP listener with a deep accept queue: a burst of phones (a restart,
/// a NAT rebinding) waits in the kernel while the reactors take them at
/// their pace, instead of overflowing a short queue into SYN
/// retransmissions a second later. The kernel caps it at somaxconn.
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
