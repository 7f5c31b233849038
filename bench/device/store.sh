#!/bin/bash
# What sharing one location store costs each of W workers, apart from
# the kernel: the core bench's refreshes on W threads with one store and
# with a store each (SIPSEC_CORE_WORKERS), on CPUs 0..7. Carry the core
# bench as core-bench beside this script; WS and CPUS change the defaults.
set -u
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee "$O/store.txt") 2>&1
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo
SIPSEC_CORE_WORKERS=${WS:-1,2,4,8} timeout 300 taskset -c "${CPUS:-0-7}" "$D/core-bench" --bench
