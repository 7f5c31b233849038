//! UDP past the kernel's stack: an AF_XDP socket (Linux ≥ 5.9) on one
//! receive queue of an interface, with an XDP program that steers one UDP
//! port's datagrams to it (`bpf.rs`). Frames arrive in a memory area
//! shared with the kernel (the UMEM) and answers leave from it: no socket
//! buffers, no routing or neighbour lookups, one system call per batch
//! sent. Half of the UMEM's frames are lent to the kernel for receiving
//! (the fill ring), the other half carry answers (the transmit ring) and
//! come back through the completion ring.
//!
//! Needs `CAP_NET_ADMIN`, `CAP_BPF` and `CAP_NET_RAW` (the AF_XDP socket
//! itself), or root; where the kernel or the
//! privileges lack it, `XdpSocket::open` says why and the caller keeps
//! to its sockets.

mod bpf;
pub mod frame;
mod link;
mod ring;

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

pub use link::RawLink;
use ring::Ring;

/// Bytes per UMEM frame (a page holds two; a datagram of up to ~2 KB).
pub const FRAME: usize = 2048;
/// Frames of the UMEM lent to the kernel to receive into: the backlog a
/// worker may fall behind by before frames are dropped (16 MiB, 29 ms of
/// 280,000 REGISTERs a second), about what the UDP socket's 4 MiB
/// receive buffer holds of short datagrams (each charged with its
/// buffer's overhead). With 2,048 a worker at 80 % of its core dropped
/// thousands a second on a two-core virtual machine where the socket
/// beside it dropped none.
pub const RX_FRAMES: u32 = 8192;
/// Frames to send from.
const TX_FRAMES: u32 = 2048;
/// Frames in the UMEM: receiving first, then sending.
const FRAMES: u32 = RX_FRAMES + TX_FRAMES;

/// Frames the kernel could not hand over, from `XDP_STATISTICS`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drops {
    /// Dropped for lack of a fill frame or of room in the receive ring.
    pub rx: u64,
    /// Transmit descriptors the kernel refused.
    pub tx_invalid: u64,
}

/// The XDP program on an interface that steers one UDP port's IPv4
/// datagrams to the AF_XDP sockets of its receive queues (each opened
/// with [`XdpSocket::open`]); frames for a queue without one go to the
/// kernel's stack as before. Dropping it takes the program off.
pub struct Steering {
    // The link first: the program leaves the interface before it closes.
    _link: OwnedFd,
    _prog: OwnedFd,
    map: OwnedFd,
    ifindex: u32,
    name: String,
}

/// Most receive queues steered (the XSKMAP's size).
const MAX_QUEUES: u32 = 256;

impl Steering {
    /// Attaches the program to interface `ifname` for UDP to `port` and
    /// to one of `addrs` (at most 16; none: any address — only for a
    /// host that forwards nobody's traffic, since datagrams passing
    /// through to other hosts would be taken too).
    pub fn attach(ifname: &str, port: u16, addrs: &[Ipv4Addr]) -> io::Result<Self> {
        if addrs.len() > 16 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "at most 16 addresses are steered",
            ));
        }
        let ifindex = interface_index(ifname)?;
        let map = bpf::xsk_map(MAX_QUEUES)?;
        let prog = bpf::load(&map, port, addrs)?;
        let link = bpf::attach(&prog, ifindex)?;
        Ok(Self {
            _link: link,
            _prog: prog,
            map,
            ifindex,
            name: ifname.to_owned(),
        })
    }

    /// The interface's name.
    pub fn interface(&self) -> &str {
        &self.name
    }
}

/// An AF_XDP socket on one receive queue of an interface.
pub struct XdpSocket {
    // Fields drop in order: the rings are unmapped before the socket
    // closes, the UMEM goes last.
    rx: Ring,
    tx: Ring,
    fill: Ring,
    completion: Ring,
    fd: OwnedFd,
    umem: Umem,
    free_tx: Vec<u64>,
    /// Transmit descriptors written and not yet published.
    queued: u32,
}

struct Umem {
    ptr: *mut u8,
    len: usize,
}

impl Umem {
    fn new(len: usize) -> io::Result<Self> {
        // SAFETY: an anonymous private mapping, unmapped once in `drop`.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            ptr: ptr.cast(),
            len,
        })
    }
}

// SAFETY: the UMEM mapping belongs to the one socket that registered it;
// frames are read and written only through `&mut XdpSocket` methods, so
// moving it to another thread moves sole ownership (it is not `Sync`).
unsafe impl Send for Umem {}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once, after the
        // socket that registered it closed.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn setsockopt<T>(fd: &OwnedFd, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a valid `T` of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads option `name` into a `T`, one of libc's plain-data XDP structs
/// (all zero is a valid value of each).
fn getsockopt<T: Copy>(fd: &OwnedFd, name: libc::c_int) -> io::Result<T> {
    // SAFETY: `T` is plain data (the callers pass libc's C structs).
    let mut v: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is a writable `T` of the size passed in `len`.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            (&mut v as *mut T).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(v)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Binds the socket to its queue. A socket just closed on the same queue
/// is torn down after its close returns: the queue stays busy (EBUSY)
/// for a moment, so the bind is tried again for up to two seconds.
fn bind(fd: libc::c_int, addr: &libc::sockaddr_xdp) -> io::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        // SAFETY: `addr` is a valid sockaddr_xdp of the size passed.
        let r = unsafe {
            libc::bind(
                fd,
                (addr as *const libc::sockaddr_xdp).cast(),
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) || std::time::Instant::now() >= deadline {
            return Err(e);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The IPv4 addresses of interface `name` (in this thread's network
/// namespace).
pub fn interface_ipv4(name: &str) -> io::Result<Vec<Ipv4Addr>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a list freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut at = list;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs returned, alive
        // until freeifaddrs; its name is a NUL-terminated string and its
        // address, when set and of family AF_INET, a sockaddr_in.
        unsafe {
            let ifa = &*at;
            let ours = std::ffi::CStr::from_ptr(ifa.ifa_name).to_bytes() == name.as_bytes();
            if ours
                && !ifa.ifa_addr.is_null()
                && i32::from((*ifa.ifa_addr).sa_family) == libc::AF_INET
            {
                let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                out.push(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
            }
            at = ifa.ifa_next;
        }
    }
    // SAFETY: the list getifaddrs returned, freed once.
    unsafe { libc::freeifaddrs(list) };
    Ok(out)
}

/// The index of interface `name` in this thread's network namespace.
pub fn interface_index(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name).map_err(io::Error::other)?;
    // SAFETY: `c` is a NUL-terminated string alive for the call.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface {name:?}"),
        )),
        i => Ok(i),
    }
}

impl XdpSocket {
    /// Opens a socket on receive queue `queue` of the steered interface
    /// and puts it in the steering's map. A queue the interface does not
    /// have is refused with `ErrorKind::InvalidInput` (the kernel's
    /// EINVAL); so is one past the 256 steered.
    pub fn open(steering: &Steering, queue: u32) -> io::Result<Self> {
        if queue >= MAX_QUEUES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("receive queue {queue}: at most {MAX_QUEUES} are steered"),
            ));
        }
        let (ifname, ifindex) = (steering.name.as_str(), steering.ifindex);
        let umem = Umem::new(FRAMES as usize * FRAME)?;
        // SAFETY: plain socket(2); the descriptor is owned at once.
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr as u64,
            len: umem.len as u64,
            chunk_size: FRAME as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(&fd, libc::XDP_UMEM_REG, &reg)?;
        for (ring, size) in [
            (libc::XDP_UMEM_FILL_RING, RX_FRAMES),
            (libc::XDP_UMEM_COMPLETION_RING, TX_FRAMES),
            (libc::XDP_RX_RING, RX_FRAMES),
            (libc::XDP_TX_RING, TX_FRAMES),
        ] {
            setsockopt(&fd, ring, &size)?;
        }
        let off: libc::xdp_mmap_offsets = getsockopt(&fd, libc::XDP_MMAP_OFFSETS)?;
        let raw = fd.as_raw_fd();
        let desc = std::mem::size_of::<libc::xdp_desc>();
        let rx = Ring::map(
            raw,
            &off.rx,
            RX_FRAMES,
            desc,
            libc::XDP_PGOFF_RX_RING as u64,
            false,
        )?;
        let tx = Ring::map(
            raw,
            &off.tx,
            TX_FRAMES,
            desc,
            libc::XDP_PGOFF_TX_RING as u64,
            true,
        )?;
        let fill = Ring::map(
            raw,
            &off.fr,
            RX_FRAMES,
            8,
            libc::XDP_UMEM_PGOFF_FILL_RING,
            true,
        )?;
        let completion = Ring::map(
            raw,
            &off.cr,
            TX_FRAMES,
            8,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            false,
        )?;
        let mut fill = fill;
        for i in 0..RX_FRAMES {
            fill.write(i, u64::from(i) * FRAME as u64);
        }
        fill.submit(RX_FRAMES);
        let addr = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: 0,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        bind(raw, &addr).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("binding AF_XDP to {ifname} queue {queue}: {e}"),
            )
        })?;
        bpf::set_socket(&steering.map, queue, raw)?;
        Ok(Self {
            rx,
            tx,
            fill,
            completion,
            fd,
            umem,
            free_tx: (RX_FRAMES..FRAMES)
                .map(|i| u64::from(i) * FRAME as u64)
                .collect(),
            queued: 0,
        })
    }

    /// Whether received frames wait (no system call).
    pub fn pending(&self) -> bool {
        self.rx.ready() > 0
    }

    /// How many received frames wait (no system call).
    pub fn waiting(&self) -> u32 {
        self.rx.ready()
    }

    /// Waits up to `timeout` for a frame to arrive; true when one has.
    pub fn wait(&self, timeout: Duration) -> bool {
        self.rx.ready() > 0 || crate::wait(self.fd.as_raw_fd(), false, timeout)
    }

    /// Hands each of up to `max` received frames to `each`, then lends
    /// their buffers back to the kernel. Returns the frames received.
    pub fn receive(&mut self, max: u32, mut each: impl FnMut(&[u8])) -> u32 {
        let ready = self.rx.ready().min(max).min(self.fill.free());
        for i in 0..ready {
            let d: libc::xdp_desc = self.rx.read(i);
            let base = d.addr & !(FRAME as u64 - 1);
            let end = d.addr.saturating_add(u64::from(d.len));
            if base < u64::from(RX_FRAMES) * FRAME as u64 && end <= base + FRAME as u64 {
                // SAFETY: the frame [d.addr, end) lies in the receiving part of
                // the live UMEM (checked above), written by the kernel
                // before it published the descriptor, and not lent again
                // until the fill ring takes it back below.
                each(unsafe {
                    std::slice::from_raw_parts(self.umem.ptr.add(d.addr as usize), d.len as usize)
                });
            }
            self.fill.write(i, base);
        }
        self.rx.release(ready);
        self.fill.submit(ready);
        ready
    }

    /// Queues one frame that `write` puts into a transmit buffer of
    /// `FRAME` bytes (returning its length; 0 sends nothing). False when
    /// nothing was queued: no buffer was free, or `write` wrote nothing
    /// (the frame should go another way).
    pub fn transmit(&mut self, write: impl FnOnce(&mut [u8]) -> usize) -> bool {
        if self.free_tx.is_empty() {
            self.reclaim();
        }
        let Some(&at) = self.free_tx.last() else {
            return false;
        };
        // SAFETY: the transmit frame lies in the sending part of the live
        // UMEM and is owned by this side until its descriptor is published.
        let buf = unsafe { std::slice::from_raw_parts_mut(self.umem.ptr.add(at as usize), FRAME) };
        let n = write(buf).min(FRAME);
        if n == 0 {
            return false;
        }
        self.free_tx.pop();
        let desc = libc::xdp_desc {
            addr: at,
            len: n as u32,
            options: 0,
        };
        self.tx.write(self.queued, desc);
        self.queued += 1;
        true
    }

    /// Sends the frames `transmit` queued, in one system call.
    pub fn flush(&mut self) {
        if self.queued > 0 {
            self.tx.submit(self.queued);
            self.queued = 0;
            self.kick();
        }
        self.reclaim();
    }

    /// The socket's descriptor, to wait on beside others.
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    fn kick(&self) {
        // SAFETY: a zero-length sendto(2) with no address asks the kernel
        // to send what the transmit ring holds; no memory is passed.
        unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
    }

    /// Takes sent frames back from the completion ring.
    fn reclaim(&mut self) {
        let done = self.completion.ready();
        for i in 0..done {
            self.free_tx.push(self.completion.read::<u64>(i));
        }
        self.completion.release(done);
        // Answers the kernel has not taken (a send that found it busy) go
        // now rather than with the next batch.
        if self.tx.free() < TX_FRAMES {
            self.kick();
        }
    }

    /// The kernel's counts of frames it could not hand over: those it
    /// found no fill buffer for (`rx_dropped`, which also counts the
    /// few it found too long) and no room in the receive ring for
    /// (`rx_ring_full`). `rx_fill_ring_empty_descs` counts the first kind
    /// again, from the fill ring's side (equal to `rx_dropped` in every
    /// run measured), so it is left out.
    pub fn drops(&self) -> io::Result<Drops> {
        let s: libc::xdp_statistics = getsockopt(&self.fd, libc::XDP_STATISTICS)?;
        Ok(Drops {
            rx: s.rx_dropped + s.rx_ring_full,
            tx_invalid: s.tx_invalid_descs,
        })
    }
}
