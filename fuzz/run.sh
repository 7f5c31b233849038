#!/usr/bin/env bash
# Runs one fuzz target for a bounded time: fuzz/run.sh TARGET SECONDS
# Needs a nightly toolchain and cargo-fuzz (cargo install cargo-fuzz).
set -euo pipefail
cd "$(dirname "$0")"
target=${1:?target: one of $(ls fuzz_targets | sed 's/\.rs$//' | tr '\n' ' ')}
secs=${2:-600}
mkdir -p "corpus/$target"
# Seeds (the corpus directory itself is not committed).
case "$target" in
    message|framing)
        cp ../crates/sip-core/testdata/rfc4475/*/*.sip ../crates/sip-core/testdata/bench/*.sip "corpus/$target/" ;;
    uri)
        printf 'sip:alice:pw@[2001:db8::1]:5061;transport=tcp;lr?subject=x&y=z' > corpus/uri/seed-sip
        printf 'tel:+1-201-555-0123;phone-context=example.com' > corpus/uri/seed-tel ;;
    digest_header)
        printf 'Digest username="bob", realm="biloxi.example.com", nonce="dcd98b", uri="sip:bob@biloxi.example.com", qop=auth, nc=00000001, cnonce="0a4f113b", response="6629fae49393a05397450978507c4ef1", algorithm=SHA-256' > corpus/digest_header/seed-credentials
        printf 'Digest realm="atlanta.example.com", qop="auth,auth-int", nonce="ea9c8e88df84f1cec4341ae6cbe5a359", opaque="", stale=TRUE, algorithm=MD5' > corpus/digest_header/seed-challenge ;;
    server_core)
        # One message each, to every kind of server (the first byte picks).
        for f in ../crates/sip-core/testdata/rfc4475/valid/*.sip ../crates/sip-core/testdata/bench/*.sip; do
            for pick in 0 1 2 3; do
                { printf "\\$(printf %o "$pick")"; cat "$f"; } > "corpus/$target/$(basename "$f").$pick"
            done
        done ;;
    dns_answer)
        # Answers to the question the property asks (_sip._udp.sip.test),
        # after its two pick bytes: kind (0 A, 2 SRV) and ID (9).
        python3 - "corpus/$target" <<'PY'
import struct, sys
q = b"".join(bytes([len(l)]) + l.encode() for l in "_sip._udp.sip.test".split(".")) + b"\0"
def answer(kind, records, extra=b""):
    head = struct.pack(">HHHHHH", 9, 0x8580, 1, len(records), 0, 1 if extra else 0)
    body = b"".join(b"\xc0\x0c" + struct.pack(">HHIH", t, 1, 3600, len(d)) + d for t, d in records)
    return head + q + struct.pack(">HH", kind, 1) + body + extra
target = b"\x02px\xc0\x16"
srv = struct.pack(">HHH", 10, 60, 5060) + target
glue = target + struct.pack(">HHIH", 1, 1, 60, 4) + bytes([127, 0, 0, 1])
seeds = {"a": b"\0\x09" + answer(1, [(1, bytes([192, 0, 2, 1]))]),
         "srv": b"\x02\x09" + answer(33, [(33, srv)], glue),
         "cname": b"\0\x09" + answer(1, [(5, b"\x05other\xc0\x16")])}
for name, data in seeds.items():
    open(f"{sys.argv[1]}/seed-{name}", "wb").write(data)
PY
        ;;
    xdp_frame)
        # A REGISTER in an Ethernet frame as the AF_XDP path takes it: IPv4
        # (header checksum right), UDP without a checksum, and with one.
        python3 - "corpus/$target" ../crates/sip-core/testdata/bench/register.sip <<'PY'
import struct, sys
payload = open(sys.argv[2], "rb").read()
def fold(s):
    while s > 0xffff:
        s = (s & 0xffff) + (s >> 16)
    return s
def total(b):
    b = b + b"\0" * (len(b) % 2)
    return sum(struct.unpack(f">{len(b) // 2}H", b))
src, dst = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 28 + len(payload), 7, 0x4000, 64, 17, 0, src, dst)
ip = ip[:10] + struct.pack(">H", ~fold(total(ip)) & 0xffff) + ip[12:]
eth = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0])
udp = struct.pack(">HHHH", 40000, 5060, 8 + len(payload), 0) + payload
open(f"{sys.argv[1]}/seed-unsummed", "wb").write(eth + ip + udp)
pseudo = src + dst + struct.pack(">BBH", 0, 17, len(udp))
c = ~fold(total(pseudo + udp)) & 0xffff or 0xffff
udp = udp[:6] + struct.pack(">H", c) + udp[8:]
open(f"{sys.argv[1]}/seed-summed", "wb").write(eth + ip + udp)
PY
        ;;
    sdp)
        printf 'v=0\r\no=- 1 2 IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\nm=audio 5004 RTP/SAVP 8 101\r\na=rtpmap:101 telephone-event/8000\r\na=crypto:2 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR|2^20|1:4 KDR=1 WSH=64\r\nm=video 5006 RTP/AVP 96\r\n' > corpus/sdp/seed-savp
        printf 'v=0\nc=IN IP6 2001:db8::1\nm=audio 7078/2 RTP/AVP 0 8\n' > corpus/sdp/seed-avp ;;
    ua_agent)
        # Dialogues with the phone's core; %B, %c, %t… quote its own
        # branches, Call-IDs and tags (see ua::fuzzing::agent).
        cp ../crates/ua/testdata/fuzz-agent/*.bin "corpus/$target/" ;;
    media_packets)
        # An RTP packet with a CSRC, an extension and padding; an SR with
        # a report block, SDES CNAME and BYE.
        python3 - "corpus/$target" <<'PY'
import struct, sys
rtp = bytes([0xb1, 0x80]) + struct.pack(">HII", 9, 160, 3) + struct.pack(">I", 4)
rtp += struct.pack(">HH", 0xbede, 1) + b"\x10\xff\0\0" + b"\xd5" * 160 + b"\0\0\0\4"
sr = struct.pack(">BBHI", 0x81, 200, 12, 1) + struct.pack(">QIII", 1 << 40, 160, 50, 8000)
sr += struct.pack(">IIIIII", 7, (3 << 24) | 5, 70000, 12, 0xdeadbeef, 655)
sdes = struct.pack(">BBHI", 0x81, 202, 3, 1) + b"\x01\x03a@b\0\0\0"
bye = struct.pack(">BBHI", 0x81, 203, 1, 1)
open(f"{sys.argv[1]}/seed-rtp", "wb").write(rtp)
open(f"{sys.argv[1]}/seed-rtcp", "wb").write(sr + sdes + bye)
PY
        ;;
esac
cp ../crates/sip-core/testdata/fuzz-regressions/* "corpus/$target/"
exec cargo +nightly fuzz run "$target" "corpus/$target" -- -max_total_time="$secs" -max_len=4096
