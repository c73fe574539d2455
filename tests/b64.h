/* SPDX-License-Identifier: BSD-3-Clause */
/* Base64 (RFC 4648, padded) for tests that take metadata apart and build
 * it again: written here, not the library's, so that a test does not
 * check the library's decoder with itself. */
#ifndef NXL_TESTS_B64_H
#define NXL_TESTS_B64_H

#include <stdlib.h>
#include <string.h>

static const char tb64_abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* malloc'd, NUL-terminated */
static inline char *tb64_encode(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    char *out = malloc(4 * ((len + 2) / 3) + 1), *o = out;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < len ? (unsigned)p[i + 1] << 8 : 0) |
                     (i + 2 < len ? p[i + 2] : 0);
        *o++ = tb64_abc[v >> 18];
        *o++ = tb64_abc[(v >> 12) & 63];
        *o++ = i + 1 < len ? tb64_abc[(v >> 6) & 63] : '=';
        *o++ = i + 2 < len ? tb64_abc[v & 63] : '=';
    }
    *o = 0;
    return out;
}

/* malloc'd bytes of the first n characters of s (valid base64 assumed) */
static inline unsigned char *tb64_decode(const char *s, size_t n, size_t *len)
{
    unsigned char *out = malloc(n / 4 * 3 + 1);
    size_t o = 0;
    unsigned v = 0;
    int bits = 0;
    for (size_t i = 0; i < n && s[i] != '='; i++) {
        v = v << 6 | (unsigned)(strchr(tb64_abc, s[i]) - tb64_abc);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(v >> bits);
        }
    }
    *len = o;
    return out;
}

#endif
