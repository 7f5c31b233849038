#!/bin/bash
# The default balance, steered by Call-ID (`udp_balance = "call"`), on a
# 16-core machine, from a folder prepared as README.md says (about 4
# minutes):
#  1. `bench steer`: which bound the kernel accepts and what the
#     program costs a datagram there;
#  2. fixed REGISTER rates from one flow loaded by every generator thread
#     (--share-flows, busy-polling) against one worker and eight, with
#     each worker's CPU — is one peer's load spread, and how far past one
#     worker's limit do eight go;
#  3. `bench scale --pin`: sipsec (call) and Kamailio, W = 1, 2, 4, 8,
#     for 1, 8 and 10,000 flows, with --refine.
# R1, R8, GEN, GT, W8, WS, FLOWS, DUR, START, REFINE, T3 change the
# defaults; try it on two cores with
# `GEN=1 GT=1 W8=2 R1=20000 R8=30000 WS=1 FLOWS=1 DUR=0.5 START=20000 REFINE=0`.
set -u
D=$(cd "$(dirname "$0")" && pwd); S=$D/sipsec
export PATH=$D:$PATH LD_LIBRARY_PATH=$D/klib
O=${OUT:-/tmp/out}; mkdir -p "$O"
GEN=${GEN:-8-15}; GT=${GT:-8}; W8=${W8:-8}
exec > >(tee "$O/call.txt") 2>&1
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo; date -u
ulimit -Sn "$(ulimit -Hn)"; echo "fd $(ulimit -n)"
ldd "$S" | grep "not found"; ldd "$D/kamailio" | grep "not found"
sysctl -qw net.core.rmem_max=33554432 net.core.wmem_max=33554432 net.core.rmem_default=8388608
sed -e "s|@MPATH@|$D/klib/modules/|" "$D/kam.cfg.in" > "$D/kam.cfg"

echo "== 1. steer"
timeout 60 "$S" bench steer --runs 200000 --rounds 1

up() { for _ in $(seq 200); do grep -q ":13C4 " /proc/net/udp && return; sleep 0.05; done; }
ticks() { for t in /proc/$1/task/*; do
  c=$(cat "$t/comm"); case $c in udp-*) echo -n "$c $(awk '{print $14+$15}' "$t/stat")  ";; esac; done; echo; }
one() { # workers rate
  rm -rf /tmp/sd
  taskset -c "0-$(($1 - 1))" "$S" serve --mode registrar --udp 127.0.0.1:5060 --no-tcp --no-http \
    --workers "$1" --data-dir /tmp/sd >/tmp/s.log 2>&1 & SP=$!; up
  echo "-- W=$1, $2/s, $GT threads on one flow"
  timeout 40 taskset -c "$GEN" "$S" bench run --target 127.0.0.1:5060 --scenario register \
    --rate "$2" --calls $(($2 * 4)) --duration 4 --threads "$GT" --flows 1 --share-flows \
    --busy-poll --server-pid $SP 2>&1 | grep -E "calls/s|latency|server CPU" | grep -v " s  "
  ticks $SP; grep -m1 'udp_balance' /tmp/s.log | cut -c1-200
  kill $SP; wait $SP 2>/dev/null
}
echo "== 2. one flow, fixed rates"
for r in ${R1:-100000 130000 160000}; do one 1 "$r"; done
for r in ${R8:-600000 750000}; do one "$W8" "$r"; done

echo "== 3. scale: sipsec call and kamailio"
timeout "${T3:-360}" "$S" bench scale --pin --duration "${DUR:-1}" --start "${START:-40000}" \
  --refine "${REFINE:-1}" --kamailio-cfg "$D/kam.cfg" --servers sipsec,kamailio --balance call \
  --workers "${WS:-1,2,4,8}" --flows "${FLOWS:-1,8,10000}" \
  --json "$O/scale.json" --markdown "$O/scale.md" --html "$O/scale.html"
echo "== done"; date -u
