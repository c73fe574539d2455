# SPDX-License-Identifier: BSD-3-Clause
# compare-lib.sh — sourced by the bench/compare-* scripts. When COMPARE_TSV names a file, each
# result row a script prints is also appended there, one line per row, tab-separated:
#
#   source  op  size  reference  ref_value  nxl_value  unit
#
# source: what moves and over what ("UCX shm, nxl_mem_alloc", "POSIX O_DIRECT, plain pages");
# op: WRITE, READ, latency, ...; size in bytes; reference: the tool nxl is compared with;
# unit: GB/s (higher is better) or us (lower is better). bench/perf-report collects these
# rows into tables and plots. Without COMPARE_TSV nothing happens.
compare_row() {
    [ -n "${COMPARE_TSV:-}" ] || return 0
    [ $# -eq 7 ] || { echo "compare_row: 7 fields wanted, got $#: $*" >&2; return 0; }
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$COMPARE_TSV"
}
