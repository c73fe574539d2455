/* SPDX-License-Identifier: BSD-3-Clause */
/* Base64 (RFC 4648, with padding): see base64.h. */
#include "base64.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char enc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *nxli_b64_encode(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    char *out = malloc(4 * ((len + 2) / 3) + 1), *o = out;
    if (!out)
        return NULL;
    size_t i = 0;
    for (; i + 2 < len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *o++ = enc[v >> 18];
        *o++ = enc[(v >> 12) & 63];
        *o++ = enc[(v >> 6) & 63];
        *o++ = enc[v & 63];
    }
    if (i < len) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0);
        *o++ = enc[v >> 18];
        *o++ = enc[(v >> 12) & 63];
        *o++ = i + 1 < len ? enc[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    *o = 0;
    return out;
}

static int dec(char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

void *nxli_b64_decode(const char *s, size_t *len)
{
    size_t n = strlen(s);
    if (n % 4)
        return NULL;
    unsigned char *out = malloc(n / 4 * 3 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i += 4) {
        int a = dec(s[i]), b = dec(s[i + 1]);
        int c = s[i + 2] == '=' ? -2 : dec(s[i + 2]);
        int d = s[i + 3] == '=' ? -2 : dec(s[i + 3]);
        bool last = i + 4 == n;
        if (a < 0 || b < 0 || c == -1 || d == -1 || (!last && (c < 0 || d < 0)) ||
            (c == -2 && d != -2)) {
            free(out);
            return NULL;
        }
        uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)(c < 0 ? 0 : c) << 6 |
                     (uint32_t)(d < 0 ? 0 : d);
        *o++ = v >> 16;
        if (c >= 0)
            *o++ = (v >> 8) & 255;
        if (d >= 0)
            *o++ = v & 255;
    }
    *len = (size_t)(o - out);
    return out;
}
