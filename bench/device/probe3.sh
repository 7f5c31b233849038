#!/bin/bash
# Whether `bench scale`'s eight-worker shortfall is the server's or the
# tool's: `bench run` replays a ramp's steps (2 s each, from the same
# local ports, against one server, as `bench scale`'s steps do), then
# `bench scale` runs the same ramp and its one-step form with each
# step's outcome in JSON. STEPS: the rates; W: workers.
set -u
D=$(cd "$(dirname "$0")" && pwd); S=$D/sipsec
O=${OUT:-/tmp/out}; mkdir -p "$O"
GEN=${GEN:-8-15}; GT=${GT:-8}; W=${W:-8}
STEPS=${STEPS:-100000 125000 156250 195313 244141 305176 381470}
exec > >(tee "$O/probe3.txt") 2>&1
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo
ulimit -Sn "$(ulimit -Hn)"
sysctl -qw net.core.rmem_max=33554432 net.core.wmem_max=33554432 net.core.rmem_default=8388608
up() { for _ in $(seq 200); do grep -q ":13C4 " /proc/net/udp && return; sleep 0.05; done; }
echo "== 1. bench run, the ramp's steps against one server, W=$W"
rm -rf /tmp/sd
taskset -c "0-$((W - 1))" "$S" serve --mode registrar --udp 127.0.0.1:5060 --no-http \
  --workers "$W" --udp-balance spread --data-dir /tmp/sd >/tmp/s.log 2>&1 & SP=$!; up
for r in $STEPS; do
  echo "-- $r/s"
  timeout 30 taskset -c "$GEN" "$S" bench run --target 127.0.0.1:5060 --scenario register \
    --rate "$r" --calls $((r * 2)) --duration 2 --threads "$GT" --flows 1 --busy-poll \
    --local-port 40000 --server-pid $SP 2>&1 | grep -E "calls/s|latency|server CPU" | grep -v " s  "
  grep VmRSS /proc/$SP/status
done
kill $SP; wait $SP 2>/dev/null
steps() { python3 -c "
import json,sys
for c in json.load(open(sys.argv[1]))['results']:
    print(c.get('sustained'), c.get('cpu_us_per_call'))
    for s in c['steps']: print('  ', {k: round(v, 2) for k, v in s.items()})" "$1" 2>&1 || head -c 3000 "$1"; }
echo "== 2. bench scale, the same ramp"
timeout 150 "$S" bench scale --servers sipsec --sipsec-exe "$S" --balance spread --workers "$W" \
  --flows "$GT" --threads "$GT" --start 100000 --factor 1.25 --max 400000 --duration 2 --pin \
  --json "$O/ramp.json" 2>&1 | grep -E "^(server|sipsec) "
steps "$O/ramp.json"
echo "== 3. one step of 400000/s: bench peak on a server started here, then bench scale"
rm -rf /tmp/sd
taskset -c "0-$((W - 1))" "$S" serve --mode registrar --udp 127.0.0.1:5060 --no-http \
  --workers "$W" --udp-balance spread --data-dir /tmp/sd >/tmp/s.log 2>&1 & SP=$!; up
timeout 60 taskset -c "$GEN" "$S" bench peak --target 127.0.0.1:5060 --scenario register \
  --threads "$GT" --flows 1 --busy-poll --start ${R:-400000} --max ${R:-400000} --duration 2 \
  --server-pid $SP 2>&1 | grep -vE "^ *[0-9]+ s "
kill $SP; wait $SP 2>/dev/null
timeout 90 "$S" bench scale --servers sipsec --sipsec-exe "$S" --balance spread --workers "$W" \
  --flows "$GT" --threads "$GT" --start ${R:-400000} --max ${R:-400000} --duration 2 --pin \
  --json "$O/one.json" 2>&1 | grep -E "^(server|sipsec) "
steps "$O/one.json"
echo "== done"
