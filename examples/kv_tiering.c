/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_tiering: a KV cache larger than its DRAM pool, with a file as the
 * second tier, through the POSIX transport, or an S3 bucket (one object per
 * block) through the OBJ transport with --tier s3://BUCKET[/PREFIX].
 *
 * A pool of DRAM slots (nxl_mem_alloc) holds some of the KV blocks; every
 * block has its place in one file (registered by path, created). Requests
 * touch blocks with a skewed, repeatable pattern. A missing block is loaded
 * on demand (a READ, file → DRAM, completed by a callback) into a free slot;
 * when none is free, the least recently used blocks are evicted as one
 * batch (a WRITE of the dirty ones, DRAM → file). The next few requests'
 * blocks are loaded ahead, so several transfers are in flight at once.
 * Some requests modify their block (a new version, dirty again). Each time
 * a block is used every byte of it is checked against its version's
 * pattern.
 *
 *   kv_tiering [-d DIR] [-b BLOCKS] [-s SLOTS] [-k BLOCK_KIB] [-r REQUESTS]
 *              [-e auto|uring|threads] [--direct] [--tier s3://BUCKET[/PREFIX]]
 *
 * With an S3 tier, the server and credentials come from the environment as
 * the AWS tools read them (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY); block i is the object PREFIXkv_tiering.PID/block-i,
 * left in the bucket afterwards.
 *
 * With --vram the pool is GPU memory (nxl_mem_alloc(NXL_VRAM) on device 0,
 * through the CUDA transport) and the file tier moves through the GDS
 * transport (cuFile: VRAM to and from the file, no host copy where GDS is
 * set up); blocks are computed and checked through a host staging buffer
 * (cudaMemcpy), as a model's kernels would write and read them.
 *
 * Prints a summary; exits 0 when every byte was right and every transfer
 * succeeded. */
#include <nxl.h>
#ifdef KV_CUDA
#include "transports/common/cudart.h"
#endif

#include "cli.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WINDOW 8       /* requests looked ahead: their blocks load in parallel */
#define EVICT_BATCH 16 /* blocks evicted together */

enum { S_FREE, S_LOADING, S_READY, S_EVICTING };

typedef struct slot {
    int state;
    long blk;
    uint64_t used; /* LRU clock */
} slot_t;

typedef struct blk {
    long slot;     /* -1: not in DRAM */
    unsigned ver;  /* current version */
    bool on_file;  /* the file holds the current version */
    bool dirty;    /* DRAM holds a version the file does not */
} blk_t;

static struct {
    nxl_agent_t *a;
    char *pool;
    size_t bs;
    long nblocks, nslots, nreq;
    slot_t *slots;
    blk_t *blks;
    long *req;
    bool *modify;
    long cur;
    uint64_t clock;
    nxl_prepped_t *lp, *rp;
    int inflight, evicting;
    int failed;
    bool done;
    /* statistics */
    long hits, misses, loads, evict_xfers, evicted_blocks, written_blocks, first_touch,
        modified;
    uint64_t bytes_checked;
    char engine[512]; /* the transport's own line, whole (GDS: 270 bytes and more) */
    bool vram;     /* the pool is GPU memory */
    char *stage;   /* --vram: a block on the host, to compute and check it */
} K;

#ifdef KV_CUDA
static const nxl_cuda_rt_t *rt;
#endif

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* the content of block b at version v */
static void fill(char *p, size_t len, long b, unsigned v)
{
    uint64_t x = (uint64_t)b * 0x100000001b3ull + v * 0x9e3779b97f4a7c15ull + 1;
    uint64_t *q = (uint64_t *)p;
    for (size_t i = 0; i < len / 8; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        q[i] = x;
    }
}

static long check(const char *p, size_t len, long b, unsigned v)
{
    uint64_t x = (uint64_t)b * 0x100000001b3ull + v * 0x9e3779b97f4a7c15ull + 1;
    const uint64_t *q = (const uint64_t *)p;
    for (size_t i = 0; i < len / 8; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (q[i] != x)
            return (long)(i * 8);
    }
    return -1;
}

static char *slot_mem(long s) { return K.pool + (size_t)s * K.bs; }

/* block b at version v written into slot s (in VRAM: through the stage) */
static void fill_slot(long s, long b, unsigned v)
{
    if (!K.vram) {
        fill(slot_mem(s), K.bs, b, v);
        return;
    }
#ifdef KV_CUDA
    fill(K.stage, K.bs, b, v);
    rt->cudaMemcpy(slot_mem(s), K.stage, K.bs, cudaMemcpyHostToDevice);
#endif
}

/* the first byte of slot s that is not block b at version v, or -1 */
static long check_slot(long s, long b, unsigned v)
{
    if (!K.vram)
        return check(slot_mem(s), K.bs, b, v);
#ifdef KV_CUDA
    if (rt->cudaMemcpy(K.stage, slot_mem(s), K.bs, cudaMemcpyDeviceToHost) != cudaSuccess)
        return 0;
#endif
    return check(K.stage, K.bs, b, v);
}

static void step(void);

static void fail(const char *what, const char *why)
{
    fprintf(stderr, "kv_tiering: %s: %s\n", what, why);
    K.failed = 1;
    K.done = true;
    nxl_agent_stop(K.a);
}

/* ---- loading a block: file → DRAM */

typedef struct load { long slot; nxl_xfer_t *x; } load_t;

static void load_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    load_t *l = arg;
    K.inflight--;
    nxl_xfer_release(l->x);
    if (st != NXL_SUCCESS) {
        fail("load", nxl_future_error(f));
    } else {
        K.slots[l->slot].state = S_READY;
        K.loads++;
    }
    free(l);
    step();
}

static bool needed_soon(long b)
{
    for (long i = K.cur; i < K.nreq && i < K.cur + WINDOW; i++)
        if (K.req[i] == b)
            return true;
    return false;
}

/* ---- evicting: DRAM → file, LRU blocks not needed soon, as one transfer */

typedef struct evict { long slots[EVICT_BATCH]; int n; nxl_xfer_t *x; } evict_t;

static void evict_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    evict_t *e = arg;
    K.inflight--;
    K.evicting = 0;
    nxl_xfer_release(e->x);
    if (st != NXL_SUCCESS) {
        fail("evict", nxl_future_error(f));
    } else {
        for (int i = 0; i < e->n; i++) {
            slot_t *s = &K.slots[e->slots[i]];
            blk_t *b = &K.blks[s->blk];
            b->on_file = true;
            b->dirty = false;
            b->slot = -1;
            s->state = S_FREE;
        }
        K.written_blocks += e->n;
    }
    free(e);
    step();
}

static int cmp_lru(const void *x, const void *y)
{
    uint64_t a = K.slots[*(const long *)x].used, b = K.slots[*(const long *)y].used;
    return a < b ? -1 : a > b;
}

static void evict(void)
{
    if (K.evicting)
        return;
    long *cand = malloc(K.nslots * sizeof(*cand)), nc = 0;
    for (long s = 0; s < K.nslots; s++)
        if (K.slots[s].state == S_READY && !needed_soon(K.slots[s].blk))
            cand[nc++] = s;
    qsort(cand, nc, sizeof(*cand), cmp_lru);
    evict_t *e = calloc(1, sizeof(*e));
    size_t ridx[EVICT_BATCH], lidx[EVICT_BATCH];
    for (long i = 0; i < nc && i < EVICT_BATCH; i++) {
        slot_t *s = &K.slots[cand[i]];
        blk_t *b = &K.blks[s->blk];
        K.evicted_blocks++;
        if (!b->dirty) { /* the file has it already */
            b->slot = -1;
            s->state = S_FREE;
            continue;
        }
        s->state = S_EVICTING;
        lidx[e->n] = (size_t)cand[i];
        ridx[e->n] = (size_t)s->blk;
        e->slots[e->n++] = cand[i];
    }
    free(cand);
    if (!e->n) {
        free(e);
        return;
    }
    nxl_status_t st = nxl_xfer_make(K.a, NXL_WRITE, K.lp, lidx, K.rp, ridx, (size_t)e->n, NULL,
                                    &e->x);
    if (st == NXL_SUCCESS)
        st = nxl_xfer_post(e->x, evict_done, e, NULL);
    if (st != NXL_SUCCESS) {
        fail("evict", nxl_agent_last_error(K.a));
        return;
    }
    K.evict_xfers++;
    K.evicting = 1;
    K.inflight++;
}

/* starts bringing block b into DRAM; false when no slot is free yet */
static bool ensure(long bi)
{
    blk_t *b = &K.blks[bi];
    if (b->slot >= 0)
        return true;
    long s = -1;
    for (int pass = 0; pass < 2 && s < 0; pass++) {
        for (long i = 0; i < K.nslots && s < 0; i++)
            if (K.slots[i].state == S_FREE)
                s = i;
        if (s < 0 && pass == 0)
            evict(); /* clean blocks are freed at once, dirty ones after their write */
    }
    if (s < 0)
        return false;
    slot_t *sl = &K.slots[s];
    sl->blk = bi;
    sl->used = ++K.clock;
    b->slot = s;
    if (!b->on_file) { /* first touch: the block is computed (prefill) */
        fill_slot(s, bi, b->ver);
        b->dirty = true;
        sl->state = S_READY;
        K.first_touch++;
        return true;
    }
    sl->state = S_LOADING;
    load_t *l = calloc(1, sizeof(*l));
    l->slot = s;
    size_t li = (size_t)s, ri = (size_t)bi;
    nxl_status_t st = nxl_xfer_make(K.a, NXL_READ, K.lp, &li, K.rp, &ri, 1, NULL, &l->x);
    if (st == NXL_SUCCESS)
        st = nxl_xfer_post(l->x, load_done, l, NULL);
    if (st != NXL_SUCCESS) {
        free(l);
        fail("load", nxl_agent_last_error(K.a));
        return false;
    }
    K.inflight++;
    K.misses++;
    return true;
}

/* serves requests in order while their blocks are ready */
static void step(void)
{
    while (!K.failed && K.cur < K.nreq) {
        /* the window's blocks: loaded, or loading (a block whose eviction
         * was under way when it became needed is loaded again) */
        for (long i = K.cur; i < K.nreq && i < K.cur + WINDOW; i++)
            if (!ensure(K.req[i]))
                break;
        if (K.failed)
            return;
        blk_t *b = &K.blks[K.req[K.cur]];
        if (b->slot < 0 || K.slots[b->slot].state != S_READY) {
            if (!K.inflight) { /* nothing will call again: a bug of this example */
                char why[160];
                snprintf(why, sizeof(why), "request %ld (block %ld, slot %ld, state %d) waits, "
                         "nothing in flight", K.cur, K.req[K.cur], b->slot,
                         b->slot >= 0 ? K.slots[b->slot].state : -1);
                fail("stall", why);
            }
            return; /* a callback calls again */
        }
        slot_t *s = &K.slots[b->slot];
        long bad = check_slot(b->slot, K.req[K.cur], b->ver);
        if (bad >= 0) {
            char why[160];
            snprintf(why, sizeof(why), "block %ld version %u differs at byte %ld", K.req[K.cur],
                     b->ver, bad);
            fail("check", why);
            return;
        }
        K.bytes_checked += K.bs;
        s->used = ++K.clock;
        if (K.modify[K.cur]) {
            b->ver++;
            fill_slot(b->slot, K.req[K.cur], b->ver);
            b->dirty = true;
            K.modified++;
        }
        K.cur++;
    }
    if (K.cur == K.nreq && !K.inflight && !K.done) {
        K.done = true;
        nxl_agent_stop(K.a);
    }
}

static void log_cb(nxl_log_level_t lvl, const char *msg, void *arg)
{
    if (!strncmp(msg, "GDS: cuFile", 11))
        snprintf(K.engine, sizeof(K.engine), "%s", msg + 5);
    else if (strstr(msg, "I/O engine"))
        snprintf(K.engine, sizeof(K.engine), "%s", strstr(msg, "I/O engine") + 11);
    else if (!strncmp(msg, "OBJ: S3 at", 10))
        snprintf(K.engine, sizeof(K.engine), "%s", msg + 5);
    else if (lvl <= NXL_LOG_WARN)
        fprintf(stderr, "nxl: %s\n", msg);
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: kv_tiering [-d DIR] [-b BLOCKS] [-s SLOTS] [-k BLOCK_KIB] [-r REQUESTS]\n"
"                  [-e auto|uring|threads] [--direct] [--tier s3://BUCKET[/PREFIX]] [--vram]\n"
"  -d, --dir DIR         where the file tier lives (/tmp)\n"
"  -b, --blocks N        KV blocks in all (512)\n"
"  -s, --slots N         of them in the DRAM pool at once (128)\n"
"  -k, --block_kib N     block size in KiB (64)\n"
"  -r, --requests N      requests to serve (20000)\n"
"  -e, --engine E        the POSIX transport's I/O engine: auto, uring, threads (auto)\n"
"  --direct              O_DIRECT on the file\n"
"  --tier s3://BUCKET[/PREFIX]  an S3 bucket as the second tier instead of a file\n"
"  --vram                the pool in GPU memory (CUDA), the file tier through GDS (cuFile)\n"
"                        (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, ...)\n"
"Flags take '-b N', '--blocks N' or '--blocks=N'.\n");
}

int main(int argc, char **argv)
{
    const char *dir = "/tmp", *engine = "auto", *tier = NULL;
    bool direct = false;
    unsigned kib = 64;
    K.nblocks = 512;
    K.nslots = 128;
    K.nreq = 20000;
#define OPT(n, c, a, s, f, ...) {.name = n, .short_name = c, .arg = a, .set = s, .field = f, __VA_ARGS__}
    const cli_opt_t opts[] = {
        OPT("dir", 'd', CLI_VALUE, cli_set_str, &dir),
        OPT("blocks", 'b', CLI_VALUE, cli_set_long, &K.nblocks, .min = 1, .max = 1 << 24),
        OPT("slots", 's', CLI_VALUE, cli_set_long, &K.nslots, .min = 1, .max = 1 << 24),
        OPT("block_kib", 'k', CLI_VALUE, cli_set_uint, &kib, .min = 1, .max = 1 << 20),
        OPT("requests", 'r', CLI_VALUE, cli_set_long, &K.nreq, .min = 0),
        OPT("engine", 'e', CLI_VALUE, cli_set_str, &engine),
        OPT("direct", 0, CLI_SWITCH, cli_set_true, &direct),
        OPT("tier", 0, CLI_VALUE, cli_set_str, &tier),
        OPT("vram", 0, CLI_SWITCH, cli_set_true, &K.vram),
        {0},
    };
#undef OPT
    const cli_t cli = {.prog = "kv_tiering", .opts = opts, .usage = usage, .help_h = true};
    int first = cli_parse(&cli, argc, argv);
    if (first < argc)
        cli_die(&cli, "unexpected argument '%s' (see --help)", argv[first]);
    K.bs = (size_t)kib * 1024;
    char bucket[256] = "", prefix[256] = "";
    if (tier) {
        const char *b = !strncmp(tier, "s3://", 5) ? tier + 5 : NULL;
        const char *sl = b ? strchr(b, '/') : NULL;
        size_t bl = b ? (sl ? (size_t)(sl - b) : strlen(b)) : 0;
        if (!b || !bl || bl >= sizeof(bucket)) {
            fprintf(stderr, "kv_tiering: --tier s3://BUCKET[/PREFIX], not '%s'\n", tier);
            return 2;
        }
        memcpy(bucket, b, bl);
        snprintf(prefix, sizeof(prefix), "%s", sl ? sl + 1 : "");
    }
    if (K.nblocks < 1 || K.nslots < EVICT_BATCH + WINDOW || K.bs < 4096 || K.bs % 4096 ||
        K.nreq < 1) {
        fprintf(stderr, "kv_tiering: needs blocks >= 1, slots >= %d, block size a multiple of "
                        "4 KiB, requests >= 1\n", EVICT_BATCH + WINDOW);
        return 2;
    }

    nxl_agent_config_t cfg;
    nxl_agent_config_init(&cfg);
    cfg.name = "kv-tier";
    cfg.log_level = NXL_LOG_INFO;
    cfg.log_cb = log_cb;
    if (nxl_agent_create(&cfg, &K.a) != NXL_SUCCESS) {
        fprintf(stderr, "kv_tiering: %s\n", nxl_agent_last_error(NULL));
        return 1;
    }
    nxl_param_t params[] = {{"engine", engine}, {"direct", direct ? "1" : "0"}};
    nxl_param_t oparams[] = {{"bucket", bucket}};
    if (K.vram) {
#ifdef KV_CUDA
        char why[160];
        int kind;
        if (tier) {
            fprintf(stderr, "kv_tiering: --vram takes a file tier, not --tier\n");
            return 2;
        }
        if (!(rt = nxl_cuda_rt_get(&kind, why, sizeof(why)))) {
            fprintf(stderr, "kv_tiering: --vram: %s\n", why);
            return 1;
        }
        K.stage = malloc(K.bs);
        if (nxl_backend_create(K.a, "CUDA", NULL, 0, NULL) != NXL_SUCCESS ||
            nxl_backend_create(K.a, "GDS", NULL, 0, NULL) != NXL_SUCCESS) {
            fprintf(stderr, "kv_tiering: %s\n", nxl_agent_last_error(K.a));
            return 1;
        }
#else
        fprintf(stderr, "kv_tiering: --vram: built without the CUDA transport\n");
        return 1;
#endif
    } else if (tier ? nxl_backend_create(K.a, "OBJ", oparams, 1, NULL) != NXL_SUCCESS
                    : nxl_backend_create(K.a, "POSIX", params, 2, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "kv_tiering: %s\n", nxl_agent_last_error(K.a));
        return 1;
    }

    /* the DRAM tier (with --vram: the VRAM tier, on device 0) */
    void *pool;
    if (nxl_mem_alloc(K.a, K.vram ? NXL_VRAM : NXL_DRAM, (size_t)K.nslots * K.bs, 0, &pool) !=
        NXL_SUCCESS) {
        fprintf(stderr, "kv_tiering: %s\n", nxl_agent_last_error(K.a));
        return 1;
    }
    K.pool = pool;
    /* the file tier: one file, created, registered by path; or the S3 tier:
     * one object per block, block i registered as OBJ id i + 1 */
    char path[600], meta[640];
    size_t fsize = (size_t)K.nblocks * K.bs;
    nxl_mem_t ttype = tier ? NXL_OBJ : NXL_FILE;
    if (tier) {
        snprintf(path, sizeof(path), "s3://%s/%skv_tiering.%d/", bucket, prefix, (int)getpid());
        for (long i = 0; i < K.nblocks; i++) {
            snprintf(meta, sizeof(meta), "%skv_tiering.%d/block-%ld", prefix, (int)getpid(), i);
            nxl_desc_t od = {.addr = 0, .len = K.bs, .dev_id = (uint64_t)i + 1, .meta = meta,
                             .meta_len = strlen(meta)};
            if (nxl_mem_register(K.a, NXL_OBJ, &od, 1, NULL) != NXL_SUCCESS) {
                fprintf(stderr, "kv_tiering: %s\n", nxl_agent_last_error(K.a));
                return 1;
            }
        }
    } else {
        snprintf(path, sizeof(path), "%s/kv_tiering.%d", dir, (int)getpid());
        snprintf(meta, sizeof(meta), "path=%s;mode=create", path);
        nxl_desc_t fd = {.addr = 0, .len = fsize, .dev_id = 1, .meta = meta,
                         .meta_len = strlen(meta)};
        if (nxl_mem_register(K.a, NXL_FILE, &fd, 1, NULL) != NXL_SUCCESS) {
            fprintf(stderr, "kv_tiering: %s\n", nxl_agent_last_error(K.a));
            return 1;
        }
    }

    /* both sides prepared once; transfers name slots and blocks by index */
    nxl_desc_t *ld = calloc((size_t)K.nslots, sizeof(*ld)),
               *rd = calloc((size_t)K.nblocks, sizeof(*rd));
    for (long i = 0; i < K.nslots; i++)
        ld[i] = (nxl_desc_t){.addr = (uintptr_t)slot_mem(i), .len = K.bs};
    for (long i = 0; i < K.nblocks; i++)
        rd[i] = tier ? (nxl_desc_t){.addr = 0, .len = K.bs, .dev_id = (uint64_t)i + 1}
                     : (nxl_desc_t){.addr = (uintptr_t)i * K.bs, .len = K.bs, .dev_id = 1};
    if (nxl_prep(K.a, NULL, K.vram ? NXL_VRAM : NXL_DRAM, ld, (size_t)K.nslots, &K.lp) !=
            NXL_SUCCESS ||
        nxl_prep(K.a, nxl_agent_name(K.a), ttype, rd, (size_t)K.nblocks, &K.rp) !=
            NXL_SUCCESS) {
        fprintf(stderr, "kv_tiering: %s\n", nxl_agent_last_error(K.a));
        return 1;
    }
    free(ld);
    free(rd);

    K.slots = calloc((size_t)K.nslots, sizeof(*K.slots));
    K.blks = calloc((size_t)K.nblocks, sizeof(*K.blks));
    K.req = calloc((size_t)K.nreq, sizeof(*K.req));
    K.modify = calloc((size_t)K.nreq, sizeof(*K.modify));
    for (long i = 0; i < K.nblocks; i++)
        K.blks[i].slot = -1;
    /* 80% of requests go to a hot fifth of the blocks; one in eight modifies */
    long hot = K.nblocks / 5 ? K.nblocks / 5 : 1;
    for (long i = 0; i < K.nreq; i++) {
        K.req[i] = rnd() % 10 < 8 ? (long)(rnd() % (uint64_t)hot) : (long)(rnd() % (uint64_t)K.nblocks);
        K.modify[i] = rnd() % 8 == 0;
    }

    uint64_t t0 = now_us();
    step();
    if (!K.done)
        nxl_agent_run(K.a);
    double secs = (double)(now_us() - t0) / 1e6;

    /* finally the whole cache, written back and read again, checked */
    long resident = 0;
    for (long i = 0; i < K.nblocks; i++)
        resident += K.blks[i].slot >= 0;

    printf("kv_tiering: %ld requests over %ld blocks of %zu KiB (%s %s, %.1f MiB), %s pool "
           "of %ld slots (%.1f MiB)\n", K.nreq, K.nblocks, K.bs >> 10, tier ? "objects" : "file",
           path, (double)fsize / 1048576.0, K.vram ? "VRAM" : "DRAM", K.nslots, (double)K.nslots * (double)K.bs / 1048576.0);
    printf("  engine:     %s\n", K.engine);
    printf("  hits:       %ld   first touches: %ld   loads from the tier: %ld   modified: %ld\n",
           K.hits = K.nreq - K.misses - K.first_touch, K.first_touch, K.loads, K.modified);
    printf("  evictions:  %ld blocks in %ld batches, %ld written back (dirty)\n",
           K.evicted_blocks, K.evict_xfers, K.written_blocks);
    printf("  moved:      %.1f MiB read, %.1f MiB written in %.3f s (%.0f MiB/s)\n",
           (double)K.loads * (double)K.bs / 1048576.0,
           (double)K.written_blocks * (double)K.bs / 1048576.0, secs,
           secs > 0 ? (double)(K.loads + K.written_blocks) * (double)K.bs / 1048576.0 / secs : 0);
    printf("  checked:    %.1f MiB, every byte; %ld blocks resident at the end\n",
           (double)K.bytes_checked / 1048576.0, resident);
    int rc = K.failed || K.cur != K.nreq;
    printf("kv_tiering: %s\n", rc ? "FAILED" : "ok");

    nxl_prepped_release(K.lp);
    nxl_prepped_release(K.rp);
    nxl_agent_destroy(K.a);
    if (!tier)
        unlink(path);
    free(K.slots);
    free(K.blks);
    free(K.req);
    free(K.modify);
    free(K.stage);
    return rc;
}
