#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The long version of check_lifecycle's restarts (not part of make check):
# the target process killed and started again $1 times (20 by default)
# under a stream of WRITEs with notifications, over each transport
# configuration of the suite (UCX over shared memory and TCP, LIBFABRIC
# tcp;ofi_rxm); it prints the median and worst time from a new target's
# start to the first successful re-post of the same transfer. Run it from
# the build tree after make check (or make tests/check_lifecycle):
#   sh tests/lifecycle-soak.sh 20
n=${1:-20}
t=tests/check_lifecycle
[ -x $t ] || { echo "$t not built (make tests/check_lifecycle)"; exit 99; }
NXL_LIFECYCLE_RESTARTS=$n CK_RUN_CASE=restarts CK_TIMEOUT_MULTIPLIER=4 $t
