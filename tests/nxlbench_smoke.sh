#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# nxlbench must not rot: run each mode with tiny sizes, every byte checked,
# and require a zero exit and the JSON keys each mode promises.
set -u
B=${builddir:-.}/bench/nxlbench
[ -x "$B" ] || { echo "nxlbench_smoke: $B not built"; exit 99; }
T=$(mktemp -d /tmp/nxlbench_smoke.XXXXXX)
. "$(dirname "$0")/etcd.sh"
trap 'nxl_etcd_stop; rm -rf "$T"' EXIT
fail=0

run() { # NAME KEYS... -- ARGS...
    name=$1; shift
    keys=
    while [ "$1" != "--" ]; do keys="$keys $1"; shift; done
    shift
    if ! timeout 60 "$B" --spawn --check_consistency --quiet --json "$T/$name.json" "$@" \
        >"$T/$name.out" 2>&1; then
        echo "FAIL $name: nxlbench $* exited nonzero:"; cat "$T/$name.out"; fail=1; return
    fi
    for k in rows env ucx_version nxl_version transports flags $keys; do
        grep -q "\"$k\":" "$T/$name.json" || { echo "FAIL $name: no \"$k\" in the JSON"; fail=1; }
    done
    echo "ok   $name"
}

BW="block_size batch_size bw_gbps avg_lat_us avg_prep_us p99_prep_us avg_post_us p99_post_us avg_tx_us p99_tx_us"
run write $BW -- --block_sizes 8,4K,64K --num_iter 20 --warmup_iter 2
run read $BW -- --op_type READ --start_block_size 4K --max_block_size 16K --max_batch_size 2 \
    --num_iter 10 --warmup_iter 1 --pipeline_depth 2 --mem_source nxl
run recreate $BW -- --recreate_xfer --block_sizes 4K --num_iter 10 --warmup_iter 1 --pipeline_depth 3
run latency $BW p50_us p99_us -- --mode latency --block_sizes 8,1K --num_iter 20 --warmup_iter 2
run latency_notif p50_us p99_us -- --mode latency --latency_reply notif --block_sizes 8 --num_iter 20 \
    --busy_poll_us 100
run desc_rate descs prep_us post_us complete_us mdesc_per_s -- --mode desc_rate --start_batch_size 64 \
    --num_iter 3 --warmup_iter 1
run desc_rate_threads descs threads mdesc_per_s block_size -- --mode desc_rate --threads 4 \
    --start_batch_size 16 --num_iter 3 --warmup_iter 1
run desc_rate_strided descs prep_us mdesc_per_s held_bytes strided -- --mode desc_rate --strided \
    --start_batch_size 64 --num_iter 3 --warmup_iter 1
run desc_rate_strided_threads descs threads mdesc_per_s -- --mode desc_rate --strided --threads 2 \
    --start_batch_size 16 --num_iter 3 --warmup_iter 1
grep -Eq '"strided":[[:space:]]*true' "$T/desc_rate_strided.json" ||
    { echo "FAIL desc_rate_strided: no strided row in the JSON"; fail=1; }
# one title, then one table with its rows, then the summary lines
for name in desc_rate desc_rate_threads; do
    o=$T/$name.out
    [ -f "$o" ] || continue
    nh=$(grep -c '^Block Size' "$o")
    th=$(grep -n '^# nxlbench desc_rate' "$o" | head -1 | cut -d: -f1)
    hh=$(grep -n '^Block Size' "$o" | head -1 | cut -d: -f1)
    sm=$(grep -n '^# desc_rate' "$o" | head -1 | cut -d: -f1)
    if [ "$nh" != 1 ] || [ -z "$th" ] || [ -z "$sm" ] || [ "$th" -gt "$hh" ] || [ "$sm" -lt "$hh" ]; then
        echo "FAIL $name: expected the title, one table header, then the summary:"; cat "$o"; fail=1
    fi
    grep -Eq '^16 +16 |^4096 +(64|16) ' "$o" || { echo "FAIL $name: no row in the table"; cat "$o"; fail=1; }
done
grep -Eq '"threads":[[:space:]]*4' "$T/desc_rate_threads.json" ||
    { echo "FAIL desc_rate_threads: no row of 4 threads in the JSON"; fail=1; }
# a first batch size given alone: the last follows it
run batch_alone $BW -- --start_batch_size 8 --block_sizes 4K --num_iter 5 --warmup_iter 1
grep -Eq '"batch_size":[[:space:]]*8' "$T/batch_alone.json" ||
    { echo "FAIL batch_alone: no row of batch 8"; fail=1; }
run idle role wakeups_per_s cpu_s -- --mode idle --duration 0.3
# --loop fd: NXL_LOOP_FD agents turned by nxlbench's own epoll_wait loop on
# nxl_agent_backend_fd(); the report and the JSON say so; the idle mode counts
# the same wake-ups
run loop_fd $BW -- --loop fd --block_sizes 8,4K,64K --num_iter 20 --warmup_iter 2 --pipeline_depth 4
run loop_fd_read $BW -- --loop fd --op_type READ --block_sizes 4K --max_batch_size 2 \
    --num_iter 10 --warmup_iter 1 --pipeline_depth 2 --mem_source nxl
run loop_fd_latency p50_us p99_us -- --loop fd --mode latency --block_sizes 8,1K --num_iter 20 \
    --warmup_iter 2
run loop_fd_idle role wakeups_per_s cpu_s -- --loop fd --mode idle --duration 0.3
for name in loop_fd loop_fd_read loop_fd_latency loop_fd_idle; do
    [ -f "$T/$name.json" ] || continue
    grep -Eq '"loop":[[:space:]]*"fd"' "$T/$name.json" || { echo "FAIL $name: no \"loop\": \"fd\" in the JSON"; fail=1; }
    grep -q '^# loop: fd' "$T/$name.out" || { echo "FAIL $name: the report does not say --loop fd"; fail=1; }
done
grep -Eq '"role":[[:space:]]*"target"' "$T/loop_fd_idle.json" 2>/dev/null ||
    { echo "FAIL loop_fd_idle: no target row"; fail=1; }
# --loop uv: the same agents attached to a uv_loop_t, where nxlbench has libuv
if "$B" --loop uv --threads 1 2>&1 | grep -q 'without libuv'; then
    echo "skip loop_uv: this nxlbench was built without libuv"
else
    run loop_uv $BW -- --loop uv --block_sizes 8,64K --num_iter 20 --warmup_iter 2 --pipeline_depth 4
    run loop_uv_latency p50_us -- --loop uv --mode latency --block_sizes 8 --num_iter 20 --warmup_iter 2
    run loop_uv_idle role wakeups_per_s -- --loop uv --mode idle --duration 0.3
    grep -Eq '"loop":[[:space:]]*"uv"' "$T/loop_uv.json" 2>/dev/null ||
        { echo "FAIL loop_uv: no \"loop\": \"uv\" in the JSON"; fail=1; }
fi
grep -Eq '"loop":[[:space:]]*"libevent"' "$T/write.json" || { echo "FAIL write: no \"loop\": \"libevent\" in the JSON"; fail=1; }
# refusals: --loop fd with a threaded initiator; an unknown loop
if "$B" --spawn --loop fd --threads 2 >"$T/loop_thr.out" 2>&1 || ! grep -q 'threaded agent' "$T/loop_thr.out"; then
    echo "FAIL loop_threads: expected a refusal of --loop fd --threads"; cat "$T/loop_thr.out"; fail=1
fi
if "$B" --spawn --loop qt >"$T/loop_bad.out" 2>&1 || ! grep -q 'libevent, fd or uv' "$T/loop_bad.out"; then
    echo "FAIL loop_bad: expected a refusal of --loop qt"; cat "$T/loop_bad.out"; fail=1
fi
# the same bench over libfabric, where it is built
if grep -q 'define NXL_HAVE_LIBFABRIC 1' "${builddir:-.}/config.h" 2>/dev/null; then
    run lf_write $BW -- --backend LIBFABRIC --block_sizes 8,4K,64K --num_iter 20 --warmup_iter 2
    run lf_read_shm $BW -- --backend LIBFABRIC --backend_params provider=shm --op_type READ \
        --block_sizes 4K,64K --max_batch_size 2 --num_iter 10 --warmup_iter 1 --pipeline_depth 2
    run lf_latency p50_us p99_us -- --backend LIBFABRIC --mode latency --block_sizes 8 \
        --num_iter 20 --warmup_iter 2
    run lf_loop_fd $BW -- --backend LIBFABRIC --backend_params provider=shm --loop fd \
        --block_sizes 4K,64K --num_iter 10 --warmup_iter 1 --pipeline_depth 4
    # the title names what the transport runs on: libfabric's provider
    for name in lf_write lf_read_shm; do
        grep -q '^# nxlbench .*LIBFABRIC (.*provider ' "$T/$name.out" ||
            { echo "FAIL $name: the title does not name the provider:"; grep '^# nxlbench' "$T/$name.out"; fail=1; }
    done
    grep -q '^# nxlbench .*provider shm' "$T/lf_read_shm.out" ||
        { echo "FAIL lf_read_shm: the title does not say provider shm"; fail=1; }
else
    echo "skip libfabric: this build has no LIBFABRIC transport"
fi
grep -Eq '"role":[[:space:]]*"target"' "$T/idle.json" || { echo "FAIL idle: no target row"; fail=1; }

# discovery through etcd instead of the TCP listener
erc=0
nxl_etcd_start || erc=$?
if [ $erc -eq 0 ]; then
    run etcd $BW -- --etcd_endpoints "$NXL_TEST_ETCD" --block_sizes 4K,64K --num_iter 10 --warmup_iter 1
elif [ $erc -eq 1 ]; then
    echo "skip etcd: no etcd server binary (apt-get install etcd-server)"
else
    echo "FAIL etcd: etcd did not start"; fail=1
fi

# POSIX: DRAM <-> FILE in one process, over a small footprint walked sequentially
prun() { # NAME -- ARGS...
    name=$1; shift 2
    if ! timeout 60 "$B" --backend POSIX --target_seg_type FILE --filepath "$T" \
        --storage_footprint 8M --check_consistency --quiet --json "$T/$name.json" "$@" \
        >"$T/$name.out" 2>&1; then
        echo "FAIL $name: nxlbench $* exited nonzero:"; cat "$T/$name.out"; fail=1; return
    fi
    for k in rows env nxl_version posix_engine direct footprint flags $BW; do
        grep -q "\"$k\":" "$T/$name.json" || { echo "FAIL $name: no \"$k\" in the JSON"; fail=1; }
    done
    grep -Eq '"footprint":[[:space:]]*8388608' "$T/$name.json" || { echo "FAIL $name: footprint not 8M"; fail=1; }
    echo "ok   $name"
}
prun posix_write -- --block_sizes 4K,64K --max_batch_size 2 --pipeline_depth 4 --num_files 2
prun posix_read -- --op_type READ --block_sizes 4K,64K --pipeline_depth 4
prun posix_write_direct -- --storage_enable_direct --block_sizes 4K,64K --pipeline_depth 4
prun posix_read_direct -- --op_type READ --storage_enable_direct --block_sizes 4K,1M \
    --pipeline_depth 2 --num_files 4
grep -Eq '"direct":[[:space:]]*true' "$T/posix_read_direct.json" || { echo "FAIL posix_read_direct: not direct"; fail=1; }
# one process, no metadata exchange: the POSIX agent on NXL_LOOP_FD under --loop fd
prun posix_loop_fd -- --loop fd --block_sizes 4K,64K --max_batch_size 2 --pipeline_depth 4
grep -Eq '"loop":[[:space:]]*"fd"' "$T/posix_loop_fd.json" 2>/dev/null ||
    { echo "FAIL posix_loop_fd: no \"loop\": \"fd\" in the JSON"; fail=1; }
ls "$T"/nxlbench-* >/dev/null 2>&1 && { echo "FAIL posix: files left in $T"; fail=1; }
if "$B" --backend POSIX --target_seg_type FILE --spawn >"$T/pspawn.out" 2>&1 ||
    ! grep -q "one process" "$T/pspawn.out"; then
    echo "FAIL posix_spawn: expected a refusal of --spawn"; cat "$T/pspawn.out"; fail=1
fi

# OBJ: --backend_params reach the transport (no server needed: a parameter it
# refuses, and Azure against a port where nothing listens, not retried)
if grep -q 'define NXL_HAVE_OBJ 1' "${builddir:-.}/config.h" 2>/dev/null; then
    OBJ="--backend OBJ --target_seg_type OBJ --obj_bucket_name nxl --block_sizes 4K --quiet"
    "$B" $OBJ --backend_params timeout_s=0 >"$T/obj_bad.out" 2>&1
    rc=$?
    if [ $rc -eq 0 ] || ! grep -q 'timeout_s=0' "$T/obj_bad.out"; then
        echo "FAIL obj_params: timeout_s=0 did not reach the OBJ transport (exit $rc):"; cat "$T/obj_bad.out"; fail=1
    else
        echo "ok   obj_params (refused: $(tail -1 "$T/obj_bad.out"))"
    fi
    if grep -q 'define NXL_HAVE_OBJ_AZURE 1' "${builddir:-.}/config.h"; then
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        cs="DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;BlobEndpoint=http://127.0.0.1:$port/devstoreaccount1"
        timeout 60 "$B" $OBJ --backend_params "api=azure,connection_string=$cs,retries=0,timeout_s=1" \
            >"$T/obj_azure.out" 2>&1
        rc=$?
        if [ $rc -eq 0 ] || ! grep -q "azure://nxl/.*after 1 attempt.*127.0.0.1:$port" "$T/obj_azure.out"; then
            echo "FAIL obj_azure: api=azure and retries=0 did not reach the transport (exit $rc):"
            cat "$T/obj_azure.out"; fail=1
        else
            echo "ok   obj_azure"
        fi
    fi
else
    echo "skip obj: this build has no OBJ transport"
fi

# --plot with a missing or an empty JSON: a sentence, a nonzero exit, nothing
# left in TMPDIR, gnuplot not run
mkdir "$T/tmp"
echo '{"mode": "bandwidth", "rows": []}' >"$T/empty.json"
for j in "$T/missing.json" "$T/empty.json"; do
    if TMPDIR=$T/tmp "$B" --plot "$T/p.png" "$j" >"$T/plot.out" 2>&1 ||
        ! grep -q "$j" "$T/plot.out" || [ -n "$(ls -A "$T/tmp")" ] || [ -e "$T/p.png" ]; then
        echo "FAIL plot $(basename "$j"): expected a refusal naming it and nothing left:"; cat "$T/plot.out"
        ls -A "$T/tmp"; fail=1
    else
        echo "ok   plot $(basename "$j") refused: $(tail -1 "$T/plot.out")"
    fi
done

# a clear refusal for memory types not supported yet
if "$B" --spawn --initiator_seg_type VRAM >"$T/vram.out" 2>&1 || ! grep -q "not supported" "$T/vram.out"; then
    echo "FAIL vram: expected a refusal"; cat "$T/vram.out"; fail=1
fi
exit $fail
