/* SPDX-License-Identifier: BSD-3-Clause */
/* Host memory to and from 3FS files: the HF3FS transport (usrbio).
 *
 * Everywhere: nxl_plugins_available() lists HF3FS; without its library the
 * reason says "libhf3fs_api_shared.so not found (...)" and creation fails
 * with NXL_ERR_BACKEND and that sentence.
 *
 * The rest runs against tests/mock_hf3fs.c, a stand-in
 * libhf3fs_api_shared.so that implements usrbio's calls on a local folder
 * (this suite points NXL_HF3FS_LIB at it unless it is set already, and
 * MOCK_HF3FS_ROOT at a folder of $TMPDIR): DRAM -> FILE -> DRAM with every
 * byte checked, from 1 to 10,000 descriptors and 8 B to 16 MiB, through the
 * bounce buffer and without a copy (nxl_mem_alloc'd memory is an iov);
 * errors with their sentences (a closed fd, a file outside the mount, a
 * read past the end, a write-only file, an I/O error, parameters); a ring
 * full; cancel and teardown with I/O in flight (each callback once, no
 * byte written after it); the wait's REALTIME deadline (hf3fs_wait_for_ios
 * sleeps, it is never called with a deadline already past) and a transfer
 * deadline passing while 3FS holds the I/O; an idle agent
 * waking for nothing; every registration undone. None of it has run
 * against a real 3FS. */
#include "config.h"
#define CT_SUITE "check_hf3fs"
#include "cudatest.h"
#define FT_LOCAL NXL_DRAM
#include "filetest.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef NXL_TEST_MOCK_HF3FS
#error "NXL_TEST_MOCK_HF3FS: the path of the stand-in libhf3fs_api_shared.so"
#endif

static char root[256]; /* the stand-in's "mount" */

static nxl_agent_t *mk_agent(const char *name)
{
    return tl_agent_bare(name, 0);
}

/* ------------------------------------------------ everywhere */

START_TEST(t_plugins)
{
    cur_test = "t_plugins";
    nxl_plugin_info_t info[16];
    const nxl_plugin_info_t *g = tl_plugin("HF3FS", info, 16);
    ck_assert_msg(g != NULL, "HF3FS is not listed by nxl_plugins_available()");
    ck_assert_msg(is_sentence(g->reason), "reason: '%s'", g->reason);
#ifndef NXL_TEST_HF3FS
    ck_assert(!g->available);
    ck_assert_msg(strstr(g->reason, "not built"), "reason: '%s'", g->reason);
#else
    ck_assert_uint_eq(g->mem_mask, (1u << NXL_DRAM) | (1u << NXL_FILE));
    if (g->available)
        ck_assert_msg(strstr(g->reason, "usrbio"), "%s", g->reason);
    else
        ck_assert_msg(!strncmp(g->reason, "libhf3fs_api_shared.so ", 23), "reason: '%s'",
                      g->reason);
#endif
    printf("check_hf3fs: HF3FS %s: %s\n", g->available ? "available" : "not available",
           g->reason);
    nxl_agent_t *a = mk_agent("p");
    nxl_status_t st = nxl_backend_create(a, "HF3FS", NULL, 0, NULL);
    if (g->available) {
        ck_assert_msg(st == NXL_SUCCESS, "%s", nxl_agent_last_error(a));
    } else {
        ck_assert(st != NXL_SUCCESS);
        ck_sentence(nxl_agent_last_error(a), "HF3FS");
    }
    nxl_agent_destroy(a);
}
END_TEST

/* without the library (the name usrbio's is installed under, or a path in
 * NXL_HF3FS_LIB): listed with the reason, refused with it */
START_TEST(t_absent)
{
    cur_test = "t_absent";
#ifndef NXL_TEST_HF3FS
    skip("built without HF3FS");
#else
    const char *cases[][2] = {
        {"", "libhf3fs_api_shared.so not found (libhf3fs_api_shared.so: cannot open shared "
             "object file"},
        {"/nonexistent/libhf3fs_api_shared.so", "libhf3fs_api_shared.so not found "
                                                "(/nonexistent/libhf3fs_api_shared.so"},
    };
    if (!own_process_env("NXL_HF3FS_LIB", cases[_i][0]))
        return;
    nxl_plugin_info_t info[16];
    const nxl_plugin_info_t *g = tl_plugin("HF3FS", info, 16);
    ck_assert(g);
    if (!*cases[_i][0] && g->available) {
        skip("a libhf3fs_api_shared.so is installed here");
        return;
    }
    ck_assert(!g->available);
    ck_assert_msg(strstr(g->reason, cases[_i][1]), "reason: '%s'", g->reason);
    printf("check_hf3fs: %s\n", g->reason);
    nxl_agent_t *a = mk_agent("n");
    ck_assert_int_eq(nxl_backend_create(a, "HF3FS", NULL, 0, NULL), NXL_ERR_BACKEND);
    ck_sentence(nxl_agent_last_error(a), "libhf3fs_api_shared.so not found");
    ck_sentence(nxl_agent_last_error(a), "NXL_HF3FS_LIB");
    /* parameters are checked before anything is loaded */
    nxl_param_t p = {"entries", "0"};
    ck_assert_int_eq(nxl_backend_create(a, "HF3FS", &p, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "entries");
    nxl_agent_destroy(a);
#endif
}
END_TEST

#ifdef NXL_TEST_HF3FS

/* ------------------------------------------------ against the stand-in */

static void (*mock_counts)(int *, int *, int *, long *, long *, long *);
static int (*mock_is_iov)(const void *, size_t);

static int need_mock(void)
{
    const char *lib = getenv("NXL_HF3FS_LIB");
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
    *(void **)&mock_counts = h ? dlsym(h, "mock_hf3fs_counts") : NULL;
    *(void **)&mock_is_iov = h ? dlsym(h, "mock_hf3fs_is_iov") : NULL;
    if (!mock_counts || !mock_is_iov) {
        skip("NXL_HF3FS_LIB is not the stand-in (tests/mock_hf3fs.c)");
        return 0;
    }
    nxl_plugin_info_t info[16];
    const nxl_plugin_info_t *g = tl_plugin("HF3FS", info, 16);
    ck_assert_msg(g && g->available, "HF3FS with the stand-in: %s", g ? g->reason : "not listed");
    return 1;
}

typedef struct counts {
    int iovs, rings, fds;
    long waits, past, ios;
} counts_t;

static counts_t counts(void)
{
    counts_t c;
    mock_counts(&c.iovs, &c.rings, &c.fds, &c.waits, &c.past, &c.ios);
    return c;
}

static void check_counts_zero(void)
{
    counts_t c = counts();
    ck_assert_msg(c.iovs == 0 && c.rings == 0 && c.fds == 0, "left registered: %d iovs, %d "
                  "rings, %d fds", c.iovs, c.rings, c.fds);
    ck_assert_msg(c.past == 0, "hf3fs_wait_for_ios was called %ld times with its deadline "
                  "already past", c.past);
}

static nxl_agent_t *hf_agent(const char *name, const nxl_param_t *p, size_t n)
{
    nxl_agent_t *a = mk_agent(name);
    nxl_status_t st = nxl_backend_create(a, "HF3FS", p, n, NULL);
    ck_assert_msg(st == NXL_SUCCESS, "HF3FS: %s", nxl_agent_last_error(a));
    return a;
}

/* a file in the stand-in's mount (or @p dir), @p size bytes, unlinked */
static int file_in(const char *dir, size_t size, int flags)
{
    return ft_file(dir, "kv-", size, flags);
}

static const struct {
    size_t n, blk;
} shapes[] = {
    {1, 8}, {10000, 8}, {1000, 4 * KiB}, {64, 256 * KiB}, {3, 1 * MiB + 3}, {1, 16 * MiB},
};

/* DRAM -> FILE (reversed blocks) -> DRAM, every byte checked after each
 * step, at a buffer offset of 64 B and a file offset of 12,289 B; through
 * the bounce buffer (malloc'd memory), or (_i odd of the second loop) with
 * memory from nxl_mem_alloc, which is an iov: no copy. */
static void roundtrip(size_t n, size_t blk, int alloc, uint32_t seed)
{
    size_t len = n * blk;
    const size_t voff = 64, foff = 3 * 4096 + 1;
    char mnt[300];
    snprintf(mnt, sizeof(mnt), "%s", root);
    nxl_param_t p = {"mount", mnt};
    nxl_agent_t *a = hf_agent("r", &p, 1);
    unsigned char *src = hmalloc(len), *tmp = hmalloc(len + 64);
    tl_fill(src, len, seed);
    char *va, *vb;
    if (alloc) {
        ck_assert_msg(nxl_mem_alloc(a, NXL_DRAM, len + voff, 0, (void **)&va) == NXL_SUCCESS,
                      "%s", nxl_agent_last_error(a));
        ck_assert(nxl_mem_alloc(a, NXL_DRAM, len + voff, 0, (void **)&vb) == NXL_SUCCESS);
        ck_assert_msg(mock_is_iov(va, len + voff), "nxl_mem_alloc's memory is not an iov");
    } else {
        va = hmalloc(len + voff);
        vb = hmalloc(len + voff);
        ft_reg(a, NXL_DRAM, (uintptr_t)va, len + voff, 0);
        ft_reg(a, NXL_DRAM, (uintptr_t)vb, len + voff, 0);
        ck_assert(!mock_is_iov(va, 1));
    }
    memcpy(va + voff, src, len);
    memset(vb, 0, len + voff);
    int fd = file_in(root, 0, O_RDWR);
    ft_reg(a, NXL_FILE, 0, foff + len, (uint64_t)fd);

    nxl_xfer_t *w = NULL, *r = NULL;
    ft_write_read(a, "HF3FS", va + voff, vb + voff, fd, foff, blk, n, src, tmp, &w, &r);
    long d = first_diff(vb + voff, src, len);
    ck_assert_msg(d < 0, "FILE -> DRAM %zu x %zu: byte %ld differs", n, blk, d);
    for (size_t i = 0; i < voff; i++)
        ck_assert_int_eq(vb[i], 0);

    nxl_xfer_release(w);
    nxl_xfer_release(r);
    if (alloc) {
        ck_assert_int_eq(nxl_mem_free(a, va), NXL_SUCCESS);
        ck_assert_int_eq(nxl_mem_free(a, vb), NXL_SUCCESS);
    }
    nxl_agent_destroy(a);
    check_counts_zero();
    close(fd);
    if (!alloc) {
        free(va);
        free(vb);
    }
    free(src);
    free(tmp);
}

START_TEST(t_roundtrip)
{
    cur_test = "t_roundtrip";
    if (need_mock())
        roundtrip(shapes[_i].n, shapes[_i].blk, 0, (uint32_t)_i + 7);
}
END_TEST

START_TEST(t_roundtrip_alloc)
{
    cur_test = "t_roundtrip_alloc";
    if (need_mock())
        roundtrip(shapes[_i].n, shapes[_i].blk, 1, (uint32_t)_i + 70);
}
END_TEST

/* the mount found from the first file: no mount parameter; memory
 * allocated before it is known is the engine's (declined), and still moves */
START_TEST(t_mount_found)
{
    cur_test = "t_mount_found";
    if (!need_mock())
        return;
    nxl_agent_t *a = hf_agent("m", NULL, 0);
    const size_t len = 256 * KiB;
    char *buf = NULL;
    ck_assert(nxl_mem_alloc(a, NXL_DRAM, len, 0, (void **)&buf) == NXL_SUCCESS);
    ck_assert(!mock_is_iov(buf, len)); /* no mount yet: declined, the engine's */
    tl_fill(buf, len, 3);
    char path[400], meta[450];
    snprintf(path, sizeof(path), "%s/by-path.bin", root);
    snprintf(meta, sizeof(meta), "path=%s;mode=create", path);
    nxl_desc_t fd_desc = {.addr = 0, .len = len, .dev_id = 1, .meta = meta,
                          .meta_len = strlen(meta)};
    ck_assert_msg(nxl_mem_register(a, NXL_FILE, &fd_desc, 1, NULL) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    nxl_desc_t md = {.addr = (uintptr_t)buf, .len = len}, fdsc = {.addr = 0, .len = len,
                                                                 .dev_id = 1, .meta = meta,
                                                                 .meta_len = strlen(meta)};
    nxl_prepped_t *lp = NULL, *rp = NULL;
    nxl_xfer_t *x = NULL;
    ck_assert(nxl_prep(a, NULL, NXL_DRAM, &md, 1, &lp) == NXL_SUCCESS);
    ck_assert_msg(nxl_prep(a, "m", NXL_FILE, &fdsc, 1, &rp) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    ck_assert(nxl_xfer_make(a, NXL_WRITE, lp, NULL, rp, NULL, 1, NULL, &x) == NXL_SUCCESS);
    res_t r;
    ft_run(a, x, &r);
    ck_assert_msg(r.st == NXL_SUCCESS, "%s", r.why);
    unsigned char *t = hmalloc(len);
    int fd = open(path, O_RDONLY);
    ck_assert(fd >= 0 && pread(fd, t, len, 0) == (ssize_t)len);
    ck_assert(tl_check(t, len, 3) < 0);
    close(fd);
    /* now the mount is known: nxl_mem_alloc gives an iov */
    char *b2 = NULL;
    ck_assert(nxl_mem_alloc(a, NXL_DRAM, len, 0, (void **)&b2) == NXL_SUCCESS);
    ck_assert(mock_is_iov(b2, len));
    nxl_xfer_release(x);
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
    ck_assert_int_eq(nxl_mem_free(a, buf), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_free(a, b2), NXL_SUCCESS);
    nxl_agent_destroy(a);
    check_counts_zero();
    unlink(path);
    free(t);
}
END_TEST

/* Each error with its status and sentence. */
START_TEST(t_errors)
{
    cur_test = "t_errors";
    if (!need_mock())
        return;
    char mnt[300];
    snprintf(mnt, sizeof(mnt), "%s", root);
    nxl_param_t mp = {"mount", mnt};
    nxl_agent_t *a = hf_agent("e", &mp, 1);
    const size_t len = 64 * KiB;
    char *v = hmalloc(len);
    memset(v, 0x5a, len);
    ft_reg(a, NXL_DRAM, (uintptr_t)v, len, 0);

    ft_err_closed_fd(a, file_in(root, len, O_RDWR), len);

    /* a file outside the 3FS mount */
    int ofd = file_in(ft_tmpdir(), len, O_RDWR);
    nxl_desc_t d = {.addr = 0, .len = len, .dev_id = (uint64_t)ofd};
    ck_assert_int_eq(nxl_mem_register(a, NXL_FILE, &d, 1, NULL), NXL_ERR_NOT_SUPPORTED);
    ck_sentence(nxl_agent_last_error(a), "is not on a 3FS mount");
    close(ofd);

    int sfd = file_in(root, 4096, O_RDWR);
    ft_err_short(a, v, sfd, len);
    int wfd = file_in(root, len, O_WRONLY);
    ft_reg(a, NXL_FILE, 0, len, (uint64_t)wfd);
    ft_err_write_only(a, v, wfd);

    /* an I/O error in the middle of a transfer of 8 chunks; then short
     * results, continued: every byte arrives */
    nxl_param_t p[2] = {{"mount", mnt}, {"chunk", "8192"}};
    nxl_agent_t *b = hf_agent("e2", p, 2);
    nxl_xfer_t *x = NULL;
    res_t r;
    int ffd = file_in(root, len, O_RDWR);
    ft_reg(b, NXL_DRAM, (uintptr_t)v, len, 0);
    ft_reg(b, NXL_FILE, 0, len, (uint64_t)ffd);
    ck_assert(ft_mk_xfer(b, NXL_WRITE, v, ffd, 0, len, 1, 0, &x) == NXL_SUCCESS);
    setenv("MOCK_HF3FS_FAIL_OFFSET", "16384", 1);
    ft_run(b, x, &r);
    unsetenv("MOCK_HF3FS_FAIL_OFFSET");
    ck_assert_int_eq(r.st, NXL_ERR_BACKEND);
    ck_sentence(r.why, "HF3FS: write to fd");
    ck_sentence(r.why, "offset 16384");
    ck_sentence(r.why, strerror(EIO));
    setenv("MOCK_HF3FS_MAX_IO", "1000", 1);
    memset(v, 0x77, len);
    ft_run(b, x, &r);
    unsetenv("MOCK_HF3FS_MAX_IO");
    ck_assert_msg(r.st == NXL_SUCCESS, "%s", r.why);
    ft_check_file(ffd, len, 0x77);
    nxl_xfer_release(x);
    nxl_agent_destroy(b);
    close(ffd);

    /* nxl_mem_query by fd */
    nxl_query_t q;
    nxl_desc_t qd = {.dev_id = (uint64_t)sfd};
    ck_assert(nxl_mem_query(a, NXL_FILE, &qd, 1, NULL, &q) == NXL_SUCCESS);
    ck_assert(q.exists && q.size == 4096);

    /* parameters */
    struct {
        nxl_param_t p;
        const char *word;
    } bad[] = {
        {{"entries", "0"}, "entries"},
        {{"entries", "5000"}, "entries"},
        {{"chunk", "1K"}, "chunk"},
        {{"wait", "0"}, "wait"},
        {{"numa", "x"}, "numa"},
        {{"colour", "blue"}, "colour"},
        {{"mount", "/nonexistent/3fs"}, "hf3fs_iovcreate"},
    };
    nxl_agent_t *c = mk_agent("e3");
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        nxl_status_t st = nxl_backend_create(c, "HF3FS", &bad[i].p, 1, NULL);
        ck_assert_msg(st != NXL_SUCCESS, "%s=%s accepted", bad[i].p.key, bad[i].p.value);
        ck_sentence(nxl_agent_last_error(c), bad[i].word);
    }
    nxl_agent_destroy(c);

    nxl_agent_destroy(a);
    check_counts_zero();
    close(sfd);
    close(wfd);
    free(v);
}
END_TEST

/* A ring that fills up (3FS shares it with nobody here, the stand-in says
 * it is full at 2 slots): the I/O waits for completions, nothing is lost.
 * A ring full with nothing of ours in it, and hf3fs_prep_io refusing an
 * I/O, fail the transfer, never inside its post. */
START_TEST(t_ring_full)
{
    cur_test = "t_ring_full";
    if (!need_mock())
        return;
    char mnt[300];
    snprintf(mnt, sizeof(mnt), "%s", root);
    nxl_param_t p[2] = {{"mount", mnt}, {"entries", "4"}};
    nxl_agent_t *a = hf_agent("f", p, 2);
    const size_t n = 100, blk = 4 * KiB, len = n * blk;
    char *src = hmalloc(len), *dst = hmalloc(len);
    tl_fill(src, len, 11);
    memset(dst, 0, len);
    ft_reg(a, NXL_DRAM, (uintptr_t)src, len, 0);
    ft_reg(a, NXL_DRAM, (uintptr_t)dst, len, 0);
    int fd = file_in(root, len, O_RDWR);
    ft_reg(a, NXL_FILE, 0, len, (uint64_t)fd);
    setenv("MOCK_HF3FS_RING_FULL", "2", 1);
    nxl_xfer_t *w = NULL, *r = NULL;
    ck_assert(ft_mk_xfer(a, NXL_WRITE, src, fd, 0, blk, n, 0, &w) == NXL_SUCCESS);
    ck_assert(ft_mk_xfer(a, NXL_READ, dst, fd, 0, blk, n, 0, &r) == NXL_SUCCESS);
    res_t res;
    ft_run(a, w, &res);
    ck_assert_msg(res.st == NXL_SUCCESS, "%s", res.why);
    ft_run(a, r, &res);
    ck_assert_msg(res.st == NXL_SUCCESS, "%s", res.why);
    ck_assert(tl_check(dst, len, 11) < 0);
    /* full with none of ours in it: nothing would free a slot; failed,
     * on a later turn than the post's */
    setenv("MOCK_HF3FS_RING_FULL", "-1", 1);
    ft_run(a, w, &res);
    ck_assert_int_eq(res.st, NXL_ERR_BACKEND);
    ck_sentence(res.why, "ring full with none of this transport's I/O in it");
    unsetenv("MOCK_HF3FS_RING_FULL");
    /* hf3fs_prep_io refusing an I/O: the same, with its errno */
    setenv("MOCK_HF3FS_PREP_FAIL", "22", 1);
    ft_run(a, r, &res);
    unsetenv("MOCK_HF3FS_PREP_FAIL");
    ck_assert_int_eq(res.st, NXL_ERR_BACKEND);
    ck_sentence(res.why, "hf3fs_prep_io");
    ck_sentence(res.why, "errno 22");
    /* and the next post works */
    memset(dst, 0, len);
    ft_run(a, r, &res);
    ck_assert_msg(res.st == NXL_SUCCESS, "%s", res.why);
    ck_assert(tl_check(dst, len, 11) < 0);
    nxl_xfer_release(w);
    nxl_xfer_release(r);
    nxl_agent_destroy(a);
    check_counts_zero();
    close(fd);
    free(src);
    free(dst);
}
END_TEST

/* 16 READs of 4 x 256 KiB, each I/O taking 20 ms in the stand-in, canceled
 * or released at once, or the agent destroyed: each callback once, and no
 * byte written into the buffer after its callback (which marks it). */
enum { NX = 16 };

static void inflight(int teardown, int alloc)
{
    char mnt[300];
    snprintf(mnt, sizeof(mnt), "%s", root);
    nxl_param_t p[3] = {{"mount", mnt}, {"chunk", "65536"}, {"entries", "8"}};
    nxl_agent_t *a = hf_agent("t", p, 3);
    ft_tear_len = 1 * MiB;
    size_t total = NX * ft_tear_len;
    if (alloc) {
        ck_assert(nxl_mem_alloc(a, NXL_DRAM, total, 0, (void **)&ft_tear_v) == NXL_SUCCESS);
    } else {
        ft_tear_v = hmalloc(total);
        ft_reg(a, NXL_DRAM, (uintptr_t)ft_tear_v, total, 0);
    }
    int fd = file_in(root, 0, O_RDWR);
    ft_fill_file(fd, ft_tear_len, 0x11);
    ft_reg(a, NXL_FILE, 0, ft_tear_len, (uint64_t)fd);
    nxl_xfer_t *x[NX];
    nxl_future_t *f[NX];
    setenv("MOCK_HF3FS_DELAY_MS", "20", 1);
    ft_tear_post(a, fd, NX, teardown, x, f);
    nxl_agent_run_once(a, 30); /* some I/O with the stand-in's daemon */
    ft_tear_end(a, NX, teardown, x, f);
    unsetenv("MOCK_HF3FS_DELAY_MS");
    ct_check_marked((unsigned char *)ft_tear_v, total);
    if (!teardown) {
        if (alloc)
            ck_assert_int_eq(nxl_mem_free(a, ft_tear_v), NXL_SUCCESS);
        nxl_agent_destroy(a);
    }
    check_counts_zero();
    close(fd);
    if (!alloc)
        free(ft_tear_v);
}

START_TEST(t_cancel_inflight)
{
    cur_test = "t_cancel_inflight";
    if (need_mock())
        inflight(0, _i);
}
END_TEST

START_TEST(t_teardown_inflight)
{
    cur_test = "t_teardown_inflight";
    if (need_mock())
        inflight(1, 0);
}
END_TEST

/* The worker's deadline is REALTIME: with each I/O taking 300 ms and
 * wait=50ms, hf3fs_wait_for_ios sleeps in slices of 50 ms (a handful of
 * calls), never called with its deadline already past (a deadline taken
 * from CLOCK_MONOTONIC would be, and the worker would spin). A transfer
 * deadline passing meanwhile completes it with NXL_ERR_TIMEOUT once the
 * I/O is back. */
START_TEST(t_deadline)
{
    cur_test = "t_deadline";
    if (!need_mock())
        return;
    char mnt[300];
    snprintf(mnt, sizeof(mnt), "%s", root);
    nxl_param_t p[2] = {{"mount", mnt}, {"wait", "50ms"}};
    nxl_agent_t *a = hf_agent("d", p, 2);
    const size_t len = 64 * KiB;
    char *v = hmalloc(len);
    memset(v, 0x3c, len);
    ft_reg(a, NXL_DRAM, (uintptr_t)v, len, 0);
    int fd = file_in(root, len, O_RDWR);
    ft_reg(a, NXL_FILE, 0, len, (uint64_t)fd);
    nxl_xfer_t *x = NULL;
    ck_assert(ft_mk_xfer(a, NXL_WRITE, v, fd, 0, len, 1, 0, &x) == NXL_SUCCESS);
    counts_t c0 = counts();
    setenv("MOCK_HF3FS_DELAY_MS", "300", 1);
    res_t r;
    uint64_t t0 = tl_now_ms();
    ft_run(a, x, &r);
    uint64_t took = tl_now_ms() - t0;
    unsetenv("MOCK_HF3FS_DELAY_MS");
    ck_assert_msg(r.st == NXL_SUCCESS, "%s", r.why);
    counts_t c1 = counts();
    long w = c1.waits - c0.waits;
    printf("check_hf3fs: one 300 ms I/O with wait=50ms: %ld hf3fs_wait_for_ios calls, %ld with "
           "the deadline past, %llu ms\n", w, c1.past - c0.past, (unsigned long long)took);
    ck_assert_msg(took >= 290, "done in %llu ms, before the I/O could be",
                  (unsigned long long)took);
    ck_assert_msg(w >= 2 && w <= 20, "%ld hf3fs_wait_for_ios calls for one I/O of 300 ms", w);
    ck_assert_int_eq(c1.past, 0);
    /* a transfer deadline (50 ms) passing while 3FS holds the I/O: TIMEOUT,
     * once the I/O came back (its buffer is free then) */
    nxl_xfer_set_deadline(x, 50);
    setenv("MOCK_HF3FS_DELAY_MS", "300", 1);
    t0 = tl_now_ms();
    ft_run(a, x, &r);
    took = tl_now_ms() - t0;
    unsetenv("MOCK_HF3FS_DELAY_MS");
    ck_assert_int_eq(r.st, NXL_ERR_TIMEOUT);
    ck_assert_msg(took >= 290, "TIMEOUT after %llu ms, before 3FS gave the I/O back",
                  (unsigned long long)took);
    nxl_xfer_set_deadline(x, 0);
    ft_run(a, x, &r);
    ck_assert_msg(r.st == NXL_SUCCESS, "%s", r.why);
    nxl_xfer_release(x);
    nxl_agent_destroy(a);
    check_counts_zero();
    close(fd);
    free(v);
}
END_TEST

/* Idle, before and after traffic: the loop sleeps the whole turn (no
 * timer armed), and the workers do not call hf3fs_wait_for_ios. */
static int quiet(nxl_agent_t *a, int ms)
{
    uint64_t t0 = tl_now_ms();
    nxl_agent_run_once(a, ms);
    return tl_now_ms() - t0 >= (uint64_t)ms - 5;
}

START_TEST(t_idle)
{
    cur_test = "t_idle";
    if (!need_mock())
        return;
    char mnt[300];
    snprintf(mnt, sizeof(mnt), "%s", root);
    nxl_param_t p[2] = {{"mount", mnt}, {"entries", "4"}}; /* refilled while in flight */
    nxl_agent_t *a = hf_agent("i", p, 2);
    ck_assert_msg(quiet(a, 300), "a new agent with HF3FS woke up");
    ck_assert_int_eq(nxl_agent_backend_timeout(a), -1);
    const size_t len = 64 * KiB;
    char *v = hmalloc(len);
    memset(v, 0x3c, len);
    ft_reg(a, NXL_DRAM, (uintptr_t)v, len, 0);
    int fd = file_in(root, len, O_RDWR);
    ft_reg(a, NXL_FILE, 0, len, (uint64_t)fd);
    nxl_xfer_t *x = NULL;
    ck_assert(ft_mk_xfer(a, NXL_WRITE, v, fd, 0, 4096, 16, 0, &x) == NXL_SUCCESS);
    res_t r;
    /* with I/O completing as it is prepared too (3FS's daemon may take it
     * before hf3fs_submit_ios), while a worker waits for the earlier ones */
    for (int eager = 0; eager < 2; eager++) {
        if (eager)
            setenv("MOCK_HF3FS_EAGER", "1", 1);
        for (int i = 0; i < 50; i++) {
            ft_run(a, x, &r);
            ck_assert_msg(r.st == NXL_SUCCESS, "%s", r.why);
        }
    }
    unsetenv("MOCK_HF3FS_EAGER");
    counts_t c0 = counts();
    for (int i = 0; i < 3; i++)
        ck_assert_msg(quiet(a, 300), "woke up %d after traffic", i);
    ck_assert_int_eq(nxl_agent_backend_timeout(a), -1);
    counts_t c1 = counts();
    ck_assert_msg(c1.waits == c0.waits, "the workers called hf3fs_wait_for_ios %ld times while "
                  "idle", c1.waits - c0.waits);
    nxl_xfer_release(x);
    nxl_agent_destroy(a);
    check_counts_zero();
    close(fd);
    free(v);
}
END_TEST

#endif /* NXL_TEST_HF3FS */

#ifndef NXL_TEST_HF3FS
START_TEST(t_hf3fs_cases)
{
    cur_test = "t_hf3fs_cases";
    skip("built without HF3FS: the usrbio cases are not compiled");
}
END_TEST
#endif

static void rm_root(void)
{
    DIR *d = opendir(root);
    struct dirent *e;
    char p[600];
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof(p), "%s/%s", root, e->d_name);
            unlink(p);
        }
    if (d)
        closedir(d);
    rmdir(root);
}

int main(void)
{
    /* the stand-in, unless a library is named; its "mount" in $TMPDIR */
    if (!getenv("NXL_HF3FS_LIB"))
        setenv("NXL_HF3FS_LIB", NXL_TEST_MOCK_HF3FS, 1);
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof(root), "%s/check_hf3fs.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        perror("check_hf3fs: mkdtemp");
        return 99;
    }
    setenv("MOCK_HF3FS_ROOT", root, 1);
    Suite *s = suite_create("hf3fs");
    TCase *te = TL_TCASE(s, "everywhere", 60, NULL, NULL, t_plugins);
    tcase_add_loop_test(te, t_absent, 0, 2);
    TCase *tg = tcase_create("usrbio");
    tcase_set_timeout(tg, 240);
#ifdef NXL_TEST_HF3FS
    tcase_add_loop_test(tg, t_roundtrip, 0, (int)(sizeof(shapes) / sizeof(*shapes)));
    tcase_add_loop_test(tg, t_roundtrip_alloc, 0, (int)(sizeof(shapes) / sizeof(*shapes)));
    tcase_add_test(tg, t_mount_found);
    tcase_add_test(tg, t_errors);
    tcase_add_test(tg, t_ring_full);
    tcase_add_loop_test(tg, t_cancel_inflight, 0, 2);
    tcase_add_test(tg, t_teardown_inflight);
    tcase_add_test(tg, t_deadline);
    tcase_add_test(tg, t_idle);
#else
    tcase_add_test(tg, t_hf3fs_cases);
#endif
    suite_add_tcase(s, tg);
    int rc = tl_run(s);
    rm_root();
    return rc;
}
