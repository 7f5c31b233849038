//! The driver's threads that sleep until a decision needs them: the one
//! running the transactions' timers and the resolver. A core asks for
//! them (and the media thread) through [`Wake`]; the sender that carries its output out wakes
//! them here.

use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;

use crate::proto::effects::Wake;
use crate::proto::media::Outcome;
use crate::proto::parked::Parked;

/// What carries out the external requests the cores queue — the
/// commands for the media relays (`io::media::Pump`), the certificates to
/// fetch (`io::certs::Fetcher`) — from the thread that carries their
/// output.
pub trait Pumps: std::fmt::Debug + Send + Sync {
    /// Starts on every request queued; `via`: the UDP socket of the
    /// thread that pumps (a worker's SIP socket), when it has one —
    /// what is sent from it is answered there, in a worker's own loop.
    fn pump(&self, via: Option<Via<'_>>);

    /// A datagram from `src` that arrived on a SIP socket: when it is an
    /// answer to a request this pumps, it is taken, and the messages that
    /// waited on it come back with their outcome for the caller to hand
    /// in; `None`: not one of ours.
    fn answer(&self, _data: &[u8], _src: SocketAddr) -> Option<Vec<(Parked, Outcome)>> {
        None
    }
}

/// A worker's SIP socket, as the thread that pumps hands it over, with
/// its address family (known when the socket was bound, so a pump asks
/// the kernel nothing).
#[derive(Debug, Clone, Copy)]
pub struct Via<'a> {
    /// The socket.
    pub sock: &'a UdpSocket,
    /// Whether it sends to IPv4 addresses.
    pub ipv4: bool,
}

/// Where each sleeping thread is, once it runs.
#[derive(Debug, Default)]
pub struct Wakers {
    timers: OnceLock<Thread>,
    names: OnceLock<Arc<mio::Waker>>,
    media: OnceLock<Arc<dyn Pumps>>,
    certs: OnceLock<Arc<dyn Pumps>>,
}

impl Wakers {
    /// The timer thread is `thread`; it looks at the table before its
    /// first sleep, so a wake asked before this is not lost.
    pub fn set_timers(&self, thread: Thread) {
        let _ = self.timers.set(thread);
    }

    /// The resolver wakes by `waker`; it takes the names asked before
    /// its first sleep, so a wake asked before this is not lost.
    pub fn set_names(&self, waker: Arc<mio::Waker>) {
        let _ = self.names.set(waker);
    }

    /// What the cores ask of the media relays is sent by `pump`, on the
    /// thread that carries their output; the media thread pumps before
    /// its first sleep, so a command asked before this is not lost.
    pub fn set_media(&self, pump: Arc<dyn Pumps>) {
        let _ = self.media.set(pump);
    }

    /// The certificates the cores ask for are fetched by `fetcher`'s
    /// threads, which look at the queue before their first sleep.
    pub fn set_certs(&self, fetcher: Arc<dyn Pumps>) {
        let _ = self.certs.set(fetcher);
    }

    /// What a datagram from `src` on a SIP socket answers, when it is a
    /// media relay's (see [`Pumps::answer`]).
    pub fn relay_answer(&self, data: &[u8], src: SocketAddr) -> Option<Vec<(Parked, Outcome)>> {
        self.media.get()?.answer(data, src)
    }

    /// Wakes what `wake` names; `via`: the calling thread's UDP socket.
    pub fn wake(&self, wake: Wake, via: Option<Via<'_>>) {
        if wake.timers {
            if let Some(t) = self.timers.get() {
                t.unpark();
            }
        }
        if wake.names {
            if let Some(w) = self.names.get() {
                let _ = w.wake();
            }
        }
        if wake.media {
            if let Some(p) = self.media.get() {
                p.pump(via);
            }
        }
        if wake.certs {
            if let Some(f) = self.certs.get() {
                f.pump(via);
            }
        }
    }
}
