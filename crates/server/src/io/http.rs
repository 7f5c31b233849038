//! The operator view: a small HTTP/1.1 endpoint (loopback by default) with
//! `GET /metrics` (Prometheus text) and `GET /status` (JSON).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::json;

use crate::io::clock::unix_now;
use crate::io::tcp::TcpHub;
use crate::proto::core::Shared;
use crate::proto::location::Location;

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
}

impl View {
    fn users(&self) -> usize {
        self.shared.auth.as_ref().map_or(0, |a| a.users().len())
    }

    /// The Prometheus exposition.
    pub fn metrics(&self) -> String {
        let now = unix_now();
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
        ];
        let mut text = self.shared.metrics.render(&gauges);
        if let Some(p) = &self.shared.privacy {
            let c = &p.counters;
            for (name, help, v) in [
                (
                    "sipsec_privacy_decryptions_total",
                    "Pseudonyms decrypted.",
                    &c.decryptions,
                ),
                (
                    "sipsec_privacy_cache_hits_total",
                    "Pseudonyms found in the cache.",
                    &c.cache_hits,
                ),
                (
                    "sipsec_privacy_refused_total",
                    "Pseudonyms that did not open (refused).",
                    &c.refused,
                ),
            ] {
                text.push_str(&format!(
                    "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}\n",
                    v.load(Ordering::Relaxed)
                ));
            }
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

    /// The `/status` document.
    pub fn status(&self) -> serde_json::Value {
        let now = unix_now();
        let c = &self.shared.config;
        let bindings: Vec<_> = self
            .shared
            .location
            .snapshot(now)
            .into_iter()
            .map(|(aor, b)| {
                json!({
                    "aor": aor,
                    "contact": b.contact,
                    "address": b.source.ip().to_string(),
                    "port": b.source.port(),
                    "expires_in": b.expires_at.saturating_sub(now),
                    "q": f64::from(b.q) / 1000.0,
                })
            })
            .collect();
        let m = &self.shared.metrics;
        json!({
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
                "reloads_total": m.tls_reloads.load(Ordering::Relaxed),
            })),
            "users": self.users(),
            "uptime_seconds": now.saturating_sub(self.shared.started),
            "tcp_connections": self.hub.as_ref().map_or(0, |h| h.connections()),
            "registrations_total": m.registered.load(Ordering::Relaxed),
            "forwarded_total": m.forwarded.load(Ordering::Relaxed),
            "auth_failures_total": m.auth_failures.load(Ordering::Relaxed),
            "malformed_total": m.malformed.load(Ordering::Relaxed),
            "rate_limited_total": m.rate_limited.load(Ordering::Relaxed),
            "privacy": self.shared.privacy.as_ref().map(|p| json!({
                "stateful": p.stateful(),
                "decryptions_total": p.counters.decryptions.load(Ordering::Relaxed),
                "cache_hits_total": p.counters.cache_hits.load(Ordering::Relaxed),
                "refused_total": p.counters.refused.load(Ordering::Relaxed),
            })),
            "banned": self.shared.guard.banned(now).into_iter().map(|(ip, left)| json!({"address": ip.to_string(), "seconds_left": left})).collect::<Vec<_>>(),
            "bindings": bindings,
        })
    }
}

fn respond(s: &mut TcpStream, code: &str, ctype: &str, body: &str) -> io::Result<()> {
    write!(
        s,
        "HTTP/1.1 {code}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn handle(view: &View, mut s: TcpStream) -> io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut chunk)?;
        if n == 0 || buf.len() > 8192 {
            return respond(&mut s, "400 Bad Request", "text/plain", "bad request\n");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&buf[..buf.iter().position(|b| *b == b'\r').unwrap_or(0)])
        .into_owned();
    let mut parts = line.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" {
        return respond(&mut s, "405 Method Not Allowed", "text/plain", "only GET\n");
    }
    match path {
        "/metrics" => respond(
            &mut s,
            "200 OK",
            "text/plain; version=0.0.4",
            &view.metrics(),
        ),
        "/status" => respond(
            &mut s,
            "200 OK",
            "application/json",
            &format!("{:#}\n", view.status()),
        ),
        _ => respond(
            &mut s,
            "404 Not Found",
            "text/plain",
            "try /metrics or /status\n",
        ),
    }
}

/// Serves the endpoint on `listener` until `stop`.
pub fn serve(
    view: View,
    listener: TcpListener,
    stop: Arc<AtomicBool>,
) -> io::Result<JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    std::thread::Builder::new()
        .name("http".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let _ = handle(&view, s);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        })
}
