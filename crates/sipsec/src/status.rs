//! `sipsec status`: the operator view of a running server, as a table.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;

fn fetch(addr: SocketAddr, path: &str) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("cannot reach the server's operator endpoint at {addr}: {e} (is `sipsec serve` running with --http {addr}?)"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text)
        .map_err(|e| format!("reading from {addr}: {e}"))?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or("malformed HTTP response")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!(
            "{addr}{path}: {}",
            head.lines().next().unwrap_or("")
        ));
    }
    Ok(body.to_owned())
}

/// Renders a `/status` document.
pub fn render(v: &Value) -> String {
    let s = |k: &str| {
        v[k].as_str()
            .map_or_else(|| v[k].to_string(), str::to_owned)
    };
    let mut out = format!(
        "mode {}   auth {}   realm {}   stateful {}   users {}   uptime {}s\nudp {}   tcp {}   registrations {}   forwarded {}   auth failures {}\n\n",
        s("mode"),
        if v["auth"].as_bool() == Some(true) { "on" } else { "off" },
        s("realm"),
        if v["stateful"].as_bool() == Some(true) { "yes" } else { "no" },
        s("users"),
        s("uptime_seconds"),
        s("udp"),
        v["tcp"].as_str().unwrap_or("off"),
        s("registrations_total"),
        s("forwarded_total"),
        s("auth_failures_total"),
    );
    let empty = Vec::new();
    let bindings = v["bindings"].as_array().unwrap_or(&empty);
    out += &format!(
        "{:<32} {:<44} {:<16} {:>6} {:>8}\n",
        "AOR", "CONTACT", "ADDRESS", "PORT", "EXPIRES"
    );
    for b in bindings {
        out += &format!(
            "{:<32} {:<44} {:<16} {:>6} {:>7}s\n",
            b["aor"].as_str().unwrap_or(""),
            b["contact"].as_str().unwrap_or(""),
            b["address"].as_str().unwrap_or(""),
            b["port"],
            b["expires_in"],
        );
    }
    out += &format!("{} binding(s)\n", bindings.len());
    out
}

pub fn run(http: SocketAddr) -> ExitCode {
    let result = fetch(http, "/status").and_then(|body| {
        serde_json::from_str::<Value>(&body).map_err(|e| format!("{http}/status is not JSON: {e}"))
    });
    match result {
        Ok(v) => {
            use std::io::Write;
            // A reader that stops early (`| head`) closes the pipe: that
            // ends the listing, it is not an error (and never a panic).
            match std::io::stdout().lock().write_all(render(&v).as_bytes()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: writing the status: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
