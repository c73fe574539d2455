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
 * without the flag, a WRITE goes the other ways: an older nxl with
 * CI_AM_ACK alone, whose own default was never to send these, is not sent
 * them with the reply flag either (conn.c).
 *
 * A WRITE without a notification goes this way too, where cross-memory
 * attach does not take it (rma.c), to a peer that says CI_AM_BARE (and
 * CI_AM_ACK_NAME) once heard from, into memory UCX does not map here: its
 * header is 9 bytes, the number and AMW_BARE, its notification empty; the
 * target copies and acknowledges it as any other and delivers nothing. An
 * older nxl would deliver an empty notification: it is not sent one. */

#define AMW_BARE 1 /* the 9th byte of an AM_WRITE's header: no notification */

/* the connection to the agent of this name that messages go out on */
ucx_conn_t *nxl_ucx_conn_named(ucx_t *u, const char *name)
{
    ucx_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    if (c->ep && !c->unloaded && !c->failed && !c->fail_deferred && !strcmp(c->name, name))
        return c;
    return NULL;
}

/* a message of agent @p from arrived: it holds an endpoint to us; its
 * connection, or NULL */
static ucx_conn_t *heard_from(ucx_t *u, const char *from)
{
    ucx_conn_t *c = nxl_ucx_conn_named(u, from);
    if (c)
        c->heard = true;
    return c;
}

/* ---- a peer that polls
 *
 * To a peer on this host, cross-memory attach copies a small transfer
 * without the peer: one system call, nothing to wake (a 4 KiB WRITE one
 * at a time to an idle target: 5.5 us, against 49 us as a message that
 * wakes it). To a peer that is polling anyway (busy_poll_us, within its
 * window after activity) a message is faster: a 4 KiB WRITE or READ one
 * at a time 3.7 GB/s as messages, 1.7 by cross-memory attach (UCX 1.13,
 * both agents polling, 2026-12). So such a transfer goes as a message
 * (AM_WRITE without a notification, AM_READ) while the peer polls, and by
 * cross-memory attach otherwise.
 *
 * How the initiator knows: an agent that polls puts its busy_poll_us (u32,
 * big-endian) as the UCX header of its answers (an AM_WRITE's
 * acknowledgement, an AM_READ's bytes) and of its notifications. An nxl
 * that does not know it ignores the header of those messages (it reads
 * only their bodies); an agent that does not poll, or an older one, sends
 * none, and its peers keep today's paths. An answer received means that
 * the peer progressed our message just before: it polls for its
 * busy_poll_us from then (worker.c, progress). So a transfer posted within
 * three quarters of that after the last answer (the rest: the answer's
 * way back, a loaded machine) goes as a message, and its answer keeps the
 * window open; later, the peer is asleep, most likely: cross-memory
 * attach, which does not wake it. Only while a stream goes on (POLL_WAKE
 * transfers in a row, each posted within the peer's busy_poll_us of the
 * one before) is one sent as a message to wake the peer: one wake-up
 * (~45 us) against ~1.3 us saved on each transfer of its window after.
 *
 * A peer that polls answers in 1-3 us over shared memory, but only while
 * it has its CPU: on a loaded host it loses it for milliseconds, and so
 * may this agent waiting for the answer, when cross-memory attach needs
 * neither (load 4-6 on 2 cores: 4 KiB one at a time, both polling, 0.75
 * GB/s as messages against 1.4 by cross-memory attach). So the answers'
 * time inside the window is averaged (from 0 in each window: one stall
 * of a timer tick passes, one of a lost CPU does not), and above
 * polled_slow (10 us) the window is taken as closed and the stream that
 * wakes the peer doubled (up to POLL_WAKE_MAX); an answer in a window
 * whose average stays under it restores POLL_WAKE.
 *
 * One at a time only (nothing else in flight to the peer): a window of
 * transfers goes in one system call by cross-memory attach, faster than
 * as many messages (16 x 4 KiB: 5.8 GB/s against 1.8). And only what the
 * message paths take (am_write_max, am_read_max; a peer that answers by
 * name, heard from) and cross-memory attach would: the rest takes its
 * usual path. */

#define POLL_WAKE 16 /* transfers in a row that make a stream, at first... */
#define POLL_WAKE_MAX 4096 /* ... and at most (doubled after each slow answer) */

/* a message of the peer's with the header @p header: its busy_poll_us;
 * @p o: the op it answers (without the header: the peer does not poll, or
 * is an older nxl), or NULL (a notification) */
static void poll_heard(ucx_t *u, ucx_conn_t *c, const void *header, size_t hlen, ucx_op_t *o)
{
    uint32_t bp = hlen == 4 ? (uint32_t)ucx_ci_get(header, 4) : 0;
    if (!o && !bp)
        return; /* a notification may come without it (handled later, nxl_ucx_later) */
    if (bp && !c->peer_poll_us) {
        nxlt_log(u->ctx, NXL_LOG_INFO, "UCX: agent '%s' polls for %u us after activity: "
                 "small transfers one at a time go to it as messages while it does",
                 c->name, (unsigned)bp);
        c->poll_wake = POLL_WAKE;
    }
    c->peer_poll_us = bp;
    if (!o || !bp)
        return;
    /* inside spin() (worker.c), its pass's reading (16 rounds old at most)
     * rather than another; not one older than the op's post */
    uint64_t now = u->now_ok && u->now_us >= o->polled_us ? u->now_us : nxlt_now_us();
    c->peer_seen_us = now;
    if (!o->polled_us)
        return;
    /* the average, not each answer: one that waited for a timer tick
     * does not stop the messages, a peer that often loses its CPU does */
    c->poll_rtt8 += now - o->polled_us - c->poll_rtt8 / 8;
    if (!u->polled_slow_us || c->poll_rtt8 <= 8 * (uint64_t)u->polled_slow_us) {
        c->poll_wake = POLL_WAKE;
        return;
    }
    /* answered slowly inside its window: the peer does not get the CPU
     * it polls on (a loaded host), or this agent does not poll for the
     * answer; cross-memory attach, which needs neither, until a longer
     * stream tries again */
    c->peer_seen_us = 0;
    c->poll_rtt8 = 0; /* the next window is judged afresh */
    if (c->poll_wake < POLL_WAKE_MAX)
        c->poll_wake *= 2;
}

/* A small transfer one at a time, DRAM on both sides, without a
 * notification, to a peer that polls (above): 1 posted as a message (or
 * failed and reported), 0 not this way, -1 no memory. @p cma: whether
 * cross-memory attach would take it (nxl_ucx_cma_usable(), which the
 * caller has asked already) */
int nxl_ucx_post_polled(ucx_t *u, nxlt_op_t *op, ucx_conn_t *c, const nxlt_xfer_t *x, bool cma)
{
    if (!c->peer_poll_us || !u->polled_max)
        return 0;
    if (c->net.inflight) {
        /* a window of transfers: its refill from a completion's callback
         * finds nothing in flight for its first post, whose message would
         * then go ahead of the others' one system call (to a peer whose
         * notifications told it polls); so not while the last post with
         * others in flight is within the peer's window */
        c->window_us = nxlt_now_us();
        return 0;
    }
    size_t max = x->op == NXL_WRITE ? (c->am_write ? u->am_write_max : 0) : u->am_read_max,
           total = 0;
    if (max > u->polled_max)
        max = u->polled_max;
    for (size_t i = 0; i < x->n && total <= max; i++)
        total += x->iov[i].len;
    if (total > max || !cma)
        return 0;
    uint64_t now = nxlt_now_us(), bp = c->peer_poll_us;
    if (c->window_us && now - c->window_us < bp)
        return 0;
    bool in_window = false;
    if (now - c->peer_seen_us >= bp - bp / 4) {
        /* asleep, most likely: woken only for a stream */
        c->small_run = now - c->small_last_us < bp ? c->small_run + 1 : 0;
        c->small_last_us = now;
        if (c->small_run < (c->poll_wake ? c->poll_wake : POLL_WAKE))
            return 0;
    } else {
        in_window = true;
    }
    c->small_last_us = now;
    int r = x->op == NXL_WRITE ? nxl_ucx_post_am_write(u, op, c, x)
                               : nxl_ucx_post_am_read(u, op, c, x);
    if (r > 0) {
        c->small_run = 0;
        u->poll_xfers++;
        ucx_op_t *o = LIST_FIRST(&u->acks); /* the op just posted */
        if (in_window && o && o->op == op)
            o->polled_us = now;
    }
    return r;
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
    if (nxl_ucx_main_moved(arg))
        return; /* its main endpoint was taken out: the rails carry it (rails.c) */
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
    if (len > 9 && !memcmp(b, zero, 8) && b[8] == NXL_UCX_DRAINED &&
        nxl_ucx_name_get(b + 9, len - 9, from)) {
        /* with the drained mark: the peer renewed its endpoint to us, the
         * old connection read or closed there (conn.c, the fence) */
        nxl_ucx_peer_drained(u, from);
        return UCS_OK;
    }
    ucx_op_t *o;
    LIST_FOREACH(o, &u->acks, ack_link)
    if (!o->amr && !memcmp(o->amw_hdr, b, 8))
        break;
    if (!o)
        return UCS_OK; /* its op was reported and freed: the connection failed */
    LIST_REMOVE(o, ack_link);
    o->amw_acked = true;
    u->net.hit = true;
    poll_heard(u, o->conn, header, hlen, o);
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
 * when it came with one, else on our endpoint to its sender, connection
 * @p c (NULL: unknown; @p from: its name, for the log) */
static void amw_ack(ucx_t *u, const void *header, size_t hlen, const ucp_am_recv_param_t *param,
                    const char *bad, ucx_conn_t *c, const char *from)
{
    if (hlen != 8 && hlen != 9)
        return; /* not asked */
    ucp_ep_h ep = NULL;
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) && param->reply_ep) {
        ep = param->reply_ep;
    } else {
        if (!c) {
            nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: a WRITE from agent '%s' cannot be "
                     "acknowledged: no connection to it here (its metadata was unloaded?); "
                     "it fails there by its stall timeout", from ? from : "?");
            return;
        }
        ep = c->ep;
    }
    size_t bl = bad ? strlen(bad) : 0;
    if (!bad) {
        /* the common case, sent at once from here if UCX can (no copy
         * kept, nothing to complete later) */
        unsigned char ok[9];
        memcpy(ok, header, 8);
        ok[8] = 0;
        ucp_request_param_t p = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL,
            .flags = UCP_AM_SEND_FLAG_EAGER,
        };
        u->in_ucx++;
        ucs_status_ptr_t r = ucp_am_send_nbx(ep, NXL_UCX_AM_WRITE_ACK, u->poll_hdr,
                                             u->poll_hlen, ok, 9, &p);
        u->in_ucx--;
        if (r == NULL)
            return;
        /* not at once (NO_RESOURCE: the peer's FIFO is full), or an error
         * the side message below logs */
    }
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
    nxl_ucx_side_answer(u, ep, NXL_UCX_AM_WRITE_ACK, m);
}

/* does UCX map an element's remote memory here itself (it allocated it, on
 * shared memory)? Then its puts and gets are one-sided, without the target */
static bool rkeys_mapped(const nxlt_xfer_t *x)
{
    for (size_t i = 0; i < x->n; i++) {
        ucx_rkey_t *k = x->iov[i].rkey;
        if (k->mapped < 0 && k->rk) {
            void *ptr;
            k->mapped = ucp_rkey_ptr(k->rk, x->iov[i].raddr, &ptr) == UCS_OK;
        }
        if (k->mapped > 0)
            return true;
    }
    return false;
}

/* 1: sent (or failed and reported); 0: not for this path (too large); -1: no memory */
int nxl_ucx_post_am_write(ucx_t *u, nxlt_op_t *op, ucx_conn_t *c, const nxlt_xfer_t *x)
{
    const char *me = nxl_agent_name(nxlt_agent(u->ctx));
    size_t nl = strlen(me), data = 0;
    bool bare = !x->notif;
    if ((c->am_write && !c->heard) || (bare && !c->am_bare))
        return 0; /* it may hold no endpoint to us to answer on; or it would deliver an
                   * empty notification */
    for (size_t i = 0; i < x->n; i++) {
        data += x->iov[i].len;
        if (data > u->am_write_max || x->iov[i].len > UINT32_MAX)
            return 0;
    }
    if (bare && rkeys_mapped(x))
        return 0; /* UCX's puts are copies here, its flush without the target */
    size_t total = 2 + nl + nxl_amw_body_size(x, data);
    ucx_op_t *o = nxl_ucx_op_new(u, op, c, me, NULL, 0, false);
    unsigned char *b = o ? nxl_ucx_op_buf(o, total) : NULL;
    /* without rails, the elements' bytes are gathered by UCX from the
     * application's memory (nxl_ucx_am_send_gather): kept there until the
     * op completes, as the contract asks; with rails the whole message is
     * kept with the op, to go again on a rail */
    bool gather = !c->nrails && data > 256;
    if (!b || ((c->nrails || gather) && nxl_ucx_op_keep_iov(o, x) != 0)) { /* kept: rails.c */
        if (o)
            nxl_ucx_op_drop(o);
        return -1;
    }
    unsigned char *d = nxl_amw_body_pack_head(nxl_ucx_name_put(b, me, nl), x);
    if (!gather)
        nxl_amw_body_pack_data(d, x);
    o->notif = b; /* kept with the op */
    o->notif_len = total;
    o->amw = true;
    o->amw_st = UCS_OK;
    ucx_ci_put(o->amw_hdr, ++u->am_seq, 8);
    o->amw_hdr[8] = AMW_BARE;
    LIST_INSERT_HEAD(&u->acks, o, ack_link);
    u->in_ucx++;
    uint32_t fl = 0; /* the peer answers by our name (CI_AM_ACK_NAME), not on a reply endpoint */
    ucs_status_ptr_t r = NULL;
    bool sent = false;
    if (gather)
        r = nxl_ucx_am_send_gather(c->ep, NXL_UCX_AM_WRITE, o->amw_hdr, bare ? 9 : 8, b,
                                   (size_t)(d - b), o->iov, o->n, total, fl, amw_sent, o, &sent);
    if (!sent) {
        if (gather)
            nxl_amw_body_pack_data(d, x);
        r = nxl_ucx_am_send(c->ep, NXL_UCX_AM_WRITE, o->amw_hdr, bare ? 9 : 8, b, total, fl,
                            amw_sent, o);
    }
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
        amw_ack(u, header, hlen, param, "it arrived by rendezvous", NULL, NULL);
        return UCS_OK;
    }
    /* "?" until the name is read; not `= "?"`, which zeroes all 256 bytes
     * on every message */
    char from[256];
    from[0] = '?';
    from[1] = 0;
    const char *bad = NULL;
    size_t nk = nxl_ucx_name_get(b, len, from);
    ucx_conn_t *c = NULL;
    if (!nk) {
        bad = "malformed header";
        goto drop;
    }
    c = heard_from(u, from);
    /* every element checked before any byte is written, then copied */
    const unsigned char *msg;
    size_t ml;
    bool bare = hlen == 9 && ((const unsigned char *)header)[8] == AMW_BARE;
    if (hlen == 9 && !bare) {
        bad = "malformed header";
        goto drop;
    }
    bad = nxl_amw_body_apply(u->ctx, b + nk, end, &msg, &ml);
    if (bad)
        goto drop;
    u->net.hit = true;
    amw_ack(u, header, hlen, param, NULL, c, from); /* every byte is in place */
    if (!bare)
        nxlt_notif_recv(u->ctx, from, msg, ml);
    return UCS_OK;
drop:
    nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: a WRITE of %zu bytes from agent '%s' was dropped, "
             "and its notification with it: %s", len, from, bad);
    amw_ack(u, header, hlen, param, bad, c, nk ? from : NULL);
    return UCS_OK;
}

/* ---- small READs: a request and its answer
 *
 * A READ of at most am_read_max bytes (DRAM on both sides, no
 * notification) from a peer that says CI_AM_READ and that holds an
 * endpoint to us (c->heard), that neither cross-memory attach nor UCX's
 * own mapping reads one-sided (both without the target: its READ needs
 * no answer from it, stopped or asleep), is one request:
 *
 *   header: its number (8); [u16 name length][name]
 *   [u32 n][n x (u64 remote address, u32 length)]
 *
 * The target checks every element (inside a DRAM region registered with
 * this transport, as an AM_WRITE's) and answers, from its progress, on its
 * own endpoint to the sender found by name:
 *
 *   [the number (8)][u8 0: the bytes follow, 1: refused, why follows]
 *
 * The initiator copies the bytes into the op's local elements and
 * completes it, once UCX also completed the request's send (it holds the
 * op's buffer). The answer is matched by its number on u->acks: an op that
 * was canceled at its deadline leaves that list then (nxl_ucx_am_reads_due),
 * so an answer that comes after the op was reported writes nothing — a
 * READ's buffer is never written after its callback; an answer for an op
 * canceled otherwise is not copied either. A peer that fails fails the op
 * once (conn.c, with the others), and its answer, should one still come,
 * finds no op reported by then to write for. */

/* 1: sent (or failed and reported); 0: not for this path; -1: no memory */
int nxl_ucx_post_am_read(ucx_t *u, nxlt_op_t *op, ucx_conn_t *c, const nxlt_xfer_t *x)
{
    if (!c->am_read || !c->heard || !x->n)
        return 0;
    size_t data = 0;
    for (size_t i = 0; i < x->n; i++) {
        data += x->iov[i].len;
        if (data > u->am_read_max || x->iov[i].len > UINT32_MAX)
            return 0;
    }
    if (rkeys_mapped(x))
        return 0; /* UCX's gets are one-sided there, without the target */
    const char *me = nxl_agent_name(nxlt_agent(u->ctx));
    size_t nl = strlen(me), total = 2 + nl + 4 + 12 * x->n;
    ucx_op_t *o = nxl_ucx_op_new(u, op, c, me, NULL, 0, false);
    unsigned char *b = o ? nxl_ucx_op_buf(o, total) : NULL;
    nxlt_iov_t *iov = !b ? NULL : o->iov_cap >= x->n ? o->iov : malloc(x->n * sizeof(*iov));
    if (!iov) {
        if (o)
            nxl_ucx_op_drop(o);
        return -1;
    }
    if (iov != o->iov) {
        free(o->iov);
        o->iov = iov;
        o->iov_cap = x->n;
    }
    memcpy(iov, x->iov, x->n * sizeof(*iov)); /* where the answer's bytes go */
    o->n = x->n;
    o->read = true;
    unsigned char *w = nxl_ucx_name_put(b, me, nl);
    ucx_ci_put(w, x->n, 4), w += 4;
    for (size_t i = 0; i < x->n; i++, w += 12) {
        ucx_ci_put(w, x->iov[i].raddr, 8);
        ucx_ci_put(w + 8, x->iov[i].len, 4);
    }
    o->amw = o->amr = true;
    o->amw_st = UCS_OK;
    ucx_ci_put(o->amw_hdr, ++u->am_seq, 8);
    LIST_INSERT_HEAD(&u->acks, o, ack_link);
    u->in_ucx++;
    ucs_status_ptr_t r = nxl_ucx_am_send(c->ep, NXL_UCX_AM_READ, o->amw_hdr, 8,
                                         b, total, 0, amw_sent, o);
    if (!UCS_PTR_IS_PTR(r))
        amw_step(o, UCS_PTR_STATUS(r)); /* sent at once: its answer completes it */
    nxl_ucx_kick(u);
    u->in_ucx--;
    return 1;
}

/* the initiator's side: the answer to an AM_READ */
ucs_status_t nxl_ucx_am_recv_read_reply(void *arg, const void *header, size_t hlen, void *data,
                                        size_t len, const ucp_am_recv_param_t *param)
{
    ucx_t *u = arg;
    const unsigned char *b = data;
    if (len < 9 || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: malformed READ answer of %zu bytes dropped", len);
        return UCS_OK;
    }
    ucx_op_t *o;
    LIST_FOREACH(o, &u->acks, ack_link)
    if (o->amr && !memcmp(o->amw_hdr, b, 8))
        break;
    if (!o) {
        /* given up at its deadline (or its connection failed): nothing
         * of it is written */
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "UCX: the answer to READ number %llu came after the "
                 "READ was given up; dropped", (unsigned long long)ucx_ci_get(b, 8));
        return UCS_OK;
    }
    LIST_REMOVE(o, ack_link);
    o->amw_acked = true;
    u->net.hit = true;
    poll_heard(u, o->conn, header, hlen, o);
    size_t want = 0;
    for (size_t i = 0; i < o->n; i++)
        want += o->iov[i].len;
    char why[400];
    why[0] = 0;
    if (!o->op || nxlt_op_canceled(o->op)) {
        o->amw_st = UCS_ERR_CANCELED; /* reported, or canceled: its buffer is not written */
    } else if (b[8]) {
        snprintf(why, sizeof(why), "UCX: READ from agent '%s' failed: the target refused it "
                 "(nothing read): %.*s", o->conn->name, (int)(len - 9 < 200 ? len - 9 : 200),
                 (const char *)b + 9);
        o->amw_st = UCS_ERR_INVALID_ADDR;
    } else if (len - 9 != want) {
        snprintf(why, sizeof(why), "UCX: READ from agent '%s' failed: its answer holds %zu "
                 "bytes, %zu asked", o->conn->name, len - 9, want);
        o->amw_st = UCS_ERR_INVALID_ADDR;
    } else {
        const unsigned char *r = b + 9;
        for (size_t i = 0; i < o->n; r += o->iov[i].len, i++)
            memcpy(o->iov[i].laddr, r, o->iov[i].len);
    }
    if (why[0]) {
        free(o->why);
        o->why = strdup(why);
    }
    if (o->amw_sent)
        nxl_ucx_op_finish(o, o->amw_st);
    return UCS_OK;
}

/* the target's side: an AM_READ's request, answered with the bytes (or
 * why not) on our endpoint to its sender */
ucs_status_t nxl_ucx_am_recv_read(void *arg, const void *header, size_t hlen, void *data,
                                  size_t len, const ucp_am_recv_param_t *param)
{
    ucx_t *u = arg;
    const unsigned char *b = data, *end = b + len;
    char from[256]; /* as in nxl_ucx_am_recv_write */
    from[0] = '?';
    from[1] = 0;
    size_t nk = hlen == 8 && !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
                    ? nxl_ucx_name_get(b, len, from)
                    : 0;
    ucx_conn_t *c = nk ? nxl_ucx_conn_named(u, from) : NULL;
    if (!c) {
        nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: a READ request of %zu bytes from agent '%s' "
                 "cannot be answered: %s; it fails there by its deadline or stall timeout", len,
                 from, nk ? "no connection to it here (its metadata was unloaded?)"
                          : "malformed");
        return UCS_OK;
    }
    c->heard = true;
    const char *bad = NULL;
    b += nk;
    uint64_t n = (size_t)(end - b) >= 4 ? ucx_ci_get(b, 4) : 0;
    size_t total = 0;
    if ((size_t)(end - b) < 4 || (size_t)(end - b - 4) / 12 != n || (end - b - 4) % 12)
        bad = "malformed request";
    b += 4;
    for (uint64_t i = 0; !bad && i < n; i++) {
        uint64_t ra = ucx_ci_get(b + 12 * i, 8), l = ucx_ci_get(b + 12 * i + 8, 4);
        if ((total += l) > (1u << 20))
            bad = "more bytes than a READ request may ask";
        else if (!nxlt_mem_registered(u->ctx, NXL_DRAM, 0, ra, l))
            bad = "an element outside every region registered here (deregistered meanwhile?)";
    }
    size_t bl = bad ? strlen(bad) : total;
    ucx_side_t *m = malloc(sizeof(*m) + 9 + bl);
    if (!m) {
        nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: out of memory: a READ request of agent '%s' was "
                 "not answered (it fails there by its deadline or stall timeout)", from);
        return UCS_OK;
    }
    m->len = 9 + bl;
    memcpy(m->buf, header, 8);
    m->buf[8] = bad != NULL;
    if (bad) {
        memcpy(m->buf + 9, bad, bl);
        nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: a READ request from agent '%s' was refused: %s",
                 from, bad);
    } else {
        unsigned char *w = m->buf + 9;
        for (uint64_t i = 0; i < n; i++) {
            size_t l = ucx_ci_get(b + 12 * i + 8, 4);
            memcpy(w, (const void *)(uintptr_t)ucx_ci_get(b + 12 * i, 8), l);
            w += l;
        }
    }
    u->net.hit = true;
    nxl_ucx_side_answer(u, c->ep, NXL_UCX_AM_READ_REPLY, m);
    return UCS_OK;
}

/* From progress, after a deadline passed: AM_READs canceled and not
 * answered are given up — reported now (nothing of UCX's holds their
 * buffers: the request is the op's own), off u->acks, so that an answer
 * that still comes writes nothing; freed once UCX sent the request */
void nxl_ucx_am_reads_due(ucx_t *u)
{
    ucx_op_t *o, *next;
    for (o = LIST_FIRST(&u->acks); o; o = next) {
        next = LIST_NEXT(o, ack_link);
        if (!o->amr || !o->op || !nxlt_op_canceled(o->op) || o->aborted)
            continue;
        LIST_REMOVE(o, ack_link);
        o->amw_acked = true;
        if (!o->why)
            o->why = strdup("UCX: READ canceled before its answer came (an answer coming later "
                            "is dropped)");
        if (o->amw_sent)
            nxl_ucx_op_finish(o, UCS_ERR_CANCELED);
        else
            nxl_ucx_op_report(o, UCS_ERR_CANCELED); /* freed once the request is sent */
    }
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
    if (!nxl_ucx_main_moved(arg)) /* moved: the rails carry it (rails.c) */
        nxl_ucx_op_finish(arg, st);
    ucp_request_free(req);
}

void nxl_ucx_send_notif(ucx_op_t *o)
{
    if (o->conn->main_out && nxl_ucx_rails_notif(o))
        return; /* its main endpoint taken out: on a rail (rails.c) */
    if (!o->conn->ep) {
        nxl_ucx_op_finish(o, UCS_ERR_CANCELED); /* the connection was given up meanwhile */
        return;
    }
    ucx_t *u = o->u;
    ucs_status_ptr_t r = nxl_ucx_am_send(o->conn->ep, NXL_UCX_AM_NOTIF, u->poll_hdr,
                                         u->poll_hlen, o->notif, o->notif_len, 0, am_done, o);
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
    if (c->wiring && !c->main_out) {
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
    ucx_conn_t *c = heard_from(u, from);
    if (c)
        poll_heard(u, c, header, hlen, NULL);
    nxlt_notif_recv(u->ctx, from, b + nk, len - nk);
    return UCS_OK;
}
