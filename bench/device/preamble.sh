# Sourced by wake.sh and watch.sh (copy it beside them): $1 names the
# log written under $OUT. Sets D (the prepared folder), S (the build
# after the change in it) and O (the output folder), records the
# machine, and lifts the descriptor limit and socket buffers.
D=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd); S=$D/after
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee "$O/$1.txt") 2>&1
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo; date -u
ulimit -Sn "$(ulimit -Hn)"
sysctl -qw net.core.rmem_max=33554432 net.core.wmem_max=33554432 net.core.rmem_default=8388608
