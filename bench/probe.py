#!/usr/bin/env python3
"""Probes a `sipsec serve` binary as an unauthenticated peer would, on
loopback only, and prints one line per probe: what the server did.

    python3 bench/probe.py target/release/sipsec [probe ...]

Run it against two builds to compare them with the same command. Each
probe starts its own server on free ports in a scratch directory and
stops it; every loop is bounded in count and time.
"""

import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

BIN = None


def free_port():
    """A port free for UDP and TCP both (the server listens on both)."""
    while True:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.1", 0))
        port = u.getsockname()[1]
        t = socket.socket()
        try:
            t.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            t.close()
            u.close()


class Server:
    def __init__(self, args, data=None, config=None, port=None):
        self.dir = data or tempfile.mkdtemp(prefix="sipsec-probe-")
        self.port = port or free_port()
        cmd = [BIN, "serve", "--udp", f"127.0.0.1:{self.port}", "--no-http",
               "--workers", "1", "--data-dir", os.path.join(self.dir, "data")]
        if config:
            path = os.path.join(self.dir, "probe.toml")
            with open(path, "w") as f:
                f.write(config)
            cmd += ["--config", path]
        self.proc = subprocess.Popen(cmd + args, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=self.dir)
        self.proc.stdout.readline()  # the banner: it listens
        self.addr = ("127.0.0.1", self.port)

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


class Ua:
    def __init__(self, server):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.bind(("127.0.0.1", 0))
        self.s.settimeout(3)
        self.server = server
        self.n = 0

    @property
    def me(self):
        return "%s:%d" % self.s.getsockname()

    def send(self, text):
        self.s.sendto(text.encode(), self.server)

    def final(self):
        while True:
            try:
                data, _ = self.s.recvfrom(65535)
            except socket.timeout:
                return None
            text = data.decode(errors="replace")
            if not text.startswith("SIP/2.0 100"):
                return text

    def ask(self, text):
        self.send(text)
        return self.final()

    def register(self, user, call_id, cseq=1, contacts="", extra=""):
        srv = "%s:%d" % self.server
        self.n += 1
        return (f"REGISTER sip:{srv} SIP/2.0\r\nVia: SIP/2.0/UDP {self.me};rport;branch=z9hG4bKp{self.n}x{call_id}\r\n"
                f"Max-Forwards: 70\r\nFrom: <sip:{user}@{srv}>;tag=t\r\nTo: <sip:{user}@{srv}>\r\n"
                f"Call-ID: {call_id}\r\nCSeq: {cseq} REGISTER\r\n{contacts}{extra}Content-Length: 0\r\n\r\n")

    def sync(self):
        """OPTIONS answered: what this socket sent before was handled."""
        srv = "%s:%d" % self.server
        self.n += 1
        return self.ask(f"OPTIONS sip:{srv} SIP/2.0\r\nVia: SIP/2.0/UDP {self.me};rport;branch=z9hG4bKs{self.n}\r\n"
                        f"Max-Forwards: 70\r\nFrom: <sip:p@{srv}>;tag=s\r\nTo: <sip:{srv}>\r\nCall-ID: sync{self.n}\r\n"
                        "CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n")


def code(resp):
    return int(resp[8:11]) if resp else 0


def digest(challenge, user, password, method, uri, nc):
    realm = re.search(r'realm="([^"]*)"', challenge).group(1)
    nonce = re.search(r'nonce="([^"]*)"', challenge).group(1)
    alg = re.search(r"algorithm=([A-Za-z0-9-]+)", challenge).group(1)
    h = {"MD5": hashlib.md5, "SHA-256": hashlib.sha256}[alg.upper()]
    ha1 = h(f"{user}:{realm}:{password}".encode()).hexdigest()
    ha2 = h(f"{method}:{uri}".encode()).hexdigest()
    ncs = "%08x" % nc
    resp = h(f"{ha1}:{nonce}:{ncs}:c0ffee:auth:{ha2}".encode()).hexdigest()
    return (f'Authorization: Digest username="{user}", realm="{realm}", nonce="{nonce}", uri="{uri}", '
            f'response="{resp}", algorithm={alg}, qop=auth, nc={ncs}, cnonce="c0ffee"\r\n')


def challenge_of(resp):
    m = re.search(r"^WWW-Authenticate: (.*)$", resp, re.M)
    return m.group(1).strip() if m else ""


def users_file(d):
    path = os.path.join(d, "users.tsv")
    for user in ("alice", "bob"):
        subprocess.run([BIN, "users", "add", user, "--password-stdin", "--file", path],
                       input=f"pw-{user}-long\n".encode(), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return path


def probe_forged_response():
    """1. A forged response aimed at a TCP and a UDP service."""
    for mode in (["--mode", "registrar"], ["--mode", "proxy"], ["--mode", "proxy", "--stateful"]):
        srv = Server(mode)
        trap = socket.socket()
        trap.bind(("127.0.0.1", 0))
        trap.listen(8)
        trap.settimeout(1)
        utrap = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        utrap.bind(("127.0.0.1", 0))
        utrap.settimeout(1)
        ua = Ua(srv.addr)
        srvs = "127.0.0.1:%d" % srv.port
        for second in (f"SIP/2.0/TCP 127.0.0.1:{trap.getsockname()[1]}",
                       f"SIP/2.0/UDP 127.0.0.1:{utrap.getsockname()[1]}"):
            body = "SET pwned 1\r\n"
            ua.send(f"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP {srvs};branch=z9hG4bKforged\r\nVia: {second};branch=z9hG4bKv\r\n"
                    f"From: <sip:a@x>;tag=1\r\nTo: <sip:b@x>;tag=2\r\nCall-ID: f\r\nCSeq: 1 INVITE\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n{body}")
        ua.sync()
        tcp_bytes = 0
        try:
            c, _ = trap.accept()
            c.settimeout(1)
            tcp_bytes = len(c.recv(65535))
        except socket.timeout:
            pass
        try:
            udp_bytes = len(utrap.recvfrom(65535)[0])
        except socket.timeout:
            udp_bytes = 0
        print(f"forged-response {' '.join(mode)}: bytes written to a TCP service {tcp_bytes}, to a UDP service {udp_bytes}")
        srv.stop()


def probe_replay_after_restart():
    """2. A captured login (nc=1) replayed after a restart."""
    d = tempfile.mkdtemp(prefix="sipsec-probe-")
    users = users_file(d)
    srv = Server(["--auth", "--users", users], data=d)
    ua = Ua(srv.addr)
    uri = "sip:127.0.0.1:%d" % srv.port
    r = ua.ask(ua.register("alice", "cap", 1, "Contact: <sip:alice@192.0.2.10>\r\n"))
    captured = digest(challenge_of(r), "alice", "pw-alice-long", "REGISTER", uri, 1)
    first = code(ua.ask(ua.register("alice", "cap", 2, "Contact: <sip:alice@192.0.2.10>\r\n", captured)))
    srv.stop()
    srv = Server(["--auth", "--users", users], data=d, port=srv.port)
    att = Ua(srv.addr)
    r = att.ask(att.register("alice", "mallory", 7, "Contact: <sip:mallory@203.0.113.66>\r\n", captured))
    stale = "stale=true" in (r or "")
    print(f"replay-after-restart: login {first}; the capture replayed after a restart: {code(r)}{' stale' if stale else ''}")
    srv.stop()


def probe_nonce_flood():
    """3. One account's fresh logins against another user's."""
    d = tempfile.mkdtemp(prefix="sipsec-probe-")
    users = users_file(d)
    srv = Server(["--auth", "--users", users], data=d, config="[auth]\nmax_tracked_nonces = 1024\n")
    uri = "sip:127.0.0.1:%d" % srv.port

    def login(ua, user, i):
        r = ua.ask(ua.register(user, f"{user}{i}", 1, f"Contact: <sip:{user}@192.0.2.1>\r\n"))
        auth = digest(challenge_of(r), user, f"pw-{user}-long", "REGISTER", uri, 1)
        return code(ua.ask(ua.register(user, f"{user}{i}", 2, f"Contact: <sip:{user}@192.0.2.1>\r\n", auth)))

    a, b = Ua(srv.addr), Ua(srv.addr)
    flood = [login(a, "alice", i) for i in range(1500)]
    others = [login(b, "bob", i) for i in range(5)]
    print(f"nonce-flood (tracker of 1,024): alice's 1,500 logins: {flood.count(200)} taken; bob's 5 logins: {others.count(200)} taken")
    srv.stop()


def probe_registrar_bounds():
    """4. Unauthenticated AoRs with long contacts: memory and disk."""
    srv = Server([])
    ua = Ua(srv.addr)
    before = srv.rss_kib()
    codes = {}
    for i in range(3000):
        contact = "sip:" + "c" * 7900 + "@192.0.2.1"
        c = code(ua.ask(ua.register(f"u{i}", f"b{i}", 1, f"Contact: <{contact}>\r\n")))
        codes[c] = codes.get(c, 0) + 1
    rss = srv.rss_kib()
    data = os.path.join(srv.dir, "data")
    disk = sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data))
    print(f"registrar-bounds: 3,000 AoRs with 7.9 kB contacts: answers {codes}; memory +{(rss - before) // 1024} MiB, data dir {disk // (1 << 20)} MiB")
    srv.stop()


def probe_amplification():
    """5. A query for an AoR holding seven of the longest contacts taken."""
    srv = Server([])
    ua = Ua(srv.addr)
    for length in (7900, 480):
        taken = 0
        for i in range(7):
            contact = f"sip:{'c' * length}{i}@192.0.2.1"
            if code(ua.ask(ua.register(f"amp{length}", f"a{length}-{i}", 1, f"Contact: <{contact}>\r\n"))) == 200:
                taken += 1
        if taken:
            break
    query = ua.register(f"amp{length}", "query")
    ua.send(query)
    r = ua.final() or ""
    print(f"amplification: {taken} contacts of {length} bytes held; a {len(query)}-byte query answered with {len(r)} bytes ({len(r) / len(query):.1f}x)")
    srv.stop()


def probe_keepalive_flood():
    """6. CRLF pings on one connection, each waiting for its pong."""
    srv = Server([])
    c = socket.create_connection(srv.addr)
    c.settimeout(2)
    pongs = 0
    started = time.monotonic()
    for _ in range(20000):
        try:
            c.sendall(b"\r\n\r\n")
            if c.recv(2) != b"\r\n":
                break
            pongs += 1
        except OSError:
            break
    print(f"keepalive-flood: {pongs} of 20,000 CRLF pings answered in {time.monotonic() - started:.2f} s; connection {'closed' if pongs < 20000 else 'open'}")
    srv.stop()


def probe_connect_flood():
    """7. 3,000 connects from 127.0.0.1, then a phone from 127.0.0.2."""
    srv = Server([])
    held = []
    for _ in range(3000):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(srv.addr)
        except BlockingIOError:
            pass
        held.append(s)
    t0 = time.monotonic()
    p = socket.socket()
    p.bind(("127.0.0.2", 0))
    p.settimeout(30)
    p.connect(srv.addr)
    srvs = "127.0.0.1:%d" % srv.port
    me = "%s:%d" % p.getsockname()
    p.sendall((f"REGISTER sip:{srvs} SIP/2.0\r\nVia: SIP/2.0/TCP {me};branch=z9hG4bKcf\r\nFrom: <sip:ph@{srvs}>;tag=1\r\n"
               f"To: <sip:ph@{srvs}>\r\nCall-ID: cf\r\nCSeq: 1 REGISTER\r\nContact: <sip:ph@192.0.2.9>\r\nContent-Length: 0\r\n\r\n").encode())
    r = p.recv(65535).decode(errors="replace")
    print(f"connect-flood: a phone from another address answered {code(r)} {time.monotonic() - t0:.3f} s after a 3,000-connect flood")
    for s in held:
        s.close()
    srv.stop()


def probe_silent_connections():
    """8. 200 connections that never send a SIP message, 25 s later."""
    srv = Server([])
    conns = [socket.create_connection(srv.addr) for _ in range(200)]
    time.sleep(25)
    open_ = 0
    for c in conns:
        c.setblocking(False)
        try:
            open_ += 0 if c.recv(1) == b"" else 1
        except BlockingIOError:
            open_ += 1
        except OSError:
            pass
    print(f"silent-connections: {open_} of 200 silent connections still open after 25 s")
    srv.stop()


PROBES = {
    "forged-response": probe_forged_response,
    "replay-after-restart": probe_replay_after_restart,
    "nonce-flood": probe_nonce_flood,
    "registrar-bounds": probe_registrar_bounds,
    "amplification": probe_amplification,
    "keepalive-flood": probe_keepalive_flood,
    "connect-flood": probe_connect_flood,
    "silent-connections": probe_silent_connections,
}

if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    BIN = os.path.abspath(sys.argv[1])
    for name in sys.argv[2:] or PROBES:
        PROBES[name]()
