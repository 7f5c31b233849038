//! What counting one message costs when every worker counts at once: the
//! counters each request and its answer add to (by method, transport,
//! class, code), counted by one thread and by two at the same time. Two
//! threads adding to one counter pass its cache line between their cores
//! for each addition; counters kept per thread do not.
//! `metrics/threads_N` reports the time for each thread to count one
//! message (a request and its 200), all N counting together.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Barrier;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use sipsec_server::proto::metrics::Metrics;
use sipsec_server::Transport;

const ANSWER: &[u8] = b"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.1:5099;branch=z9hG4bK1\r\nCSeq: 7 REGISTER\r\nContent-Length: 0\r\n\r\n";

/// `n` counted messages on this thread, as a UDP worker counts them.
fn count(m: &Metrics, worker: usize, n: u64) {
    for _ in 0..n {
        m.udp_worker_received(worker, 1);
        m.request(black_box("REGISTER"), Transport::Udp);
        m.sent(black_box(ANSWER));
    }
}

fn threads(c: &mut Criterion) {
    for n in [1, 2] {
        c.bench_function(&format!("metrics/threads_{n}"), |b| {
            let m = Metrics::default();
            b.iter_custom(|iters| {
                let ready = Barrier::new(n);
                std::thread::scope(|s| {
                    let counting: Vec<_> = (0..n)
                        .map(|w| {
                            let (m, ready) = (&m, &ready);
                            s.spawn(move || {
                                ready.wait();
                                let start = Instant::now();
                                count(m, w, iters);
                                start.elapsed()
                            })
                        })
                        .collect();
                    counting
                        .into_iter()
                        .map(|t| t.join().expect("counting thread"))
                        .max()
                        .unwrap_or_default()
                })
            })
        });
    }
}

criterion_group!(metrics_benches, threads);
criterion_main!(metrics_benches);
