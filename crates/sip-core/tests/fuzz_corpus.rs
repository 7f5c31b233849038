//! Runs the fuzz target bodies over the torture corpus and deterministic
//! mutations of it, so the fuzz properties are exercised on every test run.

use std::path::Path;

use sip_core::fuzzing;

/// xorshift64*: a tiny deterministic generator, so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

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

fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(5) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if at < v.len() => {
                let n = 1 + rng.below(8.min(v.len() - at));
                v.drain(at..at + n);
            }
            2 => {
                let piece = INTERESTING[rng.below(INTERESTING.len())];
                v.splice(at..at, piece.iter().copied());
            }
            3 if !v.is_empty() => {
                // Duplicate a chunk elsewhere (repeats headers, parameters).
                let s = rng.below(v.len());
                let e = (s + 1 + rng.below(40)).min(v.len());
                let chunk = v[s..e].to_vec();
                v.splice(at.min(v.len())..at.min(v.len()), chunk);
            }
            _ => v.truncate(at),
        }
    }
    v
}

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
    let mut rng = Rng(0x5eed_0001);
    for seed in &seeds {
        fuzzing::message(seed);
        for _ in 0..400 {
            fuzzing::message(&mutate(&mut rng, seed));
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
    let mut rng = Rng(0x5eed_0002);
    for seed in uris {
        for _ in 0..3000 {
            fuzzing::uri(&mutate(&mut rng, seed));
        }
    }
    for seed in digests {
        for _ in 0..3000 {
            fuzzing::digest_header(&mutate(&mut rng, seed));
        }
    }
}
