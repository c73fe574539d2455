/* SPDX-License-Identifier: BSD-3-Clause */
/* memcpy_ref: one thread's memcpy over the same footprint as an nxlbench
 * row, the reference of bench/compare-large. Copies BLOCK bytes at a time
 * from a ring of RING blocks into another ring of RING blocks (nxlbench's
 * DRAM side: pipeline_depth x batch blocks on each side), for at least
 * the given seconds, and prints GB/s (10^9 B/s).
 *
 *   memcpy_ref BLOCK RING [SECONDS] [thp]
 *
 * thp: both rings 2 MiB-aligned with madvise(MADV_HUGEPAGE), as
 * nxl_mem_alloc's host memory; plain malloc'd memory otherwise. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

#include "ref_common.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: memcpy_ref BLOCK RING [SECONDS] [thp]\n");
        return 2;
    }
    size_t block = strtoull(argv[1], NULL, 0), ring = strtoull(argv[2], NULL, 0);
    double secs = argc > 3 ? atof(argv[3]) : 1.0;
    int thp = argc > 4 && !strcmp(argv[4], "thp");
    if (!block || !ring) {
        fprintf(stderr, "memcpy_ref: BLOCK and RING must be positive\n");
        return 2;
    }
    char *src = ring_alloc(block * ring, thp), *dst = ring_alloc(block * ring, thp);
    if (!src || !dst) {
        fprintf(stderr, "memcpy_ref: out of memory for 2 x %zu bytes\n", block * ring);
        return 1;
    }
    memset(src, 0x5a, block * ring);
    memset(dst, 0xa5, block * ring);
    for (size_t i = 0; i < ring; i++) /* a warm-up pass, as nxlbench's */
        memcpy(dst + i * block, src + i * block, block);
    size_t n = 0;
    double t0 = now_s(), t;
    do {
        size_t i = n % ring;
        memcpy(dst + i * block, src + i * block, block);
        n++;
        t = now_s();
    } while (t - t0 < secs || n < 8);
    volatile char sink = dst[(n - 1) % ring * block + block - 1];
    (void)sink;
    printf("%.3f GB/s %zu x %zu B in %.3f s\n", (double)n * block / (t - t0) / 1e9, n, block,
           t - t0);
    return 0;
}
