/* SPDX-License-Identifier: BSD-3-Clause */
#include "config.h"
#include "ucx.h"

/* ---- small WRITEs with a notification: one active message
 *
 * [u16 name length][name][u32 notification length][notification]
 * [u32 n][n x (u64 remote address, u32 length)][the n elements' bytes]
 * (what follows the name: ../common/amwrite.h)
 *
 * The target copies each element into its memory — only into regions it
 * registered with this transport and has not deregistered, checked like an
 * rkey would be, every element before any byte is written — and then
 * delivers the notification: one message instead of puts, a flush and a
 * notification. The message carries an 8-byte header, the op's number, and
 * UCX's reply flag; once the bytes are in place the target answers on the
 * message's reply endpoint with an acknowledgement:
 *
 * [the number (8)][u8 0: copied, 1: dropped][why dropped, text]
 *
 * and the op completes when both the send and its acknowledgement did: a
 * WRITE completes only when its bytes are in the target's memory (the
 * contract), not when the message left. A message the target drops
 * (malformed, or an element outside its regions: deregistered meanwhile)
 * is logged there, its notification never delivered, and the initiator's
 * transfer fails with the reason. UCX resolves the reply endpoint from the
 * sender's endpoint id and drops the message unseen when that endpoint is
 * no longer valid there: where the receiver replaced the sender's metadata
 * (closing the endpoint the sender's was paired with; software puts, which
 * take any endpoint, still get through), and the transfer fails by the
 * stall timeout:
 * nxlbench, whose initiator re-fetches its target's metadata after setup,
 * had every pong so dropped. Hence off by default (am_write_max 0). Only
 * peers whose connection info says they acknowledge (CI_AM_ACK) are sent
 * such messages.
 *
 * A peer that also says CI_AM_ACK_NAME is sent them without the reply
 * flag (nothing for UCX to resolve, nothing dropped) and answers on its
 * own endpoint to the sender, found by the name at the message's head; so
 * such a peer is sent them only once a message of its own arrived here
 * (c->heard: it holds an endpoint to us). Before that, and to a peer
 * without the flag, a WRITE goes the other ways (or, CI_AM_ACK only, with
 * the reply flag as before). */

/* the connection to the agent of this name that messages go out on */
ucx_conn_t *nxl_ucx_conn_named(ucx_t *u, const char *name)
{
    ucx_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    if (c->ep && !c->unloaded && !c->failed && !c->fail_deferred && !strcmp(c->name, name))
        return c;
    return NULL;
}

/* a message of agent @p from arrived: it holds an endpoint to us */
static void heard_from(ucx_t *u, const char *from)
{
    ucx_conn_t *c = nxl_ucx_conn_named(u, from);
    if (c)
        c->heard = true;
}

/* UCX sent it, or the target acknowledged it: done when both happened */
static void amw_step(ucx_op_t *o, ucs_status_t st)
{
    if (st != UCS_OK) {
        nxl_ucx_op_finish(o, st);
        return;
    }
    o->amw_sent = true;
    /* reported already (its connection failed): nothing more to wait for */
    if (o->amw_acked || !o->op)
        nxl_ucx_op_finish(o, o->amw_st);
}

static void amw_sent(void *req, ucs_status_t st, void *arg)
{
    ucp_request_free(req);
    amw_step(arg, st);
}

ucs_status_t nxl_ucx_am_recv_ack(void *arg, const void *header, size_t hlen, void *data,
                                 size_t len, const ucp_am_recv_param_t *param)
{
    ucx_t *u = arg;
    const unsigned char *b = data;
    if (len < 9 || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: malformed WRITE acknowledgement of %zu bytes "
                 "dropped", len);
        return UCS_OK;
    }
    static const unsigned char zero[9];
    char from[256];
    if (len > 9 && !memcmp(b, zero, 9) && nxl_ucx_name_get(b + 9, len - 9, from)) {
        /* number 0 with a name: a peer's new endpoint after its abort */
        nxl_ucx_peer_renewed(u, from);
        return UCS_OK;
    }
    ucx_op_t *o;
    LIST_FOREACH(o, &u->acks, ack_link)
    if (!memcmp(o->amw_hdr, b, 8))
        break;
    if (!o)
        return UCS_OK; /* its op was reported and freed: the connection failed */
    LIST_REMOVE(o, ack_link);
    o->amw_acked = true;
    u->net.hit = true;
    if (b[8]) {
        char why[400];
        snprintf(why, sizeof(why), "UCX: WRITE to agent '%s' failed: the target dropped it "
                 "(nothing written, its notification not delivered): %.*s", o->conn->name,
                 (int)(len - 9 < 200 ? len - 9 : 200), (const char *)b + 9);
        free(o->why);
        o->why = strdup(why);
        o->amw_st = UCS_ERR_INVALID_ADDR;
    }
    if (o->amw_sent)
        nxl_ucx_op_finish(o, o->amw_st);
    return UCS_OK;
}

/* the target's side: acknowledges an AM_WRITE that asks for it (its
 * number in the header), copied or dropped (bad): on the reply endpoint
 * when it came with one, else on our endpoint to its sender @p from (NULL:
 * unknown) */
static void amw_ack(ucx_t *u, const void *header, size_t hlen, const ucp_am_recv_param_t *param,
                    const char *bad, const char *from)
{
    if (hlen != 8)
        return; /* not asked */
    ucp_ep_h ep = NULL;
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) && param->reply_ep) {
        ep = param->reply_ep;
    } else {
        ucx_conn_t *c = from ? nxl_ucx_conn_named(u, from) : NULL;
        if (!c) {
            nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: a WRITE from agent '%s' cannot be "
                     "acknowledged: no connection to it here (its metadata was unloaded?); "
                     "it fails there by its stall timeout", from ? from : "?");
            return;
        }
        ep = c->ep;
    }
    size_t bl = bad ? strlen(bad) : 0;
    ucx_side_t *m = malloc(sizeof(*m) + 9 + bl);
    if (!m) {
        nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: out of memory: a WRITE's acknowledgement was not "
                 "sent (its initiator fails it by its stall timeout)");
        return;
    }
    m->len = 9 + bl;
    memcpy(m->buf, header, 8);
    m->buf[8] = bad != NULL;
    if (bl)
        memcpy(m->buf + 9, bad, bl);
    nxl_ucx_side_send(u, ep, NXL_UCX_AM_WRITE_ACK, m);
}

/* 1: sent (or failed and reported); 0: not for this path (too large); -1: no memory */
int nxl_ucx_post_am_write(ucx_t *u, nxlt_op_t *op, ucx_conn_t *c, const nxlt_xfer_t *x)
{
    const char *me = nxl_agent_name(nxlt_agent(u->ctx));
    size_t nl = strlen(me), data = 0;
    if (c->am_ack_name && !c->heard)
        return 0; /* it may hold no endpoint to us to answer on */
    for (size_t i = 0; i < x->n; i++) {
        data += x->iov[i].len;
        if (data > u->am_write_max || x->iov[i].len > UINT32_MAX)
            return 0;
    }
    size_t total = 2 + nl + nxl_amw_body_size(x, data);
    ucx_op_t *o = nxl_ucx_op_new(u, op, c, me, NULL, 0, false);
    unsigned char *b = o ? nxl_ucx_op_buf(o, total) : NULL;
    if (!b) {
        if (o)
            nxl_ucx_op_drop(o);
        return -1;
    }
    nxl_amw_body_pack(nxl_ucx_name_put(b, me, nl), x);
    o->notif = b; /* kept with the op */
    o->notif_len = total;
    o->amw = true;
    o->amw_st = UCS_OK;
    ucx_ci_put(o->amw_hdr, ++u->am_seq, 8);
    LIST_INSERT_HEAD(&u->acks, o, ack_link);
    u->in_ucx++;
    ucs_status_ptr_t r = nxl_ucx_am_send(c->ep, NXL_UCX_AM_WRITE, o->amw_hdr, sizeof(o->amw_hdr),
                                         b, total, c->am_ack_name ? 0 : UCP_AM_SEND_FLAG_REPLY,
                                         amw_sent, o);
    if (!UCS_PTR_IS_PTR(r))
        amw_step(o, UCS_PTR_STATUS(r)); /* sent at once: its acknowledgement completes it */
    nxl_ucx_kick(u);
    u->in_ucx--;
    return 1;
}

ucs_status_t nxl_ucx_am_recv_write(void *arg, const void *header, size_t hlen, void *data,
                                   size_t len, const ucp_am_recv_param_t *param)
{
    ucx_t *u = arg;
    const unsigned char *b = data, *end = b + len;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: a small WRITE arrived by rendezvous; dropped");
        amw_ack(u, header, hlen, param, "it arrived by rendezvous", NULL);
        return UCS_OK;
    }
    char from[256] = "?";
    const char *bad = NULL;
    size_t nk = nxl_ucx_name_get(b, len, from);
    if (!nk) {
        bad = "malformed header";
        goto drop;
    }
    heard_from(u, from);
    /* every element checked before any byte is written, then copied */
    const unsigned char *msg;
    size_t ml;
    bad = nxl_amw_body_apply(u->ctx, b + nk, end, &msg, &ml);
    if (bad)
        goto drop;
    u->net.hit = true;
    amw_ack(u, header, hlen, param, NULL, from); /* every byte is in place */
    nxlt_notif_recv(u->ctx, from, msg, ml);
    return UCS_OK;
drop:
    nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: a WRITE of %zu bytes from agent '%s' was dropped, "
             "and its notification with it: %s", len, from, bad);
    amw_ack(u, header, hlen, param, bad, nk ? from : NULL);
    return UCS_OK;
}

/* ---- loopback messages
 *
 * UCX's self transport (the endpoint to this agent itself) runs the
 * receiver's handler inside the send: a message the agent sends itself
 * would be delivered inside the engine's call that sent it (a notification
 * inside nxl_notif_send, a revocation inside the deregistration). One that
 * arrives inside one of our UCX calls is copied and handled from the loop,
 * as a message from a peer is. */
bool nxl_ucx_later(ucx_t *u, ucp_am_recv_callback_t cb, const void *data, size_t len,
                   const ucp_am_recv_param_t *param)
{
    if (!u->in_ucx || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
        return false;
    ucx_later_t *l = malloc(sizeof(*l) + len);
    if (!l)
        return false; /* handled at once */
    l->next = NULL;
    l->cb = cb;
    l->len = len;
    if (len)
        memcpy(l->buf, data, len);
    if (!u->later)
        u->later_tail = &u->later;
    *u->later_tail = l;
    u->later_tail = &l->next;
    nxl_ucx_kick(u);
    return true;
}

/* from the loop (progress) */
void nxl_ucx_later_run(ucx_t *u)
{
    ucx_later_t *l;
    while (!u->in_ucx && (l = u->later)) {
        u->later = l->next;
        ucp_am_recv_param_t p = {.recv_attr = 0};
        l->cb(u, NULL, 0, l->buf, l->len, &p);
        free(l);
    }
}

void nxl_ucx_later_free(ucx_t *u)
{
    ucx_later_t *l;
    while ((l = u->later)) {
        u->later = l->next;
        free(l);
    }
}

/* ---- notifications: one message after the data is in place */

static void am_done(void *req, ucs_status_t st, void *arg)
{
    nxl_ucx_op_finish(arg, st);
    ucp_request_free(req);
}

void nxl_ucx_send_notif(ucx_op_t *o)
{
    if (!o->conn->ep) {
        nxl_ucx_op_finish(o, UCS_ERR_CANCELED); /* the connection was given up meanwhile */
        return;
    }
    ucx_t *u = o->u;
    ucs_status_ptr_t r = nxl_ucx_am_send(o->conn->ep, NXL_UCX_AM_NOTIF, NULL, 0, o->notif,
                                         o->notif_len, 0, am_done, o);
    if (!UCS_PTR_IS_PTR(r))
        nxl_ucx_op_finish(o, UCS_PTR_STATUS(r));
    else
        nxl_ucx_kick(u); /* UCX holds it: progress completes it */
}

nxl_status_t nxl_ucx_notif_send(void *state, nxlt_op_t *op, void *conn, const void *msg,
                                size_t len)
{
    ucx_t *u = state;
    ucx_conn_t *c = conn;
    nxl_status_t ns = nxl_ucx_check_conn(u, c, "notif_send");
    if (ns != NXL_SUCCESS)
        return ns;
    ucx_op_t *o = nxl_ucx_op_new(u, op, c, nxl_agent_name(nxlt_agent(u->ctx)), msg, len, true);
    if (!o)
        return NXL_ERR_UNKNOWN;
    if (c->wiring) {
        /* sent once the new endpoint is through (rma.c, nxl_ucx_wired) */
        o->wire_wait = o->wire_notif = true;
        return NXL_SUCCESS;
    }
    u->in_ucx++;
    nxl_ucx_send_notif(o);
    u->in_ucx--;
    return NXL_SUCCESS;
}

ucs_status_t nxl_ucx_am_recv(void *arg, const void *header, size_t hlen, void *data, size_t len,
                             const ucp_am_recv_param_t *param)
{
    ucx_t *u = arg;
    if (nxl_ucx_later(u, nxl_ucx_am_recv, data, len, param))
        return UCS_OK;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: a notification arrived by rendezvous; dropped");
        return UCS_OK;
    }
    const unsigned char *b = data;
    char from[256];
    size_t nk = nxl_ucx_name_get(b, len, from);
    if (!nk) {
        nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: malformed notification of %zu bytes dropped", len);
        return UCS_OK;
    }
    u->net.hit = true;
    heard_from(u, from);
    nxlt_notif_recv(u->ctx, from, b + nk, len - nk);
    return UCS_OK;
}
