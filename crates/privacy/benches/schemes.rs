//! µs per pseudonym: what the phone pays to make one (encrypt) and a
//! proxy to open one (decrypt), per scheme. `cargo bench -p privacy`.
#![allow(missing_docs)] // criterion_group! generates undocumented items

use criterion::{criterion_group, criterion_main, Criterion};
use privacy::keys::{cipher_from_pem, decipher_from_pem, public_pem};
use privacy::{IdCipher, IdDecipher};

fn private_keys() -> Vec<(&'static str, Vec<u8>)> {
    let group =
        openssl::ec::EcGroup::from_curve_name(openssl::nid::Nid::X9_62_PRIME256V1).expect("P-256");
    let ec = openssl::pkey::PKey::from_ec_key(openssl::ec::EcKey::generate(&group).expect("ec"))
        .and_then(|k| k.private_key_to_pem_pkcs8())
        .expect("pem");
    let x = openssl::pkey::PKey::generate_x25519()
        .and_then(|k| k.private_key_to_pem_pkcs8())
        .expect("pem");
    let mut out = vec![("ecies-p256", ec), ("hpke-x25519", x)];
    for (name, v) in [
        ("rsa2048-crt", rsa_variants::Variant::Crt),
        (
            "rsa2048-3prime",
            rsa_variants::Variant::MultiPrime { primes: 3 },
        ),
    ] {
        let k = rsa_variants::PrivateKey::generate(v, 2048).expect("keygen");
        out.push((name, k.to_pkcs8_pem().expect("pem")));
    }
    out
}

fn schemes(c: &mut Criterion) {
    let mut g = c.benchmark_group("pseudonym");
    g.sample_size(30);
    for (name, pem) in private_keys() {
        let enc = cipher_from_pem(&public_pem(&pem).expect("public"), 1).expect("cipher");
        let dec = decipher_from_pem(&pem, 1).expect("decipher");
        let raw = enc.encrypt("alice").expect("encrypt");
        assert_eq!(dec.decrypt(&raw).expect("decrypt"), "alice");
        g.bench_function(format!("encrypt/{name}"), |b| {
            b.iter(|| enc.encrypt("alice").expect("encrypt"))
        });
        g.bench_function(format!("decrypt/{name}"), |b| {
            b.iter(|| dec.decrypt(&raw).expect("decrypt"))
        });
    }
    let ha1 = "9bd6d9e2ae9a6b1f0a1f3e9a8d9c2b7f5e4d3c2b1a09f8e7d6c5b4a392817060";
    let aes = privacy::aes::AesId::new(ha1, "a.example", 1, false).expect("aes");
    let raw = aes.encrypt("alice").expect("encrypt");
    g.bench_function("encrypt/aes128-gcm", |b| {
        b.iter(|| aes.encrypt("alice").expect("encrypt"))
    });
    g.bench_function("decrypt/aes128-gcm", |b| {
        b.iter(|| aes.decrypt(&raw).expect("decrypt"))
    });
    // PrivaSIP-3: the proxy issues tickets at registration and opens one
    // per call (AES-256-GCM-SIV).
    let (tickets, _) = privacy::tickets::TicketKeys::generate(1).expect("ticket key");
    let ticket = tickets.issue("alice", u64::MAX).expect("issue");
    g.bench_function("encrypt/ticket-aes256-gcm-siv", |b| {
        b.iter(|| tickets.issue("alice", u64::MAX).expect("issue"))
    });
    g.bench_function("decrypt/ticket-aes256-gcm-siv", |b| {
        b.iter(|| tickets.open(&ticket).expect("open"))
    });
    g.finish();
}

criterion_group!(benches, schemes);
criterion_main!(benches);
