#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The KV streaming demo as a test: prefill -> decode over TCP metadata
# exchange, then through a real etcd server (skipped without etcd).
set -euo pipefail
kv=./examples/kv_stream
[[ -x $kv ]] || { echo "kv_stream.sh: $kv not built"; exit 1; }

echo "== kv_stream, metadata over TCP"
timeout 120 "$kv" both --layers 8 --blocks 16 --block_size 64K --quiet
timeout 120 "$kv" both --layers 2 --blocks 10000 --block_size 64 --quiet
if grep -q 'define NXL_HAVE_LIBFABRIC 1' "${builddir:-.}/config.h" 2>/dev/null; then
    echo "== kv_stream over LIBFABRIC (tcp;ofi_rxm, then shm)"
    timeout 120 "$kv" both --backend LIBFABRIC --layers 8 --blocks 16 --block_size 64K --quiet
    FI_PROVIDER=shm timeout 120 "$kv" both --backend LIBFABRIC --layers 4 --blocks 64 \
        --block_size 16K --quiet
fi

. "$(dirname "$0")/etcd.sh"
trap nxl_etcd_stop EXIT
rc=0
nxl_etcd_start || rc=$?
if ((rc == 1)); then
    echo "kv_stream.sh: SKIP etcd mode: no etcd server binary (apt-get install etcd-server)"
    exit 0
fi
((rc == 0)) || { echo "kv_stream.sh: etcd did not start"; exit 1; }
echo "== kv_stream, discovery through etcd at $NXL_TEST_ETCD"
timeout 120 "$kv" both --etcd_endpoints "$NXL_TEST_ETCD" --layers 8 --blocks 16 \
    --block_size 64K --quiet
