#!/bin/bash
# The profile-guided build against the plain one on a 16-core machine
# (about 4 minutes): `bench scale` for both builds beside the null
# responder at 1 and 8 workers, 1 and 8 flows; then TLS refreshes with 1
# and 8 reactors for both builds. Carry a plain build (`./setup.sh
# --server-only --plain`) stripped as `sipsec` and the profile-guided one
# (`./setup.sh`'s, or `target/pgo/release/sipsec` from
# packaging/pgo-build.sh) stripped as `sipsec-pgo`; run from the repository's root (`bench
# scale` reads interop/users.csv). WS, FLOWS, DUR, START, REFINE, CONNS,
# RATE, T1, T2 change the defaults.
set -u
D=$(cd "$(dirname "$0")" && pwd); S=$D/sipsec; P=$D/sipsec-pgo
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee "$O/log.txt") 2>&1
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo
ulimit -Sn "$(ulimit -Hn)"; echo "fd $(ulimit -n)"
"$S" --version; "$P" --version
sysctl -qw net.core.rmem_max=33554432 net.core.wmem_max=33554432 net.core.rmem_default=8388608 2>/dev/null
echo "== scale: PGO, plain, null"
timeout "${T1:-240}" "$P" bench scale --servers "sipsec@$P,sipsec@$S,null" --pin \
    --duration "${DUR:-1}" --start "${START:-60000}" --refine "${REFINE:-2}" \
    --workers "${WS:-1,8}" --flows "${FLOWS:-1,8}" --json "$O/scale.json" --markdown "$O/scale.md"
echo "== TLS refreshes: 1 and 8 reactors"
for w in ${REACTORS:-1 8}; do
    timeout "${T2:-60}" "$P" bench connections --servers "sipsec@$P,sipsec@$S,null" \
        --transport tls --connections "${CONNS:-15000}" --workers "$w" --threads 6 \
        --refresh-rate "${RATE:-10000}" --hold 1 --json "$O/tls-$w.json" --markdown "$O/tls-$w.md"
done
echo "== done"
