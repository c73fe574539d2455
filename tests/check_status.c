/* SPDX-License-Identifier: BSD-3-Clause */
/* Status codes and their strings, memory type names, the version; agent
 * creation errors; transports (listing, creation errors); the reactor:
 * embedding into the application's event_base, nxl_agent_run/stop from a
 * callback, and an idle agent that sleeps instead of spinning. */
#include "testlib.h"

#include <stddef.h>

#include <event2/event.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

/* An error sentence: several words, not an empty string. */

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------ statuses */

static const struct {
    nxl_status_t st;
    int value;
    const char *name, *text;
} codes[] = {
#define ROW_(name, value, text) {NXL_##name, value, #name, text},
    NXL_STATUS_MAP(ROW_)
#undef ROW_
};
#define NCODES (sizeof(codes) / sizeof(codes[0]))

START_TEST(t_status_values)
{
    /* NIXL's values, never renumbered: 1, 0, -1, ... -12 in this order; then
     * nxl's own from -13 */
    static const nxl_status_t nixl[] = {
        NXL_IN_PROG, NXL_SUCCESS, NXL_ERR_NOT_POSTED, NXL_ERR_INVALID_PARAM,
        NXL_ERR_BACKEND, NXL_ERR_NOT_FOUND, NXL_ERR_MISMATCH, NXL_ERR_NOT_ALLOWED,
        NXL_ERR_REPOST_ACTIVE, NXL_ERR_UNKNOWN, NXL_ERR_NOT_SUPPORTED, NXL_ERR_REMOTE_DISCONNECT,
        NXL_ERR_CANCELED, NXL_ERR_NO_TELEMETRY,
        /* nxl's own, after NIXL's */
        NXL_ERR_TIMEOUT};
    for (size_t i = 0; i < sizeof(nixl) / sizeof(nixl[0]); i++)
        ck_assert_msg((int)nixl[i] == 1 - (int)i, "%s is %d, not %d", nxl_status_name(nixl[i]),
                      (int)nixl[i], 1 - (int)i);
    ck_assert_uint_eq(NCODES, 15);
    ck_assert_int_eq(NXL_ERR_TIMEOUT, -13);
    /* the map is dense from 1 down to -13 */
    for (size_t i = 0; i < NCODES; i++)
        ck_assert_int_eq(codes[i].value, 1 - (int)i);
}
END_TEST

START_TEST(t_status_strings)
{
    for (size_t i = 0; i < NCODES; i++) {
        ck_assert_int_eq((int)codes[i].st, codes[i].value);
        const char *n = nxl_status_name(codes[i].st), *t = nxl_strerror(codes[i].st);
        ck_assert_ptr_nonnull(n);
        ck_assert_ptr_nonnull(t);
        ck_assert_str_eq(n, codes[i].name);
        ck_assert_str_eq(t, codes[i].text);
        ck_assert_str_ne(t, "unknown status");
        /* names and sentences are distinct */
        for (size_t j = 0; j < i; j++) {
            ck_assert_str_ne(n, nxl_status_name(codes[j].st));
            ck_assert_str_ne(t, nxl_strerror(codes[j].st));
        }
    }
    ck_assert_str_eq(nxl_status_name(NXL_ERR_CANCELED), "ERR_CANCELED");
    ck_assert_str_eq(nxl_status_name(NXL_SUCCESS), "SUCCESS");
    ck_assert_str_eq(nxl_strerror(NXL_SUCCESS), "success");
}
END_TEST

START_TEST(t_status_unknown)
{
    static const int bad[] = {2, 3, 100, -14, -15, -100, 127, -128, 0x7fffffff, -0x7fffffff - 1};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        nxl_status_t st = (nxl_status_t)bad[i];
        ck_assert_str_eq(nxl_strerror(st), "unknown status");
        const char *n = nxl_status_name(st);
        ck_assert_ptr_nonnull(n);
        ck_assert(strlen(n) > 0);
        for (size_t j = 0; j < NCODES; j++)
            ck_assert_str_ne(n, codes[j].name);
    }
}
END_TEST

START_TEST(t_mem_names_version)
{
    ck_assert_str_eq(nxl_mem_name(NXL_DRAM), "DRAM");
    ck_assert_str_eq(nxl_mem_name(NXL_VRAM), "VRAM");
    ck_assert_str_eq(nxl_mem_name(NXL_BLK), "BLK");
    ck_assert_str_eq(nxl_mem_name(NXL_OBJ), "OBJ");
    ck_assert_str_eq(nxl_mem_name(NXL_FILE), "FILE");
    ck_assert_str_eq(nxl_mem_name(NXL_MEM_TYPES), "?");
    ck_assert_str_eq(nxl_mem_name((nxl_mem_t)-1), "?");
    ck_assert_str_eq(nxl_mem_name((nxl_mem_t)1000), "?");

    const char *v = nxl_version();
    ck_assert_ptr_nonnull(v);
    int maj = -1, min = -1, pat = -1, used = 0;
    ck_assert_msg(sscanf(v, "%d.%d.%d%n", &maj, &min, &pat, &used) == 3 && v[used] == 0,
                  "version '%s' is not MAJOR.MINOR.PATCH", v);
    /* the library and its header agree */
    ck_assert_int_eq(maj * 10000 + min * 100 + pat, NXL_VERSION_NUM);
}
END_TEST

/* --------------------------------------------------------------- agents */

/* A program built against an older header, run with this library: the
 * struct it passes is shorter. Neither the macro's function (given the
 * caller's size) nor the function older programs call (the layout of
 * -version-info 3) writes past it, and an agent is made from it. */
START_TEST(t_config_older_header)
{
    size_t old = offsetof(nxl_agent_config_t, tls_cert_file);
    unsigned char *mem = malloc(sizeof(nxl_agent_config_t) + 64);
    for (int pass = 0; pass < 2; pass++) {
        memset(mem, 0xa5, sizeof(nxl_agent_config_t) + 64);
        nxl_agent_config_t *c = (nxl_agent_config_t *)mem;
        if (pass == 0)
            nxl_agent_config_init_size(c, old);
        else
            (nxl_agent_config_init)(c);
        ck_assert_uint_eq(c->size, old);
        ck_assert_int_eq(c->log_level, -1);
        for (size_t i = old; i < sizeof(nxl_agent_config_t) + 64; i++)
            ck_assert_msg(mem[i] == 0xa5, "byte %zu past the caller's struct written", i);
        c->name = "old";
        nxl_agent_t *a;
        ck_assert_msg(nxl_agent_create(c, &a) == NXL_SUCCESS, "%s", nxl_agent_last_error(NULL));
        nxl_agent_destroy(a);
    }
    free(mem);
}
END_TEST

START_TEST(t_create_errors)
{
    nxl_agent_t *a = (nxl_agent_t *)&a; /* must come back NULL */
    ck_assert_int_eq(nxl_agent_create(NULL, &a), NXL_ERR_INVALID_PARAM);
    ck_assert_ptr_null(a);
    ck_sentence(nxl_agent_last_error(NULL), "config");

    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    ck_assert_uint_eq(c.size, sizeof(c));
    ck_assert_ptr_null(c.base);
    ck_assert_int_eq(c.log_level, -1);

    /* no name, an empty name, a name too long */
    a = (nxl_agent_t *)&a;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_ERR_INVALID_PARAM);
    ck_assert_ptr_null(a);
    ck_sentence(nxl_agent_last_error(NULL), "name");
    c.name = "";
    a = (nxl_agent_t *)&a;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_ERR_INVALID_PARAM);
    ck_assert_ptr_null(a);
    ck_sentence(nxl_agent_last_error(NULL), "name");
    char longname[1024];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = 0;
    c.name = longname;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_ERR_INVALID_PARAM);
    ck_assert_ptr_null(a);

    /* a size this library does not know */
    c.name = "A";
    static const size_t sizes[] = {0, 1, 8, sizeof(c) + 1, sizeof(c) * 2, (size_t)-1};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(*sizes); i++) {
        c.size = sizes[i];
        a = (nxl_agent_t *)&a;
        ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_ERR_INVALID_PARAM);
        ck_assert_ptr_null(a);
        ck_sentence(nxl_agent_last_error(NULL), "size");
    }

    /* a listen address that is none */
    nxl_agent_config_init(&c);
    c.name = "A";
    c.listen_addr = "no such host"; /* refused by the resolver without a DNS query */
    a = (nxl_agent_t *)&a;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_ERR_INVALID_PARAM);
    ck_assert_ptr_null(a);
    ck_sentence(nxl_agent_last_error(NULL), "no such host");

    /* a port that is taken */
    uint16_t taken;
    int s = tl_loopback_socket(1, &taken);
    c.listen_addr = "127.0.0.1";
    c.listen_port = taken;
    a = (nxl_agent_t *)&a;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_ERR_BACKEND);
    ck_assert_ptr_null(a);
    ck_sentence(nxl_agent_last_error(NULL), "listen");
    close(s);

    /* and a good one after all that */
    nxl_agent_config_init(&c);
    c.name = "A";
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_SUCCESS);
    ck_assert_ptr_nonnull(a);
    ck_assert_str_eq(nxl_agent_name(a), "A");
    ck_assert_ptr_nonnull(nxl_agent_base(a));
    ck_assert_uint_eq(nxl_agent_listen_port(a), 0);
    ck_assert_str_eq(nxl_agent_last_error(a), "");
    nxl_agent_destroy(a);
    nxl_agent_destroy(NULL);
}
END_TEST

START_TEST(t_plugins)
{
    size_t n = nxl_plugins_available(NULL, 0);
    ck_assert_uint_ge(n, 1);
    nxl_plugin_info_t *p = calloc(n + 1, sizeof(*p));
    memset(&p[n], 0x5a, sizeof(p[n])); /* one more than asked: untouched */
    ck_assert_uint_eq(nxl_plugins_available(p, n), n);
    int ucx = -1;
    for (size_t i = 0; i < n; i++) {
        ck_assert_ptr_nonnull(p[i].name);
        if (!strcmp(p[i].name, "UCX"))
            ucx = (int)i;
    }
    ck_assert_msg(ucx >= 0, "UCX is not listed");
    ck_assert_int_eq(p[ucx].available, 1);
    ck_assert_msg(strlen(p[ucx].reason) > 0 && strstr(p[ucx].reason, "UCX"),
                  "UCX reason '%s'", p[ucx].reason);
    ck_assert(p[ucx].mem_mask & (1u << NXL_DRAM));
    unsigned char *tail = (unsigned char *)&p[n];
    for (size_t i = 0; i < sizeof(p[n]); i++)
        ck_assert_uint_eq(tail[i], 0x5a);
    /* a smaller array still reports the total */
    nxl_plugin_info_t one;
    ck_assert_uint_eq(nxl_plugins_available(&one, 1), n);
    ck_assert_str_eq(one.name, p[0].name);
    free(p);
}
END_TEST

START_TEST(t_backend_errors)
{
    nxl_agent_t *a = tl_agent_bare("A", 0);
    ck_assert_int_eq(tl_backend_refused(a, "NOPE", NULL, 0), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(a), "NOPE");
    ck_assert_ptr_null(nxl_backend_get(a, "NOPE"));

    ck_assert_int_eq(tl_backend_refused(a, NULL, NULL, 0), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "name");

    /* unknown parameter key, then a NULL value: nothing is created */
    nxl_param_t bad = {"no_such_param", "1"};
    ck_assert_int_eq(tl_backend_refused(a, "UCX", &bad, 1), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "no_such_param");
    ck_assert_ptr_null(nxl_backend_get(a, "UCX"));
    /* a shared-memory FIFO size UCX cannot use */
    const char *fifos[] = {"1000", "lots", "1", "131072", ""};
    for (size_t i = 0; i < sizeof(fifos) / sizeof(*fifos); i++) {
        nxl_param_t ff = {"shm_fifo_size", fifos[i]};
        ck_assert_int_eq(tl_backend_refused(a, "UCX", &ff, 1), NXL_ERR_INVALID_PARAM);
        ck_sentence(nxl_agent_last_error(a), "shm_fifo_size");
        ck_assert_ptr_null(nxl_backend_get(a, "UCX"));
    }
    /* a cross-memory attach limit that is not a byte count */
    const char *cmaxes[] = {"lots", "-1", "12k", ""};
    for (size_t i = 0; i < sizeof(cmaxes) / sizeof(*cmaxes); i++) {
        nxl_param_t cm = {"cma_max", cmaxes[i]};
        ck_assert_int_eq(tl_backend_refused(a, "UCX", &cm, 1), NXL_ERR_INVALID_PARAM);
        ck_sentence(nxl_agent_last_error(a), "cma_max");
    }
    nxl_param_t nul = {"tls", NULL};
    nxl_backend_t *b = NULL;
    ck_assert_int_eq(nxl_backend_create(a, "UCX", &nul, 1, &b), NXL_ERR_INVALID_PARAM);
    ck_assert_ptr_null(b);
    ck_sentence(nxl_agent_last_error(a), "NULL");
    ck_assert_ptr_null(nxl_backend_get(a, "UCX"));

    /* now for real (a FIFO size given: set for UCX's shared memory, here
     * UCX's own 64), then a second time */
    nxl_param_t fifo = {"shm_fifo_size", "64"};
    ck_assert_int_eq(nxl_backend_create(a, "UCX", &fifo, 1, &b), NXL_SUCCESS);
    const char *tls = getenv("UCX_TLS");
    if (!tls || strstr(tls, "all") || strstr(tls, "sm") || strstr(tls, "posix"))
        ck_assert_str_eq(getenv("UCX_POSIX_FIFO_SIZE"), "64");
    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(nxl_backend_name(b), "UCX");
    ck_assert_ptr_eq(nxl_backend_get(a, "UCX"), b);
    ck_assert_int_eq(tl_backend_refused(a, "UCX", NULL, 0), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(a), "UCX");
    ck_assert_ptr_eq(nxl_backend_get(a, "UCX"), b);
    nxl_agent_destroy(a);
}
END_TEST

/* UCX's shared-memory FIFO: 256 elements by default (UCX's 64 fills with a
 * window of transfers, and UCX then never lets a dead peer go), as a
 * default only: a size already in the environment stays */
START_TEST(t_ucx_fifo_default)
{
    const char *tls = getenv("UCX_TLS");
    if (tls && !strstr(tls, "all") && !strstr(tls, "sm") && !strstr(tls, "posix")) {
        printf("SKIP: ucx_fifo_default: UCX_TLS=%s has no shared memory\n", tls);
        return;
    }
    for (int k = 0; k < 2; k++) {
        unsetenv("UCX_POSIX_FIFO_SIZE");
        unsetenv("UCX_SYSV_FIFO_SIZE");
        if (k)
            setenv("UCX_POSIX_FIFO_SIZE", "128", 1);
        nxl_agent_config_t c;
        nxl_agent_config_init(&c);
        c.name = "fifo";
        nxl_agent_t *a;
        ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_SUCCESS);
        ck_assert_int_eq(nxl_backend_create(a, "UCX", NULL, 0, NULL), NXL_SUCCESS);
        ck_assert_str_eq(getenv("UCX_POSIX_FIFO_SIZE"), k ? "128" : "256");
        ck_assert_str_eq(getenv("UCX_SYSV_FIFO_SIZE"), "256");
        nxl_agent_destroy(a);
    }
}
END_TEST

/* ------------------------------------------------------------ reactor */

static void user_timer(evutil_socket_t fd, short what, void *arg) { ++*(int *)arg; }

/* The agent lives in the application's base: the application's loop runs
 * the agent's callbacks next to its own events, and the agent leaves no
 * event behind when destroyed. */
START_TEST(t_embedded)
{
    struct event_base *base = event_base_new();
    ck_assert_ptr_nonnull(base);
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "A";
    c.base = base;
    c.listen_addr = "127.0.0.1";
    nxl_agent_t *a;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_SUCCESS);
    ck_assert_ptr_eq(nxl_agent_base(a), base);
    ck_assert_uint_ne(nxl_agent_listen_port(a), 0);
    ck_assert_int_eq(nxl_backend_create(a, "UCX", NULL, 0, NULL), NXL_SUCCESS);

    int fired = 0, mine = 0;
    struct event *tev = evtimer_new(base, user_timer, &mine);
    struct timeval tv = {0, 1000};
    evtimer_add(tev, &tv);
    ck_assert_int_eq(nxl_future_all(a, NULL, 0, tl_count_int_cb, &fired, NULL), NXL_SUCCESS);
    ck_assert_int_eq(fired, 0); /* never inline */
    uint64_t end = tl_now_ms() + 5000;
    while ((fired < 1 || mine < 1) && tl_now_ms() < end)
        event_base_loop(base, EVLOOP_ONCE);
    ck_assert_int_eq(fired, 1);
    ck_assert_int_eq(mine, 1);
    ck_assert_int_eq(tl_last, NXL_SUCCESS);
    /* a metadata fetch from itself, driven by the application's loop */
    nxl_future_t *f;
    ck_assert_int_eq(nxl_md_fetch(a, NULL, "127.0.0.1", nxl_agent_listen_port(a),
                                  tl_count_int_cb, &fired, &f),
                     NXL_SUCCESS);
    end = tl_now_ms() + 5000;
    while (fired < 2 && tl_now_ms() < end)
        event_base_loop(base, EVLOOP_ONCE);
    ck_assert_int_eq(fired, 2);
    /* its own name: refused as a remote agent, but the exchange ran */
    ck_assert_int_eq(nxl_future_status(f), NXL_ERR_MISMATCH);
    ck_sentence(nxl_future_error(f), "itself");
    nxl_future_release(f);

    event_free(tev);
    nxl_agent_destroy(a);
    /* nothing of the agent stays: bufferevents it freed leave finalizers
     * that libevent runs on the base's next turn, then the base is empty */
    event_base_loop(base, EVLOOP_NONBLOCK);
    ck_assert_int_eq(event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED |
                                                         EVENT_BASE_COUNT_ACTIVE |
                                                         EVENT_BASE_COUNT_VIRTUAL),
                     0);
    /* the base is the application's and still works */
    tev = evtimer_new(base, user_timer, &mine);
    evtimer_add(tev, &tv);
    ck_assert_int_eq(event_base_loop(base, EVLOOP_ONCE), 0);
    ck_assert_int_eq(mine, 2);
    event_free(tev);
    event_base_free(base);
}
END_TEST

START_TEST(t_own_bases)
{
    nxl_agent_t *a = tl_agent("A", 0), *b = tl_agent("B", 0);
    ck_assert_ptr_nonnull(nxl_agent_base(a));
    ck_assert_ptr_nonnull(nxl_agent_base(b));
    ck_assert_ptr_ne(nxl_agent_base(a), nxl_agent_base(b));
    /* a future of A completes on A's base only */
    int fa = 0;
    ck_assert_int_eq(nxl_future_all(a, NULL, 0, tl_count_int_cb, &fa, NULL), NXL_SUCCESS);
    for (int i = 0; i < 5; i++)
        nxl_agent_run_once(b, 0);
    ck_assert_int_eq(fa, 0);
    ck_assert(tl_run_until(a, &fa, 1, 5000));
    ck_assert_int_eq(fa, 1);
    nxl_agent_destroy(b);
    nxl_agent_destroy(a);
}
END_TEST

static struct {
    nxl_agent_t *a;
    int turns;
    nxl_status_t run_inside, once_inside, wait_inside;
    char err[512];
} R;

/* chains three operations, then stops the loop from the third callback */
static void chain_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    R.turns++;
    if (R.turns == 1) {
        R.run_inside = nxl_agent_run(R.a);
        snprintf(R.err, sizeof(R.err), "%s", nxl_agent_last_error(R.a));
        R.once_inside = nxl_agent_run_once(R.a, 0);
        R.wait_inside = nxl_future_wait(f, 0);
    }
    if (R.turns < 3)
        ck_assert_int_eq(nxl_future_all(R.a, NULL, 0, chain_cb, NULL, NULL), NXL_SUCCESS);
    else
        nxl_agent_stop(R.a);
}

START_TEST(t_run_stop)
{
    R.a = tl_agent("A", 0);
    R.turns = 0;
    ck_assert_int_eq(nxl_future_all(R.a, NULL, 0, chain_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert_int_eq(R.turns, 0);
    ck_assert_int_eq(nxl_agent_run(R.a), NXL_SUCCESS);
    ck_assert_int_eq(R.turns, 3);
    ck_assert_int_eq(R.run_inside, NXL_ERR_NOT_ALLOWED);
    ck_assert_int_eq(R.once_inside, NXL_ERR_NOT_ALLOWED);
    ck_assert_int_eq(R.wait_inside, NXL_ERR_NOT_ALLOWED);
    ck_sentence(R.err, "nxl_agent_run");
    /* run again: it runs until the next stop, not one turn */
    R.turns = 1;
    ck_assert_int_eq(nxl_future_all(R.a, NULL, 0, chain_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert_int_eq(nxl_agent_run(R.a), NXL_SUCCESS);
    ck_assert_int_eq(R.turns, 3);
    nxl_agent_destroy(R.a);
}
END_TEST

/* Over ~window seconds of nxl_agent_run_once(a, 300): returns each time,
 * and the process sleeps (CPU time well below wall time, few turns). */
static void assert_idle(nxl_agent_t *a, const char *when)
{
    /* let start-up or the last activity settle */
    for (int i = 0; i < 5; i++)
        nxl_agent_run_once(a, 20);
    double w0 = wall_s(), c0 = cpu_s();
    int turns = 0;
    while (wall_s() - w0 < 0.6) {
        ck_assert_int_eq(nxl_agent_run_once(a, 300), NXL_SUCCESS);
        turns++;
    }
    double w = wall_s() - w0, c = cpu_s() - c0;
    fprintf(stderr, "check_status: idle %s: %d turns, %.1f ms CPU in %.1f ms\n", when, turns,
            c * 1e3, w * 1e3);
    ck_assert_msg(w < 1.5, "%s: nxl_agent_run_once(300) overran: %.3f s", when, w);
    ck_assert_msg(c < 0.2 * w, "%s: busy: %.1f ms CPU in %.1f ms wall", when, c * 1e3, w * 1e3);
    ck_assert_msg(turns <= 6, "%s: %d reactor turns in %.0f ms: something wakes it", when,
                  turns, w * 1e3);
}

START_TEST(t_idle)
{
    nxl_agent_t *a = tl_agent("A", 1);
    assert_idle(a, "after start");
    /* some activity: a loopback notification and transfer, then idle */
    char *buf = malloc(1 << 20);
    nxl_desc_t d = {.addr = (uintptr_t)buf, .len = 1 << 20};
    ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &d, 1, NULL), NXL_SUCCESS);
    nxl_desc_t l = {.addr = (uintptr_t)buf, .len = 4096},
               r = {.addr = (uintptr_t)buf + 8192, .len = 4096};
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, rl = {NXL_DRAM, &r, 1};
    nxl_xfer_t *x;
    ck_assert_int_eq(nxl_xfer_create(a, NXL_WRITE, &ll, &rl, "A", NULL, &x), NXL_SUCCESS);
    int fired = 0;
    tl_fill(buf, 4096, 7);
    ck_assert_int_eq(nxl_xfer_post(x, tl_count_int_cb, &fired, NULL), NXL_SUCCESS);
    ck_assert_int_eq(nxl_notif_send(a, "A", "hi", 2, tl_count_int_cb, &fired, NULL),
                     NXL_SUCCESS);
    ck_assert(tl_run_until(a, &fired, 2, 5000));
    ck_assert_int_eq(nxl_xfer_status(x), NXL_SUCCESS);
    ck_assert(tl_check(buf + 8192, 4096, 7) < 0);
    ck_assert_uint_eq(nxl_notifs_drain(a, NULL, NULL), 1);
    assert_idle(a, "after activity");
    nxl_xfer_release(x);
    nxl_agent_destroy(a);
    free(buf);
}
END_TEST

/* run_once with a timeout returns about then when nothing happens; with 0
 * it does not wait. */
START_TEST(t_run_once_timeouts)
{
    nxl_agent_t *a = tl_agent("A", 0);
    for (int i = 0; i < 5; i++)
        nxl_agent_run_once(a, 20);
    double t0 = wall_s();
    ck_assert_int_eq(nxl_agent_run_once(a, 0), NXL_SUCCESS);
    ck_assert_msg(wall_s() - t0 < 0.05, "run_once(0) waited %.3f s", wall_s() - t0);
    t0 = wall_s();
    ck_assert_int_eq(nxl_agent_run_once(a, 200), NXL_SUCCESS);
    double w = wall_s() - t0;
    ck_assert_msg(w >= 0.15 && w < 1.0, "run_once(200) took %.3f s", w);
    nxl_agent_destroy(a);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("status");
    TL_TCASE(s, "codes", 30, NULL, NULL, t_status_values, t_status_strings, t_status_unknown,
             t_mem_names_version);
    TL_TCASE(s, "agent", 30, NULL, NULL, t_create_errors, t_config_older_header, t_plugins,
             t_backend_errors, t_ucx_fifo_default);
    TL_TCASE(s, "reactor", 30, NULL, NULL, t_embedded, t_own_bases, t_run_stop, t_idle,
             t_run_once_timeouts);
    return tl_run(s);
}
