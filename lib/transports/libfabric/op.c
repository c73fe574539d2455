/* SPDX-License-Identifier: BSD-3-Clause */
/* LIBFABRIC: operations: posting them to the provider, the wait queue,
 * reporting them to the engine */
#include "lf.h"

static nxl_status_t map_err(const lf_op_t *o)
{
    if (o->conn->failed || o->conn->fail_deferred || nxl_lf_is_disconnect(o->err))
        return NXL_ERR_REMOTE_DISCONNECT;
    if (o->err == FI_ECANCELED)
        return NXL_ERR_CANCELED;
    return NXL_ERR_BACKEND;
}

/* Tells the engine (once); the op lives on until the provider is done with it. */
void nxl_lf_op_report(lf_op_t *o, nxl_status_t st, const char *why)
{
    nxl_netop_report(&o->op, &o->u->net, &o->conn->net, nxlt_now_us, st,
                     st == NXL_SUCCESS ? NULL : why);
}

void nxl_lf_op_free(lf_op_t *o)
{
    lf_t *u = o->u;
    if (o->queued)
        TAILQ_REMOVE(&u->waitq, o, wlink);
    if (o->checkq)
        TAILQ_REMOVE(&u->checkq, o, clink);
    LIST_REMOVE(o, link);
    if (o->side)
        nxl_netop_unstart(&u->net, &o->conn->net);
    if (o->msg_mr)
        fi_close(&o->msg_mr->fid);
    nxl_lf_conn_put(o->conn);
    free(o->segs);
    free(o->rail_iov);
    free(o->msg);
    free(o->errtxt);
    free(o);
}

static void op_fail_sentence(lf_op_t *o, char *why, size_t cap)
{
    lf_conn_t *c = o->conn;
    const char *what = o->is_xfer ? (o->dir == NXL_WRITE ? "WRITE" : "READ") : "notification";
    if (c->stalled)
        snprintf(why, cap, "LIBFABRIC: no operation to agent '%s' completed within %llu ms "
                 "(link down, or the peer died or hung); the connection is given up — reload its "
                 "metadata once it is reachable", c->name,
                 (unsigned long long)(o->u->net.stall_us / 1000));
    else if (c->failed || c->fail_deferred)
        snprintf(why, cap, "LIBFABRIC: %s to agent '%s' failed: the connection failed (%s); "
                 "the peer is gone or unreachable — reload its metadata once it is back", what,
                 c->name,
                 c->failed && c->why ? c->why
                                     : fi_strerror(c->failed ? c->err : c->fail_deferred));
    else if (o->errtxt && !strncmp(o->errtxt, fi_strerror(o->err), strlen(fi_strerror(o->err))))
        snprintf(why, cap, "LIBFABRIC: %s to agent '%s' failed on provider %s: %s", what,
                 c->name, o->u->prov, o->errtxt); /* an error completion's text: err_text */
    else
        snprintf(why, cap, "LIBFABRIC: %s to agent '%s' failed on provider %s: %s (%s)", what,
                 c->name, o->u->prov, fi_strerror(o->err), o->errtxt ? o->errtxt : "no detail");
}

/* Reports the op when it is finished, and frees it when the provider
 * holds nothing of it anymore. */
void nxl_lf_op_check(lf_op_t *o)
{
    lf_t *u = o->u;
    if (o->op) {
        bool idle = o->posted == o->completed && !o->rail_pieces;
        if (nxlt_op_canceled(o->op)) {
            o->stopped = true;
            if (idle)
                nxl_lf_op_report(o, NXL_ERR_CANCELED, "LIBFABRIC: canceled");
        } else if (o->aborted) {
            o->stopped = true;
            if (idle && !o->err && o->next == o->n && (!o->want_notif || o->notif_counted)) {
                /* every provider operation of it completed before the close */
                nxl_lf_op_report(o, NXL_SUCCESS, NULL);
            } else if (idle) {
                char why[400];
                snprintf(why, sizeof(why), "LIBFABRIC: %s to agent '%s' aborted with its "
                         "connection: the deadline of another transfer to it passed, or its "
                         "cancel did not complete, while the peer did not take or answer what was sent (stopped, hung or "
                         "overloaded); its buffers are free, and the next post to the peer "
                         "reconnects", o->is_xfer ? (o->dir == NXL_WRITE ? "WRITE" : "READ")
                                                  : "notification", o->conn->name);
                nxl_lf_op_report(o, NXL_ERR_TIMEOUT, why);
            }
        } else if ((o->err || o->conn->failed) && (idle || o->conn->failed)) {
            char why[512];
            op_fail_sentence(o, why, sizeof(why));
            o->stopped = true;
            nxl_lf_op_report(o, map_err(o), why);
        } else if (idle && o->next == o->n && (!o->want_notif || o->notif_counted)) {
            nxl_lf_op_report(o, NXL_SUCCESS, NULL);
        }
    }
    if (!o->op && o->posted == o->completed && !o->rail_pieces)
        nxl_lf_op_free(o);
    (void)u;
}

static void segs_copy_rest(lf_op_t *o);

/* one element (or piece) as the provider addresses it */
static void seg_at(const lf_op_t *o, size_t i, lf_seg_t *s)
{
    if (o->segs) {
        *s = o->segs[i];
        return;
    }
    const nxlt_iov_t *v = &o->iov[i];
    const lf_md_t *m = v->lmd;
    const lf_rkey_t *k = v->rkey;
    s->laddr = v->laddr;
    s->desc = m ? m->desc : NULL;
    s->raddr = k->virt ? v->raddr : v->raddr - k->base;
    s->key = k->key;
    s->len = v->len;
}

/* A post the provider refused outright with @p err (not -FI_EAGAIN): a
 * peer that is gone fails its connection from the loop. Inside the
 * engine's call with nothing posted yet, the call fails with a sentence
 * naming @p call (and, with @p hint, what to do about a peer gone);
 * otherwise the op stops with @p errtxt and NXL_SUCCESS. */
static nxl_status_t post_failed(lf_op_t *o, int err, bool first, const char *call, bool hint,
                                const char *errtxt)
{
    lf_t *u = o->u;
    lf_conn_t *c = o->conn;
    bool gone = nxl_lf_post_disconnect(err);
    if (gone && !c->fail_deferred) {
        c->fail_deferred = err;
        nxl_lf_kick(u);
    }
    if (first && o->posted == 0) {
        nxlt_error(u->ctx, "LIBFABRIC: %s to agent '%s' failed at once on provider %s: %s%s",
                   call, c->name, u->prov, fi_strerror(err),
                   hint && gone ? " (the peer is gone or unreachable; reload its metadata once "
                                  "it is back)"
                                : "");
        return gone ? NXL_ERR_REMOTE_DISCONNECT : NXL_ERR_BACKEND;
    }
    if (!o->err) {
        o->err = err;
        o->errtxt = strdup(errtxt);
    }
    o->stopped = true;
    return NXL_SUCCESS;
}

/* one more provider operation of @p o in flight */
static void posted_one(lf_op_t *o)
{
    o->posted++;
    o->u->tx_inflight++;
    o->conn->tx_out++;
    o->conn->refused_us = 0;
    nxl_lf_ring(o->conn);
}

/* The notification, once every write completed (its data is there). */
static nxl_status_t post_notif(lf_op_t *o, bool first)
{
    lf_t *u = o->u;
    lf_conn_t *c = o->conn;
    if (!o->want_notif || o->notif_posted || o->stopped)
        return NXL_SUCCESS;
    if (o->completed < o->posted || o->err)
        return NXL_SUCCESS;
    if (u->tx_inflight >= u->tx_cap || u->notif_inflight >= NOTIF_CAP)
        return NXL_IN_PROG;
    if (nxl_lf_shm_lock_stuck(c)) {
        nxl_lf_post_refused(c);
        return NXL_IN_PROG;
    }
    ssize_t r = fi_send(u->fids.ep, o->msg, o->msg_len, o->msg_mr ? fi_mr_desc(o->msg_mr) : NULL,
                        c->addr, o);
    if (r == -FI_EAGAIN) {
        nxl_lf_post_refused(c);
        return NXL_IN_PROG;
    }
    if (r)
        return post_failed(o, (int)-r, first, "fi_send of a notification", false,
                           "fi_send of the notification refused it");
    o->notif_posted = true;
    u->notif_inflight++;
    posted_one(o);
    return NXL_SUCCESS;
}

/* Posts what it can of the op. first: inside the engine's post call, where
 * a refusal of the very first element fails the call instead.
 * Returns NXL_SUCCESS (posted, finished or waiting for completions),
 * NXL_IN_PROG (blocked: no room; the caller queues it), or an error with
 * nothing posted (first only). */
nxl_status_t nxl_lf_try_post(lf_op_t *o, bool first)
{
    lf_t *u = o->u;
    lf_conn_t *c = o->conn;
    if (u->quiescing)
        o->stopped = true;
    if (!o->stopped && !nxl_lf_hold_over(c))
        return NXL_IN_PROG;
    while (o->next < o->n) {
        if (o->stopped)
            return NXL_SUCCESS;
        if (u->tx_inflight >= u->tx_cap)
            return NXL_IN_PROG;
        if (nxl_lf_shm_lock_stuck(c)) { /* shm: a dead peer's lock (shm.c) */
            nxl_lf_post_refused(c);
            return NXL_IN_PROG;
        }
        lf_seg_t s;
        seg_at(o, o->next, &s);
        size_t piece = s.len - o->off;
        if (piece > u->max_msg)
            piece = u->max_msg;
        struct iovec iov = {.iov_base = (char *)s.laddr + o->off, .iov_len = piece};
        struct fi_rma_iov riov = {.addr = s.raddr + o->off, .len = piece, .key = s.key};
        void *desc = s.desc;
        struct fi_msg_rma m = {
            .msg_iov = &iov,
            .desc = &desc,
            .iov_count = 1,
            .addr = c->addr,
            .rma_iov = &riov,
            .rma_iov_count = 1,
            .context = o,
        };
        bool w = o->dir == NXL_WRITE;
        ssize_t r = w ? fi_writemsg(u->fids.ep, &m,
                                    FI_COMPLETION | (u->dc ? FI_DELIVERY_COMPLETE : 0))
                      : fi_readmsg(u->fids.ep, &m, FI_COMPLETION);
        if (r == -FI_EAGAIN) {
            nxl_lf_post_refused(c);
            return NXL_IN_PROG;
        }
        if (r)
            return post_failed(o, (int)-r, first, w ? "fi_writemsg" : "fi_readmsg", true,
                               w ? "fi_writemsg refused it" : "fi_readmsg refused it");
        posted_one(o);
        o->off += piece;
        if (o->off == s.len) {
            o->off = 0;
            o->next++;
        }
    }
    return post_notif(o, first);
}

void nxl_lf_enqueue(lf_op_t *o)
{
    lf_t *u = o->u;
    if (o->queued)
        return;
    segs_copy_rest(o);
    o->queued = true;
    TAILQ_INSERT_TAIL(&u->waitq, o, wlink);
}

/* Once an op has to wait, the engine's element list may go away (the
 * transfer released): keep what is left to post in our own array. */
static void segs_copy_rest(lf_op_t *o)
{
    if (o->segs || !o->iov || o->next >= o->n) {
        o->iov = NULL;
        return;
    }
    size_t left = o->n - o->next;
    lf_seg_t *s = malloc(left * sizeof(*s));
    if (!s) {
        o->err = FI_ENOMEM;
        o->errtxt = strdup("out of memory queueing the rest of the transfer");
        o->stopped = true;
        o->iov = NULL;
        return;
    }
    for (size_t i = 0; i < left; i++)
        seg_at(o, o->next + i, &s[i]);
    o->segs = s;
    o->n = left;
    o->next = 0;
    o->iov = NULL;
}

/* Posts queued ops while there is room, in order. */
void nxl_lf_resume(lf_t *u)
{
    lf_op_t *o;
    while ((o = TAILQ_FIRST(&u->waitq))) {
        if (o->op && nxlt_op_canceled(o->op))
            o->stopped = true;
        if (!o->stopped && !o->conn->failed) {
            if (nxl_lf_try_post(o, false) == NXL_IN_PROG)
                break;
        }
        TAILQ_REMOVE(&u->waitq, o, wlink);
        o->queued = false;
        nxl_lf_op_check(o);
    }
    if (!TAILQ_EMPTY(&u->waitq) && u->tx_inflight == 0 && !nxlt_timer_pending(u->tm_retry)) {
        /* refused with nothing of ours in flight (a connection being set
         * up): look again shortly, not in a spin */
        nxlt_timer_start(u->tm_retry, RETRY_US);
    }
}

/* The op sends @p b (malloc'd, the op's now) as its message once its
 * writes are done; false (and @p b freed) when it cannot be registered. */
bool nxl_lf_op_msg_attach(lf_op_t *o, unsigned char *b, size_t len)
{
    o->msg = b;
    o->msg_len = len;
    o->want_notif = true;
    if (o->u->mr_local && !o->conn->self &&
        nxl_lf_mr_reg(o->u, b, len, FI_SEND, &o->msg_mr, NULL, "a notification buffer") !=
            NXL_SUCCESS) {
        free(b);
        o->msg = NULL;
        return false;
    }
    return true;
}

lf_op_t *nxl_lf_op_new(lf_t *u, nxlt_op_t *op, lf_conn_t *c, const void *msg, size_t len,
                       bool with_notif)
{
    lf_op_t *o = calloc(1, sizeof(*o));
    if (!o)
        return NULL;
    o->c.kind = CTX_OP;
    o->u = u;
    o->op = op;
    o->conn = c;
    if (with_notif) {
        size_t nl;
        const char *me = nxl_lf_me(u, &nl);
        unsigned char *b = malloc(2 + nl + len);
        if (!b) {
            free(o);
            return NULL;
        }
        b[0] = (unsigned char)(nl >> 8);
        b[1] = (unsigned char)nl;
        memcpy(b + 2, me, nl);
        if (len)
            memcpy(b + 2 + nl, msg, len);
        if (!nxl_lf_op_msg_attach(o, b, 2 + nl + len)) {
            free(o);
            return NULL;
        }
    }
    nxl_lf_op_start(o);
    return o;
}

/* counts the op in flight on its connection and agent, and watches it */
void nxl_lf_op_start(lf_op_t *o)
{
    lf_t *u = o->u;
    lf_conn_t *c = o->conn;
    c->refs++;
    nxl_netop_start(&u->net, &c->net, nxlt_now_us);
    LIST_INSERT_HEAD(&u->ops, o, link);
    nxl_lf_watch_start(u);
}

/* undoes op_new for a call that fails */
void nxl_lf_op_unstart(lf_op_t *o)
{
    nxl_netop_unstart(&o->u->net, &o->conn->net);
    o->op = NULL;
    nxl_lf_op_free(o);
}
