//! `sipsec keygen`: RSA keys in every variant, EC keys, and certificates
//! (self-signed, a CA, or issued by one) for SIP over TLS.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Subcommand, ValueEnum};
use openssl::asn1::{Asn1Integer, Asn1Time};
use openssl::bn::{BigNum, MsbOption};
use openssl::hash::MessageDigest;
use openssl::pkey::{Id, PKey, Private};
use openssl::x509::extension::{
    AuthorityKeyIdentifier, BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName,
    SubjectKeyIdentifier,
};
use openssl::x509::{X509Builder, X509NameBuilder, X509};
use rsa_variants::{PrivateKey, Variant};

#[derive(Subcommand)]
pub enum KeygenCommand {
    /// Generate an RSA key: standard (n, e, d only), CRT, or multi-prime.
    Rsa {
        /// standard, crt or multiprime.
        #[arg(long, default_value = "crt")]
        variant: String,
        /// Modulus size.
        #[arg(long, default_value_t = 2048)]
        bits: u32,
        /// Primes of a multi-prime key (3 from 1024 bits, 4 from 4096, 5 from 8192) [default: 3].
        #[arg(long)]
        primes: Option<u8>,
        /// Write PKCS#8 (`PRIVATE KEY`) instead of PKCS#1 (`RSA PRIVATE KEY`).
        #[arg(long)]
        pkcs8: bool,
        /// Output file (written with mode 0600).
        #[arg(short, long)]
        out: PathBuf,
    },
    /// Generate an elliptic-curve key (ECDSA P-256/P-384 or Ed25519), PKCS#8.
    Ec {
        /// Curve.
        #[arg(long, value_enum, default_value = "p256")]
        curve: Curve,
        /// Output file (written with mode 0600).
        #[arg(short, long)]
        out: PathBuf,
    },
    /// Make an X.509 certificate for a key: self-signed, a CA, or issued by a CA.
    Cert {
        /// The certificate's key (any variant or type `sipsec keygen` makes).
        #[arg(long)]
        key: PathBuf,
        /// Common name, e.g. sip.example.test.
        #[arg(long)]
        cn: String,
        /// subjectAltName entries (DNS names or IP addresses) [default: the CN].
        #[arg(long)]
        san: Vec<String>,
        /// Validity in days.
        #[arg(long, default_value_t = 365)]
        days: u32,
        /// Make a CA certificate (can issue others; not for a server).
        #[arg(long)]
        ca: bool,
        /// Issuer certificate [default: self-signed].
        #[arg(long, requires = "issuer_key")]
        issuer_cert: Option<PathBuf>,
        /// Issuer private key.
        #[arg(long, requires = "issuer_cert")]
        issuer_key: Option<PathBuf>,
        /// Output file.
        #[arg(short, long)]
        out: PathBuf,
    },
    /// Generate an ML-KEM-768 key (FIPS 203): a proxy's post-quantum
    /// key for hybrid PrivaSIP-3 enrollments (`[privacy] pq_key`).
    Mlkem {
        /// Output file (written with mode 0600).
        #[arg(short, long)]
        out: PathBuf,
    },
    /// Write the public half of a private key (SubjectPublicKeyInfo PEM,
    /// or for an ML-KEM key its encapsulation key), e.g. a proxy's
    /// PrivaSIP key for its phones.
    Public {
        /// The private key.
        #[arg(long)]
        key: PathBuf,
        /// Output file.
        #[arg(short, long)]
        out: PathBuf,
    },
    /// Make an STIR/SHAKEN certificate authority (EC P-256): the trust
    /// anchor verifiers configure.
    StiCa(crate::keygen_sti::StiCa),
    /// Make an STIR/SHAKEN signer's certificate under an STI-CA, with a
    /// TNAuthList (RFC 8226) of a service provider code or numbers.
    StiCert(crate::keygen_sti::StiCert),
    /// Say what a private key file holds (type, size, RSA variant).
    Show {
        /// PEM or DER private key.
        file: PathBuf,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Curve {
    P256,
    P384,
    Ed25519,
    /// Key agreement only (HPKE for PrivaSIP).
    X25519,
}

pub fn run(cmd: KeygenCommand) -> ExitCode {
    let result = match cmd {
        KeygenCommand::Rsa {
            variant,
            bits,
            primes,
            pkcs8,
            out,
        } => rsa(&variant, bits, primes, pkcs8, &out),
        KeygenCommand::Ec { curve, out } => ec(curve, &out),
        KeygenCommand::Cert {
            key,
            cn,
            san,
            days,
            ca,
            issuer_cert,
            issuer_key,
            out,
        } => cert(&CertRequest {
            key: &key,
            cn: &cn,
            san: &san,
            days,
            ca,
            issuer: issuer_cert.as_deref().zip(issuer_key.as_deref()),
            out: &out,
        }),
        KeygenCommand::Mlkem { out } => mlkem(&out),
        KeygenCommand::Public { key, out } => public(&key, &out),
        KeygenCommand::StiCa(req) => crate::keygen_sti::ca(&req),
        KeygenCommand::StiCert(req) => crate::keygen_sti::sti_cert(&req),
        KeygenCommand::Show { file } => show(&file),
    };
    match result {
        Ok(msg) => {
            println!("{msg}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

pub(crate) fn write_secret(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(bytes)
        .map_err(|e| format!("{}: {e}", path.display()))
}

pub(crate) fn rsa(
    variant: &str,
    bits: u32,
    primes: Option<u8>,
    pkcs8: bool,
    out: &Path,
) -> Result<String, String> {
    let variant = Variant::parse(variant, primes).map_err(|e| e.to_string())?;
    let key = PrivateKey::generate(variant, bits).map_err(|e| e.to_string())?;
    let pem = if pkcs8 {
        key.to_pkcs8_pem()
    } else {
        key.to_pkcs1_pem()
    }
    .map_err(|e| e.to_string())?;
    write_secret(out, &pem)?;
    Ok(format!(
        "wrote {}: RSA-{bits} {}",
        out.display(),
        key.variant()
    ))
}

fn mlkem(out: &Path) -> Result<String, String> {
    let (_, pem) = privacy::pq::PqKey::generate().map_err(|e| e.to_string())?;
    write_secret(out, &pem)?;
    Ok(format!(
        "wrote {}: ML-KEM-768 (post-quantum KEM)",
        out.display()
    ))
}

fn public(key: &Path, out: &Path) -> Result<String, String> {
    let bytes = std::fs::read(key).map_err(|e| format!("{}: {e}", key.display()))?;
    if privacy::pq::is_private_pem(&bytes) {
        let k =
            privacy::pq::PqKey::from_pem(&bytes).map_err(|e| format!("{}: {e}", key.display()))?;
        let pem = k.public_pem().map_err(|e| e.to_string())?;
        std::fs::write(out, pem).map_err(|e| format!("{}: {e}", out.display()))?;
        return Ok(format!(
            "wrote {}: the public half of ML-KEM-768",
            out.display()
        ));
    }
    let pkey = load_key(key)?;
    let pem = pkey.public_key_to_pem().map_err(|e| e.to_string())?;
    std::fs::write(out, pem).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(format!(
        "wrote {}: the public half of {}",
        out.display(),
        describe(&pkey)
    ))
}

pub(crate) fn ec(curve: Curve, out: &Path) -> Result<String, String> {
    let key = match curve {
        Curve::P256 | Curve::P384 => {
            let nid = match curve {
                Curve::P256 => openssl::nid::Nid::X9_62_PRIME256V1,
                _ => openssl::nid::Nid::SECP384R1,
            };
            let group = openssl::ec::EcGroup::from_curve_name(nid).map_err(|e| e.to_string())?;
            let ec = openssl::ec::EcKey::generate(&group).map_err(|e| e.to_string())?;
            PKey::from_ec_key(ec)
        }
        Curve::Ed25519 => PKey::generate_ed25519(),
        Curve::X25519 => PKey::generate_x25519(),
    }
    .map_err(|e| e.to_string())?;
    let pem = key.private_key_to_pem_pkcs8().map_err(|e| e.to_string())?;
    write_secret(out, &pem)?;
    Ok(format!("wrote {}: {}", out.display(), describe(&key)))
}

/// Reads any private key: RSA of every variant (through rsa-variants, so
/// standard keys keep their zero factors meaning "none"), EC, Ed25519.
fn load_key(path: &Path) -> Result<PKey<Private>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    match PrivateKey::from_pem(&bytes).or_else(|_| PrivateKey::from_der(&bytes)) {
        Ok(k) => Ok(k.pkey().to_owned()),
        Err(_) => PKey::private_key_from_pem(&bytes)
            .or_else(|_| PKey::private_key_from_der(&bytes))
            .map_err(|_| format!("{}: no readable private key (PEM or DER)", path.display())),
    }
}

fn describe(key: &PKey<Private>) -> String {
    match key.id() {
        Id::RSA => match PrivateKey::from_pkey(key.clone()) {
            Ok(k) => format!("RSA-{} {}", k.bits(), k.variant()),
            Err(e) => format!("RSA-{} ({e})", key.bits()),
        },
        Id::EC => format!("ECDSA-{}", key.bits()),
        Id::ED25519 => "Ed25519".into(),
        Id::X25519 => "X25519".into(),
        other => format!("{other:?}"),
    }
}

fn show(path: &Path) -> Result<String, String> {
    let key = load_key(path)?;
    Ok(format!("{}: {}", path.display(), describe(&key)))
}

pub(crate) struct CertRequest<'a> {
    pub(crate) key: &'a Path,
    pub(crate) cn: &'a str,
    pub(crate) san: &'a [String],
    pub(crate) days: u32,
    pub(crate) ca: bool,
    pub(crate) issuer: Option<(&'a Path, &'a Path)>,
    pub(crate) out: &'a Path,
}

fn digest_for(key: &PKey<Private>) -> MessageDigest {
    match key.id() {
        Id::ED25519 | Id::ED448 => MessageDigest::null(),
        _ => MessageDigest::sha256(),
    }
}

pub(crate) fn cert(req: &CertRequest<'_>) -> Result<String, String> {
    let e = |e: openssl::error::ErrorStack| e.to_string();
    let key = load_key(req.key)?;
    let public = PKey::public_key_from_der(&key.public_key_to_der().map_err(e)?).map_err(e)?;
    let (issuer_cert, issuer_key) = match req.issuer {
        Some((c, k)) => {
            let pem = std::fs::read(c).map_err(|err| format!("{}: {err}", c.display()))?;
            let cert =
                X509::from_pem(&pem).map_err(|_| format!("{}: no PEM certificate", c.display()))?;
            (Some(cert), load_key(k)?)
        }
        None => (None, key.clone()),
    };
    let mut name = X509NameBuilder::new().map_err(e)?;
    name.append_entry_by_text("CN", req.cn).map_err(e)?;
    let name = name.build();
    let mut b = X509Builder::new().map_err(e)?;
    b.set_version(2).map_err(e)?;
    let mut serial = BigNum::new().map_err(e)?;
    serial.rand(127, MsbOption::MAYBE_ZERO, false).map_err(e)?;
    let serial = Asn1Integer::from_bn(&serial).map_err(e)?;
    b.set_serial_number(&serial).map_err(e)?;
    b.set_subject_name(&name).map_err(e)?;
    match &issuer_cert {
        Some(c) => b.set_issuer_name(c.subject_name()).map_err(e)?,
        None => b.set_issuer_name(&name).map_err(e)?,
    }
    // An hour of slack for clocks that disagree a little.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let not_before = Asn1Time::from_unix(now - 3600).map_err(e)?;
    let not_after = Asn1Time::days_from_now(req.days).map_err(e)?;
    b.set_not_before(&not_before).map_err(e)?;
    b.set_not_after(&not_after).map_err(e)?;
    b.set_pubkey(&public).map_err(e)?;
    let mut bc = BasicConstraints::new();
    bc.critical();
    if req.ca {
        bc.ca();
    }
    b.append_extension(bc.build().map_err(e)?).map_err(e)?;
    let mut ku = KeyUsage::new();
    ku.critical();
    if req.ca {
        ku.key_cert_sign().crl_sign();
    } else {
        ku.digital_signature().key_encipherment();
    }
    b.append_extension(ku.build().map_err(e)?).map_err(e)?;
    if !req.ca {
        b.append_extension(
            ExtendedKeyUsage::new()
                .server_auth()
                .client_auth()
                .build()
                .map_err(e)?,
        )
        .map_err(e)?;
    }
    let sans: Vec<&str> = if req.san.is_empty() && !req.ca {
        vec![req.cn]
    } else {
        req.san.iter().map(String::as_str).collect()
    };
    let mut alt = SubjectAlternativeName::new();
    for s in &sans {
        if s.parse::<std::net::IpAddr>().is_ok() {
            alt.ip(s);
        } else {
            alt.dns(s);
        }
    }
    let ctx = b.x509v3_context(issuer_cert.as_deref(), None);
    let alt = (!sans.is_empty())
        .then(|| alt.build(&ctx))
        .transpose()
        .map_err(e)?;
    let ski = SubjectKeyIdentifier::new().build(&ctx).map_err(e)?;
    if let Some(alt) = alt {
        b.append_extension(alt).map_err(e)?;
    }
    b.append_extension(ski).map_err(e)?;
    if issuer_cert.is_some() {
        let ctx = b.x509v3_context(issuer_cert.as_deref(), None);
        let aki = AuthorityKeyIdentifier::new()
            .keyid(false)
            .build(&ctx)
            .map_err(e)?;
        b.append_extension(aki).map_err(e)?;
    }
    b.sign(&issuer_key, digest_for(&issuer_key)).map_err(e)?;
    let pem = b.build().to_pem().map_err(e)?;
    std::fs::write(req.out, pem).map_err(|err| format!("{}: {err}", req.out.display()))?;
    Ok(format!(
        "wrote {}: {} certificate for CN={} ({}), key {}, SAN {}",
        req.out.display(),
        if req.ca { "CA" } else { "server/client" },
        req.cn,
        if issuer_cert.is_some() {
            "issued by the given CA"
        } else {
            "self-signed"
        },
        describe(&key),
        sans.join(", ")
    ))
}
