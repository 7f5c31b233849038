//! ns per packet: protect and unprotect a 172-byte RTP packet (12-byte
//! header, 160 bytes of G.711) for each profile. `cargo bench -p srtp`.
#![allow(missing_docs)] // criterion_group! generates undocumented items

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use srtp::{Context, Profile};

fn packet(seq: u16) -> Vec<u8> {
    let mut p = vec![0x80, 0x00];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 160, 0xca, 0xfe, 0xba, 0xbe]);
    p.extend_from_slice(&[0xd5; 160]);
    p
}

fn profiles(c: &mut Criterion) {
    let mut g = c.benchmark_group("srtp");
    g.throughput(Throughput::Elements(1));
    for profile in Profile::ALL {
        let key = vec![7u8; profile.key_len()];
        let salt = vec![9u8; profile.salt_len()];
        let mut tx = Context::new(profile, &key, &salt).expect("context");
        let mut buf = Vec::with_capacity(200);
        let template = packet(0);
        let mut seq = 0u16;
        g.bench_function(BenchmarkId::new("protect", profile.name()), |b| {
            b.iter(|| {
                seq = seq.wrapping_add(1);
                buf.clear();
                buf.extend_from_slice(&template);
                buf[2..4].copy_from_slice(&seq.to_be_bytes());
                tx.protect(&mut buf).expect("protect");
            })
        });
        // Unprotect needs fresh packets: protect a batch up front.
        let mut sender = Context::new(profile, &key, &salt).expect("context");
        let batch: Vec<Vec<u8>> = (0..50_000u32)
            .map(|i| {
                let mut p = packet(i as u16);
                sender.protect(&mut p).expect("protect");
                p
            })
            .collect();
        let mut rx = Context::new(profile, &key, &salt).expect("context");
        let mut i = 0usize;
        g.bench_function(BenchmarkId::new("unprotect", profile.name()), |b| {
            b.iter(|| {
                if i == batch.len() {
                    rx = Context::new(profile, &key, &salt).expect("context");
                    i = 0;
                }
                buf.clear();
                buf.extend_from_slice(&batch[i]);
                i += 1;
                rx.unprotect(&mut buf).expect("unprotect");
            })
        });
    }
    g.finish();
}

criterion_group!(benches, profiles);
criterion_main!(benches);
