#!/bin/bash
# One busy peer against W UDP workers: REGISTER at a fixed rate from one
# generator socket (one flow), the server's CPU per call, the whole
# machine's (every CPU's busy time, the generator's and the kernel's
# softirq work included: on loopback a reuseport program runs on the
# sender's CPU) and each worker's CPU ticks (10 ms) during the run, for
# each --udp-balance mode.
#
#   bash bench/udp-balance.sh [RATE] [WORKERS] [ROUNDS]
#
# Loopback only; bounded (RATE x 4 s per run). Needs target/release/sipsec.
set -u
S=${SIPSEC:-target/release/sipsec}
R=${1:-60000}; W=${2:-2}; N=${3:-3}; PORT=${PORT:-5960}
HEX=$(printf '%04X' "$PORT")
D=$(mktemp -d); trap 'rm -rf "$D"' EXIT
busy() { awk '/^cpu / {print $2+$3+$4+$7+$8+$9}' /proc/stat; }
ticks() { for t in /proc/$1/task/*; do echo "$(cat "$t/comm") $(awk '{print $14+$15}' "$t/stat")"; done | sort; }
one() { # BALANCE WORKERS
  rm -rf "$D/data"
  "$S" serve --mode registrar --udp 127.0.0.1:$PORT --no-tcp --no-http --workers "$2" \
    --udp-balance "$1" --data-dir "$D/data" >"$D/serve.log" 2>&1 & local sp=$!
  # Ready: the port bound and every worker's thread started.
  for _ in $(seq 100); do
    grep -q ":$HEX " /proc/net/udp && grep -qx "udp-$(($2 - 1))" /proc/$sp/task/*/comm && break
    sleep 0.05
  done
  ticks $sp >"$D/t0"
  local cpu b0 b1 hz
  b0=$(busy)
  cpu=$("$S" bench run --target 127.0.0.1:$PORT --scenario register --threads 1 --flows 1 \
    --rate "$R" --calls $((R * 4)) --duration 4 --drain 2 --server-pid $sp 2>&1 |
    grep -oE '[0-9.]+ µs per successful call|[0-9]+ failed' | tr '\n' ' ')
  b1=$(busy); hz=$(getconf CLK_TCK)
  ticks $sp >"$D/t1"
  echo "$1 W=$2: $cpu| machine $(awk -v b="$((b1 - b0))" -v hz="$hz" -v n="$((R * 4))" \
    'BEGIN {printf "%.1f", b / hz * 1e6 / n}') µs per call | workers:" \
    $(join "$D/t0" "$D/t1" | awk '$1 ~ /^udp-/ {print $1"="$3-$2}')
  kill $sp; wait $sp 2>/dev/null
}
for round in $(seq "$N"); do
  echo "-- round $round: one flow at $R REGISTER/s"
  one flow 1
  for b in call spread shared flow; do one $b "$W"; done
done
