//! A worker's flows to the target: one link (the default) or several —
//! UDP sockets or connections, each a phone's flow (RFC 5626 §3) — read
//! when ready, so a worker can load a server with many connections
//! without a read per idle one. One link is read directly every turn, as
//! before; several are watched with edge-triggered `epoll` (mio), and a
//! link whose last read stopped at its limit is read again next turn
//! without waiting for an edge.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::link::{Link, Wire};
pub use sip_udp::Bell;

/// Longest idle wait while a link has bytes the socket did not take.
const WRITE_RETRY: Duration = Duration::from_millis(1);

/// A worker's links, their local addresses and which are ready.
#[derive(Debug)]
pub struct Flows {
    links: Vec<Link>,
    locals: Vec<String>,
    open: Vec<bool>,
    /// Readiness of several links (none for one).
    poll: Option<(Poll, Events)>,
    /// Links to read this turn, and the mark that keeps each listed once.
    hot: Vec<usize>,
    is_hot: Vec<bool>,
    /// Links with bytes queued that the socket did not take.
    unsent: Vec<usize>,
    is_unsent: Vec<bool>,
    /// What links replaced so far moved.
    retired: Wire,
    /// Datagrams ICMP errors quoted, read with the links' messages.
    quoted: Vec<Vec<u8>>,
    /// A bell that ends a wait early, rung by another thread.
    bell: Option<RawFd>,
}

/// Token of the bell among several links' readiness.
const BELL: Token = Token(usize::MAX);

impl Flows {
    /// Watches `links` (at least one).
    pub fn new(links: Vec<Link>) -> io::Result<Self> {
        if links.is_empty() {
            return Err(io::Error::other("a worker needs at least one flow"));
        }
        let poll = if links.len() > 1 {
            let poll = Poll::new()?;
            for (i, link) in links.iter().enumerate() {
                poll.registry().register(
                    &mut SourceFd(&link.raw_fd()),
                    Token(i),
                    Interest::READABLE | Interest::WRITABLE,
                )?;
            }
            Some((poll, Events::with_capacity(1024)))
        } else {
            None
        };
        let n = links.len();
        let locals = links
            .iter()
            .map(|l| l.local_addr().map(|a| a.to_string()).unwrap_or_default())
            .collect();
        Ok(Flows {
            links,
            locals,
            open: vec![true; n],
            poll,
            // Every link is read once at the start: an edge may have come
            // before the registration.
            hot: (0..n).collect(),
            is_hot: vec![true; n],
            unsent: Vec::new(),
            is_unsent: vec![false; n],
            retired: Wire::default(),
            quoted: Vec::new(),
            bell: None,
        })
    }

    /// Lets `bell` end this worker's waits.
    pub fn listen(&mut self, bell: &Bell) -> io::Result<()> {
        let fd = bell.raw_fd();
        if let Some((poll, _)) = &self.poll {
            poll.registry()
                .register(&mut SourceFd(&fd), BELL, Interest::READABLE)?;
        }
        self.bell = Some(fd);
        Ok(())
    }

    /// How many links.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// Never: a worker has at least one link.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// Link `i`.
    pub fn link(&self, i: usize) -> &Link {
        &self.links[i]
    }

    /// Link `i`'s local address, as text.
    pub fn local(&self, i: usize) -> &str {
        &self.locals[i]
    }

    /// Whether link `i` still carries calls.
    pub fn is_open(&self, i: usize) -> bool {
        self.open[i]
    }

    /// The first open link from `i` on (cyclically), if any.
    pub fn pick(&self, i: usize) -> Option<usize> {
        let n = self.links.len();
        (0..n).map(|k| (i + k) % n).find(|&k| self.open[k])
    }

    /// Replaces the only link (a connection per call).
    pub fn replace(&mut self, link: Link) {
        debug_assert!(self.poll.is_none(), "one link only");
        self.locals[0] = link.local_addr().map(|a| a.to_string()).unwrap_or_default();
        self.retired += self.links[0].wire();
        self.links[0] = link;
        self.open[0] = true;
    }

    /// Sends `bytes` on link `i`.
    pub fn send(&mut self, i: usize, bytes: &[u8], target: SocketAddr) -> io::Result<()> {
        let sent = self.links[i].send(bytes, target);
        // One link is read and flushed every turn anyway.
        if self.poll.is_some() {
            if self.links[i].wants_write() && !self.is_unsent[i] {
                self.is_unsent[i] = true;
                self.unsent.push(i);
            }
            // A send that found the connection gone: the next turn's read
            // reports it.
            if self.links[i].closed() && !self.is_hot[i] {
                self.is_hot[i] = true;
                self.hot.push(i);
            }
        }
        sent
    }

    /// Hands up to `max` messages (about: a connection may give four
    /// times its share) from the ready links to `on`, writes what was
    /// queued, and lists in `closed` the links that closed since the last
    /// turn; returns how many messages.
    pub fn receive(
        &mut self,
        buf: &mut [u8],
        max: usize,
        mut on: impl FnMut(&[u8]),
        closed: &mut Vec<usize>,
    ) -> usize {
        if self.poll.is_none() {
            let link = &mut self.links[0];
            let n = link.receive(buf, max, &mut on);
            link.take_unreachable(&mut self.quoted);
            let _ = link.flush();
            if self.open[0] && link.closed() {
                self.open[0] = false;
                closed.push(0);
            }
            return n;
        }
        self.ready(Duration::ZERO);
        let mut n = 0;
        let hot = std::mem::take(&mut self.hot);
        let mut again = Vec::new();
        for (at, &i) in hot.iter().enumerate() {
            if n >= max {
                // The rest wait for the next turn.
                self.hot.extend_from_slice(&hot[at..]);
                break;
            }
            let link = &mut self.links[i];
            n += link.receive(buf, max - n, &mut on);
            link.take_unreachable(&mut self.quoted);
            let _ = link.flush();
            if self.open[i] && link.closed() {
                self.open[i] = false;
                closed.push(i);
            }
            if self.open[i] && link.more() {
                again.push(i);
            } else {
                self.is_hot[i] = false;
            }
        }
        self.hot.extend(again);
        for k in std::mem::take(&mut self.unsent) {
            let link = &mut self.links[k];
            let _ = link.flush();
            if self.open[k] && link.closed() {
                self.open[k] = false;
                closed.push(k);
            }
            if self.open[k] && link.wants_write() {
                self.unsent.push(k);
            } else {
                self.is_unsent[k] = false;
            }
        }
        n
    }

    /// The starts of the datagrams that ICMP errors quoted, read since the
    /// last call (each names the call that could not be delivered).
    pub fn take_unreachable(&mut self, out: &mut Vec<Vec<u8>>) {
        out.append(&mut self.quoted);
    }

    /// Waits until a link has something to read (or room to write what it
    /// queued) or `timeout` passes.
    /// A bell [`listen`](Self::listen)ed to ends it too.
    pub fn wait(&mut self, timeout: Duration) {
        match (self.poll.is_none(), self.bell) {
            (true, None) => return self.links[0].wait(timeout),
            (true, Some(bell)) => {
                let link = &self.links[0];
                sip_udp::wait_or(link.raw_fd(), link.wants_write(), bell, timeout);
            }
            (false, _) if !self.hot.is_empty() => return,
            (false, _) => {
                let timeout = if self.unsent.is_empty() {
                    timeout
                } else {
                    timeout.min(WRITE_RETRY)
                };
                self.ready(timeout);
            }
        }
        if let Some(bell) = self.bell {
            sip_udp::silence(bell);
        }
    }

    /// Marks the links with a readiness edge as hot.
    fn ready(&mut self, timeout: Duration) {
        let Some((poll, events)) = &mut self.poll else {
            return;
        };
        if poll.poll(events, Some(timeout)).is_err() {
            return;
        }
        for e in events.iter() {
            let i = e.token().0;
            if e.is_readable() || e.is_read_closed() || e.is_error() {
                if let Some(mark) = self.is_hot.get_mut(i) {
                    if !*mark && self.open[i] {
                        *mark = true;
                        self.hot.push(i);
                    }
                }
            }
        }
    }

    /// Ends every link politely.
    pub fn close(&mut self) {
        for link in &mut self.links {
            link.close();
        }
    }

    /// The bytes every link, present and replaced, moved.
    pub fn wire(&self) -> Wire {
        let mut w = self.retired;
        for link in &self.links {
            w += link.wire();
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::Transport;
    use std::net::UdpSocket;
    use std::time::Instant;

    fn udp_flows(n: usize) -> Flows {
        let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let links = (0..n)
            .map(|_| Link::open(Transport::Udp, any, any, None).expect("open"))
            .collect();
        Flows::new(links).expect("flows")
    }

    /// Receives until `want` messages came or `patience` passes, waiting
    /// between turns only when a turn brought nothing; returns them and
    /// the count of each turn.
    fn drain(
        flows: &mut Flows,
        max: usize,
        want: usize,
        patience: Duration,
    ) -> (Vec<String>, Vec<usize>) {
        let (mut got, mut turns, mut closed) = (Vec::new(), Vec::new(), Vec::new());
        let mut buf = vec![0u8; crate::link::RECEIVE_BUFFER];
        let deadline = Instant::now() + patience;
        while got.len() < want && Instant::now() < deadline {
            let n = flows.receive(
                &mut buf,
                max,
                |m| got.push(String::from_utf8_lossy(m).into_owned()),
                &mut closed,
            );
            turns.push(n);
            if n == 0 {
                flows.wait(Duration::from_millis(100));
            }
        }
        assert!(closed.is_empty(), "{closed:?}");
        (got, turns)
    }

    /// A bell rung by another thread ends a wait at once, one link or
    /// several; once heard it is silent, so the next wait lasts.
    #[test]
    fn a_rung_bell_ends_a_wait_at_once_and_is_then_silent() {
        for n in [1, 3] {
            let mut flows = udp_flows(n);
            let bell = Bell::new().expect("eventfd");
            flows.listen(&bell).expect("listen");
            // The first turn reads every link (they start hot).
            let (mut buf, mut closed) = (vec![0u8; crate::link::RECEIVE_BUFFER], Vec::new());
            flows.receive(&mut buf, 8, |_| {}, &mut closed);
            let t = Instant::now();
            std::thread::scope(|s| {
                s.spawn(|| bell.ring());
                flows.wait(Duration::from_secs(60));
            });
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{n} links: not woken"
            );
            let t = Instant::now();
            flows.wait(Duration::from_millis(30));
            assert!(
                t.elapsed() >= Duration::from_millis(30),
                "{n} links: still rung"
            );
        }
    }

    #[test]
    fn reads_the_ready_flows_and_comes_back_to_one_left_at_its_limit() {
        let mut flows = udp_flows(3);
        let peer = UdpSocket::bind("127.0.0.1:0").expect("peer");
        for (i, count) in [(0, 5), (2, 100)] {
            let to = flows.link(i).local_addr().expect("addr");
            for k in 0..count {
                peer.send_to(format!("{i}:{k}").as_bytes(), to)
                    .expect("send");
            }
        }
        let (got, turns) = drain(&mut flows, 64, 105, Duration::from_secs(5));
        assert_eq!(got.len(), 105, "{turns:?}");
        assert!(turns.iter().all(|&n| n <= 64), "{turns:?}");
        // Each flow's messages in order.
        for (i, count) in [(0, 5), (2, 100)] {
            let mine: Vec<&String> = got
                .iter()
                .filter(|m| m.starts_with(&format!("{i}:")))
                .collect();
            let want: Vec<String> = (0..count).map(|k| format!("{i}:{k}")).collect();
            assert_eq!(mine, want.iter().collect::<Vec<_>>());
        }
        // Nothing more arrives; an idle flow is not read without an edge.
        let (more, _) = drain(&mut flows, 64, 1, Duration::from_millis(300));
        assert!(more.is_empty());
        // A later datagram to an idle flow wakes the wait.
        let to = flows.link(1).local_addr().expect("addr");
        peer.send_to(b"late", to).expect("send");
        let (late, _) = drain(&mut flows, 64, 1, Duration::from_secs(5));
        assert_eq!(late, ["late"]);
    }
}
