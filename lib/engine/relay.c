/* SPDX-License-Identifier: BSD-3-Clause */
/* Notifications of transfers over transports that carry none.
 *
 * A transport without a wire of its own (CUDA IPC between processes, POSIX
 * within the agent) cannot deliver a transfer's notification. The rule,
 * for every transport: when a transfer with a notification runs over a
 * backend without NXLT_CAP_NOTIF, the engine sends the notification
 * through another backend of the agent that has NXLT_CAP_NOTIF and a
 * connection to the same remote agent (the first in preference order),
 * once the data transfer completed successfully, and completes the
 * transfer's future when that send completed. A failure of either is the
 * future's status. nxl_xfer_make() and nxl_xfer_set_notif() accept such a
 * transfer only when a relay exists.
 *
 * Mechanics: the transfer's op carries a relay record (op->relay). When the
 * transport reports the data op done with success (and the future was not
 * canceled meanwhile), nxli_relay_done() moves the future onto a new op on
 * the relay backend and sends the notification; that op's completion then
 * completes the future as any op's does. The future is never left without
 * an op, so cancel, peer loss and teardown treat it as usual. */
#include "internal.h"

#include <string.h>

struct nxli_relay {
    nxl_backend_t *via;     /* carries the notification */
    const char *data;       /* name of the transport that moved the data */
    nxli_remote_t *remote;  /* held while the data moves (NULL once the notification went out:
                             * the relay backend's op holds its connection) */
    char peer[NXLI_NAME_MAX];
    bool sending;           /* the op is the notification's */
    size_t len;
    char msg[];
};

nxl_backend_t *nxli_relay_backend(nxl_agent_t *a, const nxl_backend_t *data,
                                  const nxli_remote_t *r)
{
    for (int i = 0; i < a->nbackends; i++) {
        nxl_backend_t *b = a->backends[i];
        if (b != data && (b->ops->caps & NXLT_CAP_NOTIF) && r->conn[i])
            return b;
    }
    return NULL;
}

nxl_status_t nxli_relay_check(nxl_agent_t *a, const char *call, const nxl_backend_t *b,
                              const nxli_remote_t *r)
{
    if ((b->ops->caps & NXLT_CAP_NOTIF) || nxli_relay_backend(a, b, r))
        return NXL_SUCCESS;
    nxli_err(a, "%s: transport %s carries no notifications and no transport of agent '%s' "
                "that does (UCX) reaches agent '%s' to send it after the data; create one on "
                "both agents and load the metadata again, or transfer without a notification",
             call, b->ops->name, a->name, r->name);
    return NXL_ERR_NOT_SUPPORTED;
}

nxl_status_t nxli_relay_attach(nxlt_op_t *op, nxli_remote_t *r, const void *msg, size_t len)
{
    nxl_agent_t *a = op->agent;
    nxl_backend_t *via = nxli_relay_backend(a, op->backend, r);
    if (!via)
        return nxli_relay_check(a, "nxl_xfer_post", op->backend, r);
    struct nxli_relay *rl = malloc(sizeof(*rl) + len + 1);
    if (!rl) {
        nxli_err(a, "nxl_xfer_post: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    rl->via = via;
    rl->data = op->backend->ops->name;
    rl->remote = r;
    NXLI_TLOCK(a);
    r->refs++;
    NXLI_TUNLOCK(a);
    snprintf(rl->peer, sizeof(rl->peer), "%s", r->name);
    rl->sending = false;
    rl->len = len;
    if (len)
        memcpy(rl->msg, msg, len);
    op->relay = rl;
    return NXL_SUCCESS;
}

void nxli_relay_free(nxlt_op_t *op)
{
    struct nxli_relay *rl = op->relay;
    if (!rl)
        return;
    op->relay = NULL;
    nxli_remote_put(rl->remote);
    free(rl);
}

/* completes the future of @p op with a sentence of its own, frees the op */
static void finish(nxlt_op_t *op, nxl_status_t st, const char *why)
{
    nxl_future_t *f = op->future;
    f->op = NULL;
    op->future = NULL;
    if (f->cancel_wait)
        nxli_future_complete_canceled(f);
    else
        nxli_future_complete(f, st, why);
    nxli_op_free(op);
}

/* @return true when it took over the op (the caller does nothing more) */
bool nxli_relay_done(nxlt_op_t *op, nxl_status_t st, const char *why)
{
    struct nxli_relay *rl = op->relay;
    nxl_future_t *f = op->future;
    if (!f || f->cancel_wait || st != NXL_SUCCESS) {
        if (!rl->sending || !f || st == NXL_SUCCESS)
            return false; /* canceled, aborted, or the data failed: as any op */
        char s[NXLI_ERR_MAX + NXLI_NAME_MAX + 256];
        snprintf(s, sizeof(s), "%s moved the data to agent '%s', but its notification through %s "
                               "failed: %s", rl->data, rl->peer, rl->via->ops->name,
                 why ? why : nxl_strerror(st));
        finish(op, st, s);
        return true;
    }
    if (rl->sending)
        return false; /* the notification went out: the future succeeds */
    /* the data landed: the notification follows on the relay backend */
    nxl_agent_t *a = op->agent;
    nxlt_op_t *nop = nxli_op_new(a, rl->via, f); /* f->op moves to it */
    if (!nop) {
        f->op = op;
        finish(op, NXL_ERR_UNKNOWN, "out of memory sending a transfer's notification");
        return true;
    }
    op->future = NULL;
    op->relay = NULL;
    nop->relay = rl;
    rl->sending = true;
    nxli_op_free(op);
    a->err[0] = 0;
    nxli_remote_t *r = rl->remote;
    rl->remote = NULL;
    nop->in_call = true; /* a report inside notif_send waits until it returned */
    nxl_status_t s2 = rl->via->ops->notif_send(rl->via->state, nop, r->conn[rl->via->index],
                                               rl->msg, rl->len);
    nop->in_call = false;
    if (s2 == NXL_SUCCESS) {
        nxli_op_call_end(nop, s2);
    } else {
        nop->reported = false; /* a failed call started nothing */
        free(nop->early_why);
        nop->early_why = NULL;
        char s[NXLI_ERR_MAX + NXLI_NAME_MAX + 256];
        snprintf(s, sizeof(s), "%s moved the data to agent '%s', but %s could not send its "
                               "notification: %s", rl->data, rl->peer, rl->via->ops->name,
                 a->err[0] ? a->err : nxl_strerror(s2));
        finish(nop, s2, s);
    }
    /* the relay backend's op holds what it needs of the connection; the
     * remote agent may go when its last transfer is released */
    nxli_remote_put(r);
    return true;
}
