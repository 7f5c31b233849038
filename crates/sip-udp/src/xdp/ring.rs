//! One of an AF_XDP socket's four single-producer, single-consumer rings
//! (the kernel's `Documentation/networking/af_xdp.rst`), mapped from the
//! socket: fill and transmit, which this side produces; receive and
//! completion, which it consumes. The kernel's index is read with acquire
//! ordering before entries are read, and this side's index published with
//! release ordering after entries are written.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};

pub(super) struct Ring {
    map: *mut libc::c_void,
    len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    desc: *mut u8,
    size: u32,
    /// The index this side advances: the producer's for fill and
    /// transmit, the consumer's for receive and completion.
    local: u32,
    entry: usize,
}

impl Ring {
    /// Maps the ring of `size` entries of `entry` bytes at page offset
    /// `pgoff` of socket `fd`, laid out as `off` says.
    pub(super) fn map(
        fd: RawFd,
        off: &libc::xdp_ring_offset,
        size: u32,
        entry: usize,
        pgoff: u64,
        produced_here: bool,
    ) -> io::Result<Self> {
        let len = off.desc as usize + size as usize * entry;
        // SAFETY: a shared mapping of the socket's ring, of the length the
        // kernel's offsets and the size set on the socket give; it is
        // unmapped once, in `drop`.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff as libc::off_t,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let at = |o: u64| map.cast::<u8>().wrapping_add(o as usize);
        let mut ring = Self {
            map,
            len,
            producer: at(off.producer).cast(),
            consumer: at(off.consumer).cast(),
            desc: at(off.desc),
            size,
            local: 0,
            entry,
        };
        ring.local = if produced_here {
            ring.producer().load(Ordering::Relaxed)
        } else {
            ring.consumer().load(Ordering::Relaxed)
        };
        Ok(ring)
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: inside the live mapping, aligned by the kernel's layout;
        // the kernel and this side only touch it atomically.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.consumer }
    }

    /// Entries this (producing) side may still write.
    pub(super) fn free(&self) -> u32 {
        self.size
            - self
                .local
                .wrapping_sub(self.consumer().load(Ordering::Acquire))
    }

    /// Entries the kernel produced that this (consuming) side has not
    /// released.
    pub(super) fn ready(&self) -> u32 {
        self.producer()
            .load(Ordering::Acquire)
            .wrapping_sub(self.local)
    }

    fn slot(&self, i: u32) -> *mut u8 {
        let at = self.local.wrapping_add(i) & (self.size - 1);
        self.desc.wrapping_add(at as usize * self.entry)
    }

    /// Writes entry `i` past the published ones (`i < free()`).
    pub(super) fn write<T: Copy>(&mut self, i: u32, v: T) {
        assert!(i < self.size && std::mem::size_of::<T>() == self.entry);
        // SAFETY: the slot lies in the descriptor array (index masked to
        // the ring's size) and has the entry's size; the kernel does not
        // read it until `submit` publishes it.
        unsafe { self.slot(i).cast::<T>().write_unaligned(v) }
    }

    /// Publishes `n` written entries.
    pub(super) fn submit(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        self.producer().store(self.local, Ordering::Release);
    }

    /// Reads ready entry `i` (`i < ready()`).
    pub(super) fn read<T: Copy>(&self, i: u32) -> T {
        assert!(i < self.size && std::mem::size_of::<T>() == self.entry);
        // SAFETY: as for `write`; the kernel published the slot (acquire
        // in `ready`) and does not reuse it until `release`.
        unsafe { self.slot(i).cast::<T>().read_unaligned() }
    }

    /// Gives `n` read entries back to the kernel.
    pub(super) fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        self.consumer().store(self.local, Ordering::Release);
    }
}

// SAFETY: a ring's mapping belongs to the one `Ring` that made it; the
// only other party is the kernel, which it meets through atomics. Moving
// it to another thread moves that sole ownership (it is not `Sync`).
unsafe impl Send for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.map, self.len) };
    }
}
