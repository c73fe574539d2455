/* SPDX-License-Identifier: BSD-3-Clause */
/* Discovery through a real etcd server: publish, fetch (waiting for the key
 * to appear, or timing out), partial metadata under a label, unpublish and
 * lease expiry invalidating a peer, a peer killed and one restarted under
 * the same name, etcd unreachable, etcd stopped and restarted, eight
 * agent processes in a ring of WRITEs with notifications, and values signed
 * with a shared secret (unsigned, another secret, moved to another key,
 * tampered, an old value put back: refused; the watch goes on). */
#include "etcd_util.h"
#include "testlib.h"

#include <event2/event.h>
#include <sys/mman.h>

static tl_etcd_t E;

static void setup(void)
{
    memset(&E, 0, sizeof(E));
    ck_assert_msg(tl_etcd_start(&E) == 0, "etcd did not start (see %s/etcd.log)", E.dir);
}

static void teardown(void)
{
    tl_etcd_cleanup(&E);
}

/* Buffers at fixed addresses, so that every process knows where each
 * agent's buffer is without asking. */
#define BUF_LEN (4u << 20)
/* (0x5000... is clear of the heap, the libraries and AddressSanitizer's
 * allocator at 0x6000...) */
static void *slot_addr(int i)
{
    return (void *)(uintptr_t)(0x500000000000ull + (uint64_t)i * (64u << 20));
}

/* with Check's fork mode off (valgrind) the tests share one process: a slot
 * an earlier test (or the parent before a fork) mapped is mapped afresh */
static uint64_t slots_mapped;

static unsigned char *buf_at(int i)
{
    void *want = slot_addr(i);
    if (i < 64 && (slots_mapped >> i & 1))
        munmap(want, BUF_LEN);
    void *p = mmap(want, BUF_LEN, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == want && i < 64)
        slots_mapped |= 1ull << i;
    ck_assert_msg(p == want, "mmap at %p failed", want);
    return p;
}

static nxl_agent_t *agent(const char *name, struct event_base *base, unsigned ttl,
                          const char *endpoints)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = name;
    c.base = base;
    c.etcd_endpoints = endpoints ? endpoints : E.endpoint;
    c.etcd_lease_ttl_s = ttl;
    nxl_agent_t *a = tl_agent_cfg(&c, 0);
    tl_backend(a, "UCX");
    return a;
}

#define reg tl_reg_dram

static int ncb;
static nxl_status_t last;
static void cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    ncb++;
    last = st;
    if (arg)
        snprintf(arg, 512, "%s", nxl_future_error(f));
}

/* runs a shared base until *c >= n */
static int run_base(struct event_base *b, const int *c, int n, int ms)
{
    uint64_t end = tl_now_ms() + (uint64_t)ms;
    struct timeval tv = {0, 20000};
    while (*c < n && tl_now_ms() < end)
        event_base_loopexit(b, &tv), event_base_loop(b, EVLOOP_ONCE);
    return *c >= n;
}

static void kill_reap(pid_t pid);
static nxl_status_t wait_f(nxl_agent_t *a, nxl_future_t *f, int ms)
{
    nxl_status_t st = nxl_future_wait(f, ms);
    nxl_future_release(f);
    return st;
}

/* a WRITE of len bytes from a's src into b's dst (b known to a), checked */
static void write_check(nxl_agent_t *a, const char *bname, unsigned char *src, unsigned char *dst,
                        size_t len, unsigned seed, struct event_base *base)
{
    tl_fill(src, len, seed);
    nxl_desc_t l = {.addr = (uintptr_t)src, .len = len}, r = {.addr = (uintptr_t)dst, .len = len};
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, rl = {NXL_DRAM, &r, 1};
    nxl_xfer_t *x;
    ck_assert_msg(nxl_xfer_create(a, NXL_WRITE, &ll, &rl, bname, NULL, &x) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    int before = ncb;
    ck_assert(nxl_xfer_post(x, cb, NULL, NULL) == NXL_SUCCESS);
    ck_assert(run_base(base, &ncb, before + 1, 10000));
    ck_assert_int_eq(last, NXL_SUCCESS);
    ck_assert(tl_check(dst, len, seed) < 0);
    nxl_xfer_release(x);
}

/* agents A (with the etcd lease TTL a_ttl) and B on a new base, which it
 * returns; the callbacks' count reset */
static struct event_base *two_agents(unsigned a_ttl, nxl_agent_t **a, nxl_agent_t **b)
{
    struct event_base *base = event_base_new();
    *a = agent("A", base, a_ttl, NULL);
    *b = agent("B", base, 0, NULL);
    ncb = 0;
    return base;
}

/* the end of two_agents(): a, b and the base go */
static void two_agents_end(struct event_base *base, nxl_agent_t *a, nxl_agent_t *b)
{
    nxl_agent_destroy(a);
    nxl_agent_destroy(b);
    event_base_free(base);
}

START_TEST(t_publish_fetch)
{
    nxl_agent_t *a, *b;
    struct event_base *base = two_agents(0, &a, &b);
    unsigned char *src = malloc(1 << 20), *dst = malloc(1 << 20);
    reg(a, src, 1 << 20);
    reg(b, dst, 1 << 20);
    ncb = 0;
    ck_assert(nxl_md_publish(b, cb, NULL, NULL) == NXL_SUCCESS);
    ck_assert_int_eq(ncb, 0);
    ck_assert(run_base(base, &ncb, 1, 10000));
    ck_assert_int_eq(last, NXL_SUCCESS);
    nxl_future_t *f;
    ck_assert(nxl_md_fetch_etcd(a, "B", NULL, 5000, cb, NULL, &f) == NXL_SUCCESS);
    ck_assert(run_base(base, &ncb, 2, 10000));
    ck_assert_msg(last == NXL_SUCCESS, "%s", nxl_future_error(f));
    ck_assert_str_eq(nxl_future_peer(f), "B");
    nxl_future_release(f);
    write_check(a, "B", src, dst, 1 << 20, 5, base);
    /* a clean destroy unpublishes: A's watch sees B leave */
    nxl_agent_destroy(b);
    uint64_t end = tl_now_ms() + 5000;
    int dummy = 0;
    while (nxl_md_check(a, "B") == NXL_SUCCESS && tl_now_ms() < end)
        run_base(base, &dummy, 1, 50);
    ck_assert_msg(nxl_md_check(a, "B") == NXL_ERR_NOT_FOUND, "B's destroy did not unpublish it");
    nxl_agent_destroy(a);
    event_base_free(base);
    free(src);
    free(dst);
}
END_TEST

START_TEST(t_fetch_waits_then_times_out)
{
    nxl_agent_t *a, *b;
    struct event_base *base = two_agents(0, &a, &b);
    /* the fetch comes first; B publishes 300 ms later */
    ck_assert(nxl_md_fetch_etcd(a, "B", NULL, 8000, cb, NULL, NULL) == NXL_SUCCESS);
    int dummy = 0;
    run_base(base, &dummy, 1, 300);
    ck_assert_int_eq(ncb, 0);
    ck_assert(nxl_md_publish(b, NULL, NULL, NULL) == NXL_SUCCESS);
    ck_assert(run_base(base, &ncb, 1, 8000));
    ck_assert_int_eq(last, NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_check(a, "B"), NXL_SUCCESS);
    /* nobody publishes "C": NOT_FOUND after the timeout, with a sentence */
    char why[512] = "";
    uint64_t t0 = tl_now_ms();
    ck_assert(nxl_md_fetch_etcd(a, "C", NULL, 500, cb, why, NULL) == NXL_SUCCESS);
    ck_assert(run_base(base, &ncb, 2, 5000));
    ck_assert_int_eq(last, NXL_ERR_NOT_FOUND);
    ck_assert_msg(strstr(why, "'C'") != NULL, "sentence: %s", why);
    ck_assert_uint_ge(tl_now_ms() - t0, 450);
    /* bad arguments start nothing */
    ck_assert_int_eq(nxl_md_fetch_etcd(a, "A", NULL, 100, cb, NULL, NULL), NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(nxl_md_fetch_etcd(a, "x/y", NULL, 100, cb, NULL, NULL),
                     NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(nxl_md_publish_partial(b, "metadata", NXL_DRAM, NULL, 0, cb, NULL, NULL),
                     NXL_ERR_INVALID_PARAM);
    run_base(base, &dummy, 1, 100);
    ck_assert_int_eq(ncb, 2);
    two_agents_end(base, a, b);
}
END_TEST

START_TEST(t_partial_label)
{
    nxl_agent_t *a, *b;
    struct event_base *base = two_agents(0, &a, &b);
    unsigned char *r1 = malloc(65536), *r2 = malloc(65536);
    reg(b, r1, 65536);
    reg(b, r2, 65536);
    nxl_desc_t d1 = {.addr = (uintptr_t)r1, .len = 65536}, d2 = {.addr = (uintptr_t)r2, .len = 65536};
    ncb = 0;
    ck_assert(nxl_md_publish_partial(b, "layer0", NXL_DRAM, &d1, 1, cb, NULL, NULL) ==
              NXL_SUCCESS);
    ck_assert(run_base(base, &ncb, 1, 8000));
    ck_assert_int_eq(last, NXL_SUCCESS);
    ck_assert(nxl_md_fetch_etcd(a, "B", "layer0", 5000, cb, NULL, NULL) == NXL_SUCCESS);
    ck_assert(run_base(base, &ncb, 2, 8000));
    ck_assert_int_eq(last, NXL_SUCCESS);
    nxl_prepped_t *p;
    ck_assert_int_eq(nxl_prep(a, "B", NXL_DRAM, &d1, 1, &p), NXL_SUCCESS);
    nxl_prepped_release(p);
    ck_assert_int_eq(nxl_prep(a, "B", NXL_DRAM, &d2, 1, &p), NXL_ERR_NOT_FOUND);
    two_agents_end(base, a, b);
    free(r1);
    free(r2);
}
END_TEST

START_TEST(t_unpublish_invalidates)
{
    nxl_agent_t *a, *b;
    struct event_base *base = two_agents(0, &a, &b);
    ck_assert(nxl_md_publish(b, cb, NULL, NULL) == NXL_SUCCESS);
    ck_assert(run_base(base, &ncb, 1, 8000));
    ck_assert(nxl_md_fetch_etcd(a, "B", NULL, 5000, cb, NULL, NULL) == NXL_SUCCESS);
    ck_assert(run_base(base, &ncb, 2, 8000));
    ck_assert_int_eq(nxl_md_check(a, "B"), NXL_SUCCESS);
    ck_assert(nxl_md_unpublish(b, cb, NULL, NULL) == NXL_SUCCESS);
    ck_assert(run_base(base, &ncb, 3, 8000));
    ck_assert_int_eq(last, NXL_SUCCESS);
    uint64_t end = tl_now_ms() + 5000;
    int dummy = 0;
    while (nxl_md_check(a, "B") == NXL_SUCCESS && tl_now_ms() < end)
        run_base(base, &dummy, 1, 50);
    ck_assert_msg(nxl_md_check(a, "B") == NXL_ERR_NOT_FOUND, "A still knows B after unpublish");
    two_agents_end(base, a, b);
}
END_TEST

START_TEST(t_etcd_unreachable)
{
    char ep[64];
    snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", tl_free_port());
    nxl_agent_t *a = agent("A", NULL, 0, ep);
    char why[512] = "";
    ncb = 0;
    ck_assert(nxl_md_publish(a, cb, why, NULL) == NXL_SUCCESS);
    ck_assert(tl_run_until(a, &ncb, 1, 10000));
    ck_assert_int_eq(last, NXL_ERR_BACKEND);
    ck_assert_msg(strstr(why, "etcd") != NULL, "sentence: %s", why);
    ck_assert(nxl_md_fetch_etcd(a, "B", NULL, 3000, cb, why, NULL) == NXL_SUCCESS);
    ck_assert(tl_run_until(a, &ncb, 2, 10000));
    ck_assert_int_eq(last, NXL_ERR_BACKEND);
    /* the agent keeps working: a loopback transfer */
    unsigned char *p = malloc(8192);
    reg(a, p, 8192);
    tl_fill(p, 4096, 3);
    nxl_desc_t l = {.addr = (uintptr_t)p, .len = 4096}, r = {.addr = (uintptr_t)p + 4096, .len = 4096};
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, rl = {NXL_DRAM, &r, 1};
    nxl_xfer_t *x;
    ck_assert(nxl_xfer_create(a, NXL_WRITE, &ll, &rl, "A", NULL, &x) == NXL_SUCCESS);
    nxl_future_t *f;
    ck_assert(nxl_xfer_post(x, NULL, NULL, &f) == NXL_SUCCESS);
    ck_assert_int_eq(wait_f(a, f, 5000), NXL_SUCCESS);
    ck_assert(tl_check(p + 4096, 4096, 3) < 0);
    nxl_xfer_release(x);
    nxl_agent_destroy(a);
    free(p);
    /* no endpoints at all */
    unsetenv("NXL_ETCD_ENDPOINTS");
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "N";
    ck_assert(nxl_agent_create(&c, &a) == NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_publish(a, cb, NULL, NULL), NXL_ERR_NOT_SUPPORTED);
    ck_assert(strstr(nxl_agent_last_error(a), "etcd") != NULL);
    nxl_agent_destroy(a);
}
END_TEST

/* ---- separate processes */

/* fork() with a pipe to the child and one back: the parent's ends into
 * *to and *from, the child's into *rd and *wr (each side closes the
 * other's). Returns fork()'s pid. */
static pid_t fork_piped(int *to, int *from, int *rd, int *wr)
{
    int down[2], up[2];
    ck_assert(pipe(down) == 0 && pipe(up) == 0);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        close(down[1]);
        close(up[0]);
        *rd = down[0];
        *wr = up[1];
    } else {
        close(down[0]);
        close(up[1]);
        *to = down[1];
        *from = up[0];
    }
    return pid;
}

/* A child agent: forked before the test process touches UCX (UCX does not
 * survive fork), it waits for a byte on its pipe, then publishes with the
 * given TTL, its buffer at slot i, and runs until killed (or for 60 s). */
typedef struct {
    pid_t pid;
    int go, ready;
} child_t;

static child_t child_fork(const char *name, int slot, unsigned ttl)
{
    child_t c;
    int rd, wr;
    c.pid = fork_piped(&c.go, &c.ready, &rd, &wr);
    if (c.pid == 0) {
        char b;
        if (read(rd, &b, 1) != 1)
            _exit(2);
        nxl_agent_t *a = agent(name, NULL, ttl, NULL);
        reg(a, buf_at(slot), BUF_LEN);
        nxl_future_t *f;
        if (nxl_md_publish(a, NULL, NULL, &f) != NXL_SUCCESS || wait_f(a, f, 10000) != NXL_SUCCESS)
            _exit(3);
        char ok = 1;
        if (write(wr, &ok, 1) != 1)
            _exit(4);
        uint64_t end = tl_now_ms() + 60000;
        while (tl_now_ms() < end && getppid() != 1)
            nxl_agent_run_once(a, 200);
        _exit(0);
    }
    return c;
}

/* lets the child start and waits until it has published */
static void child_go(child_t *c)
{
    char b = 1;
    ck_assert(write(c->go, &b, 1) == 1);
    ck_assert_msg(read(c->ready, &b, 1) == 1 && b == 1, "child agent did not publish");
    close(c->go);
    close(c->ready);
}

static pid_t child_agent(const char *name, int slot, unsigned ttl)
{
    child_t c = child_fork(name, slot, ttl);
    child_go(&c);
    return c.pid;
}

static void kill_reap(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* WRITE then READ back len bytes between a's slot 0 and remote's slot */
static nxl_status_t write_read(nxl_agent_t *a, const char *remote, int slot, unsigned seed)
{
    unsigned char *src = slot_addr(0);
    const size_t len = 1 << 20;
    tl_fill(src, len, seed);
    nxl_desc_t l = {.addr = (uintptr_t)src, .len = len}, r = {.addr = (uintptr_t)slot_addr(slot), .len = len},
               back = {.addr = (uintptr_t)src + len, .len = len};
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, rl = {NXL_DRAM, &r, 1}, bl = {NXL_DRAM, &back, 1};
    nxl_xfer_t *w, *rd;
    nxl_status_t st = nxl_xfer_create(a, NXL_WRITE, &ll, &rl, remote, NULL, &w);
    if (st != NXL_SUCCESS)
        return st;
    ck_assert(nxl_xfer_create(a, NXL_READ, &bl, &rl, remote, NULL, &rd) == NXL_SUCCESS);
    nxl_future_t *f;
    ck_assert(nxl_xfer_post(w, NULL, NULL, &f) == NXL_SUCCESS);
    st = wait_f(a, f, 10000);
    if (st == NXL_SUCCESS) {
        memset(src + len, 0, len);
        nxl_status_t ps = nxl_xfer_post(rd, NULL, NULL, &f);
        ck_assert_msg(ps == NXL_SUCCESS, "READ post: %s: %s", nxl_status_name(ps), nxl_agent_last_error(a));
        st = wait_f(a, f, 10000);
        if (st == NXL_SUCCESS)
            ck_assert_msg(tl_check(src + len, len, seed) < 0, "read back differs");
    }
    nxl_xfer_release(w);
    nxl_xfer_release(rd);
    return st;
}

static void wait_gone(nxl_agent_t *a, const char *name, int ms, uint64_t *took, uint64_t t0)
{
    uint64_t end = tl_now_ms() + (uint64_t)ms;
    while (nxl_md_check(a, name) == NXL_SUCCESS && tl_now_ms() < end)
        nxl_agent_run_once(a, 50);
    ck_assert_msg(nxl_md_check(a, name) == NXL_ERR_NOT_FOUND, "'%s' still known after %d ms",
                  name, ms);
    *took = tl_now_ms() - t0;
}

/* An agent "A" (its slot 0 registered) that fetched the child agent K's
 * metadata from etcd and moved bytes with K's slot 1 (pattern seed) */
static nxl_agent_t *agent_to_k(unsigned seed)
{
    nxl_agent_t *a = agent("A", NULL, 0, NULL);
    reg(a, buf_at(0), BUF_LEN);
    nxl_future_t *f;
    ck_assert(nxl_md_fetch_etcd(a, "K", NULL, 5000, NULL, NULL, &f) == NXL_SUCCESS);
    ck_assert_int_eq(wait_f(a, f, 8000), NXL_SUCCESS);
    ck_assert_int_eq(write_read(a, "K", 1, seed), NXL_SUCCESS);
    return a;
}

START_TEST(t_killed_peer_lease_expires)
{
    const unsigned ttl = 2;
    pid_t k = child_agent("K", 1, ttl);
    nxl_agent_t *a = agent_to_k(11);
    /* transfers in flight when the peer dies */
    nxl_desc_t l = {.addr = (uintptr_t)slot_addr(0), .len = 65536};
    nxl_desc_t r = {.addr = (uintptr_t)slot_addr(1), .len = 65536};
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, rl = {NXL_DRAM, &r, 1};
    enum { N = 4 };
    nxl_xfer_t *x[N];
    int calls = 0, fails = 0;
    for (int i = 0; i < N; i++)
        ck_assert(nxl_xfer_create(a, NXL_WRITE, &ll, &rl, "K", NULL, &x[i]) == NXL_SUCCESS);
    kill_reap(k);
    uint64_t t0 = tl_now_ms();
    ncb = 0;
    for (int i = 0; i < N; i++)
        if (nxl_xfer_post(x[i], cb, NULL, NULL) == NXL_SUCCESS)
            calls++;
    ck_assert(tl_run_until(a, &ncb, calls, 10000));
    for (int i = 0; i < N; i++)
        if (nxl_xfer_status(x[i]) != NXL_SUCCESS && nxl_xfer_status(x[i]) != NXL_ERR_NOT_POSTED) {
            ck_assert_int_eq(nxl_xfer_status(x[i]), NXL_ERR_REMOTE_DISCONNECT);
            fails++;
        }
    /* the lease expires: the peer is invalidated everywhere */
    uint64_t gone;
    wait_gone(a, "K", (int)(ttl * 1000 + 4000), &gone, t0);
    for (int i = 0; i < N; i++)
        nxl_xfer_release(x[i]);
    fprintf(stderr, "check_etcd: killed peer: %d of %d writes failed, metadata expired after "
            "%llu ms (TTL %u s)\n", fails, calls, (unsigned long long)gone, ttl);
    nxl_agent_destroy(a);
}
END_TEST

START_TEST(t_peer_restarts_same_name)
{
    child_t c2 = child_fork("K", 2, 10); /* the restarted one, forked before UCX starts here */
    pid_t k1 = child_agent("K", 1, 10); /* long leases: a late keep-alive under load must not expire them */
    nxl_agent_t *a = agent_to_k(21);
    kill_reap(k1);
    /* a new process under the same name, its buffer elsewhere */
    child_go(&c2);
    pid_t k2 = c2.pid;
    /* the watch loads the new metadata: the new region, not the old one */
    uint64_t end = tl_now_ms() + 10000;
    nxl_prepped_t *p = NULL;
    nxl_desc_t d2 = {.addr = (uintptr_t)slot_addr(2), .len = 4096};
    while (tl_now_ms() < end) {
        if (nxl_prep(a, "K", NXL_DRAM, &d2, 1, &p) == NXL_SUCCESS)
            break;
        nxl_agent_run_once(a, 50);
    }
    ck_assert_msg(p != NULL, "the restarted peer's metadata was not loaded");
    nxl_prepped_release(p);
    nxl_desc_t d1 = {.addr = (uintptr_t)slot_addr(1), .len = 4096};
    ck_assert_int_eq(nxl_prep(a, "K", NXL_DRAM, &d1, 1, &p), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(write_read(a, "K", 2, 22), NXL_SUCCESS);
    kill_reap(k2);
    nxl_agent_destroy(a);
}
END_TEST

START_TEST(t_etcd_restarts)
{
    nxl_agent_t *a, *b;
    struct event_base *base = two_agents(10, &a, &b);
    unsigned char *p = malloc(8192);
    reg(a, p, 8192);
    ncb = 0;
    ck_assert(nxl_md_publish(a, cb, NULL, NULL) == NXL_SUCCESS);
    ck_assert(run_base(base, &ncb, 1, 8000));
    ck_assert_int_eq(last, NXL_SUCCESS);
    ck_assert(nxl_md_fetch_etcd(b, "A", NULL, 5000, cb, NULL, NULL) == NXL_SUCCESS);
    ck_assert(run_base(base, &ncb, 2, 8000));
    ck_assert_int_eq(last, NXL_SUCCESS);
    tl_etcd_stop(&E);
    /* etcd away for 2 s: keep-alives fail and are retried; work goes on */
    int dummy = 0;
    run_base(base, &dummy, 1, 2000);
    nxl_desc_t l = {.addr = (uintptr_t)p, .len = 4096}, r = {.addr = (uintptr_t)p + 4096, .len = 4096};
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, rl = {NXL_DRAM, &r, 1};
    nxl_xfer_t *x;
    ck_assert(nxl_xfer_create(b, NXL_WRITE, &rl, &ll, "A", NULL, &x) == NXL_ERR_NOT_FOUND ||
              1); /* B registered nothing: just exercise the call */
    ck_assert(nxl_xfer_create(a, NXL_WRITE, &ll, &rl, "A", NULL, &x) == NXL_SUCCESS);
    tl_fill(p, 4096, 8);
    ck_assert(nxl_xfer_post(x, cb, NULL, NULL) == NXL_SUCCESS);
    ck_assert(run_base(base, &ncb, 3, 5000));
    ck_assert_int_eq(last, NXL_SUCCESS);
    ck_assert(tl_check(p + 4096, 4096, 8) < 0);
    nxl_xfer_release(x);
    ck_assert_int_eq(nxl_md_check(b, "A"), NXL_SUCCESS); /* etcd away is not the peer away */
    ck_assert_msg(tl_etcd_start(&E) == 0, "etcd did not restart");
    /* a newcomer finds A: its keys and lease survived */
    nxl_agent_t *c = agent("C", base, 0, NULL);
    ck_assert(nxl_md_fetch_etcd(c, "A", NULL, 8000, cb, NULL, NULL) == NXL_SUCCESS);
    ck_assert(run_base(base, &ncb, 4, 10000));
    ck_assert_int_eq(last, NXL_SUCCESS);
    /* B's watch came back too: A leaving is seen by B and C */
    ck_assert(nxl_md_unpublish(a, cb, NULL, NULL) == NXL_SUCCESS);
    ck_assert(run_base(base, &ncb, 5, 8000));
    ck_assert_int_eq(last, NXL_SUCCESS);
    uint64_t end = tl_now_ms() + 8000;
    while ((nxl_md_check(b, "A") == NXL_SUCCESS || nxl_md_check(c, "A") == NXL_SUCCESS) &&
           tl_now_ms() < end)
        run_base(base, &dummy, 1, 50);
    ck_assert_int_eq(nxl_md_check(b, "A"), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(nxl_md_check(c, "A"), NXL_ERR_NOT_FOUND);
    nxl_agent_destroy(a);
    nxl_agent_destroy(b);
    nxl_agent_destroy(c);
    event_base_free(base);
    free(p);
}
END_TEST

/* ---- eight processes in a ring: each writes into the next's buffer with
 * a notification, each checks what the previous one wrote */
#define RING 8
static int ring_got = -1, ring_bad = 0;
static unsigned char *ring_buf;

static void ring_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    int prev;
    char m[64];
    snprintf(m, sizeof(m), "%.*s", (int)(len < 63 ? len : 63), (const char *)msg);
    if (sscanf(m, "ring %d", &prev) == 1) {
        ring_got = prev;
        ring_bad = tl_check(ring_buf + BUF_LEN / 2, BUF_LEN / 2, 100u + (unsigned)prev) >= 0;
    }
}

static int ring_member(int i)
{
    char name[16], next[16], msg[32];
    snprintf(name, sizeof(name), "r%d", i);
    snprintf(next, sizeof(next), "r%d", (i + 1) % RING);
    snprintf(msg, sizeof(msg), "ring %d", i);
    nxl_agent_t *a = agent(name, NULL, 5, NULL);
    ring_buf = buf_at(i);
    tl_fill(ring_buf, BUF_LEN / 2, 100u + (unsigned)i);
    reg(a, ring_buf, BUF_LEN);
    nxl_agent_on_notif(a, ring_notif, NULL);
    nxl_future_t *f;
    if (nxl_md_publish(a, NULL, NULL, &f) != NXL_SUCCESS || wait_f(a, f, 10000) != NXL_SUCCESS)
        return 2;
    if (nxl_md_fetch_etcd(a, next, NULL, 20000, NULL, NULL, &f) != NXL_SUCCESS ||
        wait_f(a, f, 25000) != NXL_SUCCESS)
        return 3;
    nxl_desc_t l = {.addr = (uintptr_t)ring_buf, .len = BUF_LEN / 2};
    nxl_desc_t r = {.addr = (uintptr_t)slot_addr((i + 1) % RING) + BUF_LEN / 2, .len = BUF_LEN / 2};
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, rl = {NXL_DRAM, &r, 1};
    nxl_xfer_opts_t o;
    nxl_xfer_opts_init(&o);
    o.notif = msg;
    o.notif_len = strlen(msg);
    nxl_xfer_t *x;
    if (nxl_xfer_create(a, NXL_WRITE, &ll, &rl, next, &o, &x) != NXL_SUCCESS)
        return 4;
    if (nxl_xfer_post(x, NULL, NULL, &f) != NXL_SUCCESS || wait_f(a, f, 20000) != NXL_SUCCESS)
        return 5;
    uint64_t end = tl_now_ms() + 30000;
    while (ring_got < 0 && tl_now_ms() < end)
        nxl_agent_run_once(a, 100);
    int rc = ring_got != (i + RING - 1) % RING ? 6 : ring_bad ? 7 : 0;
    /* stay until the next one has surely read its notification */
    end = tl_now_ms() + 500;
    while (tl_now_ms() < end)
        nxl_agent_run_once(a, 50);
    nxl_xfer_release(x);
    nxl_agent_destroy(a);
    return rc;
}

START_TEST(t_ring_of_eight)
{
    pid_t pids[RING];
    for (int i = 0; i < RING; i++) {
        pids[i] = fork();
        ck_assert(pids[i] >= 0);
        if (pids[i] == 0)
            _exit(ring_member(i));
    }
    int failed = 0;
    for (int i = 0; i < RING; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) {
            fprintf(stderr, "ring member %d: %s %d\n", i, WIFEXITED(st) ? "exit" : "signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            failed++;
        }
    }
    ck_assert_int_eq(failed, 0);
}
END_TEST

/* ---- signed values */

#define SEC1 "the cluster's shared secret, 32 b"
#define SEC2 "another secret, of another cluster"

/* POSTs body to etcd's /v3/<path>; the answer's body into out. 0 or -1 */
static int etcd_post(const char *path, const char *body, char *out, size_t cap)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)E.client_port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&sa, sizeof(sa))) {
        close(s);
        return -1;
    }
    char req[16384];
    int n = snprintf(req, sizeof(req), "POST /v3/%s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     path, strlen(body), body);
    if (n <= 0 || (size_t)n >= sizeof(req) || write(s, req, (size_t)n) != n) {
        close(s);
        return -1;
    }
    size_t got = 0;
    ssize_t r;
    char *resp = malloc(1 << 20);
    while (got < (1u << 20) - 1 && (r = read(s, resp + got, (1u << 20) - 1 - got)) > 0)
        got += (size_t)r;
    close(s);
    resp[got] = 0;
    char *b = strstr(resp, "\r\n\r\n");
    int rc = b && strstr(resp, " 200 ") ? 0 : -1;
    snprintf(out, cap, "%s", b ? b + 4 : "");
    free(resp);
    return rc;
}

static void b64(const char *in, char *out)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(in), o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned char)in[i] << 16 | (i + 1 < n ? (unsigned char)in[i + 1] << 8 : 0) |
                     (i + 2 < n ? (unsigned char)in[i + 2] : 0);
        out[o++] = t[v >> 18];
        out[o++] = t[(v >> 12) & 63];
        out[o++] = i + 1 < n ? t[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? t[v & 63] : '=';
    }
    out[o] = 0;
}

/* the value stored at agent's metadata key (etcd's base64 of it) into v */
static void raw_get(const char *agent, char *v, size_t cap)
{
    char key[128], k64[200], body[400], *resp = malloc(1 << 20);
    snprintf(key, sizeof(key), "/nxl/agents/%s/metadata", agent);
    b64(key, k64);
    snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k64);
    ck_assert(etcd_post("kv/range", body, resp, 1 << 20) == 0);
    char *p = strstr(resp, "\"value\":\"");
    ck_assert_msg(p, "no value at %s: %s", key, resp);
    p += 9;
    size_t n = strcspn(p, "\"");
    ck_assert(n < cap);
    memcpy(v, p, n);
    v[n] = 0;
    free(resp);
}

/* puts v (etcd's base64) at agent's metadata key, without a lease: as
 * anyone who can write to etcd can */
static void raw_put(const char *agent, const char *v)
{
    char key[128], k64[200], *body = malloc(strlen(v) + 400), resp[4096];
    snprintf(key, sizeof(key), "/nxl/agents/%s/metadata", agent);
    b64(key, k64);
    sprintf(body, "{\"key\":\"%s\",\"value\":\"%s\"}", k64, v);
    ck_assert_msg(etcd_post("kv/put", body, resp, sizeof(resp)) == 0, "%s", resp);
    free(body);
}

/* A publishing agent in a process of its own (no transport: its metadata
 * is its name and connection list). Each 'p' written to it publishes its
 * metadata again; it answers with the status. */
typedef struct {
    pid_t pid;
    int cmd, res;
} pub_t;

static pub_t pub_start(const char *name, const char *secret)
{
    pub_t p;
    int rd, wr;
    p.pid = fork_piped(&p.cmd, &p.res, &rd, &wr);
    if (p.pid == 0) {
        nxl_agent_config_t c;
        nxl_agent_config_init(&c);
        c.name = name;
        c.etcd_endpoints = E.endpoint;
        c.auth_secret = secret;
        nxl_agent_t *a;
        if (nxl_agent_create(&c, &a) != NXL_SUCCESS)
            _exit(2);
        char b;
        /* 'q' ends it (EOF would not come: the other children hold the pipe) */
        while (read(rd, &b, 1) == 1 && b != 'q') {
            nxl_future_t *f;
            char st = nxl_md_publish(a, NULL, NULL, &f) == NXL_SUCCESS
                          ? (char)wait_f(a, f, 10000)
                          : (char)NXL_ERR_UNKNOWN;
            if (write(wr, &st, 1) != 1)
                _exit(3);
        }
        nxl_agent_destroy(a);
        _exit(0);
    }
    return p;
}

static void pub_publish(pub_t *p)
{
    char b = 'p';
    ck_assert(write(p->cmd, &b, 1) == 1);
    ck_assert(read(p->res, &b, 1) == 1);
    ck_assert_int_eq(b, NXL_SUCCESS);
}

static void pub_stop(pub_t *p)
{
    char q = 'q';
    ck_assert(write(p->cmd, &q, 1) == 1);
    close(p->cmd);
    close(p->res);
    int st;
    waitpid(p->pid, &st, 0);
}

static char logged[8192];
static void log_keep(nxl_log_level_t level, const char *msg, void *arg)
{
    if (level <= NXL_LOG_WARN && strlen(logged) + strlen(msg) + 2 < sizeof(logged))
        strcat(strcat(logged, msg), "\n");
}

static nxl_agent_t *loader(const char *name, const char *secret)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = name;
    c.etcd_endpoints = E.endpoint;
    c.auth_secret = secret;
    c.log_level = NXL_LOG_WARN;
    c.log_cb = log_keep;
    nxl_agent_t *a;
    ck_assert_msg(nxl_agent_create(&c, &a) == NXL_SUCCESS, "%s", nxl_agent_last_error(NULL));
    return a;
}

/* fetches remote's metadata; its status, the sentence into why */
static nxl_status_t fetch(nxl_agent_t *a, const char *remote, char *why)
{
    nxl_future_t *f;
    why[0] = 0;
    ck_assert(nxl_md_fetch_etcd(a, remote, NULL, 3000, cb, why, &f) == NXL_SUCCESS);
    return wait_f(a, f, 5000);
}

static uint64_t auth_refused(nxl_agent_t *a)
{
    nxl_stats_t st = {.size = sizeof(st)};
    ck_assert(nxl_agent_stats(a, NULL, &st) == NXL_SUCCESS);
    return st.md_auth_refused;
}

/* runs a's reactor for ms */
static void idle(nxl_agent_t *a, int ms)
{
    uint64_t end = tl_now_ms() + (uint64_t)ms;
    while (tl_now_ms() < end)
        nxl_agent_run_once(a, 20);
}

START_TEST(t_signed_values)
{
    /* publishers with the secret, without one, with another one */
    pub_t S = pub_start("S", SEC1), U = pub_start("U", NULL), O = pub_start("O", SEC2);
    pub_publish(&S);
    pub_publish(&U);
    pub_publish(&O);
    nxl_agent_t *L = loader("L", SEC1), *N = loader("N", NULL);
    char why[512], v1[65536], v[65536];

    /* signed with the secret: loaded */
    ck_assert_msg(fetch(L, "S", why) == NXL_SUCCESS, "%s", why);
    ck_assert(nxl_md_check(L, "S") == NXL_SUCCESS);
    /* an agent without a secret trusts etcd: it loads signed values too */
    ck_assert_msg(fetch(N, "S", why) == NXL_SUCCESS, "%s", why);
    /* and unsigned ones (as before) */
    ck_assert_msg(fetch(N, "U", why) == NXL_SUCCESS, "%s", why);

    /* unsigned: refused, with a sentence, nothing loaded */
    uint64_t r0 = auth_refused(L);
    ck_assert_int_eq(fetch(L, "U", why), NXL_ERR_NOT_ALLOWED);
    ck_assert_msg(strstr(why, "not signed") && is_sentence(why), "%s", why);
    ck_assert(nxl_md_check(L, "U") != NXL_SUCCESS);
    /* signed with another secret */
    ck_assert_int_eq(fetch(L, "O", why), NXL_ERR_NOT_ALLOWED);
    ck_assert_msg(strstr(why, "does not verify"), "%s", why);
    ck_assert(nxl_md_check(L, "O") != NXL_SUCCESS);
    ck_assert_uint_eq(auth_refused(L), r0 + 2);
    ck_assert_msg(strstr(logged, "etcd: the value at /nxl/agents/U/metadata was refused"), "%s",
                  logged);

    /* S's value copied under another agent's key: the key is signed too */
    raw_get("S", v1, sizeof(v1));
    raw_put("M", v1);
    ck_assert_int_eq(fetch(L, "M", why), NXL_ERR_NOT_ALLOWED);
    ck_assert_msg(strstr(why, "does not verify"), "%s", why);

    /* tampered: one byte of the metadata changed (well inside the blob,
     * past the 61 signed bytes' 84 base64 characters); the watch on S
     * refuses it, S stays as it was loaded */
    snprintf(v, sizeof(v), "%s", v1);
    size_t at = strlen(v) - 12;
    v[at] = v[at] == 'A' ? 'B' : 'A';
    logged[0] = 0;
    raw_put("S", v);
    idle(L, 500);
    ck_assert_msg(strstr(logged, "/nxl/agents/S/metadata was refused: its HMAC does not verify"),
                  "%s", logged);
    ck_assert(nxl_md_check(L, "S") == NXL_SUCCESS);
    ck_assert_int_eq(fetch(L, "S", why), NXL_ERR_NOT_ALLOWED);

    /* S publishes again (a newer value): loaded; then its old value put
     * back is a replay, refused by the watch and by a fetch */
    pub_publish(&S);
    ck_assert_msg(fetch(L, "S", why) == NXL_SUCCESS, "%s", why);
    logged[0] = 0;
    raw_put("S", v1);
    idle(L, 500);
    ck_assert_msg(strstr(logged, "/nxl/agents/S/metadata was refused") &&
                  strstr(logged, "a replay"), "%s", logged);
    ck_assert(nxl_md_check(L, "S") == NXL_SUCCESS);
    ck_assert_int_eq(fetch(L, "S", why), NXL_ERR_NOT_ALLOWED);
    ck_assert_msg(strstr(why, "a replay") && is_sentence(why), "%s", why);

    /* the watch kept running: S's next value is taken */
    pub_publish(&S);
    ck_assert_msg(fetch(L, "S", why) == NXL_SUCCESS, "%s", why);
    /* and the same value read again is no replay */
    ck_assert_msg(fetch(L, "S", why) == NXL_SUCCESS, "%s", why);

    nxl_agent_destroy(L);
    nxl_agent_destroy(N);
    pub_stop(&S);
    pub_stop(&U);
    pub_stop(&O);
}
END_TEST

int main(void)
{
    if (!tl_etcd_binary()) {
        printf("SKIP: no etcd server binary (apt-get install etcd-server)\n");
        return 77;
    }
    Suite *s = suite_create("etcd");
    TL_TCASE(s, "etcd", 90, setup, teardown, t_publish_fetch, t_fetch_waits_then_times_out,
             t_partial_label, t_unpublish_invalidates, t_etcd_unreachable,
             t_killed_peer_lease_expires, t_peer_restarts_same_name, t_etcd_restarts,
             t_ring_of_eight, t_signed_values);
    return tl_run(s);
}
