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
//!
//! The trunks in force are one generation ([`TrunkSet`]) at a time: a
//! reload or a gateway name's new address replaces it whole, and each
//! gateway that stays (same trunk, same address or DNS name) keeps its
//! state — up or down, drained, counters. A request holds the generation
//! it found ([`TrunkRef`]) until it is routed.

use std::hash::Hasher;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sip_core::{Message, Transport};

use crate::config_trunks::{Algorithm, TrunkConfig};
use crate::proto::names::{NameTable, Route};
use crate::shards::Shards;

/// A gateway and what is known of it.
#[derive(Debug)]
pub struct Gateway {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its share of calls.
    pub weight: u32,
    /// Lower first.
    pub priority: u32,
    /// What it is known by across generations: its DNS name and port,
    /// or its address.
    label: String,
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

/// One generation of every trunk.
#[derive(Debug, Default)]
pub struct TrunkSet {
    trunks: Vec<Trunk>,
}

/// The trunks in force (see the module's text).
#[derive(Debug)]
pub struct Trunks {
    current: Shards<Arc<TrunkSet>>,
}

/// One trunk of one generation.
#[derive(Debug, Clone)]
pub struct TrunkRef {
    set: Arc<TrunkSet>,
    i: usize,
}

/// An OPTIONS probe the driver should send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The trunk's name.
    pub trunk: String,
    /// The gateway's address.
    pub gateway: SocketAddr,
    /// Over this transport.
    pub transport: Transport,
    /// How often (longer while it is down: back-off).
    pub every: Duration,
}

impl Gateway {
    fn new(g: &crate::config_trunks::GatewayConfig) -> Self {
        Self {
            addr: g.addr,
            weight: g.weight,
            priority: g.priority,
            label: g
                .name
                .as_ref()
                .map_or_else(|| g.addr.to_string(), |n| format!("{n}:{}", g.addr.port())),
            up: AtomicBool::new(true),
            drained: AtomicBool::new(false),
            answered_run: AtomicU32::new(0),
            failed_run: AtomicU32::new(0),
            calls: AtomicU64::new(0),
            probes_ok: AtomicU64::new(0),
            probes_failed: AtomicU64::new(0),
        }
    }

    /// Takes on `old`'s state (the same gateway, a generation before).
    fn carry(&self, old: &Gateway) {
        let copy32 =
            |a: &AtomicU32, b: &AtomicU32| a.store(b.load(Ordering::Relaxed), Ordering::Relaxed);
        let copy64 =
            |a: &AtomicU64, b: &AtomicU64| a.store(b.load(Ordering::Relaxed), Ordering::Relaxed);
        self.up
            .store(old.up.load(Ordering::Relaxed), Ordering::Relaxed);
        self.drained
            .store(old.drained.load(Ordering::Relaxed), Ordering::Relaxed);
        copy32(&self.answered_run, &old.answered_run);
        copy32(&self.failed_run, &old.failed_run);
        copy64(&self.calls, &old.calls);
        copy64(&self.probes_ok, &old.probes_ok);
        copy64(&self.probes_failed, &old.probes_failed);
    }

    /// Whether the name table should skip it (down or drained).
    fn held(&self) -> bool {
        !self.up.load(Ordering::Relaxed) || self.drained.load(Ordering::Relaxed)
    }
}

impl Default for Trunks {
    fn default() -> Self {
        Self {
            current: Shards::new(1, Default::default),
        }
    }
}

impl Trunks {
    /// The trunks of `configs`, each made a next-hop name in `names`.
    pub fn new(configs: &[TrunkConfig], names: &NameTable) -> Self {
        let set = Arc::new(TrunkSet::new(configs, names));
        Self {
            current: Shards::new(1, || set.clone()),
        }
    }

    /// The generation in force.
    pub fn current(&self) -> Arc<TrunkSet> {
        self.current.lock(0).clone()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.current().is_empty()
    }

    /// The trunk for a Request-URI number (see [`TrunkSet::for_number`]).
    pub fn for_number(&self, user: &str) -> Option<TrunkRef> {
        let set = self.current();
        let i = set.for_number(user)?;
        Some(TrunkRef { set, i })
    }

    /// The trunk serving `domain` (any case).
    pub fn for_domain(&self, domain: &str) -> Option<TrunkRef> {
        let set = self.current();
        let i = set.for_domain(domain)?;
        Some(TrunkRef { set, i })
    }

    /// Whether `ip` is a gateway of a trunk that hides the inside.
    pub fn hides_source(&self, ip: IpAddr) -> bool {
        self.current().hides_source(ip)
    }

    /// Whether `ip` is a gateway of any trunk (a carrier's calls in).
    pub fn is_gateway(&self, ip: IpAddr) -> bool {
        self.current().is_gateway(ip)
    }

    /// The configuration in force (gateways at their current addresses).
    pub fn configs(&self) -> Vec<TrunkConfig> {
        self.current()
            .trunks
            .iter()
            .map(|t| t.config.clone())
            .collect()
    }

    /// The probes to send now (see [`TrunkSet::probes`]).
    pub fn probes(&self) -> Vec<Probe> {
        let set = self.current();
        set.probes()
            .into_iter()
            .map(|(ti, _, (gateway, transport), every)| Probe {
                trunk: set.trunks[ti].config.name.clone(),
                gateway,
                transport,
                every,
            })
            .collect()
    }

    /// A probe of `trunk`'s gateway at `gateway` was answered (or not).
    pub fn probed(
        &self,
        trunk: &str,
        gateway: SocketAddr,
        answered: bool,
        names: &NameTable,
    ) -> Option<Change> {
        let set = self.current();
        let ti = set.trunks.iter().position(|t| t.config.name == trunk)?;
        let gi = set.trunks[ti]
            .gateways
            .iter()
            .position(|g| g.addr == gateway)?;
        set.probed(ti, gi, answered, names)
    }

    /// Drains (or undrains) a gateway (see [`TrunkSet::drain`]).
    pub fn drain(
        &self,
        name: &str,
        addr: SocketAddr,
        on: bool,
        names: &NameTable,
    ) -> Result<(), String> {
        self.current().drain(name, addr, on, names)
    }

    /// The Prometheus text of the trunks.
    pub fn render(&self, o: &mut String) {
        self.current().render(o);
    }

    /// `/status`'s `trunks`.
    pub fn status(&self) -> serde_json::Value {
        self.current().status()
    }

    /// Puts `configs` in force: a new generation, each gateway that stays
    /// keeping its state, the name table's routes and holds moved to it.
    /// What changed, in words.
    pub fn replace(&self, configs: &[TrunkConfig], names: &NameTable) -> String {
        let old = self.current();
        let new = TrunkSet::new(configs, names);
        let mut kept = 0;
        for t in &new.trunks {
            let Some(o) = old.trunks.iter().find(|o| o.config.name == t.config.name) else {
                continue;
            };
            t.turn
                .store(o.turn.load(Ordering::Relaxed), Ordering::Relaxed);
            for g in &t.gateways {
                if let Some(og) = o.gateways.iter().find(|og| og.label == g.label) {
                    g.carry(og);
                    kept += 1;
                }
            }
        }
        for t in &old.trunks {
            let gone = !new
                .trunks
                .iter()
                .any(|n| n.route == t.route && n.config.transport == t.config.transport);
            if gone {
                names.set_static(&t.route, t.config.transport, Vec::new());
            }
            for g in t.gateways.iter().filter(|g| g.held()) {
                names.release((g.addr, t.config.transport));
            }
        }
        for t in &new.trunks {
            for g in t.gateways.iter().filter(|g| g.held()) {
                names.hold((g.addr, t.config.transport));
            }
        }
        let gateways: usize = new.trunks.iter().map(|t| t.gateways.len()).sum();
        let text = format!(
            "{} trunk(s), {gateways} gateway(s), {kept} of them kept their state",
            new.trunks.len()
        );
        *self.current.lock(0) = Arc::new(new);
        text
    }
}

impl TrunkRef {
    /// The trunk's name.
    pub fn name(&self) -> &str {
        self.set.name(self.i)
    }

    /// Whether it hides the inside network.
    pub fn hides(&self) -> bool {
        self.set.hides(self.i)
    }

    /// Its gateway for `msg` (see [`TrunkSet::pick`]).
    pub fn pick(
        &self,
        msg: &Message<'_>,
        names: &NameTable,
        now: Instant,
        sticky: bool,
    ) -> Option<(SocketAddr, Route)> {
        self.set.pick(self.i, msg, names, now, sticky)
    }
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

impl TrunkSet {
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
                    gateways: c.gateways.iter().map(Gateway::new).collect(),
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

    /// Whether `ip` is a gateway of any trunk.
    pub fn is_gateway(&self, ip: IpAddr) -> bool {
        self.trunks
            .iter()
            .any(|t| t.gateways.iter().any(|g| g.addr.ip() == ip))
    }

    /// Whether `ip` is a gateway of a trunk that hides the inside (a call
    /// it begins is hidden on its way back).
    pub fn hides_source(&self, ip: IpAddr) -> bool {
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
            resolve_every: None,
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

    fn picks(t: &TrunkSet, names: &NameTable, n: usize, sticky: bool) -> Vec<u16> {
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
        let t = TrunkSet::new(
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
        let rr = TrunkSet::new(
            &[trunk(
                "rr",
                Algorithm::RoundRobin,
                vec![gw(1, 1, 0), gw(2, 9, 0)],
            )],
            &names,
        );
        assert_eq!(picks(&rr, &names, 4, false), [1, 2, 1, 2]);
        let pri = TrunkSet::new(
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
        let hash = TrunkSet::new(
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
        let t = TrunkSet::new(
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

    #[test]
    fn a_new_generation_keeps_the_state_of_the_gateways_that_stay() {
        let names = NameTable::new(&DnsSettings::default());
        let t = Trunks::new(
            &[trunk(
                "carrier",
                Algorithm::Weighted,
                vec![gw(1, 1, 0), gw(2, 1, 0)],
            )],
            &names,
        );
        // Gateway 2 goes down (held), gateway 1 is drained.
        t.probed("carrier", gw(2, 1, 0).addr, false, &names);
        assert!(
            !t.probed("carrier", gw(2, 1, 0).addr, false, &names)
                .unwrap()
                .up
        );
        t.drain("carrier", gw(1, 1, 0).addr, true, &names).unwrap();
        // Reloaded: 1 and 2 stay (new weights), 3 is new; another trunk
        // appears.
        let mut other = trunk("other", Algorithm::Weighted, vec![gw(4, 1, 0)]);
        other.prefixes = vec!["+44".into()];
        other.domains = vec![];
        other.default = true;
        let said = t.replace(
            &[
                trunk(
                    "carrier",
                    Algorithm::Weighted,
                    vec![gw(1, 5, 0), gw(2, 5, 0), gw(3, 1, 0)],
                ),
                other.clone(),
            ],
            &names,
        );
        assert_eq!(said, "2 trunk(s), 4 gateway(s), 2 of them kept their state");
        let s = t.status();
        let states: Vec<_> = s[0]["gateways"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                (
                    g["weight"].as_u64().unwrap(),
                    g["state"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            states,
            [(5, "drained".into()), (5, "down".into()), (1, "up".into())]
        );
        let now = Instant::now();
        assert!(
            names.is_down(gw(2, 1, 0).addr, Transport::Udp, now),
            "still held"
        );
        assert!(
            names.is_down(gw(1, 1, 0).addr, Transport::Udp, now),
            "still drained"
        );
        // Only gateway 3 takes calls; a request found the generation it
        // routes with.
        let bytes = invite("c1");
        let m = Message::parse(&bytes).unwrap();
        let r = t.for_number("+12155550100").unwrap();
        assert_eq!(r.pick(&m, &names, now, false).unwrap().0.port(), 3);
        // Removed: the trunk's route goes nowhere, its holds end.
        t.replace(&[other], &names);
        assert!(!names.is_down(gw(2, 1, 0).addr, Transport::Udp, now));
        assert_eq!(
            names.alternative("trunk.carrier", None, Transport::Udp, now),
            None
        );
        assert_eq!(t.for_number("+12155550100").unwrap().name(), "other");
    }

    #[test]
    fn a_gateway_named_by_dns_keeps_its_state_at_a_new_address() {
        let names = NameTable::new(&DnsSettings::default());
        let mut named = gw(7, 1, 0);
        named.name = Some("gw.carrier.test".into());
        let t = Trunks::new(
            &[trunk("c", Algorithm::Weighted, vec![named.clone()])],
            &names,
        );
        t.drain("c", named.addr, true, &names).unwrap();
        named.addr = SocketAddr::from(([192, 0, 2, 77], 7));
        t.replace(
            &[trunk("c", Algorithm::Weighted, vec![named.clone()])],
            &names,
        );
        let s = t.status();
        assert_eq!(s[0]["gateways"][0]["address"], "192.0.2.77:7");
        assert_eq!(s[0]["gateways"][0]["state"], "drained");
        let now = Instant::now();
        assert!(
            !names.is_down(gw(7, 1, 0).addr, Transport::Udp, now),
            "the old address is free"
        );
        assert!(names.is_down(named.addr, Transport::Udp, now));
    }
}
