/* SPDX-License-Identifier: BSD-3-Clause */
/* The connection info and region keys of the transports that reach only
 * this agent itself (POSIX, OBJ, GDS): a magic, the transport instance's random
 * token, a registration id. Parsed here, header-only, so that
 * tests/fuzz/fuzz_wire.c calls the same code as the transports. */
#ifndef NXL_BLOB_WIRE_H
#define NXL_BLOB_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct nxlt_blob24 {
    uint32_t magic;
    uint32_t pad;
    uint64_t token;
    uint64_t regid;
} nxlt_blob24_t;

/* A blob for the agent's metadata (connection info: regid 0; a key), in
 * malloc'd memory the engine frees: 0, or -1 when out of memory */
static inline int nxlt_blob24_new(uint32_t magic, uint64_t token, uint64_t regid, void **buf,
                                  size_t *len)
{
    nxlt_blob24_t *b = calloc(1, sizeof(*b));
    if (!b)
        return -1;
    b->magic = magic;
    b->token = token;
    b->regid = regid;
    *buf = b;
    *len = sizeof(*b);
    return 0;
}

/* 0 with *b filled when buf is one with this magic; -1 otherwise */
static inline int nxlt_blob24_parse(const void *buf, size_t len, uint32_t magic, nxlt_blob24_t *b)
{
    if (len != sizeof(*b))
        return -1;
    memcpy(b, buf, sizeof(*b));
    return b->magic == magic ? 0 : -1;
}

#endif
