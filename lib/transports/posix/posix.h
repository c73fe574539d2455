/* SPDX-License-Identifier: BSD-3-Clause */
/* The POSIX transport's private structures, shared by the files of posix/.
 *
 * Transfers run on the file-I/O core (../common/fileio.h) with its io_uring
 * or thread-pool engine: the core turns a transfer into segments, an
 * engine performs one read or write per segment, and the core continues
 * short transfers, retries, and completes the transfer once none of its
 * segments is in flight anymore. */
#ifndef NXL_POSIX_H
#define NXL_POSIX_H

#include "config.h"
#include <nxl/transport.h>

#include "../common/fileio.h"
#include "../common/regtab.h"
#include "../common/thp.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#define PX_ALIGN 4096u               /* O_DIRECT alignment of buffers, offsets, lengths */
#define PX_MAX_IO (1u << 30)         /* one read/write at most (io_uring lengths are 32-bit) */
#define PX_DEF_CHUNK (1u << 20)      /* elements larger than this run as parallel chunks */
#define PX_DEF_DEPTH 256u            /* io_uring submission queue entries */
#define PX_DEF_THREADS 4u

typedef struct px px_t;

/* registered DRAM onto 2 MiB pages (../common/thp.c; backend parameter thp_collapse) */
#define PX_THP_SYNC_MAX (64u << 20) /* auto: up to this much at registration, more in the background */

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

struct px {
    nxl_fio_t fio;           /* first (the nxl_fio_* table functions take px_t as it);
                              * transfers: chunk, depth (io_uring entries), coop
                              * (coop_taskrun=1, default), nthreads; token */
    nxlt_ctx_t *ctx;
    bool direct;             /* backend parameter direct=1 */
    int thp;                 /* NXLT_THP_*: registered DRAM onto 2 MiB pages */
    nxlt_thp_t *thp_state;   /* ../common/thp.c, made on first use */
    struct px_dram *drams;   /* DRAM regions with 2 MiB ranges left to the background */
    uint64_t next_regid;
    nxlt_regtab_t regs;      /* registry of FILE/BLK regions, by regid */
    uint64_t n_direct, n_buffered; /* statistics */
};

#endif
