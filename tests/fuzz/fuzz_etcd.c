/* SPDX-License-Identifier: BSD-3-Clause */
/* libFuzzer harness: etcd's answers as they come from its JSON gateway,
 * through the parsers the etcd client uses (lib/engine/etcd_wire.c), and the
 * values read from etcd through the check every value passes before a
 * byte of it reaches cJSON or a transport. The first byte picks:
 *   0-3  a whole answer: kv/range, kv/put, lease/grant, lease/keepalive
 *   4    a watch stream, delivered in pieces (the second byte sets their
 *        size) through the line splitter, each line parsed as a message
 *   5    a value as stored (etcd's base64 of it) opened by an agent with a
 *        secret and by one without
 *   6    the input as metadata, signed for a key, one bit of the signed
 *        value flipped where the second byte says (or none): opened, it
 *        must load exactly when nothing was flipped, and a replay of it
 *        after a newer one must be refused */
#include "config.h"
#include "engine/internal.h"

#include <string.h>

#define CHECK(c) ((c) ? (void)0 : abort())
#define KEY "/nxl/agents/peer/metadata"

static nxl_agent_t *agent(bool secret)
{
    static nxl_agent_t *a[2];
    if (!a[secret]) {
        nxl_agent_config_t c;
        nxl_agent_config_init(&c);
        c.name = secret ? "fuzz-s" : "fuzz";
        c.log_level = NXL_LOG_NONE;
        c.auth_secret = secret ? "a secret of at least sixteen bytes" : NULL;
        if (nxl_agent_create(&c, &a[secret]) != NXL_SUCCESS)
            abort();
    }
    return a[secret];
}

static void check_resp(const nxli_etcd_resp_t *r)
{
    CHECK(r->revision >= 0 && r->revision < ((int64_t)1 << 62));
    CHECK(strlen(r->lease) < sizeof(r->lease));
    for (size_t i = 0; i < r->n; i++) {
        const nxli_etcd_kv_t *kv = &r->kv[i];
        CHECK(kv->key && kv->key[0] && kv->mod_rev >= 0);
        CHECK(!kv->del || !kv->value);
        if (kv->value)
            (void)strlen(kv->value);
    }
}

static void parse(nxli_etcd_kind_t kind, const char *buf, size_t len)
{
    nxli_etcd_resp_t r;
    char why[400];
    if (nxli_etcd_parse(kind, buf, len, &r, why, sizeof(why)) == 0) {
        check_resp(&r);
        nxli_etcd_resp_free(&r);
    } else {
        CHECK(why[0] && r.n == 0 && !r.kv);
    }
}

static void line(void *arg, const char *l, size_t n)
{
    CHECK(n && !memchr(l, '\n', n));
    parse(NXLI_ETCD_WATCH, l, n);
}

static void open_value(nxl_agent_t *a, const char *b64)
{
    void *blob;
    size_t len;
    uint64_t last = 0;
    char why[400] = "";
    nxl_status_t st = nxli_etcd_open(a, KEY, b64, &last, &blob, &len, why, sizeof(why));
    if (st == NXL_SUCCESS) {
        CHECK(blob);
        char name[300];
        if (nxl_md_load(a, blob, len, name, sizeof(name)) == NXL_SUCCESS)
            nxl_md_invalidate(a, name);
        free(blob);
    } else {
        CHECK(!blob && why[0] && (st == NXL_ERR_NOT_ALLOWED || st == NXL_ERR_MISMATCH));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const char *p = (const char *)data + 2;
    size_t n = size - 2;
    switch (data[0] % 7) {
    case 0: case 1: case 2: case 3: {
        /* an exact-size heap copy: ASan sees any read past the end */
        char *b = malloc(n ? n : 1);
        memcpy(b, p, n);
        static const nxli_etcd_kind_t kinds[] = {NXLI_ETCD_RANGE, NXLI_ETCD_PUT, NXLI_ETCD_GRANT,
                                                 NXLI_ETCD_KEEPALIVE};
        parse(kinds[data[0] % 7], b, n);
        free(b);
        break;
    }
    case 4: {
        /* as on_write() and feed_lines() see it: pieces appended, whole
         * lines taken off the front (each byte scanned for a newline once) */
        size_t piece = 1 + data[1] % 97, len = 0, scanned = 0;
        char *buf = malloc(n + 1);
        for (size_t off = 0; off < n; off += piece) {
            size_t k = n - off < piece ? n - off : piece;
            memcpy(buf + len, p + off, k);
            len += k;
            len = nxli_etcd_lines(buf, len, &scanned, line, NULL);
            CHECK(!memchr(buf, '\n', len));
        }
        free(buf);
        break;
    }
    case 5: {
        char *s = strndup(p, n);
        open_value(agent(true), s);
        open_value(agent(false), s);
        free(s);
        break;
    }
    case 6: {
        nxl_agent_t *a = agent(true);
        size_t sl;
        unsigned char *v = nxli_etcd_seal(a, KEY, p, n, &sl);
        CHECK(v && sl == NXLI_ETCD_SIG_LEN + NXLI_AUTH_TRAILER + n);
        size_t bit = data[1] * 7u; /* 0..1785: inside the value, or (≥ its bits) none */
        bool flipped = bit < sl * 8;
        if (flipped)
            v[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        char *b64 = nxli_b64_encode(v, sl);
        void *blob;
        size_t len;
        uint64_t last = 0;
        char why[400];
        nxl_status_t st = nxli_etcd_open(a, KEY, b64, &last, &blob, &len, why, sizeof(why));
        CHECK(flipped ? st == NXL_ERR_NOT_ALLOWED : st == NXL_SUCCESS);
        if (st == NXL_SUCCESS) {
            CHECK(len == n && !memcmp(blob, p, n) && last);
            free(blob);
            /* the same value read again: fine; after a newer one: a replay */
            CHECK(nxli_etcd_open(a, KEY, b64, &last, &blob, &len, why, sizeof(why)) ==
                  NXL_SUCCESS);
            free(blob);
            last++;
            CHECK(nxli_etcd_open(a, KEY, b64, &last, &blob, &len, why, sizeof(why)) ==
                      NXL_ERR_NOT_ALLOWED && !blob);
            /* and under another key: not the publisher's */
            uint64_t l2 = 0;
            CHECK(nxli_etcd_open(a, "/nxl/agents/other/metadata", b64, &l2, &blob, &len, why,
                                 sizeof(why)) == NXL_ERR_NOT_ALLOWED);
        }
        free(b64);
        free(v);
        break;
    }
    }
    return 0;
}
