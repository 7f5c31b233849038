#!/usr/bin/env python3
"""REGISTER refreshes over TCP connections that stay open, for callgrind.

`sipsec bench run --transport tcp` opens its connections for each run,
so a second run registers new contacts beside the first run's: its
profile mixes first registrations and two bindings per AoR into what
should be refreshes. This client opens CONNECTIONS connections once,
registers one contact on each, refreshes them WARM times in turn, and
then, between `callgrind_control -z` and `-d` on PID, COUNT times more:
every counted REGISTER refreshes a binding held on its own connection,
as a phone does. Each waits for its 200 (any other answer stops it).

    valgrind --tool=callgrind --dump-instr=yes --compress-pos=no \\
        --compress-strings=no sipsec serve --workers 1 --no-http \\
        --udp 127.0.0.1:5199 --tcp 127.0.0.1:5199 &
    bench/held_tcp.py --port 5199 --pid $!
    bench/footprint.py callgrind.out.PID.1 10000 --groups

Loopback only; bounded by its counts.
"""

import argparse
import socket
import subprocess
import sys
import time


def register(conn, port, user, seq):
    """Sends one REGISTER and reads its answer's head."""
    sock, buf = conn
    msg = (
        f"REGISTER sip:127.0.0.1 SIP/2.0\r\n"
        f"Via: SIP/2.0/TCP 127.0.0.1:{port};branch=z9hG4bK{user}x{seq}\r\n"
        f"Max-Forwards: 70\r\nFrom: <sip:user{user}@127.0.0.1>;tag=f{user}\r\n"
        f"To: <sip:user{user}@127.0.0.1>\r\nCall-ID: held{user}@127.0.0.1\r\n"
        f"CSeq: {seq} REGISTER\r\n"
        f"Contact: <sip:user{user}@127.0.0.1:{port};transport=tcp>\r\n"
        f"Expires: 3600\r\nContent-Length: 0\r\n\r\n"
    )
    sock.sendall(msg.encode())
    while b"\r\n\r\n" not in buf[0]:
        data = sock.recv(65536)
        if not data:
            sys.exit(f"connection {user} closed by the server")
        buf[0] += data
    head, _, rest = buf[0].partition(b"\r\n\r\n")
    if not head.startswith(b"SIP/2.0 200"):
        sys.exit("unexpected answer: " + head[:200].decode(errors="replace"))
    buf[0] = rest


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=5199)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--warm", type=int, default=12000, help="REGISTERs before counting")
    p.add_argument("--count", type=int, default=10000, help="REGISTERs counted")
    p.add_argument("--pid", type=int, help="callgrind's process: zeroed before, dumped after")
    a = p.parse_args()
    # The server under valgrind takes seconds to listen: wait for it.
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", a.port), timeout=5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                sys.exit(f"nothing listens on TCP 127.0.0.1:{a.port}")
            time.sleep(0.2)
    conns = []
    for _ in range(a.connections):
        s = socket.create_connection(("127.0.0.1", a.port), timeout=30)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns.append((s, [b""]))
    ports = [s.getsockname()[1] for s, _ in conns]

    def run(first, n):
        for k in range(first, first + n):
            i = k % a.connections
            register(conns[i], ports[i], i, 1 + k // a.connections)

    run(0, a.warm)
    if a.pid:
        subprocess.run(["callgrind_control", "-z", str(a.pid)], check=True, capture_output=True)
    run(a.warm, a.count)
    if a.pid:
        subprocess.run(["callgrind_control", "-d", str(a.pid)], check=True, capture_output=True)
    print(f"{a.count} refreshes counted over {a.connections} held connections")


if __name__ == "__main__":
    main()
