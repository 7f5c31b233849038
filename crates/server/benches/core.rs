//! The server's own work per request, without sockets: the core driven
//! as a UDP worker drives it (`io::drive::handle`: handle, store what it
//! asks, release the answer) on the requests `sipsec bench compare` sends
//! (REGISTER new/refresh/logout, INVITE to an unknown user, INVITE
//! redirected), with and without the journal, and a whole call through
//! the stateful proxy (INVITE, 180 and 200 with SDP, ACK, BYE, 200):
//! `call/stateful` without a media relay, `call/relayed` with every call
//! relayed (the offer and the answers parked and handed in again as the
//! relay's answer would). What is left of a
//! call's CPU cost in `bench compare` is the kernel's.
//! `cold/…` times one request after 8 MiB were written, as a worker that
//! slept between two requests meets its caches: a registrar's refresh
//! beside the floor's work on the same request (what `bench null` does:
//! frame, parse, write a 200), and prints their ratio.
//! With `SIPSEC_CORE_WORKERS=1,2,4,8` it instead prints what sharing one
//! location store costs each of that many workers refreshing at once.
#![allow(unsafe_code)] // the counting global allocator
#![allow(missing_docs)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use sipsec_server::config_media::MediaMode;
use sipsec_server::io::journal::{Durability, Persistence, SharedJournal};
use sipsec_server::proto::location::MemoryLocation;
use sipsec_server::proto::media::Outcome;
use sipsec_server::{Config, Core, Mode, Now, Reply, Shared, Transport};

/// Counts allocations, so that a whole call's are reported beside its time.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: delegates to the system allocator; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

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
    let (mut allocs, mut handled) = (0u64, 0u64);
    c.bench_function(name, |b| {
        b.iter(|| {
            let before = ALLOCS.load(Ordering::Relaxed);
            let r = core.handle(black_box(&msgs[i]), src, at, &mut out);
            allocs += ALLOCS.load(Ordering::Relaxed) - before;
            handled += 1;
            i = (i + 1) % msgs.len();
            assert!(matches!(r, Reply::Send(..)));
        })
    });
    println!(
        "{name}: {:.1} allocations per request",
        allocs as f64 / handled.max(1) as f64
    );
}

fn benches(c: &mut Criterion) {
    if let Ok(list) = std::env::var("SIPSEC_CORE_WORKERS") {
        workers_table(&list);
        std::process::exit(0);
    }
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

/// A stateful proxy, relaying every call's media when `relay`; `u0`
/// registered at `CALLEE`.
fn stateful_proxy(relay: bool) -> (Core, Arc<Shared>) {
    let mut config = Config {
        mode: Mode::Proxy,
        stateful: true,
        advertise: "127.0.0.1:5060".parse().expect("literal"),
        ..Config::default()
    };
    if relay {
        config.media.mode = MediaMode::Always;
        config.media.relays =
            sipsec_server::proto::ng::Settings::one("127.0.0.1:22222".parse().expect("literal"));
    }
    let shared = Arc::new(Shared::new(
        config,
        Arc::new(MemoryLocation::new(std::hash::RandomState::new())),
        None,
        now(),
        std::hash::RandomState::new(),
    ));
    let mut core = Core::new(shared.clone());
    let mut out = Vec::new();
    let reg = register(0, 3600);
    let reg = String::from_utf8(reg).expect("ascii");
    let reg = reg.replace("127.0.0.1:5099;transport", &format!("{CALLEE};transport"));
    let r = sipsec_server::io::drive::handle(
        &mut core,
        &sipsec_server::io::sinks::Sinks::default(),
        None,
        reg.as_bytes(),
        CALLEE.parse().expect("literal"),
        Transport::Udp,
        now(),
        &mut out,
    );
    assert!(matches!(r, Reply::Send(..)), "{r:?}");
    (core, shared)
}

const CALLER: &str = "127.0.0.1:5099";
const CALLEE: &str = "127.0.0.1:5098";
const RELAYED: &str = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 30000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\na=rtcp:30001\r\n";

/// The callee's (or caller's) response to the forwarded `request`.
fn response(request: &[u8], status: &str, sdp: bool) -> Vec<u8> {
    let text = std::str::from_utf8(request).expect("ascii");
    let mut r = format!("SIP/2.0 {status}\r\n");
    for line in text.split("\r\n").take_while(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or("");
        match name {
            "Via" | "Record-Route" | "From" | "Call-ID" | "CSeq" => {
                r.push_str(line);
                r.push_str("\r\n");
            }
            "To" => {
                r.push_str(line);
                r.push_str(";tag=callee\r\n");
            }
            _ => {}
        }
    }
    r.push_str(&format!("Contact: <sip:u0@{CALLEE}>\r\n"));
    let body = if sdp { RELAYED } else { "" };
    if sdp {
        r.push_str("Content-Type: application/sdp\r\n");
    }
    r.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    r.into_bytes()
}

/// Hands `msg` in; when it was parked on the relay, hands it in again
/// with the relay's session description. What was forwarded is in `out`.
fn relayed(
    core: &mut Core,
    shared: &Shared,
    at: Now,
    msg: &[u8],
    src: SocketAddr,
    out: &mut Vec<u8>,
) {
    out.clear();
    let r = core.handle(msg, src, Transport::Udp, at, out);
    if matches!(r, Reply::Send(..)) {
        return;
    }
    let table = shared
        .media
        .as_ref()
        .unwrap_or_else(|| panic!("{r:?}: {}", String::from_utf8_lossy(msg)));
    let asked = table.take_asked();
    assert!(
        asked.iter().any(|(q, _)| *q != 0),
        "neither forwarded nor parked: {r:?}"
    );
    for (question, _) in asked {
        for p in table.answered(question) {
            out.clear();
            let o = Outcome::Sdp(RELAYED.to_owned());
            let r = core.handle_relayed(&p.message, p.src, p.arrived, o, at, out);
            assert!(matches!(r, Reply::Send(..)), "{r:?}");
        }
    }
}

/// A request of the caller's dialog after the 200 (`method`, CSeq `n`).
fn in_dialog(call: usize, method: &str, n: u32) -> Vec<u8> {
    format!(
        "{method} sip:u0@{CALLEE} SIP/2.0\r\n\
Via: SIP/2.0/UDP {CALLER};branch=z9hG4bK-{method}-{call};rport\r\n\
Max-Forwards: 70\r\n\
Route: <sip:127.0.0.1:5060;lr>\r\n\
From: <sip:caller@127.0.0.1>;tag=c{call}\r\n\
To: <sip:u0@127.0.0.1>;tag=callee\r\n\
Call-ID: relayed-{call}@127.0.0.1\r\n\
CSeq: {n} {method}\r\n\
Content-Length: 0\r\n\r\n"
    )
    .into_bytes()
}

/// A whole call through the stateful proxy, its media relayed or not.
fn call(c: &mut Criterion, name: &str, relay: bool) {
    let (mut core, shared) = stateful_proxy(relay);
    let caller: SocketAddr = CALLER.parse().expect("literal");
    let callee: SocketAddr = CALLEE.parse().expect("literal");
    let mut out = Vec::with_capacity(4096);
    let mut call = 0;
    let start = now();
    let mut sends = sipsec_server::proto::effects::Sends::default();
    // Allocations and calls handed in, the messages' own making left out.
    let (mut allocs, mut calls) = (0, 0);
    c.bench_function(name, |b| {
        b.iter(|| {
            call += 1;
            // Calls 10 ms apart (virtual time): the transactions' timers
            // run every 100 calls, so what they hold stays bounded.
            let at = Now {
                unix_ms: start.unix_ms + call as u64 * 10,
                mono: start.mono + std::time::Duration::from_millis(call as u64 * 10),
            };
            if call % 100 == 0 {
                if let Some(tx) = &shared.transactions {
                    tx.tick(at.mono, &mut sends, &shared.metrics);
                    sends.clear();
                }
            }
            let inv = String::from_utf8(invite(0))
                .expect("ascii")
                .replace("inv-0@", &format!("relayed-{call}@"))
                .replace(
                    "branch=z9hG4bK-inv-0",
                    &format!("branch=z9hG4bK-inv-{call}"),
                )
                .replace("tag=c0", &format!("tag=c{call}"));
            let mut hand = |msg: &[u8], src: SocketAddr, out: &mut Vec<u8>| {
                let before = ALLOCS.load(Ordering::Relaxed);
                relayed(&mut core, &shared, at, msg, src, out);
                allocs += ALLOCS.load(Ordering::Relaxed) - before;
            };
            hand(inv.as_bytes(), caller, &mut out);
            let forwarded = out.clone();
            hand(&response(&forwarded, "180 Ringing", true), callee, &mut out);
            hand(&response(&forwarded, "200 OK", true), callee, &mut out);
            hand(&in_dialog(call, "ACK", 1), caller, &mut out);
            hand(&in_dialog(call, "BYE", 2), caller, &mut out);
            let bye = out.clone();
            hand(&response(&bye, "200 OK", false), callee, &mut out);
            black_box(&out);
            calls += 1;
        })
    });
    println!(
        "{name}: {:.1} allocations per call",
        allocs as f64 / calls.max(1) as f64
    );
    if let Some(table) = shared.media.as_ref() {
        assert_eq!(table.sizes().0, 0, "calls left at the relay");
    }
}

fn calls(c: &mut Criterion) {
    call(c, "call/stateful", false);
    call(c, "call/relayed", true);
}

/// Bytes written between two cold requests: past any core's L2, so the
/// next request's code and data come from the shared cache or memory, as
/// they do for a worker that slept between two requests.
const EVICT: usize = 8 << 20;

/// Times `each(i)` alone, with the caches evicted before every call;
/// returns the mean over every call criterion made, warm-up included.
fn cold(c: &mut Criterion, name: &str, mut each: impl FnMut(usize)) -> f64 {
    let mut junk = vec![0u8; EVICT];
    let mut i = 0;
    let mut total = std::time::Duration::ZERO;
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut spent = std::time::Duration::ZERO;
            for _ in 0..iters {
                for line in junk.chunks_mut(64) {
                    line[0] = line[0].wrapping_add(1);
                }
                black_box(&junk);
                let t = std::time::Instant::now();
                each(i);
                spent += t.elapsed();
                i += 1;
            }
            total += spent;
            spent
        })
    });
    total.as_secs_f64() / i.max(1) as f64
}

/// A request after the caches were emptied, as one that wakes an idle
/// worker meets them: the registrar's refresh beside the floor's work on
/// the same request (frame, parse, a 200 written as `bench null` writes
/// it), so that the code and data the registrar adds show as time.
fn cold_requests(c: &mut Criterion) {
    use sip_core::framing::{frame, Frame};
    use sip_core::writer::{write_response, ResponseOptions};
    use sip_core::{HeaderName, Limits, Message, StatusCode};
    let regs: Vec<_> = (0..USERS).map(|u| register(u, 3600)).collect();
    let src: SocketAddr = "127.0.0.1:5099".parse().expect("literal");
    let mut out = Vec::with_capacity(4096);
    let mut registrar = core(Mode::Registrar, None);
    for r in &regs {
        registrar.handle(r, src, now(), &mut out);
    }
    let at = now();
    let registrar_s = cold(c, "cold/register_refresh", |i| {
        let r = registrar.handle(black_box(&regs[i % USERS]), src, at, &mut out);
        assert!(matches!(r, Reply::Send(..)));
    });
    let limits = Limits::default();
    let floor_s = cold(c, "cold/floor_parse_and_answer", |i| {
        let msg = black_box(&regs[i % USERS][..]);
        let Ok(Frame::Message(n)) = frame(msg, &limits) else {
            panic!("a whole request");
        };
        let req = Message::parse(&msg[..n]).expect("a request");
        let contact = req.header(HeaderName::Contact).unwrap_or("");
        let extra = [("Contact", contact)];
        let opts = ResponseOptions {
            to_tag: Some("null"),
            extra: &extra,
            ..Default::default()
        };
        out.clear();
        write_response(&mut out, &req, StatusCode::OK, &opts);
        black_box(&out);
    });
    // Both ran (a filter may have picked one).
    if floor_s > 0.0 && registrar_s > 0.0 {
        println!(
            "cold: the registrar's refresh costs {:.2}× the floor's work on it ({:.2} against {:.2} µs)",
            registrar_s / floor_s,
            registrar_s * 1e6,
            floor_s * 1e6
        );
    }
}

criterion_group!(core_benches, benches, calls, cold_requests);
criterion_main!(core_benches);

/// This thread's CPU time, from the scheduler's own account.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Requests each worker handles per run of [`workers`]
/// (`SIPSEC_CORE_REQUESTS` changes it, e.g. under valgrind).
fn per_worker() -> usize {
    std::env::var("SIPSEC_CORE_REQUESTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(400_000)
}

/// Refreshes on `w` workers at once, each a core of its own on its own
/// 10,000 users (so each has one worker's cache footprint), with one
/// store and its shards, counters and locks shared by all (`one`), or a
/// store each. Returns each worker's CPU per refresh, µs.
fn workers(w: usize, one: bool) -> Vec<f64> {
    let regs: Vec<Vec<_>> = (0..w)
        .map(|i| (0..USERS).map(|u| register(i * USERS + u, 3600)).collect())
        .collect();
    let store = core(Mode::Registrar, None).core.shared().clone();
    let per = per_worker();
    let ns: Vec<u64> = std::thread::scope(|s| {
        let hs: Vec<_> = regs
            .iter()
            .map(|regs| {
                let shared = if one {
                    store.clone()
                } else {
                    core(Mode::Registrar, None).core.shared().clone()
                };
                s.spawn(move || {
                    let mut c = Core::new(shared);
                    let src: SocketAddr = "127.0.0.1:5099".parse().expect("literal");
                    let (mut out, at) = (Vec::with_capacity(4096), now());
                    let t0 = thread_cpu_ns();
                    for k in 0..per {
                        let r = sipsec_server::io::drive::handle(
                            &mut c,
                            &sipsec_server::io::sinks::Sinks::default(),
                            None,
                            &regs[k % regs.len()],
                            src,
                            Transport::Udp,
                            at,
                            &mut out,
                        );
                        assert!(matches!(r, Reply::Send(..)), "{r:?}");
                    }
                    thread_cpu_ns() - t0
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("worker")).collect()
    });
    ns.iter().map(|n| *n as f64 / per as f64 / 1000.0).collect()
}

/// `SIPSEC_CORE_WORKERS=1,2,4,8`: what sharing one store costs each
/// worker, apart from the kernel. For each count, runs with one store
/// and with a store per worker, alternated three times (the order
/// swapped every other round).
fn workers_table(list: &str) {
    let counts: Vec<usize> = list
        .split(',')
        .filter_map(|w| w.trim().parse().ok())
        .collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    println!("| workers | one store, µs/refresh (each worker) | a store each | one / each |");
    println!("|---|---|---|---|");
    for &w in counts.iter().filter(|w| **w > 0) {
        for round in 0..3 {
            let (one, each) = if round % 2 == 0 {
                (workers(w, true), workers(w, false))
            } else {
                let each = workers(w, false);
                (workers(w, true), each)
            };
            let show = |v: &[f64]| {
                let each: Vec<String> = v.iter().map(|x| format!("{x:.2}")).collect();
                format!("{:.2} ({})", mean(v), each.join(" / "))
            };
            println!(
                "| {w} | {} | {} | {:.2} |",
                show(&one),
                show(&each),
                mean(&one) / mean(&each)
            );
        }
    }
}
