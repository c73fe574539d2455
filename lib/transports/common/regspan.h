/* SPDX-License-Identifier: BSD-3-Clause */
/* What a registration of the transports that keep one record a region
 * (CUDA, GDS) begins with: its memory type and the span the application
 * gave, and nxlt_regspan_new, the record made for reg(). Header-only. */
#ifndef NXL_REGSPAN_H
#define NXL_REGSPAN_H

#include <nxl/transport.h>

#include <stdint.h>
#include <stdlib.h>

typedef struct nxlt_regspan {
    nxl_mem_t type;
    uintptr_t addr;          /* VRAM, DRAM: the region; FILE: the offset */
    size_t len;
} nxlt_regspan_t;

/* A zeroed record of size bytes that begins with an nxlt_regspan_t, its
 * span set from type and d; NULL after an error "WHO: out of memory" */
static inline void *nxlt_regspan_new(nxlt_ctx_t *ctx, const char *who, size_t size,
                                     nxl_mem_t type, const nxl_desc_t *d)
{
    nxlt_regspan_t *s = calloc(1, size);
    if (!s) {
        nxlt_error(ctx, "%s: out of memory", who);
        return NULL;
    }
    s->type = type;
    s->addr = d->addr;
    s->len = d->len;
    return s;
}

#endif
