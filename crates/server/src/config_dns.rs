//! The configuration file's `[dns]` table: resolving next hops named by domain names (RFC 3263).

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config::DnsSettings;

/// `[dns]`: resolving next hops named by domain names.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsSection {
    /// `false`: no resolution.
    pub enabled: Option<bool>,
    /// Name servers, `"IP"` or `"IP:PORT"`.
    pub servers: Option<Vec<String>>,
    /// Hosts file, or `""` for none.
    pub hosts: Option<PathBuf>,
    /// Seconds one query waits.
    pub timeout: Option<f64>,
    /// Tries per server.
    pub attempts: Option<u32>,
    /// Longest time an answer is kept, seconds.
    pub max_ttl: Option<u32>,
    /// How long "no such name" is kept, seconds.
    pub negative_ttl: Option<u32>,
    /// How long an address that failed is skipped, seconds.
    pub skip_failed_for: Option<u32>,
    /// Seconds of silence from a next hop before the next address is
    /// tried; 0: only when its transaction fails.
    pub failover_after: Option<f64>,
    /// Only answers the name server validated with DNSSEC (AD bit).
    pub require_dnssec: Option<bool>,
}

/// Applies `d` to `s`; the key and what is wrong with it on error.
pub(crate) fn dns_settings(
    d: DnsSection,
    s: &mut DnsSettings,
) -> Result<(), (&'static str, String)> {
    if let Some(e) = d.enabled {
        s.enabled = e;
    }
    if let Some(list) = d.servers {
        s.servers = list
            .iter()
            .map(|a| {
                a.parse::<SocketAddr>()
                    .or_else(|_| {
                        a.parse::<std::net::IpAddr>()
                            .map(|ip| SocketAddr::new(ip, 53))
                    })
                    .map_err(|_| ("dns.servers", format!("{a:?}: expected IP or IP:PORT")))
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(h) = d.hosts {
        s.hosts = (!h.as_os_str().is_empty()).then_some(h);
    }
    if let Some(t) = d.timeout {
        if !(0.01..=30.0).contains(&t) {
            return Err(("dns.timeout", format!("{t}: seconds in [0.01, 30]")));
        }
        s.timeout = std::time::Duration::from_secs_f64(t);
    }
    if let Some(a) = d.attempts {
        if !(1..=5).contains(&a) {
            return Err(("dns.attempts", format!("{a}: 1 to 5")));
        }
        s.attempts = a;
    }
    if let Some(t) = d.max_ttl {
        s.max_ttl = t;
    }
    if let Some(t) = d.negative_ttl {
        s.negative_ttl = t;
    }
    if let Some(t) = d.skip_failed_for {
        if !(1..=86_400).contains(&t) {
            return Err(("dns.skip_failed_for", format!("{t}: seconds in [1, 86400]")));
        }
        s.skip_failed_for = t;
    }
    if let Some(t) = d.failover_after {
        if t != 0.0 && !(0.1..=32.0).contains(&t) {
            return Err((
                "dns.failover_after",
                format!("{t}: 0 (off) or seconds in [0.1, 32]"),
            ));
        }
        s.failover_after = (t > 0.0).then(|| std::time::Duration::from_secs_f64(t));
    }
    if let Some(r) = d.require_dnssec {
        s.require_dnssec = r;
    }
    Ok(())
}
