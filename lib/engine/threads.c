/* SPDX-License-Identifier: BSD-3-Clause */
/* Threaded mode: the agent's reactor on a thread of its own.
 *
 * With nxl_agent_config_t.threaded the agent makes a loop of its own (the
 * epoll set of loop_epoll.c, the one NXL_LOOP_FD agents have) and a thread
 * that runs it. Everything the agent owns (its tables, futures,
 * transports: UCX workers, io_uring rings, libfabric endpoints, CUDA
 * streams) is touched by one thread at a time; a public call made from any
 * other thread either runs there while the reactor sleeps (the direct
 * mode, below) or is marshalled to the reactor thread:
 *
 *   caller                                reactor thread
 *   ------                                --------------
 *   fill a call record (on its stack)
 *   lock; append to the queue; unlock
 *   not signaled yet: write the eventfd ──▶ nxli_mt_wake_cb: read the eventfd,
 *   sem_wait(record)                       lock; take the whole queue; unlock
 *                                          run each record's thunk (the public
 *                                          function itself, now on its thread),
 *                                          copy the error sentence on failure;
 *                                          one delivery turn
 *   ◀── sem_post(record) ─────────────────
 *   read the result
 *
 * One wake-up serves every call queued before the reactor took the queue:
 * eight threads posting at once cost one eventfd write and one read per
 * batch, not per call. The delivery turn before the replies settles what
 * the calls finished at once (a transfer done inside its post), so the
 * caller's nxl_future_wait() then returns without sleeping again. Releases
 * and cancels (nothing to return) are fire-and-forget: the record is
 * malloc'd and freed by the reactor, the caller does not wait; a future's
 * release does not even write the eventfd (it runs on the next wake-up);
 * the queue keeps each thread's calls in order.
 *
 * Calls made on the reactor thread (from callbacks) run directly, so a
 * callback may call the API without a deadlock. nxl_future_wait() from a
 * foreign thread puts a waiter on the future under the queue's mutex and
 * sleeps on its semaphore, posted when the future settles (rule 3: the turn
 * that runs its callbacks). nxl_agent_destroy() from a foreign thread runs
 * the teardown on the reactor thread (cancellation callbacks run there,
 * exactly once as in the default mode), stops its loop, joins it and frees
 * the rest.
 *
 * Marshal or lock: in the hand-over mode (NXL_THREADED_DIRECT=0) what
 * touches a transport is
 * marshalled, and what touches only the engine's tables — nxl_prep(),
 * nxl_xfer_make() and the releases of prepared lists and idle transfers —
 * a foreign thread runs itself under the table lock (threads.h). In the
 * direct mode (the default) the reactor holds that lock for each whole
 * turn and sleeps without it (reactor_direct), and a
 * foreign thread that takes it meanwhile runs its call itself, as the
 * reactor would ("acting", below), when the agent's transports take calls
 * from any thread (NXLT_CAP_ANY_THREAD); the rest is marshalled as above.
 * doc/design.md (Threads) has the model, doc/perf/README.md (Threads) the numbers. */
#include "internal.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

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

typedef union nxli_arg {
    void *p;
    const void *cp;
    size_t z;
    int i;
    uint64_t u64;
    nxl_done_cb done;
    nxl_notif_cb notif;
} nxli_arg_t;

typedef struct nxli_call nxli_call_t;
struct nxli_call {
    void (*fn)(nxli_call_t *c);
    nxl_agent_t *a;
    nxli_arg_t v[9];
    union {
        nxl_status_t st;
        size_t z;
        void *p;
        const char *s;
    } r;
    bool fail;              /* the call failed: its sentence is copied to err */
    bool async;             /* malloc'd, nobody waits: the reactor frees it */
    bool direct;            /* may run on the calling thread while the reactor sleeps */
    struct nxli_tstate *ts; /* async: the calling thread's count of queued calls */
    void (*refuse)(nxli_call_t *c); /* async: what a refusal must still do */
    sem_t done;
    nxli_call_t *next;
    char err[NXLI_ERR_MAX];
};

#define NXLI_WSTRIPES 64

struct nxli_thr {
    pthread_t join;         /* from pthread_create */
    pthread_t tid;          /* set by the thread itself before create returns */
    sem_t started;
    pthread_mutex_t mu;
    nxli_call_t *head, **tail;
    bool closed;            /* the loop ended: calls are refused */
    bool signaled;          /* the eventfd was written since the reactor last took the queue */
    pthread_mutex_t tmu;    /* the table lock (recursive by tmu_owner/tmu_depth; threads.h) */
    pthread_t tmu_owner;    /* atomic: the thread holding tmu */
    bool tmu_held;          /* atomic: tmu_owner is valid */
    int tmu_depth;          /* the owner's: how many times it took tmu */
    int tmu_waiting;        /* atomic: threads blocked on tmu (the reactor lets them have it) */
    /* the waiters' locks, one per stripe of futures: eight threads waiting
     * and the reactor settling would otherwise meet on one mutex (half
     * the CPU of a threaded run went to that contention) */
    pthread_mutex_t wmu[NXLI_WSTRIPES];
    bool dead;              /* under tmu: the teardown began; foreign threads marshal again */
    bool exit;              /* reactor thread only: leave the loop (destroy asked) */
    bool torn;              /* the teardown ran on the reactor thread */
    int efd;
    nxlt_io_t *wake_io;
    nxli_waiter_t *wake;    /* reactor thread: waiters to post at the end of a delivery */
    /* direct: the reactor sleeps without the table lock (poll() on the
     * loop's epoll set, its timers' timerfd inside), and a foreign thread
     * that takes the lock meanwhile runs its call itself ("acting" for the
     * reactor): a watch it starts, a timer it arms or moves earlier, or
     * activates, changes that set or that timerfd, and so wakes the
     * reactor by itself */
    bool direct;
    int epfd;               /* the loop's epoll set (loop_epoll.c) */
};

/* A thread's calls queued to reactors and not run yet: while any is, the
 * thread does not act (its calls run in the order it made them). Shared
 * by the thread and its records (refs), freed by the last. */
struct nxli_tstate {
    int pending;
    int refs;
};

static pthread_key_t ts_key;
static pthread_once_t ts_once = PTHREAD_ONCE_INIT;
static __thread struct nxli_tstate *nxli_mt_ts_self;

static void ts_drop(struct nxli_tstate *s)
{
    if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0)
        free(s);
}

static void ts_dtor(void *p)
{
    ts_drop(p);
}

static void ts_init(void)
{
    pthread_key_create(&ts_key, ts_dtor);
}

static struct nxli_tstate *ts_get(void)
{
    if (!nxli_mt_ts_self) {
        pthread_once(&ts_once, ts_init);
        struct nxli_tstate *s = calloc(1, sizeof(*s));
        if (!s)
            return NULL;
        s->refs = 1;
        pthread_setspecific(ts_key, s);
        nxli_mt_ts_self = s;
    }
    return nxli_mt_ts_self;
}

/* an async record of this thread: counted until the reactor ran it */
static void nxli_mt_ts_hold(nxli_call_t *c)
{
    if ((c->ts = ts_get())) {
        __atomic_add_fetch(&c->ts->refs, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&c->ts->pending, 1, __ATOMIC_RELEASE);
    }
}

static void nxli_mt_record_free(nxli_call_t *c)
{
    if (c->ts) {
        __atomic_sub_fetch(&c->ts->pending, 1, __ATOMIC_RELEASE);
        ts_drop(c->ts);
    }
    free(c);
}

/* the agent this thread acts for, if any */
static __thread const nxl_agent_t *tls_act;
static __thread char act_err[NXLI_ERR_MAX];

struct nxli_waiter {
    sem_t sem;          /* posted by the reactor when the future settled */
    nxl_status_t st;
    bool linked;        /* under the queue's mutex: on its future's list */
    nxli_waiter_t *next;
};

/* The sentence of the last call this thread made on a threaded agent that
 * failed (nxl_agent_last_error() from a foreign thread). */
static __thread struct {
    const nxl_agent_t *a;
    char err[NXLI_ERR_MAX];
} tls_err;

__thread bool nxli_quiet;

/* The table lock: an adaptive mutex (a thread that finds it taken spins a
 * little before it sleeps: the holder, on the other core, is done within
 * a microsecond or two; sleeping at once cost a wake-up each time eight
 * threads met on it), recursive by hand. Only the owner writes tmu_owner
 * while it holds the lock, so a thread reading its own id there holds it. */
static bool tmu_mine(struct nxli_thr *t)
{
    return __atomic_load_n(&t->tmu_held, __ATOMIC_RELAXED) &&
           pthread_equal(__atomic_load_n(&t->tmu_owner, __ATOMIC_RELAXED), pthread_self());
}

/* the mutex was just taken by this thread */
static void tmu_took(struct nxli_thr *t)
{
    __atomic_store_n(&t->tmu_owner, pthread_self(), __ATOMIC_RELAXED);
    __atomic_store_n(&t->tmu_held, true, __ATOMIC_RELAXED);
    t->tmu_depth = 1;
}

/* takes the mutex, counted in tmu_waiting while it waits for it */
static void tmu_block(struct nxli_thr *t)
{
    if (pthread_mutex_trylock(&t->tmu) == 0)
        return;
    __atomic_add_fetch(&t->tmu_waiting, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&t->tmu);
    __atomic_sub_fetch(&t->tmu_waiting, 1, __ATOMIC_RELAXED);
}

static void nxli_mt_tmu_lock(struct nxli_thr *t)
{
    if (tmu_mine(t)) {
        t->tmu_depth++;
        return;
    }
    tmu_block(t);
    tmu_took(t);
}

static void nxli_mt_tmu_unlock(struct nxli_thr *t)
{
    if (--t->tmu_depth > 0)
        return;
    __atomic_store_n(&t->tmu_held, false, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&t->tmu);
}

void nxli_tlock(nxl_agent_t *a)
{
    nxli_mt_tmu_lock(a->thr);
}

void nxli_tunlock(nxl_agent_t *a)
{
    nxli_mt_tmu_unlock(a->thr);
}

bool nxli_thread_alive(const nxl_agent_t *a)
{
    return !a->thr->dead;
}

bool nxli_foreign_begin(nxl_agent_t *a)
{
    nxli_mt_tmu_lock(a->thr);
    if (a->thr->dead) {
        nxli_mt_tmu_unlock(a->thr);
        return false;
    }
    nxli_quiet = true;
    return true;
}

/* the same without waiting: false when the lock is held */
static bool nxli_mt_foreign_try(nxl_agent_t *a)
{
    struct nxli_thr *t = a->thr;
    if (tmu_mine(t) || pthread_mutex_trylock(&t->tmu) != 0)
        return false;
    tmu_took(t);
    if (t->dead) {
        nxli_mt_tmu_unlock(t);
        return false;
    }
    nxli_quiet = true;
    return true;
}

void nxli_foreign_end(nxl_agent_t *a)
{
    nxli_quiet = false;
    nxli_mt_tmu_unlock(a->thr);
}

bool nxli_thread_foreign_slow(const nxl_agent_t *a)
{
    return !pthread_equal(pthread_self(), a->thr->tid) && tls_act != a;
}

const char *nxli_thread_last_error(const nxl_agent_t *a)
{
    return tls_err.a == a ? tls_err.err : "";
}

void nxli_thread_set_error(const nxl_agent_t *a, const char *s)
{
    tls_err.a = a;
    snprintf(tls_err.err, sizeof(tls_err.err), "%s", s);
}

/* ---- the queue */

static void nxli_mt_refuse(nxli_call_t *c)
{
    if (c->async) {
        if (c->refuse)
            c->refuse(c);
        nxli_mt_record_free(c);
        return;
    }
    c->r.st = NXL_ERR_NOT_ALLOWED;
    c->fail = true;
    snprintf(c->err, sizeof(c->err), "agent '%s' is being destroyed: its reactor thread no "
             "longer takes calls", c->a->name);
    sem_post(&c->done);
}

static void nxli_mt_wake_cb(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    nxl_agent_t *a = arg;
    struct nxli_thr *t = a->thr;
    uint64_t v;
    if (read(t->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        nxli_log(a, NXL_LOG_ERROR, "reactor thread: reading its eventfd failed: %s",
                 strerror(errno));
    pthread_mutex_lock(&t->mu);
    nxli_call_t *c = t->head;
    t->head = NULL;
    t->tail = &t->head;
    t->signaled = false;
    pthread_mutex_unlock(&t->mu);
    nxli_call_t *replies = NULL, **rtail = &replies;
    while (c) {
        nxli_call_t *next = c->next;
        if (t->exit) {
            nxli_mt_refuse(c); /* queued behind nxl_agent_destroy() */
        } else {
            c->fn(c);
            if (c->async) {
                nxli_mt_record_free(c);
            } else {
                if (c->fail)
                    snprintf(c->err, sizeof(c->err), "%s", a->err);
                c->next = NULL;
                *rtail = c;
                rtail = &c->next;
            }
        }
        c = next;
    }
    /* What finished inside these calls (a transfer the transport completed
     * in its post) is delivered before the callers wake: their
     * nxl_future_wait() then returns without sleeping a second time. */
    if (replies)
        nxli_deliver_turn(a);
    while (replies) {
        nxli_call_t *next = replies->next;
        sem_post(&replies->done); /* the record is gone once posted */
        replies = next;
    }
}

static void efd_write(struct nxli_thr *t)
{
    uint64_t one = 1;
    while (write(t->efd, &one, sizeof(one)) < 0 && errno == EINTR)
        ;
}

/* Appends c; false when the loop has ended (c untouched). Without wake the
 * record waits for the reactor's next wake-up (a release nothing depends
 * on but the thread's later calls, which wake it and run after it). */
static bool nxli_mt_enqueue(nxl_agent_t *a, nxli_call_t *c, bool wake)
{
    struct nxli_thr *t = a->thr;
    c->next = NULL;
    pthread_mutex_lock(&t->mu);
    if (t->closed) {
        pthread_mutex_unlock(&t->mu);
        return false;
    }
    *t->tail = c;
    t->tail = &c->next;
    bool signal = wake && !t->signaled;
    if (signal)
        t->signaled = true;
    pthread_mutex_unlock(&t->mu);
    if (signal)
        efd_write(t);
    return true;
}

/* ---- acting for a sleeping reactor
 *
 * In the direct mode the reactor holds the table lock for its whole turn
 * and lets it go only to sleep (reactor_direct). A foreign thread that
 * takes the lock then has the agent to itself, as the reactor would: it
 * runs its call directly (nxl_xfer_post() on the caller's thread, no
 * hand-over, no wake-up), with the default mode's code. What the call
 * leaves for the reactor wakes it: a completion with callbacks, an event
 * activated or added (a transport's kick timer). A completion without
 * callbacks settles at the end of the call, so that nxl_future_wait()
 * returns without sleeping. Only agents whose transports all take calls
 * from any thread (NXLT_CAP_ANY_THREAD) act; a thread with calls still
 * queued does not (its calls keep their order). */

static bool any_thread(const nxl_agent_t *a)
{
    for (int i = 0; i < a->nbackends; i++)
        if (!(a->backends[i]->ops->caps & NXLT_CAP_ANY_THREAD))
            return false;
    return true;
}

/* wait: take the lock even while the reactor holds it (a call that would
 * wait for the reactor anyway); otherwise false then, and the call is
 * queued */
static bool nxli_mt_act_begin(nxl_agent_t *a, bool wait)
{
    struct nxli_thr *t = a->thr;
    if (!t->direct ||
        (nxli_mt_ts_self && __atomic_load_n(&nxli_mt_ts_self->pending, __ATOMIC_ACQUIRE)) ||
        tmu_mine(t))
        return false;
    if (pthread_mutex_trylock(&t->tmu) != 0) {
        if (!wait && __atomic_load_n(&t->tmu_held, __ATOMIC_RELAXED) &&
            pthread_equal(__atomic_load_n(&t->tmu_owner, __ATOMIC_RELAXED), t->tid))
            return false; /* the reactor is in a turn: do not wait for it */
        tmu_block(t);
    }
    tmu_took(t);
    if (t->dead || !any_thread(a)) {
        nxli_mt_tmu_unlock(t);
        return false;
    }
    a->acting = true;
    tls_act = a;
    /* the reactor thread's last sentence stays its own */
    memcpy(act_err, a->err, strnlen(a->err, sizeof(a->err) - 1) + 1);
    return true;
}

/* wakes the reactor (once until it reads its eventfd) */
static void nxli_mt_kick(struct nxli_thr *t)
{
    pthread_mutex_lock(&t->mu);
    bool signal = !t->signaled;
    t->signaled = true;
    pthread_mutex_unlock(&t->mu);
    if (signal)
        efd_write(t);
}

static void nxli_mt_act_end(nxl_agent_t *a, bool failed)
{
    struct nxli_thr *t = a->thr;
    bool wake = nxli_deliver_acted(a);
    a->acting = false;
    tls_act = NULL;
    if (failed)
        nxli_thread_set_error(a, a->err);
    memcpy(a->err, act_err, strnlen(act_err, sizeof(act_err) - 1) + 1);
    nxli_mt_tmu_unlock(t);
    if (wake)
        nxli_mt_kick(t);
}

/* c run on this thread, acting; false: it was not (the caller queues it) */
static bool nxli_mt_act_run(nxl_agent_t *a, nxli_call_t *c, bool wait)
{
    if (!nxli_mt_act_begin(a, wait))
        return false;
    c->a = a;
    c->fail = false;
    c->fn(c);
    nxli_mt_act_end(a, c->fail);
    return true;
}

/* Runs c on the reactor thread (or acting) and waits for it. */
static void nxli_mt_call(nxl_agent_t *a, nxli_call_t *c)
{
    if (c->direct && nxli_mt_act_run(a, c, true))
        return;
    c->a = a;
    c->async = false;
    c->fail = false;
    sem_init(&c->done, 0, 0);
    if (!nxli_mt_enqueue(a, c, true)) {
        nxli_mt_refuse(c);
    }
    while (sem_wait(&c->done) < 0 && errno == EINTR)
        ;
    sem_destroy(&c->done);
    if (c->fail)
        nxli_thread_set_error(a, c->err);
}

/* Queues a call nobody waits for (releases, cancels); direct: acting when
 * the reactor sleeps. */
static void nxli_mt_call_async(nxl_agent_t *a, void (*fn)(nxli_call_t *), void *p, bool wake,
                          bool direct)
{
    if (direct) {
        nxli_call_t s = {.fn = fn};
        s.v[0].p = p;
        if (nxli_mt_act_run(a, &s, false))
            return;
    }
    nxli_call_t *c = malloc(sizeof(*c));
    if (!c) {
        /* no memory for a record: wait on one of our own instead */
        nxli_call_t s = {.fn = fn};
        s.v[0].p = p;
        nxli_mt_call(a, &s);
        return;
    }
    c->fn = fn;
    c->fail = false;
    c->a = a;
    c->async = true;
    c->direct = false;
    c->refuse = NULL;
    c->ts = NULL;
    c->v[0].p = p;
    if (a->thr->direct) {
        nxli_mt_ts_hold(c);
        wake = true; /* the thread acts again once it ran */
    }
    if (!nxli_mt_enqueue(a, c, wake))
        nxli_mt_record_free(c);
}

/* a log line of a call acting for the reactor: the application's log
 * callback runs on the reactor thread */
static void t_log(nxli_call_t *c)
{
    if (c->a->log_cb)
        c->a->log_cb((nxl_log_level_t)c->v[0].i, c->err, c->a->log_arg);
}

bool nxli_thread_log_later(nxl_agent_t *a, nxl_log_level_t lvl, const char *line)
{
    if (!a->acting || !a->log_cb)
        return false;
    nxli_call_t *c = malloc(sizeof(*c));
    if (!c)
        return true; /* dropped rather than run on the wrong thread */
    *c = (nxli_call_t){.fn = t_log, .a = a, .async = true};
    c->v[0].i = (int)lvl;
    snprintf(c->err, sizeof(c->err), "%s", line);
    if (!nxli_mt_enqueue(a, c, true))
        free(c);
    return true;
}

#define CALL(agent, thunk) nxli_call_t c_ = {.fn = (thunk)}; nxl_agent_t *a_ = (agent)
/* a call that may run on the calling thread while the reactor sleeps */
#define CALL_DIRECT(agent, thunk) nxli_call_t c_ = {.fn = (thunk), .direct = true}; \
    nxl_agent_t *a_ = (agent)
#define ARG(i) c_.v[i]
#define RUN_ST() (nxli_mt_call(a_, &c_), c_.r.st)
#define A(i) c->v[i]
#define ST(expr) do { c->r.st = (expr); c->fail = c->r.st < 0; } while (0)

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

/* ---- one thunk and one entry per public function */

static void t_backend_create(nxli_call_t *c)
{
    ST(nxl_backend_create(c->a, A(0).cp, A(1).cp, A(2).z, A(3).p));
}
nxl_status_t nxli_rpc_backend_create(nxl_agent_t *a, const char *name, const nxl_param_t *params,
                                     size_t nparams, nxl_backend_t **out)
{
    CALL(a, t_backend_create);
    ARG(0).cp = name, ARG(1).cp = params, ARG(2).z = nparams, ARG(3).p = out;
    return RUN_ST();
}

static void t_backend_get(nxli_call_t *c) { c->r.p = nxl_backend_get(c->a, A(0).cp); }
nxl_backend_t *nxli_rpc_backend_get(nxl_agent_t *a, const char *name)
{
    CALL(a, t_backend_get);
    ARG(0).cp = name;
    nxli_mt_call(a_, &c_);
    return c_.r.p;
}

static void t_notifs_drain(nxli_call_t *c) { c->r.z = nxl_notifs_drain(c->a, A(0).notif, A(1).p); }
size_t nxli_rpc_notifs_drain(nxl_agent_t *a, nxl_notif_cb cb, void *arg)
{
    CALL(a, t_notifs_drain);
    ARG(0).notif = cb, ARG(1).p = arg;
    nxli_mt_call(a_, &c_);
    return c_.r.z;
}

static void t_agent_on_notif(nxli_call_t *c) { nxl_agent_on_notif(c->a, A(0).notif, A(1).p); }
void nxli_rpc_agent_on_notif(nxl_agent_t *a, nxl_notif_cb cb, void *arg)
{
    CALL(a, t_agent_on_notif);
    ARG(0).notif = cb, ARG(1).p = arg;
    nxli_mt_call(a_, &c_);
}

static void t_future_from_cuda_event(nxli_call_t *c)
{
    ST(nxl_future_from_cuda_event(c->a, A(0).p, A(1).done, A(2).p, A(3).p));
}
nxl_status_t nxli_rpc_future_from_cuda_event(nxl_agent_t *a, void *ev, nxl_done_cb cb, void *arg,
                                             nxl_future_t **out)
{
    CALL(a, t_future_from_cuda_event);
    ARG(0).p = ev, ARG(1).done = cb, ARG(2).p = arg, ARG(3).p = out;
    return RUN_ST();
}

static void t_md_publish(nxli_call_t *c) { ST(nxl_md_publish(c->a, A(0).done, A(1).p, A(2).p)); }
nxl_status_t nxli_rpc_md_publish(nxl_agent_t *a, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    CALL(a, t_md_publish);
    ARG(0).done = cb, ARG(1).p = arg, ARG(2).p = out;
    return RUN_ST();
}

static void t_md_publish_partial(nxli_call_t *c)
{
    ST(nxl_md_publish_partial(c->a, A(0).cp, (nxl_mem_t)A(1).i, A(2).cp, A(3).z, A(4).done,
                              A(5).p, A(6).p));
}
nxl_status_t nxli_rpc_md_publish_partial(nxl_agent_t *a, const char *label, nxl_mem_t type,
                                         const nxl_desc_t *descs, size_t n, nxl_done_cb cb,
                                         void *arg, nxl_future_t **out)
{
    CALL(a, t_md_publish_partial);
    ARG(0).cp = label, ARG(1).i = (int)type, ARG(2).cp = descs, ARG(3).z = n;
    ARG(4).done = cb, ARG(5).p = arg, ARG(6).p = out;
    return RUN_ST();
}

static void t_md_unpublish(nxli_call_t *c) { ST(nxl_md_unpublish(c->a, A(0).done, A(1).p, A(2).p)); }
nxl_status_t nxli_rpc_md_unpublish(nxl_agent_t *a, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    CALL(a, t_md_unpublish);
    ARG(0).done = cb, ARG(1).p = arg, ARG(2).p = out;
    return RUN_ST();
}

static void t_md_fetch_etcd(nxli_call_t *c)
{
    ST(nxl_md_fetch_etcd(c->a, A(0).cp, A(1).cp, A(2).i, A(3).done, A(4).p, A(5).p));
}
nxl_status_t nxli_rpc_md_fetch_etcd(nxl_agent_t *a, const char *remote, const char *label,
                                    int timeout_ms, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    CALL(a, t_md_fetch_etcd);
    ARG(0).cp = remote, ARG(1).cp = label, ARG(2).i = timeout_ms;
    ARG(3).done = cb, ARG(4).p = arg, ARG(5).p = out;
    return RUN_ST();
}

static void t_md_send(nxli_call_t *c)
{
    ST(nxl_md_send(c->a, A(0).cp, (uint16_t)A(1).i, A(2).done, A(3).p, A(4).p));
}
nxl_status_t nxli_rpc_md_send(nxl_agent_t *a, const char *host, uint16_t port, nxl_done_cb cb,
                              void *arg, nxl_future_t **out)
{
    CALL(a, t_md_send);
    ARG(0).cp = host, ARG(1).i = port, ARG(2).done = cb, ARG(3).p = arg, ARG(4).p = out;
    return RUN_ST();
}

static void t_md_fetch(nxli_call_t *c)
{
    ST(nxl_md_fetch(c->a, A(0).cp, A(1).cp, (uint16_t)A(2).i, A(3).done, A(4).p, A(5).p));
}
nxl_status_t nxli_rpc_md_fetch(nxl_agent_t *a, const char *remote, const char *host,
                               uint16_t port, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    CALL(a, t_md_fetch);
    ARG(0).cp = remote, ARG(1).cp = host, ARG(2).i = port;
    ARG(3).done = cb, ARG(4).p = arg, ARG(5).p = out;
    return RUN_ST();
}

static void t_md_send_invalidate(nxli_call_t *c)
{
    ST(nxl_md_send_invalidate(c->a, A(0).cp, (uint16_t)A(1).i, A(2).done, A(3).p, A(4).p));
}
nxl_status_t nxli_rpc_md_send_invalidate(nxl_agent_t *a, const char *host, uint16_t port,
                                         nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    CALL(a, t_md_send_invalidate);
    ARG(0).cp = host, ARG(1).i = port, ARG(2).done = cb, ARG(3).p = arg, ARG(4).p = out;
    return RUN_ST();
}

static void t_future_then(nxli_call_t *c) { ST(nxl_future_then(A(0).p, A(1).done, A(2).p)); }
nxl_status_t nxli_rpc_future_then(nxl_future_t *f, nxl_done_cb cb, void *arg)
{
    CALL_DIRECT(f->agent, t_future_then);
    ARG(0).p = f, ARG(1).done = cb, ARG(2).p = arg;
    return RUN_ST();
}

static void t_future_status(nxli_call_t *c) { c->r.st = nxl_future_status(A(0).cp); }
nxl_status_t nxli_rpc_future_status(const nxl_future_t *f)
{
    CALL_DIRECT(f->agent, t_future_status);
    ARG(0).cp = f;
    return RUN_ST();
}

static void t_future_error(nxli_call_t *c) { c->r.s = nxl_future_error(A(0).cp); }
const char *nxli_rpc_future_error(const nxl_future_t *f)
{
    CALL_DIRECT(f->agent, t_future_error);
    ARG(0).cp = f;
    nxli_mt_call(a_, &c_);
    return c_.r.s;
}

static void t_future_peer(nxli_call_t *c) { c->r.s = nxl_future_peer(A(0).cp); }
const char *nxli_rpc_future_peer(const nxl_future_t *f)
{
    CALL_DIRECT(f->agent, t_future_peer);
    ARG(0).cp = f;
    nxli_mt_call(a_, &c_);
    return c_.r.s;
}

static void t_future_release(nxli_call_t *c) { nxl_future_release(A(0).p); }
/* a release wakes nobody: it runs on the reactor's next wake-up, before
 * this thread's next marshalled call (which wakes it) */
void nxli_rpc_future_release(nxl_future_t *f)
{
    nxli_mt_call_async(f->agent, t_future_release, f, false, true);
}

static void t_future_cancel(nxli_call_t *c) { nxl_future_cancel(A(0).p); }
void nxli_rpc_future_cancel(nxl_future_t *f)
{
    nxli_mt_call_async(f->agent, t_future_cancel, f, true, true);
}

static void t_future_all(nxli_call_t *c)
{
    ST(nxl_future_all(c->a, A(0).p, A(1).z, A(2).done, A(3).p, A(4).p));
}
nxl_status_t nxli_rpc_future_all(nxl_agent_t *a, nxl_future_t *const *fs, size_t n,
                                 nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    CALL(a, t_future_all);
    ARG(0).cp = fs, ARG(1).z = n, ARG(2).done = cb, ARG(3).p = arg, ARG(4).p = out;
    return RUN_ST();
}

static void t_md_check(nxli_call_t *c) { ST(nxl_md_check(c->a, A(0).cp)); }
nxl_status_t nxli_rpc_md_check(nxl_agent_t *a, const char *remote)
{
    CALL_DIRECT(a, t_md_check);
    ARG(0).cp = remote;
    return RUN_ST();
}

static void t_md_invalidate(nxli_call_t *c) { ST(nxl_md_invalidate(c->a, A(0).cp)); }
nxl_status_t nxli_rpc_md_invalidate(nxl_agent_t *a, const char *remote)
{
    CALL(a, t_md_invalidate);
    ARG(0).cp = remote;
    return RUN_ST();
}

static void t_md_local(nxli_call_t *c) { ST(nxl_md_local(c->a, A(0).p, A(1).p)); }
nxl_status_t nxli_rpc_md_local(nxl_agent_t *a, void **blob, size_t *len)
{
    CALL(a, t_md_local);
    ARG(0).p = blob, ARG(1).p = len;
    return RUN_ST();
}

static void t_md_local_partial(nxli_call_t *c)
{
    ST(nxl_md_local_partial(c->a, (nxl_mem_t)A(0).i, A(1).cp, A(2).z, A(3).p, A(4).p));
}
nxl_status_t nxli_rpc_md_local_partial(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                       size_t n, void **blob, size_t *len)
{
    CALL(a, t_md_local_partial);
    ARG(0).i = (int)type, ARG(1).cp = descs, ARG(2).z = n, ARG(3).p = blob, ARG(4).p = len;
    return RUN_ST();
}

static void t_md_load(nxli_call_t *c) { ST(nxl_md_load(c->a, A(0).cp, A(1).z, A(2).p, A(3).z)); }
nxl_status_t nxli_rpc_md_load(nxl_agent_t *a, const void *blob, size_t len, char *name_out,
                              size_t cap)
{
    CALL(a, t_md_load);
    ARG(0).cp = blob, ARG(1).z = len, ARG(2).p = name_out, ARG(3).z = cap;
    return RUN_ST();
}

static void t_mem_register(nxli_call_t *c)
{
    ST(nxl_mem_register(c->a, (nxl_mem_t)A(0).i, A(1).cp, A(2).z, A(3).p));
}
nxl_status_t nxli_rpc_mem_register(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                   size_t n, nxl_backend_t *b)
{
    CALL(a, t_mem_register);
    ARG(0).i = (int)type, ARG(1).cp = descs, ARG(2).z = n, ARG(3).p = b;
    return RUN_ST();
}

static void t_mem_deregister(nxli_call_t *c)
{
    ST(nxl_mem_deregister(c->a, (nxl_mem_t)A(0).i, A(1).cp, A(2).z));
}
nxl_status_t nxli_rpc_mem_deregister(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                     size_t n)
{
    CALL(a, t_mem_deregister);
    ARG(0).i = (int)type, ARG(1).cp = descs, ARG(2).z = n;
    return RUN_ST();
}

static void t_mem_alloc(nxli_call_t *c)
{
    ST(nxl_mem_alloc(c->a, (nxl_mem_t)A(0).i, A(1).z, A(2).u64, A(3).p));
}
nxl_status_t nxli_rpc_mem_alloc(nxl_agent_t *a, nxl_mem_t type, size_t len, uint64_t dev_id,
                                void **ptr)
{
    CALL(a, t_mem_alloc);
    ARG(0).i = (int)type, ARG(1).z = len, ARG(2).u64 = dev_id, ARG(3).p = ptr;
    return RUN_ST();
}

static void t_mem_free(nxli_call_t *c) { ST(nxl_mem_free(c->a, A(0).p)); }
nxl_status_t nxli_rpc_mem_free(nxl_agent_t *a, void *ptr)
{
    CALL(a, t_mem_free);
    ARG(0).p = ptr;
    return RUN_ST();
}

static void t_mem_query(nxli_call_t *c)
{
    ST(nxl_mem_query(c->a, (nxl_mem_t)A(0).i, A(1).cp, A(2).z, A(3).p, A(4).p));
}
nxl_status_t nxli_rpc_mem_query(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                size_t n, nxl_backend_t *b, nxl_query_t *results)
{
    CALL(a, t_mem_query);
    ARG(0).i = (int)type, ARG(1).cp = descs, ARG(2).z = n, ARG(3).p = b, ARG(4).p = results;
    return RUN_ST();
}

static void t_agent_stats(nxli_call_t *c) { ST(nxl_agent_stats(c->a, A(0).cp, A(1).p)); }
nxl_status_t nxli_rpc_agent_stats(nxl_agent_t *a, const char *transport, nxl_stats_t *out)
{
    CALL_DIRECT(a, t_agent_stats);
    ARG(0).cp = transport, ARG(1).p = out;
    return RUN_ST();
}

static void t_prep(nxli_call_t *c)
{
    ST(nxl_prep(c->a, A(0).cp, (nxl_mem_t)A(1).i, A(2).cp, A(3).z, A(4).p));
}
nxl_status_t nxli_rpc_prep(nxl_agent_t *a, const char *agent, nxl_mem_t type,
                           const nxl_desc_t *descs, size_t n, nxl_prepped_t **out)
{
    CALL_DIRECT(a, t_prep);
    ARG(0).cp = agent, ARG(1).i = (int)type, ARG(2).cp = descs, ARG(3).z = n, ARG(4).p = out;
    return RUN_ST();
}

static void t_prepped_release(nxli_call_t *c) { nxl_prepped_release(A(0).p); }
void nxli_rpc_prepped_release(nxl_prepped_t *p)
{
    nxli_mt_call_async(p->agent, t_prepped_release, p, true, true);
}

static void t_xfer_make(nxli_call_t *c)
{
    ST(nxl_xfer_make(c->a, (nxl_op_t)A(0).i, A(1).p, A(2).cp, A(3).p, A(4).cp, A(5).z, A(6).cp,
                     A(7).p));
}
nxl_status_t nxli_rpc_xfer_make(nxl_agent_t *a, nxl_op_t op, nxl_prepped_t *lp, const size_t *lidx,
                                nxl_prepped_t *rp, const size_t *ridx, size_t n,
                                const nxl_xfer_opts_t *opts, nxl_xfer_t **out)
{
    CALL_DIRECT(a, t_xfer_make);
    ARG(0).i = (int)op, ARG(1).p = lp, ARG(2).cp = lidx, ARG(3).p = rp, ARG(4).cp = ridx;
    ARG(5).z = n, ARG(6).cp = opts, ARG(7).p = out;
    return RUN_ST();
}

static void t_xfer_create(nxli_call_t *c)
{
    ST(nxl_xfer_create(c->a, (nxl_op_t)A(0).i, A(1).cp, A(2).cp, A(3).cp, A(4).cp, A(5).p));
}
nxl_status_t nxli_rpc_xfer_create(nxl_agent_t *a, nxl_op_t op, const nxl_dlist_t *local,
                                  const nxl_dlist_t *remote, const char *remote_agent,
                                  const nxl_xfer_opts_t *opts, nxl_xfer_t **out)
{
    CALL(a, t_xfer_create);
    ARG(0).i = (int)op, ARG(1).cp = local, ARG(2).cp = remote, ARG(3).cp = remote_agent;
    ARG(4).cp = opts, ARG(5).p = out;
    return RUN_ST();
}

static void t_xfer_set_notif(nxli_call_t *c) { ST(nxl_xfer_set_notif(A(0).p, A(1).cp, A(2).z)); }
nxl_status_t nxli_rpc_xfer_set_notif(nxl_xfer_t *x, const void *msg, size_t len)
{
    CALL_DIRECT(x->agent, t_xfer_set_notif);
    ARG(0).p = x, ARG(1).cp = msg, ARG(2).z = len;
    return RUN_ST();
}

static void t_xfer_post(nxli_call_t *c) { ST(nxl_xfer_post(A(0).p, A(1).done, A(2).p, A(3).p)); }
static void t_xfer_post_queued(nxli_call_t *c) { nxli_xfer_post_queued(A(0).p, A(1).p, A(2).i); }
static void t_xfer_post_refused(nxli_call_t *c) { nxli_xfer_post_refused(A(0).p, A(1).p, A(2).i); }

/* A post does not wait for the reactor: what can refuse it at once (a
 * post in flight, an invalidated peer, revoked regions) is checked here
 * under the table lock, a future claims the transfer, and the post is
 * queued; the thread goes on (posting more, waiting). What fails later
 * completes the future with its status and sentence. A post in flight is
 * refused here, with the default mode's sentence; another failed check
 * hands the whole post over, so that its status and sentence are the
 * default mode's. */
nxl_status_t nxli_rpc_xfer_post(nxl_xfer_t *x, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    nxl_agent_t *a = x->agent;
    struct nxli_thr *t = a->thr;
    nxl_future_t *f = NULL;
    if (out)
        *out = NULL;
    /* the reactor sleeps: posted here, as the reactor would (host memory
     * only: CUDA's contexts are per thread) */
    if (x->ltype == NXL_DRAM && x->rtype == NXL_DRAM && nxli_mt_act_begin(a, false)) {
        nxl_status_t st = nxl_xfer_post(x, cb, arg, out);
        nxli_mt_act_end(a, st != NXL_SUCCESS);
        return st;
    }
    const char *why = NULL;
    nxl_status_t st = NXL_ERR_UNKNOWN;
    if (!t->direct) {
        /* the reactor holds the lock only where it changes the tables */
        if (nxli_foreign_begin(a)) {
            st = nxli_xfer_post_claim(x, cb, arg, &f, &why);
            nxli_foreign_end(a);
        }
    } else if (nxli_mt_foreign_try(a)) {
        /* not acting (a transport that takes calls on its thread only, or
         * calls of this thread still queued): checked here all the same */
        st = nxli_xfer_post_claim(x, cb, arg, &f, &why);
        nxli_foreign_end(a);
    } else {
        /* the lock is held (the reactor holds it for its whole turn): the
         * transfer is claimed without it, and the reactor checks the peer
         * and the regions when it runs the post */
        st = nxli_xfer_post_claim_unlocked(x, cb, arg, &f, &why);
    }
    if (st == NXL_ERR_REPOST_ACTIVE) {
        nxli_thread_set_error(a, why);
        return st;
    }
    if (f) {
        nxli_call_t *q = malloc(sizeof(*q));
        if (q) {
            *q = (nxli_call_t){.fn = t_xfer_post_queued, .refuse = t_xfer_post_refused, .a = a,
                               .async = true};
            q->v[0].p = x, q->v[1].p = f, q->v[2].i = out != NULL;
            if (t->direct)
                nxli_mt_ts_hold(q);
            if (nxli_mt_enqueue(a, q, true)) {
                if (out)
                    *out = f;
                return NXL_SUCCESS;
            }
            nxli_mt_record_free(q);
        }
        nxli_tlock(a);
        nxli_xfer_post_unclaim(x, f);
        nxli_tunlock(a);
    }
    CALL(x->agent, t_xfer_post);
    ARG(0).p = x, ARG(1).done = cb, ARG(2).p = arg, ARG(3).p = out;
    return RUN_ST();
}

static void t_xfer_status(nxli_call_t *c) { c->r.st = nxl_xfer_status(A(0).cp); }
nxl_status_t nxli_rpc_xfer_status(const nxl_xfer_t *x)
{
    CALL_DIRECT(x->agent, t_xfer_status);
    ARG(0).cp = x;
    return RUN_ST();
}

static void t_xfer_release(nxli_call_t *c) { nxl_xfer_release(A(0).p); }
void nxli_rpc_xfer_release(nxl_xfer_t *x)
{
    nxli_mt_call_async(x->agent, t_xfer_release, x, true, true);
}

static void t_notif_send(nxli_call_t *c)
{
    ST(nxl_notif_send(c->a, A(0).cp, A(1).cp, A(2).z, A(3).done, A(4).p, A(5).p));
}
nxl_status_t nxli_rpc_notif_send(nxl_agent_t *a, const char *remote, const void *msg, size_t len,
                                 nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    CALL_DIRECT(a, t_notif_send);
    ARG(0).cp = remote, ARG(1).cp = msg, ARG(2).z = len;
    ARG(3).done = cb, ARG(4).p = arg, ARG(5).p = out;
    return RUN_ST();
}
