#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# examples/kv_stream_tp: P prefill processes -> D decode processes over UCX,
# (P, D) in (4, 2), (2, 4), (1, 2), blocks of 16 <-> 32 tokens, heads or
# tokens outer, AUTO, zero copy and staged, prefill blocks next to each other
# (and --spread: none): every byte of every decode region must be right
# (exit 0).
ex=examples/kv_stream_tp
[ -x $ex ] || { echo "$ex not built"; exit 99; }
run() {
    out=$(timeout 120 $ex --timeout 60 "$@" 2>&1); rc=$?
    printf '%s\n' "$out"
    if [ $rc -ne 0 ]; then
        printf '%s\n' "$out" | grep -q "UCX" && printf '%s\n' "$out" | grep -Eq "not built|not available" &&
            { echo "SKIP: UCX is not built"; exit 77; }
        echo "FAIL: kv_stream_tp $* exited $rc"; exit 1
    fi
    printf '%s\n' "$out" | grep -q 'decode ranks right' || { echo "FAIL: no summary line"; exit 1; }
}
run --tp_prefill 4 --tp_decode 2 --block_tokens_prefill 16 --block_tokens_decode 32 \
    --order_prefill TO --order_decode HO
run --tp_prefill 4 --tp_decode 2 --block_tokens_prefill 32 --block_tokens_decode 16 --mode staged
run --tp_prefill 2 --tp_decode 4 --block_tokens_prefill 32 --block_tokens_decode 16 --mode staged
run --tp_prefill 2 --tp_decode 4 --block_tokens_prefill 16 --block_tokens_decode 32 \
    --order_prefill TO --order_decode HO --mode zcopy
run --tp_prefill 4 --tp_decode 1 --spread --mode staged
run --tp_prefill 1 --tp_decode 2 --block_tokens_prefill 16 --block_tokens_decode 32 \
    --order_decode HO
echo "kv_stream_tp: passed"
