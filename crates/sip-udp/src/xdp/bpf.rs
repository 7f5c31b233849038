//! The eBPF side of AF_XDP, through `bpf(2)` alone (no libbpf, no
//! compiler): an XSKMAP of sockets by receive queue, and an XDP program,
//! assembled here, that steers IPv4 UDP datagrams for one port to the
//! queue's socket and passes everything else (ARP, ICMP, other ports,
//! fragments) to the kernel's stack. It is attached with a BPF link, so it
//! leaves the interface when the link's descriptor closes — with the
//! process, however it ends.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::ebpf::*;

const BPF_MAP_CREATE: i64 = 0;
const BPF_MAP_UPDATE_ELEM: i64 = 2;
const BPF_LINK_CREATE: i64 = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;

/// An XSKMAP with `entries` slots (receive queues).
pub(super) fn xsk_map(entries: u32) -> io::Result<OwnedFd> {
    Attr::new()
        .u32(0, BPF_MAP_TYPE_XSKMAP)
        .u32(4, 4)
        .u32(8, 4)
        .u32(12, entries)
        .call_fd(BPF_MAP_CREATE)
}

/// Puts socket `xsk` in slot `queue` of `map`.
pub(super) fn set_socket(map: &OwnedFd, queue: u32, xsk: RawFd) -> io::Result<()> {
    let key = queue;
    let value = xsk as u32;
    Attr::new()
        .u32(0, map.as_raw_fd() as u32)
        .u64(8, &key as *const u32 as u64)
        .u64(16, &value as *const u32 as u64)
        .call(BPF_MAP_UPDATE_ELEM)
        .map(drop)
}

/// A 16-bit field in network order as a little-endian load reads it.
const fn wire16(v: u16) -> i32 {
    v.swap_bytes() as i32
}

/// The program: for an Ethernet frame carrying an unfragmented IPv4 UDP
/// datagram (20-byte header) to `port` and to one of `addrs` (any
/// address when empty), `bpf_redirect_map(map, rx_queue_index,
/// XDP_PASS)`; for any other frame, `XDP_PASS`.
fn program(map: RawFd, port: u16, addrs: &[Ipv4Addr]) -> Vec<Insn> {
    let mut a = Asm::default();
    let (pass, accept) = (a.label(), a.label());
    a.op(LDX_W, 2, 1, 0, 0); // r2 = ctx->data
    a.op(LDX_W, 3, 1, 4, 0); // r3 = ctx->data_end
    a.op(MOV_X, 4, 2, 0, 0);
    a.op(ADD_K, 4, 0, 0, 42); // r4 = data + headers
    a.jump(JGT_X, 4, 3, 0, pass); // short frame
    a.op(LDX_H, 5, 2, 12, 0); // ethertype
    a.jump(JNE_K, 5, 0, wire16(0x0800), pass);
    a.op(LDX_B, 5, 2, 14, 0); // version and IHL
    a.jump(JNE_K, 5, 0, 0x45, pass);
    a.op(LDX_B, 5, 2, 23, 0); // protocol
    a.jump(JNE_K, 5, 0, 17, pass);
    a.op(LDX_H, 5, 2, 20, 0); // flags and fragment offset
    a.op(AND_K, 5, 0, 0, wire16(0x3fff));
    a.jump(JNE_K, 5, 0, 0, pass);
    a.op(LDX_H, 5, 2, 36, 0); // UDP destination port
    a.jump(JNE_K, 5, 0, wire16(port), pass);
    if !addrs.is_empty() {
        // The destination address, loaded little-endian as it lies.
        a.op(LDX_W, 5, 2, 30, 0);
        for ip in addrs {
            let want = u32::from_le_bytes(ip.octets()) as i32;
            a.jump(JEQ32_K, 5, 0, want, accept);
        }
        a.jump(JA, 0, 0, 0, pass);
    }
    a.bind(accept);
    a.op(LDX_W, 2, 1, 16, 0); // r2 = ctx->rx_queue_index
    a.op(LD_DW, 1, PSEUDO_MAP_FD, 0, map);
    a.op(0, 0, 0, 0, 0);
    a.op(MOV_K, 3, 0, 0, XDP_PASS); // no socket in the slot → pass
    a.op(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP);
    a.op(EXIT, 0, 0, 0, 0);
    a.bind(pass);
    a.ret(XDP_PASS);
    a.finish()
}

/// Loads the program for `map` and `port`; a refusal carries the
/// verifier's log.
pub(super) fn load(map: &OwnedFd, port: u16, addrs: &[Ipv4Addr]) -> io::Result<OwnedFd> {
    let program = program(map.as_raw_fd(), port, addrs);
    crate::ebpf::load(BPF_PROG_TYPE_XDP, BPF_XDP, &program, &[], "XDP")
}

/// Attaches `prog` to interface `ifindex` (the driver's XDP hook where it
/// has one, the generic one otherwise) until the returned link closes.
pub(super) fn attach(prog: &OwnedFd, ifindex: u32) -> io::Result<OwnedFd> {
    Attr::new()
        .u32(0, prog.as_raw_fd() as u32)
        .u32(4, ifindex)
        .u32(8, BPF_XDP)
        .call_fd(BPF_LINK_CREATE)
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("attaching XDP to interface {ifindex}: {e}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_test_jumps_to_the_pass_exit() {
        let p = program(7, 5060, &[]);
        let pass = p.len() - 2;
        assert_eq!(p[pass], Insn::new(MOV_K, 0, 0, 0, XDP_PASS));
        let jumps: Vec<_> = p
            .iter()
            .enumerate()
            .filter(|(_, i)| matches!(i.code, JGT_X | JNE_K))
            .map(|(at, i)| at as i64 + 1 + i64::from(i.off))
            .collect();
        assert_eq!(jumps.len(), 6);
        assert!(jumps.iter().all(|t| *t == pass as i64));
    }

    /// The program as the kernel runs it (`BPF_PROG_TEST_RUN`, receive
    /// queue 0, whose slot holds no socket): each frame passes to the
    /// stack, the one for the port too — never dropped (`XDP_ABORTED`),
    /// as `bpf_redirect_map` does with flags before Linux 5.13.
    #[test]
    fn a_queue_without_a_socket_passes_its_frames() {
        use crate::xdp::frame::{write_headers, Endpoints, HEADERS};
        let map = xsk_map(4).expect("an XSKMAP (needs CAP_BPF)");
        let prog = load(&map, 5060, &[Ipv4Addr::new(10, 0, 0, 2)]).expect("the XDP program loads");
        let frame = |dst: &str| {
            let ends = Endpoints {
                src_mac: [2, 0, 0, 0, 0, 1],
                dst_mac: [2, 0, 0, 0, 0, 2],
                src: "10.0.0.1:40000".parse().unwrap(),
                dst: dst.parse().unwrap(),
            };
            let payload = b"OPTIONS sip:x SIP/2.0\r\n\r\n";
            let mut f = vec![0; HEADERS + payload.len()];
            assert!(write_headers(&mut f, &ends, payload.len(), 1));
            f[HEADERS..].copy_from_slice(payload);
            f
        };
        for dst in ["10.0.0.2:5060", "10.0.0.2:5061", "10.0.0.3:5060"] {
            let (ret, _) = test_run(&prog, &frame(dst), 1).unwrap();
            assert_eq!(ret, XDP_PASS as u32, "a frame to {dst}");
        }
    }

    #[test]
    fn instructions_encode_as_the_kernel_reads_them() {
        // r1 = *(u32 *)(r2 + 16): code 0x61, dst 1, src 2, off 16.
        assert_eq!(
            Insn::new(LDX_W, 1, 2, 16, 0).bytes(),
            [0x61, 0x21, 16, 0, 0, 0, 0, 0]
        );
        let p = program(9, 5060, &[]);
        let map = p.iter().position(|i| i.code == LD_DW).unwrap();
        assert_eq!(p[map].bytes(), [0x18, 0x11, 0, 0, 9, 0, 0, 0]);
        // Port 5060 (0x13c4) in network order, loaded little-endian: 0xc413.
        assert!(p.iter().any(|i| i.code == JNE_K && i.imm == 0xc413));
    }

    #[test]
    fn addresses_are_tested_after_the_port() {
        let any = program(9, 5060, &[]);
        let addrs = [Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(192, 0, 2, 7)];
        let some = program(9, 5060, &addrs);
        // One load, one test per address, one jump to pass.
        assert_eq!(some.len(), any.len() + 4);
        let accept = some
            .iter()
            .position(|i| i.code == LDX_W && i.off == 16)
            .unwrap();
        let pass = some.len() - 2;
        for (at, i) in some.iter().enumerate() {
            let to = at as i64 + 1 + i64::from(i.off);
            match i.code {
                JEQ32_K => assert_eq!(to, accept as i64),
                JGT_X | JNE_K | JA => assert_eq!(to, pass as i64),
                _ => {}
            }
        }
        // 10.0.0.2 as its bytes lie, read little-endian: 0x0200000a.
        assert!(some
            .iter()
            .any(|i| i.code == JEQ32_K && i.imm == 0x0200_000a));
    }

    #[test]
    fn an_address_with_a_high_last_octet_is_compared_in_32_bits() {
        // 10.0.0.200 read little-endian is 0xc800000a: negative as an
        // i32 immediate, so only a 32-bit comparison matches it.
        let p = program(9, 5060, &[Ipv4Addr::new(10, 0, 0, 200)]);
        let test = p.iter().find(|i| i.imm == 0xc800_000a_u32 as i32).unwrap();
        assert_eq!(test.code, JEQ32_K);
    }
}
