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
//! Loading needs Linux 6.9 (`may_goto`) and `CAP_BPF` (or root) where
//! unprivileged eBPF is off, as on Debian; the caller falls back when
//! [`CallSteering::load`] fails.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use crate::ebpf::*;

const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;
const BPF_PROG_TEST_RUN: i64 = 10;

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

/// The steering program, loaded for a group of `sockets`.
#[derive(Debug)]
pub struct CallSteering {
    prog: OwnedFd,
    sockets: u32,
}

impl CallSteering {
    /// Loads the program for a group of `sockets` (at least 1).
    pub fn load(sockets: u32) -> io::Result<Self> {
        let sockets = sockets.max(1);
        let prog = load(
            BPF_PROG_TYPE_SOCKET_FILTER,
            0,
            &program(sockets),
            "Call-ID steering",
        )?;
        Ok(Self { prog, sockets })
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
        let mut attr = Attr::new()
            .u32(0, self.prog.as_raw_fd() as u32)
            .u32(8, frame.len() as u32)
            .u64(16, frame.as_ptr() as u64)
            .u32(32, repeat);
        attr.call(BPF_PROG_TEST_RUN)?;
        Ok((attr.read_u32(4), attr.read_u32(36)))
    }
}

/// A jump target in [`Asm`].
#[derive(Clone, Copy)]
struct Label(usize);

/// Instructions with forward and backward jumps to labels, resolved at
/// the end.
#[derive(Default)]
struct Asm {
    code: Vec<Insn>,
    labels: Vec<Option<usize>>,
    jumps: Vec<(usize, Label)>,
}

impl Asm {
    fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }
    fn bind(&mut self, l: Label) {
        self.labels[l.0] = Some(self.code.len());
    }
    fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.code.push(Insn::new(code, dst, src, off, imm));
    }
    /// `if dst <code> imm (or src) goto to`; `JA` jumps always.
    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: Label) {
        self.jumps.push((self.code.len(), to));
        self.op(code, dst, src, 0, imm);
    }
    /// `dst = v` (64 bits: two instructions).
    fn ld_dw(&mut self, dst: u8, v: i64) {
        self.op(LD_DW, dst, 0, 0, v as i32);
        self.op(0, 0, 0, 0, (v >> 32) as i32);
    }
    /// `state = s; goto to`.
    fn set_and_go(&mut self, s: i32, to: Label) {
        self.op(MOV_K, STATE, 0, 0, s);
        self.jump(JA, 0, 0, 0, to);
    }
    fn finish(mut self) -> Vec<Insn> {
        for (at, to) in self.jumps {
            let target = self.labels[to.0].expect("every label bound");
            self.code[at].off = (target as i64 - at as i64 - 1) as i16;
        }
        self.code
    }
}

// Registers: r0 the byte read, r1 and r2 scratch, r6 the context, r7
// the position in the chunk, r8 the state, r9 the chunk's length. On the
// stack: the hash, the chunk's offset in the datagram, the chunk.
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
/// Bytes copied out of the datagram at a time (all the stack has left).
const CHUNK: i32 = 496;
const CHUNK_AT: i16 = BASE_AT - CHUNK as i16;
const BPF_FUNC_SKB_LOAD_BYTES: i32 = 26;

// States: in a line; at a line's first byte; `NAME + k`: k bytes of
// "call-id" matched; after the name; before the value; in the value.
const SCAN: i32 = 0;
const LINE: i32 = 1;
const NAME: i32 = 10;
const AFTER_NAME: i32 = 20;
const BEFORE_VALUE: i32 = 21;
const VALUE: i32 = 22;
const LONG_NAME: &[u8] = b"call-id";

/// In a line's middle (`SCAN`), at a multiple of eight with eight bytes
/// of the chunk left: when none of them is a line
/// feed, skips them and goes on at `top`; else, and in other states, on
/// at `byte`. A word has a zero byte where it matched `'\n'` in every
/// byte, which `(v - 0x01…01) & !v & 0x80…80` tells, exactly, without
/// a branch per byte.
fn skip_word(a: &mut Asm, byte: Label, top: Label) {
    const WORD: i32 = 8;
    a.jump(JNE_K, STATE, 0, SCAN, byte);
    // The constant bound is the verifier's (the read stays in the
    // chunk); the length's is the datagram's.
    a.jump(JGT_K, POS, 0, CHUNK - WORD, byte);
    a.op(MOV_X, 2, POS, 0, 0);
    a.op(ADD_K, 2, 0, 0, WORD);
    a.jump(JGT_X, 2, LEN, 0, byte);
    // Stack reads are aligned: words only where the position is a
    // multiple of eight, its address built from the rounded copy so
    // that the verifier sees it aligned too.
    a.op(MOV_X, 2, POS, 0, 0);
    a.op(AND_K, 2, 0, 0, WORD - 1);
    a.jump(JNE_K, 2, 0, 0, byte);
    a.op(MOV_X, 2, POS, 0, 0);
    a.op(AND_K, 2, 0, 0, -WORD);
    a.op(MOV_X, 3, FP, 0, 0);
    a.op(ADD_X, 3, 2, 0, 0);
    a.op(LDX_DW, 3, 3, CHUNK_AT, 0);
    a.ld_dw(4, 0x0a0a_0a0a_0a0a_0a0a);
    a.op(XOR_X, 3, 4, 0, 0);
    a.op(MOV_X, 4, 3, 0, 0);
    a.op(XOR_K, 4, 0, 0, -1);
    a.ld_dw(5, 0x0101_0101_0101_0101);
    a.op(SUB_X, 3, 5, 0, 0);
    a.op(AND_X, 3, 4, 0, 0);
    a.ld_dw(5, 0x8080_8080_8080_8080_u64 as i64);
    a.op(AND_X, 3, 5, 0, 0);
    a.jump(JNE_K, 3, 0, 0, byte);
    a.op(ADD_K, POS, 0, 0, WORD);
    a.jump(JA, 0, 0, 0, top);
}

/// The program for a group of `sockets`: the datagram copied to the
/// stack a chunk at a time (`bpf_skb_load_bytes`, one call a chunk) and
/// read there a byte at a time. The loops' turns are bounded by
/// `may_goto` (Linux 6.9), with the position kept a range, not a number,
/// so that the verifier's states converge at a loop's head instead of
/// one walk per byte.
fn program(sockets: u32) -> Vec<Insn> {
    let mut a = Asm::default();
    let (chunk, top, line, first, scan) = (a.label(), a.label(), a.label(), a.label(), a.label());
    let (value, mix, next_chunk, end, found) =
        (a.label(), a.label(), a.label(), a.label(), a.label());
    let (none, before_value) = (a.label(), a.label());

    a.op(MOV_X, CTX, 1, 0, 0);
    a.op(MOV_K, STATE, 0, 0, SCAN);
    a.op(ST_W, FP, 0, HASH_AT, FNV_BASIS as i32);
    a.op(ST_W, FP, 0, BASE_AT, 0);

    // A chunk: LEN = min(len - base, CHUNK) bytes from base.
    a.bind(chunk);
    a.jump(MAY_GOTO, 0, 0, 0, end);
    a.op(LDX_W, TMP2, FP, BASE_AT, 0);
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
    // The position starts at 0, written as the datagram's length less
    // itself (two loads the verifier cannot tell equal).
    a.op(LDX_W, POS, CTX, 0, 0);
    a.op(LDX_W, TMP, CTX, 0, 0);
    a.op(SUB_X, POS, TMP, 0, 0);

    // One byte a turn, or eight in a line's middle without its end.
    a.bind(top);
    a.jump(MAY_GOTO, 0, 0, 0, end);
    a.jump(JGE_X, POS, LEN, 0, next_chunk);
    a.op(MOV_X, TMP, FP, 0, 0);
    a.op(ADD_X, TMP, POS, 0, 0);
    let byte = a.label();
    skip_word(&mut a, byte, top);
    a.bind(byte);
    a.op(LDX_B, BYTE, TMP, CHUNK_AT, 0);
    a.op(ADD_K, POS, 0, 0, 1);
    a.jump(JEQ_K, STATE, 0, VALUE, value);
    a.jump(JEQ_K, BYTE, 0, i32::from(b'\n'), line);
    a.jump(JEQ_K, STATE, 0, SCAN, top);
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
        a.set_and_go(after, top);
        a.bind(next);
    }
    a.jump(JEQ_K, STATE, 0, BEFORE_VALUE, before_value);
    // After the name: blanks, then the colon.
    a.jump(JEQ_K, BYTE, 0, i32::from(b' '), top);
    a.jump(JEQ_K, BYTE, 0, i32::from(b'\t'), top);
    a.jump(JNE_K, BYTE, 0, i32::from(b':'), scan);
    a.set_and_go(BEFORE_VALUE, top);

    a.bind(before_value);
    a.jump(JEQ_K, BYTE, 0, i32::from(b' '), top);
    a.jump(JEQ_K, BYTE, 0, i32::from(b'\t'), top);
    a.jump(JEQ_K, BYTE, 0, i32::from(b'\r'), scan);
    a.op(MOV_K, STATE, 0, 0, VALUE);
    a.jump(JA, 0, 0, 0, mix);

    // A line's first byte: the blank line ends the header section.
    a.bind(first);
    a.jump(JEQ_K, BYTE, 0, i32::from(b'\r'), none);
    a.op(MOV_X, TMP, BYTE, 0, 0);
    a.op(OR_K, TMP, 0, 0, 0x20);
    let long = a.label();
    a.jump(JEQ_K, TMP, 0, i32::from(b'c'), long);
    a.jump(JNE_K, TMP, 0, i32::from(b'i'), scan);
    a.set_and_go(AFTER_NAME, top);
    a.bind(long);
    a.set_and_go(NAME + 1, top);

    a.bind(line);
    a.set_and_go(LINE, top);
    a.bind(scan);
    a.set_and_go(SCAN, top);

    // The value, up to a blank or the line's end.
    a.bind(value);
    for stop in [b'\r', b'\n', b' ', b'\t'] {
        a.jump(JEQ_K, BYTE, 0, i32::from(stop), found);
    }
    a.bind(mix);
    a.op(LDX_W, TMP, FP, HASH_AT, 0);
    a.op(XOR32_X, TMP, BYTE, 0, 0);
    a.op(MUL32_K, TMP, 0, 0, FNV_PRIME as i32);
    a.op(STX_W, FP, TMP, HASH_AT, 0);
    a.jump(JA, 0, 0, 0, top);

    a.bind(next_chunk);
    a.op(LDX_W, TMP, FP, BASE_AT, 0);
    a.op(ADD_K, TMP, 0, 0, CHUNK);
    a.op(STX_W, FP, TMP, BASE_AT, 0);
    a.jump(JA, 0, 0, 0, chunk);

    // The datagram (or the bytes scanned) ended.
    a.bind(end);
    a.jump(JEQ_K, STATE, 0, VALUE, found);
    a.bind(none);
    a.op(MOV_K, 0, 0, 0, NOT_FOUND);
    a.op(EXIT, 0, 0, 0, 0);
    a.bind(found);
    a.op(LDX_W, 0, FP, HASH_AT, 0);
    a.op(MOD32_K, 0, 0, 0, sockets as i32);
    a.op(EXIT, 0, 0, 0, 0);
    a.finish()
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

    /// The kernel's verifier and the program itself: these need CAP_BPF
    /// (root here and in CI); elsewhere they say so and pass nothing.
    fn loaded(sockets: u32) -> CallSteering {
        CallSteering::load(sockets).expect("the verifier accepts the program (needs CAP_BPF)")
    }

    #[test]
    fn the_kernel_picks_the_socket_the_call_id_hashes_to() {
        let s = loaded(4);
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

    #[test]
    fn other_fields_and_the_body_are_not_taken_for_the_call_id() {
        let s = loaded(4);
        for line in [
            "Call-Info: <http://x>",
            "Identity: abc",
            "X-Call-ID: abc",
            "Call-ID:",
        ] {
            assert_eq!(s.pick(&register(line)).unwrap(), None, "{line}");
        }
        let body = b"MESSAGE sip:b@x SIP/2.0\r\nCSeq: 1 MESSAGE\r\n\r\nCall-ID: in-the-body\r\n";
        assert_eq!(s.pick(body).unwrap(), None);
        assert_eq!(s.pick(b"x").unwrap(), None);
        assert_eq!(s.pick(b"\n\n\ni:").unwrap(), None);
        // A value that runs to the datagram's end still counts.
        let want = CallSteering::index_of(b"the-datagram-ends", 4);
        assert_eq!(s.pick(b"X\ni:the-datagram-ends").unwrap(), Some(want));
    }

    #[test]
    fn a_call_id_across_the_chunks_is_read_whole() {
        let s = loaded(8);
        // The Call-ID line starts 151 + pad bytes in and is 31 long: its
        // name, its value and its line end fall on the first chunk's
        // last byte in turn.
        for pad in CHUNK as usize - 185..CHUNK as usize - 145 {
            let line = format!("X-Pad: {}", "p".repeat(pad));
            let m = register(&format!("{line}\r\nCall-ID: across-{pad}@192.0.2.1"));
            assert_eq!(m.windows(7).position(|w| w == b"Call-ID"), Some(151 + pad));
            let want = CallSteering::index_of(format!("across-{pad}@192.0.2.1").as_bytes(), 8);
            assert_eq!(s.pick(&m).unwrap(), Some(want), "pad {pad}");
        }
    }

    #[test]
    fn a_call_id_past_the_scanned_bytes_goes_by_the_senders_hash() {
        let s = loaded(2);
        let pad = format!("X-Pad: {}", "p".repeat(SCANNED as usize));
        let late = register(&format!("{pad}\r\nCall-ID: late"));
        assert_eq!(s.pick(&late).unwrap(), None);
        assert!(s.time(&register("Call-ID: a"), 1000).unwrap() > Duration::ZERO);
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
        let s = loaded(5);
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
            let want = reference(m.as_bytes(), 5);
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
