/* SPDX-License-Identifier: BSD-3-Clause */
/* Metadata exchange over TCP within one process: agents A and B embedded
 * in one shared event_base (B listens on an ephemeral loopback port), and
 * once with separate bases driven in turn. Fetch, expected-name mismatch,
 * send, send_invalidate, refusals by the peer, nothing listening, garbage
 * clients, unresolvable hosts; then WRITE and READ between A and B with the
 * metadata fetched. */
#define _GNU_SOURCE
#include "testlib.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netdb.h>
#include <pthread.h>
#include <sched.h>
#include <strings.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>


#define BUF (4u << 20)

static struct event_base *base;
static struct event *tick; /* bounds each loop turn */
static nxl_agent_t *A, *B;
static uint16_t port;      /* B's listener */
static unsigned char *abuf, *bbuf;

static void tick_cb(evutil_socket_t fd, short what, void *arg) {}

static nxl_agent_t *agent_on(struct event_base *b, const char *name, int listen)
{
    nxl_agent_config_t c;
    tl_config(&c, name, 3000);
    c.base = b;
    nxl_agent_t *a = tl_agent_cfg(&c, listen);
    tl_backend(a, "UCX");
    return a;
}

#define reg tl_reg_dram

static void setup(void)
{
    base = event_base_new();
    ck_assert_ptr_nonnull(base);
    tick = event_new(base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 5000};
    event_add(tick, &tv);
    A = agent_on(base, "A", 0);
    B = agent_on(base, "B", 1);
    ck_assert_ptr_eq(nxl_agent_base(A), base);
    ck_assert_ptr_eq(nxl_agent_base(B), base);
    port = nxl_agent_listen_port(B);
    ck_assert_uint_ne(port, 0);
    ck_assert_uint_eq(nxl_agent_listen_port(A), 0);
    abuf = calloc(1, BUF);
    bbuf = calloc(1, BUF);
    reg(A, abuf, BUF);
    reg(B, bbuf, BUF);
}

/* Runs the shared base a little: before destroying agents that know each
 * other, so that UCX endpoint wireup and closes can finish (the UCX
 * transport aborts in ucp_worker_destroy otherwise — reported separately). */
static void settle(void)
{
    uint64_t end = tl_now_ms() + 50;
    while (tl_now_ms() < end)
        event_base_loop(base, EVLOOP_ONCE);
}

static void teardown(void)
{
    settle();
    nxl_agent_destroy(A);
    nxl_agent_destroy(B);
    event_free(tick);
    event_base_free(base);
    free(abuf);
    free(bbuf);
}

/* runs the shared base until *counter >= target */
static int run_until(const volatile int *counter, int target, int timeout_ms)
{
    uint64_t end = tl_now_ms() + (uint64_t)timeout_ms;
    while (*counter < target && tl_now_ms() < end)
        event_base_loop(base, EVLOOP_ONCE);
    return *counter >= target;
}

static void run_ms(int ms)
{
    uint64_t end = tl_now_ms() + (uint64_t)ms;
    while (tl_now_ms() < end)
        event_base_loop(base, EVLOOP_ONCE);
}

typedef struct {
    int n;
    nxl_status_t st;
    char err[512];
    char peer[64];
} ctr_t;

static void ctr_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    ctr_t *c = arg;
    c->n++;
    c->st = st;
    snprintf(c->err, sizeof(c->err), "%s", nxl_future_error(f));
    const char *p = nxl_future_peer(f);
    snprintf(c->peer, sizeof(c->peer), "%s", p ? p : "");
}

/* a request from a, completed through the shared base; returns its status */
static nxl_status_t finish(ctr_t *c)
{
    ck_assert_int_eq(c->n, 0); /* never inside the call */
    ck_assert_msg(run_until(&c->n, 1, 10000), "the request never completed");
    run_ms(20);
    ck_assert_int_eq(c->n, 1);
    return c->st;
}

/* posts x and completes it through the shared base; returns its status */
static nxl_status_t post_wait(nxl_xfer_t *x)
{
    ctr_t w = {0};
    ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &w, NULL), NXL_SUCCESS);
    return finish(&w);
}

/* A's WRITE of its first 4 KiB (lp: one descriptor, abuf) to B (rp: one
 * descriptor, bbuf), made, filled with seed, posted, checked, released */
static void write_4k(nxl_prepped_t *lp, nxl_prepped_t *rp, uint32_t seed)
{
    nxl_xfer_t *x;
    ck_assert_int_eq(nxl_xfer_make(A, NXL_WRITE, lp, NULL, rp, NULL, 1, NULL, &x), NXL_SUCCESS);
    tl_fill(abuf, 4096, seed);
    ck_assert_int_eq(post_wait(x), NXL_SUCCESS);
    ck_assert(tl_check(bbuf, 4096, seed) < 0);
    nxl_xfer_release(x);
}

static nxl_status_t prep_in(nxl_agent_t *a, const char *remote, void *p, size_t len)
{
    nxl_desc_t d = {.addr = (uintptr_t)p, .len = len};
    nxl_prepped_t *pp;
    nxl_status_t st = nxl_prep(a, remote, NXL_DRAM, &d, 1, &pp);
    if (st == NXL_SUCCESS)
        nxl_prepped_release(pp);
    return st;
}

/* ------------------------------------------------------------------ */

START_TEST(t_fetch)
{
    ck_assert_int_eq(nxl_md_check(A, "B"), NXL_ERR_NOT_FOUND);
    ctr_t c = {0};
    nxl_future_t *f;
    ck_assert_int_eq(nxl_md_fetch(A, "B", "127.0.0.1", port, ctr_cb, &c, &f), NXL_SUCCESS);
    ck_assert_ptr_null(nxl_future_peer(f)); /* not before it is done */
    ck_assert_int_eq(finish(&c), NXL_SUCCESS);
    ck_assert_str_eq(c.peer, "B");
    ck_assert_str_eq(nxl_future_peer(f), "B");
    ck_assert_str_eq(nxl_future_error(f), "");
    nxl_future_release(f);
    ck_assert_int_eq(nxl_md_check(A, "B"), NXL_SUCCESS);
    ck_assert_int_eq(prep_in(A, "B", bbuf, BUF), NXL_SUCCESS);
    ck_assert_int_eq(prep_in(A, "B", bbuf + BUF, 1), NXL_ERR_NOT_FOUND);
    /* B learned nothing of A by being fetched */
    ck_assert_int_eq(nxl_md_check(B, "A"), NXL_ERR_NOT_FOUND);
    /* without an expected name, and again (replacing), with out = NULL */
    ctr_t d = {0};
    ck_assert_int_eq(nxl_md_fetch(A, NULL, "127.0.0.1", port, ctr_cb, &d, NULL), NXL_SUCCESS);
    ck_assert_int_eq(finish(&d), NXL_SUCCESS);
    ck_assert_str_eq(d.peer, "B");
    ck_assert_int_eq(prep_in(A, "B", bbuf + 100, 100), NXL_SUCCESS);
    /* by name: "localhost" */
    ctr_t e = {0};
    ck_assert_int_eq(nxl_md_fetch(A, "B", "localhost", port, ctr_cb, &e, NULL), NXL_SUCCESS);
    ck_assert_int_eq(finish(&e), NXL_SUCCESS);
    /* B registers more memory: a new fetch brings it */
    unsigned char *more = calloc(1, 65536);
    reg(B, more, 65536);
    ck_assert_int_eq(prep_in(A, "B", more, 65536), NXL_ERR_NOT_FOUND);
    ctr_t g = {0};
    ck_assert_int_eq(nxl_md_fetch(A, "B", "127.0.0.1", port, ctr_cb, &g, NULL), NXL_SUCCESS);
    ck_assert_int_eq(finish(&g), NXL_SUCCESS);
    ck_assert_int_eq(prep_in(A, "B", more, 65536), NXL_SUCCESS);
    settle();
    nxl_desc_t md = {.addr = (uintptr_t)more, .len = 65536};
    ck_assert_int_eq(nxl_mem_deregister(B, NXL_DRAM, &md, 1), NXL_SUCCESS);
    free(more);
}
END_TEST

START_TEST(t_fetch_mismatch)
{
    ctr_t c = {0};
    nxl_future_t *f;
    ck_assert_int_eq(nxl_md_fetch(A, "C", "127.0.0.1", port, ctr_cb, &c, &f), NXL_SUCCESS);
    ck_assert_int_eq(finish(&c), NXL_ERR_MISMATCH);
    ck_sentence(c.err, "'C'");
    ck_sentence(nxl_future_error(f), "'B'");
    ck_assert_ptr_null(nxl_future_peer(f));
    ck_assert_str_eq(c.peer, "");
    nxl_future_release(f);
    /* the wrong agent's metadata was not kept */
    ck_assert_int_eq(nxl_md_check(A, "B"), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(nxl_md_check(A, "C"), NXL_ERR_NOT_FOUND);
    /* A knows B; a fetch expecting C from B's port changes nothing */
    ctr_t d = {0};
    ck_assert_int_eq(nxl_md_fetch(A, "B", "127.0.0.1", port, ctr_cb, &d, NULL), NXL_SUCCESS);
    ck_assert_int_eq(finish(&d), NXL_SUCCESS);
    nxl_prepped_t *held;
    nxl_desc_t hd = {.addr = (uintptr_t)bbuf, .len = 4096};
    ck_assert_int_eq(nxl_prep(A, "B", NXL_DRAM, &hd, 1, &held), NXL_SUCCESS);
    ctr_t e = {0};
    ck_assert_int_eq(nxl_md_fetch(A, "C", "127.0.0.1", port, ctr_cb, &e, NULL), NXL_SUCCESS);
    ck_assert_int_eq(finish(&e), NXL_ERR_MISMATCH);
    ck_assert_int_eq(nxl_md_check(A, "B"), NXL_SUCCESS);
    ck_assert_int_eq(prep_in(A, "B", bbuf, BUF), NXL_SUCCESS);
    /* and a transfer made from what A knew before still works */
    nxl_prepped_t *lp;
    nxl_desc_t ld = {.addr = (uintptr_t)abuf, .len = 4096};
    ck_assert_int_eq(nxl_prep(A, NULL, NXL_DRAM, &ld, 1, &lp), NXL_SUCCESS);
    write_4k(lp, held, 77);
    nxl_prepped_release(lp);
    nxl_prepped_release(held);
}
END_TEST

START_TEST(t_send_invalidate)
{
    ctr_t c = {0};
    nxl_future_t *f;
    ck_assert_int_eq(nxl_md_send(A, "127.0.0.1", port, ctr_cb, &c, &f), NXL_SUCCESS);
    ck_assert_int_eq(finish(&c), NXL_SUCCESS);
    ck_assert_ptr_null(nxl_future_peer(f)); /* only fetches name a peer */
    nxl_future_release(f);
    ck_assert_int_eq(nxl_md_check(B, "A"), NXL_SUCCESS);
    ck_assert_int_eq(prep_in(B, "A", abuf, BUF), NXL_SUCCESS);
    /* B uses it: a notification B -> A */
    ctr_t n = {0};
    ck_assert_int_eq(nxl_notif_send(B, "A", "hi", 2, ctr_cb, &n, NULL), NXL_SUCCESS);
    ck_assert_int_eq(finish(&n), NXL_SUCCESS);

    ctr_t d = {0};
    ck_assert_int_eq(nxl_md_send_invalidate(A, "127.0.0.1", port, ctr_cb, &d, NULL),
                     NXL_SUCCESS);
    ck_assert_int_eq(finish(&d), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_check(B, "A"), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(prep_in(B, "A", abuf, 16), NXL_ERR_NOT_FOUND);
    /* again: B knows no A, and says so */
    ctr_t e = {0};
    ck_assert_int_eq(nxl_md_send_invalidate(A, "127.0.0.1", port, ctr_cb, &e, NULL),
                     NXL_SUCCESS);
    ck_assert_int_eq(finish(&e), NXL_ERR_NOT_FOUND);
    ck_sentence(e.err, "'A'");
    /* and back */
    ctr_t g = {0};
    ck_assert_int_eq(nxl_md_send(A, "127.0.0.1", port, ctr_cb, &g, NULL), NXL_SUCCESS);
    ck_assert_int_eq(finish(&g), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_check(B, "A"), NXL_SUCCESS);
}
END_TEST

/* The peer refuses what it is sent: metadata naming the peer itself. */
START_TEST(t_send_refused)
{
    nxl_agent_t *b2 = agent_on(base, "B", 0); /* another agent called B */
    ctr_t c = {0};
    ck_assert_int_eq(nxl_md_send(b2, "127.0.0.1", port, ctr_cb, &c, NULL), NXL_SUCCESS);
    ck_assert_int_eq(finish(&c), NXL_ERR_MISMATCH);
    ck_sentence(c.err, "itself");
    ck_assert_int_eq(nxl_md_check(B, "B"), NXL_ERR_NOT_FOUND);
    settle();
    nxl_agent_destroy(b2);
    /* B still serves */
    ctr_t d = {0};
    ck_assert_int_eq(nxl_md_fetch(A, "B", "127.0.0.1", port, ctr_cb, &d, NULL), NXL_SUCCESS);
    ck_assert_int_eq(finish(&d), NXL_SUCCESS);
    /* A refuses what it fetched (metadata of an agent named as itself): the
     * sentence names the call made, nxl_md_fetch, then the load's reason */
    nxl_agent_t *a2 = agent_on(base, "A", 1);
    ctr_t e = {0};
    ck_assert_int_eq(nxl_md_fetch(A, NULL, "127.0.0.1", nxl_agent_listen_port(a2), ctr_cb, &e,
                                  NULL),
                     NXL_SUCCESS);
    ck_assert_int_eq(finish(&e), NXL_ERR_MISMATCH);
    ck_assert_msg(!strncmp(e.err, "nxl_md_fetch: ", 14), "%s", e.err);
    settle();
    nxl_agent_destroy(a2);
}
END_TEST

START_TEST(t_nothing_listening)
{
    /* bound but not listening: connections are refused */
    uint16_t dead;
    int s = tl_loopback_socket(0, &dead);
    char where[32];
    snprintf(where, sizeof(where), "127.0.0.1:%u", dead);

    ctr_t c = {0}, d = {0}, e = {0};
    nxl_future_t *f = NULL;
    ck_assert_int_eq(nxl_md_fetch(A, "B", "127.0.0.1", dead, ctr_cb, &c, &f), NXL_SUCCESS);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(nxl_md_send(A, "127.0.0.1", dead, ctr_cb, &d, NULL), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_send_invalidate(A, "127.0.0.1", dead, ctr_cb, &e, NULL),
                     NXL_SUCCESS);
    /* started, not failed at the call: each completes later */
    ck_assert_int_eq(c.n + d.n + e.n, 0);
    ck_assert(run_until(&c.n, 1, 10000));
    ck_assert(run_until(&d.n, 1, 10000));
    ck_assert(run_until(&e.n, 1, 10000));
    run_ms(20);
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(d.n, 1);
    ck_assert_int_eq(e.n, 1);
    ck_assert_int_eq(c.st, NXL_ERR_REMOTE_DISCONNECT);
    ck_assert_int_eq(d.st, NXL_ERR_REMOTE_DISCONNECT);
    ck_assert_int_eq(e.st, NXL_ERR_REMOTE_DISCONNECT);
    ck_sentence(nxl_future_error(f), where);
    ck_sentence(c.err, where);
    ck_sentence(d.err, where);
    ck_sentence(nxl_agent_last_error(A), where);
    ck_assert_ptr_null(nxl_future_peer(f));
    nxl_future_release(f);
    close(s);
    ck_assert_int_eq(nxl_md_check(A, "B"), NXL_ERR_NOT_FOUND);
    /* A still works */
    ctr_t g = {0};
    ck_assert_int_eq(nxl_md_fetch(A, "B", "127.0.0.1", port, ctr_cb, &g, NULL), NXL_SUCCESS);
    ck_assert_int_eq(finish(&g), NXL_SUCCESS);
}
END_TEST


/* Binds a temporary file holding @p text over @p target. */
static int bind_file(const char *target, const char *text, char *why, size_t cap)
{
    char path[] = "/tmp/nxl-etc-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
        snprintf(why, cap, "cannot write a temporary file: %s", strerror(errno));
        return -1;
    }
    close(fd);
    int rc = mount(path, target, "none", MS_BIND, NULL);
    if (rc != 0)
        snprintf(why, cap, "cannot bind a file over %s: %s", target, strerror(errno));
    unlink(path); /* the bind mount keeps it */
    return rc;
}

/* Gives this test process (Check forks one per test) a private /etc/hosts
 * with @p hosts and, with @p resolv, a private /etc/resolv.conf, through a
 * mount namespace. 0: done; -1: not possible here (the reason in why). */
static int private_etc(const char *hosts, const char *resolv, char *why, size_t cap)
{
    int rc = unshare(CLONE_NEWNS);
    if (rc != 0) /* without root: a user namespace of our own may allow it */
        rc = unshare(CLONE_NEWUSER | CLONE_NEWNS);
    if (rc != 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0) {
        snprintf(why, cap, "no private mount namespace here (unshare/mount: %s)",
                 strerror(errno));
        return -1;
    }
    if (bind_file("/etc/hosts", hosts, why, cap) != 0)
        return -1;
    return resolv ? bind_file("/etc/resolv.conf", resolv, why, cap) : 0;
}

static int private_hosts(const char *text, char *why, size_t cap)
{
    return private_etc(text, NULL, why, cap);
}

/* A DNS server of the test's own on 127.0.0.77:53 (nothing leaves the
 * machine): "slow.nxl.test" is 127.0.0.1, answered after dns_delay_ms;
 * every other name does not exist. */
#define DNS_ADDR "127.0.0.77"
static int dns_fd = -1, dns_delay_ms, dns_queries;

static void *dns_main(void *arg)
{
    unsigned char q[512], r[600];
    for (;;) {
        struct sockaddr_in from;
        socklen_t fl = sizeof(from);
        ssize_t n = recvfrom(dns_fd, q, sizeof(q), 0, (struct sockaddr *)&from, &fl);
        if (n < 17)
            continue;
        __atomic_add_fetch(&dns_queries, 1, __ATOMIC_RELAXED);
        /* the question: labels from byte 12, then type and class */
        size_t i = 12;
        char name[256] = "";
        while (i < (size_t)n && q[i] && i + q[i] < (size_t)n) {
            snprintf(name + strlen(name), sizeof(name) - strlen(name), "%s%.*s",
                     name[0] ? "." : "", q[i], (const char *)q + i + 1);
            i += 1u + q[i];
        }
        size_t qend = i + 5; /* zero label, type, class */
        if (qend > (size_t)n)
            continue;
        unsigned qtype = (unsigned)q[i + 1] << 8 | q[i + 2];
        int known = !strcasecmp(name, "slow.nxl.test");
        memcpy(r, q, qend);
        r[2] = 0x81;                        /* response, recursion desired */
        r[3] = known ? 0x80 : 0x83;         /* recursion available; NXDOMAIN */
        r[6] = 0, r[7] = known && qtype == 1; /* one answer, for A */
        r[8] = r[9] = r[10] = r[11] = 0;
        size_t len = qend;
        if (known && qtype == 1) {
            static const unsigned char a[] = {0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 127, 0, 0, 1};
            memcpy(r + len, a, sizeof(a));
            len += sizeof(a);
        }
        if (known)
            usleep((useconds_t)dns_delay_ms * 1000);
        sendto(dns_fd, r, len, 0, (struct sockaddr *)&from, fl);
    }
    return NULL;
}

/* Private /etc files naming our DNS server; 0 or -1 (why). */
static int private_dns(int delay_ms, char *why, size_t cap)
{
    if (private_etc("127.0.0.1\tlocalhost\n", "nameserver " DNS_ADDR "\noptions timeout:3 attempts:1\n",
                    why, cap) != 0)
        return -1;
    dns_delay_ms = delay_ms;
    dns_fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(53)};
    inet_pton(AF_INET, DNS_ADDR, &sin.sin_addr);
    if (bind(dns_fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        snprintf(why, cap, "cannot run a DNS server on %s:53: %s", DNS_ADDR, strerror(errno));
        return -1;
    }
    pthread_t t;
    pthread_create(&t, NULL, dns_main, NULL);
    pthread_detach(t);
    return 0;
}

/* Debian's default /etc/hosts: "localhost" resolves to ::1 first, where
 * nothing listens (B listens on 127.0.0.1). Every address must be tried,
 * and when all fail the sentence names each. */
START_TEST(t_every_address)
{
    char why[256];
    if (private_hosts("127.0.0.1\tlocalhost nxl-two\n"
                      "::1\tlocalhost ip6-localhost ip6-loopback nxl-two\n"
                      "127.0.0.1\tnxl-v4only\n",
                      why, sizeof(why)) != 0) {
        printf("SKIP: t_every_address: %s\n", why);
        return;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    ck_assert_int_eq(getaddrinfo("nxl-two", "1", &hints, &res), 0);
    ck_assert_msg(res->ai_family == AF_INET6 && res->ai_next,
                  "the private hosts file should give ::1 first, then 127.0.0.1");
    freeaddrinfo(res);
    const char *names[] = {"localhost", "nxl-two"};
    for (int i = 0; i < 2; i++) {
        ctr_t c = {0};
        ck_assert_int_eq(nxl_md_fetch(A, "B", names[i], port, ctr_cb, &c, NULL), NXL_SUCCESS);
        ck_assert_int_eq(finish(&c), NXL_SUCCESS);
        ck_assert_str_eq(c.peer, "B");
        ck_assert_int_eq(nxl_md_invalidate(A, "B"), NXL_SUCCESS);
        ctr_t d = {0};
        ck_assert_int_eq(nxl_md_send(A, names[i], port, ctr_cb, &d, NULL), NXL_SUCCESS);
        ck_assert_int_eq(finish(&d), NXL_SUCCESS);
    }
    /* nothing listens on either address: both named, with the reason */
    uint16_t dead;
    int s = tl_loopback_socket(0, &dead);
    ctr_t e = {0};
    ck_assert_int_eq(nxl_md_fetch(A, "B", "nxl-two", dead, ctr_cb, &e, NULL),
                     NXL_SUCCESS);
    ck_assert_int_eq(finish(&e), NXL_ERR_REMOTE_DISCONNECT);
    ck_sentence(e.err, "::1 (");
    ck_sentence(e.err, "127.0.0.1 (");
    ck_sentence(e.err, "nxl-two:");
    close(s);
    /* one address only: named too */
    ctr_t g = {0};
    ck_assert_int_eq(nxl_md_fetch(A, "B", "nxl-v4only", dead, ctr_cb, &g, NULL),
                     NXL_SUCCESS);
    ck_assert_int_eq(finish(&g), NXL_ERR_REMOTE_DISCONNECT);
    ck_sentence(g.err, "127.0.0.1 (");
    /* and A still works */
    ctr_t h = {0};
    ck_assert_int_eq(nxl_md_fetch(A, "B", "localhost", port, ctr_cb, &h, NULL), NXL_SUCCESS);
    ck_assert_int_eq(finish(&h), NXL_SUCCESS);
}
END_TEST

START_TEST(t_unresolvable)
{
    /* refused at the call: no host, an empty or overlong one, no port */
    ctr_t c = {0};
    nxl_future_t *f = (nxl_future_t *)&f;
    ck_assert_int_eq(nxl_md_fetch(A, "B", NULL, port, ctr_cb, &c, &f), NXL_ERR_INVALID_PARAM);
    ck_assert_ptr_null(f);
    ck_assert_int_eq(nxl_md_fetch(A, "B", "", port, ctr_cb, &c, NULL), NXL_ERR_INVALID_PARAM);
    char longname[300];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = 0;
    ck_assert_int_eq(nxl_md_send(A, longname, port, ctr_cb, &c, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "255");
    ck_assert_int_eq(nxl_md_fetch(A, "B", "127.0.0.1", 0, ctr_cb, &c, NULL),
                     NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(A), "port");
    run_ms(100);
    ck_assert_int_eq(c.n, 0); /* nothing started */
    /* a name that does not resolve: asked of our own DNS server, never of
     * the machine's; the request starts and completes NOT_FOUND */
    char why[256];
    if (private_dns(0, why, sizeof(why)) != 0) {
        printf("SKIP: t_unresolvable (names): %s\n", why);
        return;
    }
    ctr_t d = {0}, e = {0}, g = {0};
    ck_assert_int_eq(nxl_md_fetch(A, "B", "no.such.host.invalid", port, ctr_cb, &d, &f),
                     NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_send(A, "no.such.host.invalid", port, ctr_cb, &e, NULL), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_send_invalidate(A, "no.such.host.invalid", port, ctr_cb, &g, NULL),
                     NXL_SUCCESS);
    ck_assert_int_eq(d.n + e.n + g.n, 0); /* never inside the call */
    ck_assert(run_until(&d.n, 1, 10000) && run_until(&e.n, 1, 10000) && run_until(&g.n, 1, 10000));
    run_ms(20);
    ck_assert_int_eq(d.n + e.n + g.n, 3);
    ck_assert_int_eq(d.st, NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(e.st, NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(g.st, NXL_ERR_NOT_FOUND);
    ck_sentence(d.err, "no.such.host.invalid");
    ck_sentence(nxl_future_error(f), "resolve");
    ck_assert_ptr_null(nxl_future_peer(f));
    nxl_future_release(f);
    ck_assert_int_gt(__atomic_load_n(&dns_queries, __ATOMIC_RELAXED), 0);
}
END_TEST

/* A resolver that takes 1.5 s: the reactor goes on meanwhile (transfers
 * keep completing), the call returns at once, and the fetch then succeeds.
 * Canceling a fetch while its name resolves, and tearing down with one
 * resolving, leave nothing behind. */
static int lb_done;
static void lb_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    ck_assert_int_eq(st, NXL_SUCCESS);
    lb_done++;
}

START_TEST(t_resolve_off_loop)
{
    char why[256];
    if (private_dns(1500, why, sizeof(why)) != 0) {
        printf("SKIP: t_resolve_off_loop: %s\n", why);
        return;
    }
    /* loopback transfers of A keep the reactor visibly busy */
    nxl_desc_t l = {.addr = (uintptr_t)abuf, .len = 65536},
               r = {.addr = (uintptr_t)abuf + BUF / 2, .len = 65536};
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, rl = {NXL_DRAM, &r, 1};
    nxl_xfer_t *x;
    ck_assert_int_eq(nxl_xfer_create(A, NXL_WRITE, &ll, &rl, "A", NULL, &x), NXL_SUCCESS);
    ctr_t c = {0};
    uint64_t t0 = tl_now_ms();
    ck_assert_int_eq(nxl_md_fetch(A, "B", "slow.nxl.test", port, ctr_cb, &c, NULL), NXL_SUCCESS);
    uint64_t call_ms = tl_now_ms() - t0;
    ck_assert_msg(call_ms < 500, "nxl_md_fetch blocked for %llu ms", (unsigned long long)call_ms);
    lb_done = 0;
    int during = 0;
    while (!c.n && tl_now_ms() - t0 < 10000) {
        if (nxl_xfer_status(x) != NXL_IN_PROG)
            ck_assert_int_eq(nxl_xfer_post(x, lb_cb, NULL, NULL), NXL_SUCCESS);
        event_base_loop(base, EVLOOP_ONCE);
        if (!c.n)
            during = lb_done;
    }
    uint64_t took = tl_now_ms() - t0;
    ck_assert_int_eq(c.n, 1);
    ck_assert_msg(c.st == NXL_SUCCESS, "fetch: %s", c.err);
    ck_assert_str_eq(c.peer, "B");
    ck_assert_msg(took >= 1000, "the resolver answered in %llu ms: not slow", (unsigned long long)took);
    ck_assert_msg(during >= 10, "only %d transfers completed while the name resolved", during);
    run_ms(20);
    nxl_xfer_release(x);
    /* canceled while resolving */
    ctr_t d = {0};
    nxl_future_t *f;
    ck_assert_int_eq(nxl_md_fetch(A, "B", "slow.nxl.test", port, ctr_cb, &d, &f), NXL_SUCCESS);
    run_ms(100);
    nxl_future_cancel(f);
    ck_assert_int_eq(finish(&d), NXL_ERR_CANCELED);
    nxl_future_release(f);
    /* torn down while resolving: teardown cancels it */
    ctr_t e = {0};
    ck_assert_int_eq(nxl_md_fetch(A, "B", "slow.nxl.test", port, ctr_cb, &e, NULL), NXL_SUCCESS);
    run_ms(100);
    nxl_agent_destroy(A);
    A = NULL;
    ck_assert_int_eq(e.n, 1);
    ck_assert_int_eq(e.st, NXL_ERR_CANCELED);
    usleep(1600 * 1000); /* glibc's answer arrives for nobody */
}
END_TEST

/* ------------------------------------------------------- garbage clients */

static int raw_connect(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert(connect(s, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
    return s;
}

static void raw_send(int s, const void *p, size_t n)
{
    ck_assert(send(s, p, n, MSG_NOSIGNAL) == (ssize_t)n);
}

/* runs the base until the listener closed s (EOF, or reset); returns the
 * bytes it answered before closing */
static size_t until_closed(int s, unsigned char *got, size_t cap)
{
    size_t n = 0;
    uint64_t end = tl_now_ms() + 5000;
    while (tl_now_ms() < end) {
        event_base_loop(base, EVLOOP_ONCE);
        unsigned char tmp[4096];
        ssize_t r = recv(s, tmp, sizeof(tmp), 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            return n;
        if (r > 0) {
            size_t k = (size_t)r < cap - n ? (size_t)r : cap - n;
            memcpy(got + n, tmp, k);
            n += k;
        }
    }
    ck_abort_msg("the listener did not close a garbage connection");
    return n;
}

/* reads one reply frame (16-byte header + payload) from s */
static nxl_status_t raw_reply(int s, char *payload, size_t cap)
{
    unsigned char buf[8192];
    size_t n = 0;
    uint64_t end = tl_now_ms() + 5000;
    while (tl_now_ms() < end) {
        event_base_loop(base, EVLOOP_ONCE);
        ssize_t r = recv(s, buf + n, sizeof(buf) - n, 0);
        if (r > 0)
            n += (size_t)r;
        if (n >= 16) {
            uint32_t len;
            memcpy(&len, buf + 8, 4);
            len = ntohl(len);
            if (n >= 16 + len) {
                ck_assert(!memcmp(buf, "NXLX", 4));
                ck_assert_uint_eq(buf[5], 0x81);
                snprintf(payload, cap, "%.*s", (int)len, (const char *)buf + 16);
                return (nxl_status_t)(int8_t)buf[6];
            }
        }
        if (r == 0)
            break;
    }
    ck_abort_msg("no reply frame");
    return NXL_ERR_UNKNOWN;
}

static void frame(unsigned char *h, int type, uint32_t len)
{
    memcpy(h, "NXLX", 4);
    h[4] = 1;
    h[5] = (unsigned char)type;
    h[6] = h[7] = 0;
    uint32_t n = htonl(len);
    memcpy(h + 8, &n, 4);
    memset(h + 12, 0, 4);
}

static void fetch_works(const char *what)
{
    ctr_t c = {0};
    ck_assert_int_eq(nxl_md_fetch(A, "B", "127.0.0.1", port, ctr_cb, &c, NULL), NXL_SUCCESS);
    ck_assert_msg(run_until(&c.n, 1, 10000), "%s: fetch never completed", what);
    ck_assert_msg(c.st == NXL_SUCCESS, "%s: fetch failed: %s", what, c.err);
}

START_TEST(t_garbage_clients)
{
    unsigned char got[256];
    /* junk */
    int s = raw_connect();
    const char *http = "GET / HTTP/1.0\r\nHost: x\r\n\r\n";
    raw_send(s, http, strlen(http));
    until_closed(s, got, sizeof(got));
    close(s);
    fetch_works("after HTTP junk");
    /* a frame announcing more than the limit */
    s = raw_connect();
    unsigned char h[16];
    frame(h, 1, 0xffffffffu);
    raw_send(s, h, 16);
    until_closed(s, got, sizeof(got));
    close(s);
    fetch_works("after a huge frame");
    /* a wrong version byte */
    s = raw_connect();
    frame(h, 2, 0);
    h[4] = 9;
    raw_send(s, h, 16);
    until_closed(s, got, sizeof(got));
    close(s);
    /* random bytes */
    s = raw_connect();
    unsigned char rnd[1000];
    tl_fill(rnd, sizeof(rnd), 4242);
    raw_send(s, rnd, sizeof(rnd));
    until_closed(s, got, sizeof(got));
    close(s);
    fetch_works("after random bytes");

    /* half a header, then silence: others are served meanwhile */
    int slow = raw_connect();
    raw_send(slow, "NXLX\x01", 5);
    /* a frame whose payload never comes */
    int slow2 = raw_connect();
    frame(h, 1, 1000);
    raw_send(slow2, h, 16);
    fetch_works("with stalled clients");
    ctr_t c = {0};
    ck_assert_int_eq(nxl_md_send(A, "127.0.0.1", port, ctr_cb, &c, NULL), NXL_SUCCESS);
    ck_assert_int_eq(finish(&c), NXL_SUCCESS);
    close(slow);
    close(slow2);

    /* well-formed frames with bad content get an answer, not a crash */
    char why[600];
    s = raw_connect();
    frame(h, 7, 0);
    raw_send(s, h, 16);
    ck_assert_int_eq(raw_reply(s, why, sizeof(why)), NXL_ERR_NOT_SUPPORTED);
    ck_assert(is_sentence(why));
    const char *junk = "{\"nxl\":1,\"agent\":";
    frame(h, 1, (uint32_t)strlen(junk));
    raw_send(s, h, 16);
    raw_send(s, junk, strlen(junk));
    ck_assert_int_eq(raw_reply(s, why, sizeof(why)), NXL_ERR_MISMATCH);
    ck_sentence(why, "nxl_md_load");
    frame(h, 3, 7);
    raw_send(s, h, 16);
    raw_send(s, "nobody!", 7);
    ck_assert_int_eq(raw_reply(s, why, sizeof(why)), NXL_ERR_NOT_FOUND);
    /* a fetch on the same connection after all that */
    frame(h, 2, 0);
    raw_send(s, h, 16);
    ck_assert_int_eq(raw_reply(s, why, sizeof(why)), NXL_SUCCESS);
    ck_assert_ptr_nonnull(strstr(why, "\"agent\":\"B\""));
    close(s);
    /* B still knows A from the send above, and still serves */
    ck_assert_int_eq(nxl_md_check(B, "A"), NXL_SUCCESS);
    fetch_works("at the end");
}
END_TEST

/* --------------------------------------------------------------- data */

static int n_notif;
static long notif_bad;
static char notif_from[32];
static uint32_t want_seed;
static void b_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    n_notif++;
    snprintf(notif_from, sizeof(notif_from), "%s", from);
    notif_bad = tl_check(bbuf + 65536, 1u << 20, want_seed);
}

START_TEST(t_write_read)
{
    ctr_t c = {0};
    ck_assert_int_eq(nxl_md_fetch(A, "B", "127.0.0.1", port, ctr_cb, &c, NULL), NXL_SUCCESS);
    ck_assert_int_eq(finish(&c), NXL_SUCCESS);
    /* WRITE A -> B, with a notification B checks the data with */
    nxl_agent_on_notif(B, b_notif, NULL);
    nxl_xfer_t *x;
    ck_assert_msg(tl_xfer1(A, NXL_WRITE, (uintptr_t)abuf, (uintptr_t)bbuf + 65536, 1u << 20, "B",
                           "written", &x) == NXL_SUCCESS,
                  "%s", nxl_agent_last_error(A));
    for (uint32_t k = 0; k < 3; k++) {
        want_seed = 900 + k;
        tl_fill(abuf, 1u << 20, want_seed);
        notif_bad = -2;
        ctr_t w = {0};
        ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &w, NULL), NXL_SUCCESS);
        ck_assert_int_eq(finish(&w), NXL_SUCCESS);
        long bad = tl_check(bbuf + 65536, 1u << 20, want_seed);
        ck_assert_msg(bad < 0, "WRITE %u: byte %ld wrong in B", k, bad);
        ck_assert(run_until(&n_notif, (int)k + 1, 5000));
        ck_assert_str_eq(notif_from, "A");
        ck_assert_msg(notif_bad == -1, "notification before the data (byte %ld)", notif_bad);
    }
    nxl_xfer_release(x);
    /* READ B -> A, many descriptors */
    enum { N = 100 };
    nxl_desc_t ld[N], rd[N];
    tl_fill(bbuf + (2u << 20), N * 4096, 31337);
    memset(abuf, 0, N * 4096);
    for (int i = 0; i < N; i++) {
        ld[i] = (nxl_desc_t){.addr = (uintptr_t)abuf + (size_t)(N - 1 - i) * 4096, .len = 4096};
        rd[i] = (nxl_desc_t){.addr = (uintptr_t)bbuf + (2u << 20) + (size_t)(N - 1 - i) * 4096,
                             .len = 4096};
    }
    nxl_dlist_t lml = {NXL_DRAM, ld, N}, rml = {NXL_DRAM, rd, N};
    ck_assert_int_eq(nxl_xfer_create(A, NXL_READ, &lml, &rml, "B", NULL, &x), NXL_SUCCESS);
    ck_assert_int_eq(post_wait(x), NXL_SUCCESS);
    long bad = tl_check(abuf, N * 4096, 31337);
    ck_assert_msg(bad < 0, "READ: byte %ld wrong in A", bad);
    nxl_xfer_release(x);
    /* outside B's registered memory: refused at creation */
    nxl_desc_t out = {.addr = (uintptr_t)bbuf + BUF - 8, .len = 16};
    nxl_desc_t l = {.addr = (uintptr_t)abuf, .len = 16};
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, ol = {NXL_DRAM, &out, 1};
    x = (nxl_xfer_t *)&x;
    ck_assert_int_eq(nxl_xfer_create(A, NXL_WRITE, &ll, &ol, "B", NULL, &x), NXL_ERR_NOT_FOUND);
    ck_assert_ptr_null(x);
    ck_sentence(nxl_agent_last_error(A), "'B'");
}
END_TEST

/* Invalidation: transfers made before it stay handles but no longer post,
 * lists prepared before it make no new transfers; after a reload all works. */
START_TEST(t_invalidate_then_reload)
{
    ctr_t c = {0};
    ck_assert_int_eq(nxl_md_fetch(A, "B", "127.0.0.1", port, ctr_cb, &c, NULL), NXL_SUCCESS);
    ck_assert_int_eq(finish(&c), NXL_SUCCESS);
    nxl_desc_t l = {.addr = (uintptr_t)abuf, .len = 4096}, r = {.addr = (uintptr_t)bbuf, .len = 4096};
    nxl_prepped_t *lp, *rp;
    ck_assert_int_eq(nxl_prep(A, NULL, NXL_DRAM, &l, 1, &lp), NXL_SUCCESS);
    ck_assert_int_eq(nxl_prep(A, "B", NXL_DRAM, &r, 1, &rp), NXL_SUCCESS);
    nxl_xfer_t *x;
    ck_assert_int_eq(nxl_xfer_make(A, NXL_WRITE, lp, NULL, rp, NULL, 1, NULL, &x), NXL_SUCCESS);
    ck_assert_int_eq(post_wait(x), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_invalidate(A, "B"), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_check(A, "B"), NXL_ERR_NOT_FOUND);
    ctr_t w2 = {0};
    ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &w2, NULL), NXL_ERR_REMOTE_DISCONNECT);
    ck_sentence(nxl_agent_last_error(A), "'B'");
    nxl_xfer_t *y = NULL;
    ck_assert_int_eq(nxl_xfer_make(A, NXL_WRITE, lp, NULL, rp, NULL, 1, NULL, &y),
                     NXL_ERR_NOT_FOUND);
    ck_assert_ptr_null(y);
    nxl_prepped_t *rp2 = NULL;
    ck_assert_int_eq(nxl_prep(A, "B", NXL_DRAM, &r, 1, &rp2), NXL_ERR_NOT_FOUND);
    run_ms(20);
    ck_assert_int_eq(w2.n, 0); /* a refused post starts nothing */
    nxl_xfer_release(x);
    nxl_prepped_release(rp);
    /* reload: new lists and transfers work */
    ctr_t c2 = {0};
    ck_assert_int_eq(nxl_md_fetch(A, "B", "127.0.0.1", port, ctr_cb, &c2, NULL), NXL_SUCCESS);
    ck_assert_int_eq(finish(&c2), NXL_SUCCESS);
    ck_assert_int_eq(nxl_prep(A, "B", NXL_DRAM, &r, 1, &rp), NXL_SUCCESS);
    write_4k(lp, rp, 4242);
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
}
END_TEST

/* ------------------------------------------- separate bases, in turn */

static nxl_agent_t *SA, *SB;
static int run2(const volatile int *counter, int target, int timeout_ms)
{
    return tl_run2_until(SA, SB, counter, target, timeout_ms, 5);
}

START_TEST(t_separate_bases)
{
    SA = tl_agent("A", 0);
    SB = tl_agent("B", 1);
    ck_assert_ptr_ne(nxl_agent_base(SA), nxl_agent_base(SB));
    unsigned char *a = calloc(1, 65536), *b = calloc(1, 65536);
    reg(SA, a, 65536);
    reg(SB, b, 65536);
    ctr_t c = {0};
    ck_assert_int_eq(nxl_md_fetch(SA, "B", "127.0.0.1", nxl_agent_listen_port(SB), ctr_cb, &c,
                                  NULL),
                     NXL_SUCCESS);
    ck_assert_int_eq(c.n, 0);
    ck_assert(run2(&c.n, 1, 10000));
    ck_assert_int_eq(c.st, NXL_SUCCESS);
    ck_assert_str_eq(c.peer, "B");
    ctr_t d = {0};
    ck_assert_int_eq(nxl_md_send(SA, "127.0.0.1", nxl_agent_listen_port(SB), ctr_cb, &d, NULL),
                     NXL_SUCCESS);
    ck_assert(run2(&d.n, 1, 10000));
    ck_assert_int_eq(d.st, NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_check(SB, "A"), NXL_SUCCESS);
    /* a WRITE A -> B */
    nxl_desc_t l = {.addr = (uintptr_t)a, .len = 65536}, r = {.addr = (uintptr_t)b, .len = 65536};
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, rl = {NXL_DRAM, &r, 1};
    nxl_xfer_t *x;
    ck_assert_int_eq(nxl_xfer_create(SA, NXL_WRITE, &ll, &rl, "B", NULL, &x), NXL_SUCCESS);
    tl_fill(a, 65536, 4711);
    ctr_t w = {0};
    ck_assert_int_eq(nxl_xfer_post(x, ctr_cb, &w, NULL), NXL_SUCCESS);
    ck_assert(run2(&w.n, 1, 10000));
    ck_assert_int_eq(w.st, NXL_SUCCESS);
    ck_assert(tl_check(b, 65536, 4711) < 0);
    nxl_xfer_release(x);
    int z = 0;
    run2(&z, 1, 50); /* let both settle before destroying (see settle()) */
    nxl_agent_destroy(SA);
    nxl_agent_destroy(SB);
    free(a);
    free(b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exchange");
    TL_TCASE(s, "shared_base", 30, setup, teardown, t_fetch, t_fetch_mismatch, t_send_invalidate,
             t_send_refused, t_nothing_listening, t_every_address, t_unresolvable,
             t_resolve_off_loop, t_garbage_clients, t_write_read, t_invalidate_then_reload);
    TL_TCASE(s, "separate_bases", 30, NULL, NULL, t_separate_bases);
    return tl_run(s);
}
