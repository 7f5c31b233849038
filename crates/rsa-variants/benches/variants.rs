//! µs per RSA operation for each variant and size: the cost a TLS server
//! pays per handshake (a private-key signature) and a PrivaSIP proxy per
//! decrypted ID. `cargo bench -p rsa-variants`.
#![allow(missing_docs)] // criterion_group! generates undocumented items

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rsa_variants::{HashAlg, PrivateKey, Variant};

fn variants(c: &mut Criterion) {
    let mut group = c.benchmark_group("rsa");
    group.sample_size(20);
    for bits in [1024u32, 2048, 3072, 4096] {
        let crt = PrivateKey::generate(Variant::Crt, bits).expect("keygen");
        let mut keys = vec![crt.to_standard().expect("standard"), crt.clone()];
        for primes in 3..=Variant::max_primes(bits) {
            keys.push(PrivateKey::generate(Variant::MultiPrime { primes }, bits).expect("keygen"));
        }
        for key in &keys {
            let name = key.variant().name();
            let public = key.public_key().expect("public");
            let ct = public
                .encrypt_oaep(HashAlg::Sha256, b"sip:alice@example.test")
                .expect("enc");
            group.bench_with_input(
                BenchmarkId::new(format!("oaep-decrypt/{name}"), bits),
                &ct,
                |b, ct| b.iter(|| key.decrypt_oaep(HashAlg::Sha256, ct).expect("dec")),
            );
            group.bench_with_input(
                BenchmarkId::new(format!("pss-sign/{name}"), bits),
                &(),
                |b, _| {
                    b.iter(|| {
                        key.sign_pss(HashAlg::Sha256, b"handshake transcript")
                            .expect("sign")
                    })
                },
            );
        }
        let public = crt.public_key().expect("public");
        group.bench_with_input(BenchmarkId::new("oaep-encrypt", bits), &(), |b, _| {
            b.iter(|| {
                public
                    .encrypt_oaep(HashAlg::Sha256, b"sip:alice@example.test")
                    .expect("enc")
            })
        });
        let sig = crt.sign_pss(HashAlg::Sha256, b"t").expect("sign");
        group.bench_with_input(BenchmarkId::new("pss-verify", bits), &sig, |b, sig| {
            b.iter(|| assert!(public.verify_pss(HashAlg::Sha256, b"t", sig)))
        });
    }
    group.finish();
}

criterion_group!(benches, variants);
criterion_main!(benches);
