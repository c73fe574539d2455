#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# examples/python: first.py (the output lines of the C first_xfer, over
# each transport built that moves DRAM between agents) and kv_disagg.py's
# demo (prefill and decode processes, every byte checked by decode, each
# "done" received once by prefill) over UCX shared memory, UCX TCP, with
# torch tensors when python3-torch is installed, and over LIBFABRIC; then
# decode against a port where nothing listens must fail with nxl's
# sentence. Skips (77) like tests/python.sh without the bindings.
set -u
srcdir=${srcdir:-.}
builddir=$(pwd)
lib=$builddir/bindings/python/build/lib
[ -n "${NXL_PYTHON+set}" ] || NXL_PYTHON=$(sed -n 's/^nxl_python_for_tests = //p' Makefile 2>/dev/null)
[ -n "$NXL_PYTHON" ] ||
    { echo "SKIP: nxl was configured without the Python bindings (configure --enable-python; its summary says why)"; exit 77; }
ls "$lib"/nxl/_nxl*.so >/dev/null 2>&1 || { echo "FAIL: no built package in $lib: run make python"; exit 99; }
"$NXL_PYTHON" -c 'import numpy' 2>/dev/null ||
    { echo "SKIP: $NXL_PYTHON has no numpy (apt-get install python3-numpy)"; exit 77; }
PYTHONPATH=$lib${PYTHONPATH:+:$PYTHONPATH}
LD_LIBRARY_PATH=$builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH LD_LIBRARY_PATH PYTHONDONTWRITEBYTECODE
ex=$srcdir/examples/python
fail() { echo "FAIL: $*"; exit 1; }
built() { # transport -> 0 when this build has it
    "$NXL_PYTHON" -c "import nxl, sys; sys.exit(not any(p.name == '$1' and p.available for p in nxl.plugins_available()))"
}

ran=0
for t in UCX LIBFABRIC; do
    built $t || { echo "SKIP: $t cannot be used here"; continue; }
    out=$(timeout 60 "$NXL_PYTHON" "$ex/first.py" $t 2>&1); rc=$?
    printf '%s\n' "$out" | sed "s/^/[first.py $t] /"
    [ $rc -eq 0 ] || fail "first.py $t exited $rc"
    printf '%s\n' "$out" | grep -q "^initiator: WRITE done: success$" || fail "first.py $t: no completion line"
    printf '%s\n' "$out" | grep -q "^target: notification 'block 0' from initiator; buffer: 'hello from initiator'$" ||
        fail "first.py $t: no notification line"
    ran=$((ran + 1))
done
[ $ran -gt 0 ] || { echo "SKIP: neither UCX nor LIBFABRIC can be used here"; exit 77; }

demo() { # label env-assignments kv_disagg-args...
    label=$1; shift
    out=$(timeout 120 env "$@" 2>&1); rc=$?
    printf '%s\n' "$out" | sed "s/^/[kv_disagg $label] /"
    [ $rc -eq 0 ] || fail "kv_disagg.py $label exited $rc"
    printf '%s\n' "$out" | grep -q "; every byte checked$" || fail "kv_disagg.py $label: decode did not check its bytes"
    printf '%s\n' "$out" | grep -q "^prefill: .* requests done, each notified once: " ||
        fail "kv_disagg.py $label: prefill did not get every done"
}
if built UCX; then
    demo "UCX shm" UCX_TLS=self,sm "$NXL_PYTHON" "$ex/kv_disagg.py"
    demo "UCX tcp, 8 requests" UCX_TLS=self,tcp "$NXL_PYTHON" "$ex/kv_disagg.py" --layers 8 --blocks 64 --requests 8
    if "$NXL_PYTHON" -c 'import torch' 2>/dev/null; then
        demo "UCX torch" UCX_TLS=self,sm "$NXL_PYTHON" "$ex/kv_disagg.py" --torch
    else
        echo "SKIP: kv_disagg.py --torch: $NXL_PYTHON has no torch (apt-get install python3-torch)"
    fi
    # decode with no prefill: nxl's sentence, exit 1
    port=$("$NXL_PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    out=$(timeout 60 "$NXL_PYTHON" "$ex/kv_disagg.py" --role decode --connect 127.0.0.1:$port --timeout 20 2>&1); rc=$?
    printf '%s\n' "$out" | sed "s/^/[kv_disagg no prefill] /"
    [ $rc -eq 1 ] || fail "kv_disagg.py decode without a prefill exited $rc, not 1"
    printf '%s\n' "$out" | grep -Eq "^decode: [A-Za-z]+: .+" || fail "kv_disagg.py decode without a prefill: no sentence"
fi
if built LIBFABRIC; then
    demo LIBFABRIC "$NXL_PYTHON" "$ex/kv_disagg.py" --transport LIBFABRIC
fi
echo "python examples: passed"
