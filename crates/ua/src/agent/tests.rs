use std::time::Duration;

use super::*;

const T: TimerConfig = TimerConfig::RFC3261;

fn agent(user: &str, addr: &str, seed: u64) -> Agent {
    let local: SocketAddr = addr.parse().expect("address");
    Agent::new(Setup {
        user: user.into(),
        domain: "example.com".into(),
        password: Some("pw".into()),
        local,
        transport: "UDP",
        reliable: false,
        contact: format!("sip:{user}@{local}"),
        timers: T,
        seed: Some(seed),
    })
}

fn me(user: &str) -> Identity {
    Identity {
        from: format!("<sip:{user}@example.com>"),
        shown: None,
    }
}

fn sends(a: &mut Agent) -> Vec<Transmit> {
    std::iter::from_fn(|| a.poll_transmit()).collect()
}

fn events(a: &mut Agent) -> Vec<Event> {
    std::iter::from_fn(|| a.poll_event()).collect()
}

fn first_line(t: &Transmit) -> String {
    String::from_utf8_lossy(&t.bytes)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

/// Delivers everything `from` has to send to `to`, as from `from`.
fn pass(from: &mut Agent, to: &mut Agent, now: Instant) -> Vec<String> {
    let at = from.setup().local;
    sends(from)
        .into_iter()
        .map(|t| {
            to.handle(&t.bytes, at, now);
            first_line(&t)
        })
        .collect()
}

fn codes(ev: &[Event]) -> Vec<(Method<'static>, u16)> {
    ev.iter()
        .filter_map(|e| match e {
            Event::Response { method, code, .. } => Some((*method, *code)),
            _ => None,
        })
        .collect()
}

/// Alice and Bob, and Alice's INVITE to Bob (sent, not delivered).
fn calling(ring: Option<Duration>, now: Instant) -> (Agent, Agent, (Tx, String)) {
    let (mut alice, bob) = (
        agent("alice", "10.0.0.1:5060", 1),
        agent("bob", "10.0.0.2:5060", 2),
    );
    let uri = "sip:bob@10.0.0.2:5060";
    let bob_at = bob.setup().local;
    let call = alice
        .invite(bob_at, &me("alice"), uri, None, ring, now)
        .expect("invite");
    (alice, bob, call)
}

#[test]
fn a_call_rings_is_answered_acknowledged_and_hung_up() {
    let now = Instant::now();
    let (mut alice, mut bob, (_, call)) = calling(None, now);
    let bob_at = bob.setup().local;
    assert_eq!(
        pass(&mut alice, &mut bob, now),
        ["INVITE sip:bob@10.0.0.2:5060 SIP/2.0"]
    );
    let ev = events(&mut bob);
    assert!(matches!(&ev[..], [Event::Incoming { call_id, .. }] if *call_id == call));
    bob.ring(&call, now).expect("ring");
    bob.accept(
        &call,
        Some(("application/sdp".into(), "v=0\r\n".into())),
        now,
    )
    .expect("accept");
    assert_eq!(
        pass(&mut bob, &mut alice, now),
        [
            "SIP/2.0 100 Trying",
            "SIP/2.0 180 Ringing",
            "SIP/2.0 200 OK"
        ]
    );
    assert_eq!(
        codes(&events(&mut alice)),
        [
            (Method::Invite, 100),
            (Method::Invite, 180),
            (Method::Invite, 200)
        ]
    );
    assert_eq!(
        pass(&mut alice, &mut bob, now),
        ["ACK sip:bob@10.0.0.2:5060 SIP/2.0"]
    );
    assert!(matches!(
        &events(&mut bob)[..],
        [Event::Request {
            method: Method::Ack,
            ..
        }]
    ));
    // A 2xx that comes again (its ACK lost) is acknowledged again, and
    // is no news to the user.
    let ok = bob.dialogs[0].side_last().expect("the 200");
    alice.handle(&ok, bob_at, now);
    assert_eq!(
        sends(&mut alice).iter().map(first_line).collect::<Vec<_>>(),
        ["ACK sip:bob@10.0.0.2:5060 SIP/2.0"]
    );
    assert!(events(&mut alice).is_empty());
    // The ACK stopped the 2xx retransmissions: nothing more is due but
    // the transaction's own end.
    bob.on_timer(now + T.t1 * 4);
    assert!(sends(&mut bob).is_empty());

    alice.bye(&call, now).expect("bye");
    assert_eq!(
        pass(&mut alice, &mut bob, now),
        ["BYE sip:bob@10.0.0.2:5060 SIP/2.0"]
    );
    assert!(matches!(
        &events(&mut bob)[..],
        [Event::Request {
            method: Method::Bye,
            answered: Some(200),
            ..
        }]
    ));
    pass(&mut bob, &mut alice, now);
    assert_eq!(codes(&events(&mut alice)), [(Method::Bye, 200)]);
    assert!(alice.bye(&call, now).is_err(), "the call is over");
}

#[test]
fn retransmissions_get_the_last_answer_and_unknown_calls_481() {
    let now = Instant::now();
    let (mut alice, mut bob, (_, _)) = calling(None, now);
    let invite = sends(&mut alice).remove(0);
    bob.handle(&invite.bytes, alice.setup().local, now);
    let (_, call) = match events(&mut bob).remove(0) {
        Event::Incoming { call_id, .. } => ((), call_id),
        e => panic!("{e:?}"),
    };
    bob.ring(&call, now).expect("ring");
    sends(&mut bob);
    bob.handle(&invite.bytes, alice.setup().local, now);
    let again = sends(&mut bob);
    assert_eq!(again.len(), 1);
    assert_eq!(first_line(&again[0]), "SIP/2.0 180 Ringing");
    assert!(
        events(&mut bob).is_empty(),
        "a retransmission is no new call"
    );

    let stray = "BYE sip:bob@10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.9.9.9;branch=z9hG4bKx\r\nFrom: <sip:m@x>;tag=1\r\nTo: <sip:bob@x>;tag=2\r\nCall-ID: nope\r\nCSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n";
    let m_at: SocketAddr = "10.9.9.9:5060".parse().expect("addr");
    bob.handle(stray.as_bytes(), m_at, now);
    bob.handle(stray.as_bytes(), m_at, now);
    let out = sends(&mut bob);
    assert_eq!(out.len(), 2, "the retransmission is answered again");
    assert!(out
        .iter()
        .all(|t| t.to == m_at && first_line(t).starts_with("SIP/2.0 481")));
    assert_eq!(events(&mut bob).len(), 1, "reported once");
    assert!(
        !bob.handle(b"\x00\x01garbage", m_at, now),
        "not SIP: dropped"
    );
}

#[test]
fn cancel_waits_for_a_provisional_and_the_invite_ends_487() {
    let now = Instant::now();
    let (mut alice, mut bob, (_, call)) = calling(None, now);
    alice.cancel(&call, now).expect("cancel");
    assert_eq!(
        pass(&mut alice, &mut bob, now).len(),
        1,
        "no CANCEL before a 1xx (RFC 3261 §9.1)"
    );
    events(&mut bob);
    assert_eq!(pass(&mut bob, &mut alice, now), ["SIP/2.0 100 Trying"]);
    assert_eq!(
        pass(&mut alice, &mut bob, now),
        ["CANCEL sip:bob@10.0.0.2:5060 SIP/2.0"]
    );
    assert!(matches!(
        &events(&mut bob)[..],
        [Event::Request {
            method: Method::Cancel,
            answered: Some(200),
            ..
        }]
    ));
    assert_eq!(
        pass(&mut bob, &mut alice, now),
        ["SIP/2.0 200 OK", "SIP/2.0 487 Request Terminated"]
    );
    assert_eq!(
        codes(&events(&mut alice)),
        [
            (Method::Invite, 100),
            (Method::Cancel, 200),
            (Method::Invite, 487)
        ]
    );
    assert_eq!(
        pass(&mut alice, &mut bob, now),
        ["ACK sip:bob@10.0.0.2:5060 SIP/2.0"]
    );
    assert!(
        bob.accept(&call, None, now).is_err(),
        "cancelled calls are over"
    );
}

#[test]
fn an_invite_that_rings_too_long_is_cancelled() {
    let now = Instant::now();
    let ring = Duration::from_secs(5);
    let (mut alice, mut bob, (tx, call)) = calling(Some(ring), now);
    pass(&mut alice, &mut bob, now);
    bob.ring(&call, now).expect("ring");
    pass(&mut bob, &mut alice, now);
    events(&mut alice);
    let due = alice.next_deadline().expect("the ring time");
    assert_eq!(due, now + ring);
    alice.on_timer(due);
    assert_eq!(events(&mut alice), [Event::Cancelling { tx }]);
    let out = sends(&mut alice);
    assert_eq!(
        out.iter().map(first_line).collect::<Vec<_>>(),
        ["CANCEL sip:bob@10.0.0.2:5060 SIP/2.0"]
    );
    // Nobody answers the CANCEL: the INVITE is over 64·T1 later.
    alice.on_timer(due + T.timeout());
    assert!(events(&mut alice).contains(&Event::Timeout {
        tx,
        method: Method::Invite
    }));
}

fn challenge(req: &[u8], code: u16) -> Vec<u8> {
    let m = Message::parse(req).expect("request");
    let (field, reason) = if code == 407 {
        ("Proxy-Authenticate", "Proxy Authentication Required")
    } else {
        ("WWW-Authenticate", "Unauthorized")
    };
    let value = "Digest realm=\"example.com\", nonce=\"abc\", qop=\"auth\", algorithm=MD5";
    crate::sip::response_with(&m, (code, reason), Some("t"), None, None, &[(field, value)])
}

#[test]
fn a_challenge_is_answered_once_and_a_second_stands() {
    let now = Instant::now();
    let mut bob = agent("bob", "10.0.0.2:5060", 2);
    let registrar: SocketAddr = "10.0.0.9:5060".parse().expect("addr");
    let tx = bob
        .register(registrar, &me("bob"), 600, vec![], now)
        .expect("register");
    let first = sends(&mut bob).remove(0);
    bob.handle(&challenge(&first.bytes, 401), registrar, now);
    let retry = sends(&mut bob).remove(0);
    let text = String::from_utf8_lossy(&retry.bytes).into_owned();
    assert!(
        text.contains("Authorization: Digest username=\"bob\""),
        "{text}"
    );
    assert!(text.contains("CSeq: 3 REGISTER"), "a new CSeq: {text}");
    assert!(matches!(
        &events(&mut bob)[..],
        [Event::Response { code: 401, retried: true, tx: t, .. }] if *t == tx
    ));
    bob.handle(&challenge(&retry.bytes, 401), registrar, now);
    assert!(sends(&mut bob).is_empty(), "no second try");
    assert!(matches!(
        &events(&mut bob)[..],
        [Event::Response {
            code: 401,
            retried: false,
            ..
        }]
    ));
}

#[test]
fn calls_from_strangers_are_refused_without_taking_room() {
    let now = Instant::now();
    let mut bob = agent("bob", "10.0.0.2:5060", 2);
    let server: SocketAddr = "10.0.0.1:5060".parse().expect("addr");
    bob.ring_only_from(Some(vec![server.ip()]));
    let invite = |i: usize| {
        format!(
            "INVITE sip:bob@10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.6.6.6;branch=z9hG4bKs{i}\r\nFrom: <sip:m@x>;tag={i}\r\nTo: <sip:bob@x>\r\nCall-ID: stranger{i}\r\nCSeq: 1 INVITE\r\nContact: <sip:m@10.6.6.6>\r\nContent-Length: 0\r\n\r\n"
        )
    };
    // Twice the table's room from a scanner: each refused, none kept.
    let scanner: SocketAddr = "10.6.6.6:5060".parse().expect("addr");
    for i in 0..MAX_CALLS * 2 {
        bob.handle(invite(i).as_bytes(), scanner, now);
    }
    let sent = sends(&mut bob);
    assert_eq!(sent.len(), MAX_CALLS * 2);
    assert!(sent
        .iter()
        .all(|t| first_line(t) == "SIP/2.0 403 Forbidden" && t.to == scanner));
    assert!(bob.dialogs.is_empty());
    let ev = events(&mut bob);
    assert_eq!(ev.len(), MAX_CALLS * 2);
    assert!(matches!(&ev[0], Event::Stranger { from, .. } if *from == scanner));
    // The server's call (another port of its host too, or its address
    // as a dual-stack socket reports it) still rings.
    for (i, at) in ["10.0.0.1:40000", "[::ffff:10.0.0.1]:5060"]
        .iter()
        .enumerate()
    {
        bob.handle(invite(1000 + i).as_bytes(), at.parse().expect("a"), now);
        let call = format!("stranger{}", 1000 + i);
        assert!(
            matches!(&events(&mut bob)[..], [Event::Incoming { call_id, .. }] if *call_id == call)
        );
        assert_eq!(first_line(&sends(&mut bob)[0]), "SIP/2.0 100 Trying");
    }
}

#[test]
fn a_flood_of_calls_and_requests_holds_bounded_state() {
    let now = Instant::now();
    let mut bob = agent("bob", "10.0.0.2:5060", 2);
    let from: SocketAddr = "10.6.6.6:5060".parse().expect("addr");
    let request = |method: &str, i: usize| {
        format!(
            "{method} sip:bob@10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.6.6.6;branch=z9hG4bK{i}\r\nFrom: <sip:m@x>;tag={i}\r\nTo: <sip:bob@x>\r\nCall-ID: flood{i}\r\nCSeq: 1 {method}\r\nContact: <sip:m@10.6.6.6>\r\nContent-Length: 0\r\n\r\n"
        )
    };
    for i in 0..MAX_CALLS + 5 {
        bob.handle(request("INVITE", i).as_bytes(), from, now);
    }
    let busy = sends(&mut bob)
        .iter()
        .filter(|t| first_line(t).starts_with("SIP/2.0 486"))
        .count();
    assert_eq!(busy, 5);
    assert_eq!(bob.dialogs.len(), MAX_CALLS);
    for i in 0..server::MAX_ANSWERS * 2 {
        bob.handle(request("OPTIONS", 1000 + i).as_bytes(), from, now);
    }
    assert_eq!(bob.answers.len(), server::MAX_ANSWERS);
    // Timer J ends what is kept.
    bob.on_timer(now + T.timeout());
    assert_eq!(bob.answers.len(), 0);
}

#[test]
fn an_invite_challenged_by_a_proxy_is_acknowledged_once_answered() {
    let now = Instant::now();
    let (mut alice, mut bob, (_, call)) = calling(None, now);
    let (alice_at, bob_at) = (alice.setup().local, bob.setup().local);
    let first = sends(&mut alice).remove(0);
    alice.handle(&challenge(&first.bytes, 407), bob_at, now);
    let out = sends(&mut alice);
    assert_eq!(
        out.iter().map(first_line).collect::<Vec<_>>(),
        [
            "ACK sip:bob@10.0.0.2:5060 SIP/2.0",
            "INVITE sip:bob@10.0.0.2:5060 SIP/2.0"
        ],
        "the 407 acknowledged, the INVITE again with credentials"
    );
    // Bob takes the INVITE with credentials as the call.
    let again = out[1].bytes.clone();
    assert!(String::from_utf8_lossy(&again).contains("Proxy-Authorization: Digest"));
    bob.handle(&again, alice_at, now);
    events(&mut bob);
    bob.accept(&call, None, now).expect("accept");
    pass(&mut bob, &mut alice, now);
    assert_eq!(
        pass(&mut alice, &mut bob, now),
        ["ACK sip:bob@10.0.0.2:5060 SIP/2.0"],
        "the 2xx after a challenge is acknowledged"
    );
    assert!(alice.bye(&call, now).is_ok(), "and the call stands");
}
