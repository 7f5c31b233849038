//! RFC 4475 torture messages, typed in under `testdata/rfc4475/`.
//!
//! Every file in `valid/` and `invalid/` must appear in the table below,
//! and every table entry must have a file, so no case is silently skipped.

use std::collections::BTreeSet;
use std::path::Path;

use sip_core::{ErrorKind, HeaderName, Message, Method, Scheme, StatusCode, UriError};

/// What a case must do.
enum Expect {
    /// Parses; the closure checks decoded values.
    Valid(fn(&Message<'_>)),
    /// Rejected by `Message::parse` with an error the closure accepts.
    Reject(fn(&ErrorKind) -> bool),
    /// Accepted by the hot-path parser (it does not decode that field), but
    /// `validate_all` (used by `sipsec sip check`) rejects it.
    RejectStrict(fn(&ErrorKind) -> bool),
}
use Expect::*;

fn invalid_header(kind: &ErrorKind, h: HeaderName) -> bool {
    matches!(kind, ErrorKind::InvalidHeader { name, .. } if *name == h)
}

/// (section, file stem, expectation)
const CASES: &[(&str, &str, Expect)] = &[
    // §3.1.1 valid messages
    (
        "3.1.1.1",
        "wsinv",
        Valid(|m| {
            assert_eq!(m.method(), Method::Invite);
            assert_eq!(m.max_forwards(), Some(68));
            assert_eq!(m.cseq().seq, 9);
            assert_eq!(m.to().tag(), Some("1918181833n"));
            assert_eq!(m.from().tag(), Some("98asjd8"));
            assert_eq!(m.from().display_name(), Some(r#"J Rosenberg \\\""#));
            assert_eq!(m.via_count(), 3);
            assert_eq!(m.top_via().branch(), Some("390skdjuw"));
            assert_eq!(m.contacts().next().map(|c| c.q), Some(Some(330)));
            assert_eq!(
                m.header_raw("NewFangledHeader"),
                Some("newfangled value\r\n continued newfangled value")
            );
            assert_eq!(m.body().len(), 150);
            assert_eq!(m.header(HeaderName::Subject), Some(""));
        }),
    ),
    (
        "3.1.1.2",
        "intmeth",
        Valid(|m| {
            assert_eq!(
                m.method().as_str(),
                "!interesting-Method0123456789_*+`.%indeed'~"
            );
            assert_eq!(m.cseq().method, m.method());
            assert_eq!(m.call_id(), "intmeth.word%ZK-!.*_+'@word`~)(><:\\/\"][?}{");
            assert_eq!(m.from().tag(), Some("_token~1'+`*%!-."));
            assert_eq!(m.top_via().branch(), Some("z9hG4bK-.!%66*_+`'~"));
        }),
    ),
    (
        "3.1.1.3",
        "esc01",
        Valid(|m| {
            assert_eq!(
                m.request_uri().and_then(|u| u.user()),
                Some("sips%3Auser%40example.com")
            );
            assert_eq!(
                m.contacts().next().map(|c| c.addr.uri().params().count()),
                Some(2)
            );
            assert_eq!(m.content_type(), Some("application/sdp"));
        }),
    ),
    (
        "3.1.1.4",
        "escnull",
        Valid(|m| {
            assert_eq!(m.contact_count(), 2);
            assert_eq!(m.to().uri().user(), Some("null-%00-null"));
        }),
    ),
    (
        "3.1.1.5",
        "esc02",
        Valid(|m| {
            assert_eq!(m.method(), Method::Extension("RE%47IST%45R"));
            assert_eq!(
                m.contact_count(),
                2,
                "C%6Fntact is an unknown header, not Contact"
            );
            assert_eq!(m.to().display_name(), Some("%Z%45"));
        }),
    ),
    (
        "3.1.1.6",
        "lwsdisp",
        Valid(|m| assert_eq!(m.from().display_name(), Some("caller"))),
    ),
    (
        "3.1.1.7",
        "longreq",
        Valid(|m| {
            assert_eq!(m.via_count(), 32);
            assert!(m.call_id().len() > 190);
            assert!(m.to().display_name().is_some_and(|d| d.len() > 300));
        }),
    ),
    (
        "3.1.1.8",
        "dblreq",
        Valid(|m| {
            assert_eq!(m.method(), Method::Register);
            assert!(
                m.as_bytes().ends_with(b"Content-Length: 0\r\n\r\n"),
                "stops after the first message"
            );
        }),
    ),
    (
        "3.1.1.9",
        "semiuri",
        Valid(|m| {
            let u = m.request_uri().expect("request");
            assert_eq!(u.user(), Some("user;par=u%40example.net"));
            assert_eq!(u.params().count(), 0);
        }),
    ),
    (
        "3.1.1.10",
        "transports",
        Valid(|m| {
            use sip_core::via::Transport::*;
            let t: Vec<_> = m.vias().map(|v| v.transport()).collect();
            assert_eq!(t, vec![Udp, Sctp, Tls, Other, Tcp]);
        }),
    ),
    (
        "3.1.1.11",
        "mpart01",
        Valid(|m| {
            assert_eq!(
                m.content_type(),
                Some("multipart/mixed;boundary=7a9cbec.3a2ea4d6")
            );
            assert_eq!(m.body().len(), m.content_length().expect("has length"));
        }),
    ),
    (
        "3.1.1.12",
        "unreason",
        Valid(|m| {
            assert_eq!(m.status(), Some(StatusCode::OK));
            assert!(m.reason().is_some_and(|r| r.ends_with("простое")));
        }),
    ),
    (
        "3.1.1.13",
        "noreason",
        Valid(|m| {
            assert_eq!(m.status(), Some(StatusCode::TRYING));
            assert_eq!(m.reason(), Some(""));
        }),
    ),
    // §3.4, §3.5: syntactically valid; the application decides.
    (
        "3.4.2",
        "unkscm",
        Valid(|m| assert_eq!(m.request_uri().map(|u| u.scheme()), Some(Scheme::Other))),
    ),
    (
        "3.4.3",
        "novelsc",
        Valid(|m| assert_eq!(m.request_uri().map(|u| u.scheme()), Some(Scheme::Other))),
    ),
    (
        "3.4.4",
        "unksm2",
        Valid(|m| {
            assert_eq!(m.to().uri().scheme(), Scheme::Other);
            assert_eq!(
                m.contacts().next().map(|c| c.addr.uri().as_str()),
                Some("name:John_Smith")
            );
        }),
    ),
    (
        "3.4.5",
        "bext01",
        Valid(|m| assert!(m.header(HeaderName::ProxyRequire).is_some())),
    ),
    (
        "3.4.6",
        "invut",
        Valid(|m| assert_eq!(m.content_type(), Some("application/unknownformat"))),
    ),
    (
        "3.4.7",
        "regaut01",
        Valid(|m| {
            let c = sip_core::auth::Credentials::parse(
                m.header(HeaderName::Authorization).expect("present"),
            )
            .expect("parses");
            assert!(!c.is_digest());
        }),
    ),
    ("3.4.10", "bcast", Valid(|m| assert_eq!(m.via_count(), 2))),
    (
        "3.4.11",
        "zeromf",
        Valid(|m| assert_eq!(m.max_forwards(), Some(0))),
    ),
    (
        "3.4.12",
        "cparam01",
        Valid(|m| {
            let c = m.contacts().next().expect("contact");
            assert_eq!(
                c.addr.params().get("unknownparam"),
                Some(None),
                "header parameter without <>"
            );
            assert_eq!(c.addr.uri().params().count(), 0);
        }),
    ),
    (
        "3.4.13",
        "cparam02",
        Valid(|m| {
            let c = m.contacts().next().expect("contact");
            assert_eq!(
                c.addr.uri().param("unknownparam"),
                Some(None),
                "URI parameter inside <>"
            );
        }),
    ),
    (
        "3.4.14",
        "regescrt",
        Valid(|m| {
            assert_eq!(
                m.contacts().next().and_then(|c| c.addr.uri().headers()),
                Some("Route=%3Csip:sip.example.com%3E")
            );
        }),
    ),
    (
        "3.4.15",
        "sdp01",
        Valid(|m| assert_eq!(m.header(HeaderName::Accept), Some("text/nobodyKnowsThis"))),
    ),
    (
        "3.5.1",
        "inv2543",
        Valid(|m| {
            assert_eq!(m.top_via().branch(), None);
            assert!(!m.top_via().is_rfc3261_branch());
            assert_eq!(m.max_forwards(), None);
            assert_eq!(m.from().tag(), None);
        }),
    ),
    // §3.1.2 invalid messages
    (
        "3.1.2.1",
        "badinv01",
        Reject(|k| invalid_header(k, HeaderName::From)),
    ),
    (
        "3.1.2.2",
        "clerr",
        Reject(|k| matches!(k, ErrorKind::BodyTruncated { declared: 9999, .. })),
    ),
    (
        "3.1.2.3",
        "ncl",
        Reject(|k| invalid_header(k, HeaderName::ContentLength)),
    ),
    // 400 for the overlarge CSeq, as the RFC expects (Max-Forwards: 300 would also fail).
    (
        "3.1.2.4",
        "scalar02",
        Reject(|k| invalid_header(k, HeaderName::CSeq)),
    ),
    (
        "3.1.2.5",
        "scalarlg",
        RejectStrict(|k| invalid_header(k, HeaderName::RetryAfter)),
    ),
    (
        "3.1.2.6",
        "quotbal",
        Reject(|k| invalid_header(k, HeaderName::To)),
    ),
    (
        "3.1.2.7",
        "ltgtruri",
        Reject(|k| *k == ErrorKind::Uri(UriError::Scheme)),
    ),
    (
        "3.1.2.8",
        "lwsruri",
        Reject(|k| matches!(k, ErrorKind::StartLine(_))),
    ),
    (
        "3.1.2.9",
        "lwsstart",
        Reject(|k| matches!(k, ErrorKind::StartLine(_))),
    ),
    (
        "3.1.2.10",
        "trws",
        Reject(|k| matches!(k, ErrorKind::StartLine(_))),
    ),
    (
        "3.1.2.11",
        "escruri",
        Reject(|k| *k == ErrorKind::Uri(UriError::HeadersInRequestUri)),
    ),
    (
        "3.1.2.12",
        "baddate",
        RejectStrict(|k| invalid_header(k, HeaderName::Date)),
    ),
    (
        "3.1.2.13",
        "regbadct",
        Reject(|k| invalid_header(k, HeaderName::Contact)),
    ),
    (
        "3.1.2.14",
        "badaspec",
        Reject(|k| *k == ErrorKind::Uri(UriError::Scheme)),
    ),
    (
        "3.1.2.15",
        "baddn",
        Reject(|k| invalid_header(k, HeaderName::From)),
    ),
    (
        "3.1.2.16",
        "badvers",
        Reject(|k| *k == ErrorKind::UnsupportedVersion),
    ),
    (
        "3.1.2.17",
        "mismatch01",
        Reject(|k| *k == ErrorKind::CSeqMethodMismatch),
    ),
    (
        "3.1.2.18",
        "mismatch02",
        Reject(|k| *k == ErrorKind::CSeqMethodMismatch),
    ),
    (
        "3.1.2.19",
        "bigcode",
        Reject(|k| *k == ErrorKind::StatusCode),
    ),
    (
        "3.4.1",
        "insuf",
        Reject(|k| *k == ErrorKind::MissingHeader(HeaderName::From)),
    ),
    (
        "3.4.8",
        "multi01",
        Reject(|k| *k == ErrorKind::DuplicateHeader(HeaderName::CSeq)),
    ),
    (
        "3.4.9",
        "mcl01",
        Reject(|k| *k == ErrorKind::DuplicateHeader(HeaderName::ContentLength)),
    ),
];

fn dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/rfc4475"))
}

fn load(stem: &str) -> (Vec<u8>, bool) {
    for (sub, valid) in [("valid", true), ("invalid", false)] {
        if let Ok(b) = std::fs::read(dir().join(sub).join(format!("{stem}.sip"))) {
            return (b, valid);
        }
    }
    panic!("no file for case {stem}");
}

#[test]
fn every_case_behaves_as_the_rfc_says() {
    for (section, stem, expect) in CASES {
        let (bytes, in_valid_dir) = load(stem);
        let result = Message::parse(&bytes);
        match (expect, result) {
            (Valid(check), Ok(m)) => {
                assert!(in_valid_dir, "{stem} is valid but filed as invalid");
                m.validate_all()
                    .unwrap_or_else(|e| panic!("§{section} {stem}: strict check failed: {e}"));
                check(&m);
            }
            (Reject(ok), Err(e)) => {
                assert!(!in_valid_dir, "{stem} is rejected but filed as valid");
                assert!(ok(&e.kind), "§{section} {stem}: wrong error {e}");
            }
            (RejectStrict(ok), Ok(m)) => {
                assert!(!in_valid_dir);
                let e = m.validate_all().expect_err(stem);
                assert!(ok(&e.kind), "§{section} {stem}: wrong strict error {e}");
            }
            (Valid(_), Err(e)) => panic!("§{section} {stem} must parse: {e}"),
            (Reject(_), Ok(_)) | (RejectStrict(_), Err(_)) => {
                panic!(
                    "§{section} {stem}: outcome differs from expectation: {:?}",
                    Message::parse(&bytes).err()
                )
            }
        }
    }
}

#[test]
fn table_and_files_match() {
    let mut files = BTreeSet::new();
    for sub in ["valid", "invalid"] {
        for e in std::fs::read_dir(dir().join(sub)).expect("corpus dir") {
            let p = e.expect("entry").path();
            files.insert(
                p.file_stem()
                    .and_then(|s| s.to_str())
                    .expect("utf-8 name")
                    .to_owned(),
            );
        }
    }
    let table: BTreeSet<_> = CASES.iter().map(|(_, s, _)| (*s).to_owned()).collect();
    assert_eq!(files, table);
}

/// Every rejection carries an offset inside the input.
#[test]
fn offsets_point_into_the_message() {
    for (_, stem, expect) in CASES {
        if let Reject(_) = expect {
            let (bytes, _) = load(stem);
            let e = Message::parse(&bytes).expect_err(stem);
            assert!(
                e.offset <= bytes.len(),
                "{stem}: offset {} beyond {}",
                e.offset,
                bytes.len()
            );
        }
    }
}
