#![cfg(test)]
//! The transaction table on virtual time: retransmissions, timers, CANCEL,
//! failover to another address of a name, ICMP errors.

use super::*;
use crate::proto::names::Route;
use std::net::SocketAddr;

fn hop(port: u16, t: Transport) -> Hop {
    (SocketAddr::from(([127, 0, 0, 1], port)), t)
}

const INVITE: &[u8] = b"INVITE sip:bob@127.0.0.1:5070 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5080;branch=z9hG4bKa1;rport\r\nMax-Forwards: 70\r\nFrom: <sip:alice@sipsec>;tag=a\r\nTo: <sip:bob@sipsec>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
const FORWARDED: &[u8] = b"INVITE sip:bob@127.0.0.1:5070 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKsps00000000000000ab\r\nVia: SIP/2.0/UDP 127.0.0.1:5080;branch=z9hG4bKa1;rport=5080\r\nMax-Forwards: 69\r\nFrom: <sip:alice@sipsec>;tag=a\r\nTo: <sip:bob@sipsec>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
const KEY: Key = Key {
    branch: 0xab,
    cancel: false,
};

/// One target: the request as forwarded, its hop and name.
fn one(forwarded: &[u8], hop: Hop, route: Option<Route>) -> [Target<'_>; 1] {
    [Target {
        forwarded,
        hop,
        route,
        group: 0,
    }]
}

fn response(status: u16, method: &str) -> Vec<u8> {
    format!("SIP/2.0 {status} X\r\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKsps00000000000000ab\r\nVia: SIP/2.0/UDP 127.0.0.1:5080;branch=z9hG4bKa1;rport=5080\r\nFrom: <sip:alice@sipsec>;tag=a\r\nTo: <sip:bob@sipsec>;tag=b\r\nCall-ID: c1\r\nCSeq: 1 {method}\r\nContent-Length: 0\r\n\r\n").into_bytes()
}

fn strip(msg: &Message<'_>, out: &mut Vec<u8>) -> bool {
    sip_core::proxy::forward_response(msg, out).is_ok()
}

fn started(t0: Instant, down: Transport) -> (Transactions, Metrics, Sends) {
    let tx = Transactions::new(TimerConfig::RFC3261, DEFAULT_MAX_BYTES);
    let m = Metrics::default();
    let mut sends = Sends::default();
    let req = Message::parse(INVITE).unwrap();
    tx.start(
        KEY,
        &req,
        (hop(5080, Transport::Udp), None),
        one(FORWARDED, hop(5070, down), None),
        t0,
        &mut sends,
        &m,
    )
    .unwrap();
    (tx, m, sends)
}

fn statuses(sends: &Sends) -> Vec<String> {
    sends.summary()
}

/// A storm of INVITEs to a callee that never answers: the table stops
/// at its memory bound (503 for the rest), and once timer B has ended
/// them, the gauge is back at zero and the slots are handed back.
#[test]
fn the_table_is_bounded_by_memory_and_shrinks_after_a_storm() {
    let t0 = Instant::now();
    let bound = 8 << 20;
    let tx = Transactions::new(TimerConfig::RFC3261, bound);
    let m = Metrics::default();
    let mut sends = Sends::default();
    let req = Message::parse(INVITE).unwrap();
    let (mut started, mut full) = (0, 0);
    for branch in 0..40_000u64 {
        let key = Key {
            branch,
            cancel: false,
        };
        match tx.start(
            key,
            &req,
            (hop(5080, Transport::Udp), None),
            one(FORWARDED, hop(5070, Transport::Udp), None),
            t0,
            &mut sends,
            &m,
        ) {
            Ok(()) => started += 1,
            Err(NotStarted::Full) => full += 1,
            Err(NotStarted::Exists) => unreachable!("distinct keys"),
            Err(NotStarted::OverShare) => unreachable!("no share"),
        }
        sends.clear();
    }
    let held = m.transaction_bytes.load(Ordering::Relaxed);
    assert!(
        full > 0 && started > 100,
        "{started} started, {full} refused"
    );
    assert!(held >= bound && held < bound + 4096, "{held} bytes held");
    let peak = tx.allocated();
    // Timer B (64·T1), then timer C's leftovers: everything ends.
    for s in 1..=200 {
        tx.tick(t0 + Duration::from_secs(s), &mut sends, &m);
        sends.clear();
    }
    assert!(tx.is_empty());
    assert_eq!(m.transaction_bytes.load(Ordering::Relaxed), 0);
    assert_eq!(m.active_transactions.load(Ordering::Relaxed), 0);
    assert!(
        tx.allocated() * 8 < peak,
        "slots handed back: {} of {peak}",
        tx.allocated()
    );
}

/// One source storming the table holds at most a sixteenth of its
/// memory: past that its requests are refused while another source's
/// still start, and its share is back to nothing once its transactions
/// end.
#[test]
fn one_source_holds_at_most_a_sixteenth_of_the_tables_memory() {
    let t0 = Instant::now();
    let bound = 8 << 20;
    let tx = Transactions::new(TimerConfig::RFC3261, bound);
    let m = Metrics::default();
    let req = Message::parse(INVITE).unwrap();
    let source = |ip: [u8; 4]| Some(crate::proto::guard::SourceKey::of(ip.into(), 64));
    let start = |branch: u64, from| {
        let key = Key {
            branch,
            cancel: false,
        };
        let to = one(FORWARDED, hop(5070, Transport::Udp), None);
        let up = (hop(5080, Transport::Udp), from);
        tx.start(key, &req, up, to, t0, &mut Sends::default(), &m)
    };
    let (mut started, mut refused) = (0, 0);
    for branch in 0..10_000u64 {
        match start(branch, source([192, 0, 2, 1])) {
            Ok(()) => started += 1,
            Err(NotStarted::OverShare) => refused += 1,
            Err(e) => unreachable!("{e:?}"),
        }
    }
    let held = m.transaction_bytes.load(Ordering::Relaxed);
    assert!(
        started > 10 && refused > 0,
        "{started} started, {refused} refused"
    );
    assert!(
        held >= bound / 16 && held < bound / 16 + 4096,
        "{held} bytes held"
    );
    assert_eq!(
        start(0, source([192, 0, 2, 1])),
        Err(NotStarted::Exists),
        "a copy of one of its transactions is a retransmission, not refused"
    );
    assert_eq!(
        start(20_000, source([192, 0, 2, 2])),
        Ok(()),
        "another source"
    );
    assert_eq!(start(20_001, None), Ok(()), "a carrier");
    for s in 1..=200 {
        tx.tick(t0 + Duration::from_secs(s), &mut Sends::default(), &m);
    }
    assert!(tx.is_empty());
    assert_eq!(
        tx.shares.held(source([192, 0, 2, 1]).unwrap()),
        0,
        "its share back"
    );
    assert_eq!(start(30_000, source([192, 0, 2, 1])), Ok(()));
}

#[test]
fn invite_gets_100_trying_and_retransmissions_are_absorbed() {
    let t0 = Instant::now();
    let (tx, m, mut sends) = started(t0, Transport::Udp);
    assert_eq!(statuses(&sends), ["100->5080"]);
    assert_eq!(m.active_transactions.load(Ordering::Relaxed), 1);
    let req = Message::parse(INVITE).unwrap();
    assert_eq!(
        tx.start(
            KEY,
            &req,
            (hop(5080, Transport::Udp), None),
            one(FORWARDED, hop(5070, Transport::Udp), None),
            t0,
            &mut sends,
            &m
        ),
        Err(NotStarted::Exists)
    );
    sends.clear();
    assert_eq!(
        tx.on_request(KEY, Method::Invite, t0, &mut sends, &m),
        Seen::Absorbed
    );
    assert_eq!(statuses(&sends), ["100->5080"], "last provisional resent");
    // Timer A resends the INVITE downstream after T1.
    sends.clear();
    tx.tick(t0 + Duration::from_millis(510), &mut sends, &m);
    assert_eq!(statuses(&sends), ["INVITE->5070"]);
}

#[test]
fn non_2xx_final_is_acked_downstream_and_its_ack_absorbed() {
    let t0 = Instant::now();
    let (tx, m, mut sends) = started(t0, Transport::Udp);
    sends.clear();
    let busy = response(486, "INVITE");
    let busy = Message::parse(&busy).unwrap();
    let mut out = Vec::new();
    let v = tx.on_response(KEY, &busy, t0, &mut out, &mut sends, &m, strip);
    assert_eq!(v, Upstream::Send(hop(5080, Transport::Udp)));
    let up = Message::parse(&out).unwrap();
    assert_eq!(up.via_count(), 1);
    assert_eq!(statuses(&sends), ["ACK->5070"]);
    // The final retransmitted by the callee: ACK again, nothing upstream.
    sends.clear();
    let v = tx.on_response(KEY, &busy, t0, &mut out, &mut sends, &m, strip);
    assert_eq!(v, Upstream::Absorbed);
    assert_eq!(statuses(&sends), ["ACK->5070"]);
    // Timer G resends the 486 upstream until the caller's ACK.
    sends.clear();
    tx.tick(t0 + Duration::from_millis(510), &mut sends, &m);
    assert_eq!(statuses(&sends), ["486->5080"]);
    assert_eq!(
        tx.on_request(KEY, Method::Ack, t0, &mut sends, &m),
        Seen::Absorbed
    );
    // Timer I (T4) ends it; the client side ended at timer D (32 s).
    tx.tick(t0 + Duration::from_secs(40), &mut sends, &m);
    assert!(tx.is_empty());
    assert_eq!(m.active_transactions.load(Ordering::Relaxed), 0);
}

#[test]
fn no_answer_times_out_with_408_upstream() {
    let t0 = Instant::now();
    let (tx, m, mut sends) = started(t0, Transport::Tcp);
    sends.clear();
    tx.tick(t0 + Duration::from_secs(31), &mut sends, &m);
    assert!(sends.is_empty(), "TCP: no retransmissions, B not yet");
    tx.tick(t0 + Duration::from_secs(33), &mut sends, &m);
    assert_eq!(statuses(&sends), ["408->5080"]);
    let r = Message::parse(sends.iter().next().unwrap().0).unwrap();
    assert!(r.to().tag().unwrap().starts_with(LOCAL_TAG_PREFIX));
    assert_eq!(r.top_via().branch(), Some("z9hG4bKa1"));
    assert_eq!(m.transaction_timeouts.load(Ordering::Relaxed), 1);
}

#[test]
fn cancel_waits_for_a_provisional_then_goes_downstream() {
    let t0 = Instant::now();
    let (tx, m, mut sends) = started(t0, Transport::Udp);
    sends.clear();
    let absent = Key {
        branch: 1,
        cancel: false,
    };
    assert!(!tx.on_cancel(absent, t0, &mut sends, &m));
    assert!(tx.on_cancel(KEY, t0, &mut sends, &m));
    assert!(sends.is_empty(), "no CANCEL before a provisional (§9.1)");
    let ringing = response(180, "INVITE");
    let ringing = Message::parse(&ringing).unwrap();
    let mut out = Vec::new();
    let v = tx.on_response(KEY, &ringing, t0, &mut out, &mut sends, &m, strip);
    assert_eq!(v, Upstream::Send(hop(5080, Transport::Udp)));
    assert_eq!(statuses(&sends), ["CANCEL->5070"]);
    // The 200 for our CANCEL is absorbed; the 487 goes upstream.
    sends.clear();
    let ok = response(200, "CANCEL");
    let ok = Message::parse(&ok).unwrap();
    let k = Key::of_message(&ok).unwrap();
    assert!(k.cancel);
    assert_eq!(
        tx.on_response(k, &ok, t0, &mut out, &mut sends, &m, strip),
        Upstream::Absorbed
    );
    let terminated = response(487, "INVITE");
    let terminated = Message::parse(&terminated).unwrap();
    assert_eq!(
        tx.on_response(KEY, &terminated, t0, &mut out, &mut sends, &m, strip),
        Upstream::Send(hop(5080, Transport::Udp))
    );
    assert_eq!(statuses(&sends), ["ACK->5070"]);
}

#[test]
fn timer_c_cancels_a_ringing_branch_then_gives_up() {
    let t0 = Instant::now();
    let (tx, m, mut sends) = started(t0, Transport::Tcp);
    let ringing = response(180, "INVITE");
    let ringing = Message::parse(&ringing).unwrap();
    let mut out = Vec::new();
    tx.on_response(KEY, &ringing, t0, &mut out, &mut sends, &m, strip);
    sends.clear();
    tx.tick(t0 + TIMER_C + Duration::from_secs(1), &mut sends, &m);
    assert_eq!(statuses(&sends), ["CANCEL->5070"]);
    sends.clear();
    tx.tick(t0 + TIMER_C + Duration::from_secs(40), &mut sends, &m);
    assert_eq!(statuses(&sends), ["408->5080"]);
}

#[test]
fn transport_failure_downstream_is_503_upstream_at_once() {
    let t0 = Instant::now();
    let (tx, m, mut sends) = started(t0, Transport::Tcp);
    sends.clear();
    let fwd = Message::parse(FORWARDED).unwrap();
    tx.on_transport_error(Key::of_message(&fwd).unwrap(), 0, t0, &mut sends, &m);
    assert_eq!(statuses(&sends), ["503->5080"]);
    sends.clear();
    tx.tick(t0 + Duration::from_secs(40), &mut sends, &m);
    assert!(sends.is_empty(), "no 408 after the 503");
    assert!(tx.is_empty());
}

#[test]
fn unknown_responses_are_left_to_the_caller() {
    let tx = Transactions::new(TimerConfig::RFC3261, DEFAULT_MAX_BYTES);
    let m = Metrics::default();
    let ok = response(200, "INVITE");
    let ok = Message::parse(&ok).unwrap();
    let mut out = Vec::new();
    let mut sends = Sends::default();
    assert_eq!(
        tx.on_response(KEY, &ok, Instant::now(), &mut out, &mut sends, &m, strip),
        Upstream::Unknown
    );
}

use crate::proto::names::{key_of, Found};

/// An INVITE to `pool.example`, a name leading to the loopback
/// addresses at `ports` in order, first sent to port 5070, the first;
/// tries others after 2 s of silence.
fn pooled(t0: Instant, ports: &[u16]) -> (Transactions, Metrics, Sends) {
    let names = Arc::new(NameTable::new(&crate::config::DnsSettings::default()));
    let udp = Transport::Udp;
    assert_eq!(
        names.find("pool.example", None, udp, t0, || None),
        Found::Asked
    );
    let addrs = ports.iter().map(|p| hop(*p, udp).0).collect();
    names.finish(&key_of("pool.example", None, udp), addrs, 3600, t0);
    let tx = Transactions::new(TimerConfig::RFC3261, DEFAULT_MAX_BYTES)
        .with_failover_after(Some(Duration::from_secs(2)))
        .with_names(names);
    let m = Metrics::default();
    let mut sends = Sends::default();
    let req = Message::parse(INVITE).unwrap();
    let route = Route {
        name: "pool.example".into(),
        port: None,
        transport: Transport::Udp,
    };
    tx.start(
        KEY,
        &req,
        (hop(5080, Transport::Udp), None),
        one(FORWARDED, hop(5070, Transport::Udp), Some(route)),
        t0,
        &mut sends,
        &m,
    )
    .unwrap();
    sends.clear();
    (tx, m, sends)
}

/// `response` as the answer to try `number`.
fn tried(mut response: Vec<u8>, number: u8) -> Vec<u8> {
    assert!(renumber(&mut response, number));
    response
}

fn branches(sends: &Sends) -> Vec<String> {
    sends
        .iter()
        .map(|(b, _)| {
            let m = Message::parse(b).unwrap();
            m.top_via().branch().unwrap().to_owned()
        })
        .collect()
}

/// RFC 3263 §4.3: a silent address, then one that answers 503, then
/// one that answers; each try is a new transaction (branch), and a
/// late answer from an address given up is not taken for the new one.
#[test]
fn a_failed_address_of_a_name_gives_way_to_the_next_one() {
    let t0 = Instant::now();
    let (tx, m, mut sends) = pooled(t0, &[5070, 5071, 5072]);
    // Timer A resends to the first address; after 2 s of silence the
    // second gets the INVITE with the next try's branch.
    tx.tick(t0 + Duration::from_millis(510), &mut sends, &m);
    assert_eq!(statuses(&sends), ["INVITE->5070"]);
    sends.clear();
    tx.tick(t0 + Duration::from_millis(1600), &mut sends, &m);
    assert_eq!(statuses(&sends), ["INVITE->5070"]);
    sends.clear();
    tx.tick(t0 + Duration::from_secs(2), &mut sends, &m);
    assert_eq!(statuses(&sends), ["INVITE->5071"]);
    assert_eq!(branches(&sends), ["z9hG4bKsps10000000000000ab"]);
    assert_eq!(sends.failed_hops(), [(hop(5070, Transport::Udp), 30)]);
    sends.clear();
    // The first address wakes up: its answers are not the new try's.
    let mut out = Vec::new();
    let late = response(180, "INVITE");
    let late = Message::parse(&late).unwrap();
    let v = tx.on_response(KEY, &late, t0, &mut out, &mut sends, &m, strip);
    assert_eq!(v, Upstream::Absorbed);
    // The second answers 503 (Retry-After: 120): ACKed, skipped for
    // that long, and the third gets a try.
    let busy = tried(response(503, "INVITE"), 1);
    let busy = String::from_utf8(busy)
        .unwrap()
        .replacen("\r\n\r\n", "\r\nRetry-After: 120 (overloaded)\r\n\r\n", 1)
        .into_bytes();
    let busy = Message::parse(&busy).unwrap();
    let t1 = t0 + Duration::from_secs(3);
    let v = tx.on_response(KEY, &busy, t1, &mut out, &mut sends, &m, strip);
    assert_eq!(v, Upstream::Absorbed);
    assert_eq!(statuses(&sends), ["ACK->5071", "INVITE->5072"]);
    assert_eq!(branches(&sends)[1], "z9hG4bKsps20000000000000ab");
    assert_eq!(sends.failed_hops(), [(hop(5071, Transport::Udp), 120)]);
    sends.clear();
    // The third rings: the caller hears it, and no more tries.
    let ringing = tried(response(180, "INVITE"), 2);
    let ringing = Message::parse(&ringing).unwrap();
    let v = tx.on_response(KEY, &ringing, t1, &mut out, &mut sends, &m, strip);
    assert_eq!(v, Upstream::Send(hop(5080, Transport::Udp)));
    tx.tick(t1 + Duration::from_secs(10), &mut sends, &m);
    assert!(!statuses(&sends).iter().any(|s| s.starts_with("INVITE")));
    assert_eq!(m.hop_failovers.load(Ordering::Relaxed), 2);
    // A 2xx from an address given up still reaches the caller.
    let ok = tried(response(200, "INVITE"), 1);
    let ok = Message::parse(&ok).unwrap();
    let v = tx.on_response(KEY, &ok, t1, &mut out, &mut sends, &m, strip);
    assert_eq!(v, Upstream::Unknown);
}

/// With every address failed, the caller gets the usual answer: 503
/// on a refused connection (and a stale try's failure changes
/// nothing).
#[test]
fn when_no_address_is_left_the_caller_gets_the_failure() {
    let t0 = Instant::now();
    let (tx, m, mut sends) = pooled(t0, &[5070, 5071]);
    let fwd = Message::parse(FORWARDED).unwrap();
    let key = Key::of_message(&fwd).unwrap();
    tx.on_transport_error(key, 0, t0, &mut sends, &m);
    assert_eq!(statuses(&sends), ["INVITE->5071"]);
    sends.clear();
    // The first try's connection fails again: already given up.
    tx.on_transport_error(key, 0, t0, &mut sends, &m);
    assert!(sends.is_empty());
    tx.on_transport_error(key, 1, t0, &mut sends, &m);
    assert_eq!(statuses(&sends), ["503->5080"]);
    assert_eq!(m.hop_failovers.load(Ordering::Relaxed), 1);
}

/// A name with more addresses than tries: after `MAX_TRIES` failed
/// tries the caller gets 503, and the addresses left are not tried.
#[test]
fn tries_stop_at_the_cap_however_many_addresses_a_name_has() {
    let t0 = Instant::now();
    let ports: Vec<u16> = (5070..5090).collect();
    let (tx, m, mut sends) = pooled(t0, &ports);
    let fwd = Message::parse(FORWARDED).unwrap();
    let key = Key::of_message(&fwd).unwrap();
    let mut failed = 0;
    for n in 0..MAX_TRIES - 1 {
        tx.on_transport_error(key, n, t0, &mut sends, &m);
        assert_eq!(
            statuses(&sends),
            [format!("INVITE->{}", 5071 + u16::from(n))]
        );
        failed += sends.failed_hops().len();
        sends.clear();
    }
    tx.on_transport_error(key, MAX_TRIES - 1, t0, &mut sends, &m);
    assert_eq!(statuses(&sends), ["503->5080"]);
    failed += sends.failed_hops().len();
    assert_eq!(failed, usize::from(MAX_TRIES));
    assert_eq!(
        m.hop_failovers.load(Ordering::Relaxed),
        u64::from(MAX_TRIES - 1)
    );
}

#[test]
fn an_icmp_error_quoting_a_forwarded_request_names_its_transaction() {
    let sent = tried(FORWARDED.to_vec(), 2);
    let key = Key::of_message(&Message::parse(&sent).unwrap()).unwrap();
    // As much as an ICMP error quotes, or just past the Via.
    let via_end = sent.windows(2).position(|w| w == b"ab").unwrap() + 4;
    for cut in [sent.len(), 200, via_end] {
        assert_eq!(Key::of_quoted(&sent[..cut]), Some((key, 2)), "cut {cut}");
    }
    let cancel = [b"CANCEL".as_slice(), &sent[6..]].concat();
    let cancel_key = Key {
        cancel: true,
        ..key
    };
    assert_eq!(Key::of_quoted(&cancel), Some((cancel_key, 2)));
    // Too little quoted, an ACK, a response, someone else's Via.
    assert_eq!(Key::of_quoted(&sent[..via_end - 3]), None);
    let ack = [b"ACK".as_slice(), &sent[6..]].concat();
    assert_eq!(Key::of_quoted(&ack), None);
    assert_eq!(Key::of_quoted(&response(200, "INVITE")), None);
    assert_eq!(Key::of_quoted(INVITE), None);
    assert_eq!(Key::of_quoted(b""), None);
}
