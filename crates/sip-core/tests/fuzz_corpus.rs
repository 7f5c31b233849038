//! Runs the fuzz target bodies over the torture corpus and deterministic
//! mutations of it, so the fuzz properties are exercised on every test run.

use std::path::Path;

use sip_core::fuzzing::{self, Mutator};

fn corpus() -> Vec<Vec<u8>> {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/rfc4475"));
    let mut out = Vec::new();
    for sub in ["valid", "invalid"] {
        for e in std::fs::read_dir(root.join(sub)).expect("corpus") {
            out.push(std::fs::read(e.expect("entry").path()).expect("readable"));
        }
    }
    out.sort();
    out
}

/// Inputs that once crashed a fuzz target (see `testdata/fuzz-regressions`).
#[test]
fn fuzz_regressions() {
    let dir = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/fuzz-regressions"
    ));
    let mut n = 0;
    for e in std::fs::read_dir(dir).expect("regressions dir") {
        let data = std::fs::read(e.expect("entry").path()).expect("readable");
        fuzzing::message(&data);
        fuzzing::uri(&data);
        fuzzing::digest_header(&data);
        fuzzing::dns_answer(&data);
        fuzzing::bencode(&data);
        n += 1;
    }
    assert!(n > 0);
    // The first finding: a multibyte character straddling offset 4 of the start line.
    fuzzing::message("SIPо/2.0 200 OK\r\n\r\n".as_bytes());
    fuzzing::message(
        "SIP/2.0 200 OK\r\nDate: Sun,\u{430}06 Nov 1994 08:49:37 GMT\r\n\r\n".as_bytes(),
    );
}

#[test]
fn message_target_over_mutated_corpus() {
    let seeds = corpus();
    let mut rng = Mutator::new(0x5eed_0001);
    for seed in &seeds {
        fuzzing::message(seed);
        for _ in 0..400 {
            fuzzing::message(&rng.mutate(seed));
        }
    }
}

#[test]
fn uri_and_digest_targets_over_mutations() {
    let uris: &[&[u8]] = &[
        b"sip:alice:pw@[2001:db8::1]:5061;transport=tcp;lr?subject=x&y=z",
        b"sips:%61lice@example.com;maddr=239.1.1.1",
        b"tel:+1-201-555-0123;phone-context=example.com",
        b"sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*:&it+has=1,weird!*pas$wo~d_too.(doesn't-it)@example.com",
    ];
    let digests: &[&[u8]] = &[
        b"Digest username=\"bob\", realm=\"r\", nonce=\"n\", uri=\"sip:r\", qop=auth, nc=00000001, cnonce=\"c\", response=\"6629fae49393a05397450978507c4ef1\", algorithm=SHA-256-sess",
        b"Digest realm=\"atlanta.example.com\", qop=\"auth,auth-int\", nonce=\"x\", stale=true, algorithm=MD5",
    ];
    let mut rng = Mutator::new(0x5eed_0002);
    for seed in uris {
        for _ in 0..3000 {
            fuzzing::uri(&rng.mutate(seed));
        }
    }
    for seed in digests {
        for _ in 0..3000 {
            fuzzing::digest_header(&rng.mutate(seed));
        }
    }
}

/// Streams of torture messages with keep-alives between them, read in
/// pieces of every size up to 256, then mutated.
#[test]
fn framing_target_over_streams_of_the_corpus() {
    let seeds: Vec<Vec<u8>> = corpus().into_iter().filter(|m| m.len() < 1500).collect();
    let mut rng = Mutator::new(0x5eed_0003);
    for (i, seed) in seeds.iter().enumerate() {
        let next = &seeds[(i + 1) % seeds.len()];
        let mut s = seed.clone();
        s.extend_from_slice(b"\r\n\r\n");
        s.extend_from_slice(next);
        s.extend_from_slice(b"\r\n");
        for pick in [0u8, 1, 2, 6, 63, 255] {
            fuzzing::framing(&[&[pick][..], &s].concat());
        }
        for _ in 0..200 {
            let pick = rng.below(256) as u8;
            fuzzing::framing(&[&[pick][..], &rng.mutate(&s)].concat());
        }
    }
}

/// Answers a name server could give to the questions the resolver asks
/// (the first byte picks the kind: 0 A, 1 AAAA, 2 SRV; the second is the
/// ID), each as `dns_answer` reads them.
fn dns_seeds() -> Vec<Vec<u8>> {
    use sip_core::dns::{query, Kind};
    let name = "_sip._udp.sip.test";
    let answer = |kind: Kind, rcode: u8, records: &[(u16, &[u8])], extra: &[u8]| {
        let mut m = Vec::new();
        query(9, name, kind, &mut m).expect("query");
        m[2] = 0x85;
        m[3] = 0x80 | rcode;
        m[7] = records.len() as u8;
        m[11] = u8::from(!extra.is_empty());
        for (code, data) in records {
            m.extend_from_slice(&[0xC0, 12]);
            m.extend_from_slice(&code.to_be_bytes());
            m.extend_from_slice(&[0, 1, 0, 0, 0x0e, 0x10]);
            m.extend_from_slice(&(data.len() as u16).to_be_bytes());
            m.extend_from_slice(data);
        }
        m.extend_from_slice(extra);
        m
    };
    let pick = |p: u8, m: Vec<u8>| [&[p, 9][..], &m].concat();
    let srv = [0, 10, 0, 60, 0x13, 0xC4, 2, b'p', b'x', 0xC0, 22];
    let glue = [
        2, b'p', b'x', 0xC0, 22, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1,
    ];
    let cname = [5, b'o', b't', b'h', b'e', b'r', 0xC0, 22];
    vec![
        pick(
            0,
            answer(
                Kind::A,
                0,
                &[(1, &[192, 0, 2, 1]), (1, &[192, 0, 2, 2])],
                &[],
            ),
        ),
        pick(
            1,
            answer(
                Kind::Aaaa,
                0,
                &[(
                    28,
                    &[0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                )],
                &[],
            ),
        ),
        pick(2, answer(Kind::Srv, 0, &[(33, &srv)], &glue)),
        pick(0, answer(Kind::A, 0, &[(5, &cname)], &[])),
        pick(2, answer(Kind::Srv, 3, &[], &[])),
    ]
}

#[test]
fn dns_answers_are_read_without_panics_and_only_as_asked() {
    use sip_core::dns::{parse, Kind};
    // The seeds are answers the reader takes (the CNAME's target has no
    // address in it; the last is NXDOMAIN).
    let kinds = [Kind::A, Kind::Aaaa, Kind::Srv, Kind::A, Kind::Srv];
    let found: Vec<usize> = dns_seeds()
        .iter()
        .zip(kinds)
        .map(|(s, k)| {
            parse(&s[2..], 9, "_sip._udp.sip.test", k)
                .expect("seed")
                .records
                .len()
        })
        .collect();
    assert_eq!(found, [2, 1, 1, 0, 0]);
    for seed in dns_seeds() {
        fuzzing::dns_answer(&seed);
        for n in 0..seed.len() {
            fuzzing::dns_answer(&seed[..n]);
        }
    }
    let mut rng = Mutator::new(0xd15_a115);
    for seed in dns_seeds() {
        for _ in 0..4000 {
            fuzzing::dns_answer(&rng.mutate(&seed));
        }
    }
}

#[test]
fn bencode_target_over_mutations() {
    let seeds: &[&[u8]] = &[
        b"d6:result2:ok3:sdp31:v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ne",
        b"d6:result5:error12:error-reason12:Unknown calle",
        b"d7:command5:offer5:flagsl13:trust-addresse7:replacel6:origine3:ICE6:removee",
        b"li1ei-2e0:l4:spame",
    ];
    let mut rng = Mutator::new(0x5eed_0003);
    for seed in seeds {
        fuzzing::bencode(seed);
        for _ in 0..3000 {
            fuzzing::bencode(&rng.mutate(seed));
        }
    }
}
