#!/bin/bash
# Connections on every core, on a 16-core machine (about 4 minutes):
# `bench scale` over TLS (TRANSPORTS adds tcp, with Kamailio) with W
# connection reactors pinned to cores 0…W−1 and the generator on the
# cores above, for one connection (a trunk, loaded by every generator
# thread) and for eight; sipsec with each connection on its reactor
# (`flow`) and with a busy one spread over all (`spread`), beside the
# null responder's reactors. Carry `target/release/sipsec` stripped as
# `sipsec`; run from the repository's root (`bench scale` reads
# interop/users.csv). WS, FLOWS, DUR, START, TRANSPORTS change the
# defaults.
set -u
D=$(cd "$(dirname "$0")" && pwd); S=$D/sipsec
export PATH=$D:$PATH LD_LIBRARY_PATH=$D/klib
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee "$O/conn-scale.txt") 2>&1
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo
ulimit -Sn "$(ulimit -Hn)"; echo "fd $(ulimit -n)"
"$S" --version
sysctl -qw net.core.rmem_max=33554432 net.core.wmem_max=33554432 2>/dev/null
for t in ${TRANSPORTS:-tls}; do
    servers=sipsec,null
    if [ "$t" = tcp ] && [ -x "$D/kamailio" ]; then
        sed -e "s|@MPATH@|$D/klib/modules/|" "$D/kam.cfg.in" > "$D/kam.cfg"
        servers="sipsec,kamailio,null --kamailio-cfg $D/kam.cfg"
    fi
    echo "== $t"
    # shellcheck disable=SC2086
    timeout 300 "$S" bench scale --transport "$t" --servers $servers --balance flow,spread \
        --workers "${WS:-1,8}" --flows "${FLOWS:-1,8}" --pin --duration "${DUR:-1}" \
        --start "${START:-30000}" --factor 1.3 --json "$O/$t.json" --markdown "$O/$t.md"
done
echo "== done"
