#!/usr/bin/env python3
"""crossbench adapter for Python: `cryptography` (OpenSSL) or PyCryptodome.

Speaks the line protocol of crossbench/protocol.md on stdin/stdout:
RSA-OAEP (SHA-256, MGF1-SHA-256) and RSA-PSS (SHA-256, 32-byte salt).
Usage: adapter.py --lib cryptography|pycryptodome
"""
import json
import os
import sys
import time


class Cryptography:
    name = "python-cryptography"

    def __init__(self):
        import cryptography
        from cryptography.hazmat.backends.openssl.backend import backend
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding, rsa

        self.version = "cryptography %s, %s" % (
            cryptography.__version__,
            backend.openssl_version_text(),
        )
        self._ser = serialization
        self._rsa = rsa
        self._oaep = padding.OAEP(
            mgf=padding.MGF1(algorithm=hashes.SHA256()),
            algorithm=hashes.SHA256(),
            label=None,
        )
        self._pss = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32)
        self._sha256 = hashes.SHA256()

    def load(self, pem):
        key = self._ser.load_pem_private_key(pem.encode(), password=None)
        return key, key.key_size

    def generate(self, bits):
        return self._rsa.generate_private_key(public_exponent=65537, key_size=bits)

    def encrypt(self, key, msg):
        return key.public_key().encrypt(msg, self._oaep)

    def encryptor(self, key):
        pub, oaep = key.public_key(), self._oaep
        return lambda m: pub.encrypt(m, oaep)

    def decryptor(self, key):
        oaep = self._oaep
        return lambda c: key.decrypt(c, oaep)

    def signer(self, key):
        pss, h = self._pss, self._sha256
        return lambda m: key.sign(m, pss, h)

    def verifier(self, key):
        pub, pss, h = key.public_key(), self._pss, self._sha256
        from cryptography.exceptions import InvalidSignature

        def verify(m, s):
            try:
                pub.verify(s, m, pss, h)
                return True
            except InvalidSignature:
                return False

        return verify


class PyCryptodome:
    name = "python-pycryptodome"

    def __init__(self):
        import Crypto
        from Crypto.Cipher import PKCS1_OAEP
        from Crypto.Hash import SHA256
        from Crypto.PublicKey import RSA
        from Crypto.Signature import pss

        self.version = "pycryptodome %s" % Crypto.__version__
        self._oaep, self._sha, self._rsa, self._pss = PKCS1_OAEP, SHA256, RSA, pss

    def load(self, pem):
        key = self._rsa.import_key(pem)
        return key, key.size_in_bits()

    def generate(self, bits):
        return self._rsa.generate(bits)

    def encrypt(self, key, msg):
        return self.encryptor(key)(msg)

    def encryptor(self, key):
        c = self._oaep.new(key.publickey(), hashAlgo=self._sha)
        return c.encrypt

    def decryptor(self, key):
        c = self._oaep.new(key, hashAlgo=self._sha)
        return c.decrypt

    def signer(self, key):
        s, sha = self._pss.new(key, salt_bytes=32), self._sha
        return lambda m: s.sign(sha.new(m))

    def verifier(self, key):
        v, sha = self._pss.new(key.publickey(), salt_bytes=32), self._sha

        def verify(m, s):
            try:
                v.verify(sha.new(m), s)
                return True
            except (ValueError, TypeError):
                return False

        return verify


def timed(fn, arg, iterations, reps):
    """Mean nanoseconds per call of fn(*arg), per repetition, after a warm-up."""
    out = []
    for rep in range(reps + 1):
        t0 = time.perf_counter_ns()
        for _ in range(iterations):
            fn(*arg)
        dt = time.perf_counter_ns() - t0
        if rep > 0:
            out.append(dt / iterations)
    return out


def prepare(lib, key, req):
    """The call of one bench cell and its arguments, made once."""
    what = req["what"]
    if what == "keygen":
        return lib.generate, (int(req["bits"]),)
    if key is None:
        raise KeyError("unknown key %r" % req.get("key"))
    msg = os.urandom(int(req.get("msg_len", 32)))
    if what == "encrypt":
        return lib.encryptor(key), (msg,)
    if what == "decrypt":
        return lib.decryptor(key), (lib.encrypt(key, msg),)
    if what == "sign":
        return lib.signer(key), (msg,)
    if what == "verify":
        verify = lib.verifier(key)

        def checked(m, s):
            if not verify(m, s):
                raise ValueError("verification failed")

        return checked, (msg, lib.signer(key)(msg))
    raise ValueError("unknown bench operation %r" % what)


def framework(lib_name, loads, req):
    """One cell under pytest-benchmark (bench_cell.py, in a child pytest):
    its own calibration, warm-up on, at least `reps` rounds in about
    reps × seconds."""
    import subprocess
    import tempfile

    job = dict(req, lib=lib_name)
    if req["what"] != "keygen":
        if req.get("key") not in loads:
            raise KeyError("unknown key %r" % req.get("key"))
        job["pem"] = loads[req["key"]]
    reps = max(2, int(req.get("reps", 5)))
    seconds = max(0.01, float(req.get("seconds", 1.0)))
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory(prefix="crossbench-pytest") as tmp:
        with open(os.path.join(tmp, "job.json"), "w") as f:
            json.dump(job, f)
        out = os.path.join(tmp, "result.json")
        env = dict(os.environ, CROSSBENCH_JOB=os.path.join(tmp, "job.json"), PYTHONPATH=here)
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", tmp,
             "-c", os.path.join(here, "bench_cell.ini"), "--benchmark-json", out,
             "--benchmark-min-rounds", str(reps), "--benchmark-max-time", str(reps * seconds),
             "--benchmark-warmup", "on", os.path.join(here, "bench_cell.py")],
            env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        if run.returncode != 0 or not os.path.exists(out):
            tail = run.stdout.strip().splitlines()[-5:]
            raise RuntimeError("pytest-benchmark failed: %s" % " | ".join(tail))
        with open(out) as f:
            result = json.load(f)
    import pytest_benchmark

    st = result["benchmarks"][0]["stats"]
    return {
        "framework": "pytest-benchmark %s" % pytest_benchmark.__version__,
        "mean_ns": st["mean"] * 1e9,
        "sd_ns": st["stddev"] * 1e9,
        "median_ns": st["median"] * 1e9,
        "samples": st["rounds"],
        "iterations": st["rounds"] * st["iterations"],
    }


def handle(lib, keys, req, loads):
    op = req.get("op")
    if op == "hello":
        return {"name": lib.name, "version": lib.version, "language": "python",
                "variants": ["crt"], "min_bits": 1024, "framework": "pytest-benchmark"}
    if op == "load":
        if req.get("variant", "crt") != "crt":
            raise ValueError("this adapter loads CRT keys only")
        key, bits = lib.load(req["pem"])
        keys[req["id"]] = key
        loads[req["id"]] = req["pem"]
        return {"bits": bits}
    if op == "encrypt":
        return {"ct": lib.encrypt(keys[req["key"]], bytes.fromhex(req["msg"])).hex()}
    if op == "decrypt":
        return {"msg": lib.decryptor(keys[req["key"]])(bytes.fromhex(req["ct"])).hex()}
    if op == "sign":
        return {"sig": lib.signer(keys[req["key"]])(bytes.fromhex(req["msg"])).hex()}
    if op == "verify":
        ok = lib.verifier(keys[req["key"]])(bytes.fromhex(req["msg"]), bytes.fromhex(req["sig"]))
        return {"valid": ok}
    if op == "bench":
        fn, args = prepare(lib, keys.get(req.get("key")), req)
        return {"ns": timed(fn, args, int(req["iterations"]), int(req["reps"]))}
    if op == "framework":
        return framework(LIB_NAMES[type(lib)], loads, req)
    raise ValueError("unknown op %r" % op)


LIBS = {"cryptography": Cryptography, "pycryptodome": PyCryptodome}
LIB_NAMES = {v: k for k, v in LIBS.items()}


def main():
    libs = LIBS
    if len(sys.argv) != 3 or sys.argv[1] != "--lib" or sys.argv[2] not in libs:
        sys.stderr.write("usage: adapter.py --lib cryptography|pycryptodome\n")
        return 2
    try:
        lib = libs[sys.argv[2]]()
    except ImportError as e:
        sys.stderr.write("adapter.py: %s is not installed (%s); run ./setup.sh\n" % (sys.argv[2], e))
        return 3
    keys, loads = {}, {}
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            if req.get("op") == "quit":
                break
            reply = {"ok": True}
            reply.update(handle(lib, keys, req, loads))
        except Exception as e:  # every failure is reported, the adapter stays up
            reply = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
