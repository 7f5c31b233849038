#!/bin/bash
# One flow loaded by every generator thread (--share-flows), the two ways
# the generator can share it over UDP, at fixed REGISTER rates against
# one worker and eight (spread): a socket per thread on the flow's port,
# each thread's responses steered to it by Call-ID, against one socket
# every thread reads, the reader handing over what is another's
# (--one-shared-socket). Does the hand-over hold the one-flow W = 8 runs
# near 600,000/s? About 1.5 minutes, from a folder holding a stripped
# `sipsec` (see README.md).
# R1 / R8: rates for W = 1 and W = 8; GEN: the generator's cores, GT its
# threads; W8: the larger worker count.
set -u
D=$(cd "$(dirname "$0")" && pwd); S=$D/sipsec
O=${OUT:-/tmp/out}; mkdir -p "$O"
GEN=${GEN:-8-15}; GT=${GT:-8}; W8=${W8:-8}
exec > >(tee "$O/shared.txt") 2>&1
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo
ulimit -Sn "$(ulimit -Hn)"
sysctl -qw net.core.rmem_max=33554432 net.core.wmem_max=33554432 net.core.rmem_default=8388608
up() { for _ in $(seq 200); do grep -q ":13C4 " /proc/net/udp && return; sleep 0.05; done; }
one() { # workers rate [generator flags]
  rm -rf /tmp/sd
  taskset -c "0-$(($1 - 1))" "$S" serve --mode registrar --udp 127.0.0.1:5060 --no-tcp --no-http \
    --workers "$1" --udp-balance spread --data-dir /tmp/sd >/tmp/s.log 2>&1 & SP=$!; up
  echo "-- W=$1, $2/s, $GT threads on one flow ${*:3}"
  timeout 40 taskset -c "$GEN" "$S" bench run --target 127.0.0.1:5060 --scenario register \
    --rate "$2" --calls $(($2 * 4)) --duration 4 --threads "$GT" --flows 1 --share-flows \
    --busy-poll --server-pid $SP "${@:3}" 2>&1 | grep -E "calls/s|latency|server CPU|shared flows" | grep -v " s  "
  kill $SP; wait $SP 2>/dev/null
}
for r in ${R1:-110000 130000}; do one 1 "$r"; one 1 "$r" --one-shared-socket; done
for r in ${R8:-600000 700000 800000}; do one "$W8" "$r"; one "$W8" "$r" --one-shared-socket; done
echo "== done"
