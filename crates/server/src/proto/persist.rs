//! Binding changes stored a batch at a time: over a store where each
//! write waits (a round trip to Redis, an fsync), a driver gathers the
//! changes of a batch of messages, stores them in one go and only then
//! releases their answers. The batch's bookkeeping is here, sans-IO: which
//! changes wait, which are with the store, and what finishing them gives;
//! the driver only moves the records to the store and back
//! (`io::drive::Deferred`).

use crate::proto::core::{Change, Core};
use crate::proto::location::{Record, StoreError};
use crate::proto::reply::Reply;

/// A change with its message and its answer.
type Waiting = (Change, Vec<u8>, Vec<u8>);

/// Buffers kept for reuse, at most.
const SPARE: usize = 1024;

/// The changes of one batch of messages, and the batch before it while a
/// store that overlaps has it.
#[derive(Debug, Default)]
pub struct Batch {
    /// Changes not yet handed to the store.
    waiting: Vec<Waiting>,
    /// Changes with the store, whose outcome is not known yet.
    sent: Vec<Waiting>,
    /// What finishing them produced: replies and their bytes.
    ready: Vec<(Reply, Vec<u8>)>,
    /// Buffers kept for reuse.
    spare: Vec<Vec<u8>>,
}

impl Batch {
    /// Whether no change waits, nor is with the store.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.sent.is_empty()
    }

    /// How many changes wait (not counting those with the store).
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Whether a batch is with the store.
    pub fn sending(&self) -> bool {
        !self.sent.is_empty()
    }

    /// Keeps `change` with its message and answer until the batch is
    /// stored.
    pub fn defer(&mut self, change: Change, input: &[u8], answer: &[u8]) {
        let (input, answer) = (self.buf(input), self.buf(answer));
        self.waiting.push((change, input, answer));
    }

    fn buf(&mut self, from: &[u8]) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(from);
        b
    }

    /// The records of the changes waiting, a slice per change.
    pub fn records(&self) -> Vec<&[Record]> {
        self.waiting.iter().map(|(c, _, _)| c.records()).collect()
    }

    /// The waiting changes went to a store that answers later
    /// ([`Batch::finish_sent`]).
    pub fn sent(&mut self) {
        debug_assert!(self.sent.is_empty(), "one batch with the store");
        std::mem::swap(&mut self.waiting, &mut self.sent);
    }

    /// The store answered `result` for the waiting changes: each is
    /// finished (stored: its answer is ready; not: its answer becomes the
    /// refusal).
    pub fn finish_waiting(&mut self, core: &mut Core, result: &Result<(), StoreError>) {
        let mut batch = std::mem::take(&mut self.waiting);
        self.finish(core, &mut batch, result);
        self.waiting = batch;
    }

    /// The store answered `result` for the changes it had.
    pub fn finish_sent(&mut self, core: &mut Core, result: &Result<(), StoreError>) {
        let mut sent = std::mem::take(&mut self.sent);
        self.finish(core, &mut sent, result);
        self.sent = sent;
    }

    fn finish(
        &mut self,
        core: &mut Core,
        changes: &mut Vec<Waiting>,
        result: &Result<(), StoreError>,
    ) {
        for (change, input, mut out) in changes.drain(..) {
            let stored = match result {
                Ok(()) => Ok(()),
                Err(e) => Err(e.again()),
            };
            let reply = core.finish(change, stored, &input, &mut out);
            self.spare.push(input);
            self.ready.push((reply, out));
        }
    }

    /// Hands each answer of the finished changes to `send`, in order.
    pub fn send_ready(&mut self, mut send: impl FnMut(Reply, &[u8])) {
        for (reply, out) in self.ready.drain(..) {
            send(reply, &out);
            if self.spare.len() < SPARE {
                self.spare.push(out);
            }
        }
    }
}
