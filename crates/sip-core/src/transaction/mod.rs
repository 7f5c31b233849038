//! Transaction state machines (RFC 3261 §17, with the RFC 6026 Accepted
//! state for INVITE).
//!
//! Sans-IO: each machine takes events and the current time and returns an
//! [`Output`] telling its owner what to send or deliver; the owner calls
//! `on_timer` at or after [`next_deadline`](ClientInvite::next_deadline).
//! The owner keeps the bytes of the request and of the last response.

mod answered;
mod client;
mod client_invite;
mod client_non_invite;
mod server_invite;
mod server_non_invite;
mod timers;

pub use answered::{Answered, Resend};
pub use client::Client;
pub use client_invite::{ClientInvite, ClientInviteState};
pub use client_non_invite::{ClientNonInvite, ClientNonInviteState};
pub use server_invite::{ServerInvite, ServerInviteState};
pub use server_non_invite::{ServerNonInvite, ServerNonInviteState};
pub use timers::TimerConfig;

/// What a transaction asks its owner to do after an event.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Output {
    /// Client: send the request again. Server: send the last response again.
    pub retransmit: bool,
    /// Client INVITE: send ACK for the non-2xx final response just received.
    pub send_ack: bool,
    /// Server: send the response the TU just passed in.
    pub send_response: bool,
    /// Client: pass the received response up to the TU.
    pub deliver: bool,
    /// A timeout fired (B, F, H): tell the TU (408 for clients).
    pub timeout: bool,
    /// Server INVITE: the ACK ended the transaction's retransmissions.
    pub ack_received: bool,
    /// The transaction has ended and can be dropped.
    pub terminated: bool,
}

impl Output {
    pub(crate) const NONE: Output = Output {
        retransmit: false,
        send_ack: false,
        send_response: false,
        deliver: false,
        timeout: false,
        ack_received: false,
        terminated: false,
    };
}

#[cfg(test)]
mod tests;
