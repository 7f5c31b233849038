//! The PrivaSIP INVITE-preparation experiment (the PrivaSIP papers, the published
//! Table 1): how long the phone takes to build an INVITE — Call-ID, tags,
//! branch, SDP, and under PrivaSIP the pseudonyms — for plain SIP and for
//! each scheme and level, timed per INVITE over many INVITEs.
//!
//! Keys are made here, once per run: RSA-2048 in each variant (standard,
//! CRT, 3-prime; the phone only uses the public key, so the variants
//! should cost the same — the run shows whether they do), ECIES P-256,
//! HPKE X25519, AES-128-GCM from the digest credentials.

use crate::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use privacy::keys::{cipher_from_pem, public_pem};
use privacy::Encoding;
use rsa_variants::{PrivateKey, Variant};
use ua::phone::{Config, Phone, PrivacySetup};

/// Summary of one configuration's timings.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// e.g. "PrivaSIP-2 RSA-2048 crt".
    pub config: String,
    /// The published mean for the same configuration, ms (Table 1).
    pub published_ms: Option<f64>,
    /// INVITEs timed.
    pub n: usize,
    /// Mean, ms.
    pub mean_ms: f64,
    /// Fastest, ms.
    pub min_ms: f64,
    /// Slowest, ms.
    pub max_ms: f64,
    /// Sample standard deviation, ms.
    pub sd_ms: f64,
    /// Half-width of the 95 % confidence interval of the mean, ms
    /// (normal approximation: 1.96 · sd / √n).
    pub ci95_ms: Option<f64>,
    /// Bytes of the INVITE.
    pub invite_bytes: usize,
}

/// Mean, min, max, sample standard deviation and 95 % CI half-width.
pub fn summarize(samples_ms: &[f64]) -> (f64, f64, f64, f64, f64) {
    let n = samples_ms.len() as f64;
    if samples_ms.is_empty() {
        return (0.0, 0.0, 0.0, 0.0, 0.0);
    }
    let mean = samples_ms.iter().sum::<f64>() / n;
    let min = samples_ms.iter().copied().fold(f64::INFINITY, f64::min);
    let max = samples_ms.iter().copied().fold(0.0, f64::max);
    let var = if samples_ms.len() > 1 {
        samples_ms.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    let sd = var.sqrt();
    (mean, min, max, sd, 1.96 * sd / n.sqrt())
}

type Cipher = ua::phone::IdCipher;

/// One configuration: name, home cipher (none: plain SIP), PrivaSIP
/// level, the published mean in ms.
type Configuration = (String, Option<Cipher>, u8, Option<f64>);

fn cipher_of(private_pem: &[u8]) -> Result<Cipher, Error> {
    let public = public_pem(private_pem).map_err(Error::crypto)?;
    cipher_from_pem(&public, 1)
        .map(Arc::from)
        .map_err(Error::crypto)
}

/// The configurations of the published Table 1 and ours.
fn configurations(bits: u32) -> Result<Vec<Configuration>, Error> {
    let mut rsa = Vec::new();
    for v in [
        Variant::Standard,
        Variant::Crt,
        Variant::MultiPrime { primes: 3 },
    ] {
        let key = PrivateKey::generate(v, bits).map_err(Error::crypto)?;
        let pem = key.to_pkcs8_pem().map_err(Error::crypto)?;
        rsa.push((format!("RSA-{bits} {}", key.variant()), cipher_of(&pem)?));
    }
    let group = openssl::ec::EcGroup::from_curve_name(openssl::nid::Nid::X9_62_PRIME256V1)
        .map_err(Error::crypto)?;
    let ec = openssl::pkey::PKey::from_ec_key(
        openssl::ec::EcKey::generate(&group).map_err(Error::crypto)?,
    )
    .and_then(|k| k.private_key_to_pem_pkcs8())
    .map_err(Error::crypto)?;
    let x = openssl::pkey::PKey::generate_x25519()
        .and_then(|k| k.private_key_to_pem_pkcs8())
        .map_err(Error::crypto)?;
    let ecies = ("ECIES P-256".to_string(), cipher_of(&ec)?);
    let hpke = ("HPKE X25519".to_string(), cipher_of(&x)?);
    let ha1 = sip_core::digest::ha1(
        sip_core::digest::Algorithm::Sha256,
        "alice",
        "a.example",
        "pw",
    );
    let aes: Cipher = Arc::new(
        privacy::aes::AesId::new(ha1.as_str(), "a.example", 1, false).map_err(Error::crypto)?,
    );
    let mut out = vec![("plain SIP".to_string(), None, 0, Some(0.16))];
    for (name, c) in &rsa {
        out.push((format!("PrivaSIP-1 {name}"), Some(c.clone()), 1, Some(0.61)));
    }
    out.push((
        format!("PrivaSIP-1 {}", ecies.0),
        Some(ecies.1.clone()),
        1,
        Some(4.88),
    ));
    out.push(("PrivaSIP-1 AES-128-GCM".into(), Some(aes), 1, Some(0.18)));
    out.push((
        format!("PrivaSIP-1 {}", hpke.0),
        Some(hpke.1.clone()),
        1,
        None,
    ));
    for (name, c) in &rsa {
        out.push((format!("PrivaSIP-2 {name}"), Some(c.clone()), 2, Some(0.99)));
    }
    out.push((
        format!("PrivaSIP-2 {}", ecies.0),
        Some(ecies.1),
        2,
        Some(9.53),
    ));
    out.push((format!("PrivaSIP-2 {}", hpke.0), Some(hpke.1), 2, None));
    Ok(out)
}

/// A UDP phone for `(user, password, domain)` whose server is `server`,
/// with PrivaSIP as `privacy` says (the experiments' phones).
pub(crate) fn phone_config(
    (user, password, domain): (&str, &str, &str),
    server: SocketAddr,
    privacy: Option<ua::phone::PrivacySetup>,
) -> Config {
    Config {
        user: user.into(),
        password: Some(password.into()),
        domain: domain.into(),
        server: Some(server),
        callers: ua::phone::Callers::default(),
        bind: SocketAddr::from(([127, 0, 0, 1], 0)),
        public_ip: None,
        rtp_port: 0,
        srtp: Vec::new(),
        insecure_sdes: false,
        law: media::g711::Law::Pcmu,
        expires: 3600,
        ring_timeout: 30,
        tls: None,
        privacy,
    }
}

/// Times `iterations` INVITEs per configuration (after `warmup` untimed
/// ones), RSA keys of `bits`; `progress` gets each finished row.
pub fn prepare(
    iterations: usize,
    warmup: usize,
    bits: u32,
    mut progress: impl FnMut(&Row),
) -> Result<Vec<Row>, Error> {
    let sdp = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 40000 RTP/AVP 0 8\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\na=ptime:20\r\na=sendrecv\r\n";
    let mut rows = Vec::new();
    for (name, home, level, published) in configurations(bits)? {
        let privacy = home.map(|home| PrivacySetup {
            // PrivaSIP-2 encrypts the callee's ID for the callee's proxy:
            // here the same kind of key (the published set-up).
            callee: (level == 2).then(|| home.clone()),
            home,
            encoding: Encoding::Hex,
            limit: 2048,
            tickets: false,
            pq: None,
        });
        let mut phone = Phone::new(phone_config(
            ("alice", "pw", "a.example"),
            SocketAddr::from(([127, 0, 0, 1], 5060)),
            privacy,
        ))
        .map_err(|e| Error::peer(&name, e))?;
        let mut bytes = 0;
        for _ in 0..warmup {
            bytes = phone
                .prepare_invite("sip:bob@b.example", sdp)
                .map_err(|e| Error::peer(&name, e))?
                .len();
        }
        let mut samples = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            let t = Instant::now();
            let invite = phone
                .prepare_invite("sip:bob@b.example", sdp)
                .map_err(|e| Error::peer(&name, e))?;
            samples.push(t.elapsed().as_secs_f64() * 1e3);
            bytes = invite.len();
        }
        let (mean_ms, min_ms, max_ms, sd_ms, ci95_ms) = summarize(&samples);
        let row = Row {
            config: name,
            published_ms: published,
            n: iterations,
            mean_ms,
            min_ms,
            max_ms,
            sd_ms,
            ci95_ms: (samples.len() >= 2).then_some(ci95_ms),
            invite_bytes: bytes,
        };
        progress(&row);
        rows.push(row);
    }
    Ok(rows)
}

/// The rows as a markdown table beside the published means.
pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::from(
        "| configuration | mean ms | min ms | max ms | sd ms | 95 % CI ms | INVITE bytes | published mean ms (Table 1) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {:.4} | {:.4} | {:.4} | {:.4} | {} | {} | {} |\n",
            r.config,
            r.mean_ms,
            r.min_ms,
            r.max_ms,
            r.sd_ms,
            crate::stats::plus_minus(r.ci95_ms, r.n, 5),
            r.invite_bytes,
            r.published_ms.map_or("—".into(), |p| format!("{p:.2}"))
        ));
    }
    s.push_str("\nPublished: 1024-bit RSA, 160-bit ECIES, 128-bit AES on a 2.6 GHz desktop (the PrivaSIP papers); here RSA keys of the size given, ECIES P-256, HPKE X25519, AES-128-GCM.\n");
    s
}

/// The HTML page: the table, and our means beside the published ones on
/// a log axis (they span orders of magnitude).
pub fn html(rows: &[Row]) -> String {
    use crate::plot;
    let labels: Vec<String> = rows.iter().map(|r| r.config.clone()).collect();
    let chart = plot::bars_log(
        "INVITE preparation, mean ms",
        "configuration",
        "ms per INVITE (log scale)",
        &labels,
        &[
            ("sipsec", rows.iter().map(|r| r.mean_ms).collect()),
            (
                "published (Table 1)",
                rows.iter()
                    .map(|r| r.published_ms.unwrap_or(f64::NAN))
                    .collect(),
            ),
        ],
    );
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.config.clone(),
                r.n.to_string(),
                format!("{:.4}", r.mean_ms),
                format!("{:.4}", r.min_ms),
                format!("{:.4}", r.max_ms),
                format!("{:.4}", r.sd_ms),
                r.invite_bytes.to_string(),
                r.published_ms.map_or("—".into(), |p| format!("{p:.2}")),
            ]
        })
        .collect();
    plot::page(
        "PrivaSIP: time to prepare an INVITE",
        &[(
            "Per configuration".into(),
            format!(
                "{}{chart}",
                plot::table(
                    &[
                        "configuration",
                        "n",
                        "mean ms",
                        "min ms",
                        "max ms",
                        "sd ms",
                        "INVITE bytes",
                        "published mean ms"
                    ],
                    &table
                )
            ),
        )],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_statistics() {
        let (mean, min, max, sd, ci) = summarize(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!((mean, min, max), (2.5, 1.0, 4.0));
        assert!((sd - 1.290_994_448_7).abs() < 1e-9);
        assert!((ci - 1.96 * sd / 2.0).abs() < 1e-12);
        assert_eq!(summarize(&[]), (0.0, 0.0, 0.0, 0.0, 0.0));
        assert_eq!(summarize(&[5.0]).3, 0.0);
    }
}
