/* SPDX-License-Identifier: BSD-3-Clause */
/* etcd's v3 JSON as nxl reads it (responses, watch events, the streamed
 * lines of a watch) and the signature nxl seals a metadata value with:
 * pure functions of their input, which the discovery client (etcd.c) and
 * the fuzzing harness (tests/fuzz/fuzz_etcd.c) use. */
#include "internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ parsing */

#define NUM_MAX ((int64_t)1 << 62) /* revisions and TTLs: no overflow adding to one */

/* An int64 of etcd's (a decimal string in its JSON, or a number), |v| <
 * 2^62; absent: 0. false when present and not such a number. */
static bool jnum(const cJSON *o, const char *k, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    *out = 0;
    if (!v)
        return true;
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (!*s || *end || errno || x >= NUM_MAX || x <= -NUM_MAX)
            return false;
        *out = x;
        return true;
    }
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (!(d < (double)NUM_MAX && d > -(double)NUM_MAX))
            return false; /* NaN too */
        *out = (int64_t)d;
        return true;
    }
    return false;
}

/* kv (etcd's mvccpb.KeyValue) into e: false when it has no usable key (not
 * base64, empty, a NUL in it) */
static bool kv_take(const cJSON *kv, nxli_etcd_kv_t *e, char *why, size_t cap)
{
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(kv, "key");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(kv, "value");
    size_t kl;
    char *key = cJSON_IsString(k) ? nxli_b64_decode(k->valuestring, &kl) : NULL;
    if (!key || !kl || memchr(key, 0, kl)) {
        free(key);
        return false;
    }
    key[kl] = 0; /* nxli_b64_decode leaves room for it */
    if (!jnum(kv, "mod_revision", &e->mod_rev) || e->mod_rev < 0) {
        free(key);
        snprintf(why, cap, "a key's mod_revision is not a revision");
        return false;
    }
    e->key = key;
    e->value = cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
    if (cJSON_IsString(v) && !e->value) {
        free(key);
        return false;
    }
    return true;
}

static int take_kvs(const cJSON *arr, bool events, nxli_etcd_resp_t *r, char *why, size_t cap)
{
    if (!arr)
        return 0;
    if (!cJSON_IsArray(arr)) {
        snprintf(why, cap, "its \"%s\" is not an array", events ? "events" : "kvs");
        return -1;
    }
    int n = cJSON_GetArraySize(arr);
    if (n <= 0)
        return 0;
    r->kv = calloc((size_t)n, sizeof(*r->kv));
    if (!r->kv) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        const cJSON *kv = events ? cJSON_GetObjectItemCaseSensitive(it, "kv") : it;
        nxli_etcd_kv_t *e = &r->kv[r->n];
        if (!cJSON_IsObject(kv) || !kv_take(kv, e, why, cap))
            continue;
        const cJSON *type = events ? cJSON_GetObjectItemCaseSensitive(it, "type") : NULL;
        e->del = cJSON_IsString(type) && !strcmp(type->valuestring, "DELETE");
        if (e->del) {
            free(e->value);
            e->value = NULL;
        }
        r->n++;
    }
    return 0;
}

void nxli_etcd_resp_free(nxli_etcd_resp_t *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->kv[i].key);
        free(r->kv[i].value);
    }
    free(r->kv);
    memset(r, 0, sizeof(*r));
}

int nxli_etcd_parse(nxli_etcd_kind_t kind, const char *buf, size_t len, nxli_etcd_resp_t *r,
                    char *why, size_t cap)
{
    memset(r, 0, sizeof(*r));
    size_t at;
    const char *bad = nxli_json_bad_control(buf, len, &at);
    if (bad) {
        snprintf(why, cap, "an answer that is not valid JSON: %s (offset %zu)", bad, at);
        return -1;
    }
    cJSON *j = len ? cJSON_ParseWithLength(buf, len) : NULL;
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        snprintf(why, cap, "an answer that is not a JSON object");
        return -1;
    }
    int rc = -1;
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (err) {
        /* {"error": "...", "message": "..."}; in a stream {"error": {"message": ...}} */
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(j, "message");
        if (!cJSON_IsString(msg))
            msg = cJSON_GetObjectItemCaseSensitive(err, "message");
        snprintf(why, cap, "%.300s",
                 cJSON_IsString(msg) && msg->valuestring[0] ? msg->valuestring : "an error");
        goto out;
    }
    const cJSON *o = j;
    if (kind == NXLI_ETCD_WATCH || kind == NXLI_ETCD_KEEPALIVE) {
        o = cJSON_GetObjectItemCaseSensitive(j, "result");
        if (!o && kind == NXLI_ETCD_KEEPALIVE) {
            rc = 0; /* no result: the lease is gone (ttl 0) */
            goto out;
        }
        if (!cJSON_IsObject(o)) {
            snprintf(why, cap, "no \"result\" object");
            goto out;
        }
    }
    const cJSON *hdr = cJSON_GetObjectItemCaseSensitive(o, "header");
    if (hdr) {
        if (!cJSON_IsObject(hdr) || !jnum(hdr, "revision", &r->revision) || r->revision < 0) {
            snprintf(why, cap, "its header's revision is not a revision");
            goto out;
        }
        r->has_header = true;
    }
    switch (kind) {
    case NXLI_ETCD_RANGE:
        rc = take_kvs(cJSON_GetObjectItemCaseSensitive(o, "kvs"), false, r, why, cap);
        break;
    case NXLI_ETCD_PUT:
        rc = 0;
        break;
    case NXLI_ETCD_GRANT:
    case NXLI_ETCD_KEEPALIVE: {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "ID");
        size_t il = cJSON_IsString(id) ? strlen(id->valuestring) : 0;
        if (kind == NXLI_ETCD_GRANT &&
            (!il || il >= sizeof(r->lease) || strspn(id->valuestring, "-0123456789") != il)) {
            snprintf(why, cap, "etcd granted a lease without an ID");
            break;
        }
        if (kind == NXLI_ETCD_GRANT)
            memcpy(r->lease, id->valuestring, il + 1);
        if (!jnum(o, "TTL", &r->ttl)) {
            snprintf(why, cap, "its TTL is not a number");
            break;
        }
        rc = 0;
        break;
    }
    case NXLI_ETCD_WATCH:
        r->canceled = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "canceled"));
        rc = take_kvs(cJSON_GetObjectItemCaseSensitive(o, "events"), true, r, why, cap);
        break;
    }
out:
    cJSON_Delete(j);
    if (rc != 0)
        nxli_etcd_resp_free(r);
    return rc;
}

size_t nxli_etcd_lines(char *buf, size_t len, size_t *scanned,
                       void (*line)(void *arg, const char *l, size_t n), void *arg)
{
    char *start = buf, *nl;
    size_t from = *scanned < len ? *scanned : len;
    while ((nl = memchr(buf + from, '\n', len - from))) {
        if (nl > start)
            line(arg, start, (size_t)(nl - start));
        start = nl + 1;
        from = (size_t)(start - buf);
    }
    size_t rest = len - (size_t)(start - buf);
    memmove(buf, start, rest);
    *scanned = rest;
    return rest;
}

/* ------------------------------------------------------------ signing */

/* what the MAC covers before the blob: the magic and the key (with its NUL:
 * the key's end is unambiguous) */
static unsigned char *sig_hdr(const char *key, size_t *hl)
{
    size_t kl = strlen(key) + 1;
    unsigned char *h = malloc(NXLI_ETCD_SIG_LEN + kl);
    if (h) {
        memcpy(h, NXLI_ETCD_SIG, NXLI_ETCD_SIG_LEN);
        memcpy(h + NXLI_ETCD_SIG_LEN, key, kl);
    }
    *hl = NXLI_ETCD_SIG_LEN + kl;
    return h;
}

void *nxli_etcd_seal(nxl_agent_t *a, const char *key, const void *blob, size_t len,
                     size_t *out_len)
{
    size_t pre = a->auth ? NXLI_ETCD_SIG_LEN + NXLI_AUTH_TRAILER : 0, hl;
    unsigned char *v = malloc(pre + len + 1), *h = NULL;
    if (!v)
        return NULL;
    memcpy(v + pre, blob, len);
    if (a->auth) {
        memcpy(v, NXLI_ETCD_SIG, NXLI_ETCD_SIG_LEN);
        if (!(h = sig_hdr(key, &hl)) ||
            nxli_auth_sign(a, h, hl, v + pre, len, NULL, v + NXLI_ETCD_SIG_LEN) != 0) {
            free(h);
            free(v);
            return NULL;
        }
        free(h);
    }
    *out_len = pre + len;
    return v;
}

nxl_status_t nxli_etcd_open(nxl_agent_t *a, const char *key, const char *b64, uint64_t *last_ts,
                            void **blob, size_t *len, char *why, size_t cap)
{
    size_t n;
    unsigned char *v = nxli_b64_decode(b64, &n);
    *blob = NULL;
    if (!v) {
        snprintf(why, cap, "its value is not base64");
        return NXL_ERR_MISMATCH;
    }
    size_t pre = NXLI_ETCD_SIG_LEN + NXLI_AUTH_TRAILER;
    bool sig = n >= pre && !memcmp(v, NXLI_ETCD_SIG, NXLI_ETCD_SIG_LEN);
    if (a->auth) {
        uint64_t ts = 0;
        size_t hl;
        unsigned char *h = sig ? sig_hdr(key, &hl) : NULL;
        if (!sig)
            snprintf(why, cap, "its value is not signed (the publisher has no secret configured)");
        else if (!h)
            snprintf(why, cap, "out of memory");
        int ok = h && nxli_auth_check_stored(a, h, hl, v + pre, n - pre, v + NXLI_ETCD_SIG_LEN,
                                             &ts, why, cap) == 0;
        free(h);
        if (ok && ts < *last_ts) {
            snprintf(why, cap, "its value was signed %.3f s before the one accepted from this key "
                     "earlier (an old value put back: a replay)", (double)(*last_ts - ts) / 1e6);
            ok = 0;
        }
        if (!ok) {
            free(v);
            return NXL_ERR_NOT_ALLOWED;
        }
        *last_ts = ts;
    }
    if (sig) {
        /* without a secret this agent trusts etcd: the signature is not its to check */
        memmove(v, v + pre, n - pre);
        n -= pre;
    }
    *blob = v;
    *len = n;
    return NXL_SUCCESS;
}
