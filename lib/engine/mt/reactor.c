/* SPDX-License-Identifier: BSD-3-Clause */
/* Threaded mode: the reactor thread, its start and its end (mt.h). */
#include "mt.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* ---- the reactor thread */

/* Threads wait for the table lock while the reactor has more to do at
 * once (a transport polling from a zero-delay timer): calls that need it
 * (nxl_future_error(), nxl_prep(), a post that must wait...). A mutex let
 * go and taken again at once mostly stays with the thread that let it go
 * (a waiter must wake first), so between turns the reactor lets go and
 * waits until one of them has it, HANDOVER_US at most (a waiter not
 * running yet gets its chance after the next turn). */
#define HANDOVER_US 2000

static void hand_over(struct nxli_thr *t)
{
    nxli_mt_tmu_unlock(t);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (__atomic_load_n(&t->tmu_waiting, __ATOMIC_RELAXED) > 0 &&
           !__atomic_load_n(&t->tmu_held, __ATOMIC_RELAXED)) {
        sched_yield();
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000000 + (now.tv_nsec - t0.tv_nsec) / 1000 >= HANDOVER_US)
            break;
    }
    nxli_mt_tmu_lock(t);
}

/* The direct mode's loop: one turn of the agent's loop without sleeping,
 * under the table lock; the sleep itself without it, in poll() on the
 * loop's epoll set, which holds the timerfd of its timers: whatever a
 * foreign thread acting meanwhile leaves for the reactor (a watch, a timer
 * armed or moved earlier, one activated) makes the set readable. A turn is
 * one pass: the lock is let go between turns even while transports poll
 * from zero-delay timers. */
static int reactor_direct(nxl_agent_t *a)
{
    struct nxli_thr *t = a->thr;
    nxli_loop_t *l = a->loop;
    int rc = 0;
    nxli_mt_tmu_lock(t);
    while (!t->exit) {
        if (l->ops->run_once(l, 0) < 0) {
            rc = -1;
            break;
        }
        if (t->exit)
            break;
        if (__atomic_load_n(&t->tmu_waiting, __ATOMIC_RELAXED) > 0)
            hand_over(t);
        int ms = l->ops->timeout_ms(l);
        if (ms == 0)
            continue; /* a timer due: the next turn at once (it polls the fds too) */
        nxli_mt_tmu_unlock(t);
        struct pollfd p = {.fd = t->epfd, .events = POLLIN};
        if (poll(&p, 1, ms) < 0 && errno != EINTR) {
            nxli_mt_tmu_lock(t);
            rc = -1;
            break;
        }
        nxli_mt_tmu_lock(t);
    }
    /* foreign threads act no more: the teardown follows (or, the loop
     * failed, calls are refused: no reactor delivers what they start) */
    t->dead = true;
    nxli_mt_tmu_unlock(t);
    return rc;
}

static void *reactor_main(void *arg)
{
    nxl_agent_t *a = arg;
    struct nxli_thr *t = a->thr;
    t->tid = pthread_self();
    sem_post(&t->started);
    a->loop_depth++;
    if (t->direct) {
        if (reactor_direct(a) < 0)
            nxli_log(a, NXL_LOG_ERROR, "reactor thread of agent '%s': its loop failed (%s); "
                     "the thread ends and calls are refused", a->name, strerror(errno));
    } else {
        while (!t->exit)
            if (a->loop->ops->run_once(a->loop, -1) < 0) {
                nxli_log(a, NXL_LOG_ERROR, "reactor thread of agent '%s': its loop failed "
                         "(%s); the thread ends and calls are refused", a->name, a->err);
                break;
            }
    }
    a->loop_depth--;
    pthread_mutex_lock(&t->mu);
    t->closed = true;
    nxli_call_t *c = t->head;
    t->head = NULL;
    t->tail = &t->head;
    pthread_mutex_unlock(&t->mu);
    while (c) {
        nxli_call_t *next = c->next;
        nxli_mt_refuse(c);
        c = next;
    }
    if (t->exit) {
        /* nxl_agent_destroy(): the teardown runs here, on the reactor
         * thread, so that cancellation callbacks run where every callback
         * runs; the destroying thread joins and frees the rest */
        nxli_mt_tmu_lock(t);
        t->dead = true;
        nxli_mt_tmu_unlock(t);
        nxli_agent_teardown(a);
        t->torn = true;
    }
    return NULL;
}

static void thr_free(nxl_agent_t *a)
{
    struct nxli_thr *t = a->thr;
    if (!t)
        return;
    nxlt_io_free(t->wake_io);
    if (t->efd >= 0)
        close(t->efd);
    pthread_mutex_destroy(&t->mu);
    for (int i = 0; i < NXLI_WSTRIPES; i++)
        pthread_mutex_destroy(&t->wmu[i]);
    pthread_mutex_destroy(&t->tmu);
    sem_destroy(&t->started);
    free(t);
    a->thr = NULL;
}

nxl_status_t nxli_thread_start(nxl_agent_t *a)
{
    struct nxli_thr *t = calloc(1, sizeof(*t));
    if (!t) {
        nxli_err(a, "nxl_agent_create: out of memory for the reactor thread");
        return NXL_ERR_UNKNOWN;
    }
    t->efd = -1;
    t->tail = &t->head;
    pthread_mutex_init(&t->mu, NULL);
    for (int i = 0; i < NXLI_WSTRIPES; i++)
        pthread_mutex_init(&t->wmu[i], NULL);
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&t->tmu, &ma);
    pthread_mutexattr_destroy(&ma);
    sem_init(&t->started, 0, 0);
    a->thr = t;
    t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->efd < 0 || !(t->wake_io = nxli_io_new(a, t->efd, nxli_mt_wake_cb, a)) ||
        nxlt_io_start(t->wake_io, NXLT_IO_READ) < 0) {
        nxli_err(a, "nxl_agent_create: threaded mode: no eventfd or watch for the reactor "
                    "thread (%s)", strerror(errno));
        thr_free(a);
        return NXL_ERR_BACKEND;
    }
    t->epfd = a->loop->epfd;
    const char *dm = getenv("NXL_THREADED_DIRECT");
    t->direct = !dm || strcmp(dm, "0");
    nxli_log(a, NXL_LOG_DEBUG, "threaded agent '%s': %s", a->name,
             t->direct ? "the reactor sleeps without the lock; calls may run on their threads"
                       : "every call is handed to the reactor thread");
    /* the reactor thread takes no signals: they go to the application's */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&t->join, NULL, reactor_main, a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        nxli_err(a, "nxl_agent_create: threaded mode: pthread_create failed (%s)", strerror(rc));
        thr_free(a);
        return NXL_ERR_BACKEND;
    }
    while (sem_wait(&t->started) < 0 && errno == EINTR)
        ;
    return NXL_SUCCESS;
}

static void t_teardown(nxli_call_t *c)
{
    c->a->thr->exit = true; /* the loop ends after this turn */
    c->a->loop->ops->stop(c->a->loop);
}

void nxli_thread_destroy(nxl_agent_t *a)
{
    struct nxli_thr *t = a->thr;
    if (!nxli_thread_foreign(a)) {
        nxli_log(a, NXL_LOG_ERROR, "nxl_agent_destroy: called on agent '%s''s own reactor "
                 "thread (from a callback): a thread cannot join itself; the agent is left "
                 "alone — destroy it from another thread", a->name);
        return;
    }
    CALL(a, t_teardown);
    nxli_mt_call(a_, &c_);
    pthread_join(t->join, NULL);
    if (!t->torn) { /* the loop had failed before: tear down here, after the join */
        t->dead = true;
        nxli_agent_teardown(a);
    }
    thr_free(a);
    nxli_agent_free(a);
}
