#!/usr/bin/env bash
# Builds interop/srtp/libsrtp_peer into $1 and prints the libsrtp it
# loads (the OpenSSL-backed libsrtp 2.7 inside the pylibsrtp wheel).
# Needs libsrtp2-dev (headers) and pylibsrtp, both from setup.sh.
set -euo pipefail
out=${1:?usage: build-peer.sh OUTPUT}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
lib=$("$py" -c 'import pylibsrtp._binding as b; print(b.__file__)')
# The extension module refers to libpython's symbols: link it so dlopen
# can resolve them (never called).
ldflags=$("$py" -c 'import sysconfig as s; print("-L" + s.get_config_var("LIBDIR"), "-Wl,-rpath," + s.get_config_var("LIBDIR"), "-lpython" + s.get_config_var("LDVERSION"))')
cc -O2 -Wall -o "$out" "$here/libsrtp_peer.c" -Wl,--no-as-needed $ldflags -ldl
echo "$lib"
