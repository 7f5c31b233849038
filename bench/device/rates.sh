#!/bin/bash
# Fixed offered REGISTER rates against one UDP worker and eight (spread),
# generator on GEN: what each sustains, CPU per call, each worker's CPU.
# R1 / R8: the rates for one and eight workers; RB: one more for eight
# with a busy-polling generator; FL: flows per generator thread (GT).
set -u
D=$(cd "$(dirname "$0")" && pwd); S=$D/sipsec
O=${OUT:-/tmp/out}; mkdir -p $O
GEN=${GEN:-8-15}; GT=${GT:-8}; T=${DUR:-4}
exec > >(tee $O/rates.txt) 2>&1
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo
ulimit -Sn $(ulimit -Hn)
sysctl -qw net.core.rmem_max=33554432 net.core.wmem_max=33554432 net.core.rmem_default=8388608 2>/dev/null
thr() { for t in /proc/$1/task/*; do echo "$(cat $t/comm) $(awk '{print $14+$15}' $t/stat)"; done | sort; }
one() { # workers cores rate flows [extra generator flags]
  rm -rf /tmp/sd; taskset -c $2 $S serve --mode registrar --udp 127.0.0.1:5060 --no-tcp --no-http \
    --workers $1 --udp-balance spread --data-dir /tmp/sd >/tmp/s.log 2>&1 & SP=$!; sleep 1
  thr $SP > /tmp/t0
  echo "-- W=$1 on $2, $3/s, $GT x $4 flows ${5:-}"
  timeout $((T + 20)) taskset -c $GEN $S bench run --target 127.0.0.1:5060 --scenario register --rate $3 \
    --calls $(($3 * T)) --duration $T --threads $GT --flows $4 --server-pid $SP ${5:-} 2>&1 \
    | grep -E "calls/s|latency|server CPU" | grep -v " s  "
  thr $SP > /tmp/t1
  echo "ticks: $(join /tmp/t0 /tmp/t1 | awk '$3-$2>0 {print $1, $3-$2}' | sort -k2 -n -r | head -9 | tr '\n' ' ')"
  kill $SP; wait $SP 2>/dev/null
}
for r in ${R1:-90000 110000 130000}; do one 1 0 $r ${FL:-4}; done
for r in ${R8:-450000 600000 700000 800000}; do one 8 0-7 $r ${FL:-4}; done
one 8 0-7 ${RB:-700000} ${FL:-4} --busy-poll
echo "== done"
