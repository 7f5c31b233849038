#!/bin/bash
# Why `bench scale` sustained less than `bench run` on the 16-core machine
# (its one-worker cells stopped at 60,000-75,000/s at 12-15 us per REGISTER
# where `bench run` held 90,000/s at 9.5-11 us): the same offered rate,
# the same worker count, changing one thing at a time, each with a fresh
# server and CPU per REGISTER from the same counter (--server-pid):
#   a) the server as rates.sh starts it (--no-tcp), `bench run`, 4 s
#   b) the same without --no-tcp, as `bench compare`/`bench scale` start it
#   c) as a) with bench scale's 2 s step and its drain (--duration 3)
#   d) `bench scale` itself, one cell, one step at that rate (--max)
# RATES: "W:RATE ..." pairs; W workers on CPUs 0..W-1, the generator
# (busy-polling, GT threads x FL flows) on GEN (bench scale's own --pin
# puts it on the CPUs above W). Then SHARED: one flow from every thread.
set -u
D=$(cd "$(dirname "$0")" && pwd); S=${SIPSEC:-$D/sipsec}
O=${OUT:-/tmp/out}; mkdir -p "$O"
GEN=${GEN:-8-15}; GT=${GT:-8}; FL=${FL:-1}
exec > >(tee "$O/bisect.txt") 2>&1
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo
ulimit -Sn "$(ulimit -Hn)"
up() { for _ in $(seq 200); do grep -q ":13C4 " /proc/net/udp && return; sleep 0.05; done; }
serve() { # workers [extra serve flags]
  rm -rf /tmp/sd
  taskset -c "0-$(($1 - 1))" "$S" serve --mode registrar --udp 127.0.0.1:5060 --no-http \
    --workers "$1" --udp-balance spread --data-dir /tmp/sd "${@:2}" >/tmp/s.log 2>&1 &
  SP=$!; up
}
stop() { kill "$SP"; wait "$SP" 2>/dev/null; }
run() { # rate seconds
  timeout $(($2 + 30)) taskset -c "$GEN" "$S" bench run --target 127.0.0.1:5060 --scenario register \
    --rate "$1" --calls $(($1 * $2)) --duration "$2" --threads "$GT" --flows "$FL" --busy-poll \
    --server-pid "$SP" 2>&1 | grep -E "calls/s|latency|server CPU" | grep -v " s  "
}
for pair in ${RATES:-1:60000 1:90000 8:400000}; do
  w=${pair%%:*}; r=${pair##*:}
  echo "== W=$w, $r REGISTER/s, $GT x $FL flows"
  echo "-- a) --no-tcp, bench run 4 s"; serve "$w" --no-tcp; run "$r" 4; stop
  echo "-- b) with TCP, bench run 4 s"; serve "$w"; run "$r" 4; stop
  echo "-- c) --no-tcp, bench run 3 s"; serve "$w" --no-tcp; run "$r" 3; stop
  echo "-- d) bench scale, one step"
  timeout 120 "$S" bench scale --servers sipsec --sipsec-exe "$S" --balance spread --workers "$w" \
    --flows $((GT * FL)) --threads "$GT" --start "$r" --max "$r" --duration 2 --pin 2>&1 \
    | grep -E "^(server|sipsec) " | head -4
done
# One flow from every generator thread (--share-flows): W = 1 and 8 at
# fixed rates, for the one-flow W = 8 >= 6.4 x W = 1 goal.
for pair in ${SHARED-1:90000 8:450000 8:600000}; do
  w=${pair%%:*}; r=${pair##*:}
  echo "== one shared flow, W=$w, $r REGISTER/s, $GT threads"
  serve "$w" --no-tcp
  timeout 40 taskset -c "$GEN" "$S" bench run --target 127.0.0.1:5060 --scenario register \
    --rate "$r" --calls $((r * 4)) --duration 4 --threads "$GT" --flows 1 --share-flows \
    --busy-poll --server-pid "$SP" 2>&1 | grep -E "calls/s|latency|server CPU" | grep -v " s  "
  stop
done
echo "== done"
