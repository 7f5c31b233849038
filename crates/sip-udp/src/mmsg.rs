//! Batched UDP I/O with `recvmmsg(2)` and `sendmmsg(2)` (Linux): one system
//! call moves up to [`BATCH`] datagrams; and the other socket calls the
//! standard library lacks (ICMP error queues, reuseport steering, the
//! descriptor limit).

use std::io;
use std::mem::{size_of, zeroed, MaybeUninit};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

/// Datagrams per system call.
pub const BATCH: usize = 32;
/// Largest datagram (RFC 3261 §18.1.1).
pub const MAX_DATAGRAM: usize = 65_535;

/// Where one receive buffer of a batch starts after the last: room for
/// the largest datagram, 64 KiB, and nine cache lines. Buffers exactly
/// 64 KiB apart start in the same set of every cache indexed by the low
/// 16 bits of the address (a 32 KiB 8-way L1, a 512 KiB or 1 MiB 8-way
/// L2): a batch of short datagrams, each in the first lines of its
/// buffer, then evicts itself while the kernel writes it, and is read
/// back from the next level. Nine lines further on, the first 576 bytes
/// (a SIP request's head) of each of 64 buffers lie in distinct sets of
/// such an L2, and those of a batch spread evenly over the L1's.
pub const RECV_STRIDE: usize = (1 << 16) + 9 * 64;

/// Room for any socket address the kernel reports.
const NAME_LEN: libc::socklen_t = size_of::<libc::sockaddr_storage>() as libc::socklen_t;

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

/// A socket address as the kernel reads it from a send: IPv4 or IPv6, and
/// no larger (a `sockaddr_storage` would be 128 bytes to fill per datagram).
#[repr(C)]
#[derive(Clone, Copy)]
union RawAddr {
    v4: libc::sockaddr_in,
    v6: libc::sockaddr_in6,
}

fn to_raw(addr: SocketAddr) -> (RawAddr, libc::socklen_t) {
    match addr {
        SocketAddr::V4(a) => (
            RawAddr {
                v4: libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from(*a.ip()).to_be(),
                    },
                    sin_zero: [0; 8],
                },
            },
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ),
        // The flow label as the standard library keeps it (see
        // `to_socket_addr`).
        SocketAddr::V6(a) => (
            RawAddr {
                v6: libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                },
            },
            size_of::<libc::sockaddr_in6>() as libc::socklen_t,
        ),
    }
}

/// Receive buffers for one worker, reused for every batch, with the
/// kernel's headers for them built once: a batch at moderate load is one
/// datagram, and building 32 headers for it cost more than its parse's
/// largest part.
pub struct RecvBatch {
    bufs: Vec<u8>,
    names: Vec<libc::sockaddr_storage>,
    /// One buffer each, pointing into `bufs`; read only by the kernel,
    /// through `hdrs`.
    #[expect(dead_code, reason = "held for the headers that point into it")]
    iovs: Vec<libc::iovec>,
    /// One each, pointing at an `iovs` entry and a `names` entry.
    hdrs: Vec<libc::mmsghdr>,
    /// Headers from the first whose address length the kernel may have
    /// lowered, up to this one: set back before the next call.
    written: usize,
    lens: [usize; BATCH],
    count: usize,
}

// SAFETY: the raw pointers in `iovs` and `hdrs` point only into the heap
// blocks of this batch's own vectors, which move with it and are never
// reallocated; nothing else holds them.
unsafe impl Send for RecvBatch {}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RecvBatch {
    /// Allocates the batch's buffers once.
    pub fn new() -> Self {
        let mut bufs = vec![0u8; (BATCH - 1) * RECV_STRIDE + MAX_DATAGRAM];
        // SAFETY: all-zero sockaddr_storage, iovec and mmsghdr values are
        // valid (plain data, null pointers).
        let mut names: Vec<libc::sockaddr_storage> = vec![unsafe { zeroed() }; BATCH];
        let mut iovs: Vec<libc::iovec> = (0..BATCH)
            .map(|i| libc::iovec {
                // In bounds: the last buffer ends where `bufs` does.
                iov_base: bufs.as_mut_ptr().wrapping_add(i * RECV_STRIDE) as *mut libc::c_void,
                iov_len: MAX_DATAGRAM,
            })
            .collect();
        let hdrs = (0..BATCH)
            .map(|i| {
                // SAFETY: as above.
                let mut h: libc::mmsghdr = unsafe { zeroed() };
                h.msg_hdr.msg_name = names.as_mut_ptr().wrapping_add(i) as *mut libc::c_void;
                h.msg_hdr.msg_namelen = NAME_LEN;
                h.msg_hdr.msg_iov = iovs.as_mut_ptr().wrapping_add(i);
                h.msg_hdr.msg_iovlen = 1;
                h
            })
            .collect();
        Self {
            bufs,
            names,
            iovs,
            hdrs,
            written: 0,
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
        // The kernel writes back each used header's address length (and
        // its flags and length, which are only read): room for any
        // address again.
        for h in &mut self.hdrs[..self.written] {
            h.msg_hdr.msg_namelen = NAME_LEN;
        }
        // SAFETY: every header points at its own iovec, which points at a
        // buffer of MAX_DATAGRAM bytes inside `self.bufs`, and at a
        // sockaddr_storage in `self.names` (NAME_LEN bytes); all are heap
        // blocks of `self`, alive and unmoved for the call; the kernel
        // writes at most those sizes.
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            self.count = 0;
            self.written = BATCH;
            return Err(io::Error::last_os_error());
        }
        self.count = n as usize;
        self.written = self.count;
        for (i, h) in self.hdrs.iter().take(self.count).enumerate() {
            self.lens[i] = h.msg_len as usize;
        }
        Ok(self.count)
    }

    /// Datagram `i` of the last batch and its source.
    pub fn get(&self, i: usize) -> Option<(&[u8], SocketAddr)> {
        if i >= self.count {
            return None;
        }
        let at = i * RECV_STRIDE;
        let data = &self.bufs[at..at + self.lens[i].min(MAX_DATAGRAM)];
        Some((data, to_socket_addr(&self.names[i])?))
    }
}

/// Times a datagram is handed to the kernel before it is given up. With
/// [`report_errors`] on, an ICMP error for an earlier datagram fails the
/// socket's next system call, a send as well as a receive: the datagram
/// that send carried did not leave and goes again. More than one failure
/// in a row means several errors came at once, or one of the datagram's
/// own (too large, no route); either way the tries are few.
const SEND_TRIES: u32 = 4;

/// Asks the kernel to queue the ICMP errors that datagrams sent from
/// `sock` draw (IP_RECVERR, IPV6_RECVERR), for [`unreachable`] to read.
/// Without it, an unconnected UDP socket never learns that nobody listens
/// where it sent. The price: a pending error fails the socket's next
/// send or receive once, whichever comes first. [`SendBatch::flush`] and
/// [`send_to`] send such a datagram again, and whoever saw the failure
/// reads the queue, which the kernel charges to the receive buffer.
pub fn report_errors(sock: &UdpSocket, v6: bool) -> io::Result<()> {
    let (level, name) = if v6 {
        (libc::SOL_IPV6, libc::IPV6_RECVERR)
    } else {
        (libc::SOL_IP, libc::IP_RECVERR)
    };
    crate::sys::set_int_option(sock.as_raw_fd(), level, name, 1)
}

/// Spreads the datagrams of `sock`'s SO_REUSEPORT group over its `n`
/// sockets at random, one datagram at a time, instead of by a hash of the
/// sender's address: one busy peer (a trunk, an SBC, a load generator)
/// then keeps every worker busy instead of one. A classic BPF program
/// attached to the group (SO_ATTACH_REUSEPORT_CBPF, Linux 4.5) returns
/// the socket's index: `A = random; A %= n; return A`.
pub fn steer_at_random(sock: &UdpSocket, n: u32) -> io::Result<()> {
    // Opcodes of linux/bpf_common.h: BPF_LD|BPF_W|BPF_ABS (0x00|0x00|0x20),
    // BPF_ALU|BPF_MOD|BPF_K (0x04|0x90|0x00), BPF_RET|BPF_A (0x06|0x10).
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_ALU_MOD_K: u16 = 0x94;
    const BPF_RET_A: u16 = 0x16;
    /// SKF_AD_OFF + SKF_AD_RANDOM: the ancillary load of a random u32.
    const RANDOM: u32 = (-0x1000i32) as u32 + 56;
    let op = |code, k| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let mut program = [
        op(BPF_LD_W_ABS, RANDOM),
        op(BPF_ALU_MOD_K, n.max(1)),
        op(BPF_RET_A, 0),
    ];
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: the option value is a live sock_fprog of the size passed,
    // pointing at `program`, which outlives the call (the kernel copies it).
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            &fprog as *const libc::sock_fprog as *const libc::c_void,
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads up to `max` errors queued on `sock` without waiting. For each
/// ICMP "unreachable" (port, host or network), `on` gets where the
/// datagram went and the start of it that the ICMP message quoted.
/// Returns how many errors were read.
pub fn unreachable(sock: &UdpSocket, max: usize, mut on: impl FnMut(SocketAddr, &[u8])) -> usize {
    let mut data = [0u8; 1500];
    // u64s: aligned for the control messages.
    let mut control = [0u64; 64];
    let mut read = 0;
    while read < max {
        // SAFETY: sockaddr_storage is plain data; zero is valid.
        let mut name: libc::sockaddr_storage = unsafe { zeroed() };
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        // SAFETY: msghdr is plain data; zero is valid.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_name = &mut name as *mut _ as *mut libc::c_void;
        msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: every pointer in `msg` points at a live buffer of the
        // size given; the kernel writes at most those sizes.
        let n = unsafe {
            libc::recvmsg(
                sock.as_raw_fd(),
                &mut msg,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            break;
        }
        read += 1;
        let mut unreachable = false;
        // SAFETY: the kernel filled `control` up to msg_controllen; the
        // CMSG macros stay inside it.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                let h = &*c;
                let ours = (h.cmsg_level == libc::SOL_IP && h.cmsg_type == libc::IP_RECVERR)
                    || (h.cmsg_level == libc::SOL_IPV6 && h.cmsg_type == libc::IPV6_RECVERR);
                if ours {
                    let e = std::ptr::read_unaligned(
                        libc::CMSG_DATA(c) as *const libc::sock_extended_err
                    );
                    let icmp = e.ee_origin == libc::SO_EE_ORIGIN_ICMP
                        || e.ee_origin == libc::SO_EE_ORIGIN_ICMP6;
                    let errno = e.ee_errno as libc::c_int;
                    unreachable |= icmp
                        && matches!(
                            errno,
                            libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH
                        );
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if let (true, Some(dest)) = (unreachable, to_socket_addr(&name)) {
            on(dest, &data[..(n as usize).min(data.len())]);
        }
    }
    read
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

    /// Keeps the queued datagrams for which `keep` is true, in order; the
    /// others (sent some other way) leave the batch.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], SocketAddr) -> bool) {
        let mut kept = 0;
        for i in 0..self.used {
            if keep(&self.bufs[i], self.dests[i]) {
                self.bufs.swap(kept, i);
                self.dests.swap(kept, i);
                kept += 1;
            }
        }
        self.used = kept;
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
    /// empties the batch. A datagram the kernel refuses goes again, up to
    /// [`SEND_TRIES`] times (the failure may be an earlier datagram's ICMP
    /// error), then is dropped, as a lost UDP datagram would be. `true`
    /// when some send failed: errors may be queued on `sock`.
    pub fn flush(&mut self, sock: &UdpSocket) -> bool {
        let mut start = 0;
        // Failed sends of the datagram at `start`.
        let mut failures = 0;
        let mut failed = false;
        while start < self.used {
            let n = (self.used - start).min(BATCH);
            // Only the `n` entries the kernel reads are written: filling
            // all BATCH of them for one datagram cost more than the rest of
            // the send's user-space work.
            let mut iovs = [MaybeUninit::<libc::iovec>::uninit(); BATCH];
            let mut names = [MaybeUninit::<RawAddr>::uninit(); BATCH];
            let mut hdrs = [MaybeUninit::<libc::mmsghdr>::uninit(); BATCH];
            for k in 0..n {
                let buf = &self.bufs[start + k];
                let (name, namelen) = to_raw(self.dests[start + k]);
                let name: *mut RawAddr = names[k].write(name);
                let iov: *mut libc::iovec = iovs[k].write(libc::iovec {
                    iov_base: buf.as_ptr() as *mut libc::c_void,
                    iov_len: buf.len(),
                });
                // SAFETY: mmsghdr is plain data; all-zero is valid (no
                // control data, no flags).
                let mut h: libc::mmsghdr = unsafe { zeroed() };
                h.msg_hdr.msg_name = name.cast();
                h.msg_hdr.msg_namelen = namelen;
                h.msg_hdr.msg_iov = iov;
                h.msg_hdr.msg_iovlen = 1;
                hdrs[k].write(h);
            }
            // SAFETY: the first `n` headers are written and point at live
            // buffers and addresses that outlive the call; the kernel reads
            // them and writes only their msg_len.
            let sent = unsafe {
                libc::sendmmsg(
                    sock.as_raw_fd(),
                    hdrs.as_mut_ptr().cast::<libc::mmsghdr>(),
                    n as libc::c_uint,
                    0,
                )
            };
            if sent as usize == n {
                start += n;
                failures = 0;
                continue;
            }
            // The datagram after those sent failed (sendmmsg reports an
            // error only when nothing was sent).
            failed = true;
            if sent > 0 {
                start += sent as usize;
                failures = 0;
            }
            failures += 1;
            if failures == SEND_TRIES {
                start += 1;
                failures = 0;
            }
        }
        self.used = 0;
        failed
    }
}

/// Sends one datagram, again after a failure as [`SendBatch::flush`]
/// does. `true` when some try failed: errors may be queued on `sock`.
pub fn send_to(sock: &UdpSocket, bytes: &[u8], dest: SocketAddr) -> bool {
    for tries in 0..SEND_TRIES {
        if sock.send_to(bytes, dest).is_ok() {
            return tries > 0;
        }
    }
    true
}

/// Raises the soft file-descriptor limit to the hard one; returns the
/// new soft limit.
pub fn raise_fd_limit() -> usize {
    // SAFETY: getrlimit/setrlimit read and write a plain struct we own.
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1024;
        }
        if r.rlim_cur < r.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                r.rlim_cur = r.rlim_max;
            }
        }
        usize::try_from(r.rlim_cur).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn retain_keeps_the_chosen_in_order() {
        let mut out = SendBatch::default();
        for i in 0..5u8 {
            out.next_buf().push(i);
            out.commit(SocketAddr::from(([127, 0, 0, 1], 5000 + u16::from(i))));
        }
        out.retain(|b, _| b[0] % 2 == 0);
        assert_eq!(out.len(), 3);
        let kept: Vec<(u8, u16)> = (0..3)
            .map(|i| (out.bufs[i][0], out.dests[i].port()))
            .collect();
        assert_eq!(kept, [(0, 5000), (2, 5002), (4, 5004)]);
        // The buffers sent elsewhere are reused, not lost.
        assert_eq!(out.bufs.len(), 5);
    }

    /// The sets a buffer's first `lines` cache lines fall in, for a cache
    /// of `sets` sets of 64-byte lines.
    fn sets(buffers: usize, lines: usize, sets: usize) -> Vec<usize> {
        (0..buffers)
            .flat_map(|i| (0..lines).map(move |k| (i * RECV_STRIDE / 64 + k) % sets))
            .collect()
    }

    #[test]
    fn a_batch_of_short_datagrams_does_not_crowd_a_cache_set() {
        // A 512 KiB or 1 MiB 8-way L2: every head in sets of its own.
        for l2 in [1024, 2048] {
            let mut s = sets(64, 9, l2);
            s.sort_unstable();
            s.dedup();
            assert_eq!(s.len(), 64 * 9, "{l2} sets");
        }
        // A 32 KiB 8-way L1: a batch's heads within its ways.
        let s = sets(BATCH, 9, 64);
        let most = (0..64)
            .map(|set| s.iter().filter(|&&x| x == set).count())
            .max();
        assert!(most <= Some(8), "{most:?}");
        // Buffers exactly 64 KiB apart put every head in the same nine.
        let aliased: std::collections::BTreeSet<usize> = (0..BATCH)
            .flat_map(|i| (0..9).map(move |k| (i * (1 << 16) / 64 + k) % 64))
            .collect();
        assert_eq!(aliased.len(), 9);
    }

    #[test]
    fn the_first_and_the_last_buffer_hold_the_largest_datagram() {
        let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let to = rx.local_addr().expect("addr");
        // The largest UDP payload over IPv4 first and last, one byte
        // between (two large ones fit any receive buffer's default).
        let largest = MAX_DATAGRAM - 28;
        let size = |i: usize| if i == 0 || i == BATCH - 1 { largest } else { 1 };
        for i in 0..BATCH {
            tx.send_to(&vec![i as u8; size(i)], to).expect("send");
        }
        rx.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut batch = RecvBatch::new();
        let mut got = 0;
        while got < BATCH {
            let n = batch.recv(&rx).expect("recv");
            for i in 0..n {
                let (data, _) = batch.get(i).expect("datagram");
                assert_eq!(data.len(), size(got), "datagram {got}");
                assert!(data.iter().all(|&b| b == got as u8), "datagram {got}");
                got += 1;
            }
        }
    }

    #[test]
    fn batches_round_trip_over_loopback() {
        for host in ["127.0.0.1:0", "[::1]:0"] {
            round_trip(host);
        }
    }

    /// Forty datagrams sent in two `sendmmsg` calls arrive in order, from
    /// the sender's address.
    fn round_trip(host: &str) {
        let a = UdpSocket::bind(host).expect("bind");
        let b = UdpSocket::bind(host).expect("bind");
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
    fn one_batch_reads_an_ipv4_source_then_an_ipv6_one_whole() {
        // The kernel lowers a header's address length to what it wrote
        // (16 bytes for IPv4); the next read must offer room for IPv6's
        // 28 again, on a batch that moved to another thread meanwhile.
        let mut batch = RecvBatch::new();
        for round in 0..2 {
            for host in ["127.0.0.1:0", "[::1]:0"] {
                let rx = UdpSocket::bind(host).expect("bind");
                let tx = UdpSocket::bind(host).expect("bind");
                rx.set_read_timeout(Some(Duration::from_secs(5)))
                    .expect("timeout");
                tx.send_to(b"x", rx.local_addr().expect("addr"))
                    .expect("send");
                batch = std::thread::spawn(move || {
                    assert_eq!(batch.recv(&rx).expect("recv"), 1);
                    let (data, from) = batch.get(0).expect("datagram");
                    assert_eq!(data, b"x");
                    assert_eq!(from, tx.local_addr().expect("addr"), "round {round}");
                    batch
                })
                .join()
                .expect("reader");
            }
        }
    }

    /// Whether `sock` has an error pending, waiting at most `ms`.
    fn error_pending(sock: &UdpSocket, ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd: sock.as_raw_fd(),
            events: 0,
            revents: 0,
        };
        // SAFETY: one live pollfd, as the count says.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        n == 1 && p.revents & libc::POLLERR != 0
    }

    /// A socket with errors reported that has just drawn an ICMP port
    /// unreachable, and the port nobody listens on.
    fn refused_socket() -> (UdpSocket, SocketAddr) {
        refused_socket_at("127.0.0.1:0")
    }

    fn refused_socket_at(local: &str) -> (UdpSocket, SocketAddr) {
        let closed = UdpSocket::bind(local)
            .and_then(|s| s.local_addr())
            .expect("port");
        let a = UdpSocket::bind(local).expect("bind");
        report_errors(&a, closed.is_ipv6()).expect("IP_RECVERR");
        a.send_to(b"OPTIONS", closed).expect("sent");
        assert!(error_pending(&a, 2000), "ICMP port unreachable arrived");
        (a, closed)
    }

    #[test]
    fn a_pending_icmp_error_costs_no_datagram_and_is_read_with_what_it_quotes() {
        let b = UdpSocket::bind("127.0.0.1:0").expect("bind");
        b.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let to = b.local_addr().expect("addr");
        // Batched: the first try fails with the earlier datagram's error,
        // the next carries the datagram.
        let (a, closed) = refused_socket();
        let mut out = SendBatch::default();
        for i in 0..3u8 {
            out.next_buf().extend_from_slice(&[i; 4]);
            out.commit(to);
        }
        assert!(out.flush(&a), "a try failed");
        let mut buf = [0u8; 16];
        for i in 0..3u8 {
            let (n, _) = b.recv_from(&mut buf).expect("every datagram arrives");
            assert_eq!(&buf[..n], &[i; 4]);
        }
        // The error, with where the datagram went and what it carried.
        let mut seen = Vec::new();
        assert_eq!(
            unreachable(&a, BATCH, |to, q| seen.push((to, q.to_vec()))),
            1
        );
        assert_eq!(seen, [(closed, b"OPTIONS".to_vec())]);
        assert!(!error_pending(&a, 0));
        // One at a time, the same.
        let (a, _) = refused_socket();
        assert!(send_to(&a, b"MESSAGE", to));
        let (n, _) = b.recv_from(&mut buf).expect("arrives");
        assert_eq!(&buf[..n], b"MESSAGE");
        assert_eq!(unreachable(&a, BATCH, |_, _| {}), 1);
        // With nothing pending, nothing fails.
        assert!(!send_to(&a, b"INFO", to));
        let (n, _) = b.recv_from(&mut buf).expect("arrives");
        assert_eq!(&buf[..n], b"INFO");
        out.next_buf().extend_from_slice(b"BYE");
        out.commit(to);
        assert!(!out.flush(&a));
        let (n, _) = b.recv_from(&mut buf).expect("arrives");
        assert_eq!(&buf[..n], b"BYE");
    }

    #[test]
    fn icmpv6_errors_are_read_too() {
        let b = UdpSocket::bind("[::1]:0").expect("bind");
        b.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let (a, closed) = refused_socket_at("[::1]:0");
        assert!(send_to(&a, b"MESSAGE", b.local_addr().expect("addr")));
        let mut buf = [0u8; 16];
        let (n, _) = b.recv_from(&mut buf).expect("arrives");
        assert_eq!(&buf[..n], b"MESSAGE");
        let mut seen = Vec::new();
        assert_eq!(
            unreachable(&a, BATCH, |to, q| seen.push((to, q.to_vec()))),
            1
        );
        assert_eq!(seen, [(closed, b"OPTIONS".to_vec())]);
    }

    #[test]
    fn ipv6_addresses_convert() {
        let v6: SocketAddr = "[2001:db8::7]:5060".parse().expect("addr");
        let v4: SocketAddr = "192.0.2.1:5070".parse().expect("addr");
        for (addr, len) in [(v6, 28), (v4, 16)] {
            let (raw, namelen) = to_raw(addr);
            assert_eq!(namelen, len);
            // SAFETY: all-zero is a valid sockaddr_storage, and the raw
            // address is no larger than one.
            let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
            unsafe {
                std::ptr::copy_nonoverlapping(
                    &raw as *const RawAddr as *const u8,
                    &mut ss as *mut _ as *mut u8,
                    len as usize,
                );
            }
            assert_eq!(to_socket_addr(&ss), Some(addr));
        }
    }
}
