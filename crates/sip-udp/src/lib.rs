//! The socket system calls the standard library lacks, for the server and
//! the load generator alike (as quinn-udp is for QUIC stacks): batched
//! UDP with `recvmmsg(2)`/`sendmmsg(2)`, the ICMP error queue, steering a
//! SO_REUSEPORT group, `ppoll(2)` waits, CPU pinning, descriptor limits,
//! network namespaces, and UDP past the kernel's stack on AF_XDP (`xdp`).
//! The workspace's unsafe socket code lives here and only here; every
//! block says what makes it sound.
#![allow(unsafe_code)]

mod by_call;
mod ebpf;
pub mod fuzzing;
mod mmsg;
mod sys;
pub mod xdp;

pub use by_call::{Bound, CallSteering};
pub use mmsg::*;
pub use sys::{
    bind_address_no_port, enter_network_namespace, pin_to_core, pin_to_cores, raise_fd_limit_to,
    recv_batch, silence, wait, wait_any, wait_or, Bell, SLOTS,
};
