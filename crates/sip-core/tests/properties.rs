//! Property tests: generated messages parse to the values they were built
//! from, and survive parse → serialise → parse and the proxy edits.

use proptest::prelude::*;
use sip_core::{HeaderName, Message};

fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9][A-Za-z0-9.!%*_+`'~-]{0,12}"
}

fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9-]{0,8}(\\.[a-z][a-z0-9-]{0,8}){0,3}",
        (any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>())
            .prop_map(|(a, b, c, d)| format!("{a}.{b}.{c}.{d}")),
        any::<[u16; 8]>().prop_map(|s| format!("[{}]", std::net::Ipv6Addr::from(s))),
    ]
}

fn uri() -> impl Strategy<Value = String> {
    (
        prop_oneof![Just("sip"), Just("sips"), Just("SIP")],
        proptest::option::of("[a-z0-9._!~*'()-]{1,8}(%[0-9A-F]{2})?"),
        host(),
        proptest::option::of(1u16..),
        proptest::collection::vec(
            (
                "[a-z][a-z0-9-]{0,6}",
                proptest::option::of("[A-Za-z0-9.]{1,6}"),
            ),
            0..3,
        ),
    )
        .prop_map(|(scheme, user, host, port, params)| {
            let mut s = format!("{scheme}:");
            if let Some(u) = user {
                s += &u;
                s.push('@');
            }
            s += &host;
            if let Some(p) = port {
                s += &format!(":{p}");
            }
            for (n, v) in params {
                s.push(';');
                s += &n;
                if let Some(v) = v {
                    s.push('=');
                    s += &v;
                }
            }
            s
        })
}

/// Linear white space as a sender may write it, folding included.
fn lws() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just(""),
        Just(" "),
        Just("  "),
        Just("\t"),
        Just("\r\n "),
        Just(" \r\n\t")
    ]
}

fn display() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(prop_oneof![
        "[A-Za-z]{1,6}( [A-Za-z]{1,6}){0,2}",
        "\"[A-Za-z ,;:<>@]{0,8}(\\\\\"|\\\\\\\\)?[A-Za-z ]{0,6}\"",
    ])
}

#[derive(Debug, Clone)]
struct Spec {
    method: &'static str,
    ruri: String,
    from_display: Option<String>,
    from_uri: String,
    from_tag: String,
    to_uri: String,
    call_id: String,
    cseq: u32,
    branches: Vec<String>,
    contacts: Vec<(String, Option<u32>)>,
    extra: Vec<(String, String)>,
    body: Vec<u8>,
    compact: bool,
    sep: &'static str,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        (
            prop_oneof![
                Just("INVITE"),
                Just("REGISTER"),
                Just("OPTIONS"),
                Just("BYE"),
                Just("MESSAGE")
            ],
            uri(),
            display(),
            uri(),
            token(),
            uri(),
            "[A-Za-z0-9.!%*_+`'~()<>:\\\\\"/\\[\\]?{}-]{1,20}(@[a-z0-9.]{1,10})?",
        ),
        (
            0u32..(1 << 31),
            proptest::collection::vec("z9hG4bK[A-Za-z0-9.-]{1,10}", 1..4),
            proptest::collection::vec((uri(), proptest::option::of(any::<u32>())), 0..3),
            proptest::collection::vec(("X-[A-Za-z0-9-]{1,10}", "[ -~]{0,30}"), 0..4),
            proptest::collection::vec(any::<u8>(), 0..64),
            any::<bool>(),
            lws(),
        ),
    )
        .prop_map(
            |(
                (method, ruri, from_display, from_uri, from_tag, to_uri, call_id),
                (cseq, branches, contacts, extra, body, compact, sep),
            )| Spec {
                method,
                ruri,
                from_display,
                from_uri,
                from_tag,
                to_uri,
                call_id,
                cseq,
                branches,
                contacts,
                extra,
                body,
                compact,
                sep,
            },
        )
}

fn render(s: &Spec) -> Vec<u8> {
    let name = |long: &'static str, short: &'static str| if s.compact { short } else { long };
    let sep = s.sep;
    let mut m = format!("{} {} SIP/2.0\r\n", s.method, s.ruri);
    let vias: Vec<_> = s
        .branches
        .iter()
        .enumerate()
        .map(|(i, b)| {
            format!(
                "SIP{sep}/2.0/UDP h{i}.example.com:{}{sep};{sep}branch={b}",
                5060 + i
            )
        })
        .collect();
    m += &format!(
        "{}:{sep}{}\r\n",
        name("Via", "v"),
        vias.join(&format!("{sep},{sep}"))
    );
    let disp = s
        .from_display
        .as_deref()
        .map(|d| format!("{d}{sep}"))
        .unwrap_or_default();
    m += &format!(
        "{}: {disp}<{}>{sep};tag={}\r\n",
        name("From", "f"),
        s.from_uri,
        s.from_tag
    );
    m += &format!("{}: <{}>\r\n", name("To", "t"), s.to_uri);
    m += &format!("{}: {}\r\n", name("Call-ID", "i"), s.call_id);
    m += &format!("CSeq: {}{sep} {}\r\n", s.cseq, s.method);
    m += "Max-Forwards: 70\r\n";
    for (u, e) in &s.contacts {
        match e {
            Some(e) => m += &format!("{}: <{u}>{sep};expires={e}\r\n", name("Contact", "m")),
            None => m += &format!("{}: <{u}>\r\n", name("Contact", "m")),
        }
    }
    for (n, v) in &s.extra {
        m += &format!("{n}: {v}\r\n");
    }
    m += &format!("{}: {}\r\n\r\n", name("Content-Length", "l"), s.body.len());
    let mut bytes = m.into_bytes();
    bytes.extend_from_slice(&s.body);
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn generated_messages_parse_to_their_values(s in spec()) {
        let bytes = render(&s);
        let m = Message::parse(&bytes).map_err(|e| TestCaseError::fail(format!("{e}\n{}", String::from_utf8_lossy(&bytes))))?;
        prop_assert_eq!(m.method().as_str(), s.method);
        prop_assert_eq!(m.request_uri().map(|u| u.as_str()), Some(s.ruri.as_str()));
        prop_assert_eq!(m.from().uri().as_str(), s.from_uri.as_str());
        prop_assert_eq!(m.from().tag(), Some(s.from_tag.as_str()));
        let expected_display = s.from_display.as_deref().map(|d| d.strip_prefix('"').and_then(|d| d.strip_suffix('"')).unwrap_or(d));
        prop_assert_eq!(m.from().display_name(), expected_display);
        prop_assert_eq!(m.to().uri().as_str(), s.to_uri.as_str());
        prop_assert_eq!(m.call_id(), s.call_id.as_str());
        prop_assert_eq!(m.cseq().seq, s.cseq);
        let branches: Vec<_> = m.vias().map(|v| v.branch().map(str::to_owned)).collect();
        prop_assert_eq!(branches, s.branches.iter().cloned().map(Some).collect::<Vec<_>>());
        let contacts: Vec<_> = m.contacts().map(|c| (c.addr.uri().as_str().to_owned(), c.expires)).collect();
        prop_assert_eq!(contacts, s.contacts.clone());
        for (n, v) in &s.extra {
            prop_assert!(m.headers().any(|h| h.name == HeaderName::Other && h.raw_name == n && h.value == v.trim_matches([' ', '\t'])));
        }
        prop_assert_eq!(m.body(), &s.body[..]);
        // Round trip, proxy edits and response forwarding properties.
        sip_core::fuzzing::message(&bytes);
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        sip_core::fuzzing::message(&data);
        sip_core::fuzzing::uri(&data);
        sip_core::fuzzing::digest_header(&data);
    }
}
