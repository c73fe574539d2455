#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# examples/kv_layout: a decode worker of TP 2 assembles a sequence from four
# prefill workers of TP 4 (other block size, other order) over UCX; every
# element must be right (exit 0), two prefill ranks give empty transfers.
ex=examples/kv_layout
[ -x $ex ] || { echo "$ex not built"; exit 99; }
out=$($ex UCX 2>&1); rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ]; then
    printf '%s\n' "$out" | grep -q "UCX" && printf '%s\n' "$out" | grep -Eq "not built|not available" &&
        { echo "SKIP: UCX is not built"; exit 77; }
    echo "FAIL: kv_layout exited $rc"; exit 1
fi
printf '%s\n' "$out" | grep -q '^decode: sequence in place$' || { echo "FAIL: no completion line"; exit 1; }
printf '%s\n' "$out" | grep -q '^decode: 0 wrong elements$' || { echo "FAIL: wrong elements"; exit 1; }
[ "$(printf '%s\n' "$out" | grep -c 'nothing (no head shared)')" = 2 ] ||
    { echo "FAIL: prefill ranks 0 and 1 should give empty transfers"; exit 1; }
echo "kv_layout: passed"
