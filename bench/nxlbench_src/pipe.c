/* SPDX-License-Identifier: BSD-3-Clause */
/* nxlbench: transfers kept in flight — each slot posted again as it
 * completes — and their times, for the bandwidth rows of every backend. */
#include "nxlbench.h"

#include <stdlib.h>

static void pipe_post(pipe_slot_t *s);

static void pipe_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    pipe_slot_t *s = arg;
    pipe_t *p = s->p;
    uint64_t t = now_ns();
    if (st != NXL_SUCCESS) {
        fail("transfer failed: %s", nxl_future_error(f));
        return;
    }
    long k = p->completed++ - p->warm;
    if (k >= 0 && p->record)
        p->tx[k] = (t - s->t_post) / 1e3;
    if (p->done && !p->done(s))
        return;
    if (p->posted < p->total && !RUN.failed)
        pipe_post(s);
}

static void pipe_post(pipe_slot_t *s)
{
    pipe_t *p = s->p;
    if (p->before)
        p->before(s);
    long k = p->posted - p->warm;
    uint64_t t0 = now_ns(), t1 = t0;
    if (p->make) {
        if (!p->make(s))
            return; /* it called fail() */
        t1 = now_ns();
        if (k >= 0 && p->record)
            p->prep[p->nprep++] = (t1 - t0) / 1e3;
    }
    s->t_post = t1;
    nxl_status_t st = nxl_xfer_post(s->x, pipe_done, s, NULL);
    uint64_t t2 = now_ns();
    if (st != NXL_SUCCESS) {
        fail("nxl_xfer_post: %s", nxl_agent_last_error(RUN.a));
        return;
    }
    p->posted++;
    if (k >= 0 && p->record)
        p->post[k] = (t2 - t1) / 1e3;
}

void pipe_init(pipe_t *p, long nslots, long timed, long warm)
{
    *p = (pipe_t){.warm = warm, .record = true, .stall_s = 30, .nslots = nslots};
    p->prep = calloc((size_t)(timed + nslots) + 1, sizeof(double));
    p->post = calloc((size_t)timed + 1, sizeof(double));
    p->tx = calloc((size_t)timed + 1, sizeof(double));
    p->slots = calloc((size_t)nslots, sizeof(pipe_slot_t));
    if (!p->prep || !p->post || !p->tx || !p->slots)
        die("out of memory for a row of %ld iterations", timed);
    for (long i = 0; i < nslots; i++)
        p->slots[i] = (pipe_slot_t){.p = p, .i = (size_t)i};
}

void pipe_made(pipe_t *p, uint64_t t0, uint64_t t1)
{
    p->prep[p->nprep++] = (t1 - t0) / 1e3;
}

void pipe_pass(pipe_t *p, long count)
{
    p->total = p->posted + count;
    for (long s = 0; s < p->nslots && p->posted < p->total && !RUN.failed; s++)
        pipe_post(&p->slots[s]);
    run_until(&p->completed, p->total, p->stall_s);
}

double pipe_timed(pipe_t *p, long warm, long timed, const char *who, size_t bs, size_t n)
{
    pipe_pass(p, warm);
    uint64_t t0 = now_ns();
    pipe_pass(p, timed);
    uint64_t t1 = now_ns();
    if (RUN.failed)
        die("%sblock %zu batch %zu: %s", who, bs, n, RUN.err);
    return (double)(t1 - t0) / 1e9;
}

void pipe_free(pipe_t *p)
{
    for (long s = 0; s < p->nslots; s++)
        if (p->slots[s].x)
            nxl_xfer_release(p->slots[s].x);
    free(p->slots);
    free(p->prep);
    free(p->post);
    free(p->tx);
}
