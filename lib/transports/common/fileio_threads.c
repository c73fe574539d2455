/* SPDX-License-Identifier: BSD-3-Clause */
/* The POSIX transport's thread-pool engine: a few threads doing one pread
 * or pwrite per segment. Results go on a done list and an eventfd in the
 * reactor wakes the reactor thread, which hands them to the core. Only the
 * two lists are shared, under one mutex; everything else stays on the
 * reactor thread. */
#include "../posix/posix.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct tp {
    pthread_t *th;
    unsigned n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct px_segq todo, done;
    bool stop;
    int efd;
    struct event *ev;
} tp_t;

static void *worker(void *arg)
{
    tp_t *t = arg;
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (!t->stop && TAILQ_EMPTY(&t->todo))
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->stop) {
            pthread_mutex_unlock(&t->mu);
            return NULL;
        }
        px_seg_t *s = TAILQ_FIRST(&t->todo);
        TAILQ_REMOVE(&t->todo, s, link);
        pthread_mutex_unlock(&t->mu);

        ssize_t r = s->xop->write ? pwrite(s->iofd, s->buf, s->ion, (off_t)s->off)
                                  : pread(s->iofd, s->buf, s->ion, (off_t)s->off);
        s->res = r < 0 ? -errno : r;

        pthread_mutex_lock(&t->mu);
        bool was_empty = TAILQ_EMPTY(&t->done);
        TAILQ_INSERT_TAIL(&t->done, s, link);
        pthread_mutex_unlock(&t->mu);
        if (was_empty) {
            uint64_t one = 1;
            ssize_t w = write(t->efd, &one, sizeof(one));
            (void)w; /* EAGAIN: the counter is already non-zero, the reactor wakes anyway */
        }
    }
}

static void tp_pump(px_t *u)
{
    tp_t *t = u->eng_state;
    if (TAILQ_EMPTY(&u->pending))
        return;
    px_seg_t *s;
    struct px_segq batch;
    TAILQ_INIT(&batch);
    while ((s = px_seg_next(u))) {
        size_t len;
        px_seg_fd(u, s, &len);
        s->state = PX_S_INFLIGHT;
        TAILQ_INSERT_TAIL(&batch, s, link);
        u->n_submits++; /* a pread or pwrite each */
    }
    pthread_mutex_lock(&t->mu);
    TAILQ_CONCAT(&t->todo, &batch, link);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void tp_reap(px_t *u)
{
    tp_t *t = u->eng_state;
    struct px_segq got;
    TAILQ_INIT(&got);
    pthread_mutex_lock(&t->mu);
    TAILQ_CONCAT(&got, &t->done, link);
    pthread_mutex_unlock(&t->mu);
    px_seg_t *s;
    while ((s = TAILQ_FIRST(&got))) {
        TAILQ_REMOVE(&got, s, link);
        px_seg_result(u, s, s->res);
    }
}

static void tp_on_efd(evutil_socket_t fd, short what, void *arg)
{
    px_t *u = arg;
    tp_t *t = u->eng_state;
    px_efd_drain(u, t->efd, "the thread pool's");
    tp_reap(u);
    tp_pump(u);
}

static void tp_free(tp_t *t)
{
    if (t->ev)
        event_free(t->ev);
    if (t->efd >= 0)
        close(t->efd);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t->th);
    free(t);
}

static void tp_join(tp_t *t)
{
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    for (unsigned i = 0; i < t->n; i++)
        pthread_join(t->th[i], NULL);
    t->n = 0;
}

static int tp_start(px_t *u, char *why, size_t cap)
{
    tp_t *t = calloc(1, sizeof(*t));
    if (!t || !(t->th = calloc(u->nthreads, sizeof(*t->th)))) {
        free(t);
        snprintf(why, cap, "out of memory");
        return -1;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    TAILQ_INIT(&t->todo);
    TAILQ_INIT(&t->done);
    t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->efd < 0) {
        snprintf(why, cap, "eventfd failed: %s", strerror(errno));
        tp_free(t);
        return -1;
    }
    t->ev = event_new(nxlt_base(u->ctx), t->efd, EV_READ | EV_PERSIST, tp_on_efd, u);
    if (!t->ev || event_add(t->ev, NULL) < 0) {
        snprintf(why, cap, "libevent could not watch the thread pool's eventfd");
        tp_free(t);
        return -1;
    }
    for (unsigned i = 0; i < u->nthreads; i++) {
        int rc = pthread_create(&t->th[i], NULL, worker, t);
        if (rc) {
            snprintf(why, cap, "pthread_create failed: %s", strerror(rc));
            tp_join(t);
            tp_free(t);
            return -1;
        }
        t->n++;
    }
    u->eng_state = t;
    snprintf(u->desc, sizeof(u->desc), "thread pool (%u threads doing pread/pwrite, eventfd "
                                       "in the reactor)", t->n);
    return 0;
}

static void tp_stop(px_t *u)
{
    tp_t *t = u->eng_state;
    if (!t)
        return;
    /* each worker finishes the I/O it is doing, then leaves */
    tp_join(t);
    tp_reap(u);
    px_seg_t *s;
    while ((s = TAILQ_FIRST(&t->todo))) { /* never started */
        TAILQ_REMOVE(&t->todo, s, link);
        px_seg_result(u, s, -ECANCELED);
    }
    tp_free(t);
    u->eng_state = NULL;
}

const px_engine_t px_engine_threads = {
    .name = "threads",
    .start = tp_start,
    .pump = tp_pump,
    .stop = tp_stop,
};
