#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The HTML API reference (make html) is made without a single doxygen
# warning or error: every reference resolves (the status codes made by the
# X-macro list too), and a machine without graphviz's dot gets a reference
# without graphs instead of an error per graph. Skipped without doxygen.
doxyfile=doc/Doxyfile
command -v doxygen >/dev/null 2>&1 || { echo "SKIP: no doxygen (apt-get install doxygen)"; exit 77; }
[ -f "$doxyfile" ] || { echo "FAIL: no $doxyfile in the build tree (configure makes it)"; exit 99; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
{ cat "$doxyfile"; echo "OUTPUT_DIRECTORY = $tmp"; echo "WARN_LOGFILE ="; } > "$tmp/Doxyfile"
doxygen "$tmp/Doxyfile" > "$tmp/out.log" 2> "$tmp/err.log"
rc=$?
if [ "$rc" -ne 0 ] || [ -s "$tmp/err.log" ]; then
    echo "FAIL: doxygen exit $rc, with these warnings or errors:"
    head -n 20 "$tmp/err.log"
    exit 1
fi
grep -q 'NXL_ERR_CANCELED' "$tmp/html/nxl_8h.html" ||
    { echo "FAIL: the status codes are missing from the reference (doc/html/nxl_8h.html)"; exit 1; }
echo "html: the reference of nxl.h and nxl/transport.h is made without a warning"
