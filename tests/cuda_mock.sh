#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# check_cuda again, with the CUDA runtime and driver replaced by
# tests/mock_cudart.c (streams as threads, device memory as shared
# mappings): the GPU cases run on machines without a GPU; check_gds with
# libcufile replaced by tests/mock_cufile.c (pread/pwrite against that
# device memory), kv_tiering --vram and nxlbench --backend GDS (VRAM to
# and from files, both directions, every byte). Then nxlbench
# --backend CUDA in every direction with --check_consistency (also to a
# peer process's VRAM, --cuda_peer), check_kvlayout's staged KV
# transfers into VRAM over UCX and LIBFABRIC, kv_stream
# --mem VRAM (two processes, CUDA IPC, posts from CUDA events), and
# bench/compare-cuda with the reference program on the stand-in too, so
# that they cannot silently rot. It proves the logic, not a real driver's
# behaviour or speed.
lib="$PWD/tests/.libs/libmockcudart.so"
if [ ! -f "$lib" ]; then
    echo "SKIP: the mock CUDA library was not built ($lib)"
    exit 77
fi
export NXL_CUDA_RUNTIME="$lib" NXL_CUDA_DRIVER="$lib" NXL_TEST_SMALL=1
tests/check_cuda || exit 1
# staged KV transfers into VRAM over UCX and LIBFABRIC: the CUDA
# transport's re-layout (the stand-in's routine), every byte
CK_RUN_CASE=vram tests/check_kvlayout || exit 1
# GDS: VRAM to and from files through the stand-in libcufile
cufile="$PWD/tests/.libs/libmockcufile.so"
if [ -x tests/check_gds ] && [ -f "$cufile" ]; then
    NXL_CUFILE_LIB="$cufile" tests/check_gds || exit 1
    # kv_tiering with its pool in VRAM, the file tier through GDS
    if [ -x examples/kv_tiering ]; then
        echo "kv_tiering --vram"
        out=$(NXL_CUFILE_LIB="$cufile" examples/kv_tiering --vram -d "${TMPDIR:-/tmp}" -b 256 \
            -s 64 -k 16 -r 3000) || { printf '%s\n' "$out"; exit 1; }
        printf '%s\n' "$out"
        # the engine line is the transport's whole sentence (it was cut at 200 bytes)
        printf '%s\n' "$out" | grep -q '^  engine: .*cuFile.*, eventfd in the reactor$' ||
            { echo "FAIL: kv_tiering's engine line is not GDS's whole description"; exit 1; }
    fi
    # nxlbench --backend GDS: the VRAM ring to and from files, every byte
    # checked, both directions (files in $TMPDIR, removed after)
    if grep -q 'X("gds", "GDS", 0' config.h 2>/dev/null; then
        echo "skip nxlbench --backend GDS: the GDS transport was not built"
    else
        for args in "--op_type WRITE --block_sizes 4K,64K --max_batch_size 4 --num_files 2" \
                    "--op_type READ --block_sizes 4K,64K --max_batch_size 4 --num_files 2" \
                    "--op_type WRITE --block_sizes 3M --backend_params chunk=1048576" \
                    "--op_type READ --block_sizes 3M --backend_params chunk=1048576" \
                    "--op_type READ --block_sizes 4K,1M --storage_enable_direct"; do
            echo "nxlbench --backend GDS $args"
            # shellcheck disable=SC2086
            NXL_CUFILE_LIB="$cufile" bench/nxlbench --backend GDS --initiator_seg_type VRAM \
                --target_seg_type FILE --filepath "${TMPDIR:-/tmp}" --storage_footprint 16M $args \
                --pipeline_depth 2 --check_consistency --quiet || exit 1
        done
        # without libcufile, or without CUDA: one sentence naming what is
        # missing, exit status 2, no crash
        for miss in "NXL_CUFILE_LIB=/nonexistent/libcufile.so.0:no libcufile" \
                    "NXL_CUDA_RUNTIME=/nonexistent/libcudart.so.13:no CUDA runtime"; do
            out=$(env "${miss%%:*}" bench/nxlbench --backend GDS --block_sizes 4K \
                --storage_footprint 1M 2>&1)
            rc=$?
            echo "$out"
            if [ $rc -ne 2 ] || [ "$(echo "$out" | wc -l)" -ne 1 ] ||
                ! echo "$out" | grep -q "${miss#*:}"; then
                echo "nxlbench --backend GDS with ${miss%%:*}: expected one sentence saying" \
                    "'${miss#*:}' and exit status 2 (got $rc)"
                exit 1
            fi
        done
        if bench/nxlbench --backend GDS --storage_enable_direct --block_sizes 512 \
            --storage_footprint 1M 2>&1 | grep -q "multiples of 4096"; then :; else
            echo "nxlbench --backend GDS: expected O_DIRECT with 512 B blocks refused"
            exit 1
        fi
    fi
fi
for args in "--initiator_seg_type DRAM --target_seg_type VRAM --op_type WRITE" \
            "--initiator_seg_type DRAM --target_seg_type VRAM --op_type READ" \
            "--initiator_seg_type VRAM --target_seg_type VRAM --op_type WRITE" \
            "--initiator_seg_type VRAM --target_seg_type DRAM --op_type WRITE" \
            "--initiator_seg_type VRAM --target_seg_type VRAM --op_type WRITE --cuda_peer" \
            "--initiator_seg_type VRAM --target_seg_type VRAM --op_type READ --cuda_peer" \
            "--initiator_seg_type DRAM --target_seg_type VRAM --op_type WRITE --cuda_peer"; do
    echo "nxlbench --backend CUDA $args"
    # shellcheck disable=SC2086
    bench/nxlbench --backend CUDA $args --block_sizes 4K,64K --max_batch_size 4 \
        --pipeline_depth 2 --num_iter 20 --warmup_iter 2 --check_consistency --quiet || exit 1
done
echo "kv_stream both --mem VRAM"
examples/kv_stream both --mem VRAM --layers 8 --blocks 16 --block_size 64K --quiet || exit 1
if [ -x bench/cuda_memcpy_ref ]; then
    # the reference links libcudart: the stand-in takes its place by preloading
    out=$(LD_PRELOAD="$lib" NXLBENCH=bench/nxlbench CUDA_MEMCPY_REF=bench/cuda_memcpy_ref \
        SIZES=4K,64K "${srcdir:-.}/bench/compare-cuda") || { echo "$out"; exit 1; }
    echo "$out"
    [ "$(echo "$out" | grep -c '^65536 ')" = 4 ] || { echo "compare-cuda: rows missing"; exit 1; }
fi
