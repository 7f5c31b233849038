//! Differential tests against libsrtp 2.7 with its OpenSSL backend (the
//! build bundled in the `pylibsrtp` wheel that setup.sh installs, driven
//! through the C peer in interop/srtp), in both directions, for every
//! profile: 100,000 SRTP packets across a sequence-number rollover with
//! CSRCs and header extensions, SRTCP, and both again with an MKI, plus
//! replay and tamper rejection on both sides.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use srtp::{Context, Error, MasterKey, Options, Profile};

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
            let ext = r.is_multiple_of(5);
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

/// The C peer over libsrtp, built once per test run.
fn peer() -> &'static (PathBuf, String) {
    static PEER: OnceLock<(PathBuf, String)> = OnceLock::new();
    PEER.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../interop/srtp");
        let bin = Path::new(env!("CARGO_TARGET_TMPDIR")).join("libsrtp_peer");
        let out = Command::new("bash")
            .arg(root.join("build-peer.sh"))
            .arg(&bin)
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "building the libsrtp peer failed (run ./setup.sh for libsrtp2-dev and pylibsrtp): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lib = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (bin, lib)
    })
}

/// Runs libsrtp over `frames`; per frame `Some(result)` or `None` when it
/// refused the packet. `mode`: protect, unprotect, protect_rtcp or
/// unprotect_rtcp.
fn libsrtp(
    mode: &str,
    profile: Profile,
    key: &[u8],
    mki: &[u8],
    frames: &[Vec<u8>],
) -> Vec<Option<Vec<u8>>> {
    let (bin, lib) = peer();
    let mut child = Command::new(bin)
        .args([lib.as_str(), mode, profile.name(), &hex(key), &hex(mki)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("libsrtp peer starts");
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
        "libsrtp peer failed: {}",
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

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn key(profile: Profile) -> (Vec<u8>, Vec<u8>) {
    let k: Vec<u8> = (0..profile.key_len() as u8)
        .map(|b| b.wrapping_mul(37))
        .collect();
    let s: Vec<u8> = (0..profile.salt_len() as u8)
        .map(|b| b.wrapping_mul(91))
        .collect();
    (k, s)
}

fn context(profile: Profile, mki: &[u8]) -> Context {
    let (k, s) = key(profile);
    let master = MasterKey {
        key: &k,
        salt: &s,
        mki,
    };
    // libsrtp 2.7 derives AES-192 keys off RFC 6188 (its issue #763).
    let options = Options {
        libsrtp_aes192_kdf: true,
        ..Options::default()
    };
    Context::with_keys(profile, &[master], options).unwrap()
}

/// RTCP sender reports of varying length from one SSRC.
fn rtcp_packets(seed: u64, count: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed);
    (0..count)
        .map(|_| {
            let r = rng.next();
            let words = 6 + (r % 20) as u16;
            let mut p = vec![0x80, 200];
            p.extend_from_slice(&words.to_be_bytes());
            p.extend_from_slice(&0x0bad_cafe_u32.to_be_bytes());
            p.extend((0..4 * words).map(|k| (r >> (k % 56)) as u8));
            p
        })
        .collect()
}

#[derive(Clone, Copy)]
enum Kind {
    Rtp,
    Rtcp,
}

fn protect(ctx: &mut Context, kind: Kind, p: &mut Vec<u8>) -> Result<(), Error> {
    match kind {
        Kind::Rtp => ctx.protect(p),
        Kind::Rtcp => ctx.protect_rtcp(p),
    }
}

fn unprotect(ctx: &mut Context, kind: Kind, p: &mut Vec<u8>) -> Result<(), Error> {
    match kind {
        Kind::Rtp => ctx.unprotect(p),
        Kind::Rtcp => ctx.unprotect_rtcp(p),
    }
}

fn plain(kind: Kind, seed: u64, count: usize) -> Vec<Vec<u8>> {
    match kind {
        Kind::Rtp => packets(seed)[..count].to_vec(),
        Kind::Rtcp => rtcp_packets(seed, count),
    }
}

fn mode(kind: Kind, m: &str) -> String {
    match kind {
        Kind::Rtp => m.to_string(),
        Kind::Rtcp => format!("{m}_rtcp"),
    }
}

fn we_protect_libsrtp_unprotects(profile: Profile, kind: Kind, mki: &[u8], count: usize) {
    let (k, s) = key(profile);
    let plain = plain(kind, 1, count);
    let mut tx = context(profile, mki);
    let mut frames: Vec<Vec<u8>> = plain
        .iter()
        .map(|p| {
            let mut p = p.clone();
            protect(&mut tx, kind, &mut p).unwrap();
            p
        })
        .collect();
    // Then a replay and a forgery, which libsrtp must refuse.
    let replay = frames[count - 1].clone();
    let mut forged = frames[count - 2].clone();
    let mid = forged.len() / 2;
    forged[mid] ^= 0x40;
    frames.push(replay);
    frames.push(forged);
    let results = libsrtp(
        &mode(kind, "unprotect"),
        profile,
        &[k, s].concat(),
        mki,
        &frames,
    );
    for (i, p) in plain.iter().enumerate() {
        assert_eq!(results[i].as_ref(), Some(p), "{profile} packet {i}");
    }
    assert_eq!(results[count], None, "libsrtp took a replay");
    assert_eq!(results[count + 1], None, "libsrtp took a forgery");
}

fn libsrtp_protects_we_unprotect(profile: Profile, kind: Kind, mki: &[u8], count: usize) {
    let (k, s) = key(profile);
    let plain = plain(kind, 2, count);
    let protected = libsrtp(
        &mode(kind, "protect"),
        profile,
        &[k, s].concat(),
        mki,
        &plain,
    );
    let mut rx = context(profile, mki);
    for (i, (p, srtp)) in plain.iter().zip(&protected).enumerate() {
        let mut srtp = srtp.clone().expect("libsrtp protected it");
        if i % 1000 == 7 {
            let mut forged = srtp.clone();
            forged[10] ^= 1;
            assert_eq!(
                unprotect(&mut rx, kind, &mut forged),
                Err(Error::AuthFailed),
                "forged {i}"
            );
        }
        let copy = srtp.clone();
        unprotect(&mut rx, kind, &mut srtp).unwrap_or_else(|e| panic!("{profile} packet {i}: {e}"));
        assert_eq!(&srtp, p, "{profile} packet {i}");
        if i % 1000 == 9 {
            let mut again = copy;
            assert!(
                matches!(unprotect(&mut rx, kind, &mut again), Err(Error::Replay(_))),
                "replay {i}"
            );
        }
    }
}

/// Both directions, SRTP (100,000 packets across a rollover) and SRTCP
/// (20,000), without MKI and with a 4-byte one (20,000 SRTP packets).
fn against_libsrtp(profile: Profile) {
    let n = PACKETS as usize;
    we_protect_libsrtp_unprotects(profile, Kind::Rtp, &[], n);
    libsrtp_protects_we_unprotect(profile, Kind::Rtp, &[], n);
    we_protect_libsrtp_unprotects(profile, Kind::Rtcp, &[], 20_000);
    libsrtp_protects_we_unprotect(profile, Kind::Rtcp, &[], 20_000);
    let mki = [0xde, 0xad, 0xbe, 0xef];
    we_protect_libsrtp_unprotects(profile, Kind::Rtp, &mki, 20_000);
    libsrtp_protects_we_unprotect(profile, Kind::Rtp, &mki, 20_000);
    we_protect_libsrtp_unprotects(profile, Kind::Rtcp, &mki, 5_000);
    libsrtp_protects_we_unprotect(profile, Kind::Rtcp, &mki, 5_000);
}

#[test]
fn aes_cm_128_sha1_80_against_libsrtp() {
    against_libsrtp(Profile::Aes128CmSha1_80);
}

#[test]
fn aes_cm_128_sha1_32_against_libsrtp() {
    against_libsrtp(Profile::Aes128CmSha1_32);
}

#[test]
fn aes_192_cm_sha1_80_against_libsrtp() {
    against_libsrtp(Profile::Aes192CmSha1_80);
}

#[test]
fn aes_192_cm_sha1_32_against_libsrtp() {
    against_libsrtp(Profile::Aes192CmSha1_32);
}

#[test]
fn aes_256_cm_sha1_80_against_libsrtp() {
    against_libsrtp(Profile::Aes256CmSha1_80);
}

#[test]
fn aes_256_cm_sha1_32_against_libsrtp() {
    against_libsrtp(Profile::Aes256CmSha1_32);
}

#[test]
fn aead_aes_128_gcm_against_libsrtp() {
    against_libsrtp(Profile::AeadAes128Gcm);
}

#[test]
fn aead_aes_256_gcm_against_libsrtp() {
    against_libsrtp(Profile::AeadAes256Gcm);
}
