//! `sipsec status`: the operator view of a running server — a summary by
//! default, the bindings with `--all` or `--aor PATTERN`, JSON with
//! `--json`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::Value;

/// Where a running server's operator endpoint is, for every client
/// command: the flag, else `$SIPSEC_HTTP`, else the `http` key of the
/// configuration file the server runs with (`--config` or
/// `$SIPSEC_CONFIG`), else 127.0.0.1:8060. The token likewise: the flag,
/// `$SIPSEC_HTTP_TOKEN`, or the file's `http_token`.
#[derive(Args, Clone)]
pub struct Endpoint {
    /// The server's operator endpoint [default: $SIPSEC_HTTP, the config
    /// file's http, or 127.0.0.1:8060].
    #[arg(long, env = "SIPSEC_HTTP")]
    pub http: Option<SocketAddr>,
    /// The configuration file the server runs with, to find its endpoint
    /// and token.
    #[arg(long, env = "SIPSEC_CONFIG")]
    pub config: Option<std::path::PathBuf>,
    /// The endpoint's token, when it requires one.
    #[arg(long, env = "SIPSEC_HTTP_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

impl Endpoint {
    /// The address and token to use.
    pub fn resolve(&self) -> Result<(SocketAddr, Option<String>), String> {
        let mut addr = self.http;
        let mut token = self.token.clone();
        if let Some(path) = &self.config {
            let mut c = sipsec_server::Config::default();
            c.apply_file(path).map_err(|e| e.to_string())?;
            if addr.is_none() {
                addr = Some(c.http.ok_or_else(|| {
                    format!(
                        "{}: the operator endpoint is off (http = false): nothing to ask",
                        path.display()
                    )
                })?);
            }
            token = token.or(c.http_token);
        }
        Ok((addr.unwrap_or(sipsec_server::config::DEFAULT_HTTP), token))
    }

    /// `GET` (or another `method`) `path`; the body of a 2xx answer.
    pub fn request(&self, method: &str, path: &str) -> Result<String, String> {
        let (addr, token) = self.resolve()?;
        fetch(method, addr, path, token.as_deref())
    }
}

/// What to show.
#[derive(Args)]
pub struct StatusArgs {
    /// Where the server is.
    #[command(flatten)]
    pub endpoint: Endpoint,
    /// List every binding (after the summary).
    #[arg(long)]
    pub all: bool,
    /// List the bindings whose AoR matches: a part of it (alice), or a
    /// pattern with * and ? matching all of it (sip:a*@example.com).
    #[arg(long, value_name = "PATTERN")]
    pub aor: Option<String>,
    /// Print the status document as JSON (with --all or --aor, every
    /// matching binding in "bindings").
    #[arg(long)]
    pub json: bool,
}

/// Bindings fetched per request when listing.
const PAGE: usize = 5_000;

fn fetch(
    method: &str,
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("cannot reach the server's operator endpoint at {addr}: {e} (is `sipsec serve` running with --http {addr}?)"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text)
        .map_err(|e| format!("reading from {addr}: {e}"))?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or("malformed HTTP response")?;
    if !head.starts_with("HTTP/1.1 2") {
        return Err(format!(
            "{addr}{path}: {} {}",
            head.lines().next().unwrap_or(""),
            body.trim()
        ));
    }
    Ok(body.to_owned())
}

/// The status document, with `query`.
pub fn document(e: &Endpoint, query: &str) -> Result<Value, String> {
    let path = format!("/status?{query}");
    serde_json::from_str(&e.request("GET", &path)?)
        .map_err(|err| format!("{path} is not JSON: {err}"))
}

/// `s` percent-encoded for a query or path segment.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The summary: settings, counters, connections, bans and the largest AoRs.
pub fn render_summary(v: &Value) -> String {
    let s = |k: &str| {
        v[k].as_str()
            .map_or_else(|| v[k].to_string(), str::to_owned)
    };
    let on = |b: &Value| {
        if b.as_bool() == Some(true) {
            "on"
        } else {
            "off"
        }
    };
    let sum = &v["summary"];
    let mut out =
        format!(
        "mode {}   auth {}   realm {}   stateful {}   users {}   uptime {}s   version {} ({})\n",
        s("mode"),
        on(&v["auth"]),
        s("realm"),
        if v["stateful"].as_bool() == Some(true) { "yes" } else { "no" },
        s("users"),
        s("uptime_seconds"),
        s("version"),
        s("commit"),
    );
    out += &format!(
        "udp {}   tcp {}   tls {}\n",
        s("udp"),
        v["tcp"].as_str().unwrap_or("off"),
        v["tls"]["addr"].as_str().unwrap_or("off"),
    );
    out += &format!(
        "bindings {} for {} AoR(s)   registrations {}   forwarded {}   auth failures {}   transactions {}\n",
        sum["bindings"], sum["aors"],
        s("registrations_total"),
        s("forwarded_total"),
        s("auth_failures_total"),
        s("active_transactions"),
    );
    let c = &v["connections"];
    out += &format!(
        "connections tcp {} tls {} ws {} wss {} (limit {})\n",
        c["tcp"],
        c["tls"],
        c["ws"],
        c["wss"],
        c["limit"].as_u64().map_or("-".into(), |l| l.to_string()),
    );
    if v["tls"].is_object() {
        let t = &v["tls"];
        out += &format!(
            "tls key {}   handshakes {} ({} failed)   reloads {} ({} refused)\n",
            t["key"].as_str().unwrap_or("?"),
            t["handshakes_total"],
            t["handshake_failures_total"],
            t["reloads_total"],
            t["reload_failures_total"],
        );
    }
    if v["location_store"].is_object() {
        let l = &v["location_store"];
        let state = if l["up"].as_bool() == Some(true) {
            "up".to_owned()
        } else {
            let mut s = format!("DOWN for {} s", l["stale_seconds"]);
            if let Some(max) = l["max_stale"].as_u64() {
                s += &format!(" (calls answered 503 after {max} s)");
            }
            s
        };
        out += &format!(
            "shared location {state}   nodes {}   resyncs {}\n",
            l["nodes"], l["resyncs_total"],
        );
        if let Some(e) = l["last_error"].as_str() {
            out += &format!("  last error: {e}\n");
        }
    }
    if v["media"].is_object() {
        out += &media_line(&v["media"]);
    }
    let empty = Vec::new();
    let banned = v["banned"].as_array().unwrap_or(&empty);
    out += &format!("banned {}", banned.len());
    for b in banned.iter().take(10) {
        let only = match b["scope"].as_str() {
            Some("websocket") => ", websocket only",
            _ => "",
        };
        out += &format!(
            "   {} ({}s left{only})",
            b["address"].as_str().unwrap_or("?"),
            b["seconds_left"]
        );
    }
    out += "\n";
    let top = sum["top_aors"].as_array().unwrap_or(&empty);
    if !top.is_empty() {
        out += "most contacts:";
        for t in top {
            out += &format!(" {} ({})", t["aor"].as_str().unwrap_or("?"), t["contacts"]);
        }
        out += "\n";
    }
    out
}

fn header() -> String {
    format!(
        "{:<32} {:<44} {:<16} {:>6} {:>8}\n",
        "AOR", "CONTACT", "ADDRESS", "PORT", "EXPIRES"
    )
}

fn row(b: &Value) -> String {
    format!(
        "{:<32} {:<44} {:<16} {:>6} {:>7}s\n",
        b["aor"].as_str().unwrap_or(""),
        b["contact"].as_str().unwrap_or(""),
        b["address"].as_str().unwrap_or(""),
        b["port"],
        b["expires_in"],
    )
}

/// Writes to standard output; a reader that stops early (`| head`) ends
/// the listing quietly.
struct Out(std::io::BufWriter<std::io::StdoutLock<'static>>);

enum Stop {
    Closed,
    Failed(String),
}

impl Out {
    fn put(&mut self, s: &str) -> Result<(), Stop> {
        self.0.write_all(s.as_bytes()).map_err(Self::why)
    }

    fn why(e: std::io::Error) -> Stop {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Stop::Closed
        } else {
            Stop::Failed(format!("writing the status: {e}"))
        }
    }
}

fn show(a: &StatusArgs, out: &mut Out) -> Result<(), Stop> {
    let listing = a.all || a.aor.is_some();
    let filter = a
        .aor
        .as_deref()
        .map(|p| format!("aor={}&", encode(p)))
        .unwrap_or_default();
    let first = document(
        &a.endpoint,
        &format!("{filter}limit={}", if listing { PAGE } else { 0 }),
    )
    .map_err(Stop::Failed)?;
    if !listing {
        let text = if a.json {
            format!("{first:#}\n")
        } else {
            let n = first["summary"]["bindings"].as_u64().unwrap_or(0);
            format!(
                "{}{}",
                render_summary(&first),
                if n > 0 {
                    "list bindings with --all, or --aor PATTERN\n"
                } else {
                    ""
                }
            )
        };
        return out.put(&text);
    }
    let matched = first["page"]["matched"].as_u64().unwrap_or(0) as usize;
    if !a.json {
        out.put(&render_summary(&first))?;
        out.put("\n")?;
        out.put(&header())?;
    }
    let mut all: Vec<Value> = Vec::new();
    let mut page = first.clone();
    let mut offset = 0;
    loop {
        let rows = page["bindings"].as_array().cloned().unwrap_or_default();
        let n = rows.len();
        for b in rows {
            if a.json {
                all.push(b);
            } else {
                out.put(&row(&b))?;
            }
        }
        offset += n;
        if n < PAGE || offset >= matched {
            break;
        }
        page = document(
            &a.endpoint,
            &format!("{filter}offset={offset}&limit={PAGE}"),
        )
        .map_err(Stop::Failed)?;
    }
    if a.json {
        let mut doc = first;
        doc["page"]["returned"] = all.len().into();
        doc["page"]["limit"] = Value::Null;
        doc["bindings"] = Value::Array(all);
        out.put(&format!("{doc:#}\n"))
    } else {
        out.put(&format!(
            "{offset} binding(s){}\n",
            a.aor
                .as_deref()
                .map(|p| format!(" matching {p:?}"))
                .unwrap_or_default()
        ))
    }
}

pub fn run(a: &StatusArgs) -> ExitCode {
    let mut out = Out(std::io::BufWriter::new(std::io::stdout().lock()));
    let result = show(a, &mut out).and_then(|()| out.0.flush().map_err(Out::why));
    match result {
        Ok(()) | Err(Stop::Closed) => ExitCode::SUCCESS,
        Err(Stop::Failed(e)) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
/// `/status`'s `media` in one line: the mode, each relay and its health,
/// the calls relayed, what failed, and the datagrams at its sockets that
/// were no relay's answer (when any were).
fn media_line(m: &serde_json::Value) -> String {
    let empty = Vec::new();
    let relays: Vec<String> = m["relays"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|r| {
            let up = if r["up"].as_bool() == Some(true) {
                "up"
            } else {
                "DOWN"
            };
            format!("{} {up}", r["addr"].as_str().unwrap_or("?"))
        })
        .collect();
    let junk = match m["answers_refused_total"].as_u64() {
        Some(n) if n > 0 => format!("   not answers {n}"),
        _ => String::new(),
    };
    format!(
        "media {}   relays {}   calls {}   failed {}   refused {} (503) {} (488)   unrelayed {}{junk}\n",
        m["mode"].as_str().unwrap_or("?"),
        if relays.is_empty() {
            "-".to_owned()
        } else {
            relays.join(", ")
        },
        m["calls"],
        m["failed_total"],
        m["refused_no_relay_total"],
        m["refused_unencrypted_total"],
        m["unrelayed_total"],
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_media_line_names_each_relay_and_its_health() {
        let m = serde_json::json!({
            "mode": "webrtc", "calls": 3, "failed_total": 1,
            "refused_no_relay_total": 2, "refused_unencrypted_total": 0, "unrelayed_total": 0,
            "relays": [{"addr": "127.0.0.1:2223", "up": true}, {"addr": "10.0.0.5:2223", "up": false}],
        });
        let line = "media webrtc   relays 127.0.0.1:2223 up, 10.0.0.5:2223 DOWN   calls 3   failed 1   refused 2 (503) 0 (488)   unrelayed 0";
        assert_eq!(super::media_line(&m), format!("{line}\n"));
        let mut flooded = m.clone();
        flooded["answers_refused_total"] = 70_000.into();
        assert_eq!(
            super::media_line(&flooded),
            format!("{line}   not answers 70000\n")
        );
    }
}
