//! TLS for SIP (RFC 3261 §26.2, RFC 5630): rustls sessions over the TCP
//! connections of [`crate::io::tcp`], a certificate store that reloads without
//! a restart, and RSA server keys of every variant.
//!
//! RSA keys sign through `rsa-variants` (OpenSSL): a *standard* key (no
//! CRT factors), a CRT key or a multi-prime key all work as the server's
//! key, and the experiment of the published RSA-variant study measures what each costs per
//! handshake. ECDSA and Ed25519 keys sign through the rustls provider.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use rsa_variants::PrivateKey;
use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::{CertifiedKey, SigningKey};
use rustls::{ClientConfig, RootCertStore, ServerConfig, SignatureScheme};

pub use crate::config::TlsSettings;

/// System CA bundle on Debian and derivatives.
pub(crate) const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Why TLS could not be set up; each names the file and the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    #[error("{path}: {err}")]
    Read {
        /// File.
        path: String,
        /// Cause.
        err: io::Error,
    },
    /// The certificate file holds no certificate.
    #[error("{0}: no PEM certificate (-----BEGIN CERTIFICATE-----) in the file")]
    NoCertificate(String),
    /// The key file holds no usable key.
    #[error("{path}: {why}")]
    BadKey {
        /// File.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// The key does not belong to the certificate.
    #[error("{key} does not match the certificate in {cert}")]
    Mismatch {
        /// Key file.
        key: String,
        /// Certificate file.
        cert: String,
    },
    /// A CA file could not be used.
    #[error("{path}: {why}")]
    BadCa {
        /// File.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The key-exchange groups are not usable.
    #[error("tls.groups: {0}")]
    Groups(String),
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|err| TlsError::Read {
        path: path.display().to_string(),
        err,
    })
}

/// The provider for `groups` (see [`sip_tls`]), RSA-1024 verification
/// when allowed.
fn provider(groups: &sip_tls::Groups, allow_rsa_1024: bool) -> Arc<CryptoProvider> {
    let p = sip_tls::provider(groups);
    Arc::new(if allow_rsa_1024 {
        rsa_variants::tls::allow_rsa_1024(p)
    } else {
        p
    })
}

/// What a key file holds, for logs and `/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    /// e.g. "RSA-2048 CRT (2 primes)" or "ECDSA".
    pub description: String,
}

/// Reads a certificate chain and its key and checks they belong together.
pub fn load_certified_key(cert: &Path, key: &Path) -> Result<(CertifiedKey, KeyInfo), TlsError> {
    let cert_pem = read(cert)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|_| TlsError::NoCertificate(cert.display().to_string()))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(cert.display().to_string()));
    }
    let key_pem = read(key)?;
    let bad_key = |why: String| TlsError::BadKey {
        path: key.display().to_string(),
        why,
    };
    let (signing, info): (Arc<dyn SigningKey>, KeyInfo) = match PrivateKey::from_pem(&key_pem) {
        Ok(rsa) => {
            let info = KeyInfo {
                description: format!("RSA-{} {}", rsa.bits(), rsa.variant()),
            };
            let signing =
                rsa_variants::tls::signing_key(rsa).map_err(|e| bad_key(e.to_string()))?;
            (signing, info)
        }
        Err(rsa_variants::Error::NotRsa(_)) => {
            let der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| {
                bad_key("no PEM private key (RSA, EC or PKCS#8) in the file".into())
            })?;
            let signing = sip_tls::any_supported_type(&der)
                .map_err(|e| bad_key(format!("unsupported key: {e}")))?;
            let description = format!("{:?}", signing.algorithm());
            (signing, KeyInfo { description })
        }
        Err(e) => return Err(bad_key(e.to_string())),
    };
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(_) => {
            return Err(TlsError::Mismatch {
                key: key.display().to_string(),
                cert: cert.display().to_string(),
            })
        }
    }
    Ok((certified, info))
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The server's certificate and key, swapped atomically on reload.
#[derive(Debug)]
pub struct CertStore {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
    info: RwLock<KeyInfo>,
    stamps: Mutex<(Option<SystemTime>, Option<SystemTime>)>,
}

impl CertStore {
    /// Loads the pair once; fails with a message naming the bad file.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let stamps = (modified(cert), modified(key));
        let (certified, info) = load_certified_key(cert, key)?;
        Ok(Self {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: RwLock::new(Arc::new(certified)),
            info: RwLock::new(info),
            stamps: Mutex::new(stamps),
        })
    }

    /// The key in use.
    pub fn info(&self) -> KeyInfo {
        self.info.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn certified(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reloads when `force` or when either file changed since the last
    /// load. `Ok(true)`: a new pair is in use. On error the old pair
    /// stays in use.
    pub fn reload(&self, force: bool) -> Result<bool, TlsError> {
        let now = (modified(&self.cert), modified(&self.key));
        let mut stamps = self.stamps.lock().unwrap_or_else(|e| e.into_inner());
        if !force && *stamps == now {
            return Ok(false);
        }
        // Remember the attempt, so a broken file is reported once, not
        // every poll; a later edit is tried again.
        *stamps = now;
        let (certified, info) = load_certified_key(&self.cert, &self.key)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(certified);
        *self.info.write().unwrap_or_else(|e| e.into_inner()) = info;
        Ok(true)
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.certified())
    }
}

impl ResolvesClientCert for CertStore {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.certified())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

pub(crate) fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let bad = |why: String| TlsError::BadCa {
        path: path.display().to_string(),
        why,
    };
    let pem = read(path)?;
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| bad(format!("unreadable PEM: {e}")))?;
        store
            .add(cert)
            .map_err(|e| bad(format!("not a usable CA certificate: {e}")))?;
    }
    if store.is_empty() {
        return Err(bad("no PEM certificate in the file".into()));
    }
    Ok(store)
}

/// Server and client configurations sharing one reloadable certificate.
#[derive(Debug)]
pub struct TlsContext {
    /// For accepted connections.
    pub server: Arc<ServerConfig>,
    /// For connections this server opens (forwarding to `sips:` targets);
    /// presents the same certificate when a peer asks for one.
    pub client: Arc<ClientConfig>,
    /// The certificate store (reload, key description).
    pub certs: Arc<CertStore>,
    /// Client certificates required.
    pub mutual: bool,
}

impl TlsContext {
    /// Loads everything `settings` names.
    pub fn new(settings: &TlsSettings) -> Result<Self, TlsError> {
        let certs = Arc::new(CertStore::load(&settings.cert, &settings.key)?);
        let groups = sip_tls::Groups::parse(&settings.groups).map_err(TlsError::Groups)?;
        // Post-quantum key exchange exists in TLS 1.3 only: requiring it
        // leaves TLS 1.2 and the classical groups out of the server.
        let (versions, server_groups): (&[_], _) = if settings.require_pq {
            (&[&rustls::version::TLS13], groups.post_quantum_only())
        } else {
            (
                &[&rustls::version::TLS13, &rustls::version::TLS12],
                groups.clone(),
            )
        };
        let accepting = provider(&server_groups, settings.allow_rsa_1024);
        let builder = ServerConfig::builder_with_provider(accepting.clone())
            .with_protocol_versions(versions)?;
        let builder = match &settings.client_ca {
            Some(ca) => {
                let verifier = WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots(ca)?),
                    accepting.clone(),
                )
                .build()
                .map_err(|e| TlsError::BadCa {
                    path: ca.display().to_string(),
                    why: e.to_string(),
                })?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut server = builder.with_cert_resolver(certs.clone());
        if settings.session_tickets {
            server.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()?;
        }
        let peer_roots = match &settings.peer_ca {
            Some(ca) => roots(ca)?,
            None if Path::new(SYSTEM_ROOTS).exists() => {
                roots(Path::new(SYSTEM_ROOTS)).unwrap_or_else(|_| RootCertStore::empty())
            }
            None => RootCertStore::empty(),
        };
        // Outbound, every configured group is offered, the hybrid first.
        let client =
            ClientConfig::builder_with_provider(provider(&groups, settings.allow_rsa_1024))
                .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
                .with_root_certificates(peer_roots)
                .with_client_cert_resolver(certs.clone());
        Ok(Self {
            server: Arc::new(server),
            client: Arc::new(client),
            certs,
            mutual: settings.client_ca.is_some(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rsa_1024_verification_is_an_opt_in_that_replaces_only_rsa() {
        let strict = provider(&sip_tls::Groups::default(), false);
        let legacy = provider(&sip_tls::Groups::default(), true);
        let algs = |p: &CryptoProvider, scheme| {
            p.signature_verification_algorithms
                .mapping
                .iter()
                .find(|(s, _)| *s == scheme)
                .map(|(_, a)| format!("{a:?}"))
                .unwrap_or_default()
        };
        for scheme in [
            SignatureScheme::RSA_PSS_SHA256,
            SignatureScheme::RSA_PKCS1_SHA256,
        ] {
            assert!(!algs(&strict, scheme).contains("LegacyRsa"));
            assert!(algs(&legacy, scheme).contains("LegacyRsa"), "{scheme:?}");
        }
        let ecdsa = SignatureScheme::ECDSA_NISTP256_SHA256;
        assert_eq!(algs(&strict, ecdsa), algs(&legacy, ecdsa));
        assert_eq!(
            strict.signature_verification_algorithms.all.len(),
            legacy.signature_verification_algorithms.all.len()
                + strict
                    .signature_verification_algorithms
                    .all
                    .iter()
                    .filter(|a| a.public_key_alg_id() == rustls::pki_types::alg_id::RSA_ENCRYPTION)
                    .count()
                - 6
        );
    }
}
