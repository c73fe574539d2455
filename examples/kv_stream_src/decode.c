/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_stream decode: the target. It listens, answers prefill's hello with
 * where its cache is, checks each layer when its notification arrives (nxl
 * promises that a WRITE's notification arrives after all of its data is
 * visible), checks the whole cache once more at the end and answers
 * "done ERRORS". */
#include "kv_stream.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct decode {
    nxl_agent_t *a;
    const opts_t *o;
    uint8_t *kv;
    size_t layer_bytes, total;
    uint8_t *scratch;
    uint8_t *arrived;
    unsigned long narrived, bad_layers;
    uint64_t bad_bytes;
    char peer[256];
    bool hello;
    int finished, fatal;
    uint64_t t_hello, t_first, t_last, t_activity;
    outcome_t sent; /* the notification that all arrived */
    char pending[160];      /* etcd mode: the reply waiting for the peer's metadata */
    uint8_t *view;          /* --mem VRAM: a layer copied back to host memory */
} decode_t;

/* the bytes of layer l, in host memory */
static const uint8_t *layer_bytes_of(decode_t *d, unsigned long l)
{
    const uint8_t *p = d->kv + l * d->layer_bytes;
#ifdef KV_CUDA
    if (d->o->vram) {
        cudaError_t e = rt->cudaMemcpy(d->view, p, d->layer_bytes, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess)
            fprintf(stderr, "decode: cudaMemcpy of layer %lu: %s\n", l, rt->cudaGetErrorString(e));
        return d->view;
    }
#endif
    return p;
}

static void decode_reply_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    decode_t *d = arg;
    if (st != NXL_SUCCESS) {
        fprintf(stderr, "decode: a notification to '%s' failed: %s\n", d->peer,
                nxl_future_error(f));
        d->fatal = 1;
    }
}

static void decode_done_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    decode_t *d = arg;
    outcome_record(&d->sent, f, st);
}

static void decode_send(decode_t *d, const char *msg, nxl_done_cb cb)
{
    if (nxl_notif_send(d->a, d->peer, msg, strlen(msg), cb, d, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "decode: cannot notify '%s': %s\n", d->peer, nxl_agent_last_error(d->a));
        d->fatal = 1;
        if (cb == decode_done_cb) {
            d->sent.done = 1;
            d->sent.st = NXL_ERR_UNKNOWN;
        }
    }
}

static void decode_fetched(nxl_future_t *f, nxl_status_t st, void *arg)
{
    decode_t *d = arg;
    if (st != NXL_SUCCESS) {
        fprintf(stderr, "decode: cannot fetch the metadata of '%s' from etcd: %s\n", d->peer,
                nxl_future_error(f));
        d->fatal = 1;
        return;
    }
    decode_send(d, d->pending, decode_reply_cb);
}

static void decode_finish(decode_t *d)
{
    const opts_t *o = d->o;
    /* a last pass over the whole cache: no layer was overwritten later */
    uint64_t bad = 0;
    for (unsigned long l = 0; l < o->layers; l++) {
        unsigned long fb;
        size_t fo;
        bad += check_layer(layer_bytes_of(d, l), o, l, d->scratch, &fb, &fo);
    }
    if (bad && !d->bad_bytes)
        fprintf(stderr, "decode: final check: %" PRIu64 " bytes differ\n", bad);
    if (bad > d->bad_bytes)
        d->bad_bytes = bad;
    uint64_t stream = d->t_last - d->t_hello;
    printf("decode: %lu layers x %lu blocks x %s = %s received from '%s' in %.1f ms since the "
           "stream started (%s)", o->layers, o->blocks, size_text(o->block_size).s,
           size_text(d->total).s, d->peer, stream / 1e3, rate_text(d->total, stream).s);
    if (o->layers > 1)
        printf("; first to last notification %.1f ms (%s over layers 2..%lu)",
               (d->t_last - d->t_first) / 1e3,
               rate_text((uint64_t)d->layer_bytes * (o->layers - 1), d->t_last - d->t_first).s,
               o->layers);
    printf("; %lu bad layers, %" PRIu64 " bad bytes: %s\n", d->bad_layers, d->bad_bytes,
           d->bad_bytes ? "FAILED" : "ok");
    char msg[64];
    snprintf(msg, sizeof(msg), "done %" PRIu64, d->bad_bytes);
    decode_send(d, msg, decode_done_cb);
    d->finished = 1;
}

static void decode_layer(decode_t *d, unsigned long l)
{
    const opts_t *o = d->o;
    uint64_t t = now_us();
    if (!d->narrived)
        d->t_first = t;
    d->t_last = t;
    unsigned long fb = 0;
    size_t fo = 0;
    uint64_t bad = check_layer(layer_bytes_of(d, l), o, l, d->scratch, &fb, &fo);
    d->arrived[l] = 1;
    d->narrived++;
    if (bad) {
        d->bad_layers++;
        d->bad_bytes += bad;
        printf("decode: layer %lu/%lu BAD: %" PRIu64 " of %zu bytes differ (first: block %lu "
               "byte %zu)\n", l + 1, o->layers, bad, d->layer_bytes, fb, fo);
    } else if (!o->quiet) {
        printf("decode: layer %lu/%lu ok (%lu blocks, %s, +%.1f ms)\n", l + 1, o->layers,
               o->blocks, size_text(d->layer_bytes).s, (t - d->t_hello) / 1e3);
    }
    if (d->narrived == o->layers)
        decode_finish(d);
}

static void decode_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len,
                         void *arg)
{
    decode_t *d = arg;
    const opts_t *o = d->o;
    char m[128];
    snprintf(m, sizeof(m), "%.*s", (int)(len < sizeof(m) - 1 ? len : sizeof(m) - 1),
             (const char *)msg);
    d->t_activity = now_us();
    if (d->hello && strcmp(from, d->peer)) {
        fprintf(stderr, "decode: ignoring '%s' from '%s': streaming from '%s' already\n", m, from,
                d->peer);
        return;
    }
    unsigned long l, b;
    size_t s;
    if (sscanf(m, "hello %lu %lu %zu", &l, &b, &s) == 3) {
        if (d->hello) {
            fprintf(stderr, "decode: '%s' said hello twice\n", from);
            d->fatal = 1;
            return;
        }
        d->hello = true;
        d->t_hello = d->t_activity;
        snprintf(d->peer, sizeof(d->peer), "%s", from);
        char reply[160];
        if (l != o->layers || b != o->blocks || s != o->block_size) {
            snprintf(reply, sizeof(reply), "error decode holds layers=%lu blocks=%lu "
                     "block_size=%zu", o->layers, o->blocks, o->block_size);
            fprintf(stderr, "decode: '%s' streams layers=%lu blocks=%lu block_size=%zu but this "
                    "cache is layers=%lu blocks=%lu block_size=%zu\n", from, l, b, s, o->layers,
                    o->blocks, o->block_size);
            d->fatal = 1;
        } else {
            snprintf(reply, sizeof(reply), "kv %" PRIxPTR " %zu", (uintptr_t)d->kv, d->total);
            printf("decode: '%s' connected; receiving %lu layers of %s\n", from, o->layers,
                   size_text(d->layer_bytes).s);
        }
        if (o->etcd[0] && nxl_md_check(d->a, from) != NXL_SUCCESS) {
            /* etcd mode: answer once the peer's metadata is fetched */
            snprintf(d->pending, sizeof(d->pending), "%s", reply);
            if (nxl_md_fetch_etcd(d->a, from, NULL, (int)o->timeout_s * 1000, decode_fetched, d,
                                  NULL) != NXL_SUCCESS) {
                fprintf(stderr, "decode: cannot fetch '%s' from etcd: %s\n", from,
                        nxl_agent_last_error(d->a));
                d->fatal = 1;
            }
            return;
        }
        decode_send(d, reply, decode_reply_cb);
        return;
    }
    if (d->hello && !strcmp(m, "start")) {
        d->t_hello = d->t_activity; /* after prefill's warm-up pass */
        return;
    }
    char extra;
    if (d->hello && sscanf(m, "layer %lu%c", &l, &extra) == 1) {
        if (l >= o->layers || d->arrived[l]) {
            fprintf(stderr, "decode: notification '%s': %s\n", m,
                    l >= o->layers ? "no such layer" : "layer arrived twice");
            d->bad_layers++;
            d->fatal = 1;
            return;
        }
        decode_layer(d, l);
        return;
    }
    fprintf(stderr, "decode: unexpected notification from '%s': '%s'\n", from, m);
}

int run_decode(const opts_t *o, int port_fd)
{
    decode_t d = {.o = o};
    int rc = 1;
    d.layer_bytes = o->blocks * o->block_size;
    d.total = o->layers * d.layer_bytes;
    d.a = make_agent("decode", o->addr.set ? o->addr.host : NULL, o->addr.port, o);
    if (!d.a)
        goto out;
    uint16_t port = nxl_agent_listen_port(d.a);
    if (port_fd >= 0) {
        char b[16];
        int n = snprintf(b, sizeof(b), "%u\n", port);
        if (write(port_fd, b, (size_t)n) != n)
            perror("decode: writing the port to the pipe");
        close(port_fd);
        port_fd = -1;
    }
    if (!(d.kv = alloc_kv(d.a, "decode", d.total, o->vram)))
        goto out;
    if (o->vram && !(d.view = malloc(d.layer_bytes))) {
        fprintf(stderr, "decode: out of memory\n");
        goto out;
    }
    d.scratch = malloc(o->block_size);
    d.arrived = calloc(o->layers, 1);
    if (!d.scratch || !d.arrived) {
        fprintf(stderr, "decode: out of memory\n");
        goto out;
    }
    nxl_agent_on_notif(d.a, decode_notif, &d);
    if (o->etcd[0]) {
        nxl_future_t *pf;
        nxl_status_t pst = nxl_md_publish(d.a, NULL, NULL, &pf);
        if (pst == NXL_SUCCESS)
            pst = nxl_future_wait(pf, (int)o->timeout_s * 1000);
        if (pst != NXL_SUCCESS) {
            fprintf(stderr, "decode: cannot publish its metadata to etcd at %s: %s\n", o->etcd,
                    pst == NXL_IN_PROG ? "no answer" : nxl_future_error(pf));
            nxl_future_release(pf);
            goto out;
        }
        nxl_future_release(pf);
        printf("decode: metadata published to etcd at %s\n", o->etcd);
    }
    printf("decode: listening on %s:%u for %lu layers x %lu blocks x %s = %s\n", o->addr.host, port,
           o->layers, o->blocks, size_text(o->block_size).s, size_text(d.total).s);
    uint64_t start = now_us(), limit = (uint64_t)o->timeout_s * 1000000u;
    while (!d.finished && !d.fatal) {
        if (nxl_agent_run_once(d.a, 1000) != NXL_SUCCESS) {
            fprintf(stderr, "decode: %s\n", nxl_agent_last_error(d.a));
            goto out;
        }
        uint64_t t = now_us();
        if (!d.hello && t - start > limit) {
            fprintf(stderr, "decode: no prefill connected within %u s (listening on %s:%u)\n",
                    o->timeout_s, o->addr.host, port);
            goto out;
        }
        if (d.hello && !d.finished && t - d.t_activity > limit) {
            fprintf(stderr, "decode: stalled: %lu of %lu layers arrived, then nothing for %u s\n",
                    d.narrived, o->layers, o->timeout_s);
            goto out;
        }
    }
    if (d.fatal && !d.finished) {
        /* let an error reply reach the peer before leaving */
        nxl_agent_run_once(d.a, 100);
        goto out;
    }
    if (!run_until(d.a, &d.sent.done, now_us() + limit)) {
        fprintf(stderr, "decode: telling '%s' that all arrived did not complete within %u s\n",
                d.peer, o->timeout_s);
        goto out;
    }
    if (d.sent.st != NXL_SUCCESS) {
        fprintf(stderr, "decode: telling '%s' that all arrived failed: %s\n", d.peer, d.sent.err);
        goto out;
    }
    rc = d.bad_bytes || d.fatal ? 1 : 0;
out:
    if (port_fd >= 0)
        close(port_fd);
    if (d.a) {
        if (d.kv)
            nxl_mem_free(d.a, d.kv);
        nxl_agent_destroy(d.a);
    }
    free(d.scratch);
    free(d.view);
    free(d.arrived);
    return rc;
}
