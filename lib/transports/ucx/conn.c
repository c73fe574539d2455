/* SPDX-License-Identifier: BSD-3-Clause */
#include "config.h"
#include "ucx.h"

/* -------------------------------------------------------- connections */

void nxl_ucx_conn_put(ucx_conn_t *c)
{
    if (--c->refs)
        return;
    ucx_side_t *m;
    LIST_FOREACH(m, &c->u->sides, link)
    if (m->hello == c)
        m->hello = NULL;
    ucx_rkey_t *k;
    while ((k = LIST_FIRST(&c->rkeys))) { /* the engine's, still loaded: theirs to unload */
        LIST_REMOVE(k, link);
        k->conn = NULL;
    }
    nxl_ucx_cma_close(c);
    LIST_REMOVE(c, link);
    free(c->addr);
    free(c->peer_addr);
    free(c->name);
    free(c);
}

static void close_forget(ucx_t *u, void *req)
{
    for (unsigned i = 0; i < u->nclosing; i++)
        if (u->closing[i] == req) {
            u->closing[i] = u->closing[--u->nclosing];
            return;
        }
}

static void abort_done(ucx_conn_t *c);

static void close_cb(void *req, ucs_status_t st, void *arg)
{
    ucx_t *u = arg;
    close_forget(u, req);
    ucp_request_free(req);
    ucx_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    if (c->abort_req == req) {
        abort_done(c);
        break;
    }
}

/* The close request UCX still holds (completed by close_cb), or NULL when
 * the close completed at once */
void *nxl_ucx_ep_close(ucx_t *u, ucp_ep_h ep, bool force)
{
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS,
        .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0,
        .cb.send = close_cb,
        .user_data = u,
    };
    u->in_ucx++;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    u->in_ucx--;
    if (UCS_PTR_IS_PTR(r)) {
        if (u->nclosing == u->capclosing) {
            unsigned cap = u->capclosing ? u->capclosing * 2 : 8;
            void **v = realloc(u->closing, cap * sizeof(*v));
            if (!v) {
                ucp_request_free(r); /* completes on its own, unobserved */
                nxl_ucx_kick(u);
                return NULL;
            }
            u->closing = v;
            u->capclosing = cap;
        }
        u->closing[u->nclosing++] = r;
    }
    nxl_ucx_kick(u);
    return UCS_PTR_IS_PTR(r) ? r : NULL;
}

static bool fence_holds(ucx_conn_t *c);

static void hello_done(ucx_conn_t *c, ucs_status_t st)
{
    if (c->main_out) { /* a try of the main endpoint taken out (rails.c) */
        nxl_ucx_main_hello(c, st);
        return;
    }
    c->wiring = false;
    if (st != UCS_OK)
        nxlt_log(c->u->ctx, NXL_LOG_INFO, "UCX: the first message on the new endpoint to agent "
                 "'%s' failed: %s", c->name, ucs_status_string(st));
    if (st != UCS_OK && c->renewing && !c->failed)
        nxl_ucx_conn_fail(c, st, false); /* the peer is not there: lost */
    c->renewing = false;
    if (st == UCS_OK && fence_holds(c))
        return; /* until the peer said the old connection is drained */
    nxl_ucx_wired(c); /* what waited goes out, or fails with the connection */
}

static void side_done(void *req, ucs_status_t st, void *arg)
{
    ucx_side_t *m = arg;
    ucx_conn_t *hello = m->hello;
    LIST_REMOVE(m, link);
    ucp_request_free(req);
    free(m);
    if (hello)
        hello_done(hello, st);
}

/* Messages of the transport's own above AM_COPY_MIN bytes go out copied
 * (UCX's bcopy), never zero-copy: UCP sends a buffer of a generic datatype
 * by copying it, the same bytes on the wire. Over TCP UCX 1.13.1 cannot
 * abort a zero-copy message. A forced close (ep_renew) of an endpoint whose
 * connection also carries the peer's endpoint to us keeps its transport
 * endpoint for the peer's end, its FIN queued behind what it was sending
 * (tcp_ep.c:452-465, tcp_cm.c:203); its purge completes a zero-copy message
 * written in part but leaves it in the send buffer (tcp_ep.c:361-365),
 * which never empties again: the endpoint stays armed for writing
 * (tcp_ep.c:1265-1268) and its FIN is never sent. When the peer's FIN
 * comes (the peer renewing its endpoint after this abort), UCX frees that
 * endpoint while reading it (tcp_cm.c:666) and then calls its write handler
 * (tcp_iface.c:313): a call through a freed endpoint's stale or NULL
 * pointer, or a double free. A copied message in flight is written once
 * the peer reads again, then the FIN, and the endpoint is armed for
 * reading only. */
#define AM_COPY_MIN 256

/* A copied message's state: the sender's callback in front of it. UCX 1.13
 * calls a generic datatype's finish before a request's completion, or
 * never (a request purged from an endpoint closed by force completes
 * without it: ucp_ep.c), so the state is freed at the completion
 * (am_copy_done), or by nxl_ucx_am_send() when there is none (completed at
 * once, or refused), never by finish. */
typedef struct {
    const void *buf;
    size_t len;
    ucp_send_nbx_callback_t cb;
    void *arg;
    /* gathered (nxl_ucx_am_send_gather): buf holds the first head bytes,
     * the elements' local bytes follow */
    size_t head, niov;
    const nxlt_iov_t *iov;
} am_copy_t;

static void *am_copy_start(void *context, const void *buffer, size_t count)
{
    return (void *)buffer;
}

static void *am_copy_start_unpack(void *context, void *buffer, size_t count)
{
    return NULL; /* sending only */
}

static size_t am_copy_size(void *state)
{
    return ((am_copy_t *)state)->len;
}

static size_t am_copy_pack(void *state, size_t offset, void *dest, size_t max)
{
    am_copy_t *s = state;
    if (s->iov) {
        /* [head bytes of buf][each element's bytes] */
        size_t done = 0, at = 0;
        for (size_t i = 0; i <= s->niov && done < max; i++) {
            const char *src = i ? s->iov[i - 1].laddr : s->buf;
            size_t l = i ? s->iov[i - 1].len : s->head;
            if (offset < at + l) {
                size_t from = offset - at, n = l - from;
                if (n > max - done)
                    n = max - done;
                memcpy((char *)dest + done, src + from, n);
                done += n;
                offset += n;
            }
            at += l;
        }
        return done;
    }
    size_t n = offset < s->len ? s->len - offset : 0;
    if (n > max)
        n = max;
    memcpy(dest, (const char *)s->buf + offset, n);
    return n;
}

static ucs_status_t am_copy_unpack(void *state, size_t offset, const void *src, size_t len)
{
    return UCS_ERR_UNSUPPORTED;
}

static void am_copy_finish(void *state) {}

static void am_copy_done(void *req, ucs_status_t status, void *user_data)
{
    am_copy_t *s = user_data;
    ucp_send_nbx_callback_t cb = s->cb;
    void *arg = s->arg;
    free(s);
    if (cb)
        cb(req, status, arg);
}

static const ucp_generic_dt_ops_t am_copy_ops = {
    .start_pack = am_copy_start,
    .start_unpack = am_copy_start_unpack,
    .packed_size = am_copy_size,
    .pack = am_copy_pack,
    .unpack = am_copy_unpack,
    .finish = am_copy_finish,
};

static ucp_datatype_t am_copy_dt;
static bool am_copy_ok;
static pthread_once_t am_copy_once = PTHREAD_ONCE_INIT;

static void am_copy_init(void)
{
    /* one for the process, never destroyed (UCX keeps only its ops) */
    am_copy_ok = ucp_dt_create_generic(&am_copy_ops, NULL, &am_copy_dt) == UCS_OK;
}

/* An eager active message (with @p flags) on @p ep; @p cb with @p arg when
 * UCX holds it and is done with it */
ucs_status_ptr_t nxl_ucx_am_send(ucp_ep_h ep, unsigned id, const void *hdr, size_t hlen,
                                 const void *buf, size_t len, uint32_t flags,
                                 ucp_send_nbx_callback_t cb, void *arg)
{
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS,
        .flags = UCP_AM_SEND_FLAG_EAGER | flags,
        .cb.send = cb,
        .user_data = arg,
    };
    am_copy_t *s = NULL;
    if (len > AM_COPY_MIN) {
        pthread_once(&am_copy_once, am_copy_init);
        if (am_copy_ok && (s = malloc(sizeof(*s)))) {
            *s = (am_copy_t){.buf = buf, .len = len, .cb = cb, .arg = arg};
            p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
            p.datatype = am_copy_dt;
            p.cb.send = am_copy_done;
            p.user_data = s;
        }
    }
    if (!s) /* a short message (or no memory): UCX's own choice */
        return ucp_am_send_nbx(ep, id, hdr, hlen, buf, len, &p);
    ucs_status_ptr_t r = ucp_am_send_nbx(ep, id, hdr, hlen, s, 1, &p);
    if (!UCS_PTR_IS_PTR(r))
        free(s); /* completed at once, or refused: no completion callback */
    return r;
}

/* The same message, its body the @p head bytes at @p buf followed by the
 * local bytes of @p iov (n elements; len bytes in all), gathered by UCX
 * straight into its buffer: no copy of the data into ours first (a 4 KiB
 * WRITE's bytes were copied twice on the initiator). The elements and
 * buf stay untouched until @p cb. *sent false: not sent, the gathering
 * datatype is not there (the caller packs the body itself). */
ucs_status_ptr_t nxl_ucx_am_send_gather(ucp_ep_h ep, unsigned id, const void *hdr, size_t hlen,
                                        const void *buf, size_t head, const nxlt_iov_t *iov,
                                        size_t n, size_t len, uint32_t flags,
                                        ucp_send_nbx_callback_t cb, void *arg, bool *sent)
{
    pthread_once(&am_copy_once, am_copy_init);
    am_copy_t *s = am_copy_ok ? malloc(sizeof(*s)) : NULL;
    *sent = s != NULL;
    if (!s)
        return NULL;
    *s = (am_copy_t){.buf = buf, .len = len, .cb = cb, .arg = arg, .head = head, .niov = n,
                     .iov = iov};
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_DATATYPE,
        .flags = UCP_AM_SEND_FLAG_EAGER | flags,
        .cb.send = am_copy_done,
        .user_data = s,
        .datatype = am_copy_dt,
    };
    ucs_status_ptr_t r = ucp_am_send_nbx(ep, id, hdr, hlen, s, 1, &p);
    if (!UCS_PTR_IS_PTR(r))
        free(s); /* completed at once, or refused: no completion callback */
    return r;
}

/* Sends a message of the transport's own on @p ep (no op behind it: its
 * failure is only logged). m->buf holds len bytes; m is taken. */
void nxl_ucx_side_send(ucx_t *u, ucp_ep_h ep, unsigned id, ucx_side_t *m)
{
    m->hello = NULL;
    m->poll = false;
    nxl_ucx_side_send_flags(u, ep, id, m, 0);
}

/* the same for an answer to the peer's message (an AM_WRITE's
 * acknowledgement, an AM_READ's bytes): with our busy_poll_us as its
 * header when we poll (am.c, "a peer that polls") */
void nxl_ucx_side_answer(ucx_t *u, ucp_ep_h ep, unsigned id, ucx_side_t *m)
{
    m->hello = NULL;
    m->poll = true;
    nxl_ucx_side_send_flags(u, ep, id, m, 0);
}

/* the same, with UCX's send @p flags (m->hello set) */
void nxl_ucx_side_send_flags(ucx_t *u, ucp_ep_h ep, unsigned id, ucx_side_t *m, uint32_t flags)
{
    m->u = u;
    LIST_INSERT_HEAD(&u->sides, m, link);
    u->in_ucx++;
    /* the header (u->poll_hdr) lives as long as u: past the send */
    ucs_status_ptr_t r = nxl_ucx_am_send(ep, id, m->poll ? u->poll_hdr : NULL,
                                         m->poll ? u->poll_hlen : 0, m->buf, m->len, flags,
                                         side_done, m);
    u->in_ucx--;
    if (UCS_PTR_IS_PTR(r)) {
        m->req = r;
    } else {
        if (UCS_PTR_IS_ERR(r))
            nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: a message of the transport (id 0x%x) could not "
                     "be sent: %s", id, ucs_status_string(UCS_PTR_STATUS(r)));
        ucx_conn_t *hello = m->hello;
        LIST_REMOVE(m, link);
        free(m);
        if (hello)
            hello->wiring = false; /* through at once (the caller posts what waits) */
    }
    nxl_ucx_kick(u);
}


static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    ucx_conn_t *c = arg;
    if (c->u->in_ucx) {
        if (!c->fail_deferred) {
            c->fail_deferred = true;
            c->why = status;
        }
        nxl_ucx_kick(c->u);
        return;
    }
    nxl_ucx_conn_fail(c, status, false);
}


static bool renew_takes(ucx_conn_t *c, ucs_status_t status);
static void conn_renew(ucx_conn_t *c, ucs_status_t status);
static void peer_renew(ucx_conn_t *c);

void nxl_ucx_conn_fail(ucx_conn_t *c, ucs_status_t status, bool stalled)
{
    if (c->failed)
        return;
    /* with a rail up, UCX's failure of the main endpoint takes it out
     * (rails.c), not the connection */
    bool gone = c->peer_destroyed || (c->pidfd >= 0 && nxl_ucx_pidfd_exited(c->pidfd));
    if (!stalled && !gone && (c->main_out || !renew_takes(c, status)) &&
        nxl_ucx_main_fail(c, status)) {
        c->fail_deferred = false;
        return;
    }
    if (!stalled && c->renew_due && c->ep && !c->unloaded) {
        /* the peer's new endpoint came first: renewed now */
        c->renew_due = false;
        c->fail_deferred = false;
        peer_renew(c);
        return;
    }
    if (!stalled && renew_takes(c, status)) {
        c->fail_deferred = false;
        conn_renew(c, status);
        return;
    }
    if (c->peer_destroyed || (c->pidfd >= 0 && nxl_ucx_pidfd_exited(c->pidfd))) {
        /* a peer on this host: say what happened to it */
        char why[300];
        if (c->peer_destroyed)
            snprintf(why, sizeof(why), "UCX: transfer to agent '%s' failed: that agent, of this "
                     "process, was destroyed", c->name);
        else
            snprintf(why, sizeof(why), "UCX: transfer to agent '%s' failed: its process (pid %d) "
                     "exited (reload its metadata once it is back)", c->name, (int)c->pid);
        ucx_op_t *o;
        LIST_FOREACH(o, &c->u->ops, link)
        if (o->conn == c && o->op && !o->why)
            o->why = strdup(why);
    }
    c->failed = true;
    c->stalled = stalled;
    c->why = status;
    if (stalled)
        nxlt_log(c->u->ctx, NXL_LOG_WARN, "UCX: no transfer to agent '%s' completed for %llu ms; "
                 "declaring the connection lost", c->name,
                 (unsigned long long)(c->u->net.stall_us / 1000));
    else
        nxlt_log(c->u->ctx, NXL_LOG_WARN, "UCX: connection to agent '%s' failed: %s", c->name,
                 ucs_status_string(status));
    /* UCX 1.13 does not always complete a flush pending on a failed
     * endpoint: report every op on it now; each is freed when (if) UCX
     * calls back, or when the transport is destroyed. */
    ucx_op_t *o, *next;
    LIST_FOREACH(o, &c->u->ops, link)
    if (o->conn == c)
        nxl_ucx_op_report(o, status);
    nxl_ucx_rails_close(c); /* its pieces were reported with its ops */
    if (stalled && c->ep) {
        /* over TCP on a cut link, what the kernel still holds of the
         * endpoint's socket (UCX's keepalive messages among it) is
         * dropped, not sent once the link is back (tcpreset.c): a keepalive
         * message arriving after the peer dropped its endpoint for ours
         * makes its UCX answer from a new endpoint to us, which UCX 1.13.1
         * can match onto our closed connection and then destroy off its
         * connection matching (tcp_cm.c:408, nxl-ucx(7) LIMITATIONS) */
        if (nxl_ucx_socks_reset_unacked(&c->socks))
            nxlt_log(c->u->ctx, NXL_LOG_INFO, "UCX: agent '%s': its connection's unacknowledged "
                     "bytes dropped (a TCP reset), not sent once the link is back", c->name);
        /* stop UCX retrying: its requests on the endpoint end as canceled
         * (loopback's closes flushing: see nxl_ucx_load_conn) */
        c->forced = !c->self;
        nxl_ucx_ep_close(c->u, c->ep, c->forced);
        c->ep = NULL;
    }
    /* AM_WRITEs sent, their acknowledgement not come: UCX is done with them
     * (c itself stays: the caller goes on using it; one left is freed with
     * the transport) */
    for (o = LIST_FIRST(&c->u->ops); o; o = next) {
        next = LIST_NEXT(o, link);
        if (o->conn == c && o->amw && o->amw_sent && !o->amw_acked && c->refs > 1)
            nxl_ucx_op_free(o);
    }
}

/* c->ep, to the address in c->addr */
static ucs_status_t ep_create(ucx_conn_t *c)
{
    ucx_t *u = c->u;
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                      (c->self ? 0
                               : UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                     UCP_EP_PARAM_FIELD_ERR_HANDLER),
        .address = (const ucp_address_t *)c->addr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = ep_error, .arg = c},
    };
    /* the TCP sockets it opens (tcpreset.c): reset at a stall on a cut
     * link (nxl_ucx_conn_fail) */
    void *before = c->self ? NULL : nxl_ucx_socks_before();
    u->in_ucx++;
    ucs_status_t st = ucp_ep_create(u->w, &ep, &c->ep);
    u->in_ucx--;
    c->socks.n = 0;
    if (before)
        nxl_ucx_socks_after(before, &c->socks);
    if (st != UCS_OK)
        c->socks.n = 0;
    return st;
}

/* ------------------------------------------------ aborts at a deadline
 *
 * A transfer's deadline passed, or its cancel is not through after the
 * engine's grace (the engine's hook, nxl_ucx_on_deadline), while UCX still
 * holds its buffers: puts and gets that a stopped or hung
 * peer does not take or answer, and a flush that waits for them. UCX 1.13
 * cannot cancel those one by one, so the endpoint to that peer is closed
 * by force (UCP_EP_CLOSE_FLAG_FORCE): UCX discards its transport
 * endpoints, completing what they hold as canceled — over TCP its socket
 * is closed, what it had not written from the buffers is never written;
 * over shared memory the puts were copied into the peer's FIFO when they
 * were sent, and a get's reply for the closed endpoint is dropped. Once
 * that close completed, UCX no longer reads or writes the buffers of any
 * op on the endpoint: the ops are reported then, the timed-out one (its
 * future completes with NXL_ERR_TIMEOUT; a canceled one with
 * NXL_ERR_CANCELED) and every other op on it (with
 * NXL_ERR_TIMEOUT too, and a sentence saying that it went with the
 * connection). The connection stays loaded, as the peer's metadata is
 * still good: a new endpoint to its address is made from the loop right
 * after the close, the keys unpacked again on it (UCX 1.13 refuses a key
 * on another endpoint than its own), and what is posted to the peer from
 * the abort until that endpoint's first message is through waits in the
 * transport (nxl_ucx_reconnects, rma.c's wire_wait); only a failure then
 * is a disconnect.
 * With rails (rails.c) the peer's rail endpoints are closed by force too,
 * and the abort completes once those closes did as well (c->rail_aborts).
 * Copies by cross-memory attach are not aborted: they stop between two
 * system calls on their own (cma.c), stopped peer or not. */

/* the close completed: the aborted ops are reported, those UCX already
 * gave back freed */
static void abort_done(ucx_conn_t *c)
{
    c->abort_req = NULL;
    if (c->rail_aborts) {
        /* its rails' closes not complete yet: the last calls us again
         * (rails.c); meanwhile the abort is still under way (abort_req) */
        c->abort_req = c;
        return;
    }
    c->refs++;
    ucx_op_t *o, *next;
    for (o = LIST_FIRST(&c->u->ops); o; o = next) {
        next = LIST_NEXT(o, link);
        if (o->conn != c || !o->aborted)
            continue;
        nxl_ucx_op_report(o, UCS_ERR_CANCELED);
        /* freed by UCX's callback meanwhile (op_finish), or an AM_WRITE
         * whose acknowledgement will not come: done with */
        if (o->ucx_done || (o->amw && o->amw_sent && !o->amw_acked))
            nxl_ucx_op_free(o);
    }
    /* a new endpoint, from progress (not inside UCX's callback) */
    c->reconnect = true;
    c->u->reconnect_due = true;
    nxl_ucx_kick(c->u);
    nxl_ucx_conn_put(c);
}

static void ep_renew(ucx_conn_t *c, bool rails);

static void conn_abort(ucx_conn_t *c)
{
    ucx_t *u = c->u;
    char why[400];
    snprintf(why, sizeof(why), "UCX: transfer to agent '%s' aborted with its connection: the "
             "deadline of another transfer to it passed, or its cancel did not complete, while "
             "the peer did not take or answer what was sent (stopped, hung or overloaded); its "
             "buffers are free, and the next post to the peer reconnects", c->name);
    unsigned n = 0;
    ucx_op_t *o;
    LIST_FOREACH(o, &u->ops, link)
    if (o->conn == c && o->op && !o->queued && !o->aborted) {
        o->aborted = true;
        n++;
        if (!nxlt_op_canceled(o->op) && !o->why)
            o->why = strdup(why);
    }
    nxlt_log(u->ctx, NXL_LOG_INFO, "UCX: a deadline passed, or a cancel did not complete, with "
             "%u operation%s to agent '%s' held by UCX: its endpoint is closed by force, and the "
             "next post reconnects", n, n == 1 ? "" : "s", c->name);
    /* what the kernels still hold of the old connection must reach the
     * peer before anything of ours on the new one (the fence, below) */
    c->fence = true; /* over TCP only: nxl_ucx_reconnects */
    c->fence_only = false;
    c->fence_until_us = 0;
    ep_renew(c, true);
}

/* c's endpoint (and with @p rails its rails') closed by force; a new one
 * made once UCX completed the closes (abort_done, nxl_ucx_reconnects) */
static void ep_renew(ucx_conn_t *c, bool rails)
{
    ucx_t *u = c->u;
    c->aborted = true;
    c->renew_due = false; /* this renews it */
    c->wiring = true; /* posts wait for the new endpoint (nxl_ucx_reconnects) */
    c->refs++; /* until abort_done */
    if (rails)
        nxl_ucx_rails_abort(c); /* its rails' endpoints too (their pieces) */
    void *r = nxl_ucx_ep_close(u, c->ep, true);
    c->ep = NULL;
    if (r)
        c->abort_req = r;
    else
        abort_done(c);
    nxl_ucx_conn_put(c);
}

void nxl_ucx_abort_done(ucx_conn_t *c)
{
    if (c->abort_req == c)
        abort_done(c);
}

/* ------------------------------------------- the peer's abort, seen here
 *
 * The peer's abort closes its end of our connection too: over TCP UCX
 * shares one socket between its endpoint to us and ours to it, and what we
 * send on ours then is for an endpoint the peer no longer has (our
 * endpoint fails, CONNECTION_RESET or ENDPOINT_TIMEOUT, when UCX reads the
 * reset or when we send). The peer is not lost: its new endpoint's first
 * message (nxl_ucx_reconnects) carries its name; our posts to it wait
 * from then on, and our endpoint to it is renewed as at an abort here
 * (ep_renew: closed by force, a new one to its address, the keys unpacked
 * again) once it fails (RENEW_WAIT_US at most); what of ours was in
 * flight on the old one fails (NXL_ERR_BACKEND, a sentence saying so; the
 * peer is not DOWN). Without that message (a peer of an
 * older nxl, or our endpoint's failure read first), an endpoint that fails
 * with CONNECTION_RESET with nothing of ours on it is renewed the same
 * way, and the peer is lost only if the new endpoint's first message fails
 * too (an ENDPOINT_TIMEOUT is a link cut or a hung peer: lost, as before). A failure with
 * transfers in flight fails them and the connection, as before: a peer
 * that died cannot be told from one that aborted then. */

/* a peer's message asking for a renewal this soon after a renewal on a
 * reset is that reset's abort */
#define RESET_SEEN_US 10000000u
/* asked by the peer, the endpoint is renewed when it fails (the peer's
 * abort closed the connection: UCX reads what the kernel received before
 * that first), or this long after the message at the latest: closed
 * at once, the puts still queued on the old connection reached an
 * endpoint closed here, on which UCX 1.13 aborts the process
 * (ucp_put_handler: "unexpected error") */
#define RENEW_WAIT_US 1000000u

/* the endpoint failure @p status of c renews it (above) */
static bool renew_takes(ucx_conn_t *c, ucs_status_t status)
{
    if (c->self || c->local || c->unloaded || c->renewing || c->aborted || c->wiring ||
        !c->ep || c->abort_req || c->peer_destroyed)
        return false;
    /* a reset only: the peer's abort resets the connection; a timeout is
     * a link cut or a hung peer, where the peer is lost as before (renewing
     * there, UCX 1.13 hit tcp_cm.c:408 destroying the old endpoint once
     * the link was back: check_netns t_link_recover) */
    if (status != UCS_ERR_CONNECTION_RESET)
        return false;
    if (c->pidfd >= 0 && nxl_ucx_pidfd_exited(c->pidfd))
        return false;
    ucx_op_t *o;
    LIST_FOREACH(o, &c->u->ops, link)
    if (o->conn == c && o->op)
        return false; /* they fail with the connection */
    return true;
}

static void conn_renew(ucx_conn_t *c, ucs_status_t status)
{
    nxlt_log(c->u->ctx, NXL_LOG_INFO, "UCX: the endpoint to agent '%s' failed (%s) with nothing "
             "of ours on it: the peer may have closed its end (an abort at a deadline there); a "
             "new endpoint to its address is made, and the peer is lost only if that one fails",
             c->name, ucs_status_string(status));
    c->renewing = true;
    c->reset_renewed_us = nxlt_now_us();
    c->refs++;
    ep_renew(c, false); /* nothing in flight: its rails fail on their own */
    nxl_ucx_conn_put(c);
}

/* From a message (UCX's callback): agent @p from made a new endpoint to us
 * after an abort; ours to it is renewed from the loop, posts wait now */
void nxl_ucx_peer_renewed(ucx_t *u, const char *from)
{
    ucx_conn_t *c = nxl_ucx_conn_named(u, from);
    if (!c || c->self || c->local || c->wiring || c->aborted || c->abort_req || c->renew_due)
        return;
    if (c->reset_renewed_us && nxlt_now_us() - c->reset_renewed_us < RESET_SEEN_US) {
        /* renewed already on the reset of this abort (conn_renew): the
         * endpoint made then shares the peer's new connection, which a
         * second renewal would close */
        c->reset_renewed_us = 0;
        return;
    }
    c->renew_due = true;
    c->renew_at_us = nxlt_now_us() + RENEW_WAIT_US;
    c->wiring = true;
    u->reconnect_due = true;
    nxl_ucx_watch_start(u); /* its time looked at, the agent idle or not */
    nxl_ucx_kick(u);
}

static void peer_renew(ucx_conn_t *c)
{
    ucx_t *u = c->u;
    char why[400];
    snprintf(why, sizeof(why), "UCX: transfer to agent '%s' failed with its connection: the peer "
             "closed its end (an abort at a deadline there) and reconnected; its buffers are "
             "free, and the next post goes over the new connection", c->name);
    unsigned n = 0;
    bool striped = false;
    ucx_op_t *o;
    LIST_FOREACH(o, &u->ops, link)
    if (o->conn == c && o->op && !o->queued && !o->aborted && !o->wire_wait) {
        o->aborted = true;
        n++;
        striped |= o->pieces > 0;
        if (!nxlt_op_canceled(o->op) && !o->why)
            o->why = strdup(why);
    }
    nxlt_log(u->ctx, NXL_LOG_INFO, "UCX: agent '%s' made a new endpoint to us (it aborted its "
             "last one at a deadline): ours to it is renewed%s", c->name,
             n ? ", the operations in flight on it failed" : "");
    c->renewing = true;
    /* its rails fail on their own (what their connections received read
     * first), unless they hold pieces of the ops failed here */
    ep_renew(c, striped);
}

/* ------------------------------------------ the fence after our abort
 *
 * Over TCP our forced close leaves the old connection's bytes to the
 * kernels: this side's unsent queue still goes out (UCX keeps the socket
 * open when it also carries the peer's endpoint to us: 4 MiB of a WRITE
 * were still queued there after the TIMEOUT, check_xfer t_deadline_late
 * on loopback), and the peer's unread receive queue stays; a stopped peer
 * reads both when it resumes, and its UCX applies their puts, over what
 * our new endpoint wrote to the same bytes meanwhile if it reads the two
 * connections at once. So after our abort what is posted to the peer
 * waits, as for the new endpoint, until the peer said that it is done
 * with the old connection: its endpoint back to us failed (its UCX read the close, after every byte
 * before it) or, RENEW_WAIT_US after our new endpoint's first message
 * (the socket left open here: the usual case), it closed that endpoint by
 * force; either way it renews its endpoint to us, and that endpoint's
 * first message, with the drained mark and its name, is the word
 * (nxl_ucx_peer_drained). A new endpoint that opened no TCP socket (not
 * over TCP: shared memory keeps the order of its FIFO) is not fenced. The
 * word not come FENCE_WAIT_US after the new endpoint's first message was
 * through (the peer runs then: one of an nxl without the word), what
 * waits goes out anyway, said at INFO. Posts to other peers are not held. Not covered: the rails' connections
 * (rails.c), and bytes of the old connection still arriving at the peer
 * after its forced close there (a link slower than this side's queue per
 * RENEW_WAIT_US), should its UCX still read the socket for the other
 * direction. */

/* the peer renews after RENEW_WAIT_US at the latest, then makes an
 * endpoint and sends the word on it */
#define FENCE_WAIT_US (RENEW_WAIT_US + 2000000u)

/* the new endpoint's first message is through: true while the fence
 * holds what waits (c->wiring stays set, nxl_ucx_reconnects lets it go) */
static bool fence_holds(ucx_conn_t *c)
{
    if (!c->fence || c->failed || c->fail_deferred || c->unloaded || !c->ep) {
        c->fence = false;
        return false;
    }
    c->wiring = true;
    c->fence_only = true;
    c->fence_until_us = nxlt_now_us() + FENCE_WAIT_US;
    c->u->reconnect_due = true; /* its bound is looked at there */
    nxl_ucx_watch_start(c->u);
    nxl_ucx_kick(c->u);
    return true;
}

/* From a message (UCX's callback): agent @p from renewed its endpoint to
 * us after its old one failed or was closed: nothing more of the old
 * connection is applied there; what waits goes out from the loop */
void nxl_ucx_peer_drained(ucx_t *u, const char *from)
{
    /* not nxl_ucx_conn_named: the word may come before our new endpoint
     * is made (c->ep NULL meanwhile) */
    ucx_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    if (c->fence && !c->unloaded && !c->failed && !strcmp(c->name, from))
        break;
    if (!c)
        return;
    c->fence = false;
    if (c->fence_only) {
        u->reconnect_due = true;
        nxl_ucx_kick(u);
    }
}

/* From nxl_ucx_reconnects: c's fence ends (the word came, the bound
 * passed, or the connection failed) */
static void fence_ends(ucx_conn_t *c)
{
    ucx_t *u = c->u;
    if (!c->fence_only)
        return;
    bool bad = c->failed || c->fail_deferred || c->unloaded;
    if (c->fence && !bad && nxlt_now_us() < c->fence_until_us) {
        u->reconnect_due = true; /* not yet */
        return;
    }
    if (c->fence && !bad)
        nxlt_log(u->ctx, NXL_LOG_INFO, "UCX: agent '%s' did not say within %u ms that the "
                 "connection aborted at a deadline is drained: what waits goes out on the new "
                 "one (bytes of the aborted transfers may still land after it)", c->name,
                 FENCE_WAIT_US / 1000u);
    c->fence = c->fence_only = false;
    c->fence_until_us = 0;
    if (c->renew_due || c->aborted || c->abort_req || c->reconnect)
        return; /* a renewal since: what waits waits for it */
    c->wiring = false;
    nxl_ucx_wired(c);
}

void nxl_ucx_on_deadline(void *state, nxlt_op_t *op)
{
    ucx_t *u = state;
    u->deadline_due = true;
    nxl_ucx_kick(u);
}

/* From progress, after a deadline passed or a cancel's grace ended: the
 * connections that hold a timed-out or canceled op in UCX are aborted */
void nxl_ucx_deadlines(ucx_t *u)
{
    u->deadline_due = false;
    nxl_ucx_am_reads_due(u); /* given up without an abort: their answer is dropped (am.c) */
    /* waiting for a new endpoint (rma.c): nothing of them is with UCX */
    ucx_op_t *w, *wn;
    for (w = LIST_FIRST(&u->ops); w; w = wn) {
        wn = LIST_NEXT(w, link);
        if (w->wire_wait && w->op && nxlt_op_canceled(w->op)) {
            w->wire_wait = false;
            nxl_ucx_op_finish(w, UCS_ERR_CANCELED); /* frees w only */
        }
    }
    ucx_conn_t *c, *next;
    for (c = LIST_FIRST(&u->conns); c; c = next) {
        next = LIST_NEXT(c, link);
        /* its main endpoint out (rails.c): nothing on it to abort; the
         * rails' stall rule takes a rail that holds a piece out */
        if (c->failed || c->fail_deferred || c->self || !c->ep || c->main_out)
            continue;
        ucx_op_t *o;
        LIST_FOREACH(o, &u->ops, link)
        if (o->conn == c && o->op && !o->queued && !o->wire_wait && !o->aborted &&
            nxlt_op_canceled(o->op))
            break;
        if (o)
            conn_abort(c);
    }
}

/* From progress: the connections whose abort completed get a new endpoint
 * to the same address, their keys unpacked on it; what is posted waits
 * until its first message is through (c->wiring). A failure here is a
 * failure of the connection (the peer DOWN). */
void nxl_ucx_reconnects(ucx_t *u)
{
    u->reconnect_due = false;
    ucx_conn_t *c, *next;
    for (c = LIST_FIRST(&u->conns); c; c = next) {
        c->refs++;
        fence_ends(c);
        if (c->renew_due && c->ep && !c->failed && !c->fail_deferred && !c->unloaded &&
            nxlt_now_us() < c->renew_at_us) {
            u->reconnect_due = true; /* not yet: its old endpoint's failure, or the time */
        } else if (c->renew_due) {
            c->renew_due = false;
            if (c->ep && !c->failed && !c->fail_deferred && !c->unloaded) {
                peer_renew(c);
            } else if (!c->aborted && !c->abort_req && !c->reconnect) {
                c->wiring = false; /* failed or unloaded meanwhile: what waits fails */
                nxl_ucx_wired(c);
            }
        }
        next = LIST_NEXT(c, link);
        nxl_ucx_conn_put(c);
    }
    for (c = LIST_FIRST(&u->conns); c; c = next) {
        next = LIST_NEXT(c, link);
        if (!c->reconnect || c->abort_req)
            continue;
        c->reconnect = false;
        if (c->failed || c->fail_deferred || c->unloaded) {
            c->wiring = false;
            c->refs++;
            nxl_ucx_wired(c); /* what waited fails with it */
            next = LIST_NEXT(c, link);
            nxl_ucx_conn_put(c);
            continue;
        }
        /* fenced: only over TCP (the new endpoint opened a socket) */
        ucs_status_t st = ep_create(c);
        if (c->fence)
            c->fence = st == UCS_OK && c->socks.n > 0;
        c->refs++;
        if (st != UCS_OK) {
            c->ep = NULL;
            nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: agent '%s': ucp_ep_create failed after its "
                     "connection was %s: %s", c->name,
                     c->renewing ? "closed at the peer" : "aborted at a deadline",
                     ucs_status_string(st));
            nxl_ucx_conn_fail(c, st, false);
            c->wiring = false;
            nxl_ucx_wired(c);
            next = LIST_NEXT(c, link);
            nxl_ucx_conn_put(c);
            continue;
        }
        c->aborted = false;
        bool renewed = c->renewing;
        ucx_rkey_t *k;
        LIST_FOREACH(k, &c->rkeys, link)
        nxl_ucx_rkey_unpack(c, k); /* a failure: that key's posts fail (UCX says why) */
        /* UCX 1.13 resolves the peer's endpoint id, which software puts
         * and gets (shared memory without cross-memory attach) carry, when
         * a key is unpacked on an endpoint of a new configuration, or for
         * a message with the reply flag. The new endpoint's configuration
         * is the old one's: the message makes UCX resolve it (an
         * acknowledgement of AM_WRITE number 0, which names no WRITE,
         * am_seq starting at 1, and which the peer ignores), and until
         * UCX completed that message (the peer answered) puts and gets
         * wait here (rma.c): on an endpoint still wiring up they went out
         * without the id. */
        /* our name follows: after our own abort, the peer renews its
         * endpoint to us (nxl_ucx_peer_renewed); renewed for the peer
         * (its old endpoint failed or was closed here), the drained mark
         * before it (status byte NXL_UCX_DRAINED) ends the peer's fence
         * (nxl_ucx_peer_drained; an nxl without it finds no WRITE number 0
         * and ignores it) */
        const char *me = nxl_agent_name(nxlt_agent(u->ctx));
        size_t nl = strlen(me);
        ucx_side_t *m = nl < 256 ? calloc(1, sizeof(*m) + 9 + 2 + nl) : NULL;
        if (m) {
            m->len = 9 + 2 + nl;
            m->buf[8] = c->renewing ? NXL_UCX_DRAINED : 0;
            nxl_ucx_name_put(m->buf + 9, me, nl);
            m->hello = c;
            nxl_ucx_side_send_flags(u, c->ep, NXL_UCX_AM_WRITE_ACK, m, UCP_AM_SEND_FLAG_REPLY);
        } else {
            c->wiring = false;
        }
        if (!c->wiring) {
            c->renewing = false;
            if (!fence_holds(c))
                nxl_ucx_wired(c);
        }
        nxlt_log(u->ctx, NXL_LOG_INFO, "UCX: a new endpoint to agent '%s' (the last one was "
                 "%s)%s", c->name, renewed ? "closed at the peer" : "aborted at a deadline",
                 c->fence ? "; posts wait until the peer says the old connection is drained"
                          : "");
        next = LIST_NEXT(c, link);
        nxl_ucx_conn_put(c);
    }
}

/* rails.c: a try of c's main endpoint, taken out: a new endpoint, the keys
 * unpacked on it, and the message of a new endpoint (nxl_ucx_reconnects;
 * the peer renews its endpoint to us); back once UCX completed that
 * message (hello_done). UCS_OK, or why not (no endpoint then). */
ucs_status_t nxl_ucx_main_try(ucx_conn_t *c)
{
    ucx_t *u = c->u;
    ucs_status_t st = ep_create(c);
    if (st != UCS_OK) {
        c->ep = NULL;
        return st;
    }
    ucx_rkey_t *k;
    LIST_FOREACH(k, &c->rkeys, link)
    nxl_ucx_rkey_unpack(c, k);
    const char *me = nxl_agent_name(nxlt_agent(u->ctx));
    size_t nl = strlen(me);
    ucx_side_t *m = nl < 256 ? calloc(1, sizeof(*m) + 9 + 2 + nl) : NULL;
    if (!m)
        return UCS_ERR_NO_MEMORY; /* the caller closes the endpoint */
    m->len = 9 + 2 + nl;
    /* the drained mark: the peer ends a fence of its own with it, and
     * renews nothing (its endpoint to us, should it have failed, is
     * failed over there as ours was) */
    m->buf[8] = NXL_UCX_DRAINED;
    nxl_ucx_name_put(m->buf + 9, me, nl);
    m->hello = c;
    c->wiring = true;
    nxl_ucx_side_send_flags(u, c->ep, NXL_UCX_AM_WRITE_ACK, m, UCP_AM_SEND_FLAG_REPLY);
    if (!c->wiring) /* through at once */
        nxl_ucx_main_hello(c, UCS_OK);
    return UCS_OK;
}

/* rails.c: a try over (its endpoint closed by force there): its message's
 * completion, if it ever comes, names no connection */
void nxl_ucx_main_try_over(ucx_conn_t *c)
{
    ucx_side_t *m;
    LIST_FOREACH(m, &c->u->sides, link)
    if (m->hello == c)
        m->hello = NULL;
    c->wiring = false;
}

nxl_status_t nxl_ucx_load_conn(void *state, const char *agent, const void *info, size_t len,
                               void **out)
{
    ucx_t *u = state;
    unsigned flags;
    ucx_ci_cma_t pc;
    if (ucx_ci_parse(info, len, &flags, &pc, &info, &len) != 0) {
        nxlt_error(u->ctx, "UCX: the connection info of agent '%s' is not this transport's "
                   "(%zu bytes, no nxl UCX header): a different nxl version?", agent, len);
        return NXL_ERR_MISMATCH;
    }
    const void *rails = NULL;
    size_t rails_len = 0;
    if ((flags & CI_RAILS) && nxl_ucx_rails_info_parse(&info, &len, &rails, &rails_len) != 0) {
        nxlt_error(u->ctx, "UCX: the connection info of agent '%s' has a malformed rails "
                   "block", agent);
        return NXL_ERR_MISMATCH;
    }
    /* UCX unpacks its worker address without a length either: it gets a
     * copy followed by UCX_ADDR_PAD bytes of 0xff, where an address cut
     * short reads "no more devices" (0xff is UCX's null resource, and every
     * length, flag and "last" bit set) before it leaves the copy. A forged
     * address is still UCX's to parse (doc/security.md, "Trust"). */
    unsigned char *addr = malloc(len + UCX_ADDR_PAD);
    ucx_conn_t *c = addr ? calloc(1, sizeof(*c)) : NULL;
    if (!c || !(c->name = strdup(agent))) {
        free(c);
        free(addr);
        return NXL_ERR_UNKNOWN;
    }
    memcpy(addr, info, len);
    memset(addr + len, 0xff, UCX_ADDR_PAD);
    /* a peer that copies them but sends no acknowledgement (an older nxl)
     * would leave the WRITE complete before its bytes are there: not those.
     * Nor one that acknowledges only on UCX's reply endpoint (CI_AM_ACK
     * without CI_AM_ACK_NAME, an older nxl whose own default never sent
     * these): that endpoint is not valid where the peer replaced our
     * metadata (am.c), and tests/interop's ping-pong against such a peer
     * had every WRITE+notification of our target's go unacknowledged */
    c->am_write = (flags & CI_AM_WRITE) && (flags & CI_AM_ACK) && (flags & CI_AM_ACK_NAME);
    c->am_read = c->am_write && (flags & CI_AM_READ);
    c->am_bare = c->am_write && (flags & CI_AM_BARE);
    c->u = u;
    c->refs = 1;
    c->pidfd = -1;
    /* Loopback (this agent's own address): an endpoint without peer error
     * handling, so that UCX gives it its self transport, which copies at
     * once in this process. With peer error handling UCX leaves self out
     * (it detects no peer failure) and loops back through shared memory:
     * software puts written into this worker's own receive FIFO, and their
     * completions read back from it, as for a peer. That FIFO is written
     * by every peer on this host too, and one killed between claiming a
     * slot and publishing it leaves a hole that UCX's reader never passes:
     * nothing behind it is read again, and loopback hung there (doc/man/
     * nxl-ucx.7, LIMITATIONS). An endpoint to itself has no peer to lose.
     * It closes flushing: UCX closes by force only endpoints with peer
     * error handling. */
    c->self = len == u->addr_len && !memcmp(info, u->addr, len);
    if (c->self)
        c->am_write = c->am_read = false; /* puts are copies there: no one-message WRITE
                                           * or READ to itself */
    c->addr = addr; /* UCX keeps nothing of it past ucp_ep_create; kept for a new one */
    c->addr_len = len;
    ucs_status_t st = ep_create(c);
    if (st != UCS_OK) {
        nxlt_error(u->ctx, "UCX: ucp_ep_create to agent '%s' failed: %s (no UCX transport of "
                   "this agent reaches it: check UCX_TLS / UCX_NET_DEVICES on both sides)",
                   agent, ucs_status_string(st));
        free(c->addr);
        free(c->name);
        free(c);
        return NXL_ERR_BACKEND;
    }
    c->local = nxl_ucx_live_is_local(info, len);
    if (c->local && (c->peer_addr = malloc(len))) {
        memcpy(c->peer_addr, info, len);
        c->peer_addr_len = len;
    }
    /* metadata of a peer loaded again (the same worker: the same process,
     * which keeps its endpoint to us and its busy_poll_us): what its
     * messages told the connection it replaces holds for this one */
    ucx_conn_t *o;
    LIST_FOREACH(o, &u->conns, link)
    if (!o->unloaded && !o->failed && !o->fail_deferred && o->addr_len == len &&
        !memcmp(o->addr, info, len) && !strcmp(o->name, agent)) {
        c->heard = o->heard;
        c->peer_poll_us = o->peer_poll_us;
        c->peer_seen_us = o->peer_seen_us;
        c->poll_wake = o->poll_wake;
        c->poll_rtt8 = o->poll_rtt8;
        break;
    }
    LIST_INSERT_HEAD(&u->conns, c, link);
    nxl_ucx_rails_connect(u, c, rails, rails_len);
    /* not to another agent of this process: the process outlives the
     * agent, and its memory stays mapped after the agent is gone. Its
     * process is watched with cma=off too; copies need cma on both sides */
    if ((flags & CI_CMA) && u->cma_here && !c->local)
        nxl_ucx_cma_connect(u, c, &pc,
                            u->cma_mode != CMA_OFF && u->cma_liov && !(flags & CI_NO_CMA));
    nxl_ucx_kick(u);
    *out = c;
    return NXL_SUCCESS;
}

void nxl_ucx_unload_conn(void *state, void *conn)
{
    ucx_conn_t *c = conn;
    c->unloaded = true;
    nxl_ucx_cma_close(c);
    nxl_ucx_rails_close(c);
    /* a peer known dead, or another agent of this process (which is not
     * progressed while this one tears down), would never answer a flushing
     * close: those are closed at once */
    if (c->ep) {
        c->forced = (c->failed || c->fail_deferred || c->local) && !c->self;
        nxl_ucx_ep_close(c->u, c->ep, c->forced);
    }
    c->ep = NULL;
    nxl_ucx_conn_put(c);
}

nxl_status_t nxl_ucx_conn_info(void *state, void **buf, size_t *len)
{
    ucx_t *u = state;
    unsigned flags = CI_AM_WRITE | CI_AM_ACK | CI_AM_ACK_NAME | CI_AM_READ | CI_AM_BARE |
                     (u->cma_here ? CI_CMA | (u->cma_mode == CMA_OFF ? CI_NO_CMA : 0) : 0) |
                     (u->rails ? CI_RAILS : 0);
    size_t rl = nxl_ucx_rails_info_len(u), h = ucx_ci_hdr(flags);
    unsigned char *b = malloc(h + rl + u->addr_len);
    if (!b)
        return NXL_ERR_UNKNOWN;
    ucx_ci_cma_t me = u->cma_me;
    me.cookie_addr = (uintptr_t)u->cma_cookie;
    me.cookie = u->cma_cookie[1];
    ucx_ci_pack(b, flags, &me, u->addr, u->addr_len);
    if (rl) { /* the rails block goes before the worker address */
        memmove(b + h + rl, b + h, u->addr_len);
        nxl_ucx_rails_info_pack(u, b + h);
    }
    *buf = b;
    *len = h + rl + u->addr_len;
    return NXL_SUCCESS;
}
