//! Non-INVITE server transaction (RFC 3261 §17.2.2).
//!
//! ```text
//!          |request received
//!          V
//!      +--------+ TU 1xx  +------------+ TU 1xx: send
//!      | Trying |-------->| Proceeding | retransmitted request: resend
//!      +--------+         +------------+
//!  TU 200-699 |              | TU 200-699
//!             V              V
//!          Completed (timer J; retransmitted request: resend final)
//!             |
//!             V Terminated
//! ```

use std::time::{Duration, Instant};

use super::{Output, TimerConfig};
use crate::status::StatusCode;

/// The states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerNonInviteState {
    /// No response sent yet; retransmissions are absorbed.
    Trying,
    /// A provisional response was sent.
    Proceeding,
    /// A final response was sent; ends at timer J.
    Completed {
        /// End of the Completed state.
        timer_j: Instant,
    },
    /// Finished.
    Terminated,
}

/// A non-INVITE server transaction.
#[derive(Debug, Clone)]
pub struct ServerNonInvite {
    state: ServerNonInviteState,
    cfg: TimerConfig,
    reliable: bool,
}

impl ServerNonInvite {
    /// Creates the transaction for a new request.
    pub fn new(reliable: bool, cfg: TimerConfig) -> Self {
        Self {
            state: ServerNonInviteState::Trying,
            cfg,
            reliable,
        }
    }

    /// The current state.
    pub fn state(&self) -> ServerNonInviteState {
        self.state
    }

    /// Whether the transaction is over.
    pub fn is_terminated(&self) -> bool {
        self.state == ServerNonInviteState::Terminated
    }

    /// When `on_timer` must next be called.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.state {
            ServerNonInviteState::Completed { timer_j } => Some(timer_j),
            _ => None,
        }
    }

    /// The TU passes a response down.
    pub fn on_tu_response(&mut self, status: StatusCode, now: Instant) -> Output {
        use ServerNonInviteState::*;
        let send = Output {
            send_response: true,
            ..Output::NONE
        };
        let (next, out) = match self.state {
            Trying | Proceeding if status.is_provisional() => (Proceeding, send),
            Trying | Proceeding => {
                let j = if self.reliable {
                    Duration::ZERO
                } else {
                    self.cfg.timeout()
                };
                (Completed { timer_j: now + j }, send)
            }
            other => (other, Output::NONE),
        };
        self.state = next;
        out
    }

    /// The request was received again.
    pub fn on_request_retransmission(&mut self) -> Output {
        match self.state {
            ServerNonInviteState::Proceeding | ServerNonInviteState::Completed { .. } => Output {
                retransmit: true,
                ..Output::NONE
            },
            _ => Output::NONE,
        }
    }

    /// Processes every timer due at `now`.
    pub fn on_timer(&mut self, now: Instant) -> Output {
        if let ServerNonInviteState::Completed { timer_j } = self.state {
            if now >= timer_j {
                self.state = ServerNonInviteState::Terminated;
                return Output {
                    terminated: true,
                    ..Output::NONE
                };
            }
        }
        Output::NONE
    }

    /// The transport failed to send a response.
    pub fn on_transport_error(&mut self) -> Output {
        self.state = ServerNonInviteState::Terminated;
        Output {
            terminated: true,
            ..Output::NONE
        }
    }
}
