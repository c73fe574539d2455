/* SPDX-License-Identifier: BSD-3-Clause */
/* nxlbench: the initiator of a two-process run (UCX, LIBFABRIC), which
 * drives the sweep: bandwidth, latency, desc_rate and idle. The target
 * (target.c) answers its control notifications. */
#include "nxlbench.h"

#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct {
    char host[256];
    uint16_t port;
    buf_t buf;
    uintptr_t raddr;
    size_t rlen;
    /* control replies */
    char reply[256];
    int nreply;
} I;

static void wait_future(nxl_future_t *f, const char *what)
{
    nxl_status_t st = nxl_future_wait(f, 30000);
    if (st != NXL_SUCCESS)
        die("initiator: %s: %s (%s)", what, st == NXL_IN_PROG ? "timed out" : nxl_future_error(f),
            nxl_strerror(st));
    nxl_future_release(f);
}

/* Sends a control request and waits for the target's answer. */
static const char *ask(const char *fmt, ...)
{
    char m[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof(m), fmt, ap);
    va_end(ap);
    int before = I.nreply;
    nxl_future_t *f;
    if (nxl_notif_send(RUN.a, T_NAME, m, strlen(m), NULL, NULL, &f) != NXL_SUCCESS)
        die("initiator: sending '%s': %s", m, nxl_agent_last_error(RUN.a));
    wait_future(f, "control notification");
    uint64_t end = now_ns() + 60ull * 1000000000u;
    while (I.nreply == before && now_ns() < end)
        agent_turn(1000);
    if (I.nreply == before)
        die("initiator: no answer from the target to '%s' in 60 s", m);
    if (!strncmp(I.reply, "bad", 3))
        die("initiator: the target answered '%s' to '%s'", I.reply, m);
    return I.reply;
}

/* latency state */
static struct {
    nxl_xfer_t *x;
    long n, total, warm;
    uint64_t t_sent;
    double *rtt;
    double *post;
    bool got_pong, xfer_done;
} L;

static void l_ping(uint64_t t0);

static void i_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    if (len == 1 && *(const char *)msg == 'q') {
        uint64_t t = now_ns();
        if (L.n >= L.warm)
            L.rtt[L.n - L.warm] = (t - L.t_sent) / 1e3;
        L.n++;
        L.got_pong = true;
        /* the next round starts at this pong's arrival: the clock is not
         * read again (~40 ns here) before the ping goes out */
        if (L.n < L.total && L.xfer_done)
            l_ping(t);
        return;
    }
    snprintf(I.reply, sizeof(I.reply), "%.*s", (int)(len < 255 ? len : 255), (const char *)msg);
    I.nreply++;
}

/* ---- consistency: the source of a row holds one pattern, the destination another */

static uint64_t consistency_prepare(size_t len)
{
    uint64_t seed = next_seed();
    if (O.op == NXL_WRITE) {
        pat_fill(I.buf.p, 0, len, seed);
        ask("fill %llu 0 %zu", (unsigned long long)(seed ^ 0x5a5a5a5a), len);
    } else {
        ask("fill %llu 0 %zu", (unsigned long long)seed, len);
        pat_fill(I.buf.p, 0, len, seed ^ 0x5a5a5a5a);
    }
    return seed;
}

static void consistency_verify(uint64_t seed, size_t len)
{
    if (O.op == NXL_WRITE) {
        ask("chk %llu 0 %zu", (unsigned long long)seed, len); /* dies on "bad" */
    } else {
        long long bad = pat_check(I.buf.p, 0, len, seed);
        if (bad >= 0)
            die("consistency: READ: initiator byte %lld of [0, %zu) differs from the target's",
                bad, len);
    }
}

/* ---- bandwidth: pipeline_depth slots of n blocks each */

typedef struct bwrow {
    size_t n;
    nxl_desc_t *ld, *rd; /* the slots' blocks, n after n */
} bwrow_t;

static bool bw_make(pipe_slot_t *s)
{
    bwrow_t *r = s->p->user;
    nxl_desc_t *ld = r->ld + s->i * r->n, *rd = r->rd + s->i * r->n;
    nxl_status_t st;
    nxl_xfer_opts_t o;
    nxl_xfer_opts_init(&o);
    if (O.xfer_notif) {
        o.notif = XFER_NOTIF;
        o.notif_len = strlen(XFER_NOTIF);
    }
    if (O.recreate) {
        nxl_dlist_t l = {NXL_DRAM, ld, r->n}, rm = {NXL_DRAM, rd, r->n};
        st = nxl_xfer_create(RUN.a, O.op, &l, &rm, T_NAME, &o, &s->x);
    } else {
        nxl_prepped_t *lp = NULL, *rp = NULL;
        st = nxl_prep(RUN.a, NULL, NXL_DRAM, ld, r->n, &lp);
        if (st == NXL_SUCCESS)
            st = nxl_prep(RUN.a, T_NAME, NXL_DRAM, rd, r->n, &rp);
        if (st == NXL_SUCCESS)
            st = nxl_xfer_make(RUN.a, O.op, lp, NULL, rp, NULL, r->n, &o, &s->x);
        nxl_prepped_release(lp);
        nxl_prepped_release(rp);
    }
    if (st != NXL_SUCCESS) {
        fail("making the transfer: %s", nxl_agent_last_error(RUN.a));
        return false;
    }
    return true;
}

/* --recreate_xfer: each transfer is made for one post */
static bool bw_release(pipe_slot_t *s)
{
    nxl_xfer_release(s->x);
    s->x = NULL;
    return true;
}

static void run_bw_row(size_t bs, size_t n)
{
    long P = O.depth, warm;
    size_t span = (size_t)P * n * bs;
    long timed = row_iters(n * bs, &warm);
    bwrow_t r = {.n = n, .ld = calloc((size_t)P * n, sizeof(nxl_desc_t)),
                 .rd = calloc((size_t)P * n, sizeof(nxl_desc_t))};
    if (!r.ld || !r.rd)
        die("initiator: out of memory");
    for (size_t i = 0; i < (size_t)P * n; i++) {
        r.ld[i] = (nxl_desc_t){.addr = (uintptr_t)I.buf.p + i * bs, .len = bs};
        r.rd[i] = (nxl_desc_t){.addr = I.raddr + i * bs, .len = bs};
    }
    pipe_t p;
    pipe_init(&p, P, timed, warm);
    p.user = &r;
    uint64_t seed = O.check ? consistency_prepare(span) : 0;
    if (O.recreate) {
        p.make = bw_make;
        p.done = bw_release;
    } else {
        for (long s = 0; s < P && !RUN.failed; s++) {
            uint64_t t0 = now_ns();
            if (bw_make(&p.slots[s]))
                pipe_made(&p, t0, now_ns());
        }
    }
    /* warm-up, then the timed part */
    double sec = pipe_timed(&p, warm, timed, "initiator: ", bs, n);
    if (O.check)
        consistency_verify(seed, span);
    report_bw_row(bs, n, timed, sec, p.prep, p.nprep, p.post, timed, p.tx, timed);
    pipe_free(&p);
    free(r.ld);
    free(r.rd);
}

/* ---- latency */

static void l_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    if (st != NXL_SUCCESS) {
        fail("ping failed: %s", nxl_future_error(f));
        return;
    }
    L.xfer_done = true;
    if (L.got_pong && L.n < L.total)
        l_ping(now_ns());
}

/* t0: now, as the caller read it */
static void l_ping(uint64_t t0)
{
    long k = L.n - L.warm;
    L.got_pong = L.xfer_done = false;
    L.t_sent = t0;
    nxl_status_t st = nxl_xfer_post(L.x, l_done, NULL, NULL);
    if (st != NXL_SUCCESS) {
        fail("ping post: %s", nxl_agent_last_error(RUN.a));
        return;
    }
    if (k >= 0)
        L.post[k] = (now_ns() - t0) / 1e3;
}

static void run_lat(void)
{
    size_t v[64], nv;
    size_list(v, &nv);
    for (size_t i = 0; i < nv; i++) {
        size_t bs = v[i];
        char what[64];
        snprintf(what, sizeof(what), "latency, block %zu", bs);
        progress((int)i, (int)nv, what);
        uint64_t seed = 0;
        if (O.check) {
            seed = next_seed();
            pat_fill(I.buf.p, 0, bs, seed);
            pat_fill(I.buf.p, bs, bs, seed + 9);
            ask("fill %llu 0 %zu", (unsigned long long)(seed + 7), 2 * bs);
        }
        ask("lat %zu %s", bs, O.reply_notif ? "notif" : "write");
        long warm, it = row_iters(bs * 2, &warm);
        memset(&L, 0, sizeof(L));
        L.warm = warm;
        L.total = it + warm;
        L.rtt = calloc((size_t)it, sizeof(double));
        L.post = calloc((size_t)it, sizeof(double));
        nxl_desc_t ld = {.addr = (uintptr_t)I.buf.p, .len = bs}, rd = {.addr = I.raddr, .len = bs};
        nxl_dlist_t l = {NXL_DRAM, &ld, 1}, r = {NXL_DRAM, &rd, 1};
        nxl_xfer_opts_t o;
        nxl_xfer_opts_init(&o);
        o.notif = "p";
        o.notif_len = 1;
        uint64_t p0 = now_ns();
        if (nxl_xfer_create(RUN.a, NXL_WRITE, &l, &r, T_NAME, &o, &L.x) != NXL_SUCCESS)
            die("initiator: latency transfer: %s", nxl_agent_last_error(RUN.a));
        double prep = (now_ns() - p0) / 1e3;
        uint64_t t0 = now_ns();
        l_ping(t0);
        run_until(&L.n, L.total, 30);
        uint64_t t1 = now_ns();
        if (RUN.failed)
            die("initiator: latency, block %zu: %s", bs, RUN.err);
        /* the last ping's own completion */
        for (int k = 0; k < 100 && nxl_xfer_status(L.x) == NXL_IN_PROG; k++)
            agent_turn(10);
        nxl_xfer_release(L.x);
        if (O.check) {
            ask("chk %llu 0 %zu", (unsigned long long)seed, bs);
            if (!O.reply_notif && pat_check(I.buf.p, bs, bs, seed + 7) >= 0)
                die("consistency: latency: the pong's data did not arrive intact");
        }
        row_t *w = report_row();
        w->bs = bs;
        w->batch = 1;
        w->iters = it;
        double avg, p50, p99;
        stats(L.rtt, it, &avg, &p50, &p99);
        w->avg_lat_us = avg / 2;
        w->p50_us = p50 / 2;
        w->p99_us = p99 / 2;
        w->avg_tx_us = avg;
        w->p99_tx_us = p99;
        w->bw_gbps = bs / (avg / 2 * 1e-6) / 1e9;
        w->avg_prep_us = w->p99_prep_us = prep;
        stats(L.post, it, &w->avg_post_us, NULL, &w->p99_post_us);
        (void)t0;
        (void)t1;
        free(L.rtt);
        free(L.post);
        progress((int)i + 1, (int)nv, what);
    }
}

/* ---- desc_rate */

static long d_done_count;
static uint64_t d_t_done;
static void d_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    d_t_done = now_ns();
    if (st != NXL_SUCCESS)
        fail("transfer failed: %s", nxl_future_error(f));
    d_done_count++;
}

/* desc_rate --threads N: N threads each run the cycle of run_desc (prep
 * both lists, make, post, wait, release) against the threaded agent; the
 * rate is every thread's descriptors over the wall-clock time of the timed
 * iterations (after a barrier that ends the warm-up). With --pipeline_depth
 * D each thread keeps D transfers in flight: a cycle waits for the one
 * posted D cycles before and releases it (the default mode runs the same
 * loop on its one thread when D > 1). */
/* desc_rate's two lists: n descriptors a side, or with --strided one
 * strided list a side (s[0] local, s[1] remote) */
static void desc_prep_local(const nxl_desc_t *ld, const nxl_strided_t *s, size_t n,
                            nxl_prepped_t **lp)
{
    nxl_status_t st = s ? nxl_prep_strided(RUN.a, NULL, NXL_DRAM, &s[0], 1, lp)
                        : nxl_prep(RUN.a, NULL, NXL_DRAM, ld, n, lp);
    if (st != NXL_SUCCESS)
        die("initiator: %s (local): %s", s ? "nxl_prep_strided" : "nxl_prep",
            nxl_agent_last_error(RUN.a));
}

static void desc_prep_remote(const nxl_desc_t *rd, const nxl_strided_t *s, size_t n,
                             nxl_prepped_t **rp)
{
    nxl_status_t st = s ? nxl_prep_strided(RUN.a, T_NAME, NXL_DRAM, &s[1], 1, rp)
                        : nxl_prep(RUN.a, T_NAME, NXL_DRAM, rd, n, rp);
    if (st != NXL_SUCCESS)
        die("initiator: %s (remote): %s", s ? "nxl_prep_strided" : "nxl_prep",
            nxl_agent_last_error(RUN.a));
}

/* heap bytes in use (glibc's count: arenas and mmapped blocks) */
static double heap_bytes(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (double)mi.uordblks + (double)mi.hblkhd;
}

typedef struct {
    size_t n;
    long warm, it;
    const nxl_desc_t *ld, *rd;
    const nxl_strided_t *s;   /* --strided: the two lists instead */
    pthread_barrier_t *bar;
    uint64_t t0, t1;
} dthr_t;

typedef struct {
    nxl_prepped_t *lp, *rp;
    nxl_xfer_t *x;
    nxl_future_t *f;
} dslot_t;

static void dslot_finish(dslot_t *q)
{
    nxl_status_t st = nxl_future_wait(q->f, 30000);
    if (st != NXL_SUCCESS)
        die("initiator: desc_rate thread: transfer %s: %s", nxl_status_name(st),
            nxl_future_error(q->f));
    nxl_future_release(q->f);
    nxl_xfer_release(q->x);
    nxl_prepped_release(q->lp);
    nxl_prepped_release(q->rp);
    *q = (dslot_t){0};
}

static void *desc_thread(void *arg)
{
    dthr_t *d = arg;
    size_t depth = (size_t)O.depth;
    dslot_t *s = calloc(depth, sizeof(*s));
    if (!s)
        die("initiator: desc_rate thread: out of memory");
    for (long t = 0; t < d->warm + d->it; t++) {
        if (t == d->warm) {
            pthread_barrier_wait(d->bar);
            d->t0 = now_ns();
        }
        dslot_t *q = &s[(size_t)t % depth];
        if (q->f)
            dslot_finish(q);
        desc_prep_local(d->ld, d->s, d->n, &q->lp);
        desc_prep_remote(d->rd, d->s, d->n, &q->rp);
        if (nxl_xfer_make(RUN.a, O.op, q->lp, NULL, q->rp, NULL, d->n, NULL, &q->x) != NXL_SUCCESS ||
            nxl_xfer_post(q->x, NULL, NULL, &q->f) != NXL_SUCCESS)
            die("initiator: desc_rate thread: %s", nxl_agent_last_error(RUN.a));
    }
    for (size_t k = 0; k < depth; k++)
        if (s[k].f)
            dslot_finish(&s[k]);
    d->t1 = now_ns();
    free(s);
    return NULL;
}

static void run_desc_threads(size_t n, size_t bs, long warm, long it)
{
    int nt = O.threads ? (int)O.threads : 1; /* 0: the default mode, this thread */
    pthread_t th[256];
    dthr_t d[256];
    pthread_barrier_t bar;
    /* each thread its own part of the buffers */
    size_t per = n * bs;
    if (per * (size_t)nt > I.rlen || per * (size_t)nt > I.buf.len)
        die("desc_rate --threads %d: %d x %zu x %zu B do not fit in the %zu B buffer "
            "(--total_buffer_size)", nt, nt, n, bs, I.buf.len);
    pthread_barrier_init(&bar, NULL, (unsigned)nt);
    for (int k = 0; k < nt; k++) {
        nxl_desc_t *ld = calloc(n, sizeof(*ld)), *rd = calloc(n, sizeof(*rd));
        for (size_t j = 0; j < n; j++) {
            ld[j] = (nxl_desc_t){.addr = (uintptr_t)I.buf.p + k * per + j * bs, .len = bs};
            rd[j] = (nxl_desc_t){.addr = I.raddr + k * per + j * bs, .len = bs};
        }
        nxl_strided_t *s = NULL;
        if (O.strided) {
            s = calloc(2, sizeof(*s));
            s[0] = (nxl_strided_t){.base = (uintptr_t)I.buf.p + k * per, .len = bs, .stride = bs,
                                   .count = n};
            s[1] = (nxl_strided_t){.base = I.raddr + k * per, .len = bs, .stride = bs, .count = n};
        }
        d[k] = (dthr_t){.n = n, .warm = warm, .it = it, .ld = ld, .rd = rd, .s = s, .bar = &bar};
        if (O.threads)
            pthread_create(&th[k], NULL, desc_thread, &d[k]);
        else
            desc_thread(&d[k]);
    }
    uint64_t t0 = UINT64_MAX, t1 = 0;
    for (int k = 0; k < nt; k++) {
        if (O.threads)
            pthread_join(th[k], NULL);
        t0 = d[k].t0 < t0 ? d[k].t0 : t0;
        t1 = d[k].t1 > t1 ? d[k].t1 : t1;
        free((void *)d[k].ld);
        free((void *)d[k].rd);
        free((void *)d[k].s);
    }
    pthread_barrier_destroy(&bar);
    /* a row of the wall clock only: the threads' phases overlap */
    double sec = (double)(t1 - t0) / 1e9;
    row_t *w = report_row();
    w->bs = bs;
    w->batch = n;
    w->iters = it;
    w->threads = nt;
    w->held_bytes = -1;
    w->wall_s = sec;
    w->mdesc_per_s = (double)n * (double)it * nt / sec / 1e6;
    w->bw_gbps = (double)n * bs * (double)it * nt / sec / 1e9;
    w->avg_lat_us = sec * 1e6 / (double)it;
    report_note("# desc_rate %zu x %zu B, %d thread%s x %ld iterations, %ld in flight each: "
                "%.3f s, %.3f Mdesc/s (prep + make + post + completion + release, wall clock)\n",
                n, bs, nt, nt > 1 ? "s" : "", it, O.depth, sec, w->mdesc_per_s);
}

static void run_desc(void)
{
    size_t v[64], nv;
    int k = 0, nrows = sweep_rows(v, &nv);
    for (size_t n = O.start_batch; n <= O.max_batch; n *= 2)
        for (size_t i = 0; i < nv; i++) {
            size_t bs = v[i];
            char what[96];
            snprintf(what, sizeof(what), "desc_rate, %zu x %zu B", n, bs);
            progress(k, nrows, what);
            nxl_desc_t *ld = NULL, *rd = NULL;
            nxl_strided_t s[2] = {{.base = (uintptr_t)I.buf.p, .len = bs, .stride = bs, .count = n},
                                  {.base = I.raddr, .len = bs, .stride = bs, .count = n}};
            if (!O.strided || O.threads || O.depth > 1) {
                ld = calloc(n, sizeof(*ld)), rd = calloc(n, sizeof(*rd));
                for (size_t j = 0; j < n; j++) {
                    ld[j] = (nxl_desc_t){.addr = (uintptr_t)I.buf.p + j * bs, .len = bs};
                    rd[j] = (nxl_desc_t){.addr = I.raddr + j * bs, .len = bs};
                }
            }
            /* every thread's part of the buffers (desc_rate --threads N: N parts) */
            size_t span = n * bs * (size_t)(O.threads > 1 ? O.threads : 1);
            uint64_t seed = O.check ? consistency_prepare(span) : 0;
            long warm, it = row_iters(n * bs, &warm);
            if (it < 3 && O.num_iter >= 3)
                it = 3;
            if (O.threads || O.depth > 1) {
                run_desc_threads(n, bs, warm, it);
                if (O.check)
                    consistency_verify(seed, span);
                free(ld), free(rd);
                progress(++k, nrows, what);
                continue;
            }
            uint64_t w0 = 0;
            double held = -1;
            double *pl = calloc((size_t)it, sizeof(double)), *pr = calloc((size_t)it, sizeof(double)),
                   *mk = calloc((size_t)it, sizeof(double)), *pp = calloc((size_t)it, sizeof(double)),
                   *po = calloc((size_t)it, sizeof(double)), *cp = calloc((size_t)it, sizeof(double));
            for (long t = 0; t < warm + it; t++) {
                nxl_prepped_t *lp, *rp;
                nxl_xfer_t *x;
                /* the first cycle's heap growth: what the lists and the
                 * transfer hold (later cycles reuse the agent's spare
                 * arrays, which the heap count no longer sees) */
                double h0 = t == 0 ? heap_bytes() : 0;
                uint64_t t0 = now_ns();
                if (t == warm)
                    w0 = t0;
                desc_prep_local(ld, O.strided ? s : NULL, n, &lp);
                uint64_t t1 = now_ns();
                desc_prep_remote(rd, O.strided ? s : NULL, n, &rp);
                uint64_t t2 = now_ns();
                if (nxl_xfer_make(RUN.a, O.op, lp, NULL, rp, NULL, n, NULL, &x) != NXL_SUCCESS)
                    die("initiator: nxl_xfer_make: %s", nxl_agent_last_error(RUN.a));
                uint64_t t3 = now_ns();
                if (t == 0)
                    held = heap_bytes() - h0;
                long before = d_done_count;
                if (nxl_xfer_post(x, d_done, NULL, NULL) != NXL_SUCCESS)
                    die("initiator: nxl_xfer_post: %s", nxl_agent_last_error(RUN.a));
                uint64_t t4 = now_ns();
                run_until(&d_done_count, before + 1, 30);
                if (RUN.failed)
                    die("initiator: desc_rate: %s", RUN.err);
                long j = t - warm;
                if (j >= 0) {
                    pl[j] = (t1 - t0) / 1e3;
                    pr[j] = (t2 - t1) / 1e3;
                    mk[j] = (t3 - t2) / 1e3;
                    pp[j] = (t3 - t0) / 1e3;
                    po[j] = (t4 - t3) / 1e3;
                    cp[j] = (d_t_done - t3) / 1e3;
                }
                nxl_xfer_release(x);
                nxl_prepped_release(lp);
                nxl_prepped_release(rp);
            }
            double wsec = (double)(now_ns() - w0) / 1e9;
            if (O.check)
                consistency_verify(seed, span);
            row_t *w = report_row();
            w->threads = 1;
            w->phases = true;
            w->held_bytes = held;
            w->wall_s = wsec;
            w->mdesc_per_s = (double)n * (double)it / wsec / 1e6;
            report_note("# desc_rate %zu x %zu B%s, 1 thread x %ld iterations: %.3f s, %.3f "
                        "Mdesc/s (prep + make + post + completion + release, wall clock); "
                        "the first cycle's lists and transfer held %.0f heap bytes\n", n, bs,
                        O.strided ? " (strided)" : "", it, wsec, w->mdesc_per_s, held);
            double p50, d;
            w->bs = bs;
            w->batch = n;
            w->iters = it;
            stats(pl, it, &d, &w->prep_local_us, &d);
            stats(pr, it, &d, &w->prep_remote_us, &d);
            stats(mk, it, &d, &w->make_us, &d);
            stats(pp, it, &w->avg_prep_us, &w->prep_us, &w->p99_prep_us);
            stats(po, it, &w->avg_post_us, &w->post_us, &w->p99_post_us);
            stats(cp, it, &w->avg_tx_us, &w->complete_us, &w->p99_tx_us);
            (void)p50;
            w->bw_gbps = (double)n * bs / (w->complete_us * 1e-6) / 1e9;
            w->avg_lat_us = w->avg_prep_us + w->avg_tx_us;
            free(pl), free(pr), free(mk), free(pp), free(po), free(cp);
            free(ld), free(rd);
            progress(++k, nrows, what);
        }
}

/* ---- idle */

static void run_idle(void)
{
    ask("idle0");
    double c0, c1;
    long nv0, niv0, nv1, niv1;
    usage_now(&c0, &nv0, &niv0);
    uint64_t t0 = now_ns(), end = t0 + (uint64_t)(O.duration * 1e9);
    uint64_t t;
    while ((t = now_ns()) < end) {
        uint64_t left_ms = (end - t + 999999) / 1000000;
        if (O.threads)
            agent_turn(0);
        else
            loop_turn(RUN.a, left_ms > 1000000 ? 1000000 : (int)left_ms);
    }
    usage_now(&c1, &nv1, &niv1);
    double sec = (now_ns() - t0) / 1e9;
    const char *r = ask("idle1");
    double tsec, tcpu;
    long tnv, tniv;
    if (sscanf(r, "idle %lf %ld %ld %lf", &tsec, &tnv, &tniv, &tcpu) != 4)
        die("initiator: unexpected idle answer '%s'", r);
    row_t *w = report_row();
    w->role = "initiator";
    w->duration_s = sec;
    w->nvcsw = nv1 - nv0;
    w->nivcsw = niv1 - niv0;
    w->wakeups_per_s = w->nvcsw / sec;
    w->cpu_s = c1 - c0;
    w = report_row();
    w->role = "target";
    w->duration_s = tsec;
    w->nvcsw = tnv;
    w->nivcsw = tniv;
    w->wakeups_per_s = tnv / tsec;
    w->cpu_s = tcpu;
}

int initiator_main(const char *host, uint16_t port)
{
    snprintf(I.host, sizeof(I.host), "%s", host);
    I.port = port;
    RUN.t_start = now_ns();
    size_t need = need_fits("the sweep needs",
                            " per process (largest block x batch x pipeline depth)",
                            " (capped at an eighth of MemTotal)");
    RUN.a = make_agent(I_NAME, NULL, 0, "initiator");
    nxl_agent_on_notif(RUN.a, i_notif, NULL);
    if (!buf_alloc(RUN.a, &I.buf, need, O.mem_nxl))
        die("initiator: %zu bytes (%s): %s", need, O.mem_nxl ? "nxl_mem_alloc" : "malloc",
            nxl_agent_last_error(RUN.a));
    nxl_future_t *f;
    if (O.etcd) {
        if (nxl_md_publish(RUN.a, NULL, NULL, &f) != NXL_SUCCESS)
            die("initiator: nxl_md_publish: %s", nxl_agent_last_error(RUN.a));
        wait_future(f, "publishing to etcd");
        if (nxl_md_fetch_etcd(RUN.a, T_NAME, NULL, 120000, NULL, NULL, &f) != NXL_SUCCESS)
            die("initiator: nxl_md_fetch_etcd: %s", nxl_agent_last_error(RUN.a));
        wait_future(f, "fetching the target's metadata from etcd");
    } else {
        if (nxl_md_fetch(RUN.a, T_NAME, host, port, NULL, NULL, &f) != NXL_SUCCESS)
            die("initiator: nxl_md_fetch: %s", nxl_agent_last_error(RUN.a));
        wait_future(f, "fetching the target's metadata");
        if (nxl_md_send(RUN.a, host, port, NULL, NULL, &f) != NXL_SUCCESS)
            die("initiator: nxl_md_send: %s", nxl_agent_last_error(RUN.a));
        wait_future(f, "sending metadata to the target");
    }
    const char *r = ask("setup %zu %s %llu %zu", need, O.mem_nxl ? "nxl" : "malloc",
                        (unsigned long long)(uintptr_t)I.buf.p, need);
    unsigned long long ra;
    if (sscanf(r, "ready %llu", &ra) != 1)
        die("initiator: unexpected answer '%s' to setup", r);
    I.raddr = (uintptr_t)ra;
    I.rlen = need;
    if (O.etcd) {
        if (nxl_md_fetch_etcd(RUN.a, T_NAME, NULL, 10000, NULL, NULL, &f) != NXL_SUCCESS)
            die("initiator: nxl_md_fetch_etcd: %s", nxl_agent_last_error(RUN.a));
    } else if (nxl_md_fetch(RUN.a, T_NAME, host, port, NULL, NULL, &f) != NXL_SUCCESS) {
        die("initiator: nxl_md_fetch: %s", nxl_agent_last_error(RUN.a));
    }
    wait_future(f, "fetching the target's metadata (with its buffer)");

    switch (O.mode) {
    case M_BW: run_rows(run_bw_row); break;
    case M_LAT: run_lat(); break;
    case M_DESC: run_desc(); break;
    case M_IDLE: run_idle(); break;
    }

    if (nxl_notif_send(RUN.a, T_NAME, "quit", 4, NULL, NULL, &f) == NXL_SUCCESS)
        wait_future(f, "telling the target to quit");
    report("# nxlbench %s, %s%s%s%s, %s, %s, mem_source %s, pipeline_depth %ld, busy_poll_us "
           "%ld%s%s\n",
           mode_names[O.mode], O.backend, transports_desc[0] ? " (" : "", transports_desc,
           transports_desc[0] ? ")" : "", O.op == NXL_READ ? "READ" : "WRITE",
           O.iseg, O.mem_nxl ? "nxl" : "malloc", O.depth, O.busy_poll_us,
           O.recreate ? ", recreate_xfer" : "", O.threads ? ", threaded initiator" : "");
    buf_free(RUN.a, &I.buf);
    loop_detach(RUN.a);
    nxl_agent_destroy(RUN.a);
    return report_plot_after_run();
}
