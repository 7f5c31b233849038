//! Per-source protection: a request rate limit (token bucket per IP) and a
//! temporary ban after repeated authentication failures, the two things
//! scanners such as SIPVicious trip first.
//!
//! State is sharded by IP and bounded: a flood of spoofed sources evicts
//! idle entries instead of growing memory.

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
        }
    }
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

#[derive(Debug, Clone, Copy)]
struct Source {
    tokens: f64,
    last_ms: u64,
    failures: u32,
    window_start: u64,
    banned_until: u64,
}

const SHARDS: usize = 16;

/// The per-source guard shared by all workers.
#[derive(Debug)]
pub struct Guard {
    cfg: GuardConfig,
    shards: Shards<HashMap<IpAddr, Source>>,
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

    fn shard(&self, ip: &IpAddr) -> impl std::ops::DerefMut<Target = HashMap<IpAddr, Source>> + '_ {
        self.shards.lock(self.hasher.hash_one(ip) as usize)
    }

    fn entry<'m>(
        &self,
        map: &'m mut HashMap<IpAddr, Source>,
        ip: IpAddr,
        now_ms: u64,
    ) -> &'m mut Source {
        if !map.contains_key(&ip) && map.len() >= self.cfg.max_sources / SHARDS {
            // Evict sources that are neither banned nor recently active.
            let now_s = now_ms / 1000;
            map.retain(|_, s| s.banned_until > now_s || now_ms.saturating_sub(s.last_ms) < 10_000);
            if map.len() >= self.cfg.max_sources / SHARDS {
                map.retain(|_, s| s.banned_until > now_s);
            }
        }
        map.entry(ip).or_insert(Source {
            tokens: f64::from(self.cfg.burst),
            last_ms: now_ms,
            failures: 0,
            window_start: now_ms / 1000,
            banned_until: 0,
        })
    }

    /// Decides whether to process a request from `ip` at `now_ms` (Unix milliseconds).
    pub fn admit(&self, ip: IpAddr, now_ms: u64) -> Verdict {
        let limit = self.cfg.rate > 0
            && !(self.cfg.exempt_loopback && ip.is_loopback())
            && !self.is_trusted(ip);
        if !limit && self.cfg.max_auth_failures == 0 {
            return Verdict::Admit;
        }
        if !limit && now_ms / 1000 >= self.bans_until.load(Ordering::Relaxed) {
            return Verdict::Admit;
        }
        let mut map = self.shard(&ip);
        if !limit && !map.contains_key(&ip) {
            return Verdict::Admit;
        }
        let s = self.entry(&mut map, ip, now_ms);
        if s.banned_until > now_ms / 1000 {
            return Verdict::Banned;
        }
        if !limit {
            return Verdict::Admit;
        }
        let elapsed = now_ms.saturating_sub(s.last_ms) as f64 / 1000.0;
        s.last_ms = now_ms;
        s.tokens = (s.tokens + elapsed * f64::from(self.cfg.rate)).min(f64::from(self.cfg.burst));
        if s.tokens >= 1.0 {
            s.tokens -= 1.0;
            Verdict::Admit
        } else {
            Verdict::Limited
        }
    }

    /// Records a failed authentication; returns true if the source is now banned.
    pub fn auth_failed(&self, ip: IpAddr, now_ms: u64) -> bool {
        if self.cfg.max_auth_failures == 0 {
            return false;
        }
        let now_s = now_ms / 1000;
        let mut map = self.shard(&ip);
        let s = self.entry(&mut map, ip, now_ms);
        if now_s >= s.window_start + self.cfg.failure_window {
            s.window_start = now_s;
            s.failures = 0;
        }
        s.failures += 1;
        if s.failures >= self.cfg.max_auth_failures {
            s.banned_until = now_s + self.cfg.ban_seconds;
            s.failures = 0;
            self.bans_until.fetch_max(s.banned_until, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Ends the bans that ran out by `now_s` and returns their sources, so
    /// the driver can count and log each lifting once.
    pub fn lift_expired(&self, now_s: u64) -> Vec<IpAddr> {
        let mut lifted = Vec::new();
        for mut s in self.shards.each() {
            for (ip, e) in s.iter_mut() {
                if e.banned_until != 0 && e.banned_until <= now_s {
                    e.banned_until = 0;
                    lifted.push(*ip);
                }
            }
        }
        lifted.sort();
        lifted
    }

    /// Lifts `ip`'s ban at once (the operator's unban), forgetting its
    /// failures too; `false` when it was not banned at `now_s`.
    pub fn unban(&self, ip: IpAddr, now_s: u64) -> bool {
        let mut map = self.shard(&ip);
        match map.get_mut(&ip) {
            Some(e) if e.banned_until > now_s => {
                e.banned_until = 0;
                e.failures = 0;
                true
            }
            _ => false,
        }
    }

    /// Sources banned at `now_s` (for the operator view).
    pub fn banned(&self, now_s: u64) -> Vec<(IpAddr, u64)> {
        let mut v = Vec::new();
        for s in self.shards.each() {
            v.extend(
                s.iter()
                    .filter(|(_, e)| e.banned_until > now_s)
                    .map(|(ip, e)| (*ip, e.banned_until - now_s)),
            );
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
            .filter(|_| g.admit(a, 1_000) == Verdict::Admit)
            .count();
        assert_eq!(admitted, 5, "burst");
        assert_eq!(g.admit(a, 1_000), Verdict::Limited);
        assert_eq!(g.admit(a, 1_100), Verdict::Admit, "one token per 100 ms");
        assert_eq!(
            g.admit(ip("192.0.2.2"), 1_100),
            Verdict::Admit,
            "per source"
        );
        let lo = ip("127.0.0.1");
        assert!(
            (0..1000).all(|_| g.admit(lo, 1_000) == Verdict::Admit),
            "loopback exempt from the rate"
        );
        // Another node of the deployment forwards for many phones.
        let node = ip("192.0.2.9");
        g.set_trusted(vec![node]);
        assert!((0..1000).all(|_| g.admit(node, 1_000) == Verdict::Admit));
        assert_eq!(g.admit(a, 1_000), Verdict::Limited, "others still limited");
        g.set_trusted(Vec::new());
        let limited = (0..1000).filter(|_| g.admit(node, 1_000) != Verdict::Admit);
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
        assert!(!g.auth_failed(a, 10_000));
        assert!(!g.auth_failed(a, 11_000));
        assert!(g.auth_failed(a, 12_000));
        assert_eq!(
            g.admit(a, 12_000),
            Verdict::Banned,
            "bans apply to loopback too"
        );
        assert_eq!(g.banned(12), vec![(a, 100)]);
        assert_eq!(g.admit(a, 112_000), Verdict::Admit, "ban expires");
        assert!(g.lift_expired(111).is_empty(), "not yet");
        assert_eq!(
            g.lift_expired(112),
            vec![a],
            "each lifting is reported once"
        );
        assert!(g.lift_expired(113).is_empty());
        // Failures outside the window do not accumulate.
        let b = ip("192.0.2.9");
        assert!(!g.auth_failed(b, 0));
        assert!(!g.auth_failed(b, 30_000));
        assert!(!g.auth_failed(b, 70_000));
        assert_eq!(g.admit(b, 70_000), Verdict::Admit);
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
            let _ = g.admit(IpAddr::from((0x0a00_0000 + i).to_be_bytes()), 1_000);
        }
        let total: usize = g.shards.each().map(|s| s.len()).sum();
        assert!(total <= 64 + SHARDS, "{total}");
    }
}
