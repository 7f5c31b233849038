#!/usr/bin/env python3
"""CPU cost per call and sustainable rate of a SIP server, driven by SIPp.

For each operation (register, register update, register logout, invite
through the proxy, invite-not-found, redirect) SIPp offers a fixed rate;
the server's CPU time (utime+stime of all its processes, from /proc) is
read before and after, giving CPU microseconds per call. With --peak, a
rate ramp finds the highest offered rate fully processed (zero failed
calls, finished within 10 % + 1 s of the step's length) per operation.

    bench/sipp_cpu.py --server sipsec   [--rate 2000] [--calls 20000] [--stateful]
    bench/sipp_cpu.py --server kamailio [--rate 2000] [--calls 20000] [--stateful]
    bench/sipp_cpu.py --server sipsec --peak [--seconds 5]

Loopback only; every SIPp run is bounded by call count and -timeout.
This is the stop-gap until `sipsec bench` replaces SIPp (it is single
threaded, so the ramp's top is SIPp's limit, not necessarily the server's).
"""
import argparse, json, os, re, shutil, signal, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCEN = os.path.join(ROOT, "interop", "sipp")
TICK = os.sysconf("SC_CLK_TCK")
USERS = 20000

def cpu_seconds(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / TICK

def pids_of(name):
    out = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]

def sipp(server, scenario, rate, calls, port, extra, transport="u1"):
    cmd = ["sipp", server, "-sf", os.path.join(SCEN, scenario), "-t", transport,
           "-m", str(calls), "-r", str(rate), "-l", str(max(rate * 2, 200)),
           "-p", str(port), "-i", "127.0.0.1", "-nostdin", "-timeout", "120s",
           "-timeout_error", "-max_recv_loops", "100000", "-max_sched_loops", "100000"] + extra
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    elapsed = time.time() - t0
    def count(label):
        vals = [l.rsplit("|", 1)[-1].strip() for l in out.splitlines() if l.strip().startswith(label)]
        return int(vals[-1]) if vals and vals[-1].isdigit() else 0
    return count("Successful call"), count("Failed call"), elapsed

AUTH = False
STATEFUL = False

def sipsec_users(workdir):
    """A users file with user00000… (password pw) and callee, via `sipsec users import`."""
    exe = os.path.join(ROOT, "target", "release", "sipsec")
    users = os.path.join(workdir, "users.tsv")
    if os.path.exists(users):
        return users  # one import serves every mode of a run
    csv = os.path.join(workdir, "users.csv")
    with open(csv, "w") as f:
        f.write("username,password\ncallee,pw\n")
        for i in range(USERS):
            f.write(f"user{i:05d},pw\n")
    subprocess.run([exe, "users", "import", csv, "--file", users], check=True, capture_output=True)
    return users

class Server:
    def __init__(self, kind, mode, workdir, port):
        self.kind, self.port, self.proc = kind, port, None
        if kind == "sipsec":
            exe = os.path.join(ROOT, "target", "release", "sipsec")
            auth = ["--auth", "--digest", "md5", "--users", sipsec_users(workdir)] if AUTH else []
            if STATEFUL and mode == "proxy":
                auth.append("--stateful")
            self.proc = subprocess.Popen([exe, "serve", "--mode", mode, "--udp", f"127.0.0.1:{port}",
                                          "--no-tcp", "--no-http", "--workers", "2",
                                          "--data-dir", os.path.join(workdir, f"data-{mode}")] + auth,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.proc.stdout.readline()
            self.name = "sipsec"
        else:
            cfg = os.path.join(workdir, f"kamailio-{mode}.cfg")
            with open(cfg, "w") as f:
                f.write(kamailio_cfg(mode, port))
            self.proc = subprocess.Popen(["kamailio", "-f", cfg, "-DD", "-E", "-m", "256", "-M", "32"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.5)
            self.name = "kamailio"
        time.sleep(0.3)

    def pids(self):
        return [self.proc.pid] if self.kind == "sipsec" else pids_of("kamailio")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if self.kind == "kamailio":
            subprocess.run(["pkill", "-x", "kamailio"])
            time.sleep(0.5)

def kamailio_cfg(mode, port):
    route = {
        "registrar": 'sl_send_reply("405", "Method Not Allowed"); exit;',
        "proxy": ('if (!lookup("location")) { sl_send_reply("404", "Not Found"); exit; } '
                  + ('if (is_method("INVITE")) { record_route(); } t_relay(); exit;' if STATEFUL else 'forward(); exit;')),
        "redirect": 'if (!lookup("location")) { sl_send_reply("404", "Not Found"); exit; } sl_send_reply("302", "Moved Temporarily"); exit;',
    }[mode]
    return f"""#!KAMAILIO
debug=0
log_stderror=yes
children=2
auto_aliases=no
listen=udp:127.0.0.1:{port}
alias="127.0.0.1:{port}"
mpath="/usr/lib/x86_64-linux-gnu/kamailio/modules/"
loadmodule "sl.so"
loadmodule "tm.so"
loadmodule "pv.so"
loadmodule "maxfwd.so"
loadmodule "usrloc.so"
loadmodule "registrar.so"
loadmodule "textops.so"
loadmodule "siputils.so"
loadmodule "xlog.so"
loadmodule "rr.so"
modparam("usrloc", "db_mode", 0)
modparam("registrar", "max_expires", 7200)
request_route {{
    if (!mf_process_maxfwd_header("10")) {{ sl_send_reply("483", "Too Many Hops"); exit; }}
    if (has_totag() && loose_route()) {{ t_relay(); exit; }}
    # ACK for a locally sent final response ends here; the end-to-end ACK
    # for a 2xx belongs to no transaction and is routed like BYE.
    if (is_method("ACK") && t_check_trans()) {{ t_relay(); exit; }}
    if (is_method("REGISTER")) {{ save("location"); exit; }}
    {route}
}}
"""

def users_file(workdir):
    path = os.path.join(workdir, "users.inf")
    with open(path, "w") as f:
        f.write("SEQUENTIAL\n")
        for i in range(USERS):
            f.write(f"user{i:05d};[authentication username=user{i:05d} password=pw]\n")
    callee = os.path.join(workdir, "callee.inf")
    with open(callee, "w") as f:
        f.write("SEQUENTIAL\ncallee;[authentication username=callee password=pw]\n")
    return path, callee

PEAK_RATES = [1000, 2000, 4000, 6000, 8000, 12000, 16000, 20000, 24000, 32000]

def measure(kind, rate, calls, workdir, port, only, peak=0):
    inf, callee = users_file(workdir)
    results = {}
    def once(label, mode_server, scenario, extra, local_port, rate, calls):
        pids = mode_server.pids()
        c0 = cpu_seconds(pids)
        ok, failed, elapsed = sipp(f"127.0.0.1:{port}", scenario, rate, calls, local_port, extra)
        c1 = cpu_seconds(mode_server.pids())
        r = {"calls": calls, "ok": ok, "failed": failed, "offered_cps": rate,
             "achieved_cps": round(ok / elapsed, 1) if elapsed else 0,
             "cpu_us_per_call": round((c1 - c0) * 1e6 / max(ok, 1), 1)}
        print(f"{kind:9s} {label:17s} rate={rate:6d} ok={ok:6d} failed={failed:4d} "
              f"achieved={r['achieved_cps']:8.1f}/s cpu/call={r['cpu_us_per_call']:7.1f} us", flush=True)
        return r
    def run(label, mode_server, scenario, extra, local_port):
        if only and label not in only:
            return
        if not peak:
            results[label] = once(label, mode_server, scenario, extra, local_port, rate, calls)
            return
        # Ramp: the peak is the highest rate with no failed call whose
        # calls completed at (nearly) the offered rate.
        best = None
        for r in PEAK_RATES:
            res = once(label, mode_server, scenario, extra, local_port, r, r * peak)
            # Wall time includes SIPp's start and the last calls' round
            # trips: allow 10 % plus one second before calling it late.
            late = res["calls"] / max(res["achieved_cps"], 1) > peak * 1.1 + 1.0
            if res["failed"] or res["ok"] < res["calls"] or late:
                break
            best = res
        results[label] = {"peak_cps": best["offered_cps"] if best else 0, "at_peak": best}
        print(f"{kind:9s} {label:17s} peak={results[label]['peak_cps']} calls/s", flush=True)

    wanted = lambda *labels: not only or any(l in only for l in labels)
    if wanted("register", "register-update", "register-logout"):
        registrar_ops(kind, workdir, port, inf, run)
    if wanted("invite", "invite-not-found"):
        proxy_ops(kind, workdir, port, callee, run)
    if wanted("redirect"):
        redirect_ops(kind, workdir, port, callee, run)
    return results

def registrar_ops(kind, workdir, port, inf, run):
    s = Server(kind, "registrar", workdir, port)
    reg_port = 16000
    sc = "register_auth.xml" if AUTH else "register.xml"
    run("register", s, sc, ["-inf", inf, "-key", "expires", "3600"], reg_port)
    run("register-update", s, sc, ["-inf", inf, "-key", "expires", "1800"], reg_port)
    run("register-logout", s, sc, ["-inf", inf, "-key", "expires", "0"], reg_port)
    s.stop()

def proxy_ops(kind, workdir, port, callee, run):
    s = Server(kind, "proxy", workdir, port)
    sipp(f"127.0.0.1:{port}", "register.xml", 1, 1, 16100, ["-inf", callee, "-key", "expires", "3600"])
    uas = subprocess.Popen(["sipp", "-sn", "uas", "-p", "16100", "-i", "127.0.0.1", "-nostdin", "-timeout", "300s"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    run("invite", s, "invite.xml", ["-s", "callee"], 16200)
    run("invite-not-found", s, "invite_not_found.xml", ["-s", "nobody"], 16300)
    uas.kill()
    s.stop()

def redirect_ops(kind, workdir, port, callee, run):
    s = Server(kind, "redirect", workdir, port)
    sipp(f"127.0.0.1:{port}", "register.xml", 1, 1, 16100, ["-inf", callee, "-key", "expires", "3600"])
    run("redirect", s, "redirect.xml", ["-s", "callee"], 16400)
    s.stop()

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", choices=["sipsec", "kamailio"], default="sipsec")
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--port", type=int, default=15060)
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--only", default="", help="comma-separated operations to run (default: all)")
    ap.add_argument("--auth", action="store_true", help="digest authentication (sipsec only; registrar operations)")
    ap.add_argument("--stateful", action="store_true", help="transaction-stateful proxy (sipsec --stateful; Kamailio t_relay)")
    ap.add_argument("--peak", action="store_true", help="ramp the rate per operation and report the peak")
    ap.add_argument("--seconds", type=int, default=5, help="length of each ramp step (--peak)")
    a = ap.parse_args()
    global AUTH, STATEFUL
    AUTH = a.auth
    STATEFUL = a.stateful
    if a.auth and (a.server != "sipsec" or (a.only and any(not o.startswith("register") for o in a.only.split(",")))):
        sys.exit("--auth measures sipsec's registrar operations only: add --only register,register-update,register-logout")
    if not shutil.which("sipp"):
        sys.exit("sipp not found: run ./setup.sh")
    with tempfile.TemporaryDirectory() as d:
        only = [o for o in a.only.split(",") if o]
        res = measure(a.server, a.rate, a.calls, d, a.port, only, a.seconds if a.peak else 0)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"server": a.server, "results": res}, f, indent=2)

if __name__ == "__main__":
    main()
