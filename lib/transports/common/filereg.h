/* SPDX-License-Identifier: BSD-3-Clause */
/* The FILE registrations of the file transports whose library registers
 * each open file once (GDS: cuFileHandleRegister, HF3FS: hf3fs_reg_fd):
 * the open files, shared by the ranges registered on them (one per file
 * opened the same way); the ranges by registration id, which pack_key
 * hands out and load_key takes back; the references the file-I/O core's
 * segments hold; the checks of a transfer; teardown.
 *
 * The transport's state begins with its nxl_fio_t and its nxl_fregs_t, in
 * the order of nxl_fregs_head_t, so that the entries of the transport table
 * that are the same for both are written once here (NXL_FREGS_OPS); its
 * records begin with nxl_ffile_t (a file) and nxl_frange_t (a
 * registration); its library's calls come through nxl_fregs_ops_t. The
 * sentences begin with the core's name (fio->ops->name).
 *
 * Compiled into each transport that uses it (a module its own copy); the
 * names are not exported from libnxl. */
#ifndef NXL_FILEREG_H
#define NXL_FILEREG_H

#include "config.h"
#include "fileio.h"
#include "regspan.h"
#include "regtab.h"

#include <nxl/transport.h>

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

/* one open file, registered with the library, shared by its ranges */
typedef struct nxl_ffile {
    int fd;
    dev_t sdev;
    ino_t ino;
    int acc;                 /* F_GETFL's flags, of nxl_fregs_ops_t.accmask */
    int refs;                /* ranges and segments */
    LIST_ENTRY(nxl_ffile) link;
} nxl_ffile_t;

/* a registration: the transport's memory, or a FILE range */
typedef struct nxl_frange {
    nxlt_regspan_t span;     /* first (nxlt_regspan_new); FILE: the offset */
    nxl_ffile_t *file;       /* FILE */
    char name[160];          /* FILE: "fd 5" or "'/x/y'" */
    nxlt_reg_t reg;          /* FILE: in the registry, by reg.regid (what pack_key hands out) */
    int refs;                /* FILE: the registration and the keys loaded */
} nxl_frange_t;

/* What the transport tells about its files. */
typedef struct nxl_fregs_ops {
    const char *lib;         /* "cuFile": "cuFile reads and writes files" */
    size_t file_size;        /* of the transport's file record, its nxl_ffile_t first */
    int accmask;             /* of F_GETFL's flags, those that tell two opens apart */
    int direct_flag;         /* O_DIRECT: a meta's ",direct" opens with it; 0: ignored */
    /* optional: checks @p fd (a regular file) before it is looked up;
     * @p path is the meta's, NULL for a registration by fd; errors said */
    nxl_status_t (*check)(void *owner, int fd, const char *path, const char *name);
    /* registers a new file with the library; errors said */
    nxl_status_t (*lib_reg)(void *owner, nxl_ffile_t *f, const char *name);
    /* and deregisters it */
    void (*lib_dereg)(void *owner, nxl_ffile_t *f);
} nxl_fregs_ops_t;

typedef struct nxl_fregs {
    nxl_fio_t *fio;          /* its ctx, name, token, key magic; owner: the transport's instance */
    const nxl_fregs_ops_t *ops;
    nxlt_regtab_t regs;      /* FILE registrations, by regid */
    uint64_t next_regid;
    LIST_HEAD(, nxl_ffile) files;
} nxl_fregs_t;

/* what the state of a transport on these registrations begins with */
typedef struct nxl_fregs_head {
    nxl_fio_t fio;
    nxl_fregs_t files;
} nxl_fregs_head_t;

/* sets up @p fs for the transport of @p fio; -1: out of memory */
int nxl_fregs_init(nxl_fregs_t *fs, nxl_fio_t *fio, const nxl_fregs_ops_t *ops);
/* deregisters what is left (keys are unloaded and regions deregistered
 * before transports are destroyed: it has no user), closes every file */
void nxl_fregs_fini(nxl_fregs_t *fs);

/* registers the FILE range @p d into @p r (by the fd in d->dev_id, or by
 * "path=...;mode=..." in its meta): its file shared, a registration id */
nxl_status_t nxl_fregs_reg_file(nxl_fregs_t *fs, const nxl_desc_t *d, nxl_frange_t *r);
/* dereg() of FILE range @p r */
void nxl_fregs_dereg(nxl_fregs_t *fs, nxl_frange_t *r);

/* nxl_fio_ops_t.seg_init: the file of the element's range, a reference taken */
void nxl_fregs_seg_init(void *owner, nxl_fio_seg_t *s, const nxlt_iov_t *v);
/* nxl_fio_ops_t.file_put: drops a segment's reference (@p owner: the state) */
void nxl_fregs_seg_file_put(void *owner, void *file);

/* ---- the transport table: @p state is the transport's, an nxl_fregs_head_t first */
/* the key of registration @p md: FILE ranges only, other memory is only
 * ever the local side */
nxl_status_t nxl_fregs_pack_key(void *state, void *md, void **buf, size_t *len);
/* a key of this instance's (the loopback view, conn = state): its range, a
 * reference taken */
nxl_status_t nxl_fregs_load_key(void *state, void *conn, const void *buf, size_t len,
                                void **rkey);
void nxl_fregs_unload_key(void *state, void *rkey);
/* the core's checks, every element a range of ours on both sides and a
 * file open for it, then nxl_fio_post() */
nxl_status_t nxl_fregs_post(void *state, nxlt_op_t *op, const nxlt_xfer_t *t);
/* nxl_fio_query() of a FILE */
nxl_status_t nxl_fregs_query(void *state, nxl_mem_t type, const nxl_desc_t *d, nxl_query_t *res);
/* the entries of an nxlt_ops_t initializer these fill */
#define NXL_FREGS_OPS                                                                          \
    .pack_key = nxl_fregs_pack_key, .load_key = nxl_fregs_load_key,                            \
    .unload_key = nxl_fregs_unload_key, .post = nxl_fregs_post, .query = nxl_fregs_query

#endif
