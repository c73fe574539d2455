/* SPDX-License-Identifier: BSD-3-Clause */
/* Registered DRAM onto 2 MiB pages (MADV_COLLAPSE), for the transports
 * that take a thp_collapse parameter (thp.h): POSIX, UCX.
 *
 * POSIX: an O_DIRECT request hands the device one scatter-gather segment per
 * physically contiguous run of its buffer. Memory the application
 * allocated itself (malloc, posix_memalign: 4 KiB pages) gives one segment
 * per page, 256 for a 1 MiB block, and on a virtio disk without indirect
 * descriptors each segment takes one slot of a ring of 256: about one such
 * request fits in flight, and the block layer splits a 1 MiB request
 * (256 segments) into 254 + 2. On 2 MiB pages the same request is one or
 * two segments (doc/storage-notes.md has the measurements).
 *
 * madvise(MADV_COLLAPSE) (Linux 6.1) moves the whole, aligned 2 MiB ranges
 * of a region onto huge pages in place: same addresses, same contents, the
 * application sees nothing but the layout. It copies each range, so it
 * costs 0.3-10 ms per 2 MiB here (more under load), holding the
 * process's mmap lock (page faults and cross-memory attach into the
 * process wait); a thread of its own does it after the registration
 * returns (thp_collapse=background: at SCHED_IDLE, a pause of 3 times a
 * range's time after each, so that transfers right after a large
 * registration are not held up), or
 * the registration does it before returning (sync); auto, the default
 * with direct=1, does regions up to 64 MiB at registration and larger
 * ones in the background. In the background a range whose pages are pinned
 * by I/O in flight is refused (EAGAIN) and tried again later, up to 20
 * times over a second. Failure is never an error: the memory stays as
 * it was (kernels before 6.1, file mappings, no huge page free, pages
 * pinned by I/O in flight: retried a few times). A range none of whose
 * pages the application has written yet (registered right after malloc)
 * is not collapsed (the kernel refuses it as it refuses a kernel that
 * cannot; mincore tells the two apart) but advised MADV_HUGEPAGE: its
 * first writes fault in a 2 MiB page where one is free.
 *
 * Nothing is undone at deregistration: collapsing memory that the
 * application has freed and reused is as harmless as collapsing it before
 * (contents are kept), and on an unmapped range the kernel refuses. */
#include "thp.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

#define THP_SIZE (2u << 20)
#define THP_TRIES 20         /* per range, when the kernel says EAGAIN (pinned by I/O, busy) */
#define THP_RETRY_US 50000   /* between those tries */
#define THP_PACE 3           /* in the background: after a range that took t, a pause of 3 t */

typedef struct thp_range {
    uintptr_t a, e;
    int tries;
    struct thp_range *next;
} thp_range_t;

struct nxlt_thp {
    pthread_t th;
    bool started, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    thp_range_t *head, *tail;
    /* under mu: statistics (read at destroy) */
    uint64_t asked, done, us;
    uint64_t untouched;      /* ranges none of whose pages were in memory: left alone */
    int last_err;            /* errno of the last refusal, 0 if none */
    bool unsupported;        /* EINVAL: this kernel or this memory cannot: stop asking */
};

/* one 2 MiB range: 0, or the errno; ENODATA: none of its pages is in
 * memory yet (the kernel says EINVAL: nothing to collapse, as it says to
 * a kernel or a mapping that cannot; memory registered before the
 * application first wrote it): advised MADV_HUGEPAGE instead, so that its
 * first write faults in a 2 MiB page */
static int thp_one(uintptr_t p)
{
    if (madvise((void *)p, THP_SIZE, MADV_COLLAPSE) == 0)
        return 0;
    int e = errno;
    unsigned char vec[THP_SIZE / 4096];
    if (e == EINVAL && mincore((void *)p, THP_SIZE, vec) == 0) {
        size_t i = 0;
        while (i < sizeof(vec) && !(vec[i] & 1))
            i++;
        if (i == sizeof(vec)) {
            madvise((void *)p, THP_SIZE, MADV_HUGEPAGE);
            return ENODATA;
        }
    }
    return e;
}

/* collapses [r->a, r->e) from r->a on; returns with r->a past what is done,
 * or at the range that said EAGAIN (to be tried again); mu not held.
 * paced: a pause after each range collapsed (THP_PACE) */
static void thp_walk(nxlt_thp_t *t, thp_range_t *r, bool *again, bool paced)
{
    *again = false;
    while (r->a < r->e) {
        pthread_mutex_lock(&t->mu);
        bool stop = t->stop || t->unsupported;
        pthread_mutex_unlock(&t->mu);
        if (stop)
            return;
        uint64_t t0 = nxlt_now_us();
        int e = thp_one(r->a);
        uint64_t dt = nxlt_now_us() - t0;
        pthread_mutex_lock(&t->mu);
        t->us += dt;
        if (!e)
            t->done += THP_SIZE;
        else if (e == ENODATA)
            t->untouched += THP_SIZE;
        else
            t->last_err = e;
        if (e == EINVAL)
            t->unsupported = true;
        pthread_mutex_unlock(&t->mu);
        if (e == EAGAIN && ++r->tries < THP_TRIES) {
            *again = true;
            return;
        }
        r->tries = 0;
        r->a += THP_SIZE;
        if (paced && !e && r->a < r->e)
            usleep((useconds_t)(dt * THP_PACE < 100000 ? dt * THP_PACE : 100000));
    }
}

/* r at the back of the thread's queue (t->mu held) */
static void thp_queue(nxlt_thp_t *t, thp_range_t *r)
{
    r->next = NULL;
    if (t->tail)
        t->tail->next = r;
    else
        t->head = r;
    t->tail = r;
}

static void *thp_main(void *arg)
{
    nxlt_thp_t *t = arg;
    /* runs where the CPU would idle: not in the way of the transfers */
    struct sched_param sp = {0};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (!t->stop && !t->head)
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->stop) {
            pthread_mutex_unlock(&t->mu);
            return NULL;
        }
        thp_range_t *r = t->head;
        t->head = r->next;
        if (!t->head)
            t->tail = NULL;
        pthread_mutex_unlock(&t->mu);
        bool again;
        thp_walk(t, r, &again, true);
        if (again) {
            /* pinned by I/O in flight, or busy: back of the queue, a little later */
            usleep(THP_RETRY_US);
            pthread_mutex_lock(&t->mu);
            thp_queue(t, r);
            pthread_mutex_unlock(&t->mu);
        } else {
            free(r);
        }
    }
}

/* the whole, aligned 2 MiB ranges of [addr, addr + len): false if none */
static bool thp_span(uint64_t addr, size_t len, uintptr_t *a, uintptr_t *e)
{
    if (addr > UINTPTR_MAX - len)
        return false;
    *a = ((uintptr_t)addr + THP_SIZE - 1) & ~(uintptr_t)(THP_SIZE - 1);
    *e = ((uintptr_t)addr + len) & ~(uintptr_t)(THP_SIZE - 1);
    return *a >= (uintptr_t)addr && *e > *a;
}

void nxlt_thp_add(nxlt_thp_t **tp, nxlt_ctx_t *ctx, const char *who, int mode,
                  size_t sync_max, uint64_t addr, size_t len)
{
    uintptr_t a, e;
    if (mode == NXLT_THP_OFF || !thp_span(addr, len, &a, &e))
        return;
    nxlt_thp_t *t = *tp;
    if (!t) {
        t = calloc(1, sizeof(*t));
        if (!t)
            return;
        pthread_mutex_init(&t->mu, NULL);
        pthread_cond_init(&t->cv, NULL);
        *tp = t;
    }
    pthread_mutex_lock(&t->mu);
    bool unsupported = t->unsupported;
    if (!unsupported)
        t->asked += e - a;
    pthread_mutex_unlock(&t->mu);
    if (unsupported)
        return;
    thp_range_t r0 = {.a = a, .e = e};
    if (mode == NXLT_THP_SYNC || (mode == NXLT_THP_AUTO && e - a <= sync_max)) {
        bool again;
        do {
            thp_walk(t, &r0, &again, false);
            if (again)
                usleep(THP_RETRY_US / 10);
        } while (again);
        /* auto: the thread may be working on a larger region meanwhile */
        pthread_mutex_lock(&t->mu);
        uint64_t done = t->done, asked = t->asked;
        int err = t->last_err;
        pthread_mutex_unlock(&t->mu);
        nxlt_log(ctx, NXL_LOG_DEBUG, "%s: DRAM %#llx+%zu: 2 MiB pages for %llu of %llu "
                                     "bytes so far (MADV_COLLAPSE%s%s)",
                 who, (unsigned long long)addr, len, (unsigned long long)done,
                 (unsigned long long)asked, err ? ": " : "", err ? strerror(err) : "");
        return;
    }
    thp_range_t *r = malloc(sizeof(*r));
    if (!r)
        return;
    *r = r0;
    pthread_mutex_lock(&t->mu);
    if (!t->started) {
        if (pthread_create(&t->th, NULL, thp_main, t) != 0) {
            pthread_mutex_unlock(&t->mu);
            free(r);
            nxlt_log(ctx, NXL_LOG_INFO, "%s: no thread for 2 MiB pages (%s); registered "
                                        "DRAM keeps its pages", who, strerror(errno));
            return;
        }
        t->started = true;
    }
    thp_queue(t, r);
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

void nxlt_thp_stop(nxlt_thp_t **tp, char *stats, size_t cap)
{
    nxlt_thp_t *t = *tp;
    if (!t) {
        snprintf(stats, cap, "none asked");
        return;
    }
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (t->started)
        pthread_join(t->th, NULL);
    snprintf(stats, cap, "%llu of %llu bytes in %.1f ms, %llu advised (never written)%s%s%s",
             (unsigned long long)t->done, (unsigned long long)t->asked, t->us / 1e3,
             (unsigned long long)t->untouched, t->last_err ? " (last refusal: " : "",
             t->last_err ? strerror(t->last_err) : "", t->last_err ? ")" : "");
    for (thp_range_t *r = t->head, *n; r; r = n) {
        n = r->next;
        free(r);
    }
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
    *tp = NULL;
}
