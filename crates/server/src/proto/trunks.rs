//! Trunks (`[[trunk]]`): which calls leave through which set of gateways,
//! which gateway each call goes to first, and whether each gateway is up.
//!
//! A trunk is also a next-hop name in the [`NameTable`] (`trunk.NAME`,
//! its gateways in priority order), so a stateful proxy's transaction
//! fails over to the next gateway on 408, 503, a timeout or an ICMP
//! error exactly as it does between the addresses of a DNS name (RFC
//! 3263 §4.3). The OPTIONS probes of the driver report here; a gateway
//! that stops answering is held down in the name table (skipped by every
//! pick and failover) until it answers again.

use std::hash::Hasher;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sip_core::{Message, Transport};

use crate::config_trunks::{Algorithm, TrunkConfig};
use crate::proto::names::{NameTable, Route};

/// A gateway and what is known of it.
#[derive(Debug)]
pub struct Gateway {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its share of calls.
    pub weight: u32,
    /// Lower first.
    pub priority: u32,
    up: AtomicBool,
    drained: AtomicBool,
    answered_run: AtomicU32,
    failed_run: AtomicU32,
    calls: AtomicU64,
    probes_ok: AtomicU64,
    probes_failed: AtomicU64,
}

/// One trunk.
#[derive(Debug)]
pub struct Trunk {
    /// As configured.
    pub config: TrunkConfig,
    /// Its gateways, as configured.
    pub gateways: Vec<Gateway>,
    turn: AtomicU64,
    route: String,
}

/// A gateway came up or went down (worth a log line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The trunk's name.
    pub trunk: String,
    /// The gateway.
    pub gateway: SocketAddr,
    /// Up now (else down).
    pub up: bool,
}

/// Every trunk.
#[derive(Debug, Default)]
pub struct Trunks {
    trunks: Vec<Trunk>,
}

/// A stable hash of `s` (SipHash, fixed keys): the same call or caller, the same
/// gateway.
fn stable_hash(s: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    h.write(s.as_bytes());
    h.finish()
}

/// The user part of a From value.
fn from_user<'a>(msg: &'a Message<'_>) -> &'a str {
    msg.from().uri().user().unwrap_or("")
}

impl Trunks {
    /// The trunks of `configs`, each made a next-hop name in `names`.
    pub fn new(configs: &[TrunkConfig], names: &NameTable) -> Self {
        let trunks = configs
            .iter()
            .map(|c| {
                let route = format!("trunk.{}", c.name.to_ascii_lowercase());
                let mut order: Vec<_> = c.gateways.iter().collect();
                order.sort_by_key(|g| g.priority);
                names.set_static(&route, c.transport, order.iter().map(|g| g.addr).collect());
                Trunk {
                    config: c.clone(),
                    gateways: c
                        .gateways
                        .iter()
                        .map(|g| Gateway {
                            addr: g.addr,
                            weight: g.weight,
                            priority: g.priority,
                            up: AtomicBool::new(true),
                            drained: AtomicBool::new(false),
                            answered_run: AtomicU32::new(0),
                            failed_run: AtomicU32::new(0),
                            calls: AtomicU64::new(0),
                            probes_ok: AtomicU64::new(0),
                            probes_failed: AtomicU64::new(0),
                        })
                        .collect(),
                    turn: AtomicU64::new(0),
                    route,
                }
            })
            .collect();
        Self { trunks }
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.trunks.is_empty()
    }

    /// Every trunk.
    pub fn all(&self) -> &[Trunk] {
        &self.trunks
    }

    /// The trunk for a Request-URI number (user part): the longest
    /// matching prefix, else the default trunk when `user` is a number.
    pub fn for_number(&self, user: &str) -> Option<usize> {
        let best = self
            .trunks
            .iter()
            .enumerate()
            .flat_map(|(i, t)| t.config.prefixes.iter().map(move |p| (i, p)))
            .filter(|(_, p)| user.starts_with(p.as_str()))
            .max_by_key(|(_, p)| p.len())
            .map(|(i, _)| i);
        let number = user.strip_prefix('+').unwrap_or(user);
        best.or_else(|| {
            (!number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()))
                .then(|| self.trunks.iter().position(|t| t.config.default))
                .flatten()
        })
    }

    /// The trunk serving `domain` (any case).
    pub fn for_domain(&self, domain: &str) -> Option<usize> {
        self.trunks.iter().position(|t| {
            t.config
                .domains
                .iter()
                .any(|d| d.eq_ignore_ascii_case(domain))
        })
    }

    /// Whether trunk `i` hides the inside network.
    pub fn hides(&self, i: usize) -> bool {
        self.trunks[i].config.hide_topology
    }

    /// Whether `ip` is a gateway of a trunk that hides the inside (a call
    /// it begins is hidden on its way back).
    pub fn hides_source(&self, ip: std::net::IpAddr) -> bool {
        self.trunks
            .iter()
            .any(|t| t.config.hide_topology && t.gateways.iter().any(|g| g.addr.ip() == ip))
    }

    /// The trunk `i`'s name.
    pub fn name(&self, i: usize) -> &str {
        &self.trunks[i].config.name
    }

    /// The gateway of trunk `i` that `msg` goes to first at `now`, and the
    /// route its transaction fails over along; `None` when no gateway is
    /// up. `sticky`: pick by the Call-ID whatever the algorithm (a
    /// stateless proxy's CANCEL and ACK must follow the INVITE).
    pub fn pick(
        &self,
        i: usize,
        msg: &Message<'_>,
        names: &NameTable,
        now: Instant,
        sticky: bool,
    ) -> Option<(SocketAddr, Route)> {
        let t = &self.trunks[i];
        let transport = t.config.transport;
        let mut up: Vec<&Gateway> = t
            .gateways
            .iter()
            .filter(|g| {
                g.up.load(Ordering::Relaxed)
                    && !g.drained.load(Ordering::Relaxed)
                    && !names.is_down(g.addr, transport, now)
            })
            .collect();
        let algorithm = if sticky {
            Algorithm::HashCallId
        } else {
            t.config.algorithm
        };
        if algorithm == Algorithm::Priority {
            let best = up.iter().map(|g| g.priority).min()?;
            up.retain(|g| g.priority == best);
        }
        let total: u64 = up.iter().map(|g| u64::from(g.weight)).sum();
        let turn = || t.turn.fetch_add(1, Ordering::Relaxed);
        let chosen = match algorithm {
            Algorithm::RoundRobin => *up.get((turn() % up.len().max(1) as u64) as usize)?,
            _ => {
                let n = match algorithm {
                    Algorithm::HashCallId => stable_hash(msg.call_id()),
                    Algorithm::HashCaller => stable_hash(from_user(msg)),
                    _ => turn(),
                } % total.max(1);
                let mut acc = 0;
                *up.iter().find(|g| {
                    acc += u64::from(g.weight);
                    n < acc
                })?
            }
        };
        chosen.calls.fetch_add(1, Ordering::Relaxed);
        let route = Route {
            name: t.route.clone(),
            port: None,
            transport,
        };
        Some((chosen.addr, route))
    }

    /// What the probes should ask, for each trunk and gateway: (trunk,
    /// gateway, address and transport, how often; longer while it is
    /// down: back-off).
    pub fn probes(&self) -> Vec<(usize, usize, (SocketAddr, Transport), Duration)> {
        let mut out = Vec::new();
        for (ti, t) in self.trunks.iter().enumerate() {
            let Some(every) = t.config.probe_every else {
                continue;
            };
            for (gi, g) in t.gateways.iter().enumerate() {
                let down = g.failed_run.load(Ordering::Relaxed);
                let backoff = if g.up.load(Ordering::Relaxed) {
                    1
                } else {
                    1 << (down.saturating_sub(t.config.down_after)).min(2)
                };
                out.push((ti, gi, (g.addr, t.config.transport), every * backoff));
            }
        }
        out
    }

    /// A probe of trunk `ti`'s gateway `gi` was answered (or not): after
    /// enough in a row it goes down (held in `names`) or up again.
    pub fn probed(
        &self,
        ti: usize,
        gi: usize,
        answered: bool,
        names: &NameTable,
    ) -> Option<Change> {
        let t = self.trunks.get(ti)?;
        let g = t.gateways.get(gi)?;
        let hop = (g.addr, t.config.transport);
        let was_up = g.up.load(Ordering::Relaxed);
        let flip = if answered {
            g.probes_ok.fetch_add(1, Ordering::Relaxed);
            g.failed_run.store(0, Ordering::Relaxed);
            let run = g.answered_run.fetch_add(1, Ordering::Relaxed) + 1;
            !was_up && run >= t.config.up_after
        } else {
            g.probes_failed.fetch_add(1, Ordering::Relaxed);
            g.answered_run.store(0, Ordering::Relaxed);
            let run = g.failed_run.fetch_add(1, Ordering::Relaxed) + 1;
            was_up && run >= t.config.down_after
        };
        if !flip {
            return None;
        }
        g.up.store(!was_up, Ordering::Relaxed);
        if was_up {
            names.hold(hop);
        } else if !g.drained.load(Ordering::Relaxed) {
            names.release(hop);
        }
        Some(Change {
            trunk: t.config.name.clone(),
            gateway: g.addr,
            up: !was_up,
        })
    }

    /// The operator drains (or undrains) gateway `addr` of trunk `name`:
    /// a drained gateway gets no new call, first or by failover; calls
    /// under way go on. `Err` names what is unknown.
    pub fn drain(
        &self,
        name: &str,
        addr: SocketAddr,
        on: bool,
        names: &NameTable,
    ) -> Result<(), String> {
        let t = self
            .trunks
            .iter()
            .find(|t| t.config.name == name)
            .ok_or_else(|| format!("no trunk {name:?}"))?;
        let g = t
            .gateways
            .iter()
            .find(|g| g.addr == addr)
            .ok_or_else(|| format!("trunk {name} has no gateway {addr}"))?;
        g.drained.store(on, Ordering::Relaxed);
        let hop = (addr, t.config.transport);
        if on {
            names.hold(hop);
        } else if g.up.load(Ordering::Relaxed) {
            names.release(hop);
        }
        Ok(())
    }

    /// The Prometheus text of the trunks.
    pub fn render(&self, o: &mut String) {
        use std::fmt::Write;
        if self.trunks.is_empty() {
            return;
        }
        let _ = writeln!(
            o,
            "# HELP sipsec_trunk_gateway_up Whether a trunk's gateway is up (its OPTIONS probes answered).\n\
# TYPE sipsec_trunk_gateway_up gauge"
        );
        let each = |o: &mut String, f: &dyn Fn(&Gateway) -> String| {
            for t in &self.trunks {
                for g in &t.gateways {
                    let _ = writeln!(
                        o,
                        "{{trunk=\"{}\",gateway=\"{}\"}} {}",
                        t.config.name,
                        g.addr,
                        f(g)
                    );
                }
            }
        };
        let mut lines = String::new();
        each(&mut lines, &|g| {
            u8::from(g.up.load(Ordering::Relaxed)).to_string()
        });
        for l in lines.lines() {
            let _ = writeln!(o, "sipsec_trunk_gateway_up{l}");
        }
        let _ = writeln!(
            o,
            "# HELP sipsec_trunk_calls_total Calls sent first to a trunk's gateway.\n\
# TYPE sipsec_trunk_calls_total counter"
        );
        let mut lines = String::new();
        each(&mut lines, &|g| g.calls.load(Ordering::Relaxed).to_string());
        for l in lines.lines() {
            let _ = writeln!(o, "sipsec_trunk_calls_total{l}");
        }
        let _ = writeln!(
            o,
            "# HELP sipsec_trunk_probes_total OPTIONS probes of a trunk's gateways, by result.\n\
# TYPE sipsec_trunk_probes_total counter"
        );
        for t in &self.trunks {
            for g in &t.gateways {
                for (result, n) in [("answered", &g.probes_ok), ("failed", &g.probes_failed)] {
                    let _ = writeln!(
                        o,
                        "sipsec_trunk_probes_total{{trunk=\"{}\",gateway=\"{}\",result=\"{result}\"}} {}",
                        t.config.name,
                        g.addr,
                        n.load(Ordering::Relaxed)
                    );
                }
            }
        }
    }

    /// `/status`'s `trunks`.
    pub fn status(&self) -> serde_json::Value {
        self.trunks
            .iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.config.name,
                    "algorithm": t.config.algorithm.as_str(),
                    "prefixes": t.config.prefixes,
                    "domains": t.config.domains,
                    "default": t.config.default,
                    "gateways": t.gateways.iter().map(|g| serde_json::json!({
                        "address": g.addr.to_string(),
                        "weight": g.weight,
                        "priority": g.priority,
                        "state": if g.drained.load(Ordering::Relaxed) {
                            "drained"
                        } else if g.up.load(Ordering::Relaxed) {
                            "up"
                        } else {
                            "down"
                        },
                        "calls": g.calls.load(Ordering::Relaxed),
                        "probes_answered": g.probes_ok.load(Ordering::Relaxed),
                        "probes_failed": g.probes_failed.load(Ordering::Relaxed),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DnsSettings;
    use crate::config_trunks::GatewayConfig;

    fn gw(port: u16, weight: u32, priority: u32) -> GatewayConfig {
        GatewayConfig {
            addr: SocketAddr::from(([192, 0, 2, 1], port)),
            name: None,
            weight,
            priority,
        }
    }

    fn trunk(name: &str, algorithm: Algorithm, gateways: Vec<GatewayConfig>) -> TrunkConfig {
        TrunkConfig {
            name: name.into(),
            gateways,
            algorithm,
            prefixes: vec!["+1".into()],
            domains: vec!["pstn.test".into()],
            default: false,
            transport: Transport::Udp,
            probe_every: Some(Duration::from_secs(1)),
            down_after: 2,
            up_after: 2,
            auth: None,
            hide_topology: false,
        }
    }

    fn invite(call: &str) -> Vec<u8> {
        format!(
            "INVITE sip:+12155550100@here.test SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.9;branch=z9hG4bK{call}\r\n\
             From: <sip:alice@here.test>;tag=1\r\nTo: <sip:+12155550100@here.test>\r\nCall-ID: {call}\r\n\
             CSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
        )
        .into_bytes()
    }

    fn picks(t: &Trunks, names: &NameTable, n: usize, sticky: bool) -> Vec<u16> {
        let now = Instant::now();
        (0..n)
            .map(|i| {
                let bytes = invite(&format!("c{i}"));
                let m = Message::parse(&bytes).unwrap();
                t.pick(0, &m, names, now, sticky).unwrap().0.port()
            })
            .collect()
    }

    #[test]
    fn weights_spread_calls_exactly_and_down_gateways_get_none() {
        let names = NameTable::new(&DnsSettings::default());
        let t = Trunks::new(
            &[trunk(
                "carrier",
                Algorithm::Weighted,
                vec![gw(1, 1, 0), gw(2, 3, 0)],
            )],
            &names,
        );
        let p = picks(&t, &names, 400, false);
        assert_eq!(p.iter().filter(|&&x| x == 1).count(), 100);
        assert_eq!(p.iter().filter(|&&x| x == 2).count(), 300);
        // Two unanswered probes: down, held in the name table.
        assert_eq!(t.probed(0, 1, false, &names), None);
        let change = t.probed(0, 1, false, &names).unwrap();
        assert!(!change.up);
        assert!(picks(&t, &names, 20, false).iter().all(|&x| x == 1));
        let now = Instant::now();
        let alt = names.alternative("trunk.carrier", None, Transport::Udp, now);
        assert_eq!(
            alt.map(|a| a.port()),
            Some(1),
            "failover skips the held gateway"
        );
        // Answered again twice: up.
        assert_eq!(t.probed(0, 1, true, &names), None);
        assert!(t.probed(0, 1, true, &names).unwrap().up);
        assert!(picks(&t, &names, 20, false).contains(&2));
    }

    #[test]
    fn algorithms_pick_as_they_say() {
        let names = NameTable::new(&DnsSettings::default());
        let rr = Trunks::new(
            &[trunk(
                "rr",
                Algorithm::RoundRobin,
                vec![gw(1, 1, 0), gw(2, 9, 0)],
            )],
            &names,
        );
        assert_eq!(picks(&rr, &names, 4, false), [1, 2, 1, 2]);
        let pri = Trunks::new(
            &[trunk(
                "p",
                Algorithm::Priority,
                vec![gw(1, 1, 1), gw(2, 1, 0)],
            )],
            &names,
        );
        assert!(picks(&pri, &names, 10, false).iter().all(|&x| x == 2));
        pri.probed(0, 1, false, &names);
        pri.probed(0, 1, false, &names);
        assert!(
            picks(&pri, &names, 10, false).iter().all(|&x| x == 1),
            "the next priority when the first is down"
        );
        let hash = Trunks::new(
            &[trunk(
                "h",
                Algorithm::HashCallId,
                vec![gw(1, 1, 0), gw(2, 1, 0), gw(3, 1, 0)],
            )],
            &names,
        );
        assert_eq!(
            picks(&hash, &names, 30, false),
            picks(&hash, &names, 30, false),
            "a call sticks"
        );
        assert_eq!(
            picks(&rr, &names, 6, true),
            picks(&rr, &names, 6, true),
            "sticky picks by Call-ID"
        );
    }

    #[test]
    fn numbers_and_domains_find_their_trunk() {
        let names = NameTable::new(&DnsSettings::default());
        let mut long = trunk("uk", Algorithm::Weighted, vec![gw(1, 1, 0)]);
        long.prefixes = vec!["+44".into(), "+1212".into()];
        long.domains = vec![];
        let mut default = trunk("any", Algorithm::Weighted, vec![gw(2, 1, 0)]);
        default.prefixes = vec![];
        default.domains = vec![];
        default.default = true;
        let t = Trunks::new(
            &[
                trunk("us", Algorithm::Weighted, vec![gw(3, 1, 0)]),
                long,
                default,
            ],
            &names,
        );
        assert_eq!(
            t.for_number("+12125550100").map(|i| t.name(i)),
            Some("uk"),
            "the longest prefix"
        );
        assert_eq!(t.for_number("+12155550100").map(|i| t.name(i)), Some("us"));
        assert_eq!(t.for_number("4930123").map(|i| t.name(i)), Some("any"));
        assert_eq!(t.for_number("alice"), None, "names are not numbers");
        assert_eq!(t.for_domain("PSTN.test").map(|i| t.name(i)), Some("us"));
        assert_eq!(t.for_domain("other.test"), None);
    }
}
