/* SPDX-License-Identifier: BSD-3-Clause */
/* The agent's loop: the watches and timers of nxl/transport.h, handed to
 * the backend the agent was made with (loop.h). */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

nxli_loop_t *nxli_loop_new(nxl_agent_t *a, int kind, struct event_base *base, char *why,
                           size_t cap)
{
    nxli_loop_t *l = calloc(1, sizeof(*l));
    if (!l) {
        snprintf(why, cap, "out of memory");
        return NULL;
    }
    l->agent = a;
    l->epfd = l->tfd = l->wfd = -1;
    int rc = kind == NXL_LOOP_FD ? nxli_loop_epoll_init(l, why, cap)
                                 : nxli_loop_libevent_init(l, base, why, cap);
    if (rc < 0) {
        free(l);
        return NULL;
    }
    return l;
}

void nxli_loop_free(nxli_loop_t *l)
{
    if (!l)
        return;
    nxli_loop_reap(l);
    l->ops->destroy(l);
    free(l->heap);
    free(l);
}

void nxli_loop_reap(nxli_loop_t *l)
{
    if (l->dispatching)
        return;
    while (l->graves) {
        void *p = l->graves;
        l->graves = *(void **)p;
        free(p);
    }
}

/* a watch or timer freed: at once, or after the callbacks of this turn
 * (a later one of them may still be in the turn's list); @p p begins with
 * its grave link */
static void bury(nxli_loop_t *l, void *p)
{
    if (!l->dispatching) {
        free(p);
        return;
    }
    *(void **)p = l->graves;
    l->graves = p;
}

/* ---- watches */

nxlt_io_t *nxli_io_new(nxl_agent_t *a, int fd, nxlt_io_cb cb, void *arg)
{
    if (fd < 0 || !cb) {
        nxli_err(a, "nxlt_io_new: no descriptor (%d) or no callback to watch", fd);
        return NULL;
    }
    nxlt_io_t *io = calloc(1, sizeof(*io));
    if (!io) {
        nxli_err(a, "nxlt_io_new: out of memory");
        return NULL;
    }
    io->loop = a->loop;
    io->fd = fd;
    io->cb = cb;
    io->arg = arg;
    a->loop->nio++;
    return io;
}

nxlt_io_t *nxlt_io_new(nxlt_ctx_t *ctx, int fd, nxlt_io_cb cb, void *arg)
{
    return nxli_io_new(ctx->agent, fd, cb, arg);
}

int nxlt_io_start(nxlt_io_t *io, unsigned events)
{
    events &= NXLT_IO_READ | NXLT_IO_WRITE | NXLT_IO_ONCE;
    if (!(events & (NXLT_IO_READ | NXLT_IO_WRITE)))
        events = 0;
    if (events == io->events)
        return 0;
    return io->loop->ops->io_start(io->loop, io, events);
}

unsigned nxlt_io_events(const nxlt_io_t *io) { return io->events; }

void nxlt_io_free(nxlt_io_t *io)
{
    if (!io)
        return;
    nxli_loop_t *l = io->loop;
    if (io->events)
        l->ops->io_start(l, io, 0);
    l->ops->io_free(l, io);
    l->nio--;
    io->dead = true;
    bury(l, io);
}

/* ---- timers */

nxlt_timer_t *nxli_timer_new(nxl_agent_t *a, nxlt_timer_cb cb, void *arg)
{
    nxlt_timer_t *t = calloc(1, sizeof(*t));
    if (!t || !cb) {
        free(t);
        nxli_err(a, "nxlt_timer_new: %s", cb ? "out of memory" : "no callback");
        return NULL;
    }
    t->loop = a->loop;
    t->cb = cb;
    t->arg = arg;
    if (a->loop->ops->timer_new(a->loop, t) < 0) {
        free(t);
        nxli_err(a, "nxlt_timer_new: the loop (%s) could not make a timer", a->loop->ops->name);
        return NULL;
    }
    a->loop->ntimers++;
    return t;
}

nxlt_timer_t *nxlt_timer_new(nxlt_ctx_t *ctx, nxlt_timer_cb cb, void *arg)
{
    return nxli_timer_new(ctx->agent, cb, arg);
}

void nxlt_timer_start(nxlt_timer_t *t, uint64_t after_us) { t->loop->ops->timer_start(t->loop, t, after_us); }
void nxlt_timer_activate(nxlt_timer_t *t) { t->loop->ops->timer_activate(t->loop, t); }
void nxlt_timer_stop(nxlt_timer_t *t) { t->loop->ops->timer_stop(t->loop, t); }
int nxlt_timer_pending(const nxlt_timer_t *t) { return t->loop->ops->timer_pending(t->loop, t); }

void nxlt_timer_free(nxlt_timer_t *t)
{
    if (!t)
        return;
    nxli_loop_t *l = t->loop;
    l->ops->timer_stop(l, t);
    l->ops->timer_free(l, t);
    l->ntimers--;
    t->dead = true;
    bury(l, t);
}

int nxlt_loop_busy(nxlt_ctx_t *ctx)
{
    nxli_loop_t *l = ctx->agent->loop;
    return l->ops->busy(l);
}
