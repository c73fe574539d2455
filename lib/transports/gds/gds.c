/* SPDX-License-Identifier: BSD-3-Clause */
/* The GDS transport: GPU memory (VRAM) to and from files through NVIDIA's
 * cuFile (GPUDirect Storage), within the agent.
 *
 * As the POSIX transport, it moves data locally: the local list is VRAM,
 * the list prepared against the agent's own name is FILE; a WRITE copies
 * VRAM to the file, a READ the file into VRAM. Where GDS proper is not set
 * up (no nvidia-fs kernel module) cuFile runs in its compatibility mode,
 * through host bounce buffers: the same calls, the same results.
 *
 * Registration: a VRAM region (device memory of device dev_id, inside one
 * allocation) is registered with cuFileBufRegister, so that cuFile pins
 * and maps it once; a FILE range (desc.addr = offset, desc.len = length)
 * by an open fd in desc.dev_id (the transport keeps a duplicate), or by
 * "path=...;mode=r|w|rw|create" in desc.meta. Ranges of one file opened
 * the same way share one cuFileHandleRegister handle.
 *
 * Transfers run on the file-I/O core POSIX uses too (../common/fileio.h):
 * elements are cut into chunks (chunk=BYTES, 8 MiB) and the core's thread
 * pool (threads=N, 4) runs cuFileRead / cuFileWrite on them, at most
 * queue_depth (2 per thread) at a time; a finished chunk goes on a done
 * list and an eventfd wakes the reactor, which accounts it and hands the
 * workers the next. The reactor thread never calls cuFile's I/O. The
 * synchronous calls are used because they work in every mode cuFile runs
 * in, compatibility mode included; the stream API (cuFileReadAsync) and
 * the batch API are left for when they have been tried on a GPU.
 *
 * Completion statuses: NXL_SUCCESS once every byte moved; NXL_ERR_NOT_FOUND
 * for a read that reaches the end of the file; NXL_ERR_BACKEND for a
 * system error (errno) or a cuFile error (its status code, by name). A
 * failed or canceled transfer starts nothing more and completes once none
 * of its chunks is with a worker (NXLT_CAP_CANCEL_WAITS), so its buffers
 * are free when the callback runs; teardown waits for the workers.
 *
 * libcufile is loaded at run time (libcufile.so.0, .1, libcufile.so, or
 * what $NXL_CUFILE_LIB names) and the CUDA runtime as the CUDA transport
 * loads it (../common/cudart.c): libnxl links neither. */
#include "config.h"
#include "../common/cudart.h"
#include "../common/fileio.h"
#include "cufile_abi.h"
#include "../common/filemeta.h"
#include "../common/regspan.h"

#include <nxl/transport.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/blob_wire.h"
#include "../common/regtab.h"
#include "../common/pstr.h"

#define KEY_MAGIC 0x314b4447u  /* "GDK1" */
#define CONN_MAGIC 0x31434447u /* "GDC1" */
#define GDS_DEF_THREADS 4
#define GDS_MAX_THREADS 64
#define GDS_DEF_CHUNK (8u << 20)
#define GDS_ALIGN 4096u

/* ------------------------------------------------------------ libcufile */

typedef struct gds_lib {
    nxl_cufile_driver_open_fn driver_open;
    nxl_cufile_driver_close_fn driver_close;
    nxl_cufile_handle_register_fn handle_register;
    nxl_cufile_handle_deregister_fn handle_deregister;
    nxl_cufile_buf_register_fn buf_register;
    nxl_cufile_buf_deregister_fn buf_deregister;
    nxl_cufile_read_fn read;
    nxl_cufile_write_fn write;
    nxl_cufile_get_version_fn get_version; /* may be NULL (older libraries) */
    const char *name;
    const nxl_cuda_rt_t *rt;
} gds_lib_t;

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static gds_lib_t lib;
static bool lib_ok;
static char lib_why[200];

/* process-wide: cuFileDriverOpen once for all instances, closed with the last */
static pthread_mutex_t drv_mu = PTHREAD_MUTEX_INITIALIZER;
static int drv_users;

static void lib_load(void)
{
    const char *env = getenv("NXL_CUFILE_LIB");
    static const char *const names[] = {"libcufile.so.0", "libcufile.so.1", "libcufile.so"};
    void *h = NULL;
    char first[160] = "";
    if (env && *env) {
        h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        lib.name = env;
        if (!h)
            snprintf(first, sizeof(first), "%s", dlerror());
    } else {
        for (size_t i = 0; i < sizeof(names) / sizeof(*names) && !h; i++) {
            h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
            lib.name = names[i];
            const char *e = h ? NULL : dlerror();
            if (!h && !i)
                snprintf(first, sizeof(first), "%s", e ? e : "dlopen failed");
        }
    }
    if (!h) {
        char *tail = strstr(first, ": No such file or directory");
        if (tail)
            *tail = 0;
        snprintf(lib_why, sizeof(lib_why), "no libcufile (%.150s)", first);
        return;
    }
    struct {
        void **slot;
        const char *sym;
    } need[] = {
        {(void **)&lib.driver_open, "cuFileDriverOpen"},
        {(void **)&lib.handle_register, "cuFileHandleRegister"},
        {(void **)&lib.handle_deregister, "cuFileHandleDeregister"},
        {(void **)&lib.buf_register, "cuFileBufRegister"},
        {(void **)&lib.buf_deregister, "cuFileBufDeregister"},
        {(void **)&lib.read, "cuFileRead"},
        {(void **)&lib.write, "cuFileWrite"},
    };
    for (size_t i = 0; i < sizeof(need) / sizeof(*need); i++)
        if (!(*need[i].slot = dlsym(h, need[i].sym))) {
            snprintf(lib_why, sizeof(lib_why), "no libcufile (%s lacks %s)", lib.name,
                     need[i].sym);
            return;
        }
    if (!(*(void **)&lib.driver_close = dlsym(h, "cuFileDriverClose_v2")))
        *(void **)&lib.driver_close = dlsym(h, "cuFileDriverClose");
    *(void **)&lib.get_version = dlsym(h, "cuFileGetVersion");
    char why[160];
    int kind;
    lib.rt = nxl_cuda_rt_get(&kind, why, sizeof(why));
    if (!lib.rt) {
        snprintf(lib_why, sizeof(lib_why), "%s", why);
        return;
    }
    lib_ok = true;
}

static const gds_lib_t *lib_get(char *why, size_t cap)
{
    pthread_once(&lib_once, lib_load);
    if (!lib_ok) {
        if (why && cap)
            snprintf(why, cap, "%s", lib_why);
        return NULL;
    }
    return &lib;
}

static const char *cufile_errname(int e)
{
    switch (e) {
    case NXL_CUFILE_DRIVER_NOT_INITIALIZED: return "CU_FILE_DRIVER_NOT_INITIALIZED";
    case NXL_CUFILE_DRIVER_INVALID_PROPS: return "CU_FILE_DRIVER_INVALID_PROPS";
    case NXL_CUFILE_DRIVER_VERSION_MISMATCH: return "CU_FILE_DRIVER_VERSION_MISMATCH";
    case NXL_CUFILE_DRIVER_CLOSING: return "CU_FILE_DRIVER_CLOSING";
    case NXL_CUFILE_PLATFORM_NOT_SUPPORTED: return "CU_FILE_PLATFORM_NOT_SUPPORTED";
    case NXL_CUFILE_IO_NOT_SUPPORTED: return "CU_FILE_IO_NOT_SUPPORTED";
    case NXL_CUFILE_DEVICE_NOT_SUPPORTED: return "CU_FILE_DEVICE_NOT_SUPPORTED";
    case NXL_CUFILE_NVFS_DRIVER_ERROR: return "CU_FILE_NVFS_DRIVER_ERROR";
    case NXL_CUFILE_CUDA_DRIVER_ERROR: return "CU_FILE_CUDA_DRIVER_ERROR";
    case NXL_CUFILE_CUDA_POINTER_INVALID: return "CU_FILE_CUDA_POINTER_INVALID";
    case NXL_CUFILE_CUDA_MEMORY_TYPE_INVALID: return "CU_FILE_CUDA_MEMORY_TYPE_INVALID";
    case NXL_CUFILE_CUDA_POINTER_RANGE_ERROR: return "CU_FILE_CUDA_POINTER_RANGE_ERROR";
    case NXL_CUFILE_CUDA_CONTEXT_MISMATCH: return "CU_FILE_CUDA_CONTEXT_MISMATCH";
    case NXL_CUFILE_INVALID_MAPPING_SIZE: return "CU_FILE_INVALID_MAPPING_SIZE";
    case NXL_CUFILE_INVALID_MAPPING_RANGE: return "CU_FILE_INVALID_MAPPING_RANGE";
    case NXL_CUFILE_INVALID_FILE_TYPE: return "CU_FILE_INVALID_FILE_TYPE";
    case NXL_CUFILE_INVALID_FILE_OPEN_FLAG: return "CU_FILE_INVALID_FILE_OPEN_FLAG";
    case NXL_CUFILE_DIO_NOT_SET: return "CU_FILE_DIO_NOT_SET";
    case NXL_CUFILE_INVALID_VALUE: return "CU_FILE_INVALID_VALUE";
    case NXL_CUFILE_MEMORY_ALREADY_REGISTERED: return "CU_FILE_MEMORY_ALREADY_REGISTERED";
    case NXL_CUFILE_MEMORY_NOT_REGISTERED: return "CU_FILE_MEMORY_NOT_REGISTERED";
    case NXL_CUFILE_PERMISSION_DENIED: return "CU_FILE_PERMISSION_DENIED";
    case NXL_CUFILE_HANDLE_NOT_REGISTERED: return "CU_FILE_HANDLE_NOT_REGISTERED";
    case NXL_CUFILE_HANDLE_ALREADY_REGISTERED: return "CU_FILE_HANDLE_ALREADY_REGISTERED";
    case NXL_CUFILE_DEVICE_NOT_FOUND: return "CU_FILE_DEVICE_NOT_FOUND";
    case NXL_CUFILE_INTERNAL_ERROR: return "CU_FILE_INTERNAL_ERROR";
    case NXL_CUFILE_NVFS_SETUP_ERROR: return "CU_FILE_NVFS_SETUP_ERROR";
    case NXL_CUFILE_IO_DISABLED: return "CU_FILE_IO_DISABLED";
    case NXL_CUFILE_GPU_MEMORY_PINNING_FAILED: return "CU_FILE_GPU_MEMORY_PINNING_FAILED";
    default: return "a cuFile error";
    }
}

/* "CU_FILE_INVALID_VALUE (5022)", with the CUDA error when there is one */
static const char *cstatus(nxl_cufile_status_t s, char *buf, size_t cap)
{
    if (s.err == NXL_CUFILE_CUDA_DRIVER_ERROR)
        snprintf(buf, cap, "%s (%d, CUresult %d)", cufile_errname(s.err), s.err, s.cu_err);
    else
        snprintf(buf, cap, "%s (%d)", cufile_errname(s.err), s.err);
    return buf;
}

/* ------------------------------------------------------------ structures */

typedef struct gds gds_t;

/* one open file with its cuFile handle, shared by the ranges registered on it */
typedef struct gds_file {
    int fd;
    nxl_cufile_handle_t fh;
    dev_t sdev;
    ino_t ino;
    int acc;                 /* O_RDONLY, O_WRONLY, O_RDWR, with O_DIRECT */
    int refs;                /* ranges and chunks in flight */
    LIST_ENTRY(gds_file) link;
} gds_file_t;

/* a registration: a VRAM region, or a FILE range */
typedef struct gds_reg {
    nxlt_regspan_t span;     /* first (nxlt_regspan_new); VRAM: the region, FILE: the offset */
    int dev;                 /* VRAM: the device */
    bool buf_reg;            /* VRAM: cuFileBufRegister'd */
    gds_file_t *file;        /* FILE */
    char name[160];          /* FILE: "fd 5" or "'/x/y'" */
    nxlt_reg_t reg;          /* FILE: in the registry, by reg.regid (what pack_key hands out) */
    int refs;                /* FILE: the registration and the keys loaded */
} gds_reg_t;

struct gds {
    nxl_fio_t fio;           /* first (the nxl_fio_* table functions take gds_t as it);
                              * transfers: chunk, nthreads, tp_max (the queue depth); token */
    nxlt_ctx_t *ctx;
    const gds_lib_t *L;
    nxlt_regtab_t regs;      /* FILE registrations, by regid */
    uint64_t next_regid;
    LIST_HEAD(, gds_file) files;
    bool drv_open;
    uint64_t n_bytes, n_short; /* statistics (transfers, chunks: the core's) */
    char desc[320];
};

/* ------------------------------------------------------------ workers */

static __thread int worker_dev = -1;

/* the core's thread pool, on a worker: the whole chunk, or until an error */
static void chunk_io(nxl_fio_t *fio, nxl_fio_seg_t *s)
{
    gds_t *u = fio->owner;
    const gds_lib_t *L = u->L;
    gds_reg_t *vr = s->lmd;
    gds_file_t *file = s->file;
    char *base = (char *)vr->span.addr; /* what cuFile is given: the registered base and an offset */
    /* cuFile works in the context of the buffer's device */
    if (worker_dev != vr->dev && L->rt->cudaSetDevice(vr->dev) == cudaSuccess)
        worker_dev = vr->dev;
    s->res = 0;
    s->lib_err = false;
    while (s->left) {
        size_t n = s->left;
        off_t fo = (off_t)s->off, bo = (off_t)(s->buf - base);
        errno = 0;
        ssize_t r = s->xop->write ? L->write(file->fh, base, n, fo, bo)
                                  : L->read(file->fh, base, n, fo, bo);
        if (r > 0) {
            if ((size_t)r < n)
                __atomic_fetch_add(&u->n_short, 1, __ATOMIC_RELAXED);
            s->buf += r;
            s->off += (uint64_t)r;
            s->left -= (size_t)r;
            s->res = r;
            continue;
        }
        if (r == 0) {
            s->res = 0;
            break;
        }
        if (r == -1 && errno == EINTR)
            continue;
        if (r == -1) {
            s->res = -(errno ? errno : EIO);
        } else {
            s->res = r;
            s->lib_err = true;
        }
        break;
    }
}

/* ------------------------------------------------------------ files */

static void file_put(gds_t *u, gds_file_t *f)
{
    if (--f->refs > 0)
        return;
    LIST_REMOVE(f, link);
    u->L->handle_deregister(f->fh);
    close(f->fd);
    free(f);
}

/* the shared handle of the file behind @p fd (taken over, or closed) */
static nxl_status_t file_get(gds_t *u, int fd, int acc, const char *name, gds_file_t **out)
{
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        nxlt_error(u->ctx, "GDS: %s is not a regular file; cuFile reads and writes files", name);
        close(fd);
        return NXL_ERR_INVALID_PARAM;
    }
    int fl = fcntl(fd, F_GETFL);
    acc = fl >= 0 ? fl & (O_ACCMODE | O_DIRECT) : acc;
    gds_file_t *f;
    LIST_FOREACH(f, &u->files, link)
    if (f->sdev == sb.st_dev && f->ino == sb.st_ino && f->acc == acc) {
        close(fd);
        f->refs++;
        *out = f;
        return NXL_SUCCESS;
    }
    f = calloc(1, sizeof(*f));
    if (!f) {
        close(fd);
        nxlt_error(u->ctx, "GDS: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    nxl_cufile_descr_t d;
    memset(&d, 0, sizeof(d));
    d.type = NXL_CUFILE_HANDLE_TYPE_OPAQUE_FD;
    d.handle.fd = fd;
    nxl_cufile_status_t s = u->L->handle_register(&f->fh, &d);
    if (s.err != NXL_CUFILE_SUCCESS) {
        char b[96];
        nxlt_error(u->ctx, "GDS: cuFileHandleRegister of %s failed: %s%s", name,
                   cstatus(s, b, sizeof(b)),
                   s.err == NXL_CUFILE_INVALID_FILE_OPEN_FLAG || s.err == NXL_CUFILE_DIO_NOT_SET
                       ? " (GDS proper needs the file opened with O_DIRECT: mode=...,direct)"
                       : "");
        close(fd);
        free(f);
        return NXL_ERR_BACKEND;
    }
    f->fd = fd;
    f->sdev = sb.st_dev;
    f->ino = sb.st_ino;
    f->acc = acc;
    f->refs = 1;
    LIST_INSERT_HEAD(&u->files, f, link);
    *out = f;
    return NXL_SUCCESS;
}

/* the descriptor meta (filemeta.h: "path=/x/y;mode=r|w|rw|create[,direct]"),
 * the file opened */
static nxl_status_t open_meta(gds_t *u, const nxl_desc_t *d, int *fd, int *acc, char *name,
                              size_t cap)
{
    nxlt_filemeta_t m;
    nxl_status_t st = nxlt_filemeta_parse(u->ctx, "GDS", d, &m);
    if (st != NXL_SUCCESS)
        return st;
    const char *path = m.path;
    int a = m.acc, flags = (m.create ? O_CREAT : 0) | (m.direct == 1 ? O_DIRECT : 0);
    *fd = open(path, a | flags | O_CLOEXEC, 0644);
    if (*fd < 0) {
        int e = errno;
        nxlt_error(u->ctx, "GDS: cannot open '%s' to register FILE range %llu+%zu: %s", path,
                   (unsigned long long)d->addr, d->len, strerror(e));
        return e == ENOENT ? NXL_ERR_NOT_FOUND : e == EACCES ? NXL_ERR_NOT_ALLOWED
                                                             : NXL_ERR_BACKEND;
    }
    *acc = a;
    snprintf(name, cap, "'%.140s'", path);
    return NXL_SUCCESS;
}

/* ------------------------------------------------------------ memory */

static void freg_put(gds_t *u, gds_reg_t *r)
{
    if (--r->refs > 0)
        return;
    file_put(u, r->file);
    free(r);
}

static nxl_status_t reg_vram(gds_t *u, const nxl_desc_t *d, gds_reg_t *r)
{
    const nxl_cuda_rt_t *rt = u->L->rt;
    char b[512];
    int vst = nxl_cuda_vram_check(rt, "GDS", d->addr, d->len, d->dev_id, NULL, NULL, b,
                                  sizeof(b));
    if (vst != 0) {
        nxlt_error(u->ctx, "%s", b);
        return (nxl_status_t)vst;
    }
    int prev = 0;
    rt->cudaGetDevice(&prev);
    if (prev != (int)d->dev_id)
        rt->cudaSetDevice((int)d->dev_id);
    nxl_cufile_status_t s = u->L->buf_register((const void *)d->addr, d->len, 0);
    if (prev != (int)d->dev_id)
        rt->cudaSetDevice(prev);
    if (s.err != NXL_CUFILE_SUCCESS) {
        nxlt_error(u->ctx, "GDS: cuFileBufRegister of VRAM region 0x%lx+%zu on device %llu "
                   "failed: %s; register smaller regions, or this one with the CUDA transport "
                   "only (nxl_mem_register with its backend)", (unsigned long)d->addr, d->len,
                   (unsigned long long)d->dev_id, cstatus(s, b, sizeof(b)));
        return NXL_ERR_BACKEND;
    }
    r->buf_reg = true;
    r->dev = (int)d->dev_id;
    return NXL_SUCCESS;
}

static nxl_status_t reg_file(gds_t *u, const nxl_desc_t *d, gds_reg_t *r)
{
    int fd, acc;
    nxl_status_t st;
    if (d->meta_len) {
        if ((st = open_meta(u, d, &fd, &acc, r->name, sizeof(r->name))) != NXL_SUCCESS)
            return st;
    } else if ((st = nxl_fio_dup_fd(&u->fio, "FILE", d, &fd, &acc, r->name, sizeof(r->name))) !=
               NXL_SUCCESS) {
        return st;
    }
    if ((st = file_get(u, fd, acc, r->name, &r->file)) != NXL_SUCCESS)
        return st;
    r->reg.regid = ++u->next_regid;
    r->refs = 1;
    if (nxlt_regtab_add(&u->regs, &r->reg) < 0) {
        file_put(u, r->file);
        r->file = NULL;
        nxlt_error(u->ctx, "GDS: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    return NXL_SUCCESS;
}

static nxl_status_t reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **md)
{
    gds_t *u = state;
    gds_reg_t *r = nxlt_regspan_new(u->ctx, "GDS", sizeof(*r), type, d);
    if (!r)
        return NXL_ERR_UNKNOWN;
    nxl_status_t st = type == NXL_VRAM ? reg_vram(u, d, r) : reg_file(u, d, r);
    if (st != NXL_SUCCESS) {
        free(r);
        return st;
    }
    nxlt_log(u->ctx, NXL_LOG_DEBUG, "GDS: registered %s 0x%lx+%zu%s%s", nxl_mem_name(type),
             (unsigned long)d->addr, d->len, type == NXL_FILE ? " of " : "",
             type == NXL_FILE ? r->name : "");
    *md = r;
    return NXL_SUCCESS;
}

static void dereg(void *state, void *md)
{
    gds_t *u = state;
    gds_reg_t *r = md;
    if (r->span.type == NXL_VRAM) {
        if (r->buf_reg) {
            nxl_cufile_status_t s = u->L->buf_deregister((const void *)r->span.addr);
            if (s.err != NXL_CUFILE_SUCCESS) {
                char b[96];
                nxlt_log(u->ctx, NXL_LOG_WARN, "GDS: cuFileBufDeregister of 0x%lx failed: %s",
                         (unsigned long)r->span.addr, cstatus(s, b, sizeof(b)));
            }
        }
        free(r);
        return;
    }
    nxlt_regtab_del(&u->regs, &r->reg);
    freg_put(u, r);
}

static nxl_status_t pack_key(void *state, void *md, void **buf, size_t *len)
{
    gds_t *u = state;
    gds_reg_t *r = md;
    *buf = NULL;
    *len = 0;
    if (r->span.type != NXL_FILE)
        return NXL_SUCCESS; /* VRAM is only ever the local side */
    return nxl_fio_pack_key(&u->fio, r->reg.regid, buf, len);
}

static nxl_status_t load_key(void *state, void *conn, const void *buf, size_t len, void **rkey)
{
    gds_t *u = state;
    nxlt_blob24_t k;
    *rkey = NULL;
    if (conn != u || nxlt_blob24_parse(buf, len, KEY_MAGIC, &k) != 0 || k.token != u->fio.token) {
        nxlt_error(u->ctx, "GDS: a region key of %zu bytes that is not this transport's", len);
        return NXL_ERR_MISMATCH;
    }
    nxlt_reg_t *e = nxlt_regtab_find(&u->regs, k.regid);
    gds_reg_t *r = e ? NXLT_REG_OF(e, gds_reg_t, reg) : NULL;
    if (!r) {
        nxlt_error(u->ctx, "GDS: region key %llu names no registered file range",
                   (unsigned long long)k.regid);
        return NXL_ERR_NOT_FOUND;
    }
    r->refs++;
    *rkey = r;
    return NXL_SUCCESS;
}

static void unload_key(void *state, void *rkey)
{
    if (rkey)
        freg_put(state, rkey);
}

/* ------------------------------------------------------------ transfers */

/* the file-I/O core's questions (../common/fileio.h) */
static void seg_init(void *owner, nxl_fio_seg_t *s, const nxlt_iov_t *v)
{
    gds_reg_t *fr = v->rkey;
    s->lmd = v->lmd;
    s->file = fr->file;
    fr->file->refs++;
    s->fname = fr->name;
}

static void seg_file_put(void *owner, void *file)
{
    file_put(owner, file);
}

/* on the reactor: what a worker's chunk_io did */
static void chunk_result(nxl_fio_t *fio, nxl_fio_seg_t *s)
{
    gds_t *u = fio->owner;
    nxl_fio_xop_t *x = s->xop;
    size_t done = s->total - s->left;
    u->n_bytes += done;
    if (fio->closing || x->failed) {
        nxl_fio_seg_done(fio, s);
        return;
    }
    const char *verb = x->write ? "write to" : "read from";
    if (nxlt_op_canceled(x->op)) {
        nxl_fio_fail(fio, s, NXL_ERR_CANCELED, "GDS: %s %s canceled at offset %llu (element %zu)",
                     verb, s->fname, (unsigned long long)(s->off - done), s->elem);
        return;
    }
    if (!s->left) {
        nxl_fio_seg_done(fio, s);
        return;
    }
    const char *call = x->write ? "cuFileWrite" : "cuFileRead";
    unsigned long long at = (unsigned long long)s->off;
    if (s->res == 0 && !x->write) {
        struct stat sb;
        long long size = fstat(((gds_file_t *)s->file)->fd, &sb) == 0 ? (long long)sb.st_size : -1;
        nxl_fio_fail(fio, s, NXL_ERR_NOT_FOUND, "GDS: read from %s at offset %llu (element %zu) "
                     "reached the end of the file (%lld bytes long) after %zu of %zu bytes of "
                     "that chunk", s->fname, at, s->elem, size, done, s->total);
    } else if (s->res == 0) {
        nxl_fio_fail(fio, s, NXL_ERR_BACKEND, "GDS: %s to %s at offset %llu (element %zu) wrote "
                     "nothing", call, s->fname, at, s->elem);
    } else if (s->lib_err) {
        nxl_cufile_status_t cs = {(int)-s->res, 0};
        char b[96];
        nxl_fio_fail(fio, s, NXL_ERR_BACKEND, "GDS: %s %s at offset %llu (element %zu) failed: %s",
                     call, s->fname, at, s->elem, cstatus(cs, b, sizeof(b)));
    } else {
        nxl_fio_fail(fio, s, NXL_ERR_BACKEND, "GDS: %s (%s %s at offset %llu, element %zu) failed "
                     "after %zu of %zu bytes of that chunk: %s", call, verb, s->fname, at, s->elem,
                     done, s->total, strerror((int)-s->res));
    }
}

static const nxl_fio_ops_t gds_fio_ops = {
    .name = "GDS",
    .conn_magic = CONN_MAGIC,
    .key_magic = KEY_MAGIC,
    .ltype = NXL_VRAM,
    .rmask = 1u << NXL_FILE,
    .rtypes = "FILE",
    .rtypes_query = "FILE",
    .seg_init = seg_init,
    .file_put = seg_file_put,
    .io = chunk_io,
    .result = chunk_result,
};

static nxl_status_t post(void *state, nxlt_op_t *op, const nxlt_xfer_t *t)
{
    gds_t *u = state;
    nxl_status_t st = nxl_fio_post_check(&u->fio, t);
    if (st != NXL_SUCCESS)
        return st;
    bool write = t->op == NXL_WRITE;
    for (size_t i = 0; i < t->n; i++) {
        const nxlt_iov_t *v = &t->iov[i];
        gds_reg_t *fr = v->rkey, *vr = v->lmd;
        if (!fr || !vr) {
            nxlt_error(u->ctx, "GDS: element %zu has no %s registered with GDS", i,
                       fr ? "VRAM region" : "file range");
            return NXL_ERR_NOT_SUPPORTED;
        }
        int acc = fr->file->acc & O_ACCMODE;
        if (write ? acc == O_RDONLY : acc == O_WRONLY)
            return nxl_fio_refuse_access(&u->fio, i, write, fr->name);
    }
    return nxl_fio_post(&u->fio, op, t);
}

/* ------------------------------------------------------------ query */

static nxl_status_t query(void *state, nxl_mem_t type, const nxl_desc_t *d, nxl_query_t *res)
{
    gds_t *u = state;
    struct stat sb;
    nxlt_filemeta_t m;
    return nxl_fio_query(&u->fio, type, d, res, &sb, &m);
}

/* ------------------------------------------------------------ instance */

static int probe(char *why, size_t cap)
{
    const gds_lib_t *L = lib_get(why, cap);
    if (!L)
        return 0;
    int v = 0;
    char ver[32] = "";
    if (L->get_version && L->get_version(&v).err == NXL_CUFILE_SUCCESS && v)
        snprintf(ver, sizeof(ver), " %d.%d", v / 1000, v % 1000 / 10);
    snprintf(why, cap, "cuFile%s (%s) with CUDA %d.%d, %d device%s: VRAM to and from files",
             ver, L->name, L->rt->runtime_version / 1000, L->rt->runtime_version % 1000 / 10,
             L->rt->ndev, L->rt->ndev == 1 ? "" : "s");
    return 1;
}

static void destroy(void *state);

static nxl_status_t create(nxlt_ctx_t *ctx, const nxl_param_t *params, size_t n, void **out)
{
    /* the engine has refused keys gds_params does not list */
    uint64_t nthreads = GDS_DEF_THREADS, depth = 0, chunk = GDS_DEF_CHUNK;
    nxl_status_t pst;
    if ((pst = nxlt_param_uint(ctx, params, n, "threads", 1, GDS_MAX_THREADS, &nthreads)) !=
            NXL_SUCCESS ||
        (pst = nxlt_param_uint(ctx, params, n, "queue_depth", 1, 4096, &depth)) != NXL_SUCCESS ||
        (pst = nxlt_param_size(ctx, params, n, "chunk", GDS_ALIGN, 1u << 30, &chunk)) !=
            NXL_SUCCESS)
        return pst;
    if (chunk % GDS_ALIGN) {
        nxlt_error(ctx, "GDS: chunk=%s: a multiple of %u up to 1 GiB",
                   nxlt_param(params, n, "chunk"), GDS_ALIGN);
        return NXL_ERR_INVALID_PARAM;
    }
    char why[200];
    const gds_lib_t *L = lib_get(why, sizeof(why));
    if (!L) {
        nxlt_error(ctx, "GDS: cannot create the transport: %s; %s", why,
                   !strncmp(why, "no libcufile", 12)
                       ? "install cuFile (libcufile, the GPUDirect Storage library) or set "
                         "NXL_CUFILE_LIB to it"
                       : "cuFile needs a GPU and its driver");
        return NXL_ERR_BACKEND;
    }
    gds_t *u = calloc(1, sizeof(*u));
    if (!u) {
        nxlt_error(ctx, "GDS: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    u->ctx = ctx;
    u->L = L;
    nxl_fio_t *fio = &u->fio;
    int fio_ok = nxl_fio_init(fio, ctx, &gds_fio_ops, u);
    fio->chunk = chunk;
    fio->nthreads = (unsigned)nthreads;
    fio->tp_max = depth ? (unsigned)depth : 2 * (unsigned)nthreads;
    LIST_INIT(&u->files);
    if (nxlt_regtab_init(&u->regs) < 0 || fio_ok < 0) {
        nxlt_error(ctx, "GDS: out of memory");
        destroy(u);
        return NXL_ERR_UNKNOWN;
    }
    pthread_mutex_lock(&drv_mu);
    nxl_cufile_status_t s = {NXL_CUFILE_SUCCESS, 0};
    if (!drv_users)
        s = L->driver_open();
    if (s.err == NXL_CUFILE_SUCCESS || s.err == NXL_CUFILE_DRIVER_ALREADY_OPEN) {
        drv_users++;
        u->drv_open = true;
    }
    pthread_mutex_unlock(&drv_mu);
    if (!u->drv_open) {
        char b[96];
        nxlt_error(ctx, "GDS: cuFileDriverOpen failed: %s; without the nvidia-fs module cuFile "
                   "needs its compatibility mode allowed (\"allow_compat_mode\": true in "
                   "cufile.json, $CUFILE_ENV_PATH_JSON)", cstatus(s, b, sizeof(b)));
        destroy(u);
        return NXL_ERR_BACKEND;
    }
    char twhy[256] = "";
    if (nxl_fio_engine_threads.start(fio, twhy, sizeof(twhy)) != 0) {
        nxlt_error(ctx, "GDS: the worker threads could not start: %s", twhy);
        destroy(u);
        return NXL_ERR_BACKEND;
    }
    fio->eng = &nxl_fio_engine_threads;
    char pr[200];
    probe(pr, sizeof(pr));
    snprintf(u->desc, sizeof(u->desc), "%.200s; %u threads doing cuFileRead/cuFileWrite, %u "
             "chunks of %zu KiB in flight, eventfd in the reactor", pr, fio->nthreads,
             fio->tp_max, fio->chunk >> 10);
    nxlt_log(ctx, NXL_LOG_INFO, "GDS: %s", u->desc);
    *out = u;
    return NXL_SUCCESS;
}

static void destroy(void *state)
{
    gds_t *u = state;
    nxl_fio_quiesce(&u->fio);
    nxlt_log(u->ctx, NXL_LOG_INFO, "GDS statistics: %llu transfers, %llu chunks (%llu short "
             "calls), %llu bytes", (unsigned long long)u->fio.n_xfers, (unsigned long long)u->fio.n_submits,
             (unsigned long long)u->n_short, (unsigned long long)u->n_bytes);
    /* keys are unloaded and regions deregistered before transports are
     * destroyed: what is left has no user */
    if (u->regs.v) {
        for (nxlt_reg_t *e; (e = nxlt_regtab_pop(&u->regs));) {
            gds_reg_t *r = NXLT_REG_OF(e, gds_reg_t, reg);
            r->refs = 1;
            freg_put(u, r);
        }
        nxlt_regtab_fini(&u->regs);
    }
    while (!LIST_EMPTY(&u->files)) {
        gds_file_t *f = LIST_FIRST(&u->files);
        f->refs = 1;
        file_put(u, f);
    }
    if (u->drv_open) {
        pthread_mutex_lock(&drv_mu);
        if (--drv_users == 0 && u->L->driver_close)
            u->L->driver_close();
        pthread_mutex_unlock(&drv_mu);
    }
    nxl_fio_fini(&u->fio);
    free(u);
}

static const char *describe(void *state)
{
    return ((gds_t *)state)->desc;
}

/* What create() takes: the engine refuses other keys, nxl_info -v lists
 * these (keep them with create()'s parsing) */
_Static_assert(GDS_DEF_CHUNK == 8388608, "gds_params says chunk=8388608");
static const nxl_param_info_t gds_params[] = {
    {"threads", PSTR(GDS_DEF_THREADS), "cuFile worker threads (1 to " PSTR(GDS_MAX_THREADS) ")"},
    {"queue_depth", NULL, "I/Os in flight (1 to 4096); not given: twice threads"},
    {"chunk", "8388608", "larger elements split into chunks of this many bytes (a multiple of 4096)"},
};

_Static_assert(offsetof(gds_t, fio) == 0, "the nxl_fio_* table functions take gds_t as its nxl_fio_t");

NXLT_MODULE_EXPORT const nxlt_ops_t nxlt_gds_ops = {
    NXLT_OPS_HEAD("GDS", (1u << NXL_VRAM) | (1u << NXL_FILE),
                  NXLT_CAP_LOCAL | NXLT_CAP_CANCEL_WAITS, gds_params),
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
