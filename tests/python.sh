#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The Python bindings' suite (bindings/python/tests, pytest) against the
# package `make python` built in bindings/python/build/lib and the build
# tree's libnxl (LD_LIBRARY_PATH) and transport modules (NXL_PLUGIN_DIR, from
# make check's environment). Arguments go to pytest (-k EXPR, -x, a test's
# path). Skips (77) with the reason when configure left the bindings out or
# the interpreter has no pytest.
#
# By hand, from the build tree:  make python && tests/python.sh -k notif
set -u
srcdir=${srcdir:-.}
builddir=$(pwd)
lib=$builddir/bindings/python/build/lib
# run by hand: the interpreter of the configuration, from the Makefile
[ -n "${NXL_PYTHON+set}" ] || NXL_PYTHON=$(sed -n 's/^nxl_python_for_tests = //p' Makefile 2>/dev/null)
[ -n "$NXL_PYTHON" ] ||
    { echo "SKIP: nxl was configured without the Python bindings (configure --enable-python; its summary says why)"; exit 77; }
[ -f "$lib/nxl/__init__.py" ] && ls "$lib"/nxl/_nxl*.so >/dev/null 2>&1 ||
    { echo "FAIL: no built package in $lib: run make python"; exit 99; }
"$NXL_PYTHON" -c 'import pytest' 2>/dev/null ||
    { echo "SKIP: $NXL_PYTHON has no pytest (apt-get install python3-pytest python3-pytest-asyncio)"; exit 77; }
"$NXL_PYTHON" -c 'import pytest_asyncio' 2>/dev/null ||
    echo "note: $NXL_PYTHON has no pytest_asyncio (apt-get install python3-pytest-asyncio): its tests skip"
# a sanitizer build (tests/sanitize): the interpreter is not built with
# ASan, so its runtime is preloaded, and Python's own leaks not reported
asan=$(ldd "$lib"/nxl/_nxl*.so 2>/dev/null | sed -n 's/.*libasan[^ ]* => \([^ ]*\) .*/\1/p' | head -n 1)
if [ -n "$asan" ]; then
    LD_PRELOAD=$asan${LD_PRELOAD:+:$LD_PRELOAD}
    ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}
    export LD_PRELOAD ASAN_OPTIONS
    echo "note: the extension is built with ASan: LD_PRELOAD=$asan, detect_leaks=0"
fi
PYTHONPATH=$lib${PYTHONPATH:+:$PYTHONPATH}
LD_LIBRARY_PATH=$builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# nothing written into the source tree (make distcheck's is read-only)
PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH LD_LIBRARY_PATH PYTHONDONTWRITEBYTECODE
# The suite runs from a copy, bindings/python-check/tests of the build
# tree, next to a link to the built package (bindings/python-check/nxl):
# its conftest.py puts the folder above it first on sys.path (and on its
# peer processes' PYTHONPATH), which then holds the built package, not the
# source tree's (without the extension in a VPATH build); and the folder
# three levels up, which its tests take for the tree with tests/*.js, is
# the build tree (the source tree too, unless VPATH). NXL_TOP_SRCDIR and
# NXL_TOP_BUILDDIR name the trees for tests that look for them there.
[ -d "$srcdir/bindings/python/tests" ] || { echo "FAIL: no $srcdir/bindings/python/tests"; exit 99; }
run=$builddir/bindings/python-check
rm -rf "$run" && mkdir -p "$run" && ln -s ../python/build/lib/nxl "$run/nxl" || exit 99
cp -R "$srcdir/bindings/python/tests" "$run/tests" && chmod -R u+w "$run/tests" || exit 99
find "$run/tests" \( -name __pycache__ -o -name .pytest_cache \) -prune -exec rm -rf {} +
NXL_TOP_SRCDIR=$(cd "$srcdir" && pwd)
NXL_TOP_BUILDDIR=$builddir
export NXL_TOP_SRCDIR NXL_TOP_BUILDDIR
# the OBJ test's s3rver: installed here if check_obj has not yet (the
# script's lock makes the two share one install; without node it skips)
"$srcdir/tests/node-setup.sh" "${NXL_TEST_NODE_DIR:-$builddir/tests/node}" >/dev/null 2>&1
echo "$NXL_PYTHON -m pytest $srcdir/bindings/python/tests, copied to $run/tests (PYTHONPATH=$lib)"
"$NXL_PYTHON" -m pytest -q -rs -p no:cacheprovider "$run/tests" "$@"
rc=$?
# 5: pytest collected no test
[ $rc -eq 5 ] && { echo "FAIL: pytest found no test in $srcdir/bindings/python/tests"; exit 1; }
exit $rc
