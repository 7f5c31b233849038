//! An rtpengine (Debian's `rtpengine-daemon`, userspace only:
//! `--table=-1`) on free loopback ports for a test, ready once it answers
//! a ping. Shared by the server's and the command's tests (`#[path]`).

#![allow(dead_code)]

use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command as Process, Stdio};
use std::time::{Duration, Instant};

use sipsec_server::io::ng::Relays;
use sipsec_server::proto::ng::{Command, RelayConfig, Reply, Settings};

/// An rtpengine on loopback, killed when dropped.
pub struct Rtpengine {
    child: Child,
    /// Its NG control address.
    pub ng: SocketAddr,
}

/// A UDP port free a moment ago.
pub fn free_udp_port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
    s.local_addr().expect("addr").port()
}

impl Rtpengine {
    /// Starts one (media ports from a range of its own) and waits until it
    /// answers a ping.
    pub fn start() -> Self {
        let mut said = String::new();
        for _ in 0..5 {
            match Self::try_start() {
                Ok(r) => return r,
                Err(e) => said = e,
            }
        }
        panic!("rtpengine did not start: {said}");
    }

    fn try_start() -> Result<Self, String> {
        let port = free_udp_port();
        let ng = SocketAddr::from(([127, 0, 0, 1], port));
        let base = 20_000 + (u32::from(port) % 400) * 100;
        let child = Process::new("rtpengine")
            .args([
                "--config-file=none",
                "--table=-1",
                "--foreground",
                "--log-stderr",
            ])
            .args(["--interface=127.0.0.1", "--log-level=4", "--delete-delay=0"])
            .arg(format!("--listen-ng={ng}"))
            .arg(format!("--port-min={base}"))
            .arg(format!("--port-max={}", base + 99))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rtpengine runs (setup.sh installs rtpengine-daemon)");
        let mut r = Self { child, ng };
        let mut relays = Relays::open(settings(&[(ng, 1)], 100), "127.0.0.1:0".parse().unwrap())
            .expect("socket");
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if r.child.try_wait().ok().flatten().is_some() {
                let mut err = String::new();
                if let Some(mut e) = r.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return Err(format!("it exited on {ng}: {}", err.trim()));
            }
            if relays.call(&Command::Ping) == Ok(Reply::Pong) {
                return Ok(r);
            }
        }
        let _ = r.child.kill();
        Err(format!("it did not answer on {ng} within 30 s"))
    }
}

impl Drop for Rtpengine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// NG client settings for `relays` (address, weight): `timeout_ms` per
/// try, two tries, no pings.
pub fn settings(relays: &[(SocketAddr, u32)], timeout_ms: u64) -> Settings {
    Settings {
        relays: relays
            .iter()
            .map(|(addr, weight)| RelayConfig {
                addr: *addr,
                weight: *weight,
            })
            .collect(),
        timeout: Duration::from_millis(timeout_ms),
        tries: 2,
        ping_every: Duration::from_secs(3600),
        down_after: 2,
    }
}
