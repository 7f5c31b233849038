//! Where the drivers copy what passes through them: the tracer (every
//! SIP message received and sent, for HEP) and the call records journal.
//! The core never calls either: the drivers hand each message to the
//! tracer as it arrives and leaves, and write the records the core made
//! before they send what ended the call.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::proto::core::Core;
use crate::proto::dialogs::CallRecord;
use crate::proto::shared::Transport;

/// A copy of every SIP message received and sent, for tracing (HEP).
/// Called on the hot path, so it must not block.
pub trait Tap: std::fmt::Debug + Send + Sync {
    /// `bytes` arrived from `peer` over `transport`.
    fn received(&self, bytes: &[u8], peer: SocketAddr, transport: Transport);
    /// `bytes` are being sent to `peer` over `transport`.
    fn sent(&self, bytes: &[u8], peer: SocketAddr, transport: Transport);
    /// A record of `peer`'s connection over `transport` (the TLS session
    /// it set up, as JSON): traced once per connection.
    fn connection_event(&self, _peer: SocketAddr, _transport: Transport, _record: &str) {}
    /// Messages handed to the collector, and those dropped (queue full).
    fn counts(&self) -> (u64, u64);

    /// Wakes the tracer's thread to see the stop.
    fn wake(&self) {}
}

/// Where call records go (a journal file, and a Redis stream beside it).
pub trait CallLog: std::fmt::Debug + Send + Sync {
    /// Writes `records` (at once: a kill -9 after this loses none).
    fn write(&self, records: &[CallRecord]);
}

/// The tracer and the call log, each when configured; every driver
/// thread holds one (through its [`crate::io::send::Sender`]).
#[derive(Debug, Clone, Default)]
pub struct Sinks {
    /// The tracer, when `[trace]` is configured.
    pub tap: Option<Arc<dyn Tap>>,
    /// The call records journal, when the proxy keeps records.
    pub call_log: Option<Arc<dyn CallLog>>,
}

impl Sinks {
    /// Traces `bytes` received from `peer`.
    #[inline]
    pub fn received(&self, bytes: &[u8], peer: SocketAddr, transport: Transport) {
        if let Some(t) = &self.tap {
            t.received(bytes, peer, transport);
        }
    }

    /// Traces `bytes` leaving for `peer`.
    #[inline]
    pub fn sent(&self, bytes: &[u8], peer: SocketAddr, transport: Transport) {
        if let Some(t) = &self.tap {
            t.sent(bytes, peer, transport);
        }
    }

    /// Writes the call records `core` made (none without a call log: the
    /// core makes them only when records are kept).
    pub fn write_records(&self, core: &mut Core) {
        let records: Vec<_> = core.take_records().collect();
        if let (false, Some(log)) = (records.is_empty(), &self.call_log) {
            log.write(&records);
        }
    }
}
