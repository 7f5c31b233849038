//! Batched UDP I/O with `recvmmsg(2)` and `sendmmsg(2)` (Linux): one system
//! call moves up to [`BATCH`] datagrams. This is the crate's only unsafe
//! code; every block states what makes it sound.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

/// Datagrams per system call.
pub const BATCH: usize = 32;
/// Largest datagram (RFC 3261 §18.1.1).
pub const MAX_DATAGRAM: usize = 65_535;

fn to_socket_addr(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: ss_family says the storage holds a sockaddr_in, which
            // is smaller than sockaddr_storage and has no invalid bit patterns.
            let a: &libc::sockaddr_in = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let a: &libc::sockaddr_in6 = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn to_storage(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    let sa = socket2::SockAddr::from(addr);
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    let len = sa.len() as usize;
    // SAFETY: `sa` holds `len` bytes of a socket address, and `len` never
    // exceeds sockaddr_storage's size; the regions do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(sa.as_ptr() as *const u8, &mut ss as *mut _ as *mut u8, len);
    }
    (ss, sa.len())
}

/// Receive buffers for one worker, reused for every batch.
pub struct RecvBatch {
    bufs: Vec<u8>,
    names: Vec<libc::sockaddr_storage>,
    lens: [usize; BATCH],
    count: usize,
}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RecvBatch {
    /// Allocates the batch's buffers once.
    pub fn new() -> Self {
        Self {
            bufs: vec![0; BATCH * MAX_DATAGRAM],
            // SAFETY: all-zero sockaddr_storage values are valid.
            names: vec![unsafe { zeroed() }; BATCH],
            lens: [0; BATCH],
            count: 0,
        }
    }

    /// Blocks until at least one datagram arrives (or the socket's read
    /// timeout passes), then takes as many as are queued, up to [`BATCH`].
    pub fn recv(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        self.recv_flags(sock, libc::MSG_WAITFORONE)
    }

    /// Takes the datagrams already queued, up to [`BATCH`], without
    /// waiting (`Ok(0)`: none).
    pub fn recv_queued(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        match self.recv_flags(sock, libc::MSG_DONTWAIT) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            other => other,
        }
    }

    fn recv_flags(&mut self, sock: &UdpSocket, flags: libc::c_int) -> io::Result<usize> {
        // SAFETY: iovec and mmsghdr are plain data; zero is valid for both.
        let mut iovs: [libc::iovec; BATCH] = unsafe { zeroed() };
        let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
        for i in 0..BATCH {
            iovs[i].iov_base = self.bufs[i * MAX_DATAGRAM..].as_mut_ptr() as *mut libc::c_void;
            iovs[i].iov_len = MAX_DATAGRAM;
            hdrs[i].msg_hdr.msg_name = &mut self.names[i] as *mut _ as *mut libc::c_void;
            hdrs[i].msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            hdrs[i].msg_hdr.msg_iov = &mut iovs[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: every header points at a live buffer of MAX_DATAGRAM bytes
        // inside `self.bufs` and at a sockaddr_storage in `self.names`, all of
        // which outlive the call; the kernel writes at most those sizes.
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            self.count = 0;
            return Err(io::Error::last_os_error());
        }
        self.count = n as usize;
        for (i, h) in hdrs.iter().take(self.count).enumerate() {
            self.lens[i] = h.msg_len as usize;
        }
        Ok(self.count)
    }

    /// Datagram `i` of the last batch and its source.
    pub fn get(&self, i: usize) -> Option<(&[u8], SocketAddr)> {
        if i >= self.count {
            return None;
        }
        let data = &self.bufs[i * MAX_DATAGRAM..i * MAX_DATAGRAM + self.lens[i].min(MAX_DATAGRAM)];
        Some((data, to_socket_addr(&self.names[i])?))
    }
}

/// Outgoing datagrams collected while a batch is handled.
#[derive(Default)]
pub struct SendBatch {
    bufs: Vec<Vec<u8>>,
    dests: Vec<SocketAddr>,
    used: usize,
}

impl SendBatch {
    /// A buffer to write the next datagram into (cleared, capacity kept).
    pub fn next_buf(&mut self) -> &mut Vec<u8> {
        if self.used == self.bufs.len() {
            self.bufs.push(Vec::with_capacity(4096));
            self.dests.push(SocketAddr::from(([0, 0, 0, 0], 0)));
        }
        let b = &mut self.bufs[self.used];
        b.clear();
        b
    }

    /// Queues the buffer last returned by `next_buf` for `dest`.
    pub fn commit(&mut self, dest: SocketAddr) {
        self.dests[self.used] = dest;
        self.used += 1;
    }

    /// Datagrams queued.
    pub fn len(&self) -> usize {
        self.used
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// Sends everything queued (several `sendmmsg` calls if needed) and
    /// empties the batch. Datagrams the kernel refuses are dropped, as a
    /// lost UDP datagram would be.
    pub fn flush(&mut self, sock: &UdpSocket) {
        let mut start = 0;
        while start < self.used {
            let n = (self.used - start).min(BATCH);
            // SAFETY (three lines): iovec, mmsghdr and sockaddr_storage are
            // plain data for which all-zero is valid.
            let mut iovs: [libc::iovec; BATCH] = unsafe { zeroed() };
            let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
            let mut names: [(libc::sockaddr_storage, libc::socklen_t); BATCH] = unsafe { zeroed() };
            for k in 0..n {
                let buf = &self.bufs[start + k];
                names[k] = to_storage(self.dests[start + k]);
                iovs[k].iov_base = buf.as_ptr() as *mut libc::c_void;
                iovs[k].iov_len = buf.len();
                hdrs[k].msg_hdr.msg_name = &mut names[k].0 as *mut _ as *mut libc::c_void;
                hdrs[k].msg_hdr.msg_namelen = names[k].1;
                hdrs[k].msg_hdr.msg_iov = &mut iovs[k];
                hdrs[k].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: the headers point at `n` live buffers and addresses
            // that outlive the call; the kernel only reads them.
            let sent = unsafe {
                libc::sendmmsg(sock.as_raw_fd(), hdrs.as_mut_ptr(), n as libc::c_uint, 0)
            };
            // On error, or a partial send, skip the datagram that failed.
            start += if sent <= 0 { 1 } else { sent as usize };
        }
        self.used = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn batches_round_trip_over_loopback() {
        let a = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let b = UdpSocket::bind("127.0.0.1:0").expect("bind");
        b.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let mut out = SendBatch::default();
        for i in 0..40u8 {
            out.next_buf().extend_from_slice(&[i; 3]);
            out.commit(b.local_addr().expect("addr"));
        }
        assert_eq!(out.len(), 40);
        out.flush(&a);
        assert!(out.is_empty());
        let mut seen = Vec::new();
        let mut batch = RecvBatch::new();
        while seen.len() < 40 {
            let n = batch.recv(&b).expect("datagrams");
            for i in 0..n {
                let (data, from) = batch.get(i).expect("in batch");
                assert_eq!(from, a.local_addr().expect("addr"));
                seen.push(data.to_vec());
            }
        }
        let expected: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 3]).collect();
        assert_eq!(seen, expected);
        assert!(batch.get(BATCH).is_none());
    }

    #[test]
    fn ipv6_addresses_convert() {
        let v6: SocketAddr = "[2001:db8::7]:5060".parse().expect("addr");
        let (ss, _) = to_storage(v6);
        assert_eq!(to_socket_addr(&ss), Some(v6));
        let v4: SocketAddr = "192.0.2.1:5070".parse().expect("addr");
        let (ss, _) = to_storage(v4);
        assert_eq!(to_socket_addr(&ss), Some(v4));
    }
}
