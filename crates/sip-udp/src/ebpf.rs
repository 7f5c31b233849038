//! eBPF through `bpf(2)` alone (no libbpf, no compiler): the attribute
//! union, instructions as the kernel reads them, and loading a program
//! with the verifier's log. The AF_XDP steering (`xdp/bpf.rs`) and the
//! SO_REUSEPORT steering by Call-ID (`by_call.rs`) assemble theirs here.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

pub(crate) const BPF_PROG_LOAD: i64 = 5;

/// `union bpf_attr`, as bytes: each command fills the fields it reads at
/// their offsets in `include/uapi/linux/bpf.h`; the rest stays zero, as
/// the kernel requires.
#[repr(C, align(8))]
pub(crate) struct Attr([u8; 128]);

impl Attr {
    pub(crate) fn new() -> Self {
        Self([0; 128])
    }
    pub(crate) fn u32(mut self, at: usize, v: u32) -> Self {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    pub(crate) fn u64(mut self, at: usize, v: u64) -> Self {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    pub(crate) fn call(&mut self, cmd: i64) -> io::Result<i64> {
        // SAFETY: `self.0` is a valid, writable `bpf_attr` of the length
        // passed; every pointer stored in it (set by the callers below)
        // points to memory that outlives this call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                cmd,
                self.0.as_mut_ptr(),
                self.0.len() as libc::c_ulong,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }
    pub(crate) fn call_fd(mut self, cmd: i64) -> io::Result<OwnedFd> {
        let fd = self.call(cmd)? as RawFd;
        // SAFETY: the kernel returned a new descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
    /// A field the kernel wrote back (a test run's return value, its
    /// duration).
    pub(crate) fn read_u32(&self, at: usize) -> u32 {
        let mut b = [0; 4];
        b.copy_from_slice(&self.0[at..at + 4]);
        u32::from_ne_bytes(b)
    }
}

/// One eBPF instruction (`struct bpf_insn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Insn {
    pub(crate) code: u8,
    pub(crate) regs: u8,
    pub(crate) off: i16,
    pub(crate) imm: i32,
}

impl Insn {
    pub(crate) const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Self {
        Self {
            code,
            regs: dst | (src << 4),
            off,
            imm,
        }
    }
    pub(crate) fn bytes(self) -> [u8; 8] {
        let mut b = [0; 8];
        b[0] = self.code;
        b[1] = self.regs;
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }
}

pub(crate) const LDX_W: u8 = 0x61;
pub(crate) const LDX_H: u8 = 0x69;
pub(crate) const LDX_B: u8 = 0x71;
pub(crate) const MOV_X: u8 = 0xbf;
pub(crate) const MOV_K: u8 = 0xb7;
pub(crate) const ADD_K: u8 = 0x07;
pub(crate) const AND_K: u8 = 0x57;
pub(crate) const JGT_X: u8 = 0x2d;
pub(crate) const JNE_K: u8 = 0x55;
/// `BPF_JMP32 | BPF_JEQ | BPF_K`: compares the low 32 bits. A 64-bit
/// jump would sign-extend the immediate, so an address whose last octet
/// is 128 or more (the top bit of its little-endian word) never matched.
pub(crate) const JEQ32_K: u8 = 0x16;
pub(crate) const JA: u8 = 0x05;
pub(crate) const LD_DW: u8 = 0x18;
pub(crate) const CALL: u8 = 0x85;
pub(crate) const EXIT: u8 = 0x95;
pub(crate) const PSEUDO_MAP_FD: u8 = 1;
pub(crate) const ST_W: u8 = 0x62;
pub(crate) const STX_W: u8 = 0x63;
pub(crate) const OR_K: u8 = 0x47;
pub(crate) const XOR32_X: u8 = 0xac;
pub(crate) const MUL32_K: u8 = 0x24;
pub(crate) const MOD32_K: u8 = 0x94;
pub(crate) const JEQ_K: u8 = 0x15;
pub(crate) const JGE_X: u8 = 0x3d;
pub(crate) const JLE_K: u8 = 0xb5;
pub(crate) const SUB_X: u8 = 0x1f;
pub(crate) const LDX_DW: u8 = 0x79;
pub(crate) const XOR_X: u8 = 0xaf;
pub(crate) const XOR_K: u8 = 0xa7;
pub(crate) const AND_X: u8 = 0x5f;
pub(crate) const JGT_K: u8 = 0x25;
pub(crate) const ADD_X: u8 = 0x0f;
pub(crate) const JGE_K: u8 = 0x35;
pub(crate) const JLT_K: u8 = 0xa5;
pub(crate) const JLE_X: u8 = 0xbd;
/// `BPF_JMP | BPF_JCOND`, source `BPF_MAY_GOTO`: jumps once the
/// kernel's loop budget is spent (Linux 6.9); the verifier then checks a
/// loop's body until its states converge, not once per turn.
pub(crate) const MAY_GOTO: u8 = 0xe5;

/// Loads `program` as a program of type `prog_type` (attach type
/// `attach`, 0 where the type needs none); a refusal carries the end of
/// the verifier's log, named by `what`. The log is asked for only after
/// a refusal: a long one would fill its buffer and fail a load the
/// verifier accepted.
pub(crate) fn load(
    prog_type: u32,
    attach: u32,
    program: &[Insn],
    what: &str,
) -> io::Result<OwnedFd> {
    let code: Vec<u8> = program.iter().copied().flat_map(Insn::bytes).collect();
    let license = c"GPL";
    let attr = || {
        Attr::new()
            .u32(0, prog_type)
            .u32(4, (code.len() / 8) as u32)
            .u64(8, code.as_ptr() as u64)
            .u64(16, license.as_ptr() as u64)
            .u32(68, attach)
    };
    let e = match attr().call_fd(BPF_PROG_LOAD) {
        Ok(fd) => return Ok(fd),
        Err(e) => e,
    };
    let mut log = vec![0u8; 1 << 20];
    let _ = attr()
        .u32(24, 1)
        .u32(28, log.len() as u32)
        .u64(32, log.as_mut_ptr() as u64)
        .call_fd(BPF_PROG_LOAD);
    let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
    let text = String::from_utf8_lossy(&log[..end]);
    // The verifier's verdict is at the end of its log: its last lines,
    // each cut short (a line may list the whole stack).
    let lines: Vec<&str> = text.trim().lines().collect();
    let tail: Vec<String> = lines[lines.len().saturating_sub(4)..]
        .iter()
        .map(|l| l.chars().take(240).collect())
        .collect();
    Err(io::Error::new(
        e.kind(),
        format!("loading the {what} program: {e}: {}", tail.join(" / ")),
    ))
}
