#![cfg(test)]
//! The NG client on virtual time: commands as rtpengine reads them,
//! answers matched by cookie and relay, retransmission, failover, pings.

use super::*;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn settings(relays: &[(u16, u32)]) -> Settings {
    Settings {
        relays: relays
            .iter()
            .map(|(p, w)| RelayConfig {
                addr: addr(*p),
                weight: *w,
            })
            .collect(),
        timeout: Duration::from_millis(500),
        tries: 2,
        ping_every: Duration::from_secs(5),
        down_after: 2,
    }
}

fn offer(call_id: &str) -> Command {
    Command::Offer(Media {
        call_id: call_id.into(),
        from_tag: "ft".into(),
        sdp: "v=0\r\n".into(),
        flags: &["trust-address"],
        replace: &["origin"],
        options: &[("ICE", "remove")],
        ..Media::default()
    })
}

fn sent(e: &Event) -> (SocketAddr, Vec<u8>) {
    match e {
        Event::Send { to, bytes } => (*to, bytes.clone()),
        other => panic!("not a send: {other:?}"),
    }
}

#[test]
fn commands_are_written_as_rtpengine_reads_them() {
    assert_eq!(Command::Ping.encode("c1"), b"c1 d7:command4:pinge");
    let bytes = offer("call1").encode("k");
    assert_eq!(
        String::from_utf8(bytes).unwrap(),
        "k d7:command5:offer7:call-id5:call18:from-tag2:ft3:sdp5:v=0\r\n\
         5:flagsl13:trust-addresse7:replacel6:origine3:ICE6:removee"
    );
    let delete = Command::Delete {
        call_id: "c".into(),
        from_tag: "f".into(),
        to_tag: Some("t".into()),
    };
    assert_eq!(
        delete.encode("x"),
        b"x d7:command6:delete7:call-id1:c8:from-tag1:f6:to-tag1:te"
    );
}

#[test]
fn answers_are_read_and_anything_else_refused() {
    assert_eq!(decode(b"a d6:result4:ponge"), Ok(("a", Reply::Pong)));
    assert_eq!(
        decode(b"b d3:sdp3:v=06:result2:oke"),
        Ok((
            "b",
            Reply::Ok {
                sdp: Some("v=0".into())
            }
        ))
    );
    assert_eq!(
        decode(b"c d6:result5:error12:error-reason12:Unknown calle"),
        Ok(("c", Reply::Error("Unknown call".into())))
    );
    assert_eq!(decode(b"nocookie"), Err(Malformed::NoCookie));
    assert_eq!(decode(b" d6:result4:ponge"), Err(Malformed::NoCookie));
    assert!(matches!(decode(b"a d6:result"), Err(Malformed::Bencode(_))));
    assert_eq!(decode(b"a d6:result3:whoe"), Err(Malformed::NotAnAnswer));
    assert_eq!(decode(b"a l6:resulte"), Err(Malformed::NotAnAnswer));
}

#[test]
fn a_call_stays_on_one_relay_and_weights_share_the_calls() {
    let t0 = Instant::now();
    let c = Client::new(settings(&[(1, 3), (2, 1)]), t0, 7);
    let mut first = 0;
    for i in 0..4000 {
        let id = format!("call-{i}");
        let r = c.pick(&id, &[]).unwrap();
        assert_eq!(c.pick(&id, &[]), Some(r), "sticky");
        first += usize::from(r == 0);
    }
    assert!(
        (2800..3200).contains(&first),
        "weight 3:1 → {first} of 4000"
    );
}

#[test]
fn an_answer_counts_only_from_the_relay_asked_with_its_cookie() {
    let t0 = Instant::now();
    let mut c = Client::new(settings(&[(1, 1)]), t0, 7);
    let (cookie, send) = c.start(&offer("x"), t0).unwrap();
    assert_eq!(sent(&send).0, addr(1));
    let mut out = Vec::new();
    let answer = format!("{cookie} d6:result2:ok3:sdp3:v=0e");
    c.on_datagram(addr(9), answer.as_bytes(), &mut out);
    c.on_datagram(addr(1), b"other d6:result2:oke", &mut out);
    c.on_datagram(addr(1), b"garbage", &mut out);
    assert!(out.is_empty());
    assert_eq!(c.counts().refused, 3);
    c.on_datagram(addr(1), answer.as_bytes(), &mut out);
    assert_eq!(
        out,
        [Event::Answered {
            cookie: cookie.clone(),
            reply: Reply::Ok {
                sdp: Some("v=0".into())
            }
        }]
    );
    // A late copy of the answer finds nothing.
    out.clear();
    c.on_datagram(addr(1), answer.as_bytes(), &mut out);
    assert!(out.is_empty() && c.pending() == 0);
}

#[test]
fn an_unanswered_offer_is_resent_then_moves_to_the_next_relay() {
    let t0 = Instant::now();
    let mut c = Client::new(
        settings(&[(1, 1000), (2, 1)]),
        t0 + Duration::from_secs(60),
        7,
    );
    let (cookie, send) = c.start(&offer("x"), t0).unwrap();
    let (first, bytes) = sent(&send);
    let mut out = Vec::new();
    c.on_timer(t0 + Duration::from_millis(500), &mut out);
    assert_eq!(
        out,
        [Event::Send {
            to: first,
            bytes: bytes.clone()
        }]
    );
    assert_eq!(c.counts().retransmitted, 1);
    out.clear();
    c.on_timer(t0 + Duration::from_millis(1000), &mut out);
    let other = if first == addr(1) { addr(2) } else { addr(1) };
    assert_eq!(
        out,
        [Event::RelayDown(first), Event::Send { to: other, bytes }]
    );
    out.clear();
    let answer = format!("{cookie} d6:result2:oke");
    c.on_datagram(other, answer.as_bytes(), &mut out);
    assert!(matches!(&out[..], [Event::Answered { .. }]));
    // The next call avoids the relay that is down.
    let (_, send) = c.start(&offer("y"), t0 + Duration::from_secs(2)).unwrap();
    assert_eq!(sent(&send).0, other);
}

#[test]
fn a_delete_nobody_answers_fails_without_moving() {
    let t0 = Instant::now();
    let mut c = Client::new(settings(&[(1, 1), (2, 1)]), t0 + Duration::from_secs(60), 7);
    let delete = Command::Delete {
        call_id: "x".into(),
        from_tag: "f".into(),
        to_tag: None,
    };
    let (cookie, _) = c.start(&delete, t0).unwrap();
    let mut out = Vec::new();
    c.on_timer(t0 + Duration::from_millis(500), &mut out);
    out.clear();
    c.on_timer(t0 + Duration::from_millis(1000), &mut out);
    assert!(matches!(out[0], Event::RelayDown(_)));
    assert_eq!(
        out[1],
        Event::Failed {
            cookie,
            why: Failure::Timeout
        }
    );
    assert_eq!(c.pending(), 0);
}

#[test]
fn pings_mark_a_silent_relay_down_and_a_pong_brings_it_back() {
    let t0 = Instant::now();
    let mut c = Client::new(settings(&[(1, 1)]), t0, 7);
    let mut now = t0;
    let mut out = Vec::new();
    let mut downs = 0;
    for _ in 0..2 {
        // A ping, its retransmission, then nothing.
        c.on_timer(now, &mut out);
        now += Duration::from_millis(500);
        c.on_timer(now, &mut out);
        now += Duration::from_millis(500);
        c.on_timer(now, &mut out);
        downs += out
            .iter()
            .filter(|e| matches!(e, Event::RelayDown(_)))
            .count();
        out.clear();
        now = c.next_deadline().unwrap().max(now);
    }
    assert_eq!(downs, 1);
    assert_eq!(c.relays().collect::<Vec<_>>(), [(addr(1), false)]);
    // Down, it is still tried when it is the only one; the next ping's
    // pong brings it back.
    c.on_timer(now, &mut out);
    let (_, bytes) = sent(&out[0]);
    let cookie = std::str::from_utf8(&bytes)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    let pong = format!("{cookie} d6:result4:ponge");
    out.clear();
    c.on_datagram(addr(1), pong.as_bytes(), &mut out);
    assert_eq!(out, [Event::RelayUp(addr(1))]);
    assert_eq!(c.counts().answered, 0, "pings are not commands");
}

#[test]
fn the_pending_table_is_bounded() {
    let t0 = Instant::now();
    let mut c = Client::new(settings(&[(1, 1)]), t0 + Duration::from_secs(60), 7);
    for i in 0..MAX_PENDING {
        c.start(&offer(&format!("c{i}")), t0).unwrap();
    }
    assert_eq!(c.start(&offer("one more"), t0), Err(Failure::Busy));
    let mut empty = Client::new(settings(&[]), t0, 7);
    assert_eq!(empty.start(&Command::Ping, t0), Err(Failure::NoRelay));
}
