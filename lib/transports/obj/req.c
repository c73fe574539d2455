/* SPDX-License-Identifier: BSD-3-Clause */
/* The OBJ transport's HTTP requests: one request set up on a curl handle
 * (S3 or Azure), its answer, its retries with backoff, the queue bounded by
 * max_connections, and blocking requests on the instance's own handle. */
#include "obj.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

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

/* Seconds r may move nothing before it fails: timeout_s; an abort (after a
 * failure or a cancel, when the server may be the reason) at most
 * OBJ_ABORT_SILENCE_S, as teardown's aborts. */
long nxl_obj_silence_s(const obj_t *o, const obj_req_t *r)
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
    if (keep && nxl_growbuf_append(&r->resp, &r->resp_len, &r->resp_cap, p, keep) < 0)
        return 0;
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
    nxl_obj_oname(o, r->k, nm, sizeof(nm));
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

/* The headers of r: Range, S3's (signed by curl through CURLOPT_AWS_SIGV4)
 * or Azure's with their Shared Key signature, and Expect; into *out. */
static int req_headers(obj_t *o, obj_req_t *r, CURL *e, const char *method, const char *range,
                       const char *const *azq, size_t body_len, struct curl_slist **out)
{
    const char *azh[6] = {NULL};
    size_t nh = 0;
    struct curl_slist *h = NULL;
#define HDR(s)                                                                                     \
    do {                                                                                           \
        struct curl_slist *l_ = curl_slist_append(h, (s));                                         \
        if (!l_)                                                                                   \
            goto oom;                                                                              \
        h = l_;                                                                                    \
    } while (0)
    if (o->api == OBJ_AZURE) {
        if (r->kind == R_GET) {
            azh[nh++] = "x-ms-range";
            azh[nh++] = range;
        }
        if (r->kind == R_PUT) {
            azh[nh++] = "x-ms-blob-type";
            azh[nh++] = "BlockBlob";
        }
        if (nxl_obj_azure_sign(o, method, r->k->path, azq, azh, body_len, &h) < 0)
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
    *out = h;
    return 0;
oom:
    curl_slist_free_all(h);
    return -1;
}

/* The options of r's method (and of a GET's buffer), its callbacks, the
 * instance's timeouts and TLS settings; r's answer state reset. */
static void req_options(obj_t *o, obj_req_t *r, CURL *e, const char *method)
{
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
}

/* Sets up an easy handle for r (its URL, method, headers, signing). */
static int req_setup(obj_t *o, obj_req_t *r, CURL *e)
{
    const obj_key_t *k = r->k;
    char q[512] = "";
    const char *azq[6] = {NULL};
    char range[80] = "", blockid[64] = "", blockenc[200] = "";
    const char *method = "GET";
    size_t body_len = 0;
    bool az = o->api == OBJ_AZURE;

    if (r->kind == R_MPU_PART && az) {
        if (nxl_obj_block_id(r->part, blockid, sizeof(blockid)) < 0)
            return -1;
        char *enc = nxl_obj_url_enc(blockid, strlen(blockid), false);
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
    char *url = nxl_obj_xsprintf("%s%s", k->url, q);
    if (!url)
        return -1;
    curl_easy_setopt(e, CURLOPT_URL, url);
    free(url); /* curl copies it */

    struct curl_slist *h = NULL;
    if (req_headers(o, r, e, method, range, azq, body_len, &h) < 0)
        return -1;
    r->hdr = h;
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    req_options(o, r, e, method);
    return 0;
}

obj_req_t *nxl_obj_req_new(obj_xop_t *x, int kind, obj_key_t *k, size_t elem)
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

/* Frees r and what it holds, its key reference included; r is in no list. */
void nxl_obj_req_free(obj_req_t *r)
{
    nxlt_timer_free(r->retry_ev);
    curl_slist_free_all(r->hdr);
    free(r->body);
    free(r->resp);
    nxl_obj_key_put(r->k);
    free(r);
}

/* r ends (done, failed, dropped): follow-ups are spawned before the
 * transfer's count drops. */
static void req_finish(obj_req_t *r)
{
    obj_xop_t *x = r->x;
    obj_mpu_t *m = r->mpu;
    r->state = RQ_DONE;
    LIST_REMOVE(r, xlink);
    if (m && r->kind == R_MPU_PART) {
        m->active--;
        if (x->failed)
            nxl_obj_mpu_abort(m);
    }
    nxl_obj_req_free(r);
    nxl_obj_xop_release(x);
}

void nxl_obj_req_enqueue(obj_t *o, obj_req_t *r, bool head)
{
    r->state = RQ_QUEUED;
    if (head)
        TAILQ_INSERT_HEAD(&o->queue, r, qlink);
    else
        TAILQ_INSERT_TAIL(&o->queue, r, qlink);
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
            nxl_obj_xop_fail(x, NXL_ERR_NOT_FOUND,
                             "%s: %s: the object '%s' is only %s: %zu of the %zu bytes from "
                             "offset %llu are there (check the offset and length, or "
                             "nxl_mem_query() for the size)",
                             o->tname, what, r->k->key, size, r->pos, r->len,
                             (unsigned long long)r->off);
        }
        break;
    case R_MPU_CREATE: {
        char id[512];
        xml_tag(r->resp, r->resp_len, "UploadId", id, sizeof(id));
        if (!id[0]) {
            req_what(r, what, sizeof(what));
            nxl_obj_xop_fail(x, NXL_ERR_BACKEND, "%s: %s: the server's answer has no UploadId "
                             "(is the endpoint an S3 server?)", o->tname, what);
            break;
        }
        m->upload_id = strdup(id);
        if (!m->upload_id)
            nxl_obj_xop_fail(x, NXL_ERR_UNKNOWN, "%s: out of memory", o->tname);
        else if (x->failed)
            nxl_obj_mpu_abort(m);
        else if (nxl_obj_mpu_parts(m) < 0)
            nxl_obj_xop_fail(x, NXL_ERR_UNKNOWN, "%s: out of memory", o->tname);
        break;
    }
    case R_MPU_PART:
        if (o->api == OBJ_S3) {
            m->etags[r->part - 1] = strdup(r->etag);
            if (!r->etag[0]) {
                req_what(r, what, sizeof(what));
                nxl_obj_xop_fail(x, NXL_ERR_BACKEND, "%s: %s: the server's answer has no ETag",
                                 o->tname, what);
                break;
            }
        }
        if (++m->parts_done == m->nparts && !x->failed && nxl_obj_mpu_complete(m) < 0)
            nxl_obj_xop_fail(x, NXL_ERR_UNKNOWN, "%s: out of memory", o->tname);
        break;
    case R_MPU_COMPLETE:
        /* S3 may answer 200 with an error in the body */
        if (r->resp && memmem(r->resp, r->resp_len, "<Error>", 7)) {
            char code[96], msg[256];
            xml_tag(r->resp, r->resp_len, "Code", code, sizeof(code));
            xml_tag(r->resp, r->resp_len, "Message", msg, sizeof(msg));
            req_what(r, what, sizeof(what));
            nxl_obj_xop_fail(x, NXL_ERR_BACKEND, "%s: %s failed: %s: %s", o->tname, what, code,
                             msg);
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

static void on_retry(nxlt_timer_t *t, void *arg)
{
    obj_req_t *r = arg;
    obj_t *o = r->o;
    if (r->x->failed) {
        req_finish(r);
    } else {
        nxl_obj_req_enqueue(o, r, true);
    }
    nxl_obj_pump(o);
}

/* Why r failed with curl's error rc, into why; true when worth a retry (a
 * reset connection, say), false for a refused body, a silent server or one
 * not reached in connect_timeout_ms. */
static bool curl_why(obj_t *o, obj_req_t *r, CURLcode rc, const char *what, char *why,
                     size_t cap)
{
    const char *check = o->api == OBJ_AZURE ? " or the connection string" : " or AWS_ENDPOINT_URL";
    if (r->bad) {
        snprintf(why, cap, "%s: %s: %s", o->tname, what, r->bad_why);
        return false;
    }
    if (rc == CURLE_OPERATION_TIMEDOUT) {
        /* silent for its bound, or no connection in connect_timeout_ms:
         * final, so that a server that stops answering fails the
         * transfer in about the time the user set */
        if (r->stalled)
            snprintf(why, cap, "%s: %s: nothing moved for %ld s (timeout_s) on attempt %u; a "
                               "silent server is not retried (is the server at %s up? check "
                               "endpoint=%s)",
                     o->tname, what, nxl_obj_silence_s(o, r), r->attempts + 1, o->endpoint,
                     check);
        else
            snprintf(why, cap, "%s: %s: no connection within %ld ms (connect_timeout_ms) on "
                               "attempt %u; not retried (is the server at %s up? check "
                               "endpoint=%s)",
                     o->tname, what, o->connect_ms, r->attempts + 1, o->endpoint, check);
        return false;
    }
    snprintf(why, cap, "%s: %s: %s after %u attempt%s (is the server at %s up? check endpoint=%s)",
             o->tname, what, curl_easy_strerror(rc), r->attempts + 1, r->attempts ? "s" : "",
             o->endpoint, check);
    return true;
}

/* Why r's answer (HTTP, not 2xx) failed it, into why; its status, and in
 * *transient whether it is worth a retry (5xx, S3's SlowDown, ...). */
static nxl_status_t http_why(obj_t *o, obj_req_t *r, const char *what, char *why, size_t cap,
                             bool *transient)
{
    bool az = o->api == OBJ_AZURE;
    nxl_status_t st = NXL_ERR_BACKEND;
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
        char asz[48];
        xml_tag(r->resp, r->resp_len, "ActualObjectSize", asz, sizeof(asz));
        snprintf(size, sizeof(size), "%s", asz[0] ? asz : "");
        if (!size[0] && r->total >= 0)
            snprintf(size, sizeof(size), "%lld", r->total);
        snprintf(why, cap, "%s: %s: the object '%s' is only %s%s long: nothing at offset %llu "
                           "(check the offset, or nxl_mem_query() for the size)",
                 o->tname, what, r->k->key, size[0] ? size : "shorter than that",
                 size[0] ? " bytes" : "", (unsigned long long)r->off);
        return NXL_ERR_NOT_FOUND;
    } else if (r->http >= 500 || transient_code(code)) {
        *transient = true;
        hint = "; the server kept failing";
    }
    snprintf(why, cap, "%s: %s failed: HTTP %ld%s%s%s%.300s after %u attempt%s%s", o->tname, what,
             r->http, code[0] ? " " : "", code, msg[0] ? ": " : "", msg, r->attempts + 1,
             r->attempts ? "s" : "", hint);
    return st;
}

/* Schedules r again after a backoff with jitter; false when its retries
 * are spent, its transfer was canceled, or it is an abort. */
static bool req_retry(obj_t *o, obj_req_t *r, const char *why)
{
    if (r->attempts >= o->retries || nxlt_op_canceled(r->x->op) || r->kind == R_MPU_ABORT)
        return false;
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
        r->retry_ev = nxlt_timer_new(o->ctx, on_retry, r);
    if (!r->retry_ev)
        return false;
    nxlt_timer_start(r->retry_ev, (uint64_t)ms * 1000);
    r->state = RQ_RETRY;
    return true;
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
    if (rc != CURLE_OK)
        transient = curl_why(o, r, rc, what, why, sizeof(why));
    else
        st = http_why(o, r, what, why, sizeof(why), &transient);
    if (transient && req_retry(o, r, why))
        return;
    if (r->kind == R_MPU_ABORT) {
        nxlt_log(o->ctx, NXL_LOG_WARN, "%s (its parts may stay on the server until a lifecycle "
                 "rule removes them)", why);
        req_finish(r);
        return;
    }
    nxl_obj_xop_fail(x, st, "%s", why);
    req_finish(r);
}

/* nxlt_http_done_fn: r's handle has left the multi handle. */
void nxl_obj_req_done(void *easy, int result, void *priv, void *arg)
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
    nxl_obj_pump(o);
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

void nxl_obj_pump(obj_t *o)
{
    obj_req_t *r;
    while (!o->closing && o->inflight < o->max_conns && (r = TAILQ_FIRST(&o->queue))) {
        TAILQ_REMOVE(&o->queue, r, qlink);
        r->state = RQ_DONE; /* taken: no sweep touches it */
        obj_xop_t *x = r->x;
        if (!x->failed && nxlt_op_canceled(x->op))
            nxl_obj_xop_fail(x, NXL_ERR_CANCELED, "%s: %s canceled", o->tname,
                             x->write ? "WRITE" : "READ");
        if (x->failed && r->kind != R_MPU_ABORT) {
            req_finish(r);
            continue;
        }
        if (req_start(o, r) < 0) {
            char what[400];
            req_what(r, what, sizeof(what));
            if (r->kind != R_MPU_ABORT)
                nxl_obj_xop_fail(x, NXL_ERR_UNKNOWN, "%s: %s could not start (out of memory)",
                                 o->tname, what);
            req_finish(r);
        }
    }
}

/* Takes r out of curl, the queue or its retry timer; false when it is in
 * none of them (its caller is handling it). */
bool nxl_obj_req_detach(obj_t *o, obj_req_t *r)
{
    if (r->state == RQ_INFLIGHT) {
        nxlt_http_remove(o->http, r->easy);
        curl_easy_cleanup(r->easy);
        r->easy = NULL;
        o->inflight--;
    } else if (r->state == RQ_QUEUED) {
        TAILQ_REMOVE(&o->queue, r, qlink);
    } else if (r->state == RQ_RETRY) {
        nxlt_timer_stop(r->retry_ev);
    } else {
        return false; /* being handled by its caller */
    }
    return true;
}

/* Takes r out of curl, the queue or its retry timer and finishes it. */
void nxl_obj_req_drop(obj_t *o, obj_req_t *r)
{
    if (nxl_obj_req_detach(o, r))
        req_finish(r);
}

/* Runs r on the instance's blocking handle (nxl_mem_query, teardown). */
CURLcode nxl_obj_sync_run(obj_t *o, obj_req_t *r, long timeout_ms)
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
