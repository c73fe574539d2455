/* SPDX-License-Identifier: BSD-3-Clause */
/* Telemetry: nxl_agent_stats() counts transfers by final status, bytes by
 * direction and memory type, latency, notifications, metadata exchanges
 * and peers, exactly; /metrics serves the same numbers as Prometheus text
 * from the reactor, and they move between two scrapes. */
#include "testlib.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

static nxl_agent_t *A, *B;
static unsigned char *buf, *bbuf;
#define LEN (1u << 20)

static nxl_agent_t *agent(const char *name, const char *tls, int listen, const char *metrics)
{
    nxl_agent_config_t c;
    tl_config(&c, name, 2000);
    c.metrics_addr = metrics;
    nxl_agent_t *a = tl_agent_cfg(&c, listen);
    nxl_param_t p = {"tls", tls};
    ck_assert_msg(nxl_backend_create(a, "UCX", tls ? &p : NULL, tls ? 1 : 0, NULL) ==
                      NXL_SUCCESS, "%s", nxl_agent_last_error(a));
    return a;
}

static void setup(void)
{
    A = agent("A", "tcp", 0, "127.0.0.1:0");
    B = agent("B", "tcp", 1, NULL);
    buf = calloc(1, LEN);
    bbuf = calloc(1, LEN);
    nxl_desc_t d = {.addr = (uintptr_t)buf, .len = LEN}, e = {.addr = (uintptr_t)bbuf, .len = LEN};
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, &d, 1, NULL), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_register(B, NXL_DRAM, &e, 1, NULL), NXL_SUCCESS);
}

static void teardown(void)
{
    nxl_agent_destroy(A);
    nxl_agent_destroy(B);
    free(buf);
    free(bbuf);
}

static int done;
static void done_cb(nxl_future_t *f, nxl_status_t st, void *arg) { done++; }

static void run(int ms)
{
    uint64_t end = tl_now_ms() + (uint64_t)ms;
    while (tl_now_ms() < end) {
        nxl_agent_run_once(A, 1);
        if (B)
            nxl_agent_run_once(B, 0);
    }
}

/* runs both until *c >= n */
static int run_until2(const int *c, int n, int ms)
{
    uint64_t end = tl_now_ms() + (uint64_t)ms;
    while (*c < n && tl_now_ms() < end) {
        nxl_agent_run_once(A, 1);
        if (B)
            nxl_agent_run_once(B, 0);
    }
    return *c >= n;
}

static nxl_xfer_t *loopback(nxl_op_t op, size_t off, size_t len)
{
    nxl_desc_t l = {.addr = (uintptr_t)buf + off, .len = len},
               r = {.addr = (uintptr_t)buf + LEN / 2 + off, .len = len};
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, rl = {NXL_DRAM, &r, 1};
    nxl_xfer_t *x;
    ck_assert_int_eq(nxl_xfer_create(A, op, &ll, &rl, "A", NULL, &x), NXL_SUCCESS);
    return x;
}

static nxl_stats_t stats(nxl_agent_t *a, const char *t)
{
    nxl_stats_t s = {.size = sizeof(s)};
    ck_assert_msg(nxl_agent_stats(a, t, &s) == NXL_SUCCESS, "%s", nxl_agent_last_error(a));
    return s;
}

/* GET path from the agent's /metrics server, driving the reactor meanwhile */
static int http_get(uint16_t port, const char *path, char *out, size_t cap)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert(connect(s, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    char req[128];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n\r\n", path);
    ck_assert(write(s, req, (size_t)n) == n);
    fcntl(s, F_SETFL, O_NONBLOCK);
    size_t got = 0;
    uint64_t end = tl_now_ms() + 5000;
    for (;;) {
        ssize_t r = read(s, out + got, cap - 1 - got);
        if (r > 0) {
            got += (size_t)r;
            continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) || tl_now_ms() > end)
            break;
        nxl_agent_run_once(A, 5);
    }
    close(s);
    out[got] = 0;
    return (int)got;
}

/* the value of the sample line starting with prefix, or -1 */
static long long metric(const char *text, const char *prefix)
{
    const char *p = text;
    size_t pl = strlen(prefix);
    while ((p = strstr(p, prefix))) {
        if ((p == text || p[-1] == '\n') && p[pl] == ' ')
            return atoll(p + pl + 1);
        p += pl;
    }
    return -1;
}

START_TEST(t_counts)
{
    nxl_stats_t s = stats(A, NULL);
    ck_assert_uint_eq(s.xfers_posted, 0);
    ck_assert_uint_eq(s.peers_known, 0);
    /* bad calls */
    nxl_stats_t bad = {.size = 8};
    ck_assert_int_eq(nxl_agent_stats(A, NULL, &bad), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "size");
    ck_assert_int_eq(nxl_agent_stats(A, NULL, NULL), NXL_ERR_INVALID_PARAM);
    nxl_stats_t t = {.size = sizeof(t)};
    ck_assert_int_eq(nxl_agent_stats(A, "NOPE", &t), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(A), "NOPE");

    /* 5 WRITEs of 4 KiB, 3 READs of 8 KiB, loopback */
    nxl_xfer_t *w = loopback(NXL_WRITE, 0, 4096), *r = loopback(NXL_READ, 65536, 8192);
    done = 0;
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(nxl_xfer_post(w, done_cb, NULL, NULL), NXL_SUCCESS);
        ck_assert(run_until2(&done, i + 1, 5000));
    }
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(nxl_xfer_post(r, done_cb, NULL, NULL), NXL_SUCCESS);
        ck_assert(run_until2(&done, 6 + i, 5000));
    }
    /* one canceled */
    nxl_future_t *f;
    ck_assert_int_eq(nxl_xfer_post(w, done_cb, NULL, &f), NXL_SUCCESS);
    nxl_future_cancel(f);
    nxl_future_release(f);
    ck_assert(run_until2(&done, 9, 5000));
    s = stats(A, NULL);
    ck_assert_uint_eq(s.xfers_posted, 9);
    ck_assert_uint_eq(s.xfers_succeeded, 8);
    ck_assert_uint_eq(s.xfers_canceled, 1);
    ck_assert_uint_eq(s.xfers_failed, 0);
    ck_assert_uint_eq(s.write_bytes[NXL_DRAM], 5 * 4096);
    ck_assert_uint_eq(s.read_bytes[NXL_DRAM], 3 * 8192);
    ck_assert_uint_eq(s.latency_count, 9);
    uint64_t inb = 0;
    for (int k = 0; k < NXL_STATS_BUCKETS; k++)
        inb += s.latency_bucket[k];
    ck_assert_uint_eq(inb, 9); /* none took 8 s */
    nxl_stats_t u = stats(A, "UCX");
    ck_assert_uint_eq(u.xfers_posted, 9);
    ck_assert_uint_eq(u.write_bytes[NXL_DRAM], 5 * 4096);
    /* notifications to itself */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(nxl_notif_send(A, "A", "n", 1, done_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert(run_until2(&done, 12, 5000));
    run(20);
    s = stats(A, NULL);
    ck_assert_uint_eq(s.notifs_sent, 3);
    ck_assert_uint_eq(s.notifs_received, 3);
    /* metadata: one fetch that works, one that finds nobody */
    uint16_t dead;
    int s0 = tl_loopback_socket(0, &dead);
    ck_assert_int_eq(nxl_md_fetch(A, "B", "127.0.0.1", nxl_agent_listen_port(B), done_cb, NULL,
                                  NULL),
                     NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_fetch(A, "B", "127.0.0.1", dead, done_cb, NULL, NULL),
                     NXL_SUCCESS);
    ck_assert(run_until2(&done, 14, 10000));
    close(s0);
    s = stats(A, NULL);
    ck_assert_uint_eq(s.md_requests, 2);
    ck_assert_uint_eq(s.md_requests_failed, 1);
    ck_assert_uint_eq(s.md_loaded, 1);
    ck_assert_uint_eq(s.peers_known, 1);
    ck_assert_uint_eq(stats(B, NULL).md_served, 1);
    /* a WRITE to B that works, then B goes away: the next one fails */
    nxl_desc_t l = {.addr = (uintptr_t)buf, .len = 4096}, rb = {.addr = (uintptr_t)bbuf, .len = 4096};
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, rl = {NXL_DRAM, &rb, 1};
    nxl_xfer_t *xb;
    ck_assert_int_eq(nxl_xfer_create(A, NXL_WRITE, &ll, &rl, "B", NULL, &xb), NXL_SUCCESS);
    ck_assert_int_eq(nxl_xfer_post(xb, done_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert(run_until2(&done, 15, 10000));
    nxl_agent_destroy(B);
    B = NULL;
    nxl_status_t ps = nxl_xfer_post(xb, done_cb, NULL, NULL);
    if (ps == NXL_SUCCESS)
        ck_assert(run_until2(&done, 16, 20000));
    s = stats(A, NULL);
    ck_assert_uint_eq(s.xfers_posted, ps == NXL_SUCCESS ? 11 : 10);
    ck_assert_uint_eq(s.xfers_succeeded, 9);
    ck_assert_uint_eq(s.xfers_failed, ps == NXL_SUCCESS ? 1 : 0);
    nxl_xfer_release(xb);
    ck_assert_int_eq(nxl_md_invalidate(A, "B"), NXL_SUCCESS);
    s = stats(A, NULL);
    ck_assert_uint_eq(s.peers_known, 0);
    ck_assert_uint_eq(s.peers_lost, 1);
    nxl_xfer_release(w);
    nxl_xfer_release(r);
}
END_TEST

START_TEST(t_metrics)
{
    uint16_t port = nxl_agent_metrics_port(A);
    ck_assert_uint_ne(port, 0);
    ck_assert_uint_eq(nxl_agent_metrics_port(B), 0);
    static char text[1 << 17];
    ck_assert_int_gt(http_get(port, "/metrics", text, sizeof(text)), 0);
    ck_assert_msg(strstr(text, "200 OK") && strstr(text, "text/plain; version=0.0.4"), "%.300s",
                  text);
    ck_assert(strstr(text, "# TYPE nxl_transfer_latency_seconds histogram"));
    const char *ok = "nxl_transfers_completed_total{agent=\"A\",transport=\"UCX\",status=\"success\"}";
    const char *wb = "nxl_transfer_bytes_total{agent=\"A\",transport=\"UCX\",op=\"write\",mem=\"DRAM\"}";
    const char *cnt = "nxl_transfer_latency_seconds_count{agent=\"A\",transport=\"UCX\"}";
    ck_assert_int_eq(metric(text, ok), 0);
    ck_assert_int_eq(metric(text, wb), 0);
    nxl_xfer_t *w = loopback(NXL_WRITE, 0, 65536);
    done = 0;
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(nxl_xfer_post(w, done_cb, NULL, NULL), NXL_SUCCESS);
        ck_assert(run_until2(&done, i + 1, 5000));
    }
    ck_assert_int_gt(http_get(port, "/metrics", text, sizeof(text)), 0);
    ck_assert_int_eq(metric(text, ok), 4);
    ck_assert_int_eq(metric(text, wb), 4 * 65536);
    ck_assert_int_eq(metric(text, cnt), 4);
    ck_assert_int_eq(metric(text, "nxl_transfer_latency_seconds_bucket{agent=\"A\",transport=\"UCX\",le=\"+Inf\"}"), 4);
    ck_assert_int_eq(metric(text, "nxl_peers{agent=\"A\"}"), 0);
    /* anything else: 404, and the agent goes on */
    ck_assert_int_gt(http_get(port, "/other", text, sizeof(text)), 0);
    ck_assert_msg(strstr(text, "404"), "%.200s", text);
    ck_assert_int_eq(nxl_xfer_post(w, done_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert(run_until2(&done, 5, 5000));
    nxl_xfer_release(w);
}
END_TEST

START_TEST(t_bad_address)
{
    const char *bad[] = {"nonsense", "127.0.0.1:", ":9000", "127.0.0.1:99999"};
    for (int i = 0; i < 4; i++) {
        nxl_agent_config_t c;
        nxl_agent_config_init(&c);
        c.name = "M";
        c.metrics_addr = bad[i];
        nxl_agent_t *m = (nxl_agent_t *)&m;
        ck_assert_int_eq(nxl_agent_create(&c, &m), NXL_ERR_INVALID_PARAM);
        ck_assert_ptr_null(m);
        ck_sentence(nxl_agent_last_error(NULL), "host:port");
    }
    /* the port is taken */
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "M";
    char addr[32];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", nxl_agent_metrics_port(A));
    c.metrics_addr = addr;
    nxl_agent_t *m;
    ck_assert_int_eq(nxl_agent_create(&c, &m), NXL_ERR_BACKEND);
    ck_sentence(nxl_agent_last_error(NULL), "taken");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stats");
    TL_TCASE(s, "stats", 60, setup, teardown, t_counts, t_metrics, t_bad_address);
    return tl_run(s);
}
