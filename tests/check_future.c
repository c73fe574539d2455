/* SPDX-License-Identifier: BSD-3-Clause */
/* The contract of futures and callbacks, on loopback transfers and
 * notifications of one agent "A" (UCX) and on metadata requests:
 * exactly-once callbacks, never inline, nxl_future_then / wait / all /
 * cancel / release, releasing and re-posting transfers, agent teardown
 * with pending futures, failed calls that start nothing; notifications to
 * a callback and through nxl_notifs_drain. */
#include "testlib.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>


#define BUF (8u << 20)

static nxl_agent_t *A;
static unsigned char *src, *dst;

static void setup(void)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "A";
    c.io_timeout_ms = 500; /* metadata requests that get no answer fail fast */
    ck_assert_int_eq(nxl_agent_create(&c, &A), NXL_SUCCESS);
    ck_assert_int_eq(nxl_backend_create(A, "UCX", NULL, 0, NULL), NXL_SUCCESS);
    src = calloc(1, BUF);
    dst = calloc(1, BUF);
    nxl_desc_t d[2] = {{.addr = (uintptr_t)src, .len = BUF}, {.addr = (uintptr_t)dst, .len = BUF}};
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, d, 2, NULL), NXL_SUCCESS);
}

static void teardown(void)
{
    nxl_agent_destroy(A);
    A = NULL;
    free(src);
    free(dst);
}

/* a callback counter */
typedef struct {
    int n;
    nxl_status_t st;
    int order;          /* global sequence number of the last call */
    nxl_future_t *f;    /* the future it was called with */
    char err[256];      /* nxl_future_error() inside the callback */
} ctr_t;

static int seq;

static void ctr_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    ctr_t *c = arg;
    c->n++;
    c->st = st;
    c->order = ++seq;
    c->f = f;
    ck_assert_int_eq(nxl_future_status(f), st);
    snprintf(c->err, sizeof(c->err), "%s", nxl_future_error(f));
}

/* runs A's reactor for ms milliseconds */
static void spin(int ms)
{
    uint64_t end = tl_now_ms() + (uint64_t)ms;
    while (tl_now_ms() < end)
        nxl_agent_run_once(A, 5);
}

/* a loopback WRITE src+soff -> dst+doff of len bytes */
static nxl_xfer_t *mkx(size_t soff, size_t doff, size_t len, const char *notif)
{
    nxl_xfer_t *x = NULL;
    nxl_status_t st = tl_xfer1(A, NXL_WRITE, (uintptr_t)src + soff, (uintptr_t)dst + doff, len,
                               "A", notif, &x);
    ck_assert_msg(st == NXL_SUCCESS, "nxl_xfer_create: %s", nxl_agent_last_error(A));
    ck_assert_ptr_nonnull(x);
    return x;
}

/* a TCP socket that listens and never answers; returns its port */
static int silent_fd = -1;
static uint16_t silent_listener(void)
{
    silent_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sin);
    ck_assert(bind(silent_fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    ck_assert(listen(silent_fd, 16) == 0);
    ck_assert(getsockname(silent_fd, (struct sockaddr *)&sin, &sl) == 0);
    return ntohs(sin.sin_port);
}

/* a port where nothing listens (bound, not listening: connections are refused) */
static int closed_fd = -1;
static uint16_t closed_port(void)
{
    closed_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sin);
    ck_assert(bind(closed_fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    ck_assert(getsockname(closed_fd, (struct sockaddr *)&sin, &sl) == 0);
    return ntohs(sin.sin_port);
}

/* ------------------------------------------------------ exactly once */

START_TEST(t_once_not_inline)
{
    static const size_t sizes[] = {1, 8, 4096, 1u << 20};
    for (size_t k = 0; k < 4; k++) {
        tl_fill(src, sizes[k], 10 + (uint32_t)k);
        nxl_xfer_t *x = mkx(0, 0, sizes[k], NULL);
        ctr_t c = {0};
        ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &c, NULL), NXL_SUCCESS);
        ck_assert_int_eq(c.n, 0); /* never inside the call */
        ck_assert(tl_run_until(A, &c.n, 1, 5000));
        spin(50);
        ck_assert_int_eq(c.n, 1);
        ck_assert_int_eq(c.st, NXL_SUCCESS);
        ck_assert_str_eq(c.err, "");
        ck_assert(tl_check(dst, sizes[k], 10 + (uint32_t)k) < 0);
        nxl_xfer_release(x);
    }
    /* a notification to itself */
    ctr_t c = {0};
    ck_assert_int_eq(nxl_notif_send(A, "A", "x", 1, ctr_cb, &c, NULL), NXL_SUCCESS);
    ck_assert_int_eq(c.n, 0);
    ck_assert(tl_run_until(A, &c.n, 1, 5000));
    spin(50);
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(c.st, NXL_SUCCESS);
    /* many in flight at once, each called once */
    enum { N = 64 };
    nxl_xfer_t *xs[N];
    ctr_t cs[N];
    memset(cs, 0, sizeof(cs));
    tl_fill(src, N * 1024, 99);
    for (int i = 0; i < N; i++) {
        xs[i] = mkx((size_t)i * 1024, (size_t)i * 1024, 1024, NULL);
        ck_assert_int_eq(nxl_xfer_post(xs[i], ctr_cb, &cs[i], NULL), NXL_SUCCESS);
    }
    int total = 0;
    for (int i = 0; i < N; i++)
        total += cs[i].n;
    ck_assert_int_eq(total, 0);
    uint64_t end = tl_now_ms() + 5000;
    do {
        nxl_agent_run_once(A, 10);
        total = 0;
        for (int i = 0; i < N; i++)
            total += cs[i].n;
    } while (total < N && tl_now_ms() < end);
    spin(50);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(cs[i].n, 1);
        ck_assert_int_eq(cs[i].st, NXL_SUCCESS);
        nxl_xfer_release(xs[i]);
    }
    ck_assert(tl_check(dst, N * 1024, 99) < 0);
}
END_TEST

START_TEST(t_status_sequence)
{
    nxl_xfer_t *x = mkx(0, 0, 65536, NULL);
    ck_assert_int_eq(nxl_xfer_status(x), NXL_ERR_NOT_POSTED);
    ck_assert_ptr_eq(nxl_xfer_backend(x), nxl_backend_get(A, "UCX"));
    nxl_future_t *f;
    ctr_t c = {0};
    ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &c, &f), NXL_SUCCESS);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(nxl_xfer_status(x), NXL_IN_PROG);
    ck_assert_int_eq(nxl_future_status(f), NXL_IN_PROG);
    ck_assert_ptr_null(nxl_future_peer(f));
    ck_assert(tl_run_until(A, &c.n, 1, 5000));
    ck_assert_int_eq(nxl_xfer_status(x), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_status(f), NXL_SUCCESS);
    ck_assert_ptr_eq(c.f, f);
    ck_assert_ptr_null(nxl_future_peer(f));
    nxl_future_release(f);
    nxl_xfer_release(x);
}
END_TEST

/* --------------------------------------------------------------- then */

static ctr_t then_inner;
static void adds_then(nxl_future_t *f, nxl_status_t st, void *arg)
{
    ctr_cb(f, st, arg);
    /* a callback added from a callback runs too, once, later */
    ck_assert_int_eq(nxl_future_then(f, ctr_cb, &then_inner), NXL_SUCCESS);
    ck_assert_int_eq(then_inner.n, 0);
}

START_TEST(t_then)
{
    nxl_xfer_t *x = mkx(0, 0, 4096, NULL);
    nxl_future_t *f;
    ctr_t c1 = {0}, c2 = {0}, c3 = {0}, c4 = {0};
    ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &c1, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_then(f, ctr_cb, &c2), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_then(f, NULL, &c2), NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(nxl_future_then(NULL, ctr_cb, &c2), NXL_ERR_INVALID_PARAM);
    ck_assert(tl_run_until(A, &c2.n, 1, 5000));
    ck_assert_int_eq(c1.n, 1);
    ck_assert_int_eq(c2.n, 1);
    ck_assert_int_lt(c1.order, c2.order); /* in the order added */
    ck_assert_int_eq(c2.st, NXL_SUCCESS);
    /* on a future already complete: a later turn, not inline */
    ck_assert_int_eq(nxl_future_then(f, ctr_cb, &c3), NXL_SUCCESS);
    ck_assert_int_eq(c3.n, 0);
    ck_assert(tl_run_until(A, &c3.n, 1, 5000));
    ck_assert_int_eq(c3.st, NXL_SUCCESS);
    /* twice more on it, and one that adds another from inside */
    memset(&then_inner, 0, sizeof(then_inner));
    ck_assert_int_eq(nxl_future_then(f, adds_then, &c4), NXL_SUCCESS);
    ck_assert_int_eq(c4.n, 0);
    ck_assert(tl_run_until(A, &then_inner.n, 1, 5000));
    spin(50);
    ck_assert_int_eq(c1.n, 1);
    ck_assert_int_eq(c2.n, 1);
    ck_assert_int_eq(c3.n, 1);
    ck_assert_int_eq(c4.n, 1);
    ck_assert_int_eq(then_inner.n, 1);
    ck_assert_int_eq(then_inner.st, NXL_SUCCESS);
    nxl_future_release(f);
    nxl_xfer_release(x);
}
END_TEST

/* --------------------------------------------------------------- wait */

START_TEST(t_wait)
{
    nxl_xfer_t *x = mkx(0, 0, 1u << 20, NULL);
    tl_fill(src, 1u << 20, 5);
    nxl_future_t *f;
    ctr_t c = {0};
    ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &c, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_wait(f, 5000), NXL_SUCCESS);
    ck_assert_int_eq(c.n, 1); /* its callbacks ran before wait returned */
    ck_assert(tl_check(dst, 1u << 20, 5) < 0);
    ck_assert_int_eq(nxl_future_wait(f, 0), NXL_SUCCESS); /* done stays done */
    ck_assert_int_eq(nxl_future_wait(f, -1), NXL_SUCCESS);
    ck_assert_int_eq(c.n, 1);
    nxl_future_release(f);
    nxl_xfer_release(x);
    ck_assert_int_eq(nxl_future_wait(NULL, 10), NXL_ERR_INVALID_PARAM);

    /* one that cannot finish yet: wait times out with IN_PROG, then the
     * request's own timeout (io_timeout_ms 500) fails it */
    uint16_t port = silent_listener();
    ctr_t m = {0};
    ck_assert_int_eq(nxl_md_fetch(A, NULL, "127.0.0.1", port, ctr_cb, &m, &f), NXL_SUCCESS);
    uint64_t t0 = tl_now_ms();
    ck_assert_int_eq(nxl_future_wait(f, 0), NXL_IN_PROG);
    ck_assert_int_eq(nxl_future_wait(f, 100), NXL_IN_PROG);
    uint64_t took = tl_now_ms() - t0;
    ck_assert_msg(took >= 90 && took < 400, "wait(100) took %llu ms", (unsigned long long)took);
    ck_assert_int_eq(m.n, 0);
    ck_assert_int_eq(nxl_future_status(f), NXL_IN_PROG);
    ck_assert_int_eq(nxl_future_wait(f, 5000), NXL_ERR_REMOTE_DISCONNECT);
    ck_assert_int_eq(m.n, 1);
    ck_assert_int_eq(m.st, NXL_ERR_REMOTE_DISCONNECT);
    ck_sentence(nxl_future_error(f), "no answer");
    ck_sentence(m.err, "no answer");
    nxl_future_release(f);
    close(silent_fd);

    /* a failure is what wait returns */
    port = closed_port();
    ck_assert_int_eq(nxl_md_fetch(A, NULL, "127.0.0.1", port, NULL, NULL, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_wait(f, 5000), NXL_ERR_REMOTE_DISCONNECT);
    ck_assert(is_sentence(nxl_future_error(f)));
    nxl_future_release(f);
    close(closed_fd);
}
END_TEST

static struct {
    nxl_status_t own, other;
    char err[512];
    int n;
} W;
static nxl_future_t *w_other;

static void waits_inside(nxl_future_t *f, nxl_status_t st, void *arg)
{
    W.n++;
    W.own = nxl_future_wait(f, 100);
    snprintf(W.err, sizeof(W.err), "%s", nxl_agent_last_error(A));
    W.other = nxl_future_wait(w_other, 100);
}

START_TEST(t_wait_in_callback)
{
    nxl_xfer_t *x = mkx(0, 0, 4096, NULL), *y = mkx(8192, 8192, 4096, NULL);
    ck_assert_int_eq(nxl_xfer_post(y, NULL, NULL, &w_other), NXL_SUCCESS);
    memset(&W, 0, sizeof(W));
    ck_assert_int_eq(nxl_xfer_post(x, waits_inside, NULL, NULL), NXL_SUCCESS);
    ck_assert(tl_run_until(A, &W.n, 1, 5000));
    ck_assert_int_eq(W.own, NXL_ERR_NOT_ALLOWED);
    ck_assert_int_eq(W.other, NXL_ERR_NOT_ALLOWED);
    ck_sentence(W.err, "nxl_future_wait");
    /* outside, the other one can be waited for */
    ck_assert_int_eq(nxl_future_wait(w_other, 5000), NXL_SUCCESS);
    nxl_future_release(w_other);
    nxl_xfer_release(x);
    nxl_xfer_release(y);
}
END_TEST

/* ------------------------------------------------------------ release */

static nxl_future_t *rel_f;
static void releases(nxl_future_t *f, nxl_status_t st, void *arg)
{
    ctr_cb(f, st, arg);
    ck_assert_ptr_eq(f, rel_f);
    nxl_future_release(f);
}

static ctr_t after_release;
static void after_rel_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    /* the library still holds the future the caller gave back */
    ck_assert_int_eq(nxl_future_status(f), NXL_SUCCESS);
    ctr_cb(f, st, arg);
}

static nxl_xfer_t *self_x;
static void releases_xfer(nxl_future_t *f, nxl_status_t st, void *arg)
{
    ctr_cb(f, st, arg);
    nxl_xfer_release(self_x); /* its own transfer, from its callback */
    self_x = NULL;
}

START_TEST(t_release_in_callback)
{
    nxl_xfer_t *x = mkx(0, 0, 4096, NULL);
    ctr_t c = {0};
    memset(&after_release, 0, sizeof(after_release));
    ck_assert_int_eq(nxl_xfer_post(x, releases, &c, &rel_f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_then(rel_f, after_rel_cb, &after_release), NXL_SUCCESS);
    ck_assert(tl_run_until(A, &after_release.n, 1, 5000));
    spin(30);
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(after_release.n, 1);
    ck_assert_int_eq(after_release.st, NXL_SUCCESS);
    /* out = NULL: the library releases it after the callback */
    for (int i = 0; i < 5; i++) {
        ctr_t d = {0};
        tl_fill(src, 4096, 70 + (uint32_t)i);
        ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &d, NULL), NXL_SUCCESS);
        ck_assert(tl_run_until(A, &d.n, 1, 5000));
        ck_assert_int_eq(d.st, NXL_SUCCESS);
        ck_assert(tl_check(dst, 4096, 70 + (uint32_t)i) < 0);
    }
    /* out = NULL and no callback at all */
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, NULL), NXL_SUCCESS);
    uint64_t end = tl_now_ms() + 5000;
    while (nxl_xfer_status(x) == NXL_IN_PROG && tl_now_ms() < end)
        nxl_agent_run_once(A, 10);
    ck_assert_int_eq(nxl_xfer_status(x), NXL_SUCCESS);
    nxl_future_release(NULL);
    nxl_xfer_release(x);
    /* a callback that releases its own transfer */
    self_x = mkx(0, 0, 4096, NULL);
    ctr_t e = {0};
    ck_assert_int_eq(nxl_xfer_post(self_x, releases_xfer, &e, NULL), NXL_SUCCESS);
    ck_assert(tl_run_until(A, &e.n, 1, 5000));
    spin(30);
    ck_assert_int_eq(e.n, 1);
    ck_assert_ptr_null(self_x);
}
END_TEST

/* ---------------------------------------------------------------- all */

START_TEST(t_all_success)
{
    enum { N = 4 };
    nxl_xfer_t *x[N];
    nxl_future_t *f[N];
    ctr_t c[N], g = {0};
    memset(c, 0, sizeof(c));
    tl_fill(src, N * 65536, 123);
    for (int i = 0; i < N; i++) {
        x[i] = mkx((size_t)i * 65536, (size_t)i * 65536, 65536, NULL);
        ck_assert_int_eq(nxl_xfer_post(x[i], ctr_cb, &c[i], &f[i]), NXL_SUCCESS);
    }
    nxl_future_t *all;
    ck_assert_int_eq(nxl_future_all(A, f, N, ctr_cb, &g, &all), NXL_SUCCESS);
    ck_assert_int_eq(g.n, 0);
    /* the inputs keep their owners: give ours back at once */
    for (int i = 0; i < N; i++)
        nxl_future_release(f[i]);
    ck_assert_int_eq(nxl_future_wait(all, 5000), NXL_SUCCESS);
    spin(30);
    ck_assert_int_eq(g.n, 1);
    ck_assert_int_eq(g.st, NXL_SUCCESS);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(c[i].n, 1);
        ck_assert_int_lt(c[i].order, g.order); /* the group completes after its members */
    }
    ck_assert(tl_check(dst, N * 65536, 123) < 0);
    nxl_future_release(all);

    /* over futures already complete; and over none */
    ctr_t h = {0}, z = {0};
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(nxl_xfer_post(x[i], NULL, NULL, &f[i]), NXL_SUCCESS);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(nxl_future_wait(f[i], 5000), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_all(A, f, N, ctr_cb, &h, NULL), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_all(A, NULL, 0, ctr_cb, &z, NULL), NXL_SUCCESS);
    ck_assert_int_eq(h.n, 0);
    ck_assert_int_eq(z.n, 0);
    ck_assert(tl_run_until(A, &h.n, 1, 5000));
    ck_assert(tl_run_until(A, &z.n, 1, 5000));
    spin(30);
    ck_assert_int_eq(h.n, 1);
    ck_assert_int_eq(h.st, NXL_SUCCESS);
    ck_assert_int_eq(z.n, 1);
    ck_assert_int_eq(z.st, NXL_SUCCESS);
    for (int i = 0; i < N; i++) {
        nxl_future_release(f[i]);
        nxl_xfer_release(x[i]);
    }
}
END_TEST

START_TEST(t_all_failure)
{
    /* [ok, canceled, disconnected, ok]: the first failure in array order */
    nxl_xfer_t *x0 = mkx(0, 0, 4096, NULL), *x1 = mkx(8192, 8192, 4096, NULL),
               *x3 = mkx(16384, 16384, 4096, NULL);
    uint16_t port = closed_port();
    nxl_future_t *f[4];
    ck_assert_int_eq(nxl_xfer_post(x0, NULL, NULL, &f[0]), NXL_SUCCESS);
    ck_assert_int_eq(nxl_xfer_post(x1, NULL, NULL, &f[1]), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_fetch(A, NULL, "127.0.0.1", port, NULL, NULL, &f[2]), NXL_SUCCESS);
    ck_assert_int_eq(nxl_xfer_post(x3, NULL, NULL, &f[3]), NXL_SUCCESS);
    ctr_t g = {0}, h = {0};
    nxl_future_t *rev[4] = {f[0], f[2], f[1], f[3]};
    nxl_future_t *all, *all2;
    ck_assert_int_eq(nxl_future_all(A, f, 4, ctr_cb, &g, &all), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_all(A, rev, 4, ctr_cb, &h, &all2), NXL_SUCCESS);
    nxl_future_cancel(f[1]);
    ck_assert_int_eq(nxl_future_wait(all, 5000), NXL_ERR_CANCELED);
    ck_assert_int_eq(nxl_future_wait(all2, 5000), NXL_ERR_REMOTE_DISCONNECT);
    spin(30);
    ck_assert_int_eq(g.n, 1);
    ck_assert_int_eq(h.n, 1);
    ck_assert_int_eq(g.st, NXL_ERR_CANCELED);
    ck_assert_int_eq(h.st, NXL_ERR_REMOTE_DISCONNECT);
    ck_assert(is_sentence(nxl_future_error(all)));
    ck_assert(is_sentence(nxl_future_error(all2)));
    ck_assert_int_eq(nxl_future_status(f[0]), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_status(f[3]), NXL_SUCCESS);
    for (int i = 0; i < 4; i++)
        nxl_future_release(f[i]);
    nxl_future_release(all);
    nxl_future_release(all2);
    close(closed_fd);

    /* canceling the group: it completes once with CANCELED, the members
     * finish on their own */
    ctr_t k = {0}, m = {0};
    nxl_future_t *one;
    ck_assert_int_eq(nxl_xfer_post(x0, ctr_cb, &m, &one), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_all(A, &one, 1, ctr_cb, &k, &all), NXL_SUCCESS);
    nxl_future_cancel(all);
    ck_assert_int_eq(k.n, 0);
    ck_assert(tl_run_until(A, &m.n, 1, 5000));
    spin(30);
    ck_assert_int_eq(k.n, 1);
    ck_assert_int_eq(k.st, NXL_ERR_CANCELED);
    ck_assert_int_eq(m.n, 1);
    ck_assert_int_eq(m.st, NXL_SUCCESS);
    nxl_future_release(all);
    nxl_future_release(one);
    nxl_xfer_release(x0);
    nxl_xfer_release(x1);
    nxl_xfer_release(x3);
}
END_TEST

/* ------------------------------------------------------------- cancel */

START_TEST(t_cancel)
{
    nxl_xfer_t *x = mkx(0, 0, 1u << 20, NULL);
    nxl_future_t *f;
    ctr_t c = {0};
    ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &c, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_xfer_status(x), NXL_IN_PROG);
    nxl_future_cancel(f);
    ck_assert_int_eq(c.n, 0); /* on the next turn */
    /* in flight until its callbacks ran (the header's rule 3) */
    ck_assert_int_eq(nxl_future_status(f), NXL_IN_PROG);
    ck_assert_int_eq(nxl_xfer_status(x), NXL_IN_PROG);
    nxl_future_cancel(f);
    ck_assert(tl_run_until(A, &c.n, 1, 5000));
    spin(100); /* the transport finishing the detached operation calls nobody */
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(c.st, NXL_ERR_CANCELED);
    ck_assert(is_sentence(c.err));
    ck_assert_int_eq(nxl_xfer_status(x), NXL_ERR_CANCELED);
    nxl_future_cancel(f);
    nxl_future_cancel(NULL);
    spin(30);
    ck_assert_int_eq(c.n, 1);
    nxl_future_release(f);
    /* the transfer can be posted again, and works */
    tl_fill(src, 1u << 20, 88);
    ctr_t d = {0};
    ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &d, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_wait(f, 5000), NXL_SUCCESS);
    ck_assert(tl_check(dst, 1u << 20, 88) < 0);
    /* canceling a complete future changes nothing */
    nxl_future_cancel(f);
    spin(30);
    ck_assert_int_eq(d.n, 1);
    ck_assert_int_eq(d.st, NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_status(f), NXL_SUCCESS);
    nxl_future_release(f);
    nxl_xfer_release(x);

    /* a metadata request that would time out later: canceled once */
    uint16_t port = silent_listener();
    ctr_t m = {0};
    ck_assert_int_eq(nxl_md_fetch(A, NULL, "127.0.0.1", port, ctr_cb, &m, &f), NXL_SUCCESS);
    spin(50);
    ck_assert_int_eq(m.n, 0);
    nxl_future_cancel(f);
    ck_assert_int_eq(m.n, 0);
    spin(800); /* past io_timeout_ms */
    ck_assert_int_eq(m.n, 1);
    ck_assert_int_eq(m.st, NXL_ERR_CANCELED);
    nxl_future_release(f);
    close(silent_fd);
}
END_TEST

/* A callback that starts an operation which finishes at once (a group of
 * no futures) gets its completion on the next reactor turn: a chain of them
 * advances one step per turn, and nxl_agent_run_once(a, 0) returns (it
 * looped inside libevent for as long as the chain went on). */
static int chain_n;

static void chain_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    ck_assert_int_eq(st, NXL_SUCCESS);
    if (++chain_n < 1000)
        ck_assert_int_eq(nxl_future_all(A, NULL, 0, chain_cb, NULL, NULL), NXL_SUCCESS);
}

START_TEST(t_chain_one_per_turn)
{
    chain_n = 0;
    ck_assert_int_eq(nxl_future_all(A, NULL, 0, chain_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert_int_eq(chain_n, 0);
    for (int i = 1; i <= 10; i++) {
        ck_assert_int_eq(nxl_agent_run_once(A, 0), NXL_SUCCESS);
        ck_assert_int_le(chain_n, i);
    }
    ck_assert_int_ge(chain_n, 1);
    /* and it keeps going on its own, through turns with a timeout too */
    ck_assert(tl_run_until(A, &chain_n, 1000, 10000));
    ck_assert_int_eq(chain_n, 1000);
}
END_TEST

START_TEST(t_release_inflight)
{
    for (int i = 0; i < 3; i++) {
        nxl_xfer_t *x = mkx(0, 0, 1u << 20, NULL);
        ctr_t c = {0};
        nxl_future_t *f = NULL;
        ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &c, i == 2 ? &f : NULL), NXL_SUCCESS);
        ck_assert_int_eq(nxl_xfer_status(x), NXL_IN_PROG);
        nxl_xfer_release(x);
        ck_assert_int_eq(c.n, 0);
        if (i == 1)
            nxl_agent_run_once(A, 0);
        ck_assert(tl_run_until(A, &c.n, 1, 5000));
        spin(100);
        ck_assert_int_eq(c.n, 1);
        ck_assert_int_eq(c.st, NXL_ERR_CANCELED);
        if (f) {
            ck_assert_int_eq(nxl_future_status(f), NXL_ERR_CANCELED);
            nxl_future_release(f);
        }
    }
}
END_TEST

/* ------------------------------------------------------------- repost */

START_TEST(t_repost_active)
{
    nxl_xfer_t *x = mkx(0, 0, 1u << 20, NULL);
    ctr_t c = {0}, d = {0};
    nxl_future_t *f, *g = (nxl_future_t *)&g;
    ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &c, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_xfer_status(x), NXL_IN_PROG);
    ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &d, &g), NXL_ERR_REPOST_ACTIVE);
    ck_assert_ptr_null(g);
    ck_sentence(nxl_agent_last_error(A), "in flight");
    ck_assert_int_eq(nxl_xfer_set_notif(x, "n", 1), NXL_ERR_REPOST_ACTIVE);
    ck_assert_int_eq(nxl_xfer_status(x), NXL_IN_PROG); /* the first one is untouched */
    ck_assert_int_eq(nxl_future_wait(f, 5000), NXL_SUCCESS);
    spin(50);
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(d.n, 0); /* the refused post started nothing */
    nxl_future_release(f);
    nxl_xfer_release(x);
}
END_TEST

static nxl_xfer_t *chain_x;
static int chain_left;
static void reposts(nxl_future_t *f, nxl_status_t st, void *arg)
{
    ctr_cb(f, st, arg);
    /* the previous post is complete inside its callback */
    ck_assert_int_eq(nxl_xfer_status(chain_x), st);
    if (--chain_left > 0)
        ck_assert_int_eq(nxl_xfer_post(chain_x, reposts, arg, NULL), NXL_SUCCESS);
}

START_TEST(t_repost)
{
    nxl_xfer_t *x = mkx(4096, 65536, 100000, NULL);
    for (uint32_t k = 0; k < 3; k++) {
        tl_fill(src + 4096, 100000, 1000 + k);
        ctr_t c = {0};
        ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &c, NULL), NXL_SUCCESS);
        ck_assert_int_eq(c.n, 0);
        ck_assert(tl_run_until(A, &c.n, 1, 5000));
        ck_assert_int_eq(c.st, NXL_SUCCESS);
        ck_assert_int_eq(nxl_xfer_status(x), NXL_SUCCESS);
        long bad = tl_check(dst + 65536, 100000, 1000 + k);
        ck_assert_msg(bad < 0, "post %u: byte %ld wrong", k + 1, bad);
    }
    nxl_xfer_release(x);
    /* re-posting from the callback */
    chain_x = mkx(0, 0, 4096, NULL);
    chain_left = 5;
    ctr_t c = {0};
    ck_assert_int_eq(nxl_xfer_post(chain_x, reposts, &c, NULL), NXL_SUCCESS);
    ck_assert(tl_run_until(A, &c.n, 5, 5000));
    spin(50);
    ck_assert_int_eq(c.n, 5);
    ck_assert_int_eq(c.st, NXL_SUCCESS);
    nxl_xfer_release(chain_x);
}
END_TEST


/* ------------------------------------------- statuses follow the callbacks */

/* Loopback puts into memory UCX allocated finish inside nxl_xfer_post.
 * Whatever the transport did, the application sees one order: the future
 * and the transfer read NXL_IN_PROG until the callbacks ran; a re-post is
 * refused until then; a release or cancel before then gives CANCELED; a
 * teardown before then gives CANCELED. */
static nxl_xfer_t *mkx_alloc(unsigned char *s, unsigned char *d, size_t len)
{
    nxl_desc_t l = {.addr = (uintptr_t)s, .len = len}, r = {.addr = (uintptr_t)d, .len = len};
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, rl = {NXL_DRAM, &r, 1};
    nxl_xfer_t *x = NULL;
    ck_assert_int_eq(nxl_xfer_create(A, NXL_WRITE, &ll, &rl, "A", NULL, &x), NXL_SUCCESS);
    return x;
}

START_TEST(t_status_follows_callbacks)
{
    void *p, *q;
    ck_assert_int_eq(nxl_mem_alloc(A, NXL_DRAM, 1u << 20, 0, &p), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_alloc(A, NXL_DRAM, 1u << 20, 0, &q), NXL_SUCCESS);
    memset(p, 7, 4096);
    nxl_xfer_t *x = mkx_alloc(p, q, 4096);
    for (int round = 0; round < 3; round++) {
        nxl_future_t *f, *g = NULL;
        ctr_t c = {0};
        ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &c, &f), NXL_SUCCESS);
        /* no reactor turn yet */
        ck_assert_int_eq(nxl_future_status(f), NXL_IN_PROG);
        ck_assert_int_eq(nxl_xfer_status(x), NXL_IN_PROG);
        ck_assert_str_eq(nxl_future_error(f), "");
        ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, &g), NXL_ERR_REPOST_ACTIVE);
        ck_assert_ptr_null(g);
        ck_assert_int_eq(c.n, 0);
        ck_assert(tl_run_until(A, &c.n, 1, 5000));
        ck_assert_int_eq(c.st, NXL_SUCCESS);
        ck_assert_int_eq(nxl_future_status(f), NXL_SUCCESS);
        ck_assert_int_eq(nxl_xfer_status(x), NXL_SUCCESS);
        nxl_future_release(f);
    }
    /* canceled before its callback: CANCELED, whatever the puts did */
    nxl_future_t *f;
    ctr_t c = {0};
    ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &c, &f), NXL_SUCCESS);
    nxl_future_cancel(f);
    ck_assert_int_eq(nxl_future_status(f), NXL_IN_PROG);
    ck_assert(tl_run_until(A, &c.n, 1, 5000));
    spin(20);
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(c.st, NXL_ERR_CANCELED);
    ck_assert_int_eq(nxl_future_status(f), NXL_ERR_CANCELED);
    ck_assert_int_eq(nxl_xfer_status(x), NXL_ERR_CANCELED);
    nxl_future_release(f);
    /* released right after the post: the callback says CANCELED */
    ctr_t d = {0};
    ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &d, &f), NXL_SUCCESS);
    nxl_xfer_release(x);
    ck_assert_int_eq(d.n, 0);
    ck_assert(tl_run_until(A, &d.n, 1, 5000));
    spin(20);
    ck_assert_int_eq(d.n, 1);
    ck_assert_int_eq(d.st, NXL_ERR_CANCELED);
    nxl_future_release(f);
    /* teardown before the callback: CANCELED for every one of them */
    enum { N = 8 };
    ctr_t e[N];
    memset(e, 0, sizeof(e));
    nxl_xfer_t *xs[N];
    for (int i = 0; i < N; i++) {
        xs[i] = mkx_alloc((unsigned char *)p + i * 4096, (unsigned char *)q + i * 4096, 4096);
        ck_assert_int_eq(nxl_xfer_post(xs[i], ctr_cb, &e[i], NULL), NXL_SUCCESS);
    }
    nxl_agent_destroy(A);
    A = NULL;
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(e[i].n, 1);
        ck_assert_int_eq(e[i].st, NXL_ERR_CANCELED);
    }
}
END_TEST

/* ----------------------------------------------------------- teardown */

START_TEST(t_destroy_pending)
{
    enum { N = 40 };
    nxl_xfer_t *x[N];
    ctr_t c[N], n = {0}, m = {0}, g = {0}, h = {0};
    memset(c, 0, sizeof(c));
    nxl_future_t *f[N];
    for (int i = 0; i < N; i++) {
        x[i] = mkx((size_t)i * 65536, (size_t)i * 65536, 65536, NULL);
        ck_assert_int_eq(nxl_xfer_post(x[i], ctr_cb, &c[i], i % 2 ? &f[i] : NULL), NXL_SUCCESS);
        ck_assert_int_eq(nxl_xfer_status(x[i]), NXL_IN_PROG);
    }
    ck_assert_int_eq(nxl_notif_send(A, "A", "bye", 3, ctr_cb, &n, NULL), NXL_SUCCESS);
    uint16_t port = silent_listener();
    ck_assert_int_eq(nxl_md_fetch(A, NULL, "127.0.0.1", port, ctr_cb, &m, NULL), NXL_SUCCESS);
    nxl_future_t *odd[2] = {f[1], f[3]};
    ck_assert_int_eq(nxl_future_all(A, odd, 2, ctr_cb, &g, NULL), NXL_SUCCESS);
    nxl_future_t *mine;
    ck_assert_int_eq(nxl_future_all(A, NULL, 0, ctr_cb, &h, &mine), NXL_SUCCESS);
    /* nothing ran yet; destroy without running the loop */
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(c[i].n, 0);
    nxl_agent_destroy(A);
    A = NULL;
    for (int i = 0; i < N; i++) {
        ck_assert_msg(c[i].n == 1, "transfer %d: %d callbacks", i, c[i].n);
        ck_assert_msg(c[i].st == NXL_ERR_CANCELED, "transfer %d: %s", i,
                      nxl_status_name(c[i].st));
    }
    ck_assert_int_eq(m.n, 1);
    ck_assert_int_eq(m.st, NXL_ERR_CANCELED);
    /* the notification may have been sent already */
    ck_assert_int_eq(n.n, 1);
    ck_assert(n.st == NXL_ERR_CANCELED || n.st == NXL_SUCCESS);
    ck_assert_int_eq(g.n, 1);
    ck_assert_int_eq(g.st, NXL_ERR_CANCELED);
    /* complete inside its call, never delivered: still in progress to the
     * application, so teardown cancels it like the others */
    ck_assert_int_eq(h.n, 1);
    ck_assert_int_eq(h.st, NXL_ERR_CANCELED);
    /* the futures we hold outlive the agent until released */
    for (int i = 1; i < N; i += 2) {
        ck_assert_int_eq(nxl_future_status(f[i]), NXL_ERR_CANCELED);
        nxl_future_release(f[i]);
    }
    ck_assert_int_eq(nxl_future_status(mine), NXL_ERR_CANCELED);
    nxl_future_release(mine);
    close(silent_fd);
}
END_TEST

/* Futures are recycled by the agent: one made after another was released
 * carries nothing of it (callbacks, error, status), and each callback of
 * either runs exactly once. */
START_TEST(t_recycled_clean)
{
    nxl_xfer_t *x = mkx(0, 0, 4096, NULL);
    ctr_t a = {0}, b = {0}, c = {0};
    nxl_future_t *f;
    ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &a, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_then(f, ctr_cb, &b), NXL_SUCCESS);
    nxl_future_cancel(f);
    ck_assert(tl_run_until(A, &b.n, 1, 5000));
    ck_assert_int_eq(a.st, NXL_ERR_CANCELED);
    ck_assert_str_ne(nxl_future_error(f), "");
    /* added once delivered: runs on a later turn, once */
    ck_assert_int_eq(nxl_future_then(f, ctr_cb, &c), NXL_SUCCESS);
    ck_assert(tl_run_until(A, &c.n, 1, 5000));
    nxl_future_release(f);
    for (int k = 0; k < 50; k++) {
        ctr_t d = {0}, e = {0};
        nxl_future_t *g;
        ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &d, &g), NXL_SUCCESS);
        ck_assert_int_eq(nxl_future_status(g), NXL_IN_PROG);
        ck_assert_str_eq(nxl_future_error(g), "");
        if (k % 2)
            ck_assert_int_eq(nxl_future_then(g, ctr_cb, &e), NXL_SUCCESS);
        ck_assert(tl_run_until(A, &d.n, 1, 5000));
        ck_assert_int_eq(d.st, NXL_SUCCESS);
        ck_assert_str_eq(nxl_future_error(g), "");
        ck_assert_int_eq(nxl_future_status(g), NXL_SUCCESS);
        spin(2);
        ck_assert_int_eq(d.n, 1);
        ck_assert_int_eq(e.n, k % 2);
        nxl_future_release(g);
    }
    spin(20);
    ck_assert_int_eq(a.n, 1);
    ck_assert_int_eq(b.n, 1);
    ck_assert_int_eq(c.n, 1);
    nxl_xfer_release(x);
}
END_TEST

/* Futures held when the agent goes outlive it even when they, or their
 * predecessors, went through the agent's spares (ASan and valgrind see a
 * future handed back to a freed agent). */
START_TEST(t_recycled_outlive_agent)
{
    enum { N = 8 };
    nxl_xfer_t *x[N];
    nxl_future_t *f[N], *g[N];
    ctr_t c[N];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < N; i++)
        x[i] = mkx((size_t)i * 4096, (size_t)i * 4096, 4096, NULL);
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < N; i++)
            ck_assert_int_eq(nxl_xfer_post(x[i], ctr_cb, &c[i], NULL), NXL_SUCCESS);
        for (int i = 0; i < N; i++)
            ck_assert(tl_run_until(A, &c[i].n, round + 1, 5000));
    }
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(nxl_xfer_post(x[i], ctr_cb, &c[i], &f[i]), NXL_SUCCESS);
    for (int i = 0; i < N; i++)
        ck_assert(tl_run_until(A, &c[i].n, 21, 5000));
    spin(5);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(nxl_xfer_post(x[i], ctr_cb, &c[i], &g[i]), NXL_SUCCESS);
    nxl_agent_destroy(A);
    A = NULL;
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(c[i].n, 22);
        ck_assert_int_eq(nxl_future_status(f[i]), NXL_SUCCESS);
        ck_assert_int_eq(nxl_future_status(g[i]), NXL_ERR_CANCELED);
    }
    for (int i = 0; i < N; i++) {
        nxl_future_release(f[i]);
        nxl_future_release(g[i]);
    }
}
END_TEST

/* --------------------------------------------------- failed calls start nothing */

START_TEST(t_failed_calls)
{
    ctr_t c = {0};
    nxl_future_t *f = (nxl_future_t *)&f;
    nxl_xfer_t *x = (nxl_xfer_t *)&x;
    /* prep errors */
    nxl_desc_t l = {.addr = (uintptr_t)src, .len = 16}, out = {.addr = (uintptr_t)&c, .len = 16};
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, ol = {NXL_DRAM, &out, 1};
    ck_assert_int_eq(nxl_xfer_create(A, NXL_WRITE, &ll, &ol, "A", NULL, &x), NXL_ERR_NOT_FOUND);
    ck_assert_ptr_null(x);
    ck_sentence(nxl_agent_last_error(A), "outside");
    /* the sentences name the call made, not the ones it is made of */
    ck_sentence(nxl_agent_last_error(A), "nxl_xfer_create: ");
    x = (nxl_xfer_t *)&x;
    ck_assert_int_eq(nxl_xfer_create(A, NXL_WRITE, &ll, &ll, "nobody", NULL, &x),
                     NXL_ERR_NOT_FOUND);
    ck_assert_ptr_null(x);
    nxl_desc_t l2[2] = {l, l};
    nxl_dlist_t ll2 = {NXL_DRAM, l2, 2};
    ck_assert_int_eq(nxl_xfer_create(A, NXL_WRITE, &ll, &ll2, "A", NULL, &x),
                     NXL_ERR_INVALID_PARAM);
    nxl_desc_t big = {.addr = (uintptr_t)dst, .len = 32};
    nxl_dlist_t bl = {NXL_DRAM, &big, 1};
    ck_assert_int_eq(nxl_xfer_create(A, NXL_WRITE, &ll, &bl, "A", NULL, &x),
                     NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "bytes");
    ck_sentence(nxl_agent_last_error(A), "nxl_xfer_create: ");
    nxl_xfer_opts_t o;
    nxl_xfer_opts_init(&o);
    o.notif = "x";
    o.notif_len = NXL_NOTIF_MAX + 1;
    ck_assert_int_eq(nxl_xfer_create(A, NXL_WRITE, &ll, &ll, "A", &o, &x), NXL_ERR_INVALID_PARAM);
    ck_assert_ptr_null(x);
    o.size = 3;
    o.notif = NULL;
    ck_assert_int_eq(nxl_xfer_create(A, NXL_WRITE, &ll, &ll, "A", &o, &x), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "nxl_xfer_create: options size");
    /* notification errors */
    char *huge = calloc(1, NXL_NOTIF_MAX + 1);
    ck_assert_int_eq(nxl_notif_send(A, "A", huge, NXL_NOTIF_MAX + 1, ctr_cb, &c, &f),
                     NXL_ERR_INVALID_PARAM);
    ck_assert_ptr_null(f);
    free(huge);
    f = (nxl_future_t *)&f;
    ck_assert_int_eq(nxl_notif_send(A, "nobody", "x", 1, ctr_cb, &c, &f), NXL_ERR_NOT_FOUND);
    ck_assert_ptr_null(f);
    ck_sentence(nxl_agent_last_error(A), "nobody");
    ck_assert_int_eq(nxl_notif_send(A, NULL, "x", 1, ctr_cb, &c, NULL), NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(nxl_notif_send(A, "A", NULL, 5, ctr_cb, &c, NULL), NXL_ERR_INVALID_PARAM);
    /* metadata requests that cannot start */
    f = (nxl_future_t *)&f;
    ck_assert_int_eq(nxl_md_fetch(A, NULL, "", 1234, ctr_cb, &c, &f), NXL_ERR_INVALID_PARAM);
    ck_assert_ptr_null(f);
    ck_assert_int_eq(nxl_md_send(A, NULL, 1234, ctr_cb, &c, NULL), NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(nxl_md_send_invalidate(A, "127.0.0.1", 0, ctr_cb, &c, NULL),
                     NXL_ERR_INVALID_PARAM);
    /* groups */
    nxl_future_t *none[2] = {NULL, NULL};
    f = (nxl_future_t *)&f;
    ck_assert_int_eq(nxl_future_all(A, none, 2, ctr_cb, &c, &f), NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(nxl_future_all(A, NULL, 2, ctr_cb, &c, &f), NXL_ERR_INVALID_PARAM);
    nxl_agent_t *b = tl_agent("B", 0);
    nxl_future_t *bf;
    ck_assert_int_eq(nxl_future_all(b, NULL, 0, NULL, NULL, &bf), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_all(A, &bf, 1, ctr_cb, &c, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "another agent");
    ck_assert_int_eq(nxl_future_wait(bf, 1000), NXL_SUCCESS);
    nxl_future_release(bf);
    nxl_agent_destroy(b);
    /* nothing of it ever calls back */
    spin(300);
    ck_assert_int_eq(c.n, 0);
}
END_TEST

/* ------------------------------------------------------ notifications */

typedef struct {
    int n;
    char from[16][32];
    char msg[16][64];
    size_t len[16];
    long data_bad; /* for notifications after a WRITE: first wrong byte */
} notifs_t;

static notifs_t NT;

static void on_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    ck_assert_ptr_eq(a, A);
    int i = NT.n++;
    if (i < 16) {
        snprintf(NT.from[i], sizeof(NT.from[i]), "%s", from);
        snprintf(NT.msg[i], sizeof(NT.msg[i]), "%.*s", (int)(len < 63 ? len : 63),
                 (const char *)msg);
        NT.len[i] = len;
    }
    if (arg)
        NT.data_bad = tl_check(dst, 1u << 20, *(uint32_t *)arg);
}

START_TEST(t_notif_callback)
{
    memset(&NT, 0, sizeof(NT));
    nxl_agent_on_notif(A, on_notif, NULL);
    ctr_t c = {0};
    for (int i = 0; i < 10; i++) {
        char m[16];
        snprintf(m, sizeof(m), "msg %d", i);
        ck_assert_int_eq(nxl_notif_send(A, "A", m, strlen(m), ctr_cb, &c, NULL), NXL_SUCCESS);
    }
    ck_assert_int_eq(c.n, 0);
    ck_assert_int_eq(NT.n, 0);
    ck_assert(tl_run_until(A, &NT.n, 10, 5000));
    ck_assert(tl_run_until(A, &c.n, 10, 5000));
    spin(50);
    ck_assert_int_eq(NT.n, 10);
    ck_assert_int_eq(c.n, 10);
    for (int i = 0; i < 10; i++) {
        char m[16];
        snprintf(m, sizeof(m), "msg %d", i);
        ck_assert_str_eq(NT.from[i], "A");
        ck_assert_str_eq(NT.msg[i], m); /* in order */
    }
    ck_assert_uint_eq(nxl_notifs_drain(A, NULL, NULL), 0); /* none left queued */
    /* empty and largest notifications */
    NT.n = 0;
    ck_assert_int_eq(nxl_notif_send(A, "A", NULL, 0, NULL, NULL, NULL), NXL_SUCCESS);
    ck_assert(tl_run_until(A, &NT.n, 1, 5000));
    ck_assert_uint_eq(NT.len[0], 0);
    char *big = malloc(NXL_NOTIF_MAX);
    memset(big, 'q', NXL_NOTIF_MAX);
    memcpy(big, "big", 3);
    ck_assert_int_eq(nxl_notif_send(A, "A", big, NXL_NOTIF_MAX, NULL, NULL, NULL), NXL_SUCCESS);
    free(big);
    ck_assert_msg(tl_run_until(A, &NT.n, 2, 5000), "a notification of %d bytes was lost",
                  NXL_NOTIF_MAX);
    ck_assert_uint_eq(NT.len[1], NXL_NOTIF_MAX);
    ck_assert(!strncmp(NT.msg[1], "bigqqq", 6));
}
END_TEST

static int drained;
static char drained_msg[8][32];
static void drain_cb(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    ck_assert_str_eq(from, "A");
    ck_assert_ptr_eq(arg, &drained);
    if (drained < 8)
        snprintf(drained_msg[drained], sizeof(drained_msg[0]), "%.*s", (int)len,
                 (const char *)msg);
    drained++;
}

START_TEST(t_notif_drain)
{
    /* no callback set: notifications queue */
    ctr_t c = {0};
    for (int i = 0; i < 3; i++) {
        char m[16];
        snprintf(m, sizeof(m), "q%d", i);
        ck_assert_int_eq(nxl_notif_send(A, "A", m, strlen(m), ctr_cb, &c, NULL), NXL_SUCCESS);
    }
    ck_assert(tl_run_until(A, &c.n, 3, 5000));
    drained = 0;
    uint64_t end = tl_now_ms() + 5000;
    while (drained < 3 && tl_now_ms() < end) {
        nxl_agent_run_once(A, 10);
        nxl_notifs_drain(A, drain_cb, &drained);
    }
    ck_assert_int_eq(drained, 3);
    ck_assert_str_eq(drained_msg[0], "q0");
    ck_assert_str_eq(drained_msg[1], "q1");
    ck_assert_str_eq(drained_msg[2], "q2");
    ck_assert_uint_eq(nxl_notifs_drain(A, drain_cb, &drained), 0);
    /* drain does not run the reactor: sent, not yet progressed, nothing there */
    ck_assert_int_eq(nxl_notif_send(A, "A", "late", 4, NULL, NULL, NULL), NXL_SUCCESS);
    ck_assert_uint_eq(nxl_notifs_drain(A, drain_cb, &drained), 0);
    spin(200);
    ck_assert_uint_eq(nxl_notifs_drain(A, NULL, NULL), 1); /* NULL: dropped, counted */
    ck_assert_int_eq(drained, 3);

    /* queued, then a callback is set: delivered to it on the next turn */
    ck_assert_int_eq(nxl_notif_send(A, "A", "one", 3, NULL, NULL, NULL), NXL_SUCCESS);
    ck_assert_int_eq(nxl_notif_send(A, "A", "two", 3, NULL, NULL, NULL), NXL_SUCCESS);
    spin(200);
    memset(&NT, 0, sizeof(NT));
    nxl_agent_on_notif(A, on_notif, NULL);
    ck_assert_int_eq(NT.n, 0);
    ck_assert(tl_run_until(A, &NT.n, 2, 5000));
    ck_assert_str_eq(NT.msg[0], "one");
    ck_assert_str_eq(NT.msg[1], "two");
    /* and back to queueing */
    nxl_agent_on_notif(A, NULL, NULL);
    ck_assert_int_eq(nxl_notif_send(A, "A", "three", 5, NULL, NULL, NULL), NXL_SUCCESS);
    spin(200);
    ck_assert_int_eq(NT.n, 2);
    drained = 0;
    ck_assert_uint_eq(nxl_notifs_drain(A, drain_cb, &drained), 1);
    ck_assert_str_eq(drained_msg[0], "three");
}
END_TEST

/* A WRITE with a notification: the data is there when it arrives. */
START_TEST(t_notif_with_write)
{
    memset(&NT, 0, sizeof(NT));
    static uint32_t seed;
    nxl_agent_on_notif(A, on_notif, &seed);
    nxl_xfer_t *x = mkx(0, 0, 1u << 20, "written");
    for (uint32_t k = 0; k < 3; k++) {
        seed = 500 + k;
        tl_fill(src, 1u << 20, seed);
        NT.data_bad = -2;
        ctr_t c = {0};
        ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &c, NULL), NXL_SUCCESS);
        ck_assert(tl_run_until(A, &NT.n, (int)k + 1, 5000));
        ck_assert_str_eq(NT.msg[k], "written");
        ck_assert_str_eq(NT.from[k], "A");
        ck_assert_msg(NT.data_bad == -1, "data not there with the notification: byte %ld",
                      NT.data_bad);
        ck_assert(tl_run_until(A, &c.n, 1, 5000));
        ck_assert_int_eq(c.st, NXL_SUCCESS);
    }
    /* another notification for the next post */
    ck_assert_int_eq(nxl_xfer_set_notif(x, "again", 5), NXL_SUCCESS);
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, NULL), NXL_SUCCESS);
    ck_assert(tl_run_until(A, &NT.n, 4, 5000));
    ck_assert_str_eq(NT.msg[3], "again");
    /* none */
    ck_assert_int_eq(nxl_xfer_set_notif(x, NULL, 0), NXL_SUCCESS);
    ctr_t c = {0};
    ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &c, NULL), NXL_SUCCESS);
    ck_assert(tl_run_until(A, &c.n, 1, 5000));
    spin(100);
    ck_assert_int_eq(NT.n, 4);
    nxl_xfer_release(x);
}
END_TEST

/* Deadlines: one timer per agent, armed only while a post with a deadline
 * is pending, and none on an agent whose transfers have none, as an
 * NXL_LOOP_FD agent's nxl_agent_backend_timeout() shows; a deadline that
 * does not expire changes nothing. (check_xfer t_deadline: deadlines that
 * expire, over every network transport.) */
static int fd_idle_timeout(nxl_agent_t *d)
{
    /* the transport's own timers (UCX's progress back-off) run out first */
    uint64_t end = tl_now_ms() + 3000;
    int t;
    while ((t = nxl_agent_backend_timeout(d)) != -1 && tl_now_ms() < end)
        nxl_agent_run_once(d, t < 50 ? t : 50);
    return t;
}

START_TEST(t_deadline_timer)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "D";
    c.loop = NXL_LOOP_FD;
    nxl_agent_t *d;
    ck_assert_int_eq(nxl_agent_create(&c, &d), NXL_SUCCESS);
    ck_assert_int_eq(nxl_backend_create(d, "UCX", NULL, 0, NULL), NXL_SUCCESS);
    nxl_desc_t r = {.addr = (uintptr_t)src, .len = BUF};
    ck_assert_int_eq(nxl_mem_register(d, NXL_DRAM, &r, 1, NULL), NXL_SUCCESS);
    ck_assert_int_eq(fd_idle_timeout(d), -1);
    /* transfers without deadlines: nothing armed, before or after */
    nxl_xfer_t *x = NULL;
    ck_assert_int_eq(tl_xfer1(d, NXL_WRITE, (uintptr_t)src, (uintptr_t)src + BUF / 2, BUF / 2,
                              "D", NULL, &x), NXL_SUCCESS);
    for (int k = 0; k < 3; k++) {
        ctr_t ct = {0};
        ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &ct, NULL), NXL_SUCCESS);
        ck_assert(tl_run_until(d, &ct.n, 1, 5000));
        ck_assert_int_eq(ct.st, NXL_SUCCESS);
        ck_assert_int_eq(fd_idle_timeout(d), -1);
    }
    /* a deadline that does not expire: armed while the post is pending,
     * no effect on it, nothing armed once it completed */
    nxl_xfer_set_deadline(x, 60000);
    for (int k = 0; k < 3; k++) {
        ctr_t ct = {0};
        memset(src, 40 + k, BUF / 2);
        ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &ct, NULL), NXL_SUCCESS);
        int t = nxl_agent_backend_timeout(d);
        ck_assert_msg(t >= 0 && t <= 60000, "timeout %d with a deadline pending", t);
        ck_assert(tl_run_until(d, &ct.n, 1, 5000));
        ck_assert_int_eq(ct.st, NXL_SUCCESS);
        ck_assert_int_eq(src[BUF / 2 + 100], 40 + k);
        ck_assert_int_eq(fd_idle_timeout(d), -1);
        ck_assert_int_eq(ct.n, 1);
    }
    /* released while pending with a deadline: canceled, the timer gone */
    nxl_xfer_set_deadline(x, 60000);
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, NULL), NXL_SUCCESS);
    nxl_xfer_release(x);
    ck_assert_int_eq(fd_idle_timeout(d), -1);
    nxl_agent_destroy(d);
}
END_TEST

/* nxl_future_set_deadline(): a metadata fetch from a socket that accepts
 * and never answers times out at its deadline (200 ms, before the
 * request's own io_timeout_ms of 500), its callback once, its sentence
 * naming host:port; the agent then fetches normally. A deadline cleared
 * (ms 0) or replaced leaves the request to its own timeout. */
START_TEST(t_set_deadline_md)
{
    uint16_t port = silent_listener();
    char where[64];
    snprintf(where, sizeof(where), "127.0.0.1:%u", port);
    ctr_t m = {0};
    nxl_future_t *f;
    ck_assert_int_eq(nxl_md_fetch(A, NULL, "127.0.0.1", port, ctr_cb, &m, &f), NXL_SUCCESS);
    uint64_t t0 = tl_now_ms();
    ck_assert_int_eq(nxl_future_set_deadline(f, 200), NXL_SUCCESS);
    while (!m.n && tl_now_ms() - t0 < 2000)
        nxl_agent_run_once(A, 5);
    uint64_t took = tl_now_ms() - t0;
    printf("SET_DEADLINE: metadata fetch: %s after %llu ms: %s\n", nxl_status_name(m.st),
           (unsigned long long)took, m.err);
    ck_assert_int_eq(m.n, 1);
    ck_assert_int_eq(m.st, NXL_ERR_TIMEOUT);
    ck_assert_msg(took >= 199 && took <= 700, "TIMEOUT after %llu ms for a deadline of 200",
                  (unsigned long long)took);
    ck_sentence(m.err, where);
    ck_sentence(nxl_future_error(f), "metadata fetch");
    spin(500); /* past io_timeout_ms: no second callback */
    ck_assert_int_eq(m.n, 1);
    ck_assert_int_eq(nxl_future_status(f), NXL_ERR_TIMEOUT);
    ck_assert_int_eq(nxl_future_set_deadline(f, 50), NXL_SUCCESS); /* complete: no effect */
    nxl_future_release(f);

    /* cleared: the request's own timeout (io_timeout_ms 500) ends it */
    ctr_t c = {0};
    ck_assert_int_eq(nxl_md_send(A, "127.0.0.1", port, ctr_cb, &c, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_set_deadline(f, 100), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_set_deadline(f, 0), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_wait(f, 5000), NXL_ERR_REMOTE_DISCONNECT);
    ck_assert_int_eq(c.n, 1);
    nxl_future_release(f);
    close(silent_fd);

    /* the agent works after: a normal fetch from a listening agent */
    nxl_agent_t *b = tl_agent("B", 1);
    ctr_t ok = {0};
    ck_assert_int_eq(nxl_md_fetch(A, "B", "127.0.0.1", nxl_agent_listen_port(b), ctr_cb, &ok, &f),
                     NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_set_deadline(f, 5000), NXL_SUCCESS);
    ck_assert(tl_run2_until(A, b, &ok.n, 1, 5000, 5));
    ck_assert_msg(ok.st == NXL_SUCCESS, "fetch: %s", ok.err);
    ck_assert_str_eq(nxl_future_peer(f), "B");
    nxl_future_release(f);
    spin(50);
    ck_assert_int_eq(ok.n, 1);
    nxl_agent_destroy(b);
}
END_TEST

/* nxl_future_set_deadline(): NULL, a complete future, kinds it does not
 * take */
START_TEST(t_set_deadline_bad)
{
    ck_assert_int_eq(nxl_future_set_deadline(NULL, 100), NXL_ERR_INVALID_PARAM);
    /* complete (a loopback notification, delivered): no effect */
    nxl_future_t *f;
    ck_assert_int_eq(nxl_notif_send(A, "A", "x", 1, NULL, NULL, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_wait(f, 5000), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_set_deadline(f, 100), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_set_deadline(f, 0), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_status(f), NXL_SUCCESS);
    nxl_future_release(f);
    /* nxl_future_all() over a pending request: not supported, said */
    uint16_t port = silent_listener();
    ck_assert_int_eq(nxl_md_fetch(A, NULL, "127.0.0.1", port, NULL, NULL, &f), NXL_SUCCESS);
    nxl_future_t *all;
    ck_assert_int_eq(nxl_future_all(A, &f, 1, NULL, NULL, &all), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_status(all), NXL_IN_PROG);
    ck_assert_int_eq(nxl_future_set_deadline(all, 100), NXL_ERR_NOT_SUPPORTED);
    ck_sentence(nxl_agent_last_error(A), "nxl_future_all");
    spin(300); /* nothing was set: the request still pending */
    ck_assert_int_eq(nxl_future_status(all), NXL_IN_PROG);
    nxl_future_cancel(f);
    ck_assert_int_eq(nxl_future_wait(all, 5000), NXL_ERR_CANCELED);
    ck_assert_int_eq(nxl_future_set_deadline(f, 100), NXL_SUCCESS); /* complete */
    nxl_future_release(all);
    nxl_future_release(f);
    close(silent_fd);
    /* a transfer post: as deadline_ms (a loopback WRITE completes first) */
    nxl_xfer_t *x = mkx(0, 0, 4096, NULL);
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, &f), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_set_deadline(f, 5000), NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_wait(f, 5000), NXL_SUCCESS);
    nxl_future_release(f);
    nxl_xfer_release(x);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("future");
    TL_TCASE(s, "contract", 30, setup, teardown, t_once_not_inline, t_status_sequence, t_then,
             t_wait, t_wait_in_callback, t_release_in_callback, t_all_success, t_all_failure,
             t_cancel, t_release_inflight, t_repost_active, t_repost, t_destroy_pending,
             t_status_follows_callbacks, t_chain_one_per_turn, t_failed_calls, t_recycled_clean,
             t_recycled_outlive_agent, t_deadline_timer, t_set_deadline_md, t_set_deadline_bad);
    TL_TCASE(s, "notif", 30, setup, teardown, t_notif_callback, t_notif_drain, t_notif_with_write);
    return tl_run(s);
}
