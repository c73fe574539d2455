/* SPDX-License-Identifier: BSD-3-Clause */
/* nxlbench --backend OBJ: DRAM ↔ an S3 server (or Azure Blob, api=azure in
 * --backend_params), one process. Each transfer
 * moves --start_batch_size whole objects of one block size, one transfer at
 * a time, waited for. */
#include "nxlbench.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct {
    nxl_agent_t *a;
    buf_t ring;
    uint64_t next_id;
    char stats[512];
} B;

static void obj_log_cb(nxl_log_level_t lvl, const char *msg, void *arg)
{
    if (strstr(msg, "statistics"))
        snprintf(B.stats, sizeof(B.stats), "%s", msg);
    log_cb(lvl, msg, arg);
}

typedef struct {
    int done;
    nxl_status_t st;
    char why[1024];
} ores_t;

static void obj_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    ores_t *r = arg;
    r->done = 1;
    r->st = st;
    snprintf(r->why, sizeof(r->why), "%s", nxl_future_error(f));
}

/* one transfer, waited for; its seconds */
static double obj_run(nxl_xfer_t *x, const char *what)
{
    ores_t r = {0};
    uint64_t t0 = now_ns();
    if (nxl_xfer_post(x, obj_done, &r, NULL) != NXL_SUCCESS)
        die("%s: nxl_xfer_post: %s", what, nxl_agent_last_error(B.a));
    while (!r.done)
        loop_turn(B.a, 100);
    if (r.st != NXL_SUCCESS)
        die("%s: %s", what, r.why);
    return (now_ns() - t0) / 1e9;
}

static void o_key(char *key, size_t cap, size_t bs, size_t i)
{
    snprintf(key, cap, "nxlbench/%zu/%zu", bs, i);
}

static void o_row(size_t bs, size_t n)
{
    nxl_desc_t *ld = calloc(n, sizeof(*ld)), *rd = calloc(n, sizeof(*rd));
    uint64_t id0 = B.next_id;
    B.next_id += n;
    char key[96];
    for (size_t i = 0; i < n; i++) {
        o_key(key, sizeof(key), bs, i);
        nxl_desc_t d = {.addr = 0, .len = bs, .dev_id = id0 + i, .meta = key,
                        .meta_len = strlen(key)};
        if (nxl_mem_register(B.a, NXL_OBJ, &d, 1, NULL) != NXL_SUCCESS)
            die("registering object %s: %s", key, nxl_agent_last_error(B.a));
        ld[i] = (nxl_desc_t){.addr = (uintptr_t)B.ring.p + i * bs, .len = bs};
        rd[i] = (nxl_desc_t){.addr = 0, .len = bs, .dev_id = id0 + i};
    }
    nxl_dlist_t l = {NXL_DRAM, ld, n}, r = {NXL_OBJ, rd, n};
    nxl_xfer_t *w = NULL, *x = NULL;
    if (nxl_xfer_create(B.a, NXL_WRITE, &l, &r, nxl_agent_name(B.a), NULL, &w) != NXL_SUCCESS ||
        nxl_xfer_create(B.a, O.op, &l, &r, nxl_agent_name(B.a), NULL, &x) != NXL_SUCCESS)
        die("nxl_xfer_create: %s", nxl_agent_last_error(B.a));
    uint64_t seed = next_seed();
    pat_fill(B.ring.p, 0, n * bs, seed);
    if (O.op == NXL_READ) {
        obj_run(w, "writing the objects first");
        memset(B.ring.p, 0, n * bs);
    }
    long timed = O.set_num_iter ? O.num_iter : 5, warm = O.set_warmup ? O.warmup_iter : 1;
    for (long i = 0; i < warm; i++)
        obj_run(x, "warm-up");
    double *t = calloc((size_t)timed, sizeof(double)), sum = 0;
    for (long i = 0; i < timed; i++)
        sum += t[i] = obj_run(x, O.op == NXL_READ ? "READ" : "WRITE");
    if (O.check) {
        unsigned char *want = malloc(n * bs);
        pat_fill(want, 0, n * bs, seed);
        if (O.op == NXL_WRITE) {
            nxl_xfer_t *rb = NULL;
            memset(B.ring.p, 0, n * bs);
            if (nxl_xfer_create(B.a, NXL_READ, &l, &r, nxl_agent_name(B.a), NULL, &rb) !=
                NXL_SUCCESS)
                die("nxl_xfer_create: %s", nxl_agent_last_error(B.a));
            obj_run(rb, "reading back");
            nxl_xfer_release(rb);
        }
        if (memcmp(B.ring.p, want, n * bs))
            die("consistency: block %zu batch %zu: the objects differ from what was written",
                bs, n);
        free(want);
    }
    /* one transfer at a time: the row's time is the sum of theirs; no prep, no post */
    for (long i = 0; i < timed; i++)
        t[i] *= 1e6;
    report_bw_row(bs, n, timed, sum, NULL, 0, NULL, 0, t, timed);
    free(t);
    nxl_xfer_release(w);
    nxl_xfer_release(x);
    for (size_t i = 0; i < n; i++) {
        o_key(key, sizeof(key), bs, i);
        nxl_desc_t d = {.addr = 0, .len = bs, .dev_id = id0 + i, .meta = key,
                        .meta_len = strlen(key)};
        nxl_mem_deregister(B.a, NXL_OBJ, &d, 1);
    }
    free(ld);
    free(rd);
}

int obj_main(void)
{
    RUN.t_start = now_ns();
    size_t need = need_fits("the DRAM buffer needs", " (largest block x batch)", "");
    B.a = make_local_agent("nxlb-obj", obj_log_cb, "obj");
    RUN.a = B.a;
    nxl_param_t p[12 + sizeof(O.bparams) / sizeof(O.bparams[0])];
    size_t np = 0;
    char ep[512], conns[32];
    if (O.obj_endpoint) {
        bool has = strstr(O.obj_endpoint, "://") != NULL;
        snprintf(ep, sizeof(ep), "%s%s%s", has ? "" : O.obj_scheme ? O.obj_scheme : "https",
                 has ? "" : "://", O.obj_endpoint);
        p[np++] = (nxl_param_t){"endpoint", ep};
    }
    /* the flags given, in this order */
    const nxl_param_t flags[] = {
        {"bucket", O.obj_bucket},        {"region", O.obj_region},
        {"access_key", O.obj_access},    {"secret_key", O.obj_secret},
        {"session_token", O.obj_token},  {"ca_file", O.obj_ca},
        {"part_size", O.obj_part},       {"addressing", O.obj_virtual ? "virtual" : NULL},
    };
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (flags[i].value)
            p[np++] = flags[i];
    snprintf(conns, sizeof(conns), "%ld", O.obj_conns ? O.obj_conns : 16);
    p[np++] = (nxl_param_t){"max_connections", conns};
    /* --backend_params (api=azure, connection_string=..., timeout_s=N,
     * retries=N, ...) after the flags', which they override */
    for (size_t i = 0; i < O.nbparams; i++)
        p[np++] = O.bparams[i];
    if (nxl_backend_create(B.a, "OBJ", p, np, NULL) != NXL_SUCCESS)
        die("nxl_backend_create(OBJ): %s", nxl_agent_last_error(B.a));
    if (!buf_alloc(B.a, &B.ring, need, O.mem_nxl))
        die("%zu bytes of DRAM: %s", need, nxl_agent_last_error(B.a));
    B.next_id = 1;
    run_rows(o_row);
    nxl_backend_t *b = nxl_backend_get(B.a, "OBJ");
    const char *d = b ? nxl_backend_name(b) : "";
    report("# nxlbench bandwidth, OBJ, %s, DRAM ↔ OBJ (%s%s%s); batch = whole objects per "
           "transfer, one transfer at a time\n",
           O.op == NXL_READ ? "READ" : "WRITE", d, transports_desc[0] ? ": " : "",
           transports_desc);
    buf_free(B.a, &B.ring);
    loop_detach(B.a);
    nxl_agent_destroy(B.a);
    if (B.stats[0])
        printf("# %s\n", B.stats);
    return 0;
}
