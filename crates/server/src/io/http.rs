//! The operator view: a small HTTP/1.1 endpoint (loopback by default) with
//! `GET /` (a live web page), `GET /metrics` (Prometheus text) and
//! `GET /status` (JSON), and runtime control: `DELETE /bans/IP` lifts a
//! ban, `DELETE /bindings?aor=AOR[&contact=URI]` removes bindings (stored
//! as a REGISTER's removal is, so a restart does not bring them back).
//! With a token configured every request must carry it (`Authorization:
//! Bearer TOKEN`, or `?token=TOKEN` to open the page), which is required
//! when the endpoint listens beyond loopback.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::io::clock::unix_now;
use crate::io::tcp::shared::TcpHub;
use crate::proto::shared::Shared;

/// What the endpoint reports on.
#[derive(Debug, Clone)]
pub struct View {
    /// Shared server state.
    pub shared: Arc<Shared>,
    /// TCP connections, when TCP is on.
    pub hub: Option<Arc<TcpHub>>,
    /// The UDP address.
    pub udp: SocketAddr,
    /// The TCP address.
    pub tcp: Option<SocketAddr>,
    /// TLS, when on.
    pub tls: Option<Arc<crate::io::tls::TlsContext>>,
    /// The link to a shared location store (Redis), when one is used.
    pub redis: Option<Arc<crate::io::redis::RedisState>>,
    /// The embedded store, when it is used.
    pub persistence: Option<Arc<crate::io::journal::Persistence>>,
    /// Where the operator's binding removals are stored (a journal of
    /// its own, or the shared location).
    pub store: Arc<Mutex<crate::io::drive::Storage>>,
    /// The last [`HISTORY`] samples of the rates the page charts.
    pub history: Arc<Mutex<History>>,
    /// What carries the proxy's own requests out (the BYEs that end a
    /// dialog the operator ends).
    pub sender: Option<Arc<crate::io::send::Sender>>,
    /// The tracer, whose counts `/metrics` shows.
    pub sinks: crate::io::sinks::Sinks,
}

/// The samples kept, and the counters the next one is the rate of.
#[derive(Debug, Default)]
pub struct History {
    samples: std::collections::VecDeque<Sample>,
    last: Option<(Instant, [u64; 5])>,
}

/// Samples kept for `GET /history`: five minutes at one every
/// [`SAMPLE_EVERY`], so the page's charts start full, not empty.
pub const HISTORY: usize = 150;

/// How often the rates are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// One sample of what the page charts: per-second rates over the last
/// interval and gauges at its end.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Sample {
    /// Unix time, seconds.
    pub t: u64,
    /// Requests per second.
    pub req: f64,
    /// 2xx, 4xx and 5xx responses per second.
    pub r2: f64,
    /// 4xx.
    pub r4: f64,
    /// 5xx.
    pub r5: f64,
    /// Transactions under way.
    pub tx: u64,
    /// Open connections.
    pub conn: u64,
    /// Authentication failures per second.
    pub fail: f64,
}

/// The counters a [`Sample`] is the rate of.
fn counts(shared: &Shared) -> [u64; 5] {
    let m = &shared.metrics;
    [
        m.requests_total(),
        m.responses_in_class(2),
        m.responses_in_class(4),
        m.responses_in_class(5),
        m.auth_failures.load(Ordering::Relaxed),
    ]
}

/// A sample of the rates since `last` (zero at the first).
fn sample_since(
    shared: &Shared,
    last: Option<(Instant, [u64; 5])>,
) -> (Sample, (Instant, [u64; 5])) {
    use sip_core::Transport as T;
    let (now, counts) = (Instant::now(), counts(shared));
    let rate = |i: usize| {
        last.map_or(0.0, |(at, c)| {
            counts[i].saturating_sub(c[i]) as f64 / now.duration_since(at).as_secs_f64().max(0.001)
        })
    };
    let m = &shared.metrics;
    let sample = Sample {
        t: unix_now(),
        req: rate(0),
        r2: rate(1),
        r4: rate(2),
        r5: rate(3),
        tx: m.active_transactions.load(Ordering::Relaxed),
        conn: [T::Tcp, T::Tls, T::Ws, T::Wss]
            .into_iter()
            .map(|t| m.open_connections(t))
            .sum(),
        fail: rate(4),
    };
    (sample, (now, counts))
}

/// Samples at once, then every [`SAMPLE_EVERY`], into `history` until
/// `stop` (the endpoint's thread unparks it then).
fn sample(shared: &Shared, history: &Mutex<History>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        {
            let mut h = history.lock().unwrap_or_else(|e| e.into_inner());
            let (sample, last) = sample_since(shared, h.last);
            h.last = Some(last);
            h.samples.push_back(sample);
            while h.samples.len() > HISTORY {
                h.samples.pop_front();
            }
        }
        std::thread::park_timeout(SAMPLE_EVERY);
    }
}

impl View {
    /// Removes `aor`'s bindings (only `contact` when given), stored first
    /// exactly as a REGISTER's removal is; how many went.
    pub fn remove_bindings(&self, aor: &str, contact: Option<&str>) -> Result<usize, String> {
        let mut storage = self.store.lock().unwrap_or_else(|e| e.into_inner());
        let mut held = storage.hold();
        crate::io::drive::remove_bindings(
            &self.shared.location,
            &mut held,
            aor,
            &|b| contact.is_none_or(|c| b.contact() == c),
            unix_now(),
        )
    }

    /// The samples kept and one for the time since the last of them.
    fn history(&self) -> Vec<Sample> {
        let h = self.history.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<Sample> = h.samples.iter().copied().collect();
        v.push(sample_since(&self.shared, h.last).0);
        v
    }

    fn users(&self) -> usize {
        self.shared.auth.as_ref().map_or(0, |a| a.users().len())
    }

    /// The Prometheus exposition.
    pub fn metrics(&self) -> String {
        let now = unix_now();
        let metrics = &self.shared.metrics;
        let gauges = [
            (
                "sipsec_bindings",
                "Live registrations.",
                self.shared.location.len(now) as u64,
            ),
            (
                "sipsec_users",
                "Users loaded for authentication.",
                self.users() as u64,
            ),
            (
                "sipsec_tcp_connections",
                "Open TCP connections.",
                self.hub.as_ref().map_or(0, |h| h.connections()) as u64,
            ),
            (
                "sipsec_uptime_seconds",
                "Seconds since start.",
                now.saturating_sub(self.shared.started),
            ),
            (
                "sipsec_udp_steered_by_call",
                "1 when the UDP workers are steered by Call-ID (udp_balance = \"call\" in effect), 0 when not.",
                metrics.udp_steered_by_call.load(Ordering::Relaxed),
            ),
        ];
        let mut text = self.shared.metrics.render(&gauges);
        text.push_str(&format!(
            "# HELP sipsec_build_info The version and git commit of this build (always 1).\n# TYPE sipsec_build_info gauge\nsipsec_build_info{{version=\"{}\",commit=\"{}\"}} 1\n",
            crate::io::process::VERSION,
            crate::io::process::COMMIT
        ));
        text.push_str(&crate::io::process::render(&crate::io::process::usage()));
        if let Some(p) = &self.persistence {
            text.push_str(&format!(
                "# HELP sipsec_journal_syncs_total Waits for stable storage by the location journal (fsync durability; the changes a worker gathers are written and synced together).\n# TYPE sipsec_journal_syncs_total counter\nsipsec_journal_syncs_total {}\n",
                p.syncs()
            ));
        }
        if let Some(m) = &self.shared.media {
            m.render(&mut text);
        }
        if let Some(s) = &self.shared.stir {
            s.render(&mut text);
        }
        self.shared.trunks.render(&mut text);
        if let Some(d) = &self.shared.dialogs {
            d.render(&mut text);
            self.shared.originated.render(&mut text);
        }
        if let Some(t) = self.sinks.tap.as_ref() {
            let (queued, dropped) = t.counts();
            text.push_str(&format!(
                "# HELP sipsec_hep_packets_total SIP messages copied to the HEP collector.\n# TYPE sipsec_hep_packets_total counter\nsipsec_hep_packets_total {queued}\n# HELP sipsec_hep_dropped_total SIP messages not traced: the queue to the collector was full, or the message too large for HEP.\n# TYPE sipsec_hep_dropped_total counter\nsipsec_hep_dropped_total {dropped}\n"
            ));
        }
        if let Some(p) = &self.shared.privacy {
            p.render(&mut text);
        }
        if let Some(r) = &self.redis {
            for (name, kind, help, v) in [
                (
                    "sipsec_location_store_up",
                    "gauge",
                    "1 while this node's copy of the shared location (Redis) follows its change feed.",
                    u64::from(r.synced.load(Ordering::Relaxed)),
                ),
                (
                    "sipsec_location_store_stale_seconds",
                    "gauge",
                    "Seconds this node's copy of the shared location has not followed it (Redis unreachable); 0 while it does.",
                    self.stale_seconds(unix_now()),
                ),
                (
                    "sipsec_location_store_resyncs_total",
                    "counter",
                    "Full reads of the shared location (at start and after each break).",
                    r.resyncs.load(Ordering::Relaxed),
                ),
                (
                    "sipsec_location_store_nodes",
                    "gauge",
                    "Nodes sharing the location heard from in the last minute (their addresses are exempt from the per-source rate limit).",
                    r.nodes.load(Ordering::Relaxed),
                ),
                (
                    "sipsec_location_store_changes_applied_total",
                    "counter",
                    "Binding changes applied from other nodes.",
                    r.applied.load(Ordering::Relaxed),
                ),
            ] {
                text.push_str(&format!(
                    "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n"
                ));
            }
        }
        text
    }

    /// Seconds this node's copy of the shared location has not followed
    /// it (0 while it does).
    fn stale_seconds(&self, now: u64) -> u64 {
        match self.shared.location_stale_since.load(Ordering::Relaxed) {
            0 => 0,
            since => now.saturating_sub(since),
        }
    }

    /// The `/status` document: the settings, counters and a summary of the
    /// location service, with one page of the bindings that match `q`.
    pub fn status(&self, q: &StatusQuery) -> serde_json::Value {
        let now = unix_now();
        let c = &self.shared.config;
        let mut all = self.shared.location.snapshot(now);
        all.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.contact().cmp(b.1.contact())));
        let total = all.len();
        let mut per_aor: Vec<(&str, usize)> = Vec::new();
        for (aor, _) in &all {
            match per_aor.last_mut() {
                Some((a, n)) if *a == aor => *n += 1,
                _ => per_aor.push((aor, 1)),
            }
        }
        let aors = per_aor.len();
        per_aor.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let top: Vec<_> = per_aor
            .iter()
            .take(TOP_AORS)
            .map(|(aor, n)| json!({"aor": aor, "contacts": n}))
            .collect();
        let matching: Vec<_> = all
            .iter()
            .filter(|(aor, _)| q.aor.as_deref().is_none_or(|p| matches_pattern(p, aor)))
            .collect();
        let matched = matching.len();
        let bindings: Vec<_> = matching
            .into_iter()
            .skip(q.offset)
            .take(q.limit)
            .map(|(aor, b)| {
                json!({
                    "aor": aor,
                    "contact": b.contact(),
                    "address": b.source.ip().to_string(),
                    "port": b.source.port(),
                    "expires_in": b.expires_at.saturating_sub(now),
                    "q": f64::from(b.q) / 1000.0,
                })
            })
            .collect();
        let m = &self.shared.metrics;
        let open = |t| m.open_connections(t);
        use sip_core::Transport as T;
        json!({
            "version": crate::io::process::VERSION,
            "commit": crate::io::process::COMMIT,
            "mode": c.mode.as_str(),
            "auth": c.auth,
            "realm": c.realm,
            "stateful": c.stateful && c.mode == crate::config::Mode::Proxy,
            "active_transactions": m.active_transactions.load(Ordering::Relaxed),
            "udp": self.udp.to_string(),
            "tcp": self.tcp.map(|t| t.to_string()),
            "tls": self.tls.as_ref().zip(c.tls.as_ref()).map(|(ctx, t)| json!({
                "addr": t.addr.to_string(),
                "cert": t.cert.display().to_string(),
                "key": ctx.certs.info().description,
                "mutual": ctx.mutual,
                "handshakes_total": m.tls_handshakes.load(Ordering::Relaxed),
                "handshakes_by_group": m.tls_groups_seen().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
                "resumed_total": m.tls_resumed.load(Ordering::Relaxed),
                "session_tickets": t.session_tickets,
                "groups": t.groups,
                "require_pq": t.require_pq,
                "pq_refused_total": m.tls_pq_refused.load(Ordering::Relaxed),
                "recent_sessions": self.hub.as_ref().map(|h| h.recent_sessions()).unwrap_or_default(),
                "handshake_failures_total": m.tls_handshake_failures.load(Ordering::Relaxed),
                "reloads_total": m.tls_reloads.load(Ordering::Relaxed),
                "reload_failures_total": m.tls_reload_failures.load(Ordering::Relaxed),
            })),
            "users": self.users(),
            "uptime_seconds": now.saturating_sub(self.shared.started),
            "tcp_connections": self.hub.as_ref().map_or(0, |h| h.connections()),
            "connections": {
                "tcp": open(T::Tcp), "tls": open(T::Tls), "ws": open(T::Ws), "wss": open(T::Wss),
                "limit": self.hub.as_ref().map(|h| h.limit()),
            },
            "registrations_total": m.registered.load(Ordering::Relaxed),
            "forwarded_total": m.forwarded.load(Ordering::Relaxed),
            "auth_failures_total": m.auth_failures.load(Ordering::Relaxed),
            "malformed_total": m.malformed.load(Ordering::Relaxed),
            "rate_limited_total": m.rate_limited.load(Ordering::Relaxed),
            "bans_total": m.bans.load(Ordering::Relaxed),
            "location_store": self.redis.as_ref().map(|r| {
                let up = r.synced.load(Ordering::Relaxed);
                json!({
                    "up": up,
                    "nodes": r.nodes.load(Ordering::Relaxed),
                    "resyncs_total": r.resyncs.load(Ordering::Relaxed),
                    "stale_seconds": self.stale_seconds(now),
                    "max_stale": c.redis.as_ref().and_then(|r| r.max_stale),
                    "last_error": if up {
                        None
                    } else {
                        r.last_error.lock().unwrap_or_else(|e| e.into_inner()).clone()
                    },
                })
            }),
            "media": self.shared.media.as_ref().map(|t| media_status(t, &c.media)),
            "stir": self.shared.stir.as_ref().map(|s| s.status()),
            "trunks": self.shared.trunks.status(),
            "dialogs": self.shared.dialogs.as_ref().map(|d| json!({
                "active": d.len(),
                "list": d.list(100, crate::io::clock::now().unix_ms),
            })),
            "privacy": self.shared.privacy.as_ref().map(|p| p.status()),
            "banned": self.shared.guard.banned(now).into_iter().map(|b| json!({"address": b.source.to_string(), "scope": b.scope.as_str(), "seconds_left": b.seconds_left})).collect::<Vec<_>>(),
            "summary": {
                "aors": aors,
                "bindings": total,
                "top_aors": top,
            },
            "page": {
                "aor": q.aor,
                "matched": matched,
                "offset": q.offset,
                "limit": q.limit,
                "returned": bindings.len(),
            },
            "bindings": bindings,
        })
    }
}

/// AoRs listed in the status summary, most contacts first.
const TOP_AORS: usize = 5;

/// Bindings on one `/status` page unless `limit` says otherwise.
pub const DEFAULT_LIMIT: usize = 100;

/// The most bindings one page holds, whatever `limit` asks.
pub const MAX_LIMIT: usize = 10_000;

/// The longest AoR pattern accepted (matching is linear in each).
const MAX_PATTERN: usize = 256;

/// Which bindings `/status` lists: `?aor=PATTERN&offset=N&limit=N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusQuery {
    /// A pattern the AoR must match (see [`matches_pattern`]).
    pub aor: Option<String>,
    /// Matching bindings skipped (sorted by AoR, then contact).
    pub offset: usize,
    /// Bindings returned at most (capped at [`MAX_LIMIT`]).
    pub limit: usize,
}

impl Default for StatusQuery {
    fn default() -> Self {
        Self {
            aor: None,
            offset: 0,
            limit: DEFAULT_LIMIT,
        }
    }
}

impl StatusQuery {
    /// Parses a query string (`aor=alice*&limit=10`), percent-decoded;
    /// an unknown key or a bad number is an error naming it.
    pub fn parse(query: &str) -> Result<Self, String> {
        let mut q = Self::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(v).ok_or_else(|| format!("{k}: bad percent-encoding"))?;
            let number = |v: &str| {
                v.parse::<usize>()
                    .map_err(|_| format!("{k}={v}: not a whole number"))
            };
            match k {
                "aor" if v.len() > MAX_PATTERN => {
                    return Err(format!("aor: longer than {MAX_PATTERN} bytes"))
                }
                "aor" => q.aor = Some(v).filter(|v| !v.is_empty()),
                "offset" => q.offset = number(&v)?,
                "limit" => q.limit = number(&v)?.min(MAX_LIMIT),
                _ => return Err(format!("unknown parameter {k:?} (try aor, offset, limit)")),
            }
        }
        Ok(q)
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Whether `aor` matches `pattern`, ignoring case: with `*` (any run) or
/// `?` (one character) the whole AoR must match; without them the
/// pattern may be anywhere in it (`alice` finds `sip:alice@example.com`).
pub fn matches_pattern(pattern: &str, aor: &str) -> bool {
    let p: Vec<char> = pattern.to_lowercase().chars().collect();
    let a: Vec<char> = aor.to_lowercase().chars().collect();
    if !p.iter().any(|c| matches!(c, '*' | '?')) {
        return aor.to_lowercase().contains(&pattern.to_lowercase());
    }
    // Iterative glob with one backtrack point: linear in practice, and
    // never exponential for a hostile pattern.
    let (mut pi, mut ai) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ai < a.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == a[ai]) {
            pi += 1;
            ai += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ai));
            pi += 1;
        } else if let Some((sp, sa)) = star {
            pi = sp + 1;
            ai = sa + 1;
            star = Some((sp, sa + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// The web view: one page, no build step, no external resource.
const PAGE: &str = include_str!("web/index.html");

/// An answer: status line, content type and body.
type Answer = (&'static str, &'static str, String);

fn text(code: &'static str, body: &str) -> Answer {
    (code, "text/plain", body.to_owned())
}

/// Writes `answer` on `s`, all of it before `deadline`.
fn respond(s: &mut TcpStream, (code, ctype, body): Answer, deadline: Instant) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {code}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\nContent-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'; frame-ancestors 'none'\r\nReferrer-Policy: no-referrer\r\nConnection: close\r\n\r\n",
        body.len()
    );
    write_before(s, head.as_bytes(), deadline)?;
    write_before(s, body.as_bytes(), deadline)
}

/// Time left before `deadline`, or `TimedOut` when none is.
fn left(deadline: Instant) -> io::Result<Duration> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        return Err(io::ErrorKind::TimedOut.into());
    }
    Ok(d)
}

/// Writes all of `bytes` before `deadline`: a client that stops reading
/// is given up on then, however it paces its window.
fn write_before(s: &mut TcpStream, mut bytes: &[u8], deadline: Instant) -> io::Result<()> {
    while !bytes.is_empty() {
        s.set_write_timeout(Some(left(deadline)?))?;
        match s.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::ErrorKind::TimedOut.into())
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether the request carries `token` (header or query), compared in
/// constant time.
fn authorized(token: &str, head: &str, query: &str) -> bool {
    use subtle::ConstantTimeEq;
    let given = head
        .split("\r\n")
        .skip(1)
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("authorization")
                .then(|| value.trim().strip_prefix("Bearer ").map(str::trim))?
        })
        .map(str::to_owned)
        .or_else(|| {
            query
                .split('&')
                .find_map(|p| p.strip_prefix("token="))
                .and_then(percent_decode)
        });
    given.is_some_and(|g| bool::from(g.as_bytes().ct_eq(token.as_bytes())))
}

/// The query without its `token` parameter.
fn without_token(query: &str) -> String {
    query
        .split('&')
        .filter(|p| !p.starts_with("token=") && !p.is_empty())
        .collect::<Vec<_>>()
        .join("&")
}

/// Reads a request head from `s` before `deadline` (`None`: too long,
/// or the client closed first).
fn read_head(s: &mut TcpStream, deadline: Instant) -> io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        s.set_read_timeout(Some(left(deadline)?))?;
        let n = match s.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::ErrorKind::TimedOut.into())
            }
            Err(e) => return Err(e),
        };
        if n == 0 || buf.len() > MAX_HEAD {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(Some(buf))
}

/// The longest request head read.
const MAX_HEAD: usize = 8192;

/// Serves one request on `s`, all of it before `deadline`; `place` is
/// told when the request has been read.
fn handle(view: &View, mut s: TcpStream, place: &Place, deadline: Instant) -> io::Result<()> {
    let head = read_head(&mut s, deadline)?;
    if !place.read() {
        // Displaced by a newcomer meanwhile: its socket is shut.
        return Ok(());
    }
    let answer = match head {
        Some(head) => answer(view, &head),
        None => text("400 Bad Request", "bad request\n"),
    };
    respond(&mut s, answer, deadline)
}

/// The answer to the request whose head is `buf`.
fn answer(view: &View, buf: &[u8]) -> Answer {
    let line = String::from_utf8_lossy(&buf[..buf.iter().position(|b| *b == b'\r').unwrap_or(0)])
        .into_owned();
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !matches!(method, "GET" | "DELETE" | "POST") {
        return text("405 Method Not Allowed", "only GET, POST and DELETE\n");
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let head = String::from_utf8_lossy(buf);
    let token = view.shared.config.http_token.as_ref();
    if let Some(why) = super::http_guard::refusal(&head, token.is_some()) {
        view.shared
            .metrics
            .http_refused
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return text("403 Forbidden", &why);
    }
    if let Some(token) = token {
        if !authorized(token, &head, query) {
            return text(
                "401 Unauthorized",
                "a token is required: Authorization: Bearer TOKEN (or ?token=TOKEN)\n",
            );
        }
    }
    let query = without_token(query);
    if method == "DELETE" {
        return control(view, path, &query);
    }
    if method == "POST" {
        return post(view, path, &query);
    }
    match path {
        "/" => ("200 OK", "text/html; charset=utf-8", PAGE.to_owned()),
        "/metrics" => ("200 OK", "text/plain; version=0.0.4", view.metrics()),
        "/history" => {
            let samples = view.history();
            (
                "200 OK",
                "application/json",
                format!(
                    "{}\n",
                    json!({"every_seconds": SAMPLE_EVERY.as_secs(), "samples": samples})
                ),
            )
        }
        "/status" => match StatusQuery::parse(&query) {
            Ok(q) => (
                "200 OK",
                "application/json",
                format!("{:#}\n", view.status(&q)),
            ),
            Err(e) => text("400 Bad Request", &format!("/status: {e}\n")),
        },
        _ => text("404 Not Found", "try /, /metrics, /status or /history\n"),
    }
}

/// A `POST`: `/reload`, `/trunks/NAME/drain?gateway=ADDR` or
/// `…/undrain?…`.
fn post(view: &View, path: &str, query: &str) -> Answer {
    if path == "/reload" {
        let (code, body) = crate::io::manage::reload(&view.shared, view.tls.as_deref());
        return text(code, &body);
    }
    let usage = "POST /trunks/NAME/drain?gateway=IP:PORT or /trunks/NAME/undrain?gateway=IP:PORT\n";
    let Some(rest) = path.strip_prefix("/trunks/") else {
        return text("404 Not Found", usage);
    };
    let (name, on) = match rest.rsplit_once('/') {
        Some((n, "drain")) => (n, true),
        Some((n, "undrain")) => (n, false),
        _ => return text("404 Not Found", usage),
    };
    let gateway = query
        .split('&')
        .find_map(|p| p.strip_prefix("gateway="))
        .and_then(percent_decode)
        .and_then(|g| g.parse().ok());
    let (Some(gateway), Some(name)) = (gateway, percent_decode(name)) else {
        return text("400 Bad Request", usage);
    };
    let (code, body) = crate::io::manage::drain(&view.shared, &name, gateway, on);
    text(code, &body)
}

/// A `DELETE`: lifts a ban, removes bindings or ends a dialog.
fn control(view: &View, path: &str, query: &str) -> Answer {
    if let Some(call_id) = path.strip_prefix("/dialogs/") {
        let Some(call_id) = percent_decode(call_id).filter(|c| !c.is_empty()) else {
            return text("400 Bad Request", "/dialogs/CALL-ID: a Call-ID\n");
        };
        let (code, body) =
            crate::io::manage::end_dialog(&view.shared, view.sender.as_deref(), &call_id);
        return text(code, &body);
    }
    if let Some(ip) = path.strip_prefix("/bans/") {
        let typed = percent_decode(ip).unwrap_or_default();
        let ip = match crate::proto::guard::parse_source(&typed) {
            Ok(ip) => ip,
            Err(e) => return text("400 Bad Request", &format!("{e}\n")),
        };
        let source = view.shared.guard.source_of(ip);
        return if view.shared.guard.unban(ip, unix_now()) {
            crate::io::log::operator(&format!("ban of {source} lifted by the operator"));
            text("200 OK", &format!("{source} unbanned\n"))
        } else {
            text("404 Not Found", &format!("{source} is not banned\n"))
        };
    }
    if path != "/bindings" {
        return text(
            "404 Not Found",
            "DELETE /bans/IP or /bindings?aor=AOR[&contact=URI]\n",
        );
    }
    let mut aor = None;
    let mut contact = None;
    for p in query.split('&').filter(|p| !p.is_empty()) {
        match p.split_once('=') {
            Some(("aor", v)) => aor = percent_decode(v),
            Some(("contact", v)) => contact = percent_decode(v),
            _ => {
                return text(
                    "400 Bad Request",
                    &format!("/bindings: unknown parameter {p:?}\n"),
                )
            }
        }
    }
    let Some(aor) = aor.filter(|a| !a.is_empty()) else {
        return text("400 Bad Request", "/bindings: aor=AOR is required\n");
    };
    match view.remove_bindings(&aor, contact.as_deref()) {
        Ok(0) => text("404 Not Found", &format!("{aor}: no such binding\n")),
        Ok(n) => {
            crate::io::log::operator(&format!("{n} binding(s) of {aor} removed by the operator"));
            text("200 OK", &format!("{n} binding(s) of {aor} removed\n"))
        }
        Err(e) => text("503 Service Unavailable", &format!("{aor}: {e}\n")),
    }
}

/// Operator requests served at once. When all places are taken, a
/// newcomer takes the place of the longest-waiting client that has not
/// yet sent its whole request (that client is closed), else it is closed
/// unanswered: clients that connect and stay silent cannot keep a
/// scraper out, and at most this many threads serve the endpoint.
pub const MAX_CLIENTS: usize = 8;

/// A request is read and answered within this, however the client paces
/// its bytes or its receive window.
pub const EXCHANGE: Duration = Duration::from_secs(5);

/// Serves the endpoint on `listener` until `stop` (the listener shut down
/// wakes it): each client on its own short-lived thread, at most
/// [`MAX_CLIENTS`] at once, each given [`EXCHANGE`] in all.
pub fn serve(
    view: View,
    listener: TcpListener,
    stop: Arc<AtomicBool>,
) -> io::Result<JoinHandle<()>> {
    listener.set_nonblocking(false)?;
    let clients = Arc::new(Clients::default());
    // The sampler holds only what it reads (not the view, whose store
    // must be gone when the server is), and ends with this thread.
    let sampler = {
        let (shared, history, stop) = (view.shared.clone(), view.history.clone(), stop.clone());
        std::thread::Builder::new()
            .name("http-history".into())
            .spawn(move || sample(&shared, &history, &stop))?
    };
    std::thread::Builder::new()
        .name("http".into())
        .spawn(move || loop {
            let accepted = listener.accept();
            if stop.load(Ordering::Relaxed) {
                sampler.thread().unpark();
                let _ = sampler.join();
                return;
            }
            let s = match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of descriptors and the like: try again shortly
                    // rather than spin.
                    tracing::debug!(target: "sipsec::http", error = %e, "accept failed");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            let Some(place) = clients.admit(&s) else {
                tracing::debug!(target: "sipsec::http", "operator endpoint busy: client closed unanswered");
                continue;
            };
            let view = view.clone();
            let deadline = Instant::now() + EXCHANGE;
            let _ = std::thread::Builder::new()
                .name("http-client".into())
                .spawn(move || {
                    if let Err(e) = handle(&view, s, &place, deadline) {
                        tracing::debug!(target: "sipsec::http", error = %e, "operator client dropped");
                    }
                });
        })
}

/// The clients being served, oldest first.
#[derive(Debug, Default)]
struct Clients {
    list: Mutex<Vec<Client>>,
    next: AtomicU64,
}

#[derive(Debug)]
struct Client {
    id: u64,
    /// Still reading its request: a newcomer may displace it.
    reading: bool,
    /// The same socket, to close it when displaced.
    socket: TcpStream,
}

impl Clients {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Client>> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for the client on `s`, or `None` when every place is
    /// held by a client whose request is being answered.
    fn admit(self: &Arc<Self>, s: &TcpStream) -> Option<Place> {
        let socket = s.try_clone().ok()?;
        let mut list = self.lock();
        if list.len() >= MAX_CLIENTS {
            let oldest = list.iter().position(|c| c.reading)?;
            let gone = list.remove(oldest);
            let _ = gone.socket.shutdown(std::net::Shutdown::Both);
            tracing::debug!(target: "sipsec::http", "operator endpoint full: the longest-silent client makes way");
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        list.push(Client {
            id,
            reading: true,
            socket,
        });
        Some(Place {
            clients: self.clone(),
            id,
        })
    }
}

/// A client's place in [`Clients`], given back when dropped (also when
/// the thread meant to hold it could not start).
struct Place {
    clients: Arc<Clients>,
    id: u64,
}

impl Place {
    /// Notes that the request has been read, so the client is no longer
    /// displaced; `false` if it already was.
    fn read(&self) -> bool {
        let mut list = self.clients.lock();
        match list.iter_mut().find(|c| c.id == self.id) {
            Some(c) => {
                c.reading = false;
                true
            }
            None => false,
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.clients.lock().retain(|c| c.id != self.id);
    }
}

/// `/status`'s `media`: the mode, each relay and its health, the calls
/// relayed and what failed.
fn media_status(
    t: &crate::proto::media::MediaTable,
    settings: &crate::config_media::MediaSettings,
) -> serde_json::Value {
    let c = &t.counts;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let (calls, waiting) = t.sizes();
    let relays: Vec<_> = t
        .relays()
        .into_iter()
        .map(|(addr, up)| json!({"addr": addr.to_string(), "up": up}))
        .collect();
    json!({
        "mode": settings.mode.as_str(),
        "require_srtp": settings.require_srtp,
        "relays": relays,
        "calls": calls,
        "waiting": waiting,
        "offers_total": load(&c.offers),
        "answers_total": load(&c.answers),
        "deletes_total": load(&c.deletes),
        "failed_total": load(&c.failed),
        "refused_no_relay_total": load(&c.refused_no_relay),
        "refused_unencrypted_total": load(&c.refused_unencrypted),
        "unrelayed_total": load(&c.passed_unrelayed),
        "answers_refused_total": load(&c.answers_refused),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_that_never_reads_is_given_up_on_at_the_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let reader = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        reader.set_recv_buffer_size(4096).expect("rcvbuf");
        reader
            .connect(&listener.local_addr().expect("addr").into())
            .expect("connect");
        let (mut s, _) = listener.accept().expect("accept");
        // Far more than the two sockets' buffers hold.
        let big = vec![b'x'; 64 << 20];
        let deadline = Instant::now() + Duration::from_millis(300);
        let e = write_before(&mut s, &big, deadline).expect_err("the reader never reads");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        drop(reader);
    }

    #[test]
    fn patterns_match_whole_aors_or_parts() {
        assert!(matches_pattern("alice", "sip:Alice@example.com"));
        assert!(matches_pattern(
            "sip:a*@example.com",
            "sip:alice@example.com"
        ));
        assert!(!matches_pattern(
            "sip:a*@example.com",
            "sip:bob@example.com"
        ));
        assert!(matches_pattern("sip:u?@*", "sip:u7@h"));
        assert!(!matches_pattern("sip:u?@*", "sip:u17@h"));
        assert!(matches_pattern("*", ""));
        // A hostile pattern stays fast: no exponential backtracking.
        let long = "a".repeat(5000);
        assert!(!matches_pattern(&format!("{}b", "*a".repeat(200)), &long));
    }

    #[test]
    fn queries_parse_and_refuse_unknown_keys() {
        let q = StatusQuery::parse("aor=sip%3Aal*&offset=5&limit=99999").expect("parses");
        assert_eq!(q.aor.as_deref(), Some("sip:al*"));
        assert_eq!((q.offset, q.limit), (5, MAX_LIMIT));
        assert_eq!(
            StatusQuery::parse("").expect("empty"),
            StatusQuery::default()
        );
        assert!(StatusQuery::parse("limit=x").is_err());
        assert!(StatusQuery::parse("sort=aor").is_err());
        assert!(StatusQuery::parse("aor=%zz").is_err());
        assert!(StatusQuery::parse(&format!("aor={}", "*".repeat(300))).is_err());
    }
}
