/* SPDX-License-Identifier: BSD-3-Clause */
/* HTTP on the reactor: libcurl's multi-socket interface with its sockets
 * and its timer as watches and a timer of the agent's loop (curl's
 * docs/examples/multi-event.c is the model). Shared by etcd discovery (etcd.c) and the OBJ transport, and
 * offered to every transport in include/nxl/transport.h.
 *
 * curl tells us which sockets to watch (sock_cb) and when to call it back
 * (timer_cb); the loop tells curl what happened (on_sock, on_timer); after
 * each action the finished transfers are collected and handed to the
 * owner's done function, outside every curl callback, so that it may add
 * and remove handles freely. */
#include "internal.h"

#ifdef NXL_HAVE_CURL

#include <curl/curl.h>

struct nxlt_http {
    nxl_agent_t *agent;
    CURLM *multi;
    nxlt_timer_t *timer;
    nxlt_http_done_fn done;
    void *arg;
    LIST_HEAD(, hsock) socks;
};

typedef struct hsock {
    nxlt_io_t *io;
    curl_socket_t s;
    LIST_ENTRY(hsock) link;
} hsock_t;

static void collect(nxlt_http_t *h)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(h->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        CURL *easy = m->easy_handle;
        CURLcode rc = m->data.result;
        void *priv = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&priv);
        curl_multi_remove_handle(h->multi, easy);
        h->done(easy, (int)rc, priv, h->arg);
    }
}

static void on_sock(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    nxlt_http_t *h = arg;
    int running, flags = (ready & NXLT_IO_READ ? CURL_CSELECT_IN : 0) |
                         (ready & NXLT_IO_WRITE ? CURL_CSELECT_OUT : 0);
    curl_multi_socket_action(h->multi, fd, flags, &running);
    collect(h);
}

static void on_timer(nxlt_timer_t *t, void *arg)
{
    nxlt_http_t *h = arg;
    int running;
    curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    collect(h);
}

static int sock_cb(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    nxlt_http_t *h = userp;
    hsock_t *hs = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (hs) {
            LIST_REMOVE(hs, link);
            nxlt_io_free(hs->io);
            free(hs);
            curl_multi_assign(h->multi, s, NULL);
        }
        return 0;
    }
    unsigned ev = (what & CURL_POLL_IN ? NXLT_IO_READ : 0) |
                  (what & CURL_POLL_OUT ? NXLT_IO_WRITE : 0);
    if (!hs) {
        hs = calloc(1, sizeof(*hs));
        if (!hs)
            return -1;
        hs->s = s;
        LIST_INSERT_HEAD(&h->socks, hs, link);
        curl_multi_assign(h->multi, s, hs);
    }
    if (!hs->io && !(hs->io = nxli_io_new(h->agent, s, on_sock, h)))
        return -1;
    return nxlt_io_start(hs->io, ev);
}

static int timer_cb(CURLM *m, long ms, void *userp)
{
    nxlt_http_t *h = userp;
    if (ms < 0)
        nxlt_timer_stop(h->timer);
    else
        nxlt_timer_start(h->timer, (uint64_t)ms * 1000);
    return 0;
}

nxlt_http_t *nxli_http_new(nxl_agent_t *a, nxlt_http_done_fn done, void *arg)
{
    static bool global;
    if (!global) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT))
            return NULL;
        global = true;
    }
    nxlt_http_t *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->agent = a;
    h->done = done;
    h->arg = arg;
    LIST_INIT(&h->socks);
    h->multi = curl_multi_init();
    h->timer = nxli_timer_new(a, on_timer, h);
    if (!h->multi || !h->timer) {
        nxlt_http_free(h);
        return NULL;
    }
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, sock_cb);
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
    return h;
}

void *nxlt_http_multi(nxlt_http_t *h)
{
    return h->multi;
}

int nxlt_http_add(nxlt_http_t *h, void *easy)
{
    return (int)curl_multi_add_handle(h->multi, easy);
}

void nxlt_http_remove(nxlt_http_t *h, void *easy)
{
    curl_multi_remove_handle(h->multi, easy);
}

void nxlt_http_free(nxlt_http_t *h)
{
    if (!h)
        return;
    /* closes the cached connections: curl removes their sockets through
     * sock_cb, which frees their events */
    if (h->multi)
        curl_multi_cleanup(h->multi);
    while (!LIST_EMPTY(&h->socks)) {
        hsock_t *hs = LIST_FIRST(&h->socks);
        LIST_REMOVE(hs, link);
        nxlt_io_free(hs->io);
        free(hs);
    }
    nxlt_timer_free(h->timer);
    free(h);
}

#else /* !NXL_HAVE_CURL */

nxlt_http_t *nxli_http_new(nxl_agent_t *a, nxlt_http_done_fn done, void *arg)
{
    return NULL;
}

void *nxlt_http_multi(nxlt_http_t *h)
{
    return NULL;
}

int nxlt_http_add(nxlt_http_t *h, void *easy)
{
    return -1;
}

void nxlt_http_remove(nxlt_http_t *h, void *easy) {}

void nxlt_http_free(nxlt_http_t *h) {}

#endif

nxlt_http_t *nxlt_http_open(nxlt_ctx_t *ctx, nxlt_http_done_fn done, void *arg)
{
    return nxli_http_new(nxlt_agent(ctx), done, arg);
}

/* transport ABI 2's: no caller is left (modules built for it are refused),
 * and a base is not what the loop is made of any more */
nxlt_http_t *nxlt_http_new(struct event_base *base, nxlt_http_done_fn done, void *arg)
{
    return NULL;
}
