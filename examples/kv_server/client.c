/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_server client: --connections keep-alive evhttp connections on one
 * event_base, each with one request in flight, issuing GETs of random
 * blocks and, with --put_ratio, PUTs. Every byte of every answer is
 * checked:
 *
 *   GET  200, exactly --block_size bytes, whose header names the block
 *        asked for and a version V, every other byte the pattern of
 *        (N, V); and V is at least the version of this client's last PUT
 *        of N answered before the GET was sent (this client is the only
 *        writer). 503 (the server's queue is full) is counted, not an error.
 *   PUT  204; the body is the pattern of (N, V) with V from the clock,
 *        sent as X-Version; one PUT of a block in flight at a time.
 *
 * It runs --seconds (or until --requests are issued), then prints
 * requests/s and latency percentiles, and exits nonzero on any wrong
 * byte, unexpected status or failed connection, or when nothing was
 * answered. --expect STATUS instead expects every answer to have that
 * status (a test's "the store is gone: 502") and prints the first body. */
#include "common.h"

#include <cjson/cJSON.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#define MAX_ERRORS_SHOWN 5
#define GIVE_UP_ERRORS 100
#define CACHE_MAX_BYTES (512ull << 20)

typedef struct client client_t;

typedef struct conn {
    client_t *c;
    struct evhttp_connection *evcon;
    int put;                 /* the request in flight is a PUT */
    size_t block;
    uint64_t version;        /* PUT: the version sent */
    uint64_t acked_at_issue; /* GET: this client's last acknowledged version of the block */
    uint64_t t0;
    uint8_t *body;           /* PUT bodies */
    int nodelay_fd;          /* the socket TCP_NODELAY was set on */
} conn_t;

struct client {
    const kvs_opts_t *o;
    struct event_base *base;
    conn_t *conns;
    unsigned active;
    bool stopping;
    bool warming;            /* --warmup: GET each block once, in order, untimed */
    size_t warm_next;
    uint64_t rng;
    uint64_t *acked;         /* per block: version of our last PUT answered 204 */
    uint8_t *putting;        /* per block: a PUT of ours in flight */
    uint8_t *cache;          /* per block: the pattern of cache_ver[b] */
    uint64_t *cache_ver;
    uint8_t *scratch;
    uint32_t *lat;           /* latency of each answer, µs */
    size_t nlat, cap;
    uint64_t issued, answered, gets, puts, ok, busy, errors, wrong_bytes, bytes;
    unsigned shown;
    uint64_t t_start, t_last;
    struct event *ev_deadline, *ev_sig;
};

static uint64_t rnd(client_t *c)
{
    /* xorshift64* */
    c->rng ^= c->rng >> 12;
    c->rng ^= c->rng << 25;
    c->rng ^= c->rng >> 27;
    return c->rng * 0x2545f4914f6cdd1dull;
}

static uint64_t realtime_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void error_at(client_t *c, const conn_t *k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void error_at(client_t *c, const conn_t *k, const char *fmt, ...)
{
    c->errors++;
    if (c->shown++ < MAX_ERRORS_SHOWN) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "client: %s /block/%zu: ", k->put ? "PUT" : "GET", k->block);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    } else if (c->shown == MAX_ERRORS_SHOWN + 1) {
        fprintf(stderr, "client: (more errors not shown)\n");
    }
    if (c->errors >= GIVE_UP_ERRORS && !c->stopping) {
        fprintf(stderr, "client: %d errors, giving up\n", GIVE_UP_ERRORS);
        c->stopping = true;
    }
}

/* The first line of an answer's body, for messages. */
static void body_line(struct evhttp_request *req, char *out, size_t cap)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    ev_ssize_t n = evbuffer_copyout(in, out, cap - 1);
    out[n > 0 ? n : 0] = 0;
    out[strcspn(out, "\r\n")] = 0;
}

static const uint8_t *expected(client_t *c, size_t block, uint64_t version)
{
    size_t B = c->o->block_size;
    if (!c->cache) {
        kvs_pattern(c->scratch, B, block, version);
        return c->scratch;
    }
    uint8_t *p = c->cache + block * B;
    if (c->cache_ver[block] != version) {
        kvs_pattern(p, B, block, version);
        c->cache_ver[block] = version;
    }
    return p;
}

/* Checks a GET's 200 answer against the pattern, chunk by chunk of the
 * evbuffer (no copy). */
static void check_block(client_t *c, conn_t *k, struct evbuffer *in)
{
    size_t B = c->o->block_size, len = evbuffer_get_length(in);
    uint8_t hdr[16];
    uint64_t blk, ver;
    if (len != B) {
        error_at(c, k, "200 with %zu bytes, not %zu", len, B);
        return;
    }
    evbuffer_copyout(in, hdr, 16);
    kvs_pattern_header(hdr, &blk, &ver);
    if (blk != k->block) {
        error_at(c, k, "answered with the bytes of block %" PRIu64, blk);
        c->wrong_bytes += B;
        return;
    }
    if (ver < k->acked_at_issue) {
        error_at(c, k, "version %" PRIu64 ", older than %" PRIu64 " which was written (204) "
                 "before this GET was sent", ver, k->acked_at_issue);
        return;
    }
    const uint8_t *want = expected(c, k->block, ver);
    int n = evbuffer_peek(in, -1, NULL, NULL, 0);
    struct evbuffer_iovec stackv[16], *v = stackv;
    if (n > 16 && !(v = malloc((size_t)n * sizeof(*v)))) {
        error_at(c, k, "out of memory");
        return;
    }
    n = evbuffer_peek(in, -1, NULL, v, n);
    size_t off = 0, bad = 0, first = 0;
    for (int i = 0; i < n; i++) {
        const uint8_t *p = v[i].iov_base;
        if (memcmp(p, want + off, v[i].iov_len))
            for (size_t b = 0; b < v[i].iov_len; b++)
                if (p[b] != want[off + b] && bad++ == 0)
                    first = off + b;
        off += v[i].iov_len;
    }
    if (v != stackv)
        free(v);
    if (bad) {
        c->wrong_bytes += bad;
        error_at(c, k, "%zu of %zu bytes differ from the pattern of version %" PRIu64
                 " (first at byte %zu)", bad, B, ver, first);
        return;
    }
    c->ok++;
    c->bytes += B;
}

static void issue(conn_t *k);

static void answered(struct evhttp_request *req, void *arg)
{
    conn_t *k = arg;
    client_t *c = k->c;
    const kvs_opts_t *o = c->o;
    uint64_t t = kvs_now_us();
    c->answered++;
    c->t_last = t;
    if (c->nlat == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 65536;
        uint32_t *l = realloc(c->lat, cap * sizeof(*l));
        if (l) {
            c->lat = l;
            c->cap = cap;
        }
    }
    if (c->nlat < c->cap)
        c->lat[c->nlat++] = (uint32_t)(t - k->t0 > UINT32_MAX ? UINT32_MAX : t - k->t0);
    if (k->put)
        c->putting[k->block] = 0;
    int code = req ? evhttp_request_get_response_code(req) : 0;
    char line[256];
    if (!code) {
        error_at(c, k, "no answer (connection refused, closed or timed out after %u s)",
                 o->timeout_s);
    } else if (o->expect) {
        if (code != (int)o->expect) {
            body_line(req, line, sizeof(line));
            error_at(c, k, "%d %s, expected %u: %s", code, evhttp_request_get_response_code_line(req),
                     o->expect, line);
        } else {
            if (!c->ok) {
                body_line(req, line, sizeof(line));
                printf("client: %s /block/%zu: %d %s: %s\n", k->put ? "PUT" : "GET", k->block,
                       code, evhttp_request_get_response_code_line(req), line);
            }
            c->ok++;
        }
    } else if (code == 503) {
        c->busy++;
    } else if (k->put && code == 204) {
        c->acked[k->block] = k->version;
        c->ok++;
        c->bytes += o->block_size;
    } else if (!k->put && code == 200) {
        check_block(c, k, evhttp_request_get_input_buffer(req));
    } else {
        body_line(req, line, sizeof(line));
        error_at(c, k, "%d %s: %s", code, evhttp_request_get_response_code_line(req), line);
    }
    issue(k);
}

static void issue(conn_t *k)
{
    client_t *c = k->c;
    const kvs_opts_t *o = c->o;
    if (c->stopping || (c->warming && c->warm_next >= o->blocks) ||
        (!c->warming && o->requests && c->issued >= o->requests)) {
        if (--c->active == 0)
            event_base_loopbreak(c->base);
        return;
    }
    size_t B = o->block_size;
    if (c->warming) {
        k->block = c->warm_next++;
        k->put = 0;
    } else {
        k->block = (size_t)(rnd(c) % o->blocks);
        k->put = o->put_ratio > 0 &&
                 (double)(rnd(c) >> 11) / 9007199254740992.0 < o->put_ratio &&
                 !c->putting[k->block];
    }
    struct evhttp_request *req = evhttp_request_new(answered, k);
    if (!req) {
        fprintf(stderr, "client: evhttp_request_new failed\n");
        c->errors++;
        c->stopping = true;
        if (--c->active == 0)
            event_base_loopbreak(c->base);
        return;
    }
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Host", o->connect.host);
    if (k->put) {
        char vs[32];
        uint64_t now = realtime_us();
        k->version = now > c->acked[k->block] ? now : c->acked[k->block] + 1;
        kvs_pattern(k->body, B, k->block, k->version);
        evbuffer_add(evhttp_request_get_output_buffer(req), k->body, B);
        snprintf(vs, sizeof(vs), "%" PRIu64, k->version);
        evhttp_add_header(h, "X-Version", vs);
        evhttp_add_header(h, "Content-Type", "application/octet-stream");
        c->putting[k->block] = 1;
        c->puts++;
    } else {
        k->acked_at_issue = c->acked[k->block];
        c->gets++;
    }
    /* the socket exists once connected: no Nagle on it (a PUT's tail
     * would wait for the server's delayed ACK) */
    int fd = bufferevent_getfd(evhttp_connection_get_bufferevent(k->evcon)), one = 1;
    if (fd >= 0 && fd != k->nodelay_fd) {
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        k->nodelay_fd = fd;
    }
    char uri[64];
    snprintf(uri, sizeof(uri), "/block/%zu", k->block);
    k->t0 = kvs_now_us();
    c->issued++;
    if (evhttp_make_request(k->evcon, req, k->put ? EVHTTP_REQ_PUT : EVHTTP_REQ_GET, uri)) {
        /* evhttp freed the request; no callback comes */
        if (k->put)
            c->putting[k->block] = 0;
        error_at(c, k, "evhttp_make_request failed");
        c->stopping = true;
        if (--c->active == 0)
            event_base_loopbreak(c->base);
    }
}

static void stop_cb(evutil_socket_t fd, short what, void *arg)
{
    client_t *c = arg;
    c->stopping = true; /* each connection stops after its answer */
}

/* ---- the server's /stats, before and after the timed run */

typedef struct stats_get {
    bool done;
    double cpu_s, requests;
} stats_get_t;

static void stats_answered(struct evhttp_request *req, void *arg)
{
    stats_get_t *g = arg;
    g->done = true;
    if (!req || evhttp_request_get_response_code(req) != 200)
        return;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    char *text = malloc(len + 1);
    if (!text)
        return;
    evbuffer_copyout(in, text, len);
    text[len] = 0;
    cJSON *j = cJSON_Parse(text);
    const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(j, "cpu_s");
    const cJSON *reqs = cJSON_GetObjectItemCaseSensitive(j, "requests");
    if (cJSON_IsNumber(cpu) && cJSON_IsNumber(reqs)) {
        g->cpu_s = cpu->valuedouble;
        g->requests = reqs->valuedouble;
    }
    cJSON_Delete(j);
    free(text);
}

/* GET /stats on a connection of its own; cpu_s < 0 when it did not work */
static stats_get_t get_stats(client_t *c)
{
    stats_get_t g = {.cpu_s = -1};
    const kvs_opts_t *o = c->o;
    struct evhttp_connection *evcon =
        evhttp_connection_base_new(c->base, NULL, o->connect.host, o->connect.port);
    struct evhttp_request *req = evcon ? evhttp_request_new(stats_answered, &g) : NULL;
    if (!req) {
        if (evcon)
            evhttp_connection_free(evcon);
        return g;
    }
    evhttp_connection_set_timeout(evcon, (int)o->timeout_s);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Host", o->connect.host);
    if (!evhttp_make_request(evcon, req, EVHTTP_REQ_GET, "/stats"))
        while (!g.done && event_base_loop(c->base, EVLOOP_ONCE) == 0)
            ;
    evhttp_connection_free(evcon);
    return g;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static uint32_t pct(const uint32_t *v, size_t n, double p)
{
    if (!n)
        return 0;
    size_t i = (size_t)(p / 100.0 * (double)n);
    return v[i >= n ? n - 1 : i];
}

int kvs_client(const kvs_opts_t *o)
{
    client_t c = {.o = o};
    int rc = 1;
    size_t B = o->block_size;
    c.rng = (uint64_t)realtime_us() ^ 0x9e3779b97f4a7c15ull;
    if (!c.rng)
        c.rng = 1;
    c.base = event_base_new();
    c.conns = calloc(o->connections, sizeof(*c.conns));
    c.acked = calloc(o->blocks, sizeof(*c.acked));
    c.putting = calloc(o->blocks, 1);
    c.scratch = malloc(B);
    if (!c.base || !c.conns || !c.acked || !c.putting || !c.scratch) {
        fprintf(stderr, "client: out of memory\n");
        goto out;
    }
    if ((unsigned long long)o->blocks * B <= CACHE_MAX_BYTES) {
        /* the expected bytes of each block, made once per version seen */
        c.cache = malloc(o->blocks * B);
        c.cache_ver = malloc(o->blocks * sizeof(*c.cache_ver));
        if (c.cache_ver)
            memset(c.cache_ver, 0xff, o->blocks * sizeof(*c.cache_ver));
        if (!c.cache || !c.cache_ver) {
            free(c.cache);
            free(c.cache_ver);
            c.cache = NULL;
            c.cache_ver = NULL;
        }
    }
    for (unsigned i = 0; i < o->connections; i++) {
        conn_t *k = &c.conns[i];
        k->c = &c;
        k->nodelay_fd = -1;
        k->evcon = evhttp_connection_base_new(c.base, NULL, o->connect.host, o->connect.port);
        if (!k->evcon || (o->put_ratio > 0 && !(k->body = malloc(B)))) {
            fprintf(stderr, "client: cannot make connection %u to %s:%u\n", i, o->connect.host,
                    o->connect.port);
            goto out;
        }
        evhttp_connection_set_timeout(k->evcon, (int)o->timeout_s);
    }
    c.ev_sig = evsignal_new(c.base, SIGINT, stop_cb, &c);
    if (!c.ev_sig || evsignal_add(c.ev_sig, NULL)) {
        fprintf(stderr, "client: cannot watch SIGINT\n");
        goto out;
    }
    if (o->warmup) {
        /* first touches (the store's memory mapped into the server, the
         * client's expected bytes) stay out of the measurement */
        uint64_t t = kvs_now_us();
        c.warming = true;
        c.active = o->connections;
        for (unsigned i = 0; i < o->connections; i++)
            issue(&c.conns[i]);
        if (c.active)
            event_base_dispatch(c.base);
        c.warming = false;
        if (!o->quiet || c.errors)
            printf("client: warm-up: %" PRIu64 " blocks read once in %.1f ms, %" PRIu64
                   " errors\n", c.answered, (kvs_now_us() - t) / 1e3, c.errors);
        if (c.errors || c.stopping)
            goto out;
        c.issued = c.answered = c.gets = c.ok = c.busy = c.bytes = 0;
        c.nlat = 0;
    }
    if (o->seconds > 0) {
        struct timeval tv = {(time_t)o->seconds,
                             (suseconds_t)((o->seconds - (double)(time_t)o->seconds) * 1e6)};
        if (!(c.ev_deadline = evtimer_new(c.base, stop_cb, &c)) ||
            evtimer_add(c.ev_deadline, &tv)) {
            fprintf(stderr, "client: cannot arm the deadline\n");
            goto out;
        }
    }
    stats_get_t before = get_stats(&c);
    c.t_start = c.t_last = kvs_now_us();
    c.active = o->connections;
    for (unsigned i = 0; i < o->connections; i++)
        issue(&c.conns[i]);
    if (c.active)
        event_base_dispatch(c.base);

    stats_get_t after = before.cpu_s >= 0 ? get_stats(&c) : before;
    double sec = (double)(c.t_last - c.t_start) / 1e6;
    if (sec <= 0)
        sec = 1e-6;
    qsort(c.lat, c.nlat, sizeof(*c.lat), cmp_u32);
    if (o->expect) {
        printf("client: %" PRIu64 " answers, %" PRIu64 " with status %u, %" PRIu64 " not\n",
               c.answered, c.ok, o->expect, c.errors);
        rc = c.errors || !c.ok ? 1 : 0;
        goto out;
    }
    printf("client: %" PRIu64 " requests in %.2f s over %u connections: %.0f requests/s, "
           "%.1f MB/s (%" PRIu64 " GET, %" PRIu64 " PUT); latency us p50 %u p90 %u p99 %u max "
           "%u; %" PRIu64 " ok, %" PRIu64 " busy (503), %" PRIu64 " errors, %" PRIu64
           " wrong bytes\n", c.answered, sec, o->connections, (double)c.answered / sec,
           (double)c.bytes / sec / 1e6, c.gets, c.puts, pct(c.lat, c.nlat, 50),
           pct(c.lat, c.nlat, 90), pct(c.lat, c.nlat, 99), c.nlat ? c.lat[c.nlat - 1] : 0, c.ok,
           c.busy, c.errors, c.wrong_bytes);
    if (before.cpu_s >= 0 && after.cpu_s >= 0 && after.requests > before.requests)
        printf("client: the server used %.2f s of CPU meanwhile: %.1f us per request\n",
               after.cpu_s - before.cpu_s,
               (after.cpu_s - before.cpu_s) * 1e6 / (after.requests - before.requests));
    if (!c.ok)
        fprintf(stderr, "client: no request was answered as expected\n");
    rc = c.errors || c.wrong_bytes || !c.ok ? 1 : 0;
out:
    for (unsigned i = 0; c.conns && i < o->connections; i++) {
        if (c.conns[i].evcon)
            evhttp_connection_free(c.conns[i].evcon);
        free(c.conns[i].body);
    }
    if (c.ev_deadline)
        event_free(c.ev_deadline);
    if (c.ev_sig)
        event_free(c.ev_sig);
    if (c.base)
        event_base_free(c.base);
    free(c.conns);
    free(c.acked);
    free(c.putting);
    free(c.cache);
    free(c.cache_ver);
    free(c.scratch);
    free(c.lat);
    return rc;
}
