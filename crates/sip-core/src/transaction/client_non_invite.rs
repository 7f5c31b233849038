//! Non-INVITE client transaction (RFC 3261 §17.1.2).
//!
//! ```text
//!            |request sent (timer E if unreliable, timer F)
//!            V
//!  F fires +---------+ 1xx   +------------+ 1xx (deliver)
//! <--------| Trying  |------>| Proceeding |-----+
//!          +---------+       +------------+     |
//!   200-699 |  E: resend        | E: resend at T2
//!  (deliver)|  min(2E,T2)       | 200-699 (deliver)
//!           V                   V
//!          Completed (timer K) --> Terminated
//! ```

use std::time::{Duration, Instant};

use super::{Output, TimerConfig};
use crate::status::StatusCode;

/// The states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientNonInviteState {
    /// No response yet.
    Trying {
        /// Next retransmission and interval (unreliable only).
        timer_e: Option<(Instant, Duration)>,
        /// Transaction timeout.
        timer_f: Instant,
    },
    /// A provisional response arrived.
    Proceeding {
        /// Next retransmission and interval (unreliable only).
        timer_e: Option<(Instant, Duration)>,
        /// Transaction timeout.
        timer_f: Instant,
    },
    /// A final response arrived; absorbs retransmissions until timer K.
    Completed {
        /// End of the Completed state.
        timer_k: Instant,
    },
    /// Finished.
    Terminated,
}

/// A non-INVITE client transaction.
#[derive(Debug, Clone)]
pub struct ClientNonInvite {
    state: ClientNonInviteState,
    cfg: TimerConfig,
    reliable: bool,
}

impl ClientNonInvite {
    /// Starts the transaction; the owner has just sent the request.
    pub fn new(now: Instant, reliable: bool, cfg: TimerConfig) -> Self {
        Self {
            state: ClientNonInviteState::Trying {
                timer_e: (!reliable).then(|| (now + cfg.t1, cfg.t1)),
                timer_f: now + cfg.timeout(),
            },
            cfg,
            reliable,
        }
    }

    /// The current state.
    pub fn state(&self) -> ClientNonInviteState {
        self.state
    }

    /// Whether the transaction is over.
    pub fn is_terminated(&self) -> bool {
        self.state == ClientNonInviteState::Terminated
    }

    /// When `on_timer` must next be called.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.state {
            ClientNonInviteState::Trying { timer_e, timer_f }
            | ClientNonInviteState::Proceeding { timer_e, timer_f } => {
                Some(timer_e.map_or(timer_f, |(e, _)| e.min(timer_f)))
            }
            ClientNonInviteState::Completed { timer_k } => Some(timer_k),
            ClientNonInviteState::Terminated => None,
        }
    }

    /// A response arrived.
    pub fn on_response(&mut self, status: StatusCode, now: Instant) -> Output {
        use ClientNonInviteState::*;
        let deliver = Output {
            deliver: true,
            ..Output::NONE
        };
        let (next, out) = match self.state {
            Trying { timer_e, timer_f } | Proceeding { timer_e, timer_f }
                if status.is_provisional() =>
            {
                (Proceeding { timer_e, timer_f }, deliver)
            }
            Trying { .. } | Proceeding { .. } => {
                let k = if self.reliable {
                    Duration::ZERO
                } else {
                    self.cfg.t4
                };
                (Completed { timer_k: now + k }, deliver)
            }
            other => (other, Output::NONE),
        };
        self.state = next;
        out
    }

    /// Processes every timer due at `now`.
    pub fn on_timer(&mut self, now: Instant) -> Output {
        use ClientNonInviteState::*;
        let t2 = self.cfg.t2;
        let (next, out) = match self.state {
            Trying { timer_f, .. } | Proceeding { timer_f, .. } if now >= timer_f => (
                Terminated,
                Output {
                    timeout: true,
                    terminated: true,
                    ..Output::NONE
                },
            ),
            Trying {
                timer_e: Some((e, interval)),
                timer_f,
            } if now >= e => {
                let next = (interval * 2).min(t2);
                (
                    Trying {
                        timer_e: Some((now + next, next)),
                        timer_f,
                    },
                    Output {
                        retransmit: true,
                        ..Output::NONE
                    },
                )
            }
            Proceeding {
                timer_e: Some((e, _)),
                timer_f,
            } if now >= e => (
                Proceeding {
                    timer_e: Some((now + t2, t2)),
                    timer_f,
                },
                Output {
                    retransmit: true,
                    ..Output::NONE
                },
            ),
            Completed { timer_k } if now >= timer_k => (
                Terminated,
                Output {
                    terminated: true,
                    ..Output::NONE
                },
            ),
            other => (other, Output::NONE),
        };
        self.state = next;
        out
    }

    /// The transport reported a failure.
    pub fn on_transport_error(&mut self) -> Output {
        let pending = matches!(
            self.state,
            ClientNonInviteState::Trying { .. } | ClientNonInviteState::Proceeding { .. }
        );
        self.state = ClientNonInviteState::Terminated;
        Output {
            timeout: pending,
            terminated: true,
            ..Output::NONE
        }
    }
}
