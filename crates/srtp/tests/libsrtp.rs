//! Differential tests against libsrtp (the build bundled with the
//! `pylibsrtp` wheel that setup.sh installs), in both directions, for the
//! profiles it supports among ours: 100,000 packets each, across a
//! sequence-number rollover, with CSRCs and header extensions, plus
//! replay and tamper rejection on both sides.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use srtp::{Context, Error, Profile};

const PACKETS: u32 = 100_000;

/// A small deterministic generator, so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn packets(seed: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed);
    (0..PACKETS)
        .map(|i| {
            let r = rng.next();
            let csrcs = (r % 3) as u8;
            let ext = r % 5 == 0;
            let mut p = vec![
                0x80 | csrcs | if ext { 0x10 } else { 0 },
                (r >> 8) as u8 & 0x7f,
            ];
            // Starts near the top of the sequence space: the rollover
            // counter must move to 1 a few hundred packets in.
            p.extend_from_slice(&((65_200 + i) as u16).to_be_bytes());
            p.extend_from_slice(&(i * 160).to_be_bytes());
            p.extend_from_slice(&0x5eed_cafe_u32.to_be_bytes());
            for c in 0..csrcs {
                p.extend_from_slice(&u32::from(c).to_be_bytes());
            }
            if ext {
                p.extend_from_slice(&[0xbe, 0xde, 0, 1, 0x10, 0xaa, 0, 0]);
            }
            let len = 1 + (r >> 16) as usize % 240;
            p.extend((0..len).map(|k| (r >> (k % 56)) as u8));
            p
        })
        .collect()
}

/// Runs libsrtp over `frames`; per frame `Some(result)` or `None` when it
/// refused the packet.
fn libsrtp(mode: &str, profile: Profile, key: &[u8], frames: &[Vec<u8>]) -> Vec<Option<Vec<u8>>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../interop/srtp/libsrtp_peer.py");
    let key_hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let mut child = Command::new("python3")
        .arg(&script)
        .args([mode, profile.name(), &key_hex])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut input = Vec::new();
    for f in frames {
        input.extend_from_slice(&(f.len() as u32).to_be_bytes());
        input.extend_from_slice(f);
    }
    let mut stdin = child.stdin.take().expect("piped");
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("libsrtp peer runs");
    writer.join().expect("writer").expect("frames written");
    assert!(
        out.status.success(),
        "libsrtp peer failed (run ./setup.sh for pylibsrtp): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut results = Vec::new();
    let mut at = 0;
    let o = &out.stdout;
    while at < o.len() {
        let ok = o[at] == 0;
        let n = u32::from_be_bytes([o[at + 1], o[at + 2], o[at + 3], o[at + 4]]) as usize;
        results.push(ok.then(|| o[at + 5..at + 5 + n].to_vec()));
        at += 5 + n;
    }
    assert_eq!(results.len(), frames.len());
    results
}

fn key(profile: Profile) -> (Vec<u8>, Vec<u8>) {
    let k: Vec<u8> = (0..profile.key_len() as u8)
        .map(|b| b.wrapping_mul(37))
        .collect();
    let s: Vec<u8> = (0..14u8).map(|b| b.wrapping_mul(91)).collect();
    (k, s)
}

fn both(profile: Profile) -> Vec<u8> {
    let (k, s) = key(profile);
    [k, s].concat()
}

fn we_protect_libsrtp_unprotects(profile: Profile) {
    let (k, s) = key(profile);
    let plain = packets(1);
    let mut tx = Context::new(profile, &k, &s).unwrap();
    let mut frames: Vec<Vec<u8>> = plain
        .iter()
        .map(|p| {
            let mut p = p.clone();
            tx.protect(&mut p).unwrap();
            p
        })
        .collect();
    // Then a replay and a forgery, which libsrtp must refuse.
    let replay = frames[PACKETS as usize - 1].clone();
    let mut forged = frames[PACKETS as usize - 2].clone();
    let mid = forged.len() / 2;
    forged[mid] ^= 0x40;
    frames.push(replay);
    frames.push(forged);
    let results = libsrtp("unprotect", profile, &both(profile), &frames);
    for (i, p) in plain.iter().enumerate() {
        assert_eq!(results[i].as_ref(), Some(p), "{profile:?} packet {i}");
    }
    assert_eq!(results[PACKETS as usize], None, "libsrtp took a replay");
    assert_eq!(
        results[PACKETS as usize + 1],
        None,
        "libsrtp took a forgery"
    );
}

fn libsrtp_protects_we_unprotect(profile: Profile) {
    let (k, s) = key(profile);
    let plain = packets(2);
    let protected = libsrtp("protect", profile, &both(profile), &plain);
    let mut rx = Context::new(profile, &k, &s).unwrap();
    for (i, (p, srtp)) in plain.iter().zip(&protected).enumerate() {
        let mut srtp = srtp.clone().expect("libsrtp protected it");
        if i % 1000 == 7 {
            let mut forged = srtp.clone();
            let at = forged.len() - 1;
            forged[at] ^= 1;
            assert_eq!(
                rx.unprotect(&mut forged),
                Err(Error::AuthFailed),
                "forged {i}"
            );
        }
        let copy = srtp.clone();
        rx.unprotect(&mut srtp)
            .unwrap_or_else(|e| panic!("{profile:?} packet {i}: {e}"));
        assert_eq!(&srtp, p, "{profile:?} packet {i}");
        if i % 1000 == 9 {
            let mut again = copy;
            assert!(
                matches!(rx.unprotect(&mut again), Err(Error::Replay(_))),
                "replay {i}"
            );
        }
    }
}

#[test]
fn aes_cm_128_sha1_80_against_libsrtp() {
    we_protect_libsrtp_unprotects(Profile::Aes128CmSha1_80);
    libsrtp_protects_we_unprotect(Profile::Aes128CmSha1_80);
}

#[test]
fn aes_cm_128_sha1_32_against_libsrtp() {
    we_protect_libsrtp_unprotects(Profile::Aes128CmSha1_32);
    libsrtp_protects_we_unprotect(Profile::Aes128CmSha1_32);
}
