//! The common path allocates nothing: parsing a REGISTER, an INVITE with
//! SDP and a 200 OK, reading their contacts and Vias, writing a response
//! and forwarding with proxy edits into warmed-up buffers.
#![allow(unsafe_code)] // a counting global allocator needs `unsafe impl GlobalAlloc`

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use sip_core::proxy::{forward_request, RequestEdits};
use sip_core::writer::{write_response, ResponseOptions};
use sip_core::{Message, StatusCode};

struct Counting;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: delegates to the system allocator; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations(f: impl FnOnce()) -> usize {
    let before = ALLOCS.with(Cell::get);
    f();
    ALLOCS.with(Cell::get) - before
}

const REGISTER: &[u8] = include_bytes!("../testdata/bench/register.sip");
const INVITE: &[u8] = include_bytes!("../testdata/bench/invite.sip");
const OK200: &[u8] = include_bytes!("../testdata/bench/ok200.sip");

#[test]
fn the_counter_sees_allocations() {
    assert!(allocations(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(8)))) > 0);
}

#[test]
fn parse_and_forward_allocate_nothing() {
    let mut out = Vec::with_capacity(4096);
    for msg in [REGISTER, INVITE, OK200] {
        let n = allocations(|| {
            let m = Message::parse(msg).expect("bench message parses");
            assert!(m.contacts().count() <= 1);
            assert!(m.vias().count() >= 1);
            assert!(m.from().tag().is_some());
            out.clear();
            if m.is_request() {
                write_response(
                    &mut out,
                    &m,
                    StatusCode::OK,
                    &ResponseOptions {
                        to_tag: Some("abc"),
                        ..Default::default()
                    },
                );
                out.clear();
                forward_request(
                    &m,
                    &RequestEdits {
                        via: Some("SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKx"),
                        record_route: Some("<sip:192.0.2.1;lr>"),
                        route: Some("<sip:edge.example;lr>"),
                        max_forwards: true,
                        force_rport: false,
                        remove: None,
                        received: Some(("192.0.2.99", 5062)),
                        request_uri: Some("sip:bob@192.0.2.4"),
                        pop_routes: 0,
                        body: Some(b"v=0\r\ns=relayed\r\n"),
                    },
                    &mut out,
                )
                .expect("forwardable");
            }
        });
        assert_eq!(n, 0, "{}", String::from_utf8_lossy(&msg[..40]));
    }
}
