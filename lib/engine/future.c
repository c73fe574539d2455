/* SPDX-License-Identifier: BSD-3-Clause */
/* Futures: completion is recorded at once, callbacks are delivered from a
 * reactor event, so that no callback runs inside the call that started the
 * operation and each runs exactly once.
 *
 * A completion becomes visible at delivery, not before: until its
 * callbacks have run a future reads NXL_IN_PROG, its transfer is in flight
 * (a re-post is refused), a cancel turns it into NXL_ERR_CANCELED, and
 * teardown cancels it. So what a status says and what the callbacks see
 * never disagree.
 *
 * References: the caller's (when it asked for the future), one while the
 * operation is pending, one while callbacks are queued for delivery, one
 * held by a nxl_future_all() parent per child. */
#include "internal.h"

#include <string.h>

static void future_unref(nxl_future_t *f);

/* The pool's spares of one kind (futures, ops): an object of size bytes,
 * zeroed, from s (NULL: no pool), else from calloc() */
static void *spare_take(nxli_spares_t *s, size_t size)
{
    nxli_spare_t *x = s ? s->first : NULL;
    if (!x)
        return calloc(1, size);
    s->first = x->next;
    s->n--;
    nxl_zero(x, size); /* not inline `rep stosq` (../common/zero.h) */
    return x;
}

/* x kept among p's spares (true), or for the caller to free (false: the
 * agent is gone, or s is full) */
static bool spare_put(nxli_pool_t *p, nxli_spares_t *s, void *x)
{
    if (!p->open || s->n >= NXLI_POOL_MAX)
        return false;
    nxli_spare_t *e = x;
    e->next = s->first;
    s->first = e;
    s->n++;
    return true;
}

static void spares_free(nxli_spares_t *s)
{
    nxli_spare_t *x;
    while ((x = s->first)) {
        s->first = x->next;
        free(x);
    }
    s->n = 0;
}

static void deadline_remove(nxl_future_t *f);

static void future_free(nxl_future_t *f)
{
    deadline_remove(f);
    free(f->timeout_why);
    free(f->dl_what);
    if (f->dl_peer != f->dl_peer_in)
        free(f->dl_peer);
    if (f->mt) {
        nxli_thread_settled(f); /* a waiter of a future released meanwhile */
        LIST_REMOVE(f, alink);
    }
    nxli_cb_t *c = f->cbs;
    while (c) {
        nxli_cb_t *n = c->next;
        if (c != &f->cb0)
            free(c);
        c = n;
    }
    for (size_t i = 0; i < f->nchildren; i++)
        future_unref(f->children[i]);
    free(f->children);
    free(f->err);
    free(f->peer);
    nxli_pool_t *p = f->pool;
    if (!p) {
        free(f);
        return;
    }
    p->live--;
    if (spare_put(p, &p->futures, f))
        return;
    free(f);
    if (!p->open && !p->live)
        free(p); /* the last future that outlived its agent */
}

static void future_unref(nxl_future_t *f)
{
    if (--f->refs == 0)
        future_free(f);
}

static nxl_status_t add_cb(nxl_future_t *f, nxl_done_cb cb, void *arg)
{
    nxli_cb_t *c = &f->cb0;
    if (f->cb0_used && !(c = malloc(sizeof(*c))))
        return NXL_ERR_UNKNOWN;
    f->cb0_used = true;
    c->cb = cb;
    c->arg = arg;
    c->next = NULL;
    *f->cbs_tail = c;
    f->cbs_tail = &c->next;
    return NXL_SUCCESS;
}

/* A future known to nothing yet: a foreign thread makes it for the post it
 * queues (mt/rpc.c, under the table lock), and the reactor attaches it
 * when it runs the post. Its callback and its threaded flag are set. */
nxl_future_t *nxli_future_alloc(nxl_agent_t *a, nxli_fkind_t kind, nxl_done_cb cb, void *arg)
{
    nxli_pool_t *p = a->pool;
    nxl_future_t *f = spare_take(p ? &p->futures : NULL, sizeof(*f));
    if (!f)
        return NULL;
    if (p) {
        f->pool = p;
        p->live++;
    }
    f->agent = a;
    f->kind = kind;
    f->status = NXL_IN_PROG;
    f->refs = 2; /* the caller's and the pending one */
    f->cbs_tail = &f->cbs;
    if (cb)
        add_cb(f, cb, arg); /* the entry in place: cannot fail */
    f->mt = a->thr != NULL; /* threaded: calls on it from other threads are marshalled */
    return f;
}

/* Reactor thread: the future joins the agent's pending ones (and, threaded,
 * the futures let go at teardown). */
void nxli_future_attach(nxl_future_t *f)
{
    nxl_agent_t *a = f->agent;
    f->attached = true;
    if (f->mt)
        LIST_INSERT_HEAD(&a->tfutures, f, alink);
    TAILQ_INSERT_TAIL(&a->pending, f, plink);
}

/* A future from nxli_future_alloc() never attached: gone, nobody saw it. */
void nxli_future_unalloc(nxl_future_t *f)
{
    f->mt = false;
    f->refs = 1;
    future_unref(f);
}

nxl_future_t *nxli_future_new(nxl_agent_t *a, nxli_fkind_t kind, nxl_done_cb cb, void *arg)
{
    nxl_future_t *f = nxli_future_alloc(a, kind, cb, arg);
    if (f)
        nxli_future_attach(f);
    return f;
}

void nxli_future_give(nxl_future_t *f, nxl_future_t **out)
{
    if (out)
        *out = f;
    else
        future_unref(f);
}

void nxli_future_discard(nxl_future_t *f)
{
    TAILQ_REMOVE(&f->agent->pending, f, plink);
    f->refs = 1;
    future_unref(f);
}

/* f (queued, its reference taken) onto the reactor's delivery queue */
static void deliver_push(nxl_agent_t *a, nxl_future_t *f)
{
    bool was_empty = TAILQ_EMPTY(&a->deliver);
    TAILQ_INSERT_TAIL(&a->deliver, f, dlink);
    if (!was_empty || !a->ev_deliver)
        return;
    if (a->draining) {
        a->drain_queued = true; /* deliver_cb delivers it after the notifications */
    } else if (a->delivering) {
        /* completed by a callback of this turn: libevent would run an event
         * activated now in this same turn, so a zero timer takes it to the
         * next one, after the loop polled its fds */
        nxlt_timer_start(a->ev_deliver_next, 0);
    } else {
        nxli_deliver_wake(a);
    }
}

static void enqueue(nxl_future_t *f)
{
    nxl_agent_t *a = f->agent;
    if (f->queued || (f->settled && !f->cbs))
        return;
    f->queued = true;
    f->refs++;
    if (a->acting) { /* a foreign thread's call: sorted out at its end */
        TAILQ_INSERT_TAIL(&a->acted, f, dlink);
        return;
    }
    deliver_push(a, f);
}

void nxli_future_complete(nxl_future_t *f, nxl_status_t st, const char *why)
{
    if (f->done)
        return;
    nxl_agent_t *a = f->agent;
    f->done = true;
    f->status = st;
    deadline_remove(f);
    if (f->st_backend)
        f->st_done_us = nxli_now_us();
    if (st != NXL_SUCCESS && why) {
        f->err = nxli_strdup(why);
        snprintf(a->err, sizeof(a->err), "%s", why);
    }
    TAILQ_REMOVE(&a->pending, f, plink);
    enqueue(f);
    future_unref(f); /* the pending reference */
}

/* A future completed but not delivered yet is still in progress to the
 * application: a cancel or a teardown turns it into CANCELED. */
static void recancel(nxl_future_t *f)
{
    f->status = NXL_ERR_CANCELED;
    free(f->err);
    f->err = nxli_strdup("operation canceled before it completed");
    snprintf(f->agent->err, sizeof(f->agent->err), "%s", f->err ? f->err : "canceled");
}

/* The completion becomes public: the transfer is no longer in flight (so
 * that a callback may post it again) and the status reads final. */
static void settle(nxl_future_t *f)
{
    f->settled = true;
    nxli_stats_settled(f);
    if (f->kind == NXLI_F_XFER && f->owner) {
        nxl_xfer_t *x = f->owner;
        x->last = f->status;
        /* a foreign thread's release reads it (xfer.c): no table lock for
         * the reactor on every delivery */
        __atomic_store_n(&x->active, NULL, __ATOMIC_RELEASE);
        f->owner = NULL;
        /* the transport found the peer unreachable: it is DOWN (its other
         * transfers in flight fail too), unless it was already replaced
         * or lost */
        if (f->status == NXL_ERR_REMOTE_DISCONNECT && !x->remote->invalid && !x->remote->self)
            nxli_peer_unreachable(f->agent, x->remote,
                                  f->err ? f->err : "a transfer to it failed: remote "
                                                    "disconnected");
    }
}

static void deliver_queue(nxl_agent_t *a, struct nxli_fq *q)
{
    nxl_future_t *f;
    while ((f = TAILQ_FIRST(q))) {
        TAILQ_REMOVE(q, f, dlink);
        if (!f->settled)
            settle(f);
        /* callbacks added while these run are delivered in this loop too */
        while (f->cbs) {
            nxli_cb_t *c = f->cbs;
            f->cbs = c->next;
            if (!f->cbs)
                f->cbs_tail = &f->cbs;
            a->cb_depth++;
            c->cb(f, f->status, c->arg);
            a->cb_depth--;
            if (c == &f->cb0)
                f->cb0_used = false;
            else
                free(c);
        }
        f->queued = false;
        if (f->mt) /* threads in nxl_future_wait() (threaded mode) */
            nxli_thread_settled_later(f);
        future_unref(f);
    }
    if (a->thr)
        nxli_thread_wake(a);
}

bool nxli_deliver_acted(nxl_agent_t *a)
{
    bool left = false;
    nxl_future_t *f;
    while ((f = TAILQ_FIRST(&a->acted))) {
        TAILQ_REMOVE(&a->acted, f, dlink);
        if (f->cbs) { /* callbacks run on the reactor thread: its next turn */
            deliver_push(a, f);
            left = true;
            continue;
        }
        /* nothing to run: settled now, as the reactor's delivery would */
        if (!f->settled)
            settle(f);
        f->queued = false;
        if (f->mt)
            nxli_thread_settled(f);
        future_unref(f);
    }
    return left;
}

/* Until nothing is left, futures completed by callbacks included (teardown). */
void nxli_deliver(nxl_agent_t *a)
{
    deliver_queue(a, &a->deliver);
}

/* One reactor turn: the futures queued before it. Those that callbacks
 * complete meanwhile (a callback re-posting a transfer that a transport
 * finishes at once, UCX over CMA) go to the next turn, so that a chain of
 * re-posts cannot keep the reactor from its other events (in threaded
 * mode: the calls of other threads). */
void nxli_deliver_turn(nxl_agent_t *a)
{
    struct nxli_fq batch;
    TAILQ_INIT(&batch);
    TAILQ_CONCAT(&batch, &a->deliver, dlink);
    bool outer = a->delivering;
    a->delivering = true;
    deliver_queue(a, &batch);
    a->delivering = outer;
}

static void cancel_impl(nxl_future_t *f, bool now);

void nxli_futures_cancel_all(nxl_agent_t *a)
{
    nxl_future_t *f;
    /* completed, not delivered: still in flight to the application */
    TAILQ_FOREACH(f, &a->deliver, dlink)
    if (!f->settled)
        recancel(f);
    while ((f = TAILQ_FIRST(&a->pending)))
        cancel_impl(f, true);
    nxli_deliver(a);
}

nxlt_op_t *nxli_op_new(nxl_agent_t *a, nxl_backend_t *b, nxl_future_t *f)
{
    nxli_pool_t *p = a->pool;
    nxlt_op_t *op = spare_take(p ? &p->ops : NULL, sizeof(*op));
    if (!op)
        return NULL;
    op->agent = a;
    op->backend = b;
    op->future = f;
    f->op = op;
    LIST_INSERT_HEAD(&a->ops, op, link);
    return op;
}

nxlt_op_t *nxli_op_new_future(nxl_agent_t *a, nxl_backend_t *b, nxli_fkind_t kind, nxl_done_cb cb,
                              void *arg, nxl_future_t **fp)
{
    nxl_future_t *f = nxli_future_new(a, kind, cb, arg);
    nxlt_op_t *op = f ? nxli_op_new(a, b, f) : NULL;
    if (!op && f)
        nxli_future_discard(f);
    *fp = op ? f : NULL;
    return op;
}

void nxli_op_free(nxlt_op_t *op)
{
    nxli_relay_free(op);
    if (op->future)
        op->future->op = NULL;
    LIST_REMOVE(op, link);
    free(op->early_why);
    nxli_pool_t *p = op->agent->pool;
    if (p && spare_put(p, &p->ops, op))
        return;
    free(op);
}

void nxli_pool_close(nxl_agent_t *a)
{
    nxli_pool_t *p = a->pool;
    if (!p)
        return;
    a->pool = NULL;
    p->open = false;
    spares_free(&p->futures);
    spares_free(&p->ops);
    if (!p->live)
        free(p);
}

void nxlt_op_done(nxlt_op_t *op, nxl_status_t st, const char *why)
{
    if (op->in_call) {
        /* inside the call that starts it (UCX fails an endpoint inside
         * ucp_put_nbx, say): held until the call returns */
        if (!op->reported) {
            op->reported = true;
            op->early_st = st;
            op->early_why = why ? nxli_strdup(why) : NULL;
        }
        return;
    }
    if (op->relay && nxli_relay_done(op, st, why))
        return; /* its notification goes out next (relay.c) */
    nxl_future_t *f = op->future;
    if (f) {
        f->op = NULL;
        op->future = NULL;
        if (f->cancel_wait)
            nxli_future_complete_canceled(f);
        else
            nxli_future_complete(f, st, why);
    }
    nxli_op_free(op);
}

nxl_status_t nxli_op_call_end(nxlt_op_t *op, nxl_status_t st)
{
    op->in_call = false;
    if (st != NXL_SUCCESS) {
        nxl_future_t *f = op->future;
        if (op->reported)
            nxli_log(op->agent, NXL_LOG_DEBUG, "%s reported an operation done inside a call "
                     "that then failed; the report is dropped (nothing started)",
                     op->backend->ops->name);
        nxli_op_free(op);
        if (f)
            nxli_future_discard(f);
        return st;
    }
    if (op->reported) {
        op->reported = false;
        nxlt_op_done(op, op->early_st, op->early_why);
    }
    return NXL_SUCCESS;
}

int nxlt_op_canceled(const nxlt_op_t *op)
{
    return op->future && op->future->cancel_wait;
}

unsigned nxlt_op_deadline_ms(const nxlt_op_t *op)
{
    return op->deadline_ms;
}

void nxlt_on_deadline(nxlt_ctx_t *ctx, nxlt_deadline_cb cb)
{
    ctx->backend->on_deadline = cb;
}

void **nxlt_op_priv(nxlt_op_t *op)
{
    return &op->priv;
}

/* ---- public */

/* The first step of a public call on @p f that answers a status: from a
 * thread other than its agent's the call is that thread's (@p rpc, whose
 * answer it returns); a NULL @p f, or @p bad, is NXL_ERR_INVALID_PARAM */
#define FUTURE_CALL_BEGIN(f, bad, rpc)                                                             \
    do {                                                                                           \
        if ((f) && nxli_future_foreign(f))                                                         \
            return rpc;                                                                            \
        if (!(f) || (bad))                                                                         \
            return NXL_ERR_INVALID_PARAM;                                                          \
    } while (0)

nxl_status_t nxl_future_then(nxl_future_t *f, nxl_done_cb cb, void *arg)
{
    FUTURE_CALL_BEGIN(f, !cb, nxli_rpc_future_then(f, cb, arg));
    if (add_cb(f, cb, arg) != NXL_SUCCESS) {
        nxli_err(f->agent, "nxl_future_then: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    if (f->settled && !f->queued)
        enqueue(f);
    return NXL_SUCCESS;
}

nxl_status_t nxl_future_status(const nxl_future_t *f)
{
    if (nxli_future_foreign(f))
        return nxli_rpc_future_status(f);
    return f->settled ? f->status : NXL_IN_PROG;
}

const char *nxl_future_error(const nxl_future_t *f)
{
    if (nxli_future_foreign(f))
        return nxli_rpc_future_error(f);
    return f->settled && f->err ? f->err : "";
}

const char *nxl_future_peer(const nxl_future_t *f)
{
    if (nxli_future_foreign(f))
        return nxli_rpc_future_peer(f);
    return f->settled && f->status == NXL_SUCCESS ? f->peer : NULL;
}

void nxl_future_release(nxl_future_t *f)
{
    if (f && nxli_future_foreign(f)) {
        nxli_rpc_future_release(f);
        return;
    }
    if (f)
        future_unref(f);
}

void nxli_future_abort(nxl_future_t *f, nxl_status_t st, const char *why)
{
    /* not attached: a post a foreign thread queued, which checks the peer
     * again when the reactor runs it */
    if (!f || f->done || !f->attached)
        return;
    f->refs++;
    if (f->op) {
        f->op->future = NULL; /* the transport finishes it on its own */
        f->op = NULL;
    }
    if (f->on_cancel)
        f->on_cancel(f);
    nxli_future_complete(f, st, why);
    future_unref(f);
}

/* A cancel the transport waits for: if the op is still not reported done
 * NXLI_CANCEL_GRACE_MS from now (a peer that does not take or answer what
 * was sent holds it, or the rest of a large transfer still moves), the
 * transport's abort hook is called as at a deadline (deadline_cb). The
 * future waits on the deadlines list meanwhile, in place of its deadline:
 * that one no longer matters, its status is CANCELED. */
static void cancel_grace_start(nxl_future_t *f)
{
    nxl_agent_t *a = f->agent;
    deadline_remove(f);
    if (nxli_deadline_timer(a) != NXL_SUCCESS) {
        nxl_backend_t *b = f->op->backend;
        b->on_deadline(b->state, f->op); /* no timer: the abort at once */
        return;
    }
    f->cancel_grace = true;
    nxli_deadline_add(f, nxli_now_us() + NXLI_CANCEL_GRACE_MS * 1000u);
}

/* now: complete at once, even where the transport still holds the op's
 * buffers (teardown, after the transports were quiesced) */
static void cancel_impl(nxl_future_t *f, bool now)
{
    /* not attached: a post another thread queued; its cancel, queued
     * behind it, runs once it is attached */
    if (!f || f->settled || !f->attached)
        return;
    if (f->done) {
        recancel(f);
        return;
    }
    if (!now && f->cancel_hook) {
        f->cancel_wait = true;
        f->cancel_hook(f);
        return;
    }
    if (!now && f->op && (f->op->backend->ops->caps & NXLT_CAP_CANCEL_WAITS)) {
        bool first = !f->cancel_wait; /* (a deadline's cancel already asked for the abort) */
        f->cancel_wait = true; /* nxlt_op_done completes it, its buffers free */
        if (first && f->op->backend->on_deadline)
            cancel_grace_start(f);
        return;
    }
    nxli_future_abort(f, NXL_ERR_CANCELED, "operation canceled before it completed");
}

void nxl_future_cancel(nxl_future_t *f)
{
    if (f && nxli_future_foreign(f)) {
        nxli_rpc_future_cancel(f);
        return;
    }
    cancel_impl(f, false);
}

nxl_status_t nxl_future_wait(nxl_future_t *f, int timeout_ms)
{
    FUTURE_CALL_BEGIN(f, false, nxli_thread_wait(f, timeout_ms));
    nxl_agent_t *a = f->agent;
    if (a->cb_depth > 0 || a->loop_depth > 0) {
        nxli_err(a, "nxl_future_wait: called from inside a callback; the reactor cannot be "
                    "re-entered — chain with nxl_future_then() instead");
        return NXL_ERR_NOT_ALLOWED;
    }
    f->refs++;
    uint64_t deadline = timeout_ms < 0 ? 0 : nxli_now_us() + (uint64_t)timeout_ms * 1000u;
    nxl_status_t st = NXL_SUCCESS;
    while (!(f->settled && !f->queued)) {
        int left = -1;
        if (timeout_ms >= 0) {
            uint64_t now = nxli_now_us();
            if (now >= deadline)
                break;
            left = (int)((deadline - now + 999) / 1000);
        }
        st = nxl_agent_run_once(a, left);
        if (st != NXL_SUCCESS)
            break;
    }
    nxl_status_t res = st != NXL_SUCCESS ? st : f->settled && !f->queued ? f->status : NXL_IN_PROG;
    future_unref(f);
    return res;
}

/* ---- deadlines
 *
 * The agent's transfers with a deadline, soonest first, and one timer for
 * them all, armed for the first while the list is not empty (an agent
 * whose transfers have none arms nothing). Deadlines are mostly posted in
 * the order they fall due: the insertion looks from the end. A future
 * leaves the list when it completes. When one falls due it is canceled as
 * nxl_future_cancel() does, its status to be NXL_ERR_TIMEOUT: at once on a
 * transport whose ops finish on their own, when the transport reports the
 * op ended on one that waits for a cancel (NXLT_CAP_CANCEL_WAITS). A
 * future canceled on such a transport waits on the list too, for its
 * grace (cancel_grace_start): the same hook then, its status unchanged. */

void nxli_future_complete_canceled(nxl_future_t *f)
{
    if (f->timeout_why)
        nxli_future_complete(f, NXL_ERR_TIMEOUT, f->timeout_why);
    else
        nxli_future_complete(f, NXL_ERR_CANCELED, "operation canceled before it completed");
}

static void deadline_arm(nxl_agent_t *a)
{
    nxl_future_t *first = TAILQ_FIRST(&a->deadlines);
    if (!first) {
        nxlt_timer_stop(a->ev_deadline);
        return;
    }
    uint64_t now = nxli_now_us();
    nxlt_timer_start(a->ev_deadline, first->deadline_us > now ? first->deadline_us - now : 0);
}

static void deadline_remove(nxl_future_t *f)
{
    if (!f->in_deadlines)
        return;
    nxl_agent_t *a = f->agent;
    bool first = TAILQ_FIRST(&a->deadlines) == f;
    TAILQ_REMOVE(&a->deadlines, f, tlink);
    f->in_deadlines = false;
    if (first && a->ev_deadline)
        deadline_arm(a);
}

/* what the transfer waited for, in f->timeout_why */
static void deadline_sentence(nxl_future_t *f, uint64_t now)
{
    const nxl_xfer_t *x = f->owner;
    char buf[NXLI_ERR_MAX];
    if (f->kind == NXLI_F_NOTIF || f->kind == NXLI_F_MD) {
        unsigned set_ms = f->dl_set_us && f->deadline_us > f->dl_set_us
                              ? (unsigned)((f->deadline_us - f->dl_set_us + 500) / 1000)
                              : 0;
        char what[NXLI_ERR_MAX / 2];
        const char *w = f->dl_what ? f->dl_what
                        : f->kind == NXLI_F_NOTIF ? "a notification"
                                                  : "a metadata request";
        if (f->kind == NXLI_F_NOTIF && f->dl_peer && f->dl_backend) {
            snprintf(what, sizeof(what), "a notification (nxl_notif_send) of %zu bytes to agent "
                     "'%s' over %s", f->dl_len, f->dl_peer, f->dl_backend->ops->name);
            w = what;
        }
        snprintf(buf, sizeof(buf),
                 "nxl_future_set_deadline: deadline of %u ms passed: %s was still pending; "
                 "canceled%s",
                 set_ms, w,
                 f->op && (f->op->backend->ops->caps & NXLT_CAP_CANCEL_WAITS)
                     ? ", completed once the transport let go of its buffers"
                     : "");
        free(f->timeout_why);
        f->timeout_why = nxli_strdup(buf);
        return;
    }
    unsigned ms = f->st_post_us && f->deadline_us > f->st_post_us
                      ? (unsigned)((f->deadline_us - f->st_post_us + 500) / 1000)
                      : 0;
    snprintf(buf, sizeof(buf),
             "nxl_xfer_post: deadline of %u ms passed (%.1f ms after the post): a %s of %llu "
             "bytes%s%s%s over %s was still in flight; canceled%s",
             ms, f->st_post_us ? (now - f->st_post_us) / 1000.0 : 0.0,
             f->st_op == NXL_READ ? "READ" : "WRITE", (unsigned long long)f->st_bytes,
             x ? (f->st_op == NXL_READ ? " from agent '" : " to agent '") : "",
             x ? x->remote->name : "", x ? "'" : "",
             f->st_backend ? f->st_backend->ops->name : "its transport",
             f->op && (f->op->backend->ops->caps & NXLT_CAP_CANCEL_WAITS)
                 ? ", completed once the transport let go of its buffers"
                 : "");
    free(f->timeout_why);
    f->timeout_why = nxli_strdup(buf);
}

static void deadline_cb(nxlt_timer_t *t, void *arg)
{
    NXLI_UNUSED(t);
    nxl_agent_t *a = arg;
    uint64_t now = nxli_now_us();
    nxl_future_t *f;
    while ((f = TAILQ_FIRST(&a->deadlines)) && f->deadline_us <= now) {
        TAILQ_REMOVE(&a->deadlines, f, tlink);
        f->in_deadlines = false;
        if (f->done || f->settled)
            continue; /* completed: its status stays */
        if (f->cancel_wait) {
            /* canceled, and its transport's cancel not through within the
             * grace: the transport aborts what holds the op */
            if (f->cancel_grace && f->op && f->op->backend->on_deadline) {
                nxl_backend_t *b = f->op->backend;
                nxli_log(a, NXL_LOG_DEBUG, "nxl_future_cancel: a %s over %s not through %d ms "
                         "after its cancel: the transport aborts what holds it",
                         f->kind != NXLI_F_XFER ? "notification"
                         : f->st_op == NXL_READ ? "READ"
                                                : "WRITE",
                         b->ops->name, NXLI_CANCEL_GRACE_MS);
                b->on_deadline(b->state, f->op);
            }
            f->cancel_grace = false;
            continue; /* its status stays: CANCELED, or the deadline's TIMEOUT */
        }
        deadline_sentence(f, now);
        f->refs++;
        if (f->op && (f->op->backend->ops->caps & NXLT_CAP_CANCEL_WAITS)) {
            f->cancel_wait = true; /* nxlt_op_done completes it, its buffers free */
            nxl_backend_t *b = f->op->backend;
            if (b->on_deadline)
                b->on_deadline(b->state, f->op); /* it may abort what holds the op */
        } else {
            char *why = nxli_strdup(f->timeout_why);
            nxli_future_abort(f, NXL_ERR_TIMEOUT, why ? why : "deadline passed");
            free(why);
        }
        nxli_log(a, NXL_LOG_DEBUG, "%s", f->timeout_why ? f->timeout_why : "deadline passed");
        future_unref(f);
    }
    deadline_arm(a);
}

nxl_status_t nxli_deadline_timer(nxl_agent_t *a)
{
    if (!a->ev_deadline && !(a->ev_deadline = nxli_timer_new(a, deadline_cb, a))) {
        nxli_err(a, "nxl_xfer_post: the agent's loop could not make the deadline timer");
        return NXL_ERR_BACKEND;
    }
    return NXL_SUCCESS;
}

void nxli_deadline_add(nxl_future_t *f, uint64_t due_us)
{
    nxl_agent_t *a = f->agent;
    f->deadline_us = due_us;
    nxl_future_t *p = TAILQ_LAST(&a->deadlines, nxli_fq);
    while (p && p->deadline_us > due_us)
        p = TAILQ_PREV(p, nxli_fq, tlink);
    if (p)
        TAILQ_INSERT_AFTER(&a->deadlines, p, f, tlink);
    else
        TAILQ_INSERT_HEAD(&a->deadlines, f, tlink);
    f->in_deadlines = true;
    if (TAILQ_FIRST(&a->deadlines) == f)
        deadline_arm(a);
}

nxl_status_t nxl_future_set_deadline(nxl_future_t *f, unsigned ms)
{
    FUTURE_CALL_BEGIN(f, false, nxli_rpc_future_set_deadline(f, ms));
    nxl_agent_t *a = f->agent;
    if (f->done || f->settled)
        return NXL_SUCCESS; /* complete: nothing to bound */
    bool ok = f->attached && !f->cancel_hook &&
              (f->kind == NXLI_F_XFER || f->kind == NXLI_F_NOTIF ||
               (f->kind == NXLI_F_MD && f->on_cancel));
    if (!ok) {
        nxli_err(a, "nxl_future_set_deadline: a deadline is taken by the future of a transfer "
                    "post, a notification send or a metadata fetch or send (not by %s)",
                 f->cancel_hook             ? "a KV transfer's"
                 : f->kind == NXLI_F_ALL    ? "nxl_future_all()'s"
                 : f->kind == NXLI_F_EVENT  ? "an event's"
                 : f->kind == NXLI_F_MD     ? "an etcd publish's or unpublish's"
                                            : "a post not started yet");
        return NXL_ERR_NOT_SUPPORTED;
    }
    if (f->cancel_wait)
        return NXL_SUCCESS; /* canceled already (or its deadline passed): it ends on its own */
    if (!ms) {
        deadline_remove(f);
        f->dl_set_us = 0;
        return NXL_SUCCESS;
    }
    nxl_status_t st = nxli_deadline_timer(a);
    if (st != NXL_SUCCESS)
        return st;
    deadline_remove(f);
    f->dl_set_us = nxli_now_us();
    nxli_deadline_add(f, f->dl_set_us + (uint64_t)ms * 1000u);
    return NXL_SUCCESS;
}

/* ---- nxl_future_all */

static void all_child_done(nxl_future_t *child, nxl_status_t st, void *arg)
{
    nxl_future_t *p = arg;
    if (!p->done && --p->nleft == 0) {
        nxl_status_t fin = NXL_SUCCESS;
        const char *why = NULL;
        for (size_t i = 0; i < p->nchildren; i++)
            if (p->children[i]->status != NXL_SUCCESS) {
                fin = p->children[i]->status;
                why = p->children[i]->err;
                break;
            }
        nxli_future_complete(p, fin, why ? why : "a future of the group failed");
    }
    future_unref(p); /* the child's hold on the group */
}

nxl_status_t nxl_future_all(nxl_agent_t *a, nxl_future_t *const *fs, size_t n, nxl_done_cb cb,
                            void *arg, nxl_future_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_future_all(a, fs, n, cb, arg, out);
    if (!a || (n && !fs)) {
        if (a)
            nxli_err(a, "nxl_future_all: NULL future array");
        return NXL_ERR_INVALID_PARAM;
    }
    for (size_t i = 0; i < n; i++)
        if (!fs[i] || fs[i]->agent != a) {
            nxli_err(a, "nxl_future_all: future %zu is NULL or belongs to another agent", i);
            return NXL_ERR_INVALID_PARAM;
        }
    nxl_future_t *p = nxli_future_new(a, NXLI_F_ALL, cb, arg);
    if (!p || (n && !(p->children = calloc(n, sizeof(*p->children))))) {
        if (p)
            nxli_future_discard(p);
        nxli_err(a, "nxl_future_all: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    p->nchildren = n;
    p->nleft = n;
    for (size_t i = 0; i < n; i++) {
        p->children[i] = fs[i];
        fs[i]->refs++;  /* released when the group is freed */
        p->refs++;      /* released by the child's callback */
        nxl_future_then(fs[i], all_child_done, p);
    }
    if (n == 0)
        nxli_future_complete(p, NXL_SUCCESS, NULL);
    nxli_future_give(p, out);
    return NXL_SUCCESS;
}
