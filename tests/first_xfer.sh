#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# examples/first_xfer: two agents, a WRITE with a notification; both
# callbacks must run and the data must arrive (exit 0), for each transport
# built that moves DRAM between agents. Then a transport that does not exist
# must fail with the list of what there is.
ex=examples/first_xfer
[ -x $ex ] || { echo "$ex not built"; exit 99; }
ran=0
for t in UCX LIBFABRIC; do
    out=$($ex $t 2>&1); rc=$?
    printf '%s\n' "$out" | sed "s/^/[$t] /"
    if [ $rc -ne 0 ]; then
        # a transport configure did not build is not a failure here
        if printf '%s\n' "$out" | grep -Eq "^  $t +no: not built"; then
            echo "SKIP: $t is not built"; continue
        fi
        echo "FAIL: first_xfer $t exited $rc"; exit 1
    fi
    printf '%s\n' "$out" | grep -q '^initiator: WRITE done: success$' || { echo "FAIL: no completion line"; exit 1; }
    printf '%s\n' "$out" | grep -q '^target: notification "block 0" from initiator; buffer: "hello from initiator"$' ||
        { echo "FAIL: no notification line"; exit 1; }
    ran=$((ran + 1))
done
[ $ran -gt 0 ] || { echo "no transport to run first_xfer with"; exit 77; }
out=$($ex NOSUCH 2>&1) && { echo "FAIL: first_xfer NOSUCH succeeded"; exit 1; }
printf '%s\n' "$out"
printf '%s\n' "$out" | grep -q '^transports of this installation:$' || { echo "FAIL: no transport list"; exit 1; }
# --help is the usage, not a transport's name
out=$($ex --help 2>&1) || { echo "FAIL: first_xfer --help exited nonzero:"; printf '%s\n' "$out"; exit 1; }
printf '%s\n' "$out" | grep -q '^usage: first_xfer \[TRANSPORT\]' && ! printf '%s\n' "$out" | grep -q 'initiator:' ||
    { echo "FAIL: first_xfer --help:"; printf '%s\n' "$out"; exit 1; }
$ex --bogus >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL: first_xfer --bogus exited $rc, not 2"; exit 1; }
echo "first_xfer: $ran transport(s) passed"
