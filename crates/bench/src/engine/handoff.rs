//! Shared flows: every worker sends on worker 0's sockets or
//! connections, and a response one worker reads for another's call is
//! handed over, the owner woken if it sleeps.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::Worker;
use crate::flows::{Bell, Flows};
use crate::link::Link;

/// Responses another worker read for this one (shared flows).
#[derive(Debug)]
pub(super) struct Handoff {
    waiting: AtomicBool,
    messages: std::sync::Mutex<Vec<Vec<u8>>>,
    /// The worker is in (or about to enter) its idle wait.
    sleeping: AtomicBool,
    /// Ends that wait.
    pub(super) bell: Bell,
}

impl Handoff {
    pub(super) fn new() -> io::Result<Self> {
        Ok(Handoff {
            waiting: AtomicBool::new(false),
            messages: std::sync::Mutex::new(Vec::new()),
            sleeping: AtomicBool::new(false),
            bell: Bell::new()?,
        })
    }

    pub(super) fn push(&self, handed: Vec<u8>) {
        let mut m = self.messages.lock().unwrap_or_else(|e| e.into_inner());
        m.push(handed);
        drop(m);
        // With `idle`'s order (sleeping, then waiting), either the owner
        // sees this message before it waits or this sees it asleep.
        self.waiting.store(true, Ordering::SeqCst);
        if self.sleeping.swap(false, Ordering::SeqCst) {
            self.bell.ring();
        }
    }

    pub(super) fn take(&self) -> Vec<Vec<u8>> {
        if !self.waiting.swap(false, Ordering::SeqCst) {
            return Vec::new();
        }
        std::mem::take(&mut *self.messages.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Waits in `flows` for up to `timeout` unless a message is already
    /// handed over; one handed over meanwhile ends the wait at once.
    pub(super) fn idle(&self, flows: &mut Flows, timeout: Duration) {
        self.sleeping.store(true, Ordering::SeqCst);
        if !self.waiting.load(Ordering::SeqCst) {
            flows.wait(timeout);
        }
        self.sleeping.store(false, Ordering::SeqCst);
    }
}

/// Worker 0's links for every worker: its own, and another handle on
/// each for each other worker (a UDP socket, or a connection that one
/// thread at a time frames).
pub(super) fn shared_links(first: Vec<Link>, threads: usize) -> io::Result<Vec<Vec<Link>>> {
    let first: Vec<Link> = first.into_iter().map(Link::into_shared).collect();
    let mut all = Vec::with_capacity(threads);
    for _ in 1..threads {
        let copies = first
            .iter()
            .map(|l| {
                l.share()?
                    .ok_or_else(|| io::Error::other("a link that cannot be shared"))
            })
            .collect::<io::Result<Vec<_>>>()?;
        all.push(copies);
    }
    all.insert(0, first);
    Ok(all)
}

/// The worker a call belongs to, from its Call-ID
/// (`NUMBER.SLOT.WORKER.RUN` in hex).
pub(super) fn owner_of(call_id: &str) -> Option<usize> {
    usize::from_str_radix(call_id.split('.').nth(2)?, 16).ok()
}

/// Each worker's links on the ports `locals` gives, one SO_REUSEPORT group
/// of `threads` sockets a port, steered by Call-ID; why not where the
/// kernel (or the ports) would not have it.
pub(super) fn steered_links(
    locals: impl Iterator<Item = io::Result<SocketAddr>>,
    threads: usize,
) -> Result<Vec<Vec<Link>>, String> {
    let mut links: Vec<Vec<Link>> = (0..threads).map(|_| Vec::new()).collect();
    for local in locals {
        let group = local
            .and_then(|l| crate::link::udp_group(l, threads))
            .map_err(|e| e.to_string())?;
        for (thread, link) in group.into_iter().enumerate() {
            links[thread].push(link);
        }
    }
    Ok(links)
}

impl Worker<'_> {
    /// A worker of a steered group whose calls are done keeps reading its
    /// sockets until every worker's are: a socket leaving the group would
    /// renumber the others, and an ICMP error goes to the socket the
    /// flow's addresses hash to, not by Call-ID, so it may reach this one
    /// for another worker's call (handed over as it is read). No longer
    /// than any worker's calls may run: the starts' end and the drain.
    pub(super) fn serve_the_group(
        &mut self,
        buf: &mut [u8],
        closed: &mut Vec<usize>,
        stop: &AtomicBool,
    ) {
        self.group_done.fetch_add(1, Ordering::SeqCst);
        let end = self.start + self.run.duration + self.run.drain + Duration::from_secs(1);
        while self.group_done.load(Ordering::SeqCst) < self.run.threads.max(1)
            && !stop.load(Ordering::Relaxed)
            && Instant::now() < end
        {
            self.read(buf, closed);
            self.flows.wait(Duration::from_millis(10));
        }
    }
}
