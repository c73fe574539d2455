/* SPDX-License-Identifier: BSD-3-Clause */
/* A small WRITE with its notification in one message, as the network
 * transports carry it (UCX's AM_WRITE, LIBFABRIC's 'W' message): after a
 * header of each transport's own (the sender's name), the same body:
 *
 *   [u32 notification length][notification]
 *   [u32 n][n x (u64 remote address, u32 length)][the n elements' bytes]
 *
 * (integers big endian, ../common/be.h). Built by the initiator, checked
 * and copied into place by the target.
 *
 * Header-only (static inline): compiled into each transport, nothing of it
 * exported. */
#ifndef NXL_AMWRITE_H
#define NXL_AMWRITE_H

#include <nxl/transport.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "be.h"

/* bytes the body of x takes, its elements holding data bytes */
static inline size_t nxl_amw_body_size(const nxlt_xfer_t *x, size_t data)
{
    return 4 + x->notif_len + 4 + x->n * 12 + data;
}

/* writes the body of x at w but the elements' bytes (nxl_amw_body_size
 * of no data); returns its end, where those bytes go */
static inline unsigned char *nxl_amw_body_pack_head(unsigned char *w, const nxlt_xfer_t *x)
{
    nxl_be_put(w, x->notif_len, 4), w += 4;
    if (x->notif_len)
        memcpy(w, x->notif, x->notif_len), w += x->notif_len;
    nxl_be_put(w, x->n, 4), w += 4;
    for (size_t i = 0; i < x->n; i++, w += 12) {
        nxl_be_put(w, x->iov[i].raddr, 8);
        nxl_be_put(w + 8, x->iov[i].len, 4);
    }
    return w;
}

/* writes the elements' bytes of x at w; returns their end */
static inline unsigned char *nxl_amw_body_pack_data(unsigned char *w, const nxlt_xfer_t *x)
{
    for (size_t i = 0; i < x->n; i++)
        memcpy(w, x->iov[i].laddr, x->iov[i].len), w += x->iov[i].len;
    return w;
}

/* writes the body of x at w (nxl_amw_body_size bytes); returns its end */
static inline unsigned char *nxl_amw_body_pack(unsigned char *w, const nxlt_xfer_t *x)
{
    w = nxl_amw_body_pack_head(w, x);
    for (size_t i = 0; i < x->n; i++)
        memcpy(w, x->iov[i].laddr, x->iov[i].len), w += x->iov[i].len;
    return w;
}

/* The target's side: the body at b (up to end). Every element is checked
 * before any byte is written: inside one DRAM region registered with this
 * transport (the engine's table: a region leaves it before revoke() tells
 * the peers, so a WRITE into a region deregistered meanwhile is dropped;
 * DRAM of device 0, the wire names no device); then each element is copied
 * into place. NULL, with the notification in *msg and *msg_len; or why the
 * message is dropped, nothing written. */
static inline const char *nxl_amw_body_apply(nxlt_ctx_t *ctx, const unsigned char *b,
                                             const unsigned char *end,
                                             const unsigned char **msg, size_t *msg_len)
{
    if ((size_t)(end - b) < 4)
        return "malformed header";
    uint64_t ml = nxl_be_get(b, 4);
    b += 4;
    if ((size_t)(end - b) < ml + 4)
        return "notification longer than the message";
    const unsigned char *m = b;
    b += ml;
    uint64_t n = nxl_be_get(b, 4);
    b += 4;
    if ((size_t)(end - b) / 12 < n)
        return "more elements than the message holds";
    const unsigned char *el = b, *payload = b + 12 * n;
    size_t at = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t ra = nxl_be_get(el + 12 * i, 8), l = nxl_be_get(el + 12 * i + 8, 4);
        if ((size_t)(end - payload) - at < l)
            return "elements longer than the message";
        if (!nxlt_mem_registered(ctx, NXL_DRAM, 0, ra, l))
            return "an element outside every region registered here (deregistered meanwhile?)";
        at += l;
    }
    at = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t ra = nxl_be_get(el + 12 * i, 8), l = nxl_be_get(el + 12 * i + 8, 4);
        memcpy((void *)(uintptr_t)ra, payload + at, l);
        at += l;
    }
    *msg = m;
    *msg_len = ml;
    return NULL;
}

#endif /* NXL_AMWRITE_H */
