//! The NG client's socket: one UDP socket to every media relay, driving
//! `proto::ng::Client` with the real clock. [`Relays::call`] runs one
//! command to its answer (blocking: for tools, checks and tests; the
//! proxy parks its requests on the client instead).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use crate::proto::ng::{Client, Command, Event, Failure, Reply, Settings, MAX_ANSWER};

/// A socket and the client it drives.
#[derive(Debug)]
pub struct Relays {
    sock: UdpSocket,
    client: Client,
    /// Relay state changes seen, for the caller to report.
    changes: Vec<Event>,
}

impl Relays {
    /// Opens a socket on `bind` (port 0: any) for the relays of `settings`.
    pub fn open(settings: Settings, bind: SocketAddr) -> io::Result<Self> {
        let sock = UdpSocket::bind(bind)?;
        let mut salt = [0u8; 8];
        getrandom::fill(&mut salt).map_err(|e| io::Error::other(e.to_string()))?;
        let client = Client::new(settings, Instant::now(), u64::from_le_bytes(salt));
        Ok(Self {
            sock,
            client,
            changes: Vec::new(),
        })
    }

    /// The client (relay states, counts).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Relays that went down or came back since the last call.
    pub fn take_changes(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.changes)
    }

    /// Runs `command` until it is answered or has failed (retransmitted,
    /// moved to another relay, given up as the client decides).
    pub fn call(&mut self, command: &Command) -> Result<Reply, Failure> {
        let (cookie, send) = self.client.start(command, Instant::now())?;
        let mut events = vec![send];
        let mut buf = vec![0u8; MAX_ANSWER + 1];
        loop {
            for e in events.drain(..) {
                match e {
                    Event::Send { to, bytes } => {
                        // A relay that cannot be reached fails by its timer.
                        let _ = self.sock.send_to(&bytes, to);
                    }
                    Event::Answered { cookie: c, reply } if c == cookie => return Ok(reply),
                    Event::Failed { cookie: c, why } if c == cookie => return Err(why),
                    e @ (Event::RelayDown(_) | Event::RelayUp(_)) => self.changes.push(e),
                    _ => {}
                }
            }
            let now = Instant::now();
            let wait = self
                .client
                .next_deadline()
                .map_or(Duration::from_secs(1), |d| d.saturating_duration_since(now));
            let _ = self
                .sock
                .set_read_timeout(Some(wait.max(Duration::from_millis(1))));
            // Timeouts, and ICMP errors for a relay nobody listens on, are
            // left to the timer.
            if let Ok((n, from)) = self.sock.recv_from(&mut buf) {
                self.client.on_datagram(from, &buf[..n], &mut events);
            }
            let now = Instant::now();
            if self.client.next_deadline().is_some_and(|d| d <= now) {
                self.client.on_timer(now, &mut events);
            }
        }
    }
}
