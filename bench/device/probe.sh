#!/bin/bash
# One lent run for what issue 51 still asks of a 16-core machine, from
# the repository's root with the folder prepared as README.md says (plus
# tls.pem/tls.key for 127.0.0.1, as cores.sh):
#  1. bisect.sh with the kernel's default socket buffer limits (what
#     `bench scale` met when run alone), then again with the limits
#     raised (net.core.rmem_max 32 MiB, as rates.sh and cores.sh set them:
#     the server asks for 4 MiB per socket), with the shared one-flow runs;
#  2. TLS refreshes with 1 and 8 reactors at two refresh rates, so the
#     cost of eight reactors is seen where each is busier.
# B1/B2: RATES for the two bisect passes; SHARED: the one-flow runs;
# TR: refresh rates; CONNS: connections; TROUNDS: rounds of each.
set -u
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee "$O/probe.txt") 2>&1
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo
sysctl net.core.rmem_max net.core.rmem_default net.core.wmem_max
echo "== 1a. bisect, default socket buffer limits"
OUT=$O/default RATES=${B1:-1:60000 1:90000 8:400000} SHARED="" bash "$D/bisect.sh" | grep -v "^== machine"
sysctl -qw net.core.rmem_max=33554432 net.core.wmem_max=33554432 net.core.rmem_default=8388608
echo "== 1b. bisect, buffer limits raised"
OUT=$O/raised RATES=${B2:-1:90000 8:400000} SHARED=${SHARED:-1:90000 8:500000 8:600000} \
  bash "$D/bisect.sh" | grep -v "^== machine"
echo "== 2. TLS refreshes, 1 and 8 reactors"
ulimit -Sn "$(ulimit -Hn)"
for r in ${TR:-10000 30000}; do
  for w in 1 8; do
    echo "-- reactors $w, $r refreshes/s"
    timeout 120 "$D/sipsec" bench connections --servers sipsec --transport tls \
      --connections "${CONNS:-15000}" --workers $w --threads 6 --refresh-rate "$r" --hold 1 \
      --rounds "${TROUNDS:-2}" 2>&1 | grep -iE "per refresh|per open|opened|refreshed|failed"
  done
done
echo "== done"
