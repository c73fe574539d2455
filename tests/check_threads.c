/* SPDX-License-Identifier: BSD-3-Clause */
/* Threaded mode (nxl_agent_config_t.threaded): calls from many threads
 * against one agent, each callback exactly once, every notification
 * arriving; nxl_future_wait() from other threads; destroy from another
 * thread while transfers are in flight; the API called from callbacks; the
 * default mode unchanged; a target process killed under traffic; a
 * reactor that never sleeps. Transfers go over UCX (shared memory: both
 * agents live in this process); the prep-to-release cycle from eight
 * threads also into a POSIX file and over LIBFABRIC tcp;ofi_rxm. Run under
 * ThreadSanitizer by tests/tsan. */
#include "testlib.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NTHREADS 8
#define WINDOW 4    /* transfers per thread, posted round-robin */
#define BLK 256

/* iterations per thread: 10,000 unless NXL_THREADS_ITERS says otherwise */
static int iters(void)
{
    const char *e = getenv("NXL_THREADS_ITERS");
    int n = e ? atoi(e) : 0;
    return n > 0 ? n : 10000;
}

/* a threaded agent with a UCX backend; log: its log callback (NULL: the
 * default), logging at lvl */
/* A threaded agent without a transport */
static nxl_agent_t *threaded_bare(const char *name)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = name;
    c.threaded = 1;
    return tl_agent_cfg(&c, 0);
}

static nxl_agent_t *threaded_agent_log(const char *name, nxl_log_cb log, nxl_log_level_t lvl)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = name;
    c.threaded = 1;
    if (log) {
        c.log_cb = log;
        c.log_level = lvl;
    }
    nxl_agent_t *a = NULL;
    nxl_status_t st = nxl_agent_create(&c, &a);
    ck_assert_msg(st == NXL_SUCCESS, "agent %s: %s", name, nxl_agent_last_error(NULL));
    st = nxl_backend_create(a, "UCX", NULL, 0, NULL);
    ck_assert_msg(st == NXL_SUCCESS, "UCX backend: %s", nxl_agent_last_error(a));
    return a;
}

static nxl_agent_t *threaded_agent(const char *name)
{
    return threaded_agent_log(name, NULL, NXL_LOG_NONE);
}

/* each agent loads the other's metadata */
static void introduce(nxl_agent_t *a, nxl_agent_t *b)
{
    tl_learn(b, a);
    tl_learn(a, b);
}

/* a WRITE of len bytes from src to peer's dst, one descriptor each side */
static nxl_status_t write_xfer(nxl_agent_t *a, const char *peer, uintptr_t src, uintptr_t dst,
                               size_t len, nxl_xfer_t **x)
{
    return tl_xfer1(a, NXL_WRITE, src, dst, len, peer, NULL, x);
}

static void *mem(nxl_agent_t *a, size_t len)
{
    void *p = NULL;
    ck_assert_msg(nxl_mem_alloc(a, NXL_DRAM, len, 0, &p) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    return p;
}

static int load_int(const int *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void add_int(int *p) { __atomic_fetch_add(p, 1, __ATOMIC_ACQ_REL); }

/* The first outcome a test did not expect, for its failure's message
 * (reset by the tests that use it: the killed-peer ones). */
static char unexpected_first[512];
static int unexpected_set;

static void unexpected_reset(void)
{
    unexpected_first[0] = 0;
    __atomic_store_n(&unexpected_set, 0, __ATOMIC_RELEASE);
}

/* An outcome @p test did not expect, of thread @p k (-1: none): counted in
 * *count, said on stderr with its status and sentence, and kept when it is
 * the first. */
static void unexpected(int *count, const char *test, int k, const char *what, nxl_status_t st,
                       const char *sentence)
{
    char line[512];
    char who[32] = "";
    if (k >= 0)
        snprintf(who, sizeof(who), "thread %d: ", k);
    snprintf(line, sizeof(line), "%s: %s%s: %s (%s)", test, who, what, nxl_status_name(st),
             sentence ? sentence : "NULL");
    add_int(count);
    fprintf(stderr, "%s\n", line);
    if (!__atomic_exchange_n(&unexpected_set, 1, __ATOMIC_ACQ_REL))
        memcpy(unexpected_first, line, sizeof(line));
}

/* waits (sleeping) until *p >= target; 1 when reached */
static int wait_count(const int *p, int target, int timeout_ms)
{
    uint64_t end = tl_now_ms() + (uint64_t)timeout_ms;
    while (load_int(p) < target && tl_now_ms() < end)
        usleep(1000);
    return load_int(p) >= target;
}

/* starts n threads of fn (each given its index) into th, then waits until
 * *ok >= want and every thread made its transfers (*ready >= n; 20 s at
 * most): the transfers flow, else the test fails. A thread that made its
 * transfers only once its peer was lost would have them refused
 * (NXL_ERR_NOT_FOUND: nothing is known of the peer any more), which is
 * not what these tests are about. */
static void start_flowing(pthread_t *th, int n, void *(*fn)(void *), const int *ok,
                          const int *bad, const int *ready, int want)
{
    for (int k = 0; k < n; k++)
        pthread_create(&th[k], NULL, fn, (void *)(intptr_t)k);
    ck_assert_msg(wait_count(ok, want, 20000) && wait_count(ready, n, 20000),
                  "transfers did not flow: %d ok, %d bad, %d of %d threads made their "
                  "transfers", load_int(ok), load_int(bad), load_int(ready), n);
}

/* ---------------------------------------------------------------- many threads */

static struct {
    nxl_agent_t *I, *T;
    unsigned char *ibuf, *tbuf;
    int n;
    /* [thread][iteration], each written by a callback, exactly once */
    unsigned char *post_cb, *notif_cb, *notif_seen;
    int posts_done, notifs_done, notifs_seen, bad;
    pthread_t reactor_I, reactor_T;
    int reactor_I_set, reactor_T_set;
} M;

static void note_reactor(pthread_t *slot, int *set)
{
    if (!__atomic_exchange_n(set, 1, __ATOMIC_ACQ_REL))
        *slot = pthread_self();
}

static void m_post_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    size_t k = (size_t)(uintptr_t)arg;
    note_reactor(&M.reactor_I, &M.reactor_I_set);
    if (st != NXL_SUCCESS || __atomic_fetch_add(&M.post_cb[k], 1, __ATOMIC_RELAXED) != 0)
        add_int(&M.bad);
    add_int(&M.posts_done);
}

static void m_notif_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    size_t k = (size_t)(uintptr_t)arg;
    if (st != NXL_SUCCESS || __atomic_fetch_add(&M.notif_cb[k], 1, __ATOMIC_RELAXED) != 0)
        add_int(&M.bad);
    add_int(&M.notifs_done);
}

static void m_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    unsigned t, i;
    char s[32];
    note_reactor(&M.reactor_T, &M.reactor_T_set);
    snprintf(s, sizeof(s), "%.*s", (int)(len < sizeof(s) - 1 ? len : sizeof(s) - 1),
             (const char *)msg);
    if (strcmp(from, "I") || sscanf(s, "n %u %u", &t, &i) != 2 || t >= NTHREADS ||
        i >= (unsigned)M.n || __atomic_fetch_add(&M.notif_seen[t * M.n + i], 1,
                                                 __ATOMIC_RELAXED) != 0)
        add_int(&M.bad);
    add_int(&M.notifs_seen);
}

static void *m_thread(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    nxl_xfer_t *x[WINDOW];
    nxl_future_t *f[WINDOW] = {0};
    for (int w = 0; w < WINDOW; w++) {
        size_t off = ((size_t)t * WINDOW + w) * BLK;
        if (write_xfer(M.I, "T", (uintptr_t)M.ibuf + off, (uintptr_t)M.tbuf + off, BLK, &x[w]) !=
            NXL_SUCCESS) {
            fprintf(stderr, "thread %u: nxl_xfer_create: %s\n", t, nxl_agent_last_error(M.I));
            add_int(&M.bad);
            return NULL;
        }
    }
    for (int i = 0; i < M.n; i++) {
        int w = i % WINDOW;
        size_t k = (size_t)t * M.n + i;
        if (f[w]) {
            /* the window is full: wait for this slot's previous post */
            nxl_status_t st = nxl_future_wait(f[w], 20000);
            if (st != NXL_SUCCESS) {
                fprintf(stderr, "thread %u: wait: %s\n", t, nxl_status_name(st));
                add_int(&M.bad);
            }
            nxl_future_release(f[w]);
        }
        nxl_status_t st = nxl_xfer_post(x[w], m_post_done, (void *)(uintptr_t)k, &f[w]);
        if (st != NXL_SUCCESS) {
            fprintf(stderr, "thread %u: post %d: %s: %s\n", t, i, nxl_status_name(st),
                    nxl_agent_last_error(M.I));
            add_int(&M.bad);
            f[w] = NULL;
        }
        char msg[32];
        int len = snprintf(msg, sizeof(msg), "n %u %d", t, i);
        st = nxl_notif_send(M.I, "T", msg, (size_t)len, m_notif_done, (void *)(uintptr_t)k, NULL);
        if (st != NXL_SUCCESS) {
            fprintf(stderr, "thread %u: notif %d: %s: %s\n", t, i, nxl_status_name(st),
                    nxl_agent_last_error(M.I));
            add_int(&M.bad);
        }
    }
    for (int w = 0; w < WINDOW; w++) {
        if (f[w]) {
            if (nxl_future_wait(f[w], 20000) != NXL_SUCCESS)
                add_int(&M.bad);
            nxl_future_release(f[w]);
        }
        nxl_xfer_release(x[w]);
    }
    return NULL;
}

START_TEST(many_threads)
{
    memset(&M, 0, sizeof(M));
    M.n = iters();
    M.I = threaded_agent("I");
    M.T = threaded_agent("T");
    size_t len = (size_t)NTHREADS * WINDOW * BLK;
    M.ibuf = mem(M.I, len);
    M.tbuf = mem(M.T, len);
    for (size_t i = 0; i < len; i++)
        M.ibuf[i] = (unsigned char)(i / BLK + 1);
    memset(M.tbuf, 0, len);
    introduce(M.I, M.T);
    size_t total = (size_t)NTHREADS * M.n;
    M.post_cb = calloc(total, 1);
    M.notif_cb = calloc(total, 1);
    M.notif_seen = calloc(total, 1);
    /* after the arrays: the call hands them to T's reactor thread (the
     * notifications themselves come through UCX's shared memory, which
     * orders nothing that ThreadSanitizer can see) */
    nxl_agent_on_notif(M.T, m_notif, NULL);
    pthread_t th[NTHREADS];
    uint64_t t0 = tl_now_ms();
    for (int t = 0; t < NTHREADS; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL, m_thread, (void *)(uintptr_t)t), 0);
    for (int t = 0; t < NTHREADS; t++)
        pthread_join(th[t], NULL);
    ck_assert_msg(wait_count(&M.posts_done, (int)total, 30000), "%d of %zu post callbacks",
                  load_int(&M.posts_done), total);
    ck_assert_msg(wait_count(&M.notifs_done, (int)total, 30000), "%d of %zu send callbacks",
                  load_int(&M.notifs_done), total);
    ck_assert_msg(wait_count(&M.notifs_seen, (int)total, 30000),
                  "%d of %zu notifications arrived", load_int(&M.notifs_seen), total);
    fprintf(stderr, "many_threads: %d threads x %d posts + notification sends: %llu ms\n",
            NTHREADS, M.n, (unsigned long long)(tl_now_ms() - t0));
    usleep(20000); /* anything more (a duplicate) would arrive now */
    ck_assert_int_eq(load_int(&M.bad), 0);
    ck_assert_int_eq(load_int(&M.posts_done), (int)total);
    ck_assert_int_eq(load_int(&M.notifs_done), (int)total);
    ck_assert_int_eq(load_int(&M.notifs_seen), (int)total);
    for (size_t k = 0; k < total; k++) {
        ck_assert_msg(M.post_cb[k] == 1, "post %zu: %d callbacks", k, M.post_cb[k]);
        ck_assert_msg(M.notif_cb[k] == 1, "send %zu: %d callbacks", k, M.notif_cb[k]);
        ck_assert_msg(M.notif_seen[k] == 1, "notification %zu arrived %d times", k,
                      M.notif_seen[k]);
    }
    /* every block landed; callbacks ran on the reactor threads */
    ck_assert_int_eq(memcmp(M.ibuf, M.tbuf, len), 0);
    ck_assert(M.reactor_I_set && M.reactor_T_set);
    ck_assert(!pthread_equal(M.reactor_I, pthread_self()));
    ck_assert(!pthread_equal(M.reactor_I, M.reactor_T));
    nxl_stats_t s = {.size = sizeof(s)};
    ck_assert_int_eq(nxl_agent_stats(M.I, NULL, &s), NXL_SUCCESS);
    ck_assert_uint_eq(s.xfers_posted, total);
    ck_assert_uint_eq(s.xfers_succeeded, total);
    ck_assert_uint_eq(s.notifs_sent, total);
    ck_assert_int_eq(nxl_agent_stats(M.T, NULL, &s), NXL_SUCCESS);
    ck_assert_uint_eq(s.notifs_received, total);
    nxl_agent_destroy(M.I);
    nxl_agent_destroy(M.T);
    free(M.post_cb);
    free(M.notif_cb);
    free(M.notif_seen);
}
END_TEST

/* ------------------------------------------------------ the prep-to-release cycle
 *
 * Eight threads each run, one descriptor at a time: nxl_prep() of a local
 * block and of a remote one, nxl_xfer_make(), nxl_xfer_post(),
 * nxl_future_wait(), the releases — the cycle a foreign thread mostly runs
 * itself under the table lock (lib/engine/mt/act.c) — while the main thread keeps
 * changing the tables those read: it allocates and frees a region of the
 * initiator (a new self view each time, the loopback preps go to the
 * reactor) and, with a target agent, one of the target's (a revocation
 * arrives at the initiator). Every few cycles a thread prepares a
 * descriptor outside every region: NXL_ERR_NOT_FOUND, its sentence on that
 * thread. Every post's callback once, on the reactor thread; every
 * notification once; the last block of each thread landed. Over UCX shared
 * memory, into a POSIX file (loopback), and over LIBFABRIC tcp;ofi_rxm. */

#define CYC_BLK 4096

static struct {
    nxl_agent_t *I, *T;     /* T: NULL for a loopback (POSIX) */
    const char *remote;     /* the name prepared against */
    nxl_mem_t rtype;
    uint64_t rdev;
    uintptr_t rbase;        /* remote block k at rbase + k * CYC_BLK */
    unsigned char *ibuf;
    bool notif;
    int n;
    unsigned char *post_cb, *notif_seen;
    int posts_done, notifs_seen, bad, refused, stop;
    pthread_t reactor_I;
    int reactor_I_set;
} Y;

static void y_post_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    size_t k = (size_t)(uintptr_t)arg;
    note_reactor(&Y.reactor_I, &Y.reactor_I_set);
    if (st != NXL_SUCCESS || __atomic_fetch_add(&Y.post_cb[k], 1, __ATOMIC_RELAXED) != 0) {
        fprintf(stderr, "cycle: post %zu: %s (%s)\n", k, nxl_status_name(st), nxl_future_error(f));
        add_int(&Y.bad);
    }
    add_int(&Y.posts_done);
}

static void y_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    unsigned t, i;
    char s[32];
    snprintf(s, sizeof(s), "%.*s", (int)(len < sizeof(s) - 1 ? len : sizeof(s) - 1),
             (const char *)msg);
    if (strcmp(from, "I") || sscanf(s, "c %u %u", &t, &i) != 2 || t >= NTHREADS ||
        i >= (unsigned)Y.n ||
        __atomic_fetch_add(&Y.notif_seen[t * Y.n + i], 1, __ATOMIC_RELAXED) != 0)
        add_int(&Y.bad);
    add_int(&Y.notifs_seen);
}

static unsigned char y_byte(unsigned t, int i) { return (unsigned char)(t * 37 + (unsigned)i * 7 + 1); }

static void *y_thread(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    unsigned char *blk = Y.ibuf + (size_t)t * CYC_BLK;
    nxl_desc_t ld = {.addr = (uintptr_t)blk, .len = CYC_BLK};
    nxl_desc_t rd = {.addr = Y.rbase + (uintptr_t)t * CYC_BLK, .len = CYC_BLK, .dev_id = Y.rdev};
    nxl_desc_t out = {.addr = Y.rbase + (uintptr_t)(NTHREADS + 8) * CYC_BLK * 64, .len = CYC_BLK,
                      .dev_id = Y.rdev};
    for (int i = 0; i < Y.n; i++) {
        size_t k = (size_t)t * Y.n + i;
        memset(blk, y_byte(t, i), CYC_BLK);
        nxl_prepped_t *lp = NULL, *rp = NULL, *bad = NULL;
        nxl_xfer_t *x = NULL;
        nxl_future_t *f = NULL;
        if (i % 16 == 5) {
            /* refused on this thread, with its sentence here */
            nxl_status_t st = nxl_prep(Y.I, Y.remote, Y.rtype, &out, 1, &bad);
            const char *e = nxl_agent_last_error(Y.I);
            if (st != NXL_ERR_NOT_FOUND || bad || !strstr(e, "outside every")) {
                fprintf(stderr, "cycle: thread %u: a descriptor outside every region: %s, '%s'\n",
                        t, nxl_status_name(st), e);
                add_int(&Y.bad);
            } else {
                add_int(&Y.refused);
            }
        }
        nxl_xfer_opts_t o, *op = NULL;
        char msg[32];
        if (Y.notif) {
            nxl_xfer_opts_init(&o);
            int len = snprintf(msg, sizeof(msg), "c %u %d", t, i);
            o.notif = msg;
            o.notif_len = (size_t)len;
            op = &o;
        }
        nxl_status_t st;
        if ((st = nxl_prep(Y.I, NULL, NXL_DRAM, &ld, 1, &lp)) != NXL_SUCCESS ||
            (st = nxl_prep(Y.I, Y.remote, Y.rtype, &rd, 1, &rp)) != NXL_SUCCESS ||
            (st = nxl_xfer_make(Y.I, NXL_WRITE, lp, NULL, rp, NULL, 1, op, &x)) != NXL_SUCCESS ||
            (st = nxl_xfer_post(x, y_post_done, (void *)(uintptr_t)k, &f)) != NXL_SUCCESS) {
            fprintf(stderr, "cycle: thread %u, cycle %d: %s: %s\n", t, i, nxl_status_name(st),
                    nxl_agent_last_error(Y.I));
            add_int(&Y.bad);
        } else if ((st = nxl_future_wait(f, 20000)) != NXL_SUCCESS) {
            fprintf(stderr, "cycle: thread %u, cycle %d: wait: %s\n", t, i, nxl_status_name(st));
            add_int(&Y.bad);
        }
        /* settled: the transfer is idle, its release stays on this thread */
        if (f && nxl_xfer_status(x) == NXL_IN_PROG) {
            fprintf(stderr, "cycle: thread %u, cycle %d: in flight after its wait\n", t, i);
            add_int(&Y.bad);
        }
        nxl_future_release(f);
        nxl_xfer_release(x);
        nxl_prepped_release(lp);
        nxl_prepped_release(rp);
    }
    return NULL;
}

/* the main thread, meanwhile: the tables change under the threads */
static void y_churn(void)
{
    while (!load_int(&Y.stop)) {
        void *p = NULL;
        if (nxl_mem_alloc(Y.I, NXL_DRAM, 8192, 0, &p) != NXL_SUCCESS ||
            nxl_mem_free(Y.I, p) != NXL_SUCCESS)
            add_int(&Y.bad);
        if (Y.T && (nxl_mem_alloc(Y.T, NXL_DRAM, 8192, 0, &p) != NXL_SUCCESS ||
                    nxl_mem_free(Y.T, p) != NXL_SUCCESS))
            add_int(&Y.bad);
        usleep(2000);
    }
}

static void *y_joiner(void *arg)
{
    pthread_t *th = arg;
    for (int t = 0; t < NTHREADS; t++)
        pthread_join(th[t], NULL);
    __atomic_store_n(&Y.stop, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* runs the cycle from NTHREADS threads against Y.I, then checks; reads the
 * remote blocks back through rb (NTHREADS * CYC_BLK bytes) */
static void cycle_run(const char *what, void (*read_back)(unsigned char *rb))
{
    Y.n = iters() / 5;
    size_t total = (size_t)NTHREADS * Y.n;
    Y.post_cb = calloc(total, 1);
    Y.notif_seen = calloc(total, 1);
    if (Y.notif)
        nxl_agent_on_notif(Y.T, y_notif, NULL);
    pthread_t th[NTHREADS], j;
    uint64_t t0 = tl_now_ms();
    for (int t = 0; t < NTHREADS; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL, y_thread, (void *)(uintptr_t)t), 0);
    ck_assert_int_eq(pthread_create(&j, NULL, y_joiner, th), 0);
    y_churn();
    pthread_join(j, NULL);
    ck_assert_msg(wait_count(&Y.posts_done, (int)total, 30000), "%d of %zu post callbacks",
                  load_int(&Y.posts_done), total);
    if (Y.notif)
        ck_assert_msg(wait_count(&Y.notifs_seen, (int)total, 30000),
                      "%d of %zu notifications arrived", load_int(&Y.notifs_seen), total);
    fprintf(stderr, "cycle %s: %d threads x %d prep/make/post/wait/release cycles: %llu ms\n",
            what, NTHREADS, Y.n, (unsigned long long)(tl_now_ms() - t0));
    usleep(20000); /* a duplicate would arrive now */
    ck_assert_int_eq(load_int(&Y.bad), 0);
    ck_assert_int_eq(load_int(&Y.posts_done), (int)total);
    ck_assert_int_eq(load_int(&Y.refused), NTHREADS * ((Y.n + 10) / 16));
    for (size_t k = 0; k < total; k++) {
        ck_assert_msg(Y.post_cb[k] == 1, "post %zu: %d callbacks", k, Y.post_cb[k]);
        if (Y.notif)
            ck_assert_msg(Y.notif_seen[k] == 1, "notification %zu arrived %d times", k,
                          Y.notif_seen[k]);
    }
    ck_assert(Y.reactor_I_set && !pthread_equal(Y.reactor_I, pthread_self()));
    nxl_stats_t s = {.size = sizeof(s)};
    ck_assert_int_eq(nxl_agent_stats(Y.I, NULL, &s), NXL_SUCCESS);
    ck_assert_uint_eq(s.xfers_posted, total);
    ck_assert_uint_eq(s.xfers_succeeded, total);
    unsigned char *rb = calloc(NTHREADS, CYC_BLK);
    read_back(rb);
    for (unsigned t = 0; t < NTHREADS; t++)
        for (size_t b = 0; b < CYC_BLK; b++)
            ck_assert_msg(rb[t * CYC_BLK + b] == y_byte(t, Y.n - 1),
                          "%s: thread %u's last block: byte %zu is %u, not %u", what, t, b,
                          rb[t * CYC_BLK + b], y_byte(t, Y.n - 1));
    free(rb);
    /* nothing left over: every prepared list and transfer was released */
    free(Y.post_cb);
    free(Y.notif_seen);
}

static unsigned char *y_tbuf;
static void y_read_mem(unsigned char *rb) { memcpy(rb, y_tbuf, (size_t)NTHREADS * CYC_BLK); }

/* the cycle between Y.I and Y.T, memory to memory with notifications;
 * the agents destroyed after */
static void cycle_mem(const char *what)
{
    Y.ibuf = mem(Y.I, (size_t)NTHREADS * CYC_BLK);
    y_tbuf = mem(Y.T, (size_t)NTHREADS * CYC_BLK);
    introduce(Y.I, Y.T);
    Y.remote = "T";
    Y.rtype = NXL_DRAM;
    Y.rbase = (uintptr_t)y_tbuf;
    Y.notif = true;
    cycle_run(what, y_read_mem);
    nxl_agent_destroy(Y.I);
    nxl_agent_destroy(Y.T);
}

START_TEST(cycle_ucx)
{
    memset(&Y, 0, sizeof(Y));
    Y.I = threaded_agent("I");
    Y.T = threaded_agent("T");
    cycle_mem("UCX");
}
END_TEST

static char y_path[64];
static void y_read_file(unsigned char *rb)
{
    int fd = open(y_path, O_RDONLY);
    ck_assert(fd >= 0);
    ck_assert_int_eq(pread(fd, rb, (size_t)NTHREADS * CYC_BLK, 0), (ssize_t)NTHREADS * CYC_BLK);
    close(fd);
}

START_TEST(cycle_posix)
{
    memset(&Y, 0, sizeof(Y));
    Y.I = threaded_bare("I");
    tl_backend(Y.I, "POSIX");
    snprintf(y_path, sizeof(y_path), "/tmp/nxl-threads-XXXXXX");
    int fd = mkstemp(y_path);
    ck_assert(fd >= 0);
    close(fd);
    char meta[128];
    snprintf(meta, sizeof(meta), "path=%s;mode=create", y_path);
    nxl_desc_t d = {.addr = 0, .len = (size_t)NTHREADS * CYC_BLK, .dev_id = 7, .meta = meta,
                    .meta_len = strlen(meta)};
    ck_assert_msg(nxl_mem_register(Y.I, NXL_FILE, &d, 1, NULL) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(Y.I));
    Y.ibuf = mem(Y.I, (size_t)NTHREADS * CYC_BLK);
    Y.remote = "I"; /* loopback: the agent's own file */
    Y.rtype = NXL_FILE;
    Y.rdev = 7;
    Y.rbase = 0;
    cycle_run("POSIX", y_read_file);
    ck_assert_int_eq(nxl_mem_deregister(Y.I, NXL_FILE, &d, 1), NXL_SUCCESS);
    nxl_agent_destroy(Y.I);
    unlink(y_path);
}
END_TEST

START_TEST(cycle_libfabric)
{
    memset(&Y, 0, sizeof(Y));
    nxl_agent_t *ag[2];
    const char *names[2] = {"I", "T"};
    nxl_param_t p = {"provider", "tcp;ofi_rxm"};
    for (int k = 0; k < 2; k++) {
        ag[k] = threaded_bare(names[k]);
        nxl_status_t st = nxl_backend_create(ag[k], "LIBFABRIC", &p, 1, NULL);
        if (st == NXL_ERR_NOT_SUPPORTED || (st != NXL_SUCCESS && k == 0 &&
                                            strstr(nxl_agent_last_error(ag[k]), "provider"))) {
            printf("SKIP: cycle_libfabric: %s\n", nxl_agent_last_error(ag[k]));
            for (int j = 0; j <= k; j++)
                nxl_agent_destroy(ag[j]);
            return;
        }
        ck_assert_msg(st == NXL_SUCCESS, "LIBFABRIC: %s", nxl_agent_last_error(ag[k]));
    }
    Y.I = ag[0];
    Y.T = ag[1];
    cycle_mem("LIBFABRIC tcp;ofi_rxm");
}
END_TEST

/* ------------------------------------------------------------ foreign wait */

static int w_calls;
static pthread_t w_cb_thread;
static void w_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    w_cb_thread = pthread_self();
    add_int(&w_calls);
}

/* a TCP listener that accepts (the kernel does) and never answers */
static int silent_listener(uint16_t *port)
{
    return tl_loopback_socket(8, port);
}

typedef struct {
    nxl_future_t *f;
    int timeout_ms;
    nxl_status_t st;
} waitarg_t;

static void *waiter(void *arg)
{
    waitarg_t *w = arg;
    w->st = nxl_future_wait(w->f, w->timeout_ms);
    return NULL;
}

START_TEST(foreign_wait)
{
    nxl_agent_t *I = threaded_agent("I"), *T = threaded_agent("T");
    unsigned char *ib = mem(I, 1 << 20), *tb = mem(T, 1 << 20);
    tl_fill(ib, 1 << 20, 7);
    introduce(I, T);
    nxl_xfer_t *x;
    ck_assert_int_eq(write_xfer(I, "T", (uintptr_t)ib, (uintptr_t)tb, 1 << 20, &x), NXL_SUCCESS);

    /* four threads and this one wait for one transfer: all see it settle,
     * after its callback ran (on the reactor thread) */
    nxl_future_t *f;
    w_calls = 0;
    ck_assert_int_eq(nxl_xfer_post(x, w_done, NULL, &f), NXL_SUCCESS);
    waitarg_t wa[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        wa[i] = (waitarg_t){f, 10000, NXL_IN_PROG};
        pthread_create(&th[i], NULL, waiter, &wa[i]);
    }
    ck_assert_int_eq(nxl_future_wait(f, 10000), NXL_SUCCESS);
    ck_assert_int_eq(load_int(&w_calls), 1);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(wa[i].st, NXL_SUCCESS);
    }
    ck_assert(!pthread_equal(w_cb_thread, pthread_self()));
    ck_assert_int_eq(nxl_future_status(f), NXL_SUCCESS);
    ck_assert_str_eq(nxl_future_error(f), "");
    ck_assert_int_eq(nxl_xfer_status(x), NXL_SUCCESS);
    /* waiting again on a settled future returns at once */
    ck_assert_int_eq(nxl_future_wait(f, 0), NXL_SUCCESS);
    nxl_future_release(f);
    ck_assert_int_eq(tl_check(tb, 1 << 20, 7), -1);

    /* a future that does not complete: the wait times out, then a cancel
     * from another thread completes it with CANCELED, once */
    uint16_t port;
    int lfd = silent_listener(&port);
    w_calls = 0;
    ck_assert_int_eq(nxl_md_fetch(I, NULL, "127.0.0.1", port, w_done, NULL, &f), NXL_SUCCESS);
    uint64_t t0 = tl_now_ms();
    ck_assert_int_eq(nxl_future_wait(f, 100), NXL_IN_PROG);
    ck_assert_uint_ge(tl_now_ms() - t0, 90);
    ck_assert_int_eq(nxl_future_status(f), NXL_IN_PROG);
    waitarg_t wl = {f, 10000, NXL_IN_PROG};
    pthread_t tl;
    pthread_create(&tl, NULL, waiter, &wl);
    usleep(50000);
    nxl_future_cancel(f);
    pthread_join(tl, NULL);
    ck_assert_int_eq(wl.st, NXL_ERR_CANCELED);
    ck_assert_int_eq(load_int(&w_calls), 1);
    ck_assert_int_eq(nxl_future_status(f), NXL_ERR_CANCELED);
    ck_assert(is_sentence(nxl_future_error(f)));
    nxl_future_release(f);
    close(lfd);

    /* a deadline set from this thread (not the reactor's): the request
     * completes with NXL_ERR_TIMEOUT at it, once; a kind it does not take
     * is refused with a sentence for this thread */
    lfd = silent_listener(&port);
    w_calls = 0;
    ck_assert_int_eq(nxl_md_fetch(I, NULL, "127.0.0.1", port, w_done, NULL, &f), NXL_SUCCESS);
    t0 = tl_now_ms();
    ck_assert_int_eq(nxl_future_set_deadline(f, 200), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_wait(f, 5000), NXL_ERR_TIMEOUT);
    uint64_t took = tl_now_ms() - t0;
    ck_assert_msg(took >= 190 && took <= 700, "TIMEOUT after %llu ms", (unsigned long long)took);
    ck_assert_int_eq(load_int(&w_calls), 1);
    ck_sentence(nxl_future_error(f), "127.0.0.1");
    ck_assert_int_eq(nxl_future_set_deadline(f, 100), NXL_SUCCESS); /* complete */
    ck_assert_int_eq(nxl_future_set_deadline(NULL, 100), NXL_ERR_INVALID_PARAM);
    nxl_future_release(f);
    nxl_future_t *g, *all;
    ck_assert_int_eq(nxl_md_fetch(I, NULL, "127.0.0.1", port, NULL, NULL, &g), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_all(I, &g, 1, NULL, NULL, &all), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_set_deadline(all, 100), NXL_ERR_NOT_SUPPORTED);
    ck_sentence(nxl_agent_last_error(I), "nxl_future_set_deadline");
    nxl_future_cancel(g);
    ck_assert_int_eq(nxl_future_wait(all, 5000), NXL_ERR_CANCELED);
    nxl_future_release(all);
    nxl_future_release(g);
    close(lfd);

    /* errors reach the calling thread's nxl_agent_last_error() */
    nxl_desc_t bad = {.addr = 16, .len = 16};
    nxl_prepped_t *p;
    ck_assert_int_eq(nxl_prep(I, NULL, NXL_DRAM, &bad, 1, &p), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(I), "nxl_prep");
    ck_assert_int_eq(nxl_agent_run_once(I, 0), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(I), "threaded");
    ck_assert_int_eq(nxl_agent_run(I), NXL_ERR_NOT_ALLOWED);
    nxl_agent_stop(I); /* nothing */
    /* a future held past its agent's destroy is still the caller's (rule 4),
     * one completed and one canceled by the teardown */
    nxl_future_t *kept, *pending;
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, &kept), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_wait(kept, 10000), NXL_SUCCESS);
    lfd = silent_listener(&port);
    ck_assert_int_eq(nxl_md_fetch(I, NULL, "127.0.0.1", port, NULL, NULL, &pending), NXL_SUCCESS);
    nxl_xfer_release(x);
    nxl_agent_destroy(I);
    ck_assert_int_eq(nxl_future_status(kept), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_status(pending), NXL_ERR_CANCELED);
    ck_assert(is_sentence(nxl_future_error(pending)));
    nxl_future_release(kept);
    nxl_future_release(pending);
    close(lfd);
    nxl_agent_destroy(T);
}
END_TEST

/* ---------------------------------------- a post is queued, not waited for */

static struct {
    nxl_agent_t *I;
    int entered, go, calls, bad;
    nxl_status_t st;
    char err[512];
    pthread_t reactor;
} Q;

/* runs on I's reactor thread and holds it until the test says go; then it
 * makes I forget T, as a peer lost while a post waits in the queue */
static void q_block(nxl_future_t *f, nxl_status_t st, void *arg)
{
    Q.reactor = pthread_self();
    add_int(&Q.entered);
    while (!load_int(&Q.go))
        usleep(1000);
    if (nxl_md_invalidate(Q.I, "T") != NXL_SUCCESS)
        add_int(&Q.bad);
}

static void *q_blocker(void *arg)
{
    nxl_future_t *f = NULL;
    if (nxl_future_all(Q.I, NULL, 0, q_block, NULL, &f) != NXL_SUCCESS)
        add_int(&Q.bad);
    else
        nxl_future_release(f);
    return NULL;
}

static void q_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    if (!pthread_equal(pthread_self(), Q.reactor))
        add_int(&Q.bad);
    Q.st = st;
    snprintf(Q.err, sizeof(Q.err), "%s", nxl_future_error(f));
    add_int(&Q.calls);
}

START_TEST(queued_post)
{
    memset(&Q, 0, sizeof(Q));
    nxl_agent_t *I = threaded_agent("I"), *T = threaded_agent("T");
    Q.I = I;
    unsigned char *ib = mem(I, 4096), *tb = mem(T, 4096);
    memset(ib, 0x5a, 4096);
    memset(tb, 0, 4096);
    introduce(I, T);
    nxl_xfer_t *x;
    ck_assert_int_eq(write_xfer(I, "T", (uintptr_t)ib, (uintptr_t)tb, 4096, &x), NXL_SUCCESS);

    /* the reactor is held in a callback: a post from this thread still
     * returns, with its future, and the transfer reads in flight */
    pthread_t b;
    pthread_create(&b, NULL, q_blocker, NULL);
    ck_assert(wait_count(&Q.entered, 1, 10000));
    nxl_future_t *f = NULL;
    ck_assert_int_eq(nxl_xfer_post(x, q_done, NULL, &f), NXL_SUCCESS);
    ck_assert_ptr_nonnull(f);
    /* posting it again is refused on this thread, with the sentence */
    nxl_future_t *g = NULL;
    ck_assert_int_eq(nxl_xfer_post(x, q_done, NULL, &g), NXL_ERR_REPOST_ACTIVE);
    ck_assert_ptr_null(g);
    ck_sentence(nxl_agent_last_error(I), "in flight");
    ck_assert_int_eq(nxl_future_wait(f, 0), NXL_IN_PROG);

    /* the callback makes I forget T before the queued post runs: the post
     * fails there, through its future, once, with the reason */
    __atomic_store_n(&Q.go, 1, __ATOMIC_RELEASE);
    pthread_join(b, NULL);
    ck_assert_int_eq(nxl_future_wait(f, 10000), NXL_ERR_REMOTE_DISCONNECT);
    ck_assert_int_eq(load_int(&Q.calls), 1);
    ck_assert_int_eq(Q.st, NXL_ERR_REMOTE_DISCONNECT);
    ck_sentence(Q.err, "invalidated");
    ck_sentence(nxl_future_error(f), "invalidated");
    ck_assert_int_eq(nxl_future_status(f), NXL_ERR_REMOTE_DISCONNECT);
    ck_assert_int_eq(nxl_xfer_status(x), NXL_ERR_REMOTE_DISCONNECT);
    nxl_future_release(f);
    /* nothing was written */
    for (int i = 0; i < 4096; i++)
        ck_assert_int_eq(tb[i], 0);

    /* posted now, the transfer is refused at once, on this thread */
    ck_assert_int_eq(nxl_xfer_post(x, q_done, NULL, &g), NXL_ERR_REMOTE_DISCONNECT);
    ck_assert_ptr_null(g);
    ck_sentence(nxl_agent_last_error(I), "invalidated");
    usleep(20000);
    ck_assert_int_eq(load_int(&Q.calls), 1);
    ck_assert_int_eq(load_int(&Q.bad), 0);
    nxl_xfer_release(x);
    nxl_agent_destroy(I);
    nxl_agent_destroy(T);
}
END_TEST

/* ---------------------------------------- calls run while the reactor sleeps
 *
 * The reactor of an idle threaded agent sleeps (no wake-ups beyond its
 * timers); calls another thread makes meanwhile run there (the direct
 * mode) or on the reactor (NXL_THREADED_DIRECT=0): either way their
 * callbacks and log lines reach the application on the reactor thread,
 * and a no-callback transfer waited for settles. */
static struct {
    pid_t reactor_tid;
    pthread_t reactor;
    int got, logs, bad_logs, cbs, bad_cbs;
} S;

static void s_where(nxl_future_t *f, nxl_status_t st, void *arg)
{
    S.reactor = pthread_self();
    S.reactor_tid = (pid_t)syscall(SYS_gettid);
    add_int(&S.got);
}

static void s_log(nxl_log_level_t lvl, const char *line, void *arg)
{
    if (!load_int(&S.got))
        return; /* before the reactor is known */
    if (!pthread_equal(pthread_self(), S.reactor))
        add_int(&S.bad_logs);
    if (strstr(line, "still in flight") || strstr(line, "at most"))
        add_int(&S.logs);
}

static void s_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    if (!pthread_equal(pthread_self(), S.reactor) || st != NXL_SUCCESS)
        add_int(&S.bad_cbs);
    add_int(&S.cbs);
}

/* voluntary context switches of a thread of this process */
static long switches(pid_t tid)
{
    char path[64], line[128];
    snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)tid);
    FILE *fp = fopen(path, "r");
    long v = -1;
    if (!fp)
        return -1;
    while (fgets(line, sizeof(line), fp))
        if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1)
            break;
    fclose(fp);
    return v;
}

START_TEST(sleeping_reactor)
{
    memset(&S, 0, sizeof(S));
    nxl_agent_t *I = threaded_agent_log("I", s_log, NXL_LOG_TRACE);
    nxl_agent_t *T = threaded_agent("T");
    unsigned char *ib = mem(I, 1 << 16), *tb = mem(T, 1 << 16);
    introduce(I, T);
    nxl_xfer_t *x;
    ck_assert_int_eq(write_xfer(I, "T", (uintptr_t)ib, (uintptr_t)tb, 1 << 16, &x), NXL_SUCCESS);
    nxl_future_t *f;
    ck_assert_int_eq(nxl_xfer_post(x, s_where, NULL, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_wait(f, 10000), NXL_SUCCESS);
    nxl_future_release(f);
    ck_assert(wait_count(&S.got, 1, 10000));
    ck_assert(!pthread_equal(S.reactor, pthread_self()));

    for (int round = 0; round < 200; round++) {
        /* a transfer waited for without a callback */
        tl_fill(ib, 1 << 16, (unsigned)round);
        ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, &f), NXL_SUCCESS);
        ck_assert_int_eq(nxl_future_wait(f, 10000), NXL_SUCCESS);
        ck_assert_int_eq(nxl_future_status(f), NXL_SUCCESS);
        ck_assert_int_eq(nxl_xfer_status(x), NXL_SUCCESS);
        ck_assert_int_eq(tl_check(tb, 1 << 16, (unsigned)round), -1);
        nxl_future_release(f);
        /* one with a callback: it runs on the reactor thread */
        ck_assert_int_eq(nxl_xfer_post(x, s_done, NULL, &f), NXL_SUCCESS);
        ck_assert_int_eq(nxl_future_wait(f, 10000), NXL_SUCCESS);
        nxl_future_release(f);
    }
    ck_assert_int_eq(load_int(&S.cbs), 200);
    ck_assert_int_eq(load_int(&S.bad_cbs), 0);
    /* a refused call: its sentence on this thread, its log line (debug,
     * the agent logs at trace) on the reactor's */
    char big[70000];
    memset(big, 'n', sizeof(big));
    ck_assert_int_ne(nxl_xfer_set_notif(x, big, sizeof(big)), NXL_SUCCESS);
    ck_sentence(nxl_agent_last_error(I), "at most");
    ck_assert(wait_count(&S.logs, 1, 10000));
    ck_assert_int_eq(load_int(&S.bad_logs), 0);

    /* idle now: the reactor sleeps (its timers: none while nothing is in
     * flight; the bound while other threads act, 10 ms, ends with them) */
    usleep(200000);
    long s0 = switches(S.reactor_tid);
    usleep(1000000);
    long s1 = switches(S.reactor_tid);
    ck_assert_msg(s0 >= 0 && s1 >= 0, "no /proc/self/task/<tid>/status");
    ck_assert_msg(s1 - s0 <= 5, "the idle reactor woke %ld times in a second", s1 - s0);
    nxl_xfer_release(x);
    nxl_agent_destroy(I);
    nxl_agent_destroy(T);
}
END_TEST

/* ---------------------------------------- timers while the reactor sleeps
 *
 * A metadata fetch from a server that accepts the connection (the kernel
 * does, from the backlog) but never answers fails on the agent's I/O
 * timeout, a libevent timer: the sleeping reactor wakes for it in time,
 * not later (nor spinning: the CPU the reactor used meanwhile stays
 * small). */
START_TEST(timer_fires)
{
    uint16_t lport;
    int ls = tl_loopback_socket(4, &lport);
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "I";
    c.threaded = 1;
    c.io_timeout_ms = 300;
    nxl_agent_t *I = NULL;
    ck_assert_int_eq(nxl_agent_create(&c, &I), NXL_SUCCESS);
    for (int round = 0; round < 3; round++) {
        struct timespec c0, c1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
        uint64_t t0 = tl_now_ms();
        nxl_future_t *f;
        ck_assert_int_eq(nxl_md_fetch(I, "X", "127.0.0.1", lport, NULL, NULL, &f),
                         NXL_SUCCESS);
        nxl_status_t st = nxl_future_wait(f, 10000);
        uint64_t took = tl_now_ms() - t0;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
        double cpu_ms = (double)(c1.tv_sec - c0.tv_sec) * 1e3 + (double)(c1.tv_nsec - c0.tv_nsec) / 1e6;
        ck_assert_msg(st != NXL_SUCCESS && st != NXL_IN_PROG, "fetch: %s", nxl_status_name(st));
        ck_assert_msg(nxl_future_error(f)[0], "a failed fetch has a sentence");
        ck_assert_msg(took >= 250 && took < 2000, "the 300 ms timeout fired after %llu ms",
                      (unsigned long long)took);
        ck_assert_msg(cpu_ms < 150, "%.0f ms of CPU in %llu ms: the reactor spun", cpu_ms,
                      (unsigned long long)took);
        nxl_future_release(f);
    }
    nxl_agent_destroy(I);
    close(ls);
}
END_TEST

/* ---------------------------------------- the peer process killed
 *
 * Eight threads post to a target in another process (a default-mode
 * agent), each waiting for its transfer, while the main thread kills the
 * target: every post either fails at once with a sentence or completes
 * once, SUCCESS before the death and NXL_ERR_REMOTE_DISCONNECT after it,
 * in bounded time; then the agent still works (a transfer to itself).
 * Over UCX shared memory and, with UCX_TLS=tcp, over TCP loopback. */
#define K_THREADS 8
#define K_BLK 65536

static struct {
    nxl_agent_t *I;
    unsigned char *ib;
    uintptr_t raddr;
    int stop;
    int ok, lost, refused, other, calls, posts, bad;
    int ready; /* threads that made their transfer (or failed to) */
} KP;

static void kp_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    add_int(&KP.calls);
    if (st == NXL_SUCCESS)
        add_int(&KP.ok);
    else if (st == NXL_ERR_REMOTE_DISCONNECT && nxl_future_error(f)[0])
        add_int(&KP.lost);
    else
        unexpected(&KP.other, "killed_peer", -1, "a callback", st, nxl_future_error(f));
}

static void *kp_thread(void *arg)
{
    int k = (int)(intptr_t)arg;
    nxl_xfer_t *x;
    nxl_status_t cst = write_xfer(KP.I, "T", (uintptr_t)KP.ib + (size_t)k * K_BLK,
                                  KP.raddr + (size_t)k * K_BLK, K_BLK, &x);
    add_int(&KP.ready);
    if (cst != NXL_SUCCESS) {
        unexpected(&KP.bad, "killed_peer", k, "nxl_xfer_create", cst, nxl_agent_last_error(KP.I));
        return NULL;
    }
    while (!load_int(&KP.stop)) {
        nxl_future_t *f = NULL;
        nxl_status_t st = nxl_xfer_post(x, kp_done, NULL, &f);
        if (st != NXL_SUCCESS) {
            /* the peer is gone: refused at once, with the reason */
            if (st != NXL_ERR_REMOTE_DISCONNECT || f || !nxl_agent_last_error(KP.I)[0])
                unexpected(&KP.bad, "killed_peer", k,
                           f ? "a refused post (with a future)" : "a refused post", st,
                           nxl_agent_last_error(KP.I));
            add_int(&KP.refused);
            break;
        }
        add_int(&KP.posts);
        nxl_status_t w = nxl_future_wait(f, 20000);
        if (w == NXL_IN_PROG)
            unexpected(&KP.bad, "killed_peer", k, "a post still in flight after 20 s", w, "");
        nxl_future_release(f);
        if (w != NXL_SUCCESS)
            break;
    }
    nxl_xfer_release(x);
    return NULL;
}

/* the transport of the targets (and of killed_peer_notif's initiator) */
static const char *kp_backend = "UCX";
static nxl_param_t kp_param;
static size_t kp_nparams;

static void kp_target(int wfd, int rfd)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "T";
    nxl_agent_t *T;
    if (nxl_agent_create(&c, &T) != NXL_SUCCESS ||
        nxl_backend_create(T, kp_backend, &kp_param, kp_nparams, NULL) != NXL_SUCCESS)
        _exit(10);
    void *buf = NULL;
    if (nxl_mem_alloc(T, NXL_DRAM, (size_t)K_THREADS * K_BLK, 0, &buf) != NXL_SUCCESS)
        _exit(11);
    void *blob;
    size_t len;
    if (nxl_md_local(T, &blob, &len) != NXL_SUCCESS)
        _exit(12);
    uint64_t addr = (uintptr_t)buf, l64 = len;
    if (write(wfd, &addr, 8) != 8 || write(wfd, &l64, 8) != 8 ||
        write(wfd, blob, len) != (ssize_t)len)
        _exit(13);
    nxl_free(blob);
    /* the initiator's metadata, for its connection */
    if (read(rfd, &l64, 8) != 8)
        _exit(14);
    char *ib = malloc(l64);
    size_t got = 0;
    while (got < l64) {
        ssize_t k = read(rfd, ib + got, l64 - got);
        if (k <= 0)
            _exit(15);
        got += (size_t)k;
    }
    if (nxl_md_load(T, ib, l64, NULL, 0) != NXL_SUCCESS)
        _exit(16);
    /* until killed, or the initiator's end of the pipe closed */
    for (;;) {
        nxl_agent_run_once(T, 100);
        struct pollfd pf = {.fd = rfd, .events = POLLIN};
        if (poll(&pf, 1, 0) > 0) {
            nxl_agent_destroy(T);
            _exit(0);
        }
    }
}

/* A target process (kp_target): forked before the initiator's agent
 * exists (a child of a process with threads runs only what it needs),
 * then introduced to it. */
typedef struct {
    pid_t pid;
    int rfd, wfd; /* from it, to it */
} kp_proc_t;

extern char **environ;

/* The target runs this program afresh (NXL_KP_TARGET in its environment,
 * main below): a child that went on from fork() would inherit what the
 * transports of this process set up, under CK_FORK=no (tests/tsan)
 * earlier tests' UCX and libfabric, with threads the child lacks. */
static kp_proc_t kp_fork(void)
{
    int tp[2], ip[2];
    ck_assert(pipe(tp) == 0 && pipe(ip) == 0);
    /* everything the child needs, made before fork (it only calls exec) */
    char var[256];
    snprintf(var, sizeof(var), "NXL_KP_TARGET=%d %d %s %s", tp[1], ip[0], kp_backend,
             kp_nparams ? kp_param.value : "");
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 2, sizeof(*env));
    ck_assert(env != NULL);
    memcpy(env, environ, n * sizeof(*env));
    env[n] = var;
    char *argv[] = {"check_threads-target", NULL};
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* not left behind by a test that failed */
        close(tp[0]);
        close(ip[1]);
        execve("/proc/self/exe", argv, env);
        _exit(9);
    }
    free(env);
    close(tp[1]);
    close(ip[0]);
    return (kp_proc_t){.pid = pid, .rfd = tp[0], .wfd = ip[1]};
}

/* the shm regions a killed process @p pid left in /dev/shm */
static void kp_unlink_regions(pid_t pid)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    char pre[32];
    int n = snprintf(pre, sizeof(pre), "%d:", (int)pid);
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, pre, (size_t)n))
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
}

/* ---- a target killed holding its shm region's lock
 *
 * libfabric 1.17's shm provider takes a spinlock in the peer's region for
 * every post to it, and the peer takes it in its own progress: a target
 * killed inside that critical section leaves it held for good. This
 * program wraps pthread_spin_lock (exported to libfabric, which the process
 * loads later: -Wl,--export-dynamic-symbol in tests/Makefile.include): a
 * target sent SIGUSR1 kills itself with SIGKILL right after it took a
 * lock that lies in its own region (/dev/shm/PID:..., as /proc/self/maps
 * shows it). Elsewhere the wrapper only passes the call on. Not under
 * ThreadSanitizer, whose own wrapper of the function this one would
 * replace. */
#if defined(__SANITIZE_THREAD__)
#define KP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KP_TSAN 1
#endif
#endif

static volatile sig_atomic_t kp_die_locked;

static void kp_on_usr1(int sig)
{
    (void)sig;
    kp_die_locked = 1;
}

#ifndef KP_TSAN
static bool kp_in_own_region(const volatile void *p)
{
    char pre[48], line[512];
    snprintf(pre, sizeof(pre), " /dev/shm/%d:", (int)getpid());
    FILE *f = fopen("/proc/self/maps", "re");
    bool in = false;
    while (f && !in && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        in = strstr(line, pre) && sscanf(line, "%lx-%lx", &lo, &hi) == 2 &&
             (uintptr_t)p >= lo && (uintptr_t)p < hi;
    }
    if (f)
        fclose(f);
    return in;
}

/* default visibility: the tests build with -fvisibility=hidden */
__attribute__((visibility("default"))) int pthread_spin_lock(pthread_spinlock_t *l)
{
    static int (*real)(pthread_spinlock_t *);
    int (*fn)(pthread_spinlock_t *) = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (!fn) {
        *(void **)&fn = dlsym(RTLD_NEXT, "pthread_spin_lock");
        __atomic_store_n(&real, fn, __ATOMIC_RELEASE);
    }
    int r = fn(l);
    if (kp_die_locked && kp_in_own_region(l))
        kill(getpid(), SIGKILL);
    return r;
}
#endif

/* libfabric 1.17, where the transport guards posts against a peer's
 * lock held by a dead peer (its place in the region is that version's) */
static bool kp_lf_117(void)
{
    void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    uint32_t (*ver)(void) = h ? (uint32_t(*)(void))dlsym(h, "fi_version") : NULL;
    bool yes = ver && ver() == ((1u << 16) | 17u);
    if (h)
        dlclose(h);
    return yes;
}

/* Ends p by SIGUSR1: it kills itself holding its region's lock (the
 * wrapper above); true when it did so within 20 s */
static bool kp_end_locked(kp_proc_t *p)
{
    kill(p->pid, SIGUSR1);
    int ws = 0;
    pid_t r = 0;
    for (int i = 0; i < 2000 && (r = waitpid(p->pid, &ws, WNOHANG)) == 0; i++)
        usleep(10000);
    if (r == 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, &ws, 0);
    }
    if (p->rfd >= 0)
        close(p->rfd);
    close(p->wfd);
    kp_unlink_regions(p->pid);
    return r == p->pid && WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL;
}

/* a target's main: "WFD RFD BACKEND [PROVIDER]" */
static int kp_target_main(const char *spec)
{
    int wfd, rfd;
    char backend[32], provider[64] = "";
    if (sscanf(spec, "%d %d %31s %63s", &wfd, &rfd, backend, provider) < 3)
        return 8;
    kp_backend = backend;
    kp_param = (nxl_param_t){"provider", provider};
    kp_nparams = provider[0] != 0;
    signal(SIGUSR1, kp_on_usr1); /* die holding the region lock (kp_end_locked) */
    kp_target(wfd, rfd);
    return 0;
}

/* p and I load each other's metadata; the address of p's buffer (0: p
 * could not make its backend, and exited) */
static uintptr_t kp_introduce(nxl_agent_t *I, kp_proc_t *p)
{
    uint64_t addr = 0, len = 0;
    if (read(p->rfd, &addr, 8) == 0) {
        int ws = 0;
        waitpid(p->pid, &ws, 0);
        ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 10, "target did not start");
        close(p->rfd);
        close(p->wfd);
        return 0;
    }
    ck_assert_msg(read(p->rfd, &len, 8) == 8, "target did not start");
    char *blob = malloc(len);
    size_t got = 0;
    while (got < len) {
        ssize_t k = read(p->rfd, blob + got, len - got);
        ck_assert(k > 0);
        got += (size_t)k;
    }
    close(p->rfd);
    p->rfd = -1;
    ck_assert_msg(nxl_md_load(I, blob, len, NULL, 0) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(I));
    free(blob);
    void *mb;
    size_t ml;
    ck_assert_int_eq(nxl_md_local(I, &mb, &ml), NXL_SUCCESS);
    uint64_t ml64 = ml;
    ck_assert(write(p->wfd, &ml64, 8) == 8 && write(p->wfd, mb, ml) == (ssize_t)ml);
    nxl_free(mb);
    return (uintptr_t)addr;
}

/* Ends p: killed, or told to destroy its agent and exit. A killed process
 * leaves LIBFABRIC shm's region (/dev/shm/PID:...) behind: removed. */
static void kp_end(kp_proc_t *p, bool killed)
{
    if (killed)
        kill(p->pid, SIGKILL);
    if (p->rfd >= 0)
        close(p->rfd);
    close(p->wfd);
    waitpid(p->pid, NULL, 0);
    if (killed)
        kp_unlink_regions(p->pid);
}

static void killed_peer(const char *tls)
{
    memset(&KP, 0, sizeof(KP));
    unexpected_reset();
    if (tls)
        setenv("UCX_TLS", tls, 1);
    kp_proc_t tg = kp_fork();
    KP.I = threaded_agent("I");
    KP.raddr = kp_introduce(KP.I, &tg);
    KP.ib = mem(KP.I, (size_t)K_THREADS * K_BLK);

    pthread_t th[K_THREADS];
    start_flowing(th, K_THREADS, kp_thread, &KP.ok, &KP.bad, &KP.ready, 200);
    kp_end(&tg, true);
    uint64_t t0 = tl_now_ms();
    for (int k = 0; k < K_THREADS; k++)
        pthread_join(th[k], NULL);
    uint64_t took = tl_now_ms() - t0;
    __atomic_store_n(&KP.stop, 1, __ATOMIC_RELEASE);
    /* every post's callback once: the last ones may still be delivered */
    ck_assert(wait_count(&KP.calls, load_int(&KP.posts), 10000));
    usleep(20000);
    printf("killed_peer (%s): %d posts, %d ok, %d lost, %d refused at once; threads done %llu "
           "ms after the kill\n", tls ? tls : "default", load_int(&KP.posts), load_int(&KP.ok),
           load_int(&KP.lost), load_int(&KP.refused), (unsigned long long)took);
    ck_assert_int_eq(load_int(&KP.calls), load_int(&KP.posts));
    ck_assert_msg(load_int(&KP.bad) == 0 && load_int(&KP.other) == 0,
                  "%d bad, %d other; the first: %s", load_int(&KP.bad), load_int(&KP.other),
                  unexpected_first);
    ck_assert_int_eq(load_int(&KP.lost) + load_int(&KP.refused), K_THREADS);
    /* the agent still works: a transfer to itself */
    tl_fill(KP.ib, K_BLK, 3);
    nxl_xfer_t *x;
    ck_assert_int_eq(write_xfer(KP.I, "I", (uintptr_t)KP.ib, (uintptr_t)KP.ib + K_BLK, K_BLK, &x),
                     NXL_SUCCESS);
    nxl_future_t *f;
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_wait(f, 10000), NXL_SUCCESS);
    ck_assert_int_eq(tl_check(KP.ib + K_BLK, K_BLK, 3), -1);
    nxl_future_release(f);
    nxl_xfer_release(x);
    nxl_agent_destroy(KP.I);
    if (tls)
        unsetenv("UCX_TLS");
}

START_TEST(killed_peer_shm) { killed_peer(NULL); }
END_TEST

START_TEST(killed_peer_tcp) { killed_peer("tcp"); }
END_TEST

/* A deadline set and posted from a thread other than the reactor's, the
 * target stopped (SIGSTOP): the post completes with NXL_ERR_TIMEOUT, its
 * deadline fired on time (its sentence says when), once the transport let
 * go of the buffers (UCX over TCP: when the target resumed); the peer works
 * again afterwards. */
START_TEST(deadline_foreign)
{
    memset(&KP, 0, sizeof(KP));
    setenv("UCX_TLS", "tcp", 1);
    kp_proc_t tg = kp_fork();
    nxl_agent_t *I = threaded_agent("I");
    uintptr_t raddr = kp_introduce(I, &tg);
    ck_assert(raddr != 0);
    size_t len = (size_t)K_THREADS * K_BLK;
    unsigned char *ib = mem(I, len);
    nxl_xfer_t *x;
    ck_assert_int_eq(write_xfer(I, "T", (uintptr_t)ib, raddr, len, &x), NXL_SUCCESS);
    nxl_future_t *f;
    /* a deadline that does not expire */
    nxl_xfer_set_deadline(x, 10000);
    tl_fill(ib, len, 5);
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_wait(f, 10000), NXL_SUCCESS);
    nxl_future_release(f);
    /* one that does */
    nxl_xfer_set_deadline(x, 300);
    ck_assert_int_eq(kill(tg.pid, SIGSTOP), 0);
    uint64_t t0 = tl_now_ms();
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, &f), NXL_SUCCESS);
    nxl_status_t st = nxl_future_wait(f, 1500);
    kill(tg.pid, SIGCONT);
    if (st == NXL_IN_PROG)
        st = nxl_future_wait(f, 20000);
    uint64_t t = tl_now_ms() - t0;
    const char *why = nxl_future_error(f);
    ck_assert_msg(st == NXL_ERR_TIMEOUT, "%s: %s", nxl_status_name(st), why);
    const char *at = strstr(why, "passed (");
    double fired = at ? strtod(at + 8, NULL) : -1;
    printf("deadline_foreign: deadline 300 ms, fired at %.1f ms, callback at %llu ms\n", fired,
           (unsigned long long)t);
    ck_assert_msg(fired >= 300 && fired <= 800, "%s", why);
    ck_assert_msg(strstr(why, "'T'") && strstr(why, "UCX"), "%s", why);
    nxl_future_release(f);
    /* the peer works again */
    nxl_xfer_set_deadline(x, 0);
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_wait(f, 10000), NXL_SUCCESS);
    nxl_future_release(f);
    nxl_xfer_release(x);
    kp_end(&tg, false);
    nxl_agent_destroy(I);
    unsetenv("UCX_TLS");
}
END_TEST

/* ---------------------------------------- the peer process killed under WRITEs with notifications
 *
 * Four threads keep a window of WRITEs with notifications each in flight
 * to a target in another process (over UCX shared memory, small enough to
 * travel as messages), each with a notification of its own besides, and
 * each thread asks its failed future for its status, sentence and peer
 * itself, as an application does; the target is killed. Every future
 * completes once, with NXL_ERR_REMOTE_DISCONNECT and a sentence, every
 * thread's calls return, in bounded time; the idle reactor then sleeps
 * (UCX keeps what was sent to a peer that died with its shared-memory FIFO
 * full, and its worker cannot sleep on its fd any more); the agent works
 * against a new target of the same name. The same over LIBFABRIC
 * tcp;ofi_rxm and shm. */
#define KN_THREADS 4
#define KN_WIN 8
#define KN_BLK 4096
#define KN_BOUND_MS 30000 /* generous: what is claimed is "within a few seconds" */

static struct {
    nxl_agent_t *I;
    unsigned char *ib;
    uintptr_t raddr;
    int ok, lost, refused, calls, posts, bad, done;
    int ready; /* threads that made their transfers (or failed to) */
    int nsent, ncalls, nlost; /* standalone notifications */
    pthread_t reactor;
    int reactor_set;
} KN;

static void kn_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    (void)f;
    (void)st;
    (void)arg;
    note_reactor(&KN.reactor, &KN.reactor_set);
    add_int(&KN.calls);
}

/* CPU time a thread used, in ms */
static long cpu_ms(clockid_t cid)
{
    struct timespec ts;
    ck_assert(clock_gettime(cid, &ts) == 0);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void kn_notif_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    (void)arg;
    add_int(&KN.ncalls);
    if (st == NXL_ERR_REMOTE_DISCONNECT && is_sentence(nxl_future_error(f))) {
        add_int(&KN.nlost);
    } else if (st != NXL_SUCCESS) {
        unexpected(&KN.bad, "killed_peer_notif", -1, "a notification's callback", st,
                   nxl_future_error(f));
    }
}

static nxl_status_t kn_xfer(nxl_agent_t *a, uintptr_t src, uintptr_t dst, nxl_xfer_t **x)
{
    nxl_desc_t ld = {.addr = src, .len = KN_BLK}, rd = {.addr = dst, .len = KN_BLK};
    nxl_dlist_t l = {NXL_DRAM, &ld, 1}, r = {NXL_DRAM, &rd, 1};
    nxl_xfer_opts_t o;
    nxl_xfer_opts_init(&o);
    o.notif = "kn";
    o.notif_len = 2;
    return nxl_xfer_create(a, NXL_WRITE, &l, &r, "T", &o, x);
}

/* a future the thread waited for: SUCCESS, or the peer's loss with a
 * sentence, asked for from this thread; false once it failed */
static bool kn_settled(int k, nxl_future_t *f, nxl_status_t w)
{
    if (w == NXL_SUCCESS) {
        add_int(&KN.ok);
        return true;
    }
    const char *why = nxl_future_error(f);
    if (w != NXL_ERR_REMOTE_DISCONNECT || nxl_future_status(f) != w || !is_sentence(why) ||
        nxl_future_peer(f) != NULL) {
        unexpected(&KN.bad, "killed_peer_notif", k,
                   nxl_future_peer(f) ? "a failed post (with a peer)" : "a failed post", w, why);
    } else {
        add_int(&KN.lost);
    }
    return false;
}

static void *kn_thread(void *arg)
{
    int k = (int)(intptr_t)arg;
    nxl_xfer_t *x[KN_WIN];
    nxl_future_t *f[KN_WIN] = {0};
    for (int i = 0; i < KN_WIN; i++) {
        size_t off = ((size_t)k * KN_WIN + (size_t)i) * KN_BLK;
        nxl_status_t cst = kn_xfer(KN.I, (uintptr_t)KN.ib + off, KN.raddr + off, &x[i]);
        if (cst != NXL_SUCCESS) {
            unexpected(&KN.bad, "killed_peer_notif", k, "nxl_xfer_create", cst,
                       nxl_agent_last_error(KN.I));
            add_int(&KN.ready);
            add_int(&KN.done);
            return NULL;
        }
    }
    add_int(&KN.ready);
    for (unsigned r = 0;; r++) {
        int i = (int)(r % KN_WIN);
        if (f[i]) {
            nxl_status_t w = nxl_future_wait(f[i], KN_BOUND_MS);
            if (w == NXL_IN_PROG)
                unexpected(&KN.bad, "killed_peer_notif", k, "a post still in flight after the "
                           "bound", w, "");
            bool go = kn_settled(k, f[i], w);
            nxl_future_release(f[i]);
            f[i] = NULL;
            if (!go)
                break;
        }
        nxl_status_t st = nxl_xfer_post(x[i], kn_done, NULL, &f[i]);
        if (st != NXL_SUCCESS) {
            /* the peer is known gone: refused at once, with the reason */
            if (st != NXL_ERR_REMOTE_DISCONNECT || f[i] ||
                !is_sentence(nxl_agent_last_error(KN.I))) {
                unexpected(&KN.bad, "killed_peer_notif", k,
                           f[i] ? "a refused post (with a future)" : "a refused post", st,
                           nxl_agent_last_error(KN.I));
            }
            add_int(&KN.refused);
            f[i] = NULL;
            break;
        }
        add_int(&KN.posts);
        /* and a notification of its own, which UCX completes once sent */
        char msg[32];
        int len = snprintf(msg, sizeof(msg), "kn %d %u", k, r);
        st = nxl_notif_send(KN.I, "T", msg, (size_t)len, kn_notif_done, NULL, NULL);
        if (st == NXL_SUCCESS)
            add_int(&KN.nsent);
        else if (st != NXL_ERR_REMOTE_DISCONNECT || !is_sentence(nxl_agent_last_error(KN.I)))
            unexpected(&KN.bad, "killed_peer_notif", k, "a refused notification", st,
                       nxl_agent_last_error(KN.I));
    }
    /* the rest of the window: each completes too */
    for (int i = 0; i < KN_WIN; i++) {
        if (f[i]) {
            nxl_status_t w = nxl_future_wait(f[i], KN_BOUND_MS);
            if (w == NXL_IN_PROG)
                unexpected(&KN.bad, "killed_peer_notif", k, "a post still in flight after the "
                           "bound", w, "");
            else
                kn_settled(k, f[i], w);
            nxl_future_release(f[i]);
        }
        nxl_xfer_release(x[i]);
    }
    add_int(&KN.done);
    return NULL;
}

/* locked: the target dies holding its shm region's lock (kp_end_locked) */
static void killed_peer_notif_run(const char *backend, const char *provider, bool locked)
{
    memset(&KN, 0, sizeof(KN));
    unexpected_reset();
    kp_backend = backend;
    kp_param = (nxl_param_t){"provider", provider};
    kp_nparams = provider != NULL;
    kp_proc_t t1 = kp_fork(), t2 = kp_fork();
    KN.I = threaded_bare("I");
    nxl_status_t st = nxl_backend_create(KN.I, backend, &kp_param, kp_nparams, NULL);
    if (st != NXL_SUCCESS && strcmp(backend, "UCX")) {
        printf("SKIP: killed_peer_notif (%s %s): %s\n", backend, provider ? provider : "",
               nxl_agent_last_error(KN.I));
        kp_end(&t1, true);
        kp_end(&t2, true);
        nxl_agent_destroy(KN.I);
        kp_backend = "UCX";
        kp_nparams = 0;
        return;
    }
    ck_assert_msg(st == NXL_SUCCESS, "%s: %s", backend, nxl_agent_last_error(KN.I));
    KN.raddr = kp_introduce(KN.I, &t1);
    ck_assert_msg(KN.raddr, "the target could not make its %s backend", backend);
    KN.ib = mem(KN.I, (size_t)KN_THREADS * KN_WIN * KN_BLK);
    tl_fill(KN.ib, (size_t)KN_THREADS * KN_WIN * KN_BLK, 5);
    pthread_t th[KN_THREADS];
    start_flowing(th, KN_THREADS, kn_thread, &KN.ok, &KN.bad, &KN.ready, 2000);
    if (locked)
        ck_assert_msg(kp_end_locked(&t1), "the target did not kill itself holding its region "
                      "lock");
    else
        kp_end(&t1, true);
    uint64_t t0 = tl_now_ms();
    /* a thread that hangs cannot be joined: its count says so */
    ck_assert_msg(wait_count(&KN.done, KN_THREADS, KN_BOUND_MS + 10000),
                  "%d of %d threads still blocked in calls %d ms after the target was killed "
                  "(%d posts, %d ok, %d lost, %d callbacks)", KN_THREADS - load_int(&KN.done),
                  KN_THREADS, KN_BOUND_MS + 10000, load_int(&KN.posts), load_int(&KN.ok),
                  load_int(&KN.lost), load_int(&KN.calls));
    uint64_t took = tl_now_ms() - t0;
    for (int k = 0; k < KN_THREADS; k++)
        pthread_join(th[k], NULL);
    printf("killed_peer_notif (%s%s%s%s): %d posts, %d ok, %d lost, %d refused at once; %d "
           "notifications, %d lost; threads done %llu ms after the kill\n", backend,
           provider ? " " : "", provider ? provider : "",
           locked ? ", the target killed holding its region lock" : "", load_int(&KN.posts),
           load_int(&KN.ok),
           load_int(&KN.lost), load_int(&KN.refused), load_int(&KN.nsent), load_int(&KN.nlost),
           (unsigned long long)took);
    ck_assert_msg(load_int(&KN.bad) == 0, "%d bad; the first: %s", load_int(&KN.bad),
                  unexpected_first);
    /* each callback once; all of them ran before their waits returned */
    ck_assert_int_eq(load_int(&KN.calls), load_int(&KN.posts));
    ck_assert_msg(wait_count(&KN.ncalls, load_int(&KN.nsent), KN_BOUND_MS),
                  "%d of %d notifications never completed", load_int(&KN.nsent) -
                  load_int(&KN.ncalls), load_int(&KN.nsent));
    /* idle now, UCX still holding what was sent to the dead peer: the
     * reactor does not spin (it polls UCX now and then) */
    clockid_t cid;
    ck_assert(load_int(&KN.reactor_set) && pthread_getcpuclockid(KN.reactor, &cid) == 0);
    usleep(100000);
    long c0 = cpu_ms(cid);
    usleep(2000000);
    long used = cpu_ms(cid) - c0;
    printf("killed_peer_notif (%s): the idle reactor used %ld ms of CPU in 2 s\n", backend, used);
    ck_assert_msg(used < 200, "the idle reactor used %ld ms of CPU in 2 s", used);
    ck_assert_int_eq(load_int(&KN.lost) + load_int(&KN.refused) >= KN_THREADS, 1);
    ck_assert_int_eq(load_int(&KN.ok) + load_int(&KN.lost), load_int(&KN.posts));

    /* a new target of the same name: a WRITE, READ back, and a notification */
    KN.raddr = kp_introduce(KN.I, &t2);
    ck_assert_msg(KN.raddr, "the new target could not make its %s backend", backend);
    nxl_xfer_t *x, *y;
    nxl_future_t *f;
    nxl_desc_t wd = {.addr = (uintptr_t)KN.ib, .len = KN_BLK},
               rd = {.addr = KN.raddr, .len = KN_BLK},
               bd = {.addr = (uintptr_t)KN.ib + KN_BLK, .len = KN_BLK};
    nxl_dlist_t wl = {NXL_DRAM, &wd, 1}, rl = {NXL_DRAM, &rd, 1}, bl = {NXL_DRAM, &bd, 1};
    ck_assert_int_eq(nxl_xfer_create(KN.I, NXL_WRITE, &wl, &rl, "T", NULL, &x), NXL_SUCCESS);
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, &f), NXL_SUCCESS);
    ck_assert_msg(nxl_future_wait(f, KN_BOUND_MS) == NXL_SUCCESS, "WRITE to the new target: %s",
                  nxl_future_error(f));
    nxl_future_release(f);
    ck_assert_int_eq(nxl_xfer_create(KN.I, NXL_READ, &bl, &rl, "T", NULL, &y), NXL_SUCCESS);
    ck_assert_int_eq(nxl_xfer_post(y, NULL, NULL, &f), NXL_SUCCESS);
    ck_assert_msg(nxl_future_wait(f, KN_BOUND_MS) == NXL_SUCCESS, "READ from the new target: %s",
                  nxl_future_error(f));
    nxl_future_release(f);
    ck_assert_int_eq(memcmp(KN.ib, KN.ib + KN_BLK, KN_BLK), 0);
    ck_assert_int_eq(nxl_notif_send(KN.I, "T", "kn", 2, NULL, NULL, &f), NXL_SUCCESS);
    ck_assert_msg(nxl_future_wait(f, KN_BOUND_MS) == NXL_SUCCESS,
                  "notification to the new target: %s", nxl_future_error(f));
    nxl_future_release(f);
    nxl_xfer_release(x);
    nxl_xfer_release(y);
    kp_end(&t2, false);
    nxl_agent_destroy(KN.I);
    kp_backend = "UCX";
    kp_nparams = 0;
}

START_TEST(killed_peer_notif) { killed_peer_notif_run("UCX", NULL, false); }
END_TEST

START_TEST(killed_peer_notif_lf_tcp) { killed_peer_notif_run("LIBFABRIC", "tcp;ofi_rxm", false); }
END_TEST

START_TEST(killed_peer_notif_lf_shm) { killed_peer_notif_run("LIBFABRIC", "shm", false); }
END_TEST

/* The target killed inside its shm region lock's critical section: the
 * lock stays held, and a post into the region would spin in the provider
 * for ever (the reactor's thread, holding the agent: every thread blocked
 * in its calls, no callback, no stall timeout). The transport holds such
 * posts back, and the peer fails as any killed one. */
START_TEST(killed_peer_locked_lf_shm)
{
#ifdef KP_TSAN
    printf("SKIP: killed_peer_locked_lf_shm: under ThreadSanitizer (its pthread_spin_lock)\n");
#else
    if (!kp_lf_117()) {
        printf("SKIP: killed_peer_locked_lf_shm: libfabric is not 1.17\n");
        return;
    }
    killed_peer_notif_run("LIBFABRIC", "shm", true);
#endif
}
END_TEST

/* ---------------------------------------- a reactor that does not sleep
 *
 * With busy polling (busy_poll_us) the reactor has work at once on every
 * turn for as long as the window lasts (UCX progresses from a zero-delay
 * timer), as it has whenever a transport polls. Calls from other threads
 * that need the agent to themselves (nxl_future_status(),
 * nxl_future_error(), nxl_prep()) still return at once, not when the
 * window ends. */
#define BR_WINDOW_US 20000000u
#define BR_BOUND_MS 10000 /* for 100 rounds; generous: a round takes a turn or two */

static struct {
    nxl_agent_t *I;
    nxl_future_t *f;
    unsigned char *b;
    int rounds, bad;
} BR;

static void *br_thread(void *arg)
{
    (void)arg;
    nxl_desc_t d = {.addr = (uintptr_t)BR.b, .len = BLK};
    for (int i = 0; i < 100; i++) {
        nxl_prepped_t *p;
        if (nxl_future_status(BR.f) != NXL_SUCCESS || strcmp(nxl_future_error(BR.f), "") ||
            nxl_prep(BR.I, NULL, NXL_DRAM, &d, 1, &p) != NXL_SUCCESS) {
            add_int(&BR.bad);
            break;
        }
        nxl_prepped_release(p);
        add_int(&BR.rounds);
    }
    return NULL;
}

START_TEST(busy_reactor)
{
    memset(&BR, 0, sizeof(BR));
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "I";
    c.threaded = 1;
    c.busy_poll_us = BR_WINDOW_US;
    ck_assert_msg(nxl_agent_create(&c, &BR.I) == NXL_SUCCESS, "%s", nxl_agent_last_error(NULL));
    ck_assert_msg(nxl_backend_create(BR.I, "UCX", NULL, 0, NULL) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(BR.I));
    BR.b = mem(BR.I, 2 * BLK);
    tl_fill(BR.b, BLK, 9);
    nxl_xfer_t *x;
    ck_assert_int_eq(write_xfer(BR.I, "I", (uintptr_t)BR.b, (uintptr_t)BR.b + BLK, BLK, &x),
                     NXL_SUCCESS);
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, &BR.f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_wait(BR.f, 10000), NXL_SUCCESS);
    ck_assert_int_eq(tl_check(BR.b + BLK, BLK, 9), -1);
    /* the window runs now, for BR_WINDOW_US after that transfer */
    uint64_t t0 = tl_now_ms();
    pthread_t th;
    pthread_create(&th, NULL, br_thread, NULL);
    /* a thread that hangs cannot be joined: its count says so */
    ck_assert_msg(wait_count(&BR.rounds, 100, BR_BOUND_MS) || load_int(&BR.bad),
                  "%d of 100 rounds of calls done by another thread in %d ms while the reactor "
                  "polled", load_int(&BR.rounds), BR_BOUND_MS);
    pthread_join(th, NULL);
    printf("busy_reactor: 100 rounds of calls in %llu ms\n",
           (unsigned long long)(tl_now_ms() - t0));
    ck_assert_int_eq(load_int(&BR.bad), 0);
    nxl_future_release(BR.f);
    nxl_xfer_release(x);
    nxl_agent_destroy(BR.I);
}
END_TEST

/* ---------------------------------------- destroy from a foreign thread */

#define D_N 16
static struct {
    nxl_xfer_t *x[D_N];
    int posts, calls, canceled, bad;
    pthread_t destroyer;
    int stop;
} D;

/* each transfer re-posts itself from its callback until the destroy
 * cancels it: at any time D_N posts are in flight */
static void d_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    int i = (int)(uintptr_t)arg;
    add_int(&D.calls);
    if (pthread_equal(pthread_self(), D.destroyer))
        add_int(&D.bad); /* not on the reactor thread */
    if (st == NXL_ERR_CANCELED) {
        add_int(&D.canceled);
        return;
    }
    if (st != NXL_SUCCESS)
        add_int(&D.bad);
    if (nxl_xfer_post(D.x[i], d_done, arg, NULL) == NXL_SUCCESS)
        add_int(&D.posts);
    else
        add_int(&D.bad);
}

static void *d_destroy(void *arg)
{
    nxl_agent_destroy(arg);
    return NULL;
}

START_TEST(destroy_foreign)
{
    memset(&D, 0, sizeof(D));
    nxl_agent_t *I = threaded_agent("I"), *T = threaded_agent("T");
    size_t blk = 1 << 20;
    unsigned char *ib = mem(I, D_N * blk), *tb = mem(T, D_N * blk);
    introduce(I, T);
    for (int i = 0; i < D_N; i++) {
        ck_assert_int_eq(write_xfer(I, "T", (uintptr_t)ib + i * blk, (uintptr_t)tb + i * blk, blk,
                                    &D.x[i]),
                         NXL_SUCCESS);
    }
    for (int i = 0; i < D_N; i++) {
        ck_assert_int_eq(nxl_xfer_post(D.x[i], d_done, (void *)(uintptr_t)i, NULL), NXL_SUCCESS);
        add_int(&D.posts);
    }
    /* some re-posted from their callbacks (over TCP a 1 MiB write can take
     * longer than any fixed sleep on a loaded machine) */
    ck_assert_msg(wait_count(&D.posts, D_N + 1, 20000), "no transfer completed in 20 s");
    usleep(20000);
    /* destroyed from another thread with D_N transfers in flight, their
     * transfers never released by hand (the teardown does it) */
    ck_assert_int_eq(pthread_create(&D.destroyer, NULL, d_destroy, I), 0);
    pthread_join(D.destroyer, NULL);
    int posts = load_int(&D.posts), calls = load_int(&D.calls);
    fprintf(stderr, "destroy_foreign: %d posts, %d callbacks, %d canceled by the destroy\n",
            posts, calls, load_int(&D.canceled));
    ck_assert_int_eq(load_int(&D.bad), 0);
    ck_assert_int_gt(posts, D_N);
    ck_assert_int_eq(calls, posts);               /* each post's callback, exactly once */
    ck_assert_int_eq(load_int(&D.canceled), D_N); /* the ones in flight, canceled */
    usleep(10000);
    ck_assert_int_eq(load_int(&D.calls), posts);  /* and nothing after */
    nxl_agent_destroy(T);
}
END_TEST

/* ------------------------------------------- the API from inside callbacks */

static struct {
    nxl_agent_t *I;
    nxl_xfer_t *x;
    int left, chain_done, inner_ok, bad;
    nxl_status_t wait_st, run_st;
    char run_err[256];
} C;

static void c_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    if (st != NXL_SUCCESS)
        add_int(&C.bad);
    /* on the reactor thread the calls run directly: no hand-over, no deadlock */
    C.wait_st = nxl_future_wait(f, 10);
    C.run_st = nxl_agent_run_once(C.I, 0);
    if (nxl_xfer_status(C.x) != NXL_SUCCESS || nxl_future_status(f) != NXL_SUCCESS)
        add_int(&C.bad);
    nxl_stats_t s = {.size = sizeof(s)};
    if (nxl_agent_stats(C.I, NULL, &s) == NXL_SUCCESS && s.xfers_posted > 0)
        add_int(&C.inner_ok);
    if (--C.left > 0) {
        if (nxl_xfer_post(C.x, c_done, NULL, NULL) != NXL_SUCCESS)
            add_int(&C.bad);
    } else {
        /* destroy on its own reactor thread: refused, the agent stays */
        nxl_agent_destroy(C.I);
        add_int(&C.chain_done);
    }
}

static void quiet_log(nxl_log_level_t lvl, const char *msg, void *arg) {}

START_TEST(api_in_callback)
{
    memset(&C, 0, sizeof(C));
    C.I = threaded_agent_log("I", quiet_log, NXL_LOG_ERROR);
    unsigned char *b = mem(C.I, 8192);
    tl_fill(b, 4096, 3);
    /* loopback: the agent is its own peer */
    ck_assert_msg(write_xfer(C.I, "I", (uintptr_t)b, (uintptr_t)b + 4096, 4096, &C.x) ==
                      NXL_SUCCESS,
                  "%s", nxl_agent_last_error(C.I));
    C.left = 100;
    ck_assert_int_eq(nxl_xfer_post(C.x, c_done, NULL, NULL), NXL_SUCCESS);
    ck_assert_msg(wait_count(&C.chain_done, 1, 20000), "the chain of re-posts stopped at %d",
                  C.left);
    ck_assert_int_eq(load_int(&C.bad), 0);
    ck_assert_int_eq(load_int(&C.inner_ok), 100);
    ck_assert_int_eq(C.wait_st, NXL_ERR_NOT_ALLOWED);
    ck_assert_int_eq(C.run_st, NXL_ERR_NOT_ALLOWED);
    ck_assert_int_eq(tl_check(b + 4096, 4096, 3), -1);
    /* the refused destroy left the agent working */
    nxl_future_t *f;
    ck_assert_int_eq(nxl_xfer_post(C.x, NULL, NULL, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_wait(f, 10000), NXL_SUCCESS);
    nxl_future_release(f);
    nxl_xfer_release(C.x);
    nxl_agent_destroy(C.I);
}
END_TEST

/* ------------------------------------------------------ the default mode */

static int dm_calls;
static pthread_t dm_thread;
static void dm_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    dm_thread = pthread_self();
    dm_calls++;
}

START_TEST(default_mode)
{
    /* a config from before the field: the size ends where threaded begins */
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "D";
    c.size = offsetof(nxl_agent_config_t, threaded);
    nxl_agent_t *a;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_SUCCESS);
    ck_assert_int_eq(nxl_backend_create(a, "UCX", NULL, 0, NULL), NXL_SUCCESS);
    unsigned char *b = mem(a, 8192);
    tl_fill(b, 4096, 5);
    nxl_xfer_t *x;
    ck_assert_int_eq(write_xfer(a, "D", (uintptr_t)b, (uintptr_t)b + 4096, 4096, &x), NXL_SUCCESS);
    nxl_future_t *f;
    dm_calls = 0;
    ck_assert_int_eq(nxl_xfer_post(x, dm_done, NULL, &f), NXL_SUCCESS);
    /* nothing runs until this thread runs the reactor */
    usleep(20000);
    ck_assert_int_eq(dm_calls, 0);
    ck_assert_int_eq(nxl_future_status(f), NXL_IN_PROG);
    ck_assert_int_eq(nxl_future_wait(f, 10000), NXL_SUCCESS);
    ck_assert_int_eq(dm_calls, 1);
    ck_assert(pthread_equal(dm_thread, pthread_self()));
    ck_assert_int_eq(tl_check(b + 4096, 4096, 5), -1);
    ck_assert_int_eq(nxl_agent_run_once(a, 0), NXL_SUCCESS);
    nxl_future_release(f);
    nxl_xfer_release(x);
    nxl_agent_destroy(a);

    /* threaded needs its own base */
    nxl_agent_config_init(&c);
    c.name = "bad";
    c.threaded = 1;
    struct event_base *base = event_base_new();
    c.base = base;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_ERR_INVALID_PARAM);
    ck_assert_ptr_null(a);
    ck_sentence(nxl_agent_last_error(NULL), "threaded");
    event_base_free(base);
}
END_TEST

/* the hand-over mode (every call of another thread runs on the reactor
 * thread): what a system without /proc, or NXL_THREADED_DIRECT=0, gets */
static void handover_on(void) { setenv("NXL_THREADED_DIRECT", "0", 1); }
static void handover_off(void) { unsetenv("NXL_THREADED_DIRECT"); }

Suite *threads_suite(void)
{
    Suite *s = suite_create("threads");
    TL_TCASE(s, "threads", 600, NULL, NULL, many_threads, cycle_ucx, cycle_posix, cycle_libfabric,
             foreign_wait, queued_post, sleeping_reactor, timer_fires, killed_peer_shm,
             killed_peer_tcp, killed_peer_notif, killed_peer_notif_lf_tcp,
             killed_peer_notif_lf_shm, killed_peer_locked_lf_shm, busy_reactor,
             destroy_foreign, api_in_callback,
             default_mode, deadline_foreign);
    TL_TCASE(s, "handover", 600, handover_on, handover_off, many_threads, cycle_ucx, queued_post,
             sleeping_reactor, timer_fires, killed_peer_shm, killed_peer_notif, busy_reactor,
             destroy_foreign, deadline_foreign);
    return s;
}

int main(void)
{
    const char *target = getenv("NXL_KP_TARGET");
    if (target)
        return kp_target_main(target);
    return tl_run(threads_suite());
}
