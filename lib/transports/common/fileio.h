/* SPDX-License-Identifier: BSD-3-Clause */
/* The file-I/O core that the POSIX, GDS and HF3FS transports share: a transfer
 * cut into segments, their pending queue, the I/O engines that take
 * segments from it, and what the engines' results do to the transfer.
 *
 * The transport checks a transfer and hands it to nxl_fio_post(), which
 * makes one segment per element, or per chunk of a large element, and
 * queues them. An engine takes segments from that queue as it has room
 * (nxl_fio_seg_next), performs the I/O and hands each result back on the
 * reactor thread. nxl_fio_seg_result() reads a result the POSIX way (one
 * pread/pwrite: short ones and EINTR continue, 0 is the end of the file);
 * a transport with another library (GDS, cuFile) reads its own through
 * nxl_fio_ops_t.result and ends segments with nxl_fio_seg_done() or
 * nxl_fio_fail(). A transfer completes once none of its segments is in
 * flight; a failed or canceled one starts nothing more, so its buffers are
 * free when its callback runs.
 *
 * The transports' state begins with their nxl_fio_t, so that the parts of
 * the transport table that are the same for both (conn_info, load_conn,
 * notif_send, ...) are written once here, as nxl_fio_* functions that take
 * that state.
 *
 * Each transport compiles these files in (a module its own copy); the
 * names are not exported from libnxl. */
#ifndef NXL_FILEIO_H
#define NXL_FILEIO_H

#include "config.h"
#include <nxl/transport.h>

#include "filemeta.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <sys/types.h>

typedef struct nxl_fio nxl_fio_t;
typedef struct nxl_fio_xop nxl_fio_xop_t;

enum { NXL_FIO_S_IDLE, NXL_FIO_S_QUEUED, NXL_FIO_S_INFLIGHT, NXL_FIO_S_DONE };

/* One read or write of a contiguous range, continued until done. */
typedef struct nxl_fio_seg {
    nxl_fio_xop_t *xop;
    void *file;              /* the transport's file; the segment holds a reference */
    const char *fname;       /* its name, for sentences */
    void *lmd;               /* the local region's registration */
    char *buf;               /* next byte to move */
    uint64_t off;            /* its file offset */
    size_t left;             /* bytes still to move */
    size_t total;            /* bytes of the segment */
    size_t elem;             /* element index, for sentences */
    int state;
    bool direct;             /* the submission in flight uses the O_DIRECT fd */
    bool no_direct;          /* the O_DIRECT fd refused it once: stay buffered */
    int iofd;                /* fd of the submission in flight */
    size_t ion;              /* its length */
    ssize_t res;             /* thread pool: the worker's result */
    bool lib_err;            /* res is a negated status of the transport's library */
    TAILQ_ENTRY(nxl_fio_seg) link;
} nxl_fio_seg_t;
TAILQ_HEAD(nxl_fio_segq, nxl_fio_seg);

struct nxl_fio_xop {
    nxl_fio_t *f;
    nxlt_op_t *op;
    bool write;
    bool failed;             /* stop submitting; complete once nothing is in flight */
    nxl_status_t st;
    char why[400];
    size_t nseg, nleft;      /* segments, and those not done */
    LIST_ENTRY(nxl_fio_xop) link;
    nxl_fio_seg_t seg[];
};

/* An I/O engine. */
typedef struct nxl_fio_engine {
    const char *name;
    /* starts; on failure writes why into @p why */
    int (*start)(nxl_fio_t *f, char *why, size_t cap);
    /* moves pending segments to the kernel or the workers, as room allows */
    void (*pump)(nxl_fio_t *f);
    /* waits for every submission in flight to finish, then frees itself;
     * results still arrive (f->closing is set) */
    void (*stop)(nxl_fio_t *f);
} nxl_fio_engine_t;

/* What the transport tells the core. */
typedef struct nxl_fio_ops {
    const char *name;        /* "POSIX": the first word of its sentences */
    uint32_t conn_magic;     /* conn_info's blob (blob_wire.h) */
    uint32_t key_magic;      /* region keys' */
    nxl_mem_t ltype;         /* what the local list is (DRAM, VRAM) */
    unsigned rmask;          /* what the remote list may be: 1 << NXL_FILE, ... */
    const char *rtypes;      /* that in words: "FILE or BLK" */
    const char *rtypes_query; /* and for query: "FILE and BLK" */
    /* the file of element @p v into s->file (a reference taken), s->fname
     * and s->lmd */
    void (*seg_init)(void *owner, nxl_fio_seg_t *s, const nxlt_iov_t *v);
    /* drops a segment's reference to its file */
    void (*file_put)(void *owner, void *file);
    /* the fd and length of a segment's next submission into s->iofd and
     * s->ion (engines that call read/write); NULL for none */
    int (*seg_fd)(nxl_fio_t *f, nxl_fio_seg_t *s, size_t *len);
    /* thread pool, on a worker: performs the I/O of @p s, the result into
     * s->res; NULL: one pread or pwrite of s->iofd */
    void (*io)(nxl_fio_t *f, nxl_fio_seg_t *s);
    /* thread pool, on the reactor: what a worker did; NULL:
     * nxl_fio_seg_result(f, s, s->res) */
    void (*result)(nxl_fio_t *f, nxl_fio_seg_t *s);
} nxl_fio_ops_t;

struct nxl_fio {
    nxlt_ctx_t *ctx;
    uint64_t token;          /* identifies this instance in conn_info and keys */
    const nxl_fio_ops_t *ops;
    void *owner;             /* the transport's instance */
    const nxl_fio_engine_t *eng;
    void *eng_state;
    nxlt_timer_t *kick;      /* completes empty transfers on the next turn */
    bool closing;
    size_t chunk;            /* elements larger than this run as chunks of it */
    unsigned depth;          /* io_uring entries */
    bool coop;               /* io_uring: cooperative task work */
    unsigned nthreads;       /* thread pool: workers */
    unsigned tp_max;         /* thread pool: segments with the workers at most, 0 no limit */
    struct nxl_fio_segq pending; /* waiting for the engine */
    LIST_HEAD(, nxl_fio_xop) xops;
    uint64_t n_short, n_xfers; /* statistics */
    uint64_t n_submits;      /* system calls that handed I/O to the kernel or the workers */
    char desc[256];          /* the engine's description */
};

extern const nxl_fio_engine_t nxl_fio_engine_uring; /* .start fails when built without liburing */
extern const nxl_fio_engine_t nxl_fio_engine_threads;

/* sets up @p f (its token; the kick timer on the agent's loop); -1:
 * out of memory */
int nxl_fio_init(nxl_fio_t *f, nxlt_ctx_t *ctx, const nxl_fio_ops_t *ops, void *owner);
/* the checks of a transfer every file transport makes: not shutting down,
 * within the agent, the kinds of memory of both lists */
nxl_status_t nxl_fio_post_check(nxl_fio_t *f, const nxlt_xfer_t *t);
/* refuses element @p i, which reads from a write-only or writes to a
 * read-only range of @p fname: NXL_ERR_NOT_ALLOWED with the sentence */
nxl_status_t nxl_fio_refuse_access(nxl_fio_t *f, size_t i, bool write, const char *fname);
/* cuts a checked transfer into segments and starts it */
nxl_status_t nxl_fio_post(nxl_fio_t *f, nxlt_op_t *op, const nxlt_xfer_t *t);
/* stops the engine (waits for what it holds), then reports every transfer
 * CANCELED */
void nxl_fio_quiesce(nxl_fio_t *f);
/* frees what nxl_fio_init() made (after nxl_fio_quiesce) */
void nxl_fio_fini(nxl_fio_t *f);

/* core → engines */
/* a result of one read or write of @p s: bytes moved or -errno */
void nxl_fio_seg_result(nxl_fio_t *f, nxl_fio_seg_t *s, ssize_t res);
/* the next pending segment to start, or NULL (those of canceled transfers
 * are dropped, which may complete them) */
nxl_fio_seg_t *nxl_fio_seg_next(nxl_fio_t *f);
/* puts back a segment taken with nxl_fio_seg_next() that could not start */
void nxl_fio_seg_requeue(nxl_fio_t *f, nxl_fio_seg_t *s);
/* @p s is over; its transfer completes when it was the last */
void nxl_fio_seg_done(nxl_fio_t *f, nxl_fio_seg_t *s);
/* fails the transfer of @p s (the first sentence stays), starts nothing
 * more of it, and ends @p s */
void nxl_fio_fail(nxl_fio_t *f, nxl_fio_seg_t *s, nxl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* resets an engine's eventfd before its results are collected (a result
 * that arrives after this wakes the reactor again); @p whose names it */
void nxl_fio_efd_drain(nxl_fio_t *f, int efd, const char *whose);

/* ---- the transport table: @p state is the transport's, its nxl_fio_t first */
nxl_status_t nxl_fio_conn_info(void *state, void **buf, size_t *len);
/* our own token: the loopback view (conn = state); another agent's files
 * are not reachable from here: no connection, which the engine reads as
 * "this transport does not reach it" */
nxl_status_t nxl_fio_load_conn(void *state, const char *agent, const void *info, size_t len,
                               void **conn);
void nxl_fio_unload_conn(void *state, void *conn);
nxl_status_t nxl_fio_notif_send(void *state, nxlt_op_t *op, void *conn, const void *msg,
                                size_t len);
/* nxl_fio_quiesce() of the transport's nxl_fio_t: waits for what the engine
 * (the kernel, the workers) holds, whose buffers are the application's,
 * then reports every transfer CANCELED */
void nxl_fio_quiesce_op(void *state);
/* the entries of an nxlt_ops_t initializer these fill, the same in every
 * transport on this core */
#define NXL_FIO_OPS                                                                            \
    .conn_info = nxl_fio_conn_info, .load_conn = nxl_fio_load_conn,                            \
    .unload_conn = nxl_fio_unload_conn, .notif_send = nxl_fio_notif_send,                      \
    .quiesce = nxl_fio_quiesce_op
/* the key of registration @p regid */
nxl_status_t nxl_fio_pack_key(nxl_fio_t *f, uint64_t regid, void **buf, size_t *len);
/* a FILE or BLK range by the open fd in d->dev_id: checked (open, not
 * O_APPEND for writing) and duplicated (close-on-exec) into @p fd, its
 * O_ACCMODE into @p acc, "fd N" into @p fname; @p tn names the kind */
nxl_status_t nxl_fio_dup_fd(nxl_fio_t *f, const char *tn, const nxl_desc_t *d, int *fd, int *acc,
                            char *fname, size_t cap);
/* a query about a file (desc.meta's path, or the fd in dev_id), its kind
 * one of ops->rmask: res from stat(2), its stat in @p sb when it exists */
nxl_status_t nxl_fio_query(nxl_fio_t *f, nxl_mem_t type, const nxl_desc_t *d, nxl_query_t *res,
                           struct stat *sb, nxlt_filemeta_t *m);

#endif
