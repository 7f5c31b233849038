#!/usr/bin/env bash
# Prints the flags of the profile-guided release build, when packaging/pgo
# holds a profile this rustc reads (symbol names and the profile's format
# are rustc's): the compiler places the code the profile saw run together
# and inlines by it (docs/bench.md, "A profile-guided build"). Functions
# changed since the profile was made are built as without one. Prints
# nothing, and says why on standard error, when there is no such profile.
#
# setup.sh builds target/release/sipsec with these flags, and whatever
# builds it again (packaging/kernel-check.sh) must pass the same ones:
# with other RUSTFLAGS cargo rebuilds every crate and the profile-guided
# server is replaced by one built without its profile.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=packaging/pgo
[ -f $dir/sipsec.profdata.xz ] && [ -f $dir/rustc.txt ] || exit 0
want=$(sed -n 's/^commit-hash: //p' $dir/rustc.txt)
have=$(rustc -vV | sed -n 's/^commit-hash: //p')
if [ "$want" != "$have" ]; then
    echo "pgo-flags.sh: $dir's profile is for rustc $(sed -n 's/^release: //p' $dir/rustc.txt)" \
        "(${want:0:9}), this is $(rustc -V): building without it" \
        "(packaging/pgo-build.sh --save makes one for this rustc)" >&2
    exit 0
fi
mkdir -p target/pgo
profile=target/pgo/committed.profdata
# Written only when it changed: rewriting the same profile would make
# cargo build everything again.
if ! xz -dc $dir/sipsec.profdata.xz | cmp -s - $profile 2>/dev/null; then
    if ! xz -dc $dir/sipsec.profdata.xz > $profile.new; then
        rm -f $profile.new
        echo "pgo-flags.sh: could not decompress $dir/sipsec.profdata.xz (xz-utils): building without it" >&2
        exit 0
    fi
    mv $profile.new $profile
fi
echo "-Cprofile-use=$PWD/$profile" \
    "-Cllvm-args=-pgo-warn-missing-function=false -Cllvm-args=-no-pgo-warn-mismatch"
