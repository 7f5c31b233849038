//! Per-source protection: a request rate limit (token bucket per IP) and a
//! temporary ban after repeated authentication failures, the two things
//! scanners such as SIPVicious trip first.
//!
//! State is sharded by IP and bounded: a flood of spoofed sources evicts
//! idle entries instead of growing memory.
//!
//! The limit and the ban cover what the offending party controls. Any
//! web page a visitor opens can connect a WebSocket from the visitor's
//! browser, send at will and answer nonces wrong (a browser is not a
//! blind spoofer: it reads the nonce). It must not thereby shut out every
//! SIP phone behind the visitor's NAT. So requests and failures over
//! WebSocket are counted apart ([`Scope::WebSocket`]): they spend their
//! own tokens and earn a ban from WebSocket only. Failures over a SIP
//! transport (UDP, TCP, TLS) ban the address on every transport. A client
//! that uses both gets twice the rate and the failures before it is shut
//! out everywhere; `[websocket] origins` keeps other sites' pages out
//! altogether.
//!
//! A source is what one party controls. An IPv4 address is one; over
//! IPv6 one end site is given a /48 to /64 (RFC 6177), and a host picks
//! any address in its /64 at will (RFC 8981's temporary addresses), so a
//! party held per address would rotate past every limit and ban. IPv6
//! sources are therefore counted by prefix ([`SourceKey`]; `[guard]
//! ipv6_prefix`, default 64), as the phones behind one IPv4 NAT are.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::shards::{Current, Shards};

/// Guard settings. The defaults are on.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardConfig {
    /// Requests per second allowed per source IP; 0 turns the limit off.
    pub rate: u32,
    /// Requests a source may send in a burst above the rate.
    pub burst: u32,
    /// Authentication failures within `failure_window` that trigger a ban; 0 turns bans off.
    pub max_auth_failures: u32,
    /// Window for counting failures, seconds.
    pub failure_window: u64,
    /// Ban length, seconds.
    pub ban_seconds: u64,
    /// Exempt loopback sources from the rate limit (local load tests);
    /// bans still apply to them.
    pub exempt_loopback: bool,
    /// Most sources tracked at once.
    pub max_sources: usize,
    /// Leading bits of an IPv6 address that name its source (32 to 128).
    pub ipv6_prefix: u8,
    /// Private-key decryptions a second one source may cause (PrivaSIP
    /// pseudonyms anyone can mint, anonymous enrollments), with a burst
    /// of twice that; 0 turns the limit off.
    pub decryption_rate: u32,
}

impl Default for GuardConfig {
    fn default() -> Self {
        Self {
            rate: 200,
            burst: 400,
            max_auth_failures: 10,
            failure_window: 60,
            ban_seconds: 600,
            exempt_loopback: true,
            max_sources: 100_000,
            ipv6_prefix: 64,
            decryption_rate: 50,
        }
    }
}

/// What a ban shuts out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Every request from the address.
    All,
    /// Requests over WebSocket from the address (failures over
    /// WebSocket; see the module documentation).
    WebSocket,
}

impl Scope {
    /// The scope failures over `transport` count toward.
    pub fn of(transport: sip_core::Transport) -> Self {
        use sip_core::Transport;
        match transport {
            Transport::Ws | Transport::Wss => Scope::WebSocket,
            _ => Scope::All,
        }
    }

    /// Its name in the operator's views and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::All => "all",
            Scope::WebSocket => "websocket",
        }
    }
}

/// The addresses counted as one source: an IPv4 address, or an IPv6
/// address's leading `bits` (its other bits zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceKey {
    /// The address, cut to its prefix.
    pub ip: IpAddr,
    /// The prefix's length (32 for IPv4).
    pub bits: u8,
}

impl SourceKey {
    /// The source `ip` belongs to when IPv6 sources are `v6_bits` long;
    /// an IPv4 address an IPv6 socket carries (`::ffff:a.b.c.d`) is the
    /// IPv4 one.
    pub fn of(ip: IpAddr, v6_bits: u8) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(a) => Self {
                ip: IpAddr::V4(a),
                bits: 32,
            },
            IpAddr::V6(a) => {
                let bits = v6_bits.min(128);
                let mask = u128::MAX.checked_shl(u32::from(128 - bits)).unwrap_or(0);
                Self {
                    ip: IpAddr::V6((u128::from(a) & mask).into()),
                    bits,
                }
            }
        }
    }
}

impl std::fmt::Display for SourceKey {
    /// The address, and `/bits` when it is an IPv6 prefix.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ip {
            IpAddr::V6(_) if self.bits < 128 => write!(f, "{}/{}", self.ip, self.bits),
            _ => write!(f, "{}", self.ip),
        }
    }
}

/// An address or an IPv6 prefix an operator typed (`2001:db8::7`,
/// `2001:db8::/64`): the address it names.
pub fn parse_source(text: &str) -> Result<IpAddr, String> {
    let (addr, bits) = match text.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (text, None),
    };
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| format!("{text:?}: not an IP address or IPv6 prefix"))?;
    match (ip, bits.map(str::parse::<u8>)) {
        (_, None) => Ok(ip),
        (IpAddr::V6(_), Some(Ok(b))) if b <= 128 => Ok(ip),
        (IpAddr::V4(_), Some(Ok(32))) => Ok(ip),
        _ => Err(format!(
            "{text:?}: a prefix length is 0 to 128 after an IPv6 address (32 after IPv4)"
        )),
    }
}

/// One ban in force, for the operator's view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ban {
    /// The source.
    pub source: SourceKey,
    /// What it shuts out.
    pub scope: Scope,
    /// Seconds until it is lifted.
    pub seconds_left: u64,
}

/// The decision for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Process it.
    Admit,
    /// Over the rate: drop it (UDP senders retransmit).
    Limited,
    /// The source is banned: drop it.
    Banned,
}

/// One scope's requests and failures from a source: its token bucket,
/// the failures counted toward its ban, and the ban.
#[derive(Debug, Clone, Copy)]
struct Tally {
    tokens: f64,
    /// When the bucket was last refilled (Unix milliseconds).
    refilled_ms: u64,
    failures: u32,
    window_start: u64,
    /// Unix seconds; 0 (or past) when not banned.
    banned_until: u64,
}

impl Tally {
    fn banned_at(&self, now_s: u64) -> bool {
        self.banned_until > now_s
    }

    /// Refills the bucket at `rate` a second up to `burst` by `now_ms`
    /// and takes a token from it; `false` when none is left.
    fn take(&mut self, now_ms: u64, rate: u32, burst: u32) -> bool {
        let elapsed = now_ms.saturating_sub(self.refilled_ms) as f64 / 1000.0;
        self.refilled_ms = now_ms;
        self.tokens = (self.tokens + elapsed * f64::from(rate)).min(f64::from(burst));
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }

    /// Lifts the ban and forgets the failures (the bucket stays).
    fn forgive(&mut self) {
        self.failures = 0;
        self.banned_until = 0;
    }
}

#[derive(Debug, Clone, Copy)]
struct Source {
    /// Over SIP transports; its ban shuts out everything.
    all: Tally,
    /// Over WebSocket; its ban shuts out WebSocket.
    web: Tally,
    /// Private-key decryptions (its bucket only).
    decrypt: Tally,
}

impl Source {
    fn tally(&mut self, scope: Scope) -> &mut Tally {
        match scope {
            Scope::All => &mut self.all,
            Scope::WebSocket => &mut self.web,
        }
    }

    fn banned_at(&self, now_s: u64) -> bool {
        self.all.banned_at(now_s) || self.web.banned_at(now_s)
    }

    /// Whether failures are counted toward a ban in either scope at
    /// `now_s` (within the window of `window` seconds).
    fn failing(&self, now_s: u64, window: u64) -> bool {
        [&self.all, &self.web]
            .iter()
            .any(|t| t.failures > 0 && now_s < t.window_start + window)
    }

    /// The last request's time, either scope (Unix milliseconds).
    fn last_ms(&self) -> u64 {
        self.all
            .refilled_ms
            .max(self.web.refilled_ms)
            .max(self.decrypt.refilled_ms)
    }

    /// Whether a request over a transport of `scope` is refused.
    fn shuts_out(&self, scope: Scope, now_s: u64) -> bool {
        self.all.banned_at(now_s) || scope == Scope::WebSocket && self.web.banned_at(now_s)
    }
}

const SHARDS: usize = 16;

/// The per-source guard shared by all workers.
#[derive(Debug)]
pub struct Guard {
    cfg: GuardConfig,
    shards: Shards<HashMap<SourceKey, Source>>,
    hasher: RandomState,
    /// The latest expiry (Unix seconds) of any ban: while it has passed, a
    /// source exempt from the rate limit is admitted without a lookup.
    bans_until: AtomicU64,
    /// Addresses exempt from the rate limit besides loopback: the other
    /// nodes sharing the location, which forward whole deployments'
    /// traffic (bans still apply).
    trusted: Current<Vec<IpAddr>>,
    any_trusted: std::sync::atomic::AtomicBool,
}

impl Guard {
    /// A guard with `cfg`.
    pub fn new(cfg: GuardConfig, hasher: RandomState) -> Self {
        Self {
            cfg,
            shards: Shards::new(SHARDS, HashMap::new),
            hasher,
            bans_until: AtomicU64::new(0),
            trusted: Current::new(Vec::new()),
            any_trusted: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether `ip` is held to per-source limits: not loopback while
    /// loopback is exempt, nor a trusted node.
    pub fn limits_source(&self, ip: IpAddr) -> bool {
        !(self.is_trusted(ip) || self.cfg.exempt_loopback && ip.is_loopback())
    }

    /// Replaces the addresses exempt from the rate limit (the other nodes
    /// of a deployment).
    pub fn set_trusted(&self, mut ips: Vec<IpAddr>) {
        ips.sort_unstable();
        ips.dedup();
        self.any_trusted.store(!ips.is_empty(), Ordering::Relaxed);
        self.trusted.set(ips);
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.any_trusted.load(Ordering::Relaxed) && self.trusted.get().binary_search(&ip).is_ok()
    }

    /// The settings.
    pub fn config(&self) -> &GuardConfig {
        &self.cfg
    }

    /// The source `ip` is counted as, here and by every per-source share
    /// (the replay tracker's nonces, a caller's dialogs).
    pub fn source_of(&self, ip: IpAddr) -> SourceKey {
        SourceKey::of(ip, self.cfg.ipv6_prefix)
    }

    fn shard(
        &self,
        key: &SourceKey,
    ) -> impl std::ops::DerefMut<Target = HashMap<SourceKey, Source>> + '_ {
        self.shards.lock(self.hasher.hash_one(key) as usize)
    }

    fn entry<'m>(
        &self,
        map: &'m mut HashMap<SourceKey, Source>,
        ip: SourceKey,
        now_ms: u64,
    ) -> &'m mut Source {
        let max = self.cfg.max_sources / SHARDS;
        if !map.contains_key(&ip) && map.len() >= max {
            // Evict sources that are neither banned, failing nor recently
            // active; then those only active. Failures take a nonce this
            // server issued, so a flood of spoofed sources is never
            // failing: it cannot wipe a guesser's count before its ban.
            let now_s = now_ms / 1000;
            let window = self.cfg.failure_window;
            let kept = |s: &Source| s.banned_at(now_s) || s.failing(now_s, window);
            map.retain(|_, s| kept(s) || now_ms.saturating_sub(s.last_ms()) < 10_000);
            if map.len() >= max {
                map.retain(|_, s| kept(s));
            }
            if map.len() >= max {
                map.retain(|_, s| s.banned_at(now_s));
            }
        }
        let fresh = Tally {
            tokens: f64::from(self.cfg.burst),
            refilled_ms: now_ms,
            failures: 0,
            window_start: now_ms / 1000,
            banned_until: 0,
        };
        map.entry(ip).or_insert(Source {
            all: fresh,
            web: fresh,
            decrypt: Tally {
                tokens: f64::from(self.decryption_burst()),
                ..fresh
            },
        })
    }

    /// Decides whether to process a request from `ip` over a transport of
    /// `scope` at `now_ms` (Unix milliseconds).
    pub fn admit(&self, ip: IpAddr, scope: Scope, now_ms: u64) -> Verdict {
        let limit = self.cfg.rate > 0
            && !(self.cfg.exempt_loopback && ip.is_loopback())
            && !self.is_trusted(ip);
        if !limit && self.cfg.max_auth_failures == 0 {
            return Verdict::Admit;
        }
        if !limit && now_ms / 1000 >= self.bans_until.load(Ordering::Relaxed) {
            return Verdict::Admit;
        }
        let key = self.source_of(ip);
        let mut map = self.shard(&key);
        if !limit && !map.contains_key(&key) {
            return Verdict::Admit;
        }
        let s = self.entry(&mut map, key, now_ms);
        if s.shuts_out(scope, now_ms / 1000) {
            return Verdict::Banned;
        }
        if !limit {
            return Verdict::Admit;
        }
        if s.tally(scope).take(now_ms, self.cfg.rate, self.cfg.burst) {
            Verdict::Admit
        } else {
            Verdict::Limited
        }
    }

    fn decryption_burst(&self) -> u32 {
        self.cfg.decryption_rate.saturating_mul(2)
    }

    /// Whether a request from `ip` may cost a private-key decryption at
    /// `now_ms` (`decryption_rate`); a source exempt from the limits
    /// always may. Each one allowed is spent.
    pub fn may_decrypt(&self, ip: IpAddr, now_ms: u64) -> bool {
        if self.cfg.decryption_rate == 0 || !self.limits_source(ip) {
            return true;
        }
        let key = self.source_of(ip);
        let mut map = self.shard(&key);
        let burst = self.decryption_burst();
        let source = self.entry(&mut map, key, now_ms);
        source.decrypt.take(now_ms, self.cfg.decryption_rate, burst)
    }

    /// Records a failed authentication over a transport of `scope`;
    /// returns true if the source is now banned in that scope.
    pub fn auth_failed(&self, ip: IpAddr, scope: Scope, now_ms: u64) -> bool {
        if self.cfg.max_auth_failures == 0 {
            return false;
        }
        let now_s = now_ms / 1000;
        let key = self.source_of(ip);
        let mut map = self.shard(&key);
        let t = self.entry(&mut map, key, now_ms).tally(scope);
        if now_s >= t.window_start + self.cfg.failure_window {
            t.window_start = now_s;
            t.failures = 0;
        }
        t.failures += 1;
        if t.failures >= self.cfg.max_auth_failures {
            t.banned_until = now_s + self.cfg.ban_seconds;
            t.failures = 0;
            self.bans_until.fetch_max(t.banned_until, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Ends the bans that ran out by `now_s` and returns them (source and
    /// scope), so the driver can count and log each lifting once.
    pub fn lift_expired(&self, now_s: u64) -> Vec<(SourceKey, Scope)> {
        let mut lifted = Vec::new();
        for mut s in self.shards.each() {
            for (ip, e) in s.iter_mut() {
                for scope in [Scope::All, Scope::WebSocket] {
                    let t = e.tally(scope);
                    if t.banned_until != 0 && t.banned_until <= now_s {
                        t.banned_until = 0;
                        lifted.push((*ip, scope));
                    }
                }
            }
        }
        lifted.sort();
        lifted
    }

    /// Lifts the bans of `ip`'s source at once (the operator's unban),
    /// forgetting its failures too; `false` when it was not banned at
    /// `now_s`.
    pub fn unban(&self, ip: IpAddr, now_s: u64) -> bool {
        let key = self.source_of(ip);
        let mut map = self.shard(&key);
        match map.get_mut(&key) {
            Some(e) if e.banned_at(now_s) => {
                e.all.forgive();
                e.web.forgive();
                true
            }
            _ => false,
        }
    }

    /// The bans in force at `now_s` (for the operator view): one per
    /// source and scope.
    pub fn banned(&self, now_s: u64) -> Vec<Ban> {
        let mut v = Vec::new();
        for mut s in self.shards.each() {
            for (ip, e) in s.iter_mut() {
                for scope in [Scope::All, Scope::WebSocket] {
                    let t = e.tally(scope);
                    if t.banned_at(now_s) {
                        v.push(Ban {
                            source: *ip,
                            scope,
                            seconds_left: t.banned_until - now_s,
                        });
                    }
                }
            }
        }
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Guard {
        fn new_for_test(cfg: GuardConfig) -> Self {
            Self::new(cfg, RandomState::new())
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("literal address")
    }

    #[test]
    fn token_bucket_limits_and_refills() {
        let g = Guard::new_for_test(GuardConfig {
            rate: 10,
            burst: 5,
            ..GuardConfig::default()
        });
        let a = ip("192.0.2.1");
        let admitted = (0..20)
            .filter(|_| g.admit(a, Scope::All, 1_000) == Verdict::Admit)
            .count();
        assert_eq!(admitted, 5, "burst");
        assert_eq!(g.admit(a, Scope::All, 1_000), Verdict::Limited);
        assert_eq!(
            g.admit(a, Scope::All, 1_100),
            Verdict::Admit,
            "one token per 100 ms"
        );
        assert_eq!(
            g.admit(ip("192.0.2.2"), Scope::All, 1_100),
            Verdict::Admit,
            "per source"
        );
        let lo = ip("127.0.0.1");
        assert!(
            (0..1000).all(|_| g.admit(lo, Scope::All, 1_000) == Verdict::Admit),
            "loopback exempt from the rate"
        );
        // Another node of the deployment forwards for many phones.
        let node = ip("192.0.2.9");
        g.set_trusted(vec![node]);
        assert!((0..1000).all(|_| g.admit(node, Scope::All, 1_000) == Verdict::Admit));
        assert_eq!(
            g.admit(a, Scope::All, 1_000),
            Verdict::Limited,
            "others still limited"
        );
        g.set_trusted(Vec::new());
        let limited = (0..1000).filter(|_| g.admit(node, Scope::All, 1_000) != Verdict::Admit);
        assert!(limited.count() > 900, "no longer trusted");
    }

    #[test]
    fn failures_ban_then_expire() {
        let g = Guard::new_for_test(GuardConfig {
            max_auth_failures: 3,
            failure_window: 60,
            ban_seconds: 100,
            ..GuardConfig::default()
        });
        let a = ip("127.0.0.1");
        assert!(!g.auth_failed(a, Scope::All, 10_000));
        assert!(!g.auth_failed(a, Scope::All, 11_000));
        assert!(g.auth_failed(a, Scope::All, 12_000));
        assert_eq!(
            g.admit(a, Scope::All, 12_000),
            Verdict::Banned,
            "bans apply to loopback too"
        );
        assert_eq!(
            g.banned(12),
            vec![Ban {
                source: SourceKey::of(a, 64),
                scope: Scope::All,
                seconds_left: 100
            }]
        );
        assert_eq!(
            g.admit(a, Scope::All, 112_000),
            Verdict::Admit,
            "ban expires"
        );
        assert!(g.lift_expired(111).is_empty(), "not yet");
        assert_eq!(
            g.lift_expired(112),
            vec![(SourceKey::of(a, 64), Scope::All)],
            "each lifting is reported once"
        );
        assert!(g.lift_expired(113).is_empty());
        // Failures outside the window do not accumulate.
        let b = ip("192.0.2.9");
        assert!(!g.auth_failed(b, Scope::All, 0));
        assert!(!g.auth_failed(b, Scope::All, 30_000));
        assert!(!g.auth_failed(b, Scope::All, 70_000));
        assert_eq!(g.admit(b, Scope::All, 70_000), Verdict::Admit);
    }

    #[test]
    fn failures_over_websocket_ban_websocket_only() {
        let g = Guard::new_for_test(GuardConfig {
            max_auth_failures: 2,
            ban_seconds: 100,
            ..GuardConfig::default()
        });
        // A page in a visitor's browser answers nonces wrong.
        let nat = ip("192.0.2.7");
        assert!(!g.auth_failed(nat, Scope::WebSocket, 1_000));
        assert!(g.auth_failed(nat, Scope::WebSocket, 2_000));
        assert_eq!(g.admit(nat, Scope::WebSocket, 2_000), Verdict::Banned);
        assert_eq!(
            g.admit(nat, Scope::All, 2_000),
            Verdict::Admit,
            "the phones behind the same address are not shut out"
        );
        let web = Ban {
            source: SourceKey::of(nat, 64),
            scope: Scope::WebSocket,
            seconds_left: 100,
        };
        assert_eq!(g.banned(2), vec![web]);
        // Its requests spend their own tokens: a flood over WebSocket
        // does not limit the phones.
        let limited = Guard::new_for_test(GuardConfig {
            rate: 10,
            burst: 5,
            ..GuardConfig::default()
        });
        let flood =
            (0..100).filter(|_| limited.admit(nat, Scope::WebSocket, 1_000) == Verdict::Admit);
        assert_eq!(flood.count(), 5);
        assert_eq!(limited.admit(nat, Scope::All, 1_000), Verdict::Admit);
        assert_eq!(
            limited.admit(nat, Scope::WebSocket, 1_000),
            Verdict::Limited
        );
        assert_eq!(
            limited.admit(nat, Scope::WebSocket, 1_100),
            Verdict::Admit,
            "refilled"
        );
        // Failures over SIP transports count apart, and ban everything.
        assert!(!g.auth_failed(nat, Scope::All, 3_000));
        assert!(g.auth_failed(nat, Scope::All, 4_000));
        assert_eq!(g.admit(nat, Scope::All, 4_000), Verdict::Banned);
        assert_eq!(g.admit(nat, Scope::WebSocket, 4_000), Verdict::Banned);
        assert_eq!(g.banned(4).len(), 2, "{:?}", g.banned(4));
        // Each ban runs out on its own; the operator's unban lifts both.
        assert_eq!(
            g.lift_expired(102),
            vec![(SourceKey::of(nat, 64), Scope::WebSocket)]
        );
        assert_eq!(g.admit(nat, Scope::WebSocket, 102_000), Verdict::Banned);
        assert!(g.unban(nat, 102));
        assert_eq!(g.admit(nat, Scope::All, 102_000), Verdict::Admit);
        assert!(g.banned(102).is_empty());
        // A source banned from WebSocket only is kept through eviction.
        let small = Guard::new_for_test(GuardConfig {
            max_auth_failures: 1,
            max_sources: SHARDS,
            ..GuardConfig::default()
        });
        assert!(small.auth_failed(nat, Scope::WebSocket, 0));
        for i in 0..1000u32 {
            let _ = small.admit(IpAddr::from((0x0a00_0000 + i).to_be_bytes()), Scope::All, 0);
        }
        assert_eq!(small.admit(nat, Scope::WebSocket, 0), Verdict::Banned);
    }

    /// A host picks any address in its /64 at will: rotating through
    /// them neither escapes the rate nor the ban, while another /64 is
    /// another source; with 128 each address counts alone.
    #[test]
    fn an_ipv6_source_is_its_prefix_so_rotating_addresses_escapes_nothing() {
        let g = Guard::new_for_test(GuardConfig {
            rate: 10,
            burst: 5,
            max_auth_failures: 3,
            ban_seconds: 100,
            exempt_loopback: false,
            ..GuardConfig::default()
        });
        let rotated = |i: u16| ip(&format!("2001:db8:7:1:{i:x}::{i:x}"));
        let admitted = (1..=20)
            .filter(|&i| g.admit(rotated(i), Scope::All, 1_000) == Verdict::Admit)
            .count();
        assert_eq!(admitted, 5, "one bucket for the /64");
        assert_eq!(
            g.admit(ip("2001:db8:7:2::1"), Scope::All, 1_000),
            Verdict::Admit
        );
        assert!(!g.auth_failed(rotated(30), Scope::All, 2_000));
        assert!(!g.auth_failed(rotated(31), Scope::All, 2_000));
        assert!(g.auth_failed(rotated(32), Scope::All, 2_000));
        assert_eq!(g.admit(rotated(33), Scope::All, 60_000), Verdict::Banned);
        let prefix = SourceKey::of(rotated(1), 64);
        assert_eq!(prefix.to_string(), "2001:db8:7:1::/64");
        assert_eq!(SourceKey::of(rotated(99), 64), prefix);
        assert_ne!(SourceKey::of(ip("2001:db8:7:2::1"), 64), prefix);
        assert_eq!(
            g.banned(60).iter().map(|b| b.source).collect::<Vec<_>>(),
            vec![prefix]
        );
        assert_eq!(
            g.admit(ip("2001:db8:7:2::1"), Scope::All, 60_000),
            Verdict::Admit
        );
        assert!(
            g.unban(rotated(77), 60),
            "any address of the source lifts it"
        );
        // Each address alone, when the operator says so.
        let each = Guard::new_for_test(GuardConfig {
            rate: 10,
            burst: 5,
            exempt_loopback: false,
            ipv6_prefix: 128,
            ..GuardConfig::default()
        });
        assert!((1..=20).all(|i| each.admit(rotated(i), Scope::All, 1_000) == Verdict::Admit));
        assert_eq!(
            SourceKey::of(rotated(1), 128).to_string(),
            "2001:db8:7:1:1::1"
        );
    }

    #[test]
    fn an_ipv4_address_over_ipv6_is_the_ipv4_source_and_typed_sources_parse() {
        let v4 = SourceKey::of(ip("::ffff:192.0.2.7"), 64);
        assert_eq!(v4, SourceKey::of(ip("192.0.2.7"), 64));
        assert_eq!((v4.to_string(), v4.bits), ("192.0.2.7".to_owned(), 32));
        assert_ne!(v4, SourceKey::of(ip("::ffff:192.0.2.8"), 64), "not one /64");
        assert_eq!(parse_source("2001:db8::/64"), Ok(ip("2001:db8::")));
        assert_eq!(parse_source("192.0.2.7"), Ok(ip("192.0.2.7")));
        assert_eq!(parse_source("192.0.2.7/32"), Ok(ip("192.0.2.7")));
        for bad in [
            "192.0.2.7/24",
            "2001:db8::/129",
            "2001:db8::/x",
            "alice",
            "",
        ] {
            let e = parse_source(bad).expect_err(bad);
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn a_source_spends_its_decryptions_at_their_rate_and_the_exempt_none() {
        let g = Guard::new_for_test(GuardConfig {
            decryption_rate: 5,
            ..GuardConfig::default()
        });
        let a = ip("192.0.2.1");
        let allowed = (0..100).filter(|_| g.may_decrypt(a, 1_000)).count();
        assert_eq!(allowed, 10, "a burst of twice the rate");
        assert!(g.may_decrypt(a, 1_200), "one per 200 ms");
        assert!(!g.may_decrypt(a, 1_200));
        assert!(g.may_decrypt(ip("192.0.2.2"), 1_200), "per source");
        assert_eq!(
            g.admit(a, Scope::All, 1_200),
            Verdict::Admit,
            "requests apart"
        );
        // One IPv6 /64 is one source.
        let spent = (1..=20u16)
            .filter(|i| g.may_decrypt(ip(&format!("2001:db8:9:1::{i:x}")), 1_000))
            .count();
        assert_eq!(spent, 10);
        let lo = ip("127.0.0.1");
        assert!(
            (0..100).all(|_| g.may_decrypt(lo, 1_000)),
            "exempt loopback"
        );
        let off = Guard::new_for_test(GuardConfig {
            decryption_rate: 0,
            ..GuardConfig::default()
        });
        assert!((0..100).all(|_| off.may_decrypt(a, 1_000)));
    }

    /// A guesser's failures outlive a flood of fresh (spoofed) sources
    /// that fills the table: they cannot be evicted to reset its count.
    #[test]
    fn a_flood_of_fresh_sources_does_not_wipe_a_guessers_failures() {
        let g = Guard::new_for_test(GuardConfig {
            max_auth_failures: 3,
            max_sources: 64,
            ..GuardConfig::default()
        });
        let guesser = ip("192.0.2.66");
        assert!(!g.auth_failed(guesser, Scope::All, 1_000));
        assert!(!g.auth_failed(guesser, Scope::All, 2_000));
        for i in 0..10_000u32 {
            let spoofed = IpAddr::from((0x0a00_0000 + i).to_be_bytes());
            let _ = g.admit(spoofed, Scope::All, 3_000);
        }
        assert!(
            g.auth_failed(guesser, Scope::All, 4_000),
            "the third failure bans"
        );
        let total: usize = g.shards.each().map(|s| s.len()).sum();
        assert!(total <= 64 + SHARDS, "{total}");
    }

    #[test]
    fn memory_is_bounded() {
        let g = Guard::new_for_test(GuardConfig {
            rate: 1,
            burst: 1,
            max_sources: 64,
            ..GuardConfig::default()
        });
        for i in 0..10_000u32 {
            let _ = g.admit(
                IpAddr::from((0x0a00_0000 + i).to_be_bytes()),
                Scope::All,
                1_000,
            );
        }
        let total: usize = g.shards.each().map(|s| s.len()).sum();
        assert!(total <= 64 + SHARDS, "{total}");
    }
}
