#!/usr/bin/env bash
# Runs one fuzz target for a bounded time: fuzz/run.sh TARGET SECONDS
# Needs a nightly toolchain and cargo-fuzz (cargo install cargo-fuzz).
set -euo pipefail
cd "$(dirname "$0")"
target=${1:?target: message | uri | digest_header}
secs=${2:-600}
mkdir -p "corpus/$target"
if [ "$target" = message ]; then
    cp ../crates/sip-core/testdata/rfc4475/*/*.sip "corpus/$target/"
fi
exec cargo +nightly fuzz run "$target" "corpus/$target" -- -max_total_time="$secs" -max_len=4096
