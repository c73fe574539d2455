/* SPDX-License-Identifier: BSD-3-Clause */
/* The file-I/O core of the POSIX, GDS and HF3FS transports (fileio.h): the
 * segments of a transfer, their pending queue, and what an I/O engine's
 * results do to them. */
#include "fileio.h"
#include "blob_wire.h"
#include "firstfail.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
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
    va_list ap;
    va_start(ap, fmt);
    nxl_first_fail_v(f->ctx, &x->failed, &x->st, x->why, sizeof(x->why), st, fmt, ap);
    va_end(ap);
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

static void on_kick(nxlt_timer_t *t, void *arg)
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
    if (getrandom(&f->token, sizeof(f->token), GRND_NONBLOCK) != sizeof(f->token))
        f->token = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL) ^ (uintptr_t)owner;
    f->kick = nxlt_timer_new(ctx, on_kick, f);
    return f->kick ? 0 : -1;
}

nxl_status_t nxl_fio_post_check(nxl_fio_t *f, const nxlt_xfer_t *t)
{
    const char *name = f->ops->name;
    if (f->closing) {
        nxlt_error(f->ctx, "%s: the transport is shutting down", name);
        return NXL_ERR_NOT_ALLOWED;
    }
    if (t->conn != f->owner) {
        nxlt_error(f->ctx, "%s: moves data only within the agent (its own name as the remote "
                           "agent)", name);
        return NXL_ERR_NOT_SUPPORTED;
    }
    if (t->ltype != f->ops->ltype || !(f->ops->rmask & (1u << t->rtype))) {
        nxlt_error(f->ctx, "%s: moves %s (the local list) to and from %s (the list prepared "
                           "against the agent itself), not %s and %s",
                   name, nxl_mem_name(f->ops->ltype), f->ops->rtypes, nxl_mem_name(t->ltype),
                   nxl_mem_name(t->rtype));
        return NXL_ERR_NOT_SUPPORTED;
    }
    return NXL_SUCCESS;
}

nxl_status_t nxl_fio_refuse_access(nxl_fio_t *f, size_t i, bool write, const char *fname)
{
    nxlt_error(f->ctx, "%s: element %zu %s %s, which is registered %s", f->ops->name, i,
               write ? "writes to" : "reads from", fname,
               write ? "read-only (open it for writing, or mode=rw)"
                     : "write-only (open it for reading, or mode=rw)");
    return NXL_ERR_NOT_ALLOWED;
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
        nxlt_timer_activate(f->kick); /* nothing to move: done next turn */
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
    nxlt_timer_free(f->kick);
    f->kick = NULL;
}

/* ------------------------------------------------------------ the transport table */

void nxl_fio_quiesce_op(void *state)
{
    nxl_fio_quiesce(state);
}

nxl_status_t nxl_fio_conn_info(void *state, void **buf, size_t *len)
{
    nxl_fio_t *f = state;
    return nxlt_blob24_new(f->ops->conn_magic, f->token, 0, buf, len) ? NXL_ERR_UNKNOWN
                                                                      : NXL_SUCCESS;
}

nxl_status_t nxl_fio_load_conn(void *state, const char *agent, const void *info, size_t len,
                               void **conn)
{
    nxl_fio_t *f = state;
    nxlt_blob24_t c;
    *conn = NULL;
    if (nxlt_blob24_parse(info, len, f->ops->conn_magic, &c) == 0 && c.token == f->token)
        *conn = state; /* ourselves: the loopback view */
    return NXL_SUCCESS;
}

void nxl_fio_unload_conn(void *state, void *conn) {}

nxl_status_t nxl_fio_notif_send(void *state, nxlt_op_t *op, void *conn, const void *msg,
                                size_t len)
{
    nxl_fio_t *f = state;
    nxlt_error(f->ctx, "%s: carries no notifications", f->ops->name);
    return NXL_ERR_NOT_SUPPORTED;
}

nxl_status_t nxl_fio_pack_key(nxl_fio_t *f, uint64_t regid, void **buf, size_t *len)
{
    return nxlt_blob24_new(f->ops->key_magic, f->token, regid, buf, len) ? NXL_ERR_UNKNOWN
                                                                         : NXL_SUCCESS;
}

nxl_status_t nxl_fio_dup_fd(nxl_fio_t *f, const char *tn, const nxl_desc_t *d, int *fd, int *acc,
                            char *fname, size_t cap)
{
    const char *name = f->ops->name;
    if (d->dev_id > INT_MAX) {
        nxlt_error(f->ctx, "%s: %s dev_id %llu is not a file descriptor; register an open fd, "
                           "or a path in desc.meta (\"path=/x/y;mode=rw\")",
                   name, tn, (unsigned long long)d->dev_id);
        return NXL_ERR_INVALID_PARAM;
    }
    int ufd = (int)d->dev_id;
    int fl = fcntl(ufd, F_GETFL);
    if (fl < 0) {
        int e = errno;
        nxlt_error(f->ctx, "%s: fd %d given to register %s range %llu+%zu is not open (%s): "
                           "pass an open fd in dev_id, or a path in desc.meta",
                   name, ufd, tn, (unsigned long long)d->addr, d->len, strerror(e));
        return NXL_ERR_INVALID_PARAM;
    }
    *acc = fl & O_ACCMODE;
    if ((fl & O_APPEND) && *acc != O_RDONLY) {
        nxlt_error(f->ctx, "%s: fd %d is opened with O_APPEND, where positional writes append "
                           "instead; open it without O_APPEND", name, ufd);
        return NXL_ERR_INVALID_PARAM;
    }
    if ((*fd = fcntl(ufd, F_DUPFD_CLOEXEC, 0)) < 0) {
        int e = errno;
        nxlt_error(f->ctx, "%s: cannot duplicate fd %d: %s", name, ufd, strerror(e));
        return NXL_ERR_BACKEND;
    }
    snprintf(fname, cap, "fd %d", ufd);
    return NXL_SUCCESS;
}

nxl_status_t nxl_fio_query(nxl_fio_t *f, nxl_mem_t type, const nxl_desc_t *d, nxl_query_t *res,
                           struct stat *sb, nxlt_filemeta_t *m)
{
    memset(res, 0, sizeof(*res));
    if (!(f->ops->rmask & (1u << type))) {
        nxlt_error(f->ctx, "%s: answers queries about %s, not %s", f->ops->name,
                   f->ops->rtypes_query, nxl_mem_name(type));
        return NXL_ERR_NOT_SUPPORTED;
    }
    bool exists;
    nxl_status_t st = nxlt_filemeta_stat(f->ctx, f->ops->name, d, m, sb, &exists);
    if (st != NXL_SUCCESS || !exists)
        return st;
    res->exists = 1;
    res->size = (uint64_t)sb->st_size;
    return NXL_SUCCESS;
}
