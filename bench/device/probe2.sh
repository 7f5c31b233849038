#!/bin/bash
# The second lent run after probe.sh, from the repository's root with the
# same folder:
#  1. TLS refreshes with 1 and 8 reactors, sipsec beside the null TLS
#     responder (`bench null --tls`, which only frames and answers): is
#     eight reactors' extra cost sipsec's, or the floor's?
#  2. Fixed REGISTER rates past one worker's limit, one flow shared by
#     every generator thread and 8 flows, W = 1 and W = 8 (spread), so
#     the one-flow W = 8 / W = 1 ratio comes from rates both held;
#  3. the bench scale / bench run gap at W = 8: bench run from fixed
#     consecutive local ports (as bench scale's flows), and bench scale's
#     one step held 4 s instead of 2.
# R1 / R8: rates for W = 1 and W = 8; CONNS, TROUNDS as probe.sh.
set -u
D=$(cd "$(dirname "$0")" && pwd); S=$D/sipsec
O=${OUT:-/tmp/out}; mkdir -p "$O"
GEN=${GEN:-8-15}; GT=${GT:-8}
exec > >(tee "$O/probe2.txt") 2>&1
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo
ulimit -Sn "$(ulimit -Hn)"
sysctl -qw net.core.rmem_max=33554432 net.core.wmem_max=33554432 net.core.rmem_default=8388608
echo "== 1. TLS refreshes, sipsec and null, 1 and 8 reactors"
for w in 1 ${W8:-8}; do
  echo "-- reactors $w"
  timeout 150 "$S" bench connections --servers sipsec,null --sipsec-exe "$S" --transport tls \
    --connections "${CONNS:-15000}" --workers $w --threads 6 --refresh-rate 10000 --hold 1 \
    --rounds "${TROUNDS:-2}" 2>&1 | grep -iE "per refresh|per open|failed|error"
done
thr() { for t in /proc/$1/task/*; do echo "$(cat "$t/comm") $(awk '{print $14+$15}' "$t/stat")"; done | sort; }
up() { for _ in $(seq 200); do grep -q ":13C4 " /proc/net/udp && return; sleep 0.05; done; }
one() { # workers rate flows [generator flags]
  rm -rf /tmp/sd
  taskset -c "0-$(($1 - 1))" "$S" serve --mode registrar --udp 127.0.0.1:5060 --no-tcp --no-http \
    --workers "$1" --udp-balance spread --data-dir /tmp/sd >/tmp/s.log 2>&1 & SP=$!; up
  thr $SP > /tmp/t0
  echo "-- W=$1, $2/s, $GT threads x $3 flows ${*:4}"
  timeout 40 taskset -c "$GEN" "$S" bench run --target 127.0.0.1:5060 --scenario register \
    --rate "$2" --calls $(($2 * 4)) --duration 4 --threads "$GT" --flows "$3" --busy-poll \
    --server-pid $SP "${@:4}" 2>&1 | grep -E "calls/s|latency|server CPU" | grep -v " s  "
  thr $SP > /tmp/t1
  echo "ticks: $(join /tmp/t0 /tmp/t1 | awk '$3-$2>0 {print $1, $3-$2}' | sort -k2 -n -r | head -9 | tr '\n' ' ')"
  kill $SP; wait $SP 2>/dev/null
}
echo "== 2. fixed rates, one shared flow and 8 flows"
for r in ${R1:-110000 130000 150000}; do one 1 "$r" 1 --share-flows; one 1 "$r" 1; done
W8=${W8:-8}
for r in ${R8:-700000 800000 900000}; do one $W8 "$r" 1 --share-flows; done
one $W8 "${R8F:-800000}" 1
echo "== 3. W=8, 400000/s: fixed local ports, and bench scale's step held 4 s"
one $W8 ${RG:-400000} 1 --local-port 40000
one $W8 ${RG:-400000} 1
timeout 90 "$S" bench scale --servers sipsec --sipsec-exe "$S" --balance spread --workers $W8 \
  --flows "$GT" --threads "$GT" --start ${RG:-400000} --max ${RG:-400000} --duration 4 --pin 2>&1 | grep -E "^(server|sipsec) "
echo "== done"
