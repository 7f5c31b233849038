#!/bin/bash
# What about a server started by `bench scale` costs more than one started
# from the shell (probe3.sh): one 2 s step of R REGISTER/s from `bench
# peak` against a server started from the shell on 5060 (as probe3.sh),
# on another port, with its output to /dev/null, born on the
# generator's CPUs, and as a child of a busy-polling generator.
set -u
D=$(cd "$(dirname "$0")" && pwd); S=$D/sipsec
O=${OUT:-/tmp/out}; mkdir -p "$O"
GEN=${GEN:-8-15}; GT=${GT:-8}; W=${W:-8}; R=${R:-400000}
exec > >(tee "$O/probe4.txt") 2>&1
echo "== machine"; nproc; uname -r; lscpu | grep -iE "numa|socket|thread|model name"
ulimit -Sn "$(ulimit -Hn)"
sysctl -qw net.core.rmem_max=33554432 net.core.wmem_max=33554432 net.core.rmem_default=8388608
up() { local hex; hex=$(printf ':%04X ' "$1"); for _ in $(seq 200); do grep -q "$hex" /proc/net/udp && return; sleep 0.05; done; }
peak() { # port pid
  timeout 60 taskset -c "$GEN" "$S" bench peak --target "127.0.0.1:$1" --scenario register \
    --threads "$GT" --flows 1 --busy-poll --start "$R" --max "$R" --duration 2 \
    --server-pid "$2" 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ "
}
srv() { # port output [prefix...]
  rm -rf /tmp/sd
  "${@:3}" taskset -c "0-$((W - 1))" "$S" serve --mode registrar --udp "127.0.0.1:$1" --no-http \
    --workers "$W" --udp-balance spread --data-dir /tmp/sd >"$2" 2>&1 & SP=$!; up "$1"
}
for round in 1 2; do
  echo "-- round $round: shell, 5060, log file"; srv 5060 /tmp/s.log; peak 5060 $SP; kill $SP; wait $SP 2>/dev/null
  echo "-- port 45678"; srv 45678 /tmp/s.log; peak 45678 $SP; kill $SP; wait $SP 2>/dev/null
  echo "-- output to /dev/null"; srv 5060 /dev/null; peak 5060 $SP; kill $SP; wait $SP 2>/dev/null
  echo "-- born on $GEN"; srv 5060 /tmp/s.log taskset -c "$GEN"; peak 5060 $SP; kill $SP; wait $SP 2>/dev/null
  echo "-- bench scale's own"
  timeout 60 "$S" bench scale --servers sipsec --sipsec-exe "$S" --balance spread --workers "$W" \
    --flows "$GT" --threads "$GT" --start "$R" --max "$R" --duration 2 --pin --json "$O/s$round.json" \
    2>&1 | grep -E "^sipsec"
  python3 -c "import json,sys; [print('  ', s) for c in json.load(open(sys.argv[1]))['results'] for s in c['steps'][:1]]" "$O/s$round.json"
done
echo "== done"
