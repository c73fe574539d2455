/* SPDX-License-Identifier: BSD-3-Clause */
/* nxlt_param*(): the one reader of transport parameters (string, bool,
 * whole number, byte count, time, one of a list), each refusing a bad
 * value with the same form of sentence: "<NAME>: key=value: what it takes". */
#include "internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *nxlt_param(const nxl_param_t *p, size_t n, const char *key)
{
    const char *v = NULL;
    for (size_t i = 0; p && key && i < n; i++)
        if (p[i].key && !strcmp(p[i].key, key))
            v = p[i].value;
    return v;
}

static const char *tname(nxlt_ctx_t *ctx)
{
    return ctx->backend && ctx->backend->ops ? ctx->backend->ops->name : "transport";
}

static nxl_status_t refuse(nxlt_ctx_t *ctx, const char *key, const char *v, const char *what)
{
    nxlt_error(ctx, "%s: %s=%s: %s", tname(ctx), key, v, what);
    return NXL_ERR_INVALID_PARAM;
}

/* a whole number, decimal or 0x-hexadecimal, with what follows it in *end */
static int whole(const char *s, uint64_t *out, const char **end)
{
    int base = 10;
    const char *d = s;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        base = 16, d = s + 2;
    if (!((*d >= '0' && *d <= '9') || (base == 16 && ((*d >= 'a' && *d <= 'f') ||
                                                      (*d >= 'A' && *d <= 'F')))))
        return -1;
    char *e;
    errno = 0;
    unsigned long long v = strtoull(d, &e, base);
    if (errno)
        return -1;
    *out = v;
    *end = e;
    return 0;
}

nxl_status_t nxlt_param_bool(nxlt_ctx_t *ctx, const nxl_param_t *p, size_t n, const char *key,
                             bool *out)
{
    const char *v = nxlt_param(p, n, key);
    if (!v)
        return NXL_SUCCESS;
    if (!strcmp(v, "1") || !strcasecmp(v, "yes") || !strcasecmp(v, "true") ||
        !strcasecmp(v, "on"))
        *out = true;
    else if (!strcmp(v, "0") || !strcasecmp(v, "no") || !strcasecmp(v, "false") ||
             !strcasecmp(v, "off"))
        *out = false;
    else
        return refuse(ctx, key, v, "use 0 or 1 (or no/yes, false/true, off/on)");
    return NXL_SUCCESS;
}

/* bytes as a person writes them: 4096, 64K, 1M, 5G */
static void fmt_size(char *b, size_t cap, uint64_t v)
{
    if (v && !(v % (1ull << 30)))
        snprintf(b, cap, "%" PRIu64 "G", v >> 30);
    else if (v && !(v % (1ull << 20)))
        snprintf(b, cap, "%" PRIu64 "M", v >> 20);
    else if (v && !(v % (1ull << 10)))
        snprintf(b, cap, "%" PRIu64 "K", v >> 10);
    else
        snprintf(b, cap, "%" PRIu64, v);
}

/* a K, M or G (KiB, MB, ...) after a byte count: its shift, what follows in *end */
static unsigned suffix(const char **end)
{
    const char *e = *end;
    unsigned shift = *e == 'k' || *e == 'K' ? 10 : *e == 'm' || *e == 'M' ? 20
                   : *e == 'g' || *e == 'G' ? 30 : 0;
    if (shift) {
        e++;
        e += *e == 'i';
        e += *e == 'B';
    }
    *end = e;
    return shift;
}

/* nxlt_param_uint, and with @p bytes nxlt_param_size */
static nxl_status_t number(nxlt_ctx_t *ctx, const nxl_param_t *p, size_t n, const char *key,
                           uint64_t lo, uint64_t hi, uint64_t *out, bool bytes)
{
    const char *v = nxlt_param(p, n, key), *end;
    if (!v)
        return NXL_SUCCESS;
    uint64_t x;
    bool ok = whole(v, &x, &end) == 0;
    unsigned shift = ok && bytes ? suffix(&end) : 0;
    ok = ok && !*end && x <= (UINT64_MAX >> shift);
    if (ok && (x << shift) >= lo && (x << shift) <= hi) {
        *out = x << shift;
        return NXL_SUCCESS;
    }
    char a[32], b[32], what[128];
    fmt_size(a, sizeof(a), lo);
    fmt_size(b, sizeof(b), hi);
    if (!bytes)
        snprintf(a, sizeof(a), "%" PRIu64, lo), snprintf(b, sizeof(b), "%" PRIu64, hi);
    const char *unit = bytes ? "bytes" : "a whole number";
    const char *tail = bytes ? " (K, M, G: powers of 1024)" : "";
    if (hi == UINT64_MAX)
        snprintf(what, sizeof(what), "%s%s %s or more%s", unit, bytes ? "," : " of", a, tail);
    else
        snprintf(what, sizeof(what), "%s from %s to %s%s", unit, a, b, tail);
    return refuse(ctx, key, v, what);
}

nxl_status_t nxlt_param_uint(nxlt_ctx_t *ctx, const nxl_param_t *p, size_t n, const char *key,
                             uint64_t lo, uint64_t hi, uint64_t *out)
{
    return number(ctx, p, n, key, lo, hi, out, false);
}

nxl_status_t nxlt_param_size(nxlt_ctx_t *ctx, const nxl_param_t *p, size_t n, const char *key,
                             uint64_t lo, uint64_t hi, uint64_t *out)
{
    return number(ctx, p, n, key, lo, hi, out, true);
}

static void fmt_ms(char *b, size_t cap, uint64_t ms)
{
    if (ms && !(ms % 1000))
        snprintf(b, cap, "%" PRIu64 "s", ms / 1000);
    else
        snprintf(b, cap, "%" PRIu64 "ms", ms);
}

nxl_status_t nxlt_param_duration(nxlt_ctx_t *ctx, const nxl_param_t *p, size_t n,
                                 const char *key, uint64_t lo_ms, uint64_t hi_ms,
                                 uint64_t *out_ms)
{
    const char *v = nxlt_param(p, n, key);
    if (!v)
        return NXL_SUCCESS;
    char *end;
    errno = 0;
    double d = (*v >= '0' && *v <= '9') || *v == '.' ? strtod(v, &end) : -1;
    bool ok = d >= 0 && !errno && isfinite(d);
    if (ok && !strcmp(end, "ms"))
        ;
    else if (ok && (!*end || !strcmp(end, "s")))
        d *= 1000;
    else
        ok = false;
    ok = ok && d < 18446744073709549568.0 && (uint64_t)d >= lo_ms && (uint64_t)d <= hi_ms;
    if (!ok) {
        char a[32], b[32], what[160];
        fmt_ms(a, sizeof(a), lo_ms);
        fmt_ms(b, sizeof(b), hi_ms);
        if (hi_ms == UINT64_MAX)
            snprintf(what, sizeof(what), "a time of %s or more (\"10s\", \"500ms\"; a bare "
                     "number is seconds)", a);
        else
            snprintf(what, sizeof(what), "a time from %s to %s (\"10s\", \"500ms\"; a bare "
                     "number is seconds)", a, b);
        return refuse(ctx, key, v, what);
    }
    *out_ms = (uint64_t)d;
    return NXL_SUCCESS;
}

nxl_status_t nxlt_param_choice(nxlt_ctx_t *ctx, const nxl_param_t *p, size_t n, const char *key,
                               const char *const *choices, int *out)
{
    const char *v = nxlt_param(p, n, key);
    if (!v)
        return NXL_SUCCESS;
    int k = 0;
    for (; choices && choices[k]; k++)
        if (!strcmp(v, choices[k])) {
            *out = k;
            return NXL_SUCCESS;
        }
    char what[256] = "use ";
    size_t l = strlen(what);
    for (int i = 0; i < k && l < sizeof(what); i++)
        l += (size_t)snprintf(what + l, sizeof(what) - l, "%s%s",
                              i == 0 ? "" : i == k - 1 ? " or " : ", ", choices[i]);
    return refuse(ctx, key, v, what);
}
