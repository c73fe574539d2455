#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# What libnxl.so needs at run time: its core libraries (libevent, cJSON,
# libcurl for etcd, libcrypto for authenticated metadata — which libcurl
# needs anyway on Debian —, libssl for TLS on the metadata exchange, libc)
# and those of the transports built into it, no more. A transport built as
# a module (--enable-<name>=dl) brings its own libraries in its module
# only: with every transport a module, libnxl.so needs only the core.
# Also: each module in the build tree exports its nxlt_<name>_ops and
# needs libnxl.so.
#
# From make check: NXL_BUILTIN_LIBS holds the -l flags of the built-in
# transports, NXL_PLUGIN_DIR the build tree's module folders.
set -u
lib=.libs/libnxl.so
if [ ! -f "$lib" ]; then
    echo "libnxl_needed: SKIP: no $lib (a static-only build?)"
    exit 77
fi
command -v readelf >/dev/null 2>&1 || { echo "libnxl_needed: SKIP: no readelf (binutils)"; exit 77; }

needed() { # FILE: its DT_NEEDED entries, one a line
    readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'
}
core='libc.so.* ld-linux*.so.* libm.so.* libdl.so.* libpthread.so.* librt.so.* libgcc_s.so.*
      libevent*.so* libcjson.so.* libcurl*.so.* libcrypto.so.* libssl.so.*'
builtin=
for f in ${NXL_BUILTIN_LIBS:-}; do
    case $f in -l*) builtin="$builtin lib${f#-l}.so*" ;; esac
done
allowed() { # NAME: matches a pattern of the core or of a built-in transport?
    for p in $core $builtin; do
        case $1 in $p) return 0 ;; esac
    done
    return 1
}

fail=0
libneeds=$(needed "$lib")
echo "libnxl.so needs: $(echo $libneeds)"
echo "built-in transports' libraries:${builtin:- none}"
for n in $libneeds; do
    if ! allowed "$n"; then
        echo "FAIL: libnxl.so needs $n, which is neither a core library (libevent, cJSON, libcurl, libcrypto, libc) nor one of a built-in transport"
        fail=1
    fi
done

nmod=0
IFS_save=$IFS
IFS=:
for d in ${NXL_PLUGIN_DIR:-}; do
    IFS=$IFS_save
    for m in "$d"/libnxl-*.so; do
        [ -f "$m" ] || continue
        nmod=$((nmod + 1))
        id=$(basename "$m" .so)
        id=${id#libnxl-}
        mneeds=$(needed "$m")
        echo "libnxl-$id.so needs: $(echo $mneeds)"
        echo "$mneeds" | grep -q '^libnxl\.so\.' ||
            { echo "FAIL: libnxl-$id.so does not link libnxl.so"; fail=1; }
        for n in $mneeds; do
            case $n in libnxl.so.*) continue ;; esac
            allowed "$n" && continue
            if echo "$libneeds" | grep -qx "$n"; then
                echo "FAIL: libnxl.so needs $n, which only the module libnxl-$id.so should need"
                fail=1
            fi
        done
        exports=$(nm -D --defined-only "$m" | awk 'NF == 3 { print $3 }')
        if [ "$exports" != "nxlt_${id}_ops" ]; then
            echo "FAIL: libnxl-$id.so should export nxlt_${id}_ops only, exports: $(echo $exports)"
            fail=1
        fi
    done
    IFS=:
done
IFS=$IFS_save
echo "modules checked: $nmod"
exit $fail
