//! Either client transaction, for owners that run both kinds through one
//! code path (a phone, a load generator).

use std::time::Instant;

use super::{ClientInvite, ClientNonInvite, Output, TimerConfig};
use crate::status::StatusCode;

/// An INVITE (§17.1.1) or non-INVITE (§17.1.2) client transaction.
#[derive(Debug, Clone)]
pub enum Client {
    /// INVITE.
    Invite(ClientInvite),
    /// Any other method.
    NonInvite(ClientNonInvite),
}

impl Client {
    /// Starts the transaction for a request the owner has just sent at
    /// `now`; `invite` picks the machine.
    pub fn new(invite: bool, now: Instant, reliable: bool, cfg: TimerConfig) -> Self {
        if invite {
            Self::Invite(ClientInvite::new(now, reliable, cfg))
        } else {
            Self::NonInvite(ClientNonInvite::new(now, reliable, cfg))
        }
    }

    /// When [`on_timer`](Self::on_timer) is next due.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self {
            Self::Invite(m) => m.next_deadline(),
            Self::NonInvite(m) => m.next_deadline(),
        }
    }

    /// Processes every timer due at `now`.
    pub fn on_timer(&mut self, now: Instant) -> Output {
        match self {
            Self::Invite(m) => m.on_timer(now),
            Self::NonInvite(m) => m.on_timer(now),
        }
    }

    /// A response matching this transaction arrived.
    pub fn on_response(&mut self, status: StatusCode, now: Instant) -> Output {
        match self {
            Self::Invite(m) => m.on_response(status, now),
            Self::NonInvite(m) => m.on_response(status, now),
        }
    }

    /// Whether the transaction has ended.
    pub fn is_terminated(&self) -> bool {
        match self {
            Self::Invite(m) => m.is_terminated(),
            Self::NonInvite(m) => m.is_terminated(),
        }
    }
}
