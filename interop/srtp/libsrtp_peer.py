#!/usr/bin/env python3
"""libsrtp (through pylibsrtp, which bundles it) as the other side of the
SRTP differential tests.

    libsrtp_peer.py protect|unprotect PROFILE KEY_HEX < frames > results

Input frames: 4-byte big-endian length, then an RTP (protect) or SRTP
(unprotect) packet. Output: per frame one status byte (0 ok, 1 refused),
a 4-byte length and the resulting packet (empty when refused), in order.
PROFILE is AES_CM_128_HMAC_SHA1_80 or AES_CM_128_HMAC_SHA1_32; KEY_HEX is
the master key followed by the master salt.
"""
import struct
import sys

import pylibsrtp

PROFILES = {
    "AES_CM_128_HMAC_SHA1_80": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_80,
    "AES_CM_128_HMAC_SHA1_32": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_32,
}


def main() -> int:
    mode, profile, key_hex = sys.argv[1:4]
    direction = (
        pylibsrtp.Policy.SSRC_ANY_OUTBOUND if mode == "protect" else pylibsrtp.Policy.SSRC_ANY_INBOUND
    )
    policy = pylibsrtp.Policy(key=bytes.fromhex(key_hex), ssrc_type=direction, srtp_profile=PROFILES[profile])
    session = pylibsrtp.Session(policy)
    op = session.protect if mode == "protect" else session.unprotect
    data = sys.stdin.buffer.read()
    out = sys.stdout.buffer
    at = 0
    while at < len(data):
        (n,) = struct.unpack_from(">I", data, at)
        packet = data[at + 4 : at + 4 + n]
        at += 4 + n
        try:
            result = op(packet)
            out.write(b"\x00" + struct.pack(">I", len(result)) + result)
        except pylibsrtp.Error:
            out.write(b"\x01" + struct.pack(">I", 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
