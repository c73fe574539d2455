/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_stream prefill: the initiator. It fetches decode's metadata, says
 * hello with the cache's shape, learns where decode's cache is, prepares
 * both lists once and makes one transfer per layer; then, layer after layer,
 * "computes" it and posts its WRITE with the notification "layer N", up to
 * --inflight at a time, and waits for decode's verdict. */
#include "kv_stream.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef struct prefill {
    nxl_agent_t *a;
    const opts_t *o;
    uint8_t *kv;
    size_t layer_bytes, total;
    /* setup steps */
    outcome_t step; /* the setup step under way (step) */
    /* decode's answers */
    int got_kv, got_done;
    uintptr_t raddr;
    size_t rlen;
    char refused[256];
    uint64_t decode_bad;
    /* the stream */
    unsigned long posted, completed, failed, inflight;
    uint64_t t_start, t_end, t_compute;
    unsigned long warm_left, warm_failed;
    int warm_done;
    /* --mem VRAM: the layers' patterns in host memory, copied into VRAM on
     * a stream of prefill's own; an event per layer */
    uint8_t *host;
#ifdef KV_CUDA
    cudaStream_t stream;
    cudaEvent_t *ev;
#endif
    struct layer_ctx *ctx;
    nxl_xfer_t **xs;
} prefill_t;

static void prefill_step_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    prefill_t *p = arg;
    outcome_record(&p->step, f, st);
}

/* Waits for a setup step that @p started reports to prefill_step_cb. The
 * flag can be cleared after the call: its callback never runs inside it. */
static nxl_status_t step(prefill_t *p, nxl_status_t started)
{
    p->step.done = 0;
    if (started != NXL_SUCCESS) {
        snprintf(p->step.err, sizeof(p->step.err), "%s", nxl_agent_last_error(p->a));
        return started;
    }
    if (!run_until(p->a, &p->step.done, now_us() + (uint64_t)p->o->timeout_s * 1000000u)) {
        snprintf(p->step.err, sizeof(p->step.err), "no answer within %u s", p->o->timeout_s);
        return NXL_IN_PROG;
    }
    return p->step.st;
}

static void prefill_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len,
                          void *arg)
{
    prefill_t *p = arg;
    char m[256];
    snprintf(m, sizeof(m), "%.*s", (int)(len < sizeof(m) - 1 ? len : sizeof(m) - 1),
             (const char *)msg);
    if (strcmp(from, "decode")) {
        fprintf(stderr, "prefill: unexpected notification from '%s': '%s'\n", from, m);
        return;
    }
    uintptr_t addr;
    size_t n;
    uint64_t bad;
    if (sscanf(m, "kv %" SCNxPTR " %zu", &addr, &n) == 2) {
        p->raddr = addr;
        p->rlen = n;
        p->got_kv = 1;
    } else if (!strncmp(m, "error ", 6)) {
        snprintf(p->refused, sizeof(p->refused), "%s", m + 6);
        p->got_kv = 1;
    } else if (sscanf(m, "done %" SCNu64, &bad) == 1) {
        p->decode_bad = bad;
        p->got_done = 1;
    } else {
        fprintf(stderr, "prefill: unexpected notification from 'decode': '%s'\n", m);
    }
}

typedef struct layer_ctx {
    prefill_t *p;
    unsigned long layer;
} layer_ctx_t;

static void write_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    layer_ctx_t *c = arg;
    prefill_t *p = c->p;
    p->inflight--;
    p->completed++;
    if (st != NXL_SUCCESS) {
        p->failed++;
        fprintf(stderr, "prefill: WRITE of layer %lu failed (%s): %s\n", c->layer,
                nxl_status_name(st), nxl_future_error(f));
    }
    if (p->completed == p->posted)
        p->t_end = now_us();
}

static void warm_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    prefill_t *p = arg;
    if (st != NXL_SUCCESS && p->warm_failed++ == 0)
        fprintf(stderr, "prefill: warm-up WRITE failed (%s): %s\n", nxl_status_name(st),
                nxl_future_error(f));
    if (--p->warm_left == 0)
        p->warm_done = 1;
}

/* One untimed pass of every layer's WRITE, without notifications: the first
 * touch of decode's memory mapped into this process (page faults) stays out
 * of the measurement. The transfers are then posted again (contract 6). */
static bool prefill_warmup(prefill_t *p, nxl_xfer_t **xs)
{
    const opts_t *o = p->o;
    uint64_t t = now_us();
    bool posted = true;
    for (unsigned long l = 0; l < o->layers && posted; l++) {
        nxl_xfer_set_notif(xs[l], NULL, 0);
        if (nxl_xfer_post(xs[l], warm_done, p, NULL) != NXL_SUCCESS) {
            fprintf(stderr, "prefill: warm-up WRITE of layer %lu: %s\n", l,
                    nxl_agent_last_error(p->a));
            posted = false;
            continue;
        }
        p->warm_left++;
    }
    if (p->warm_left && !run_until(p->a, &p->warm_done, now_us() + o->timeout_s * 1000000ull)) {
        fprintf(stderr, "prefill: the warm-up pass did not complete within %u s\n", o->timeout_s);
        return false;
    }
    if (!posted || p->warm_failed)
        return false;
    for (unsigned long l = 0; l < o->layers; l++) {
        char notif[32];
        int nl = snprintf(notif, sizeof(notif), "layer %lu", l);
        if (nxl_xfer_set_notif(xs[l], notif, (size_t)nl) != NXL_SUCCESS) {
            fprintf(stderr, "prefill: nxl_xfer_set_notif: %s\n", nxl_agent_last_error(p->a));
            return false;
        }
    }
    if (!o->quiet)
        printf("prefill: warm-up pass (%s, no notifications) took %.1f ms\n",
               size_text(p->total).s, (now_us() - t) / 1e3);
    if (step(p, nxl_notif_send(p->a, "decode", "start", 5, prefill_step_cb, p, NULL)) !=
        NXL_SUCCESS) {
        fprintf(stderr, "prefill: cannot notify 'decode': %s\n", p->step.err);
        return false;
    }
    return true;
}

#ifdef KV_CUDA
/* --mem VRAM: the GPU reached the layer's event (its bytes are in VRAM):
 * post its WRITE now */
static void layer_ready(nxl_future_t *f, nxl_status_t st, void *arg)
{
    layer_ctx_t *c = arg;
    prefill_t *p = c->p;
    if (st == NXL_SUCCESS && nxl_xfer_post(p->xs[c->layer], write_done, c, NULL) == NXL_SUCCESS)
        return;
    fprintf(stderr, "prefill: layer %lu: %s\n", c->layer,
            st != NXL_SUCCESS ? nxl_future_error(f) : nxl_agent_last_error(p->a));
    write_done(f, st != NXL_SUCCESS ? st : NXL_ERR_BACKEND, c);
}
#endif

/* "Computes" a layer: writes its pattern, then lets --compute_us pass with
 * the reactor running, as a GPU would compute while transfers move. With
 * --mem VRAM the pattern goes to VRAM on prefill's stream and the layer's
 * WRITE is posted when the GPU reached the event recorded after it. */
static void compute_layer(prefill_t *p, unsigned long l)
{
    uint64_t t = now_us();
#ifdef KV_CUDA
    if (p->o->vram) {
        uint8_t *h = p->host + l * p->layer_bytes;
        fill_layer(h, p->o, l);
        rt->cudaMemcpyAsync(p->kv + l * p->layer_bytes, h, p->layer_bytes, cudaMemcpyDefault,
                            p->stream);
        rt->cudaEventRecord(p->ev[l], p->stream);
    } else
#endif
        fill_layer(p->kv + l * p->layer_bytes, p->o, l);
    if (p->o->compute_us) {
        int never = 0;
        run_until(p->a, &never, t + p->o->compute_us);
    }
    p->t_compute += now_us() - t;
}

/* Fetches decode's metadata, retrying while nobody listens yet. */
static bool prefill_fetch(prefill_t *p)
{
    const opts_t *o = p->o;
    uint64_t deadline = now_us() + (uint64_t)o->timeout_s * 1000000u;
    bool said = false;
    for (;;) {
        nxl_status_t st = step(p, nxl_md_fetch(p->a, "decode", o->addr.host, o->addr.port,
                                               prefill_step_cb, p, NULL));
        if (st == NXL_SUCCESS)
            return true;
        if (st != NXL_ERR_REMOTE_DISCONNECT || now_us() >= deadline) {
            fprintf(stderr, "prefill: cannot fetch the metadata of 'decode' at %s:%u: %s\n",
                    o->addr.host, o->addr.port, p->step.err);
            return false;
        }
        if (!said)
            printf("prefill: waiting for decode at %s:%u (%s)\n", o->addr.host, o->addr.port,
                   p->step.err);
        said = true;
        int never = 0;
        run_until(p->a, &never, now_us() + 200000);
    }
}

int run_prefill(const opts_t *o)
{
    prefill_t p = {.o = o};
    int rc = 1;
    nxl_prepped_t *lp = NULL, *rp = NULL;
    nxl_xfer_t **xs = NULL;
    layer_ctx_t *ctx = NULL;
    nxl_desc_t *ld = NULL, *rd = NULL;
    size_t *idx = NULL;
    size_t n = o->layers * o->blocks;
    p.layer_bytes = o->blocks * o->block_size;
    p.total = o->layers * p.layer_bytes;
    if (!(p.a = make_agent("prefill", NULL, 0, o)) ||
        !(p.kv = alloc_kv(p.a, "prefill", p.total, o->vram)))
        goto out;
    nxl_agent_on_notif(p.a, prefill_notif, &p);

    /* 1. learn decode's transport address and regions; 2. tell it ours */
    if (o->etcd[0]) {
        if (step(&p, nxl_md_publish(p.a, prefill_step_cb, &p, NULL)) != NXL_SUCCESS) {
            fprintf(stderr, "prefill: cannot publish its metadata to etcd at %s: %s\n", o->etcd,
                    p.step.err);
            goto out;
        }
        if (step(&p, nxl_md_fetch_etcd(p.a, "decode", NULL, (int)o->timeout_s * 1000,
                                       prefill_step_cb, &p, NULL)) != NXL_SUCCESS) {
            fprintf(stderr, "prefill: cannot fetch 'decode' from etcd at %s: %s\n", o->etcd,
                    p.step.err);
            goto out;
        }
        printf("prefill: found 'decode' through etcd at %s\n", o->etcd);
    } else {
        if (!prefill_fetch(&p))
            goto out;
        if (step(&p, nxl_md_send(p.a, o->addr.host, o->addr.port, prefill_step_cb, &p, NULL)) !=
            NXL_SUCCESS) {
            fprintf(stderr, "prefill: cannot send its metadata to %s:%u: %s\n", o->addr.host,
                    o->addr.port, p.step.err);
            goto out;
        }
    }
    /* 3. handshake: the shape out, where decode's cache lives back */
    char hello[96];
    snprintf(hello, sizeof(hello), "hello %lu %lu %zu", o->layers, o->blocks, o->block_size);
    if (step(&p, nxl_notif_send(p.a, "decode", hello, strlen(hello), prefill_step_cb, &p,
                                NULL)) != NXL_SUCCESS) {
        fprintf(stderr, "prefill: cannot notify 'decode': %s\n", p.step.err);
        goto out;
    }
    if (!run_until(p.a, &p.got_kv, now_us() + (uint64_t)o->timeout_s * 1000000u)) {
        fprintf(stderr, "prefill: 'decode' did not say where its KV cache is within %u s\n",
                o->timeout_s);
        goto out;
    }
    if (p.refused[0]) {
        fprintf(stderr, "prefill: 'decode' refused the stream: %s\n", p.refused);
        goto out;
    }
    if (p.rlen != p.total) {
        fprintf(stderr, "prefill: 'decode' holds %zu bytes, this stream is %zu\n", p.rlen,
                p.total);
        goto out;
    }

    /* 4. prepare once: one descriptor per block on each side */
    ld = calloc(n, sizeof(*ld));
    rd = calloc(n, sizeof(*rd));
    idx = calloc(o->blocks, sizeof(*idx));
    xs = calloc(o->layers, sizeof(*xs));
    ctx = calloc(o->layers, sizeof(*ctx));
    if (!ld || !rd || !idx || !xs || !ctx) {
        fprintf(stderr, "prefill: out of memory for %zu descriptors\n", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        ld[i] = (nxl_desc_t){.addr = (uintptr_t)p.kv + i * o->block_size, .len = o->block_size};
        rd[i] = (nxl_desc_t){.addr = p.raddr + i * o->block_size, .len = o->block_size};
    }
    nxl_mem_t mt = o->vram ? NXL_VRAM : NXL_DRAM; /* device 0: dev_id 0 */
    if (nxl_prep(p.a, NULL, mt, ld, n, &lp) != NXL_SUCCESS ||
        nxl_prep(p.a, "decode", mt, rd, n, &rp) != NXL_SUCCESS) {
        fprintf(stderr, "prefill: nxl_prep: %s\n", nxl_agent_last_error(p.a));
        goto out;
    }
    for (unsigned long l = 0; l < o->layers; l++) {
        char notif[32];
        nxl_xfer_opts_t xo;
        nxl_xfer_opts_init(&xo);
        xo.notif = notif;
        xo.notif_len = (size_t)snprintf(notif, sizeof(notif), "layer %lu", l);
        for (unsigned long b = 0; b < o->blocks; b++)
            idx[b] = l * o->blocks + b;
        if (nxl_xfer_make(p.a, NXL_WRITE, lp, idx, rp, idx, o->blocks, &xo, &xs[l]) !=
            NXL_SUCCESS) {
            fprintf(stderr, "prefill: nxl_xfer_make for layer %lu: %s\n", l,
                    nxl_agent_last_error(p.a));
            goto out;
        }
        ctx[l] = (layer_ctx_t){.p = &p, .layer = l};
    }
    p.ctx = ctx;
    p.xs = xs;
#ifdef KV_CUDA
    if (o->vram) {
        p.host = malloc(p.total);
        p.ev = calloc(o->layers, sizeof(*p.ev));
        bool ok = p.host && p.ev &&
                  rt->cudaStreamCreateWithFlags(&p.stream, cudaStreamNonBlocking) == cudaSuccess;
        for (unsigned long l = 0; ok && l < o->layers; l++)
            ok = rt->cudaEventCreateWithFlags(&p.ev[l], cudaEventDisableTiming) == cudaSuccess;
        if (!ok) {
            fprintf(stderr, "prefill: --mem VRAM: cannot make a stream and %lu events\n",
                    o->layers);
            goto out;
        }
    }
#endif
    if (!o->quiet)
        printf("prefill: streaming %lu layers x %lu blocks x %s = %s to 'decode' over %s, up "
               "to %u layers in flight\n", o->layers, o->blocks, size_text(o->block_size).s,
               size_text(p.total).s, nxl_backend_name(nxl_xfer_backend(xs[0])), o->inflight);

    if (o->warmup && !prefill_warmup(&p, xs))
        goto out;

    /* 5. the stream: compute a layer, post its WRITE, go on while it moves */
    uint64_t limit = (uint64_t)o->timeout_s * 1000000u;
    p.t_start = now_us();
    for (unsigned long l = 0; l < o->layers && !p.failed; l++) {
        uint64_t waited = now_us();
        while (p.inflight >= o->inflight && !p.failed) {
            unsigned long before = p.completed;
            nxl_agent_run_once(p.a, 1000);
            if (p.completed != before)
                waited = now_us();
            else if (now_us() - waited > limit)
                break;
        }
        if (p.inflight >= o->inflight) {
            if (!p.failed)
                fprintf(stderr, "prefill: no WRITE completed within %u s\n", o->timeout_s);
            break;
        }
        compute_layer(&p, l);
#ifdef KV_CUDA
        if (o->vram) {
            /* the WRITE goes out from the event's callback (layer_ready) */
            if (nxl_future_from_cuda_event(p.a, p.ev[l], layer_ready, &ctx[l], NULL) !=
                NXL_SUCCESS) {
                fprintf(stderr, "prefill: nxl_future_from_cuda_event for layer %lu: %s\n", l,
                        nxl_agent_last_error(p.a));
                break;
            }
            p.posted++;
            p.inflight++;
            continue;
        }
#endif
        if (nxl_xfer_post(xs[l], write_done, &ctx[l], NULL) != NXL_SUCCESS) {
            fprintf(stderr, "prefill: posting the WRITE of layer %lu: %s\n", l,
                    nxl_agent_last_error(p.a));
            break;
        }
        p.posted++;
        p.inflight++;
    }
    /* every posted WRITE completes: wait for the rest */
    uint64_t waited = now_us();
    while (p.completed < p.posted) {
        unsigned long before = p.completed;
        nxl_agent_run_once(p.a, 1000);
        if (p.completed != before)
            waited = now_us();
        else if (now_us() - waited > limit) {
            fprintf(stderr, "prefill: %lu WRITEs still in flight after %u s without progress\n",
                    p.posted - p.completed, o->timeout_s);
            goto out;
        }
    }
    uint64_t us = p.t_end - p.t_start;
    uint64_t written = (uint64_t)(p.completed - p.failed) * p.layer_bytes;
    printf("prefill: %lu of %lu layers written (%s) in %.1f ms, %.1f ms of it computing: %s, "
           "%lu failed\n", p.completed - p.failed, o->layers, size_text(written).s, us / 1e3,
           p.t_compute / 1e3, rate_text(written, us).s, p.failed);
    if (!o->warmup && !o->quiet && p.total >= (16u << 20))
        printf("prefill: (a first pass: it pays the page faults of first touching decode's "
               "memory mapped here; --warmup measures a second pass)\n");
    if (p.failed || p.posted < o->layers)
        goto out;

    /* 6. decode's verdict */
    if (!run_until(p.a, &p.got_done, now_us() + limit)) {
        fprintf(stderr, "prefill: 'decode' did not confirm within %u s\n", o->timeout_s);
        goto out;
    }
    if (p.decode_bad) {
        fprintf(stderr, "prefill: 'decode' found %" PRIu64 " wrong bytes\n", p.decode_bad);
        goto out;
    }
    rc = 0;
out:
    if (xs)
        for (unsigned long l = 0; l < o->layers; l++)
            nxl_xfer_release(xs[l]);
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
    if (p.a) {
        if (p.kv)
            nxl_mem_free(p.a, p.kv);
        nxl_agent_destroy(p.a); /* what is still pending completes here, canceled */
    }
#ifdef KV_CUDA
    if (p.ev)
        for (unsigned long l = 0; l < o->layers; l++)
            if (p.ev[l])
                rt->cudaEventDestroy(p.ev[l]);
    if (p.stream)
        rt->cudaStreamDestroy(p.stream);
    free(p.ev);
#endif
    free(p.host);
    free(xs);
    free(ctx);
    free(ld);
    free(rd);
    free(idx);
    return rc;
}
