/* SPDX-License-Identifier: BSD-3-Clause */
/* Metadata discovery through etcd's v3 HTTP/JSON API, on the reactor:
 * libcurl's multi-socket interface driven by libevent, through the HTTP
 * glue the transports share (http.c, nxlt_http_* in nxl/transport.h).
 *
 * Keys: <prefix><agent>/metadata (full), <prefix><agent>/<label>
 * (partial), all attached to one lease per agent, kept alive every TTL/3.
 * A fetch watches the peer's prefix afterwards: PUT of its full metadata,
 * or of a partial one under a label fetched before, reloads it, DELETE (unpublish, lease expiry) invalidates it and fails
 * the transfers in flight to it. Broken watches and failed keep-alives are
 * retried with backoff; the rest of the agent goes on. */
#include "internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#ifdef NXL_HAVE_ETCD

#include <curl/curl.h>

#define RETRY_MIN_MS 200
#define RETRY_MAX_MS 5000

typedef struct ereq ereq_t;
typedef void (*ereq_done_fn)(ereq_t *r, const char *err, const nxli_etcd_resp_t *resp);
typedef void (*ereq_line_fn)(ereq_t *r, const nxli_etcd_resp_t *msg);

struct ereq {
    nxl_agent_t *a;
    CURL *easy;
    char *url, *body;
    struct curl_slist *hdr;
    char *buf;              /* response, or the unparsed rest of a stream */
    size_t len, cap;
    nxli_etcd_kind_t kind;  /* what the answer is */
    size_t scanned;         /* a stream: how much of buf holds no newline */
    ereq_done_fn done;
    ereq_line_fn line;      /* streaming (watch): one call per JSON line */
    void *arg;
    bool added;             /* in the multi handle, not reported yet */
    LIST_ENTRY(ereq) link;
};

typedef struct ewatch {
    nxl_agent_t *a;
    char *peer;             /* the peer watched */
    char *key;              /* prefix watched */
    char *mdkey;            /* the peer's full metadata key */
    int64_t rev;            /* next revision wanted */
    char *loaded[4];        /* keys whose metadata we loaded: their deletion means the peer left */
    char *value[4];         /* what each held when loaded: the same value again is no news */
    char *labels[4];        /* partial keys the application fetched: a new value of one
                               reloads the peer, or brings it back, as the full one's does */
    /* with a secret: when the newest value accepted from each key was
     * signed; an older one is refused (kept when the key is deleted) */
    struct enewest { struct enewest *next; uint64_t us; char key[]; } *newest;
    ereq_t *req;
    nxlt_timer_t *retry;
    unsigned backoff_ms;
    /* a fetch waiting for the key to appear */
    LIST_HEAD(, efetch) waiters;
    LIST_ENTRY(ewatch) link;
} ewatch_t;

typedef struct efetch {
    nxl_agent_t *a;
    nxl_future_t *f;
    char *peer, *key;
    ewatch_t *w;
    nxlt_timer_t *timeout;
    LIST_ENTRY(efetch) link;   /* in the watch's waiters */
} efetch_t;

typedef struct epub {
    char *key;
    char *val;                 /* base64 */
    LIST_ENTRY(epub) link;
} epub_t;

typedef struct etcd {
    nxl_agent_t *a;
    nxlt_http_t *http;
    char **ep;
    int nep, cur;
    char *prefix;
    unsigned ttl;
    char lease[32];            /* "" until granted */
    bool granting;
    nxlt_timer_t *ka;          /* keep-alive timer */
    unsigned ka_backoff_ms;
    LIST_HEAD(, ereq) reqs;
    LIST_HEAD(, ewatch) watches;
    LIST_HEAD(, epub) pubs;    /* what we published, to put again on a new lease */
    /* publishes waiting for the lease */
    struct pending_pub { nxl_future_t *f; char *key, *val; struct pending_pub *next; } *waiting;
} etcd_t;

/* ------------------------------------------------------------ curl glue */

static void ereq_free(ereq_t *r)
{
    LIST_REMOVE(r, link);
    etcd_t *e = r->a->etcd;
    if (r->added)
        nxlt_http_remove(e->http, r->easy);
    curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->hdr);
    free(r->url);
    free(r->body);
    free(r->buf);
    free(r);
}

static void one_line(void *arg, const char *l, size_t n)
{
    ereq_t *r = arg;
    nxli_etcd_resp_t m;
    char why[400];
    if (nxli_etcd_parse(NXLI_ETCD_WATCH, l, n, &m, why, sizeof(why)) != 0) {
        nxli_log(r->a, NXL_LOG_DEBUG, "etcd: a watch message on %s ignored: %s", r->url, why);
        return;
    }
    r->line(r, &m);
    nxli_etcd_resp_free(&m);
}

static void feed_lines(ereq_t *r)
{
    r->len = nxli_etcd_lines(r->buf, r->len, &r->scanned, one_line, r);
}

static size_t on_write(char *p, size_t sz, size_t nm, void *arg)
{
    ereq_t *r = arg;
    size_t n = sz * nm;
    /* an answer (a watch message) holds at most a few values, each at most
     * a metadata frame in base64: more is not etcd's (curl gives up) */
    if (r->len + n > r->a->max_frame / 3 * 8 + (1 << 20)) {
        nxli_log(r->a, NXL_LOG_WARN, "etcd at %s: an answer of more than %zu bytes; dropped",
                 r->url, r->a->max_frame / 3 * 8 + (1 << 20));
        return 0;
    }
    if (nxl_growbuf_append(&r->buf, &r->len, &r->cap, p, n) < 0)
        return 0;
    if (r->line)
        feed_lines(r);
    return n;
}

/* A request ended (nxlt_http_done_fn): its handle has left the multi handle. */
static void req_done(void *easy, int result, void *priv, void *arg)
{
    etcd_t *e = arg;
    ereq_t *r = priv;
    r->added = false;
    CURLcode rc = (CURLcode)result;
    long http = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &http);
    char err[512] = "", why[400];
    nxli_etcd_resp_t resp, *j = NULL;
    if (rc != CURLE_OK) {
        snprintf(err, sizeof(err), "etcd at %s: %s (is etcd running?)", r->url,
                 curl_easy_strerror(rc));
        e->cur = (e->cur + 1) % e->nep; /* try the next endpoint next time */
    } else if (http != 200) {
        snprintf(err, sizeof(err), "etcd at %s answered HTTP %ld: %.200s", r->url, http,
                 r->buf ? r->buf : "");
    } else if (!r->line) {
        if (nxli_etcd_parse(r->kind, r->buf ? r->buf : "", r->len, &resp, why, sizeof(why)) == 0)
            j = &resp;
        else
            snprintf(err, sizeof(err), "etcd at %s: %s", r->url, why);
    }
    ereq_done_fn done = r->done;
    r->done = NULL;
    if (done)
        done(r, err[0] ? err : NULL, j);
    if (j)
        nxli_etcd_resp_free(j);
    ereq_free(r);
}

/* POST a JSON body to /v3/<path>; done runs exactly once (not inline). */
static ereq_t *post(etcd_t *e, const char *path, nxli_etcd_kind_t kind, cJSON *body,
                    ereq_done_fn done, ereq_line_fn line, void *arg, long timeout_ms)
{
    ereq_t *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->a = e->a;
    r->kind = kind;
    r->done = done;
    r->line = line;
    r->arg = arg;
    r->url = nxli_sprintf("%s/v3/%s", e->ep[e->cur], path);
    r->body = cJSON_PrintUnformatted(body);
    r->easy = curl_easy_init();
    r->hdr = curl_slist_append(NULL, "Content-Type: application/json");
    if (!r->url || !r->body || !r->easy || !r->hdr) {
        if (r->easy)
            curl_easy_cleanup(r->easy);
        curl_slist_free_all(r->hdr);
        free(r->url);
        free(r->body);
        free(r);
        return NULL;
    }
    curl_easy_setopt(r->easy, CURLOPT_URL, r->url);
    curl_easy_setopt(r->easy, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, r->hdr);
    curl_easy_setopt(r->easy, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(r->easy, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(r->easy, CURLOPT_PRIVATE, r);
    curl_easy_setopt(r->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(r->easy, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
    /* a watch streams for ever: TCP keepalive notices an etcd that vanished
     * without closing the connection (host down, link cut) */
    curl_easy_setopt(r->easy, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(r->easy, CURLOPT_TCP_KEEPIDLE, 5L);
    curl_easy_setopt(r->easy, CURLOPT_TCP_KEEPINTVL, 2L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(r->easy, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    if (timeout_ms > 0)
        curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, timeout_ms);
    LIST_INSERT_HEAD(&e->reqs, r, link);
    if (nxlt_http_add(e->http, r->easy) != 0) {
        r->done = NULL;
        ereq_free(r);
        return NULL;
    }
    r->added = true;
    return r;
}

static char *b64s(const char *s)
{
    return nxli_b64_encode(s, strlen(s));
}

/* Adds "key" and "range_end" (the key just past every key starting with
 * prefix), base64 as etcd wants them, to o. */
static bool add_prefix_range(cJSON *o, const char *prefix)
{
    size_t n = strlen(prefix);
    char *end = strdup(prefix);
    if (end && n)
        end[n - 1]++;
    char *k = b64s(prefix), *re = end ? b64s(end) : NULL;
    bool ok = o && k && re && cJSON_AddStringToObject(o, "key", k) &&
              cJSON_AddStringToObject(o, "range_end", re);
    free(end);
    free(k);
    free(re);
    return ok;
}

/* ------------------------------------------------------------ setup */

static nxl_status_t etcd_get(nxl_agent_t *a, const char *call, etcd_t **out)
{
    if (a->etcd) {
        *out = a->etcd;
        return NXL_SUCCESS;
    }
    const char *eps = a->etcd_endpoints;
    if (!eps || !*eps) {
        nxli_err(a, "%s: no etcd endpoints: set etcd_endpoints in the agent's config or "
                    "NXL_ETCD_ENDPOINTS (e.g. http://127.0.0.1:2379)", call);
        return NXL_ERR_NOT_SUPPORTED;
    }
    etcd_t *e = calloc(1, sizeof(*e));
    if (!e)
        return NXL_ERR_UNKNOWN;
    e->a = a;
    e->ttl = a->etcd_ttl_s;
    e->prefix = strdup(a->etcd_prefix);
    LIST_INIT(&e->reqs);
    LIST_INIT(&e->watches);
    LIST_INIT(&e->pubs);
    char *list = strdup(eps), *save, *tok;
    for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        if (!*tok)
            continue;
        char **v = realloc(e->ep, (size_t)(e->nep + 1) * sizeof(*v));
        if (!v)
            break;
        e->ep = v;
        size_t n = strlen(tok);
        while (n && tok[n - 1] == '/')
            tok[--n] = 0;
        e->ep[e->nep++] = strstr(tok, "://") ? strdup(tok) : nxli_sprintf("http://%s", tok);
    }
    free(list);
    e->http = nxli_http_new(a, req_done, e);
    if (!e->nep || !e->http || !e->prefix) {
        nxli_err(a, "%s: could not set up etcd client for endpoints '%s'", call, eps);
        a->etcd = e;
        nxli_etcd_cleanup(a, false);
        return NXL_ERR_INVALID_PARAM;
    }
    a->etcd = e;
    *out = e;
    return NXL_SUCCESS;
}

/* ------------------------------------------------------------ lease */

static void put_key(etcd_t *e, nxl_future_t *f, const char *key, const char *val);
static void grant(etcd_t *e);

static unsigned backoff(unsigned *b)
{
    *b = *b ? (*b * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : *b * 2) : RETRY_MIN_MS;
    return *b;
}

static void ka_arm(etcd_t *e, unsigned ms)
{
    nxlt_timer_start(e->ka, (uint64_t)ms * 1000);
}

static void republish(etcd_t *e)
{
    epub_t *p;
    LIST_FOREACH(p, &e->pubs, link)
    put_key(e, NULL, p->key, p->val);
}

static void ka_done(ereq_t *r, const char *err, const nxli_etcd_resp_t *j)
{
    etcd_t *e = r->a->etcd;
    if (err) {
        nxli_log(e->a, NXL_LOG_WARN, "lease keep-alive failed: %s; retrying", err);
        ka_arm(e, backoff(&e->ka_backoff_ms));
        return;
    }
    if (j->ttl <= 0) {
        /* the lease expired (etcd was away longer than the TTL): new lease, publish again */
        nxli_log(e->a, NXL_LOG_WARN, "etcd lease %s expired; granting a new one and publishing "
                                     "again", e->lease);
        e->lease[0] = 0;
        grant(e);
        return;
    }
    e->ka_backoff_ms = 0;
    ka_arm(e, e->ttl * 1000 / 3);
}

static void on_ka(nxlt_timer_t *t, void *arg)
{
    etcd_t *e = arg;
    if (!e->lease[0]) {
        /* no lease (a grant failed): grant again while there is something to publish */
        if (!LIST_EMPTY(&e->pubs))
            grant(e);
        return;
    }
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "ID", e->lease);
    if (!post(e, "lease/keepalive", NXLI_ETCD_KEEPALIVE, b, ka_done, NULL, NULL, 3000))
        ka_arm(e, backoff(&e->ka_backoff_ms));
    cJSON_Delete(b);
}

static void grant_done(ereq_t *r, const char *err, const nxli_etcd_resp_t *j)
{
    etcd_t *e = r->a->etcd;
    e->granting = false;
    if (err) {
        /* fail the publishes waiting for it */
        while (e->waiting) {
            struct pending_pub *p = e->waiting;
            e->waiting = p->next;
            if (p->f)
                nxli_future_complete(p->f, NXL_ERR_BACKEND, err);
            free(p->key);
            free(p->val);
            free(p);
        }
        if (!LIST_EMPTY(&e->pubs)) {
            nxli_log(e->a, NXL_LOG_WARN, "lease grant failed: %s; retrying", err);
            ka_arm(e, backoff(&e->ka_backoff_ms));
        }
        return;
    }
    snprintf(e->lease, sizeof(e->lease), "%s", j->lease);
    nxli_log(e->a, NXL_LOG_INFO, "etcd lease %s granted (TTL %u s)", e->lease, e->ttl);
    e->ka_backoff_ms = 0;
    ka_arm(e, e->ttl * 1000 / 3);
    republish(e);
    while (e->waiting) {
        struct pending_pub *p = e->waiting;
        e->waiting = p->next;
        put_key(e, p->f, p->key, p->val);
        free(p->key);
        free(p->val);
        free(p);
    }
}

static void grant(etcd_t *e)
{
    if (e->granting)
        return;
    if (!e->ka)
        e->ka = nxli_timer_new(e->a, on_ka, e);
    /* the keep-alive timer also retries a failed grant (on_ka) */
    cJSON *b = cJSON_CreateObject();
    cJSON_AddNumberToObject(b, "TTL", e->ttl);
    e->granting = post(e, "lease/grant", NXLI_ETCD_GRANT, b, grant_done, NULL, NULL, 5000) != NULL;
    cJSON_Delete(b);
}

/* ------------------------------------------------------------ publish */

static void put_done(ereq_t *r, const char *err, const nxli_etcd_resp_t *j)
{
    nxl_future_t *f = r->arg;
    if (f)
        nxli_future_complete(f, err ? NXL_ERR_BACKEND : NXL_SUCCESS, err);
    else if (err)
        nxli_log(r->a, NXL_LOG_WARN, "publishing again failed: %s", err);
}

static void put_key(etcd_t *e, nxl_future_t *f, const char *key, const char *val)
{
    cJSON *b = cJSON_CreateObject();
    char *k = b64s(key);
    cJSON_AddStringToObject(b, "key", k);
    cJSON_AddStringToObject(b, "value", val);
    cJSON_AddStringToObject(b, "lease", e->lease);
    if (!post(e, "kv/put", NXLI_ETCD_PUT, b, put_done, NULL, f, 5000) && f)
        nxli_future_complete(f, NXL_ERR_UNKNOWN, "etcd: out of memory");
    free(k);
    cJSON_Delete(b);
}

static void remember(etcd_t *e, const char *key, const char *val)
{
    epub_t *p;
    LIST_FOREACH(p, &e->pubs, link)
    if (!strcmp(p->key, key)) {
        free(p->val);
        p->val = strdup(val);
        return;
    }
    p = calloc(1, sizeof(*p));
    if (!p)
        return;
    p->key = strdup(key);
    p->val = strdup(val);
    LIST_INSERT_HEAD(&e->pubs, p, link);
}

static void forget_pubs(etcd_t *e)
{
    while (!LIST_EMPTY(&e->pubs)) {
        epub_t *p = LIST_FIRST(&e->pubs);
        LIST_REMOVE(p, link);
        free(p->key);
        free(p->val);
        free(p);
    }
}

static nxl_status_t publish(nxl_agent_t *a, const char *call, const char *label, void *blob,
                            size_t len, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    etcd_t *e;
    nxl_status_t st = etcd_get(a, call, &e);
    if (st != NXL_SUCCESS) {
        free(blob);
        return st;
    }
    char *key = nxli_sprintf("%s%s/%s", e->prefix, a->name, label);
    /* with a secret, signed: the key (agent name, label), when, the blob */
    size_t sl = 0;
    void *sealed = key ? nxli_etcd_seal(a, key, blob, len, &sl) : NULL;
    char *val = sealed ? nxli_b64_encode(sealed, sl) : NULL;
    free(sealed);
    free(blob);
    nxl_future_t *f = key && val ? nxli_future_new(a, NXLI_F_MD, cb, arg) : NULL;
    if (!f) {
        free(key);
        free(val);
        nxli_err(a, "%s: out of memory", call);
        return NXL_ERR_UNKNOWN;
    }
    remember(e, key, val);
    if (e->lease[0]) {
        put_key(e, f, key, val);
        free(key);
        free(val);
    } else {
        struct pending_pub *p = calloc(1, sizeof(*p));
        p->f = f;
        p->key = key;
        p->val = val;
        p->next = e->waiting;
        e->waiting = p;
        grant(e);
    }
    nxli_future_give(f, out);
    return NXL_SUCCESS;
}

nxl_status_t nxl_md_publish(nxl_agent_t *a, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_publish(a, cb, arg, out);
    if (out)
        *out = NULL;
    void *blob;
    size_t len;
    nxl_status_t st = nxl_md_local(a, &blob, &len);
    if (st != NXL_SUCCESS)
        return st;
    return publish(a, "nxl_md_publish", "metadata", blob, len, cb, arg, out);
}

nxl_status_t nxl_md_publish_partial(nxl_agent_t *a, const char *label, nxl_mem_t type,
                                    const nxl_desc_t *descs, size_t n, nxl_done_cb cb, void *arg,
                                    nxl_future_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_publish_partial(a, label, type, descs, n, cb, arg, out);
    if (out)
        *out = NULL;
    if (!label || !*label || strchr(label, '/') || !strcmp(label, "metadata")) {
        nxli_err(a, "nxl_md_publish_partial: a label is a non-empty name without '/', other "
                    "than \"metadata\" (the full metadata's key)");
        return NXL_ERR_INVALID_PARAM;
    }
    void *blob;
    size_t len;
    /* its regions carry the label, so that a peer re-binds to them by it
     * after this agent restarts (nxl_md_label) */
    nxl_status_t st = nxli_md_label(a, "nxl_md_publish_partial", label, type, descs, n);
    if (st == NXL_SUCCESS)
        st = nxl_md_local_partial(a, type, descs, n, &blob, &len);
    if (st != NXL_SUCCESS)
        return st;
    return publish(a, "nxl_md_publish_partial", label, blob, len, cb, arg, out);
}

static void unpub_done(ereq_t *r, const char *err, const nxli_etcd_resp_t *j)
{
    nxl_future_t *f = r->arg;
    if (f)
        nxli_future_complete(f, err ? NXL_ERR_BACKEND : NXL_SUCCESS, err);
}

nxl_status_t nxl_md_unpublish(nxl_agent_t *a, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_unpublish(a, cb, arg, out);
    if (out)
        *out = NULL;
    etcd_t *e;
    nxl_status_t st = etcd_get(a, "nxl_md_unpublish", &e);
    if (st != NXL_SUCCESS)
        return st;
    char *pre = nxli_sprintf("%s%s/", e->prefix, a->name);
    cJSON *b = cJSON_CreateObject();
    nxl_future_t *f =
        pre && add_prefix_range(b, pre) ? nxli_future_new(a, NXLI_F_MD, cb, arg) : NULL;
    if (f) {
        if (!post(e, "kv/deleterange", NXLI_ETCD_PUT, b, unpub_done, NULL, f, 5000))
            nxli_future_complete(f, NXL_ERR_UNKNOWN, "etcd: out of memory");
        /* stop keeping the lease: revoke it */
        if (e->lease[0]) {
            cJSON *rb = cJSON_CreateObject();
            cJSON_AddStringToObject(rb, "ID", e->lease);
            post(e, "lease/revoke", NXLI_ETCD_PUT, rb, NULL, NULL, NULL, 3000);
            cJSON_Delete(rb);
            e->lease[0] = 0;
            if (e->ka)
                nxlt_timer_stop(e->ka);
        }
        forget_pubs(e);
    }
    cJSON_Delete(b);
    free(pre);
    if (!f) {
        nxli_err(a, "nxl_md_unpublish: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    nxli_future_give(f, out);
    return NXL_SUCCESS;
}

/* ------------------------------------------------------------ watches */

static void watch_start(ewatch_t *w);

/* unlinks a fetch and frees it with its timer */
static void fetch_free(efetch_t *q)
{
    LIST_REMOVE(q, link);
    nxlt_timer_free(q->timeout);
    free(q->peer);
    free(q->key);
    free(q);
}

static void fetch_finish(efetch_t *q, nxl_status_t st, const char *why)
{
    nxl_future_t *f = q->f;
    fetch_free(q);
    f->owner = NULL;
    nxli_future_complete(f, st, why);
}

static uint64_t *newest_us(ewatch_t *w, const char *key)
{
    struct enewest *n;
    for (n = w->newest; n; n = n->next)
        if (!strcmp(n->key, key))
            return &n->us;
    size_t kl = strlen(key) + 1;
    if (!(n = calloc(1, sizeof(*n) + kl)))
        return NULL;
    memcpy(n->key, key, kl);
    n->next = w->newest;
    w->newest = n;
    return &n->us;
}

/* loads a value seen for key; completes the fetches waiting for it */
static void seen_value(ewatch_t *w, const char *key, const char *b64)
{
    nxl_agent_t *a = w->a;
    size_t len = 0;
    char name[NXLI_NAME_MAX] = "";
    /* the value loaded before, put again (the peer re-publishing after a
     * lease renewal, say): reloading would replace the peer and void the
     * transfers made to it, for nothing */
    int slot = -1;
    for (int i = 0; i < 4 && w->loaded[i] && slot < 0; i++)
        if (!strcmp(w->loaded[i], key))
            slot = i;
    bool same = slot >= 0 && w->value[slot] && !strcmp(w->value[slot], b64) &&
                nxl_md_check(a, w->peer) == NXL_SUCCESS;
    nxl_status_t st = NXL_SUCCESS;
    if (same) {
        snprintf(name, sizeof(name), "%s", w->peer);
    } else {
        /* decoded and, with a secret, verified before a byte reaches cJSON
         * or a transport */
        char why[400];
        void *blob;
        uint64_t none = 0, *last = newest_us(w, key);
        st = nxli_etcd_open(a, key, b64, last ? last : &none, &blob, &len, why, sizeof(why));
        if (st == NXL_ERR_NOT_ALLOWED) {
            a->st.md_auth_refused++;
            nxli_log(a, NXL_LOG_WARN, "etcd: the value at %s was refused: %s", key, why);
        }
        if (st != NXL_SUCCESS) {
            nxli_err(a, "etcd: the value at %s was refused: %s", key, why);
        } else if ((st = nxl_md_load(a, blob, len, name, sizeof(name))) != NXL_SUCCESS) {
            /* said as the fetch's, not as a call of nxl_md_load the caller made */
            char cause[NXLI_ERR_MAX];
            memcpy(cause, a->err, sizeof(cause));
            nxli_err(a, "etcd: the value at %s was not loaded: %s", key, cause);
        }
        free(blob);
    }
    if (st == NXL_SUCCESS && strcmp(name, w->peer)) {
        nxl_md_invalidate(a, name);
        nxli_err(a, "etcd: key %s holds metadata of agent '%s', not '%s'", key, name, w->peer);
        st = NXL_ERR_MISMATCH;
    }
    efetch_t *q, *next;
    for (q = LIST_FIRST(&w->waiters); q; q = next) {
        next = LIST_NEXT(q, link);
        if (!strcmp(q->key, key)) {
            if (st == NXL_SUCCESS) {
                free(q->f->peer);
                q->f->peer = strdup(name);
                nxli_peer_origin(a, name, NULL, 0); /* the watch finds it again */
            }
            fetch_finish(q, st, st == NXL_SUCCESS ? NULL : a->err);
        }
    }
    if (st == NXL_SUCCESS && !same) {
        nxli_log(a, NXL_LOG_INFO, "etcd: metadata of agent '%s' loaded from %s", name, key);
        int have = -1;
        for (int i = 0; i < 4 && w->loaded[i] && have < 0; i++)
            if (!strcmp(w->loaded[i], key))
                have = i;
        for (int i = 0; i < 4 && have < 0; i++)
            if (!w->loaded[i] && (w->loaded[i] = strdup(key)))
                have = i;
        if (have >= 0) {
            free(w->value[have]);
            w->value[have] = strdup(b64);
        }
    }
}

static bool was_loaded(const ewatch_t *w, const char *key)
{
    for (int i = 0; i < 4 && w->loaded[i]; i++)
        if (!strcmp(w->loaded[i], key))
            return true;
    return false;
}

static void forget_loaded(ewatch_t *w)
{
    for (int i = 0; i < 4; i++) {
        free(w->loaded[i]);
        free(w->value[i]);
        w->loaded[i] = NULL;
        w->value[i] = NULL;
    }
}

static bool fetched(const ewatch_t *w, const char *key)
{
    for (int i = 0; i < 4 && w->labels[i]; i++)
        if (!strcmp(w->labels[i], key))
            return true;
    return false;
}

static void watch_line(ereq_t *r, const nxli_etcd_resp_t *m)
{
    ewatch_t *w = r->arg;
    if (m->canceled) {
        /* compacted past our revision: read afresh */
        w->rev = 0;
        return;
    }
    for (size_t i = 0; i < m->n; i++) {
        const nxli_etcd_kv_t *kv = &m->kv[i];
        if (kv->mod_rev >= w->rev)
            w->rev = kv->mod_rev + 1;
        if (kv->del && was_loaded(w, kv->key)) {
            nxli_log(w->a, NXL_LOG_WARN, "etcd: agent '%s' left (its key %s was deleted or its "
                                         "lease expired); invalidating it", w->peer, kv->key);
            forget_loaded(w);
            nxli_remote_lost(w->a, w->peer, "etcd: the peer's metadata was deleted (it left, or "
                                            "its lease expired); transfers to it are aborted");
        } else if (!kv->del) {
            bool waited = false;
            efetch_t *q;
            LIST_FOREACH(q, &w->waiters, link)
            waited |= !strcmp(q->key, kv->key);
            /* a new full metadata (peer restarted), or partial one under
             * a label fetched before, replaces the old one, or brings
             * back a peer lost (recovery, peer.c) */
            if (kv->value && (waited || ((!strcmp(kv->key, w->mdkey) || fetched(w, kv->key)) &&
                                         (nxl_md_check(w->a, w->peer) == NXL_SUCCESS ||
                                          nxli_peer_awaited(w->a, w->peer)))))
                seen_value(w, kv->key, kv->value);
        }
    }
    if (m->has_header && !w->rev)
        w->rev = m->revision + 1;
}

static void on_retry(nxlt_timer_t *t, void *arg)
{
    watch_start(arg);
}

static void watch_done(ereq_t *r, const char *err, const nxli_etcd_resp_t *j)
{
    ewatch_t *w = r->arg;
    w->req = NULL;
    /* the stream ended (etcd restarted, connection cut): watch again */
    unsigned ms = backoff(&w->backoff_ms);
    nxli_log(w->a, NXL_LOG_INFO, "etcd: watch on %s ended (%s); again in %u ms", w->key,
             err ? err : "stream closed", ms);
    nxlt_timer_start(w->retry, (uint64_t)ms * 1000);
}

static void range_done(ereq_t *r, const char *err, const nxli_etcd_resp_t *j);

static void watch_start(ewatch_t *w)
{
    etcd_t *e = w->a->etcd;
    if (w->rev == 0) {
        /* read the current state first, then watch from the next revision */
        cJSON *b = cJSON_CreateObject();
        ereq_t *r = add_prefix_range(b, w->key) ? post(e, "kv/range", NXLI_ETCD_RANGE, b, range_done, NULL, w, 5000)
                                                : NULL;
        cJSON_Delete(b);
        w->req = r;
        if (!r)
            watch_done(&(ereq_t){.arg = w}, "out of memory", NULL);
        return;
    }
    cJSON *b = cJSON_CreateObject(), *c = cJSON_AddObjectToObject(b, "create_request");
    char rev[24];
    snprintf(rev, sizeof(rev), "%lld", (long long)w->rev);
    w->req = add_prefix_range(c, w->key) && cJSON_AddStringToObject(c, "start_revision", rev)
                 ? post(e, "watch", NXLI_ETCD_WATCH, b, watch_done, watch_line, w, 0)
                 : NULL;
    cJSON_Delete(b);
    if (!w->req)
        watch_done(&(ereq_t){.arg = w}, "out of memory", NULL);
}

static void range_done(ereq_t *r, const char *err, const nxli_etcd_resp_t *j)
{
    ewatch_t *w = r->arg;
    w->req = NULL;
    if (err) {
        /* fetches waiting fail now: etcd is not answering */
        while (!LIST_EMPTY(&w->waiters))
            fetch_finish(LIST_FIRST(&w->waiters), NXL_ERR_BACKEND, err);
        watch_done(r, err, NULL);
        return;
    }
    w->backoff_ms = 0;
    w->rev = j->revision + 1;
    int present = 0;
    for (size_t i = 0; i < j->n; i++) {
        const nxli_etcd_kv_t *kv = &j->kv[i];
        if (!kv->value)
            continue;
        bool waited = false;
        efetch_t *q;
        LIST_FOREACH(q, &w->waiters, link)
        waited |= !strcmp(q->key, kv->key);
        if (waited)
            seen_value(w, kv->key, kv->value);
        present += was_loaded(w, kv->key);
    }
    /* keys we loaded from vanished while the watch was down: the peer left */
    int loaded = 0;
    for (int i = 0; i < 4 && w->loaded[i]; i++)
        loaded++;
    if (loaded && present < loaded && nxl_md_check(w->a, w->peer) == NXL_SUCCESS) {
        forget_loaded(w);
        nxli_remote_lost(w->a, w->peer, "etcd: the peer's metadata is gone (it left, or its "
                                        "lease expired); transfers to it are aborted");
    }
    watch_start(w);
}

static ewatch_t *watch_get(etcd_t *e, const char *peer)
{
    ewatch_t *w;
    LIST_FOREACH(w, &e->watches, link)
    if (!strcmp(w->peer, peer))
        return w;
    w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->a = e->a;
    w->peer = strdup(peer);
    w->key = nxli_sprintf("%s%s/", e->prefix, peer);
    w->mdkey = nxli_sprintf("%s%s/metadata", e->prefix, peer);
    w->retry = nxli_timer_new(e->a, on_retry, w);
    LIST_INIT(&w->waiters);
    LIST_INSERT_HEAD(&e->watches, w, link);
    watch_start(w);
    return w;
}

static void watch_free(ewatch_t *w)
{
    LIST_REMOVE(w, link);
    if (w->req) {
        w->req->done = NULL;
        ereq_free(w->req);
    }
    nxlt_timer_free(w->retry);
    forget_loaded(w);
    for (int i = 0; i < 4; i++)
        free(w->labels[i]);
    while (w->newest) {
        struct enewest *n = w->newest;
        w->newest = n->next;
        free(n);
    }
    free(w->peer);
    free(w->key);
    free(w->mdkey);
    free(w);
}

static void fetch_timeout(nxlt_timer_t *t, void *arg)
{
    efetch_t *q = arg;
    char why[600];
    snprintf(why, sizeof(why), "nxl_md_fetch_etcd: no metadata of agent '%s' appeared at %s "
             "within the timeout (is the agent up and publishing to the same etcd and prefix?)",
             q->peer, q->key);
    fetch_finish(q, NXL_ERR_NOT_FOUND, why);
}

static void fetch_cancel(nxl_future_t *f)
{
    efetch_t *q = f->owner;
    if (q) {
        fetch_free(q);
        f->owner = NULL;
    }
}

nxl_status_t nxl_md_fetch_etcd(nxl_agent_t *a, const char *remote, const char *label,
                               int timeout_ms, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_fetch_etcd(a, remote, label, timeout_ms, cb, arg, out);
    if (out)
        *out = NULL;
    if (!remote || !*remote || strchr(remote, '/') || (label && (!*label || strchr(label, '/')))) {
        nxli_err(a, "nxl_md_fetch_etcd: needs an agent name (and a label) without '/'");
        return NXL_ERR_INVALID_PARAM;
    }
    if (!strcmp(remote, a->name)) {
        nxli_err(a, "nxl_md_fetch_etcd: '%s' is this agent itself", remote);
        return NXL_ERR_INVALID_PARAM;
    }
    etcd_t *e;
    nxl_status_t st = etcd_get(a, "nxl_md_fetch_etcd", &e);
    if (st != NXL_SUCCESS)
        return st;
    ewatch_t *w = watch_get(e, remote);
    efetch_t *q = w ? calloc(1, sizeof(*q)) : NULL;
    nxl_future_t *f = q ? nxli_future_new(a, NXLI_F_MD, cb, arg) : NULL;
    if (!f) {
        free(q);
        nxli_err(a, "nxl_md_fetch_etcd: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    q->a = a;
    q->f = f;
    q->peer = strdup(remote);
    q->key = nxli_sprintf("%s%s/%s", e->prefix, remote, label ? label : "metadata");
    q->timeout = nxli_timer_new(a, fetch_timeout, q);
    for (int i = 0; label && q->key && i < 4 && !fetched(w, q->key); i++)
        if (!w->labels[i])
            w->labels[i] = strdup(q->key);
    f->owner = q;
    f->on_cancel = fetch_cancel;
    f->dl_what = nxli_sprintf("a metadata fetch (nxl_md_fetch_etcd) of agent '%s' from etcd "
                              "key %s", remote, q->key ? q->key : "?");
    q->w = w;
    LIST_INSERT_HEAD(&w->waiters, q, link);
    nxlt_timer_start(q->timeout, (uint64_t)timeout_ms * 1000);
    /* a watch already running: read the key now */
    if (w->req && w->rev) {
        w->req->done = NULL;
        ereq_free(w->req);
        w->req = NULL;
        nxlt_timer_stop(w->retry);
        w->rev = 0;
        watch_start(w);
    }
    nxli_future_give(f, out);
    return NXL_SUCCESS;
}

/* ------------------------------------------------------------ teardown */

void nxli_etcd_cleanup(nxl_agent_t *a, bool unpublish)
{
    etcd_t *e = a->etcd;
    if (!e)
        return;
    if (unpublish && e->lease[0] && e->nep) {
        /* clean destroy: delete our keys and revoke the lease, briefly blocking */
        char *pre = nxli_sprintf("%s%s/", e->prefix, a->name);
        cJSON *range = cJSON_CreateObject();
        char *body1 = pre && add_prefix_range(range, pre) ? cJSON_PrintUnformatted(range) : NULL;
        char *body2 = nxli_sprintf("{\"ID\":\"%s\"}", e->lease);
        cJSON_Delete(range);
        const char *paths[2] = {"kv/deleterange", "lease/revoke"};
        char *bodies[2] = {body1, body2};
        for (int i = 0; i < 2; i++) {
            CURL *c = bodies[i] ? curl_easy_init() : NULL;
            if (!c)
                continue;
            char *url = nxli_sprintf("%s/v3/%s", e->ep[e->cur], paths[i]);
            FILE *null = fopen("/dev/null", "w");
            curl_easy_setopt(c, CURLOPT_URL, url);
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, bodies[i]);
            curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 1000L);
            curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
            if (null)
                curl_easy_setopt(c, CURLOPT_WRITEDATA, null);
            curl_easy_perform(c);
            curl_easy_cleanup(c);
            if (null)
                fclose(null);
            free(url);
        }
        free(pre);
        free(body1);
        free(body2);
    }
    while (!LIST_EMPTY(&e->watches)) {
        ewatch_t *w = LIST_FIRST(&e->watches);
        while (!LIST_EMPTY(&w->waiters))
            fetch_finish(LIST_FIRST(&w->waiters), NXL_ERR_CANCELED, "agent destroyed");
        watch_free(w);
    }
    while (!LIST_EMPTY(&e->reqs)) {
        ereq_t *r = LIST_FIRST(&e->reqs);
        r->done = NULL;
        ereq_free(r);
    }
    while (e->waiting) {
        struct pending_pub *p = e->waiting;
        e->waiting = p->next;
        free(p->key);
        free(p->val);
        free(p);
    }
    forget_pubs(e);
    nxlt_http_free(e->http);
    nxlt_timer_free(e->ka);
    for (int i = 0; i < e->nep; i++)
        free(e->ep[i]);
    free(e->ep);
    free(e->prefix);
    free(e);
    a->etcd = NULL;
}

#else /* !NXL_HAVE_ETCD */

static nxl_status_t no_etcd(nxl_agent_t *a, const char *call, nxl_future_t **out)
{
    if (out)
        *out = NULL;
    nxli_err(a, "%s: this build has no etcd support (configure found no libcurl)", call);
    return NXL_ERR_NOT_SUPPORTED;
}

nxl_status_t nxl_md_publish(nxl_agent_t *a, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_publish(a, cb, arg, out);
    return no_etcd(a, "nxl_md_publish", out);
}

nxl_status_t nxl_md_publish_partial(nxl_agent_t *a, const char *label, nxl_mem_t type,
                                    const nxl_desc_t *descs, size_t n, nxl_done_cb cb, void *arg,
                                    nxl_future_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_publish_partial(a, label, type, descs, n, cb, arg, out);
    return no_etcd(a, "nxl_md_publish_partial", out);
}

nxl_status_t nxl_md_unpublish(nxl_agent_t *a, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_unpublish(a, cb, arg, out);
    return no_etcd(a, "nxl_md_unpublish", out);
}

nxl_status_t nxl_md_fetch_etcd(nxl_agent_t *a, const char *remote, const char *label,
                               int timeout_ms, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_fetch_etcd(a, remote, label, timeout_ms, cb, arg, out);
    return no_etcd(a, "nxl_md_fetch_etcd", out);
}

void nxli_etcd_cleanup(nxl_agent_t *a, bool unpublish) {}

#endif
