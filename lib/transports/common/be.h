/* SPDX-License-Identifier: BSD-3-Clause */
/* Big-endian integers of n bytes (n <= 8), as the network transports' wire
 * formats (UCX's and LIBFABRIC's connection info, keys and messages) write
 * them. Header-only and without any transport's headers, so that
 * tests/fuzz/fuzz_wire.c calls the same code as the transports. */
#ifndef NXL_BE_H
#define NXL_BE_H

#include <stdint.h>
#include <string.h>

/* n of 8, 4 or 2 (the messages' numbers, lengths and addresses, on every
 * message): one load or store, not a loop of shifts */
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define NXL_BE_SWAP 1
#endif

static inline void nxl_be_put(unsigned char *b, uint64_t v, int n)
{
#ifdef NXL_BE_SWAP
    if (n == 8) {
        uint64_t w = __builtin_bswap64(v);
        memcpy(b, &w, 8);
        return;
    }
    if (n == 4) {
        uint32_t w = __builtin_bswap32((uint32_t)v);
        memcpy(b, &w, 4);
        return;
    }
    if (n == 2) {
        uint16_t w = __builtin_bswap16((uint16_t)v);
        memcpy(b, &w, 2);
        return;
    }
#endif
    for (int k = 0; k < n; k++)
        b[k] = (unsigned char)(v >> (8 * (n - 1 - k)));
}

static inline uint64_t nxl_be_get(const unsigned char *b, int n)
{
#ifdef NXL_BE_SWAP
    if (n == 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        return __builtin_bswap64(w);
    }
    if (n == 4) {
        uint32_t w;
        memcpy(&w, b, 4);
        return __builtin_bswap32(w);
    }
    if (n == 2) {
        uint16_t w;
        memcpy(&w, b, 2);
        return __builtin_bswap16(w);
    }
#endif
    uint64_t v = 0;
    for (int k = 0; k < n; k++)
        v = v << 8 | b[k];
    return v;
}

#endif /* NXL_BE_H */
