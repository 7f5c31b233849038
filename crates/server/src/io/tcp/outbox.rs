//! Writes gathered: fewer system calls and records per message.
//!
//! - **Corked reads.** While a reactor decides the messages of one read
//!   from a connection, what it sends on that connection is queued and
//!   written once after the last of them: a pipelined backlog costs one
//!   write (one TLS record stream) instead of one per answer.
//! - **A busy connection's outbox.** The reactors that decide a busy
//!   connection's messages (`spread`) do not write it themselves — eight
//!   threads taking its session lock and writing its socket in turn cost
//!   more than they saved. Each appends its answers to the connection's
//!   outbox and, when the outbox was empty, asks the connection's reactor
//!   to write it; that reactor writes everything gathered in one go, and
//!   again after each read of the connection. The outbox is bounded as
//!   the connection's queue is: a sender that finds it full writes it
//!   and its own message itself, as all senders did before.
//!
//! Order is kept where SIP needs it: one call's messages are decided on
//! one reactor and reach the outbox, and so the wire, in that order.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::shared::*;
use crate::proto::branch::Key;

thread_local! {
    /// The reactor this thread is, if it is one.
    static REACTOR: Cell<Option<usize>> = const { Cell::new(None) };
    /// The connection whose read this thread is deciding (its
    /// [`conn_id`]): sends on it are written after the read.
    static CORKED: Cell<u64> = const { Cell::new(0) };
}

/// Answers decided elsewhere for a busy connection, waiting for its
/// reactor to write them.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    /// The messages, back to back, and where each ends.
    bytes: Vec<u8>,
    ends: Vec<usize>,
    /// The forwarded requests among them (failed if they cannot go).
    keys: Vec<(Key, u8)>,
    /// Its reactor has been asked to write it.
    asked: bool,
}

/// A message to send, and the forwarded request it is (if it is one).
pub(super) type Message<'a> = (&'a [u8], Option<(Key, u8)>);

/// What [`TcpHub::post`] did with a message.
pub(super) enum Posted {
    /// Not a busy connection's answer from another reactor: send it.
    No,
    /// In the outbox; `ask` the connection's reactor to write it.
    Yes { ask: bool },
    /// The outbox is full: write it and the message here.
    Full,
}

/// Marks this thread as reactor `index`.
pub(super) fn set_reactor(index: usize) {
    REACTOR.with(|r| r.set(Some(index)));
}

/// Whether a send on `conn` now waits for the end of the read being
/// decided.
pub(super) fn corked(conn: &Conn) -> bool {
    CORKED.with(|c| c.get()) == conn_id(conn)
}

/// Decides a read from `conn` with its sends gathered: `decide` runs
/// corked, then what it queued is written.
pub(super) fn with_cork<T>(conn: &Conn, decide: impl FnOnce() -> T) -> (T, std::io::Result<()>) {
    let before = CORKED.with(|c| c.replace(conn_id(conn)));
    let r = decide();
    CORKED.with(|c| c.set(before));
    let flushed = lock(&conn.tx).flush();
    (r, flushed)
}

impl Outbox {
    /// Appends `bytes` within `limit` bytes waiting.
    fn push(&mut self, bytes: &[u8], key: Option<(Key, u8)>, limit: usize) -> Posted {
        if self.bytes.len().saturating_add(bytes.len()) > limit {
            return Posted::Full;
        }
        self.bytes.extend_from_slice(bytes);
        self.ends.push(self.bytes.len());
        self.keys.extend(key);
        Posted::Yes {
            ask: !std::mem::replace(&mut self.asked, true),
        }
    }
}

impl TcpHub {
    /// Puts `bytes` for `conn` in its outbox when it is a busy
    /// connection's and this thread is another of the reactors deciding
    /// it.
    pub(super) fn post(&self, conn: &Conn, bytes: &[u8], key: Option<(Key, u8)>) -> Posted {
        let elsewhere = REACTOR.with(|r| r.get()).is_some_and(|r| r != conn.reactor);
        if !elsewhere || !conn.spread.load(Ordering::Relaxed) {
            return Posted::No;
        }
        let mut outbox = lock(&conn.outbox);
        let outbox = outbox.get_or_insert_with(Box::default);
        outbox.push(bytes, key, self.limits.queue_bytes)
    }

    /// Writes `conn`'s outbox, then `more` (a message that found it
    /// full: its reactor is behind, and the sender writes in its stead,
    /// after what waited, so each call's order holds): one staging and
    /// one write for all of it, a frame each over WebSocket. If the
    /// connection cannot take it, it is closed and the forwarded requests
    /// in it fail.
    pub(super) fn write_outbox(
        self: &Arc<Self>,
        conn: &Arc<Conn>,
        more: Option<Message<'_>>,
    ) -> std::io::Result<()> {
        let (mut bytes, mut ends, mut keys) = match &mut *lock(&conn.outbox) {
            Some(o) => {
                o.asked = false;
                (
                    std::mem::take(&mut o.bytes),
                    std::mem::take(&mut o.ends),
                    std::mem::take(&mut o.keys),
                )
            }
            None => Default::default(),
        };
        if let Some((more, key)) = more {
            bytes.extend_from_slice(more);
            ends.push(bytes.len());
            keys.extend(key);
        }
        if ends.is_empty() {
            return Ok(());
        }
        let limit = self.limits.queue_bytes;
        let written = {
            let mut tx = lock(&conn.tx);
            let staged = if tx.wire == Wire::Frames {
                let mut start = 0;
                ends.iter().try_for_each(|&end| {
                    let r = tx.stage(&bytes[start..end], limit);
                    start = end;
                    r
                })
            } else {
                tx.stage(&bytes, limit)
            };
            staged.and_then(|()| tx.flush().map_err(|_| QueueError::Closed))
        };
        let Err(e) = written else {
            return Ok(());
        };
        self.close_later(conn, e.close_reason());
        let m = &self.shared.metrics;
        m.dropped.fetch_add(ends.len() as u64, Ordering::Relaxed);
        if !keys.is_empty() {
            self.transport_failed(&keys);
        }
        Err(std::io::Error::other(
            "the connection cannot take its answers",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outbox_asks_once_until_written_and_holds_its_bound() {
        let mut o = Outbox::default();
        assert!(matches!(o.push(b"abc", None, 8), Posted::Yes { ask: true }));
        assert!(matches!(o.push(b"de", None, 8), Posted::Yes { ask: false }));
        assert!(matches!(o.push(b"fghi", None, 8), Posted::Full));
        assert_eq!((&o.bytes[..], &o.ends[..]), (&b"abcde"[..], &[3, 5][..]));
        o.asked = false;
        assert!(matches!(o.push(b"f", None, 8), Posted::Yes { ask: true }));
    }
}
