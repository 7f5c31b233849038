//! The crate's two system calls without a safe std wrapper: waiting for a
//! socket to become readable with a sub-millisecond timeout (`ppoll(2)`;
//! socket read timeouts are rounded to scheduler ticks, 4 ms at HZ=250,
//! far too coarse to pace thousands of calls per second), and pinning the
//! generator to a CPU (`sched_setaffinity(2)`).
#![allow(unsafe_code)]

use std::os::fd::RawFd;
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

/// Restricts the calling thread (and threads it spawns later) to CPU `core`.
pub fn pin_to_core(core: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data for which all-zero is the empty set;
    // CPU_SET writes inside it for `core` < CPU_SETSIZE, checked first.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if core >= libc::CPU_SETSIZE as usize {
            return Err(std::io::Error::other("no such CPU"));
        }
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
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
}
