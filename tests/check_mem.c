/* SPDX-License-Identifier: BSD-3-Clause */
/* The memory section: registering and deregistering DRAM regions (all or
 * nothing, exact deregistration, overlaps, bad descriptors), resolving
 * descriptors against them with nxl_prep (inside, before, after,
 * straddling), regions kept alive by prepared lists and transfers,
 * nxl_mem_alloc / nxl_mem_free, and agents without a transport; the
 * registration cache (slices of registered regions, unions of overlapping
 * ones) and, with it off, overlaps refused. */
#include "testlib.h"

#include <stdint.h>


#define BUF (1u << 20)

static nxl_agent_t *A;
static unsigned char *buf; /* a large malloc'd area, parts of it registered */

static void setup(void)
{
    A = tl_agent("A", 0);
    buf = malloc(BUF);
    ck_assert_ptr_nonnull(buf);
    memset(buf, 0, BUF);
}

/* the same with the registration cache off (NXL_REG_CACHE=0): overlaps
 * are refused as before the cache */
static void setup_nocache(void)
{
    setenv("NXL_REG_CACHE", "0", 1);
    setup();
    unsetenv("NXL_REG_CACHE");
}

static void teardown(void)
{
    nxl_agent_destroy(A);
    A = NULL;
    free(buf);
}

static nxl_desc_t D(size_t off, size_t len)
{
    return (nxl_desc_t){.addr = (uintptr_t)buf + off, .len = len};
}

/* nxl_prep on one local descriptor: the status; a failure leaves no list */
static nxl_status_t prep1(size_t off, size_t len)
{
    return tl_prep1(A, NULL, D(off, len));
}

static nxl_status_t reg(size_t off, size_t len)
{
    nxl_desc_t d = D(off, len);
    return nxl_mem_register(A, NXL_DRAM, &d, 1, NULL);
}

static nxl_status_t dereg(size_t off, size_t len)
{
    nxl_desc_t d = D(off, len);
    return nxl_mem_deregister(A, NXL_DRAM, &d, 1);
}

static int n_done;
static nxl_status_t last_st;
static void done_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    n_done++;
    last_st = st;
}

/* a loopback WRITE of len bytes from src to dst, waited for */
static nxl_status_t loopback(uintptr_t src, uintptr_t dst, size_t len)
{
    nxl_desc_t l = {.addr = src, .len = len}, r = {.addr = dst, .len = len};
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, rl = {NXL_DRAM, &r, 1};
    nxl_xfer_t *x;
    nxl_status_t st = nxl_xfer_create(A, NXL_WRITE, &ll, &rl, "A", NULL, &x);
    if (st != NXL_SUCCESS)
        return st;
    n_done = 0;
    ck_assert_int_eq(nxl_xfer_post(x, done_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert_int_eq(n_done, 0);
    ck_assert_msg(tl_run_until(A, &n_done, 1, 5000), "loopback transfer did not complete");
    ck_assert_int_eq(n_done, 1);
    nxl_xfer_release(x);
    return last_st;
}

/* ------------------------------------------------------------------ */

START_TEST(t_register_deregister)
{
    ck_assert_int_eq(prep1(0, 4096), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(reg(0, 65536), NXL_SUCCESS);
    ck_assert_int_eq(prep1(0, 65536), NXL_SUCCESS);
    ck_assert_int_eq(prep1(0, 1), NXL_SUCCESS);
    ck_assert_int_eq(prep1(65535, 1), NXL_SUCCESS);
    ck_assert_int_eq(prep1(1000, 5000), NXL_SUCCESS);
    /* several descriptors into one region */
    nxl_desc_t ds[3] = {D(0, 16), D(100, 200), D(60000, 5536)};
    nxl_prepped_t *p;
    ck_assert_int_eq(nxl_prep(A, NULL, NXL_DRAM, ds, 3, &p), NXL_SUCCESS);
    ck_assert_uint_eq(nxl_prepped_count(p), 3);
    nxl_prepped_release(p);
    /* a second region, with an explicit backend */
    nxl_backend_t *b = nxl_backend_get(A, "UCX");
    ck_assert_ptr_nonnull(b);
    nxl_desc_t d2 = D(131072, 4096);
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, &d2, 1, b), NXL_SUCCESS);
    ck_assert_int_eq(prep1(131072, 4096), NXL_SUCCESS);

    ck_assert_int_eq(dereg(0, 65536), NXL_SUCCESS);
    ck_assert_int_eq(prep1(0, 4096), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(prep1(131072, 4096), NXL_SUCCESS);
    /* twice: it is gone */
    ck_assert_int_eq(dereg(0, 65536), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(A), "never registered");
    /* and it can come back */
    ck_assert_int_eq(reg(0, 65536), NXL_SUCCESS);
    ck_assert_int_eq(prep1(0, 4096), NXL_SUCCESS);
    /* a batch */
    nxl_desc_t both[2] = {D(0, 65536), D(131072, 4096)};
    ck_assert_int_eq(nxl_mem_deregister(A, NXL_DRAM, both, 2), NXL_SUCCESS);
    ck_assert_int_eq(prep1(0, 4096), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(prep1(131072, 4096), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, both, 2, NULL), NXL_SUCCESS);
    ck_assert_int_eq(prep1(0, 4096), NXL_SUCCESS);
    ck_assert_int_eq(prep1(131072, 4096), NXL_SUCCESS);
    /* registered memory moves */
    tl_fill(buf, 4096, 11);
    ck_assert_int_eq(loopback((uintptr_t)buf, (uintptr_t)buf + 131072, 4096), NXL_SUCCESS);
    ck_assert(tl_check(buf + 131072, 4096, 11) < 0);
}
END_TEST

START_TEST(t_deregister_unknown)
{
    ck_assert_int_eq(reg(0, 65536), NXL_SUCCESS);
    /* never registered */
    ck_assert_int_eq(dereg(262144, 4096), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(A), "never registered");
    ck_assert_int_eq(prep1(0, 65536), NXL_SUCCESS);
    /* a part of a region, or a different length: not as registered */
    ck_assert_int_eq(dereg(0, 4096), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(dereg(4096, 61440), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(dereg(0, 65537), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(prep1(0, 65536), NXL_SUCCESS);
    /* a batch with one unknown: nothing changes, the known one stays */
    nxl_desc_t ds[2] = {D(0, 65536), D(262144, 4096)};
    ck_assert_int_eq(nxl_mem_deregister(A, NXL_DRAM, ds, 2), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(A), "nothing was deregistered");
    ck_assert_int_eq(prep1(0, 65536), NXL_SUCCESS);
    /* the same region twice in a batch */
    nxl_desc_t twice[2] = {D(0, 65536), D(0, 65536)};
    ck_assert_int_eq(nxl_mem_deregister(A, NXL_DRAM, twice, 2), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "repeats");
    ck_assert_int_eq(prep1(0, 65536), NXL_SUCCESS);
    /* of another memory type */
    nxl_desc_t d = D(0, 65536);
    ck_assert_int_eq(nxl_mem_deregister(A, NXL_VRAM, &d, 1), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(prep1(0, 65536), NXL_SUCCESS);
    /* the region still works and deregisters properly */
    tl_fill(buf, 1024, 3);
    ck_assert_int_eq(loopback((uintptr_t)buf, (uintptr_t)buf + 32768, 1024), NXL_SUCCESS);
    ck_assert(tl_check(buf + 32768, 1024, 3) < 0);
    ck_assert_int_eq(dereg(0, 65536), NXL_SUCCESS);
    ck_assert_int_eq(prep1(0, 65536), NXL_ERR_NOT_FOUND);
}
END_TEST

/* A batch that fails leaves nothing registered: afterwards the first
 * descriptor is unknown (prep and deregister say NOT_FOUND) and registers
 * cleanly on its own. */
static void check_nothing_left(size_t off, size_t len)
{
    ck_assert_int_eq(prep1(off, len), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(dereg(off, len), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(reg(off, len), NXL_SUCCESS);
    ck_assert_int_eq(prep1(off, len), NXL_SUCCESS);
    ck_assert_int_eq(dereg(off, len), NXL_SUCCESS);
}

START_TEST(t_all_or_nothing)
{
    /* 2nd has length 0 */
    nxl_desc_t b1[2] = {D(0, 4096), D(8192, 0)};
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, b1, 2, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "length 0");
    check_nothing_left(0, 4096);
    /* 2nd has a NULL address */
    nxl_desc_t b2[2] = {D(0, 4096), {.addr = 0, .len = 4096}};
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, b2, 2, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "NULL");
    check_nothing_left(0, 4096);
    /* 2nd overlaps the 1st partly: found while registering, the 1st undone */
    nxl_desc_t b3[2] = {D(0, 8192), D(4096, 8192)};
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, b3, 2, NULL), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(A), "overlaps");
    check_nothing_left(0, 8192);
    check_nothing_left(4096, 8192);
    /* 2nd repeats the 1st */
    nxl_desc_t b4[2] = {D(0, 8192), D(0, 8192)};
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, b4, 2, NULL), NXL_ERR_NOT_ALLOWED);
    check_nothing_left(0, 8192);
    /* 3rd overlaps a region registered before: the 1st and 2nd undone, the
     * earlier region untouched */
    ck_assert_int_eq(reg(65536, 65536), NXL_SUCCESS);
    nxl_desc_t b5[3] = {D(0, 4096), D(8192, 4096), D(65536 + 60000, 10000)};
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, b5, 3, NULL), NXL_ERR_NOT_ALLOWED);
    check_nothing_left(0, 4096);
    check_nothing_left(8192, 4096);
    ck_assert_int_eq(prep1(65536, 65536), NXL_SUCCESS);
    /* and a good batch goes in whole */
    nxl_desc_t b6[3] = {D(0, 4096), D(8192, 4096), D(16384, 4096)};
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, b6, 3, NULL), NXL_SUCCESS);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(prep1(8192u * (unsigned)i, 4096), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_deregister(A, NXL_DRAM, b6, 3), NXL_SUCCESS);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(prep1(8192u * (unsigned)i, 4096), NXL_ERR_NOT_FOUND);
}
END_TEST

START_TEST(t_bad_descriptors)
{
    ck_assert_int_eq(reg(0, 0), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "length 0");
    nxl_desc_t nul = {.addr = 0, .len = 4096};
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, &nul, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "NULL");
    /* a range that wraps around the address space */
    nxl_desc_t wrap = {.addr = UINTPTR_MAX - 4095, .len = 8192};
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, &wrap, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "wraps");
    nxl_desc_t wrap2[2] = {D(0, 4096), {.addr = UINTPTR_MAX, .len = 2}};
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, wrap2, 2, NULL), NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(prep1(0, 4096), NXL_ERR_NOT_FOUND);
    /* NULL descriptor array with n > 0; bad memory type */
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, NULL, 1, NULL), NXL_ERR_INVALID_PARAM);
    nxl_desc_t d = D(0, 4096);
    ck_assert_int_eq(nxl_mem_register(A, (nxl_mem_t)99, &d, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "memory type");
    ck_assert_int_eq(nxl_mem_deregister(A, (nxl_mem_t)99, &d, 1), NXL_ERR_INVALID_PARAM);
    /* UCX serves DRAM only here */
    ck_assert_int_eq(nxl_mem_register(A, NXL_VRAM, &d, 1, NULL), NXL_ERR_NOT_SUPPORTED);
    ck_sentence(nxl_agent_last_error(A), "VRAM");
    ck_assert_int_eq(prep1(0, 4096), NXL_ERR_NOT_FOUND);
}
END_TEST

START_TEST(t_overlap)
{
    ck_assert_int_eq(reg(65536, 8192), NXL_SUCCESS);
    /* partial overlaps, from below and from above */
    ck_assert_int_eq(reg(65536 - 4096, 8192), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(A), "overlaps");
    ck_assert_int_eq(reg(65536 + 4096, 8192), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(A), "overlaps");
    /* same start, other length */
    ck_assert_int_eq(reg(65536, 4096), NXL_ERR_NOT_ALLOWED);
    ck_assert_int_eq(reg(65536, 16384), NXL_ERR_NOT_ALLOWED);
    /* inside, around */
    ck_assert_int_eq(reg(65536 + 1024, 1024), NXL_ERR_NOT_ALLOWED);
    ck_assert_int_eq(reg(0, 262144), NXL_ERR_NOT_ALLOWED);
    /* exactly the same, with the same transport */
    ck_assert_int_eq(reg(65536, 8192), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(A), "already registered");
    /* touching is not overlapping */
    ck_assert_int_eq(reg(65536 - 4096, 4096), NXL_SUCCESS);
    ck_assert_int_eq(reg(65536 + 8192, 4096), NXL_SUCCESS);
    /* none of the refused ones left a trace */
    ck_assert_int_eq(prep1(65536, 8192), NXL_SUCCESS);
    ck_assert_int_eq(prep1(0, 4096), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(prep1(200000, 16), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(dereg(65536 + 4096, 8192), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(dereg(65536, 8192), NXL_SUCCESS);
    ck_assert_int_eq(dereg(65536 - 4096, 4096), NXL_SUCCESS);
    ck_assert_int_eq(dereg(65536 + 8192, 4096), NXL_SUCCESS);
}
END_TEST

/* nxl_prep against this agent: every descriptor must lie inside one
 * registered region. */
START_TEST(t_prep_outside)
{
    const size_t R = 65536, RL = 8192; /* the region [R, R+RL) */
    ck_assert_int_eq(reg(R, RL), NXL_SUCCESS);
    ck_assert_int_eq(reg(R + RL, 4096), NXL_SUCCESS); /* a neighbour */
    static const struct {
        size_t off, len;
        const char *what;
    } bad[] = {
        {0, 4096, "before"},
        {R - 4096, 4096, "just before"},
        {R - 1, 2, "straddling the start"},
        {R + 2 * RL, 16, "after"},
        {R + RL + 4096, 1, "just after the neighbour"},
        {R + RL + 4096 - 8, 16, "straddling the neighbour's end"},
        {R, RL + 4096 + 1, "longer than both"},
        {R + RL - 8, 16, "across two regions"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        ck_assert_msg(prep1(bad[i].off, bad[i].len) == NXL_ERR_NOT_FOUND, "%s: not refused",
                      bad[i].what);
        ck_sentence(nxl_agent_last_error(A), "outside");
    }
    /* good ones */
    ck_assert_int_eq(prep1(R, RL), NXL_SUCCESS);
    ck_assert_int_eq(prep1(R + RL - 1, 1), NXL_SUCCESS);
    ck_assert_int_eq(prep1(R + RL, 4096), NXL_SUCCESS);
    /* one bad descriptor in a list: no list at all, the sentence names it */
    nxl_desc_t ds[4] = {D(R, 16), D(R + RL, 16), D(R + 2 * RL + 4096, 1), D(R + 32, 16)};
    nxl_prepped_t *p = (nxl_prepped_t *)&p;
    ck_assert_int_eq(nxl_prep(A, NULL, NXL_DRAM, ds, 4, &p), NXL_ERR_NOT_FOUND);
    ck_assert_ptr_null(p);
    ck_sentence(nxl_agent_last_error(A), "descriptor 2");
    /* wrong memory type, wrong device */
    nxl_desc_t d = D(R, 16);
    p = (nxl_prepped_t *)&p;
    ck_assert_int_eq(nxl_prep(A, NULL, NXL_FILE, &d, 1, &p), NXL_ERR_NOT_FOUND);
    ck_assert_ptr_null(p);
    d.dev_id = 1;
    ck_assert_int_eq(nxl_prep(A, NULL, NXL_DRAM, &d, 1, &p), NXL_ERR_NOT_FOUND);
    ck_assert_ptr_null(p);
    /* bad arguments */
    d.dev_id = 0;
    ck_assert_int_eq(nxl_prep(A, NULL, NXL_DRAM, &d, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(nxl_prep(A, NULL, NXL_DRAM, NULL, 1, &p), NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(nxl_prep(A, NULL, (nxl_mem_t)77, &d, 1, &p), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "nxl_prep");
    /* an agent nobody loaded */
    p = (nxl_prepped_t *)&p;
    ck_assert_int_eq(nxl_prep(A, "nobody", NXL_DRAM, &d, 1, &p), NXL_ERR_NOT_FOUND);
    ck_assert_ptr_null(p);
    ck_sentence(nxl_agent_last_error(A), "nobody");
    /* the failures changed nothing */
    ck_assert_int_eq(prep1(R, RL), NXL_SUCCESS);
}
END_TEST

/* Prepared lists and transfers keep a deregistered region alive. */
START_TEST(t_region_kept_alive)
{
    ck_assert_int_eq(reg(0, 65536), NXL_SUCCESS);
    ck_assert_int_eq(reg(65536, 65536), NXL_SUCCESS);
    nxl_desc_t l = D(0, 4096), r = D(65536, 4096);
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, rl = {NXL_DRAM, &r, 1};
    nxl_xfer_t *x;
    ck_assert_int_eq(nxl_xfer_create(A, NXL_WRITE, &ll, &rl, "A", NULL, &x), NXL_SUCCESS);
    nxl_prepped_t *p;
    ck_assert_int_eq(nxl_prep(A, NULL, NXL_DRAM, &l, 1, &p), NXL_SUCCESS);
    ck_assert_int_eq(dereg(0, 65536), NXL_SUCCESS);
    ck_assert_int_eq(prep1(0, 4096), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(dereg(0, 65536), NXL_ERR_NOT_FOUND);
    /* the transfer still moves data from it */
    tl_fill(buf, 4096, 21);
    n_done = 0;
    ck_assert_int_eq(nxl_xfer_post(x, done_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert(tl_run_until(A, &n_done, 1, 5000));
    ck_assert_int_eq(last_st, NXL_SUCCESS);
    ck_assert(tl_check(buf + 65536, 4096, 21) < 0);
    nxl_xfer_release(x);
    nxl_prepped_release(p);
    /* registering it again works */
    ck_assert_int_eq(reg(0, 65536), NXL_SUCCESS);
    ck_assert_int_eq(prep1(0, 4096), NXL_SUCCESS);
}
END_TEST

START_TEST(t_mem_alloc)
{
    const size_t L = 1u << 20;
    void *p = (void *)&p;
    ck_assert_int_eq(nxl_mem_alloc(A, NXL_DRAM, L, 0, &p), NXL_SUCCESS);
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_ne(p, (void *)&p);
    /* usable memory */
    tl_fill(p, L, 5);
    ck_assert(tl_check(p, L, 5) < 0);
    /* registered: prep works on it, in full and in part */
    nxl_desc_t d = {.addr = (uintptr_t)p, .len = L};
    nxl_prepped_t *pp;
    ck_assert_int_eq(nxl_prep(A, NULL, NXL_DRAM, &d, 1, &pp), NXL_SUCCESS);
    nxl_prepped_release(pp);
    d.len = L + 1;
    ck_assert_int_eq(nxl_prep(A, NULL, NXL_DRAM, &d, 1, &pp), NXL_ERR_NOT_FOUND);
    d.len = L;
    /* registered with UCX: data moves in and out of it */
    ck_assert_int_eq(reg(0, 65536), NXL_SUCCESS);
    tl_fill(buf, 65536, 6);
    ck_assert_int_eq(loopback((uintptr_t)buf, (uintptr_t)p + 4096, 65536), NXL_SUCCESS);
    ck_assert(tl_check((unsigned char *)p + 4096, 65536, 6) < 0);
    memset(buf, 0, 65536);
    ck_assert_int_eq(loopback((uintptr_t)p + 4096, (uintptr_t)buf, 65536), NXL_SUCCESS);
    ck_assert(tl_check(buf, 65536, 6) < 0);
    /* it is not deregistered, nor overlapped, by hand */
    ck_assert_int_eq(nxl_mem_deregister(A, NXL_DRAM, &d, 1), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(A), "nxl_mem_free");
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, &d, 1, NULL), NXL_ERR_NOT_ALLOWED);
    nxl_desc_t part = {.addr = (uintptr_t)p + 4096, .len = 4096};
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, &part, 1, NULL), NXL_ERR_NOT_ALLOWED);
    ck_assert_int_eq(nxl_prep(A, NULL, NXL_DRAM, &d, 1, &pp), NXL_SUCCESS);
    nxl_prepped_release(pp);
    /* a second allocation is elsewhere */
    void *q;
    ck_assert_int_eq(nxl_mem_alloc(A, NXL_DRAM, 4096, 0, &q), NXL_SUCCESS);
    ck_assert_ptr_nonnull(q);
    ck_assert((uintptr_t)q + 4096 <= (uintptr_t)p || (uintptr_t)q >= (uintptr_t)p + L);
    /* free: unknown pointers are refused and change nothing */
    ck_assert_int_eq(nxl_mem_free(A, buf), NXL_ERR_NOT_FOUND); /* registered, not allocated */
    ck_sentence(nxl_agent_last_error(A), "nxl_mem_alloc");
    ck_assert_int_eq(prep1(0, 65536), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_free(A, (char *)p + 4096), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(nxl_mem_free(A, &d), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(nxl_mem_free(A, NULL), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(nxl_prep(A, NULL, NXL_DRAM, &d, 1, &pp), NXL_SUCCESS);
    nxl_prepped_release(pp);
    ck_assert_int_eq(nxl_mem_free(A, p), NXL_SUCCESS);
    pp = (nxl_prepped_t *)&pp;
    ck_assert_int_eq(nxl_prep(A, NULL, NXL_DRAM, &d, 1, &pp), NXL_ERR_NOT_FOUND);
    ck_assert_ptr_null(pp);
    ck_assert_int_eq(nxl_mem_free(A, p), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(nxl_mem_free(A, q), NXL_SUCCESS);
    /* bad requests */
    p = (void *)&p;
    ck_assert_int_eq(nxl_mem_alloc(A, NXL_DRAM, 0, 0, &p), NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(nxl_mem_alloc(A, NXL_DRAM, 4096, 0, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "nxl_mem_alloc");
    p = (void *)&p;
    ck_assert_int_eq(nxl_mem_alloc(A, NXL_VRAM, 4096, 0, &p), NXL_ERR_NOT_SUPPORTED);
    ck_assert_ptr_null(p);
    ck_sentence(nxl_agent_last_error(A), "VRAM"); /* and what allocates it: CUDA */
}
END_TEST

/* Memory allocated and never freed is given back by nxl_agent_destroy (the
 * teardown), as are regions still registered. */
START_TEST(t_alloc_left_to_destroy)
{
    void *p;
    ck_assert_int_eq(nxl_mem_alloc(A, NXL_DRAM, 65536, 0, &p), NXL_SUCCESS);
    ck_assert_int_eq(reg(0, 4096), NXL_SUCCESS);
    memset(p, 1, 65536);
}
END_TEST

START_TEST(t_no_backend)
{
    nxl_agent_t *a = tl_agent_bare("bare", 0);
    nxl_desc_t d = D(0, 4096);
    ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &d, 1, NULL), NXL_ERR_NOT_SUPPORTED);
    ck_sentence(nxl_agent_last_error(a), "nxl_backend_create");
    nxl_prepped_t *p = (nxl_prepped_t *)&p;
    ck_assert_int_eq(nxl_prep(a, NULL, NXL_DRAM, &d, 1, &p), NXL_ERR_NOT_FOUND);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(nxl_mem_deregister(a, NXL_DRAM, &d, 1), NXL_ERR_NOT_FOUND);
    /* another agent's backend is not this agent's */
    ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &d, 1, nxl_backend_get(A, "UCX")),
                     NXL_ERR_NOT_SUPPORTED);
    ck_sentence(nxl_agent_last_error(a), "another agent");
    ck_assert_int_eq(prep1(0, 4096), NXL_ERR_NOT_FOUND); /* nor registered in A */
    /* once it has one, registration works */
    ck_assert_int_eq(nxl_backend_create(a, "UCX", NULL, 0, NULL), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &d, 1, NULL), NXL_SUCCESS);
    ck_assert_int_eq(nxl_prep(a, NULL, NXL_DRAM, &d, 1, &p), NXL_SUCCESS);
    nxl_prepped_release(p);
    nxl_agent_destroy(a);
}
END_TEST

/* ---- the registration cache */

/* 10,000 slices of a registered region, registered and deregistered one by
 * one in random order: each resolves, moves data (loopback, through the
 * region's key), and outlives the region it lies in */
START_TEST(t_cache_slices)
{
    enum { N = 10000, SL = 96 };
    static unsigned idx[N];
    ck_assert_int_eq(reg(0, BUF), NXL_SUCCESS);
    for (unsigned i = 0; i < N; i++)
        idx[i] = i;
    srand(30);
    for (unsigned i = N - 1; i > 0; i--) {
        unsigned j = (unsigned)rand() % (i + 1), t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
    for (unsigned i = 0; i < N; i++)
        ck_assert_int_eq(reg(idx[i] * SL, SL), NXL_SUCCESS);
    ck_assert_int_eq(reg(5 * SL, SL), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(A), "already registered");
    /* the region goes; its slices keep it */
    ck_assert_int_eq(dereg(0, BUF), NXL_SUCCESS);
    ck_assert_int_eq(dereg(0, BUF), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(prep1(7 * SL, SL), NXL_SUCCESS);
    for (unsigned i = N - 1; i > 0; i--) {
        unsigned j = (unsigned)rand() % (i + 1), t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
    for (unsigned i = 0; i < N - 2; i++)
        ck_assert_int_eq(dereg(idx[i] * SL, SL), NXL_SUCCESS);
    /* the last two: data still moves between them */
    uintptr_t s0 = (uintptr_t)buf + idx[N - 2] * SL, s1 = (uintptr_t)buf + idx[N - 1] * SL;
    tl_fill((void *)s0, SL, 9);
    ck_assert_int_eq(loopback(s0, s1, SL), NXL_SUCCESS);
    ck_assert(tl_check((void *)s1, SL, 9) < 0);
    ck_assert_int_eq(dereg(idx[N - 2] * SL, SL), NXL_SUCCESS);
    ck_assert_int_eq(dereg(idx[N - 1] * SL, SL), NXL_SUCCESS);
    ck_assert_int_eq(prep1(idx[N - 1] * SL, SL), NXL_ERR_NOT_FOUND);
    check_nothing_left(0, BUF);
}
END_TEST

/* a range overlapping regions without lying inside one registers their
 * union; each keeps being deregistered exactly as registered */
START_TEST(t_cache_union)
{
    ck_assert_int_eq(reg(65536, 8192), NXL_SUCCESS);
    ck_assert_int_eq(reg(131072, 8192), NXL_SUCCESS);
    ck_assert_int_eq(reg(65536 - 4096, 131072), NXL_SUCCESS);
    ck_assert_int_eq(prep1(61440, 131072 + 8192 - 61440 + 4096), NXL_SUCCESS);
    tl_fill(buf + 61440, 4096, 3);
    ck_assert_int_eq(loopback((uintptr_t)buf + 61440, (uintptr_t)buf + 135168, 4096),
                     NXL_SUCCESS);
    ck_assert(tl_check(buf + 135168, 4096, 3) < 0);
    ck_assert_int_eq(dereg(65536 - 4096, 131072), NXL_SUCCESS);
    ck_assert_int_eq(dereg(65536 - 4096, 131072), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(prep1(61440, 4096), NXL_SUCCESS); /* the union stays for the two */
    ck_assert_int_eq(dereg(65536, 8192), NXL_SUCCESS);
    ck_assert_int_eq(prep1(131072, 8192), NXL_SUCCESS);
    ck_assert_int_eq(dereg(131072, 8192), NXL_SUCCESS);
    ck_assert_int_eq(prep1(61440, 4096), NXL_ERR_NOT_FOUND);
    /* a partial overlap, from below: the union is wider than either */
    ck_assert_int_eq(reg(65536, 8192), NXL_SUCCESS);
    ck_assert_int_eq(reg(65536 - 4096, 8192), NXL_SUCCESS);
    ck_assert_int_eq(prep1(61440, 12288), NXL_SUCCESS);
    ck_assert_int_eq(reg(61440, 12288), NXL_SUCCESS); /* the union itself, by the application */
    ck_assert_int_eq(dereg(65536, 8192), NXL_SUCCESS);
    ck_assert_int_eq(dereg(61440, 8192), NXL_SUCCESS);
    ck_assert_int_eq(prep1(61440, 12288), NXL_SUCCESS);
    ck_assert_int_eq(dereg(61440, 12288), NXL_SUCCESS);
    check_nothing_left(0, BUF);
}
END_TEST

/* a region deregistered while slices remain is registered again: taken back */
START_TEST(t_cache_parent_first)
{
    ck_assert_int_eq(reg(0, 65536), NXL_SUCCESS);
    ck_assert_int_eq(reg(4096, 4096), NXL_SUCCESS);
    ck_assert_int_eq(dereg(0, 65536), NXL_SUCCESS);
    ck_assert_int_eq(reg(0, 65536), NXL_SUCCESS);
    ck_assert_int_eq(reg(0, 65536), NXL_ERR_NOT_ALLOWED);
    ck_assert_int_eq(dereg(4096, 4096), NXL_SUCCESS);
    ck_assert_int_eq(dereg(4096, 4096), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(prep1(0, 65536), NXL_SUCCESS);
    ck_assert_int_eq(dereg(0, 65536), NXL_SUCCESS);
    check_nothing_left(0, 65536);
}
END_TEST

/* all or nothing holds for slices */
START_TEST(t_cache_all_or_nothing)
{
    ck_assert_int_eq(reg(0, 65536), NXL_SUCCESS);
    nxl_desc_t b1[3] = {D(4096, 4096), D(8192, 4096), D(8192, 0)};
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, b1, 3, NULL), NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(dereg(4096, 4096), NXL_ERR_NOT_FOUND);
    nxl_desc_t b2[3] = {D(4096, 4096), D(8192, 4096), D(4096, 4096)};
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, b2, 3, NULL), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(A), "already registered");
    ck_assert_int_eq(dereg(4096, 4096), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(dereg(8192, 4096), NXL_ERR_NOT_FOUND);
    /* a batch deregistering the region and its slice together */
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, b2, 2, NULL), NXL_SUCCESS);
    nxl_desc_t b3[3] = {D(4096, 4096), D(0, 65536), D(8192, 4096)};
    ck_assert_int_eq(nxl_mem_deregister(A, NXL_DRAM, b3, 3), NXL_SUCCESS);
    check_nothing_left(0, 65536);
}
END_TEST

/* slices of nxl_mem_alloc() memory: it is not freed under them */
START_TEST(t_cache_alloc)
{
    void *p;
    ck_assert_int_eq(nxl_mem_alloc(A, NXL_DRAM, 65536, 0, &p), NXL_SUCCESS);
    nxl_desc_t part = {.addr = (uintptr_t)p + 4096, .len = 4096};
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, &part, 1, NULL), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_free(A, p), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(A), "deregister");
    ck_assert_int_eq(nxl_mem_deregister(A, NXL_DRAM, &part, 1), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_free(A, p), NXL_SUCCESS);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mem");
    TL_TCASE(s, "mem", 30, setup, teardown, t_register_deregister, t_deregister_unknown,
             t_bad_descriptors, t_prep_outside, t_region_kept_alive, t_alloc_left_to_destroy,
             t_no_backend, t_cache_slices, t_cache_union, t_cache_parent_first,
             t_cache_all_or_nothing, t_cache_alloc);
    TL_TCASE(s, "nocache", 30, setup_nocache, teardown, t_all_or_nothing, t_overlap,
             t_mem_alloc);
    return tl_run(s);
}
