//! `[[trunk]]`: sets of gateways (carriers, PSTN gateways, SBCs) calls
//! leave through, chosen by the Request-URI's number prefix or domain,
//! spread by an algorithm, probed with OPTIONS, failed over inside the
//! transaction.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use sip_core::Transport;

/// How a trunk spreads calls over its gateways.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Algorithm {
    /// In proportion to the weights, evenly interleaved.
    #[default]
    Weighted,
    /// Each gateway in turn.
    RoundRobin,
    /// By a hash of the Call-ID (weighted): a call's requests stick.
    HashCallId,
    /// By a hash of the caller (From user, weighted): a caller sticks.
    HashCaller,
    /// The lowest priority value that is up; weighted within it.
    Priority,
}

impl Algorithm {
    /// Parses the configuration word.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "weighted" => Self::Weighted,
            "round-robin" => Self::RoundRobin,
            "hash-call-id" => Self::HashCallId,
            "hash-caller" => Self::HashCaller,
            "priority" => Self::Priority,
            _ => return None,
        })
    }

    /// The configuration word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Weighted => "weighted",
            Self::RoundRobin => "round-robin",
            Self::HashCallId => "hash-call-id",
            Self::HashCaller => "hash-caller",
            Self::Priority => "priority",
        }
    }
}

/// One gateway of a trunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    /// Where it listens (for a gateway named by a DNS name, once the name
    /// is resolved at start).
    pub addr: SocketAddr,
    /// The DNS name it was given by, if any.
    pub name: Option<String>,
    /// Its share of calls.
    pub weight: u32,
    /// Lower is tried first (`priority` algorithm; failover order).
    pub priority: u32,
}

/// A password, never shown in logs or debug output.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// How the proxy answers a trunk's digest challenges (RFC 3261 §22.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrunkAuth {
    /// The user name the carrier gave.
    pub username: String,
    /// The file the password is read from at start (its first line).
    pub password_file: PathBuf,
    /// The password, once read.
    pub password: Secret,
}

/// One `[[trunk]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrunkConfig {
    /// Its name (in logs, metrics, `/status`).
    pub name: String,
    /// Its gateways.
    pub gateways: Vec<GatewayConfig>,
    /// How calls are spread.
    pub algorithm: Algorithm,
    /// Request-URI numbers (user parts) it takes, by prefix.
    pub prefixes: Vec<String>,
    /// Request-URI domains it takes.
    pub domains: Vec<String>,
    /// It takes the numbers no other trunk takes.
    pub default: bool,
    /// The transport to its gateways.
    pub transport: Transport,
    /// Seconds between OPTIONS probes (none: not probed).
    pub probe_every: Option<Duration>,
    /// Unanswered probes in a row before a gateway is down.
    pub down_after: u32,
    /// Answered probes in a row before it is up again.
    pub up_after: u32,
    /// Credentials for a carrier that challenges.
    pub auth: Option<TrunkAuth>,
    /// Nothing of the inside network (Vias, Call-ID, contacts) crosses
    /// to the trunk.
    pub hide_topology: bool,
    /// How often gateways named by DNS names are looked up again (none:
    /// once, at start).
    pub resolve_every: Option<Duration>,
}

/// A gateway as written: `"IP:PORT"` or a table.
#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
pub enum GatewayEntry {
    /// Weight 1, priority 0.
    Addr(String),
    /// With a weight and priority.
    Full {
        /// `IP:PORT`.
        addr: String,
        /// Share of calls (default 1).
        weight: Option<u32>,
        /// Lower first (default 0).
        priority: Option<u32>,
    },
}

/// `[[trunk]]` as written.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrunkSection {
    /// Name.
    pub name: String,
    /// Gateways.
    pub gateways: Vec<GatewayEntry>,
    /// weighted | round-robin | hash-call-id | hash-caller | priority.
    pub algorithm: Option<String>,
    /// Number prefixes.
    pub prefixes: Option<Vec<String>>,
    /// Domains.
    pub domains: Option<Vec<String>>,
    /// The default trunk for numbers.
    pub default: Option<bool>,
    /// udp | tcp.
    pub transport: Option<String>,
    /// Seconds between probes (0: none).
    pub probe_every: Option<f64>,
    /// Failed probes before down.
    pub down_after: Option<u32>,
    /// Answered probes before up.
    pub up_after: Option<u32>,
    /// The user name to answer challenges with.
    pub username: Option<String>,
    /// The file holding the password (never on the command line).
    pub password_file: Option<PathBuf>,
    /// Hide the inside network from the trunk.
    pub hide_topology: Option<bool>,
    /// Seconds between lookups of the gateways' DNS names (0: once, at
    /// start).
    pub resolve_every: Option<f64>,
}

/// Gateways in one trunk at most.
pub const MAX_GATEWAYS: usize = 64;

/// A gateway's `IP:PORT`, or `NAME:PORT` (the name kept, resolved at
/// start; the address a placeholder with its port until then).
fn gateway_address(
    trunk: &str,
    text: &str,
) -> Result<(SocketAddr, Option<String>), (&'static str, String)> {
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Ok((a, None));
    }
    let bad = || {
        (
            "trunk.gateways",
            format!("{trunk}: {text:?} is not IP:PORT or NAME:PORT"),
        )
    };
    let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let name_like = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if !name_like {
        return Err(bad());
    }
    Ok((
        SocketAddr::from(([0, 0, 0, 0], port)),
        Some(host.to_ascii_lowercase()),
    ))
}

/// Reads the `[[trunk]]` tables; the key and what is wrong on error.
pub fn trunk_settings(
    sections: Vec<TrunkSection>,
) -> Result<Vec<TrunkConfig>, (&'static str, String)> {
    let mut out: Vec<TrunkConfig> = Vec::new();
    for t in sections {
        let name = t.name;
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return Err(("trunk.name", format!("{name:?}: letters, digits, - _ .")));
        }
        if out.iter().any(|o| o.name == name) {
            return Err(("trunk.name", format!("{name:?} is named twice")));
        }
        if t.gateways.is_empty() || t.gateways.len() > MAX_GATEWAYS {
            return Err((
                "trunk.gateways",
                format!("{name}: 1 to {MAX_GATEWAYS} gateways"),
            ));
        }
        let gateways = t
            .gateways
            .into_iter()
            .map(|g| {
                let (addr, weight, priority) = match g {
                    GatewayEntry::Addr(a) => (a, 1, 0),
                    GatewayEntry::Full {
                        addr,
                        weight,
                        priority,
                    } => (addr, weight.unwrap_or(1), priority.unwrap_or(0)),
                };
                let (addr, host) = gateway_address(&name, &addr)?;
                if !(1..=1000).contains(&weight) {
                    return Err((
                        "trunk.gateways",
                        format!("{name}: weight {weight}: 1 to 1000"),
                    ));
                }
                Ok(GatewayConfig {
                    addr,
                    name: host,
                    weight,
                    priority,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let algorithm = match t.algorithm {
            Some(a) => Algorithm::parse(&a).ok_or((
                "trunk.algorithm",
                format!("{a:?}: weighted, round-robin, hash-call-id, hash-caller or priority"),
            ))?,
            None => Algorithm::Weighted,
        };
        let transport = match t.transport.as_deref() {
            None | Some("udp") => Transport::Udp,
            Some("tcp") => Transport::Tcp,
            Some(o) => return Err(("trunk.transport", format!("{o:?}: udp or tcp"))),
        };
        let probe_every = match t.probe_every {
            None => Some(Duration::from_secs(10)),
            Some(0.0) => None,
            Some(s) if (0.2..=3600.0).contains(&s) => Some(Duration::from_secs_f64(s)),
            Some(s) => {
                return Err((
                    "trunk.probe_every",
                    format!("{s}: seconds in [0.2, 3600], or 0"),
                ))
            }
        };
        let resolve_every = match t.resolve_every {
            None => Some(Duration::from_secs(60)),
            Some(0.0) => None,
            Some(s) if (1.0..=86_400.0).contains(&s) => Some(Duration::from_secs_f64(s)),
            Some(s) => {
                return Err((
                    "trunk.resolve_every",
                    format!("{s}: seconds in [1, 86400], or 0"),
                ))
            }
        };
        let prefixes = t.prefixes.unwrap_or_default();
        if let Some(p) = prefixes.iter().find(|p| p.is_empty() || p.len() > 32) {
            return Err(("trunk.prefixes", format!("{name}: {p:?}")));
        }
        let auth = match (t.username, t.password_file) {
            (Some(username), Some(password_file)) => Some(TrunkAuth {
                username,
                password_file,
                password: Secret::default(),
            }),
            (None, None) => None,
            _ => {
                return Err((
                    "trunk.username",
                    format!("{name}: username and password_file go together"),
                ))
            }
        };
        out.push(TrunkConfig {
            name,
            gateways,
            algorithm,
            prefixes,
            domains: t
                .domains
                .unwrap_or_default()
                .into_iter()
                .map(|d| d.to_ascii_lowercase())
                .collect(),
            default: t.default.unwrap_or(false),
            transport,
            probe_every,
            down_after: t.down_after.unwrap_or(2).clamp(1, 100),
            up_after: t.up_after.unwrap_or(2).clamp(1, 100),
            auth,
            hide_topology: t.hide_topology.unwrap_or(false),
            resolve_every,
        });
    }
    if out.iter().filter(|t| t.default).count() > 1 {
        return Err(("trunk.default", "only one trunk can be the default".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateways_are_addresses_or_names_with_ports() {
        assert_eq!(
            gateway_address("t", "192.0.2.1:5060").unwrap(),
            ("192.0.2.1:5060".parse().unwrap(), None)
        );
        let (a, n) = gateway_address("t", "GW1.Carrier.example:5080").unwrap();
        assert_eq!(
            (a.port(), n.as_deref()),
            (5080, Some("gw1.carrier.example"))
        );
        for bad in ["gw", "gw:", "gw:99999", ":5060", "g w:5060", "gw/x:5060"] {
            assert!(gateway_address("t", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn half_credentials_and_two_defaults_are_refused() {
        let t = |extra: &str, name: &str| {
            toml::from_str::<TrunkSection>(&format!(
                "name = \"{name}\"\ngateways = [\"192.0.2.1:5060\"]\n{extra}"
            ))
            .unwrap()
        };
        assert!(trunk_settings(vec![t("username = \"u\"", "a")]).is_err());
        assert!(trunk_settings(vec![t("default = true", "a"), t("default = true", "b")]).is_err());
        assert!(
            trunk_settings(vec![t("", "a"), t("", "a")]).is_err(),
            "names are unique"
        );
        assert!(trunk_settings(vec![t("algorithm = \"fastest\"", "a")]).is_err());
        let ok = trunk_settings(vec![t(
            "username = \"u\"\npassword_file = \"/p\"\nhide_topology = true",
            "a",
        )])
        .unwrap();
        assert!(ok[0].auth.is_some() && ok[0].hide_topology);
    }
}
