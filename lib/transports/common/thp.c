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
 * process's mmap lock for writing (page faults and cross-memory attach
 * into the process wait); a thread of its own does it after the
 * registration returns (thp_collapse=background), or the registration
 * does it before returning (sync); auto, the default with direct=1, does
 * regions up to 64 MiB at registration and larger ones in the background.
 *
 * In the background, one 2 MiB range at a time, each at normal priority
 * (a thread at SCHED_IDLE that holds the mmap lock is preempted by any
 * other thread of the machine, and every copy into the process waits for
 * it: 6 ranges took 1.7 s that way on a loaded host), a pause 3 times as
 * long as the range took after each (the copies of a peer into this memory
 * get the lock three quarters of the time; with no pause they starve, and
 * the ranges take 10 ms each; with a pause of 2 t, 16 transfers in flight
 * over a 256 MiB ring fresh from its registration moved less in their
 * first second). While the rest of the process is busy (it used more
 * than half a CPU over the last 5 ms: it is the one copying) a range
 * waits first until the CPUs the thread may run on were idle half a CPU's
 * time or more (/proc/stat, looked at every 50 ms: a thread at SCHED_IDLE
 * would find such a CPU, but an unprivileged one cannot leave SCHED_IDLE
 * for the collapse, nor be woken promptly at the end). The target of
 * cross-memory attach (the side whose pages the kernel pins one by one,
 * where 2 MiB pages count: 2.4-3.3 times the throughput here, against
 * 1.0-1.4 for the initiator's) is waiting meanwhile, so its ranges go at
 * once. A range whose pages are pinned by I/O in flight is refused
 * (EAGAIN) and tried again later, up to 20 times over a second. Failure
 * is never an error: the memory stays as it was (kernels before 6.1, file
 * mappings, no huge page free, pinned by I/O in flight: retried a few
 * times). A range none of whose pages the application has written yet
 * (registered right after malloc) is not collapsed (the kernel refuses it
 * as it refuses a kernel that cannot; mincore tells the two apart) but
 * advised MADV_HUGEPAGE: its first writes fault in a 2 MiB page where one
 * is free.
 *
 * At deregistration (nxlt_thp_drop) the region's ranges still queued are
 * dropped, and the one being collapsed is waited for: nothing is collapsed
 * in memory the application may have freed and mapped again meanwhile. */
#include "thp.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

#define THP_SIZE (2u << 20)
#define THP_TRIES 20         /* per range, when the kernel says EAGAIN (pinned by I/O, busy) */
#define THP_RETRY_US 50000   /* between those tries */
#define THP_PACE 3           /* in the background: after a range that took t, a pause of 3 t */
#define THP_BUSY_WINDOW_US 5000 /* the process's CPU time is judged over at least this */
#define THP_IDLE_WINDOW_US 50000 /* the CPUs' idle time (/proc/stat, in 10 ms ticks): this */

typedef struct thp_range {
    uintptr_t a, e;
    int tries;
    struct thp_range *next;
} thp_range_t;

/* the thread's view of the load: the rest of the process (all its threads
 * but this one) used more than half a CPU since the last look,
 * THP_BUSY_WINDOW_US at least ago (the verdict before it otherwise); the
 * CPUs it may run on were idle half a CPU's time or more since the last
 * look at /proc/stat, THP_IDLE_WINDOW_US at least ago */
typedef struct thp_load {
    uint64_t wall, cpu; /* ns at the last look */
    bool busy;
    uint64_t st_wall, st_idle, st_total; /* /proc/stat at its last look (ticks) */
    bool idle_cpu;
} thp_load_t;

struct nxlt_thp {
    pthread_t th;
    bool started, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* the queue, the gate, a range done (broadcast) */
    thp_range_t *head, *tail;
    thp_range_t *walking;    /* the range the thread is on, out of the queue */
    uintptr_t cur;           /* the 2 MiB range madvise is on now (the thread's), or 0 */
    uint64_t gated;          /* ranges that waited for an idle CPU */
    thp_load_t load;         /* the thread's alone */
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

static uint64_t thp_clock_ns(clockid_t c)
{
    struct timespec ts;
    if (clock_gettime(c, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static bool thp_busy(thp_load_t *l)
{
    uint64_t wall = thp_clock_ns(CLOCK_MONOTONIC);
    uint64_t cpu = thp_clock_ns(CLOCK_PROCESS_CPUTIME_ID) - thp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    if (!l->wall || wall - l->wall >= THP_BUSY_WINDOW_US * 1000u) {
        if (l->wall)
            l->busy = cpu - l->cpu > (wall - l->wall) / 2;
        l->wall = wall;
        l->cpu = cpu;
    }
    return l->busy;
}

/* idle time (idle and iowait) and all time of the CPUs this thread may run
 * on, in ticks, and how many there are: 0 if /proc/stat says nothing */
static unsigned thp_stat(uint64_t *idle, uint64_t *total)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return 0;
    FILE *f = fopen("/proc/stat", "re");
    if (!f)
        return 0;
    char line[256];
    unsigned n = 0;
    *idle = *total = 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned c;
        unsigned long long v[8] = {0};
        if (strncmp(line, "cpu", 3) != 0 || line[3] < '0' || line[3] > '9' ||
            sscanf(line + 3, "%u %llu %llu %llu %llu %llu %llu %llu %llu", &c, &v[0], &v[1],
                   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) < 5 ||
            c >= CPU_SETSIZE || !CPU_ISSET(c, &set))
            continue;
        for (int i = 0; i < 8; i++)
            *total += v[i];
        *idle += v[3] + v[4];
        n++;
    }
    fclose(f);
    return n;
}

/* (the thread) while the rest of the process is busy, waits until the
 * CPUs it may run on have half a CPU idle, looking every
 * THP_IDLE_WINDOW_US; *busy: whether it still is; false when stopping */
static bool thp_wait_idle(nxlt_thp_t *t, thp_load_t *l, bool *busy)
{
    bool waited = false;
    while ((*busy = thp_busy(l))) {
        uint64_t wall = thp_clock_ns(CLOCK_MONOTONIC);
        if (!l->st_wall || wall - l->st_wall >= THP_IDLE_WINDOW_US * 1000u) {
            uint64_t idle, total;
            unsigned n = thp_stat(&idle, &total);
            if (!n) { /* nothing to judge by: paced alone */
                l->idle_cpu = true;
            } else {
                if (l->st_wall && total > l->st_total)
                    l->idle_cpu = (idle - l->st_idle) * 2 * n >= total - l->st_total;
                l->st_idle = idle;
                l->st_total = total;
            }
            l->st_wall = wall;
        }
        if (l->idle_cpu)
            break;
        waited = true;
        usleep(THP_IDLE_WINDOW_US);
        pthread_mutex_lock(&t->mu);
        bool stop = t->stop;
        pthread_mutex_unlock(&t->mu);
        if (stop)
            return false;
    }
    if (waited) {
        pthread_mutex_lock(&t->mu);
        t->gated++;
        pthread_mutex_unlock(&t->mu);
    }
    return true;
}

/* collapses [r->a, r->e) from r->a on; returns with r->a past what is done,
 * or at the range that said EAGAIN (to be tried again); mu not held.
 * bg: the thread, on t->walking (nxlt_thp_drop may shorten it meanwhile):
 * each range at normal priority, after an idle CPU when the rest of the
 * process is busy, a pause after each (THP_PACE) */
static void thp_walk(nxlt_thp_t *t, thp_range_t *r, bool *again, bool bg)
{
    *again = false;
    for (;;) {
        bool busy = false;
        if (bg && !thp_wait_idle(t, &t->load, &busy))
            return;
        pthread_mutex_lock(&t->mu);
        bool stop = t->stop || t->unsupported || r->a >= r->e;
        uintptr_t p = r->a;
        if (bg && !stop)
            t->cur = p;
        pthread_mutex_unlock(&t->mu);
        if (stop)
            return;
        uint64_t t0 = nxlt_now_us();
        int e = thp_one(p);
        uint64_t dt = nxlt_now_us() - t0;
        pthread_mutex_lock(&t->mu);
        if (bg) {
            t->cur = 0;
            pthread_cond_broadcast(&t->cv); /* nxlt_thp_drop may wait for it */
        }
        t->us += dt;
        if (!e)
            t->done += THP_SIZE;
        else if (e == ENODATA)
            t->untouched += THP_SIZE;
        else
            t->last_err = e;
        if (e == EINVAL)
            t->unsupported = true;
        bool retry = e == EAGAIN && ++r->tries < THP_TRIES;
        if (!retry && r->a == p) { /* (dropped meanwhile: r->a moved on already) */
            r->tries = 0;
            r->a += THP_SIZE;
        }
        bool more = r->a < r->e;
        pthread_mutex_unlock(&t->mu);
        if (retry) {
            *again = true;
            return;
        }
        if (bg && !e && more) {
            uint64_t pause = dt * THP_PACE;
            usleep((useconds_t)(pause < 100000 ? pause : 100000));
        }
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

/* at normal priority: see thp_walk */
static void *thp_main(void *arg)
{
    nxlt_thp_t *t = arg;
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
        t->walking = r;
        pthread_mutex_unlock(&t->mu);
        bool again;
        thp_walk(t, r, &again, true);
        if (again)
            usleep(THP_RETRY_US); /* pinned by I/O in flight, or busy: a little later */
        pthread_mutex_lock(&t->mu);
        t->walking = NULL;
        if (again && r->a < r->e)
            thp_queue(t, r); /* at the back of the queue */
        else
            free(r);
        pthread_mutex_unlock(&t->mu);
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
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* r without its 2 MiB ranges in [lo, hi) (t->mu held): r keeps the first
 * part left, a second one (past hi) goes to the queue; false when nothing
 * of r is left */
static bool thp_cut(nxlt_thp_t *t, thp_range_t *r, uintptr_t lo, uintptr_t hi)
{
    if (r->e <= lo || r->a >= hi)
        return true;
    if (r->a < lo && r->e > hi) {
        thp_range_t *n = malloc(sizeof(*n));
        if (n) {
            *n = (thp_range_t){.a = hi, .e = r->e};
            thp_queue(t, n);
        }
        r->e = lo;
    } else if (r->a < lo) {
        r->e = lo;
    } else {
        r->a = r->e > hi ? hi : r->e;
        r->tries = 0;
    }
    return r->a < r->e;
}

void nxlt_thp_drop(nxlt_thp_t *t, uint64_t addr, size_t len)
{
    if (!t || !len || addr > UINTPTR_MAX - len)
        return;
    uintptr_t lo = (uintptr_t)addr & ~(uintptr_t)(THP_SIZE - 1);
    uintptr_t e = (uintptr_t)addr + len;
    uintptr_t hi = e > UINTPTR_MAX - THP_SIZE ? UINTPTR_MAX & ~(uintptr_t)(THP_SIZE - 1)
                                              : (e + THP_SIZE - 1) & ~(uintptr_t)(THP_SIZE - 1);
    pthread_mutex_lock(&t->mu);
    if (t->walking)
        thp_cut(t, t->walking, lo, hi);
    thp_range_t **pp = &t->head, *last = NULL;
    while (*pp) {
        thp_range_t *r = *pp;
        if (!thp_cut(t, r, lo, hi)) {
            *pp = r->next;
            free(r);
        } else {
            last = r;
            pp = &r->next;
        }
    }
    t->tail = last;
    /* the range the thread is collapsing now: until it is done */
    while (t->cur && t->cur >= lo && t->cur < hi)
        pthread_cond_wait(&t->cv, &t->mu);
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
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (t->started)
        pthread_join(t->th, NULL);
    snprintf(stats, cap, "%llu of %llu bytes in %.1f ms (%llu ranges waited for an idle CPU), "
             "%llu advised (never written)%s%s%s",
             (unsigned long long)t->done, (unsigned long long)t->asked, t->us / 1e3,
             (unsigned long long)t->gated, (unsigned long long)t->untouched,
             t->last_err ? " (last refusal: " : "",
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
