/* SPDX-License-Identifier: BSD-3-Clause */
/* The transports' one parameter reader, nxlt_param*(): the values each
 * takes, that an absent key leaves the default alone, and the sentence a
 * refused value leaves ("<NAME>: key=value: what it takes"). */
#include "engine/internal.h"
#include "testlib.h"

#include <string.h>

static nxl_agent_t *agent;
static struct nxl_backend be;
static const nxlt_ops_t ops = {.abi_version = NXLT_ABI_VERSION, .name = "TESTX"};

static nxlt_ctx_t *ctx(void)
{
    if (!agent)
        agent = tl_agent("param", 0);
    be.agent = agent;
    be.ops = &ops;
    be.ctx.agent = agent;
    be.ctx.backend = &be;
    return &be.ctx;
}

static void teardown(void)
{
    if (agent)
        nxl_agent_destroy(agent);
    agent = NULL;
}

#define P1(k, v) ((nxl_param_t[]){{k, v}})
#define ERR_IS(s) ck_assert_str_eq(nxl_agent_last_error(agent), s)

START_TEST(t_lookup)
{
    nxl_param_t p[] = {{"a", "1"}, {"b", "2"}, {"a", "3"}};
    ck_assert_str_eq(nxlt_param(p, 3, "a"), "3");
    ck_assert_str_eq(nxlt_param(p, 3, "b"), "2");
    ck_assert_ptr_null(nxlt_param(p, 3, "c"));
    ck_assert_ptr_null(nxlt_param(NULL, 0, "a"));
    ck_assert_ptr_null(nxlt_param(p, 2, NULL));
}
END_TEST

START_TEST(t_bool)
{
    nxlt_ctx_t *c = ctx();
    bool b = true;
    ck_assert_int_eq(nxlt_param_bool(c, NULL, 0, "x", &b), NXL_SUCCESS);
    ck_assert(b);
    const char *no[] = {"0", "no", "NO", "false", "off"}, *yes[] = {"1", "yes", "True", "on"};
    for (size_t i = 0; i < 5; i++) {
        b = true;
        ck_assert_int_eq(nxlt_param_bool(c, P1("x", no[i]), 1, "x", &b), NXL_SUCCESS);
        ck_assert(!b);
    }
    for (size_t i = 0; i < 4; i++) {
        b = false;
        ck_assert_int_eq(nxlt_param_bool(c, P1("x", yes[i]), 1, "x", &b), NXL_SUCCESS);
        ck_assert(b);
    }
    b = true;
    ck_assert_int_eq(nxlt_param_bool(c, P1("direct", "2"), 1, "direct", &b),
                     NXL_ERR_INVALID_PARAM);
    ck_assert(b);
    ERR_IS("TESTX: direct=2: use 0 or 1 (or no/yes, false/true, off/on)");
}
END_TEST

START_TEST(t_uint)
{
    nxlt_ctx_t *c = ctx();
    uint64_t v = 7;
    ck_assert_int_eq(nxlt_param_uint(c, NULL, 0, "n", 1, 10, &v), NXL_SUCCESS);
    ck_assert_uint_eq(v, 7);
    ck_assert_int_eq(nxlt_param_uint(c, P1("n", "10"), 1, "n", 1, 10, &v), NXL_SUCCESS);
    ck_assert_uint_eq(v, 10);
    ck_assert_int_eq(nxlt_param_uint(c, P1("n", "0x1f"), 1, "n", 0, 100, &v), NXL_SUCCESS);
    ck_assert_uint_eq(v, 31);
    ck_assert_int_eq(nxlt_param_uint(c, P1("n", "010"), 1, "n", 0, 100, &v), NXL_SUCCESS);
    ck_assert_uint_eq(v, 10); /* decimal, not octal */
    const char *bad[] = {"11", "0", "", "-1", "+3", " 3", "3 ", "3x", "1e3", "0x",
                         "99999999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        v = 7;
        ck_assert_msg(nxlt_param_uint(c, P1("n", bad[i]), 1, "n", 1, 10, &v) ==
                          NXL_ERR_INVALID_PARAM, "'%s' taken", bad[i]);
        ck_assert_uint_eq(v, 7);
    }
    nxlt_param_uint(c, P1("threads", "65"), 1, "threads", 1, 64, &v);
    ERR_IS("TESTX: threads=65: a whole number from 1 to 64");
    nxlt_param_uint(c, P1("n", "x"), 1, "n", 2, UINT64_MAX, &v);
    ERR_IS("TESTX: n=x: a whole number of 2 or more");
    ck_assert_int_eq(nxlt_param_uint(c, P1("n", "18446744073709551615"), 1, "n", 0, UINT64_MAX,
                                     &v), NXL_SUCCESS);
    ck_assert_uint_eq(v, UINT64_MAX);
}
END_TEST

START_TEST(t_size)
{
    nxlt_ctx_t *c = ctx();
    struct {
        const char *s;
        uint64_t v;
    } ok[] = {{"4096", 4096}, {"64K", 65536}, {"64k", 65536}, {"1M", 1 << 20},
              {"1MiB", 1 << 20}, {"2GB", 2ull << 30}, {"5G", 5ull << 30}, {"0x1000", 4096}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(*ok); i++) {
        uint64_t v = 1;
        ck_assert_msg(nxlt_param_size(c, P1("b", ok[i].s), 1, "b", 0, 5ull << 30, &v) ==
                          NXL_SUCCESS, "'%s' refused: %s", ok[i].s, nxl_agent_last_error(agent));
        ck_assert_uint_eq(v, ok[i].v);
    }
    const char *bad[] = {"6G", "K", "1KK", "1Ki B", "1T", "-1K", "1.5M", "",
                         "17179869184G"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        uint64_t v = 1;
        ck_assert_msg(nxlt_param_size(c, P1("b", bad[i]), 1, "b", 0, 5ull << 30, &v) ==
                          NXL_ERR_INVALID_PARAM, "'%s' taken", bad[i]);
        ck_assert_uint_eq(v, 1);
    }
    uint64_t v;
    nxlt_param_size(c, P1("part_size", "1K"), 1, "part_size", 64 << 10, 5ull << 30, &v);
    ERR_IS("TESTX: part_size=1K: bytes from 64K to 5G (K, M, G: powers of 1024)");
    nxlt_param_size(c, P1("chunk", "1"), 1, "chunk", 4096, UINT64_MAX, &v);
    ERR_IS("TESTX: chunk=1: bytes, 4K or more (K, M, G: powers of 1024)");
}
END_TEST

START_TEST(t_duration)
{
    nxlt_ctx_t *c = ctx();
    struct {
        const char *s;
        uint64_t ms;
    } ok[] = {{"10s", 10000}, {"500ms", 500}, {"1.5s", 1500}, {"2", 2000}, {"0", 0},
              {"0.25", 250}, {"0ms", 0}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(*ok); i++) {
        uint64_t v = 1;
        ck_assert_msg(nxlt_param_duration(c, P1("t", ok[i].s), 1, "t", 0, UINT64_MAX, &v) ==
                          NXL_SUCCESS, "'%s' refused: %s", ok[i].s, nxl_agent_last_error(agent));
        ck_assert_uint_eq(v, ok[i].ms);
    }
    const char *bad[] = {"", "s", "-1s", "10m", "1h", "nan", "inf", "1e400", "10 s", "ms"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        uint64_t v = 1;
        ck_assert_msg(nxlt_param_duration(c, P1("t", bad[i]), 1, "t", 0, UINT64_MAX, &v) ==
                          NXL_ERR_INVALID_PARAM, "'%s' taken", bad[i]);
        ck_assert_uint_eq(v, 1);
    }
    uint64_t v;
    nxlt_param_duration(c, P1("poll_max", "0"), 1, "poll_max", 1, UINT64_MAX, &v);
    ERR_IS("TESTX: poll_max=0: a time of 1ms or more (\"10s\", \"500ms\"; a bare number is "
           "seconds)");
    nxlt_param_duration(c, P1("t", "2h"), 1, "t", 0, 3600000, &v);
    ERR_IS("TESTX: t=2h: a time from 0ms to 3600s (\"10s\", \"500ms\"; a bare number is "
           "seconds)");
}
END_TEST

START_TEST(t_choice)
{
    nxlt_ctx_t *c = ctx();
    static const char *const three[] = {"auto", "uring", "threads", NULL};
    int k = -1;
    ck_assert_int_eq(nxlt_param_choice(c, NULL, 0, "engine", three, &k), NXL_SUCCESS);
    ck_assert_int_eq(k, -1);
    ck_assert_int_eq(nxlt_param_choice(c, P1("engine", "threads"), 1, "engine", three, &k),
                     NXL_SUCCESS);
    ck_assert_int_eq(k, 2);
    ck_assert_int_eq(nxlt_param_choice(c, P1("engine", "Threads"), 1, "engine", three, &k),
                     NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(k, 2);
    ERR_IS("TESTX: engine=Threads: use auto, uring or threads");
    static const char *const two[] = {"fd", "timer", NULL};
    nxlt_param_choice(c, P1("progress", ""), 1, "progress", two, &k);
    ERR_IS("TESTX: progress=: use fd or timer");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("param");
    TL_TCASE(s, "readers", 30, NULL, teardown, t_lookup, t_bool, t_uint, t_size, t_duration,
             t_choice);
    return tl_run(s);
}
