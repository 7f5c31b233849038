#!/usr/bin/env bash
# Runs every check CI runs: formatting, lints, all tests, a build of the
# fuzz targets (their properties also run inside the test suite), and
# sip-udp's tests again under Debian 11's, 12's and 13's kernels
# (packaging/kernel-check.sh).
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi

echo "== cargo fmt --check (at ${SECONDS} s)"
cargo fmt --all -- --check
echo "== cargo clippy (at ${SECONDS} s)"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== crypto-bench's Rust adapters (crossbench/rust, its own workspace) (at ${SECONDS} s)"
# Linted in release mode in the target directory where the crypto-bench
# test builds them (tests/crypto_bench.rs): aws-lc's C is compiled once.
(cd crossbench/rust && cargo fmt --check && \
    cargo clippy --release --locked --all-targets --quiet --target-dir ../../target/tmp/crossbench/rust -- -D warnings)
echo "== fuzz targets compile (at ${SECONDS} s)"
(cd fuzz && cargo check --locked --quiet --no-default-features)
echo "== cargo test (at ${SECONDS} s)"
cargo test --workspace --locked
echo "== sip-udp's tests (the eBPF programs) under Debian's kernels 5.10, 6.1 and 6.12, in QEMU (at ${SECONDS} s)"
packaging/kernel-check.sh bullseye,bookworm,bookworm-security:6.1,trixie tests
echo "== all checks passed in ${SECONDS} s"
