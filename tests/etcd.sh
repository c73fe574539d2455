# SPDX-License-Identifier: BSD-3-Clause
# Sourced by shell tests: nxl_etcd_start starts a real etcd server on free
# loopback ports in a temporary folder and sets NXL_TEST_ETCD to its URL
# (returns 1 when there is no etcd binary, 2 when it did not start);
# nxl_etcd_stop stops it and removes the folder.
nxl_etcd_start() {
    nxl_etcd_bin=$(command -v etcd || true)
    [ -n "$nxl_etcd_bin" ] || return 1
    nxl_etcd_dir=$(mktemp -d /tmp/nxl-etcd-XXXXXX)
    for _try in 1 2 3 4 5; do
        _c=$(( $(od -An -N2 -tu2 /dev/urandom) % 20000 + 20000 ))
        _p=$((_c + 1))
        "$nxl_etcd_bin" --data-dir "$nxl_etcd_dir/data" \
            --listen-client-urls "http://127.0.0.1:$_c" --advertise-client-urls "http://127.0.0.1:$_c" \
            --listen-peer-urls "http://127.0.0.1:$_p" --initial-advertise-peer-urls "http://127.0.0.1:$_p" \
            --initial-cluster "default=http://127.0.0.1:$_p" >"$nxl_etcd_dir/etcd.log" 2>&1 &
        nxl_etcd_pid=$!
        for _ in $(seq 100); do
            grep -q "ready to serve client requests" "$nxl_etcd_dir/etcd.log" 2>/dev/null && break
            kill -0 "$nxl_etcd_pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$nxl_etcd_pid" 2>/dev/null &&
            grep -q "ready to serve client requests" "$nxl_etcd_dir/etcd.log"; then
            NXL_TEST_ETCD="http://127.0.0.1:$_c"
            return 0
        fi
        kill "$nxl_etcd_pid" 2>/dev/null; wait "$nxl_etcd_pid" 2>/dev/null
        nxl_etcd_pid=
        rm -rf "$nxl_etcd_dir/data"
    done
    cat "$nxl_etcd_dir/etcd.log"
    return 2
}

nxl_etcd_stop() {
    if [ -n "${nxl_etcd_pid:-}" ]; then
        kill "$nxl_etcd_pid" 2>/dev/null || true
        wait "$nxl_etcd_pid" 2>/dev/null || true
        nxl_etcd_pid=
    fi
    if [ -n "${nxl_etcd_dir:-}" ]; then
        rm -rf "$nxl_etcd_dir"
    fi
    nxl_etcd_dir=
    return 0
}
