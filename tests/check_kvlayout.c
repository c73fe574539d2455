/* SPDX-License-Identifier: BSD-3-Clause */
/* KV layouts (nxl/kv.h): layouts refused with the number that is wrong;
 * the planner against a byte-by-byte reference for every pairing of TP
 * 1/2/4/8 on each side, 16 and 32 tokens per block and both orders; the
 * CPU re-layout's bandwidth against memcpy(); KV transfers over UCX and
 * LIBFABRIC between two agents of this process (prefill TP 4 -> decode TP
 * 2, both block sizes, both orders, zero copy and staged; a few other TP
 * pairings; threaded agents), every byte of the decode regions checked. The
 * planner's time and the copy's rate are printed; with NXL_KV_BENCH=1 the
 * zero copy / staged comparison behind NXL_KV_ZCOPY_MIN_DEFAULT too. */
#include "testlib.h"

#include <nxl/kv.h>

#include "kv_fixture.h"

#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int holds(const nxl_kv_layout_t *l, uint32_t g)
{
    uint32_t hl = l->heads / l->tp_size;
    return g >= l->tp_rank * hl && g < (l->tp_rank + 1) * hl;
}

/* The plan of (d, p, s) checked byte by byte against the reference: every
 * byte the decode side holds of the sequence's shared heads comes from
 * the right prefill byte, exactly once, and nothing else is written. */
static void check_plan(const nxl_kv_layout_t *d, const nxl_kv_layout_t *p, const nxl_kv_seq_t *s,
                       const char *what)
{
    nxl_kv_piece_t *pc = NULL;
    size_t n = 0;
    char why[512];
    ck_assert_msg(nxl_kv_plan(d, p, s, &pc, &n, why, sizeof(why)) == NXL_SUCCESS, "%s: %s", what,
                  why);
    int64_t *want = malloc(d->len * sizeof(*want));
    ck_assert_ptr_nonnull(want);
    for (size_t i = 0; i < d->len; i++)
        want[i] = -1;
    uint64_t row = (uint64_t)d->head_size * d->elem_size;
    size_t expect = 0;
    for (uint32_t l = 0; l < d->layers; l++)
        for (size_t i = 0; i < s->tokens; i++)
            for (uint32_t g = 0; g < d->heads; g++) {
                if (!holds(d, g) || !holds(p, g))
                    continue;
                for (uint32_t k = 0; k < row; k++) {
                    uint64_t dof = ref_off(d, l, s->decode_blocks[i / d->block_tokens],
                                           (uint32_t)(i % d->block_tokens), g, k);
                    uint64_t sof = ref_off(p, l, s->prefill_blocks[i / p->block_tokens],
                                           (uint32_t)(i % p->block_tokens), g, k);
                    ck_assert_msg(dof < d->len, "%s: reference off the region", what);
                    want[dof] = (int64_t)sof;
                    expect++;
                }
            }
    size_t got = 0;
    for (size_t j = 0; j < n; j++) {
        ck_assert_msg(pc[j].len > 0, "%s: piece %zu is empty", what, j);
        ck_assert_msg(pc[j].dst >= d->base && pc[j].dst + pc[j].len <= d->base + d->len,
                      "%s: piece %zu lands outside the decode region", what, j);
        ck_assert_msg(pc[j].src >= p->base && pc[j].src + pc[j].len <= p->base + p->len,
                      "%s: piece %zu reads outside the prefill region", what, j);
        for (uint64_t k = 0; k < pc[j].len; k++) {
            uint64_t dof = pc[j].dst - d->base + k, sof = pc[j].src - p->base + k;
            ck_assert_msg(want[dof] == (int64_t)sof,
                          "%s: piece %zu byte %llu: decode byte %llu gets prefill byte %llu, "
                          "the reference says %lld", what, j, (unsigned long long)k,
                          (unsigned long long)dof, (unsigned long long)sof,
                          (long long)want[dof]);
            want[dof] = -2;
            got++;
        }
    }
    ck_assert_msg(got == expect, "%s: the pieces move %zu bytes, the reference %zu", what, got,
                  expect);
    /* a piece is only cut where one side is not contiguous */
    for (size_t j = 1; j < n; j++)
        ck_assert_msg(!(pc[j - 1].src + pc[j - 1].len == pc[j].src &&
                        pc[j - 1].dst + pc[j - 1].len == pc[j].dst),
                      "%s: pieces %zu and %zu touch on both sides and were not merged", what,
                      j - 1, j);
    free(want);
    nxl_free(pc);
}

/* distinct block ids, not in order: (j * 3 + off) mod blocks (blocks a power of 2) */
static void ids_of(uint32_t *ids, size_t n, uint32_t blocks, uint32_t off, int shuffle)
{
    for (size_t j = 0; j < n; j++)
        ids[j] = shuffle ? (uint32_t)((j * 3 + off) % blocks) : (uint32_t)j;
}

START_TEST(t_plan_reference)
{
    static const uint32_t tps[] = {1, 2, 4, 8}, bts[] = {16, 32};
    const uint32_t heads = 8, hs = 4, es = 2, layers = 2, blocks = 8;
    const size_t tokens = 70;
    size_t plans = 0;
    for (int shuffle = 0; shuffle < 2; shuffle++)
        for (size_t a = 0; a < 4; a++)
            for (size_t b = 0; b < 4; b++)
                for (size_t x = 0; x < 2; x++)
                    for (size_t y = 0; y < 2; y++)
                        for (int od = 0; od < 2; od++)
                            for (int op = 0; op < 2; op++)
                                for (uint32_t rd = 0; rd < tps[a]; rd++)
                                    for (uint32_t rp = 0; rp < tps[b]; rp++) {
                                        nxl_kv_layout_t d = mk(layers, blocks, bts[x], heads, hs,
                                                               es, tps[a], rd, od, 0x100000);
                                        nxl_kv_layout_t p = mk(layers, blocks, bts[y], heads, hs,
                                                               es, tps[b], rp, op, 0x900000);
                                        uint32_t di[8], pi[8];
                                        nxl_kv_seq_t s = {di, (tokens + bts[x] - 1) / bts[x], pi,
                                                          (tokens + bts[y] - 1) / bts[y], tokens};
                                        ids_of(di, s.n_decode, blocks, 1, shuffle);
                                        ids_of(pi, s.n_prefill, blocks, 5, shuffle);
                                        char what[160];
                                        snprintf(what, sizeof(what),
                                                 "decode TP %u rank %u bt %u %s <- prefill TP "
                                                 "%u rank %u bt %u %s%s", tps[a], rd, bts[x],
                                                 od ? "TO" : "HO", tps[b], rp, bts[y],
                                                 op ? "TO" : "HO", shuffle ? " shuffled" : "");
                                        check_plan(&d, &p, &s, what);
                                        plans++;
                                    }
    /* strides: decode blocks outer ([block][plane]...), prefill with gaps */
    for (int od = 0; od < 2; od++) {
        nxl_kv_layout_t d = mk(layers, blocks, 16, heads, hs, es, 2, 1, od, 0x100000);
        nxl_kv_layout_t p = mk(layers, blocks, 32, heads, hs, es, 1, 0, !od, 0x900000);
        size_t dbb = 16 * 4 * hs * es, pbb = 32 * 8 * hs * es;
        d.layer_stride = dbb;
        d.block_stride = layers * dbb;
        p.block_stride = pbb + 64;
        p.layer_stride = blocks * p.block_stride + 128;
        p.len = (layers - 1) * p.layer_stride + (blocks - 1) * p.block_stride + pbb;
        uint32_t di[8], pi[8];
        nxl_kv_seq_t s = {di, 5, pi, 3, tokens};
        ids_of(di, 5, blocks, 2, 1);
        ids_of(pi, 3, blocks, 0, 1);
        check_plan(&d, &p, &s, od ? "strided, decode TO" : "strided, decode HO");
        plans++;
    }
    printf("check_kvlayout: %zu plans match the reference byte by byte\n", plans);
}
END_TEST

/* what the layouts of the sizes below merge into */
START_TEST(t_plan_merges)
{
    const size_t tokens = 64;
    uint32_t ids[4] = {0, 1, 2, 3};
    nxl_kv_seq_t s = {ids, 4, ids, 4, tokens};
    nxl_kv_piece_t *pc;
    size_t n;
    /* the same packed layout on both sides, consecutive blocks: one piece */
    nxl_kv_layout_t d = mk(4, 4, 16, 8, 128, 2, 1, 0, NXL_KV_TOKENS_OUTER, 0x10000000);
    nxl_kv_layout_t p = mk(4, 4, 16, 8, 128, 2, 1, 0, NXL_KV_TOKENS_OUTER, 0x90000000);
    ck_assert_int_eq(nxl_kv_plan(&d, &p, &s, &pc, &n, NULL, 0), NXL_SUCCESS);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(pc[0].len, d.len);
    nxl_free(pc);
    /* decode TP 2 from prefill TP 1, tokens outer: a piece per token of 4 heads */
    d = mk(4, 4, 16, 8, 128, 2, 2, 1, NXL_KV_TOKENS_OUTER, 0x10000000);
    ck_assert_int_eq(nxl_kv_plan(&d, &p, &s, &pc, &n, NULL, 0), NXL_SUCCESS);
    ck_assert_uint_eq(n, 4 * tokens);
    ck_assert_uint_eq(pc[0].len, 4 * 256);
    ck_assert_uint_eq(pc[0].src, p.base + 4 * 256);
    nxl_free(pc);
    /* heads outer on both sides, TP 2 from TP 1: a piece per plane (heads
     * 4..7 of every block, blocks consecutive on both sides... but the
     * prefill's block holds heads 0..3 between): a piece per plane and block */
    d = mk(4, 4, 16, 8, 128, 2, 2, 1, NXL_KV_HEADS_OUTER, 0x10000000);
    p = mk(4, 4, 16, 8, 128, 2, 1, 0, NXL_KV_HEADS_OUTER, 0x90000000);
    ck_assert_int_eq(nxl_kv_plan(&d, &p, &s, &pc, &n, NULL, 0), NXL_SUCCESS);
    ck_assert_uint_eq(n, 4 * 4);
    ck_assert_uint_eq(pc[0].len, 4 * 16 * 256);
    nxl_free(pc);
    /* no head shared: no pieces */
    d = mk(4, 4, 16, 8, 128, 2, 2, 0, NXL_KV_HEADS_OUTER, 0x10000000);
    p = mk(4, 4, 16, 8, 128, 2, 2, 1, NXL_KV_HEADS_OUTER, 0x90000000);
    ck_assert_int_eq(nxl_kv_plan(&d, &p, &s, &pc, &n, NULL, 0), NXL_SUCCESS);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(pc);
}
END_TEST

/* Bad layouts: refused, the sentence names the number */
START_TEST(t_layout_refused)
{
    char why[512];
    nxl_kv_layout_t l = mk(2, 8, 16, 8, 128, 2, 1, 0, NXL_KV_HEADS_OUTER, 0x1000);
    ck_assert_int_eq(nxl_kv_layout_check(&l, why, sizeof(why)), NXL_SUCCESS);
    ck_assert_str_eq(why, "");
    nxl_kv_layout_t b = l;
    b.tp_size = 3;
    ck_assert_int_eq(nxl_kv_layout_check(&b, why, sizeof(why)), NXL_ERR_INVALID_PARAM);
    ck_sentence(why, "heads 8 is not divisible by tp_size 3");
    b = l;
    b.tp_size = 4;
    b.tp_rank = 4;
    ck_assert_int_eq(nxl_kv_layout_check(&b, why, sizeof(why)), NXL_ERR_INVALID_PARAM);
    ck_sentence(why, "tp_rank 4 is not below tp_size 4");
    b = l;
    b.elem_size = 0;
    ck_assert_int_eq(nxl_kv_layout_check(&b, why, sizeof(why)), NXL_ERR_INVALID_PARAM);
    ck_sentence(why, "elem_size is 0");
    b = l;
    b.len -= 1;
    ck_assert_int_eq(nxl_kv_layout_check(&b, why, sizeof(why)), NXL_ERR_INVALID_PARAM);
    ck_sentence(why, "too small");
    ck_sentence(why, "len 524287");
    ck_sentence(why, "need 524288");
    b = l;
    b.len = 0;
    ck_assert_int_eq(nxl_kv_layout_check(&b, why, sizeof(why)), NXL_ERR_INVALID_PARAM);
    ck_sentence(why, "len is 0");
    b = l;
    b.head_size = 1u << 31;
    b.elem_size = 1u << 31;
    b.block_tokens = 1u << 31;
    ck_assert_int_eq(nxl_kv_layout_check(&b, why, sizeof(why)), NXL_ERR_INVALID_PARAM);
    ck_sentence(why, "overflows");
    b = l;
    b.blocks = 0xffffffffu;
    b.layers = 0xffffffffu;
    b.len = SIZE_MAX;
    b.layer_stride = SIZE_MAX / 2;
    ck_assert_int_eq(nxl_kv_layout_check(&b, why, sizeof(why)), NXL_ERR_INVALID_PARAM);
    ck_sentence(why, "overflow");
    b = l;
    b.block_stride = 100;
    ck_assert_int_eq(nxl_kv_layout_check(&b, why, sizeof(why)), NXL_ERR_INVALID_PARAM);
    ck_sentence(why, "block_stride 100 is smaller than a block (32768 bytes)");
    b = l;
    b.size = 8;
    ck_assert_int_eq(nxl_kv_layout_check(&b, why, sizeof(why)), NXL_ERR_INVALID_PARAM);
    ck_sentence(why, "size 8");

    /* the pair and the sequence */
    uint32_t ids[2] = {0, 1}, bad[2] = {0, 9};
    nxl_kv_seq_t s = {ids, 2, ids, 2, 32};
    nxl_kv_piece_t *pc;
    size_t n;
    nxl_kv_layout_t p = l;
    p.head_size = 64;
    p.len /= 2;
    ck_assert_int_eq(nxl_kv_plan(&l, &p, &s, &pc, &n, why, sizeof(why)), NXL_ERR_INVALID_PARAM);
    ck_sentence(why, "head_size 128, prefill layout 64");
    p = l;
    p.elem_size = 1;
    p.len /= 2;
    ck_assert_int_eq(nxl_kv_plan(&l, &p, &s, &pc, &n, why, sizeof(why)), NXL_ERR_INVALID_PARAM);
    ck_sentence(why, "elem_size 2, prefill layout 1");
    p = l;
    p.tp_size = 3;
    ck_assert_int_eq(nxl_kv_plan(&l, &p, &s, &pc, &n, why, sizeof(why)), NXL_ERR_INVALID_PARAM);
    ck_sentence(why, "prefill layout: heads 8 is not divisible by tp_size 3");
    nxl_kv_seq_t s2 = {ids, 2, bad, 2, 32};
    ck_assert_int_eq(nxl_kv_plan(&l, &l, &s2, &pc, &n, why, sizeof(why)), NXL_ERR_INVALID_PARAM);
    ck_sentence(why, "prefill block id 9 (index 1) is out of range: the layout has 8 blocks");
    nxl_kv_seq_t s3 = {ids, 1, ids, 2, 32};
    ck_assert_int_eq(nxl_kv_plan(&l, &l, &s3, &pc, &n, why, sizeof(why)), NXL_ERR_INVALID_PARAM);
    ck_sentence(why, "decode block list has 1 ids: 32 tokens in blocks of 16 tokens need 2");

    /* and through nxl_kv_xfer_make, in nxl_agent_last_error() */
    nxl_agent_t *a = tl_agent_bare("kvbad", 0);
    nxl_kv_xfer_t *kx = NULL;
    p = l;
    p.tp_size = 3;
    ck_assert_int_eq(nxl_kv_xfer_make(a, "peer", &l, &p, &s, NULL, NULL, &kx),
                     NXL_ERR_INVALID_PARAM);
    ck_assert_ptr_null(kx);
    ck_sentence(nxl_agent_last_error(a), "heads 8 is not divisible by tp_size 3");
    nxl_agent_destroy(a);
}
END_TEST

/* The planner's time for the size: 32 layers x 2 planes, 64
 * blocks of 16 tokens, 8 heads of 128 x 2 B */
START_TEST(t_plan_time)
{
    static const struct {
        uint32_t tpd, tpp;
        nxl_kv_order_t od, op;
        const char *name;
    } cases[] = {
        {1, 1, NXL_KV_TOKENS_OUTER, NXL_KV_TOKENS_OUTER, "same layout (TP 1, TO)"},
        {2, 4, NXL_KV_TOKENS_OUTER, NXL_KV_TOKENS_OUTER, "decode TP 2 <- prefill TP 4, TO"},
        {1, 1, NXL_KV_HEADS_OUTER, NXL_KV_TOKENS_OUTER, "TP 1, HO <- TO (256 B rows)"},
        {2, 1, NXL_KV_HEADS_OUTER, NXL_KV_HEADS_OUTER, "decode TP 2 <- TP 1, HO"},
    };
    uint32_t ids[64];
    for (int i = 0; i < 64; i++)
        ids[i] = (uint32_t)((i * 7 + 3) % 64);
    nxl_kv_seq_t s = {ids, 64, ids, 64, 64 * 16};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        nxl_kv_layout_t d = mk(64, 64, 16, 8, 128, 2, cases[c].tpd, 0, cases[c].od, 0x10000000);
        nxl_kv_layout_t p = mk(64, 64, 16, 8, 128, 2, cases[c].tpp, 0, cases[c].op, 0x90000000);
        double best = 1e9;
        size_t n = 0;
        for (int r = 0; r < 5; r++) {
            nxl_kv_piece_t *pc;
            double t0 = now_s();
            ck_assert_int_eq(nxl_kv_plan(&d, &p, &s, &pc, &n, NULL, 0), NXL_SUCCESS);
            double t = now_s() - t0;
            if (t < best)
                best = t;
            nxl_free(pc);
        }
        printf("check_kvlayout: plan of 64 planes x 64 blocks x 16 tokens x 8 heads x 128 x 2 B, "
               "%s: %zu pieces in %.2f ms\n", cases[c].name, n, best * 1e3);
    }
}
END_TEST

/* caches emptied of what a copy reads or writes: every line of junk
 * written with a plain store (memset() of this size, rep stosb here, did
 * not evict: the copies then ran from cache, memcpy() at 25-40 GB/s
 * against 16-20 after this) */
static void flush_caches(unsigned char *junk, size_t len, int v)
{
    volatile uint64_t *q = (volatile uint64_t *)(void *)junk;
    for (size_t i = 0; i < len / 8; i += 8)
        q[i] = (uint64_t)v + i;
}

/* The re-layout's rate against one memcpy() of the same bytes: the copies
 * of three plans (rows of 256 B scattered, runs of 1 KiB and 256 B from a
 * strided source), 4 to 32 MiB */
START_TEST(t_copy_rate)
{
    const uint32_t planes = 16, blocks = 64, bt = 16;
    uint32_t ids[64];
    for (int i = 0; i < 64; i++)
        ids[i] = (uint32_t)i;
    nxl_kv_seq_t s = {ids, 64, ids, 64, 64 * 16};
    static const struct {
        nxl_kv_order_t od, op;
        uint32_t tpd, tpp;
        const char *name;
    } cases[] = {
        {NXL_KV_HEADS_OUTER, NXL_KV_TOKENS_OUTER, 1, 1, "256 B rows (HO <- TO)"},
        {NXL_KV_TOKENS_OUTER, NXL_KV_TOKENS_OUTER, 2, 1, "1 KiB runs (TO, TP 2 <- 1)"},
        {NXL_KV_TOKENS_OUTER, NXL_KV_TOKENS_OUTER, 8, 4, "256 B runs (TO, TP 8 <- 4)"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        nxl_kv_layout_t d = mk(planes, blocks, bt, 8, 128, 2, cases[c].tpd, 0, cases[c].od, 0);
        nxl_kv_layout_t p = mk(planes, blocks, bt, 8, 128, 2, cases[c].tpp, 0, cases[c].op, 0);
        unsigned char *dm = tl_xalloc(d.len), *pm = tl_xalloc(p.len), *cm = tl_xalloc(d.len);
        memset(dm, 1, d.len);
        memset(cm, 1, d.len);
        tl_fill(pm, p.len, 7);
        d.base = (uintptr_t)dm;
        p.base = (uintptr_t)pm;
        nxl_kv_piece_t *pc;
        size_t n;
        ck_assert_int_eq(nxl_kv_plan(&d, &p, &s, &pc, &n, NULL, 0), NXL_SUCCESS);
        uint64_t bytes = 0;
        for (size_t i = 0; i < n; i++)
            bytes += pc[i].len;
        /* each copy from cold caches: 64 MiB written in between */
        size_t fl = 64u << 20;
        unsigned char *junk = tl_xalloc(fl);
        double tk = 1e9, tm = 1e9;
        for (int r = 0; r < 5; r++) {
            flush_caches(junk, fl, r);
            double t0 = now_s();
            nxl_kv_copy(pc, n);
            double t1 = now_s();
            flush_caches(junk, fl, r + 1);
            double t2 = now_s();
            memcpy(cm, pm, bytes);
            double t3 = now_s();
            if (t1 - t0 < tk)
                tk = t1 - t0;
            if (t3 - t2 < tm)
                tm = t3 - t2;
        }
        free(junk);
        /* the target is 0.7 (nxl/kv.h); only a collapse fails here, the
         * machine's noise being what it is */
        ck_assert_msg(tm / tk > 0.25, "nxl_kv_copy at %.2f of memcpy", tm / tk);
        /* spot check: the first piece and the last */
        ck_assert(!memcmp((void *)(uintptr_t)pc[0].dst, (void *)(uintptr_t)pc[0].src, pc[0].len));
        ck_assert(!memcmp((void *)(uintptr_t)pc[n - 1].dst, (void *)(uintptr_t)pc[n - 1].src,
                          pc[n - 1].len));
        printf("check_kvlayout: nxl_kv_copy %s: %zu pieces, %.1f MiB: %.2f GB/s, memcpy of the "
               "same bytes %.2f GB/s, ratio %.2f\n", cases[c].name, n, bytes / 1048576.0,
               bytes / tk / 1e9, bytes / tm / 1e9, tm / tk);
        nxl_free(pc);
        free(dm);
        free(pm);
        free(cm);
    }
}
END_TEST

/* ---- transfers over UCX */

static nxl_agent_t *D, *P;
static volatile int ndone; /* callbacks run on the reactor threads of threaded agents */
static nxl_status_t last_st;
static int threaded;       /* D and P are threaded: wait, do not run their reactors */
static int vram;           /* run_xfer: the decode regions in VRAM */

static void kv_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    (void)arg;
    __atomic_add_fetch(&ndone, 1, __ATOMIC_SEQ_CST);
    if (st != NXL_SUCCESS) {
        last_st = st;
        fprintf(stderr, "check_kvlayout: KV transfer: %s\n", nxl_future_error(f));
    }
}

static void setup_ucx(void)
{
    D = tl_agent("D", 0);
    P = tl_agent("P", 0);
}

/* LIBFABRIC instead (its default provider) */
static void setup_lf(void)
{
    D = tl_agent_bare("D", 0);
    P = tl_agent_bare("P", 0);
    tl_backend(D, "LIBFABRIC");
    tl_backend(P, "LIBFABRIC");
}

/* both agents threaded, UCX */
static nxl_agent_t *thr_agent(const char *name)
{
    nxl_agent_config_t c;
    tl_config(&c, name, 0);
    c.threaded = 1;
    nxl_agent_t *a = tl_agent_cfg(&c, 0);
    tl_backend(a, "UCX");
    return a;
}

static void setup_threaded(void)
{
    threaded = 1;
    D = thr_agent("D");
    P = thr_agent("P");
}

/* until n callbacks counted: the reactors run here, or on their threads */
static int wait_done(int n)
{
    if (!threaded)
        return tl_run2_until(D, P, &ndone, n, 20000, 0);
    uint64_t end = tl_now_ms() + 20000;
    while (__atomic_load_n(&ndone, __ATOMIC_SEQ_CST) < n && tl_now_ms() < end)
        usleep(1000);
    return ndone >= n;
}

/* after n callbacks: no more come (each transfer's once) */
static void once_each(int n)
{
    if (threaded)
        usleep(20000);
    else
        for (int i = 0; i < 50; i++) {
            nxl_agent_run_once(D, 0);
            nxl_agent_run_once(P, 0);
        }
    ck_assert_int_eq(__atomic_load_n(&ndone, __ATOMIC_SEQ_CST), n);
}

static void teardown_ucx(void)
{
    threaded = 0;
    nxl_agent_destroy(D);
    nxl_agent_destroy(P);
}

/* d and p given memory of their own: their bases set, d's region (and
 * *sm, p->len bytes, where sm is not NULL) registered at D, p's at P, and
 * P's metadata loaded into D */
static void kv_regions(nxl_kv_layout_t *d, nxl_kv_layout_t *p, unsigned char **dm,
                       unsigned char **pm, unsigned char **sm)
{
    *dm = tl_xalloc(d->len);
    *pm = tl_xalloc(p->len);
    if (sm)
        *sm = tl_xalloc(p->len);
    d->base = (uintptr_t)*dm;
    p->base = (uintptr_t)*pm;
    tl_reg_dram(D, *dm, d->len);
    tl_reg_dram(P, *pm, p->len);
    if (sm)
        tl_reg_dram(D, *sm, p->len);
    tl_learn(D, P);
}

/* A staged transfer's set-up (t_xfer_read_less, t_xfer_gaps): the regions
 * (kv_regions), the prefill's filled with @p seed; returns what the decode
 * region holds once @p s moved: 0xEE where nothing lands, the rest as
 * nxl_kv_copy() of nxl_kv_plan()'s pieces puts it */
static unsigned char *staged_regions(nxl_kv_layout_t *d, nxl_kv_layout_t *p,
                                     const nxl_kv_seq_t *s, uint32_t seed, unsigned char **dm,
                                     unsigned char **pm, unsigned char **sm)
{
    kv_regions(d, p, dm, pm, sm);
    unsigned char *want = tl_xalloc(d->len);
    tl_fill(*pm, p->len, seed);
    memset(want, 0xEE, d->len);
    nxl_kv_piece_t *pc;
    size_t n;
    nxl_kv_layout_t w = *d;
    w.base = (uintptr_t)want;
    ck_assert_int_eq(nxl_kv_plan(&w, p, s, &pc, &n, NULL, 0), NXL_SUCCESS);
    nxl_kv_copy(pc, n);
    nxl_free(pc);
    return want;
}

/* the byte k of row (plane, token, global head) */
static unsigned char val(uint32_t l, size_t i, uint32_t g, uint32_t k)
{
    uint32_t x = (l * 7919u) ^ ((uint32_t)i * 104729u) ^ (g * 1299709u) ^ (k * 15485863u);
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return (unsigned char)(x | 1); /* never 0xEE's partner 0 */
}

#define KV_HEADS 8
#define KV_HS 16
#define KV_ES 2
#define KV_PLANES 4
#define KV_BLOCKS 8
#define KV_TOKENS 100

/* prefill TP tpp -> decode TP tpd over UCX, in mode m: every byte of the
 * decode regions checked */
static void run_xfer(uint32_t tpd, uint32_t tpp, uint32_t btd, uint32_t btp, nxl_kv_order_t od,
                     nxl_kv_order_t op, nxl_kv_mode_t m, int own_staging)
{
    nxl_kv_layout_t dl[8], pl[8];
    unsigned char *dm[8], *pm[8];
    uint32_t di[KV_BLOCKS], pi[KV_BLOCKS];
    nxl_kv_seq_t s = {di, (KV_TOKENS + btd - 1) / btd, pi, (KV_TOKENS + btp - 1) / btp, KV_TOKENS};
    ids_of(di, s.n_decode, KV_BLOCKS, 3, 1);
    ids_of(pi, s.n_prefill, KV_BLOCKS, 6, 1);
    uint32_t row = KV_HS * KV_ES;
    for (uint32_t r = 0; r < tpp; r++) {
        pl[r] = mk(KV_PLANES, KV_BLOCKS, btp, KV_HEADS, KV_HS, KV_ES, tpp, r, op, 0);
        pm[r] = tl_xalloc(pl[r].len);
        tl_fill(pm[r], pl[r].len, 11 + r);
        pl[r].base = (uintptr_t)pm[r];
        for (uint32_t l = 0; l < KV_PLANES; l++)
            for (size_t i = 0; i < KV_TOKENS; i++)
                for (uint32_t g = 0; g < KV_HEADS; g++)
                    if (holds(&pl[r], g))
                        for (uint32_t k = 0; k < row; k++)
                            pm[r][ref_off(&pl[r], l, pi[i / btp], (uint32_t)(i % btp), g, k)] =
                                val(l, i, g, k);
        tl_reg_dram(P, pm[r], pl[r].len);
    }
    for (uint32_t r = 0; r < tpd; r++) {
        dl[r] = mk(KV_PLANES, KV_BLOCKS, btd, KV_HEADS, KV_HS, KV_ES, tpd, r, od, 0);
        if (vram) { /* the stand-in's device memory: host addresses */
            void *v = NULL;
            ck_assert_msg(nxl_mem_alloc(D, NXL_VRAM, dl[r].len, 0, &v) == NXL_SUCCESS, "%s",
                          nxl_agent_last_error(D));
            dm[r] = v;
            dl[r].mem = NXL_VRAM;
        } else {
            dm[r] = tl_xalloc(dl[r].len);
        }
        memset(dm[r], 0xEE, dl[r].len);
        dl[r].base = (uintptr_t)dm[r];
        if (!vram)
            tl_reg_dram(D, dm[r], dl[r].len);
    }
    tl_learn(D, P);
    nxl_kv_opts_t o;
    nxl_kv_opts_init(&o);
    o.mode = m;
    o.slice_bytes = 4096; /* several slices a transfer */
    nxl_kv_xfer_t *kx[64];
    unsigned char *stg[64] = {0};
    size_t stg_len[64] = {0};
    size_t nk = 0;
    ndone = 0;
    last_st = NXL_SUCCESS;
    for (uint32_t rd = 0; rd < tpd; rd++)
        for (uint32_t rp = 0; rp < tpp; rp++) {
            nxl_desc_t sd = {0};
            if (own_staging && m == NXL_KV_STAGED) {
                sd.len = (size_t)KV_PLANES * s.n_prefill * btp * (KV_HEADS / tpp) * row;
                /* (into VRAM too: DRAM, which the device's re-layout reads;
                 * no transport here READs into VRAM) */
                stg[nk] = tl_xalloc(sd.len);
                tl_reg_dram(D, stg[nk], sd.len);
                sd.addr = (uintptr_t)stg[nk];
                stg_len[nk] = sd.len;
            }
            nxl_status_t st = nxl_kv_xfer_make(D, "P", &dl[rd], &pl[rp], &s,
                                               stg[nk] ? &sd : NULL, &o, &kx[nk]);
            ck_assert_msg(st == NXL_SUCCESS, "make: %s", nxl_agent_last_error(D));
            size_t np;
            nxl_kv_mode_t got = nxl_kv_xfer_mode(kx[nk], &np, NULL);
            if (np)
                ck_assert_int_eq(got, m);
            ck_assert_int_eq(nxl_kv_xfer_post(kx[nk], kv_cb, NULL, NULL), NXL_SUCCESS);
            if (!threaded) /* (a threaded reactor may have delivered it meanwhile) */
                ck_assert_int_eq(nxl_kv_xfer_post(kx[nk], kv_cb, NULL, NULL),
                                 NXL_ERR_REPOST_ACTIVE);
            nk++;
        }
    ck_assert_msg(wait_done((int)nk), "%d of %zu KV transfers done", ndone, nk);
    ck_assert_int_eq(last_st, NXL_SUCCESS);
    once_each((int)nk);
    /* every byte of every decode region: the sequence's rows of its heads,
     * 0xEE elsewhere */
    for (uint32_t rd = 0; rd < tpd; rd++) {
        unsigned char *want = malloc(dl[rd].len);
        memset(want, 0xEE, dl[rd].len);
        for (uint32_t l = 0; l < KV_PLANES; l++)
            for (size_t i = 0; i < KV_TOKENS; i++)
                for (uint32_t g = 0; g < KV_HEADS; g++)
                    if (holds(&dl[rd], g))
                        for (uint32_t k = 0; k < row; k++)
                            want[ref_off(&dl[rd], l, di[i / btd], (uint32_t)(i % btd), g, k)] =
                                val(l, i, g, k);
        long bad = tl_first_diff(dm[rd], want, dl[rd].len);
        ck_assert_msg(bad < 0, "decode rank %u (TP %u bt %u %s <- TP %u bt %u %s, %s): byte %ld "
                      "is 0x%02x, want 0x%02x", rd, tpd, btd, od ? "TO" : "HO", tpp, btp,
                      op ? "TO" : "HO", m == NXL_KV_ZCOPY ? "zero copy" : "staged", bad,
                      bad < 0 ? 0 : dm[rd][bad], bad < 0 ? 0 : want[bad]);
        free(want);
    }
    /* posted again: the same bytes again */
    for (uint32_t rd = 0; rd < tpd; rd++)
        memset(dm[rd], 0xEE, dl[rd].len);
    ndone = 0;
    for (size_t k = 0; k < nk; k++)
        ck_assert_int_eq(nxl_kv_xfer_post(kx[k], kv_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert(wait_done((int)nk));
    ck_assert_int_eq(last_st, NXL_SUCCESS);
    once_each((int)nk);
    for (size_t k = 0; k < nk; k++)
        nxl_kv_xfer_release(kx[k]);
    for (size_t k = 0; k < nk; k++)
        if (stg[k]) {
            nxl_desc_t sd = {.addr = (uintptr_t)stg[k], .len = stg_len[k]};
            ck_assert_int_eq(nxl_mem_deregister(D, NXL_DRAM, &sd, 1), NXL_SUCCESS);
            free(stg[k]);
        }
    ck_assert_int_eq(nxl_md_invalidate(D, "P"), NXL_SUCCESS);
    for (uint32_t r = 0; r < tpp; r++) {
        nxl_desc_t d = {.addr = pl[r].base, .len = pl[r].len};
        ck_assert_int_eq(nxl_mem_deregister(P, NXL_DRAM, &d, 1), NXL_SUCCESS);
        free(pm[r]);
    }
    for (uint32_t r = 0; r < tpd; r++) {
        nxl_desc_t d = {.addr = dl[r].base, .len = dl[r].len};
        if (vram) {
            ck_assert_int_eq(nxl_mem_free(D, dm[r]), NXL_SUCCESS);
            continue;
        }
        ck_assert_int_eq(nxl_mem_deregister(D, NXL_DRAM, &d, 1), NXL_SUCCESS);
        free(dm[r]);
    }
}

START_TEST(t_xfer_zcopy)
{
    for (int bs = 0; bs < 2; bs++)
        for (int od = 0; od < 2; od++)
            for (int op = 0; op < 2; op++)
                run_xfer(2, 4, bs ? 32 : 16, bs ? 16 : 32, od, op, NXL_KV_ZCOPY, 0);
}
END_TEST

/* Staged into VRAM (the decode regions device memory) over UCX and
 * LIBFABRIC from a prefill agent's DRAM: each group's READ into staging,
 * then the CUDA transport's re-layout kernel (the stand-in's host routine,
 * tests/cuda_mock.sh runs this case: CK_RUN_CASE=vram) into the decode
 * region. Every byte, each callback once, posted twice; both block sizes
 * and orders, staging the transfer's own and the application's. Without
 * the stand-in (no GPU here, or a real one: the regions are read here with
 * plain loads), skipped with a line saying so. */
static int vram_standin(void)
{
    const char *lib = getenv("NXL_CUDA_RUNTIME");
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    int yes = h && dlsym(h, "mock_cuda_trace");
    if (h)
        dlclose(h);
    return yes;
}

START_TEST(t_xfer_vram)
{
    static const char *const tr[] = {"UCX", "LIBFABRIC"};
    nxl_plugin_info_t info[16];
    const nxl_plugin_info_t *lf = tl_plugin("LIBFABRIC", info, 16);
    for (int t = 0; t < 2; t++) {
        if (t == 1 && !(lf && lf->available)) {
            printf("check_kvlayout: VRAM over LIBFABRIC skipped: LIBFABRIC not available\n");
            continue;
        }
        D = tl_agent_bare("D", 0);
        P = tl_agent_bare("P", 0);
        tl_backend(D, tr[t]);
        tl_backend(P, tr[t]);
        if (nxl_backend_create(D, "CUDA", NULL, 0, NULL) != NXL_SUCCESS || !vram_standin()) {
            printf("check_kvlayout: VRAM over %s skipped: %s\n", tr[t],
                   vram_standin() ? nxl_agent_last_error(D)
                                  : "not against the CUDA stand-in (tests/cuda_mock.sh runs it)");
            teardown_ucx();
            return;
        }
        const char *lib = getenv("NXL_CUDA_RUNTIME");
        void *mh = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
        long (*trace)(const void **) = NULL;
        void (*trace_reset)(void) = NULL;
        *(void **)&trace = dlsym(mh, "mock_cuda_trace");
        *(void **)&trace_reset = dlsym(mh, "mock_cuda_trace_reset");
        vram = 1;
        for (int bs = 0; bs < 2; bs++)
            for (int od = 0; od < 2; od++)
                for (int op = 0; op < 2; op++) {
                    trace_reset();
                    run_xfer(2, 4, bs ? 32 : 16, bs ? 16 : 32, od, op, NXL_KV_STAGED, bs);
                    /* the device re-laid them out: the stand-in's launches
                     * ('K' entries of three uint64_t-aligned fields) */
                    const struct {
                        char kind;
                        uint64_t lo, hi;
                    } *tr;
                    long n = trace((const void **)&tr), launches = 0;
                    for (long i = 0; i < n; i++)
                        launches += tr[i].kind == 'K';
                    ck_assert_msg(n < 0 || launches > 0, "no re-layout launched on the device");
                }
        run_xfer(1, 2, 32, 16, NXL_KV_TOKENS_OUTER, NXL_KV_HEADS_OUTER, NXL_KV_STAGED, 0);
        vram = 0;
        /* staging of the application's in VRAM, which no transport here
         * READs into: refused with a sentence saying what to give */
        nxl_kv_layout_t d = mk(2, 4, 16, 8, 16, 2, 1, 0, NXL_KV_TOKENS_OUTER, 0);
        nxl_kv_layout_t p = mk(2, 4, 16, 8, 16, 2, 2, 0, NXL_KV_HEADS_OUTER, 0);
        void *dv = NULL, *sv = NULL;
        unsigned char *pm = tl_xalloc(p.len);
        ck_assert_int_eq(nxl_mem_alloc(D, NXL_VRAM, d.len, 0, &dv), NXL_SUCCESS);
        ck_assert_int_eq(nxl_mem_alloc(D, NXL_VRAM, p.len, 0, &sv), NXL_SUCCESS);
        d.base = (uintptr_t)dv;
        d.mem = NXL_VRAM;
        p.base = (uintptr_t)pm;
        tl_reg_dram(P, pm, p.len);
        tl_learn(D, P);
        uint32_t ids[4] = {0, 1, 2, 3};
        nxl_kv_seq_t sq = {ids, 4, ids, 4, 64};
        nxl_kv_opts_t o;
        nxl_kv_opts_init(&o);
        o.mode = NXL_KV_STAGED;
        nxl_desc_t sd = {.addr = (uintptr_t)sv, .len = p.len};
        nxl_kv_xfer_t *kx = NULL;
        ck_assert_int_eq(nxl_kv_xfer_make(D, "P", &d, &p, &sq, &sd, &o, &kx),
                         NXL_ERR_NOT_SUPPORTED);
        ck_assert(kx == NULL);
        ck_sentence(nxl_agent_last_error(D), "the staging given is VRAM");
        ck_sentence(nxl_agent_last_error(D), "give registered DRAM");
        ck_assert_int_eq(nxl_mem_free(D, dv), NXL_SUCCESS);
        ck_assert_int_eq(nxl_mem_free(D, sv), NXL_SUCCESS);
        teardown_ucx();
        free(pm);
        printf("check_kvlayout: staged into VRAM over %s (the CUDA stand-in's re-layout): "
               "every byte right, each callback once\n", tr[t]);
    }
}
END_TEST

START_TEST(t_xfer_staged)
{
    for (int bs = 0; bs < 2; bs++)
        for (int od = 0; od < 2; od++)
            for (int op = 0; op < 2; op++)
                run_xfer(2, 4, bs ? 32 : 16, bs ? 16 : 32, od, op, NXL_KV_STAGED, bs);
}
END_TEST

static nxl_status_t wait2(nxl_future_t *f);

/* decode TP 4 from prefill TP 1 and TP 8 from TP 2, staged and zero copy */
START_TEST(t_xfer_other_tp)
{
    run_xfer(4, 1, 16, 32, NXL_KV_HEADS_OUTER, NXL_KV_TOKENS_OUTER, NXL_KV_STAGED, 0);
    run_xfer(8, 2, 32, 16, NXL_KV_TOKENS_OUTER, NXL_KV_HEADS_OUTER, NXL_KV_ZCOPY, 0);
    run_xfer(1, 8, 16, 16, NXL_KV_TOKENS_OUTER, NXL_KV_TOKENS_OUTER, NXL_KV_STAGED, 0);
    /* prefill heads outer holding more heads than the decode rank: only
     * the heads both hold are read into staging */
    run_xfer(4, 1, 32, 16, NXL_KV_TOKENS_OUTER, NXL_KV_HEADS_OUTER, NXL_KV_STAGED, 1);
    run_xfer(4, 2, 16, 32, NXL_KV_HEADS_OUTER, NXL_KV_HEADS_OUTER, NXL_KV_STAGED, 0);
}
END_TEST

/* staged from a heads-outer prefill rank of TP 1 into decode rank 1 of TP
 * 4: the staging holds the two heads needed, a quarter of each block (the
 * sequence's 8 KiB staged of 32 KiB of whole blocks, in four groups of 2
 * KiB with slice_bytes 2048: a ring of 4 KiB); the bytes are those
 * nxl_kv_copy() of nxl_kv_plan()'s pieces puts there */
START_TEST(t_xfer_read_less)
{
    nxl_kv_layout_t d = mk(2, 4, 16, 8, 16, 2, 4, 1, NXL_KV_TOKENS_OUTER, 0);
    nxl_kv_layout_t p = mk(2, 4, 16, 8, 16, 2, 1, 0, NXL_KV_HEADS_OUTER, 0);
    uint32_t di[4] = {2, 0, 3, 1}, pi[4] = {1, 3, 0, 2};
    nxl_kv_seq_t s = {di, 4, pi, 4, 60};
    unsigned char *dm, *pm, *sm;
    unsigned char *want = staged_regions(&d, &p, &s, 5, &dm, &pm, &sm);
    memset(dm, 0xEE, d.len);
    nxl_kv_opts_t o;
    nxl_kv_opts_init(&o);
    o.mode = NXL_KV_STAGED;
    o.slice_bytes = 2048;
    nxl_desc_t sd = {.addr = (uintptr_t)sm, .len = 4095};
    nxl_kv_xfer_t *kx = NULL;
    ck_assert_int_eq(nxl_kv_xfer_make(D, "P", &d, &p, &s, &sd, &o, &kx), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(D), "staging area of 4095 bytes is too small");
    ck_sentence(nxl_agent_last_error(D), "need 4096");
    sd.len = 4096;
    ck_assert_msg(nxl_kv_xfer_make(D, "P", &d, &p, &s, &sd, &o, &kx) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(D));
    nxl_future_t *f;
    ck_assert_int_eq(nxl_kv_xfer_post(kx, NULL, NULL, &f), NXL_SUCCESS);
    ck_assert_int_eq(wait2(f), NXL_SUCCESS);
    nxl_future_release(f);
    long bad = tl_first_diff(dm, want, d.len);
    ck_assert_msg(bad < 0, "byte %ld differs", bad);
    /* eight groups of 1 KiB, a ring of 2 KiB */
    memset(dm, 0xEE, d.len);
    nxl_kv_xfer_release(kx);
    o.slice_bytes = 1024;
    sd.len = 2048;
    ck_assert_int_eq(nxl_kv_xfer_make(D, "P", &d, &p, &s, &sd, &o, &kx), NXL_SUCCESS);
    ck_assert_int_eq(nxl_kv_xfer_post(kx, NULL, NULL, &f), NXL_SUCCESS);
    ck_assert_int_eq(wait2(f), NXL_SUCCESS);
    nxl_future_release(f);
    bad = tl_first_diff(dm, want, d.len);
    ck_assert_msg(bad < 0, "byte %ld differs", bad);
    /* canceled after some groups: completes canceled once the READ in
     * flight ended; posted again, every byte */
    ck_assert_int_eq(nxl_kv_xfer_post(kx, NULL, NULL, &f), NXL_SUCCESS);
    for (int i = 0; i < 3; i++) {
        nxl_agent_run_once(D, 0);
        nxl_agent_run_once(P, 0);
    }
    nxl_future_cancel(f);
    ck_assert_int_eq(wait2(f), NXL_ERR_CANCELED);
    nxl_future_release(f);
    memset(dm, 0xEE, d.len);
    ck_assert_int_eq(nxl_kv_xfer_post(kx, NULL, NULL, &f), NXL_SUCCESS);
    ck_assert_int_eq(wait2(f), NXL_SUCCESS);
    nxl_future_release(f);
    bad = tl_first_diff(dm, want, d.len);
    ck_assert_msg(bad < 0, "byte %ld differs after a cancel", bad);
    /* released in flight: the future completes canceled */
    ck_assert_int_eq(nxl_kv_xfer_post(kx, NULL, NULL, &f), NXL_SUCCESS);
    nxl_agent_run_once(D, 0);
    nxl_kv_xfer_release(kx);
    ck_assert_int_eq(wait2(f), NXL_ERR_CANCELED);
    nxl_future_release(f);
    for (int i = 0; i < 20; i++) {
        nxl_agent_run_once(D, 0);
        nxl_agent_run_once(P, 0);
    }
    nxl_desc_t r1 = {.addr = d.base, .len = d.len}, r2 = {.addr = p.base, .len = p.len},
               r3 = {.addr = (uintptr_t)sm, .len = p.len};
    ck_assert_int_eq(nxl_mem_deregister(D, NXL_DRAM, &r1, 1), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_deregister(D, NXL_DRAM, &r3, 1), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_invalidate(D, "P"), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_deregister(P, NXL_DRAM, &r2, 1), NXL_SUCCESS);
    free(dm);
    free(pm);
    free(sm);
    free(want);
}
END_TEST

/* f's status once settled, both agents' reactors run meanwhile */
static nxl_status_t wait2(nxl_future_t *f)
{
    uint64_t end = tl_now_ms() + 10000;
    while (nxl_future_status(f) == NXL_IN_PROG && tl_now_ms() < end) {
        nxl_agent_run_once(D, 0);
        nxl_agent_run_once(P, 0);
    }
    return nxl_future_status(f);
}

/* staged from every other prefill block (a prefill rank of TP 4, heads
 * outer: blocks of 1 KiB, each a unit of staging), with NXL_KV_READ_GAP
 * 1024: the gaps between them, a block each, are READ too into the staging
 * (one descriptor per plane and group, the planes' gap of one block too);
 * with the application's staging sized for the blocks alone, or with the
 * peer's blocks registered one by one (a gap not registered), the blocks
 * alone; without NXL_KV_READ_GAP, the blocks alone. Every byte of the
 * decode region as nxl_kv_copy() of nxl_kv_plan()'s pieces puts them. */
static void gaps_run(const nxl_kv_layout_t *d, const nxl_kv_layout_t *p, const nxl_kv_seq_t *s,
                     const nxl_desc_t *sd, unsigned char *dm, const unsigned char *want,
                     const char *what)
{
    nxl_kv_opts_t o;
    nxl_kv_opts_init(&o);
    o.mode = NXL_KV_STAGED;
    nxl_kv_xfer_t *kx = NULL;
    ck_assert_msg(nxl_kv_xfer_make(D, "P", d, p, s, sd, &o, &kx) == NXL_SUCCESS, "%s: %s", what,
                  nxl_agent_last_error(D));
    for (int k = 0; k < 2; k++) {
        memset(dm, 0xEE, d->len);
        nxl_future_t *f;
        ck_assert_int_eq(nxl_kv_xfer_post(kx, NULL, NULL, &f), NXL_SUCCESS);
        ck_assert_int_eq(wait2(f), NXL_SUCCESS);
        nxl_future_release(f);
        long bad = tl_first_diff(dm, want, d->len);
        ck_assert_msg(bad < 0, "%s, post %d: byte %ld differs", what, k, bad);
    }
    nxl_kv_xfer_release(kx);
}

START_TEST(t_xfer_gaps)
{
    nxl_kv_layout_t d = mk(2, 4, 16, 8, 16, 2, 1, 0, NXL_KV_TOKENS_OUTER, 0);
    nxl_kv_layout_t p = mk(2, 8, 16, 8, 16, 2, 4, 1, NXL_KV_HEADS_OUTER, 0);
    uint32_t di[4] = {2, 0, 3, 1}, pi[4] = {6, 0, 4, 2};
    nxl_kv_seq_t s = {di, 4, pi, 4, 60};
    unsigned char *dm, *pm, *sm;
    unsigned char *want = staged_regions(&d, &p, &s, 9, &dm, &pm, &sm);
    /* the transfer's own staging; the application's of 15 KiB (2 planes of
     * 4 blocks and 3 gaps, the gap between them); of 8 KiB, the blocks */
    gaps_run(&d, &p, &s, NULL, dm, want, "no NXL_KV_READ_GAP");
    setenv("NXL_KV_READ_GAP", "1024", 1);
    gaps_run(&d, &p, &s, NULL, dm, want, "own staging");
    nxl_desc_t sd = {.addr = (uintptr_t)sm, .len = 15 * 1024};
    gaps_run(&d, &p, &s, &sd, dm, want, "staging of 15 KiB");
    sd.len = 15 * 1024 - 1;
    gaps_run(&d, &p, &s, &sd, dm, want, "staging of 15 KiB - 1");
    sd.len = 8 * 1024;
    gaps_run(&d, &p, &s, &sd, dm, want, "staging of 8 KiB");
    sd.len = 8 * 1024 - 1;
    nxl_kv_opts_t o;
    nxl_kv_opts_init(&o);
    o.mode = NXL_KV_STAGED;
    nxl_kv_xfer_t *kx = NULL;
    ck_assert_int_eq(nxl_kv_xfer_make(D, "P", &d, &p, &s, &sd, &o, &kx), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(D), "need 8192");
    /* the peer's blocks registered one by one, the sequence's only */
    ck_assert_int_eq(nxl_md_invalidate(D, "P"), NXL_SUCCESS);
    nxl_desc_t r2 = {.addr = p.base, .len = p.len};
    ck_assert_int_eq(nxl_mem_deregister(P, NXL_DRAM, &r2, 1), NXL_SUCCESS);
    for (uint32_t l = 0; l < 2; l++)
        for (int j = 0; j < 4; j++)
            tl_reg_dram(P, pm + (size_t)(l * 8 + pi[j]) * 1024, 1024);
    tl_learn(D, P);
    gaps_run(&d, &p, &s, NULL, dm, want, "blocks registered one by one");
    unsetenv("NXL_KV_READ_GAP");
    ck_assert_int_eq(nxl_md_invalidate(D, "P"), NXL_SUCCESS);
    for (uint32_t l = 0; l < 2; l++)
        for (int j = 0; j < 4; j++) {
            nxl_desc_t r = {.addr = (uintptr_t)pm + (size_t)(l * 8 + pi[j]) * 1024, .len = 1024};
            ck_assert_int_eq(nxl_mem_deregister(P, NXL_DRAM, &r, 1), NXL_SUCCESS);
        }
    nxl_desc_t r1 = {.addr = d.base, .len = d.len}, r3 = {.addr = (uintptr_t)sm, .len = p.len};
    ck_assert_int_eq(nxl_mem_deregister(D, NXL_DRAM, &r1, 1), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_deregister(D, NXL_DRAM, &r3, 1), NXL_SUCCESS);
    free(dm);
    free(pm);
    free(sm);
    free(want);
}
END_TEST

/* KV transfers left at nxl_agent_destroy(): one staged in flight (its own
 * staging, many groups), one zero copy done, one staged never posted; the
 * agent releases them (valgrind / ASan: no leak, no use after free), the
 * future of the one in flight completes with NXL_ERR_CANCELED and outlives
 * the agent. Threaded agents too (the "threaded" case): the release runs
 * on the reactor thread, which may have finished the staged one first. */
START_TEST(t_xfer_left_at_destroy)
{
    nxl_kv_layout_t d = mk(4, 8, 16, 8, 16, 2, 2, 0, NXL_KV_TOKENS_OUTER, 0);
    nxl_kv_layout_t p = mk(4, 8, 16, 8, 16, 2, 4, 0, NXL_KV_HEADS_OUTER, 0);
    unsigned char *dm, *pm;
    kv_regions(&d, &p, &dm, &pm, NULL);
    tl_fill(pm, p.len, 3);
    memset(dm, 0, d.len);
    uint32_t ids[7] = {6, 5, 4, 3, 2, 1, 0};
    nxl_kv_seq_t s = {ids, 7, ids, 7, 100};
    nxl_kv_opts_t o;
    nxl_kv_opts_init(&o);
    o.mode = NXL_KV_STAGED;
    o.slice_bytes = 1024;
    nxl_kv_xfer_t *kx[3];
    nxl_future_t *f[2];
    ck_assert_msg(nxl_kv_xfer_make(D, "P", &d, &p, &s, NULL, &o, &kx[0]) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(D));
    ck_assert_int_eq(nxl_kv_xfer_post(kx[0], NULL, NULL, &f[0]), NXL_SUCCESS);
    o.mode = NXL_KV_ZCOPY;
    ck_assert_int_eq(nxl_kv_xfer_make(D, "P", &d, &p, &s, NULL, &o, &kx[1]), NXL_SUCCESS);
    ck_assert_int_eq(nxl_kv_xfer_post(kx[1], NULL, NULL, &f[1]), NXL_SUCCESS);
    if (threaded) {
        ck_assert_int_eq(nxl_future_wait(f[1], 10000), NXL_SUCCESS);
    } else {
        ck_assert_int_eq(wait2(f[1]), NXL_SUCCESS);
        ck_assert_int_eq(nxl_future_status(f[0]), NXL_IN_PROG); /* its later groups wait */
    }
    o.mode = NXL_KV_STAGED;
    ck_assert_int_eq(nxl_kv_xfer_make(D, "P", &d, &p, &s, NULL, &o, &kx[2]), NXL_SUCCESS);
    nxl_agent_destroy(D); /* releases kx[0..2] */
    D = NULL;
    nxl_status_t s0 = nxl_future_status(f[0]);
    if (threaded) /* the reactor thread may have moved all of it before */
        ck_assert_msg(s0 == NXL_ERR_CANCELED || s0 == NXL_SUCCESS, "status %d", (int)s0);
    else
        ck_assert_int_eq(s0, NXL_ERR_CANCELED);
    ck_assert_int_eq(nxl_future_status(f[1]), NXL_SUCCESS);
    nxl_future_release(f[0]);
    nxl_future_release(f[1]);
    free(dm);
    nxl_desc_t pd = {.addr = p.base, .len = p.len};
    nxl_mem_deregister(P, NXL_DRAM, &pd, 1);
    free(pm);
}
END_TEST

/* threaded agents: the calls from this thread, run on the reactor's */
START_TEST(t_xfer_threaded)
{
    run_xfer(2, 4, 16, 32, NXL_KV_HEADS_OUTER, NXL_KV_TOKENS_OUTER, NXL_KV_STAGED, 0);
    run_xfer(2, 4, 32, 16, NXL_KV_TOKENS_OUTER, NXL_KV_HEADS_OUTER, NXL_KV_ZCOPY, 1);
}
END_TEST

/* a staging area too short, a cancel, a release in flight */
START_TEST(t_xfer_refused)
{
    nxl_kv_layout_t d = mk(2, 4, 16, 8, 16, 2, 1, 0, NXL_KV_HEADS_OUTER, 0);
    nxl_kv_layout_t p = mk(2, 4, 16, 8, 16, 2, 1, 0, NXL_KV_TOKENS_OUTER, 0);
    unsigned char *dm, *pm, *sm;
    kv_regions(&d, &p, &dm, &pm, &sm);
    uint32_t ids[4] = {0, 1, 2, 3};
    nxl_kv_seq_t s = {ids, 4, ids, 4, 64};
    nxl_kv_opts_t o;
    nxl_kv_opts_init(&o);
    o.mode = NXL_KV_STAGED;
    nxl_desc_t sd = {.addr = (uintptr_t)sm, .len = p.len - 1};
    nxl_kv_xfer_t *kx = NULL;
    ck_assert_int_eq(nxl_kv_xfer_make(D, "P", &d, &p, &s, &sd, &o, &kx), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(D), "staging area of 32767 bytes is too small");
    ck_sentence(nxl_agent_last_error(D), "need 32768");
    /* the decode region not registered: nxl_prep's refusal */
    nxl_kv_layout_t d2 = d;
    d2.base += 1u << 30;
    o.mode = NXL_KV_ZCOPY;
    ck_assert_int_eq(nxl_kv_xfer_make(D, "P", &d2, &p, &s, NULL, &o, &kx), NXL_ERR_NOT_FOUND);
    /* AUTO with rows of 32 B: staged */
    o.mode = NXL_KV_AUTO;
    sd.len = p.len;
    ck_assert_int_eq(nxl_kv_xfer_make(D, "P", &d, &p, &s, &sd, &o, &kx), NXL_SUCCESS);
    ck_assert_int_eq(nxl_kv_xfer_mode(kx, NULL, NULL), NXL_KV_STAGED);
    nxl_future_t *f;
    ck_assert_int_eq(nxl_kv_xfer_post(kx, NULL, NULL, &f), NXL_SUCCESS);
    nxl_future_cancel(f);
    ck_assert_int_eq(wait2(f), NXL_ERR_CANCELED);
    nxl_future_release(f);
    /* and after the cancel, a post that completes */
    ck_assert_int_eq(nxl_kv_xfer_post(kx, NULL, NULL, &f), NXL_SUCCESS);
    ck_assert_int_eq(wait2(f), NXL_SUCCESS);
    nxl_future_release(f);
    /* released in flight: the future completes canceled */
    ck_assert_int_eq(nxl_kv_xfer_post(kx, NULL, NULL, &f), NXL_SUCCESS);
    nxl_kv_xfer_release(kx);
    ck_assert_int_eq(wait2(f), NXL_ERR_CANCELED);
    nxl_future_release(f);
    /* a threshold of 16 B: zero copy */
    o.zcopy_min = 16;
    ck_assert_int_eq(nxl_kv_xfer_make(D, "P", &d, &p, &s, NULL, &o, &kx), NXL_SUCCESS);
    ck_assert_int_eq(nxl_kv_xfer_mode(kx, NULL, NULL), NXL_KV_ZCOPY);
    nxl_kv_xfer_release(kx);
    /* $NXL_KV_ZCOPY_MIN when the field is 0 */
    o.zcopy_min = 0;
    setenv("NXL_KV_ZCOPY_MIN", "1", 1);
    ck_assert_int_eq(nxl_kv_xfer_make(D, "P", &d, &p, &s, NULL, &o, &kx), NXL_SUCCESS);
    ck_assert_int_eq(nxl_kv_xfer_mode(kx, NULL, NULL), NXL_KV_ZCOPY);
    nxl_kv_xfer_release(kx);
    unsetenv("NXL_KV_ZCOPY_MIN");
    /* drain what the release canceled, then let go */
    for (int i = 0; i < 20; i++) {
        nxl_agent_run_once(D, 0);
        nxl_agent_run_once(P, 0);
    }
    nxl_desc_t r1 = {.addr = d.base, .len = d.len}, r2 = {.addr = p.base, .len = p.len},
               r3 = {.addr = (uintptr_t)sm, .len = p.len};
    ck_assert_int_eq(nxl_mem_deregister(D, NXL_DRAM, &r1, 1), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_deregister(D, NXL_DRAM, &r3, 1), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_deregister(P, NXL_DRAM, &r2, 1), NXL_SUCCESS);
    free(dm);
    free(pm);
    free(sm);
}
END_TEST

/* NXL_KV_BENCH=1: zero copy against staged for pieces of 1 to 64 KiB, the
 * same bytes (8 MiB into the decode region; rows of one head, heads outer
 * from tokens outer, TP 2 both sides: the staged READ moves no extra byte);
 * $NXL_KV_BENCH_SLICE sets slice_bytes */
START_TEST(t_threshold_bench)
{
    if (!getenv("NXL_KV_BENCH")) {
        printf("check_kvlayout: threshold bench skipped (NXL_KV_BENCH=1 runs it)\n");
        return;
    }
    const size_t total = 8u << 20;
    for (uint32_t sz = 256; sz <= 65536; sz *= 2) {
        uint32_t hs = sz / 2, planes = 8, bt = 16;
        size_t tokens = total / ((size_t)sz * 4 * planes);
        if (tokens < bt)
            tokens = bt;
        uint32_t blocks = (uint32_t)((tokens + bt - 1) / bt);
        nxl_kv_layout_t d = mk(planes, blocks, bt, 8, hs, 2, 2, 0, NXL_KV_HEADS_OUTER, 0);
        nxl_kv_layout_t p = mk(planes, blocks, bt, 8, hs, 2, 2, 0, NXL_KV_TOKENS_OUTER, 0);
        unsigned char *dm, *pm;
        kv_regions(&d, &p, &dm, &pm, NULL);
        memset(dm, 0, d.len);
        memset(pm, 3, p.len);
        uint32_t *ids = malloc(blocks * sizeof(*ids));
        for (uint32_t i = 0; i < blocks; i++)
            ids[i] = i;
        nxl_kv_seq_t s = {ids, blocks, ids, blocks, tokens};
        double t[3] = {0};
        size_t np = 0, nb = 0;
        for (int m = 1; m <= 2; m++) {
            nxl_kv_opts_t o;
            nxl_kv_opts_init(&o);
            o.mode = (nxl_kv_mode_t)m;
            const char *sl = getenv("NXL_KV_BENCH_SLICE");
            o.slice_bytes = sl ? strtoull(sl, NULL, 10) : 0;
            nxl_kv_xfer_t *kx;
            ck_assert_int_eq(nxl_kv_xfer_make(D, "P", &d, &p, &s, NULL, &o, &kx), NXL_SUCCESS);
            nxl_kv_xfer_mode(kx, &np, &nb);
            double best = 1e9;
            for (int r = 0; r < 7; r++) {
                ndone = 0;
                double t0 = now_s();
                ck_assert_int_eq(nxl_kv_xfer_post(kx, kv_cb, NULL, NULL), NXL_SUCCESS);
                ck_assert(tl_run2_until(D, P, &ndone, 1, 20000, 0));
                double dt = now_s() - t0;
                if (dt < best)
                    best = dt;
            }
            t[m] = best;
            nxl_kv_xfer_release(kx);
        }
        printf("check_kvlayout: pieces of %6u B (%zu, %.1f MiB): zero copy %.2f GB/s, staged "
               "%.2f GB/s, zero copy / staged %.2f\n", sz, np, nb / 1048576.0, nb / t[1] / 1e9,
               nb / t[2] / 1e9, t[2] / t[1]);
        ck_assert_int_eq(nxl_md_invalidate(D, "P"), NXL_SUCCESS);
        nxl_desc_t dd = {.addr = d.base, .len = d.len}, pd = {.addr = p.base, .len = p.len};
        nxl_mem_deregister(D, NXL_DRAM, &dd, 1);
        nxl_mem_deregister(P, NXL_DRAM, &pd, 1);
        free(ids);
        free(dm);
        free(pm);
    }
}
END_TEST

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* NXL_KV_BENCH=1: decode rank 0 of TP 2 assembling a sequence (16 planes,
 * 64 blocks of 32 tokens, heads outer; 8 heads of 128 x 2 B) from the
 * prefill ranks of TP 4 and 8 (16-token blocks, tokens outer; AUTO mode),
 * against the same bytes from one prefill rank of the decode's own layout;
 * and decode rank 0 of TP 4 from prefill TP 2 (heads outer: the staged
 * READ takes the decode rank's half of each block). The median of 9 runs;
 * $NXL_KV_BENCH_SLICE sets slice_bytes (a value above the sequence's
 * bytes: one READ, then the whole re-layout) */
static double assemble(uint32_t tpd, uint32_t tpp, nxl_kv_order_t op, uint32_t btp,
                       nxl_kv_mode_t m, size_t *bytes_out)
{
    const uint32_t planes = 16, pblocks = 128, dblocks = 64;
    const size_t tokens = 64 * 32;
    nxl_kv_layout_t dl = mk(planes, dblocks, 32, 8, 128, 2, tpd, 0, NXL_KV_HEADS_OUTER, 0);
    unsigned char *dm = tl_xalloc(dl.len);
    memset(dm, 0, dl.len);
    dl.base = (uintptr_t)dm;
    tl_reg_dram(D, dm, dl.len);
    nxl_kv_layout_t pl[8];
    unsigned char *pm[8];
    uint32_t di[64], pi[128];
    for (uint32_t i = 0; i < 64; i++)
        di[i] = (i * 7 + 1) % 64;
    for (uint32_t i = 0; i < 128; i++)
        pi[i] = (i * 5 + 3) % 128;
    nxl_kv_seq_t s = {di, 64, btp == 32 ? di : pi, tokens / btp, tokens};
    for (uint32_t r = 0; r < tpp; r++) {
        pl[r] = mk(planes, btp == 32 ? dblocks : pblocks, btp, 8, 128, 2, tpp, r, op, 0);
        pm[r] = tl_xalloc(pl[r].len);
        memset(pm[r], (int)r + 1, pl[r].len);
        pl[r].base = (uintptr_t)pm[r];
        tl_reg_dram(P, pm[r], pl[r].len);
    }
    tl_learn(D, P);
    nxl_kv_opts_t o;
    nxl_kv_opts_init(&o);
    o.mode = m;
    const char *sl = getenv("NXL_KV_BENCH_SLICE");
    o.slice_bytes = sl ? strtoull(sl, NULL, 10) : 0;
    nxl_kv_xfer_t *kx[8];
    size_t bytes = 0;
    for (uint32_t r = 0; r < tpp; r++) {
        ck_assert_msg(nxl_kv_xfer_make(D, "P", &dl, &pl[r], &s, NULL, &o, &kx[r]) == NXL_SUCCESS,
                      "%s", nxl_agent_last_error(D));
        size_t b;
        nxl_kv_xfer_mode(kx[r], NULL, &b);
        bytes += b;
    }
    double ts[9];
    for (int rep = 0; rep < 9; rep++) {
        ndone = 0;
        double t0 = now_s();
        for (uint32_t r = 0; r < tpp; r++)
            ck_assert_int_eq(nxl_kv_xfer_post(kx[r], kv_cb, NULL, NULL), NXL_SUCCESS);
        ck_assert(wait_done((int)tpp));
        ts[rep] = now_s() - t0;
    }
    qsort(ts, 9, sizeof(ts[0]), cmp_dbl);
    double best = ts[4];
    for (uint32_t r = 0; r < tpp; r++)
        nxl_kv_xfer_release(kx[r]);
    ck_assert_int_eq(nxl_md_invalidate(D, "P"), NXL_SUCCESS);
    for (uint32_t r = 0; r < tpp; r++) {
        nxl_desc_t d = {.addr = pl[r].base, .len = pl[r].len};
        nxl_mem_deregister(P, NXL_DRAM, &d, 1);
        free(pm[r]);
    }
    nxl_desc_t d = {.addr = dl.base, .len = dl.len};
    nxl_mem_deregister(D, NXL_DRAM, &d, 1);
    free(dm);
    *bytes_out = bytes;
    return best;
}

START_TEST(t_assemble_bench)
{
    if (!getenv("NXL_KV_BENCH")) {
        printf("check_kvlayout: assembly bench skipped (NXL_KV_BENCH=1 runs it)\n");
        return;
    }
    size_t b0, b;
    double t0 = assemble(2, 2, NXL_KV_HEADS_OUTER, 32, NXL_KV_AUTO, &b0);
    printf("check_kvlayout: decode TP 2 rank 0 from prefill TP 2 of the same layout: %.1f MiB in "
           "%.2f ms, %.2f GB/s\n", b0 / 1048576.0, t0 * 1e3, b0 / t0 / 1e9);
    static const struct {
        uint32_t tp;
        nxl_kv_mode_t m;
        const char *name;
    } cases[] = {
        {4, NXL_KV_AUTO, "auto"}, {4, NXL_KV_ZCOPY, "zero copy"}, {4, NXL_KV_STAGED, "staged"},
        {8, NXL_KV_AUTO, "auto"}, {8, NXL_KV_ZCOPY, "zero copy"}, {8, NXL_KV_STAGED, "staged"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        double t = assemble(2, cases[c].tp, NXL_KV_TOKENS_OUTER, 16, cases[c].m, &b);
        ck_assert_uint_eq(b, b0);
        printf("check_kvlayout: decode TP 2 rank 0 (32-token blocks, HO) from %u prefill ranks of "
               "TP %u (16-token blocks, TO), %s: %.2f ms, %.2f GB/s, %.2f of the same layout\n",
               cases[c].tp / 2, cases[c].tp, cases[c].name, t * 1e3, b / t / 1e9, t0 / t);
    }
    /* decode TP 4 from one prefill rank of TP 2, heads outer: half of each block */
    double t4 = assemble(4, 4, NXL_KV_HEADS_OUTER, 32, NXL_KV_AUTO, &b0);
    printf("check_kvlayout: decode TP 4 rank 0 from prefill TP 4 of the same layout: %.1f MiB in "
           "%.2f ms, %.2f GB/s\n", b0 / 1048576.0, t4 * 1e3, b0 / t4 / 1e9);
    for (int m = 1; m <= 2; m++) {
        double t = assemble(4, 2, NXL_KV_HEADS_OUTER, 16, (nxl_kv_mode_t)m, &b);
        ck_assert_uint_eq(b, b0);
        printf("check_kvlayout: decode TP 4 rank 0 (32-token blocks, HO) from 1 prefill rank of "
               "TP 2 (16-token blocks, HO), %s: %.2f ms, %.2f GB/s, %.2f of the same layout\n",
               m == 1 ? "zero copy" : "staged", t * 1e3, b / t / 1e9, t4 / t);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kvlayout");
    TL_TCASE(s, "plan", 120, NULL, NULL, t_layout_refused, t_plan_reference, t_plan_merges,
             t_plan_time, t_copy_rate);
    TL_TCASE(s, "ucx", 120, setup_ucx, teardown_ucx, t_xfer_zcopy, t_xfer_staged,
             t_xfer_other_tp, t_xfer_read_less, t_xfer_gaps, t_xfer_refused);
    nxl_plugin_info_t info[16];
    const nxl_plugin_info_t *lf = tl_plugin("LIBFABRIC", info, 16);
    if (lf && lf->available)
        TL_TCASE(s, "libfabric", 120, setup_lf, teardown_ucx, t_xfer_zcopy, t_xfer_staged);
    else
        printf("check_kvlayout: LIBFABRIC not available here, its case skipped\n");
    TL_TCASE(s, "threaded", 120, setup_threaded, teardown_ucx, t_xfer_threaded);
    TL_TCASE(s, "vram", 120, NULL, NULL, t_xfer_vram);
    TL_TCASE(s, "destroy", 120, setup_ucx, teardown_ucx, t_xfer_left_at_destroy);
    TL_TCASE(s, "destroy_threaded", 120, setup_threaded, teardown_ucx, t_xfer_left_at_destroy);
    TL_TCASE(s, "bench", 600, setup_ucx, teardown_ucx, t_threshold_bench, t_assemble_bench);
    return tl_run(s);
}
