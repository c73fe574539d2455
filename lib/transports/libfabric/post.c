/* SPDX-License-Identifier: BSD-3-Clause */
/* LIBFABRIC: the engine's calls that start operations: post,
 * notif_send, revoke */
#include "lf.h"

static nxl_status_t check_conn(lf_t *u, lf_conn_t *c, const char *call)
{
    if (u->ep_closed) {
        nxlt_error(u->ctx, "LIBFABRIC: %s: the transport is shutting down", call);
        return NXL_ERR_NOT_ALLOWED;
    }
    nxl_lf_shm_notice_closed(u);
    if (!c->failed && !c->fail_deferred)
        return NXL_SUCCESS;
    nxlt_error(u->ctx, "LIBFABRIC: %s: the connection to agent '%s' failed earlier (%s); reload "
               "its metadata once it is back", call, c->name,
               c->stalled       ? "no completion within the stall timeout"
               : c->why         ? c->why
               : c->peer_closed ? LF_PEER_CLOSED
                                : fi_strerror(c->failed ? c->err : c->fail_deferred));
    return NXL_ERR_REMOTE_DISCONNECT;
}

/* loopback: the data moves now, the report comes from the loop */
static void self_xfer(const nxlt_xfer_t *x)
{
    for (size_t i = 0; i < x->n; i++) {
        const nxlt_iov_t *v = &x->iov[i];
        if (x->op == NXL_WRITE)
            memmove((void *)(uintptr_t)v->raddr, v->laddr, v->len);
        else
            memmove(v->laddr, (const void *)(uintptr_t)v->raddr, v->len);
    }
}

/* A small WRITE with a notification as one message (AMW_TAG): one send
 * instead of writes, their completions, then the send; the target copies
 * the data into place, after checking every element against its
 * registrations, and then delivers the notification. NULL: not this one.
 * Off unless asked for (am_write_max): the op completes when the send
 * does, which is before the target copied the data (nxl-libfabric(7), GUARANTEES). */
static unsigned char *amw_build(lf_t *u, const nxlt_xfer_t *x, size_t *len)
{
    size_t data = 0;
    if (x->n > AMW_ELEMS)
        return NULL;
    for (size_t i = 0; i < x->n; i++)
        if ((data += x->iov[i].len) > u->am_write_max)
            return NULL;
    size_t nl;
    const char *me = nxl_lf_me(u, &nl);
    size_t total = 2 + nl + nxl_amw_body_size(x, data);
    if (total > RXSZ || total > u->max_msg || total > u->amw_msg_max)
        return NULL;
    unsigned char *b = malloc(total), *w = b;
    if (!b)
        return NULL;
    *w++ = AMW_TAG;
    *w++ = (unsigned char)nl;
    memcpy(w, me, nl), w += nl;
    nxl_amw_body_pack(w, x);
    *len = total;
    return b;
}

/* Posts a new op (post, notif_send), or queues it behind those already
 * waiting; a refusal inside the call undoes the op and fails the call. */
static nxl_status_t launch(lf_t *u, lf_op_t *o)
{
    if (!TAILQ_EMPTY(&u->waitq)) {
        nxl_lf_enqueue(o); /* behind those already waiting */
        nxl_lf_kick(u);
        return NXL_SUCCESS;
    }
    nxl_status_t st = nxl_lf_try_post(o, true);
    if (st != NXL_SUCCESS && st != NXL_IN_PROG) {
        nxl_lf_op_unstart(o);
        return st;
    }
    if (st == NXL_IN_PROG)
        nxl_lf_enqueue(o);
    o->iov = NULL; /* the engine's array is ours only during this call */
    if (o->stopped)
        nxl_lf_check_later(o);
    nxl_lf_kick(u);
    return NXL_SUCCESS;
}

nxl_status_t nxl_lf_post(void *state, nxlt_op_t *op, const nxlt_xfer_t *x)
{
    lf_t *u = state;
    lf_conn_t *c = x->conn;
    nxl_status_t st = check_conn(u, c, "post");
    if (st != NXL_SUCCESS)
        return st;
    int striped = nxl_lf_rails_post(u, op, c, x); /* over the rails (rails.c) */
    if (striped) {
        if (striped < 0)
            nxlt_error(u->ctx, "LIBFABRIC: post: out of memory");
        return striped > 0 ? NXL_SUCCESS : NXL_ERR_UNKNOWN;
    }
    size_t amw_len = 0;
    /* only to a peer that tells of its deregistrations (a post into a region
     * it gave up is then refused here, not dropped there) */
    unsigned char *amw = x->op == NXL_WRITE && x->notif && c->am_write && c->revokes &&
                                 !c->self && u->am_write_max
                             ? amw_build(u, x, &amw_len)
                             : NULL;
    lf_op_t *o = nxl_lf_op_new(u, op, c, x->notif, x->notif_len, x->notif != NULL && !amw);
    if (o && amw && !nxl_lf_op_msg_attach(o, amw, amw_len)) {
        nxl_lf_op_unstart(o);
        o = NULL;
    } else if (!o) {
        free(amw);
    }
    if (!o) {
        nxlt_error(u->ctx, "LIBFABRIC: post: out of memory (or the notification buffer could not "
                   "be registered)");
        return NXL_ERR_UNKNOWN;
    }
    o->is_xfer = true;
    o->dir = x->op;
    o->n = amw ? 0 : x->n; /* the message carries the elements */
    if (c->self) {
        self_xfer(x);
        o->next = o->n;
        nxl_lf_check_later(o);
        return NXL_SUCCESS;
    }
    o->iov = x->iov;
    return launch(u, o);
}

nxl_status_t nxl_lf_notif_send(void *state, nxlt_op_t *op, void *conn, const void *msg,
                               size_t len)
{
    lf_t *u = state;
    lf_conn_t *c = conn;
    nxl_status_t st = check_conn(u, c, "notif_send");
    if (st != NXL_SUCCESS)
        return st;
    lf_op_t *o = nxl_lf_op_new(u, op, c, msg, len, true);
    if (!o) {
        nxlt_error(u->ctx, "LIBFABRIC: notif_send: out of memory (or the notification buffer "
                   "could not be registered)");
        return NXL_ERR_UNKNOWN;
    }
    if (c->self) {
        nxl_lf_check_later(o);
        return NXL_SUCCESS;
    }
    return launch(u, o);
}

/* Sends @p b (malloc'd, taken) to @p c as a message of the transport's own,
 * in order with the operations posted to it: behind those waiting for
 * room, ahead of anything posted later. Nothing is reported of it; a peer
 * lost meanwhile just does not get it. */
static void side_send(lf_t *u, lf_conn_t *c, unsigned char *b, size_t len, const char *what)
{
    lf_op_t *o = calloc(1, sizeof(*o));
    if (o) {
        o->c.kind = CTX_OP;
        o->u = u;
        o->conn = c;
        o->side = true;
    }
    if (!o || !nxl_lf_op_msg_attach(o, b, len)) {
        if (!o)
            free(b);
        free(o);
        nxlt_log(u->ctx, NXL_LOG_ERROR, "LIBFABRIC: out of memory (or its buffer could not be "
                 "registered): agent '%s' was not sent %s", c->name, what);
        return;
    }
    nxl_lf_op_start(o);
    if (!TAILQ_EMPTY(&u->waitq)) {
        nxl_lf_enqueue(o);
    } else if (nxl_lf_try_post(o, false) == NXL_IN_PROG) {
        nxl_lf_enqueue(o);
    } else if (o->stopped) {
        /* a peer that is gone (closed in order, say) needs no word */
        nxlt_log(u->ctx, o->err && !nxl_lf_post_disconnect(o->err) ? NXL_LOG_WARN : NXL_LOG_INFO,
                 "LIBFABRIC: agent '%s' was not sent %s: %s", c->name, what,
                 o->err ? fi_strerror(o->err) : "the transport is shutting down");
        nxl_lf_check_later(o);
    }
    nxl_lf_kick(u);
}

/* The application gave the region up. A one-message WRITE (amw_recv)
 * checks its elements here and drops one into the region silently for its
 * initiator, which has seen its send complete: so every peer this agent is
 * connected to is told (wire.h), ahead of anything this agent sends it
 * afterwards (messages keep their order, FI_ORDER_SAS), and its engine
 * refuses lists, transfers and posts into the region from then on. RMA
 * into it fails at the provider's key check meanwhile. */
void nxl_lf_revoke(void *state, nxl_mem_t type, const nxl_desc_t *d, void *md)
{
    lf_t *u = state;
    (void)md;
    if (u->ep_closed || u->quiescing)
        return;
    size_t nl;
    const char *me = nxl_lf_me(u, &nl);
    size_t len = lf_rv_size(nl);
    lf_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    {
        if (c->self || c->failed || c->fail_deferred || c->unloaded)
            continue;
        unsigned char *b = malloc(len);
        if (!b) {
            nxlt_log(u->ctx, NXL_LOG_ERROR, "LIBFABRIC: out of memory: agent '%s' was not told "
                     "of a deregistered region", c->name);
            continue;
        }
        lf_rv_pack(b, me, nl, (unsigned)type, d->dev_id, d->addr, d->len);
        side_send(u, c, b, len, "word of a deregistered region");
    }
}
