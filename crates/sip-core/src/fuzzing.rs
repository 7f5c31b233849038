//! Fuzz target bodies. The cargo-fuzz targets in `fuzz/` call these, and
//! the normal test run calls them over the torture corpus and mutations,
//! so the properties are checked on every commit.

use crate::auth::{Challenge, Credentials};
use crate::digest::{self, Algorithm, Hex, Qop, ResponseInput};
use crate::error::ErrorKind;
use crate::framing::{frame, Frame};
use crate::limits::Limits;
use crate::message::Message;
use crate::proxy::{forward_request, forward_response_with, RequestEdits};
use crate::uri::{Uri, UriContext};
use crate::writer::write_message;

fn same(a: &Message<'_>, b: &Message<'_>) {
    assert_eq!(a.start_line(), b.start_line());
    assert_eq!(a.call_id(), b.call_id());
    assert_eq!(a.cseq(), b.cseq());
    assert_eq!(a.from().as_str(), b.from().as_str());
    assert_eq!(a.to().as_str(), b.to().as_str());
    assert_eq!(a.via_count(), b.via_count());
    assert_eq!(a.top_via().as_str(), b.top_via().as_str());
    assert_eq!(a.max_forwards(), b.max_forwards());
    assert_eq!(a.contact_count(), b.contact_count());
    assert_eq!(a.route_count(), b.route_count());
    assert_eq!(a.header_count(), b.header_count());
    assert_eq!(a.body(), b.body());
}

/// Message parser: never panics; a glance agrees with it; what parses re-serialises to a message
/// that parses to the same values; proxy edits produce parseable output.
pub fn message(data: &[u8]) {
    let glance = crate::message::Glance::read(data);
    let Ok(m) = Message::parse(data) else { return };
    if let Some(g) = glance {
        // What a glance reads, it reads as the full parse does.
        assert_eq!(g.status, m.status().map(|s| s.as_u16()));
        assert_eq!(g.method, m.is_request().then(|| m.method()));
        assert_eq!((g.call_id, g.cseq), (m.call_id(), m.cseq()));
        assert_eq!(g.to_tag, m.to().tag());
        assert!(g.headers().map(|h| h.line).eq(m.headers().map(|h| h.line)));
    }
    assert!(m.len() <= data.len());
    let _ = m.validate_all();
    let _ = m.vias().count();
    let _ = m.contacts().count();
    let mut out = Vec::with_capacity(data.len() + 64);
    write_message(&m, &mut out);
    let again = Message::parse(&out).unwrap_or_else(|e| panic!("re-serialised message fails: {e}"));
    same(&m, &again);

    out.clear();
    // Half the inputs have their body replaced, as a media relay's
    // session description replaces a call's.
    let body = (m.body().len() % 2 == 1).then_some(&b"v=0\r\ns=relayed\r\n"[..]);
    let expected = body.unwrap_or(m.body());
    // A proxy adds at most five header lines (Via, Record-Route, Route,
    // Max-Forwards, Content-Length): a message at the limits may exceed
    // them by that.
    let headroom = |out: &[u8]| Limits {
        max_headers: Limits::DEFAULT.max_headers + 5,
        max_message_len: Limits::DEFAULT.max_message_len + out.len().saturating_sub(m.len()),
        ..Limits::DEFAULT
    };
    if m.is_request() {
        let edits = RequestEdits {
            request_uri: Some("sip:target@192.0.2.2:5062"),
            via: Some("SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKfuzz"),
            record_route: Some("<sip:192.0.2.1;lr>"),
            route: Some("<sip:edge.example;lr>"),
            pop_routes: m.route_count().min(2),
            received: Some(("192.0.2.9", 5070)),
            max_forwards: true,
            force_rport: true,
            remove: None,
            body,
        };
        if forward_request(&m, &edits, &mut out).is_ok() {
            let f = Message::parse_with(&out, &headroom(&out)).unwrap_or_else(|e| {
                panic!(
                    "forwarded request fails: {e}\n{}",
                    String::from_utf8_lossy(&out)
                )
            });
            assert_eq!(f.via_count(), m.via_count() + 1);
            assert_eq!(f.top_via().branch(), Some("z9hG4bKfuzz"));
            assert_eq!(f.route_count() + edits.pop_routes, m.route_count() + 1);
            assert_eq!(f.body(), expected);
        }
    } else if forward_response_with(&m, body, &mut out).is_ok() {
        let f = Message::parse_with(&out, &headroom(&out)).unwrap_or_else(|e| {
            panic!(
                "forwarded response fails: {e}\n{}",
                String::from_utf8_lossy(&out)
            )
        });
        assert_eq!(f.via_count() + 1, m.via_count());
        assert_eq!(f.body(), expected);
    }
}

/// URI parser: never panics; a parsed URI displays as its input.
pub fn uri(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    for ctx in [UriContext::RequestUri, UriContext::Header] {
        if let Ok(u) = Uri::parse(s, ctx) {
            assert_eq!(u.to_string(), s);
            let _ = u.params().count();
        }
    }
}

/// Bencode (media relay answers): never panics; a parsed value written
/// back reads the same; reading an answer's strings without building it
/// accepts what parsing accepts.
pub fn bencode(data: &[u8]) {
    let strings = crate::bencode::dict_strings(data, ["result", "sdp"]);
    let Ok(v) = crate::bencode::parse(data) else {
        assert!(strings.is_err());
        return;
    };
    let dict = matches!(v, crate::bencode::Value::Dict(_));
    assert_eq!(strings.map(|s| s.is_some()), Ok(dict));
    fn write(v: &crate::bencode::Value<'_>, w: &mut crate::bencode::Writer) {
        use crate::bencode::Value;
        match v {
            Value::Bytes(b) => {
                w.bytes(b);
            }
            Value::Int(i) => {
                w.int(*i);
            }
            Value::List(items) => {
                w.list();
                items.iter().for_each(|i| write(i, w));
                w.end();
            }
            Value::Dict(entries) => {
                w.dict();
                for (k, v) in entries {
                    w.bytes(k);
                    write(v, w);
                }
                w.end();
            }
        }
    }
    let mut w = crate::bencode::Writer::new();
    write(&v, &mut w);
    let again = w.into_bytes();
    assert_eq!(crate::bencode::parse(&again).as_ref(), Ok(&v));
}

/// Digest header parsers: never panic; parsed credentials feed the digest
/// computation without panicking.
pub fn digest_header(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = Challenge::parse(s).map(|c| c.offers_qop("auth"));
    if let Ok(c) = Credentials::parse(s) {
        let alg = c
            .algorithm
            .and_then(Algorithm::from_token)
            .unwrap_or(Algorithm::Md5);
        let ha1 = c.username.and_then(Hex::from_hex).unwrap_or_else(|| {
            digest::ha1(alg, c.username.unwrap_or(""), c.realm.unwrap_or(""), "pw")
        });
        let input = ResponseInput {
            algorithm: alg,
            ha1: &ha1,
            nonce: c.nonce.unwrap_or(""),
            cnonce: c.cnonce.unwrap_or(""),
            nc: c.nc.unwrap_or("00000001"),
            qop: c.qop.and_then(Qop::from_token),
            method: "REGISTER",
            uri: c.uri.unwrap_or(""),
            body: b"",
        };
        let _ = digest::verify(&input, c.response.unwrap_or(""));
    }
}

/// What a stream carried: its messages, how many keep-alive bytes came
/// between them, and whether it could not be framed.
#[derive(Debug, PartialEq, Eq)]
struct Stream {
    messages: Vec<Vec<u8>>,
    keepalive: usize,
    broken: bool,
}

/// Frames `bytes` received `chunk` bytes at a time, as a connection's
/// reads bring them.
fn stream(bytes: &[u8], chunk: usize, limits: &Limits) -> Stream {
    let mut s = Stream {
        messages: Vec::new(),
        keepalive: 0,
        broken: false,
    };
    let mut buf = Vec::new();
    for piece in bytes.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        let mut at = 0;
        loop {
            match frame(&buf[at..], limits) {
                Ok(Frame::KeepAlive(n)) => {
                    assert!(n > 0 && at + n <= buf.len());
                    s.keepalive += n;
                    at += n;
                }
                Ok(Frame::Message(n)) => {
                    assert!(n > 0 && at + n <= buf.len() && n <= limits.max_message_len);
                    s.messages.push(buf[at..at + n].to_vec());
                    at += n;
                }
                Err(e) if e.kind == ErrorKind::Incomplete => break,
                Err(_) => {
                    s.broken = true;
                    return s;
                }
            }
        }
        buf.drain(..at);
        // Waiting for the rest of one message: never more than the limit.
        assert!(
            buf.len() <= limits.max_message_len,
            "{} bytes held",
            buf.len()
        );
    }
    s
}

/// Stream framing (TCP, TLS): never panics; the first byte picks how
/// many bytes each read brings (plus one) and the rest is the stream.
/// Read in pieces, it gives the same messages, the same keep-alive bytes
/// and the same verdict as read whole, and holds at most one message's
/// worth between reads.
pub fn framing(data: &[u8]) {
    let Some((&pick, bytes)) = data.split_first() else {
        return;
    };
    let limits = Limits {
        max_message_len: 2048,
        ..Limits::DEFAULT
    };
    let whole = stream(bytes, bytes.len(), &limits);
    let pieces = stream(bytes, 1 + usize::from(pick), &limits);
    assert_eq!(whole, pieces, "read whole and in pieces of {}", 1 + pick);
}

/// The DNS answer reader: whatever a name server (or a forger) sends,
/// reading never panics, and what it reads is what was asked for. The
/// first two bytes pick the question's kind and ID; the rest is the
/// answer.
pub fn dns_answer(data: &[u8]) {
    use crate::dns::{parse, Kind, Record};
    let [pick, id, rest @ ..] = data else {
        return;
    };
    let kind = [Kind::A, Kind::Aaaa, Kind::Srv][usize::from(*pick) % 3];
    let name = "_sip._udp.sip.test";
    let first = parse(rest, u16::from(*id), name, kind);
    assert_eq!(
        first,
        parse(rest, u16::from(*id), name, kind),
        "reading twice differs"
    );
    let Ok(answer) = first else {
        return;
    };
    for r in &answer.records {
        match (r, kind) {
            (Record::Address(ip), Kind::A) => assert!(ip.is_ipv4()),
            (Record::Address(ip), Kind::Aaaa) => assert!(ip.is_ipv6()),
            (Record::Srv(s), Kind::Srv) => assert!(s.target.len() <= 255),
            _ => panic!("a record of another kind than asked: {r:?}"),
        }
    }
    // RFC 2181 §8: a TTL above 2^31 - 1 is read as zero.
    assert!(answer.ttl <= i32::MAX as u32);
    // RFC 2782's order of what was read: priorities never go down, no
    // record is taken twice, and "." targets are never tried.
    let srvs = answer.srv_records();
    let mut picks = rest.iter().cycle().map(|&b| u16::from(b) * 257);
    let ordered = crate::dns::order(srvs.clone(), || picks.next().unwrap_or(0));
    assert!(ordered.len() <= srvs.len());
    assert!(ordered.windows(2).all(|w| w[0].priority <= w[1].priority));
    assert!(ordered.iter().all(|r| r.target != "."));
    for r in &ordered {
        let taken = ordered.iter().filter(|o| *o == r).count();
        assert!(taken <= srvs.iter().filter(|s| *s == r).count());
    }
}

/// What separates the messages of one input to a property that takes a
/// dialogue (the server's core, the phone's).
pub const SEPARATOR: &[u8] = b"\0\0";

/// The messages of a dialogue: `data` cut at each [`SEPARATOR`].
pub fn split(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(data);
    std::iter::from_fn(move || {
        let r = rest?;
        match r.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
            Some(at) => {
                rest = Some(&r[at + SEPARATOR.len()..]);
                Some(&r[..at])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

/// Deterministic mutations of seed inputs, for running fuzz properties in
/// the ordinary test suite: the same seed gives the same inputs, so a
/// failure reproduces.
#[derive(Debug, Clone)]
pub struct Mutator(u64);

/// Bytes worth splicing into SIP: separators, quoting, folding, control
/// bytes, tokens a parser keys on.
const INTERESTING: &[&[u8]] = &[
    b"\r\n",
    b"\n",
    b"\r",
    b" ",
    b"\t",
    b",",
    b";",
    b":",
    b"\"",
    b"\\",
    b"<",
    b">",
    b"@",
    b"%",
    b"[",
    b"]",
    b"=",
    b"\r\n ",
    b"\x00",
    b"\xff",
    b"SIP/2.0",
    b"Via: ",
    b"Content-Length: 99999\r\n",
    b"z9hG4bK",
];

impl Mutator {
    /// A generator started from `seed` (not zero).
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    /// xorshift64*.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// `input` with one to four edits: a bit flipped, a few bytes cut,
    /// an interesting token inserted, a chunk repeated elsewhere, or the
    /// tail cut off.
    pub fn mutate(&mut self, input: &[u8]) -> Vec<u8> {
        let mut v = input.to_vec();
        for _ in 0..1 + self.below(4) {
            let at = self.below(v.len() + 1);
            match self.below(5) {
                0 if !v.is_empty() => {
                    let i = self.below(v.len());
                    v[i] ^= 1 << self.below(8);
                }
                1 if at < v.len() => {
                    let n = 1 + self.below(8.min(v.len() - at));
                    v.drain(at..at + n);
                }
                2 => {
                    let piece = INTERESTING[self.below(INTERESTING.len())];
                    v.splice(at..at, piece.iter().copied());
                }
                3 if !v.is_empty() => {
                    // Repeats headers, parameters.
                    let s = self.below(v.len());
                    let e = (s + 1 + self.below(40)).min(v.len());
                    let chunk = v[s..e].to_vec();
                    v.splice(at.min(v.len())..at.min(v.len()), chunk);
                }
                _ => v.truncate(at),
            }
        }
        v
    }
}
