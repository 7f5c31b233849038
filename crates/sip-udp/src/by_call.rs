//! Steering a SO_REUSEPORT group by Call-ID: an eBPF program, assembled
//! here and attached with SO_ATTACH_REUSEPORT_EBPF, finds each datagram's
//! `Call-ID` (or compact `i`) header field and returns the socket whose
//! index its value hashes to (FNV-1a, 32 bits, modulo the sockets). One
//! busy peer's calls then use every worker, while every message of one
//! call — a transaction's retransmissions and responses, a dialog's
//! requests — reaches one worker, in the order it came. A datagram whose
//! Call-ID is not within the first [`SCANNED`] bytes (or that has none)
//! goes by the kernel's own hash of its sender, as without a program.
//!
//! The program copies the datagram to its stack a chunk at a time and
//! reads it there, a word at a time in a line's middle and a byte at a
//! time otherwise, as a small state machine: a line's first byte, the
//! name's letters folded to lower case, optional blanks, the colon,
//! blanks, then the value up to the first blank or line end. It stops at
//! the blank line that ends the header section, so a body that mentions
//! a Call-ID is not read.
//!
//! The scan is a loop the verifier must see end. Linux 6.9 bounds it in
//! line (`may_goto`); older kernels from 5.17 (Debian 12's 6.1 among
//! them) take it as a function `bpf_loop` calls, four turns a call, in line
//! since 6.0 ([`Bound`]). [`CallSteering::load`] tries the first, then
//! the second. Either needs `CAP_BPF` and `CAP_PERFMON` (for reads at
//! a variable place on the stack), or root; the caller falls back when both fail.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use crate::ebpf::*;

const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;

/// Bytes of a datagram the program reads for its Call-ID: three chunks,
/// past the 1,300 bytes above which RFC 3261 §18.1.1 sends a request
/// over a congestion-controlled transport instead. Past this bound the
/// datagram goes by its sender's hash.
pub const SCANNED: i32 = 3 * CHUNK;

/// What the program returns when it finds no Call-ID: an index past any
/// group, so the kernel picks by its own hash.
const NOT_FOUND: i32 = -1;

const FNV_BASIS: u32 = 0x811c_9dc5;
const FNV_PRIME: u32 = 0x0100_0193;

/// How the program bounds its loops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// In line, a turn at a time bounded by `may_goto` (Linux 6.9).
    MayGoto,
    /// Each turn a call of a function the `bpf_loop` helper makes
    /// (Linux 5.17).
    Helper,
}

impl Bound {
    /// Every bound, the one preferred first.
    pub const ALL: [Bound; 2] = [Bound::MayGoto, Bound::Helper];

    /// How logs and reports name it.
    pub fn name(self) -> &'static str {
        match self {
            Bound::MayGoto => "may_goto",
            Bound::Helper => "bpf_loop",
        }
    }
}

/// The steering program, loaded for a group of `sockets`.
#[derive(Debug)]
pub struct CallSteering {
    prog: OwnedFd,
    sockets: u32,
    bound: Bound,
}

impl CallSteering {
    /// Loads the program for a group of `sockets` (at least 1), bounded
    /// as the running kernel allows: the first of [`Bound::ALL`] its
    /// verifier accepts. A refusal of each says why each was refused.
    pub fn load(sockets: u32) -> io::Result<Self> {
        let mut refusals = Vec::new();
        for bound in Bound::ALL {
            match Self::load_bounded(sockets, bound) {
                Ok(s) => return Ok(s),
                Err(e) => refusals.push(e),
            }
        }
        let kind = refusals[0].kind();
        let why: Vec<String> = refusals.iter().map(ToString::to_string).collect();
        Err(io::Error::new(kind, why.join("; ")))
    }

    /// Loads the program with its loops bounded as `bound` says.
    pub fn load_bounded(sockets: u32, bound: Bound) -> io::Result<Self> {
        let sockets = sockets.max(1);
        let what = format!("Call-ID steering ({})", bound.name());
        let (code, funcs) = program(sockets, bound);
        let prog = load(BPF_PROG_TYPE_SOCKET_FILTER, 0, &code, &funcs, &what)?;
        Ok(Self {
            prog,
            sockets,
            bound,
        })
    }

    /// How the loaded program bounds its loops.
    pub fn bound(&self) -> Bound {
        self.bound
    }

    /// Attaches the program to `sock`'s SO_REUSEPORT group (bind every
    /// socket of the group first: the index counts the group's sockets
    /// in the order they joined).
    pub fn attach(&self, sock: &UdpSocket) -> io::Result<()> {
        crate::sys::set_int_option(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_EBPF,
            self.prog.as_raw_fd(),
        )
    }

    /// The socket the kernel's program picks for `datagram` (its UDP
    /// payload), run once through `BPF_PROG_TEST_RUN`; `None` when it
    /// leaves the choice to the sender's hash.
    pub fn pick(&self, datagram: &[u8]) -> io::Result<Option<u32>> {
        let (ret, _) = self.test_run(datagram, 1)?;
        Ok((ret < self.sockets).then_some(ret))
    }

    /// What one run of the program costs the kernel on `datagram`,
    /// averaged over `repeat` runs (`BPF_PROG_TEST_RUN`).
    pub fn time(&self, datagram: &[u8], repeat: u32) -> io::Result<Duration> {
        let (_, ns) = self.test_run(datagram, repeat.max(1))?;
        Ok(Duration::from_nanos(u64::from(ns)))
    }

    /// The socket a Call-ID's datagrams go to: what the program computes.
    pub fn index_of(call_id: &[u8], sockets: u32) -> u32 {
        let h = call_id.iter().fold(FNV_BASIS, |h, &b| {
            (h ^ u32::from(b)).wrapping_mul(FNV_PRIME)
        });
        h % sockets.max(1)
    }

    /// Runs the program `repeat` times on `datagram` behind an Ethernet
    /// header (which the kernel strips for a socket filter, as the
    /// SO_REUSEPORT hook strips the UDP header): its return value and
    /// the mean nanoseconds a run.
    fn test_run(&self, datagram: &[u8], repeat: u32) -> io::Result<(u32, u32)> {
        // EtherType 0x88b5 (local experimental): not IPv4, whose header
        // the kernel would look for in the payload.
        let mut frame = vec![0u8; 14];
        frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
        frame.extend_from_slice(datagram);
        test_run(&self.prog, &frame, repeat)
    }
}

impl Asm {
    /// `state = s; goto to`.
    fn set_and_go(&mut self, s: i32, to: Label) {
        self.op(MOV_K, STATE, 0, 0, s);
        self.jump(JA, 0, 0, 0, to);
    }
}

// Registers: r0 the byte read, r1 and r2 scratch, r6 the context (in
// the loop's function, the frame), r7 the position in the chunk, r8 the
// state, r9 the chunk's length. On the stack (the frame): the hash, the
// chunk's offset in the datagram, the registers a call of `bpf_loop`'s
// function keeps (the length in a whole word, so that the verifier
// keeps its range), what it found, the chunk.
const BYTE: u8 = 0;
const TMP: u8 = 1;
const TMP2: u8 = 2;
const CTX: u8 = 6;
const POS: u8 = 7;
const STATE: u8 = 8;
const LEN: u8 = 9;
const FP: u8 = 10;
const HASH_AT: i16 = -4;
const BASE_AT: i16 = -8;
/// Each turn passes the position through half a word the verifier does
/// not follow: it starts as any number, bounded again by the chunk's
/// end, so the verifier's states at a turn's start differ only in the
/// state and converge at once, instead of one walk per position (past
/// the million instructions it allows) or, on 6.1, dead code.
const POS_AT: i16 = -12;
/// The state is kept in half a word the verifier does not follow, so
/// that a turn may start in any state. Before Linux 6.7 it checks the
/// loop's function once, from the state of the first turn, and would
/// take the code of every other state for dead and drop it.
const STATE_AT: i16 = -20;
const LEN_AT: i16 = -32;
const OUTCOME_AT: i16 = -40;
/// Bytes copied out of the datagram at a time: what the stack has left.
/// A program's frames share 512 bytes, each counted in steps of 32; the
/// loop's function takes one step (Linux 6.1), so the frame keeps 480.
const CHUNK: i32 = 440;
const CHUNK_AT: i16 = OUTCOME_AT - CHUNK as i16;
const BPF_FUNC_SKB_LOAD_BYTES: i32 = 26;
const BPF_FUNC_LOOP: i32 = 181;
/// Turns in one call of the loop's function, one after another: a call
/// and its return cost more than a turn (`bpf_loop` over a REGISTER:
/// 828 ns with one, 367 with four; loading it takes the verifier of
/// Linux 6.18 1.4 s with four, 0.3 with two).
const TURNS: usize = 4;

// States: in a line; at a line's first byte; `NAME + k`: k bytes of
// "call-id" matched; after the name; before the value; in the value.
const SCAN: i32 = 0;
const LINE: i32 = 1;
const NAME: i32 = 10;
const AFTER_NAME: i32 = 20;
const BEFORE_VALUE: i32 = 21;
const VALUE: i32 = 22;
const LONG_NAME: &[u8] = b"call-id";

// What a chunk's loop found: nothing yet, the value's end, the header
// section's end.
const GOING: i32 = 0;
const FOUND: i32 = 1;
const NONE: i32 = 2;

/// In a line's middle (`SCAN`), with the word of the chunk that holds
/// the position in the datagram: skips the word's bytes from the
/// position on up to its first line feed, or to its end when it has
/// none, and goes on at `top`; at a line feed, and in other states, on
/// at `byte`. A word has a zero byte where it matched `'\n'` in every
/// byte, which `(v - 0x01…01) & !v & 0x80…80` tells without a branch a
/// byte: the lowest byte it flags is the first zero (a borrow can flag
/// bytes above it, never below).
fn skip_word(a: &mut Asm, frame: u8, byte: Label, top: Label) {
    const WORD: i32 = 8;
    let feed = a.label();
    a.jump(JNE_K, STATE, 0, SCAN, byte);
    // The constant bound is the verifier's (the read stays in the
    // chunk); the length's is the datagram's.
    a.jump(JGT_K, POS, 0, CHUNK - WORD, byte);
    // Stack reads are aligned: the word at the position rounded down,
    // its address built from the rounded copy so that the verifier sees
    // it aligned too.
    a.op(MOV_X, 2, POS, 0, 0);
    a.op(AND_K, 2, 0, 0, -WORD);
    a.op(MOV_X, 3, 2, 0, 0);
    a.op(ADD_K, 3, 0, 0, WORD);
    a.jump(JGT_X, 3, LEN, 0, byte);
    a.op(MOV_X, 3, frame, 0, 0);
    a.op(ADD_X, 3, 2, 0, 0);
    a.op(LDX_DW, 3, 3, CHUNK_AT, 0);
    a.ld_dw(4, 0x0a0a_0a0a_0a0a_0a0a);
    a.op(XOR_X, 3, 4, 0, 0);
    // The bytes before the position shifted out, and ones shifted in:
    // not line feeds.
    a.op(MOV_X, 2, POS, 0, 0);
    a.op(AND_K, 2, 0, 0, WORD - 1);
    a.op(LSH_K, 2, 0, 0, 3);
    a.op(RSH_X, 3, 2, 0, 0);
    a.op(MOV_K, 4, 0, 0, -1);
    a.op(RSH_X, 4, 2, 0, 0);
    a.op(XOR_K, 4, 0, 0, -1);
    a.op(OR_X, 3, 4, 0, 0);
    a.op(MOV_X, 4, 3, 0, 0);
    a.op(XOR_K, 4, 0, 0, -1);
    a.ld_dw(5, 0x0101_0101_0101_0101);
    a.op(SUB_X, 3, 5, 0, 0);
    a.op(AND_X, 3, 4, 0, 0);
    a.ld_dw(5, 0x8080_8080_8080_8080_u64 as i64);
    a.op(AND_X, 3, 5, 0, 0);
    a.jump(JNE_K, 3, 0, 0, feed);
    a.op(AND_K, POS, 0, 0, -WORD);
    a.op(ADD_K, POS, 0, 0, WORD);
    a.jump(JA, 0, 0, 0, top);
    // A line feed k bytes on: the lowest flag's byte, found by halves
    // (k in r2).
    a.bind(feed);
    a.op(MOV_K, 2, 0, 0, 0);
    for bytes in [4, 2, 1] {
        let within = a.label();
        if bytes == 4 {
            a.op(MOV32_X, 4, 3, 0, 0);
        } else {
            a.op(MOV_X, 4, 3, 0, 0);
            a.op(AND_K, 4, 0, 0, (1 << (8 * bytes)) - 1);
        }
        a.jump(JNE_K, 4, 0, 0, within);
        a.op(ADD_K, 2, 0, 0, bytes);
        a.op(RSH_K, 3, 0, 0, 8 * bytes);
        a.bind(within);
    }
    // At the feed itself: read it as a byte.
    a.jump(JEQ_K, 2, 0, 0, byte);
    a.op(ADD_X, POS, 2, 0, 0);
    a.jump(JA, 0, 0, 0, top);
}

/// Where a turn of the scan goes next: another turn, the next chunk,
/// the value's end (the hash is the answer), the header section's end
/// (there is none).
struct Exits {
    top: Label,
    next_chunk: Label,
    found: Label,
    none: Label,
}

/// One turn of the scan over the chunk at `frame` + [`CHUNK_AT`]: a
/// byte, or a line's middle up to its line feed or a word's end.
fn turn(a: &mut Asm, frame: u8, x: &Exits) {
    let (line, first, scan, value) = (a.label(), a.label(), a.label(), a.label());
    let (mix, before_value, byte) = (a.label(), a.label(), a.label());
    a.op(STX_W, frame, POS, POS_AT, 0);
    a.op(LDX_W, POS, frame, POS_AT, 0);
    a.jump(JGE_X, POS, LEN, 0, x.next_chunk);
    // The same end as a constant, for the verifier: before Linux 6.8 it
    // learns no bound from comparing two registers.
    a.jump(JGE_K, POS, 0, CHUNK, x.next_chunk);
    a.op(MOV_X, TMP, frame, 0, 0);
    a.op(ADD_X, TMP, POS, 0, 0);
    skip_word(a, frame, byte, x.top);
    a.bind(byte);
    a.op(LDX_B, BYTE, TMP, CHUNK_AT, 0);
    a.op(ADD_K, POS, 0, 0, 1);
    a.jump(JEQ_K, STATE, 0, VALUE, value);
    a.jump(JEQ_K, BYTE, 0, i32::from(b'\n'), line);
    a.jump(JEQ_K, STATE, 0, SCAN, x.top);
    a.jump(JEQ_K, STATE, 0, LINE, first);
    a.op(MOV_X, TMP, BYTE, 0, 0);
    a.op(OR_K, TMP, 0, 0, 0x20);
    for (k, &want) in LONG_NAME.iter().enumerate().skip(1) {
        let next = a.label();
        a.jump(JNE_K, STATE, 0, NAME + k as i32, next);
        a.jump(JNE_K, TMP, 0, i32::from(want), scan);
        let after = if k + 1 == LONG_NAME.len() {
            AFTER_NAME
        } else {
            NAME + k as i32 + 1
        };
        a.set_and_go(after, x.top);
        a.bind(next);
    }
    a.jump(JEQ_K, STATE, 0, BEFORE_VALUE, before_value);
    // After the name: blanks, then the colon.
    a.jump(JEQ_K, BYTE, 0, i32::from(b' '), x.top);
    a.jump(JEQ_K, BYTE, 0, i32::from(b'\t'), x.top);
    a.jump(JNE_K, BYTE, 0, i32::from(b':'), scan);
    a.set_and_go(BEFORE_VALUE, x.top);

    a.bind(before_value);
    a.jump(JEQ_K, BYTE, 0, i32::from(b' '), x.top);
    a.jump(JEQ_K, BYTE, 0, i32::from(b'\t'), x.top);
    a.jump(JEQ_K, BYTE, 0, i32::from(b'\r'), scan);
    a.op(MOV_K, STATE, 0, 0, VALUE);
    a.jump(JA, 0, 0, 0, mix);

    // A line's first byte: the blank line ends the header section.
    a.bind(first);
    a.jump(JEQ_K, BYTE, 0, i32::from(b'\r'), x.none);
    a.op(MOV_X, TMP, BYTE, 0, 0);
    a.op(OR_K, TMP, 0, 0, 0x20);
    let long = a.label();
    a.jump(JEQ_K, TMP, 0, i32::from(b'c'), long);
    a.jump(JNE_K, TMP, 0, i32::from(b'i'), scan);
    a.set_and_go(AFTER_NAME, x.top);
    a.bind(long);
    a.set_and_go(NAME + 1, x.top);

    a.bind(line);
    a.set_and_go(LINE, x.top);
    a.bind(scan);
    a.set_and_go(SCAN, x.top);

    // The value, up to a blank or the line's end.
    a.bind(value);
    for stop in [b'\r', b'\n', b' ', b'\t'] {
        a.jump(JEQ_K, BYTE, 0, i32::from(stop), x.found);
    }
    a.bind(mix);
    a.op(LDX_W, TMP, frame, HASH_AT, 0);
    a.op(XOR32_X, TMP, BYTE, 0, 0);
    a.op(MUL32_K, TMP, 0, 0, FNV_PRIME as i32);
    a.op(STX_W, frame, TMP, HASH_AT, 0);
    a.jump(JA, 0, 0, 0, x.top);
}

/// Copies the chunk at the offset in r2 to the stack: LEN = min(len -
/// offset, CHUNK) bytes (`bpf_skb_load_bytes`), POS = 0; on to `end`
/// when no byte is left or the copy fails.
fn copy_chunk(a: &mut Asm, end: Label) {
    a.jump(JGE_K, TMP2, 0, SCANNED, end);
    a.op(LDX_W, LEN, CTX, 0, 0); // skb->len: the UDP payload's
    a.jump(JLE_X, LEN, TMP2, 0, end);
    a.op(SUB_X, LEN, TMP2, 0, 0);
    let fits = a.label();
    a.jump(JLE_K, LEN, 0, CHUNK, fits);
    a.op(MOV_K, LEN, 0, 0, CHUNK);
    a.bind(fits);
    a.jump(JLT_K, LEN, 0, 1, end);
    a.op(MOV_X, 1, CTX, 0, 0);
    a.op(MOV_X, 3, FP, 0, 0);
    a.op(ADD_K, 3, 0, 0, i32::from(CHUNK_AT));
    a.op(MOV_X, 4, LEN, 0, 0);
    a.op(CALL, 0, 0, 0, BPF_FUNC_SKB_LOAD_BYTES);
    a.jump(JNE_K, 0, 0, 0, end);
    a.op(MOV_K, POS, 0, 0, 0);
}

/// The answer: at `none`, the sender's hash; at `found`, the socket the
/// hash picks.
fn answer(a: &mut Asm, none: Label, found: Label, sockets: u32) {
    a.bind(none);
    a.ret(NOT_FOUND);
    a.bind(found);
    a.op(LDX_W, 0, FP, HASH_AT, 0);
    a.op(MOD32_K, 0, 0, 0, sockets as i32);
    a.op(EXIT, 0, 0, 0, 0);
}

fn prologue(a: &mut Asm) {
    a.op(MOV_X, CTX, 1, 0, 0);
    a.op(MOV_K, STATE, 0, 0, SCAN);
    a.op(ST_W, FP, 0, HASH_AT, FNV_BASIS as i32);
    a.op(ST_W, FP, 0, BASE_AT, 0);
}

/// The program for a group of `sockets`, its loops bounded as `bound`
/// says, and its functions: the datagram copied to the stack a chunk at
/// a time and read there a turn at a time.
fn program(sockets: u32, bound: Bound) -> (Vec<Insn>, Vec<Func>) {
    match bound {
        Bound::MayGoto => (in_line(sockets), Vec::new()),
        Bound::Helper => by_helper(sockets),
    }
}

/// Both loops in line, their turns bounded by `may_goto`.
fn in_line(sockets: u32) -> Vec<Insn> {
    let mut a = Asm::default();
    let (chunk, top, next_chunk) = (a.label(), a.label(), a.label());
    let (end, found, none) = (a.label(), a.label(), a.label());
    prologue(&mut a);
    a.bind(chunk);
    a.jump(MAY_GOTO, 0, 0, 0, end);
    a.op(LDX_W, TMP2, FP, BASE_AT, 0);
    copy_chunk(&mut a, end);
    a.bind(top);
    a.jump(MAY_GOTO, 0, 0, 0, end);
    let exits = Exits {
        top,
        next_chunk,
        found,
        none,
    };
    turn(&mut a, FP, &exits);
    a.bind(next_chunk);
    a.op(LDX_W, TMP, FP, BASE_AT, 0);
    a.op(ADD_K, TMP, 0, 0, CHUNK);
    a.op(STX_W, FP, TMP, BASE_AT, 0);
    a.jump(JA, 0, 0, 0, chunk);
    // The datagram (or the bytes scanned) ended.
    a.bind(end);
    a.jump(JEQ_K, STATE, 0, VALUE, found);
    answer(&mut a, none, found, sockets);
    a.finish()
}

/// The chunks one after another in line; each chunk's turns are made
/// [`TURNS`] at a time by a function `bpf_loop` calls, which keeps the
/// registers in the frame between calls.
fn by_helper(sockets: u32) -> (Vec<Insn>, Vec<Func>) {
    let mut a = Asm::default();
    let (end, found, none, each) = (a.label(), a.label(), a.label(), a.label());
    prologue(&mut a);
    a.op(STX_W, FP, STATE, STATE_AT, 0);
    // The chunk's bytes start as zeros: Debian 12's 6.1.0-50 checks
    // `bpf_skb_load_bytes`' buffer as one the helper reads ("invalid
    // indirect read from stack") and refuses the program otherwise.
    for k in 0..CHUNK as i16 / 8 {
        a.op(ST_DW, FP, 0, CHUNK_AT + 8 * k, 0);
    }
    for k in 0..SCANNED / CHUNK {
        a.op(MOV_K, TMP2, 0, 0, k * CHUNK);
        copy_chunk(&mut a, end);
        a.op(STX_W, FP, POS, POS_AT, 0);
        a.op(STX_DW, FP, LEN, LEN_AT, 0);
        a.op(ST_DW, FP, 0, OUTCOME_AT, GOING);
        // A turn a byte, and one more that sees the chunk's end.
        a.op(MOV_K, 1, 0, 0, CHUNK + 1);
        a.ld_func(2, each);
        a.op(MOV_X, 3, FP, 0, 0);
        a.op(MOV_K, 4, 0, 0, 0);
        a.op(CALL, 0, 0, 0, BPF_FUNC_LOOP);
        a.op(LDX_DW, TMP, FP, OUTCOME_AT, 0);
        a.jump(JEQ_K, TMP, 0, FOUND, found);
        a.jump(JEQ_K, TMP, 0, NONE, none);
    }
    a.bind(end);
    a.op(LDX_W, STATE, FP, STATE_AT, 0);
    a.jump(JEQ_K, STATE, 0, VALUE, found);
    answer(&mut a, none, found, sockets);

    // A turn: `(index, frame)`; returns 0 for another, 1 to stop.
    let (top, next_chunk, hit, miss) = (a.label(), a.label(), a.label(), a.label());
    a.bind(each);
    let funcs = vec![
        Func {
            at: 0,
            name: "steer",
            params: &["skb*"],
        },
        Func {
            at: a.here(),
            name: "turn",
            params: &["index", "frame*"],
        },
    ];
    a.op(MOV_X, CTX, 2, 0, 0);
    a.op(LDX_W, POS, CTX, POS_AT, 0);
    a.op(LDX_W, STATE, CTX, STATE_AT, 0);
    a.op(LDX_DW, LEN, CTX, LEN_AT, 0);
    for k in 0..TURNS {
        let next = if k + 1 == TURNS { top } else { a.label() };
        let exits = Exits {
            top: next,
            next_chunk,
            found: hit,
            none: miss,
        };
        turn(&mut a, CTX, &exits);
        if k + 1 < TURNS {
            a.bind(next);
        }
    }
    a.bind(top);
    a.op(STX_W, CTX, POS, POS_AT, 0);
    a.op(STX_W, CTX, STATE, STATE_AT, 0);
    a.ret(0);
    a.bind(next_chunk);
    a.op(STX_W, CTX, STATE, STATE_AT, 0);
    a.ret(1);
    for (at, outcome) in [(hit, FOUND), (miss, NONE)] {
        a.bind(at);
        a.op(ST_DW, CTX, 0, OUTCOME_AT, outcome);
        a.ret(1);
    }
    (a.finish(), funcs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn register(call_id_line: &str) -> Vec<u8> {
        format!(
            "REGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK-1\r\n\
             From: <sip:a@example.com>;tag=1\r\nTo: <sip:a@example.com>\r\n{call_id_line}\r\n\
             CSeq: 1 REGISTER\r\nContent-Length: 0\r\n\r\n"
        )
        .into_bytes()
    }

    /// The bounds this kernel must accept: `bpf_loop` from Linux 5.17,
    /// `may_goto` from 6.9.
    fn accepted() -> Vec<Bound> {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut version = release
            .split(['.', '-', '+'])
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let at = (version.next().unwrap(), version.next().unwrap());
        Bound::ALL
            .into_iter()
            .filter(|b| match b {
                Bound::MayGoto => at >= (6, 9),
                Bound::Helper => at >= (5, 17),
            })
            .collect()
    }

    /// The program with each bound this kernel must accept, loaded once
    /// for every test of a group size (the verifier of Linux 6.18 takes
    /// over a second for the `bpf_loop` program; emulated, many more).
    /// They need CAP_BPF and CAP_PERFMON (root here and in CI); elsewhere
    /// they say so and pass nothing.
    fn loaded(sockets: u32) -> &'static [CallSteering] {
        type Loaded = Vec<(u32, &'static [CallSteering])>;
        static LOADED: std::sync::Mutex<Loaded> = std::sync::Mutex::new(Vec::new());
        let mut all = LOADED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, l)) = all.iter().find(|(n, _)| *n == sockets) {
            return l;
        }
        let l: Vec<_> = accepted()
            .into_iter()
            .map(|b| {
                CallSteering::load_bounded(sockets, b).unwrap_or_else(|e| {
                    panic!("the verifier accepts the program (needs CAP_BPF and CAP_PERFMON): {e}")
                })
            })
            .collect();
        let l = &*Box::leak(l.into_boxed_slice());
        all.push((sockets, l));
        l
    }

    #[test]
    fn the_kernel_takes_the_first_bound_it_can() {
        match accepted().first() {
            Some(&first) => {
                let s = CallSteering::load(2).expect("loads (needs CAP_BPF and CAP_PERFMON)");
                assert_eq!(s.bound(), first);
            }
            None => {
                // Before Linux 5.17: the error gives each bound's refusal.
                let e = CallSteering::load(2).expect_err("no bound before Linux 5.17");
                for b in Bound::ALL {
                    let named = format!("Call-ID steering ({}) program", b.name());
                    assert!(e.to_string().contains(&named), "{named} in {e}");
                }
            }
        }
    }

    #[test]
    fn the_kernel_picks_the_socket_the_call_id_hashes_to() {
        for s in loaded(4) {
            for (line, value) in [
                ("Call-ID: abc@192.0.2.1", "abc@192.0.2.1"),
                ("call-id:abc@192.0.2.1", "abc@192.0.2.1"),
                ("CALL-ID :  x-1 ", "x-1"),
                ("i: compact-form", "compact-form"),
                ("I:compact-form", "compact-form"),
            ] {
                let want = CallSteering::index_of(value.as_bytes(), 4);
                assert_eq!(s.pick(&register(line)).unwrap(), Some(want), "{line}");
            }
            // Different Call-IDs land on different sockets (not all on one).
            let picks: std::collections::HashSet<_> = (0..64)
                .map(|i| s.pick(&register(&format!("Call-ID: c{i}"))).unwrap())
                .collect();
            assert_eq!(picks.len(), 4, "{picks:?}");
        }
    }

    #[test]
    fn other_fields_and_the_body_are_not_taken_for_the_call_id() {
        for s in loaded(4) {
            for line in [
                "Call-Info: <http://x>",
                "Identity: abc",
                "X-Call-ID: abc",
                "Call-ID:",
            ] {
                assert_eq!(s.pick(&register(line)).unwrap(), None, "{line}");
            }
            let body =
                b"MESSAGE sip:b@x SIP/2.0\r\nCSeq: 1 MESSAGE\r\n\r\nCall-ID: in-the-body\r\n";
            assert_eq!(s.pick(body).unwrap(), None);
            assert_eq!(s.pick(b"x").unwrap(), None);
            assert_eq!(s.pick(b"\n\n\ni:").unwrap(), None);
            // A value that runs to the datagram's end still counts.
            let want = CallSteering::index_of(b"the-datagram-ends", 4);
            assert_eq!(s.pick(b"X\ni:the-datagram-ends").unwrap(), Some(want));
        }
    }

    #[test]
    fn a_call_id_across_the_chunks_is_read_whole() {
        for s in loaded(4) {
            // The Call-ID line starts 151 + pad bytes in and is 31 long: its
            // name, its value and its line end fall on the first chunk's
            // last byte in turn.
            for pad in CHUNK as usize - 185..CHUNK as usize - 145 {
                let line = format!("X-Pad: {}", "p".repeat(pad));
                let m = register(&format!("{line}\r\nCall-ID: across-{pad}@192.0.2.1"));
                assert_eq!(m.windows(7).position(|w| w == b"Call-ID"), Some(151 + pad));
                let want = CallSteering::index_of(format!("across-{pad}@192.0.2.1").as_bytes(), 4);
                assert_eq!(s.pick(&m).unwrap(), Some(want), "pad {pad}");
            }
        }
    }

    #[test]
    fn a_call_id_past_the_scanned_bytes_goes_by_the_senders_hash() {
        for s in loaded(4) {
            let pad = format!("X-Pad: {}", "p".repeat(SCANNED as usize));
            let late = register(&format!("{pad}\r\nCall-ID: late"));
            assert_eq!(s.pick(&late).unwrap(), None);
            assert!(s.time(&register("Call-ID: a"), 1000).unwrap() > Duration::ZERO);
        }
    }

    /// What the program is meant to do, written plainly: the first
    /// header line named `Call-ID` or `i` (any case; blanks before the
    /// colon and after it) with a value, within the bytes scanned.
    fn reference(d: &[u8], sockets: u32) -> Option<u32> {
        let d = &d[..d.len().min(SCANNED as usize)];
        let blank = |b: &u8| *b == b' ' || *b == b'\t';
        for line in d.split(|&b| b == b'\n').skip(1) {
            if line.first() == Some(&b'\r') {
                return None;
            }
            let name_end = line.iter().position(|b| blank(b) || *b == b':');
            let Some(name_end) = name_end else { continue };
            let name = &line[..name_end];
            if !name.eq_ignore_ascii_case(b"call-id") && !name.eq_ignore_ascii_case(b"i") {
                continue;
            }
            let rest = &line[name_end..];
            let Some(colon) = rest.iter().position(|b| !blank(b)) else {
                continue;
            };
            if rest[colon] != b':' {
                continue;
            }
            let value = &rest[colon + 1..];
            let start = value.iter().position(|b| !blank(b)).unwrap_or(value.len());
            let value = &value[start..];
            let end = value
                .iter()
                .position(|b| blank(b) || *b == b'\r')
                .unwrap_or(value.len());
            if end > 0 {
                return Some(CallSteering::index_of(&value[..end], sockets));
            }
        }
        None
    }

    #[test]
    fn the_program_agrees_with_a_plain_reading_on_generated_messages() {
        for s in loaded(3) {
            let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
            let mut next = |n: usize| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed % n as u64) as usize
            };
            let names = [
                "Via",
                "From",
                "To",
                "CSeq",
                "Contact",
                "Call-Info",
                "X-Call-ID",
                "Identity",
                "i",
                "I",
                "call-id",
                "CALL-ID",
                "Call-Id",
                "c",
                "Ca",
                "Call-IDs",
                "Content-Length",
            ];
            let blanks = ["", "", " ", "\t", "  "];
            let chars = b"abcXYZ0123456789@.-_";
            let (mut found, mut missed) = (0, 0);
            for _ in 0..600 {
                let mut m = String::from("OPTIONS sip:x SIP/2.0\r\n");
                for _ in 0..next(24) {
                    let name = names[next(names.len())];
                    let value: String = (0..next(70))
                        .map(|_| chars[next(chars.len())] as char)
                        .collect();
                    let (b1, b2) = (blanks[next(blanks.len())], blanks[next(blanks.len())]);
                    m.push_str(&format!("{name}{b1}:{b2}{value}\r\n"));
                }
                m.push_str("\r\nCall-ID: in-the-body\r\n");
                let want = reference(m.as_bytes(), 3);
                assert_eq!(s.pick(m.as_bytes()).unwrap(), want, "{m}");
                if want.is_some() {
                    found += 1;
                } else {
                    missed += 1;
                }
            }
            assert!(
                found > 50 && missed > 50,
                "{found} with a Call-ID, {missed} without"
            );
        }
    }

    /// A socket of a SO_REUSEPORT group on `port` of 127.0.0.1 (0: a
    /// port of the kernel's choice).
    fn group_member(port: u16) -> UdpSocket {
        use std::os::fd::FromRawFd;
        // SAFETY: plain socket calls on a descriptor made here; the
        // address is a valid `sockaddr_in` of the length passed.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
            assert!(fd >= 0, "socket");
            crate::sys::set_int_option(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1).unwrap();
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_port = port.to_be();
            addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let r = libc::bind(fd, (&raw const addr).cast(), len);
            assert_eq!(r, 0, "bind: {}", io::Error::last_os_error());
            UdpSocket::from_raw_fd(fd)
        }
    }

    /// Attached to a real group, the program delivers each call's
    /// datagrams to the socket its Call-ID hashes to, and one without a
    /// Call-ID to some socket of the group.
    #[test]
    fn the_group_delivers_each_call_to_the_socket_it_hashes_to() {
        for s in loaded(3) {
            let first = group_member(0);
            let port = first.local_addr().unwrap().port();
            let group = [first, group_member(port), group_member(port)];
            s.attach(&group[0]).unwrap();
            for g in &group {
                g.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            }
            let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
            let mut buf = [0u8; 2048];
            for i in 0..24 {
                let call_id = format!("call-{i}@192.0.2.1");
                let m = register(&format!("Call-ID: {call_id}"));
                peer.send_to(&m, ("127.0.0.1", port)).unwrap();
                let want = CallSteering::index_of(call_id.as_bytes(), 3) as usize;
                let n = group[want].recv(&mut buf).unwrap_or_else(|e| {
                    panic!("{:?}: {call_id} not on socket {want}: {e}", s.bound())
                });
                assert_eq!(&buf[..n], &m[..]);
            }
            peer.send_to(b"OPTIONS sip:x SIP/2.0\r\n\r\n", ("127.0.0.1", port))
                .unwrap();
            let mut fds: Vec<libc::pollfd> = group
                .iter()
                .map(|g| libc::pollfd {
                    fd: g.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            // SAFETY: `fds` is a valid array of its length.
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 5000) };
            let landed = fds.iter().filter(|p| p.revents & libc::POLLIN != 0);
            assert_eq!((ready, landed.count()), (1, 1), "{:?}", s.bound());
        }
    }
}
