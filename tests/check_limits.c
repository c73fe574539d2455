/* SPDX-License-Identifier: BSD-3-Clause */
/* Bounds on what peers can make an agent hold: metadata frame size,
 * listener connections at once and per address, a client that trickles
 * its request, remote agents known, notifications waiting to be drained.
 * Each bound refuses with a count (nxl_agent_stats) and a log line, and
 * the agent keeps serving everyone else. */
#include "testlib.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

static nxl_agent_t *A, *B;
static char logged[4096];

static void log_cb(nxl_log_level_t lvl, const char *msg, void *arg)
{
    if (lvl <= NXL_LOG_WARN)
        snprintf(logged, sizeof(logged), "%s", msg);
}

static nxl_agent_t *agent(const char *name, int listen, void (*tune)(nxl_agent_config_t *))
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = name;
    c.log_level = NXL_LOG_WARN;
    c.log_cb = log_cb;
    if (listen)
        c.listen_addr = "127.0.0.1";
    if (tune)
        tune(&c);
    nxl_agent_t *a = tl_agent_cfg(&c, 0);
    tl_backend(a, "UCX");
    return a;
}

/* A (not listening, tuned by tune_a) and B (listening with b_listen,
 * tuned by tune_b); either tune may be NULL */
static void agents(void (*tune_a)(nxl_agent_config_t *), int b_listen,
                   void (*tune_b)(nxl_agent_config_t *))
{
    A = agent("A", 0, tune_a);
    B = agent("B", b_listen, tune_b);
}

static void teardown(void)
{
    nxl_agent_destroy(A);
    nxl_agent_destroy(B);
    A = B = NULL;
    logged[0] = 0;
}

static void turn(void)
{
    nxl_agent_run_once(A, 0);
    nxl_agent_run_once(B, 1);
}

static int until(int n, int ms)
{
    return tl_count_until(A, B, n, ms);
}

static nxl_stats_t stats(nxl_agent_t *a)
{
    nxl_stats_t s = {.size = sizeof(s)};
    ck_assert_int_eq(nxl_agent_stats(a, NULL, &s), NXL_SUCCESS);
    return s;
}

/* a raw TCP client to B's listener, from source address src */
static int raw_client(const char *src)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in me = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &me.sin_addr);
    ck_assert(bind(s, (struct sockaddr *)&me, sizeof(me)) == 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(nxl_agent_listen_port(B)),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert(connect(s, (struct sockaddr *)&to, sizeof(to)) == 0);
    fcntl(s, F_SETFL, O_NONBLOCK);
    return s;
}

/* 1 when B closed the socket within ms (driving both reactors) */
static int closed_within(int s, int ms)
{
    uint64_t end = tl_now_ms() + (uint64_t)ms;
    char c;
    while (tl_now_ms() < end) {
        ssize_t r = read(s, &c, 1);
        if (r == 0 || (r < 0 && errno != EAGAIN))
            return 1;
        turn();
    }
    return 0;
}

static nxl_status_t fetch_b(void)
{
    int before = tl_ndone;
    tl_md_fetch(A, B);
    ck_assert(until(before + 1, 10000));
    return tl_last;
}

/* ------------------------------------------------------------------ */

static void small_frames(nxl_agent_config_t *c) { c->max_frame_bytes = 2048; }

START_TEST(t_frame_size)
{
    agents(NULL, 1, small_frames);
    /* A's metadata with 64 regions is larger than 2 KiB */
    static char mem[64][256];
    nxl_desc_t d[64];
    for (int i = 0; i < 64; i++)
        d[i] = (nxl_desc_t){.addr = (uintptr_t)mem[i], .len = sizeof(mem[i])};
    ck_assert_int_eq(nxl_mem_register(A, NXL_DRAM, d, 64, NULL), NXL_SUCCESS);
    tl_ndone = 0;
    tl_md_send(A, B);
    ck_assert(until(1, 10000));
    ck_assert_int_eq(tl_last, NXL_ERR_REMOTE_DISCONNECT);
    ck_assert_uint_eq(stats(B).md_clients_refused, 1);
    ck_sentence(logged, "max_frame_bytes");
    ck_assert_int_eq(nxl_md_check(B, "A"), NXL_ERR_NOT_FOUND);
    /* B still answers a small request */
    ck_assert_int_eq(fetch_b(), NXL_SUCCESS);
}
END_TEST

static void few_clients(nxl_agent_config_t *c)
{
    c->max_md_clients = 3;
    c->max_md_clients_per_host = 2;
}

START_TEST(t_clients)
{
    agents(NULL, 1, few_clients);
    int s1 = raw_client("127.0.0.2"), s2 = raw_client("127.0.0.2");
    int s3 = raw_client("127.0.0.2"); /* a third from one address */
    ck_assert_msg(closed_within(s3, 2000), "the third connection from one address stayed open");
    ck_assert(!closed_within(s1, 50) && !closed_within(s2, 50));
    int s4 = raw_client("127.0.0.3"); /* another address: fits, the total is 3 */
    ck_assert(!closed_within(s4, 100));
    int s5 = raw_client("127.0.0.4"); /* over the total */
    ck_assert_msg(closed_within(s5, 2000), "a fourth connection stayed open");
    ck_assert_uint_eq(stats(B).md_clients_refused, 2);
    ck_sentence(logged, "max_md_clients");
    /* once they go, B serves again */
    close(s1), close(s2), close(s3), close(s4), close(s5);
    for (int i = 0; i < 20; i++)
        turn();
    tl_ndone = 0;
    ck_assert_int_eq(fetch_b(), NXL_SUCCESS);
}
END_TEST

static void short_timeout(nxl_agent_config_t *c) { c->io_timeout_ms = 1000; }

START_TEST(t_trickle)
{
    agents(NULL, 1, short_timeout);
    int s = raw_client("127.0.0.2");
    /* a valid header announcing 1 KiB, then a byte every 100 ms */
    unsigned char h[16] = {'N', 'X', 'L', 'X', 1, 2, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0};
    ck_assert(write(s, h, sizeof(h)) == sizeof(h));
    uint64_t t0 = tl_now_ms();
    int dropped = 0, served_during = 0;
    tl_ndone = 0;
    tl_md_fetch(A, B);
    uint64_t next = tl_now_ms();
    while (tl_now_ms() - t0 < 4000 && !dropped) {
        if (tl_now_ms() >= next) {
            char b = 0;
            if (write(s, &b, 1) < 0)
                dropped = 1;
            next += 100;
        }
        char c;
        ssize_t r = read(s, &c, 1);
        if (r == 0 || (r < 0 && errno != EAGAIN))
            dropped = 1;
        turn();
        if (tl_ndone && !served_during)
            served_during = (int)(tl_now_ms() - t0);
    }
    uint64_t took = tl_now_ms() - t0;
    ck_assert_msg(dropped, "a trickling client was never dropped");
    ck_assert_msg(took >= 900 && took < 3000, "dropped after %llu ms (timeout 1000)",
                  (unsigned long long)took);
    ck_assert_msg(served_during > 0 && served_during < 900,
                  "another client waited %d ms behind the trickling one", served_during);
    ck_assert_int_eq(tl_last, NXL_SUCCESS);
    ck_assert_uint_eq(stats(B).md_clients_refused, 1);
    ck_sentence(logged, "timeout");
    close(s);
}
END_TEST

static void two_peers(nxl_agent_config_t *c) { c->max_peers = 2; }

START_TEST(t_peers)
{
    agents(two_peers, 0, NULL);
    nxl_agent_t *C = agent("C", 0, NULL), *D = agent("D", 0, NULL);
    nxl_agent_t *from[3] = {B, C, D};
    void *blob[3];
    size_t len[3];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(nxl_md_local(from[i], &blob[i], &len[i]), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_load(A, blob[0], len[0], NULL, 0), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_load(A, blob[1], len[1], NULL, 0), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_load(A, blob[2], len[2], NULL, 0), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(A), "max_peers");
    ck_assert_int_eq(nxl_md_check(A, "D"), NXL_ERR_NOT_FOUND);
    /* reloading one already known is not a new peer */
    ck_assert_int_eq(nxl_md_load(A, blob[0], len[0], NULL, 0), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_invalidate(A, "B"), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_load(A, blob[2], len[2], NULL, 0), NXL_SUCCESS);
    ck_assert_uint_eq(stats(A).peers_known, 2);
    for (int i = 0; i < 3; i++)
        nxl_free(blob[i]);
    for (int i = 0; i < 10; i++)
        turn();
    nxl_agent_destroy(C);
    nxl_agent_destroy(D);
}
END_TEST

static void ten_notifs(nxl_agent_config_t *c) { c->max_queued_notifs = 10; }

START_TEST(t_notif_queue)
{
    agents(ten_notifs, 0, NULL);
    void *blob;
    size_t len;
    ck_assert_int_eq(nxl_md_local(A, &blob, &len), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_load(B, blob, len, NULL, 0), NXL_SUCCESS);
    nxl_free(blob);
    /* A pulls (no callback) and does not drain: 25 arrive */
    tl_ndone = 0;
    for (int i = 0; i < 25; i++) {
        char m[16];
        int n = snprintf(m, sizeof(m), "n%d", i);
        ck_assert_int_eq(nxl_notif_send(B, "A", m, (size_t)n, tl_count_cb, NULL, NULL),
                         NXL_SUCCESS);
    }
    ck_assert(until(25, 10000));
    uint64_t end = tl_now_ms() + 5000;
    while (stats(A).notifs_received + stats(A).notifs_dropped < 25 && tl_now_ms() < end)
        turn();
    nxl_stats_t s = stats(A);
    ck_assert_uint_eq(s.notifs_received, 10);
    ck_assert_uint_eq(s.notifs_dropped, 15);
    ck_sentence(logged, "max_queued_notifs");
    ck_assert_uint_eq(nxl_notifs_drain(A, NULL, NULL), 10);
    /* drained: room again */
    ck_assert_int_eq(nxl_notif_send(B, "A", "again", 5, tl_count_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert(until(26, 10000));
    end = tl_now_ms() + 5000;
    while (stats(A).notifs_received < 11 && tl_now_ms() < end)
        turn();
    ck_assert_uint_eq(nxl_notifs_drain(A, NULL, NULL), 1);
    ck_assert_uint_eq(stats(A).notifs_dropped, 15);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("limits");
    TL_TCASE(s, "limits", 60, NULL, teardown, t_frame_size, t_clients, t_trickle, t_peers,
             t_notif_queue);
    return tl_run(s);
}
