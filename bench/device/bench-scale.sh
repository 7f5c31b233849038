#!/bin/bash
# `sipsec bench scale` on a 16-core machine: sipsec (steered by Call-ID,
# the default, which needs Linux 6.9 and root; BALANCE adds others, e.g.
# call,spread) and Kamailio at 1, 2, 4, 8 workers on cores 0..W-1 for 1,
# 8 and 10,000 flows, the generator on the cores above; then sipsec with
# the kernel's hash (flow) for 1 and 8 flows. WS, FLOWS, DUR, START,
# REFINE, T1, T2 change the defaults.
set -u
D=$(cd "$(dirname "$0")" && pwd); S=$D/sipsec
export PATH=$D:$PATH LD_LIBRARY_PATH=$D/klib
O=${OUT:-/tmp/out}; mkdir -p $O
exec > >(tee $O/log.txt) 2>&1
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo
ulimit -Sn $(ulimit -Hn); echo "fd $(ulimit -n)"
ldd $S | grep "not found"; ldd $D/kamailio | grep "not found"; which taskset
sysctl -qw net.core.rmem_max=33554432 net.core.wmem_max=33554432 net.core.rmem_default=8388608 2>/dev/null
sed -e "s|@MPATH@|$D/klib/modules/|" $D/kam.cfg.in > $D/kam.cfg
C="--pin --duration ${DUR:-1} --start ${START:-40000} --refine ${REFINE:-2} --kamailio-cfg $D/kam.cfg"
echo "== scale: sipsec ${BALANCE:-call} and kamailio"
$S bench steer --runs 100000 --rounds 1
timeout ${T1:-360} $S bench scale $C --servers sipsec,kamailio --balance ${BALANCE:-call} --workers ${WS:-1,2,4,8} --flows ${FLOWS:-1,8,10000} --json $O/scale.json --markdown $O/scale.md --html $O/scale.html
echo "== scale: sipsec flow"
timeout ${T2:-120} $S bench scale $C --servers sipsec --balance flow --workers ${WS2:-1,8} --flows ${FLOWS2:-1,8} --json $O/scale-flow.json --markdown $O/scale-flow.md
echo "== done"
