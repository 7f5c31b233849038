//! UDP past the kernel's stack (`udp_xdp`): a registrar in a network
//! namespace of the test's own, on one end of a veth pair, takes the
//! REGISTERs sent through the pair on its AF_XDP socket and answers them
//! that way; what reaches it otherwise (from inside the namespace) is
//! served by its UDP socket; an interface it cannot use leaves it on its
//! sockets; frames the kernel's stack would discard (a checksum that
//! fails, a source that cannot send) are discarded; what the kernel
//! drops for want of room on an AF_XDP socket is counted once. Run as root, as CI runs (`./setup.sh` installs iproute2).

#[path = "support/peers.rs"]
mod peers;
#[path = "support/scratch.rs"]
mod scratch;
#[path = "support/served.rs"]
mod served;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use peers::ip;
use served::Served;
use sipsec_server::{Config, Mode};

/// A veth pair, one end in a namespace; deleted with it.
struct Veth {
    ns: String,
    outer: String,
    inner: String,
    outer_ip: Ipv4Addr,
    inner_ip: Ipv4Addr,
}

impl Veth {
    fn new(tag: u32) -> Self {
        Self::with_queues(tag, 1)
    }

    /// A pair whose ends have `queues` receive and transmit queues each.
    fn with_queues(tag: u32, queues: u32) -> Self {
        let id = std::process::id() % 100_000;
        let (ns, outer, inner) = (
            format!("sipsec-t{tag}-{id}"),
            format!("sto{tag}{id}"),
            format!("sti{tag}{id}"),
        );
        let net = (id % 200) as u8;
        let veth = Self {
            ns: ns.clone(),
            outer: outer.clone(),
            inner: inner.clone(),
            outer_ip: Ipv4Addr::new(10, 202 + tag as u8, net, 201),
            // A last octet past 127: the top bit of the address's little-endian
            // word, which the XDP program must compare in 32 bits.
            inner_ip: Ipv4Addr::new(10, 202 + tag as u8, net, 202),
        };
        ip(&["netns", "add", &ns]);
        let q = queues.to_string();
        let per_end = ["numrxqueues", q.as_str(), "numtxqueues", q.as_str()];
        let mut add = vec!["link", "add", outer.as_str()];
        add.extend(per_end);
        add.extend([
            "type",
            "veth",
            "peer",
            "name",
            inner.as_str(),
            "netns",
            ns.as_str(),
        ]);
        add.extend(per_end);
        ip(&add);
        ip(&[
            "addr",
            "add",
            &format!("{}/30", veth.outer_ip),
            "dev",
            &outer,
        ]);
        ip(&["link", "set", &outer, "up"]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{}/30", veth.inner_ip),
            "dev",
            &inner,
        ]);
        ip(&["-n", &ns, "link", "set", &inner, "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        veth
    }

    fn namespace(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.ns)
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// A registrar started from a thread inside the namespace (its threads
/// live there), on port 5060 of the inner end's address (of every
/// address with `any`).
fn registrar_in(veth: &Veth, udp_xdp: Option<String>, any: bool) -> Served {
    registrar_with(veth, udp_xdp, any, 1)
}

fn registrar_with(veth: &Veth, udp_xdp: Option<String>, any: bool, workers: usize) -> Served {
    let ns = veth.namespace();
    let advertise = SocketAddr::from((veth.inner_ip, 5060));
    let addr = if any {
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, 5060))
    } else {
        advertise
    };
    let name = format!("xdp-{}", veth.ns);
    std::thread::spawn(move || {
        sip_udp::enter_network_namespace(&ns).expect("setns");
        let config = Config {
            mode: Mode::Registrar,
            udp: addr,
            tcp: None,
            http: None,
            advertise,
            workers,
            udp_xdp,
            // A namespace of the test's own: nobody else reaches it.
            insecure_no_auth: true,
            ..Config::default()
        };
        Served::start(&name, config).expect("server starts")
    })
    .join()
    .expect("the starting thread")
}

fn register(n: u32, local: SocketAddr, to: SocketAddr) -> String {
    format!(
        "REGISTER sip:{to} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK-x{n}\r\nMax-Forwards: 70\r\nFrom: <sip:u{n}@{to}>;tag=f{n}\r\nTo: <sip:u{n}@{to}>\r\nCall-ID: xdp-{n}\r\nCSeq: 1 REGISTER\r\nContact: <sip:u{n}@{local}>\r\nExpires: 60\r\nContent-Length: 0\r\n\r\n"
    )
}

/// Sends REGISTERs `ids` from `sock` in one burst and checks each drew
/// exactly one 200 (a retransmission of the first included: answered
/// again, as RFC 3261 §17.2.1 wants of a retransmitted request).
fn each_answered(sock: &UdpSocket, to: SocketAddr, ids: std::ops::Range<u32>) {
    let local = sock.local_addr().expect("local");
    let local = SocketAddr::from((
        match local.ip() {
            std::net::IpAddr::V4(ip) if !ip.is_unspecified() => ip,
            _ => Ipv4Addr::new(10, 0, 0, 1),
        },
        local.port(),
    ));
    for n in ids.clone() {
        sock.send_to(register(n, local, to).as_bytes(), to)
            .expect("send");
    }
    sock.send_to(register(ids.start, local, to).as_bytes(), to)
        .expect("send");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    for _ in 0..ids.len() + 1 {
        let len = sock.recv(&mut buf).expect("an answer");
        let text = String::from_utf8_lossy(&buf[..len]).into_owned();
        assert!(text.starts_with("SIP/2.0 200 "), "{text}");
        let call_id = text
            .lines()
            .find_map(|l| l.strip_prefix("Call-ID: "))
            .expect("Call-ID")
            .to_owned();
        seen.push(call_id);
    }
    seen.sort();
    let mut want: Vec<String> = ids.clone().map(|n| format!("xdp-{n}")).collect();
    want.push(format!("xdp-{}", ids.start));
    want.sort();
    assert_eq!(seen, want);
}

fn client() -> UdpSocket {
    let s = UdpSocket::bind("0.0.0.0:0").expect("udp");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s
}

#[test]
fn registers_through_the_veth_come_and_go_past_the_kernel() {
    let veth = Veth::new(0);
    let server = registrar_in(&veth, Some(veth.inner.clone()), false);
    let to = server.handle.local_addr();
    let from_outside = client();
    each_answered(&from_outside, to, 0..100);
    let metrics = &server.handle.shared().metrics;
    let (received, sent) = (
        metrics.xdp_received.load(Ordering::Relaxed),
        metrics.xdp_sent.load(Ordering::Relaxed),
    );
    // The first datagram may have come before the neighbour was known
    // (ARP, answered by the kernel), but every REGISTER came this way.
    assert!(received >= 101, "{received} received on AF_XDP");
    assert!(sent >= 101, "{sent} sent on AF_XDP");

    // From inside the namespace the datagrams cross loopback, not the
    // veth: the socket serves them.
    let ns = veth.namespace();
    std::thread::spawn(move || {
        sip_udp::enter_network_namespace(&ns).expect("setns");
        each_answered(&client(), to, 1000..1020);
    })
    .join()
    .expect("the inside client");
    assert_eq!(metrics.xdp_received.load(Ordering::Relaxed), received);
    server.handle.shutdown();
}

#[test]
fn an_interface_it_cannot_use_leaves_the_sockets_serving() {
    let veth = Veth::new(1);
    let server = registrar_in(&veth, Some("nosuchif0".into()), false);
    let to = server.handle.local_addr();
    each_answered(&client(), to, 0..20);
    let metrics = &server.handle.shared().metrics;
    assert_eq!(metrics.xdp_received.load(Ordering::Relaxed), 0);
    server.handle.shutdown();
}

#[test]
fn bound_to_every_address_it_steers_the_interfaces_own() {
    let veth = Veth::new(2);
    let server = registrar_in(&veth, Some(veth.inner.clone()), true);
    let to = SocketAddr::from((veth.inner_ip, 5060));
    each_answered(&client(), to, 0..30);
    let metrics = &server.handle.shared().metrics;
    let received = metrics.xdp_received.load(Ordering::Relaxed);
    assert!(received >= 31, "{received} received on AF_XDP");
    server.handle.shutdown();
}

/// More workers than the interface has queues: each worker with a queue
/// opens its AF_XDP socket, the one past them keeps to its socket, and
/// every REGISTER from 32 senders is answered past the kernel. (A veth
/// delivers on one real receive queue unless `ethtool -L` gives it more,
/// so which worker takes them is the kernel's; spreading over queues is
/// the NIC's hash.)
#[test]
fn workers_past_the_queues_keep_to_their_sockets() {
    let veth = Veth::with_queues(3, 2);
    let server = registrar_with(&veth, Some(veth.inner.clone()), false, 3);
    let to = server.handle.local_addr();
    let senders: Vec<UdpSocket> = (0..32).map(|_| client()).collect();
    for (k, s) in senders.iter().enumerate() {
        let first = 100 * k as u32;
        each_answered(s, to, first..first + 5);
    }
    let m = &server.handle.shared().metrics;
    let received = m.xdp_received.load(Ordering::Relaxed);
    assert!(received >= 32 * 6, "{received} received on AF_XDP");
    server.handle.shutdown();
}

/// An interface's MAC address, as `ip -o link` shows it (in namespace
/// `ns` when given).
fn mac(ns: Option<&str>, iface: &str) -> [u8; 6] {
    let mut cmd = Command::new("ip");
    if let Some(ns) = ns {
        cmd.args(["-n", ns]);
    }
    let out = cmd
        .args(["-o", "link", "show", iface])
        .output()
        .expect("ip");
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .unwrap_or_else(|| panic!("no MAC for {iface}: {text}"));
    let mut m = [0u8; 6];
    for (b, h) in m.iter_mut().zip(hex.split(':')) {
        *b = u8::from_str_radix(h, 16).expect("hex");
    }
    m
}

/// A hostile host on the link sends frames the kernel's stack would never
/// hand a socket: a REGISTER whose UDP checksum fails (changed on the
/// way), one from a multicast source (its answer would go to a group),
/// one from the server's own address. Each is discarded and counted, not
/// decided; the REGISTERs around them, sent the same raw way with their
/// checksums right, are answered in order.
#[test]
fn frames_the_kernel_would_discard_are_discarded() {
    use sip_udp::xdp::frame::{fill_udp_checksum, write_headers, Endpoints, HEADERS};
    let veth = Veth::new(4);
    let server = registrar_in(&veth, Some(veth.inner.clone()), false);
    let to = server.handle.local_addr();
    let SocketAddr::V4(to4) = to else {
        unreachable!("an IPv4 server")
    };
    let sock = UdpSocket::bind((veth.outer_ip, 0)).expect("udp");
    sock.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let SocketAddr::V4(local) = sock.local_addr().expect("local") else {
        unreachable!("bound to IPv4")
    };
    let wire = sip_udp::xdp::RawLink::open(&veth.outer).expect("AF_PACKET (root)");
    let ends = Endpoints {
        src_mac: mac(None, &veth.outer),
        dst_mac: mac(Some(&veth.ns), &veth.inner),
        src: local,
        dst: to4,
    };
    let frame = |n: u32, ends: &Endpoints| {
        let body = register(n, SocketAddr::V4(ends.src), to);
        let mut f = vec![0u8; HEADERS + body.len()];
        assert!(write_headers(&mut f, ends, body.len(), n as u16));
        f[HEADERS..].copy_from_slice(body.as_bytes());
        assert!(fill_udp_checksum(&mut f));
        f
    };
    let answered = |n: u32| {
        let mut buf = [0u8; 4096];
        let len = sock.recv(&mut buf).expect("an answer");
        let text = String::from_utf8_lossy(&buf[..len]);
        assert!(text.starts_with("SIP/2.0 200 "), "{text}");
        assert!(text.contains(&format!("Call-ID: xdp-{n}\r\n")), "{text}");
    };
    let metrics = &server.handle.shared().metrics;

    wire.send(&frame(1, &ends)).expect("sent");
    answered(1);
    let mut bent = frame(2, &ends);
    bent[HEADERS + 3] ^= 0x01; // a payload bit flipped after summing
    wire.send(&bent).expect("sent");
    let group = Endpoints {
        src: "224.0.0.251:5060".parse().unwrap(),
        ..ends
    };
    wire.send(&frame(3, &group)).expect("sent");
    let itself = Endpoints {
        src: SocketAddrV4::new(*to4.ip(), 5061),
        ..ends
    };
    wire.send(&frame(4, &itself)).expect("sent");
    wire.send(&frame(5, &ends)).expect("sent");
    // Frames are taken in order: the answer to 5 comes after whatever 2
    // would have drawn, with the discards before it counted.
    answered(5);
    assert_eq!(metrics.xdp_discarded.load(Ordering::Relaxed), 3);
    assert!(metrics.xdp_received.load(Ordering::Relaxed) >= 2);
    server.handle.shutdown();
}

/// An AF_XDP socket nobody reads holds [`RX_FRAMES`] frames (as many as
/// the UDP socket's receive buffer holds of short datagrams) and the
/// kernel's drops past them are counted once each: the fill ring's own
/// count of the same event (`rx_fill_ring_empty_descs`) is not added.
/// The datagrams go in bursts smaller than the veth's own ring (256), each
/// waited for, so that only the socket can drop them.
///
/// [`RX_FRAMES`]: sip_udp::xdp::RX_FRAMES
#[test]
fn a_socket_nobody_reads_holds_its_frames_and_counts_each_drop_once() {
    use sip_udp::xdp::{Steering, XdpSocket, RX_FRAMES};
    let veth = Veth::new(5);
    let (ns, inner, inner_ip) = (veth.namespace(), veth.inner.clone(), veth.inner_ip);
    let (xsk, _steering) = std::thread::spawn(move || {
        sip_udp::enter_network_namespace(&ns).expect("setns");
        let steering = Steering::attach(&inner, 5060, &[inner_ip]).expect("XDP (root)");
        (XdpSocket::open(&steering, 0).expect("AF_XDP"), steering)
    })
    .join()
    .expect("the opening thread");
    let sock = UdpSocket::bind((veth.outer_ip, 0)).expect("udp");
    let to = SocketAddr::from((veth.inner_ip, 5060));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let until = |what: &str, done: &dyn Fn() -> bool| {
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    // The neighbour is resolved before the bursts (the kernel holds only
    // a few datagrams while it asks).
    sock.send_to(b"first", to).expect("send");
    until("the first datagram arrives", &|| xsk.waiting() == 1);
    let mut sent = 1;
    let burst = 128;
    while sent < RX_FRAMES + 100 {
        let n = burst.min(RX_FRAMES + 100 - sent);
        for _ in 0..n {
            sock.send_to(b"datagram", to).expect("send");
        }
        sent += n;
        let want = sent.min(RX_FRAMES);
        until("the burst arrives or is counted", &|| {
            xsk.waiting() == want && xsk.drops().expect("statistics").rx == u64::from(sent - want)
        });
    }
    assert_eq!(xsk.waiting(), RX_FRAMES);
    assert_eq!(xsk.drops().expect("statistics").rx, 100);
}
