#!/usr/bin/env bash
# Runs sip-udp's unit tests (the eBPF programs among them: Call-ID
# steering, the AF_XDP redirect) under another Linux kernel, by default
# Debian 12's 6.1, in a QEMU guest (emulated: no KVM needed; the boot
# takes seconds): the verifier that decides whether a program loads is
# the guest kernel's, not this machine's.
#
#   packaging/kernel-check.sh [KERNEL-PACKAGE] [TEST-FILTER]
#
# KERNEL-PACKAGE is a Debian kernel image package (default: the newest
# linux-image-6.1.*-cloud-amd64-unsigned the archive lists); TEST-FILTER
# narrows the tests as `cargo test` does (default: by_call). Needs root,
# qemu-system-x86 and busybox-static (installed here when missing).
# Exits with the tests' status.
set -euo pipefail
cd "$(dirname "$0")/.."
filter=${2:-by_call}
work=$(mktemp -d /tmp/sipsec-kernel-XXXX)
trap 'rm -rf "$work"' EXIT

for pkg in qemu-system-x86 busybox-static; do
    dpkg -s "$pkg" >/dev/null 2>&1 || apt-get install -y -q "$pkg" >/dev/null
done
pkg=${1:-$(apt-cache search --names-only '^linux-image-6\.1\.[0-9.-]+-cloud-amd64-unsigned$' |
    awk '{print $1}' | sort -V | tail -1)}
(cd "$work" && apt-get download -qq "$pkg" >/dev/null 2>&1 && dpkg-deb -x ./*.deb kernel)
vmlinuz=$(ls "$work"/kernel/boot/vmlinuz-*)

# The tests, linked statically: the guest has nothing else.
bin=$(RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR=target/kernel-check \
    cargo test -p sip-udp --lib --locked --target x86_64-unknown-linux-gnu --no-run \
    --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)

root=$work/root
mkdir -p "$root"/{bin,proc,sys,tmp}
cp /bin/busybox "$root/bin/busybox"
cp "$bin" "$root/tests"
cat >"$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox ip link set lo up
echo "kernel \$(/bin/busybox uname -r)"
/tests --test-threads 1 $filter
echo "tests exited \$?"
/bin/busybox poweroff -f
EOF
chmod +x "$root/init"
(cd "$root" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$work/initrd.gz"

timeout 240 qemu-system-x86_64 -accel tcg -cpu max -m 1024 -nographic -nic none -no-reboot \
    -kernel "$vmlinuz" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1" | tee "$work/console.log" | grep -v '^\s*$' || true
grep -q "tests exited 0" "$work/console.log"
