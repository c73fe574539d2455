/* SPDX-License-Identifier: BSD-3-Clause */
/* The FILE registrations of GDS and HF3FS (filereg.h). */
#include "filereg.h"
#include "blob_wire.h"
#include "filemeta.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int nxl_fregs_init(nxl_fregs_t *fs, nxl_fio_t *fio, const nxl_fregs_ops_t *ops)
{
    fs->fio = fio;
    fs->ops = ops;
    LIST_INIT(&fs->files);
    return nxlt_regtab_init(&fs->regs);
}

static nxl_fregs_t *fregs_of(void *state)
{
    return &((nxl_fregs_head_t *)state)->files;
}

static void file_put(nxl_fregs_t *fs, nxl_ffile_t *f)
{
    if (--f->refs > 0)
        return;
    LIST_REMOVE(f, link);
    fs->ops->lib_dereg(fs->fio->owner, f);
    close(f->fd);
    free(f);
}

/* the shared registration of the file behind @p fd (taken over, or closed) */
static nxl_status_t file_get(nxl_fregs_t *fs, int fd, int acc, const char *path,
                             const char *name, nxl_ffile_t **out)
{
    nxlt_ctx_t *ctx = fs->fio->ctx;
    const char *who = fs->fio->ops->name;
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        nxlt_error(ctx, "%s: %s is not a regular file; %s reads and writes files", who, name,
                   fs->ops->lib);
        close(fd);
        return NXL_ERR_INVALID_PARAM;
    }
    nxl_status_t st;
    if (fs->ops->check && (st = fs->ops->check(fs->fio->owner, fd, path, name)) != NXL_SUCCESS) {
        close(fd);
        return st;
    }
    int fl = fcntl(fd, F_GETFL);
    acc = fl >= 0 ? fl & fs->ops->accmask : acc;
    nxl_ffile_t *f;
    LIST_FOREACH(f, &fs->files, link)
    if (f->sdev == sb.st_dev && f->ino == sb.st_ino && f->acc == acc) {
        close(fd);
        f->refs++;
        *out = f;
        return NXL_SUCCESS;
    }
    if (!(f = calloc(1, fs->ops->file_size))) {
        close(fd);
        nxlt_error(ctx, "%s: out of memory", who);
        return NXL_ERR_UNKNOWN;
    }
    f->fd = fd;
    if ((st = fs->ops->lib_reg(fs->fio->owner, f, name)) != NXL_SUCCESS) {
        close(fd);
        free(f);
        return st;
    }
    f->sdev = sb.st_dev;
    f->ino = sb.st_ino;
    f->acc = acc;
    f->refs = 1;
    LIST_INSERT_HEAD(&fs->files, f, link);
    *out = f;
    return NXL_SUCCESS;
}

nxl_status_t nxl_fregs_reg_file(nxl_fregs_t *fs, const nxl_desc_t *d, nxl_frange_t *r)
{
    nxlt_ctx_t *ctx = fs->fio->ctx;
    const char *who = fs->fio->ops->name;
    int fd, acc;
    nxl_status_t st;
    nxlt_filemeta_t m;
    const char *path = NULL;
    if (d->meta_len) {
        /* "path=/x/y;mode=r|w|rw|create[,direct]" (filemeta.h) */
        if ((st = nxlt_filemeta_parse(ctx, who, d, &m)) != NXL_SUCCESS)
            return st;
        int flags = (m.create ? O_CREAT : 0) | (m.direct == 1 ? fs->ops->direct_flag : 0);
        fd = open(m.path, m.acc | flags | O_CLOEXEC, 0644);
        if (fd < 0) {
            int e = errno;
            nxlt_error(ctx, "%s: cannot open '%s' to register FILE range %llu+%zu: %s", who,
                       m.path, (unsigned long long)d->addr, d->len, strerror(e));
            return e == ENOENT ? NXL_ERR_NOT_FOUND : e == EACCES ? NXL_ERR_NOT_ALLOWED
                                                                 : NXL_ERR_BACKEND;
        }
        acc = m.acc;
        path = m.path;
        snprintf(r->name, sizeof(r->name), "'%.140s'", m.path);
    } else if ((st = nxl_fio_dup_fd(fs->fio, "FILE", d, &fd, &acc, r->name, sizeof(r->name))) !=
               NXL_SUCCESS) {
        return st;
    }
    if ((st = file_get(fs, fd, acc, path, r->name, &r->file)) != NXL_SUCCESS)
        return st;
    r->reg.regid = ++fs->next_regid;
    r->refs = 1;
    if (nxlt_regtab_add(&fs->regs, &r->reg) < 0) {
        file_put(fs, r->file);
        r->file = NULL;
        nxlt_error(ctx, "%s: out of memory", who);
        return NXL_ERR_UNKNOWN;
    }
    return NXL_SUCCESS;
}

static void range_put(nxl_fregs_t *fs, nxl_frange_t *r)
{
    if (--r->refs > 0)
        return;
    file_put(fs, r->file);
    free(r);
}

void nxl_fregs_dereg(nxl_fregs_t *fs, nxl_frange_t *r)
{
    nxlt_regtab_del(&fs->regs, &r->reg);
    range_put(fs, r);
}

nxl_status_t nxl_fregs_pack_key(void *state, void *md, void **buf, size_t *len)
{
    nxl_frange_t *r = md;
    *buf = NULL;
    *len = 0;
    if (r->span.type != NXL_FILE)
        return NXL_SUCCESS; /* the local side's memory: never a remote one */
    return nxl_fio_pack_key(fregs_of(state)->fio, r->reg.regid, buf, len);
}

nxl_status_t nxl_fregs_load_key(void *state, void *conn, const void *buf, size_t len,
                                void **rkey)
{
    nxl_fregs_t *fs = fregs_of(state);
    nxl_fio_t *fio = fs->fio;
    nxlt_blob24_t k;
    *rkey = NULL;
    if (conn != state || nxlt_blob24_parse(buf, len, fio->ops->key_magic, &k) != 0 ||
        k.token != fio->token) {
        nxlt_error(fio->ctx, "%s: a region key of %zu bytes that is not this transport's",
                   fio->ops->name, len);
        return NXL_ERR_MISMATCH;
    }
    nxlt_reg_t *e = nxlt_regtab_find(&fs->regs, k.regid);
    nxl_frange_t *r = e ? NXLT_REG_OF(e, nxl_frange_t, reg) : NULL;
    if (!r) {
        nxlt_error(fio->ctx, "%s: region key %llu names no registered file range",
                   fio->ops->name, (unsigned long long)k.regid);
        return NXL_ERR_NOT_FOUND;
    }
    r->refs++;
    *rkey = r;
    return NXL_SUCCESS;
}

void nxl_fregs_unload_key(void *state, void *rkey)
{
    if (rkey)
        range_put(fregs_of(state), rkey);
}

void nxl_fregs_seg_init(void *owner, nxl_fio_seg_t *s, const nxlt_iov_t *v)
{
    nxl_frange_t *fr = v->rkey;
    s->lmd = v->lmd;
    s->file = fr->file;
    fr->file->refs++;
    s->fname = fr->name;
}

void nxl_fregs_seg_file_put(void *owner, void *file)
{
    file_put(fregs_of(owner), file);
}

nxl_status_t nxl_fregs_post(void *state, nxlt_op_t *op, const nxlt_xfer_t *t)
{
    nxl_fio_t *fio = fregs_of(state)->fio;
    const char *who = fio->ops->name;
    nxl_status_t st = nxl_fio_post_check(fio, t);
    if (st != NXL_SUCCESS)
        return st;
    bool write = t->op == NXL_WRITE;
    for (size_t i = 0; i < t->n; i++) {
        const nxlt_iov_t *v = &t->iov[i];
        nxl_frange_t *fr = v->rkey;
        if (!fr || !v->lmd) {
            nxlt_error(fio->ctx, "%s: element %zu has no %s%s registered with %s", who, i,
                       fr ? nxl_mem_name(fio->ops->ltype) : "file range", fr ? " region" : "",
                       who);
            return NXL_ERR_NOT_SUPPORTED;
        }
        int acc = fr->file->acc & O_ACCMODE;
        if (write ? acc == O_RDONLY : acc == O_WRONLY)
            return nxl_fio_refuse_access(fio, i, write, fr->name);
    }
    return nxl_fio_post(fio, op, t);
}

nxl_status_t nxl_fregs_query(void *state, nxl_mem_t type, const nxl_desc_t *d, nxl_query_t *res)
{
    struct stat sb;
    nxlt_filemeta_t m;
    return nxl_fio_query(fregs_of(state)->fio, type, d, res, &sb, &m);
}

void nxl_fregs_fini(nxl_fregs_t *fs)
{
    if (fs->regs.v) {
        for (nxlt_reg_t *e; (e = nxlt_regtab_pop(&fs->regs));) {
            nxl_frange_t *r = NXLT_REG_OF(e, nxl_frange_t, reg);
            r->refs = 1;
            range_put(fs, r);
        }
        nxlt_regtab_fini(&fs->regs);
    }
    while (!LIST_EMPTY(&fs->files)) {
        nxl_ffile_t *f = LIST_FIRST(&fs->files);
        f->refs = 1;
        file_put(fs, f);
    }
}
