//! The server's own work per request, without sockets: the core driven
//! as a UDP worker drives it (`io::drive::handle`: handle, store what it
//! asks, release the answer) on the requests `sipsec bench compare` sends
//! (REGISTER new/refresh/logout, INVITE to an unknown user, INVITE
//! redirected), with and without the journal. What is left of a call's
//! CPU cost in `bench compare` is the kernel's.
#![allow(missing_docs)]

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use sipsec_server::io::journal::{Durability, Persistence, SharedJournal};
use sipsec_server::proto::location::MemoryLocation;
use sipsec_server::{Config, Core, Mode, Now, Reply, Shared, Transport};

const USERS: usize = 10_000;
const NOW_S: u64 = 1_000_000;

fn now() -> Now {
    Now {
        unix_ms: NOW_S * 1000,
        mono: std::time::Instant::now(),
    }
}

fn register(user: usize, expires: u32) -> Vec<u8> {
    format!(
        "REGISTER sip:127.0.0.1:5060 SIP/2.0\r\n\
Via: SIP/2.0/UDP 127.0.0.1:5099;branch=z9hG4bK-{user}-{expires};rport\r\n\
Max-Forwards: 70\r\n\
From: <sip:u{user}@127.0.0.1>;tag=f{user}\r\n\
To: <sip:u{user}@127.0.0.1>\r\n\
Call-ID: reg-{user}@127.0.0.1\r\n\
CSeq: 1 REGISTER\r\n\
Contact: <sip:u{user}@127.0.0.1:5099;transport=udp>\r\n\
Expires: {expires}\r\n\
User-Agent: sipsec-bench/0.1\r\n\
Content-Length: 0\r\n\r\n"
    )
    .into_bytes()
}

fn invite(user: usize) -> Vec<u8> {
    let sdp = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n";
    format!(
        "INVITE sip:u{user}@127.0.0.1:5060 SIP/2.0\r\n\
Via: SIP/2.0/UDP 127.0.0.1:5099;branch=z9hG4bK-inv-{user};rport\r\n\
Max-Forwards: 70\r\n\
From: <sip:caller@127.0.0.1>;tag=c{user}\r\n\
To: <sip:u{user}@127.0.0.1>\r\n\
Call-ID: inv-{user}@127.0.0.1\r\n\
CSeq: 1 INVITE\r\n\
Contact: <sip:caller@127.0.0.1:5099>\r\n\
Content-Type: application/sdp\r\n\
Content-Length: {}\r\n\r\n{sdp}",
        sdp.len()
    )
    .into_bytes()
}

/// A core and, when asked, its journal.
struct Worker {
    core: Core,
    journal: Option<SharedJournal>,
    /// Kept open for the journal's lifetime.
    _store: Option<Persistence>,
}

impl Worker {
    fn handle(&mut self, msg: &[u8], src: SocketAddr, at: Now, out: &mut Vec<u8>) -> Reply {
        let mut journal = self
            .journal
            .as_ref()
            .map(|j| j.lock().unwrap_or_else(|e| e.into_inner()));
        sipsec_server::io::drive::handle(
            &mut self.core,
            &sipsec_server::io::sinks::Sinks::default(),
            journal
                .as_deref_mut()
                .map(|j| j as &mut dyn sipsec_server::io::drive::Store),
            msg,
            src,
            Transport::Udp,
            at,
            out,
        )
    }
}

fn core(mode: Mode, journal: Option<&std::path::Path>) -> Worker {
    let config = Config {
        mode,
        advertise: "127.0.0.1:5060".parse().expect("literal"),
        ..Config::default()
    };
    let mut shared = Shared::new(
        config,
        Arc::new(MemoryLocation::new(std::hash::RandomState::new())),
        None,
        now(),
        std::hash::RandomState::new(),
    );
    shared.stage_clock = Some(std::time::Instant::now);
    let store = journal.map(|dir| Persistence::new(dir, Durability::Process).expect("journal dir"));
    let journal = store.as_ref().map(|p| p.journal(0).expect("journal"));
    Worker {
        core: Core::new(Arc::new(shared)),
        journal,
        _store: store,
    }
}

/// Handles `msgs` round-robin, one per iteration.
fn run(c: &mut Criterion, name: &str, core: &mut Worker, msgs: &[Vec<u8>]) {
    let src: SocketAddr = "127.0.0.1:5099".parse().expect("literal");
    let mut out = Vec::with_capacity(4096);
    let mut i = 0;
    let at = now();
    c.bench_function(name, |b| {
        b.iter(|| {
            let r = core.handle(black_box(&msgs[i]), src, at, &mut out);
            i = (i + 1) % msgs.len();
            assert!(matches!(r, Reply::Send(..)));
        })
    });
}

fn benches(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("sipsec-core-bench-{}", std::process::id()));
    let regs: Vec<_> = (0..USERS).map(|u| register(u, 3600)).collect();
    let logouts: Vec<_> = (0..USERS).map(|u| register(u, 0)).collect();
    let invites: Vec<_> = (0..USERS).map(invite).collect();

    let mut registrar = core(Mode::Registrar, None);
    run(c, "register/refresh", &mut registrar, &regs);
    let mut journaled = core(Mode::Registrar, Some(&dir));
    run(c, "register/refresh_journal", &mut journaled, &regs);
    // Logout and register alternate, so every logout removes a binding.
    let pairs: Vec<_> = regs
        .iter()
        .zip(&logouts)
        .flat_map(|(r, l)| [r.clone(), l.clone()])
        .collect();
    run(c, "register/bind_then_logout", &mut registrar, &pairs);

    let mut proxy = core(Mode::Proxy, None);
    run(c, "invite/not_found", &mut proxy, &invites);
    let mut redirect = core(Mode::Redirect, None);
    let src: SocketAddr = "127.0.0.1:5099".parse().expect("literal");
    let mut out = Vec::new();
    for r in &regs {
        redirect.handle(r, src, now(), &mut out);
    }
    run(c, "invite/redirect", &mut redirect, &invites);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(core_benches, benches);
criterion_main!(core_benches);
