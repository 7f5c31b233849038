//! A location shared by several nodes in Redis (or Valkey), see
//! `docs/scale-out.md`.
//!
//! Layout, under the configured prefix `P`:
//! - `P` `aor:` AoR — a hash, one field per contact; the value is the
//!   binding as a journal line (expiry, Call-ID, CSeq, source, Path, flow
//!   and the node that holds the flow). Each write sets the key to expire
//!   after twice the longest registration granted, so it outlives its
//!   bindings and an AoR nobody refreshes goes away; a binding past its
//!   time is ignored by readers until then.
//! - `P` `events` — a channel: every change, as the journal lines of its
//!   records after a first line naming the node that made it. A change is
//!   published only when some other node listens: each node's feed also
//!   subscribes to `P` `node:` NODE, and a script compares the two
//!   channels' subscriber counts in the same step as the publish, so a
//!   lone node does not read its own changes back and a node that
//!   subscribes meanwhile gets every change its first full read misses.
//!
//! Each worker writes through its own [`RedisStore`] connection, every
//! change of a batch in one pipelined round trip, and answers only
//! after Redis acknowledged it (with `appendfsync always`, after Redis
//! wrote it to disk). One [`spawn_sync`] thread per node keeps the node's
//! memory a copy of Redis: a full read on (re)connecting, then the
//! changes other nodes publish. Lookups never leave the node.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::RedisSettings;
use crate::proto::location::{Binding, MemoryLocation, Record, StoreError};
use crate::proto::records::{decode, encode};

/// The node's link to Redis, as the operator sees it.
#[derive(Debug, Default)]
pub struct RedisState {
    /// The change feed is subscribed and the copy in memory is complete.
    pub synced: AtomicBool,
    /// Full reads of the shared location (at start and on reconnecting).
    pub resyncs: AtomicU64,
    /// Changes applied from other nodes.
    pub applied: AtomicU64,
    /// Nodes heard from in the last minute (this one included).
    pub nodes: AtomicU64,
    /// Why the last attempt to follow the shared location failed.
    pub last_error: std::sync::Mutex<Option<String>>,
    /// The last attempt was refused (the login, a permission, the
    /// client's settings): trying again cures nothing until the
    /// credentials or the ACL change.
    pub refused: AtomicBool,
}

impl RedisState {
    /// Waits until the first full read is done, or `timeout` passed, or
    /// Redis refused the node; `Err` says why it is not.
    pub fn wait_synced(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        while !self.synced.load(Ordering::Relaxed) {
            if self.refused.load(Ordering::Acquire) {
                let e = self.last_error.lock().unwrap_or_else(|e| e.into_inner());
                return Err(format!(
                    "{}; refused, so not tried again at start (check the user, its password and its ACL)",
                    e.as_deref().unwrap_or("refused")
                ));
            }
            if Instant::now() >= deadline {
                let e = self.last_error.lock().unwrap_or_else(|e| e.into_inner());
                return Err(e.clone().unwrap_or_else(|| "no answer".into()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

/// A client for `s`: over `rediss://` with the configured CA (else the
/// system's trust store) and client certificate, if any.
pub(crate) fn client(s: &RedisSettings) -> Result<redis::Client, String> {
    use redis::IntoConnectionInfo;
    let named = |e: redis::RedisError| format!("{}: {e}", redact(&s.url));
    let mut info = s.url.as_str().into_connection_info().map_err(named)?;
    if let Some(p) = &s.password {
        let login = info.redis_settings().clone().set_password(&p.0);
        info = info.set_redis_settings(login);
    }
    if s.ca.is_none() && s.client_cert.is_none() {
        return redis::Client::open(info).map_err(named);
    }
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| format!("{}: {}: {e}", redact(&s.url), p.display()))
    };
    let client_tls = match &s.client_cert {
        Some((cert, key)) => Some(redis::ClientTlsConfig {
            client_cert: read(cert)?,
            client_key: read(key)?,
        }),
        None => None,
    };
    let root_cert = s.ca.as_deref().map(read).transpose()?;
    redis::Client::build_with_tls(
        info,
        redis::TlsCertificates {
            client_tls,
            root_cert,
        },
    )
    .map_err(named)
}

pub use crate::config::redact;

fn connect(client: &redis::Client, timeout: Duration) -> redis::RedisResult<redis::Connection> {
    let conn = client.get_connection_with_timeout(timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    Ok(conn)
}

fn aor_key(prefix: &str, aor: &str) -> String {
    format!("{prefix}aor:{aor}")
}

fn channel(prefix: &str) -> String {
    format!("{prefix}events")
}

/// The channel only `node`'s feed subscribes to, beside [`channel`].
fn presence(prefix: &str, node: &str) -> String {
    format!("{prefix}node:{node}")
}

/// Stores a batch of changes and publishes them, in one step that Redis
/// runs alone. `KEYS`: the AoRs' hashes. `ARGV`: the key lifetime, the
/// remaining lifetime below which it is renewed, the feed channel, this
/// node's presence channel, this node's name, then per key the number of
/// contacts to set and to delete, the contact/line pairs to set and the
/// contact/line pairs to delete (a deletion's line is its record in the
/// feed).
///
/// A key lives twice the longest registration and is renewed once less
/// than the longest registration is left, so it outlives each of its
/// bindings, an AoR nobody refreshes disappears by itself, and most
/// refreshes cost no `EXPIRE` (nor a line in the append-only file).
/// The change is published only when a node other than this one (whose
/// presence channel counts it) listens, and only then is the message
/// built, from the lines already sent for the hashes: a lone node sends
/// each line once. A node that subscribes after this step finds the
/// change in its first full read.
const STORE: &str = "\
local others = redis.call('PUBSUB', 'NUMSUB', ARGV[3])[2] - redis.call('PUBSUB', 'NUMSUB', ARGV[4])[2]
local event = nil
if others > 0 then event = {ARGV[5]} end
local at = 6
for _, key in ipairs(KEYS) do
  local set, del = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  at = at + 2
  if set > 0 then
    redis.call('HSET', key, unpack(ARGV, at, at + 2 * set - 1))
    if event then
      for i = 1, set do event[#event + 1] = ARGV[at + 2 * i - 1] end
    end
    at = at + 2 * set
  end
  if del > 0 then
    local contacts = {}
    for i = 1, del do
      contacts[i] = ARGV[at + 2 * i - 2]
      if event then event[#event + 1] = ARGV[at + 2 * i - 1] end
    end
    redis.call('HDEL', key, unpack(contacts))
    at = at + 2 * del
  end
  if set > 0 and redis.call('TTL', key) < tonumber(ARGV[2]) then
    redis.call('EXPIRE', key, ARGV[1])
  end
end
if event then redis.call('PUBLISH', ARGV[3], table.concat(event, '\\n')) end
return 0";

/// One worker's connection for writing changes.
pub struct RedisStore {
    client: redis::Client,
    settings: RedisSettings,
    conn: Option<redis::Connection>,
    /// The SHA-1 of [`STORE`], loaded on connecting.
    script: String,
    /// The batch sent and not yet answered, as sent.
    sent: Option<Vec<u8>>,
    /// After a failure, no new connection is tried before this.
    retry_at: Option<Instant>,
    node: Arc<str>,
    key_ttl: i64,
    line: Vec<u8>,
    /// The node's link to Redis, as its sync thread sees it.
    state: Arc<RedisState>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &redact(&self.settings.url))
            .field("connected", &self.conn.is_some())
            .finish()
    }
}

impl RedisStore {
    /// A store writing to the server `settings` names, as node `node`,
    /// for registrations of at most `max_expires` seconds (connects on
    /// first use).
    pub fn new(
        settings: &RedisSettings,
        node: Arc<str>,
        max_expires: u32,
        state: Arc<RedisState>,
    ) -> Result<Self, String> {
        Ok(Self {
            client: client(settings)?,
            settings: settings.clone(),
            conn: None,
            script: String::new(),
            sent: None,
            retry_at: None,
            node,
            key_ttl: 2 * i64::from(max_expires.max(1)),
            line: Vec::new(),
            state,
        })
    }

    /// A store like this one for another thread (its own connection).
    pub fn another(&self) -> Result<Self, (String, u32)> {
        Ok(Self {
            client: client(&self.settings).map_err(|e| (e, self.settings.retry_after))?,
            settings: self.settings.clone(),
            conn: None,
            script: String::new(),
            sent: None,
            retry_at: None,
            node: self.node.clone(),
            key_ttl: self.key_ttl,
            line: Vec::new(),
            state: self.state.clone(),
        })
    }

    fn unavailable(&self, reason: String) -> StoreError {
        StoreError::Unavailable {
            reason,
            retry_after: self.settings.retry_after,
        }
    }

    /// Stores the records of every change in `changes` in one atomic
    /// round trip and publishes them to the other nodes; `Ok` once Redis
    /// acknowledged. On any failure nothing may be assumed stored, and the
    /// connection is dropped (tried again after the timeout).
    pub fn store(&mut self, changes: &[&[Record]]) -> Result<(), StoreError> {
        self.send(changes)?;
        self.receive()
    }

    /// The first half of [`store`](Self::store): sends the batch and
    /// returns without waiting for Redis, so the caller can work
    /// meanwhile; [`receive`](Self::receive) says whether it was stored.
    /// An answer still awaited is read first.
    pub fn send(&mut self, changes: &[&[Record]]) -> Result<(), StoreError> {
        self.receive()?;
        if changes.iter().all(|c| c.is_empty()) {
            return Ok(());
        }
        // While the sync thread finds Redis unreachable (it probes on its
        // own thread and reads everything back once Redis answers), the
        // change is refused at once: a Redis that stopped answering must
        // not hold this thread, and the requests behind it, for a timeout
        // on every attempt.
        if !self.state.synced.load(Ordering::Relaxed) {
            return Err(self.unavailable(format!(
                "{} unreachable; waiting for it to be back",
                redact(&self.settings.url)
            )));
        }
        if self.conn.is_none() {
            if self.retry_at.is_some_and(|t| Instant::now() < t) {
                return Err(self.unavailable(format!(
                    "{} unreachable; retrying",
                    redact(&self.settings.url)
                )));
            }
            let connected = connect(&self.client, self.settings.timeout).and_then(|mut c| {
                let sha = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(STORE)
                    .query::<String>(&mut c)?;
                Ok((c, sha))
            });
            match connected {
                Ok((c, sha)) => {
                    self.conn = Some(c);
                    self.script = sha;
                    self.retry_at = None;
                }
                Err(e) => return Err(self.failed(e)),
            }
        }
        let packed = self.command(changes).get_packed_command();
        let conn = self.conn.as_mut().expect("connected above");
        match conn.send_packed_command(&packed) {
            Ok(()) => {
                self.sent = Some(packed);
                Ok(())
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    /// Waits for the answer to the batch [`send`](Self::send) sent: `Ok`
    /// once Redis stored it (also when nothing was sent).
    pub fn receive(&mut self) -> Result<(), StoreError> {
        let Some(packed) = self.sent.take() else {
            return Ok(());
        };
        let conn = self.conn.as_mut().expect("a batch was sent on it");
        let mut result = conn.recv_response().and_then(|v| v.extract_error());
        let flushed = redis::ErrorKind::Server(redis::ServerErrorKind::NoScript);
        if result.as_ref().is_err_and(|e| e.kind() == flushed) {
            // The scripts were flushed (SCRIPT FLUSH, a failover to a
            // replica): load it again (same text, same SHA-1) and send the
            // batch once more; nothing was stored.
            use redis::ConnectionLike;
            result = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(STORE)
                .query::<String>(conn)
                .and_then(|_| conn.req_packed_command(&packed))
                .and_then(|v| v.extract_error());
        }
        match result {
            Ok(_) => Ok(()),
            Err(e) => Err(self.failed(e)),
        }
    }

    /// Drops the connection after `e` (tried again after the timeout) and
    /// says so as the refusal.
    fn failed(&mut self, e: redis::RedisError) -> StoreError {
        self.conn = None;
        self.sent = None;
        self.retry_at = Some(Instant::now() + self.settings.timeout);
        self.unavailable(format!("{}: {e}", redact(&self.settings.url)))
    }

    /// The batch as one call of [`STORE`]: Redis runs it alone, so the
    /// batch is stored whole or not at all.
    fn command(&mut self, changes: &[&[Record]]) -> redis::Cmd {
        let prefix = self.settings.prefix.as_str();
        let aor = |change: &[Record]| change.first().map(|r| r.aor().to_string());
        let changes: Vec<(String, &[Record])> = changes
            .iter()
            .filter_map(|c| aor(c).map(|a| (a, *c)))
            .collect();
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.script).arg(changes.len());
        for (aor, _) in &changes {
            cmd.arg(aor_key(prefix, aor));
        }
        cmd.arg(self.key_ttl)
            .arg(self.key_ttl / 2)
            .arg(channel(prefix))
            .arg(presence(prefix, &self.node))
            .arg(&*self.node);
        for (_, change) in &changes {
            let binds = change
                .iter()
                .filter(|r| matches!(r, Record::Bind { .. }))
                .count();
            cmd.arg(binds).arg(change.len() - binds);
            let binds = change.iter().filter(|r| matches!(r, Record::Bind { .. }));
            let removes = change.iter().filter(|r| matches!(r, Record::Remove { .. }));
            for r in binds.chain(removes) {
                let contact = match r {
                    Record::Bind { binding, .. } => binding.contact(),
                    Record::Remove { contact, .. } => contact.as_str(),
                };
                self.line.clear();
                encode(r, &mut self.line);
                self.line.pop();
                cmd.arg(contact).arg(&self.line[..]);
            }
        }
        cmd
    }
}

/// Reads every binding stored under the prefix that is live at `now`.
fn load(
    conn: &mut redis::Connection,
    prefix: &str,
    now: u64,
) -> redis::RedisResult<HashMap<String, Vec<Binding>>> {
    let mut all: HashMap<String, Vec<Binding>> = HashMap::new();
    let pattern = format!("{prefix}aor:*");
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query(conn)?;
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.hvals(k);
            }
            let values: Vec<Vec<Vec<u8>>> = pipe.query(conn)?;
            for line in values.iter().flatten() {
                let Some(Record::Bind { aor, binding, .. }) =
                    std::str::from_utf8(line).ok().and_then(decode)
                else {
                    continue;
                };
                if binding.expires_at > now {
                    all.entry(aor.to_string()).or_default().push(binding);
                }
            }
        }
        cursor = next;
        if cursor == 0 {
            return Ok(all);
        }
    }
}

/// Applies one published change unless this node made it; returns how
/// many records it applied.
fn apply(payload: &[u8], node: &str, location: &MemoryLocation) -> u64 {
    let Ok(text) = std::str::from_utf8(payload) else {
        return 0;
    };
    let mut lines = text.lines();
    if lines.next() == Some(node) {
        return 0;
    }
    let mut n = 0;
    for r in lines.filter_map(decode) {
        location.replay(r);
        n += 1;
    }
    n
}

/// Wakes a node's [`spawn_sync`] thread, which blocks on the change feed,
/// to see its stop flag.
#[derive(Debug, Clone)]
pub struct SyncWaker {
    settings: RedisSettings,
    node: Arc<str>,
}

impl SyncWaker {
    /// Publishes on the node's own channel: its feed's reader wakes. A
    /// Redis that cannot be reached leaves that reader in its retry
    /// loop, which looks at the flag on its own.
    pub fn wake(&self) {
        let Ok(client) = client(&self.settings) else {
            return;
        };
        if let Ok(mut c) = connect(&client, self.settings.timeout) {
            let _ = redis::cmd("PUBLISH")
                .arg(presence(&self.settings.prefix, &self.node))
                .arg("stop")
                .query::<i64>(&mut c);
        }
    }
}

/// Starts the thread that keeps `location` a copy of the shared one:
/// it applies other nodes' changes as they are published and reads
/// everything again after any break in the feed. The waker stops it.
pub fn spawn_sync(
    settings: RedisSettings,
    node: Arc<str>,
    shared: Arc<crate::proto::shared::Shared>,
    state: Arc<RedisState>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<(std::thread::JoinHandle<()>, SyncWaker)> {
    let client = client(&settings).map_err(std::io::Error::other)?;
    let waker = SyncWaker {
        settings: settings.clone(),
        node: node.clone(),
    };
    let thread = std::thread::Builder::new()
        .name("sipsec-redis-sync".into())
        .spawn(move || {
            let mut was_up = true;
            while !stop.load(Ordering::Relaxed) {
                let result = follow(&client, &settings, &node, &shared, &state, &stop, || {
                    if !was_up {
                        tracing::info!(target: "sipsec::store", url = %redact(&settings.url), "location store reachable again; bindings read back");
                        was_up = true;
                    }
                });
                state.synced.store(false, Ordering::Relaxed);
                if let Err(e) = result {
                    // The copy stops following here (kept if it already had).
                    let _ = shared.location_stale_since.compare_exchange(
                        0,
                        crate::io::clock::unix_now().max(1),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    *state.last_error.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(format!("{}: {e}", redact(&settings.url)));
                    state.refused.store(refused(&e), Ordering::Release);
                    if was_up {
                        tracing::warn!(target: "sipsec::store", url = %redact(&settings.url), error = %e, "location store unreachable; REGISTER is answered 503 until it is back");
                        was_up = false;
                    }
                    let until = Instant::now() + settings.timeout;
                    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
        })?;
    Ok((thread, waker))
}

/// Whether `e` is Redis refusing this node rather than failing to
/// answer it: a login refused, a command its ACL forbids, settings the
/// client cannot use.
fn refused(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::AuthenticationFailed
            | redis::ErrorKind::InvalidClientConfig
            | redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
    )
}

/// How often a node says it is alive, and reads which others are.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// A node not heard from in this long is no longer trusted.
const NODE_TTL: u64 = 60;

/// Says this node (its SIP address) is alive, and trusts the IP addresses
/// of the nodes alive now: they forward whole deployments' requests, so the
/// per-source rate limit must not apply to them (bans still do).
fn heartbeat(
    conn: &mut redis::Connection,
    settings: &RedisSettings,
    me: std::net::SocketAddr,
    shared: &crate::proto::shared::Shared,
    state: &RedisState,
) -> redis::RedisResult<()> {
    let key = format!("{}nodes", settings.prefix);
    let now = crate::io::clock::unix_now();
    let (_, _, alive): ((), (), Vec<String>) = redis::pipe()
        .zadd(&key, me.to_string(), now)
        .zrembyscore(&key, 0, now.saturating_sub(NODE_TTL))
        .zrangebyscore(&key, now.saturating_sub(NODE_TTL), "+inf")
        .query(conn)?;
    let nodes: Vec<std::net::SocketAddr> = alive.iter().filter_map(|a| a.parse().ok()).collect();
    state.nodes.store(nodes.len() as u64, Ordering::Relaxed);
    shared
        .guard
        .set_trusted(nodes.iter().map(|n| n.ip()).collect());
    Ok(())
}

/// How long the feed may stay quiet before it is pinged (a paused or
/// unreachable Redis fails the ping); the reader sleeps no longer.
const QUIET: Duration = Duration::from_secs(5);

/// Subscribes to the change feed, reads the whole shared location (after
/// subscribing, so nothing published meanwhile is missed), then applies
/// other nodes' changes until the feed breaks or `stop` is set.
fn follow(
    client: &redis::Client,
    settings: &RedisSettings,
    node: &str,
    shared: &crate::proto::shared::Shared,
    state: &RedisState,
    stop: &AtomicBool,
    synced: impl FnOnce(),
) -> redis::RedisResult<()> {
    let mut sub = connect(client, settings.timeout)?;
    let mut pubsub = sub.as_pubsub();
    // One command, so the two counts the publishing script compares
    // change together.
    pubsub.subscribe(&[channel(&settings.prefix), presence(&settings.prefix, node)])?;
    let mut data = connect(client, settings.timeout)?;
    let location = &shared.location;
    let all = load(&mut data, &settings.prefix, crate::io::clock::unix_now())?;
    location.replace_all(all);
    let me = shared.config.advertise;
    heartbeat(&mut data, settings, me, shared, state)?;
    state.synced.store(true, Ordering::Relaxed);
    shared.location_stale_since.store(0, Ordering::Relaxed);
    state.resyncs.fetch_add(1, Ordering::Relaxed);
    synced();
    // The reader blocks on the feed: a change, the stop (published on
    // this node's own channel by the SyncWaker), or QUIET passing wakes
    // it. A dead server closes the connection, a paused one fails the
    // ping below.
    pubsub.set_read_timeout(Some(QUIET))?;
    let mine = presence(&settings.prefix, node);
    let mut quiet_since = Instant::now();
    let mut beat = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if beat.elapsed() >= HEARTBEAT {
            heartbeat(&mut data, settings, me, shared, state)?;
            beat = Instant::now();
        }
        match pubsub.get_message() {
            Ok(msg) => {
                quiet_since = Instant::now();
                if msg.get_channel_name() != mine {
                    let n = apply(msg.get_payload_bytes(), node, location);
                    state.applied.fetch_add(n, Ordering::Relaxed);
                }
            }
            Err(e) if e.is_timeout() => {
                if quiet_since.elapsed() >= QUIET {
                    pubsub.set_read_timeout(Some(settings.timeout))?;
                    pubsub.ping::<()>()?;
                    pubsub.set_read_timeout(Some(QUIET))?;
                    quiet_since = Instant::now();
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(
            redact("redis://user:secret@10.0.0.1:6379/0"),
            "redis://user:***@10.0.0.1:6379/0"
        );
        assert_eq!(redact("redis://:secret@h:1"), "redis://:***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(
            redact("redis+unix:///run/r.sock?db=2&user=u&pass=secret"),
            "redis+unix:///run/r.sock?db=2&user=u&pass=***"
        );
        assert_eq!(
            redact("redis+unix:///run/r.sock?pass=secret&db=1"),
            "redis+unix:///run/r.sock?pass=***&db=1"
        );
    }

    #[test]
    fn a_node_ignores_its_own_changes() {
        let loc = MemoryLocation::new(std::hash::RandomState::new());
        let mut payload = b"node-b\n".to_vec();
        let r = Record::Remove {
            seq: 1,
            aor: "sip:a@x".into(),
            contact: "sip:a@1.2.3.4".into(),
        };
        encode(&r, &mut payload);
        assert_eq!(apply(&payload, "node-a", &loc), 1);
        assert_eq!(apply(&payload, "node-b", &loc), 0);
        assert_eq!(apply(b"\xff\xfe", "node-a", &loc), 0, "not UTF-8");
    }
}
