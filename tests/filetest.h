/* SPDX-License-Identifier: BSD-3-Clause */
/* What the suites of the file transports that move one kind of memory to
 * and from FILE ranges of the agent's own share (check_gds: VRAM,
 * check_hf3fs: DRAM): unlinked files, registrations, transfers of n
 * blocks, running one, and the cancel/teardown case with READs in flight.
 *
 * The suite defines FT_LOCAL (the kind of its local list) and includes this
 * after cudatest.h; for the in-flight case it sets ft_tear_mark to what
 * marks its memory when memset cannot (the device's). */
#ifndef NXL_FILETEST_H
#define NXL_FILETEST_H

#ifndef FT_LOCAL
#error "FT_LOCAL: the kind of the suite's local memory (NXL_DRAM, NXL_VRAM)"
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* $TMPDIR, or /tmp */
static inline const char *ft_tmpdir(void)
{
    const char *dir = getenv("TMPDIR");
    return dir && *dir ? dir : "/tmp";
}

/* a file "<dir>/<prefix>XXXXXX", @p size bytes long, opened with @p flags,
 * unlinked */
static inline int ft_file(const char *dir, const char *prefix, size_t size, int flags)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%sXXXXXX", dir, prefix);
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

/* @p len bytes of @p byte at the start of the file @p fd */
static inline void ft_fill_file(int fd, size_t len, int byte)
{
    unsigned char *fill = hmalloc(len);
    memset(fill, byte, len);
    ck_assert(pwrite(fd, fill, len, 0) == (ssize_t)len);
    free(fill);
}

static inline void ft_reg(nxl_agent_t *a, nxl_mem_t t, uintptr_t addr, size_t len, uint64_t dev)
{
    nxl_desc_t d = {.addr = addr, .len = len, .dev_id = dev};
    nxl_status_t st = nxl_mem_register(a, t, &d, 1, NULL);
    ck_assert_msg(st == NXL_SUCCESS, "%s registration: %s", nxl_mem_name(t),
                  nxl_agent_last_error(a));
}

/* n blocks of blk bytes: local (FT_LOCAL, device 0) block i at base +
 * i*blk, file block (reverse ? n-1-i : i) at foff + that many blocks of
 * fd's range */
static inline nxl_status_t ft_mk_xfer(nxl_agent_t *a, nxl_op_t op, void *base, int fd,
                                      uint64_t foff, size_t blk, size_t n, int reverse,
                                      nxl_xfer_t **x)
{
    nxl_desc_t *ld = calloc(n, sizeof(*ld)), *fdsc = calloc(n, sizeof(*fdsc));
    for (size_t i = 0; i < n; i++) {
        ld[i] = (nxl_desc_t){.addr = (uintptr_t)base + i * blk, .len = blk, .dev_id = 0};
        size_t j = reverse ? n - 1 - i : i;
        fdsc[i] = (nxl_desc_t){.addr = foff + j * blk, .len = blk, .dev_id = (uint64_t)fd};
    }
    nxl_prepped_t *lp = NULL, *rp = NULL;
    nxl_status_t st = nxl_prep(a, NULL, FT_LOCAL, ld, n, &lp);
    if (st == NXL_SUCCESS)
        st = nxl_prep(a, nxl_agent_name(a), NXL_FILE, fdsc, n, &rp);
    if (st == NXL_SUCCESS)
        st = nxl_xfer_make(a, op, lp, NULL, rp, NULL, n, NULL, x);
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
    free(ld);
    free(fdsc);
    return st;
}

/* posts @p x and waits for its callback (2 minutes at most) */
static inline void ft_run(nxl_agent_t *a, nxl_xfer_t *x, res_t *r)
{
    tl_post(a, x, r);
    ck_assert_int_eq(r->calls, 0);
    tl_wait_res(a, r, 120000);
}

/* WRITE from @p va, n blocks of blk bytes, to the file at @p foff in the
 * reverse order of its blocks, through backend @p be, the file checked;
 * then READ back into @p vb (the caller checks it): its transfers into
 * @p w and @p r, @p tmp (n * blk bytes) scratch */
static inline void ft_write_read(nxl_agent_t *a, const char *be, char *va, char *vb, int fd,
                                 uint64_t foff, size_t blk, size_t n, const unsigned char *src,
                                 unsigned char *tmp, nxl_xfer_t **w, nxl_xfer_t **r)
{
    size_t len = n * blk;
    ck_assert_msg(ft_mk_xfer(a, NXL_WRITE, va, fd, foff, blk, n, 1, w) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    ck_assert_str_eq(nxl_backend_name(nxl_xfer_backend(*w)), be);
    res_t res;
    ft_run(a, *w, &res);
    ck_assert_msg(res.st == NXL_SUCCESS, "WRITE %zu x %zu: %s", n, blk, res.why);
    unsigned char *want = hmalloc(len);
    reverse_blocks(want, src, blk, n);
    ck_assert(pread(fd, tmp, len, (off_t)foff) == (ssize_t)len);
    long d = first_diff(tmp, want, len);
    ck_assert_msg(d < 0, "%s -> FILE %zu x %zu: byte %ld differs", nxl_mem_name(FT_LOCAL), n,
                  blk, d);
    free(want);

    ck_assert(ft_mk_xfer(a, NXL_READ, vb, fd, foff, blk, n, 1, r) == NXL_SUCCESS);
    ft_run(a, *r, &res);
    ck_assert_msg(res.st == NXL_SUCCESS, "READ %zu x %zu: %s", n, blk, res.why);
}

/* every one of the first @p len bytes of the file @p fd is @p byte */
static inline void ft_check_file(int fd, size_t len, int byte)
{
    unsigned char *t = hmalloc(len);
    ck_assert(pread(fd, t, len, 0) == (ssize_t)len);
    for (size_t i = 0; i < len; i++)
        ck_assert_int_eq(t[i], byte);
    free(t);
}

/* ---- errors every suite checks, @p v registered local memory */

/* @p fd closed: refused at registration */
static inline void ft_err_closed_fd(nxl_agent_t *a, int fd, size_t len)
{
    close(fd);
    nxl_desc_t d = {.addr = 0, .len = len, .dev_id = (uint64_t)fd};
    ck_assert_int_eq(nxl_mem_register(a, NXL_FILE, &d, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "not open");
}

/* a file too short (@p sfd: 4096 bytes, registered as @p len): the second
 * element reads past its end */
static inline void ft_err_short(nxl_agent_t *a, void *v, int sfd, size_t len)
{
    ft_reg(a, NXL_FILE, 0, len, (uint64_t)sfd);
    nxl_xfer_t *x = NULL;
    ck_assert(ft_mk_xfer(a, NXL_READ, v, sfd, 0, 8192, 2, 0, &x) == NXL_SUCCESS);
    res_t r;
    ft_run(a, x, &r);
    ck_assert_int_eq(r.st, NXL_ERR_NOT_FOUND);
    ck_sentence(r.why, "end of the file");
    nxl_xfer_release(x);
}

/* reading from write-only @p wfd (registered): refused at post */
static inline void ft_err_write_only(nxl_agent_t *a, void *v, int wfd)
{
    nxl_xfer_t *x = NULL;
    res_t r;
    ck_assert(ft_mk_xfer(a, NXL_READ, v, wfd, 0, 4096, 1, 0, &x) == NXL_SUCCESS);
    ck_assert_int_eq(nxl_xfer_post(x, done_cb, &r, NULL), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(a), "write-only");
    nxl_xfer_release(x);
}

/* ---- READs in flight, canceled, released or torn down: each callback
 * once, and no byte written into the memory after its callback (which
 * marks it) */
enum { FT_NX_MAX = 32 };
static int ft_tear_calls[FT_NX_MAX], ft_tear_canceled;
static char *ft_tear_v;      /* READ i lands at ft_tear_v + i * ft_tear_len */
static size_t ft_tear_len;
static void (*ft_tear_mark)(void *p, int c, size_t n); /* NULL: memset */

static inline void ft_tear_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    int i = (int)((int *)arg - ft_tear_calls);
    if (ft_tear_mark)
        ft_tear_mark(ft_tear_v + (size_t)i * ft_tear_len, 0xee, ft_tear_len);
    else
        memset(ft_tear_v + (size_t)i * ft_tear_len, 0xee, ft_tear_len);
    ft_tear_canceled += st == NXL_ERR_CANCELED;
    (*(int *)arg)++;
}

/* posts @p nx READs of the first ft_tear_len bytes of @p fd, in 4 blocks
 * each (a future each unless @p teardown) */
static inline void ft_tear_post(nxl_agent_t *a, int fd, int nx, int teardown, nxl_xfer_t **x,
                                nxl_future_t **f)
{
    ft_tear_canceled = 0;
    for (int i = 0; i < nx; i++) {
        ft_tear_calls[i] = 0;
        ck_assert(ft_mk_xfer(a, NXL_READ, ft_tear_v + (size_t)i * ft_tear_len, fd, 0,
                             ft_tear_len / 4, 4, 0, &x[i]) == NXL_SUCCESS);
        ck_assert_int_eq(nxl_xfer_post(x[i], ft_tear_cb, &ft_tear_calls[i],
                                       teardown ? NULL : &f[i]),
                         NXL_SUCCESS);
    }
}

/* destroys @p a (@p teardown: every one CANCELED), or cancels or releases
 * each and waits; then each callback came once */
static inline void ft_tear_end(nxl_agent_t *a, int nx, int teardown, nxl_xfer_t **x,
                               nxl_future_t **f)
{
    if (teardown) {
        nxl_agent_destroy(a);
        ck_assert_int_eq(ft_tear_canceled, nx);
    } else {
        ct_cancel_or_release(x, f, nx);
        ct_run_until_all(a, ft_tear_calls, nx, 60000);
        ck_assert_msg(ft_tear_canceled > 0, "no transfer was canceled in flight");
        ct_release_rest(x, f, nx);
    }
    for (int i = 0; i < nx; i++)
        ck_assert_int_eq(ft_tear_calls[i], 1);
    usleep(100000);
}

#endif
