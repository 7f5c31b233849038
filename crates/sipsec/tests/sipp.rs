//! Interop with real SIPp (Debian `sip-tester`, installed by setup.sh):
//! the six published operations, each with and without digest
//! authentication, over UDP and TCP, 2,000 calls at 300 calls/s each,
//! zero failures.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

mod common;

use common::{tempdir, Running};
const CALLS: u32 = 2000;
const RATE: u32 = 300;
const USERS: u32 = 2000;

fn scenarios() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../interop/sipp")
}

/// A port free for both UDP and TCP: SIPp binds the one its transport
/// needs, and a port only free for UDP may still be held by a TCP
/// connection in TIME_WAIT (SIPp then fails with EADDRINUSE; a fresh clone
/// once did). The kernel picks TCP ports for port 0 that nothing holds.
fn free_port() -> u16 {
    loop {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("socket");
        let port = tcp.local_addr().expect("addr").port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Users `user0000`… with password `pw-user0000`…, as a users file for the
/// server and an injection file for SIPp.
fn users(dir: &Path) -> (PathBuf, PathBuf) {
    let mut csv = String::from("username,password\n");
    let mut inf = String::from("SEQUENTIAL\n");
    for i in 0..USERS {
        csv += &format!("user{i:04},pw-user{i:04}\n");
        inf += &format!("user{i:04};[authentication username=user{i:04} password=pw-user{i:04}]\n");
    }
    csv += "callee,pw-callee\n";
    std::fs::write(dir.join("users.inf"), inf).expect("inf");
    std::fs::write(
        dir.join("callee.inf"),
        "SEQUENTIAL\ncallee;[authentication username=callee password=pw-callee]\n",
    )
    .expect("inf");
    common::import_users(
        csv.trim_start_matches("username,password\n"),
        dir,
        &dir.join("users.tsv"),
    );
    (dir.join("users.tsv"), dir.join("users.inf"))
}

fn serve(dir: &Path, mode: &str, auth: bool, extra: &[&str]) -> Running {
    let users = dir.join("users.tsv");
    let mut args = vec![];
    if auth {
        // SIPp 3.6 answers only the first challenge and only knows MD5.
        args.extend([
            "--auth",
            "--digest",
            "md5,sha-256",
            "--users",
            users.to_str().expect("utf-8 path"),
        ]);
    }
    args.extend(extra);
    common::serve_mode(dir, mode, &format!("data-{mode}-{auth}"), &args)
}

/// SIPp's transport flag.
#[derive(Clone, Copy, Debug)]
enum Proto {
    Udp,
    Tcp,
}

impl Proto {
    fn flag(self) -> &'static str {
        match self {
            Proto::Udp => "u1",
            Proto::Tcp => "t1",
        }
    }
}

/// Runs a SIPp client scenario to completion and checks every call succeeded.
fn sipp(
    server: SocketAddr,
    proto: Proto,
    scenario: &str,
    local_port: u16,
    calls: u32,
    extra: &[&str],
) {
    let out = Command::new("sipp")
        .arg(server.to_string())
        .args(["-t", proto.flag()])
        .arg("-sf")
        .arg(scenarios().join(scenario))
        .args([
            "-m",
            &calls.to_string(),
            "-r",
            &RATE.to_string(),
            "-l",
            "400",
        ])
        .args(["-p", &local_port.to_string(), "-i", "127.0.0.1"])
        .args([
            "-nostdin",
            "-timeout",
            "120s",
            "-timeout_error",
            "-max_recv_loops",
            "10000",
        ])
        .args(extra)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run sipp ({e}): run ./setup.sh, which installs sip-tester")
        });
    let text = String::from_utf8_lossy(&out.stdout);
    let count = |label: &str| -> u32 {
        text.lines()
            .filter(|l| l.trim_start().starts_with(label))
            .filter_map(|l| l.rsplit('|').next().and_then(|v| v.trim().parse().ok()))
            .next_back()
            .unwrap_or(0)
    };
    let (ok, failed) = (count("Successful call"), count("Failed call"));
    assert!(
        out.status.success() && ok == calls && failed == 0,
        "{scenario} over {proto:?} {extra:?}: {ok} successful, {failed} failed (exit {:?})\n{}\n{}",
        out.status.code(),
        text.lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn registrar_operations(auth: bool, proto: Proto) {
    let dir = tempdir(&format!("reg-{auth}-{proto:?}"));
    let (_, inf) = users(&dir);
    let s = serve(&dir, "registrar", auth, &[]);
    let sc = if auth {
        "register_auth.xml"
    } else {
        "register.xml"
    };
    let inf = inf.to_str().expect("utf-8 path");
    let port = free_port();
    // Same local port each time, so the contacts of update and logout are
    // the bindings that register created.
    for expires in ["3600", "1800", "0"] {
        // register, register update, register logout
        sipp(
            s.addr,
            proto,
            sc,
            port,
            CALLS,
            &["-inf", inf, "-key", "expires", expires],
        );
    }
}

#[test]
fn sipp_register_update_logout_udp() {
    registrar_operations(false, Proto::Udp);
}

#[test]
fn sipp_register_update_logout_with_digest_udp() {
    registrar_operations(true, Proto::Udp);
}

#[test]
fn sipp_register_update_logout_tcp() {
    registrar_operations(false, Proto::Tcp);
}

#[test]
fn sipp_register_update_logout_with_digest_tcp() {
    registrar_operations(true, Proto::Tcp);
}

struct Uas(Child);

impl Drop for Uas {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Arguments common to the call scenarios of one test.
struct Calls {
    dir: common::Scratch,
    inf: String,
    auth: bool,
    proto: Proto,
}

impl Calls {
    fn new(name: &str, auth: bool, proto: Proto) -> Self {
        let dir = tempdir(&format!("{name}-{auth}-{proto:?}"));
        let (_, inf) = users(&dir);
        let inf = inf.to_str().expect("utf-8 path").to_owned();
        Self {
            dir,
            inf,
            auth,
            proto,
        }
    }

    fn suffix(&self) -> &'static str {
        if self.auth {
            "_auth"
        } else {
            ""
        }
    }

    /// Registers `callee` from `port` (the UAS's address).
    fn register_callee(&self, server: SocketAddr, port: u16) {
        let callee_inf = self.dir.join("callee.inf");
        let callee_inf = callee_inf.to_str().expect("utf-8 path");
        let reg = if self.auth {
            "register_auth.xml"
        } else {
            "register.xml"
        };
        sipp(
            server,
            self.proto,
            reg,
            port,
            1,
            &["-inf", callee_inf, "-key", "expires", "3600"],
        );
    }

    /// Runs `scenario` calling `service`, with credentials when auth is on.
    fn run(&self, server: SocketAddr, scenario: &str, service: &str) {
        let mut args = vec!["-s", service];
        if self.auth {
            args.extend(["-inf", self.inf.as_str()]);
        }
        sipp(
            server,
            self.proto,
            &format!("{scenario}{}.xml", self.suffix()),
            free_port(),
            CALLS,
            &args,
        );
    }
}

/// Proxy: the SIPp UAS registers as `callee`, then calls go through
/// (stateless or transaction-stateful), and calls to nobody get 404.
fn proxy_operations(auth: bool, proto: Proto, stateful: bool) {
    let c = Calls::new(&format!("proxy-{stateful}"), auth, proto);
    let mut args = vec![];
    if stateful {
        args.push("--stateful");
    }
    let proxy = serve(&c.dir, "proxy", auth, &args);
    let uas_port = free_port();
    c.register_callee(proxy.addr, uas_port);
    let uas = Uas(Command::new("sipp")
        .args([
            "-sn",
            "uas",
            "-t",
            proto.flag(),
            "-p",
            &uas_port.to_string(),
            "-i",
            "127.0.0.1",
        ])
        .args(["-nostdin", "-timeout", "150s"])
        .stdout(Stdio::null())
        .spawn()
        .expect("sipp uas"));
    // Wait until the UAS listens. Over TCP nobody retransmits: an INVITE
    // forwarded before it accepts would be lost. Over UDP the datagram
    // would draw an ICMP port-unreachable, which the stateful proxy turns
    // into 503 at once (a fresh clone once failed 1 call of 2,000 so).
    let uas_addr = SocketAddr::from(([127, 0, 0, 1], uas_port));
    let listening = (0..500).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        match proto {
            Proto::Tcp => std::net::TcpStream::connect(uas_addr).is_ok(),
            Proto::Udp => udp_bound(uas_port),
        }
    });
    assert!(listening, "the SIPp UAS never listened on {uas_addr}");
    c.run(proxy.addr, "invite", "callee");
    c.run(proxy.addr, "invite_not_found", "nobody");
    drop(uas);
}

/// Whether a UDP socket is bound to `port` on this host (/proc/net/udp).
fn udp_bound(port: u16) -> bool {
    let hex = format!(":{port:04X} ");
    ["/proc/net/udp", "/proc/net/udp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|a| format!("{a} ").ends_with(&hex))
            })
        })
    })
}

/// Redirect: 302 with the registered contact.
fn redirect_operations(auth: bool, proto: Proto) {
    let c = Calls::new("redirect", auth, proto);
    let redirect = serve(&c.dir, "redirect", auth, &[]);
    c.register_callee(redirect.addr, free_port());
    c.run(redirect.addr, "redirect", "callee");
}

fn call_operations(auth: bool, proto: Proto) {
    proxy_operations(auth, proto, false);
    redirect_operations(auth, proto);
}

#[test]
fn sipp_invite_not_found_redirect_udp() {
    call_operations(false, Proto::Udp);
}

#[test]
fn sipp_invite_not_found_redirect_with_digest_udp() {
    call_operations(true, Proto::Udp);
}

#[test]
fn sipp_invite_not_found_redirect_tcp() {
    call_operations(false, Proto::Tcp);
}

#[test]
fn sipp_invite_not_found_redirect_with_digest_tcp() {
    call_operations(true, Proto::Tcp);
}

#[test]
fn sipp_stateful_invite_udp() {
    proxy_operations(false, Proto::Udp, true);
}

#[test]
fn sipp_stateful_invite_with_digest_udp() {
    proxy_operations(true, Proto::Udp, true);
}

#[test]
fn sipp_stateful_invite_tcp() {
    proxy_operations(false, Proto::Tcp, true);
}

#[test]
fn sipp_stateful_invite_with_digest_tcp() {
    proxy_operations(true, Proto::Tcp, true);
}
