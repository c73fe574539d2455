/* kv_server serve: one thread, one event_base owned by the application.
 * evhttp and an nxl agent (cfg.base = base) share it; the application runs
 * event_base_dispatch(), never nxl_agent_run().
 *
 *   GET /block/N   take a staging buffer (or wait in a bounded queue; 503
 *                  beyond it), post a READ of block N into it, answer from
 *                  the completion callback: 200 with the bytes (added by
 *                  reference; the reference's cleanup gives the buffer
 *                  back), or 502 with nxl_future_error() as the body
 *   PUT /block/N   a body of exactly --block_size bytes: copied into a
 *                  staging buffer, WRITE with the notification "put N V"
 *                  (V: the X-Version header, else one more than the last
 *                  version this server wrote), 204 from the callback
 *   GET /stats     counters as JSON
 *
 * Setup, all callbacks on the same base: fetch the store's metadata, send
 * ours, say "hello"; the store answers "blocks ADDR COUNT SIZE". Then the
 * store's N blocks are prepared once (nxl_prep against the store) and the
 * staging pool once locally, and each request makes its transfer by index
 * (nxl_xfer_make), reusing the staging buffer's last transfer when it is
 * for the same block and direction.
 *
 * Requests on one block are ordered: a READ waits for a WRITE of the same
 * block in flight, a WRITE for the READs and the WRITE in flight, so that
 * a GET never answers half-written bytes and a GET sent after a PUT's 204
 * sees that PUT.
 *
 * --memcpy answers from a local copy of the blocks (memcpy into the staging
 * buffer) instead of an nxl READ: the same server without nxl, the
 * reference for the requests/s of the nxl path. */
#include "common.h"

#include <nxl.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/buffer.h>
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
#include <sys/queue.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

enum { OP_GET, OP_PUT };

typedef struct server server_t;

/* One GET or PUT of a block: queued, then in flight on a staging buffer. */
typedef struct job {
    struct evhttp_request *req;
    int op;
    size_t block;
    uint64_t version;
    TAILQ_ENTRY(job) link;
} job_t;

/* A staging buffer and what it serves. */
typedef struct slot {
    server_t *s;
    size_t idx;            /* its index in the local prepared list */
    uint8_t *buf;
    job_t *job;            /* while its transfer runs */
    nxl_future_t *f;       /* that transfer's future (kept to cancel at shutdown) */
    uint64_t t_post;
    nxl_xfer_t *x;         /* its last transfer, reused for the same (op, block) */
    int x_op;
    size_t x_block;
    struct slot *next_free;
} slot_t;

struct server {
    const kvs_opts_t *o;
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *sock;
    uint16_t http_port;
    nxl_agent_t *a;
    char store[128];                /* the store agent's name */
    nxl_prepped_t *remote, *local;  /* the store's blocks; the staging pool */
    uint8_t *staging;               /* --staging x --block_size */
    uint8_t *copy;                  /* --memcpy: the blocks, here */
    slot_t *slots, *free_slots;
    unsigned nfree;
    TAILQ_HEAD(, job) queue;
    unsigned qlen, qlen_max;
    uint32_t *readers;              /* per block: READs in flight */
    uint8_t *writer;                /* per block: a WRITE in flight */
    uint32_t *waiting;              /* per block: requests queued */
    uint64_t *scan;                 /* per block: last dispatch pass it was blocked in */
    uint64_t scan_epoch;
    uint64_t *version;              /* per block: the last version written here */
    struct event *ev_dispatch, *ev_timer, *ev_sig[2];
    bool ready, stopping, failed;
    unsigned stop_ticks;
    uint64_t t_start, deadline;
    unsigned inflight;
    /* counters for /stats */
    uint64_t requests, gets, puts, stats_reqs, bytes_out, bytes_in;
    uint64_t errors, busy, bad_requests, xfer_made, xfer_reused;
    uint64_t xfers, xfer_us, xfer_us_max;  /* post to callback */
    double cpu_ready[2];                   /* CPU time when ready: user, system */
};

static void dispatch(server_t *s);
static void check_stopped(server_t *s);

/* CPU seconds of this process (all threads): user, system */
static void cpu_time(double *user, double *sys)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
    *sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* --------------------------------------------------------------- replies */

static void reply_text(server_t *s, struct evhttp_request *req, int code, const char *reason,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void reply_text(server_t *s, struct evhttp_request *req, int code, const char *reason,
                       const char *fmt, ...)
{
    struct evbuffer *out = evhttp_request_get_output_buffer(req);
    va_list ap;
    va_start(ap, fmt);
    evbuffer_add_vprintf(out, fmt, ap);
    va_end(ap);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; charset=utf-8");
    if (code >= 500 && code != 503)
        s->errors++;
    else if (code == 503)
        s->busy++;
    else if (code >= 400)
        s->bad_requests++;
    evhttp_send_reply(req, code, reason, NULL);
}

static void slot_put_back(server_t *s, slot_t *sl)
{
    sl->next_free = s->free_slots;
    s->free_slots = sl;
    s->nfree++;
}

/* evbuffer_add_reference()'s cleanup: the reply's bytes left the staging
 * buffer (written to the socket, or the connection went away). Queued
 * requests start on the next loop turn, not inside evhttp's write path. */
static void slot_cleanup(const void *data, size_t len, void *extra)
{
    slot_t *sl = extra;
    server_t *s = sl->s;
    slot_put_back(s, sl);
    if (s->qlen)
        event_active(s->ev_dispatch, 0, 0);
    check_stopped(s);
}

static void reply_block(server_t *s, job_t *j, slot_t *sl)
{
    struct evhttp_request *req = j->req;
    struct evbuffer *out = evhttp_request_get_output_buffer(req);
    size_t B = s->o->block_size;
    if (evbuffer_add_reference(out, sl->buf, B, slot_cleanup, sl)) {
        slot_put_back(s, sl);
        reply_text(s, req, 500, "Internal Server Error", "evbuffer_add_reference failed\n");
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "application/octet-stream");
    s->bytes_out += B;
    evhttp_send_reply(req, 200, "OK", NULL);
}

/* ---------------------------------------------------------- block gates */

static bool gate_open(const server_t *s, const job_t *j)
{
    size_t b = j->block;
    return j->op == OP_GET ? !s->writer[b] : !s->writer[b] && !s->readers[b];
}

static void gate_enter(server_t *s, const job_t *j)
{
    if (j->op == OP_GET)
        s->readers[j->block]++;
    else
        s->writer[j->block] = 1;
}

static void gate_leave(server_t *s, const job_t *j)
{
    if (j->op == OP_GET)
        s->readers[j->block]--;
    else
        s->writer[j->block] = 0;
}

/* ------------------------------------------------------------ transfers */

/* Completion of a READ or WRITE: exactly once, on the loop, never inside
 * nxl_xfer_post(). */
static void xfer_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    slot_t *sl = arg;
    server_t *s = sl->s;
    job_t *j = sl->job;
    uint64_t us = kvs_now_us() - sl->t_post;
    sl->job = NULL;
    sl->f = NULL;
    s->inflight--;
    s->xfers++;
    s->xfer_us += us;
    if (us > s->xfer_us_max)
        s->xfer_us_max = us;
    gate_leave(s, j);
    if (st == NXL_SUCCESS && j->op == OP_GET) {
        reply_block(s, j, sl); /* the slot comes back in slot_cleanup */
    } else {
        slot_put_back(s, sl);
        if (st == NXL_SUCCESS) {
            s->version[j->block] = j->version;
            evhttp_send_reply(j->req, 204, "No Content", NULL);
        } else {
            evhttp_add_header(evhttp_request_get_output_headers(j->req), "X-Nxl-Status",
                              nxl_status_name(st));
            reply_text(s, j->req, 502, "Bad Gateway", "%s\n", nxl_future_error(f));
        }
    }
    nxl_future_release(f);
    free(j);
    dispatch(s);
    check_stopped(s);
}

/* The slot's transfer for (op, block): its last one when it matches, else
 * a new one made by index from the two lists prepared at start. */
static nxl_status_t slot_xfer(server_t *s, slot_t *sl, const job_t *j)
{
    if (sl->x && sl->x_op == j->op && sl->x_block == j->block) {
        s->xfer_reused++;
        return NXL_SUCCESS;
    }
    nxl_xfer_release(sl->x);
    sl->x = NULL;
    nxl_xfer_t *x;
    nxl_status_t st = nxl_xfer_make(s->a, j->op == OP_GET ? NXL_READ : NXL_WRITE, s->local,
                                    &sl->idx, s->remote, &j->block, 1, NULL, &x);
    if (st != NXL_SUCCESS)
        return st;
    s->xfer_made++;
    sl->x = x;
    sl->x_op = j->op;
    sl->x_block = j->block;
    return NXL_SUCCESS;
}

static void start_nxl(server_t *s, job_t *j, slot_t *sl)
{
    nxl_status_t st = slot_xfer(s, sl, j);
    if (st == NXL_SUCCESS && j->op == OP_PUT) {
        char notif[64];
        int nl = snprintf(notif, sizeof(notif), "put %zu %" PRIu64, j->block, j->version);
        st = nxl_xfer_set_notif(sl->x, notif, (size_t)nl);
    }
    if (st == NXL_SUCCESS) {
        gate_enter(s, j);
        sl->job = j;
        sl->t_post = kvs_now_us();
        st = nxl_xfer_post(sl->x, xfer_done, sl, &sl->f);
        if (st == NXL_SUCCESS) {
            s->inflight++;
            return;
        }
        sl->job = NULL;
        gate_leave(s, j);
    }
    /* nothing started: no callback will come; answer here */
    slot_put_back(s, sl);
    evhttp_add_header(evhttp_request_get_output_headers(j->req), "X-Nxl-Status",
                      nxl_status_name(st));
    reply_text(s, j->req, 502, "Bad Gateway", "%s\n", nxl_agent_last_error(s->a));
    free(j);
}

static void start_memcpy(server_t *s, job_t *j, slot_t *sl)
{
    size_t B = s->o->block_size;
    uint8_t *blk = s->copy + j->block * B;
    if (j->op == OP_GET) {
        memcpy(sl->buf, blk, B);
        reply_block(s, j, sl);
    } else {
        memcpy(blk, sl->buf, B);
        s->version[j->block] = j->version;
        slot_put_back(s, sl);
        evhttp_send_reply(j->req, 204, "No Content", NULL);
    }
    free(j);
}

static void start(server_t *s, job_t *j)
{
    slot_t *sl = s->free_slots;
    s->free_slots = sl->next_free;
    s->nfree--;
    if (j->op == OP_PUT) {
        struct evbuffer *in = evhttp_request_get_input_buffer(j->req);
        evbuffer_remove(in, sl->buf, s->o->block_size);
        s->bytes_in += s->o->block_size;
    }
    if (s->copy)
        start_memcpy(s, j, sl);
    else
        start_nxl(s, j, sl);
}

/* Starts queued requests, oldest first, while staging buffers are free;
 * a request whose block is busy waits, and so do the later ones on that
 * block, so that one block's requests keep their order. */
static void dispatch(server_t *s)
{
    if (!s->qlen || !s->nfree || s->stopping)
        return;
    s->scan_epoch++;
    job_t *j, *next;
    for (j = TAILQ_FIRST(&s->queue); j && s->nfree; j = next) {
        next = TAILQ_NEXT(j, link);
        if (s->scan[j->block] == s->scan_epoch || !gate_open(s, j)) {
            s->scan[j->block] = s->scan_epoch;
            continue;
        }
        TAILQ_REMOVE(&s->queue, j, link);
        s->qlen--;
        s->waiting[j->block]--;
        start(s, j);
    }
}

static void dispatch_cb(evutil_socket_t fd, short what, void *arg)
{
    dispatch(arg);
}

/* ------------------------------------------------------------- requests */

static void reply_stats(server_t *s, struct evhttp_request *req)
{
    cJSON *j = cJSON_CreateObject();
    char *text = NULL;
    if (j) {
        cJSON_AddStringToObject(j, "mode", s->copy ? "memcpy" : "nxl");
        cJSON_AddStringToObject(j, "store", s->store);
        cJSON_AddBoolToObject(j, "ready", s->ready);
        cJSON_AddNumberToObject(j, "blocks", (double)s->o->blocks);
        cJSON_AddNumberToObject(j, "block_size", (double)s->o->block_size);
        cJSON_AddNumberToObject(j, "requests", (double)s->requests);
        cJSON_AddNumberToObject(j, "get", (double)s->gets);
        cJSON_AddNumberToObject(j, "put", (double)s->puts);
        cJSON_AddNumberToObject(j, "bytes", (double)(s->bytes_out + s->bytes_in));
        cJSON_AddNumberToObject(j, "bytes_out", (double)s->bytes_out);
        cJSON_AddNumberToObject(j, "bytes_in", (double)s->bytes_in);
        cJSON_AddNumberToObject(j, "errors", (double)s->errors);
        cJSON_AddNumberToObject(j, "busy", (double)s->busy);
        cJSON_AddNumberToObject(j, "bad_requests", (double)s->bad_requests);
        cJSON_AddNumberToObject(j, "in_flight", s->inflight);
        cJSON_AddNumberToObject(j, "queue_depth", s->qlen);
        cJSON_AddNumberToObject(j, "queue_depth_max", s->qlen_max);
        cJSON_AddNumberToObject(j, "queue_limit", s->o->queue);
        cJSON_AddNumberToObject(j, "staging", s->o->staging);
        cJSON_AddNumberToObject(j, "staging_free", s->nfree);
        cJSON_AddNumberToObject(j, "xfer_made", (double)s->xfer_made);
        cJSON_AddNumberToObject(j, "xfer_reused", (double)s->xfer_reused);
        cJSON_AddNumberToObject(j, "xfer_us_avg", s->xfers ? (double)s->xfer_us / s->xfers : 0);
        cJSON_AddNumberToObject(j, "xfer_us_max", (double)s->xfer_us_max);
        cJSON_AddNumberToObject(j, "uptime_s", (kvs_now_us() - s->t_start) / 1e6);
        double u = 0, y = 0;
        if (s->ready) {
            cpu_time(&u, &y);
            u -= s->cpu_ready[0];
            y -= s->cpu_ready[1];
        }
        cJSON_AddNumberToObject(j, "cpu_s", u + y); /* since ready, every thread */
        text = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
    }
    if (!text) {
        reply_text(s, req, 500, "Internal Server Error", "out of memory\n");
        return;
    }
    struct evbuffer *out = evhttp_request_get_output_buffer(req);
    evbuffer_add(out, text, strlen(text));
    evbuffer_add(out, "\n", 1);
    cJSON_free(text);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "application/json");
    evhttp_send_reply(req, 200, "OK", NULL);
}

/* "123" within [0, limit): strict decimal */
static bool parse_index(const char *p, size_t limit, size_t *out)
{
    if (!*p || strlen(p) > 19)
        return false;
    unsigned long long v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        v = v * 10 + (unsigned)(*p - '0');
    }
    if (v >= limit)
        return false;
    *out = (size_t)v;
    return true;
}

static void on_request(struct evhttp_request *req, void *arg)
{
    server_t *s = arg;
    const kvs_opts_t *o = s->o;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    size_t n;
    if (path && !strcmp(path, "/stats")) {
        s->stats_reqs++;
        if (cmd != EVHTTP_REQ_GET)
            reply_text(s, req, 405, "Method Not Allowed", "/stats answers GET\n");
        else
            reply_stats(s, req);
        return;
    }
    if (!path || strncmp(path, "/block/", 7)) {
        reply_text(s, req, 404, "Not Found", "try GET or PUT /block/N, GET /stats\n");
        return;
    }
    if (!parse_index(path + 7, o->blocks, &n)) {
        reply_text(s, req, 404, "Not Found", "no block '%s': blocks are 0 .. %lu\n", path + 7,
                   o->blocks - 1);
        return;
    }
    s->requests++;
    if (s->stopping) {
        reply_text(s, req, 503, "Service Unavailable", "shutting down\n");
        return;
    }
    if (!s->ready) {
        reply_text(s, req, 503, "Service Unavailable", "not connected to the store yet\n");
        return;
    }
    job_t *j = calloc(1, sizeof(*j));
    if (!j) {
        reply_text(s, req, 500, "Internal Server Error", "out of memory\n");
        return;
    }
    j->req = req;
    j->block = n;
    if (cmd == EVHTTP_REQ_GET) {
        j->op = OP_GET;
        s->gets++;
    } else {
        size_t len = evbuffer_get_length(evhttp_request_get_input_buffer(req));
        const char *vh = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Version");
        char *end;
        j->op = OP_PUT;
        s->puts++;
        if (len != o->block_size) {
            free(j);
            reply_text(s, req, 400, "Bad Request", "PUT /block/%zu takes exactly %zu bytes, "
                       "not %zu\n", n, o->block_size, len);
            return;
        }
        if (vh) {
            errno = 0;
            j->version = strtoull(vh, &end, 10);
            if (errno || end == vh || *end || *vh == '-') {
                free(j);
                reply_text(s, req, 400, "Bad Request", "X-Version: '%s' is not a number\n", vh);
                return;
            }
        } else {
            j->version = s->version[n] + 1;
        }
    }
    /* what waits and can go goes first; then this one starts at once when
     * a staging buffer is free and nothing on its block is ahead of it */
    dispatch(s);
    if (s->nfree && !s->waiting[n] && gate_open(s, j)) {
        start(s, j);
        return;
    }
    if (s->qlen >= o->queue) {
        free(j);
        reply_text(s, req, 503, "Service Unavailable", "busy: %u requests wait already\n",
                   s->qlen);
        return;
    }
    TAILQ_INSERT_TAIL(&s->queue, j, link);
    s->qlen++;
    s->waiting[n]++;
    if (s->qlen > s->qlen_max)
        s->qlen_max = s->qlen;
}

/* -------------------------------------------------------- setup, stop */

static void fail(server_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fail(server_t *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("serve: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    s->failed = true;
    event_base_loopbreak(s->base);
}

static void became_ready(server_t *s)
{
    const kvs_opts_t *o = s->o;
    char sz[32];
    s->ready = true;
    cpu_time(&s->cpu_ready[0], &s->cpu_ready[1]);
    if (s->ev_timer)
        evtimer_del(s->ev_timer);
    if (s->copy)
        printf("serve: ready on http://%s:%u: %lu blocks of %s from a local copy (--memcpy)\n",
               o->http.host, s->http_port, o->blocks, kvs_size_text(sz, sizeof(sz), o->block_size));
    else
        printf("serve: ready on http://%s:%u: %lu blocks of %s from '%s' at %s:%u, %u staging "
               "buffers\n", o->http.host, s->http_port, o->blocks,
               kvs_size_text(sz, sizeof(sz), o->block_size), s->store, o->store.host,
               o->store.port, o->staging);
    kvs_tell_ready(o->ready_fd, s->http_port);
}

/* "blocks ADDR COUNT SIZE" from the store: prepare its blocks once */
static void on_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    server_t *s = arg;
    const kvs_opts_t *o = s->o;
    char m[128];
    snprintf(m, sizeof(m), "%.*s", (int)(len < sizeof(m) - 1 ? len : sizeof(m) - 1),
             (const char *)msg);
    uintptr_t addr;
    unsigned long count;
    size_t size;
    if (strcmp(from, s->store) || sscanf(m, "blocks %" SCNxPTR " %lu %zu", &addr, &count,
                                         &size) != 3) {
        fprintf(stderr, "serve: unexpected notification from '%s': '%s'\n", from, m);
        return;
    }
    if (s->ready || s->stopping)
        return;
    if (count != o->blocks || size != o->block_size) {
        fail(s, "the store holds %lu blocks of %zu bytes; this server was started with --blocks "
             "%lu --block_size %zu", count, size, o->blocks, o->block_size);
        return;
    }
    nxl_desc_t *d = calloc(o->blocks > o->staging ? o->blocks : o->staging, sizeof(*d));
    if (!d) {
        fail(s, "out of memory");
        return;
    }
    for (unsigned long b = 0; b < o->blocks; b++)
        d[b] = (nxl_desc_t){.addr = addr + b * o->block_size, .len = o->block_size};
    nxl_status_t st = nxl_prep(a, s->store, NXL_DRAM, d, o->blocks, &s->remote);
    if (st == NXL_SUCCESS) {
        for (unsigned i = 0; i < o->staging; i++)
            d[i] = (nxl_desc_t){.addr = (uintptr_t)s->slots[i].buf, .len = o->block_size};
        st = nxl_prep(a, NULL, NXL_DRAM, d, o->staging, &s->local);
    }
    free(d);
    if (st != NXL_SUCCESS) {
        fail(s, "nxl_prep: %s", nxl_agent_last_error(a));
        return;
    }
    became_ready(s);
}

static void hello_sent(nxl_future_t *f, nxl_status_t st, void *arg)
{
    server_t *s = arg;
    if (st != NXL_SUCCESS && !s->stopping && !s->failed)
        fail(s, "saying hello to '%s' failed: %s", s->store, nxl_future_error(f));
}

static void md_sent(nxl_future_t *f, nxl_status_t st, void *arg)
{
    server_t *s = arg;
    if (s->stopping || s->failed)
        return;
    if (st != NXL_SUCCESS) {
        fail(s, "sending this server's metadata to %s:%u failed: %s", s->o->store.host,
             s->o->store.port, nxl_future_error(f));
        return;
    }
    if (nxl_notif_send(s->a, s->store, "hello", 5, hello_sent, s, NULL) != NXL_SUCCESS)
        fail(s, "cannot notify '%s': %s", s->store, nxl_agent_last_error(s->a));
}

static void fetch_store(server_t *s);

static void md_fetched(nxl_future_t *f, nxl_status_t st, void *arg)
{
    server_t *s = arg;
    const kvs_opts_t *o = s->o;
    if (s->stopping || s->failed)
        return;
    if (st == NXL_ERR_REMOTE_DISCONNECT && kvs_now_us() < s->deadline) {
        /* nobody listens yet: try again shortly */
        struct timeval tv = {0, 200000};
        evtimer_add(s->ev_timer, &tv);
        return;
    }
    if (st != NXL_SUCCESS) {
        fail(s, "cannot fetch the store's metadata from %s:%u: %s", o->store.host, o->store.port,
             nxl_future_error(f));
        return;
    }
    snprintf(s->store, sizeof(s->store), "%s", nxl_future_peer(f));
    if (nxl_md_send(s->a, o->store.host, o->store.port, md_sent, s, NULL) != NXL_SUCCESS)
        fail(s, "nxl_md_send: %s", nxl_agent_last_error(s->a));
}

static void fetch_store(server_t *s)
{
    if (nxl_md_fetch(s->a, NULL, s->o->store.host, s->o->store.port, md_fetched, s, NULL) !=
        NXL_SUCCESS)
        fail(s, "nxl_md_fetch: %s", nxl_agent_last_error(s->a));
}

/* The timer: retries the fetch during setup; gives up at the deadline;
 * once stopping, cancels the transfers still in flight after 2 s, and
 * leaves the loop a second later whatever is left unsent. */
static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    server_t *s = arg;
    if (s->stopping) {
        if (s->stop_ticks++) {
            fprintf(stderr, "serve: leaving with %u transfers in flight and %u replies unsent\n",
                    s->inflight, s->o->staging - s->nfree);
            event_base_loopbreak(s->base);
            return;
        }
        for (unsigned i = 0; i < s->o->staging; i++)
            if (s->slots[i].f)
                nxl_future_cancel(s->slots[i].f);
        struct timeval tv = {1, 0};
        evtimer_add(s->ev_timer, &tv);
        return;
    }
    if (s->ready)
        return;
    if (kvs_now_us() >= s->deadline) {
        fail(s, "the store at %s:%u did not answer within %u s", s->o->store.host,
             s->o->store.port, s->o->timeout_s);
        return;
    }
    fetch_store(s);
}

/* Stopping ends once no transfer is in flight and every reply left its
 * staging buffer. */
static void check_stopped(server_t *s)
{
    if (s->stopping && !s->inflight && s->nfree == s->o->staging)
        event_base_loopbreak(s->base);
}

/* SIGINT, SIGTERM: stop accepting, answer what waits, let what is in
 * flight finish (canceled after 2 s) and the replies go out, then leave
 * the loop. */
static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    server_t *s = arg;
    if (s->stopping)
        return;
    s->stopping = true;
    if (s->sock) {
        evhttp_del_accept_socket(s->http, s->sock);
        s->sock = NULL;
    }
    job_t *j;
    while ((j = TAILQ_FIRST(&s->queue))) {
        TAILQ_REMOVE(&s->queue, j, link);
        s->qlen--;
        s->waiting[j->block]--;
        reply_text(s, j->req, 503, "Service Unavailable", "shutting down\n");
        free(j);
    }
    if (s->ev_timer) {
        struct timeval tv = {2, 0};
        evtimer_add(s->ev_timer, &tv);
    }
    check_stopped(s);
}

/* -------------------------------------------------------------- the role */

static bool setup_agent(server_t *s)
{
    const kvs_opts_t *o = s->o;
    char name[64];
    snprintf(name, sizeof(name), "kv_server-%ld", (long)getpid());
    nxl_agent_config_t cfg;
    nxl_agent_config_init(&cfg);
    cfg.name = name;
    cfg.base = s->base; /* embedded: the application runs the loop */
    if (nxl_agent_create(&cfg, &s->a) != NXL_SUCCESS) {
        fprintf(stderr, "serve: cannot create the agent: %s\n", nxl_agent_last_error(NULL));
        return false;
    }
    if (nxl_backend_create(s->a, "UCX", NULL, 0, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "serve: cannot create the UCX transport: %s\n",
                nxl_agent_last_error(s->a));
        return false;
    }
    void *p;
    if (nxl_mem_alloc(s->a, NXL_DRAM, (size_t)o->staging * o->block_size, 0, &p) !=
        NXL_SUCCESS) {
        fprintf(stderr, "serve: cannot allocate the staging buffers: %s\n",
                nxl_agent_last_error(s->a));
        return false;
    }
    s->staging = p;
    nxl_agent_on_notif(s->a, on_notif, s);
    return true;
}

static bool setup_http(server_t *s)
{
    const kvs_opts_t *o = s->o;
    if (!(s->http = evhttp_new(s->base))) {
        fprintf(stderr, "serve: evhttp_new failed\n");
        return false;
    }
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_PUT);
    evhttp_set_max_body_size(s->http, (ev_ssize_t)o->block_size);
    evhttp_set_gencb(s->http, on_request, s);
    s->sock = evhttp_bind_socket_with_handle(s->http, o->http.host, o->http.port);
    if (!s->sock) {
        fprintf(stderr, "serve: cannot listen on %s:%u: %s\n", o->http.host, o->http.port,
                strerror(errno));
        return false;
    }
    /* Accepted sockets inherit TCP_NODELAY from the listener on Linux:
     * without it the tail of a reply larger than one segment waits for the
     * client's delayed ACK (40 ms) */
    int one = 1, fd = evhttp_bound_socket_get_fd(s->sock);
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)))
        fprintf(stderr, "serve: TCP_NODELAY: %s\n", strerror(errno));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl)) {
        fprintf(stderr, "serve: getsockname: %s\n", strerror(errno));
        return false;
    }
    s->http_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                  : ((struct sockaddr_in *)&ss)->sin_port);
    return true;
}

static void print_summary(const server_t *s)
{
    double u, y;
    cpu_time(&u, &y);
    u -= s->cpu_ready[0];
    y -= s->cpu_ready[1];
    double cpu = u + y;
    printf("serve: CPU since ready %.2f s (user %.2f, system %.2f)", cpu, u, y);
    if (s->requests)
        printf(", %.1f us per block request", cpu * 1e6 / (double)s->requests);
    printf("\n");
    printf("serve: %" PRIu64 " block requests (%" PRIu64 " GET, %" PRIu64 " PUT), %" PRIu64
           " errors (5xx), %" PRIu64 " busy (503), %" PRIu64 " bad requests; queue depth at most "
           "%u; transfers made %" PRIu64 ", reused %" PRIu64 ", post to callback %.0f us on average, "
           "%" PRIu64 " us at most\n", s->requests, s->gets, s->puts, s->errors, s->busy,
           s->bad_requests, s->qlen_max, s->xfer_made, s->xfer_reused,
           s->xfers ? (double)s->xfer_us / s->xfers : 0.0, s->xfer_us_max);
}

int kvs_serve(const kvs_opts_t *o)
{
    server_t s = {.o = o};
    int rc = 1;
    TAILQ_INIT(&s.queue);
    s.t_start = kvs_now_us();
    s.deadline = s.t_start + (uint64_t)o->timeout_s * 1000000u;
    if (!(s.base = event_base_new())) {
        fprintf(stderr, "serve: event_base_new failed\n");
        return 1;
    }
    s.slots = calloc(o->staging, sizeof(*s.slots));
    s.readers = calloc(o->blocks, sizeof(*s.readers));
    s.writer = calloc(o->blocks, sizeof(*s.writer));
    s.scan = calloc(o->blocks, sizeof(*s.scan));
    s.waiting = calloc(o->blocks, sizeof(*s.waiting));
    s.version = calloc(o->blocks, sizeof(*s.version));
    s.ev_dispatch = event_new(s.base, -1, 0, dispatch_cb, &s);
    s.ev_timer = evtimer_new(s.base, timer_cb, &s);
    s.ev_sig[0] = evsignal_new(s.base, SIGINT, on_signal, &s);
    s.ev_sig[1] = evsignal_new(s.base, SIGTERM, on_signal, &s);
    if (!s.slots || !s.readers || !s.writer || !s.scan || !s.waiting || !s.version || !s.ev_dispatch ||
        !s.ev_timer || !s.ev_sig[0] || !s.ev_sig[1] || evsignal_add(s.ev_sig[0], NULL) ||
        evsignal_add(s.ev_sig[1], NULL)) {
        fprintf(stderr, "serve: out of memory\n");
        goto out;
    }
    if (o->memcpy_mode) {
        size_t total = o->blocks * o->block_size;
        s.copy = malloc(total);
        s.staging = aligned_alloc(4096, ((size_t)o->staging * o->block_size + 4095) & ~4095ul);
        if (!s.copy || !s.staging) {
            fprintf(stderr, "serve: out of memory for the local copy\n");
            goto out;
        }
        for (unsigned long b = 0; b < o->blocks; b++)
            kvs_pattern(s.copy + b * o->block_size, o->block_size, b, 0);
    } else if (!setup_agent(&s)) {
        goto out;
    }
    for (unsigned i = 0; i < o->staging; i++)
        s.slots[i] = (slot_t){.s = &s, .idx = i, .buf = s.staging + (size_t)i * o->block_size};
    for (unsigned i = o->staging; i-- > 0;)
        slot_put_back(&s, &s.slots[i]);
    if (!setup_http(&s))
        goto out;
    if (s.copy)
        became_ready(&s);
    else
        fetch_store(&s);
    if (!s.failed && event_base_dispatch(s.base) < 0)
        fprintf(stderr, "serve: event_base_dispatch failed\n");
    if (s.stopping && !s.failed) {
        print_summary(&s);
        rc = 0;
    }
out:
    /* Nothing is in flight here (the loop ends when the last transfer
     * completed, or before the first). Callbacks from now on start nothing.
     * Connections first (their replies' references give staging buffers
     * back), then what the agent holds, then the agent. */
    s.stopping = true;
    if (s.http)
        evhttp_free(s.http);
    for (unsigned i = 0; s.slots && i < o->staging; i++)
        nxl_xfer_release(s.slots[i].x);
    nxl_prepped_release(s.remote);
    nxl_prepped_release(s.local);
    if (s.a) {
        if (s.staging)
            nxl_mem_free(s.a, s.staging);
        nxl_agent_destroy(s.a);
    } else {
        free(s.staging);
    }
    for (int i = 0; i < 2; i++)
        if (s.ev_sig[i])
            event_free(s.ev_sig[i]);
    if (s.ev_timer)
        event_free(s.ev_timer);
    if (s.ev_dispatch)
        event_free(s.ev_dispatch);
    event_base_free(s.base);
    free(s.copy);
    free(s.slots);
    free(s.readers);
    free(s.writer);
    free(s.scan);
    free(s.waiting);
    free(s.version);
    return rc;
}
