#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The installed tree, as a user of it sees it: run by `make installcheck`
# (after `make install`, with the same DESTDIR), by .ci/run into a
# temporary DESTDIR, and by make distcheck. It compiles
# examples/first_xfer.c against the installed nxl with
#   cc first_xfer.c $(pkg-config --cflags --libs nxl)
# runs it over the installed UCX transport (built in or module), checks
# the installed man pages render (man -l) and their .so pages resolve, and
# runs examples/python/first.py with the installed Python package.
#
# make passes: DESTDIR (may be empty), libdir, includedir, mandir,
# moduledir, srcdir, CC; pythondir and python with the Python bindings.
set -u
fail() { echo "install_check: FAIL: $*" >&2; exit 1; }
: "${libdir:?}" "${includedir:?}" "${mandir:?}" "${moduledir:?}" "${srcdir:=.}"
D=${DESTDIR:-}
CC=${CC:-cc}
[ -f "$D$includedir/nxl.h" ] || fail "$D$includedir/nxl.h is not installed"
[ -f "$D$libdir/pkgconfig/nxl.pc" ] || fail "$D$libdir/pkgconfig/nxl.pc is not installed"
command -v pkg-config >/dev/null || fail "pkg-config is needed"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# pkg-config on the installed nxl.pc; with a DESTDIR, a copy of it whose
# absolute paths are moved there
mkdir "$tmp/pc"
sed -E "s#^(prefix|exec_prefix|libdir|includedir)=/#\1=$D/#" "$D$libdir/pkgconfig/nxl.pc" > "$tmp/pc/nxl.pc"
export PKG_CONFIG_PATH="$tmp/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
flags=$(pkg-config --cflags --libs nxl) || fail "pkg-config --cflags --libs nxl"
echo "install_check: cc first_xfer.c $flags"
# shellcheck disable=SC2086
$CC -o "$tmp/first_xfer" "$srcdir/examples/first_xfer.c" $flags || fail "first_xfer.c does not compile against the installed nxl"
[ "$(pkg-config --variable=moduledir nxl)" = "$D$moduledir" ] ||
    fail "pkg-config --variable=moduledir nxl says $(pkg-config --variable=moduledir nxl), not $D$moduledir"

# configure --enable-rpath: nxl.pc's Libs carry libdir as an rpath, and the
# program carries it (RUNPATH); installed there (no DESTDIR), it runs
# without LD_LIBRARY_PATH
rpath=
case " $flags " in *" -Wl,-rpath,$D$libdir "*) rpath=1 ;; esac
if [ -n "$rpath" ]; then
    readelf -d "$tmp/first_xfer" | grep -Eq "R(UN)?PATH.*\[$D$libdir\]" ||
        fail "nxl.pc has an rpath, but first_xfer carries no RUNPATH $D$libdir"
    echo "install_check: first_xfer carries RUNPATH $D$libdir (configure --enable-rpath)"
fi
# run it: the installed library, and the installed modules (with a DESTDIR
# they are not where libnxl looks: NXL_PLUGIN_DIR points there)
[ -n "$rpath" ] && [ -z "$D" ] ||
    export LD_LIBRARY_PATH="$D$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ -n "$D" ] && export NXL_PLUGIN_DIR="$D$moduledir"
"$tmp/first_xfer" > "$tmp/out" 2>&1; rc=$?
cat "$tmp/out"
if [ $rc -ne 0 ]; then
    # without UCX in this build, the listing must say so; that is not a failure here
    grep -Eq '^  UCX +no: not built' "$tmp/out" && { echo "install_check: UCX not built, first_xfer not run"; } ||
        fail "first_xfer against the installed nxl exited $rc"
fi
ldd "$tmp/first_xfer" | grep -q "libnxl.so.0 => $D$libdir/libnxl.so.0" ||
    fail "first_xfer did not use the installed libnxl: $(ldd "$tmp/first_xfer" | grep libnxl)"

# man pages: installed, rendered without error, every .so page resolves
if [ -f "$D$mandir/man7/nxl.7" ]; then
    n=0
    for p in "$D$mandir"/man1/*.1 "$D$mandir"/man3/nxl_*.3 "$D$mandir/man7/nxl.7"; do
        [ -f "$p" ] || continue
        if head -n 1 "$p" | grep -q '^\.so '; then
            target=$D$mandir/$(head -n 1 "$p" | sed 's/^\.so //')
            [ -f "$target" ] || fail "$p: .so $target does not exist"
        elif command -v man >/dev/null; then
            MANWIDTH=80 man -l "$p" > "$tmp/page" 2>"$tmp/err" || fail "man -l $p: $(cat "$tmp/err")"
            grep -q 'NAME' "$tmp/page" || fail "man -l $p rendered no NAME section"
        fi
        n=$((n + 1))
    done
    echo "install_check: $n man pages installed and resolved"
else
    echo "install_check: no man pages installed (configure: man pages no)"
fi
# the Python package (configure --enable-python): imported from the
# installed folder by the interpreter it was built for, against the
# installed libnxl, and examples/python/first.py run with it
if [ -n "${pythondir:-}" ] && [ -n "${python:-}" ]; then
    first_py=$(cd "$srcdir" && pwd)/examples/python/first.py
    [ -f "$D$pythondir/nxl/__init__.py" ] || fail "$D$pythondir/nxl/__init__.py is not installed"
    got=$(cd "$tmp" && PYTHONPATH="$D$pythondir" PYTHONDONTWRITEBYTECODE=1 "$python" -c \
        'import nxl, nxl._nxl; print(nxl.__file__); print(nxl._nxl.__file__)' 2>&1) ||
        fail "import nxl from $D$pythondir: $got"
    case $got in "$D$pythondir/nxl/"*) ;; *) fail "import nxl took another copy: $got" ;; esac
    out=$(cd "$tmp" && PYTHONPATH="$D$pythondir" PYTHONDONTWRITEBYTECODE=1 timeout 60 "$python" \
        "$first_py" 2>&1); rc=$?
    printf '%s\n' "$out"
    if [ $rc -ne 0 ]; then
        grep -Eq '^  UCX +no: not built' "$tmp/out" && echo "install_check: UCX not built, first.py not run" ||
            fail "examples/python/first.py against the installed package exited $rc"
    fi
    echo "install_check: the Python package nxl in $D$pythondir"
    # a wheel built against the installed nxl (pkg-config, the nxl.pc above),
    # as `python3 -m build --wheel --no-isolation` in bindings/python makes it
    if "$python" -m build --version >/dev/null 2>&1; then
        mkdir "$tmp/wheel" "$tmp/site"
        cp -R "$srcdir/bindings/python/." "$tmp/wheel/"
        rm -rf "$tmp/wheel/build" "$tmp/wheel/dist"
        chmod -R u+w "$tmp/wheel"
        (cd "$tmp/wheel" && "$python" -m build --wheel --no-isolation) > "$tmp/wheel.log" 2>&1 ||
            { tail -n 20 "$tmp/wheel.log"; fail "python3 -m build --wheel against the installed nxl"; }
        whl=$(ls "$tmp"/wheel/dist/nxl-*.whl) || fail "no wheel in $tmp/wheel/dist"
        (cd "$tmp/site" && "$python" -m zipfile -e "$whl" .) || fail "unpacking $whl"
        out=$(cd "$tmp" && PYTHONPATH="$tmp/site" PYTHONDONTWRITEBYTECODE=1 timeout 60 "$python" "$first_py" 2>&1) ||
            { printf '%s\n' "$out"; fail "examples/python/first.py with the wheel"; }
        echo "install_check: the wheel $(basename "$whl") runs first.py"
    else
        echo "install_check: no wheel built: $python has no build module (apt-get install python3-build)"
    fi
fi
echo "install_check: OK"
