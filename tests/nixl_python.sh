#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# NIXL's Python bindings built unchanged against libnxl-nixl, and
# nixl._api.nixl_agent moving data over nxl (compat/nixl/python/smoke.py).
# NIXL's source is not shipped: skipped unless NIXL_SRC names a checkout
# (and pybind11, Python's headers and numpy are there).
srcdir=${srcdir:-.}
[ -n "${NIXL_SRC:-}" ] || { echo "nixl_python: SKIP: set NIXL_SRC to a NIXL checkout"; exit 77; }
PYTHON=${PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)}
[ -f /usr/include/pybind11/pybind11.h ] || { echo "nixl_python: SKIP: no pybind11 (apt-get install pybind11-dev)"; exit 77; }
"$PYTHON" -c 'import numpy' 2>/dev/null || { echo "nixl_python: SKIP: no numpy for $PYTHON (apt-get install python3-numpy)"; exit 77; }
out=${TMPDIR:-/tmp}/nixl_python.$$
trap 'rm -rf "$out"' EXIT
PYTHON=$PYTHON sh "$srcdir/compat/nixl/python/build-bindings" "$NIXL_SRC" "$out" || { echo "FAIL: the bindings did not build"; exit 1; }
PYTHONPATH=$out timeout 120 "$PYTHON" "$srcdir/compat/nixl/python/smoke.py" > "$out.log" 2>&1
st=$?
grep -v ' INFO ' "$out.log"
rm -f "$out.log"
exit $st
