#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Programs written for NIXL's C++ API build UNCHANGED against nxl's
# compatibility headers (compat/nixl/include, laid out as they install:
# #include "nixl.h") and libnxl-nixl, and move data over nxl:
#
# 1. tests/nixl-style/kv_copy.cpp, our program in NIXL's style (only
#    <nixl.h>, only NIXL's public API): compiled with
#      $CXX -std=c++17 -I<compat headers> kv_copy.cpp -lnxl-nixl
#    and run over UCX (and LIBFABRIC, where its default provider works here).
# 2. When a checkout of NIXL's source is given (NIXL_SRC, or /work/nixl-src
#    where it exists; never in CI): NIXL's own examples/cpp/nixl_example.cpp
#    and nixl_etcd_example.cpp, compiled from there as they are, against the
#    same headers and library; nixl_example run over UCX, nixl_etcd_example
#    run against a real etcd server when an etcd binary is here. Without the
#    checkout, that part is skipped with its reason.
#
# Exit 77 (skip) when libnxl-nixl was not built (configure
# --enable-nixl-api=no, or no C++ compiler) or UCX cannot be created here.
set -u
fail() { echo "nixl_example_build: FAIL: $*" >&2; exit 1; }
skip() { echo "nixl_example_build: SKIP: $*"; exit 77; }
note() { echo "nixl_example_build: $*"; }

srcdir=${srcdir:-.}
top=$(cd "$srcdir" && pwd)
build=$(pwd)
CXX=${CXX:-c++}
command -v "$CXX" >/dev/null 2>&1 || skip "no C++ compiler ($CXX)"
inc="$top/compat/nixl/include"
[ -f "$inc/nixl.h" ] || fail "$inc/nixl.h is missing"

lib=$(find "$build" -name 'libnxl-nixl.so' -path '*/.libs/*' 2>/dev/null | head -n 1)
[ -n "$lib" ] || skip "libnxl-nixl was not built here (configure --enable-nixl-api)"
libdir=$(dirname "$lib")
nxllib=$(find "$build" -maxdepth 2 -name 'libnxl.so' -path '*/.libs/*' 2>/dev/null | head -n 1)
LD_LIBRARY_PATH="$libdir${nxllib:+:$(dirname "$nxllib")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH

tmp=$(mktemp -d /tmp/nxl-nixl-ex-XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

# build SRC OUT: a NIXL program as it is, against nxl's headers and libnxl-nixl
build() {
    note "$CXX -std=c++17 -I$inc $1 -L$libdir -lnxl-nixl"
    "$CXX" -std=c++17 -Wall -o "$2" -I"$inc" -I"$top/include" "$1" -L"$libdir" -lnxl-nixl \
        >"$tmp/cc.log" 2>&1 || { cat "$tmp/cc.log"; return 1; }
    [ -s "$tmp/cc.log" ] && cat "$tmp/cc.log"
    return 0
}

# run NAME TIMEOUT PROG ARGS...: 0 ran and passed, 1 failed, 2 backend absent
run() {
    _name=$1 _t=$2
    shift 2
    timeout "$_t" "$@" >"$tmp/run.log" 2>&1
    _rc=$?
    sed 's/^/    /' "$tmp/run.log"
    [ $_rc -eq 0 ] && return 0
    grep -Eq 'createBackend.*(NOT_FOUND|BACKEND)|Failed to create .* backend' "$tmp/run.log" && return 2
    echo "nixl_example_build: $_name exited $_rc" >&2
    return 1
}

# 1. our NIXL-style program
build "$top/tests/nixl-style/kv_copy.cpp" "$tmp/kv_copy" ||
    fail "tests/nixl-style/kv_copy.cpp does not compile against the compatibility headers"
ldd "$tmp/kv_copy" | grep -q "libnxl-nixl" || fail "kv_copy is not linked to libnxl-nixl"
run kv_copy 60 "$tmp/kv_copy" UCX
case $? in
0) note "kv_copy over UCX: ok" ;;
2) skip "UCX cannot be created here" ;;
*) fail "kv_copy over UCX" ;;
esac
run kv_copy 60 "$tmp/kv_copy" LIBFABRIC
case $? in
0) note "kv_copy over LIBFABRIC: ok" ;;
2) note "kv_copy over LIBFABRIC: not run, the backend cannot be created with its default parameters here" ;;
*) fail "kv_copy over LIBFABRIC" ;;
esac

# 2. NIXL's own examples, from a checkout of NIXL's source
nsrc=${NIXL_SRC:-}
[ -z "$nsrc" ] && [ -d /work/nixl-src ] && nsrc=/work/nixl-src
if [ -z "$nsrc" ]; then
    note "SKIP (part 2): NIXL's examples not built: no checkout of NIXL's source (set NIXL_SRC)"
    exit 0
fi
ex="$nsrc/examples/cpp"
[ -f "$ex/nixl_example.cpp" ] || fail "NIXL_SRC=$nsrc has no examples/cpp/nixl_example.cpp"
build "$ex/nixl_example.cpp" "$tmp/nixl_example" ||
    fail "NIXL's examples/cpp/nixl_example.cpp does not compile against the compatibility headers"
run nixl_example 60 "$tmp/nixl_example" UCX || fail "NIXL's nixl_example over UCX"
grep -q "Test done" "$tmp/run.log" || fail "NIXL's nixl_example did not say 'Test done'"
note "NIXL's nixl_example over UCX: ok"

if [ -f "$ex/nixl_etcd_example.cpp" ]; then
    build "$ex/nixl_etcd_example.cpp" "$tmp/nixl_etcd_example" ||
        fail "NIXL's examples/cpp/nixl_etcd_example.cpp does not compile against the compatibility headers"
    # shellcheck source=tests/etcd.sh
    . "$top/tests/etcd.sh"
    if nxl_etcd_start; then
        NIXL_ETCD_ENDPOINTS=$NXL_TEST_ETCD
        export NIXL_ETCD_ENDPOINTS
        run nixl_etcd_example 120 "$tmp/nixl_etcd_example"
        rc=$?
        nxl_etcd_stop
        [ $rc -eq 0 ] || fail "NIXL's nixl_etcd_example against etcd at $NXL_TEST_ETCD"
        note "NIXL's nixl_etcd_example over UCX and etcd: ok"
    else
        note "SKIP: NIXL's nixl_etcd_example compiled, not run: no etcd server could be started here"
    fi
fi
exit 0
