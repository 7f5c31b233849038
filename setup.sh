#!/usr/bin/env bash
# Installs what sipsec needs on Debian/Ubuntu and builds the release binary.
# With --server-only, installs only what building the server needs (a C
# toolchain, pkg-config, OpenSSL headers) and builds it: no peers, browsers
# or benchmark tools. With --crypto-bench, installs only what the adapters
# of `sipsec crypto-bench` need (crossbench/) and builds nothing.
# The release binary is built profile-guided from the profile committed in
# packaging/pgo when this rustc is the one it was made for, plain
# otherwise; --plain builds it plain anyway.
# Safe to run again; uses sudo only when not root.
set -euo pipefail
cd "$(dirname "$0")"

ALL=1
SERVER_ONLY=0
PLAIN=0
usage() {
    echo "usage: ./setup.sh [--server-only | --crypto-bench] [--plain]" >&2
    exit 2
}
for arg in "$@"; do
    case "$arg" in
        --crypto-bench) ALL=0 ;;
        --server-only) ALL=0 SERVER_ONLY=1 ;;
        --plain) PLAIN=1 ;;
        *) usage ;;
    esac
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    # C toolchain for build scripts (libfuzzer-sys); OpenSSL 3 headers and
    # CLI for the RSA variants and their interop tests; SIPp (sip-tester),
    # sipsak and the baresip softphone for the interop tests; Kamailio, the
    # peer `sipsec bench compare` measures against; rsvg-convert for PNG plots;
    # kamailio-tls-modules and kamailio-websocket-modules for `sipsec bench
    # connections --server kamailio` over TLS, WS and WSS;
    # libsrtp2-dev for the headers of the C peer over libsrtp (interop/srtp);
    # tcpdump for the PrivaSIP capture test (no user ID between proxies);
    # chromium (headless, fake media devices) for the browser-phone tests
    # over WebSocket (web/phone), with npm (below) for JsSIP;
    # secsipidx (STIR/SHAKEN signer and verifier, the independent
    # implementation the interop tests check against) and
    # kamailio-secsipid-modules (Kamailio's STIR/SHAKEN, the peer);
    # rtpengine-daemon, the media relay the NG client's tests start
    # (userspace only, on free ports; its packaged service is stopped);
    # redis-server for the shared location of several nodes (the
    # scale-out tests start their own on a free port); dnsmasq-base, the
    # name server the DNS tests start on a free port (no service);
    # iproute2 (`ip netns`, `ip link`) for the veth pair and namespace
    # `sipsec bench xdp` and the AF_XDP tests make;
    # python3-prometheus-client, the reference parser the /metrics test
    # reads the exposition with; systemd for `systemd-analyze verify` of
    # the packaged unit (packaging/sipsec.service), man-db for the manual
    # page it names;
    # qemu-system-x86 and busybox-static for packaging/kernel-check.sh,
    # which runs the eBPF programs' tests under Debian's own kernels;
    # the adapters of `sipsec crypto-bench` (crossbench/): golang-go (Go),
    # libcrypto++-dev and libbenchmark-dev (C++: Crypto++, Google
    # Benchmark), a JDK and maven (Java: BouncyCastle and JMH).
    PACKAGES="build-essential pkg-config libssl-dev xz-utils librsvg2-bin golang-go
        libcrypto++-dev libbenchmark-dev default-jdk-headless maven"
    if [ "$SERVER_ONLY" = 1 ]; then
        PACKAGES="build-essential pkg-config libssl-dev xz-utils"
    fi
    if [ "$ALL" = 1 ]; then
        PACKAGES="$PACKAGES openssl ca-certificates sip-tester sipsak baresip-core
            kamailio kamailio-tls-modules kamailio-websocket-modules libsrtp2-dev tcpdump chromium
            redis-server dnsmasq-base python3-prometheus-client systemd man-db
            rtpengine-daemon secsipidx kamailio-secsipid-modules iproute2
            qemu-system-x86 busybox-static"
    fi
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $PACKAGES >/dev/null
    # Debian's npm only where there is none (a Node.js from elsewhere
    # brings its own, and Debian's would conflict with it).
    if [ "$ALL" = 1 ] && ! command -v npm >/dev/null 2>&1; then
        $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
    fi
    # Debian starts the packaged Kamailio service, which would hold port
    # 5060 that `sipsec serve` uses by default; the benchmarks start their
    # own Kamailio, and the tests their own redis-server. Stop and disable
    # the services where systemd runs.
    if [ "$ALL" = 1 ] && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        $SUDO systemctl disable --now kamailio.service >/dev/null 2>&1 || true
        $SUDO systemctl disable --now redis-server.service >/dev/null 2>&1 || true
        $SUDO systemctl disable --now rtpengine-daemon.service >/dev/null 2>&1 || true
    fi
else
    echo "setup.sh: apt-get not found; install a C toolchain and pkg-config yourself" >&2
fi

# SIPVicious (svwar, svcrack) for the scanner tests; pylibsrtp (a wheel
# bundling libsrtp 2.7 built on OpenSSL) for the SRTP differential tests
# and the libsrtp side of `sipsec bench srtp`; cryptography (with its
# bundled OpenSSL), PyCryptodome and pytest-benchmark for the Python
# adapters of `sipsec crypto-bench` (crossbench/python).
if [ "$SERVER_ONLY" = 0 ] && command -v python3 >/dev/null 2>&1; then
    PY_PACKAGES="cryptography==48.0.0 pycryptodome==3.23.0 pytest-benchmark==5.3.1"
    if [ "$ALL" = 1 ]; then
        PY_PACKAGES="sipvicious==0.3.8 pylibsrtp==0.12.0 $PY_PACKAGES"
    fi
    # shellcheck disable=SC2086
    python3 -m pip install --quiet --disable-pip-version-check $PY_PACKAGES \
        || echo "setup.sh: could not install the Python packages ($PY_PACKAGES); the tests that use them will fail" >&2
fi

if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "setup.sh: Rust (cargo) is required: install it with rustup, then rerun" >&2
        exit 1
    fi
fi

# The browser phone (web/phone): JsSIP and esbuild from npm at the
# versions package-lock.json pins, bundled into web/phone/vendor/jssip.js.
if [ "$ALL" = 1 ]; then
    if command -v npm >/dev/null 2>&1; then
        npm ci --prefix web --no-audit --no-fund --loglevel=error
        npm run --prefix web --silent build
    else
        echo "setup.sh: npm not found; the browser phone (web/phone) and its tests need it" >&2
    fi
fi

if [ "$ALL" = 1 ] || [ "$SERVER_ONLY" = 1 ]; then
    # Profile-guided when packaging/pgo holds a profile this rustc reads
    # (packaging/pgo-flags.sh; docs/bench.md, "A profile-guided build").
    PGO=""
    if [ "$PLAIN" = 0 ]; then
        PGO=$(packaging/pgo-flags.sh)
    fi
    # What it was built with, for what builds it again (the kernel check).
    mkdir -p target/pgo && printf '%s\n' "$PGO" > target/pgo/flags.txt
    if [ -n "$PGO" ]; then
        RUSTFLAGS="${RUSTFLAGS:-} $PGO" cargo build --release --locked -p sipsec
        echo "setup.sh: built target/release/sipsec profile-guided" \
            "(packaging/pgo, $(sed -n 's/^trained-on: /trained on /p' packaging/pgo/rustc.txt))"
    else
        cargo build --release --locked -p sipsec
        echo "setup.sh: built target/release/sipsec"
    fi
fi
if [ "$SERVER_ONLY" = 1 ]; then
    exit 0
fi

# crypto-bench's Java libraries (BouncyCastle, JMH) from Maven Central and
# the Rust adapters' crates (aws-lc-rs, RustCrypto rsa, criterion), fetched
# now so that a run needs no registry.
if command -v mvn >/dev/null 2>&1; then
    (cd crossbench/java && mvn -q -B dependency:copy-dependencies \
        -DoutputDirectory="$PWD/../../target/crossbench/java/lib") \
        || echo "setup.sh: could not fetch the Java libraries; the Java adapters of crypto-bench will fail" >&2
fi
cargo fetch --locked --manifest-path crossbench/rust/Cargo.toml
