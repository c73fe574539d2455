/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared helpers of the Check suites: agents, loop driving, data patterns. */
#ifndef NXL_TESTLIB_H
#define NXL_TESTLIB_H

#include <check.h>
#include <nxl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <glob.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0 /* built without valgrind's header */
#endif

#define KiB 1024u
#define MiB (1024u * 1024u)

/* ---- the application's loop: NXL_TEST_LOOP in the environment
 *
 * unset: agents run their own loops (nxl_agent_run_once as it is);
 * "fd": agents are made on NXL_LOOP_FD (NXL_LOOP=fd is set for them) and
 * every nxl_agent_run_once(a, ms) of a test waits in a poll() of the
 * test's own on nxl_agent_backend_fd() for min(ms, backend timeout), then
 * calls nxl_agent_run_once(a, 0);
 * "uv": the same agents, each attached with nxl_uv_attach() to a uv_loop_t
 * of its own that nxl_agent_run_once(a, ms) runs once (UV_RUN_ONCE, a
 * timer bounding it to ms; UV_RUN_NOWAIT for 0). Built without libuv, a
 * suite skips (77) in this mode. Agents that are not on NXL_LOOP_FD (an
 * application's base, threaded mode) run their own loops in every mode. */
#include <errno.h>
#include <poll.h>
#ifdef NXL_TEST_HAVE_UV
#include <nxl/uv.h>
#endif

enum { TL_LOOP_OWN, TL_LOOP_FD, TL_LOOP_UV };

static inline int tl_loop_mode(void)
{
    static int mode = -1;
    if (mode < 0) {
        const char *v = getenv("NXL_TEST_LOOP");
        mode = !v || !*v ? TL_LOOP_OWN : !strcmp(v, "fd") ? TL_LOOP_FD : TL_LOOP_UV;
    }
    return mode;
}

/* before main: the mode checked, and NXL_LOOP=fd for the agents made */
__attribute__((constructor)) static void tl_loop_init(void)
{
    const char *v = getenv("NXL_TEST_LOOP");
    if (!v || !*v)
        return;
    if (strcmp(v, "fd") != 0 && strcmp(v, "uv") != 0) {
        fprintf(stderr, "NXL_TEST_LOOP=%s: it is fd or uv (or unset)\n", v);
        exit(99);
    }
#ifndef NXL_TEST_HAVE_UV
    if (!strcmp(v, "uv")) {
        fprintf(stderr, "NXL_TEST_LOOP=uv: this suite was built without libuv "
                        "(configure found no libuv; apt-get install libuv1-dev)\n");
        exit(77);
    }
#endif
    setenv("NXL_LOOP", "fd", 1);
}

/* fd: poll() on the backend descriptor, then one turn that does not wait */
static inline nxl_status_t tl_fd_run_once(nxl_agent_t *a, int fd, int ms)
{
    int t = nxl_agent_backend_timeout(a);
    if (ms >= 0 && (t < 0 || ms < t))
        t = ms;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, t) < 0 && errno == EINTR)
        ;
    return (nxl_agent_run_once)(a, 0);
}

#ifdef NXL_TEST_HAVE_UV
/* uv: one loop per agent (and per process: a child that forked leaves its
 * parent's loops alone) */
typedef struct {
    nxl_agent_t *a;
    pid_t pid;
    int running; /* inside its uv_run(): a callback calling run_once */
    uv_loop_t loop;
    uv_timer_t bound;
} tl_uv_t;
static tl_uv_t *tl_uvs[64];

static inline void tl_uv_bound_cb(uv_timer_t *t) { (void)t; }

/* the loop agent a is attached to, NULL when a cannot be attached (the
 * test attached it itself, or too many agents) */
static inline tl_uv_t *tl_uv_of(nxl_agent_t *a)
{
    size_t i, free_i = sizeof(tl_uvs) / sizeof(tl_uvs[0]);
    for (i = 0; i < sizeof(tl_uvs) / sizeof(tl_uvs[0]); i++) {
        if (tl_uvs[i] && tl_uvs[i]->a == a && tl_uvs[i]->pid == getpid())
            return tl_uvs[i];
        if (!tl_uvs[i] && free_i == sizeof(tl_uvs) / sizeof(tl_uvs[0]))
            free_i = i;
    }
    if (free_i == sizeof(tl_uvs) / sizeof(tl_uvs[0]))
        return NULL;
    tl_uv_t *e = calloc(1, sizeof(*e));
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(uv_loop_init(&e->loop), 0);
    uv_timer_init(&e->loop, &e->bound);
    if (nxl_uv_attach(a, &e->loop) != NXL_SUCCESS) {
        uv_close((uv_handle_t *)&e->bound, NULL);
        uv_run(&e->loop, UV_RUN_DEFAULT);
        uv_loop_close(&e->loop);
        free(e);
        return NULL;
    }
    e->a = a;
    e->pid = getpid();
    tl_uvs[free_i] = e;
    return e;
}

static inline nxl_status_t tl_uv_run_once(nxl_agent_t *a, int ms)
{
    tl_uv_t *e = tl_uv_of(a);
    if (!e || e->running)
        return (nxl_agent_run_once)(a, ms); /* from a callback: refused, as it should be */
    nxl_uv_t *s = nxl_uv_get(a, &e->loop);
    s->last = NXL_SUCCESS;
    e->running = 1;
    if (ms == 0) {
        uv_run(&e->loop, UV_RUN_NOWAIT);
    } else {
        /* from now: the loop's clock stopped when it last ran, and a bound
         * already past would leave UV_RUN_ONCE waiting without one */
        uv_update_time(&e->loop);
        /* repeating: a bound that falls due before the poll (the process
         * descheduled between here and uv_run's timers) is armed again,
         * or UV_RUN_ONCE would poll without one, for ever on an idle agent */
        if (ms > 0)
            uv_timer_start(&e->bound, tl_uv_bound_cb, (uint64_t)ms, (uint64_t)ms);
        uv_run(&e->loop, UV_RUN_ONCE);
        uv_timer_stop(&e->bound);
    }
    e->running = 0;
    return s->last;
}
#endif

/* nxl_agent_run_once() as the test's NXL_TEST_LOOP drives it */
static inline nxl_status_t tl_run_once(nxl_agent_t *a, int ms)
{
    int mode = tl_loop_mode(), fd;
    /* not an NXL_LOOP_FD agent (a base of the test's, threaded): its own loop */
    if (mode == TL_LOOP_OWN || !a || nxl_agent_base(a) || (fd = nxl_agent_backend_fd(a)) < 0)
        return (nxl_agent_run_once)(a, ms);
#ifdef NXL_TEST_HAVE_UV
    if (mode == TL_LOOP_UV)
        return tl_uv_run_once(a, ms);
#endif
    return tl_fd_run_once(a, fd, ms);
}

/* nxl_agent_destroy() after its loop (uv) is closed */
static inline void tl_agent_destroy(nxl_agent_t *a)
{
#ifdef NXL_TEST_HAVE_UV
    for (size_t i = 0; a && i < sizeof(tl_uvs) / sizeof(tl_uvs[0]); i++) {
        tl_uv_t *e = tl_uvs[i];
        if (!e || e->a != a)
            continue;
        tl_uvs[i] = NULL;
        if (e->pid != getpid())
            continue; /* the parent's: left to it */
        nxl_uv_detach(a, &e->loop);
        uv_close((uv_handle_t *)&e->bound, NULL);
        uv_run(&e->loop, UV_RUN_DEFAULT);
        ck_assert_int_eq(uv_loop_close(&e->loop), 0);
        free(e);
    }
#endif
    (nxl_agent_destroy)(a);
}

#define nxl_agent_run_once(a, ms) tl_run_once(a, ms)
#define nxl_agent_destroy(a) tl_agent_destroy(a)

/* c: the defaults, named name, with an I/O timeout of io_timeout_ms (0:
 * the default) */
static inline void tl_config(nxl_agent_config_t *c, const char *name, unsigned io_timeout_ms)
{
    nxl_agent_config_init(c);
    c->name = name;
    if (io_timeout_ms)
        c->io_timeout_ms = io_timeout_ms;
}

/* The agent c describes; with listen, c gets a metadata listener on an
 * ephemeral loopback port first. */
static inline nxl_agent_t *tl_agent_cfg(nxl_agent_config_t *c, int listen)
{
    if (listen)
        c->listen_addr = "127.0.0.1";
    nxl_agent_t *a = NULL;
    nxl_status_t st = nxl_agent_create(c, &a);
    ck_assert_msg(st == NXL_SUCCESS, "agent %s: %s", c->name, nxl_agent_last_error(NULL));
    return a;
}

/* An agent without a transport; with listen, a metadata listener on an
 * ephemeral loopback port (nxl_agent_listen_port). */
static inline nxl_agent_t *tl_agent_bare(const char *name, int listen)
{
    nxl_agent_config_t c;
    tl_config(&c, name, 0);
    return tl_agent_cfg(&c, listen);
}

/* An agent without a transport that logs to log from level lvl on. */
static inline nxl_agent_t *tl_agent_log(const char *name, nxl_log_level_t lvl, nxl_log_cb log)
{
    nxl_agent_config_t c;
    tl_config(&c, name, 0);
    c.log_level = lvl;
    c.log_cb = log;
    return tl_agent_cfg(&c, 0);
}

/* Adds the transport name to a, without parameters. */
static inline void tl_backend(nxl_agent_t *a, const char *name)
{
    nxl_status_t st = nxl_backend_create(a, name, NULL, 0, NULL);
    ck_assert_msg(st == NXL_SUCCESS, "%s backend: %s", name, nxl_agent_last_error(a));
}

/* The outcomes tl_count_cb saw: how many, and the last one's status and
 * error text. */
static int tl_ndone;
static nxl_status_t tl_last;
static char tl_last_err[1500];

/* A completion callback that counts into tl_ndone and keeps the outcome in
 * tl_last and tl_last_err. */
static inline void tl_count_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    (void)arg;
    tl_ndone++;
    tl_last = st;
    snprintf(tl_last_err, sizeof(tl_last_err), "%s", nxl_future_error(f));
}

/* A completion callback that counts into the int at arg and keeps the
 * status in tl_last. */
static inline void tl_count_int_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    (void)f;
    ++*(int *)arg;
    tl_last = st;
}

/* a fetches b's metadata from b's loopback listener; tl_count_cb counts
 * the outcome. */
static inline void tl_md_fetch(nxl_agent_t *a, nxl_agent_t *b)
{
    ck_assert_int_eq(nxl_md_fetch(a, nxl_agent_name(b), "127.0.0.1", nxl_agent_listen_port(b),
                                  tl_count_cb, NULL, NULL),
                     NXL_SUCCESS);
}

/* a sends its metadata to b's loopback listener; tl_count_cb counts the
 * outcome. */
static inline void tl_md_send(nxl_agent_t *a, nxl_agent_t *b)
{
    ck_assert_int_eq(
        nxl_md_send(a, "127.0.0.1", nxl_agent_listen_port(b), tl_count_cb, NULL, NULL),
        NXL_SUCCESS);
}

/* A TCP socket bound to an ephemeral loopback port, listening with backlog
 * when backlog > 0 (else bound only: connections to it are refused); its
 * port into *port. */
static inline int tl_loopback_socket(int backlog, uint16_t *port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sin);
    ck_assert(s >= 0 && bind(s, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    ck_assert(backlog <= 0 || listen(s, backlog) == 0);
    ck_assert(getsockname(s, (struct sockaddr *)&sin, &sl) == 0);
    *port = ntohs(sin.sin_port);
    return s;
}

/* nxl_backend_create(a, name, p, n) that is to fail: checks that it
 * stored NULL over a non-NULL handle; returns its status. */
static inline nxl_status_t tl_backend_refused(nxl_agent_t *a, const char *name,
                                              const nxl_param_t *p, size_t n)
{
    nxl_backend_t *b = (nxl_backend_t *)&b;
    nxl_status_t st = nxl_backend_create(a, name, p, n, &b);
    ck_assert_ptr_null(b);
    return st;
}

/* Runs fn in a forked child (what it changes in the process stays there);
 * fails the test with the sentence the child wrote into msg[cap] unless it
 * returned 0 (or when that sentence could not be written back). */
static inline void tl_in_child(int (*fn)(const void *arg, char *msg, size_t cap), const void *arg)
{
    int pp[2];
    ck_assert_int_eq(pipe(pp), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(pp[0]);
        char msg[1024] = "";
        int rc = fn(arg, msg, sizeof(msg));
        if (write(pp[1], msg, strlen(msg)) < 0)
            rc = 2;
        _exit(rc);
    }
    close(pp[1]);
    char msg[1024] = "";
    ssize_t k = read(pp[0], msg, sizeof(msg) - 1);
    msg[k > 0 ? k : 0] = 0;
    close(pp[0]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: %s (status %d)", msg,
                  status);
}

/* nxl_prep(a, remote, DRAM) of the one descriptor d: the status. A success
 * gives a list of one (released here), a failure no list. */
static inline nxl_status_t tl_prep1(nxl_agent_t *a, const char *remote, nxl_desc_t d)
{
    nxl_prepped_t *p = (nxl_prepped_t *)&p;
    nxl_status_t st = nxl_prep(a, remote, NXL_DRAM, &d, 1, &p);
    if (st == NXL_SUCCESS) {
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq(nxl_prepped_count(p), 1);
        nxl_prepped_release(p);
    } else {
        ck_assert_msg(p == NULL, "a failed nxl_prep left a list");
    }
    return st;
}

/* nxl_xfer_make of the n descriptors of lp and rp in order, with options
 * o (NULL: none), which must pick the transport backend; releases lp and
 * rp. */
static inline nxl_xfer_t *tl_make_all(nxl_agent_t *a, nxl_op_t op, nxl_prepped_t *lp,
                                      nxl_prepped_t *rp, size_t n, const nxl_xfer_opts_t *o,
                                      const char *backend)
{
    nxl_xfer_t *x = NULL;
    nxl_status_t st = nxl_xfer_make(a, op, lp, NULL, rp, NULL, n, o, &x);
    ck_assert_msg(st == NXL_SUCCESS, "xfer_make: %s", nxl_agent_last_error(a));
    ck_assert_str_eq(nxl_backend_name(nxl_xfer_backend(x)), backend);
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
    return x;
}

/* An agent with a UCX transport (see tl_agent_bare). */
static inline nxl_agent_t *tl_agent(const char *name, int listen)
{
    nxl_agent_t *a = tl_agent_bare(name, listen);
    tl_backend(a, "UCX");
    return a;
}

/* The transport name as nxl_plugins_available() lists it into info[cap],
 * or NULL when it is not listed. */
static inline const nxl_plugin_info_t *tl_plugin(const char *name, nxl_plugin_info_t *info,
                                                 size_t cap)
{
    size_t n = nxl_plugins_available(info, cap);
    for (size_t i = 0; i < n && i < cap; i++)
        if (!strcmp(info[i].name, name))
            return &info[i];
    return NULL;
}

/* a loads b's metadata (b's own, as nxl_md_local gives it) */
static inline void tl_learn(nxl_agent_t *a, nxl_agent_t *b)
{
    void *blob;
    size_t len;
    ck_assert_int_eq(nxl_md_local(b, &blob, &len), NXL_SUCCESS);
    ck_assert_msg(nxl_md_load(a, blob, len, NULL, 0) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    nxl_free(blob);
}

/* A target process: forks, the child runs target(wfd) (it does not return)
 * and writes its listener's port (a uint16_t) to wfd once it listens; the
 * parent reads that port into *port. The child's pid. */
static inline pid_t tl_fork_target(void (*target)(int wfd), uint16_t *port)
{
    int p[2];
    ck_assert(pipe(p) == 0);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        target(p[1]);
        _exit(0);
    }
    close(p[1]);
    ck_assert_msg(read(p[0], port, sizeof(*port)) == sizeof(*port), "target did not start");
    close(p[0]);
    return pid;
}

static inline uint64_t tl_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* kB of AnonHugePages that process pid (0: this one) has in the mappings
 * overlapping [addr, addr + len) (inside: only in those that lie within
 * it, where a neighbour merged into the mapping must not count) */
static inline long tl_huge_kb(pid_t pid, uintptr_t addr, size_t len, int inside)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), pid ? "/proc/%d/smaps" : "/proc/self/smaps", (int)pid);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f, "%s: %s", path, strerror(errno));
    long kb = 0;
    int in = 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi, v;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = inside ? lo >= addr && hi <= addr + len : lo < addr + len && hi > addr;
        else if (in && sscanf(line, "AnonHugePages: %lu kB", &v) == 1)
            kb += (long)v;
    }
    fclose(f);
    return kb;
}

/* The body of each transport's t_thp_dereg: a written, 2 MiB-aligned
 * 32 MiB region is registered with agent a (whose transport collapses in
 * the background), deregistered after round x step_us, and unmapped;
 * memory mapped again at its addresses and written must stay on plain
 * pages from the moment nxl_mem_deregister returned. A round whose
 * addresses were taken meanwhile has nothing to look at. */
static inline void tl_thp_dereg_rounds(nxl_agent_t *a, int rounds, unsigned step_us)
{
    size_t len = 32u << 20, two = 2u << 20;
    for (int round = 0; round < rounds; round++) {
        char *m = mmap(NULL, len + two, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        ck_assert(m != MAP_FAILED);
        char *p = (char *)(((uintptr_t)m + two - 1) & ~(uintptr_t)(two - 1));
        memset(p, 1, len);
        nxl_desc_t d = {.addr = (uintptr_t)p, .len = len};
        ck_assert_msg(nxl_mem_register(a, NXL_DRAM, &d, 1, NULL) == NXL_SUCCESS, "%s",
                      nxl_agent_last_error(a));
        usleep((useconds_t)round * step_us); /* (the thread on its first ranges, or later) */
        ck_assert_int_eq(nxl_mem_deregister(a, NXL_DRAM, &d, 1), NXL_SUCCESS);
        munmap(m, len + two);
        char *q = mmap(p, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (q != p) {
            if (q != MAP_FAILED)
                munmap(q, len);
            continue;
        }
        memset(q, 2, len);
        uint64_t end = tl_now_ms() + 100;
        while (tl_now_ms() < end)
            nxl_agent_run_once(a, 10);
        long kb = tl_huge_kb(0, (uintptr_t)q, len, 0);
        munmap(q, len);
        ck_assert_msg(kb == 0, "round %d: %ld kB of memory mapped after the deregistration "
                      "collapsed onto 2 MiB pages", round, kb);
    }
}

/* Runs a (not waiting) and b (waiting 1 ms; none when NULL) in turn until
 * tl_ndone >= n or ms passed. Returns 1 when reached. */
static inline int tl_count_until(nxl_agent_t *a, nxl_agent_t *b, int n, int ms)
{
    uint64_t end = tl_now_ms() + (uint64_t)ms;
    while (tl_ndone < n && tl_now_ms() < end) {
        nxl_agent_run_once(a, 0);
        if (b)
            nxl_agent_run_once(b, 1);
    }
    return tl_ndone >= n;
}

/* Waits (10 s at most, turning a and b as tl_count_until does) for the
 * outcome of one request counted by tl_count_cb, asserts that exactly one
 * came and resets the count; then turns b drain more times (a listener
 * seeing the end of the connection). Returns the request's status. */
static inline nxl_status_t tl_wait1(nxl_agent_t *a, nxl_agent_t *b, int drain)
{
    tl_count_until(a, b, 1, 10000);
    ck_assert_msg(tl_ndone == 1, "the request never completed");
    tl_ndone = 0;
    for (int i = 0; i < drain; i++)
        nxl_agent_run_once(b, 1);
    return tl_last;
}

/* tl_md_fetch, then tl_wait1 */
static inline nxl_status_t tl_fetch1(nxl_agent_t *a, nxl_agent_t *b, int drain)
{
    tl_md_fetch(a, b);
    return tl_wait1(a, b, drain);
}

/* tl_md_send, then tl_wait1 */
static inline nxl_status_t tl_send1(nxl_agent_t *a, nxl_agent_t *b, int drain)
{
    tl_md_send(a, b);
    return tl_wait1(a, b, drain);
}

/* Runs the reactor until *counter >= target or timeout_ms passed.
 * Returns 1 when reached. */
static inline int tl_run_until(nxl_agent_t *a, const volatile int *counter, int target,
                               int timeout_ms)
{
    uint64_t end = tl_now_ms() + (uint64_t)timeout_ms;
    while (*counter < target && tl_now_ms() < end)
        nxl_agent_run_once(a, 50);
    return *counter >= target;
}

/* A WRITE or READ of len bytes between laddr and peer's raddr, one DRAM
 * descriptor each side, with the notification notif (NULL: none, and no
 * options). Returns nxl_xfer_create's status. */
static inline nxl_status_t tl_xfer1(nxl_agent_t *a, nxl_op_t op, uintptr_t laddr, uintptr_t raddr,
                                    size_t len, const char *peer, const char *notif,
                                    nxl_xfer_t **x)
{
    nxl_desc_t ld = {.addr = laddr, .len = len}, rd = {.addr = raddr, .len = len};
    nxl_dlist_t l = {NXL_DRAM, &ld, 1}, r = {NXL_DRAM, &rd, 1};
    nxl_xfer_opts_t o;
    nxl_xfer_opts_init(&o);
    if (notif) {
        o.notif = notif;
        o.notif_len = strlen(notif);
    }
    return nxl_xfer_create(a, op, &l, &r, peer, notif ? &o : NULL, x);
}

/* One posted transfer's outcome, written by tl_done_cb. */
typedef struct tl_res {
    int calls;
    nxl_status_t st;
    char why[1024];
} tl_res_t;

static int tl_in_post; /* set around nxl_xfer_post by tl_post */

/* The callback of tl_post: counts the calls, keeps the status and the
 * future's error; never inside nxl_xfer_post. */
static inline void tl_done_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    tl_res_t *r = arg;
    ck_assert_msg(!tl_in_post, "callback ran inside the call that started it");
    r->calls++;
    r->st = st;
    snprintf(r->why, sizeof(r->why), "%s", nxl_future_error(f));
}

/* Posts x with tl_done_cb into r; a (x's agent) names the error. */
static inline void tl_post(nxl_agent_t *a, nxl_xfer_t *x, tl_res_t *r)
{
    memset(r, 0, sizeof(*r));
    r->st = NXL_IN_PROG;
    tl_in_post = 1;
    nxl_status_t st = nxl_xfer_post(x, tl_done_cb, r, NULL);
    tl_in_post = 0;
    ck_assert_msg(st == NXL_SUCCESS, "post: %s (%s)", nxl_status_name(st),
                  nxl_agent_last_error(a));
}

/* Runs a until r's callback came, within ms; then a few turns more: no
 * second call. */
static inline void tl_wait_res(nxl_agent_t *a, tl_res_t *r, int ms)
{
    ck_assert_msg(tl_run_until(a, &r->calls, 1, ms), "transfer not done in %d ms", ms);
    for (int i = 0; i < 3; i++)
        nxl_agent_run_once(a, 0);
    ck_assert_int_eq(r->calls, 1);
}

/* Registers len bytes of DRAM at p with a. */
static inline void tl_reg_dram(nxl_agent_t *a, void *p, size_t len)
{
    nxl_desc_t d = {.addr = (uintptr_t)p, .len = len};
    nxl_status_t st = nxl_mem_register(a, NXL_DRAM, &d, 1, NULL);
    ck_assert_msg(st == NXL_SUCCESS, "DRAM registration: %s", nxl_agent_last_error(a));
}

/* len bytes (at least 1) aligned to a page; free() them */
static inline void *tl_xalloc(size_t len)
{
    void *p = NULL;
    ck_assert_int_eq(posix_memalign(&p, 4096, len ? len : 1), 0);
    return p;
}

/* The index of the first byte where a and b differ, or -1. */
static inline long tl_first_diff(const void *a, const void *b, size_t n)
{
    if (!memcmp(a, b, n))
        return -1;
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i])
            return (long)i;
    return -1;
}

/* Kills a peer process (SIGKILL) and reaps it. The region libfabric's
 * shm provider named after it (/dev/shm/PID:D:E), which only its own close
 * removes, goes too: a killed test peer would leave 16 MiB of shared
 * memory behind each time (nxl removes such a leftover only when a later
 * process gets the same pid). */
static inline void tl_kill_pid(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    char pat[64];
    glob_t g;
    snprintf(pat, sizeof(pat), "/dev/shm/%ld:*:*", (long)pid);
    if (glob(pat, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++)
            unlink(g.gl_pathv[i]);
        globfree(&g);
    }
}

/* ... and clears *pid */
static inline void tl_kill(pid_t *pid)
{
    tl_kill_pid(*pid);
    *pid = 0;
}

/* Ends a peer process and the agent that speaks to it: "quit" to the
 * agent peer (when the process lives), a turn of the reactor, the agent
 * destroyed; then up to 5 s for the process to exit before SIGKILL. Both
 * are cleared. */
static inline void tl_stop_peer(nxl_agent_t **a, pid_t *pid, const char *peer)
{
    if (*a) {
        if (*pid > 0)
            nxl_notif_send(*a, peer, "quit", 4, NULL, NULL, NULL);
        nxl_agent_run_once(*a, 50);
        nxl_agent_destroy(*a);
        *a = NULL;
    }
    if (*pid > 0) {
        int status = 0;
        for (int i = 0; i < 100 && waitpid(*pid, &status, WNOHANG) == 0; i++)
            usleep(50000);
        tl_kill(pid);
    }
}

/* Runs the reactors of a and b in turn (turn_ms each; either may be NULL)
 * until *counter >= target or timeout_ms passed. Returns 1 when reached. */
static inline int tl_run2_until(nxl_agent_t *a, nxl_agent_t *b, const volatile int *counter,
                                int target, int timeout_ms, int turn_ms)
{
    uint64_t end = tl_now_ms() + (uint64_t)timeout_ms;
    while (*counter < target && tl_now_ms() < end) {
        if (a)
            nxl_agent_run_once(a, turn_ms);
        if (b)
            nxl_agent_run_once(b, turn_ms);
    }
    return *counter >= target;
}

/* A pattern that differs per byte, per buffer and per seed. */
static inline void tl_fill(void *buf, size_t len, uint32_t seed)
{
    unsigned char *p = buf;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (unsigned char)x;
    }
}

/* Returns the index of the first wrong byte, or -1 when all match. */
static inline long tl_check(const void *buf, size_t len, uint32_t seed)
{
    const unsigned char *p = buf;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        if (p[i] != (unsigned char)x)
            return (long)i;
    }
    return -1;
}

/* An error sentence: a few words, not a code. */
static inline int is_sentence(const char *s)
{
    return s && strlen(s) >= 16 && strchr(s, ' ') != NULL;
}

/* Asserts that s is an error sentence that mentions word. */
#define ck_sentence(s, word)                                                                       \
    do {                                                                                           \
        const char *s_ = (s);                                                                      \
        ck_assert_msg(is_sentence(s_), "not an error sentence: '%s'", s_ ? s_ : "(null)");         \
        ck_assert_msg(strstr(s_, (word)) != NULL, "sentence '%s' does not mention '%s'", s_,       \
                      (word));                                                                     \
    } while (0)

/* A test case of suite @p s: its timeout in seconds (0: Check's default),
 * its checked fixture (either function may be NULL) and its tests. */
static inline TCase *tl_tcase(Suite *s, const char *name, double timeout, SFun setup,
                              SFun teardown, const TTest *const *tests)
{
    TCase *tc = tcase_create(name);
    if (timeout > 0)
        tcase_set_timeout(tc, timeout);
    if (setup || teardown)
        tcase_add_checked_fixture(tc, setup, teardown);
    for (; *tests; tests++)
        tcase_add_test(tc, *tests);
    suite_add_tcase(s, tc);
    return tc;
}
#define TL_TCASE(s, name, timeout, setup, teardown, ...)                                        \
    tl_tcase((s), (name), (timeout), (setup), (teardown), (const TTest *const[]){__VA_ARGS__, NULL})

/* Runs a suite; the exit status of a suite program. */
static inline int tl_run(Suite *s)
{
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int nf = srunner_ntests_failed(r);
    srunner_free(r);
    return nf ? 1 : 0;
}

#endif
