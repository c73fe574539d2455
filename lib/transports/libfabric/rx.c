/* SPDX-License-Identifier: BSD-3-Clause */
/* LIBFABRIC: receives: notifications, one-message WRITEs, revocations */
#include "lf.h"

void nxl_lf_rx_post(lf_t *u, lf_rx_t *rx)
{
    if (u->ep_closed)
        return;
    ssize_t r = fi_recv(u->fids.ep, rx->buf, RXSZ, u->rx_desc, FI_ADDR_UNSPEC, rx);
    if (r == 0) {
        rx->posted = true;
        return;
    }
    if (r != -FI_EAGAIN)
        nxlt_log(u->ctx, NXL_LOG_WARN, "LIBFABRIC: fi_recv failed: %s; retrying",
                 fi_strerror((int)-r));
    u->rx_unposted++;
}

void nxl_lf_rx_repost_all(lf_t *u)
{
    if (!u->rx_unposted)
        return;
    u->rx_unposted = 0;
    for (unsigned i = 0; i < NRX; i++)
        if (!u->rx[i].posted)
            nxl_lf_rx_post(u, &u->rx[i]);
}

/* A WRITE with its notification in one message: every element checked
 * against this agent's registrations before a byte is written; then the
 * notification. A message that fails a check is dropped whole, with a log
 * line: its initiator has seen its send complete (nxl-libfabric(7): the one-message
 * WRITE's guarantee). */
static void amw_recv(lf_t *u, const unsigned char *b, size_t len)
{
    const unsigned char *end = b + len;
    char from[256] = "?";
    const char *bad = NULL;
    size_t nl = len >= 2 ? b[1] : 0;
    if (nl == 0 || len < 2 + nl + 4) {
        bad = "malformed header";
        goto drop;
    }
    memcpy(from, b + 2, nl);
    from[nl] = 0;
    const unsigned char *msg;
    size_t ml;
    bad = nxl_amw_body_apply(u->ctx, b + 2 + nl, end, &msg, &ml);
    if (bad)
        goto drop;
    u->net.hit = true;
    nxlt_notif_recv(u->ctx, from, msg, ml);
    return;
drop:
    nxlt_log(u->ctx, NXL_LOG_ERROR, "LIBFABRIC: a WRITE of %zu bytes from agent '%s' was dropped, "
             "and its notification with it: %s", len, from, bad);
}

void nxl_lf_rx_done(lf_t *u, lf_rx_t *rx, size_t len)
{
    rx->posted = false;
    const unsigned char *b = rx->buf;
    if (len >= 1 && b[0] == AMW_TAG) {
        amw_recv(u, b, len);
        nxl_lf_rx_post(u, rx);
        return;
    }
    if (len >= 1 && b[0] == LF_RV_TAG) {
        lf_rv_t rv;
        const char *bad = lf_rv_parse(b, len, &rv);
        if (bad)
            nxlt_log(u->ctx, NXL_LOG_WARN, "LIBFABRIC: malformed region revocation of %zu bytes "
                     "dropped: %s", len, bad);
        else
            nxlt_remote_revoked(u->ctx, rv.from, (nxl_mem_t)rv.type, rv.dev, rv.addr, rv.len);
        u->net.hit = true;
        nxl_lf_rx_post(u, rx);
        return;
    }
    size_t nl = len >= 2 ? (size_t)b[0] << 8 | b[1] : 0;
    if (len < 2 || nl == 0 || nl > 255 || 2 + nl > len) {
        nxlt_log(u->ctx, NXL_LOG_WARN, "LIBFABRIC: malformed notification of %zu bytes dropped",
                 len);
    } else {
        char from[256];
        memcpy(from, b + 2, nl);
        from[nl] = 0;
        u->net.hit = true;
        uint64_t now = nxlt_now_us();
        if (u->bell_fd >= 0 && u->busy_until_us > now) {
            lf_conn_t *c;
            LIST_FOREACH(c, &u->conns, link)
            if (c->bell_len && !strcmp(c->name, from))
                c->heard_us = now;
        }
        nxlt_notif_recv(u->ctx, from, b + 2 + nl, len - 2 - nl);
    }
    nxl_lf_rx_post(u, rx);
}

/* the receive buffers for notifications, registered (FI_MR_LOCAL) and posted */
nxl_status_t nxl_lf_rx_start(lf_t *u)
{
    u->rxmem = malloc((size_t)NRX * RXSZ);
    if (!u->rxmem) {
        nxlt_error(u->ctx, "LIBFABRIC: out of memory for notification buffers");
        return NXL_ERR_UNKNOWN;
    }
    if (u->mr_local) {
        if (nxl_lf_mr_reg(u, u->rxmem, (size_t)NRX * RXSZ, FI_RECV, &u->fids.rx_mr, NULL,
                          "the notification buffers") != NXL_SUCCESS)
            return NXL_ERR_BACKEND;
        u->rx_desc = fi_mr_desc(u->fids.rx_mr);
    }
    for (unsigned i = 0; i < NRX; i++) {
        u->rx[i].c.kind = CTX_RX;
        u->rx[i].buf = u->rxmem + (size_t)i * RXSZ;
        nxl_lf_rx_post(u, &u->rx[i]);
    }
    return NXL_SUCCESS;
}
