/* SPDX-License-Identifier: BSD-3-Clause */
/* A response body as curl hands it over in pieces, kept NUL-terminated, for
 * the engine's etcd client and OBJ's requests (header-only: every user
 * compiles its own copy, nothing is exported). */
#ifndef NXL_COMMON_GROWBUF_H
#define NXL_COMMON_GROWBUF_H

#include <stdlib.h>
#include <string.h>

/* Appends the n bytes at p to *buf (*len bytes and a NUL in *cap), which
 * grows to twice what it then needs when they do not fit; -1: out of
 * memory, nothing changed. */
static inline int nxl_growbuf_append(char **buf, size_t *len, size_t *cap, const void *p,
                                     size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t ncap = (*len + n + 1) * 2;
        char *b = realloc(*buf, ncap);
        if (!b)
            return -1;
        *buf = b;
        *cap = ncap;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

#endif /* NXL_COMMON_GROWBUF_H */
