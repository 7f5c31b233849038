//! A message that meets a change in flight on its address-of-record
//! (another worker is storing it) waits, parked on the AoR; the change's
//! commit hands it back to the core that made it, whose driver hands it
//! in again ([`Core::next_woken`]). No worker spins on a busy AoR, and
//! nothing is parsed twice while it waits.

use std::net::SocketAddr;

use crate::proto::core::Core;
use crate::proto::location::Wait;
use crate::proto::parked::Parked;
use crate::proto::reply::bump;
use sip_core::Transport;

/// What became of a message that got [`crate::proto::reply::Reply::Retry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parking {
    /// It waits on its AoR: send nothing now.
    Parked,
    /// The change finished meanwhile: hand it in again now.
    Again,
    /// Too many wait on that AoR: answer it busy
    /// ([`Core::answer_busy`]).
    Full,
}

impl Core {
    /// Parks the message that just got [`crate::proto::reply::Reply::Retry`]
    /// on its busy AoR.
    pub fn park_busy(&mut self, input: &[u8], src: SocketAddr, transport: Transport) -> Parking {
        let Some(aor) = self.ctx.busy.take() else {
            return Parking::Again;
        };
        let p = Parked {
            message: input.to_vec(),
            src,
            arrived: transport,
        };
        match self.ctx.shared.location.wait_for(&aor, p) {
            Wait::Parked => {
                bump(&self.ctx.shared.metrics.busy_waits);
                Parking::Parked
            }
            Wait::NotBusy(_) => Parking::Again,
            Wait::Full(_) => Parking::Full,
        }
    }

    /// Whether messages wait to be handed in again
    /// ([`Core::next_woken`]).
    pub fn has_woken(&self) -> bool {
        !self.ctx.woken.is_empty() || self.ctx.shared.location.has_ready()
    }

    /// The next message that waited on an AoR whose change this core
    /// finished (or that an operator's removal released): hand it in
    /// with [`Core::handle_again`].
    pub fn next_woken(&mut self) -> Option<Parked> {
        if self.ctx.woken.is_empty() {
            self.ctx.woken.extend(self.ctx.shared.location.take_ready());
        }
        self.ctx.woken.pop_front()
    }
}
