/* SPDX-License-Identifier: BSD-3-Clause */
/* The POSIX transport's private structures, shared by its core (posix.c)
 * and its transfer core with two I/O engines (../common/fileio.c,
 * fileio_uring.c, fileio_threads.c).
 *
 * The core turns a transfer into segments (one per element, or per chunk
 * of a large element) and keeps them in a pending queue; an engine takes
 * segments from that queue as it has room, performs one read or write per
 * segment and hands each result back with px_seg_result() on the reactor
 * thread. The core continues short transfers, retries, and completes the
 * transfer once none of its segments is in flight anymore. */
#ifndef NXL_POSIX_H
#define NXL_POSIX_H

#include "config.h"
#include <nxl/transport.h>

#include "../regtab.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#define PX_ALIGN 4096u               /* O_DIRECT alignment of buffers, offsets, lengths */
#define PX_MAX_IO (1u << 30)         /* one read/write at most (io_uring lengths are 32-bit) */
#define PX_DEF_CHUNK (1u << 20)      /* elements larger than this run as parallel chunks */
#define PX_DEF_DEPTH 256u            /* io_uring submission queue entries */
#define PX_DEF_THREADS 4u

struct event;
typedef struct px px_t;
typedef struct px_thp px_thp_t;

/* registered DRAM onto 2 MiB pages (thp.c; backend parameter thp_collapse) */
enum { PX_THP_OFF, PX_THP_AUTO, PX_THP_BACKGROUND, PX_THP_SYNC };
#define PX_THP_SYNC_MAX (64u << 20) /* auto: up to this much at registration, more in the background */
typedef struct px_xop px_xop_t;

/* A registered file or block device range, shared by its registration,
 * the keys loaded from it and the transfers that use it. */
typedef struct px_file {
    int refs;
    int fd;                  /* buffered I/O: our dup of the user's fd, or what we opened */
    int dfd;                 /* O_DIRECT, -1 when not asked for or not supported */
    bool can_read, can_write;
    nxl_mem_t type;
    uint64_t id;             /* the descriptor's dev_id */
    uint64_t off;            /* registered range */
    size_t len;
    nxlt_reg_t reg;          /* in the registry; reg.regid is what pack_key hands out */
    char name[160];          /* "'/path' (id 3)" or "fd 7", for sentences */
} px_file_t;

enum { PX_S_IDLE, PX_S_QUEUED, PX_S_INFLIGHT, PX_S_DONE };

/* One read or write of a contiguous range, continued until done. */
typedef struct px_seg {
    px_xop_t *xop;
    px_file_t *file;
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
    ssize_t res;             /* thread engine: result of the syscall */
    TAILQ_ENTRY(px_seg) link;
} px_seg_t;
TAILQ_HEAD(px_segq, px_seg);

struct px_xop {
    px_t *u;
    nxlt_op_t *op;
    bool write;
    bool failed;             /* stop submitting; complete once nothing is in flight */
    nxl_status_t st;
    char why[384];
    size_t nseg, nleft;      /* segments, and those not done */
    LIST_ENTRY(px_xop) link;
    px_seg_t seg[];
};

/* An I/O engine. */
typedef struct px_engine {
    const char *name;
    /* starts; on failure writes why into @p why */
    int (*start)(px_t *u, char *why, size_t cap);
    /* moves pending segments to the kernel or the workers, as room allows */
    void (*pump)(px_t *u);
    /* waits for every submission in flight to finish, then frees itself;
     * results still arrive through px_seg_result() (u->closing is set) */
    void (*stop)(px_t *u);
} px_engine_t;

struct px {
    nxlt_ctx_t *ctx;
    const px_engine_t *eng;
    void *eng_state;
    struct event *kick;      /* completes empty transfers on the next turn */
    bool closing;
    bool direct;             /* backend parameter direct=1 */
    bool coop;               /* io_uring: cooperative task work (coop_taskrun=1, default) */
    int thp;                 /* PX_THP_*: registered DRAM onto 2 MiB pages */
    px_thp_t *thp_state;     /* thp.c, made on first use */
    size_t chunk;
    unsigned depth;          /* io_uring entries */
    unsigned nthreads;
    uint64_t token;          /* identifies this instance in conn_info and keys */
    uint64_t next_regid;
    nxlt_regtab_t regs;      /* registry of FILE/BLK regions, by regid */
    struct px_segq pending;  /* waiting for the engine */
    LIST_HEAD(, px_xop) xops;
    uint64_t n_direct, n_buffered, n_short, n_xfers; /* statistics */
    uint64_t n_submits;      /* system calls that handed I/O to the kernel or the workers */
    char desc[256];
};

extern const px_engine_t px_engine_uring;   /* .start fails when built without liburing */
extern const px_engine_t px_engine_threads;

/* core → engines */
void px_seg_result(px_t *u, px_seg_t *s, ssize_t res);
/* the next pending segment to start, or NULL (those of canceled transfers
 * are dropped, which may complete them) */
px_seg_t *px_seg_next(px_t *u);
/* puts back a segment taken with px_seg_next() that could not start */
void px_seg_requeue(px_t *u, px_seg_t *s);
/* the fd a segment's next submission uses, and its length */
int px_seg_fd(px_t *u, px_seg_t *s, size_t *len);
/* resets an engine's eventfd before its results are collected (a result
 * that arrives after this wakes the reactor again); @p whose names it */
void px_efd_drain(px_t *u, int efd, const char *whose);
/* posix.c: drops a reference to a registered file range */
void px_file_put(px_file_t *f);
/* fileio.c: completes the transfers that have nothing in flight, then pumps */
void px_on_kick(int fd, short what, void *arg);


/* thp.c: the whole 2 MiB ranges of a DRAM registration onto huge pages, in
 * the background or before returning (u->thp); never fails */
void px_thp_add(px_t *u, uint64_t addr, size_t len);
/* ends the thread (waits for the 2 MiB range it is on), writes what was
 * done into @p stats and frees */
void px_thp_stop(px_t *u, char *stats, size_t cap);

#endif
