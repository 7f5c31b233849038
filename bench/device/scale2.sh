#!/bin/bash
# Second pass: 32 flows (8 threads x 4), W = 1 and 8, spread vs flow, and Kamailio W = 1, 8.
set -u
D=$(cd "$(dirname "$0")" && pwd); S=$D/sipsec; K=$D/kamailio
export LD_LIBRARY_PATH=$D/klib
O=${OUT:-/tmp/out}; mkdir -p $O
exec > >(tee $O/log2.txt) 2>&1
ulimit -Sn $(ulimit -Hn)
up() { for i in $(seq 100); do grep -q ":13C4 " /proc/net/udp && return; sleep 0.05; done; }
sip() { rm -rf /tmp/sd; taskset -c 0-$(($1-1)) $S serve --mode registrar --udp 127.0.0.1:5060 --no-tcp --no-http --workers $1 --udp-balance $2 --data-dir /tmp/sd >/tmp/s.log 2>&1 & SP=$!; up; }
kam() { sed -e "s|@MPATH@|$D/klib/modules/|" $D/kam.cfg.in > /tmp/k.cfg; rm -rf /tmp/kw; mkdir -p /tmp/kw
  taskset -c 0-$(($1-1)) $K -f /tmp/k.cfg -A MODE_REGISTRAR -l udp:127.0.0.1:5060 -n $1 -w /tmp/kw -DD -E -m 2048 -M 32 >/tmp/k.log 2>&1 & SP=$!; up; sleep 0.5; }
stop() { kill $SP; wait $SP 2>/dev/null; sleep 0.3; }
peak() { echo "  $1 peak ($2x$3 flows):" $(timeout 90 taskset -c 8-15 $S bench peak --target 127.0.0.1:5060 --scenario register --threads $2 --flows $3 $5 --start $4 --factor 1.25 --max 4000000 --duration 2 2>&1 | grep -E "peak|sustain" | tail -2); }
echo "== D: 32 flows (8 threads x 4)"
sip 1 spread; peak sipsec-32flows-W1 8 4 70000 "--server-pid $SP"; stop
sip 8 spread; peak sipsec-32flows-spread-W8 8 4 300000 "--server-pid $SP"; stop
sip 8 flow; peak sipsec-32flows-flow-W8 8 4 200000 "--server-pid $SP"; stop
kam 1; peak kamailio-32flows-W1 8 4 20000 "--server-name kamailio"; stop
kam 8; peak kamailio-32flows-W8 8 4 100000 "--server-name kamailio"; stop
echo "== done"
