//! Timer-driven walks through each machine, with time passed in.

use std::time::{Duration, Instant};

use super::*;
use crate::status::StatusCode;

const T1: Duration = Duration::from_millis(500);

fn s(code: u16) -> StatusCode {
    StatusCode::new(code).expect("valid test status")
}

/// Fires timers at each deadline until `until`, returning the outputs with their times.
fn run<F, D>(
    mut deadline: D,
    mut fire: F,
    start: Instant,
    until: Duration,
) -> Vec<(Duration, Output)>
where
    D: FnMut() -> Option<Instant>,
    F: FnMut(Instant) -> Output,
{
    let mut log = Vec::new();
    while let Some(d) = deadline() {
        if d > start + until {
            break;
        }
        let out = fire(d);
        log.push((d - start, out));
    }
    log
}

#[test]
fn client_invite_retransmits_with_doubling_then_times_out() {
    let t0 = Instant::now();
    let mut tx = ClientInvite::new(t0, false, TimerConfig::RFC3261);
    let cell = std::cell::RefCell::new(&mut tx);
    let log = run(
        || cell.borrow().next_deadline(),
        |now| cell.borrow_mut().on_timer(now),
        t0,
        Duration::from_secs(40),
    );
    let retrans: Vec<_> = log
        .iter()
        .filter(|(_, o)| o.retransmit)
        .map(|(t, _)| t.as_millis())
        .collect();
    // A fires at 0.5, 1.5, 3.5, 7.5, 15.5, 31.5 s; B at 32 s.
    assert_eq!(retrans, vec![500, 1500, 3500, 7500, 15500, 31500]);
    let (t, last) = log.last().copied().expect("timer B fired");
    assert_eq!(t, T1 * 64);
    assert!(last.timeout && last.terminated);
    assert!(tx.is_terminated());
}

#[test]
fn client_invite_failure_is_acked_and_absorbed() {
    let t0 = Instant::now();
    let mut tx = ClientInvite::new(t0, false, TimerConfig::RFC3261);
    let o = tx.on_response(s(180), t0);
    assert!(o.deliver && !o.send_ack);
    assert_eq!(tx.state(), ClientInviteState::Proceeding);
    assert_eq!(tx.next_deadline(), None, "no timer A/B in Proceeding");
    let o = tx.on_response(s(486), t0);
    assert!(o.deliver && o.send_ack);
    let o = tx.on_response(s(486), t0 + T1);
    assert!(
        !o.deliver && o.send_ack,
        "retransmitted final is ACKed, not delivered"
    );
    assert_eq!(tx.next_deadline(), Some(t0 + Duration::from_secs(32)));
    assert!(tx.on_timer(t0 + Duration::from_secs(32)).terminated);
}

#[test]
fn client_invite_reliable_and_accepted() {
    let t0 = Instant::now();
    let mut tx = ClientInvite::new(t0, true, TimerConfig::RFC3261);
    assert_eq!(
        tx.next_deadline(),
        Some(t0 + T1 * 64),
        "no timer A over TCP"
    );
    assert!(tx.on_response(s(200), t0).deliver);
    assert!(
        tx.on_response(s(200), t0).deliver,
        "2xx retransmissions reach the TU"
    );
    assert!(!tx.on_response(s(180), t0).deliver);
    assert!(tx.on_timer(t0 + T1 * 64).terminated);
    let mut tx = ClientInvite::new(t0, true, TimerConfig::RFC3261);
    tx.on_response(s(404), t0);
    assert!(
        tx.on_timer(t0).terminated,
        "timer D is zero on reliable transports"
    );
}

#[test]
fn client_non_invite_caps_at_t2() {
    let t0 = Instant::now();
    let mut tx = ClientNonInvite::new(t0, false, TimerConfig::RFC3261);
    let cell = std::cell::RefCell::new(&mut tx);
    let log = run(
        || cell.borrow().next_deadline(),
        |now| cell.borrow_mut().on_timer(now),
        t0,
        Duration::from_secs(40),
    );
    let retrans: Vec<_> = log
        .iter()
        .filter(|(_, o)| o.retransmit)
        .map(|(t, _)| t.as_millis())
        .collect();
    assert_eq!(&retrans[..5], &[500, 1500, 3500, 7500, 11500]);
    assert!(log.last().expect("F fired").1.timeout);
}

#[test]
fn client_non_invite_proceeding_retransmits_every_t2() {
    let t0 = Instant::now();
    let mut tx = ClientNonInvite::new(t0, false, TimerConfig::RFC3261);
    tx.on_response(s(100), t0);
    assert!(tx.on_timer(t0 + T1).retransmit);
    assert_eq!(tx.next_deadline(), Some(t0 + T1 + Duration::from_secs(4)));
    let o = tx.on_response(s(200), t0 + T1);
    assert!(o.deliver);
    assert!(
        !tx.on_response(s(200), t0 + T1).deliver,
        "absorbed in Completed"
    );
    assert!(
        tx.on_timer(t0 + T1 + Duration::from_secs(5)).terminated,
        "timer K = T4"
    );
}

#[test]
fn server_invite_failure_waits_for_ack() {
    let t0 = Instant::now();
    let mut tx = ServerInvite::new(false, TimerConfig::RFC3261);
    assert!(
        !tx.on_request_retransmission().retransmit,
        "nothing sent yet"
    );
    assert!(tx.on_tu_response(s(180), t0).send_response);
    assert!(tx.on_request_retransmission().retransmit);
    assert!(tx.on_tu_response(s(486), t0).send_response);
    assert!(
        !tx.on_tu_response(s(500), t0).send_response,
        "one final only"
    );
    assert!(tx.on_timer(t0 + T1).retransmit, "timer G");
    assert!(tx.on_timer(t0 + T1 * 3).retransmit, "G doubles");
    assert!(tx.on_ack(t0 + T1 * 4).ack_received);
    assert!(!tx.on_timer(t0 + T1 * 4 + Duration::from_secs(4)).terminated);
    assert!(
        tx.on_timer(t0 + T1 * 4 + Duration::from_secs(5)).terminated,
        "timer I = T4"
    );
}

#[test]
fn server_invite_timer_h_and_accepted() {
    let t0 = Instant::now();
    let mut tx = ServerInvite::new(true, TimerConfig::RFC3261);
    tx.on_tu_response(s(404), t0);
    assert_eq!(tx.next_deadline(), Some(t0 + T1 * 64), "no G over TCP");
    let o = tx.on_timer(t0 + T1 * 64);
    assert!(o.timeout && o.terminated);
    let mut tx = ServerInvite::new(false, TimerConfig::RFC3261);
    tx.on_tu_response(s(200), t0);
    assert!(
        tx.on_tu_response(s(200), t0).send_response,
        "2xx retransmissions pass (RFC 6026)"
    );
    assert!(tx.on_timer(t0 + T1 * 64).terminated, "timer L");
}

#[test]
fn server_non_invite_absorbs_and_resends() {
    let t0 = Instant::now();
    let mut tx = ServerNonInvite::new(false, TimerConfig::RFC3261);
    assert!(!tx.on_request_retransmission().retransmit);
    assert!(tx.on_tu_response(s(200), t0).send_response);
    assert!(tx.on_request_retransmission().retransmit);
    assert!(!tx.on_timer(t0 + T1 * 63).terminated);
    assert!(tx.on_timer(t0 + T1 * 64).terminated, "timer J");
    let mut tcp = ServerNonInvite::new(true, TimerConfig::RFC3261);
    tcp.on_tu_response(s(200), t0);
    assert!(
        tcp.on_timer(t0).terminated,
        "J is zero on reliable transports"
    );
}
