/* SPDX-License-Identifier: BSD-3-Clause */
/* ref_common.h: what the reference programs of bench/ share (cma_ref,
 * memcpy_ref, ring_ref): a monotonic clock in seconds, a ring of memory
 * of one of the kinds below, and pinning to a CPU. The includer defines
 * _GNU_SOURCE before any include (sched_setaffinity, CPU_SET). */
#ifndef NXL_BENCH_REF_COMMON_H
#define NXL_BENCH_REF_COMMON_H

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <time.h>
#include <sys/mman.h>

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Ring memory kinds (memcpy_ref's last argument):
 *   RING_PLAIN   malloc'd
 *   RING_THP     2 MiB-aligned anonymous memory, MADV_HUGEPAGE
 *   RING_SHM     a shared anonymous mapping (shmem, as UCX's shared-memory
 *                transports allocate): 4 KiB pages where
 *                /sys/kernel/mm/transparent_hugepage/shmem_enabled says never
 *   RING_SHMTHP  the same, 2 MiB-aligned, MADV_HUGEPAGE (huge pages where
 *                shmem_enabled is advise or always)
 *   RING_SHMCOL  a System V segment attached 2 MiB-aligned, one byte a
 *                2 MiB written and MADV_COLLAPSE'd: shmem on 2 MiB pages
 *                mapped by PMDs, whatever shmem_enabled says (Linux 6.1)
 *   RING_SHMCOL_PTE  the same segment, used through a second attach 4 KiB
 *                past a 2 MiB boundary: the same huge pages mapped 4 KiB at
 *                a time (a peer's attach at an address of the kernel's
 *                choosing) */
enum { RING_PLAIN, RING_THP, RING_SHM, RING_SHMTHP, RING_SHMCOL, RING_SHMCOL_PTE };

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

static inline int ring_kind(const char *s)
{
    static const char *const names[] = {"plain", "thp", "shm", "shmthp", "shmcol", "shmcol_pte"};
    for (int i = 0; s && i < (int)(sizeof(names) / sizeof(names[0])); i++)
        if (!strcmp(s, names[i]))
            return i;
    return RING_PLAIN;
}

/* a 2 MiB-aligned address with len bytes free after it (and 4 KiB more),
 * its reservation (PROT_NONE) left in place for SHM_REMAP; NULL if none */
static inline char *ring_hole(size_t len)
{
    size_t h = 2u << 20;
    char *r = mmap(NULL, len + 2 * h, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                   0);
    if (r == MAP_FAILED)
        return NULL;
    return (char *)(((size_t)r + h - 1) & ~(h - 1));
}

static inline char *ring_alloc(size_t len, int kind)
{
    void *p = NULL;
    size_t h = 2u << 20, alen = (len + h - 1) & ~(h - 1);
    if (kind == RING_PLAIN)
        return malloc(len);
    if (kind == RING_SHM || kind == RING_SHMTHP) {
        size_t extra = kind == RING_SHMTHP ? h : 0;
        char *m = mmap(NULL, alen + extra, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                       0);
        if (m == MAP_FAILED)
            return NULL;
        if (kind == RING_SHM)
            return m;
        char *a = (char *)(((size_t)m + h - 1) & ~(h - 1));
#ifdef MADV_HUGEPAGE
        madvise(a, alen, MADV_HUGEPAGE);
#endif
        return a;
    }
    if (kind == RING_SHMCOL || kind == RING_SHMCOL_PTE) {
        int id = shmget(IPC_PRIVATE, alen, IPC_CREAT | 0600);
        char *a = id < 0 ? NULL : ring_hole(alen);
        char *m = a ? shmat(id, a, SHM_REMAP) : (char *)-1;
        if (m == (char *)-1) {
            if (id >= 0)
                shmctl(id, IPC_RMID, NULL);
            return NULL;
        }
        for (size_t o = 0; o < alen; o += h)
            m[o] = 0;
        if (madvise(m, alen, MADV_COLLAPSE) != 0)
            fprintf(stderr, "ring_alloc: MADV_COLLAPSE of a shared segment refused: the ring "
                            "stays on 4 KiB pages\n");
        if (kind == RING_SHMCOL_PTE) {
            char *b = ring_hole(alen);
            char *q = b ? shmat(id, b + 4096, SHM_REMAP) : (char *)-1;
            if (q != (char *)-1)
                m = q;
        }
        shmctl(id, IPC_RMID, NULL);
        return m;
    }
    if (posix_memalign(&p, h, alen))
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, alen, MADV_HUGEPAGE);
#endif
    return p;
}

/* kB of [p, p + len) mapped by 2 MiB pages (anonymous or shared), from
 * /proc/self/smaps; -1 where unreadable */
static inline long ring_huge_kb(const void *p, size_t len)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[256];
    long kb = 0;
    int in = 0;
    size_t a = (size_t)p;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi, v;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = lo < a + len && hi > a;
        else if (in && (sscanf(line, "AnonHugePages: %lu kB", &v) == 1 ||
                        sscanf(line, "ShmemPmdMapped: %lu kB", &v) == 1))
            kb += (long)v;
    }
    fclose(f);
    return kb;
}

static inline void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof(s), &s);
}

#endif
