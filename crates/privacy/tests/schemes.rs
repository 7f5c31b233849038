//! Every scheme: round trips, fresh pseudonyms, one uniform error for
//! anything that does not open, the RFC 5869 HKDF known answers, and
//! RSA-OAEP both ways with the OpenSSL command line.

use std::process::Command;

use privacy::aes::AesId;
use privacy::ecies::{Ecies, EciesKey};
use privacy::kdf::hkdf;
use privacy::rsa::{RsaOaep, RsaOaepKey};
use privacy::{Encoding, Error, IdCipher, IdDecipher};
use rsa_variants::{PrivateKey, Variant};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The properties every scheme must have.
fn check(enc: &dyn IdCipher, dec: &dyn IdDecipher, other: &dyn IdDecipher) {
    for id in ["alice", "bob.smith+voip", "ü-nicode", ""] {
        let a = enc.encrypt(id).unwrap();
        let b = enc.encrypt(id).unwrap();
        assert_ne!(a, b, "{:?}: a fresh pseudonym every time", enc.scheme());
        assert_eq!(dec.decrypt(&a).unwrap(), id);
        for e in [Encoding::Hex, Encoding::Base32] {
            let text = enc.pseudonym(id, e, 1_000).unwrap();
            assert!(
                text.bytes().all(|c| c.is_ascii_alphanumeric()),
                "URI-safe: {text}"
            );
            assert_eq!(dec.open(&text).unwrap(), id);
        }
        // Tampering anywhere, truncation, another key, another key id.
        for at in [3, a.len() / 2, a.len() - 1] {
            let mut t = a.clone();
            t[at] ^= 0x01;
            if let Ok(got) = dec.decrypt(&t) {
                assert_ne!(
                    got,
                    id,
                    "{:?}: a flipped byte at {at} must not give the ID back",
                    enc.scheme()
                );
            }
        }
        assert_eq!(dec.decrypt(&a[..a.len() - 1]), Err(Error::Undecryptable));
        assert_eq!(other.decrypt(&a), Err(Error::Undecryptable));
        let mut kid = a.clone();
        kid[2] ^= 1;
        assert_eq!(dec.decrypt(&kid), Err(Error::Undecryptable));
    }
    assert_eq!(dec.open("not-a-pseudonym"), Err(Error::Undecryptable));
    assert!(matches!(
        enc.pseudonym("alice", Encoding::Hex, 10),
        Err(Error::TooLong { limit: 10, .. })
    ));
}

#[test]
fn rfc5869_hkdf_sha256_test_cases_1_and_3() {
    let mut okm = [0u8; 42];
    hkdf(
        &hex("000102030405060708090a0b0c"),
        &[0x0b; 22],
        &hex("f0f1f2f3f4f5f6f7f8f9"),
        &mut okm,
    );
    assert_eq!(
        okm.to_vec(),
        hex("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
    );
    hkdf(&[], &[0x0b; 22], &[], &mut okm);
    assert_eq!(
        okm.to_vec(),
        hex("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8")
    );
}

#[test]
fn rsa_oaep_in_every_variant() {
    let keys: Vec<PrivateKey> = [
        Variant::Standard,
        Variant::Crt,
        Variant::MultiPrime { primes: 3 },
    ]
    .into_iter()
    .map(|v| PrivateKey::generate(v, 2048).unwrap())
    .collect();
    let other = RsaOaepKey::new(PrivateKey::generate(Variant::Crt, 2048).unwrap(), 7);
    for key in keys {
        let enc = RsaOaep::new(key.public_key().unwrap(), 7);
        let dec = RsaOaepKey::new(key, 7);
        check(&enc, &dec, &other);
        let long = "x".repeat(300);
        assert!(matches!(
            enc.encrypt(&long),
            Err(Error::IdTooLong { max: 190, .. })
        ));
    }
}

#[test]
fn rsa_oaep_interoperates_with_the_openssl_command_line() {
    let dir = std::env::temp_dir().join(format!("privacy-rsa-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = PrivateKey::generate(Variant::Crt, 2048).unwrap();
    let key_pem = dir.join("key.pem");
    std::fs::write(&key_pem, key.to_pkcs8_pem().unwrap()).unwrap();
    let oaep = [
        "-pkeyopt",
        "rsa_padding_mode:oaep",
        "-pkeyopt",
        "rsa_oaep_md:sha256",
        "-pkeyopt",
        "rsa_mgf1_md:sha256",
    ];
    // Ours, opened by OpenSSL.
    let raw = RsaOaep::new(key.public_key().unwrap(), 1)
        .encrypt("carol")
        .unwrap();
    let ct = dir.join("ct.bin");
    std::fs::write(&ct, &raw[3..]).unwrap();
    let out = Command::new("openssl")
        .args(["pkeyutl", "-decrypt", "-inkey"])
        .arg(&key_pem)
        .args(oaep)
        .arg("-in")
        .arg(&ct)
        .output()
        .expect("openssl runs (./setup.sh)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"carol");
    // OpenSSL's, opened by us.
    let msg = dir.join("msg.txt");
    std::fs::write(&msg, "dave").unwrap();
    let out = Command::new("openssl")
        .args(["pkeyutl", "-encrypt", "-inkey"])
        .arg(&key_pem)
        .args(oaep)
        .arg("-in")
        .arg(&msg)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let raw = [&[1u8, 1, 1][..], &out.stdout].concat();
    assert_eq!(RsaOaepKey::new(key, 1).decrypt(&raw).unwrap(), "dave");
    let _ = std::fs::remove_dir_all(&dir);
}

fn p256_pair() -> (Vec<u8>, Vec<u8>) {
    let group = openssl::ec::EcGroup::from_curve_name(openssl::nid::Nid::X9_62_PRIME256V1).unwrap();
    let key = openssl::ec::EcKey::generate(&group).unwrap();
    (
        key.private_key_to_pem().unwrap(),
        key.public_key_to_pem().unwrap(),
    )
}

#[test]
fn ecies_p256() {
    let (private, public) = p256_pair();
    let (other_private, _) = p256_pair();
    let enc = Ecies::from_pem(&public, 3).unwrap();
    let dec = EciesKey::from_pem(&private, 3).unwrap();
    let other = EciesKey::from_pem(&other_private, 3).unwrap();
    check(&enc, &dec, &other);
    // Deterministic given the ephemeral key: 3 + 65 + |id| + 16 bytes.
    let group = openssl::ec::EcGroup::from_curve_name(openssl::nid::Nid::X9_62_PRIME256V1).unwrap();
    let e = openssl::ec::EcKey::generate(&group).unwrap();
    let a = enc.encrypt_with("alice", &e).unwrap();
    assert_eq!(a, enc.encrypt_with("alice", &e).unwrap());
    assert_eq!(a.len(), 3 + 65 + 5 + 16);
    // A point not on the curve is refused like any other garbage.
    let mut bad = a.clone();
    bad[3 + 10] ^= 0x55;
    assert_eq!(dec.decrypt(&bad), Err(Error::Undecryptable));
    assert!(Ecies::from_pem(
        b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
        1
    )
    .is_err());
}

#[test]
fn aes_gcm_and_the_published_cbc_mode() {
    let ha1 = "5f4dcc3b5aa765d61d8327deb882cf99";
    for cbc in [false, true] {
        let phone = AesId::new(ha1, "sipsec", 9, cbc).unwrap();
        let proxy = AesId::new(ha1, "sipsec", 9, cbc).unwrap();
        let other = AesId::new(ha1, "elsewhere", 9, cbc).unwrap();
        if cbc {
            // CBC has no integrity: only the general properties below.
            for id in ["alice", "a-much-longer-user-name-0123456789"] {
                let a = phone.encrypt(id).unwrap();
                assert_ne!(a, phone.encrypt(id).unwrap());
                assert_eq!((a.len() - 3 - 16) % 16, 0, "ISO 10126 pads to whole blocks");
                assert_eq!(proxy.decrypt(&a).unwrap(), id);
                assert_ne!(other.decrypt(&a).ok().as_deref(), Some(id));
            }
        } else {
            check(&phone, &proxy, &other);
            // The key and nonce fix the output.
            let a = phone.seal_with_nonce("alice", [7; 12]).unwrap();
            assert_eq!(a, proxy.seal_with_nonce("alice", [7; 12]).unwrap());
            assert_eq!(a.len(), 3 + 12 + 5 + 16);
        }
    }
    // The key id is part of the derivation.
    let a = AesId::new(ha1, "sipsec", 1, false)
        .unwrap()
        .encrypt("alice")
        .unwrap();
    let mut as_two = a.clone();
    as_two[2] = 2;
    assert_eq!(
        AesId::new(ha1, "sipsec", 2, false)
            .unwrap()
            .decrypt(&as_two),
        Err(Error::Undecryptable)
    );
}

/// RFC 9180 §A.1.1: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM,
/// base mode, the first encryption (sequence 0).
#[test]
fn rfc9180_a1_1_hpke_base_mode() {
    use privacy::hpke::{key_schedule, open_base, public_of, seal_base};
    let sk_e: [u8; 32] = hex("52c4a758a802cd8b936eceea314432798d5baf2d7e9235dc084ab1b9cfa2f736")
        .try_into()
        .unwrap();
    let sk_r: [u8; 32] = hex("4612c550263fc8ad58375df3f557aac531d26850903e55a9f23f21d8534e8ac8")
        .try_into()
        .unwrap();
    let pk_r = hex("3948cfe0ad1ddb695d780e59077195da6c56506b027329794ab02bca80815c4d");
    assert_eq!(public_of(&sk_r).unwrap().to_vec(), pk_r);
    let info = hex("4f6465206f6e2061204772656369616e2055726e");
    let (key, nonce) = key_schedule(
        &hex("fe0e18c9f024ce43799ae393c7e8fe8fce9d218875e8227b0187c04e7d2ea1fc"),
        &info,
    );
    assert_eq!(key.to_vec(), hex("4531685d41d65f03dc48f6b8302c05b0"));
    assert_eq!(nonce.to_vec(), hex("56d890e5accaaf011cff4b7d"));
    let aad = hex("436f756e742d30");
    let pt = hex("4265617574792069732074727574682c20747275746820626561757479");
    let (enc, ct) = seal_base(&pk_r, &sk_e, &info, &aad, &pt).unwrap();
    assert_eq!(
        enc,
        hex("37fda3567bdbd628e88668c3c8d7e97d1d1253b6d4ea6d44c150f741f1bf4431")
    );
    assert_eq!(ct, hex("f938558b5d72f1a23810b4be2ab4f84331acc02fc97babc53a52ae8218a355a96d8770ac83d07bea87e13c512a"));
    assert_eq!(open_base(&sk_r, &enc, &info, &aad, &ct).unwrap(), pt);
}

#[test]
fn hpke_x25519() {
    use privacy::hpke::{public_of, Hpke, HpkeKey};
    let mut sk = [0u8; 32];
    openssl::rand::rand_bytes(&mut sk).unwrap();
    let mut other = [0u8; 32];
    openssl::rand::rand_bytes(&mut other).unwrap();
    let enc = Hpke::new(public_of(&sk).unwrap(), 4);
    check(
        &enc,
        &HpkeKey::new(sk, 4).unwrap(),
        &HpkeKey::new(other, 4).unwrap(),
    );
    // Keys as PEM files, the way proxies and phones get them.
    let key = openssl::pkey::PKey::generate_x25519().unwrap();
    let enc = Hpke::from_pem(&key.public_key_to_pem().unwrap(), 2).unwrap();
    let dec = HpkeKey::from_pem(&key.private_key_to_pem_pkcs8().unwrap(), 2).unwrap();
    assert_eq!(dec.decrypt(&enc.encrypt("erin").unwrap()).unwrap(), "erin");
    let (_, p256_public) = p256_pair();
    assert!(
        Hpke::from_pem(&p256_public, 2).is_err(),
        "an EC key is not X25519"
    );
}
