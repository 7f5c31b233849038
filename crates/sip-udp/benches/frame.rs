//! What the AF_XDP path's frame checks cost per datagram: a REGISTER's
//! frame read with its UDP checksum sent (summed over the whole
//! datagram), without one, and with one left for the device to complete
//! (what this host's own stack sends over a veth pair).
//! `cargo bench -p sip-udp --bench frame`.
#![allow(missing_docs)] // criterion_group! writes an undocumented function

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use sip_udp::xdp::frame::{fill_udp_checksum, parse, write_headers, Endpoints, HEADERS};

fn frame(summed: bool) -> Vec<u8> {
    let payload = include_bytes!("../../sip-core/testdata/bench/register.sip");
    let ends = Endpoints {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src: "10.0.0.1:40000".parse().unwrap(),
        dst: "10.0.0.2:5060".parse().unwrap(),
    };
    let mut f = vec![0; HEADERS + payload.len()];
    assert!(write_headers(&mut f, &ends, payload.len(), 1));
    f[HEADERS..].copy_from_slice(payload);
    if summed {
        assert!(fill_udp_checksum(&mut f));
    }
    f
}

fn benches(c: &mut Criterion) {
    let summed = frame(true);
    let unsummed = frame(false);
    // The pseudo-header's sum alone, as checksum offload leaves it.
    let mut partial = unsummed.clone();
    let mut acc: u32 = 17 + (partial.len() - 34) as u32;
    for w in partial[26..34].chunks(2) {
        acc += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    partial[40..42].copy_from_slice(&(acc as u16).to_be_bytes());
    for (name, f) in [
        ("frame/udp_checksum_sent", &summed),
        ("frame/no_udp_checksum", &unsummed),
        ("frame/udp_checksum_left_to_the_device", &partial),
    ] {
        assert!(parse(f).is_some(), "{name}");
        c.bench_function(name, |b| b.iter(|| parse(black_box(f)).is_some()));
    }
}

criterion_group!(frame_benches, benches);
criterion_main!(frame_benches);
