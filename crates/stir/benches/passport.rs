//! µs per call of what the proxies pay: signing a SHAKEN PASSporT (the
//! authentication service) and reading and verifying one (the
//! verification service, the certificate already at hand). `cargo bench
//! -p stir`.
#![allow(missing_docs)] // criterion_group! generates undocumented items

use criterion::{criterion_group, criterion_main, Criterion};
use openssl::ec::{EcGroup, EcKey};
use openssl::nid::Nid;
use stir::passport::{Dest, Orig};
use stir::{Claims, IdentityHeader, Passport, SigningKey};

fn claims() -> Claims {
    Claims {
        attest: "A".into(),
        dest: Dest::tn("12155551213"),
        iat: 1_790_000_000,
        orig: Orig::tn("12155551212"),
        origid: "123e4567-e89b-12d3-a456-426655440000".into(),
    }
}

fn bench(c: &mut Criterion) {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).expect("P-256");
    let ec = EcKey::generate(&group).expect("key");
    let public = EcKey::from_public_key(&group, ec.public_key()).expect("public");
    let pem = openssl::pkey::PKey::from_ec_key(ec)
        .and_then(|k| k.private_key_to_pem_pkcs8())
        .expect("pem");
    let key = SigningKey::from_pem(&pem).expect("signing key");
    let x5u = "https://cr.example.net/sp.pem";
    c.bench_function("sign", |b| {
        b.iter(|| IdentityHeader::format(&key.sign(&claims(), x5u).expect("signed"), x5u))
    });
    let header = IdentityHeader::format(&key.sign(&claims(), x5u).expect("signed"), x5u);
    c.bench_function("parse + decode", |b| {
        b.iter(|| {
            let h = IdentityHeader::parse(&header).expect("header");
            Passport::decode(h.token).expect("token")
        })
    });
    c.bench_function("parse + decode + verify", |b| {
        b.iter(|| {
            let h = IdentityHeader::parse(&header).expect("header");
            let p = Passport::decode(h.token).expect("token");
            assert!(p.verify(&public));
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
