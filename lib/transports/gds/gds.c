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
#include "../common/dlload.h"
#include "../common/fileio.h"
#include "../common/filereg.h"
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

static nxlt_dlonce_t lib_once = NXLT_DLONCE_INIT;
static gds_lib_t lib;

/* process-wide: cuFileDriverOpen once for all instances, closed with the last */
static pthread_mutex_t drv_mu = PTHREAD_MUTEX_INITIALIZER;
static int drv_users;

static void lib_load(void)
{
    static const char *const names[] = {"libcufile.so.0", "libcufile.so.1", "libcufile.so"};
    char first[160] = "";
    void *h = nxlt_dl_open("NXL_CUFILE_LIB", names, sizeof(names) / sizeof(*names), &lib.name,
                           first, sizeof(first));
    if (!h) {
        nxlt_dl_cut_enoent(first);
        snprintf(lib_once.why, sizeof(lib_once.why), "no libcufile (%.150s)", first);
        return;
    }
    const nxlt_dlsym_t need[] = {
        {(void **)&lib.driver_open, "cuFileDriverOpen"},
        {(void **)&lib.handle_register, "cuFileHandleRegister"},
        {(void **)&lib.handle_deregister, "cuFileHandleDeregister"},
        {(void **)&lib.buf_register, "cuFileBufRegister"},
        {(void **)&lib.buf_deregister, "cuFileBufDeregister"},
        {(void **)&lib.read, "cuFileRead"},
        {(void **)&lib.write, "cuFileWrite"},
    };
    const char *lacks = nxlt_dl_syms(h, need, sizeof(need) / sizeof(*need));
    if (lacks) {
        snprintf(lib_once.why, sizeof(lib_once.why), "no libcufile (%s lacks %s)", lib.name,
                 lacks);
        return;
    }
    if (!(*(void **)&lib.driver_close = dlsym(h, "cuFileDriverClose_v2")))
        *(void **)&lib.driver_close = dlsym(h, "cuFileDriverClose");
    *(void **)&lib.get_version = dlsym(h, "cuFileGetVersion");
    char why[160];
    int kind;
    lib.rt = nxl_cuda_rt_get(&kind, why, sizeof(why));
    if (!lib.rt) {
        snprintf(lib_once.why, sizeof(lib_once.why), "%s", why);
        return;
    }
    lib_once.ok = true;
}

static const gds_lib_t *lib_get(char *why, size_t cap)
{
    return nxlt_dlonce_get(&lib_once, lib_load, why, cap) ? &lib : NULL;
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

/* one open file with its cuFile handle, shared by the ranges registered on
 * it (acc: O_RDONLY, O_WRONLY, O_RDWR, with O_DIRECT; refs: ranges and
 * chunks in flight) */
typedef struct gds_file {
    nxl_ffile_t f;           /* first (../common/filereg.h) */
    nxl_cufile_handle_t fh;
} gds_file_t;

/* a registration: a VRAM region, or a FILE range */
typedef struct gds_reg {
    nxl_frange_t fr;         /* first; VRAM: fr.span the region */
    int dev;                 /* VRAM: the device */
    bool buf_reg;            /* VRAM: cuFileBufRegister'd */
} gds_reg_t;

struct gds {
    nxl_fio_t fio;           /* first (the nxl_fio_* table functions take gds_t as it);
                              * transfers: chunk, nthreads, tp_max (the queue depth); token */
    nxl_fregs_t files;       /* FILE registrations and their open files: second (the
                              * nxl_fregs_* table functions take gds_t as nxl_fregs_head_t) */
    nxlt_ctx_t *ctx;
    const gds_lib_t *L;
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
    /* what cuFile is given: the registered base and an offset */
    char *base = (char *)vr->fr.span.addr;
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

/* the shared files' cuFile handles (../common/filereg.h) */
static nxl_status_t file_lib_reg(void *owner, nxl_ffile_t *ff, const char *name)
{
    gds_t *u = owner;
    gds_file_t *f = (gds_file_t *)ff;
    nxl_cufile_descr_t d;
    memset(&d, 0, sizeof(d));
    d.type = NXL_CUFILE_HANDLE_TYPE_OPAQUE_FD;
    d.handle.fd = ff->fd;
    nxl_cufile_status_t s = u->L->handle_register(&f->fh, &d);
    if (s.err != NXL_CUFILE_SUCCESS) {
        char b[96];
        nxlt_error(u->ctx, "GDS: cuFileHandleRegister of %s failed: %s%s", name,
                   cstatus(s, b, sizeof(b)),
                   s.err == NXL_CUFILE_INVALID_FILE_OPEN_FLAG || s.err == NXL_CUFILE_DIO_NOT_SET
                       ? " (GDS proper needs the file opened with O_DIRECT: mode=...,direct)"
                       : "");
        return NXL_ERR_BACKEND;
    }
    return NXL_SUCCESS;
}

static void file_lib_dereg(void *owner, nxl_ffile_t *ff)
{
    gds_t *u = owner;
    u->L->handle_deregister(((gds_file_t *)ff)->fh);
}

static const nxl_fregs_ops_t gds_fregs_ops = {
    .lib = "cuFile",
    .file_size = sizeof(gds_file_t),
    .accmask = O_ACCMODE | O_DIRECT,
    .direct_flag = O_DIRECT,
    .lib_reg = file_lib_reg,
    .lib_dereg = file_lib_dereg,
};

/* ------------------------------------------------------------ memory */

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

static nxl_status_t reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **md)
{
    gds_t *u = state;
    gds_reg_t *r = nxlt_regspan_new(u->ctx, "GDS", sizeof(*r), type, d);
    if (!r)
        return NXL_ERR_UNKNOWN;
    nxl_status_t st =
        type == NXL_VRAM ? reg_vram(u, d, r) : nxl_fregs_reg_file(&u->files, d, &r->fr);
    if (st != NXL_SUCCESS) {
        free(r);
        return st;
    }
    nxlt_log(u->ctx, NXL_LOG_DEBUG, "GDS: registered %s 0x%lx+%zu%s%s", nxl_mem_name(type),
             (unsigned long)d->addr, d->len, type == NXL_FILE ? " of " : "",
             type == NXL_FILE ? r->fr.name : "");
    *md = r;
    return NXL_SUCCESS;
}

static void dereg(void *state, void *md)
{
    gds_t *u = state;
    gds_reg_t *r = md;
    if (r->fr.span.type == NXL_VRAM) {
        if (r->buf_reg) {
            nxl_cufile_status_t s = u->L->buf_deregister((const void *)r->fr.span.addr);
            if (s.err != NXL_CUFILE_SUCCESS) {
                char b[96];
                nxlt_log(u->ctx, NXL_LOG_WARN, "GDS: cuFileBufDeregister of 0x%lx failed: %s",
                         (unsigned long)r->fr.span.addr, cstatus(s, b, sizeof(b)));
            }
        }
        free(r);
        return;
    }
    nxl_fregs_dereg(&u->files, &r->fr);
}

/* ------------------------------------------------------------ transfers */

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
        long long size = fstat(((nxl_ffile_t *)s->file)->fd, &sb) == 0 ? (long long)sb.st_size : -1;
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

/* the file-I/O core's questions (../common/fileio.h) */
static const nxl_fio_ops_t gds_fio_ops = {
    .name = "GDS",
    .conn_magic = CONN_MAGIC,
    .key_magic = KEY_MAGIC,
    .ltype = NXL_VRAM,
    .rmask = 1u << NXL_FILE,
    .rtypes = "FILE",
    .rtypes_query = "FILE",
    .seg_init = nxl_fregs_seg_init,
    .file_put = nxl_fregs_seg_file_put,
    .io = chunk_io,
    .result = chunk_result,
};

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
    if (nxl_fregs_init(&u->files, fio, &gds_fregs_ops) < 0 || fio_ok < 0) {
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
    nxl_fregs_fini(&u->files);
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
_Static_assert(offsetof(gds_t, files) == offsetof(nxl_fregs_head_t, files),
               "the nxl_fregs_* table functions take gds_t as an nxl_fregs_head_t");

NXLT_MODULE_EXPORT const nxlt_ops_t nxlt_gds_ops = {
    NXLT_OPS_HEAD("GDS", (1u << NXL_VRAM) | (1u << NXL_FILE),
                  NXLT_CAP_LOCAL | NXLT_CAP_CANCEL_WAITS, gds_params),
    .probe = probe,
    .create = create,
    .destroy = destroy,
    .reg = reg,
    .dereg = dereg,
    NXL_FIO_OPS,
    NXL_FREGS_OPS,
    .describe = describe,
};
