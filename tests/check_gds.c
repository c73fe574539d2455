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
    const char *dir = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof(path), "%s/nxl-gds-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    ck_assert_msg(fd >= 0, "mkstemp: %s", strerror(errno));
    ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
    if (flags != O_RDWR) {
        int fd2 = open(path, flags | O_CLOEXEC);
        ck_assert(fd2 >= 0);
        close(fd);
        fd = fd2;
    }
    unlink(path);
    return fd;
}

static void reg(nxl_agent_t *a, nxl_mem_t t, uintptr_t addr, size_t len, uint64_t dev)
{
    nxl_desc_t d = {.addr = addr, .len = len, .dev_id = dev};
    nxl_status_t st = nxl_mem_register(a, t, &d, 1, NULL);
    ck_assert_msg(st == NXL_SUCCESS, "%s registration: %s", nxl_mem_name(t),
                  nxl_agent_last_error(a));
}

/* n blocks of blk bytes: VRAM block i at vbase + i*blk, file block
 * (reverse ? n-1-i : i) at foff + that many blocks of fd's range */
static nxl_status_t mk_xfer(nxl_agent_t *a, nxl_op_t op, void *vbase, int fd, uint64_t foff,
                            size_t blk, size_t n, int reverse, nxl_xfer_t **x)
{
    nxl_desc_t *vd = calloc(n, sizeof(*vd)), *fdsc = calloc(n, sizeof(*fdsc));
    for (size_t i = 0; i < n; i++) {
        vd[i] = (nxl_desc_t){.addr = (uintptr_t)vbase + i * blk, .len = blk, .dev_id = 0};
        size_t j = reverse ? n - 1 - i : i;
        fdsc[i] = (nxl_desc_t){.addr = foff + j * blk, .len = blk, .dev_id = (uint64_t)fd};
    }
    nxl_prepped_t *lp = NULL, *rp = NULL;
    nxl_status_t st = nxl_prep(a, NULL, NXL_VRAM, vd, n, &lp);
    if (st == NXL_SUCCESS)
        st = nxl_prep(a, nxl_agent_name(a), NXL_FILE, fdsc, n, &rp);
    if (st == NXL_SUCCESS)
        st = nxl_xfer_make(a, op, lp, NULL, rp, NULL, n, NULL, x);
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
    free(vd);
    free(fdsc);
    return st;
}

static void run(nxl_agent_t *a, nxl_xfer_t *x, res_t *r)
{
    tl_post(a, x, r);
    ck_assert_int_eq(r->calls, 0);
    tl_wait_res(a, r, 120000);
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
    unsigned char *src = hmalloc(len), *want = hmalloc(len), *tmp = hmalloc(len + 64);
    tl_fill(src, len, (uint32_t)_i + 7);
    char *va = dmalloc(len + voff), *vb = dmalloc(len + voff);
    CK_CUDA(rt->cudaMemcpy(va + voff, src, len, cudaMemcpyHostToDevice));
    CK_CUDA(rt->cudaMemset(vb, 0, len + voff));
    reg(a, NXL_VRAM, (uintptr_t)va, len + voff, 0);
    reg(a, NXL_VRAM, (uintptr_t)vb, len + voff, 0);
    int fd = tmpfile_fd(0, O_RDWR);
    reg(a, NXL_FILE, 0, foff + len, (uint64_t)fd);

    nxl_xfer_t *w = NULL, *r = NULL;
    ck_assert_msg(mk_xfer(a, NXL_WRITE, va + voff, fd, foff, blk, n, 1, &w) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    ck_assert_str_eq(nxl_backend_name(nxl_xfer_backend(w)), "GDS");
    res_t res;
    run(a, w, &res);
    ck_assert_msg(res.st == NXL_SUCCESS, "WRITE %zu x %zu: %s", n, blk, res.why);
    reverse_blocks(want, src, blk, n);
    ck_assert(pread(fd, tmp, len, (off_t)foff) == (ssize_t)len);
    long d = first_diff(tmp, want, len);
    ck_assert_msg(d < 0, "VRAM -> FILE %zu x %zu: byte %ld differs", n, blk, d);

    ck_assert(mk_xfer(a, NXL_READ, vb + voff, fd, foff, blk, n, 1, &r) == NXL_SUCCESS);
    run(a, r, &res);
    ck_assert_msg(res.st == NXL_SUCCESS, "READ %zu x %zu: %s", n, blk, res.why);
    CK_CUDA(rt->cudaMemcpy(tmp, vb + voff, len, cudaMemcpyDeviceToHost));
    d = first_diff(tmp, src, len);
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
    free(want);
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
    reg(a, NXL_VRAM, (uintptr_t)v, len, 0);

    /* a closed fd */
    int cfd = tmpfile_fd(len, O_RDWR);
    close(cfd);
    nxl_desc_t d = {.addr = 0, .len = len, .dev_id = (uint64_t)cfd};
    ck_assert_int_eq(nxl_mem_register(a, NXL_FILE, &d, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "not open");

    /* a file too short: the second element reads past its end */
    int sfd = tmpfile_fd(4096, O_RDWR);
    reg(a, NXL_FILE, 0, len, (uint64_t)sfd);
    nxl_xfer_t *x = NULL;
    ck_assert(mk_xfer(a, NXL_READ, v, sfd, 0, 8192, 2, 0, &x) == NXL_SUCCESS);
    res_t r;
    run(a, x, &r);
    ck_assert_int_eq(r.st, NXL_ERR_NOT_FOUND);
    ck_sentence(r.why, "end of the file");
    nxl_xfer_release(x);

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
        ck_assert(mk_xfer(a, NXL_READ, v, wfd, 0, 4096, 1, 0, &x) == NXL_SUCCESS);
        ck_assert_int_eq(nxl_xfer_post(x, done_cb, &r, NULL), NXL_ERR_NOT_ALLOWED);
        ck_sentence(nxl_agent_last_error(a), "write-only");
        nxl_xfer_release(x);
    } else {
        /* a cuFile that refuses write-only files says so with a sentence */
        ck_assert_msg(!mock_counts, "%s", nxl_agent_last_error(a));
        ck_sentence(nxl_agent_last_error(a), "cuFileHandleRegister");
        printf("check_gds: a write-only file: %s\n", nxl_agent_last_error(a));
    }

    /* VRAM not registered (with GDS or at all): no transport holds it */
    char *u = dmalloc(len);
    ck_assert(mk_xfer(a, NXL_WRITE, u, sfd, 0, 4096, 1, 0, &x) != NXL_SUCCESS);
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
        reg(a, NXL_FILE, 0, len, (uint64_t)ffd);
        nxl_param_t p = {"chunk", "8192"};
        nxl_agent_t *b = mk_agent("e2");
        ck_assert(nxl_backend_create(b, "GDS", &p, 1, NULL) == NXL_SUCCESS);
        reg(b, NXL_VRAM, (uintptr_t)u, len, 0);
        reg(b, NXL_FILE, 0, len, (uint64_t)ffd);
        ck_assert(mk_xfer(b, NXL_WRITE, u, ffd, 0, len, 1, 0, &x) == NXL_SUCCESS);
        setenv("MOCK_CUFILE_IO_FAIL_OFFSET", "16384", 1);
        run(b, x, &r);
        unsetenv("MOCK_CUFILE_IO_FAIL_OFFSET");
        ck_assert_int_eq(r.st, NXL_ERR_BACKEND);
        ck_sentence(r.why, "cuFileWrite");
        ck_sentence(r.why, "CU_FILE_IO_NOT_SUPPORTED");
        /* short calls are continued: every byte arrives */
        setenv("MOCK_CUFILE_MAX_IO", "1000", 1);
        CK_CUDA(rt->cudaMemset(u, 0x77, len));
        run(b, x, &r);
        ck_assert_msg(r.st == NXL_SUCCESS, "%s", r.why);
        unsetenv("MOCK_CUFILE_MAX_IO");
        unsigned char *t = hmalloc(len);
        ck_assert(pread(ffd, t, len, 0) == (ssize_t)len);
        for (size_t i = 0; i < len; i++)
            ck_assert_int_eq(t[i], 0x77);
        free(t);
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
static int tear_calls[NX], tear_canceled;
static char *tear_v;
static size_t tear_len;

static void tear_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    int i = (int)((int *)arg - tear_calls);
    rt->cudaMemset(tear_v + (size_t)i * tear_len, 0xee, tear_len);
    tear_canceled += st == NXL_ERR_CANCELED;
    (*(int *)arg)++;
}

static void inflight(int teardown)
{
    nxl_param_t p = {"chunk", "65536"};
    nxl_agent_t *a = mk_agent("t");
    ck_assert(nxl_backend_create(a, "GDS", &p, 1, NULL) == NXL_SUCCESS);
    tear_len = big(8 * MiB);
    size_t total = NX * tear_len;
    tear_v = dmalloc(total);
    reg(a, NXL_VRAM, (uintptr_t)tear_v, total, 0);
    int fd = tmpfile_fd(0, O_RDWR);
    unsigned char *fill = hmalloc(tear_len);
    memset(fill, 0x11, tear_len);
    ck_assert(pwrite(fd, fill, tear_len, 0) == (ssize_t)tear_len);
    free(fill);
    reg(a, NXL_FILE, 0, tear_len, (uint64_t)fd);
    nxl_xfer_t *x[NX];
    nxl_future_t *f[NX];
    tear_canceled = 0;
    for (int i = 0; i < NX; i++) {
        tear_calls[i] = 0;
        ck_assert(mk_xfer(a, NXL_READ, tear_v + (size_t)i * tear_len, fd, 0, tear_len / 4, 4, 0,
                          &x[i]) == NXL_SUCCESS);
        ck_assert_int_eq(nxl_xfer_post(x[i], tear_cb, &tear_calls[i], teardown ? NULL : &f[i]),
                         NXL_SUCCESS);
    }
    if (teardown) {
        nxl_agent_destroy(a);
        ck_assert_int_eq(tear_canceled, NX);
    } else {
        ct_cancel_or_release(x, f, NX);
        ct_run_until_all(a, tear_calls, NX, 60000);
        ck_assert_msg(tear_canceled > 0, "no transfer was canceled in flight");
        ct_release_rest(x, f, NX);
    }
    for (int i = 0; i < NX; i++)
        ck_assert_int_eq(tear_calls[i], 1);
    usleep(100000);
    unsigned char *t = hmalloc(total);
    CK_CUDA(rt->cudaMemcpy(t, tear_v, total, cudaMemcpyDeviceToHost));
    ct_check_marked(t, total);
    free(t);
    if (!teardown)
        nxl_agent_destroy(a);
    check_counts_zero();
    close(fd);
    CK_CUDA(rt->cudaFree(tear_v));
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
