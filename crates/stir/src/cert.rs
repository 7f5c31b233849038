//! STI certificates (RFC 8226): the TNAuthList extension naming the
//! numbers (or the service provider) a key may sign for, a signer's
//! chain checked against the verifier's trust anchors and revocation
//! lists at a given time, and issuing (an STI-CA and certificates under
//! it, EC P-256).

use openssl::asn1::{Asn1Integer, Asn1Object, Asn1OctetString, Asn1Time};
use openssl::bn::{BigNum, MsbOption};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private, Public};
use openssl::stack::Stack;
use openssl::x509::extension::{
    AuthorityKeyIdentifier, BasicConstraints, KeyUsage, SubjectKeyIdentifier,
};
use openssl::x509::store::X509StoreBuilder;
use openssl::x509::verify::X509VerifyParam;
use openssl::x509::{
    CrlStatus, X509Builder, X509Crl, X509Extension, X509NameBuilder, X509StoreContext, X509,
};

use crate::der::{self, Reader};

/// The TNAuthList extension's OID, 1.3.6.1.5.5.7.1.26 (RFC 8226 §9).
pub const TN_AUTH_LIST_OID: &str = "1.3.6.1.5.5.7.1.26";
const TN_AUTH_LIST_DER: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x1a];
/// The largest certificate chain read (bytes of PEM).
pub const MAX_CHAIN: usize = 64 * 1024;
/// Entries read from one TNAuthList.
const MAX_ENTRIES: usize = 256;

/// One TNAuthList entry (RFC 8226 §9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TnEntry {
    /// A service provider code (SHAKEN's usual form): the provider.
    Spc(String),
    /// `count` numbers from `start` (same length).
    Range {
        /// The first number.
        start: String,
        /// How many.
        count: u64,
    },
    /// One number.
    One(String),
}

impl TnEntry {
    /// Whether the entry authorises `tn` (digits): an SPC authorises the
    /// provider's numbers, which the certificate does not list (SHAKEN).
    pub fn covers(&self, tn: &str) -> bool {
        match self {
            Self::Spc(_) => true,
            Self::One(n) => n == tn,
            Self::Range { start, count } => {
                start.len() == tn.len()
                    && match (start.parse::<u64>(), tn.parse::<u64>()) {
                        (Ok(s), Ok(n)) => n >= s && n - s < *count,
                        _ => false,
                    }
            }
        }
    }
}

/// Why a signer's certificate is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    /// Not PEM certificates, or an unreadable extension.
    #[error("certificate malformed: {0}")]
    Malformed(String),
    /// Expired or not yet valid.
    #[error("certificate not valid now: {0}")]
    Expired(String),
    /// Does not chain to a trust anchor.
    #[error("certificate untrusted: {0}")]
    Untrusted(String),
    /// Listed in a revocation list.
    #[error("certificate revoked")]
    Revoked,
    /// Not an EC P-256 key, or no TNAuthList.
    #[error("not an STI certificate: {0}")]
    NotSti(&'static str),
}

/// The verifier's trust anchors (STI-CA certificates) and revocation
/// lists, as configured.
pub struct Trust {
    anchors: Vec<X509>,
    crls: Vec<X509Crl>,
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Trust({} anchors, {} CRLs)",
            self.anchors.len(),
            self.crls.len()
        )
    }
}

impl Trust {
    /// Anchors from PEM (one or more certificates) and CRLs from PEM
    /// files' contents.
    pub fn from_pem(anchors: &[u8], crls: &[Vec<u8>]) -> Result<Self, String> {
        let anchors = X509::stack_from_pem(anchors).map_err(|e| format!("trust anchors: {e}"))?;
        if anchors.is_empty() {
            return Err("trust anchors: no certificate".into());
        }
        let crls = crls
            .iter()
            .map(|c| X509Crl::from_pem(c).map_err(|e| format!("CRL: {e}")))
            .collect::<Result<_, _>>()?;
        Ok(Self { anchors, crls })
    }
}

/// A signer's certificate that passed every check: its key and what it
/// may sign for.
#[derive(Clone)]
pub struct Signer {
    /// The public key PASSporTs are verified with.
    pub key: EcKey<Public>,
    /// What the TNAuthList authorises.
    pub entries: Vec<TnEntry>,
    /// The subject, for logs.
    pub subject: String,
    /// When the certificate expires (seconds since 1970): a cached one is
    /// not believed past it.
    pub not_after: i64,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({}, {:?})", self.subject, self.entries)
    }
}

impl Signer {
    /// Whether the certificate names a service provider (an SPC): the
    /// provider may attest callers it does not name by number (PrivaSIP
    /// pseudonyms).
    pub fn is_provider(&self) -> bool {
        self.entries.iter().any(|e| matches!(e, TnEntry::Spc(_)))
    }

    /// Whether the certificate authorises the number `tn`.
    pub fn covers(&self, tn: &str) -> bool {
        self.entries.iter().any(|e| e.covers(tn))
    }
}

/// Checks the chain in `pem` (the signer's certificate first, then any
/// intermediates) against `trust` at `now` (seconds since 1970).
pub fn validate(pem: &[u8], trust: &Trust, now: i64) -> Result<Signer, CertError> {
    if pem.len() > MAX_CHAIN {
        return Err(CertError::Malformed("chain too large".into()));
    }
    let certs = X509::stack_from_pem(pem).map_err(|e| CertError::Malformed(e.to_string()))?;
    let (leaf, rest) = certs
        .split_first()
        .ok_or_else(|| CertError::Malformed("no certificate".into()))?;
    let ssl = |e: openssl::error::ErrorStack| CertError::Untrusted(e.to_string());
    let mut store = X509StoreBuilder::new().map_err(ssl)?;
    for a in &trust.anchors {
        store.add_cert(a.clone()).map_err(ssl)?;
    }
    let mut param = X509VerifyParam::new().map_err(ssl)?;
    param.set_time(now as _);
    store.set_param(&param).map_err(ssl)?;
    let store = store.build();
    let mut chain = Stack::new().map_err(ssl)?;
    for c in rest {
        chain.push(c.clone()).map_err(ssl)?;
    }
    let mut ctx = X509StoreContext::new().map_err(ssl)?;
    let (ok, err) = ctx
        .init(&store, leaf, &chain, |c| Ok((c.verify_cert()?, c.error())))
        .map_err(ssl)?;
    if !ok {
        // X509_V_ERR_CERT_NOT_YET_VALID, X509_V_ERR_CERT_HAS_EXPIRED.
        return Err(match err.as_raw() {
            9 | 10 => CertError::Expired(err.error_string().into()),
            _ => CertError::Untrusted(err.error_string().into()),
        });
    }
    for crl in &trust.crls {
        for c in &certs {
            if matches!(crl.get_by_cert(c), CrlStatus::Revoked(_)) {
                return Err(CertError::Revoked);
            }
        }
    }
    let key = leaf
        .public_key()
        .and_then(|k| k.ec_key())
        .map_err(|_| CertError::NotSti("not an EC key"))?;
    if key.group().curve_name() != Some(Nid::X9_62_PRIME256V1) {
        return Err(CertError::NotSti("not a P-256 key"));
    }
    let der = leaf
        .to_der()
        .map_err(|e| CertError::Malformed(e.to_string()))?;
    let ext = find_extension(&der, TN_AUTH_LIST_DER)
        .map_err(|e| CertError::Malformed(e.into()))?
        .ok_or(CertError::NotSti("no TNAuthList"))?;
    let entries = parse_tn_auth_list(ext).map_err(|e| CertError::Malformed(e.into()))?;
    let subject = leaf
        .subject_name()
        .entries()
        .filter_map(|e| e.data().to_string().ok())
        .collect::<Vec<_>>()
        .join(", ");
    let epoch = Asn1Time::from_unix(0).map_err(|e| CertError::Malformed(e.to_string()))?;
    let to_end = epoch
        .diff(leaf.not_after())
        .map_err(|e| CertError::Malformed(e.to_string()))?;
    Ok(Signer {
        key,
        entries,
        subject,
        not_after: i64::from(to_end.days) * 86_400 + i64::from(to_end.secs),
    })
}

/// The value (inside the OCTET STRING) of the extension `oid` of the
/// DER certificate `cert`.
fn find_extension<'a>(cert: &'a [u8], oid: &[u8]) -> Result<Option<&'a [u8]>, &'static str> {
    let certificate = Reader::new(cert).expect(der::SEQUENCE, "certificate is not a SEQUENCE")?;
    let tbs = Reader::new(certificate).expect(der::SEQUENCE, "tbsCertificate missing")?;
    let mut fields = Reader::new(tbs);
    while !fields.is_empty() {
        let f = fields.next_tlv()?;
        if f.tag != 0xa3 {
            continue;
        }
        let list = Reader::new(f.contents).expect(der::SEQUENCE, "extensions not a SEQUENCE")?;
        let mut exts = Reader::new(list);
        while !exts.is_empty() {
            let ext = exts.expect(der::SEQUENCE, "extension not a SEQUENCE")?;
            let mut parts = Reader::new(ext);
            if parts.expect(der::OID, "extension without OID")? != oid {
                continue;
            }
            let mut value = parts.next_tlv()?;
            if value.tag == der::BOOLEAN {
                value = parts.next_tlv()?;
            }
            if value.tag != der::OCTET_STRING {
                return Err("extension value not an OCTET STRING");
            }
            return Ok(Some(value.contents));
        }
    }
    Ok(None)
}

fn tn_string(bytes: &[u8]) -> Result<String, &'static str> {
    if bytes.is_empty() || bytes.len() > 32 || !bytes.iter().all(u8::is_ascii_graphic) {
        return Err("TNAuthList: bad string");
    }
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

/// The string of a `[n]` entry, tagged explicitly (`A0 16 …`, as RFC
/// 8226's module says) or implicitly (`80 …`, as some issuers write).
fn tagged_string(tag: u8, contents: &[u8]) -> Result<String, &'static str> {
    if tag & 0x20 == 0 {
        return tn_string(contents);
    }
    tn_string(Reader::new(contents).expect(der::IA5_STRING, "TNAuthList: not an IA5String")?)
}

/// Reads a TNAuthList (the extension's value).
pub fn parse_tn_auth_list(value: &[u8]) -> Result<Vec<TnEntry>, &'static str> {
    let list = Reader::new(value).expect(der::SEQUENCE, "TNAuthList: not a SEQUENCE")?;
    let mut r = Reader::new(list);
    let mut entries = Vec::new();
    while !r.is_empty() {
        if entries.len() == MAX_ENTRIES {
            return Err("TNAuthList: too many entries");
        }
        let t = r.next_tlv()?;
        entries.push(match t.tag & 0x1f {
            0 => TnEntry::Spc(tagged_string(t.tag, t.contents)?),
            2 => TnEntry::One(tagged_string(t.tag, t.contents)?),
            1 => {
                let inner = if t.tag & 0x20 != 0 {
                    Reader::new(t.contents).expect(der::SEQUENCE, "TNAuthList: range")?
                } else {
                    t.contents
                };
                let mut p = Reader::new(inner);
                let start = tn_string(p.expect(der::IA5_STRING, "TNAuthList: range start")?)?;
                let count = der::read_u64(p.expect(der::INTEGER, "TNAuthList: range count")?)?;
                TnEntry::Range { start, count }
            }
            _ => return Err("TNAuthList: unknown entry"),
        });
    }
    if entries.is_empty() {
        return Err("TNAuthList: empty");
    }
    Ok(entries)
}

/// Writes a TNAuthList (explicit tags, RFC 8226 §9).
pub fn tn_auth_list_der(entries: &[TnEntry]) -> Vec<u8> {
    let mut list = Vec::new();
    for e in entries {
        let mut inner = Vec::new();
        let tag = match e {
            TnEntry::Spc(s) => {
                der::write(der::IA5_STRING, s.as_bytes(), &mut inner);
                0xa0
            }
            TnEntry::One(s) => {
                der::write(der::IA5_STRING, s.as_bytes(), &mut inner);
                0xa2
            }
            TnEntry::Range { start, count } => {
                let mut seq = Vec::new();
                der::write(der::IA5_STRING, start.as_bytes(), &mut seq);
                der::write(der::INTEGER, &der::u64_contents(*count), &mut seq);
                der::write(der::SEQUENCE, &seq, &mut inner);
                0xa1
            }
        };
        der::write(tag, &inner, &mut list);
    }
    let mut out = Vec::new();
    der::write(der::SEQUENCE, &list, &mut out);
    out
}

/// A new EC P-256 key.
pub fn p256_key() -> Result<PKey<Private>, String> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).map_err(|e| e.to_string())?;
    let key = EcKey::generate(&group).map_err(|e| e.to_string())?;
    PKey::from_ec_key(key).map_err(|e| e.to_string())
}

/// What to issue.
pub struct Issue<'a> {
    /// Subject common name.
    pub cn: &'a str,
    /// Valid from `not_before` (seconds since 1970) for `days`.
    pub not_before: i64,
    /// Validity in days.
    pub days: u32,
    /// A CA (an STI-CA) rather than a signer's certificate.
    pub ca: bool,
    /// The signer's TNAuthList (required for a signer, none for a CA).
    pub entries: &'a [TnEntry],
    /// The issuer (none: self-signed).
    pub issuer: Option<(&'a X509, &'a PKey<Private>)>,
}

/// Issues a certificate for `key` (EC P-256, signed ECDSA-SHA256).
pub fn issue(key: &PKey<Private>, req: &Issue<'_>) -> Result<X509, String> {
    let e = |e: openssl::error::ErrorStack| e.to_string();
    let mut name = X509NameBuilder::new().map_err(e)?;
    name.append_entry_by_nid(Nid::COMMONNAME, req.cn)
        .map_err(e)?;
    let name = name.build();
    let mut b = X509Builder::new().map_err(e)?;
    b.set_version(2).map_err(e)?;
    let mut serial = BigNum::new().map_err(e)?;
    serial.rand(127, MsbOption::MAYBE_ZERO, false).map_err(e)?;
    b.set_serial_number(Asn1Integer::from_bn(&serial).map_err(e)?.as_ref())
        .map_err(e)?;
    b.set_subject_name(&name).map_err(e)?;
    b.set_issuer_name(req.issuer.map_or(&*name, |(c, _)| c.subject_name()))
        .map_err(e)?;
    b.set_pubkey(key).map_err(e)?;
    let start = Asn1Time::from_unix(req.not_before as _).map_err(e)?;
    b.set_not_before(&start).map_err(e)?;
    let end =
        Asn1Time::from_unix((req.not_before + i64::from(req.days) * 86_400) as _).map_err(e)?;
    b.set_not_after(&end).map_err(e)?;
    let bc = if req.ca {
        BasicConstraints::new().critical().ca().build()
    } else {
        BasicConstraints::new().critical().build()
    };
    b.append_extension(bc.map_err(e)?).map_err(e)?;
    let ku = if req.ca {
        KeyUsage::new()
            .critical()
            .key_cert_sign()
            .crl_sign()
            .build()
    } else {
        KeyUsage::new().critical().digital_signature().build()
    };
    b.append_extension(ku.map_err(e)?).map_err(e)?;
    let ski = SubjectKeyIdentifier::new()
        .build(&b.x509v3_context(req.issuer.map(|(c, _)| &**c), None))
        .map_err(e)?;
    b.append_extension(ski).map_err(e)?;
    if req.issuer.is_some() {
        let aki = AuthorityKeyIdentifier::new()
            .keyid(true)
            .build(&b.x509v3_context(req.issuer.map(|(c, _)| &**c), None))
            .map_err(e)?;
        b.append_extension(aki).map_err(e)?;
    }
    if !req.entries.is_empty() {
        let oid = Asn1Object::from_str(TN_AUTH_LIST_OID).map_err(e)?;
        let value = Asn1OctetString::new_from_bytes(&tn_auth_list_der(req.entries)).map_err(e)?;
        b.append_extension(X509Extension::new_from_der(&oid, false, &value).map_err(e)?)
            .map_err(e)?;
    }
    let signing = req.issuer.map_or(key, |(_, k)| k);
    b.sign(signing, MessageDigest::sha256()).map_err(e)?;
    Ok(b.build())
}

#[cfg(test)]
mod tests;
