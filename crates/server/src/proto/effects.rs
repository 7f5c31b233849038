//! What a decision produces besides its reply: messages to send, the
//! driver's threads to wake, next hops that failed.

use std::net::SocketAddr;
use std::ops::Range;

use sip_core::Transport;

/// A destination: address and transport.
pub type Hop = (SocketAddr, Transport);

/// Threads of the driver that a decision needs woken.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Wake {
    /// The one running the transactions' timers: a transaction started
    /// while the table was idle.
    pub timers: bool,
    /// The resolver: a name was asked (see `NameTable::take_asked`).
    pub names: bool,
}

/// What a decision produced besides its reply: messages to send, packed
/// into one reused buffer, threads to wake, next hops that failed.
#[derive(Debug, Default)]
pub struct Sends {
    pub(super) buf: Vec<u8>,
    pub(super) items: Vec<(Range<usize>, Hop)>,
    pub(super) wake: Wake,
    pub(super) failed: Vec<(Hop, u32)>,
}

impl Sends {
    /// Queues a copy of `bytes` for `to`.
    pub fn push(&mut self, bytes: &[u8], to: Hop) {
        let start = self.buf.len();
        self.buf.extend_from_slice(bytes);
        self.items.push((start..self.buf.len(), to));
    }

    /// The queued messages, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Hop)> {
        self.items.iter().map(|(r, h)| (&self.buf[r.clone()], *h))
    }

    /// Whether no message is queued.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The driver's threads to wake.
    pub fn wake(&self) -> Wake {
        self.wake
    }

    /// Asks the driver to wake its resolver.
    pub fn wake_names(&mut self) {
        self.wake.names = true;
    }

    /// Next hops that failed and are skipped from now on, for how many
    /// seconds (each worth a line in the log).
    pub fn failed_hops(&self) -> &[(Hop, u32)] {
        &self.failed
    }

    /// Forgets everything queued, keeping the capacity.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.items.clear();
        self.wake = Wake::default();
        self.failed.clear();
    }
}
