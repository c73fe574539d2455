/* SPDX-License-Identifier: BSD-3-Clause */
/* The file-I/O core of the POSIX and GDS transports (fileio.h): the
 * segments of a transfer, their pending queue, and what an I/O engine's
 * results do to them. */
#include "fileio.h"

#include <errno.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define FIO_MARK_DEFINED(p, n) VALGRIND_MAKE_MEM_DEFINED(p, n)
#endif
#endif
#ifndef FIO_MARK_DEFINED
#define FIO_MARK_DEFINED(p, n) ((void)0)
#endif

void nxl_fio_efd_drain(nxl_fio_t *f, int efd, const char *whose)
{
    uint64_t v;
    if (read(efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        nxlt_log(f->ctx, NXL_LOG_WARN, "%s: reading %s eventfd: %s", f->ops->name, whose,
                 strerror(errno));
}

static void xop_finish(nxl_fio_t *f, nxl_fio_xop_t *x)
{
    LIST_REMOVE(x, link);
    nxlt_log(f->ctx, NXL_LOG_DEBUG, "%s: %s of %zu segments done: %s", f->ops->name,
             x->write ? "write" : "read", x->nseg, x->failed ? x->why : "ok");
    nxlt_op_done(x->op, x->failed ? x->st : NXL_SUCCESS, x->failed ? x->why : NULL);
    for (size_t i = 0; i < x->nseg; i++)
        f->ops->file_put(f->owner, x->seg[i].file);
    free(x);
}

void nxl_fio_seg_done(nxl_fio_t *f, nxl_fio_seg_t *s)
{
    nxl_fio_xop_t *x = s->xop;
    s->state = NXL_FIO_S_DONE;
    if (--x->nleft == 0 && !f->closing)
        xop_finish(f, x);
}

void nxl_fio_fail(nxl_fio_t *f, nxl_fio_seg_t *s, nxl_status_t st, const char *fmt, ...)
{
    nxl_fio_xop_t *x = s->xop;
    if (!x->failed) {
        x->failed = true;
        x->st = st;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->why, sizeof(x->why), fmt, ap);
        va_end(ap);
        nxlt_log(f->ctx, NXL_LOG_INFO, "%s", x->why);
    }
    /* start nothing more of this transfer */
    for (size_t i = 0; i < x->nseg; i++)
        if (x->seg[i].state == NXL_FIO_S_QUEUED) {
            TAILQ_REMOVE(&f->pending, &x->seg[i], link);
            x->seg[i].state = NXL_FIO_S_IDLE;
            nxl_fio_seg_done(f, &x->seg[i]);
        }
    nxl_fio_seg_done(f, s);
}

void nxl_fio_seg_requeue(nxl_fio_t *f, nxl_fio_seg_t *s)
{
    s->state = NXL_FIO_S_QUEUED;
    TAILQ_INSERT_HEAD(&f->pending, s, link);
}

nxl_fio_seg_t *nxl_fio_seg_next(nxl_fio_t *f)
{
    nxl_fio_seg_t *s;
    while ((s = TAILQ_FIRST(&f->pending))) {
        TAILQ_REMOVE(&f->pending, s, link);
        s->state = NXL_FIO_S_INFLIGHT;
        if (!nxlt_op_canceled(s->xop->op))
            return s;
        /* canceled: start nothing more of it; it completes once what is
         * in flight has ended */
        nxl_fio_fail(f, s, NXL_ERR_CANCELED, "%s: %s %s canceled before offset %llu (element %zu)",
                     f->ops->name, s->xop->write ? "write to" : "read from", s->fname,
                     (unsigned long long)s->off, s->elem);
    }
    return NULL;
}

void nxl_fio_seg_result(nxl_fio_t *f, nxl_fio_seg_t *s, ssize_t res)
{
    nxl_fio_xop_t *x = s->xop;
    const char *name = f->ops->name;
    if (res > 0 && !x->write)
        FIO_MARK_DEFINED(s->buf, (size_t)res);
    if (f->closing || x->failed) {
        nxl_fio_seg_done(f, s);
        return;
    }
    const char *verb = x->write ? "write to" : "read from";
    size_t moved = s->total - s->left;
    if (nxlt_op_canceled(x->op)) {
        nxl_fio_fail(f, s, NXL_ERR_CANCELED, "%s: %s %s canceled at offset %llu (element %zu)",
                     name, verb, s->fname, (unsigned long long)s->off, s->elem);
        return;
    }
    if (res == -EINTR || res == -EAGAIN) {
        nxl_fio_seg_requeue(f, s);
        return;
    }
    if (res == -EINVAL && s->direct) {
        /* the file system wants another alignment: continue buffered */
        nxlt_log(f->ctx, NXL_LOG_DEBUG, "%s: O_DIRECT %s %s at offset %llu refused (EINVAL); "
                                        "continuing buffered", name, verb, s->fname,
                 (unsigned long long)s->off);
        s->no_direct = true;
        nxl_fio_seg_requeue(f, s);
        return;
    }
    if (res < 0) {
        nxl_fio_fail(f, s, NXL_ERR_BACKEND, "%s: %s %s at offset %llu (element %zu) failed after "
                                            "%zu of %zu bytes: %s", name, verb, s->fname,
                     (unsigned long long)s->off, s->elem, moved, s->total, strerror((int)-res));
        return;
    }
    if (res == 0) {
        if (!x->write) {
            struct stat sb;
            long long size = fstat(s->iofd, &sb) == 0 ? (long long)sb.st_size : -1;
            nxl_fio_fail(f, s, NXL_ERR_NOT_FOUND, "%s: read from %s at offset %llu (element %zu) "
                                                  "reached the end of the file (%lld bytes long) "
                                                  "after %zu of %zu bytes",
                         name, s->fname, (unsigned long long)s->off, s->elem, size, moved,
                         s->total);
        } else {
            nxl_fio_fail(f, s, NXL_ERR_BACKEND, "%s: write to %s at offset %llu (element %zu) "
                                                "wrote nothing after %zu of %zu bytes",
                         name, s->fname, (unsigned long long)s->off, s->elem, moved, s->total);
        }
        return;
    }
    if ((size_t)res < s->ion)
        f->n_short++;
    s->buf += res;
    s->off += (uint64_t)res;
    s->left -= (size_t)res;
    if (s->left) {
        nxl_fio_seg_requeue(f, s); /* short, or longer than one I/O: continue */
        return;
    }
    nxl_fio_seg_done(f, s);
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    nxl_fio_t *f = arg;
    nxl_fio_xop_t *x, *n;
    for (x = LIST_FIRST(&f->xops); x; x = n) {
        n = LIST_NEXT(x, link);
        if (!x->nleft)
            xop_finish(f, x);
    }
    f->eng->pump(f);
}

int nxl_fio_init(nxl_fio_t *f, nxlt_ctx_t *ctx, const nxl_fio_ops_t *ops, void *owner)
{
    f->ctx = ctx;
    f->ops = ops;
    f->owner = owner;
    TAILQ_INIT(&f->pending);
    LIST_INIT(&f->xops);
    f->kick = event_new(nxlt_base(ctx), -1, 0, on_kick, f);
    return f->kick ? 0 : -1;
}

nxl_status_t nxl_fio_post(nxl_fio_t *f, nxlt_op_t *op, const nxlt_xfer_t *t)
{
    size_t nseg = 0;
    for (size_t i = 0; i < t->n; i++)
        nseg += t->iov[i].len ? (t->iov[i].len + f->chunk - 1) / f->chunk : 0;
    nxl_fio_xop_t *x = calloc(1, sizeof(*x) + nseg * sizeof(nxl_fio_seg_t));
    if (!x) {
        nxlt_error(f->ctx, "%s: out of memory for a transfer of %zu elements", f->ops->name,
                   t->n);
        return NXL_ERR_UNKNOWN;
    }
    x->f = f;
    x->op = op;
    x->write = t->op == NXL_WRITE;
    x->nseg = x->nleft = nseg;
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++) {
        const nxlt_iov_t *v = &t->iov[i];
        for (size_t at = 0; at < v->len; at += f->chunk) {
            nxl_fio_seg_t *s = &x->seg[k++];
            s->xop = x;
            f->ops->seg_init(f->owner, s, v);
            s->buf = (char *)v->laddr + at;
            s->off = v->raddr + at;
            s->total = s->left = v->len - at < f->chunk ? v->len - at : f->chunk;
            s->elem = i;
            s->iofd = -1;
            s->state = NXL_FIO_S_QUEUED;
            TAILQ_INSERT_TAIL(&f->pending, s, link);
        }
    }
    LIST_INSERT_HEAD(&f->xops, x, link);
    f->n_xfers++;
    if (!nseg)
        event_active(f->kick, EV_TIMEOUT, 0); /* nothing to move: done next turn */
    else
        f->eng->pump(f);
    return NXL_SUCCESS;
}

void nxl_fio_quiesce(nxl_fio_t *f)
{
    if (f->closing)
        return;
    f->closing = true;
    if (f->eng)
        f->eng->stop(f);
    nxl_fio_seg_t *s;
    while ((s = TAILQ_FIRST(&f->pending))) {
        TAILQ_REMOVE(&f->pending, s, link);
        s->state = NXL_FIO_S_DONE;
    }
    nxl_fio_xop_t *x;
    char why[128];
    snprintf(why, sizeof(why), "%s: transport destroyed with the transfer in flight (agent "
                               "teardown)", f->ops->name);
    while ((x = LIST_FIRST(&f->xops))) {
        LIST_REMOVE(x, link);
        nxlt_op_done(x->op, NXL_ERR_CANCELED, why);
        for (size_t i = 0; i < x->nseg; i++)
            f->ops->file_put(f->owner, x->seg[i].file);
        free(x);
    }
}

void nxl_fio_fini(nxl_fio_t *f)
{
    if (f->kick)
        event_free(f->kick);
    f->kick = NULL;
}
