/* SPDX-License-Identifier: BSD-3-Clause */
/* The POSIX transport's transfer core: the segments of a transfer, their
 * pending queue, and what an I/O engine's results do to them (cut from
 * posix.c). */
#include "../posix/posix.h"

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
#define PX_MARK_DEFINED(p, n) VALGRIND_MAKE_MEM_DEFINED(p, n)
#endif
#endif
#ifndef PX_MARK_DEFINED
#define PX_MARK_DEFINED(p, n) ((void)0)
#endif

void px_efd_drain(px_t *u, int efd, const char *whose)
{
    uint64_t v;
    if (read(efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        nxlt_log(u->ctx, NXL_LOG_WARN, "POSIX: reading %s eventfd: %s", whose, strerror(errno));
}
int px_seg_fd(px_t *u, px_seg_t *s, size_t *len)
{
    size_t n = s->left < PX_MAX_IO ? s->left : PX_MAX_IO;
    px_file_t *f = s->file;
    s->direct = f->dfd >= 0 && !s->no_direct && !((uintptr_t)s->buf % PX_ALIGN) &&
                !(s->off % PX_ALIGN) && !(n % PX_ALIGN);
    if (s->direct)
        u->n_direct++;
    else
        u->n_buffered++;
    s->iofd = s->direct ? f->dfd : f->fd;
    s->ion = n;
    *len = n;
    return s->iofd;
}

static void xop_finish(px_t *u, px_xop_t *x)
{
    LIST_REMOVE(x, link);
    nxlt_log(u->ctx, NXL_LOG_DEBUG, "POSIX: %s of %zu segments done: %s", x->write ? "write" : "read",
             x->nseg, x->failed ? x->why : "ok");
    nxlt_op_done(x->op, x->failed ? x->st : NXL_SUCCESS, x->failed ? x->why : NULL);
    for (size_t i = 0; i < x->nseg; i++)
        px_file_put(x->seg[i].file);
    free(x);
}

static void seg_done(px_t *u, px_seg_t *s)
{
    px_xop_t *x = s->xop;
    s->state = PX_S_DONE;
    if (--x->nleft == 0 && !u->closing)
        xop_finish(u, x);
}

static void xop_fail(px_t *u, px_seg_t *s, nxl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void xop_fail(px_t *u, px_seg_t *s, nxl_status_t st, const char *fmt, ...)
{
    px_xop_t *x = s->xop;
    if (!x->failed) {
        x->failed = true;
        x->st = st;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->why, sizeof(x->why), fmt, ap);
        va_end(ap);
        nxlt_log(u->ctx, NXL_LOG_INFO, "%s", x->why);
    }
    /* start nothing more of this transfer */
    for (size_t i = 0; i < x->nseg; i++)
        if (x->seg[i].state == PX_S_QUEUED) {
            TAILQ_REMOVE(&u->pending, &x->seg[i], link);
            x->seg[i].state = PX_S_IDLE;
            seg_done(u, &x->seg[i]);
        }
    seg_done(u, s);
}

void px_seg_requeue(px_t *u, px_seg_t *s)
{
    s->state = PX_S_QUEUED;
    TAILQ_INSERT_HEAD(&u->pending, s, link);
}

px_seg_t *px_seg_next(px_t *u)
{
    px_seg_t *s;
    while ((s = TAILQ_FIRST(&u->pending))) {
        TAILQ_REMOVE(&u->pending, s, link);
        s->state = PX_S_INFLIGHT;
        if (!nxlt_op_canceled(s->xop->op))
            return s;
        /* canceled: start nothing more of it; it completes once what is
         * in flight has ended */
        xop_fail(u, s, NXL_ERR_CANCELED, "POSIX: %s %s canceled before offset %llu (element %zu)",
                 s->xop->write ? "write to" : "read from", s->file->name,
                 (unsigned long long)s->off, s->elem);
    }
    return NULL;
}

void px_seg_result(px_t *u, px_seg_t *s, ssize_t res)
{
    px_xop_t *x = s->xop;
    if (res > 0 && !x->write)
        PX_MARK_DEFINED(s->buf, (size_t)res);
    if (u->closing || x->failed) {
        seg_done(u, s);
        return;
    }
    const char *verb = x->write ? "write to" : "read from";
    size_t moved = s->total - s->left;
    if (nxlt_op_canceled(x->op)) {
        xop_fail(u, s, NXL_ERR_CANCELED, "POSIX: %s %s canceled at offset %llu (element %zu)",
                 verb, s->file->name, (unsigned long long)s->off, s->elem);
        return;
    }
    if (res == -EINTR || res == -EAGAIN) {
        px_seg_requeue(u, s);
        return;
    }
    if (res == -EINVAL && s->direct) {
        /* the file system wants another alignment: continue buffered */
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "POSIX: O_DIRECT %s %s at offset %llu refused (EINVAL); "
                                        "continuing buffered", verb, s->file->name,
                 (unsigned long long)s->off);
        s->no_direct = true;
        px_seg_requeue(u, s);
        return;
    }
    if (res < 0) {
        xop_fail(u, s, NXL_ERR_BACKEND, "POSIX: %s %s at offset %llu (element %zu) failed after "
                                        "%zu of %zu bytes: %s", verb, s->file->name,
                 (unsigned long long)s->off, s->elem, moved, s->total, strerror((int)-res));
        return;
    }
    if (res == 0) {
        if (!x->write) {
            struct stat sb;
            long long size = fstat(s->file->fd, &sb) == 0 ? (long long)sb.st_size : -1;
            xop_fail(u, s, NXL_ERR_NOT_FOUND, "POSIX: read from %s at offset %llu (element %zu) "
                                              "reached the end of the file (%lld bytes long) "
                                              "after %zu of %zu bytes",
                     s->file->name, (unsigned long long)s->off, s->elem, size, moved, s->total);
        } else {
            xop_fail(u, s, NXL_ERR_BACKEND, "POSIX: write to %s at offset %llu (element %zu) "
                                            "wrote nothing after %zu of %zu bytes",
                     s->file->name, (unsigned long long)s->off, s->elem, moved, s->total);
        }
        return;
    }
    if ((size_t)res < s->ion)
        u->n_short++;
    s->buf += res;
    s->off += (uint64_t)res;
    s->left -= (size_t)res;
    if (s->left) {
        px_seg_requeue(u, s); /* short, or longer than one I/O: continue */
        return;
    }
    seg_done(u, s);
}

void px_on_kick(evutil_socket_t fd, short what, void *arg)
{
    px_t *u = arg;
    px_xop_t *x, *n;
    for (x = LIST_FIRST(&u->xops); x; x = n) {
        n = LIST_NEXT(x, link);
        if (!x->nleft)
            xop_finish(u, x);
    }
    u->eng->pump(u);
}

