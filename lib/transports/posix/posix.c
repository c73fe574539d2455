/* SPDX-License-Identifier: BSD-3-Clause */
/* The POSIX transport: host memory (DRAM) to and from files and block
 * devices, within the agent.
 *
 * As NIXL's storage backends, it moves data locally: the agent is its own
 * peer. The application prepares its DRAM side against itself (agent NULL)
 * and the file side against its own name, and makes a WRITE (DRAM → file)
 * or a READ (file → DRAM). The engine's loopback view loads our own
 * metadata back: conn_info is a token unique to this transport instance,
 * load_conn accepts only that token (any other agent's POSIX token gives a
 * NULL connection, which the engine takes as "does not reach that agent"),
 * and a region's key is its registration id.
 *
 * Registration of FILE and BLK ranges (desc.addr = offset, desc.len =
 * length):
 *   - by fd: desc.dev_id is an open fd; the transport keeps its own
 *     duplicate (the caller may close theirs);
 *   - by path: desc.meta = "path=/x/y;mode=M" where M is r, w, rw (default)
 *     or create (rw, created when missing), optionally with ",direct";
 *     desc.dev_id is then the caller's id for that file.
 * DRAM registration only records that the region may be used.
 *
 * I/O runs on one of two engines (backend parameter engine=auto|uring|
 * threads): io_uring with its eventfd in the reactor, or a few threads doing
 * pread/pwrite that signal an eventfd in the reactor; auto takes io_uring
 * and falls back to threads when io_uring cannot be set up. With direct=1
 * (or ",direct" in a file's mode) aligned I/O (buffer, offset and length
 * multiples of 4096) goes through an O_DIRECT descriptor, the rest buffered.
 *
 * Completion statuses: NXL_SUCCESS once every byte moved; NXL_ERR_NOT_FOUND
 * for a read that reaches the end of the file (the data is not there);
 * NXL_ERR_BACKEND for an error of the system (ENOSPC, EIO, ...). The sentence
 * names the file, the offset, the element and how far it got. A failed
 * transfer starts nothing more and completes once none of its I/O is in
 * flight, so its buffers are free when the callback runs.
 *
 * Cancels wait for the I/O: a canceled transfer (nxl_future_cancel,
 * nxl_xfer_release while in flight; NXLT_CAP_CANCEL_WAITS) starts nothing
 * more and completes once what the kernel or the workers hold has ended;
 * teardown (quiesce) waits for all of it before any CANCELED callback runs.
 * So a callback may always free its buffers. */
#include "posix.h"
#include "../common/filemeta.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEY_MAGIC 0x314b5850u  /* "PXK1" */
#define CONN_MAGIC 0x31435850u /* "PXC1" */

/* The md of a DRAM registration: nothing to keep, or, when its 2 MiB
 * ranges go onto huge pages in the background, the region (px_t.drams),
 * whose ranges still queued are dropped at deregistration. */
static char px_dram_md;
typedef struct px_dram {
    uint64_t addr;
    size_t len;
    struct px_dram *next;
} px_dram_t;

/* md is one of u->drams: its link to it, NULL otherwise */
static px_dram_t **px_dram_find(px_t *u, const void *md)
{
    for (px_dram_t **pp = &u->drams; *pp; pp = &(*pp)->next)
        if (*pp == md)
            return pp;
    return NULL;
}

#include "../common/blob_wire.h" /* conn info and keys: magic, token, registration id */
typedef nxlt_blob24_t px_blob_t;

/* ------------------------------------------------------------ files */

static void file_put(px_file_t *f)
{
    if (--f->refs > 0)
        return;
    if (f->fd >= 0)
        close(f->fd);
    if (f->dfd >= 0)
        close(f->dfd);
    free(f);
}

static px_file_t *reg_find(px_t *u, uint64_t regid)
{
    nxlt_reg_t *r = nxlt_regtab_find(&u->regs, regid);
    return r ? NXLT_REG_OF(r, px_file_t, reg) : NULL;
}

/* "path=...;mode=...;direct=0|1" (filemeta.h) */
typedef nxlt_filemeta_t px_meta_t;

static nxl_status_t parse_meta(px_t *u, const nxl_desc_t *d, px_meta_t *m)
{
    return nxlt_filemeta_parse(u->ctx, "POSIX", d, m);
}

static nxl_status_t errno_status(int e)
{
    switch (e) {
    case ENOENT:
    case ENOTDIR:
        return NXL_ERR_NOT_FOUND;
    case EACCES:
    case EPERM:
    case EROFS:
        return NXL_ERR_NOT_ALLOWED;
    case EISDIR:
    case EINVAL:
    case ENAMETOOLONG:
        return NXL_ERR_INVALID_PARAM;
    default:
        return NXL_ERR_BACKEND;
    }
}

static nxl_status_t reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **out)
{
    px_t *u = state;
    if (type == NXL_DRAM) {
        nxlt_thp_add(&u->thp_state, u->ctx, "POSIX", u->thp, PX_THP_SYNC_MAX, d->addr,
                     d->len);
        *out = &px_dram_md;
        if (u->thp == NXLT_THP_BACKGROUND ||
            (u->thp == NXLT_THP_AUTO && d->len > PX_THP_SYNC_MAX)) {
            px_dram_t *r = malloc(sizeof(*r));
            if (!r) { /* no way to drop them later: none in the background */
                nxlt_thp_drop(u->thp_state, d->addr, d->len);
                return NXL_SUCCESS;
            }
            *r = (px_dram_t){.addr = d->addr, .len = d->len, .next = u->drams};
            u->drams = r;
            *out = r;
        }
        return NXL_SUCCESS;
    }
    const char *tn = nxl_mem_name(type);
    px_file_t *f = calloc(1, sizeof(*f));
    if (!f) {
        nxlt_error(u->ctx, "POSIX: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    f->refs = 1;
    f->fd = f->dfd = -1;
    f->type = type;
    f->id = d->dev_id;
    f->off = d->addr;
    f->len = d->len;
    nxl_status_t st;
    int direct = u->direct, acc;
    char dpath[PATH_MAX + 32];
    if (d->meta_len) {
        px_meta_t m;
        if ((st = parse_meta(u, d, &m)) != NXL_SUCCESS)
            goto fail;
        acc = m.acc;
        if (m.direct >= 0)
            direct = m.direct;
        f->fd = open(m.path, acc | O_CLOEXEC | (m.create ? O_CREAT : 0), 0644);
        if (f->fd < 0) {
            int e = errno;
            st = errno_status(e);
            nxlt_error(u->ctx, "POSIX: cannot open '%s' to register %s range %llu+%zu (id %llu): "
                               "%s%s", m.path, tn, (unsigned long long)d->addr, d->len,
                       (unsigned long long)d->dev_id, strerror(e),
                       e == ENOENT && !m.create ? " (mode=create creates a missing file)" : "");
            goto fail;
        }
        snprintf(f->name, sizeof(f->name), "'%.120s' (id %llu)", m.path,
                 (unsigned long long)d->dev_id);
        snprintf(dpath, sizeof(dpath), "%s", m.path);
    } else {
        st = nxl_fio_dup_fd(&u->fio, tn, d, &f->fd, &acc, f->name, sizeof(f->name));
        if (st != NXL_SUCCESS)
            goto fail;
        snprintf(dpath, sizeof(dpath), "/proc/self/fd/%d", f->fd);
    }
    struct stat sb;
    if (fstat(f->fd, &sb) < 0 || !(S_ISREG(sb.st_mode) || S_ISBLK(sb.st_mode))) {
        nxlt_error(u->ctx, "POSIX: %s is not a regular file or a block device; %s ranges are "
                           "read and written with positional I/O", f->name, tn);
        st = NXL_ERR_INVALID_PARAM;
        goto fail;
    }
    if (S_ISBLK(sb.st_mode)) {
        uint64_t size = 0;
        if (ioctl(f->fd, BLKGETSIZE64, &size) == 0 && (f->off > size || f->len > size - f->off)) {
            nxlt_error(u->ctx, "POSIX: %s range %llu+%zu ends past the end of block device %s "
                               "(%llu bytes)", tn, (unsigned long long)f->off, f->len, f->name,
                       (unsigned long long)size);
            st = NXL_ERR_INVALID_PARAM;
            goto fail;
        }
    }
    f->can_read = acc != O_WRONLY;
    f->can_write = acc != O_RDONLY;
    if (direct) {
        f->dfd = open(dpath, acc | O_DIRECT | O_CLOEXEC);
        if (f->dfd < 0)
            nxlt_log(u->ctx, NXL_LOG_INFO, "POSIX: O_DIRECT open of %s refused (%s); its I/O "
                                           "stays buffered", f->name, strerror(errno));
    }
    f->reg.regid = ++u->next_regid;
    if (nxlt_regtab_add(&u->regs, &f->reg) < 0) {
        nxlt_error(u->ctx, "POSIX: out of memory");
        st = NXL_ERR_UNKNOWN;
        goto fail;
    }
    nxlt_log(u->ctx, NXL_LOG_DEBUG, "POSIX: registered %s %s range %llu+%zu (%s%s%s)", tn,
             f->name, (unsigned long long)f->off, f->len, f->can_read ? "r" : "",
             f->can_write ? "w" : "", f->dfd >= 0 ? ", O_DIRECT" : "");
    *out = f;
    return NXL_SUCCESS;
fail:
    file_put(f);
    return st;
}

static void dereg(void *state, void *md)
{
    px_t *u = state;
    if (!md || md == &px_dram_md)
        return;
    px_dram_t **pp = px_dram_find(u, md);
    if (pp) { /* nothing collapsed in it once the application may free it */
        px_dram_t *r = *pp;
        nxlt_thp_drop(u->thp_state, r->addr, r->len);
        *pp = r->next;
        free(r);
        return;
    }
    px_file_t *f = md;
    nxlt_regtab_del(&u->regs, &f->reg);
    file_put(f);
}

static nxl_status_t pack_key(void *state, void *md, void **buf, size_t *len)
{
    px_t *u = state;
    *buf = NULL;
    *len = 0;
    if (md == &px_dram_md || px_dram_find(u, md))
        return NXL_SUCCESS; /* DRAM regions are only ever the local side */
    return nxl_fio_pack_key(&u->fio, ((px_file_t *)md)->reg.regid, buf, len);
}

static nxl_status_t load_key(void *state, void *conn, const void *buf, size_t len, void **rkey)
{
    px_t *u = state;
    px_blob_t k;
    *rkey = NULL;
    if (conn != u || len != sizeof(k)) {
        nxlt_error(u->ctx, "POSIX: a region key of %zu bytes that is not this transport's", len);
        return NXL_ERR_MISMATCH;
    }
    px_file_t *f = nxlt_blob24_parse(buf, len, KEY_MAGIC, &k) == 0 && k.token == u->fio.token
                       ? reg_find(u, k.regid)
                       : NULL;
    if (!f) {
        nxlt_error(u->ctx, "POSIX: region key %llu names no registered file range",
                   (unsigned long long)k.regid);
        return NXL_ERR_NOT_FOUND;
    }
    f->refs++;
    *rkey = f;
    return NXL_SUCCESS;
}

static void unload_key(void *state, void *rkey)
{
    if (rkey)
        file_put(rkey);
}

/* ------------------------------------------------------------ transfers */

/* the file-I/O core's questions (../common/fileio.h) */
static void seg_init(void *owner, nxl_fio_seg_t *s, const nxlt_iov_t *v)
{
    px_file_t *f = v->rkey;
    f->refs++;
    s->file = f;
    s->fname = f->name;
}

static void seg_file_put(void *owner, void *file)
{
    file_put(file);
}

/* the fd of a segment's next read or write: O_DIRECT when it is aligned */
static int seg_fd(nxl_fio_t *fio, nxl_fio_seg_t *s, size_t *len)
{
    px_t *u = fio->owner;
    size_t n = s->left < PX_MAX_IO ? s->left : PX_MAX_IO;
    px_file_t *f = s->file;
    s->direct = f->dfd >= 0 && !s->no_direct && !((uintptr_t)s->buf % PX_ALIGN) &&
                !(s->off % PX_ALIGN) && !(n % PX_ALIGN);
    if (s->direct)
        u->n_direct++;
    else
        u->n_buffered++;
    s->iofd = s->direct ? f->dfd : f->fd;
    s->ion = n;
    *len = n;
    return s->iofd;
}

static const nxl_fio_ops_t px_fio_ops = {
    .name = "POSIX",
    .conn_magic = CONN_MAGIC,
    .key_magic = KEY_MAGIC,
    .ltype = NXL_DRAM,
    .rmask = (1u << NXL_FILE) | (1u << NXL_BLK),
    .rtypes = "FILE or BLK",
    .rtypes_query = "FILE and BLK",
    .seg_init = seg_init,
    .file_put = seg_file_put,
    .seg_fd = seg_fd,
};

static nxl_status_t post(void *state, nxlt_op_t *op, const nxlt_xfer_t *t)
{
    px_t *u = state;
    nxl_status_t st = nxl_fio_post_check(&u->fio, t);
    if (st != NXL_SUCCESS)
        return st;
    bool write = t->op == NXL_WRITE;
    for (size_t i = 0; i < t->n; i++) {
        px_file_t *f = t->iov[i].rkey;
        if (!f) {
            nxlt_error(u->ctx, "POSIX: element %zu has no registered file range", i);
            return NXL_ERR_NOT_SUPPORTED;
        }
        if (write ? !f->can_write : !f->can_read)
            return nxl_fio_refuse_access(&u->fio, i, write, f->name);
    }
    return nxl_fio_post(&u->fio, op, t);
}

/* ------------------------------------------------------------ query */

static nxl_status_t query(void *state, nxl_mem_t type, const nxl_desc_t *d, nxl_query_t *res)
{
    px_t *u = state;
    struct stat sb;
    px_meta_t m;
    nxl_status_t st = nxl_fio_query(&u->fio, type, d, res, &sb, &m);
    if (st != NXL_SUCCESS || !res->exists)
        return st;
    int fd = -1;
    if (S_ISBLK(sb.st_mode)) /* its size: the device's, not the inode's */
        fd = m.path[0] ? open(m.path, O_RDONLY | O_CLOEXEC)
                       : fcntl((int)d->dev_id, F_DUPFD_CLOEXEC, 0);
    if (fd >= 0) {
        uint64_t size;
        if (ioctl(fd, BLKGETSIZE64, &size) == 0)
            res->size = size;
        close(fd);
    }
    return NXL_SUCCESS;
}

/* ------------------------------------------------------------ instance */

static int probe(char *why, size_t cap)
{
#ifdef NXL_HAVE_LIBURING
    snprintf(why, cap, "files and block devices through io_uring (thread-pool fallback)");
#else
    snprintf(why, cap, "files and block devices through a thread pool (built without liburing)");
#endif
    return 1;
}

static void destroy(void *state);

static nxl_status_t create(nxlt_ctx_t *ctx, const nxl_param_t *params, size_t n, void **out)
{
    /* the engine has refused keys px_params does not list */
    static const char *const engines[] = {"auto", "uring", "threads", NULL};
    enum { ENGINE_AUTO, ENGINE_URING, ENGINE_THREADS };
    bool direct = false, coop = true;
    int thp = NXLT_THP_AUTO, engine = ENGINE_AUTO;
    uint64_t depth = PX_DEF_DEPTH, nthreads = PX_DEF_THREADS, chunk = PX_DEF_CHUNK;
    nxl_status_t st;
    if ((st = nxlt_param_bool(ctx, params, n, "direct", &direct)) != NXL_SUCCESS ||
        (st = nxlt_param_bool(ctx, params, n, "coop_taskrun", &coop)) != NXL_SUCCESS ||
        (st = nxlt_thp_param(ctx, params, n, &thp)) != NXL_SUCCESS ||
        (st = nxlt_param_uint(ctx, params, n, "queue_depth", 1, 32768, &depth)) != NXL_SUCCESS ||
        (st = nxlt_param_uint(ctx, params, n, "threads", 1, 64, &nthreads)) != NXL_SUCCESS ||
        (st = nxlt_param_size(ctx, params, n, "chunk", PX_ALIGN, PX_MAX_IO, &chunk)) !=
            NXL_SUCCESS)
        return st;
    if (chunk % PX_ALIGN) {
        nxlt_error(ctx, "POSIX: chunk=%s: a multiple of %u up to %u bytes",
                   nxlt_param(params, n, "chunk"), PX_ALIGN, PX_MAX_IO);
        return NXL_ERR_INVALID_PARAM;
    }
    if ((st = nxlt_param_choice(ctx, params, n, "engine", engines, &engine)) != NXL_SUCCESS)
        return st;
    px_t *u = calloc(1, sizeof(*u));
    if (!u) {
        nxlt_error(ctx, "POSIX: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    u->ctx = ctx;
    nxl_fio_t *fio = &u->fio;
    fio->chunk = chunk;
    fio->depth = (unsigned)depth;
    fio->nthreads = (unsigned)nthreads;
    fio->coop = coop;
    u->direct = direct;
    /* auto: registered DRAM onto 2 MiB pages when O_DIRECT is asked for */
    u->thp = thp;
    if (u->thp == NXLT_THP_AUTO && !u->direct)
        u->thp = NXLT_THP_OFF;
    int regs = nxlt_regtab_init(&u->regs);
    if (nxl_fio_init(fio, ctx, &px_fio_ops, u) < 0 || regs < 0) {
        nxlt_error(ctx, "POSIX: out of memory");
        destroy(u);
        return NXL_ERR_UNKNOWN;
    }
    char why[256] = "";
    if (engine != ENGINE_THREADS) {
        if (nxl_fio_engine_uring.start(fio, why, sizeof(why)) == 0) {
            fio->eng = &nxl_fio_engine_uring;
        } else if (engine == ENGINE_URING) {
            nxlt_error(ctx, "POSIX: engine=uring asked for, but the io_uring engine could not "
                            "start: %s; use engine=auto or threads",
                       why);
            destroy(u);
#ifdef NXL_HAVE_LIBURING
            return NXL_ERR_BACKEND;
#else
            return NXL_ERR_NOT_SUPPORTED;
#endif
        } else {
            nxlt_log(ctx, NXL_LOG_INFO, "POSIX: the io_uring engine could not start (%s); using "
                                        "the thread-pool engine", why);
        }
    }
    if (!fio->eng) {
        char twhy[256] = "";
        if (nxl_fio_engine_threads.start(fio, twhy, sizeof(twhy)) != 0) {
            nxlt_error(ctx, "POSIX: the thread-pool engine failed to start: %s", twhy);
            destroy(u);
            return NXL_ERR_BACKEND;
        }
        fio->eng = &nxl_fio_engine_threads;
    }
    size_t l = strlen(fio->desc);
    static const char *const thp_mode[] = {
        "off", "at registration up to 64 MiB, larger regions in the background",
        "in the background", "at registration"};
    snprintf(fio->desc + l, sizeof(fio->desc) - l, "; O_DIRECT %s; chunks of %zu KiB; "
                                                   "registered DRAM onto 2 MiB pages: %s",
             u->direct ? "for aligned I/O" : "per file (mode=...,direct)", fio->chunk >> 10,
             thp_mode[u->thp]);
    nxlt_log(ctx, NXL_LOG_INFO, "POSIX: I/O engine %s", fio->desc);
    *out = u;
    return NXL_SUCCESS;
}

static void destroy(void *state)
{
    px_t *u = state;
    nxl_fio_quiesce(&u->fio);
    char thp[256];
    nxlt_thp_stop(&u->thp_state, thp, sizeof(thp));
    for (px_dram_t *r = u->drams, *n; r; r = n) {
        n = r->next;
        free(r);
    }
    u->drams = NULL;
    nxlt_log(u->ctx, NXL_LOG_INFO,
             "POSIX statistics: %llu transfers, %llu I/Os (%llu direct, %llu buffered, %llu "
             "short) in %llu submissions; DRAM onto 2 MiB pages: %s",
             (unsigned long long)u->fio.n_xfers,
             (unsigned long long)(u->n_direct + u->n_buffered), (unsigned long long)u->n_direct,
             (unsigned long long)u->n_buffered, (unsigned long long)u->fio.n_short,
             (unsigned long long)u->fio.n_submits, thp);
    nxl_fio_fini(&u->fio);
    if (u->regs.v) {
        for (nxlt_reg_t *r; (r = nxlt_regtab_pop(&u->regs));)
            file_put(NXLT_REG_OF(r, px_file_t, reg));
        nxlt_regtab_fini(&u->regs);
    }
    free(u);
}

static const char *describe(void *state)
{
    return ((px_t *)state)->fio.desc;
}

/* What create() takes: the engine refuses other keys, nxl_info -v lists
 * these (keep them with create()'s parsing) */
_Static_assert(PX_DEF_DEPTH == 256 && PX_DEF_THREADS == 4 && PX_DEF_CHUNK == 1048576,
               "px_params states the defaults");
static const nxl_param_info_t px_params[] = {
    {"engine", "auto", "auto (io_uring, else a pread/pwrite thread pool), uring, threads"},
    {"direct", "0", "1: O_DIRECT for aligned I/O (buffer, offset, length multiples of 4096)"},
    {"queue_depth", "256", "io_uring entries (1 to 32768)"},
    {"threads", "4", "thread-pool size (1 to 64)"},
    {"chunk", "1048576", "larger elements split into parallel chunks of this many bytes "
     "(a multiple of 4096)"},
    {"coop_taskrun", "1", "io_uring: 1 completions as cooperative task work, 0 an interrupt each"},
    {"thp_collapse", "auto", "registered DRAM onto 2 MiB pages: auto (with direct=1), sync, "
     "background, off"},
};

_Static_assert(offsetof(px_t, fio) == 0, "the nxl_fio_* table functions take px_t as its nxl_fio_t");

NXLT_MODULE_EXPORT const nxlt_ops_t nxlt_posix_ops = {
    NXLT_OPS_HEAD("POSIX", (1u << NXL_DRAM) | (1u << NXL_FILE) | (1u << NXL_BLK),
                  NXLT_CAP_LOCAL | NXLT_CAP_CANCEL_WAITS | NXLT_CAP_ANY_THREAD, px_params),
    .probe = probe,
    .create = create,
    .destroy = destroy,
    .reg = reg,
    .dereg = dereg,
    .pack_key = pack_key,
    .load_key = load_key,
    .unload_key = unload_key,
    .post = post,
    NXL_FIO_OPS,
    .describe = describe,
    .query = query,
};
