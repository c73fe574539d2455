/* SPDX-License-Identifier: BSD-3-Clause */
/* Threaded mode: the call queue (a record per marshalled call, run by the
 * reactor when its eventfd wakes it) and the calls that use it (mt.h). */
#include "mt.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static pthread_key_t ts_key;
static pthread_once_t ts_once = PTHREAD_ONCE_INIT;
__thread struct nxli_tstate *nxli_mt_ts_self;

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
void nxli_mt_ts_hold(nxli_call_t *c)
{
    if ((c->ts = ts_get())) {
        __atomic_add_fetch(&c->ts->refs, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&c->ts->pending, 1, __ATOMIC_RELEASE);
    }
}

void nxli_mt_record_free(nxli_call_t *c)
{
    if (c->ts) {
        __atomic_sub_fetch(&c->ts->pending, 1, __ATOMIC_RELEASE);
        ts_drop(c->ts);
    }
    free(c);
}

/* ---- the queue */

void nxli_mt_refuse(nxli_call_t *c)
{
    if (c->async) {
        if (c->refuse)
            c->refuse(c);
        nxli_mt_record_free(c);
        return;
    }
    c->st = NXL_ERR_NOT_ALLOWED;
    c->fail = true;
    snprintf(c->err, sizeof(c->err), "agent '%s' is being destroyed: its reactor thread no "
             "longer takes calls", c->a->name);
    sem_post(&c->done);
}

void nxli_mt_wake_cb(nxlt_io_t *io, int fd, unsigned ready, void *arg)
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
bool nxli_mt_enqueue(nxl_agent_t *a, nxli_call_t *c, bool wake)
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

/* wakes the reactor (once until it reads its eventfd) */
void nxli_mt_kick(struct nxli_thr *t)
{
    pthread_mutex_lock(&t->mu);
    bool signal = !t->signaled;
    t->signaled = true;
    pthread_mutex_unlock(&t->mu);
    if (signal)
        efd_write(t);
}

/* Runs c on the reactor thread (or acting) and waits for it. */
void nxli_mt_call(nxl_agent_t *a, nxli_call_t *c)
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
void nxli_mt_call_async(nxl_agent_t *a, void (*fn)(nxli_call_t *), void *p, bool wake,
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
