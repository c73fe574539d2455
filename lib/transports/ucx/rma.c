/* SPDX-License-Identifier: BSD-3-Clause */
#include "config.h"
#include "ucx.h"

/* the status of a post another path took (1) or failed (-1) */
#define TAKEN(r) ((r) > 0 ? NXL_SUCCESS : NXL_ERR_UNKNOWN)

/* Ops done are kept for the next ones, with their buffers up to these sizes */
#define OP_SPARES 256
#define OP_SPARE_BUF (16u << 10)
#define OP_SPARE_IOV 64

/* ---------------------------------------------------------- operations */

static nxl_status_t map_status(ucx_conn_t *c, ucs_status_t st)
{
    if (st == UCS_OK)
        return NXL_SUCCESS;
    if (c->failed || c->unloaded || st == UCS_ERR_CONNECTION_RESET ||
        st == UCS_ERR_ENDPOINT_TIMEOUT || st == UCS_ERR_UNREACHABLE || st == UCS_ERR_CANCELED ||
        st == UCS_ERR_NOT_CONNECTED)
        return NXL_ERR_REMOTE_DISCONNECT;
    return NXL_ERR_BACKEND;
}

/* Tells the engine (once); the op itself lives on until UCX is done with it. */
void nxl_ucx_op_report(ucx_op_t *o, ucs_status_t st)
{
    if (!o->op || (o->aborted && o->conn->abort_req))
        return; /* aborted: reported once the endpoint's close completed (conn.c) */
    if (st != UCS_OK && o->st == UCS_OK)
        o->st = st;
    char why[512];
    nxl_status_t ns = map_status(o->conn, o->st);
    if (o->aborted) {
        /* with its connection, at a deadline (or the peer's: renewing,
         * conn.c): not a disconnect (the peer is not DOWN; the next post
         * reconnects) */
        nxl_netop_report(&o->op, &o->u->net, &o->conn->net, nxl_ucx_coarse_us,
                         o->conn->renewing ? NXL_ERR_BACKEND : NXL_ERR_TIMEOUT,
                         o->why ? o->why : "UCX: aborted at its deadline");
        return;
    }
    if (ns != NXL_SUCCESS)
        snprintf(why, sizeof(why), "UCX: transfer to agent '%s' failed: %s%s", o->conn->name,
                 ucs_status_string(o->conn->failed ? o->conn->why : o->st),
                 ns == NXL_ERR_REMOTE_DISCONNECT
                     ? " (the peer is gone or unreachable; reload its metadata once it is back)"
                     : "");
    if (ns != NXL_SUCCESS && o->conn->stalled)
        snprintf(why, sizeof(why), "UCX: no transfer to agent '%s' completed within %llu ms "
                 "(link down, or the peer hung); the connection is given up — reload its "
                 "metadata once it is reachable", o->conn->name,
                 (unsigned long long)(o->u->net.stall_us / 1000));
    else if (ns != NXL_SUCCESS && o->why)
        snprintf(why, sizeof(why), "%s", o->why);
    nxl_netop_report(&o->op, &o->u->net, &o->conn->net, nxl_ucx_coarse_us, ns,
                     ns == NXL_SUCCESS ? NULL : why);
}

void nxl_ucx_op_free(ucx_op_t *o)
{
    ucx_t *u = o->u;
    if (o->queued)
        TAILQ_REMOVE(&u->cma_q, o, cq);
    if (o->amw && !o->amw_acked)
        LIST_REMOVE(o, ack_link);
    free(o->why);
    LIST_REMOVE(o, link);
    nxl_ucx_conn_put(o->conn);
    if (u->nspare_ops >= OP_SPARES) {
        free(o->iov);
        free(o->buf);
        free(o);
        return;
    }
    if (o->buf_cap > OP_SPARE_BUF) {
        free(o->buf);
        o->buf = NULL;
        o->buf_cap = 0;
    }
    if (o->iov_cap > OP_SPARE_IOV) {
        free(o->iov);
        o->iov = NULL;
        o->iov_cap = 0;
    }
    o->next_free = u->spare_ops;
    u->spare_ops = o;
    u->nspare_ops++;
}

/* An op that never went out (nxl_ucx_op_new, then a failure at once): not
 * reported, its counts taken back, freed */
void nxl_ucx_op_drop(ucx_op_t *o)
{
    o->op = NULL;
    nxl_netop_unstart(&o->u->net, &o->conn->net);
    nxl_ucx_op_free(o);
}

/* a spare op, cleared but for its buffers, or a new one */
static ucx_op_t *op_get(ucx_t *u)
{
    ucx_op_t *o = u->spare_ops;
    if (!o)
        return calloc(1, sizeof(*o));
    u->spare_ops = o->next_free;
    u->nspare_ops--;
    /* its buffers kept, the rest zeroed in place (a zeroed copy assigned
     * to it was `rep stosq` into the copy: ../../common/zero.h) */
    unsigned char *buf = o->buf;
    size_t buf_cap = o->buf_cap, iov_cap = o->iov_cap;
    nxlt_iov_t *iov = o->iov;
    nxl_zero(o, sizeof(*o));
    o->buf = buf;
    o->buf_cap = buf_cap;
    o->iov = iov;
    o->iov_cap = iov_cap;
    return o;
}

/* o's message buffer, of at least len bytes; NULL when out of memory */
unsigned char *nxl_ucx_op_buf(ucx_op_t *o, size_t len)
{
    if (o->buf_cap < len) {
        unsigned char *b = malloc(len);
        if (!b)
            return NULL;
        free(o->buf);
        o->buf = b;
        o->buf_cap = len;
    }
    return o->buf;
}

/* UCX finished with the op: report it if nobody did, then free it. */
void nxl_ucx_op_finish(ucx_op_t *o, ucs_status_t st)
{
    if (o->aborted && o->conn->abort_req) {
        o->ucx_done = true; /* freed once the abort completed (conn.c, abort_done) */
        return;
    }
    if (o->main_held) { /* moved onto the rails: freed at its main request's end (rails.c) */
        nxl_ucx_op_report(o, st);
        o->moved_done = true;
        return;
    }
    nxl_ucx_op_report(o, st);
    nxl_ucx_op_free(o);
}

static void flush_done(void *req, ucs_status_t st, void *arg)
{
    ucx_op_t *o = arg;
    if (req)
        ucp_request_free(req);
    if (nxl_ucx_main_moved(o))
        return; /* its main endpoint was taken out: the rails carry it (rails.c) */
    /* canceled (NXLT_CAP_CANCEL_WAITS): the flush saw every put and get of
     * it through, so its buffers are free now; its notification stays */
    if (st != UCS_OK || o->st != UCS_OK || !o->notif || (o->op && nxlt_op_canceled(o->op)))
        nxl_ucx_op_finish(o, st);
    else
        nxl_ucx_send_notif(o);
}

ucx_op_t *nxl_ucx_op_new(ucx_t *u, nxlt_op_t *op, ucx_conn_t *c, const char *me, const void *msg,
                         size_t len, bool with_notif)
{
    ucx_op_t *o = op_get(u);
    if (!o)
        return NULL;
    o->u = u;
    if (with_notif) {
        size_t nl = strlen(me);
        o->notif_len = 2 + nl + len;
        unsigned char *b = nxl_ucx_op_buf(o, o->notif_len);
        if (!b) {
            free(o->buf);
            free(o->iov);
            free(o);
            return NULL;
        }
        o->notif = b;
        unsigned char *w = nxl_ucx_name_put(b, me, nl);
        if (len)
            memcpy(w, msg, len);
    }
    o->u = u;
    o->op = op;
    o->conn = c;
    c->refs++;
    bool first = nxl_netop_start(&u->net, &c->net, nxl_ucx_coarse_us);
    if (c->nrails)
        o->t0 = nxl_ucx_coarse_us(); /* its main endpoint's stall (rails.c) */
    LIST_INSERT_HEAD(&u->ops, o, link);
    if (first)
        nxl_ucx_watch_start(u);
    return o;
}

/* x's elements kept with o (o->iov, o->n, o->read): posted again elsewhere
 * should its path fail (rails.c). 0, or -1 out of memory */
int nxl_ucx_op_keep_iov(ucx_op_t *o, const nxlt_xfer_t *x)
{
    if (o->iov_cap < x->n) {
        nxlt_iov_t *v = malloc(x->n * sizeof(*v));
        if (!v)
            return -1;
        free(o->iov);
        o->iov = v;
        o->iov_cap = x->n;
    }
    memcpy(o->iov, x->iov, x->n * sizeof(*o->iov));
    o->n = x->n;
    o->read = x->op == NXL_READ;
    return 0;
}

nxl_status_t nxl_ucx_check_conn(ucx_t *u, ucx_conn_t *c, const char *call)
{
    nxl_ucx_local_gone(u);
    if (c->main_due != UCS_OK)
        nxl_ucx_main_due(c); /* its main endpoint failed: out before this post (rails.c) */
    if (!c->failed && !c->fail_deferred && (c->ep || c->wiring || c->main_out))
        return NXL_SUCCESS;
    nxlt_error(u->ctx, "UCX: %s: the connection to agent '%s' failed earlier (%s); reload its "
               "metadata once it is back", call, c->name,
               c->peer_destroyed                  ? "that agent, of this process, was destroyed"
               : c->failed || c->fail_deferred ? ucs_status_string(c->why)
                                               : "closed");
    return NXL_ERR_REMOTE_DISCONNECT;
}

/* Posts a put or get per element of iov[0..n) — the first from byte skip
 * on — then the endpoint flush that completes o. UCS_OK, or the status of
 * the first put or get when that one failed at once and nothing went out
 * (o is then untouched). Inside u->in_ucx. */
ucs_status_t nxl_ucx_post_rma(ucx_t *u, ucx_op_t *o, bool write, const nxlt_iov_t *iov, size_t n,
                              size_t skip)
{
    ucx_conn_t *c = o->conn;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH};
    for (size_t i = 0; i < n; i++, skip = 0) {
        const nxlt_iov_t *v = &iov[i];
        p.memh = ((ucx_md_t *)v->lmd)->memh;
        ucp_rkey_h rk = ((ucx_rkey_t *)v->rkey)->rk;
        void *la = (char *)v->laddr + skip;
        /* not unpacked on the endpoint that replaced an aborted one (UCX
         * refused it then: conn.c) */
        ucs_status_ptr_t r = !rk ? UCS_STATUS_PTR(UCS_ERR_UNREACHABLE) : write ? ucp_put_nbx(c->ep, la, v->len - skip, v->raddr + skip, rk, &p)
                                   : ucp_get_nbx(c->ep, la, v->len - skip, v->raddr + skip, rk, &p);
        if (UCS_PTR_IS_ERR(r)) {
            if (i == 0)
                return UCS_PTR_STATUS(r); /* nothing went out */
            o->st = UCS_PTR_STATUS(r);
            break;
        }
        if (r)
            ucp_request_free(r); /* completes on its own; the flush below waits for it */
    }
    ucp_request_param_t fp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = flush_done,
        .user_data = o,
    };
    ucs_status_ptr_t r = ucp_ep_flush_nbx(c->ep, &fp);
    if (!UCS_PTR_IS_PTR(r))
        flush_done(NULL, UCS_PTR_STATUS(r), o);
    return UCS_OK;
}

/* c's new endpoint is through (or failed): the transfers that waited for
 * it go out, in the order they were posted; a canceled one is reported */
void nxl_ucx_wired(ucx_conn_t *c)
{
    ucx_t *u = c->u;
    size_t n = 0, k = 0;
    ucx_op_t *o;
    LIST_FOREACH(o, &u->ops, link)
    n += o->conn == c && o->wire_wait;
    ucx_op_t **w = n ? malloc(n * sizeof(*w)) : NULL;
    /* ops are inserted at the head: the list backwards is the posting order */
    LIST_FOREACH(o, &u->ops, link)
    if (o->conn == c && o->wire_wait) {
        o->wire_wait = false;
        if (w)
            w[n - 1 - k++] = o;
        else
            nxl_ucx_op_report(o, UCS_ERR_NO_MEMORY); /* freed with the transport */
    }
    c->refs++;
    for (size_t i = 0; w && i < n; i++) {
        o = w[i];
        if (!o->op || nxlt_op_canceled(o->op) || c->failed || c->fail_deferred || !c->ep) {
            nxl_ucx_op_finish(o, c->failed ? c->why : UCS_ERR_CANCELED);
            continue;
        }
        u->in_ucx++;
        if (o->wire_notif) {
            nxl_ucx_send_notif(o);
            u->in_ucx--;
            continue;
        }
        ucs_status_t st = nxl_ucx_post_rma(u, o, !o->read, o->iov, o->n, 0);
        u->in_ucx--;
        if (st != UCS_OK)
            nxl_ucx_op_finish(o, st);
    }
    free(w);
    nxl_ucx_kick(u);
    nxl_ucx_conn_put(c);
}

nxl_status_t nxl_ucx_post(void *state, nxlt_op_t *op, const nxlt_xfer_t *x)
{
    ucx_t *u = state;
    ucx_conn_t *c = x->conn;
    nxl_status_t ns = nxl_ucx_check_conn(u, c, "post");
    if (ns != NXL_SUCCESS)
        return ns;
    /* DRAM on both sides: the initiator packs the bytes with memcpy, the
     * target copies only into DRAM regions */
    bool dram = x->ltype == NXL_DRAM && x->rtype == NXL_DRAM;
    bool one = dram && !c->wiring; /* the one-message paths may take it */
    int r; /* another path's answer: 1 posted, -1 failed, 0 not taken */
    if (c->main_out) {
        /* its main endpoint taken out: the rails carry every transfer
         * (rails.c); not taken (regions without rails): it fails */
        if ((r = nxl_ucx_rails_post(u, op, c, x)) != 0)
            return TAKEN(r);
        nxlt_error(u->ctx, "UCX: the main path to agent '%s' is out and this transfer cannot "
                   "go over its rails (not DRAM, or regions not registered with every rail)",
                   c->name);
        return NXL_ERR_REMOTE_DISCONNECT;
    }
    /* not taken: too large (puts, a flush, then the notification); not to
     * a peer with rails (its message could not be failed over: rails.c) */
    if (one && x->op == NXL_WRITE && x->notif && c->am_write && u->am_write_max && !c->nrails &&
        (r = nxl_ucx_post_am_write(u, op, c, x)) != 0)
        return TAKEN(r);
    /* small, one at a time, to a peer that polls: as a message while it
     * polls, not by cross-memory attach (am.c, "a peer that polls") */
    /* (asked once: it walks the elements and their keys) */
    bool cma = !c->wiring && nxl_ucx_cma_usable(u, c, x);
    if (one && !x->notif && (r = nxl_ucx_post_polled(u, op, c, x, cma)) != 0)
        return TAKEN(r);
    if (cma)
        return nxl_ucx_post_cma(u, op, c, x);
    /* a small WRITE without a notification that cross-memory attach does
     * not take (cma=off, another host, TCP): one message, which the target
     * acknowledges once its bytes are in place (am.c), instead of puts and
     * an endpoint flush (a round trip to a target that copies software
     * puts anyway). Not before cross-memory attach: one system call, no
     * target to wake (a 4 KiB WRITE one at a time to an idle target, the
     * message first: 49 us, against 5.5 us by cross-memory attach; busy
     * polling both sides: no faster either) */
    /* not taken: too large, the peer not heard from yet, or an older nxl */
    if (one && x->op == NXL_WRITE && !x->notif && c->am_write && u->am_write_max &&
        (r = nxl_ucx_post_am_write(u, op, c, x)) != 0)
        return TAKEN(r);
    /* a small READ the target would have to serve anyway (UCX's gets into
     * malloc'd memory, TCP): one request, one answer (am.c) */
    /* not taken: too large, or the peer cannot answer by name (yet) */
    if (one && x->op == NXL_READ && !x->notif && u->am_read_max &&
        (r = nxl_ucx_post_am_read(u, op, c, x)) != 0)
        return TAKEN(r);
    /* not taken: below rail_min, or no rails (the main path) */
    if ((r = nxl_ucx_rails_post(u, op, c, x)) != 0)
        return TAKEN(r);
    ucx_op_t *o = nxl_ucx_op_new(u, op, c, nxl_agent_name(nxlt_agent(u->ctx)), x->notif,
                                 x->notif_len, x->notif != NULL);
    if (!o)
        return NXL_ERR_UNKNOWN;
    if (c->wiring) {
        /* a new endpoint (after an abort at a deadline) not through yet:
         * the elements wait with the op (nxl_ucx_wired) */
        nxlt_iov_t *iov = o->iov_cap >= x->n ? o->iov : malloc(x->n * sizeof(*iov));
        if (!iov) {
            nxl_ucx_op_drop(o);
            return NXL_ERR_UNKNOWN;
        }
        if (iov != o->iov) {
            free(o->iov);
            o->iov = iov;
            o->iov_cap = x->n;
        }
        memcpy(iov, x->iov, x->n * sizeof(*iov));
        o->n = x->n;
        o->read = x->op == NXL_READ;
        o->wire_wait = true;
        return NXL_SUCCESS;
    }
    if (c->nrails && nxl_ucx_op_keep_iov(o, x) != 0) {
        nxl_ucx_op_drop(o);
        return NXL_ERR_UNKNOWN;
    }
    u->in_ucx++;
    ucs_status_t st = nxl_ucx_post_rma(u, o, x->op == NXL_WRITE, x->iov, x->n, 0);
    u->in_ucx--;
    if (st != UCS_OK) {
        nxlt_error(u->ctx, "UCX: %s to agent '%s' failed at once: %s",
                   x->op == NXL_WRITE ? "ucp_put_nbx" : "ucp_get_nbx", c->name,
                   ucs_status_string(st));
        nxl_ucx_op_drop(o);
        return map_status(c, st);
    }
    nxl_ucx_kick(u);
    return NXL_SUCCESS;
}
