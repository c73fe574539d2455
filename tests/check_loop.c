/* SPDX-License-Identifier: BSD-3-Clause */
/* The contract of NXL_LOOP_FD (include/nxl.h, "Embedding in any event
 * loop") on agents without a transport, driven by a poll() of the test's
 * own and, built with libuv, by <nxl/uv.h>: the backend descriptor refused
 * (with a sentence) where there is none, $NXL_LOOP, one adapter at a time,
 * no re-entry from a callback, a completed future that makes the
 * descriptor readable and is delivered by nxl_agent_run_once(a, 0), and a
 * timer of the engine (an etcd fetch's timeout) seen in
 * nxl_agent_backend_timeout() and run on time. Every run_once here is the
 * library's own, whatever NXL_TEST_LOOP says. */
#include "engine/internal.h"
#include "testlib.h"

#include <event2/event.h>
#include <poll.h>

#define run_once_lib(a, ms) (nxl_agent_run_once)(a, ms)

static nxl_agent_t *fd_agent(const char *name, const char *etcd)
{
    nxl_agent_config_t c;
    tl_config(&c, name, 0);
    c.loop = NXL_LOOP_FD;
    c.etcd_endpoints = etcd;
    return tl_agent_cfg(&c, 0);
}

/* 1 when the agent's descriptor is readable within ms */
static int readable(nxl_agent_t *a, int ms)
{
    struct pollfd p = {.fd = nxl_agent_backend_fd(a), .events = POLLIN};
    int n = poll(&p, 1, ms);
    ck_assert_int_ge(n, 0);
    return n == 1 && (p.revents & POLLIN);
}

/* ------------------------------------------------ no descriptor to give */

START_TEST(t_fd_refused)
{
    /* the application's libevent base */
    struct event_base *base = event_base_new();
    nxl_agent_config_t c;
    tl_config(&c, "L", 0);
    c.base = base;
    nxl_agent_t *a = tl_agent_cfg(&c, 0);
    ck_assert_int_eq(nxl_agent_backend_fd(a), -1);
    ck_sentence(nxl_agent_last_error(a), "NXL_LOOP_FD");
    ck_assert_msg(strstr(nxl_agent_last_error(a), "libevent"), "%s", nxl_agent_last_error(a));
    ck_assert_int_eq(nxl_agent_backend_timeout(a), -1);
    ck_assert_int_eq(nxl_agent_attach(a, "test"), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(a), "NXL_LOOP_FD");
    nxl_agent_destroy(a);
    event_base_free(base);

    /* threaded mode: its reactor thread runs its loop */
    tl_config(&c, "T", 0);
    c.threaded = 1;
    a = tl_agent_cfg(&c, 0);
    ck_assert_int_eq(nxl_agent_backend_fd(a), -1);
    ck_sentence(nxl_agent_last_error(a), "threaded");
    ck_assert_int_eq(nxl_agent_backend_timeout(a), -1);
    nxl_agent_destroy(a);

    /* an NXL_LOOP_FD agent has one; a threaded one cannot be made */
    a = fd_agent("F", NULL);
    ck_assert_int_ge(nxl_agent_backend_fd(a), 0);
    ck_assert_ptr_null(nxl_agent_base(a));
    nxl_agent_destroy(a);
    tl_config(&c, "TF", 0);
    c.threaded = 1;
    c.loop = NXL_LOOP_FD;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(NULL), "threaded");
    /* nor one with a libevent base, nor a loop that does not exist */
    base = event_base_new();
    tl_config(&c, "BF", 0);
    c.base = base;
    c.loop = NXL_LOOP_FD;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(NULL), "base");
    event_base_free(base);
    tl_config(&c, "X", 0);
    c.loop = 7;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(NULL), "NXL_LOOP_LIBEVENT or NXL_LOOP_FD");
}
END_TEST

/* NXL_LOOP chooses where the configuration leaves it open */
START_TEST(t_env)
{
    nxl_agent_config_t c;
    nxl_agent_t *a = NULL;
    setenv("NXL_LOOP", "fd", 1);
    a = tl_agent_bare("E1", 0);
    ck_assert_int_ge(nxl_agent_backend_fd(a), 0);
    nxl_agent_destroy(a);
    tl_config(&c, "E2", 0); /* threaded: its own loop, NXL_LOOP or not */
    c.threaded = 1;
    a = tl_agent_cfg(&c, 0);
    ck_assert_int_eq(nxl_agent_backend_fd(a), -1);
    nxl_agent_destroy(a);

    setenv("NXL_LOOP", "libevent", 1);
    a = tl_agent_bare("E3", 0);
    ck_assert_int_eq(nxl_agent_backend_fd(a), -1);
    ck_assert_ptr_nonnull(nxl_agent_base(a));
    nxl_agent_destroy(a);

    setenv("NXL_LOOP", "uv", 1);
    tl_config(&c, "E4", 0);
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_ERR_INVALID_PARAM);
    ck_assert_ptr_null(a);
    ck_sentence(nxl_agent_last_error(NULL), "NXL_LOOP");
    ck_assert_msg(strstr(nxl_agent_last_error(NULL), "\"uv\""), "%s", nxl_agent_last_error(NULL));
    unsetenv("NXL_LOOP");
}
END_TEST

/* ------------------------------------------------------ one adapter */

START_TEST(t_attach_twice)
{
    nxl_agent_t *a = fd_agent("A", NULL);
    ck_assert_int_eq(nxl_agent_attach(a, "first"), NXL_SUCCESS);
    ck_assert_int_eq(nxl_agent_attach(a, "second"), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(a), "first");
    ck_assert_int_eq(nxl_agent_attach(a, NULL), NXL_SUCCESS);
    ck_assert_int_eq(nxl_agent_attach(a, "second"), NXL_SUCCESS);
    ck_assert_int_eq(nxl_agent_attach(a, NULL), NXL_SUCCESS);
    nxl_agent_destroy(a);
}
END_TEST

/* -------------------------------------- a future through the descriptor */

typedef struct {
    int n;
    nxl_status_t st;
    nxl_status_t reentry, rerun; /* run_once and run from inside the callback */
    char err[512];
} cb_t;

static void on_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    cb_t *c = arg;
    c->n++;
    c->st = st;
    snprintf(c->err, sizeof(c->err), "%s", nxl_future_error(f));
}

static nxl_agent_t *reenter_agent;
static void on_done_reenter(nxl_future_t *f, nxl_status_t st, void *arg)
{
    cb_t *c = arg;
    on_done(f, st, arg);
    c->reentry = run_once_lib(reenter_agent, 0);
    snprintf(c->err, sizeof(c->err), "%s", nxl_agent_last_error(reenter_agent));
    c->rerun = nxl_agent_run(reenter_agent);
}

/* a future completed now (all of none): delivered on the next turn */
static nxl_future_t *done_soon(nxl_agent_t *a, nxl_done_cb cb, cb_t *c)
{
    nxl_future_t *f = NULL;
    ck_assert_int_eq(nxl_future_all(a, NULL, 0, cb, c, &f), NXL_SUCCESS);
    ck_assert_ptr_nonnull(f);
    return f;
}

START_TEST(t_future_fd)
{
    nxl_agent_t *a = fd_agent("A", NULL);
    ck_assert_int_eq(nxl_agent_backend_timeout(a), -1); /* nothing armed */
    ck_assert(!readable(a, 0));
    cb_t c = {0};
    nxl_future_t *f = done_soon(a, on_done, &c);
    ck_assert_int_eq(c.n, 0); /* never inline */
    ck_assert_int_eq(nxl_agent_backend_timeout(a), 0); /* ready now */
    ck_assert(readable(a, 1000));
    ck_assert_int_eq(c.n, 0); /* readable is all: the agent waits for run_once */
    ck_assert_int_eq(run_once_lib(a, 0), NXL_SUCCESS);
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(c.st, NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_status(f), NXL_SUCCESS);
    /* nothing left: quiet again */
    ck_assert(!readable(a, 20));
    ck_assert_int_eq(nxl_agent_backend_timeout(a), -1);
    ck_assert_int_eq(run_once_lib(a, 0), NXL_SUCCESS);
    ck_assert_int_eq(c.n, 1);
    nxl_future_release(f);
    nxl_agent_destroy(a);
}
END_TEST

START_TEST(t_no_reentry)
{
    nxl_agent_t *a = reenter_agent = fd_agent("A", NULL);
    cb_t c = {0};
    nxl_future_t *f = done_soon(a, on_done_reenter, &c);
    ck_assert(readable(a, 1000));
    ck_assert_int_eq(run_once_lib(a, 0), NXL_SUCCESS);
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(c.reentry, NXL_ERR_NOT_ALLOWED);
    ck_sentence(c.err, "re-entered");
    ck_assert_int_eq(c.rerun, NXL_ERR_NOT_ALLOWED);
    nxl_future_release(f);
    /* nothing corrupted: the next future is delivered as the first was */
    cb_t d = {0};
    f = done_soon(a, on_done, &d);
    ck_assert(readable(a, 1000));
    ck_assert_int_eq(run_once_lib(a, 0), NXL_SUCCESS);
    ck_assert_int_eq(d.n, 1);
    ck_assert_int_eq(c.n, 1);
    nxl_future_release(f);
    nxl_agent_destroy(a);
}
END_TEST

/* ------------------------------------- timers activated run in that order */

/* What a transport's timers see (nxl/transport.h): nxlt_timer_activate()
 * runs them in the order they were activated, in the same turn, as
 * libevent's active queue does (the engine's deliveries and the
 * transports' kicks are activated behind each other and rely on it); and
 * timers armed for the same moment run in the order they were armed. */
static struct nxl_backend order_be;
static const nxlt_ops_t order_ops = {.abi_version = NXLT_ABI_VERSION, .name = "ORDER"};
static int order_ran[8], order_n;

static void order_cb(nxlt_timer_t *t, void *arg)
{
    (void)t;
    if (order_n < 8)
        order_ran[order_n++] = (int)(intptr_t)arg;
}

static void activation_order(nxl_agent_t *a)
{
    order_be.agent = a;
    order_be.ops = &order_ops;
    order_be.ctx.agent = a;
    order_be.ctx.backend = &order_be;
    nxlt_timer_t *t[5];
    for (int i = 0; i < 5; i++)
        ck_assert_ptr_nonnull(t[i] = nxlt_timer_new(&order_be.ctx, order_cb, (void *)(intptr_t)i));
    static const int orders[3][5] = {{0, 1, 2, 3, 4}, {4, 2, 0, 3, 1}, {1, 3, 0, 4, 2}};
    for (int k = 0; k < 3; k++) {
        order_n = 0;
        for (int i = 0; i < 5; i++)
            nxlt_timer_activate(t[orders[k][i]]);
        for (int turns = 0; order_n < 5 && turns < 10; turns++)
            ck_assert_int_eq(run_once_lib(a, 0), NXL_SUCCESS);
        ck_assert_int_eq(order_n, 5);
        for (int i = 0; i < 5; i++)
            ck_assert_msg(order_ran[i] == orders[k][i],
                          "activation order %d: timer %d ran %d-th, timer %d was activated "
                          "then", k, order_ran[i], i + 1, orders[k][i]);
    }
    for (int i = 0; i < 5; i++)
        nxlt_timer_free(t[i]);
}

START_TEST(t_activate_order_fd)
{
    nxl_agent_t *a = fd_agent("A", NULL);
    activation_order(a);
    nxl_agent_destroy(a);
}
END_TEST

START_TEST(t_activate_order_libevent)
{
    nxl_agent_t *a = tl_agent("A", 0);
    activation_order(a);
    nxl_agent_destroy(a);
}
END_TEST

/* --------------------------------------------------- a timer of the engine */

/* an etcd "server" that accepts connections and never answers: an etcd
 * fetch waits there until its timeout */
static int silent_fd = -1;
static char silent_url[64];
static void silent_setup(void)
{
    uint16_t port;
    silent_fd = tl_loopback_socket(64, &port);
    snprintf(silent_url, sizeof(silent_url), "http://127.0.0.1:%u", port);
}
static void silent_teardown(void)
{
    if (silent_fd >= 0)
        close(silent_fd);
    silent_fd = -1;
}

#define FETCH_MS 300

/* an etcd fetch that times out after FETCH_MS, started on a; 0 when this
 * build has no etcd */
static int fetch_start(nxl_agent_t *a, cb_t *c, nxl_future_t **f)
{
    nxl_status_t st = nxl_md_fetch_etcd(a, "nobody", NULL, FETCH_MS, on_done, c, f);
    if (st == NXL_ERR_NOT_SUPPORTED) {
        printf("SKIP: %s: %s\n", tcase_name(), nxl_agent_last_error(a));
        return 0;
    }
    ck_assert_msg(st == NXL_SUCCESS, "nxl_md_fetch_etcd: %s", nxl_agent_last_error(a));
    return 1;
}

START_TEST(t_timer_fd)
{
    nxl_agent_t *a = fd_agent("A", silent_url);
    ck_assert_int_eq(nxl_agent_backend_timeout(a), -1);
    cb_t c = {0};
    nxl_future_t *f = NULL;
    uint64_t t0 = tl_now_ms();
    if (!fetch_start(a, &c, &f)) {
        nxl_agent_destroy(a);
        return;
    }
    int t = nxl_agent_backend_timeout(a);
    ck_assert_msg(t >= 0 && t <= FETCH_MS, "backend timeout %d ms after a %d ms fetch", t,
                  FETCH_MS);
    /* the loop of an application: the descriptor and the timeout, nothing
     * else; the largest timeout seen once the request is on its way */
    int most = -1;
    while (!c.n && tl_now_ms() - t0 < 5000) {
        t = nxl_agent_backend_timeout(a);
        ck_assert_msg(t <= FETCH_MS, "backend timeout %d ms", t);
        if (t > most)
            most = t;
        readable(a, t < 0 ? 1000 : t);
        ck_assert_int_eq(run_once_lib(a, 0), NXL_SUCCESS);
    }
    uint64_t took = tl_now_ms() - t0;
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(c.st, NXL_ERR_NOT_FOUND);
    ck_assert_msg(took >= FETCH_MS - 5 && took < FETCH_MS + 1000, "timed out after %llu ms",
                  (unsigned long long)took);
    ck_assert_msg(most >= FETCH_MS / 2, "the longest wait the agent asked for was %d ms", most);
    nxl_future_release(f);
    nxl_agent_destroy(a);
}
END_TEST

/* the same through tests/testlib.h's driver: the agent's own loop, or
 * with NXL_TEST_LOOP set (tests/loops.sh) the test's poll() or libuv loop */
START_TEST(t_driver)
{
    nxl_agent_t *a = fd_agent("A", silent_url);
    cb_t c = {0};
    nxl_future_t *f = done_soon(a, on_done, &c);
    ck_assert(tl_run_until(a, &c.n, 1, 1000));
    ck_assert_int_eq(c.st, NXL_SUCCESS);
    nxl_future_release(f);
    cb_t d = {0};
    uint64_t t0 = tl_now_ms();
    if (fetch_start(a, &d, &f)) {
        ck_assert(tl_run_until(a, &d.n, 1, 5000));
        uint64_t took = tl_now_ms() - t0;
        ck_assert_int_eq(d.st, NXL_ERR_NOT_FOUND);
        ck_assert_msg(took >= FETCH_MS - 5 && took < FETCH_MS + 1000, "timed out after %llu ms",
                      (unsigned long long)took);
        nxl_future_release(f);
    }
    nxl_agent_destroy(a);
}
END_TEST

/* ------------------------------------------------------------ libuv */

#ifdef NXL_TEST_HAVE_UV
static void uv_stop_cb(uv_timer_t *t) { uv_stop(t->loop); }

START_TEST(t_uv_attach)
{
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    nxl_agent_t *a = fd_agent("A", NULL);
    ck_assert_int_eq(nxl_uv_attach(a, &loop), NXL_SUCCESS);
    ck_assert_ptr_nonnull(nxl_uv_get(a, &loop));
    ck_assert_int_eq(nxl_uv_attach(a, &loop), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(a), "libuv");
    ck_assert_int_eq(nxl_agent_attach(a, "other"), NXL_ERR_NOT_ALLOWED);
    /* detached: handles closed and freed on the loop's next turn */
    ck_assert_int_eq(nxl_uv_detach(a, &loop), NXL_SUCCESS);
    ck_assert_ptr_null(nxl_uv_get(a, &loop));
    ck_assert_int_eq(nxl_uv_detach(a, &loop), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    /* and attachable again */
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ck_assert_int_eq(nxl_uv_attach(a, &loop), NXL_SUCCESS);
    ck_assert_int_eq(nxl_uv_detach(a, &loop), NXL_SUCCESS);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    nxl_agent_destroy(a);

    /* not an NXL_LOOP_FD agent */
    struct event_base *base = event_base_new();
    nxl_agent_config_t c;
    tl_config(&c, "L", 0);
    c.base = base;
    a = tl_agent_cfg(&c, 0);
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ck_assert_int_eq(nxl_uv_attach(a, &loop), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(a), "NXL_LOOP_FD");
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    nxl_agent_destroy(a);
    event_base_free(base);
}
END_TEST

/* on_done, then the default uv loop stops */
static void on_done_stop(nxl_future_t *f, nxl_status_t st, void *arg)
{
    on_done(f, st, arg);
    uv_stop(uv_default_loop());
}

START_TEST(t_uv_future)
{
    uv_loop_t *loop = uv_default_loop();
    nxl_agent_t *a = reenter_agent = fd_agent("A", NULL);
    ck_assert_int_eq(nxl_uv_attach(a, loop), NXL_SUCCESS);
    uv_timer_t bound;
    uv_timer_init(loop, &bound);
    uv_timer_start(&bound, uv_stop_cb, 2000, 0);
    cb_t c = {0};
    nxl_future_t *f = done_soon(a, on_done_stop, &c);
    ck_assert_int_eq(c.n, 0);
    uint64_t t0 = tl_now_ms();
    uv_run(loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(c.st, NXL_SUCCESS);
    ck_assert_msg(tl_now_ms() - t0 < 1000, "delivered after %llu ms",
                  (unsigned long long)(tl_now_ms() - t0));
    nxl_future_release(f);
    /* re-entry refused from a callback that libuv runs */
    cb_t d = {0};
    f = done_soon(a, on_done_reenter, &d);
    uv_run(loop, UV_RUN_NOWAIT);
    for (int i = 0; i < 100 && !d.n; i++)
        uv_run(loop, UV_RUN_ONCE);
    ck_assert_int_eq(d.n, 1);
    ck_assert_int_eq(d.reentry, NXL_ERR_NOT_ALLOWED);
    ck_sentence(d.err, "re-entered");
    ck_assert_int_eq(nxl_uv_get(a, loop)->last, NXL_SUCCESS);
    nxl_future_release(f);
    ck_assert_int_eq(nxl_uv_detach(a, loop), NXL_SUCCESS);
    uv_close((uv_handle_t *)&bound, NULL);
    ck_assert_int_eq(uv_run(loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(uv_loop_close(loop), 0);
    nxl_agent_destroy(a);
}
END_TEST

START_TEST(t_uv_timer)
{
    uv_loop_t *loop = uv_default_loop();
    nxl_agent_t *a = fd_agent("A", silent_url);
    ck_assert_int_eq(nxl_uv_attach(a, loop), NXL_SUCCESS);
    nxl_uv_t *s = nxl_uv_get(a, loop);
    ck_assert(!uv_is_active((uv_handle_t *)&s->timer)); /* nothing armed */
    uv_timer_t bound;
    uv_timer_init(loop, &bound);
    uv_timer_start(&bound, uv_stop_cb, 5000, 0);
    cb_t c = {0};
    nxl_future_t *f = NULL;
    nxl_status_t st = nxl_md_fetch_etcd(a, "nobody", NULL, FETCH_MS, on_done_stop, &c, &f);
    if (st == NXL_ERR_NOT_SUPPORTED) {
        printf("SKIP: %s: %s\n", tcase_name(), nxl_agent_last_error(a));
    } else {
        ck_assert_msg(st == NXL_SUCCESS, "nxl_md_fetch_etcd: %s", nxl_agent_last_error(a));
        uint64_t t0 = tl_now_ms();
        /* one iteration that does not wait: the prepare phase armed the
         * adapter's timer from the fetch's timeout */
        uv_run(loop, UV_RUN_NOWAIT);
        ck_assert(uv_is_active((uv_handle_t *)&s->timer));
        ck_assert_uint_le(uv_timer_get_due_in(&s->timer), FETCH_MS);
        uv_run(loop, UV_RUN_DEFAULT);
        uint64_t took = tl_now_ms() - t0;
        ck_assert_int_eq(c.n, 1);
        ck_assert_int_eq(c.st, NXL_ERR_NOT_FOUND);
        ck_assert_msg(took >= FETCH_MS - 5 && took < FETCH_MS + 1000, "timed out after %llu ms",
                      (unsigned long long)took);
        nxl_future_release(f);
    }
    ck_assert_int_eq(nxl_uv_detach(a, loop), NXL_SUCCESS);
    uv_close((uv_handle_t *)&bound, NULL);
    ck_assert_int_eq(uv_run(loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(uv_loop_close(loop), 0);
    nxl_agent_destroy(a);
}
END_TEST
#endif

int main(void)
{
    Suite *s = suite_create("loop");
    TL_TCASE(s, "refused", 10, NULL, NULL, t_fd_refused, t_env, t_attach_twice);
    TL_TCASE(s, "fd", 10, NULL, NULL, t_future_fd, t_no_reentry, t_activate_order_fd,
             t_activate_order_libevent);
    TL_TCASE(s, "fd_timer", 10, silent_setup, silent_teardown, t_timer_fd, t_driver);
#ifdef NXL_TEST_HAVE_UV
    TL_TCASE(s, "uv", 10, NULL, NULL, t_uv_attach, t_uv_future);
    TL_TCASE(s, "uv_timer", 10, silent_setup, silent_teardown, t_uv_timer);
#else
    printf("SKIP: uv: built without libuv (configure found no libuv; apt-get install "
           "libuv1-dev)\n");
#endif
    return tl_run(s);
}
