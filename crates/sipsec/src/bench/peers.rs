//! What the benchmarks that start their own servers share: the child
//! processes, free ports, sockets, waiting until a server answers.

use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command};
use std::time::Duration;

/// A child process stopped when dropped (SIGTERM, so Kamailio's workers
/// go too), then reaped.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

/// A UDP port on loopback free now.
pub fn free_udp() -> Result<SocketAddr, String> {
    let s = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("a free port: {e}"))?;
    s.local_addr().map_err(|e| e.to_string())
}

/// A loopback UDP socket that waits at most `timeout` for a datagram.
pub fn socket(timeout: Duration) -> Result<UdpSocket, String> {
    let s = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("a socket: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// Sends OPTIONS until `addr` answers (200 tries, 100 ms apart at most).
pub fn wait_ready(addr: SocketAddr) -> Result<(), String> {
    let probe = socket(Duration::from_millis(100))?;
    let me = probe.local_addr().map_err(|e| e.to_string())?;
    let mut buf = [0u8; 2048];
    for i in 0..200 {
        let options = format!(
            "OPTIONS sip:{addr} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-ready{i}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:probe@{me}>;tag=p\r\nTo: <sip:{addr}>\r\n\
             Call-ID: ready-{i}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
        );
        let _ = probe.send_to(options.as_bytes(), addr);
        if probe.recv(&mut buf).is_ok() {
            return Ok(());
        }
    }
    Err(format!("{addr} did not answer OPTIONS"))
}

/// Sends the request `bytes` to `dest` over `sock` as a UAC transaction
/// does over UDP (RFC 3261 §17.1): again after T1 = 500 ms, doubling (up
/// to T2 = 4 s but for an INVITE), until a final response comes or 64·T1
/// = 32 s (Timer B or F) run out; for an INVITE a provisional response
/// ends the retransmissions (Timer A). Responses `mine` refuses (another
/// call's) are skipped. Returns the final response; the socket's read
/// timeout is left as it was.
pub fn transact(
    sock: &UdpSocket,
    bytes: &[u8],
    dest: SocketAddr,
    invite: bool,
    mine: impl Fn(&[u8]) -> bool,
) -> Result<Vec<u8>, String> {
    use std::time::Instant;
    let before = sock.read_timeout().map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(32);
    let mut interval = Duration::from_millis(500);
    let mut resend = Some(Instant::now());
    let mut buf = vec![0u8; 65_535];
    let answer = loop {
        let now = Instant::now();
        if now >= deadline {
            break Err(format!("no final response from {dest} within 32 s"));
        }
        if let Some(at) = resend.filter(|at| now >= *at) {
            sock.send_to(bytes, dest).map_err(|e| e.to_string())?;
            resend = Some(at + interval);
            interval = if invite {
                interval * 2
            } else {
                (interval * 2).min(Duration::from_secs(4))
            };
        }
        let wake = resend.map_or(deadline, |at| at.min(deadline));
        sock.set_read_timeout(Some(
            wake.saturating_duration_since(now)
                .max(Duration::from_millis(1)),
        ))
        .map_err(|e| e.to_string())?;
        match sock.recv(&mut buf) {
            Ok(n) if !mine(&buf[..n]) => {}
            Ok(n) if buf[..n].starts_with(b"SIP/2.0 1") => {
                if invite {
                    resend = None;
                }
            }
            Ok(n) => break Ok(buf[..n].to_vec()),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => break Err(e.to_string()),
        }
    };
    sock.set_read_timeout(before).map_err(|e| e.to_string())?;
    answer
}

/// `m`'s header lines named `name` (any case).
pub fn header_lines<'a>(m: &'a str, name: &str) -> impl Iterator<Item = &'a str> + 'a {
    let name = name.to_owned();
    m.split("\r\n").filter(move |l| {
        l.split_once(':')
            .is_some_and(|(n, _)| n.trim().eq_ignore_ascii_case(&name))
    })
}

/// The median of `v` (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// This binary's `sipsec serve` on UDP `addr` with `config` (and the
/// flags in `extra`), its store in `data`, once it answers OPTIONS.
pub fn serve(
    addr: SocketAddr,
    data: &std::path::Path,
    config: &std::path::Path,
    extra: &[&str],
) -> Result<Running, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let child = Command::new(exe)
        .args(["serve", "--no-tcp", "--no-http"])
        .args(extra)
        .args(["--udp", &addr.to_string()])
        .arg("--data-dir")
        .arg(data)
        .arg("--config")
        .arg(config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("sipsec serve: {e}"))?;
    let server = Running(child);
    wait_ready(addr)?;
    Ok(server)
}
