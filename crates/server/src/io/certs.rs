//! The certificate fetcher of the verification service: threads that take
//! the URLs the cores asked for (`CertTable::take_asked`), fetch them
//! ([`crate::io::fetch`]), check the chain against the trust anchors at
//! the current time, [finish](crate::proto::stir::CertTable::finish) the
//! URL and hand the INVITEs that waited on it to their own core again.
//! A slow repository holds one fetcher thread until its deadline; the SIP
//! workers never wait for it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::io::fetch::Client;
use crate::io::send::Sender;
use crate::proto::core::Core;
use crate::proto::stir::{Cert, Stir};

/// The URLs to fetch, and what wakes the threads.
#[derive(Debug, Default)]
pub struct Fetcher {
    queue: Mutex<VecDeque<String>>,
    ready: Condvar,
    stir: Option<Arc<crate::proto::shared::Shared>>,
}

impl Fetcher {
    fn stir(&self) -> Option<&Stir> {
        self.stir.as_ref()?.stir.as_ref()
    }

    /// Takes what the cores asked and wakes a thread for each.
    pub fn wake(&self) {
        let Some(v) = self.stir().and_then(|s| s.verify.as_ref()) else {
            return;
        };
        let asked = v.certs.take_asked();
        if asked.is_empty() {
            self.ready.notify_all();
            return;
        }
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.extend(asked);
        self.ready.notify_all();
    }
}

impl crate::io::wake::Pumps for Fetcher {
    fn pump(&self, _via: Option<crate::io::wake::Via<'_>>) {
        self.wake();
    }
}

/// Starts `[stir]`'s fetcher threads over `core`'s shared state; each
/// gets its own core and sender from `make`.
pub fn start(
    shared: Arc<crate::proto::shared::Shared>,
    mut make: impl FnMut() -> (Core, Sender),
    stop: Arc<AtomicBool>,
) -> std::io::Result<(Arc<Fetcher>, Vec<JoinHandle<()>>)> {
    let Some(v) = shared.stir.as_ref().and_then(|s| s.verify.as_ref()) else {
        return Ok((Arc::new(Fetcher::default()), Vec::new()));
    };
    let client = Arc::new(Client::new(&v.settings.fetch).map_err(std::io::Error::other)?);
    let n = v.settings.fetch.fetchers;
    let fetcher = Arc::new(Fetcher {
        stir: Some(shared.clone()),
        ..Fetcher::default()
    });
    let mut threads = Vec::new();
    for i in 0..n {
        let (core, sender) = make();
        let (f, c, s) = (fetcher.clone(), client.clone(), stop.clone());
        threads.push(
            std::thread::Builder::new()
                .name(format!("x5u-{i}"))
                .spawn(move || run(&f, &c, core, &sender, &s))?,
        );
    }
    Ok((fetcher, threads))
}

fn run(fetcher: &Fetcher, client: &Client, mut core: Core, sender: &Sender, stop: &AtomicBool) {
    let mut out = Vec::with_capacity(4096);
    loop {
        let url = {
            let mut q = fetcher.queue.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if stop.load(Ordering::Relaxed) {
                    break None;
                }
                if let Some(u) = q.pop_front() {
                    break Some(u);
                }
                q = fetcher
                    .ready
                    .wait_timeout(q, Duration::from_millis(250))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        };
        let Some(url) = url else {
            break;
        };
        fetch_one(fetcher, client, &url, &mut core, sender, stop, &mut out);
    }
    // Stopping: what still waits is answered, not dropped.
    if let Some(v) = fetcher.stir().and_then(|s| s.verify.as_ref()) {
        for p in v.certs.close() {
            crate::io::drive::hand_in_and_send(&mut core, sender, &p, None, &mut out);
        }
    }
}

fn fetch_one(
    fetcher: &Fetcher,
    client: &Client,
    url: &str,
    core: &mut Core,
    sender: &Sender,
    stop: &AtomicBool,
    out: &mut Vec<u8>,
) {
    let Some(stir) = fetcher.stir() else {
        return;
    };
    let Some(v) = stir.verify.as_ref() else {
        return;
    };
    let now = crate::io::clock::now();
    let (cert, ttl) = match client.get(url, stop) {
        Ok(f) => {
            stir.counts.fetched.fetch_add(1, Ordering::Relaxed);
            let cert = match stir::cert::validate(&f.body, &v.trust, now.secs() as i64) {
                Ok(s) => Cert::Valid(Arc::new(s)),
                Err(e) => {
                    tracing::warn!(target: "sipsec::stir", url, "certificate refused: {e}");
                    Cert::Invalid(e)
                }
            };
            (cert, f.ttl.max(Duration::from_secs(1)))
        }
        Err(why) => {
            stir.counts.fetch_failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(target: "sipsec::stir", url, "certificate not fetched: {}", why.as_str());
            (Cert::Failed(why), v.settings.fetch.failure_ttl)
        }
    };
    let now = crate::io::clock::now();
    for p in v.certs.finish(url, cert, ttl, now.mono) {
        crate::io::drive::hand_in_and_send(core, sender, &p, None, out);
    }
}
