#!/usr/bin/env python3
"""Code footprint per message, from a callgrind profile.

A worker that sleeps between two messages meets them with cold caches:
every 64-byte line of code a message runs is fetched again. The count of
distinct lines a message runs is then what it costs beyond its
instructions, and unlike a time it is exact and repeatable.

Profile the process while it answers N messages, counting from a zeroed
state, with per-instruction costs and plain names:

    valgrind --tool=callgrind --dump-instr=yes --compress-pos=no \\
        --compress-strings=no --callgrind-out-file=cg.%p PROGRAM ...
    callgrind_control -z      # after the warm-up load
    ...                       # N messages
    callgrind_control -d      # writes cg.PID.1

    bench/footprint.py cg.PID.1 N [--top K] [--groups]

A line whose most-run instruction ran k times counts min(1, k/N) for each
message: a line every message runs counts 1, one that every tenth runs
counts 0.1. Lines are credited to the function of that instruction.
"""

import argparse
import collections
import sys

# Groups for --groups: the first pattern found in a function's name wins.
GROUPS = [
    ("io::tcp", "connection reactor"),
    ("io::udp", "UDP worker"),
    ("location", "location and journal"),
    ("records", "location and journal"),
    ("journal", "location and journal"),
    ("maplog", "location and journal"),
    ("registrar", "registrar"),
    ("sip_core", "SIP parse and write"),
    ("memchr", "SIP parse and write"),
    ("sipsec_server", "server, other"),
    ("sipsec_bench", "null responder's loop"),
    ("libc", "libc"),
]


def costs(path):
    """Instruction address -> (times run, object:function)."""
    runs = collections.Counter()
    owner = {}
    fn = obj = ""
    after_call = False
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("fn="):
                fn = line[3:].strip()
            elif line.startswith("ob="):
                obj = line[3:].strip().rsplit("/", 1)[-1]
            elif line.startswith("calls="):
                # The next cost line is the call's inclusive cost.
                after_call = True
            elif line.startswith("0x"):
                if after_call:
                    after_call = False
                    continue
                parts = line.split()
                if len(parts) < 3:
                    continue
                addr = int(parts[0], 16)
                runs[addr] += int(parts[2])
                owner[addr] = f"{obj}:{fn}"
            else:
                after_call = False
    if not runs:
        sys.exit(f"{path}: no per-instruction costs (profile with --dump-instr=yes "
                 "--compress-pos=no --compress-strings=no)")
    return runs, owner


def footprint(runs, owner, n):
    """(lines per message, instructions per message, function -> lines,
    function -> instructions per message)."""
    hottest = {}
    per_fn_ir = collections.Counter()
    for addr, k in runs.items():
        per_fn_ir[owner[addr]] += k / n
        line = addr >> 6
        if k > hottest.get(line, (0, ""))[0]:
            hottest[line] = (k, owner[addr])
    per_fn = collections.Counter()
    total = 0.0
    for k, who in hottest.values():
        share = min(1.0, k / n)
        total += share
        per_fn[who] += share
    return total, sum(runs.values()) / n, per_fn, per_fn_ir


def group(name):
    return next((g for pattern, g in GROUPS if pattern in name), "other")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("profile")
    p.add_argument("messages", type=float, help="messages the profile counts")
    p.add_argument("--top", type=int, default=30, help="functions to list")
    p.add_argument("--groups", action="store_true", help="sum by part of the program")
    a = p.parse_args()
    if a.messages <= 0:
        sys.exit("messages must be above 0")
    runs, owner = costs(a.profile)
    lines, instructions, per_fn, per_fn_ir = footprint(runs, owner, a.messages)
    print(f"{lines:.0f} lines of code per message ({lines * 64 / 1024:.1f} KiB), "
          f"{instructions:.0f} instructions")
    print("   lines  instructions")
    if a.groups:
        by, by_ir = collections.Counter(), collections.Counter()
        for who, share in per_fn.items():
            by[group(who)] += share
        for who, ir in per_fn_ir.items():
            by_ir[group(who)] += ir
        for g, share in by.most_common():
            print(f"{share:8.1f}  {by_ir[g]:12.0f}  {g}")
    else:
        for who, share in per_fn.most_common(a.top):
            print(f"{share:8.1f}  {per_fn_ir[who]:12.0f}  {who[:120]}")


if __name__ == "__main__":
    main()
