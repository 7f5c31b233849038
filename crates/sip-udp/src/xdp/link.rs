//! Ethernet frames sent as they are out of an interface (`AF_PACKET`,
//! `CAP_NET_RAW`): what any host on the link can put on it, whatever its
//! headers say — a probe of what the AF_XDP path does with frames the
//! kernel's stack would never hand a socket.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A raw socket bound to sending on one interface.
pub struct RawLink {
    fd: OwnedFd,
    ifindex: i32,
}

impl RawLink {
    /// Opens one for interface `name` (in this thread's network namespace).
    pub fn open(name: &str) -> io::Result<Self> {
        let ifindex = i32::try_from(super::interface_index(name)?).map_err(io::Error::other)?;
        // Protocol 0: the socket sends and receives nothing until bound,
        // and this one is never bound, so nothing queues on it.
        // SAFETY: plain socket(2); the descriptor is owned at once below.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            // SAFETY: `fd` was just opened and is owned nowhere else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            ifindex,
        })
    }

    /// Sends `frame` (destination MAC first) out of the interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        if frame.len() < 14 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a frame of fewer than 14 bytes has no Ethernet header",
            ));
        }
        // SAFETY: all-zero bytes are a valid sockaddr_ll; fields set below.
        let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        to.sll_family = libc::AF_PACKET as u16;
        to.sll_ifindex = self.ifindex;
        to.sll_halen = 6;
        to.sll_addr[..6].copy_from_slice(&frame[..6]);
        // SAFETY: `frame` and `to` live through the call, their lengths given.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&to as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        match usize::try_from(n) {
            Ok(n) if n == frame.len() => Ok(()),
            Ok(n) => Err(io::Error::other(format!(
                "{n} of {} bytes sent",
                frame.len()
            ))),
            Err(_) => Err(io::Error::last_os_error()),
        }
    }
}
