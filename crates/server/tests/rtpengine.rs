//! The NG client against a real rtpengine (Debian's `rtpengine-daemon`,
//! userspace only: `--table=-1`), started on free loopback ports.

use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command as Process, Stdio};
use std::time::{Duration, Instant};

use sipsec_server::io::ng::Relays;
use sipsec_server::proto::ng::{Command, Event, Failure, Media, RelayConfig, Reply, Settings};

/// An rtpengine on loopback, killed when dropped.
struct Rtpengine {
    child: Child,
    ng: SocketAddr,
}

fn free_udp_port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
    s.local_addr().expect("addr").port()
}

impl Rtpengine {
    /// Starts one (media ports from a range of its own) and waits until it
    /// answers a ping.
    fn start() -> Self {
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

fn settings(relays: &[(SocketAddr, u32)], timeout_ms: u64) -> Settings {
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

fn sdp(ip: &str, port: u16) -> String {
    format!(
        "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 0 8\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\n"
    )
}

fn media(call_id: &str, to_tag: Option<&str>, body: String) -> Media {
    Media {
        call_id: call_id.into(),
        from_tag: "caller-tag".into(),
        to_tag: to_tag.map(str::to_owned),
        sdp: body,
        flags: vec!["trust-address".into()],
        replace: vec!["origin".into(), "session-connection".into()],
        options: vec![("ICE".into(), "remove".into())],
    }
}

/// The media line's port and the connection address of an SDP.
fn relayed(sdp: &str) -> (String, u16) {
    let c = sdp
        .lines()
        .find_map(|l| l.strip_prefix("c=IN IP4 "))
        .expect("c= line");
    let port = sdp
        .lines()
        .find_map(|l| l.strip_prefix("m=audio "))
        .and_then(|l| l.split(' ').next())
        .and_then(|p| p.parse().ok())
        .expect("m= line");
    (c.trim().to_owned(), port)
}

/// A call through the relay: the offer's SDP comes back with the relay's
/// address and a port of its range for the callee, the answer's for the
/// caller; the relay knows the call until it is deleted, then not.
#[test]
fn offer_answer_query_and_delete_with_a_real_rtpengine() {
    let engine = Rtpengine::start();
    let mut relays = Relays::open(
        settings(&[(engine.ng, 1)], 1000),
        "127.0.0.1:0".parse().unwrap(),
    )
    .unwrap();
    let call = "ng-call-1@sipsec.test";
    let offer = relays
        .call(&Command::Offer(media(call, None, sdp("192.0.2.10", 40000))))
        .expect("offer answered");
    let Reply::Ok {
        sdp: Some(to_callee),
    } = offer
    else {
        panic!("offer: {offer:?}");
    };
    let (ip, port) = relayed(&to_callee);
    assert_eq!(ip, "127.0.0.1", "{to_callee}");
    assert_ne!(port, 40000);
    assert!(!to_callee.contains("192.0.2.10"), "{to_callee}");
    let answer = relays
        .call(&Command::Answer(media(
            call,
            Some("callee-tag"),
            sdp("192.0.2.20", 50000),
        )))
        .expect("answer answered");
    let Reply::Ok {
        sdp: Some(to_caller),
    } = answer
    else {
        panic!("answer: {answer:?}");
    };
    let (ip, port_back) = relayed(&to_caller);
    assert_eq!(ip, "127.0.0.1");
    assert_ne!(port_back, port, "each side gets its own port");
    assert!(matches!(
        relays.call(&Command::Query {
            call_id: call.into()
        }),
        Ok(Reply::Ok { .. })
    ));
    let delete = Command::Delete {
        call_id: call.into(),
        from_tag: "caller-tag".into(),
        to_tag: None,
    };
    assert!(matches!(relays.call(&delete), Ok(Reply::Ok { .. })));
    assert!(
        matches!(
            relays.call(&Command::Query {
                call_id: call.into()
            }),
            Ok(Reply::Error(_))
        ),
        "the call is gone"
    );
    assert_eq!(relays.client().counts().refused, 0);
}

/// Two relays, the heavier one where nobody listens: the offer is resent
/// to it, then moves to the live one, which answers; the dead one is
/// reported down and new calls go to the live one at once.
#[test]
fn an_offer_fails_over_from_a_silent_relay_to_a_live_one() {
    let engine = Rtpengine::start();
    let dead = SocketAddr::from(([127, 0, 0, 1], free_udp_port()));
    let mut relays = Relays::open(
        settings(&[(dead, 1_000_000), (engine.ng, 1)], 200),
        "127.0.0.1:0".parse().unwrap(),
    )
    .unwrap();
    let offer = relays.call(&Command::Offer(media(
        "ng-failover@sipsec.test",
        None,
        sdp("192.0.2.10", 40000),
    )));
    assert!(matches!(offer, Ok(Reply::Ok { sdp: Some(_) })), "{offer:?}");
    assert_eq!(relays.take_changes(), [Event::RelayDown(dead)]);
    let up: Vec<_> = relays.client().relays().collect();
    assert_eq!(up, [(dead, false), (engine.ng, true)]);
    let resent = relays.client().counts().retransmitted;
    let again = relays.call(&Command::Offer(media(
        "ng-failover-2@sipsec.test",
        None,
        sdp("192.0.2.11", 40002),
    )));
    assert!(matches!(again, Ok(Reply::Ok { .. })));
    assert_eq!(
        relays.client().counts().retransmitted,
        resent,
        "the next call went straight to the live relay"
    );
    // With only the dead relay, a command fails instead of hanging.
    let mut lonely =
        Relays::open(settings(&[(dead, 1)], 100), "127.0.0.1:0".parse().unwrap()).unwrap();
    assert_eq!(lonely.call(&Command::Ping), Err(Failure::Timeout));
}
