/* SPDX-License-Identifier: BSD-3-Clause */
/* ring_ref: a pipelined copy between two processes through a ring of
 * slots in shared memory, as UCX's shared-memory transports copy large
 * messages: the question is whether two cores, each doing one user-space
 * memcpy of every byte at the same time, come near one thread's memcpy
 * (bench/memcpy_ref), where the kernel's cross-memory attach does not
 * (bench/cma_ref).
 *
 * Two processes (a parent, the initiator, and a forked target), each with
 * a ring of RING blocks of BLOCK bytes of its own, and between them a
 * shared ring of N slots of CHUNK bytes (a memfd mapped by both). For a
 * write the initiator copies chunk k of a block into a slot while the
 * target copies chunk k-1 out of its slot into its block; a read the other
 * way round (the target fills the slots, the initiator drains them). The
 * slots change hands through two counters in shared memory (chunks filled,
 * chunks drained); a block is done when its last chunk is in the
 * destination (a write waits for the target to drain it). Blocks one after
 * the other, for SECONDS, and prints GB/s (10^9 B/s).
 *
 *   ring_ref write|read BLOCK RING CHUNK SECONDS [slots N] [thp]
 *            [cpus I,T] [wait spin|futex|hybrid]
 *
 * slots: the shared ring's slots (default 4); thp: both processes' rings
 * 2 MiB-aligned with madvise(MADV_HUGEPAGE) (malloc'd 4 KiB pages
 * otherwise), and the shared ring on huge pages where the host gives them
 * (MFD_HUGETLB, then shmem with MADV_HUGEPAGE; the line printed says
 * which); wait: how a side waits for a slot or a request, busy-waiting
 * with pause (spin, the default), on a futex at once (futex), or spinning
 * 20 us before the futex (hybrid); the side that moves a counter wakes
 * the futex only when the other side sleeps on it. Also printed: each
 * process's CPU time in the timed part, and the bytes over the larger one
 * (with futex waits: the rate two otherwise idle CPUs would give, where
 * other tasks share these). */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include "ref_common.h"

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 4U
#endif

enum { W_SPIN, W_FUTEX, W_HYBRID };

/* a counter another process waits on, alone in its cache line */
struct word {
    _Atomic uint32_t v;
    _Atomic uint32_t sleeping; /* the waiter is (about to be) in futex_wait */
    char pad[56];
};

struct ctl {
    struct word filled;  /* chunks put into slots, ever */
    struct word drained; /* chunks taken out of slots, ever */
    struct word req;     /* requests posted by the initiator, ever */
    size_t block;        /* the request's block index in the rings */
    _Atomic double target_cpu; /* the target's CPU time (s), as of its last chunk */
    int quit;
};

static int wait_mode = W_SPIN;

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int is_target;
static struct ctl *ctl_g;

/* the target's CPU time, before it hands a chunk over */
static void note_cpu(void)
{
    if (is_target)
        atomic_store_explicit(&ctl_g->target_cpu, cpu_s(), memory_order_relaxed);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static void futex(_Atomic uint32_t *w, int op, uint32_t val)
{
    syscall(SYS_futex, (uint32_t *)w, op, val, NULL, NULL, 0);
}

/* wait until w->v - base >= need (unsigned, wrapping); returns w->v */
static uint32_t wait_for(struct word *w, uint32_t base, uint32_t need)
{
    uint32_t v = atomic_load_explicit(&w->v, memory_order_acquire);
    if (v - base >= need)
        return v;
    if (wait_mode != W_FUTEX) {
        double until = wait_mode == W_HYBRID ? now_s() + 20e-6 : 0;
        for (unsigned i = 0;; i++) {
            cpu_relax();
            v = atomic_load_explicit(&w->v, memory_order_acquire);
            if (v - base >= need)
                return v;
            if (wait_mode == W_HYBRID && !(i & 63) && now_s() > until)
                break;
        }
    }
    for (;;) {
        atomic_store(&w->sleeping, 1); /* seq_cst: against post()'s store and load */
        v = atomic_load(&w->v);
        if (v - base >= need)
            break;
        futex(&w->v, FUTEX_WAIT, v);
    }
    atomic_store_explicit(&w->sleeping, 0, memory_order_relaxed);
    return atomic_load_explicit(&w->v, memory_order_acquire);
}

static void post(struct word *w, uint32_t v)
{
    if (wait_mode == W_SPIN) {
        atomic_store_explicit(&w->v, v, memory_order_release);
        return;
    }
    atomic_store(&w->v, v);
    if (atomic_load(&w->sleeping))
        futex(&w->v, FUTEX_WAKE, 1);
}

/* one side of a block through the shared ring: the producer copies src
 * into slots, the consumer copies slots into dst; both move len bytes */
static void produce(struct ctl *c, char *slots, size_t nslots, size_t chunk, const char *src,
                    size_t len)
{
    uint32_t f = atomic_load_explicit(&c->filled.v, memory_order_relaxed);
    for (size_t at = 0; at < len; at += chunk, f++) {
        size_t n = len - at < chunk ? len - at : chunk;
        /* a free slot: fewer than nslots chunks filled and not drained */
        wait_for(&c->drained, f - (uint32_t)nslots, 1);
        memcpy(slots + (f % nslots) * chunk, src + at, n);
        note_cpu();
        post(&c->filled, f + 1);
    }
}

static void consume(struct ctl *c, char *slots, size_t nslots, size_t chunk, char *dst,
                    size_t len)
{
    uint32_t d = atomic_load_explicit(&c->drained.v, memory_order_relaxed);
    for (size_t at = 0; at < len; at += chunk, d++) {
        size_t n = len - at < chunk ? len - at : chunk;
        wait_for(&c->filled, d, 1);
        memcpy(dst + at, slots + (d % nslots) * chunk, n);
        note_cpu();
        post(&c->drained, d + 1);
    }
}

/* the shared ring: a memfd both processes map (before the fork) */
static void *shared_alloc(size_t len, int thp, const char **how)
{
    size_t alen = (len + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    int fd = -1;
    void *p;
    *how = "4 KiB pages";
    if (thp && (fd = memfd_create("ring_ref", MFD_HUGETLB)) >= 0) {
        if (ftruncate(fd, alen) == 0 &&
            (p = mmap(NULL, alen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0)) !=
                MAP_FAILED) {
            close(fd);
            *how = "hugetlb";
            return p;
        }
        close(fd);
    }
    if ((fd = memfd_create("ring_ref", 0)) < 0 || ftruncate(fd, alen))
        return NULL;
    p = mmap(NULL, alen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return NULL;
    if (thp && madvise(p, alen, MADV_HUGEPAGE) == 0)
        *how = "shmem, MADV_HUGEPAGE asked";
    memset(p, 0, alen);
    return p;
}

/* the shared ring's huge pages, as the kernel counts them (ShmemPmdMapped) */
static long shmem_pmd_kb(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "ShmemPmdMapped: %ld", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: ring_ref write|read BLOCK RING CHUNK SECONDS [slots N] [thp] "
                        "[cpus I,T] [wait spin|futex|hybrid]\n");
        return 2;
    }
    int wr = !strcmp(argv[1], "write");
    if (!wr && strcmp(argv[1], "read")) {
        fprintf(stderr, "ring_ref: write or read, not %s\n", argv[1]);
        return 2;
    }
    size_t block = strtoull(argv[2], NULL, 0), ring = strtoull(argv[3], NULL, 0);
    size_t chunk = strtoull(argv[4], NULL, 0), nslots = 4;
    double secs = atof(argv[5]);
    int thp = 0, ci = 0, ct = 1;
    for (int i = 6; i < argc; i++) {
        if (!strcmp(argv[i], "thp"))
            thp = 1;
        else if (!strcmp(argv[i], "slots") && i + 1 < argc)
            nslots = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "cpus") && i + 1 < argc)
            sscanf(argv[++i], "%d,%d", &ci, &ct);
        else if (!strcmp(argv[i], "wait") && i + 1 < argc) {
            i++;
            wait_mode = !strcmp(argv[i], "futex") ? W_FUTEX
                        : !strcmp(argv[i], "hybrid") ? W_HYBRID
                                                     : W_SPIN;
        }
    }
    if (!block || !ring || !chunk || nslots < 1) {
        fprintf(stderr, "ring_ref: BLOCK, RING, CHUNK and slots must be positive\n");
        return 2;
    }
    size_t len = block * ring;
    const char *how;
    char *sh = shared_alloc(4096 + nslots * chunk, thp, &how);
    if (!sh) {
        perror("ring_ref: shared ring");
        return 1;
    }
    struct ctl *c = (struct ctl *)sh;
    ctl_g = c;
    char *slots = sh + 4096;
    /* each process's ring allocated and faulted in by itself after the fork,
     * as cma_ref's */
    int up[2];
    if (pipe(up))
        return 1;
    pid_t pid = fork();
    if (pid == 0) { /* the target */
        is_target = 1;
        pin(ct);
        char *theirs = ring_alloc(len, thp);
        if (!theirs)
            _exit(1);
        memset(theirs, 2, len);
        char ok = 1;
        if (write(up[1], &ok, 1) != 1)
            _exit(1);
        uint32_t seen = 0;
        int bad = 0;
        for (;;) {
            seen = wait_for(&c->req, seen, 1);
            if (c->quit)
                break;
            char *b = theirs + c->block * block;
            if (wr) {
                consume(c, slots, nslots, chunk, b, block);
                bad |= b[0] != 1 || b[block - 1] != 1; /* the initiator's bytes */
            } else
                produce(c, slots, nslots, chunk, b, block);
        }
        _exit(bad);
    }
    pin(ci);
    char *mine = ring_alloc(len, thp);
    if (!mine)
        return 1;
    memset(mine, 1, len);
    char ok;
    if (read(up[0], &ok, 1) != 1)
        return 1;
    uint32_t rq = 0;
    size_t n = 0, nch = (block + chunk - 1) / chunk;
    double t0 = 0, t = 0, ci0 = 0, ct0 = 0;
    for (int pass = 0; pass < 2; pass++) { /* a warm-up pass over the ring, then the timed part */
        n = 0;
        t0 = now_s();
        ci0 = cpu_s();
        ct0 = atomic_load_explicit(&c->target_cpu, memory_order_relaxed);
        do {
            size_t i = n % ring;
            c->block = i;
            post(&c->req, ++rq);
            if (wr) {
                uint32_t f = atomic_load_explicit(&c->filled.v, memory_order_relaxed);
                produce(c, slots, nslots, chunk, mine + i * block, block);
                wait_for(&c->drained, f, (uint32_t)nch); /* every byte in the target's block */
            } else {
                consume(c, slots, nslots, chunk, mine + i * block, block);
            }
            n++;
            t = now_s();
        } while (pass ? t - t0 < secs || n < 8 : n < ring);
    }
    double cpu_i = cpu_s() - ci0, cpu_t = 0;
    long pmd = shmem_pmd_kb();
    c->quit = 1;
    post(&c->req, ++rq);
    int st = 0;
    waitpid(pid, &st, 0);
    cpu_t = atomic_load_explicit(&c->target_cpu, memory_order_relaxed) - ct0;
    /* the blocks arrived: checked by the target for a write, here for a read */
    char *last = mine + (n - 1) % ring * block;
    if (!WIFEXITED(st) || WEXITSTATUS(st) || (!wr && (last[0] != 2 || last[block - 1] != 2))) {
        fprintf(stderr, "ring_ref: the last block did not arrive\n");
        return 1;
    }
    static const char *wn[] = {"spin", "futex", "hybrid"};
    /* the CPU time each process had: under load (other tasks on the two
     * CPUs) bytes / the larger one says what two free CPUs would reach,
     * with waits that sleep (futex); spinning counts as CPU time */
    double cmax = cpu_i > cpu_t ? cpu_i : cpu_t;
    printf("%.3f GB/s %s %zu x %zu B, chunk %zu, %zu slots, wait %s%s, ring %s%s in %.3f s; "
           "CPU s initiator %.3f target %.3f: %.3f GB/s per CPU s of the busier\n",
           (double)n * block / (t - t0) / 1e9, wr ? "write" : "read", n, block, chunk, nslots,
           wn[wait_mode], thp ? ", thp" : "", how, pmd > 0 ? " (huge pages mapped)" : "",
           t - t0, cpu_i, cpu_t, cmax > 0 ? (double)n * block / cmax / 1e9 : 0.0);
    return 0;
}
