/* SPDX-License-Identifier: BSD-3-Clause */
/* The OBJ transport: host memory (DRAM) to and from objects in an S3 or
 * Azure Blob object store, within the agent, over HTTP on the reactor.
 *
 * As with the POSIX transport the agent is its own peer: the application
 * prepares its DRAM side against itself and the OBJ side against its own
 * name, then READs (object → memory) or WRITEs (memory → object). An OBJ
 * descriptor names an object by its key in desc.meta (registration and
 * nxl_mem_query), desc.dev_id is the application's id for it, desc.addr the
 * offset in the object and desc.len the bytes.
 *
 * READ is a ranged GET per element, split into ranges of part_size run in
 * parallel. WRITE replaces the whole object (object stores have no partial
 * writes, so an element must start at offset 0): one PUT, or above
 * multipart_threshold a multipart upload (S3: create, parts in parallel,
 * complete; Azure: Put Block per part, then Put Block List). A multipart
 * upload that fails or is canceled is aborted (S3 AbortMultipartUpload)
 * before the transfer completes, so that no parts are left behind.
 *
 * Requests run on libcurl's multi-socket interface driven by the reactor
 * (nxlt_http_*, shared with etcd discovery). At most max_connections run at
 * once, the rest wait in a queue; connections are kept alive and reused.
 * S3 requests are signed by libcurl (CURLOPT_AWS_SIGV4, with an unsigned
 * payload), Azure's with Shared Key (azure.c). Transient failures (a reset
 * connection, HTTP 500/502/503/504, S3's SlowDown and RequestTimeout) are
 * retried with exponential backoff, retries times at most. A request that
 * moves no byte for timeout_s (an abort: 1 s) fails and is not retried, nor
 * is one that found no connection in connect_timeout_ms: a server that
 * stops answering fails the transfer timeout_s after its last byte moved
 * (plus 1 s for the abort of a multipart upload).
 *
 * Cancel (NXLT_CAP_CANCEL_WAITS): a timer polls the transfers in flight
 * every OBJ_CANCEL_TICK_MS (and their requests for silence); a canceled one
 * starts nothing more, has its GETs and PUTs taken out of curl (which then
 * no longer touches the buffers), lets the parts of a multipart upload
 * already on the wire finish, aborts the upload, and completes once the
 * abort answered. Teardown takes every
 * request out of curl at once and aborts open multipart uploads with short
 * blocking requests. No timer is armed while nothing is in
 * flight. */
#include "obj.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ parameters */

/* The environment variable a, else b (either NULL); NULL when unset or empty. */
static const char *env(const char *a, const char *b)
{
    const char *v = a ? getenv(a) : NULL;
    if ((!v || !*v) && b)
        v = getenv(b);
    return v && *v ? v : NULL;
}

static nxl_status_t notif_send(void *state, nxlt_op_t *op, void *conn, const void *msg,
                               size_t len)
{
    obj_t *o = state;
    nxlt_error(o->ctx, "%s: carries no notifications", o->tname);
    return NXL_ERR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------ instance */

static void quiesce(void *state)
{
    obj_t *o = state;
    if (o->closing)
        return;
    o->closing = true;
    /* take every request out of curl: it lets go of the buffers at once */
    obj_xop_t *x;
    bool parts_cut = false;
    LIST_FOREACH(x, &o->xops, link)
    {
        obj_req_t *r;
        while ((r = LIST_FIRST(&x->reqs))) {
            parts_cut |= r->state == RQ_INFLIGHT && r->kind == R_MPU_PART;
            nxl_obj_req_detach(o, r);
            LIST_REMOVE(r, xlink);
            nxl_obj_req_free(r);
        }
    }
    /* multipart uploads left open: abort them, briefly blocking; when parts
     * were cut on the wire, once more 100 ms later, as S3's documentation
     * advises for parts in progress during an abort (a server may still be
     * taking one in; the second answer is NoSuchUpload otherwise) */
    for (int round = 0; round < (parts_cut ? 2 : 1); round++) {
        if (round)
            usleep(100000);
        LIST_FOREACH(x, &o->xops, link)
        {
            obj_mpu_t *m;
            LIST_FOREACH(m, &x->mpus, link)
            if (m->upload_id && !m->done && o->api == OBJ_S3) {
                obj_req_t r = {.o = o, .kind = R_MPU_ABORT, .k = m->k, .mpu = m, .total = -1};
                CURLcode rc = nxl_obj_sync_run(o, &r, 1000);
                if (!round && (rc != CURLE_OK || r.http >= 300))
                    nxlt_log(o->ctx, NXL_LOG_WARN, "%s: teardown could not abort the multipart "
                             "upload %s of '%s' (%s, HTTP %ld); its parts may stay on the "
                             "server", o->tname, m->upload_id, m->k->key,
                             curl_easy_strerror(rc), r.http);
                free(r.resp);
            }
        }
    }
    while ((x = LIST_FIRST(&o->xops))) {
        x->active = 0;
        x->failed = true;
        x->st = NXL_ERR_CANCELED;
        snprintf(x->why, sizeof(x->why), "%s: transport destroyed with the transfer in flight "
                                         "(agent teardown)", o->tname);
        nxl_obj_xop_finish(x);
    }
}

static void destroy(void *state)
{
    obj_t *o = state;
    quiesce(o);
    nxlt_log(o->ctx, NXL_LOG_INFO, "%s statistics: %llu transfers, %llu requests, %llu retries, "
             "%llu connections opened", o->tname, (unsigned long long)o->n_xfer,
             (unsigned long long)o->n_req, (unsigned long long)o->n_retry,
             (unsigned long long)o->n_conn);
    nxlt_http_free(o->http);
    if (o->sync)
        curl_easy_cleanup(o->sync);
    nxlt_timer_free(o->tick);
    nxlt_timer_free(o->kick);
    if (o->regs.v) {
        for (nxlt_reg_t *r; (r = nxlt_regtab_pop(&o->regs));)
            nxl_obj_key_put(NXLT_REG_OF(r, obj_key_t, reg));
        nxlt_regtab_fini(&o->regs);
    }
    free(o->endpoint);
    free(o->bucket);
    free(o->region);
    free(o->access_key);
    free(o->secret_key);
    free(o->token);
    free(o->account);
    free(o->base);
    free(o->sigv4);
    free(o->ca_file);
    memset(o->akey, 0, sizeof(o->akey));
    free(o);
}

static int probe(char *why, size_t cap)
{
    curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
    snprintf(why, cap, "S3 object stores over HTTP (libcurl %s, SigV4)%s", v ? v->version : "?",
             nxl_obj_azure_available() ? "; Azure Blob with api=azure (Shared Key)"
                                       : "; no Azure: built without libcrypto");
    return 1;
}

static const char *describe(void *state)
{
    return ((obj_t *)state)->desc;
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* The value of key, else the environment variable var's. */
static const char *param_or_env(const nxl_param_t *params, size_t n, const char *key,
                                const char *var)
{
    const char *v = nxlt_param(params, n, key);
    return v ? v : env(var, NULL);
}

/* A new instance with the defaults, before its parameters are read. */
static obj_t *obj_new(nxlt_ctx_t *ctx, obj_api_t api, const char *tname)
{
    obj_t *o = calloc(1, sizeof(*o));
    if (!o)
        return NULL;
    o->ctx = ctx;
    o->tname = tname;
    o->api = api;
    o->max_conns = OBJ_DEF_CONNS;
    o->part = OBJ_DEF_PART;
    o->threshold = OBJ_DEF_THRESHOLD;
    o->retries = OBJ_DEF_RETRIES;
    o->timeout_s = 30;
    o->connect_ms = 3000;
    o->verify_tls = true;
    TAILQ_INIT(&o->queue);
    LIST_INIT(&o->xops);
    snprintf(o->scheme_name, sizeof(o->scheme_name), "%s", api == OBJ_AZURE ? "azure" : "s3");
    return o;
}

/* The numbers and switches: connections, part sizes, retries, timeouts,
 * verify_tls. -1 with the sentence left in the context. */
static int read_limits(obj_t *o, const nxl_param_t *params, size_t n)
{
    nxlt_ctx_t *ctx = o->ctx;
    uint64_t conns = o->max_conns, part = o->part, thr = o->threshold, retries = o->retries;
    uint64_t tmo = (uint64_t)o->timeout_s, cms = (uint64_t)o->connect_ms;
    if (nxlt_param_uint(ctx, params, n, "max_connections", 1, 1024, &conns) ||
        nxlt_param_size(ctx, params, n, "part_size", 64 << 10, 5ull << 30, &part) ||
        nxlt_param_size(ctx, params, n, "multipart_threshold", 0, 5ull << 30, &thr) ||
        nxlt_param_uint(ctx, params, n, "retries", 0, 20, &retries) ||
        nxlt_param_uint(ctx, params, n, "timeout_s", 1, 3600, &tmo) ||
        nxlt_param_uint(ctx, params, n, "connect_timeout_ms", 1, 600000, &cms) ||
        nxlt_param_bool(ctx, params, n, "verify_tls", &o->verify_tls))
        return -1;
    o->max_conns = (unsigned)conns;
    o->part = (size_t)part;
    o->threshold = (size_t)thr;
    /* by default no smaller than a part */
    if (!nxlt_param(params, n, "multipart_threshold") && o->threshold < o->part)
        o->threshold = o->part;
    o->retries = (unsigned)retries;
    o->timeout_s = (long)tmo;
    o->connect_ms = (long)cms;
    return 0;
}

/* S3: the endpoint and bucket from the environment when not given, the
 * region and the credentials (parameters, else AWS_*). */
static int read_s3(obj_t *o, const nxl_param_t *params, size_t n, const char **bucket)
{
    if (!o->endpoint)
        o->endpoint = dup_or_null(env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"));
    if (!*bucket)
        *bucket = env("AWS_DEFAULT_BUCKET", NULL);
    const char *region = nxlt_param(params, n, "region");
    if (!region)
        region = env("AWS_REGION", "AWS_DEFAULT_REGION");
    o->region = strdup(region ? region : "us-east-1");
    o->access_key = dup_or_null(param_or_env(params, n, "access_key", "AWS_ACCESS_KEY_ID"));
    o->secret_key = dup_or_null(param_or_env(params, n, "secret_key", "AWS_SECRET_ACCESS_KEY"));
    o->token = dup_or_null(param_or_env(params, n, "session_token", "AWS_SESSION_TOKEN"));
    if (o->access_key && !o->secret_key) {
        nxlt_error(o->ctx, "%s: an access key without a secret key: give secret_key (or "
                           "AWS_SECRET_ACCESS_KEY)", o->tname);
        return -1;
    }
    o->sigv4 = nxl_obj_xsprintf("aws:amz:%s:s3", o->region);
    return 0;
}

/* Azure: a connection string, or account and account_key (parameters,
 * else AZURE_STORAGE_*). */
static int read_azure(obj_t *o, const nxl_param_t *params, size_t n)
{
    nxlt_ctx_t *ctx = o->ctx;
    const char *tname = o->tname;
    char why[300] = "";
    const char *cs = nxlt_param(params, n, "connection_string");
    const char *acct = nxlt_param(params, n, "account");
    const char *key = nxlt_param(params, n, "account_key");
    if (!cs && !acct)
        cs = env("AZURE_STORAGE_CONNECTION_STRING", NULL);
    if (cs) {
        if (nxl_obj_azure_connstr(o, cs, why, sizeof(why)) < 0) {
            nxlt_error(ctx, "%s: connection_string: %s", tname, why);
            return -1;
        }
        return 0;
    }
    if (!acct)
        acct = env("AZURE_STORAGE_ACCOUNT", NULL);
    if (!key)
        key = env("AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCESS_KEY");
    if (!acct || !key) {
        nxlt_error(ctx, "%s: no credentials: give connection_string (or "
                        "AZURE_STORAGE_CONNECTION_STRING), or account and account_key "
                        "(AZURE_STORAGE_ACCOUNT, AZURE_STORAGE_KEY)", tname);
        return -1;
    }
    o->account = strdup(acct);
    if (nxl_obj_azure_set_key(o, key) < 0) {
        nxlt_error(ctx, "%s: account_key is not the base64 key Azure gives", tname);
        return -1;
    }
    if (!o->endpoint)
        o->endpoint = nxl_obj_xsprintf("https://%s.blob.core.windows.net", acct);
    return 0;
}

/* The bucket (or container), the addressing and the endpoint: o->base, the
 * URL objects' names are appended to. */
static int set_base(obj_t *o, const char *bucket, const nxl_param_t *params, size_t n)
{
    nxlt_ctx_t *ctx = o->ctx;
    const char *tname = o->tname;
    obj_api_t api = o->api;
    if (!bucket || !*bucket || strchr(bucket, '/')) {
        const char *what = api == OBJ_AZURE ? "container" : "bucket";
        nxlt_error(ctx, "%s: no %s: give %s=NAME%s", tname, what, what,
                   api == OBJ_AZURE ? "" : " (or AWS_DEFAULT_BUCKET)");
        return -1;
    }
    o->bucket = strdup(bucket);
    static const char *const addressing[] = {"path", "virtual", NULL};
    int virt = -1; /* not given */
    if (nxlt_param_choice(ctx, params, n, "addressing", addressing, &virt) != NXL_SUCCESS)
        return -1;
    bool given_ep = o->endpoint != NULL;
    if (!o->endpoint)
        o->endpoint = nxl_obj_xsprintf("https://s3.%s.amazonaws.com", o->region);
    size_t el = o->endpoint ? strlen(o->endpoint) : 0;
    while (el && o->endpoint[el - 1] == '/')
        o->endpoint[--el] = 0;
    const char *sep = o->endpoint ? strstr(o->endpoint, "://") : NULL;
    if (!sep || (strncmp(o->endpoint, "http://", 7) && strncmp(o->endpoint, "https://", 8))) {
        nxlt_error(ctx, "%s: endpoint '%s' is not an http:// or https:// URL", tname,
                   o->endpoint ? o->endpoint : "");
        return -1;
    }
    o->virt = api == OBJ_S3 && (virt >= 0 ? virt == 1 : !given_ep);
    if (o->virt)
        o->base = nxl_obj_xsprintf("%.*s%s.%s", (int)(sep + 3 - o->endpoint), o->endpoint,
                                   o->bucket, sep + 3);
    else
        o->base = nxl_obj_xsprintf("%s/%s", o->endpoint, o->bucket);
    return 0;
}

/* The instance's state: its token, registry, HTTP multi handle and timers;
 * -1 when out of memory (or libcurl failed). */
static int start(obj_t *o)
{
    nxlt_ctx_t *ctx = o->ctx;
    if (getrandom(&o->token_id, sizeof(o->token_id), GRND_NONBLOCK) != sizeof(o->token_id))
        o->token_id = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL) ^ (uintptr_t)o;
    int regs = nxlt_regtab_init(&o->regs);
    o->http = nxlt_http_open(ctx, nxl_obj_req_done, o);
    o->tick = nxlt_timer_new(ctx, nxl_obj_on_tick, o);
    o->kick = nxlt_timer_new(ctx, nxl_obj_on_kick, o);
    if (regs < 0 || !o->http || !o->tick || !o->kick || !o->base || !o->bucket ||
        (o->api == OBJ_S3 && !o->sigv4))
        return -1;
    CURLM *multi = nxlt_http_multi(o->http);
    curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)o->max_conns);
    curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long)o->max_conns);
    snprintf(o->desc, sizeof(o->desc), "%s at %s, %s %s (%s), %u connections, parts of %zu KiB "
             "above %zu KiB",
             o->api == OBJ_AZURE ? "Azure Blob" : "S3", o->endpoint,
             o->api == OBJ_AZURE ? "container" : "bucket", o->bucket,
             o->api == OBJ_AZURE ? "Shared Key" : o->virt ? "virtual-host" : "path-style",
             o->max_conns, o->part >> 10, o->threshold >> 10);
    return 0;
}

static nxl_status_t create_api(nxlt_ctx_t *ctx, const nxl_param_t *params, size_t n, void **out,
                               obj_api_t api, const char *tname)
{
    /* the engine refused keys obj_params does not list */
    static const char *const apis[] = {"s3", "azure", NULL}; /* in obj_api_t's order */
    int ai = (int)api;
    if (nxlt_param_choice(ctx, params, n, "api", apis, &ai) != NXL_SUCCESS)
        return NXL_ERR_INVALID_PARAM;
    api = (obj_api_t)ai;
    if (api == OBJ_AZURE && !nxl_obj_azure_available()) {
        nxlt_error(ctx, "%s: Azure Blob needs Shared Key signing, and this build has no "
                        "libcrypto (apt-get install libssl-dev, then configure again)", tname);
        return NXL_ERR_NOT_SUPPORTED;
    }
    obj_t *o = obj_new(ctx, api, tname);
    if (!o) {
        nxlt_error(ctx, "%s: out of memory", tname);
        return NXL_ERR_UNKNOWN;
    }
    if (read_limits(o, params, n) < 0)
        goto bad;
    o->ca_file = dup_or_null(param_or_env(params, n, "ca_file", "AWS_CA_BUNDLE"));
    o->endpoint = dup_or_null(nxlt_param(params, n, "endpoint"));
    const char *bucket = nxlt_param(params, n, "bucket");
    if (!bucket)
        bucket = nxlt_param(params, n, "container");
    if ((api == OBJ_S3 ? read_s3(o, params, n, &bucket) : read_azure(o, params, n)) < 0 ||
        set_base(o, bucket, params, n) < 0)
        goto bad;
    if (start(o) < 0) {
        nxlt_error(ctx, "%s: out of memory (or libcurl failed to initialise)", tname);
        destroy(o);
        return NXL_ERR_BACKEND;
    }
    nxlt_log(ctx, NXL_LOG_INFO, "%s: %s", tname, o->desc);
    *out = o;
    return NXL_SUCCESS;
bad:
    destroy(o);
    return NXL_ERR_INVALID_PARAM;
}

static nxl_status_t create_obj(nxlt_ctx_t *ctx, const nxl_param_t *params, size_t n, void **out)
{
    return create_api(ctx, params, n, out, OBJ_S3, "OBJ");
}

/* What create_api() takes: the engine refuses other keys, nxl_info -v lists
 * these (keep them with its parsing) */
_Static_assert(OBJ_DEF_CONNS == 16 && OBJ_DEF_PART == 8 << 20 && OBJ_DEF_THRESHOLD == 16 << 20 &&
                   OBJ_DEF_RETRIES == 4,
               "obj_params states the defaults");
static const nxl_param_info_t obj_params[] = {
    {"api", "s3", "s3 or azure (Azure Blob)"},
    {"endpoint", NULL, "http:// or https:// URL of the server (S3: AWS_ENDPOINT_URL_S3, "
     "AWS_ENDPOINT_URL, else https://s3.REGION.amazonaws.com; Azure: the account's)"},
    {"bucket", NULL, "S3 bucket or Azure container (it must exist; S3: AWS_DEFAULT_BUCKET)"},
    {"container", NULL, "the same as bucket"},
    {"region", NULL, "S3 SigV4 region (AWS_REGION, AWS_DEFAULT_REGION, else us-east-1)"},
    {"access_key", NULL, "S3 access key id (AWS_ACCESS_KEY_ID)"},
    {"secret_key", NULL, "S3 secret key (AWS_SECRET_ACCESS_KEY)"},
    {"session_token", NULL, "S3 session token (AWS_SESSION_TOKEN)"},
    {"addressing", NULL, "path (the default with an endpoint) or virtual (the default for AWS)"},
    {"max_connections", "16", "requests in flight at once (1 to 1024), the rest queued"},
    {"part_size", "8M", "multipart part and ranged-GET size (64K to 5G)"},
    {"multipart_threshold", "16M", "WRITEs larger than this are multipart (up to 5G)"},
    {"ca_file", NULL, "CA certificates for https (AWS_CA_BUNDLE)"},
    {"verify_tls", "1", "0 turns certificate checks off (test servers only)"},
    {"retries", "4", "attempts after the first for transient failures (0 to 20)"},
    {"timeout_s", "30", "a request fails when no byte moved for this long (1 to 3600)"},
    {"connect_timeout_ms", "3000", "connection timeout (1 to 600000)"},
    {"connection_string", NULL, "Azure connection string (AZURE_STORAGE_CONNECTION_STRING)"},
    {"account", NULL, "Azure storage account (AZURE_STORAGE_ACCOUNT)"},
    {"account_key", NULL, "Azure account key, base64 (AZURE_STORAGE_KEY)"},
};

#define OBJ_OPS_COMMON                                                                             \
    .abi_version = NXLT_ABI_VERSION, .mem_mask = (1u << NXL_DRAM) | (1u << NXL_OBJ),               \
    .caps = NXLT_CAP_LOCAL | NXLT_CAP_CANCEL_WAITS | NXLT_CAP_PARAMS, .params = obj_params,        \
    .nparams = sizeof(obj_params) / sizeof(*obj_params), .destroy = destroy,                       \
    .reg = nxl_obj_reg, .dereg = nxl_obj_dereg, .pack_key = nxl_obj_pack_key,                      \
    .conn_info = nxl_obj_conn_info, .load_conn = nxl_obj_load_conn,                                \
    .load_key = nxl_obj_load_key, .unload_key = nxl_obj_unload_key,                                \
    .unload_conn = nxl_obj_unload_conn, .post = nxl_obj_post, .notif_send = notif_send,            \
    .describe = describe, .query = nxl_obj_query, .quiesce = quiesce

/* One transport, two dialects: S3 by default, Azure Blob with api=azure. */
NXLT_MODULE_EXPORT const nxlt_ops_t nxlt_obj_ops = {
    .name = "OBJ",
    .probe = probe,
    .create = create_obj,
    OBJ_OPS_COMMON,
};
