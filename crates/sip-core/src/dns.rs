//! The DNS messages a SIP proxy needs to find a next hop named by a domain
//! (RFC 3263 §4.2 without NAPTR): A, AAAA and SRV queries (RFC 1035,
//! RFC 3596, RFC 2782), written and read without I/O, with EDNS(0)
//! (RFC 6891) so that UDP answers may exceed 512 bytes.
//!
//! Answers come from the network, so reading one trusts nothing: the ID
//! and question must be the ones asked, compression pointers may only
//! point backwards (no loops), every length is checked against the
//! message, and only records for the name asked (or the CNAME chain the
//! answer itself gives for it) are taken.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Query types this resolver asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// IPv4 addresses.
    A,
    /// IPv6 addresses.
    Aaaa,
    /// Service locations.
    Srv,
}

impl Kind {
    fn code(self) -> u16 {
        match self {
            Kind::A => 1,
            Kind::Aaaa => 28,
            Kind::Srv => 33,
        }
    }
}

const CNAME: u16 = 5;
const OPT: u16 = 41;
const CLASS_IN: u16 = 1;

/// The UDP payload size advertised with EDNS(0): 1,232 bytes fit one
/// IPv6 packet on any path with the minimum 1,280-byte MTU, so answers are
/// not fragmented (the DNS Flag Day 2020 value; dnsmasq's and BIND's
/// default).
pub const EDNS_PAYLOAD: u16 = 1232;
/// Longest name in wire form (RFC 1035 §2.3.4).
const MAX_NAME: usize = 255;

/// One record of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// An address (A or AAAA).
    Address(IpAddr),
    /// A service location (RFC 2782).
    Srv(Srv),
}

/// An SRV record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Srv {
    /// Lower is tried first.
    pub priority: u16,
    /// Share of the load among records of one priority.
    pub weight: u16,
    /// The service's port.
    pub port: u16,
    /// Where it runs (lower-case, no trailing dot); "." means "not here".
    pub target: String,
}

/// What an answer says about the name asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Records of the kind asked, for the name (or its CNAME target).
    pub records: Vec<Record>,
    /// Addresses the answer adds for SRV targets (additional section).
    pub extra: Vec<(String, IpAddr)>,
    /// Seconds the records may be kept: the smallest TTL among them.
    pub ttl: u32,
    /// The name does not exist (NXDOMAIN).
    pub no_such_name: bool,
    /// The server vouches that it validated the answer with DNSSEC (AD,
    /// RFC 4035 §3.2.3); worth something only from a validating resolver
    /// on a trusted path, asked with [`ask_authenticated`].
    pub authenticated: bool,
    /// The server cut the answer short (TC): the records present are
    /// all there is to use.
    pub truncated: bool,
}

impl Answer {
    /// The SRV records, in the answer's order.
    pub fn srv_records(self) -> Vec<Srv> {
        self.records
            .into_iter()
            .filter_map(|r| match r {
                Record::Srv(s) => Some(s),
                Record::Address(_) => None,
            })
            .collect()
    }
}

/// Why a query could not be written or an answer not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    /// The name cannot be asked for.
    #[error("{0:?} is not a domain name")]
    BadName(String),
    /// The bytes are not an answer to the question asked.
    #[error("not an answer to this query: {0}")]
    NotOurs(&'static str),
    /// The answer is malformed.
    #[error("malformed DNS answer: {0}")]
    Malformed(&'static str),
    /// The server could not answer (its response code).
    #[error("the DNS server answered with code {0}")]
    Server(u8),
}

impl DnsError {
    /// The answer a server that does not speak EDNS(0) gives a query with
    /// an OPT record: FORMERR or NOTIMP (RFC 6891 §7); the query is worth
    /// asking again without one.
    pub fn refuses_edns(&self) -> bool {
        matches!(self, DnsError::Server(1 | 4))
    }
}

/// The name servers `resolv.conf` text names (`nameserver IP`, a scope
/// such as `%eth0` dropped), in order, at port 53.
pub fn nameservers(resolv_conf: &str) -> impl Iterator<Item = std::net::SocketAddr> + '_ {
    resolv_conf
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("nameserver")).then(|| words.next())?
        })
        .filter_map(|a| a.split('%').next()?.parse::<IpAddr>().ok())
        .map(|ip| std::net::SocketAddr::new(ip, 53))
}

/// Writes a recursive query for `name`'s `kind` records with the ID `id`.
pub fn query(id: u16, name: &str, kind: Kind, out: &mut Vec<u8>) -> Result<(), DnsError> {
    out.clear();
    out.extend_from_slice(&id.to_be_bytes());
    // QR=0, opcode 0, RD=1; one question.
    out.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    write_name(name, out)?;
    out.extend_from_slice(&kind.code().to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    Ok(())
}

/// Sets the AD bit of the query [`query`] wrote: the asker wants to know
/// whether the resolver validated the answer (RFC 6840 §5.7), which the
/// answer's AD bit ([`Answer::authenticated`]) then says.
pub fn ask_authenticated(out: &mut [u8]) {
    if let Some(flags) = out.get_mut(3) {
        *flags |= 0x20;
    }
}

/// Adds an EDNS(0) OPT record (RFC 6891 §6.1.2) to the query [`query`]
/// wrote: the server may then answer with up to `payload` bytes over UDP
/// instead of cutting the answer at 512. Version 0, no flags (DNSSEC
/// records are not asked for).
pub fn add_edns(out: &mut Vec<u8>, payload: u16) {
    let Some(count) = out.get_mut(10..12) else {
        return;
    };
    let additional = u16::from_be_bytes([count[0], count[1]]).saturating_add(1);
    count.copy_from_slice(&additional.to_be_bytes());
    // The root as owner, type OPT, the payload size as class, then the
    // extended RCODE, version and flags (the TTL's place), no options.
    out.push(0);
    out.extend_from_slice(&OPT.to_be_bytes());
    out.extend_from_slice(&payload.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
}

fn write_name(name: &str, out: &mut Vec<u8>) -> Result<(), DnsError> {
    let bad = || DnsError::BadName(name.to_owned());
    let trimmed = name.strip_suffix('.').unwrap_or(name);
    if trimmed.is_empty() || trimmed.len() + 2 > MAX_NAME {
        return Err(bad());
    }
    for label in trimmed.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            return Err(bad());
        }
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    Ok(())
}

/// Reads the name at `at`, following compression pointers (each must
/// point before the one that led to it); returns it lower-cased without
/// the trailing dot, and where the name ends in place.
fn read_name(msg: &[u8], mut at: usize) -> Result<(String, usize), DnsError> {
    let short = DnsError::Malformed("a name runs past the end");
    let mut name = String::new();
    let mut end = None;
    let mut limit = at;
    let mut wire = 1;
    loop {
        let len = *msg.get(at).ok_or(short.clone())?;
        match len & 0xC0 {
            0x00 if len == 0 => break,
            0x00 => {
                let len = usize::from(len);
                let label = msg.get(at + 1..at + 1 + len).ok_or(short.clone())?;
                wire += len + 1;
                if wire > MAX_NAME {
                    return Err(DnsError::Malformed("a name longer than 255 bytes"));
                }
                if !name.is_empty() {
                    name.push('.');
                }
                for &b in label {
                    if !(b.is_ascii_graphic()) || b == b'.' {
                        return Err(DnsError::Malformed("a label with a byte no host name has"));
                    }
                    name.push(char::from(b.to_ascii_lowercase()));
                }
                at += 1 + len;
            }
            0xC0 => {
                let low = *msg.get(at + 1).ok_or(short.clone())?;
                let target = usize::from(len & 0x3F) << 8 | usize::from(low);
                if target >= limit {
                    return Err(DnsError::Malformed(
                        "a compression pointer that does not point back",
                    ));
                }
                end.get_or_insert(at + 2);
                limit = target;
                at = target;
            }
            _ => return Err(DnsError::Malformed("a label type RFC 1035 does not define")),
        }
    }
    Ok((name, end.unwrap_or(at + 1)))
}

fn u16_at(msg: &[u8], at: usize) -> Result<u16, DnsError> {
    msg.get(at..at + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
        .ok_or(DnsError::Malformed("a record runs past the end"))
}

fn u32_at(msg: &[u8], at: usize) -> Result<u32, DnsError> {
    msg.get(at..at + 4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or(DnsError::Malformed("a record runs past the end"))
}

/// One resource record in place.
struct Rr<'a> {
    owner: String,
    kind: u16,
    ttl: u32,
    data: &'a [u8],
    /// Where the record's data starts (names in it may point before).
    data_at: usize,
}

fn read_rr(msg: &[u8], at: usize) -> Result<(Rr<'_>, usize), DnsError> {
    let (owner, at) = read_name(msg, at)?;
    let kind = u16_at(msg, at)?;
    let class = u16_at(msg, at + 2)?;
    // RFC 2181 §8: a TTL with the top bit set is read as zero.
    let ttl = match u32_at(msg, at + 4)? {
        t if t > i32::MAX as u32 => 0,
        t => t,
    };
    let len = usize::from(u16_at(msg, at + 8)?);
    let data_at = at + 10;
    let data = msg
        .get(data_at..data_at + len)
        .ok_or(DnsError::Malformed("record data runs past the end"))?;
    let kind = if class == CLASS_IN { kind } else { 0 };
    Ok((
        Rr {
            owner,
            kind,
            ttl,
            data,
            data_at,
        },
        data_at + len,
    ))
}

fn address(rr: &Rr<'_>) -> Option<IpAddr> {
    match (rr.kind, rr.data.len()) {
        (1, 4) => Some(IpAddr::V4(Ipv4Addr::new(
            rr.data[0], rr.data[1], rr.data[2], rr.data[3],
        ))),
        (28, 16) => {
            let mut b = [0u8; 16];
            b.copy_from_slice(rr.data);
            Some(IpAddr::V6(Ipv6Addr::from(b)))
        }
        _ => None,
    }
}

/// Reads the answer to the query [`query`] wrote with `id`, `name` and
/// `kind`.
pub fn parse(msg: &[u8], id: u16, name: &str, kind: Kind) -> Result<Answer, DnsError> {
    if msg.len() < 12 {
        return Err(DnsError::Malformed("shorter than a header"));
    }
    if u16_at(msg, 0)? != id {
        return Err(DnsError::NotOurs("another ID"));
    }
    let flags = u16_at(msg, 2)?;
    if flags & 0x8000 == 0 || (flags >> 11) & 0xF != 0 {
        return Err(DnsError::NotOurs("not a response to a standard query"));
    }
    let truncated = flags & 0x0200 != 0;
    let authenticated = flags & 0x0020 != 0;
    let rcode = (flags & 0xF) as u8;
    let (qd, an, ns, ar) = (
        u16_at(msg, 4)?,
        u16_at(msg, 6)?,
        u16_at(msg, 8)?,
        u16_at(msg, 10)?,
    );
    if qd != 1 {
        return Err(DnsError::NotOurs("not one question"));
    }
    let (qname, at) = read_name(msg, 12)?;
    let asked = name.strip_suffix('.').unwrap_or(name);
    if !qname.eq_ignore_ascii_case(asked)
        || u16_at(msg, at)? != kind.code()
        || u16_at(msg, at + 2)? != CLASS_IN
    {
        return Err(DnsError::NotOurs("another question"));
    }
    let no_such_name = rcode == 3;
    if rcode != 0 && !no_such_name {
        return Err(DnsError::Server(rcode));
    }
    let mut at = at + 4;
    let mut answers = Vec::with_capacity(usize::from(an));
    for _ in 0..an {
        let (rr, next) = read_rr(msg, at)?;
        answers.push(rr);
        at = next;
    }
    for _ in 0..ns {
        at = read_rr(msg, at)?.1;
    }
    let mut extra = Vec::new();
    for _ in 0..ar {
        let (rr, next) = read_rr(msg, at)?;
        if let Some(ip) = address(&rr) {
            extra.push((rr.owner, ip));
        }
        at = next;
    }
    // The name asked, then each CNAME the answer gives for it (in any
    // order, at most as many steps as records: no loops).
    let mut current = asked.to_ascii_lowercase();
    for _ in 0..answers.len() {
        let alias = answers
            .iter()
            .find(|rr| rr.kind == CNAME && rr.owner == current);
        match alias {
            Some(rr) => current = read_name(msg, rr.data_at)?.0,
            None => break,
        }
    }
    let mut records = Vec::new();
    let mut ttl = u32::MAX;
    for rr in answers.iter().filter(|rr| rr.owner == current) {
        let record = match kind {
            Kind::A | Kind::Aaaa if rr.kind == kind.code() => address(rr).map(Record::Address),
            Kind::Srv if rr.kind == kind.code() => {
                if rr.data.len() < 7 {
                    return Err(DnsError::Malformed("an SRV record too short"));
                }
                let (target, _) = read_name(msg, rr.data_at + 6)?;
                Some(Record::Srv(Srv {
                    priority: u16_at(rr.data, 0)?,
                    weight: u16_at(rr.data, 2)?,
                    port: u16_at(rr.data, 4)?,
                    target: if target.is_empty() {
                        ".".into()
                    } else {
                        target
                    },
                }))
            }
            _ => None,
        };
        if let Some(r) = record {
            ttl = ttl.min(rr.ttl);
            records.push(r);
        }
    }
    Ok(Answer {
        records,
        extra,
        ttl: if ttl == u32::MAX { 0 } else { ttl },
        no_such_name,
        authenticated,
        truncated,
    })
}

/// RFC 2782's order: by priority, and within one priority a weighted
/// random pick (`pick` in `0..=65535` chooses); the record to try first.
/// A lone "." target means the service is not offered there.
pub fn choose(records: &[Srv], pick: u16) -> Option<&Srv> {
    let best = records.iter().map(|r| r.priority).min()?;
    let tier: Vec<&Srv> = records.iter().filter(|r| r.priority == best).collect();
    if tier.len() == 1 && tier[0].target == "." {
        return None;
    }
    // In 64 bits: a tier of heavy weights times the pick passes 2^32
    // (found by the dns_answer fuzz target).
    let total: u64 = tier.iter().map(|r| u64::from(r.weight)).sum();
    if total == 0 {
        return tier.get(usize::from(pick) % tier.len()).copied();
    }
    let mut point = u64::from(pick) * total / 65_536;
    for r in &tier {
        let w = u64::from(r.weight);
        if point < w {
            return Some(r);
        }
        point -= w;
    }
    tier.last().copied()
}

/// Every record in RFC 2782's order: by priority, each priority's records
/// in a weighted random order (`pick` draws); none when the only record is
/// a "." target (the service is not offered).
pub fn order(mut records: Vec<Srv>, mut pick: impl FnMut() -> u16) -> Vec<Srv> {
    let mut ordered = Vec::with_capacity(records.len());
    while let Some(next) = choose(&records, pick()) {
        let at = records
            .iter()
            .position(|r| std::ptr::eq(r, next))
            .unwrap_or(0);
        let r = records.swap_remove(at);
        if r.target != "." {
            ordered.push(r);
        }
    }
    ordered
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer as a server would write it, compressing the question.
    fn answer(id: u16, q: &[u8], flags: u16, records: &[&[u8]], extra: &[&[u8]]) -> Vec<u8> {
        let mut m = id.to_be_bytes().to_vec();
        m.extend_from_slice(&flags.to_be_bytes());
        m.extend_from_slice(&[0, 1, 0, records.len() as u8, 0, 0, 0, extra.len() as u8]);
        m.extend_from_slice(q);
        for r in records.iter().chain(extra) {
            m.extend_from_slice(r);
        }
        m
    }

    fn question(name: &str, kind: Kind) -> Vec<u8> {
        let mut q = Vec::new();
        query(7, name, kind, &mut q).unwrap();
        q[12..].to_vec()
    }

    /// A record whose owner is the question's name (pointer to 12).
    fn rr(kind: u16, ttl: u32, data: &[u8]) -> Vec<u8> {
        let mut r = vec![0xC0, 12];
        r.extend_from_slice(&kind.to_be_bytes());
        r.extend_from_slice(&CLASS_IN.to_be_bytes());
        r.extend_from_slice(&ttl.to_be_bytes());
        r.extend_from_slice(&(data.len() as u16).to_be_bytes());
        r.extend_from_slice(data);
        r
    }

    #[test]
    fn a_query_is_written_as_rfc_1035_says() {
        let mut q = Vec::new();
        query(0x1234, "Proxy.Example.com.", Kind::Srv, &mut q).unwrap();
        assert_eq!(
            q,
            b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05Proxy\x07Example\x03com\x00\x00\x21\x00\x01"
        );
        for bad in ["", ".", "a..b", "a b.c", &"x".repeat(64), &"a.".repeat(128)] {
            assert!(
                matches!(query(1, bad, Kind::A, &mut q), Err(DnsError::BadName(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn an_edns_query_carries_one_opt_record_as_rfc_6891_says() {
        let mut q = Vec::new();
        query(0x1234, "sip.test", Kind::A, &mut q).unwrap();
        let plain = q.clone();
        add_edns(&mut q, EDNS_PAYLOAD);
        // ARCOUNT 1; after the question: root, OPT (41), 1232, TTL 0, RDLEN 0.
        assert_eq!(&q[10..12], b"\x00\x01");
        assert_eq!(&q[..10], &plain[..10]);
        assert_eq!(&q[12..plain.len()], &plain[12..]);
        assert_eq!(
            &q[plain.len()..],
            b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00"
        );
        // An answer that echoes the OPT record is read as before.
        let m = answer(
            0x1234,
            &q[12..plain.len()],
            0x8180,
            &[&rr(1, 60, &[127, 0, 0, 9])],
            &[b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00"],
        );
        let a = parse(&m, 0x1234, "sip.test", Kind::A).unwrap();
        assert_eq!(a.records, [Record::Address([127, 0, 0, 9].into())]);
        assert!(a.extra.is_empty());
        // What a server without EDNS answers: FORMERR (or NOTIMP).
        let formerr = answer(0x1234, &q[12..plain.len()], 0x8181, &[], &[]);
        let e = parse(&formerr, 0x1234, "sip.test", Kind::A).unwrap_err();
        assert!(e.refuses_edns(), "{e:?}");
        assert!(!DnsError::Server(2).refuses_edns());
        // The AD bit, asked and answered.
        let mut asked = plain.clone();
        ask_authenticated(&mut asked);
        assert_eq!(asked[3], 0x20);
        assert_eq!(&asked[..3], &plain[..3]);
        let question = &plain[12..];
        let rr_a = rr(1, 60, &[127, 0, 0, 9]);
        let validated = answer(0x1234, question, 0x81a0, &[&rr_a], &[]);
        assert!(
            parse(&validated, 0x1234, "sip.test", Kind::A)
                .unwrap()
                .authenticated
        );
        let unvalidated = answer(0x1234, question, 0x8180, &[&rr_a], &[]);
        assert!(
            !parse(&unvalidated, 0x1234, "sip.test", Kind::A)
                .unwrap()
                .authenticated
        );
        // Nothing to add to when there is no header.
        let mut short = vec![0u8; 5];
        add_edns(&mut short, EDNS_PAYLOAD);
        assert_eq!(short, [0u8; 5]);
    }

    #[test]
    fn addresses_srv_and_cname_chains_are_read() {
        let q = question("sip.test", Kind::A);
        let m = answer(
            7,
            &q,
            0x8180,
            &[&rr(1, 300, &[192, 0, 2, 7]), &rr(1, 60, &[192, 0, 2, 8])],
            &[],
        );
        let a = parse(&m, 7, "sip.test", Kind::A).unwrap();
        let ips: Vec<_> = a.records.clone();
        assert_eq!(
            ips,
            vec![
                Record::Address([192, 0, 2, 7].into()),
                Record::Address([192, 0, 2, 8].into())
            ]
        );
        assert_eq!(a.ttl, 60);
        // A CNAME to a name that is then given (written uncompressed).
        let mut cname = vec![0xC0, 12];
        cname.extend_from_slice(&[0, 5, 0, 1, 0, 0, 0, 30, 0, 6, 4, b'r', b'e', b'a', b'l', 0]);
        let mut real = vec![4, b'r', b'e', b'a', b'l', 0];
        real.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 90, 0, 4, 198, 51, 100, 1]);
        let m = answer(7, &q, 0x8180, &[&real, &cname], &[]);
        let a = parse(&m, 7, "SIP.test.", Kind::A).unwrap();
        assert_eq!(a.records, vec![Record::Address([198, 51, 100, 1].into())]);
        // SRV with its target's address in the additional section.
        let q = question("_sip._udp.test", Kind::Srv);
        let mut data = vec![0, 10, 0, 5, 0x13, 0xC4];
        data.extend_from_slice(&[2, b'p', b'x', 0xC0, 12 + 10]);
        let mut glue = vec![2, b'p', b'x', 0xC0, 12 + 10];
        glue.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 9, 0, 4, 10, 0, 0, 1]);
        let m = answer(7, &q, 0x8580, &[&rr(33, 20, &data)], &[&glue]);
        let a = parse(&m, 7, "_sip._udp.test", Kind::Srv).unwrap();
        assert_eq!(
            a.records,
            vec![Record::Srv(Srv {
                priority: 10,
                weight: 5,
                port: 5060,
                target: "px.test".into()
            })]
        );
        assert_eq!(a.extra, vec![("px.test".into(), [10, 0, 0, 1].into())]);
    }

    #[test]
    fn answers_to_other_questions_and_malformed_ones_are_refused() {
        let q = question("sip.test", Kind::A);
        let good = answer(7, &q, 0x8180, &[&rr(1, 300, &[192, 0, 2, 7])], &[]);
        assert_eq!(
            parse(&good, 8, "sip.test", Kind::A),
            Err(DnsError::NotOurs("another ID"))
        );
        assert!(matches!(
            parse(&good, 7, "sip2.test", Kind::A),
            Err(DnsError::NotOurs(_))
        ));
        assert!(matches!(
            parse(&good, 7, "sip.test", Kind::Aaaa),
            Err(DnsError::NotOurs(_))
        ));
        let query_not_answer = answer(7, &q, 0x0100, &[], &[]);
        assert!(matches!(
            parse(&query_not_answer, 7, "sip.test", Kind::A),
            Err(DnsError::NotOurs(_))
        ));
        let servfail = answer(7, &q, 0x8182, &[], &[]);
        assert_eq!(
            parse(&servfail, 7, "sip.test", Kind::A),
            Err(DnsError::Server(2))
        );
        let nx = parse(&answer(7, &q, 0x8183, &[], &[]), 7, "sip.test", Kind::A).unwrap();
        assert!(nx.no_such_name && nx.records.is_empty());
        // Every truncation of a good answer is refused, never a panic.
        for n in 0..good.len() {
            assert!(parse(&good[..n], 7, "sip.test", Kind::A).is_err(), "{n}");
        }
        // A pointer to itself, and one pointing forward.
        let mut looped = good.clone();
        let at = 12 + q.len();
        looped[at] = 0xC0;
        looped[at + 1] = at as u8;
        assert!(matches!(
            parse(&looped, 7, "sip.test", Kind::A),
            Err(DnsError::Malformed(_))
        ));
        // A record for another name is not taken.
        let mut other = vec![3, b'e', b'v', b'l', 0];
        other.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 9, 0, 4, 6, 6, 6, 6]);
        let m = answer(7, &q, 0x8180, &[&other], &[]);
        assert!(parse(&m, 7, "sip.test", Kind::A)
            .unwrap()
            .records
            .is_empty());
    }

    #[test]
    fn srv_records_are_chosen_by_priority_then_weight() {
        let srv = |priority, weight, target: &str| Srv {
            priority,
            weight,
            port: 5060,
            target: target.into(),
        };
        let rs = [srv(20, 100, "late"), srv(10, 1, "a"), srv(10, 3, "b")];
        let picks: Vec<&str> = [0u16, 16_383, 16_384, 65_535]
            .iter()
            .map(|&p| choose(&rs, p).unwrap().target.as_str())
            .collect();
        assert_eq!(picks, ["a", "a", "b", "b"]);
        assert_eq!(choose(&[srv(0, 0, ".")], 3), None);
        // Heavy weights: the pick times their sum passes 2^32.
        let heavy: Vec<Srv> = (0..8).map(|i| srv(1, u16::MAX, &format!("h{i}"))).collect();
        assert_eq!(choose(&heavy, u16::MAX).unwrap().target, "h7");
        assert_eq!(choose(&heavy, 0).unwrap().target, "h0");
        // The whole order: priority first, then weight (a pick of 0
        // always takes the first record with weight).
        let all = order(rs.to_vec(), || 0);
        let targets: Vec<&str> = all.iter().map(|r| r.target.as_str()).collect();
        assert_eq!(targets, ["a", "b", "late"]);
        assert_eq!(order(rs.to_vec(), || 65_535)[0].target, "b");
        assert!(order(vec![srv(0, 0, ".")], || 0).is_empty());
        assert_eq!(choose(&[], 3), None);
        assert_eq!(
            choose(&[srv(1, 0, "x"), srv(1, 0, "y")], 1).unwrap().target,
            "y"
        );
    }
}
