#!/bin/bash
# Worker scaling with one busy peer and with a few flows: sipsec's UDP
# balance modes (flow = the kernel's hash, spread = random per datagram,
# shared = one socket) against Kamailio, fixed rates with per-thread CPU
# and peak searches. Server on cores 0..W-1, generator on 8-15.
set -u
D=$(cd "$(dirname "$0")" && pwd); S=$D/sipsec; K=$D/kamailio
export LD_LIBRARY_PATH=$D/klib
O=${OUT:-/tmp/out}; mkdir -p $O
exec > >(tee $O/log.txt) 2>&1
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo
ulimit -Sn $(ulimit -Hn)
sysctl -qw net.core.rmem_max=33554432 net.core.wmem_max=33554432 net.core.rmem_default=8388608 2>/dev/null
thr() { for p in $1 $(pgrep -P $1); do for t in /proc/$p/task/*; do echo "$(cat $t/comm)-${t##*/} $(awk '{print $14+$15}' $t/stat)"; done; done | sort; }
up() { for i in $(seq 100); do grep -q ":13C4 " /proc/net/udp && return; sleep 0.05; done; }
sip() { # W BALANCE
  rm -rf /tmp/sd; taskset -c 0-$(($1-1)) $S serve --mode registrar --udp 127.0.0.1:5060 --no-tcp --no-http --workers $1 --udp-balance $2 --data-dir /tmp/sd >/tmp/s.log 2>&1 & SP=$!; up; }
kam() { # W
  sed -e "s|@MPATH@|$D/klib/modules/|" $D/kam.cfg.in > /tmp/k.cfg; rm -rf /tmp/kw; mkdir -p /tmp/kw
  taskset -c 0-$(($1-1)) $K -f /tmp/k.cfg -A MODE_REGISTRAR -l udp:127.0.0.1:5060 -n $1 -w /tmp/kw -DD -E -m 2048 -M 32 >/tmp/k.log 2>&1 & SP=$!; up; sleep 0.5; }
stop() { kill $SP; wait $SP 2>/dev/null; sleep 0.3; }
fixed() { # NAME RATE THREADS FLOWS PIDARGS
  thr $SP > /tmp/t0
  timeout 40 taskset -c 8-15 $S bench run --target 127.0.0.1:5060 --scenario register --threads $3 --flows $4 --rate $2 --calls $(($2*3)) --duration 3 --drain 2 $5 2>&1 | grep -E "started|server CPU" | sed "s/^/  /"
  thr $SP > /tmp/t1
  echo "  $1 offered $2 ($3x$4 flows): per-thread CPU ticks (10 ms) in the run:" $(join /tmp/t0 /tmp/t1 2>/dev/null | awk '$3-$2>0 {sub(/-[0-9]+$/,"",$1); print $1"="$3-$2}' | sort -t= -k2 -n -r | head -9)
}
peak() { # NAME THREADS FLOWS START PIDARGS
  echo "  $1 peak ($2x$3 flows):" $(timeout 90 taskset -c 8-15 $S bench peak --target 127.0.0.1:5060 --scenario register --threads $2 --flows $3 $5 --start $4 --factor 1.25 --max 4000000 --duration 2 --json $O/peak_$1.json 2>&1 | grep -E "peak|sustain" | tail -2)
}
echo "== A: one flow (1 generator thread, 1 socket) at a fixed rate on 8 workers"
for B in flow spread shared; do sip 8 $B; fixed "sipsec-$B-W8" ${R1:-250000} 1 1 "--server-pid $SP"; stop; done
kam 8; fixed "kamailio-W8" ${R1:-250000} 1 1 "--server-name kamailio"; stop
echo "== B: one flow, peak, W = 1 and 8"
sip 1 spread; peak sipsec-1flow-W1 1 1 60000 "--server-pid $SP"; stop
for B in spread flow; do sip 8 $B; peak sipsec-1flow-$B-W8 1 1 100000 "--server-pid $SP"; stop; done
echo "== C: 8 flows (8 threads x 1), peak per worker count"
for W in ${WS:-1 2 4 8}; do
  sip $W spread; peak sipsec-8flows-spread-W$W 8 1 $((40000+30000*W)) "--server-pid $SP"; stop
done
sip 8 flow; peak sipsec-8flows-flow-W8 8 1 200000 "--server-pid $SP"; stop
kam 8; peak kamailio-8flows-W8 8 1 100000 "--server-name kamailio"; stop
echo "== done"
