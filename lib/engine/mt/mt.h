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
 * doc/design.md (Threads) has the model, doc/perf/README.md (Threads) the numbers.
 *
 * The files: queue.c (the call queue, the reactor's wake-up, the calls
 * that wait for it), act.c (the table lock; acting), reactor.c (the
 * thread), wait.c (nxl_future_wait() from a foreign thread), rpc.c (the
 * entries of threads.h and their thunks). */
#ifndef NXL_ENGINE_MT_H
#define NXL_ENGINE_MT_H

#include "../internal.h"

#include <pthread.h>
#include <semaphore.h>

/* an argument of a record made by hand (the releases, a queued post, a log
 * line); the calls of calls.def keep theirs in a struct of their own */
typedef union nxli_arg {
    void *p;
    int i;
    nxl_done_cb done;
} nxli_arg_t;

typedef struct nxli_call nxli_call_t;
struct nxli_call {
    void (*fn)(nxli_call_t *c);
    nxl_agent_t *a;
    nxli_arg_t v[4];
    void *args;             /* a call of calls.def: its arguments and result (rpc.c) */
    nxl_status_t st;        /* a record by hand: its status (ST); refused: NOT_ALLOWED */
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

struct nxli_waiter {
    sem_t sem;          /* posted by the reactor when the future settled */
    nxl_status_t st;
    bool linked;        /* under the queue's mutex: on its future's list */
    nxli_waiter_t *next;
};

/* queue.c: the call queue and the reactor's wake-up */
extern __thread struct nxli_tstate *nxli_mt_ts_self;
void nxli_mt_ts_hold(nxli_call_t *c);
void nxli_mt_record_free(nxli_call_t *c);
void nxli_mt_refuse(nxli_call_t *c);
void nxli_mt_wake_cb(nxlt_io_t *io, int fd, unsigned ready, void *arg);
bool nxli_mt_enqueue(nxl_agent_t *a, nxli_call_t *c, bool wake);
void nxli_mt_kick(struct nxli_thr *t);
void nxli_mt_call(nxl_agent_t *a, nxli_call_t *c);
void nxli_mt_call_async(nxl_agent_t *a, void (*fn)(nxli_call_t *), void *p, bool wake,
                        bool direct);

/* act.c: the table lock, and acting for a sleeping reactor */
void nxli_mt_tmu_lock(struct nxli_thr *t);
void nxli_mt_tmu_unlock(struct nxli_thr *t);
bool nxli_mt_foreign_try(nxl_agent_t *a);
bool nxli_mt_act_begin(nxl_agent_t *a, bool wait);
void nxli_mt_act_end(nxl_agent_t *a, bool failed);
bool nxli_mt_act_run(nxl_agent_t *a, nxli_call_t *c, bool wait);

/* a call record by hand, on the caller's stack (CALL, ARG, RUN_ST), and its
 * thunk (A, ST); the calls of calls.def are made by rpc.c */
#define CALL(agent, thunk) nxli_call_t c_ = {.fn = (thunk)}; nxl_agent_t *a_ = (agent)
#define ARG(i) c_.v[i]
#define RUN_ST() (nxli_mt_call(a_, &c_), c_.st)
#define A(i) c->v[i]
#define ST(expr) do { c->st = (expr); c->fail = c->st < 0; } while (0)

#endif
