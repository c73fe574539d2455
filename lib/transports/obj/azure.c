/* SPDX-License-Identifier: BSD-3-Clause */
/* The OBJ transport's Azure Blob dialect: Shared Key authorisation
 * (HMAC-SHA256 of the canonical request with the account key, from
 * OpenSSL's libcrypto) and connection strings as Azure's tools read them.
 * The requests themselves (Put Blob, Put Block, Put Block List, ranged Get
 * Blob, Get Blob Properties) are made in req.c.
 *
 * https://learn.microsoft.com/rest/api/storageservices/authorize-with-shared-key */
#include "obj.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#ifdef NXL_HAVE_OBJ_AZURE
#include <openssl/evp.h>
#include <openssl/hmac.h>
#endif

/* The storage service version we speak. */
#define AZ_VERSION "2021-12-02"

int nxl_obj_azure_available(void)
{
#ifdef NXL_HAVE_OBJ_AZURE
    return 1;
#else
    return 0;
#endif
}

#ifdef NXL_HAVE_OBJ_AZURE

int nxl_obj_azure_set_key(obj_t *o, const char *b64)
{
    size_t n = strlen(b64), len = 0;
    if (n == 0 || n % 4 || n / 4 * 3 > sizeof(o->akey) + 2)
        return -1;
    unsigned char *key = nxli_b64_decode(b64, &len);
    if (!key)
        return -1;
    if (len > sizeof(o->akey)) {
        free(key);
        return -1;
    }
    memcpy(o->akey, key, len);
    o->akey_len = len;
    memset(key, 0, len);
    free(key);
    return 0;
}

typedef struct {
    char *name, *value;
} az_kv_t;

static int kv_cmp(const void *a, const void *b)
{
    return strcmp(((const az_kv_t *)a)->name, ((const az_kv_t *)b)->name);
}

static int append(char **buf, size_t *len, size_t *cap, const char *s)
{
    size_t n = strlen(s);
    if (*len + n + 1 > *cap) {
        size_t c = (*len + n + 1) * 2;
        char *b = realloc(*buf, c);
        if (!b)
            return -1;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, s, n + 1);
    *len += n;
    return 0;
}

int nxl_obj_azure_sign(obj_t *o, const char *method, const char *path, const char *const *query,
                       const char *const *xms, size_t content_length, struct curl_slist **hdr)
{
    char date[64], line[512];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);

    /* the x-ms-* headers, lower-case names, sorted */
    az_kv_t h[16];
    size_t nh = 0;
    h[nh++] = (az_kv_t){strdup("x-ms-date"), strdup(date)};
    h[nh++] = (az_kv_t){strdup("x-ms-version"), strdup(AZ_VERSION)};
    for (size_t i = 0; xms && xms[i] && nh < 16; i += 2)
        h[nh++] = (az_kv_t){strdup(xms[i]), strdup(xms[i + 1])};
    az_kv_t q[8];
    size_t nq = 0;
    for (size_t i = 0; query && query[i] && nq < 8; i += 2)
        q[nq++] = (az_kv_t){strdup(query[i]), strdup(query[i + 1])};
    int rc = 0;
    for (size_t i = 0; i < nh; i++)
        if (!h[i].name || !h[i].value)
            rc = -1;
    for (size_t i = 0; i < nq; i++)
        if (!q[i].name || !q[i].value)
            rc = -1;
    qsort(h, nh, sizeof(*h), kv_cmp);
    qsort(q, nq, sizeof(*q), kv_cmp);

    char *sts = NULL;
    size_t len = 0, cap = 0;
    char clen[32] = "";
    if (content_length)
        snprintf(clen, sizeof(clen), "%zu", content_length);
    /* VERB, Content-Encoding, -Language, -Length, -MD5, -Type, Date,
     * If-Modified-Since, If-Match, If-None-Match, If-Unmodified-Since, Range */
    snprintf(line, sizeof(line), "%s\n\n\n%s\n\n\n\n\n\n\n\n\n", method, clen);
    rc |= append(&sts, &len, &cap, line);
    for (size_t i = 0; i < nh; i++) {
        snprintf(line, sizeof(line), "%s:%s\n", h[i].name, h[i].value);
        rc |= append(&sts, &len, &cap, line);
    }
    snprintf(line, sizeof(line), "/%s", o->account);
    rc |= append(&sts, &len, &cap, line);
    rc |= append(&sts, &len, &cap, path);
    for (size_t i = 0; i < nq; i++) {
        snprintf(line, sizeof(line), "\n%s:%s", q[i].name, q[i].value);
        rc |= append(&sts, &len, &cap, line);
    }

    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    if (rc == 0 && !HMAC(EVP_sha256(), o->akey, (int)o->akey_len, (const unsigned char *)sts, len,
                         mac, &maclen))
        rc = -1;
    char *sig = rc == 0 ? nxli_b64_encode(mac, maclen) : NULL;
    if (!sig)
        rc = -1;

    for (size_t i = 0; i < nh && rc == 0; i++) {
        snprintf(line, sizeof(line), "%s: %s", h[i].name, h[i].value);
        struct curl_slist *l = curl_slist_append(*hdr, line);
        if (!l)
            rc = -1;
        else
            *hdr = l;
    }
    if (rc == 0) {
        snprintf(line, sizeof(line), "Authorization: SharedKey %s:%s", o->account, sig);
        struct curl_slist *l = curl_slist_append(*hdr, line);
        if (!l)
            rc = -1;
        else
            *hdr = l;
    }
    for (size_t i = 0; i < nh; i++) {
        free(h[i].name);
        free(h[i].value);
    }
    for (size_t i = 0; i < nq; i++) {
        free(q[i].name);
        free(q[i].value);
    }
    free(sts);
    free(sig);
    return rc;
}

#else /* !NXL_HAVE_OBJ_AZURE */

int nxl_obj_azure_set_key(obj_t *o, const char *b64)
{
    return -1;
}

int nxl_obj_azure_sign(obj_t *o, const char *method, const char *path, const char *const *query,
                       const char *const *xms, size_t content_length, struct curl_slist **hdr)
{
    return -1;
}

#endif

/* The emulator's well-known development account (published by Microsoft). */
#define DEV_ACCOUNT "devstoreaccount1"
#define DEV_KEY                                                                                    \
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

int nxl_obj_azure_connstr(obj_t *o, const char *cs, char *why, size_t cap)
{
    char *s = strdup(cs), *save = NULL;
    if (!s) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    char *proto = NULL, *name = NULL, *key = NULL, *blob = NULL, *suffix = NULL;
    bool dev = false;
    for (char *kv = strtok_r(s, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
        while (*kv == ' ')
            kv++;
        if (!*kv)
            continue;
        char *eq = strchr(kv, '=');
        if (!eq) {
            snprintf(why, cap, "connection string field '%.40s' is not Name=Value", kv);
            free(s);
            return -1;
        }
        *eq = 0;
        char *v = eq + 1;
        if (!strcasecmp(kv, "DefaultEndpointsProtocol"))
            proto = v;
        else if (!strcasecmp(kv, "AccountName"))
            name = v;
        else if (!strcasecmp(kv, "AccountKey"))
            key = v;
        else if (!strcasecmp(kv, "BlobEndpoint"))
            blob = v;
        else if (!strcasecmp(kv, "EndpointSuffix"))
            suffix = v;
        else if (!strcasecmp(kv, "UseDevelopmentStorage"))
            dev = !strcasecmp(v, "true");
        else if (!strcasecmp(kv, "SharedAccessSignature")) {
            snprintf(why, cap, "connection strings with a SharedAccessSignature are not "
                               "supported (Shared Key only: give AccountName and AccountKey)");
            free(s);
            return -1;
        }
        /* QueueEndpoint, TableEndpoint, FileEndpoint, ...: not ours */
    }
    if (dev) {
        /* what Azure's tools read UseDevelopmentStorage=true as */
        if (!name)
            name = DEV_ACCOUNT;
        if (!key)
            key = DEV_KEY;
    }
    if (!name || !key) {
        snprintf(why, cap, "the connection string names no %s (AccountName=...;AccountKey=...)",
                 !name ? "AccountName" : "AccountKey");
        free(s);
        return -1;
    }
    free(o->account);
    o->account = strdup(name);
    if (nxl_obj_azure_set_key(o, key) < 0) {
        snprintf(why, cap, "the connection string's AccountKey is not base64");
        free(s);
        return -1;
    }
    if (!o->endpoint) {
        if (blob)
            o->endpoint = strdup(blob);
        else if (dev)
            o->endpoint = strdup("http://127.0.0.1:10000/" DEV_ACCOUNT);
        else {
            char buf[512];
            snprintf(buf, sizeof(buf), "%s://%s.blob.%s", proto ? proto : "https", name,
                     suffix ? suffix : "core.windows.net");
            o->endpoint = strdup(buf);
        }
    }
    free(s);
    return 0;
}
