//! The proxy's side of dialogs and call records
//! ([`crate::proto::dialogs`]): a forwarded initial INVITE starts one,
//! the responses going upstream (relayed, or made by the transactions'
//! timers) confirm or end it, and the timers end those past their time.

use std::net::SocketAddr;

use sip_core::{Message, Method};

use crate::proto::core::Core;
use crate::proto::dialogs::Start;
use crate::proto::names::Route;
use crate::proto::shared::Now;
use crate::proto::stir::StirEdit;

/// How often dialogs are swept for timeouts, ms.
const SWEEP_EVERY_MS: u64 = 1000;

impl Core {
    /// An initial INVITE was forwarded to `hop` (along `route`, a trunk's
    /// when it names one): its dialog is followed from now.
    pub(super) fn dialog_begin(&self, msg: &Message<'_>, hop: SocketAddr, route: Option<&Route>) {
        let Some(d) = self.shared.dialogs.as_ref() else {
            return;
        };
        if msg.method() != Method::Invite || msg.to().tag().is_some() {
            return;
        }
        let trunk = route
            .and_then(|r| r.name.strip_prefix("trunk."))
            .map(|t| (t.to_owned(), hop));
        let stir = self.stir_edit.as_ref().map(|e| match e {
            StirEdit::Identity(_) => "signed".to_owned(),
            StirEdit::Verstat(v) => (*v).to_owned(),
        });
        let start = Start {
            caller: msg.from().uri().user().unwrap_or("").to_owned(),
            callee: msg
                .request_uri()
                .and_then(|u| u.user())
                .unwrap_or("")
                .to_owned(),
            trunk,
            transport: self.transport.as_str(),
            stir,
        };
        d.begin(msg, start, self.now.unix_ms);
    }

    /// A response went upstream: what it means for its dialog.
    pub(super) fn dialog_response(&mut self, msg: &Message<'_>) {
        let Some(d) = self.shared.dialogs.as_ref() else {
            return;
        };
        if let Some(r) = d.response(msg, self.now.unix_ms) {
            self.records.push(r);
        }
    }

    /// After the transactions' timers ran: the responses they made end
    /// their dialogs (a 408 after Timer C), and once a second dialogs past
    /// their time end.
    pub(super) fn dialog_timers(&mut self, now: Now) {
        let shared = self.shared.clone();
        let Some(d) = shared.dialogs.as_ref() else {
            return;
        };
        for (bytes, _) in self.sends.iter() {
            if !bytes.starts_with(b"SIP/2.0 ") {
                continue;
            }
            if let Ok(m) = Message::parse(bytes) {
                if let Some(r) = d.response(&m, now.unix_ms) {
                    self.records.push(r);
                }
            }
        }
        if now.unix_ms.saturating_sub(self.swept_ms) >= SWEEP_EVERY_MS {
            self.swept_ms = now.unix_ms;
            self.records.extend(d.sweep(now.unix_ms));
        }
    }
}
