/* SPDX-License-Identifier: BSD-3-Clause */
/* Threaded mode: nxl_future_wait() from a foreign thread (mt.h). */
#include "mt.h"

#include <errno.h>
#include <time.h>

/* ThreadSanitizer does not see sem_clockwait() (a timed nxl_future_wait)
 * as the acquire it is; the waiter's post happens after the lock is let go
 * (below), so the edge from the post to the woken waiter is named for it */
#if defined(__SANITIZE_THREAD__)
#define NXLI_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NXLI_TSAN 1
#endif
#endif
#ifdef NXLI_TSAN
#include <sanitizer/tsan_interface.h>
#define TSAN_RELEASE(p) __tsan_release(p)
#define TSAN_ACQUIRE(p) __tsan_acquire(p)
#else
#define TSAN_RELEASE(p) ((void)(p))
#define TSAN_ACQUIRE(p) ((void)(p))
#endif

/* ---- nxl_future_wait from a foreign thread
 *
 * No hand-over: the waiter goes onto the future's list under the queue's
 * mutex, which the reactor takes when it delivers the future (after its
 * callbacks: rule 3) or frees it. The waiter holds no reference: the
 * caller's keeps the future alive, and a future freed meanwhile (another
 * thread released the last reference) wakes its waiters first. */

static pthread_mutex_t *wlock(const nxl_future_t *f)
{
    return &f->agent->thr->wmu[((uintptr_t)f >> 6) % NXLI_WSTRIPES];
}

/* f's waiters, taken off its list under their lock */
static nxli_waiter_t *take_waiters(nxl_future_t *f)
{
    pthread_mutex_t *mu = wlock(f);
    pthread_mutex_lock(mu);
    f->wdone = true;
    nxli_waiter_t *w = f->waiters;
    f->waiters = NULL;
    for (nxli_waiter_t *v = w; v; v = v->next) {
        v->linked = false;
        v->st = f->status;
    }
    pthread_mutex_unlock(mu);
    return w;
}

/* Posted after the unlock, so that a woken waiter does not meet the lock
 * still held; a waiter taken off the list waits for its post even when it
 * timed out meanwhile, so w stays valid until then. */
static void post_waiters(nxli_waiter_t *w)
{
    while (w) {
        nxli_waiter_t *next = w->next;
        TSAN_RELEASE(w);
        sem_post(&w->sem); /* w may be gone once posted */
        w = next;
    }
}

void nxli_thread_settled(nxl_future_t *f)
{
    post_waiters(take_waiters(f));
}

/* Delivery: the waiters of the futures a turn settles wake together at its
 * end (nxli_thread_wake), not one by one while the reactor still delivers —
 * a thread woken in the middle took the core from the reactor. */
void nxli_thread_settled_later(nxl_future_t *f)
{
    struct nxli_thr *t = f->agent->thr;
    nxli_waiter_t *w = take_waiters(f);
    while (w) {
        nxli_waiter_t *next = w->next;
        w->next = t->wake;
        t->wake = w;
        w = next;
    }
}

void nxli_thread_wake(nxl_agent_t *a)
{
    struct nxli_thr *t = a->thr;
    nxli_waiter_t *w = t->wake;
    t->wake = NULL;
    post_waiters(w);
}

nxl_status_t nxli_thread_wait(nxl_future_t *f, int timeout_ms)
{
    pthread_mutex_t *mu = wlock(f);
    nxli_waiter_t w = {.st = NXL_IN_PROG};
    pthread_mutex_lock(mu);
    if (f->wdone) {
        nxl_status_t st = f->status;
        pthread_mutex_unlock(mu);
        return st;
    }
    sem_init(&w.sem, 0, 0);
    w.linked = true;
    w.next = f->waiters;
    f->waiters = &w;
    pthread_mutex_unlock(mu);
    int rc;
    if (timeout_ms < 0) {
        while ((rc = sem_wait(&w.sem)) < 0 && errno == EINTR)
            ;
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while ((rc = sem_clockwait(&w.sem, CLOCK_MONOTONIC, &ts)) < 0 && errno == EINTR)
            ;
    }
    nxl_status_t st = NXL_IN_PROG;
    bool taken = false, owed = false; /* taken off the list; its post still to come */
    pthread_mutex_lock(mu);
    if (w.linked) { /* timed out, not woken meanwhile: leave the list */
        for (nxli_waiter_t **pp = &f->waiters; *pp; pp = &(*pp)->next)
            if (*pp == &w) {
                *pp = w.next;
                break;
            }
    } else {
        taken = true;
        st = w.st;
        owed = rc < 0;
    }
    pthread_mutex_unlock(mu);
    if (owed)
        while (sem_wait(&w.sem) < 0 && errno == EINTR)
            ;
    if (taken)
        TSAN_ACQUIRE(&w); /* its post came */
    sem_destroy(&w.sem);
    return st;
}
