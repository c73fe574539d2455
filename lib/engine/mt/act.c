/* SPDX-License-Identifier: BSD-3-Clause */
/* Threaded mode: the table lock, and a foreign thread acting for a sleeping
 * reactor (mt.h). */
#include "mt.h"

#include <stdio.h>
#include <string.h>

/* the agent this thread acts for, if any */
static __thread const nxl_agent_t *tls_act;
static __thread char act_err[NXLI_ERR_MAX];

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

void nxli_mt_tmu_lock(struct nxli_thr *t)
{
    if (tmu_mine(t)) {
        t->tmu_depth++;
        return;
    }
    tmu_block(t);
    tmu_took(t);
}

void nxli_mt_tmu_unlock(struct nxli_thr *t)
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
bool nxli_mt_foreign_try(nxl_agent_t *a)
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
bool nxli_mt_act_begin(nxl_agent_t *a, bool wait)
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

void nxli_mt_act_end(nxl_agent_t *a, bool failed)
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
bool nxli_mt_act_run(nxl_agent_t *a, nxli_call_t *c, bool wait)
{
    if (!nxli_mt_act_begin(a, wait))
        return false;
    c->a = a;
    c->fail = false;
    c->fn(c);
    nxli_mt_act_end(a, c->fail);
    return true;
}
