/* SPDX-License-Identifier: BSD-3-Clause */
/* The OBJ transport's private structures and functions, shared by its
 * files: obj.c (the instance: parameters, create, teardown, the ops table),
 * key.c (registration, keys, nxl_mem_query), xfer.c (transfers), req.c (HTTP
 * requests and retries), mpu.c (multipart uploads), util.c (helpers) and
 * azure.c (Azure Blob's Shared Key signing, connection strings). */
#ifndef NXL_OBJ_H
#define NXL_OBJ_H

#include "config.h"
#include <nxl/transport.h>

#include "../../common/base64.h"
#include "../../common/growbuf.h"
#include "../common/regtab.h"
#include "../common/firstfail.h"

#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#define OBJ_DEF_CONNS 16u
#define OBJ_DEF_PART (8u << 20)          /* multipart part / ranged GET size */
#define OBJ_DEF_THRESHOLD (16u << 20)    /* WRITEs larger than this are multipart */
#define OBJ_MAX_PARTS 10000u             /* S3's and Azure's limit per object */
#define OBJ_DEF_RETRIES 4u
#define OBJ_RETRY_MIN_MS 50u
#define OBJ_RETRY_MAX_MS 2000u
#define OBJ_RESP_MAX (64u << 10)         /* error bodies and XML answers kept, at most */
#define OBJ_KEY_MAX 1024u
#define OBJ_CANCEL_TICK_MS 20u
#define OBJ_ABORT_SILENCE_S 1        /* an abort's bound (at most timeout_s) */

typedef enum { OBJ_S3, OBJ_AZURE } obj_api_t;

typedef struct obj obj_t;
typedef struct obj_xop obj_xop_t;

/* A registered OBJ range: an object key, shared by its registration, the
 * keys loaded from it and the transfers that use it. */
typedef struct obj_key {
    int refs;
    char *key;               /* the object's key, NUL-terminated */
    char *url;               /* its URL */
    char *path;              /* the URL's path, for Azure's canonical resource */
    uint64_t id, off;        /* the descriptor's dev_id and registered range */
    size_t len;
    nxlt_reg_t reg;          /* in the registry, by reg.regid (what pack_key hands out) */
} obj_key_t;

enum { R_GET, R_PUT, R_HEAD, R_MPU_CREATE, R_MPU_PART, R_MPU_COMPLETE, R_MPU_ABORT };
enum { RQ_QUEUED, RQ_INFLIGHT, RQ_RETRY, RQ_DONE };

/* One multipart upload (S3) or block list (Azure) of one WRITE element. */
typedef struct obj_mpu {
    obj_xop_t *x;
    obj_key_t *k;
    size_t elem;
    char *upload_id;         /* S3, once created */
    const char *buf;
    size_t len, part;
    unsigned nparts, parts_done;
    int active;              /* its part requests not finished */
    bool aborting, done;
    char **etags;            /* S3: per part; Azure: unused */
    LIST_ENTRY(obj_mpu) link;
} obj_mpu_t;

/* One HTTP request. */
typedef struct obj_req {
    obj_t *o;
    obj_xop_t *x;
    obj_mpu_t *mpu;
    obj_key_t *k;
    int kind, state;
    size_t elem;
    unsigned part;           /* 1-based part number */
    char *buf;               /* GET: destination; PUT: source */
    size_t len, pos;
    uint64_t off;            /* GET: offset in the object */
    char *body;              /* a body of our own (CompleteMultipartUpload, block list) */
    CURL *easy;
    struct curl_slist *hdr;
    char *resp;              /* answer body (XML, error), capped */
    size_t resp_len, resp_cap;
    long http;
    char etag[128];
    char err_hdr[96];        /* x-amz-error-code / x-ms-error-code */
    long long total;         /* object size from Content-Range, -1 unknown */
    bool bad;                /* our write callback refused the body */
    bool overrun;            /* the server sent more than asked: cut off, the rest kept */
    char bad_why[200];
    unsigned attempts;
    uint64_t moved_us;       /* in flight: when it started or last moved a byte */
    int64_t moved_bytes;     /* bytes curl had sent and received then */
    bool stalled;            /* taken out of curl after moving nothing for its bound */
    nxlt_timer_t *retry_ev;
    TAILQ_ENTRY(obj_req) qlink;
    LIST_ENTRY(obj_req) xlink;
} obj_req_t;
TAILQ_HEAD(obj_reqq, obj_req);

struct obj_xop {
    obj_t *o;
    nxlt_op_t *op;
    bool write;
    bool failed;
    nxl_status_t st;
    char why[1200];
    int active;              /* requests not finished, plus holds */
    LIST_HEAD(, obj_req) reqs;
    LIST_HEAD(, obj_mpu) mpus;
    LIST_ENTRY(obj_xop) link;
};

struct obj {
    nxlt_ctx_t *ctx;
    const char *tname;       /* "OBJ" or "AZURE", for sentences */
    obj_api_t api;
    nxlt_http_t *http;
    CURL *sync;              /* blocking HEADs of nxl_mem_query, aborts at teardown */
    bool closing;
    /* parameters */
    char *endpoint, *bucket, *region, *access_key, *secret_key, *token;
    char *account;           /* Azure */
    unsigned char akey[128]; /* Azure: the account key, decoded */
    size_t akey_len;
    bool virt;               /* virtual-host addressing */
    char *base;              /* URL of the bucket or container, without a trailing / */
    char *sigv4;             /* "aws:amz:REGION:s3" */
    char *ca_file;
    bool verify_tls;
    unsigned max_conns, retries;
    size_t part, threshold;
    long timeout_s, connect_ms;
    char scheme_name[8];     /* "s3" or "azure", for object names in sentences */
    /* state */
    uint64_t token_id;
    uint64_t next_regid;
    nxlt_regtab_t regs;      /* registered objects, by regid */
    struct obj_reqq queue;
    unsigned inflight;
    LIST_HEAD(, obj_xop) xops;
    nxlt_timer_t *tick;      /* while transfers are in flight: polls for canceled ones and
                                requests that moved nothing for timeout_s */
    nxlt_timer_t *kick;      /* completes empty transfers on the next turn */
    /* statistics */
    uint64_t n_req, n_retry, n_xfer, n_conn;
    char desc[512];          /* endpoint and bucket as given: a long URL must fit */
};

/* util.c */
/* Percent-encodes s (len bytes) for a URL path: unreserved characters and
 * '/' (when keep_slash) stay. */
char *nxl_obj_url_enc(const char *s, size_t len, bool keep_slash);
char *nxl_obj_xsprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "s3://bucket/key" for sentences */
const char *nxl_obj_oname(obj_t *o, const obj_key_t *k, char *buf, size_t cap);

/* key.c: objects by key (the ops table's reg ... unload_key and query) */
void nxl_obj_key_put(obj_key_t *k);
nxl_status_t nxl_obj_reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **out);
void nxl_obj_dereg(void *state, void *md);
nxl_status_t nxl_obj_pack_key(void *state, void *md, void **buf, size_t *len);
nxl_status_t nxl_obj_conn_info(void *state, void **buf, size_t *len);
nxl_status_t nxl_obj_load_conn(void *state, const char *agent, const void *info, size_t len,
                               void **conn);
void nxl_obj_unload_conn(void *state, void *conn);
nxl_status_t nxl_obj_load_key(void *state, void *conn, const void *buf, size_t len, void **rkey);
void nxl_obj_unload_key(void *state, void *rkey);
nxl_status_t nxl_obj_query(void *state, nxl_mem_t type, const nxl_desc_t *d, nxl_query_t *res);

/* req.c */
/* Seconds r may move nothing before it fails. */
long nxl_obj_silence_s(const obj_t *o, const obj_req_t *r);
/* A new request of transfer x on key k (referenced), not yet queued. */
obj_req_t *nxl_obj_req_new(obj_xop_t *x, int kind, obj_key_t *k, size_t elem);
void nxl_obj_req_enqueue(obj_t *o, obj_req_t *r, bool head);
/* nxlt_http_done_fn: r's handle has left the multi handle. */
void nxl_obj_req_done(void *easy, int result, void *priv, void *arg);
/* Starts queued requests while connections are free. */
void nxl_obj_pump(obj_t *o);
/* Frees r and what it holds, its key reference included; r is in no list. */
void nxl_obj_req_free(obj_req_t *r);
/* Takes r out of curl, the queue or its retry timer; false when it is in
 * none of them (its caller is handling it). */
bool nxl_obj_req_detach(obj_t *o, obj_req_t *r);
/* Takes r out of curl, the queue or its retry timer and finishes it. */
void nxl_obj_req_drop(obj_t *o, obj_req_t *r);
/* Runs r on the instance's blocking handle (nxl_mem_query, teardown). */
CURLcode nxl_obj_sync_run(obj_t *o, obj_req_t *r, long timeout_ms);

/* mpu.c */
/* Azure's id of block @p part (1-based; base64, the same length for all)
 * into out; -1 when out of memory. */
int nxl_obj_block_id(unsigned part, char *out, size_t cap);
/* Starts the multipart upload of element elem (buf, len) of x into k. */
int nxl_obj_mpu_start(obj_xop_t *x, obj_key_t *k, size_t elem, const void *buf, size_t len);
void nxl_obj_mpu_abort(obj_mpu_t *m);
int nxl_obj_mpu_parts(obj_mpu_t *m);
int nxl_obj_mpu_complete(obj_mpu_t *m);

/* xfer.c */
void nxl_obj_xop_release(obj_xop_t *x);
void nxl_obj_xop_finish(obj_xop_t *x);
void nxl_obj_xop_fail(obj_xop_t *x, nxl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void nxl_obj_on_tick(nxlt_timer_t *t, void *arg);
void nxl_obj_on_kick(nxlt_timer_t *t, void *arg);
nxl_status_t nxl_obj_post(void *state, nxlt_op_t *op, const nxlt_xfer_t *t);

/* azure.c */
/* Parses an Azure connection string into o (account, key, endpoint);
 * writes a sentence into why on failure. */
int nxl_obj_azure_connstr(obj_t *o, const char *cs, char *why, size_t cap);
/* Decodes the base64 account key into o->akey. */
int nxl_obj_azure_set_key(obj_t *o, const char *b64);
/* Adds x-ms-date, x-ms-version, the x-ms-* headers in @p xms (name,
 * value, ..., NULL; names lower-case) and Authorization (Shared Key) to
 * *hdr. @p path is the URL's path, @p query its parameters decoded (name,
 * value, ..., NULL), @p content_length the body's length. */
int nxl_obj_azure_sign(obj_t *o, const char *method, const char *path, const char *const *query,
                       const char *const *xms, size_t content_length, struct curl_slist **hdr);
/* 1 when this build can speak Azure (libcrypto) */
int nxl_obj_azure_available(void);

#endif
