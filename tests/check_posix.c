/* SPDX-License-Identifier: BSD-3-Clause */
/* The POSIX transport: DRAM to and from files and block devices, within the
 * agent (the agent names itself as the remote side).
 *
 * Write-then-read-back of many blocks at 4 KiB .. 4 MiB, every byte checked,
 * buffered and O_DIRECT, io_uring and thread-pool engines, files by fd and by
 * path; unaligned I/O with direct=1; a block device on a loop device (root);
 * a full file system (a 1 MiB tmpfs, root) next to a transfer that succeeds;
 * a write past RLIMIT_FSIZE (EFBIG); an I/O error (EIO, through
 * /proc/self/mem); reads past the end of a file;
 * registration errors; nxl_mem_query; nxl_mem_alloc without UCX;
 * registered plain-page DRAM moved onto 2 MiB pages (thp_collapse);
 * batched submission of what completion callbacks post; 64 transfers in flight (also with busy polling); teardown and
 * release with I/O in flight (CANCELED exactly once). Tests that cannot run
 * here say why and pass. */
#include "config.h"
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define NO_URING "no io_uring engine here (built without liburing, or io_uring_setup fails)"

static char tdir[256];

static void setup(void)
{
    snprintf(tdir, sizeof(tdir), "/tmp/nxl-posix-XXXXXX");
    ck_assert_msg(mkdtemp(tdir) != NULL, "mkdtemp: %s", strerror(errno));
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tdir);
    if (system(cmd) != 0)
        fprintf(stderr, "check_posix: could not remove %s\n", tdir);
}

/* ---------------------------------------------------------------- helpers */

/* Does this build have its io_uring engine, and does the kernel let us
 * set up a ring? Then engine=uring must work. */
static int uring_works(void)
{
#if defined(NXL_HAVE_LIBURING) && defined(__NR_io_uring_setup)
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    int fd = (int)syscall(__NR_io_uring_setup, 4, &p);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
#endif
    return 0;
}

/* The engine of a loop test's iteration i: "uring" (0), "threads" (1); or
 * NULL, with test's skip printed, when io_uring does not work here. */
static const char *engine_of(int i, const char *test)
{
    if (!i && !uring_works()) {
        printf("check_posix: %s[uring] skipped: " NO_URING "\n", test);
        return NULL;
    }
    return i ? "threads" : "uring";
}

static char engine_line[512];
static char stats_line[512]; /* the POSIX statistics a backend logs when destroyed */
static nxl_agent_t *g_agent; /* the last agent made, for error sentences */

static void log_cb(nxl_log_level_t lvl, const char *msg, void *arg)
{
    if (strstr(msg, "I/O engine"))
        snprintf(engine_line, sizeof(engine_line), "%s", msg);
    if (strstr(msg, "POSIX statistics"))
        snprintf(stats_line, sizeof(stats_line), "%s", msg);
    if (getenv("NXL_LOG_LEVEL"))
        fprintf(stderr, "nxl: %s\n", msg);
}

/* An agent with only a POSIX transport. */
static const char *extra_key, *extra_val; /* one more backend parameter, when set */
static unsigned px_busy_poll;              /* the agent's busy_poll_us */

static nxl_agent_t *px_agent(const char *name, const char *engine, const char *direct)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = name;
    c.log_level = getenv("NXL_LOG_LEVEL") ? -1 : NXL_LOG_INFO;
    c.log_cb = log_cb;
    c.busy_poll_us = px_busy_poll;
    nxl_agent_t *a = NULL;
    nxl_status_t st = nxl_agent_create(&c, &a);
    ck_assert_msg(st == NXL_SUCCESS, "agent: %s", nxl_agent_last_error(NULL));
    nxl_param_t p[3];
    size_t np = 0;
    if (extra_key)
        p[np++] = (nxl_param_t){extra_key, extra_val};
    if (engine)
        p[np++] = (nxl_param_t){"engine", engine};
    if (direct)
        p[np++] = (nxl_param_t){"direct", direct};
    engine_line[0] = 0;
    st = nxl_backend_create(a, "POSIX", p, np, NULL);
    ck_assert_msg(st == NXL_SUCCESS, "POSIX backend (engine=%s): %s", engine ? engine : "auto",
                  nxl_agent_last_error(a));
    g_agent = a;
    if (engine && !strcmp(engine, "uring"))
        ck_assert_msg(strstr(engine_line, "io_uring"), "engine=uring runs: %s", engine_line);
    if (engine && !strcmp(engine, "threads"))
        ck_assert_msg(strstr(engine_line, "thread pool"), "engine=threads runs: %s", engine_line);
    return a;
}

typedef tl_res_t res_t;
#define done_cb tl_done_cb

static void post(nxl_xfer_t *x, res_t *r)
{
    tl_post(g_agent, x, r);
}

#define wait_res tl_wait_res
#define xalloc tl_xalloc
#define first_diff tl_first_diff
#define reg_dram tl_reg_dram


/* file registration by path: dev_id is the caller's id */
static nxl_status_t reg_path(nxl_agent_t *a, nxl_mem_t t, uint64_t id, const char *path,
                             const char *mode, uint64_t off, size_t len)
{
    char meta[512];
    snprintf(meta, sizeof(meta), "path=%s;mode=%s", path, mode);
    nxl_desc_t d = {.addr = off, .len = len, .dev_id = id, .meta = meta, .meta_len = strlen(meta)};
    return nxl_mem_register(a, t, &d, 1, NULL);
}

static nxl_status_t reg_fd(nxl_agent_t *a, nxl_mem_t t, int fd, uint64_t off, size_t len)
{
    nxl_desc_t d = {.addr = off, .len = len, .dev_id = (uint64_t)fd};
    return nxl_mem_register(a, t, &d, 1, NULL);
}

/* A transfer of n blocks of bs bytes: DRAM block i <-> file block map[i]. */
static nxl_xfer_t *make_blocks(nxl_agent_t *a, nxl_op_t op, nxl_mem_t t, uint64_t id, char *buf,
                               uint64_t foff, size_t bs, size_t n, const size_t *map)
{
    nxl_desc_t *ld = calloc(n, sizeof(*ld)), *rd = calloc(n, sizeof(*rd));
    for (size_t i = 0; i < n; i++) {
        ld[i] = (nxl_desc_t){.addr = (uintptr_t)(buf + i * bs), .len = bs};
        rd[i] = (nxl_desc_t){.addr = foff + (map ? map[i] : i) * bs, .len = bs, .dev_id = id};
    }
    nxl_prepped_t *lp, *rp;
    nxl_status_t st = nxl_prep(a, NULL, NXL_DRAM, ld, n, &lp);
    ck_assert_msg(st == NXL_SUCCESS, "prep DRAM: %s", nxl_agent_last_error(a));
    st = nxl_prep(a, nxl_agent_name(a), t, rd, n, &rp);
    ck_assert_msg(st == NXL_SUCCESS, "prep %s: %s", nxl_mem_name(t), nxl_agent_last_error(a));
    nxl_xfer_t *x = tl_make_all(a, op, lp, rp, n, NULL, "POSIX");
    free(ld);
    free(rd);
    return x;
}

/* Writes n blocks of bs bytes from src to FILE id at foff, reads them back
 * into dst and checks every byte. */
static void write_read_back(nxl_agent_t *a, uint64_t id, char *src, char *dst, uint64_t foff,
                            size_t bs, size_t n)
{
    nxl_xfer_t *w = make_blocks(a, NXL_WRITE, NXL_FILE, id, src, foff, bs, n, NULL);
    nxl_xfer_t *r = make_blocks(a, NXL_READ, NXL_FILE, id, dst, foff, bs, n, NULL);
    res_t res;
    post(w, &res);
    wait_res(a, &res, 10000);
    ck_assert_msg(res.st == NXL_SUCCESS, "write: %s", res.why);
    post(r, &res);
    wait_res(a, &res, 10000);
    ck_assert_msg(res.st == NXL_SUCCESS, "read: %s", res.why);
    long d = first_diff(dst, src, bs * n);
    ck_assert_msg(d < 0, "read back: byte %ld differs", d);
    nxl_xfer_release(w);
    nxl_xfer_release(r);
}

/* Pages of the file's first len bytes in the page cache. */
static long resident(int fd, size_t len)
{
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return -1;
    size_t np = (len + 4095) / 4096;
    unsigned char *v = calloc(np, 1);
    long k = -1;
    if (mincore(m, len, v) == 0) {
        k = 0;
        for (size_t i = 0; i < np; i++)
            k += v[i] & 1;
    }
    free(v);
    munmap(m, len);
    return k;
}

static int on_tmpfs(const char *path)
{
    struct statfs s;
    return statfs(path, &s) == 0 && s.f_type == TMPFS_MAGIC;
}

/* ---------------------------------------------------- write, read back */

/* loop index: bit 0 engine (uring, threads), bit 1 direct, bit 2 by path */
START_TEST(t_roundtrip)
{
    const char *engine = _i & 1 ? "threads" : "uring";
    int direct = !!(_i & 2), by_path = !!(_i & 4);
    if (!strcmp(engine, "uring") && !uring_works()) {
        printf("check_posix: t_roundtrip[%d] skipped: " NO_URING "\n", _i);
        return;
    }
    nxl_agent_t *a = px_agent("px", engine, direct ? "1" : "0");
    static const size_t sizes[] = {4 * KiB, 64 * KiB, 1 * MiB, 4 * MiB};
    static const size_t counts[] = {64, 32, 8, 2};
    for (int si = 0; si < 4; si++) {
        size_t bs = sizes[si], n = counts[si], total = bs * n;
        char *src = xalloc(total), *dst = xalloc(total), *chk = xalloc(bs);
        tl_fill(src, total, (uint32_t)(_i * 16 + si));
        memset(dst, 0, total);
        reg_dram(a, src, total);
        reg_dram(a, dst, total);
        char path[300];
        snprintf(path, sizeof(path), "%s/rt-%d-%d", tdir, _i, si);
        int fd = -1;
        uint64_t id;
        if (by_path) {
            id = 100 + si;
            nxl_status_t st = reg_path(a, NXL_FILE, id, path, "create", 0, total);
            ck_assert_msg(st == NXL_SUCCESS, "register by path: %s", nxl_agent_last_error(a));
        } else {
            fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
            ck_assert_int_ge(fd, 0);
            id = (uint64_t)fd;
            nxl_status_t st = reg_fd(a, NXL_FILE, fd, 0, total);
            ck_assert_msg(st == NXL_SUCCESS, "register fd: %s", nxl_agent_last_error(a));
        }
        size_t *map = calloc(n, sizeof(*map));
        for (size_t i = 0; i < n; i++)
            map[i] = (i * 7 + 3) % n; /* a permutation: n is a power of two */
        nxl_xfer_t *w = make_blocks(a, NXL_WRITE, NXL_FILE, id, src, 0, bs, n, map);
        nxl_xfer_t *r = make_blocks(a, NXL_READ, NXL_FILE, id, dst, 0, bs, n, map);
        res_t res;
        post(w, &res);
        wait_res(a, &res, 20000);
        ck_assert_msg(res.st == NXL_SUCCESS, "write %zu x %zu: %s", n, bs, res.why);

        int cfd = open(path, O_RDONLY);
        ck_assert_int_ge(cfd, 0);
        /* O_DIRECT bypasses the page cache; buffered writes land in it.
         * (Valgrind reads the start of every file mapped, to look for
         * debug info: the check means nothing there.) */
        if (RUNNING_ON_VALGRIND && si == 0)
            printf("check_posix: page-cache check of O_DIRECT skipped under valgrind\n");
        else if (on_tmpfs(path) && si == 0)
            printf("check_posix: page-cache check of O_DIRECT skipped: %s is on tmpfs\n", tdir);
        if (!on_tmpfs(path) && !RUNNING_ON_VALGRIND) {
            long k = resident(cfd, total);
            if (direct)
                ck_assert_msg(k == 0, "direct write of %zu x %zu left %ld pages cached", n, bs, k);
            else
                ck_assert_msg(k == (long)(total / 4096), "buffered write: %ld of %zu pages "
                              "cached", k, total / 4096);
        }
        struct stat sb;
        ck_assert_int_eq(fstat(cfd, &sb), 0);
        ck_assert_int_eq((long long)sb.st_size, (long long)total);
        for (size_t i = 0; i < n; i++) {
            ck_assert_int_eq(pread(cfd, chk, bs, (off_t)(map[i] * bs)), (ssize_t)bs);
            long d = first_diff(chk, src + i * bs, bs);
            ck_assert_msg(d < 0, "file block %zu (from DRAM block %zu, %zu B) differs at byte %ld",
                          map[i], i, bs, d);
        }
        close(cfd);

        post(r, &res);
        wait_res(a, &res, 20000);
        ck_assert_msg(res.st == NXL_SUCCESS, "read %zu x %zu: %s", n, bs, res.why);
        long d = first_diff(dst, src, total);
        ck_assert_msg(d < 0, "read back %zu x %zu differs at byte %ld", n, bs, d);

        /* posting again works (re-postable transfers) */
        memset(dst, 0, total);
        post(r, &res);
        wait_res(a, &res, 20000);
        ck_assert_int_eq(res.st, NXL_SUCCESS);
        ck_assert_int_lt(first_diff(dst, src, total), 0);

        nxl_xfer_release(w);
        nxl_xfer_release(r);
        nxl_desc_t dd[2] = {{.addr = (uintptr_t)src, .len = total},
                            {.addr = (uintptr_t)dst, .len = total}};
        ck_assert_int_eq(nxl_mem_deregister(a, NXL_DRAM, dd, 2), NXL_SUCCESS);
        nxl_desc_t fdsc = {.addr = 0, .len = total, .dev_id = id};
        ck_assert_int_eq(nxl_mem_deregister(a, NXL_FILE, &fdsc, 1), NXL_SUCCESS);
        if (fd >= 0)
            close(fd);
        free(map);
        free(src);
        free(dst);
        free(chk);
    }
    nxl_agent_destroy(a);
}
END_TEST

/* direct=1 with buffers, offsets and lengths that are not aligned: the
 * transport goes buffered for those, and the data is right. */
START_TEST(t_unaligned_direct)
{
    const char *engine = engine_of(_i, "t_unaligned_direct");
    if (!engine)
        return;
    nxl_agent_t *a = px_agent("px", engine, "1");
    size_t bs = 1000, n = 37, total = bs * n + 1;
    char *src = xalloc(total + 1), *dst = xalloc(total + 1);
    tl_fill(src, total + 1, 77);
    memset(dst, 0, total + 1);
    reg_dram(a, src, total + 1);
    reg_dram(a, dst, total + 1);
    char path[300];
    snprintf(path, sizeof(path), "%s/unaligned", tdir);
    ck_assert_int_eq(reg_path(a, NXL_FILE, 5, path, "create,direct", 0, 1 * MiB), NXL_SUCCESS);
    /* buffer + 1, file offset 333 + i * bs */
    write_read_back(a, 5, src + 1, dst + 1, 333, bs, n);
    nxl_agent_destroy(a);
    free(src);
    free(dst);
}
END_TEST

/* ------------------------------------------------------- engine choice */

START_TEST(t_engine_params)
{
    /* auto: io_uring where it works */
    nxl_agent_t *a = px_agent("px", NULL, NULL);
    if (uring_works())
        ck_assert_msg(strstr(engine_line, "io_uring"), "auto picks io_uring: %s", engine_line);
    else
        ck_assert_msg(strstr(engine_line, "thread pool"), "auto falls back: %s", engine_line);
    nxl_agent_destroy(a);

    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "px2";
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_SUCCESS);
    nxl_param_t bad1 = {"engine", "fast"}, bad2 = {"colour", "blue"}, bad3 = {"chunk", "1000"};
    ck_assert_int_eq(nxl_backend_create(a, "POSIX", &bad1, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_assert_msg(strstr(nxl_agent_last_error(a), "engine"), "%s", nxl_agent_last_error(a));
    ck_assert_int_eq(nxl_backend_create(a, "POSIX", &bad2, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_assert_msg(strstr(nxl_agent_last_error(a), "colour"), "%s", nxl_agent_last_error(a));
    ck_assert_int_eq(nxl_backend_create(a, "POSIX", &bad3, 1, NULL), NXL_ERR_INVALID_PARAM);
    nxl_param_t bad4 = {"coop_taskrun", "yes please"};
    ck_assert_int_eq(nxl_backend_create(a, "POSIX", &bad4, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_assert_msg(strstr(nxl_agent_last_error(a), "coop_taskrun"), "%s", nxl_agent_last_error(a));
    nxl_param_t bad5 = {"thp_collapse", "maybe"};
    ck_assert_int_eq(nxl_backend_create(a, "POSIX", &bad5, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_assert_msg(strstr(nxl_agent_last_error(a), "thp_collapse=maybe"), "%s",
                  nxl_agent_last_error(a));
#ifndef NXL_HAVE_LIBURING
    nxl_param_t pu = {"engine", "uring"};
    ck_assert_int_eq(nxl_backend_create(a, "POSIX", &pu, 1, NULL), NXL_ERR_NOT_SUPPORTED);
#endif
    /* still none created: a good one works */
    ck_assert_int_eq(nxl_backend_create(a, "POSIX", NULL, 0, NULL), NXL_SUCCESS);
    nxl_agent_destroy(a);

    nxl_plugin_info_t info[8];
    const nxl_plugin_info_t *px = tl_plugin("POSIX", info, 8);
    ck_assert_ptr_nonnull(px);
    ck_assert_int_eq(px->available, 1);
    ck_assert_uint_eq(px->mem_mask, (1u << NXL_DRAM) | (1u << NXL_FILE) | (1u << NXL_BLK));
}
END_TEST

/* When io_uring cannot be set up, engine=auto falls back to the thread pool
 * (and says so) while engine=uring fails with a sentence. The failure is
 * made with RLIMIT_NOFILE: one fd left, which the ring takes, so that its
 * eventfd cannot be made; the pool's eventfd then gets the freed fd. In a
 * child, where the limit stays. */
#define in_child tl_in_child

static int fallback_child(const void *arg, char *msg, size_t cap)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "fb";
    c.log_level = NXL_LOG_INFO;
    c.log_cb = log_cb;
    nxl_agent_t *a;
    if (nxl_agent_create(&c, &a) != NXL_SUCCESS) {
        snprintf(msg, cap, "agent: %s", nxl_agent_last_error(NULL));
        return 1;
    }
    int lowest = open("/dev/null", O_RDONLY);
    close(lowest);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = (rlim_t)lowest + 1; /* the soft limit only: it can be raised again */
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
        snprintf(msg, cap, "setrlimit: %s", strerror(errno));
        return 1;
    }
    nxl_param_t pu = {"engine", "uring"};
    nxl_status_t st = nxl_backend_create(a, "POSIX", &pu, 1, NULL);
    if (st != NXL_ERR_BACKEND || !strstr(nxl_agent_last_error(a), "io_uring")) {
        snprintf(msg, cap, "engine=uring without io_uring: %s: %s", nxl_status_name(st),
                 nxl_agent_last_error(a));
        return 1;
    }
    engine_line[0] = 0;
    st = nxl_backend_create(a, "POSIX", NULL, 0, NULL);
    if (st != NXL_SUCCESS || !strstr(engine_line, "thread pool")) {
        snprintf(msg, cap, "engine=auto without io_uring: %s: %s / %s", nxl_status_name(st),
                 nxl_agent_last_error(a), engine_line);
        return 1;
    }
    /* and it moves data */
    rl.rlim_cur = (rlim_t)lowest + 64;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
        snprintf(msg, cap, "setrlimit back: %s", strerror(errno));
        return 1;
    }
    char path[300];
    snprintf(path, sizeof(path), "%s/fb", tdir);
    char *src = xalloc(256 * KiB), *dst = xalloc(256 * KiB);
    tl_fill(src, 256 * KiB, 3);
    memset(dst, 0, 256 * KiB);
    reg_dram(a, src, 256 * KiB);
    reg_dram(a, dst, 256 * KiB);
    if (reg_path(a, NXL_FILE, 1, path, "create", 0, 256 * KiB) != NXL_SUCCESS) {
        snprintf(msg, cap, "register: %s", nxl_agent_last_error(a));
        return 1;
    }
    g_agent = a;
    nxl_xfer_t *w = make_blocks(a, NXL_WRITE, NXL_FILE, 1, src, 0, 16 * KiB, 16, NULL);
    nxl_xfer_t *r = make_blocks(a, NXL_READ, NXL_FILE, 1, dst, 0, 16 * KiB, 16, NULL);
    res_t res;
    post(w, &res);
    tl_run_until(a, &res.calls, 1, 5000);
    int ok = res.st == NXL_SUCCESS;
    post(r, &res);
    tl_run_until(a, &res.calls, 1, 5000);
    ok = ok && res.st == NXL_SUCCESS && first_diff(dst, src, 256 * KiB) < 0;
    if (!ok)
        snprintf(msg, cap, "thread-pool fallback moved wrong data: %s", res.why);
    nxl_agent_destroy(a);
    free(src);
    free(dst);
    return !ok;
}

START_TEST(t_fallback)
{
    if (!uring_works()) {
        printf("check_posix: t_fallback skipped: no io_uring engine here to fail; the other "
               "tests run on the thread pool\n");
        return;
    }
    in_child(fallback_child, NULL);
}
END_TEST

/* ---------------------------------------------------------------- errors */

START_TEST(t_reg_errors)
{
    nxl_agent_t *a = px_agent("px", NULL, NULL);
    char path[300];
    /* a closed fd */
    int fd = open("/dev/null", O_RDONLY);
    close(fd);
    ck_assert_int_eq(reg_fd(a, NXL_FILE, fd, 0, 4096), NXL_ERR_INVALID_PARAM);
    char want[32];
    snprintf(want, sizeof(want), "fd %d", fd);
    ck_assert_msg(strstr(nxl_agent_last_error(a), want), "sentence names the fd: %s",
                  nxl_agent_last_error(a));
    /* a missing path, no create */
    snprintf(path, sizeof(path), "%s/missing", tdir);
    ck_assert_int_eq(reg_path(a, NXL_FILE, 1, path, "rw", 0, 4096), NXL_ERR_NOT_FOUND);
    ck_assert_msg(strstr(nxl_agent_last_error(a), path), "sentence names the path: %s",
                  nxl_agent_last_error(a));
    ck_assert_int_ne(access(path, F_OK), 0);
    /* a directory, a pipe */
    ck_assert_int_ne(reg_path(a, NXL_FILE, 1, tdir, "r", 0, 4096), NXL_SUCCESS);
    int pp[2];
    ck_assert_int_eq(pipe(pp), 0);
    ck_assert_int_eq(reg_fd(a, NXL_FILE, pp[0], 0, 4096), NXL_ERR_INVALID_PARAM);
    close(pp[0]);
    close(pp[1]);
    /* malformed meta */
    nxl_desc_t d = {.addr = 0, .len = 4096, .dev_id = 1, .meta = "nopath", .meta_len = 6};
    ck_assert_int_eq(nxl_mem_register(a, NXL_FILE, &d, 1, NULL), NXL_ERR_INVALID_PARAM);
    d.meta = "path=/tmp/x;mode=sideways";
    d.meta_len = strlen(d.meta);
    ck_assert_int_eq(nxl_mem_register(a, NXL_FILE, &d, 1, NULL), NXL_ERR_INVALID_PARAM);

    /* a read-only file refuses writes at post: nothing starts */
    snprintf(path, sizeof(path), "%s/ro", tdir);
    int wfd = open(path, O_RDWR | O_CREAT, 0644);
    ck_assert_int_eq(ftruncate(wfd, 64 * KiB), 0);
    close(wfd);
    ck_assert_int_eq(reg_path(a, NXL_FILE, 9, path, "r", 0, 64 * KiB), NXL_SUCCESS);
    char *buf = xalloc(64 * KiB);
    memset(buf, 1, 64 * KiB);
    reg_dram(a, buf, 64 * KiB);
    nxl_xfer_t *w = make_blocks(a, NXL_WRITE, NXL_FILE, 9, buf, 0, 4 * KiB, 16, NULL);
    res_t res = {0};
    ck_assert_int_eq(nxl_xfer_post(w, done_cb, &res, NULL), NXL_ERR_NOT_ALLOWED);
    ck_assert_msg(strstr(nxl_agent_last_error(a), "read-only"), "%s", nxl_agent_last_error(a));
    for (int i = 0; i < 5; i++)
        nxl_agent_run_once(a, 10);
    ck_assert_int_eq(res.calls, 0);
    /* reading it works */
    nxl_xfer_t *r = make_blocks(a, NXL_READ, NXL_FILE, 9, buf, 0, 4 * KiB, 16, NULL);
    post(r, &res);
    wait_res(a, &res, 5000);
    ck_assert_int_eq(res.st, NXL_SUCCESS);
    for (size_t i = 0; i < 64 * KiB; i++)
        ck_assert_int_eq(buf[i], 0);
    nxl_agent_destroy(a);
    free(buf);
}
END_TEST

/* Reading past the end of a file: NXL_ERR_NOT_FOUND naming the file and
 * the offset where it ended; another read in flight is unaffected. */
START_TEST(t_read_past_eof)
{
    const char *engine = engine_of(_i, "t_read_past_eof");
    if (!engine)
        return;
    nxl_agent_t *a = px_agent("px", engine, NULL);
    char path[300];
    snprintf(path, sizeof(path), "%s/short", tdir);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    char *content = xalloc(16 * KiB);
    tl_fill(content, 16 * KiB, 5);
    ck_assert_int_eq(pwrite(fd, content, 16 * KiB, 0), (ssize_t)(16 * KiB));
    close(fd);
    ck_assert_int_eq(reg_path(a, NXL_FILE, 3, path, "r", 0, 64 * KiB), NXL_SUCCESS);
    char *buf = xalloc(64 * KiB);
    memset(buf, 0, 64 * KiB);
    reg_dram(a, buf, 64 * KiB);
    /* 8 KiB at 12 KiB: 4 KiB are there, then the end */
    nxl_xfer_t *bad = make_blocks(a, NXL_READ, NXL_FILE, 3, buf + 32 * KiB, 12 * KiB, 8 * KiB, 1,
                                  NULL);
    nxl_xfer_t *good = make_blocks(a, NXL_READ, NXL_FILE, 3, buf, 0, 4 * KiB, 4, NULL);
    res_t rb, rg;
    post(bad, &rb);
    post(good, &rg);
    ck_assert(tl_run_until(a, &rb.calls, 1, 5000));
    ck_assert(tl_run_until(a, &rg.calls, 1, 5000));
    ck_assert_int_eq(rb.calls, 1);
    ck_assert_int_eq(rb.st, NXL_ERR_NOT_FOUND);
    ck_assert_msg(strstr(rb.why, path) && strstr(rb.why, "offset 16384") &&
                      strstr(rb.why, "end of the file"),
                  "sentence names file, offset and cause: %s", rb.why);
    ck_assert_int_eq(nxl_xfer_status(bad), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(rg.st, NXL_SUCCESS);
    ck_assert_int_lt(first_diff(buf, content, 16 * KiB), 0);
    /* entirely past the end */
    nxl_xfer_t *far = make_blocks(a, NXL_READ, NXL_FILE, 3, buf, 32 * KiB, 4 * KiB, 1, NULL);
    post(far, &rb);
    wait_res(a, &rb, 5000);
    ck_assert_int_eq(rb.st, NXL_ERR_NOT_FOUND);
    ck_assert_msg(strstr(rb.why, "offset 32768"), "%s", rb.why);
    /* the agent keeps working */
    memset(buf, 0, 16 * KiB);
    post(good, &rg);
    wait_res(a, &rg, 5000);
    ck_assert_int_eq(rg.st, NXL_SUCCESS);
    ck_assert_int_lt(first_diff(buf, content, 16 * KiB), 0);
    nxl_agent_destroy(a);
    free(buf);
    free(content);
}
END_TEST

/* A write past RLIMIT_FSIZE fails with EFBIG midway (a system error in the
 * middle of a transfer, no root needed); a transfer below the limit in
 * flight at the same time succeeds. Runs in a child: the limit stays there. */
static int efbig_child(const void *arg, char *msg, size_t cap)
{
    const char *engine = arg;
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {1 * MiB, 1 * MiB};
    if (setrlimit(RLIMIT_FSIZE, &rl) < 0) {
        snprintf(msg, cap, "setrlimit: %s", strerror(errno));
        return 1;
    }
    nxl_agent_t *a = px_agent("px", engine, NULL);
    char p1[300], p2[300];
    snprintf(p1, sizeof(p1), "%s/big-%s", tdir, engine);
    snprintf(p2, sizeof(p2), "%s/small-%s", tdir, engine);
    if (reg_path(a, NXL_FILE, 1, p1, "create", 0, 4 * MiB) ||
        reg_path(a, NXL_FILE, 2, p2, "create", 0, 64 * KiB)) {
        snprintf(msg, cap, "register: %s", nxl_agent_last_error(a));
        return 1;
    }
    char *buf = xalloc(4 * MiB);
    tl_fill(buf, 4 * MiB, 9);
    reg_dram(a, buf, 4 * MiB);
    nxl_xfer_t *big = make_blocks(a, NXL_WRITE, NXL_FILE, 1, buf, 0, 2 * MiB, 1, NULL);
    nxl_xfer_t *small = make_blocks(a, NXL_WRITE, NXL_FILE, 2, buf + 2 * MiB, 0, 64 * KiB, 1,
                                    NULL);
    res_t rb, rs;
    post(big, &rb);
    post(small, &rs);
    tl_run_until(a, &rb.calls, 1, 10000);
    tl_run_until(a, &rs.calls, 1, 10000);
    int bad = 0;
    if (rb.calls != 1 || rb.st != NXL_ERR_BACKEND || !strstr(rb.why, p1) ||
        !strstr(rb.why, "offset") || !strstr(rb.why, strerror(EFBIG))) {
        snprintf(msg, cap, "big write: %d calls, %s: %s", rb.calls, nxl_status_name(rb.st),
                 rb.why);
        bad = 1;
    } else if (rs.calls != 1 || rs.st != NXL_SUCCESS) {
        snprintf(msg, cap, "small write: %d calls, %s: %s", rs.calls, nxl_status_name(rs.st),
                 rs.why);
        bad = 1;
    } else {
        char chk[64 * KiB];
        int fd = open(p2, O_RDONLY);
        if (pread(fd, chk, sizeof(chk), 0) != (ssize_t)sizeof(chk) ||
            first_diff(chk, buf + 2 * MiB, sizeof(chk)) >= 0) {
            snprintf(msg, cap, "small write: file content wrong");
            bad = 1;
        }
        close(fd);
    }
    nxl_agent_destroy(a);
    free(buf);
    return bad;
}

START_TEST(t_efbig)
{
    const char *engine = engine_of(_i, "t_efbig");
    if (!engine)
        return;
    in_child(efbig_child, engine);
}
END_TEST

/* A full file system: a 1 MiB tmpfs; writing 2 MiB fails with ENOSPC and a
 * sentence, a small transfer elsewhere in flight at the same time succeeds. */
/* An I/O error (EIO) from the kernel, on any machine and without root:
 * /proc/self/mem is a regular file whose offsets are this process's
 * addresses, and reading or writing where nothing is mapped fails with EIO.
 * A READ that spans mapped memory and a hole fails with NXL_ERR_BACKEND and
 * a sentence naming the fd, the offset and the error; a WRITE into the hole
 * likewise; a READ of the mapped part in flight at the same time succeeds
 * byte for byte; the agent keeps working. */
START_TEST(t_eio)
{
    const char *engine = engine_of(_i, "t_eio");
    if (!engine)
        return;
    int fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        printf("check_posix: t_eio[%s] skipped: cannot open /proc/self/mem: %s\n", engine,
               strerror(errno));
        return;
    }
    /* four pages far from where malloc and mmap place things; the last two
     * unmapped again, so that nothing the agent allocates lands there */
    char *base = mmap((void *)0x540000000000ull, 16 * KiB, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (base == MAP_FAILED || base != (char *)0x540000000000ull) {
        printf("check_posix: t_eio[%s] skipped: no mapping at 0x540000000000: %s\n", engine,
               base == MAP_FAILED ? strerror(errno) : "placed elsewhere");
        if (base != MAP_FAILED)
            munmap(base, 16 * KiB);
        close(fd);
        return;
    }
    tl_fill(base, 8 * KiB, 11);
    ck_assert_int_eq(munmap(base + 8 * KiB, 8 * KiB), 0);
    nxl_agent_t *a = px_agent("px", engine, NULL);
    ck_assert_msg(reg_fd(a, NXL_FILE, fd, (uintptr_t)base, 16 * KiB) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    char *buf = xalloc(64 * KiB);
    memset(buf, 0, 64 * KiB);
    reg_dram(a, buf, 64 * KiB);
    /* pages 0..3: the last two are the hole */
    nxl_xfer_t *bad = make_blocks(a, NXL_READ, NXL_FILE, (uint64_t)fd, buf, (uintptr_t)base,
                                  4 * KiB, 4, NULL);
    nxl_xfer_t *good = make_blocks(a, NXL_READ, NXL_FILE, (uint64_t)fd, buf + 32 * KiB,
                                   (uintptr_t)base, 4 * KiB, 2, NULL);
    res_t rb, rg;
    post(bad, &rb);
    post(good, &rg);
    wait_res(a, &rb, 5000);
    wait_res(a, &rg, 5000);
    /* either page of the hole may be the one reported: the engine runs
     * the elements in parallel and the first failure found is told */
    char want[160], want2[160];
    snprintf(want, sizeof(want), "fd %d at offset %llu", fd,
             (unsigned long long)(uintptr_t)(base + 8 * KiB));
    snprintf(want2, sizeof(want2), "fd %d at offset %llu", fd,
             (unsigned long long)(uintptr_t)(base + 12 * KiB));
    ck_assert_int_eq(rb.calls, 1);
    ck_assert_int_eq(rb.st, NXL_ERR_BACKEND);
    ck_assert_msg((strstr(rb.why, want) || strstr(rb.why, want2)) && strstr(rb.why, strerror(EIO)),
                  "sentence names fd, offset and EIO (want '%s'): %s", want, rb.why);
    ck_assert_int_eq(nxl_xfer_status(bad), NXL_ERR_BACKEND);
    ck_assert_int_eq(rg.calls, 1);
    ck_assert_int_eq(rg.st, NXL_SUCCESS);
    ck_assert_int_lt(first_diff(buf + 32 * KiB, base, 8 * KiB), 0);
    /* a WRITE into the hole */
    nxl_xfer_t *wbad = make_blocks(a, NXL_WRITE, NXL_FILE, (uint64_t)fd, buf + 48 * KiB,
                                   (uintptr_t)(base + 12 * KiB), 4 * KiB, 1, NULL);
    post(wbad, &rb);
    wait_res(a, &rb, 5000);
    ck_assert_int_eq(rb.st, NXL_ERR_BACKEND);
    ck_assert_msg(strstr(rb.why, "write to") && strstr(rb.why, strerror(EIO)), "%s", rb.why);
    /* the agent keeps working: a WRITE into the mapped part lands there */
    tl_fill(buf + 48 * KiB, 4 * KiB, 12);
    nxl_xfer_t *wgood = make_blocks(a, NXL_WRITE, NXL_FILE, (uint64_t)fd, buf + 48 * KiB,
                                    (uintptr_t)(base + 4 * KiB), 4 * KiB, 1, NULL);
    post(wgood, &rg);
    wait_res(a, &rg, 5000);
    ck_assert_msg(rg.st == NXL_SUCCESS, "%s", rg.why);
    ck_assert_int_lt(first_diff(base + 4 * KiB, buf + 48 * KiB, 4 * KiB), 0);
    nxl_agent_destroy(a);
    munmap(base, 8 * KiB);
    close(fd);
    free(buf);
}
END_TEST

/* nxl_mem_alloc() in an agent whose transports do not allocate (POSIX
 * only): page-aligned host memory; from 2 MiB on 2 MiB-aligned (huge pages
 * advised), registered, and usable for O_DIRECT I/O right away. */
START_TEST(t_mem_alloc_host)
{
    nxl_agent_t *a = px_agent("px", NULL, "1");
    void *small = NULL, *big = NULL;
    ck_assert_int_eq(nxl_mem_alloc(a, NXL_DRAM, 4 * KiB, 0, &small), NXL_SUCCESS);
    ck_assert_int_eq((uintptr_t)small % 4096, 0);
    size_t len = 4 * MiB + 4 * KiB; /* not a whole number of huge pages */
    ck_assert_int_eq(nxl_mem_alloc(a, NXL_DRAM, len, 0, &big), NXL_SUCCESS);
    ck_assert_msg((uintptr_t)big % (2 * MiB) == 0, "%p is not 2 MiB-aligned", big);
    /* more than can be rounded up to whole huge pages: refused with a sentence */
    void *none = (void *)&none;
    ck_assert_int_eq(nxl_mem_alloc(a, NXL_DRAM, SIZE_MAX - 4096, 0, &none), NXL_ERR_UNKNOWN);
    ck_assert_ptr_null(none);
    ck_assert_msg(strstr(nxl_agent_last_error(a), "out of memory"), "%s",
                  nxl_agent_last_error(a));
    char *b = big;
    tl_fill(b, 2 * MiB, 21);
    char path[300];
    snprintf(path, sizeof(path), "%s/alloc", tdir);
    ck_assert_int_eq(reg_path(a, NXL_FILE, 1, path, "create", 0, 2 * MiB), NXL_SUCCESS);
    write_read_back(a, 1, b, b + 2 * MiB, 0, 256 * KiB, 8);
    /* the last byte asked for is there */
    b[len - 1] = 7;
    ck_assert_int_eq(nxl_mem_free(a, big), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_free(a, small), NXL_SUCCESS);
    nxl_agent_destroy(a);
}
END_TEST

/* ------------------------------------------- registered DRAM onto 2 MiB pages */

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

/* Can this kernel move anonymous memory onto huge pages (MADV_COLLAPSE,
 * Linux 6.1)? NULL if so, or why not. */
static const char *collapse_works(void)
{
    static char why[160];
    size_t len = 4 * MiB;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return "mmap failed";
    memset(m, 1, len);
    char *a = (char *)(((uintptr_t)m + 2 * MiB - 1) & ~(uintptr_t)(2 * MiB - 1));
    int rc = madvise(a, 2 * MiB, MADV_COLLAPSE);
    snprintf(why, sizeof(why), "madvise(MADV_COLLAPSE): %s", strerror(errno));
    munmap(m, len);
    return rc == 0 ? NULL : why;
}

/* thp_collapse: the application's plain-page buffer (not 2 MiB-aligned, so
 * a head and a tail stay on 4 KiB pages) is moved onto huge pages where it
 * holds whole 2 MiB ranges: at registration (sync, both engines), in the
 * background, or not at all (off). Its contents survive, and O_DIRECT
 * blocks that straddle the plain and the huge parts write and read back
 * byte for byte. Loop: 0 sync/uring, 1 sync/threads, 2 background, 3 off. */
START_TEST(t_thp_collapse)
{
    static const char *const mode[] = {"sync", "sync", "background", "off"};
    const char *engine = _i == 1 ? "threads" : "uring", *why;
    if (_i != 1 && !uring_works()) {
        printf("check_posix: t_thp_collapse[%d] skipped: " NO_URING "\n", _i);
        return;
    }
    if (_i != 3 && (why = collapse_works())) {
        printf("check_posix: t_thp_collapse[%d] skipped: this kernel cannot (%s)\n", _i, why);
        return;
    }
    /* a mapping of its own (guard pages either side: no merged neighbours in smaps) */
    size_t maplen = 12 * MiB, len = 6 * MiB;
    char *m = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(m != MAP_FAILED);
    ck_assert_int_eq(mprotect(m, 4096, PROT_NONE), 0);
    ck_assert_int_eq(mprotect(m + maplen - 4096, 4096, PROT_NONE), 0);
    char *A = (char *)(((uintptr_t)m + 4096 + 2 * MiB - 1) & ~(uintptr_t)(2 * MiB - 1));
    char *buf = A + 12 * KiB; /* whole 2 MiB ranges: [A + 2 MiB, A + 6 MiB) */
    tl_fill(buf, len, 61);
    char *copy = xalloc(len);
    memcpy(copy, buf, len);
    /* plain pages, as malloc gives them (the mapping is the buffer's own:
     * what overlaps it is what holds it) */
    ck_assert_int_eq(tl_huge_kb(0, (uintptr_t)buf, len, 0), 0);
    extra_key = "thp_collapse";
    extra_val = mode[_i];
    nxl_agent_t *a = px_agent("px", engine, "1");
    extra_key = NULL;
    static const char *const said[] = {"2 MiB pages: at registration",
                                       "2 MiB pages: at registration",
                                       "2 MiB pages: in the background", "2 MiB pages: off"};
    ck_assert_msg(strstr(engine_line, said[_i]), "%s", engine_line);
    reg_dram(a, buf, len);
    long kb = tl_huge_kb(0, (uintptr_t)buf, len, 0);
    if (_i == 2) /* the background thread: wait for it (no timing asserted) */
        for (uint64_t end = tl_now_ms() + 30000; kb < 4096 && tl_now_ms() < end;
             kb = tl_huge_kb(0, (uintptr_t)buf, len, 0))
            nxl_agent_run_once(a, 20);
    if (_i == 3)
        ck_assert_msg(kb == 0, "thp_collapse=off: %ld kB on huge pages", kb);
    else
        ck_assert_msg(kb == 4096, "thp_collapse=%s: %ld kB of the buffer on huge pages, not the "
                                  "4096 of its two whole 2 MiB ranges", mode[_i], kb);
    ck_assert_msg(first_diff(buf, copy, len) < 0, "the contents changed");
    /* O_DIRECT through both parts: 3 blocks of 1 MiB from the plain head on,
     * read back into the next 3 MiB (huge, then the plain tail) */
    char path[300];
    snprintf(path, sizeof(path), "%s/thp", tdir);
    ck_assert_int_eq(reg_path(a, NXL_FILE, 2, path, "create", 0, 4 * MiB), NXL_SUCCESS);
    memset(buf + 3 * MiB, 0, 3 * MiB);
    write_read_back(a, 2, buf, buf + 3 * MiB, 0, 1 * MiB, 3);
    ck_assert_msg(first_diff(buf, copy, 3 * MiB) < 0, "the written half changed");
    stats_line[0] = 0;
    nxl_agent_destroy(a);
    unsigned long long direct = 0;
    const char *p = strstr(stats_line, "statistics:");
    ck_assert_msg(p && sscanf(p, "statistics: %*u transfers, %*u I/Os (%llu direct", &direct) == 1,
                  "statistics logged: '%s'", stats_line);
    ck_assert_msg(direct == 6, "6 O_DIRECT I/Os: %s", stats_line);
    if (_i == 3)
        ck_assert_msg(strstr(stats_line, "2 MiB pages: none asked"), "%s", stats_line);
    else
        ck_assert_msg(strstr(stats_line, "2 MiB pages: 4194304 of 4194304 bytes"), "%s",
                      stats_line);
    munmap(m, maplen);
    free(copy);
}
END_TEST

/* thp_collapse=background: a region deregistered while the thread works
 * on it is left alone once nxl_mem_deregister returned: memory mapped
 * again at its addresses and written stays on plain pages */
START_TEST(t_thp_dereg)
{
    const char *why = collapse_works();
    if (why) {
        printf("check_posix: t_thp_dereg skipped: this kernel cannot (%s)\n", why);
        return;
    }
    extra_key = "thp_collapse";
    extra_val = "background";
    nxl_agent_t *a = px_agent("px", "threads", "0");
    extra_key = NULL;
    tl_thp_dereg_rounds(a, 4, 2000);
    nxl_agent_destroy(a);
}
END_TEST

/* Transfers posted from a completion callback are submitted together at
 * the end of the loop turn while they are small (one system call for 16
 * reads of 4 KiB), and one by one when large (64 KiB each: the block layer
 * would merge contiguous ones submitted together). Every byte checked;
 * counted by the statistics the backend logs when destroyed. */
typedef struct chain {
    nxl_xfer_t *next[16];
    res_t res[16];
} chain_t;

static void chain_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    chain_t *c = arg;
    ck_assert_int_eq(st, NXL_SUCCESS);
    for (int i = 0; i < 16; i++)
        post(c->next[i], &c->res[i]);
}

START_TEST(t_batch_from_callbacks)
{
    if (!uring_works()) {
        printf("check_posix: t_batch_from_callbacks skipped: " NO_URING "\n");
        return;
    }
    size_t bs = _i ? 64 * KiB : 4 * KiB, total = 17 * bs;
    char path[300];
    snprintf(path, sizeof(path), "%s/batch", tdir);
    char *content = xalloc(total), *buf = xalloc(total);
    tl_fill(content, total, 41);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_eq(pwrite(fd, content, total, 0), (ssize_t)total);
    close(fd);
    nxl_agent_t *a = px_agent("px", "uring", NULL);
    ck_assert_int_eq(reg_path(a, NXL_FILE, 1, path, "r", 0, total), NXL_SUCCESS);
    memset(buf, 0, total);
    reg_dram(a, buf, total);
    static chain_t c;
    memset(&c, 0, sizeof(c));
    for (int i = 0; i < 16; i++)
        c.next[i] = make_blocks(a, NXL_READ, NXL_FILE, 1, buf + (i + 1) * bs, (i + 1) * bs, bs,
                                1, NULL);
    nxl_xfer_t *first = make_blocks(a, NXL_READ, NXL_FILE, 1, buf, 0, bs, 1, NULL);
    ck_assert_int_eq(nxl_xfer_post(first, chain_cb, &c, NULL), NXL_SUCCESS);
    uint64_t end = tl_now_ms() + 10000;
    int done;
    do {
        nxl_agent_run_once(a, 50);
        done = 0;
        for (int i = 0; i < 16; i++)
            done += c.res[i].calls;
    } while (done < 16 && tl_now_ms() < end);
    for (int i = 0; i < 16; i++) {
        ck_assert_int_eq(c.res[i].calls, 1);
        ck_assert_msg(c.res[i].st == NXL_SUCCESS, "read %d: %s", i, c.res[i].why);
    }
    ck_assert_int_lt(first_diff(buf, content, total), 0);
    stats_line[0] = 0;
    nxl_agent_destroy(a);
    unsigned long long xfers, ios, subs;
    const char *p = strstr(stats_line, "statistics:");
    ck_assert_msg(p && sscanf(p, "statistics: %llu transfers, %llu I/Os (%*u direct, %*u "
                                 "buffered, %*u short) in %llu submissions",
                              &xfers, &ios, &subs) == 3,
                  "statistics logged: '%s'", stats_line);
    ck_assert_msg(xfers == 17 && ios == 17, "%s", stats_line);
    if (_i)
        ck_assert_msg(subs >= 17, "64 KiB reads go one by one: %s", stats_line);
    else
        ck_assert_msg(subs <= 3, "4 KiB reads from one callback go together: %s", stats_line);
    free(content);
    free(buf);
}
END_TEST

START_TEST(t_full_fs)
{
    const char *engine = engine_of(_i, "t_full_fs");
    if (!engine)
        return;
    if (geteuid() != 0) {
        printf("check_posix: t_full_fs skipped: mounting a 1 MiB tmpfs needs root\n");
        return;
    }
    char mnt[300], cmd[400];
    snprintf(mnt, sizeof(mnt), "%s/full", tdir);
    ck_assert_int_eq(mkdir(mnt, 0755), 0);
    snprintf(cmd, sizeof(cmd), "mount -t tmpfs -o size=1m tmpfs '%s' 2>&1", mnt);
    if (system(cmd) != 0) {
        printf("check_posix: t_full_fs skipped: mount -t tmpfs failed (no CAP_SYS_ADMIN in "
               "this container?)\n");
        return;
    }
    /* from here on, unmount before asserting */
    nxl_agent_t *a = px_agent("px", engine, NULL);
    char p1[400], p2[400];
    snprintf(p1, sizeof(p1), "%s/kv", mnt);
    snprintf(p2, sizeof(p2), "%s/ok", tdir);
    nxl_status_t s1 = reg_path(a, NXL_FILE, 1, p1, "create", 0, 4 * MiB);
    nxl_status_t s2 = reg_path(a, NXL_FILE, 2, p2, "create", 0, 64 * KiB);
    char *buf = xalloc(3 * MiB);
    tl_fill(buf, 3 * MiB, 11);
    reg_dram(a, buf, 3 * MiB);
    res_t rb = {0}, rs = {0};
    char chk[64 * KiB];
    long diff = 0;
    if (s1 == NXL_SUCCESS && s2 == NXL_SUCCESS) {
        nxl_xfer_t *big = make_blocks(a, NXL_WRITE, NXL_FILE, 1, buf, 0, 2 * MiB, 1, NULL);
        nxl_xfer_t *small = make_blocks(a, NXL_WRITE, NXL_FILE, 2, buf + 2 * MiB, 0, 64 * KiB, 1,
                                        NULL);
        post(big, &rb);
        post(small, &rs);
        tl_run_until(a, &rb.calls, 1, 10000);
        tl_run_until(a, &rs.calls, 1, 10000);
        int fd = open(p2, O_RDONLY);
        diff = pread(fd, chk, sizeof(chk), 0) == (ssize_t)sizeof(chk)
                   ? first_diff(chk, buf + 2 * MiB, sizeof(chk))
                   : 0;
        close(fd);
    }
    nxl_agent_destroy(a);
    snprintf(cmd, sizeof(cmd), "umount '%s'", mnt);
    int um = system(cmd);
    free(buf);
    ck_assert_int_eq(um, 0);
    ck_assert_int_eq(s1, NXL_SUCCESS);
    ck_assert_int_eq(s2, NXL_SUCCESS);
    ck_assert_int_eq(rb.calls, 1);
    ck_assert_int_eq(rb.st, NXL_ERR_BACKEND);
    ck_assert_msg(strstr(rb.why, p1) && strstr(rb.why, "offset") &&
                      strstr(rb.why, strerror(ENOSPC)),
                  "sentence names file, offset and ENOSPC: %s", rb.why);
    ck_assert_int_eq(rs.calls, 1);
    ck_assert_msg(rs.st == NXL_SUCCESS, "%s", rs.why);
    ck_assert_int_lt(diff, 0);
}
END_TEST

/* ------------------------------------------------------- block devices */

static char *blk_body(const char *dev, char *err, size_t cap)
{
    nxl_agent_t *a = px_agent("px", NULL, NULL);
    size_t dsz = 8 * MiB, bs = 256 * KiB, n = 16;
    char *src = xalloc(dsz), *dst = xalloc(dsz), *chk = xalloc(dsz);
    tl_fill(src, dsz, 21);
    memset(dst, 0, dsz);
    reg_dram(a, src, dsz);
    reg_dram(a, dst, dsz);
    char *fail = NULL;
#define BFAIL(...)                                                                                 \
    do {                                                                                           \
        snprintf(err, cap, __VA_ARGS__);                                                           \
        fail = err;                                                                                \
        goto out;                                                                                  \
    } while (0)
    /* query: it exists and has the device's size */
    char meta[300];
    snprintf(meta, sizeof(meta), "path=%s", dev);
    nxl_desc_t qd = {.meta = meta, .meta_len = strlen(meta)};
    nxl_query_t q;
    if (nxl_mem_query(a, NXL_BLK, &qd, 1, NULL, &q) != NXL_SUCCESS || !q.exists || q.size != dsz)
        BFAIL("query of %s: exists %d size %llu (%s)", dev, q.exists,
              (unsigned long long)q.size, nxl_agent_last_error(a));
    /* past the end of the device: refused */
    if (reg_path(a, NXL_BLK, 1000, dev, "rw", 4 * MiB, 8 * MiB) != NXL_ERR_INVALID_PARAM)
        BFAIL("a BLK range past the device's end was accepted: %s", nxl_agent_last_error(a));
    /* by path, O_DIRECT */
    if (reg_path(a, NXL_BLK, 1000, dev, "rw,direct", 0, 4 * MiB) != NXL_SUCCESS)
        BFAIL("register %s by path: %s", dev, nxl_agent_last_error(a));
    /* by fd, buffered, the second half */
    int fd = open(dev, O_RDWR);
    if (fd < 0 || reg_fd(a, NXL_BLK, fd, 4 * MiB, 4 * MiB) != NXL_SUCCESS)
        BFAIL("register %s by fd: %s", dev, nxl_agent_last_error(a));
    size_t half = n / 2;
    nxl_xfer_t *w1 = make_blocks(a, NXL_WRITE, NXL_BLK, 1000, src, 0, bs, 16, NULL);
    nxl_xfer_t *w2 = make_blocks(a, NXL_WRITE, NXL_BLK, (uint64_t)fd, src + 4 * MiB, 4 * MiB, bs,
                                 16, NULL);
    nxl_xfer_t *r1 = make_blocks(a, NXL_READ, NXL_BLK, 1000, dst, 0, bs, 16, NULL);
    nxl_xfer_t *r2 = make_blocks(a, NXL_READ, NXL_BLK, (uint64_t)fd, dst + 4 * MiB, 4 * MiB, bs,
                                 16, NULL);
    (void)half;
    res_t a1, a2;
    post(w1, &a1);
    post(w2, &a2);
    tl_run_until(a, &a1.calls, 1, 10000);
    tl_run_until(a, &a2.calls, 1, 10000);
    if (a1.st != NXL_SUCCESS || a2.st != NXL_SUCCESS)
        BFAIL("writes to %s: %.200s / %.200s", dev, a1.why, a2.why);
    post(r1, &a1);
    post(r2, &a2);
    tl_run_until(a, &a1.calls, 1, 10000);
    tl_run_until(a, &a2.calls, 1, 10000);
    if (a1.st != NXL_SUCCESS || a2.st != NXL_SUCCESS)
        BFAIL("reads from %s: %.200s / %.200s", dev, a1.why, a2.why);
    long d = first_diff(dst, src, dsz);
    if (d >= 0)
        BFAIL("%s read back differs at byte %ld", dev, d);
    /* and the device holds it, read independently */
    if (pread(fd, chk, dsz, 0) != (ssize_t)dsz || (d = first_diff(chk, src, dsz)) >= 0)
        BFAIL("%s content differs at byte %ld", dev, d);
    close(fd);
out:
    nxl_agent_destroy(a);
    free(src);
    free(dst);
    free(chk);
    return fail;
#undef BFAIL
}

START_TEST(t_blk_loop)
{
    if (geteuid() != 0) {
        printf("check_posix: t_blk_loop skipped: attaching a loop device needs root\n");
        return;
    }
    char back[300], cmd[400], dev[64] = "";
    snprintf(back, sizeof(back), "%s/blk.img", tdir);
    int fd = open(back, O_RDWR | O_CREAT, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 8 * MiB), 0);
    close(fd);
    snprintf(cmd, sizeof(cmd), "losetup -f --show '%s' 2>/dev/null", back);
    FILE *p = popen(cmd, "r");
    if (!p || !fgets(dev, sizeof(dev), p)) {
        if (p)
            pclose(p);
        printf("check_posix: t_blk_loop skipped: losetup -f --show failed (no free loop "
               "device?)\n");
        return;
    }
    int prc = pclose(p);
    dev[strcspn(dev, "\n")] = 0;
    if (prc != 0 || strncmp(dev, "/dev/loop", 9)) {
        printf("check_posix: t_blk_loop skipped: losetup answered '%s'\n", dev);
        return;
    }
    char err[600];
    char *fail = blk_body(dev, err, sizeof(err));
    snprintf(cmd, sizeof(cmd), "losetup -d '%s'", dev);
    int det = system(cmd);
    ck_assert_msg(!fail, "%s", fail);
    ck_assert_msg(det == 0, "losetup -d %s failed", dev);
}
END_TEST

/* ----------------------------------------------------------------- query */

START_TEST(t_query)
{
    nxl_agent_t *a = px_agent("px", NULL, NULL);
    char path[300], meta[400], missing[400];
    snprintf(path, sizeof(path), "%s/q", tdir);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    ck_assert_int_eq(ftruncate(fd, 123457), 0);
    snprintf(meta, sizeof(meta), "path=%s", path);
    snprintf(missing, sizeof(missing), "path=%s/nope", tdir);
    int closed = open("/dev/null", O_RDONLY);
    close(closed);
    nxl_desc_t d[4] = {
        {.meta = meta, .meta_len = strlen(meta)},
        {.meta = missing, .meta_len = strlen(missing)},
        {.dev_id = (uint64_t)fd},
        {.dev_id = (uint64_t)closed},
    };
    nxl_query_t q[4];
    memset(q, 0xff, sizeof(q));
    ck_assert_int_eq(nxl_mem_query(a, NXL_FILE, d, 4, NULL, q), NXL_SUCCESS);
    ck_assert_int_eq(q[0].exists, 1);
    ck_assert_uint_eq(q[0].size, 123457);
    ck_assert_int_eq(q[1].exists, 0);
    ck_assert_uint_eq(q[1].size, 0);
    ck_assert_int_eq(q[2].exists, 1);
    ck_assert_uint_eq(q[2].size, 123457);
    ck_assert_int_eq(q[3].exists, 0);
    /* nothing got created or registered */
    ck_assert_int_ne(access(missing + 5, F_OK), 0);
    nxl_prepped_t *pp;
    nxl_desc_t pd = {.addr = 0, .len = 1, .dev_id = (uint64_t)fd};
    ck_assert_int_eq(nxl_prep(a, nxl_agent_name(a), NXL_FILE, &pd, 1, &pp), NXL_ERR_NOT_FOUND);
    /* DRAM is not something to query; nor is OBJ served */
    ck_assert_int_eq(nxl_mem_query(a, NXL_DRAM, d, 1, NULL, q), NXL_ERR_NOT_SUPPORTED);
    ck_assert_int_eq(nxl_mem_query(a, NXL_OBJ, d, 1, NULL, q), NXL_ERR_NOT_SUPPORTED);
    ck_assert_int_eq(nxl_mem_query(a, NXL_FILE, NULL, 1, NULL, q), NXL_ERR_INVALID_PARAM);
    /* a path that cannot be looked at (a loop of links) is not "missing":
     * refused, with the path and the reason */
    char la[300], lb[300], lmeta[400];
    snprintf(la, sizeof(la), "%s/loop_a", tdir);
    snprintf(lb, sizeof(lb), "%s/loop_b", tdir);
    ck_assert(symlink(lb, la) == 0 && symlink(la, lb) == 0);
    snprintf(lmeta, sizeof(lmeta), "path=%s", la);
    nxl_desc_t ld = {.meta = lmeta, .meta_len = strlen(lmeta)};
    ck_assert_int_eq(nxl_mem_query(a, NXL_FILE, &ld, 1, NULL, q), NXL_ERR_BACKEND);
    ck_sentence(nxl_agent_last_error(a), "cannot query");
    ck_sentence(nxl_agent_last_error(a), "loop_a");
    unlink(la);
    unlink(lb);
    close(fd);
    nxl_agent_destroy(a);
}
END_TEST

/* ------------------------------------------------- many, teardown, peers */

/* 64 transfers of 4 blocks at once; [2]: a ring of 8 entries, so that the
 * 256 reads and writes are submitted in chunks and refilled as they end;
 * [3]: with the agent busy polling (the engine watches its CQ ring);
 * [4]: completions with an interrupt each (coop_taskrun=0, as kernels
 * before 5.19 run) */
START_TEST(t_many_inflight)
{
    const char *engine = _i == 1 ? "threads" : "uring";
    if (_i != 1 && !uring_works()) {
        printf("check_posix: t_many_inflight[%d] skipped: " NO_URING "\n", _i);
        return;
    }
    if (_i == 2) {
        extra_key = "queue_depth";
        extra_val = "8";
    }
    if (_i == 3)
        px_busy_poll = 500;
    if (_i == 4) {
        extra_key = "coop_taskrun";
        extra_val = "0";
    }
    nxl_agent_t *a = px_agent("px", engine, NULL);
    extra_key = NULL;
    px_busy_poll = 0;
    if (_i == 2)
        ck_assert_msg(strstr(engine_line, "(8 entries"), "%s", engine_line);
    if (_i == 3)
        ck_assert_msg(strstr(engine_line, "busy polling the CQ"), "%s", engine_line);
    if (_i == 4)
        ck_assert_msg(!strstr(engine_line, "cooperative"), "%s", engine_line);
    enum { NX = 64, NB = 4 };
    size_t bs = 64 * KiB, per = NB * bs, total = NX * per;
    char *src = xalloc(total), *dst = xalloc(total);
    tl_fill(src, total, 31);
    memset(dst, 0, total);
    reg_dram(a, src, total);
    reg_dram(a, dst, total);
    char path[300];
    snprintf(path, sizeof(path), "%s/many", tdir);
    ck_assert_int_eq(reg_path(a, NXL_FILE, 1, path, "create", 0, total), NXL_SUCCESS);
    nxl_xfer_t *w[NX], *r[NX];
    res_t rw[NX], rr[NX];
    for (int i = 0; i < NX; i++) {
        w[i] = make_blocks(a, NXL_WRITE, NXL_FILE, 1, src + i * per, (uint64_t)i * per, bs, NB,
                           NULL);
        r[i] = make_blocks(a, NXL_READ, NXL_FILE, 1, dst + i * per, (uint64_t)i * per, bs, NB,
                           NULL);
    }
    static int wdone, rdone;
    wdone = rdone = 0;
    for (int i = 0; i < NX; i++)
        post(w[i], &rw[i]);
    for (int i = 0; i < NX; i++)
        ck_assert_int_eq(nxl_xfer_status(w[i]), NXL_IN_PROG);
    uint64_t end = tl_now_ms() + 20000;
    do {
        nxl_agent_run_once(a, 50);
        wdone = 0;
        for (int i = 0; i < NX; i++)
            wdone += rw[i].calls;
    } while (wdone < NX && tl_now_ms() < end);
    for (int i = 0; i < NX; i++) {
        ck_assert_int_eq(rw[i].calls, 1);
        ck_assert_msg(rw[i].st == NXL_SUCCESS, "write %d: %s", i, rw[i].why);
    }
    for (int i = 0; i < NX; i++)
        post(r[i], &rr[i]);
    do {
        nxl_agent_run_once(a, 50);
        rdone = 0;
        for (int i = 0; i < NX; i++)
            rdone += rr[i].calls;
    } while (rdone < NX && tl_now_ms() < end);
    for (int i = 0; i < NX; i++) {
        ck_assert_int_eq(rr[i].calls, 1);
        ck_assert_msg(rr[i].st == NXL_SUCCESS, "read %d: %s", i, rr[i].why);
    }
    long d = first_diff(dst, src, total);
    ck_assert_msg(d < 0, "64 transfers: data differs at byte %ld", d);
    nxl_agent_destroy(a);
    free(src);
    free(dst);
}
END_TEST

static int cancel_calls, cancel_other;

static void cancel_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    if (st == NXL_ERR_CANCELED)
        cancel_calls++;
    else
        cancel_other++;
    int *mine = arg;
    (*mine)++;
}

static char *poison_base;
static size_t poison_len;
static int tear_mine[64];

/* a CANCELED callback may free its buffer: here it overwrites it, and
 * nothing may write into it afterwards */
static void poison_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    size_t i = (size_t)((int *)arg - tear_mine);
    memset(poison_base + i * poison_len, 0xee, poison_len);
    cancel_cb(f, st, arg);
}

/* Agent teardown with I/O in flight: every callback once, CANCELED, and
 * only when the I/O has stopped. loop index: bit 0 engine, bit 1 reads
 * (O_DIRECT, from a file written before) whose callbacks overwrite their
 * buffers, which must then stay as the callbacks left them. */
START_TEST(t_teardown_inflight)
{
    const char *engine = _i & 1 ? "threads" : "uring";
    int reads = !!(_i & 2);
    if (!(_i & 1) && !uring_works()) {
        printf("check_posix: t_teardown_inflight[%d] skipped: " NO_URING "\n", _i);
        return;
    }
    nxl_agent_t *a = px_agent("px", engine, reads ? "1" : NULL);
    enum { NX = 64 };
    size_t per = 1 * MiB, total = NX * per;
    char *buf = xalloc(total);
    memset(buf, 0x5a, total);
    reg_dram(a, buf, total);
    char path[300];
    snprintf(path, sizeof(path), "%s/teardown", tdir);
    ck_assert_int_eq(reg_path(a, NXL_FILE, 1, path, "create", 0, total), NXL_SUCCESS);
    if (reads) {
        nxl_xfer_t *w = make_blocks(a, NXL_WRITE, NXL_FILE, 1, buf, 0, per, NX, NULL);
        res_t res;
        post(w, &res);
        wait_res(a, &res, 20000);
        ck_assert_int_eq(res.st, NXL_SUCCESS);
        nxl_xfer_release(w);
    }
    int *mine = tear_mine;
    cancel_calls = cancel_other = 0;
    poison_base = buf;
    poison_len = per;
    for (int i = 0; i < NX; i++) {
        mine[i] = 0;
        nxl_xfer_t *x = make_blocks(a, reads ? NXL_READ : NXL_WRITE, NXL_FILE, 1, buf + i * per,
                                    (uint64_t)i * per, per / 4, 4, NULL);
        ck_assert_int_eq(nxl_xfer_post(x, reads ? poison_cb : cancel_cb, &mine[i], NULL),
                         NXL_SUCCESS);
    }
    nxl_agent_destroy(a);
    ck_assert_int_eq(cancel_calls, NX);
    ck_assert_int_eq(cancel_other, 0);
    for (int i = 0; i < NX; i++)
        ck_assert_int_eq(mine[i], 1);
    if (reads) {
        size_t k = 0;
        while (k < total && (unsigned char)buf[k] == 0xee)
            k++;
        ck_assert_msg(k == total, "byte %zu of the buffers was written after its transfer's "
                      "CANCELED callback", k);
    }
    free(buf);
}
END_TEST

/* Canceling transfers in flight (nxl_future_cancel, and nxl_xfer_release):
 * each callback once, CANCELED, and only when their I/O has ended: the
 * callbacks overwrite their buffers, which must then stay as they left
 * them. The canceled transfers can be posted again and move the data. */
START_TEST(t_cancel_inflight)
{
    const char *engine = engine_of(_i, "t_cancel_inflight");
    if (!engine)
        return;
    nxl_agent_t *a = px_agent("px", engine, "1");
    enum { NX = 64 };
    size_t per = 1 * MiB, total = NX * per;
    char *buf = xalloc(total), *src = xalloc(total);
    tl_fill(src, total, 51);
    reg_dram(a, buf, total);
    reg_dram(a, src, total);
    char path[300];
    snprintf(path, sizeof(path), "%s/cancel", tdir);
    ck_assert_int_eq(reg_path(a, NXL_FILE, 1, path, "create", 0, total), NXL_SUCCESS);
    nxl_xfer_t *w = make_blocks(a, NXL_WRITE, NXL_FILE, 1, src, 0, per, NX, NULL);
    res_t res;
    post(w, &res);
    wait_res(a, &res, 20000);
    ck_assert_int_eq(res.st, NXL_SUCCESS);
    nxl_xfer_release(w);

    memset(buf, 0, total);
    nxl_xfer_t *x[NX];
    nxl_future_t *f[NX];
    cancel_calls = cancel_other = 0;
    poison_base = buf;
    poison_len = per;
    for (int i = 0; i < NX; i++) {
        tear_mine[i] = 0;
        x[i] = make_blocks(a, NXL_READ, NXL_FILE, 1, buf + i * per, (uint64_t)i * per, per / 4,
                           4, NULL);
        ck_assert_int_eq(nxl_xfer_post(x[i], poison_cb, &tear_mine[i], &f[i]), NXL_SUCCESS);
    }
    for (int i = 0; i < NX; i++) {
        if (i % 2) {
            nxl_xfer_release(x[i]);
            x[i] = NULL;
        } else {
            nxl_future_cancel(f[i]);
        }
    }
    int total_calls = 0;
    uint64_t end = tl_now_ms() + 20000;
    while (total_calls < NX && tl_now_ms() < end) {
        nxl_agent_run_once(a, 20);
        total_calls = 0;
        for (int i = 0; i < NX; i++)
            total_calls += tear_mine[i];
    }
    for (int i = 0; i < 10; i++)
        nxl_agent_run_once(a, 10);
    ck_assert_int_eq(cancel_calls, NX);
    ck_assert_int_eq(cancel_other, 0);
    for (int i = 0; i < NX; i++) {
        ck_assert_int_eq(tear_mine[i], 1);
        ck_assert_int_eq(nxl_future_status(f[i]), NXL_ERR_CANCELED);
        nxl_future_release(f[i]);
    }
    size_t k = 0;
    while (k < total && (unsigned char)buf[k] == 0xee)
        k++;
    ck_assert_msg(k == total, "byte %zu was written after its transfer's CANCELED callback", k);
    /* the canceled transfers post again and read what the file holds */
    for (int i = 0; i < NX; i += 2) {
        ck_assert_int_eq(nxl_xfer_status(x[i]), NXL_ERR_CANCELED);
        post(x[i], &res);
        wait_res(a, &res, 10000);
        ck_assert_msg(res.st == NXL_SUCCESS, "%s", res.why);
        ck_assert_int_lt(first_diff(buf + i * per, src + i * per, per), 0);
    }
    nxl_agent_destroy(a);
    free(buf);
    free(src);
}
END_TEST

/* A transfer released while in flight completes CANCELED once; the agent
 * goes on working, and a read of the same range afterwards is clean. */
START_TEST(t_release_inflight)
{
    nxl_agent_t *a = px_agent("px", NULL, NULL);
    size_t total = 8 * MiB;
    char *src = xalloc(total), *dst = xalloc(total);
    tl_fill(src, total, 41);
    memset(dst, 0, total);
    reg_dram(a, src, total);
    reg_dram(a, dst, total);
    char path[300];
    snprintf(path, sizeof(path), "%s/rel", tdir);
    ck_assert_int_eq(reg_path(a, NXL_FILE, 1, path, "create", 0, total), NXL_SUCCESS);
    nxl_xfer_t *x = make_blocks(a, NXL_WRITE, NXL_FILE, 1, src, 0, 1 * MiB, 8, NULL);
    int mine = 0;
    cancel_calls = cancel_other = 0;
    ck_assert_int_eq(nxl_xfer_post(x, cancel_cb, &mine, NULL), NXL_SUCCESS);
    nxl_xfer_release(x);
    ck_assert(tl_run_until(a, &mine, 1, 5000));
    for (int i = 0; i < 20; i++)
        nxl_agent_run_once(a, 5);
    ck_assert_int_eq(mine, 1);
    ck_assert_int_eq(cancel_calls, 1);
    /* write it again for real, read it back */
    nxl_xfer_t *w = make_blocks(a, NXL_WRITE, NXL_FILE, 1, src, 0, 1 * MiB, 8, NULL);
    nxl_xfer_t *r = make_blocks(a, NXL_READ, NXL_FILE, 1, dst, 0, 1 * MiB, 8, NULL);
    res_t res;
    post(w, &res);
    wait_res(a, &res, 10000);
    ck_assert_int_eq(res.st, NXL_SUCCESS);
    post(r, &res);
    wait_res(a, &res, 10000);
    ck_assert_int_eq(res.st, NXL_SUCCESS);
    ck_assert_int_lt(first_diff(dst, src, total), 0);
    /* deregistering while a transfer is in flight keeps its file open */
    post(r, &res);
    nxl_desc_t fdsc = {.addr = 0, .len = total, .dev_id = 1};
    ck_assert_int_eq(nxl_mem_deregister(a, NXL_FILE, &fdsc, 1), NXL_SUCCESS);
    wait_res(a, &res, 10000);
    ck_assert_msg(res.st == NXL_SUCCESS, "%s", res.why);
    nxl_agent_destroy(a);
    free(src);
    free(dst);
}
END_TEST

/* Another agent's files are not reachable: its metadata loads (POSIX gives
 * no connection to it), and a transfer to its FILE regions finds no
 * transport. */
START_TEST(t_other_agent)
{
    nxl_agent_t *a = px_agent("A", NULL, NULL), *b = px_agent("B", NULL, NULL);
    char path[300];
    snprintf(path, sizeof(path), "%s/b", tdir);
    ck_assert_int_eq(reg_path(b, NXL_FILE, 1, path, "create", 0, 64 * KiB), NXL_SUCCESS);
    char *buf = xalloc(64 * KiB);
    reg_dram(a, buf, 64 * KiB);
    void *blob;
    size_t len;
    ck_assert_int_eq(nxl_md_local(b, &blob, &len), NXL_SUCCESS);
    char name[64];
    ck_assert_msg(nxl_md_load(a, blob, len, name, sizeof(name)) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    nxl_free(blob);
    ck_assert_str_eq(name, "B");
    nxl_desc_t ld = {.addr = (uintptr_t)buf, .len = 4096}, rd = {.addr = 0, .len = 4096,
                                                                 .dev_id = 1};
    nxl_prepped_t *lp, *rp;
    ck_assert_int_eq(nxl_prep(a, NULL, NXL_DRAM, &ld, 1, &lp), NXL_SUCCESS);
    ck_assert_int_eq(nxl_prep(a, "B", NXL_FILE, &rd, 1, &rp), NXL_SUCCESS);
    nxl_xfer_t *x;
    ck_assert_int_eq(nxl_xfer_make(a, NXL_WRITE, lp, NULL, rp, NULL, 1, NULL, &x),
                     NXL_ERR_NOT_SUPPORTED);
    nxl_agent_destroy(a);
    nxl_agent_destroy(b);
    free(buf);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("posix");
    TCase *tc = TL_TCASE(s, "posix", 120, setup, teardown, t_engine_params, t_fallback,
             t_reg_errors, t_mem_alloc_host, t_blk_loop, t_query, t_release_inflight,
             t_other_agent);
    tcase_add_loop_test(tc, t_roundtrip, 0, 8);
    tcase_add_loop_test(tc, t_unaligned_direct, 0, 2);
    tcase_add_loop_test(tc, t_read_past_eof, 0, 2);
    tcase_add_loop_test(tc, t_efbig, 0, 2);
    tcase_add_loop_test(tc, t_eio, 0, 2);
    tcase_add_loop_test(tc, t_thp_collapse, 0, 4);
    tcase_add_test(tc, t_thp_dereg);
    tcase_add_loop_test(tc, t_batch_from_callbacks, 0, 2);
    tcase_add_loop_test(tc, t_full_fs, 0, 2);
    tcase_add_loop_test(tc, t_many_inflight, 0, 5);
    tcase_add_loop_test(tc, t_teardown_inflight, 0, 4);
    tcase_add_loop_test(tc, t_cancel_inflight, 0, 2);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int nf = srunner_ntests_failed(r);
    srunner_free(r);
    return nf ? 1 : 0;
}
