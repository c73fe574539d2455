/* SPDX-License-Identifier: BSD-3-Clause */
/* The OBJ transport's objects: registration by key, the keys and connection
 * info it hands out and loads, and nxl_mem_query (a blocking HEAD). */
#include "obj.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MAGIC 0x314b424fu  /* "OBK1" */
#define CONN_MAGIC 0x3143424fu /* "OBC1" */

static char obj_dram_md;

#include "../common/blob_wire.h" /* conn info and keys: magic, token, registration id */
typedef nxlt_blob24_t obj_blob_t;

void nxl_obj_key_put(obj_key_t *k)
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
    char *enc = nxl_obj_url_enc(key, strlen(key), true);
    if (!enc)
        return -1;
    *url = nxl_obj_xsprintf("%s/%s", o->base, enc);
    const char *p = strstr(o->base, "://");
    p = p ? strchr(p + 3, '/') : NULL;
    *path = nxl_obj_xsprintf("%s/%s", p ? p : "", enc);
    free(enc);
    if (!*url || !*path) {
        free(*url);
        free(*path);
        return -1;
    }
    return 0;
}

nxl_status_t nxl_obj_reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **out)
{
    obj_t *o = state;
    if (type == NXL_DRAM) {
        *out = &obj_dram_md;
        return NXL_SUCCESS;
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
        nxl_obj_key_put(k);
        nxlt_error(o->ctx, "%s: out of memory", o->tname);
        return NXL_ERR_UNKNOWN;
    }
    *out = k;
    return NXL_SUCCESS;
}

void nxl_obj_dereg(void *state, void *md)
{
    obj_t *o = state;
    if (!md || md == &obj_dram_md)
        return;
    nxlt_regtab_del(&o->regs, &((obj_key_t *)md)->reg);
    nxl_obj_key_put(md);
}

nxl_status_t nxl_obj_pack_key(void *state, void *md, void **buf, size_t *len)
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

nxl_status_t nxl_obj_conn_info(void *state, void **buf, size_t *len)
{
    obj_t *o = state;
    return nxlt_blob24_new(CONN_MAGIC, o->token_id, 0, buf, len) ? NXL_ERR_UNKNOWN : NXL_SUCCESS;
}

nxl_status_t nxl_obj_load_conn(void *state, const char *agent, const void *info, size_t len,
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

void nxl_obj_unload_conn(void *state, void *conn) {}

nxl_status_t nxl_obj_load_key(void *state, void *conn, const void *buf, size_t len, void **rkey)
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

void nxl_obj_unload_key(void *state, void *rkey)
{
    if (rkey)
        nxl_obj_key_put(rkey);
}

nxl_status_t nxl_obj_query(void *state, nxl_mem_t type, const nxl_desc_t *d, nxl_query_t *res)
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
    CURLcode rc = nxl_obj_sync_run(o, &r, o->timeout_s * 1000);
    char nm[300];
    nxl_obj_oname(o, &k, nm, sizeof(nm));
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
