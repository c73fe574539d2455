/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU memory to and from files: the GDS transport (cuFile).
 *
 * Everywhere: nxl_plugins_available() lists GDS with the reason it cannot
 * be created ("no libcufile (...)", "no CUDA driver (...)"); creation then
 * fails with NXL_ERR_BACKEND and that sentence; a missing libcufile named
 * by NXL_CUFILE_LIB is reported as such.
 *
 * With cuFile and a GPU (or tests/mock_cufile.c with tests/mock_cudart.c,
 * through tests/cuda_mock.sh): VRAM -> FILE -> VRAM with every byte
 * checked, from 1 to 10,000 descriptors and 8 B to 64 MiB, at odd buffer
 * and file offsets, the engine picking GDS among POSIX, CUDA and GDS;
 * errors with their sentences: a closed fd, a file too short, a read from
 * a write-only file, VRAM not registered with GDS, host memory as VRAM,
 * and (on the stand-in) a refused cuFileBufRegister and a cuFile error in
 * the middle of a transfer; cancel and teardown with chunks in flight (each
 * callback once, no byte written after it); every buffer and handle
 * registration undone (counted by the stand-in). Without them each prints
 * "SKIP: <test>: <reason>". */
#include "config.h"
#define CT_SUITE "check_gds"
#include "cudatest.h"
#define FT_LOCAL NXL_VRAM
#include "filetest.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

static nxl_agent_t *mk_agent(const char *name)
{
    return tl_agent_bare(name, 0);
}

#define find_plugin tl_plugin

/* -------------------------------------------------- everywhere */

START_TEST(t_plugins)
{
    cur_test = "t_plugins";
    nxl_plugin_info_t info[16];
    const nxl_plugin_info_t *g = find_plugin("GDS", info, 16);
    ck_assert_msg(g != NULL, "GDS is not listed by nxl_plugins_available()");
    ck_assert_msg(is_sentence(g->reason), "reason: '%s'", g->reason);
#ifndef NXL_TEST_GDS
    ck_assert(!g->available);
    ck_assert_msg(strstr(g->reason, "not built"), "reason: '%s'", g->reason);
#else
    ck_assert_uint_eq(g->mem_mask, (1u << NXL_VRAM) | (1u << NXL_FILE));
    if (g->available)
        ck_assert_msg(strstr(g->reason, "cuFile") && strstr(g->reason, "files"), "%s", g->reason);
    else
        ck_assert_msg(!strncmp(g->reason, "no libcufile (", 14) ||
                          !strncmp(g->reason, "no CUDA runtime (", 17) ||
                          !strncmp(g->reason, "no CUDA driver (", 16) ||
                          !strncmp(g->reason, "no device", 9),
                      "reason: '%s'", g->reason);
#endif
    printf("check_gds: GDS %s: %s\n", g->available ? "available" : "not available", g->reason);
    /* creation agrees with the listing */
    nxl_agent_t *a = mk_agent("p");
    nxl_status_t st = nxl_backend_create(a, "GDS", NULL, 0, NULL);
    if (g->available) {
        ck_assert_msg(st == NXL_SUCCESS, "%s", nxl_agent_last_error(a));
    } else {
        ck_assert(st != NXL_SUCCESS);
        ck_sentence(nxl_agent_last_error(a), "GDS");
        printf("check_gds: nxl_backend_create(GDS): %s\n", nxl_agent_last_error(a));
    }
    nxl_agent_destroy(a);
}
END_TEST

/* NXL_CUFILE_LIB names a library that is not there: said as such. */
START_TEST(t_no_cufile)
{
    cur_test = "t_no_cufile";
#ifndef NXL_TEST_GDS
    skip("built without GDS");
#else
    if (!own_process_env("NXL_CUFILE_LIB", "/nonexistent/libcufile.so.0"))
        return;
    nxl_plugin_info_t info[16];
    const nxl_plugin_info_t *g = find_plugin("GDS", info, 16);
    ck_assert(g && !g->available);
    ck_assert_msg(strstr(g->reason, "no libcufile (/nonexistent/libcufile.so.0: cannot open "
                                     "shared object file"),
                  "reason: '%s'", g->reason);
    nxl_agent_t *a = mk_agent("n");
    ck_assert_int_eq(nxl_backend_create(a, "GDS", NULL, 0, NULL), NXL_ERR_BACKEND);
    ck_sentence(nxl_agent_last_error(a), "no libcufile");
    ck_sentence(nxl_agent_last_error(a), "NXL_CUFILE_LIB");
    /* parameters are checked before anything is loaded */
    nxl_param_t p = {"threads", "0"};
    ck_assert_int_eq(nxl_backend_create(a, "GDS", &p, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "threads");
    nxl_param_t q = {"colour", "blue"};
    ck_assert_int_eq(nxl_backend_create(a, "GDS", &q, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "colour");
    nxl_agent_destroy(a);
    unsetenv("NXL_CUFILE_LIB");
#endif
}
END_TEST

/* ======================================================== with cuFile */

#ifdef NXL_TEST_GDS

static void (*mock_counts)(int *, int *, int *); /* the stand-in's, or NULL */

/* the CUDA table with GDS available, or NULL after printing why not */
static const nxl_cuda_rt_t *need_gds(void)
{
    char why[160];
    int kind;
    rt = nxl_cuda_rt_get(&kind, why, sizeof(why));
    if (!rt) {
        skip(why);
        return NULL;
    }
    nxl_plugin_info_t info[16];
    const nxl_plugin_info_t *g = find_plugin("GDS", info, 16);
    if (!g || !g->available) {
        skip(g ? g->reason : "GDS is not listed");
        return NULL;
    }
    const char *lib = getenv("NXL_CUFILE_LIB");
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    *(void **)&mock_counts = h ? dlsym(h, "mock_cufile_counts") : NULL;
    return rt;
}

static int have(const char *name)
{
    nxl_plugin_info_t info[16];
    const nxl_plugin_info_t *p = find_plugin(name, info, 16);
    return p && p->available;
}

static nxl_agent_t *gds_agent(const char *name, int all)
{
    nxl_agent_t *a = mk_agent(name);
    if (all && have("POSIX"))
        ck_assert(nxl_backend_create(a, "POSIX", NULL, 0, NULL) == NXL_SUCCESS);
    if (all && have("CUDA"))
        ck_assert(nxl_backend_create(a, "CUDA", NULL, 0, NULL) == NXL_SUCCESS);
    nxl_status_t st = nxl_backend_create(a, "GDS", NULL, 0, NULL);
    ck_assert_msg(st == NXL_SUCCESS, "GDS: %s", nxl_agent_last_error(a));
    return a;
}

/* a file in $TMPDIR, unlinked, @p size bytes long */
static int tmpfile_fd(size_t size, int flags)
{
    return ft_file(ft_tmpdir(), "nxl-gds-", size, flags);
}

static const struct {
    size_t n, blk;
} shapes[] = {
    {1, 8}, {10000, 8}, {1000, 4 * KiB}, {64, 1 * MiB}, {3, 1 * MiB + 3}, {1, 64 * MiB},
};

static size_t big(size_t len)
{
    return getenv("NXL_TEST_SMALL") && len >= 16 * MiB ? len / 4 : len;
}

static void check_counts_zero(void)
{
    if (!mock_counts)
        return;
    int d, h, b;
    mock_counts(&d, &h, &b);
    ck_assert_msg(d == 0 && h == 0 && b == 0, "left registered: %d drivers, %d handles, %d "
                  "buffers", d, h, b);
}

/* VRAM -> FILE (reversed blocks) -> VRAM, every byte checked after each
 * step, at a buffer offset of 64 B and a file offset of 12,289 B. */
START_TEST(t_roundtrip)
{
    cur_test = "t_roundtrip";
    if (!need_gds())
        return;
    size_t n = shapes[_i].n, blk = big(shapes[_i].blk), len = n * blk;
    const size_t voff = 64, foff = 3 * 4096 + 1;
    nxl_agent_t *a = gds_agent("g", 1);
    unsigned char *src = hmalloc(len), *tmp = hmalloc(len + 64);
    tl_fill(src, len, (uint32_t)_i + 7);
    char *va = dmalloc(len + voff), *vb = dmalloc(len + voff);
    CK_CUDA(rt->cudaMemcpy(va + voff, src, len, cudaMemcpyHostToDevice));
    CK_CUDA(rt->cudaMemset(vb, 0, len + voff));
    ft_reg(a, NXL_VRAM, (uintptr_t)va, len + voff, 0);
    ft_reg(a, NXL_VRAM, (uintptr_t)vb, len + voff, 0);
    int fd = tmpfile_fd(0, O_RDWR);
    ft_reg(a, NXL_FILE, 0, foff + len, (uint64_t)fd);

    nxl_xfer_t *w = NULL, *r = NULL;
    ft_write_read(a, "GDS", va + voff, vb + voff, fd, foff, blk, n, src, tmp, &w, &r);
    CK_CUDA(rt->cudaMemcpy(tmp, vb + voff, len, cudaMemcpyDeviceToHost));
    long d = first_diff(tmp, src, len);
    ck_assert_msg(d < 0, "FILE -> VRAM %zu x %zu: byte %ld differs", n, blk, d);
    /* nothing before the offset was touched */
    CK_CUDA(rt->cudaMemcpy(tmp, vb, voff, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < voff; i++)
        ck_assert_int_eq(tmp[i], 0);

    nxl_xfer_release(w);
    nxl_xfer_release(r);
    nxl_agent_destroy(a);
    check_counts_zero();
    close(fd);
    CK_CUDA(rt->cudaFree(va));
    CK_CUDA(rt->cudaFree(vb));
    free(src);
    free(tmp);
}
END_TEST

/* Each error with its status and sentence. */
START_TEST(t_errors)
{
    cur_test = "t_errors";
    if (!need_gds())
        return;
    nxl_agent_t *a = gds_agent("e", 0);
    const size_t len = 64 * KiB;
    char *v = dmalloc(len);
    CK_CUDA(rt->cudaMemset(v, 0x5a, len));
    ft_reg(a, NXL_VRAM, (uintptr_t)v, len, 0);

    ft_err_closed_fd(a, tmpfile_fd(len, O_RDWR), len);
    int sfd = tmpfile_fd(4096, O_RDWR);
    ft_err_short(a, v, sfd, len);
    nxl_xfer_t *x = NULL;
    res_t r;

    /* nxl_mem_query: by fd, by path, and nothing there */
    nxl_query_t q[3];
    char qmeta[64];
    snprintf(qmeta, sizeof(qmeta), "path=/proc/self/fd/%d", sfd);
    nxl_desc_t qd[3] = {{.dev_id = (uint64_t)sfd},
                        {.dev_id = 7, .meta = qmeta, .meta_len = strlen(qmeta)},
                        {.dev_id = 8, .meta = "path=/nonexistent/x", .meta_len = 19}};
    ck_assert_msg(nxl_mem_query(a, NXL_FILE, qd, 3, NULL, q) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    ck_assert(q[0].exists && q[0].size == 4096);
    ck_assert(q[1].exists && q[1].size == 4096);
    ck_assert(!q[2].exists);
    /* a malformed meta is refused, as at registration */
    nxl_desc_t qbad = {.dev_id = 9, .meta = "path=/tmp;mode=sideways", .meta_len = 23};
    ck_assert_int_eq(nxl_mem_query(a, NXL_FILE, &qbad, 1, NULL, q), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "unknown mode 'sideways'");
    /* one that cannot be looked at (a loop of links) is refused, not missing */
    char la[] = "/tmp/check_gds.loopXXXXXX", lmeta[80];
    ck_assert(mkdtemp(la));
    char lpath[64];
    snprintf(lpath, sizeof(lpath), "%s/x", la);
    ck_assert(symlink(lpath, lpath) == 0);
    snprintf(lmeta, sizeof(lmeta), "path=%s", lpath);
    nxl_desc_t qloop = {.dev_id = 10, .meta = lmeta, .meta_len = strlen(lmeta)};
    ck_assert_int_eq(nxl_mem_query(a, NXL_FILE, &qloop, 1, NULL, q), NXL_ERR_BACKEND);
    ck_sentence(nxl_agent_last_error(a), "GDS: cannot query");
    unlink(lpath);
    rmdir(la);

    /* FILE by path (the descriptor meta POSIX reads too, filemeta.h):
     * created, then refused when malformed, with GDS's sentence */
    char dir[] = "/tmp/check_gds.XXXXXX", pmeta[128];
    ck_assert(mkdtemp(dir));
    snprintf(pmeta, sizeof(pmeta), "path=%s/kv.bin;mode=create", dir);
    nxl_desc_t pd = {.addr = 0, .len = 4096, .dev_id = 41, .meta = pmeta, .meta_len = strlen(pmeta)};
    ck_assert_msg(nxl_mem_register(a, NXL_FILE, &pd, 1, NULL) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    ck_assert_int_eq(nxl_mem_deregister(a, NXL_FILE, &pd, 1), NXL_SUCCESS);
    nxl_desc_t bad = {.len = 4096, .dev_id = 42, .meta = "path=/tmp/x;mode=sideways", .meta_len = 25};
    ck_assert_int_eq(nxl_mem_register(a, NXL_FILE, &bad, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "GDS: unknown mode 'sideways'");
    bad.meta = "nopath";
    bad.meta_len = 6;
    ck_assert_int_eq(nxl_mem_register(a, NXL_FILE, &bad, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "not key=value");
    snprintf(pmeta, sizeof(pmeta), "%s/kv.bin", dir);
    unlink(pmeta);
    rmdir(dir);

    /* reading from a write-only file: refused at post */
    int wfd = tmpfile_fd(len, O_WRONLY);
    nxl_desc_t wd = {.addr = 0, .len = len, .dev_id = (uint64_t)wfd};
    if (nxl_mem_register(a, NXL_FILE, &wd, 1, NULL) == NXL_SUCCESS) {
        ft_err_write_only(a, v, wfd);
    } else {
        /* a cuFile that refuses write-only files says so with a sentence */
        ck_assert_msg(!mock_counts, "%s", nxl_agent_last_error(a));
        ck_sentence(nxl_agent_last_error(a), "cuFileHandleRegister");
        printf("check_gds: a write-only file: %s\n", nxl_agent_last_error(a));
    }

    /* VRAM not registered (with GDS or at all): no transport holds it */
    char *u = dmalloc(len);
    ck_assert(ft_mk_xfer(a, NXL_WRITE, u, sfd, 0, 4096, 1, 0, &x) != NXL_SUCCESS);
    ck_sentence(nxl_agent_last_error(a), "VRAM");

    /* host memory as VRAM */
    void *h = hmalloc(len);
    nxl_desc_t hd = {.addr = (uintptr_t)h, .len = len, .dev_id = 0};
    ck_assert_int_eq(nxl_mem_register(a, NXL_VRAM, &hd, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "not device memory");

    if (mock_counts) {
        /* pinning refused */
        setenv("MOCK_CUFILE_BUFREG_FAIL", "1", 1);
        nxl_desc_t ud = {.addr = (uintptr_t)u, .len = len, .dev_id = 0};
        ck_assert_int_eq(nxl_mem_register(a, NXL_VRAM, &ud, 1, NULL), NXL_ERR_BACKEND);
        ck_sentence(nxl_agent_last_error(a), "cuFileBufRegister");
        ck_sentence(nxl_agent_last_error(a), "CU_FILE_GPU_MEMORY_PINNING_FAILED");
        /* the same for memory nxl_mem_alloc makes (the CUDA transport
         * allocates, GDS registers it): the sentence still names why */
        if (have("CUDA")) {
            nxl_agent_t *ac = gds_agent("e3", 1);
            void *vp = NULL;
            ck_assert_int_eq(nxl_mem_alloc(ac, NXL_VRAM, 65536, 0, &vp), NXL_ERR_BACKEND);
            ck_assert_ptr_null(vp);
            ck_sentence(nxl_agent_last_error(ac), "nxl_mem_alloc");
            ck_sentence(nxl_agent_last_error(ac), "cuFileBufRegister");
            nxl_agent_destroy(ac);
        } else {
            skip("nxl_mem_alloc's sentence under a refused cuFileBufRegister: no CUDA "
                 "transport to allocate the VRAM");
        }
        unsetenv("MOCK_CUFILE_BUFREG_FAIL");
        /* a cuFile error in the middle of a transfer of 8 chunks */
        int ffd = tmpfile_fd(len, O_RDWR);
        ft_reg(a, NXL_FILE, 0, len, (uint64_t)ffd);
        nxl_param_t p = {"chunk", "8192"};
        nxl_agent_t *b = mk_agent("e2");
        ck_assert(nxl_backend_create(b, "GDS", &p, 1, NULL) == NXL_SUCCESS);
        ft_reg(b, NXL_VRAM, (uintptr_t)u, len, 0);
        ft_reg(b, NXL_FILE, 0, len, (uint64_t)ffd);
        ck_assert(ft_mk_xfer(b, NXL_WRITE, u, ffd, 0, len, 1, 0, &x) == NXL_SUCCESS);
        setenv("MOCK_CUFILE_IO_FAIL_OFFSET", "16384", 1);
        ft_run(b, x, &r);
        unsetenv("MOCK_CUFILE_IO_FAIL_OFFSET");
        ck_assert_int_eq(r.st, NXL_ERR_BACKEND);
        ck_sentence(r.why, "cuFileWrite");
        ck_sentence(r.why, "CU_FILE_IO_NOT_SUPPORTED");
        /* short calls are continued: every byte arrives */
        setenv("MOCK_CUFILE_MAX_IO", "1000", 1);
        CK_CUDA(rt->cudaMemset(u, 0x77, len));
        ft_run(b, x, &r);
        ck_assert_msg(r.st == NXL_SUCCESS, "%s", r.why);
        unsetenv("MOCK_CUFILE_MAX_IO");
        ft_check_file(ffd, len, 0x77);
        nxl_xfer_release(x);
        nxl_agent_destroy(b);
        close(ffd);
    }
    nxl_agent_destroy(a);
    check_counts_zero();
    close(sfd);
    close(wfd);
    CK_CUDA(rt->cudaFree(v));
    CK_CUDA(rt->cudaFree(u));
    free(h);
}
END_TEST

/* 32 READs of 8 MiB from a file into VRAM, canceled or released at once,
 * or the agent destroyed: each callback once, and no byte written into
 * the VRAM after its callback (which marks it). */
enum { NX = 32 };

static void vram_mark(void *p, int c, size_t n)
{
    rt->cudaMemset(p, c, n);
}

static void inflight(int teardown)
{
    nxl_param_t p = {"chunk", "65536"};
    nxl_agent_t *a = mk_agent("t");
    ck_assert(nxl_backend_create(a, "GDS", &p, 1, NULL) == NXL_SUCCESS);
    ft_tear_len = big(8 * MiB);
    size_t total = NX * ft_tear_len;
    ft_tear_v = dmalloc(total);
    ft_tear_mark = vram_mark;
    ft_reg(a, NXL_VRAM, (uintptr_t)ft_tear_v, total, 0);
    int fd = tmpfile_fd(0, O_RDWR);
    ft_fill_file(fd, ft_tear_len, 0x11);
    ft_reg(a, NXL_FILE, 0, ft_tear_len, (uint64_t)fd);
    nxl_xfer_t *x[NX];
    nxl_future_t *f[NX];
    ft_tear_post(a, fd, NX, teardown, x, f);
    ft_tear_end(a, NX, teardown, x, f);
    unsigned char *t = hmalloc(total);
    CK_CUDA(rt->cudaMemcpy(t, ft_tear_v, total, cudaMemcpyDeviceToHost));
    ct_check_marked(t, total);
    free(t);
    if (!teardown)
        nxl_agent_destroy(a);
    check_counts_zero();
    close(fd);
    CK_CUDA(rt->cudaFree(ft_tear_v));
}

START_TEST(t_cancel_inflight)
{
    cur_test = "t_cancel_inflight";
    if (need_gds())
        inflight(0);
}
END_TEST

START_TEST(t_teardown_inflight)
{
    cur_test = "t_teardown_inflight";
    if (need_gds())
        inflight(1);
}
END_TEST

#endif /* NXL_TEST_GDS */

#ifndef NXL_TEST_GDS
START_TEST(t_gds_cases)
{
    cur_test = "t_gds_cases";
    skip("built without GDS: the cuFile cases (roundtrip, errors, cancel, teardown) are not "
         "compiled");
}
END_TEST
#endif

int main(void)
{
    Suite *s = suite_create("gds");
    TL_TCASE(s, "everywhere", 60, NULL, NULL, t_plugins, t_no_cufile);
    TCase *tg = tcase_create("cufile");
    tcase_set_timeout(tg, 240);
#ifdef NXL_TEST_GDS
    tcase_add_loop_test(tg, t_roundtrip, 0, (int)(sizeof(shapes) / sizeof(*shapes)));
    tcase_add_test(tg, t_errors);
    tcase_add_test(tg, t_cancel_inflight);
    tcase_add_test(tg, t_teardown_inflight);
#else
    tcase_add_test(tg, t_gds_cases);
#endif
    suite_add_tcase(s, tg);
    return tl_run(s);
}
