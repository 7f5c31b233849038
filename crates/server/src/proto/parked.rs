//! Requests parked on an external answer: a message the core cannot
//! decide on until something outside answers (a name resolved; next, a
//! media relay's SDP or a signer's certificate) waits here, keyed by the
//! question, and is handed in again once the answer is in. Bounded per
//! question and in all (count and bytes): past the bounds a request is
//! answered at once (503 with Retry-After) instead of waiting.
//!
//! One source (as the guard counts it: an IPv4 address, an IPv6 /64) may
//! have asked at most `questions_per_source` of the questions under way
//! and parked at most `requests_per_source` of the requests waiting, so
//! one party asking slow questions cannot leave every other party's
//! request a 503. A source that carries many parties' requests (a peer
//! proxy, a trunk's gateway) is passed as `None` and held to no share.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::SocketAddr;

use sip_core::Transport;

use crate::proto::guard::SourceKey;

/// A request waiting for an answer: what is handed in again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parked {
    /// The request as it arrived.
    pub message: Vec<u8>,
    /// Its source.
    pub src: SocketAddr,
    /// The transport it arrived over.
    pub arrived: Transport,
}

/// How much may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Questions asked at once.
    pub questions: usize,
    /// Requests waiting on one question.
    pub per_question: usize,
    /// Requests waiting in all.
    pub requests: usize,
    /// Their bytes in all.
    pub bytes: usize,
    /// Questions one source may have under way.
    pub questions_per_source: usize,
    /// Requests one source may have waiting.
    pub requests_per_source: usize,
}

/// Why a request could not wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Nobody asked this question (or its answer is in already).
    NotAsked,
    /// No room.
    Full,
}

/// One question under way: who asked it, and who waits on it.
#[derive(Debug, Default)]
struct Question {
    asker: Option<SourceKey>,
    parked: Vec<Parked>,
    parkers: Vec<SourceKey>,
}

/// The questions asked outside and the requests waiting on each.
#[derive(Debug)]
pub struct Waiting<K> {
    by_question: HashMap<K, Question>,
    requests: usize,
    bytes: usize,
    bounds: Bounds,
    /// Questions under way and requests waiting, per source with a share.
    asked_by: HashMap<SourceKey, usize>,
    parked_by: HashMap<SourceKey, usize>,
}

impl<K: Eq + Hash> Waiting<K> {
    /// Nothing asked yet.
    pub fn new(bounds: Bounds) -> Self {
        Self {
            by_question: HashMap::new(),
            requests: 0,
            bytes: 0,
            bounds,
            asked_by: HashMap::new(),
            parked_by: HashMap::new(),
        }
    }

    /// Whether `question` was asked and is not answered yet.
    pub fn asked(&self, question: &K) -> bool {
        self.by_question.contains_key(question)
    }

    /// Asks `question` for `asker` (its source; `None`: held to no share),
    /// so its requests may wait from now on; `false` when there is no room
    /// for another question, in all or in `asker`'s share. A question
    /// already under way is not asked again (`true`).
    pub fn ask(&mut self, question: K, asker: Option<SourceKey>) -> bool {
        if self.asked(&question) {
            return true;
        }
        let over_share = asker.is_some_and(|a| {
            self.asked_by.get(&a).copied().unwrap_or(0) >= self.bounds.questions_per_source
        });
        if over_share || self.by_question.len() >= self.bounds.questions {
            return false;
        }
        if let Some(a) = asker {
            *self.asked_by.entry(a).or_default() += 1;
        }
        self.by_question.insert(
            question,
            Question {
                asker,
                ..Question::default()
            },
        );
        true
    }

    /// Parks `request` of `parker` (its source; `None`: held to no share)
    /// until `question` is answered.
    pub fn park(
        &mut self,
        question: &K,
        request: Parked,
        parker: Option<SourceKey>,
    ) -> Result<(), Refused> {
        let over_share = parker.is_some_and(|a| {
            self.parked_by.get(&a).copied().unwrap_or(0) >= self.bounds.requests_per_source
        });
        let full = over_share
            || self.requests >= self.bounds.requests
            || self.bytes + request.message.len() > self.bounds.bytes;
        let waiting = self
            .by_question
            .get_mut(question)
            .ok_or(Refused::NotAsked)?;
        if full || waiting.parked.len() >= self.bounds.per_question {
            return Err(Refused::Full);
        }
        self.requests += 1;
        self.bytes += request.message.len();
        waiting.parked.push(request);
        if let Some(a) = parker {
            waiting.parkers.push(a);
            *self.parked_by.entry(a).or_default() += 1;
        }
        Ok(())
    }

    /// `question` is answered: the requests that waited on it. Its
    /// asker's share, and those of the requests, are free again.
    pub fn answered(&mut self, question: &K) -> Vec<Parked> {
        let Some(q) = self.by_question.remove(question) else {
            return Vec::new();
        };
        if let Some(a) = q.asker {
            give_back(&mut self.asked_by, a);
        }
        for a in q.parkers {
            give_back(&mut self.parked_by, a);
        }
        self.requests -= q.parked.len();
        self.bytes -= q.parked.iter().map(|p| p.message.len()).sum::<usize>();
        q.parked
    }

    /// Nothing will be answered any more: every request still waiting.
    pub fn drain(&mut self) -> Vec<Parked> {
        self.requests = 0;
        self.bytes = 0;
        self.asked_by.clear();
        self.parked_by.clear();
        self.by_question
            .drain()
            .flat_map(|(_, q)| q.parked)
            .collect()
    }

    /// Requests waiting, and their bytes.
    pub fn totals(&self) -> (usize, usize) {
        (self.requests, self.bytes)
    }
}

/// One of `source`'s places in `shares` is free again.
fn give_back(shares: &mut HashMap<SourceKey, usize>, source: SourceKey) {
    if let std::collections::hash_map::Entry::Occupied(mut e) = shares.entry(source) {
        *e.get_mut() -= 1;
        if *e.get() == 0 {
            e.remove();
        }
    }
}

/// Makes room in a cache of answers kept until an instant, bounded at
/// `max` entries, for one more at `now`: the lapsed ones go, and if it
/// is still full, one entry: an `expendable` one (a failure, which costs
/// little to learn again and which anyone can have cached by asking)
/// before any other, so answers others depend on are not pushed out by
/// a flood of questions that fail.
pub fn make_room<K: Eq + Hash + Clone, V>(
    cache: &mut HashMap<K, (V, std::time::Instant)>,
    max: usize,
    now: std::time::Instant,
    expendable: impl Fn(&V) -> bool,
) {
    if cache.len() < max {
        return;
    }
    cache.retain(|_, (_, until)| *until > now);
    if cache.len() >= max {
        let victim = cache
            .iter()
            .find(|(_, (v, _))| expendable(v))
            .or_else(|| cache.iter().next())
            .map(|(k, _)| k.clone());
        if let Some(k) = victim {
            cache.remove(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(len: usize) -> Parked {
        Parked {
            message: vec![b'x'; len],
            src: "192.0.2.1:5060".parse().unwrap(),
            arrived: Transport::Udp,
        }
    }

    #[test]
    fn requests_wait_on_asked_questions_within_every_bound() {
        let bounds = Bounds {
            questions: 2,
            per_question: 2,
            requests: 3,
            bytes: 100,
            questions_per_source: 2,
            requests_per_source: 3,
        };
        let mut w = Waiting::new(bounds);
        assert_eq!(w.park(&"a", request(1), None), Err(Refused::NotAsked));
        assert!(w.ask("a", None) && w.ask("b", None));
        assert!(!w.ask("c", None), "two questions at most");
        assert_eq!(w.park(&"a", request(10), None), Ok(()));
        assert_eq!(w.park(&"a", request(10), None), Ok(()));
        assert_eq!(
            w.park(&"a", request(10), None),
            Err(Refused::Full),
            "per question"
        );
        assert_eq!(w.park(&"b", request(81), None), Err(Refused::Full), "bytes");
        assert_eq!(w.park(&"b", request(80), None), Ok(()));
        assert_eq!(
            w.park(&"b", request(0), None),
            Err(Refused::Full),
            "requests"
        );
        assert_eq!(w.totals(), (3, 100));
        assert_eq!(w.answered(&"a").len(), 2);
        assert!(!w.asked(&"a") && w.asked(&"b"));
        assert_eq!(w.totals(), (1, 80));
        assert_eq!(w.drain().len(), 1);
        assert_eq!(w.totals(), (0, 0));
    }

    fn source(ip: &str) -> Option<SourceKey> {
        Some(SourceKey::of(ip.parse().unwrap(), 64))
    }

    #[test]
    fn one_source_asks_and_parks_only_its_share() {
        let bounds = Bounds {
            questions: 8,
            per_question: 8,
            requests: 8,
            bytes: 1000,
            questions_per_source: 2,
            requests_per_source: 3,
        };
        let mut w = Waiting::new(bounds);
        let (a, b) = (source("192.0.2.1"), source("192.0.2.2"));
        assert!(w.ask("a1", a) && w.ask("a2", a));
        assert!(!w.ask("a3", a), "a source's questions");
        assert!(w.ask("a1", a), "a question under way is not asked again");
        assert!(w.ask("b1", b) && w.ask("n1", None) && w.ask("n2", None));
        for _ in 0..3 {
            assert_eq!(w.park(&"b1", request(1), a), Ok(()));
        }
        assert_eq!(
            w.park(&"a1", request(1), a),
            Err(Refused::Full),
            "a source's requests"
        );
        assert_eq!(w.park(&"a1", request(1), b), Ok(()));
        assert_eq!(w.park(&"a1", request(1), None), Ok(()));
        // Answered: the asker's and the parkers' shares are free again.
        assert_eq!(w.answered(&"b1").len(), 3);
        assert_eq!(w.park(&"a1", request(1), a), Ok(()));
        assert_eq!(w.answered(&"a1").len(), 3);
        assert!(w.ask("a3", a), "a1 was answered");
        assert!(!w.ask("a4", a));
        assert_eq!(w.drain().len(), 0);
        assert!(
            w.ask("a4", a) && w.ask("a5", a),
            "nothing held after a drain"
        );
    }

    #[test]
    fn a_full_cache_gives_up_a_lapsed_answer_then_an_expendable_one() {
        let now = std::time::Instant::now();
        let later = now + std::time::Duration::from_secs(10);
        let mut cache: HashMap<u32, (bool, std::time::Instant)> = HashMap::new();
        for k in 0..4 {
            cache.insert(k, (k != 2, later));
        }
        make_room(&mut cache, 4, now, |ok| !ok);
        assert_eq!(cache.len(), 3);
        assert!(!cache.contains_key(&2), "the failure went");
        cache.insert(2, (true, now));
        make_room(
            &mut cache,
            4,
            now + std::time::Duration::from_secs(1),
            |ok| !ok,
        );
        assert_eq!(cache.len(), 3, "the lapsed one went");
        assert!(!cache.contains_key(&2));
        cache.insert(2, (true, later));
        make_room(&mut cache, 4, now, |ok| !ok);
        assert_eq!(cache.len(), 3, "none expendable: any one goes");
        make_room(&mut cache, 4, now, |ok| !ok);
        assert_eq!(cache.len(), 3, "room already");
    }
}
