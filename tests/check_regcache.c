/* SPDX-License-Identifier: BSD-3-Clause */
/* The registration cache seen from a peer: a target process "T" maps a
 * region, registers it and 10,000 slices of it in random order, then
 * deregisters the region (the slices keep its registration). The
 * initiator "I" writes into slices (scattered, and across slice bounds)
 * and T checks every byte; T deregisters one slice and the siblings keep
 * working at I; T deregisters the rest in random order, maps new memory at
 * the same address (MAP_FIXED) and registers it again: I's transfers then
 * move the new bytes. Over UCX (shared memory, tcp) and LIBFABRIC
 * (tcp;ofi_rxm), one TCase each; and the POSIX transport, within one agent,
 * moving slices to a file and back. A transport this build or machine
 * lacks prints "SKIP: <case>: <reason>" and passes.
 *
 * T answers notifications:
 *   "setup SEED"          maps the region (filled with pattern SEED),
 *                         registers it and its slices, deregisters it;
 *                         replies "addr A"
 *   "chk SEED N START"    checks that slice perm(i, START), i < N, holds
 *                         bytes [i*SL, (i+1)*SL) of pattern SEED
 *   "chkr SEED OFF LEN"   checks bytes [OFF, OFF+LEN) of the region hold the
 *                         first LEN bytes of pattern SEED
 *   "dsl K"               deregisters slice K
 *   "dall"                deregisters every slice left, in random order
 *   "remap SEED"          maps new memory at the same address (MAP_FIXED),
 *                         filled with pattern SEED, and registers it and its
 *                         slices as "setup" does
 *   "quit"                exits */
#include "testlib.h"

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define NSL 10000u           /* slices */
#define SL 1024u             /* bytes a slice */
#define RLEN ((size_t)NSL * SL)
#define NW 200u              /* slices one transfer writes */

/* the slice block i of a transfer goes to: a permutation of the slices */
static unsigned perm(unsigned i, unsigned start)
{
    return (i * 7919u + start) % NSL;
}

static void shuffle(unsigned *v, unsigned n, unsigned seed)
{
    srand(seed);
    for (unsigned i = n - 1; i > 0; i--) {
        unsigned j = (unsigned)rand() % (i + 1), t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

static nxl_desc_t slice(uintptr_t base, unsigned k)
{
    return (nxl_desc_t){.addr = base + (uintptr_t)k * SL, .len = SL};
}

/* the region at p: registered, its slices registered in random order, the
 * region deregistered; 0 on success */
static int reg_region(nxl_agent_t *a, unsigned char *p, unsigned seed, bool *live)
{
    static unsigned order[NSL];
    nxl_desc_t whole = {.addr = (uintptr_t)p, .len = RLEN};
    if (nxl_mem_register(a, NXL_DRAM, &whole, 1, NULL) != NXL_SUCCESS)
        return -1;
    for (unsigned i = 0; i < NSL; i++)
        order[i] = i;
    shuffle(order, NSL, seed);
    for (unsigned i = 0; i < NSL; i++) {
        nxl_desc_t d = slice((uintptr_t)p, order[i]);
        if (nxl_mem_register(a, NXL_DRAM, &d, 1, NULL) != NXL_SUCCESS)
            return -2;
        live[order[i]] = true;
    }
    return nxl_mem_deregister(a, NXL_DRAM, &whole, 1) == NXL_SUCCESS ? 0 : -3;
}

/* every slice still registered, deregistered in random order */
static int dereg_all(nxl_agent_t *a, unsigned char *p, unsigned seed, bool *live)
{
    static unsigned order[NSL];
    for (unsigned i = 0; i < NSL; i++)
        order[i] = i;
    shuffle(order, NSL, seed);
    for (unsigned i = 0; i < NSL; i++) {
        if (!live[order[i]])
            continue;
        nxl_desc_t d = slice((uintptr_t)p, order[i]);
        if (nxl_mem_deregister(a, NXL_DRAM, &d, 1) != NXL_SUCCESS)
            return -1;
        live[order[i]] = false;
    }
    return 0;
}

/* a fresh anonymous mapping at p (MAP_FIXED when p is set), filled */
static unsigned char *map_region(unsigned char *p, unsigned seed)
{
    void *m = mmap(p, RLEN, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (p ? MAP_FIXED : 0), -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    tl_fill(m, RLEN, seed);
    return m;
}

/* ------------------------------------------------------------ the target */

typedef struct conf {
    const char *label;
    const char *transport;
    nxl_param_t params[2];
    size_t nparams;
} conf_t;

static const conf_t confs[] = {
    {"ucx_shm", "UCX", {{0}}, 0},
    {"ucx_tcp", "UCX", {{"tls", "tcp"}}, 1},
    {"lf_tcp", "LIBFABRIC", {{"provider", "tcp;ofi_rxm"}, {"stall_timeout", "3s"}}, 2},
};
static const conf_t *C;
static char C_missing[512];

static nxl_status_t make_backend(nxl_agent_t *a)
{
    return nxl_backend_create(a, C->transport, C->params, C->nparams, NULL);
}

static struct {
    nxl_agent_t *a;
    unsigned char *r;  /* the region */
    bool live[NSL];    /* slices registered */
    unsigned char *want;
    int quit;
} T;

static void t_reply(const char *msg)
{
    if (nxl_notif_send(T.a, "I", msg, strlen(msg), NULL, NULL, NULL) != NXL_SUCCESS)
        fprintf(stderr, "target: reply failed: %s\n", nxl_agent_last_error(T.a));
}

static void t_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    (void)a, (void)from, (void)arg;
    char m[128], out[128];
    snprintf(m, sizeof(m), "%.*s", (int)(len < sizeof(m) - 1 ? len : sizeof(m) - 1),
             (const char *)msg);
    unsigned seed, n, start, k;
    size_t off, l;
    if (sscanf(m, "setup %u", &seed) == 1) {
        int rc = (T.r = map_region(NULL, seed)) ? reg_region(T.a, T.r, seed, T.live) : -9;
        if (rc)
            snprintf(out, sizeof(out), "bad setup %d: %s", rc, nxl_agent_last_error(T.a));
        else
            snprintf(out, sizeof(out), "addr %lx", (unsigned long)(uintptr_t)T.r);
        t_reply(out);
    } else if (sscanf(m, "chk %u %u %u", &seed, &n, &start) == 3) {
        tl_fill(T.want, (size_t)n * SL, seed);
        unsigned bad = 0;
        for (unsigned i = 0; i < n; i++)
            bad += memcmp(T.r + (size_t)perm(i, start) * SL, T.want + (size_t)i * SL, SL) != 0;
        snprintf(out, sizeof(out), bad ? "bad %u slices" : "ok", bad);
        t_reply(out);
    } else if (sscanf(m, "chkr %u %zu %zu", &seed, &off, &l) == 3) {
        tl_fill(T.want, l, seed);
        t_reply(off + l <= RLEN && !memcmp(T.r + off, T.want, l) ? "ok" : "bad");
    } else if (sscanf(m, "dsl %u", &k) == 1) {
        nxl_desc_t d = slice((uintptr_t)T.r, k);
        bool ok = k < NSL && nxl_mem_deregister(T.a, NXL_DRAM, &d, 1) == NXL_SUCCESS;
        if (ok)
            T.live[k] = false;
        t_reply(ok ? "ok" : "bad");
    } else if (!strcmp(m, "dall")) {
        t_reply(dereg_all(T.a, T.r, 5, T.live) ? "bad" : "ok");
    } else if (sscanf(m, "remap %u", &seed) == 1) {
        unsigned char *p = map_region(T.r, seed);
        int rc = p != T.r ? -9 : reg_region(T.a, T.r, seed + 1, T.live);
        t_reply(rc ? "bad" : "ok");
    } else if (!strcmp(m, "quit")) {
        T.quit = 1;
    }
}

static void target_main(int wfd)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "T";
    c.listen_addr = "127.0.0.1";
    if (nxl_agent_create(&c, &T.a) != NXL_SUCCESS)
        _exit(10);
    if (make_backend(T.a) != NXL_SUCCESS) {
        fprintf(stderr, "target: %s\n", nxl_agent_last_error(T.a));
        _exit(11);
    }
    T.want = malloc(RLEN);
    nxl_agent_on_notif(T.a, t_notif, NULL);
    uint16_t port = nxl_agent_listen_port(T.a);
    if (write(wfd, &port, sizeof(port)) != sizeof(port))
        _exit(13);
    close(wfd);
    uint64_t end = tl_now_ms() + 120000;
    while (!T.quit && tl_now_ms() < end && getppid() != 1)
        nxl_agent_run_once(T.a, 200);
    nxl_agent_destroy(T.a);
    _exit(T.quit ? 0 : 14);
}

/* --------------------------------------------------------- the initiator */

static struct {
    nxl_agent_t *a;
    pid_t pid;
    uint16_t port;
    unsigned char *buf; /* local, registered, RLEN bytes */
    uintptr_t raddr;
    int nreply;
    char reply[1024];
} I;

static void i_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    (void)a, (void)from, (void)arg;
    int cap = (int)sizeof(I.reply) - 1;
    snprintf(I.reply, sizeof(I.reply), "%.*s", (int)len < cap ? (int)len : cap, (const char *)msg);
    I.nreply++;
}

static void fetch_md(void)
{
    nxl_future_t *f;
    ck_assert(nxl_md_fetch(I.a, "T", "127.0.0.1", I.port, NULL, NULL, &f) == NXL_SUCCESS);
    ck_assert_msg(nxl_future_wait(f, 10000) == NXL_SUCCESS, "fetch: %s", nxl_future_error(f));
    nxl_future_release(f);
}

static void setup_conf(const conf_t *c)
{
    C = c;
    C_missing[0] = 0;
    I.pid = 0;
    nxl_agent_config_t cfg;
    nxl_agent_config_init(&cfg);
    cfg.name = "probe";
    nxl_agent_t *pa;
    ck_assert(nxl_agent_create(&cfg, &pa) == NXL_SUCCESS);
    if (make_backend(pa) != NXL_SUCCESS)
        snprintf(C_missing, sizeof(C_missing), "%s cannot be created here: %s", C->transport,
                 nxl_agent_last_error(pa));
    nxl_agent_destroy(pa);
    if (C_missing[0])
        return;
    I.pid = tl_fork_target(target_main, &I.port);
    cfg.name = "I";
    ck_assert(nxl_agent_create(&cfg, &I.a) == NXL_SUCCESS);
    ck_assert_msg(make_backend(I.a) == NXL_SUCCESS, "%s", nxl_agent_last_error(I.a));
    I.buf = malloc(RLEN);
    nxl_desc_t d = {.addr = (uintptr_t)I.buf, .len = RLEN};
    ck_assert(nxl_mem_register(I.a, NXL_DRAM, &d, 1, NULL) == NXL_SUCCESS);
    nxl_agent_on_notif(I.a, i_notif, NULL);
    fetch_md();
    nxl_future_t *f;
    ck_assert(nxl_md_send(I.a, "127.0.0.1", I.port, NULL, NULL, &f) == NXL_SUCCESS);
    ck_assert_msg(nxl_future_wait(f, 10000) == NXL_SUCCESS, "send: %s", nxl_future_error(f));
    nxl_future_release(f);
    I.nreply = 0;
}

static void setup_0(void) { setup_conf(&confs[0]); }
static void setup_1(void) { setup_conf(&confs[1]); }
static void setup_2(void) { setup_conf(&confs[2]); }

static void teardown(void)
{
    tl_stop_peer(&I.a, &I.pid, "T");
    free(I.buf);
    I.buf = NULL;
}

static const char *ask(const char *msg, int timeout_ms)
{
    int before = I.nreply;
    ck_assert_msg(nxl_notif_send(I.a, "T", msg, strlen(msg), NULL, NULL, NULL) == NXL_SUCCESS,
                  "%s", nxl_agent_last_error(I.a));
    ck_assert_msg(tl_run_until(I.a, &I.nreply, before + 1, timeout_ms), "no reply to '%s'", msg);
    return I.reply;
}

#define ASK_OK(...)                                                                                \
    do {                                                                                           \
        char q_[128];                                                                              \
        snprintf(q_, sizeof(q_), __VA_ARGS__);                                                     \
        const char *r_ = ask(q_, 20000);                                                           \
        ck_assert_msg(!strcmp(r_, "ok"), "'%s': %s", q_, r_);                                      \
    } while (0)

/* n descriptors: local block i at i*SL, remote slice perm(i, start) (or,
 * with start < 0, one descriptor of len bytes at remote offset off);
 * posted, waited for: its status */
static nxl_status_t xfer(nxl_op_t op, unsigned n, int start, size_t off, size_t len)
{
    nxl_desc_t *ld = calloc(n, sizeof(*ld)), *rd = calloc(n, sizeof(*rd));
    for (unsigned i = 0; i < n; i++) {
        size_t ro = start < 0 ? off : (size_t)perm(i, (unsigned)start) * SL;
        size_t l = start < 0 ? len : SL;
        ld[i] = (nxl_desc_t){.addr = (uintptr_t)I.buf + (size_t)i * SL, .len = l};
        rd[i] = (nxl_desc_t){.addr = I.raddr + ro, .len = l};
    }
    nxl_dlist_t l = {NXL_DRAM, ld, n}, r = {NXL_DRAM, rd, n};
    nxl_xfer_t *x = NULL;
    nxl_status_t st = nxl_xfer_create(I.a, op, &l, &r, "T", NULL, &x);
    free(ld);
    free(rd);
    if (st != NXL_SUCCESS)
        return st;
    tl_res_t res = {0};
    tl_post(I.a, x, &res);
    tl_wait_res(I.a, &res, 20000);
    nxl_xfer_release(x);
    return res.st;
}

static void run_peer(void)
{
    if (C_missing[0]) {
        printf("SKIP: %s: %s\n", C->label, C_missing);
        fflush(stdout);
        return;
    }
    const char *r = ask("setup 11", 60000);
    unsigned long a;
    ck_assert_msg(sscanf(r, "addr %lx", &a) == 1, "setup: %s", r);
    I.raddr = a;
    fetch_md(); /* the region, registered after the first fetch */
    /* scattered slices, and a write across two slices' bounds */
    tl_fill(I.buf, (size_t)NW * SL, 21);
    nxl_status_t st = xfer(NXL_WRITE, NW, 3, 0, 0);
    ck_assert_msg(st == NXL_SUCCESS, "%s: %s", nxl_strerror(st), nxl_agent_last_error(I.a));
    ASK_OK("chk 21 %u 3", NW);
    /* and read back */
    memset(I.buf, 0, (size_t)NW * SL);
    ck_assert_int_eq(xfer(NXL_READ, NW, 3, 0, 0), NXL_SUCCESS);
    ck_assert(tl_check(I.buf, (size_t)NW * SL, 21) < 0);
    tl_fill(I.buf, 3 * SL, 22);
    ck_assert_int_eq(xfer(NXL_WRITE, 1, -1, 77 * SL + 100, 3 * SL), NXL_SUCCESS);
    ASK_OK("chkr 22 %zu %zu", (size_t)77 * SL + 100, (size_t)3 * SL);
    /* one slice deregistered: its siblings keep working at I */
    ASK_OK("dsl %u", perm(0, 3));
    tl_fill(I.buf, (size_t)NW * SL, 23);
    for (int round = 0; round < 3; round++) {
        st = xfer(NXL_WRITE, NW, 3, 0, 0);
        ck_assert_msg(st == NXL_SUCCESS, "%s: %s", nxl_strerror(st), nxl_agent_last_error(I.a));
    }
    ASK_OK("chk 23 %u 3", NW);
    /* every slice goes; new memory at the same address, registered again */
    ASK_OK("dall");
    ASK_OK("remap 31");
    fetch_md();
    memset(I.buf, 0, (size_t)NW * SL);
    ck_assert_int_eq(xfer(NXL_READ, 1, -1, 0, (size_t)NW * SL), NXL_SUCCESS);
    ck_assert_msg(tl_check(I.buf, (size_t)NW * SL, 31) < 0, "the READ moved old bytes");
    tl_fill(I.buf, (size_t)NW * SL, 32);
    ck_assert_int_eq(xfer(NXL_WRITE, NW, 5, 0, 0), NXL_SUCCESS);
    ASK_OK("chk 32 %u 5", NW);
}

START_TEST(t_peer_slices)
{
    run_peer();
}
END_TEST

/* ------------------------------------------------------------------ POSIX */

/* DRAM slices to a file and back through the POSIX transport: slices of a
 * region work after the region is deregistered, after a sibling is, and
 * after the memory is mapped anew at the same address */
START_TEST(t_posix_slices)
{
    nxl_agent_t *a = tl_agent_bare("P", 0);
    if (nxl_backend_create(a, "POSIX", NULL, 0, NULL) != NXL_SUCCESS) {
        printf("SKIP: posix: %s\n", nxl_agent_last_error(a));
        nxl_agent_destroy(a);
        return;
    }
    char path[] = "/tmp/nxl_regcacheXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    ck_assert_int_eq(ftruncate(fd, (off_t)RLEN), 0);
    nxl_desc_t fdsc = {.addr = 0, .len = RLEN, .dev_id = (uint64_t)fd};
    ck_assert_int_eq(nxl_mem_register(a, NXL_FILE, &fdsc, 1, NULL), NXL_SUCCESS);
    static bool live[NSL];
    unsigned char *r = map_region(NULL, 41), *got = malloc(RLEN);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(reg_region(a, r, 7, live), 0);
    for (int pass = 0; pass < 2; pass++) {
        unsigned seed = pass ? 51 : 41;
        /* slices in a scattered order to the file, file block i <- slice perm(i) */
        nxl_desc_t *ld = calloc(NW, sizeof(*ld)), *rd = calloc(NW, sizeof(*rd));
        for (unsigned i = 0; i < NW; i++) {
            ld[i] = slice((uintptr_t)r, perm(i + 1, 9));
            rd[i] = (nxl_desc_t){.addr = (uint64_t)i * SL, .len = SL, .dev_id = (uint64_t)fd};
        }
        if (!pass) {
            /* one slice goes (not one of those moved): the others keep working */
            nxl_desc_t d = slice((uintptr_t)r, perm(0, 9));
            ck_assert_int_eq(nxl_mem_deregister(a, NXL_DRAM, &d, 1), NXL_SUCCESS);
            live[perm(0, 9)] = false;
        }
        nxl_dlist_t l = {NXL_DRAM, ld, NW}, f = {NXL_FILE, rd, NW};
        nxl_xfer_t *x;
        ck_assert_msg(nxl_xfer_create(a, NXL_WRITE, &l, &f, "P", NULL, &x) == NXL_SUCCESS, "%s",
                      nxl_agent_last_error(a));
        tl_res_t res = {0};
        tl_post(a, x, &res);
        tl_wait_res(a, &res, 20000);
        ck_assert_int_eq(res.st, NXL_SUCCESS);
        nxl_xfer_release(x);
        ck_assert(pread(fd, got, (size_t)NW * SL, 0) == (ssize_t)NW * SL);
        tl_fill(T.want = malloc(RLEN), RLEN, seed);
        for (unsigned i = 0; i < NW; i++)
            ck_assert_msg(!memcmp(got + (size_t)i * SL, T.want + (size_t)perm(i + 1, 9) * SL, SL),
                          "pass %d: slice %u moved wrong bytes", pass, i);
        free(T.want);
        T.want = NULL;
        free(ld);
        free(rd);
        if (!pass) {
            /* everything goes; new memory at the same address */
            ck_assert_int_eq(dereg_all(a, r, 8, live), 0);
            ck_assert_ptr_eq(map_region(r, 51), r);
            ck_assert_int_eq(reg_region(a, r, 9, live), 0);
        }
    }
    ck_assert_int_eq(dereg_all(a, r, 10, live), 0);
    ck_assert_int_eq(nxl_mem_deregister(a, NXL_FILE, &fdsc, 1), NXL_SUCCESS);
    munmap(r, RLEN);
    free(got);
    close(fd);
    nxl_agent_destroy(a);
}
END_TEST

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("regcache");
    void (*setups[])(void) = {setup_0, setup_1, setup_2};
    for (size_t i = 0; i < sizeof(confs) / sizeof(confs[0]); i++) {
        TCase *tc = tcase_create(confs[i].label);
        tcase_set_timeout(tc, 120);
        tcase_add_checked_fixture(tc, setups[i], teardown);
        tcase_add_test(tc, t_peer_slices);
        suite_add_tcase(s, tc);
    }
    TL_TCASE(s, "posix", 60, NULL, NULL, t_posix_slices);
    return tl_run(s);
}
