/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file nxl/uv.h
 * The libuv adapter: an NXL_LOOP_FD agent driven by a uv_loop_t.
 * Header-only (link with libuv and libnxl); written on the contract of
 * nxl.h, "Embedding in any event loop", as an adapter for another loop
 * would be.
 *
 * @code
 * cfg.loop = NXL_LOOP_FD;                 // or NXL_LOOP=fd in the environment
 * nxl_agent_create(&cfg, &a);
 * nxl_uv_attach(a, uv_default_loop());
 * uv_run(uv_default_loop(), UV_RUN_DEFAULT); // callbacks run in here
 * nxl_uv_detach(a, uv_default_loop());     // before nxl_agent_destroy(a)
 * @endcode
 *
 * Four handles per agent: a uv_poll_t on nxl_agent_backend_fd(), whose
 * readiness runs nxl_agent_run_once(a, 0); a uv_timer_t armed from
 * nxl_agent_backend_timeout() for the agent's next timer, or a uv_idle_t
 * when that timer is due at once (a turn per loop iteration, the loop's
 * other handles served in between); and a uv_prepare_t that re-arms them
 * once per loop iteration. The
 * prepare phase is the right one: it runs after the iteration's timer
 * callbacks and the previous iteration's check and close callbacks, just
 * before libuv computes how long to block, so a timer that an application
 * call armed from any callback (a post, a metadata fetch) is seen before
 * the loop sleeps; a uv_check_t runs after the poll and would miss calls
 * made from timer callbacks. Its cost is one nxl_agent_backend_timeout()
 * (a look at the agent's soonest timer) per iteration. The timer, the idle
 * and the prepare handle are unreferenced: the poll handle alone keeps uv_run()
 * going while the agent is attached, as a watched socket would.
 *
 * Callbacks of the agent run inside uv_run(), on the loop's thread, which
 * must be the agent's; the application does not call nxl_agent_run_once()
 * itself. nxl_uv_detach() comes before nxl_agent_destroy().
 */
#ifndef NXL_UV_H
#define NXL_UV_H

#include <nxl.h>
#include <stddef.h>
#include <stdlib.h>
#include <uv.h>

/** One attachment (the handles' data points at it). */
typedef struct nxl_uv {
    nxl_agent_t *agent;
    uv_loop_t *loop;
    uv_poll_t poll;       /**< on nxl_agent_backend_fd(), readable */
    uv_timer_t timer;     /**< the agent's next timer */
    uv_prepare_t prepare; /**< re-arms timer before every wait */
    uv_idle_t idle;       /**< work due at once: one turn per loop iteration */
    nxl_status_t last;    /**< what the last nxl_agent_run_once() returned */
    int open;             /**< handles not closed yet */
} nxl_uv_t;

static inline void nxl_uv__timer_cb(uv_timer_t *t);
static inline void nxl_uv__idle_cb(uv_idle_t *i);

/* the timer from the agent's next one: -1 none, 0 now; counted from now,
 * not from the loop's clock of this iteration's start (after a poll that
 * blocked, it would fire early and wake the loop for nothing) */
static inline void nxl_uv__arm(nxl_uv_t *s)
{
    int ms = nxl_agent_backend_timeout(s->agent);
    if (ms <= 0) {
        uv_timer_stop(&s->timer);
        /* due now: an idle handle, run once per iteration (the poll then
         * does not block). A timer of 0 started from a timer callback is
         * due again within the same uv__run_timers() pass in libuv up to
         * 1.44: an agent with work due on every turn (a transport
         * progressing a busy peer) would keep the loop in there for good */
        if (ms == 0)
            uv_idle_start(&s->idle, nxl_uv__idle_cb);
        else
            uv_idle_stop(&s->idle);
        return;
    }
    uv_idle_stop(&s->idle);
    uv_update_time(s->loop);
    uv_timer_start(&s->timer, nxl_uv__timer_cb, (uint64_t)ms, 0);
}

/* a turn, and a second one at once when the first left work due now (a
 * transfer's completion is delivered on the turn after its progress): one
 * loop iteration instead of two for the common case */
static inline void nxl_uv__run(nxl_uv_t *s)
{
    s->last = nxl_agent_run_once(s->agent, 0);
    if (s->last == NXL_SUCCESS && nxl_agent_backend_timeout(s->agent) == 0)
        s->last = nxl_agent_run_once(s->agent, 0);
    nxl_uv__arm(s);
}

static inline void nxl_uv__poll_cb(uv_poll_t *p, int status, int events)
{
    (void)status; /* an error on the descriptor: run_once says which */
    (void)events;
    nxl_uv__run((nxl_uv_t *)p->data);
}

static inline void nxl_uv__timer_cb(uv_timer_t *t) { nxl_uv__run((nxl_uv_t *)t->data); }

static inline void nxl_uv__idle_cb(uv_idle_t *i) { nxl_uv__run((nxl_uv_t *)i->data); }

static inline void nxl_uv__prepare_cb(uv_prepare_t *p) { nxl_uv__arm((nxl_uv_t *)p->data); }

static inline void nxl_uv__close_cb(uv_handle_t *h)
{
    nxl_uv_t *s = (nxl_uv_t *)h->data;
    if (--s->open == 0)
        free(s);
}

/**
 * Attaches NXL_LOOP_FD agent @p a to @p loop (nxl_agent_attach(a, "libuv")).
 * @return NXL_SUCCESS; NXL_ERR_NOT_ALLOWED (attached already, to this or
 *         another loop, or not an NXL_LOOP_FD agent: the sentence is in
 *         nxl_agent_last_error(a)); NXL_ERR_BACKEND (libuv refused the
 *         descriptor); NXL_ERR_UNKNOWN (out of memory).
 */
static inline nxl_status_t nxl_uv_attach(nxl_agent_t *a, uv_loop_t *loop)
{
    nxl_status_t st = nxl_agent_attach(a, "libuv");
    if (st != NXL_SUCCESS)
        return st;
    nxl_uv_t *s = (nxl_uv_t *)calloc(1, sizeof(*s));
    if (!s) {
        nxl_agent_attach(a, NULL);
        return NXL_ERR_UNKNOWN;
    }
    s->agent = a;
    s->loop = loop;
    if (uv_poll_init(loop, &s->poll, nxl_agent_backend_fd(a)) != 0) {
        nxl_agent_attach(a, NULL);
        free(s);
        return NXL_ERR_BACKEND;
    }
    uv_timer_init(loop, &s->timer);
    uv_prepare_init(loop, &s->prepare);
    uv_idle_init(loop, &s->idle);
    s->poll.data = s->timer.data = s->prepare.data = s->idle.data = s;
    s->open = 4;
    uv_unref((uv_handle_t *)&s->timer);
    uv_unref((uv_handle_t *)&s->prepare);
    uv_unref((uv_handle_t *)&s->idle);
    uv_poll_start(&s->poll, UV_READABLE, nxl_uv__poll_cb);
    uv_prepare_start(&s->prepare, nxl_uv__prepare_cb);
    nxl_uv__arm(s);
    return NXL_SUCCESS;
}

static inline void nxl_uv__find(uv_handle_t *h, void *arg)
{
    nxl_uv_t **io = (nxl_uv_t **)arg;
    /* ours: a poll handle inside the nxl_uv_t its data points at (no
     * other handle's data is read) */
    if (h->type == UV_POLL && h->data &&
        (char *)h == (char *)h->data + offsetof(nxl_uv_t, poll) &&
        ((nxl_uv_t *)h->data)->agent == (*io)->agent && !uv_is_closing(h))
        *io = (nxl_uv_t *)h->data;
}

/** The attachment of @p a to @p loop, NULL if none. */
static inline nxl_uv_t *nxl_uv_get(nxl_agent_t *a, uv_loop_t *loop)
{
    nxl_uv_t key, *s = &key;
    key.agent = a;
    uv_walk(loop, nxl_uv__find, &s);
    return s == &key ? NULL : s;
}

/**
 * Detaches @p a from @p loop: its handles are closed (freed in their close
 * callbacks, on the loop's next turn) and nxl_agent_attach(a, NULL) lets
 * another loop attach it. Call it before nxl_agent_destroy(a).
 * @return NXL_SUCCESS; NXL_ERR_NOT_FOUND when @p a is not attached to it.
 */
static inline nxl_status_t nxl_uv_detach(nxl_agent_t *a, uv_loop_t *loop)
{
    nxl_uv_t *s = nxl_uv_get(a, loop);
    if (!s)
        return NXL_ERR_NOT_FOUND;
    uv_close((uv_handle_t *)&s->poll, nxl_uv__close_cb);
    uv_close((uv_handle_t *)&s->timer, nxl_uv__close_cb);
    uv_close((uv_handle_t *)&s->prepare, nxl_uv__close_cb);
    uv_close((uv_handle_t *)&s->idle, nxl_uv__close_cb);
    nxl_agent_attach(a, NULL);
    return NXL_SUCCESS;
}

#endif /* NXL_UV_H */
