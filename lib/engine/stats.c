/* SPDX-License-Identifier: BSD-3-Clause */
/* Telemetry: counters of an agent and of its transports, read through
 * nxl_agent_stats() and, when the agent has a metrics address, served as
 * Prometheus text on /metrics from the reactor (a small HTTP/1.x server on
 * the agent's loop: one GET per connection, answered and closed).
 *
 * Counting costs a few increments per transfer and one clock read at post
 * and at completion; transfers are counted per backend, everything else per
 * agent. A transfer is counted once, when its completion becomes visible
 * (rule 3 of nxl.h), with its final status. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define MC_MAX 64              /* connections open at once; more are closed at once */
#define MC_REQ_MAX 8192        /* a request's head */
#define MC_TIMEOUT_US 10000000 /* a connection's whole life */

/* one connection: its request head, then its response */
typedef struct mconn {
    struct nxli_metrics *m;
    int fd;
    nxlt_io_t *io;
    nxlt_timer_t *timer;
    char in[MC_REQ_MAX];
    size_t inl;
    char *out;
    size_t outl, outoff;
    LIST_ENTRY(mconn) link;
} mconn_t;

struct nxli_metrics {
    nxl_agent_t *a;
    int fd;
    nxlt_io_t *io;
    uint16_t port;
    unsigned nconns;
    LIST_HEAD(, mconn) conns;
};

/* text that grows; a failed append leaves it marked failed */
typedef struct text {
    char *p;
    size_t len, cap;
    bool failed;
} text_t;

static void text_add(text_t *b, const char *s, size_t n)
{
    if (!b->failed && nxl_growbuf_append(&b->p, &b->len, &b->cap, s, n) < 0)
        b->failed = true;
}

static void text_printf(text_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_printf(text_t *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
    } else if ((size_t)n < sizeof(small)) {
        text_add(b, small, (size_t)n);
    } else {
        char *big = malloc((size_t)n + 1);
        if (!big) {
            b->failed = true;
            return;
        }
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        text_add(b, big, (size_t)n);
        free(big);
    }
}

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
    /* the lazy registration's counters, then deliveries_direct, were
     * appended: a caller built before them passes the size that ends
     * before them */
    size_t size = out->size;
    if (size != sizeof(*out) && size != offsetof(nxl_stats_t, autoreg_registered) &&
        size != offsetof(nxl_stats_t, deliveries_direct)) {
        nxli_err(a, "nxl_agent_stats: stats size %zu is not one this library knows (%zu); set "
                    "size = sizeof(nxl_stats_t)", out->size, sizeof(*out));
        return NXL_ERR_INVALID_PARAM;
    }
    nxl_backend_t *only = NULL;
    if (transport && !(only = nxl_backend_get(a, transport))) {
        nxli_err(a, "nxl_agent_stats: agent '%s' has no transport '%s'", a->name, transport);
        return NXL_ERR_NOT_FOUND;
    }
    nxl_stats_t all;
    nxl_stats_t *caller = out;
    out = &all;
    memset(out, 0, sizeof(*out));
    out->size = size;
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
    nxli_lazy_stats(a, out);
    out->deliveries_direct = a->st.deliveries_direct;
    memcpy(caller, out, size);
    return NXL_SUCCESS;
}

uint16_t nxl_agent_metrics_port(const nxl_agent_t *a)
{
    return a->metrics ? a->metrics->port : 0;
}

/* ------------------------------------------------------------- /metrics */

/* Prometheus label values escape backslash, quote and newline. */
static void label(text_t *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            text_printf(b, "\\%c", *s);
        else if (*s == '\n')
            text_add(b, "\\n", 2);
        else
            text_add(b, s, 1);
    }
}

static void head(text_t *b, const char *name, const char *type, const char *help)
{
    text_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{agent="A"[,transport="T"][,extra]} value */
static void sample(text_t *b, nxl_agent_t *a, const char *name, const char *transport,
                   const char *extra, uint64_t v)
{
    text_printf(b, "%s{agent=\"", name);
    label(b, a->name);
    if (transport) {
        text_printf(b, "\",transport=\"");
        label(b, transport);
    }
    text_printf(b, "\"%s%s} %llu\n", extra ? "," : "", extra ? extra : "",
                        (unsigned long long)v);
}

static void render(nxl_agent_t *a, text_t *b)
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
        text_printf(b, "nxl_transfer_latency_seconds_sum{agent=\"");
        label(b, a->name);
        text_printf(b, "\",transport=\"");
        label(b, t);
        text_printf(b, "\"} %.6f\n", (double)s->lat_sum_us * 1e-6);
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
    nxl_stats_t z = {.size = sizeof(z)};
    nxli_lazy_stats(a, &z);
    head(b, "nxl_autoreg_ranges_total", "counter",
         "Host memory ranges registered on first use (NXL_DESC_AUTO_REGISTER), and dropped: "
         "evicted for the size limit, invalidated (unmapped, or idle without memory events).");
    sample(b, a, "nxl_autoreg_ranges_total", NULL, "event=\"registered\"", z.autoreg_registered);
    sample(b, a, "nxl_autoreg_ranges_total", NULL, "event=\"evicted\"", z.autoreg_evicted);
    sample(b, a, "nxl_autoreg_ranges_total", NULL, "event=\"invalidated\"",
           z.autoreg_invalidated);
    head(b, "nxl_autoreg_lists_reused_total", "counter",
         "Lazy local lists prepared without registering anything.");
    sample(b, a, "nxl_autoreg_lists_reused_total", NULL, NULL, z.autoreg_reused);
    head(b, "nxl_autoreg_bytes", "gauge", "Bytes of host memory the lazy registrations hold.");
    sample(b, a, "nxl_autoreg_bytes", NULL, NULL, z.autoreg_bytes);
}

static void mconn_close(mconn_t *c)
{
    LIST_REMOVE(c, link);
    c->m->nconns--;
    nxlt_io_free(c->io);
    nxlt_timer_free(c->timer);
    close(c->fd);
    free(c->out);
    free(c);
}

/* the response: status line, headers, body; the connection closes after */
static void respond(mconn_t *c, int code, const char *reason, const char *type, const char *body,
                    size_t blen)
{
    text_t t = {0};
    text_printf(&t, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                    "Connection: close\r\n\r\n", code, reason, type, blen);
    text_add(&t, body, blen);
    if (t.failed) {
        free(t.p);
        mconn_close(c);
        return;
    }
    c->out = t.p;
    c->outl = t.len;
    c->outoff = 0;
    if (nxlt_io_start(c->io, NXLT_IO_WRITE) < 0)
        mconn_close(c);
}

static void respond_text(mconn_t *c, int code, const char *reason, const char *msg)
{
    respond(c, code, reason, "text/plain; charset=utf-8", msg, strlen(msg));
}

/* "METHOD /path[?query] HTTP/x.y" */
static void answer(mconn_t *c)
{
    char *sp1 = memchr(c->in, ' ', c->inl), *sp2 = sp1 ? strpbrk(sp1 + 1, " \r\n") : NULL;
    if (!sp1 || !sp2 || sp1[1] != '/') {
        respond_text(c, 400, "Bad Request", "GET /metrics\n");
        return;
    }
    size_t pl = strcspn(sp1 + 1, "? \r\n");
    bool metrics = pl == 8 && !memcmp(sp1 + 1, "/metrics", 8);
    if (!metrics) {
        respond_text(c, 404, "Not Found", "nxl serves /metrics only\n");
        return;
    }
    if ((size_t)(sp1 - c->in) != 3 || memcmp(c->in, "GET", 3)) {
        respond_text(c, 405, "Method Not Allowed", "GET /metrics\n");
        return;
    }
    text_t b = {0};
    render(c->m->a, &b);
    if (b.failed) {
        free(b.p);
        respond_text(c, 500, "Internal Server Error", "out of memory\n");
        return;
    }
    respond(c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", b.p ? b.p : "", b.len);
    free(b.p);
}

static void mconn_io(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    mconn_t *c = arg;
    if (c->out) {
        while (c->outoff < c->outl) {
            ssize_t n = send(fd, c->out + c->outoff, c->outl - c->outoff, MSG_NOSIGNAL);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return;
            if (n <= 0) {
                mconn_close(c);
                return;
            }
            c->outoff += (size_t)n;
        }
        mconn_close(c); /* answered: Connection: close */
        return;
    }
    ssize_t n = recv(fd, c->in + c->inl, sizeof(c->in) - 1 - c->inl, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        mconn_close(c);
        return;
    }
    c->inl += (size_t)n;
    c->in[c->inl] = 0;
    if (strstr(c->in, "\r\n\r\n") || strstr(c->in, "\n\n"))
        answer(c);
    else if (c->inl == sizeof(c->in) - 1)
        respond_text(c, 431, "Request Header Fields Too Large", "GET /metrics\n");
}

static void mconn_timeout(nxlt_timer_t *t, void *arg) { mconn_close(arg); }

static void on_accept(nxlt_io_t *io, int lfd, unsigned ready, void *arg)
{
    struct nxli_metrics *m = arg;
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* EAGAIN, or out of descriptors: the next turn tries again */
        mconn_t *c = m->nconns < MC_MAX ? calloc(1, sizeof(*c)) : NULL;
        if (c) {
            c->m = m;
            c->fd = fd;
            c->io = nxli_io_new(m->a, fd, mconn_io, c);
            c->timer = nxli_timer_new(m->a, mconn_timeout, c);
        }
        if (!c || !c->io || !c->timer || nxlt_io_start(c->io, NXLT_IO_READ) < 0) {
            if (c) {
                nxlt_io_free(c->io);
                nxlt_timer_free(c->timer);
                free(c);
            }
            close(fd);
            continue;
        }
        nxlt_timer_start(c->timer, MC_TIMEOUT_US);
        LIST_INSERT_HEAD(&m->conns, c, link);
        m->nconns++;
    }
}

/* a listening socket on host:port; -1 with errno */
static int listen_on(const char *host, unsigned long port, int *gai)
{
    char ps[8];
    snprintf(ps, sizeof(ps), "%lu", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE},
                    *res = NULL;
    if ((*gai = getaddrinfo(host, ps, &hints, &res)) != 0)
        return -1;
    int fd = -1, one = 1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0)
            continue;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 16) < 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

nxl_status_t nxli_metrics_start(nxl_agent_t *a, const char *addr)
{
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
    if (!m) {
        nxli_err(a, "metrics: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    m->a = a;
    LIST_INIT(&m->conns);
    int gai = 0;
    m->fd = listen_on(host, port, &gai);
    if (m->fd < 0) {
        free(m);
        nxli_err(a, "metrics: cannot serve on %s (%s)", addr,
                 gai ? gai_strerror(gai) : "is the port taken? port 0 picks a free one");
        return NXL_ERR_BACKEND;
    }
    if (!(m->io = nxli_io_new(a, m->fd, on_accept, m)) || nxlt_io_start(m->io, NXLT_IO_READ) < 0) {
        nxlt_io_free(m->io);
        close(m->fd);
        free(m);
        return NXL_ERR_BACKEND; /* the sentence is the loop's */
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(m->fd, (struct sockaddr *)&ss, &sl);
    m->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    a->metrics = m;
    nxli_log(a, NXL_LOG_INFO, "metrics on http://%s:%u/metrics", host, m->port);
    return NXL_SUCCESS;
}

void nxli_metrics_cleanup(nxl_agent_t *a)
{
    struct nxli_metrics *m = a->metrics;
    if (!m)
        return;
    while (!LIST_EMPTY(&m->conns))
        mconn_close(LIST_FIRST(&m->conns));
    nxlt_io_free(m->io);
    close(m->fd);
    free(m);
    a->metrics = NULL;
}
