#!/usr/bin/env bash
# The KV streaming demo as a test: prefill -> decode over TCP metadata
# exchange, then through a real etcd server (skipped without etcd).
set -euo pipefail
kv=./examples/kv_stream
[[ -x $kv ]] || { echo "kv_stream.sh: $kv not built"; exit 1; }

echo "== kv_stream, metadata over TCP"
timeout 120 "$kv" both --layers 8 --blocks 16 --block_size 64K --quiet
timeout 120 "$kv" both --layers 2 --blocks 10000 --block_size 64 --quiet

etcd_bin=$(command -v etcd || true)
if [[ -z $etcd_bin ]]; then
    echo "kv_stream.sh: SKIP etcd mode: no etcd server binary (apt-get install etcd-server)"
    exit 0
fi
dir=$(mktemp -d /tmp/nxl-kvetcd-XXXXXX)
pid=
cleanup() {
    local rc=$?
    if [[ -n $pid ]]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
    exit "$rc"
}
trap cleanup EXIT
for _ in 1 2 3 4 5; do
    cport=$((20000 + RANDOM % 20000)); pport=$((cport + 1))
    "$etcd_bin" --data-dir "$dir/data" --listen-client-urls "http://127.0.0.1:$cport" \
        --advertise-client-urls "http://127.0.0.1:$cport" \
        --listen-peer-urls "http://127.0.0.1:$pport" \
        --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
        --initial-cluster "default=http://127.0.0.1:$pport" >"$dir/etcd.log" 2>&1 &
    pid=$!
    for _ in $(seq 50); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$cport") 2>/dev/null; then break; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && break
    pid=
    rm -rf "$dir/data"
done
[[ -n $pid ]] || { echo "kv_stream.sh: etcd did not start"; cat "$dir/etcd.log"; exit 1; }
sleep 0.3
echo "== kv_stream, discovery through etcd at 127.0.0.1:$cport"
timeout 120 "$kv" both --etcd_endpoints "http://127.0.0.1:$cport" --layers 8 --blocks 16 \
    --block_size 64K --quiet
