//! An IPv6 source is its /64 (`[guard] ipv6_prefix`): a host picks any
//! address in its prefix at will (RFC 8981), so a party that rotates
//! through them must meet one ban and one connection limit, not a fresh
//! one per address. Real sockets in a network namespace of the test's
//! own, whose loopback carries addresses of two /64s. Run as root, as CI
//! runs (`./setup.sh` installs iproute2).

#[path = "support/peers.rs"]
mod peers;
#[path = "support/scratch.rs"]
mod scratch;
#[path = "support/served.rs"]
mod served;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use peers::{ip, udp_at};
use served::Served;
use sipsec_server::proto::users::{UserEntry, Users};
use sipsec_server::{Config, Mode};

/// The server's address, the rotating party's prefix, another party's.
const SERVER: &str = "2001:db8:5:1::1";
const ROTATING: &str = "2001:db8:5:1";
const OTHER: &str = "2001:db8:5:2::1";

/// A network namespace whose loopback holds the server's address, ten of
/// the rotating party's and the other party's; deleted with it.
struct Namespace(String);

impl Namespace {
    fn new() -> Self {
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = MADE.fetch_add(1, Relaxed);
        let ns = format!("sipsec-v6-{}-{n}", std::process::id());
        ip(&["netns", "add", &ns]);
        let made = Self(ns);
        ip(&["-n", &made.0, "link", "set", "lo", "up"]);
        let mut addrs = vec![SERVER.to_owned(), OTHER.to_owned()];
        addrs.extend((1..=10).map(|i| format!("{ROTATING}::{i:x}:{i:x}")));
        for a in addrs {
            let prefix = format!("{a}/64");
            ip(&[
                "-n", &made.0, "-6", "addr", "add", &prefix, "dev", "lo", "nodad",
            ]);
        }
        made
    }

    fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.0)
    }

    /// Runs `f` on a thread inside the namespace: what it opens (sockets,
    /// a server's threads) lives there.
    fn inside<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = self.path();
        std::thread::spawn(move || {
            sip_udp::enter_network_namespace(&path).expect("setns");
            f()
        })
        .join()
        .expect("the thread in the namespace")
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn rotated(i: u16) -> IpAddr {
    format!("{ROTATING}::{i:x}:{i:x}").parse().expect("address")
}

fn register(from: &UdpSocket, cseq: u32, auth: &str) -> String {
    let me = from.local_addr().expect("local");
    format!(
        "REGISTER sip:[{SERVER}] SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-v6{cseq}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:alice@[{SERVER}]>;tag=v6\r\nTo: <sip:alice@[{SERVER}]>\r\n\
         Call-ID: v6-{cseq}\r\nCSeq: {cseq} REGISTER\r\nContact: <sip:alice@{me}>\r\n\
         {auth}Content-Length: 0\r\n\r\n"
    )
}

fn ask(from: &UdpSocket, srv: SocketAddr, req: &str) -> String {
    from.send_to(req.as_bytes(), srv).expect("send");
    let mut b = [0u8; 8192];
    let n = from.recv(&mut b).expect("an answer");
    String::from_utf8_lossy(&b[..n]).into_owned()
}

/// Waits (bounded) until `counter` reaches `n`.
fn await_count(counter: &std::sync::atomic::AtomicU64, n: u64, what: &str) {
    let until = Instant::now() + Duration::from_secs(10);
    while counter.load(Relaxed) < n {
        assert!(Instant::now() < until, "{what}");
        std::thread::yield_now();
    }
}

fn server(ns: &Namespace, name: &'static str) -> (Served, scratch::Scratch) {
    let users_dir = scratch::Scratch::new(&format!("{name}-users"));
    let users = users_dir.join("users.tsv");
    let mut u = Users::default();
    let entry = UserEntry::from_password("alice", "sipsec", "wonderland");
    u.insert("alice", "sipsec", entry).expect("user");
    sipsec_server::io::users_file::save(&u, &users).expect("save users");
    let at = SocketAddr::new(SERVER.parse().expect("address"), 5060);
    let mut config = Config {
        mode: Mode::Registrar,
        udp: at,
        tcp: Some(at),
        http: None,
        advertise: at,
        auth: true,
        users,
        ..Config::default()
    };
    config.guard.max_auth_failures = 3;
    config.connections.per_ip = 2;
    let s = ns.inside(move || Served::start(name, config).expect("server starts"));
    (s, users_dir)
}

/// Three wrong answers, each from another address of one /64, ban the
/// /64: a fourth address of it is refused, another /64 is answered.
#[test]
fn wrong_answers_from_rotating_addresses_ban_their_whole_prefix() {
    let ns = Namespace::new();
    let (s, _users) = server(&ns, "v6-bans");
    let srv = s.handle.local_addr();
    let (party, other) = ns.inside(|| {
        let party: Vec<UdpSocket> = (1..=4).map(|i| udp_at((rotated(i), 0))).collect();
        (
            party,
            udp_at((OTHER.parse::<IpAddr>().expect("address"), 0)),
        )
    });
    for (i, sock) in party.iter().take(3).enumerate() {
        let cseq = 2 * i as u32 + 1;
        let challenge = ask(sock, srv, &register(sock, cseq, ""));
        let creds = peers::wrong_credentials(&challenge, &format!("sip:[{SERVER}]"));
        let refused = ask(sock, srv, &register(sock, cseq + 1, &creds));
        assert!(refused.starts_with("SIP/2.0 401 "), "{refused}");
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let bans: Vec<String> = s
        .handle
        .shared()
        .guard
        .banned(now)
        .iter()
        .map(|b| b.source.to_string())
        .collect();
    assert_eq!(bans, [format!("{ROTATING}::/64")]);
    let fourth = &party[3];
    fourth
        .send_to(register(fourth, 9, "").as_bytes(), srv)
        .expect("send");
    await_count(
        &s.handle.shared().metrics.banned,
        1,
        "a fourth address of the prefix was not refused as banned",
    );
    let answer = ask(&other, srv, &register(&other, 1, ""));
    assert!(answer.starts_with("SIP/2.0 401 "), "{answer}");
}

/// `per_ip` connections (here two) hold for the whole /64: of three from
/// three addresses of it one is refused, one from another /64 is served.
#[test]
fn connections_from_rotating_addresses_share_their_prefixs_limit() {
    let ns = Namespace::new();
    let (s, _users) = server(&ns, "v6-connections");
    let srv = s.handle.local_addr();
    let connect = move |from: IpAddr| {
        let sock = socket2::Socket::new(
            socket2::Domain::IPV6,
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )
        .expect("socket");
        sock.bind(&SocketAddr::new(from, 0).into()).expect("bind");
        sock.connect(&srv.into()).expect("connect");
        let t: TcpStream = sock.into();
        t.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        t
    };
    let (prefix, mut other) = ns.inside(move || {
        let prefix: Vec<TcpStream> = (1..=3).map(|i| connect(rotated(i))).collect();
        (prefix, connect(OTHER.parse().expect("address")))
    });
    let options = |to: &TcpStream| {
        let me = to.local_addr().expect("local");
        format!(
            "OPTIONS sip:[{SERVER}] SIP/2.0\r\nVia: SIP/2.0/TCP {me};branch=z9hG4bK-o{}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:probe@[{SERVER}]>;tag=o\r\nTo: <sip:[{SERVER}]>\r\n\
             Call-ID: o-{}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
            me.port(),
            me.port()
        )
    };
    await_count(
        &s.handle.shared().metrics.refused_per_ip,
        1,
        "no connection of the prefix was refused",
    );
    // The refused one is closed: what it sends is not answered. Which of
    // the three it is depends on which reactor accepted which first (each
    // counts its prefix after its own accept), so each is asked.
    let mut b = [0u8; 4096];
    let (mut answered, mut closed) = (0, 0);
    for mut c in prefix {
        let _ = c.write_all(options(&c).as_bytes());
        match c.read(&mut b) {
            Ok(n) if n > 0 => {
                let answer = String::from_utf8_lossy(&b[..n]);
                assert!(answer.starts_with("SIP/2.0 200 "), "{answer}");
                answered += 1;
            }
            _ => closed += 1,
        }
    }
    assert_eq!((answered, closed), (2, 1), "two served, one refused");
    other.write_all(options(&other).as_bytes()).expect("send");
    let n = other.read(&mut b).expect("an answer");
    let answer = String::from_utf8_lossy(&b[..n]);
    assert!(answer.starts_with("SIP/2.0 200 "), "{answer}");
    assert_eq!(s.handle.shared().metrics.refused_per_ip.load(Relaxed), 1);
}
