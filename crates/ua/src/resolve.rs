//! Finding the server for a SIP URI (RFC 3263, the parts a phone needs):
//! a numeric host is used as is; an explicit port skips SRV; otherwise
//! `_sip._udp` (or `_sips._tcp`) SRV records are asked of the first
//! nameserver in /etc/resolv.conf, and their targets — or the host itself
//! when there are none — are resolved to addresses through the system
//! resolver (so /etc/hosts works).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::Duration;

/// Why no address was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// Neither SRV nor A/AAAA gave an address.
    #[error("cannot resolve {0}")]
    NotFound(String),
}

/// One SRV record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Srv {
    /// Lower is tried first.
    pub priority: u16,
    /// Share among equal priorities.
    pub weight: u16,
    /// Port.
    pub port: u16,
    /// Target host.
    pub target: String,
}

/// A DNS query for `name` of `qtype` (33: SRV) with id `id`.
pub fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut q = Vec::with_capacity(32 + name.len());
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]); // RD, one question
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len().min(63) as u8);
        q.extend_from_slice(&label.as_bytes()[..label.len().min(63)]);
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes());
    q
}

/// Reads a possibly compressed name at `at`; returns it and the offset
/// after it in the original position.
fn name(msg: &[u8], mut at: usize) -> Option<(String, usize)> {
    let mut out = Vec::new();
    let mut end = None;
    for _ in 0..64 {
        let len = *msg.get(at)?;
        if len & 0xc0 == 0xc0 {
            let ptr = (usize::from(len & 0x3f) << 8) | usize::from(*msg.get(at + 1)?);
            end.get_or_insert(at + 2);
            at = ptr;
            continue;
        }
        if len == 0 {
            let s = String::from_utf8_lossy(&out.join(&b'.')).into_owned();
            return Some((s, end.unwrap_or(at + 1)));
        }
        out.push(msg.get(at + 1..at + 1 + usize::from(len))?.to_vec());
        at += 1 + usize::from(len);
    }
    None
}

/// The SRV records in a response to query `id`, sorted by priority
/// (higher weight first within one).
pub fn parse_srv(msg: &[u8], id: u16) -> Option<Vec<Srv>> {
    if msg.len() < 12 || msg[..2] != id.to_be_bytes() || msg[2] & 0x80 == 0 {
        return None;
    }
    let rcode = msg[3] & 0x0f;
    if rcode != 0 {
        return Some(Vec::new());
    }
    let qd = u16::from_be_bytes([msg[4], msg[5]]);
    let an = u16::from_be_bytes([msg[6], msg[7]]);
    let mut at = 12;
    for _ in 0..qd {
        at = name(msg, at)?.1 + 4;
    }
    let mut out = Vec::new();
    for _ in 0..an {
        let after = name(msg, at)?.1;
        let head = msg.get(after..after + 10)?;
        let rtype = u16::from_be_bytes([head[0], head[1]]);
        let len = usize::from(u16::from_be_bytes([head[8], head[9]]));
        let rdata = after + 10;
        if rtype == 33 && len >= 7 {
            let d = msg.get(rdata..rdata + 6)?;
            out.push(Srv {
                priority: u16::from_be_bytes([d[0], d[1]]),
                weight: u16::from_be_bytes([d[2], d[3]]),
                port: u16::from_be_bytes([d[4], d[5]]),
                target: name(msg, rdata + 6)?.0,
            });
        }
        at = rdata + len;
    }
    out.sort_by_key(|s| (s.priority, std::cmp::Reverse(s.weight)));
    Some(out)
}

/// The first nameserver in resolv.conf text.
pub fn nameserver(resolv_conf: &str) -> Option<SocketAddr> {
    resolv_conf.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        (f.next() == Some("nameserver"))
            .then(|| f.next()?.parse::<IpAddr>().ok())
            .flatten()
            .map(|ip| SocketAddr::new(ip, 53))
    })
}

/// Asks `server` for the SRV records of `name` (2 tries, 1 s each).
pub fn lookup_srv(server: SocketAddr, name: &str) -> Vec<Srv> {
    let bind = if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let Ok(sock) = UdpSocket::bind(bind) else {
        return Vec::new();
    };
    let _ = sock.set_read_timeout(Some(Duration::from_secs(1)));
    let mut id_bytes = [0u8; 2];
    let _ = getrandom::fill(&mut id_bytes);
    let id = u16::from_be_bytes(id_bytes);
    let q = query(id, name, 33);
    let mut buf = [0u8; 2048];
    for _ in 0..2 {
        if sock.send_to(&q, server).is_err() {
            return Vec::new();
        }
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            if from == server {
                if let Some(r) = parse_srv(&buf[..n], id) {
                    return r;
                }
            }
        }
    }
    Vec::new()
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

    /// A response to `q` with SRV answers (names compressed against the question).
    fn answer(q: &[u8], records: &[(u16, u16, u16, &str)]) -> Vec<u8> {
        let mut r = q.to_vec();
        r[2] = 0x81;
        r[3] = 0x80;
        r[7] = records.len() as u8;
        for (p, w, port, target) in records {
            r.extend_from_slice(&[0xc0, 12, 0, 33, 0, 1, 0, 0, 0, 60]);
            let t = query(0, target, 0);
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
    fn srv_records_are_parsed_and_ordered() {
        let q = query(0x1234, "_sip._udp.example.com", 33);
        let r = answer(
            &q,
            &[
                (20, 0, 5070, "b.example.com"),
                (10, 5, 5060, "a.example.com"),
            ],
        );
        let srv = parse_srv(&r, 0x1234).unwrap();
        assert_eq!(srv[0].target, "a.example.com");
        assert_eq!((srv[0].priority, srv[0].port), (10, 5060));
        assert_eq!(srv[1].target, "b.example.com");
        assert_eq!(parse_srv(&r, 0x9999), None, "someone else's answer");
        assert_eq!(parse_srv(&r[..20], 0x1234), None);
    }

    #[test]
    fn srv_from_a_nameserver_then_hosts_file_targets() {
        let dns = UdpSocket::bind("127.0.0.1:0").unwrap();
        let server = dns.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            let (n, from) = dns.recv_from(&mut buf).unwrap();
            let r = answer(&buf[..n], &[(10, 0, 5999, "localhost")]);
            dns.send_to(&r, from).unwrap();
        });
        let got = resolve("sip.test", None, false, Some(server)).unwrap();
        t.join().unwrap();
        assert!(
            got.iter().all(|a| a.port() == 5999 && a.ip().is_loopback()),
            "{got:?}"
        );
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
}
