/* SPDX-License-Identifier: BSD-3-Clause */
/* The OBJ transport against real servers started here: s3rver (S3 protocol,
 * with SigV4 verified by tests/s3rver-run.js) and azurite (Azure Blob,
 * Shared Key checked), see obj_util.h.
 *
 * S3: objects of 1 B to 256 MiB written and read back byte for byte (the
 * largest one case, multipart); 1,000 small objects in one transfer on at
 * most 16 connections; ranged reads, several ranges of one object in one
 * transfer, reads split into parallel ranges; multipart uploads; a missing
 * bucket, a missing key, a read past the end of an object; a wrong access
 * key and a wrong secret key; the server killed in the middle of a
 * transfer, and no server at all; a server that stops answering (S3 and
 * Azure: the "stopped" case); cancel in the middle of a multipart
 * upload and teardown with one in flight, with no parts left afterwards
 * (ListMultipartUploads and the server's directory); nxl_mem_query; no
 * wake-ups when idle; parameter errors. Cross-check: what nxl writes, curl
 * --aws-sigv4 and the AWS CLI (when installed) read back byte for byte, and
 * what they write nxl reads.
 *
 * Azure: block blobs small and large (Put Block / Put Block List), ranged
 * reads, query, missing blob and container, a wrong key, connection
 * strings; cross-checked with Microsoft's @azure/storage-blob both ways. */
#include "config.h"
#include "testlib.h"
#include "obj_util.h"

#include <sys/time.h>

static tl_srv_t s3;      /* shared by the suite (started in main) */
static tl_srv_t az;
static int have_az;
static char az_connstr[512];
static char stats_line[512];
static nxl_agent_t *g_agent;

static void log_cb(nxl_log_level_t lvl, const char *msg, void *arg)
{
    if (strstr(msg, "statistics"))
        snprintf(stats_line, sizeof(stats_line), "%s", msg);
    if (getenv("NXL_LOG_LEVEL"))
        fprintf(stderr, "nxl: %s\n", msg);
}

/* An agent with one OBJ (or AZURE) backend; params: key, value, ..., NULL,
 * after the server's defaults (which they override). */
static nxl_agent_t *agent_with(const char *tname, const char *const *extra)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "obj-test";
    c.log_level = getenv("NXL_LOG_LEVEL") ? -1 : NXL_LOG_INFO;
    c.log_cb = log_cb;
    nxl_agent_t *a = NULL;
    ck_assert_msg(nxl_agent_create(&c, &a) == NXL_SUCCESS, "agent: %s",
                  nxl_agent_last_error(NULL));
    nxl_param_t p[24];
    size_t n = 0;
    if (!strcmp(tname, "OBJ")) {
        p[n++] = (nxl_param_t){"endpoint", s3.endpoint};
        p[n++] = (nxl_param_t){"bucket", "nxl"};
        p[n++] = (nxl_param_t){"region", "us-east-1"};
        p[n++] = (nxl_param_t){"access_key", "S3RVER"};
        p[n++] = (nxl_param_t){"secret_key", "S3RVER"};
    } else { /* "AZURE": the OBJ transport speaking Azure Blob */
        p[n++] = (nxl_param_t){"api", "azure"};
        p[n++] = (nxl_param_t){"connection_string", az_connstr};
        p[n++] = (nxl_param_t){"container", "nxl"};
    }
    for (size_t i = 0; extra && extra[i]; i += 2)
        p[n++] = (nxl_param_t){extra[i], extra[i + 1]};
    nxl_status_t st = nxl_backend_create(a, "OBJ", p, n, NULL);
    ck_assert_msg(st == NXL_SUCCESS, "%s backend: %s", tname, nxl_agent_last_error(a));
    g_agent = a;
    return a;
}

static nxl_agent_t *s3_agent(const char *const *extra)
{
    return agent_with("OBJ", extra);
}

typedef tl_res_t res_t;
#define done_cb tl_done_cb

static void post(nxl_xfer_t *x, res_t *r)
{
    tl_post(g_agent, x, r);
}

#define wait_res tl_wait_res

#define reg_dram tl_reg_dram

/* registers bytes [0, len) of the object key as OBJ id */
static void reg_obj(nxl_agent_t *a, uint64_t id, const char *key, size_t len)
{
    nxl_desc_t d = {.addr = 0, .len = len, .dev_id = id, .meta = key, .meta_len = strlen(key)};
    nxl_status_t st = nxl_mem_register(a, NXL_OBJ, &d, 1, NULL);
    ck_assert_msg(st == NXL_SUCCESS, "OBJ registration of %s: %s", key, nxl_agent_last_error(a));
}

/* A transfer: DRAM bufs[i] (lens[i] bytes) <-> OBJ ids[i] at offs[i]. */
static nxl_xfer_t *make(nxl_agent_t *a, nxl_op_t op, char *const *bufs, const uint64_t *ids,
                        const uint64_t *offs, const size_t *lens, size_t n)
{
    nxl_desc_t *ld = calloc(n, sizeof(*ld)), *rd = calloc(n, sizeof(*rd));
    for (size_t i = 0; i < n; i++) {
        ld[i] = (nxl_desc_t){.addr = (uintptr_t)bufs[i], .len = lens[i]};
        rd[i] = (nxl_desc_t){.addr = offs ? offs[i] : 0, .len = lens[i], .dev_id = ids[i]};
    }
    nxl_dlist_t l = {NXL_DRAM, ld, n}, r = {NXL_OBJ, rd, n};
    nxl_xfer_t *x = NULL;
    nxl_status_t st = nxl_xfer_create(a, op, &l, &r, nxl_agent_name(a), NULL, &x);
    ck_assert_msg(st == NXL_SUCCESS, "xfer_create: %s", nxl_agent_last_error(a));
    ck_assert_msg(!strcmp(nxl_backend_name(nxl_xfer_backend(x)), "OBJ"),
                  "backend %s", nxl_backend_name(nxl_xfer_backend(x)));
    free(ld);
    free(rd);
    return x;
}

static nxl_status_t run1(nxl_agent_t *a, nxl_op_t op, char *buf, uint64_t id, uint64_t off,
                         size_t len, int ms, char *why, size_t cap)
{
    nxl_xfer_t *x = make(a, op, &buf, &id, &off, &len, 1);
    res_t r;
    post(x, &r);
    wait_res(a, &r, ms);
    if (why)
        snprintf(why, cap, "%s", r.why);
    nxl_xfer_release(x);
    return r.st;
}

/* filled: buffers a test writes out without filling them first must not
 * put uninitialised bytes on the wire (valgrind says so) */
static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    ck_assert(p != NULL);
    memset(p, 0xa5, n ? n : 1);
    return p;
}

/* n objects ids[i] = keys[i] of lens[i] bytes, registered with a, with
 * DRAM src[i] (filled with seed + i) and dst[i] (zeroed), both registered */
static void objs(nxl_agent_t *a, size_t n, char **src, char **dst, const uint64_t *ids,
                 const char *const *keys, const size_t *lens, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        src[i] = xmalloc(lens[i]);
        dst[i] = xmalloc(lens[i]);
        tl_fill(src[i], lens[i], seed + (uint32_t)i);
        memset(dst[i], 0, lens[i]);
        reg_dram(a, src[i], lens[i]);
        reg_dram(a, dst[i], lens[i]);
        reg_obj(a, ids[i], keys[i], lens[i]);
    }
}

/* The objects of objs() written from src in one transfer (*w), read back
 * into dst in another (*rd), ms each: both succeed (what names them) and
 * bring the same bytes. */
static void round_trip(nxl_agent_t *a, size_t n, char **src, char **dst, const uint64_t *ids,
                       const char *const *keys, const size_t *lens, int ms, const char *what,
                       nxl_xfer_t **w, nxl_xfer_t **rd)
{
    res_t r;
    *w = make(a, NXL_WRITE, src, ids, NULL, lens, n);
    post(*w, &r);
    wait_res(a, &r, ms);
    ck_assert_msg(r.st == NXL_SUCCESS, "%s write: %s", what, r.why);
    *rd = make(a, NXL_READ, dst, ids, NULL, lens, n);
    post(*rd, &r);
    wait_res(a, &r, ms);
    ck_assert_msg(r.st == NXL_SUCCESS, "%s read: %s", what, r.why);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(!memcmp(src[i], dst[i], lens[i]), "%s differs", keys[i]);
}

/* What the server holds of an object, read with curl --aws-sigv4 (another
 * client, with the same signing); -1 when curl failed. */
static long s3_get_curl(const char *key, const char *file)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "curl -sS -f --aws-sigv4 aws:amz:us-east-1:s3 -u S3RVER:S3RVER "
             "-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -o '%s' '%s/nxl/%s'",
             file, s3.endpoint, key);
    return system(cmd) == 0 ? 0 : -1;
}

static char *slurp(const char *file, size_t *len)
{
    FILE *f = fopen(file, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b)
        b[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void spit(const char *file, const void *buf, size_t len)
{
    FILE *f = fopen(file, "wb");
    ck_assert(f != NULL);
    ck_assert_int_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
}

/* ListMultipartUploads of bucket nxl (the launcher answers it): how many
 * uploads are open. */
static int open_uploads(const tl_srv_t *s)
{
    char cmd[512], out[64];
    snprintf(out, sizeof(out), "%s/uploads.xml", s->dir);
    snprintf(cmd, sizeof(cmd),
             "curl -sS -f --aws-sigv4 aws:amz:us-east-1:s3 -u S3RVER:S3RVER "
             "-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -o '%s' '%s/nxl?uploads='",
             out, s->endpoint);
    ck_assert_msg(system(cmd) == 0, "ListMultipartUploads failed");
    size_t len;
    char *x = slurp(out, &len);
    ck_assert(x != NULL);
    int n = 0;
    for (char *p = x; (p = strstr(p, "<UploadId>")); p++)
        n++;
    free(x);
    return n;
}

/* 1 when s3rver's directory holds parts of an upload not completed */
static int parts_on_disk(const tl_srv_t *s)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s/data/nxl/._S3rver_uploads' 2>/dev/null)\"",
             s->dir);
    return system(cmd) != 0;
}

/* ---------------------------------------------------------- S3: sizes */

static void roundtrip(nxl_agent_t *a, const char *key, uint64_t id, size_t len, uint32_t seed)
{
    char *src = xmalloc(len), *dst = xmalloc(len);
    tl_fill(src, len, seed);
    memset(dst, 0, len);
    reg_dram(a, src, len);
    reg_dram(a, dst, len);
    reg_obj(a, id, key, len);
    char why[1024];
    nxl_status_t st = run1(a, NXL_WRITE, src, id, 0, len, 120000, why, sizeof(why));
    ck_assert_msg(st == NXL_SUCCESS, "write %s (%zu bytes): %s", key, len, why);
    nxl_query_t q;
    nxl_desc_t d = {.dev_id = id, .meta = key, .meta_len = strlen(key)};
    ck_assert_int_eq(nxl_mem_query(a, NXL_OBJ, &d, 1, NULL, &q), NXL_SUCCESS);
    ck_assert_msg(q.exists && q.size == len, "query %s: exists %d size %llu", key, q.exists,
                  (unsigned long long)q.size);
    st = run1(a, NXL_READ, dst, id, 0, len, 120000, why, sizeof(why));
    ck_assert_msg(st == NXL_SUCCESS, "read %s: %s", key, why);
    ck_assert_msg(!memcmp(src, dst, len), "%s: read back differs", key);
    nxl_desc_t dd[2] = {{.addr = (uintptr_t)src, .len = len}, {.addr = (uintptr_t)dst, .len = len}};
    ck_assert_int_eq(nxl_mem_deregister(a, NXL_DRAM, dd, 2), NXL_SUCCESS);
    free(src);
    free(dst);
}

START_TEST(t_sizes)
{
    nxl_agent_t *a = s3_agent(NULL);
    static const size_t sizes[] = {1, 4 * KiB, 1 * MiB + 7, 16 * MiB, 20 * MiB + 3};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(*sizes); i++) {
        char key[64];
        snprintf(key, sizeof(key), "sizes/obj-%zu", sizes[i]);
        roundtrip(a, key, 100 + i, sizes[i], (uint32_t)i + 1);
    }
    nxl_agent_destroy(a);
    /* 20 MiB went up in 3 parts of 8 MiB: statistics count the requests */
    ck_assert_msg(strstr(stats_line, "OBJ statistics"), "stats: %s", stats_line);
}
END_TEST

START_TEST(t_256mib)
{
    /* the large case, once: multipart upload (parts of 8 MiB, 16 at a time)
     * and 32 ranged GETs in parallel */
    nxl_agent_t *a = s3_agent(NULL);
    uint64_t t0 = tl_now_ms();
    roundtrip(a, "big/256MiB", 7, 256 * MiB, 99);
    fprintf(stderr, "check_obj: 256 MiB written, queried and read back in %llu ms\n",
            (unsigned long long)(tl_now_ms() - t0));
    nxl_agent_destroy(a);
    ck_assert_int_eq(open_uploads(&s3), 0);
    ck_assert_msg(!parts_on_disk(&s3), "parts left in the server's directory");
}
END_TEST

/* ------------------------------------------------- 1,000 small objects */

START_TEST(t_thousand)
{
    enum { N = 1000, BS = 4096 };
    nxl_agent_t *a = s3_agent(NULL);
    char *src = xmalloc((size_t)N * BS), *dst = xmalloc((size_t)N * BS);
    tl_fill(src, (size_t)N * BS, 5);
    memset(dst, 0, (size_t)N * BS);
    reg_dram(a, src, (size_t)N * BS);
    reg_dram(a, dst, (size_t)N * BS);
    char *sb[N], *db[N];
    uint64_t ids[N];
    size_t lens[N];
    for (int i = 0; i < N; i++) {
        char key[64];
        snprintf(key, sizeof(key), "many/block-%04d", i);
        reg_obj(a, 1000 + (uint64_t)i, key, BS);
        sb[i] = src + (size_t)i * BS;
        db[i] = dst + (size_t)i * BS;
        ids[i] = 1000 + (uint64_t)i;
        lens[i] = BS;
    }
    nxl_xfer_t *w = make(a, NXL_WRITE, sb, ids, NULL, lens, N);
    nxl_xfer_t *r = make(a, NXL_READ, db, ids, NULL, lens, N);
    res_t res;
    uint64_t t0 = tl_now_ms();
    post(w, &res);
    wait_res(a, &res, 120000);
    ck_assert_msg(res.st == NXL_SUCCESS, "write: %s", res.why);
    uint64_t t1 = tl_now_ms();
    post(r, &res);
    wait_res(a, &res, 120000);
    ck_assert_msg(res.st == NXL_SUCCESS, "read: %s", res.why);
    uint64_t t2 = tl_now_ms();
    ck_assert_msg(!memcmp(src, dst, (size_t)N * BS), "read back differs");
    fprintf(stderr, "check_obj: 1,000 x 4 KiB: WRITE %llu ms, READ %llu ms\n",
            (unsigned long long)(t1 - t0), (unsigned long long)(t2 - t1));
    nxl_xfer_release(w);
    nxl_xfer_release(r);
    nxl_agent_destroy(a);
    /* 2,000 requests on at most 16 connections (max_connections) */
    unsigned long long nx, nreq, nretry, nconn;
    ck_assert_msg(sscanf(strstr(stats_line, "statistics"),
                         "statistics: %llu transfers, %llu requests, %llu retries, %llu "
                         "connections", &nx, &nreq, &nretry, &nconn) == 4,
                  "stats: %s", stats_line);
    fprintf(stderr, "check_obj: %s\n", stats_line);
    ck_assert_uint_eq(nreq, 2 * N);
    ck_assert_msg(nconn >= 1 && nconn <= 16, "%llu connections for %llu requests", nconn, nreq);
    free(src);
    free(dst);
}
END_TEST

/* ----------------------------------------------------------- ranges */

START_TEST(t_ranges)
{
    /* part_size=64K: a 1 MiB READ runs as 16 ranged GETs in parallel */
    const char *ex[] = {"part_size", "64K", NULL};
    nxl_agent_t *a = s3_agent(ex);
    size_t len = 1 * MiB + 100;
    char *src = xmalloc(len), *dst = xmalloc(len);
    tl_fill(src, len, 11);
    reg_dram(a, src, len);
    reg_dram(a, dst, len);
    reg_obj(a, 1, "ranges/one", len);
    char why[1024];
    ck_assert_msg(run1(a, NXL_WRITE, src, 1, 0, len, 30000, why, sizeof(why)) == NXL_SUCCESS,
                  "%s", why);
    /* several ranges of one object in one transfer, in another order;
     * s3rver answers bytes=0-0 with the whole object, which is cut off */
    uint64_t offs[] = {1000, 0, 777777, len - 1, 65535};
    size_t lens[] = {5000, 1, 200000, 1, 2};
    char *bufs[5];
    uint64_t ids[5] = {1, 1, 1, 1, 1};
    size_t at = 0;
    for (int i = 0; i < 5; i++) {
        bufs[i] = dst + at;
        at += lens[i];
    }
    memset(dst, 0, len);
    nxl_xfer_t *x = make(a, NXL_READ, bufs, ids, offs, lens, 5);
    res_t r;
    post(x, &r);
    wait_res(a, &r, 30000);
    ck_assert_msg(r.st == NXL_SUCCESS, "ranged read: %s", r.why);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(!memcmp(bufs[i], src + offs[i], lens[i]), "range %d differs", i);
    nxl_xfer_release(x);
    /* the whole object, split into 17 ranges */
    memset(dst, 0, len);
    ck_assert_msg(run1(a, NXL_READ, dst, 1, 0, len, 30000, why, sizeof(why)) == NXL_SUCCESS,
                  "%s", why);
    ck_assert(!memcmp(src, dst, len));
    nxl_agent_destroy(a);
    free(src);
    free(dst);
}
END_TEST

/* --------------------------------------------------------- multipart */

START_TEST(t_multipart)
{
    /* parts of 1 MiB above 2 MiB: 10 MiB + 5 B in 11 parts, 3.5 MiB in 4,
     * two objects in one transfer, beside a small one */
    const char *ex[] = {"part_size", "1M", "multipart_threshold", "2M", NULL};
    nxl_agent_t *a = s3_agent(ex);
    size_t lens[3] = {10 * MiB + 5, 3 * MiB + MiB / 2, 1000};
    char *src[3], *dst[3];
    uint64_t ids[3] = {1, 2, 3};
    const char *keys[3] = {"mpu/ten", "mpu/three-and-a-half", "mpu/small"};
    objs(a, 3, src, dst, ids, keys, lens, 20);
    nxl_xfer_t *w, *rd;
    round_trip(a, 3, src, dst, ids, keys, lens, 60000, "multipart", &w, &rd);
    res_t r;
    /* another client agrees */
    char file[128];
    snprintf(file, sizeof(file), "%s/ten.out", s3.dir);
    ck_assert_int_eq(s3_get_curl("mpu/ten", file), 0);
    size_t n;
    char *got = slurp(file, &n);
    ck_assert_msg(got && n == lens[0] && !memcmp(got, src[0], n), "curl reads another object");
    free(got);
    /* write again over the same object (a second post of the transfer) */
    tl_fill(src[0], lens[0], 77);
    post(w, &r);
    wait_res(a, &r, 60000);
    ck_assert_msg(r.st == NXL_SUCCESS, "rewrite: %s", r.why);
    post(rd, &r);
    wait_res(a, &r, 60000);
    ck_assert(!memcmp(src[0], dst[0], lens[0]));
    nxl_xfer_release(w);
    nxl_xfer_release(rd);
    ck_assert_int_eq(open_uploads(&s3), 0);
    ck_assert_msg(!parts_on_disk(&s3), "parts left in the server's directory");
    nxl_agent_destroy(a);
    for (int i = 0; i < 3; i++) {
        free(src[i]);
        free(dst[i]);
    }
}
END_TEST

/* ------------------------------------------------------------ errors */

START_TEST(t_missing)
{
    nxl_agent_t *a = s3_agent(NULL);
    char *buf = xmalloc(MiB);
    tl_fill(buf, 100, 3);
    reg_dram(a, buf, MiB);
    reg_obj(a, 1, "missing/never-written", MiB);
    reg_obj(a, 2, "missing/short", MiB); /* registered larger than it will be */
    char why[1024];
    nxl_status_t st = run1(a, NXL_READ, buf, 1, 0, 100, 10000, why, sizeof(why));
    ck_assert_int_eq(st, NXL_ERR_NOT_FOUND);
    ck_sentence(why, "missing/never-written");
    ck_sentence(why, "NoSuchKey");
    /* a 100-byte object read past its end: key, offset and size named */
    ck_assert_int_eq(run1(a, NXL_WRITE, buf, 2, 0, 100, 10000, why, sizeof(why)), NXL_SUCCESS);
    st = run1(a, NXL_READ, buf + 4096, 2, 50, 100, 10000, why, sizeof(why));
    ck_assert_int_eq(st, NXL_ERR_NOT_FOUND);
    ck_sentence(why, "missing/short");
    ck_sentence(why, "100 bytes");
    ck_sentence(why, "offset 50");
    st = run1(a, NXL_READ, buf + 4096, 2, 500, 10, 10000, why, sizeof(why));
    ck_assert_int_eq(st, NXL_ERR_NOT_FOUND);
    ck_sentence(why, "missing/short");
    ck_sentence(why, "100 bytes");
    ck_sentence(why, "offset 500");
    /* a WRITE must start at offset 0: refused at post, nothing starts */
    uint64_t id = 2, off = 10;
    size_t len = 10;
    nxl_xfer_t *x = make(a, NXL_WRITE, &buf, &id, &off, &len, 1);
    ck_assert_int_eq(nxl_xfer_post(x, done_cb, NULL, NULL), NXL_ERR_NOT_SUPPORTED);
    ck_sentence(nxl_agent_last_error(a), "written whole");
    nxl_xfer_release(x);
    nxl_agent_destroy(a);

    /* no such bucket, read and write */
    const char *ex[] = {"bucket", "no-such-bucket", NULL};
    a = s3_agent(ex);
    reg_dram(a, buf, MiB);
    reg_obj(a, 1, "k", MiB);
    st = run1(a, NXL_READ, buf, 1, 0, 100, 10000, why, sizeof(why));
    ck_assert_int_eq(st, NXL_ERR_NOT_FOUND);
    ck_sentence(why, "NoSuchBucket");
    ck_sentence(why, "bucket=");
    st = run1(a, NXL_WRITE, buf, 1, 0, 100, 10000, why, sizeof(why));
    ck_assert_int_eq(st, NXL_ERR_NOT_FOUND);
    ck_sentence(why, "NoSuchBucket");
    nxl_agent_destroy(a);
    free(buf);
}
END_TEST

START_TEST(t_credentials)
{
    char *buf = xmalloc(4096);
    char why[1024];
    /* s3rver knows one access key id (S3RVER) */
    const char *bad_id[] = {"access_key", "AKIDNOTKNOWN", NULL};
    nxl_agent_t *a = s3_agent(bad_id);
    reg_dram(a, buf, 4096);
    reg_obj(a, 1, "creds/x", 4096);
    nxl_status_t st = run1(a, NXL_WRITE, buf, 1, 0, 4096, 10000, why, sizeof(why));
    ck_assert_int_eq(st, NXL_ERR_NOT_ALLOWED);
    ck_sentence(why, "InvalidAccessKeyId");
    ck_sentence(why, "HTTP 403");
    ck_sentence(why, "secret_key");
    st = run1(a, NXL_READ, buf, 1, 0, 4096, 10000, why, sizeof(why));
    ck_assert_int_eq(st, NXL_ERR_NOT_ALLOWED);
    nxl_query_t q;
    nxl_desc_t d = {.meta = "creds/x", .meta_len = 7};
    ck_assert_int_eq(nxl_mem_query(a, NXL_OBJ, &d, 1, NULL, &q), NXL_ERR_NOT_ALLOWED);
    nxl_agent_destroy(a);
    /* the right id with a wrong secret: s3rver does not check SigV4
     * signatures, the test's launcher does (tests/s3rver-run.js) */
    const char *bad_secret[] = {"secret_key", "not-the-secret", NULL};
    a = s3_agent(bad_secret);
    reg_dram(a, buf, 4096);
    reg_obj(a, 1, "creds/x", 4096);
    st = run1(a, NXL_WRITE, buf, 1, 0, 4096, 10000, why, sizeof(why));
    ck_assert_int_eq(st, NXL_ERR_NOT_ALLOWED);
    ck_sentence(why, "SignatureDoesNotMatch");
    nxl_agent_destroy(a);
    free(buf);
}
END_TEST

START_TEST(t_unreachable)
{
    /* nothing listens on that port: retried, then BACKEND with a sentence */
    char ep[64];
    snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", tl_free_port());
    const char *ex[] = {"endpoint", ep, "retries", "2", NULL};
    nxl_agent_t *a = s3_agent(ex);
    char *buf = xmalloc(4096), why[1024];
    reg_dram(a, buf, 4096);
    reg_obj(a, 1, "x", 4096);
    uint64_t t0 = tl_now_ms();
    nxl_status_t st = run1(a, NXL_READ, buf, 1, 0, 4096, 20000, why, sizeof(why));
    ck_assert_int_eq(st, NXL_ERR_BACKEND);
    ck_sentence(why, "3 attempts");
    ck_sentence(why, ep);
    ck_assert_msg(tl_now_ms() - t0 < 5000, "took %llu ms", (unsigned long long)(tl_now_ms() - t0));
    nxl_query_t q;
    nxl_desc_t d = {.meta = "x", .meta_len = 1};
    ck_assert_int_eq(nxl_mem_query(a, NXL_OBJ, &d, 1, NULL, &q), NXL_ERR_BACKEND);
    ck_sentence(nxl_agent_last_error(a), "endpoint");
    nxl_agent_destroy(a);
    free(buf);
}
END_TEST

START_TEST(t_retries)
{
    /* the launcher answers 503 SlowDown twice, resets a connection once,
     * and answers 500 for ever (see tests/s3rver-run.js) */
    const char *ex[] = {"retries", "3", NULL};
    nxl_agent_t *a = s3_agent(ex);
    char *src = xmalloc(64 * KiB), *dst = xmalloc(64 * KiB), why[1024];
    tl_fill(src, 64 * KiB, 9);
    reg_dram(a, src, 64 * KiB);
    reg_dram(a, dst, 64 * KiB);
    reg_obj(a, 1, "retry/flaky-503", 64 * KiB);
    reg_obj(a, 2, "retry/flaky-reset", 64 * KiB);
    reg_obj(a, 3, "retry/always-500", 64 * KiB);
    ck_assert_msg(run1(a, NXL_WRITE, src, 1, 0, 64 * KiB, 20000, why, sizeof(why)) ==
                      NXL_SUCCESS, "503 twice: %s", why);
    ck_assert_msg(run1(a, NXL_WRITE, src, 2, 0, 64 * KiB, 20000, why, sizeof(why)) ==
                      NXL_SUCCESS, "reset once: %s", why);
    ck_assert_int_eq(run1(a, NXL_READ, dst, 1, 0, 64 * KiB, 20000, why, sizeof(why)),
                     NXL_SUCCESS);
    ck_assert(!memcmp(src, dst, 64 * KiB));
    uint64_t t0 = tl_now_ms();
    ck_assert_int_eq(run1(a, NXL_WRITE, src, 3, 0, 64 * KiB, 20000, why, sizeof(why)),
                     NXL_ERR_BACKEND);
    ck_sentence(why, "InternalError");
    ck_sentence(why, "4 attempts");
    /* backoff 50, 100, 200 ms, each with jitter down to half */
    ck_assert_msg(tl_now_ms() - t0 >= 150, "retried without backing off");
    nxl_agent_destroy(a);
    unsigned long long nx, nreq, nretry, nconn;
    ck_assert(sscanf(strstr(stats_line, "statistics"),
                     "statistics: %llu transfers, %llu requests, %llu retries, %llu connections",
                     &nx, &nreq, &nretry, &nconn) == 4);
    /* 2 + 3 ours; the reset one on a reused connection libcurl may retry
     * on a fresh one by itself */
    ck_assert_msg(nretry == 5 || nretry == 6, "%llu retries", nretry);
    free(src);
    free(dst);
}
END_TEST

START_TEST(t_server_killed)
{
    /* a server of its own, killed while 64 objects of 4 MiB move */
    tl_srv_t s = {0};
    const char *b[] = {"nxl", NULL};
    ck_assert_msg(tl_s3rver_start(&s, b) == 0, "s3rver did not start");
    const char *ex[] = {"endpoint", s.endpoint, "max_connections", "4", "retries", "2", NULL};
    nxl_agent_t *a = s3_agent(ex);
    enum { N = 64 };
    size_t bs = 4 * MiB;
    char *src = xmalloc(N * bs);
    tl_fill(src, N * bs, 8);
    reg_dram(a, src, N * bs);
    char *bufs[N];
    uint64_t ids[N];
    size_t lens[N];
    for (int i = 0; i < N; i++) {
        char key[32];
        snprintf(key, sizeof(key), "killed/%d", i);
        reg_obj(a, (uint64_t)i + 1, key, bs);
        bufs[i] = src + (size_t)i * bs;
        ids[i] = (uint64_t)i + 1;
        lens[i] = bs;
    }
    nxl_xfer_t *x = make(a, NXL_WRITE, bufs, ids, NULL, lens, N);
    res_t r;
    post(x, &r);
    uint64_t end = tl_now_ms() + 150;
    while (tl_now_ms() < end)
        nxl_agent_run_once(a, 10);
    ck_assert_int_eq(r.calls, 0);
    tl_srv_kill(&s, SIGKILL);
    uint64_t t0 = tl_now_ms();
    wait_res(a, &r, 20000);
    ck_assert_int_eq(r.st, NXL_ERR_BACKEND);
    ck_sentence(r.why, "killed/");
    ck_sentence(r.why, "is the server");
    fprintf(stderr, "check_obj: server killed: failed %llu ms later: %s\n",
            (unsigned long long)(tl_now_ms() - t0), r.why);
    nxl_xfer_release(x);
    nxl_agent_destroy(a);
    tl_srv_cleanup(&s);
    free(src);
}
END_TEST

/* A server that stops answering (SIGSTOP: the kernel still accepts its
 * connections and takes bytes into its buffers, nothing answers). With
 * timeout_s=2 and retries=3, a WRITE (on a connection that worked a moment
 * before, one PUT, and a larger one in parts), a READ and a query each fail
 * after about 2 s, not sooner, not retried, with a sentence naming
 * timeout_s; once the server runs again the same agent moves data. */
static void stopped_case(const char *tname, const char *connstr_or_ep, pid_t pid)
{
    int az = !strcmp(tname, "AZURE");
    const char *ex[] = {az ? "connection_string" : "endpoint", connstr_or_ep, "timeout_s", "2",
                        "retries", "3", "part_size", "1M", "multipart_threshold", "1M", NULL};
    nxl_agent_t *a = agent_with(tname, ex);
    size_t big = 3 * MiB + 1, small = 64 * KiB;
    char *src = xmalloc(big), *dst = xmalloc(big), why[1024];
    tl_fill(src, big, 21);
    reg_dram(a, src, big);
    reg_dram(a, dst, big);
    reg_obj(a, 1, "stop/small", small);
    reg_obj(a, 2, "stop/big", big);
    ck_assert_msg(run1(a, NXL_WRITE, src, 1, 0, small, 20000, why, sizeof(why)) == NXL_SUCCESS,
                  "%s: before the stop: %s", tname, why);
    ck_assert_int_eq(kill(pid, SIGSTOP), 0);
    struct {
        nxl_op_t op;
        uint64_t id;
        size_t len;
        const char *what;
    } c[] = {{NXL_WRITE, 1, small, "WRITE (PUT)"},
             {NXL_WRITE, 2, big, "WRITE (parts)"},
             {NXL_READ, 1, small, "READ"}};
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        uint64_t t0 = tl_now_ms();
        nxl_status_t st = run1(a, c[i].op, c[i].op == NXL_WRITE ? src : dst, c[i].id, 0,
                               c[i].len, 60000, why, sizeof(why));
        uint64_t ms = tl_now_ms() - t0;
        fprintf(stderr, "check_obj: %s, server stopped: %s failed after %llu ms: %s\n", tname,
                c[i].what, (unsigned long long)ms, why);
        ck_assert_msg(st == NXL_ERR_BACKEND, "%s: %s: %s (%s)", tname, c[i].what,
                      nxl_status_name(st), why);
        ck_sentence(why, "timeout_s");
        ck_sentence(why, "not retried");
        ck_assert_msg(ms >= 1900 && ms < 6000, "%s: %s against a stopped server with "
                      "timeout_s=2 failed after %llu ms", tname, c[i].what,
                      (unsigned long long)ms);
    }
    nxl_query_t q;
    nxl_desc_t d = {.meta = "stop/small", .meta_len = 10};
    uint64_t t0 = tl_now_ms();
    ck_assert_int_eq(nxl_mem_query(a, NXL_OBJ, &d, 1, NULL, &q), NXL_ERR_BACKEND);
    ck_assert_msg(tl_now_ms() - t0 < 6000, "%s: query took %llu ms", tname,
                  (unsigned long long)(tl_now_ms() - t0));
    ck_assert_int_eq(kill(pid, SIGCONT), 0);
    ck_assert_msg(run1(a, NXL_WRITE, src, 2, 0, big, 30000, why, sizeof(why)) == NXL_SUCCESS,
                  "%s: after the server went on: %s", tname, why);
    ck_assert_msg(run1(a, NXL_READ, dst, 2, 0, big, 30000, why, sizeof(why)) == NXL_SUCCESS,
                  "%s: after the server went on: %s", tname, why);
    ck_assert(!memcmp(src, dst, big));
    nxl_agent_destroy(a);
    free(src);
    free(dst);
}

START_TEST(t_server_stopped)
{
    tl_srv_t s = {0};
    const char *b[] = {"nxl", NULL};
    ck_assert_msg(tl_s3rver_start(&s, b) == 0, "s3rver did not start");
    stopped_case("OBJ", s.endpoint, s.pid);
    tl_srv_cleanup(&s);
}
END_TEST

/* ------------------------------------------------ cancel, teardown */

static void cancel_case(int teardown)
{
    const char *ex[] = {"part_size", "1M", "multipart_threshold", "1M", "max_connections", "2",
                        NULL};
    nxl_agent_t *a = s3_agent(ex);
    size_t len = 64 * MiB;
    char *src = xmalloc(len);
    tl_fill(src, len, 31);
    reg_dram(a, src, len);
    reg_obj(a, 1, teardown ? "cancel/teardown" : "cancel/upload", len);
    uint64_t id = 1, off = 0;
    nxl_xfer_t *x = make(a, NXL_WRITE, &src, &id, &off, &len, 1);
    res_t r;
    nxl_future_t *f = NULL;
    memset(&r, 0, sizeof(r));
    ck_assert_int_eq(nxl_xfer_post(x, done_cb, &r, &f), NXL_SUCCESS);
    /* until the upload is open on the server and parts are going up */
    uint64_t end = tl_now_ms() + 10000;
    while (open_uploads(&s3) == 0 && tl_now_ms() < end)
        nxl_agent_run_once(a, 20);
    for (int i = 0; i < 10; i++)
        nxl_agent_run_once(a, 10);
    ck_assert_int_eq(r.calls, 0);
    ck_assert_int_eq(open_uploads(&s3), 1);
    if (teardown) {
        nxl_future_release(f);
        nxl_agent_destroy(a); /* callbacks run inside, CANCELED */
        ck_assert_int_eq(r.calls, 1);
        ck_assert_int_eq(r.st, NXL_ERR_CANCELED);
    } else {
        nxl_future_cancel(f);
        wait_res(a, &r, 10000);
        ck_assert_int_eq(r.st, NXL_ERR_CANCELED);
        nxl_future_release(f);
        nxl_xfer_release(x);
        nxl_agent_destroy(a);
    }
    /* the upload was aborted: no parts left */
    ck_assert_int_eq(open_uploads(&s3), 0);
    if (parts_on_disk(&s3)) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "ls -laR '%s/data/nxl/._S3rver_uploads' >&2", s3.dir);
        if (system(cmd) != 0)
            fprintf(stderr, "ls failed\n");
        ck_abort_msg("parts left in the server's directory");
    }
    free(src);
}

START_TEST(t_cancel_upload)
{
    cancel_case(0);
}
END_TEST

START_TEST(t_teardown_upload)
{
    cancel_case(1);
}
END_TEST

START_TEST(t_cancel_reads)
{
    /* release with 200 reads in flight: CANCELED once, buffers free after */
    const char *ex[] = {"max_connections", "4", NULL};
    nxl_agent_t *a = s3_agent(ex);
    size_t bs = 256 * KiB;
    enum { N = 200 };
    char *src = xmalloc(bs), *dst = xmalloc(N * bs);
    tl_fill(src, bs, 4);
    reg_dram(a, src, bs);
    reg_dram(a, dst, N * bs);
    reg_obj(a, 1, "cancel/reads", bs);
    char why[1024];
    ck_assert_int_eq(run1(a, NXL_WRITE, src, 1, 0, bs, 10000, why, sizeof(why)), NXL_SUCCESS);
    char *bufs[N];
    uint64_t ids[N];
    size_t lens[N];
    for (int i = 0; i < N; i++) {
        bufs[i] = dst + (size_t)i * bs;
        ids[i] = 1;
        lens[i] = bs;
    }
    nxl_xfer_t *x = make(a, NXL_READ, bufs, ids, NULL, lens, N);
    res_t r;
    post(x, &r);
    nxl_agent_run_once(a, 5);
    nxl_agent_run_once(a, 5);
    nxl_xfer_release(x);
    wait_res(a, &r, 10000);
    ck_assert_int_eq(r.st, NXL_ERR_CANCELED);
    nxl_agent_destroy(a);
    free(src);
    free(dst);
}
END_TEST

/* --------------------------------------------------- query, idle, params */

START_TEST(t_query)
{
    nxl_agent_t *a = s3_agent(NULL);
    char *buf = xmalloc(3000), why[1024];
    reg_dram(a, buf, 3000);
    reg_obj(a, 1, "query/three-thousand", 3000);
    ck_assert_int_eq(run1(a, NXL_WRITE, buf, 1, 0, 3000, 10000, why, sizeof(why)), NXL_SUCCESS);
    nxl_desc_t d[3] = {
        {.meta = "query/three-thousand", .meta_len = 20},
        {.meta = "query/nothing-here", .meta_len = 18},
        {.meta = "query/three-thousand", .meta_len = 21}, /* with its trailing NUL */
    };
    nxl_query_t q[3];
    ck_assert_int_eq(nxl_mem_query(a, NXL_OBJ, d, 3, NULL, q), NXL_SUCCESS);
    ck_assert_int_eq(q[0].exists, 1);
    ck_assert_uint_eq(q[0].size, 3000);
    ck_assert_int_eq(q[1].exists, 0);
    ck_assert_uint_eq(q[1].size, 0);
    ck_assert_int_eq(q[2].exists, 1);
    nxl_desc_t bad = {.meta = NULL, .meta_len = 0};
    ck_assert_int_eq(nxl_mem_query(a, NXL_OBJ, &bad, 1, NULL, q), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "desc.meta");
    nxl_agent_destroy(a);
    free(buf);
}
END_TEST

/* 1 when a reactor turn waited the whole ms: nothing woke it */
static int quiet(nxl_agent_t *a, int ms)
{
    uint64_t t0 = tl_now_ms();
    nxl_agent_run_once(a, ms);
    return tl_now_ms() - t0 >= (uint64_t)ms - 5;
}

START_TEST(t_idle)
{
    nxl_agent_t *a = s3_agent(NULL);
    ck_assert_msg(quiet(a, 300), "a new agent with OBJ woke up");
    char *buf = xmalloc(64 * KiB), why[1024];
    reg_dram(a, buf, 64 * KiB);
    reg_obj(a, 1, "idle/x", 64 * KiB);
    ck_assert_int_eq(run1(a, NXL_WRITE, buf, 1, 0, 64 * KiB, 10000, why, sizeof(why)),
                     NXL_SUCCESS);
    ck_assert_int_eq(run1(a, NXL_READ, buf, 1, 0, 64 * KiB, 10000, why, sizeof(why)),
                     NXL_SUCCESS);
    /* after the traffic: connections kept alive, no timer, no wake-up */
    for (int i = 0; i < 3; i++)
        ck_assert_msg(quiet(a, 300), "woke up %d after traffic", i);
    nxl_agent_destroy(a);
    free(buf);
}
END_TEST

START_TEST(t_params)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "params";
    nxl_agent_t *a = NULL;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_SUCCESS);
    struct {
        nxl_param_t p[3];
        size_t n;
        const char *word;
    } cases[] = {
        {{{"endpoint", "http://127.0.0.1:1"}}, 1, "bucket"},
        {{{"bucket", "b"}, {"addressing", "sideways"}}, 2, "addressing"},
        {{{"bucket", "b"}, {"max_connections", "0"}}, 2, "max_connections"},
        {{{"bucket", "b"}, {"part_size", "1K"}}, 2, "part_size"},
        {{{"bucket", "b"}, {"endpoint", "ftp://x"}}, 2, "endpoint"},
        {{{"bucket", "b"}, {"colour", "red"}}, 2, "unknown parameter"},
        {{{"bucket", "b"}, {"access_key", "AK"}, {"secret_key", NULL}}, 2, "secret"},
    };
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_DEFAULT_BUCKET");
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        nxl_status_t st = nxl_backend_create(a, "OBJ", cases[i].p, cases[i].n, NULL);
        ck_assert_msg(st == NXL_ERR_INVALID_PARAM, "case %zu: %s", i, nxl_status_name(st));
        ck_sentence(nxl_agent_last_error(a), cases[i].word);
    }
    /* environment variables as the AWS tools read them */
    setenv("AWS_ENDPOINT_URL", s3.endpoint, 1);
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    setenv("AWS_REGION", "eu-west-3", 1);
    setenv("AWS_DEFAULT_BUCKET", "nxl", 1);
    ck_assert_msg(nxl_backend_create(a, "OBJ", NULL, 0, NULL) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    char *buf = xmalloc(100), why[1024];
    tl_fill(buf, 100, 1);
    reg_dram(a, buf, 100);
    reg_obj(a, 1, "env/x", 100);
    g_agent = a;
    ck_assert_int_eq(run1(a, NXL_WRITE, buf, 1, 0, 100, 10000, why, sizeof(why)), NXL_SUCCESS);
    nxl_plugin_info_t info[16];
    size_t n = nxl_plugins_available(info, 16);
    int seen = 0;
    for (size_t i = 0; i < n && i < 16; i++)
        if (!strcmp(info[i].name, "OBJ")) {
            seen++;
            ck_assert(info[i].mem_mask & (1u << NXL_OBJ));
            ck_assert_msg(strstr(info[i].reason, "Azure"), "%s", info[i].reason);
        }
    ck_assert_int_eq(seen, 1);
    nxl_agent_destroy(a);
    free(buf);
}
END_TEST

/* ------------------------------------------------------ cross-check */

START_TEST(t_crosscheck)
{
    nxl_agent_t *a = s3_agent(NULL);
    size_t len = 3 * MiB + 17;
    char *src = xmalloc(len), *dst = xmalloc(len), why[1024];
    char file[128], cmd[1024];
    tl_fill(src, len, 41);
    reg_dram(a, src, len);
    reg_dram(a, dst, len);
    reg_obj(a, 1, "xcheck/by-nxl", len);
    reg_obj(a, 2, "xcheck/by-curl", len);
    reg_obj(a, 3, "xcheck/by-aws", 20 * MiB);
    /* nxl writes, curl reads */
    ck_assert_int_eq(run1(a, NXL_WRITE, src, 1, 0, len, 30000, why, sizeof(why)), NXL_SUCCESS);
    snprintf(file, sizeof(file), "%s/by-nxl", s3.dir);
    ck_assert_int_eq(s3_get_curl("xcheck/by-nxl", file), 0);
    size_t n;
    char *got = slurp(file, &n);
    ck_assert_msg(got && n == len && !memcmp(got, src, len), "curl read something else");
    free(got);
    /* curl writes, nxl reads */
    tl_fill(src, len, 42);
    snprintf(file, sizeof(file), "%s/by-curl", s3.dir);
    spit(file, src, len);
    snprintf(cmd, sizeof(cmd),
             "curl -sS -f --aws-sigv4 aws:amz:us-east-1:s3 -u S3RVER:S3RVER "
             "-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -T '%s' '%s/nxl/xcheck/by-curl'",
             file, s3.endpoint);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(run1(a, NXL_READ, dst, 2, 0, len, 30000, why, sizeof(why)), NXL_SUCCESS);
    ck_assert_msg(!memcmp(dst, src, len), "nxl read something else than curl wrote");
    /* the AWS CLI (an independent SigV4 implementation), both ways: its
     * 20 MiB upload is multipart */
    if (tl_have("aws")) {
        char *big = xmalloc(20 * MiB), *bdst = xmalloc(20 * MiB);
        tl_fill(big, 20 * MiB, 43);
        reg_dram(a, big, 20 * MiB);
        reg_dram(a, bdst, 20 * MiB);
        snprintf(file, sizeof(file), "%s/by-aws", s3.dir);
        spit(file, big, 20 * MiB);
        const char *env = "AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER "
                          "AWS_DEFAULT_REGION=us-east-1 AWS_CONFIG_FILE=/dev/null "
                          "AWS_SHARED_CREDENTIALS_FILE=/dev/null";
        snprintf(cmd, sizeof(cmd), "%s aws --endpoint-url %s s3 cp --only-show-errors '%s' "
                                   "s3://nxl/xcheck/by-aws",
                 env, s3.endpoint, file);
        ck_assert_msg(system(cmd) == 0, "aws s3 cp up failed");
        ck_assert_int_eq(run1(a, NXL_READ, bdst, 3, 0, 20 * MiB, 30000, why, sizeof(why)),
                         NXL_SUCCESS);
        ck_assert_msg(!memcmp(bdst, big, 20 * MiB), "nxl read something else than aws wrote");
        /* nxl writes (multipart), aws reads */
        tl_fill(big, 20 * MiB, 44);
        ck_assert_int_eq(run1(a, NXL_WRITE, big, 3, 0, 20 * MiB, 30000, why, sizeof(why)),
                         NXL_SUCCESS);
        snprintf(cmd, sizeof(cmd), "%s aws --endpoint-url %s s3 cp --only-show-errors "
                                   "s3://nxl/xcheck/by-aws '%s.back'",
                 env, s3.endpoint, file);
        ck_assert_msg(system(cmd) == 0, "aws s3 cp down failed");
        char back[160];
        snprintf(back, sizeof(back), "%s.back", file);
        got = slurp(back, &n);
        ck_assert_msg(got && n == 20 * MiB && !memcmp(got, big, n), "aws read something else");
        free(got);
        free(big);
        free(bdst);
    } else {
        fprintf(stderr, "check_obj: no AWS CLI here (apt-get install awscli): cross-checked "
                        "with curl only\n");
    }
    nxl_agent_destroy(a);
    free(src);
    free(dst);
}
END_TEST

START_TEST(t_kv_tiering)
{
    /* the example with an S3 tier: KV blocks evicted to objects and loaded
     * back, every byte checked by the example itself */
    if (access("examples/kv_tiering", X_OK) != 0) {
        fprintf(stderr, "check_obj: no examples/kv_tiering in this build (POSIX not built): "
                        "not run\n");
        return;
    }
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "AWS_ENDPOINT_URL=%s AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER "
             "AWS_REGION=us-east-1 ./examples/kv_tiering --tier s3://nxl/kvt/ -b 64 -s 32 "
             "-r 1500 > '%s/kv_tiering.out' 2>&1",
             s3.endpoint, s3.dir);
    int rc = system(cmd);
    snprintf(cmd, sizeof(cmd), "%s/kv_tiering.out", s3.dir);
    size_t n;
    char *out = slurp(cmd, &n);
    ck_assert_msg(rc == 0 && out && strstr(out, "kv_tiering: ok"), "kv_tiering: %s",
                  out ? out : "(no output)");
    ck_assert_msg(strstr(out, "objects s3://nxl/kvt/"), "%s", out);
    free(out);
}
END_TEST

START_TEST(t_nxlbench)
{
    /* nxlbench's OBJ mode, tiny, both ways, every byte checked: so that it
     * cannot rot unseen (bench/compare-curl runs it for real) */
    if (access("bench/nxlbench", X_OK) != 0) {
        fprintf(stderr, "check_obj: no bench/nxlbench in this build: not run\n");
        return;
    }
    for (int op = 0; op < 2; op++) {
        char cmd[1024];
        snprintf(cmd, sizeof(cmd),
                 "./bench/nxlbench --backend OBJ --target_seg_type OBJ "
                 "--obj_endpoint_override %s --obj_bucket_name nxl --obj_access_key S3RVER "
                 "--obj_secret_key S3RVER --obj_region us-east-1 --op_type %s "
                 "--block_sizes 4K,1M --start_batch_size 4 --max_batch_size 8 --num_iter 2 "
                 "--check_consistency --quiet > '%s/nxlbench.out' 2>&1",
                 s3.endpoint, op ? "READ" : "WRITE", s3.dir);
        int rc = system(cmd);
        snprintf(cmd, sizeof(cmd), "%s/nxlbench.out", s3.dir);
        size_t n;
        char *out = slurp(cmd, &n);
        ck_assert_msg(rc == 0 && out && strstr(out, "1048576      8"), "nxlbench: %s",
                      out ? out : "(no output)");
        free(out);
    }
}
END_TEST

/* ------------------------------------------------------------ Azure */

static int az_client(const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "NODE_PATH='%s/node_modules' node '%s/tests/azure-xcheck.js' '%s' %s",
             tl_node_root, SRCDIR, az_connstr, args);
    return system(cmd);
}

START_TEST(t_azure)
{
    ck_assert(have_az);
    /* small (Put Blob) and large (4 blocks of 1 MiB, Put Block List) */
    const char *ex[] = {"part_size", "1M", "multipart_threshold", "2M", NULL};
    nxl_agent_t *a = agent_with("AZURE", ex);
    size_t lens[2] = {1000, 3 * MiB + 3};
    char *src[2], *dst[2], why[1024];
    uint64_t ids[2] = {1, 2};
    const char *keys[2] = {"az/small", "az/dir/large"};
    objs(a, 2, src, dst, ids, keys, lens, 60);
    nxl_xfer_t *w, *rd;
    round_trip(a, 2, src, dst, ids, keys, lens, 30000, "azure", &w, &rd);
    nxl_xfer_release(w);
    nxl_xfer_release(rd);
    /* ranged */
    memset(dst[1], 0, lens[1]);
    ck_assert_int_eq(run1(a, NXL_READ, dst[1], 2, 12345, 100000, 10000, why, sizeof(why)),
                     NXL_SUCCESS);
    ck_assert(!memcmp(dst[1], src[1] + 12345, 100000));
    /* query */
    nxl_desc_t d[2] = {{.meta = "az/dir/large", .meta_len = 12}, {.meta = "az/none", .meta_len = 7}};
    nxl_query_t q[2];
    ck_assert_int_eq(nxl_mem_query(a, NXL_OBJ, d, 2, NULL, q), NXL_SUCCESS);
    ck_assert_int_eq(q[0].exists, 1);
    ck_assert_uint_eq(q[0].size, lens[1]);
    ck_assert_int_eq(q[1].exists, 0);
    /* missing blob, short blob */
    reg_obj(a, 3, "az/none", 100);
    ck_assert_int_eq(run1(a, NXL_READ, dst[0], 3, 0, 100, 10000, why, sizeof(why)),
                     NXL_ERR_NOT_FOUND);
    ck_sentence(why, "BlobNotFound");
    ck_assert_int_eq(run1(a, NXL_READ, dst[0], 1, 990, 10, 10000, why, sizeof(why)),
                     NXL_SUCCESS);
    reg_obj(a, 4, "az/small", 4000);
    ck_assert_int_eq(run1(a, NXL_READ, dst[1], 4, 2000, 10, 10000, why, sizeof(why)),
                     NXL_ERR_NOT_FOUND);
    ck_sentence(why, "az/small");
    ck_sentence(why, "1000 bytes");
    /* another client: Microsoft's SDK reads what nxl wrote and writes what
     * nxl reads (a staged-block upload of 9 MiB) */
    char file[128], args[512];
    snprintf(file, sizeof(file), "%s/large.out", az.dir);
    snprintf(args, sizeof(args), "get nxl az/dir/large '%s'", file);
    ck_assert_int_eq(az_client(args), 0);
    size_t n;
    char *got = slurp(file, &n);
    ck_assert_msg(got && n == lens[1] && !memcmp(got, src[1], n), "the SDK read something else");
    free(got);
    size_t blen = 9 * MiB + 1;
    char *big = xmalloc(blen), *bdst = xmalloc(blen);
    tl_fill(big, blen, 70);
    snprintf(file, sizeof(file), "%s/by-sdk", az.dir);
    spit(file, big, blen);
    snprintf(args, sizeof(args), "put nxl az/by-sdk '%s'", file);
    ck_assert_int_eq(az_client(args), 0);
    reg_dram(a, bdst, blen);
    reg_obj(a, 5, "az/by-sdk", blen);
    ck_assert_int_eq(run1(a, NXL_READ, bdst, 5, 0, blen, 30000, why, sizeof(why)), NXL_SUCCESS);
    ck_assert_msg(!memcmp(bdst, big, blen), "nxl read something else than the SDK wrote");
    nxl_agent_destroy(a);

    /* a wrong key: azurite checks Shared Key signatures */
    const char *badkey[] = {"connection_string", "", "account", TL_AZ_ACCOUNT, "account_key",
                            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
                            "AAAAAAAAAAAAAAAAAAAA",
                            "endpoint", az.endpoint, NULL};
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "az-bad";
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_SUCCESS);
    nxl_param_t p[5] = {{"container", "nxl"},
                        {badkey[2], badkey[3]},
                        {badkey[4], badkey[5]},
                        {badkey[6], badkey[7]},
                        {"api", "azure"}};
    ck_assert_msg(nxl_backend_create(a, "OBJ", p, 5, NULL) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    g_agent = a;
    reg_dram(a, src[0], lens[0]);
    reg_obj(a, 1, "az/small", lens[0]);
    ck_assert_int_eq(run1(a, NXL_WRITE, src[0], 1, 0, lens[0], 10000, why, sizeof(why)),
                     NXL_ERR_NOT_ALLOWED);
    ck_sentence(why, "HTTP 403"); /* azurite: AuthorizationFailure */
    ck_sentence(why, "account_key");
    nxl_agent_destroy(a);

    /* a missing container */
    const char *nocont[] = {"container", "no-such-container", NULL};
    a = agent_with("AZURE", nocont);
    reg_dram(a, src[0], lens[0]);
    reg_obj(a, 1, "x", lens[0]);
    ck_assert_int_eq(run1(a, NXL_WRITE, src[0], 1, 0, lens[0], 10000, why, sizeof(why)),
                     NXL_ERR_NOT_FOUND);
    ck_sentence(why, "ContainerNotFound");
    nxl_agent_destroy(a);
    for (int i = 0; i < 2; i++) {
        free(src[i]);
        free(dst[i]);
    }
    free(big);
    free(bdst);
}
END_TEST

START_TEST(t_azure_stopped)
{
    /* the suite's azurite (a second one starts slowly on a busy machine);
     * this is the suite's last test, and main lets the server go on */
    ck_assert(have_az);
    stopped_case("AZURE", az_connstr, az.pid);
}
END_TEST

START_TEST(t_azure_nxlbench)
{
    /* nxlbench's OBJ mode against Azure: api=azure and the connection
     * string through --backend_params, both ways, every byte checked */
    ck_assert(have_az);
    if (access("bench/nxlbench", X_OK) != 0) {
        fprintf(stderr, "check_obj: no bench/nxlbench in this build: not run\n");
        return;
    }
    for (int op = 0; op < 2; op++) {
        char cmd[1536];
        snprintf(cmd, sizeof(cmd),
                 "./bench/nxlbench --backend OBJ --target_seg_type OBJ --obj_bucket_name nxl "
                 "--backend_params 'api=azure,connection_string=%s,timeout_s=20' --op_type %s "
                 "--block_sizes 4K,1M --start_batch_size 4 --num_iter 2 --check_consistency "
                 "--quiet > '%s/nxlbench-az.out' 2>&1",
                 az_connstr, op ? "READ" : "WRITE", az.dir);
        int rc = system(cmd);
        snprintf(cmd, sizeof(cmd), "%s/nxlbench-az.out", az.dir);
        size_t n;
        char *out = slurp(cmd, &n);
        ck_assert_msg(rc == 0 && out && strstr(out, "1048576      4") &&
                          strstr(out, "Azure Blob at ") && strstr(out, az.endpoint),
                      "nxlbench against azurite: %s", out ? out : "(no output)");
        free(out);
    }
}
END_TEST

START_TEST(t_azure_connstr)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "connstr";
    nxl_agent_t *a = NULL;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_SUCCESS);
    nxl_param_t bad[][3] = {
        {{"connection_string", "AccountName=x"}, {"container", "c"}, {"api", "azure"}},
        {{"connection_string", "AccountName=x;AccountKey=!!notbase64!!"}, {"container", "c"},
         {"api", "azure"}},
        {{"connection_string", "nonsense"}, {"container", "c"}, {"api", "azure"}},
        {{"connection_string", "AccountName=x;SharedAccessSignature=sv=1"}, {"container", "c"},
         {"api", "azure"}},
    };
    const char *words[] = {"AccountKey", "base64", "Name=Value", "SharedAccessSignature"};
    for (size_t i = 0; i < 4; i++) {
        ck_assert_int_eq(nxl_backend_create(a, "OBJ", bad[i], 3, NULL), NXL_ERR_INVALID_PARAM);
        ck_sentence(nxl_agent_last_error(a), words[i]);
    }
    /* the environment variable Azure's tools read, with UseDevelopmentStorage's
     * defaults beside an explicit BlobEndpoint */
    char cs[256];
    snprintf(cs, sizeof(cs), "UseDevelopmentStorage=true;BlobEndpoint=%s", az.endpoint);
    setenv("AZURE_STORAGE_CONNECTION_STRING", cs, 1);
    nxl_param_t p[2] = {{"container", "nxl"}, {"api", "azure"}};
    ck_assert_msg(nxl_backend_create(a, "OBJ", p, 2, NULL) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    g_agent = a;
    char *buf = xmalloc(100), why[1024];
    tl_fill(buf, 100, 2);
    reg_dram(a, buf, 100);
    reg_obj(a, 1, "az/env", 100);
    ck_assert_int_eq(run1(a, NXL_WRITE, buf, 1, 0, 100, 10000, why, sizeof(why)), NXL_SUCCESS);
    nxl_agent_destroy(a);
    free(buf);
}
END_TEST

int main(void)
{
    char why[512];
    int rc = tl_node_setup(why, sizeof(why));
    if (rc == 77) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    if (rc != 0) {
        fprintf(stderr, "check_obj: %s\n", why);
        return 1;
    }
    const char *b[] = {"nxl", NULL};
    if (tl_s3rver_start(&s3, b) != 0) {
        fprintf(stderr, "check_obj: s3rver did not start (see %s/s3rver.log)\n", s3.dir);
        return 1;
    }
    have_az = tl_azurite_start(&az) == 0;
    if (have_az) {
        snprintf(az_connstr, sizeof(az_connstr),
                 "DefaultEndpointsProtocol=http;AccountName=" TL_AZ_ACCOUNT
                 ";AccountKey=" TL_AZ_KEY ";BlobEndpoint=%s;",
                 az.endpoint);
        have_az = az_client("mkcontainer nxl") == 0;
    }
    if (!have_az)
        fprintf(stderr, "check_obj: azurite did not start or answer (see %s/azurite.log)\n",
                az.dir);
    Suite *s = suite_create("obj");
    TL_TCASE(s, "s3", 180, NULL, NULL, t_params, t_sizes, t_256mib, t_thousand, t_ranges,
             t_multipart, t_missing, t_credentials, t_unreachable, t_retries, t_server_killed,
             t_cancel_upload, t_teardown_upload, t_cancel_reads, t_query, t_idle, t_crosscheck,
             t_kv_tiering, t_nxlbench);
    TL_TCASE(s, "azure", 120, NULL, NULL, t_azure, t_azure_connstr, t_azure_nxlbench);
    /* servers that stop answering (CK_RUN_CASE=stopped runs these alone);
     * last, as t_azure_stopped stops the suite's azurite for a while */
    TL_TCASE(s, "stopped", 180, NULL, NULL, t_server_stopped, t_azure_stopped);
    rc = tl_run(s);
    if (az.pid > 0)
        kill(az.pid, SIGCONT); /* t_azure_stopped failed with it stopped */
    tl_srv_cleanup(&s3);
    tl_srv_cleanup(&az);
    return rc;
}
