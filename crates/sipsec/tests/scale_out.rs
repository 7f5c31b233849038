//! Several `sipsec serve` nodes sharing one location in a real
//! `redis-server` (Debian's, installed by setup.sh), each test starting
//! its own on a free port: a call reaches a phone connected to another
//! node; a node killed with -9 is survived by re-registering through
//! another; Redis stopped gives 503 with Retry-After while cached contacts
//! stay reachable, and service comes back with it; bindings answered 200
//! survive a Redis restart from its append-only file.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{serve, tempdir, Running};

/// A `redis-server` with an append-only file fsynced on every write,
/// killed (SIGKILL) when dropped.
struct Redis {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Redis {
    fn start(dir: &Path) -> Self {
        Self::start_on(dir, free_port())
    }

    fn start_on(dir: &Path, port: u16) -> Self {
        Self::launch(dir, port, &[])
    }

    /// Plain TCP on `port` (for the test's own commands), plus `extra`
    /// arguments.
    fn launch(dir: &Path, port: u16, extra: &[&str]) -> Self {
        std::fs::create_dir_all(dir).expect("redis dir");
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (./setup.sh installs it)");
        let r = Self {
            child,
            port,
            dir: dir.to_owned(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if r.ping() {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer PING"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts again on the same port, from the same append-only file.
    fn restart(mut self) -> Self {
        self.kill();
        let (dir, port) = (self.dir.clone(), self.port);
        Self::start_on(&dir, port)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A proxy on ephemeral UDP (TCP on the same port) and HTTP ports.
const PROXY: [&str; 6] = [
    "--mode",
    "proxy",
    "--udp",
    "127.0.0.1:0",
    "--http",
    "127.0.0.1:0",
];

/// A proxy node on ephemeral ports (TCP on the UDP port) sharing `redis`.
fn node(dir: &Path, name: &str, redis: &Redis) -> Running {
    let data = dir.join(name);
    let url = redis.url();
    let mut args = PROXY.to_vec();
    args.extend_from_slice(&[
        "--workers",
        "2",
        "--data-dir",
        data.to_str().expect("utf-8"),
        "--redis",
        &url,
    ]);
    serve(&args)
}

fn http_of(n: &Running) -> String {
    common::banner_http_addr(&n.banner)
        .expect("http address in the banner")
        .to_string()
}

/// The value of a metric in a node's exposition.
fn metric(n: &Running, name: &str) -> Option<u64> {
    let text = common::http_get(&http_of(n), "/metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Waits up to 5 s for node `n` to hold `count` bindings.
fn await_bindings(n: &Running, count: u64, why: &str) {
    await_metric(n, "sipsec_bindings", count, Duration::from_secs(5), why);
}

/// Waits up to `within` for metric `name` of node `n` to read `want`.
fn await_metric(n: &Running, name: &str, want: u64, within: Duration, why: &str) {
    let deadline = Instant::now() + within;
    while metric(n, name) != Some(want) {
        assert!(Instant::now() < deadline, "{why}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends an INVITE for `user` from `caller` through the node at `to` and
/// expects it at `callee`'s contact.
fn call_reaches(caller: &UdpSocket, to: SocketAddr, callee: &UdpSocket, user: &str, call_id: &str) {
    let from = caller.local_addr().expect("local");
    caller
        .send_to(invite(user, from, call_id).as_bytes(), to)
        .expect("send");
    let got = recv(callee).unwrap_or_else(|| panic!("{call_id}: the INVITE never reached {user}"));
    assert!(got.starts_with(&format!("INVITE sip:{user}@")), "{got}");
}

fn register(
    user: &str,
    via: &str,
    contact: &str,
    call_id: &str,
    cseq: u32,
    expires: u32,
) -> String {
    format!(
        "REGISTER sip:localhost SIP/2.0\r\nVia: {via};branch=z9hG4bK-{call_id}-{cseq}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:{user}@localhost>;tag=r{cseq}\r\nTo: <sip:{user}@localhost>\r\n\
         Call-ID: {call_id}\r\nCSeq: {cseq} REGISTER\r\nContact: <{contact}>\r\nExpires: {expires}\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

fn invite(user: &str, from: SocketAddr, call_id: &str) -> String {
    format!(
        "INVITE sip:{user}@localhost SIP/2.0\r\nVia: SIP/2.0/UDP {from};branch=z9hG4bK-{call_id};rport\r\n\
         Max-Forwards: 70\r\nFrom: <sip:caller@localhost>;tag=c1\r\nTo: <sip:{user}@localhost>\r\n\
         Call-ID: {call_id}\r\nCSeq: 1 INVITE\r\nContact: <sip:caller@{from}>\r\nContent-Length: 0\r\n\r\n"
    )
}

/// A phone on a TCP connection to a node.
struct TcpPhone {
    r: BufReader<TcpStream>,
    local: SocketAddr,
}

impl TcpPhone {
    fn connect(to: SocketAddr) -> Self {
        let s = TcpStream::connect(to).expect("connect to the node");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let local = s.local_addr().expect("local");
        Self {
            r: BufReader::new(s),
            local,
        }
    }

    fn send(&mut self, msg: &str) {
        self.r.get_mut().write_all(msg.as_bytes()).expect("send");
    }

    /// The next SIP message, or `None` at the end of the connection.
    fn read(&mut self) -> Option<String> {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if self.r.read_line(&mut line).ok()? == 0 {
                return None;
            }
            if line == "\r\n" && head.is_empty() {
                continue; // a keep-alive
            }
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        self.r.read_exact(&mut body).ok()?;
        Some(head + &String::from_utf8_lossy(&body))
    }

    /// Registers `user` over this connection; returns the answer. The
    /// contact is the phone's own (its listening port, as phones have),
    /// the same whichever connection carries the REGISTER: the server
    /// reaches it over the connection.
    fn register(&mut self, user: &str, cseq: u32) -> String {
        let l = self.local;
        let msg = register(
            user,
            &format!("SIP/2.0/TCP {l}"),
            &format!("sip:{user}@127.0.0.1:5099;transport=tcp"),
            &format!("reg-{user}"),
            cseq,
            300,
        );
        self.send(&msg);
        self.read().expect("an answer to REGISTER")
    }
}

fn caller() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("udp");
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    s
}

fn recv(s: &UdpSocket) -> Option<String> {
    let mut buf = [0u8; 65_535];
    let (n, _) = s.recv_from(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Registers `user` at the phone's own address through the node at `to`
/// (Call-ID `call_id`) and expects 200 OK.
fn register_ok(
    phone: &UdpSocket,
    to: SocketAddr,
    user: &str,
    call_id: &str,
    cseq: u32,
    expires: u32,
) {
    let msg = udp_register(phone, user, call_id, cseq, expires);
    phone.send_to(msg.as_bytes(), to).expect("send");
    let ok = recv(phone).expect("answer");
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
}

/// A REGISTER of `user` at the phone's own address, as a UDP phone sends it.
fn udp_register(phone: &UdpSocket, user: &str, call_id: &str, cseq: u32, expires: u32) -> String {
    let pl = phone.local_addr().expect("local");
    register(
        user,
        &format!("SIP/2.0/UDP {pl}"),
        &format!("sip:{user}@{pl}"),
        call_id,
        cseq,
        expires,
    )
}

/// Sends REGISTERs (CSeq from `cseq` up) until one is answered 200 OK,
/// as a phone retrying after 503 does; fails after 20 s.
fn register_until_ok(phone: &UdpSocket, to: SocketAddr, user: &str, call_id: &str, mut cseq: u32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let msg = udp_register(phone, user, call_id, cseq, 300);
        phone.send_to(msg.as_bytes(), to).expect("send");
        let r = recv(phone).unwrap_or_default();
        if r.starts_with("SIP/2.0 200") {
            return;
        }
        assert!(Instant::now() < deadline, "REGISTER never recovered: {r}");
        cseq += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `sipsec serve` as a proxy with `[location]` `fields` (TOML lines,
/// written to NAME.toml in `dir`), its data in `dir`/NAME, plus `extra`
/// flags.
fn proxy_command(dir: &Path, name: &str, fields: &str, extra: &[&str]) -> Command {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!("[location]\nbackend = \"redis\"\n{fields}"),
    )
    .expect("config");
    let mut cmd = Command::new(common::BIN);
    cmd.arg("serve")
        .arg("--config")
        .arg(&config)
        .args(PROXY)
        .arg("--data-dir")
        .arg(dir.join(name))
        .args(extra);
    cmd
}

/// `sipsec serve` as a proxy on `--redis url`, its data in `data`, no
/// HTTP.
fn redis_proxy_command(data: &Path, url: &str) -> Command {
    let mut cmd = Command::new(common::BIN);
    cmd.args([
        "serve",
        "--mode",
        "proxy",
        "--udp",
        "127.0.0.1:0",
        "--no-http",
    ])
    .arg("--data-dir")
    .arg(data)
    .args(["--redis", url]);
    cmd
}

/// A proxy node whose `[location]` is this Redis with `fields` added.
fn configured_node(dir: &Path, redis: &Redis, fields: &str, extra: &[&str]) -> Running {
    let fields = format!("url = {:?}\n{fields}", redis.url());
    common::serve_command(proxy_command(dir, "a", &fields, extra))
}

/// Answers the INVITE a phone got with 200 OK over its connection.
fn answer(phone: &mut TcpPhone, invite: &str) {
    let mut reply = String::from("SIP/2.0 200 OK\r\n");
    for l in invite.lines() {
        if ["Via:", "From:", "To:", "Call-ID:", "CSeq:", "Record-Route:"]
            .iter()
            .any(|h| l.starts_with(h))
        {
            reply.push_str(l);
            if l.starts_with("To:") {
                reply.push_str(";tag=callee");
            }
            reply.push_str("\r\n");
        }
    }
    let l = phone.local;
    reply.push_str(&format!(
        "Contact: <sip:callee@{l};transport=tcp>\r\nContent-Length: 0\r\n\r\n"
    ));
    phone.send(&reply);
}

#[test]
fn a_call_reaches_a_phone_connected_to_another_node() {
    let dir = tempdir("scale-cross");
    let redis = Redis::start(&dir.join("redis"));
    let a = node(&dir, "a", &redis);
    let b = node(&dir, "b", &redis);
    let mut phone = TcpPhone::connect(a.addr);
    let ok = phone.register("bob", 1);
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    // A caller on node B: B sends the INVITE to A (the binding names A's
    // end of the flow), and A down the phone's connection.
    let c = caller();
    let from = c.local_addr().expect("local");
    let deadline = Instant::now() + Duration::from_secs(10);
    let got = loop {
        c.send_to(invite("bob", from, "x1").as_bytes(), b.addr)
            .expect("send");
        let r = recv(&c).unwrap_or_default();
        if !r.starts_with("SIP/2.0 404") {
            break phone
                .read()
                .expect("the INVITE over the phone's connection");
        }
        assert!(
            Instant::now() < deadline,
            "node B never learnt bob's binding"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(got.starts_with("INVITE sip:bob@"), "{got}");
    let vias = got.lines().filter(|l| l.starts_with("Via:")).count();
    assert_eq!(vias, 3, "caller, node B and node A: {got}");
    assert!(
        got.contains(&format!("Via: SIP/2.0/UDP {}", b.addr)),
        "through node B: {got}"
    );
    // The answer goes back the same way: A, then B, then the caller.
    answer(&mut phone, &got);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = recv(&c).unwrap_or_default();
        if r.starts_with("SIP/2.0 200") {
            assert!(r.contains("To: <sip:bob@localhost>;tag=callee"), "{r}");
            break;
        }
        assert!(Instant::now() < deadline, "no 200 OK back at the caller");
    }
    assert_eq!(metric(&b, "sipsec_location_store_up"), Some(1));
    assert_eq!(
        metric(&b, "sipsec_location_store_nodes"),
        Some(2),
        "B knows A (started first) and itself"
    );
    assert!(metric(&b, "sipsec_location_store_changes_applied_total").unwrap_or(0) >= 1);
}

#[test]
fn phones_of_a_killed_node_re_register_through_another() {
    let dir = tempdir("scale-kill");
    let redis = Redis::start(&dir.join("redis"));
    let mut a = node(&dir, "a", &redis);
    let b = node(&dir, "b", &redis);
    let mut phone = TcpPhone::connect(a.addr);
    let ok = phone.register("carol", 1);
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    // Node A dies without a word; the phone sees its connection end.
    a.child.kill().expect("kill -9");
    let _ = a.child.wait();
    assert_eq!(phone.read(), None, "the connection to A is gone");
    // It registers again through B, the same contact on a new connection.
    let mut phone = TcpPhone::connect(b.addr);
    let ok = phone.register("carol", 2);
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    assert_eq!(ok.matches("Contact:").count(), 1, "one binding: {ok}");
    // A node started after the failure routes calls to the phone too.
    let c_node = node(&dir, "c", &redis);
    let c = caller();
    let from = c.local_addr().expect("local");
    for (via, n) in [(b.addr, "via-b"), (c_node.addr, "via-c")] {
        c.send_to(invite("carol", from, n).as_bytes(), via)
            .expect("send");
        let got = loop {
            let m = phone.read().expect("an INVITE over the connection to B");
            if m.starts_with("INVITE") {
                break m;
            }
        };
        assert!(got.contains(&format!("Call-ID: {n}")), "{got}");
        answer(&mut phone, &got);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !recv(&c).unwrap_or_default().starts_with("SIP/2.0 200") {
            assert!(Instant::now() < deadline, "no 200 OK for the call {n}");
        }
    }
}

#[test]
fn redis_down_gives_503_keeps_cached_contacts_and_recovers() {
    let dir = tempdir("scale-outage");
    let mut redis = Redis::start(&dir.join("redis"));
    let a = node(&dir, "a", &redis);
    // A phone on UDP, registered while Redis is up.
    let callee = caller();
    let cl = callee.local_addr().expect("local");
    let reg = |cseq: u32, user: &str| {
        register(
            user,
            &format!("SIP/2.0/UDP {cl}"),
            &format!("sip:{user}@{cl}"),
            &format!("reg-{user}"),
            cseq,
            300,
        )
    };
    callee
        .send_to(reg(1, "dave").as_bytes(), a.addr)
        .expect("send");
    let ok = recv(&callee).expect("answer");
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    redis.kill();
    // Nothing is acknowledged that was not stored: 503, with Retry-After.
    callee
        .send_to(reg(1, "erin").as_bytes(), a.addr)
        .expect("send");
    let refused = loop {
        let r = recv(&callee).expect("an answer while Redis is down");
        if !r.starts_with("SIP/2.0 100") {
            break r;
        }
    };
    assert!(refused.starts_with("SIP/2.0 503"), "{refused}");
    assert!(refused.contains("Retry-After: 5"), "{refused}");
    // Calls to the cached contact go on.
    let c = caller();
    call_reaches(&c, a.addr, &callee, "dave", "during-outage");
    assert_eq!(metric(&a, "sipsec_location_store_up"), Some(0));
    // Redis comes back (from its append-only file): REGISTER succeeds
    // again within a few of the node's retry intervals.
    let redis = redis.restart();
    register_until_ok(&callee, a.addr, "erin", "reg-erin", 2);
    // Dave's binding, stored before the outage, is still shared: a node
    // started now reaches him.
    let b = node(&dir, "b", &redis);
    call_reaches(&c, b.addr, &callee, "dave", "after-outage");
}

/// `max_stale`: while Redis is away, calls are routed from the node's
/// copy for that long only, then answered 503 with Retry-After (counted),
/// and routed again once the node has read the location back.
#[test]
fn cached_contacts_route_calls_no_longer_than_max_stale() {
    let dir = tempdir("scale-stale");
    let mut redis = Redis::start(&dir.join("redis"));
    let a = configured_node(
        &dir,
        &redis,
        "timeout = 0.3\nretry_after = 7\nmax_stale = 3\n",
        &[],
    );
    let callee = caller();
    register_ok(&callee, a.addr, "dave", "stale-dave", 1, 300);
    let c = caller();
    let from = c.local_addr().expect("local");
    // The first answer to an INVITE that is not 100 Trying, as the
    // caller sees it.
    let answer_to = |call_id: &str| {
        c.send_to(invite("dave", from, call_id).as_bytes(), a.addr)
            .expect("send");
        loop {
            let r = recv(&c).unwrap_or_default();
            if !r.starts_with("SIP/2.0 100") {
                return r;
            }
        }
    };
    redis.kill();
    let broke = Instant::now();
    call_reaches(&c, a.addr, &callee, "dave", "within");
    assert!(broke.elapsed() < Duration::from_secs(3), "checked in time");
    std::thread::sleep(Duration::from_millis(4_200).saturating_sub(broke.elapsed()));
    let refused = answer_to("beyond");
    assert!(refused.starts_with("SIP/2.0 503"), "{refused}");
    assert!(refused.contains("Retry-After: 7"), "{refused}");
    assert!(recv(&callee).is_none(), "the stale contact is not called");
    assert_eq!(metric(&a, "sipsec_location_stale_refusals_total"), Some(1));
    assert!(metric(&a, "sipsec_location_store_stale_seconds").is_some_and(|s| s >= 3));
    // The operator's view says since when, why, and what calls get.
    let out = Command::new(common::BIN)
        .args(["status", "--http", &http_of(&a)])
        .output()
        .expect("sipsec status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("shared location DOWN for ")
            && text.contains("(calls answered 503 after 3 s)")
            && text.contains("last error: redis://127.0.0.1:"),
        "{text}"
    );
    // Redis back: once the node has read the location again, calls go on.
    let _redis = redis.restart();
    let up = "sipsec_location_store_up";
    await_metric(
        &a,
        up,
        1,
        Duration::from_secs(15),
        "the node never followed Redis again",
    );
    assert_eq!(metric(&a, "sipsec_location_store_stale_seconds"), Some(0));
    call_reaches(&c, a.addr, &callee, "dave", "after");
}

/// A Redis that stops answering (paused, as under a long fork or a hung
/// host) holds no worker: once the node has noticed, REGISTER is refused
/// at once and calls to cached contacts go on without waiting for
/// Redis' timeout, and everything resumes when Redis does.
#[test]
fn a_paused_redis_holds_no_worker() {
    let dir = tempdir("scale-paused");
    let redis = Redis::start(&dir.join("redis"));
    let a = configured_node(&dir, &redis, "timeout = 2\n", &["--workers", "1"]);
    let callee = caller();
    register_ok(&callee, a.addr, "dave", "paused-dave", 1, 300);
    let signal = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, &redis.child.id().to_string()])
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill {sig}");
    };
    signal("-STOP");
    let up = "sipsec_location_store_up";
    await_metric(&a, up, 0, Duration::from_secs(20), "the node never noticed");
    // Each answer within the phones' 500 ms read timeout, a quarter of
    // Redis' 2 s timeout: nothing waits for Redis.
    let erin = caller();
    let c = caller();
    for i in 0..4 {
        let msg = udp_register(&erin, "erin", "paused-erin", i + 1, 300);
        erin.send_to(msg.as_bytes(), a.addr).expect("send");
        let r = recv(&erin).expect("REGISTER answered without waiting");
        assert!(r.starts_with("SIP/2.0 503"), "{r}");
        call_reaches(&c, a.addr, &callee, "dave", &format!("paused-{i}"));
    }
    signal("-CONT");
    register_until_ok(&erin, a.addr, "erin", "paused-erin", 10);
}

#[test]
fn bindings_answered_200_survive_a_redis_restart() {
    let dir = tempdir("scale-aof");
    let redis = Redis::start(&dir.join("redis"));
    let a = node(&dir, "a", &redis);
    let phone = caller();
    for i in 0..20 {
        register_ok(
            &phone,
            a.addr,
            &format!("u{i}"),
            &format!("aof-{i}"),
            1,
            600,
        );
    }
    drop(a);
    // Killed with -9 right after the last 200 OK, then started again.
    let redis = redis.restart();
    let b = node(&dir, "b", &redis);
    assert!(b.banner.contains("20 binding(s) restored"), "{}", b.banner);
    assert_eq!(metric(&b, "sipsec_bindings"), Some(20));
}

/// A worker hands one batch to Redis and reads and handles the next while
/// Redis stores it. Bursts in which each phone registers a contact, adds a
/// second and removes it again (three CSeqs in a row, often split between
/// batches) are answered 200 in CSeq order for every phone, and Redis and
/// the node end with the first contact only: no answer is given for the
/// wrong batch and no change overtakes an earlier one of its AoR.
#[test]
fn a_burst_is_stored_in_order_while_the_next_batch_is_read() {
    const PHONES: usize = 100;
    let dir = tempdir("scale-burst");
    let redis = Redis::start(&dir.join("redis"));
    let a = node(&dir, "a", &redis);
    let phone = caller();
    let pl = phone.local_addr().expect("local");
    let via = format!("SIP/2.0/UDP {pl}");
    // Bursts of 25 phones: their 75 answers fit the phone's receive
    // buffer until they are read.
    let mut seen = vec![0u32; PHONES];
    for burst in (0..PHONES).collect::<Vec<_>>().chunks(25) {
        for i in burst {
            let user = format!("b{i}");
            for (cseq, contact, expires) in [(1, "one", 600), (2, "two", 600), (3, "two", 0)] {
                let msg = register(
                    &user,
                    &via,
                    &format!("sip:{user}@{pl};n={contact}"),
                    &format!("burst-{user}"),
                    cseq,
                    expires,
                );
                phone.send_to(msg.as_bytes(), a.addr).expect("send");
            }
        }
        for _ in 0..3 * burst.len() {
            let ok = recv(&phone).expect("every REGISTER answered");
            assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
            let call_id = ok
                .lines()
                .find_map(|l| l.strip_prefix("Call-ID: burst-b"))
                .expect("Call-ID");
            let cseq: u32 = ok
                .lines()
                .find_map(|l| l.strip_prefix("CSeq: ")?.strip_suffix(" REGISTER"))
                .and_then(|c| c.parse().ok())
                .expect("CSeq");
            let i: usize = call_id.parse().expect("phone number");
            assert_eq!(cseq, seen[i] + 1, "b{i}: answers in CSeq order");
            seen[i] = cseq;
        }
    }
    for i in [0, PHONES / 2, PHONES - 1] {
        let key = cli(
            &redis,
            &["--scan", "--pattern", &format!("*aor:sip:b{i}@*")],
        );
        assert_eq!(
            cli(&redis, &["hkeys", &key]),
            format!("sip:b{i}@{pl};n=one"),
            "b{i}"
        );
    }
    assert_eq!(metric(&a, "sipsec_bindings"), Some(PHONES as u64));
}

/// `redis-cli ARGS` against `redis`, its output trimmed.
fn cli(redis: &Redis, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &redis.port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli (installed with redis-server)");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Calls of `command` Redis counted (those made by scripts included).
fn calls(redis: &Redis, command: &str) -> u64 {
    cli(redis, &["info", "commandstats"])
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|r| r.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// What each REGISTER costs Redis is what a lone node needs: no change is
/// published while no other node listens, a key's lifetime is renewed only
/// when less than the longest registration is left, and scripts flushed
/// from Redis are loaded again without refusing a REGISTER. A second node
/// then hears every change.
#[test]
fn a_lone_node_publishes_nothing_and_renews_keys_only_when_due() {
    let dir = tempdir("scale-lone");
    let redis = Redis::start(&dir.join("redis"));
    let a = node(&dir, "a", &redis);
    let phone = caller();
    let mut cseq = 0;
    let mut reg_for = |user: &str, to: SocketAddr, expires: u32| {
        cseq += 1;
        register_ok(&phone, to, user, &format!("lone-{user}"), cseq, expires);
    };
    let mut reg = |user: &str, to: SocketAddr| reg_for(user, to, 600);
    reg("u0", a.addr);
    let key = cli(&redis, &["--scan", "--pattern", "*aor:*u0*"]);
    assert!(!key.is_empty() && !key.contains('\n'), "one key: {key:?}");
    let ttl = |r: &Redis| cli(r, &["ttl", &key]).parse::<i64>().expect("ttl");
    // Twice the longest registration (max_expires 7200).
    assert!((14_000..=14_400).contains(&ttl(&redis)), "{}", ttl(&redis));
    assert_eq!(calls(&redis, "publish"), 0, "nobody else listens");
    // More than max_expires left: a refresh leaves the lifetime alone.
    cli(&redis, &["expire", &key, "10000"]);
    reg("u0", a.addr);
    assert!(ttl(&redis) <= 10_000, "{}", ttl(&redis));
    // Less left: the refresh renews it.
    cli(&redis, &["expire", &key, "5000"]);
    reg("u0", a.addr);
    assert!(ttl(&redis) > 14_000, "{}", ttl(&redis));
    // The store script flushed (as a failover to a fresh replica would).
    assert_eq!(cli(&redis, &["script", "flush"]), "OK");
    reg("u0", a.addr);
    assert_eq!(calls(&redis, "publish"), 0);
    // A second node listens: changes at A are published and reach it.
    let b = node(&dir, "b", &redis);
    assert_eq!(
        metric(&b, "sipsec_bindings"),
        Some(1),
        "read in full at start"
    );
    reg("u1", a.addr);
    assert!(calls(&redis, "publish") >= 1);
    await_bindings(&b, 2, "node b never heard of u1");
    assert_eq!(
        metric(&b, "sipsec_location_store_changes_applied_total"),
        Some(1)
    );
    // A removal is published too, and B drops the binding.
    reg_for("u1", a.addr, 0);
    await_bindings(&b, 1, "node b never heard u1 leave");
    assert_eq!(
        metric(&b, "sipsec_location_store_changes_applied_total"),
        Some(2)
    );
    assert_eq!(
        metric(&a, "sipsec_location_store_changes_applied_total"),
        Some(0)
    );
}

/// Redis as operators run it beyond one host: TLS with client
/// certificates (`tls-auth-clients yes`) and an ACL user that may touch
/// only sipsec's keys and channels and no dangerous command. A node given
/// the CA, its certificate and the user's password serves; a node missing
/// any of them does not start, says why, and never shows the password.
#[test]
fn a_node_reaches_redis_over_tls_as_a_user_limited_to_its_keys() {
    let dir = tempdir("scale-tls");
    common::tls_files(&dir);
    let f = |n: &str| dir.join(n).to_str().expect("utf-8").to_owned();
    common::issue(&dir, "node", "sipsec node");
    let tls_port = free_port().to_string();
    let redis = Redis::launch(
        &dir.join("redis"),
        free_port(),
        &[
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            &f("srv.pem"),
            "--tls-key-file",
            &f("srv.key"),
            "--tls-ca-cert-file",
            &f("ca.pem"),
            "--tls-auth-clients",
            "yes",
            "--user",
            "sipsec",
            "on",
            ">n0de-s3cret",
            "~sipsec:*",
            "&sipsec:*",
            "+@all",
            "-@dangerous",
        ],
    );
    let url = |password: &str| format!("rediss://sipsec:{password}@127.0.0.1:{tls_port}/0");
    // A node with `[location]` `fields` (TOML lines): its output when it
    // does not start, else the node.
    let start = |name: &str, fields: &str| -> Result<Running, String> {
        let fields = format!("timeout = 0.3\n{fields}");
        common::try_serve_command(proxy_command(&dir, name, &fields, &[]))
    };
    let ca = format!("ca = {:?}\n", f("ca.pem"));
    let cert = format!("cert = {:?}\nkey = {:?}\n", f("node.pem"), f("node.key"));
    let good = format!("url = {:?}\n{ca}{cert}", url("n0de-s3cret"));
    let node = start("a", &good).expect("a node with the CA, its certificate and the password");
    let phone = caller();
    let pl = phone.local_addr().expect("local");
    register_ok(&phone, node.addr, "tls0", "tls-0", 1, 600);
    let key = cli(&redis, &["--scan", "--pattern", "sipsec:aor:*tls0*"]);
    assert!(!key.is_empty() && !key.contains('\n'), "one key: {key:?}");
    assert!(cli(&redis, &["hgetall", &key]).contains(&pl.to_string()));
    let clients = cli(&redis, &["client", "list"]);
    assert!(
        clients
            .lines()
            .filter(|l| l.contains("user=sipsec"))
            .count()
            >= 2,
        "the node's writer and feed log in as sipsec: {clients}"
    );
    drop(node);
    for (name, fields, needle) in [
        (
            "wrongpass",
            format!("url = {:?}\n{ca}{cert}", url("guess")),
            "authentication failed",
        ),
        (
            "nocert",
            format!("url = {:?}\n{ca}", url("n0de-s3cret")),
            "CertificateRequired",
        ),
        (
            "noca",
            format!("url = {:?}\n{cert}", url("n0de-s3cret")),
            "UnknownIssuer",
        ),
        (
            "missingca",
            format!(
                "url = {:?}\nca = {:?}\n{cert}",
                url("n0de-s3cret"),
                f("absent.pem")
            ),
            "absent.pem",
        ),
    ] {
        let err = match start(name, &fields) {
            Ok(_) => panic!("{name}: started"),
            Err(e) => e,
        };
        assert!(
            err.contains("location store (redis)") && err.contains(needle),
            "{name}: {err}"
        );
        assert!(
            !err.contains("s3cret"),
            "{name}: the password stays out: {err}"
        );
    }
}

/// A Redis on the node's own host, reached over its Unix socket only by
/// who may open the file (`unixsocketperm 700`): the database, user and
/// password come from the URL's query; a wrong password keeps the node
/// from starting, and no message shows the password.
#[test]
fn a_node_reaches_a_local_redis_over_its_unix_socket() {
    let dir = tempdir("scale-unix");
    let sock = dir.join("r.sock");
    let sock = sock.to_str().expect("utf-8");
    let redis = Redis::launch(
        &dir.join("redis"),
        free_port(),
        &[
            "--unixsocket",
            sock,
            "--unixsocketperm",
            "700",
            "--user",
            "sipsec",
            "on",
            ">l0cal-s3cret",
            "~sipsec:*",
            "&sipsec:*",
            "+@all",
            "-@dangerous",
        ],
    );
    let url = |pass: &str| format!("redis+unix://{sock}?db=3&user=sipsec&pass={pass}");
    let data = dir.join("a");
    let cmd = redis_proxy_command(&data, &url("l0cal-s3cret"));
    let node = common::try_serve_command(cmd).expect("a node on the socket");
    assert!(
        node.banner.contains("redis+unix://") && !node.banner.contains("l0cal-s3cret"),
        "{}",
        node.banner
    );
    let phone = caller();
    register_ok(&phone, node.addr, "unix0", "unix-0", 1, 600);
    let key = cli(
        &redis,
        &["-n", "3", "--scan", "--pattern", "sipsec:aor:*unix0*"],
    );
    assert!(
        !key.is_empty() && !key.contains('\n'),
        "one key in db 3: {key:?}"
    );
    assert_eq!(cli(&redis, &["-n", "0", "dbsize"]), "0", "nothing in db 0");
    let clients = cli(&redis, &["client", "list"]);
    let on_socket = clients
        .lines()
        .filter(|l| l.contains("user=sipsec") && l.contains(sock))
        .count();
    assert!(on_socket >= 2, "writer and feed on the socket: {clients}");
    drop(node);
    let err = match common::try_serve_command(redis_proxy_command(&data, &url("guess"))) {
        Ok(_) => panic!("started with a wrong password"),
        Err(e) => e,
    };
    assert!(
        err.contains("location store (redis)") && err.contains("pass=***"),
        "{err}"
    );
    assert!(!err.contains("guess"), "the password stays out: {err}");
}

/// The Redis password from the environment (`SIPSEC_REDIS_PASSWORD`),
/// so that it is in no command line `ps` shows: the node logs in with it;
/// without it the same URL is refused at start; set with no Redis
/// location it is an error.
#[test]
fn the_redis_password_comes_from_the_environment() {
    let dir = tempdir("scale-envpass");
    let redis = Redis::launch(
        &dir.join("redis"),
        free_port(),
        &[
            "--user",
            "sipsec",
            "on",
            ">env-s3cret",
            "~sipsec:*",
            "&sipsec:*",
            "+@all",
            "-@dangerous",
            // Who logs in with no password gets none of sipsec's keys
            // and channels (the test's own commands need none).
            "--user",
            "default",
            "on",
            "nopass",
            "resetkeys",
            "~other:*",
            "resetchannels",
            "&other:*",
            "+@all",
        ],
    );
    let url = format!("redis://sipsec@127.0.0.1:{}/0", redis.port);
    let node = |password: Option<&str>| {
        let mut cmd = redis_proxy_command(&dir.join("a"), &url);
        if let Some(p) = password {
            cmd.env("SIPSEC_REDIS_PASSWORD", p);
        }
        common::try_serve_command(cmd)
    };
    let a = node(Some("env-s3cret")).expect("logs in with the password from the environment");
    let phone = caller();
    register_ok(&phone, a.addr, "envp", "envp-1", 1, 600);
    let key = cli(&redis, &["--scan", "--pattern", "sipsec:aor:*envp*"]);
    assert!(!key.is_empty(), "stored through the ACL user: {key:?}");
    drop(a);
    for (password, needle) in [
        (None, "location store (redis)"),
        (Some("guess"), "location store (redis)"),
    ] {
        let err = match node(password) {
            Ok(_) => panic!("started with password {password:?}"),
            Err(e) => e,
        };
        assert!(err.contains(needle), "{err}");
        // A refusal ends the start at once: waiting cures nothing.
        assert!(err.contains("refused, so not tried again"), "{err}");
        assert!(
            !err.contains("guess") && !err.contains("env-s3cret"),
            "{err}"
        );
    }
    let out = Command::new(common::BIN)
        .args(["serve", "--check", "--data-dir"])
        .arg(dir.join("b"))
        .env("SIPSEC_REDIS_PASSWORD", "env-s3cret")
        .output()
        .expect("sipsec runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no Redis location is configured"),
        "{err}"
    );
}

#[test]
fn a_node_that_cannot_reach_redis_does_not_start() {
    let dir = tempdir("scale-norredis");
    let port = free_port();
    let out = Command::new(common::BIN)
        .args(["serve", "--udp", "127.0.0.1:0", "--no-http", "--data-dir"])
        .arg(dir.join("d"))
        .args([
            "--redis",
            &format!("redis://user:hunter2@127.0.0.1:{port}/0"),
        ])
        .output()
        .expect("sipsec runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("location store (redis)") && err.contains(&port.to_string()),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "the password stays out: {err}");
    assert!(
        err.contains("warning: the password in --redis can be read by every user"),
        "{err}"
    );
    let out = Command::new(common::BIN)
        .args(["serve", "--redis", "127.0.0.1:6379"])
        .output()
        .expect("sipsec runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("redis://"), "{err}");
}

/// Runs `sipsec bench run ARGS --json FILE` and returns the report.
fn bench_json(dir: &Path, name: &str, args: &[&str]) -> serde_json::Value {
    let json = dir.join(format!("{name}.json"));
    let out = Command::new(common::BIN)
        .args(["bench", "run"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("sipsec bench runs");
    assert!(out.status.success(), "{}", common::text(&out));
    serde_json::from_str(&std::fs::read_to_string(&json).expect("report")).expect("JSON")
}

#[test]
fn bench_spreads_load_over_nodes_and_calls_cross_them() {
    let dir = tempdir("scale-bench");
    let redis = Redis::start(&dir.join("redis"));
    let a = node(&dir, "a", &redis);
    let b = node(&dir, "b", &redis);
    let both = format!("{},{}", a.addr, b.addr);
    // REGISTER from two generator threads, one per node.
    let r = bench_json(
        &dir,
        "register",
        &[
            "--target",
            &both,
            "--scenario",
            "register",
            "--rate",
            "200",
            "--calls",
            "400",
            "--drain",
            "2",
        ],
    );
    assert_eq!(
        (r["ok"].as_u64(), r["failed"].as_u64()),
        (Some(400), Some(0)),
        "{r}"
    );
    for n in [&a, &b] {
        let registered = metric(n, "sipsec_registrations_total").unwrap_or(0);
        assert!(registered >= 100, "each node took its share: {registered}");
        assert!(
            metric(n, "sipsec_bindings").unwrap_or(0) >= 400,
            "and sees them all"
        );
    }
    // INVITE: the callee registers at the last node, callers use the other.
    let r = bench_json(
        &dir,
        "invite",
        &[
            "--target",
            &both,
            "--scenario",
            "invite",
            "--rate",
            "100",
            "--calls",
            "200",
            "--drain",
            "3",
        ],
    );
    assert_eq!(
        (r["ok"].as_u64(), r["failed"].as_u64()),
        (Some(200), Some(0)),
        "{r}"
    );
    assert_eq!(
        r["callee_at"].as_str(),
        Some(b.addr.to_string().as_str()),
        "{r}"
    );
    assert_eq!(
        r["target"].as_str(),
        Some(a.addr.to_string().as_str()),
        "{r}"
    );
}
