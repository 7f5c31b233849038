//! INVITE server transaction (RFC 3261 §17.2.1, RFC 6026 §7.1).
//!
//! ```text
//!             |INVITE received (owner sends 100 Trying)
//!             V
//!       +------------+ TU 1xx: send; INVITE retransmitted: resend last 1xx
//!       | Proceeding |
//!       +------------+
//!   TU 2xx |      | TU 300-699 (timer G if unreliable, timer H)
//!          V      V
//!   Accepted    Completed --G: resend--> ; --H--> Terminated (timeout)
//!   (timer L)     | ACK
//!                 V
//!             Confirmed (timer I) --> Terminated
//! ```

use std::time::{Duration, Instant};

use super::{Output, TimerConfig};
use crate::status::StatusCode;

/// The states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerInviteState {
    /// Waiting for the TU's final response.
    Proceeding {
        /// Whether a provisional response has been sent (to resend on retransmission).
        sent_provisional: bool,
    },
    /// A 2xx was sent; the TU retransmits it (RFC 6026); ends at timer L.
    Accepted {
        /// End of the Accepted state.
        timer_l: Instant,
    },
    /// A 300-699 was sent; waiting for the ACK.
    Completed {
        /// Next retransmission and interval (unreliable only).
        timer_g: Option<(Instant, Duration)>,
        /// Give-up time.
        timer_h: Instant,
    },
    /// The ACK arrived; absorbing ACK retransmissions until timer I.
    Confirmed {
        /// End of the Confirmed state.
        timer_i: Instant,
    },
    /// Finished.
    Terminated,
}

/// An INVITE server transaction.
#[derive(Debug, Clone)]
pub struct ServerInvite {
    state: ServerInviteState,
    cfg: TimerConfig,
    reliable: bool,
}

impl ServerInvite {
    /// Creates the transaction for a new INVITE. RFC 3261 §17.2.1: the
    /// owner sends 100 Trying unless the TU answers within 200 ms.
    pub fn new(reliable: bool, cfg: TimerConfig) -> Self {
        Self {
            state: ServerInviteState::Proceeding {
                sent_provisional: false,
            },
            cfg,
            reliable,
        }
    }

    /// The current state.
    pub fn state(&self) -> ServerInviteState {
        self.state
    }

    /// Whether the transaction is over.
    pub fn is_terminated(&self) -> bool {
        self.state == ServerInviteState::Terminated
    }

    /// When `on_timer` must next be called.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.state {
            ServerInviteState::Accepted { timer_l } => Some(timer_l),
            ServerInviteState::Completed { timer_g, timer_h } => {
                Some(timer_g.map_or(timer_h, |(g, _)| g.min(timer_h)))
            }
            ServerInviteState::Confirmed { timer_i } => Some(timer_i),
            ServerInviteState::Proceeding { .. } | ServerInviteState::Terminated => None,
        }
    }

    /// The TU passes a response down; `send_response` says whether to send it.
    pub fn on_tu_response(&mut self, status: StatusCode, now: Instant) -> Output {
        use ServerInviteState::*;
        let send = Output {
            send_response: true,
            ..Output::NONE
        };
        let (next, out) = match self.state {
            Proceeding { .. } if status.is_provisional() => (
                Proceeding {
                    sent_provisional: true,
                },
                send,
            ),
            Proceeding { .. } if status.is_success() => (
                Accepted {
                    timer_l: now + self.cfg.timeout(),
                },
                send,
            ),
            Proceeding { .. } => (
                Completed {
                    timer_g: (!self.reliable).then(|| (now + self.cfg.t1, self.cfg.t1)),
                    timer_h: now + self.cfg.timeout(),
                },
                send,
            ),
            // 2xx retransmissions by the TU pass straight through (RFC 6026).
            Accepted { timer_l } if status.is_success() => (Accepted { timer_l }, send),
            other => (other, Output::NONE),
        };
        self.state = next;
        out
    }

    /// The INVITE was received again.
    pub fn on_request_retransmission(&mut self) -> Output {
        match self.state {
            ServerInviteState::Proceeding {
                sent_provisional: true,
            }
            | ServerInviteState::Completed { .. } => Output {
                retransmit: true,
                ..Output::NONE
            },
            _ => Output::NONE,
        }
    }

    /// An ACK for a non-2xx final response arrived.
    pub fn on_ack(&mut self, now: Instant) -> Output {
        if let ServerInviteState::Completed { .. } = self.state {
            let i = if self.reliable {
                Duration::ZERO
            } else {
                self.cfg.t4
            };
            self.state = ServerInviteState::Confirmed { timer_i: now + i };
            return Output {
                ack_received: true,
                ..Output::NONE
            };
        }
        Output::NONE
    }

    /// Processes every timer due at `now`.
    pub fn on_timer(&mut self, now: Instant) -> Output {
        use ServerInviteState::*;
        let end = Output {
            terminated: true,
            ..Output::NONE
        };
        let (next, out) = match self.state {
            Completed { timer_h, .. } if now >= timer_h => (
                Terminated,
                Output {
                    timeout: true,
                    terminated: true,
                    ..Output::NONE
                },
            ),
            Completed {
                timer_g: Some((g, interval)),
                timer_h,
            } if now >= g => {
                let next = (interval * 2).min(self.cfg.t2);
                (
                    Completed {
                        timer_g: Some((now + next, next)),
                        timer_h,
                    },
                    Output {
                        retransmit: true,
                        ..Output::NONE
                    },
                )
            }
            Accepted { timer_l } if now >= timer_l => (Terminated, end),
            Confirmed { timer_i } if now >= timer_i => (Terminated, end),
            other => (other, Output::NONE),
        };
        self.state = next;
        out
    }

    /// The transport failed to send a response.
    pub fn on_transport_error(&mut self) -> Output {
        self.state = ServerInviteState::Terminated;
        Output {
            terminated: true,
            ..Output::NONE
        }
    }
}
