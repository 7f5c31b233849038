//! Known answers and round trips.

use srtp::kdf::{self, Label};
use srtp::{Context, Error, MasterKey, Options, Profile, Step, StepTimes};

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

fn opts(kdr: u64, window: usize) -> Options {
    Options {
        kdr,
        window,
        ..Options::default()
    }
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
        let salt: Vec<u8> = (100..100 + profile.salt_len() as u8).collect();
        let mut tx = Context::new(profile, &key, &salt).unwrap();
        let mut rx = Context::new(profile, &key, &salt).unwrap();
        for seq in [1u16, 2, 3] {
            let plain = rtp(seq, 0x1234_5678, &[seq as u8; 160]);
            let mut p = plain.clone();
            tx.protect(&mut p).unwrap();
            assert_eq!(p.len(), plain.len() + profile.tag_len());
            assert_ne!(&p[12..172], &plain[12..]);
            let mut unknown = p.clone();
            unknown[8] ^= 1;
            assert!(
                rx.unprotect(&mut unknown).is_err(),
                "another SSRC's keystream"
            );
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
    assert!(Context::with_options(Profile::Aes128CmSha1_80, &key, &salt, opts(3, 64)).is_err());
    assert!(Context::with_options(Profile::Aes128CmSha1_80, &key, &salt, opts(0, 16)).is_err());
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
    let mut tx =
        Context::with_options(Profile::Aes128CmSha1_80, &key, &salt, opts(16, 64)).unwrap();
    let mut rx =
        Context::with_options(Profile::Aes128CmSha1_80, &key, &salt, opts(16, 64)).unwrap();
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

/// RFC 7714 §16.1.1 and §16.2.1: AEAD_AES_128_GCM and AEAD_AES_256_GCM
/// encryption of the "Gallia est omnis divisa in partes tres" RTP packet
/// (SSRC 0x5501a0b2, sequence 0xf17b, ROC 0) under the given session key
/// and salt, and its decryption back.
#[test]
fn rfc7714_16_srtp_gcm() {
    let plain =
        hex("8040f17b8041f8d35501a0b2 47616c6c696120657374206f6d6e69732064697669736120696e207061727465732074726573");
    for (profile, key, want) in [
        (
            Profile::AeadAes128Gcm,
            "000102030405060708090a0b0c0d0e0f",
            "8040f17b8041f8d35501a0b2 f24de3a3fb34de6cacba861c9d7e4bcabe633bd50d294e6f42a5f47a51c7d19b36de3adf8833 899d7f27beb16a9152cf765ee4390cce",
        ),
        (
            Profile::AeadAes256Gcm,
            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
            "8040f17b8041f8d35501a0b2 32b1de78a822fe12ef9f78fa332e33aab18012389a58e2f3b50b2a0276ffae0f1ba63799b87b7aa3db36dfffd6b0f9bb7878d7a76c13",
        ),
    ] {
        let ctx = || Context::with_session_keys(profile, &hex(key), &hex(GCM_SALT), &[]).unwrap();
        let mut p = plain.clone();
        ctx().protect(&mut p).unwrap();
        assert_eq!(p, hex(want), "{profile}");
        let mut rx = ctx();
        let mut bad = p.clone();
        bad[14] ^= 0x80;
        assert_eq!(rx.unprotect(&mut bad), Err(Error::AuthFailed));
        assert_eq!(bad, {
            let mut b = hex(want);
            b[14] ^= 0x80;
            b
        }, "a refused packet stays as it was");
        rx.unprotect(&mut p).unwrap();
        assert_eq!(p, plain);
    }
}

const GCM_SALT: &str = "517569642070726f2071756f";

/// The RTCP sender report RFC 7714 §17.1–17.3 protect (SSRC "Mars",
/// SRTCP index 0x5d4).
const RFC7714_RTCP: &str = "81c8000d4d6172734e5450314e545032525450200000042a0000e9304c756e61deadbeefdeadbeefdeadbeefdeadbeefdeadbeef";

/// RFC 7714 §17.1 (AES-128-GCM) and §17.2 (AES-256-GCM): SRTCP
/// encryption; §17.3: the E flag clear, authentication only.
#[test]
fn rfc7714_17_srtcp_gcm() {
    let plain = hex(RFC7714_RTCP);
    for (profile, key, want) in [
        (
            Profile::AeadAes128Gcm,
            "000102030405060708090a0b0c0d0e0f",
            "81c8000d4d61727363e94885dcdab67ca727d7662f6b7e997ff5c0f76c06f32dc676a5f1730d6fda4ce09b4686303ded0bb9275bc84aa45896cf4d2fc5abf87245d9eade800005d4",
        ),
        (
            Profile::AeadAes256Gcm,
            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
            "81c8000d4d617273d50ae4d1f5ce5d304ba297e47d470c282c3ece5dbffe0a50a2eaa5c1110555be8415f658c61de0476f1b6fad1d1eb30c4446839f57ff6f6cb26ac3be800005d4",
        ),
    ] {
        let ctx = || Context::with_session_keys(profile, &hex(key), &hex(GCM_SALT), &[]).unwrap();
        let mut rx = ctx();
        let mut p = hex(want);
        rx.unprotect_rtcp(&mut p).unwrap();
        assert_eq!(p, plain, "{profile} unprotect");
        let mut again = hex(want);
        assert!(matches!(rx.unprotect_rtcp(&mut again), Err(Error::Replay(0x5d4))));
        // The sender counts from index 0: wind it to 0x5d4.
        let mut tx = ctx();
        for _ in 0..0x5d4 {
            tx.protect_rtcp(&mut plain.clone()).unwrap();
        }
        let mut p = plain.clone();
        tx.protect_rtcp(&mut p).unwrap();
        assert_eq!(p, hex(want), "{profile} protect");
    }
    let tagged = hex(&format!(
        "{RFC7714_RTCP}841dd9683dd78ec92ae58790125f62b3000005d4"
    ));
    let mut rx = Context::with_session_keys(
        Profile::AeadAes128Gcm,
        &hex("000102030405060708090a0b0c0d0e0f"),
        &hex(GCM_SALT),
        &[],
    )
    .unwrap();
    let mut forged = tagged.clone();
    forged[20] ^= 1;
    assert_eq!(rx.unprotect_rtcp(&mut forged), Err(Error::AuthFailed));
    let mut p = tagged;
    rx.unprotect_rtcp(&mut p).unwrap();
    assert_eq!(p, plain, "§17.3: authenticated, not encrypted");
}

fn rtcp_report(ssrc: u32, extra: u8) -> Vec<u8> {
    let mut p = vec![0x80, 200, 0, 6];
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(&[extra; 20]);
    p
}

#[test]
fn srtcp_round_trips_and_rejects_tampering_and_replay_for_every_profile() {
    for profile in Profile::ALL {
        let key = vec![5u8; profile.key_len()];
        let salt = vec![6u8; profile.salt_len()];
        let mut tx = Context::new(profile, &key, &salt).unwrap();
        let mut rx = Context::new(profile, &key, &salt).unwrap();
        for i in 0..5u8 {
            let plain = rtcp_report(77, i);
            let mut p = plain.clone();
            tx.protect_rtcp(&mut p).unwrap();
            assert_eq!(p.len(), plain.len() + tx.rtcp_overhead(), "{profile}");
            assert_ne!(&p[8..28], &plain[8..], "{profile}: encrypted");
            let mut bad = p.clone();
            bad[9] ^= 4;
            assert_eq!(
                rx.unprotect_rtcp(&mut bad),
                Err(Error::AuthFailed),
                "{profile}"
            );
            let replay = p.clone();
            rx.unprotect_rtcp(&mut p).unwrap();
            assert_eq!(p, plain, "{profile}");
            let mut again = replay;
            assert!(matches!(
                rx.unprotect_rtcp(&mut again),
                Err(Error::Replay(_))
            ));
        }
        let mut short = vec![0x80; 12];
        assert!(matches!(
            rx.unprotect_rtcp(&mut short),
            Err(Error::Malformed(_))
        ));
        let mut v1 = vec![0x40; 8];
        assert!(matches!(tx.protect_rtcp(&mut v1), Err(Error::Malformed(_))));
        assert_eq!(v1, vec![0x40; 8], "a refused packet is left as it was");
    }
}

#[test]
fn mki_selects_the_master_key_on_both_sides() {
    for profile in [Profile::Aes192CmSha1_32, Profile::AeadAes256Gcm] {
        let (k1, k2) = (vec![1u8; profile.key_len()], vec![2u8; profile.key_len()]);
        let salt = vec![3u8; profile.salt_len()];
        let keys = [
            MasterKey {
                key: &k1,
                salt: &salt,
                mki: &[0, 1],
            },
            MasterKey {
                key: &k2,
                salt: &salt,
                mki: &[0, 2],
            },
        ];
        let mut tx = Context::with_keys(profile, &keys, Options::default()).unwrap();
        let mut rx = Context::with_keys(profile, &keys, Options::default()).unwrap();
        let mut only_second = Context::with_keys(profile, &keys[1..], Options::default()).unwrap();
        let mut a = rtp(1, 9, b"first key");
        tx.protect(&mut a).unwrap();
        assert_eq!(a.len(), 12 + 9 + profile.tag_len() + 2);
        tx.send_with(&[0, 2]).unwrap();
        let mut b = rtp(2, 9, b"second key");
        tx.protect(&mut b).unwrap();
        let mut c = rtcp_report(9, 1);
        tx.protect_rtcp(&mut c).unwrap();
        assert_eq!(
            only_second.unprotect(&mut a.clone()),
            Err(Error::UnknownMki)
        );
        rx.unprotect(&mut a).unwrap();
        assert_eq!(a, rtp(1, 9, b"first key"));
        let mut b2 = b.clone();
        only_second.unprotect(&mut b2).unwrap();
        rx.unprotect(&mut b).unwrap();
        assert_eq!(b, rtp(2, 9, b"second key"));
        rx.unprotect_rtcp(&mut c).unwrap();
        assert_eq!(c, rtcp_report(9, 1));
        assert_eq!(tx.send_with(&[9, 9]), Err(Error::UnknownMki));
    }
    let k = [1u8; 16];
    let s = [2u8; 14];
    let same = [MasterKey {
        key: &k,
        salt: &s,
        mki: &[1],
    }; 2];
    assert!(Context::with_keys(Profile::Aes128CmSha1_80, &same, Options::default()).is_err());
    let none = [MasterKey {
        key: &k,
        salt: &s,
        mki: &[],
    }; 2];
    assert!(Context::with_keys(Profile::Aes128CmSha1_80, &none, Options::default()).is_err());
}

#[test]
fn in_place_apis_work_on_caller_buffers() {
    let mut tx = Context::new(Profile::Aes128CmSha1_80, &[1; 16], &[2; 14]).unwrap();
    let mut rx = Context::new(Profile::Aes128CmSha1_80, &[1; 16], &[2; 14]).unwrap();
    let plain = rtp(7, 1, &[0xd5; 160]);
    let mut buf = [0u8; 200];
    buf[..plain.len()].copy_from_slice(&plain);
    let n = tx.protect_in_place(&mut buf, plain.len()).unwrap();
    assert_eq!(n, plain.len() + 10);
    let mut tight = [0u8; 175];
    tight[..plain.len()].copy_from_slice(&plain);
    assert_eq!(
        tx.protect_in_place(&mut tight, plain.len()),
        Err(Error::BufferTooSmall(182))
    );
    let m = rx.unprotect_in_place(&mut buf[..n]).unwrap();
    assert_eq!(&buf[..m], &plain[..]);
}

#[test]
fn the_timing_hook_sees_every_step() {
    for profile in [Profile::Aes128CmSha1_80, Profile::AeadAes128Gcm] {
        let key = vec![1u8; profile.key_len()];
        let salt = vec![2u8; profile.salt_len()];
        let mut tx = Context::new(profile, &key, &salt)
            .unwrap()
            .with_hook(StepTimes::default());
        let mut rx = Context::new(profile, &key, &salt)
            .unwrap()
            .with_hook(StepTimes::default());
        for seq in 0..100 {
            let mut p = rtp(seq, 3, &[0; 160]);
            tx.protect(&mut p).unwrap();
            rx.unprotect(&mut p).unwrap();
        }
        let (t, r) = (tx.hook(), rx.hook());
        assert_eq!(
            t.calls(Step::KeyDerivation),
            1,
            "derived once, at the first packet"
        );
        assert_eq!(t.calls(Step::Header), 100);
        assert_eq!(t.calls(Step::Encryption), 100);
        assert_eq!(r.calls(Step::Decryption), 100);
        assert_eq!(
            r.calls(Step::ReplayCheck),
            99,
            "the first packet opens the stream"
        );
        let auth = if profile.is_aead() { 0 } else { 100 };
        assert_eq!(t.calls(Step::Authentication), auth);
        assert_eq!(r.calls(Step::Authentication), auth);
        assert!(t.nanos(Step::Encryption) > 0);
    }
}

fn check_kdf(master_key: &str, master_salt: &str, enc: &str, salt: &str, auth: &str) {
    let (key, msalt) = (hex(master_key), hex(master_salt));
    let mut k = vec![0u8; key.len()];
    kdf::derive(&key, &msalt, Label::RtpEncryption, 0, &mut k).unwrap();
    assert_eq!(k, hex(enc));
    let mut s = [0u8; 14];
    kdf::derive(&key, &msalt, Label::RtpSalt, 0, &mut s).unwrap();
    assert_eq!(s.to_vec(), hex(salt));
    let mut a = [0u8; 20];
    kdf::derive(&key, &msalt, Label::RtpAuthentication, 0, &mut a).unwrap();
    assert_eq!(a.to_vec(), hex(auth));
}

/// RFC 6188 §7.2: the AES-256 key derivation.
#[test]
fn rfc6188_7_2_aes_256_key_derivation() {
    check_kdf(
        "f0f04914b513f2763a1b1fa130f10e2998f6f6e43e4309d1e622a0e332b9f1b6",
        "3b04803de51ee7c96423ab5b78d2",
        "5ba1064e30ec51613cad926c5a28ef731ec7fb397f70a960653caf06554cd8c4",
        "fa31791685ca444a9e07c6c64e93",
        "fd9c32d39ed5fbb5a9dc96b30818454d1313dc05",
    );
}

/// RFC 6188 §7.4: the AES-192 key derivation.
#[test]
fn rfc6188_7_4_aes_192_key_derivation() {
    check_kdf(
        "73edc66c4fa15776fb57f9505c17136550ffda71f3e8e5f1",
        "c8522f3acd4ce86d5add78edbb11",
        "31874736a8f1143870c26e4857d8a5b2c4a354407faadabb",
        "2372b82d639b6d8503a47adc0a6c",
        "355b10973cd95b9eacf4061c7e1a7151e7cfbfcb",
    );
}

/// The AES-CM keystream tables: RFC 3711 §B.2 (AES-128), RFC 6188 §7.1
/// (AES-256) and §7.3 (AES-192): session salt F0F1…FCFD, SSRC and index
/// zero, 65,282 blocks; the first and last three blocks are given. A
/// packet of zeros protected under those session keys carries the
/// keystream as its ciphertext.
#[test]
fn rfc3711_b2_and_rfc6188_7_1_7_3_aes_cm_keystreams() {
    let blocks = 65_282;
    for (profile, key, first, last) in [
        (
            Profile::Aes128CmSha1_80,
            "2B7E151628AED2A6ABF7158809CF4F3C",
            "E03EAD0935C95E80E166B16DD92B4EB4 D23513162B02D0F72A43A2FE4A5F97AB 41E95B3BB0A2E8DD477901E4FCA894C0",
            "EC8CDF7398607CB0F2D21675EA9EA1E4 362B7C3C6773516318A077D7FC5073AE 6A2CC3787889374FBEB4C81B17BA6C44",
        ),
        (
            Profile::Aes256CmSha1_80,
            "57f82fe3613fd170a85ec93c40b1f0922ec4cb0dc025b58272147cc438944a98",
            "92bdd28a93c3f52511c677d08b5515a4 9da71b2378a854f67050756ded165bac 63c4868b7096d88421b563b8c94c9a31",
            "cea518c90fd91ced9cbb18c078a54711 3dbc4814f4da5f00a08772b63c6a046d 6eb246913062a16891433e97dd01a57f",
        ),
        (
            Profile::Aes192CmSha1_80,
            "eab234764e517b2d3d160d587d8c86219740f65f99b6bcf7",
            "35096cba4610028dc1b57503804ce37c 5de986291dcce161d5165ec4568f5c9a 474a40c77894bc17180202272a4c264d",
            "d108d1a31a00bad6367ec23eb044b415 c8f57129fdeb970b59f917b257662d4c a5dab625811034e8cebdfeb6dc158dd3",
        ),
    ] {
        let mut tx = Context::with_session_keys(
            profile,
            &hex(key),
            &hex("F0F1F2F3F4F5F6F7F8F9FAFBFCFD"),
            &[0; 20],
        )
        .unwrap();
        let mut p = vec![0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        p.resize(12 + blocks * 16, 0);
        tx.protect(&mut p).unwrap();
        let stream = &p[12..12 + blocks * 16];
        assert_eq!(&stream[..48], &hex(first)[..], "{profile} first blocks");
        assert_eq!(&stream[stream.len() - 48..], &hex(last)[..], "{profile} last blocks");
    }
}
