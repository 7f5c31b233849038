//! The load generator's system calls: waiting for a
//! socket to become readable with a sub-millisecond timeout (`ppoll(2)`;
//! socket read timeouts are rounded to scheduler ticks, 4 ms at HZ=250,
//! far too coarse to pace thousands of calls per second), pinning the
//! generator to a CPU (`sched_setaffinity(2)`), raising the descriptor
//! limit (`setrlimit(2)`), `IP_BIND_ADDRESS_NO_PORT`, reading a batch
//! of datagrams in one call (`recvmmsg(2)`) and a bell one thread rings
//! to end another's wait (`eventfd(2)`).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Waits until `fd` is readable (or writable too, with `write`) or
/// `timeout` passes; true when it is.
pub fn wait(fd: RawFd, write: bool, timeout: Duration) -> bool {
    let events = libc::POLLIN | if write { libc::POLLOUT } else { 0 };
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `pfd` and `ts` are valid for the call; one descriptor is
    // passed; a null signal mask leaves the mask unchanged.
    let n = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    n > 0 && pfd.revents & events != 0
}

/// A way for another thread to end a thread's wait at once (an
/// `eventfd`): a generator thread woken for a response another read.
#[derive(Debug)]
pub struct Bell {
    fd: OwnedFd,
}

impl Bell {
    /// A bell not yet rung.
    pub fn new() -> std::io::Result<Self> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a
        // new descriptor this process owns.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and nothing else owns it.
        Ok(Bell {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Ends the wait of the thread listening (or its next one).
    pub fn ring(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to an eventfd; a full
        // counter (EAGAIN) already means "rung".
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    /// Its descriptor, readable while rung (for [`wait_or`]).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Silences the bell whose descriptor is `fd` (reads its counter to zero).
pub fn silence(fd: RawFd) {
    let mut count = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a live buffer; a bell not rung
    // answers EAGAIN (it is non-blocking).
    let _ = unsafe { libc::read(fd, count.as_mut_ptr().cast(), 8) };
}

/// [`wait`] that a rung [`Bell`] (its descriptor `bell`) also ends.
pub fn wait_or(fd: RawFd, write: bool, bell: RawFd, timeout: Duration) {
    let events = libc::POLLIN | if write { libc::POLLOUT } else { 0 };
    let mut fds = [
        libc::pollfd {
            fd,
            events,
            revents: 0,
        },
        libc::pollfd {
            fd: bell,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `fds` holds two valid entries and `ts` is valid for the
    // call; a null signal mask leaves the mask unchanged.
    unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
}

/// Waits until one of `fds` is readable or `timeout` passes; true when
/// one is.
pub fn wait_any(fds: &[RawFd], timeout: Duration) -> bool {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: *fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `pfds` holds `pfds.len()` valid entries and `ts` is valid for
    // the call; a null signal mask leaves the mask unchanged.
    let n = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    n > 0
}

/// Restricts the calling thread (and threads it spawns later) to CPU `core`.
pub fn pin_to_core(core: usize) -> std::io::Result<()> {
    pin_to_cores(&[core])
}

/// Restricts the calling thread (and threads it spawns later) to `cores`.
pub fn pin_to_cores(cores: &[usize]) -> std::io::Result<()> {
    if cores.is_empty() || cores.iter().any(|c| *c >= libc::CPU_SETSIZE as usize) {
        return Err(std::io::Error::other("no such CPU"));
    }
    // SAFETY: cpu_set_t is plain data for which all-zero is the empty set;
    // CPU_SET writes inside it for each core < CPU_SETSIZE, checked above.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for core in cores {
            libc::CPU_SET(*core, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Raises this process's descriptor limit (soft, and hard when privileged)
/// to fit `needed`; the servers started here inherit it. Returns the soft
/// limit in force.
pub fn raise_fd_limit_to(needed: u64) -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write a valid rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return 1024;
        }
        let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(l.rlim_max);
        if l.rlim_max < needed {
            let raised = libc::rlimit {
                rlim_cur: needed.min(nr_open),
                rlim_max: needed.min(nr_open),
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
        let soft = libc::rlimit {
            rlim_cur: l.rlim_max,
            rlim_max: l.rlim_max,
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &soft) == 0 {
            l.rlim_max
        } else {
            l.rlim_cur
        }
    }
}

/// Defers the choice of the local port of a socket bound to port 0 to
/// `connect`, where the kernel can share ports among destinations.
pub fn bind_address_no_port(sock: &impl std::os::fd::AsRawFd) -> std::io::Result<()> {
    set_int_option(
        sock.as_raw_fd(),
        libc::IPPROTO_IP,
        libc::IP_BIND_ADDRESS_NO_PORT,
        1,
    )
}

/// Sets the socket option `name` at `level` on `fd`, one that reads a C
/// `int`, to `value`.
pub(crate) fn set_int_option(
    fd: std::os::fd::RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> std::io::Result<()> {
    // SAFETY: a pointer to a live c_int of the size given; the kernel
    // copies it and checks the descriptor.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            std::ptr::from_ref(&value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Most datagrams [`recv_batch`] reads in one call.
pub const SLOTS: usize = 64;

/// Reads up to `lens.len()` (at most [`SLOTS`]) queued datagrams from the
/// non-blocking socket `fd` in one call, the i-th into
/// `rx[i * slot..][..slot]`, its length into `lens[i]`; returns how many
/// (`WouldBlock` when none is queued). A datagram longer than `slot` is
/// cut to it.
pub fn recv_batch(
    fd: RawFd,
    rx: &mut [u8],
    slot: usize,
    lens: &mut [usize],
) -> std::io::Result<usize> {
    let want = lens.len().min(SLOTS).min(rx.len() / slot.max(1));
    // Only the `want` entries the kernel reads are written: zeroing all
    // SLOTS headers cost more than the rest of a read of a few datagrams.
    let mut iov = [std::mem::MaybeUninit::<libc::iovec>::uninit(); SLOTS];
    let mut hdrs = [std::mem::MaybeUninit::<libc::mmsghdr>::uninit(); SLOTS];
    for ((v, h), room) in iov
        .iter_mut()
        .zip(hdrs.iter_mut())
        .zip(rx.chunks_exact_mut(slot))
        .take(want)
    {
        let v: *mut libc::iovec = v.write(libc::iovec {
            iov_base: room.as_mut_ptr().cast(),
            iov_len: room.len(),
        });
        // SAFETY: an all-zero mmsghdr is valid (null name and control,
        // zero lengths and flags).
        let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
        h.write(m);
    }
    // SAFETY: `want` headers, each pointing at one iovec over its own
    // slot of `rx`, all alive for the call; no timeout.
    let got = unsafe {
        libc::recvmmsg(
            fd,
            hdrs.as_mut_ptr().cast::<libc::mmsghdr>(),
            want as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    let got = usize::try_from(got).map_err(|_| std::io::Error::last_os_error())?;
    for (len, h) in lens.iter_mut().zip(&hdrs).take(got) {
        // SAFETY: the first `want` headers were written, and the kernel
        // filled at most that many.
        *len = unsafe { h.assume_init_ref() }.msg_len as usize;
    }
    Ok(got)
}

/// Moves the calling thread into the network namespace at `path` (such as
/// `/run/netns/NAME`, made by `ip netns add`): sockets it opens afterwards,
/// and threads it spawns, live there.
pub fn enter_network_namespace(path: &std::path::Path) -> std::io::Result<()> {
    let ns = std::fs::File::open(path)?;
    // SAFETY: setns(2) on a descriptor open for the call; it changes only
    // the calling thread's namespace.
    let r = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&ns), libc::CLONE_NEWNET) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_data_or_the_timeout() {
        use std::net::UdpSocket;
        use std::os::fd::AsRawFd;
        let a = UdpSocket::bind("127.0.0.1:0").expect("socket");
        let b = UdpSocket::bind("127.0.0.1:0").expect("socket");
        assert!(!wait(a.as_raw_fd(), false, Duration::from_micros(200)));
        b.send_to(b"x", a.local_addr().expect("addr"))
            .expect("send");
        assert!(wait(a.as_raw_fd(), false, Duration::from_secs(5)));
        assert!(
            wait(b.as_raw_fd(), true, Duration::from_secs(5)),
            "writable"
        );
    }

    #[test]
    fn reads_a_batch_in_order_and_says_when_none_is_queued() {
        use std::net::UdpSocket;
        use std::os::fd::AsRawFd;
        let a = UdpSocket::bind("127.0.0.1:0").expect("socket");
        a.set_nonblocking(true).expect("non-blocking");
        let b = UdpSocket::bind("127.0.0.1:0").expect("socket");
        let to = a.local_addr().expect("addr");
        let (mut rx, mut lens) = (vec![0u8; 4 * 8], [0usize; 4]);
        let none = recv_batch(a.as_raw_fd(), &mut rx, 8, &mut lens).expect_err("empty");
        assert_eq!(none.kind(), std::io::ErrorKind::WouldBlock);
        for d in [&b"one"[..], b"", b"three", b"longer than eight"] {
            b.send_to(d, to).expect("send");
        }
        assert!(wait(a.as_raw_fd(), false, Duration::from_secs(5)));
        // Loopback queues all four at once; read two, then the rest.
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while got.len() < 4 && std::time::Instant::now() < deadline {
            let want = if got.is_empty() { 2 } else { 4 };
            let Ok(n) = recv_batch(a.as_raw_fd(), &mut rx, 8, &mut lens[..want]) else {
                continue;
            };
            assert!(n <= want, "{n} of {want}");
            for (i, len) in lens.iter().take(n).enumerate() {
                got.push(rx[i * 8..][..*len].to_vec());
            }
        }
        let got: Vec<&[u8]> = got.iter().map(Vec::as_slice).collect();
        // A datagram longer than its slot is cut to it.
        assert_eq!(got, [&b"one"[..], b"", b"three", b"longer t"]);
    }
}
