/* SPDX-License-Identifier: BSD-3-Clause */
/* ref_common.h: what the reference programs of bench/ share (cma_ref,
 * memcpy_ref): a monotonic clock in seconds, a ring of memory, plain or
 * in 2 MiB-aligned huge pages, and pinning to a CPU. The includer defines
 * _GNU_SOURCE before any include (sched_setaffinity, CPU_SET). */
#ifndef NXL_BENCH_REF_COMMON_H
#define NXL_BENCH_REF_COMMON_H

#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <sys/mman.h>

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline char *ring_alloc(size_t len, int thp)
{
    void *p = NULL;
    if (!thp)
        return malloc(len);
    size_t alen = (len + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    if (posix_memalign(&p, 2u << 20, alen))
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, alen, MADV_HUGEPAGE);
#endif
    return p;
}

static inline void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof(s), &s);
}

#endif
