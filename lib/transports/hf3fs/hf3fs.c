/* SPDX-License-Identifier: BSD-3-Clause */
/* The HF3FS transport: host memory (DRAM) to and from files of DeepSeek's
 * 3FS through its user-space I/O API (usrbio), within the agent.
 *
 * As POSIX does, it moves data locally: the local list is DRAM, the list
 * prepared against the agent's own name is FILE; a WRITE copies DRAM to
 * the file, a READ the file into DRAM.
 *
 * usrbio moves data only between files and "iovs", buffers the 3FS FUSE
 * daemon maps by id (usrbio_abi.h). hf3fs_iovwrap registers nothing: it
 * describes memory that is already linked into the mount's 3fs-virt/iovs/,
 * which an application's malloc'd buffer is not. So:
 * - memory from nxl_mem_alloc(DRAM) on an agent whose first DRAM allocator
 *   is HF3FS is an iov of its own (hf3fs_iovcreate): its I/O goes straight
 *   between the file and it, no copy;
 * - any other DRAM goes through a bounce iov the instance makes
 *   (hf3fs_iovcreate, entries x chunk bytes): a WRITE copies the element
 *   into a bounce slot before hf3fs_prep_io, a READ copies the slot out
 *   once its completion came, on the reactor thread.
 *
 * Files: registered by an open fd in desc.dev_id (a duplicate is kept) or
 * by "path=...;mode=r|w|rw|create" in desc.meta; each open file is
 * registered once with hf3fs_reg_fd (ranges of one file opened the same way
 * share it). They must lie on one 3FS mount: the mount parameter, or the
 * mount of the first file registered (hf3fs_extract_mount_point).
 *
 * Transfers run on the file-I/O core POSIX and GDS use (../common/fileio.h)
 * with an engine of this file's: elements cut into chunks (chunk=BYTES)
 * are prepared on two rings (hf3fs_iorcreate*, one for reads, one for
 * writes: usrbio's rings go one way) with hf3fs_prep_io, at most entries
 * at a time, and handed to 3FS with hf3fs_submit_ios. usrbio has no
 * descriptor to watch: a worker thread per ring sleeps in
 * hf3fs_wait_for_ios while the ring has I/O outstanding (and on a
 * condition variable otherwise), with an absolute CLOCK_REALTIME deadline
 * wait_ms ahead -- taken from CLOCK_REALTIME, the clock usrbio's
 * sem_timedwait measures, so that the wait sleeps --, and hands the
 * completions to the reactor through an eventfd. Short results are
 * continued; a read that gets nothing is the end of the file.
 *
 * Completion statuses: NXL_SUCCESS once every byte moved; NXL_ERR_NOT_FOUND
 * for a read that reaches the end of the file; NXL_ERR_BACKEND for a usrbio
 * error (the call and its errno). A failed or canceled transfer prepares
 * nothing more and completes once none of its I/Os is with 3FS
 * (NXLT_CAP_CANCEL_WAITS): 3FS has no way to take back a prepared I/O, so
 * cancel waits for the worker to reap it. Teardown does the same, for at
 * most HF_STOP_MAX_MS.
 *
 * libhf3fs_api_shared.so is loaded at run time (or what $NXL_HF3FS_LIB
 * names): libnxl never links it. */
#include "config.h"
#include "../common/dlload.h"
#include "../common/fileio.h"
#include "../common/filereg.h"
#include "../common/filemeta.h"
#include "../common/regspan.h"
#include "usrbio_abi.h"

#include <nxl/transport.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common/pstr.h"

#define KEY_MAGIC 0x314b4633u  /* "3FK1" */
#define CONN_MAGIC 0x31434633u /* "3FC1" */
#define HF_DEF_ENTRIES 32
#define HF_MAX_ENTRIES 1024
#define HF_DEF_CHUNK (1u << 20)
#define HF_DEF_WAIT_MS 100
#define HF_STOP_MAX_MS 30000
#define HF_LIBNAME "libhf3fs_api_shared.so"

/* ------------------------------------------------------------ the library */

typedef struct hf_lib {
    nxl_hf3fs_extract_mount_point_fn extract_mount_point;
    nxl_hf3fs_iovcreate_fn iovcreate;
    nxl_hf3fs_iovwrap_fn iovwrap; /* may be NULL: not called (see the file comment) */
    nxl_hf3fs_iovdestroy_fn iovdestroy;
    nxl_hf3fs_iorcreate4_fn iorcreate4; /* may be NULL: hf3fs_iorcreate then */
    nxl_hf3fs_iorcreate_fn iorcreate;
    nxl_hf3fs_iordestroy_fn iordestroy;
    nxl_hf3fs_reg_fd_fn reg_fd;
    nxl_hf3fs_dereg_fd_fn dereg_fd;
    nxl_hf3fs_prep_io_fn prep_io;
    nxl_hf3fs_submit_ios_fn submit_ios;
    nxl_hf3fs_wait_for_ios_fn wait_for_ios;
    const char *name;
} hf_lib_t;

static nxlt_dlonce_t lib_once = NXLT_DLONCE_INIT;
static hf_lib_t lib;

static void lib_load(void)
{
    static const char *const names[] = {HF_LIBNAME};
    char first[180];
    void *h = nxlt_dl_open("NXL_HF3FS_LIB", names, 1, &lib.name, first, sizeof(first));
    if (!h) {
        nxlt_dl_cut_enoent(first);
        snprintf(lib_once.why, sizeof(lib_once.why), HF_LIBNAME " not found (%.170s)", first);
        return;
    }
    const nxlt_dlsym_t need[] = {
        {(void **)&lib.extract_mount_point, "hf3fs_extract_mount_point"},
        {(void **)&lib.iovcreate, "hf3fs_iovcreate"},
        {(void **)&lib.iovdestroy, "hf3fs_iovdestroy"},
        {(void **)&lib.iorcreate, "hf3fs_iorcreate"},
        {(void **)&lib.iordestroy, "hf3fs_iordestroy"},
        {(void **)&lib.reg_fd, "hf3fs_reg_fd"},
        {(void **)&lib.dereg_fd, "hf3fs_dereg_fd"},
        {(void **)&lib.prep_io, "hf3fs_prep_io"},
        {(void **)&lib.submit_ios, "hf3fs_submit_ios"},
        {(void **)&lib.wait_for_ios, "hf3fs_wait_for_ios"},
    };
    const char *lacks = nxlt_dl_syms(h, need, sizeof(need) / sizeof(*need));
    if (lacks) {
        snprintf(lib_once.why, sizeof(lib_once.why), HF_LIBNAME " unusable (%.120s lacks %s)",
                 lib.name, lacks);
        return;
    }
    *(void **)&lib.iorcreate4 = dlsym(h, "hf3fs_iorcreate4");
    *(void **)&lib.iovwrap = dlsym(h, "hf3fs_iovwrap");
    lib_once.ok = true;
}

static const hf_lib_t *lib_get(char *why, size_t cap)
{
    return nxlt_dlonce_get(&lib_once, lib_load, why, cap) ? &lib : NULL;
}

/* "EBADF (Bad file descriptor)" for an errno of usrbio's */
static const char *errtext(int e, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s (errno %d)", strerror(e), e);
    return buf;
}

/* ------------------------------------------------------------ structures */

typedef struct hf3fs hf3fs_t;

/* a registration: a DRAM region (one of nxl_mem_alloc's is an iov), or a
 * FILE range */
typedef struct hf_reg {
    nxl_frange_t fr;         /* first */
    struct nxl_hf3fs_iov iov; /* DRAM from mem_alloc: the iov it is */
    bool has_iov;
} hf_reg_t;

/* one I/O prepared on a ring: its segment and its bounce slot (slot k of
 * the bounce iov, used when the local memory is not an iov) */
typedef struct hf_io {
    nxl_fio_seg_t *seg;      /* NULL: free */
    void *ptr;               /* what hf3fs_prep_io was given */
    bool bounce;
    int ring;
} hf_io_t;

/* one ior (reads or writes) and its worker */
typedef struct hf_ring {
    hf3fs_t *u;
    struct nxl_hf3fs_ior ior;
    bool made, read;
    pthread_t th;
    bool th_on;
    /* shared with the worker, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned outstanding;    /* being prepared or prepared, completion not yet taken */
    bool stop;
    bool gave_up;            /* stopped with I/O still with 3FS */
    int err;                 /* hf3fs_wait_for_ios failed: -errno */
    struct nxl_hf3fs_cqe *done; /* completions for the reactor */
    unsigned ndone;
    uint64_t n_waits, n_empty; /* wait calls, those that returned nothing */
    /* reactor side */
    int failed;              /* err, once the reactor saw it */
    unsigned inflight;       /* prepared, completion not yet handled */
    unsigned prepped;        /* prepared since the last submit */
} hf_ring_t;

struct hf3fs {
    nxl_fio_t fio;           /* first (the nxl_fio_* table functions take hf3fs_t as it) */
    nxl_fregs_t files;       /* FILE registrations and their open files: second (the
                              * nxl_fregs_* table functions take hf3fs_t as nxl_fregs_head_t) */
    nxlt_ctx_t *ctx;
    const hf_lib_t *L;
    char mount[256];         /* "" until known */
    bool ready;              /* rings, bounce iov, workers made */
    hf_ring_t ring[2];       /* 0 writes, 1 reads */
    struct nxl_hf3fs_iov bounce;
    bool bounce_made;
    hf_io_t *io;             /* entries of them */
    unsigned *free_io, nfree;
    unsigned entries, io_depth;
    int numa;
    uint64_t wait_ms;
    int efd;
    nxlt_io_t *ev;
    /* a segment a usrbio call refused while being prepared: failed on the
     * next turn (never inside post()); nothing is prepared meanwhile */
    struct {
        nxl_fio_seg_t *s;
        const char *call;    /* NULL: the ring was full with none of ours in it */
        int e;
    } refused;
    nxlt_timer_t *refuse_t;
    bool stuck;              /* teardown gave up on I/O still with 3FS: leak its buffers */
    uint64_t n_bytes, n_copied, n_zero_copy, n_full; /* statistics */
    char desc[400];
};

/* ------------------------------------------------------------ workers */

static void ring_notify(hf3fs_t *u)
{
    uint64_t one = 1;
    ssize_t w = write(u->efd, &one, sizeof(one));
    (void)w; /* EAGAIN: the counter is non-zero already, the reactor wakes anyway */
}

/* an absolute CLOCK_REALTIME time @p ms from now: what usrbio's
 * sem_timedwait compares with (a CLOCK_MONOTONIC reading here would lie
 * decades in the past, and the wait would never sleep) */
static struct timespec realtime_in(uint64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void *ring_worker(void *arg)
{
    hf_ring_t *r = arg;
    hf3fs_t *u = r->u;
    struct nxl_hf3fs_cqe *cqes = calloc(u->entries, sizeof(*cqes));
    uint64_t stop_at = 0;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->outstanding && !r->stop && !r->err)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->err || (!r->outstanding && r->stop))
            break;
        if (r->stop) {
            if (!stop_at)
                stop_at = mono_ms() + HF_STOP_MAX_MS;
            else if (mono_ms() > stop_at) {
                r->gave_up = true;
                break;
            }
        }
        pthread_mutex_unlock(&r->mu);
        int n;
        if (!cqes) {
            n = -ENOMEM;
        } else {
            struct timespec dl = realtime_in(u->wait_ms);
            n = u->L->wait_for_ios(&r->ior, cqes, (int)u->entries, 1, &dl);
        }
        pthread_mutex_lock(&r->mu);
        r->n_waits++;
        if (n < 0) {
            r->err = n;
            break;
        }
        if (!n) {
            r->n_empty++;
            continue;
        }
        memcpy(r->done + r->ndone, cqes, (size_t)n * sizeof(*cqes));
        r->ndone += (unsigned)n;
        /* never more than counted (each is counted before hf3fs_prep_io) */
        r->outstanding -= (unsigned)n > r->outstanding ? r->outstanding : (unsigned)n;
        pthread_mutex_unlock(&r->mu);
        ring_notify(u);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    free(cqes);
    ring_notify(u);
    return NULL;
}

/* ------------------------------------------------------------ the engine */

static void io_put(hf3fs_t *u, hf_io_t *io)
{
    io->seg = NULL;
    u->free_io[u->nfree++] = (unsigned)(io - u->io);
}

/* on the reactor: one completion of ring @p ri */
static void io_result(hf3fs_t *u, hf_io_t *io, int64_t res)
{
    nxl_fio_t *f = &u->fio;
    nxl_fio_seg_t *s = io->seg;
    nxl_fio_xop_t *x = s->xop;
    u->ring[io->ring].inflight--;
    if (res > 0 && (uint64_t)res > s->ion)
        res = (int64_t)s->ion; /* never more than asked */
    if (res > 0) {
        u->n_bytes += (uint64_t)res;
        if (!x->write && io->bounce && !f->closing && !x->failed && !nxlt_op_canceled(x->op)) {
            memcpy(s->buf, io->ptr, (size_t)res);
            u->n_copied += (uint64_t)res;
        }
    }
    io_put(u, io);
    nxl_fio_seg_result(f, s, (ssize_t)res);
}

/* fails segment @p s with a sentence about usrbio call @p call */
static void seg_fail_call(hf3fs_t *u, nxl_fio_seg_t *s, const char *call, int e)
{
    char b[96];
    nxl_fio_fail(&u->fio, s, NXL_ERR_BACKEND, "HF3FS: %s (%s %s at offset %llu, element %zu) "
                 "failed: %s", call, s->xop->write ? "write to" : "read from", s->fname,
                 (unsigned long long)s->off, s->elem, errtext(e, b, sizeof(b)));
}

/* segment @p s (taken from the queue) refused by @p call: failed on the
 * next turn */
static void refuse(hf3fs_t *u, nxl_fio_seg_t *s, const char *call, int e)
{
    u->refused.s = s;
    u->refused.call = call;
    u->refused.e = e;
    nxlt_timer_activate(u->refuse_t);
}

static void hf_pump(nxl_fio_t *f);

static void on_refused(nxlt_timer_t *t, void *arg)
{
    hf3fs_t *u = arg;
    nxl_fio_seg_t *s = u->refused.s;
    u->refused.s = NULL;
    if (!s || u->fio.closing)
        return;
    if (u->refused.call) {
        seg_fail_call(u, s, u->refused.call, u->refused.e);
    } else {
        bool write = s->xop->write;
        nxl_fio_fail(&u->fio, s, NXL_ERR_BACKEND, "HF3FS: hf3fs_prep_io (%s %s at offset %llu, "
                     "element %zu) found the %s ring full with none of this transport's I/O in "
                     "it", write ? "write to" : "read from", s->fname, (unsigned long long)s->off,
                     s->elem, write ? "write" : "read");
    }
    hf_pump(&u->fio);
}

static void hf_pump(nxl_fio_t *f)
{
    hf3fs_t *u = f->owner;
    if (!u->ready || f->closing || u->refused.s)
        return;
    nxl_fio_seg_t *s;
    while (u->nfree && (s = nxl_fio_seg_next(f))) {
        bool write = s->xop->write;
        int ri = write ? 0 : 1;
        hf_ring_t *r = &u->ring[ri];
        if (r->failed) {
            refuse(u, s, "hf3fs_wait_for_ios", -r->failed);
            break;
        }
        hf_io_t *io = &u->io[u->free_io[--u->nfree]];
        hf_reg_t *lr = s->lmd;
        nxl_ffile_t *file = s->file;
        size_t n = s->left < f->chunk ? s->left : f->chunk;
        const struct nxl_hf3fs_iov *iov;
        if (lr && lr->has_iov) {
            iov = &lr->iov;
            io->ptr = s->buf;
            io->bounce = false;
        } else {
            iov = &u->bounce;
            io->ptr = u->bounce.base + (size_t)(io - u->io) * f->chunk;
            io->bounce = true;
            if (write) {
                memcpy(io->ptr, s->buf, n);
                u->n_copied += n;
            }
        }
        io->ring = ri;
        s->iofd = file->fd;
        s->ion = n;
        /* counted before it exists: 3FS may complete a prepared I/O before
         * it is submitted, and the worker may take that completion at once */
        pthread_mutex_lock(&r->mu);
        r->outstanding++;
        pthread_mutex_unlock(&r->mu);
        int rc = u->L->prep_io(&r->ior, iov, !write, io->ptr, file->fd, (size_t)s->off, n, io);
        if (rc < 0) {
            pthread_mutex_lock(&r->mu);
            r->outstanding--;
            pthread_mutex_unlock(&r->mu);
        }
        if (rc == -EAGAIN) {
            /* the ring is full: again when a completion frees a slot */
            io->seg = NULL;
            u->free_io[u->nfree++] = (unsigned)(io - u->io);
            u->n_full++;
            if (!r->inflight) {
                refuse(u, s, NULL, 0);
                break;
            }
            nxl_fio_seg_requeue(f, s);
            break;
        }
        if (rc < 0) {
            io_put(u, io);
            refuse(u, s, "hf3fs_prep_io", -rc);
            break;
        }
        io->seg = s;
        if (!io->bounce)
            u->n_zero_copy += n;
        r->inflight++;
        r->prepped++;
    }
    for (int i = 0; i < 2; i++) {
        hf_ring_t *r = &u->ring[i];
        if (!r->prepped)
            continue;
        int rc = u->L->submit_ios(&r->ior);
        if (rc < 0)
            /* usrbio's daemon finds prepared I/O without the hint too */
            nxlt_log(u->ctx, NXL_LOG_WARN, "HF3FS: hf3fs_submit_ios on the %s ring failed: %s",
                     r->read ? "read" : "write", strerror(-rc));
        f->n_submits++;
        pthread_mutex_lock(&r->mu);
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->mu);
        r->prepped = 0;
    }
}

/* the workers' completions, to the core */
static void hf_reap(hf3fs_t *u)
{
    for (int i = 0; i < 2; i++) {
        hf_ring_t *r = &u->ring[i];
        if (!r->made)
            continue;
        pthread_mutex_lock(&r->mu);
        unsigned n = r->ndone;
        int err = r->err;
        struct nxl_hf3fs_cqe got[64];
        /* in batches, so that the worker can append while these are handled */
        if (n > 64)
            n = 64;
        memcpy(got, r->done, n * sizeof(*got));
        memmove(r->done, r->done + n, (r->ndone - n) * sizeof(*got));
        r->ndone -= n;
        bool more = r->ndone > 0;
        pthread_mutex_unlock(&r->mu);
        for (unsigned k = 0; k < n; k++) {
            hf_io_t *io = (hf_io_t *)got[k].userdata;
            if (!io || io < u->io || io >= u->io + u->entries || !io->seg) {
                nxlt_log(u->ctx, NXL_LOG_WARN, "HF3FS: a completion on the %s ring that names "
                         "no I/O of this transport (index %d); ignored",
                         r->read ? "read" : "write", got[k].index);
                continue;
            }
            io_result(u, io, got[k].result);
        }
        if (more) {
            i--; /* the rest of this ring's */
            continue;
        }
        if (err)
            r->failed = err;
        if (err && r->inflight) {
            /* the worker stopped: what is still prepared will not be reaped */
            for (unsigned k = 0; k < u->entries; k++) {
                hf_io_t *io = &u->io[k];
                if (io->seg && io->ring == i) {
                    nxl_fio_seg_t *s = io->seg;
                    r->inflight--;
                    io_put(u, io);
                    seg_fail_call(u, s, "hf3fs_wait_for_ios", -err);
                }
            }
        }
    }
}

static void hf_on_efd(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    hf3fs_t *u = arg;
    nxl_fio_efd_drain(&u->fio, u->efd, "the workers'");
    hf_reap(u);
    hf_pump(&u->fio);
}

static int hf_start(nxl_fio_t *f, char *why, size_t cap)
{
    hf3fs_t *u = f->owner;
    u->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (u->efd < 0) {
        snprintf(why, cap, "eventfd failed: %s", strerror(errno));
        return -1;
    }
    u->ev = nxlt_io_new(u->ctx, u->efd, hf_on_efd, u);
    if (!u->ev || nxlt_io_start(u->ev, NXLT_IO_READ) < 0) {
        snprintf(why, cap, "the loop could not watch the workers' eventfd");
        return -1;
    }
    if (!(u->refuse_t = nxlt_timer_new(u->ctx, on_refused, u))) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    snprintf(f->desc, sizeof(f->desc), "usrbio rings, a worker per ring in hf3fs_wait_for_ios, "
             "eventfd in the reactor");
    return 0;
}

/* waits for the workers: each reaps what 3FS holds, then leaves */
static void hf_stop(nxl_fio_t *f)
{
    hf3fs_t *u = f->owner;
    for (int i = 0; i < 2; i++) {
        hf_ring_t *r = &u->ring[i];
        if (!r->th_on)
            continue;
        pthread_mutex_lock(&r->mu);
        r->stop = true;
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->th, NULL);
        r->th_on = false;
        if (r->gave_up || r->err) {
            nxlt_log(u->ctx, NXL_LOG_WARN, "HF3FS: %u I/O of the %s ring still with 3FS at "
                     "teardown (%s); its ring and buffers are left allocated", r->outstanding,
                     r->read ? "read" : "write",
                     r->err ? "hf3fs_wait_for_ios failed" : "waited " PSTR(HF_STOP_MAX_MS) " ms");
            u->stuck = u->stuck || r->outstanding;
        }
    }
    u->refused.s = NULL; /* its transfer is reported CANCELED with the rest */
    hf_reap(u);
}

static const nxl_fio_engine_t hf_engine = {
    .name = "usrbio",
    .start = hf_start,
    .pump = hf_pump,
    .stop = hf_stop,
};

/* the rings, the bounce iov and the workers, once the mount is known */
static nxl_status_t make_ready(hf3fs_t *u)
{
    if (u->ready)
        return NXL_SUCCESS;
    const hf_lib_t *L = u->L;
    char b[96];
    size_t blen = (size_t)u->entries * u->fio.chunk;
    int rc = u->bounce_made ? 0 : L->iovcreate(&u->bounce, u->mount, blen, 0, u->numa);
    if (rc < 0) {
        nxlt_error(u->ctx, "HF3FS: hf3fs_iovcreate of the %zu-byte bounce buffer on %s failed: %s",
                   blen, u->mount, errtext(-rc, b, sizeof(b)));
        return NXL_ERR_BACKEND;
    }
    u->bounce_made = true;
    for (int i = 0; i < 2; i++) {
        hf_ring_t *r = &u->ring[i];
        r->read = i == 1;
        if (r->th_on)
            continue;
        if (r->made)
            rc = 0;
        else if (L->iorcreate4)
            rc = L->iorcreate4(&r->ior, u->mount, (int)u->entries, r->read, (int)u->io_depth, 0,
                               u->numa, 0);
        else
            rc = L->iorcreate(&r->ior, u->mount, (int)u->entries, r->read, (int)u->io_depth,
                              u->numa);
        if (rc < 0) {
            nxlt_error(u->ctx, "HF3FS: %s of the %s ring (%u entries) on %s failed: %s",
                       L->iorcreate4 ? "hf3fs_iorcreate4" : "hf3fs_iorcreate",
                       r->read ? "read" : "write", u->entries, u->mount,
                       errtext(-rc, b, sizeof(b)));
            return NXL_ERR_BACKEND;
        }
        r->made = true;
        if (!r->done && !(r->done = calloc(u->entries, sizeof(*r->done)))) {
            nxlt_error(u->ctx, "HF3FS: out of memory");
            return NXL_ERR_UNKNOWN;
        }
        int e = pthread_create(&r->th, NULL, ring_worker, r);
        if (e) {
            nxlt_error(u->ctx, "HF3FS: the %s ring's worker could not start: %s",
                       r->read ? "read" : "write", strerror(e));
            return NXL_ERR_BACKEND;
        }
        r->th_on = true;
    }
    u->ready = true;
    nxlt_log(u->ctx, NXL_LOG_INFO, "HF3FS: rings of %u entries and a bounce buffer of %zu bytes "
             "on %s", u->entries, blen, u->mount);
    return NXL_SUCCESS;
}

/* ------------------------------------------------------------ files */

/* the mount of the file behind @p fd (named @p name), checked against the
 * instance's; the first one becomes it */
static nxl_status_t file_mount(void *owner, int fd, const char *path, const char *name)
{
    hf3fs_t *u = owner;
    char proc[64], target[PATH_MAX];
    if (!path) {
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        ssize_t n = readlink(proc, target, sizeof(target) - 1);
        if (n <= 0) {
            nxlt_error(u->ctx, "HF3FS: cannot tell where %s lies (readlink %s: %s)", name, proc,
                       strerror(errno));
            return NXL_ERR_BACKEND;
        }
        target[n] = 0;
        char *del = strstr(target, " (deleted)");
        if (del && !del[10])
            *del = 0; /* unlinked since it was opened */
        path = target;
    }
    /* the folder the file lies in: hf3fs_extract_mount_point resolves the
     * path it is given, which an unlinked file no longer has */
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = 0;
    else if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof(dir), ".");
    char mp[256];
    int n = u->L->extract_mount_point(mp, (int)sizeof(mp), dir);
    if (n < 0) {
        nxlt_error(u->ctx, "HF3FS: %s ('%.200s') is not on a 3FS mount "
                   "(hf3fs_extract_mount_point found none); use POSIX for other files",
                   name, path);
        return NXL_ERR_NOT_SUPPORTED;
    }
    if (n > (int)sizeof(mp)) {
        nxlt_error(u->ctx, "HF3FS: the 3FS mount of %s has a path longer than %zu bytes", name,
                   sizeof(mp) - 1);
        return NXL_ERR_NOT_SUPPORTED;
    }
    if (!u->mount[0])
        snprintf(u->mount, sizeof(u->mount), "%s", mp);
    if (strcmp(mp, u->mount)) {
        nxlt_error(u->ctx, "HF3FS: %s lies on the 3FS mount %s, this instance on %s: one "
                   "instance serves one mount (create another agent for the other)", name, mp,
                   u->mount);
        return NXL_ERR_NOT_SUPPORTED;
    }
    return make_ready(u);
}

/* each open file, shared by its ranges (../common/filereg.h), is
 * registered with hf3fs_reg_fd */
static nxl_status_t file_lib_reg(void *owner, nxl_ffile_t *f, const char *name)
{
    hf3fs_t *u = owner;
    int rc = u->L->reg_fd(f->fd, 0);
    if (rc > 0) {
        char b[96];
        nxlt_error(u->ctx, "HF3FS: hf3fs_reg_fd of %s failed: %s%s", name,
                   errtext(rc, b, sizeof(b)),
                   rc == EBADF ? "; 3FS says it is not one of its files" : "");
        return NXL_ERR_BACKEND;
    }
    return NXL_SUCCESS;
}

static void file_lib_dereg(void *owner, nxl_ffile_t *f)
{
    hf3fs_t *u = owner;
    u->L->dereg_fd(f->fd);
}

static const nxl_fregs_ops_t hf_fregs_ops = {
    .lib = "usrbio",
    .file_size = sizeof(nxl_ffile_t),
    .accmask = O_ACCMODE,
    .check = file_mount,
    .lib_reg = file_lib_reg,
    .lib_dereg = file_lib_dereg,
};

/* ------------------------------------------------------------ memory */

static nxl_status_t reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **md)
{
    hf3fs_t *u = state;
    hf_reg_t *r = nxlt_regspan_new(u->ctx, "HF3FS", sizeof(*r), type, d);
    if (!r)
        return NXL_ERR_UNKNOWN;
    if (type == NXL_FILE) {
        nxl_status_t st = nxl_fregs_reg_file(&u->files, d, &r->fr);
        if (st != NXL_SUCCESS) {
            free(r);
            return st;
        }
    }
    /* DRAM: nothing to register; its I/O goes through the bounce buffer */
    *md = r;
    return NXL_SUCCESS;
}

static void dereg(void *state, void *md)
{
    hf3fs_t *u = state;
    hf_reg_t *r = md;
    if (r->fr.span.type != NXL_FILE) {
        free(r);
        return;
    }
    nxl_fregs_dereg(&u->files, &r->fr);
}

/* DRAM that is an iov of its own: its I/O needs no copy. Declined
 * (the engine allocates it then) until the mount is known. */
static nxl_status_t mem_alloc(void *state, nxl_mem_t type, size_t len, uint64_t dev, void **ptr,
                              void **md)
{
    hf3fs_t *u = state;
    if (type != NXL_DRAM || !u->ready)
        return NXL_ERR_NOT_SUPPORTED;
    nxl_desc_t d = {.len = len};
    hf_reg_t *r = nxlt_regspan_new(u->ctx, "HF3FS", sizeof(*r), type, &d);
    if (!r)
        return NXL_ERR_UNKNOWN;
    int rc = u->L->iovcreate(&r->iov, u->mount, len, 0, u->numa);
    if (rc < 0) {
        char b[96];
        nxlt_error(u->ctx, "HF3FS: hf3fs_iovcreate of %zu bytes on %s failed: %s", len, u->mount,
                   errtext(-rc, b, sizeof(b)));
        free(r);
        return NXL_ERR_BACKEND;
    }
    r->has_iov = true;
    r->fr.span.addr = (uintptr_t)r->iov.base;
    *ptr = r->iov.base;
    *md = r;
    return NXL_SUCCESS;
}

static void mem_free(void *state, void *ptr, void *md)
{
    hf3fs_t *u = state;
    hf_reg_t *r = md;
    if (r->has_iov && !u->stuck)
        u->L->iovdestroy(&r->iov);
    free(r);
}

/* ------------------------------------------------------------ transfers */

static const nxl_fio_ops_t hf_fio_ops = {
    .name = "HF3FS",
    .conn_magic = CONN_MAGIC,
    .key_magic = KEY_MAGIC,
    .ltype = NXL_DRAM,
    .rmask = 1u << NXL_FILE,
    .rtypes = "FILE",
    .rtypes_query = "FILE",
    .seg_init = nxl_fregs_seg_init,
    .file_put = nxl_fregs_seg_file_put,
};

/* ------------------------------------------------------------ instance */

static int probe(char *why, size_t cap)
{
    const hf_lib_t *L = lib_get(why, cap);
    if (!L)
        return 0;
    snprintf(why, cap, "usrbio (%s): DRAM to and from files of a 3FS mount", L->name);
    return 1;
}

static void destroy(void *state);

static nxl_status_t create(nxlt_ctx_t *ctx, const nxl_param_t *params, size_t n, void **out)
{
    /* the engine has refused keys hf3fs_params does not list */
    uint64_t entries = HF_DEF_ENTRIES, chunk = HF_DEF_CHUNK, wait_ms = HF_DEF_WAIT_MS;
    uint64_t io_depth = 0, numa1 = 0;
    nxl_status_t pst;
    if ((pst = nxlt_param_uint(ctx, params, n, "entries", 1, HF_MAX_ENTRIES, &entries)) !=
            NXL_SUCCESS ||
        (pst = nxlt_param_size(ctx, params, n, "chunk", 4096, 1u << 30, &chunk)) != NXL_SUCCESS ||
        (pst = nxlt_param_duration(ctx, params, n, "wait", 1, 10000, &wait_ms)) != NXL_SUCCESS ||
        (pst = nxlt_param_uint(ctx, params, n, "io_depth", 0, HF_MAX_ENTRIES, &io_depth)) !=
            NXL_SUCCESS)
        return pst;
    const char *numa = nxlt_param(params, n, "numa");
    if (numa && strcmp(numa, "-1")) {
        nxl_param_t np = {"numa", numa};
        if ((pst = nxlt_param_uint(ctx, &np, 1, "numa", 0, 1023, &numa1)) != NXL_SUCCESS)
            return pst;
    }
    const char *mount = nxlt_param(params, n, "mount");
    if (mount && (!*mount || strlen(mount) >= 256)) {
        nxlt_error(ctx, "HF3FS: mount=%s: the path of a 3FS mount, 1 to 255 bytes", mount);
        return NXL_ERR_INVALID_PARAM;
    }
    char why[240];
    const hf_lib_t *L = lib_get(why, sizeof(why));
    if (!L) {
        nxlt_error(ctx, "HF3FS: cannot create the transport: %s; install 3FS's client library "
                   "(" HF_LIBNAME ") or set NXL_HF3FS_LIB to it", why);
        return NXL_ERR_BACKEND;
    }
    hf3fs_t *u = calloc(1, sizeof(*u));
    if (!u) {
        nxlt_error(ctx, "HF3FS: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    u->ctx = ctx;
    u->L = L;
    u->efd = -1;
    u->entries = (unsigned)entries;
    u->io_depth = (unsigned)io_depth;
    u->wait_ms = wait_ms;
    u->numa = numa && strcmp(numa, "-1") ? (int)numa1 : -1;
    for (int i = 0; i < 2; i++) {
        u->ring[i].u = u;
        pthread_mutex_init(&u->ring[i].mu, NULL);
        pthread_cond_init(&u->ring[i].cv, NULL);
    }
    nxl_fio_t *fio = &u->fio;
    int fio_ok = nxl_fio_init(fio, ctx, &hf_fio_ops, u);
    fio->chunk = chunk;
    u->io = calloc(entries, sizeof(*u->io));
    u->free_io = calloc(entries, sizeof(*u->free_io));
    if (nxl_fregs_init(&u->files, fio, &hf_fregs_ops) < 0 || fio_ok < 0 || !u->io ||
        !u->free_io) {
        nxlt_error(ctx, "HF3FS: out of memory");
        destroy(u);
        return NXL_ERR_UNKNOWN;
    }
    for (unsigned i = 0; i < u->entries; i++)
        u->free_io[u->nfree++] = u->entries - 1 - i;
    char twhy[256] = "";
    if (hf_engine.start(fio, twhy, sizeof(twhy)) != 0) {
        nxlt_error(ctx, "HF3FS: %s", twhy);
        destroy(u);
        return NXL_ERR_BACKEND;
    }
    fio->eng = &hf_engine;
    if (mount) {
        snprintf(u->mount, sizeof(u->mount), "%s", mount);
        nxl_status_t st = make_ready(u);
        if (st != NXL_SUCCESS) {
            destroy(u);
            return st;
        }
    }
    char pr[200];
    probe(pr, sizeof(pr));
    snprintf(u->desc, sizeof(u->desc), "%.200s; rings of %u entries, chunks of %zu KiB through "
             "a bounce buffer unless the memory came from nxl_mem_alloc, a worker per ring in "
             "hf3fs_wait_for_ios, eventfd in the reactor", pr, u->entries, fio->chunk >> 10);
    nxlt_log(ctx, NXL_LOG_INFO, "HF3FS: %s", u->desc);
    *out = u;
    return NXL_SUCCESS;
}

static void destroy(void *state)
{
    hf3fs_t *u = state;
    nxl_fio_quiesce(&u->fio);
    nxlt_log(u->ctx, NXL_LOG_INFO, "HF3FS statistics: %llu transfers, %llu submits, %llu bytes "
             "(%llu copied through the bounce buffer, %llu without a copy), ring full %llu "
             "times, %llu waits (%llu with nothing)",
             (unsigned long long)u->fio.n_xfers, (unsigned long long)u->fio.n_submits,
             (unsigned long long)u->n_bytes, (unsigned long long)u->n_copied,
             (unsigned long long)u->n_zero_copy, (unsigned long long)u->n_full,
             (unsigned long long)(u->ring[0].n_waits + u->ring[1].n_waits),
             (unsigned long long)(u->ring[0].n_empty + u->ring[1].n_empty));
    nxl_fregs_fini(&u->files);
    for (int i = 0; i < 2; i++) {
        hf_ring_t *r = &u->ring[i];
        if (r->made && !u->stuck)
            u->L->iordestroy(&r->ior);
        free(r->done);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
    }
    if (u->bounce_made && !u->stuck)
        u->L->iovdestroy(&u->bounce);
    nxlt_io_free(u->ev);
    nxlt_timer_free(u->refuse_t);
    if (u->efd >= 0)
        close(u->efd);
    free(u->io);
    free(u->free_io);
    nxl_fio_fini(&u->fio);
    free(u);
}

static const char *describe(void *state)
{
    return ((hf3fs_t *)state)->desc;
}

/* What create() takes: the engine refuses other keys, nxl_info -v lists
 * these (keep them with create()'s parsing) */
_Static_assert(HF_DEF_CHUNK == 1048576, "hf3fs_params says chunk=1048576");
static const nxl_param_info_t hf3fs_params[] = {
    {"mount", NULL, "the 3FS mount point; not given: the mount of the first file registered"},
    {"entries", PSTR(HF_DEF_ENTRIES), "entries of each usrbio ring (reads, writes), and I/Os in "
     "flight at most (1 to " PSTR(HF_MAX_ENTRIES) ")"},
    {"chunk", "1048576", "larger elements are split into I/Os of this many bytes; the bounce "
     "buffer is entries x chunk bytes"},
    {"wait", "100ms", "how long each hf3fs_wait_for_ios sleeps at most while I/O is outstanding "
     "(1ms to 10s)"},
    {"io_depth", "0", "the rings' io_depth (0: 3FS processes prepared I/O as it comes)"},
    {"numa", "-1", "NUMA node of the rings and buffers (-1: none)"},
};

_Static_assert(offsetof(hf3fs_t, fio) == 0,
               "the nxl_fio_* table functions take hf3fs_t as its nxl_fio_t");
_Static_assert(offsetof(hf3fs_t, files) == offsetof(nxl_fregs_head_t, files),
               "the nxl_fregs_* table functions take hf3fs_t as an nxl_fregs_head_t");

NXLT_MODULE_EXPORT const nxlt_ops_t nxlt_hf3fs_ops = {
    NXLT_OPS_HEAD("HF3FS", (1u << NXL_DRAM) | (1u << NXL_FILE),
                  NXLT_CAP_LOCAL | NXLT_CAP_CANCEL_WAITS, hf3fs_params),
    .probe = probe,
    .create = create,
    .destroy = destroy,
    .reg = reg,
    .dereg = dereg,
    .mem_alloc = mem_alloc,
    .mem_free = mem_free,
    NXL_FIO_OPS,
    NXL_FREGS_OPS,
    .describe = describe,
};
