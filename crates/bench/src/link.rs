//! A worker's connection to the target: a UDP socket, or one TCP
//! connection with stream framing (RFC 3261 §18.3) and a write queue, so a
//! worker never blocks on a full socket buffer.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use sip_core::framing::{frame, Frame};
use sip_core::{ErrorKind, Limits};

/// Which transport a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// UDP, with retransmissions.
    Udp,
    /// TCP, one connection per worker.
    Tcp,
}

impl Transport {
    /// The Via token.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Udp => "UDP",
            Transport::Tcp => "TCP",
        }
    }
}

/// A worker's way to the target.
#[derive(Debug)]
pub enum Link {
    /// A non-blocking UDP socket.
    Udp(UdpSocket),
    /// A non-blocking TCP connection.
    Tcp {
        /// The stream.
        stream: TcpStream,
        /// Bytes read and not yet framed.
        rbuf: Vec<u8>,
        /// Bytes accepted by `send` and not yet written.
        wbuf: Vec<u8>,
        /// The peer closed the connection or it failed.
        closed: bool,
    },
}

impl Link {
    /// Opens the link from `local` (port 0: any) to `target`.
    pub fn open(transport: Transport, local: SocketAddr, target: SocketAddr) -> io::Result<Self> {
        match transport {
            Transport::Udp => {
                let s = UdpSocket::bind(local)?;
                s.set_nonblocking(true)?;
                Ok(Link::Udp(s))
            }
            Transport::Tcp => {
                let s = socket2::Socket::new(
                    socket2::Domain::for_address(target),
                    socket2::Type::STREAM,
                    Some(socket2::Protocol::TCP),
                )?;
                if local.port() != 0 {
                    s.set_reuse_address(true)?;
                    s.bind(&local.into())?;
                }
                s.connect_timeout(&target.into(), Duration::from_secs(5))
                    .map_err(|e| {
                        io::Error::new(e.kind(), format!("TCP connect to {target}: {e}"))
                    })?;
                let stream: TcpStream = s.into();
                stream.set_nodelay(true)?;
                stream.set_nonblocking(true)?;
                Ok(Link::Tcp {
                    stream,
                    rbuf: Vec::with_capacity(64 * 1024),
                    wbuf: Vec::new(),
                    closed: false,
                })
            }
        }
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Link::Udp(s) => s.local_addr(),
            Link::Tcp { stream, .. } => stream.local_addr(),
        }
    }

    /// Whether requests are retransmitted (UDP) or not (TCP).
    pub fn reliable(&self) -> bool {
        matches!(self, Link::Tcp { .. })
    }

    /// Whether the connection is gone (TCP only).
    pub fn closed(&self) -> bool {
        matches!(self, Link::Tcp { closed: true, .. })
    }

    /// Sends one message (queued if the socket is full).
    pub fn send(&mut self, bytes: &[u8], target: SocketAddr) -> io::Result<()> {
        match self {
            Link::Udp(s) => s.send_to(bytes, target).map(|_| ()),
            Link::Tcp { closed: true, .. } => Err(io::Error::other("connection closed")),
            Link::Tcp { wbuf, .. } => {
                wbuf.extend_from_slice(bytes);
                self.flush()
            }
        }
    }

    /// Writes what is queued, as far as the socket takes it.
    pub fn flush(&mut self) -> io::Result<()> {
        let Link::Tcp {
            stream,
            wbuf,
            closed,
            ..
        } = self
        else {
            return Ok(());
        };
        while !wbuf.is_empty() {
            match stream.write(wbuf) {
                Ok(0) => {
                    *closed = true;
                    return Err(io::Error::other("connection closed"));
                }
                Ok(n) => {
                    wbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => {
                    *closed = true;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Hands up to `max` received messages to `on`; returns how many.
    pub fn receive(&mut self, buf: &mut [u8], max: usize, mut on: impl FnMut(&[u8])) -> usize {
        match self {
            Link::Udp(s) => {
                let mut n = 0;
                while n < max {
                    match s.recv_from(buf) {
                        Ok((len, _)) => on(&buf[..len]),
                        Err(_) => break,
                    }
                    n += 1;
                }
                n
            }
            Link::Tcp {
                stream,
                rbuf,
                closed,
                ..
            } => {
                if !*closed {
                    match stream.read(buf) {
                        Ok(0) => *closed = true,
                        Ok(len) => rbuf.extend_from_slice(&buf[..len]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(_) => *closed = true,
                    }
                }
                let mut n = 0;
                let mut at = 0;
                while n < max.max(1) * 4 {
                    match frame(&rbuf[at..], &Limits::DEFAULT) {
                        Ok(Frame::KeepAlive(k)) => at += k,
                        Ok(Frame::Message(k)) => {
                            on(&rbuf[at..at + k]);
                            at += k;
                            n += 1;
                        }
                        Err(e) if e.kind == ErrorKind::Incomplete => break,
                        Err(_) => {
                            // The stream cannot be resynchronised.
                            *closed = true;
                            at = rbuf.len();
                            break;
                        }
                    }
                }
                rbuf.drain(..at);
                n
            }
        }
    }

    /// Waits until there is something to read (or, with a write queue,
    /// room to write) or `timeout` passes.
    pub fn wait(&self, timeout: Duration) {
        let (fd, write): (RawFd, bool) = match self {
            Link::Udp(s) => (s.as_raw_fd(), false),
            Link::Tcp { stream, wbuf, .. } => (stream.as_raw_fd(), !wbuf.is_empty()),
        };
        crate::poll::wait(fd, write, timeout);
    }
}
