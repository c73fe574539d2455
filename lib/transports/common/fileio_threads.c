/* SPDX-License-Identifier: BSD-3-Clause */
/* The file-I/O core's thread-pool engine: a few threads doing the I/O of
 * one segment each, a pread or pwrite (POSIX) or what the transport's
 * nxl_fio_ops_t.io does (GDS: cuFileRead/cuFileWrite). Results go on a done
 * list and an eventfd in the reactor wakes the reactor thread, which hands
 * them to the core (or the transport's nxl_fio_ops_t.result). Only the two
 * lists are shared, under one mutex; everything else stays on the reactor
 * thread. At most f->tp_max segments are with the workers (0: no limit). */
#include "fileio.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct tp {
    nxl_fio_t *f;
    pthread_t *th;
    unsigned n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct nxl_fio_segq todo, done;
    unsigned inflight;       /* reactor side: segments with the workers */
    bool stop;
    int efd;
    nxlt_io_t *ev;
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
        nxl_fio_seg_t *s = TAILQ_FIRST(&t->todo);
        TAILQ_REMOVE(&t->todo, s, link);
        pthread_mutex_unlock(&t->mu);

        if (t->f->ops->io) {
            t->f->ops->io(t->f, s);
        } else {
            ssize_t r = s->xop->write ? pwrite(s->iofd, s->buf, s->ion, (off_t)s->off)
                                      : pread(s->iofd, s->buf, s->ion, (off_t)s->off);
            s->res = r < 0 ? -errno : r;
        }

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

static void tp_pump(nxl_fio_t *f)
{
    tp_t *t = f->eng_state;
    if (TAILQ_EMPTY(&f->pending))
        return;
    nxl_fio_seg_t *s;
    struct nxl_fio_segq batch;
    TAILQ_INIT(&batch);
    while ((!f->tp_max || t->inflight < f->tp_max) && (s = nxl_fio_seg_next(f))) {
        size_t len;
        if (f->ops->seg_fd)
            f->ops->seg_fd(f, s, &len);
        s->state = NXL_FIO_S_INFLIGHT;
        TAILQ_INSERT_TAIL(&batch, s, link);
        t->inflight++;
        f->n_submits++; /* a pread or pwrite (or the transport's I/O) each */
    }
    if (TAILQ_EMPTY(&batch))
        return;
    pthread_mutex_lock(&t->mu);
    TAILQ_CONCAT(&t->todo, &batch, link);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* a worker's result, to the transport's reading of it or the core's */
static void tp_result(nxl_fio_t *f, nxl_fio_seg_t *s)
{
    if (f->ops->result)
        f->ops->result(f, s);
    else
        nxl_fio_seg_result(f, s, s->res);
}

static void tp_reap(nxl_fio_t *f)
{
    tp_t *t = f->eng_state;
    struct nxl_fio_segq got;
    TAILQ_INIT(&got);
    pthread_mutex_lock(&t->mu);
    TAILQ_CONCAT(&got, &t->done, link);
    pthread_mutex_unlock(&t->mu);
    nxl_fio_seg_t *s;
    while ((s = TAILQ_FIRST(&got))) {
        TAILQ_REMOVE(&got, s, link);
        t->inflight--;
        tp_result(f, s);
    }
}

static void tp_on_efd(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    nxl_fio_t *f = arg;
    tp_t *t = f->eng_state;
    nxl_fio_efd_drain(f, t->efd, "the thread pool's");
    tp_reap(f);
    tp_pump(f);
}

static void tp_free(tp_t *t)
{
    nxlt_io_free(t->ev);
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

static int tp_start(nxl_fio_t *f, char *why, size_t cap)
{
    tp_t *t = calloc(1, sizeof(*t));
    if (!t || !(t->th = calloc(f->nthreads, sizeof(*t->th)))) {
        free(t);
        snprintf(why, cap, "out of memory");
        return -1;
    }
    t->f = f;
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
    t->ev = nxlt_io_new(f->ctx, t->efd, tp_on_efd, f);
    if (!t->ev || nxlt_io_start(t->ev, NXLT_IO_READ) < 0) {
        snprintf(why, cap, "the loop could not watch the thread pool's eventfd");
        tp_free(t);
        return -1;
    }
    for (unsigned i = 0; i < f->nthreads; i++) {
        int rc = pthread_create(&t->th[i], NULL, worker, t);
        if (rc) {
            snprintf(why, cap, "pthread_create failed: %s", strerror(rc));
            tp_join(t);
            tp_free(t);
            return -1;
        }
        t->n++;
    }
    f->eng_state = t;
    snprintf(f->desc, sizeof(f->desc), "thread pool (%u threads doing pread/pwrite, eventfd "
                                       "in the reactor)", t->n);
    return 0;
}

static void tp_stop(nxl_fio_t *f)
{
    tp_t *t = f->eng_state;
    if (!t)
        return;
    /* each worker finishes the I/O it is doing, then leaves */
    tp_join(t);
    tp_reap(f);
    nxl_fio_seg_t *s;
    while ((s = TAILQ_FIRST(&t->todo))) { /* never started */
        TAILQ_REMOVE(&t->todo, s, link);
        s->res = -ECANCELED;
        tp_result(f, s);
    }
    tp_free(t);
    f->eng_state = NULL;
}

const nxl_fio_engine_t nxl_fio_engine_threads = {
    .name = "threads",
    .start = tp_start,
    .pump = tp_pump,
    .stop = tp_stop,
};
