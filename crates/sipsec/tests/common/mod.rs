//! Helpers shared by the integration tests (each test file uses a part).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::thread::JoinHandle;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_sipsec");

/// A fresh directory for one test.
pub fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sipsec-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
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
    line.split(", tls ")
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
    let mut args = vec![
        "--udp",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--workers",
        "2",
        "--data-dir",
        data.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    serve(&args)
}

/// Spawns `cmd` (a `sipsec serve`, perhaps behind a shell that sets
/// limits), waits for its banner and returns it running.
pub fn serve_command(mut cmd: Command) -> Running {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sipsec runs");
    let mut banner = String::new();
    BufReader::new(child.stdout.as_mut().expect("piped"))
        .read_line(&mut banner)
        .expect("banner");
    let Some(addr) = banner_addr(&banner) else {
        let mut err = String::new();
        let _ = child
            .stderr
            .as_mut()
            .expect("piped")
            .read_to_string(&mut err);
        panic!("no address in {banner:?}; stderr: {err}");
    };
    Running {
        child,
        addr,
        banner,
    }
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
    keygen(&["ec", "-o", &f("srv.key")]);
    keygen(&[
        "cert",
        "--key",
        &f("srv.key"),
        "--cn",
        "127.0.0.1",
        "--san",
        "127.0.0.1",
        "--issuer-cert",
        &f("ca.pem"),
        "--issuer-key",
        &f("ca.key"),
        "-o",
        &f("srv.pem"),
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
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("response");
    text
}
