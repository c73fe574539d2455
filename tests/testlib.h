/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared helpers of the Check suites: agents, loop driving, data patterns. */
#ifndef NXL_TESTLIB_H
#define NXL_TESTLIB_H

#include <check.h>
#include <nxl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* An agent with a UCX transport; with listen, a metadata listener on an
 * ephemeral loopback port (nxl_agent_listen_port). */
static inline nxl_agent_t *tl_agent(const char *name, int listen)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = name;
    if (listen)
        c.listen_addr = "127.0.0.1";
    nxl_agent_t *a = NULL;
    nxl_status_t st = nxl_agent_create(&c, &a);
    ck_assert_msg(st == NXL_SUCCESS, "agent %s: %s", name, nxl_agent_last_error(NULL));
    st = nxl_backend_create(a, "UCX", NULL, 0, NULL);
    ck_assert_msg(st == NXL_SUCCESS, "UCX backend: %s", nxl_agent_last_error(a));
    return a;
}

/* a loads b's metadata (b's own, as nxl_md_local gives it) */
static inline void tl_learn(nxl_agent_t *a, nxl_agent_t *b)
{
    void *blob;
    size_t len;
    ck_assert_int_eq(nxl_md_local(b, &blob, &len), NXL_SUCCESS);
    ck_assert_msg(nxl_md_load(a, blob, len, NULL, 0) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    nxl_free(blob);
}

static inline uint64_t tl_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Runs the reactor until *counter >= target or timeout_ms passed.
 * Returns 1 when reached. */
static inline int tl_run_until(nxl_agent_t *a, const volatile int *counter, int target,
                               int timeout_ms)
{
    uint64_t end = tl_now_ms() + (uint64_t)timeout_ms;
    while (*counter < target && tl_now_ms() < end)
        nxl_agent_run_once(a, 50);
    return *counter >= target;
}

/* A pattern that differs per byte, per buffer and per seed. */
static inline void tl_fill(void *buf, size_t len, uint32_t seed)
{
    unsigned char *p = buf;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (unsigned char)x;
    }
}

/* Returns the index of the first wrong byte, or -1 when all match. */
static inline long tl_check(const void *buf, size_t len, uint32_t seed)
{
    const unsigned char *p = buf;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        if (p[i] != (unsigned char)x)
            return (long)i;
    }
    return -1;
}

/* An error sentence: a few words, not a code. */
static inline int is_sentence(const char *s)
{
    return s && strlen(s) >= 16 && strchr(s, ' ') != NULL;
}

/* Asserts that s is an error sentence that mentions word. */
#define ck_sentence(s, word)                                                                       \
    do {                                                                                           \
        const char *s_ = (s);                                                                      \
        ck_assert_msg(is_sentence(s_), "not an error sentence: '%s'", s_ ? s_ : "(null)");         \
        ck_assert_msg(strstr(s_, (word)) != NULL, "sentence '%s' does not mention '%s'", s_,       \
                      (word));                                                                     \
    } while (0)

/* Runs a suite; the exit status of a suite program. */
static inline int tl_run(Suite *s)
{
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int nf = srunner_ntests_failed(r);
    srunner_free(r);
    return nf ? 1 : 0;
}

#endif
