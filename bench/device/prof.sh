#!/bin/bash
# Where the CPU per REGISTER grows from one UDP worker to eight (spread):
# the same offered rate to W=1 and W=8, perf profiles of the server, and
# W=8 near its peak. GEN, RATE, HIGH, DUR change the defaults. perf is
# carried in perf/ with the libraries `ldd perf` names (but libc and libm)
# in perf/lib, and the sipsec binary keeps its symbols (`strip
# --strip-debug`); the last step tries `perf c2c` (memory events), which
# a virtual machine may lack.
set -u
D=$(cd "$(dirname "$0")" && pwd); S=$D/sipsec
O=${OUT:-/tmp/out}; mkdir -p $O
GEN=${GEN:-8-15}; GT=${GT:-8}; R=${RATE:-70000}; H=${HIGH:-240000}; T=${DUR:-6}
PERF="env LD_LIBRARY_PATH=$D/perf/lib $D/perf/perf"
exec > >(tee $O/prof.txt) 2>&1
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo; id -u
cat /proc/sys/kernel/perf_event_paranoid /proc/sys/kernel/kptr_restrict 2>&1
ulimit -Sn $(ulimit -Hn)
sysctl -qw net.core.rmem_max=33554432 net.core.wmem_max=33554432 2>/dev/null
$PERF --version || echo "perf does not run"
EV=cycles; $PERF stat -e cycles -- true >/dev/null 2>&1 || EV=cpu-clock; echo "event $EV"
thr() { for t in /proc/$1/task/*; do echo "$(cat $t/comm) $(awk '{print $14+$15}' $t/stat)"; done | sort; }

one() { # name workers cores rate [perf]
  rm -rf /tmp/sd; taskset -c $3 $S serve --mode registrar --udp 127.0.0.1:5060 --no-tcp --no-http \
    --workers $2 --udp-balance spread --data-dir /tmp/sd >/tmp/s.log 2>&1 & SP=$!; sleep 1
  thr $SP > /tmp/t0
  echo "-- $1: W=$2 on $3, $4/s"
  timeout $((T + 20)) taskset -c $GEN $S bench run --target 127.0.0.1:5060 --scenario register --rate $4 \
    --calls $(($4 * T)) --duration $T --threads $GT --flows 1 --server-pid $SP 2>&1 \
    | grep -E "calls/s|failed|latency|server CPU" &
  BP=$!; sleep 1.5
  if [ -n "${5:-}" ]; then
    # A prime rate: samples at a round one keep a fixed phase to a paced
    # load and can miss its bursts (docs/bench.md, a request that finds
    # the caches cold).
    $PERF record -e $EV -F 3989 -g -p $SP -o $O/$1.data -- sleep 3 2>&1 | tail -1
    $PERF stat -e task-clock,context-switches,cpu-migrations,$EV -p $SP -- sleep 1 2>&1 | grep -vE "^$|#.*$^"
  fi
  if [ -n "${6:-}" ]; then
    timeout 20 $PERF c2c record -p $SP -o $O/c2c.data -- sleep 1.5 2>&1 | tail -1
  fi
  wait $BP
  thr $SP > /tmp/t1
  echo "threads' CPU ticks:"; join /tmp/t0 /tmp/t1 | awk '$3-$2>0 {print $1, $3-$2}' | sort -k2 -n -r | head -10 | tr '\n' ' '; echo
  kill $SP; wait $SP 2>/dev/null
  if [ -n "${5:-}" ] && [ -f $O/$1.data ]; then
    $PERF report -i $O/$1.data --stdio --no-children --sort dso 2>/dev/null | grep -v "^#" | grep -v "^$" | head -8 > $O/$1.dso.txt
    $PERF report -i $O/$1.data --stdio --no-children --sort sym -g none 2>/dev/null | grep -v "^#" | grep -v "^$" | head -70 > $O/$1.sym.txt
    $PERF report -i $O/$1.data --stdio --no-children --sort sym -g caller,0.5,callee --percent-limit 2 2>/dev/null | head -400 > $O/$1.callers.txt
    cat $O/$1.dso.txt; head -25 $O/$1.sym.txt
    rm -f $O/$1.data
  fi
}

echo "== same rate: W=1 and W=8"
one w1 1 0 $R p
one w8 8 ${C8:-0-7} $R p
echo "== W=8 near its peak"
one w8high 8 ${C8:-0-7} $H p
one w8c2c 8 ${C8:-0-7} $H "" c
if [ -f $O/c2c.data ]; then
  timeout 60 $PERF c2c report -i $O/c2c.data --stdio 2>&1 | head -300 > $O/c2c.txt; rm -f $O/c2c.data
  head -60 $O/c2c.txt
fi
echo "== done"
