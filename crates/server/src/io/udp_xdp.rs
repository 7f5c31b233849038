//! A UDP worker's way past the kernel's stack (`udp_xdp`): an AF_XDP
//! socket on the worker's receive queue of one interface, beside its UDP
//! socket. Datagrams come in as frames (copied out at once, so the frames
//! go straight back to the kernel) and are decided like any other; an
//! answer to the sender of such a frame leaves the same way, its
//! Ethernet and IP addresses those of the frame it answers, reversed.
//! Everything else — datagrams for other addresses, answers to anyone
//! not seen on this path, IPv6 — keeps to the socket.
//!
//! A peer is reached past the kernel only at the link address its own
//! frame came from: a forged source address draws the answer to the
//! forger's link address, never to the address it names (the kernel's
//! path would send that to the named address). Broadcast and multicast
//! frames are answered through the socket. The table of peers is
//! bounded.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::ops::Range;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use sip_udp::xdp::frame::{self, Endpoints};
use sip_udp::xdp::{Steering, XdpSocket};
use sip_udp::{SendBatch, BATCH};

/// Most peers remembered; past it the table starts again.
const MAX_PEERS: usize = 65_536;

/// One worker's AF_XDP socket and this batch's datagrams.
pub struct XdpPort {
    xsk: XdpSocket,
    bytes: Vec<u8>,
    items: Vec<(Range<usize>, SocketAddr)>,
    peers: HashMap<SocketAddrV4, Endpoints>,
    id: u16,
    /// Frames taken and discarded (see [`frame::parse`]) since the
    /// metrics last counted them.
    discarded: u64,
    /// When the kernel's drop counts were last read, and what they were.
    drops_read: (Instant, u64),
}

/// How often the kernel's drop counts are read (a system call).
const DROPS_EVERY: Duration = Duration::from_secs(1);

fn unicast_mac(m: &[u8; 6]) -> bool {
    m[0] & 1 == 0
}

impl XdpPort {
    /// Opens the socket on receive queue `queue`.
    pub fn open(steering: &Steering, queue: u32) -> io::Result<Self> {
        Ok(Self {
            xsk: XdpSocket::open(steering, queue)?,
            bytes: Vec::with_capacity(BATCH * 1500),
            items: Vec::with_capacity(BATCH),
            peers: HashMap::new(),
            id: 0,
            discarded: 0,
            drops_read: (Instant::now(), 0),
        })
    }

    /// Its descriptor, to wait on beside the socket's.
    pub fn fd(&self) -> RawFd {
        self.xsk.fd()
    }

    /// Whether frames wait.
    pub fn ready(&self) -> bool {
        self.xsk.pending()
    }

    /// Takes up to [`BATCH`] waiting datagrams; returns how many.
    pub fn take(&mut self) -> usize {
        self.bytes.clear();
        self.items.clear();
        let (bytes, items, peers) = (&mut self.bytes, &mut self.items, &mut self.peers);
        let discarded = &mut self.discarded;
        self.xsk.receive(BATCH as u32, |f| {
            // What the kernel's stack would have discarded is discarded
            // here: the frame is this path's alone.
            let Some((ends, payload)) = frame::parse(f) else {
                *discarded += 1;
                return;
            };
            let reachable = unicast_mac(&ends.src_mac)
                && unicast_mac(&ends.dst_mac)
                && !ends.dst.ip().is_broadcast()
                && !ends.dst.ip().is_multicast();
            if reachable {
                if peers.len() >= MAX_PEERS && !peers.contains_key(&ends.src) {
                    peers.clear();
                }
                peers.insert(ends.src, ends.reversed());
            }
            items.push((
                bytes.len()..bytes.len() + payload.len(),
                SocketAddr::V4(ends.src),
            ));
            bytes.extend_from_slice(payload);
        });
        self.items.len()
    }

    /// The frames discarded since the last call.
    pub fn take_discarded(&mut self) -> u64 {
        std::mem::take(&mut self.discarded)
    }

    /// Frames the kernel dropped before this socket took them since the
    /// last count that read any, read at most once every [`DROPS_EVERY`]
    /// (0 in between).
    pub fn take_dropped(&mut self, now: Instant) -> u64 {
        if now.duration_since(self.drops_read.0) < DROPS_EVERY {
            return 0;
        }
        // A kernel that will not say is asked again a second later, not
        // at every batch.
        self.drops_read.0 = now;
        let Ok(drops) = self.xsk.drops() else {
            return 0;
        };
        let new = drops.rx.saturating_sub(self.drops_read.1);
        self.drops_read.1 = drops.rx;
        new
    }

    /// Datagram `i` of the last batch and its sender.
    pub fn get(&self, i: usize) -> Option<(&[u8], SocketAddr)> {
        let (at, src) = self.items.get(i)?;
        Some((&self.bytes[at.clone()], *src))
    }

    /// Queues on the AF_XDP socket each datagram queued in `tx` for a peer
    /// seen on it, taking it out of `tx`; returns how many. [`send`]
    /// sends them.
    ///
    /// [`send`]: Self::send
    pub fn queue_from(&mut self, tx: &mut SendBatch) -> u64 {
        let mut sent = 0;
        let (xsk, peers, id) = (&mut self.xsk, &self.peers, &mut self.id);
        tx.retain(|bytes, dest| {
            let SocketAddr::V4(dest) = dest else {
                return true;
            };
            let Some(ends) = peers.get(&dest) else {
                return true;
            };
            if bytes.len() + frame::HEADERS > sip_udp::xdp::FRAME {
                return true;
            }
            *id = id.wrapping_add(1);
            let queued = xsk.transmit(|buf| {
                if !frame::write_headers(buf, ends, bytes.len(), *id) {
                    return 0;
                }
                buf[frame::HEADERS..frame::HEADERS + bytes.len()].copy_from_slice(bytes);
                frame::HEADERS + bytes.len()
            });
            sent += u64::from(queued);
            !queued
        });
        sent
    }

    /// Sends what [`queue_from`](Self::queue_from) queued.
    pub fn send(&mut self) {
        self.xsk.flush();
    }
}

impl Drop for XdpPort {
    fn drop(&mut self) {
        if let Ok(d) = self.xsk.drops() {
            let _ = std::fs::write(
                format!("/tmp/p/xdpdrops.{}", std::process::id()),
                format!("rx {} tx_invalid {}\n", d.rx, d.tx_invalid),
            );
        }
    }
}
