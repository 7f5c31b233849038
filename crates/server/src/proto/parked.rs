//! Requests parked on an external answer: a message the core cannot
//! decide on until something outside answers (a name resolved; next, a
//! media relay's SDP or a signer's certificate) waits here, keyed by the
//! question, and is handed in again once the answer is in. Bounded per
//! question and in all (count and bytes): past the bounds a request is
//! answered at once (503 with Retry-After) instead of waiting.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::SocketAddr;

use sip_core::Transport;

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
}

/// Why a request could not wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Nobody asked this question (or its answer is in already).
    NotAsked,
    /// No room.
    Full,
}

/// The questions asked outside and the requests waiting on each.
#[derive(Debug)]
pub struct Waiting<K> {
    by_question: HashMap<K, Vec<Parked>>,
    requests: usize,
    bytes: usize,
    bounds: Bounds,
}

impl<K: Eq + Hash> Waiting<K> {
    /// Nothing asked yet.
    pub fn new(bounds: Bounds) -> Self {
        Self {
            by_question: HashMap::new(),
            requests: 0,
            bytes: 0,
            bounds,
        }
    }

    /// Whether `question` was asked and is not answered yet.
    pub fn asked(&self, question: &K) -> bool {
        self.by_question.contains_key(question)
    }

    /// Whether another question may be asked now.
    pub fn has_room(&self) -> bool {
        self.by_question.len() < self.bounds.questions
    }

    /// Asks `question` (its requests may wait from now on); `false` when
    /// there is no room for another question.
    pub fn ask(&mut self, question: K) -> bool {
        if !self.has_room() {
            return false;
        }
        self.by_question.entry(question).or_default();
        true
    }

    /// Parks `request` until `question` is answered.
    pub fn park(&mut self, question: &K, request: Parked) -> Result<(), Refused> {
        let full = self.requests >= self.bounds.requests
            || self.bytes + request.message.len() > self.bounds.bytes;
        let waiting = self
            .by_question
            .get_mut(question)
            .ok_or(Refused::NotAsked)?;
        if full || waiting.len() >= self.bounds.per_question {
            return Err(Refused::Full);
        }
        self.requests += 1;
        self.bytes += request.message.len();
        waiting.push(request);
        Ok(())
    }

    /// `question` is answered: the requests that waited on it.
    pub fn answered(&mut self, question: &K) -> Vec<Parked> {
        let parked = self.by_question.remove(question).unwrap_or_default();
        self.requests -= parked.len();
        self.bytes -= parked.iter().map(|p| p.message.len()).sum::<usize>();
        parked
    }

    /// Nothing will be answered any more: every request still waiting.
    pub fn drain(&mut self) -> Vec<Parked> {
        self.requests = 0;
        self.bytes = 0;
        self.by_question.drain().flat_map(|(_, p)| p).collect()
    }

    /// Requests waiting, and their bytes.
    pub fn totals(&self) -> (usize, usize) {
        (self.requests, self.bytes)
    }
}

/// Makes room in a cache of answers kept until an instant, bounded at
/// `max` entries, for one more at `now`: the lapsed ones go, and if it
/// is still full, one entry (any).
pub fn make_room<K: Eq + Hash + Clone, V>(
    cache: &mut HashMap<K, (V, std::time::Instant)>,
    max: usize,
    now: std::time::Instant,
) {
    if cache.len() < max {
        return;
    }
    cache.retain(|_, (_, until)| *until > now);
    if cache.len() >= max {
        if let Some(k) = cache.keys().next().cloned() {
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
        };
        let mut w = Waiting::new(bounds);
        assert_eq!(w.park(&"a", request(1)), Err(Refused::NotAsked));
        assert!(w.ask("a") && w.ask("b"));
        assert!(!w.ask("c"), "two questions at most");
        assert_eq!(w.park(&"a", request(10)), Ok(()));
        assert_eq!(w.park(&"a", request(10)), Ok(()));
        assert_eq!(
            w.park(&"a", request(10)),
            Err(Refused::Full),
            "per question"
        );
        assert_eq!(w.park(&"b", request(81)), Err(Refused::Full), "bytes");
        assert_eq!(w.park(&"b", request(80)), Ok(()));
        assert_eq!(w.park(&"b", request(0)), Err(Refused::Full), "requests");
        assert_eq!(w.totals(), (3, 100));
        assert_eq!(w.answered(&"a").len(), 2);
        assert!(!w.asked(&"a") && w.asked(&"b"));
        assert_eq!(w.totals(), (1, 80));
        assert_eq!(w.drain().len(), 1);
        assert_eq!(w.totals(), (0, 0));
    }
}
