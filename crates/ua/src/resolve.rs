//! Finding the server for a SIP URI (RFC 3263, the parts a phone needs):
//! a numeric host is used as is; an explicit port skips SRV; otherwise
//! `_sip._udp` (or `_sips._tcp`) SRV records are asked of the first
//! nameserver in /etc/resolv.conf, and their targets — or the host itself
//! when there are none — are resolved to addresses through the system
//! resolver (so /etc/hosts works).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::Duration;

pub use sip_core::dns::Srv;
use sip_core::dns::{self, Kind};

/// Why no address was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// Neither SRV nor A/AAAA gave an address.
    #[error("cannot resolve {0}")]
    NotFound(String),
}

/// The first nameserver in resolv.conf text.
pub fn nameserver(resolv_conf: &str) -> Option<SocketAddr> {
    dns::nameservers(resolv_conf).next()
}

/// Asks `server` for the SRV records of `name` (2 tries, 1 s each), in
/// RFC 2782 order. The query leaves from a fresh port with a random ID,
/// connected to the server, and only an answer to it is read
/// (`sip_core::dns`). It offers EDNS(0) (RFC 6891), so up to 1,232 bytes
/// of records come back; a server that refuses that (FORMERR, NOTIMP) is
/// asked again without. An answer cut short (TC) is used as far as it
/// goes.
pub fn lookup_srv(server: SocketAddr, name: &str) -> Vec<Srv> {
    let bind = if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let Ok(sock) = UdpSocket::bind(bind) else {
        return Vec::new();
    };
    if sock.connect(server).is_err() {
        return Vec::new();
    }
    let _ = sock.set_read_timeout(Some(Duration::from_secs(1)));
    let id = random_u16();
    let mut plain = Vec::new();
    if dns::query(id, name, Kind::Srv, &mut plain).is_err() {
        return Vec::new();
    }
    let mut q = plain.clone();
    dns::add_edns(&mut q, dns::EDNS_PAYLOAD);
    let mut buf = [0u8; 2048];
    let mut tries = 0;
    while tries < 2 {
        tries += 1;
        if sock.send(&q).is_err() {
            return Vec::new();
        }
        while let Ok(n) = sock.recv(&mut buf) {
            match dns::parse(&buf[..n], id, name, Kind::Srv) {
                Ok(a) => return dns::order(a.srv_records(), random_u16),
                Err(dns::DnsError::NotOurs(_)) => continue,
                // A server from before EDNS(0): the same question without.
                Err(e) if e.refuses_edns() && q != plain => {
                    q = plain.clone();
                    tries -= 1;
                    break;
                }
                Err(_) => return Vec::new(),
            }
        }
    }
    Vec::new()
}

fn random_u16() -> u16 {
    let mut b = [0u8; 2];
    let _ = getrandom::fill(&mut b);
    u16::from_le_bytes(b)
}

/// Addresses to try for a SIP URI's host and port, in order (RFC 3263
/// §4.2): `secure` picks `_sips._tcp`, else `_sip._udp`. `dns` is the
/// nameserver for SRV (None: none asked).
pub fn resolve(
    host: &str,
    port: Option<u16>,
    secure: bool,
    dns: Option<SocketAddr>,
) -> Result<Vec<SocketAddr>, ResolveError> {
    let default_port = if secure { 5061 } else { 5060 };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port.unwrap_or(default_port))]);
    }
    let mut out = Vec::new();
    if port.is_none() {
        if let Some(server) = dns {
            let service = if secure { "_sips._tcp" } else { "_sip._udp" };
            for srv in lookup_srv(server, &format!("{service}.{host}")) {
                if let Ok(addrs) = (srv.target.as_str(), srv.port).to_socket_addrs() {
                    out.extend(addrs);
                }
            }
        }
    }
    if out.is_empty() {
        if let Ok(addrs) = (host, port.unwrap_or(default_port)).to_socket_addrs() {
            out.extend(addrs);
        }
    }
    if out.is_empty() {
        return Err(ResolveError::NotFound(host.to_string()));
    }
    Ok(out)
}

/// The system's nameserver, from /etc/resolv.conf.
pub fn system_nameserver() -> Option<SocketAddr> {
    nameserver(&std::fs::read_to_string("/etc/resolv.conf").ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the question of query `q` ends (its name, type and class).
    fn question_end(q: &[u8]) -> usize {
        let mut at = 12;
        while q[at] != 0 {
            at += 1 + usize::from(q[at]);
        }
        at + 5
    }

    /// Whether query `q` carries an EDNS(0) OPT record.
    fn has_opt(q: &[u8]) -> bool {
        q[10..12] != [0, 0] && q[question_end(q)..].starts_with(&[0, 0, 41])
    }

    /// A response to `q` with SRV answers (names compressed against the
    /// question), without `q`'s OPT record.
    fn answer(q: &[u8], records: &[(u16, u16, u16, &str)]) -> Vec<u8> {
        let mut r = q[..question_end(q)].to_vec();
        r[11] = 0;
        r[2] = 0x81;
        r[3] = 0x80;
        r[7] = records.len() as u8;
        for (p, w, port, target) in records {
            r.extend_from_slice(&[0xc0, 12, 0, 33, 0, 1, 0, 0, 0, 60]);
            let mut t = Vec::new();
            dns::query(0, target, Kind::A, &mut t).unwrap();
            let tname = &t[12..t.len() - 4];
            r.extend_from_slice(&((6 + tname.len()) as u16).to_be_bytes());
            r.extend_from_slice(&p.to_be_bytes());
            r.extend_from_slice(&w.to_be_bytes());
            r.extend_from_slice(&port.to_be_bytes());
            r.extend_from_slice(tname);
        }
        r
    }

    #[test]
    fn srv_from_a_nameserver_in_order_then_hosts_file_targets() {
        let dns = UdpSocket::bind("127.0.0.1:0").unwrap();
        let server = dns.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            // A stray datagram first (someone else's ID): not taken.
            let (n, from) = dns.recv_from(&mut buf).unwrap();
            assert!(has_opt(&buf[..n]), "the query offers EDNS(0)");
            let mut stray = answer(&buf[..n], &[(0, 0, 1, "evil.example")]);
            stray[0] ^= 0xff;
            dns.send_to(&stray, from).unwrap();
            let r = answer(
                &buf[..n],
                &[(20, 0, 5070, "localhost"), (10, 0, 5999, "localhost")],
            );
            dns.send_to(&r, from).unwrap();
        });
        let got = resolve("sip.test", None, false, Some(server)).unwrap();
        t.join().unwrap();
        // Priority order: 5999 (10) before 5070 (20); nothing from the stray.
        assert_eq!(got[0].port(), 5999, "{got:?}");
        assert!(
            got.iter().all(|a| a.ip().is_loopback() && a.port() != 1),
            "{got:?}"
        );
        assert!(got.iter().any(|a| a.port() == 5070), "{got:?}");
        // Numeric hosts and explicit ports never ask.
        assert_eq!(
            resolve("127.0.0.1", None, false, Some(server)).unwrap(),
            vec!["127.0.0.1:5060".parse().unwrap()]
        );
        assert_eq!(
            resolve("[::1]", Some(7), true, None).unwrap(),
            vec!["[::1]:7".parse().unwrap()]
        );
        assert!(resolve("localhost", Some(5062), false, None)
            .unwrap()
            .iter()
            .all(|a| a.port() == 5062));
        assert!(matches!(
            resolve("no-such-host.invalid", None, false, None),
            Err(ResolveError::NotFound(_))
        ));
        assert_eq!(
            nameserver("# x\nnameserver 10.0.0.2\nnameserver 10.0.0.3\n"),
            Some("10.0.0.2:53".parse().unwrap())
        );
    }

    #[test]
    fn a_nameserver_without_edns_is_asked_again_without_it() {
        let dns = UdpSocket::bind("127.0.0.1:0").unwrap();
        let server = dns.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            let mut seen = Vec::new();
            loop {
                let (n, from) = dns.recv_from(&mut buf).unwrap();
                let q = &buf[..n];
                seen.push(has_opt(q));
                if has_opt(q) {
                    // FORMERR, the question echoed, nothing else.
                    let mut r = answer(q, &[]);
                    r[3] = 0x81;
                    dns.send_to(&r, from).unwrap();
                } else {
                    let r = answer(q, &[(10, 0, 5999, "localhost")]);
                    dns.send_to(&r, from).unwrap();
                    return seen;
                }
            }
        });
        let got = resolve("old.test", None, false, Some(server)).unwrap();
        assert_eq!(t.join().unwrap(), [true, false]);
        assert!(got.iter().all(|a| a.port() == 5999), "{got:?}");
        assert!(!got.is_empty());
    }
}
