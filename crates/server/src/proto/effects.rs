//! What a decision produces besides its reply: messages to send, the
//! driver's threads to wake, next hops that failed.

use std::net::SocketAddr;
use std::ops::Range;

use sip_core::Transport;

use crate::proto::branch::Key;

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
    /// The media thread: a relay was asked (see `MediaTable::take_asked`).
    pub media: bool,
    /// The certificate fetcher: a signer's certificate was asked (see
    /// `CertTable::take_asked`).
    pub certs: bool,
}

/// A queued message: where its bytes are, where it goes, and the
/// transaction and try of a request.
type Item = (Range<usize>, Hop, Option<(Key, u8)>);

/// What a decision produced besides its reply: messages to send, packed
/// into one reused buffer, threads to wake, next hops that failed.
#[derive(Debug, Default)]
pub struct Sends {
    buf: Vec<u8>,
    items: Vec<Item>,
    pub(super) wake: Wake,
    pub(super) failed: Vec<(Hop, u32)>,
    /// Requests sent again with a trunk's credentials and a CSeq one
    /// higher: their Call-ID and From tag (the dialog's offset grows).
    pub(super) renumbered: Vec<(String, String)>,
}

impl Sends {
    /// Queues a copy of `bytes` for `to`.
    pub fn push(&mut self, bytes: &[u8], to: Hop) {
        self.push_keyed(bytes, to, None);
    }

    /// Queues a copy of the request `bytes` for `to`, sent as try `key.1`
    /// of the transaction `key.0` (so a connection that cannot carry it
    /// fails that transaction without reading the bytes again).
    pub fn push_request(&mut self, bytes: &[u8], to: Hop, key: (Key, u8)) {
        self.push_keyed(bytes, to, Some(key));
    }

    fn push_keyed(&mut self, bytes: &[u8], to: Hop, key: Option<(Key, u8)>) {
        let start = self.buf.len();
        self.buf.extend_from_slice(bytes);
        self.items.push((start..self.buf.len(), to, key));
    }

    /// The queued messages, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Hop)> {
        self.items
            .iter()
            .map(|(r, h, _)| (&self.buf[r.clone()], *h))
    }

    /// The queued messages, in order, each with the transaction it is a
    /// request of (`None`: a response, an ACK).
    pub fn keyed(&self) -> impl Iterator<Item = (&[u8], Hop, Option<(Key, u8)>)> {
        self.items
            .iter()
            .map(|(r, h, k)| (&self.buf[r.clone()], *h, *k))
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

    /// Asks the driver to wake its certificate fetcher.
    pub fn wake_certs(&mut self) {
        self.wake.certs = true;
    }

    /// Asks the driver to wake its media thread.
    pub fn wake_media(&mut self) {
        self.wake.media = true;
    }

    /// Next hops that failed and are skipped from now on, for how many
    /// seconds (each worth a line in the log).
    pub fn failed_hops(&self) -> &[(Hop, u32)] {
        &self.failed
    }

    /// Checks that every request queued carries the transaction and try
    /// its bytes name (the connection layer fails it by that key without
    /// reading them); responses and ACKs carry none.
    #[cfg(test)]
    pub(crate) fn assert_keys_match(&self) {
        for (b, _, key) in self.keyed() {
            let m = sip_core::Message::parse(b).expect("a message");
            let want = (m.is_request() && m.method() != sip_core::Method::Ack)
                .then(|| Key::with_try(&m).expect("this proxy's branch"));
            assert_eq!(key, want, "{}", String::from_utf8_lossy(b));
        }
    }

    /// What is queued, as `WHAT->PORT` (a status or a method), after
    /// [`assert_keys_match`](Self::assert_keys_match).
    #[cfg(test)]
    pub(crate) fn summary(&self) -> Vec<String> {
        self.assert_keys_match();
        self.iter()
            .map(|(b, (a, _))| {
                let m = sip_core::Message::parse(b).expect("a message");
                let what = match m.status() {
                    Some(s) => s.as_u16().to_string(),
                    None => m.method().as_str().to_owned(),
                };
                format!("{what}->{}", a.port())
            })
            .collect()
    }

    /// Forgets everything queued, keeping the capacity.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.items.clear();
        self.wake = Wake::default();
        self.failed.clear();
        self.renumbered.clear();
    }
}
