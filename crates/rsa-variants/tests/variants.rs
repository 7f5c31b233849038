//! Every variant computes the same RSA function, round-trips through
//! PEM/DER, and interoperates with OpenSSL's command line.

use std::path::{Path, PathBuf};
use std::process::Command;

use rsa_variants::{HashAlg, PrivateKey, PublicKey, Variant};

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rsa-variants-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn openssl(args: &[&str]) -> Vec<u8> {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl CLI (setup.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn generated_keys_report_their_variant_and_round_trip() {
    for (variant, bits) in [
        (Variant::Standard, 1024),
        (Variant::Crt, 1024),
        (Variant::MultiPrime { primes: 3 }, 1024),
        (Variant::MultiPrime { primes: 4 }, 4096),
    ] {
        let key = PrivateKey::generate(variant, bits).unwrap();
        assert_eq!(key.variant(), variant);
        assert_eq!(key.bits(), bits);
        for encoded in [key.to_pkcs1_pem().unwrap(), key.to_pkcs8_pem().unwrap()] {
            let back = PrivateKey::from_pem(&encoded).unwrap();
            assert_eq!(back.variant(), variant, "{variant:?} via PEM");
        }
        for encoded in [key.to_pkcs1_der().unwrap(), key.to_pkcs8_der().unwrap()] {
            let back = PrivateKey::from_der(&encoded).unwrap();
            assert_eq!(back.variant(), variant, "{variant:?} via DER");
            assert_eq!(back.to_pkcs1_der().unwrap(), key.to_pkcs1_der().unwrap());
        }
        let public = key.public_key().unwrap();
        let ct = public.encrypt_oaep(HashAlg::Sha256, b"alice").unwrap();
        assert_eq!(key.decrypt_oaep(HashAlg::Sha256, &ct).unwrap(), b"alice");
        let sig = key.sign_pss(HashAlg::Sha256, b"m").unwrap();
        assert!(public.verify_pss(HashAlg::Sha256, b"m", &sig));
        assert!(!public.verify_pss(HashAlg::Sha256, b"n", &sig));
    }
}

#[test]
fn standard_and_crt_forms_of_one_key_compute_the_same_function() {
    let crt = PrivateKey::generate(Variant::Crt, 2048).unwrap();
    let standard = crt.to_standard().unwrap();
    assert_eq!(standard.variant(), Variant::Standard);
    let public = crt.public_key().unwrap();
    for hash in [HashAlg::Sha1, HashAlg::Sha256, HashAlg::Sha512] {
        for len in [0, 1, 32, public.max_oaep_message(hash)] {
            let msg: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let ct = public.encrypt_oaep(hash, &msg).unwrap();
            assert_eq!(crt.decrypt_oaep(hash, &ct).unwrap(), msg);
            assert_eq!(standard.decrypt_oaep(hash, &ct).unwrap(), msg);
        }
        // PKCS#1 v1.5 signatures are deterministic: identical bytes.
        assert_eq!(
            crt.sign_pkcs1(hash, b"INVITE").unwrap(),
            standard.sign_pkcs1(hash, b"INVITE").unwrap()
        );
    }
    for seed in 1u8..=20 {
        let mut m = vec![seed; crt.size()];
        m[0] = 0x01;
        assert_eq!(
            crt.raw_private(&m).unwrap(),
            standard.raw_private(&m).unwrap()
        );
        let back = public.raw_public(&crt.raw_private(&m).unwrap()).unwrap();
        assert_eq!(back, m);
    }
}

#[test]
fn bad_input_gets_clear_errors() {
    let key = PrivateKey::generate(Variant::Crt, 1024).unwrap();
    let public = key.public_key().unwrap();
    let too_long = vec![0u8; public.max_oaep_message(HashAlg::Sha256) + 1];
    let e = public.encrypt_oaep(HashAlg::Sha256, &too_long).unwrap_err();
    assert!(e.to_string().contains("at most 62"), "{e}");
    let ct = public.encrypt_oaep(HashAlg::Sha256, b"x").unwrap();
    let mut tampered = ct.clone();
    tampered[5] ^= 1;
    for bad in [&tampered[..], &ct[1..], b"" as &[u8]] {
        assert_eq!(
            key.decrypt_oaep(HashAlg::Sha256, bad)
                .unwrap_err()
                .to_string(),
            "decryption failed"
        );
    }
    // The wrong hash is the same uniform failure.
    assert!(key.decrypt_oaep(HashAlg::Sha1, &ct).is_err());
    assert!(key
        .raw_private(&[1, 2, 3])
        .unwrap_err()
        .to_string()
        .contains("modulus length"));
    assert!(key.raw_private(&vec![0xff; key.size()]).is_err());
    assert!(PrivateKey::from_pem(b"-----BEGIN X-----\n-----END X-----\n").is_err());
    assert!(PrivateKey::from_der(b"\x30\x03\x02\x01\x00").is_err());
    let ec = openssl::ec::EcKey::generate(
        &openssl::ec::EcGroup::from_curve_name(openssl::nid::Nid::X9_62_PRIME256V1).unwrap(),
    )
    .unwrap();
    let ec_pem = openssl::pkey::PKey::from_ec_key(ec)
        .unwrap()
        .private_key_to_pem_pkcs8()
        .unwrap();
    assert!(PrivateKey::from_pem(&ec_pem)
        .unwrap_err()
        .to_string()
        .contains("not an RSA key"));
    let e = PrivateKey::generate(Variant::MultiPrime { primes: 4 }, 2048).unwrap_err();
    assert!(e.to_string().contains("3 to 3"), "{e}");
    assert!(Variant::parse("crt", Some(3)).is_err());
    assert!(Variant::parse("rsa", None).is_err());
    assert_eq!(
        Variant::parse("multiprime", Some(5)).unwrap(),
        Variant::MultiPrime { primes: 5 }
    );
}

#[test]
fn openssl_cli_reads_our_keys_and_decrypts_our_ciphertexts() {
    for (variant, bits, expect) in [
        (Variant::Crt, 1024, "prime2:"),
        (Variant::MultiPrime { primes: 3 }, 1024, "prime3:"),
        (Variant::Standard, 1024, "privateExponent:"),
    ] {
        let key = PrivateKey::generate(variant, bits).unwrap();
        let file = tmp(&format!("ours-{}.pem", variant.name()));
        std::fs::write(&file, key.to_pkcs8_pem().unwrap()).unwrap();
        let text =
            String::from_utf8(openssl(&["pkey", "-in", path(&file), "-text", "-noout"])).unwrap();
        assert!(text.contains(expect), "{variant:?}: {text}");
        if variant == Variant::Standard {
            // OpenSSL reads the zero factors but cannot compute with
            // them; the public half is still usable.
            continue;
        }
        let ct = key
            .public_key()
            .unwrap()
            .encrypt_oaep(HashAlg::Sha256, b"bob")
            .unwrap();
        let ct_file = tmp(&format!("ct-{}", variant.name()));
        std::fs::write(&ct_file, ct).unwrap();
        let plain = openssl(&[
            "pkeyutl",
            "-decrypt",
            "-inkey",
            path(&file),
            "-in",
            path(&ct_file),
            "-pkeyopt",
            "rsa_padding_mode:oaep",
            "-pkeyopt",
            "rsa_oaep_md:sha256",
            "-pkeyopt",
            "rsa_mgf1_md:sha256",
        ]);
        assert_eq!(plain, b"bob");
    }
}

#[test]
fn we_read_openssl_keys_and_verify_its_signatures() {
    for (primes, bits) in [(2, 2048), (3, 2048), (4, 4096)] {
        let file = tmp(&format!("theirs-{primes}.pem"));
        let primes_opt = format!("rsa_keygen_primes:{primes}");
        let bits_opt = format!("rsa_keygen_bits:{bits}");
        openssl(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            &bits_opt,
            "-pkeyopt",
            &primes_opt,
            "-out",
            path(&file),
        ]);
        let key = PrivateKey::from_pem(&std::fs::read(&file).unwrap()).unwrap();
        let want = if primes == 2 {
            Variant::Crt
        } else {
            Variant::MultiPrime { primes }
        };
        assert_eq!(key.variant(), want);
        let msg = tmp("msg");
        std::fs::write(&msg, b"REGISTER sip:example.test SIP/2.0").unwrap();
        let sig = openssl(&[
            "dgst",
            "-sha256",
            "-sign",
            path(&file),
            "-sigopt",
            "rsa_padding_mode:pss",
            "-sigopt",
            "rsa_pss_saltlen:digest",
            path(&msg),
        ]);
        let public = key.public_key().unwrap();
        assert!(public.verify_pss(HashAlg::Sha256, b"REGISTER sip:example.test SIP/2.0", &sig));
        let pub_file = tmp(&format!("theirs-{primes}.pub"));
        openssl(&[
            "pkey",
            "-in",
            path(&file),
            "-pubout",
            "-out",
            path(&pub_file),
        ]);
        let their_public = PublicKey::from_pem(&std::fs::read(&pub_file).unwrap()).unwrap();
        assert_eq!(their_public.to_der().unwrap(), public.to_der().unwrap());
        let ct = their_public.encrypt_oaep(HashAlg::Sha1, b"carol").unwrap();
        assert_eq!(key.decrypt_oaep(HashAlg::Sha1, &ct).unwrap(), b"carol");
        // Same key, stripped to the standard variant, still decrypts.
        assert_eq!(
            key.to_standard()
                .unwrap()
                .decrypt_oaep(HashAlg::Sha1, &ct)
                .unwrap(),
            b"carol"
        );
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// OAEP-SHA-256 known answer: the first key and examples 1–2 of the
/// SHA-2 OAEP vectors derived from NIST's SHA-1 vectors (published with
/// pyca/cryptography, `oaep-custom/oaep-sha256-sha256.txt`), decrypted by
/// the CRT key and by its standard form.
#[test]
fn oaep_sha256_known_answers() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/oaep-sha256-kat.txt"),
    )
    .unwrap();
    let field = |name: &str| -> Vec<u8> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} = ")))
            .unwrap_or_else(|| panic!("{name} missing"));
        hex(line.trim())
    };
    let bn = |name: &str| openssl::bn::BigNum::from_slice(&field(name)).unwrap();
    let rsa = openssl::rsa::Rsa::from_private_components(
        bn("n"),
        bn("e"),
        bn("d"),
        bn("p"),
        bn("q"),
        bn("dp"),
        bn("dq"),
        bn("qinv"),
    )
    .unwrap();
    let pkcs1 = rsa.private_key_to_der().unwrap();
    let crt = PrivateKey::from_der(&pkcs1).unwrap();
    assert_eq!(crt.variant(), Variant::Crt);
    let standard = crt.to_standard().unwrap();
    for i in 1..=2 {
        let ct = field(&format!("ct{i}"));
        let msg = field(&format!("msg{i}"));
        assert_eq!(crt.decrypt_oaep(HashAlg::Sha256, &ct).unwrap(), msg);
        assert_eq!(standard.decrypt_oaep(HashAlg::Sha256, &ct).unwrap(), msg);
    }
}
