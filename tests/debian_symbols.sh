#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# debian/libnxl0.symbols (dpkg-gensymbols) lists exactly the symbols of the
# ABI baseline lib/libnxl.symbols (which tests/abi_symbols.sh checks the
# built library against), each with its symbol version. Skipped where
# debian/ is absent (the release tarball).
srcdir=${srcdir:-.}
deb=$srcdir/debian/libnxl0.symbols
[ -f "$deb" ] || { echo "no $deb (a release tarball): skipped"; exit 77; }
tmp=${TMPDIR:-/tmp}/debian_symbols.$$
trap 'rm -f "$tmp".*' EXIT
sed -n -e 's/^A \(.*\)$/\1@\1/p' -e 's/^T \([^@]*\)@@\(.*\)$/\1@\2/p' "$srcdir/lib/libnxl.symbols" | sort > "$tmp.base"
sed -n 's/^ \([^ ]*\) .*/\1/p' "$deb" | sort > "$tmp.deb"
[ -s "$tmp.base" ] || { echo "FAIL: no symbols read from lib/libnxl.symbols"; exit 1; }
head -n 1 "$deb" | grep -q '^libnxl\.so\.0 libnxl0 ' || { echo "FAIL: $deb does not begin with 'libnxl.so.0 libnxl0'"; exit 1; }
if ! diff -u "$tmp.base" "$tmp.deb"; then
    echo "FAIL: $deb and lib/libnxl.symbols differ (- baseline, + debian): add the new symbols"
    echo "      to debian/libnxl0.symbols with the version that first has them"
    exit 1
fi
echo "debian/libnxl0.symbols: the $(wc -l < "$tmp.base") symbols of lib/libnxl.symbols"
