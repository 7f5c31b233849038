//! Message-layer benchmarks: parse, serialise, respond, proxy edits,
//! digest, media relay answers.
//! Besides criterion's timings, prints allocations per operation.
#![allow(unsafe_code)] // the counting global allocator
#![allow(missing_docs)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sip_core::bencode;
use sip_core::digest::{self, Algorithm, Qop, ResponseInput};
use sip_core::proxy::{forward_request, forward_response, RequestEdits};
use sip_core::writer::{write_message, write_response, ResponseOptions};
use sip_core::{Message, StatusCode};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: delegates to the system allocator; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const REGISTER: &[u8] = include_bytes!("../testdata/bench/register.sip");
const INVITE: &[u8] = include_bytes!("../testdata/bench/invite.sip");
const OK200: &[u8] = include_bytes!("../testdata/bench/ok200.sip");
/// rtpengine 10's answer to a `delete`, captured on loopback.
const NG_DELETE: &[u8] = include_bytes!("../testdata/bench/ng-delete-answer.bencode");

fn allocs_per_op(name: &str, mut f: impl FnMut()) {
    f();
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..1000 {
        f();
    }
    let n = ALLOCS.load(Ordering::Relaxed) - before;
    println!("{name}: {:.3} allocations/op", n as f64 / 1000.0);
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    for (name, msg) in [
        ("register", REGISTER),
        ("invite_sdp", INVITE),
        ("ok200", OK200),
    ] {
        g.throughput(Throughput::Bytes(msg.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| Message::parse(black_box(msg)).map(|m| m.len()))
        });
        allocs_per_op(&format!("parse/{name}"), || {
            let _ = black_box(Message::parse(black_box(msg)).map(|m| m.len()));
        });
    }
    g.finish();

    let reg = Message::parse(REGISTER).expect("bench message");
    let inv = Message::parse(INVITE).expect("bench message");
    let ok = Message::parse(OK200).expect("bench message");
    let mut out = Vec::with_capacity(4096);
    let mut g = c.benchmark_group("write");
    g.bench_function("serialize_invite", |b| {
        b.iter(|| {
            out.clear();
            write_message(black_box(&inv), &mut out);
        })
    });
    let opts = ResponseOptions {
        to_tag: Some("a6c85cf"),
        extra: &[(
            "Contact",
            "<sip:bob@192.0.2.4:5060;transport=udp>;expires=3600",
        )],
        ..Default::default()
    };
    g.bench_function("register_200", |b| {
        b.iter(|| {
            out.clear();
            write_response(&mut out, black_box(&reg), StatusCode::OK, &opts);
        })
    });
    let edits = RequestEdits {
        request_uri: Some("sip:bob@192.0.2.4:5060"),
        via: Some("SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKp1a2b3"),
        record_route: Some("<sip:192.0.2.1;lr>"),
        route: None,
        pop_routes: 0,
        received: Some(("192.0.2.101", 5060)),
        max_forwards: true,
        force_rport: false,
        remove: None,
        body: None,
    };
    g.bench_function("proxy_forward_invite", |b| {
        b.iter(|| {
            out.clear();
            forward_request(black_box(&inv), &edits, &mut out)
        })
    });
    g.bench_function("proxy_forward_200", |b| {
        b.iter(|| {
            out.clear();
            forward_response(black_box(&ok), &mut out)
        })
    });
    g.bench_function("parse_and_answer_register", |b| {
        b.iter(|| {
            out.clear();
            let m = Message::parse(black_box(REGISTER)).expect("parses");
            write_response(&mut out, &m, StatusCode::OK, &opts);
        })
    });
    g.finish();
    allocs_per_op("write/register_200", || {
        out.clear();
        write_response(&mut out, &reg, StatusCode::OK, &opts);
    });
    allocs_per_op("write/proxy_forward_invite", || {
        out.clear();
        let _ = forward_request(&inv, &edits, &mut out);
    });

    let mut g = c.benchmark_group("digest");
    for alg in [Algorithm::Md5, Algorithm::Sha256, Algorithm::Sha512_256] {
        let ha1 = digest::ha1(alg, "bob", "biloxi.example.com", "zanzibar");
        let input = ResponseInput {
            algorithm: alg,
            ha1: &ha1,
            nonce: "dcd98b7102dd2f0e8b11d0f600bfb0c093",
            cnonce: "0a4f113b",
            nc: "00000001",
            qop: Some(Qop::Auth),
            method: "REGISTER",
            uri: "sip:biloxi.example.com",
            body: b"",
        };
        let expected = digest::response(&input);
        g.bench_function(format!("verify_{}", alg.as_str()), |b| {
            b.iter(|| digest::verify(black_box(&input), expected.as_str()))
        });
    }
    g.finish();
    relay_answers(c);
}

/// A media relay's answer (rtpengine's to a `delete`, with its call's
/// statistics): built whole against read for the strings a proxy keeps.
fn relay_answers(c: &mut Criterion) {
    fn strings(a: &[u8]) -> Option<usize> {
        let found = bencode::dict_strings(a, ["result", "sdp", "error-reason"]).ok()??;
        found[0].map(<[u8]>::len)
    }
    fn built(a: &[u8]) -> Option<usize> {
        bencode::parse(a).ok()?.str_at("result").map(str::len)
    }
    let mut g = c.benchmark_group("relay_answer");
    g.throughput(Throughput::Bytes(NG_DELETE.len() as u64));
    g.bench_function("parse_delete", |b| b.iter(|| built(black_box(NG_DELETE))));
    g.bench_function("strings_delete", |b| {
        b.iter(|| strings(black_box(NG_DELETE)))
    });
    g.finish();
    allocs_per_op("relay_answer/parse_delete", || {
        let _ = black_box(built(black_box(NG_DELETE)));
    });
    allocs_per_op("relay_answer/strings_delete", || {
        let _ = black_box(strings(black_box(NG_DELETE)));
    });
}

criterion_group!(name = message; config = Criterion::default(); targets = benches);
criterion_main!(message);
