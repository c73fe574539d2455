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
 * blocking requests. No timer or event is armed while nothing is in
 * flight. */
#include "obj.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define KEY_MAGIC 0x314b424fu  /* "OBK1" */
#define CONN_MAGIC 0x3143424fu /* "OBC1" */

static char obj_dram_md;

#include "../blob_wire.h" /* conn info and keys: magic, token, registration id */
typedef nxlt_blob24_t obj_blob_t;

static void req_enqueue(obj_t *o, obj_req_t *r, bool head);
static void pump(obj_t *o);
static void xop_fail(obj_xop_t *x, nxl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------ helpers */

static const char *param(const nxl_param_t *p, size_t n, const char *k)
{
    const char *v = NULL;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(p[i].key, k))
            v = p[i].value;
    return v;
}

static const char *env(const char *a, const char *b)
{
    const char *v = a ? getenv(a) : NULL;
    if ((!v || !*v) && b)
        v = getenv(b);
    return v && *v ? v : NULL;
}

static int parse_size(const char *s, unsigned long long lo, unsigned long long hi,
                      unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s)
        return -1;
    if (*end == 'k' || *end == 'K')
        v <<= 10, end++;
    else if (*end == 'm' || *end == 'M')
        v <<= 20, end++;
    else if (*end == 'g' || *end == 'G')
        v <<= 30, end++;
    if (*end == 'i' || *end == 'B')
        end++;
    if (*end == 'B')
        end++;
    if (*end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_bool(const char *s, bool *out)
{
    if (!strcmp(s, "1") || !strcasecmp(s, "yes") || !strcasecmp(s, "true") || !strcasecmp(s, "on"))
        *out = true;
    else if (!strcmp(s, "0") || !strcasecmp(s, "no") || !strcasecmp(s, "false") ||
             !strcasecmp(s, "off"))
        *out = false;
    else
        return -1;
    return 0;
}

/* Percent-encodes s (len bytes) for a URL path: unreserved characters and
 * '/' (when keep_slash) stay. */
static char *url_enc(const char *s, size_t len, bool keep_slash)
{
    char *out = malloc(len * 3 + 1), *p = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
            *p++ = (char)c;
        } else {
            sprintf(p, "%%%02X", c);
            p += 3;
        }
    }
    *p = 0;
    return out;
}

static char *xsprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xsprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

static void b64(const unsigned char *in, size_t n, char *out)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t i = 0, o = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = t[v >> 18];
        out[o++] = t[(v >> 12) & 63];
        out[o++] = t[(v >> 6) & 63];
        out[o++] = t[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0);
        out[o++] = t[v >> 18];
        out[o++] = t[(v >> 12) & 63];
        out[o++] = i + 1 < n ? t[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    out[o] = 0;
}

/* The text of <tag>...</tag> in an XML answer, into out; "" if absent. */
static void xml_tag(const char *xml, size_t len, const char *tag, char *out, size_t cap)
{
    out[0] = 0;
    if (!xml || !len)
        return;
    char open[64], close[64];
    snprintf(open, sizeof(open), "<%s>", tag);
    snprintf(close, sizeof(close), "</%s>", tag);
    const char *a = memmem(xml, len, open, strlen(open));
    if (!a)
        return;
    a += strlen(open);
    const char *b = memmem(a, len - (size_t)(a - xml), close, strlen(close));
    if (!b)
        return;
    size_t n = (size_t)(b - a) < cap - 1 ? (size_t)(b - a) : cap - 1;
    memcpy(out, a, n);
    out[n] = 0;
}

/* "s3://bucket/key" for sentences */
static const char *oname(obj_t *o, const obj_key_t *k, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s://%s/%.200s", o->scheme_name, o->bucket, k ? k->key : "");
    return buf;
}

/* ------------------------------------------------------------ keys */

static void key_put(obj_key_t *k)
{
    if (--k->refs > 0)
        return;
    free(k->key);
    free(k->url);
    free(k->path);
    free(k);
}

static obj_key_t *reg_find(obj_t *o, uint64_t regid)
{
    nxlt_reg_t *r = nxlt_regtab_find(&o->regs, regid);
    return r ? NXLT_REG_OF(r, obj_key_t, reg) : NULL;
}

/* The key in a descriptor's meta: text without NUL (a trailing NUL is
 * tolerated), at most OBJ_KEY_MAX bytes. */
static nxl_status_t meta_key(obj_t *o, const nxl_desc_t *d, const char *call, char **out)
{
    size_t n = d->meta_len;
    const char *m = d->meta;
    if (m && n && m[n - 1] == 0)
        n--;
    if (!m || !n || n > OBJ_KEY_MAX || memchr(m, 0, n)) {
        nxlt_error(o->ctx, "%s: %s: an OBJ descriptor names its object by key in desc.meta "
                           "(text, 1 to %u bytes, e.g. \"kv/layer0/block7\")",
                   o->tname, call, OBJ_KEY_MAX);
        return NXL_ERR_INVALID_PARAM;
    }
    *out = strndup(m, n);
    if (!*out) {
        nxlt_error(o->ctx, "%s: out of memory", o->tname);
        return NXL_ERR_UNKNOWN;
    }
    return NXL_SUCCESS;
}

/* The URL of key and its path (Azure signs the path). */
static int key_url(obj_t *o, const char *key, char **url, char **path)
{
    char *enc = url_enc(key, strlen(key), true);
    if (!enc)
        return -1;
    *url = xsprintf("%s/%s", o->base, enc);
    const char *p = strstr(o->base, "://");
    p = p ? strchr(p + 3, '/') : NULL;
    *path = xsprintf("%s/%s", p ? p : "", enc);
    free(enc);
    if (!*url || !*path) {
        free(*url);
        free(*path);
        return -1;
    }
    return 0;
}

static nxl_status_t reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **out)
{
    obj_t *o = state;
    if (type == NXL_DRAM) {
        *out = &obj_dram_md;
        return NXL_SUCCESS;
    }
    if (type != NXL_OBJ) {
        nxlt_error(o->ctx, "%s: serves DRAM and OBJ, not %s", o->tname, nxl_mem_name(type));
        return NXL_ERR_NOT_SUPPORTED;
    }
    char *key;
    nxl_status_t st = meta_key(o, d, "nxl_mem_register", &key);
    if (st != NXL_SUCCESS)
        return st;
    obj_key_t *k = calloc(1, sizeof(*k));
    if (!k || key_url(o, key, &k->url, &k->path) < 0) {
        free(k);
        free(key);
        nxlt_error(o->ctx, "%s: out of memory", o->tname);
        return NXL_ERR_UNKNOWN;
    }
    k->refs = 1;
    k->key = key;
    k->id = d->dev_id;
    k->off = d->addr;
    k->len = d->len;
    k->reg.regid = ++o->next_regid;
    if (nxlt_regtab_add(&o->regs, &k->reg) < 0) {
        key_put(k);
        nxlt_error(o->ctx, "%s: out of memory", o->tname);
        return NXL_ERR_UNKNOWN;
    }
    *out = k;
    return NXL_SUCCESS;
}

static void dereg(void *state, void *md)
{
    obj_t *o = state;
    if (!md || md == &obj_dram_md)
        return;
    nxlt_regtab_del(&o->regs, &((obj_key_t *)md)->reg);
    key_put(md);
}

static nxl_status_t pack_key(void *state, void *md, void **buf, size_t *len)
{
    obj_t *o = state;
    *buf = NULL;
    *len = 0;
    if (md == &obj_dram_md)
        return NXL_SUCCESS;
    return nxlt_blob24_new(KEY_MAGIC, o->token_id, ((obj_key_t *)md)->reg.regid, buf, len)
               ? NXL_ERR_UNKNOWN
               : NXL_SUCCESS;
}

static nxl_status_t conn_info(void *state, void **buf, size_t *len)
{
    obj_t *o = state;
    return nxlt_blob24_new(CONN_MAGIC, o->token_id, 0, buf, len) ? NXL_ERR_UNKNOWN : NXL_SUCCESS;
}

static nxl_status_t load_conn(void *state, const char *agent, const void *info, size_t len,
                              void **conn)
{
    obj_t *o = state;
    obj_blob_t c;
    *conn = NULL;
    if (nxlt_blob24_parse(info, len, CONN_MAGIC, &c) == 0) {
        if (c.token == o->token_id)
            *conn = o; /* ourselves: the loopback view */
    }
    return NXL_SUCCESS;
}

static void unload_conn(void *state, void *conn) {}

static nxl_status_t load_key(void *state, void *conn, const void *buf, size_t len, void **rkey)
{
    obj_t *o = state;
    obj_blob_t b;
    *rkey = NULL;
    if (conn != o || len != sizeof(b)) {
        nxlt_error(o->ctx, "%s: a region key of %zu bytes that is not this transport's", o->tname,
                   len);
        return NXL_ERR_MISMATCH;
    }
    obj_key_t *k = nxlt_blob24_parse(buf, len, KEY_MAGIC, &b) == 0 && b.token == o->token_id
                       ? reg_find(o, b.regid)
                       : NULL;
    if (!k) {
        nxlt_error(o->ctx, "%s: region key %llu names no registered object", o->tname,
                   (unsigned long long)b.regid);
        return NXL_ERR_NOT_FOUND;
    }
    k->refs++;
    *rkey = k;
    return NXL_SUCCESS;
}

static void unload_key(void *state, void *rkey)
{
    if (rkey)
        key_put(rkey);
}

/* ------------------------------------------------------------ requests */

/* Seconds r may move nothing before it fails: timeout_s; an abort (after a
 * failure or a cancel, when the server may be the reason) at most
 * OBJ_ABORT_SILENCE_S, as teardown's aborts. */
static long obj_silence_s(const obj_t *o, const obj_req_t *r)
{
    if (r->kind == R_MPU_ABORT && o->timeout_s > OBJ_ABORT_SILENCE_S)
        return OBJ_ABORT_SILENCE_S;
    return o->timeout_s;
}

static size_t on_body(char *p, size_t sz, size_t nm, void *arg)
{
    obj_req_t *r = arg;
    size_t n = sz * nm;
    r->moved_us = nxlt_now_us();
    if (!r->http)
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->http);
    if (r->kind == R_GET && r->http >= 200 && r->http < 300) {
        if (r->http == 200 && r->off != 0) {
            snprintf(r->bad_why, sizeof(r->bad_why), "the server ignored the Range header and "
                                                     "sent the object from its start");
            r->bad = true;
            return 0;
        }
        if (n > r->len - r->pos) {
            /* more than the range asked for (s3rver answers bytes=0-0 with
             * the whole object): keep what was asked, cut the rest off */
            memcpy(r->buf + r->pos, p, r->len - r->pos);
            r->pos = r->len;
            r->overrun = true;
            return 0;
        }
        memcpy(r->buf + r->pos, p, n);
        r->pos += n;
        return n;
    }
    /* an XML answer or an error: keep its start */
    size_t keep = r->resp_len + n > OBJ_RESP_MAX ? OBJ_RESP_MAX - r->resp_len : n;
    if (keep) {
        if (r->resp_len + keep + 1 > r->resp_cap) {
            size_t cap = (r->resp_len + keep + 1) * 2;
            char *b = realloc(r->resp, cap);
            if (!b)
                return 0;
            r->resp = b;
            r->resp_cap = cap;
        }
        memcpy(r->resp + r->resp_len, p, keep);
        r->resp_len += keep;
        r->resp[r->resp_len] = 0;
    }
    return n;
}

static size_t on_read(char *p, size_t sz, size_t nm, void *arg)
{
    obj_req_t *r = arg;
    size_t n = sz * nm, left = r->len - r->pos;
    if (n > left)
        n = left;
    memcpy(p, r->buf + r->pos, n);
    r->pos += n;
    if (n)
        r->moved_us = nxlt_now_us();
    return n;
}

static int on_seek(void *arg, curl_off_t off, int origin)
{
    obj_req_t *r = arg;
    if (origin != SEEK_SET || off < 0 || (size_t)off > r->len)
        return CURL_SEEKFUNC_CANTSEEK;
    r->pos = (size_t)off;
    return CURL_SEEKFUNC_OK;
}

static bool hdr_is(const char *p, size_t n, const char *name, const char **val, size_t *vlen)
{
    size_t l = strlen(name);
    if (n <= l || strncasecmp(p, name, l))
        return false;
    const char *v = p + l, *e = p + n;
    while (v < e && (*v == ' ' || *v == '\t'))
        v++;
    while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' '))
        e--;
    *val = v;
    *vlen = (size_t)(e - v);
    return true;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *arg)
{
    obj_req_t *r = arg;
    size_t n = sz * nm, vl;
    const char *v;
    r->moved_us = nxlt_now_us();
    if (n > 5 && !strncmp(p, "HTTP/", 5)) {
        /* a new answer (after 100 Continue, say): forget the last one's */
        r->etag[0] = 0;
        r->err_hdr[0] = 0;
        r->total = -1;
    } else if (hdr_is(p, n, "etag:", &v, &vl)) {
        snprintf(r->etag, sizeof(r->etag), "%.*s", (int)vl, v);
    } else if (hdr_is(p, n, "x-amz-error-code:", &v, &vl) ||
               hdr_is(p, n, "x-ms-error-code:", &v, &vl)) {
        snprintf(r->err_hdr, sizeof(r->err_hdr), "%.*s", (int)vl, v);
    } else if (hdr_is(p, n, "content-range:", &v, &vl)) {
        const char *slash = memchr(v, '/', vl);
        if (slash && slash + 1 < v + vl && slash[1] != '*')
            r->total = strtoll(slash + 1, NULL, 10);
    }
    return n;
}

static const char *kind_verb(int kind)
{
    switch (kind) {
    case R_GET:
        return "READ";
    case R_PUT:
        return "WRITE";
    case R_HEAD:
        return "HEAD";
    case R_MPU_CREATE:
        return "starting the multipart upload";
    case R_MPU_PART:
        return "uploading a part";
    case R_MPU_COMPLETE:
        return "completing the multipart upload";
    default:
        return "aborting the multipart upload";
    }
}

/* What a request does, for sentences: "READ of s3://b/k bytes 0-99 (element 3)". */
static void req_what(obj_req_t *r, char *buf, size_t cap)
{
    obj_t *o = r->o;
    char nm[300];
    oname(o, r->k, nm, sizeof(nm));
    if (r->kind == R_GET)
        snprintf(buf, cap, "READ of %s bytes %llu-%llu (element %zu)", nm,
                 (unsigned long long)r->off, (unsigned long long)(r->off + r->len - 1), r->elem);
    else if (r->kind == R_PUT)
        snprintf(buf, cap, "WRITE of %s (%zu bytes, element %zu)", nm, r->len, r->elem);
    else if (r->kind == R_MPU_PART)
        snprintf(buf, cap, "WRITE of %s: %s %u of %u (element %zu)", nm,
                 o->api == OBJ_AZURE ? "block" : "part", r->part, r->mpu->nparts, r->elem);
    else if (r->kind == R_HEAD)
        snprintf(buf, cap, "query (HEAD) of %s", nm);
    else
        snprintf(buf, cap, "WRITE of %s: %s (element %zu)", nm, kind_verb(r->kind), r->elem);
}

/* Sets up an easy handle for r (its URL, method, headers, signing). */
static int req_setup(obj_t *o, obj_req_t *r, CURL *e)
{
    const obj_key_t *k = r->k;
    char q[512] = "";
    const char *azq[6] = {NULL};
    const char *azh[6] = {NULL};
    char range[80] = "", blockid[64] = "", blockenc[200] = "";
    size_t nh = 0;
    const char *method = "GET";
    size_t body_len = 0;
    bool az = o->api == OBJ_AZURE;

    if (r->kind == R_MPU_PART && az) {
        unsigned char raw[24];
        snprintf((char *)raw, sizeof(raw), "nxlblock%06u", r->part); /* 14 bytes, same for all */
        b64(raw, 14, blockid);
        char *enc = url_enc(blockid, strlen(blockid), false);
        if (!enc)
            return -1;
        snprintf(blockenc, sizeof(blockenc), "%s", enc);
        free(enc);
    }
    switch (r->kind) {
    case R_GET:
        snprintf(range, sizeof(range), "bytes=%llu-%llu", (unsigned long long)r->off,
                 (unsigned long long)(r->off + r->len - 1));
        break;
    case R_HEAD:
        method = "HEAD";
        break;
    case R_PUT:
        method = "PUT";
        body_len = r->len;
        break;
    case R_MPU_CREATE:
        method = "POST";
        snprintf(q, sizeof(q), "?uploads=");
        break;
    case R_MPU_PART:
        method = "PUT";
        body_len = r->len;
        if (az) {
            snprintf(q, sizeof(q), "?comp=block&blockid=%s", blockenc);
            azq[0] = "blockid", azq[1] = blockid, azq[2] = "comp", azq[3] = "block";
        } else {
            snprintf(q, sizeof(q), "?partNumber=%u&uploadId=%s", r->part, r->mpu->upload_id);
        }
        break;
    case R_MPU_COMPLETE:
        body_len = r->len;
        if (az) {
            method = "PUT";
            snprintf(q, sizeof(q), "?comp=blocklist");
            azq[0] = "comp", azq[1] = "blocklist";
        } else {
            method = "POST";
            snprintf(q, sizeof(q), "?uploadId=%s", r->mpu->upload_id);
        }
        break;
    case R_MPU_ABORT:
        method = "DELETE";
        snprintf(q, sizeof(q), "?uploadId=%s", r->mpu->upload_id);
        break;
    }
    char *url = xsprintf("%s%s", k->url, q);
    if (!url)
        return -1;
    curl_easy_setopt(e, CURLOPT_URL, url);
    free(url); /* curl copies it */

    struct curl_slist *h = NULL;
#define HDR(s)                                                                                     \
    do {                                                                                           \
        struct curl_slist *l_ = curl_slist_append(h, (s));                                         \
        if (!l_)                                                                                   \
            goto oom;                                                                              \
        h = l_;                                                                                    \
    } while (0)
    if (az) {
        if (r->kind == R_GET) {
            azh[nh++] = "x-ms-range";
            azh[nh++] = range;
        }
        if (r->kind == R_PUT) {
            azh[nh++] = "x-ms-blob-type";
            azh[nh++] = "BlockBlob";
        }
        if (obj_azure_sign(o, method, k->path, azq, azh, body_len, &h) < 0)
            goto oom;
    } else {
        char line[600];
        if (r->kind == R_GET) {
            snprintf(line, sizeof(line), "Range: %s", range);
            HDR(line);
        }
        HDR("x-amz-content-sha256: UNSIGNED-PAYLOAD");
        if (o->token) {
            snprintf(line, sizeof(line), "x-amz-security-token: %.560s", o->token);
            HDR(line);
        }
        if (r->kind == R_MPU_COMPLETE)
            HDR("Content-Type: application/xml");
        if (o->access_key) {
            curl_easy_setopt(e, CURLOPT_AWS_SIGV4, o->sigv4);
            curl_easy_setopt(e, CURLOPT_USERNAME, o->access_key);
            curl_easy_setopt(e, CURLOPT_PASSWORD, o->secret_key ? o->secret_key : "");
        }
    }
    if (body_len || !strcmp(method, "PUT"))
        HDR("Expect:"); /* no 100-continue round trip */
#undef HDR
    r->hdr = h;
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);

    if (!strcmp(method, "HEAD")) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (!strcmp(method, "PUT")) {
        curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(e, CURLOPT_READDATA, r);
        curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(e, CURLOPT_SEEKDATA, r);
        curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->len);
        long ub = r->len < (16 << 10) ? (16 << 10) : r->len > (1 << 20) ? (1 << 20) : (long)r->len;
        curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, ub);
    } else if (!strcmp(method, "POST")) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->kind == R_MPU_COMPLETE ? r->buf : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)(r->kind == R_MPU_COMPLETE ? r->len : 0));
    } else if (!strcmp(method, "DELETE")) {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    if (r->kind == R_GET) {
        long bs = r->len < (16 << 10) ? (16 << 10) : r->len > (512 << 10) ? (512 << 10)
                                                                         : (long)r->len;
        curl_easy_setopt(e, CURLOPT_BUFFERSIZE, bs);
    }
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, o->connect_ms);
    /* no CURLOPT_LOW_SPEED_*: curl judges speed over its last 5 s, so a
     * server that stops answering failed timeout_s + 5-6 s later; the tick
     * (on_tick) bounds the silence itself */
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    if (o->ca_file)
        curl_easy_setopt(e, CURLOPT_CAINFO, o->ca_file);
    if (!o->verify_tls) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    r->easy = e;
    r->http = 0;
    r->pos = 0;
    r->resp_len = 0;
    r->etag[0] = 0;
    r->err_hdr[0] = 0;
    r->total = -1;
    r->bad = false;
    r->overrun = false;
    return 0;
oom:
    curl_slist_free_all(h);
    return -1;
}

static obj_req_t *req_new(obj_xop_t *x, int kind, obj_key_t *k, size_t elem)
{
    obj_req_t *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->o = x->o;
    r->x = x;
    r->kind = kind;
    r->k = k;
    r->elem = elem;
    r->total = -1;
    k->refs++; /* the engine may unload its key while the request runs */
    LIST_INSERT_HEAD(&x->reqs, r, xlink);
    x->active++;
    return r;
}

static void xop_finish(obj_xop_t *x);

static void xop_release(obj_xop_t *x)
{
    if (--x->active == 0)
        xop_finish(x);
}

static void mpu_abort(obj_mpu_t *m);

/* r ends (done, failed, dropped): follow-ups are spawned before the
 * transfer's count drops. */
static void req_finish(obj_req_t *r)
{
    obj_xop_t *x = r->x;
    obj_mpu_t *m = r->mpu;
    r->state = RQ_DONE;
    LIST_REMOVE(r, xlink);
    if (r->retry_ev)
        event_free(r->retry_ev);
    curl_slist_free_all(r->hdr);
    free(r->body);
    free(r->resp);
    if (m && r->kind == R_MPU_PART) {
        m->active--;
        if (x->failed)
            mpu_abort(m);
    }
    key_put(r->k);
    free(r);
    xop_release(x);
}

static void req_enqueue(obj_t *o, obj_req_t *r, bool head)
{
    r->state = RQ_QUEUED;
    if (head)
        TAILQ_INSERT_HEAD(&o->queue, r, qlink);
    else
        TAILQ_INSERT_TAIL(&o->queue, r, qlink);
}

static void mpu_abort(obj_mpu_t *m)
{
    if (!m->upload_id || m->active > 0 || m->aborting || m->done)
        return;
    m->aborting = true;
    obj_req_t *r = req_new(m->x, R_MPU_ABORT, m->k, m->elem);
    if (!r) {
        nxlt_log(m->x->o->ctx, NXL_LOG_WARN, "%s: out of memory aborting the multipart upload "
                 "%s of '%s'", m->x->o->tname, m->upload_id, m->k->key);
        return;
    }
    r->mpu = m;
    req_enqueue(m->x->o, r, true);
}

/* The next part request of m, queued; Azure's parts start at once. */
static int mpu_parts(obj_mpu_t *m)
{
    for (unsigned i = 0; i < m->nparts; i++) {
        obj_req_t *r = req_new(m->x, R_MPU_PART, m->k, m->elem);
        if (!r)
            return -1;
        r->mpu = m;
        r->part = i + 1;
        r->buf = (char *)m->buf + (size_t)i * m->part;
        r->len = i + 1 < m->nparts ? m->part : m->len - (size_t)i * m->part;
        m->active++;
        req_enqueue(m->x->o, r, false);
    }
    return 0;
}

static int mpu_complete(obj_mpu_t *m)
{
    obj_t *o = m->x->o;
    size_t cap = 128 + (size_t)m->nparts * 200, len = 0;
    char *b = malloc(cap);
    if (!b)
        return -1;
    if (o->api == OBJ_AZURE) {
        len += (size_t)snprintf(b + len, cap - len,
                                "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
        for (unsigned i = 0; i < m->nparts; i++) {
            unsigned char raw[24];
            char id[32];
            snprintf((char *)raw, sizeof(raw), "nxlblock%06u", i + 1);
            b64(raw, 14, id);
            len += (size_t)snprintf(b + len, cap - len, "<Latest>%s</Latest>", id);
        }
        len += (size_t)snprintf(b + len, cap - len, "</BlockList>");
    } else {
        len += (size_t)snprintf(b + len, cap - len, "<CompleteMultipartUpload>");
        for (unsigned i = 0; i < m->nparts; i++)
            len += (size_t)snprintf(b + len, cap - len,
                                    "<Part><PartNumber>%u</PartNumber><ETag>%s</ETag></Part>",
                                    i + 1, m->etags[i] ? m->etags[i] : "");
        len += (size_t)snprintf(b + len, cap - len, "</CompleteMultipartUpload>");
    }
    obj_req_t *r = req_new(m->x, R_MPU_COMPLETE, m->k, m->elem);
    if (!r) {
        free(b);
        return -1;
    }
    r->mpu = m;
    r->body = b;
    r->buf = b;
    r->len = len;
    req_enqueue(o, r, true);
    return 0;
}

/* A request answered 2xx. */
static void req_ok(obj_req_t *r)
{
    obj_xop_t *x = r->x;
    obj_mpu_t *m = r->mpu;
    obj_t *o = r->o;
    char what[400];
    switch (r->kind) {
    case R_GET:
        if (r->pos < r->len) {
            req_what(r, what, sizeof(what));
            char size[64] = "shorter than that";
            if (r->total >= 0)
                snprintf(size, sizeof(size), "%lld bytes long", r->total);
            xop_fail(x, NXL_ERR_NOT_FOUND,
                     "%s: %s: the object '%s' is only %s: %zu of the %zu bytes from offset %llu "
                     "are there (check the offset and length, or nxl_mem_query() for the size)",
                     o->tname, what, r->k->key, size, r->pos, r->len, (unsigned long long)r->off);
        }
        break;
    case R_MPU_CREATE: {
        char id[512];
        xml_tag(r->resp, r->resp_len, "UploadId", id, sizeof(id));
        if (!id[0]) {
            req_what(r, what, sizeof(what));
            xop_fail(x, NXL_ERR_BACKEND, "%s: %s: the server's answer has no UploadId (is the "
                                         "endpoint an S3 server?)", o->tname, what);
            break;
        }
        m->upload_id = strdup(id);
        if (!m->upload_id)
            xop_fail(x, NXL_ERR_UNKNOWN, "%s: out of memory", o->tname);
        else if (x->failed)
            mpu_abort(m);
        else if (mpu_parts(m) < 0)
            xop_fail(x, NXL_ERR_UNKNOWN, "%s: out of memory", o->tname);
        break;
    }
    case R_MPU_PART:
        if (o->api == OBJ_S3) {
            m->etags[r->part - 1] = strdup(r->etag);
            if (!r->etag[0]) {
                req_what(r, what, sizeof(what));
                xop_fail(x, NXL_ERR_BACKEND, "%s: %s: the server's answer has no ETag", o->tname,
                         what);
                break;
            }
        }
        if (++m->parts_done == m->nparts && !x->failed && mpu_complete(m) < 0)
            xop_fail(x, NXL_ERR_UNKNOWN, "%s: out of memory", o->tname);
        break;
    case R_MPU_COMPLETE:
        /* S3 may answer 200 with an error in the body */
        if (r->resp && memmem(r->resp, r->resp_len, "<Error>", 7)) {
            char code[96], msg[256];
            xml_tag(r->resp, r->resp_len, "Code", code, sizeof(code));
            xml_tag(r->resp, r->resp_len, "Message", msg, sizeof(msg));
            req_what(r, what, sizeof(what));
            xop_fail(x, NXL_ERR_BACKEND, "%s: %s failed: %s: %s", o->tname, what, code, msg);
            break;
        }
        m->done = true;
        break;
    case R_MPU_ABORT:
        free(m->upload_id);
        m->upload_id = NULL;
        break;
    default:
        break;
    }
}

static bool transient_code(const char *code)
{
    return !strcmp(code, "SlowDown") || !strcmp(code, "RequestTimeout") ||
           !strcmp(code, "InternalError") || !strcmp(code, "ServiceUnavailable") ||
           !strcmp(code, "ServerBusy") || !strcmp(code, "OperationTimedOut");
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    obj_req_t *r = arg;
    obj_t *o = r->o;
    if (r->x->failed) {
        req_finish(r);
    } else {
        req_enqueue(o, r, true);
    }
    pump(o);
}

/* A request ended with curl's result: success, retry, or failure. */
static void req_result(obj_t *o, obj_req_t *r, CURLcode rc)
{
    obj_xop_t *x = r->x;
    bool ok = (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && r->overrun)) && r->http >= 200 &&
              r->http < 300;
    if (x->failed && r->kind != R_MPU_ABORT && !(r->kind == R_MPU_CREATE && ok)) {
        req_finish(r);
        return;
    }
    if (ok) {
        req_ok(r);
        req_finish(r);
        return;
    }
    char what[400], why[1200];
    req_what(r, what, sizeof(what));
    nxl_status_t st = NXL_ERR_BACKEND;
    bool transient = false;
    bool az = o->api == OBJ_AZURE;
    if (rc != CURLE_OK) {
        if (r->bad) {
            snprintf(why, sizeof(why), "%s: %s: %s", o->tname, what, r->bad_why);
        } else if (rc == CURLE_OPERATION_TIMEDOUT) {
            /* silent for its bound, or no connection in connect_timeout_ms:
             * final, so that a server that stops answering fails the
             * transfer in about the time the user set */
            if (r->stalled)
                snprintf(why, sizeof(why), "%s: %s: nothing moved for %ld s (timeout_s) on "
                                           "attempt %u; a silent server is not retried (is the "
                                           "server at %s up? check endpoint=%s)",
                         o->tname, what, obj_silence_s(o, r), r->attempts + 1, o->endpoint,
                         az ? " or the connection string" : " or AWS_ENDPOINT_URL");
            else
                snprintf(why, sizeof(why), "%s: %s: no connection within %ld ms "
                                           "(connect_timeout_ms) on attempt %u; not retried (is "
                                           "the server at %s up? check endpoint=%s)",
                         o->tname, what, o->connect_ms, r->attempts + 1, o->endpoint,
                         az ? " or the connection string" : " or AWS_ENDPOINT_URL");
        } else {
            transient = true;
            snprintf(why, sizeof(why), "%s: %s: %s after %u attempt%s (is the server at %s up? "
                                       "check endpoint=%s)",
                     o->tname, what, curl_easy_strerror(rc), r->attempts + 1,
                     r->attempts ? "s" : "", o->endpoint,
                     az ? " or the connection string" : " or AWS_ENDPOINT_URL");
        }
    } else {
        char code[96], msg[300], size[48];
        xml_tag(r->resp, r->resp_len, "Code", code, sizeof(code));
        xml_tag(r->resp, r->resp_len, "Message", msg, sizeof(msg));
        if (!code[0])
            snprintf(code, sizeof(code), "%s", r->err_hdr);
        /* Azure puts line breaks and a request id into its messages */
        char *nl = strpbrk(msg, "\r\n");
        if (nl)
            *nl = 0;
        const char *hint = "";
        if (r->http == 404) {
            st = NXL_ERR_NOT_FOUND;
            hint = strstr(code, "Bucket") || strstr(code, "Container")
                       ? (az ? "; check container= (it must exist)" : "; check bucket= (it must exist)")
                       : strstr(code, "Upload") ? ""
                                                : "; check the key (nxl_mem_query() says whether "
                                                  "an object exists)";
        } else if (r->http == 401 || r->http == 403) {
            st = NXL_ERR_NOT_ALLOWED;
            hint = az ? "; check account/account_key or the connection string "
                        "(AZURE_STORAGE_CONNECTION_STRING) and the container's permissions"
                      : "; check access_key/secret_key/session_token (AWS_ACCESS_KEY_ID, "
                        "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), region= and the bucket's "
                        "permissions";
        } else if (r->http == 416) {
            st = NXL_ERR_NOT_FOUND;
            char asz[48];
            xml_tag(r->resp, r->resp_len, "ActualObjectSize", asz, sizeof(asz));
            snprintf(size, sizeof(size), "%s", asz[0] ? asz : "");
            if (!size[0] && r->total >= 0)
                snprintf(size, sizeof(size), "%lld", r->total);
            snprintf(why, sizeof(why), "%s: %s: the object '%s' is only %s%s long: nothing at "
                                       "offset %llu (check the offset, or nxl_mem_query() for the "
                                       "size)",
                     o->tname, what, r->k->key, size[0] ? size : "shorter than that",
                     size[0] ? " bytes" : "", (unsigned long long)r->off);
        } else if (r->http >= 500 || transient_code(code)) {
            transient = true;
            hint = "; the server kept failing";
        }
        if (r->http != 416)
            snprintf(why, sizeof(why), "%s: %s failed: HTTP %ld%s%s%s%.300s after %u attempt%s%s",
                     o->tname, what, r->http, code[0] ? " " : "", code, msg[0] ? ": " : "", msg,
                     r->attempts + 1, r->attempts ? "s" : "", hint);
    }
    if (transient && r->attempts < o->retries && !nxlt_op_canceled(x->op) &&
        r->kind != R_MPU_ABORT) {
        unsigned ms = OBJ_RETRY_MIN_MS << (r->attempts < 8 ? r->attempts : 8);
        if (ms > OBJ_RETRY_MAX_MS)
            ms = OBJ_RETRY_MAX_MS;
        unsigned jitter;
        if (getrandom(&jitter, sizeof(jitter), GRND_NONBLOCK) != sizeof(jitter))
            jitter = (unsigned)rand();
        ms = ms / 2 + jitter % (ms / 2 + 1);
        r->attempts++;
        o->n_retry++;
        nxlt_log(o->ctx, NXL_LOG_INFO, "%s; retrying in %u ms", why, ms);
        curl_slist_free_all(r->hdr);
        r->hdr = NULL;
        if (!r->retry_ev)
            r->retry_ev = evtimer_new(nxlt_base(o->ctx), on_retry, r);
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        if (r->retry_ev && evtimer_add(r->retry_ev, &tv) == 0) {
            r->state = RQ_RETRY;
            return;
        }
    }
    if (r->kind == R_MPU_ABORT) {
        nxlt_log(o->ctx, NXL_LOG_WARN, "%s (its parts may stay on the server until a lifecycle "
                 "rule removes them)", why);
        req_finish(r);
        return;
    }
    xop_fail(x, st, "%s", why);
    req_finish(r);
}

/* nxlt_http_done_fn: r's handle has left the multi handle. */
static void req_done(void *easy, int result, void *priv, void *arg)
{
    obj_t *o = arg;
    obj_req_t *r = priv;
    o->inflight--;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &r->http);
    long nconn = 0;
    if (curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &nconn) == CURLE_OK)
        o->n_conn += (uint64_t)nconn;
    curl_easy_cleanup(easy);
    r->easy = NULL;
    curl_slist_free_all(r->hdr);
    r->hdr = NULL;
    r->state = RQ_DONE;
    req_result(o, r, (CURLcode)result);
    pump(o);
}

static int req_start(obj_t *o, obj_req_t *r)
{
    CURL *e = curl_easy_init();
    if (!e || req_setup(o, r, e) < 0) {
        if (e)
            curl_easy_cleanup(e);
        return -1;
    }
    if (nxlt_http_add(o->http, e) != 0) {
        curl_easy_cleanup(e);
        curl_slist_free_all(r->hdr);
        r->hdr = NULL;
        r->easy = NULL;
        return -1;
    }
    r->state = RQ_INFLIGHT;
    r->stalled = false;
    r->moved_us = nxlt_now_us();
    r->moved_bytes = 0;
    o->inflight++;
    o->n_req++;
    return 0;
}

static void pump(obj_t *o)
{
    obj_req_t *r;
    while (!o->closing && o->inflight < o->max_conns && (r = TAILQ_FIRST(&o->queue))) {
        TAILQ_REMOVE(&o->queue, r, qlink);
        r->state = RQ_DONE; /* taken: no sweep touches it */
        obj_xop_t *x = r->x;
        if (!x->failed && nxlt_op_canceled(x->op))
            xop_fail(x, NXL_ERR_CANCELED, "%s: %s canceled", o->tname,
                     x->write ? "WRITE" : "READ");
        if (x->failed && r->kind != R_MPU_ABORT) {
            req_finish(r);
            continue;
        }
        if (req_start(o, r) < 0) {
            char what[400];
            req_what(r, what, sizeof(what));
            if (r->kind != R_MPU_ABORT)
                xop_fail(x, NXL_ERR_UNKNOWN, "%s: %s could not start (out of memory)", o->tname,
                         what);
            req_finish(r);
        }
    }
}

/* ------------------------------------------------------------ transfers */

static void xop_finish(obj_xop_t *x)
{
    obj_t *o = x->o;
    LIST_REMOVE(x, link);
    nxlt_log(o->ctx, NXL_LOG_DEBUG, "%s: %s done: %s", o->tname, x->write ? "WRITE" : "READ",
             x->failed ? x->why : "ok");
    nxlt_op_done(x->op, x->failed ? x->st : NXL_SUCCESS, x->failed ? x->why : NULL);
    while (!LIST_EMPTY(&x->mpus)) {
        obj_mpu_t *m = LIST_FIRST(&x->mpus);
        LIST_REMOVE(m, link);
        for (unsigned i = 0; m->etags && i < m->nparts; i++)
            free(m->etags[i]);
        free(m->etags);
        free(m->upload_id);
        key_put(m->k);
        free(m);
    }
    free(x);
    if (LIST_EMPTY(&o->xops) && o->tick)
        evtimer_del(o->tick);
}

/* Takes r out of curl, the queue or its retry timer and finishes it. */
static void req_drop(obj_t *o, obj_req_t *r)
{
    if (r->state == RQ_INFLIGHT) {
        nxlt_http_remove(o->http, r->easy);
        curl_easy_cleanup(r->easy);
        r->easy = NULL;
        o->inflight--;
    } else if (r->state == RQ_QUEUED) {
        TAILQ_REMOVE(&o->queue, r, qlink);
    } else if (r->state == RQ_RETRY) {
        evtimer_del(r->retry_ev);
    } else {
        return; /* being handled by its caller */
    }
    req_finish(r);
}

/* The transfer fails (first failure wins): nothing more of it starts, its
 * GETs and PUTs in flight are taken out of curl, open multipart uploads are
 * aborted once the requests of theirs in flight have answered (a part still
 * arriving when the abort is processed may be stored after it, and S3 says
 * to abort again then); it completes once the aborts answered. */
static void xop_fail(obj_xop_t *x, nxl_status_t st, const char *fmt, ...)
{
    obj_t *o = x->o;
    if (!x->failed) {
        x->failed = true;
        x->st = st;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->why, sizeof(x->why), fmt, ap);
        va_end(ap);
        nxlt_log(o->ctx, NXL_LOG_INFO, "%s", x->why);
    }
    x->active++; /* hold: not finished inside the sweep */
    obj_req_t *r, *next;
    for (r = LIST_FIRST(&x->reqs); r; r = next) {
        next = LIST_NEXT(r, xlink);
        bool mpu_inflight = r->mpu && r->state == RQ_INFLIGHT;
        if (r->kind != R_MPU_ABORT && !mpu_inflight)
            req_drop(o, r);
    }
    obj_mpu_t *m;
    LIST_FOREACH(m, &x->mpus, link)
    mpu_abort(m);
    xop_release(x);
    pump(o);
}

/* The request in flight that moved nothing for its bound, or NULL. What
 * moved is what curl sent to and received from the socket (a body taken
 * into curl's upload buffer in one piece may drain slowly), besides the
 * callbacks' notes. */
static obj_req_t *stalled_req(obj_t *o, uint64_t now)
{
    obj_xop_t *x;
    obj_req_t *r;
    LIST_FOREACH(x, &o->xops, link)
    LIST_FOREACH(r, &x->reqs, xlink)
    {
        if (r->state != RQ_INFLIGHT)
            continue;
        curl_off_t up = 0, down = 0;
        curl_easy_getinfo(r->easy, CURLINFO_SIZE_UPLOAD_T, &up);
        curl_easy_getinfo(r->easy, CURLINFO_SIZE_DOWNLOAD_T, &down);
        if ((int64_t)(up + down) != r->moved_bytes) {
            r->moved_bytes = (int64_t)(up + down);
            r->moved_us = now;
        } else if (now > r->moved_us &&
                   now - r->moved_us >= (uint64_t)obj_silence_s(o, r) * 1000000) {
            return r;
        }
    }
    return NULL;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    obj_t *o = arg;
    obj_xop_t *x, *next;
    for (x = LIST_FIRST(&o->xops); x; x = next) {
        next = LIST_NEXT(x, link);
        if (!x->failed && nxlt_op_canceled(x->op))
            xop_fail(x, NXL_ERR_CANCELED, "%s: %s canceled", o->tname,
                     x->write ? "WRITE" : "READ");
    }
    /* silent requests: out of curl, failed as curl's timeout (not retried);
     * each may finish transfers and start requests, so the walk starts over */
    obj_req_t *r;
    while ((r = stalled_req(o, nxlt_now_us()))) {
        CURL *e = r->easy;
        nxlt_http_remove(o->http, e);
        r->stalled = true;
        req_done(e, CURLE_OPERATION_TIMEDOUT, r, o);
    }
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    pump(arg);
}

static nxl_status_t post(void *state, nxlt_op_t *op, const nxlt_xfer_t *t)
{
    obj_t *o = state;
    if (o->closing) {
        nxlt_error(o->ctx, "%s: the transport is shutting down", o->tname);
        return NXL_ERR_NOT_ALLOWED;
    }
    if (t->conn != o) {
        nxlt_error(o->ctx, "%s: moves data only within the agent (its own name as the remote "
                           "agent)", o->tname);
        return NXL_ERR_NOT_SUPPORTED;
    }
    if (t->ltype != NXL_DRAM || t->rtype != NXL_OBJ) {
        nxlt_error(o->ctx, "%s: moves DRAM (the local list) to and from OBJ (the list prepared "
                           "against the agent itself), not %s and %s",
                   o->tname, nxl_mem_name(t->ltype), nxl_mem_name(t->rtype));
        return NXL_ERR_NOT_SUPPORTED;
    }
    bool write = t->op == NXL_WRITE;
    for (size_t i = 0; i < t->n; i++) {
        const nxlt_iov_t *v = &t->iov[i];
        obj_key_t *k = v->rkey;
        if (!k) {
            nxlt_error(o->ctx, "%s: element %zu has no registered object", o->tname, i);
            return NXL_ERR_NOT_SUPPORTED;
        }
        if (write && v->raddr != 0) {
            nxlt_error(o->ctx, "%s: element %zu writes object '%s' at offset %llu: objects are "
                               "written whole (a WRITE element starts at offset 0 and becomes "
                               "the object); write the whole object, or one object per block",
                       o->tname, i, k->key, (unsigned long long)v->raddr);
            return NXL_ERR_NOT_SUPPORTED;
        }
        if (write && v->len > o->threshold && (v->len + o->part - 1) / o->part > OBJ_MAX_PARTS) {
            nxlt_error(o->ctx, "%s: element %zu (%zu bytes) needs more than %u parts of %zu "
                               "bytes; raise part_size",
                       o->tname, i, v->len, OBJ_MAX_PARTS, o->part);
            return NXL_ERR_INVALID_PARAM;
        }
    }
    obj_xop_t *x = calloc(1, sizeof(*x));
    if (!x) {
        nxlt_error(o->ctx, "%s: out of memory for a transfer of %zu elements", o->tname, t->n);
        return NXL_ERR_UNKNOWN;
    }
    x->o = o;
    x->op = op;
    x->write = write;
    LIST_INIT(&x->reqs);
    LIST_INIT(&x->mpus);
    LIST_INSERT_HEAD(&o->xops, x, link);
    x->active++; /* hold while building */
    bool oom = false;
    for (size_t i = 0; i < t->n && !oom; i++) {
        const nxlt_iov_t *v = &t->iov[i];
        obj_key_t *k = v->rkey;
        if (!write) {
            for (size_t at = 0; at < v->len && !oom; at += o->part) {
                obj_req_t *r = req_new(x, R_GET, k, i);
                if (!r) {
                    oom = true;
                    break;
                }
                r->buf = (char *)v->laddr + at;
                r->off = v->raddr + at;
                r->len = v->len - at < o->part ? v->len - at : o->part;
                req_enqueue(o, r, false);
            }
        } else if (v->len <= o->threshold) {
            obj_req_t *r = req_new(x, R_PUT, k, i);
            if (!r) {
                oom = true;
                break;
            }
            r->buf = v->laddr;
            r->len = v->len;
            req_enqueue(o, r, false);
        } else {
            obj_mpu_t *m = calloc(1, sizeof(*m));
            if (!m) {
                oom = true;
                break;
            }
            m->x = x;
            m->k = k;
            k->refs++;
            m->elem = i;
            m->buf = v->laddr;
            m->len = v->len;
            m->part = o->part;
            m->nparts = (unsigned)((v->len + o->part - 1) / o->part);
            LIST_INSERT_HEAD(&x->mpus, m, link);
            if (o->api == OBJ_AZURE) {
                if (mpu_parts(m) < 0)
                    oom = true;
            } else {
                m->etags = calloc(m->nparts, sizeof(*m->etags));
                obj_req_t *r = m->etags ? req_new(x, R_MPU_CREATE, k, i) : NULL;
                if (!r) {
                    oom = true;
                    break;
                }
                r->mpu = m;
                req_enqueue(o, r, false);
            }
        }
    }
    if (oom) {
        /* nothing started yet: undo */
        obj_req_t *r;
        while ((r = LIST_FIRST(&x->reqs))) {
            TAILQ_REMOVE(&o->queue, r, qlink);
            LIST_REMOVE(r, xlink);
            key_put(r->k);
            free(r);
        }
        while (!LIST_EMPTY(&x->mpus)) {
            obj_mpu_t *m = LIST_FIRST(&x->mpus);
            LIST_REMOVE(m, link);
            free(m->etags);
            key_put(m->k);
            free(m);
        }
        LIST_REMOVE(x, link);
        free(x);
        nxlt_error(o->ctx, "%s: out of memory for a transfer of %zu elements", o->tname, t->n);
        return NXL_ERR_UNKNOWN;
    }
    o->n_xfer++;
    if (o->tick && !evtimer_pending(o->tick, NULL)) {
        struct timeval tv = {0, OBJ_CANCEL_TICK_MS * 1000};
        evtimer_add(o->tick, &tv);
    }
    /* start on the next turn: callbacks (and what they post) batch up, and
     * nothing can complete inside this call */
    event_active(o->kick, EV_TIMEOUT, 0);
    xop_release(x); /* an empty transfer completes here, held until post returns */
    return NXL_SUCCESS;
}

static nxl_status_t notif_send(void *state, nxlt_op_t *op, void *conn, const void *msg,
                               size_t len)
{
    obj_t *o = state;
    nxlt_error(o->ctx, "%s: carries no notifications", o->tname);
    return NXL_ERR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------ blocking requests */

/* Runs r on the instance's blocking handle (nxl_mem_query, teardown). */
static CURLcode sync_run(obj_t *o, obj_req_t *r, long timeout_ms)
{
    if (!o->sync && !(o->sync = curl_easy_init()))
        return CURLE_OUT_OF_MEMORY;
    curl_easy_reset(o->sync);
    if (req_setup(o, r, o->sync) < 0)
        return CURLE_OUT_OF_MEMORY;
    curl_easy_setopt(o->sync, CURLOPT_TIMEOUT_MS, timeout_ms);
    CURLcode rc = curl_easy_perform(o->sync);
    curl_easy_getinfo(o->sync, CURLINFO_RESPONSE_CODE, &r->http);
    curl_slist_free_all(r->hdr);
    r->hdr = NULL;
    r->easy = NULL;
    return rc;
}

static nxl_status_t query(void *state, nxl_mem_t type, const nxl_desc_t *d, nxl_query_t *res)
{
    obj_t *o = state;
    memset(res, 0, sizeof(*res));
    if (type != NXL_OBJ) {
        nxlt_error(o->ctx, "%s: answers queries about OBJ, not %s", o->tname, nxl_mem_name(type));
        return NXL_ERR_NOT_SUPPORTED;
    }
    obj_key_t k = {0};
    nxl_status_t st = meta_key(o, d, "nxl_mem_query", &k.key);
    if (st != NXL_SUCCESS)
        return st;
    if (key_url(o, k.key, &k.url, &k.path) < 0) {
        free(k.key);
        nxlt_error(o->ctx, "%s: out of memory", o->tname);
        return NXL_ERR_UNKNOWN;
    }
    obj_req_t r = {.o = o, .kind = R_HEAD, .k = &k, .total = -1};
    CURLcode rc = sync_run(o, &r, o->timeout_s * 1000);
    char nm[300];
    oname(o, &k, nm, sizeof(nm));
    if (rc != CURLE_OK) {
        nxlt_error(o->ctx, "%s: nxl_mem_query of %s: %s (is the server at %s up? check "
                           "endpoint=)", o->tname, nm, curl_easy_strerror(rc), o->endpoint);
        st = NXL_ERR_BACKEND;
    } else if (r.http >= 200 && r.http < 300) {
        curl_off_t cl = -1;
        curl_easy_getinfo(o->sync, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        res->exists = 1;
        res->size = cl > 0 ? (uint64_t)cl : 0;
    } else if (r.http == 404) {
        /* does not exist: a result, not an error */
    } else if (r.http == 401 || r.http == 403) {
        nxlt_error(o->ctx, "%s: nxl_mem_query of %s: HTTP %ld %s (access denied); check the "
                           "credentials and the %s's permissions", o->tname, nm, r.http,
                   r.err_hdr, o->api == OBJ_AZURE ? "container" : "bucket");
        st = NXL_ERR_NOT_ALLOWED;
    } else {
        nxlt_error(o->ctx, "%s: nxl_mem_query of %s: the server answered HTTP %ld %s", o->tname,
                   nm, r.http, r.err_hdr);
        st = NXL_ERR_BACKEND;
    }
    free(r.resp);
    free(k.key);
    free(k.url);
    free(k.path);
    return st;
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
            if (r->state == RQ_INFLIGHT) {
                nxlt_http_remove(o->http, r->easy);
                curl_easy_cleanup(r->easy);
                o->inflight--;
                parts_cut |= r->kind == R_MPU_PART;
            } else if (r->state == RQ_QUEUED) {
                TAILQ_REMOVE(&o->queue, r, qlink);
            }
            LIST_REMOVE(r, xlink);
            if (r->retry_ev)
                event_free(r->retry_ev);
            curl_slist_free_all(r->hdr);
            free(r->body);
            free(r->resp);
            key_put(r->k);
            free(r);
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
                CURLcode rc = sync_run(o, &r, 1000);
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
        xop_finish(x);
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
    if (o->tick)
        event_free(o->tick);
    if (o->kick)
        event_free(o->kick);
    if (o->regs.v) {
        for (nxlt_reg_t *r; (r = nxlt_regtab_pop(&o->regs));)
            key_put(NXLT_REG_OF(r, obj_key_t, reg));
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
             obj_azure_available() ? "; Azure Blob with api=azure (Shared Key)"
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

static nxl_status_t create_api(nxlt_ctx_t *ctx, const nxl_param_t *params, size_t n, void **out,
                               obj_api_t api, const char *tname)
{
    static const char *const known[] = {
        "api",         "endpoint",          "bucket",     "container",     "region",
        "access_key",  "secret_key",        "session_token", "addressing", "max_connections",
        "part_size",   "multipart_threshold", "ca_file",  "verify_tls",    "retries",
        "timeout_s",   "connect_timeout_ms", "connection_string", "account", "account_key"};
    for (size_t i = 0; i < n; i++) {
        bool ok = false;
        for (size_t k = 0; k < sizeof(known) / sizeof(*known); k++)
            ok |= !strcmp(params[i].key, known[k]);
        if (!ok) {
            nxlt_error(ctx, "%s: unknown parameter '%s' (endpoint, bucket, region, access_key, "
                            "secret_key, session_token, addressing=path|virtual, "
                            "max_connections, part_size, multipart_threshold, ca_file, "
                            "verify_tls, retries, timeout_s, connect_timeout_ms, api=s3|azure, "
                            "container, connection_string, account, account_key)",
                       tname, params[i].key);
            return NXL_ERR_INVALID_PARAM;
        }
    }
    const char *v = param(params, n, "api");
    if (v) {
        if (!strcmp(v, "s3"))
            api = OBJ_S3;
        else if (!strcmp(v, "azure"))
            api = OBJ_AZURE;
        else {
            nxlt_error(ctx, "%s: api=%s: use s3 or azure", tname, v);
            return NXL_ERR_INVALID_PARAM;
        }
    }
    if (api == OBJ_AZURE && !obj_azure_available()) {
        nxlt_error(ctx, "%s: Azure Blob needs Shared Key signing, and this build has no "
                        "libcrypto (apt-get install libssl-dev, then configure again)", tname);
        return NXL_ERR_NOT_SUPPORTED;
    }
    obj_t *o = calloc(1, sizeof(*o));
    if (!o) {
        nxlt_error(ctx, "%s: out of memory", tname);
        return NXL_ERR_UNKNOWN;
    }
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
    unsigned long long x;
    bool thr_set = false;
    char why[300] = "";

    if ((v = param(params, n, "max_connections"))) {
        if (parse_size(v, 1, 1024, &x) < 0) {
            nxlt_error(ctx, "%s: max_connections=%s: a number from 1 to 1024", tname, v);
            goto bad;
        }
        o->max_conns = (unsigned)x;
    }
    if ((v = param(params, n, "part_size"))) {
        if (parse_size(v, 64 << 10, 5ull << 30, &x) < 0) {
            nxlt_error(ctx, "%s: part_size=%s: bytes from 64K to 5G (S3 wants parts of 5 MiB "
                            "or more but the last)", tname, v);
            goto bad;
        }
        o->part = (size_t)x;
    }
    if ((v = param(params, n, "multipart_threshold"))) {
        if (parse_size(v, 0, 5ull << 30, &x) < 0) {
            nxlt_error(ctx, "%s: multipart_threshold=%s: bytes up to 5G (one PUT at most)", tname,
                       v);
            goto bad;
        }
        o->threshold = (size_t)x;
        thr_set = true;
    }
    if (!thr_set && o->threshold < o->part)
        o->threshold = o->part;
    if ((v = param(params, n, "retries"))) {
        if (parse_size(v, 0, 20, &x) < 0) {
            nxlt_error(ctx, "%s: retries=%s: a number from 0 to 20", tname, v);
            goto bad;
        }
        o->retries = (unsigned)x;
    }
    if ((v = param(params, n, "timeout_s"))) {
        if (parse_size(v, 1, 3600, &x) < 0) {
            nxlt_error(ctx, "%s: timeout_s=%s: seconds from 1 to 3600 without a byte moving",
                       tname, v);
            goto bad;
        }
        o->timeout_s = (long)x;
    }
    if ((v = param(params, n, "connect_timeout_ms"))) {
        if (parse_size(v, 1, 600000, &x) < 0) {
            nxlt_error(ctx, "%s: connect_timeout_ms=%s: milliseconds from 1 to 600000", tname, v);
            goto bad;
        }
        o->connect_ms = (long)x;
    }
    if ((v = param(params, n, "verify_tls")) && parse_bool(v, &o->verify_tls) < 0) {
        nxlt_error(ctx, "%s: verify_tls=%s: use 0 or 1", tname, v);
        goto bad;
    }
    o->ca_file = dup_or_null(param(params, n, "ca_file") ? param(params, n, "ca_file")
                                                         : env("AWS_CA_BUNDLE", NULL));
    o->endpoint = dup_or_null(param(params, n, "endpoint"));
    const char *bucket = param(params, n, "bucket");
    if (!bucket)
        bucket = param(params, n, "container");

    if (api == OBJ_S3) {
        if (!o->endpoint)
            o->endpoint = dup_or_null(env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"));
        if (!bucket)
            bucket = env("AWS_DEFAULT_BUCKET", NULL);
        const char *region = param(params, n, "region");
        if (!region)
            region = env("AWS_REGION", "AWS_DEFAULT_REGION");
        o->region = strdup(region ? region : "us-east-1");
        o->access_key = dup_or_null(param(params, n, "access_key") ? param(params, n, "access_key")
                                                                   : env("AWS_ACCESS_KEY_ID", NULL));
        o->secret_key = dup_or_null(param(params, n, "secret_key")
                                        ? param(params, n, "secret_key")
                                        : env("AWS_SECRET_ACCESS_KEY", NULL));
        o->token = dup_or_null(param(params, n, "session_token")
                                   ? param(params, n, "session_token")
                                   : env("AWS_SESSION_TOKEN", NULL));
        if (o->access_key && !o->secret_key) {
            nxlt_error(ctx, "%s: an access key without a secret key: give secret_key (or "
                            "AWS_SECRET_ACCESS_KEY)", tname);
            goto bad;
        }
        o->sigv4 = xsprintf("aws:amz:%s:s3", o->region);
    } else {
        const char *cs = param(params, n, "connection_string");
        const char *acct = param(params, n, "account"), *key = param(params, n, "account_key");
        if (!cs && !acct)
            cs = env("AZURE_STORAGE_CONNECTION_STRING", NULL);
        if (cs) {
            if (obj_azure_connstr(o, cs, why, sizeof(why)) < 0) {
                nxlt_error(ctx, "%s: connection_string: %s", tname, why);
                goto bad;
            }
        } else {
            if (!acct)
                acct = env("AZURE_STORAGE_ACCOUNT", NULL);
            if (!key)
                key = env("AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCESS_KEY");
            if (!acct || !key) {
                nxlt_error(ctx, "%s: no credentials: give connection_string (or "
                                "AZURE_STORAGE_CONNECTION_STRING), or account and account_key "
                                "(AZURE_STORAGE_ACCOUNT, AZURE_STORAGE_KEY)", tname);
                goto bad;
            }
            o->account = strdup(acct);
            if (obj_azure_set_key(o, key) < 0) {
                nxlt_error(ctx, "%s: account_key is not the base64 key Azure gives", tname);
                goto bad;
            }
            if (!o->endpoint)
                o->endpoint = xsprintf("https://%s.blob.core.windows.net", acct);
        }
    }
    if (!bucket || !*bucket || strchr(bucket, '/')) {
        nxlt_error(ctx, "%s: no %s: give %s=NAME%s", tname, api == OBJ_AZURE ? "container" : "bucket",
                   api == OBJ_AZURE ? "container" : "bucket",
                   api == OBJ_AZURE ? "" : " (or AWS_DEFAULT_BUCKET)");
        goto bad;
    }
    o->bucket = strdup(bucket);
    const char *addr = param(params, n, "addressing");
    if (addr && strcmp(addr, "path") && strcmp(addr, "virtual")) {
        nxlt_error(ctx, "%s: addressing=%s: use path or virtual", tname, addr);
        goto bad;
    }
    bool given_ep = o->endpoint != NULL;
    if (!o->endpoint)
        o->endpoint = xsprintf("https://s3.%s.amazonaws.com", o->region);
    size_t el = o->endpoint ? strlen(o->endpoint) : 0;
    while (el && o->endpoint[el - 1] == '/')
        o->endpoint[--el] = 0;
    const char *sep = o->endpoint ? strstr(o->endpoint, "://") : NULL;
    if (!sep || (strncmp(o->endpoint, "http://", 7) && strncmp(o->endpoint, "https://", 8))) {
        nxlt_error(ctx, "%s: endpoint '%s' is not an http:// or https:// URL", tname,
                   o->endpoint ? o->endpoint : "");
        goto bad;
    }
    o->virt = api == OBJ_S3 && (addr ? !strcmp(addr, "virtual") : !given_ep);
    if (o->virt)
        o->base = xsprintf("%.*s%s.%s", (int)(sep + 3 - o->endpoint), o->endpoint, o->bucket,
                           sep + 3);
    else
        o->base = xsprintf("%s/%s", o->endpoint, o->bucket);

    if (getrandom(&o->token_id, sizeof(o->token_id), GRND_NONBLOCK) != sizeof(o->token_id))
        o->token_id = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL) ^ (uintptr_t)o;
    int regs = nxlt_regtab_init(&o->regs);
    o->http = nxlt_http_new(nxlt_base(ctx), req_done, o);
    o->tick = event_new(nxlt_base(ctx), -1, EV_PERSIST, on_tick, o);
    o->kick = event_new(nxlt_base(ctx), -1, 0, on_kick, o);
    if (regs < 0 || !o->http || !o->tick || !o->kick || !o->base || !o->bucket ||
        (api == OBJ_S3 && !o->sigv4)) {
        nxlt_error(ctx, "%s: out of memory (or libcurl failed to initialise)", tname);
        destroy(o);
        return NXL_ERR_BACKEND;
    }
    CURLM *multi = nxlt_http_multi(o->http);
    curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)o->max_conns);
    curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long)o->max_conns);
    snprintf(o->desc, sizeof(o->desc), "%s at %s, %s %s (%s), %u connections, parts of %zu KiB "
             "above %zu KiB",
             api == OBJ_AZURE ? "Azure Blob" : "S3", o->endpoint,
             api == OBJ_AZURE ? "container" : "bucket", o->bucket,
             api == OBJ_AZURE ? "Shared Key" : o->virt ? "virtual-host" : "path-style",
             o->max_conns, o->part >> 10, o->threshold >> 10);
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
    .nparams = sizeof(obj_params) / sizeof(*obj_params), .destroy = destroy, .reg = reg,           \
    .dereg = dereg, .pack_key = pack_key, .conn_info = conn_info, .load_conn = load_conn,          \
    .load_key = load_key, .unload_key = unload_key, .unload_conn = unload_conn, .post = post,      \
    .notif_send = notif_send, .describe = describe, .query = query, .quiesce = quiesce

/* One transport, two dialects: S3 by default, Azure Blob with api=azure. */
NXLT_MODULE_EXPORT const nxlt_ops_t nxlt_obj_ops = {
    .name = "OBJ",
    .probe = probe,
    .create = create_obj,
    OBJ_OPS_COMMON,
};
