use super::*;

const NOW: i64 = 1_790_000_000;

fn new_ca() -> (PKey<Private>, X509) {
    let key = p256_key().unwrap();
    let issue_ca = Issue {
        cn: "Test STI-CA",
        not_before: NOW - 86_400,
        days: 3650,
        ca: true,
        entries: &[],
        issuer: None,
    };
    let cert = issue(&key, &issue_ca).unwrap();
    (key, cert)
}

fn signer(ca: &(PKey<Private>, X509), entries: &[TnEntry], not_before: i64, days: u32) -> Vec<u8> {
    let key = p256_key().unwrap();
    let req = Issue {
        cn: "SHAKEN 1234",
        not_before,
        days,
        ca: false,
        entries,
        issuer: Some((&ca.1, &ca.0)),
    };
    issue(&key, &req).unwrap().to_pem().unwrap()
}

fn trust(ca: &X509) -> Trust {
    Trust::from_pem(&ca.to_pem().unwrap(), &[]).unwrap()
}

#[test]
fn tn_auth_list_matches_the_shaken_spc_encoding() {
    // The form ATIS-1000080 gives for SPC "709J": explicit tags.
    let der = tn_auth_list_der(&[TnEntry::Spc("709J".into())]);
    assert_eq!(
        der,
        [0x30, 0x08, 0xa0, 0x06, 0x16, 0x04, b'7', b'0', b'9', b'J']
    );
    assert_eq!(
        parse_tn_auth_list(&der).unwrap(),
        [TnEntry::Spc("709J".into())]
    );
    // Implicitly tagged, as some issuers write it.
    let implicit = [0x30, 0x06, 0x80, 0x04, b'7', b'0', b'9', b'J'];
    assert_eq!(
        parse_tn_auth_list(&implicit).unwrap(),
        [TnEntry::Spc("709J".into())]
    );
}

#[test]
fn entries_round_trip_and_cover_their_numbers() {
    let entries = [
        TnEntry::One("12155551212".into()),
        TnEntry::Range {
            start: "12155550100".into(),
            count: 100,
        },
    ];
    let parsed = parse_tn_auth_list(&tn_auth_list_der(&entries)).unwrap();
    assert_eq!(parsed, entries);
    assert!(parsed[0].covers("12155551212") && !parsed[0].covers("12155551213"));
    assert!(parsed[1].covers("12155550100") && parsed[1].covers("12155550199"));
    assert!(!parsed[1].covers("12155550200") && !parsed[1].covers("2155550150"));
}

#[test]
fn malformed_lists_are_errors() {
    for bad in [
        &[][..],
        &[0x30, 0x00],
        &[0x30, 0x02, 0xa5, 0x00],
        &[0x30, 0x04, 0xa0, 0x02, 0x02, 0x00],
        &[0x30, 0x03, 0xa0, 0x06, 0x16],
    ] {
        assert!(parse_tn_auth_list(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn a_signer_under_the_anchor_validates_with_its_numbers() {
    let ca = new_ca();
    let pem = signer(&ca, &[TnEntry::One("12155551212".into())], NOW - 60, 30);
    let s = validate(&pem, &trust(&ca.1), NOW).unwrap();
    assert!(s.covers("12155551212") && !s.covers("12155551213"));
    assert_eq!(s.not_after, NOW - 60 + 30 * 86_400);
    assert!(s.subject.contains("SHAKEN 1234"));
}

#[test]
fn expired_untrusted_revoked_and_foreign_certificates_are_refused() {
    let ca = new_ca();
    let spc = [TnEntry::Spc("1234".into())];
    let expired = signer(&ca, &spc, NOW - 40 * 86_400, 30);
    assert!(matches!(
        validate(&expired, &trust(&ca.1), NOW),
        Err(CertError::Expired(_))
    ));
    let other = new_ca();
    let pem = signer(&other, &spc, NOW - 60, 30);
    assert!(matches!(
        validate(&pem, &trust(&ca.1), NOW),
        Err(CertError::Untrusted(_))
    ));
    let no_list = signer(&ca, &[], NOW - 60, 30);
    assert_eq!(
        validate(&no_list, &trust(&ca.1), NOW).unwrap_err(),
        CertError::NotSti("no TNAuthList")
    );
    assert!(matches!(
        validate(b"junk", &trust(&ca.1), NOW),
        Err(CertError::Malformed(_))
    ));
    // Revoked: a CRL from the CA listing the signer's serial.
    let pem = signer(&ca, &spc, NOW - 60, 30);
    let leaf = X509::from_pem(&pem).unwrap();
    let crl = revoke(&ca, &leaf);
    let t = Trust::from_pem(&ca.1.to_pem().unwrap(), &[crl]).unwrap();
    assert_eq!(validate(&pem, &t, NOW).unwrap_err(), CertError::Revoked);
    let fresh = signer(&ca, &spc, NOW - 60, 30);
    assert!(validate(&fresh, &t, NOW).is_ok(), "only the listed one");
}

/// A CRL from the CA listing `leaf`, made by the `openssl ca` command.
fn revoke(ca: &(PKey<Private>, X509), leaf: &X509) -> Vec<u8> {
    let dir = std::env::temp_dir().join(format!("stir-crl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let put = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).unwrap();
    put("ca.key", &ca.0.private_key_to_pem_pkcs8().unwrap());
    put("ca.pem", &ca.1.to_pem().unwrap());
    put("leaf.pem", &leaf.to_pem().unwrap());
    put("index.txt", b"");
    put("crlnumber", b"01\n");
    put(
        "ca.cnf",
        b"[ca]\ndefault_ca=d\n[d]\ndatabase=index.txt\ncrlnumber=crlnumber\n\
          default_md=sha256\ndefault_crl_days=30\n",
    );
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let common = ["-config", "ca.cnf", "-keyfile", "ca.key", "-cert", "ca.pem"];
    run(&[&["ca", "-revoke", "leaf.pem"][..], &common].concat());
    run(&[&["ca", "-gencrl", "-out", "crl.pem"][..], &common].concat());
    let crl = std::fs::read(dir.join("crl.pem")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    crl
}
