#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# nxl is BSD-3-Clause: LICENSE says so, and every source file (C, headers,
# the build system, scripts) names it in an SPDX line near its top
# (not libtoolize's m4/libtool.m4 and m4/lt*.m4, which it copies in).
srcdir=${srcdir:-.}
fail=0
grep -q "BSD 3-Clause License" "$srcdir/LICENSE" 2>/dev/null ||
    { echo "FAIL: $srcdir/LICENSE is missing or is not the BSD 3-Clause License"; fail=1; }
# debian/ is not in the release tarball (make dist): checked where it is
if [ -d "$srcdir/debian" ]; then
    grep -q "^License: BSD-3-Clause" "$srcdir/debian/copyright" 2>/dev/null ||
        { echo "FAIL: debian/copyright does not state BSD-3-Clause"; fail=1; }
fi
files=$(cd "$srcdir" && find configure.ac Makefile.am nxl.pc.in quickstart include lib m4 tests bench examples tools compat bindings \
    \( -name node_modules -o -name corpus -o -name .libs -o -name .deps -o -name 'build-*' \
    -o -path '*/bindings/python/build' -o -path '*/bindings/python-check' -o -name '*.egg-info' -o -name __pycache__ \) -prune -o \
    \( -name libtool.m4 -o -name 'lt*.m4' \) -prune -o \
    -type f \( -name '*.c' -o -name '*.h' -o -name '*.am' -o -name '*.ac' -o -name '*.m4' -o -name '*.in' \
    -o -name '*.include' -o -name '*.sh' -o -name '*.js' -o -name '*.pl' -o -name '*.py' -o -name '*.pyi' -o -name '*.toml' -o -name '*.cc' -o -name '*.cpp' \) -print)
n=0
for f in $files; do
    n=$((n + 1))
    head -n 3 "$srcdir/$f" | grep -q "SPDX-License-Identifier: BSD-3-Clause" && continue
    echo "FAIL: $f has no 'SPDX-License-Identifier: BSD-3-Clause' line in its first three lines"
    fail=1
done
[ "$n" -gt 50 ] || { echo "FAIL: only $n source files found under $srcdir"; fail=1; }
[ "$fail" -eq 0 ] && echo "license: LICENSE, debian/copyright and $n source files say BSD-3-Clause"
exit $fail
