/* SPDX-License-Identifier: BSD-3-Clause */
/* The loop on a libevent base (the default): each watch and timer is one
 * event of the base, the application's or the agent's own. */
#include "internal.h"

#include <event2/event.h>
#include <stdio.h>

static void on_io(evutil_socket_t fd, short what, void *arg)
{
    nxlt_io_t *io = arg;
    unsigned ready = (what & EV_READ ? NXLT_IO_READ : 0) | (what & EV_WRITE ? NXLT_IO_WRITE : 0);
    if (io->events & NXLT_IO_ONCE)
        io->events = 0; /* libevent made it non-pending */
    io->cb(io, (int)fd, ready, io->arg);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    nxlt_timer_t *t = arg;
    t->cb(t, t->arg);
}

static int le_io_start(nxli_loop_t *l, nxlt_io_t *io, unsigned events)
{
    struct event *ev = io->bk;
    if (ev)
        event_del(ev);
    io->events = 0;
    if (!events)
        return 0;
    short what = (short)((events & NXLT_IO_READ ? EV_READ : 0) |
                         (events & NXLT_IO_WRITE ? EV_WRITE : 0) |
                         (events & NXLT_IO_ONCE ? 0 : EV_PERSIST));
    if (!ev) {
        ev = event_new(l->base, io->fd, what, on_io, io);
        io->bk = ev;
    } else if (event_assign(ev, l->base, io->fd, what, on_io, io) < 0) {
        ev = NULL;
    }
    if (!ev || event_add(ev, NULL) < 0) {
        nxli_err(l->agent, "nxlt_io_start: libevent could not watch descriptor %d", io->fd);
        return -1;
    }
    io->events = events;
    return 0;
}

static void le_io_free(nxli_loop_t *l, nxlt_io_t *io)
{
    if (io->bk)
        event_free(io->bk);
    io->bk = NULL;
}

static int le_timer_new(nxli_loop_t *l, nxlt_timer_t *t)
{
    t->bk = evtimer_new(l->base, on_timer, t);
    return t->bk ? 0 : -1;
}

static void le_timer_start(nxli_loop_t *l, nxlt_timer_t *t, uint64_t after_us)
{
    struct timeval tv = {(time_t)(after_us / 1000000), (suseconds_t)(after_us % 1000000)};
    evtimer_add((struct event *)t->bk, &tv);
}

static void le_timer_activate(nxli_loop_t *l, nxlt_timer_t *t)
{
    event_active((struct event *)t->bk, EV_TIMEOUT, 0);
}

static void le_timer_stop(nxli_loop_t *l, nxlt_timer_t *t) { event_del((struct event *)t->bk); }

static int le_timer_pending(const nxli_loop_t *l, const nxlt_timer_t *t)
{
    return event_pending((struct event *)t->bk, EV_TIMEOUT, NULL) != 0;
}

static void le_timer_free(nxli_loop_t *l, nxlt_timer_t *t)
{
    event_free((struct event *)t->bk);
    t->bk = NULL;
}

static void on_bound(evutil_socket_t fd, short what, void *arg) {}

static int le_run_once(nxli_loop_t *l, int timeout_ms)
{
    int rc;
    if (timeout_ms == 0) {
        /* one turn: NONBLOCK alone keeps looping while callbacks re-arm
         * zero-delay timers (a busy UCX worker), and never returns */
        rc = event_base_loop(l->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    } else if (timeout_ms < 0) {
        rc = event_base_loop(l->base, EVLOOP_ONCE);
    } else {
        /* a timer of its own bounds the wait: EVLOOP_ONCE returns after
         * the turn it ends */
        struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        if (!l->bound && !(l->bound = evtimer_new(l->base, on_bound, NULL)))
            return -1;
        event_add(l->bound, &tv);
        rc = event_base_loop(l->base, EVLOOP_ONCE);
        event_del(l->bound);
    }
    return rc < 0 ? -1 : 0;
}

static void le_stop(nxli_loop_t *l) { event_base_loopbreak(l->base); }

static int le_busy(const nxli_loop_t *l)
{
    return event_base_get_num_events(l->base, EVENT_BASE_COUNT_ACTIVE) > 0;
}

static int le_timeout_ms(const nxli_loop_t *l) { return -1; }

static void le_destroy(nxli_loop_t *l)
{
    if (l->bound)
        event_free(l->bound);
    if (l->own_base && l->base)
        event_base_free(l->base);
    l->base = NULL;
}

const nxli_loop_ops_t nxli_loop_libevent = NXLI_LOOP_OPS("libevent", le);

int nxli_loop_libevent_init(nxli_loop_t *l, struct event_base *base, char *why, size_t cap)
{
    l->ops = &nxli_loop_libevent;
    if (base) {
        l->base = base;
        return 0;
    }
    if (!(l->base = event_base_new())) {
        snprintf(why, cap, "libevent could not make an event base");
        return -1;
    }
    l->own_base = true;
    return 0;
}
