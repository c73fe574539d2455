/* SPDX-License-Identifier: BSD-3-Clause */
/* LIBFABRIC: progress: reading the CQ, busy polling, the timers, the
 * stall watch */
#include "lf.h"

static void op_elem_done(lf_op_t *o, int err, const char *text)
{
    lf_t *u = o->u;
    if (u->tx_inflight)
        u->tx_inflight--;
    if (o->conn->tx_out)
        o->conn->tx_out--;
    o->conn->net.progress_us = nxlt_now_us();
    nxl_lf_shut_done(o);
    if (err) {
        if (!o->err) {
            o->err = err;
            free(o->errtxt);
            o->errtxt = text ? strdup(text) : NULL;
        }
        o->stopped = true;
        /* o is not counted complete yet: conn_fail reports it but cannot free it;
         * an op aborted at a deadline ends so (its connection closed on purpose) */
        if (nxl_lf_is_disconnect(err) && !o->aborted && !o->conn->failed && !o->conn->self)
            nxl_lf_conn_fail(o->conn, err, text, false);
    }
    o->completed++;
    if (o->notif_posted && !o->notif_counted && o->completed == o->posted) {
        /* the notification is the last thing posted of an op */
        o->notif_counted = true;
        u->notif_inflight--;
    }
    /* writes done: the notification may go now */
    if (o->op && !o->stopped && o->want_notif && !o->notif_posted && o->next == o->n &&
        o->completed == o->posted && !nxlt_op_canceled(o->op)) {
        if (!o->queued && nxl_lf_try_post(o, false) == NXL_IN_PROG)
            nxl_lf_enqueue(o);
    }
    if (!o->queued)
        nxl_lf_op_check(o);
}

static void on_err_entry(lf_t *u, struct fi_cq_err_entry *e)
{
    char text[256] = "";
    const char *s = fi_cq_strerror(u->fids.cq, e->prov_errno, e->err_data, text, sizeof(text));
    if (s != text)
        snprintf(text, sizeof(text), "%s", s ? s : "");
    lf_ctx_t *c = e->op_context;
    int err = e->err ? e->err : FI_EOTHER;
    if (!c) {
        /* rxm reports some failures without an operation: nothing to
         * attribute them to; stalled operations are caught by the watch */
        char full[320];
        nxl_lf_err_text(err, text, full, sizeof(full));
        if (u->ctx_less_errors++ < 5)
            nxlt_log(u->ctx, NXL_LOG_WARN, "LIBFABRIC: provider %s reported an error with no "
                     "operation attached: %s", u->prov, full);
        return;
    }
    if (c->kind == CTX_RX) {
        lf_rx_t *rx = (lf_rx_t *)c;
        rx->posted = false;
        if (err != FI_ECANCELED) {
            char full[320];
            nxl_lf_err_text(err, text, full, sizeof(full));
            nxlt_log(u->ctx, NXL_LOG_WARN, "LIBFABRIC: a notification receive failed: %s%s", full,
                     err == FI_ETRUNC ? "; a notification longer than the buffers was dropped"
                                      : "");
            nxl_lf_rx_post(u, rx);
        }
        return;
    }
    lf_op_t *o = (lf_op_t *)c;
    /* nxl cancels nothing itself: a provider that cancels an operation
     * (rxm, when the peer's connection shuts down: ENOTCONN) lost the peer */
    int perr = e->prov_errno < 0 ? -e->prov_errno : e->prov_errno;
    if (err == FI_ECANCELED || nxl_lf_is_disconnect(perr))
        err = nxl_lf_is_disconnect(perr) ? perr : FI_ECONNABORTED;
    /* sockets fails a send with EIO in one place only: its progress engine
     * found the connection to the peer closed ("Peer disconnected") */
    else if (err == FI_EIO && !strcmp(u->prov, "sockets"))
        err = FI_ECONNRESET;
    /* a flushed operation's detail is the errno of whatever ran last */
    char full[320];
    nxl_lf_err_text(err,
                    e->err == FI_ECANCELED ? "the provider canceled the operation: its "
                                             "connection to the peer shut down"
                                           : text,
                    full, sizeof(full));
    op_elem_done(o, err, full);
}

/* Reads the CQ until it is empty or the turn's budget is spent; returns
 * how many entries were handled (*more: the budget ran out). */
unsigned nxl_lf_drain(lf_t *u, bool *more)
{
    struct fi_cq_msg_entry e[CQ_BATCH];
    unsigned n = 0;
    *more = false;
    if (u->ep_closed)
        return 0;
    for (int b = 0; b < DRAIN_BATCHES; b++) {
        ssize_t r = fi_cq_read(u->fids.cq, e, CQ_BATCH);
        if (r == -FI_EAGAIN)
            return n;
        if (r == -FI_EAVAIL) {
            struct fi_cq_err_entry err;
            memset(&err, 0, sizeof(err));
            if (fi_cq_readerr(u->fids.cq, &err, 0) == 1) {
                on_err_entry(u, &err);
                n++;
            }
            continue;
        }
        if (r < 0) {
            nxlt_log(u->ctx, NXL_LOG_ERROR, "LIBFABRIC: fi_cq_read failed: %s",
                     fi_strerror((int)-r));
            return n;
        }
        for (ssize_t i = 0; i < r; i++) {
            lf_ctx_t *c = e[i].op_context;
            if (!c)
                continue;
            if (c->kind == CTX_RX)
                nxl_lf_rx_done(u, (lf_rx_t *)c, e[i].len);
            else
                op_elem_done((lf_op_t *)c, 0, NULL);
        }
        n += (unsigned)r;
        if (r < CQ_BATCH)
            return n;
    }
    *more = true;
    return n;
}

static void run_checkq(lf_t *u)
{
    lf_op_t *o;
    while ((o = TAILQ_FIRST(&u->checkq))) {
        TAILQ_REMOVE(&u->checkq, o, clink);
        o->checkq = false;
        if (o->conn->self && o->op && o->want_notif && !o->notif_counted &&
            !nxlt_op_canceled(o->op)) {
            /* loopback notification: after the data, which moved at post */
            o->notif_counted = true;
            u->net.hit = true;
            nxlt_notif_recv(u->ctx, nxl_agent_name(nxlt_agent(u->ctx)), o->msg + 2 + o->msg[1],
                            o->msg_len - 2 - o->msg[1]);
        }
        nxl_lf_op_check(o);
    }
}

static bool remote_activity(lf_t *u);

/* Busy polling: spins on the CQ for a short slice, until something
 * completes or anything else in the loop is ready to run. */
static void spin(lf_t *u, unsigned bp)
{
    if (nxlt_loop_busy(u->ctx))
        return;
    uint64_t end = nxlt_now_us() + SPIN_SLICE_US;
    if (end > u->busy_until_us)
        end = u->busy_until_us;
    u->net.hit = false;
    for (unsigned i = 1;; i++) {
        bool more;
        /* a peer's RMA into our memory is activity too, though the CQ shows none */
        bool remote = !(i & 15) && remote_activity(u);
        if (nxl_lf_drain(u, &more) || u->net.hit) {
            nxl_lf_resume(u);
            u->busy_until_us = nxlt_now_us() + bp;
            return;
        }
        if (remote)
            u->busy_until_us = nxlt_now_us() + bp;
        if (!(i & 15) &&
            (nxlt_now_us() >= end || nxlt_loop_busy(u->ctx)))
            return;
    }
}

static void poll_schedule(lf_t *u, bool active)
{
    bool busy = u->net.inflight || !TAILQ_EMPTY(&u->waitq);
    if (active)
        u->poll_us = POLL_MIN_US;
    else
        u->poll_us = u->poll_us * 2 > u->poll_max_us ? u->poll_max_us : u->poll_us * 2;
    if (busy && u->poll_us > POLL_ACTIVE_MAX_US)
        u->poll_us = POLL_ACTIVE_MAX_US;
    nxlt_timer_stop(u->tm_poll);
    nxlt_timer_start(u->tm_poll, u->poll_us);
}

/* Did a peer touch our memory since we last looked? (Serving a peer's
 * READ or delivery-complete WRITE puts nothing in our CQ.) From a timer,
 * the RMA-event counter says; in fd mode, the wait fd being readable. */
static bool remote_activity(lf_t *u)
{
    if (u->fids.rma_cntr) {
        uint64_t c = fi_cntr_read(u->fids.rma_cntr);
        bool changed = c != u->rma_seen;
        u->rma_seen = c;
        return changed;
    }
    if (u->wait_fd >= 0) {
        struct pollfd pf = {.fd = u->wait_fd, .events = POLLIN};
        return poll(&pf, 1, 0) > 0;
    }
    return false;
}

/* Connections a post found lost (fail_deferred): failed here, from the loop. */
static void fail_deferred(lf_t *u)
{
    lf_conn_t *c, *cn;
    for (c = LIST_FIRST(&u->conns); c; c = cn) {
        cn = LIST_NEXT(c, link);
        if (c->fail_deferred && !c->failed) {
            char why[160];
            if (c->peer_closed)
                snprintf(why, sizeof(why), "%s", LF_PEER_CLOSED);
            else
                snprintf(why, sizeof(why), "a post was refused: %s",
                         fi_strerror(c->fail_deferred));
            c->refs++;
            nxl_lf_conn_fail(c, c->fail_deferred, why, false);
            cn = LIST_NEXT(c, link);
            nxl_lf_conn_put(c);
        }
    }
}

/* fd mode, nothing to do: sleep on the wait fd once fi_trywait says it is
 * safe; what completes meanwhile is delivered first, and a provider that
 * keeps refusing gets the next loop turn (kick) */
static void sleep_or_kick(lf_t *u)
{
    struct fid *f = &u->fids.cq->fid;
    bool more;
    int tries;
    for (tries = 0; tries < TRY_ROUNDS; tries++) {
        int r = fi_trywait(u->fids.fabric, &f, 1);
        if (r == 0 || r == -FI_ENOSYS)
            break; /* safe to sleep on the fd */
        if (nxl_lf_drain(u, &more)) {
            nxl_lf_resume(u);
            run_checkq(u);
            nxl_lf_kick(u); /* deliver first */
            break;
        }
    }
    if (tries == TRY_ROUNDS)
        nxl_lf_kick(u);
}

/* woke: called because the CQ's wait fd was readable */
void nxl_lf_progress(lf_t *u, bool woke)
{
    if (u->in_progress || u->ep_closed)
        return;
    u->in_progress = true;
    nxl_lf_shm_notice_closed(u);
    fail_deferred(u);
    bool more;
    unsigned n = nxl_lf_drain(u, &more);
    if (u->deadline_due) {
        nxl_lf_deadlines(u); /* after the drain: what completed is not aborted */
        n += nxl_lf_drain(u, &more);
    }
    nxl_lf_resume(u);
    nxl_lf_rx_repost_all(u);
    run_checkq(u);
    unsigned bp = nxlt_busy_poll_us(u->ctx);
    /* A peer's RMA into our memory: on the wait fd (tcp), it extends the
     * busy-poll window (a READ or a delivery-complete WRITE waits for us);
     * from a timer (shm's one-sided writes) it only keeps the poll short —
     * spinning on shm's progress would take the region lock the peer's
     * posts need (a 4 KiB WRITE took 250 us instead of 9) */
    bool remote = u->fids.rma_cntr ? remote_activity(u) : woke;
    if ((n || (remote && u->wait_fd >= 0)) && bp)
        u->busy_until_us = nxlt_now_us() + bp;
    if (more) {
        nxl_lf_kick(u);
    } else if (u->busy_until_us && nxlt_now_us() < u->busy_until_us) {
        /* from a timer, one CQ read per loop turn (shm's region lock, above) */
        if (!n && u->wait_fd >= 0)
            spin(u, bp);
        nxl_lf_kick(u); /* busy-poll window: keep polling from the loop */
    } else if (u->wait_fd < 0) {
        poll_schedule(u, n > 0 || u->net.hit || remote);
        u->net.hit = false;
    } else if (u->net.hit || nxlt_loop_busy(u->ctx)) {
        /* something is ready for the loop (a delivery): let it run first;
         * the next turn reads the CQ again and then decides to sleep */
        u->net.hit = false;
        nxl_lf_kick(u);
    } else {
        sleep_or_kick(u);
    }
    u->in_progress = false;
}

void nxl_lf_on_fd(nxlt_io_t *io, int fd, unsigned ready, void *arg) { nxl_lf_progress(arg, true); }
void nxl_lf_on_kick(nxlt_timer_t *t, void *arg) { nxl_lf_progress(arg, false); }
void nxl_lf_on_poll(nxlt_timer_t *t, void *arg) { nxl_lf_progress(arg, false); }
void nxl_lf_on_retry(nxlt_timer_t *t, void *arg) { nxl_lf_progress(arg, false); }

/* While ops are in flight: progress now and then, and declare lost a peer
 * whose operations stopped completing. */
void nxl_lf_on_watch(nxlt_timer_t *t, void *arg)
{
    lf_t *u = arg;
    nxl_lf_progress(u, false);
    uint64_t now = nxlt_now_us();
    lf_conn_t *c, *next;
    for (c = LIST_FIRST(&u->conns); c; c = next) {
        next = LIST_NEXT(c, link);
        if (!c->failed && !c->self && nxl_netop_stalled(&u->net, &c->net, now)) {
            c->refs++;
            nxl_lf_conn_fail(c, FI_ETIMEDOUT, NULL, true);
            next = LIST_NEXT(c, link);
            nxl_lf_conn_put(c);
        } else if (c->net.inflight && !c->failed && !c->tx_out && c->refused_us &&
                   now - c->refused_us >= PROBE_AFTER_US && !c->probe_io &&
                   now - c->probed_us >= PROBE_EVERY_US) {
            c->refs++;
            nxl_lf_probe_start(c);
            next = LIST_NEXT(c, link);
            nxl_lf_conn_put(c);
        }
    }
    /* ops canceled while waiting for room */
    lf_op_t *o, *on;
    for (o = TAILQ_FIRST(&u->waitq); o; o = on) {
        on = TAILQ_NEXT(o, wlink);
        if (o->op && nxlt_op_canceled(o->op)) {
            o->stopped = true;
            TAILQ_REMOVE(&u->waitq, o, wlink);
            o->queued = false;
            nxl_lf_op_check(o);
        }
    }
    if (u->net.inflight)
        nxl_lf_watch_start(u);
}
