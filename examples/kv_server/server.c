/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_server serve: one thread, one event_base owned by the application.
 * evhttp and an nxl agent (cfg.base = base) share it; the application runs
 * event_base_dispatch(), never nxl_agent_run().
 *
 *   GET /block/N   take a staging buffer (or wait in a bounded queue; 503
 *                  beyond it), post a READ of block N into it, answer from
 *                  the completion callback: 200 with the bytes (added by
 *                  reference; the reference's cleanup gives the buffer
 *                  back), or 502 with nxl_future_error() as the body
 *   PUT /block/N   a body of exactly --block_size bytes and its version V
 *                  in the X-Version header (400 without either): copied
 *                  into a staging buffer, WRITE with the notification
 *                  "put N V", 204 from the callback
 *   GET /stats     counters as JSON
 *
 * The agent's side is in server_nxl.c, the staging buffers, the wait queue
 * and the order of one block's requests in server_pool.c; this file is the
 * application: its base, evhttp, requests, /stats, signals, teardown.
 *
 * --memcpy answers from a local copy of the blocks (memcpy into the staging
 * buffer) instead of an nxl READ: the same server without nxl, the
 * reference for the requests/s of the nxl path.
 *
 * SIGINT, SIGTERM: stop accepting, answer what waits 503, let what is in
 * flight finish and the replies go out (canceled, and then left, after 2
 * and 3 s), print a summary, exit 0. */
#include "server.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

/* CPU seconds of this process (all threads): user, system */
static void cpu_time(double *user, double *sys)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
    *sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* A short text answer; counts 5xx as errors, 503 as busy, 4xx as bad requests. */
void srv_reply_text(server_t *s, struct evhttp_request *req, int code, const char *reason,
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
        srv_reply_text(s, req, 500, "Internal Server Error", "out of memory\n");
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
            srv_reply_text(s, req, 405, "Method Not Allowed", "/stats answers GET\n");
        else
            reply_stats(s, req);
        return;
    }
    if (!path || strncmp(path, "/block/", 7)) {
        srv_reply_text(s, req, 404, "Not Found", "try GET or PUT /block/N, GET /stats\n");
        return;
    }
    if (!parse_index(path + 7, o->blocks, &n)) {
        srv_reply_text(s, req, 404, "Not Found", "no block '%s': blocks are 0 .. %lu\n", path + 7,
                   o->blocks - 1);
        return;
    }
    s->requests++;
    if (s->stopping) {
        srv_reply_text(s, req, 503, "Service Unavailable", "shutting down\n");
        return;
    }
    if (!s->ready) {
        srv_reply_text(s, req, 503, "Service Unavailable", "not connected to the store yet\n");
        return;
    }
    job_t *j = calloc(1, sizeof(*j));
    if (!j) {
        srv_reply_text(s, req, 500, "Internal Server Error", "out of memory\n");
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
            srv_reply_text(s, req, 400, "Bad Request", "PUT /block/%zu takes exactly %zu bytes, "
                       "not %zu\n", n, o->block_size, len);
            return;
        }
        if (!vh) {
            /* the store checks the bytes against the pattern of (N, V):
             * without the version they were made with there is nothing to
             * check them against */
            free(j);
            srv_reply_text(s, req, 400, "Bad Request", "PUT /block/%zu needs X-Version: V, the "
                           "version its bytes were made with\n", n);
            return;
        }
        errno = 0;
        j->version = strtoull(vh, &end, 10);
        if (errno || end == vh || *end || *vh == '-') {
            free(j);
            srv_reply_text(s, req, 400, "Bad Request", "X-Version: '%s' is not a number\n", vh);
            return;
        }
    }
    srv_submit(s, j);
}

/* ------------------------------------------------------ setup, stopping */

/* Setup failed: say why and leave the loop. */
void srv_fail(server_t *s, const char *fmt, ...)
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

/* Answers block requests from now on; tells a parent in "both" the port. */
void srv_ready(server_t *s)
{
    const kvs_opts_t *o = s->o;
    char sz[32];
    s->ready = true;
    cpu_time(&s->cpu_ready[0], &s->cpu_ready[1]);
    if (s->ev_timer)
        evtimer_del(s->ev_timer);
    if (s->copy)
        printf("serve: ready on http://%s:%u: %lu blocks of %s from a local copy (--memcpy)\n",
               o->http.host, s->http_port, o->blocks, kvu_size_text(sz, sizeof(sz), o->block_size));
    else
        printf("serve: ready on http://%s:%u: %lu blocks of %s from '%s' at %s:%u, %u staging "
               "buffers\n", o->http.host, s->http_port, o->blocks,
               kvu_size_text(sz, sizeof(sz), o->block_size), s->store, o->store.host,
               o->store.port, o->staging);
    kvs_tell_ready(o->ready_fd, s->http_port);
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
        srv_nxl_cancel_all(s);
        struct timeval tv = {1, 0};
        evtimer_add(s->ev_timer, &tv);
        return;
    }
    if (s->ready)
        return;
    if (kvs_now_us() >= s->deadline) {
        srv_fail(s, "the store at %s:%u did not answer within %u s", s->o->store.host,
             s->o->store.port, s->o->timeout_s);
        return;
    }
    srv_nxl_connect(s);
}

/* Stopping ends once no transfer is in flight and every reply left its
 * staging buffer. */
void srv_check_stopped(server_t *s)
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
    srv_refuse_queued(s, "shutting down");
    if (s->ev_timer) {
        struct timeval tv = {2, 0};
        evtimer_add(s->ev_timer, &tv);
    }
    srv_check_stopped(s);
}

/* -------------------------------------------------------------- the role */

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
    s.t_start = kvs_now_us();
    s.deadline = s.t_start + (uint64_t)o->timeout_s * 1000000u;
    if (!(s.base = event_base_new())) {
        fprintf(stderr, "serve: event_base_new failed\n");
        return 1;
    }
    s.ev_dispatch = event_new(s.base, -1, 0, srv_dispatch_cb, &s);
    s.ev_timer = evtimer_new(s.base, timer_cb, &s);
    s.ev_sig[0] = evsignal_new(s.base, SIGINT, on_signal, &s);
    s.ev_sig[1] = evsignal_new(s.base, SIGTERM, on_signal, &s);
    if (!srv_pool_init(&s) || !s.ev_dispatch || !s.ev_timer || !s.ev_sig[0] || !s.ev_sig[1] ||
        evsignal_add(s.ev_sig[0], NULL) || evsignal_add(s.ev_sig[1], NULL)) {
        fprintf(stderr, "serve: out of memory\n");
        goto out;
    }
    if (o->memcpy_mode) {
        if (!srv_memcpy_setup(&s)) {
            fprintf(stderr, "serve: out of memory for the local copy\n");
            goto out;
        }
    } else if (!srv_nxl_setup(&s)) {
        goto out;
    }
    srv_pool_slots(&s);
    if (!setup_http(&s))
        goto out;
    if (s.copy)
        srv_ready(&s);
    else
        srv_nxl_connect(&s); /* srv_ready() once the store answered */
    if (!s.failed && event_base_dispatch(s.base) < 0)
        fprintf(stderr, "serve: event_base_dispatch failed\n");
    if (s.stopping && !s.failed) {
        print_summary(&s);
        rc = 0;
    }
out:
    s.stopping = true; /* callbacks from here on start nothing */
    srv_nxl_teardown(&s);
    if (s.http)
        evhttp_free(s.http); /* connections; their replies' references come back */
    for (int i = 0; i < 2; i++)
        if (s.ev_sig[i])
            event_free(s.ev_sig[i]);
    if (s.ev_timer)
        event_free(s.ev_timer);
    if (s.ev_dispatch)
        event_free(s.ev_dispatch);
    event_base_free(s.base);
    srv_pool_free(&s);
    return rc;
}
