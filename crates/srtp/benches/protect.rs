//! ns per packet: protect and unprotect a 172-byte RTP packet (12-byte
//! header, 160 bytes of G.711) for each profile, ours and — in the same
//! run, same loop — libsrtp 2.7 on OpenSSL (the C peer in interop/srtp
//! over the pylibsrtp wheel's library; skipped with a note when it cannot
//! be built). `cargo bench -p srtp`.
#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use srtp::{Context, Profile};

fn packet(seq: u16) -> Vec<u8> {
    let mut p = vec![0x80, 0x00];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 160, 0xca, 0xfe, 0xba, 0xbe]);
    p.extend_from_slice(&[0xd5; 160]);
    p
}

/// The C peer and the library it loads, or why there is none.
fn libsrtp_peer() -> Result<(PathBuf, String), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../interop/srtp");
    let bin = std::env::temp_dir().join(format!("sipsec-libsrtp-peer-{}", std::process::id()));
    let out = Command::new("bash")
        .arg(root.join("build-peer.sh"))
        .arg(&bin)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok((bin, String::from_utf8_lossy(&out.stdout).trim().to_string()))
}

/// libsrtp's time for `iters` packets, measured inside the C peer.
fn libsrtp_time(peer: &(PathBuf, String), profile: Profile, iters: u64, key: &str) -> Duration {
    let out = Command::new(&peer.0)
        .args([
            peer.1.as_str(),
            "bench",
            profile.name(),
            &iters.max(1).to_string(),
            "1",
        ])
        .output()
        .expect("libsrtp peer runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let ns: f64 = text
        .split(&format!("\"{key}\":["))
        .nth(1)
        .and_then(|r| r.split(']').next())
        .and_then(|v| v.parse().ok())
        .expect("ns per packet in the peer's output");
    Duration::from_nanos((ns * iters as f64) as u64)
}

fn profiles(c: &mut Criterion) {
    let peer = libsrtp_peer();
    if let Err(e) = &peer {
        eprintln!(
            "libsrtp benchmarks skipped (./setup.sh installs libsrtp2-dev and pylibsrtp): {e}"
        );
    }
    let mut g = c.benchmark_group("srtp");
    g.throughput(Throughput::Elements(1));
    for profile in Profile::ALL {
        // The key the C peer uses: 0x07 bytes of key, 0x09 of salt.
        let key = vec![7u8; profile.key_len()];
        let salt = vec![9u8; profile.salt_len()];
        let mut tx = Context::new(profile, &key, &salt).expect("context");
        let mut buf = Vec::with_capacity(200);
        let template = packet(0);
        let mut seq = 0u16;
        g.bench_function(BenchmarkId::new("sipsec protect", profile.name()), |b| {
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
        g.bench_function(BenchmarkId::new("sipsec unprotect", profile.name()), |b| {
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
        if let Ok(peer) = &peer {
            for (name, key) in [
                ("libsrtp protect", "protect_ns"),
                ("libsrtp unprotect", "unprotect_ns"),
            ] {
                g.bench_function(BenchmarkId::new(name, profile.name()), |b| {
                    b.iter_custom(|iters| libsrtp_time(peer, profile, iters, key))
                });
            }
        }
    }
    g.finish();
    if let Ok((bin, _)) = &peer {
        let _ = std::fs::remove_file(bin);
    }
}

criterion_group!(benches, profiles);
criterion_main!(benches);
