#!/bin/bash
# Every core for every peer, on a 16-core machine, from a folder prepared
# as README.md says (plus tls.pem and tls.key: a certificate for
# 127.0.0.1, e.g. `openssl req -x509 -newkey ec -pkeyopt
# ec_paramgen_curve:P-256 -nodes -subj /CN=localhost -addext
# basicConstraints=critical,CA:FALSE -addext
# subjectAltName=IP:127.0.0.1`), run from the repository's root:
#  1. `bench scale --pin`: sipsec (spread) and Kamailio, W = 1, 2, 4, 8,
#     for 8 and 10,000 flows;
#  2. REGISTER at a moderate rate, one worker on core 0, the generator on
#     GEN: sipsec with batch_wait_us 0 and 500, then `bench compare`
#     against Kamailio at the same rate;
#  3. TLS refreshes with 1 and 8 reactors (`bench connections`);
#  4. one busy TLS connection, 8 reactors: every message on its reactor
#     (spread_above = 0) against spread over all (`bench peak`), loaded
#     by GT4 generator threads sharing the connection (--share-flows).
# WS, FLOWS, T1, RATE, CONNS, GEN, GT4 change the defaults.
set -u
D=$(cd "$(dirname "$0")" && pwd); S=$D/sipsec
export PATH=$D:$PATH LD_LIBRARY_PATH=$D/klib
O=${OUT:-/tmp/out}; mkdir -p $O
GEN=${GEN:-8-15}
exec > >(tee $O/cores.txt) 2>&1
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo
ulimit -Sn $(ulimit -Hn); echo "fd $(ulimit -n)"
ldd $S | grep "not found"; ldd $D/kamailio | grep "not found"
sysctl -qw net.core.rmem_max=33554432 net.core.wmem_max=33554432 net.core.rmem_default=8388608 2>/dev/null
sed -e "s|@MPATH@|$D/klib/modules/|" $D/kam.cfg.in > $D/kam.cfg
thr() { for t in /proc/$1/task/*; do echo "$(cat $t/comm) $(awk '{print $14+$15}' $t/stat)"; done | sort; }

echo "== 1. scale: sipsec spread and kamailio"
timeout ${T1:-220} $S bench scale --pin --duration 1 --start 40000 --kamailio-cfg $D/kam.cfg \
  --servers sipsec,kamailio --balance spread --workers ${WS:-1,2,4,8} --flows ${FLOWS:-8,10000} \
  --json $O/scale.json --markdown $O/scale.md --html $O/scale.html

R=${RATE:-8000}
echo "== 2. REGISTER at $R/s, one pinned worker"
for w in 0 500 0 500; do
  rm -rf /tmp/sd; taskset -c 0 $S serve --mode registrar --udp 127.0.0.1:5060 --no-tcp --no-http \
    --workers 1 --data-dir /tmp/sd --batch-wait-us $w >/tmp/s.log 2>&1 & SP=$!; sleep 1
  echo "-- sipsec batch_wait_us $w"
  timeout 30 taskset -c $GEN $S bench run --target 127.0.0.1:5060 --scenario register --rate $R \
    --calls $((R * 5)) --duration 5 --server-pid $SP 2>&1 | grep -E "latency|server CPU"
  kill $SP; wait $SP 2>/dev/null
done
timeout 60 $S bench compare --servers sipsec,kamailio --scenarios register --auth-modes none \
  --rate $R --calls $((R * 5)) --pin --rounds 1 --kamailio-cfg $D/kam.cfg 2>&1 | tail -3

echo "== 3. TLS refreshes, 1 and 8 reactors"
for w in 1 8; do
  echo "-- reactors $w"
  timeout 70 $S bench connections --servers sipsec --transport tls --connections ${CONNS:-10000} \
    --workers $w --threads 6 --refresh-rate 10000 --hold 2 2>&1 | grep -iE "per refresh|per open|opened|refreshed"
done

echo "== 4. one busy TLS connection, 8 reactors"
for above in 0 2000; do
  rm -rf /tmp/sd; printf '[connections]\nreactors = 8\nspread_above = %s\naccept_rate = 0\n' $above > /tmp/c.toml
  taskset -c 0-7 $S serve --config /tmp/c.toml --mode registrar --udp 127.0.0.1:5060 --no-http \
    --workers 1 --data-dir /tmp/sd --cert $D/tls.pem --key $D/tls.key --tls 127.0.0.1:5061 >/tmp/s.log 2>&1 & SP=$!; sleep 1
  thr $SP > /tmp/t0
  echo "-- spread_above $above"
  timeout 45 taskset -c $GEN $S bench peak --target 127.0.0.1:5061 --transport tls --tls-ca $D/tls.pem \
    --threads ${GT4:-4} --share-flows --flows 1 --scenario register --start 30000 --factor 1.3 --duration 1 --server-pid $SP 2>&1 | grep -iE "peak|sustain"
  thr $SP > /tmp/t1
  echo "threads' CPU ticks (top 9):"; join /tmp/t0 /tmp/t1 | awk '{print $1, $3-$2}' | sort -k2 -n -r | head -9 | tr '\n' ' '; echo
  kill $SP; wait $SP 2>/dev/null
done
echo "== done"
