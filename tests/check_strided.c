/* SPDX-License-Identifier: BSD-3-Clause */
/* Strided descriptor lists (nxl_prep_strided): transfers over UCX (shared
 * memory, two agents in this process), LIBFABRIC (tcp;ofi_rxm, the same)
 * and POSIX (DRAM <-> a file), every
 * byte checked against offsets computed here; index lists into strided
 * lists; nested lists; the lists refused, each with its sentence. */
#define _GNU_SOURCE
#include "testlib.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#define BS 256 /* bytes of a block */

static nxl_prepped_t *prep_s(nxl_agent_t *a, const char *agent, nxl_mem_t t,
                             const nxl_strided_t *s, size_t n)
{
    nxl_prepped_t *p = NULL;
    nxl_status_t st = nxl_prep_strided(a, agent, t, s, n, &p);
    ck_assert_msg(st == NXL_SUCCESS, "nxl_prep_strided: %s", nxl_agent_last_error(a));
    return p;
}

/* The address of element k of the lists s[0..n), computed apart from the
 * library: walking them element by element. */
static uintptr_t elem_addr(const nxl_strided_t *s, size_t n, size_t k)
{
    for (size_t i = 0; i < n; i++) {
        size_t oc = s[i].outer_count ? s[i].outer_count : 1;
        for (size_t j = 0; j < oc; j++)
            for (size_t m = 0; m < s[i].count; m++, k--)
                if (!k)
                    return s[i].base + j * s[i].outer_stride + m * s[i].stride;
    }
    ck_abort_msg("element past the lists");
    return 0;
}

/* Runs A and B until r's callback came; it succeeded. */
static void wait2(nxl_agent_t *A, nxl_agent_t *B, tl_res_t *r)
{
    ck_assert_msg(tl_run2_until(A, B, &r->calls, 1, 20000, 1), "transfer not done");
    ck_assert_int_eq(r->calls, 1);
    ck_assert_msg(r->st == NXL_SUCCESS, "transfer: %s (%s)", nxl_status_name(r->st), r->why);
}

/* dst (of dlen bytes) after element k of ls (in src) went to element k of
 * rs (in dst), k < n, on a copy of dst taken before: every byte */
static void check_moved(const unsigned char *src, const unsigned char *dst,
                        const unsigned char *before, size_t dlen, uintptr_t sbase,
                        uintptr_t dbase, const nxl_strided_t *ls, size_t nl,
                        const nxl_strided_t *rs, size_t nr, const size_t *lidx,
                        const size_t *ridx, size_t n, size_t len)
{
    unsigned char *want = malloc(dlen);
    memcpy(want, before, dlen);
    for (size_t k = 0; k < n; k++) {
        uintptr_t s = elem_addr(ls, nl, lidx ? lidx[k] : k) - sbase;
        uintptr_t d = elem_addr(rs, nr, ridx ? ridx[k] : k) - dbase;
        memcpy(want + d, src + s, len);
    }
    long diff = tl_first_diff(dst, want, dlen);
    ck_assert_msg(diff < 0, "byte %ld of the destination is wrong", diff);
    free(want);
}

/* ---- UCX or LIBFABRIC, two agents */

static nxl_agent_t *A, *B;
static unsigned char *abuf, *bbuf, *cbuf;
#define LAYERS 3
#define NB 64 /* blocks per layer */
#define LAYER (NB * BS)
#define ALEN (LAYERS * LAYER)

static void two_setup(const char *transport, const nxl_param_t *p, size_t np)
{
    A = tl_agent_bare("A", 0);
    B = tl_agent_bare("B", 0);
    nxl_status_t st = nxl_backend_create(A, transport, p, np, NULL);
    ck_assert_msg(st == NXL_SUCCESS, "%s: %s", transport, nxl_agent_last_error(A));
    st = nxl_backend_create(B, transport, p, np, NULL);
    ck_assert_msg(st == NXL_SUCCESS, "%s: %s", transport, nxl_agent_last_error(B));
    abuf = tl_xalloc(ALEN);
    bbuf = tl_xalloc(ALEN);
    cbuf = tl_xalloc(ALEN);
    tl_fill(abuf, ALEN, 1);
    tl_fill(bbuf, ALEN, 2);
    tl_fill(cbuf, ALEN, 3);
    tl_reg_dram(A, abuf, ALEN);
    tl_reg_dram(A, cbuf, ALEN);
    tl_reg_dram(B, bbuf, ALEN);
    tl_learn(A, B);
    tl_learn(B, A);
}

static void ucx_setup(void)
{
    two_setup("UCX", NULL, 0);
}

static void lf_setup(void)
{
    nxl_param_t p = {"provider", "tcp;ofi_rxm"};
    two_setup("LIBFABRIC", &p, 1);
}

static void two_teardown(void)
{
    nxl_agent_destroy(A);
    nxl_agent_destroy(B);
    free(abuf);
    free(bbuf);
    free(cbuf);
}

/* WRITE of the elements of ls (A) to rs (B), then a READ of rs back into
 * cs (A): both checked byte for byte */
static void ucx_round(const nxl_strided_t *ls, size_t nl, const nxl_strided_t *rs, size_t nr,
                      const nxl_strided_t *cs, size_t nc, size_t n, size_t len)
{
    unsigned char *before = malloc(ALEN);
    memcpy(before, bbuf, ALEN);
    nxl_prepped_t *lp = prep_s(A, NULL, NXL_DRAM, ls, nl), *rp = prep_s(A, "B", NXL_DRAM, rs, nr);
    nxl_prepped_t *cp = prep_s(A, NULL, NXL_DRAM, cs, nc);
    ck_assert_uint_ge(nxl_prepped_count(lp), n);
    nxl_xfer_t *w = NULL, *r = NULL;
    ck_assert_msg(nxl_xfer_make(A, NXL_WRITE, lp, NULL, rp, NULL, n, NULL, &w) == NXL_SUCCESS,
                  "%s", nxl_agent_last_error(A));
    ck_assert_msg(nxl_xfer_make(A, NXL_READ, cp, NULL, rp, NULL, n, NULL, &r) == NXL_SUCCESS,
                  "%s", nxl_agent_last_error(A));
    nxl_prepped_release(lp); /* the transfers keep what they need */
    nxl_prepped_release(rp);
    nxl_prepped_release(cp);
    for (int rep = 0; rep < 2; rep++) { /* posted twice: made again at each post */
        tl_res_t res;
        tl_post(A, w, &res);
        wait2(A, B, &res);
        check_moved(abuf, bbuf, before, ALEN, (uintptr_t)abuf, (uintptr_t)bbuf, ls, nl, rs, nr,
                    NULL, NULL, n, len);
        unsigned char *cbefore = malloc(ALEN);
        memcpy(cbefore, cbuf, ALEN);
        tl_post(A, r, &res);
        wait2(A, B, &res);
        check_moved(bbuf, cbuf, cbefore, ALEN, (uintptr_t)bbuf, (uintptr_t)cbuf, rs, nr, cs, nc,
                    NULL, NULL, n, len);
        free(cbefore);
    }
    nxl_xfer_release(w);
    nxl_xfer_release(r);
    free(before);
}

/* one level each side, different strides */
START_TEST(t_simple)
{
    nxl_strided_t ls = {.base = (uintptr_t)abuf, .len = BS, .stride = 2 * BS, .count = 90};
    nxl_strided_t rs = {.base = (uintptr_t)bbuf + 3 * BS, .len = BS, .stride = BS, .count = 90};
    nxl_strided_t cs = {.base = (uintptr_t)cbuf + 7, .len = BS, .stride = 2 * BS + 5, .count = 90};
    ucx_round(&ls, 1, &rs, 1, &cs, 1, 90, BS);
}
END_TEST

/* layers x blocks on A (every other block of each layer) against one run
 * of contiguous blocks on B, and two lists of A meeting one of B in the
 * middle of a run */
START_TEST(t_nested)
{
    nxl_strided_t ls = {.base = (uintptr_t)abuf, .len = BS, .stride = 2 * BS, .count = NB / 2,
                        .outer_count = LAYERS, .outer_stride = LAYER};
    nxl_strided_t rs = {.base = (uintptr_t)bbuf, .len = BS, .stride = BS, .count = LAYERS * NB / 2};
    /* the reverse layout: layer-inner (the outer stride smaller than a row) */
    nxl_strided_t cs = {.base = (uintptr_t)cbuf, .len = BS, .stride = LAYERS * BS,
                        .count = NB / 2, .outer_count = LAYERS, .outer_stride = BS};
    ucx_round(&ls, 1, &rs, 1, &cs, 1, LAYERS * NB / 2, BS);
    size_t n = LAYERS * NB / 2;
    nxl_strided_t l2[2] = {
        {.base = (uintptr_t)abuf + BS, .len = BS, .stride = 2 * BS, .count = 10},
        {.base = (uintptr_t)abuf + LAYER, .len = BS, .stride = BS, .count = 8, .outer_count = 10,
         .outer_stride = 9 * BS},
    };
    nxl_strided_t r2[3] = {
        {.base = (uintptr_t)bbuf, .len = BS, .stride = 3 * BS, .count = 7},
        {.base = (uintptr_t)bbuf + LAYER, .len = BS, .stride = BS, .count = 50},
        {.base = (uintptr_t)bbuf + 2 * LAYER, .len = BS, .stride = BS, .count = 40},
    };
    nxl_strided_t c2 = {.base = (uintptr_t)cbuf, .len = BS, .stride = BS, .count = n};
    /* 90 elements: A's lists end inside B's third (the runs meet in the
     * middle of runs on both sides) */
    ucx_round(l2, 2, r2, 3, &c2, 1, 90, BS);
}
END_TEST

/* index lists into strided lists, and a strided list against a plain one */
START_TEST(t_index)
{
    nxl_strided_t ls = {.base = (uintptr_t)abuf, .len = BS, .stride = BS, .count = NB,
                        .outer_count = LAYERS, .outer_stride = LAYER};
    nxl_strided_t rs = {.base = (uintptr_t)bbuf, .len = BS, .stride = 2 * BS, .count = NB / 2,
                        .outer_count = LAYERS, .outer_stride = LAYER};
    nxl_prepped_t *lp = prep_s(A, NULL, NXL_DRAM, &ls, 1), *rp = prep_s(A, "B", NXL_DRAM, &rs, 1);
    ck_assert_uint_eq(nxl_prepped_count(lp), LAYERS * NB);
    ck_assert_uint_eq(nxl_prepped_count(rp), LAYERS * NB / 2);
    enum { N = 40 };
    size_t lidx[N], ridx[N];
    for (size_t k = 0; k < N; k++) {
        lidx[k] = (k * 37 + 5) % (LAYERS * NB);
        ridx[k] = (k * 11 + 3) % (LAYERS * NB / 2); /* distinct: 11 is prime to 96 */
    }
    unsigned char *before = malloc(ALEN);
    memcpy(before, bbuf, ALEN);
    nxl_xfer_t *w = NULL;
    ck_assert_msg(nxl_xfer_make(A, NXL_WRITE, lp, lidx, rp, ridx, N, NULL, &w) == NXL_SUCCESS,
                  "%s", nxl_agent_last_error(A));
    tl_res_t res;
    tl_post(A, w, &res);
    wait2(A, B, &res);
    check_moved(abuf, bbuf, before, ALEN, (uintptr_t)abuf, (uintptr_t)bbuf, &ls, 1, &rs, 1, lidx,
                ridx, N, BS);
    nxl_xfer_release(w);
    /* an index past the end */
    size_t bad = LAYERS * NB / 2;
    ck_assert_int_eq(nxl_xfer_make(A, NXL_WRITE, lp, lidx, rp, &bad, 1, NULL, &w),
                     NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "index");
    /* a plain list on the local side, the strided one remote */
    nxl_desc_t d[5];
    for (size_t k = 0; k < 5; k++)
        d[k] = (nxl_desc_t){.addr = (uintptr_t)cbuf + (4 - k) * 3 * BS, .len = BS};
    nxl_prepped_t *dp = NULL;
    ck_assert_int_eq(nxl_prep(A, NULL, NXL_DRAM, d, 5, &dp), NXL_SUCCESS);
    nxl_xfer_t *r = NULL;
    ck_assert_msg(nxl_xfer_make(A, NXL_READ, dp, NULL, rp, NULL, 5, NULL, &r) == NXL_SUCCESS,
                  "%s", nxl_agent_last_error(A));
    tl_post(A, r, &res);
    wait2(A, B, &res);
    for (size_t k = 0; k < 5; k++) {
        long diff = tl_first_diff(cbuf + (4 - k) * 3 * BS, (void *)elem_addr(&rs, 1, k), BS);
        ck_assert_msg(diff < 0, "element %zu: byte %ld differs", k, diff);
    }
    nxl_xfer_release(r);
    nxl_prepped_release(dp);
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
    free(before);
}
END_TEST

/* A zero stride: every element the same block (a WRITE of one block to
 * many places), and lengths that do not pair */
START_TEST(t_zero_stride)
{
    nxl_strided_t ls = {.base = (uintptr_t)abuf + 5 * BS, .len = BS, .stride = 0, .count = 20};
    nxl_strided_t rs = {.base = (uintptr_t)bbuf, .len = BS, .stride = 4 * BS, .count = 20};
    nxl_strided_t cs = {.base = (uintptr_t)cbuf, .len = BS, .stride = BS, .count = 20};
    ucx_round(&ls, 1, &rs, 1, &cs, 1, 20, BS);
    nxl_strided_t other = {.base = (uintptr_t)bbuf, .len = BS / 2, .stride = BS, .count = 20};
    nxl_prepped_t *lp = prep_s(A, NULL, NXL_DRAM, &ls, 1);
    nxl_prepped_t *rp = prep_s(A, "B", NXL_DRAM, &other, 1);
    nxl_xfer_t *x = NULL;
    ck_assert_int_eq(nxl_xfer_make(A, NXL_WRITE, lp, NULL, rp, NULL, 20, NULL, &x),
                     NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "pairs");
    ck_assert_ptr_null(x);
    ck_assert_int_eq(nxl_xfer_make(A, NXL_WRITE, lp, NULL, rp, NULL, 21, NULL, &x),
                     NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "list of 20");
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
}
END_TEST

/* B deregisters its region: a strided transfer into it made before is
 * refused at its next post, and one made now from a list prepared before
 * at once, each with its sentence */
START_TEST(t_ucx_revoked)
{
    nxl_strided_t ls = {.base = (uintptr_t)abuf, .len = BS, .stride = BS, .count = 8};
    nxl_strided_t rs = {.base = (uintptr_t)bbuf + LAYER, .len = BS, .stride = 2 * BS, .count = 8,
                        .outer_count = 2, .outer_stride = LAYER};
    nxl_prepped_t *lp = prep_s(A, NULL, NXL_DRAM, &ls, 1), *rp = prep_s(A, "B", NXL_DRAM, &rs, 1);
    nxl_xfer_t *w = NULL, *x = NULL;
    ck_assert_int_eq(nxl_xfer_make(A, NXL_WRITE, lp, NULL, rp, NULL, 8, NULL, &w), NXL_SUCCESS);
    tl_res_t res;
    tl_post(A, w, &res);
    wait2(A, B, &res);
    nxl_desc_t d = {.addr = (uintptr_t)bbuf, .len = ALEN};
    ck_assert_int_eq(nxl_mem_deregister(B, NXL_DRAM, &d, 1), NXL_SUCCESS);
    nxl_status_t st = NXL_SUCCESS;
    for (int i = 0; i < 500 && st == NXL_SUCCESS; i++) {
        nxl_agent_run_once(B, 0);
        nxl_agent_run_once(A, 10);
        st = nxl_xfer_make(A, NXL_WRITE, lp, NULL, rp, NULL, 8, NULL, &x);
        if (st == NXL_SUCCESS)
            nxl_xfer_release(x);
    }
    ck_assert_int_eq(st, NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(A), "deregistered");
    ck_assert_int_eq(nxl_xfer_post(w, NULL, NULL, NULL), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(A), "deregistered");
    nxl_prepped_t *again = NULL;
    ck_assert_int_eq(nxl_prep_strided(A, "B", NXL_DRAM, &rs, 1, &again), NXL_ERR_NOT_FOUND);
    ck_assert_ptr_null(again);
    nxl_xfer_release(w);
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
    tl_reg_dram(B, bbuf, ALEN); /* for the teardown */
}
END_TEST

/* ---- what is refused */

static nxl_status_t try_prep(nxl_agent_t *a, const char *agent, nxl_strided_t s)
{
    nxl_prepped_t *p = (nxl_prepped_t *)&p;
    nxl_status_t st = nxl_prep_strided(a, agent, NXL_DRAM, &s, 1, &p);
    if (st == NXL_SUCCESS)
        nxl_prepped_release(p);
    else
        ck_assert_msg(p == NULL, "a failed nxl_prep_strided left a list");
    return st;
}

START_TEST(t_bad)
{
    uintptr_t a0 = (uintptr_t)abuf, b0 = (uintptr_t)bbuf;
    /* exactly the region, both ways: accepted */
    ck_assert_int_eq(try_prep(A, NULL, (nxl_strided_t){.base = a0, .len = BS, .stride = BS,
                                                       .count = ALEN / BS}), NXL_SUCCESS);
    ck_assert_int_eq(try_prep(A, "B", (nxl_strided_t){.base = b0, .len = BS, .stride = BS,
                                                      .count = NB, .outer_count = LAYERS,
                                                      .outer_stride = LAYER}), NXL_SUCCESS);
    /* one byte past the region, local and remote, inner and outer */
    ck_assert_int_eq(try_prep(A, NULL, (nxl_strided_t){.base = a0 + 1, .len = BS, .stride = BS,
                                                       .count = ALEN / BS}), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(A), "list 0");
    ck_sentence(nxl_agent_last_error(A), "registered");
    ck_assert_int_eq(try_prep(A, "B", (nxl_strided_t){.base = b0, .len = BS + 1, .stride = BS,
                                                      .count = NB, .outer_count = LAYERS,
                                                      .outer_stride = LAYER}), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(A), "agent 'B'");
    /* a list from A's region into the next one: one region must hold it all */
    ck_assert_int_eq(try_prep(A, NULL, (nxl_strided_t){.base = a0, .len = BS, .stride = ALEN,
                                                       .count = 2}), NXL_ERR_NOT_FOUND);
    /* past the end of the address space */
    ck_assert_int_eq(try_prep(A, NULL, (nxl_strided_t){.base = a0, .len = BS,
                                                       .stride = SIZE_MAX / 2, .count = 3}),
                     NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "address space");
    ck_assert_int_eq(try_prep(A, NULL, (nxl_strided_t){.base = a0, .len = BS, .stride = BS,
                                                       .count = 2, .outer_count = 3,
                                                       .outer_stride = SIZE_MAX / 2}),
                     NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "address space");
    ck_assert_int_eq(try_prep(A, NULL, (nxl_strided_t){.base = UINTPTR_MAX - 10, .len = 11,
                                                       .stride = 1, .count = 2}),
                     NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "address space");
    /* more elements than a size_t counts (stride 0: the bytes fit) */
    ck_assert_int_eq(try_prep(A, NULL, (nxl_strided_t){.base = a0, .len = BS, .stride = 0,
                                                       .count = SIZE_MAX, .outer_count = 2}),
                     NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "elements");
    /* count 0, length 0 */
    ck_assert_int_eq(try_prep(A, NULL, (nxl_strided_t){.base = a0, .len = BS, .stride = BS}),
                     NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "count 0");
    ck_assert_int_eq(try_prep(A, NULL, (nxl_strided_t){.base = a0, .stride = BS, .count = 2}),
                     NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "length 0");
    /* an unknown agent; NULL lists */
    ck_assert_int_eq(try_prep(A, "nobody", (nxl_strided_t){.base = b0, .len = BS, .count = 1}),
                     NXL_ERR_NOT_FOUND);
    nxl_prepped_t *p = NULL;
    ck_assert_int_eq(nxl_prep_strided(A, NULL, NXL_DRAM, NULL, 1, &p), NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(nxl_prep_strided(A, NULL, NXL_DRAM, NULL, 0, NULL), NXL_ERR_INVALID_PARAM);
    /* the second of two lists bad: nothing made, the sentence names it */
    nxl_strided_t two[2] = {{.base = a0, .len = BS, .stride = BS, .count = 4},
                            {.base = a0 + ALEN, .len = BS, .stride = BS, .count = 4}};
    ck_assert_int_eq(nxl_prep_strided(A, NULL, NXL_DRAM, two, 2, &p), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(A), "list 1");
    ck_assert_ptr_null(p);
    /* no list at all: an empty prepared list */
    ck_assert_int_eq(nxl_prep_strided(A, NULL, NXL_DRAM, NULL, 0, &p), NXL_SUCCESS);
    ck_assert_uint_eq(nxl_prepped_count(p), 0);
    nxl_prepped_release(p);
}
END_TEST

/* A million blocks: counted, indexed, transferred in part, without a
 * descriptor per block at preparation */
START_TEST(t_million)
{
    nxl_strided_t ls = {.base = (uintptr_t)abuf, .len = 16, .stride = 0, .count = 1024,
                        .outer_count = 1024, .outer_stride = 16};
    nxl_strided_t rs = {.base = (uintptr_t)bbuf, .len = 16, .stride = 16, .count = 1 << 20,
                        .outer_count = 0};
    nxl_prepped_t *lp = NULL;
    /* B's region is ALEN bytes: a million 16-byte blocks do not fit */
    ck_assert_int_eq(nxl_prep_strided(A, "B", NXL_DRAM, &rs, 1, &lp), NXL_ERR_NOT_FOUND);
    rs.stride = 0;
    nxl_prepped_t *rp = prep_s(A, "B", NXL_DRAM, &rs, 1);
    lp = prep_s(A, NULL, NXL_DRAM, &ls, 1);
    ck_assert_uint_eq(nxl_prepped_count(lp), 1u << 20);
    ck_assert_uint_eq(nxl_prepped_count(rp), 1u << 20);
    size_t li = (1u << 20) - 1, ri = 12345;
    nxl_xfer_t *w = NULL;
    ck_assert_int_eq(nxl_xfer_make(A, NXL_WRITE, lp, &li, rp, &ri, 1, NULL, &w), NXL_SUCCESS);
    tl_res_t res;
    tl_post(A, w, &res);
    wait2(A, B, &res);
    ck_assert_int_eq(memcmp(bbuf, abuf + 1023 * 16, 16), 0);
    nxl_xfer_release(w);
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
}
END_TEST

/* ---- metadata */

/* blob with the first occurrence of from replaced by to (malloc'd) */
static char *blob_edit(const char *blob, size_t len, const char *from, const char *to,
                       size_t *out_len)
{
    const char *at = memmem(blob, len, from, strlen(from));
    ck_assert_msg(at, "'%s' not in the metadata", from);
    size_t pre = (size_t)(at - blob), fl = strlen(from), tl = strlen(to);
    char *b = malloc(len - fl + tl + 1);
    memcpy(b, blob, pre);
    memcpy(b + pre, to, tl);
    memcpy(b + pre + tl, at + fl, len - pre - fl);
    *out_len = len - fl + tl;
    b[*out_len] = 0;
    return b;
}

/* B publishes where its blocks are as strided lists in partial metadata;
 * A learns them from it and reads the blocks */
START_TEST(t_md)
{
    nxl_strided_t bs[2] = {
        {.base = (uintptr_t)bbuf + BS, .len = BS, .stride = 2 * BS, .count = NB / 2,
         .outer_count = LAYERS, .outer_stride = LAYER},
        {.base = (uintptr_t)bbuf, .len = BS, .stride = 0, .count = 1000000}, /* a million */
    };
    void *blob = NULL;
    size_t len = 0;
    ck_assert_msg(nxl_md_local_partial_strided(B, NXL_DRAM, bs, 2, &blob, &len) == NXL_SUCCESS,
                  "%s", nxl_agent_last_error(B));
    ck_assert_ptr_nonnull(memmem(blob, len, "\"strided\"", 9));
    ck_assert_ptr_nonnull(memmem(blob, len, "\"count\":\"1000000\"", 17));
    ck_assert_msg(len < 4096, "%zu bytes of metadata for two strided lists", len);
    /* malformed lists are refused, with a sentence; nothing changes */
    size_t bl;
    char *bad = blob_edit(blob, len, "\"count\":\"1000000\"", "\"count\":\"0\"", &bl);
    ck_assert_int_eq(nxl_md_load(A, bad, bl, NULL, 0), NXL_ERR_MISMATCH);
    ck_sentence(nxl_agent_last_error(A), "count 0");
    free(bad);
    char num[64];
    snprintf(num, sizeof(num), "\"base\":\"%llu\"", (unsigned long long)(uintptr_t)bbuf);
    char to[64];
    snprintf(to, sizeof(to), "\"base\":\"%llu\"", (unsigned long long)(uintptr_t)bbuf + ALEN);
    bad = blob_edit(blob, len, num, to, &bl);
    ck_assert_int_eq(nxl_md_load(A, bad, bl, NULL, 0), NXL_ERR_MISMATCH);
    ck_sentence(nxl_agent_last_error(A), "none of the regions");
    free(bad);
    bad = blob_edit(blob, len, "\"stride\":\"0\"", "\"stride\":\"18446744073709551615\"", &bl);
    ck_assert_int_eq(nxl_md_load(A, bad, bl, NULL, 0), NXL_ERR_MISMATCH);
    ck_sentence(nxl_agent_last_error(A), "address space");
    free(bad);
    nxl_strided_t got[3];
    size_t n = 99;
    ck_assert_int_eq(nxl_md_remote_strided(A, "B", NULL, got, 3, &n), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(A), "no strided lists");
    /* loaded: the lists as B gave them */
    ck_assert_msg(nxl_md_load(A, blob, len, NULL, 0) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(A));
    nxl_free(blob);
    nxl_mem_t t = NXL_FILE;
    ck_assert_int_eq(nxl_md_remote_strided(A, "B", &t, got, 1, &n), NXL_SUCCESS);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(t, NXL_DRAM);
    ck_assert_int_eq(nxl_md_remote_strided(A, "B", &t, got, 3, &n), NXL_SUCCESS);
    ck_assert_int_eq(memcmp(got, bs, sizeof(bs)), 0);
    ck_assert_int_eq(nxl_md_remote_strided(A, "nobody", &t, got, 3, &n), NXL_ERR_NOT_FOUND);
    /* and used */
    nxl_prepped_t *rp = prep_s(A, "B", t, got, 1);
    nxl_strided_t cs = {.base = (uintptr_t)cbuf, .len = BS, .stride = BS, .count = LAYERS * NB / 2};
    nxl_prepped_t *cp = prep_s(A, NULL, NXL_DRAM, &cs, 1);
    nxl_xfer_t *r = NULL;
    ck_assert_int_eq(nxl_xfer_make(A, NXL_READ, cp, NULL, rp, NULL, LAYERS * NB / 2, NULL, &r),
                     NXL_SUCCESS);
    tl_res_t res;
    tl_post(A, r, &res);
    wait2(A, B, &res);
    for (size_t k = 0; k < LAYERS * NB / 2; k++) {
        long diff = tl_first_diff(cbuf + k * BS, (void *)elem_addr(bs, 1, k), BS);
        ck_assert_msg(diff < 0, "element %zu: byte %ld differs", k, diff);
    }
    nxl_xfer_release(r);
    nxl_prepped_release(rp);
    nxl_prepped_release(cp);
    /* a list outside B's regions is not published */
    bs[0].count = NB;
    ck_assert_int_eq(nxl_md_local_partial_strided(B, NXL_DRAM, bs, 1, &blob, &len),
                     NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(B), "list 0");
}
END_TEST

/* ---- threaded agents: the calls from another thread than the reactor's */

static nxl_agent_t *threaded(const char *name)
{
    nxl_agent_config_t c;
    tl_config(&c, name, 0);
    c.threaded = 1;
    nxl_agent_t *a = tl_agent_cfg(&c, 0);
    tl_backend(a, "UCX");
    return a;
}

START_TEST(t_threaded)
{
    nxl_agent_t *ta = threaded("TA"), *tb = threaded("TB");
    unsigned char *x = tl_xalloc(ALEN), *y = tl_xalloc(ALEN);
    tl_fill(x, ALEN, 11);
    memset(y, 0, ALEN);
    tl_reg_dram(ta, x, ALEN);
    tl_reg_dram(tb, y, ALEN);
    tl_learn(ta, tb);
    tl_learn(tb, ta);
    nxl_strided_t ys = {.base = (uintptr_t)y, .len = BS, .stride = 3 * BS, .count = NB / 2,
                        .outer_count = 2, .outer_stride = LAYER};
    void *blob;
    size_t len, n = 0;
    ck_assert_int_eq(nxl_md_local_partial_strided(tb, NXL_DRAM, &ys, 1, &blob, &len),
                     NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_load(ta, blob, len, NULL, 0), NXL_SUCCESS);
    nxl_free(blob);
    nxl_strided_t got;
    ck_assert_int_eq(nxl_md_remote_strided(ta, "TB", NULL, &got, 1, &n), NXL_SUCCESS);
    ck_assert_uint_eq(n, 1);
    nxl_strided_t xs = {.base = (uintptr_t)x + 1, .len = BS, .stride = BS, .count = NB};
    nxl_prepped_t *lp = prep_s(ta, NULL, NXL_DRAM, &xs, 1), *rp = prep_s(ta, "TB", NXL_DRAM, &got, 1);
    nxl_xfer_t *w = NULL;
    ck_assert_int_eq(nxl_xfer_make(ta, NXL_WRITE, lp, NULL, rp, NULL, NB, NULL, &w), NXL_SUCCESS);
    nxl_future_t *f = NULL;
    ck_assert_int_eq(nxl_xfer_post(w, NULL, NULL, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_wait(f, 20000), NXL_SUCCESS);
    nxl_future_release(f);
    unsigned char *before = calloc(1, ALEN);
    check_moved(x, y, before, ALEN, (uintptr_t)x, (uintptr_t)y, &xs, 1, &ys, 1, NULL, NULL, NB,
                BS);
    free(before);
    /* more elements than a foreign thread makes itself from descriptors:
     * strided, the work is per list */
    nxl_strided_t small_l = {.base = (uintptr_t)x, .len = 8, .stride = 8, .count = 4096};
    nxl_strided_t small_r = {.base = (uintptr_t)y + 8, .len = 8, .stride = 8, .count = 4096};
    nxl_prepped_t *sl = prep_s(ta, NULL, NXL_DRAM, &small_l, 1);
    nxl_prepped_t *sr = prep_s(ta, "TB", NXL_DRAM, &small_r, 1);
    nxl_xfer_t *sw = NULL;
    ck_assert_int_eq(nxl_xfer_make(ta, NXL_WRITE, sl, NULL, sr, NULL, 4096, NULL, &sw),
                     NXL_SUCCESS);
    ck_assert_int_eq(nxl_xfer_post(sw, NULL, NULL, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_wait(f, 20000), NXL_SUCCESS);
    nxl_future_release(f);
    ck_assert_int_eq(memcmp(y + 8, x, 4096 * 8), 0);
    nxl_xfer_release(sw);
    nxl_prepped_release(sl);
    nxl_prepped_release(sr);
    /* a refusal from another thread leaves its sentence to that thread */
    xs.count = 0;
    nxl_prepped_t *bad = NULL;
    ck_assert_int_eq(nxl_prep_strided(ta, NULL, NXL_DRAM, &xs, 1, &bad), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(ta), "count 0");
    nxl_xfer_release(w);
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
    nxl_agent_destroy(ta);
    nxl_agent_destroy(tb);
    free(x);
    free(y);
}
END_TEST

/* ---- POSIX: DRAM <-> a file, loopback */

START_TEST(t_posix)
{
    nxl_agent_t *a = tl_agent_bare("P", 0);
    tl_backend(a, "POSIX");
    char path[] = "/tmp/nxl_strided_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    enum { FLEN = 64 * BS, MLEN = 96 * BS };
    ck_assert_int_eq(ftruncate(fd, FLEN), 0);
    unsigned char *m = tl_xalloc(MLEN), *back = tl_xalloc(MLEN), *file = malloc(FLEN);
    tl_fill(m, MLEN, 7);
    memset(back, 0xee, MLEN);
    tl_reg_dram(a, m, MLEN);
    tl_reg_dram(a, back, MLEN);
    nxl_desc_t fdsc = {.addr = 0, .len = FLEN, .dev_id = (uint64_t)fd};
    ck_assert_msg(nxl_mem_register(a, NXL_FILE, &fdsc, 1, NULL) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    /* memory: 4 layers x 8 blocks, every third block; file: 2 runs of 16
     * blocks packed, 32 blocks apart */
    nxl_strided_t ms = {.base = (uintptr_t)m, .len = BS, .stride = 3 * BS, .count = 8,
                        .outer_count = 4, .outer_stride = 24 * BS};
    nxl_strided_t fs = {.base = 0, .len = BS, .stride = BS, .count = 16, .outer_count = 2,
                        .outer_stride = 32 * BS, .dev_id = (uint64_t)fd};
    nxl_strided_t bs = {.base = (uintptr_t)back + 1, .len = BS, .stride = BS + 3, .count = 32};
    nxl_prepped_t *mp = prep_s(a, NULL, NXL_DRAM, &ms, 1);
    nxl_prepped_t *bp = prep_s(a, NULL, NXL_DRAM, &bs, 1);
    nxl_prepped_t *fp = prep_s(a, "P", NXL_FILE, &fs, 1);
    nxl_xfer_t *w = NULL, *r = NULL;
    ck_assert_msg(nxl_xfer_make(a, NXL_WRITE, mp, NULL, fp, NULL, 32, NULL, &w) == NXL_SUCCESS,
                  "%s", nxl_agent_last_error(a));
    ck_assert_msg(nxl_xfer_make(a, NXL_READ, bp, NULL, fp, NULL, 32, NULL, &r) == NXL_SUCCESS,
                  "%s", nxl_agent_last_error(a));
    ck_assert_str_eq(nxl_backend_name(nxl_xfer_backend(w)), "POSIX");
    tl_res_t res;
    tl_post(a, w, &res);
    tl_wait_res(a, &res, 10000);
    ck_assert_msg(res.st == NXL_SUCCESS, "write: %s", res.why);
    /* the file, read apart from the library */
    ck_assert_int_eq(pread(fd, file, FLEN, 0), FLEN);
    unsigned char *want = calloc(1, FLEN);
    for (size_t k = 0; k < 32; k++)
        memcpy(want + elem_addr(&fs, 1, k), (void *)elem_addr(&ms, 1, k), BS);
    long diff = tl_first_diff(file, want, FLEN);
    ck_assert_msg(diff < 0, "file byte %ld is wrong", diff);
    tl_post(a, r, &res);
    tl_wait_res(a, &res, 10000);
    ck_assert_msg(res.st == NXL_SUCCESS, "read: %s", res.why);
    unsigned char *bwant = malloc(MLEN);
    memset(bwant, 0xee, MLEN);
    for (size_t k = 0; k < 32; k++)
        memcpy(bwant + (elem_addr(&bs, 1, k) - (uintptr_t)back), want + elem_addr(&fs, 1, k), BS);
    diff = tl_first_diff(back, bwant, MLEN);
    ck_assert_msg(diff < 0, "byte %ld read back is wrong", diff);
    /* an index list into the file's list */
    size_t fidx[3] = {31, 0, 17}, midx[3] = {0, 1, 2};
    nxl_xfer_t *x = NULL;
    memset(back, 0, MLEN);
    ck_assert_int_eq(nxl_xfer_make(a, NXL_READ, bp, midx, fp, fidx, 3, NULL, &x), NXL_SUCCESS);
    tl_post(a, x, &res);
    tl_wait_res(a, &res, 10000);
    ck_assert_msg(res.st == NXL_SUCCESS, "indexed read: %s", res.why);
    for (size_t k = 0; k < 3; k++) {
        diff = tl_first_diff((void *)elem_addr(&bs, 1, midx[k]), want + elem_addr(&fs, 1, fidx[k]),
                             BS);
        ck_assert_msg(diff < 0, "indexed element %zu: byte %ld differs", k, diff);
    }
    /* past the file's registered range */
    fs.outer_stride = 48 * BS + 1;
    nxl_prepped_t *bad = NULL;
    ck_assert_int_eq(nxl_prep_strided(a, "P", NXL_FILE, &fs, 1, &bad), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(a), "FILE");
    nxl_xfer_release(x);
    nxl_xfer_release(w);
    nxl_xfer_release(r);
    nxl_prepped_release(mp);
    nxl_prepped_release(bp);
    nxl_prepped_release(fp);
    nxl_agent_destroy(a);
    close(fd);
    free(m);
    free(back);
    free(file);
    free(want);
    free(bwant);
}
END_TEST

/* A strided transfer of more elements than an array of them can hold
 * in memory (a list of zero stride: the same bytes again and again) is
 * refused at its post, not expanded into an array whose size wrapped;
 * a threaded agent too */
static void huge_round(nxl_agent_t *a, size_t count)
{
    char path[] = "/tmp/nxl_strided_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    ck_assert_int_eq(ftruncate(fd, BS), 0);
    unsigned char *m = tl_xalloc(BS);
    tl_reg_dram(a, m, BS);
    nxl_desc_t fdsc = {.addr = 0, .len = BS, .dev_id = (uint64_t)fd};
    ck_assert_msg(nxl_mem_register(a, NXL_FILE, &fdsc, 1, NULL) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    nxl_strided_t ms = {.base = (uintptr_t)m, .len = 1, .stride = 0, .count = count};
    nxl_strided_t fs = {.base = 0, .len = 1, .stride = 0, .count = count, .dev_id = (uint64_t)fd};
    nxl_prepped_t *mp = prep_s(a, NULL, NXL_DRAM, &ms, 1);
    nxl_prepped_t *fp = prep_s(a, nxl_agent_name(a), NXL_FILE, &fs, 1);
    nxl_xfer_t *w = NULL;
    ck_assert_msg(nxl_xfer_make(a, NXL_WRITE, mp, NULL, fp, NULL, count, NULL, &w) == NXL_SUCCESS,
                  "%s", nxl_agent_last_error(a));
    /* refused at the post; a threaded agent whose reactor was busy queues
     * the post, and its future then fails with the same status and sentence */
    nxl_future_t *f = NULL;
    nxl_status_t st = nxl_xfer_post(w, NULL, NULL, &f);
    if (st == NXL_SUCCESS) {
        ck_assert_msg(f && nxl_future_wait(f, 10000) == NXL_ERR_UNKNOWN, "%s",
                      f ? nxl_status_name(nxl_future_status(f)) : "no future");
        ck_sentence(nxl_future_error(f), "elements");
        nxl_future_release(f);
    } else {
        ck_assert_int_eq(st, NXL_ERR_UNKNOWN);
        ck_assert(!f);
        ck_sentence(nxl_agent_last_error(a), "elements");
    }
    nxl_xfer_release(w);
    nxl_prepped_release(mp);
    nxl_prepped_release(fp);
    nxl_agent_destroy(a);
    close(fd);
    free(m);
}

START_TEST(t_huge)
{
    nxl_agent_t *a = tl_agent_bare("P", 0);
    tl_backend(a, "POSIX");
    huge_round(a, SIZE_MAX); /* the array's count, plus one, is 0 */
    a = threaded("PT");
    tl_backend(a, "POSIX");
    huge_round(a, ((size_t)1 << 61) - 1); /* its bytes wrap to 0 */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("strided");
    TL_TCASE(s, "ucx", 60, ucx_setup, two_teardown, t_simple, t_nested, t_index, t_zero_stride,
             t_ucx_revoked, t_bad, t_million, t_md);
    TL_TCASE(s, "libfabric", 60, lf_setup, two_teardown, t_simple, t_nested, t_index,
             t_zero_stride, t_million, t_md);
    TL_TCASE(s, "threaded", 60, NULL, NULL, t_threaded);
    TL_TCASE(s, "posix", 60, NULL, NULL, t_posix, t_huge);
    return tl_run(s);
}
