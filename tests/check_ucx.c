/* The UCX transport's manners inside an application: it writes nothing to
 * the application's standard output (UCX's own log lines go through nxl's
 * log), it returns every request before its worker goes, and tearing an
 * agent down with transfers in flight to another agent of the same process
 * is quick and does not burn a core. Over shared memory and over TCP. */
#define _GNU_SOURCE
#include "testlib.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *tls; /* per test case: NULL (all: shared memory) or "tcp" */

/* what the agents logged, from UCX and from nxl */
static char logbuf[1 << 16];
static size_t loglen;
static int ucx_lines;

static void log_cb(nxl_log_level_t lvl, const char *msg, void *arg)
{
    if (!strncmp(msg, "UCX ", 4) && strstr(msg, ".c:"))
        ucx_lines++;
    int n = snprintf(logbuf + loglen, sizeof(logbuf) - loglen, "%s\n", msg);
    if (n > 0 && loglen + (size_t)n < sizeof(logbuf))
        loglen += (size_t)n;
}

static nxl_agent_t *agent(const char *name)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = name;
    c.log_level = NXL_LOG_WARN;
    c.log_cb = log_cb;
    nxl_agent_t *a;
    ck_assert_msg(nxl_agent_create(&c, &a) == NXL_SUCCESS, "%s", nxl_agent_last_error(NULL));
    nxl_param_t p = {"tls", tls};
    ck_assert_msg(nxl_backend_create(a, "UCX", tls ? &p : NULL, tls ? 1 : 0, NULL) ==
                      NXL_SUCCESS, "%s", nxl_agent_last_error(a));
    return a;
}

static void reg(nxl_agent_t *a, void *p, size_t len)
{
    nxl_desc_t d = {.addr = (uintptr_t)p, .len = len};
    ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &d, 1, NULL), NXL_SUCCESS);
}

static void learn(nxl_agent_t *a, nxl_agent_t *b)
{
    void *blob;
    size_t len;
    ck_assert_int_eq(nxl_md_local(b, &blob, &len), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_load(a, blob, len, NULL, 0), NXL_SUCCESS);
    nxl_free(blob);
}

static int ndone;
static void done_cb(nxl_future_t *f, nxl_status_t st, void *arg) { ndone++; }

/* runs both agents' reactors for ms milliseconds */
static void run_both(nxl_agent_t *a, nxl_agent_t *b, int ms)
{
    uint64_t end = tl_now_ms() + (uint64_t)ms;
    while (tl_now_ms() < end) {
        nxl_agent_run_once(a, 0);
        if (b)
            nxl_agent_run_once(b, 0);
        usleep(1000);
    }
}

/* standard output into a temporary file from here on; returns its fd */
static int capture_stdout(void)
{
    char path[] = "/tmp/nxl-stdout-XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    unlink(path);
    fflush(stdout);
    ck_assert(dup2(fd, STDOUT_FILENO) == STDOUT_FILENO);
    return fd;
}

static void assert_nothing_written(int fd, const char *what)
{
    fflush(stdout);
    struct stat st;
    ck_assert(fstat(fd, &st) == 0);
    char head[512] = "";
    if (st.st_size) {
        ssize_t n = pread(fd, head, sizeof(head) - 1, 0);
        head[n > 0 ? n : 0] = 0;
    }
    ck_assert_msg(st.st_size == 0, "%s: %lld bytes on standard output: %s", what,
                  (long long)st.st_size, head);
}

#define NX 1000
#define BLK 65536

/* Teardown of both agents with 1,000 WRITEs and READs in flight between
 * them (malloc'd memory: UCX 1.13 needs the target to progress, which it
 * does not here). */
static void destroy_inflight(void)
{
    int out = capture_stdout();
    nxl_agent_t *A = agent("A"), *B = agent("B");
    size_t len = (size_t)NX * BLK;
    unsigned char *a = malloc(len), *b = malloc(len);
    tl_fill(a, len, 1);
    reg(A, a, len);
    reg(B, b, len);
    learn(A, B);
    learn(B, A);
    nxl_xfer_t *x[NX];
    ndone = 0;
    for (int i = 0; i < NX; i++) {
        nxl_desc_t l = {.addr = (uintptr_t)a + (size_t)i * BLK, .len = BLK},
                   r = {.addr = (uintptr_t)b + (size_t)i * BLK, .len = BLK};
        nxl_dlist_t ll = {NXL_DRAM, &l, 1}, rl = {NXL_DRAM, &r, 1};
        ck_assert_int_eq(nxl_xfer_create(A, i % 2 ? NXL_READ : NXL_WRITE, &ll, &rl, "B", NULL,
                                         &x[i]),
                         NXL_SUCCESS);
        ck_assert_msg(nxl_xfer_post(x[i], done_cb, NULL, NULL) == NXL_SUCCESS, "%s",
                      nxl_agent_last_error(A));
    }
    /* one turn of A only: the requests are with UCX, B has not answered */
    nxl_agent_run_once(A, 0);
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    uint64_t t0 = tl_now_ms();
    nxl_agent_destroy(A);
    uint64_t took = tl_now_ms() - t0;
    getrusage(RUSAGE_SELF, &r1);
    double cpu = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) +
                 (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
                 ((r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) +
                  (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec)) / 1e6;
    ck_assert_int_eq(ndone, NX); /* every callback ran, inside destroy */
    fprintf(stderr, "check_ucx: destroy with %d transfers in flight (%s): %llu ms, %.0f ms CPU\n",
            NX, tls ? tls : "shared memory", (unsigned long long)took, cpu * 1e3);
    /* not a benchmark: a spinning destroy burnt a whole second of CPU */
    ck_assert_msg(cpu < 0.5, "destroy burnt %.0f ms of CPU", cpu * 1e3);
    ck_assert_msg(took < 5000, "destroy took %llu ms", (unsigned long long)took);
    /* B notices A is gone, and goes too */
    run_both(B, NULL, 50);
    nxl_agent_destroy(B);
    assert_nothing_written(out, "teardown with requests in flight");
    free(a);
    free(b);
}

START_TEST(t_destroy_inflight) { destroy_inflight(); }
END_TEST

/* A peer that went away: over TCP UCX's connect is refused, and UCX says
 * so in its log — through nxl's log, never on standard output. */
START_TEST(t_log_routed)
{
    int out = capture_stdout();
    nxl_agent_t *A = agent("A"), *B = agent("B");
    unsigned char *a = calloc(1, 1 << 20), *b = calloc(1, 1 << 20);
    reg(A, a, 1 << 20);
    reg(B, b, 1 << 20);
    learn(A, B);
    nxl_agent_destroy(B);
    nxl_desc_t l = {.addr = (uintptr_t)a, .len = 4096}, r = {.addr = (uintptr_t)b, .len = 4096};
    nxl_dlist_t ll = {NXL_DRAM, &l, 1}, rl = {NXL_DRAM, &r, 1};
    nxl_xfer_t *x;
    ck_assert_int_eq(nxl_xfer_create(A, NXL_WRITE, &ll, &rl, "B", NULL, &x), NXL_SUCCESS);
    ndone = 0;
    nxl_status_t st = nxl_xfer_post(x, done_cb, NULL, NULL);
    if (st == NXL_SUCCESS)
        ck_assert_msg(tl_run_until(A, &ndone, 1, 20000), "the transfer to a dead peer never ended");
    nxl_xfer_release(x);
    run_both(A, NULL, 20);
    nxl_agent_destroy(A);
    assert_nothing_written(out, "a transfer to a dead peer");
    if (tls && !strcmp(tls, "tcp"))
        ck_assert_msg(ucx_lines > 0, "UCX logged nothing through nxl; the log was:\n%s", logbuf);
    free(a);
    free(b);
}
END_TEST

static void setup_shm(void) { tls = NULL; loglen = 0; ucx_lines = 0; }
static void setup_tcp(void) { tls = "tcp"; loglen = 0; ucx_lines = 0; }

int main(void)
{
    unsetenv("UCX_LOG_LEVEL");
    unsetenv("UCX_LOG_FILE");
    Suite *s = suite_create("ucx");
    TCase *tc = tcase_create("shm");
    tcase_add_checked_fixture(tc, setup_shm, NULL);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, t_destroy_inflight);
    tcase_add_test(tc, t_log_routed);
    suite_add_tcase(s, tc);
    TCase *tt = tcase_create("tcp");
    tcase_add_checked_fixture(tt, setup_tcp, NULL);
    tcase_set_timeout(tt, 60);
    tcase_add_test(tt, t_destroy_inflight);
    tcase_add_test(tt, t_log_routed);
    suite_add_tcase(s, tt);
    return tl_run(s);
}
