/* SPDX-License-Identifier: BSD-3-Clause */
/* Metadata exchange over TCP, on the agent's loop: a listening socket's
 * watch accepts connections, and each serves requests; each client request
 * is a future on a connection (stream.c).
 *
 * Frame: "NXLX" | version u8 | type u8 | status i8 | 0 u8 | length u32 (big
 * endian) | 4 zero bytes | payload. A request gets exactly one reply frame
 * (type REPLY) carrying the status and, for a fetch, the metadata, or the
 * peer's error sentence.
 *
 * Host names are resolved without blocking the reactor: glibc's
 * getaddrinfo_a() (the same resolver and nsswitch order as getaddrinfo(),
 * on glibc's own threads) signals an eventfd the loop watches. Numeric
 * addresses are taken at once.
 *
 * With TLS configured (tls.c) the listener's and the client's connections
 * carry an OpenSSL session; everything above them is the same. */
#include "internal.h"
#include "stream.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define HDR_LEN 16

enum { T_SEND_MD = 1, T_FETCH_MD = 2, T_INVALIDATE = 3, T_REPLY = 0x81 };

typedef struct srv_conn {
    nxl_agent_t *a;
    nxli_stream_t *s;
    nxlt_timer_t *deadline;     /* a frame begun must be whole within the I/O timeout */
    struct sockaddr_storage peer;
    LIST_ENTRY(srv_conn) link;
} srv_conn_t;

struct client;

/* One asynchronous name resolution. References: the loop's, and
 * glibc's notification (dropped by the notification, or by a cancel that
 * reached the request before it ran). Freed by the last one. */
typedef struct resolve {
    struct gaicb gcb;
    struct addrinfo hints;
    char *host;
    char port[8];
    int efd;
    int refs;
    nxlt_io_t *io;
    struct client *c;
} resolve_t;

typedef struct client {
    nxl_agent_t *a;
    nxl_future_t *f;
    nxli_stream_t *s;
    int type;
    char *expect;           /* fetch: the name expected */
    char where[300];        /* "host:port" for sentences */
    char host[256];         /* the host and port asked for (a fetch: the peer's origin) */
    uint16_t port;
    /* every address the name resolved to, tried in order until one
     * connects (a name such as "localhost" often gives ::1 first) */
    struct addrinfo *addrs, *cur;
    unsigned naddrs;
    bool connected;
    void *frame;            /* the request, written again on each attempt */
    size_t frame_len;
    char tried[800];        /* "::1 (Connection refused), ..." for the sentence */
    unsigned char nonce[NXLI_AUTH_NONCE]; /* the request's, which the reply must carry */
    resolve_t *rq;          /* the name's resolution, while it runs */
    LIST_ENTRY(client) link;
} client_t;

struct nxli_exchange {
    int lfd;                /* the listening socket (-1: none) */
    nxlt_io_t *lis;         /* its watch */
    uint64_t accept_errors;
    size_t nconns;
    LIST_HEAD(, srv_conn) conns;
    LIST_HEAD(, client) clients;
};

static struct nxli_exchange *ex_get(nxl_agent_t *a)
{
    if (!a->ex) {
        a->ex = calloc(1, sizeof(*a->ex));
        if (a->ex) {
            a->ex->lfd = -1;
            LIST_INIT(&a->ex->conns);
            LIST_INIT(&a->ex->clients);
        }
    }
    return a->ex;
}

static void put_hdr(unsigned char *h, int type, int status, uint32_t len)
{
    memcpy(h, "NXLX", 4);
    h[4] = 1;
    h[5] = (unsigned char)type;
    h[6] = (unsigned char)(int8_t)status;
    h[7] = 0;
    uint32_t n = htonl(len);
    memcpy(h + 8, &n, 4);
    memset(h + 12, 0, 4);
}

/* A frame into *out (malloc'd): header, payload and, with a secret, the
 * authentication trailer (a reply carries the request's nonce in reply_to;
 * a request's fresh nonce is copied to nonce_out). 0 or -1. */
static int build_frame(nxl_agent_t *a, int type, int status, const void *p, size_t len,
                       const unsigned char *reply_to, unsigned char *nonce_out, void **out,
                       size_t *out_len)
{
    size_t tl = a->auth ? NXLI_AUTH_TRAILER : 0;
    unsigned char *f = malloc(HDR_LEN + len + tl);
    if (!f)
        return -1;
    put_hdr(f, type, status, (uint32_t)(len + tl));
    if (len)
        memcpy(f + HDR_LEN, p, len);
    if (a->auth) {
        f[7] = 1; /* signed */
        unsigned char *tr = f + HDR_LEN + len;
        if (nxli_auth_sign(a, f, HDR_LEN, f + HDR_LEN, len, reply_to, tr) != 0) {
            free(f);
            return -1;
        }
        if (nonce_out)
            memcpy(nonce_out, tr + 8, NXLI_AUTH_NONCE);
    }
    *out = f;
    *out_len = HDR_LEN + len + tl;
    return 0;
}

static void send_frame(nxl_agent_t *a, nxli_stream_t *s, int type, int status, const void *p,
                       size_t len, const unsigned char *reply_to)
{
    void *f;
    size_t fl;
    if (build_frame(a, type, status, p, len, reply_to, NULL, &f, &fl) == 0) {
        nxli_stream_write(s, f, fl);
        free(f);
    }
}

/* Checks and strips a frame's authentication trailer (h as received, *len
 * shrinks to the body). 0: go on; -1: malformed; -2: refused (why says
 * why). A request's nonce goes to nonce_out; a reply must carry expect. */
static int open_frame(nxl_agent_t *a, const unsigned char *h, const char *p, uint32_t *len,
                      const unsigned char *expect, unsigned char *nonce_out, char *why,
                      size_t cap)
{
    if (h[7] & 1) {
        if (*len < NXLI_AUTH_TRAILER)
            return -1;
        *len -= NXLI_AUTH_TRAILER;
        const unsigned char *tr = (const unsigned char *)p + *len;
        if (!a->auth)
            return 0; /* we trust the network: the signature is not ours to check */
        if (nxli_auth_verify(a, h, HDR_LEN, p, *len, tr, expect, why, cap) != 0)
            return -2;
        if (nonce_out)
            memcpy(nonce_out, tr + 8, NXLI_AUTH_NONCE);
        return 0;
    }
    if (a->auth) {
        snprintf(why, cap, "it is not signed (the sender has no secret configured)");
        return -2;
    }
    return 0;
}

/* 1: a whole frame is there (header in h, payload pulled into *payload);
 * 0: need more; -1: garbage */
static int take_frame(nxli_stream_t *s, size_t max, unsigned char *h, char **payload,
                      uint32_t *plen)
{
    size_t have;
    const unsigned char *in = nxli_stream_input(s, &have);
    if (have < HDR_LEN)
        return 0;
    memcpy(h, in, HDR_LEN);
    if (memcmp(h, "NXLX", 4) || h[4] != 1)
        return -1;
    uint32_t len;
    memcpy(&len, h + 8, 4);
    len = ntohl(len);
    if (len > max)
        return -1;
    if (have < HDR_LEN + (size_t)len)
        return 0;
    *payload = malloc(len + 1);
    if (!*payload)
        return -1;
    memcpy(*payload, in + HDR_LEN, len);
    nxli_stream_drain(s, HDR_LEN + (size_t)len);
    (*payload)[len] = 0;
    *plen = len;
    return 1;
}

/* ------------------------------------------------------------------ server */

static void srv_close(srv_conn_t *c)
{
    LIST_REMOVE(c, link);
    c->a->ex->nconns--;
    nxli_stream_free(c->s);
    nxlt_timer_free(c->deadline);
    free(c);
}

/* An IPv4 or IPv6 address as text, for sentences. */
static void peer_text(const struct sockaddr *sa, char *buf, size_t cap)
{
    const void *in = sa->sa_family == AF_INET6
                         ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
                         : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
    if (!inet_ntop(sa->sa_family, in, buf, (socklen_t)cap))
        snprintf(buf, cap, "?");
}

/* A client dropped by a bound or a timeout: counted, and logged (the first
 * and then every 64th, so that a flood does not flood the log too). */
static void refused(nxl_agent_t *a, const struct sockaddr_storage *ss, const char *why)
{
    if (a->st.md_refused++ % 64 == 0) {
        char host[INET6_ADDRSTRLEN];
        peer_text((const struct sockaddr *)ss, host, sizeof(host));
        nxli_log(a, NXL_LOG_WARN, "metadata listener: connection from %s closed: %s (%llu so "
                 "far)", host, why, (unsigned long long)a->st.md_refused);
    }
}

static void srv_deadline(nxlt_timer_t *t, void *arg)
{
    srv_conn_t *c = arg;
    refused(c->a, &c->peer, "a request frame did not arrive whole within the I/O timeout");
    srv_close(c);
}

static void arm_deadline(srv_conn_t *c)
{
    size_t pending;
    nxli_stream_input(c->s, &pending);
    if (!pending)
        nxlt_timer_stop(c->deadline);
    else if (!nxlt_timer_pending(c->deadline))
        nxlt_timer_start(c->deadline, (uint64_t)c->a->io_timeout_ms * 1000);
}

static void srv_read(nxli_stream_t *s, void *arg)
{
    srv_conn_t *c = arg;
    nxl_agent_t *a = c->a;
    unsigned char h[HDR_LEN];
    char *p;
    uint32_t len;
    int r;
    while ((r = take_frame(s, a->max_frame, h, &p, &len)) == 1) {
        nxl_status_t st = NXL_SUCCESS;
        a->st.md_served++;
        unsigned char nonce[NXLI_AUTH_NONCE];
        char aw[256];
        int o = open_frame(a, h, p, &len, NULL, nonce, aw, sizeof(aw));
        p[len] = 0;
        if (o == -1) {
            free(p);
            r = -1;
            break;
        }
        if (o == -2) {
            char host[INET6_ADDRSTRLEN];
            peer_text((const struct sockaddr *)&c->peer, host, sizeof(host));
            nxli_err(a, "metadata listener: a request from %s was refused: %s", host, aw);
            if (a->st.md_auth_refused++ % 64 == 0)
                nxli_log(a, NXL_LOG_WARN, "%s", a->err);
            free(p);
            /* unsigned: the client may have no secret to check a signature with */
            const char *msg = "request refused: authentication failed (both agents need the "
                              "same auth_secret)";
            unsigned char hh[HDR_LEN];
            put_hdr(hh, T_REPLY, NXL_ERR_NOT_ALLOWED, (uint32_t)strlen(msg));
            nxli_stream_write(s, hh, HDR_LEN);
            nxli_stream_write(s, msg, strlen(msg));
            continue;
        }
        const unsigned char *reply_to = a->auth ? nonce : NULL;
        switch (h[5]) {
        case T_SEND_MD: {
            char name[NXLI_NAME_MAX];
            st = nxl_md_load(a, p, len, name, sizeof(name));
            if (st == NXL_SUCCESS)
                nxli_log(a, NXL_LOG_INFO, "metadata of agent '%s' received and loaded", name);
            break;
        }
        case T_FETCH_MD: {
            void *blob;
            size_t bl;
            st = nxl_md_local(a, &blob, &bl);
            if (st == NXL_SUCCESS) {
                send_frame(a, s, T_REPLY, st, blob, bl, reply_to);
                free(blob);
                free(p);
                continue;
            }
            break;
        }
        case T_INVALIDATE:
            /* the peer says it leaves: DOWN, and it may come back */
            st = nxli_md_invalidate(a, p, false);
            break;
        default:
            nxli_err(a, "metadata listener: unknown request type %d", h[5]);
            st = NXL_ERR_NOT_SUPPORTED;
        }
        free(p);
        const char *why = st == NXL_SUCCESS ? "" : a->err;
        send_frame(a, s, T_REPLY, st, why, strlen(why), reply_to);
    }
    if (r < 0) {
        /* a TLS handshake record (22) where a frame should be */
        size_t have;
        const unsigned char *b = nxli_stream_input(s, &have);
        refused(a, &c->peer, have && b[0] == 22
                                 ? "a TLS client, and this listener has no TLS configured "
                                   "(tls_cert_file, tls_key_file, tls_ca_file)"
                                 : "a malformed frame, or one larger than max_frame_bytes");
        srv_close(c);
        return;
    }
    arm_deadline(c);
}

static void srv_event(nxli_stream_t *s, unsigned what, int err, void *arg)
{
    srv_conn_t *c = arg;
    if (what & NXLI_STREAM_TIMEOUT) {
        refused(c->a, &c->peer, "idle for the I/O timeout");
    } else if (c->a->tls && (what & NXLI_STREAM_ERROR)) {
        char why[500], msg[600];
        nxli_tls_why(s, why, sizeof(why));
        snprintf(msg, sizeof(msg), "TLS failed: %s (a client without TLS, or with a "
                 "certificate the CA did not sign?)", why);
        refused(c->a, &c->peer, msg);
    }
    srv_close(c);
}

static const nxli_stream_cbs_t srv_cbs = {.on_read = srv_read, .on_event = srv_event};

/* Serves requests arriving on fd (a socket the listener accepted, or one
 * end of a socket pair in the fuzzing harness); takes it over. */
void nxli_exchange_serve(nxl_agent_t *a, int fd, const struct sockaddr_storage *peer_addr)
{
    struct sockaddr_storage peer = *peer_addr;
    srv_conn_t *c = ex_get(a) ? calloc(1, sizeof(*c)) : NULL;
    nxlt_timer_t *dl = c ? nxli_timer_new(a, srv_deadline, c) : NULL;
    struct ssl_st *ssl = dl && a->tls ? nxli_tls_ssl(a, fd) : NULL;
    nxli_stream_t *s = dl && (ssl || !a->tls) ? nxli_stream_new(a, fd, ssl, true, &srv_cbs, c)
                                              : NULL;
    if (!s) {
        if (!dl || (a->tls && !ssl))
            close(fd);
        nxlt_timer_free(dl);
        free(c);
        return;
    }
    c->a = a;
    c->s = s;
    c->deadline = dl;
    c->peer = peer;
    LIST_INSERT_HEAD(&a->ex->conns, c, link);
    a->ex->nconns++;
    nxli_stream_set_timeout(s, a->io_timeout_ms);
}

static void srv_accept(nxlt_io_t *io, int lfd, unsigned ready, void *arg)
{
    nxl_agent_t *a = arg;
    for (;;) {
        struct sockaddr_storage peer = {0};
        socklen_t slen = sizeof(peer);
        int fd = accept4(lfd, (struct sockaddr *)&peer, &slen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK && a->ex->accept_errors++ % 64 == 0)
                nxli_log(a, NXL_LOG_WARN, "metadata listener: cannot accept a connection: %s "
                         "(%llu so far)", strerror(errno),
                         (unsigned long long)a->ex->accept_errors);
            return;
        }
        /* bounds: connections at once, and from one address */
        size_t same = 0;
        srv_conn_t *o;
        LIST_FOREACH(o, &a->ex->conns, link)
        if (o->peer.ss_family == peer.ss_family &&
            (peer.ss_family == AF_INET6
                 ? !memcmp(&((struct sockaddr_in6 *)&o->peer)->sin6_addr,
                           &((struct sockaddr_in6 *)&peer)->sin6_addr, sizeof(struct in6_addr))
                 : ((struct sockaddr_in *)&o->peer)->sin_addr.s_addr ==
                       ((struct sockaddr_in *)&peer)->sin_addr.s_addr))
            same++;
        if (a->ex->nconns >= a->max_clients || same >= a->max_clients_per_host) {
            refused(a, &peer, a->ex->nconns >= a->max_clients
                                  ? "max_md_clients connections are open"
                                  : "max_md_clients_per_host connections from this address are "
                                    "open");
            close(fd);
            continue;
        }
        nxli_exchange_serve(a, fd, &peer);
    }
}

static int resolve(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *sl)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    char ps[8];
    snprintf(ps, sizeof(ps), "%u", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc)
        return rc;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *sl = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

nxl_status_t nxli_exchange_listen(nxl_agent_t *a, const char *addr, uint16_t port)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    int rc = resolve(addr, port, &ss, &sl);
    if (rc) {
        nxli_err(a, "metadata listener: cannot resolve listen address '%s': %s", addr,
                 gai_strerror(rc));
        return NXL_ERR_INVALID_PARAM;
    }
    if (!ex_get(a))
        return NXL_ERR_UNKNOWN;
    int one = 1;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        bind(fd, (struct sockaddr *)&ss, sl) || listen(fd, 64)) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        nxli_err(a, "metadata listener: cannot listen on %s:%u: %s (is the port taken? use port "
                    "0 for any free one)", addr, port, strerror(e));
        return NXL_ERR_BACKEND;
    }
    nxlt_io_t *lis = nxli_io_new(a, fd, srv_accept, a);
    if (!lis || nxlt_io_start(lis, NXLT_IO_READ)) {
        nxlt_io_free(lis);
        close(fd);
        return NXL_ERR_BACKEND; /* the sentence is the loop's */
    }
    a->ex->lfd = fd;
    a->ex->lis = lis;
    struct sockaddr_storage bound;
    socklen_t bl = sizeof(bound);
    getsockname(fd, (struct sockaddr *)&bound, &bl);
    a->listen_port = ntohs(bound.ss_family == AF_INET6
                               ? ((struct sockaddr_in6 *)&bound)->sin6_port
                               : ((struct sockaddr_in *)&bound)->sin_port);
    nxli_log(a, NXL_LOG_INFO, "metadata listener on %s:%u", addr, a->listen_port);
    return NXL_SUCCESS;
}

/* ------------------------------------------------------------ resolution */

static void resolve_unref(resolve_t *rq)
{
    if (__atomic_sub_fetch(&rq->refs, 1, __ATOMIC_ACQ_REL))
        return;
    if (rq->gcb.ar_result)
        freeaddrinfo(rq->gcb.ar_result);
    close(rq->efd);
    free(rq->host);
    free(rq);
}

/* on a thread of glibc's: only the eventfd */
static void resolve_notify(union sigval v)
{
    resolve_t *rq = v.sival_ptr;
    uint64_t one = 1;
    ssize_t n = write(rq->efd, &one, sizeof(one));
    NXLI_UNUSED(n);
    resolve_unref(rq);
}

/* The client no longer wants the answer (canceled, torn down). */
static void resolve_abandon(resolve_t *rq)
{
    nxlt_io_free(rq->io);
    rq->io = NULL;
    rq->c = NULL;
    if (gai_cancel(&rq->gcb) == EAI_CANCELED)
        resolve_unref(rq); /* never started: glibc will not notify */
    resolve_unref(rq);
}

static void connect_next(struct client *c);
static void client_finish(struct client *c, nxl_status_t st, const char *why);

static void on_resolved(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    resolve_t *rq = arg;
    int rc = gai_error(&rq->gcb);
    if (rc == EAI_INPROGRESS)
        return; /* not ours to read yet */
    struct client *c = rq->c;
    nxlt_io_free(rq->io);
    rq->io = NULL;
    c->rq = NULL;
    if (rc == 0) {
        c->addrs = c->cur = rq->gcb.ar_result;
        rq->gcb.ar_result = NULL;
        for (const struct addrinfo *ai = c->addrs; ai; ai = ai->ai_next)
            c->naddrs++;
        resolve_unref(rq);
        connect_next(c);
        return;
    }
    char why[600];
    snprintf(why, sizeof(why), "metadata exchange with %s: cannot resolve '%s': %s", c->where,
             rq->host, rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    resolve_unref(rq);
    client_finish(c, NXL_ERR_NOT_FOUND, why);
}

/* Starts resolving c's host; 0, or -1 with errno. */
static int resolve_start(struct client *c, const char *host, uint16_t port)
{
    resolve_t *rq = calloc(1, sizeof(*rq));
    if (!rq || !(rq->host = strdup(host))) {
        free(rq);
        return -1;
    }
    rq->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    rq->io = rq->efd >= 0 ? nxli_io_new(c->a, rq->efd, on_resolved, rq) : NULL;
    if (!rq->io || nxlt_io_start(rq->io, NXLT_IO_READ)) {
        int e = rq->io ? EINVAL : errno;
        nxlt_io_free(rq->io);
        if (rq->efd >= 0)
            close(rq->efd);
        free(rq->host);
        free(rq);
        errno = e;
        return -1;
    }
    snprintf(rq->port, sizeof(rq->port), "%u", port);
    rq->hints.ai_family = AF_UNSPEC;
    rq->hints.ai_socktype = SOCK_STREAM;
    rq->gcb.ar_name = rq->host;
    rq->gcb.ar_service = rq->port;
    rq->gcb.ar_request = &rq->hints;
    rq->refs = 2;
    rq->c = c;
    struct gaicb *list[1] = {&rq->gcb};
    struct sigevent sev = {.sigev_notify = SIGEV_THREAD};
    sev.sigev_value.sival_ptr = rq;
    sev.sigev_notify_function = resolve_notify;
    int rc = getaddrinfo_a(GAI_NOWAIT, list, 1, &sev);
    if (rc) {
        nxlt_io_free(rq->io);
        close(rq->efd);
        free(rq->host);
        free(rq);
        errno = rc == EAI_SYSTEM ? errno : EAGAIN;
        return -1;
    }
    c->rq = rq;
    return 0;
}

/* ------------------------------------------------------------------ client */

static void client_free(client_t *c)
{
    LIST_REMOVE(c, link);
    if (c->rq)
        resolve_abandon(c->rq);
    nxli_stream_free(c->s);
    if (c->addrs)
        freeaddrinfo(c->addrs);
    free(c->frame);
    free(c->expect);
    free(c);
}

static void client_finish(client_t *c, nxl_status_t st, const char *why)
{
    nxl_future_t *f = c->f;
    c->f = NULL;
    f->owner = NULL;
    client_free(c);
    nxli_future_complete(f, st, why);
}

static void client_read(nxli_stream_t *s, void *arg)
{
    client_t *c = arg;
    nxl_agent_t *a = c->a;
    unsigned char h[HDR_LEN];
    char *p;
    uint32_t len;
    int r = take_frame(s, a->max_frame, h, &p, &len);
    if (r == 0)
        return;
    if (r < 0 || h[5] != T_REPLY) {
        if (r > 0)
            free(p);
        char why[600];
        /* a TLS record (alert 21, handshake 22) where a frame should be */
        bool tls = !a->tls && (h[0] == 21 || h[0] == 22) && h[1] == 3;
        snprintf(why, sizeof(why), "metadata exchange with %s: the peer answered with a "
                 "malformed frame (%s)", c->where,
                 tls ? "it speaks TLS, and this agent has no TLS configured: set tls_cert_file, "
                       "tls_key_file and tls_ca_file"
                     : "is an nxl agent listening there?");
        client_finish(c, NXL_ERR_MISMATCH, why);
        return;
    }
    nxl_status_t st = (nxl_status_t)(int8_t)h[6];
    char why[NXLI_ERR_MAX + 400] = "";
    char aw[256];
    int o = open_frame(a, h, p, &len, c->nonce, NULL, aw, sizeof(aw));
    p[len] = 0;
    if (o == -1) {
        free(p);
        snprintf(why, sizeof(why), "metadata exchange with %s: the peer answered with a "
                 "malformed frame (a signature trailer too short)", c->where);
        client_finish(c, NXL_ERR_MISMATCH, why);
        return;
    }
    if (o == -2) {
        a->st.md_auth_refused++;
        if (!(h[7] & 1) && st == NXL_ERR_NOT_ALLOWED)
            snprintf(why, sizeof(why), "metadata exchange with %s: the peer refused the "
                     "request: %.*s", c->where, (int)(len > 200 ? 200 : len), p);
        else
            snprintf(why, sizeof(why), "metadata exchange with %s: the answer was refused: %s; "
                     "nothing was loaded", c->where, aw);
        free(p);
        client_finish(c, NXL_ERR_NOT_ALLOWED, why);
        return;
    }
    if (st != NXL_SUCCESS) {
        snprintf(why, sizeof(why), "metadata exchange with %s: the peer answered %s: %.*s",
                 c->where, nxl_status_name(st), (int)(len > NXLI_ERR_MAX ? NXLI_ERR_MAX : len), p);
    } else if (c->type == T_FETCH_MD) {
        char name[NXLI_NAME_MAX];
        /* another agent than expected: refused before loading, so that what
         * was known of the agent it names stays as it was */
        cJSON *peek = c->expect ? cJSON_ParseWithLength(p, len) : NULL;
        const cJSON *jn = peek ? cJSON_GetObjectItemCaseSensitive(peek, "agent") : NULL;
        if (cJSON_IsString(jn) && strcmp(jn->valuestring, c->expect)) {
            snprintf(why, sizeof(why), "nxl_md_fetch: the agent at %s is '%.*s', not '%s' as "
                     "expected; nothing was loaded", c->where, NXLI_NAME_MAX, jn->valuestring,
                     c->expect);
            cJSON_Delete(peek);
            free(p);
            client_finish(c, NXL_ERR_MISMATCH, why);
            return;
        }
        cJSON_Delete(peek);
        st = nxl_md_load(a, p, len, name, sizeof(name));
        if (st != NXL_SUCCESS) {
            /* the caller called nxl_md_fetch: its name first, the load's why after */
            snprintf(why, sizeof(why), "nxl_md_fetch: the metadata from %s was not loaded: %s",
                     c->where, a->err);
        } else if (c->expect && strcmp(c->expect, name)) {
            nxl_md_invalidate(a, name);
            st = NXL_ERR_MISMATCH;
            snprintf(why, sizeof(why), "nxl_md_fetch: the agent at %s is '%s', not '%s' as "
                     "expected", c->where, name, c->expect);
        } else {
            free(c->f->peer);
            c->f->peer = strdup(name);
            /* where to find it again after it is lost (peer.c) */
            nxli_peer_origin(a, name, c->host, c->port);
        }
    }
    free(p);
    client_finish(c, st, why);
}

/* Notes why the current address failed, for the final sentence. */
static void note_failure(client_t *c, const char *what)
{
    char host[INET6_ADDRSTRLEN];
    peer_text(c->cur->ai_addr, host, sizeof(host));
    size_t o = strlen(c->tried);
    if (o < sizeof(c->tried) - 1)
        snprintf(c->tried + o, sizeof(c->tried) - o, "%s%s (%s)", o ? ", " : "", host, what);
}

static void client_read(nxli_stream_t *s, void *arg);
static void client_connected(nxli_stream_t *s, void *arg);
static void client_event(nxli_stream_t *s, unsigned what, int err, void *arg);

static const nxli_stream_cbs_t client_cbs = {
    .on_read = client_read, .on_connected = client_connected, .on_event = client_event};

/* Connects to the current address, else to the next ones; when none is
 * left, completes the future with every address and why each failed. */
static void connect_next(client_t *c)
{
    nxl_agent_t *a = c->a;
    for (; c->cur; c->cur = c->cur->ai_next) {
        nxli_stream_free(c->s);
        c->s = NULL;
        int fd = nxli_stream_socket(c->cur->ai_family);
        if (fd < 0) {
            note_failure(c, strerror(errno));
            continue;
        }
        struct ssl_st *ssl = a->tls ? nxli_tls_ssl(a, fd) : NULL;
        if (a->tls && !ssl)
            close(fd);
        c->s = ssl || !a->tls ? nxli_stream_new(a, fd, ssl, false, &client_cbs, c) : NULL;
        if (!c->s) {
            note_failure(c, "out of memory");
            continue;
        }
        /* while connecting, an address that does not answer gets a share of
         * the timeout, so that the next ones are still tried in time */
        unsigned ms = a->io_timeout_ms;
        if (c->cur->ai_next && c->naddrs > 1) {
            ms = a->io_timeout_ms / c->naddrs;
            if (ms < 1000)
                ms = a->io_timeout_ms < 1000 ? a->io_timeout_ms : 1000;
        }
        nxli_stream_set_timeout(c->s, ms);
        if (nxli_stream_write(c->s, c->frame, c->frame_len) == 0 &&
            nxli_stream_connect(c->s, c->cur->ai_addr, c->cur->ai_addrlen) == 0)
            return;
        note_failure(c, strerror(errno));
    }
    char why[1400];
    snprintf(why, sizeof(why), "metadata exchange with %s: cannot connect; tried %s (is the "
             "peer's listener running, and on which address?)", c->where,
             c->tried[0] ? c->tried : "no address");
    client_finish(c, NXL_ERR_REMOTE_DISCONNECT, why);
}

/* connected (with TLS: the handshake done): the whole timeout from now */
static void client_connected(nxli_stream_t *s, void *arg)
{
    client_t *c = arg;
    c->connected = true;
    nxli_stream_set_timeout(s, c->a->io_timeout_ms);
}

static void client_event(nxli_stream_t *s, unsigned what, int err, void *arg)
{
    client_t *c = arg;
    char why[1000];
    if (!c->connected && c->a->tls && !(what & NXLI_STREAM_TIMEOUT) &&
        nxli_stream_tls_started(s)) {
        /* connected, and the TLS handshake failed */
        char tw[500], msg[700];
        nxli_tls_why(s, tw, sizeof(tw));
        snprintf(msg, sizeof(msg), "TLS handshake failed: %s; does its listener use TLS, with a "
                 "certificate this agent's CA signed?", tw);
        note_failure(c, msg);
        c->cur = c->cur->ai_next;
        connect_next(c);
        return;
    }
    if (!c->connected) {
        note_failure(c, what & NXLI_STREAM_TIMEOUT ? "no answer" : strerror(err));
        c->cur = c->cur->ai_next;
        connect_next(c);
        return;
    }
    if (what & NXLI_STREAM_TIMEOUT)
        snprintf(why, sizeof(why), "metadata exchange with %s: no answer within %u ms",
                 c->where, c->a->io_timeout_ms);
    else if (what & NXLI_STREAM_EOF)
        snprintf(why, sizeof(why), "metadata exchange with %s: the peer closed the connection "
                 "before answering%s", c->where,
                 c->a->tls ? "" : " (a listener with TLS closes a client without it: does it "
                                  "use TLS?)");
    else if (c->a->tls && !err) {
        /* TLS 1.3: the listener checks this agent's certificate after the
         * client's handshake is done, and refuses it with an alert */
        char tw[500];
        nxli_tls_why(s, tw, sizeof(tw));
        snprintf(why, sizeof(why), "metadata exchange with %s: TLS failed: %s (did the peer's "
                 "CA sign this agent's certificate?)", c->where, tw);
    } else
        snprintf(why, sizeof(why), "metadata exchange with %s: %s (is the peer's listener "
                 "running?%s)", c->where, strerror(err),
                 c->a->tls ? "" : " a listener with TLS resets a client without it");
    client_finish(c, NXL_ERR_REMOTE_DISCONNECT, why);
}

static void client_cancel(nxl_future_t *f)
{
    client_t *c = f->owner;
    if (c) {
        c->f = NULL;
        f->owner = NULL;
        client_free(c);
    }
}

static nxl_status_t request(nxl_agent_t *a, const char *call, int type, const char *host,
                            uint16_t port, const void *payload, size_t plen, const char *expect,
                            nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    if (out)
        *out = NULL;
    if (!host || !port) {
        nxli_err(a, "%s: a host and a port are required", call);
        return NXL_ERR_INVALID_PARAM;
    }
    /* a numeric address is taken at once; a name is resolved on glibc's
     * threads, and the connection starts when the answer is in */
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST},
                    *res = NULL;
    char ps[8];
    snprintf(ps, sizeof(ps), "%u", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc && rc != EAI_NONAME) {
        nxli_err(a, "%s: cannot use host '%s': %s", call, host, gai_strerror(rc));
        return NXL_ERR_INVALID_PARAM;
    }
    if (!*host || strlen(host) > 255) {
        nxli_err(a, "%s: host name of %zu bytes; 1 to 255 are allowed", call, strlen(host));
        return NXL_ERR_INVALID_PARAM;
    }
    client_t *c = calloc(1, sizeof(*c));
    nxl_future_t *f = NULL;
    if (!c || !ex_get(a) ||
        build_frame(a, type, 0, payload, plen, NULL, c->nonce, &c->frame, &c->frame_len) ||
        !(f = nxli_future_new(a, NXLI_F_MD, cb, arg)) ||
        (expect && !(c->expect = strdup(expect)))) {
        if (c) {
            free(c->frame);
            free(c->expect);
        }
        free(c);
        if (res)
            freeaddrinfo(res);
        if (f)
            nxli_future_discard(f);
        nxli_err(a, "%s: out of memory", call);
        return NXL_ERR_UNKNOWN;
    }
    c->a = a;
    c->f = f;
    c->type = type;
    c->addrs = c->cur = res;
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next)
        c->naddrs++;
    if (!res && resolve_start(c, host, port) != 0) {
        free(c->frame);
        free(c->expect);
        free(c);
        nxli_future_discard(f);
        nxli_err(a, "%s: cannot start resolving '%s': %s", call, host, strerror(errno));
        return NXL_ERR_BACKEND;
    }
    snprintf(c->where, sizeof(c->where), "%s:%u", host, port);
    snprintf(c->host, sizeof(c->host), "%s", host);
    c->port = port;
    f->owner = c;
    f->on_cancel = client_cancel;
    /* for a deadline's sentence (nxl_future_set_deadline); NULL: a plainer one */
    f->dl_what = nxli_sprintf(strchr(host, ':') ? "%s (%s) %s [%s]:%u" : "%s (%s) %s %s:%u",
                              type == T_FETCH_MD ? "a metadata fetch" : "a metadata send", call,
                              type == T_FETCH_MD ? "from" : "to", host, port);
    LIST_INSERT_HEAD(&a->ex->clients, c, link);
    if (!c->rq)
        connect_next(c);
    nxli_future_give(f, out);
    return NXL_SUCCESS;
}

nxl_status_t nxl_md_send(nxl_agent_t *a, const char *host, uint16_t port, nxl_done_cb cb,
                         void *arg, nxl_future_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_send(a, host, port, cb, arg, out);
    void *blob;
    size_t len;
    nxl_status_t st = nxl_md_local(a, &blob, &len);
    if (st != NXL_SUCCESS)
        return st;
    st = request(a, "nxl_md_send", T_SEND_MD, host, port, blob, len, NULL, cb, arg, out);
    free(blob);
    return st;
}

nxl_status_t nxl_md_fetch(nxl_agent_t *a, const char *remote, const char *host, uint16_t port,
                          nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_fetch(a, remote, host, port, cb, arg, out);
    return request(a, "nxl_md_fetch", T_FETCH_MD, host, port, NULL, 0, remote, cb, arg, out);
}

nxl_status_t nxl_md_send_invalidate(nxl_agent_t *a, const char *host, uint16_t port,
                                    nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_send_invalidate(a, host, port, cb, arg, out);
    return request(a, "nxl_md_send_invalidate", T_INVALIDATE, host, port, a->name,
                   strlen(a->name), NULL, cb, arg, out);
}

void nxli_exchange_cleanup(nxl_agent_t *a)
{
    if (!a->ex)
        return;
    while (!LIST_EMPTY(&a->ex->clients))
        client_free(LIST_FIRST(&a->ex->clients));
    while (!LIST_EMPTY(&a->ex->conns))
        srv_close(LIST_FIRST(&a->ex->conns));
    nxlt_io_free(a->ex->lis);
    if (a->ex->lfd >= 0)
        close(a->ex->lfd);
    free(a->ex);
    a->ex = NULL;
}
