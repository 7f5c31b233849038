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
