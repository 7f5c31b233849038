#!/usr/bin/env bash
# Runs sip-udp's unit tests (the eBPF programs among them: Call-ID
# steering, the AF_XDP redirect) under other Linux kernels, each in a
# QEMU guest (emulated: no KVM needed; a boot takes seconds): the
# verifier that decides whether a program loads is the guest kernel's,
# not this machine's. Then, in the same guest, the release server with
# two workers takes 200 REGISTERs over UDP and 200 over TCP from
# `sipsec bench run` on loopback: every one answered, the workers
# balanced by Call-ID where the kernel has bpf_loop (Linux 5.17), and
# where it has not, the warning that says so.
#
#   packaging/kernel-check.sh [SUITES] [TEST-FILTER]
#
# SUITES is a comma-separated list of Debian suites (default: bookworm);
# each gives the newest cloud kernel its archive lists — bullseye 5.10
# (no bound the steering program needs: both refused, the server runs
# as `flow`), bookworm 6.1 (`bpf_loop`), trixie 6.12 (`may_goto`). The
# package lists are fetched into a directory of their own and checked
# by apt against the Debian archive keyring, as the system's are; the
# system's sources are not touched. TEST-FILTER narrows the tests as
# `cargo test` does (default: by_call). Needs root, qemu-system-x86 and
# busybox-static (installed here when missing). Exits non-zero when any
# kernel's tests fail.
set -euo pipefail
cd "$(dirname "$0")/.."
suites=${1:-bookworm}
filter=${2:-by_call}
work=$(mktemp -d /tmp/sipsec-kernel-XXXX)
trap 'rm -rf "$work"' EXIT

for pkg in qemu-system-x86 busybox-static; do
    dpkg -s "$pkg" >/dev/null 2>&1 || apt-get install -y -q "$pkg" >/dev/null
done

# The tests, linked statically: the guest has nothing else.
bin=$(RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR=target/kernel-check \
    cargo test -p sip-udp --lib --locked --target x86_64-unknown-linux-gnu --no-run \
    --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)

# The server as built (dynamically linked: it and the libraries it
# loads, stripped), for a REGISTER load inside the guest. Built with the
# flags setup.sh used (target/pgo/flags.txt; without it, the ones it uses
# by default), so that the build setup.sh made is the one tested: with
# other flags cargo would build every crate again, minutes, and leave a
# server built otherwise in target/release.
if [ -f target/pgo/flags.txt ]; then
    flags=$(cat target/pgo/flags.txt)
else
    flags=$(packaging/pgo-flags.sh)
fi
RUSTFLAGS="${RUSTFLAGS:-} $flags" cargo build --release -p sipsec --locked -q
root=$work/root
mkdir -p "$root"/{bin,proc,sys,tmp,dev}
cp /bin/busybox "$root/bin/busybox"
cp "$bin" "$root/tests"
strip -o "$root/sipsec" target/release/sipsec
for lib in $(ldd target/release/sipsec | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
cat >"$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t tmpfs tmp /tmp
/bin/busybox mount -t devtmpfs dev /dev
/bin/busybox ip link set lo up
echo "kernel \$(/bin/busybox uname -r)"
/tests --test-threads 1 $filter
echo "tests exited \$?"
/bin/busybox sh /server-check
echo "server exited \$?"
/bin/busybox poweroff -f
EOF
# Two workers balanced by Call-ID (the default) where the kernel has
# Linux 5.17's bpf_loop, each sender to one worker (and the warning that
# says why) where it has not; either way every REGISTER answered.
cat >"$root/server-check" <<'EOF'
cd /tmp
/sipsec serve --workers 2 --no-http >serve.log 2>&1 &
i=0
until /bin/busybox grep -q 'listening on' serve.log; do
    i=$((i + 1))
    [ $i -le 600 ] || { echo "the server did not start"; /bin/busybox cat serve.log; exit 1; }
    /bin/busybox sleep 0.1
done
for transport in udp tcp; do
    /sipsec bench run --transport $transport --scenario register --threads 1 --flows 8 \
        --rate 100 --duration 2 >run.txt 2>&1
    /bin/busybox head -2 run.txt
    # Every REGISTER started answered (an emulated CPU may start 199 of
    # the 200 in the two seconds).
    /bin/busybox grep -q ': \([1-9][0-9]*\) started, \1 ok, 0 failed' run.txt || exit 1
done
/bin/busybox grep 'udp_balance' serve.log
release=$(/bin/busybox uname -r)
major=${release%%.*}
minor=${release#*.}
minor=${minor%%[.-]*}
if [ $((major * 100 + minor)) -ge 517 ]; then
    /bin/busybox grep -q 'steered by Call-ID' serve.log
else
    /bin/busybox grep -q 'needs Linux 5.17' serve.log
fi
EOF
chmod +x "$root/init"
(cd "$root" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$work/initrd.gz"

# Downloads the newest cloud kernel of suite $1 (of series $2, e.g. 6.1,
# when given) and prints its vmlinuz.
kernel() {
    local dir=$work/$1
    mkdir -p "$dir"/lists/partial "$dir"/cache "$dir"/deb
    local archive=debian
    [[ $1 == *-security ]] && archive=debian-security
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
        "http://deb.debian.org/$archive $1 main" >"$dir/sources.list"
    local apt=(-q -o Dir::Etc::SourceList="$dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
        -o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir/cache" -o APT::Sandbox::User=root -o Acquire::Languages=none)
    apt-get "${apt[@]}" update >/dev/null
    local pkg
    local version=${2//./\\.}
    pkg=$(apt-cache "${apt[@]}" search --names-only "^linux-image-${version:-[0-9]+}\\.[0-9.]+[-+][a-z0-9.+-]*-cloud-amd64-unsigned\$" |
        awk '{print $1}' | sort -V | tail -1)
    [ -n "$pkg" ] || { echo "no ${2:+$2 }cloud kernel in $1" >&2; return 1; }
    (cd "$dir/deb" && apt-get "${apt[@]}" download "$pkg" >/dev/null 2>&1 && dpkg-deb -x ./*.deb .)
    echo "$pkg" >&2
    ls "$dir"/deb/boot/vmlinuz-*
}

# One kernel: fetched, booted with the tests, its console kept in
# $work/console-ITEM.log.
guest() {
    local item=$1 suite=${1%%:*} series=
    [[ $item == *:* ]] && series=${item#*:}
    local vmlinuz
    vmlinuz=$(kernel "$suite" "$series")
    timeout 240 qemu-system-x86_64 -accel tcg -cpu max -m 2048 -nographic -nic none -no-reboot \
        -kernel "$vmlinuz" -initrd "$work/initrd.gz" \
        -append "console=ttyS0 quiet panic=-1" >"$work/console-$item.log" 2>&1 || true
}

# The guests run side by side, one per core (an emulated CPU is one
# thread); each one's output is shown in order once it has ended.
items=(${suites//,/ })
slots=$(nproc)
pids=()
for i in "${!items[@]}"; do
    if [ "$i" -ge "$slots" ]; then
        wait "${pids[$((i - slots))]}" || true
    fi
    guest "${items[$i]}" >"$work/fetch-${items[$i]}.log" 2>&1 &
    pids+=($!)
done
failed=()
for i in "${!items[@]}"; do
    item=${items[$i]}
    wait "${pids[$i]}" || true
    echo "== $item"
    cat "$work/fetch-$item.log"
    grep -v '^\s*$' "$work/console-$item.log" || true
    grep -q "tests exited 0" "$work/console-$item.log" &&
        grep -q "server exited 0" "$work/console-$item.log" || failed+=("$item")
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "kernel-check: the tests failed under ${failed[*]}" >&2
    exit 1
fi
