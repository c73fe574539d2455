/* SPDX-License-Identifier: BSD-3-Clause */
/* Lazy registration of host memory (NXL_DESC_AUTO_REGISTER, the agent
 * option auto_register), over UCX (shared memory) between two processes:
 * a target "T" that registers one region R (mapped by the test before the
 * fork, so that both know its address), and an initiator "I" that moves
 * bytes between R and memory it never registered, and checks them by
 * reading them back. The cases:
 *   flag_off   without the flag or the option: the old error, its sentence
 *   moves      WRITE and READ from and to unregistered memory (scattered
 *              descriptors, nxl_prep + nxl_xfer_make, the agent option);
 *              one entry per contiguous run, reused by the next lists
 *   lru        the size limit: idle entries go, least recently used first
 *   in_flight  an entry used by a transfer in flight is not evicted
 *   remap      memory unmapped (munmap, mmap MAP_FIXED over it, free())
 *              and mapped again at the same address with other bytes:
 *              the transfers move the new bytes; with UCX's memory
 *              events, and without them (NXL_AUTO_REGISTER_EVENTS=0)
 * A machine where UCX cannot be created prints "SKIP: <reason>" and passes. */
#include "testlib.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define RLEN (8u * MiB) /* the target's region */
#define BL (1u * MiB)   /* a buffer of the initiator */

static unsigned char *R; /* the same address in both processes */
static int t_quit;

static void t_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    (void)a, (void)from, (void)arg;
    if (len == 4 && !memcmp(msg, "quit", 4))
        t_quit = 1;
}

static void target_main(int wfd)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "T";
    c.listen_addr = "127.0.0.1";
    nxl_agent_t *a;
    if (nxl_agent_create(&c, &a) != NXL_SUCCESS)
        _exit(10);
    if (nxl_backend_create(a, "UCX", NULL, 0, NULL) != NXL_SUCCESS)
        _exit(11);
    nxl_desc_t d = {.addr = (uintptr_t)R, .len = RLEN};
    if (nxl_mem_register(a, NXL_DRAM, &d, 1, NULL) != NXL_SUCCESS)
        _exit(12);
    nxl_agent_on_notif(a, t_notif, NULL);
    uint16_t port = nxl_agent_listen_port(a);
    if (write(wfd, &port, sizeof(port)) != sizeof(port))
        _exit(13);
    close(wfd);
    uint64_t end = tl_now_ms() + 120000;
    while (!t_quit && tl_now_ms() < end && getppid() != 1)
        nxl_agent_run_once(a, 200);
    nxl_agent_destroy(a);
    _exit(t_quit ? 0 : 14);
}

static struct {
    nxl_agent_t *a;
    pid_t pid;
    uint16_t port;
    char skip[512];
} I;

/* "probe" can create UCX here? (else I.skip says why) */
static int have_ucx(void)
{
    nxl_agent_t *p = tl_agent_bare("probe", 0);
    int ok = nxl_backend_create(p, "UCX", NULL, 0, NULL) == NXL_SUCCESS;
    if (!ok)
        snprintf(I.skip, sizeof(I.skip), "UCX cannot be created here: %s",
                 nxl_agent_last_error(p));
    nxl_agent_destroy(p);
    return ok;
}

static void setup(void)
{
    I.skip[0] = 0;
    I.pid = 0;
    I.a = NULL;
    R = mmap(NULL, RLEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(R != MAP_FAILED);
    if (!have_ucx())
        return;
    I.pid = tl_fork_target(target_main, &I.port);
}

static void teardown(void)
{
    tl_stop_peer(&I.a, &I.pid, "T");
    munmap(R, RLEN);
}

#define SKIP_IF_NO_UCX()                                                                           \
    do {                                                                                           \
        if (I.skip[0]) {                                                                           \
            printf("SKIP: %s\n", I.skip);                                                          \
            fflush(stdout);                                                                        \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static int threaded;

/* the initiator: auto_register (the agent option) and its limit (0: default) */
static void initiator(int auto_register, size_t limit)
{
    nxl_agent_config_t c;
    tl_config(&c, "I", 0);
    c.auto_register = auto_register;
    c.auto_register_limit = limit;
    c.threaded = threaded;
    I.a = tl_agent_cfg(&c, 0);
    tl_backend(I.a, "UCX");
    nxl_future_t *f;
    ck_assert(nxl_md_fetch(I.a, "T", "127.0.0.1", I.port, NULL, NULL, &f) == NXL_SUCCESS);
    ck_assert_msg(nxl_future_wait(f, 10000) == NXL_SUCCESS, "fetch: %s", nxl_future_error(f));
    nxl_future_release(f);
    ck_assert(nxl_md_send(I.a, "127.0.0.1", I.port, NULL, NULL, &f) == NXL_SUCCESS);
    ck_assert_msg(nxl_future_wait(f, 10000) == NXL_SUCCESS, "send: %s", nxl_future_error(f));
    nxl_future_release(f);
}

static nxl_stats_t stats(void)
{
    nxl_stats_t s = {.size = sizeof(s)};
    ck_assert_int_eq(nxl_agent_stats(I.a, NULL, &s), NXL_SUCCESS);
    return s;
}

/* a transfer of len bytes at local p and R + roff, in nb descriptors
 * (len a multiple of nb), the local list typed ltype; made, or its status */
static nxl_status_t make(nxl_op_t op, int ltype, void *p, size_t roff, size_t len, unsigned nb,
                         nxl_xfer_t **x)
{
    nxl_desc_t ld[64], rd[64];
    ck_assert(nb <= 64 && len % nb == 0);
    size_t bl = len / nb;
    for (unsigned i = 0; i < nb; i++) {
        ld[i] = (nxl_desc_t){.addr = (uintptr_t)p + i * bl, .len = bl};
        rd[i] = (nxl_desc_t){.addr = (uintptr_t)R + roff + i * bl, .len = bl};
    }
    nxl_dlist_t l = {(nxl_mem_t)ltype, ld, nb}, r = {NXL_DRAM, rd, nb};
    return nxl_xfer_create(I.a, op, &l, &r, "T", NULL, x);
}

static void run(nxl_xfer_t *x)
{
    if (threaded) {
        nxl_future_t *f;
        ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, &f), NXL_SUCCESS);
        nxl_status_t st = nxl_future_wait(f, 20000);
        ck_assert_msg(st == NXL_SUCCESS, "%s: %s", nxl_status_name(st), nxl_future_error(f));
        nxl_future_release(f);
        return;
    }
    tl_res_t res;
    tl_post(I.a, x, &res);
    tl_wait_res(I.a, &res, 20000);
    ck_assert_msg(res.st == NXL_SUCCESS, "%s: %s", nxl_status_name(res.st), res.why);
}

/* made, posted, waited for, released */
static void xfer(nxl_op_t op, int ltype, void *p, size_t roff, size_t len, unsigned nb)
{
    nxl_xfer_t *x;
    nxl_status_t st = make(op, ltype, p, roff, len, nb, &x);
    ck_assert_msg(st == NXL_SUCCESS, "%s: %s", nxl_status_name(st), nxl_agent_last_error(I.a));
    run(x);
    nxl_xfer_release(x);
}

#define LAZY (NXL_DRAM | NXL_DESC_AUTO_REGISTER)

/* p's len bytes (pattern seed) reach R + roff: written, then read back
 * into q (also unregistered) and compared */
static void roundtrip(void *p, void *q, size_t roff, size_t len, uint32_t seed, unsigned nb)
{
    tl_fill(p, len, seed);
    memset(q, 0, len);
    xfer(NXL_WRITE, LAZY, p, roff, len, nb);
    xfer(NXL_READ, LAZY, q, roff, len, nb);
    long bad = tl_check(q, len, seed);
    ck_assert_msg(bad < 0, "byte %ld of %zu differs after the round trip", bad, len);
}

static void *map(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(p != MAP_FAILED);
    return p;
}

START_TEST(t_flag_off)
{
    SKIP_IF_NO_UCX();
    initiator(0, 0);
    unsigned char *p = malloc(BL);
    nxl_xfer_t *x = NULL;
    ck_assert_int_eq(make(NXL_WRITE, NXL_DRAM, p, 0, BL, 4, &x), NXL_ERR_NOT_FOUND);
    ck_assert_ptr_null(x);
    const char *e = nxl_agent_last_error(I.a);
    ck_sentence(e, "lies outside every DRAM region registered with agent 'I'; nothing was prepared");
    ck_assert_msg(strstr(e, "descriptor 0 "), "%s", e);
    nxl_prepped_t *pp = NULL;
    nxl_desc_t d = {.addr = (uintptr_t)p, .len = 100};
    ck_assert_int_eq(nxl_prep(I.a, NULL, NXL_DRAM, &d, 1, &pp), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(I.a), "lies outside every DRAM region");
    /* the flag is DRAM's only */
    ck_assert_int_eq(nxl_prep(I.a, NULL, (nxl_mem_t)(NXL_VRAM | NXL_DESC_AUTO_REGISTER), &d, 1,
                              &pp),
                     NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(I.a), "NXL_DESC_AUTO_REGISTER");
    nxl_stats_t s = stats();
    ck_assert_uint_eq(s.autoreg_registered, 0);
    ck_assert_uint_eq(s.autoreg_bytes, 0);
    free(p);
}
END_TEST

START_TEST(t_moves)
{
    SKIP_IF_NO_UCX();
    initiator(0, 0);
    unsigned char *p = malloc(4 * BL + 100), *q = malloc(4 * BL + 100);
    /* one descriptor, then 64 scattered over the same bytes (an odd start) */
    roundtrip(p, q, 0, BL, 1, 1);
    nxl_stats_t s = stats();
    ck_assert_uint_eq(s.autoreg_registered, 2); /* p's pages, q's pages */
    roundtrip(p + 37, q + 37, 3 * BL, 4 * BL, 2, 64);
    s = stats();
    /* each buffer's 64 descriptors: one run, one entry (the union with the
     * entry before) */
    ck_assert_uint_eq(s.autoreg_registered, 4);
    /* again: nothing to register */
    roundtrip(p + 37, q + 37, 2 * BL, 4 * BL, 3, 16);
    nxl_stats_t s2 = stats();
    ck_assert_uint_eq(s2.autoreg_registered, 4);
    ck_assert_uint_ge(s2.autoreg_reused, s.autoreg_reused + 2);
    ck_assert_uint_ge(s2.autoreg_bytes, 2 * (4 * BL + 37));
    /* a caller built before the counters: its size, nothing written past it */
    nxl_stats_t old;
    memset(&old, 0xab, sizeof(old));
    old.size = offsetof(nxl_stats_t, autoreg_registered);
    ck_assert_int_eq(nxl_agent_stats(I.a, NULL, &old), NXL_SUCCESS);
    ck_assert_uint_eq(old.size, offsetof(nxl_stats_t, autoreg_registered));
    ck_assert_uint_eq(old.autoreg_registered, 0xababababababababull);
    ck_assert_uint_eq(old.autoreg_bytes, 0xababababababababull);
    ck_assert_uint_eq(old.xfers_posted, s2.xfers_posted);
    /* nxl_prep with the flag, then nxl_xfer_make */
    nxl_desc_t ld = {.addr = (uintptr_t)p + 5, .len = BL}, rd = {.addr = (uintptr_t)R, .len = BL};
    nxl_prepped_t *lp, *rp;
    ck_assert_int_eq(nxl_prep(I.a, NULL, LAZY, &ld, 1, &lp), NXL_SUCCESS);
    ck_assert_int_eq(nxl_prep(I.a, "T", LAZY, &rd, 1, &rp), NXL_SUCCESS); /* ignored there */
    nxl_xfer_t *x;
    ck_assert_int_eq(nxl_xfer_make(I.a, NXL_WRITE, lp, NULL, rp, NULL, 1, NULL, &x), NXL_SUCCESS);
    tl_fill(p + 5, BL, 4);
    run(x);
    nxl_xfer_release(x);
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
    memset(q, 0, BL);
    xfer(NXL_READ, LAZY, q, 0, BL, 2);
    ck_assert(tl_check(q, BL, 4) < 0);
    free(p);
    free(q);
}
END_TEST

/* the agent option: lists without the flag register on first use */
START_TEST(t_option)
{
    SKIP_IF_NO_UCX();
    initiator(1, 0);
    unsigned char *p = malloc(BL), *q = malloc(BL);
    tl_fill(p, BL, 5);
    xfer(NXL_WRITE, NXL_DRAM, p, BL, BL, 8);
    xfer(NXL_READ, NXL_DRAM, q, BL, BL, 8);
    ck_assert(tl_check(q, BL, 5) < 0);
    ck_assert_uint_eq(stats().autoreg_registered, 2);
    free(p);
    free(q);
}
END_TEST

/* threaded mode: the application's thread prepares lists the reactor
 * registers (a foreign thread never calls a transport) */
START_TEST(t_threaded)
{
    SKIP_IF_NO_UCX();
    threaded = 1;
    initiator(0, 0);
    unsigned char *p = malloc(2 * BL), *q = malloc(2 * BL);
    roundtrip(p, q, 0, 2 * BL, 6, 16);
    roundtrip(p, q, BL, 2 * BL, 7, 32); /* the entries again, from this thread */
    nxl_desc_t d = {.addr = (uintptr_t)p + 1, .len = 100};
    nxl_prepped_t *lp;
    ck_assert_int_eq(nxl_prep(I.a, NULL, LAZY, &d, 1, &lp), NXL_SUCCESS);
    nxl_prepped_release(lp);
    nxl_stats_t s = stats();
    ck_assert_uint_eq(s.autoreg_registered, 2);
    ck_assert_uint_ge(s.autoreg_reused, 3);
    free(p);
    free(q);
    threaded = 0;
}
END_TEST

START_TEST(t_lru)
{
    SKIP_IF_NO_UCX();
    initiator(0, 3 * BL);
    unsigned char *b[5], *q = map(BL);
    for (int i = 0; i < 5; i++)
        b[i] = map(BL);
    /* q registered by the application: only b's entries count */
    tl_reg_dram(I.a, q, BL);
    for (int i = 0; i < 3; i++) {
        tl_fill(b[i], BL, 10 + (uint32_t)i);
        xfer(NXL_WRITE, LAZY, b[i], 0, BL, 1);
    }
    nxl_stats_t s = stats();
    ck_assert_uint_eq(s.autoreg_registered, 3);
    ck_assert_uint_eq(s.autoreg_evicted, 0);
    ck_assert_uint_eq(s.autoreg_bytes, 3 * BL);
    /* a fourth: b[0], the least recently used, goes */
    xfer(NXL_WRITE, LAZY, b[3], 0, BL, 1);
    s = stats();
    ck_assert_uint_eq(s.autoreg_evicted, 1);
    ck_assert_uint_eq(s.autoreg_bytes, 3 * BL);
    /* b[1] used again (no registration), then a fifth: b[2] goes, not b[1] */
    xfer(NXL_WRITE, LAZY, b[1], 0, BL, 1);
    ck_assert_uint_eq(stats().autoreg_registered, 4);
    xfer(NXL_WRITE, LAZY, b[4], 0, BL, 1);
    s = stats();
    ck_assert_uint_eq(s.autoreg_registered, 5);
    ck_assert_uint_eq(s.autoreg_evicted, 2);
    xfer(NXL_WRITE, LAZY, b[1], 0, BL, 1); /* still there */
    ck_assert_uint_eq(stats().autoreg_registered, 5);
    tl_fill(b[2], BL, 12);
    xfer(NXL_WRITE, LAZY, b[2], 0, BL, 1); /* registered again */
    s = stats();
    ck_assert_uint_eq(s.autoreg_registered, 6);
    ck_assert_uint_le(s.autoreg_bytes, 3 * BL);
    xfer(NXL_READ, NXL_DRAM, q, 0, BL, 1);
    ck_assert(tl_check(q, BL, 12) < 0);
    for (int i = 0; i < 5; i++)
        munmap(b[i], BL);
    munmap(q, BL);
}
END_TEST

START_TEST(t_in_flight)
{
    SKIP_IF_NO_UCX();
    initiator(0, 2 * BL);
    unsigned char *b[4], *q = map(BL);
    for (int i = 0; i < 4; i++)
        b[i] = map(BL);
    tl_reg_dram(I.a, q, BL);
    /* b[0]'s transfer in flight while three more push the cache past its limit */
    nxl_xfer_t *x0;
    tl_fill(b[0], BL, 20);
    ck_assert_int_eq(make(NXL_WRITE, LAZY, b[0], 0, BL, 1, &x0), NXL_SUCCESS);
    tl_res_t r0;
    tl_post(I.a, x0, &r0);
    ck_assert_int_eq(nxl_xfer_status(x0), NXL_IN_PROG);
    for (int i = 1; i < 4; i++) {
        nxl_xfer_t *x;
        tl_fill(b[i], BL, 20 + (uint32_t)i);
        ck_assert_int_eq(make(NXL_WRITE, LAZY, b[i], BL * (size_t)i, BL, 1, &x), NXL_SUCCESS);
        nxl_xfer_release(x); /* made, not posted: its entry is idle again */
    }
    nxl_stats_t s = stats();
    ck_assert_uint_eq(s.autoreg_registered, 4);
    ck_assert_uint_eq(s.autoreg_evicted, 2); /* b[1], b[2]; never b[0] */
    ck_assert_uint_eq(s.autoreg_bytes, 2 * BL);
    tl_wait_res(I.a, &r0, 20000);
    ck_assert_int_eq(r0.st, NXL_SUCCESS);
    xfer(NXL_READ, NXL_DRAM, q, 0, BL, 1);
    ck_assert(tl_check(q, BL, 20) < 0);
    /* and again while b[0]'s entry is held by x0 (not in flight): the
     * others go first */
    tl_fill(b[1], BL, 31);
    xfer(NXL_WRITE, LAZY, b[1], BL, BL, 1);
    s = stats();
    ck_assert_uint_eq(s.autoreg_evicted, 3); /* b[3] */
    tl_fill(b[0], BL, 30);
    run(x0);
    xfer(NXL_READ, NXL_DRAM, q, 0, BL, 1);
    ck_assert(tl_check(q, BL, 30) < 0);
    nxl_xfer_release(x0);
    for (int i = 0; i < 4; i++)
        munmap(b[i], BL);
    munmap(q, BL);
}
END_TEST

/* memory unmapped and mapped again at the same address with other bytes:
 * the transfers move the new bytes */
static void remap_cases(int events)
{
    if (!events)
        setenv("NXL_AUTO_REGISTER_EVENTS", "0", 1);
    initiator(0, 0);
    unsetenv("NXL_AUTO_REGISTER_EVENTS");
    unsigned char *q = map(BL);
    tl_reg_dram(I.a, q, BL);
    unsigned char *m = map(BL);
    tl_fill(m, BL, 40);
    xfer(NXL_WRITE, LAZY, m, 0, BL, 4);
    xfer(NXL_WRITE, LAZY, m, 0, BL, 4);
    nxl_stats_t s = stats();
    /* with memory events the idle entry is reused; without, registered anew */
    ck_assert_uint_eq(s.autoreg_registered, events ? 1 : 2);
    /* 1. munmap, then a new mapping at the same address */
    ck_assert_int_eq(munmap(m, BL), 0);
    unsigned char *m2 = mmap(m, BL, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(m2 != MAP_FAILED);
    if (m2 != m) {
        munmap(m2, BL);
        m2 = mmap(m, BL, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    }
    ck_assert_ptr_eq(m2, m);
    tl_fill(m, BL, 41);
    uint64_t inv = stats().autoreg_invalidated;
    xfer(NXL_WRITE, LAZY, m, 0, BL, 4);
    s = stats();
    ck_assert_uint_gt(s.autoreg_invalidated, inv);
    xfer(NXL_READ, NXL_DRAM, q, 0, BL, 1);
    ck_assert_msg(tl_check(q, BL, 41) < 0, "the WRITE moved the old mapping's bytes");
    /* 2. mmap MAP_FIXED straight over it, no munmap; READ into it */
    ck_assert_ptr_eq(mmap(m, BL, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), m);
    tl_fill(m, BL, 42);
    inv = stats().autoreg_invalidated;
    xfer(NXL_WRITE, LAZY, m, BL, BL, 1);
    ck_assert_uint_gt(stats().autoreg_invalidated, inv);
    memset(m, 0, BL);
    xfer(NXL_READ, LAZY, m, BL, BL, 2);
    ck_assert_msg(tl_check(m, BL, 42) < 0, "the READ did not reach the new mapping");
    munmap(m, BL);
    /* 3. free() and malloc() again (a chunk glibc maps: it unmaps it on free) */
    unsigned char *h = malloc(4 * BL);
    tl_fill(h, 4 * BL, 43);
    xfer(NXL_WRITE, LAZY, h, 0, 4 * BL, 8);
    free(h);
    unsigned char *h2 = malloc(4 * BL);
    tl_fill(h2, 4 * BL, 44);
    inv = stats().autoreg_invalidated;
    xfer(NXL_WRITE, LAZY, h2, 0, 4 * BL, 8);
    ck_assert_uint_gt(stats().autoreg_invalidated, inv); /* the old entry, dropped */
    xfer(NXL_READ, NXL_DRAM, q, 3 * BL, BL, 1);
    unsigned char *want = malloc(4 * BL);
    tl_fill(want, 4 * BL, 44);
    ck_assert_msg(!memcmp(q, want + 3 * BL, BL), "after free() and malloc(): old bytes");
    free(want);
    free(h2);
    munmap(q, BL);
}

START_TEST(t_remap_events)
{
    SKIP_IF_NO_UCX();
    remap_cases(1);
}
END_TEST

START_TEST(t_remap_no_events)
{
    SKIP_IF_NO_UCX();
    remap_cases(0);
}
END_TEST

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("lazyreg");
    TL_TCASE(s, "ucx_shm", 60, setup, teardown, t_flag_off, t_moves, t_option, t_lru,
             t_in_flight, t_remap_events, t_remap_no_events, t_threaded);
    return tl_run(s);
}
