/* SPDX-License-Identifier: BSD-3-Clause */
/* What check_cuda, check_gds and check_hf3fs share: the SKIP line, the
 * CUDA table and its checks, device and host buffers, and the
 * cancel-or-release rounds of their in-flight tests. Include after
 * testlib.h, with CT_SUITE defined as the suite's name ("check_cuda");
 * NXL_TEST_CUDA or NXL_TEST_GDS (the transport is built) brings in the
 * CUDA parts. */
#ifndef NXL_CUDATEST_H
#define NXL_CUDATEST_H

#include "testlib.h"

#ifndef CT_SUITE
#error "define CT_SUITE (the suite's name) before including cudatest.h"
#endif

#if defined(NXL_TEST_CUDA) || defined(NXL_TEST_GDS)
#define CT_CUDA 1
#include "transports/common/cudart.h"
#endif

static const char *cur_test = "";

/* one skipped test case: the reason, in the line quickstart counts */
static inline void skip(const char *why)
{
    printf("SKIP: " CT_SUITE ": %s: %s\n", cur_test, why);
    fflush(stdout);
}

/* For a test that changes its environment: 1 when it runs in a process of
 * its own (Check forks each test) after setting var to value; else 0, the
 * test skipped (CK_FORK=no). */
static inline int own_process_env(const char *var, const char *value)
{
    const char *fk = getenv("CK_FORK");
    if (fk && !strcmp(fk, "no")) {
        skip("needs a process of its own (CK_FORK=no)");
        return 0;
    }
    setenv(var, value, 1);
    return 1;
}

/* the suites' names for testlib's fixtures */
typedef tl_res_t res_t;
#define done_cb tl_done_cb
#define in_post tl_in_post
#define hmalloc tl_xalloc
#define first_diff tl_first_diff

/* block-reversed copy of src: what a transfer with reverse=1 makes */
static inline void reverse_blocks(unsigned char *dst, const unsigned char *src, size_t blk,
                                  size_t n)
{
    for (size_t i = 0; i < n; i++)
        memcpy(dst + (n - 1 - i) * blk, src + i * blk, blk);
}

/* n transfers posted with a future each: the odd ones released, the even
 * ones canceled */
static inline void ct_cancel_or_release(nxl_xfer_t **x, nxl_future_t **f, int n)
{
    for (int i = 0; i < n; i++) {
        if (i % 2)
            nxl_xfer_release(x[i]);
        else
            nxl_future_cancel(f[i]);
    }
}

/* runs a until calls[0..n) add up to n, for up to ms */
static inline void ct_run_until_all(nxl_agent_t *a, const int *calls, int n, int ms)
{
    int total = 0;
    uint64_t end = tl_now_ms() + (uint64_t)ms;
    while (total < n && tl_now_ms() < end) {
        nxl_agent_run_once(a, 20);
        total = 0;
        for (int i = 0; i < n; i++)
            total += calls[i];
    }
}

/* after ct_cancel_or_release: every future done, released, and the even
 * transfers released */
static inline void ct_release_rest(nxl_xfer_t **x, nxl_future_t **f, int n)
{
    for (int i = 0; i < n; i++) {
        ck_assert(nxl_future_status(f[i]) != NXL_IN_PROG);
        nxl_future_release(f[i]);
        if (!(i % 2))
            nxl_xfer_release(x[i]);
    }
}

/* every byte of p[0..total) still 0xee, the mark each callback wrote */
static inline void ct_check_marked(const unsigned char *p, size_t total)
{
    size_t k = 0;
    while (k < total && p[k] == 0xee)
        k++;
    ck_assert_msg(k == total, "byte %zu was written after its transfer's callback", k);
}

#ifdef CT_CUDA
static const nxl_cuda_rt_t *rt;

#define CK_CUDA(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        ck_assert_msg(e_ == cudaSuccess, "%s: %s", #call, rt->cudaGetErrorString(e_));             \
    } while (0)

static inline void *dmalloc(size_t len)
{
    void *p = NULL;
    CK_CUDA(rt->cudaMalloc(&p, len));
    return p;
}
#endif

#endif
