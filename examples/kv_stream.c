/* kv_stream — streaming a KV cache layer by layer from a prefill agent to a
 * decode agent, the way disaggregated LLM serving moves it.
 *
 *   kv_stream decode  --listen 127.0.0.1:5555 [shape]     the target
 *   kv_stream prefill --connect 127.0.0.1:5555 [shape]    the initiator
 *   kv_stream [both] [shape]                               both, in two processes
 *
 * The KV cache is layers × blocks × block_size bytes, layer-major, in memory
 * each agent allocates and registers with nxl_mem_alloc(). The exchange:
 *
 *   prefill                                      decode
 *   nxl_md_fetch("decode", host, port)  ──TCP──▶ metadata listener
 *   nxl_md_send(host, port)             ──TCP──▶ loads prefill's metadata
 *   notif "hello L B S"                 ──UCX──▶ checks the shape
 *                                       ◀──UCX── notif "kv ADDR LEN" (where its cache is)
 *   nxl_prep both lists (one descriptor per block), one transfer per layer
 *   per layer: compute (write the pattern), post WRITE + notif "layer N"
 *                                       ──UCX──▶ on "layer N": check the layer's bytes
 *                                       ◀──UCX── notif "done ERRORS"
 *
 * Every byte written depends on (layer, block, offset), so decode can check
 * each layer when its notification arrives: nxl promises that the
 * notification of a WRITE arrives only after all of its data is visible.
 *
 * --mem VRAM keeps both caches in GPU memory (device 0): the agents add the
 * CUDA transport, the layers move through CUDA IPC, and their
 * notifications go through UCX after the data (the engine relays them).
 * Prefill "computes" a layer by copying its pattern into VRAM on a stream
 * of its own, records a CUDA event, and posts the layer's WRITE from the
 * callback of nxl_future_from_cuda_event(): the moment the GPU is done,
 * without a host synchronize. Decode copies each layer back to check it. */
#include <nxl.h>
#ifdef KV_CUDA
#include "transports/cuda/cudart.h" /* the CUDA runtime, loaded at run time as libnxl does */
#endif

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TOTAL_BYTES (16ull << 30)   /* one side's cache: keep memory modest */
#define MAX_DESCS (1ul << 26)

typedef struct opts {
    const char *mode;
    char host[256];
    uint16_t port;
    bool have_addr;
    unsigned long layers, blocks;
    size_t block_size;
    unsigned long compute_us;
    unsigned timeout_s;
    unsigned inflight;
    bool quiet, warmup;
    bool vram;              /* --mem VRAM: the caches in GPU memory */
    char etcd[512];         /* --etcd_endpoints: discover each other through etcd */
    char backend[32];       /* --backend: UCX (default) or LIBFABRIC */
} opts_t;

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

typedef struct text {
    char s[64];
} text_t;

/* "8 B", "64 KiB", "1.5 MiB" */
static text_t size_text(uint64_t b)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    text_t t;
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0 || v == (double)(uint64_t)v)
        snprintf(t.s, sizeof(t.s), "%.0f %s", v, unit[u]);
    else
        snprintf(t.s, sizeof(t.s), "%.1f %s", v, unit[u]);
    return t;
}

/* "3.21 GB/s", "45.6 MB/s" (decimal units, as links are rated) */
static text_t rate_text(uint64_t bytes, uint64_t us)
{
    text_t t;
    double mbs = us ? (double)bytes / (double)us : 0;
    if (!us)
        snprintf(t.s, sizeof(t.s), "- GB/s");
    else if (mbs >= 1000)
        snprintf(t.s, sizeof(t.s), "%.2f GB/s", mbs / 1000);
    else
        snprintf(t.s, sizeof(t.s), "%.1f MB/s", mbs);
    return t;
}

/* -------------------------------------------------------------- pattern */

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The bytes of (layer, block): byte i is byte i % 8 (little-endian) of
 * word i / 8, the same on every host. */
static void pattern(uint8_t *p, size_t len, uint64_t layer, uint64_t block)
{
    uint64_t seed = mix64(layer * 0x100000001b3ull ^ mix64(block));
    size_t nw = len / 8, w;
    for (w = 0; w < nw; w++, p += 8) {
        uint64_t v = mix64(seed + w);
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
        p[2] = (uint8_t)(v >> 16);
        p[3] = (uint8_t)(v >> 24);
        p[4] = (uint8_t)(v >> 32);
        p[5] = (uint8_t)(v >> 40);
        p[6] = (uint8_t)(v >> 48);
        p[7] = (uint8_t)(v >> 56);
    }
    uint64_t v = mix64(seed + w);
    for (size_t k = 0; k < len % 8; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

static void fill_layer(uint8_t *layer_base, const opts_t *o, unsigned long layer)
{
    for (unsigned long b = 0; b < o->blocks; b++)
        pattern(layer_base + b * o->block_size, o->block_size, layer, b);
}

/* Counts the bytes of a layer that differ from the pattern; *first_block and
 * *first_off locate the first one. scratch holds block_size bytes. */
static uint64_t check_layer(const uint8_t *layer_base, const opts_t *o, unsigned long layer,
                            uint8_t *scratch, unsigned long *first_block, size_t *first_off)
{
    uint64_t bad = 0;
    for (unsigned long b = 0; b < o->blocks; b++) {
        const uint8_t *p = layer_base + b * o->block_size;
        pattern(scratch, o->block_size, layer, b);
        if (!memcmp(p, scratch, o->block_size))
            continue;
        for (size_t i = 0; i < o->block_size; i++)
            if (p[i] != scratch[i] && bad++ == 0) {
                *first_block = b;
                *first_off = i;
            }
    }
    return bad;
}

/* Runs the reactor until *flag is set or the deadline passes; sleeps while
 * nothing happens. @return whether the flag was set. */
static bool run_until(nxl_agent_t *a, const int *flag, uint64_t deadline_us)
{
    while (!*flag) {
        uint64_t t = now_us();
        if (t >= deadline_us)
            return false;
        uint64_t left_ms = (deadline_us - t + 999) / 1000;
        if (nxl_agent_run_once(a, left_ms > 1000 ? 1000 : (int)left_ms) != NXL_SUCCESS)
            return false;
    }
    return true;
}

#ifdef KV_CUDA
static const nxl_cuda_rt_t *rt;
#endif

static nxl_agent_t *make_agent(const char *name, const char *listen, uint16_t port,
                               const opts_t *o)
{
    nxl_agent_config_t cfg;
    nxl_agent_config_init(&cfg);
    cfg.name = name;
    cfg.listen_addr = listen;
    cfg.listen_port = port;
    cfg.etcd_endpoints = o->etcd[0] ? o->etcd : NULL;
    nxl_agent_t *a;
    if (nxl_agent_create(&cfg, &a) != NXL_SUCCESS) {
        fprintf(stderr, "%s: cannot create the agent: %s\n", name, nxl_agent_last_error(NULL));
        return NULL;
    }
    const char *be = o->backend[0] ? o->backend : "UCX";
    if (nxl_backend_create(a, be, NULL, 0, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "%s: cannot create the %s transport: %s\n", name, be,
                nxl_agent_last_error(a));
        nxl_agent_destroy(a);
        return NULL;
    }
    if (o->vram) {
#ifdef KV_CUDA
        char why[160];
        if (!(rt = nxl_cuda_rt_get(NULL, why, sizeof(why))) ||
            nxl_backend_create(a, "CUDA", NULL, 0, NULL) != NXL_SUCCESS) {
            fprintf(stderr, "%s: --mem VRAM: cannot create the CUDA transport: %s\n", name,
                    rt ? nxl_agent_last_error(a) : why);
            nxl_agent_destroy(a);
            return NULL;
        }
#endif
    }
    return a;
}

static uint8_t *alloc_kv(nxl_agent_t *a, const char *who, size_t total, bool vram)
{
    void *p;
    if (nxl_mem_alloc(a, vram ? NXL_VRAM : NXL_DRAM, total, 0, &p) != NXL_SUCCESS) {
        fprintf(stderr, "%s: cannot allocate the %s KV cache in %s: %s\n", who,
                size_text(total).s, vram ? "VRAM" : "DRAM", nxl_agent_last_error(a));
        return NULL;
    }
#ifdef KV_CUDA
    if (vram) {
        rt->cudaMemset(p, 0, total);
        return p;
    }
#endif
    memset(p, 0, total);
    return p;
}

/* --------------------------------------------------------------- decode */

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
    int done_sent;
    nxl_status_t done_st;
    char done_err[512];
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
    d->done_st = st;
    if (st != NXL_SUCCESS)
        snprintf(d->done_err, sizeof(d->done_err), "%s", nxl_future_error(f));
    d->done_sent = 1;
}

static void decode_send(decode_t *d, const char *msg, nxl_done_cb cb)
{
    if (nxl_notif_send(d->a, d->peer, msg, strlen(msg), cb, d, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "decode: cannot notify '%s': %s\n", d->peer, nxl_agent_last_error(d->a));
        d->fatal = 1;
        if (cb == decode_done_cb) {
            d->done_sent = 1;
            d->done_st = NXL_ERR_UNKNOWN;
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

static int run_decode(const opts_t *o, int port_fd)
{
    decode_t d = {.o = o};
    int rc = 1;
    d.layer_bytes = o->blocks * o->block_size;
    d.total = o->layers * d.layer_bytes;
    d.a = make_agent("decode", o->have_addr ? o->host : NULL, o->port, o);
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
    printf("decode: listening on %s:%u for %lu layers x %lu blocks x %s = %s\n", o->host, port,
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
                    o->timeout_s, o->host, port);
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
    if (!run_until(d.a, &d.done_sent, now_us() + limit)) {
        fprintf(stderr, "decode: telling '%s' that all arrived did not complete within %u s\n",
                d.peer, o->timeout_s);
        goto out;
    }
    if (d.done_st != NXL_SUCCESS) {
        fprintf(stderr, "decode: telling '%s' that all arrived failed: %s\n", d.peer, d.done_err);
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

/* -------------------------------------------------------------- prefill */

typedef struct prefill {
    nxl_agent_t *a;
    const opts_t *o;
    uint8_t *kv;
    size_t layer_bytes, total;
    /* setup steps */
    int step_done;
    nxl_status_t step_st;
    char step_err[512];
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
    p->step_st = st;
    if (st != NXL_SUCCESS)
        snprintf(p->step_err, sizeof(p->step_err), "%s", nxl_future_error(f));
    p->step_done = 1;
}

/* Waits for a setup step that @p started reports to prefill_step_cb. The
 * flag can be cleared after the call: its callback never runs inside it. */
static nxl_status_t step(prefill_t *p, nxl_status_t started)
{
    p->step_done = 0;
    if (started != NXL_SUCCESS) {
        snprintf(p->step_err, sizeof(p->step_err), "%s", nxl_agent_last_error(p->a));
        return started;
    }
    if (!run_until(p->a, &p->step_done, now_us() + (uint64_t)p->o->timeout_s * 1000000u)) {
        snprintf(p->step_err, sizeof(p->step_err), "no answer within %u s", p->o->timeout_s);
        return NXL_IN_PROG;
    }
    return p->step_st;
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
        fprintf(stderr, "prefill: cannot notify 'decode': %s\n", p->step_err);
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
        nxl_status_t st = step(p, nxl_md_fetch(p->a, "decode", o->host, o->port,
                                               prefill_step_cb, p, NULL));
        if (st == NXL_SUCCESS)
            return true;
        if (st != NXL_ERR_REMOTE_DISCONNECT || now_us() >= deadline) {
            fprintf(stderr, "prefill: cannot fetch the metadata of 'decode' at %s:%u: %s\n",
                    o->host, o->port, p->step_err);
            return false;
        }
        if (!said)
            printf("prefill: waiting for decode at %s:%u (%s)\n", o->host, o->port, p->step_err);
        said = true;
        int never = 0;
        run_until(p->a, &never, now_us() + 200000);
    }
}

static int run_prefill(const opts_t *o)
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
                    p.step_err);
            goto out;
        }
        if (step(&p, nxl_md_fetch_etcd(p.a, "decode", NULL, (int)o->timeout_s * 1000,
                                       prefill_step_cb, &p, NULL)) != NXL_SUCCESS) {
            fprintf(stderr, "prefill: cannot fetch 'decode' from etcd at %s: %s\n", o->etcd,
                    p.step_err);
            goto out;
        }
        printf("prefill: found 'decode' through etcd at %s\n", o->etcd);
    } else {
        if (!prefill_fetch(&p))
            goto out;
        if (step(&p, nxl_md_send(p.a, o->host, o->port, prefill_step_cb, &p, NULL)) !=
            NXL_SUCCESS) {
            fprintf(stderr, "prefill: cannot send its metadata to %s:%u: %s\n", o->host,
                    o->port, p.step_err);
            goto out;
        }
    }
    /* 3. handshake: the shape out, where decode's cache lives back */
    char hello[96];
    snprintf(hello, sizeof(hello), "hello %lu %lu %zu", o->layers, o->blocks, o->block_size);
    if (step(&p, nxl_notif_send(p.a, "decode", hello, strlen(hello), prefill_step_cb, &p,
                                NULL)) != NXL_SUCCESS) {
        fprintf(stderr, "prefill: cannot notify 'decode': %s\n", p.step_err);
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

/* ----------------------------------------------------------------- both */

static int run_both(opts_t *o)
{
    int fds[2];
    if (pipe(fds)) {
        perror("kv_stream: pipe");
        return 1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("kv_stream: fork");
        return 1;
    }
    if (pid == 0) {
        /* the child is decode, on an ephemeral loopback port */
        close(fds[0]);
        snprintf(o->host, sizeof(o->host), "127.0.0.1");
        o->port = 0;
        o->have_addr = true;
        int rc = run_decode(o, fds[1]);
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    close(fds[1]);
    char buf[16] = "";
    size_t got = 0;
    struct pollfd pf = {.fd = fds[0], .events = POLLIN};
    while (got < sizeof(buf) - 1 && !memchr(buf, '\n', got)) {
        int r = poll(&pf, 1, (int)o->timeout_s * 1000);
        ssize_t k = r > 0 ? read(fds[0], buf + got, sizeof(buf) - 1 - got) : -1;
        if (r < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
        buf[got] = 0;
    }
    close(fds[0]);
    unsigned long port = strtoul(buf, NULL, 10);
    int prc = -1;
    if (!memchr(buf, '\n', got) || !port || port > 65535) {
        fprintf(stderr, "kv_stream: decode did not start (no port from the child)\n");
        kill(pid, SIGTERM);
    } else {
        snprintf(o->host, sizeof(o->host), "127.0.0.1");
        o->port = (uint16_t)port;
        prc = run_prefill(o);
        if (prc)
            kill(pid, SIGTERM); /* do not let decode wait for its timeout */
    }
    int ws, drc;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    drc = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    printf("kv_stream: prefill %s, decode %s\n", prc < 0 ? "not run" : prc ? "FAILED" : "ok",
           drc ? "FAILED" : "ok");
    return prc || drc ? 1 : 0;
}

/* ---------------------------------------------------------------- flags */

static void usage(FILE *f)
{
    fprintf(f,
"usage: kv_stream [both|--spawn] [shape] [--compute_us N] [--inflight N] [--timeout S]\n"
"       kv_stream decode  --listen HOST:PORT   [shape] [--timeout S]\n"
"       kv_stream prefill --connect HOST:PORT  [shape] [--compute_us N] [--inflight N]\n"
"       kv_stream decode|prefill|both --etcd_endpoints URL [shape] ...\n"
"shape: --layers L (32)  --blocks B (64)  --block_size S (64K; suffixes K, M)\n"
"       prefill and decode must be given the same shape.\n"
"  --compute_us N  time to \"compute\" each layer before its WRITE (0)\n"
"  --inflight N    layers in flight at most (4)\n"
"  --timeout S     seconds to wait for the peer, or for progress (30)\n"
"  --warmup        prefill writes every layer once, untimed and without\n"
"                  notifications, before the stream (first-touch page faults)\n"
"  --quiet         no line per layer\n"
"  --mem DRAM|VRAM where the caches live (DRAM); VRAM: GPU memory of device 0, moved\n"
"                  by the CUDA transport (CUDA IPC) and posted from CUDA events\n"
"  --etcd_endpoints URL  find each other through etcd (e.g. http://127.0.0.1:2379)\n"
"                  instead of --listen/--connect\n"
"  --backend NAME  the transport: UCX (default) or LIBFABRIC (both sides the same)\n"
"Flags take '--flag value' or '--flag=value'. UCX_TLS, FI_PROVIDER and NXL_LOG_LEVEL apply.\n");
}

static bool parse_size(const char *s, unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;
    if (*end == 'k' || *end == 'K')
        shift = 10;
    else if (*end == 'm' || *end == 'M')
        shift = 20;
    else if (*end == 'g' || *end == 'G')
        shift = 30;
    if (shift)
        end++;
    if (errno || end == s || *end || v > (max >> shift))
        return false;
    *out = v << shift;
    return true;
}

static bool parse_addr(const char *s, opts_t *o)
{
    const char *colon = strrchr(s, ':');
    unsigned long long port;
    if (!colon || colon == s || !parse_size(colon + 1, 65535, &port))
        return false;
    const char *h = s;
    size_t hl = (size_t)(colon - s);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (!hl || hl >= sizeof(o->host))
        return false;
    memcpy(o->host, h, hl);
    o->host[hl] = 0;
    o->port = (uint16_t)port;
    o->have_addr = true;
    return true;
}

static int parse(int argc, char **argv, opts_t *o)
{
    int i = 1;
    if (i < argc && argv[i][0] != '-')
        o->mode = argv[i++];
    for (; i < argc; i++) {
        char name[64];
        const char *arg = argv[i], *val = NULL;
        if (strncmp(arg, "--", 2)) {
            fprintf(stderr, "kv_stream: unexpected argument '%s'\n", arg);
            return 2;
        }
        const char *eq = strchr(arg, '=');
        size_t nl = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (nl >= sizeof(name)) {
            fprintf(stderr, "kv_stream: unknown flag '%s'\n", arg);
            return 2;
        }
        memcpy(name, arg + 2, nl);
        name[nl] = 0;
        for (char *c = name; *c; c++)
            if (*c == '-')
                *c = '_';
        if (!strcmp(name, "help")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(name, "spawn") || !strcmp(name, "quiet") || !strcmp(name, "warmup")) {
            if (eq) {
                fprintf(stderr, "kv_stream: --%s takes no value\n", name);
                return 2;
            }
            if (name[0] == 's')
                o->mode = "both";
            else if (name[0] == 'q')
                o->quiet = true;
            else
                o->warmup = true;
            continue;
        }
        if (eq)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        if (!val) {
            fprintf(stderr, "kv_stream: --%s needs a value\n", name);
            return 2;
        }
        unsigned long long v;
        bool ok;
        if (!strcmp(name, "listen") || !strcmp(name, "connect")) {
            ok = parse_addr(val, o);
        } else if (!strcmp(name, "backend")) {
            ok = !strcasecmp(val, "UCX") || !strcasecmp(val, "LIBFABRIC");
            if (ok)
                snprintf(o->backend, sizeof(o->backend), "%s",
                         !strcasecmp(val, "UCX") ? "UCX" : "LIBFABRIC");
        } else if (!strcmp(name, "etcd_endpoints")) {
            ok = strlen(val) < sizeof(o->etcd) && *val;
            if (ok)
                snprintf(o->etcd, sizeof(o->etcd), "%s", val);
        } else if (!strcmp(name, "layers")) {
            ok = parse_size(val, 1ull << 24, &v) && v;
            o->layers = (unsigned long)v;
        } else if (!strcmp(name, "blocks")) {
            ok = parse_size(val, 1ull << 26, &v) && v;
            o->blocks = (unsigned long)v;
        } else if (!strcmp(name, "block_size")) {
            ok = parse_size(val, 1ull << 32, &v) && v;
            o->block_size = (size_t)v;
        } else if (!strcmp(name, "mem")) {
            ok = !strcasecmp(val, "DRAM") || !strcasecmp(val, "VRAM");
            o->vram = !strcasecmp(val, "VRAM");
#ifndef KV_CUDA
            if (o->vram) {
                fprintf(stderr, "kv_stream: --mem VRAM: built without CUDA (configure "
                                "--enable-cuda with the CUDA headers)\n");
                return 2;
            }
#endif
        } else if (!strcmp(name, "compute_us")) {
            ok = parse_size(val, 60000000, &v);
            o->compute_us = (unsigned long)v;
        } else if (!strcmp(name, "inflight")) {
            ok = parse_size(val, 1u << 20, &v) && v;
            o->inflight = (unsigned)v;
        } else if (!strcmp(name, "timeout")) {
            ok = parse_size(val, 86400, &v) && v;
            o->timeout_s = (unsigned)v;
        } else {
            fprintf(stderr, "kv_stream: unknown flag --%s (see --help)\n", name);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "kv_stream: bad value '%s' for --%s\n", val, name);
            return 2;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o = {
        .mode = "both",
        .layers = 32,
        .blocks = 64,
        .block_size = 64 * 1024,
        .timeout_s = 30,
        .inflight = 4,
    };
    int rc = parse(argc, argv, &o);
    if (rc) {
        usage(stderr);
        return rc;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if ((unsigned long long)o.layers * o.blocks > MAX_DESCS ||
        (unsigned long long)o.layers * o.blocks > MAX_TOTAL_BYTES / o.block_size) {
        fprintf(stderr, "kv_stream: %lu layers x %lu blocks x %zu B is too large (at most %lu "
                "blocks and %llu GiB a side)\n", o.layers, o.blocks, o.block_size, MAX_DESCS,
                MAX_TOTAL_BYTES >> 30);
        return 2;
    }
    if (!strcmp(o.mode, "decode")) {
        if (!o.have_addr && !o.etcd[0]) {
            fprintf(stderr, "kv_stream decode: --listen HOST:PORT is required\n");
            return 2;
        }
        return run_decode(&o, -1);
    }
    if (!strcmp(o.mode, "prefill")) {
        if ((!o.have_addr || !o.port) && !o.etcd[0]) {
            fprintf(stderr, "kv_stream prefill: --connect HOST:PORT is required\n");
            return 2;
        }
        return run_prefill(&o);
    }
    if (!strcmp(o.mode, "both"))
        return run_both(&o);
    fprintf(stderr, "kv_stream: unknown mode '%s' (decode, prefill or both)\n", o.mode);
    usage(stderr);
    return 2;
}
