//! Domain names as next hops (RFC 3263): the table of what names lead to,
//! which the workers read from memory (the hot path never waits for DNS)
//! and the driver's resolver fills.
//!
//! A name not known yet becomes an external request: [`NameTable::find`]
//! queues it (the core tells its driver to wake the resolver) and the
//! request that needs it is [parked](NameTable::park) here (in a
//! `proto::parked::Waiting`, bounded in count and bytes). When the resolver [finishes](NameTable::finish) the
//! name, it takes the parked requests and hands them in again; they then
//! find the answer here. Addresses that failed are skipped for a while
//! (RFC 3263 §4.3), so a stateful proxy tries the next one.
//!
//! One source (as the guard counts it: an IPv4 address, an IPv6 /64) may
//! have at most a sixteenth of the names being resolved and of the
//! requests waiting, so one party cannot fill the resolver and leave
//! every other call to a name not yet known a 503.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use sip_core::Transport;

use crate::config::DnsSettings;
use crate::proto::guard::SourceKey;
use crate::proto::parked::{make_room, Bounds, Parked, Refused, Waiting};
use crate::shards::{Current, Shards};

/// Names being resolved at once; past it requests for new names get 503.
pub const MAX_JOBS: usize = 128;
/// Names one source may have being resolved at once (its share of
/// `MAX_JOBS`); past it its requests for new names get 503.
pub const MAX_JOBS_PER_SOURCE: usize = MAX_JOBS / 16;
/// Requests waiting on one name.
pub const MAX_PARKED_PER_NAME: usize = 32;
/// Requests waiting on all names, and their bytes.
pub const MAX_PARKED: usize = 1024;
/// Requests of one source waiting on names (its share of `MAX_PARKED`).
pub const MAX_PARKED_PER_SOURCE: usize = MAX_PARKED / 16;
/// Bytes of the requests waiting on all names.
pub const MAX_PARKED_BYTES: usize = 4 << 20;
/// Answers kept.
pub const MAX_CACHE: usize = 4096;
/// Addresses remembered as failed.
pub const MAX_DOWN: usize = 1024;
/// Longest a 503's Retry-After keeps an address skipped, in seconds (a
/// next hop cannot bench itself for days by a typo or on purpose).
pub const MAX_RETRY_AFTER: u32 = 3600;

/// What the table knows of where a domain name leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// There.
    At(SocketAddr),
    /// Nowhere: the name does not resolve (or not now).
    Nowhere,
    /// Being resolved: a request for it can be [parked](NameTable::park).
    Resolving,
    /// Being resolved from this question on: the resolver must be woken
    /// to start on it (then as [`Found::Resolving`]).
    Asked,
    /// Not known, and too many names are being resolved to start on it.
    Busy,
}

/// A next hop named by a domain name: what a stateful proxy asks again
/// for another address when the one it used fails (RFC 3263 §4.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The name, as the URI gives it.
    pub name: String,
    /// The URI's port, if any (none: SRV records are asked).
    pub port: Option<u16>,
    /// The transport the request goes over.
    pub transport: Transport,
}

/// What became of a request [parked](NameTable::park) for a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Park {
    /// It waits: the resolver hands it in again.
    Parked,
    /// The resolution was over before it could wait: this is its outcome.
    Known(Found),
    /// No room for it.
    Full,
}

/// A destination asked for: lower-case name, the URI's port, transport.
pub type Key = (String, Option<u16>, Transport);

/// The table's key for `name` (any case, perhaps with the root's dot).
pub fn key_of(name: &str, port: Option<u16>, transport: Transport) -> Key {
    (
        name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase(),
        port,
        transport,
    )
}

/// The port a transport's URI without one means (RFC 3261 §19.1.2).
pub fn default_port(transport: Transport) -> u16 {
    if transport == Transport::Tls {
        5061
    } else {
        5060
    }
}

/// How long, in seconds, a failed address is skipped: as a 503's
/// Retry-After asks (RFC 3261 §21.5.4), within 1 s to `MAX_RETRY_AFTER`,
/// else the configured time.
pub fn skip_for(configured: u32, retry_after: Option<u32>) -> u32 {
    retry_after.map_or(configured, |s| s.clamp(1, MAX_RETRY_AFTER))
}

/// How many requests may wait for names.
const BOUNDS: Bounds = Bounds {
    questions: MAX_JOBS,
    per_question: MAX_PARKED_PER_NAME,
    requests: MAX_PARKED,
    bytes: MAX_PARKED_BYTES,
    questions_per_source: MAX_JOBS_PER_SOURCE,
    requests_per_source: MAX_PARKED_PER_SOURCE,
};

#[derive(Debug)]
struct State {
    /// Where each destination leads, in the order to try (empty:
    /// nowhere), until when.
    cache: HashMap<Key, (Vec<SocketAddr>, Instant)>,
    /// Addresses that failed lately, and until when they are skipped.
    down: HashMap<(SocketAddr, Transport), Instant>,
    /// Destinations being resolved, with the requests waiting on them
    /// (and the shares of the sources that asked and wait).
    pending: Waiting<Key>,
    /// Destinations the resolver has not started on.
    fresh: Vec<Key>,
    /// The resolver has stopped: nothing more waits.
    closed: bool,
    /// Names whose addresses are configured, not resolved (trunks).
    statics: HashMap<Key, Vec<SocketAddr>>,
    /// Addresses held down until released (a trunk's gateway whose
    /// probes go unanswered).
    held: std::collections::HashSet<(SocketAddr, Transport)>,
}

impl Default for State {
    fn default() -> Self {
        Self {
            cache: HashMap::new(),
            down: HashMap::new(),
            pending: Waiting::new(BOUNDS),
            fresh: Vec::new(),
            closed: false,
            statics: HashMap::new(),
            held: std::collections::HashSet::new(),
        }
    }
}

/// Where names lead, shared by every worker; see the module documentation.
#[derive(Debug)]
pub struct NameTable {
    enabled: bool,
    max_ttl: u32,
    skip_failed_for: u32,
    hosts: Current<HashMap<String, IpAddr>>,
    state: Shards<State>,
}

impl NameTable {
    /// An empty table resolving as `settings` say, with no hosts file.
    pub fn new(settings: &DnsSettings) -> Self {
        Self {
            enabled: settings.enabled,
            max_ttl: settings.max_ttl,
            skip_failed_for: settings.skip_failed_for,
            hosts: Current::new(HashMap::new()),
            state: Shards::new(1, State::default),
        }
    }

    /// Replaces the names the hosts file gives (read first, before DNS).
    pub fn set_hosts(&self, hosts: HashMap<String, IpAddr>) {
        self.hosts.set(hosts);
    }

    /// The address the hosts file gives `name` (lower case), if any.
    pub fn host(&self, name: &str) -> Option<IpAddr> {
        self.hosts.get().get(name).copied()
    }

    /// Where a request for `name` (at `port`, if the URI gives one) over
    /// `transport` goes at `now`; a name not known yet is queued for the
    /// resolver ([`Found::Asked`]), within the share of the source
    /// `asker` names (asked only then; `None`: one that carries many
    /// parties' requests, held to no share).
    pub fn find(
        &self,
        name: &str,
        port: Option<u16>,
        transport: Transport,
        now: Instant,
        asker: impl FnOnce() -> Option<SourceKey>,
    ) -> Found {
        let key = key_of(name, port, transport);
        if let Some(ip) = self.host(&key.0) {
            return Found::At(SocketAddr::new(ip, port.unwrap_or(default_port(transport))));
        }
        if !self.enabled {
            return Found::Nowhere;
        }
        let mut st = self.state.lock(0);
        match st.cache.get(&key) {
            Some((to, until)) if *until > now => return st.lead(to, transport, now),
            Some(_) => {
                st.cache.remove(&key);
            }
            None => {}
        }
        if st.pending.asked(&key) {
            return Found::Resolving;
        }
        if st.closed || !st.pending.ask(key.clone(), asker()) {
            return Found::Busy;
        }
        st.fresh.push(key);
        Found::Asked
    }

    /// Holds `request` until the resolution of `name` that
    /// [`find`](Self::find) started is over, within the share of `asker`
    /// (its source; `None`: held to no share).
    pub fn park(
        &self,
        (name, port, transport): (&str, Option<u16>, Transport),
        request: Parked,
        asker: Option<SourceKey>,
        now: Instant,
    ) -> Park {
        let key = key_of(name, port, transport);
        let mut st = self.state.lock(0);
        if st.closed {
            return Park::Full;
        }
        match st.pending.park(&key, request, asker) {
            Ok(()) => Park::Parked,
            Err(Refused::Full) => Park::Full,
            // Resolved (or given up) since `find`: its outcome.
            Err(Refused::NotAsked) => match st.cache.get(&key) {
                Some((to, until)) if *until > now => Park::Known(st.lead(to, transport, now)),
                _ => Park::Full,
            },
        }
    }

    /// Sending to `to` over `transport` failed at `now` (refused, timed
    /// out, or answered 503): it is skipped while other addresses are
    /// known, for the configured time or, given a 503's Retry-After, for
    /// that long (RFC 3263 §4.3, RFC 3261 §21.5.4). Returns for how many
    /// seconds when it was not skipped already (worth a log line).
    pub fn failed(
        &self,
        to: SocketAddr,
        transport: Transport,
        retry_after: Option<u32>,
        now: Instant,
    ) -> Option<u32> {
        let skip = skip_for(self.skip_failed_for, retry_after);
        let until = now + Duration::from_secs(u64::from(skip));
        let was = self.state.lock(0).mark_down((to, transport), until, now);
        was.is_none_or(|t| t <= now).then_some(skip)
    }

    /// The first address, in RFC 3263 order, that `name` (at `port`, over
    /// `transport`) leads to and that has not failed lately; `None` when
    /// there is none.
    pub fn alternative(
        &self,
        name: &str,
        port: Option<u16>,
        transport: Transport,
        now: Instant,
    ) -> Option<SocketAddr> {
        let key = key_of(name, port, transport);
        let st = self.state.lock(0);
        if let Some(to) = st.statics.get(&key) {
            return st.first_up(to, transport, now);
        }
        match st.cache.get(&key) {
            Some((to, until)) if *until > now => st.first_up(to, transport, now),
            _ => None,
        }
    }

    /// `name` leads to `to` (in order) for good: a trunk's gateways, which
    /// a transaction fails over between like a name's addresses.
    pub fn set_static(&self, name: &str, transport: Transport, to: Vec<SocketAddr>) {
        let key = key_of(name, None, transport);
        self.state.lock(0).statics.insert(key, to);
    }

    /// Holds `hop` down until [`release`](Self::release)d.
    pub fn hold(&self, hop: (SocketAddr, Transport)) {
        self.state.lock(0).held.insert(hop);
    }

    /// Ends a [`hold`](Self::hold), and any skip a failure started: the
    /// address answers again.
    pub fn release(&self, hop: (SocketAddr, Transport)) {
        let mut st = self.state.lock(0);
        st.held.remove(&hop);
        st.down.remove(&hop);
    }

    /// Whether `to` over `transport` is held down or failed lately.
    pub fn is_down(&self, to: SocketAddr, transport: Transport, now: Instant) -> bool {
        let st = self.state.lock(0);
        st.held.contains(&(to, transport))
            || st
                .down
                .get(&(to, transport))
                .is_some_and(|until| *until > now)
    }

    /// The destinations queued since the last call: the resolver's work.
    pub fn take_asked(&self) -> Vec<Key> {
        std::mem::take(&mut self.state.lock(0).fresh)
    }

    /// Records where `key` leads (for `ttl` seconds, within the
    /// configured bounds) and takes the requests waiting on it.
    pub fn finish(&self, key: &Key, to: Vec<SocketAddr>, ttl: u32, now: Instant) -> Vec<Parked> {
        let ttl = ttl.min(self.max_ttl).max(1);
        let mut st = self.state.lock(0);
        make_room(&mut st.cache, MAX_CACHE, now, Vec::is_empty);
        st.cache
            .insert(key.clone(), (to, now + Duration::from_secs(u64::from(ttl))));
        st.pending.answered(key)
    }

    /// The resolver stops: nothing more is queued or parked, and the
    /// requests still waiting are returned (to be answered, not dropped).
    pub fn close(&self) -> Vec<Parked> {
        let mut st = self.state.lock(0);
        st.closed = true;
        st.fresh.clear();
        st.pending.drain()
    }

    /// Requests waiting for names, and their bytes.
    pub fn parked(&self) -> (usize, usize) {
        self.state.lock(0).pending.totals()
    }
}

impl State {
    /// Skips `hop` until `until`; returns until when it was skipped
    /// before. The table keeps at most `MAX_DOWN` addresses: when full,
    /// the lapsed ones go, and a new address finding it still full is
    /// not remembered (it is tried as if up).
    fn mark_down(
        &mut self,
        hop: (SocketAddr, Transport),
        until: Instant,
        now: Instant,
    ) -> Option<Instant> {
        if self.down.len() >= MAX_DOWN {
            self.down.retain(|_, t| *t > now);
        }
        let was = self.down.get(&hop).copied();
        if self.down.len() < MAX_DOWN || was.is_some() {
            self.down.insert(hop, until);
        }
        was
    }

    /// Of `to` (in order), the first address over `transport` that has
    /// not failed lately.
    fn first_up(
        &self,
        to: &[SocketAddr],
        transport: Transport,
        now: Instant,
    ) -> Option<SocketAddr> {
        to.iter().copied().find(|a| {
            !self.held.contains(&(*a, transport))
                && self
                    .down
                    .get(&(*a, transport))
                    .is_none_or(|until| *until <= now)
        })
    }

    /// Where a cached destination leads: the first address that has not
    /// failed lately, else the first (all failed: try again anyway).
    fn lead(&self, to: &[SocketAddr], transport: Transport, now: Instant) -> Found {
        match self.first_up(to, transport, now).or(to.first().copied()) {
            Some(a) => Found::At(a),
            None => Found::Nowhere,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> NameTable {
        NameTable::new(&DnsSettings::default())
    }

    #[test]
    fn a_name_is_asked_once_parks_its_requests_and_hands_them_back_resolved() {
        let t = table();
        let now = Instant::now();
        let src: SocketAddr = "192.0.2.1:5060".parse().unwrap();
        assert_eq!(
            t.find("Gw.Test.", None, Transport::Udp, now, || None),
            Found::Asked
        );
        assert_eq!(
            t.find("gw.test", None, Transport::Udp, now, || None),
            Found::Resolving
        );
        let invite = Parked {
            message: b"INVITE".to_vec(),
            src,
            arrived: Transport::Tcp,
        };
        let park = t.park(("gw.test", None, Transport::Udp), invite, None, now);
        assert_eq!(park, Park::Parked);
        assert_eq!(t.parked(), (1, 6));
        let asked = t.take_asked();
        assert_eq!(asked, [key_of("gw.test", None, Transport::Udp)]);
        assert!(t.take_asked().is_empty());
        let a: SocketAddr = "192.0.2.9:5080".parse().unwrap();
        let b: SocketAddr = "192.0.2.10:5080".parse().unwrap();
        let back = t.finish(&asked[0], vec![a, b], 60, now);
        assert_eq!(back[0].message, b"INVITE");
        assert_eq!(back[0].arrived, Transport::Tcp);
        assert_eq!(t.parked(), (0, 0));
        assert_eq!(
            t.find("gw.test", None, Transport::Udp, now, || None),
            Found::At(a)
        );
        // A failed address is skipped while another is known.
        assert_eq!(t.failed(a, Transport::Udp, None, now), Some(30));
        assert_eq!(t.failed(a, Transport::Udp, None, now), None);
        assert_eq!(t.alternative("gw.test", None, Transport::Udp, now), Some(b));
        assert_eq!(
            t.find("gw.test", None, Transport::Udp, now, || None),
            Found::At(b)
        );
        // The answer's TTL is over: asked again.
        let later = now + Duration::from_secs(61);
        assert_eq!(
            t.find("gw.test", None, Transport::Udp, later, || None),
            Found::Asked
        );
    }

    #[test]
    fn parking_is_bounded_and_a_closed_table_hands_back_what_waits() {
        let t = table();
        let now = Instant::now();
        let src: SocketAddr = "192.0.2.1:5060".parse().unwrap();
        assert_eq!(
            t.find("a.test", None, Transport::Udp, now, || None),
            Found::Asked
        );
        let request = |bytes: &[u8]| Parked {
            message: bytes.to_vec(),
            src,
            arrived: Transport::Udp,
        };
        let park = || t.park(("a.test", None, Transport::Udp), request(b"x"), None, now);
        for _ in 0..MAX_PARKED_PER_NAME {
            assert_eq!(park(), Park::Parked);
        }
        assert_eq!(park(), Park::Full);
        let big = vec![b'x'; MAX_PARKED_BYTES];
        assert_eq!(
            t.find("b.test", None, Transport::Udp, now, || None),
            Found::Asked
        );
        let p = t.park(("b.test", None, Transport::Udp), request(&big), None, now);
        assert_eq!(p, Park::Full);
        for i in 0..MAX_JOBS - 2 {
            let name = format!("n{i}.test");
            assert_eq!(
                t.find(&name, None, Transport::Udp, now, || None),
                Found::Asked
            );
        }
        assert_eq!(
            t.find("more.test", None, Transport::Udp, now, || None),
            Found::Busy
        );
        assert_eq!(t.close().len(), MAX_PARKED_PER_NAME);
        assert_eq!(
            t.find("c.test", None, Transport::Udp, now, || None),
            Found::Busy
        );
        assert!(t.take_asked().is_empty());
    }

    #[test]
    fn a_source_holds_its_share_of_the_questions_until_they_are_answered() {
        let t = NameTable::new(&DnsSettings::default());
        let now = Instant::now();
        let ask = |name: &str, who| t.find(name, None, Transport::Udp, now, || who);
        let one = Some(SourceKey::of([192, 0, 2, 7].into(), 64));
        for i in 0..MAX_JOBS_PER_SOURCE {
            assert_eq!(ask(&format!("n{i}.test"), one), Found::Asked);
        }
        assert_eq!(ask("n0.test", one), Found::Resolving, "a name under way");
        assert_eq!(ask("more.test", one), Found::Busy, "past its share");
        let other = Some(SourceKey::of([192, 0, 2, 8].into(), 64));
        assert_eq!(ask("more.test", other), Found::Asked);
        assert_eq!(ask("carried.test", None), Found::Asked, "no share");
        // Its requests wait within its share of the waiting room.
        let src: SocketAddr = "192.0.2.7:5060".parse().unwrap();
        let park = |name: &str, who| {
            let request = Parked {
                message: b"x".to_vec(),
                src,
                arrived: Transport::Udp,
            };
            t.park((name, None, Transport::Udp), request, who, now)
        };
        let mut parked = 0;
        for i in 0..MAX_JOBS_PER_SOURCE {
            while park(&format!("n{i}.test"), one) == Park::Parked {
                parked += 1;
            }
        }
        assert_eq!(parked, MAX_PARKED_PER_SOURCE);
        assert_eq!(park("more.test", other), Park::Parked);
        assert_eq!(park("carried.test", None), Park::Parked, "no share");
        // An answer gives its asker's place back, and its requests'.
        let key = key_of("n0.test", None, Transport::Udp);
        let back = t.finish(&key, Vec::new(), 60, now);
        assert_eq!(ask("again.test", one), Found::Asked);
        assert_eq!(ask("again2.test", one), Found::Busy);
        for _ in 0..back.len() {
            assert_eq!(park("again.test", one), Park::Parked);
        }
        assert_eq!(park("again.test", one), Park::Full);
    }

    #[test]
    fn the_hosts_file_answers_first_and_a_table_without_dns_knows_nothing_else() {
        let t = NameTable::new(&DnsSettings {
            enabled: false,
            ..DnsSettings::default()
        });
        t.set_hosts(HashMap::from([(
            "gw.test".to_owned(),
            [192, 0, 2, 7].into(),
        )]));
        let now = Instant::now();
        assert_eq!(
            t.find("GW.test", None, Transport::Tls, now, || None),
            Found::At("192.0.2.7:5061".parse().unwrap())
        );
        assert_eq!(
            t.find("other.test", None, Transport::Udp, now, || None),
            Found::Nowhere
        );
    }

    #[test]
    fn the_failed_address_table_is_bounded() {
        let now = Instant::now();
        let hop = |n: usize| {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000 + n as u32);
            ((ip, 5060).into(), Transport::Udp)
        };
        let mut st = State::default();
        let soon = now + Duration::from_secs(1);
        let later = now + Duration::from_secs(30);
        for n in 0..MAX_DOWN {
            assert_eq!(
                st.mark_down(hop(n), if n < 10 { soon } else { later }, now),
                None
            );
        }
        // Full of live entries: a new address is not remembered, and a
        // known one is still refreshed.
        st.mark_down(hop(MAX_DOWN), later, now);
        assert_eq!(st.down.len(), MAX_DOWN);
        assert_eq!(
            st.first_up(&[hop(MAX_DOWN).0], Transport::Udp, now),
            Some(hop(MAX_DOWN).0)
        );
        assert_eq!(st.mark_down(hop(20), later, now), Some(later));
        // Once some lapse, they make room.
        let after = soon + Duration::from_millis(1);
        assert_eq!(st.mark_down(hop(MAX_DOWN), later, after), None);
        assert_eq!(st.down.len(), MAX_DOWN - 10 + 1);
        assert_eq!(st.first_up(&[hop(MAX_DOWN).0], Transport::Udp, after), None);
    }

    #[test]
    fn a_retry_after_sets_how_long_an_address_is_skipped_within_bounds() {
        assert_eq!(skip_for(30, None), 30);
        assert_eq!(skip_for(30, Some(120)), 120);
        assert_eq!(skip_for(30, Some(0)), 1);
        assert_eq!(skip_for(30, Some(u32::MAX)), MAX_RETRY_AFTER);
    }
}
