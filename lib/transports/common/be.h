/* SPDX-License-Identifier: BSD-3-Clause */
/* Big-endian integers of n bytes (n <= 8), as the network transports' wire
 * formats (UCX's and LIBFABRIC's connection info, keys and messages) write
 * them. Header-only and without any transport's headers, so that
 * tests/fuzz/fuzz_wire.c calls the same code as the transports. */
#ifndef NXL_BE_H
#define NXL_BE_H

#include <stdint.h>

static inline void nxl_be_put(unsigned char *b, uint64_t v, int n)
{
    for (int k = 0; k < n; k++)
        b[k] = (unsigned char)(v >> (8 * (n - 1 - k)));
}

static inline uint64_t nxl_be_get(const unsigned char *b, int n)
{
    uint64_t v = 0;
    for (int k = 0; k < n; k++)
        v = v << 8 | b[k];
    return v;
}

#endif /* NXL_BE_H */
