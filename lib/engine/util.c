/* SPDX-License-Identifier: BSD-3-Clause */
/* Error sentences, logging, small helpers. */
#include "internal.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static __thread char create_err[NXLI_ERR_MAX];

void nxli_set_create_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(create_err, sizeof(create_err), fmt, ap);
    va_end(ap);
}

const char *nxl_agent_last_error(const nxl_agent_t *a)
{
    if (a && nxli_thread_foreign(a))
        return nxli_thread_last_error(a);
    return a ? a->err : create_err;
}

void nxli_verr(nxl_agent_t *a, const char *fmt, va_list ap)
{
    if (nxli_quiet) /* a foreign thread's own attempt: the reactor reports it */
        return;
    va_list cp;
    va_copy(cp, ap);
    vsnprintf(a->err, sizeof(a->err), fmt, cp);
    va_end(cp);
    nxli_log(a, NXL_LOG_DEBUG, "error: %s", a->err);
}

void nxli_err(nxl_agent_t *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    nxli_verr(a, fmt, ap);
    va_end(ap);
}

static const char *const level_names[] = {"none", "error", "warn", "info", "debug", "trace"};

nxl_log_level_t nxli_log_level_env(void)
{
    const char *s = getenv("NXL_LOG_LEVEL");
    if (!s || !*s)
        return NXL_LOG_NONE;
    for (int i = 0; i <= NXL_LOG_TRACE; i++)
        if (!strcasecmp(s, level_names[i]))
            return (nxl_log_level_t)i;
    int v = atoi(s);
    return v < 0 ? NXL_LOG_NONE : v > NXL_LOG_TRACE ? NXL_LOG_TRACE : (nxl_log_level_t)v;
}

void nxli_vlog(nxl_agent_t *a, nxl_log_level_t lvl, const char *fmt, va_list ap)
{
#ifndef NXL_DEBUG
    if (lvl >= NXL_LOG_DEBUG && (!a || a->log_level < NXL_LOG_TRACE))
        return;
#endif
    if (!a || lvl > a->log_level || lvl == NXL_LOG_NONE)
        return;
    char line[1024];
    vsnprintf(line, sizeof(line), fmt, ap);
    if (a->acting && nxli_thread_log_later(a, lvl, line))
        return;
    if (a->log_cb)
        a->log_cb(lvl, line, a->log_arg);
    else
        fprintf(stderr, "nxl[%s] %s: %s\n", a->name, level_names[lvl], line);
}

void nxli_log(nxl_agent_t *a, nxl_log_level_t lvl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    nxli_vlog(a, lvl, fmt, ap);
    va_end(ap);
}

char *nxli_strdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

char *nxli_sprintf(const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

uint64_t nxli_now_us(void)
{
    return nxl_clock_us(CLOCK_MONOTONIC);
}

void nxl_free(void *p)
{
    free(p);
}

/* ---- what transports may call */
struct event_base *nxlt_base(nxlt_ctx_t *ctx) { return ctx->agent->base; }
nxl_agent_t *nxlt_agent(nxlt_ctx_t *ctx) { return ctx->agent; }
unsigned nxlt_busy_poll_us(nxlt_ctx_t *ctx) { return ctx->agent->busy_poll_us; }
int nxlt_in_callback(nxlt_ctx_t *ctx) { return ctx->agent->cb_depth > 0; }
int nxlt_threaded(nxlt_ctx_t *ctx) { return ctx->agent->thr != NULL; }
uint64_t nxlt_now_us(void) { return nxli_now_us(); }

void nxlt_error(nxlt_ctx_t *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    nxli_verr(ctx->agent, fmt, ap);
    va_end(ap);
}

void nxlt_log(nxlt_ctx_t *ctx, nxl_log_level_t lvl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    nxli_vlog(ctx->agent, lvl, fmt, ap);
    va_end(ap);
}
