//! `sipsec keygen sti-ca` and `sipsec keygen sti-cert`: STIR/SHAKEN
//! certificates (EC P-256): an STI-CA, and signers' certificates under it
//! with the TNAuthList (RFC 8226) naming a service provider code or the
//! numbers they may sign for.

use std::path::{Path, PathBuf};

use clap::Args;
use openssl::x509::X509;
use stir::cert::{self, Issue};
use stir::TnEntry;

/// `sipsec keygen sti-ca`.
#[derive(Args)]
pub struct StiCa {
    /// Common name.
    #[arg(long, default_value = "sipsec STI-CA")]
    cn: String,
    /// Validity in days.
    #[arg(long, default_value_t = 3650)]
    days: u32,
    /// The CA's private key, written (mode 0600).
    #[arg(long)]
    key_out: PathBuf,
    /// The CA certificate, written: the verifiers' trust anchor.
    #[arg(short, long)]
    out: PathBuf,
}

/// `sipsec keygen sti-cert`.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("authority").required(true).multiple(true).args(["spc", "tn", "range"])))]
pub struct StiCert {
    /// Service provider code the certificate is for (SHAKEN's usual form).
    #[arg(long)]
    spc: Option<String>,
    /// A telephone number it may sign for (repeatable), e.g. +12155551212.
    #[arg(long)]
    tn: Vec<String>,
    /// Numbers it may sign for as START:COUNT, e.g. 12155550100:100.
    #[arg(long)]
    range: Vec<String>,
    /// Common name [default: "SHAKEN " and the code or first number].
    #[arg(long)]
    cn: Option<String>,
    /// Validity in days.
    #[arg(long, default_value_t = 365)]
    days: u32,
    /// The STI-CA's certificate.
    #[arg(long)]
    issuer_cert: PathBuf,
    /// The STI-CA's private key.
    #[arg(long)]
    issuer_key: PathBuf,
    /// The signer's private key, written (mode 0600): `[stir] key`.
    #[arg(long)]
    key_out: PathBuf,
    /// The certificate, written: what `[stir] x5u` serves.
    #[arg(short, long)]
    out: PathBuf,
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn write_pair(
    key: &openssl::pkey::PKey<openssl::pkey::Private>,
    key_out: &Path,
    cert: &X509,
    out: &Path,
) -> Result<(), String> {
    let pem = key.private_key_to_pem_pkcs8().map_err(|e| e.to_string())?;
    crate::keygen::write_secret(key_out, &pem)?;
    let pem = cert.to_pem().map_err(|e| e.to_string())?;
    std::fs::write(out, pem).map_err(|e| format!("{}: {e}", out.display()))
}

/// Makes an STI-CA.
pub fn ca(req: &StiCa) -> Result<String, String> {
    let key = cert::p256_key()?;
    let c = cert::issue(
        &key,
        &Issue {
            cn: &req.cn,
            // An hour of slack for clocks that disagree a little.
            not_before: now() - 3600,
            days: req.days,
            ca: true,
            entries: &[],
            issuer: None,
        },
    )?;
    write_pair(&key, &req.key_out, &c, &req.out)?;
    Ok(format!(
        "wrote {} (STI-CA certificate, CN={}) and {} (its P-256 key)",
        req.out.display(),
        req.cn,
        req.key_out.display()
    ))
}

/// The TNAuthList entries the flags name.
fn entries(req: &StiCert) -> Result<Vec<TnEntry>, String> {
    let mut entries: Vec<TnEntry> = req.spc.iter().map(|s| TnEntry::Spc(s.clone())).collect();
    for n in &req.tn {
        let tn =
            stir::tn::normalise(n).ok_or_else(|| format!("--tn {n}: not a telephone number"))?;
        entries.push(TnEntry::One(tn));
    }
    for r in &req.range {
        let bad = || format!("--range {r}: expected START:COUNT, e.g. 12155550100:100");
        let (start, count) = r.split_once(':').ok_or_else(bad)?;
        let start = stir::tn::normalise(start).ok_or_else(bad)?;
        let count: u64 = count.parse().map_err(|_| bad())?;
        if count < 2 {
            return Err(format!(
                "--range {r}: a range holds at least 2 numbers (use --tn)"
            ));
        }
        entries.push(TnEntry::Range { start, count });
    }
    Ok(entries)
}

/// Makes a signer's certificate under an STI-CA.
pub fn sti_cert(req: &StiCert) -> Result<String, String> {
    let entries = entries(req)?;
    let issuer = X509::from_pem(&read(&req.issuer_cert)?)
        .map_err(|_| format!("{}: no PEM certificate", req.issuer_cert.display()))?;
    let issuer_key = openssl::pkey::PKey::private_key_from_pem(&read(&req.issuer_key)?)
        .map_err(|_| format!("{}: no PEM private key", req.issuer_key.display()))?;
    let cn = req.cn.clone().unwrap_or_else(|| match &entries[0] {
        TnEntry::Spc(s) | TnEntry::One(s) | TnEntry::Range { start: s, .. } => {
            format!("SHAKEN {s}")
        }
    });
    let key = cert::p256_key()?;
    let c = cert::issue(
        &key,
        &Issue {
            cn: &cn,
            not_before: now() - 3600,
            days: req.days,
            ca: false,
            entries: &entries,
            issuer: Some((&issuer, &issuer_key)),
        },
    )?;
    write_pair(&key, &req.key_out, &c, &req.out)?;
    Ok(format!(
        "wrote {} (STI certificate, CN={cn}, TNAuthList {entries:?}) and {} (its P-256 key)",
        req.out.display(),
        req.key_out.display()
    ))
}
