#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# ABI guard: the symbols libnxl.so exports (name, kind and version) must be
# those in lib/libnxl.symbols, so that an accidental change of the API fails
# make check and an intended one updates the baseline and -version-info
# together.
#
#   tests/abi_symbols.sh                  compare .libs/libnxl.so with the baseline
#   tests/abi_symbols.sh --print LIB.so   print LIB.so's list (make update-symbols)
set -u
LC_ALL=C
export LC_ALL

symbols() { # LIB: "KIND NAME@@VERSION", one a line, sorted
    nm -D --defined-only "$1" | awk 'NF == 3 { print $2, $3 }' | sort
}

if [ "${1:-}" = "--print" ]; then
    echo "# The symbols libnxl.so exports: kind (nm) and name@@version."
    echo "# Checked by tests/abi_symbols.sh; rewritten by 'make update-symbols'."
    echo "# Change it only with -version-info in Makefile.am (see the comment there)."
    symbols "$2"
    exit $?
fi

srcdir=${srcdir:-.}
lib=.libs/libnxl.so
base=$srcdir/lib/libnxl.symbols
if [ ! -f "$lib" ]; then
    echo "abi_symbols: SKIP: no $lib (a static-only build?)"
    exit 77
fi
if [ "${NXL_LD_VERSION_SCRIPT:-yes}" != yes ]; then
    echo "abi_symbols: SKIP: libnxl.so was linked without lib/libnxl.map (--disable-version-script, or a linker without --version-script)"
    exit 77
fi
command -v nm >/dev/null 2>&1 || { echo "abi_symbols: SKIP: no nm (binutils)"; exit 77; }

tmp=${TMPDIR:-/tmp}/abi_symbols.$$
trap 'rm -f "$tmp".*' EXIT
grep -v '^#' "$base" > "$tmp.base" || { echo "abi_symbols: cannot read $base"; exit 99; }
symbols "$lib" > "$tmp.now"
if diff -u "$tmp.base" "$tmp.now" > "$tmp.diff"; then
    echo "abi_symbols: libnxl.so exports the $(wc -l < "$tmp.now") symbols of lib/libnxl.symbols"
    exit 0
fi
sed -e "1s|.*|--- lib/libnxl.symbols (the baseline)|" -e "2s|.*|+++ .libs/libnxl.so (this build)|" "$tmp.diff"
cat <<MSG

abi_symbols: FAIL: the symbols exported by libnxl.so differ from lib/libnxl.symbols
  (lines with - are no longer exported, lines with + are new).
  If the change is not intended: a function lost NXL_API, or something
  internal gained it; fix the code.
  If it is intended: run 'make update-symbols' and commit lib/libnxl.symbols
  together with a bump of -version-info in Makefile.am (symbols added:
  current++, revision=0, age++; removed or changed: current++, revision=0,
  age=0, which changes the soname), and new functions get a new version
  node in lib/libnxl.map (see the comment there).
MSG
exit 1
