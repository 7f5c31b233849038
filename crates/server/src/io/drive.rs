//! Running one message through the core: what it asks to be stored is
//! stored before the answer it guards is released, a change that meets
//! another in flight is handed in again, and events are logged.

use std::net::SocketAddr;

use crate::io::journal::Journal;
use crate::proto::core::{Core, Event, Now, Reply, Transport};

/// Times a message whose AoR has a change in flight on another worker
/// is handed in again (yielding in between) before it gets 500 with
/// Retry-After. That change is one journal append away from done.
pub const BUSY_TRIES: usize = 10_000;

/// Handles `input` from `src`; `journal` stores binding changes (`None`:
/// memory only). Returns what to do with `out` and leaves the core's
/// extra messages in [`Core::extra`].
#[inline]
pub fn handle(
    core: &mut Core,
    journal: Option<&mut Journal>,
    input: &[u8],
    src: SocketAddr,
    transport: Transport,
    now: Now,
    out: &mut Vec<u8>,
) -> Reply {
    out.clear();
    let mut reply = core.handle(input, src, transport, now, out);
    if reply == Reply::Retry {
        reply = retry(core, input, src, transport, now, out);
    }
    if reply == Reply::Persist {
        let stored = match journal {
            Some(j) => j.append(core.to_persist()),
            None => Ok(()),
        };
        reply = core.persisted(stored, input, out);
    }
    if core.has_events() {
        log_events(core);
    }
    reply
}

/// Hands a message whose AoR is busy in again until it is not, or gives
/// up with 500 and Retry-After.
#[cold]
fn retry(
    core: &mut Core,
    input: &[u8],
    src: SocketAddr,
    transport: Transport,
    now: Now,
    out: &mut Vec<u8>,
) -> Reply {
    for _ in 1..BUSY_TRIES {
        std::thread::yield_now();
        out.clear();
        let reply = core.handle_again(input, src, transport, now, out);
        if reply != Reply::Retry {
            return reply;
        }
    }
    core.answer_busy(input, src, transport, out)
}

/// Logs what the core reported (rate limited).
#[cold]
pub fn log_events(core: &mut Core) {
    for e in core.events() {
        match e {
            Event::AuthFailed { src, user } => crate::io::log::auth_failure(src, &user),
            Event::Oversize { what, dest, len } => crate::io::log::oversize(what, dest, len),
            Event::JournalFailed { aor, error } => crate::io::log::journal_error(&aor, &error),
        }
    }
}
