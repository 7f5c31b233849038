//! Helpers shared by the integration tests (each test file uses a part).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Output, Stdio};
use std::thread::JoinHandle;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_sipsec");

#[path = "../../../server/tests/support/scratch.rs"]
mod scratch;
pub use scratch::Scratch;

/// A fresh directory for one test, removed when the test passes.
pub fn tempdir(name: &str) -> Scratch {
    Scratch::new(&format!("it-{name}"))
}

/// A child process killed (SIGKILL) and reaped when dropped.
pub struct Running {
    /// The process.
    pub child: Child,
    /// The UDP address from its banner.
    pub addr: SocketAddr,
    /// The banner line.
    pub banner: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The UDP address in a `sipsec serve` banner.
pub fn banner_addr(line: &str) -> Option<SocketAddr> {
    line.split("listening on udp ")
        .nth(1)
        .and_then(|r| r.split([';', ' ', ',']).next())
        .and_then(|a| a.parse().ok())
}

/// The TLS address in a `sipsec serve` banner.
pub fn banner_tls_addr(line: &str) -> Option<SocketAddr> {
    banner_listener(line, "tls")
}

/// The address of the `name` listener (tls, ws, wss) in a `sipsec serve`
/// banner.
pub fn banner_listener(line: &str, name: &str) -> Option<SocketAddr> {
    line.split(&format!(", {name} "))
        .nth(1)
        .and_then(|r| r.split([';', ' ', ',']).next())
        .and_then(|a| a.parse().ok())
}

/// The HTTP (status and metrics) address in a `sipsec serve` banner.
pub fn banner_http_addr(line: &str) -> Option<SocketAddr> {
    line.split("status on http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|a| a.parse().ok())
}

/// Starts `sipsec serve ARGS`, waits for its banner and returns it running.
/// Panics with the server's stderr if it does not start.
pub fn serve(args: &[&str]) -> Running {
    let mut cmd = Command::new(BIN);
    cmd.arg("serve").args(args);
    serve_command(cmd)
}

/// Starts `sipsec serve` on ephemeral UDP, TCP and HTTP ports with two
/// workers, its store in `data`, plus `extra` flags.
pub fn serve_in(data: &std::path::Path, extra: &[&str]) -> Running {
    serve_workers(data, "2", extra)
}

/// [`serve_in`] with `workers` worker threads (one: the datagrams of one
/// socket are handled in the order sent).
pub fn serve_workers(data: &std::path::Path, workers: &str, extra: &[&str]) -> Running {
    let mut args = vec![
        "--udp",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--workers",
        workers,
        "--data-dir",
        data.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    serve(&args)
}

/// Spawns `cmd` (a `sipsec serve`, perhaps behind a shell that sets
/// limits), waits for its banner and returns it running.
pub fn serve_command(cmd: Command) -> Running {
    try_serve_command(cmd).unwrap_or_else(|e| panic!("{e}"))
}

/// [`serve_command`], or, when the server exits instead of starting,
/// what it printed on stderr.
pub fn try_serve_command(mut cmd: Command) -> Result<Running, String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sipsec runs");
    let mut banner = String::new();
    let _ = BufReader::new(child.stdout.as_mut().expect("piped")).read_line(&mut banner);
    let Some(addr) = banner_addr(&banner) else {
        let mut err = String::new();
        let _ = child
            .stderr
            .as_mut()
            .expect("piped")
            .read_to_string(&mut err);
        let status = child.wait().expect("exits");
        return Err(format!(
            "no address in {banner:?} ({status}); stderr: {err}"
        ));
    };
    Ok(Running {
        child,
        addr,
        banner,
    })
}

/// `sipsec keygen ARGS`, which must succeed.
pub fn keygen(args: &[&str]) {
    let out = Command::new(BIN)
        .arg("keygen")
        .args(args)
        .output()
        .expect("sipsec keygen runs");
    assert!(out.status.success(), "{}", text(&out));
}

/// A test CA (`ca.pem`, `ca.key`) and a server certificate for 127.0.0.1
/// it signed (`srv.pem`, `srv.key`), in `dir`.
pub fn tls_files(dir: &std::path::Path) {
    let f = |n: &str| dir.join(n).to_str().expect("utf-8").to_owned();
    keygen(&["ec", "-o", &f("ca.key")]);
    keygen(&[
        "cert",
        "--key",
        &f("ca.key"),
        "--cn",
        "test CA",
        "--ca",
        "-o",
        &f("ca.pem"),
    ]);
    issue(dir, "srv", "127.0.0.1");
}

/// `NAME.key` and a certificate `NAME.pem` for it, naming `cn` and
/// 127.0.0.1, issued by the CA [`tls_files`] made in `dir`.
pub fn issue(dir: &std::path::Path, name: &str, cn: &str) {
    let f = |n: String| dir.join(n).to_str().expect("utf-8").to_owned();
    let key = f(format!("{name}.key"));
    keygen(&["ec", "-o", &key]);
    keygen(&[
        "cert",
        "--key",
        &key,
        "--cn",
        cn,
        "--san",
        "127.0.0.1",
        "--issuer-cert",
        &f("ca.pem".into()),
        "--issuer-key",
        &f("ca.key".into()),
        "-o",
        &f(format!("{name}.pem")),
    ]);
}

/// Runs `sipsec users import` of `username,password` rows into `users`.
pub fn import_users(csv_rows: &str, dir: &std::path::Path, users: &std::path::Path) {
    let csv = dir.join("import.csv");
    std::fs::write(&csv, format!("username,password\n{csv_rows}")).expect("csv");
    let out = Command::new(BIN)
        .args(["users", "import"])
        .arg(&csv)
        .arg("--file")
        .arg(users)
        .output()
        .expect("sipsec users import");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts `sipsec serve` in `mode` on an ephemeral UDP port (TCP on the
/// same port, no HTTP), its store in `dir/data_name`, plus `extra` flags.
pub fn serve_mode(dir: &std::path::Path, mode: &str, data_name: &str, extra: &[&str]) -> Running {
    let data = dir.join(data_name);
    let mut args = vec![
        "--udp",
        "127.0.0.1:0",
        "--no-http",
        "--mode",
        mode,
        "--data-dir",
        data.to_str().expect("utf-8 path"),
    ];
    args.extend(extra);
    serve(&args)
}

/// `sipsec phone ARGS` with the password in the environment.
pub fn phone(password: &str, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("phone").args(args).env("SIPSEC_PASSWORD", password);
    c
}

/// A process's stdout and stderr.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Starts an answering phone and waits until it is ready for calls;
/// returns it, its SIP address and (when joined) the rest of its stderr.
pub fn answering(password: &str, args: &[&str]) -> (Child, String, JoinHandle<String>) {
    let mut child = phone(password, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sipsec phone runs");
    let Some(stderr) = child.stderr.take() else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("stderr was piped");
    };
    let mut err = BufReader::new(stderr);
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).expect("stderr") == 0 {
            let _ = child.wait();
            panic!("the answering phone stopped: {seen}");
        }
        seen.push_str(&line);
        if let Some(addr) = line.strip_prefix("waiting for a call on ") {
            let addr = addr.trim().to_string();
            // Keep draining stderr so the phone never blocks on it.
            let rest = std::thread::spawn(move || {
                let mut rest = String::new();
                let _ = err.read_to_string(&mut rest);
                rest
            });
            return (child, addr, rest);
        }
    }
}

/// A plain HTTP GET of `path` at `addr`; the whole response.
pub fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("http endpoint");
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("response");
    text
}

/// One line of text in an SVG: its corners after any rotation.
#[derive(Debug)]
pub struct TextBox {
    /// The characters.
    pub text: String,
    /// Corners, clockwise.
    pub corners: [(f64, f64); 4],
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    let len = tag[start..].find('"')?;
    Some(tag[start..start + len].to_owned())
}

fn num(tag: &str, name: &str) -> Option<f64> {
    attr(tag, name)?.parse().ok()
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

/// The lines of text of `svg` as boxes, sized with an average advance of
/// 0.55 em per character and a height of one em, rotated as drawn.
pub fn svg_text_boxes(svg: &str) -> Vec<TextBox> {
    let root_size = svg
        .split_once('>')
        .and_then(|(t, _)| num(t, "font-size"))
        .unwrap_or(16.0);
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find("<text") {
        let after = &rest[i..];
        let tag_end = after.find('>').expect("text tag closes");
        let tag = &after[..tag_end];
        let close = after.find("</text>").expect("</text>");
        let body = &after[tag_end + 1..close];
        rest = &after[close..];
        let size = num(tag, "font-size").unwrap_or(root_size);
        let anchor = attr(tag, "text-anchor").unwrap_or_else(|| "start".into());
        let (x, y) = (num(tag, "x").expect("x"), num(tag, "y").expect("y"));
        let rotation = attr(tag, "transform").map(|t| {
            let inner = t
                .trim_start_matches("rotate(")
                .trim_end_matches(')')
                .split([' ', ','])
                .filter(|p| !p.is_empty())
                .map(|p| p.parse::<f64>().expect("rotate number"))
                .collect::<Vec<_>>();
            (inner[0], inner[1], inner[2])
        });
        // The first line, then one per <tspan x=… dy=…>.
        let mut lines = Vec::new();
        let (head, tspans) = body.split_once("<tspan").unwrap_or((body, ""));
        lines.push((x, y, unescape(head)));
        let mut line_y = y;
        for t in tspans.split("<tspan").filter(|t| !t.is_empty()) {
            let (ttag, tbody) = t.split_once('>').expect("tspan tag");
            line_y += num(ttag, "dy").unwrap_or(0.0);
            let text = tbody.split("</tspan>").next().unwrap_or("");
            lines.push((num(ttag, "x").unwrap_or(x), line_y, unescape(text)));
        }
        for (lx, ly, text) in lines {
            if text.trim().is_empty() {
                continue;
            }
            let w = text.chars().count() as f64 * 0.55 * size;
            let x0 = match anchor.as_str() {
                "middle" => lx - w / 2.0,
                "end" => lx - w,
                _ => lx,
            };
            let mut corners = [
                (x0, ly - 0.75 * size),
                (x0 + w, ly - 0.75 * size),
                (x0 + w, ly + 0.25 * size),
                (x0, ly + 0.25 * size),
            ];
            if let Some((deg, cx, cy)) = rotation {
                let (sin, cos) = deg.to_radians().sin_cos();
                for c in &mut corners {
                    let (dx, dy) = (c.0 - cx, c.1 - cy);
                    *c = (cx + dx * cos - dy * sin, cy + dx * sin + dy * cos);
                }
            }
            out.push(TextBox { text, corners });
        }
    }
    out
}

/// Whether two convex quadrilaterals overlap (separating axis test).
fn quads_overlap(a: &[(f64, f64); 4], b: &[(f64, f64); 4]) -> bool {
    for quad in [a, b] {
        for k in 0..4 {
            let (p, q) = (quad[k], quad[(k + 1) % 4]);
            let axis = (q.1 - p.1, p.0 - q.0);
            let project = |c: &[(f64, f64); 4]| {
                c.iter()
                    .map(|v| v.0 * axis.0 + v.1 * axis.1)
                    .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
                        (lo.min(x), hi.max(x))
                    })
            };
            let ((alo, ahi), (blo, bhi)) = (project(a), project(b));
            if ahi <= blo || bhi <= alo {
                return false;
            }
        }
    }
    true
}

/// Every plot on `page` is readable: no two pieces of text overlap, all
/// text is inside the picture, the y axis has a title, no two line series
/// look the same; returns how many plots were checked.
pub fn assert_plots_readable(page: &str) -> usize {
    let mut count = 0;
    let mut rest = page;
    while let Some(start) = rest.find("<svg") {
        let end = start + rest[start..].find("</svg>").expect("</svg>") + 6;
        let svg = &rest[start..end];
        rest = &rest[end..];
        count += 1;
        let root = svg.split_once('>').expect("svg tag").0;
        let (w, h) = (
            num(root, "width").expect("width"),
            num(root, "height").expect("height"),
        );
        let boxes = svg_text_boxes(svg);
        for b in &boxes {
            for &(x, y) in &b.corners {
                assert!(
                    (-1.0..=w + 1.0).contains(&x) && (-1.0..=h + 1.0).contains(&y),
                    "{:?} sticks out of the {w}×{h} plot: {svg}",
                    b.text
                );
            }
        }
        for (i, a) in boxes.iter().enumerate() {
            for b in &boxes[i + 1..] {
                assert!(
                    !quads_overlap(&a.corners, &b.corners),
                    "labels {:?} and {:?} overlap: {svg}",
                    a.text,
                    b.text
                );
            }
        }
        assert!(svg.contains("rotate(-90 "), "the y axis has a title: {svg}");
        let mut styles: Vec<(Option<String>, Option<String>)> = Vec::new();
        for (i, _) in svg.match_indices("<polyline") {
            let tag = &svg[i..i + svg[i..].find("/>").expect("polyline ends")];
            let style = (attr(tag, "stroke"), attr(tag, "stroke-dasharray"));
            assert!(!styles.contains(&style), "two series drawn alike: {svg}");
            styles.push(style);
        }
    }
    count
}

/// Checks a report's `provenance` member: an RFC 3339 UTC date, this
/// version, a commit, the host's CPU, the command line and the settings.
pub fn assert_provenance(p: &serde_json::Value) {
    let date = p["date"].as_str().unwrap_or_else(|| panic!("date: {p}"));
    let shape = date.len() == 20
        && date.as_bytes()[4] == b'-'
        && date.as_bytes()[10] == b'T'
        && date.ends_with('Z');
    assert!(shape, "RFC 3339 UTC date: {date}");
    assert_eq!(p["version"], env!("CARGO_PKG_VERSION"), "{p}");
    assert!(p["commit"].as_str().is_some_and(|c| !c.is_empty()), "{p}");
    assert!(
        p["host"]["cpu"].as_str().is_some_and(|c| !c.is_empty()),
        "{p}"
    );
    assert!(p["host"]["cpus"].as_u64().is_some_and(|n| n > 0), "{p}");
    let command = p["command"].as_str().unwrap_or_default();
    assert!(command.contains("sipsec"), "the command line: {p}");
    assert!(
        p["settings"].as_object().is_some_and(|s| !s.is_empty()),
        "settings: {p}"
    );
}

/// A JSON report: its provenance checked, then its results (the
/// `results` member where the report wraps a list, else the whole).
pub fn report_json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_provenance(&v["provenance"]);
    match v.get("results") {
        Some(r) => r.clone(),
        None => v,
    }
}

/// An HTML report says when, by which sipsec, on what host and with which
/// command it was made.
pub fn assert_page_provenance(page: &str) {
    for needle in [
        "<th>date</th>",
        "<th>sipsec</th>",
        "<th>host</th>",
        "<th>command</th>",
        "<th>settings</th>",
        env!("CARGO_PKG_VERSION"),
    ] {
        assert!(page.contains(needle), "{needle} in the report");
    }
}
