#!/usr/bin/env bash
# Builds a profile-guided sipsec: target/pgo/release/sipsec.
#
# 1. Builds sipsec instrumented to count what runs (rustc
#    -Cprofile-generate), in target/pgo/instrumented.
# 2. Runs it under the benchmark harness's own loads, on loopback only
#    and bounded in calls: REGISTER and INVITE over UDP (one worker and
#    two) and TCP, with and without digest; phones held on TCP, TLS, WS
#    and WSS connections; STIR/SHAKEN signing and verifying; and, where
#    their peers are installed, calls through a trunk with their dialogs
#    and records (Kamailio is the other server of that bench), two nodes
#    sharing a location in Redis, and calls whose media crosses rtpengine.
#    Code no load runs (PrivaSIP, forking, DNS, AF_XDP) is compiled as
#    cold: measure a path before relying on this build for it. The null
#    responder (`bench null`) is trained too, so that the floor the
#    server is measured against is built the same way.
# 3. Merges the counts with llvm-profdata (rustup's llvm-tools, whose LLVM
#    is rustc's) and builds again with them (-Cprofile-use): the compiler
#    then places the code that ran together and inlines by what ran.
#
# The binary's version carries "+pgo" (`sipsec --version`, every
# report's provenance, sipsec_build_info). What it gains is measured in
# docs/bench.md ("A profile-guided build"). Two release builds and about
# two minutes of loads: 6-8 minutes on two cores.
#
# With --save, the merged profile is also written, compressed, to
# packaging/pgo/sipsec.profdata.xz with the rustc that can read it in
# packaging/pgo/rustc.txt: ./setup.sh builds the release binary with that
# profile (no training, no second build) when its rustc is that one.
# Run it with --save after changes to the hot paths, and commit both files.
#
# Usage: packaging/pgo-build.sh [--save]   (after ./setup.sh, which installs the peers)
set -euo pipefail
cd "$(dirname "$0")/.."

SAVE=0
case "${1:-}" in
    "") ;;
    --save) SAVE=1 ;;
    *)
        echo "usage: packaging/pgo-build.sh [--save]" >&2
        exit 2
        ;;
esac

OUT="$PWD/target/pgo"
RAW="$OUT/profiles/raw"
MERGED="$OUT/profiles/sipsec.profdata"

host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
    if command -v rustup >/dev/null 2>&1; then
        rustup component add llvm-tools
    fi
    if [ ! -x "$profdata" ]; then
        echo "pgo-build.sh: $profdata is missing; install rustup's llvm-tools component (its LLVM must be rustc's)" >&2
        exit 1
    fi
fi

rm -rf "$OUT/profiles"
mkdir -p "$RAW"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$RAW" \
    cargo build --release --locked -p sipsec --target-dir "$OUT/instrumented"
G="$OUT/instrumented/release/sipsec"

train() {
    echo "pgo-build.sh: training: sipsec $*"
    # Every process a load starts (servers, generators, the null
    # responder) merges its counts into one file per binary (%m) at exit.
    LLVM_PROFILE_FILE="$RAW/sipsec-%m.profraw" "$G" "$@" >/dev/null
}
train bench compare --servers sipsec,null --scenarios register,invite --auth-modes none \
    --rate 4000 --calls 20000
train bench compare --servers sipsec --scenarios register,invite --auth-modes digest \
    --rate 2000 --calls 10000 --workers 2
train bench compare --servers sipsec,null --scenarios register --auth-modes none \
    --rate 4000 --calls 20000 --transport tcp
for t in tcp tls; do
    train bench connections --servers sipsec,null --transport "$t" --connections 1000 \
        --refresh-rate 1000 --hold 1
done
for t in ws wss; do
    train bench connections --servers sipsec --transport "$t" --connections 1000 \
        --refresh-rate 1000 --hold 1
done
train bench stir --no-kamailio --calls 2000 --rounds 1
# Every security layer once, small: digest, TLS handshakes in each key
# kind, SRTP, PrivaSIP's schemes, so that none of them is compiled as cold.
train bench security --quick --no-kamailio
if command -v kamailio >/dev/null 2>&1; then
    train bench trunk --calls 500 --rounds 1
else
    echo "pgo-build.sh: Kamailio not installed: the trunk's dialogs and records are not trained"
fi
if command -v redis-server >/dev/null 2>&1; then
    train bench connections --servers sipsec --nodes 2 --transport tcp --connections 1000 \
        --refresh-rate 1000 --hold 1
else
    echo "pgo-build.sh: redis-server not installed: the shared location is not trained"
fi
if command -v rtpengine >/dev/null 2>&1; then
    train bench relay --calls 20 --seconds 3
else
    echo "pgo-build.sh: rtpengine not installed: the media relay's control is not trained"
fi

"$profdata" merge -o "$MERGED" "$RAW"
if [ "$SAVE" = 1 ]; then
    mkdir -p packaging/pgo
    xz -9 -T2 -c "$MERGED" > packaging/pgo/sipsec.profdata.xz
    # What setup.sh compares with its rustc before using the profile
    # (symbol names and the profile's format are rustc's and its LLVM's).
    rustc -vV | sed -n 's/^\(release\|commit-hash\|LLVM version\): /\1: /p' > packaging/pgo/rustc.txt
    echo "trained-on: $(git rev-parse --short=12 HEAD)" >> packaging/pgo/rustc.txt
    echo "pgo-build.sh: saved packaging/pgo/sipsec.profdata.xz ($(wc -c < packaging/pgo/sipsec.profdata.xz) bytes) for rustc $(sed -n 's/^release: //p' packaging/pgo/rustc.txt)"
fi
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$MERGED -Cllvm-args=-pgo-warn-missing-function=false" \
    cargo build --release --locked -p sipsec --target-dir "$OUT"
"$OUT/release/sipsec" --version
echo "pgo-build.sh: built target/pgo/release/sipsec"
