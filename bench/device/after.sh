#!/bin/bash
# After gathered writes and the lifted journal budget, on a 16-core
# machine (about 3 minutes, from the repository's root, the folder
# prepared as README.md says):
#  1. one TLS connection loaded by every generator thread, W = 1 and 8
#     reactors, sipsec each connection on its reactor (flow) and spread,
#     beside the null responder (`bench scale --transport tls`);
#  2. `bench scale --pin` for sipsec steered by Call-ID, W = 1 and 8, one
#     flow and 10,000 (the journal budget out of the ramp's reach);
#  3. fixed REGISTER rates from one flow against eight workers with the
#     journal budget lifted, each worker's CPU;
#  4. `bench scale --scenarios invite` for sipsec and Kamailio, W = 1
#     and 8, one flow and eight, the built-in callee on as many threads
#     as the generator.
# WS, R8, GEN, GT change the defaults.
set -u
D=$(cd "$(dirname "$0")" && pwd); S=$D/sipsec
export PATH=$D:$PATH LD_LIBRARY_PATH=$D/klib
O=${OUT:-/tmp/out}; mkdir -p "$O"
GEN=${GEN:-8-15}; GT=${GT:-8}; W8=${W8:-8}
exec > >(tee "$O/after.txt") 2>&1
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo; date -u
ulimit -Sn "$(ulimit -Hn)"
sysctl -qw net.core.rmem_max=33554432 net.core.wmem_max=33554432 net.core.rmem_default=8388608
sed -e "s|@MPATH@|$D/klib/modules/|" "$D/kam.cfg.in" > "$D/kam.cfg"

echo "== 1. one TLS connection"
timeout 100 "$S" bench scale --transport tls --servers sipsec,null --balance flow,spread \
  --workers "${WS:-1,8}" --flows 1 --pin --duration 1 --start 30000 --factor 1.3 \
  --json "$O/tls.json" --markdown "$O/tls.md"

echo "== 2. scale: sipsec call"
timeout 100 "$S" bench scale --pin --duration 1 --start 60000 --refine 1 --servers sipsec \
  --balance call --workers "${WS:-1,8}" --flows 1,10000 --json "$O/scale.json" --markdown "$O/scale.md"

echo "== 3. one flow, eight workers, journal budget lifted"
printf '[registrar]\njournal_rate = 17179869184\njournal_burst = 17179869184\n' > /tmp/j.toml
up() { for _ in $(seq 200); do grep -q ":13C4 " /proc/net/udp && return; sleep 0.05; done; }
for r in ${R8:-850000 1000000}; do
  rm -rf /tmp/sd
  taskset -c "0-$((W8 - 1))" "$S" serve --config /tmp/j.toml --mode registrar --udp 127.0.0.1:5060 \
    --no-tcp --no-http --workers "$W8" --data-dir /tmp/sd >/tmp/s.log 2>&1 & SP=$!; up
  echo "-- W=$W8, $r/s, $GT threads on one flow"
  timeout 40 taskset -c "$GEN" "$S" bench run --target 127.0.0.1:5060 --scenario register \
    --rate "$r" --calls $((r * 4)) --duration 4 --threads "$GT" --flows 1 --share-flows \
    --busy-poll --server-pid $SP 2>&1 | grep -E "calls/s|failed:|latency|server CPU" | grep -v " s  "
  for t in /proc/$SP/task/*; do c=$(cat "$t/comm"); case $c in udp-*) echo -n "$c $(awk '{print $14+$15}' "$t/stat")  ";; esac; done; echo
  kill $SP; wait $SP 2>/dev/null
done

echo "== 4. scale: INVITE, sipsec and kamailio"
timeout 150 "$S" bench scale --pin --duration 1 --start 10000 --servers sipsec,kamailio \
  --kamailio-cfg "$D/kam.cfg" --scenarios invite --workers "${WS:-1,8}" --flows 1,8 \
  --json "$O/invite.json" --markdown "$O/invite.md"
echo "== done"; date -u
