//! INVITE client transaction (RFC 3261 §17.1.1, RFC 6026 §7.2).
//!
//! ```text
//!                 |INVITE sent (timer A if unreliable, timer B)
//!                 V
//!   B fires  +-----------+ 1xx
//!  <---------|  Calling  |---------> Proceeding --1xx--> (deliver)
//!            +-----------+               |
//!      300-699 |    | 2xx           2xx  |  300-699
//!   (ACK,      |    +----> Accepted <----+----+
//!    deliver)  V           (timer M)          |
//!          Completed <------------------------+
//!          (timer D; resend ACK on retransmitted final)
//! ```

use std::time::{Duration, Instant};

use super::{Output, TimerConfig};
use crate::status::StatusCode;

/// The states, each carrying only its own timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientInviteState {
    /// Waiting for any response; timer A retransmits, timer B gives up.
    Calling {
        /// Next retransmission (unreliable transports only) and its interval.
        timer_a: Option<(Instant, Duration)>,
        /// Transaction timeout.
        timer_b: Instant,
    },
    /// A provisional response arrived.
    Proceeding,
    /// A 2xx arrived; further 2xx are passed up until timer M.
    Accepted {
        /// End of the Accepted state.
        timer_m: Instant,
    },
    /// A 300-699 arrived and was ACKed; absorbs retransmissions until timer D.
    Completed {
        /// End of the Completed state.
        timer_d: Instant,
    },
    /// Finished.
    Terminated,
}

/// An INVITE client transaction.
#[derive(Debug, Clone)]
pub struct ClientInvite {
    state: ClientInviteState,
    cfg: TimerConfig,
    reliable: bool,
}

impl ClientInvite {
    /// Starts the transaction; the owner has just sent the INVITE at `now`.
    pub fn new(now: Instant, reliable: bool, cfg: TimerConfig) -> Self {
        Self {
            state: ClientInviteState::Calling {
                timer_a: (!reliable).then(|| (now + cfg.t1, cfg.t1)),
                timer_b: now + cfg.timeout(),
            },
            cfg,
            reliable,
        }
    }

    /// The current state.
    pub fn state(&self) -> ClientInviteState {
        self.state
    }

    /// Whether the transaction is over.
    pub fn is_terminated(&self) -> bool {
        self.state == ClientInviteState::Terminated
    }

    /// When `on_timer` must next be called.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.state {
            ClientInviteState::Calling { timer_a, timer_b } => {
                Some(timer_a.map_or(timer_b, |(a, _)| a.min(timer_b)))
            }
            ClientInviteState::Accepted { timer_m } => Some(timer_m),
            ClientInviteState::Completed { timer_d } => Some(timer_d),
            ClientInviteState::Proceeding | ClientInviteState::Terminated => None,
        }
    }

    fn completed(&self, now: Instant) -> ClientInviteState {
        let d = if self.reliable {
            Duration::ZERO
        } else {
            Duration::from_secs(32).max(self.cfg.timeout())
        };
        ClientInviteState::Completed { timer_d: now + d }
    }

    /// A response matching this transaction arrived.
    pub fn on_response(&mut self, status: StatusCode, now: Instant) -> Output {
        use ClientInviteState::*;
        let deliver = Output {
            deliver: true,
            ..Output::NONE
        };
        let (next, out) = match self.state {
            Calling { .. } | Proceeding if status.is_provisional() => (Proceeding, deliver),
            Calling { .. } | Proceeding if status.is_success() => (
                Accepted {
                    timer_m: now + self.cfg.timeout(),
                },
                deliver,
            ),
            Calling { .. } | Proceeding => (
                self.completed(now),
                Output {
                    deliver: true,
                    send_ack: true,
                    ..Output::NONE
                },
            ),
            Accepted { timer_m } if status.is_success() => (Accepted { timer_m }, deliver),
            Completed { timer_d } if status.is_final() && !status.is_success() => (
                Completed { timer_d },
                Output {
                    send_ack: true,
                    ..Output::NONE
                },
            ),
            other => (other, Output::NONE),
        };
        self.state = next;
        out
    }

    /// Processes every timer due at `now`.
    pub fn on_timer(&mut self, now: Instant) -> Output {
        use ClientInviteState::*;
        let (next, out) = match self.state {
            Calling { timer_b, .. } if now >= timer_b => (
                Terminated,
                Output {
                    timeout: true,
                    terminated: true,
                    ..Output::NONE
                },
            ),
            Calling {
                timer_a: Some((a, interval)),
                timer_b,
            } if now >= a => (
                Calling {
                    timer_a: Some((now + interval * 2, interval * 2)),
                    timer_b,
                },
                Output {
                    retransmit: true,
                    ..Output::NONE
                },
            ),
            Accepted { timer_m } if now >= timer_m => (
                Terminated,
                Output {
                    terminated: true,
                    ..Output::NONE
                },
            ),
            Completed { timer_d } if now >= timer_d => (
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

    /// The transport reported a failure sending the request (§17.1.1.2).
    pub fn on_transport_error(&mut self) -> Output {
        let was_calling = matches!(self.state, ClientInviteState::Calling { .. });
        self.state = ClientInviteState::Terminated;
        Output {
            timeout: was_calling,
            terminated: true,
            ..Output::NONE
        }
    }
}
