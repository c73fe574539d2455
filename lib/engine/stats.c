/* SPDX-License-Identifier: BSD-3-Clause */
/* Telemetry: counters of an agent and of its transports, read through
 * nxl_agent_stats() and, when the agent has a metrics address, served as
 * Prometheus text on /metrics from the reactor (libevent's evhttp).
 *
 * Counting costs a few increments per transfer and one clock read at post
 * and at completion; transfers are counted per backend, everything else per
 * agent. A transfer is counted once, when its completion becomes visible
 * (rule 3 of nxl.h), with its final status. */
#include "internal.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <string.h>
#include <strings.h>

struct nxli_metrics {
    struct evhttp *http;
    uint16_t port;
};

static int bucket_of(uint64_t us)
{
    int k = 0;
    while (k < NXL_STATS_BUCKETS && (1ull << k) < us)
        k++;
    return k; /* NXL_STATS_BUCKETS: beyond the last bucket */
}

void nxli_stats_settled(nxl_future_t *f)
{
    nxl_agent_t *a = f->agent;
    switch (f->kind) {
    case NXLI_F_XFER: {
        nxl_backend_t *b = f->st_backend;
        if (!b)
            return; /* never posted */
        nxli_xstats_t *s = &b->xs;
        if (f->status == NXL_SUCCESS) {
            s->succeeded++;
            s->bytes[f->st_op == NXL_WRITE][f->st_mem] += f->st_bytes;
        } else if (f->status == NXL_ERR_CANCELED) {
            s->canceled++;
        } else {
            s->failed++;
        }
        uint64_t done = f->st_done_us ? f->st_done_us : nxli_now_us();
        uint64_t us = done > f->st_post_us ? done - f->st_post_us : 0;
        s->lat_count++;
        s->lat_sum_us += us;
        int k = bucket_of(us);
        if (k < NXL_STATS_BUCKETS)
            s->lat_bucket[k]++;
        f->st_backend = NULL;
        break;
    }
    case NXLI_F_NOTIF:
        if (f->status == NXL_SUCCESS)
            a->st.notifs_sent++;
        else
            a->st.notifs_failed++;
        break;
    case NXLI_F_MD:
        a->st.md_requests++;
        if (f->status != NXL_SUCCESS)
            a->st.md_failed++;
        break;
    default:
        break;
    }
}

static void add_xstats(nxl_stats_t *o, const nxli_xstats_t *s)
{
    o->xfers_posted += s->posted;
    o->xfers_succeeded += s->succeeded;
    o->xfers_failed += s->failed;
    o->xfers_canceled += s->canceled;
    for (int m = 0; m < NXL_MEM_TYPES; m++) {
        o->read_bytes[m] += s->bytes[NXL_READ][m];
        o->write_bytes[m] += s->bytes[NXL_WRITE][m];
    }
    o->latency_count += s->lat_count;
    o->latency_sum_us += s->lat_sum_us;
    for (int k = 0; k < NXL_STATS_BUCKETS; k++)
        o->latency_bucket[k] += s->lat_bucket[k];
}

static uint64_t peers_known(nxl_agent_t *a)
{
    uint64_t n = 0;
    nxli_remote_t *r;
    LIST_FOREACH(r, &a->remotes, link)
    n += !r->self;
    return n;
}

nxl_status_t nxl_agent_stats(nxl_agent_t *a, const char *transport, nxl_stats_t *out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_agent_stats(a, transport, out);
    if (!a || !out) {
        if (a)
            nxli_err(a, "nxl_agent_stats: an output struct is required");
        return NXL_ERR_INVALID_PARAM;
    }
    if (out->size != sizeof(*out)) {
        nxli_err(a, "nxl_agent_stats: stats size %zu is not one this library knows (%zu); set "
                    "size = sizeof(nxl_stats_t)", out->size, sizeof(*out));
        return NXL_ERR_INVALID_PARAM;
    }
    nxl_backend_t *only = NULL;
    if (transport && !(only = nxl_backend_get(a, transport))) {
        nxli_err(a, "nxl_agent_stats: agent '%s' has no transport '%s'", a->name, transport);
        return NXL_ERR_NOT_FOUND;
    }
    memset(out, 0, sizeof(*out));
    out->size = sizeof(*out);
    for (int i = 0; i < a->nbackends; i++)
        if (!only || a->backends[i] == only)
            add_xstats(out, &a->backends[i]->xs);
    out->notifs_sent = a->st.notifs_sent;
    out->notifs_failed = a->st.notifs_failed;
    out->notifs_received = a->st.notifs_received;
    out->md_requests = a->st.md_requests;
    out->md_requests_failed = a->st.md_failed;
    out->md_served = a->st.md_served;
    out->md_loaded = a->st.md_loaded;
    out->peers_known = peers_known(a);
    out->peers_lost = a->st.peers_lost;
    out->notifs_dropped = a->st.notifs_dropped;
    out->md_clients_refused = a->st.md_refused;
    out->md_auth_refused = a->st.md_auth_refused;
    return NXL_SUCCESS;
}

uint16_t nxl_agent_metrics_port(const nxl_agent_t *a)
{
    return a->metrics ? a->metrics->port : 0;
}

/* ------------------------------------------------------------- /metrics */

/* Prometheus label values escape backslash, quote and newline. */
static void label(struct evbuffer *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            evbuffer_add_printf(b, "\\%c", *s);
        else if (*s == '\n')
            evbuffer_add(b, "\\n", 2);
        else
            evbuffer_add(b, s, 1);
    }
}

static void head(struct evbuffer *b, const char *name, const char *type, const char *help)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{agent="A"[,transport="T"][,extra]} value */
static void sample(struct evbuffer *b, nxl_agent_t *a, const char *name, const char *transport,
                   const char *extra, uint64_t v)
{
    evbuffer_add_printf(b, "%s{agent=\"", name);
    label(b, a->name);
    if (transport) {
        evbuffer_add_printf(b, "\",transport=\"");
        label(b, transport);
    }
    evbuffer_add_printf(b, "\"%s%s} %llu\n", extra ? "," : "", extra ? extra : "",
                        (unsigned long long)v);
}

static void render(nxl_agent_t *a, struct evbuffer *b)
{
    static const char *const ops[2] = {"read", "write"};
    head(b, "nxl_transfers_posted_total", "counter", "Transfer posts accepted.");
    for (int i = 0; i < a->nbackends; i++)
        sample(b, a, "nxl_transfers_posted_total", a->backends[i]->ops->name, NULL,
               a->backends[i]->xs.posted);
    head(b, "nxl_transfers_completed_total", "counter",
         "Transfers completed, by final status (success, failed, canceled).");
    for (int i = 0; i < a->nbackends; i++) {
        const nxli_xstats_t *s = &a->backends[i]->xs;
        const char *t = a->backends[i]->ops->name;
        sample(b, a, "nxl_transfers_completed_total", t, "status=\"success\"", s->succeeded);
        sample(b, a, "nxl_transfers_completed_total", t, "status=\"failed\"", s->failed);
        sample(b, a, "nxl_transfers_completed_total", t, "status=\"canceled\"", s->canceled);
    }
    head(b, "nxl_transfer_bytes_total", "counter",
         "Bytes of transfers that succeeded, by direction and local memory type.");
    for (int i = 0; i < a->nbackends; i++)
        for (int op = 0; op < 2; op++)
            for (int m = 0; m < NXL_MEM_TYPES; m++) {
                if (!(a->backends[i]->ops->mem_mask & (1u << m)))
                    continue;
                char extra[64];
                snprintf(extra, sizeof(extra), "op=\"%s\",mem=\"%s\"", ops[op],
                         nxl_mem_name((nxl_mem_t)m));
                sample(b, a, "nxl_transfer_bytes_total", a->backends[i]->ops->name, extra,
                       a->backends[i]->xs.bytes[op][m]);
            }
    head(b, "nxl_transfer_latency_seconds", "histogram",
         "Time from post to completion of transfers.");
    for (int i = 0; i < a->nbackends; i++) {
        const nxli_xstats_t *s = &a->backends[i]->xs;
        const char *t = a->backends[i]->ops->name;
        uint64_t cum = 0;
        for (int k = 0; k < NXL_STATS_BUCKETS; k++) {
            cum += s->lat_bucket[k];
            char extra[48];
            snprintf(extra, sizeof(extra), "le=\"%g\"", (double)(1ull << k) * 1e-6);
            sample(b, a, "nxl_transfer_latency_seconds_bucket", t, extra, cum);
        }
        sample(b, a, "nxl_transfer_latency_seconds_bucket", t, "le=\"+Inf\"", s->lat_count);
        evbuffer_add_printf(b, "nxl_transfer_latency_seconds_sum{agent=\"");
        label(b, a->name);
        evbuffer_add_printf(b, "\",transport=\"");
        label(b, t);
        evbuffer_add_printf(b, "\"} %.6f\n", (double)s->lat_sum_us * 1e-6);
        sample(b, a, "nxl_transfer_latency_seconds_count", t, NULL, s->lat_count);
    }
    head(b, "nxl_notifications_sent_total", "counter", "Standalone notifications, by result.");
    sample(b, a, "nxl_notifications_sent_total", NULL, "result=\"ok\"", a->st.notifs_sent);
    sample(b, a, "nxl_notifications_sent_total", NULL, "result=\"failed\"", a->st.notifs_failed);
    head(b, "nxl_notifications_received_total", "counter", "Notifications received.");
    sample(b, a, "nxl_notifications_received_total", NULL, NULL, a->st.notifs_received);
    head(b, "nxl_metadata_requests_total", "counter",
         "Metadata exchange requests made (send, fetch, invalidate), by result.");
    sample(b, a, "nxl_metadata_requests_total", NULL, "result=\"ok\"",
           a->st.md_requests - a->st.md_failed);
    sample(b, a, "nxl_metadata_requests_total", NULL, "result=\"failed\"", a->st.md_failed);
    head(b, "nxl_metadata_served_total", "counter", "Requests the metadata listener answered.");
    sample(b, a, "nxl_metadata_served_total", NULL, NULL, a->st.md_served);
    head(b, "nxl_metadata_loaded_total", "counter", "Remote metadata blobs loaded.");
    sample(b, a, "nxl_metadata_loaded_total", NULL, NULL, a->st.md_loaded);
    head(b, "nxl_notifications_dropped_total", "counter",
         "Notifications dropped: max_queued_notifs were waiting to be drained.");
    sample(b, a, "nxl_notifications_dropped_total", NULL, NULL, a->st.notifs_dropped);
    head(b, "nxl_metadata_clients_refused_total", "counter",
         "Listener connections closed by a bound (clients, per host, frame size) or a timeout.");
    sample(b, a, "nxl_metadata_clients_refused_total", NULL, NULL, a->st.md_refused);
    head(b, "nxl_metadata_auth_refused_total", "counter",
         "Metadata frames refused by authentication: unsigned, tampered, replayed, other key.");
    sample(b, a, "nxl_metadata_auth_refused_total", NULL, NULL, a->st.md_auth_refused);
    head(b, "nxl_peers", "gauge", "Remote agents known.");
    sample(b, a, "nxl_peers", NULL, NULL, peers_known(a));
    head(b, "nxl_peers_lost_total", "counter", "Remote agents forgotten: invalidated or lost.");
    sample(b, a, "nxl_peers_lost_total", NULL, NULL, a->st.peers_lost);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    nxl_agent_t *a = arg;
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    if (!path || strcmp(path, "/metrics")) {
        evhttp_send_error(req, HTTP_NOTFOUND, "nxl serves /metrics only");
        return;
    }
    if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
        evhttp_send_error(req, HTTP_BADMETHOD, "GET /metrics");
        return;
    }
    struct evbuffer *b = evbuffer_new();
    if (!b) {
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
        return;
    }
    render(a, b);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    evhttp_send_reply(req, HTTP_OK, "OK", b);
    evbuffer_free(b);
}

nxl_status_t nxli_metrics_start(nxl_agent_t *a, const char *addr)
{
    if (!a->base) {
        nxli_err(a, "metrics: the /metrics server runs on a libevent base, and agent '%s' runs "
                    "on NXL_LOOP_FD", a->name);
        return NXL_ERR_NOT_SUPPORTED;
    }
    /* "host:port", "[v6]:port" */
    char host[256];
    const char *colon = strrchr(addr, ':');
    size_t hl = colon ? (size_t)(colon - addr) : 0;
    char *end = NULL;
    unsigned long port = colon ? strtoul(colon + 1, &end, 10) : 0;
    if (!colon || !hl || hl >= sizeof(host) || !*(colon + 1) || *end || port > 65535) {
        nxli_err(a, "metrics: address '%s' is not host:port (e.g. 127.0.0.1:9464, "
                    "[::1]:9464, port 0 for any free one)", addr);
        return NXL_ERR_INVALID_PARAM;
    }
    memcpy(host, addr, hl);
    host[hl] = 0;
    if (host[0] == '[' && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = 0;
    }
    struct nxli_metrics *m = calloc(1, sizeof(*m));
    if (!m || !(m->http = evhttp_new(a->base))) {
        free(m);
        nxli_err(a, "metrics: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(m->http, host, (uint16_t)port);
    if (!bs) {
        evhttp_free(m->http);
        free(m);
        nxli_err(a, "metrics: cannot serve on %s (is the port taken? port 0 picks a free one)",
                 addr);
        return NXL_ERR_BACKEND;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&ss, &sl);
    m->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    evhttp_set_gencb(m->http, on_request, a);
    evhttp_set_timeout(m->http, 10);
    a->metrics = m;
    nxli_log(a, NXL_LOG_INFO, "metrics on http://%s:%u/metrics", host, m->port);
    return NXL_SUCCESS;
}

void nxli_metrics_cleanup(nxl_agent_t *a)
{
    if (!a->metrics)
        return;
    evhttp_free(a->metrics->http);
    free(a->metrics);
    a->metrics = NULL;
}
