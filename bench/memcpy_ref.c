/* SPDX-License-Identifier: BSD-3-Clause */
/* memcpy_ref: one thread's memcpy over the same footprint as an nxlbench
 * row, the reference of bench/compare-large. Copies BLOCK bytes at a time
 * from a ring of RING blocks into another ring of RING blocks (nxlbench's
 * DRAM side: pipeline_depth x batch blocks on each side), for at least
 * the given seconds, and prints GB/s (10^9 B/s) and how much of each ring
 * 2 MiB pages map (a "thp" ring on a host short of free huge pages is
 * partly on 4 KiB pages).
 *
 *   memcpy_ref BLOCK RING [SECONDS] [KIND]
 *
 * KIND: the memory of both rings (ref_common.h): plain (malloc'd, the
 * default), thp (2 MiB-aligned, MADV_HUGEPAGE: what nxl_mem_alloc's
 * memory was compared with), shm (shared memory, as UCX allocates for
 * nxl_mem_alloc: 4 KiB pages where shmem_enabled is "never"), shmthp,
 * shmcol (shared memory collapsed onto 2 MiB pages, MADV_COLLAPSE),
 * shmcol_pte (those pages through a mapping 4 KiB off 2 MiB). */
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
        fprintf(stderr, "usage: memcpy_ref BLOCK RING [SECONDS] [KIND]\n");
        return 2;
    }
    size_t block = strtoull(argv[1], NULL, 0), ring = strtoull(argv[2], NULL, 0);
    double secs = argc > 3 ? atof(argv[3]) : 1.0;
    int thp = ring_kind(argc > 4 ? argv[4] : NULL);
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
    long hs = ring_huge_kb(src, block * ring), hd = ring_huge_kb(dst, block * ring);
    printf("%.3f GB/s %zu x %zu B in %.3f s, on 2 MiB pages: %ld + %ld of %zu kB\n",
           (double)n * block / (t - t0) / 1e9, n, block, t - t0, hs, hd, block * ring >> 10);
    return 0;
}
