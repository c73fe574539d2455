#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Every adapter passes the same tests: check_loop (the NXL_LOOP_FD
# contract, its driver test through the modes below) and the network
# conformance suite check_xfer, with their agents on NXL_LOOP_FD driven by
# the application's loop of tests/testlib.h: NXL_TEST_LOOP=fd (a poll() on
# nxl_agent_backend_fd()) and NXL_TEST_LOOP=uv (a uv_loop_t per agent,
# <nxl/uv.h>; skipped when the suites were built without libuv: they exit
# 77). The default libevent mode is the suites' own run under make check.
failed=0
ran=0
for mode in fd uv; do
    for t in tests/check_loop tests/check_xfer; do
        [ -x $t ] || { echo "$t not built"; exit 99; }
        out=$(NXL_TEST_LOOP=$mode $t 2>&1); rc=$?
        printf '%s\n' "$out" | sed "s#^#[$mode $t] #"
        case $rc in
            0) ran=$((ran + 1)) ;;
            77) echo "SKIP: $t with NXL_TEST_LOOP=$mode: $(printf '%s\n' "$out" | tail -n 1)" ;;
            *) echo "FAIL: $t with NXL_TEST_LOOP=$mode exited $rc"; failed=$((failed + 1)) ;;
        esac
    done
done
[ $failed -eq 0 ] || exit 1
[ $ran -gt 0 ] || exit 77
