//! eBPF through `bpf(2)` alone (no libbpf, no compiler): the attribute
//! union, instructions as the kernel reads them, and loading a program
//! with the verifier's log. The AF_XDP steering (`xdp/bpf.rs`) and the
//! SO_REUSEPORT steering by Call-ID (`by_call.rs`) assemble theirs here.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

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
/// `ld_imm64`'s source for a function of the program: its immediate is
/// the function's first instruction, counted from the next one.
pub(crate) const PSEUDO_FUNC: u8 = 4;
pub(crate) const ST_DW: u8 = 0x7a;
pub(crate) const STX_DW: u8 = 0x7b;
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
pub(crate) const RSH_X: u8 = 0x7f;
pub(crate) const RSH_K: u8 = 0x77;
pub(crate) const LSH_K: u8 = 0x67;
pub(crate) const MOV32_X: u8 = 0xbc;
pub(crate) const OR_X: u8 = 0x4f;
pub(crate) const JGE_K: u8 = 0x35;
pub(crate) const JLT_K: u8 = 0xa5;
pub(crate) const JLE_X: u8 = 0xbd;
/// `BPF_JMP | BPF_JCOND`, source `BPF_MAY_GOTO`: jumps once the
/// kernel's loop budget is spent (Linux 6.9); the verifier then checks a
/// loop's body until its states converge, not once per turn.
pub(crate) const MAY_GOTO: u8 = 0xe5;

/// A jump target in [`Asm`].
#[derive(Clone, Copy)]
pub(crate) struct Label(usize);

/// Instructions with jumps to labels, and functions' addresses
/// (`ld_imm64` of a `BPF_PSEUDO_FUNC`), resolved at the end.
#[derive(Default)]
pub(crate) struct Asm {
    code: Vec<Insn>,
    labels: Vec<Option<usize>>,
    /// An instruction, its target, and whether the target goes in its
    /// immediate (a function's address) rather than its offset.
    fixes: Vec<(usize, Label, bool)>,
}

impl Asm {
    pub(crate) fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }
    pub(crate) fn bind(&mut self, l: Label) {
        self.labels[l.0] = Some(self.code.len());
    }
    /// The next instruction's index (where a function starts).
    pub(crate) fn here(&self) -> usize {
        self.code.len()
    }
    pub(crate) fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.code.push(Insn::new(code, dst, src, off, imm));
    }
    /// `if dst <code> imm (or src) goto to`; `JA` jumps always.
    pub(crate) fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: Label) {
        self.fixes.push((self.code.len(), to, false));
        self.op(code, dst, src, 0, imm);
    }
    /// `dst = v` (64 bits: two instructions).
    pub(crate) fn ld_dw(&mut self, dst: u8, v: i64) {
        self.op(LD_DW, dst, 0, 0, v as i32);
        self.op(0, 0, 0, 0, (v >> 32) as i32);
    }
    /// `dst = &f`, the function at `f` (a callback).
    pub(crate) fn ld_func(&mut self, dst: u8, f: Label) {
        self.fixes.push((self.code.len(), f, true));
        self.op(LD_DW, dst, PSEUDO_FUNC, 0, 0);
        self.op(0, 0, 0, 0, 0);
    }
    pub(crate) fn ret(&mut self, v: i32) {
        self.op(MOV_K, 0, 0, 0, v);
        self.op(EXIT, 0, 0, 0, 0);
    }
    pub(crate) fn finish(mut self) -> Vec<Insn> {
        for (at, to, imm) in self.fixes {
            let target = self.labels[to.0].expect("every label bound");
            let rel = target as i64 - at as i64 - 1;
            if imm {
                self.code[at].imm = rel as i32;
            } else {
                self.code[at].off = rel as i16;
            }
        }
        self.code
    }
}

const BPF_PROG_TEST_RUN: i64 = 10;

/// Runs `prog` `repeat` times on `frame` (an Ethernet frame) through
/// `BPF_PROG_TEST_RUN`: its return value and the mean nanoseconds a run.
pub(crate) fn test_run(prog: &OwnedFd, frame: &[u8], repeat: u32) -> io::Result<(u32, u32)> {
    let mut attr = Attr::new()
        .u32(0, prog.as_raw_fd() as u32)
        .u32(8, frame.len() as u32)
        .u64(16, frame.as_ptr() as u64)
        .u32(32, repeat);
    attr.call(BPF_PROG_TEST_RUN)?;
    Ok((attr.read_u32(4), attr.read_u32(36)))
}

const BPF_BTF_LOAD: i64 = 18;

/// A function of a program, as BTF describes it to the verifier (which
/// wants every function of a program with more than one described):
/// its first instruction, its name and its parameters' names; a
/// parameter is a pointer when its name ends in `*`, else a `long`.
pub(crate) struct Func {
    pub(crate) at: usize,
    pub(crate) name: &'static str,
    pub(crate) params: &'static [&'static str],
}

/// The BTF of `funcs`: type 1 `long`, type 2 `void *`, then each
/// function's prototype and the function (`struct btf_type` records as
/// in `include/uapi/linux/btf.h`), and the names they use.
fn btf(funcs: &[Func]) -> Vec<u8> {
    const KIND_INT: u32 = 1;
    const KIND_PTR: u32 = 2;
    const KIND_FUNC: u32 = 12;
    const KIND_FUNC_PROTO: u32 = 13;
    const SIGNED: u32 = 1 << 24;
    let mut strings = b"\0long\0".to_vec();
    let mut name = |s: &str| {
        let at = strings.len() as u32;
        strings.extend_from_slice(s.trim_end_matches('*').as_bytes());
        strings.push(0);
        at
    };
    let mut types: Vec<u32> = vec![1, KIND_INT << 24, 8, SIGNED | 64, 0, KIND_PTR << 24, 0];
    for (i, f) in funcs.iter().enumerate() {
        let proto = 3 + 2 * i as u32;
        types.extend([0, KIND_FUNC_PROTO << 24 | f.params.len() as u32, 1]);
        for p in f.params {
            types.extend([name(p), if p.ends_with('*') { 2 } else { 1 }]);
        }
        types.extend([name(f.name), KIND_FUNC << 24, proto]);
    }
    let types: Vec<u8> = types.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let mut b = Vec::new();
    b.extend(0xeb9f_u16.to_ne_bytes());
    b.extend([1, 0]); // version, flags
    for w in [
        24,
        0,
        types.len() as u32,
        types.len() as u32,
        strings.len() as u32,
    ] {
        b.extend(w.to_ne_bytes());
    }
    b.extend(types);
    b.extend(strings);
    b
}

/// Loads `program` as a program of type `prog_type` (attach type
/// `attach`, 0 where the type needs none), its functions described by
/// `funcs` (none for a program of one function); a refusal carries the
/// end of the verifier's log, named by `what`. The log is asked for
/// only after a refusal: a long one would fill its buffer and fail a
/// load the verifier accepted.
pub(crate) fn load(
    prog_type: u32,
    attach: u32,
    program: &[Insn],
    funcs: &[Func],
    what: &str,
) -> io::Result<OwnedFd> {
    let code: Vec<u8> = program.iter().copied().flat_map(Insn::bytes).collect();
    let license = c"GPL";
    let types = (!funcs.is_empty())
        .then(|| {
            let b = btf(funcs);
            Attr::new()
                .u64(0, b.as_ptr() as u64)
                .u32(16, b.len() as u32)
                .call_fd(BPF_BTF_LOAD)
        })
        .transpose()
        .map_err(|e| io::Error::new(e.kind(), format!("loading the {what} program's BTF: {e}")))?;
    let info: Vec<u8> = funcs
        .iter()
        .enumerate()
        .flat_map(|(i, f)| [f.at as u32, 4 + 2 * i as u32])
        .flat_map(u32::to_ne_bytes)
        .collect();
    let attr = || {
        let a = Attr::new()
            .u32(0, prog_type)
            .u32(4, (code.len() / 8) as u32)
            .u64(8, code.as_ptr() as u64)
            .u64(16, license.as_ptr() as u64)
            .u32(68, attach);
        match &types {
            Some(fd) => a
                .u32(72, fd.as_raw_fd() as u32)
                .u32(76, 8)
                .u64(80, info.as_ptr() as u64)
                .u32(88, funcs.len() as u32),
            None => a,
        }
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
