//! Known answers and round trips.

use srtp::kdf::{self, Label};
use srtp::{Context, Error, Profile};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const MASTER_KEY: &str = "E1F97A0D3E018BE0D64FA32C06DE4139";
const MASTER_SALT: &str = "0EC675AD498AFEEBB6960B3AABE6";

/// RFC 3711 Appendix B.3: key derivation with kdr = 0, index 0.
#[test]
fn rfc3711_b3_key_derivation() {
    let (key, salt) = (hex(MASTER_KEY), hex(MASTER_SALT));
    let mut cipher_key = [0u8; 16];
    kdf::derive(&key, &salt, Label::RtpEncryption, 0, &mut cipher_key).unwrap();
    assert_eq!(cipher_key.to_vec(), hex("C61E7A93744F39EE10734AFE3FF7A087"));
    let mut cipher_salt = [0u8; 14];
    kdf::derive(&key, &salt, Label::RtpSalt, 0, &mut cipher_salt).unwrap();
    assert_eq!(cipher_salt.to_vec(), hex("30CBBC08863D8C85D49DB34A9AE1"));
    let mut auth_key = [0u8; 16];
    kdf::derive(&key, &salt, Label::RtpAuthentication, 0, &mut auth_key).unwrap();
    assert_eq!(auth_key.to_vec(), hex("CEBE321F6FF7716B6FD4AB49AF256A15"));
}

/// libsrtp's reference packet for AES_CM_128_HMAC_SHA1_80 (its
/// `srtp_driver` self-test): the RFC 3711 B.3 master key and salt, SSRC
/// 0xcafebabe, sequence 0x1234, 16 bytes of 0xab.
#[test]
fn libsrtp_reference_packet() {
    let plain = hex("800f1234decafbadcafebabe abababababababababababababababab");
    let want =
        hex("800f1234decafbadcafebabe 4e55dc4ce79978d88ca4d215949d2402 b78d6acc99ea179b8dbb");
    let mut tx = Context::new(
        Profile::Aes128CmSha1_80,
        &hex(MASTER_KEY),
        &hex(MASTER_SALT),
    )
    .unwrap();
    let mut packet = plain.clone();
    tx.protect(&mut packet).unwrap();
    assert_eq!(packet, want);
    let mut rx = Context::new(
        Profile::Aes128CmSha1_80,
        &hex(MASTER_KEY),
        &hex(MASTER_SALT),
    )
    .unwrap();
    rx.unprotect(&mut packet).unwrap();
    assert_eq!(packet, plain);
}

fn rtp(seq: u16, ssrc: u32, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x80, 0x00];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&(u32::from(seq) * 160).to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

#[test]
fn every_profile_round_trips_and_rejects_tampering_and_replay() {
    for profile in Profile::ALL {
        let key: Vec<u8> = (0..profile.key_len() as u8).collect();
        let salt: Vec<u8> = (100..114).collect();
        let mut tx = Context::new(profile, &key, &salt).unwrap();
        let mut rx = Context::new(profile, &key, &salt).unwrap();
        for seq in [1u16, 2, 3] {
            let plain = rtp(seq, 0x1234_5678, &[seq as u8; 160]);
            let mut p = plain.clone();
            tx.protect(&mut p).unwrap();
            assert_eq!(p.len(), plain.len() + profile.tag_len());
            assert_ne!(&p[12..172], &plain[12..]);
            let replay = p.clone();
            let mut bad = p.clone();
            bad[20] ^= 1;
            assert_eq!(
                rx.unprotect(&mut bad),
                Err(Error::AuthFailed),
                "{profile:?}"
            );
            rx.unprotect(&mut p).unwrap();
            assert_eq!(p, plain);
            let mut again = replay;
            assert!(matches!(rx.unprotect(&mut again), Err(Error::Replay(_))));
        }
    }
}

#[test]
fn rollover_counter_follows_sequence_wrap() {
    let key = [7u8; 16];
    let salt = [9u8; 14];
    let mut tx = Context::new(Profile::Aes128CmSha1_32, &key, &salt).unwrap();
    let mut rx = Context::new(Profile::Aes128CmSha1_32, &key, &salt).unwrap();
    // 70,000 packets: the sequence wraps once; one packet in ten is lost
    // and every fifth arrives late by one.
    let mut sent = Vec::new();
    for i in 0..70_000u32 {
        let seq = (65_000 + i) as u16;
        let mut p = rtp(seq, 42, &i.to_be_bytes());
        tx.protect(&mut p).unwrap();
        if i % 10 != 3 {
            sent.push((p, i));
        }
    }
    for pair in sent.chunks_mut(5) {
        if pair.len() > 1 {
            pair.swap(0, 1);
        }
    }
    for (mut p, i) in sent {
        rx.unprotect(&mut p)
            .unwrap_or_else(|e| panic!("packet {i}: {e}"));
        assert_eq!(&p[12..], &i.to_be_bytes());
    }
}

#[test]
fn bad_input_is_refused_with_a_reason() {
    let key = [1u8; 16];
    let salt = [2u8; 14];
    let mut c = Context::new(Profile::Aes128CmSha1_80, &key, &salt).unwrap();
    for (packet, why) in [
        (vec![0x80, 0, 0], "12-byte"),
        (vec![0x40; 40], "version"),
        (vec![0x8f; 20], "header longer"),
    ] {
        let mut p = packet;
        let e = c.protect(&mut p).unwrap_err().to_string();
        assert!(e.contains(why), "{e}");
    }
    let mut short = vec![0x80; 15];
    assert!(matches!(c.unprotect(&mut short), Err(Error::Malformed(_))));
    assert!(Context::new(Profile::Aes256CmSha1_80, &key, &salt).is_err());
    assert!(Context::new(Profile::Aes128CmSha1_80, &key, &salt[..12]).is_err());
    assert!(Context::with_options(Profile::Aes128CmSha1_80, &key, &salt, 3, 64).is_err());
    assert!(Context::with_options(Profile::Aes128CmSha1_80, &key, &salt, 0, 16).is_err());
}

#[test]
fn suite_names_in_both_rfc6188_spellings() {
    assert_eq!(
        Profile::parse("AES_CM_192_HMAC_SHA1_80"),
        Some(Profile::Aes192CmSha1_80)
    );
    assert_eq!(
        Profile::parse("AES_192_CM_HMAC_SHA1_32"),
        Some(Profile::Aes192CmSha1_32)
    );
    assert_eq!(
        Profile::parse("AES_CM_256_HMAC_SHA1_80"),
        Some(Profile::Aes256CmSha1_80)
    );
    assert_eq!(
        Profile::parse("AES_CM_128_HMAC_SHA1_80"),
        Some(Profile::Aes128CmSha1_80)
    );
    assert_eq!(Profile::parse("F8_128_HMAC_SHA1_80"), None);
}

#[test]
fn key_derivation_rate_rekeys_and_both_sides_agree() {
    let key = [3u8; 16];
    let salt = [4u8; 14];
    let mut tx = Context::with_options(Profile::Aes128CmSha1_80, &key, &salt, 16, 64).unwrap();
    let mut rx = Context::with_options(Profile::Aes128CmSha1_80, &key, &salt, 16, 64).unwrap();
    let mut plain_ct = Context::new(Profile::Aes128CmSha1_80, &key, &salt).unwrap();
    for seq in 0..40u16 {
        let plain = rtp(seq, 5, b"kdr");
        let (mut a, mut b) = (plain.clone(), plain.clone());
        tx.protect(&mut a).unwrap();
        plain_ct.protect(&mut b).unwrap();
        // Epoch 0 (indices 0..15) matches kdr = 0; later epochs differ.
        assert_eq!(a == b, seq < 16, "seq {seq}");
        rx.unprotect(&mut a).unwrap();
        assert_eq!(a, plain);
    }
}

/// The fuzz target's property over random bytes and over mutations of
/// real SRTP packets (which reach the authentication check).
#[test]
fn unprotect_property_holds_for_random_and_mutated_packets() {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..5_000 {
        let len = (next() % 80) as usize;
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        srtp::fuzzing::unprotect(&data);
    }
    let key = [0x11u8; 16];
    let mut tx = Context::new(Profile::Aes128CmSha1_80, &key, &[0x22; 14]).unwrap();
    for seq in 0..2_000u16 {
        let mut p = rtp(seq, 9, &[seq as u8; 40]);
        tx.protect(&mut p).unwrap();
        let at = (next() as usize) % p.len();
        p[at] ^= 1 << (next() % 8);
        // Profile 0 is AES_CM_128_HMAC_SHA1_80.
        srtp::fuzzing::unprotect(&[&[0u8][..], &p].concat());
    }
}
