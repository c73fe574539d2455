/* SPDX-License-Identifier: BSD-3-Clause */
/* The first failure of an operation of many segments or requests, the
 * one it completes with (POSIX's and GDS's file I/O, OBJ's transfers):
 * later failures change nothing. Header-only. */
#ifndef NXL_FIRSTFAIL_H
#define NXL_FIRSTFAIL_H

#include <nxl/transport.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

/* Unless *failed, sets it, keeps st in *st_out and the sentence (fmt, ap)
 * in why, and logs the sentence at INFO. */
static inline void nxl_first_fail_v(nxlt_ctx_t *ctx, bool *failed, nxl_status_t *st_out,
                                    char *why, size_t whylen, nxl_status_t st,
                                    const char *fmt, va_list ap)
{
    if (*failed)
        return;
    *failed = true;
    *st_out = st;
    vsnprintf(why, whylen, fmt, ap);
    nxlt_log(ctx, NXL_LOG_INFO, "%s", why);
}

#endif /* NXL_FIRSTFAIL_H */
